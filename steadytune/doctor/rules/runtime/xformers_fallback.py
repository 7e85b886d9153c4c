"""An image app that stopped working on a Blackwell card (RTX 50xx, sm_120) after torch was already moved to a CUDA
12.8+ build: torch's own kernels cover the card, and the piece left without them is the xformers installed beside it
(a build made before sm_120, or a dev build for another torch). The standard way out is the app's switch that turns
xformers off, so attention runs on PyTorch's own SDPA; an xformers built for this torch is the other
(lllyasviel/stable-diffusion-webui-forge#2998: an RTX 5090 on torch 2.7.1+cu128 with xformers 0.0.32.dev, fixed by
disabling xformers). The switches, from each app's argument parser: Forge's backend/args.py --disable-xformers
(PyTorch attention: --attention-pytorch); ComfyUI's --disable-xformers; the A1111 web UI uses xformers only with
--xformers (its --opt-sdp-attention is PyTorch's). Checked round 19 against the parsers themselves:
lllyasviel/stable-diffusion-webui-forge backend/args.py (--disable-xformers, --attention-pytorch),
comfyanonymous/ComfyUI comfy/cli_args.py (--disable-xformers), AUTOMATIC1111/stable-diffusion-webui modules/cmd_args.py
(--xformers, --opt-sdp-attention)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_BLACKWELL = re.compile(r"(?i)\bRTX ?50[5-9]0(?: ?Ti)?\b|\bRTX ?50(?:s|xx|x0| ?series)\b|(?<![\w])50[5-9]0(?: ?Ti)?\b|\bsm_?12\d\b|\bBlackwell\b|"
                        r"\bRTX PRO 6000\b")
# torch shown as a CUDA 12.8-or-newer build: its own kernels carry sm_120
_TORCH_CU128 = re.compile(r"(?i)\btorch\S*\s*(?:==\s*)?2\.(?:[7-9]|1\d)\S*\+cu1(?:2[89]|3\d)\b|\+cu1(?:2[89]|3\d)\b")
_XFORMERS = re.compile(r"(?i)\bxformers\b\s*(?:==|version:?)?\s*\d+\.\d+\.\d+\S*")
# xformers said to fail in one line ("Xformers does not work on RTX 50s", "xformers broken on my 5090")
_XFORMERS_FAILS = re.compile(r"(?i)\bxformers\b.{0,40}(?:doesn'?t work|does not work|not working|broken|fails?\b|"
                             r"won'?t work|crash\w*|error)")
# a torch build older than CUDA 12.8 shown in the paste
_TORCH_OLDER = re.compile(r"(?i)\+cu1(?:1\d|2[0-7])\b")
# the app failing, in the user's words or an error line
_FAILING = re.compile(r"(?i)stopped working|not working|doesn'?t work|does not work|won'?t (?:start|run|work)|fails?\b|"
                      r"\berror\b|crash\w*|no kernel image")

# (what names the app, its switch that turns xformers off)
_SWITCHES = (
    # Forge Neo (Haoming02/sd-webui-forge-classic's backend/args.py: --disable-xformers, and PyTorch attention as
    # --use-pytorch-cross-attention, not Forge's --attention-pytorch) (round 20, r20d)
    (r"(?i)\bforge[-_ ]?neo\b|\bwebui neo\b|sd-webui-forge-classic", "add --disable-xformers to COMMANDLINE_ARGS in "
     "webui-user.bat / webui-user.sh (Forge Neo then runs PyTorch attention; --use-pytorch-cross-attention says it "
     "outright)"),
    (r"(?i)\bForge\b|stable-diffusion-webui-forge", "add --disable-xformers to COMMANDLINE_ARGS in webui-user.bat / "
     "webui-user.sh (Forge then runs PyTorch attention; --attention-pytorch says it outright)"),
    (r"(?i)\bComfy\s?UI\b", "start ComfyUI with --disable-xformers (it then uses PyTorch's attention)"),
    (r"(?i)stable-diffusion-webui|\bA1111\b|AUTOMATIC1111|webui-user", "remove --xformers from COMMANDLINE_ARGS in "
     "webui-user.bat / .sh (use --opt-sdp-attention, PyTorch's attention)"),
)


@rule("attention")
def xformers_left_behind_on_blackwell(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a Blackwell card, torch shown as a cu128+ build, an xformers release listed, and the app failing,
    with no error line of another family."""
    text = _text(ctx)
    if not _BLACKWELL.search(text):
        return None
    listed = _XFORMERS.search(text)
    # the user's own words that xformers fails on the card ("Xformers does not work on RTX 50s"), where no torch
    # older than CUDA 12.8 is shown (that torch, not xformers, would be the piece without the card's kernels)
    said = _lines_matching(ctx, _XFORMERS_FAILS)
    if not ((_TORCH_CU128.search(text) and listed) or (said and not _TORCH_OLDER.search(text))):
        return None
    if any(e.family not in (None, "attention", "wheel-platform", "arch-missing") for e in ctx.errors):
        return None
    failing = said or _lines_matching(ctx, _FAILING)
    if not failing:
        return None
    switch = next((fix for names, fix in _SWITCHES if re.search(names, text)),
                  "start the app without xformers (its switch: --disable-xformers in Forge and ComfyUI, no --xformers "
                  "in the A1111 web UI), or pip uninstall xformers with the app's Python")
    which = f"the xformers installed ({listed.group(0)})" if listed else "the xformers installed"
    torch = ("torch here is a CUDA 12.8+ build, which carries the card's (sm_120) kernels; " if _TORCH_CU128.search(text)
             else "")
    return _make("attention", "xformers has no working code for the Blackwell card",
                 f"{torch}{which} is a build made before the card or for another torch, and the app's attention "
                 "goes through it (xformers is optional: PyTorch's own attention covers the card)",
                 f"{switch}; or uninstall xformers from the app's Python (pip uninstall xformers in its venv) so the "
                 "app falls back to PyTorch attention (SDPA), or SageAttention 2 where the app offers it; later, an "
                 "xformers release built for this very torch (its release notes pair them; pip install it with "
                 "--no-deps so torch stays) can be turned back on", [], failing[:1])
