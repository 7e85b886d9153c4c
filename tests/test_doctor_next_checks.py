"""The next checks (doctor/next_checks.py): the other common causes of the likely cause's family, chosen for the
machine in the paste, never repeating the first fix, shown as one finding after the diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadytune.doctor.diagnose import diagnose_text, report_findings
from steadytune.doctor.error_lines import load_classes
from steadytune.doctor.facts import extract_facts
from steadytune.doctor.next_checks import MOST_SHOWN, NextChecksError, load_next_checks, next_checks


def test_every_row_names_a_known_family_and_a_source():
    rows = load_next_checks()
    families = {c.family for c in load_classes()}
    assert rows and all(r.family in families and r.source and r.key for r in rows)
    # each runtime family a user cannot fix by reinstalling has somewhere to go next
    assert {"multi-gpu-transport", "out-of-memory", "precision", "visibility", "device-access", "driver",
            "gpu-hang", "wsl", "attention"} <= {r.family for r in rows}


@pytest.mark.parametrize("bad, says", [
    ("- {family: nope, key: k, check: c, source: s}", "unknown family"),
    ("- {family: precision, key: k, check: c}", "required"),
    ("- {family: precision, key: k, check: c, source: s, when: {vendor: intel}}", "vendor"),
    ("- {family: precision, key: k, check: c, source: s, when: {platform: [mac]}}", "platform"),
    ("- {family: precision, key: k, check: c, source: s, when: {said: '(unclosed'}}", "regular expression"),
    ("- {family: precision, key: k, check: c, source: s, when: {os: linux}}", "unknown field"),
])
def test_a_malformed_table_is_refused_with_the_row(tmp_path: Path, bad: str, says: str):
    table = tmp_path / "next_checks.yaml"
    table.write_text(bad + "\n", encoding="utf-8")
    with pytest.raises(NextChecksError, match=says) as caught:
        load_next_checks(table)
    assert "row 1" in str(caught.value)


def _checks(family: str, fix: str, paste: str) -> list[str]:
    return next_checks(family, fix, extract_facts(paste))


def test_the_platform_and_vendor_choose_the_checks():
    windows = _checks("multi-gpu-transport", "", "C:\\Users\\me> python train.py\nRuntimeError: Distributed package "
                                                 "doesn't have NCCL built in\nWindows 11, RTX 4090")
    assert "gloo" in windows[0]
    linux = _checks("multi-gpu-transport", "", "NCCL WARN Call to ibv_create_qp failed\n2 nodes, 8x H100 each, CUDA 12.4")
    assert not any("gloo backend" in c for c in linux)
    assert any("NCCL_SOCKET_IFNAME" in c for c in linux) and any("NCCL_NVLS_ENABLE" in c for c in linux)
    amd = _checks("device-access", "", "rocminfo: Unable to open /dev/kfd read-write: Permission denied\nUbuntu 24.04, RX 7900 XTX")
    nvidia = _checks("device-access", "", "docker run --gpus all: could not select device driver with capabilities: [[gpu]]\nRTX 3090")
    assert any("render" in c for c in amd) and not any("nvidia-ctk" in c for c in amd)
    assert any("nvidia-ctk" in c for c in nvidia) and not any("render,video" in c for c in nvidia)


def test_what_the_first_fix_says_is_not_repeated_and_three_at_most():
    paste = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB; 10 GiB reserved\nLoRA fine-tuning qwen2-vl 7b"
    everything = _checks("out-of-memory", "", paste)
    assert len(everything) == MOST_SHOWN
    said = _checks("out-of-memory", "turn on gradient_checkpointing: true", paste)
    assert not any("gradient_checkpointing" in c for c in said)
    assert len(said) == MOST_SHOWN and said != everything


def test_a_check_tied_to_a_tool_needs_the_tool_in_the_paste():
    assert not any("vLLM" in c for c in _checks("precision", "", "loss is nan after 20 steps with fp16 on a V100"))
    assert any("--dtype" in c for c in _checks("precision", "", "vllm serve Qwen/Qwen2-7B: outputs are !!!! (nan) on V100"))


def test_the_report_shows_them_after_the_likely_cause_only():
    paste = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
             "2 nodes in docker, 8x H100\n")
    report = diagnose_text(paste)
    assert report.top is not None and report.top.family == "multi-gpu-transport" and report.next_checks
    findings = report_findings(report, "paste.txt")
    kinds = [f.check for f in findings]
    assert kinds.index("next-checks") == kinds.index("diagnosis") + 1 and kinds.count("next-checks") == 1
    shown = findings[kinds.index("next-checks")]
    assert shown.severity == "info" and "(1) " in shown.fix


def test_a_paste_with_no_diagnosis_gets_no_next_checks():
    assert diagnose_text("training finished, loss 0.41, everything works").next_checks == []
