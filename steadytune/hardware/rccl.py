"""RCCL on this machine's GPUs: which settings avoid the collective hangs the arch table records (gpu_facts.RCCL_ISSUES,
RDNA_P2P_SETTINGS), said in one clause for a hang message (the training watchdog) and as findings (doctor)."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from steadytune.hardware.gpu_facts import RDNA_P2P_SOURCE, normalise_gfx, rccl_issues_for, rccl_settings


def rocm_tuple(version: Optional[str]) -> Optional[tuple[int, int]]:
    """'7.2.1' / '6.3.42131' -> (7, 2) / (6, 3); None when unknown."""
    parts = (version or "").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def rccl_hint_for(archs: list[str], rccl_version: Optional[tuple[int, ...]] = None,
                  rocm_version: Optional[tuple[int, int]] = None, env: Optional[Mapping[str, str]] = None) -> str:
    """'' or one clause naming the settings not yet in `env` that avoid known RCCL hangs on these GPUs."""
    env = os.environ if env is None else env
    settings = rccl_settings(archs, rccl_version, rocm_version, hangs_only=True)
    missing = {k: v for k, v in settings.items() if env.get(k) != v}
    if not missing:
        return ""
    reasons = [f"{' '.join(f'{k}={v}' for k, v in issue.settings.items())}: {issue.source.split(';')[0]}"
               for issue in rccl_issues_for(archs, rccl_version, rocm_version) if issue.hang]
    if "NCCL_P2P_DISABLE" in missing:
        reasons.append(f"NCCL_P2P_DISABLE=1 on consumer RDNA boards without PCIe peer-to-peer: {RDNA_P2P_SOURCE.split(';')[0]}")
    names = ", ".join(sorted({normalise_gfx(a) for a in archs}))
    return (f"on {names} the known RCCL hangs are avoided with {' '.join(f'{k}={v}' for k, v in missing.items())} "
            f"({'; '.join(reasons)})")


def rccl_hang_hint(world_size: int = 1) -> str:
    """The hint for this process's GPUs (torch's view), '' without a ROCm GPU. Call it before a hang, not during one."""
    try:
        import torch   # lazy: hardware loads where torch does not; the watchdog calls this once at start

        if not torch.cuda.is_available() or not getattr(torch.version, "hip", None):
            return ""
        archs = [getattr(torch.cuda.get_device_properties(i), "gcnArchName", "") for i in range(torch.cuda.device_count())]
        try:
            rccl = tuple(torch.cuda.nccl.version())
        except Exception:   # a build without RCCL
            rccl = None
    except Exception:   # no GPU runtime at all: nothing to say
        return ""
    archs = [a for a in archs if a]
    if archs and len(archs) < world_size:     # one GPU per process: the other ranks have the same kind
        archs = archs * world_size
    return rccl_hint_for(archs, rccl, rocm_tuple(getattr(torch.version, "hip", None)))
