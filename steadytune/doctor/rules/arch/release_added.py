"""A GPU path a tool's later release added: an older release has no code for the card in one feature (not in the
whole build), so the fix is the release that added it, not a rebuild. One row per (tool, feature) with its source."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _release_numbers, rule, _text


@dataclass(frozen=True)
class AddedPath:
    tool: str           # how the fix names it
    feature: str        # a regex for the feature in the paste's words or messages
    below: int          # the compute capability (digits) below which older releases lacked the feature
    release: str        # the first release that has it for those GPUs
    install: str        # the command that brings it
    how: str            # what the release does on those GPUs (the cost the fix should say)
    source: str


ADDED = (
    AddedPath("bitsandbytes", r"(?i)\bint8\b.{0,40}(?:mat ?mul\w*|matrix mult\w*|multiplication|gemm)|load_in_8bit|"
              r"LLM\.int8|\bigemmlt\b|8-?bit (?:matmul|inference|quantization)",
              75, "0.37.0", "pip install -U \"bitsandbytes>=0.37.0\"",
              "on GPUs below compute capability 7.5 the int8 weights are cast to 16/32-bit for the matmul (slower, "
              "the memory saving stays)",
              "bitsandbytes CHANGELOG 0.37.0: Int8 Matmul + backward support for all GPUs"),
)

_TROUBLE = (r"(?i)\?|？|\berror\b|\bcrash\w*|\bfail\w*|\bproblem\b|\bnot (?:work|support)\w*|\bunsupported\b|"
            r"\bcan(?:'t|not)\b|\blost cause\b|报错|不支持")

# GPU generations said by name where no card is named ("I have a quadro built on pascal")
_GENERATION_CC = {"kepler": 35, "maxwell": 52, "pascal": 61, "volta": 70}


def _older_gpu(ctx: Context, below: int) -> Optional[str]:
    """The card (or generation) the paste names below compute capability `below`."""
    for gpu in ctx.sheet.of("gpu"):
        arch = gpu.detail or ""
        if re.fullmatch(r"sm_\d{2,3}", arch) and int(arch[3:]) < below:
            return f"{gpu.value} (compute capability {arch[3:-1]}.{arch[-1]})"
    said = re.search(r"(?i)\b(kepler|maxwell|pascal|volta)\b", _text(ctx))
    if said and _GENERATION_CC[said.group(1).lower()] < below and not any(
            re.fullmatch(r"sm_\d{2,3}", g.detail or "") for g in ctx.sheet.of("gpu")):
        return f"a {said.group(1).capitalize()} GPU"
    return None


def _has_release(ctx: Context, row: AddedPath) -> bool:
    """The paste names the tool at that release or later ("bitsandbytes==0.43.1", "bitsandbytes 0.45.0")."""
    said = re.findall(rf"(?i)\b{re.escape(row.tool)}\W{{0,3}}(?:version\W{{0,3}})?v?(\d{{1,3}}\.\d{{1,3}}(?:\.\d{{1,3}})?)",
                      _text(ctx))
    return any(_release_numbers(found) >= _release_numbers(row.release) for found in said)


@rule("arch-missing")
def release_added_the_path(ctx: Context) -> Optional[Diagnosis]:
    """A feature asked for on a GPU older releases had no path for, with no error line of another family."""
    if any(e.family is not None for e in ctx.errors):
        return None
    if not (ctx.errors or _lines_matching(ctx, _TROUBLE)):
        return None   # the feature runs, or nothing is asked: no release to name
    for row in ADDED:
        said = _lines_matching(ctx, row.feature)[:1]
        older = _older_gpu(ctx, row.below) if said else None
        if not older:
            continue
        floor = f"{str(row.below)[:-1]}.{str(row.below)[-1]}"
        if _has_release(ctx, row):
            continue   # the paste runs that release or a newer one: something else fails
        return _make("arch-missing", f"{row.tool} before {row.release} lacks this path on {older}",
                     f"{row.tool} releases before {row.release} ran this feature only on compute capability {floor} "
                     f"and newer; {row.release} added it for every GPU", f"update {row.tool} to {row.release} or newer: "
                     f"{row.install} ({row.how})", [], said, confirmed=False)
    return None
