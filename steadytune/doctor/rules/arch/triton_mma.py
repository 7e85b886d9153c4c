"""Triton's tensor-core (MMA) path asked of a GPU without tensor cores (gpu-unsupported). Quantized models whose
matmuls are Triton kernels (the int4 / GPTQ builds of MOSS, ChatGLM-style "triton" quantizers, GPTQ-for-LLaMa's triton
branch) compile to MMA instructions; Triton picks the MMA layout version from the compute capability (1 for Volta,
2 for Turing / Ampere and newer) and asserts on anything else, so on a Pascal or older card the compiler itself
aborts ("Assertion `(version == 1 || version == 2) && \"Unexpected MMA layout version found\"' failed" in
lib/Analysis/Utility.cpp's supportMMA). No driver, CUDA or torch setting changes that: the card has no tensor cores.
The ways out: the unquantized (fp16) model, or a kernel that runs on the card, or a Volta-or-newer GPU
(OpenMOSS/MOSS#302: a P40 with moss-moon-003-sft-int4, closed as the card unsupported for the Triton int4 model)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule

_MMA = re.compile(r"(?i)Unexpected MMA layout version|\bsupportMMA\b|MMA layout version found")


@rule("gpu-unsupported")
def triton_mma_on_a_card_without_tensor_cores(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Triton's MMA-version assertion, and a card of compute capability below 7.0 named in the paste."""
    lines = _lines_matching(ctx, _MMA)
    if not lines:
        return None
    card = next((g for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_\d{2,3}", g.detail or "")
                 and int(g.detail[3:]) < 70), None)
    if card is None:
        return None
    cc = f"{card.detail[3]}.{card.detail[4:]}"
    generation = {"6": "Pascal", "5": "Maxwell", "3": "Kepler"}.get(card.detail[3], "pre-Volta")
    return _first(_make("gpu-unsupported", f"Triton's tensor-core kernels do not run on the {card.value}",
                        f"the model's quantized matmuls are Triton kernels that compile to tensor-core (MMA) "
                        f"instructions; Triton has an MMA layout only for Volta (7.0) and newer, and the {card.value} "
                        f"is a {generation} card (compute capability {cc}) with no tensor cores, so Triton's compiler "
                        "asserts",
                        f"the {generation} card is unsupported for this Triton-quantized model: run the unquantized "
                        "(fp16) model instead, split over the GPUs or partly on the CPU where it does not fit "
                        "(device_map=\"auto\"), or a quantization whose kernels are plain CUDA; or use a Volta "
                        "(compute capability 7.0) or newer GPU for the int4 model", [card], lines[:1]))
