"""A ROCm build of torch that counts fewer GPUs than the machine has (torch.cuda.device_count() 1 on a two-GPU node)
while the visibility variables name them all: the ROCm runtime a torch wheel bundles enumerates the devices, and some
of those bundled runtimes lost GPUs of a multi-GPU node (mila-iqia/milabench#46: 1.13.0+rocm5.2 saw one of two MI100s,
1.12.1+rocm5.1.1 and the rocm5.4.2 build saw both). The way out is the wheel of the next ROCm index, with the torch
release published on it."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import TORCH_ROCM_INDEXES
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# pytorch.org's ROCm wheel indexes, oldest first (pytorch.org/get-started/previous-versions), and the first torch
# release each carried; the 2.x ones come from fixes.TORCH_ROCM_INDEXES
_OLD_INDEXES = (("rocm4.2", "1.10"), ("rocm4.5.2", "1.11"), ("rocm5.1.1", "1.12"), ("rocm5.2", "1.13"))


def _indexes() -> list[tuple[str, str]]:
    """(index, the first torch release published on it), oldest first."""
    seen = dict(_OLD_INDEXES)
    for (major, minor), indexes in sorted(TORCH_ROCM_INDEXES.items()):
        for index in indexes:
            seen.setdefault(index, f"{major}.{minor}")
    return sorted(seen.items(), key=lambda item: tuple(int(x) for x in item[0][4:].split(".")))


_BUILD = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)\+rocm(\d+(?:\.\d+)*)")
# device_count's answer: on the next line of a REPL, after "returns", "=", "->"
_COUNT = re.compile(r"(?i)device_count\(\)\W{0,6}(?:\n\s*|\s*(?:returns?|=|->|:|is|gives?)\s*)(\d+)\b")
# a count said beside the build it came from: "returns 1 with torch == 1.13.0+rocm5.2"
_COUNT_WITH = re.compile(r"(?i)\b(?:returns?|gives?|prints?|shows?|sees?|=)\s*(\d+)\b[^\n]{0,30}?\b(\d+\.\d+(?:\.\d+)?)"
                         r"\+rocm(\d+(?:\.\d+)*)")
_MACHINE = re.compile(r"(?i)\b([2-8]|two|three|four|eight)\s+(?:available\s+|installed\s+)?(?:\w+\s+)?(?:MI\d+\w*|GPUs|"
                      r"cards|Instinct\w*|Radeon\w*)\b")
_WORDS = {"two": 2, "three": 3, "four": 4, "eight": 8}


@rule("visibility")
def rocm_build_counts_fewer(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a torch +rocm build, its device count, and a larger count of the machine's (said, or another build's)."""
    text = _text(ctx)
    builds = _BUILD.findall(text)
    if not builds:
        return None
    pairs = [(int(n), version, rocm) for n, version, rocm in _COUNT_WITH.findall(text)]
    counts = [int(n) for n in _COUNT.findall(text)] + [n for n, _v, _r in pairs]
    if not counts:
        return None
    machine = _MACHINE.search(text)
    stated = [_WORDS.get(machine.group(1).lower()) or int(machine.group(1))] if machine else []
    has = max(stated + counts)
    if machine is None and len(pairs) < 2:
        return None   # nothing says the machine has more GPUs than the build counts
    fewest = min(counts)
    if fewest >= has or has < 2:
        return None
    failing = min(pairs)[1:] if pairs else builds[-1]
    version, rocm = failing
    order = _indexes()
    names = [index for index, _torch in order]
    here = f"rocm{rocm}"
    later = order[names.index(here) + 1:] if here in names else []
    if not later:
        return None
    index, torch = later[0]
    said = _lines_matching(ctx, r"(?i)device_count|\+rocm" + re.escape(rocm))
    return _make("visibility", f"torch {version}+rocm{rocm} counts {fewest} of the {has} GPUs",
                 f"the ROCm runtime bundled in the torch {version}+rocm{rocm} wheel enumerates only {fewest} of the "
                 f"machine's {has} GPUs (the visibility variables do not change that: the build itself drops them), "
                 "which other ROCm builds of torch do not",
                 f"install the torch of the next ROCm index, {index}: pip install torch=={torch}.* --index-url "
                 f"https://download.pytorch.org/whl/{index} (or a newer ROCm index); then python -c 'import torch; "
                 f"print(torch.cuda.device_count())' must print {has}", [], said[:2])
