"""`steadytune doctor`: can this machine train, what will it use, and what must change.

Live mode inspects this machine: the torch build, the GPUs torch sees, visibility and override variables,
device files and groups, precision and attention choices, optional libraries, multi-GPU settings and the
caching allocator. Offline mode (`--from DIR`, `--rocm-smi F`, ...) reads saved tool outputs of another
machine. Both produce `Finding`s (error / warning / info, each with what, why and fix); any error gives exit
code 1, and `train` refuses to start on errors unless `--force`.

The facts behind each check, with sources, are in research/rocm.md; "row N" in a comment points to its
symptom table. The policy (which dtype, which attention) is not decided here: it comes from hardware.py,
the module `train` obeys, so doctor reports exactly what `train` will do.

This module imports torch only inside functions: a broken torch install (rocm.md row 9) must still get a
diagnosis instead of a traceback.
"""

from __future__ import annotations

import argparse
import grp
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from steadytune.errors import UserError

if TYPE_CHECKING:
    from steadytune.hardware import HardwareInfo
    from steadytune.smi_parsers import GpuRecord, ParseResult

SEVERITIES = ("error", "warning", "info")


@dataclass
class Finding:
    severity: str          # error | warning | info
    check: str             # which check produced it (torch-build, visibility, ...)
    what: str
    why: str = ""
    fix: str = ""


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def _error(check: str, what: str, why: str = "", fix: str = "") -> Finding:
    return Finding("error", check, what, why, fix)


def _warn(check: str, what: str, why: str = "", fix: str = "") -> Finding:
    return Finding("warning", check, what, why, fix)


def _info(check: str, what: str, why: str = "", fix: str = "") -> Finding:
    return Finding("info", check, what, why, fix)


# ---------------------------------------------------------------------------------------------------------
# What the live checks look at
# ---------------------------------------------------------------------------------------------------------

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
    amd_evidence: list[str] = field(default_factory=list)
    nvidia_evidence: list[str] = field(default_factory=list)
    run_kernels: bool = True

    @property
    def flavour(self) -> str:
        return "rocm" if self.hip_version else "cuda" if self.cuda_version else "cpu"

    @property
    def rocm_root(self) -> Path:
        return Path(self.env.get("ROCM_PATH") or self.env.get("ROCM_HOME") or "/opt/rocm")


def _kfd_archs(sys_root: Path) -> list[str]:
    """Real gfx targets of the GPU nodes from the kernel's KFD topology. HSA_OVERRIDE_GFX_VERSION changes what
    rocminfo and torch report (it acts in user space), not this file, so it shows what the card really is."""
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
            archs.append(f"gfx{value // 10000}{(value // 100) % 100}{value % 100:x}")
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
                  run_kernels: bool = True, run_tools: bool = True) -> Probe:
    import torch
    from steadytune import hardware
    from steadytune.smi_parsers import ParseResult, parse_rocminfo

    env = dict(os.environ if env is None else env)
    dev_root, sys_root, proc_root = Path(dev_root), Path(sys_root), Path(proc_root)
    info = hardware.detect()
    try:
        arch_list = list(torch.cuda.get_arch_list()) if torch.cuda.is_available() else []
    except Exception:
        arch_list = []
    probe = Probe(env=env, info=info, torch_version=torch.__version__,
                  hip_version=getattr(torch.version, "hip", None), cuda_version=getattr(torch.version, "cuda", None),
                  arch_list=arch_list, dev_root=dev_root, sys_root=sys_root, proc_root=proc_root,
                  uid=os.getuid(), groups=set(os.getgroups()) | {os.getgid()}, run_kernels=run_kernels)
    probe.host_archs = _kfd_archs(sys_root)
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


# ---------------------------------------------------------------------------------------------------------
# Live checks: each takes the Probe and returns findings
# ---------------------------------------------------------------------------------------------------------

def _rocm_version(probe: Probe) -> Optional[str]:
    try:
        return (probe.rocm_root / ".info" / "version").read_text().strip().split("-")[0]
    except OSError:
        return None


def check_torch_build(probe: Probe) -> list[Finding]:
    """Rows 1-2: a CUDA or CPU wheel on an AMD machine (the PyPI default) sees no GPU at all."""
    build = {"rocm": f"ROCm {probe.hip_version}", "cuda": f"CUDA {probe.cuda_version}", "cpu": "CPU-only"}[probe.flavour]
    findings = [_info("torch-build", f"torch {probe.torch_version} ({build} build), Python {platform.python_version()}")]
    discrete_amd = not probe.host_gpus or any(not g.integrated for g in probe.host_gpus)
    if probe.amd_evidence and probe.flavour != "rocm":
        rocm = _rocm_version(probe)
        index = f"rocm{'.'.join(rocm.split('.')[:2])}" if rocm else "rocmX.Y"
        where = f" (ROCm {rocm} is installed at {probe.rocm_root})" if rocm else " (X.Y = your ROCm version: cat /opt/rocm/.info/version)"
        finding = _error if discrete_amd else _warn
        findings.append(finding(
            "torch-build",
            f"torch is a {build} build, but this machine has AMD GPUs ({'; '.join(probe.amd_evidence)})",
            "torch.version.hip is None, so torch.cuda cannot see AMD GPUs and training would run on the CPU. "
            "pip installs the CUDA/CPU wheel by default; a Python version without ROCm wheels falls back to CPU.",
            f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{index}{where}"))
    elif probe.nvidia_evidence and probe.flavour != "cuda" and not probe.amd_evidence:
        findings.append(_error(
            "torch-build", f"torch is a {build} build, but this machine has an NVIDIA GPU ({'; '.join(probe.nvidia_evidence)})",
            "Only a CUDA build of torch can use NVIDIA GPUs.",
            "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128 "
            "(pick the CUDA index that your driver supports: nvidia-smi shows the highest CUDA version)"))
    elif probe.flavour in ("rocm", "cuda") and not probe.info.gpus:
        findings.append(_error(
            "torch-build", f"torch is a {build} build but sees no GPU",
            "torch.cuda.is_available() is False: no driver, no device files, or every GPU hidden by a *_VISIBLE_DEVICES variable.",
            "see the device-files and visibility findings; on ROCm run `rocminfo` and check that it lists a GPU agent"))
    elif probe.flavour == "cpu" and not probe.amd_evidence and not probe.nvidia_evidence:
        findings.append(_info("torch-build", "no GPU found: training runs on the CPU in fp32",
                              "slow, but fine for small models and tests"))
    return findings


def check_devices(probe: Probe) -> list[Finding]:
    """GPUs torch sees (or rocminfo, when torch sees none); row 5: an iGPU enumerated first."""
    from steadytune.hardware import bf16_verdict

    findings = []
    gpus = probe.info.gpus or []
    for gpu in gpus:
        bf16 = bf16_verdict(gpu.arch)[0]
        findings.append(_info("devices", f"GPU {gpu.index}: {gpu.name}, {gpu.arch}, {gpu.memory_gib:g} GiB, "
                                         f"bf16 {'native' if bf16 else 'not native'}"
                                         + (", integrated (not used for training)" if gpu.integrated else "")))
    if not gpus and probe.host_gpus:
        for g in probe.host_gpus:
            findings.append(_info("devices", f"rocminfo GPU {g.index}: {g.name}, {g.arch}, "
                                             f"{g.memory_gib if g.memory_gib is not None else '?'} GiB (torch does not see it)"))
    listed = gpus or probe.host_gpus
    if listed and listed[0].integrated and any(not g.integrated for g in listed):
        discrete = ",".join(str(g.index) for g in listed if not g.integrated)
        var = "CUDA_VISIBLE_DEVICES" if probe.flavour == "cuda" else "HIP_VISIBLE_DEVICES"
        findings.append(_warn(
            "devices", f"GPU 0 is an integrated GPU ({listed[0].name}, {listed[0].arch}); the discrete GPU is {discrete}",
            "Tools that take device 0 (and every rank of a multi-GPU launch) would run on the iGPU.",
            f"export {var}={discrete}   (or ROCR_VISIBLE_DEVICES=<dGPU UUID>)"))
    elif listed and all(g.integrated for g in listed):
        findings.append(_warn("devices", "only an integrated GPU is present: steadytune trains on the CPU",
                              "iGPUs share system memory and are often not covered by the ROCm wheels"))
    return findings


def _visible_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def check_visibility(probe: Probe) -> list[Finding]:
    """Rows 6-7: HIP/ROCR/CUDA_VISIBLE_DEVICES, how they combine, conflicts, empty selections."""
    import torch

    env, findings = probe.env, []
    names = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
    set_vars = {n: env[n] for n in names if n in env}
    if not set_vars:
        return findings
    findings.append(_info("visibility", "set: " + ", ".join(f"{k}={v!r}" for k, v in set_vars.items())))
    for name, value in set_vars.items():
        entries = _visible_list(value)
        if not entries or entries[0] == "-1":
            findings.append(_warn("visibility", f"{name}={value!r} hides every GPU", "training would run on the CPU",
                                  f"unset {name}, or list the GPUs to use (e.g. {name}=0)"))
    rocr, hip, cuda = (set_vars.get(n) for n in names[:3])
    if probe.flavour == "rocm":
        if rocr is not None and (hip is not None or cuda is not None):
            second_name = "HIP_VISIBLE_DEVICES" if hip is not None else "CUDA_VISIBLE_DEVICES"
            second = _visible_list(hip if hip is not None else cuda)
            first = _visible_list(rocr)
            if len(second) > len(first):
                findings.append(_error(
                    "visibility", f"{second_name} lists {len(second)} devices but ROCR_VISIBLE_DEVICES only {len(first)}",
                    "ROCR filters first and HIP indexes what is left; torch raises "
                    "'HIP_VISIBLE_DEVICES contains more devices than ROCR_VISIBLE_DEVICES'.",
                    "set one layer only: ROCR_VISIBLE_DEVICES on Linux (or HIP_VISIBLE_DEVICES), not both"))
            else:
                effective = [first[int(i)] for i in second if i.isdigit() and int(i) < len(first)]
                findings.append(_warn(
                    "visibility", f"two visibility layers set: ROCR_VISIBLE_DEVICES={rocr!r} then {second_name}={','.join(second)!r}"
                                  f" -> physical devices {effective}",
                    "ROCR is applied first, HIP re-indexes the survivors; launchers (Ray, verl) refuse this mix.",
                    "set one layer only"))
        if hip is not None and cuda is not None and _visible_list(hip) != _visible_list(cuda):
            findings.append(_warn("visibility", f"HIP_VISIBLE_DEVICES={hip!r} and CUDA_VISIBLE_DEVICES={cuda!r} disagree",
                                  "on ROCm torch uses HIP_VISIBLE_DEVICES and ignores CUDA_VISIBLE_DEVICES",
                                  "export HIP_VISIBLE_DEVICES only"))
        elif cuda is not None and hip is None and rocr is None:
            findings.append(_info("visibility", "CUDA_VISIBLE_DEVICES is set on ROCm",
                                  "HIP honours it today, but newer HIP docs list only HIP_VISIBLE_DEVICES",
                                  f"export HIP_VISIBLE_DEVICES={cuda}"))
    elif probe.flavour == "cuda" and (rocr is not None or hip is not None):
        findings.append(_info("visibility", "ROCR/HIP_VISIBLE_DEVICES are ignored by a CUDA build of torch",
                              fix="use CUDA_VISIBLE_DEVICES on NVIDIA"))
    # Row 7: a variable changed after torch initialised the GPU runtime has no effect in this process.
    chosen = hip if probe.flavour == "rocm" and hip is not None else cuda if cuda is not None else hip
    if chosen is not None and probe.info.gpus and torch.cuda.is_initialized():
        wanted = len(_visible_list(chosen))
        if wanted and wanted != len(probe.info.gpus):
            findings.append(_warn(
                "visibility", f"the visibility variable lists {wanted} GPUs but torch sees {len(probe.info.gpus)}",
                "the variable was changed after torch initialised HIP/CUDA (it is read once, at initialisation)",
                "set *_VISIBLE_DEVICES in the shell before starting Python, not in code after importing torch"))
    return findings


def _override_target(value: str) -> Optional[str]:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", value.strip())
    if not match:
        return None
    major, minor, stepping = (int(g) for g in match.groups())
    return f"gfx{major}{minor}{stepping:x}"


def check_hsa_override(probe: Probe) -> list[Finding]:
    """Rows 3-4: HSA_OVERRIDE_GFX_VERSION must be X.Y.Z, within the card's family, and only where needed."""
    from steadytune.hardware import OFFICIAL_WHEEL_ARCHS, gfx_family, normalise_gfx

    findings = []
    overrides = {k: v for k, v in probe.env.items() if k == "HSA_OVERRIDE_GFX_VERSION" or k.startswith("HSA_OVERRIDE_GFX_VERSION_")}
    if not overrides:
        return findings
    if probe.flavour == "cuda":
        return [_info("hsa-override", "HSA_OVERRIDE_GFX_VERSION is set but this is a CUDA build; it is ignored")]
    wheel_archs = {normalise_gfx(a) for a in probe.arch_list} or set(OFFICIAL_WHEEL_ARCHS)
    for name, value in sorted(overrides.items()):
        target = _override_target(value)
        if target is None:
            findings.append(_error("hsa-override", f"{name}={value!r} is not in the form X.Y.Z",
                                   "ROCr ignores a malformed override ('HSA_OVERRIDE_GFX_VERSION ... is invalid'), "
                                   "so the GPU keeps its real target",
                                   f"export {name}=11.0.0 (RDNA3) or 10.3.0 (RDNA2), or unset it"))
            continue
        findings.append(_info("hsa-override", f"{name}={value} makes the GPU report {target}"))
        real = probe.host_archs
        if name != "HSA_OVERRIDE_GFX_VERSION":   # the per-node form names a KFD node id (the CPU is node 0)
            continue
        for arch in dict.fromkeys(real):
            if gfx_family(arch) != gfx_family(target):
                findings.append(_error(
                    "hsa-override", f"{name}={value} ({target}) is from another family than the GPU ({arch})",
                    "code objects for another family do not run: HSA_STATUS_ERROR_INVALID_ISA or 'invalid device function'",
                    f"use a {gfx_family(arch)} value or unset {name}"))
            elif arch in wheel_archs:
                findings.append(_warn(
                    "hsa-override", f"{name} is set, but {arch} is supported by this torch as it is",
                    "the override makes the GPU run code built for another chip; it is only a workaround for unlisted chips",
                    f"unset {name}"))
        if target not in wheel_archs:
            findings.append(_warn("hsa-override", f"this torch has no code objects for {target} either",
                                  f"the wheel was built for {', '.join(sorted(wheel_archs))}",
                                  "choose an override whose target is in that list"))
    return findings


def check_build_env(probe: Probe) -> list[Finding]:
    """PYTORCH_ROCM_ARCH (read only when extensions are compiled) and the ROCm root those builds use."""
    from steadytune.hardware import normalise_gfx

    findings, env = [], probe.env
    rocm = _rocm_version(probe)
    if probe.flavour == "rocm" or probe.amd_evidence:
        findings.append(_info("rocm", f"ROCm {rocm} at {probe.rocm_root}" if rocm else f"no ROCm version file under {probe.rocm_root}"))
    for name in ("ROCM_PATH", "ROCM_HOME"):
        if name in env and not Path(env[name]).is_dir():
            findings.append(_warn("rocm", f"{name}={env[name]} is not a folder",
                                  "extension builds (DeepSpeed ops, bitsandbytes, flash-attn) look for hipcc there",
                                  f"export {name}=/opt/rocm (or your ROCm install folder)"))
    wanted = env.get("PYTORCH_ROCM_ARCH")
    gpus = [g.arch for g in probe.info.gpus if g.arch.startswith("gfx")] or probe.host_archs
    if wanted is not None and gpus:
        listed = {normalise_gfx(a) for a in re.split(r"[;\s,]+", wanted) if a}
        missing = sorted({normalise_gfx(a) for a in gpus} - listed)
        if missing:
            findings.append(_warn(
                "rocm", f"PYTORCH_ROCM_ARCH={wanted!r} does not include {', '.join(missing)}",
                "extensions compiled now (DeepSpeed JIT ops, flash-attn, bitsandbytes) would lack code for this GPU "
                "('invalid device function' later); it has no effect on torch itself",
                f"export PYTORCH_ROCM_ARCH=\"{';'.join(sorted(listed | set(missing)))}\""))
    return findings


def device_access(mode: int, owner: int, group: int, uid: int, groups: set[int]) -> bool:
    """Whether a user could open a device node read-write, from its permission bits."""
    if uid == 0:
        return True
    if owner == uid:
        return bool(mode & stat.S_IRUSR and mode & stat.S_IWUSR)
    if group in groups:
        return bool(mode & stat.S_IRGRP and mode & stat.S_IWGRP)
    return bool(mode & stat.S_IROTH and mode & stat.S_IWOTH)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def check_device_files(probe: Probe) -> list[Finding]:
    """Row 8: /dev/kfd and /dev/dri/renderD* must exist and be read-write for this user (containers!)."""
    if probe.flavour != "rocm" and not probe.amd_evidence:
        return []
    findings = []
    kfd = probe.dev_root / "kfd"
    docker_fix = ("docker run --device /dev/kfd --device /dev/dri --group-add video "
                  "--group-add $(getent group render | cut -d: -f3) ...   (on a host: sudo usermod -a -G render,video $LOGNAME, then log in again)")
    if not kfd.exists():
        findings.append(_error("device-files", f"{kfd} does not exist",
                               "ROCm talks to every AMD GPU through /dev/kfd; in a container it must be passed in, "
                               "on a host the amdgpu driver is not loaded",
                               docker_fix))
        return findings
    nodes = [kfd, *sorted((probe.dev_root / "dri").glob("renderD*"))]
    if len(nodes) == 1:
        findings.append(_error("device-files", f"no {probe.dev_root / 'dri'}/renderD* nodes",
                               "each GPU needs its render node next to /dev/kfd", docker_fix))
    for node in nodes:
        st = node.stat()
        if not device_access(st.st_mode, st.st_uid, st.st_gid, probe.uid, probe.groups):
            findings.append(_error(
                "device-files", f"{node} is not read-write for this user (owner group {_group_name(st.st_gid)}, gid {st.st_gid})",
                "'Unable to open /dev/kfd read-write: Permission denied'; rocminfo and torch see no GPU",
                f"add the user to group {_group_name(st.st_gid)} (gid {st.st_gid}): {docker_fix}"))
    if not (probe.sys_root / "module" / "amdgpu").exists():
        findings.append(_warn("device-files", "the amdgpu kernel module is not visible under /sys/module",
                              "the kernel driver comes from the host; a container brings only user-space ROCm"))
    return findings


def check_arch_coverage(probe: Probe) -> list[Finding]:
    """Row 3: the wheel must contain code objects for each GPU's target ('invalid device function' otherwise)."""
    from steadytune.hardware import normalise_gfx, override_for_arch

    if not probe.arch_list or not probe.info.gpus:
        return []
    findings = []
    if probe.flavour == "rocm":
        compiled = {normalise_gfx(a) for a in probe.arch_list}
        for gpu in probe.info.gpus:
            if gpu.integrated or gpu.arch in compiled:
                continue
            override = override_for_arch(gpu.arch)
            findings.append(_error(
                "arch-coverage", f"GPU {gpu.index} ({gpu.arch}) is not among the targets this torch was built for",
                f"torch.cuda.get_arch_list() = {sorted(compiled)}: expect 'hipErrorNoBinaryForGpu' / 'invalid device function'",
                f"export HSA_OVERRIDE_GFX_VERSION={override}" if override else
                "install a torch build for this architecture (e.g. AMD's or TheRock's per-arch wheels)"))
    else:
        compiled = {a for a in probe.arch_list}
        for gpu in probe.info.gpus:
            cc = int(gpu.arch[3:]) if gpu.arch.startswith("sm_") and gpu.arch[3:].isdigit() else None
            ptx = [int(a[8:]) for a in compiled if a.startswith("compute_") and a[8:].isdigit()]
            if cc is not None and gpu.arch not in compiled and not any(p <= cc for p in ptx):
                findings.append(_error("arch-coverage", f"GPU {gpu.index} ({gpu.arch}) has no kernels in this torch build",
                                       f"torch.cuda.get_arch_list() = {sorted(compiled)}",
                                       "install a newer torch wheel (a newer CUDA index) that lists this architecture"))
    return findings


def check_precision(probe: Probe) -> list[Finding]:
    """Rows 11-13: bf16 by architecture (never is_bf16_supported() on ROCm), fp16 caveats, what train picks."""
    from steadytune.hardware import bf16_verdict, choose_precision

    dtype, reason = choose_precision(probe.info, "auto", False)
    findings = [_info("precision", f"train with bf16: auto uses {dtype}", reason)]
    gpu = probe.info.primary
    if gpu is None:
        return findings
    native, why = bf16_verdict(gpu.arch)
    if not native:
        findings.append(_warn(
            "precision", f"{why}",
            "bf16: true (the LLaMA-Factory default) aborts in Triton kernels ('Cannot select: intrinsic "
            "%llvm.amdgcn.fdot2.bf16.bf16') or runs emulated; fp16 can overflow on bf16-pretrained models (NaN loss)",
            "leave bf16: auto (fp32), or set fp16: true (loss scaling; the guard watches for overflow)"))
    if gpu.arch == "gfx90a":
        findings.append(_warn(
            "precision", "gfx90a (MI200) flushes fp16 denormals to zero in its matrix cores",
            f"with torch >= 2.7 the hipBLASLt path skipped the backward workaround, so fp16 training slowly diverges "
            f"(pytorch #182952); this torch is {probe.torch_version}",
            "train in bf16 (the default here); if fp16 is a must: torch.backends.cuda.preferred_blas_library('cublas')"))
    return findings


def _sdpa_backends():
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "mem-efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def probe_sdpa(device: Any, dtype: Any) -> tuple[dict[str, Optional[str]], list[str]]:
    """Run a tiny causal attention under each SDPA backend. -> ({backend: None if it ran else the error}, warnings)."""
    import torch
    from torch.nn.attention import sdpa_kernel

    results: dict[str, Optional[str]] = {}
    caught: list[str] = []
    q = torch.randn(1, 2, 16, 64, device=device, dtype=dtype)
    for name, backend in _sdpa_backends().items():
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
                if q.is_cuda:
                    torch.cuda.synchronize()
                results[name] = None
            except Exception as e:
                results[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        caught.extend(str(r.message) for r in records)
    return results, caught


def diagnose_sdpa(results: Mapping[str, Optional[str]], caught: list[str], backend: str,
                  torch_version: str, hip_version: Optional[str]) -> list[Finding]:
    """Rows 14-16 from the probe's outcome and the warnings torch printed."""
    working = [n for n, err in results.items() if err is None]
    findings = [_info("attention", f"SDPA backends that run here: {', '.join(working) or 'none'}")]
    text = "\n".join(caught)
    if "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" in text:
        findings.append(_warn("attention", "fused SDPA is experimental for this AMD GPU and falls back to the slow math kernel",
                              "the bundled AOTriton marks this architecture experimental",
                              "export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 (check the loss curve), or upgrade torch"))
    elif re.search(r"not compiled with (flash|memory efficient) attention", text, re.IGNORECASE):
        findings.append(_warn("attention", "this torch was built without fused attention for this GPU (math fallback: slow)",
                              "ROCm builds before AOTriton (torch <= 2.2) lack flash and mem-efficient SDPA",
                              "upgrade torch to a current ROCm wheel"))
    elif backend in ("rocm", "cuda") and results and all(results.get(n) for n in ("flash", "mem-efficient")):
        findings.append(_warn("attention", "neither flash nor mem-efficient SDPA runs on this GPU: attention uses the math kernel",
                              "; ".join(f"{n}: {results[n]}" for n in ("flash", "mem-efficient")),
                              "upgrade torch; training still works, only slower"))
    if hip_version and torch_version.startswith("2.6.0") and hip_version.startswith("6.2"):
        findings.append(_warn("attention", "torch 2.6.0 + ROCm 6.2: mem-efficient SDPA gives wrong outputs with a padding mask",
                              "AOTriton bug (pytorch #147460)", "upgrade torch (or disable the mem-efficient backend)"))
    return findings


# flash-attn's CK backend compiles only for these archs in release v2.8.3 (row 17).
FLASH_ATTN_CK_ARCHS = ("gfx90a", "gfx942", "gfx950")


def explain_flash_attn_failure(message: str) -> tuple[str, str]:
    """Rows 18-19: -> (why, fix) for a flash-attn import/run error."""
    if "flash_attn_2_cuda" in message and ("No module" in message or "ModuleNotFound" in message):
        return ("a Triton-backend (ROCm) build of flash-attn <= 2.8.3 imports its CK extension unless the variable is set",
                "export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE")
    if "undefined symbol" in message:
        return ("the flash-attn binary was built against another torch version",
                "pip install --no-build-isolation --force-reinstall flash-attn (rebuild against this torch)")
    return ("flash-attn is installed but unusable here", "use flash_attn: sdpa (the default) or reinstall flash-attn for this platform")


def check_attention(probe: Probe) -> list[Finding]:
    import torch
    from steadytune.hardware import arch_supports_bf16, choose_attention, device_for, flash_attn_status

    info, findings = probe.info, []
    impl, why = choose_attention(info, "auto")
    findings.append(_info("attention", f"train with flash_attn: auto uses {impl}", why))
    if probe.run_kernels:
        gpu = info.primary
        dtype = (torch.float32 if gpu is None else torch.bfloat16 if arch_supports_bf16(gpu.arch) else torch.float16)
        results, caught = probe_sdpa(device_for(info), dtype)
        findings += diagnose_sdpa(results, caught, info.backend, probe.torch_version, probe.hip_version)
    if importlib.util.find_spec("flash_attn") is not None:
        ok, status = flash_attn_status() if probe.run_kernels else (True, "flash-attn is installed (not run)")
        if ok:
            findings.append(_info("attention", status, fix="flash_attn: fa2 in the YAML uses it"))
        else:
            why, fix = explain_flash_attn_failure(status)
            findings.append(_warn("attention", status, why, fix))
    elif probe.flavour == "rocm" and info.primary is not None and info.primary.arch not in FLASH_ATTN_CK_ARCHS:
        findings.append(_info("attention", f"flash-attn is not installed; its CK build does not support {info.primary.arch}",
                              f"release v2.8.3 builds CK kernels only for {', '.join(FLASH_ATTN_CK_ARCHS)}",
                              "nothing to do: SDPA is the default; for flash-attn use its Triton backend "
                              "(FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE pip install --no-build-isolation flash-attn)"))
    return findings


def _version(package: str) -> Optional[str]:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


OPTIONAL_PACKAGES = {"bitsandbytes": "bitsandbytes", "deepspeed": "deepspeed", "liger-kernel": "liger_kernel",
                     "triton": "triton", "flash-attn": "flash_attn"}


def check_optional_libs(probe: Probe) -> list[Finding]:
    """Rows 20-21, without importing the packages (deepspeed alone takes seconds to import)."""
    findings = []
    versions = {p: _version(p) or (_version("pytorch-triton-rocm") if p == "triton" else None) for p in OPTIONAL_PACKAGES}
    installed = {p: v for p, v in versions.items() if v}
    missing = [p for p, v in versions.items() if not v]
    findings.append(_info("optional", "installed: " + (", ".join(f"{p} {v}" for p, v in installed.items()) or "none")
                          + ("; not installed: " + ", ".join(missing) if missing else "")))
    gpu = probe.info.primary
    arch = gpu.arch if gpu else ""
    if "bitsandbytes" in installed and probe.flavour == "rocm":
        v = _version_tuple(installed["bitsandbytes"])
        if v < (0, 45):
            findings.append(_warn("optional", f"bitsandbytes {installed['bitsandbytes']} has no ROCm support",
                                  "ROCm support starts with the 0.45 multi-backend release",
                                  "pip install -U 'bitsandbytes>=0.50'"))
        elif v < (0, 50) and not arch.startswith(("gfx90a", "gfx942", "gfx110")):
            findings.append(_warn("optional", f"bitsandbytes {installed['bitsandbytes']} ships no kernels for {arch or 'this GPU'}",
                                  "'Error invalid device function ... ops.hip': before 0.50 the ROCm binaries cover gfx90a, gfx942 and RDNA3",
                                  "pip install -U 'bitsandbytes>=0.50', or build with -DBNB_ROCM_ARCH=<arch>"))
    if "deepspeed" in installed and probe.flavour == "rocm":
        hipcc = shutil.which("hipcc") or (probe.rocm_root / "bin" / "hipcc").exists()
        if not hipcc:
            findings.append(_warn("optional", "deepspeed is installed but hipcc is not found",
                                  "DeepSpeed JIT-compiles its ops (fused_adam, cpu_adam) with hipcc; old versions fail with "
                                  "'CUDA_HOME does not exist, unable to compile CUDA op(s)'",
                                  "export ROCM_HOME=/opt/rocm and PYTORCH_ROCM_ARCH=<your gfx>; pip install -U deepspeed"))
        if _version_tuple(installed["deepspeed"]) < (0, 15, 3):
            findings.append(_warn("optional", f"deepspeed {installed['deepspeed']} has known ROCm op-build failures",
                                  "FUSED_ADAM builds broke on ROCm until 0.15.3 (DeepSpeed #6600)", "pip install -U deepspeed"))
    if "liger-kernel" in installed and probe.flavour == "cpu":
        findings.append(_info("optional", "liger-kernel needs a GPU (Triton); it is not used on the CPU"))
    return findings


def check_multi_gpu(probe: Probe) -> list[Finding]:
    """Rows 22-23: NCCL/RCCL variables, peer access, the iommu kernel flag, the socket interface."""
    import torch

    env, findings = probe.env, []
    nccl = {k: v for k, v in env.items() if k.startswith(("NCCL_", "RCCL_")) or k == "HSA_FORCE_FINE_GRAIN_PCIE"}
    if nccl:
        findings.append(_info("multi-gpu", "set: " + ", ".join(f"{k}={v}" for k, v in sorted(nccl.items()))))
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname:
        interfaces = sorted(p.name for p in (probe.sys_root / "class" / "net").glob("*"))
        if interfaces and not _ifname_matches(ifname, interfaces):
            findings.append(_error("multi-gpu", f"NCCL_SOCKET_IFNAME={ifname!r} matches no network interface ({', '.join(interfaces)})",
                                   "NCCL/RCCL cannot open its socket: init hangs until 'Watchdog caught collective operation timeout'",
                                   "set NCCL_SOCKET_IFNAME to the interface that connects the nodes (see `ip -br addr`)"))
    gpus = [g for g in probe.info.gpus if not g.integrated]
    if len(gpus) < 2:
        return findings
    if probe.flavour == "rocm":
        try:
            cmdline = (probe.proc_root / "cmdline").read_text()
        except OSError:
            cmdline = None
        if cmdline is not None and "iommu=pt" not in cmdline:
            findings.append(_warn("multi-gpu", "the kernel command line lacks iommu=pt",
                                  "RCCL warns 'Missing \"iommu=pt\" from kernel command line'; with IOMMU/ACS in the way "
                                  "PCIe peer-to-peer hangs at the first all-reduce",
                                  "add iommu=pt (and amd_iommu=on) to the kernel command line; meanwhile NCCL_P2P_DISABLE=1"))
    if probe.run_kernels:
        blocked = [(a.index, b.index) for a in gpus for b in gpus
                   if a.index < b.index and not _peer_access(torch, a.index, b.index)]
        if blocked:
            findings.append(_warn("multi-gpu", f"no peer-to-peer access between GPUs {blocked}",
                                  "collectives go through host memory (slower), and broken P2P is the usual cause of hangs",
                                  "check ACS/IOMMU settings; NCCL_P2P_DISABLE=1 avoids P2P altogether"))
        else:
            findings.append(_info("multi-gpu", f"peer-to-peer access between all {len(gpus)} GPUs"))
    if "NCCL_IB_DISABLE" not in env and not (probe.sys_root / "class" / "infiniband").exists():
        findings.append(_info("multi-gpu", "no InfiniBand/RoCE device found",
                              "single-node runs need nothing; multi-node runs without IB should say so",
                              "for multi-node: export NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=<interface>"))
    return findings


def _ifname_matches(spec: str, interfaces: list[str]) -> bool:
    """NCCL_SOCKET_IFNAME syntax: comma list of prefixes; '=' for exact names; '^' to exclude."""
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    names = [n for n in spec.lstrip("=").split(",") if n]
    hit = [i for i in interfaces if any(i == n if exact else i.startswith(n) for n in names)]
    return bool(set(interfaces) - set(hit)) if exclude else bool(hit)


def _peer_access(torch: Any, a: int, b: int) -> bool:
    try:
        return bool(torch.cuda.can_device_access_peer(a, b))
    except Exception:
        return False


ALLOCATOR_OPTIONS = {"max_split_size_mb", "max_non_split_rounding_mb", "garbage_collection_threshold",
                     "roundup_power2_divisions", "expandable_segments", "backend", "release_lock_on_cudamalloc",
                     "release_lock_on_hipmalloc", "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
                     "pinned_num_register_threads", "pinned_use_background_threads", "per_process_memory_fraction",
                     "graph_capture_record_stream_reuse", "pinned_reserve_segment_size_mb"}


def check_allocator(probe: Probe) -> list[Finding]:
    """Row 24: which allocator variable torch reads, unknown options, expandable_segments on ROCm."""
    env, findings = probe.env, []
    names = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
    set_vars = {n: env[n] for n in names if n in env}
    if not set_vars:
        return findings
    # Newer torch reads PYTORCH_ALLOC_CONF first; older read the CUDA, then the HIP spelling. Only one is parsed.
    order = names if _version_tuple(probe.torch_version) >= (2, 9) else names[1:] + names[:1]
    used = next(n for n in order if n in set_vars)
    findings.append(_info("allocator", f"torch reads {used}={set_vars[used]!r}"))
    if len(set(set_vars.values())) > 1:
        ignored = [n for n in set_vars if n != used]
        findings.append(_warn("allocator", f"several allocator variables with different values; {', '.join(ignored)} ignored",
                              "torch parses only the first one it finds", f"keep only {used}"))
    options = dict(item.split(":", 1) if ":" in item else (item, "") for item in set_vars[used].split(",") if item.strip())
    unknown = sorted(k.strip() for k in options if k.strip() not in ALLOCATOR_OPTIONS)
    if unknown:
        findings.append(_error("allocator", f"unknown allocator option(s) in {used}: {', '.join(unknown)}",
                               "torch raises 'Unrecognized CachingAllocator option' at the first GPU allocation",
                               f"remove them; known options: {', '.join(sorted(ALLOCATOR_OPTIONS))}"))
    expandable = options.get("expandable_segments", "").strip().lower() == "true"
    if expandable and probe.flavour == "rocm":
        hip = _version_tuple(probe.hip_version or "0")
        if _version_tuple(probe.torch_version) < (2, 11) or hip < (7, 0):
            findings.append(_warn("allocator", "expandable_segments:True on this ROCm torch",
                                  "ignored before torch 2.11 + ROCm 7.0 ('not supported on this platform'); "
                                  "newer nightlies have hung in hsaKmtMemoryVaMap with it (pytorch #192259)",
                                  "for fragmentation use max_split_size_mb:512 or garbage_collection_threshold:0.6 instead"))
    return findings


def check_wsl(probe: Probe) -> list[Finding]:
    """Row 10: pytorch.org ROCm wheels do not work under WSL2 (hipErrorNoDevice)."""
    try:
        version = (probe.proc_root / "version").read_text()
    except OSError:
        return []
    if "microsoft" in version.lower() and (probe.flavour == "rocm" or probe.amd_evidence):
        return [_warn("wsl", "WSL2 detected with ROCm",
                      "the pytorch.org ROCm wheels fail under WSL with hipErrorNoDevice",
                      "install AMD's WSL wheels from repo.radeon.com and their libhsa-runtime64.so")]
    return []


LIVE_CHECKS: tuple[Callable[[Probe], list[Finding]], ...] = (
    check_torch_build, check_devices, check_visibility, check_hsa_override, check_build_env, check_device_files,
    check_arch_coverage, check_precision, check_attention, check_optional_libs, check_multi_gpu, check_allocator,
    check_wsl,
)


def explain_torch_import_error(error: BaseException) -> Finding:
    """Row 9: torch itself does not import (a ROCm wheel for another ROCm major, missing HIP libraries)."""
    message = f"{type(error).__name__}: {error}"
    library = re.search(r"(lib(?:amdhip64|hsa-runtime64|rocblas|MIOpen|hipblas\w*)\.so[\w.]*)", message)
    if library:
        return _error("torch-build", f"torch does not import: {message}",
                      f"{library.group(1)} is missing: the torch package was built for another ROCm version than the one installed",
                      "install the torch wheel matching your ROCm (pip install torch --index-url "
                      "https://download.pytorch.org/whl/rocmX.Y), or one that bundles the ROCm libraries")
    return _error("torch-build", f"torch does not import: {message}", fix="pip install torch (the wheel for your platform)")


def run_live_checks(env: Optional[Mapping[str, str]] = None, dev_root: Path | str = "/dev", sys_root: Path | str = "/sys",
                    proc_root: Path | str = "/proc", run_kernels: bool = True, run_tools: bool = True,
                    allreduce: bool = False) -> list[Finding]:
    """All live checks on this machine. Fast (no multi-GPU launch unless allreduce=True); never raises."""
    try:
        probe = collect_probe(env, dev_root, sys_root, proc_root, run_kernels=run_kernels, run_tools=run_tools)
    except Exception as e:   # torch missing or broken
        return [explain_torch_import_error(e)]
    return run_checks(probe, allreduce)


def run_checks(probe: Probe, allreduce: bool = False) -> list[Finding]:
    findings: list[Finding] = []
    for check in LIVE_CHECKS:
        try:
            findings += check(probe)
        except Exception as e:  # one broken check must not hide the others
            findings.append(_warn(check.__name__.removeprefix("check_").replace("_", "-"),
                                  f"this check failed to run: {type(e).__name__}: {e}"))
    gpus = [g for g in probe.info.gpus if not g.integrated]
    if allreduce:
        findings.append(run_allreduce_check(len(gpus), env=probe.env) if len(gpus) >= 2 else
                        _info("multi-gpu", "--allreduce needs at least 2 visible GPUs; skipped"))
    return findings


# ---------------------------------------------------------------------------------------------------------
# Optional: a real all-reduce across the visible GPUs, in child processes with a time limit
# ---------------------------------------------------------------------------------------------------------

_ALLREDUCE_SCRIPT = r'''
import os, sys, datetime
import torch, torch.distributed as dist, torch.multiprocessing as mp

def work(rank, world, port, backend):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    x = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(x)
    if backend == "nccl":
        torch.cuda.synchronize()
    expected = world * (world + 1) / 2
    if not torch.all(x == expected):
        raise SystemExit(f"rank {rank}: all-reduce gave {x[0].item()}, expected {expected}")
    dist.destroy_process_group()

if __name__ == "__main__":
    world, port, backend = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    mp.spawn(work, args=(world, port, backend), nprocs=world)
    print("ALLREDUCE_OK")
'''


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run_allreduce_check(world: int, backend: str = "nccl", timeout: float = 120.0,
                        env: Optional[Mapping[str, str]] = None) -> Finding:
    """Spawn `world` processes and all-reduce 4 MiB once. A hang here is the hang a training run would hit."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "allreduce_check.py"
        script.write_text(_ALLREDUCE_SCRIPT)
        start = time.monotonic()
        try:
            done = subprocess.run([sys.executable, str(script), str(world), _free_port(), backend], capture_output=True,
                                  text=True, timeout=timeout, env=dict(env or os.environ))
        except subprocess.TimeoutExpired:
            return _error("all-reduce", f"all-reduce across {world} GPUs did not finish in {timeout:.0f} s",
                          "a collective hang: usually PCIe P2P blocked by IOMMU/ACS, or the wrong network interface",
                          "rerun with NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1; add iommu=pt to the kernel command line")
        seconds = time.monotonic() - start
    if done.returncode != 0 or "ALLREDUCE_OK" not in done.stdout:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return _error("all-reduce", f"all-reduce across {world} {'GPUs' if backend == 'nccl' else 'processes'} failed",
                      " | ".join(tail), "rerun with NCCL_DEBUG=INFO and read the first WARN line")
    return _info("all-reduce", f"all-reduce across {world} {'GPUs' if backend == 'nccl' else 'processes'} ({backend}) works "
                               f"({seconds:.1f} s including start-up)")


# ---------------------------------------------------------------------------------------------------------
# Offline mode: saved tool outputs of some machine
# ---------------------------------------------------------------------------------------------------------

TOOL_FLAGS = ("rocm-smi", "rocminfo", "amd-smi", "nvidia-smi")


def read_saved_outputs(paths: Iterable[Path], expected_tool: Optional[Mapping[Path, str]] = None) -> list["ParseResult"]:
    """Parse each file (every output in it); unreadable files become ParseResults with a problem."""
    from steadytune.smi_parsers import ParseResult, parse_text

    results: list[ParseResult] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            results.append(ParseResult(tool="unknown", source=path.name, problems=[f"could not read {path}: {e.strerror}"]))
            continue
        if "\x00" in text:
            results.append(ParseResult(tool="unknown", source=path.name, problems=[f"could not read {path}: binary file"]))
            continue
        parsed = parse_text(text, path.name)
        wanted = (expected_tool or {}).get(path)
        for result in parsed:
            if wanted and result.tool not in (wanted, "unknown"):
                result.notes.append(f"{result.source} was given as {wanted} output but reads as {result.tool} output")
        results.extend(parsed)
    return results


def diagnose_gpus(gpus: list["GpuRecord"], check: str = "saved-outputs") -> list[Finding]:
    """Findings about a list of GPUs read from tool outputs: what each is, and rows 3, 5, 11 and 13."""
    from steadytune.hardware import (GPU, OFFICIAL_WHEEL_ARCHS, HardwareInfo, bf16_verdict, choose_precision,
                                     override_for_arch)

    findings = []
    for g in gpus:
        native, why = bf16_verdict(g.arch)
        memory = f"{g.memory_gib:g} GiB" if g.memory_gib is not None else "memory ?"
        verdict = "bf16 native" if native else "bf16 unknown" if native is None else "no native bf16"
        findings.append(_info(check, f"GPU {g.index}: {g.name or 'model not shown'}, {g.arch or 'arch ?'}, {memory}, {verdict}"
                                     + (", integrated" if g.integrated else ""),
                              f"arch from {g.arch_source}" if g.arch_source else ""))
        if g.arch is None:
            findings.append(_warn(check, f"GPU {g.index}: architecture unknown",
                                  "this output does not name the model or its target",
                                  "also save `rocminfo` (or `amd-smi static --asic`, or `nvidia-smi`) from that machine"))
        elif g.vendor == "amd" and g.arch not in OFFICIAL_WHEEL_ARCHS and not g.integrated:
            override = override_for_arch(g.arch)
            findings.append(_warn(check, f"GPU {g.index}: {g.arch} is not a target of the pytorch.org ROCm wheels",
                                  "expect 'hipErrorNoBinaryForGpu' / 'invalid device function'",
                                  f"export HSA_OVERRIDE_GFX_VERSION={override}" if override else
                                  "use a torch build for this architecture (current ROCm no longer supports it)"))
        if native is False and not g.integrated:
            findings.append(_warn(check, f"GPU {g.index}: {why}", "bf16: true would abort or run emulated",
                                  "bf16: auto (fp32) or fp16: true with loss scaling"))
        if g.arch == "gfx90a":
            findings.append(_info(check, f"GPU {g.index}: gfx90a flushes fp16 denormals in matrix cores",
                                  "fp16 training can slowly diverge on torch >= 2.7", "train in bf16"))
    if gpus and gpus[0].integrated and any(not g.integrated for g in gpus):
        discrete = ",".join(str(g.index) for g in gpus if not g.integrated)
        findings.append(_warn(check, f"GPU 0 is an integrated GPU ({gpus[0].name}, {gpus[0].arch})",
                              "tools that take device 0 would train on the iGPU",
                              f"export HIP_VISIBLE_DEVICES={discrete}   (or ROCR_VISIBLE_DEVICES=<dGPU UUID>)"))
    usable = [g for g in gpus if g.arch]
    if usable:
        backend = "cuda" if usable[0].vendor == "nvidia" else "rocm"
        info = HardwareInfo(backend=backend, torch_version="(offline)", gpus=[
            GPU(index=g.index, name=g.name or "?", arch=g.arch, memory_gib=g.memory_gib or 0.0, integrated=g.integrated)
            for g in usable])
        dtype, reason = choose_precision(info, "auto", False)
        findings.append(_info(check, f"train on this machine with bf16: auto would use {dtype}", reason))
    return findings


def run_offline_checks(paths: list[Path], expected_tool: Optional[Mapping[Path, str]] = None) -> tuple[list["GpuRecord"], list[Finding]]:
    from steadytune.smi_parsers import merge_results

    results = read_saved_outputs(paths, expected_tool)
    findings: list[Finding] = []
    for result in results:
        findings += [_warn("saved-outputs", p, fix="save the full, unedited output of the tool") for p in result.problems]
        findings += [_info("saved-outputs", f"{result.source}: {n}") for n in result.notes]
        if result.tool != "unknown" and not result.problems:
            findings.append(_info("saved-outputs", f"{result.source}: {result.tool} output, {len(result.gpus)} GPU(s)"))
    gpus, conflicts = merge_results(results)
    findings += [_warn("saved-outputs", c) for c in conflicts]
    if not gpus:
        findings.append(_error("saved-outputs", "could not read any GPU from the given outputs",
                               fix="give rocminfo, amd-smi static, rocm-smi --showproductname --json or nvidia-smi output"))
    findings += diagnose_gpus(gpus)
    return gpus, findings


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------

def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def format_findings(findings: Iterable[Finding]) -> str:
    """A table by severity: one line per finding, then indented why / fix lines."""
    findings = sort_findings(findings)
    width = max((len(f.check) for f in findings), default=0)
    lines = []
    for f in findings:
        lines.append(f"{f.severity.upper():<8} {f.check:<{width}}  {f.what}")
        indent = " " * (8 + 1 + width + 2)
        if f.why:
            lines.append(f"{indent}why: {f.why}")
        if f.fix:
            lines.append(f"{indent}fix: {f.fix}")
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    lines.append(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
    return "\n".join(lines)


def _package_versions() -> dict[str, Optional[str]]:
    names = ("steadytune", "torch", "transformers", "peft", "accelerate", "safetensors", *OPTIONAL_PACKAGES)
    return {n: _version(n) for n in names}


ENV_PREFIXES = ("HIP_", "ROCR_", "ROCM_", "HSA_", "CUDA_", "NCCL_", "RCCL_", "PYTORCH_", "TORCH_", "GPU_DEVICE_ORDINAL",
                "FLASH_ATTENTION_", "BNB_", "DS_BUILD_", "ACCELERATE_", "OMP_NUM_THREADS", "WORLD_SIZE", "LOCAL_RANK")


def relevant_env(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


def write_environment(output_dir: Path | str, info: "HardwareInfo", findings: list[Finding]) -> Path:
    """output_dir/environment.json: hardware, findings, versions and the environment variables that matter."""
    path = Path(output_dir) / "environment.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "hardware": info.to_dict(),
        "findings": [asdict(f) for f in sort_findings(findings)],
        "versions": {"python": platform.python_version(), **_package_versions()},
        "platform": platform.platform(),
        "env": relevant_env(),
    }
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def _gpu_table(gpus: list[dict]) -> str:
    if not gpus:
        return "GPUs: none"
    rows = [("#", "model", "arch", "memory", "bf16")] + [
        (str(g["index"]), g["name"] or "?", g["arch"] or "?",
         f"{g['memory_gib']:g} GiB" if g["memory_gib"] is not None else "?",
         {True: "native", False: "no", None: "?"}[g["bf16"]] + (" (iGPU)" if g["integrated"] else ""))
        for g in gpus]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--allreduce", action="store_true",
                        help="also run a real all-reduce across the visible GPUs (needs >= 2; catches RCCL/NCCL hangs)")
    parser.add_argument("--from", dest="from_dir", metavar="DIR",
                        help="diagnose another machine from saved tool outputs in DIR (rocm-smi, amd-smi, rocminfo, nvidia-smi)")
    for tool in TOOL_FLAGS:
        parser.add_argument(f"--{tool}", dest=tool.replace("-", "_"), metavar="FILE", action="append", default=[],
                            help=f"a saved {tool} output (repeatable)")


def _offline_inputs(args: argparse.Namespace) -> tuple[list[Path], dict[Path, str]]:
    paths: list[Path] = []
    expected: dict[Path, str] = {}
    if args.from_dir:
        folder = Path(args.from_dir)
        if not folder.is_dir():
            raise UserError(f"--from {folder}: not a folder")
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise UserError(f"--from {folder}: the folder has no files")
        paths += files
    for tool in TOOL_FLAGS:
        for name in getattr(args, tool.replace("-", "_"), []) or []:
            path = Path(name)
            if not path.is_file():
                raise UserError(f"--{tool} {path}: no such file")
            paths.append(path)
            expected[path] = tool
    return paths, expected


def run(args: argparse.Namespace) -> int:
    paths, expected = _offline_inputs(args)
    if paths:
        mode = "offline"
        gpu_records, findings = run_offline_checks(paths, expected)
        gpus = [{**{k: getattr(g, k) for k in ("index", "vendor", "name", "arch", "arch_source", "memory_gib",
                                                "integrated", "uuid", "bus_id")}, "bf16": g.bf16} for g in gpu_records]
        title = f"steadytune doctor: saved outputs from {len(paths)} file(s)"
    else:
        mode, gpus, title = "live", [], "steadytune doctor: this machine"
        try:
            probe = collect_probe()
        except Exception as e:   # torch missing or broken (row 9)
            findings = [explain_torch_import_error(e)]
        else:
            from steadytune.hardware import bf16_verdict
            findings = run_checks(probe, allreduce=args.allreduce)
            gpus = [{**asdict(g), "bf16": bf16_verdict(g.arch)[0]} for g in probe.info.gpus]
            title += f" ({probe.info.backend}, torch {probe.torch_version})"
    exit_code = 1 if has_errors(findings) else 0
    if args.json:
        print(json.dumps({"mode": mode, "gpus": gpus, "findings": [asdict(f) for f in sort_findings(findings)],
                          "exit_code": exit_code}, indent=2, ensure_ascii=False))
    else:
        print(f"{title}\n\n{_gpu_table(gpus)}\n\n{format_findings(findings)}")
    return exit_code
