"""An NVIDIA card older than what a tool's prebuilt binaries are compiled for: nothing stops the code from running on
it but the arch list the release was built with, so the tool's own source build for the card's compute capability
is the fix (the arch reading), unlike a floor a feature needs (gpu_unsupported.py: AWQ's kernels, flash-attn)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.archs import build_fix
from steadytune.doctor.fixes import dotted
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text
from steadytune.doctor.rules.arch.arch_missing import _ASKS_SUPPORT, _is_thin

# The oldest compute capability each tool's prebuilt binaries carry, where that list is the tool's choice:
#   torch     the pytorch.org CUDA builds start at sm_50 (CUDA 12 no longer compiles Kepler: its 12.0 release notes)
#   gpt4all   gpt4all-backend/llama.cpp.cmake: GGML_CUDA_ARCHITECTURES 52;61;70;75 (5.0 gets neither code nor PTX)
#   nccl      makefiles/common.mk: compute_35 and newer by default (compute_50 in releases for CUDA 12)
_PREBUILT_OLDEST = {"torch": 50, "gpt4all": 52, "nccl": 35}
# NCCL's own remedy: it is no tool of the facts' list (its log lines name RCCL/NCCL transport, read by the transport
# family), so its source build lives here rather than in arch_builds.yaml (NVIDIA/nccl README: NVCC_GENCODE)
_NCCL_BUILD = ("rebuild NCCL for this GPU from source: make -j src.build NVCC_GENCODE=\"-gencode=arch=compute_{cc},"
               "code=sm_{cc}\" (its makefiles/common.mk compiles only compute capability 3.5 or 5.0 and newer by default, "
               "by release and CUDA), then put its build/lib first on LD_LIBRARY_PATH (and rebuild nccl-tests against it)")
# tools the paste names in words (a title, a question) rather than by their own log lines
_NAMED = (("nccl", r"(?i)\bnccl\b"), ("gpt4all", r"(?i)\bgpt4all\b"))
# a release's stated floor in words: "compute capability of 7.0 or higher", "compute capability <7.0"
_STATED_FLOOR = re.compile(r"(?i)compute capability\D{0,12}?(?:<\s*|>=?\s*)?(\d{1,2})\.(\d)\b(?:\s*or (?:higher|newer|above))?")
_NCCL_CUDA_ERROR = re.compile(r"(?i)unhandled cuda error")
_FAILURE = re.compile(r"(?i)\berror\b|\bcrash\w*|\bfail\w*|\bproblem\b|not (?:work|support)\w*|报错|崩溃")
# a question counts as the trouble only in a thin paste (a title, a sentence or two), where it is the whole report
_RUNS_ON = re.compile(r"(?i)\b(?:work|run)s?\b[^?\n]{0,40}\?")
_QUESTION = re.compile(r"\?|？|支持")


# A release that stopped shipping code for compute capabilities, said of those capabilities ("CUDA
# capability 3.0 and 5.0 is no longer supported", "remove cuda capability 3.0 and 5.0 from binaries", "drops compute
# capability 5.0"): a list the release dropped, not the machine's cards. PyTorch's binaries left 3.0 and 5.0 out from
# 0.3.1 to cut their size, "not unsupported, we are not pre-generating arch-dependent assembly for them in the
# binaries" (pytorch/pytorch#4841); they still built from source (pytorch/pytorch#5125), and 0.4.1's binaries carried
# 5.0 again; 3.0 no longer compiles at all from 0.4.1 (it lacks the __shfl instructions torch relies on, #4841).
_CCS = r"((?:\d{1,2}\.\d(?:\s*(?:,|\band\b|&|/|\bor\b)\s*)?)+)"
_DROPPED = re.compile(r"(?i)\b(?:cuda|compute) capabilit(?:y|ies)\s+" + _CCS + r"[^\n]{0,40}?(?:\b(?:is|are) no longer "
                      r"supported\b|\bno longer (?:built|shipped|included)\b|\b(?:is |are )?(?:dropped|removed)\b)|"
                      r"\b(?:drop(?:ped|s)?|remov(?:e|ed|es|ing))\s+(?:support (?:for|of) )?(?:cuda |compute )?"
                      r"capabilit(?:y|ies)\s+" + _CCS)
# which CUDA toolkits still compile a capability (as digits): CUDA 12.0 dropped Kepler (its release notes), CUDA 13.0
# everything below Turing (pytorch/pytorch#190385: CUDA 13.x "dropped support for compute capabilities below sm_75")
_TOOLKIT_FOR = ((35, 37, "a CUDA 11.x toolkit"), (50, 72, "a CUDA 12.x toolkit"), (75, 999, "any current CUDA toolkit"))
# the oldest capability a PyTorch source build of 0.4.1 or later compiles for (3.0 lacks __shfl: #4841)
_TORCH_SOURCE_OLDEST = 35


def dropped_capabilities(ctx: Context) -> tuple[list[int], list]:
    """The capabilities (as digits, 30 for 3.0) a paste says a release dropped, and the line that says so; none where
    it names an NVIDIA card outside that list."""
    lines = _lines_matching(ctx, _DROPPED.pattern)[:1]
    if not lines:
        return [], []
    found = _DROPPED.search(lines[0].line)
    listed = found.group(1) or found.group(2)
    ccs = sorted({int(m[0] + m[1]) for m in re.findall(r"(\d{1,2})\.(\d)", listed)})
    cards = {int(g.detail[3:]) for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_\d{2,3}", g.detail or "")}
    if cards - set(ccs):
        return [], []   # a card named outside the list: the card's own readings (its capability against the floors)
    return ccs, lines


def _dropped_from_the_binaries(ctx: Context) -> Optional[Diagnosis]:
    """Capabilities a release said it no longer ships, at least one of which a source build still targets: that build
    (the capabilities below every source build are said as such)."""
    if not _is_thin(ctx):
        return None
    ccs, lines = dropped_capabilities(ctx)
    buildable = [cc for cc in ccs if cc >= _TORCH_SOURCE_OLDEST]
    if not buildable:
        return None   # none a source build can target: the floor's reading (tool_floors.py)
    tool = ctx.tool()
    arch_list = ";".join(dotted(cc) for cc in buildable)
    said = ", ".join(dotted(cc) for cc in ccs[:-1]) + (" and " if len(ccs) > 1 else "") + dotted(ccs[-1])
    toolkits = "; ".join(f"{dotted(cc)} with " + next((t for lo, hi, t in _TOOLKIT_FOR if lo <= cc <= hi),
                                                    "a CUDA toolkit that compiles it") for cc in buildable)
    lost = [cc for cc in ccs if cc < _TORCH_SOURCE_OLDEST]
    if tool in (None, "torch"):
        fix = (f"the prebuilt PyTorch binaries no longer carry kernels for compute capability {said}; the cards still "
               f"work with PyTorch built from source for them: TORCH_CUDA_ARCH_LIST=\"{arch_list}\" python setup.py "
               f"install ({toolkits}), or a release or CUDA variant whose binaries still list them "
               "(torch.cuda.get_arch_list() tells)")
        if lost:
            fix += (f"; compute capability {', '.join(dotted(cc) for cc in lost)} no longer compiles from PyTorch 0.4.1 "
                    "on (it lacks instructions PyTorch relies on): only an older release built from source, or the CPU")
        label = "PyTorch"
    else:
        own = [build_fix(tool, f"sm_{cc}") for cc in buildable]
        fix = own[0] if own and own[0] else (
            f"the released binaries no longer carry compute capability {said}: build it from source for them "
            f"(TORCH_CUDA_ARCH_LIST=\"{arch_list}\", CMAKE_CUDA_ARCHITECTURES="
            f"{';'.join(str(cc) for cc in buildable)} for a CMake build; {toolkits})")
        label = tool
    return _make("arch-missing", f"{label}'s binaries dropped compute capability {said}",
                 f"a release that stops shipping code for compute capability {said} leaves those cards without "
                 "prebuilt kernels; nothing else keeps the code from running there", fix, [], lines, confirmed=False)


def _old_card(ctx: Context, below: int) -> Optional[tuple[str, str]]:
    """(card, arch) of the first NVIDIA card the paste names below compute capability `below` (as digits: 50)."""
    for gpu in ctx.sheet.of("gpu"):
        arch = gpu.detail or ""
        if re.fullmatch(r"sm_\d{2,3}", arch) and int(arch[3:]) < below:
            return re.sub(r"的?显卡$", "", gpu.value).strip(), arch
    return None


def _tool_named(ctx: Context) -> Optional[str]:
    tool = ctx.tool()
    if tool in _PREBUILT_OLDEST:
        return tool
    text = _text(ctx)
    return next((name for name, pattern in _NAMED if re.search(pattern, text)), tool)


@rule("arch-missing")
def older_than_the_prebuilt_binaries(ctx: Context) -> Optional[Diagnosis]:
    """A card below the oldest compute capability a tool's release is compiled for, with trouble or a question in
    the paste and no error line another reading settles: build the tool from source for the card."""
    text = _text(ctx)
    # NCCL's "unhandled cuda error" is what a kernel launch for a missing arch returns; any other error line of a known
    # family has its own reading (no kernel image, a capability floor)
    nccl = bool(re.search(_NAMED[0][1], text))
    if any(e.family is not None and not (nccl and _NCCL_CUDA_ERROR.search(e.line)) for e in ctx.errors):
        return None
    failure = _lines_matching(ctx, _FAILURE.pattern)[:1]
    tool = _tool_named(ctx)
    stated = _STATED_FLOOR.search(text)
    floor = _PREBUILT_OLDEST.get(tool or "")
    asked = _is_thin(ctx) and (stated or _ASKS_SUPPORT.search(text) or _RUNS_ON.search(text))
    if floor is None and stated and _is_thin(ctx):   # the release's floor said in words, the card below it
        floor = int(stated.group(1) + stated.group(2))
    if floor is None and _is_thin(ctx) and _ASKS_SUPPORT.search(text):
        floor, tool = _PREBUILT_OLDEST["torch"], "torch"   # a card older than every CUDA 12 build, asked about
    # the trouble: a failure said, or (in a thin paste about whether the card is supported) the question itself
    trouble = failure or (_lines_matching(ctx, _QUESTION.pattern)[:1] if asked else []) or \
        (_lines_matching(ctx, _DROPPED.pattern)[:1] if _is_thin(ctx) else [])   # "capability 3.7 removed from binaries"
    card = _old_card(ctx, floor) if floor and trouble else None
    if card is None:
        return _dropped_from_the_binaries(ctx)
    name, arch = card
    cc, cc_dot = arch[3:], f"{arch[3:-1]}.{arch[-1]}"
    floor_dot = f"{str(floor)[:-1]}.{str(floor)[-1]}"
    own = _NCCL_BUILD.format(cc=cc) if tool == "nccl" else build_fix(tool, arch) if tool not in (None, "torch") else None
    if tool == "torch":
        fix = (f"the prebuilt PyTorch binaries carry no {arch} code (their oldest is sm_{floor}): build PyTorch from "
               f"source with TORCH_CUDA_ARCH_LIST={cc_dot} and a CUDA 11.x toolkit (CUDA 12 no longer compiles "
               f"compute capability {cc_dot}), or use an old torch release whose CUDA build lists {arch} "
               "(torch.cuda.get_arch_list() tells)")
    elif own:
        fix = own
    else:
        fix = (f"the released binaries are compiled for compute capability {floor_dot} and newer only: build it from "
               f"source for the {name} (compute capability {cc_dot}): TORCH_CUDA_ARCH_LIST={cc_dot} pip install -e . "
               f"--no-build-isolation in its clone (CMAKE_CUDA_ARCHITECTURES={cc} for a CMake build), lowering the "
               "capability check in its setup.py where it refuses; features that need a newer GPU (bf16, fp8) stay off")
    label = {"torch": "PyTorch", "nccl": "NCCL", "gpt4all": "GPT4All"}.get(tool or "", tool or "the release")
    evidence = [g for g in ctx.sheet.of("gpu") if g.detail == arch][:1]
    return _make("arch-missing", f"{label}'s prebuilt binaries leave out the {name} ({arch})",
                 f"the {name} is compute capability {cc_dot}; {label}'s release is compiled for {floor_dot} and newer, "
                 "so it carries no code for this GPU, though nothing else keeps it from running there", fix, evidence,
                 trouble, confirmed=tool in _PREBUILT_OLDEST and tool != "torch" and bool(evidence))
