"""Several GeForce RTX 40-series (or 50-series) cards that hang in the first collective: NVIDIA's drivers give these
cards no peer-to-peer, yet older drivers report it as available and NCCL takes the P2P path, where the transfers never
arrive. accelerate checks for these cards itself ("RTX 4000 series doesn't support faster communication broadband via
P2P or IB. Please set NCCL_P2P_DISABLE="1" and NCCL_IB_DISABLE="1" or use `accelerate launch` which will do this
automatically", accelerate/utils/environment.py check_cuda_p2p_ib_support), and its troubleshooting page lists the hang
(https://huggingface.co/docs/accelerate/basic_tutorials/troubleshooting#hanging-code-and-timeout-errors)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

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
    return _make("multi-gpu-transport", f"the {card} cards have no peer-to-peer, and NCCL hangs on it",
                 f"GeForce cards such as the {card} have no GPU-to-GPU peer access, but older drivers report it and "
                 "NCCL sends the first all-reduce over that path, where it never completes: the run hangs with the "
                 "GPUs busy",
                 "export NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1 before launching (accelerate launch sets both itself "
                 "for RTX 4000 cards; a plain python or torchrun start does not), or update the NVIDIA driver so it "
                 "reports no P2P; check with NCCL_DEBUG=INFO that the channels go via SHM", [], said[:1],
                 confirmed=False)
