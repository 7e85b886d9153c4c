"""A multi-GPU run on one machine whose NCCL watchdog reports "CUDA error: an illegal memory access was encountered"
(ProcessGroupNCCL's watchdog thread, "Process group watchdog thread terminated with exception") (multi-gpu-transport).
The watchdog polls the communicator's CUDA work, so the fault surfaced in NCCL's kernels; on several workstations it
came from the transport or algorithm NCCL chose between the GPUs, and the run was stable once the shared-memory
transport and InfiniBand were left out and the ring algorithm forced. Isaac Lab's multi-GPU training docs carry these
variables as their troubleshooting note for this message.

Sources: isaac-sim/IsaacLab#4011 (tested variable by variable in the thread) and the documentation PR that refs it
(NCCL_SHM_DISABLE=1, NCCL_IB_DISABLE=1, NCCL_ALGO=Ring, "observed to restore stability on some affected systems");
NCCL's environment-variable docs (NCCL_SHM_DISABLE sends the traffic over the network stack instead of host shared
memory; NCCL_ALGO picks the algorithm)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, rule, _text

_ILLEGAL = re.compile(r"(?i)illegal memory access")
_WATCHDOG = re.compile(r"(?i)ProcessGroupNCCL|ncclCommWatchdog|watchdog thread terminated|\bNCCL\b")
# the programs whose docs carry the note: Isaac Lab and the RL libraries its multi-GPU training runs
_ISAAC = re.compile(r"(?i)isaac[\s_-]?lab|\bisaaclab\b|\brsl[_-]rl\b|\brl[_-]games\b|\bskrl\b|Isaac-[A-Z]\w+-v\d")
_NODES = re.compile(r"(?i)\b(?:[2-9]|two|several|multiple) (?:nodes|machines|servers|hosts)\b|--nnodes[= ]?[2-9]|"
                    r"multi[- ]?node|多机|多节点")


@rule("multi-gpu-transport")
def watchdog_illegal_access(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an illegal memory access on a line of NCCL's watchdog (or beside NCCL named in the paste), on one
    machine. Settled where the paste is Isaac Lab's (its docs name the fix); else the likely transport reading."""
    text = _text(ctx)
    if _NODES.search(text):
        return None   # between nodes: the network readings
    said = [e for e in _lines_matching(ctx, _ILLEGAL) if _WATCHDOG.search(e.line)]
    if not said and re.search(r"(?i)ProcessGroupNCCL|ncclCommWatchdog", text):
        said = _lines_matching(ctx, _ILLEGAL)
    if not said:
        return None
    isaac = bool(_ISAAC.search(text))
    diagnosis = _make(
        "multi-gpu-transport", "NCCL's transport between the GPUs faults (illegal memory access in its watchdog)",
        "the illegal memory access is reported by NCCL's watchdog, which polls the collectives' CUDA work: the fault "
        "came from the transport or algorithm NCCL chose between this machine's GPUs (its shared-memory path, an "
        "InfiniBand / RoCE device it found, the tree algorithm), not from the model code"
        + (" - Isaac Lab's multi-GPU docs name this message and the variables below" if isaac else ""),
        "export NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_ALGO=Ring before the launch (torchrun / python -m "
        "torch.distributed.run inherit them)" + (", as Isaac Lab's multi-GPU troubleshooting note says" if isaac else "")
        + "; once it runs, drop them one at a time to keep only the one needed; if it still faults, add "
        "NCCL_P2P_DISABLE=1, and run one GPU with CUDA_LAUNCH_BLOCKING=1 to rule out a kernel of the program itself; "
        "NCCL_DEBUG=INFO shows the transport chosen", [], said[:1], confirmed=isaac)
    # ahead of the family's general reading only where the docs name it; elsewhere an illegal access in the watchdog
    # may as well be the program's own kernel, so the other readings keep their place
    return _ahead_of(diagnosis, "multi-gpu-transport") if isaac else diagnosis
