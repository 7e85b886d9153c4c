"""Hypothesis against `steadytune doctor --from` (issue 67, round 5b): any paste, made of the pieces real tool outputs,
sessions and tracebacks are made of, repeated into lines of any length, or any bytes, is read in bounded time into
findings of bounded size; never a traceback. Settings and profiles: tests/fuzzing.py."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from fuzzing import fuzz
from hypothesis import example, given
from hypothesis import strategies as st

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.findings import MAX_SHOWN, format_findings
from steadytune.doctor.offline import run_offline_checks

# CPU seconds of this process, not wall time: a loaded CI machine stretches the wall clock, not the work
SECONDS = 5
PIECES = [
    "$ ", "# ", ">>> ", "\n", " ", "\t", "  ", ":", "=", "-", "/", "|", '"', "'", "[", "]", "(", ")", ",", ".", "0", "1",
    "gfx1100", "gfx90a", "gfx942", "amdgcn-amd-amdhsa--", "Name:", "Marketing Name:", "AMD Radeon RX 7900 XTX",
    "Instinct MI300X", "NVIDIA H100 80GB HBM3", "| NVIDIA-SMI 550.54", "Driver Version:", "CUDA Version: 12.4",
    "GPU[0]", "Card series:", "rocm-smi", "rocminfo", "amd-smi static", "nvidia-smi", "lspci -vv", "dmesg",
    "export ", "HSA_OVERRIDE_GFX_VERSION=", "HIP_VISIBLE_DEVICES=", "CUDA_VISIBLE_DEVICES=", "ROCR_VISIBLE_DEVICES=",
    "NCCL_P2P_DISABLE=1", "os.environ['HIP_VISIBLE_DEVICES'] = '0'", "set -x ", "$env:", "Environment=",
    "torch 2.5.1+rocm6.2", "PyTorch version: 2.4.0+cu121", "ROCM used to build PyTorch: 6.1", "Python version: 3.11",
    "Traceback (most recent call last):", '  File "train.py", line 3, in <module>', "RuntimeError: HIP error: ",
    "invalid device function", "torch.OutOfMemoryError: CUDA out of memory.", "Segmentation fault (core dumped)",
    "ERROR: torch-2.1.0-cp311-cp311-linux_x86_64.whl is not a supported wheel on this platform.", "-cp3-", ".whl",
    "ImportError: /site-packages/flash_attn/", "lib", "_C.so: undefined symbol: _ZN3c10", ".so", "site-packages",
    "amdgpu 0000:03:00.0: ", "[drm] ", "ttm.pages_limit=", "amdgpu.gttsize=", "MemTotal: 64 GB", "GTT", "VRAM",
    "error", "failed", "Error:", "NCCL WARN", "RCCL", "hipErrorNoBinaryForGpu", "/dev/kfd", "Permission denied",
    "\x00", "\ufffd", "\u202e", "é", "日本",
]
lines = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)
repeated = st.builds(lambda pieces, n: "".join(pieces) * n, st.lists(st.sampled_from(PIECES), min_size=1, max_size=3),
                     st.integers(1, 600))
pastes = st.lists(st.one_of(lines, lines, repeated), max_size=20).map("\n".join)


def reads_within_bounds(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "paste.txt"
        path.write_bytes(data)
        start = time.process_time()
        _, findings = run_offline_checks([path])
        assert time.process_time() - start < SECONDS, len(data)
    for finding in findings:
        assert all(len(text) <= MAX_SHOWN + 60 for text in (finding.what, finding.why, finding.fix)), finding
    assert format_findings(findings)


@fuzz(40)
@given(pastes)
@example("export HIP_VISIBLE_DEVICES=" * 200)    # the value was echoed whole (a 2.7 MB line: a 2.7 MB report)
@example("ERROR: " + "-1-cp3-x-" * 220 + " is not a supported wheel on this platform.\n" * 3)
def test_any_paste_is_read_into_bounded_findings(text):
    reads_within_bounds(text.encode("utf-8", errors="surrogatepass"))


@fuzz(30)
@given(st.binary(max_size=4096), st.sampled_from([b"", b"rocminfo\n", b"Traceback (most recent call last):\n"]))
def test_any_bytes_are_read_or_named(data, prefix):
    reads_within_bounds(prefix + data)


@fuzz(25)
@given(pastes)
def test_the_diagnosis_of_any_text_is_bounded(text):
    start = time.process_time()
    report = diagnose_text(text)
    assert time.process_time() - start < SECONDS, len(text)
    assert all(isinstance(d.cause, str) and isinstance(d.fix, str) for d in report.diagnoses)
