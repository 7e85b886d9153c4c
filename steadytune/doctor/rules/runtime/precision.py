"""Number formats: NaN losses and fp16 overflow, zero losses, a format the GPU or its build does not have,
images that come out black (NaNs in the VAE)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import (_catalogue, Context, Diagnosis, _cuda_index_for_driver, _lines_matching,
                                          _make, _restate, rule)
from steadytune.doctor.rules.runtime.demo_dtype_flags import demo_dtype_flag
from steadytune.doctor.rules.runtime.shared import _GTX16, _text_of, _training, _WHISPER


# NaN losses and fp16 overflow: the values leave fp16's range (max 65504), not a missing instruction
_NAN = re.compile(r"(?i)\bnan\b|\binf\b|overflow|loss scale")
# GPUs without bf16 arithmetic torch uses: NVIDIA before Ampere, AMD's GCN/RDNA1/RDNA2 (gfx90a, CDNA3, RDNA3+ have it)
_NO_BF16 = re.compile(r"sm_[3-7]\d|gfx[6-8]\w*|gfx90[0-6c]|gfx10\d\d")


def _overflow(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A loss that turns NaN, a gradient overflow, a loss scale driven to its floor: fp16 runs out of range. Where
    the GPU computes bf16 (fp32's range) that is the fix; where it does not, fp16 with dynamic loss scaling, or fp32."""
    nan = [e for e in errors if _NAN.search(e.line)]
    said = " ".join(e.line for e in nan)
    if not nan or (re.search(r"(?i)bf16|bfloat16", said) and not re.search(r"(?i)fp16|float16|half", said)):
        return None   # NaN under bf16 is not fp16's range: the bf16 readings below decide
    arch, fact = ctx.arch(nan)
    names = " ".join(f.value for f in ctx.sheet.of("gpu")) + " " + _text_of(ctx)
    old_gpu = (arch and _NO_BF16.fullmatch(arch)) or re.search(r"(?i)\b(?:V100|P100|P40|T4|GTX ?10\d\d|RTX ?20\d\d|"
                                                              r"Titan V|MI50|MI60|Radeon VII|RX ?[56]\d\d\d)\b", names)
    scaling = ("dynamic loss scaling (torch.amp.GradScaler with fp16; DeepSpeed \"fp16\": {\"loss_scale\": 0}), a "
               "lower learning rate and gradient clipping (max_grad_norm 1.0)")
    if old_gpu:
        fix = (f"this GPU{' (' + arch + ')' if arch else ''} has no bf16: keep fp16 with {scaling}, or train in fp32 "
               "(no fp16/bf16 flag); bf16 (bf16: true) needs Ampere / RDNA3 / CDNA2 or newer")
    else:
        fix = (f"train in bf16 (bfloat16) instead of fp16 (bf16: true / --bf16 / bf16=True; fp16 off): it has fp32's "
               f"range, so the values that overflow fp16 do not (models pretrained in bfloat16, such as T5, overflow "
               f"fp16 AMP); if the GPU has no bf16, keep fp16 with {scaling}, or fp32")
    # a NaN loss alone may have other causes (a learning rate, bad data); fp16 named, or its overflow, settles it
    settled = re.search(r"(?i)\bfp16\b|float16|\bhalf\b|\bamp\b|autocast|mixed precision|overflow|loss scale",
                        _text_of(ctx))
    return _make("precision", "the loss overflows fp16", "in fp16 (largest value 65504) activations or gradients "
                 "overflow to inf, and the loss and the weights turn NaN; a loss scale that keeps falling says the "
                 "same", fix, [f for f in (ctx.line_fact(nan[0]), fact) if f], nan, confirmed=bool(settled))


# both formats tried ("bf16 false fp16 true", "tried fp16 and bf16"), on a GPU that computes bf16 (Ampere and newer,
# RDNA3, CDNA2 and newer): the format is not what overflows
_BOTH_TRIED = re.compile(r"(?i)\bbf16\b[^\n]{0,40}\bfp16\b|\bfp16\b[^\n]{0,40}\bbf16\b")
# (Ada's L4 and Ampere's A30 / A40 / RTX A-series data-center and workstation cards too: compute capability 8.0+)
_BF16_GPU = re.compile(r"(?i)(?<![a-z0-9])(?:A100|A800|H100|H800|H200|L40S?|L4|A30|A40|RTX ?A[2-6]000|A6000|A10G?|"
                       r"RTX ?[34]0\d0|RTX ?50\d0|MI2[15]0X?|MI3\d\dX?|RX ?[79]\d\d\d)(?![a-z0-9])")


# RDNA3 / RDNA3.5 (Radeon RX 7000, Strix Point / Halo APUs): ROCm's fused attention for them (SDPA's AOTriton
# kernels, flash-attention's Triton path) is the young part of the stack
_RDNA3_ARCH = re.compile(r"gfx11[05]\d")


def _rdna3_nan(ctx: Context, nan: list[ErrorLine], text: str) -> Optional[Diagnosis]:
    """NaN losses on an RDNA3 / RDNA3.5 GPU in a run that does not say fp16 (bf16, which these GPUs compute): not
    fp16's range but the fused attention path chosen by default; the eager attention gives finite losses (AMD
    playbooks #611: Unsloth on gfx1151, where turning its compiler off did not help)."""
    arch = next((a for a in ctx.sheet.machine_archs if _RDNA3_ARCH.fullmatch(a)), None)
    if not (nan and arch) or re.search(r"(?i)\bfp16\b|float16|\bhalf\b|\bamp\b|autocast|GradScaler|mixed.precision",
                                        text):
        return None
    return _make("attention", f"NaN losses on {arch}: the fused attention path",
                 f"the loss turns NaN on {arch} (RDNA3 / RDNA3.5, which computes bf16) in a run not in fp16: the "
                 "fused attention kernels picked by default (SDPA / flash-attention on ROCm) give NaN there, not the "
                 "number format",
                 "load the model with attn_implementation=\"eager\" (LLaMA-Factory: flash_attn: disabled; Unsloth "
                 "and transformers: attn_implementation=\"eager\" in from_pretrained) and keep bf16; if the NaN "
                 "stays, lower the learning rate", [ctx.line_fact(nan[0])], nan, confirmed=False)


def nan_whatever_the_format(ctx: Context, nan: list[ErrorLine]) -> Optional[Diagnosis]:
    """NaN losses / gradients that stay after the user tried both bf16 and fp16, on a GPU that computes bf16: not the
    format's range but the fused attention kernel chosen automatically (flash / SDPA), which LLaMA-Factory and
    transformers let one turn off."""
    text = _text_of(ctx)
    rdna3 = _rdna3_nan(ctx, nan, text)
    if rdna3 is not None:
        return rdna3
    gpu = _BF16_GPU.search(text)
    if not (nan and gpu and _BOTH_TRIED.search(text)):
        return None
    return _make("attention", "NaN gradients in bf16 and fp16 alike: the attention kernel",
                 f"the loss / grad_norm turns NaN whatever the format, on a GPU that computes bf16 ({gpu.group(0)}): "
                 "the fused attention kernel chosen automatically (flash-attention / SDPA) gives the NaN",
                 "turn the fused attention off and keep bf16: LLaMA-Factory: flash_attn: disabled (or eager); "
                 "transformers: attn_implementation=\"eager\" when loading", [ctx.line_fact(nan[0])], nan,
                 confirmed=False)


_LATENT_NANS = re.compile(r"(?i)\bNaNs? (?:detected|found) in latents\b|\blatents?\b.{0,20}\b(?:contain|contains|have|has) "
                          r"NaNs?\b")
_REFUSES_FP16 = re.compile(r"(?i)please use bf16 or fp32|(?:不支持|does ?n.t support|not support(?:ed)?)\s*(?:for\s+)?fp16\b|"
                           r"\bfp16\b\W{0,3}(?:is )?not (?:supported|allowed)")
_OLD_GPU_NAMES = re.compile(r"(?i)\b(?:V100|P100|P40|P4|T4|K80|GTX ?10\d\d|GTX ?16\d\d|RTX ?20\d\d|Titan V|MI50|MI60|"
                            r"Radeon VII|RX ?[56]\d\d\d)\b")


def _fp16_refused(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A tool that refuses fp16 for this job (ms-swift's full fine-tuning: 'please use bf16 or fp32', fp16's range
    makes a full fine-tune diverge) on a GPU without bf16 (V100, T4, P40; RDNA2 and older): of the formats it allows
    only fp32 is left; LoRA keeps the frozen weights in half precision if fp32 does not fit."""
    refused = [e for e in errors if _REFUSES_FP16.search(e.line)]
    if not refused:
        return None
    arch, fact = ctx.arch(refused)
    names = " ".join(f.value for f in ctx.sheet.of("gpu")) + " " + _text_of(ctx)
    gpu = _OLD_GPU_NAMES.search(names)
    if not ((arch and _NO_BF16.fullmatch(arch)) or gpu):
        return None   # a GPU with bf16: the bf16 readings below say to use it
    said = gpu.group(0) if gpu else arch
    swift = re.search(r"(?i)\bswift\b|sft_type", _text_of(ctx))
    flag = "--dtype fp32" if swift else "fp32 (no fp16 / bf16 flag; torch_dtype=torch.float32)"
    return _make("precision", f"fp16 is refused and the {said} has no bf16",
                 f"the tool refuses fp16 for this job (a full fine-tune in fp16 overflows and the loss diverges), and "
                 f"the {said} cannot compute bf16, so fp32 is the format left",
                 f"train in fp32: {flag}; if fp32 does not fit, fine-tune with LoRA (the frozen weights may stay fp16)",
                 [f for f in (ctx.line_fact(refused[0]), fact) if f], refused)


def image_nans(ctx: Context, nans: list[ErrorLine], vae: Optional[bool] = None) -> Diagnosis:
    """The Stable Diffusion web UI's (and SD.Next's) NaN check: the VAE or the UNet computed in fp16 overflowed. The
    VAE's remedy is keeping it in fp32; the UNet's is upcasting its attention (or the whole model) to fp32."""
    # a black picture is the VAE's NaN in the common case (the web UI's check names which part)
    if vae is None:   # (a caller that read a black picture in words passes True)
        vae = any(re.search(r"(?i)\bVAE\b|black (?:image|picture|output|square)", e.line) for e in nans)
    comfy = ctx.tool(nans) == "comfyui"
    if vae:
        fix = ("--fp32-vae (or --bf16-vae on a GPU with bf16) when starting ComfyUI; where the pictures stay black "
               "(an older or low-memory GPU whose fp16 overflows in the UNet too), --force-fp32" if comfy else
               "add --no-half-vae to COMMANDLINE_ARGS (webui-user.sh / .bat; SD.Next: the same), so the VAE runs in "
               "fp32 (upcast; SD.Next's own VAE upcast setting does it where it is offered), or use a VAE fixed for fp16 (sdxl-vae-fp16-fix)")
    else:
        fix = ("--force-upcast-attention (or --fp32-unet) when starting ComfyUI" if comfy else
               "turn on Settings > Stable Diffusion > \"Upcast cross attention layer to float32\" or start with "
               "--upcast-sampling; if it still fails, --no-half (the whole model in fp32, slower)")
    part = "VAE" if vae else "UNet"
    return _make("precision", f"the {part} overflows fp16", f"the {part} runs in fp16, and its values leave fp16's "
                 "range, so the picture turns to NaN (a black image)", fix, [ctx.line_fact(nans[0])], nans)


def _sft_config(ctx: Context) -> str:
    """trl's SFTTrainer takes its settings from SFTConfig: TrainingArguments passed there can come back with bf16."""
    if not re.search(r"\bSFTTrainer\b|\bSFTConfig\b", _text_of(ctx)):
        return ""
    return ("; with trl's SFTTrainer pass them in SFTConfig(fp16=True, bf16=False) instead of TrainingArguments "
            "(unsloth: fp16=not is_bfloat16_supported(), bf16=is_bfloat16_supported(); update unsloth and "
            "unsloth_zoo)")


_ZERO_LOSS = re.compile(r"(?i)\bloss\b.{0,24}?(?<![\d.])0(?:\.0+)?(?![.\d])|loss\s*(?:全|都|全部|全都|一直)?\s*(?:为|是|变成|变为|一直是|都是|直接)\s*0")
# NVIDIA GPUs without fast fp16 (CTranslate2 wants compute capability 7.0 for float16): Kepler, Maxwell, Pascal
# (but the P100, sm_60)
_SLOW_FP16 = re.compile(r"sm_(?:[3-5]\d|6[12])")


# the CPU asked for outright, or a machine without an NVIDIA GPU (a Mac): the CPU's float16 refusal is then expected
_ASKED_CPU = re.compile(r"(?i)--device\s+cpu|device\s*=\s*[\"']cpu|\bmac ?os\b|\bmacbook\b|\bApple M\d")


def _format_refused(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A tool refusing a number format for this GPU in its own words: CTranslate2's float16 on a GPU without fast
    fp16, ptxas refusing bf16 below sm_80, torch's GradScaler refusing fp16 gradients."""
    text = " ".join(e.line for e in errors)
    joined = _text_of(ctx)
    evidence = [ctx.line_fact(errors[0])]
    arch, _fact = ctx.arch(errors)
    ct2 = re.search(r"(?i)efficient float16 computation", text) or (
        re.search(r"(?i)\b(?:float16|fp16|half)\b.{0,30}\b(?:Maxwell|Pascal|Kepler)\b", text)
        and (_WHISPER.search(joined) or re.search(r"(?i)whisperx", joined)))
    if ct2 and arch and re.fullmatch(r"sm_\d{2,3}", arch) and int(arch[3:]) >= 70 and not _ASKED_CPU.search(joined):
        # the GPU has fast float16 (compute capability 7.0+), so the refusal is the CPU's: the run never reached the
        # GPU. WhisperX picks its device from torch (--device defaults to cuda when torch.cuda.is_available()), so a
        # CPU torch puts it on the CPU; its README's setup is torch 2.0.0 with torchaudio from the CUDA 11.8 build
        # (conda install pytorch==2.0.0 torchaudio==2.0.0 pytorch-cuda=11.8 -c pytorch -c nvidia); m-bain/whisperX
        # #1143: an RTX 4050, fixed by the cu118 torch (round 20, r20d)
        whisperx = bool(re.search(r"(?i)whisperx", joined))
        torch_fix = ("pip install torch==2.0.0 torchaudio==2.0.0 --index-url https://download.pytorch.org/whl/cu118 "
                     "(WhisperX's README setup: torch 2.0.0 for CUDA 11.8; a newer WhisperX release: the torch its "
                     "requirements pin, from the CUDA index of that torch)" if whisperx else
                     (_cuda_index_for_driver(ctx, arch) if ctx.sheet.of("cuda") else
                      "pip install torch torchaudio --index-url https://download.pytorch.org/whl/cu118 for a CUDA "
                      "11.x install (the CUDA 11.8 build WhisperX's README sets up), or whl/cu126 / cu128 for CUDA "
                      "12.x") + " (the program takes its device from that torch; device=\"cuda\" where code sets "
                     "it)")
        return _make("torch-build", "the model runs on the CPU, not on the GPU",
                     f"this GPU ({arch}) has fast float16, so CTranslate2's refusal comes from the CPU: the program "
                     "chose the CPU because the torch in its environment has no CUDA (a CPU build), and float16 has no "
                     "efficient CPU path", f"in the program's environment: pip uninstall -y torch torchaudio; "
                     f"{torch_fix}; python -c \"import torch; print(torch.cuda.is_available())\" must print True, then "
                     "run with --device cuda --compute_type float16", evidence, errors)
    if ct2:
        on = f" ({arch})" if arch else ""
        return _make("precision", "CTranslate2 has no fast float16 on this GPU",
                     f"CTranslate2 (faster-whisper, WhisperX) runs float16 only on GPUs of compute capability 7.0 or "
                     f"newer; this GPU{on} is older (Kepler, Maxwell, Pascal), so the float16 compute type is refused",
                     "load the model with another compute type: compute_type=\"float32\" (WhisperX: --compute_type "
                     "float32), or compute_type=\"int8\" / \"int8_float32\" to save memory (int8 needs compute "
                     "capability 6.1)", evidence, errors)
    ptx = re.search(r"(?i)Feature '\.?bf16' requires \.target (sm_\d+)|\.f32\.bf16' requires \.target (sm_\d+)", text)
    if ptx:
        need = ptx.group(1) or ptx.group(2)
        tool = ctx.tool(errors)
        own = (" (unsloth: fp16 = not is_bfloat16_supported(), bf16 = is_bfloat16_supported(), its own check)"
               if tool == "unsloth" or re.search(r"(?i)\bunsloth\b", joined) else "")
        return _make("precision", f"a Triton kernel was built in bf16 for a GPU older than {need}",
                     f"the run chose bf16 (torch may report bf16 as supported where it is only emulated), and Triton "
                     f"compiled its kernels with bf16 instructions, which ptxas accepts only for {need} and newer; "
                     f"this GPU{' (' + arch + ')' if arch else ''} is older (a T4 or V100 has no bf16)",
                     "train in fp16 instead of bf16 on this GPU: fp16=True, bf16=False (--fp16; the model loaded with "
                     "torch_dtype=torch.float16)" + own, evidence, errors)
    if re.search(r"(?i)Attempting to unscale FP16 gradients", text):
        own = _launcher_precision_only(joined)
        if own is not None:
            return _make("precision", f"{own} reads its own --mixed_precision, which was not given",
                         f"accelerate launch --mixed_precision sets accelerate's autocast, but {own} decides from its "
                         "own --mixed_precision argument whether to keep the trainable (LoRA) parameters in fp32; "
                         "given only to the launcher, the script leaves them fp16 and the gradient scaler refuses "
                         "their gradients",
                         f"pass the precision to the script too: accelerate launch --mixed_precision=\"fp16\" {own} "
                         "--mixed_precision=\"fp16\" ... (diffusers' training scripts cast the trainable parameters "
                         "to fp32 only when their own argument says fp16; later versions of the scripts do it from "
                         "accelerate's setting)", evidence, errors)
        return _make("precision", "the trained parameters are fp16, which the gradient scaler refuses",
                     "with fp16 mixed precision the GradScaler unscales the gradients of the trained parameters, and "
                     "refuses gradients that are themselves fp16: the LoRA adapter (or the whole model) was created "
                     "or loaded in fp16",
                     "keep the trainable parameters in fp32: cast them before training (for p in model.parameters(): "
                     "if p.requires_grad: p.data = p.data.float(); peft does it with autocast_adapter_dtype=True, "
                     "its default since 0.12), keep the frozen base in fp16; or load the model in fp32 (bf16 where "
                     "the GPU has it)", evidence, errors)
    return None


# `accelerate launch --mixed_precision=X script.py ...`: the launcher's flag, before the script's name
_LAUNCHER_PRECISION = re.compile(r"\baccelerate launch\b[^\n]*?--mixed_precision[= ]\S+[^\n]*?\s(\S+\.py)\b")


def _launcher_precision_only(text: str) -> Optional[str]:
    """The training script started by `accelerate launch --mixed_precision ...` with no --mixed_precision of its own
    (diffusers' train_*.py scripts take one, and act on it): the script's name, else None."""
    launched = _LAUNCHER_PRECISION.search(text)
    if launched is None or len(re.findall(r"--mixed_precision\b", text)) > 1:
        return None
    return launched.group(1)


# transformers' TrainingArguments refuses tf32=True below Ampere ("--tf32 requires Ampere or a newer GPU arch, cuda>=11
# and torch>=1.7"): TF32 is the Ampere tensor cores' format; FastChat's and Alpaca's training commands pass --tf32 True
# beside --bf16 True, so a V100 needs both turned off (lm-sys/FastChat#1191, the maintainers' answer)
_TF32_SAID = re.compile(r"(?i)--tf32\b|\btf32\s*[=:]\s*(?:true|1)\b|\btf32\b.{0,40}\brequires? (?:an )?Ampere")


def _tf32(ctx: Context) -> str:
    """The fix for TF32 where the paste asks for it (or shows its refusal), else ''."""
    if not _TF32_SAID.search(_text_of(ctx)):
        return ""
    return ("turn TF32 off too: --tf32 False (tf32=False in the TrainingArguments, or drop tf32: true from the "
            "config), since transformers refuses TF32 below Ampere")


def _zero_loss(ctx: Context, zero: list[ErrorLine]) -> Diagnosis:
    """A fine-tuning loss that collapses to exactly 0: the fp16 forward overflowed (inf/NaN logits the loss turns
    into 0 or that zero the update), the commonest cause when the model is loaded or trained in fp16."""
    joined = _text_of(ctx)
    arch, fact = ctx.arch(zero)
    old_gpu = bool(arch and _NO_BF16.fullmatch(arch))
    fix = ("this GPU has no bf16: train in fp32 (load with torch_dtype=torch.float32, no fp16 flag), or keep fp16 "
           "with dynamic loss scaling and the trainable parameters in fp32" if old_gpu else
           "load the model in bf16 and train in bf16: torch_dtype=torch.bfloat16 when loading, bf16=True (fp16 off) "
           "in the TrainingArguments (--bf16; LLaMA-Factory: bf16: true); on a GPU without bf16, fp32")
    settled = re.search(r"(?i)\bfp16\b|float16|\bhalf\b|torch_dtype", joined)
    return _make("precision", "the loss collapses to 0: fp16 overflow", "a loss that drops to exactly 0 after the "
                 "first steps means the forward pass overflowed fp16 (largest value 65504) and the logits turned to "
                 "inf/NaN, which the loss and the update then zero; a model loaded in float16 for fine-tuning does it",
                 fix, [f for f in (ctx.line_fact(zero[0]), fact) if f], zero, confirmed=bool(settled))


# torch.autocast's refusal ("Current CUDA Device does not support bfloat16. Please switch dtype to float16.") and a
# user's words for it ("this device does not support dtype=torch.bfloat16")
_AUTOCAST_BF16 = re.compile(r"(?i)(?:do(?:es)? ?n.t|do(?:es)? not) support (?:dtype\s*=\s*)?(?:torch\.)?(?:bf16|bfloat16)\b|"
                            r"switch dtype to float16")
# scripts whose own setting picks autocast's dtype, as a paste names them, with that setting
_DTYPE_SETTINGS = (("nanoGPT", r"(?i)\bnanoGPT\b|\bptdtype\b", "python train.py --dtype=float16"),)


def _autocast_refuses_bf16(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """torch.autocast asked for bfloat16 on a GPU without it (NVIDIA before Ampere: V100, T4, RTX 20xx): autocast
    refuses before the first step. The script's dtype goes to float16 (with a gradient scaler) or float32; a script
    that picks it with torch.cuda.is_bf16_supported() does so by itself."""
    said = [e for e in errors if _AUTOCAST_BF16.search(e.line)]
    text = _text_of(ctx)
    # autocast's own message, or its dtype named: a GPU said to lack bf16 elsewhere is the readings' below
    if not said or not re.search(r"(?i)autocast|switch dtype|dtype\s*=\s*(?:torch\.)?bfloat16|\bptdtype\b|nanoGPT",
                                 text):
        return None
    arch, fact = ctx.arch(said)
    gpu = _OLD_GPU_NAMES.search(text)
    on = f" ({gpu.group(0) if gpu else arch})" if gpu or arch else ""
    own = next((f"; {name}: {flag}" for name, pattern, flag in _DTYPE_SETTINGS if re.search(pattern, text)),
               "; a script with a dtype option: --dtype=float16")
    return _make("precision", "autocast asks for bf16 on a GPU without it",
                 f"the script runs torch.autocast with dtype=torch.bfloat16, and this GPU{on} has no bf16 (NVIDIA "
                 "before Ampere, AMD RDNA2 and older), so autocast refuses it",
                 "set the dtype to float16: torch.autocast(device_type=\"cuda\", dtype=torch.float16) with a "
                 "torch.amp.GradScaler for training, or float32; choose it with torch.cuda.is_bf16_supported()"
                 + own, [f for f in (ctx.line_fact(said[0]), fact) if f], said)


# a kernel named for its number format, missing from the module loaded for this GPU: candle's CUDA kernels compile their
# bf16 variants only under `#if __CUDA_ARCH__ >= 800` and their f16 variants under `>= 530` (the candle-kernels
# crate's src/cast.cu, unary.cu, affine.cu ...: https://github.com/huggingface/candle, candle-kernels), so the PTX built
# for an older GPU has no such symbol and cudarc's load fails with CUDA_ERROR_NOT_FOUND
# (https://github.com/huggingface/candle/issues/1911: cast_f32_bf16 on a card older than Ampere)
_FORMAT_SYMBOL = re.compile(r"(?i)(?:named symbol not found|CUDA_ERROR_NOT_FOUND).{0,80}?\b(\w+?_(b?f16)\w*)")


def _format_kernel_missing(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A bf16 (or f16) kernel not found when the program loads it: the kernels of that format were compiled only for
    GPUs that compute it (bf16: compute capability 8.0, Ampere; f16: 5.3), and this GPU is older; the model runs
    in a format the GPU has."""
    said = [e for e in errors if _FORMAT_SYMBOL.search(e.line)]
    if not said:
        return None
    found = _FORMAT_SYMBOL.search(said[0].line)
    kernel, fmt = found.group(1), found.group(2).lower()
    floor, other = ("8.0 (Ampere)", "f16 (or f32)") if fmt == "bf16" else ("5.3", "f32")
    arch, fact = ctx.arch(said)
    on = f" ({arch})" if arch and arch.startswith("sm_") else ""
    dtype = "f16" if fmt == "bf16" else "f32"
    return _make("precision", f"the {fmt} kernels are not built for this GPU",
                 f"the program loads the {fmt} kernel {kernel}, and its {fmt} kernels are compiled only for GPUs of "
                 f"compute capability {floor} and newer, so the module built for this GPU{on} has no such symbol",
                 f"run the model in {other} instead of {fmt}: the program's dtype option (candle's examples and "
                 f"mistral.rs: --dtype {dtype}; DType::{dtype.upper()} when building the model in code); {fmt} needs "
                 f"compute capability {floor} or newer",
                 [f for f in (ctx.line_fact(said[0]), fact) if f], said)


# the memory-efficient attention kernels (xFormers' cutlass FMHA, which torch's SDPA carries as its "mem_efficient"
# backend) finding no variant for the inputs: "cutlassF: no kernel found to launch!" (the forward; cutlassB the
# backward). Their bf16 variants are compiled only for compute capability 8.0 and newer (the kernels' arch check in
# xformers/csrc/attention/cuda/fmha and torch's aten/src/ATen/native/transformers/cuda/mem_eff_attention), so a model
# loaded in bf16 on a Turing or Volta card finds none (QwenLM/Qwen3#710: a 2080 Ti, fixed by loading in float16)
_CUTLASS_NONE = re.compile(r"(?i)\bcutlass[FB]?\b\W{0,3}no kernel found to launch")
# programs whose own setting loads the model in float16, as a paste names them, with that setting
_FLOAT16_SETTINGS = (
    ("vLLM", r"(?i)\bvllm\b", "--dtype half (LLM(model=..., dtype=\"float16\"))"),
    ("LLaMA-Factory", r"(?i)llama[-_ ]?factory|llamafactory", "infer_dtype: float16 (training: fp16: true, bf16: false)"),
    ("ms-swift", r"(?i)\bms-swift\b|\bswift (?:infer|sft|deploy)\b", "--torch_dtype float16"),
    ("ComfyUI", r"(?i)\bcomfy\s?ui\b", "--force-fp16 when starting ComfyUI"),
    ("diffusers", r"(?i)\bdiffusers\b|\w+Pipeline\.from_pretrained", "torch_dtype=torch.float16 in the pipeline's "
     "from_pretrained"),
)


def _cutlass_without_kernel(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """The memory-efficient attention kernel finds no variant to launch, on a GPU below compute capability 8.0 (or one
    the paste does not name): the model runs in bf16, which those kernels have only from Ampere on; loaded as float16
    the same kernel runs. On an Ampere or newer GPU the format is not the cause, and the reading stays out."""
    said = [e for e in errors if _CUTLASS_NONE.search(e.line)]
    if not said:
        return None
    arch, fact = ctx.arch(said)
    if arch and arch.startswith("sm_") and int(arch[3:]) >= 80:
        return None
    if arch and not arch.startswith("sm_"):
        return None   # an AMD GPU: ROCm's attention kernels are other code
    gpu = next((g.value for g in ctx.sheet.of("gpu") if g.detail == arch), None) if arch else None
    on = f"the {gpu} ({arch})" if gpu else f"this GPU ({arch})" if arch else "this GPU"
    text = _text_of(ctx)
    own = next((f"; {name}: {flag}" for name, pattern, flag in _FLOAT16_SETTINGS if re.search(pattern, text)), "")
    return _make("precision", f"bf16 attention on {on}, which has no bf16 kernels",
                 f"the memory-efficient attention kernel (torch SDPA's cutlass backend, from xFormers) has bf16 "
                 f"variants only for compute capability 8.0 (Ampere) and newer; the model runs in bf16 (its config's "
                 f"torch_dtype, picked by torch_dtype=\"auto\"), and {on} is older, so no kernel is found",
                 f"load the model in float16 instead of bfloat16: torch_dtype=torch.float16 in from_pretrained "
                 f"(not \"auto\" or torch.bfloat16){own}; float32 if float16 overflows; bf16 needs compute "
                 f"capability 8.0 or newer{', which ' + on + ' is not' if arch else ''}", [f for f in (ctx.line_fact(said[0]), fact) if f], said,
                 confirmed=arch is not None)


# NVIDIA's TransformerEngine, as a paste shows it: its module, its fp8 context manager, its recipes
_TRANSFORMER_ENGINE = re.compile(r"(?i)transformer[_-]?engine|\bte\.(?:fp8_autocast|autocast|Linear|LayerNorm\w*|"
                                 r"TransformerLayer)\b|\bfp8_autocast\b|\bDelayedScaling\b|\bfp8_recipe\b")
# an NVIDIA arch, whose digits are its compute capability
_CC = re.compile(r"sm_(\d+)")


# TransformerEngine's FP8 check on a GPU that has FP8 (Ada, compute capability 8.9): its first releases asked for 9.x
# ("Device compute capability 9.x required for FP8 execution"), and Ada's FP8 came with TransformerEngine 0.7 (sm_89 in
# its build targets, NVIDIA/TransformerEngine#129) and cuBLAS 12.1.3.1 (CUDA 12.1 Update 1, the first with Ada FP8
# GEMMs); later releases check those two by name ("CublasLt version 12.1.3.x or higher required for FP8 execution on
# Ada", "Cuda version 12.1 or higher required for FP8 execution on Ada")
_TE_FLOOR = re.compile(r"(?i)compute capability (\d+)\.(?:x|\d)\b[^\n]{0,30}\brequired\b[^\n]{0,10}\bfor FP8")
_TE_ADA_LIBRARY = re.compile(r"(?i)\b(?:CublasLt|Cuda) version [\d.x]+ or higher required for FP8 execution on Ada")
# the first TransformerEngine release, and the CUDA, that run FP8 on each GPU generation with FP8 below the old 9.x floor
_TE_FP8_ADDED = {89: ("Ada", "0.7", "12.1 Update 1 (cuBLAS 12.1.3.1)")}


def _transformer_engine_before_the_gpu(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """TransformerEngine refusing FP8 on a GPU that has it: a release (or a CUDA / cuBLAS) older than the one that
    added the GPU's generation to FP8, not the GPU. The answer is the release and CUDA that added it."""
    text = " ".join(e.line for e in errors)
    floor, library = _TE_FLOOR.search(text), _TE_ADA_LIBRARY.search(text)
    archs = [g.detail for g in ctx.sheet.of("gpu") if g.detail and _CC.fullmatch(g.detail)]
    arch, fact = ctx.arch(errors)
    if arch and _CC.fullmatch(arch):
        archs.insert(0, arch)
    capability = int(archs[0][3:]) if archs else (89 if library else None)
    if capability not in _TE_FP8_ADDED or not (library or floor and int(floor.group(1)) * 10 > capability):
        return None
    generation, release, cuda = _TE_FP8_ADDED[capability]
    said = [e for e in errors if _TE_FLOOR.search(e.line) or _TE_ADA_LIBRARY.search(e.line)] or errors
    return _make("arch-missing", f"this TransformerEngine (or its CUDA) predates FP8 on {generation}",
                 f"the GPU is {generation} (compute capability {capability / 10:.1f}), which has FP8 tensor cores; "
                 f"TransformerEngine before {release} was built and checked for Hopper's FP8 only, and FP8 matmuls on "
                 f"{generation} need cuBLAS from CUDA {cuda}",
                 f"upgrade TransformerEngine to {release} or newer (pip install -U transformer_engine[pytorch], or "
                 f"NVIDIA's NGC PyTorch container of that time or later) and CUDA to {cuda} or newer (a torch built "
                 f"for CUDA 12.1+, --index-url https://download.pytorch.org/whl/cu121 or newer, with its "
                 f"nvidia-cublas-cu12); then fp8_autocast runs on the {generation} GPU",
                 [f for f in (ctx.line_fact(said[0]), fact) if f], said)


def _transformer_engine_fp8(ctx: Context, errors: list[ErrorLine]) -> Diagnosis:
    """TransformerEngine refusing FP8 on a GPU below compute capability 8.9 (its check_fp8_support: FP8 execution
    needs Ada, 8.9, or Hopper, 9.0, and newer; NVIDIA/TransformerEngine#1159 on an RTX 3090, where the maintainers
    answered that FP8 cannot run on Ampere): nothing to install, the run leaves FP8 off and keeps the fastest format
    the GPU has (bf16 on Ampere; fp16 before it)."""
    named = [(g.value, g.detail) for g in ctx.sheet.of("gpu") if g.detail and _CC.fullmatch(g.detail)
             and int(g.detail[3:]) < 89]
    gpu, arch = named[0] if named else (None, None)
    fmt = "fp16 (this GPU has no bf16)" if arch and int(arch[3:]) < 80 else "bf16"
    dtype = "float16" if fmt.startswith("fp16") else "bfloat16"
    on = f"the {gpu} ({arch})" if gpu else "this GPU"
    return _make("precision", f"TransformerEngine's FP8 needs compute capability 8.9, and {on} is older",
                 f"FP8 tensor-core instructions exist from Ada (compute capability 8.9) and Hopper (9.0) on; "
                 f"TransformerEngine checks the GPU before fp8_autocast and refuses {on}: no build or driver adds FP8",
                 f"drop FP8: run without te.fp8_autocast (or fp8_autocast(enabled=False)) and train in {fmt}: "
                 f"torch.autocast(device_type=\"cuda\", dtype=torch.{dtype}) around the TransformerEngine modules "
                 f"(params_dtype=torch.{dtype}); FP8 needs an Ada (RTX 40xx, L4, L40) or Hopper (H100) GPU",
                 [ctx.line_fact(errors[0])], errors)


@rule("precision")
def precision(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("precision")
    if not errors:
        return None
    nans = [e for e in errors if re.search(r"(?i)NaNs was produced in (?:Unet|VAE)|NansException|black (?:image|picture|"
                                           r"output|square)", e.line)]
    if nans:
        return image_nans(ctx, nans)
    latents = [e for e in errors if _LATENT_NANS.search(e.line)]
    if latents and _GTX16.search(_text_of(ctx)):
        return None   # a GTX 16xx card's fp16 NaN: gtx16_half reads it (its cudnn.benchmark first; round 19, r19d)
    if latents:
        return _make("precision", "the VAE overflows fp16 while encoding the latents",
                     "the trainer checks the latents the VAE encodes; NaN there is the VAE run in fp16 (the SDXL VAE "
                     "overflows fp16's range), not the data or the learning rate",
                     "run the VAE in fp32: --no_half_vae (kohya's sd-scripts; kohya_ss GUI: Advanced > Additional "
                     "parameters where the tab has no checkbox), or a VAE fixed for fp16 (sdxl-vae-fp16-fix via "
                     "--vae); the rest of the training stays in mixed precision", [ctx.line_fact(latents[0])], latents)
    kernel = _format_kernel_missing(ctx, errors)
    if kernel is not None:
        return kernel
    cutlass = _cutlass_without_kernel(ctx, errors)
    if cutlass is not None:
        return cutlass
    fp16_refused = _fp16_refused(ctx, errors)
    if fp16_refused is not None:
        return fp16_refused
    refused = _format_refused(ctx, errors)
    if refused is not None:
        return refused
    attention = nan_whatever_the_format(ctx, [e for e in errors if _NAN.search(e.line) or _ZERO_LOSS.search(e.line)])
    if attention is not None:
        return attention
    zero = [e for e in errors if _ZERO_LOSS.search(e.line)]
    if zero and not _NAN.search(" ".join(e.line for e in errors)):
        return _zero_loss(ctx, zero)
    overflow = _overflow(ctx, errors)
    if overflow is not None:
        return overflow
    text = " ".join(e.line for e in errors)
    evidence = [ctx.line_fact(errors[0])]
    fp4 = re.search(r"(?i)\b(?:MX)?FP4\w*\b[\w ]{0,24}? is not supported on (gfx\w+)", text)
    if fp4 and re.search(r"VLLM_ROCM_USE_AITER|AITER", "\n".join(ctx.sheet.lines)):
        return _make("precision", f"vLLM's AITER path uses FP4, which {fp4.group(1)} lacks",
                     f"with VLLM_ROCM_USE_AITER=1 vLLM turns on AITER's FP4 batched matmul by default; {fp4.group(1)} "
                     "has no FP4 (gfx950 has)", "export VLLM_ROCM_USE_AITER_FP4BMM=0 (keep the rest of AITER), or "
                     "a vLLM release that checks the GPU first", evidence, errors)
    if re.search(r"(?i)cublasLt\w*.{0,80}NOT_SUPPORTED|NOT_SUPPORTED.{0,80}cublasLt", text):
        old = [f.value for f in ctx.sheet.of("torch") if re.search(r"\+cu11", f.value)]
        if old:
            return _make("precision", "this torch's cuBLASLt has no fp8 matmul",
                         f"torch {old[0]} is built with CUDA 11, whose cuBLASLt has no fp8 (e4m3fn) matmul",
                         "pip install -U torch --index-url https://download.pytorch.org/whl/cu124 (or newer), or run "
                         "the model in fp16/bf16 instead of fp8", evidence, errors)
    if re.search(r"(?i)not implemented for .(?:Half|BFloat16).", text):
        # a CPU kernel missing for fp16/bf16: the model runs on the CPU in a GPU's number format
        return _make("precision", "a half-precision model runs on the CPU",
                     "the model was loaded in fp16/bf16 but runs on the CPU, which has no kernel for this op in that "
                     "format: the GPU was not used (torch sees no GPU, or the model was never moved to it)",
                     "check python -c 'import torch; print(torch.cuda.is_available())': if False, fix the GPU first "
                     "(a torch built for this GPU); on the CPU load the model in float32 (torch_dtype=torch.float32; "
                     "web UIs: --no-half / --precision full)", evidence, errors)
    fp8 = re.search(r"(?i)(?:fp8|float8|fp4|mxfp|nvfp)\w*.{0,60}\b(?:requires|needs|only (?:be )?supported|is not "
                    r"supported)\b|\b(?:required|needed)\b.{0,10}\bfor (?:fp8|float8|fp4|mxfp|nvfp)", text)
    if fp8 and _TRANSFORMER_ENGINE.search(_text_of(ctx)):
        return _transformer_engine_before_the_gpu(ctx, errors) or _transformer_engine_fp8(ctx, errors)
    if fp8:
        return _make("precision", "this GPU has no fp8", "fp8 matmuls need Ada (sm_89), Hopper (sm_90) or newer, MI300 "
                     "(gfx942) or RDNA4; this GPU is older", "load the model in bf16 or fp16 instead (vLLM: --dtype "
                     "bfloat16 with a non-fp8 checkpoint, or --quantization none / awq / gptq; transformers: "
                     "torch_dtype=torch.bfloat16), or run it on a GPU with fp8", evidence, errors)
    bf16 = re.search(r"(?i)bf16|bf+loat|16BF", text)   # (bf+loat: BFloat16, and a user's "BFfloat")
    if bf16 and re.search(r"(?i)Bfloat16 is only supported on GPUs with compute capability", text) or \
            (bf16 and ctx.tool(errors) == "vllm"):
        return _make("precision", "the GPU has no bf16", "vLLM loads the model in its bf16 dtype, which this GPU "
                     "cannot compute", "start with --dtype half (= float16; LLM(model=..., dtype=\"float16\")), or "
                     "--dtype float32; "
                     "bf16 needs compute capability 8.0 (Ampere) or newer", evidence, errors)
    tf32 = _tf32(ctx)
    if bf16 and re.search(r"(?i)setup doesn.t support bf16|--bf16|bf16=True|TrainingArguments", text):
        return _make("precision", "the GPU has no bf16", "the training is configured for bf16, which this GPU (older "
                     "than Ampere, or RDNA1/2) cannot compute" + (", nor TF32" if tf32 else ""),
                     "train in fp16 instead: fp16=True instead of bf16=True in the TrainingArguments (--fp16 instead "
                     "of --bf16; the same in a DeepSpeed config: \"fp16\": {\"enabled\": true}, \"bf16\": "
                     "{\"enabled\": false})" + (("; " + tf32) if tf32 else "") + _sft_config(ctx), evidence, errors)
    if tf32 and re.search(r"(?i)\btf32\b.{0,40}\brequires? (?:an )?Ampere", text):
        return _make("precision", "TF32 is asked for on a GPU before Ampere", "transformers refuses --tf32 True where "
                     "the GPU has no TF32 tensor cores (NVIDIA before Ampere: V100, T4, RTX 20xx)",
                     tf32 + "; the run computes in fp32 (or fp16 with --fp16) without it", evidence, errors)
    autocast = _autocast_refuses_bf16(ctx, errors)
    if autocast is not None:
        return autocast
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("precision", hit, errors)
    if bf16:
        where = ("fp16: true and bf16: false in the training config (LLaMA-Factory, axolotl; --fp16 instead of --bf16 "
                 "on the command line)" if _training(ctx) else "the project's dtype setting")
        demo = None if _training(ctx) else demo_dtype_flag(_text_of(ctx))   # a repository demo's own flag (r18e)
        if demo:
            where = demo
        return _make("precision", "bf16 does not run on this stack", "a bf16 operation runs where the GPU (or the "
                     "installed torch and CUDA) has no bf16 support",
                     f"turn bf16 off: run in fp16 (or fp32) instead of bf16: {where}; a model trained or saved in "
                     "bf16 runs on such a GPU when loaded as float16 (torch_dtype=torch.float16; LLaMA-Factory: "
                     "infer_dtype: float16; vLLM: --dtype float16)", evidence, errors)
    # a number-format failure no reading above settles: the format the GPU does have, as the likely remedy
    return _make("precision", "the GPU has no instructions for this number format",
                 "an operation runs in a format (bf16, fp8, fp4) this GPU or its build does not compute",
                 "run the model in a format the GPU has: fp16 on GPUs without bf16 (NVIDIA before Ampere, AMD RDNA2 and "
                 "older), bf16 or fp16 where fp8 / fp4 are missing (--dtype, torch_dtype, or the tool's precision "
                 "option), fp32 to confirm", evidence, errors, confirmed=False)


@rule("torch-build")
def float16_refused_in_words(ctx: Context) -> Optional[Diagnosis]:
    """CTranslate2's float16 refusal said in the user's words ("it still says that it doesn't support efficient float16
    computation") rather than pasted as its ValueError, on a GPU that has fast float16: the run is on the CPU
    (_format_refused's reading of the same refusal)."""
    if any(e.family == "precision" for e in ctx.errors):
        return None   # the refusal is an error line: read there
    said = _lines_matching(ctx, _FLOAT16_SAID)
    if not said:
        return None
    diagnosis = _format_refused(ctx, said)
    return diagnosis if diagnosis is not None and diagnosis.family == "torch-build" else None


_FLOAT16_SAID = re.compile(r"(?i)efficient float16 computation")
