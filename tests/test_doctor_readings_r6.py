"""doctor, round 6 phase 2 (issue 63): more readings for the runtime and machine families that carry to pastes doctor
has never seen. Each paste is written for the reading (another GPU, tool, wording or value than any mined case); the
negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text

# (paste, family, phrases the fix must say)
READINGS = [
    # visibility: a misspelt visibility variable is an ordinary variable nobody reads
    ("export HIP_VISIBLE_DEVICE=1\npython train.py  # still loads onto the first RX 7900 XTX", "visibility",
     ["HIP_VISIBLE_DEVICES=1"]),
    ("CUDA_VISIBLE_DEVICS=3 accelerate launch train.py uses all 4 A100s", "visibility", ["CUDA_VISIBLE_DEVICES=3"]),
    # visibility: a GPU choice the tool is said to ignore
    ("accelerate config:\ndistributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: 2,3\n"
     "the run still starts on GPU 0 and 1 (2x RTX A6000)", "visibility", ["CUDA_VISIBLE_DEVICES=2,3"]),
    ("axolotl always trains on GPU 0 even though I set CUDA_VISIBLE_DEVICES=2", "visibility",
     ["CUDA_VISIBLE_DEVICES=2", "before import"]),
    ("设置了 export CUDA_VISIBLE_DEVICES=3，但是训练还是用的0号卡 (4x RTX 4090, swift sft)", "visibility",
     ["CUDA_VISIBLE_DEVICES=3"]),
    # visibility: an iGPU said beside an AMD card, with a crash or a tool acting on the wrong card
    ("llama.cpp crashes on start with ROCm when the integrated GPU is enabled\nGPU: RX 7800 XT\nCPU: Ryzen 7 7700",
     "visibility", ["iGPU", "HIP_VISIBLE_DEVICES"]),
]


@pytest.mark.parametrize("paste,family,phrases", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
    top = diagnose_text(paste).top
    assert top is not None, paste
    assert top.family == family, (top.family, top.fix)
    missing = [p for p in phrases if p.lower() not in top.fix.lower()]
    assert not missing, (missing, top.fix)


@pytest.mark.parametrize("paste,not_family", [
    # the right spelling, used as meant: no misspelling reading, no "ignored" reading
    ("export CUDA_VISIBLE_DEVICES=1\npython train.py\nRuntimeError: CUDA error: out of memory", "visibility"),
    # a GPU choice that works, said in passing
    ("I set CUDA_VISIBLE_DEVICES=0,1 and training runs fine on both RTX 3090s, loss is nan after 200 steps with fp16",
     "visibility"),
    # an iGPU said on an NVIDIA laptop's crash is not ROCm's iGPU in the way
    ("ComfyUI crashes with CUDA error on my laptop (RTX 4060, Intel iGPU)", "visibility"),
])
def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, not_family):
    top = diagnose_text(paste).top
    assert top is None or top.family != not_family, (top.family, top.fix)
