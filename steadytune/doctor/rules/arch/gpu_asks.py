"""The line of a short paste that asks for a GPU itself (support for it, a build for it), by the names the paste gives
the GPU. No rules: arch_missing.py's support request and build_asks.py read with it."""

from __future__ import annotations

import re

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import Context, _lines_matching


def gpu_names(ctx: Context, arch: str) -> str:
    """A regex for the GPU as the paste names it: its gfx target, its card names (spaces optional, "RX9070" and
    "RX 9070"), a model number alone ("9070xt")."""
    names = {arch} | {g.value for g in ctx.sheet.of("gpu") if g.detail == arch}
    spelled = [r"\s?".join(re.escape(word) for word in name.split()) for name in sorted(names, key=len, reverse=True)]
    # a bare model number only with the series' prefix or suffix ("RX 9070", "9070xt"), never any four digits
    return rf"(?:AMD |NVIDIA |Radeon |GeForce )?(?:{'|'.join(spelled)}|(?:RX ?\d{{4}}|\d{{4}} ?(?:XTX|XT|GRE))\b)"


def asks_about_gpu(ctx: Context, arch: str) -> list[ErrorLine]:
    """The line that asks for the GPU itself ("support for the MI50", "gfx1151 support", "not working on RTX 5090",
    "a build for gfx1201", "add the 9070xt"), not for a model on it ("does llama.cpp support Qwen3 on my RTX 4090")."""
    gpu = gpu_names(ctx, arch)
    about_gpu = (rf"(?i)\bsupport(?:s|ed|ing)?\s+(?:for\s+|on\s+)?(?:the\s+|my\s+|an?\s+)?{gpu}|"
                 rf"{gpu}(?:\s*\([^()\n]{{1,30}}\))?(?:/\w{{2,12}})?\s+support\b|"
                 rf"\badd(?:ing)?\s+(?:support for\s+)?(?:the\s+)?{gpu}|\bnot work\w*\s+(?:on|with)\s+(?:the\s+|my\s+)?{gpu}|"
                 rf"\bbuilds?\s+for\s+(?:the\s+|my\s+|an?\s+)?{gpu}|{gpu}\s*(?:支持|用不了)|"
                 # prebuilt binaries asked for the GPU: "pre-built torch and rocm for gfx1150", "wheels for gfx1201"
                 rf"\b(?:pre-?built|prebuilt|wheels?|binaries)\b[^\n]{{0,40}}?\bfor\s+(?:the\s+|my\s+|an?\s+)?{gpu}")
    return _lines_matching(ctx, about_gpu)[:1]
