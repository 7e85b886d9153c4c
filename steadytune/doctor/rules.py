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
    where_process_starts,
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
        asked = [f for f in settings if f.detail not in ("server", "printed", "said") and f.value.split("=", 1)[1]]
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
    # Ollama names a GPU "not supported" only when no override reached its server: one set elsewhere did not arrive
    refused = [e for e in ctx.of("arch-missing") if re.search(r"amdgpu is not supported", e.line)]
    wanted = [f for f in sheet.of("env") if f.value.split("=", 1)[0] == OVERRIDE and f.detail != "server"
              and f.value.split("=", 1)[1]]
    if refused and wanted and tool == "ollama" and not sheet.is_windows and not any(
            f.detail == "server" and f.value.split("=", 1)[1] for f in sheet.of("env")):
        value = wanted[-1].value.split("=", 1)[1]
        where = where_process_starts(sheet, tool)
        fix = set_variable(OVERRIDE, value, sheet, tool) if where == "container" else (
            f"put it in the service: sudo systemctl edit ollama.service, under [Service] Environment=\"{OVERRIDE}="
            f"{value}\", then sudo systemctl daemon-reload && sudo systemctl restart ollama (a hand-started `ollama "
            f"serve` reads only its own shell: export {OVERRIDE}={value} there)")
        return _make("env-not-applied", f"{OVERRIDE} never reached the Ollama server",
                     f"{OVERRIDE}={value} is set ({wanted[-1].detail}), yet the server still calls the GPU not "
                     "supported, which it does only when no override is in its own environment",
                     fix, [wanted[-1], ctx.line_fact(refused[0])], refused + symptoms)
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
    if base.startswith("gfx10") and len(base) == 7:   # RDNA1 (gfx101x) and RDNA2 (gfx103x) are different ISAs
        return base[:-1]
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
        own = _version_of(arch)
        if arch in OFFICIAL_WHEEL_ARCHS:
            fix = f"unset {OVERRIDE}: the current wheels carry {arch} code, so it runs without any override"
        elif good:
            fix = set_variable(OVERRIDE, good, ctx.sheet, tool) + caveat
        else:
            fix = f"unset {OVERRIDE}" + (f" (or set the card's own {OVERRIDE}={own})" if own else "") + "; " + \
                (rocm_index_for(arch) if arch.startswith("gfx") else "")
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


def _version_of(arch: str) -> Optional[str]:
    """gfx1010 -> 10.1.0, gfx90c -> 9.0.12: the version an override names for this arch."""
    m = re.fullmatch(r"gfx(\d{1,2}?)(\d)([0-9a-f])", normalise_gfx(arch))
    return f"{int(m.group(1))}.{m.group(2)}.{int(m.group(3), 16)}" if m else None


@rule("override-hidden")
def override_hidden(ctx: Context) -> Optional[Diagnosis]:
    """The GPU reports another chip's target than its product is (an MI210 named gfx1030): an override set somewhere
    the paste does not show."""
    products = [f for f in ctx.sheet.of("gpu") if f.detail.startswith("gfx")]
    reported = [f for f in ctx.sheet.of("arch") if f.detail == "machine"]
    # an arch said on a line that names a card of that arch belongs to that card ("Radeon R9 Fury X / Fiji gfx803"
    # beside an MI100 table is a second machine, not an override)
    reported = [arch for arch in reported if not any(
        p.line_no == arch.line_no and _family_of(p.detail) == _family_of(arch.value) for p in products)]
    for product in products:
        for arch in reported:
            if abs(product.line_no - arch.line_no) <= 3 and _family_of(product.detail) != _family_of(arch.value) \
                    and ctx.override() is None:
                symptoms = ctx.of("gpu-hang", "arch-missing", "override-wrong") + ctx.crashes()
                return _make("override-wrong", f"{product.value} reports {arch.value}",
                             f"{product.value} is {product.detail}, but the runtime names it {arch.value}: an "
                             f"{OVERRIDE} left from another card is in force and makes it run the wrong code",
                             f"unset {OVERRIDE} (look in ~/.bashrc, /etc/environment, the service unit or the "
                             "container's environment)", [product, arch], symptoms)
    return None


def _arch_fact(ctx: Context, arch: str) -> Optional[Fact]:
    return next((f for f in ctx.sheet.of("arch") if f.value == arch), None)


def _needs_other_code(arch: str) -> bool:
    """An AMD arch the pytorch.org wheels do not carry (so code for it comes from an override or a special build)."""
    return arch.startswith("gfx") and arch not in OFFICIAL_WHEEL_ARCHS


# The CUDA toolkit that first knows each compute capability (NVIDIA's CUDA release notes)
_NVCC_FIRST = {"70": "CUDA 9.0", "75": "CUDA 10.0", "80": "CUDA 11.0", "86": "CUDA 11.1", "87": "CUDA 11.4",
               "89": "CUDA 11.8 (or CUDA 12.x)", "90": "CUDA 11.8 (or CUDA 12.x)", "100": "CUDA 12.8",
               "101": "CUDA 12.8", "120": "CUDA 12.8", "103": "CUDA 12.9", "121": "CUDA 12.9", "110": "CUDA 13.0"}
# The oldest compute capability each CUDA major still compiles (NVIDIA's CUDA release notes: CUDA 11 dropped sm_30,
# CUDA 12 dropped sm_35 and sm_37)
_NVCC_OLDEST = {11: 35, 12: 50, 13: 75}


def _cuda_build(ctx: "Context") -> Optional[tuple[int, int]]:
    """The CUDA a torch of the paste was built for (+cu126 -> (12, 6))."""
    for fact in reversed(ctx.sheet.of("torch")):
        m = re.search(r"\+cu(\d{2,3})\b", fact.value)
        if m:
            digits = m.group(1)
            return int(digits[:-1]), int(digits[-1])
    return None


def _wheel_lacks(arch: Optional[str], ctx: "Context") -> bool:
    """The torch the paste shows cannot carry this NVIDIA GPU: Blackwell before CUDA 12.8, Maxwell/Pascal in the cu129
    and newer builds."""
    build = _cuda_build(ctx)
    if not arch or not arch.startswith("sm_") or build is None:
        return False
    cc = int(arch[3:])
    return (cc >= 100 and build < (12, 8)) or (cc < 70 and build >= (12, 9))
_OVERRIDE_TABLE = (f"{OVERRIDE}=10.3.0 for RDNA2 (gfx1031-gfx1036), {OVERRIDE}=11.0.0 for RDNA3 (gfx1101-gfx1103, "
                   f"gfx1151), {OVERRIDE}=10.1.0 for the other RDNA1 chips (gfx1011, gfx1013: gfx1010 code), "
                   f"{OVERRIDE}=9.0.0 for the Vega APUs (gfx902, gfx90c)")


def _symptom_lines(ctx: Context, facts: list[Fact]) -> list[ErrorLine]:
    """A complaint said in prose ("X doesn't use my RX 6600") as a line a rule can cover."""
    return [ErrorLine(f.line_no, f.line, None) for f in facts]


@rule("arch-missing")
def arch_missing(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("arch-missing")
    if ctx.override() is None:   # "invalid ISA" with no override set: the build lacks the arch, nothing overrode it
        errors += ctx.of("override-wrong")
    arch, where = ctx.arch(errors)
    if arch and arch in _APU_ARCHS and any(re.search(r"amdgpu is not supported", e.line) for e in errors):
        card = next((f for f in ctx.sheet.of("arch") if f.value.startswith("gfx") and f.value not in _APU_ARCHS), None)
        if card is not None:   # Ollama skips the iGPU it cannot use; the card is what the user runs on
            arch, where = card.value, card
    confirmed = True
    nvcc = re.search(r"(?i)Unsupported gpu architecture 'compute_(\d+)[af]?'", " ".join(e.line for e in errors))
    toolkit = next((int(v.split(".")[0]) for v in reversed(ctx.sheet.values("cuda"))), None)
    if nvcc and toolkit and int(nvcc.group(1)) < _NVCC_OLDEST.get(toolkit, 0):
        # the build asks for an arch older than this toolkit compiles: build for the GPU itself instead
        cc = nvcc.group(1)
        own = arch[3:] if arch and arch.startswith("sm_") else None
        target = (f"build for the GPU's own arch: replace compute_{cc} with compute_{own} in the build files, or "
                  f"TORCH_CUDA_ARCH_LIST={own[:-1]}.{own[-1]} / CMAKE_CUDA_ARCHITECTURES={own}") if own else \
            "build for the GPU's own arch (TORCH_CUDA_ARCH_LIST / CMAKE_CUDA_ARCHITECTURES set to its compute capability)"
        return _make("arch-missing", f"the build asks for compute_{cc}, which CUDA {toolkit} no longer compiles",
                     f"CUDA {toolkit} dropped compute capability {cc[:-1]}.{cc[-1]}; the project's build still lists it",
                     target, [ctx.line_fact(errors[0])], errors)
    if nvcc:
        cc = nvcc.group(1)
        needs = _NVCC_FIRST.get(cc, "a newer CUDA toolkit")
        cuda = ctx.sheet.values("cuda")
        return _make("arch-missing", f"this nvcc cannot compile for compute_{cc}",
                     f"the CUDA toolkit that builds the extension{' (' + cuda[-1] + ')' if cuda else ''} predates "
                     f"compute capability {cc[:-1]}.{cc[-1]}",
                     f"compute_{cc} needs {needs} or newer: install that toolkit and build with it (CUDA_HOME / PATH "
                     "pointing at its nvcc), or build only for the archs this nvcc knows (TORCH_CUDA_ARCH_LIST, "
                     "CMAKE_CUDA_ARCHITECTURES)", [ctx.line_fact(errors[0])], errors)
    if not errors:
        # the same problem without its message: a crash, a CPU fallback or a complaint on a GPU the builds do not carry
        faults = ctx.of("gpu-hang") + ctx.crashes()
        symptoms = faults + ctx.no_gpu()
        if not symptoms and arch and arch.startswith("gfx"):
            symptoms = _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1])
        windows_override = ctx.sheet.is_windows and (ctx.override() is not None or any(
            OVERRIDE in l for l in ctx.sheet.lines) and ctx.sheet.has("complaint", "yes"))
        # a torch the GPU is not in (the build says +cuXYZ, the GPU is named) with any sign of trouble
        said = [ErrorLine(i, l.strip(), None) for i, l in enumerate(ctx.sheet.lines, 1)
                if re.search(r"(?i)incompatib|not compatible|kernel[- ]related|kernel image", l)]
        if _wheel_lacks(arch, ctx) and (symptoms or said or ctx.sheet.has("complaint", "yes")):
            lacking = symptoms or said or _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint")][:1])
            return _make("arch-missing", f"this torch has no kernels for {arch}",
                         f"the installed torch is a CUDA {'.'.join(map(str, _cuda_build(ctx)))} build, which does not "
                         f"carry {arch}", _cuda_index_for_driver(ctx, arch), [where] + lacking[:1], lacking)
        # an unexplained error beside the complaint, on a GPU whose sibling's code the older builds carried
        unexplained = arch and override_for_arch(arch) and any(e.family is None for e in ctx.errors)
        if not (symptoms or windows_override) or \
                not ((arch and (_needs_other_code(arch) or unexplained)) or (windows_override and arch is None)) or \
                (ctx.override() is not None and not windows_override):
            return None
        # a GPU fault on a card the wheels lack, with no override anywhere, is the missing code itself: HIP ran a
        # kernel for another chip (a library that loaded the nearest code object) or none at all
        settled = bool(faults) and ctx.override() is None and where is not None and where.detail != "list" and \
            bool(arch and override_for_arch(arch)) and _needs_other_code(arch)
        said_so = [ctx.override()] if ctx.override() is not None else \
            [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]
        errors, confirmed = symptoms or _symptom_lines(ctx, said_so), settled
    tool = ctx.tool(errors)
    if arch is None and ctx.sheet.is_windows and tool in ("ollama", "rocblas", "zluda", "comfyui", "a1111", "torch",
                                                          "llama.cpp", None):
        return _make("arch-missing", "Windows: the HIP SDK's libraries have no code for this GPU",
                     "on Windows HSA_OVERRIDE_GFX_VERSION does not reach the HIP SDK's rocBLAS, which carries only the "
                     "GPUs AMD lists", "find the GPU's gfx target (hipinfo, or the tool's log), then put a rocblas.dll "
                     "and rocblas/library built for it (or for a sibling arch) in place of the SDK's / the program's own",
                     [], errors, confirmed=False)
    if arch is None:
        cls = family("arch-missing")
        return _make("arch-missing", "code built without this GPU's architecture",
                     f"{tool or 'the program'} has no code for the GPU it runs on; the paste does not say which GPU",
                     f"find the arch ({cls.next}); for a GPU the build lacks but whose sibling it carries, set the "
                     f"override: {_OVERRIDE_TABLE}; else rebuild for the arch", [], errors, confirmed=False)
    if ctx.override() is not None and errors:
        value = ctx.override().value.split("=", 1)[1]
        if _target(value) and _family_of(_target(value)) == _family_of(arch) and tool not in ("llama.cpp",):
            # the override is right and in force, so it is the library itself that lacks even the sibling's code
            line = rebuild_line(tool, arch) or wheel_line(arch) or f"a build of {tool} with {arch}"
            return _make("arch-missing", f"{tool or 'a library'} has no code for {arch} even with the override",
                         f"{OVERRIDE}={value} is in force, and the code that failed was built without {_target(value)} "
                         f"and {arch}", line, [where, ctx.override()], errors)
    return _make("arch-missing", f"{tool or 'the build'} has no code for {arch}",
                 _arch_cause(arch, tool, ctx), _arch_fix(arch, tool, ctx), [where, ctx.line_fact(errors[0])], errors,
                 confirmed=confirmed)


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
        if tool == "tensorflow":
            cc = f"{arch[3:-1]}.{arch[-1]}"
            return (f"this TensorFlow release ships no kernels (nor PTX) for compute capability {cc}: use a release "
                    f"whose binaries still include {cc}, or build TensorFlow with TF_CUDA_COMPUTE_CAPABILITIES={cc}")
        return _cuda_index_for_driver(ctx, arch)
    value, caveat = override_value(arch, tool)
    if sheet.has("layout", "therock"):
        return (f"the multi-arch torch wheel carries no GPU kernels by itself: install its device package from the same "
                f"index, pip install \"torch[device-{arch}]\" (it pulls amd-torch-device-{arch})")
    if sheet.is_windows and tool in ("rocblas", "ollama", "zluda", "comfyui", "a1111", "torch", "llama.cpp", None):
        rocm = sheet.values("rocm")
        sdk = f"HIP SDK {rocm[0]}" if rocm else "the HIP SDK"
        libraries = (f"put a rocblas.dll and rocblas/library built for {arch} (for {sdk}) into the SDK's bin folder, "
                     f"or use a build of the program that bundles {arch} kernels")
        if tool == "ollama" and value:
            return (f"set {OVERRIDE}={value} as a Windows user variable (setx {OVERRIDE} {value}), quit Ollama from "
                    f"the tray and start it again ({arch} then runs {_target(value)} code); where the HIP SDK's "
                    f"rocBLAS still has no code for {arch}: {libraries}")
        return f"on Windows the override does not apply to the HIP SDK's libraries ({arch}): {libraries}"
    if tool in ("llama.cpp", "bitsandbytes", "vllm", "flash-attn", "xformers", "deepspeed"):
        # the tool's own build carries the GPU code: rebuilding it for the arch is the fix that lasts, the override the
        # quick one where a sibling's code runs
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
        return f"{wheel} (a build with {arch} code)"
    row = arch_info(arch)
    return f"no build carries {arch}" + (f": {row.note}" if row and row.note else "") + \
        "; use the Vulkan backend where the tool has one (llama.cpp -DGGML_VULKAN=ON)"


def _is_old_gfx(arch: Optional[str]) -> bool:
    """GCN 1-4 (gfx6xx-gfx8xx): outside every ROCm 6 and 7 release."""
    return bool(arch) and arch.startswith("gfx") and len(arch) == 6 and arch[3] in "678"


@rule("gpu-unsupported")
def gpu_unsupported(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("gpu-unsupported") + [e for e in ctx.of("driver") if re.search(r"not supported in kfd", e.line)]
    arch, where = ctx.arch(errors)
    if arch is None:   # the only gfx named is in a list ("I didn't see gfx803 in the list")
        where = next((f for f in ctx.sheet.of("built_for") if _is_old_gfx(f.value)), None)
        arch = where.value if where else None
    old = _is_old_gfx(arch)
    text = " ".join(e.line for e in errors)
    nvidia = re.search(r"(?i)compute capability|cuda capability|too old|CUDA compute", text) or \
        (arch or "").startswith("sm_")
    if errors and nvidia:
        needed = re.search(r"(?i)compute capability below ([\d.]+)|(?:under|below|less than) (?:CUDA )?compute"
                           r"(?: capability)? ?(\d\.\d)", text)
        found = re.search(r"(?i)(?:cuda|compute) capability (?:of )?(\d+\.\d+)", "\n".join(ctx.sheet.lines))
        need = f" (it needs compute capability {needed.group(1) or needed.group(2)} or newer)" if needed else ""
        return _make("gpu-unsupported", "the GPU is older than the builds support",
                     f"this GPU{' (compute capability ' + found.group(1) + ')' if found else ''} is below what the "
                     f"software is built for{need}",
                     f"no current build runs on it{need}: run on the CPU, use an older release that still supported "
                     "this GPU, or a newer GPU", [ctx.line_fact(e) for e in errors[:1]], errors)
    symptoms = ctx.crashes() + ctx.of("arch-missing", "device-access", "visibility", "driver") + ctx.no_gpu() + \
        [e for e in ctx.errors if e.family is None]
    if not symptoms and old:
        symptoms = _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1])
    # a plainer cause beside it (a permission refused, a slot without atomics) comes first
    explicit = any(re.search(r"(?i)permission denied|no such file|operation not permitted", e.line)
                   for e in ctx.of("device-access")) or ctx.of("platform-bios")
    if not errors and not (old and symptoms and not ctx.of("platform-bios")):
        return None
    chip = re.search(r"amdgpu: (\w+)\s+not supported in kfd", text)
    name = chip.group(1) if chip else arch or "this GPU"
    diagnosis = _make("gpu-unsupported", f"{name} is outside ROCm",
                      f"the driver's compute part (KFD) or every current ROCm release leaves {name} out, and no newer "
                      "chip's code runs on it",
                      f"{name} has no ROCm 6 or 7 build: use a backend that runs on it, Vulkan (llama.cpp "
                      "-DGGML_VULKAN=ON, Ollama's Vulkan runner) or OpenCL; for ROCm itself only an old release that "
                      "still listed it (gfx803: the ROCm 5.7 builds and older, or community builds)",
                      [where] + [ctx.line_fact(e) for e in errors[:1]], errors + symptoms)
    if old and not explicit:   # nothing else can work on it, whatever vaguer error the paste shows
        diagnosis.rank = min(family(n).rank for n in ("device-access", "driver", "wsl")) - 1
    return diagnosis


# ---------------------------------------------------------------------------------------------------------
# The process cannot reach the GPU
# ---------------------------------------------------------------------------------------------------------

_DEVICE_LISTING = re.compile(r"^c[rwx-]{9}\S*\s+\d+\s+\S+\s+(\S+)\s+\d+,\s*\d+.*?(/dev/\S+|renderD\d+|kfd)\s*$")


@rule("device-access")
def device_access(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a refusal to open /dev/kfd or /dev/dri (any wording: permission denied, no such file, a group
    check), the device files' owner and mode (`ls -l`) against the user's groups (`id`, `groups`), 'works only as
    root', and where the process runs (a container without the devices, a rootless one). A runtime that cannot get
    its resources is only a symptom where the driver itself is not loaded."""
    errors = ctx.of("device-access")
    if any(re.search(r"ROCk module is NOT loaded|amdgpu not found in modules", e.line) for e in ctx.of("driver")):
        errors = [e for e in errors if not re.search(r"OUT_OF_RESOURCES", e.line)]
    lacking = _groups_lacking(ctx)
    if lacking and not errors:
        errors = ctx.of("visibility") + ctx.no_gpu()
    desktop = ctx.sheet.first("platform") if ctx.sheet.has("platform", "docker-desktop") else None
    if desktop is not None and re.search(r"/dev/(?:kfd|dri)|\bROCm\b|rocm/", "\n".join(ctx.sheet.lines)):
        fact = next(f for f in ctx.sheet.of("platform") if f.value == "docker-desktop")
        return _make("device-access", "Docker Desktop's VM has no /dev/kfd",
                     "Docker Desktop (on Linux too) runs the containers in its own virtual machine, which does not have "
                     "the host's /dev/kfd and /dev/dri, so --device cannot pass them",
                     "run ROCm containers on the host's Docker Engine instead: docker context use default (or quit "
                     "Docker Desktop), then docker run --device=/dev/kfd --device=/dev/dri --group-add video ...",
                     [fact], errors + [e for e in ctx.errors if e.family is None])
    needed = ctx.sheet.first("needs_group")
    if needed is not None and not errors and not ctx.sheet.has("root_only") and not ctx.of("driver"):
        return _make("device-access", f"opening the GPU needs the {needed.value} group",
                     f"the device files belong to the {needed.value} group (newer systems give /dev/kfd to render, "
                     "not video), and a user outside it cannot open them", f"sudo usermod -aG {needed.value}"
                     f"{',video' if needed.value == 'render' else ''} $USER, then log out and back in",
                     [needed], [e for e in ctx.errors if e.family is None])
    root_only = ctx.sheet.first("root_only")
    nodes = ctx.sheet.of("device_node")
    closed = [f for f in nodes if f.detail.split()[0] == "root" and f.detail.split()[1][3:5] == "--"]
    numeric = [f for f in nodes if f.detail.split()[0].isdigit()]
    # a compose file or run line whose /dev/kfd device is commented out: the container starts without it
    disabled = next((i for i, l in enumerate(ctx.sheet.lines, 1)
                     if re.search(r"#\s*-?\s*[\"']?/dev/kfd", l)), None)
    if disabled and not any(re.search(r"^\s*-\s*[\"']?/dev/kfd", l) for l in ctx.sheet.lines):
        return _make("device-access", "the container is started without /dev/kfd",
                     "the /dev/kfd line of the container's devices is commented out, so ROCm inside finds no GPU (and "
                     "the tools that read the arch from it get nothing)",
                     "enable it again: devices: - /dev/kfd - /dev/dri (docker run --device=/dev/kfd --device=/dev/dri "
                     "--group-add video --group-add render)", [Fact("error", "device-access", disabled,
                                                                    ctx.sheet.lines[disabled - 1])],
                     [e for e in ctx.errors if e.family is None] + errors)
    if not errors and root_only is None and not closed and not numeric:
        return None
    if lacking:
        node, group, said = lacking
        return _make("device-access", f"the user is not in {group}, which owns /dev/{node.value}",
                     f"/dev/{node.value} is group {group} ({node.detail.split()[1]}), and the user's groups ({said.line}) "
                     f"do not include {group}: ROCm cannot open the GPU",
                     f"sudo usermod -aG {group}{',video' if group == 'render' else ''} $USER, then log out and back in "
                     "(or reboot); never run the job with sudo instead", [node, said], errors)
    text = " ".join(e.line for e in errors)
    if re.search(r"could not select device driver", text):
        return _make("device-access", "Docker has no GPU runtime",
                     "`--gpus` needs the NVIDIA Container Toolkit's hook, which is not installed (or docker was not "
                     "restarted after it was)",
                     "install the NVIDIA Container Toolkit: sudo apt-get install -y nvidia-container-toolkit; sudo "
                     "nvidia-ctk runtime configure --runtime=docker; sudo systemctl restart docker",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)Failed to initialize NVML: Unknown Error", text):
        return _make("device-access", "the containers lose their GPUs",
                     "a systemd daemon-reload (or a cgroup update) drops the containers' device-cgroup rights to the "
                     "NVIDIA device nodes that were not passed as /dev/char links",
                     "sudo nvidia-ctk system create-dev-char-symlinks --create-all (and a udev rule that runs it at "
                     "boot), or the cgroupfs cgroup driver for docker; restart the containers",
                     [ctx.line_fact(errors[0])], errors)
    if closed and not errors:
        node = closed[0]
        return _make("device-access", f"/dev/{node.value} belongs to root alone",
                     f"/dev/{node.value} is mode {node.detail.split()[1]} owned by root:root: no udev rule gives it to "
                     "a group, so only root can open it",
                     f"add a udev rule, /etc/udev/rules.d/70-amdgpu.rules: KERNEL==\"kfd\", GROUP=\"render\", "
                     "MODE=\"0660\" (and SUBSYSTEM==\"drm\", KERNEL==\"renderD*\", GROUP=\"render\", MODE=\"0660\"); "
                     "sudo udevadm control --reload && sudo udevadm trigger; put the user in render",
                     [node], errors)
    if numeric and not errors:
        gid = numeric[0].detail.split()[0]
        return _make("device-access", f"the GPU devices belong to group {gid}, unknown inside the container",
                     f"the device files keep the host's group id ({gid}, the host's render group), which the "
                     "container's user is not in",
                     f"add gid {gid} to the container's groups: docker run --group-add {gid}; Kubernetes: "
                     f"securityContext.supplementalGroups: [{gid}] (the host's render group)", numeric[:2], errors)
    groups = []
    for line in ctx.sheet.lines:
        m = _DEVICE_LISTING.match(line.strip())
        if m and m.group(1) not in groups and m.group(1) != "root":
            groups.append(m.group(1))
    in_container = ctx.sheet.has("platform", "container")
    joined = "\n".join(ctx.sheet.lines)
    if re.search(r"--device[= ]\"?/dev/kfd", joined) and "/dev/dri" not in joined:
        return _make("device-access", "the container gets /dev/kfd but not /dev/dri",
                     "ROCm opens both /dev/kfd and the render nodes /dev/dri/renderD*; without them (and the video "
                     "group) the container finds no GPU",
                     "docker run --device=/dev/kfd --device=/dev/dri --group-add video --group-add render ...",
                     [ctx.line_fact(e) for e in errors[:1]], errors)
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
    # under sudo it works: the sudo line is the proof, not a second problem
    proof = [e for e in ctx.of("env-not-applied") if root_only and re.search(r"\bsudo\b", e.line)]
    return _make("device-access", "the user may not open the GPU device files", cause,
                 f"sudo usermod -aG {','.join(wanted)} $USER, then log out and back in (or reboot); never run the "
                 "job with sudo instead; if ls -l /dev/kfd shows root root (no group may open it), add a udev rule: "
                 "/etc/udev/rules.d/70-kfd.rules with KERNEL==\"kfd\", GROUP=\"render\", MODE=\"0660\"",
                 evidence, errors + ctx.no_gpu() + proof)


def _groups_lacking(ctx: Context) -> Optional[tuple[Fact, str, Fact]]:
    """(the device file, its group, the line listing the user's groups) where `ls -l` shows a GPU device file whose
    group the user's `id` / `groups` output does not list."""
    nodes = []
    for fact in ctx.sheet.of("device_node"):
        group, mode = fact.detail.split()
        # a group that may read and write it, and no access for others (a world-writable node needs no group)
        if group != "root" and not group.isdigit() and mode[3:5] == "rw" and mode[6:8] != "rw":
            nodes.append(fact)
    if not nodes:
        return None
    said = ctx.sheet.first("user_groups")
    if said is None:
        return None
    groups = said.value.split(",")
    for node in nodes:
        group = node.detail.split()[0]
        if group not in groups:
            return node, group, said
    return None


@rule("wsl")
def wsl(ctx: Context) -> Optional[Diagnosis]:
    if not ctx.sheet.has("platform", "wsl"):
        return None
    errors = ctx.of("wsl", "visibility", "device-access", "driver") + ctx.no_gpu()
    if not errors and _vendor(ctx) == "amd":
        errors = [e for e in ctx.errors if e.family in (None, "torch-build", "rocm-libs-missing")]
    if not errors and not ctx.sheet.has("complaint", "yes"):
        return None
    fact = next(f for f in ctx.sheet.facts if f.kind == "platform" and f.value == "wsl")
    labels = [f.value.split("+rocm", 1)[1] for f in ctx.sheet.of("torch") if "+rocm" in f.value]
    therock = ctx.sheet.has("layout", "therock") or (labels[-1].startswith("7") if labels else
                                                     any(v.startswith("7") for v in ctx.sheet.values("rocm")))
    text = "\n".join(ctx.sheet.lines)
    if ctx.tool(errors) == "ollama":
        return _make("wsl", "WSL 2: Ollama looks for /dev/kfd, which WSL does not have",
                     "under WSL 2 the GPU is reached through /dev/dxg; Ollama's detection skips it unless told to",
                     "install Ollama's ROCm bundle and set HSA_ENABLE_DXG_DETECTION=1 for the server (" +
                     set_variable("HSA_ENABLE_DXG_DETECTION", "1", ctx.sheet, "ollama") + ")", [fact], errors)
    if re.search(r"(?i)(?:detect|find|load|open)\w*\W+(?:\w+\W+){0,2}librocdxg|librocdxg\S*.{0,30}(?:not found|cannot)", text):
        return _make("wsl", "librocdxg is installed but the loader does not find it",
                     "the ROCm runtime loads librocdxg.so by name; /opt/rocm/lib is not on the loader's path (or its "
                     "cache was not refreshed after the install)",
                     "export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH (in the venv's activate script too), or "
                     "sudo ldconfig", [fact], errors)
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
              and not (_NVIDIA_DRIVER.search(e.line) and _vendor(ctx) == "amd" and not _nvidia_gpu(ctx))]
    # (an NVIDIA driver message on an AMD-only machine is a CUDA torch there: torch-build)
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
    secure_boot = ("if Secure Boot is on, it refuses the unsigned module: enroll its key (sudo mokutil --import "
                   "<the DKMS MOK key>) or turn Secure Boot off")
    if re.search(r"(?i)driver/library version mismatch|version-mismatch", text):
        fix = ("reboot: a driver update replaced the user-space libraries while the old kernel module is still loaded "
               "(or reinstall the driver cleanly and reboot)")
        cause = "the loaded NVIDIA kernel module and the user-space driver libraries are different versions"
    elif re.search(r"(?i)Key was rejected by service", text):
        module = "nvidia" if re.search(r"(?i)nvidia", text) else "amdgpu"
        fix = (f"Secure Boot refuses the unsigned {module} module: enroll the DKMS signing key (sudo mokutil --import "
               "/var/lib/dkms/mok.pub, then reboot and complete the enrolment in the blue MOK screen) or turn Secure "
               "Boot off in the firmware settings")
        cause = f"the {module} kernel module is not signed with a key the firmware trusts (Secure Boot is on)"
    elif re.search(r"(?i)nvidia kernel module (?:is )?missing", text):
        fix = f"the nvidia module is not loaded: {secure_boot}; else reinstall the driver for the running kernel"
        cause = "the NVIDIA kernel module is not loaded for this kernel"
    elif re.search(r"(?i)DKMS\b.{0,80}\b(?:freeze|hang)", text):
        fix = ("drop the DKMS module and use the kernel's own amdgpu: sudo amdgpu-install --uninstall; sudo "
               "amdgpu-install -y --usecase=rocm --no-dkms")
        cause = "the amdgpu-dkms module misbehaves on this kernel" + (f" ({kernel.value})" if kernel else "")
    elif re.search(r"Could not locate dkms\.conf", text):
        tree = re.search(r"(/var/lib/dkms/amdgpu/[^/\s]+)", "\n".join(ctx.sheet.lines))
        fix = (f"remove the leftover tree: sudo rm -rf {tree.group(1) if tree else '/var/lib/dkms/amdgpu/<old version>'}"
               ", then install the amdgpu-dkms package again")
        cause = "an old amdgpu-dkms version left an empty tree in /var/lib/dkms that dkms cannot read"
    elif re.search(r"(?i)couldn.t communicate with the NVIDIA driver", text):
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
    elif re.search(r"(?i)Bad return status for module build|dkms.*(?:error|failed)|dkms-failed|DKMS fails? to build|"
                   r"dkms\b.{0,40}\bfail(?:s|ed|ing)? to (?:build|compile|install)",
                   text):
        fix = ("install the amdgpu-dkms of a newer ROCm release (one that lists this kernel), boot a kernel that the "
               "ROCm release supports, or drop the DKMS module: sudo amdgpu-install --usecase=rocm --no-dkms (the "
               "kernel's own amdgpu driver serves ROCm)")
        cause = "the amdgpu-dkms module does not build for this kernel" + (f" ({kernel.value})" if kernel else "")
    elif re.search(r"amdgpu version file missing", text):
        return None   # Ollama's note on distribution kernels: harmless by itself, the real cause is elsewhere
    elif re.search(r"(?i)firmware", text):
        fix = "install a newer linux-firmware package (the GPU's firmware files are newer than the distribution's)"
        cause = "amdgpu cannot load this GPU's firmware"
    else:
        fix = ("sudo modprobe amdgpu and read sudo dmesg | grep -i amdgpu; if it is not there, install the driver "
               f"(sudo amdgpu-install --usecase=dkms) or boot a kernel that has it; {secure_boot}")
        cause = "the amdgpu kernel driver is not loaded for the GPU"
    # with no driver loaded, nothing above it can work: the runtime's and the tools' own failures are its symptoms
    downstream = ctx.of("device-access", "visibility", "rocm-libs-missing") + ctx.no_gpu() if re.search(
        r"NOT loaded|not found in modules|modprobe|couldn.t communicate", text) else ctx.no_gpu()
    return _make("driver", "the GPU driver is not working", cause, fix, [ctx.line_fact(e) for e in errors[:2]],
                 errors + downstream)


# ---------------------------------------------------------------------------------------------------------
# What was installed
# ---------------------------------------------------------------------------------------------------------

# families whose rules explain a GPU torch cannot see better than "the wrong torch" would
_DEEPER = ("device-access", "driver", "wsl", "rocm-libs-missing", "override-wrong", "gpu-unsupported", "platform-bios")
_NVIDIA_DRIVER = re.compile(r"(?i)NVIDIA|CUDA driver|couldn't communicate")


def _nvidia_gpu(ctx: Context) -> bool:
    """An NVIDIA GPU is named in the paste (beside an AMD APU, say): its driver's errors are its own."""
    return any(a.startswith("sm_") for a in ctx.sheet.machine_archs)


def _vendor(ctx: Context) -> Optional[str]:
    """The GPU vendor the text is about: from its facts, else from the words AMD / Radeon / ROCm in it."""
    return vendor_of(ctx.sheet) or ("amd" if re.search(r"\bAMD\b|Radeon|ROCm|\bHIP\b", "\n".join(ctx.sheet.lines))
                                    else None)


@rule("torch-build")
def torch_build(ctx: Context) -> Optional[Diagnosis]:
    vendor = _vendor(ctx)
    errors = ctx.of("torch-build") + ([e for e in ctx.of("driver") if _NVIDIA_DRIVER.search(e.line)]
                                      if vendor == "amd" and not _nvidia_gpu(ctx) else [])
    builds = ctx.sheet.of("torch")
    wrong = [f for f in builds if (vendor == "amd" and f.detail in ("cuda", "cpu", "no-hip")) or
             (vendor in ("nvidia", None) and f.detail in ("rocm", "cpu"))]
    joined = "\n".join(ctx.sheet.lines)
    if re.search(r"ROCMExecutionProvider' is not in available provider", " ".join(e.line for e in errors)):
        return _make("torch-build", "onnxruntime without its ROCm provider",
                     "the installed onnxruntime (or onnxruntime-gpu, the CUDA build) has no ROCMExecutionProvider",
                     "pip uninstall -y onnxruntime onnxruntime-gpu; install the ROCm build, onnxruntime-rocm (AMD's "
                     "wheel from repo.radeon.com/rocm/manylinux for this ROCm), or build onnxruntime with --use_rocm",
                     [ctx.line_fact(errors[0])], errors)
    conda = re.search(r"\bconda\b|\bconda-forge\b|py3\S*_cpu_0|\bcpuonly\b", joined)
    unsure = False
    # a GPU the paste names (by model, PCI id or arch) beside a torch built for another vendor, or for none, is the
    # fault by itself, with or without an error line, unless another family's error is what the paste is about
    archs = ctx.sheet.machine_archs
    named = [f for f in wrong if (f.detail in ("cuda", "no-hip") and any(a.startswith("gfx") for a in archs)
                                  and not _nvidia_gpu(ctx)) or
             (f.detail == "rocm" and archs and all(a.startswith("sm_") for a in archs)) or
             (f.detail == "cpu" and archs)]
    others = [e for e in ctx.errors if e.family not in (None, "visibility", "torch-build")]
    if named and not errors and not others:
        errors = ctx.of("visibility") + ctx.no_gpu() or _symptom_lines(ctx, named[:1])
    if not errors and not (wrong and (ctx.no_gpu() or ctx.of("visibility"))):
        # torch sees no GPU on an AMD machine (or after a conda install) and nothing else explains it: the build
        if not (ctx.of("visibility") and (vendor == "amd" or conda)) or ctx.of(*_DEEPER):
            return None
        unsure = True
    arch, where = ctx.arch(errors)
    evidence = [ctx.line_fact(e) for e in errors[:1]] + wrong[:1] + [where]
    if conda and vendor != "amd":
        return _make("torch-build", "conda installed the CPU build of pytorch",
                     "conda picked a CPU-only pytorch (a build string like py3.9_cpu_0): the channel has no CUDA build "
                     "for the asked pytorch + CUDA pair, or conda-forge's build won",
                     "conda list pytorch shows the build; install a pair the pytorch channel has, forcing it: conda "
                     "install pytorch torchvision pytorch-cuda=<12.1|11.8> -c pytorch -c nvidia (older: cudatoolkit="
                     "<ver> -c pytorch; the CPU build also comes with cpuonly), or pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu128", evidence, errors + ctx.of("visibility"),
                     confirmed=not unsure)
    if vendor == "nvidia":
        return _make("torch-build", "a torch without CUDA on an NVIDIA GPU",
                     "the installed torch is a CPU (or ROCm) build", "pip uninstall -y torch; pip cache purge; " +
                     _cuda_index_for_driver(ctx, arch), evidence, errors + ctx.no_gpu())
    if vendor is None:
        return _make("torch-build", "a torch without GPU support",
                     "the installed torch is a CPU build (PyPI's default on Windows and macOS, or a cached CPU wheel), "
                     "so it finds no GPU",
                     "the CPU build has to go: pip uninstall -y torch; pip cache purge; then the GPU build from "
                     "pytorch.org's index (on Windows PyPI has only the CPU build; a uv/poetry source must send Windows "
                     "there too): pip install "
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
                 "pip uninstall -y torch torchvision torchaudio; " + rocm_index_for(arch) + " (python -c 'import torch; "
                 "print(torch.version.hip)' must print a ROCm version; check that pip found a wheel for this Python)",
                 evidence, errors + ctx.no_gpu() + ctx.of("visibility"), confirmed=not unsure)


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
    if re.search(r"(?i)bitsandbytes|CUDA Setup failed|'NoneType' object has no attribute 'c", text):
        return _make("wheel-platform", "bitsandbytes has no GPU binary for this platform",
                     "the installed bitsandbytes carries no native library for this OS and GPU (releases before 0.43 "
                     "had no Windows build; the PyPI wheels before 0.49 had no ROCm build), so its GPU functions are "
                     "None",
                     "pip install -U 'bitsandbytes>=0.43' (Windows or CUDA: the wheels carry the library); on ROCm, "
                     "pip install -U 'bitsandbytes>=0.49' or build the multi-backend bitsandbytes from source "
                     "(cmake -DCOMPUTE_BACKEND=hip -S . && make && pip install .); python -m bitsandbytes shows what "
                     "it loads", [ctx.line_fact(errors[0])], errors)
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
        machine = ctx.sheet.values("cpu_arch")
        built = "aarch64" if re.search(r"aarch64|arm64", platform) else "x86_64" if re.search(r"x86_64|amd64",
                                                                                                 platform) else None
        if machine and built and machine[-1] != built:
            fix = (f"this wheel is built for {built} ({platform}); this machine is {machine[-1]}: install the "
                   f"{machine[-1]} build (a wheel tagged linux_{machine[-1]} / manylinux_*_{machine[-1]}, built from "
                   "source where the project publishes none; on a Jetson, NVIDIA's JetPack wheels)")
            cause = f"{cause}; this machine's CPU is {machine[-1]}"
        return _make("wheel-platform", "a wheel for another Python or platform", cause, fix,
                     [ctx.line_fact(errors[0])], errors)
    uv = re.search(r"(?i)there is no version of ([\w\-]+)==([\w.+]+)|available for a different Python \(you have "
                   r"Python (3\.\d+)\)", text + "\n" + "\n".join(ctx.sheet.lines))
    if uv and re.search(r"(?i)different Python", "\n".join(ctx.sheet.lines)):
        have = re.search(r"you have Python (3\.\d+)", "\n".join(ctx.sheet.lines))
        pinned = re.search(r"there is no version of ([\w\-]+)==([\w.+]+)", "\n".join(ctx.sheet.lines))
        what = f"{pinned.group(1)} {pinned.group(2)}" if pinned else "this release"
        py = have.group(1) if have else (python[-1] if python else "this Python")
        return _make("wheel-platform", f"no {what} for Python {py}",
                     f"the index has {what} only for other Pythons than {py} (uv's resolver says so)",
                     f"use an older Python for {what} (uv venv -p 3.11, or uv python pin 3.11; conda create -n env "
                     f"python=3.11), or a newer release of it that has Python {py} wheels",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"not a supported wheel", text) and python:
        # no wheel file named: the wheels on offer are for another Python; the release before this one usually has them
        major, minor = (int(x) for x in python[-1].split(".")[:2])
        older = f"{major}.{minor - 1}"
        return _make("wheel-platform", f"the wheels are not built for Python {python[-1]}",
                     f"pip refuses the wheels as built for another Python than {python[-1]} (or another platform)",
                     f"use an environment with the Python the wheels are built for, usually the release before: "
                     f"Python {older} (uv venv -p {older}, conda create -n env python={older}); the cpXY in a wheel's "
                     "file name says which", [ctx.line_fact(errors[0])], errors)
    package = re.search(r"(?:requirement|distribution found for) (\S+)", text)
    name = package.group(1).rstrip(";`'\".,)") if package else "the package"
    py = python[-1] if python else None
    cause = (f"the index has no {name} for this Python{' (' + py + ')' if py else ''} and platform")
    pin = re.fullmatch(r"([\w\-]+)==([\w.]+?)(?:\+(\w+))?", name)
    offered = re.search(r"\(from versions: ([^)]*)\)", text)
    same = [v.strip() for v in offered.group(1).split(",") if pin and v.strip().split("+")[0] == pin.group(2)] \
        if offered else []
    parent = re.search(r"\(from (torch==[\w.]+\+(rocm[\d.]+|cu\d+))\)", text)
    if parent:
        fix = (f"{name} is published on the index of {parent.group(1)}, not on PyPI: install with that index, pip "
               f"install torch --index-url https://download.pytorch.org/whl/{parent.group(2)}, so the dependency "
               "resolves there")
        return _make("wheel-platform", f"{name} is not on PyPI", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and re.search(r"\.dev\d|\+rocm|post\d+\.dev", name):
        fix = (f"{name} is a development build the project makes for its own ROCm image, not on PyPI: use the "
               "project's ROCm docker image (its release notes name the tag) instead of pip")
        return _make("wheel-platform", f"{name} is not published", cause, fix, [ctx.line_fact(errors[0])], errors)
    if ctx.sheet.is_windows and re.search(r"(?i)whl/rocm|\+rocm|rocm\d", text + "\n" + "\n".join(ctx.sheet.lines)):
        fix = ("pytorch.org's ROCm wheels are Linux only: run under WSL 2 (AMD's ROCm for WSL) or Linux, or install "
               "AMD's ROCm wheels for Windows (repo.radeon.com) for the GPUs they list")
        return _make("wheel-platform", f"no ROCm {name} for Windows", cause, fix, [ctx.line_fact(errors[0])], errors)
    if offered and offered.group(1).strip() == "none":
        base = pin.group(1) if pin else name.split("==")[0].split(">")[0].split("<")[0]
        fix = (f"the index has no {base} wheel at all for this Python{' (' + py + ')' if py else ''} and platform: "
               f"use an older Python (a 3.10 or 3.11 environment: uv venv -p 3.11, conda create -n env python=3.11); "
               f"a new Python gets {base} wheels only months after its release, and old pins never do")
        return _make("wheel-platform", f"no {base} for this Python", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and same:
        fix = (f"the index has no {name} for this platform; it does have {', '.join(same)}: pick one of those "
               f"(pip install {pin.group(1)}=={same[-1]} -f <the index>)")
        return _make("wheel-platform", f"no {name} for this platform", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and offered:
        fix = (f"{pin.group(1)}=={pin.group(2)} has no wheel for this Python{' (' + py + ')' if py else ''}: install "
               f"a {pin.group(1)} release the index lists for it (from versions: {offered.group(1)[-60:]}), or use an "
               f"older Python for {pin.group(1)} {pin.group(2)}")
        return _make("wheel-platform", f"no {name} for this Python", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and re.search(r"\+cu\d+|\+rocm", name) and not ctx.sheet.is_windows:
        fix = (f"{name} has no wheel for this Python{' (' + py + ')' if py else ''}: create the environment with an "
               f"older Python that release was built for (conda create -n env python=3.9, uv venv -p 3.9), then "
               f"install the pin again; a torch installed by hand instead is usually the CPU build")
        diagnosis = _make("wheel-platform", f"no {name} for this Python", cause, fix, [ctx.line_fact(errors[0])],
                          errors + ctx.of("torch-build"))
        if ctx.of("torch-build"):   # the CPU torch that followed is its symptom
            diagnosis.rank = family("torch-build").rank - 1
        return diagnosis
    if ctx.sheet.is_windows and re.search(r"rocm", text):
        fix = "pytorch.org's ROCm wheels are Linux only: use WSL 2 or Linux, or AMD's Windows wheels"
    else:
        fix = (f"use a Python the index builds for (3.10-3.12 for most ROCm wheels; check with pip index versions "
               f"{name.split('==')[0]} --index-url <the index>), or pick a version the index lists")
    return _make("wheel-platform", "no wheel for this Python or platform", cause, fix, [ctx.line_fact(errors[0])],
                 errors)


_SYMBOL_LIB = re.compile(r"(?:site-packages|dist-packages)[/\\]([\w\-]+)[/\\]\S*?\.(?:so|pyd|dll)|"
                         r"\b(lib\w+?)(?:_\w+)?\.so\b|\b(\w+?)(?:\.cpython\S*)?\.so: undefined symbol")


# The compiled modules people meet in these errors, by the name in the path or the import, and the pip package that
# ships each (the fix reinstalls the package, not the module)
_MODULE_PACKAGES = (
    (r"flash_attn", "flash-attn"), (r"vllm", "vllm"), (r"xformers", "xformers"), (r"bitsandbytes", "bitsandbytes"),
    (r"torchaudio|_torch_sox", "torchaudio"), (r"torchvision", "torchvision"), (r"deepspeed|fused_adam|cpu_adam|"
    r"transformer_inference|fused_lamb", "deepspeed"), (r"\bapex\b|amp_C|fused_layer_norm_cuda", "apex"),
    (r"sageattention|_qattn", "sageattention"), (r"mamba_ssm|selective_scan", "mamba-ssm"),
    (r"causal_conv1d", "causal-conv1d"), (r"torch_scatter|torch_sparse|torch_cluster|torch_spline_conv", "torch-scatter"),
    (r"mmcv", "mmcv"), (r"detectron2", "detectron2"), (r"pytorch3d", "pytorch3d"), (r"auto_gptq|exllama\w*",
    "auto-gptq"), (r"transformer_engine", "transformer-engine"), (r"llama_cpp", "llama-cpp-python"),
    (r"torch_directml", "torch-directml"), (r"natten", "natten"), (r"spconv", "spconv"), (r"gsplat|diff_gaussian",
    "the gaussian-splatting extension"), (r"nvdiffrast", "nvdiffrast"), (r"tinycudann|tiny_cuda_nn", "tinycudann"),
)


def _extension_package(ctx: Context, errors: list[ErrorLine]) -> Optional[str]:
    """The pip package of the compiled module that failed to load: a path or module name on the error lines, else the
    import right above the first one (a traceback's `import flash_attn_2_cuda`), else the tool the paste names."""
    first = errors[0].line_no
    above = [l for l in ctx.sheet.lines[max(0, first - 4): first - 1] if re.search(r"\bimport\b|site-packages", l)]
    for text in [e.line for e in errors] + above[::-1]:
        found = _package_of(text) or ""
        module = re.search(r"(?:while importing|import)\s+([\w.]+)", text)
        where = " ".join(x for x in (found, module.group(1) if module else "", text) if x)
        for pattern, package in _MODULE_PACKAGES:
            if re.search(pattern, where, re.IGNORECASE):
                return package
        if found and found not in ("torch", "c10", "libtorch", "libc10"):
            return found
    return next((t for t in (ctx.tool(errors),) if t not in (None, "torch")), None)


@rule("abi-mismatch")
def abi_mismatch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an error line saying a compiled module cannot link to what is installed (an undefined symbol, a
    procedure not found in a DLL, an operator that does not exist, a module built for another NumPy, GLIBCXX, a CUDA
    toolkit that differs), the module's package (its path, its import), and the torch version the paste shows. The fix
    rebuilds or reinstalls that package for that torch; the wording of the line only says which of the kinds it is."""
    errors = ctx.of("abi-mismatch")
    if not errors:
        return None
    first = errors[0]
    if first.catalogue is not None and first.catalogue.entry.id == "undefined-symbol-rocm-libs":
        return _restate("abi-mismatch", first, errors)
    text = "\n".join(e.line for e in errors)
    torch = next((f.value for f in ctx.sheet.of("torch") if f.value != "not-rocm"), None)
    evidence = [ctx.line_fact(first)]
    if re.search(r"(?i)numpy|_ARRAY_API|multiarray failed to import|module compiled against ABI version", text):
        return _make("abi-mismatch", "a module built for NumPy 1.x under NumPy 2",
                     "the extension was compiled against NumPy 1.x; NumPy 2 changed the ABI",
                     "pip install 'numpy<2' (or upgrade the module to a release built for NumPy 2)", evidence, errors)
    if re.search(r"GLIBCXX|CXXABI_\d", text):
        return _make("abi-mismatch", "an older libstdc++ than the extension needs",
                     "the process loads a libstdc++ (often conda's) older than the one the extension was built with",
                     "conda install -c conda-forge 'libstdcxx-ng>=12' in that environment, or put the system's first: "
                     "export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6", evidence, errors)
    if re.search(r"torchvision::\w+", text):
        return _make("abi-mismatch", "torchvision does not match torch",
                     "torchvision's compiled operators were built for another torch release or build",
                     "install torchvision from the same index as torch, the matching release (torchvision 0.N pairs "
                     f"with torch 2.(N-15)){': torch is ' + torch if torch else ''}; e.g. pip install --force-reinstall "
                     "torch torchvision --index-url <torch's index>", evidence, errors)
    joined = "\n".join(ctx.sheet.lines)
    compiled = re.search(r"used to compile\s+PyTorch \(([\d.]+)\)", joined)
    if re.search(r"(?i)detected CUDA version", text):
        want = compiled.group(1) if compiled else "the one torch was built with"
        return _make("abi-mismatch", "the CUDA toolkit differs from torch's",
                     "an extension is built with nvcc from another CUDA than the one torch was compiled with",
                     f"build with CUDA {want} (torch.version.cuda): install that toolkit and point CUDA_HOME at it, or "
                     "install the prebuilt wheel of the extension instead of building it", evidence, errors)
    if re.search(r"(?i)\bODR\b|duplicate libamd_smi", text):
        return _make("abi-mismatch", "two copies of libamd_smi in one process",
                     "the separate amdsmi package loads its own libamd_smi beside the one the ROCm torch wheel bundles",
                     "pip uninstall amdsmi (the torch wheel brings what it needs)", evidence, errors)
    against = f"torch {torch}" if torch else "the installed torch"
    if re.search(r"torch_extensions", text + "\n" + joined):
        return _make("abi-mismatch", "a JIT-built extension cached for another torch",
                     "torch's JIT extensions (DeepSpeed ops, fused kernels) are compiled once into "
                     "~/.cache/torch_extensions; a cached build from before a torch upgrade no longer links",
                     f"rm -rf ~/.cache/torch_extensions (or $TORCH_EXTENSIONS_DIR), then rerun so the ops rebuild "
                     f"against {against}; for DeepSpeed's prebuilt ops: DS_BUILD_OPS=0 pip install --force-reinstall "
                     "deepspeed", evidence, errors)
    package = _extension_package(ctx, errors)
    if re.search(r"(?i)xFormers", text):
        package = "xformers"
    fixes = {
        "flash-attn": f"pip uninstall -y flash-attn; pip install flash-attn --no-build-isolation (builds against "
                      f"{against}), or the release wheel built for {against}",
        "vllm": f"install the torch this vLLM was built with (pip install vllm pulls it), or build vLLM against {against}",
        "bitsandbytes": "pip install --force-reinstall 'bitsandbytes>=0.45' (its ROCm and CUDA libraries match the "
                        "wheel's own build), or rebuild it from the same checkout you installed",
        "xformers": f"pip install -U xformers from the index of {against}, or build it against that torch",
        "torchaudio": "install torchaudio from the same index and release as torch",
        "deepspeed": "rebuild the DeepSpeed ops: DS_BUILD_OPS=0 pip install --force-reinstall deepspeed, then let them "
                     "JIT-build against the installed torch",
    }
    windows = re.search(r"(?i)procedure could not be found|DLL load failed", text)
    fix = fixes.get(package or "", f"pip uninstall -y {package or '<the extension>'}; reinstall it built for "
                                   f"{against} (the wheel made for that torch and CUDA/ROCm, or pip install "
                                   f"--no-build-isolation {package or '<the extension>'} so it compiles against the "
                                   "torch you have)")
    what = "a function it needs" if windows else "a symbol"
    return _make("abi-mismatch", f"{package or 'a compiled extension'} was built for another torch",
                 f"{package or 'the extension'} calls {what} the installed torch (or library) does not export: it "
                 f"was compiled against another release than {against}", fix, evidence, errors)


def _package_of(line: str) -> Optional[str]:
    m = _SYMBOL_LIB.search(line)
    if not m:
        return None
    name = next(g for g in m.groups() if g)
    return re.sub(r"^lib", "", name) if name.startswith("libbitsandbytes") else name


# system libraries a wheel links, by soname prefix: the package that has them (Debian/Ubuntu names)
_SYSTEM_LIBS = {"libmpi": "libopenmpi-dev", "libopenblas": "libopenblas-dev", "libnuma": "libnuma-dev",
                "libgomp": "libgomp1", "libomp": "libomp-dev", "libelf": "libelf1", "libtinfo": "libtinfo6"}


def _missing_library_fix(ctx: Context, name: str, text: str) -> Optional[tuple[str, str, str]]:
    """(title, cause, fix) for the missing libraries that are not ROCm's own runtime."""
    therock = ctx.sheet.has("layout", "therock")
    if re.search(r"(?i)cannot enable executable stack", text):
        return (f"{name} asks for an executable stack", "glibc 2.41 and newer refuse to load a library that asks for "
                "an executable stack, and older ROCm libraries do",
                f"clear the flag on the ROCm libraries in the environment: find <site-packages>/torch/lib \\( -name "
                f"'libamdhip64.so*' -o -name 'libhiprtc.so*' \\) -exec patchelf --clear-execstack {{}} \\; (or a torch "
                "built with a newer ROCm)")
    missing_tool = re.search(r'Can.t exec "(/opt/rocm[^"]*)"', text)
    if missing_tool:
        found = re.search(r"^\s*(/(?:usr|opt/rocm-[\d.]+)\S*?)/(?:bin|lib)/\S+\s*$", "\n".join(ctx.sheet.lines), re.M)
        root = found.group(1) if found else "<where ROCm is: /usr, /opt/rocm-X.Y.Z>"
        return ("the ROCm tools look for /opt/rocm, which is not there", f"hipcc and hipconfig default to /opt/rocm; "
                f"this ROCm lives elsewhere, so {missing_tool.group(1)} does not exist",
                f"export ROCM_PATH={root} (HIP_PATH too) before building, or link the install there: sudo ln -s "
                f"{root} /opt/rocm")
    if re.search(r"(?i)rocm(?:\.|_)?(?:path|home).*not (?:found|set)|Could not find ROCm|Failed to find ROCm root|"
                 r"ROCm not found", text):
        root = ("$(rocm-sdk path --root) (this ROCm came as wheels)" if therock else "/opt/rocm (or /opt/rocm-X.Y.Z, "
                "where it is installed)")
        return ("the ROCm install is not found", "the build or the program looks for ROCm through ROCM_PATH / "
                "ROCM_HOME or /opt/rocm, and finds neither", f"install ROCm (sudo amdgpu-install --usecase=rocm) if it "
                f"is not, then export ROCM_PATH={root} ROCM_HOME=$ROCM_PATH before the command")
    compiler = re.search(r"(?i)\b(hipcc|hipconfig|amdclang\+*|hipify-perl)\W*(?:command )?not found|Unable to find (hipcc)",
                         text)
    if compiler:
        tool = compiler.group(1) or compiler.group(2)
        where = ('pip install "rocm[devel]" from the index the rocm wheels came from (its bin/ holds them)' if therock
                 else "sudo amdgpu-install --usecase=rocm,hiplibsdk (or the distribution's rocm-hip-sdk / hipcc package)")
        return (f"{tool} is not found", f"building GPU code needs ROCm's compiler tools ({tool}), which are not "
                "installed or not on PATH", f"{where}; then export PATH=/opt/rocm/bin:$PATH ROCM_PATH=/opt/rocm before "
                f"the build (where {tool} is installed but not found)")
    if re.search(r"rocm\[devel\]|rocm_sdk_devel", text):
        return ("the ROCm SDK's development package is missing", "this ROCm came as wheels without rocm[devel], which "
                "holds the tools and headers", "pip install \"rocm[devel]\" from the same index as rocm (in the same "
                "environment)")
    if re.search(r"(?i)amdsmi", text):
        where = ("pip install <venv>/lib/python3.X/site-packages/_rocm_sdk_core/share/amd_smi (or add that folder to "
                 "PYTHONPATH)" if therock else "cd /opt/rocm/share/amd_smi && pip install .")
        return ("the amdsmi Python package is missing", "ROCm's amdsmi Python module is not installed in this "
                "environment (torch's ROCm build imports it when pynvml is present, and tools query the GPU with it)",
                f"install the amdsmi package: {where}; or, where only pynvml pulled it in (DeepSpeed, a monitoring package), pip "
                "uninstall pynvml nvidia-ml-py")
    cuda_lib = re.search(r"lib(cudnn|cublas\w*|cufft|curand|cusparse|nvrtc)\w*\.so\.(\d+)", text)
    if cuda_lib:
        what = "cuDNN" if cuda_lib.group(1) == "cudnn" else cuda_lib.group(1)
        major = cuda_lib.group(2)
        return (f"{what} {major} is not found", f"the program loads {name} ({what} {major}), which is not installed "
                "or not on the loader's path (pip's nvidia-* wheels put theirs inside site-packages)",
                f"install {what} {major} (pip install nvidia-cudnn-cu{'12' if int(major) >= 9 else '11'} "
                "nvidia-cublas-cu12, or apt install libcudnn" + major + ") and put its folder on the loader's path: "
                "export LD_LIBRARY_PATH=$(python -c 'import os, nvidia.cudnn, nvidia.cublas; print(os.path.dirname("
                "nvidia.cudnn.__file__) + \"/lib:\" + os.path.dirname(nvidia.cublas.__file__) + \"/lib\")'):"
                "$LD_LIBRARY_PATH (or the venv's torch/lib folder) before starting Python")
    for prefix, package in _SYSTEM_LIBS.items():
        if name.startswith(prefix):
            return (f"{name} is not found", f"the wheel links the system's {name}, which is not installed",
                    f"sudo apt-get install {package} (the distribution package with {name})")
    rocm_dll = re.search(r"(?i)\b(?:amdhip64|rocblas|hipblas\w*|MIOpen|hiprtc\w*|amd_comgr\w*|rocsolver|hipsparse)"
                         r"(?:_\d+)?\.dll", text)
    if not rocm_dll and re.search(r"(?i)\b(?:fbgemm|shm|c10|torch_cpu|torch_python|asmjit|uv)\.dll|WinError 126", text):
        return ("torch's DLLs cannot load their dependencies",
                "torch's fbgemm.dll / shm.dll need libomp140.x86_64.dll and the Visual C++ runtime, which a clean "
                "Windows does not have",
                "install the Microsoft Visual C++ Redistributable (x64) and, for libomp140.x86_64.dll, the MSVC (Visual "
                "C++) build tools from the Visual Studio Installer (or put libomp140.x86_64.dll next to torch\\lib); "
                "then restart the program")
    if re.search(r"(?i)MIOpen", name) and re.search(r"(?i)cuda", text):
        return (f"{name} is not found", "the loader path is set for CUDA, not for ROCm's libraries",
                "remove the CUDA entries and put ROCm's first: export LD_LIBRARY_PATH=/opt/rocm/lib (without "
                "/usr/local/cuda/lib64), and no CUDA_* variables in the environment")
    return None


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
    text = " ".join(e.line for e in errors)
    special = _missing_library_fix(ctx, name, text)
    if special:
        title, cause, fix = special
        return _make("rocm-libs-missing", title, cause, fix, [ctx.line_fact(first)], errors)
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

def _visible(ctx: Context) -> dict[str, Fact]:
    """The visibility variables the paste sets, by name (the last setting of each)."""
    found = {}
    for fact in ctx.sheet.of("env"):
        name, value = fact.value.split("=", 1)
        if name.endswith("_VISIBLE_DEVICES") and value:
            found[name] = fact
    return found


@rule("visibility")
def visibility(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the visibility variables in force (ROCR filters, HIP/CUDA index what is left), the machine's GPUs
    (an iGPU enumerated beside a card), and what the tool says it kept or dropped."""
    errors = ctx.of("visibility")
    dropped = [e for e in errors if re.search(r"(?i)dropping integrated GPU", e.line)]
    if dropped:   # Ollama 0.30+ filters iGPUs that are not on its allow-list
        return _make("visibility", "Ollama drops the integrated GPU",
                     "Ollama (0.30 and newer) leaves out integrated GPUs that are not on its allow-list, so the model "
                     "runs on the CPU", set_variable("OLLAMA_IGPU_ENABLE", "1", ctx.sheet, "ollama") +
                     " (OLLAMA_IGPU_ENABLE=1 for the server; a newer Ollama may list this iGPU by default)",
                     [ctx.line_fact(dropped[0])], errors + ctx.no_gpu())
    visible = _visible(ctx)
    rocr = visible.get("ROCR_VISIBLE_DEVICES")
    inner = visible.get("HIP_VISIBLE_DEVICES") or visible.get("CUDA_VISIBLE_DEVICES")
    if errors and rocr and inner and inner.value.split("=", 1)[1] not in ("0", "0,1"):
        value = rocr.value.split("=", 1)[1]
        return _make("visibility", "two layers of visibility variables leave no GPU",
                     f"ROCR_VISIBLE_DEVICES={value} keeps those GPUs and renumbers them from 0; "
                     f"{inner.value} then asks for an index that no longer exists",
                     f"set only ROCR_VISIBLE_DEVICES={value} (unset HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES), or "
                     "count the inner one from 0 among what ROCR left (HIP_VISIBLE_DEVICES=0)", [rocr, inner], errors)
    hit = _catalogue(errors)
    if hit is not None and re.search(r"VISIBLE_DEVICES=|leaves|selects|index", hit.catalogue.cause):
        return _restate("visibility", hit, errors)
    archs = ctx.sheet.machine_archs
    igpu = [a for a in archs if (arch_info(a) and arch_info(a).kind == "apu")]
    dgpu = [a for a in archs if a not in igpu and a.startswith("gfx")]
    said_igpu = next((f for f in ctx.sheet.of("igpu") if f.detail != "only"), None)
    # the iGPU is in the way when torch finds no usable GPU, or when code fails on it that the card may not even need
    # (an override for the card makes the iGPU run the card's code too)
    missing = ctx.of("arch-missing")
    symptoms = errors + missing + ctx.crashes()
    # Ollama names the iGPU unsupported and goes on with the card it supports: the iGPU is out of the way already
    kept = any(re.search(r'msg="amdgpu is supported"|inference compute.*library=rocm', l) for l in ctx.sheet.lines)
    refused_igpu = [e for e in missing if re.search(r"amdgpu is not supported", e.line) and
                    any(a in e.line for a in igpu)]
    if kept and refused_igpu and len(refused_igpu) == len(missing):
        symptoms = [e for e in symptoms if e not in refused_igpu]
    # an iGPU said to be there counts unless the paste's only GPU is that iGPU (then nothing is in the way)
    if ((igpu and dgpu) or (said_igpu and (dgpu or not igpu))) and symptoms:
        first = said_igpu is not None and said_igpu.detail == "cuda0" or bool(missing)
        value = override_for_arch(dgpu[0]) if dgpu else None
        also = (f"; the card ({dgpu[0]}) also needs {OVERRIDE}={value}, which must not reach the iGPU"
                if value and dgpu[0] not in OFFICIAL_WHEEL_ARCHS else "")
        index = ("export HIP_VISIBLE_DEVICES=1 (the card; the iGPU is device 0 here), or CUDA_VISIBLE_DEVICES=1"
                 if first else "export HIP_VISIBLE_DEVICES=<index of the card> (rocminfo / rocm-smi list the order; "
                 "often the card is 0 and the iGPU 1, or the reverse)")
        who = f"an iGPU ({igpu[0]}) beside the card ({dgpu[0]})" if igpu and dgpu else "an iGPU beside the card"
        return _make("visibility", "the integrated GPU is in the way",
                     f"the machine has {who}; tools take every GPU or device 0, and the iGPU has no usable ROCm code",
                     f"hide the iGPU: {index}, or disable the iGPU in the BIOS{also}",
                     [f for f in (_arch_fact(ctx, igpu[0]) if igpu else said_igpu,
                                  _arch_fact(ctx, dgpu[0]) if dgpu else None) if f], symptoms)
    if any(re.search(r"No CUDA GPUs are available", e.line) for e in errors) and _vendor(ctx) != "amd":
        named = visible.get("CUDA_VISIBLE_DEVICES")
        said = f"{named.value} " if named else ""
        return _make("visibility", "CUDA_VISIBLE_DEVICES hides the GPU",
                     f"the script sets CUDA_VISIBLE_DEVICES {said}to an index this machine does not have (a one-GPU "
                     "machine has only 0), so torch sees no GPU",
                     "set CUDA_VISIBLE_DEVICES=0 (os.environ[\"CUDA_VISIBLE_DEVICES\"] = \"0\" in the script, or the "
                     "run script's export), or remove the line that sets it", [f for f in (named,) if f], errors)
    return None


_MEMORY_SHORT = re.compile(r"(?i)(?:shared (?:gpu )?memory|\bVRAM\b|\bGTT\b|\bUMA\b|GPU memory).{0,60}"
                           r"(?:can't|cannot|can not|unable|only|not (?:be )?used?|limit(?:s|ed|ing)?|too (?:little|small))|"
                           r"(?:can't|cannot|only|unable to) (?:use|utili[sz]e|allocate|see).{0,40}(?:shared|VRAM|GTT|memory)|"
                           r"\bonly\s*~?\s*\d+\s*[MG]i?B of (?:VRAM|GTT|GPU memory)|\bhalf\b.{0,40}\bGTT\b|\bGTT\b.{0,40}\bhalf\b")
_APU_ARCHS = ("gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1035", "gfx1036", "gfx90c", "gfx1033")


@rule("apu-memory")
def apu_memory(ctx: Context) -> Optional[Diagnosis]:
    archs = ctx.sheet.machine_archs
    apu = [a for a in archs if a in _APU_ARCHS]
    pools = {f.detail: int(f.value) for f in ctx.sheet.of("memory_total")}
    errors = ctx.of("apu-memory", "out-of-memory")
    short = [l for l in ctx.sheet.lines if _MEMORY_SHORT.search(l)]
    gtt_said = [l for l in short if re.search(r"\bGTT\b", l)]
    if any(a not in _APU_ARCHS and a.startswith("gfx") for a in archs):
        return None
    said_apu = any(re.search(r"(?i)\bAPUs?\b|unified memory|\biGPU\b", l) for l in ctx.sheet.lines)
    limit_said = [l for l in short if re.search(r"(?i)\bUMA\b|\bTTM\b|\bGTT\b", l)]
    if not apu and not ("VRAM" in pools and "GTT" in pools) and not gtt_said and not (said_apu and limit_said):
        return None
    name = f"the APU ({apu[0]})" if apu else "the APU"
    carve, seen = _vram_bytes(ctx.sheet.lines), _pool_kib(ctx.sheet.lines)
    if apu and carve and seen and carve >= 32 * GIB and seen * 1024 < carve / 2:
        return _make("apu-memory", f"HIP sees {seen / 2**20:.1f} GiB of {name}'s {carve / GIB:.0f} GiB carve-out",
                     "the kernel driver reports the whole carve-out (mem_info_vram_total), but kernels before 6.16.9 "
                     "cap the memory pool ROCm's runtime gets on these APUs",
                     "upgrade the kernel to 6.16.9 or later (a mainline or HWE kernel); ROCm itself needs no change",
                     [_arch_fact(ctx, apu[0])], errors)
    if not errors and not short and not pools:
        return None
    evidence = [_arch_fact(ctx, apu[0])] if apu else ctx.sheet.of("memory_total")[:2]
    if pools.get("VRAM", 0) >= 4 * pools.get("GTT", 1 << 40) and errors:
        return _make("apu-memory", f"{name} puts its tensors in the small GTT",
                     f"the BIOS carve-out (VRAM, {pools['VRAM']} MiB) takes most of the RAM and leaves the GTT only "
                     f"{pools['GTT']} MiB, and allocations beyond the carve-out land in the GTT",
                     "set the UMA frame buffer in the BIOS to its minimum (512 MB) so the GTT covers most of the RAM "
                     "(and raise ttm.pages_limit where the GTT is still capped), then reboot", evidence, errors)
    ram = _ram_gib(ctx.sheet.lines)
    pages = int(ram * 0.75 * GIB / PAGE) if ram else None
    limit = (f"ttm.pages_limit={pages} (3/4 of the {ram:g} GiB RAM in 4 KiB pages)" if pages else
             "ttm.pages_limit=<3/4 of the RAM in 4 KiB pages>")
    tool = ctx.tool(errors)
    ggml = ("; llama.cpp / Ollama (ggml's HIP backend): GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 makes it allocate from "
            "system memory, past the carve-out" if tool in ("llama.cpp", "ollama", None) else "")
    return _make("apu-memory", f"{name} runs out of GPU memory",
                 "an APU's GPU memory is the BIOS carve-out (UMA frame buffer) plus GTT, which the kernel caps at half "
                 "the RAM by default", f"raise the UMA frame buffer in the BIOS, or raise the GTT cap with the kernel "
                 f"parameter {limit} (amdgpu.gttsize is deprecated), then reboot{ggml}", evidence,
                 errors or _symptom_lines(ctx, []))


def _vram_bytes(lines: list[str]) -> Optional[int]:
    """The carve-out the kernel reports: the number printed after `cat .../mem_info_vram_total`."""
    for i, line in enumerate(lines[:-1]):
        if "mem_info_vram_total" in line:
            m = re.match(r"\s*(\d{9,})\b", lines[i + 1])
            if m:
                return int(m.group(1))
    return None


def _pool_kib(lines: list[str]) -> Optional[int]:
    """rocminfo's GPU memory pool size, in KiB (its first pool, the one allocations come from)."""
    for line in lines:
        m = re.match(r"\s*Size:\s+(\d+)\(0x[0-9a-f]+\) KB", line)
        if m:
            return int(m.group(1))
    return None


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
    elif re.search(r"(?i)AMD-Vi|IO_PAGE_FAULT|iommu|unable to handle page fault", text):
        cause, fix = ("the IOMMU blocks the GPU's DMA", "add iommu=pt to the kernel command line "
                      "(GRUB_CMDLINE_LINUX), update-grub, reboot")
    else:
        cause, fix = ("the GPU does not come back from power saving", "add amdgpu.runpm=0 to the kernel command line")
    return _make("platform-bios", "the platform keeps the GPU from working", cause, fix, [ctx.line_fact(errors[0])],
                 errors)


@rule("multi-gpu-transport")
def multi_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a collective that fails, times out or hangs (NCCL/RCCL's own lines, a watchdog, rccl-tests, a
    launcher that never gets past the first step), and the facts that pick the transport's fix: Windows (no NCCL),
    a container's /dev/shm, the socket interfaces NCCL listed or the nodes name, IOMMU faults in dmesg, and whether
    the GPUs are consumer cards (RDNA, GeForce: no usable PCIe peer-to-peer) or datacenter ones (iommu=pt)."""
    errors = ctx.of("multi-gpu-transport")
    if not errors and ctx.of("platform-bios") and re.search(r"(?i)\b(?:NCCL|RCCL)\b", "\n".join(ctx.sheet.lines)):
        errors = [e for e in ctx.errors if e.family is None and re.search(r"(?i)\b(?:NCCL|RCCL)\b", e.line)]
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    joined = "\n".join(ctx.sheet.lines)
    evidence = [ctx.line_fact(errors[0])]
    if re.search(r"(?i)doesn.t have NCCL", text) or (re.search(r"(?i)\bNCCL\b", text) and ctx.sheet.is_windows):
        return _make("multi-gpu-transport", "this torch has no NCCL (Windows)",
                     "torch on Windows (and macOS) is built without NCCL, so the nccl backend does not exist",
                     "use the gloo backend: init_process_group(backend=\"gloo\") (Lightning: DDPStrategy("
                     "process_group_backend=\"gloo\"); a config's dist backend: gloo), or run under Linux / WSL 2 for "
                     "NCCL", evidence, errors)
    if re.search(r"(?i)shm_open failed\s*:\s*Permission denied|/dev/shm\S*:? Permission denied", text):
        return _make("multi-gpu-transport", "the user may not create shared memory segments",
                     "NCCL/RCCL create their buffers in /dev/shm, and this user may not create files there",
                     "fix the permissions of /dev/shm: sudo chmod 1777 /dev/shm (it must be world-writable with the "
                     "sticky bit; a container: --ipc=host)", evidence, errors)
    ifaces = ctx.sheet.of("nccl_iface")
    listed = [f.value for f in ifaces if f.detail == "listed"]
    virtual = [i for i in listed if re.match(r"(?:br-|veth|docker|virbr|lo$|cni|flannel|tun|tap)", i)]
    real = [i for i in listed if i not in virtual]
    named = list(dict.fromkeys(f.value for f in ifaces if f.detail == "named"))
    if len(named) > 1 or (virtual and real):
        value = ",".join(named) if len(named) > 1 else real[0]
        why = ("the nodes name their network interfaces differently, and NCCL picks the first one it finds"
               if len(named) > 1 else f"NCCL also tries container bridges and virtual links ({', '.join(virtual[:3])}) "
               "that do not reach the other node")
        return _make("multi-gpu-transport", "NCCL's sockets take the wrong network interface", why,
                     f"export NCCL_SOCKET_IFNAME={value} on every node (GLOO_SOCKET_IFNAME too, for torch's gloo)",
                     evidence + ifaces[:2], errors)
    if re.search(r"(?i)\bP2P\b.{0,60}\bslower\b|slower than SHM", text):
        return _make("multi-gpu-transport", "peer-to-peer transfers crawl on this platform",
                     "RCCL/NCCL pick P2P between the GPUs, but P2P across these PCIe root ports is broken or "
                     "throttled", "export NCCL_P2P_DISABLE=1 (the transfers go through host shared memory); check ACS "
                     "and the IOMMU (iommu=pt) for a real fix", evidence, errors)
    if re.search(r"(?i)alltoall", joined) and re.search(r"(?i)XGMI", joined):
        return _make("multi-gpu-transport", "alltoall hangs without XGMI",
                     "without XGMI links the peer-to-peer channels of alltoall(v) over PCIe deadlock",
                     "export NCCL_MAX_P2P_NCHANNELS=2 (RCCL before ROCm 6.0), or update RCCL", evidence, errors)
    if re.search(r"(?i)shared memory|/dev/shm|shm", text):
        return _make("multi-gpu-transport", "shared memory is too small for the GPUs' transport",
                     "RCCL/NCCL pass data between processes through /dev/shm, which is 64 MB in a default container",
                     "docker run --ipc=host (or --shm-size=16g)", [ctx.line_fact(errors[0])], errors)
    iommu = [e for e in ctx.of("platform-bios") if re.search(r"(?i)AMD-Vi|IO_PAGE_FAULT|DMAR|iommu", e.line)]
    if iommu:   # the IOMMU faulting on the GPUs' DMA is why their peer-to-peer traffic fails
        diagnosis = _make("multi-gpu-transport", "the IOMMU blocks the GPUs' peer-to-peer traffic",
                          "the IOMMU in translation mode faults on the DMA between the GPUs (the fault is in dmesg), so "
                          "the collective fails or hangs", "add iommu=pt (amd_iommu=on iommu=pt on AMD CPUs) to "
                          "GRUB_CMDLINE_LINUX_DEFAULT, sudo update-grub, reboot; until then NCCL_P2P_DISABLE=1 runs "
                          "without peer-to-peer", evidence + [ctx.line_fact(iommu[0])], errors + iommu)
        diagnosis.rank = family("platform-bios").rank - 1
        return diagnosis
    if re.search(r"(?i)\[c10d\]|client socket has timed out|TCPStore|rendezvous|MASTER_ADDR", text):
        return _make("multi-gpu-transport", "the processes cannot reach the rendezvous address",
                     "torch's launcher could not connect to MASTER_ADDR:MASTER_PORT (a firewall, an address the other "
                     "node cannot route to, or a socket on the wrong interface)",
                     "check from every node: nc -zv <MASTER_ADDR> <MASTER_PORT>; open the port in the firewall; set "
                     "MASTER_ADDR to the address on the shared network and NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to "
                     "that interface (ip -br addr)", evidence, errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("multi-gpu-transport", hit, errors)
    consumer = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"gfx1[0-2]\w+|sm_(?:75|86|89|120)", a)]
    named = " ".join(f.value for f in ctx.sheet.of("gpu"))
    if consumer and not re.search(r"(?i)\b(?:A100|H100|H200|L40|A40|A6000|RTX A|RTX PRO|W7\d00|MI\d+)", named):
        return _make("multi-gpu-transport", "consumer GPUs without working peer-to-peer",
                     f"these are consumer cards ({', '.join(dict.fromkeys(consumer))}): PCIe peer-to-peer between them "
                     "is missing or broken on desktop boards, and NCCL/RCCL hang or fail when they pick it",
                     "export NCCL_P2P_DISABLE=1 (the transfers go through host memory); if it still hangs, add iommu=pt "
                     "to the kernel command line", evidence, errors)
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


_SIZE = r"([\d.]+) ([KMG])i?B"


def _mib(number: str, unit: str) -> float:
    return float(number) * {"K": 1 / 1024, "M": 1, "G": 1024}[unit]


def _fragmented(text: str) -> Optional[str]:
    """torch's OOM message when the request would fit: as much free, or reserved-but-unallocated, as asked."""
    asked = re.search(r"Tried to allocate " + _SIZE, text)
    free = re.search(r"of which " + _SIZE + " is free", text)
    spare = re.search(_SIZE + r" is reserved by PyTorch but unallocated", text)
    total = re.search(r"total capacity of " + _SIZE, text)
    if not asked:
        return None
    need = _mib(*asked.groups())
    # a few MiB left over on a full GPU is not fragmentation: the spare must be a real share of the memory
    floor = max(need, 0.04 * _mib(*total.groups()) if total else 256.0)
    for found, what in ((free, "free"), (spare, "reserved by PyTorch but unallocated")):
        if found and _mib(*found.groups()) >= floor:
            return (f"the request ({asked.group(1)} {asked.group(2)}iB) is smaller than what is {what} "
                    f"({found.group(1)} {found.group(2)}iB): no block of that size is contiguous")
    return None


@rule("out-of-memory")
def out_of_memory(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("out-of-memory")
    if not errors:
        return None
    tool = ctx.tool(errors)
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)maximum number of tokens that can be stored in KV cache", text):
        return _make("out-of-memory", "the KV cache is smaller than one full sequence",
                     "vLLM sizes the KV cache from the memory left under gpu_memory_utilization; it holds fewer tokens "
                     "than max_model_len", "raise gpu_memory_utilization (0.9; --gpu-memory-utilization) or lower "
                     "max_model_len (--max-model-len) so one sequence fits", [ctx.line_fact(errors[0])], errors)
    if any(re.search(r"(?i)DataLoader worker|shared memory|\bshm\b", e.line) for e in errors):
        hit = next((e for e in errors if e.catalogue is not None and e.catalogue.entry.id == "dataloader-shm"), None)
        if hit is not None:
            return _restate("out-of-memory", hit, errors)
        return _make("out-of-memory", "the data loader's workers ran out of shared memory",
                     "workers hand batches over through /dev/shm, which is 64 MB in a default Docker container",
                     "docker run ... --ipc=host (or --shm-size=16g); or fewer data loader workers (0 to confirm)",
                     [ctx.line_fact(errors[0])], errors)
    fragmented = _fragmented(text)
    if tool in _SERVING_OOM_FIX:   # a server sizes its own caches: its knobs, not a training step's
        return _make("out-of-memory", f"{tool} ran out of GPU memory",
                     f"{tool} reserves its weights and caches up front; this model and context do not fit the memory "
                     "it may take", _SERVING_OOM_FIX[tool] + ("; the free memory is fragmented too: "
                                                              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
                                                              if fragmented else ""), [ctx.line_fact(errors[0])], errors)
    if fragmented:
        return _make("out-of-memory", "the GPU's memory is fragmented, not full", fragmented,
                     "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_HIP_ALLOC_CONF on ROCm) before "
                     "the run, so the allocator can grow its segments instead of needing one free block",
                     [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("out-of-memory", hit, errors)
    return _make("out-of-memory", "the GPU ran out of memory", "the job needs more GPU memory than is free",
                 "a smaller batch or sequence length, gradient checkpointing, or a quantised model",
                 [ctx.line_fact(errors[0])], errors)


@rule("miopen-kernel")
def miopen(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: MIOpen's own errors (a kernel build, its databases, a handle), or MIOpen named beside a run that is
    slow where it should not be (its exhaustive kernel search on each new convolution shape)."""
    errors = ctx.of("miopen-kernel")
    slow = [f for f in ctx.sheet.of("complaint") if f.value == "slow"]
    if not errors and slow and re.search(r"(?i)\bMIOpen\b|\bVAE\b|\bconv(?:olution)?s?\b",
                                         "\n".join(ctx.sheet.lines)) and _vendor(ctx) == "amd":
        errors = _symptom_lines(ctx, slow[:1])
        return _make("miopen-kernel", "MIOpen searches for its convolution kernels",
                     "on AMD GPUs MIOpen benchmarks every solver the first time it meets a convolution shape (a VAE "
                     "decode has many), which is what makes the first run slow", "export MIOPEN_FIND_MODE=2 (FAST: "
                     "takes the first good solver), and keep ~/.config/miopen between runs so what it found is reused",
                     [slow[0]], errors, confirmed=False)
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)MIOPEN_FIND_MODE", text):
        return _make("miopen-kernel", "MIOpen's search for the best kernel takes too long",
                     "in its default find mode MIOpen benchmarks every solver for each new convolution size; on large "
                     "ones (a VAE decode) that runs into the driver's timeout",
                     "export MIOPEN_FIND_MODE=2 (FAST: takes the first good solver) before starting the program",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)could not create miopen handle", text):
        return _make("miopen-kernel", "MIOpen cannot start on this GPU",
                     "the MIOpen installed cannot create a handle: the OpenCL flavour (miopen-opencl) instead of the "
                     "HIP one that ROCm's frameworks need, or a build without this GPU",
                     "sudo apt remove miopen-opencl; sudo apt install miopen-hip (the HIP backend), and check that "
                     "its release lists this GPU", [ctx.line_fact(errors[0])], errors)
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
                 "rm -rf ~/.cache/miopen; export MIOPEN_USER_DB_PATH=/tmp/miopen-$USER MIOPEN_FIND_MODE=FAST; if "
                 "every solver still fails, run the convolutions without MIOpen: torch.backends.cudnn.enabled = False",
                 [ctx.line_fact(errors[0])], errors)


def _from_catalogue(name: str) -> Rule:
    """A family with no rule of its own: the catalogue entry that matched gives the cause and fix (already made
    specific by its context reader)."""
    def read(ctx: Context) -> Optional[Diagnosis]:
        errors = ctx.of(name)
        hit = _catalogue(errors)
        return _restate(name, hit, errors) if hit is not None else None
    return read


@rule("gpu-hang")
def gpu_hang(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("gpu-hang")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    joined = "\n".join(ctx.sheet.lines)
    firmware = re.search(r"(?i)\bMES\b[: ]*(?:0x[0-9a-f]+)?|firmware", joined)
    if firmware:
        return _make("gpu-hang", "the GPU hangs under a firmware regression",
                     "the paste ties the hangs to the GPU firmware (the MES scheduler's version, a linux-firmware "
                     "update)", "roll linux-firmware back to the release before the hangs began (check the MES "
                     "version: sudo cat /sys/kernel/debug/dri/*/amdgpu_firmware_info | grep MES), or update to the "
                     "firmware release that fixes it; the kernel and ROCm stay as they are", [ctx.line_fact(errors[0])],
                     errors)
    if re.search(r"(?i)kernel NULL pointer dereference", text):
        return _make("gpu-hang", "the kernel driver crashes opening the GPU",
                     "a NULL pointer dereference in the kernel: a driver regression, often in runtime power management",
                     "add amdgpu.runpm=0 to the kernel command line (GRUB_CMDLINE_LINUX_DEFAULT, update-grub, reboot), "
                     "and move to a kernel without the regression", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    return _restate("gpu-hang", hit, errors) if hit is not None else None


@rule("precision")
def precision(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("precision")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    evidence = [ctx.line_fact(errors[0])]
    if re.search(r"(?i)cublasLt\w*.{0,80}NOT_SUPPORTED|NOT_SUPPORTED.{0,80}cublasLt", text):
        old = [f.value for f in ctx.sheet.of("torch") if re.search(r"\+cu11", f.value)]
        if old:
            return _make("precision", "this torch's cuBLASLt has no fp8 matmul",
                         f"torch {old[0]} is built with CUDA 11, whose cuBLASLt has no fp8 (e4m3fn) matmul",
                         "pip install -U torch --index-url https://download.pytorch.org/whl/cu124 (or newer), or run "
                         "the model in fp16/bf16 instead of fp8", evidence, errors)
    bf16 = re.search(r"(?i)bf16|bfloat16|16BF", text)
    if bf16 and re.search(r"(?i)Bfloat16 is only supported on GPUs with compute capability", text) or \
            (bf16 and ctx.tool(errors) == "vllm"):
        return _make("precision", "the GPU has no bf16", "vLLM loads the model in its bf16 dtype, which this GPU "
                     "cannot compute", "start with --dtype half (LLM(model=..., dtype=\"half\")), or --dtype float32; "
                     "bf16 needs compute capability 8.0 (Ampere) or newer", evidence, errors)
    if bf16 and re.search(r"(?i)setup doesn.t support bf16|--bf16|bf16=True|TrainingArguments", text):
        return _make("precision", "the GPU has no bf16", "the training is configured for bf16, which this GPU (older "
                     "than Ampere, or RDNA1/2) cannot compute",
                     "train in fp16 instead: fp16=True instead of bf16=True in the TrainingArguments (--fp16 instead "
                     "of --bf16; the same in a DeepSpeed config: \"fp16\": {\"enabled\": true}, \"bf16\": "
                     "{\"enabled\": false})", evidence, errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("precision", hit, errors)
    if bf16:
        return _make("precision", "the GPU has no bf16", "a bf16 operation runs on a GPU without bf16 support",
                     "turn bf16 off: run the model in fp16 (or fp32) instead of bf16 (the project's dtype setting)",
                     evidence, errors)
    return None


@rule("attention")
def attention(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("attention")
    if not errors and ctx.tool() == "flash-attn":   # its build fails for this GPU's arch
        errors = [ErrorLine(i, l.strip(), "attention") for i, l in enumerate(ctx.sheet.lines, 1)
                  if re.search(r"(?i)errors? generated when compiling for gfx\w+", l)]
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    evidence = [ctx.line_fact(errors[0])]
    if re.search(r"(?i)stack frame size", text) and ctx.tool(errors) == "vllm" or \
            re.search(r"VLLM_USE_TRITON_FLASH_ATTN", "\n".join(ctx.sheet.lines)):
        return _make("attention", "vLLM's Triton flash attention does not build for this GPU",
                     "the Triton flash-attention kernel fails to compile for this arch (stack frame too large)",
                     "export VLLM_USE_TRITON_FLASH_ATTN=0 (vLLM then uses its other attention backend)", evidence,
                     errors)
    cuda = re.search(r"(?i)FlashAttention is only supported on CUDA ([\d.]+)", text)
    if cuda:
        return _make("attention", f"flash-attn needs CUDA {cuda.group(1)} to build",
                     f"building flash-attn from source needs the CUDA toolkit {cuda.group(1)} or newer",
                     f"install a prebuilt flash-attn wheel that matches torch and its CUDA (the release page lists "
                     f"them), or build with a CUDA {cuda.group(1)}+ toolkit", evidence, errors)
    if re.search(r"(?i)Ampere GPUs or newer", text):
        return _make("attention", "FlashAttention 2 needs an Ampere or newer GPU",
                     "flash-attn 2 has kernels for sm_80 and newer only; this GPU is older",
                     "do not use flash-attn here: load the model with attn_implementation=\"sdpa\" (or \"eager\") "
                     "instead of \"flash_attention_2\"", evidence, errors)
    if re.search(r"(?i)FlashAttention2? has been toggled on|flash_attn\W+(?:seems to be )?not installed|No module named "
                 r"'flash_attn", text):
        amd = _vendor(ctx) == "amd"
        install = ("ROCm's flash-attention (github.com/ROCm/flash-attention, built with GPU_ARCHS=<your gfx>) or its "
                   "Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE)" if amd else
                   "pip install flash-attn --no-build-isolation (a prebuilt wheel matching torch and CUDA)")
        return _make("attention", "flash-attn is not installed", "the model is asked for FlashAttention 2, but the "
                     "flash_attn package is not importable in this environment",
                     f"load the model with attn_implementation=\"sdpa\" (PyTorch's fused attention, no extra package), "
                     f"or install {install}", evidence, errors)
    if re.search(r"(?i)memory_efficient_attention", text) and _vendor(ctx) == "amd":
        return _make("attention", "xformers has no kernels for this AMD GPU",
                     "the installed xformers has no ROCm kernels for this arch",
                     "do not use xformers on AMD: uninstall it or start without it (ComfyUI: "
                     "--use-pytorch-cross-attention; A1111: no --xformers) and use PyTorch's SDPA", evidence, errors)
    if re.search(r"(?i)not supported by Flash-?Attention|FlashAttention only supports|compiling for gfx", text):
        return _make("attention", "flash-attn does not support this GPU",
                     "this flash-attn build has no kernels for the GPU's arch",
                     "use PyTorch's scaled_dot_product_attention (SDPA; attn_implementation=\"sdpa\") instead of "
                     "flash-attn", evidence, errors)
    hit = _catalogue(errors)
    return _restate("attention", hit, errors) if hit is not None else None


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
