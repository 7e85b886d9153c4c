"""The CUDA a torch build was made with, against what the machine needs: a CUDA too old to compile code for the GPU,
a CUDA toolkit of another major version than torch's when an extension is built, and a torchvision whose CUDA kernels
do not match the CUDA torch beside it."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.shared import _torch_cuda


# The oldest CUDA whose compiler targets each compute capability (NVIDIA's CUDA Toolkit release notes: Ampere sm_80 in
# 11.0, sm_86 in 11.1, Orin sm_87 in 11.4, Ada sm_89 and Hopper sm_90 in 11.8, Blackwell sm_100 / sm_120 in 12.8)
_FIRST_CUDA = {80: (11, 0), 86: (11, 1), 87: (11, 4), 89: (11, 8), 90: (11, 8), 100: (12, 8), 101: (12, 8),
               103: (12, 9), 120: (12, 8), 121: (12, 9)}

# pytorch.org's CUDA wheel labels and the torch releases that have them (pytorch.org/get-started/previous-versions)
_TORCH_RELEASES_OF = {"cu110": "1.7", "cu111": "1.8-1.10", "cu113": "1.10-1.12", "cu116": "1.12-1.13",
                      "cu117": "1.13-2.0", "cu118": "2.0-2.7", "cu121": "2.1-2.5", "cu124": "2.4-2.6",
                      "cu126": "2.6-2.9", "cu128": "2.7 and newer", "cu129": "2.8", "cu130": "2.9 and newer"}



def torch_releases_of(label: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """The first and last torch release (major, minor) that pytorch.org's `label` index has ("and newer": open)."""
    first, _, last = _TORCH_RELEASES_OF[label].replace(" and newer", "-99.99").partition("-")
    start = tuple(int(x) for x in first.split("."))
    return start, tuple(int(x) for x in last.split(".")) if last else start


_NOT_COMPATIBLE = re.compile(r"with CUDA capability sm_(\d+) is not compatible with the current PyTorch installation")
def _label_for(cuda: tuple[int, int]) -> str:
    """The oldest pytorch.org CUDA label at or past `cuda` (cu118 for Ampere and Ada, cu128 for Blackwell)."""
    return next((label for label in _TORCH_RELEASES_OF
                 if (int(label[2:-1]), int(label[-1])) >= cuda and label not in ("cu110", "cu111", "cu113", "cu116",
                                                                                 "cu117")), "cu128")


@rule("torch-build")
def torch_cuda_older_than_the_gpu(ctx: Context) -> Optional[Diagnosis]:
    """torch's "sm_XX is not compatible with the current PyTorch installation" beside the CUDA the installed torch was
    built with, where that CUDA predates the GPU: no build of that torch (of that CUDA) can carry the GPU's code, so
    the fix is a torch built with a newer CUDA, not a build option (the arch-missing reading is for a CUDA that could)."""
    lines = _lines_matching(ctx, _NOT_COMPATIBLE.pattern)
    if not lines:
        return None
    cc = int(_NOT_COMPATIBLE.search(lines[0].line).group(1))
    first, cuda = _FIRST_CUDA.get(cc), _torch_cuda(_text(ctx))
    if first is None or cuda is None or cuda >= first:
        return None
    label = _label_for(first)
    have = f"{cuda[0]}.{cuda[1]}"
    return _make("torch-build", f"torch's CUDA {have} build predates sm_{cc}",
                 f"the installed torch was built with CUDA {have}, whose compiler has no sm_{cc} target (CUDA "
                 f"{first[0]}.{first[1]} added it), so no kernel of this torch runs on the GPU",
                 f"pip uninstall -y torch torchvision torchaudio; pip install torch torchvision torchaudio --index-url "
                 f"https://download.pytorch.org/whl/{label} (torch {_TORCH_RELEASES_OF[label]}; any build with CUDA "
                 f"{first[0]}.{first[1]} or newer carries sm_{cc}), in the Python the program runs (its venv or "
                 "embedded python)", [ctx.line_fact(lines[0])], lines[:1])


# torch.utils.cpp_extension's check when an extension is built: the nvcc found (CUDA_HOME) against torch's CUDA
_TOOLKIT_MISMATCH = re.compile(r"detected CUDA version \((\d+)\.(\d+)\) mismatches the version that was used to "
                               r"compile\s+PyTorch \((\d+)\.(\d+)\)")
# the paste saying that no torch exists for the toolkit's CUDA ("there is no cu121", "no pytorch for cuda 12")
_NO_TORCH_FOR_IT = re.compile(r"(?i)\bno (?:torch |pytorch )?(?:build |wheel |version |release )?(?:for )?"
                              r"(?:cu\d{3}|cuda ?\d)")


@rule("torch-build")
def toolkit_newer_than_torch(ctx: Context) -> Optional[Diagnosis]:
    """An extension build stopped because the CUDA toolkit (nvcc, CUDA_HOME) is of a newer major version than the CUDA
    torch was built with: torch only refuses a different major version. The machine's toolkit is the harder of the two
    to change; a torch built for it is one pip line, where pytorch.org publishes one."""
    text = " ".join(ctx.sheet.lines)
    found = _TOOLKIT_MISMATCH.search(text)
    if found is None or _NO_TORCH_FOR_IT.search(text):
        return None
    toolkit, torch = (int(found.group(1)), int(found.group(2))), (int(found.group(3)), int(found.group(4)))
    if toolkit[0] <= torch[0]:
        return None   # an older toolkit: install the toolkit of torch's CUDA (the abi-mismatch reading)
    label = max((label for label in _TORCH_RELEASES_OF
                 if int(label[2:-1]) == toolkit[0] and int(label[-1]) <= toolkit[1]), default=None,
                key=lambda label: int(label[2:]))
    if label is None:
        return None
    line = next(e for e in _lines_matching(ctx, r"mismatches the version|detected CUDA version"))
    have, want = f"{torch[0]}.{torch[1]}", f"{toolkit[0]}.{toolkit[1]}"
    return _make("torch-build", f"torch is a CUDA {have} build beside a CUDA {want} toolkit",
                 f"the extension is compiled by the CUDA {want} toolkit (nvcc), but the installed torch was built with "
                 f"CUDA {have}; torch refuses to build extensions across CUDA major versions",
                 f"install the torch built for CUDA {want}: pip uninstall -y torch; pip install torch --index-url "
                 f"https://download.pytorch.org/whl/{label} (torch {_TORCH_RELEASES_OF[label]}), then build the "
                 f"extension again (pip install --no-build-isolation ...); or build it with a CUDA {have} toolkit "
                 f"(CUDA_HOME=/usr/local/cuda-{have})", [ctx.line_fact(line)], [line])


# torch's dispatcher: an operator of a library beside torch (torchvision's nms, roi_align; torchaudio's) has no CUDA
# kernel registered, while its CPU one is
_NO_CUDA_KERNEL = re.compile(r"Could not run '(torchvision|torchaudio)::(\w+)' with arguments from the '(CUDA|HIP)' "
                             r"backend")


@rule("torch-build")
def torchvision_without_cuda_kernels(ctx: Context) -> Optional[Diagnosis]:
    """torchvision (or torchaudio) registers its CUDA kernels only in its CUDA build and only against the torch it was
    built for: a CPU torchvision, or one from another index than torch's, leaves its operators CPU-only."""
    lines = _lines_matching(ctx, _NO_CUDA_KERNEL.pattern)
    if not lines:
        return None
    found = _NO_CUDA_KERNEL.search(lines[0].line)
    package, op, backend = found.group(1), found.group(2), found.group(3)
    cuda = _torch_cuda(_text(ctx))
    label = f"cu{cuda[0]}{cuda[1]}" if cuda else "rocm7.2" if backend == "HIP" else "cu128"
    return _make("torch-build", f"{package} has no {backend} kernels",
                 f"{package}::{op} has only its CPU kernel: the {package} loaded is a CPU build, or one built for "
                 "another torch than the CUDA one installed",
                 f"reinstall torch, torchvision and torchaudio together from one index, in the Python the program "
                 f"runs: pip uninstall -y torch torchvision torchaudio; pip install torch torchvision torchaudio "
                 f"--index-url https://download.pytorch.org/whl/{label}; python -c \"import torchvision; "
                 f"print(torchvision.__version__)\" must show the same +{label} tag as torch",
                 [ctx.line_fact(lines[0])], lines[:1])


# a user asking whether torch supports (or runs on) their new card: "Will pytorch support this card?", "can't run it
# with pytorch", "does PyTorch support the RTX 5090"
_SUPPORT_ASKED = re.compile(r"(?i)\b(?:py)?torch\b[^.?\n]{0,60}\bsupport|\bsupport\w*\b[^.?\n]{0,60}\b(?:py)?torch\b|"
                            r"\bcan'?t (?:run|use)\b[^.?\n]{0,30}\b(?:with|on|in) (?:py)?torch\b")


@rule("torch-build")
def torch_support_for_a_new_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Whether torch runs on a newer NVIDIA GPU is a matter of the CUDA its build was made with: every build with a
    CUDA that targets the GPU's compute capability carries it. A question about support with no error beside it is
    answered by that build."""
    lines = _lines_matching(ctx, _SUPPORT_ASKED.pattern)
    if not lines or any(e.family for e in ctx.errors):
        return None
    arch, fact = ctx.arch()
    cc = int(arch[3:]) if arch and re.fullmatch(r"sm_\d+", arch) else None
    first = _FIRST_CUDA.get(cc) if cc else None
    if first is None:
        return None
    label = _label_for(first)
    # the paste shows the installed torch failing on the GPU (a CUDA error), not only a question: the build it has
    # lacks the GPU's code, the arch reading, with the same remedy
    failing = re.search(r"(?i)CUDA kernel errors|CUDA error|no kernel image|RuntimeError", _text(ctx))
    return _make("arch-missing" if failing else "torch-build", f"torch runs on {arch} in its CUDA {first[0]}.{first[1]}+ builds",
                 f"torch carries the code for {arch} in every build made with CUDA {first[0]}.{first[1]} or newer (the "
                 "first CUDA whose compiler targets it); an older CUDA build of torch cannot run on the GPU",
                 f"pip uninstall -y torch; pip install torch --index-url https://download.pytorch.org/whl/{label} "
                 f"(torch {_TORCH_RELEASES_OF[label]}; or a newer cu12x index); python -c 'import torch; print(torch."
                 f"cuda.get_arch_list())' must list {arch}", [ctx.line_fact(lines[0]), fact], lines[:1],
                 confirmed=False)


# The newest CUDA each torch release was built with on pytorch.org (pytorch.org/get-started/previous-versions)
_TORCH_NEWEST_CUDA = (((1, 2), (10, 0)), ((1, 5), (10, 1)), ((1, 7), (10, 2)), ((1, 8), (11, 0)), ((1, 10), (11, 1)),
                      ((1, 11), (11, 3)), ((1, 12), (11, 5)), ((1, 13), (11, 6)), ((2, 0), (11, 7)), ((2, 1), (11, 8)))
# torch's version said in words or by pip / collect_env ("the version of PyTorch is 1.1.0", "torch==1.4.0")
_TORCH_SAID = re.compile(r"(?i)\b(?:py)?torch\b(?: version)?(?:\s+(?:is|was|=|==)\s*|==|\s+v?)(\d)\.(\d+)(?:\.\d+)?\b|"
                         r"version of (?:py)?torch is (\d)\.(\d+)")
# a first CUDA call that takes minutes (the driver compiling PTX for a GPU the binary has no code for), or fails
_JIT_SLOW = re.compile(r"(?i)\b(?:\d+|several|ten|many) minutes\b|\btakes? (?:very )?long\b|\bvery slow\b|"
                       r"\bno kernel image\b|\bhangs?\b|\bstuck\b")


@rule("torch-build")
def torch_release_older_than_the_gpu(ctx: Context) -> Optional[Diagnosis]:
    """A torch release whose newest CUDA build predates the GPU (an Ampere card under torch 1.1): it carries no code
    for the GPU, so the first CUDA call either fails or has the driver compile PTX for minutes. A release built with
    a CUDA that targets the GPU is the fix."""
    arch, fact = ctx.arch()
    cc = int(arch[3:]) if arch and re.fullmatch(r"sm_\d+", arch) else None
    first = _FIRST_CUDA.get(cc) if cc else None
    said = _TORCH_SAID.search(_text(ctx))
    if first is None or said is None:
        return None
    release = (int(said.group(1) or said.group(3)), int(said.group(2) or said.group(4)))
    newest = next((cuda for before, cuda in _TORCH_NEWEST_CUDA if release < before), None)
    if newest is None or newest >= first:
        return None
    lines = _lines_matching(ctx, _JIT_SLOW.pattern)
    if not lines:
        return None
    label = _label_for(first)
    return _make("torch-build", f"torch {release[0]}.{release[1]} predates {arch}",
                 f"torch {release[0]}.{release[1]} was built with CUDA {newest[0]}.{newest[1]} at most, and {arch} "
                 f"came with CUDA {first[0]}.{first[1]}: the build has no code for the GPU, so the first CUDA call "
                 "has the driver compile PTX for minutes (or fails)",
                 f"install a torch built with CUDA {first[0]}.{first[1]} or newer: pip install torch --index-url "
                 f"https://download.pytorch.org/whl/{label} (torch {_TORCH_RELEASES_OF[label]}); python -c 'import "
                 f"torch; print(torch.cuda.get_arch_list())' must list {arch} (or its family's sm_{cc // 10}0)",
                 [f for f in (fact,) if f], lines[:1])


# a Blackwell GPU named by its family or model (RTX 50 series, B100/B200/GB200) and a CUDA release asked for by number
_BLACKWELL = re.compile(r"(?i)\bblackwell\b|\brtx[- ]?50[5-9]0(?:\s*ti)?\b|\b(?:G?B[12]00|RTX PRO 6000)\b")
_CUDA_ASKED = re.compile(r"(?i)\bcuda[- ]?(1[23])\.(\d)\b[^\n]{0,40}?\bsupport|\bsupport\w*\b[^\n]{0,40}?\bcuda[- ]?(1[23])\."
                         r"(\d)\b|\brequires? cuda[- ]?(1[23])\.(\d)\b")


@rule("torch-build")
def cuda_release_asked_for_a_blackwell_gpu(ctx: Context) -> Optional[Diagnosis]:
    """A user asking for a build made with a newer CUDA (12.9, 13) for a Blackwell card: the GPU needs a build made
    with CUDA 12.8 or newer, which torch's cu128 wheels (2.7 and newer) and the packages built for them already are;
    nvidia-smi's "CUDA Version" is the newest the driver runs, not what a build must be made with."""
    text = _text(ctx)
    asked = _CUDA_ASKED.search(text)
    if asked is None or not _BLACKWELL.search(text) or any(e.family for e in ctx.errors):
        return None
    major, minor = (int(g) for g in [g for g in asked.groups() if g][:2])
    if (major, minor) <= (12, 8):
        return None   # what it asks for is what the GPU needs: the support reading answers that
    lines = _lines_matching(ctx, _CUDA_ASKED.pattern)
    return _make("torch-build", "a Blackwell GPU runs on CUDA 12.8 builds",
                 f"the GPU needs builds made with CUDA 12.8 or newer, not CUDA {major}.{minor} ones; nvidia-smi's "
                 "\"CUDA Version\" is the newest CUDA the driver can run, not one the packages must be built with",
                 "pip install torch --index-url https://download.pytorch.org/whl/cu128 (torch 2.7 and newer; the cu128 "
                 "build carries sm_120 and sm_100) and the newest release of the other packages (bitsandbytes, "
                 "xformers, flash-attn wheels built for that torch and cu128); python -c 'import torch; "
                 "print(torch.cuda.get_arch_list())' must list sm_120 (sm_100 on B200)", [ctx.line_fact(lines[0])],
                 lines[:1], confirmed=False)
