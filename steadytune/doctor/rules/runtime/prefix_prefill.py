"""Triton's assertion "mma -> mma layout conversion is only supported on Ampere" on a GPU before Ampere (V100, Titan
V, T4, RTX 20xx): a Triton attention kernel written for sm_80+ - in practice vLLM's prefix-prefill kernel, which runs
when prefix caching or chunked prefill is on (vLLM's own serving, and trainers that start vLLM for generation: TRL's
GRPOTrainer, Unsloth's GRPO notebooks). The fix turns those features off for the pre-Ampere GPU.

Facts: vllm-project/vllm#8024 and #4059 (the assertion on V100 / T4 with prefix caching; --enable-chunked-prefill=False
as the workaround), #13738 (V100 and enable-prefix-caching); huggingface/trl#2798 (GRPOTrainer's vLLM with prefix caching
on V100) and PR 2900 (GRPOConfig's vllm_enable_prefix_caching, to set False there); unsloth#1705 (Titan V, settled on
vllm_enable_prefix_caching=False).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_ASSERTION = re.compile(r"(?i)mma\s*->\s*mma layout conversion is only supported on Ampere")
_TRAINER = re.compile(r"(?i)\bGRPO\w*|\bunsloth\b|\btrl\b|\buse_vllm\b|\btrainer\.train\(")


@rule("attention")
def prefix_prefill_before_ampere(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _ASSERTION)
    if not lines:
        return None
    arch, fact = ctx.arch(lines)
    gpu = f"this {arch} GPU" if arch else "a GPU before Ampere"
    trainer = bool(_TRAINER.search(_text(ctx)))
    fix = ("in the trainer's config turn vLLM's prefix caching off: GRPOConfig(..., vllm_enable_prefix_caching=False) "
           "(TRL's GRPOTrainer, and Unsloth's GRPO notebooks, which use it); where vLLM is started directly: "
           "LLM(..., enable_prefix_caching=False, enable_chunked_prefill=False)" if trainer else
           "start vLLM without the features that run this kernel: LLM(..., enable_prefix_caching=False, "
           "enable_chunked_prefill=False) (the server: --enable-chunked-prefill=False and prefix caching off)")
    # the assertion names its own cause (Ampere only): it leads a precision or dtype reading of the same command line
    return _first(_make("attention", "vLLM's prefix-prefill Triton kernel needs an Ampere GPU",
                 f"the Triton kernel vLLM uses for prefix caching / chunked prefill converts between mma layouts, which "
                 f"Triton supports only on Ampere (sm_80) and newer; on {gpu} it aborts with this assertion",
                 fix + "; or run on an Ampere or newer GPU", [f for f in (fact, ctx.line_fact(lines[0])) if f],
                 lines[:1]))
