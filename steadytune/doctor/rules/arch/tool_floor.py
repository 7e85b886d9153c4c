"""A tool whose kernels exist only from a compute capability up, asked about (or failing) on an older NVIDIA card:
no build adds the card, so the answer is that it is unsupported and what runs on it instead. One row per tool, with
the floor its own documentation states (the error-line floors, vLLM's quantization check and flash-attn's message,
are read in gpu_unsupported)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


@dataclass(frozen=True)
class Floor:
    tool: str          # how the fix names it
    said: str          # a regex for the tool in the paste
    floor: int         # the lowest compute capability (digits) its kernels are built for
    instead: str       # what runs on older cards
    source: str


FLOORS = (
    Floor("AutoAWQ", r"(?i)\bauto[-_ ]?awq\b", 75,
          "run the model unquantized in fp16, or a quantization with kernels for it (GPTQ through auto-gptq / "
          "vLLM's --quantization gptq, or bitsandbytes 8/4-bit)",
          "AutoAWQ README (NVIDIA: compute capability 7.5, Turing and later)"),
    Floor("flash-attn", r"(?i)\bflash[-_ ]?attn\b|\bflash[-_ ]?attention[-_ ]?2\b", 80,
          "use PyTorch SDPA (attn_implementation=\"sdpa\") or xformers' memory-efficient attention",
          "Dao-AILab/flash-attention README (FlashAttention-2: Ampere, Ada or Hopper GPUs)"),
)

# a question or a failure about it: "How can I use V100 for autoawq?", "does not work", "unsupported"
_ASKED = re.compile(r"(?i)\?|？|\berror\b|\bcrash\w*|\bfail\w*|\bnot (?:work|support)\w*|\bunsupported\b|\bcan(?:'t|not)\b|"
                    r"\bhow (?:can|do|to)\b|报错|不支持")


@rule("gpu-unsupported")
def below_a_tools_floor(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a tool of the table named, an NVIDIA card below its floor, a question or failure, and no error
    line of another family."""
    if any(e.family is not None for e in ctx.errors):
        return None
    text = _text(ctx)
    if not _ASKED.search(text):
        return None
    cards = [g for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_\d{2,3}", g.detail or "")]
    if not cards:
        return None
    for row in FLOORS:
        said = _lines_matching(ctx, row.said)[:1]
        below = [g for g in cards if int(g.detail[3:]) < row.floor]
        if not said or not below or len(below) < len(cards):
            continue   # not named, or a card at or above the floor is there too
        card = below[0]
        name = card.value.upper() if re.fullmatch(r"[a-z]\d{1,3}m?", card.value) else card.value
        have, need = f"{card.detail[3:-1]}.{card.detail[-1]}", f"{str(row.floor)[:-1]}.{str(row.floor)[-1]}"
        return _make("gpu-unsupported", f"{row.tool} does not support the {name}",
                     f"{row.tool}'s kernels are built for compute capability {need} and newer ({row.source}); the "
                     f"{name} is {have}, and no build of {row.tool} adds it",
                     f"{row.tool} does not run on the {name} (compute capability {have}; it needs {need} or newer): "
                     f"{row.instead}; or use a GPU of compute capability {need} or newer", [card], said,
                     confirmed=False)
    return None
