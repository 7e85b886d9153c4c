"""doctor on long pastes (issue 63): `doctor --from train.log` on a whole training log reads its head, its tail and its
error lines, in bounded time, and quotes the line numbers of the user's file."""

from __future__ import annotations

import time

from steadytune.doctor.diagnose import diagnose_text, report_findings
from steadytune.doctor.error_lines import NOT_READ
from steadytune.doctor.long_pastes import HEAD, MAX_LINE_CHARS, READ_WHOLE, TAIL, lines_to_read


def _training_log(steps: int) -> list[str]:
    return [f"{{'loss': {2.1 - step * 1e-5:.4f}, 'grad_norm': 0.87, 'learning_rate': 2e-05, 'epoch': {step / 1e3:.2f}}}"
            for step in range(steps)]


def test_a_short_paste_is_read_whole():
    lines = _training_log(READ_WHOLE)
    assert lines_to_read(lines) == lines


def test_a_long_log_keeps_its_head_tail_and_error_lines_in_place():
    lines = _training_log(8000)
    lines[4000] = "RuntimeError: HIP error: invalid device function"
    read = lines_to_read(lines)
    assert len(read) == len(lines)                       # line numbers are the file's
    assert read[:HEAD] == lines[:HEAD] and read[-TAIL:] == lines[-TAIL:]
    assert read[3997:4004] == lines[3997:4004]            # the error line and what is around it
    assert read[2000] == NOT_READ and read[6000] == NOT_READ


def test_a_training_log_is_diagnosed_in_bounded_time_at_its_own_line_number():
    lines = _training_log(10_000)
    lines[2] = "torch 2.5.1+rocm6.2, HSA_OVERRIDE_GFX_VERSION unset, GPU: AMD Radeon RX 6700 XT (gfx1031)"
    lines[6000] = "RuntimeError: HIP error: invalid device function"
    start = time.process_time()
    report = diagnose_text("\n".join(lines))
    # read whole, this log took 25 s of CPU (every line searched by every pattern); read where its causes are, ~3 s
    assert time.process_time() - start < 10
    assert report.top is not None and report.top.family == "arch-missing"
    assert "10.3.0" in report.top.fix                     # the GPU named at the head of the log decides the override
    assert any(e.line_no == 6001 for e in report.errors)


def test_an_error_in_the_tail_of_a_long_log_is_named_with_its_line():
    lines = _training_log(5000)
    lines[-3] = "Segmentation fault (core dumped) in libfoo_unknown_vendor_thing"
    findings = report_findings(diagnose_text("\n".join(lines)), "train.log")
    assert any("line 4998" in f.what for f in findings), [f.what for f in findings]


def test_very_long_lines_are_read_to_their_first_characters_in_bounded_time():
    text = "\n".join(("HSA_OVERRIDE_GFX_VERSION=gfx1100 rocminfo " * 800)[:30_000] for _ in range(20))
    start = time.process_time()
    diagnose_text(text)
    assert time.process_time() - start < 5                # 9 s before lines were cut to MAX_LINE_CHARS
    assert all(len(line) <= MAX_LINE_CHARS for line in lines_to_read(text.splitlines()))
