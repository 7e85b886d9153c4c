"""Rules over facts, not over wording: each rule reads the facts of a paste (facts.py) and its classed error lines
(error_lines.py) and, where they establish a cause, returns a `Diagnosis` whose fix carries the machine's own values
(fixes.py). One rule per cause family; a rule that cannot settle its family returns None and leaves the lines to
another rule or to the "unrecognised error" finding.

Order: every rule runs; the diagnoses are sorted so that one the facts confirm comes before a likely one, and a root
cause (the variable that never reached the service) before its symptom (the GPU that was not found).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.facts import Fact, FactSheet, discrete_archs, vendor_of
from steadytune.doctor.fixes import (
    INFERENCE_TOOLS,
    cuda_wheel_for,
    failing_tool,
    override_value,
    rebuild_line,
    rocm_index_for,
    set_variable,
    wheel_line,
)
from steadytune.hardware.gpu_facts import OFFICIAL_WHEEL_ARCHS, arch_info, normalise_gfx, override_for_arch
from steadytune.hardware.unified_memory import GIB, PAGE

OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"
_CRASH = re.compile(r"(?i)segmentation fault|core dumped|\bsigsegv\b|\baborted\b|\bsigabrt\b|exit (?:status|code) "
                    r"(?:134|139|-11|-6)\b|returned non-zero exit status -?(?:11|6)\b|Floating point exception")
_NO_GPU_USE = re.compile(r"(?i)no compatible (?:amd)?gpus? (?:were )?(?:discovered|detected|found)|"
                         r"library=cpu|running on (?:the )?cpu|100% CPU|inference compute.*library=cpu|"
                         r"offloaded 0/\d+ layers|No HIP GPUs are available|No CUDA GPUs are available|"
                         r"hipErrorNoDevice|no ROCm-capable device")


@dataclass
class Diagnosis:
    family: str
    title: str
    cause: str
    fix: str
    evidence: list[Fact] = field(default_factory=list)
    covers: list[int] = field(default_factory=list)     # the error line numbers it explains
    severity: str = "error"
    confirmed: bool = True                              # the facts establish it; False: the likely reading of a symptom
    rank: int = 50
    entry: Optional[str] = None                         # the catalogue entry it restates, where it adds nothing to it


@dataclass
class Context:
    sheet: FactSheet
    errors: list[ErrorLine]

    def of(self, *families: str) -> list[ErrorLine]:
        return [e for e in self.errors if e.family in families]

    def crashes(self) -> list[ErrorLine]:
        return [e for e in self.errors if _CRASH.search(e.line)]

    def no_gpu(self) -> list[ErrorLine]:
        return [e for e in self.errors if _NO_GPU_USE.search(e.line)]

    def line_fact(self, error: ErrorLine) -> Fact:
        return Fact("error", error.family or "unknown", error.line_no, error.line)

    def tool(self, errors: list[ErrorLine] = ()) -> Optional[str]:
        return failing_tool(self.sheet, tuple(e.line_no for e in errors))

    def override(self) -> Optional[Fact]:
        """The override in force: the last one set, where a server's own view (Ollama's config line) wins."""
        found = [f for f in self.sheet.of("env") if f.value.split("=", 1)[0] == OVERRIDE]
        server = [f for f in found if f.detail == "server"]
        chosen = (server or found)
        return chosen[-1] if chosen and chosen[-1].value.split("=", 1)[1] else None

    def arch(self, errors: list[ErrorLine] = ()) -> tuple[Optional[str], Optional[Fact]]:
        """The GPU the error is about: a gfx / sm string on (or right beside) the error lines, else the machine's
        first discrete GPU, else its only GPU."""
        numbers = {e.line_no for e in errors}
        near = [f for f in self.sheet.of("arch") if any(abs(f.line_no - n) <= 1 for n in numbers)]
        for fact in near + self.sheet.of("arch"):
            if fact.detail == "machine":
                return normalise_gfx(fact.value), fact
        archs = discrete_archs(self.sheet)
        if archs:
            fact = next(f for f in self.sheet.of("arch") if f.value == archs[0])
            return archs[0], fact
        return None, None


Rule = Callable[[Context], Optional[Diagnosis]]
RULES: list[tuple[str, Rule]] = []


def rule(name: str) -> Callable[[Rule], Rule]:
    def register(function: Rule) -> Rule:
        RULES.append((name, function))
        return function
    return register


def _make(name: str, title: str, cause: str, fix: str, evidence: list[Fact], covers: list[ErrorLine],
          confirmed: bool = True, severity: str = "error") -> Diagnosis:
    return Diagnosis(name, title, cause, fix, [f for f in evidence if f is not None],
                     sorted({e.line_no for e in covers}), severity, confirmed, family(name).rank)


def _catalogue(errors: list[ErrorLine]) -> Optional[ErrorLine]:
    return next((e for e in errors if e.catalogue is not None), None)


def _restate(name: str, hit: ErrorLine, covers: list[ErrorLine]) -> Diagnosis:
    """The catalogue entry that matched, as a diagnosis (its cause and fix are already made for the machine)."""
    m = hit.catalogue
    diagnosis = _make(name, m.entry.title, m.cause, m.fix, [Fact("error", name, hit.line_no, hit.line)], covers,
                      severity=m.entry.severity)
    diagnosis.entry = m.entry.id
    return diagnosis


# ---------------------------------------------------------------------------------------------------------
# A variable set where the process does not start
# ---------------------------------------------------------------------------------------------------------

@rule("env-not-applied")
def env_not_applied(ctx: Context) -> Optional[Diagnosis]:
    sheet = ctx.sheet
    symptoms = ctx.of("arch-missing", "visibility", "gpu-hang") + ctx.crashes() + ctx.no_gpu()
    tool = ctx.tool(symptoms)
    for fact in sheet.of("env"):
        name, value = fact.value.split("=", 1)
        if fact.detail == "fish-unexported":
            return _make("env-not-applied", f"{name} is set but not exported",
                         f"fish's `set -U {name} {value}` makes a universal variable that is not exported, so the "
                         "programs the shell starts never see it",
                         f"export {name}={value} (in fish: set -Ux {name} {value})", [fact], symptoms)
    for name in sorted({f.value.split("=", 1)[0] for f in sheet.of("env")}):
        settings = [f for f in sheet.of("env") if f.value.split("=", 1)[0] == name]
        served = [f for f in settings if f.detail == "server"]
        asked = [f for f in settings if f.detail not in ("server", "printed") and f.value.split("=", 1)[1]]
        if served and asked and not served[-1].value.split("=", 1)[1]:
            value = asked[-1].value.split("=", 1)[1]
            return _make("env-not-applied", f"{name} never reached the {tool or 'server'} process",
                         f"{name}={value} is set ({asked[-1].detail}), but the server's own environment shows it "
                         "empty: the process that runs the model never received it",
                         set_variable(name, value, sheet, tool), [asked[-1], served[-1]], symptoms)
        if asked and not served and symptoms and tool == "ollama" and asked[-1].detail in ("export", "prefix") \
                and name == OVERRIDE and sheet.has("platform", "systemd"):
            value = asked[-1].value.split("=", 1)[1]
            return _make("env-not-applied", f"{name} is exported in a shell, but Ollama runs as a systemd service",
                         "a service does not read the shell's exports (.bashrc, a terminal session): the server "
                         f"runs without {name}", set_variable(name, value, sheet, tool), [asked[-1]], symptoms)
    # a notebook or script that sets the variable after torch (or HIP) has already started
    imported = next((f for f in sheet.of("tool") if f.value == "torch" and re.search(r"^\s*import torch|^\s*from torch",
                                                                                       f.line)), None)
    late = [f for f in sheet.of("env") if f.detail == "python" and imported and f.line_no > imported.line_no]
    if late and symptoms:
        name, value = late[0].value.split("=", 1)
        return _make("env-not-applied", f"{name} is set after torch was imported",
                     "HIP reads its variables once, when torch first initialises the GPU; a later os.environ change "
                     "does nothing in that process",
                     f"set it before the import: os.environ[\"{name}\"] = \"{value}\" above import torch (restart "
                     "the kernel), or export it before starting Python", [imported, late[0]], symptoms)
    return None


# ---------------------------------------------------------------------------------------------------------
# Code without this GPU's architecture, and overrides
# ---------------------------------------------------------------------------------------------------------

def _family_of(arch: str) -> str:
    base = normalise_gfx(arch)
    return base[:-2] if len(base) >= 6 else base[:4]


def _target(value: str) -> Optional[str]:
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", value.strip())
    return f"gfx{m.group(1)}{m.group(2)}{int(m.group(3)):x}" if m else None


@rule("override-wrong")
def override_wrong(ctx: Context) -> Optional[Diagnosis]:
    setting = ctx.override()
    if setting is None:
        return None
    value = setting.value.split("=", 1)[1]
    symptoms = ctx.of("gpu-hang", "override-wrong", "arch-missing") + ctx.crashes()
    archs = discrete_archs(ctx.sheet)
    target = _target(value)
    tool = ctx.tool(symptoms)
    if target is None:
        arch = archs[0] if archs else None
        good = override_value(arch, tool)[0] if arch else None
        return _make("override-wrong", f"{OVERRIDE}={value} is not a version",
                     f"the runtime expects X.Y.Z (10.3.0 for gfx1030 code); {value!r} is ignored or rejected",
                     set_variable(OVERRIDE, good, ctx.sheet, tool) if good else f"unset {OVERRIDE}",
                     [setting], symptoms)
    if not archs:
        return None
    arch = archs[0]
    if _family_of(arch) != _family_of(target):
        good, caveat = override_value(arch, tool)
        fix = (set_variable(OVERRIDE, good, ctx.sheet, tool) + caveat) if good else \
            f"unset {OVERRIDE}; " + (rocm_index_for(arch) if arch.startswith("gfx") else "")
        return _make("override-wrong", f"{OVERRIDE}={value} runs another family's code on {arch}",
                     f"the GPU is {arch}; {value} makes it load {target} code, a different instruction set",
                     fix, [setting, _arch_fact(ctx, arch)], symptoms)
    amd = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    families = {_family_of(a) for a in amd}
    if len(families) > 1 and symptoms:
        return _make("override-wrong", f"{OVERRIDE} applies to every GPU, of two families here",
                     f"the machine has {', '.join(amd)}; one override makes all of them run {target} code",
                     f"hide the other GPU (HIP_VISIBLE_DEVICES=<index of the {arch}>) or set the override per GPU: "
                     f"{OVERRIDE}_<KFD node>={value}", [setting], symptoms)
    row = arch_info(arch)
    if symptoms and row is not None and row.override.verdict == "trap" and target != arch:
        return _make("override-wrong", f"{OVERRIDE}={value} is known to fail on {arch}",
                     f"{target} code on {arch}: {row.override.why}",
                     f"unset {OVERRIDE}; {rocm_index_for(arch)}", [setting], symptoms)
    return None


def _arch_fact(ctx: Context, arch: str) -> Optional[Fact]:
    return next((f for f in ctx.sheet.of("arch") if f.value == arch), None)


def _needs_other_code(arch: str) -> bool:
    """An AMD arch the pytorch.org wheels do not carry (so code for it comes from an override or a special build)."""
    return arch.startswith("gfx") and arch not in OFFICIAL_WHEEL_ARCHS


@rule("arch-missing")
def arch_missing(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("arch-missing")
    arch, where = ctx.arch(errors)
    if not errors:
        # the same problem without its message: a crash or a CPU fallback on a GPU the builds do not carry
        symptoms = ctx.crashes() + ctx.no_gpu()
        if not (symptoms and arch and _needs_other_code(arch) and ctx.override() is None):
            return None
        errors = symptoms
    tool = ctx.tool(errors)
    if arch is None:
        cls = family("arch-missing")
        return _make("arch-missing", "code built without this GPU's architecture",
                     f"{tool or 'the program'} has no code for the GPU it runs on; the paste does not say which GPU",
                     f"find the arch ({cls.next}), then set the override or rebuild for it", [], errors,
                     confirmed=False)
    if ctx.override() is not None and errors:
        value = ctx.override().value.split("=", 1)[1]
        if _target(value) and _family_of(_target(value)) == _family_of(arch) and tool not in ("llama.cpp",):
            # the override is right and in force, so it is the library itself that lacks even the sibling's code
            line = rebuild_line(tool, arch) or wheel_line(arch) or f"a build of {tool} with {arch}"
            return _make("arch-missing", f"{tool or 'a library'} has no code for {arch} even with the override",
                         f"{OVERRIDE}={value} is in force, and the code that failed was built without {_target(value)} "
                         f"and {arch}", line, [where, ctx.override()], errors)
    return _make("arch-missing", f"{tool or 'the build'} has no code for {arch}",
                 _arch_cause(arch, tool, ctx), _arch_fix(arch, tool, ctx), [where, ctx.line_fact(errors[0])], errors)


def _arch_cause(arch: str, tool: Optional[str], ctx: Context) -> str:
    name = {"ollama": "Ollama's ROCm runner", "llama.cpp": "llama.cpp's HIP build", "rocblas": "rocBLAS (Tensile)",
            "bitsandbytes": "bitsandbytes' library", "torch": "this torch build"}.get(tool or "", tool or "the build")
    built = [b for b in ctx.sheet.values("built_for") if b != arch]
    listed = f" (it lists {', '.join(built[:8])}{'...' if len(built) > 8 else ''})" if built else ""
    return f"{name} carries no code for {arch}{listed}"


def _arch_fix(arch: str, tool: Optional[str], ctx: Context) -> str:
    sheet = ctx.sheet
    if arch.startswith("sm_"):
        if tool in ("bitsandbytes", "llama.cpp", "vllm", "flash-attn", "xformers"):
            return rebuild_line(tool, arch) or ""
        return _cuda_index_for_driver(ctx, arch)
    value, caveat = override_value(arch, tool)
    if sheet.is_windows and tool in ("rocblas", "ollama", "zluda", "comfyui", "a1111", "torch", None):
        rocm = sheet.values("rocm")
        sdk = f"HIP SDK {rocm[0]}" if rocm else "the HIP SDK"
        return (f"on Windows the override does not apply to the HIP SDK's libraries: put a rocblas.dll and "
                f"rocblas/library built for {arch} (for {sdk}) into the SDK's bin folder, or use a build of the "
                f"program that bundles {arch} kernels")
    if tool == "llama.cpp":
        line = rebuild_line(tool, arch)
        return line + (f"; or run it with {OVERRIDE}={value}{caveat}" if value else "")
    if value:
        fix = set_variable(OVERRIDE, value, sheet, tool) + f" ({arch} runs {_target(value)} code){caveat}"
        if tool == "torch" or tool is None:
            wheel = wheel_line(arch)
            if wheel:
                fix += f"; or a torch that has {arch} itself: {wheel}"
        return fix
    rebuild = rebuild_line(tool, arch)
    if rebuild:
        return rebuild
    wheel = wheel_line(arch)
    if wheel:
        return wheel
    row = arch_info(arch)
    return f"no build carries {arch}" + (f": {row.note}" if row and row.note else "") + \
        "; use the Vulkan backend where the tool has one (llama.cpp -DGGML_VULKAN=ON)"


@rule("gpu-unsupported")
def gpu_unsupported(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("gpu-unsupported") + [e for e in ctx.of("driver") if re.search(r"not supported in kfd", e.line)]
    arch, where = ctx.arch(errors)
    old = arch is not None and arch.startswith("gfx") and (arch[3] in "678" and len(arch) == 6)
    if not errors and not (old and (ctx.crashes() or ctx.of("arch-missing", "device-access"))):
        return None
    chip = re.search(r"amdgpu: (\w+)\s+not supported in kfd", " ".join(e.line for e in errors))
    name = chip.group(1) if chip else arch or "this GPU"
    return _make("gpu-unsupported", f"{name} is outside ROCm",
                 f"the driver's compute part (KFD) or every current ROCm release leaves {name} out, and no newer "
                 "chip's code runs on it",
                 "use a backend that runs on it: Vulkan (llama.cpp -DGGML_VULKAN=ON, Ollama's Vulkan runner) or "
                 "OpenCL; for ROCm itself only an old release that still listed it (gfx803: ROCm 5.x community builds)",
                 [where] + [ctx.line_fact(e) for e in errors[:1]], errors + ctx.crashes() + ctx.of("arch-missing"))


# ---------------------------------------------------------------------------------------------------------
# The process cannot reach the GPU
# ---------------------------------------------------------------------------------------------------------

_DEVICE_LISTING = re.compile(r"^c[rwx-]{9}\S*\s+\d+\s+\S+\s+(\S+)\s+\d+,\s*\d+.*?(/dev/\S+|renderD\d+|kfd)\s*$")


@rule("device-access")
def device_access(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("device-access")
    root_only = ctx.sheet.first("root_only")
    if not errors and root_only is None:
        return None
    groups = []
    for line in ctx.sheet.lines:
        m = _DEVICE_LISTING.match(line.strip())
        if m and m.group(1) not in groups and m.group(1) != "root":
            groups.append(m.group(1))
    text = " ".join(e.line for e in errors)
    in_container = ctx.sheet.has("platform", "container")
    missing = re.search(r"/dev/kfd\S*:? No such file|No such file or directory.*?/dev/kfd|/dev/dri\S*:? No such file",
                        text) or (in_container and "No such file" in text)
    if missing:
        return _make("device-access", "the GPU device files are not in the container",
                     "/dev/kfd and /dev/dri/renderD* must be passed into the container (and their groups added) or "
                     "ROCm sees no GPU",
                     "docker run --device=/dev/kfd --device=/dev/dri --group-add video --group-add render "
                     "--security-opt seccomp=unconfined ... (podman: the same; apptainer: --rocm, or --bind "
                     "/dev/kfd,/dev/dri)", [ctx.line_fact(e) for e in errors[:2]], errors)
    if in_container and not root_only:
        wanted = groups or ["render", "video"]
        return _make("device-access", "the container's user may not open the GPU device files",
                     "inside a container the device files keep the host's groups: the process needs them added, and a "
                     "rootless container never has more rights than the host user who started it",
                     f"start it with --group-add video --group-add render (rootless podman: --group-add keep-groups), "
                     f"and put the host user in those groups: sudo usermod -aG {','.join(wanted)} $USER, then log in "
                     "again", [ctx.line_fact(e) for e in errors[:2]], errors)
    wanted = groups or ["render", "video"]
    cause = ("only root can open /dev/kfd and /dev/dri/renderD*: the user is not in the group"
             f"{'s' if len(wanted) > 1 else ''} that own them ({', '.join(wanted)})")
    evidence = [ctx.line_fact(e) for e in errors[:2]] + ([root_only] if root_only else [])
    return _make("device-access", "the user may not open the GPU device files", cause,
                 f"sudo usermod -aG {','.join(wanted)} $USER, then log out and back in (or reboot); never run the "
                 "job with sudo instead", evidence, errors + ctx.no_gpu())


@rule("wsl")
def wsl(ctx: Context) -> Optional[Diagnosis]:
    if not ctx.sheet.has("platform", "wsl"):
        return None
    errors = ctx.of("wsl", "visibility", "device-access", "driver") + ctx.no_gpu()
    if not errors and _vendor(ctx) == "amd":
        errors = [e for e in ctx.errors if e.family in (None, "torch-build", "rocm-libs-missing")]
    if not errors and not ctx.sheet.has("complaint"):
        return None
    fact = next(f for f in ctx.sheet.facts if f.kind == "platform" and f.value == "wsl")
    labels = [f.value.split("+rocm", 1)[1] for f in ctx.sheet.of("torch") if "+rocm" in f.value]
    therock = ctx.sheet.has("layout", "therock") or (labels[-1].startswith("7") if labels else
                                                     any(v.startswith("7") for v in ctx.sheet.values("rocm")))
    runtime = ("ROCm 7 on WSL reaches the GPU through librocdxg: install AMD's WSL driver stack (amdgpu-install "
               "--usecase=wsl,rocm --no-dkms) and keep librocdxg on the library path" if therock else
               "install AMD's ROCm for WSL (amdgpu-install -y --usecase=wsl,rocm --no-dkms), then replace the "
               "libhsa-runtime64.so that the torch wheel bundles with /opt/rocm/lib/libhsa-runtime64.so.1")
    return _make("wsl", "WSL 2: the ROCm runtime cannot see the GPU through /dev/dxg",
                 "under WSL 2 there is no /dev/kfd; only AMD's WSL runtime talks to the Windows driver through "
                 "/dev/dxg, and the stock Linux runtime (the one pytorch.org wheels bundle) finds no GPU",
                 runtime + "; the Windows Adrenalin driver must be the WSL-enabled release", [fact], errors)


@rule("driver")
def driver(ctx: Context) -> Optional[Diagnosis]:
    errors = [e for e in ctx.of("driver") if not re.search(r"not supported in kfd", e.line)
              and not (_NVIDIA_DRIVER.search(e.line) and _vendor(ctx) == "amd")]   # a CUDA torch on AMD: torch-build
    unreadable = [f for f in ctx.sheet.of("sensors") if f.value == "unreadable"]
    if unreadable and not errors:
        names = ", ".join(dict.fromkeys(f.detail for f in unreadable))
        every = not any(f.value == "read" for f in ctx.sheet.of("sensors"))
        return _make("driver", f"the GPU table reads no sensor of {names}" + (" (of any GPU)" if every else ""),
                     "every sensor reads N/A: the driver does not answer for that GPU (the amdgpu module not bound to "
                     "it, a GPU passed to a VM without its power management, or an smi tool older than the card), so "
                     "the table is no proof of a working GPU",
                     "sudo dmesg | grep -i -e amdgpu -e kfd | tail -30; rocminfo | grep -e Marketing -e gfx (lists "
                     "only the GPUs ROCm can use); amd-smi static --asic", unreadable, [],
                     severity="error" if every else "warning")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    kernel = ctx.sheet.first("kernel")
    if re.search(r"(?i)couldn't communicate with the NVIDIA driver", text):
        fix = ("the NVIDIA kernel module is not loaded: reinstall the driver for the running kernel (sudo apt install "
               "--reinstall nvidia-driver-<version>; or dkms autoinstall), check Secure Boot, reboot")
        cause = "nvidia-smi cannot reach the kernel driver (a kernel update without the module rebuilt, or Secure Boot)"
    elif re.search(r"(?i)driver (?:on your system is too old|version is insufficient)", text):
        found = re.search(r"found version (\d{4,5})", text)
        cuda = ctx.sheet.values("cuda")
        most = (f"{int(found.group(1)) // 1000}.{int(found.group(1)) % 1000 // 10}" if found else
                cuda[-1] if cuda else None)
        older = ""
        if most and most.split(".")[0] == "11":
            older = "; or keep the driver and install the torch built for CUDA 11: --index-url " \
                    "https://download.pytorch.org/whl/cu118"
        elif most and most.split(".")[0] == "12":
            older = "; or keep the driver and install the torch built for CUDA 12.6: --index-url " \
                    "https://download.pytorch.org/whl/cu126"
        fix = (f"update the NVIDIA driver (it runs CUDA {most or '?'} at most; a current torch needs a driver for "
               f"CUDA 12: 525 or newer, 570+ for CUDA 12.8){older}")
        cause = "torch was built for a newer CUDA than the installed driver supports"
    elif re.search(r"(?i)Bad return status for module build|dkms.*(?:error|failed)|dkms-failed", text):
        fix = ("boot a kernel that the ROCm release supports, or drop the DKMS module: sudo amdgpu-install "
               "--usecase=rocm --no-dkms (the kernel's own amdgpu driver serves ROCm)")
        cause = "the amdgpu-dkms module does not build for this kernel" + (f" ({kernel.value})" if kernel else "")
    elif re.search(r"amdgpu version file missing", text):
        return None   # Ollama's note on distribution kernels: harmless by itself, the real cause is elsewhere
    elif re.search(r"(?i)firmware", text):
        fix = "install a newer linux-firmware package (the GPU's firmware files are newer than the distribution's)"
        cause = "amdgpu cannot load this GPU's firmware"
    else:
        fix = ("sudo modprobe amdgpu and read sudo dmesg | grep -i amdgpu; if it is not there, install the driver "
               "(sudo amdgpu-install --usecase=dkms) or boot a kernel that has it")
        cause = "the amdgpu kernel driver is not loaded for the GPU"
    return _make("driver", "the GPU driver is not working", cause, fix, [ctx.line_fact(e) for e in errors[:2]],
                 errors + ctx.no_gpu())


# ---------------------------------------------------------------------------------------------------------
# What was installed
# ---------------------------------------------------------------------------------------------------------

_NVIDIA_DRIVER = re.compile(r"(?i)NVIDIA|CUDA driver|couldn't communicate")


def _vendor(ctx: Context) -> Optional[str]:
    """The GPU vendor the text is about: from its facts, else from the words AMD / Radeon / ROCm in it."""
    return vendor_of(ctx.sheet) or ("amd" if re.search(r"\bAMD\b|Radeon|ROCm|\bHIP\b", "\n".join(ctx.sheet.lines))
                                    else None)


@rule("torch-build")
def torch_build(ctx: Context) -> Optional[Diagnosis]:
    vendor = _vendor(ctx)
    errors = ctx.of("torch-build") + ([e for e in ctx.of("driver") if _NVIDIA_DRIVER.search(e.line)]
                                      if vendor == "amd" else [])
    builds = ctx.sheet.of("torch")
    wrong = [f for f in builds if (vendor == "amd" and f.detail in ("cuda", "cpu", "no-hip")) or
             (vendor == "nvidia" and f.detail in ("rocm", "cpu"))]
    if not errors and not (wrong and (ctx.no_gpu() or ctx.of("visibility"))):
        return None
    arch, where = ctx.arch(errors)
    evidence = [ctx.line_fact(e) for e in errors[:1]] + wrong[:1] + [where]
    if vendor == "nvidia":
        return _make("torch-build", "a torch without CUDA on an NVIDIA GPU",
                     "the installed torch is a CPU (or ROCm) build", "pip uninstall -y torch; pip cache purge; " +
                     _cuda_index_for_driver(ctx, arch), evidence, errors + ctx.no_gpu())
    if vendor is None:
        return _make("torch-build", "a torch without GPU support",
                     "the installed torch is a CPU build (PyPI's default on Windows and macOS, or a cached CPU wheel), "
                     "so it finds no GPU",
                     "pip uninstall -y torch; pip cache purge; then the GPU build from pytorch.org's index: pip install "
                     "torch --index-url https://download.pytorch.org/whl/cu128 (NVIDIA; cu118 for a driver older than "
                     "CUDA 12) or https://download.pytorch.org/whl/rocm7.2 (AMD, Linux)", evidence,
                     errors + ctx.no_gpu())
    if ctx.sheet.is_windows:
        return _make("torch-build", "a torch without GPU support on a Windows AMD machine",
                     "pip on Windows installs PyPI's CPU torch; pytorch.org publishes no ROCm wheels for Windows",
                     "AMD's ROCm wheels for Windows (repo.radeon.com, for the RDNA3/RDNA4 and Strix GPUs they list), "
                     "or run under WSL 2 or Linux with the pytorch.org ROCm index", evidence, errors + ctx.no_gpu())
    return _make("torch-build", "a torch without ROCm on an AMD machine",
                 "the installed torch is a CUDA or CPU build (PyPI's default), which finds no AMD GPU",
                 "pip uninstall -y torch torchvision torchaudio; " + rocm_index_for(arch), evidence,
                 errors + ctx.no_gpu())


def _cuda_index_for_driver(ctx: Context, arch: Optional[str]) -> str:
    """The CUDA wheel index the installed driver can run (nvidia-smi's "CUDA Version" is the newest it supports),
    and that carries the GPU's compute capability."""
    driver = [f for f in ctx.sheet.of("cuda") if re.search(r"CUDA Version:", f.line)]
    if arch and re.fullmatch(r"sm_\d+", arch) and int(arch[3:]) >= 100:   # Blackwell: CUDA 12.8 whatever else
        return cuda_wheel_for(arch) or ""
    if driver:
        major, minor = (int(x) for x in driver[-1].value.split(".")[:2])
        label = "cu118" if major < 12 else "cu128" if (major, minor) >= (12, 8) else "cu126"
        return (f"pip install torch --index-url https://download.pytorch.org/whl/{label} (the driver runs CUDA "
                f"{driver[-1].value} at most)")
    return (cuda_wheel_for(arch) if arch else None) or "pip install torch --index-url https://download.pytorch.org/whl/cu128"


_WHEEL = re.compile(r"(\S+?)-(\d[\w.+!]*)-(?:\d\w*-)?(cp\d+|py3\w*)-(\w+)-(\w+)\.whl")


@rule("wheel-platform")
def wheel_platform(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("wheel-platform")
    if not errors:
        return None
    text = "\n".join(e.line for e in errors)
    python = ctx.sheet.values("python")
    m = _WHEEL.search(text)
    if m:
        tag, platform = m.group(3), m.group(5)
        wanted = f"3.{tag[3:]}" if tag.startswith("cp3") else None
        here = [p for p in python if p != wanted]
        cause = f"{m.group(1)} {m.group(2)} is built for {'Python ' + wanted if wanted else tag} on {platform}"
        if here:
            cause += f"; this Python is {here[-1]}"
        if wanted and here:
            fix = (f"use a Python {wanted} environment (uv venv -p {wanted}, or conda create -n env python={wanted}), "
                   f"or download the wheel tagged cp{here[-1].replace('.', '')}")
        elif wanted:
            fix = (f"this wheel needs Python {wanted} (check python --version): use a Python {wanted} environment, "
                   "or the wheel built for your Python")
        else:
            fix = f"download the wheel built for this platform and Python (not {platform}, {tag})"
        if "win" in platform and not ctx.sheet.is_windows or ("linux" in platform and ctx.sheet.is_windows):
            fix = f"this is a {platform} wheel: use the one built for this OS (or run under WSL 2 / Linux)"
        return _make("wheel-platform", "a wheel for another Python or platform", cause, fix,
                     [ctx.line_fact(errors[0])], errors)
    package = re.search(r"(?:requirement|distribution found for) (\S+)", text)
    name = package.group(1) if package else "the package"
    py = python[-1] if python else None
    cause = (f"the index has no {name} for this Python{' (' + py + ')' if py else ''} and platform")
    if ctx.sheet.is_windows and re.search(r"rocm", text):
        fix = "pytorch.org's ROCm wheels are Linux only: use WSL 2 or Linux, or AMD's Windows wheels"
    else:
        fix = (f"use a Python the index builds for (3.10-3.12 for most ROCm wheels; check with pip index versions "
               f"{name.split('==')[0]} --index-url <the index>), or pick a version the index lists")
    return _make("wheel-platform", "no wheel for this Python or platform", cause, fix, [ctx.line_fact(errors[0])],
                 errors)


_SYMBOL_LIB = re.compile(r"(?:site-packages|dist-packages)[/\\]([\w\-]+)[/\\]\S*?\.(?:so|pyd|dll)|"
                         r"\b(lib\w+?)(?:_\w+)?\.so\b|\b(\w+?)(?:\.cpython\S*)?\.so: undefined symbol")


@rule("abi-mismatch")
def abi_mismatch(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("abi-mismatch")
    if not errors:
        return None
    first = errors[0]
    if first.catalogue is not None and first.catalogue.entry.id == "undefined-symbol-rocm-libs":
        return _restate("abi-mismatch", first, errors)
    text = first.line
    torch = next((f.value for f in ctx.sheet.of("torch") if f.value != "not-rocm"), None)
    if re.search(r"GLIBCXX", text):
        return _make("abi-mismatch", "an older libstdc++ than the extension needs",
                     "the process loads a libstdc++ (often conda's) older than the one the extension was built with",
                     "conda install -c conda-forge 'libstdcxx-ng>=12' in that environment, or put the system's first: "
                     "export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6", [ctx.line_fact(first)], errors)
    if re.search(r"(?i)numpy", text):
        return _make("abi-mismatch", "a module built for NumPy 1.x under NumPy 2",
                     "the extension was compiled against NumPy 1.x; NumPy 2 changed the ABI",
                     "pip install 'numpy<2' (or upgrade the module to a release built for NumPy 2)",
                     [ctx.line_fact(first)], errors)
    if re.search(r"torchvision::nms", text):
        return _make("abi-mismatch", "torchvision does not match torch",
                     "torchvision's compiled operators were built for another torch release or build",
                     "install torchvision from the same index as torch, the matching release (torchvision 0.N pairs "
                     f"with torch 2.(N-15)){': torch is ' + torch if torch else ''}; e.g. pip install --force-reinstall "
                     "torch torchvision --index-url <torch's index>", [ctx.line_fact(first)], errors)
    package = _package_of(text) or next((t for t in (ctx.tool(errors),) if t not in (None, "torch")), None)
    against = f"torch {torch}" if torch else "the installed torch"
    fixes = {
        "flash_attn": f"pip uninstall -y flash-attn; pip install flash-attn --no-build-isolation (builds against "
                      f"{against}), or the release wheel built for {against}",
        "vllm": f"install the torch this vLLM was built with (pip install vllm pulls it), or build vLLM against {against}",
        "bitsandbytes": "pip install --force-reinstall 'bitsandbytes>=0.45' (its ROCm and CUDA libraries match the "
                        "wheel's own build), or rebuild it from the same checkout you installed",
        "xformers": f"pip install -U xformers from the index of {against}, or build it against that torch",
        "torchaudio": "install torchaudio from the same index and release as torch",
        "deepspeed": "rebuild the DeepSpeed ops: DS_BUILD_OPS=0 pip install --force-reinstall deepspeed, then let them "
                     "JIT-build against the installed torch",
    }
    key = next((k for k in fixes if package and k.replace("_", "") in package.replace("_", "").replace("-", "")), None)
    fix = fixes.get(key or "", f"reinstall {package or 'the extension'} built for {against} (or rebuild it with "
                               "--no-build-isolation so it compiles against the torch you have)")
    return _make("abi-mismatch", f"{package or 'a compiled extension'} was built for another torch",
                 f"{package or 'the extension'} calls a symbol the installed torch (or library) does not export: it "
                 f"was compiled against another release than {against}", fix, [ctx.line_fact(first)], errors)


def _package_of(line: str) -> Optional[str]:
    m = _SYMBOL_LIB.search(line)
    if not m:
        return None
    name = next(g for g in m.groups() if g)
    return re.sub(r"^lib", "", name) if name.startswith("libbitsandbytes") else name


@rule("rocm-libs-missing")
def rocm_libs_missing(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("rocm-libs-missing")
    if not errors:
        return None
    first = errors[0]
    if first.catalogue is not None and first.catalogue.entry.context:
        return _restate("rocm-libs-missing", first, errors)
    lib = re.search(r"(lib[\w\-]+\.so[.\d]*|\w+\.dll)", first.line)
    name = lib.group(1) if lib else "a ROCm library"
    if ctx.sheet.is_windows or name.endswith(".dll"):
        fix = ("install AMD's HIP SDK for Windows (it puts amdhip64 and rocBLAS in C:\\Program Files\\AMD\\ROCm\\<ver>\\bin) "
               "and an Adrenalin driver of the same generation; restart the program so PATH is read again")
    elif ctx.sheet.has("layout", "therock"):
        fix = ("this ROCm comes as Python wheels (TheRock), with no /opt/rocm: install its libraries into the same "
               "environment (pip install 'rocm[libraries]' from the index torch came from) and run from that venv")
    else:
        fix = ("install the ROCm runtime (sudo amdgpu-install --usecase=rocm, or your distribution's rocm packages) "
               "or point the loader at it: export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH")
    return _make("rocm-libs-missing", f"{name} is not found", f"the loader cannot find {name}: the ROCm runtime is "
                 "not installed where the program looks", fix, [ctx.line_fact(first)], errors)


# ---------------------------------------------------------------------------------------------------------
# Which GPU, how much memory, the platform, several GPUs
# ---------------------------------------------------------------------------------------------------------

@rule("visibility")
def visibility(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("visibility")
    hit = _catalogue(errors)
    if hit is not None and re.search(r"VISIBLE_DEVICES=|leaves|selects|index", hit.catalogue.cause):
        return _restate("visibility", hit, errors)
    archs = ctx.sheet.machine_archs
    igpu = [a for a in archs if (arch_info(a) and arch_info(a).kind == "apu")]
    dgpu = [a for a in archs if a not in igpu and a.startswith("gfx")]
    # the iGPU is in the way when torch finds no usable GPU, or when code fails that the card itself has
    # (a wheel with the card's arch failing "invalid image" on the other device)
    missing_on_igpu = [e for e in ctx.of("arch-missing") if dgpu and dgpu[0] in OFFICIAL_WHEEL_ARCHS]
    symptoms = errors + missing_on_igpu + ctx.crashes()
    if igpu and dgpu and symptoms:
        return _make("visibility", "the integrated GPU is in the way",
                     f"the machine has an iGPU ({igpu[0]}) beside the card ({dgpu[0]}); tools take every GPU or "
                     "device 0, and the iGPU has no usable ROCm code",
                     "hide the iGPU: export HIP_VISIBLE_DEVICES=<index of the card> (rocminfo / rocm-smi list the "
                     "order; often the card is 0 and the iGPU 1, or the reverse), or disable the iGPU in the BIOS",
                     [_arch_fact(ctx, igpu[0]), _arch_fact(ctx, dgpu[0])], symptoms)
    return None


_MEMORY_SHORT = re.compile(r"(?i)(?:shared (?:gpu )?memory|\bVRAM\b|\bGTT\b|\bUMA\b|GPU memory).{0,60}"
                           r"(?:can't|cannot|can not|unable|only|not (?:be )?used?|limited|too (?:little|small))|"
                           r"(?:can't|cannot|only|unable to) (?:use|utili[sz]e|allocate|see).{0,40}(?:shared|VRAM|GTT|memory)")
_APU_ARCHS = ("gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1035", "gfx1036", "gfx90c", "gfx1033")


@rule("apu-memory")
def apu_memory(ctx: Context) -> Optional[Diagnosis]:
    archs = ctx.sheet.machine_archs
    apu = [a for a in archs if a in _APU_ARCHS]
    if not apu or any(a not in _APU_ARCHS and a.startswith("gfx") for a in archs):
        return None
    errors = ctx.of("apu-memory", "out-of-memory")
    short = [l for l in ctx.sheet.lines if _MEMORY_SHORT.search(l)]
    if not errors and not short:
        return None
    ram = _ram_gib(ctx.sheet.lines)
    pages = int(ram * 0.75 * GIB / PAGE) if ram else None
    limit = (f"ttm.pages_limit={pages} (3/4 of the {ram:g} GiB RAM in 4 KiB pages)" if pages else
             "ttm.pages_limit=<3/4 of the RAM in 4 KiB pages>")
    return _make("apu-memory", f"the APU ({apu[0]}) runs out of GPU memory",
                 "an APU's GPU memory is the BIOS carve-out (UMA frame buffer) plus GTT, which the kernel caps at half "
                 "the RAM by default", f"raise the UMA frame buffer in the BIOS, or raise the GTT cap with the kernel "
                 f"parameter {limit} (amdgpu.gttsize is deprecated), then reboot", [_arch_fact(ctx, apu[0])], errors)


def _ram_gib(lines: list[str]) -> Optional[float]:
    for line in lines:
        m = re.search(r"MemTotal:\s+(\d+)\s*kB|total RAM (\d+) MB|(\d+(?:\.\d+)?)\s*Gi?B (?:of )?(?:system )?RAM", line)
        if m:
            if m.group(1):
                return round(int(m.group(1)) / 2**20)
            if m.group(2):
                return round(int(m.group(2)) / 1024)
            return float(m.group(3))
    return None


@rule("platform-bios")
def platform_bios(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("platform-bios")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)atomic", text):
        pci = next((f for f in ctx.sheet.of("pci_id") if f.line_no in {e.line_no for e in errors}), None)
        card = f" ({pci.value}{', ' + pci.detail if pci.detail else ''})" if pci else ""
        return _make("platform-bios", f"the GPU{card} is skipped: its PCIe path has no atomics",
                     "ROCm's compute queues on GCN cards (gfx8) need PCIe atomic operations all the way to the CPU; a "
                     "chipset slot, a riser, a Thunderbolt/OCuLink enclosure or an old platform without them makes "
                     "KFD skip the card",
                     "put the card in a CPU-attached x16 slot (no riser, no chipset lanes; lspci -vvv shows "
                     "AtomicOpsCap); where the CPU or board has no PCIe atomics at all (Intel before Haswell, AMD "
                     "before Zen, many laptops' chipset links) ROCm cannot use this card: a platform with PCIe 3 "
                     "atomics, or a gfx9+ card, which does not need them", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("platform-bios", hit, errors)
    if re.search(r"(?i)BAR|address space|4G", text):
        cause, fix = ("the BIOS does not map the card's memory (no Above 4G Decoding / Resizable BAR)",
                      "enable Above 4G Decoding and Resizable BAR in the BIOS (CSM off)")
    elif re.search(r"(?i)AMD-Vi|IO_PAGE_FAULT|iommu", text):
        cause, fix = ("the IOMMU blocks the GPU's DMA", "add iommu=pt to the kernel command line "
                      "(GRUB_CMDLINE_LINUX), update-grub, reboot")
    else:
        cause, fix = ("the GPU does not come back from power saving", "add amdgpu.runpm=0 to the kernel command line")
    return _make("platform-bios", "the platform keeps the GPU from working", cause, fix, [ctx.line_fact(errors[0])],
                 errors)


@rule("multi-gpu-transport")
def multi_gpu(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("multi-gpu-transport")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)shared memory|/dev/shm|shm", text):
        return _make("multi-gpu-transport", "shared memory is too small for the GPUs' transport",
                     "RCCL/NCCL pass data between processes through /dev/shm, which is 64 MB in a default container",
                     "docker run --ipc=host (or --shm-size=16g)", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("multi-gpu-transport", hit, errors)
    return _make("multi-gpu-transport", "the GPUs cannot reach each other",
                 "peer-to-peer transfers between the GPUs fail or hang (the IOMMU in translation mode, PCIe ACS, or "
                 "a platform without P2P)", "confirm with NCCL_P2P_DISABLE=1 (slower, but it runs), then add iommu=pt "
                 "to the kernel command line and turn ACS off in the BIOS", [ctx.line_fact(errors[0])], errors)


_SERVING_OOM_FIX = {
    "llama.cpp": "offload fewer layers (-ngl N smaller) or a smaller context (-c)",
    "ollama": "a smaller context (num_ctx) or fewer GPU layers (num_gpu), or a smaller quantisation",
    "vllm": "--gpu-memory-utilization lower (0.75) and --max-model-len smaller (8192), or tensor parallel over more "
            "GPUs",
}


@rule("out-of-memory")
def out_of_memory(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("out-of-memory")
    if not errors:
        return None
    tool = ctx.tool(errors)
    if any(re.search(r"(?i)DataLoader worker|shared memory|\bshm\b", e.line) for e in errors):
        hit = next((e for e in errors if e.catalogue is not None and e.catalogue.entry.id == "dataloader-shm"), None)
        if hit is not None:
            return _restate("out-of-memory", hit, errors)
        return _make("out-of-memory", "the data loader's workers ran out of shared memory",
                     "workers hand batches over through /dev/shm, which is 64 MB in a default Docker container",
                     "docker run ... --ipc=host (or --shm-size=16g); or fewer data loader workers (0 to confirm)",
                     [ctx.line_fact(errors[0])], errors)
    if tool in _SERVING_OOM_FIX:   # a server sizes its own caches: its knobs, not a training step's
        return _make("out-of-memory", f"{tool} ran out of GPU memory",
                     f"{tool} reserves its weights and caches up front; this model and context do not fit the memory "
                     "it may take", _SERVING_OOM_FIX[tool], [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("out-of-memory", hit, errors)
    return _make("out-of-memory", "the GPU ran out of memory", "the job needs more GPU memory than is free",
                 "a smaller batch or sequence length, gradient checkpointing, or a quantised model",
                 [ctx.line_fact(errors[0])], errors)


@rule("miopen-kernel")
def miopen(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("miopen-kernel")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    hit = _catalogue(errors)
    if hit is not None and not re.search(r"naive_conv", text):
        return _restate("miopen-kernel", hit, errors)
    if re.search(r"naive_conv", text):
        return _make("miopen-kernel", "MIOpen cannot build its naive convolution kernel",
                     "MIOpen's fallback (naive) convolution solver fails to compile on this stack",
                     "export MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_FWD=0 MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_BWD=0 "
                     "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_WRW=0", [ctx.line_fact(errors[0])], errors)
    return _make("miopen-kernel", "MIOpen failed to build or find a kernel",
                 "MIOpen compiles kernels at first use and caches them; a stale or unwritable cache or a solver "
                 "without code for the arch fails here",
                 "rm -rf ~/.cache/miopen; export MIOPEN_USER_DB_PATH=/tmp/miopen-$USER MIOPEN_FIND_MODE=FAST",
                 [ctx.line_fact(errors[0])], errors)


def _from_catalogue(name: str) -> Rule:
    """A family with no rule of its own: the catalogue entry that matched gives the cause and fix (already made
    specific by its context reader)."""
    def read(ctx: Context) -> Optional[Diagnosis]:
        errors = ctx.of(name)
        hit = _catalogue(errors)
        return _restate(name, hit, errors) if hit is not None else None
    return read


for _name in ("gpu-hang", "precision", "attention"):
    rule(_name)(_from_catalogue(_name))


def run_rules(sheet: FactSheet, errors: list[ErrorLine]) -> list[Diagnosis]:
    """Every rule's diagnosis, best first: confirmed before likely, then the family's rank, then the earliest line."""
    ctx = Context(sheet, errors)
    found = []
    for _name, function in RULES:
        diagnosis = function(ctx)
        if diagnosis is not None:
            found.append(diagnosis)
    # a line the catalogue knows is never left unexplained: its entry speaks where no rule settled its family
    covered = {n for d in found for n in d.covers}
    said = {d.entry for d in found}
    for error in errors:
        if error.catalogue is not None and error.line_no not in covered and error.catalogue.entry.id not in said:
            found.append(_restate(error.catalogue.entry.family, error,
                                  [e for e in errors if e.catalogue is not None
                                   and e.catalogue.entry.id == error.catalogue.entry.id]))
            said.add(error.catalogue.entry.id)
    found.sort(key=lambda d: (not d.confirmed, d.severity != "error", d.rank,
                              min(d.covers or [f.line_no for f in d.evidence] or [0])))
    return found
