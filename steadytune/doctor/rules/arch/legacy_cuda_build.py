"""A pre-Turing NVIDIA GPU (Maxwell sm_5x, Pascal sm_6x, Volta sm_70) left on the CPU after an update or a fresh
install: the installer or pip now picks a torch built for a CUDA whose wheels no longer carry the GPU's code (the CUDA 13
builds start at sm_75; cu128 dropped Maxwell and Pascal from torch 2.8 and Volta from 2.11), so the GPU is detected yet
nothing runs on it ("ignores the GPU", "does not load the model into VRAM", "runs on the CPU"), often with no error.
The fix is the legacy CUDA 12.6 build, which still carries sm_50 to sm_90.

Facts: pytorch/pytorch#172352 (release 2.11 support matrix: cu126 Maxwell 5.0 to Hopper 9.0; cu128 and cu130 from
Turing 7.5), #157517 (Maxwell / Pascal / Volta deprecated for CUDA 13); NVIDIA's CUDA 13.0 release notes (no offline
compilation before compute capability 7.5); unsloth#7765 (a V100 on driver 580 got cu130 wheels, fixed by falling back
to cu126). The index line comes from fixes.cuda_wheel_for.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import cuda_wheel_for
from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, rule


# the GPU seen but unused, in words
_UNUSED = re.compile(r"(?i)\bignor(?:es|ing|ed)\b.{0,15}\bGPU\b|\b(?:does ?n.t|does not|doesn't|won't|not|never)\s+(?:load|"
                     r"put|use|using|run|running|offload)\w*\b.{0,30}\b(?:GPU|VRAM|CUDA)\b|\b(?:runs?|running|ran|falls? "
                     r"back|fell back)\s+(?:only\s+)?(?:on|to)\s+(?:the\s+)?CPU\b|\bCPU[- ]only\b|\bonly (?:uses?|using) "
                     r"(?:the )?CPU\b")
# something new was installed: a release, an update, a reinstall, a CUDA 13 driver or build
_NEW = re.compile(r"(?i)\blatest (?:release|version|update|build)\b|\b(?:after|since) (?:the |an? |updating|upgrading)?"
                  r"(?:update|upgrade|reinstall)\w*|\bre-?install\w*\b|\bprevious (?:versions?|releases?)\b|\bcu13\d\b|"
                  r"CUDA Version:\s*13\.|\bdriver\s*(?:version\s*)?:?\s*5[89]\d\.|\bnew (?:version|release)\b")
_ERRORS_OF_THEIR_OWN = re.compile(r"(?i)no kernel image|not compatible with the current PyTorch installation|"
                                  r"sm_\d+ is not compatible")


_CPU_TORCH = re.compile(r"(?i)\+cpu\b|Torch not compiled with CUDA enabled|torch\.version\.cuda\W{0,10}None")


@rule("arch-missing")
def pre_turing_gpu_left_on_the_cpu(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if _ERRORS_OF_THEIR_OWN.search(text):
        return None   # torch's own arch messages: the arch readings that quote them
    if _CPU_TORCH.search(text):
        return None   # a CPU-only torch shown: the torch-build reading's, not a CUDA build without the arch
    arch, fact = ctx.arch()
    cc = int(arch[3:]) if arch and re.fullmatch(r"sm_\d+", arch) else None
    if cc is None or not 50 <= cc < 75:
        return None
    unused = _lines_matching(ctx, _UNUSED)
    new = _lines_matching(ctx, _NEW)
    if not unused or not new:
        return None
    diagnosis = _make("arch-missing", f"the new build's CUDA no longer carries {arch}",
                 f"the GPU ({arch}) is detected, but the torch (and bundled kernels) the update installed are a CUDA "
                 "build without its code: CUDA 13 builds start at sm_75, and cu128 left Maxwell / Pascal out from torch "
                 "2.8 and Volta from 2.11, so the work silently runs on the CPU",
                 f"reinstall the CUDA 12.6 build in the program's own environment: {cuda_wheel_for(arch)}; for an app "
                 "with its own installer, pick its CUDA 12.6 / cu126 option (or pin its torch to cu126) so it does not "
                 "choose from the driver's newest CUDA; then check torch.cuda.is_available() and "
                 "torch.cuda.get_arch_list()", [fact], unused[:1] + new[:1], confirmed=False)
    # ahead of the CPU-only-torch reading of the same words: after an update on a pre-Turing GPU, a CUDA torch without
    # the GPU's code is what leaves it on the CPU, and a plain reinstall from the newest index repeats it
    return _ahead_of(diagnosis, "torch-build")
