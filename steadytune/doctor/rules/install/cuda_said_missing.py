""""I have CUDA, but it says no CUDA": the user has installed the CUDA toolkit (or sees it in nvidia-smi) and the
program still reports no CUDA. A program on torch sees CUDA only through torch's own CUDA build; the toolkit beside it
plays no part. So with an NVIDIA card and no driver error, the torch installed is the CPU build (pip's default torch on
Windows, or one pulled by another package), and the fix is the CUDA build from pytorch.org's index."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _cuda_index_for_driver, _lines_matching, _make, _text, \
    _vendor, rule
from steadytune.doctor.rules.install.torch_cuda import torch_releases_of

# CUDA said to be there: "有CUDA环境", "装了CUDA 11.8", "CUDA 12.4 is installed", "I have CUDA 12.1"
_CUDA_PRESENT = re.compile(r"(?i)有\s*cuda|(?:装了|安装了)\s*cuda|cuda\s*(?:环境|已(?:经)?安装)|\bi (?:have|installed|"
                           r"already installed) (?:the )?cuda\b|\bcuda(?: toolkit)?(?: v?\d+(?:\.\d+)?)? (?:is )?"
                           r"(?:already )?installed\b")
# the program saying it finds none: "却显示未检测到", "检测不到cuda", "says no CUDA detected", "CUDA is not available"
_NONE_FOUND = re.compile(r"(?i)(?:未|没有?)检测到|检测不到|识别不到|\bno cuda (?:detected|found|available|device)|"
                         r"\bcuda (?:is )?not (?:detected|found|available)\b|(?:can't|cannot|doesn't|does not|don't) "
                         r"(?:detect|find|see) (?:the |any )?(?:cuda|gpu)\b|is_available\(\)\W{0,6}False")


@rule("torch-build")
def cuda_installed_but_not_seen(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the user's word that CUDA is installed, the program's word that it finds none, an NVIDIA (or no
    named) GPU, no torch build shown that has CUDA, and no error line of another family."""
    text = _text(ctx)
    if not _CUDA_PRESENT.search(text) or _vendor(ctx) == "amd":
        return None
    said = _lines_matching(ctx, _NONE_FOUND)
    if not said or any(e.family not in (None, "torch-build", "visibility") for e in ctx.errors):
        return None
    if any(f.detail in ("cuda", "rocm") for f in ctx.sheet.of("torch")):
        return None   # a CUDA torch is shown: the driver or the device, not the build
    arch, _fact = ctx.arch()
    index = _cuda_index_for_driver(ctx, arch)
    return _make("torch-build", "the torch installed is the CPU build",
                 "the program sees CUDA only through torch's own CUDA build; the CUDA toolkit installed beside it plays "
                 "no part. With CUDA installed and still none detected, the torch is the CPU build (pip's default "
                 "torch on Windows, or one another package pulled in)",
                 f"check it: python -c \"import torch; print(torch.__version__, torch.version.cuda)\" (+cpu and None); "
                 f"then pip uninstall -y torch torchvision torchaudio and {index}", [ctx.line_fact(said[0])], said[:1],
                 confirmed=False)


# the user's word that the torch installed is the CPU build: "torch installed w/o gpu support", "pip pulled the
# CPU-only torch", "installed the CPU version of pytorch"
_CPU_TORCH_SAID = re.compile(r"(?i)\b(?:py)?torch\w*\b[^.\n]{0,40}\b(?:without|w/o|with no|lacks?|no)\s+"
                             r"(?:gpu|cuda|nvidia)\s+support\b|"
                             r"\bcpu[- ]only\s+(?:build\s+of\s+|version\s+of\s+)?(?:py)?torch\b|"
                             r"\b(?:py)?torch\b[^.\n]{0,30}\bcpu[- ]only\b|\bcpu (?:version|build) of (?:py)?torch\b")
# programs installed from PyPI that pin one torch release, which pip then takes from PyPI (the CPU build on Windows):
# (the program as named, its pin, source)
PINNED_TORCH = (
    (r"chatterbox(?:-tts)?", "2.6.0", "chatterbox-tts pyproject.toml: torch==2.6.0, torchaudio==2.6.0"),
    (r"audiocraft", "2.1.0", "audiocraft requirements.txt: torch==2.1.0"),
)
# the CUDA wheel labels of pytorch.org's index this reading offers, oldest first, with the torch releases that have each
# (one table: torch_cuda's, from pytorch.org get-started/previous-versions): (label, first release, last release)
_LABELS = tuple((label, *torch_releases_of(label)) for label in ("cu118", "cu121", "cu124", "cu126", "cu128"))
# the CUDA the user says the machine has ("My CUDA version is 12.5", "CUDA 12.4", nvidia-smi's "CUDA Version: 12.5")
_CUDA_SAID = re.compile(r"(?i)\bCUDA(?:\s+version)?(?:\s+is|:)?\s+v?(1[12])\.(\d)\b")


def index_for(cuda: Optional[tuple[int, int]], pin: Optional[str]) -> str:
    """The pytorch.org CUDA label for the machine's CUDA and the program's torch pin: the driver's major (CUDA minor
    version compatibility runs any 12.x wheel on a 12.x driver), below cu128 unless the driver says 12.8, and a label
    that has the pinned release."""
    release = tuple(int(x) for x in pin.split(".")[:2]) if pin else None
    fits = [label for label, first, last in _LABELS
            if (release is None or first <= release <= last)
            and (cuda is None or (int(label[2:4]) == cuda[0] and (label != "cu128" or cuda >= (12, 8))))]
    return fits[-1] if fits else ("cu118" if cuda and cuda[0] == 11 else "cu126")


@rule("torch-build")
def cpu_torch_said(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the user's word that torch came without GPU support, an NVIDIA (or no named) GPU, and no error line
    of another family. The program's torch pin (a table) and the CUDA said pick the index."""
    said = _lines_matching(ctx, _CPU_TORCH_SAID)
    text = _text(ctx)
    if not said or _vendor(ctx) == "amd" or any(e.family not in (None, "torch-build") for e in ctx.errors):
        return None
    if any(f.detail in ("cuda", "rocm") for f in ctx.sheet.of("torch")):
        return None   # a GPU torch is shown: the build is right
    program = next(((m.group(0), pin, source) for pattern, pin, source in PINNED_TORCH
                    for m in [re.search(rf"(?i)(?<![\w-]){pattern}(?![\w-])", text)] if m), None)
    cuda_m = _CUDA_SAID.search(text)
    cuda = (int(cuda_m.group(1)), int(cuda_m.group(2))) if cuda_m else None
    pin = program[1] if program else None
    label = index_for(cuda, pin)
    torch = f"torch=={pin} torchvision torchaudio=={pin}" if pin else "torch torchvision torchaudio"
    where = (f" ({program[0]} pins torch {pin}: {program[2]})" if program else "")
    return _make("torch-build", "pip installed the CPU build of torch",
                 "pip takes torch from PyPI, whose Windows wheels (and the ones a package's pin pulls in) are the CPU "
                 "build; the CUDA builds are on pytorch.org's own index" + where,
                 f"pip uninstall -y torch torchvision torchaudio; pip install {torch} --index-url "
                 f"https://download.pytorch.org/whl/{label}"
                 + (f" (CUDA {cuda[0]}.{cuda[1]} on the machine: any CUDA {cuda[0]} build runs on its driver)" if cuda
                    else "") + "; then python -c \"import torch; print(torch.cuda.is_available())\" must print True",
                 [ctx.line_fact(said[0])], said[:1])
