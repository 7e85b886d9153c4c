"""doctor, round 10 (issue 63): readings asked for by round 9's spent held-out cases (batch 8, spent_heldout), with
machine.py and runtime.py left alone (new modules instead). Each paste is written for its reading (another GPU, tool
or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from test_doctor_paraphrases import PASTINGS, assert_a_rule_reads, assert_no_rule_says, pasting_misses

# (paste, family, phrases the fix must say)
READINGS = [
    # a release that lost the GPU's arch: the previous one ran (ollama on a GTX 1080, not koboldcpp on a 1070 Ti)
    ("After upgrading ollama from 0.3.9 to 0.3.10 my GeForce GTX 1080 fails:\nCUDA error: no kernel image is "
     "available for execution on the device", "arch-missing", ["0.3.9", "sm_61"]),
]


@pytest.mark.parametrize("paste,family,phrases", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
    assert_a_rule_reads(paste, family, phrases)


@pytest.mark.parametrize("how", PASTINGS)
def test_every_reading_survives_how_it_is_pasted(how):
    misses = pasting_misses(READINGS, how)
    assert not misses, "\n".join(misses)


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # the same error with no earlier release that ran: not a release that dropped the arch
    ("ollama 0.3.10 on a GeForce GTX 1080\nCUDA error: no kernel image is available for execution on the device",
     "go back to"),
]


@pytest.mark.parametrize("paste,not_said", NEGATIVES, ids=[n[0][:48] for n in NEGATIVES])
def test_a_reading_stays_out_of_a_paste_it_does_not_fit(paste, not_said):
    assert_no_rule_says(paste, not_said)
