"""NCCL releases that predate a Blackwell GPU: collectives fail (or hang) across GPUs its release does not know."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text


# The first NCCL release that runs collectives on each Blackwell arch: 2.25.1 added sm_100; the consumer chips (sm_120:
# RTX 50xx, RTX PRO 6000) have less shared memory per block than 2.25 asks for ("ncclMaxSharedMem 82240 exceeds
# device/fn maxSharedMem 79856"), fixed in 2.26.2 (NCCL release notes; NVIDIA/nccl #1637, nccl-tests #291)
_NCCL_FIRST = {"sm_100": (2, 25, 1), "sm_120": (2, 26, 2)}
_NCCL_VERSION = re.compile(r"(?i)\bNCCL(?: version)?[\s:=v-]+(\d+)\.(\d+)\.(\d+)|nvidia-nccl-cu\d+[\s=]+(\d+)\.(\d+)\.(\d+)")
_SEVERAL_GPUS = re.compile(r"(?i)\b(?:two|2|2x|four|4|4x|eight|8|8x|multiple|several|multi)[- ]?(?:\w+ )?(?:GPUs?|cards?)\b|"
                           r"tensor[- _]parallel|tp[_-]?size|all_?reduce|alltoall|all_gather|nccl-tests|collective|nproc_per_node|"
                           r"world_size|torchrun|--multi_gpu|DistributedDataParallel|\bDDP\b|\b[2-9]x (?:NVIDIA |GeForce )?(?:RTX |B)\d")
_NCCL_TROUBLE = re.compile(r"(?i)\b(?:trouble|issue|problem|hangs?|stuck|did ?n[o']t help|errors?|fail\w*|crash\w*)\b")


@rule("arch-missing")
def nccl_predates_gpu(ctx: Context) -> Optional[Diagnosis]:
    """NCCL failing across Blackwell GPUs whose arch its release predates: collectives fail (or hang) whatever the
    transport settings, so NCCL_P2P_DISABLE does not help; a newer NCCL does. Settled where the paste shows the NCCL
    version, likely where it shows none."""
    text = _text(ctx)
    if not re.search(r"\bNCCL\b", text):
        return None
    gpus = [f for f in ctx.sheet.of("gpu") if f.detail in _NCCL_FIRST]
    if not gpus:
        return None
    arch = gpus[0].detail
    first = _NCCL_FIRST[arch]
    found = _NCCL_VERSION.search(text)
    version = tuple(int(g) for g in (found.groups()[:3] if found and found.group(1) else found.groups()[3:])) \
        if found else None
    if version is not None and version >= first:
        return None
    if version is None and _torch_with_new_nccl(ctx):
        return None   # torch 2.7+'s pip wheels pull in NCCL 2.26.2 (nvidia-nccl-cu12 pinned in its metadata)
    if re.search(r"(?i)NCCL_P2P_DISABLE=1\W{0,3}(?:fix|work|solv|help)|(?:fix|solv)\w* (?:it )?(?:with|by) "
                 r"(?:setting )?NCCL_P2P_DISABLE", text):
        return None   # the transport setting mended it: the transport's reading, not NCCL's age
    several = len(gpus) > 1 or _SEVERAL_GPUS.search(text)
    trouble = ctx.errors or _NCCL_TROUBLE.search(text)
    if not (several and trouble):
        return None
    need = ".".join(map(str, first))
    # "unhandled cuda error" is a kernel launch the CUDA runtime refused: on a Blackwell card with no new-enough torch
    # shown, that is the missing arch, not a transport that hangs
    cuda_error = [e for e in ctx.errors if re.search(r"(?i)unhandled cuda error", e.line)]
    said = f"NCCL {'.'.join(map(str, version))}" if version else "an NCCL older than " + need
    lines = ctx.of("multi-gpu-transport") or _lines_matching(ctx, r"\bNCCL\b")[:1]
    # torch's own collectives (DDP, torchrun) with no NCCL version said: a torch older than 2.7 has neither the NCCL
    # nor the kernels for Blackwell (2.7 is the first with CUDA 12.8 builds, its release notes), so the torch goes first
    via_torch = version is None and re.search(r"(?i)DistributedDataParallel|\bDDP\b|torchrun|\btorch\b|pytorch", text)
    first_fix = ("install torch 2.7 or newer built for CUDA 12.8: pip install -U torch --index-url "
                 "https://download.pytorch.org/whl/cu128 (the first builds with Blackwell kernels; their wheels pull in "
                 f"NCCL {need}+); otherwise ") if via_torch else ""
    return _make("arch-missing", f"{said} predates the {gpus[0].value} ({arch})",
                 f"NCCL releases before {need} do not run their collectives on {arch}; the failure stays whatever "
                 "the transport (NCCL_P2P_DISABLE=1 does not help)",
                 first_fix + f"upgrade NCCL to {need} or newer: pip install -U \"nvidia-nccl-cu12>={need}\" (the NCCL torch's pip "
                 f"wheels load), or a container release that ships NCCL {need}+; check with python -c 'import torch; "
                 "print(torch.cuda.nccl.version())'" + (_NEW_TORCH if version is None else ""), [gpus[0]], lines,
                 confirmed=version is not None or bool(cuda_error))


# with no NCCL version in the paste the torch is as likely to be too old as its NCCL: torch 2.7's CUDA 12.8 wheels
# carry both Blackwell's kernels and an NCCL that runs on it (their metadata pins nvidia-nccl-cu12 2.26.2)
_NEW_TORCH = ("; where torch itself is older than 2.7 (its CUDA 11.8 / 12.x wheels have no Blackwell kernels either), "
              "install torch 2.7 or newer built for CUDA 12.8: pip install torch --index-url "
              "https://download.pytorch.org/whl/cu128")


def _torch_with_new_nccl(ctx: Context) -> bool:
    """A pytorch.org / PyPI torch 2.7 or newer (a release, not an NGC or dev build): its wheels depend on NCCL 2.26.2+."""
    for fact in ctx.sheet.of("torch"):
        m = re.match(r"(\d+)\.(\d+)\.(\d+)(\+cu\d+)?$", fact.value)
        if m and (int(m.group(1)), int(m.group(2))) >= (2, 7):
            return True
    return False
