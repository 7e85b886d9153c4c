"""Black (NaN) pictures or video from a model run in fp16 with no error line: models trained and published in bf16
(CogVideoX 1.5, Flux, HunyuanVideo, Wan and most video models) have activations beyond fp16's range (65504), so fp16
overflows to inf / NaN and the saved frames are black. bf16 has fp32's range, so the fix is bf16 where the GPU
computes it (NVIDIA Ampere, RTX 30xx, and newer), and fp32 where it does not (GTX 10xx, RTX 20xx, V100, T4: no bf16)
(kijai/ComfyUI-CogVideoXWrapper#240: CogVideoX 1.5 black in fp16, the maintainer: the 1.5 weights work only in bf16;
the reporter's RTX 2080 Ti has no bf16 and ran fp32). GTX 16xx cards' own fp16 NaN is gtx16_half's reading; an SD
VAE's fp16 overflow (a VAE named) is precision.py's."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text
from steadytune.doctor.rules.runtime.shared import _GTX16

# the output black or NaN, in the user's words
_BLACK = re.compile(r"(?i)\b(?:totally|completely|all|pure|entirely|just|only)?\s*black\s+(?:video|frames?|images?|"
                    r"pictures?|outputs?|results?|screens?)\b|\boutputs? (?:is |are )?(?:all )?(?:black|NaN)\b|"
                    r"\bNaN (?:frames|latents|outputs?)\b|黑屏|全黑|黑图")
# fp16 as the chosen precision
_FP16 = re.compile(r"(?i)\bfp16\b|\bfloat16\b|\bhalf precision\b|torch\.half\b")
# GPUs without bf16 (before Ampere) and with it, by name
_NO_BF16 = re.compile(r"(?i)\bRTX ?20[5-8]0(?: ?Ti| SUPER)?\b|\bGTX ?10[5-8]0(?: ?Ti)?\b|\bTitan (?:V|Xp|RTX)\b|"
                      r"\bV100\b|\bT4\b|\bP100\b|\bP40\b|\bQuadro RTX\b|(?<![\w.])20[5-8]0 ?Ti\b")
_BF16 = re.compile(r"(?i)\bRTX ?(?:30|40|50)[5-9]0(?: ?Ti)?\b|\bA100\b|\bH100\b|\bH200\b|\bL40S?\b|\bRTX A\d000\b|"
                   r"(?<![\w.])(?:30|40|50)[6-9]0 ?Ti\b")


@rule("precision")
def fp16_overflow_in_a_bf16_model(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: black / NaN output said with fp16 as the run's precision, no error line of another family, no
    GTX 16xx card and no VAE named (their own readings)."""
    text = _text(ctx)
    black = _lines_matching(ctx, _BLACK)
    if not black or not _FP16.search(text) or _GTX16.search(text) or re.search(r"(?i)\bVAE\b", text):
        return None
    if any(e.family not in (None, "precision") for e in ctx.errors) or ctx.of("precision"):
        return None
    old, new = _NO_BF16.search(text), _BF16.search(text)
    switch = ("the loader's precision option (kijai's wrappers' model loader: precision), dtype=torch.bfloat16 / "
              "torch_dtype in diffusers")
    if old and not new:
        fix = (f"run in fp32: the {old.group(0)} has no bf16, so pick fp32 in {switch.replace('bfloat16', 'float32')}; "
               "fp32 takes twice the memory of fp16: where it does not fit, keep the weights in fp8 (the loader's "
               "fp8 / quantization option) and compute in fp32")
    elif new:
        fix = f"run in bf16 instead of fp16: {switch}; the {new.group(0)} computes bf16 at fp16's speed"
    else:
        fix = (f"run in bf16 instead of fp16 ({switch}); on a card without bf16 (before RTX 30xx / Ampere: GTX 10xx, "
               "RTX 20xx, V100, T4) run in fp32 instead, with the weights in fp8 where fp32 does not fit")
    return _make("precision", "fp16 overflows in a model made for bf16 (black output)",
                 "the model's activations exceed fp16's range (65504): fp16 overflows to inf / NaN and the saved "
                 "frames come out black, with no error; bf16 and fp32 have the range (the model's weights are "
                 "published in bf16 even where fp16 is listed)", fix, [], black[:1], confirmed=False)
