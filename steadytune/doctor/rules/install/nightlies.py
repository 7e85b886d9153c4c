"""A torch nightly (or the triton it pins) that broke what the nightly before it ran: the build installed is the
fault, and the remedy is another nightly, not a setting."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# a nightly named: a dated torch dev build (2.6.0.dev20241015), pytorch.org's nightly index, or the word beside torch
# or its triton ("pytorch nightly", "pytorch-nightly", "nightly build of torch")
_NIGHTLY = re.compile(r"(?i)\b\d+\.\d+\.\d+\.dev(20\d{6})\b|/whl/nightly/|\b(?:py)?torch[- ]nightl(?:y|ies)\b|"
                      r"\bnightl(?:y|ies)\b.{0,30}\b(?:py)?torch\b|\b(?:py)?torch\b.{0,30}\bnightl(?:y|ies)\b")
# the user saying it ran before ("no longer runs", "had been working", "does not run any more", "stopped working")
_RAN_BEFORE = re.compile(r"(?i)\bno longer\b|\bany ?more\b|\bstopped working\b|\bused to work\b|\b(?:was|were|had been|"
                         r"previously) (?:working|fine)\b|\bworked (?:fine |well )?(?:before|with)\b|\bregress(?:ion|ed)\b|"
                         r"\b(?:after|since) (?:updating|upgrading|the (?:latest )?(?:update|upgrade))\b")
# the families whose own error says more than "the nightly changed" (the GPU unreachable, the memory exhausted)
_DEEPER = ("device-access", "driver", "wsl", "out-of-memory", "platform-bios", "gpu-hang")
_LABEL = re.compile(r"(?i)\+(rocm\d+\.\d+(?:\.\d+)?|cu\d{3})\b|/whl/nightly/(rocm\d+\.\d+(?:\.\d+)?|cu\d{3})\b")


@rule("torch-build")
def nightly_regressed(ctx: Context) -> Optional[Diagnosis]:
    """A torch nightly and the user's word that the same thing ran before it: nightlies are untested snapshots, and one
    that breaks what the previous one ran is a regression of that snapshot (fixed in a later one, or avoided by
    pinning the last dated nightly that worked)."""
    text = _text(ctx)
    if "nightl" not in text.lower() and ".dev" not in text:
        return None   # a cheap gate before the regular expressions
    nightly, before = _NIGHTLY.search(text), _lines_matching(ctx, _RAN_BEFORE.pattern)
    if nightly is None or not before or ctx.of(*_DEEPER):
        return None
    label = _LABEL.search(text)
    index = "https://download.pytorch.org/whl/nightly/" + (next(g for g in label.groups() if g) if label
                                                          else "<cu128|rocm7.2>")
    dated = re.findall(r"\b(\d+\.\d+\.\d+)\.dev(20\d{6})\b", text)
    pin = (f"torch=={dated[0][0]}.dev<an earlier date than {min(d for _v, d in dated)}>" if dated
           else "torch==<version>.dev<the date of the last nightly that worked>")
    return _make("torch-build", "a torch nightly regressed",
                 "the nightly installed (torch, with the triton it pins) broke what the nightly before it ran: "
                 "nightlies are untested snapshots, and this one carries a regression",
                 f"install a newer nightly, which brings the fix with its pinned triton: pip install --pre --upgrade "
                 f"--force-reinstall torch --index-url {index}; or pin the last nightly that worked: pip install --pre "
                 f"{pin} --index-url {index}; if the newest nightly still fails, report the dates on pytorch/pytorch",
                 [ctx.line_fact(before[0])], before[:1] + ctx.errors[:1])
