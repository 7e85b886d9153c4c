"""A CUDA kernel error on a Blackwell card under a torch that does not show it was built for one: torch's CUDA builds
before 12.8 carry no Blackwell code, so the first kernel launch fails ("CUDA kernel errors might be asynchronously
reported" is the tail torch prints under it). The arch reading: the build that carries the card's code."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, rule
from steadytune.doctor.rules.install.shared import cuda_of_label

# The first CUDA with each Blackwell target and the pytorch.org index that has it (torch 2.7 release notes: CUDA 12.8
# builds with sm_100 and sm_120; sm_103 and sm_121 came with CUDA 12.9)
_BLACKWELL = {100: "cu128", 101: "cu128", 120: "cu128", 103: "cu129", 121: "cu129"}
# the tail torch adds to a CUDA error raised at a kernel launch
_KERNEL_ERROR = re.compile(r"(?i)CUDA kernel errors might be asynchronously reported|no kernel image is available")
# the families whose lines a missing arch also explains
_SYMPTOMS = {None, "arch-missing", "torch-build"}


def _torch_with_blackwell(ctx: Context) -> bool:
    """A torch shown as 2.7 or newer with a CUDA 12.8+ tag (or no tag): its build has the Blackwell code."""
    for value in ctx.sheet.values("torch"):
        m = re.match(r"(\d+)\.(\d+)[.\w]*?(?:\+cu(\d+))?$", value)
        if m and (int(m.group(1)), int(m.group(2))) >= (2, 7) and (not m.group(3) or int(m.group(3)) >= 128):
            return True
    return False


@rule("arch-missing")
def kernel_error_on_blackwell(ctx: Context) -> Optional[Diagnosis]:
    if any(e.family not in _SYMPTOMS for e in ctx.errors):
        return None
    lines = _lines_matching(ctx, _KERNEL_ERROR.pattern)
    if not lines or _torch_with_blackwell(ctx):
        return None
    card = next((g for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_\d{3}", g.detail or "")
                 and int(g.detail[3:]) in _BLACKWELL), None)
    if card is None:
        return None
    cc = int(card.detail[3:])
    label = _BLACKWELL[cc]
    cuda = cuda_of_label(label)
    diagnosis = _make("arch-missing", f"this torch has no kernels for the {card.value} ({card.detail})",
                      f"the {card.value} is compute capability {str(cc)[:-1]}.{str(cc)[-1]}; torch builds made with a "
                      f"CUDA older than {cuda} carry no code for it, so the first kernel launch fails",
                      f"install a torch built with CUDA {cuda} (torch 2.7 or newer): pip uninstall -y torch torchvision "
                      f"torchaudio; pip install torch torchvision torchaudio --index-url "
                      f"https://download.pytorch.org/whl/{label} (the same command on Windows and Linux); python -c "
                      f"'import torch; print(torch.cuda.get_arch_list())' must list {card.detail}", [card], lines[:1],
                      confirmed=False)
    # the build's missing code is the root: a reinstall reading that names no CUDA comes after it
    return _ahead_of(diagnosis, "torch-build")
