"""Code missing for this GPU's arch: a build without its target (a library built from source, the build's target
list, a CUDA capability left out), a release that lost the GPU, and the override or rebuild that brings the code."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.archs import build_fix, tool_builds
from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.facts import discrete_archs
from steadytune.doctor.fixes import (
    INFERENCE_TOOLS,
    override_value,
    rebuild_line,
    rocm_index_for,
    set_variable,
    wheel_line,
)
from steadytune.hardware.gpu_facts import (
    OFFICIAL_WHEEL_ARCHS,
    arch_info,
    first_stable_wheel,
    normalise_gfx,
    override_for_arch,
)
from steadytune.doctor.rules.base import (
    _APU_ARCHS,
    _arch_fact,
    Context,
    _cuda_index_for_driver,
    NOT_DETECTED,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    OVERRIDE,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)
from steadytune.doctor.rules.arch.overrides import _family_of, _OVERRIDE_TABLE, _target
from steadytune.doctor.rules.arch.cuda_builds import (
    _blackwell_build,
    _companion_build,
    _cuda_build,
    _jetson,
    _listed_cuda_archs,
    _no_cuda_said,
    _NVCC_FIRST,
    _NVCC_OLDEST,
    _older_than_every_torch,
    _ptxas_lacks,
    _toolkit_newer_than_driver,
    _wheel_lacks,
    _xformers_lacks,
)
from steadytune.doctor.rules.arch.old_gcn import _is_old_gfx, _rocm_of_its_era
from steadytune.doctor.rules.arch.own_cuda_builds import rebuild_for
from steadytune.doctor.rules.arch.gpu_asks import asks_about_gpu


def _dropped_by(cc: int) -> Optional[int]:
    """The first CUDA major whose nvcc no longer compiles compute capability `cc` (cuda_builds._NVCC_OLDEST: CUDA 11
    dropped 3.0, CUDA 12 dropped 3.5 / 3.7, CUDA 13 dropped everything below 7.5); None for an arch every CUDA has."""
    return next((major for major, oldest in sorted(_NVCC_OLDEST.items()) if cc < oldest), None)


# The CUDA toolkit's package where the build runs, for going back to an older major: Gentoo's dev-util/nvidia-cuda-toolkit
# (gentoo-overlay#160, the overlay maintainer's answer), conda's cuda-toolkit of the nvidia / conda-forge channels
# (with its cuda-version pin), Debian's and Ubuntu's nvidia-cuda-toolkit (its version is the release's own).
# Checked round 19: anaconda.org/nvidia/cuda lists "conda install nvidia/label/cuda-11.8.0::cuda" (the same package as
# conda install cuda -c nvidia/label/cuda-11.8.0) and nvidia/label/cuda-12.9.0 is in use; the channel's per-release
# labels start at cuda-11.3.0 (anaconda.org/nvidia/repo's label list: cuda-11.3.0 ... and, before, only cuda9.2 /
# cuda10.0 / cuda10.1), so no cuda-10.2.0 label exists and CUDA 10 gets the generic advice (_CONDA_LABELS). NVIDIA's
# apt repository names the package cuda-toolkit-11-8 (developer.download.nvidia.com/compute/cuda/repos/ubuntu2004
# Packages: cuda-11-8 depends on cuda-toolkit-11-8).
_TOOLKIT_PACKAGES = (
    (r"(?i)\bemerge\b|\b[a-z]+-[a-z]+/[\w+-]+-\d[\w.-]*::\w+|\bgentoo\b|\bsci-libs/|\bdev-util/|\bebuild\b",
     "on Gentoo: mask the newer toolkit and go back to {old}.x: echo '>=dev-util/nvidia-cuda-toolkit-{new}' | sudo tee -a "
     "/etc/portage/package.mask/cuda, then emerge --ask --oneshot '<dev-util/nvidia-cuda-toolkit-{new}' and rebuild the "
     "package"),
    (r"(?i)\bconda\b|\bmamba\b|\bmicromamba\b",
     "in the conda environment: conda install cuda -c nvidia/label/cuda-{last}.0 (NVIDIA's conda channel of that "
     "release), then rebuild with CUDA_HOME=$CONDA_PREFIX"),
    (r"(?i)\bapt(?:-get)?\b|\bubuntu\b|\bdebian\b",
     "install a CUDA {last} toolkit beside the current one (NVIDIA's cuda-toolkit-{dash} package from its apt "
     "repository, or its runfile with --toolkit only; the distribution's nvidia-cuda-toolkit follows the release) and "
     "build with CUDA_HOME=/usr/local/cuda-{last}"),
)


# the last minor of each CUDA major (NVIDIA's CUDA toolkit archive: 10.2, 11.8, 12.9 before 13.0)
_LAST_MINOR = {10: "10.2", 11: "11.8", 12: "12.9"}
# the CUDA majors whose last minor has a nvidia/label/cuda-X.Y.0 conda label (labels begin at 11.3.0)
_CONDA_LABELS = {11, 12}


def _dropped_arch_fix(ctx: Context, cc: str, dropped: int, arch: Optional[str]) -> str:
    """Two ways out of an arch the toolkit dropped, the build's own list first (it keeps the toolkit), then the toolkit
    one major back, through the platform's package where the paste names one."""
    text = _text(ctx)
    old = dropped - 1
    last = _LAST_MINOR.get(old, f"{old}.x")
    platform = next((how.format(old=old, new=dropped, last=last, dash=last.replace(".", "-")) for said, how in _TOOLKIT_PACKAGES
                     if re.search(said, text) and not ("nvidia/label" in how and old not in _CONDA_LABELS)),
                    f"install a CUDA {old}.x toolkit and build with it (CUDA_HOME / PATH pointing at its nvcc)")
    if arch == f"sm_{cc}":   # the GPU is that arch itself: only the older toolkit builds for it
        return f"build with CUDA {old}.x, the last that compiles compute_{cc} for this GPU: {platform}"
    return (f"take compute_{cc} out of the build's arch list (TORCH_CUDA_ARCH_LIST for PyTorch / caffe2 builds; the "
            "project's own arch list, e.g. CMAKE_CUDA_ARCHITECTURES, otherwise) so it builds for the GPU's "
            f"own arch; or build with CUDA {old}.x, the last that compiles compute_{cc}: {platform}")


# pytorch.org's CUDA 12 wheel indexes (cu121 from torch 2.1, then cu124, cu126, cu128, cu129): a "CUDA 12.2 / 12.3"
# torch the user names is one of these, the nearest below (pytorch.org's get-started pages and previous-versions list)
_TORCH_CUDA12_INDEXES = (1, 4, 6, 8, 9)


def _pre_cuda11_nvcc(ctx: Context, cc: str, errors: list) -> Diagnosis:
    """(round 19, r19b) nvcc refusing both -std=c++17 and the GPU's arch: the nvcc on PATH predates CUDA 11.0 (the
    first nvcc with -std=c++17; CUDA 11.0 release notes), whatever torch is installed, since an extension build
    compiles with the system's nvcc, not with the CUDA inside torch's wheel (DeepSpeedExamples#911: three torch builds
    tried, each failing the same way, until a CUDA 12.1 toolkit was installed). The toolkit to install is the one of
    the torch build the user keeps (the last one named)."""
    text = _text(ctx)
    builds = re.findall(r"(?i)\bcu(1[0-3])\.?(\d)\b", text)
    if builds:
        major, minor = int(builds[-1][0]), int(builds[-1][1])
        if major == 12 and minor not in _TORCH_CUDA12_INDEXES:
            minor = max(m for m in _TORCH_CUDA12_INDEXES if m <= minor) if minor > 1 else 1
        toolkit = f"{major}.{minor}"
        which = (f"install the CUDA {toolkit} toolkit (NVIDIA's CUDA toolkit archive), the CUDA of the torch build to "
                 f"keep (pip install torch --index-url https://download.pytorch.org/whl/cu{major}{minor})")
    else:
        toolkit = "<that version>"
        which = ("install the CUDA toolkit of the torch build in place (python -c 'import torch; "
                 "print(torch.version.cuda)'; NVIDIA's CUDA toolkit archive)")
    return _make("arch-missing", "the nvcc on PATH predates CUDA 11",
                 f"nvcc knows neither -std=c++17 nor compute_{cc}: the nvcc the build finds is older than CUDA 11.0, and "
                 "an extension build compiles with it whatever torch is installed (the CUDA inside torch's wheel has no "
                 "nvcc), so changing the torch build does not help",
                 f"{which}, then build with it: export CUDA_HOME=/usr/local/cuda-{toolkit} and "
                 "PATH=$CUDA_HOME/bin:$PATH (nvcc --version must show it); compute_" + cc + " needs "
                 f"{_NVCC_FIRST.get(cc, 'a newer CUDA toolkit')} or newer", [ctx.line_fact(errors[0])], errors)


def _needs_other_code(arch: str) -> bool:
    """An AMD arch the pytorch.org wheels do not carry (so code for it comes from an override or a special build)."""
    return arch.startswith("gfx") and arch not in OFFICIAL_WHEEL_ARCHS


def _arch_said(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """Kinds the message settles by itself: a library that refuses the arch by name (hipBLASLt), flash-attn's own
    list of archs, a supported-arch list whose entries run together (a release's typo), and a GPU newer ROCm releases
    dropped (the last release that ran it, from the arch table)."""
    flash_lines = [e for e in ctx.of("attention") if re.search(r"GPU archs? of \[.*gfx9", e.line)]
    errors = errors + flash_lines
    refused = _flash_attn_refuses(ctx)
    if refused is not None:
        return refused
    text = " ".join(e.line for e in errors)
    if not errors:
        return None
    evidence = [ctx.line_fact(errors[0])]
    if re.search(r"(?i)hipBLASLt on a?n? ?unsupported architecture", text):
        arch = next((f.value for f in ctx.sheet.of("arch") if f.value.startswith("gfx")), None)
        return _make("arch-missing", "hipBLASLt has no kernels for this GPU",
                     f"torch prefers hipBLASLt for its matmuls, which has no code for {arch or 'this arch'}",
                     "export TORCH_BLAS_PREFER_HIPBLASLT=0 (torch then uses hipBLAS/rocBLAS, which carries the arch), "
                     "or torch.backends.cuda.preferred_blas_library('hipblas') in the script", evidence, errors)
    flash = re.search(r"GPU archs? of \[['\"]?(gfx\w+)", text)
    if flash and re.search(r"(?i)Flash-?Attention", text):
        arch = flash.group(1)
        return _make("arch-missing", f"flash-attn's setup does not list {arch}",
                     f"flash-attn's setup.py accepts only the archs it lists; {arch} (CDNA, with the matrix cores the "
                     "CK kernels use) is not among them in this version",
                     f"build with GPU_ARCHS={arch} from a flash-attn version that lists {arch} (or add {arch} to the "
                     "allowed archs in setup.py, as its PR did); otherwise use torch's SDPA", evidence, errors)
    glued = re.search(r"supported AMDGPU versions are\s*([^.]*)", " ".join(ctx.sheet.lines))
    joined = re.search(r"\b(gfx\w+?)(gfx\w+)\b", glued.group(1)) if glued else None
    if joined:
        return _make("arch-missing", "the build's supported-arch list has a typo",
                     f"the list reads \"{joined.group(0)}\": a comma is missing, so neither {joined.group(1)} nor "
                     f"{joined.group(2)} matches and the GPU is ignored",
                     f"install a build with the list fixed (tensorflow-rocm after 2.14.0.600, or build from the "
                     f"develop-upstream branch); {joined.group(0)} in the message is the typo, not the GPU",
                     evidence, errors)
    arch = next((a for a in re.findall(r"GPU arch ?: ?(gfx\w+)", text)), None) or \
        next((f.value for f in ctx.sheet.of("arch") if f.value.startswith("gfx")), None)
    info = arch_info(arch) if arch else None
    last = getattr(info, "max_rocm", None)
    path = re.search(r"/opt/rocm-(\d+)\.(\d+)", text)
    # the release in use: the /opt/rocm-X.Y the message names, else the newest ROCm the paste says it runs
    said = [tuple(int(x) for x in v.split(".")[:2]) for v in ctx.sheet.values("rocm") if re.fullmatch(r"\d+\.\d+", v)]
    running = (int(path.group(1)), int(path.group(2))) if path else max(said) if said else None
    if last and running and running > tuple(last):
        version = f"{last[0]}.{last[1]}"
        return _make("arch-missing", f"ROCm {running[0]}.{running[1]} dropped {arch}",
                     f"this ROCm's rocBLAS has no {arch} kernels; {version} is the last release whose libraries carry "
                     f"{arch}", f"use ROCm {version} (its packages, or the rocm{version} torch wheels: --index-url "
                     f"https://download.pytorch.org/whl/rocm{version}), or a rocBLAS built with -DAMDGPU_TARGETS={arch}",
                     evidence, errors)
    return None


# flash-attn's own runtime / setup check, which names the GPUs it accepts ("FlashAttention only supports AMD MI200 GPUs
# or newer", "only supports Ampere GPUs or newer")
_FLASH_REFUSAL = re.compile(r"(?i)Flash-?Attention(?: \w+)? only supports? (?:AMD )?([\w ]{2,30}?) GPUs? or newer")


def _flash_attn_refuses(ctx: Context) -> Optional[Diagnosis]:
    """flash-attn refusing an AMD GPU by its allow-list: the check names the GPUs it accepts, the paste names another
    AMD GPU. ROCm's flash-attention builds for the archs in its setup's list; a CDNA arch left out of the list gets
    no kernels, and adding it to the list and rebuilding (as its maintainers did for gfx908) is the fix."""
    said = _lines_matching(ctx, _FLASH_REFUSAL.pattern)
    if not said:
        return None
    on_check = {line.line_no for line in said}
    accepted = {f.value for f in ctx.sheet.of("arch") if f.line_no in on_check}
    mine = next((f for f in ctx.sheet.of("gpu") if f.detail.startswith("gfx") and f.detail not in accepted
                 and f.line_no not in on_check), None)
    if mine is None:
        return None
    arch = mine.detail
    return _make("arch-missing", f"flash-attn is not built for the {mine.value} ({arch})",
                 f"this flash-attn accepts only the GPUs its check lists ({_FLASH_REFUSAL.search(said[0].line).group(1)} "
                 f"and newer); the {mine.value} is {arch}, which its setup never builds kernels for",
                 f"add {arch} to flash-attn's allowed archs (setup.py's arch list and the runtime check) and rebuild: "
                 f"GPU_ARCHS={arch} PYTORCH_ROCM_ARCH={arch} pip install --no-build-isolation . in the clone (newer "
                 f"ROCm/flash-attention releases list {arch} where its kernels build); otherwise use torch SDPA "
                 "(attn_implementation=\"sdpa\")", [mine, ctx.line_fact(said[0])], said)


# the ROCm math libraries a user builds from source (an Arch PKGBUILD, a cmake tree): each builds GPU code only for the
# targets in its AMDGPU_TARGETS (GPU_TARGETS) cmake argument
_ROCM_LIBRARY = re.compile(r"(?i)\b(rocrand|hiprand|rocblas|hipblaslt|hipblas|rocsparse|hipsparse|rocfft|hipfft|rocsolver|"
                           r"hipsolver|miopen|rocprim|hipcub|rocthrust|composable_kernel|rocwmma)\b")
_BUILT_FROM_SOURCE = re.compile(r"(?i)\brecompil\w*|\brebuil[dt]\w*|PKGBUILD|makepkg|cmake_args|\bcmake\b|compile "
                                r"options|built (?:it |them )?from source|build(?:ing)? from source")


@rule("arch-missing")
def library_built_without_target(ctx: Context) -> Optional[Diagnosis]:
    """A HIP "no code object" error where the user built a ROCm library from source: the build left the GPU's target
    out of AMDGPU_TARGETS (a packaging script that drops its cmake arguments builds the default list), so that one
    library has no code for this GPU; rebuilding it for the target is the fix, not an override."""
    missing = ctx.of("arch-missing")
    # the library and its build said together, on a line of the user's own (the error naming a library, beside a torch
    # built from source, is that library's missing kernels, which the readings of the error explain)
    errors = {e.line_no for e in ctx.errors}
    library = next((m for n, line in enumerate(ctx.sheet.lines, 1) if n not in errors and _BUILT_FROM_SOURCE.search(line)
                    for m in [_ROCM_LIBRARY.search(line)] if m), None)
    if not missing or library is None:
        return None
    arch, fact = ctx.arch(missing)
    target = arch or "<the GPU's gfx target (rocminfo)>"
    name = library.group(1).lower()
    return _first(_make(
        "arch-missing", f"{name} was built without this GPU's target",
        f"{name} was compiled from source, and its build did not get this GPU ({target}) in AMDGPU_TARGETS, so it has "
        "no code object for it; the libraries built with the target still load",
        f"rebuild {name} with the target: cmake -DAMDGPU_TARGETS={target} (a PKGBUILD must pass its cmake arguments, "
        f"-DAMDGPU_TARGETS=${{AMDGPU_TARGETS}}, with AMDGPU_TARGETS={target} exported), then reinstall it",
        [f for f in (fact,) if f], missing))


@rule("arch-missing")
def arch_missing(ctx: Context) -> Optional[Diagnosis]:
    early = _runtime_predates_gpu(ctx) or _built_for_other_targets(ctx) or _crash_on_other_targets(ctx)
    if early is not None:
        return early
    diagnosis = _arch_missing(ctx)
    if diagnosis is None:
        diagnosis = _capability_left_out(ctx) or _support_request(ctx)
    regression = _release_regression(ctx)
    if diagnosis is None and regression is not None:
        diagnosis = _release_lost_gpu(ctx, regression)
    elif diagnosis is not None and diagnosis.family == "arch-missing" and regression is not None:
        working, failing = regression
        diagnosis.fix = (f"the paste says {working} works where {failing or 'the newer release'} fails: that release "
                         f"was shipped without what {working} has for this GPU; go back to {working} until a release "
                         f"with the fix (and report it); otherwise: " + diagnosis.fix)
    if diagnosis is not None and ctx.override() is None and _ggml_arch(ctx):
        # ggml named the GPU and no override is set: "unset the override" (the catalogue's reading) cannot apply
        return _first(diagnosis)
    return diagnosis


# a build's own GPU-target setting, as make / cmake / pip builds take it
_BUILD_TARGETS = re.compile(r"\b(?:-D)?(AMDGPU_TARGETS|GPU_TARGETS|PYTORCH_ROCM_ARCH|GPU_ARCHS|HCC_AMDGPU_TARGETS?)="
                            r"[\"']?([^\s\"']+)")


def _built_for_other_targets(ctx: Context) -> Optional[Diagnosis]:
    """A missing-code error where the paste shows the build's target list, and the code the runtime loads is not in
    it: the GPU's own target, or with an override in force the target the override names (HSA_OVERRIDE_GFX_VERSION=
    10.3.0 makes the runtime ask for gfx1030 code, whatever the card is). A misspelled target (gxf1032) builds nothing
    for any GPU."""
    missing = ctx.of("arch-missing")
    said = _BUILD_TARGETS.search(_text(ctx))
    if not missing or said is None:
        return None
    variable, listed = said.group(1), [t for t in re.split(r"[;,]", said.group(2).lower()) if t]
    override = ctx.override()
    value = override.value.split("=", 1)[1] if override is not None else None
    wanted = _target(value) if value else None
    if wanted is None:
        archs = [a for a in discrete_archs(ctx.sheet) if a.startswith("gfx")]
        wanted = archs[0] if archs else None
    if wanted is None or any(normalise_gfx(t) == wanted for t in listed):
        return None
    typos = [t for t in listed if not re.fullmatch(r"gfx[0-9a-f]{3,4}(?::\S*)?", t)]
    why = (f"{', '.join(typos)} is not a gfx target, so the build has no GPU code at all" if typos else
           f"it lists {', '.join(listed)}")
    loads = f"the runtime loads {wanted} code ({OVERRIDE}={value} is in force)" if value else \
        f"the GPU is {wanted}"
    tool = ctx.tool(missing)
    rebuild = _own_build(tool, wanted, ctx) or f"rebuild with {variable}={wanted}"
    keep = f"; keep {OVERRIDE}={value} when running it" if value else ""
    return _make("arch-missing", f"the build's {variable} does not include {wanted}",
                 f"{loads}, but the build was made for {variable}={said.group(2)}: {why}",
                 f"rebuild for {wanted}: {variable}={wanted} ({rebuild}){keep}",
                 [f for f in (override, ctx.line_fact(missing[0])) if f], missing)


# a build's own statement of the targets it was made for ("Built for gfx1200:", "GPU targets: gfx1100;gfx1101")
_TARGETS_SHOWN = re.compile(r"(?i)\bbuilt for\b|\btargets?\b|AMDGPU_TARGETS|GPU_TARGETS|PYTORCH_ROCM_ARCH")


def _crash_on_other_targets(ctx: Context) -> Optional[Diagnosis]:
    """A crash (segfault, core dump) of a program whose build states the gfx targets it was made for, on a GPU whose
    own target is not among them: a near sibling's target (gfx1200 for a gfx1201) loads and then faults, so the crash
    is the missing code, not the model or the driver."""
    crashes = ctx.crashes() + ctx.of("gpu-hang")
    if not crashes or any(e.family not in (None, "gpu-hang") for e in ctx.errors):
        return None
    shown = [f for f in ctx.sheet.of("built_for") if _TARGETS_SHOWN.search(f.line)]
    archs = [a for a in discrete_archs(ctx.sheet) if a.startswith("gfx")]
    if not shown or not archs:
        return None
    listed = sorted({normalise_gfx(f.value) for f in shown})
    wanted = archs[0]
    if wanted in listed:
        return None
    tool = ctx.tool(crashes)
    rebuild = _own_build(tool, wanted, ctx) or f"rebuild with the GPU target set to {wanted} (AMDGPU_TARGETS={wanted})"
    return _make("arch-missing", f"a build for {', '.join(listed)} run on {wanted}",
                 f"the build was made for {', '.join(listed)}; the GPU is {wanted}, whose code it does not carry, and "
                 "the crash is where that code is needed", f"rebuild for {wanted}: {rebuild}",
                 [shown[0], _arch_fact(ctx, wanted)], crashes, confirmed=False)


# the user's words that a build leaves a compute capability out ("incompatible with GPUs with cuda compute capability
# 5.0", "add support for compute capability 6.1"): a build question, unlike a stated floor ("requires 7.0 or newer")
# ("dropped / no longer supports compute capability 3.5" is a floor a release set on purpose: gpu-unsupported's)
_LEFT_OUT = re.compile(r"(?i)(?:incompatible with|not compatible with|(?:add|adding|restore|bring back|no) support for|"
                       r"(?:doesn't|does not|don't) (?:support|work (?:on|with)))"
                       r"[^.\n]{0,60}?\bcompute capability (\d{1,2})\.(\d)\b")
_FLOOR = re.compile(r"(?i)\b(?:requires?|minimum|at least|or (?:newer|higher|above)|>=)")


def _capability_left_out(ctx: Context) -> Optional[Diagnosis]:
    """A program's CUDA build that leaves out the GPU's compute capability, said in words with no error line: the
    kernels can be built for it (CMAKE_CUDA_ARCHITECTURES / TORCH_CUDA_ARCH_LIST), the program's release did not."""
    if ctx.errors:
        return None
    said = next(((n, m) for n, line in enumerate(ctx.sheet.lines, 1) for m in [_LEFT_OUT.search(line)]
                 if m and not _FLOOR.search(line)), None)
    if said is None:
        return None
    n, m = said
    cc, cc_dot = f"{m.group(1)}{m.group(2)}", f"{m.group(1)}.{m.group(2)}"
    tool = ctx.tool()
    own = build_fix(tool, f"sm_{cc}") if tool not in (None, "torch") else None
    name = tool_builds()[tool].name if own else "the program"
    return _make("arch-missing", f"{name}'s CUDA build leaves out compute capability {cc_dot}",
                 f"its CUDA kernels were compiled for other compute capabilities; a GPU of compute capability {cc_dot} "
                 f"(sm_{cc}) gets no kernel and fails", (own + "; or " if own else "") +
                 f"use a build whose CUDA architectures include {cc_dot}: build it with CMAKE_CUDA_ARCHITECTURES={cc} "
                 f"(TORCH_CUDA_ARCH_LIST={cc_dot} for a torch extension), or a release built with compute capability "
                 f"{cc_dot}; meanwhile its Vulkan or CPU backend", [], _lines_matching(ctx, re.escape(m.group(0)))[:1],
                 confirmed=False)


# a title asking a tool for a GPU: "gfx1151 support in flash-attention", "please add gfx906 back", "does vLLM support
# the MI50?", "xformers not working on RTX 5090"
_ASKS_SUPPORT = re.compile(r"(?i)\bsupport(?:s|ed|ing)?\b|\badd(?:ing)?\b.{0,40}\bback\b|\b(?:not|isn't|doesn't|does not) "
                           r"work(?:ing|s)?\b|支持|用不了|\badd(?:ing)?\b[^\n]{0,60}\?|\bbuilds? for\b")


def _support_request(ctx: Context) -> Optional[Diagnosis]:
    """A thin paste (a title, a question) asking whether a tool runs on a GPU, or saying it does not: for a tool that
    builds its own GPU code (doctor/arch_builds.yaml), the answer is that tool's build for the GPU's arch."""
    if not _is_thin(ctx) or not _ASKS_SUPPORT.search(_text(ctx)):
        return None
    tool = ctx.tool()
    if tool in (None, "torch") or tool not in tool_builds():
        return None
    arch, where = ctx.arch([])
    fix = build_fix(tool, arch, ctx.sheet.is_windows) if arch else None
    if not fix or where is None:
        return None
    asked = asks_about_gpu(ctx, arch)
    if not asked:
        return None
    return _make("arch-missing", f"{tool_builds()[tool].name} and the {arch}",
                 f"whether {tool_builds()[tool].name} runs on a GPU is whether its build carries the GPU's arch ({arch}); "
                 "the paste asks for it or says it does not work", fix, [f for f in (where,) if f], asked,
                 confirmed=False)


# a release named as a token: 0.3.20, v1.79.1, KoboldCPP-v1.79.1.yr0-ROCm
# (bounded repeats: a hostile line of "1.1.1.1..." must stay linear)
_RELEASE = r"((?:[A-Za-z]\w{0,30}-)?v?\d{1,6}\.\d{1,6}(?:\.\d{1,6})?(?:[.+-][A-Za-z0-9]{1,12}){0,4})"
# the user's words that one release works: "downgrading to 0.1.10", "works in 0.3.20", "(same gpu is recognized in
# 0.3.20)", "X gives the error, however Y does not"
_WORKS_IN = (re.compile(r"(?i)\b(?:downgrad\w*|roll(?:ing|ed)? ?back|revert\w*|going back|went back)(?: \w+)? to "
                        r"(?:version |v(?=\d))?" + _RELEASE),
             re.compile(r"(?i)(?<!no longer )(?<!not )(?<!n't )\b(?:works?|worked|working|recogni[sz]ed|detected|listed|fine)(?: fine| well| ok)? "
                        r"(?:in|with|on|using) (?:version |v(?=\d))?" + _RELEASE),
             re.compile(r"(?i)\b(?:however|but|while) " + _RELEASE + r" (?:does not|doesn't|did not|didn't|works)\b"),
             re.compile(r"(?i)\blast (?:working|good|known[- ]good) (?:version|release|build)\W{0,3}(?:is |was )?"
                        r"(?:v(?=\d))?" + _RELEASE),
             re.compile(r"(?i)[;,(]\s*(?:version |v(?=\d))?" + _RELEASE + r" (?:still )?works\b"))
# the release the user says fails: "in 0.3.21", "after updating to version 0.3.21", "X gives the error"
_FAILS_IN = (re.compile(r"(?i)\b(?:after (?:updating|upgrading|update|upgrade)(?: \w+)?(?: to)?|since|no longer \w+ in)"
                        r"(?: version| v(?=\d))? " + _RELEASE),
             re.compile(r"(?i)" + _RELEASE + r" (?:gives|throws|shows|has) (?:the|this|an?) (?:error|issue|problem)"))


def _release_regression(ctx: Context) -> Optional[tuple[str, Optional[str]]]:
    """The release that works by the user's own account, and the one that fails where the paste names it: a
    regression of the tool, whose fix (until a release mends it) is the release that works."""
    text = _text(ctx)
    # a toolkit or driver said to work ("downgrading to cuda-11.4.2") is the stack under the tool, not its release
    working = next((m.group(1).rstrip(".,") for p in _WORKS_IN for m in [p.search(text)] if m
                    and not re.match(r"(?i)cuda|rocm|cu\d|hip|driver|nvidia|python|torch", m.group(1))), None)
    if working is None:
        return None
    failing = next((m.group(1).rstrip(".,") for p in _FAILS_IN for m in [p.search(text)] if m
                    and m.group(1).rstrip(".,") != working), None)
    return working, failing


def _release_lost_gpu(ctx: Context, regression: tuple[str, Optional[str]]) -> Optional[Diagnosis]:
    """An inference app that stopped seeing or using the GPU in a new release while the previous one did: the new
    release's bundled runtime (its CUDA / ROCm llama.cpp build) carries no code for this GPU."""
    tool = ctx.tool()
    gpus = ctx.sheet.of("gpu")
    lost = _lines_matching(ctx, r"(?i)no longer|not (?:be )?(?:recogni[sz]ed|detected|listed|used|shown)|"
                                r"(?:doesn't|does not|can't|cannot) (?:see|find|detect|recogni[sz]e|use)|"
                                r"no kernel image|" + NOT_DETECTED.removeprefix("(?i)"))
    if tool not in INFERENCE_TOOLS or not gpus or not lost:
        return None
    working, failing = regression
    gpu = next((g for g in gpus if g.line_no == lost[0].line_no), gpus[0])
    arch = gpu.detail
    if tool == "lmstudio":
        fix = (f"LM Studio {failing or 'the update'} switched its llama.cpp runtime (engine) to one without code for "
               f"the {gpu.value} ({arch}); in Settings > Runtime (Developer > Runtimes) select the runtime {working} "
               "used (an older GPU runs the plain CUDA llama.cpp runtime where the CUDA 12 one left it out), or the "
               "Vulkan runtime")
    else:
        fix = (f"{failing or 'the newer release'} ships without code for the {gpu.value} ({arch}) that {working} had: "
               f"go back to {working} until a release with the fix (and report it), or use the tool's Vulkan backend")
    return _make("arch-missing", f"{tool}'s new release lost the {gpu.value}",
                 f"the same machine ran the GPU with {working}; the release after it does not list or use it",
                 fix, [gpu], lost[:1], confirmed=False)


def _runtime_predates_gpu(ctx: Context) -> Optional[Diagnosis]:
    """HIP failing to initialise at all (hipGetDeviceCount -> hipErrorInvalidDevice / hipErrorNoDevice) on a GPU the
    paste names, with no device index in play: a ROCm runtime older than the GPU's arch does not know the chip. The
    ordinal reading (an index past the visible GPUs) needs an index; this one needs none."""
    init = [e for e in ctx.errors if re.search(r"hipGetDeviceCount\(\)|HIP initialization", e.line)
            and re.search(r"hipErrorInvalidDevice|hipErrorNoDevice|Error 101\b", e.line)]
    if not init or ctx.override() is not None or re.search(r"(?i)cuda:\d|device_?(?:id|index|ordinal)\s*[=:]\s*\d",
                                                              _text(ctx)) \
            or any(re.match(r"(?:HIP|ROCR|CUDA)_VISIBLE_DEVICES=", f.value) for f in ctx.sheet.of("env")):
        return None   # an index or a visibility variable in play: the ordinal reading's
    archs = [a for a in discrete_archs(ctx.sheet) if a.startswith("gfx")]
    if not archs or arch_info(archs[0]) is None:
        return None
    arch = archs[0]
    first = first_stable_wheel(arch)
    line = wheel_line(arch)
    since = f" (pytorch.org wheels carry it since {first.name}, torch {first.torch})" if first else ""
    fix = (f"use a ROCm release and a torch built with {arch}{since}: {line}; in a container, a newer image "
           f"(rocm/pytorch:latest)") if line else rocm_index_for(arch)
    return _first(_make("arch-missing", f"the ROCm runtime here predates {arch}",
                        f"HIP fails while counting the GPUs, before any device index is used: the runtime (and the "
                        f"torch built on it) does not know {arch}", fix,
                        [_arch_fact(ctx, arch), ctx.line_fact(init[0])], init))


def _ggml_arch(ctx: Context) -> Optional[str]:
    """ggml names a ROCm GPU by its gfx major and minor ("compute capability 11.0" is gfx1100, 10.3 gfx1030)."""
    found = re.search(r"(?i)found \d+ ROCm devices?:?\s*\n\s*Device 0:[^\n]*compute capability (\d+)\.(\d+)",
                      _text(ctx))
    return f"gfx{found.group(1)}{found.group(2)}0" if found else None


# (a card said to be unsupported, or hanging, is the same complaint: on a card the wheels lack, its missing code)
_FAILURE_WORD = (r"(?i)\b(?:errors?|fail(?:s|ed|ing|ure)?|broken|problems?|(?:won't|doesn't|does not|can't|cannot) "
                 r"(?:start|load|run)|(?:not|isn't|is not|no longer) supported|unsupported|hang(?:s|ing)?|freez(?:es|ing)|"
                 r"stuck)\b|报错|错误|失败|无法|不支持|卡住|卡死")


# a crash in words: Windows' access-violation status (0xc0000005, 3221225477 as an unsigned exit code) and the POSIX
# segfault's names; not "aborted" or an exit status, which prose uses for other things
_CRASH_SAID = re.compile(r"(?i)\b0xc0000005\b|\b3221225477\b|\baccess violation\b|segmentation fault|"
                         r"\bseg ?fault\w*|\bsigsegv\b|core dumped")


def _is_thin(ctx: Context) -> bool:
    """A short paste (an issue's title and a sentence or two, maybe among a few unrelated log lines) with no error
    line of a known class (a title the error finder keeps as unrecognised counts as words): its words are all the
    evidence there is."""
    return all(e.family is None for e in ctx.errors) and sum(1 for line in ctx.sheet.lines if line.strip()) <= 15


def _arch_missing(ctx: Context) -> Optional[Diagnosis]:
    errors = [e for e in ctx.of("arch-missing") if "/.singularity.d/libs/" not in e.line]   # host libs: install
    said = _arch_said(ctx, errors)
    if said is not None:
        return said
    if ctx.override() is None:   # "invalid ISA" with no override set: the build lacks the arch, nothing overrode it
        errors += ctx.of("override-wrong")
    arch, where = ctx.arch(errors)
    if _ggml_arch(ctx) and (arch is None or arch.startswith("sm_")):   # facts read 11.0 as an NVIDIA sm_110
        arch = _ggml_arch(ctx)
    if arch and arch in _APU_ARCHS and any(re.search(r"amdgpu is not supported", e.line) for e in errors):
        card = next((f for f in ctx.sheet.of("arch") if f.value.startswith("gfx") and f.value not in _APU_ARCHS), None)
        if card is not None:   # Ollama skips the iGPU it cannot use; the card is what the user runs on
            arch, where = card.value, card
    xformers = _xformers_lacks(ctx, errors)
    if xformers is not None:
        return xformers
    kepler = _older_than_every_torch(ctx, arch, where, errors or _no_cuda_said(ctx))
    if kepler is not None:
        return kepler
    blackwell_build = _blackwell_build(ctx)
    companion = _companion_build(ctx)
    if arch and re.fullmatch(r"sm_1\d\d", arch) and blackwell_build and companion and companion[1] < (12, 8) and \
            any("no kernel image" in e.line for e in errors):
        # torch is a CUDA 12.8+ build, but torchvision / torchaudio came from an older index without Blackwell code
        return _make("arch-missing", f"{companion[0]} is a CUDA {companion[1][0]}.{companion[1][1]} build beside a "
                     f"CUDA {blackwell_build} torch", f"{companion[0]}'s kernels were built without {arch}",
                     build_fix("torchvision", arch) or "", [where, ctx.line_fact(errors[0])], errors)
    listed = _listed_cuda_archs(ctx)
    if arch and re.fullmatch(r"sm_1\d\d", arch) and blackwell_build and not _wheel_lacks(arch, ctx) and \
            (not listed or arch in listed) and \
            any("no kernel image" in e.line for e in errors) and ctx.tool(errors) not in tool_builds():
        # the torch installed is already a CUDA 12.8+ build, which carries sm_100/sm_120: the wheel is right, so the
        # driver underneath (older than the CUDA the wheel needs) is what cannot load its kernels
        return _make("driver", f"a CUDA {blackwell_build} torch on {arch} with an older NVIDIA driver",
                     f"the torch in place is built for CUDA {blackwell_build}, which carries {arch}'s kernels; the "
                     "NVIDIA driver is older than that CUDA needs (nvidia-smi's 'CUDA Version' below it)",
                     f"install an NVIDIA driver for CUDA {blackwell_build} or newer (570 or newer for Blackwell; "
                     "remove the old driver first), reboot, and check nvidia-smi shows it; keep the torch you have",
                     [where, ctx.line_fact(errors[0])], errors)
    ptxas = _ptxas_lacks(ctx, errors)
    if ptxas is not None:
        return ptxas
    confirmed = True
    nvcc = re.search(r"(?i)Unsupported gpu architecture:? ['\"`]?compute_(\d+)[af]?\b", " ".join(e.line for e in errors))
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
    dropped = _dropped_by(int(nvcc.group(1))) if nvcc and not toolkit else None
    if dropped:
        # (round 19, r19b) no toolkit version in the paste, and an arch older than CUDA `dropped` compiles: this nvcc
        # is too new for it, not too old (gentoo-overlay#160: caffe2's build listing compute_35 under CUDA 12)
        cc = nvcc.group(1)
        return _make("arch-missing", f"the build asks for compute_{cc}, which CUDA {dropped} and newer no longer compile",
                     f"CUDA {dropped} dropped compute capability {cc[:-1]}.{cc[-1]}; the nvcc here is {dropped}.x or newer "
                     "and the build's own arch list still names it",
                     _dropped_arch_fix(ctx, cc, dropped, arch), [ctx.line_fact(errors[0])], errors)
    if nvcc and re.search(r"(?i)Value '?c\+\+17'? is not defined for option '?std", _text(ctx)):
        return _pre_cuda11_nvcc(ctx, nvcc.group(1), errors)
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
    if not errors and _is_old_gfx(arch) and _rocm_of_its_era(ctx, arch):
        return None   # an old card under a ROCm that still built it, with no missing-code message: gpu_unsupported's
    if not errors and re.search(r"(?i)device[- _]?lib(?:rar(?:y|ies)|s)?(?:[- _]path)?\b|\bbitcode\b|--rocm-path", _text(ctx)):
        return None   # the compiler not finding its device libraries (a build of ROCm itself): rocm-libs-missing's
    if not errors and re.search(r"(?i)\bggml_vulkan\b|\bvulkan\b.{0,20}\b(?:backend|runtime|build|runner)\b|\bRADV\b",
                                _text(ctx)) and not re.search(r"(?i)\b(?:rocm|hip\w*|rocblas|zluda)\b", _text(ctx)):
        return None   # a Vulkan backend compiles its shaders for any GPU at run time: no per-arch code to lack
    if not errors:
        # the same problem without its message: a crash, a CPU fallback or a complaint on a GPU the builds do not carry
        faults = ctx.of("gpu-hang") + ctx.crashes()
        symptoms = faults + ctx.no_gpu()
        if not symptoms and arch and arch.startswith("gfx"):
            # a crash said in the user's own words ("it reports 0xc0000005", "ollama segfaults on load"): not an error
            # line by its shape, but a crash all the same, wherever it stands and however long the log around it is
            # (a symptom only: a crash in words does not settle the missing code the way a logged fault does)
            symptoms = _lines_matching(ctx, _CRASH_SAID)[:1]
        if not symptoms and arch and arch.startswith("gfx"):
            symptoms = _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1])
        if not symptoms and arch and arch.startswith("gfx"):
            # Ollama logs the GPUs it rejected at INFO level ("no compatible amdgpu devices detected"): not an error
            # line by its shape, but the symptom of a card its runner lacks
            symptoms = _lines_matching(ctx, r"(?i)no compatible (?:amd ?gpus?|gpus?)(?: devices?)? (?:were )?"
                                            r"(?:detected|discovered|found)")[:1]
        if not symptoms and arch and arch.startswith("gfx") and where is not None and _is_thin(ctx) and \
                not re.search(r"(?i)\bout of memory\b|\bOOM\b", _text(ctx)):   # (memory said: not a missing build)
            # a title and a card ("Text-to-speech error with X / Radeon 6700 XT"): a failure word beside the card's
            # name is all there is
            symptoms = [line for line in _lines_matching(ctx, _FAILURE_WORD)
                        if abs(line.line_no - where.line_no) <= 3][:1]
        windows_override = ctx.sheet.is_windows and (ctx.override() is not None or any(
            OVERRIDE in l for l in ctx.sheet.lines) and ctx.sheet.has("complaint", "yes"))
        # a torch the GPU is not in (the build says +cuXYZ, the GPU is named) with any sign of trouble
        said = [ErrorLine(i, l.strip(), None) for i, l in enumerate(ctx.sheet.lines, 1)
                if re.search(r"(?i)incompatib|not compatible|kernel[- ]related|kernel image|"
                             r"\b(?:can ?not|can't|does ?n[o']t|won't) (?:support|run on|work (?:on|with))\b", l)]
        complaint = [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]
        if arch and re.fullmatch(r"sm_1\d\d", arch) and _cuda_build(ctx) is None and not _blackwell_build(ctx) and \
                complaint and ctx.tool() in (None, "torch", "comfyui", "a1111", "unsloth", "llamafactory"):
            # a Blackwell card that "does not work" with a torch of unknown build: the usual cause is a wheel older
            # than CUDA 12.8, which carries no sm_100/sm_120 code (likely, not settled: the build is not shown)
            lacking = _symptom_lines(ctx, complaint)
            return _make("arch-missing", f"likely a torch without {arch} kernels",
                         f"{arch} (Blackwell) runs only torch builds for CUDA 12.8 or newer; older wheels have no code "
                         "for it", _cuda_index_for_driver(ctx, arch) + " (python -c 'import torch; "
                         "print(torch.__version__, torch.cuda.get_arch_list())' must list it)",
                         [where] + complaint, lacking, confirmed=False)
        listed = _listed_cuda_archs(ctx)
        if arch and arch.startswith("sm_") and listed and arch not in listed:
            # the torch's own arch list (get_arch_list(), or its "supports CUDA capabilities" warning) without the GPU
            line = _lines_matching(ctx, r"sm_\d+.{0,40}sm_\d+")[:1]
            return _make("arch-missing", f"this torch's arch list has no {arch}",
                         f"the torch shown lists {', '.join(sorted(listed, key=lambda a: int(a[3:])))}; the GPU is "
                         f"{arch}, which none of its kernels are built for", _cuda_index_for_driver(ctx, arch),
                         [where] + line, line)
        if _wheel_lacks(arch, ctx) and (symptoms or said or ctx.sheet.has("complaint", "yes")):
            lacking = symptoms or said or _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint")][:1])
            return _make("arch-missing", f"this torch has no kernels for {arch}",
                         f"the installed torch is a CUDA {'.'.join(map(str, _cuda_build(ctx)))} build, which does not "
                         f"carry {arch}", _cuda_index_for_driver(ctx, arch), [where] + lacking[:1], lacking)
        # an unexplained error beside the complaint, on a GPU whose sibling's code the older builds carried
        unexplained = arch and override_for_arch(arch) and any(e.family is None for e in ctx.errors)
        # an app that bundles its own ROCm (Ollama, LM Studio, koboldcpp) can lack a card the torch wheels carry: a
        # release older than the card, whose fix is the app's own newer build
        bundled = bool(arch and arch.startswith("gfx") and ctx.tool() in ("ollama", "lmstudio", "koboldcpp") and
                       not _is_old_gfx(arch) and (ctx.no_gpu() or _lines_matching(
                           ctx, r"(?i)no compatible (?:amd ?gpus?|gpus?)(?: devices?)? (?:were )?(?:detected|discovered|found)")))
        if not (symptoms or windows_override) or \
                not ((arch and (_needs_other_code(arch) or unexplained or bundled)) or
                     (windows_override and arch is None)) or \
                (ctx.override() is not None and not windows_override):
            return None
        # a GPU fault on a card the wheels lack, with no override anywhere, is the missing code itself: HIP ran a
        # kernel for another chip (a library that loaded the nearest code object) or none at all
        # (a hang that names the firmware scheduler (MES) is the firmware's: it does not settle missing code)
        own_faults = [e for e in faults if not re.search(r"(?i)\bMES\b|firmware", e.line)]
        settled = bool(own_faults) and ctx.override() is None and where is not None and where.detail != "list" and \
            bool(arch and override_for_arch(arch)) and _needs_other_code(arch)
        said_so = [ctx.override()] if ctx.override() is not None else \
            [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]
        errors, confirmed = symptoms or _symptom_lines(ctx, said_so), settled
    tool = ctx.tool(errors)
    newer = _toolkit_newer_than_driver(ctx, errors)
    if newer is not None:
        return newer
    if arch is None and ctx.sheet.is_windows and tool in ("ollama", "rocblas", "zluda", "comfyui", "a1111", "torch",
                                                          "llama.cpp", None):
        return _make("arch-missing", "Windows: the HIP SDK's libraries have no code for this GPU",
                     "on Windows HSA_OVERRIDE_GFX_VERSION does not reach the HIP SDK's rocBLAS, which carries only the "
                     "GPUs AMD lists", "find the GPU's gfx target (hipinfo, or the tool's log), then put a rocblas.dll "
                     "and rocblas/library built for it (or for a sibling arch) in place of the SDK's / the program's own",
                     [], errors, confirmed=False)
    if arch is None and errors and _vendor(ctx) != "amd" and re.search(
            r"(?i)\bcuda error\b.{0,20}no kernel image", " ".join(e.line for e in errors)) or \
            arch is None and errors and _vendor(ctx) != "amd" and not re.search(r"(?i)\b(?:rocm|hip|gfx\w*|radeon|amd)\b",
                                                                                 _text(ctx)) and \
            any("no kernel image" in e.line for e in errors):
        # CUDA's own message, in a paste that names neither vendor nor any ROCm word: the NVIDIA reading
        ggml = tool_builds().get(tool or "")
        if tool in ("llama.cpp", "llama-cpp-python", "whisper.cpp", "stable-diffusion.cpp") and ggml and ggml.cuda:
            # a ggml program's own build lacks the compute capability (no GPU named, so the number is read first)
            return _make("arch-missing", f"{ggml.name} built without kernels for this NVIDIA GPU",
                         f"{ggml.name}'s CUDA backend was compiled for other compute capabilities than the GPU's",
                         "read the GPU's compute capability: nvidia-smi --query-gpu=name,compute_cap --format=csv "
                         "(8.6 is 86); " + ggml.cuda.format(cc="<86>", cc_dot="<8.6>", sm="sm_<86>", cu="cu128") +
                         " (a Blackwell GPU, 12.0, needs CUDA 12.8 or newer)", [], errors, confirmed=False)
        return _make("arch-missing", "a torch without kernels for this NVIDIA GPU",
                     "the installed torch (or extension) was built for other compute capabilities than the GPU's",
                     "find the GPU's compute capability (nvidia-smi --query-gpu=name,compute_cap --format=csv) and "
                     "install a torch whose CUDA build carries it: pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu118 (Maxwell to Hopper), .../whl/cu128 for Blackwell (sm_120); "
                     "an old GPU (Kepler, compute capability 3.x) needs an old torch or a source build",
                     [], errors, confirmed=False)
    own = tool_builds().get(tool or "")
    if arch is None and own is not None and own.rocm and tool not in ("torch", "torchvision") and \
            _vendor(ctx) == "amd" and not ctx.sheet.is_windows:
        # a program that compiles its own GPU code (a ggml build, an MLC model library) failing on an AMD GPU the
        # paste does not name: its own rebuild is the fix, for the target rocminfo names (an override would only
        # make the runtime ask for another target the library does not carry either)
        return _make("arch-missing", f"{own.name} was built without this GPU's target",
                     f"{own.name}'s GPU code was compiled for other gfx targets than this GPU's; the paste does not "
                     "say which GPU it is", own.rocm.format(arch="<the GPU's gfx target from rocminfo>"), [], errors,
                     confirmed=False)
    if arch is None and errors and all(e.catalogue is not None and e.catalogue.entry.id in _OWN_FIX_ENTRIES
                                       for e in errors):
        return None   # messages whose catalogue entry names their own remedy (Ollama's override, hipBLASLt's switch)
    if arch is None:
        cls = family("arch-missing")
        return _make("arch-missing", "code built without this GPU's architecture",
                     f"{tool or 'the program'} has no code for the GPU it runs on; the paste does not say which GPU",
                     f"find the arch ({cls.next}); for a GPU the build lacks but whose sibling it carries, set the "
                     f"override: {_OVERRIDE_TABLE}; else rebuild for the arch", [], errors, confirmed=False)
    if ctx.override() is not None and errors and not ctx.sheet.is_windows:
        value = ctx.override().value.split("=", 1)[1]
        if _target(value) and _family_of(_target(value)) == _family_of(arch) and tool not in ("llama.cpp",):
            # the override is right and in force, so it is the library itself that lacks even the sibling's code
            line = _own_build(tool, arch, ctx) or wheel_line(arch) or (
                f"check that the override reaches the process (python -c 'import os; print(os.environ.get("
                f"\"{OVERRIDE}\"))' in the same environment), then use a build with {_target(value)} code: "
                f"{rocm_index_for(arch)}")
            return _make("arch-missing", f"{tool or 'a library'} has no code for {arch} even with the override",
                         f"{OVERRIDE}={value} is in force, and the code that failed was built without {_target(value)} "
                         f"and {arch}", line, [where, ctx.override()], errors)
    if ctx.sheet.is_windows and tool == "ollama" and arch in ctx.sheet.values("built_for") and \
            OVERRIDE in _text(ctx):
        # the Ollama build in use is said to ship this arch's libraries (ollama-for-amd's per-arch rocBLAS) beside an
        # override in the environment: the leftover override's reading (overrides.py), not missing code
        return None
    return _make("arch-missing", f"{tool or 'the build'} has no code for {arch}",
                 _arch_cause(arch, tool, ctx), _arch_fix(arch, tool, ctx), [where, ctx.line_fact(errors[0])], errors,
                 confirmed=confirmed)


def _arch_cause(arch: str, tool: Optional[str], ctx: Context) -> str:
    name = {"ollama": "Ollama's ROCm runner", "llama.cpp": "llama.cpp's HIP build", "rocblas": "rocBLAS (Tensile)",
            "bitsandbytes": "bitsandbytes' library", "torch": "this torch build"}.get(tool or "", tool or "the build")
    built = [b for b in ctx.sheet.values("built_for") if b != arch]
    listed = f" (it lists {', '.join(built[:8])}{'...' if len(built) > 8 else ''})" if built else ""
    return f"{name} carries no code for {arch}{listed}"


def _past_the_release_said(fix: str, tool: Optional[str], ctx: Context) -> str:
    """A tool's own fix that says to update it, in the paste's values: the release after the one the paste names
    ("Ollama version: 0.11.11" -> 0.12 or later), since the code the GPU needs came in a later release."""
    name = tool_builds()[tool].name if tool in tool_builds() else None
    said = re.search(rf"(?i)\b{re.escape(name)}\b(?: version)?\W{{0,3}}v?(\d+)\.(\d+)\.(?:\d+|x)\b",
                     _text(ctx)) if name else None
    if not said or not fix.lower().startswith(f"update {name.lower()}"):
        return fix
    major, minor = said.group(1), int(said.group(2))
    return fix.replace(f"update {name}", f"update {name} past {said.group(0).split()[-1].lstrip('v')} "
                                         f"({major}.{minor + 1} or later)", 1)


# a hosted notebook whose image ships one torch and whose user picks the GPU from a short list (Kaggle's accelerator
# setting or machine_shape, Colab's runtime type); both offer the T4 (sm_75), which every current CUDA build carries
_HOSTED = re.compile(r"(?i)\bkaggle\b|\bcolab\b|machine_shape")


def _hosted_accelerator(ctx: Context, arch: str, fix: str) -> str:
    """On Kaggle or Colab a GPU the image's torch left out (Pascal's P100 under a cu128 torch: torch 2.8 and newer)
    is best changed for the T4 the platform offers (Kaggle's maintainer on kaggle-cli#1151: request a T4 instead, or
    install a Pascal-capable torch yourself); the legacy build stays the second way."""
    m = re.fullmatch(r"sm_(\d+)", arch)
    if not m or int(m.group(1)) > 70 or not _HOSTED.search(_text(ctx)):
        return fix
    where = ("Kaggle: the notebook's Accelerator setting, or machine_shape \"NvidiaTeslaT4\" in kernel-metadata.json"
             if re.search(r"(?i)\bkaggle\b|machine_shape", _text(ctx)) else
             "Colab: Runtime > Change runtime type > T4 GPU")
    return (f"switch the notebook to a T4 accelerator ({where}): the T4 is sm_75, which the image's torch carries; "
            f"or keep this GPU and {fix}")


def _arch_fix(arch: str, tool: Optional[str], ctx: Context) -> str:
    sheet = ctx.sheet
    # (torchvision named beside it on a Jetson: its pytorch.org build is no answer there either)
    if arch.startswith("sm_") and tool in ("torch", "torchvision", "torchaudio", None) and _jetson(ctx, arch):
        # the board's own compute capability (NVIDIA's CUDA GPUs page: Nano 5.3, TX2 6.2, Xavier 7.2, Orin 8.7), which
        # a torch built on the board must be given (r18d: jetson-inference#812, PyTorch 1.6 rebuilt for the Xavier)
        board = next((f.detail for f in ctx.sheet.of("gpu") if re.search(r"(?i)Jetson|Xavier|Orin|Tegra", f.value)),
                     arch)   # the board named wins over a capability a sentence compares it with
        own = (f" (this board's GPU is {board}: a torch built from source on it takes TORCH_CUDA_ARCH_LIST="
               f"{board[3:-1]}.{board[-1]})" if re.fullmatch(r"sm_\d\d", board) else "")
        return ("the pytorch.org wheels carry no Jetson GPU code: install NVIDIA's torch built for this JetPack (the "
                "wheel for its JetPack release from NVIDIA's 'Installing PyTorch for Jetson Platform' page, or the "
                "Jetson AI Lab pip index), or use an NVIDIA L4T PyTorch container (nvcr.io/nvidia/l4t-pytorch)" + own)
    if arch.startswith("sm_"):
        # the tool that failed carries its own kernels: its wheel or build flag is the fix, not torch's index
        # (unless the torch underneath lacks the GPU too: that comes first, the extension is rebuilt against it)
        own = build_fix(tool, arch) if tool not in ("torch", None) and not _wheel_lacks(arch, ctx) else None
        if own:
            return _past_the_release_said(own, tool, ctx)
        # a build of the user's own (an extension, a CMake or cargo project): its knob, for every GPU it runs on
        fix = rebuild_for(ctx, arch) or _cuda_index_for_driver(ctx, arch)
        return _hosted_accelerator(ctx, arch, fix)
    value, caveat = override_value(arch, tool)
    if sheet.has("layout", "therock"):
        return (f"the multi-arch torch wheel carries no GPU kernels by itself: install its device package from the same "
                f"index, pip install \"torch[device-{arch}]\" (it pulls amd-torch-device-{arch})")
    if sheet.is_windows and tool == "zluda":
        return build_fix(tool, arch, windows=True) or ""
    if sheet.is_windows and tool in ("rocblas", "ollama", "zluda", "comfyui", "a1111", "torch", "llama.cpp", "koboldcpp",
                                     "llama-cpp-python", "whisper.cpp", None):
        rocm = sheet.values("rocm")
        sdk = f"HIP SDK {rocm[0]}" if rocm else "the HIP SDK"
        # the community's builds of these files: likelovewant's ROCmLibs releases (github.com/likelovewant/
        # ROCmLibs-for-gfx1103-AMD780M-APU, per arch and HIP SDK release; named in the ollama-for-amd and ROCmLibs
        # threads of the training cases, round 20 r20a)
        libraries = (f"put a rocblas.dll and rocblas/library built for {arch} (for {sdk}) into the SDK's bin folder "
                     f"(the program's own lib folder where it bundles them, as Ollama's lib\\ollama does; community "
                     f"builds per arch and SDK release: likelovewant's ROCmLibs-for-gfx1103-AMD780M-APU releases), "
                     f"or use a build of the program that bundles {arch} kernels")
        if tool == "ollama" and value:
            return (f"set {OVERRIDE}={value} as a Windows user variable (setx {OVERRIDE} {value}), quit Ollama from "
                    f"the tray and start it again ({arch} then runs {_target(value)} code); where the HIP SDK's "
                    f"rocBLAS still has no code for {arch}: {libraries}; or run the card through Ollama's Vulkan backend "
                    f"instead of ROCm (experimental in the releases after 0.12.6, whose Vulkan was source-only, with "
                    f"OLLAMA_VULKAN=1 set as a user variable: setx OLLAMA_VULKAN 1, on by default in later releases; "
                    f"Ollama's GPU page)")
        return f"on Windows the override does not apply to the HIP SDK's libraries ({arch}): {libraries}"
    if tool in _REBUILT_FIRST:
        # the tool's own build carries the GPU code: rebuilding it for the arch is the fix that lasts, the override the
        # quick one where a sibling's code runs
        line = _own_build(tool, arch, ctx)
        return line + (f"; or run it with {OVERRIDE}={value}{caveat}" if value else "")
    if value:
        fix = set_variable(OVERRIDE, value, sheet, tool) + f" ({arch} runs {_target(value)} code){caveat}"
        if tool == "torch" or tool is None:
            wheel = wheel_line(arch)
            if wheel:
                fix += f"; or a torch that has {arch} itself: {wheel}"
        elif tool in tool_builds() and tool not in _OVERRIDE_ONLY:
            fix += f"; or give {tool_builds()[tool].name} code for {arch} itself: {build_fix(tool, arch)}"
        return fix
    rebuild = _own_build(tool, arch, ctx)
    row = arch_info(arch)
    if rebuild and tool in _ROCM_LIBRARIES and row and row.override.value and row.override.verdict in ("trap", "unverified"):
        # a ROCm library asked for a card it has no kernels for: the sibling's code is the stopgap its maintainers
        # name, with what it costs (the table's caveat), after the build that lasts
        return (f"{rebuild}; unsupported stopgap: {OVERRIDE}={row.override.value} (runs {_target(row.override.value)} "
                f"code on {arch}; {row.override.why})")
    if rebuild:
        return rebuild
    wheel = wheel_line(arch)
    if wheel:
        return f"{wheel} (a build with {arch} code)"
    era = _rocm_of_its_era(ctx, arch) if _is_old_gfx(arch) else None
    if era and tool in ("torch", None):
        # that ROCm's libraries still built the arch; only the published torch wheels left it out
        return (f"the torch wheels for {era} carry no {arch} code, though that ROCm still built it: build torch from "
                f"source for it (PYTORCH_ROCM_ARCH={arch} python setup.py install, with rocBLAS and rocRAND of that "
                f"ROCm built for {arch}: -DAMDGPU_TARGETS={arch}), or use a community build for {arch}")
    row = arch_info(arch)
    return f"no build carries {arch}" + (f": {row.note}" if row and row.note else "") + \
        "; use the Vulkan backend where the tool has one (llama.cpp -DGGML_VULKAN=ON)"


# tools whose own build is the lasting fix even where an override would run a sibling's code
_REBUILT_FIRST = ("lmstudio", "llama.cpp", "llama-cpp-python", "whisper.cpp", "stable-diffusion.cpp", "bitsandbytes", "vllm", "sglang", "flash-attn",
                  "xformers", "deepspeed", "apex")
# ROCm's own libraries, asked for an arch they ship no kernels for
_ROCM_LIBRARIES = ("rocblas", "hipblaslt", "miopen", "rccl")
# catalogue entries (round 15) whose fix is more specific than the generic "find the arch" line when no arch is known
_OWN_FIX_ENTRIES = frozenset({"rocm-hsa-illegal-instruction", "rocm-hipblas-not-supported", "rocm-ollama-override-hint",
                               "rocm-hip-init-invalid-device"})
# tools whose entry in arch_builds.yaml says the override itself (adding it again after the override says nothing)
_OVERRIDE_ONLY = ("ollama",)


def _own_build(tool: Optional[str], arch: str, ctx: Context) -> Optional[str]:
    """The failing tool's own way to get code for the arch: its entry in arch_builds.yaml, else the rebuild flags
    fixes.py knows for the ROCm libraries."""
    return build_fix(tool, arch, ctx.sheet.is_windows) or rebuild_line(tool, arch)
