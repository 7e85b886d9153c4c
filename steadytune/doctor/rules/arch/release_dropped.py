"""A release that lost a GPU's code: the user says the previous release ran on this GPU and the new one fails with
an arch-missing line. The GPU was in the old build's architecture list and not in the new one, so the remedy is a
release built with the arch again (the previous one meanwhile), not a rebuild or another backend."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _make, _text, rule

# "since updating from 1.54 to 1.55", "after upgrading to v0.3.2 from 0.3.1", "only happens with 1.55 and not 1.54",
# "1.54 works fine, 1.55 fails": the old and the new release
_UPDATED = re.compile(r"(?i)\b(?:since|after) (?:updat|upgrad)\w* (?:\w+ )?from v?(\d+(?:\.\d+){1,2}) to v?(\d+(?:\.\d+){1,2})")
_ONLY_NEW = re.compile(r"(?i)\bonly (?:happens|occurs|fails) (?:with|on|in) v?(\d+(?:\.\d+){1,2}) and not (?:with |on |in )?"
                       r"v?(\d+(?:\.\d+){1,2})")


def _releases(text: str) -> Optional[tuple[str, str]]:
    """(old, new) from the user's words, the new release the later one."""
    m = _UPDATED.search(text)
    if m:
        return m.group(1), m.group(2)
    m = _ONLY_NEW.search(text)
    if m:
        return m.group(2), m.group(1)
    return None


def _later(a: str, b: str) -> bool:
    return tuple(int(x) for x in b.split(".")) > tuple(int(x) for x in a.split("."))


@rule("arch-missing")
def release_dropped_the_arch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an arch-missing line, the user's old and new release (the old one ran), and the GPU's arch."""
    errors = ctx.of("arch-missing")
    if not errors:
        return None
    releases = _releases(_text(ctx))
    if releases is None or not _later(*releases):
        return None
    old, new = releases
    arch, fact = ctx.arch(errors)
    if arch is None:
        return None
    tool = ctx.tool(errors) or ctx.tool() or "the program"
    # the tool that ships the binary, not the library inside it (koboldcpp's ggml-cuda line names llama.cpp)
    shipped = [t for t in ctx.sheet.tools if t in ("koboldcpp", "ollama", "lmstudio", "gpt4all", "llama-cpp-python")]
    tool = shipped[0] if shipped else tool
    kind = "CUDA" if arch.startswith("sm_") else "ROCm"
    return _first(_make(
        "arch-missing", f"{tool} {new}'s {kind} build leaves out {arch}",
        f"{tool} {old} ran on this GPU and {new} does not: the new release's {kind} binary was built without {arch} "
        f"in its architecture list, so it has no kernels for the card",
        f"go back to {tool} {old} (its build has {arch}) until a release (a hotfix of {new} or later) is built with "
        f"{arch} again, then update to that; or build {tool} yourself with {arch} among its "
        f"{'CUDA architectures' if kind == 'CUDA' else 'GPU targets'}", [fact], errors))
