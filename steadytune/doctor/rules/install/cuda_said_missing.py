""""I have CUDA, but it says no CUDA": the user has installed the CUDA toolkit (or sees it in nvidia-smi) and the
program still reports no CUDA. A program on torch sees CUDA only through torch's own CUDA build; the toolkit beside it
plays no part. So with an NVIDIA card and no driver error, the torch installed is the CPU build (pip's default torch on
Windows, or one pulled by another package), and the fix is the CUDA build from pytorch.org's index."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _cuda_index_for_driver, _lines_matching, _make, _text, \
    _vendor, rule

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
