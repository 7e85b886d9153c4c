"""Several GeForce RTX 40-series (or 50-series) cards that hang in the first collective: NVIDIA's drivers give these
cards no peer-to-peer, yet older drivers report it as available and NCCL takes the P2P path, where the transfers never
arrive. accelerate checks for these cards itself ("RTX 4000 series doesn't support faster communication broadband via
P2P or IB. Please set NCCL_P2P_DISABLE="1" and NCCL_IB_DISABLE="1" or use `accelerate launch` which will do this
automatically", accelerate/utils/environment.py check_cuda_p2p_ib_support), and its troubleshooting page lists the hang
(https://huggingface.co/docs/accelerate/basic_tutorials/troubleshooting#hanging-code-and-timeout-errors).

One fact, one wording: the catalogue entry accelerate-rtx4000-no-p2p reads accelerate's refusal and holds the cause and
the fix; this rule only finds the same situation told in words (a hang, no refusal quoted) and speaks the entry's text,
so the two never drift apart (round 18: the rule's fuller fix - torchrun does not set the variables, a newer driver
reports no P2P - moved into the entry)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.hardware.error_catalogue import load_catalogue

_ENTRY = "accelerate-rtx4000-no-p2p"

_CONSUMER = re.compile(r"(?i)\bRTX\s?(?:40[6-9]0|50[6-9]0)(?:\s?(?:Ti|SUPER|D))?\b")
_SEVERAL = re.compile(r"(?i)\b([2-8]|two|four|eight)\s*[x×*]\s*(?:GeForce\s+)?RTX|\bRTX\s?\d{4}\w*\s*[x×*]\s*[2-8]\b|"
                      r"--multi_gpu|--num_processes[= ]?[2-8]|--nproc_per_node[= ]?[2-8]|\b[2-8] GPUs\b|multi[- ]?GPU")
_HANG = re.compile(r"(?i)\b(?:hangs?|hanging|hung|stuck|freez\w*|deadlock\w*|never (?:starts|finishes|returns))\b|"
                   r"卡住|卡死|不动")


@rule("multi-gpu-transport")
def consumer_cards_without_p2p(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: several RTX 40/50 GeForce cards named, a multi-GPU launch, and a hang said, with no NCCL log that
    would tell more (the rules that read NCCL's own lines come first)."""
    text = _text(ctx)
    if not _CONSUMER.search(text) or not _SEVERAL.search(text) or "NCCL_P2P_DISABLE" in text:
        return None
    said = _lines_matching(ctx, _HANG)
    if not said or re.search(r"NCCL INFO|NCCL WARN|Watchdog caught", text):
        return None
    card = _CONSUMER.search(text).group(0)
    entry = next(e for e in load_catalogue() if e.id == _ENTRY)
    return _make("multi-gpu-transport", f"the {card} cards have no peer-to-peer, and NCCL hangs on it",
                 entry.cause, entry.fix, [], said[:1], confirmed=False)
