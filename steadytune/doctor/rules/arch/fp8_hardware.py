"""FP8 asked of a GPU without FP8 tensor cores: TensorRT (TensorRT-LLM's engine build) refuses it as "Networks with FP8
precision require hardware with FP8 support", other stacks as "fp8 ... not supported on this GPU". FP8 math starts at
Ada (compute capability 8.9: RTX 40, L4, L40) and Hopper (9.0: H100, H200), Blackwell after them; an A100 (8.0) or
older has none, so no flag or release makes the FP8 engine run there. Sources: NVIDIA/TensorRT-LLM#1428 (closed "not a
bug": an A100 has no FP8, quantize to INT8/INT4 or stay in FP16); TensorRT's support matrix (FP8 on sm_89 and newer)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import dotted
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule


_REFUSED = re.compile(r"(?i)FP8 precision requires? hardware with FP8 support|\bfp8\b[^\n]{0,60}\bnot supported (?:on|by) "
                      r"(?:this|the|your|current) (?:GPU|device|hardware)|\bfp8\b[^\n]{0,40}\brequires? (?:an? )?"
                      r"(?:Ada|Hopper|sm_?89|sm_?90|compute capability (?:8\.9|9\.0))")
_FP8_FLOOR = 89


@rule("gpu-unsupported")
def fp8_without_fp8_hardware(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a refusal of FP8 for the hardware, on a GPU below compute capability 8.9 (or none named)."""
    lines = _lines_matching(ctx, _REFUSED)
    if not lines:
        return None
    sms = [f for f in ctx.sheet.of("arch") if re.fullmatch(r"sm_\d{2,3}", f.value)]
    if sms and any(int(f.value[3:]) >= _FP8_FLOOR for f in sms):
        return None   # an FP8 GPU refused: a library or release floor, not the hardware (the precision rules read it)
    gpu = next((f for f in ctx.sheet.of("gpu") if f.detail.startswith("sm_")), None)
    named = (f"the {gpu.value} ({gpu.detail}, compute capability {dotted(int(gpu.detail[3:]))})" if gpu else
             "this GPU")
    return _first(_make(
        "gpu-unsupported", "FP8 asked of a GPU without FP8 tensor cores",
        f"FP8 math needs FP8 tensor cores, which start at Ada (compute capability 8.9) and Hopper (9.0); {named} has "
        "none, so the FP8 engine / kernels cannot be built or run on it whatever the release",
        "quantize for what the GPU has instead: INT8 (SmoothQuant, or INT8 weight-only) or INT4 weight-only (AWQ / GPTQ), "
        "or keep FP16 / BF16; FP8 needs an Ada (RTX 40, L4, L40S) or Hopper (H100, H200) GPU or newer",
        [f for f in (gpu, ctx.line_fact(lines[0])) if f], lines[:1]))
