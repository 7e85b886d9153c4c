"""doctor, round 10 (issue 63): readings of the install families (rocm-libs-missing, wheel-platform, torch-build,
abi-mismatch) for pastes of batch 9 it could not read. Each paste is written for its reading (another GPU, tool and
wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from test_doctor_paraphrases import PASTINGS, assert_a_rule_reads, assert_no_rule_says, pasting_misses

# (paste, family, phrases the fix must say)
READINGS = [
    # a torch op symbol taking a pre-C++11 std::string (`Ss`), another extension (torchaudio-like): the C++ ABI
    ("import xformers.ops\nImportError: /opt/venv/lib/python3.11/site-packages/xformers/_C.so: undefined symbol: "
     "_ZN2at4_ops10zeros_like4callERKNS_6TensorESsN3c108optionalINS5_10ScalarTypeEEE\ntorch 2.7.1+cu128",
     "abi-mismatch", ["C++ ABI", "from source"]),
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
    # an undefined c10 symbol with the C++11 string of the same ABI as torch's is not told apart: no ABI reading
    # when the symbol carries no std::string at all
    ("ImportError: /usr/lib/python3/dist-packages/mmcv/_ext.so: undefined symbol: _ZN3c104cuda20getCurrentCUDAStreamEa",
     "C++ ABI"),
]


@pytest.mark.parametrize("paste,not_said", NEGATIVES, ids=[n[0][:48] for n in NEGATIVES])
def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, not_said):
    assert_no_rule_says(paste, not_said)
