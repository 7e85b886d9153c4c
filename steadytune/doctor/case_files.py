"""The mined case files (doctor/cases/*.yaml): real pastes from public issue threads, each with the cause and fix the
thread accepted. Loaded and checked here; scored by cases.py; read as a library of solved threads by similar.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from steadytune.doctor.error_lines import load_classes

FOLDER = Path(__file__).with_name("cases")
# train and heldout by the thread-number rule; fresh: a round mined and committed but not yet read for rules, scored
# at first contact only (the next round sorts it into the other two by the same rule)
PARTS = ("train", "heldout", "fresh")
FIELDS = ("source", "tool", "paste", "cause", "fix", "expect")
# libyaml's safe loader where PyYAML was built with it: the case files are read whenever doctor reads a paste (the
# library of solved threads), and the pure-Python loader takes over a second on them
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NUMBER = re.compile(r"^https://github\.com/[\w.\-]+/[\w.\-]+/(?:issues|pull|discussions)/(\d+)(?:#\S*)?$")


@dataclass(frozen=True)
class Case:
    source: str
    tool: str
    paste: str
    cause: str
    fix: str
    expect: tuple[str, ...]
    date: Optional[str] = None
    batch: str = "1"           # the mining round that wrote it down; a held-out batch is scored apart the first time
    spent_heldout: bool = False    # held out and scored as an estimate, then moved to training (never an estimate again)

    @property
    def number(self) -> int:
        return int(_NUMBER.match(self.source).group(1))

    @property
    def part(self) -> str:
        """The part the held-out rule puts it in: thread numbers divisible by 5 are held out until their round's score
        has been taken; a spent one (`spent_heldout`) is training from then on."""
        return "heldout" if self.number % 5 == 0 and not self.spent_heldout else "train"


class CaseError(ValueError):
    """A case file is malformed (an editing mistake, caught by the tests)."""


def load_cases(part: str) -> list[Case]:
    path = FOLDER / f"{part}.yaml"
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER) or []
    families = {c.family for c in load_classes()}
    cases = []
    for i, item in enumerate(raw):
        missing = [f for f in FIELDS if not item.get(f)]
        if missing:
            raise CaseError(f"{path.name} case {i} ({item.get('source', '?')}): missing {', '.join(missing)}")
        if not _NUMBER.match(str(item["source"])):
            raise CaseError(f"{path.name} case {i}: source {item['source']!r} is not a GitHub thread URL")
        if item["cause"] not in families:
            raise CaseError(f"{path.name} case {i} ({item['source']}): unknown cause {item['cause']!r}")
        cases.append(Case(str(item["source"]), str(item["tool"]), str(item["paste"]), item["cause"], str(item["fix"]),
                          tuple(str(e) for e in item["expect"]), str(item.get("date") or "") or None,
                          str(item.get("batch") or "1"), bool(item.get("spent_heldout", False))))
    return cases
