"""The mined cases (doctor/cases/*.yaml): real pastes from public issue threads, each with the cause and fix the
thread accepted, and the score of doctor's rules on them. A case is solved when doctor's first diagnosis is of the
case's cause family and its fix says every phrase the case expects (the machine's own values: the override for that
GPU, the group, the flag). `steadytune doctor --score-cases train|heldout` prints the score and the misses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.error_lines import load_classes

FOLDER = Path(__file__).with_name("cases")
PARTS = ("train", "heldout")
FIELDS = ("source", "tool", "paste", "cause", "fix", "expect")
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
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
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


@dataclass
class Score:
    case: Case
    family: Optional[str]       # doctor's first diagnosis
    fix: str
    solved: bool


def score_case(case: Case) -> Score:
    top = diagnose_text(case.paste).top
    if top is None:
        return Score(case, None, "", False)
    said = top.fix.lower()
    solved = top.family == case.cause and all(e.lower() in said for e in case.expect)
    return Score(case, top.family, top.fix, solved)


def score_part(part: str) -> list[Score]:
    return [score_case(c) for c in load_cases(part)]


def summary(scores: list[Score], part: str, show_misses: bool) -> str:
    solved = sum(s.solved for s in scores)
    lines = [f"{part}: {solved}/{len(scores)} cases solved ({100 * solved / max(len(scores), 1):.1f}%)"]
    by_cause: dict[str, list[Score]] = {}
    for s in scores:
        by_cause.setdefault(s.case.cause, []).append(s)
    for cause, group in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {cause:<20} {sum(s.solved for s in group)}/{len(group)}")
    batches = sorted({s.case.batch for s in scores})
    if len(batches) > 1:   # each mining round apart: a batch never scored before is the clean estimate
        for batch in batches:
            group = [s for s in scores if s.case.batch == batch]
            solved_here = sum(s.solved for s in group)
            lines.append(f"  batch {batch}: {solved_here}/{len(group)} ({100 * solved_here / len(group):.1f}%)")
    spent = [s for s in scores if s.case.spent_heldout]
    if spent:   # held out and scored before they were trained on: apart, so the rest is the rules' own training part
        solved_spent = sum(s.solved for s in spent)
        lines.append(f"  spent held-out (scored, then trained on): {solved_spent}/{len(spent)}")
    if show_misses:
        for s in scores:
            if not s.solved:
                lines.append(f"MISS {s.case.source}\n     expected {s.case.cause} {list(s.case.expect)}\n"
                             f"     got      {s.family}: {s.fix[:200]}")
    return "\n".join(lines)
