"""Training inside a container: is this one, and does it have what GPU training needs?

Seed 000's multi-GPU run deadlocked in a container that blocked RCCL's peer-to-peer path. The checks here:
- the container itself: /.dockerenv (Docker), /run/.containerenv (Podman), the `container` variable (Podman,
  systemd-nspawn, LXC), KUBERNETES_SERVICE_HOST, and container runtimes in /proc/1/cgroup;
- AMD devices passed in: /dev/kfd and /dev/dri/renderD* (`--device`), and their groups (`--group-add` with the
  host's numeric GID: group names may not exist in the image). ROCm "Running ROCm Docker containers":
  `docker run --device /dev/kfd --device /dev/dri --security-opt seccomp=unconfined` (seccomp "enables memory
  mapping, recommended for HPC");
- /dev/shm: Docker's default is 64 MB; NCCL/RCCL keep their shared-memory transport there and crash in
  ncclShmOpen without more (pytorch/tutorials PR #2475 gives its containers --shm-size=2gb); `--ipc=host` shares
  the host's instead;
- RCCL's own container recipe adds `--ipc=host --cap-add=SYS_PTRACE` (ROCm RCCL docs, "Running RCCL using
  Docker"): Docker drops CAP_SYS_PTRACE by default, and the calls processes use to share memory with each other
  (pidfd_getfd, process_vm_readv) then fail with EPERM;
- whether peer-to-peer between the GPUs of this container works at all (torch's can_device_access_peer).
Each problem names the `docker run` flag that fixes it, and one finding gathers them into a single line.
Paths are parameters (a fake / , /dev, /proc in tests).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from steadytune.doctor.findings import Finding
from steadytune.doctor.probe import Probe, peer_access

CAP_SYS_PTRACE = 19
SHM_ENOUGH = 1 << 30             # 1 GiB: NCCL/RCCL buffers for a few ranks, and room for loader workers
DOCKER_DEFAULT_SHM = 64 << 20
_RUNTIMES = re.compile(r"docker|kubepods|containerd|libpod|lxc|crio")


@dataclass
class ContainerFacts:
    kind: Optional[str] = None           # docker | podman | kubernetes | lxc | container | None
    evidence: list[str] = field(default_factory=list)
    shm_bytes: Optional[int] = None
    seccomp_filtering: Optional[bool] = None
    cap_sys_ptrace: Optional[bool] = None


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def detect_container(root: Path, proc_root: Path, env: Mapping[str, str]) -> tuple[Optional[str], list[str]]:
    """-> (kind of container or None, the evidence)."""
    evidence, kind = [], None
    if (root / ".dockerenv").exists():
        kind = kind or "docker"
        evidence.append("/.dockerenv exists")
    if (root / "run" / ".containerenv").exists():
        kind = kind or "podman"
        evidence.append("/run/.containerenv exists")
    if env.get("container"):
        kind = kind or env["container"]
        evidence.append(f"container={env['container']}")
    if env.get("KUBERNETES_SERVICE_HOST"):
        kind = kind or "kubernetes"
        evidence.append("KUBERNETES_SERVICE_HOST is set")
    for name in ("1/cgroup", "self/cgroup"):
        text = _read(proc_root / name) or ""
        hit = _RUNTIMES.search(text)
        if hit:
            kind = kind or ("kubernetes" if hit.group(0) == "kubepods" else hit.group(0))
            evidence.append(f"/proc/{name} names {hit.group(0)}")
            break
    return kind, evidence


def shm_size(dev_root: Path, proc_root: Path) -> Optional[int]:
    """Size of /dev/shm: from the mount table (Docker's tmpfs says size=65536k), else from statvfs."""
    mounts = _read(proc_root / "mounts") or ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "/dev/shm":
            size = re.search(r"(?:^|,)size=(\d+)([kmg]?)", parts[3])
            if size:
                return int(size.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[size.group(2)]
    try:
        st = os.statvfs(dev_root / "shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def process_status(proc_root: Path) -> tuple[Optional[bool], Optional[bool]]:
    """-> (seccomp filter active?, CAP_SYS_PTRACE in the effective set?) from /proc/self/status."""
    text = _read(proc_root / "self" / "status") or ""
    seccomp = re.search(r"^Seccomp:\s*(\d)", text, re.MULTILINE)
    caps = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", text, re.MULTILINE)
    return (int(seccomp.group(1)) == 2 if seccomp else None,
            bool(int(caps.group(1), 16) >> CAP_SYS_PTRACE & 1) if caps else None)


def container_facts(probe: Probe) -> ContainerFacts:
    kind, evidence = detect_container(probe.root, probe.proc_root, probe.env)
    seccomp, ptrace = process_status(probe.proc_root)
    return ContainerFacts(kind, evidence, shm_size(probe.dev_root, probe.proc_root), seccomp, ptrace)


def _size(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n // 2**20} MB"


def check_container(probe: Probe) -> list[Finding]:
    """In a container: device passthrough, groups, /dev/shm, seccomp, SYS_PTRACE and P2P, with the docker flags."""
    facts = container_facts(probe)
    if facts.kind is None:
        return []
    findings = [Finding.info("container", f"running in a container ({facts.kind}: {'; '.join(facts.evidence)})")]
    amd = probe.flavour == "rocm" or bool(probe.amd_evidence)
    gpus = [g for g in probe.info.gpus if not g.integrated]
    renders = sorted((probe.dev_root / "dri").glob("renderD*"))
    several = len(gpus) >= 2 or (amd and len(renders) >= 2)
    flags: list[str] = []
    if amd:
        kfd = probe.dev_root / "kfd"
        if not kfd.exists():
            flags.append("--device /dev/kfd")
        if not renders:
            flags.append("--device /dev/dri")
        if probe.uid != 0:
            for node in [kfd, *renders]:
                if node.exists() and node.stat().st_gid not in probe.groups:
                    flags.append(f"--group-add {node.stat().st_gid}")
        if facts.seccomp_filtering:
            findings.append(Finding.info("container", "a seccomp filter is active (Docker's default profile)",
                                         "ROCm's container docs recommend --security-opt seccomp=unconfined (memory "
                                         "mapping; HPC workloads)", "docker run ... --security-opt seccomp=unconfined"))
            flags.append("--security-opt seccomp=unconfined")
    if facts.shm_bytes is not None and facts.shm_bytes < SHM_ENOUGH:
        default = " (Docker's default)" if facts.shm_bytes == DOCKER_DEFAULT_SHM else ""
        finding = Finding.warn if several else Finding.info
        findings.append(finding("container", f"/dev/shm is {_size(facts.shm_bytes)}{default}",
                                "NCCL/RCCL put their shared-memory transport in /dev/shm (a multi-GPU run crashes in "
                                "ncclShmOpen or hangs), and data-loader workers pass batches through it",
                                "docker run ... --ipc=host   (or --shm-size=16g)"))
        flags.append("--ipc=host")
    elif facts.shm_bytes is not None:
        findings.append(Finding.info("container", f"/dev/shm is {_size(facts.shm_bytes)}"))
    if several and amd and facts.cap_sys_ptrace is False:
        findings.append(Finding.warn("container", "CAP_SYS_PTRACE is not granted to this container",
                                     "RCCL's container recipe runs with --ipc=host --cap-add=SYS_PTRACE: ranks share GPU "
                                     "memory through calls (pidfd_getfd, process_vm_readv) that need it, and Docker drops "
                                     "it by default",
                                     "docker run ... --cap-add=SYS_PTRACE --ipc=host"))
        flags.append("--cap-add=SYS_PTRACE")
    findings += _p2p_findings(probe, gpus, renders, amd)
    flags = list(dict.fromkeys(flags))
    if flags:
        base = "--device /dev/kfd --device /dev/dri " if amd else "--gpus all "
        extra = " ".join(f for f in flags if f not in base)
        findings.append(Finding.warn("container", f"start the container with: {' '.join(flags)}",
                                     "each flag is explained in the findings above",
                                     f"docker run {base}{extra} <image> ...".replace("  ", " ")))
    return findings


def _p2p_findings(probe: Probe, gpus: list, renders: list[Path], amd: bool) -> list[Finding]:
    if len(gpus) < 2:
        count = len(gpus) if gpus else len(renders)
        if count == 1:
            return [Finding.info("container", "peer-to-peer: only one GPU is visible in this container",
                                 "nothing to exchange between GPUs; pass more with --device /dev/dri/renderD<N> "
                                 "(AMD) or --gpus (NVIDIA) for a multi-GPU run")]
        return []
    if not probe.run_kernels:
        return []
    import torch
    blocked = [(a.index, b.index) for a in gpus for b in gpus if a.index < b.index and not peer_access(torch, a.index, b.index)]
    if blocked:
        return [Finding.warn("container", f"peer-to-peer is not possible between GPUs {blocked} in this container",
                             "collectives fall back to host memory; a container without --ipc=host (and, on ROCm, "
                             "SYS_PTRACE) or an IOMMU/ACS setting on the host blocks the P2P path",
                             "docker run ... --ipc=host" + (" --cap-add=SYS_PTRACE" if amd else "")
                             + "; to run stable and slower meanwhile: export NCCL_P2P_DISABLE=1")]
    return [Finding.info("container", f"peer-to-peer is possible between all {len(gpus)} GPUs of this container")]
