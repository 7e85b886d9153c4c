"""The targets a source build or an SDK carries: a CMake default target list that omits the GPU, a ROCm library's
sources that lack the target, and a Windows GPU AMD lists for the HIP runtime but not the HIP SDK.

These rules register after gpu_unsupported (the registration order breaks ties between diagnoses), so the
arch-missing one among them stays here rather than beside its family in arch_missing.py."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.archs import build_fix
from steadytune.hardware.gpu_facts import arch_info
from steadytune.doctor.rules.arch.overrides import _target
from steadytune.doctor.rules.base import (
    NOT_TORCH,
    Context,
    Diagnosis,
    _lines_matching,
    _make,
    on_windows,
    rule,
    _text,
)


# A source build whose default target list leaves the GPU out: the user read the CMake list (or saw an arch dropped
# from it) and names their GPU's arch; the project still builds for it when the list is given on the command line
_CMAKE_TARGET_LIST = re.compile(r"(?i)\b(?:GPU_TARGETS|AMDGPU_TARGETS|CMAKE_CUDA_ARCHITECTURES|CMAKE_HIP_ARCHITECTURES|"
                          r"TORCH_CUDA_ARCH_LIST)\b|\b(?:list of (?:gpu |supported )?(?:targets|archs|architectures)|"
                          r"(?:gpu |build )?targets? list|default (?:gpu )?targets)\b")
_OMITTED = re.compile(r"(?i)\b(?:removed|dropped|limited to|no longer|not (?:in|included|listed|built)|missing|"
                       r"left out|excluded|only (?:builds?|for))\b|移除|去掉|不包含")
_CC_IN_BUILD = re.compile(r"(?i)compute capability\D{0,12}(\d{1,2})\.(\d)\b|\bsm_?(\d{2,3})\b")
_CUDA_ARCHS_SET = re.compile(r"CMAKE_CUDA_ARCHITECTURES\W{1,4}\"?((?:\d{2,3}[a-z]?;)+\d{2,3}[a-z]?)")


@rule("arch-missing")
def build_target_list(ctx: Context) -> Optional[Diagnosis]:
    """A project built from source (CMake) whose default GPU target list omits the user's GPU: a default, not a limit;
    naming the arch in the configure step (GPU_TARGETS for ROCm projects, CMAKE_CUDA_ARCHITECTURES for CUDA) builds
    its code."""
    listed = _lines_matching(ctx, _CMAKE_TARGET_LIST.pattern)
    text = _text(ctx)
    if not listed or not _OMITTED.search(text):
        return None
    gfx = re.search(r"(?i)\b(gfx\d{3,4}[a-z]?)\b", text)
    cc = _CC_IN_BUILD.search(text)
    if gfx and not re.search(r"(?i)CMAKE_CUDA_ARCHITECTURES|TORCH_CUDA_ARCH_LIST", text):
        arch = gfx.group(1).lower()
        hip = "CMAKE_HIP_ARCHITECTURES" if "CMAKE_HIP_ARCHITECTURES" in text else "GPU_TARGETS"
        return _make("arch-missing", f"the build's default target list leaves out {arch}",
                     f"the project's CMake default GPU target list does not include {arch}, so a default build carries "
                     "no code for it (the GPU may still be supported when named explicitly)",
                     f"configure with the arch named: cmake -D {hip}=\"{arch}\" ... (older projects read "
                     f"AMDGPU_TARGETS=\"{arch}\"; keep any feature switch the arch needs, e.g. composable_kernel's "
                     "-D DL_KERNELS=ON), rebuild, and check the library lists it (roc-obj-ls or the build log)",
                     [], listed)
    if cc is None:
        return None
    number = f"{cc.group(1)}{cc.group(2)}" if cc.group(1) else cc.group(3)
    present = _CUDA_ARCHS_SET.findall(text)   # the last list set: CMake files set the default in their else branch
    archs = sorted({number, *present[-1].split(";")}, key=lambda a: int(re.sub(r"\D", "", a))) if present \
        else [number]
    return _make("arch-missing", f"the build's default CUDA architectures leave out compute capability {number}",
                 f"the CMake default list of CUDA architectures starts above sm_{number}, so the build carries no "
                 "code for this GPU and its kernels cannot launch on it",
                 f"configure with the GPU's architecture in the list: cmake -DCMAKE_CUDA_ARCHITECTURES=\""
                 f"{';'.join(archs)}\" ... (TORCH_CUDA_ARCH_LIST=\"{number[:-1]}.{number[-1]}\" for a torch "
                 "extension), and rebuild; check the CUDA toolkit still compiles for it (CUDA 12 dropped compute 3.x)",
                 [], listed)


# a ROCm library's own sources failing to compile for one target: its per-arch definitions (buffer-resource
# constants, instruction selections) exist only for the archs it supports, so an identifier is undeclared or the
# target unknown "while compiling for" the one it does not
_COMPILES_FOR = re.compile(r"(?i)(?:undeclared identifier|use of undeclared|unknown (?:target|processor)|unsupported "
                           r"(?:target|processor|arch\w*)|not (?:a )?supported (?:target|arch\w*)).{0,120}?\b(gfx\d{2,4}[a-z]?)\b")
_LIBRARY_BUILT = re.compile(r"(?i)\b(composable[_ ]kernel|rocBLAS|hipBLASLt|MIOpen|rocWMMA|rocFFT|hipSPARSELt|Tensile|"
                           r"aotriton|RCCL)\b|\bCK_\w+")


@rule("gpu-unsupported")
def library_sources_lack_the_target(ctx: Context) -> Optional[Diagnosis]:
    """A source build of a ROCm library whose compile fails for one GPU target with an identifier undeclared or the
    target unknown: the library does not support that arch; the remedy is to leave it out of the targets."""
    failed = _lines_matching(ctx, _COMPILES_FOR.pattern)
    text = _text(ctx)
    library = _LIBRARY_BUILT.search(text)
    if not failed or not library:
        return None
    arch = _COMPILES_FOR.search(failed[0].line).group(1).lower()
    name = "composable_kernel" if library.group(0).upper().startswith(("CK_", "COMPOSABLE")) else library.group(1)
    return _make("gpu-unsupported", f"{name} does not support {arch}",
                 f"{name}'s sources define their per-architecture constants only for the GPUs it supports; compiling "
                 f"them for {arch} finds none, so the build fails for that target",
                 f"{arch} is not supported by {name}: remove it from the build's targets (-D GPU_TARGETS=\"<only the "
                 f"supported archs you need>\") and build {name} only for supported architectures; for a {arch} "
                 "machine use the packaged library of a ROCm release, or a backend that runs on it",
                 [], failed)


# a ROCm library's packaged kernel folder looked through (ls /opt/rocm/lib/rocblas/library | grep 110), and the
# user's words that the GPU's files are not there
_LIBRARY_FOLDER = re.compile(r"(?i)\b(?:rocblas|hipblaslt|miopen|rocsparse|rocfft)\w*[/\\]library\b|TensileLibrary")
_NOT_THERE = re.compile(r"(?i)\bnot (?:include[sd]?|there|listed|in (?:the|it))\b|\bcan(?:'t|not) (?:find|see)\b|"
                        r"\b(?:is |are )?missing\b|\bno (?:files?|kernels?|\.?dat|\.co|\.hsaco)\b|没有|找不到")


@rule("gpu-unsupported")
def packaged_libraries_lack_the_target(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm release's packaged libraries searched for the GPU's kernel files, which are not there: the release does
    not support the GPU (its libraries are built for the GPUs on its support list only; a component's release note
    naming the arch is not the stack's support)."""
    if any(e.family is not None for e in ctx.errors) or not _lines_matching(ctx, _LIBRARY_FOLDER.pattern):
        return None
    rocm = ctx.sheet.values("rocm")
    if not rocm or ctx.crashes() or ctx.tool() in NOT_TORCH:
        return None   # a release named and looked through; an app's own bundle (Ollama's rocblas) that crashes is
                      # that bundle lacking a sibling's file, arch_missing.py's reading
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    if not archs:
        return None
    arch = archs[0]
    digits = arch[3:]
    lacking = [line for line in _lines_matching(ctx, _NOT_THERE.pattern) if digits in line.line][:1]
    if not lacking:
        return None
    release = f"ROCm {rocm[-1]}"
    row = arch_info(arch)
    stopgap = (f"; the unsupported stopgap is HSA_OVERRIDE_GFX_VERSION={row.override.value}, which runs "
               f"{_target(row.override.value)} code on {arch}"
               + (f" ({row.override.why})" if row.override.verdict != "works" else "")
               if row and row.override.value else "")
    return _make("gpu-unsupported", f"{release} does not support {arch}",
                 f"{release}'s libraries (rocBLAS/Tensile and the rest) are built only for the GPUs on its support "
                 f"list; {arch} is not on it, so no {arch} kernel files ship (a component's note naming {arch} is not "
                 "the stack's support)",
                 f"{arch} is not supported by {release}: use a GPU on its support list, or libraries built for {arch} "
                 f"(a community rocBLAS build for {arch}, or a later release that lists it){stopgap}",
                 [f for f in ctx.sheet.of("arch") if f.value == arch][:1], lacking, confirmed=False)


# HIP's "invalid" errors for code the GPU cannot load (invalid device function, invalid resource handle, invalid image),
# or the user's own words for them ("HIP reports an Invalid error")
_HIP_INVALID = re.compile(r"(?i)\bhip\w*\b[^\n]{0,60}\binvalid\b|\binvalid\b[^\n]{0,40}\bhip\w*\b|hipErrorInvalid\w+")


@rule("arch-missing")
def hip_invalid_on_an_unbuilt_arch(ctx: Context) -> Optional[Diagnosis]:
    """A HIP "invalid" error from a program (not torch) on a GPU whose arch is newer than most builds' default target
    lists: the program's kernels were compiled without the arch (a CMake default list made before the GPU), so HIP
    finds no code it can launch."""
    if any(e.family is not None for e in ctx.errors) or ctx.tool() is not None:
        return None
    said = _lines_matching(ctx, _HIP_INVALID.pattern)[:1]
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    if not said or not archs:
        return None
    arch = archs[0]
    return _make("arch-missing", f"the program's kernels lack {arch}",
                 f"HIP reports its kernels invalid when the binary carries no code object for the GPU ({arch}); a "
                 f"build's default GPU target list made before {arch} leaves it out",
                 f"rebuild the program with {arch} among its GPU targets (cmake -DGPU_TARGETS={arch}, or "
                 f"AMDGPU_TARGETS={arch} / hipcc --offload-arch={arch}), or a release or branch whose default targets "
                 f"list {arch}; check with roc-obj-ls <binary> that a {arch} code object is in it",
                 [f for f in ctx.sheet.of("gpu") if f.detail == arch][:1], said, confirmed=False)


# AMD's Windows support table gives each GPU two columns: the HIP runtime, and the HIP SDK (its math libraries,
# rocBLAS, MIOpen, ...). A GPU with the runtime only runs HIP programs that bring their own kernels, not the SDK's
_RUNTIME_NOT_SDK = re.compile(r"(?i)\b(?:hip )?runtime\b.{0,40}\bbut not (?:the )?(?:hip )?sdk\b|\bnot (?:in|on|by) the "
                              r"(?:hip )?sdk\b|\bruntime[- ]only\b.{0,40}\bsdk\b|\bsdk support\b.{0,60}\bwindows\b|"
                              r"\bwindows\b.{0,60}\bsdk support\b")


@rule("gpu-unsupported")
def windows_runtime_only(ctx: Context) -> Optional[Diagnosis]:
    """A Windows GPU that AMD lists for the HIP runtime but not the HIP SDK, said by the user: the SDK's libraries are
    not built or validated for it."""
    said = _lines_matching(ctx, _RUNTIME_NOT_SDK.pattern)
    text = _text(ctx)
    gfx = re.search(r"(?i)\b(gfx\d{2,4}[a-z]?)\b", text)
    if not said or not gfx or not on_windows(ctx, text):
        return None
    arch = gfx.group(1).lower()
    return _make("gpu-unsupported", f"{arch} has the Windows HIP runtime but not the HIP SDK",
                 f"AMD lists {arch} for the HIP runtime on Windows only: the HIP SDK's libraries (rocBLAS, MIOpen, "
                 "hipBLASLt) are not built or validated for it",
                 f"{arch} is not supported by the Windows HIP SDK: use a GPU on the HIP SDK's support list, or build "
                 f"the libraries you need for {arch} yourself (community rocBLAS builds exist), or run under Linux "
                 "ROCm where the card is covered",
                 [], said, confirmed=False)


# A tool's source that picks its code path by a list of arch macros ("#if defined(__gfx1150__) || defined(__gfx1151__)"
# for RDNA3.5) and leaves the GPU's arch out: the arch runs the generic (or a wrong) path though its family's code
# would run; the user names the missing test or says which family the arch belongs to
_ARCH_MACRO = re.compile(r"(?i)defined\s*\(\s*__(gfx\d{3,4}[a-z]?)__\s*\)|\b(gfx\d{3,4}[a-z]?) is (?:also )?(?:an? )?"
                         r"(?:RDNA ?\d(?:\.\d)?|CDNA ?\d|GCN ?\d)\b")


@rule("arch-missing")
def arch_left_out_of_a_source_list(ctx: Context) -> Optional[Diagnosis]:
    """An arch left out of the arch-macro list a tool's source tests: its release treats the GPU as another family
    (wrong or slow results, or no kernels); a release whose list has it, or the test extended and a rebuild, fixes it."""
    lines = _lines_matching(ctx, _ARCH_MACRO.pattern)
    if not lines:
        return None
    found = _ARCH_MACRO.search(lines[0].line)
    arch = (found.group(1) or found.group(2)).lower()
    tool = ctx.tool()
    name = {"llama.cpp": "llama.cpp", "ollama": "Ollama", "vllm": "vLLM"}.get(tool or "", tool or "the tool")
    rebuild = build_fix(tool, arch) or f"rebuild it for {arch} (its HIP build with {arch} among the targets)"
    return _make("arch-missing", f"{name}'s source leaves {arch} out of its arch list",
                 f"{name} chooses its code paths by a list of gfx macros that does not name {arch}, so the {arch} GPU "
                 "takes another family's path",
                 f"update {name} to a release whose arch list includes {arch} (the fix adds || defined(__{arch}__) to "
                 f"that test), or add it yourself and {rebuild[0].lower() + rebuild[1:]}", [], lines[:1],
                 confirmed=False)


# the two names a ROCm CMake build takes its GPU targets under: older ROCm CMake configs (hip-config) read
# AMDGPU_TARGETS, newer ones GPU_TARGETS first (ROCm's CMake docs deprecate AMDGPU_TARGETS; llama.cpp's ggml-hip
# CMakeLists forwards one to the other); a name the installed ROCm or project does not read builds no code for the card
_TARGET_VARIABLE = re.compile(r"\b(?:AMD)?GPU_TARGETS\b")
_BUILD_TROUBLE = re.compile(r"(?i)\bcrash\w*|\bfail\w*|\berror\w*|segfault|out of memory|not (?:work|honou?r|respect|"
                            r"used|read)\w*|ignor\w*")


@rule("arch-missing")
def target_variable_not_read(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm CMake build given its targets under one name, with the result failing: the targets may not have reached
    the compiler at all; giving them under both names settles it whichever the ROCm and project read."""
    said = [line for line in _lines_matching(ctx, _TARGET_VARIABLE.pattern) if _BUILD_TROUBLE.search(line.line)]
    if not said or re.search(r"(?i)\bgfx\d", _text(ctx)):   # an arch named is build_target_list's reading
        return None
    return _make("arch-missing", "the GPU targets may not have reached the HIP build",
                 "a ROCm CMake build takes its GPU targets as AMDGPU_TARGETS (older ROCm CMake configs) or GPU_TARGETS "
                 "(newer ones); under a name this ROCm or project does not read, the build carries no kernels for the "
                 "card and fails at run time",
                 "configure again with the targets under both names: -DAMDGPU_TARGETS=<gfx...> -DGPU_TARGETS=<gfx...> "
                 "(the GPU's arch from rocminfo | grep -m1 -o 'gfx[0-9a-f]*'), from an empty build folder; the "
                 "compile lines' --offload-arch= must show it", [], said[:1], confirmed=False)
