"""A user asking where a package's build for their OS is ("where can I get the triton cp38 win version?", "is there a
Windows wheel of flash-attn?"): no error line, only the request. Where the package is made for that OS another way
than on Linux (another package, none at all), the tool table's fix for that OS answers it."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor, rule
from steadytune.doctor.rules.install.shared import _table_fix
from steadytune.doctor.rules.install.wheels import _named_tool
from steadytune.doctor.tool_fixes import tool_fix


# the request: a build, wheel or version of something for an OS, said with "where", "is there", "need" or "looking for"
_REQUEST = re.compile(r"(?i)\b(?:where (?:can|do|could) (?:i|we|one)|is there|are there|i need|looking for|how (?:can|do) "
                      r"i (?:get|install)|any (?:plans?|chance))\b")
# the OS the request is for, in the short forms people use in a question ("win version", "win64", "cp310-win")
_FOR_WINDOWS = re.compile(r"(?i)\bwin(?:dows)?(?:32|64|_amd64)?\b|-win\b")
_FOR_MACOS = re.compile(r"(?i)\bmac ?os\b|\bmac\b|\bdarwin\b|\bapple silicon\b")


@rule("wheel-platform")
def build_asked_for_an_os(ctx: Context) -> Optional[Diagnosis]:
    """A request for a package's Windows (or macOS) build, with no error line: where the table has a fix of its own for
    that OS, it is the answer (triton -> triton-windows on Windows; none on macOS)."""
    if any(e.family for e in ctx.errors):
        return None   # an error line says more than the request
    text = _text(ctx)
    asked = _lines_matching(ctx, _REQUEST)
    if not asked:
        return None
    kind = "windows" if _FOR_WINDOWS.search(text) else "macos" if _FOR_MACOS.search(text) else None
    tool = _named_tool(text)
    if kind is None or tool is None:
        return None
    kinds = frozenset({kind} | ({_vendor(ctx)} if _vendor(ctx) in ("amd", "nvidia") else set()))
    own = tool_fix(tool, "wheel-platform", kinds, {})
    if own is None or own == tool_fix(tool, "wheel-platform", frozenset({"linux"}), {}):
        return None   # the package comes the same way on every OS: the request says nothing about the OS
    return _make("wheel-platform", f"{tool} for {kind}",
                 f"{tool} publishes no {kind} build under its own name on PyPI; on {kind} it comes another way (the "
                 "fix says which)", _table_fix(ctx, tool, "wheel-platform", kinds, package=tool),
                 [ctx.line_fact(asked[0])], asked[:1], confirmed=False)
