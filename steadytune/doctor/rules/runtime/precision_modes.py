"""A program's own precision mode that its GPU cannot run right, read from the mode's name in the paste:

  half precision that yields NaN   a program run with `--precision half` (Leela Zero's OpenCL build: its flag takes
                                   single / half / auto, from its help text "Floating-point precision
                                   (single/half/auto)") printing NaN where single precision works: the half path
                                   misbehaves on this card or driver (alreadydone/lz#51: a Vega 56 on Windows), so
                                   the fix is `--precision single`, never a reinstall
  fp8 "fast" mode before Ada       torch._scaled_mm refusing the GPU ("only supported on CUDA devices with compute
                                   capability >= 9.0 or 8.9"): a model loaded in an fp8 *fast* mode (ComfyUI's
                                   weight_dtype fp8_e4m3fn_fast, which sets fp8 matmuls; kijai's wrappers' quantization
                                   fp8_e4m3fn_fast) multiplies in fp8 through _scaled_mm, which Ampere and older lack;
                                   the plain fp8_e4m3fn keeps the weights in fp8 and computes in fp16/bf16
                                   (ComfyUI's UNETLoader lists default / fp8_e4m3fn / fp8_e4m3fn_fast / fp8_e5m2;
                                   kijai/ComfyUI-HunyuanVideoWrapper#98, kijai/ComfyUI-PyramidFlowWrapper#43)
  fp16 NaNs saved as black video   numpy's "invalid value encountered in cast" while frames are cast to uint8 (NaN ->
                                   black) on a GPU that computes bf16: the model overflows fp16, and bf16 has fp32's
                                   range (FastVideo's demos take --precision bf16; hao-ai-lab/FastVideo#107)
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# -- half precision asked for, NaN printed ------------------------------------------------------------------------------

_HALF_ASKED = re.compile(r"(?i)--precision[ =]+half\b")
# a program whose precision flag takes single / half (Leela Zero, its forks and leelaz binaries)
_LEELA = re.compile(r"(?i)\bleela[-_ ]?zero\b|\bleelaz(?:\.exe)?\b")
_NAN_SEEN = re.compile(r"(?i)(?<![\w])-?nan(?:\(ind\))?(?![\w])")


def _half_nan(ctx: Context, text: str) -> Optional[Diagnosis]:
    if not (_HALF_ASKED.search(text) or _LEELA.search(text)):
        return None
    nans = _lines_matching(ctx, _NAN_SEEN)
    if not nans:
        return None
    asked = bool(_HALF_ASKED.search(text))
    return _make("precision", "the half-precision path computes NaN on this GPU",
                 ("the run asks for half precision (--precision half), and its half-precision kernels give NaN on this "
                  "card and driver" if asked else
                  "left to --precision auto, the program picked half precision, and its half-precision kernels give NaN "
                  "on this card and driver") + "; single precision computes the same network correctly",
                 "run in single precision: --precision single (auto may pick half again on this card); the speed lost "
                 "is the half path's, the results are right", [ctx.line_fact(nans[0])], nans[:1], confirmed=asked)


# -- torch._scaled_mm: fp8 matmuls on a GPU before Ada ------------------------------------------------------------------

_SCALED_MM = re.compile(r"(?i)_scaled_mm\b.{0,40}\bonly supported on (?:CUDA )?devices with compute capability|"
                        r"_scaled_mm\b.{0,80}\bcompute capability\s*>=?\s*(?:9\.0|8\.9)")
_GPU_NAME = re.compile(r"(?i)\b(?:RTX|GTX)\s?\d{4}(?:\s?Ti)?\b|\b\d{4}\s?Ti\b|\b(?:A100|A10G?|A40|A6000|V100|T4|P40|L4)\b")


def _fp8_fast(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _SCALED_MM)
    if not lines:
        return None
    gpu = _GPU_NAME.search(_text(ctx))
    on = f" (the {gpu.group(0)} is older)" if gpu else ""
    return _make("precision", "an fp8 fast mode needs an Ada or Hopper GPU",
                 "the model is loaded in an fp8 *fast* mode, which multiplies in fp8 through torch._scaled_mm; that "
                 f"needs compute capability 8.9 or 9.0 (RTX 40xx / Ada, Hopper){on}",
                 "do not use the _fast fp8 dtype: in the model loader pick plain fp8_e4m3fn instead of "
                 "fp8_e4m3fn_fast (ComfyUI's weight_dtype; kijai's wrappers' quantization setting, where "
                 "fp8_e4m3fn_fast_no_ffn is a fast mode too): "
                 "the weights stay in fp8 and are computed in fp16 / bf16; fp8 fast mode is for RTX 40xx and newer",
                 [ctx.line_fact(lines[0])], lines)


# -- NaN frames cast to uint8 (black output) on a GPU with bf16 ----------------------------------------------------------

_CAST_NAN = re.compile(r"(?i)invalid value encountered in cast")
# GPUs that compute bf16 (NVIDIA Ampere and newer, AMD CDNA2+ / RDNA3+), by name
_BF16_GPU = re.compile(r"(?i)(?<![\w])(?:H20|H100|H200|H800|H20[a-z]?|GH200|B200|A100|A800|A10G?|A30|A40|L4|L20|L40S?|"
                       r"RTX ?(?:30|40|50)\d0(?: ?Ti)?|RTX A\d000|RTX \d000 Ada|MI2[15]0X?|MI300X?|MI325X|RX ?[79]\d00 ?XTX?)"
                       r"(?![\w])")
_IMAGE_UI = re.compile(r"(?i)\bVAE\b|--no-half|stable[-_ ]diffusion[-_ ]webui|\bA1111\b|\bComfyUI\b|\bSD\.Next\b")


def _fp16_black_frames(ctx: Context, text: str) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _CAST_NAN)
    gpu = _BF16_GPU.search(text)
    if not lines or not gpu or _IMAGE_UI.search(text):
        return None
    return _make("precision", "the frames are NaN: fp16 overflowed on a GPU that has bf16",
                 "the model ran in fp16, its activations left fp16's range (65504) and became NaN; cast to uint8 for "
                 f"saving, NaN turns black. The {gpu.group(0)} computes bf16, which has fp32's range",
                 "generate in bf16 instead of fp16: the program's precision option (FastVideo's demos: --precision "
                 "bf16; diffusers: torch_dtype=torch.bfloat16), or fp32 to confirm", [ctx.line_fact(lines[0])],
                 lines[:1], confirmed=False)


@rule("precision")
def precision_modes(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a precision mode the paste names (--precision half, an fp8 fast dtype behind torch._scaled_mm)
    with the failure it causes, or NaN frames on a GPU with bf16."""
    text = _text(ctx)
    return _fp8_fast(ctx) or _half_nan(ctx, text) or _fp16_black_frames(ctx, text)
