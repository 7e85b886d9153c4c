"""doctor, round 5 (issue 63): the rules decide from facts, not from the wording of the training pastes. Each
paraphrase in tests/doctor_paraphrases.yaml restates a training case (never a held-out one) with another GPU, tool,
version, platform or wording, and must still get the case's cause family and a fix with the machine's values; a
thin paste must get no confirmed diagnosis; and every training case must survive being pasted the ways people paste
(inside unrelated log lines, with a log's timestamps, as a markdown quote, with Windows line ends)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from steadytune.doctor.case_files import Case, load_cases
from steadytune.doctor.cases import score_case
from steadytune.doctor.diagnose import diagnose_text, report_findings
from test_doctor_cases import KNOWN_MISSES

DATA = yaml.safe_load(Path(__file__).with_name("doctor_paraphrases.yaml").read_text(encoding="utf-8"))
PARAPHRASES = DATA["paraphrases"]
THIN = DATA["thin"]
TRAIN = load_cases("train")
FAMILIES = sorted({p["family"] for p in PARAPHRASES})


def test_every_paraphrase_restates_a_training_case_never_a_held_out_one():
    train = {c.source.split("github.com/", 1)[1] for c in TRAIN}
    held = {c.source.split("github.com/", 1)[1] for c in load_cases("heldout")}
    for p in PARAPHRASES:
        assert p["from"] in train and p["from"] not in held, p["from"]
        assert p["vary"] and p["paste"].strip()
    by_family = Counter(p["family"] for p in PARAPHRASES)
    # every family with training cases is paraphrased (a family with one case at least once)
    assert {c.cause for c in TRAIN} <= set(by_family), set({c.cause for c in TRAIN}) - set(by_family)


@pytest.mark.parametrize("family", FAMILIES)
def test_paraphrases_get_the_family_and_the_machines_values(family):
    misses = []
    for p in (p for p in PARAPHRASES if p["family"] == family):
        top = diagnose_text(p["paste"]).top
        fix = top.fix.lower() if top else ""
        if top is None or top.family != family or not all(e.lower() in fix for e in p.get("expect", ())):
            misses.append(f"{p['from']} ({p['vary']}): got {top.family if top else None}: {fix[:160]}\n{p['paste']}")
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("index", range(len(THIN)))
def test_a_thin_paste_gets_no_confirmed_cause_and_every_error_line_a_next_step(index):
    text = THIN[index]["paste"]
    report = diagnose_text(text)
    assert not any(d.confirmed for d in report.diagnoses), [d.title for d in report.diagnoses]
    if report.errors and not report.diagnoses:
        # a solved thread that reads alike may be pointed to; every other finding is an error line's next step
        findings = [f for f in report_findings(report, "paste") if f.check != "similar-case"]
        assert findings and all("unrecognised error" in f.what and f.fix.startswith("run and paste: ")
                                for f in findings)


_NOISE_BEFORE = ("Collecting numpy\n  Downloading numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl (16.0 MB)\n"
                 "INFO: Started server process [123]\nLoading checkpoint shards: 100%|##########| 2/2 [00:03<00:00]\n")
_NOISE_AFTER = "\nDuring handling of the above exception, another exception occurred:\nPress any key to continue . . .\n"


def _pasted(text: str, how: str) -> str:
    lines = text.splitlines()
    if how == "in a log":
        return _NOISE_BEFORE + text + _NOISE_AFTER
    if how == "with timestamps":
        return "\n".join(f"2025-03-03T10:11:12.123Z {line}" if line.strip() else line for line in lines)
    if how == "as a quote, CRLF":
        return "\r\n".join("> " + line for line in lines)
    raise ValueError(how)


PASTINGS = ("in a log", "with timestamps", "as a quote, CRLF")


def assert_a_rule_reads(paste: str, family: str, phrases: list[str]) -> None:
    """The reading tests' check: a rule (not the nearest mined case) names the family, and its fix says every phrase."""
    report = diagnose_text(paste)
    top = report.top
    assert top is not None and not report.by_likeness, (paste, top.fix if top else None)
    assert top.family == family, (top.family, top.fix)
    missing = [p for p in phrases if p.lower() not in top.fix.lower()]
    assert not missing, (missing, top.fix)


def assert_no_rule_says(paste: str, not_said: str) -> None:
    """The negative tests' check: no reading of `paste` has a fix that says `not_said` (a paste with no reading at all,
    or only a pointer to a thread that reads alike, passes)."""
    top = diagnose_text(paste).top
    assert top is None or not_said.lower() not in top.fix.lower(), top.fix


def pasting_misses(readings, how: str) -> list[str]:
    """The readings (paste, family, phrases, ...) whose family or phrases are lost when pasted `how`."""
    misses = []
    for paste, family, phrases, *_ in readings:
        top = diagnose_text(_pasted(paste, how)).top
        if top is None or top.family != family or any(p.lower() not in top.fix.lower() for p in phrases):
            misses.append(f"{paste[:60]!r}: got {top.family if top else None}: {top.fix[:100] if top else ''}")
    return misses


def reading_tests(readings, negatives):
    """The three tests of a reading file, over its READINGS (paste, family, phrases the fix must say) and NEGATIVES
    (paste, a phrase no reading of it may say): each reading as written, each pasted the ways users paste, and each
    kept out of pastes it does not fit. A file binds them to its own module names:
        test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)"""
    @pytest.mark.parametrize("paste,family,phrases", readings, ids=[r[0][:48] for r in readings])
    def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
        assert_a_rule_reads(paste, family, phrases)

    @pytest.mark.parametrize("how", PASTINGS)
    def test_every_reading_survives_how_it_is_pasted(how):
        misses = pasting_misses(readings, how)
        assert not misses, "\n".join(misses)

    @pytest.mark.parametrize("paste,not_said", negatives, ids=[n[0][:48] for n in negatives])
    def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, not_said):
        assert_no_rule_says(paste, not_said)

    return (test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted,
            test_a_reading_stays_out_of_pastes_it_does_not_fit)


@pytest.mark.parametrize("how", PASTINGS)
def test_every_training_case_survives_how_it_is_pasted(how):
    misses = []
    for case in (c for c in TRAIN if c.source not in KNOWN_MISSES):
        varied = Case(case.source, case.tool, _pasted(case.paste, how), case.cause, case.fix, case.expect)
        score = score_case(varied)
        if not score.solved:
            misses.append(f"{case.source}: got {score.family}: {score.fix[:120]}")
    assert not misses, "\n".join(misses)
