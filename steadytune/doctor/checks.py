"""The live checks of the GPU stack, one per area: torch build, devices, visibility variables, HSA override,
ROCm build environment, device files, architecture coverage, precision, optional libraries, allocator, WSL.
Each takes the `Probe` and returns findings. Attention and multi-GPU have modules of their own.

The facts behind each check, with sources, are in research/rocm.md; "row N" in a comment points to its
symptom table. The policy (which dtype, which attention) is not decided here: it comes from hardware/,
the part `train` obeys, so doctor reports exactly what `train` will do. hardware/ (and torch) are
imported inside the checks, so that a broken torch still gets a diagnosis (row 9).
"""

from __future__ import annotations

import grp
import platform
import re
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from steadytune.doctor.devices import (
    VISIBILITY,
    Card,
    igpu_shadow,
    is_apu,
    mixed_arch_findings,
    per_node_overrides,
    visibility_findings,
    visible_list,
)
from steadytune.doctor.findings import Finding
from steadytune.doctor.probe import OPTIONAL_PACKAGES, Probe, package_version, version_tuple
from steadytune.hardware.archs import bf16_verdict, gfx_family
from steadytune.hardware.gpu_facts import (
    OFFICIAL_WHEEL_ARCHS,
    arch_info,
    install_lines,
    normalise_gfx,
    override_for_arch,
)
from steadytune.hardware.policy import choose_precision

if TYPE_CHECKING:
    from steadytune.hardware.backend import GPU
    from steadytune.hardware.smi_parsers import GpuRecord


def discrete_behind_igpu(gpus: Sequence[GPU | GpuRecord]) -> Optional[str]:
    """Row 5: when GPU 0 is integrated and a discrete GPU follows, the discrete GPUs' indices ("1" or "1,2"), else
    None. Tools that take device 0 would use the iGPU. Works on torch's GPUs and on GPUs read from tool outputs."""
    if gpus and gpus[0].integrated and any(not g.integrated for g in gpus):
        return ",".join(str(g.index) for g in gpus if not g.integrated)
    return None


def check_torch_build(probe: Probe) -> list[Finding]:
    """Rows 1-2: a CUDA or CPU wheel on an AMD machine (the PyPI default) sees no GPU at all."""
    build = {"rocm": f"ROCm {probe.hip_version}", "cuda": f"CUDA {probe.cuda_version}", "cpu": "CPU-only"}[probe.flavour]
    findings = [Finding.info("torch-build", f"torch {probe.torch_version} ({build} build), Python {platform.python_version()}")]
    discrete_amd = not probe.host_gpus or any(not g.integrated for g in probe.host_gpus)
    if probe.amd_evidence and probe.flavour != "rocm":
        rocm = probe.rocm_version()
        index = f"rocm{'.'.join(rocm.split('.')[:2])}" if rocm else "rocmX.Y"
        where = f" (ROCm {rocm} is installed at {probe.rocm_root})" if rocm else " (X.Y = your ROCm version: cat /opt/rocm/.info/version)"
        finding = Finding.error if discrete_amd else Finding.warn
        findings.append(finding(
            "torch-build",
            f"torch is a {build} build, but this machine has AMD GPUs ({'; '.join(probe.amd_evidence)})",
            "torch.version.hip is None, so torch.cuda cannot see AMD GPUs and training would run on the CPU. "
            "pip installs the CUDA/CPU wheel by default; a Python version without ROCm wheels falls back to CPU.",
            f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{index}{where}"))
    elif probe.nvidia_evidence and probe.flavour != "cuda" and not probe.amd_evidence:
        findings.append(Finding.error(
            "torch-build", f"torch is a {build} build, but this machine has an NVIDIA GPU ({'; '.join(probe.nvidia_evidence)})",
            "Only a CUDA build of torch can use NVIDIA GPUs.",
            "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128 "
            "(pick the CUDA index that your driver supports: nvidia-smi shows the highest CUDA version)"))
    elif probe.flavour in ("rocm", "cuda") and not probe.info.gpus:
        findings.append(Finding.error(
            "torch-build", f"torch is a {build} build but sees no GPU",
            "torch.cuda.is_available() is False: no driver, no device files, or every GPU hidden by a *_VISIBLE_DEVICES variable.",
            "see the device-files and visibility findings; on ROCm run `rocminfo` and check that it lists a GPU agent"))
    elif probe.flavour == "cpu" and not probe.amd_evidence and not probe.nvidia_evidence:
        findings.append(Finding.info("torch-build", "no GPU found: training runs on the CPU in fp32",
                                     "slow, but fine for small models and tests"))
    return findings


def check_devices(probe: Probe) -> list[Finding]:
    """GPUs torch sees (or rocminfo, when torch sees none); row 5: an iGPU enumerated first."""

    findings = []
    gpus = probe.info.gpus or []
    for gpu in gpus:
        bf16 = bf16_verdict(gpu.arch)[0]
        role = ("" if not gpu.integrated else ", integrated (APU: used when it is the only GPU)"
                if gpu is probe.info.primary else ", integrated (not used for training)")
        findings.append(Finding.info("devices", f"GPU {gpu.index}: {gpu.name}, {gpu.arch}, {gpu.memory_gib:g} GiB, "
                                                f"bf16 {'native' if bf16 else 'not native'}{role}"))
    if not gpus and probe.host_gpus:
        for g in probe.host_gpus:
            findings.append(Finding.info("devices", f"rocminfo GPU {g.index}: {g.name}, {g.arch}, "
                                                    f"{g.memory_gib if g.memory_gib is not None else '?'} GiB (torch does not see it)"))
    listed = gpus or probe.host_gpus
    discrete = discrete_behind_igpu(listed)
    if discrete and probe.flavour == "cuda":
        findings.append(Finding.warn(
            "devices", f"GPU 0 is an integrated GPU ({listed[0].name}, {listed[0].arch}); the discrete GPU is {discrete}",
            "Tools that take device 0 (and every rank of a multi-GPU launch) would run on the iGPU.",
            f"export CUDA_VISIBLE_DEVICES={discrete}"))
    elif discrete:
        uuids = [g.uuid for g in probe.host_gpus] if len(probe.host_gpus) == len(listed) else [None] * len(listed)
        cards = [Card(g.index, g.arch, uuid=getattr(g, "uuid", None) or uuid, integrated=g.integrated, name=g.name)
                 for g, uuid in zip(listed, uuids)]
        what, why, fix = igpu_shadow(cards, probe.arch_list or None)
        findings.append(Finding.warn("devices", what, why, fix))
    elif listed and all(g.integrated for g in listed):
        apu = probe.info.primary
        if apu is not None:   # an APU worth training on (gpu_facts: Strix Halo / Strix Point)
            findings.append(Finding.info("devices", f"GPU {apu.index} is an APU ({apu.arch}): train uses it, with "
                                                    f"{apu.budget_gib:g} GiB of unified memory",
                                         apu.memory_note or "its memory is system memory the GPU maps"))
        else:
            findings.append(Finding.warn("devices", "only an integrated GPU is present: steadytune trains on the CPU",
                                         "small iGPUs share system memory and are often not covered by the ROCm wheels"))
    return findings


def _visible_list(value: str) -> list[str]:
    return visible_list(value)


def host_cards(probe: Probe) -> list[Card]:
    """The machine's AMD GPUs before any visibility variable (the KFD topology, with rocminfo's UUIDs and names where
    rocminfo listed the same cards), in the order ROCR numbers them."""
    cards = [Card(i, arch, node, integrated=is_apu(arch)) for i, (node, arch) in enumerate(probe.host_nodes)]
    if cards and len(probe.host_gpus) == len(cards):
        for card, record in zip(cards, probe.host_gpus):
            card.uuid, card.name = record.uuid, record.name
            card.integrated = card.integrated or record.integrated
    return cards


def check_visibility(probe: Probe) -> list[Finding]:
    """Rows 6-7: HIP/ROCR/CUDA_VISIBLE_DEVICES, how they combine, conflicts, empty selections."""
    import torch

    env = probe.env
    if not any(n in env for n in VISIBILITY):
        return []
    findings = visibility_findings(env, probe.flavour, host_cards(probe))
    set_vars = {n: env[n] for n in VISIBILITY if n in env}
    rocr, hip, cuda = (set_vars.get(n) for n in VISIBILITY[:3])
    # Row 7: a variable changed after torch initialised the GPU runtime has no effect in this process.
    chosen = hip if probe.flavour == "rocm" and hip is not None else cuda if cuda is not None else hip
    if chosen is not None and probe.info.gpus and torch.cuda.is_initialized():
        wanted = len(_visible_list(chosen))
        if wanted and wanted != len(probe.info.gpus):
            findings.append(Finding.warn(
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

    findings = []
    overrides = {k: v for k, v in probe.env.items() if k == "HSA_OVERRIDE_GFX_VERSION" or k.startswith("HSA_OVERRIDE_GFX_VERSION_")}
    if probe.flavour == "cuda":
        return [Finding.info("hsa-override", "HSA_OVERRIDE_GFX_VERSION is set but this is a CUDA build; it is ignored")] \
            if overrides else []
    wheel_archs = {normalise_gfx(a) for a in probe.arch_list} or set(OFFICIAL_WHEEL_ARCHS)
    mixed = mixed_arch_findings(probe.env, host_cards(probe), wheel_archs)   # one card needs it, another must not
    findings += mixed
    if not overrides:
        return findings
    for name, value in sorted(overrides.items()):
        target = _override_target(value)
        if target is None:
            findings.append(Finding.error("hsa-override", f"{name}={value!r} is not in the form X.Y.Z",
                                          "ROCr ignores a malformed override ('HSA_OVERRIDE_GFX_VERSION ... is invalid'), "
                                          "so the GPU keeps its real target",
                                          f"export {name}=11.0.0 (RDNA3) or 10.3.0 (RDNA2), or unset it"))
            continue
        findings.append(Finding.info("hsa-override", f"{name}={value} makes the GPU report {target}"))
        real = probe.host_archs
        if name != "HSA_OVERRIDE_GFX_VERSION":   # the per-node form names a KFD node id (the CPU is node 0)
            continue
        for arch in dict.fromkeys(real):
            row = arch_info(arch)
            if row is not None and row.override.verdict == "trap" and _override_target(row.override.value or "") == target:
                findings.append(Finding.error(
                    "hsa-override", f"{name}={value} on {arch} is a known trap", row.override.why,
                    f"unset {name} and install a torch with native {arch} code: "
                    + "; or ".join(line for _, line in install_lines(arch))))
            elif mixed and any(f.severity == "error" for f in mixed):
                continue   # the mixed-card finding explains this card and gives the per-node fix
            elif gfx_family(arch) != gfx_family(target):
                findings.append(Finding.error(
                    "hsa-override", f"{name}={value} ({target}) is from another family than the GPU ({arch})",
                    "code objects for another family do not run: HSA_STATUS_ERROR_INVALID_ISA or 'invalid device function'",
                    f"use a {gfx_family(arch)} value or unset {name}"))
            elif arch in wheel_archs:
                findings.append(Finding.warn(
                    "hsa-override", f"{name} is set, but {arch} is supported by this torch as it is",
                    "the override makes the GPU run code built for another chip; it is only a workaround for unlisted chips",
                    f"unset {name}"))
        if target not in wheel_archs:
            findings.append(Finding.warn("hsa-override", f"this torch has no code objects for {target} either",
                                         f"the wheel was built for {', '.join(sorted(wheel_archs))}",
                                         "choose an override whose target is in that list"))
    return findings


def check_build_env(probe: Probe) -> list[Finding]:
    """PYTORCH_ROCM_ARCH (read only when extensions are compiled) and the ROCm root those builds use."""

    findings, env = [], probe.env
    rocm = probe.rocm_version()
    if probe.flavour == "rocm" or probe.amd_evidence:
        findings.append(Finding.info("rocm", f"ROCm {rocm} at {probe.rocm_root}" if rocm else f"no ROCm version file under {probe.rocm_root}"))
    for name in ("ROCM_PATH", "ROCM_HOME"):
        if name in env and not Path(env[name]).is_dir():
            findings.append(Finding.warn("rocm", f"{name}={env[name]} is not a folder",
                                         "extension builds (DeepSpeed ops, bitsandbytes, flash-attn) look for hipcc there",
                                         f"export {name}=/opt/rocm (or your ROCm install folder)"))
    wanted = env.get("PYTORCH_ROCM_ARCH")
    gpus = [g.arch for g in probe.info.gpus if g.arch.startswith("gfx")] or probe.host_archs
    if wanted is not None and gpus:
        listed = {normalise_gfx(a) for a in re.split(r"[;\s,]+", wanted) if a}
        missing = sorted({normalise_gfx(a) for a in gpus} - listed)
        if missing:
            findings.append(Finding.warn(
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
        findings.append(Finding.error("device-files", f"{kfd} does not exist",
                                      "ROCm talks to every AMD GPU through /dev/kfd; in a container it must be passed in, "
                                      "on a host the amdgpu driver is not loaded",
                                      docker_fix))
        return findings
    nodes = [kfd, *sorted((probe.dev_root / "dri").glob("renderD*"))]
    if len(nodes) == 1:
        findings.append(Finding.error("device-files", f"no {probe.dev_root / 'dri'}/renderD* nodes",
                                      "each GPU needs its render node next to /dev/kfd", docker_fix))
    for node in nodes:
        st = node.stat()
        if not device_access(st.st_mode, st.st_uid, st.st_gid, probe.uid, probe.groups):
            findings.append(Finding.error(
                "device-files", f"{node} is not read-write for this user (owner group {_group_name(st.st_gid)}, gid {st.st_gid})",
                "'Unable to open /dev/kfd read-write: Permission denied'; rocminfo and torch see no GPU",
                f"add the user to group {_group_name(st.st_gid)} (gid {st.st_gid}): {docker_fix}"))
    if not (probe.sys_root / "module" / "amdgpu").exists():
        findings.append(Finding.warn("device-files", "the amdgpu kernel module is not visible under /sys/module",
                                     "the kernel driver comes from the host; a container brings only user-space ROCm"))
    return findings


def check_arch_coverage(probe: Probe) -> list[Finding]:
    """Row 3: the wheel must contain code objects for each GPU's target ('invalid device function' otherwise)."""

    if not probe.arch_list or not probe.info.gpus:
        return []
    findings = []
    if probe.flavour == "rocm":
        compiled = {normalise_gfx(a) for a in probe.arch_list}
        for gpu in probe.info.gpus:
            if gpu.arch in compiled or gpu.integrated and gpu is not probe.info.primary:   # an APU that trains counts
                continue
            override = override_for_arch(gpu.arch)
            wheels = install_lines(gpu.arch)   # gpu_facts' wheel table: who ships code for this target
            fixes = [f"{line}   [{where}]" for where, line in wheels]
            if override:   # on a mixed machine only this card's KFD node gets it
                variable = per_node_overrides(host_cards(probe), compiled).get(gpu.index, "HSA_OVERRIDE_GFX_VERSION")
                fixes.append(f"export {variable}={override}")
            findings.append(Finding.error(
                "arch-coverage", f"GPU {gpu.index} ({gpu.arch}) is not among the targets this torch was built for",
                f"torch.cuda.get_arch_list() = {sorted(compiled)}: expect 'hipErrorNoBinaryForGpu' / 'invalid device function'",
                "; or ".join(fixes) or f"no torch wheel ships {gpu.arch} code: build torch with PYTORCH_ROCM_ARCH={gpu.arch}"))
    else:
        compiled = {a for a in probe.arch_list}
        for gpu in probe.info.gpus:
            cc = int(gpu.arch[3:]) if gpu.arch.startswith("sm_") and gpu.arch[3:].isdigit() else None
            ptx = [int(a[8:]) for a in compiled if a.startswith("compute_") and a[8:].isdigit()]
            if cc is not None and gpu.arch not in compiled and not any(p <= cc for p in ptx):
                findings.append(Finding.error("arch-coverage", f"GPU {gpu.index} ({gpu.arch}) has no kernels in this torch build",
                                              f"torch.cuda.get_arch_list() = {sorted(compiled)}",
                                              "install a newer torch wheel (a newer CUDA index) that lists this architecture"))
    return findings


def check_precision(probe: Probe) -> list[Finding]:
    """Rows 11-13: bf16 by architecture (never is_bf16_supported() on ROCm), fp16 caveats, what train picks."""

    dtype, reason = choose_precision(probe.info, "auto", False)
    findings = [Finding.info("precision", f"train with bf16: auto uses {dtype}", reason)]
    gpu = probe.info.primary
    if gpu is None:
        return findings
    native, why = bf16_verdict(gpu.arch)
    if not native:
        findings.append(Finding.warn(
            "precision", f"{why}",
            "bf16: true (the LLaMA-Factory default) aborts in Triton kernels ('Cannot select: intrinsic "
            "%llvm.amdgcn.fdot2.bf16.bf16') or runs emulated; fp16 can overflow on bf16-pretrained models (NaN loss)",
            "leave bf16: auto (fp32), or set fp16: true (loss scaling; the guard watches for overflow)"))
    if gpu.arch == "gfx90a":
        findings.append(Finding.warn(
            "precision", "gfx90a (MI200) flushes fp16 denormals to zero in its matrix cores",
            f"with torch >= 2.7 the hipBLASLt path skipped the backward workaround, so fp16 training slowly diverges "
            f"(pytorch #182952); this torch is {probe.torch_version}",
            "train in bf16 (the default here); if fp16 is a must: torch.backends.cuda.preferred_blas_library('cublas')"))
    return findings


def check_optional_libs(probe: Probe) -> list[Finding]:
    """Rows 20-21, without importing the packages (deepspeed alone takes seconds to import)."""
    findings = []
    versions = {p: package_version(p) or (package_version("pytorch-triton-rocm") if p == "triton" else None) for p in OPTIONAL_PACKAGES}
    installed = {p: v for p, v in versions.items() if v}
    missing = [p for p, v in versions.items() if not v]
    findings.append(Finding.info("optional", "installed: " + (", ".join(f"{p} {v}" for p, v in installed.items()) or "none")
                                 + ("; not installed: " + ", ".join(missing) if missing else "")))
    # bitsandbytes' per-arch gates and its native library: packages.py (check_packages)
    if "deepspeed" in installed and probe.flavour == "rocm":
        hipcc = shutil.which("hipcc") or (probe.rocm_root / "bin" / "hipcc").exists()
        if not hipcc:
            findings.append(Finding.warn("optional", "deepspeed is installed but hipcc is not found",
                                         "DeepSpeed JIT-compiles its ops (fused_adam, cpu_adam) with hipcc; old versions fail with "
                                         "'CUDA_HOME does not exist, unable to compile CUDA op(s)'",
                                         "export ROCM_HOME=/opt/rocm and PYTORCH_ROCM_ARCH=<your gfx>; pip install -U deepspeed"))
        if version_tuple(installed["deepspeed"]) < (0, 15, 3):
            findings.append(Finding.warn("optional", f"deepspeed {installed['deepspeed']} has known ROCm op-build failures",
                                         "FUSED_ADAM builds broke on ROCm until 0.15.3 (DeepSpeed #6600)", "pip install -U deepspeed"))
    if "liger-kernel" in installed and probe.flavour == "cpu":
        findings.append(Finding.info("optional", "liger-kernel needs a GPU (Triton); it is not used on the CPU"))
    return findings


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
    order = names if version_tuple(probe.torch_version) >= (2, 9) else names[1:] + names[:1]
    used = next(n for n in order if n in set_vars)
    findings.append(Finding.info("allocator", f"torch reads {used}={set_vars[used]!r}"))
    if len(set(set_vars.values())) > 1:
        ignored = [n for n in set_vars if n != used]
        findings.append(Finding.warn("allocator", f"several allocator variables with different values; {', '.join(ignored)} ignored",
                                     "torch parses only the first one it finds", f"keep only {used}"))
    options = dict(item.split(":", 1) if ":" in item else (item, "") for item in set_vars[used].split(",") if item.strip())
    unknown = sorted(k.strip() for k in options if k.strip() not in ALLOCATOR_OPTIONS)
    if unknown:
        findings.append(Finding.error("allocator", f"unknown allocator option(s) in {used}: {', '.join(unknown)}",
                                      "torch raises 'Unrecognized CachingAllocator option' at the first GPU allocation",
                                      f"remove them; known options: {', '.join(sorted(ALLOCATOR_OPTIONS))}"))
    expandable = options.get("expandable_segments", "").strip().lower() == "true"
    if expandable and probe.flavour == "rocm":
        hip = version_tuple(probe.hip_version or "0")
        if version_tuple(probe.torch_version) < (2, 11) or hip < (7, 0):
            findings.append(Finding.warn("allocator", "expandable_segments:True on this ROCm torch",
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
        return [Finding.warn("wsl", "WSL2 detected with ROCm",
                             "the pytorch.org ROCm wheels fail under WSL with hipErrorNoDevice",
                             "install AMD's WSL wheels from repo.radeon.com and their libhsa-runtime64.so")]
    return []
