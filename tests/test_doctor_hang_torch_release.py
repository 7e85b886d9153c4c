"""The ROCm release a hang's torch was built for, as the gpu-hang fallback reads it: whole version numbers only."""

from steadytune.doctor.error_lines import error_facts, find_errors
from steadytune.doctor.facts import extract_facts
from steadytune.doctor.rules.base import Context
from steadytune.doctor.rules.runtime.gpu_hang import _rocm_torch


def _release(text: str):
    errors = find_errors(text.splitlines())
    sheet = extract_facts(text, lambda _lines: error_facts(errors))
    return _rocm_torch(Context(sheet, errors))


def test_a_nightly_label_is_not_read_as_an_older_release():
    # "rocm7.11.0a2026..." once read as ROCm 7.1, whose next index the fallback then offered as an upgrade
    assert _release("pytorch 2.11.0a0 rocm7.11.0a20260106 nightly, RX 7900 XTX\nthe GPU hangs") != "7.1"
    assert _release("pip install torch --index-url https://download.pytorch.org/whl/rocm7.10\nit hangs") == "7.10"


def test_a_release_said_beside_torch_is_read():
    assert _release("torch built for rocm 6.1 on an RX 7800 XT\nthe training hangs") == "6.1"
    assert _release("whl/rocm6.2.4 and the run freezes") == "6.2.4"
