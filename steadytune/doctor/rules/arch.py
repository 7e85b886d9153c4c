"""Rules about code for the GPU: the arch missing from a build (and the override or rebuild that brings it), a
wrong override, and a GPU outside every build."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.archs import build_fix, tool_builds
from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.facts import discrete_archs
from steadytune.doctor.fixes import INFERENCE_TOOLS, override_value, rebuild_line, rocm_index_for, set_variable, \
    wheel_line
from steadytune.hardware.gpu_facts import OFFICIAL_WHEEL_ARCHS, arch_info, first_stable_wheel, lookup_product, \
    normalise_gfx, override_for_arch
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
    on_windows,
    OVERRIDE,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)


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


def _windows_ollama_leftover(ctx: Context) -> Optional[Diagnosis]:
    """Ollama on Windows (and the ollama-for-amd builds that ship rocBLAS per arch) refusing the GPU with an empty
    list of supported types, or while an override sits in the Windows environment: the override is what makes it
    reject the card; the Windows runner does not borrow a sibling's code the way Linux's does."""
    if not ctx.sheet.is_windows and not re.search(r"\bwsarecv\b|\.exe\b|AppData", _text(ctx)):
        return None
    if ctx.tool() != "ollama":
        return None
    empty = _lines_matching(ctx, r"amdgpu is not supported \(supported types:\s*\[\]\)")
    leftover = ctx.override() is not None or bool(re.search(r"(?i)system environment variables?|environment variables? "
                                                             r"(?:for|of) (?:the )?(?:system|user)", _text(ctx)))
    refused = empty or ctx.of("arch-missing") or [f for f in ctx.sheet.of("complaint") if f.value == "yes"] or \
        _lines_matching(ctx, r"(?i)(?:last|latest|newer|older) version .{0,40}support")
    if not (empty or (leftover and refused)):
        return None
    arch, where = ctx.arch(ctx.errors)
    lines = empty or _lines_matching(ctx, r"(?i)environment variable|HSA_OVERRIDE_GFX_VERSION") or []
    return _make("override-wrong", f"a {OVERRIDE} left in the Windows environment makes Ollama reject the GPU",
                 "on Windows Ollama's ROCm runner uses the rocBLAS libraries it ships for each arch; an override in "
                 "the user or system environment makes it check the GPU as another chip and turn it down",
                 f"remove {OVERRIDE} from the Windows environment (System Properties > Environment Variables, user "
                 f"and system; or in PowerShell [Environment]::SetEnvironmentVariable(\"{OVERRIDE}\", $null, "
                 "\"User\") and the same with \"Machine\" as administrator), quit Ollama from the tray and start it "
                 f"again; for {arch or 'a GPU AMD does not list'} use a build that ships its rocBLAS libraries "
                 "(ollama-for-amd)", [where] if where else [], lines, confirmed=bool(empty))


@rule("override-wrong")
def override_wrong(ctx: Context) -> Optional[Diagnosis]:
    leftover = _windows_ollama_leftover(ctx)
    if leftover is not None:
        return leftover
    # "export HSA_OVERRIDE_GFX_VERSION = 10.3.0": the shell reads three words, sets nothing ("not a valid identifier")
    # (a line that starts with the name alone is that only where the shell complained: prose writes "X = 10.3.0" too)
    spaced = re.search(r"(?m)^\W{0,3}(export\s+|set\s+)?" + OVERRIDE + r"\s+=\s*[\"']?(\d+\.\d+\.\d+)", _text(ctx))
    if spaced and (spaced.group(1) or "not a valid identifier" in _text(ctx) or "command not found" in _text(ctx)):
        lines = _lines_matching(ctx, OVERRIDE + r"\s+=|not a valid identifier")
        return _make("override-wrong", f"{OVERRIDE} was never set (spaces around =)",
                     f"a shell assignment takes no spaces around '='; written with them, the shell sets nothing (bash: "
                     f"\"not a valid identifier\"), so the runtime never sees {OVERRIDE}",
                     f"write it without spaces: export {OVERRIDE}={spaced.group(2)} (then check with echo "
                     f"${OVERRIDE} in the same shell)", [], lines)
    # a quoted message where the version belongs: a script's detection failed and wrote its error into the variable
    garbage = re.search(OVERRIDE + r"\s*:?=\s*\"([A-Za-z][^\"\n]* [^\"\n]*)\"", _text(ctx))
    if garbage:
        arch, _ = ctx.arch([])
        value = override_for_arch(arch) if arch else None
        lines = _lines_matching(ctx, OVERRIDE)
        return _make("override-wrong", f"{OVERRIDE} holds text, not a version",
                     f"{OVERRIDE} is set to \"{garbage.group(1).strip()}\" (a script's message, not a gfx version): "
                     "the runtime cannot use it",
                     (f"set it to the version for {arch}: {OVERRIDE}={value}" if value else
                      f"set it to a version (X.Y.Z) or unset it: {_OVERRIDE_TABLE}"), [], lines)
    setting = ctx.override()
    if setting is None:
        return None
    value = setting.value.split("=", 1)[1]
    symptoms = ctx.of("gpu-hang", "override-wrong", "arch-missing") + ctx.crashes()
    archs = discrete_archs(ctx.sheet)
    target = _target(value)
    tool = ctx.tool(symptoms)
    if target is None:
        # the GPU, not the gfx name the user wrote into the variable ("=gfx1030" is read as an arch too)
        gpus = [a for a in archs if any(f.value == a and f.line_no != setting.line_no for f in ctx.sheet.of("arch"))]
        arch = gpus[0] if gpus else None
        good = override_value(arch, tool)[0] if arch else None
        written = re.fullmatch(r"(?i)gfx\w+", value.strip("\"'"))
        if not good and written and not (arch and arch in OFFICIAL_WHEEL_ARCHS):
            good = _version_of(written.group(0).lower())   # the version form of the target they meant
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


def _blackwell_build(ctx: "Context") -> Optional[str]:
    """The CUDA (12.8 or newer) of the torch the paste installed: its +cuNNN tag or the index it came from
    (download.pytorch.org/whl/[nightly/]cu128)."""
    build = _cuda_build(ctx)
    if build and build >= (12, 8):
        return f"{build[0]}.{build[1]}"
    found = re.findall(r"download\.pytorch\.org/whl/(?:nightly/|test/)?cu(\d{2})(\d)\b", "\n".join(ctx.sheet.lines))
    index = [(int(a), int(b)) for a, b in found if (int(a), int(b)) >= (12, 8)]
    return f"{index[-1][0]}.{index[-1][1]}" if index else None


def _companion_build(ctx: "Context") -> Optional[tuple[str, tuple[int, int]]]:
    """torchvision / torchaudio with a +cuNNN tag of its own (pip list, collect_env): (name, its CUDA)."""
    found = re.search(r"\b(torchvision|torchaudio)[\s=:-]+[\d.]+\+cu(\d{2})(\d)\b", "\n".join(ctx.sheet.lines))
    return (found.group(1), (int(found.group(2)), int(found.group(3)))) if found else None


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
    early = _runtime_predates_gpu(ctx) or _built_for_other_targets(ctx)
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


# The first NCCL release that runs collectives on each Blackwell arch: 2.25.1 added sm_100; the consumer chips (sm_120:
# RTX 50xx, RTX PRO 6000) have less shared memory per block than 2.25 asks for ("ncclMaxSharedMem 82240 exceeds
# device/fn maxSharedMem 79856"), fixed in 2.26.2 (NCCL release notes; NVIDIA/nccl #1637, nccl-tests #291)
_NCCL_FIRST = {"sm_100": (2, 25, 1), "sm_120": (2, 26, 2)}
_NCCL_VERSION = re.compile(r"(?i)\bNCCL(?: version)?[\s:=v-]+(\d+)\.(\d+)\.(\d+)|nvidia-nccl-cu\d+[\s=]+(\d+)\.(\d+)\.(\d+)")
_SEVERAL_GPUS = re.compile(r"(?i)\b(?:two|2|2x|four|4|4x|eight|8|8x|multiple|several|multi)[- ]?(?:\w+ )?(?:GPUs?|cards?)\b|"
                           r"tensor[- _]parallel|tp[_-]?size|all_?reduce|alltoall|all_gather|nccl-tests|collective|nproc_per_node|"
                           r"world_size|torchrun|--multi_gpu|\b[2-9]x (?:NVIDIA |GeForce )?(?:RTX |B)\d")
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
    said = f"NCCL {'.'.join(map(str, version))}" if version else "an NCCL older than " + need
    lines = ctx.of("multi-gpu-transport") or _lines_matching(ctx, r"\bNCCL\b")[:1]
    return _make("arch-missing", f"{said} predates the {gpus[0].value} ({arch})",
                 f"NCCL releases before {need} do not run their collectives on {arch}; the failure stays whatever "
                 "the transport (NCCL_P2P_DISABLE=1 does not help)",
                 f"upgrade NCCL to {need} or newer: pip install -U \"nvidia-nccl-cu12>={need}\" (the NCCL torch's pip "
                 f"wheels load), or a container release that ships NCCL {need}+; check with python -c 'import torch; "
                 "print(torch.cuda.nccl.version())'", [gpus[0]], lines, confirmed=version is not None)


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
                           r"work(?:ing|s)?\b|支持|用不了")


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
    # the ask must be about the GPU itself ("support for the MI50", "gfx1151 support", "not working on RTX 5090"), not
    # about a model on it ("does llama.cpp support Qwen3 on my RTX 4090")
    names = {arch} | {g.value for g in ctx.sheet.of("gpu") if g.detail == arch}
    named = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    gpu = rf"(?:AMD |NVIDIA |Radeon |GeForce )?(?:{named})"
    about_gpu = (rf"(?i)\bsupport(?:s|ed|ing)?\s+(?:for\s+|on\s+)?(?:the\s+|my\s+|an?\s+)?{gpu}|{gpu}\s+support\b|"
                 rf"\badd(?:ing)?\s+(?:support for\s+)?{gpu}|\bnot work\w*\s+(?:on|with)\s+(?:the\s+|my\s+)?{gpu}|"
                 rf"{gpu}\s*(?:支持|用不了)")
    asked = _lines_matching(ctx, about_gpu)[:1]
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


def _torch_with_new_nccl(ctx: Context) -> bool:
    """A pytorch.org / PyPI torch 2.7 or newer (a release, not an NGC or dev build): its wheels depend on NCCL 2.26.2+."""
    for fact in ctx.sheet.of("torch"):
        m = re.match(r"(\d+)\.(\d+)\.(\d+)(\+cu\d+)?$", fact.value)
        if m and (int(m.group(1)), int(m.group(2))) >= (2, 7):
            return True
    return False


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


def _xformers_lacks(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """An NVIDIA kernel missing where the paste runs xformers (--xformers, its wheel, its "built for sm75" check): the
    xformers binary, built for other GPUs or another torch, is what lacks it; torch itself is fine."""
    if not errors or "xformers" not in ctx.sheet.tools or _vendor(ctx) == "amd":
        return None
    said = " ".join(e.line for e in errors)
    if not re.search(r"(?i)no kernel image|but was built for sm", said):
        return None
    arch, where = ctx.arch(errors)
    cc = f"{arch[3:-1]}.{arch[-1]}" if arch and re.fullmatch(r"sm_\d+", arch) else "<the GPU's compute capability>"
    return _make("arch-missing", "xformers has no kernels for this GPU",
                 "the installed xformers binary was built for other GPUs (or another torch) than this one; torch's own "
                 "kernels are not the ones missing",
                 "pip uninstall -y xformers, then install the xformers wheel built for this torch (pip install -U xformers "
                 "--index-url https://download.pytorch.org/whl/<the torch's cuXXX>, or let the launcher reinstall it), or "
                 f"build it for this GPU: TORCH_CUDA_ARCH_LIST={cc} pip install -v -U "
                 "git+https://github.com/facebookresearch/xformers.git; meanwhile run without --xformers",
                 [where, ctx.line_fact(errors[0])], errors)


def _ptxas_lacks(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """ptxas refusing the GPU's target ("Value 'sm_121a' is not defined for option 'gpu-name'"): the assembler is older
    than the GPU. Triton ships its own ptxas inside the wheel; TRITON_PTXAS_PATH points it at a CUDA toolkit's
    newer one (Triton's README, environment variables), which is the fix where the toolkit knows the arch."""
    said = next((m for e in errors for m in [re.search(r"Value '(sm_(\d+))[af]?' is not defined for option "
                                                       r"'gpu-name'", e.line)] if m), None)
    if said is None:
        return None
    sm, cc = said.group(1), said.group(2)
    needs = _NVCC_FIRST.get(cc, "a newer CUDA toolkit")
    line = next(e for e in errors if said.group(0) in e.line)
    bundled = re.search(r"(?i)triton/backends/nvidia/bin/ptxas|PTXASError|triton", _text(ctx))
    if bundled:
        return _make("arch-missing", f"Triton's bundled ptxas does not know {sm}",
                     f"Triton compiles with the ptxas inside its wheel, which predates {sm}",
                     f"point Triton at a CUDA toolkit's ptxas that knows {sm} ({needs} or newer): export "
                     "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (the toolkit's path; `ptxas --version` there must "
                     f"be {needs.split(' (')[0]}+), or upgrade triton to a release whose bundled ptxas lists {sm}",
                     [ctx.line_fact(line)], errors)
    return _make("arch-missing", f"this ptxas does not know {sm}",
                 f"the CUDA toolkit's assembler predates compute capability {cc[:-1]}.{cc[-1]}",
                 f"{sm} needs {needs} or newer: install it and put its bin on PATH (CUDA_HOME pointing at it)",
                 [ctx.line_fact(line)], errors)


# The oldest compute capability in any current pytorch.org CUDA build (cu126: sm_50; CUDA 12 itself no longer
# compiles Kepler, NVIDIA's CUDA 12.0 release notes)
_OLDEST_TORCH_CC = 50


# (a card said to be unsupported, or hanging, is the same complaint: on a card the wheels lack, its missing code)
_FAILURE_WORD = (r"(?i)\b(?:errors?|fail(?:s|ed|ing|ure)?|broken|problems?|(?:won't|doesn't|does not|can't|cannot) "
                 r"(?:start|load|run)|(?:not|isn't|is not|no longer) supported|unsupported|hang(?:s|ing)?|freez(?:es|ing)|"
                 r"stuck)\b|报错|错误|失败|无法|不支持|卡住|卡死")


def _is_thin(ctx: Context) -> bool:
    """A short paste (an issue's title and a sentence or two, maybe among a few unrelated log lines) with no error
    line of a known class (a title the error finder keeps as unrecognised counts as words): its words are all the
    evidence there is."""
    return all(e.family is None for e in ctx.errors) and sum(1 for line in ctx.sheet.lines if line.strip()) <= 15


def _older_than_every_torch(ctx: Context, arch: Optional[str], where, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A Kepler or older NVIDIA GPU under torch: no current wheel index carries it, so no index is the fix."""
    if not errors or not arch or not re.fullmatch(r"sm_\d+", arch) or int(arch[3:]) >= _OLDEST_TORCH_CC:
        return None
    tool = ctx.tool(errors)
    if tool not in (None, "torch", "torchvision", "torchaudio", "comfyui", "a1111", "unsloth", "llamafactory"):
        return None
    cc = f"{arch[3:-1]}.{arch[-1]}"
    return _make("gpu-unsupported", f"{arch} is older than every current torch build",
                 f"compute capability {cc} (Kepler or older) is below sm_50, the oldest arch in the current pytorch.org "
                 "CUDA builds, and CUDA 12 no longer compiles it",
                 f"no current torch wheel runs on it: run on the CPU (device=\"cpu\"), or build torch from source with "
                 f"CUDA 11.x and TORCH_CUDA_ARCH_LIST={cc}, or use an old torch release whose CUDA 11 build lists "
                 f"sm_{arch[3:]} (python -c 'import torch; print(torch.cuda.get_arch_list())' tells), or a newer GPU",
                 [where, ctx.line_fact(errors[0])], errors)


def _listed_cuda_archs(ctx: Context) -> set[str]:
    """The archs a torch says it carries: torch.cuda.get_arch_list()'s ['sm_50', ...] or its "supports CUDA capabilities
    sm_50 sm_60 ..." warning (three or more, so a sentence naming one arch is not a list)."""
    lines = ctx.sheet.lines
    for n, line in enumerate(lines):
        # the list on the line that says so, or printed on the line after the command
        said = "\n".join(lines[max(0, n - 1): n + 1])
        if re.search(r"(?i)get_arch_list|supports? CUDA capabilities|arch(?:itecture)?s? list", said):
            found = set(re.findall(r"\bsm_(\d{2,3})\b", line))
            if len(found) >= 3:
                return {f"sm_{n}" for n in found}
    return set()


# The oldest Linux driver branch of each CUDA toolkit (NVIDIA's CUDA Toolkit release notes, table "CUDA Toolkit and
# Minimum Required Driver Version"): code a toolkit compiles to PTX loads only on a driver at least this new
_CUDA_MIN_DRIVER = {(11, 0): 450, (11, 1): 455, (11, 2): 460, (11, 3): 465, (11, 4): 470, (11, 5): 495, (11, 6): 510,
                    (11, 7): 515, (11, 8): 520, (12, 0): 525, (12, 1): 530, (12, 2): 535, (12, 3): 545, (12, 4): 550,
                    (12, 5): 555, (12, 6): 560, (12, 8): 570, (12, 9): 575, (13, 0): 580}
# tools that compile their kernels at run time with the installed CUDA toolkit (XLA, Triton, Numba): their PTX needs a
# driver as new as that toolkit, or the driver reports "no kernel image" for GPU code that is really there
_JIT_TOOLS = ("jax", "tensorflow", "triton")


def _toolkit_newer_than_driver(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """'no kernel image' from a run-time compiler (XLA, Triton) whose CUDA toolkit is newer than the driver: the PTX it
    writes is of a version the driver cannot load. Settled by the two versions the paste names."""
    if not any("no kernel image" in e.line for e in errors) or \
            not (ctx.tool(errors) in _JIT_TOOLS or any(t in ctx.sheet.tools for t in _JIT_TOOLS)):
        return None
    found = re.search(r"(?i)driver(?: version)?\s*(?:is|:|=)?\s*(\d{3})(?:\.\d+)*\b|\b(\d{3})\.\d{2,3}(?:\.\d+)? driver",
                      _text(ctx))
    driver = int(found.group(1) or found.group(2)) if found else None
    toolkits = sorted({tuple(int(x) for x in v.split(".")[:2]) for v in ctx.sheet.values("cuda")
                       if re.fullmatch(r"\d+\.\d+", v)} |
                      {(int(a), int(b)) for a, b in re.findall(r"(?i)\bCUDA(?: toolkit)?[ -]v?(1[1-3])\.(\d)\b", _text(ctx))})
    if driver is None or not toolkits:
        return None
    newest = toolkits[-1]
    needs = _CUDA_MIN_DRIVER.get(newest)
    if needs is None or driver >= needs:
        return None
    runs = [t for t in toolkits if _CUDA_MIN_DRIVER.get(t, 999) <= driver]
    older = f"CUDA {runs[-1][0]}.{runs[-1][1]}" if runs else "a CUDA toolkit of the driver's own version"
    return _make("driver", f"CUDA {newest[0]}.{newest[1]} is newer than the {driver} driver",
                 f"{ctx.tool(errors) or 'the run-time compiler'} builds its kernels with the CUDA {newest[0]}.{newest[1]} "
                 f"toolkit, whose PTX the NVIDIA {driver} driver cannot load (CUDA {newest[0]}.{newest[1]} needs driver "
                 f"{needs} or newer), so it reports no kernel image",
                 f"upgrade the NVIDIA driver to {needs} or newer, or use a CUDA toolkit the {driver} driver supports "
                 f"({older}) for this tool's CUDA libraries", [ctx.line_fact(errors[0])], errors)


def _no_cuda_said(ctx: Context) -> list[ErrorLine]:
    """torch saying it sees no GPU, in its words or the user's ("torch.cuda.is_available() returns False")."""
    return ctx.no_gpu() or _lines_matching(ctx, r"(?i)is_available\(\)\W*(?:returns?|is|gives|=+|->)?\W*False")[:1]


def _jetson(ctx: Context, arch: Optional[str]) -> bool:
    """A Jetson board: its integrated GPUs (sm_53, sm_62, sm_72, sm_87) are in no pytorch.org wheel, which are built
    for discrete GPUs; NVIDIA publishes torch for each JetPack."""
    return arch in ("sm_53", "sm_62", "sm_72", "sm_87") or bool(re.search(r"(?i)\bJetson\b|\bJetPack\b|\bL4T\b",
                                                                          _text(ctx)))


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
    if arch and re.fullmatch(r"sm_1\d\d", arch) and blackwell_build and \
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
            symptoms = _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1])
        if not symptoms and arch and arch.startswith("gfx"):
            # Ollama logs the GPUs it rejected at INFO level ("no compatible amdgpu devices detected"): not an error
            # line by its shape, but the symptom of a card its runner lacks
            symptoms = _lines_matching(ctx, r"(?i)no compatible (?:amd ?gpus?|gpus?)(?: devices?)? (?:were )?"
                                            r"(?:detected|discovered|found)")[:1]
        if not symptoms and arch and arch.startswith("gfx") and where is not None and _is_thin(ctx):
            # a title and a card ("Text-to-speech error with X / Radeon 6700 XT"): a failure word beside the card's
            # name is all there is
            symptoms = [line for line in _lines_matching(ctx, _FAILURE_WORD)
                        if abs(line.line_no - where.line_no) <= 3][:1]
        windows_override = ctx.sheet.is_windows and (ctx.override() is not None or any(
            OVERRIDE in l for l in ctx.sheet.lines) and ctx.sheet.has("complaint", "yes"))
        # a torch the GPU is not in (the build says +cuXYZ, the GPU is named) with any sign of trouble
        said = [ErrorLine(i, l.strip(), None) for i, l in enumerate(ctx.sheet.lines, 1)
                if re.search(r"(?i)incompatib|not compatible|kernel[- ]related|kernel image", l)]
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
            arch is None and errors and _vendor(ctx) is None and not re.search(r"(?i)\b(?:rocm|hip|gfx\w*|radeon|amd)\b",
                                                                                 _text(ctx)) and \
            any("no kernel image" in e.line for e in errors):
        # CUDA's own message, in a paste that names neither vendor nor any ROCm word: the NVIDIA reading
        return _make("arch-missing", "a torch without kernels for this NVIDIA GPU",
                     "the installed torch (or extension) was built for other compute capabilities than the GPU's",
                     "find the GPU's compute capability (nvidia-smi --query-gpu=name,compute_cap --format=csv) and "
                     "install a torch whose CUDA build carries it: pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu118 (Maxwell to Hopper), .../whl/cu128 for Blackwell (sm_120); "
                     "an old GPU (Kepler, compute capability 3.x) needs an old torch or a source build",
                     [], errors, confirmed=False)
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


def _arch_fix(arch: str, tool: Optional[str], ctx: Context) -> str:
    sheet = ctx.sheet
    if arch.startswith("sm_") and tool in ("torch", None) and _jetson(ctx, arch):
        return ("the pytorch.org wheels carry no Jetson GPU code: install NVIDIA's torch built for this JetPack (the "
                "wheel for its JetPack release from NVIDIA's 'Installing PyTorch for Jetson Platform' page, or the "
                "Jetson AI Lab pip index), or use an NVIDIA L4T PyTorch container (nvcr.io/nvidia/l4t-pytorch)")
    if arch.startswith("sm_"):
        # the tool that failed carries its own kernels: its wheel or build flag is the fix, not torch's index
        # (unless the torch underneath lacks the GPU too: that comes first, the extension is rebuilt against it)
        own = build_fix(tool, arch) if tool not in ("torch", None) and not _wheel_lacks(arch, ctx) else None
        return _past_the_release_said(own, tool, ctx) if own else _cuda_index_for_driver(ctx, arch)
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
        libraries = (f"put a rocblas.dll and rocblas/library built for {arch} (for {sdk}) into the SDK's bin folder, "
                     f"or use a build of the program that bundles {arch} kernels")
        if tool == "ollama" and value:
            return (f"set {OVERRIDE}={value} as a Windows user variable (setx {OVERRIDE} {value}), quit Ollama from "
                    f"the tray and start it again ({arch} then runs {_target(value)} code); where the HIP SDK's "
                    f"rocBLAS still has no code for {arch}: {libraries}")
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
_REBUILT_FIRST = ("lmstudio", "llama.cpp", "llama-cpp-python", "whisper.cpp", "bitsandbytes", "vllm", "sglang", "flash-attn",
                  "xformers", "deepspeed", "apex")
# tools whose entry in arch_builds.yaml says the override itself (adding it again after the override says nothing)
_OVERRIDE_ONLY = ("ollama",)


def _own_build(tool: Optional[str], arch: str, ctx: Context) -> Optional[str]:
    """The failing tool's own way to get code for the arch: its entry in arch_builds.yaml, else the rebuild flags
    fixes.py knows for the ROCm libraries."""
    return build_fix(tool, arch, ctx.sheet.is_windows) or rebuild_line(tool, arch)


def _gcn_generation(arch: Optional[str]) -> Optional[str]:
    """The GCN generation of a pre-Vega arch, as AMD's documents name it (LLVM AMDGPUUsage: gfx6 Southern Islands,
    gfx7 Sea Islands, gfx8 Volcanic Islands / Polaris)."""
    if not _is_old_gfx(arch):
        return None
    return {"6": "GFX6 (GCN 1, Southern Islands)", "7": "GFX7 (GCN 2, Sea Islands)",
            "8": "GFX8 (GCN 3/4: Fiji, Polaris)"}[arch[3]]


def _is_old_gfx(arch: Optional[str]) -> bool:
    """GCN 1-4 (gfx6xx-gfx8xx): outside every ROCm 6 and 7 release."""
    return bool(arch) and arch.startswith("gfx") and len(arch) == 6 and arch[3] in "678"


def _dropped_for_inference(ctx: Context, arch: Optional[str], where) -> Optional[Diagnosis]:
    """An inference app (LM Studio, Ollama, koboldcpp...) that does not see a GPU the current ROCm releases dropped
    (gfx906 after ROCm 6.3): its bundled ROCm runtime has no code for it, and its Vulkan backend still runs."""
    row = arch_info(arch) if arch else None
    tool = ctx.tool()
    complaint = [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]
    if row is None or row.max_rocm is None or tool not in INFERENCE_TOOLS or ctx.of("arch-missing") or not complaint:
        return None
    last = f"{row.max_rocm[0]}.{row.max_rocm[1]}"
    return _make("gpu-unsupported", f"{arch} is outside the ROCm that {tool} ships",
                 f"ROCm releases after {last} dropped {arch}; {tool}'s bundled ROCm runtime is newer, so it does not "
                 "list the GPU", f"use {tool}'s Vulkan backend (llama.cpp's Vulkan build, LM Studio's Vulkan runtime, "
                 f"Ollama's Vulkan runner), or a build made against ROCm {last} or older with {arch} in its targets",
                 [where] + complaint, _symptom_lines(ctx, complaint), confirmed=False)


# The last ROCm release whose libraries were still built for an old GCN arch: gfx803 (Fiji, Polaris) was listed
# through ROCm 3.x and still enabled in the 4.x builds before 4.5 (torch built with PYTORCH_ROCM_ARCH=gfx803 ran on
# ROCm 4.0: pytorch #53738); ROCm 5 left it out (rocm-arch #901, an RX 560 under ROCm 5.3). The same bound as the
# platform family's PCIe-atomics reading (machine.py)
_LAST_ROCM_OF_OLD = {"gfx803": (4, 3)}
# Distributions that only ROCm 4 and older install on (16.04 left the supported list with ROCm 4.x): a paste from
# one of them runs such a ROCm
_OLD_ERA_UBUNTU = ("14.04", "16.04")


def _rocm_of_its_era(ctx: Context, arch: Optional[str]) -> Optional[str]:
    """The ROCm the paste runs, where it is one that still built this old arch: the versions it names (all of them
    older than the last that carried the arch), else a distribution or kernel that no ROCm 6 or 7 installs on.
    The reason the card fails there is not "outside ROCm": that release had its code."""
    last = _LAST_ROCM_OF_OLD.get(arch or "")
    if last is None or ctx.of("gpu-unsupported"):
        return None
    versions = []
    for value in ctx.sheet.values("rocm"):
        m = re.match(r"(\d+)\.(\d+)", value)
        if m:
            versions.append((int(m.group(1)), int(m.group(2))))
    if versions:
        newest = max(versions)
        return f"ROCm {newest[0]}.{newest[1]}" if newest <= last else None
    ubuntu = next((f.detail for f in ctx.sheet.of("os") if f.value == "ubuntu" and f.detail in _OLD_ERA_UBUNTU), None)
    if ubuntu:
        return f"Ubuntu {ubuntu} (only ROCm 4 and older install there)"
    # a kernel older than 4.15 (Ubuntu 18.04's) is from the same years
    kernel = next((k for k in ctx.sheet.values("kernel") if re.match(r"3\.|4\.(?:\d|1[0-4])\.", k)), None)
    return f"Linux {kernel} (only ROCm 4 and older run on it)" if kernel else None


_HIP_NO_DEVICE = r"hipErrorInvalidDevice|hipErrorNoDevice|no ROCm-capable device|No HIP GPUs are available"


def _old_card_in_its_era(ctx: Context, arch: str, where, era: str) -> Optional[Diagnosis]:
    """A GCN 4 card (gfx803) under a ROCm that still built it: not a card outside ROCm. HIP refusing the device with
    no index in play is the device files (that era gave /dev/kfd to the video group); the GPU not detected at all is
    the PCIe atomics gfx8 needs (machine.py's reading); a missing-code message is arch-missing's to read."""
    if ctx.of("arch-missing"):
        return None
    refused = [e for e in ctx.errors if re.search(_HIP_NO_DEVICE, e.line)]
    indexed = re.search(r"(?i)cuda:\d|device_?(?:id|index|ordinal)\s*[=:]\s*\d", _text(ctx)) or any(
        re.match(r"(?:HIP|ROCR|CUDA)_VISIBLE_DEVICES=", f.value) for f in ctx.sheet.of("env"))
    if refused and not indexed:
        return _first(_make(
            "device-access", f"{arch} under {era}: HIP cannot open the GPU",
            f"{era} still carried {arch} code, and no device index or visibility variable is in play, so HIP refusing "
            "the device is the device files: the user cannot open /dev/kfd and /dev/dri (releases of that era gave "
            "them to the video group)",
            "sudo usermod -a -G video $LOGNAME (and render too where the group exists: -G render,video), then log out "
            "and back in; a sample that works under sudo confirms it; if it still fails as root, look for 'PCI rejects "
            f"atomics' in dmesg ({arch} needs PCIe atomics)", [where, ctx.line_fact(refused[0])], refused))
    # not detected at all: the PCIe atomics gfx8 needs, the platform family's reading (machine.py), not this one's
    return None


def _kfd_unlisted(ctx: Context, errors: list[ErrorLine], arch: Optional[str], where) -> Optional[Diagnosis]:
    """The kernel's KFD saying the PCI device id "is missing in supported_devices": that kernel driver creates no
    compute device for the card, so every ROCm tool above it fails (/dev/kfd unusable, out of resources). That is
    the root: the groups and the user-space ROCm cannot change it."""
    said = [e for e in errors if re.search(r"(?i)is missing in supported_devices", e.line)]
    if not said:
        return None
    did = re.search(r"(?i)DID ([0-9a-f]{4})", said[0].line)
    card = f"{arch} (device id {did.group(1)})" if arch and did else arch or (f"device id {did.group(1)}" if did else
                                                                              "this GPU")
    row = arch_info(arch) if arch else None
    note = f" ({row.note})" if row and row.note else ""
    return _first(_make("gpu-unsupported", f"the kernel driver does not support {card}",
                        f"the amdgpu kernel driver's compute part (KFD) has no entry for {card}, so it creates no compute "
                        "device; the /dev/kfd and resource errors above follow from that",
                        f"{card} is not supported by this kernel driver: use a kernel driver whose KFD lists it (the "
                        "amdgpu-dkms of a ROCm release that supports the card, or a newer Linux kernel), and a ROCm "
                        f"release that supports it in user space{note}; the group membership is not the cause",
                        [where, ctx.line_fact(said[0])], errors + ctx.of("device-access")))


def _zluda_pre_rdna(ctx: Context, arch: Optional[str], where) -> Optional[Diagnosis]:
    """ZLUDA on a GCN 1-4 card (gfx6-gfx8: Polaris, Fiji and older): ZLUDA's README lists Radeon RX 5000 (RDNA 1) and
    newer, so the card never shows up as a CUDA device, whatever else the paste says. (Vega, gfx9, is left out: SD.Next
    users run it there with patched ROCm libraries.)"""
    if ctx.tool() != "zluda" or not _is_old_gfx(arch):   # Vega (gfx9) runs it with patched ROCm libraries
        return None
    if _lines_matching(ctx, r"(?i)\bDevice:\s*cuda:\d+\b.{0,80}\[ZLUDA\]"):
        return None   # the program printed a ZLUDA CUDA device: some card runs, the question is which one it picks
    said = [f for f in ctx.sheet.of("gpu") if f.detail == arch][:1]
    name = said[0].value if said else arch
    diagnosis = _make("gpu-unsupported", f"ZLUDA does not run on the {name}",
                 f"ZLUDA supports AMD Radeon RX 5000 series (RDNA 1) and newer GPUs only; the {name} ({arch}) is an "
                 "older GCN chip, so ZLUDA offers no CUDA device on it",
                 f"the {name} is not supported by ZLUDA (it needs an RDNA GPU, Radeon RX 5000 or newer): on Windows use "
                 "DirectML (torch-directml) or the program's Vulkan / OpenCL backend; on Linux ROCm itself where a "
                 "release still lists the card", [f for f in (where,) if f], ctx.errors)
    # nothing else can work on it: the DLLs or libraries ZLUDA misses beside it would not bring the card in
    diagnosis.rank = min(family(n).rank for n in ("device-access", "driver", "wsl", "rocm-libs-missing")) - 1
    return diagnosis


# Intel GPUs by name (Arc, Iris Xe, Data Center GPU Max / Flex): torch runs them through its XPU build, never CUDA or ROCm
_INTEL_GPU = re.compile(r"(?i)\bIntel(?:\(R\))?\s+(?:Arc|Iris|Data Center GPU|UHD|Xe)\b|\bArc(?:\(TM\))?\s+[AB]\d{3}\b|"
                        r"\bIris Xe\b|\bGPU Max \d{4}\b")
# a torch XPU build in use ("2.10.0+xpu", torch.xpu answering): the Intel GPU is reached, whatever fails next
_INTEL_TORCH = re.compile(r"(?i)\+xpu\b|torch\.xpu\.(?:is_available|device_count)\(\)\W{0,6}(?:True|[1-9])")
# a tool with its own route to Intel GPUs, said first in the fix (the tool that was asked about)
_INTEL_ROUTES = (
    (r"(?i)\bdeepspeed\b", "DeepSpeed itself runs only CUDA/ROCm accelerators; for Intel GPUs install Intel's port, "
                            "pip install intel-extension-for-deepspeed (DeepSpeed's XPU accelerator, with torch's XPU "
                            "build and intel-extension-for-pytorch); "),
    (r"(?i)\bollama\b", "Ollama's released CUDA/ROCm runners do not drive Intel GPUs: use its Vulkan backend (a release "
                         "that ships it, or a source build with Vulkan) or ipex-llm's Ollama build; "),
    (r"(?i)\bllama\.?cpp\b", "build llama.cpp with its SYCL (-DGGML_SYCL=ON, oneAPI) or Vulkan (-DGGML_VULKAN=ON) "
                              "backend; "),
)
_CUDA_OR_ROCM = re.compile(r"(?i)\bcuda\b|\brocm\b|\bhip\b|is_available|No CUDA GPUs|torch\.cuda|--gpus|nvidia")


@rule("gpu-unsupported")
def intel_gpu_under_cuda(ctx: Context) -> Optional[Diagnosis]:
    """An Intel GPU (Arc, Iris Xe, Data Center Max) expected to run CUDA or ROCm code: neither stack runs on it; torch
    reaches it through its XPU build (device "xpu"), llama.cpp and Ollama through SYCL or Vulkan. Only where the paste
    names no NVIDIA or AMD GPU (a laptop's Intel iGPU beside an RTX card is not the GPU in question)."""
    said = _lines_matching(ctx, _INTEL_GPU.pattern)
    text = _text(ctx)
    route = next((fix for tool, fix in _INTEL_ROUTES if re.search(tool, text)), "")
    if not said or ctx.sheet.of("gpu") or not (_CUDA_OR_ROCM.search(text) or route) or _INTEL_TORCH.search(text):
        return None   # a torch XPU build already in use is past this reading (its driver's, rules/access.py)
    trouble = ctx.errors or ctx.no_gpu() or ctx.sheet.has("complaint", "yes") or \
        re.search(r"(?i)\?|\bFalse\b|not (?:yet )?(?:detected|found|used|work|supported|implemented)|doesn't|does not|"
                  r"don't|can't|cannot|\bstop(?:s|ped|ping)?\b|不支持|用不了|找不到", text)
    if not trouble:
        return None
    name = re.sub(r"\s+", " ", _INTEL_GPU.search(said[0].line).group(0))
    diagnosis = _make("gpu-unsupported", f"{name} runs neither CUDA nor ROCm",
                 f"the {name} is an Intel GPU: CUDA builds need an NVIDIA GPU and ROCm builds an AMD one, so "
                 "torch.cuda sees no device on it",
                 route + "use torch's XPU build for Intel GPUs: pip install torch --index-url https://download.pytorch.org/whl/xpu "
                 "(with Intel's GPU driver installed), then device \"xpu\" (torch.xpu.is_available()); llama.cpp and "
                 "Ollama run it through their SYCL or Vulkan backends", [], said[:1] + ctx.errors,
                 confirmed=bool(ctx.errors or ctx.no_gpu()))
    # the only GPU named cannot run CUDA at all: a visibility variable or a driver cannot bring a device in
    if ctx.sheet.has("env") and any(f.value.startswith(("CUDA_VISIBLE_DEVICES=", "HIP_VISIBLE_DEVICES="))
                                    for f in ctx.sheet.of("env")):
        return diagnosis
    diagnosis.rank = min(family(n).rank for n in ("visibility", "driver", "device-access", "torch-build")) - 1
    return diagnosis


@rule("gpu-unsupported")
def gpu_unsupported(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("gpu-unsupported") + [e for e in ctx.of("driver") if re.search(r"not supported in kfd", e.line)]
    # Ollama says its CUDA floor at INFO level, which the error finder leaves out as a log's chatter
    errors += [e for e in _lines_matching(ctx, r"CUDA GPU is too old\. Compute Capability detected")
               if e.line_no not in {x.line_no for x in errors}]
    arch, where = ctx.arch(errors)
    if arch is None:   # the only gfx named is in a list ("I didn't see gfx803 in the list")
        where = next((f for f in ctx.sheet.of("built_for") if _is_old_gfx(f.value)), None)
        arch = where.value if where else None
    old = _is_old_gfx(arch)
    era = _rocm_of_its_era(ctx, arch) if old and where is not None and where.detail != "list" else None
    if era:
        return _old_card_in_its_era(ctx, arch, where, era)
    zluda = _zluda_pre_rdna(ctx, arch, where)
    if zluda is not None:
        return zluda
    text = " ".join(e.line for e in errors)
    nvidia = (re.search(r"(?i)compute capability|cuda capability|too old|CUDA compute", text)
              and not re.search(r"(?i)\bamdgpu\b|\bgfx\d", text)) or \
        (arch or "").startswith("sm_")
    if errors and nvidia:
        needed = re.search(r"(?i)compute capability below ([\d.]+)|(?:under|below|less than) (?:CUDA )?compute"
                           r"(?: capability)? ?(\d\.\d)|minimum required (?:CUDA|compute) capability is (\d+\.\d)", text)
        found = re.search(r"(?i)(?:cuda|compute) capability (?:of )?(\d+\.\d+)", "\n".join(ctx.sheet.lines))
        need = f" (it needs compute capability {next(g for g in needed.groups() if g)} or newer)" if needed else ""
        if re.search(r"(?i)triton", text):   # torch.compile's code generator, not the GPU itself, sets the floor
            return _make("gpu-unsupported", "Triton needs compute capability 7.0 or newer",
                         f"Triton (the compiler behind torch.compile and the fused kernels of unsloth and others) does "
                         f"not generate code for this GPU{' (compute capability ' + found.group(1) + ')' if found else ''}",
                         "run without Triton: drop torch.compile (or torch.compile(backend=\"aot_eager\") / "
                         "TORCHDYNAMO_DISABLE=1), and use the tool's non-Triton path; the GPU runs torch's eager kernels; "
                         "a tool that always compiles Triton kernels (unsloth) needs a GPU of compute capability 7.0 or "
                         "newer: on Kaggle switch the accelerator from the P100 to the T4 (Colab's free GPU is a T4)",
                         [ctx.line_fact(e) for e in errors[:1]], errors)
        own = ""
        if ctx.tool(errors) == "ollama":   # its CUDA runners are built for compute capability 5.0 and newer
            have = re.search(r"(?i)Compute Capability detected: (\d+)\.(\d+)", text)
            cc = f"{have.group(1)}{have.group(2)}" if have else "<the GPU's compute capability, as digits>"
            own = (f"; Ollama's releases are built for compute capability 5.0 and newer: build it from source for this GPU "
                   f"(CMAKE_CUDA_ARCHITECTURES={cc}, with a CUDA toolkit that still compiles it) or run on the CPU")
        if ctx.tool(errors) == "tensorflow" and found:   # TensorFlow's build takes the capabilities it compiles
            own = (f"; or build TensorFlow from source with TF_CUDA_COMPUTE_CAPABILITIES={found.group(1)} (with a CUDA "
                   "toolkit that still compiles it)")
        return _make("gpu-unsupported", "the GPU is older than the builds support",
                     f"this GPU{' (compute capability ' + found.group(1) + ')' if found else ''} is below what the "
                     f"software is built for{need}",
                     f"no current build runs on it{need}: run on the CPU, use an older release that still supported "
                     f"this GPU, or a newer GPU{own}", [ctx.line_fact(e) for e in errors[:1]], errors)
    unlisted = _kfd_unlisted(ctx, errors, arch, where)
    if unlisted is not None:
        return unlisted
    symptoms = ctx.crashes() + ctx.of("arch-missing", "device-access", "visibility", "driver") + ctx.no_gpu() + \
        [e for e in ctx.errors if e.family is None] + (ctx.of("rocm-libs-missing") if old else [])
    dropped = _dropped_for_inference(ctx, arch, where)
    if dropped is not None:
        return dropped
    if not symptoms and old:
        # "ROCm cannot detect my Radeon R9 270X": the card's own name where NOT_DETECTED wants the word GPU
        named = {f.line_no for f in ctx.sheet.of("gpu")}
        symptoms = _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]) or \
            _lines_matching(ctx, NOT_DETECTED)[:1] or \
            [line for line in _lines_matching(ctx, r"(?i)(?:can ?not|can't|doesn't|does not|won't|unable to|fails? "
                                                   r"to) (?:detect|see|find|list|use|recogni[sz]e)\b")
             if line.line_no in named][:1] or \
            _lines_matching(ctx, r"(?i)\b(?:rocm|hip)\b[^.\n]{0,30}\bsupport|\bsupport\w*\b[^.\n]{0,30}\b(?:rocm|hip)\b|"
                                 r"支持")[:1]   # "Radeon HD 7850 ROCm support?": the question is the complaint
    # a plainer cause beside it (a permission refused, a slot without atomics) comes first
    explicit = any(re.search(r"(?i)permission denied|no such file|operation not permitted", e.line)
                   for e in ctx.of("device-access")) or ctx.of("platform-bios", "torch-build")
    if not errors and not (old and symptoms and not ctx.of("platform-bios")):
        return None
    chip = re.search(r"amdgpu: (\w+)\s+not supported in kfd", text)
    name = chip.group(1) if chip else arch or "this GPU"
    product = re.search(r"(?i)\b(RX|R9|R7) ?(\d{3,4})\b", "\n".join(ctx.sheet.lines))
    card = next((f.value for f in ctx.sheet.of("gpu") if f.detail == arch), None)
    if product and not chip:
        name = f"the {product.group(1).upper()} {product.group(2)} ({name})"
    elif card and not chip:   # "Radeon HD 7850", "FirePro W9100": the product as the paste names it
        name = f"the {card} ({name})"
    windows_stack = ""
    if old and (ctx.sheet.is_windows or ctx.tool() == "zluda"):
        windows_stack = ("ZLUDA and the HIP SDK for Windows run on RDNA (Radeon RX 5000) and newer only, so their "
                         "DLLs cannot help here; on Windows use DirectML (torch-directml) or a Vulkan backend. ")
    # the KFD names the chip by its code name (PITCAIRN, OLAND), which the product table knows
    named_chip = lookup_product(chip.group(1)) if chip else None
    generation = _gcn_generation(arch) or _gcn_generation(named_chip.arch if named_chip else None)
    backends = ("use a backend that runs on it, Vulkan (llama.cpp -DGGML_VULKAN=ON, Ollama's Vulkan runner) or "
                "OpenCL")
    if generation and generation.startswith("GFX6"):
        # the KFD never had GCN 1: no release, old or community, is a way out
        fix = (f"{name} is a {generation} GPU, which the KFD compute driver does not support at all, so no ROCm "
               f"release can use it (not supported, with no workaround): {backends}; for ROCm a GFX9 (Vega) or newer GPU")
    else:
        fix = (f"{name} is not supported by any ROCm 6 or 7 release{' (' + generation + ')' if generation else ''}: "
               f"{backends}; for ROCm itself only an old release that still listed it (gfx803: the ROCm 5.7 builds and "
               "older, or community builds)")
    diagnosis = _make("gpu-unsupported", f"{name} is outside ROCm",
                      f"the driver's compute part (KFD) or every current ROCm release leaves {name} out, and no newer "
                      "chip's code runs on it", windows_stack + fix,
                      [where] + [ctx.line_fact(e) for e in errors[:1]], errors + symptoms)
    if chip:   # the kernel driver itself says it made no compute device: the groups and files below it cannot matter
        diagnosis.rank = min(family(n).rank for n in ("device-access", "driver", "wsl", "rocm-libs-missing")) - 1
    if old and not explicit:   # nothing else can work on it, whatever vaguer error the paste shows
        diagnosis.rank = min(family(n).rank for n in ("device-access", "driver", "wsl", "rocm-libs-missing")) - 1
    return diagnosis


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
