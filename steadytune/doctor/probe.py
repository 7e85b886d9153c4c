"""What the live checks look at: one `Probe` of this machine (torch build, GPUs, environment variables, device
files, KFD topology, rocminfo), and the installed versions of the packages doctor reports on.

torch is imported inside `collect_probe` only: a broken torch install (rocm.md row 9) must still get a
diagnosis instead of a traceback.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from steadytune.hardware.backend import detect
from steadytune.hardware.smi_parsers import ParseResult, parse_rocminfo

if TYPE_CHECKING:
    from steadytune.hardware.backend import HardwareInfo
    from steadytune.hardware.smi_parsers import GpuRecord


@dataclass
class Probe:
    """One snapshot of the machine. Paths and identity are fields so tests can point them at a tmp folder."""
    env: Mapping[str, str]
    info: "HardwareInfo"
    torch_version: str
    hip_version: Optional[str]
    cuda_version: Optional[str]
    arch_list: list[str]                        # torch.cuda.get_arch_list(): targets compiled into the wheel
    dev_root: Path
    sys_root: Path
    proc_root: Path
    uid: int
    groups: set[int]
    host_gpus: list["GpuRecord"] = field(default_factory=list)   # from rocminfo / kfd topology, if any
    host_archs: list[str] = field(default_factory=list)          # real gfx per kfd node (not overridden)
    host_nodes: list[tuple[int, str]] = field(default_factory=list)   # (KFD node id, real gfx) per GPU node
    amd_evidence: list[str] = field(default_factory=list)
    nvidia_evidence: list[str] = field(default_factory=list)
    run_kernels: bool = True
    root: Path = Path("/")                      # where /.dockerenv and /run/.containerenv would be
    rccl_version: Optional[tuple[int, ...]] = None   # torch.cuda.nccl.version(): RCCL's on ROCm
    site_paths: Optional[list[str]] = None      # where installed packages are read (None: sys.path)

    @property
    def flavour(self) -> str:
        return "rocm" if self.hip_version else "cuda" if self.cuda_version else "cpu"

    @property
    def rocm_root(self) -> Path:
        return Path(self.env.get("ROCM_PATH") or self.env.get("ROCM_HOME") or "/opt/rocm")

    def rocm_version(self) -> Optional[str]:
        """The installed ROCm release ("6.2.4"), from the version file under rocm_root; None without one."""
        try:
            return (self.rocm_root / ".info" / "version").read_text().strip().split("-")[0]
        except OSError:
            return None


def _kfd_nodes(sys_root: Path) -> list[tuple[int, str]]:
    """(node id, real gfx target) of the GPU nodes in the kernel's KFD topology. HSA_OVERRIDE_GFX_VERSION changes what
    rocminfo and torch report (it acts in user space), not this file, so it shows what the card really is; the node id
    is the N of HSA_OVERRIDE_GFX_VERSION_N."""
    archs = []
    nodes = sys_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for node in sorted(nodes.glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30):
        try:
            properties = (node / "properties").read_text()
        except OSError:
            continue
        match = re.search(r"^gfx_target_version\s+(\d+)", properties, re.MULTILINE)
        if match and int(match.group(1)) > 0:
            value = int(match.group(1))   # 90010 -> 9.0.10 -> gfx90a; 110001 -> gfx1101
            node_id = int(node.name) if node.name.isdigit() else len(archs) + 1
            archs.append((node_id, f"gfx{value // 10000}{(value // 100) % 100}{value % 100:x}"))
    return archs


def _run_tool(name: str, args: list[str], env: Mapping[str, str], timeout: float = 8.0) -> Optional[str]:
    path = shutil.which(name) or shutil.which(name, path=str(Path(env.get("ROCM_PATH", "/opt/rocm")) / "bin"))
    if path is None:
        return None
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout, env=dict(env))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def collect_probe(env: Optional[Mapping[str, str]] = None, dev_root: Path | str = "/dev",
                  sys_root: Path | str = "/sys", proc_root: Path | str = "/proc",
                  run_kernels: bool = True, run_tools: bool = True, root: Path | str = "/") -> Probe:
    import torch

    env = dict(os.environ if env is None else env)
    dev_root, sys_root, proc_root = Path(dev_root), Path(sys_root), Path(proc_root)
    info = detect(sys_root, proc_root)
    try:
        arch_list = list(torch.cuda.get_arch_list()) if torch.cuda.is_available() else []
    except Exception:
        arch_list = []
    probe = Probe(env=env, info=info, torch_version=torch.__version__,
                  hip_version=getattr(torch.version, "hip", None), cuda_version=getattr(torch.version, "cuda", None),
                  arch_list=arch_list, dev_root=dev_root, sys_root=sys_root, proc_root=proc_root,
                  uid=os.getuid(), groups=set(os.getgroups()) | {os.getgid()}, run_kernels=run_kernels,
                  root=Path(root))
    probe.host_nodes = _kfd_nodes(sys_root)
    probe.host_archs = [arch for _, arch in probe.host_nodes]
    try:
        probe.rccl_version = tuple(torch.cuda.nccl.version()) if probe.hip_version or probe.cuda_version else None
    except Exception:   # a build without NCCL/RCCL
        probe.rccl_version = None
    if (dev_root / "kfd").exists():
        probe.amd_evidence.append(f"{dev_root / 'kfd'} exists")
    if probe.host_archs:
        probe.amd_evidence.append(f"KFD topology lists {', '.join(probe.host_archs)}")
    if run_tools and probe.amd_evidence:
        text = _run_tool("rocminfo", [], env)
        if text:
            result = ParseResult(tool="rocminfo", source="rocminfo")
            try:
                parse_rocminfo(text, result)
            except Exception:
                result.gpus = []
            probe.host_gpus = result.gpus
            if result.gpus:
                probe.amd_evidence.append("rocminfo lists " + ", ".join(f"{g.name or '?'} ({g.arch})" for g in result.gpus))
    for marker in ("nvidiactl", "nvidia0"):
        if (dev_root / marker).exists():
            probe.nvidia_evidence.append(f"{dev_root / marker} exists")
            break
    if (proc_root / "driver" / "nvidia" / "version").exists():
        probe.nvidia_evidence.append("NVIDIA kernel driver loaded")
    return probe


# Installed packages, read from their metadata without importing them.

def package_version(package: str) -> Optional[str]:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


OPTIONAL_PACKAGES = {"bitsandbytes": "bitsandbytes", "deepspeed": "deepspeed", "liger-kernel": "liger_kernel",
                     "triton": "triton", "flash-attn": "flash_attn"}


def peer_access(torch: Any, a: int, b: int) -> bool:
    """Whether GPU `a` can reach GPU `b` directly (P2P); False where torch cannot tell."""
    try:
        return bool(torch.cuda.can_device_access_peer(a, b))
    except Exception:
        return False
