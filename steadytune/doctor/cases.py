"""The score of doctor's rules on the mined cases (case_files.py). A case is solved when doctor's first diagnosis is of
the case's cause family and its fix says every phrase the case expects (the machine's own values: the override for that
GPU, the group, the flag). `steadytune doctor --score-cases train|heldout` prints the score and the misses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.case_files import Case, load_cases
from steadytune.doctor.diagnose import Report, diagnose_text


@dataclass
class Score:
    case: Case
    family: Optional[str]       # doctor's first diagnosis
    fix: str
    solved: bool
    solved_by_next: bool = False   # not by the first fix, but one of the next checks says what the case expects
    report: Optional[Report] = None   # what doctor made of the paste (the findings a user would see come from it)


def score_case(case: Case) -> Score:
    report = diagnose_text(case.paste, exclude_case=case.source)   # never its own neighbour
    top = report.top
    if top is None:
        return Score(case, None, "", False, report=report)
    said, then = top.fix.lower(), " ".join(report.next_checks).lower()
    solved = top.family == case.cause and all(e.lower() in said for e in case.expect)
    by_next = not solved and top.family == case.cause and all(e.lower() in said + " " + then for e in case.expect)
    return Score(case, top.family, top.fix, solved, by_next, report)


def score_part(part: str) -> list[Score]:
    return [score_case(c) for c in load_cases(part)]


def summary(scores: list[Score], part: str, show_misses: bool) -> str:
    solved = sum(s.solved for s in scores)
    lines = [f"{part}: {solved}/{len(scores)} cases solved ({100 * solved / max(len(scores), 1):.1f}%)"]
    by_next = sum(s.solved_by_next for s in scores)
    if by_next:   # apart: the score is the first fix's; a next check is the second thing a user tries
        lines.append(f"  and {by_next} more where the first fix misses but one of the next checks names the accepted "
                     f"fix ({100 * (solved + by_next) / len(scores):.1f}% with them)")
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
