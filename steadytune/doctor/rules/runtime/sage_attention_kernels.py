"""SageAttention's compiled kernels against the GPU and the CUDA of the torch it runs with. Two readings:

  - its own assert "SM89 kernel is not available" (SM80 / SM90 alike: sageattention/core.py checks the kernel module
    it was built with) on a card at or above that compute capability: the installed build simply lacks kernels it
    should have, a stale build made for another torch / CUDA (before a move to cu128, say) or for other archs. pip
    uninstall sageattention (every copy), then build or install it again against the torch now in place
    (thu-ml/SageAttention#173: an RTX 5080 after the move to torch 2.7 cu128, fixed by uninstalling and reinstalling);
    on a card below it the GPU really has no such kernel, which this reading leaves alone;
  - SageAttention 2.2.0 (SageAttention2++) beside a torch built with CUDA older than 12.8 failing with CUDA errors
    ("unspecified launch failure", a kernel that "failed to dispatch"): its 2++ kernels need CUDA >= 12.8, therefore
    PyTorch >= 2.7 (woct0rdho/SageAttention#46, the maintainer: "SageAttention 2.2 (also known as SageAttention2++) only
    works with CUDA >= 12.8"; thu-ml/SageAttention PR #202: the same launch failure on CUDA 12.5 with an RTX 4090).
    2.1.1 (SageAttention2) runs on the older CUDA, which the reporter confirmed.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, on_windows, rule, _text

_NOT_AVAILABLE = re.compile(r"(?i)SM(\d{2,3}) kernel is not available")
# the card by name, as its compute capability (the kernel asked for is compared with it)
_CARDS = ((r"(?i)\bRTX ?50[5-9]0|(?<![\w.])50[5-9]0(?: ?Ti)?\b|\bRTX PRO 6000\b|\bsm_?120\b", 120),
          (r"(?i)\bB200\b|\bGB200\b|\bsm_?100\b", 100),
          (r"(?i)\bH100\b|\bH200\b|\bH800\b|\bGH200\b", 90),
          (r"(?i)\bRTX ?40[5-9]0|(?<![\w.])40[6-9]0(?: ?Ti)?\b|\bL40S?\b|\bL4\b|\bRTX \d000 Ada\b", 89),
          (r"(?i)\bRTX ?30[5-9]0|(?<![\w.])30[6-9]0(?: ?Ti)?\b|\bA10G?\b|\bA40\b|\bRTX A\d000\b", 86),
          (r"(?i)\bA100\b|\bA800\b", 80),
          (r"(?i)\bRTX ?20[5-8]0|\bGTX ?16[5-6]0|\bT4\b", 75))
_SAGE = re.compile(r"(?i)sage-?attention|\bsageattn\w*|\bsage\b")


def _card(text: str) -> Optional[tuple[str, int]]:
    for pattern, cc in _CARDS:
        m = re.search(pattern, text)
        if m:
            return m.group(0), cc
    return None


@rule("abi-mismatch")
def sage_attention_build_without_its_kernels(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: SageAttention's "SMxx kernel is not available" on a card at or above xx (or none named)."""
    said = _lines_matching(ctx, _NOT_AVAILABLE)
    if not said:
        return None
    text = _text(ctx)
    wanted = int(_NOT_AVAILABLE.search(text).group(1))
    card = _card(text)
    if card and card[1] < wanted:
        return None   # the GPU really lacks that kernel: the node's fp8 / sm90 mode asked of an older card
    windows = on_windows(ctx, text)
    reinstall = ("install the SageAttention wheel built for this very torch, CUDA and Python (woct0rdho/SageAttention's "
                 "releases name them: sageattention-<release>+cu128torch<torch>-...-win_amd64.whl)" if windows else
                 "build it again against this torch: git clone https://github.com/thu-ml/SageAttention; cd "
                 "SageAttention; pip install . --no-build-isolation (a fresh checkout, no old build/ folder; the CUDA "
                 "toolkit must be torch's CUDA or newer)")
    on = f"the {card[0]} (compute capability {card[1] // 10}.{card[1] % 10})" if card else "this GPU"
    return _make("abi-mismatch", f"the installed SageAttention was built without its SM{wanted} kernel",
                 f"SageAttention checks the kernel module it was compiled with; {on} can run the SM{wanted} kernel, "
                 "so the installed build lacks it: a stale build made for another torch / CUDA (before the move to "
                 "the current torch) or for other archs",
                 f"pip uninstall sageattention -y (repeat until pip says it is not installed, so no old compiled "
                 f"build is left), then {reinstall}; python -c \"import sageattention.core as c; print(c.SM{wanted}"
                 f"_ENABLED)\" must print True", [], said[:1], confirmed=card is not None)


# SageAttention 2.2.0 named: a wheel, a version, "Sage 2.2"
_SAGE_22 = re.compile(r"(?i)sage-?attention[-_ =]*2\.2\.\d|sage\w*\s*2\s*(?:\.|v)?\s*2\.\d|\bsage\b.{0,20}\b2\.2(?:\.0)?\b|"
                      r"v2\.2\.0-windows")
# torch's CUDA from a torch build or the wheel's own name (+cu126, cu126torch2.6.0)
_CUDA_TAG = re.compile(r"(?i)(?:\+|\b)cu(1[12]\d)(?:torch|\b)")
_CUDA_ERROR = re.compile(r"(?i)unspecified launch failure|failed to dispatch data type|illegal memory access|"
                         r"CUDA error:|CUDA kernel errors")


@rule("attention")
def sage_attention_22_before_cuda_128(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: SageAttention 2.2 named, only CUDA tags older than 12.8 in the paste, and a CUDA error."""
    text = _text(ctx)
    if not _SAGE_22.search(text):
        return None
    tags = {int(t) for t in _CUDA_TAG.findall(text)}
    if not tags or max(tags) >= 128:
        return None
    failing = _lines_matching(ctx, _CUDA_ERROR)
    if not failing:
        return None
    cuda = max(tags)
    return _first(_make(
        "attention", "SageAttention 2.2 needs CUDA 12.8, and this torch is older",
        f"SageAttention 2.2.0 (SageAttention2++) runs kernels that work only with CUDA 12.8 or newer (so torch 2.7 "
        f"or newer); this torch is a CUDA {cuda // 10}.{cuda % 10} build, and its 2.2 kernels fail with CUDA errors "
        "(wheels for older CUDA that do not fall back to SageAttention2's kernel)",
        "either move to a torch built with CUDA 12.8 (torch 2.7 or newer, pip install torch --index-url "
        "https://download.pytorch.org/whl/cu128) with the SageAttention 2.2.0 build for it; or keep this torch and "
        f"install SageAttention 2.1.1 built for it (cu{cuda}, the same torch and Python), or a later 2.2.0 wheel for "
        f"cu{cuda} whose notes say it falls back to the SageAttention2 kernel", [], failing[:1]))
