"""Readings of what users say in words, where no error line says what failed: an issue's title, a complaint, the
settings they list. Each reading is a class of evidence a careful engineer would act on (a picture that turns black only past some
size; ...), said in English or Chinese. A reading stands back where an error line of another kind says what failed."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text, _vendor
from steadytune.doctor.rules.runtime.gtx16_half import _GTX16
from steadytune.doctor.rules.runtime.precision import image_nans, nan_whatever_the_format


# ---------------------------------------------------------------------------------------------------------
# A picture that comes out black only at some sizes: the attention kernel, not the number format
# ---------------------------------------------------------------------------------------------------------

_BLACK = (r"(?i)\b(?:all[- ])?black (?:images?|pictures?|outputs?|frames?|squares?|results?)\b|\bblank (?:images?|"
          r"pictures?)\b|\b(?:images?|pictures?|outputs?) (?:is |are |comes? out |turns? |goes |went )?(?:all |"
          r"completely |fully )?black\b|\bturns? (?:the )?(?:images?|pictures?|outputs?) (?:all |completely )?black\b|"
          r"纯黑|全黑|黑图|"
          r"黑色(?:图|画面)")
# the size is what decides: two resolutions set against each other, or words that say "past some size"
_RESOLUTION = re.compile(r"\b(\d{3,4}) ?[x×*] ?(\d{3,4})\b")
# ("some images" is a few pictures, not a size: some / certain only before resolutions and sizes)
_SIZE_WORDS = re.compile(r"(?i)\b(?:some|certain) (?:resolutions?|sizes?)\b|"
                         r"\b(?:higher|larger|large|high|bigger|big) (?:resolutions?|sizes?|images?)\b|"
                         r"\b(?:above|over|beyond|past) \d{3,4}(?:px| ?pixels)?\b|\bhi-?res\b|\bupscal\w*|"
                         r"高分辨率|大分辨率|大尺寸|放大")
# what the number-format reading settles: a NaN check, the VAE or fp16 named
_FORMAT_SAID = re.compile(r"(?i)NaNs? (?:was|were) produced|NansException|\bVAE\b|\bfp16\b|\bhalf\b|float16|--no-half")


# the side of a picture every model is made for (SD 1.5: 512, SDXL: 1024): black there is not "past some size"
_ORDINARY_SIDE = 1024
_VRAM_SAID = re.compile(r"(?i)\b(\d(?:\.\d)?) ?GB (?:of )?(?:VRAM|video memory|显存)|\b(?:VRAM|显存)\W{0,3}(\d(?:\.\d)?) ?G")


def _small_gpu(text: str) -> bool:
    """A GPU of 4 GB or less said in the text: a low-end or old card, where fp16 is what fails first."""
    return any(float(a or b) <= 4 for a, b in _VRAM_SAID.findall(text))


@rule("attention")
def black_past_a_size(ctx: Context) -> Optional[Diagnosis]:
    """Pictures that come out black at large resolutions while smaller ones are fine: the tokens the attention kernel
    works on grow with the picture's area, and the memory-efficient kernels (xformers, which ComfyUI and the web UIs
    use when it is installed) have had releases that return garbage past a size instead of failing. A black picture at
    every size is the VAE's fp16 overflow, precision's reading; the size said is what settles it over that one."""
    black = _lines_matching(ctx, _BLACK)
    said = {b.line_no for b in black}
    # an error line of its own says what failed; the black-picture sentence itself (which the number-format reading
    # also reads) is not such a line
    if any(e.family is not None and not (e.family == "precision" and e.line_no in said) for e in ctx.errors):
        return None
    text = _text(ctx)
    if not black or _FORMAT_SAID.search(text):
        return None
    sizes = [max(int(a), int(b)) for a, b in _RESOLUTION.findall(text)]
    sized = len(set(_RESOLUTION.findall(text))) >= 2 or _SIZE_WORDS.search(text)
    if not sized or (sizes and max(sizes) <= _ORDINARY_SIDE) or _small_gpu(text) or _GTX16.search(text):
        # black already at an ordinary size, or on a small GPU or a GTX 16xx: fp16 on a card that computes it badly,
        # precision's
        return None
    amd = _vendor(ctx) == "amd"
    other = ("--use-split-cross-attention (or --use-quad-cross-attention) in ComfyUI, --opt-sub-quad-attention in the "
             "web UI" if amd else
             "run without it: ComfyUI --use-pytorch-cross-attention, the web UI without --xformers (--opt-sdp-attention)")
    return _first(_make(
        "attention", "black pictures past some size: the attention kernel",
        "the picture turns black only at large resolutions, where the attention runs over many more tokens; the "
        "memory-efficient attention kernel in use (xformers where it is installed) returns NaN or garbage past a size "
        "instead of failing",
        "change the attention kernel, not the number format: pip install xformers at the release before the one "
        "installed (the one built for this torch: pip install \"xformers==<previous>\"), or " + other +
        "; if the pictures are black at every size it is the VAE in fp16 (--fp32-vae / --no-half-vae)",
        [], black[:1]))


# ---------------------------------------------------------------------------------------------------------
# A training loss or gradient norm that turns NaN, said in words (no error line): the number format's range, the
# learning rate where the model already runs in fp32, the attention kernel where bf16 has been tried
# ---------------------------------------------------------------------------------------------------------

# grad_norm=nan, 'loss': nan, loss 就开始为nan, "nan loss", 梯度爆炸 (exploding gradients), 数值溢出 (overflow)
# (ASCII edges, not \b: a Chinese character next to "loss" or "nan" is a word character to re)
_NAN_SAID = re.compile(r"(?i)(?<![a-z0-9_])(?:grad_norm|grad norm|loss)(?![a-z0-9_])[^\n]{0,16}?(?<![a-z])nan(?![a-z])|"
                       r"\bnan (?:loss|grad\w*)\b|"
                       r"梯度爆炸|数值溢出|exploding gradients?|gradients? explod\w*")
_FP32_SAID = re.compile(r"(?i)torch_dtype\s*=\s*torch\.float32|\bfp32\b|\bfloat32\b")
_HALF_SAID = re.compile(r"(?i)\bfp16\b|float16|\bhalf\b|\bbf16\b|bfloat16|mixed.precision|\bamp\b")
# NVIDIA before Ampere and AMD before RDNA3 / CDNA2: no bf16 arithmetic
_NO_BF16_NAMES = re.compile(r"(?i)(?<![a-z0-9])(?:V100|P100|P40|T4|GTX ?1[06]\d\d|RTX ?20\d\d|Titan V|MI50|MI60|"
                            r"Radeon VII|RX ?[56]\d\d\d)(?![a-z0-9])")


def _dtype_flag(text: str, fmt: str) -> str:
    """How the tool in the paste is told the format."""
    if re.search(r"(?i)\bswift\b", text):
        return f"ms-swift: --torch_dtype {'bfloat16' if fmt == 'bf16' else 'float32'}"
    if re.search(r"(?i)llama.?factory|llamafactory", text):
        return "LLaMA-Factory: bf16: true, fp16: false" if fmt == "bf16" else "LLaMA-Factory: pure_bf16 off, fp16 off"
    return ("bf16=True, fp16=False in TrainingArguments (--bf16), torch_dtype=torch.bfloat16 when loading"
            if fmt == "bf16" else "torch_dtype=torch.float32 when loading, no fp16/bf16 flag")


@rule("precision")
def nan_in_words(ctx: Context) -> Optional[Diagnosis]:
    """The loss or grad_norm turning NaN, in a user's words, where no error line says what failed. A careful engineer
    asks what format the model runs in: fp16's range (largest value 65504) overflows in models trained in bf16 (GLM-4,
    Qwen2, LLaMA-3), and clipping (max_grad_norm) cannot help, the inf is made in the forward pass; a model already in
    fp32 has no such limit, so the learning rate is what diverges; bf16 and fp16 both tried on a GPU with bf16 leaves
    the fused attention kernel."""
    if any(e.family is not None for e in ctx.errors):
        return None   # an error line of its own: the rules of its family read it
    said = _lines_matching(ctx, _NAN_SAID.pattern)
    if not said:
        return None
    text = _text(ctx)
    attention = nan_whatever_the_format(ctx, said)
    if attention is not None:
        return attention
    if _FP32_SAID.search(text) and not _HALF_SAID.search(text):
        return _make("precision", "the loss diverges in fp32: the learning rate",
                     "the model runs in fp32, whose range does not overflow; a loss that climbs and then turns NaN "
                     "after some steps is the update diverging",
                     "lower the learning rate (by 5-10x; LoRA: 1e-4 or below, full fine-tune: 1e-5 or below), with "
                     "warmup (warmup_ratio 0.03-0.1) and gradient clipping (max_grad_norm 1.0); then check the data "
                     "for empty labels", [], said[:1], confirmed=False)
    old = _NO_BF16_NAMES.search(text)
    if old:
        fix = (f"the {old.group(0)} has no bf16: load and train in fp32 ({_dtype_flag(text, 'fp32')}), or keep fp16 "
               "with dynamic loss scaling and the trainable (LoRA) parameters in fp32; bf16 (the format these models "
               "are trained in) needs Ampere / RDNA3 / CDNA2 or newer")
    else:
        fix = (f"train in bf16 instead of fp16 ({_dtype_flag(text, 'bf16')}): bf16 has fp32's range, so the values "
               "that overflow fp16 do not; gradient clipping (max_grad_norm) cannot stop it, the inf comes from the "
               "forward pass; on a GPU without bf16, fp32")
    return _make("precision", "NaN in training: fp16 overflows",
                 "the loss / grad_norm turns NaN: in fp16 (largest value 65504) the activations of models trained in "
                 "bf16 (GLM-4, Qwen2, LLaMA-3) overflow to inf, and everything after turns NaN", fix, [], said[:1],
                 confirmed=False)


# ---------------------------------------------------------------------------------------------------------
# vLLM's bf16 refusal, quoted as its advice line or told in words: the GPU has no bf16, float16 is vLLM's own remedy
# ---------------------------------------------------------------------------------------------------------

_HALF_ADVICE = re.compile(r"(?i)use float16 instead by explicitly setting the\W{0,3}dtype|--dtype[= ]half\b")
_VLLM = re.compile(r"(?i)\bvllm\b")
_BF16_WORD = re.compile(r"(?i)(?<![a-z0-9])(?:bf16|bfloat16)(?![a-z0-9])")


@rule("precision")
def bf16_refused_by_vllm(ctx: Context) -> Optional[Diagnosis]:
    """vLLM loads a model in the dtype of its config (bfloat16 for Qwen2, LLaMA-3, GLM-4) and refuses it on a GPU
    older than compute capability 8.0, advising --dtype=half. A paste that quotes only that advice, or says vLLM, a
    pre-Ampere card and bf16 in words, is that refusal."""
    if any(e.family is not None and e.family != "precision" for e in ctx.errors):
        return None
    text = _text(ctx)
    advice = _lines_matching(ctx, _HALF_ADVICE.pattern)
    old = _NO_BF16_NAMES.search(text)
    if not advice and not (old and _VLLM.search(text) and _BF16_WORD.search(text)):
        return None
    on = f"the {old.group(0)}" if old else "this GPU"
    lf = (" (LLaMA-Factory's api / chat with infer_backend: vllm: infer_dtype: float16 in the YAML)"
          if re.search(r"(?i)llama.?factory|llamafactory", text) else "")
    lines = advice or _lines_matching(ctx, _VLLM.pattern)
    return _make("precision", "vLLM refuses bf16 on a GPU without it",
                 f"the model's config asks for bfloat16 and vLLM loads it so; {on} has no bf16 (it needs compute "
                 "capability 8.0, Ampere, or newer), so vLLM refuses to start",
                 f"run vLLM in float16: --dtype half (= float16; LLM(model=..., dtype=\"float16\")){lf}, or "
                 "--dtype float32 where float16 overflows", [], lines[:1], confirmed=bool(advice))


@rule("precision")
def black_at_every_size(ctx: Context) -> Optional[Diagnosis]:
    """Pictures that come out black with no error and no size said (or only ordinary sizes): the VAE (or the UNet)
    decoding in fp16 overflowed to NaN, the commonest cause; an upgrade of diffusers or the UI that drops the VAE's
    fp32 upcast (SDXL's VAE needs it) does it. A size past which it happens is the attention's reading above."""
    if any(e.family is not None and e.family != "precision" for e in ctx.errors) or ctx.of("precision"):
        return None   # the number-format rule reads a line of its own
    black = _lines_matching(ctx, _BLACK)
    if not black or black_past_a_size(ctx) is not None:
        return None
    diagnosis = image_nans(ctx, black, vae=True)   # no NaN check names the UNet: the VAE, the common case
    diagnosis.confirmed = False
    return diagnosis


# ---------------------------------------------------------------------------------------------------------
# bf16 switched off in the arguments and on all the same: accelerate's own mixed-precision setting wins
# ---------------------------------------------------------------------------------------------------------

_BF16_OFF_IGNORED = re.compile(r"(?i)\bignor\w*\s+(?:the\s+|my\s+)?[`'\"]?bf16\s*=\s*False|"
                               r"bf16\s*=\s*False[`'\"]?.{0,40}\b(?:ignored|not (?:respected|honou?red|applied)|has no "
                               r"effect|still)\b|\bstill (?:uses?|using|runs? in|enables?|turns on) bf16\b|"
                               r"bf16\s*=\s*False.{0,20}(?:不生效|无效|没用)")


@rule("precision")
def bf16_off_ignored(ctx: Context) -> Optional[Diagnosis]:
    """The user turned bf16 off (bf16=False) and the run still uses it: Trainer's mixed precision is applied by
    accelerate, which reads ACCELERATE_MIXED_PRECISION (set by `accelerate config`, a launcher, a notebook's setup
    cell or a library that exports it) and lets it win over the arguments; on a GPU without bf16 (T4, V100) that
    fails. Set the variable before anything imports accelerate."""
    said = _lines_matching(ctx, _BF16_OFF_IGNORED.pattern)
    if not said:
        return None
    return _make("precision", "bf16=False is overridden by accelerate's mixed-precision setting",
                 "the trainer hands mixed precision to accelerate, which takes ACCELERATE_MIXED_PRECISION (from the "
                 "environment, `accelerate config`'s default_config.yaml, or a library that sets it) over "
                 "bf16=False, so bf16 is turned on where the GPU has none",
                 "at the top of the script, before importing transformers / trl / unsloth: "
                 "os.environ[\"ACCELERATE_MIXED_PRECISION\"] = \"no\" (or \"fp16\"), and pass fp16=True, bf16=False "
                 "in the SFTConfig / TrainingArguments; check `accelerate env` for a saved mixed_precision: bf16 and "
                 "update unsloth / trl / accelerate", [], said[:1], confirmed=False)
