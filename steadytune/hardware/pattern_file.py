"""Reading a YAML file of named entries that each carry a list of regular expressions, checked as it is read.

Two shipped files have that shape: hardware/error_catalogue.yaml (an error signature, its cause and fix) and
doctor/error_classes.yaml (a cause family). A malformed entry is an editing mistake; the error names the file and the
entry, so the test that loads the file points at the line to fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

# The C loader where PyYAML was built with libyaml: the catalogue is read at the end of every failed command.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_EMPTY = (None, "", [], {})


def read_pattern_entries(path: Path, key: str, required: tuple[str, ...], patterns: str,
                         error: type[Exception]) -> list[tuple[dict[str, Any], tuple[re.Pattern, ...]]]:
    """(entry, its compiled `patterns`) for each entry of the YAML list in `path`, in file order. Every entry has its
    `key` (unique) and each field of `required` (not empty), and a list under `patterns` (empty only where `required`
    does not name it); otherwise `error` is raised naming the file and the entry."""
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    if not isinstance(raw, list):
        raise error(f"{path}: a list of entries expected")
    entries, seen = [], set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise error(f"{path.name} entry {i} ({item!r}): a mapping of {', '.join(required)} expected")
        missing = [f for f in (key, *required) if item.get(f) in _EMPTY]
        if not isinstance(item.get(patterns), list):
            missing.append(patterns)
        if missing:
            raise error(f"{path.name} entry {i} ({item.get(key)}): missing {', '.join(dict.fromkeys(missing))}")
        name = item[key]
        if name in seen:
            raise error(f"{path.name} entry {name}: a second entry with this {key}")
        seen.add(name)
        try:
            compiled = tuple(re.compile(p) for p in item[patterns])
        except re.error as e:
            raise error(f"{path.name} entry {name}: bad pattern ({e})") from None
        entries.append((item, compiled))
    return entries
