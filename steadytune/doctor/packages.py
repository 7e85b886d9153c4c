"""The Python packages around torch: a ROCm torch that pip or uv replaced with a CUDA/CPU build (and which package's
requirement made it), and bitsandbytes' per-architecture gates on ROCm. Live mode reads the installed packages'
metadata (never imports them); offline mode reads saved `pip list` / `pip freeze` / `pip install` / `uv pip install`
output, collect_env's `[pip3]` lines and a bitsandbytes load error.

Sources: pypa/pip #12902 (pip collecting a PyPI torch over an installed ROCm pre-release), ROCm/bitsandbytes #37
(installing lion-pytorch replaced torch 2.4.0.dev+rocm6.1 by 2.3.1+cu121), unslothai/unsloth #7275 and PR #7278
(unsloth's `torch<2.11.0` cap sent torch 2.11.0+rocm7.13.0 down to PyPI's 2.10.0); bitsandbytes facts in
hardware/gpu_facts.py.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from steadytune.doctor.findings import Finding
from steadytune.doctor.probe import Probe
from steadytune.hardware.gpu_facts import (
    BNB_LIBRARY_SOURCE,
    BNB_NAN_FREE,
    BNB_NAN_SOURCE,
    arch_info,
    bnb_library_names,
    install_lines,
    normalise_gfx,
)
from steadytune.hardware.quantization import GATE_SOURCE, bitsandbytes_status
from steadytune.hardware.torch_builds import (
    ROCM_ONLY_PACKAGES,
    describe_build,
    is_prerelease,
    local_label,
    reinstall_line,
    torch_build,
    torch_version_of,
)


def normalise(name: str) -> str:
    """PEP 503: names compare case-insensitively, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class PythonEnv:
    """What is known of one Python environment's packages, read live or from saved outputs."""
    source: str
    versions: dict[str, str] = field(default_factory=dict)             # name -> installed version
    requirements: dict[str, list[str]] = field(default_factory=dict)   # name -> its Requires-Dist (live)
    installed_at: dict[str, float] = field(default_factory=dict)       # name -> dist-info mtime (live)
    replaced: list[tuple[str, str, str]] = field(default_factory=list)  # (name, old, new) in an install log
    wanted_by: dict[str, list[str]] = field(default_factory=dict)      # name -> 'pkg (requirement)' that pulled it
    pending: dict[str, str] = field(default_factory=dict)              # name -> version pip was fetching (log cut)
    pending_reason: dict[str, str] = field(default_factory=dict)       # name -> what the log says about it
    commands: list[str] = field(default_factory=list)                  # install commands seen in the log
    bnb_files: Optional[list[str]] = None                              # libbitsandbytes_rocm*.so shipped (live)
    bnb_missing: list[str] = field(default_factory=list)               # library paths a load error names

    def version(self, name: str) -> Optional[str]:
        return self.versions.get(normalise(name))

    @property
    def empty(self) -> bool:
        return not (self.versions or self.replaced or self.pending or self.bnb_missing)


# ---------------------------------------------------------------------------------------------------------
# Live: the installed distributions' metadata
# ---------------------------------------------------------------------------------------------------------

def read_installed(paths: Optional[Iterable[str]] = None, source: str = "installed packages") -> PythonEnv:
    """Every distribution on `paths` (default sys.path), the first of a name winning as it does for imports."""
    env = PythonEnv(source)
    found = importlib.metadata.distributions(path=list(paths)) if paths is not None else importlib.metadata.distributions()
    for dist in found:
        try:
            name = normalise(dist.metadata["Name"] or "")
        except Exception:   # a dist-info without readable METADATA
            continue
        if not name or name in env.versions:
            continue
        env.versions[name] = dist.version
        env.requirements[name] = list(dist.requires or [])
        folder = getattr(dist, "_path", None)   # importlib.metadata keeps the dist-info folder private
        if isinstance(folder, Path):
            try:
                env.installed_at[name] = folder.stat().st_mtime
            except OSError:
                pass
        if name == "bitsandbytes":
            env.bnb_files = sorted(Path(str(f)).name for f in (dist.files or [])
                                   if re.search(r"libbitsandbytes_rocm\d+\.(so|dll)$", str(f)))
    return env


# ---------------------------------------------------------------------------------------------------------
# Offline: pip / uv output, pip list / freeze, collect_env
# ---------------------------------------------------------------------------------------------------------

_VERSION = r"[0-9][0-9A-Za-z.!+_-]*"
_FROM = r"\(from ([^)]+)\)"


def looks_like_packages(text: str) -> bool:
    return bool(re.search(r"^\s*(Requirement already satisfied|Collecting |Successfully installed|Attempting uninstall"
                          r"|Found existing installation|Installing collected packages|\[pip3\]|Package\s+Version\s*$"
                          r"|[-+] [A-Za-z0-9_.-]+==)", text, re.MULTILINE)
                or "libbitsandbytes_rocm" in text or re.search(r"^[A-Za-z0-9_.-]+==" + _VERSION + r"\s*$", text, re.MULTILINE))


def _wheel_version(filename: str) -> Optional[tuple[str, str]]:
    """'torch-2.4.0-cp310-cp310-manylinux1_x86_64.whl' -> ('torch', '2.4.0')."""
    match = re.match(r"([A-Za-z0-9_.]+?)-(" + _VERSION.replace("_-", "") + r")-", filename)
    return (normalise(match.group(1)), match.group(2).replace("%2B", "+")) if match else None


def parse_package_text(text: str, source: str, command: str = "") -> PythonEnv:
    """Whatever a saved text says about installed packages and an install that ran."""
    env = PythonEnv(source)
    if command:
        env.commands.append(command)
    collecting: Optional[str] = None
    uninstalled: dict[str, str] = {}
    in_table = False
    for raw in text.splitlines():
        line = raw.strip()
        prompt = re.match(r"^(?:\S*[$#>]\s+)?((?:uv\s+)?pip3?\s+install\b.*)$", line)
        if prompt:
            env.commands.append(prompt.group(1))
            continue
        if m := re.match(r"Requirement already satisfied: ([A-Za-z0-9_.\-\[\]]+).*?(?:" + _FROM + r")?.*\((" + _VERSION
                         + r")\)\s*$", line):
            name = normalise(re.sub(r"\[.*\]", "", m.group(1)))
            env.versions.setdefault(name, m.group(3))
            if m.group(2):
                env.wanted_by.setdefault(name, []).append(m.group(2))
            continue
        if m := re.match(r"Collecting ([A-Za-z0-9_.\-]+)([^\s(]*)\s*(?:" + _FROM + r")?", line):
            collecting = normalise(m.group(1))
            env.wanted_by.setdefault(collecting, []).append(
                f"{m.group(3)} ({m.group(1)}{m.group(2)})" if m.group(3) else f"the command line ({m.group(1)}{m.group(2)})")
            continue
        if m := re.match(r"(?:Downloading|Using cached) (\S+\.whl)", line):
            wheel = _wheel_version(Path(m.group(1)).name)
            if wheel and collecting and wheel[0] == collecting:
                env.pending[wheel[0]] = wheel[1]
            continue
        if m := re.match(r"Found existing installation: ([A-Za-z0-9_.\-]+) (" + _VERSION + ")", line):
            uninstalled[normalise(m.group(1))] = m.group(2)
            continue
        if m := re.match(r"Successfully installed (.+)$", line):
            for item in m.group(1).split():
                name, _, version = item.rpartition("-")
                name = normalise(name)
                if name in uninstalled and uninstalled[name] != version:
                    env.replaced.append((name, uninstalled.pop(name), version))
                env.versions[name] = version
                env.pending.pop(name, None)
            continue
        if m := re.match(r"([-+]) ([A-Za-z0-9_.\-]+)==(" + _VERSION + r")\s*$", line):   # uv: ' - torch==x' ' + torch==y'
            name = normalise(m.group(2))
            if m.group(1) == "-":
                uninstalled[name] = m.group(3)
            else:
                if name in uninstalled and uninstalled[name] != m.group(3):
                    env.replaced.append((name, uninstalled.pop(name), m.group(3)))
                env.versions[name] = m.group(3)
            continue
        if m := re.match(r"\[(?:pip3?|conda)\]\s+([A-Za-z0-9_.\-]+)(?:==|\s+)(" + _VERSION + r")", line):  # collect_env
            env.versions.setdefault(normalise(m.group(1)), m.group(2))
            continue
        if re.match(r"Package\s+Version", line):
            in_table = True
            continue
        if in_table and re.match(r"-{3,}\s+-{3,}", line):
            continue
        if in_table and (m := re.match(r"([A-Za-z0-9_.\-]+)\s+(" + _VERSION + r")(\s|$)", line)):
            env.versions.setdefault(normalise(m.group(1)), m.group(2))
            continue
        if m := re.match(r"([A-Za-z0-9_.\-]+)==(" + _VERSION + r")\s*$", line):          # pip freeze
            env.versions.setdefault(normalise(m.group(1)), m.group(2))
            continue
        for path in re.findall(r"([^\s'\"(]*libbitsandbytes_rocm\d+\.(?:so|dll))", line):
            if re.search(r"not found|Could not find|cannot open", line) and path not in env.bnb_missing:
                env.bnb_missing.append(path)
    for name, old in uninstalled.items():     # uninstalled, the log cut before 'Successfully installed'
        if name in env.pending and env.pending[name] != old:
            env.replaced.append((name, old, env.pending.pop(name)))
    if "torch" in env.pending and "looking at multiple versions of torch" in text:
        env.pending_reason["torch"] = "pip backtracked ('looking at multiple versions of torch')"
    if any(re.search(r"nvidia-[a-z-]+-cu1\d", line) for line in text.splitlines()) and "torch" in env.pending:
        env.pending_reason["torch"] = (env.pending_reason.get("torch", "") + "; it pulls nvidia-*-cu12 packages: a "
                                       "CUDA build").lstrip("; ")
    return env


def merge_envs(envs: Iterable[PythonEnv]) -> Optional[PythonEnv]:
    merged = None
    for env in envs:
        if env.empty:
            continue
        if merged is None:
            merged = PythonEnv(env.source)
        else:
            merged.source += f", {env.source}"
        merged.versions.update(env.versions)        # a later output of the same file is later in time
        merged.requirements.update(env.requirements)
        merged.replaced += env.replaced
        for name, who in env.wanted_by.items():
            merged.wanted_by.setdefault(name, []).extend(who)
        merged.pending.update(env.pending)
        merged.pending_reason.update(env.pending_reason)
        merged.commands += env.commands
        merged.bnb_missing += env.bnb_missing
    return merged


# ---------------------------------------------------------------------------------------------------------
# Problem 1: a ROCm torch replaced, and by whose requirement
# ---------------------------------------------------------------------------------------------------------

def former_rocm_torch(env: PythonEnv) -> tuple[Optional[str], Optional[str], list[str]]:
    """-> (the ROCm torch that was there, the torch there now or being installed, evidence), or (None, None, [])."""
    for name, old, new in env.replaced:
        if name == "torch" and torch_build(old) == "rocm" and torch_build(new) != "rocm":
            return old, new, [f"the install log replaced torch {old} with torch {new}"]
    current = env.version("torch")
    pending = env.pending.get("torch")
    if current and torch_build(current) == "rocm" and pending and torch_build(pending) != "rocm":
        why = env.pending_reason.get("torch")
        return current, pending, [f"the install log shows torch {current} installed and pip fetching torch {pending}"
                                  + (f" ({why})" if why else "")]
    if not current or torch_build(current) == "rocm":
        return None, None, []
    evidence, former = [], None
    for companion in ("torchvision", "torchaudio"):
        version = env.version(companion)
        if version and torch_build(version) == "rocm":
            paired = torch_version_of(companion, version)
            former = former or paired
            evidence.append(f"{companion} {version} is still installed (it goes with torch {paired or 'a ROCm build'})")
    for package in ROCM_ONLY_PACKAGES:
        version = env.version(package)
        if version:
            evidence.append(f"{package} {version} is installed (only a ROCm torch brings it)")
    if not evidence:
        return None, None, []
    return former or "a ROCm build", current, evidence


def _requirement_on_torch(spec: str) -> Optional[Requirement]:
    try:
        requirement = Requirement(spec)
    except InvalidRequirement:
        return None
    if normalise(requirement.name) != "torch":
        return None
    if requirement.marker is not None:
        try:
            if not requirement.marker.evaluate({"extra": ""}):
                return None
        except Exception:   # a marker this interpreter cannot evaluate
            return None
    return requirement


def torch_requirers(env: PythonEnv, former: Optional[str], current: Optional[str]) -> list[str]:
    """The packages whose requirement on torch excludes the former ROCm torch (or, when it is unknown, caps torch),
    each as 'name version requires torch<spec>'; then what an install log says pulled torch."""
    culprits = []
    try:
        former_version = Version(former) if former and former[0].isdigit() else None
    except InvalidVersion:
        former_version = None
    for name, specs in sorted(env.requirements.items()):
        if name == "torch" or name in ("torchvision", "torchaudio"):
            continue
        for spec in specs:
            requirement = _requirement_on_torch(spec)
            if requirement is None or not str(requirement.specifier):
                continue
            if former_version is not None:
                excludes = not requirement.specifier.contains(former_version, prereleases=True)
            else:
                excludes = any(s.operator in ("<", "<=", "==", "~=", "===") for s in requirement.specifier)
            if excludes:
                verb = "excludes" if former_version is not None else "caps"
                culprits.append(f"{name} {env.versions.get(name, '')} requires torch{requirement.specifier}, which "
                                f"{verb} {former if former_version is not None else 'torch'}".replace("  ", " "))
    for who in env.wanted_by.get("torch", []):
        culprits.append(f"the install log: torch was collected for {who}")
    if current and env.installed_at.get("torch") and not culprits:
        when = env.installed_at["torch"]
        together = sorted(n for n, t in env.installed_at.items()
                          if n != "torch" and abs(t - when) < 120 and any(_requirement_on_torch(s) for s in env.requirements.get(n, [])))
        if together:
            culprits.append("installed together with it, and requiring torch: " + ", ".join(together))
    return list(dict.fromkeys(culprits))


def torch_replacement_findings(env: PythonEnv, check: str = "packages", arch: Optional[str] = None,
                               platform: Optional[str] = None) -> list[Finding]:
    former, current, evidence = former_rocm_torch(env)
    if former is None:
        return _companion_findings(env, check)
    culprits = torch_requirers(env, former, current)
    exact = former if former[0].isdigit() else None
    keep = (f"echo 'torch=={exact}' > ~/keep-rocm-torch.txt && export PIP_CONSTRAINT=~/keep-rocm-torch.txt "
            "UV_CONSTRAINT=~/keep-rocm-torch.txt (every later pip/uv install must then keep it, or fail saying why)")
    fixes = [reinstall_line(exact) if exact else _rocm_install_hint(arch)]
    if exact:
        fixes.append(keep)
    named = [c.split(" ", 1)[0] for c in culprits if " requires torch" in c]
    if named:
        fixes.append(f"then upgrade {', '.join(named)} to a release whose torch requirement allows {exact or 'it'}, or "
                     f"reinstall {'them' if len(named) > 1 else 'it'} with --no-deps")
    verb = "is replacing" if env.pending.get("torch") == current and not any(r[0] == "torch" for r in env.replaced) else "replaced"
    what = f"torch {current} ({describe_build(current, platform)}) {verb} the ROCm build torch {former}"
    why = "; ".join(evidence)
    during = list(dict.fromkeys(c for c in env.commands if c))
    if during:
        why += f" (during: {'; '.join(during)})"
    if culprits:
        why += "; which requirement did it: " + "; ".join(culprits)
    elif env.requirements:
        why += "; no installed package's requirement excludes it: a command that named torch (pip install torch / -U) did it"
    else:
        why += ("; the saved output does not name the requirement (uv does not print it): `steadytune doctor` on that "
                "machine reads every installed package's requirement on torch and names it")
    if exact and is_prerelease(exact):
        why += (f"; {exact} is a pre-release, which pip only keeps for a requirement that allows pre-releases "
                "(pypa/pip #12902)")
    return [Finding.error(check, what, why, "; ".join(fixes))]


def _rocm_install_hint(arch: Optional[str]) -> str:
    lines = install_lines(arch) if arch else []
    return ("; or ".join(line for _, line in lines) if lines else
            "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/rocmX.Y (your ROCm)")


def _companion_findings(env: PythonEnv, check: str) -> list[Finding]:
    """torch is a ROCm build but torchvision / torchaudio were replaced by another platform's build."""
    torch_version = env.version("torch")
    if not torch_version or torch_build(torch_version) != "rocm":
        return []
    findings = []
    for companion in ("torchvision", "torchaudio"):
        version = env.version(companion)
        if version and torch_build(version) != "rocm":
            findings.append(Finding.warn(check, f"{companion} {version} ({describe_build(version)}) sits beside the ROCm "
                                                f"build torch {torch_version}",
                                         "its compiled ops were built for another torch: importing them fails or they run "
                                         "on the CPU",
                                         f"pip install --force-reinstall --no-deps {companion} --index-url <the index of "
                                         f"your torch (+{local_label(torch_version)})>"))
    return findings


# ---------------------------------------------------------------------------------------------------------
# Problem 2: bitsandbytes on ROCm
# ---------------------------------------------------------------------------------------------------------

def _version(text: str) -> Optional[Version]:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def bitsandbytes_findings(env: PythonEnv, arch: Optional[str], hip_version: Optional[str], rocm: bool,
                          check: str = "optional") -> list[Finding]:
    """4-bit kernels for this arch (first release per family), the NaNs before 0.50.0, and the native library that
    bitsandbytes will look for with this torch.version.hip."""
    installed = env.version("bitsandbytes")
    findings: list[Finding] = []
    if env.bnb_missing:
        findings.append(_missing_library_finding(env, hip_version, check))
    if not installed or not rocm:
        return findings
    version = _version(installed)
    if version is None:
        return findings
    base = normalise_gfx(arch) if arch else None
    row = arch_info(base) if base else None
    upgrade = f"pip install -U 'bitsandbytes>={BNB_NAN_FREE}'"
    if version < Version("0.45"):
        return findings + [Finding.warn(check, f"bitsandbytes {installed} has no ROCm support",
                                        "ROCm support starts with the 0.45 multi-backend release", upgrade)]
    first = row.bnb_4bit if row else None
    if base and first is None and row is not None:
        findings.append(Finding.warn(check, f"bitsandbytes {installed} ships no kernels for {base}: 'Error invalid device "
                                            f"function ... ops.hip' at the first 4-bit or 8-bit call",
                                     "no bitsandbytes wheel is built for it", f"build it: cmake -DCOMPUTE_BACKEND=hip "
                                     f"-DBNB_ROCM_ARCH={base} -S . && make && pip install ."))
    elif base and first and version < Version(first):
        findings.append(Finding.warn(check, f"bitsandbytes {installed} ships no 4-bit kernels for {base} ({row.family}): "
                                            "'invalid device function' (or a blocksize check on CDNA)",
                                     f"4-bit on {row.family} starts with bitsandbytes {first} ({row.source.split(';')[0]}; "
                                     "unsloth PR #4161)", upgrade))
    elif version < Version(BNB_NAN_FREE):
        findings.append(Finding.warn(check, f"bitsandbytes {installed}: 4-bit (QLoRA) trains NaN on AMD GPUs before "
                                            f"{BNB_NAN_FREE}", BNB_NAN_SOURCE, upgrade))
    if hip_version and env.bnb_files and not env.bnb_missing:   # an editable/source install lists no libraries
        wanted = bnb_library_names(hip_version)
        if wanted and not set(wanted) & set(env.bnb_files):
            findings.append(_missing_library_finding(env, hip_version, check, wanted))
    return findings


def _hip_of(digits: str) -> tuple[int, int]:
    """'72' -> (7, 2); '84' (7.14 read as 7*10+14) -> (7, 14); '714' -> (7, 14)."""
    if len(digits) == 2 and int(digits) >= 80:
        return 7, int(digits) - 70
    return int(digits[0]), int(digits[1:] or 0)


def _missing_library_finding(env: PythonEnv, hip_version: Optional[str], check: str,
                             wanted: tuple[str, ...] = ()) -> Finding:
    path = env.bnb_missing[0] if env.bnb_missing else wanted[0]
    digits = re.search(r"rocm(\d+)\.", path).group(1)
    needed = _hip_of(digits)
    hip = f"torch's HIP {hip_version}" if hip_version else f"torch's HIP version ({needed[0]}.{needed[1]})"
    shipped = [re.search(r"rocm(\d+)", f).group(1) for f in (env.bnb_files or [])]
    usable = [d for d in shipped if _hip_of(d) <= needed]
    folder = str(Path(path).parent) if env.bnb_missing else "<site-packages>/bitsandbytes"
    if usable:
        pick = max(usable, key=_hip_of)
        fix = f"export BNB_ROCM_VERSION={pick}   (loads the shipped libbitsandbytes_rocm{pick}.so)"
    else:
        fix = f"ls {folder}/libbitsandbytes_rocm*.so, then export BNB_ROCM_VERSION=<the digits of the newest one>"
    return Finding.error(check, f"bitsandbytes looks for {Path(path).name}, which is not installed: import fails with "
                                "'Configured ROCm binary not found'",
                         f"the name comes from {hip}: bitsandbytes through 0.49.2 computes major*10+minor, so 7.12 and "
                         "7.14 become 82 and 84" + (f"; installed: {', '.join(env.bnb_files)}" if env.bnb_files else "")
                         + f" ({BNB_LIBRARY_SOURCE})",
                         fix + "   (bitsandbytes PR #1878; a release without it: build one, cmake -DCOMPUTE_BACKEND=hip "
                               f"-DROCM_VERSION={digits} -DBNB_ROCM_ARCH=<your gfx> -S . && make && pip install .)")


def check_packages(probe: Probe) -> list[Finding]:
    """Live: the installed packages' metadata (never imported): a replaced ROCm torch and bitsandbytes' gates."""
    env = read_installed(probe.site_paths)
    gpu = probe.info.primary
    arch = gpu.arch if gpu is not None else (probe.host_archs[0] if probe.host_archs else None)
    findings = torch_replacement_findings(env, arch=arch, platform=sys.platform)
    findings += bitsandbytes_findings(env, arch, probe.hip_version, rocm=probe.flavour == "rocm" or bool(probe.amd_evidence))
    findings += qlora_findings(probe.info.backend, arch, env.version("bitsandbytes"))
    return findings


def qlora_findings(backend: str, arch: Optional[str], installed: Optional[str], check: str = "qlora") -> list[Finding]:
    """Whether quantization_bit (QLoRA) can run here: the same gate `train` applies (hardware/quantization.py), with the
    floors it comes from; absent bitsandbytes is information (QLoRA is optional), an old one a warning."""
    status = bitsandbytes_status(backend, arch, installed, look_up=False)
    if status.usable:
        return [Finding.info(check, f"QLoRA (quantization_bit: 4 | 8) can run here: {status.why}", GATE_SOURCE)]
    if status.installed is None and status.floor:
        return [Finding.info(check, f"QLoRA (quantization_bit: 4 | 8) needs bitsandbytes, which is not installed",
                             f"the floor here: {status.floor} ({GATE_SOURCE})", status.fix)]
    return [Finding.warn(check, f"QLoRA (quantization_bit: 4 | 8) cannot run here: {status.why}", GATE_SOURCE,
                         status.fix)]


# ---------------------------------------------------------------------------------------------------------
# Import failures in a traceback: which module was missing, whose package it is, and whose code imported it
# ---------------------------------------------------------------------------------------------------------

# import names whose pip distribution is named otherwise (the fix installs the distribution)
IMPORT_DISTRIBUTIONS = {
    "cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn", "flash_attn": "flash-attn",
    "llama_cpp": "llama-cpp-python", "mamba_ssm": "mamba-ssm", "causal_conv1d": "causal-conv1d",
    "auto_gptq": "auto-gptq", "awq": "autoawq", "faster_whisper": "faster-whisper", "whisper": "openai-whisper",
    "torch_directml": "torch-directml", "transformer_engine": "transformer-engine", "pynvml": "nvidia-ml-py",
    "huggingface_hub": "huggingface-hub", "google.protobuf": "protobuf", "attr": "attrs", "skimage": "scikit-image",
    "onnxruntime": "onnxruntime", "ctranslate2": "ctranslate2", "jaxlib": "jaxlib", "bitsandbytes": "bitsandbytes",
    "awq_ext": "autoawq-kernels",   # AutoAWQ's compiled kernels, a distribution of their own
}


def distribution_of(module: str) -> str:
    """The pip distribution of an import name: 'llama_cpp' -> 'llama-cpp-python', 'cv2' -> 'opencv-python'."""
    return IMPORT_DISTRIBUTIONS.get(module, IMPORT_DISTRIBUTIONS.get(module.split(".")[0],
                                                                    module.split(".")[0].replace("_", "-")))


_NO_MODULE = re.compile(r"No module named ['\"]?([A-Za-z_][\w.]*)")
_CANNOT_IMPORT = re.compile(r"cannot import name ['\"]?(\w+)['\"]? from (?:partially initialized module )?['\"]?"
                            r"([A-Za-z_][\w.]*)")
# a module's attribute that is not there (numpy 1.24 dropped np.float; torch.compiler came with 2.1); not a module
# half-imported by a circular import
_NO_ATTRIBUTE = re.compile(r"(?<!partially initialized )module ['\"]([A-Za-z_][\w.]*)['\"] has no attribute ['\"](\w+)")
_FRAME = re.compile(r"(?:site|dist)-packages[/\\]+([A-Za-z_]\w*)[/\\]")
# an optional import the program reported and went on without (xformers: "A matching Triton is not available, some
# optimizations will not be enabled. Error caught was: No module named 'triton'"): no failure of its own
_OPTIONAL = re.compile(r"(?i)Error caught was|optimizations will not be enabled|\bwarn(?:ing)?\b|will not be available|"
                       r"falling back|is not available, ")


@dataclass(frozen=True)
class ImportFailure:
    line_no: int                # 1-based, in the lines read
    line: str
    module: str                 # the module that was not found, or the one a name could not be imported from
    name: Optional[str]         # the name that could not be imported from `module`
    caller: Optional[str]       # the installed package whose code ran the import (its site-packages folder)
    attribute: bool = False     # "module X has no attribute N" rather than an import

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    @property
    def distribution(self) -> str:
        return distribution_of(self.module)

    @property
    def moved(self) -> bool:
        """A part of a package that is installed: a submodule or a name missing from it means the installed release
        is not the one the importing code was written for (the path moved or went away between releases)."""
        return (self.name is not None or "." in self.module) and self.caller != self.top


def read_import_failure(lines: list[str]) -> Optional[ImportFailure]:
    """The first "No module named X" / "cannot import name N from X" / "module X has no attribute N" of a traceback,
    with the package whose frame ran the import (the nearest site-packages path above it, or the code line `from X import N` shows)."""
    for number, line in enumerate(lines, 1):
        missing, cannot, attribute = _NO_MODULE.search(line), _CANNOT_IMPORT.search(line), _NO_ATTRIBUTE.search(line)
        if not (missing or cannot or attribute) or "circular import" in line or \
                _OPTIONAL.search(line + " " + (lines[number - 2] if number > 1 else "")):
            continue
        found = cannot or attribute
        module = (found.group(2 if cannot else 1) if found else missing.group(1)).rstrip(".")
        name = cannot.group(1) if cannot else attribute.group(2) if attribute else None
        caller = None
        for above in reversed(lines[max(0, number - 7): number - 1]):
            frame = _FRAME.search(above)
            # an attribute is looked up through the package's own frames (numpy's __getattr__): its user is above them
            if frame and not (attribute and frame.group(1) == module.split(".")[0]):
                caller = frame.group(1)
                break
        return ImportFailure(number, line.strip(), module, name, caller, bool(attribute and not (missing or cannot)))
    return None
