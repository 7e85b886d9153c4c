"""doctor, round 5 (issue 63): the numerical canary. On a GPU it checks matmuls and attention in each precision, every
Triton kernel steadytune ships, an all-reduce and a large allocation against the CPU; `train` runs the cheap part at
start and stops with one line when it fails. Here, without a GPU: the verdict itself (zeros, nan, garbage, a near
answer), the whole canary on the CPU, the Triton kernels' harness in Triton's interpreter (a child process), and the
stop line; benchmarks/gpu_doctor5.sh runs it on a GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from steadytune.cli import main as cli_main
from steadytune.doctor.canary import CanaryResult, check_allocation, compare, failed_line, run_canary
from steadytune.doctor.environment import stop_on_canary
from steadytune.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def test_the_verdict_tells_garbage_zeros_and_nan_from_rounding():
    want = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    near = want.to(torch.bfloat16).float()
    assert compare("bf16", near, want, 4e-2).ok
    zeros = compare("zeros", torch.zeros_like(want), want, 4e-2)
    assert not zeros.ok and zeros.detail == "every value is zero"
    nan = want.clone()
    nan[3, 4] = float("nan")
    assert not compare("nan", nan, want, 4e-2).ok and "1 of 4096 values" in compare("nan", nan, want, 4e-2).detail
    garbage = compare("garbage", torch.randn(64, 64, generator=torch.Generator().manual_seed(1)), want, 4e-2)
    assert not garbage.ok and "relative error 1.4e+00" in garbage.detail
    assert "expected (64, 64)" in compare("shape", want[:2], want, 1).detail


def test_the_whole_canary_runs_and_passes_on_the_cpu():
    results = run_canary(torch.device("cpu"))
    assert [r.name for r in results][:2] == ["matmul fp32 1024x1024", "attention (SDPA, causal) fp32"]
    assert all(r.ok for r in results) and failed_line(results) is None
    assert {r.name for r in results if r.skipped} == {"triton kernels", "all-reduce"}
    assert check_allocation(torch.device("cpu"), 1 / 256).detail == "written and read back exactly"



def test_the_allocation_is_filled_a_slice_at_a_time_and_read_back_across_slice_edges(monkeypatch):
    """On an H100 the full canary's block (80% of 78 GiB free) asked torch for 125 GiB: one arange over the block made
    an int64 twin of it, int32 positions wrap past 2**31 elements, and sum(dtype=int64) over the block casts it whole.
    The block is now filled and summed in slices; slices far smaller than the block (and not dividing it) must still
    give the exact pattern and sum."""
    monkeypatch.setattr("steadytune.doctor.canary.ALLOCATION_FILL_ELEMENTS", 10_007)
    result = check_allocation(torch.device("cpu"), 1.37 / 256)
    assert result.ok and result.detail == "written and read back exactly"


INTERPRETER = """
import triton.runtime.interpreter as interpreter
_original = interpreter._patch_lang_tensor
def _patched(tensor, scope):   # numpy >= 2.4 refuses int() of a 1-element array in Triton 3.6's interpreter
    _original(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
interpreter._patch_lang_tensor = _patched
import torch
from steadytune.doctor.canary import TRITON_KERNELS
for name, run in TRITON_KERNELS:
    for result in run(torch.device("cpu")):
        print(result.line())
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed (CPU torch wheels)")
def test_every_triton_kernel_check_agrees_with_its_reference_in_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", INTERPRETER], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 8 and all(": ok (" in line for line in lines), done.stdout
    assert any(line.startswith("triton: greedy sampling") for line in lines)


def test_train_stops_with_one_line_when_the_canary_fails(capsys):
    wrong = [CanaryResult("matmul bf16 512x512", False, "every value is zero", 0.01),
             CanaryResult("allocation 1.00 GiB", True, "written and read back exactly", 0.2)]
    with pytest.raises(UserError) as stopped:
        stop_on_canary(wrong, force=False)
    message = str(stopped.value)
    assert "\n" not in message and "matmul bf16 512x512: WRONG (every value is zero" in message
    assert "allocation" not in message and "--force" in message
    stop_on_canary(wrong, force=True)
    assert "warning: the GPU computes wrong numbers" in capsys.readouterr().err
    stop_on_canary(wrong[1:], force=False)   # all right: nothing said


def test_doctor_canary_on_a_machine_without_gpu_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: benchmarks/gpu_doctor5.sh checks it there")
    cli_main(["doctor", "--canary", "--json"])
    out = capsys.readouterr().out
    assert '"check": "canary"' in out and "no GPU" in out


# --- hostile round 5 (issue 67): the canary never passes what it did not compute ------------------------------------

def test_a_device_that_computes_nothing_fails_every_check_in_one_line_never_a_traceback(capsys):
    """The meta device returns shapes and no data, as a GPU whose library lacks the arch's kernels returns an error
    instead of a result: each dense check is a failed one naming what was raised (it was a NotImplementedError
    traceback out of doctor and train), and train's line says the arithmetic raised."""
    results = run_canary(torch.device("meta"), cheap=True)
    ran = [r for r in results if not r.skipped]
    assert [r.name for r in ran] == ["matmul fp32", "attention (SDPA, causal) fp32", "allocation"]
    assert not any(r.ok for r in ran) and all(r.detail.startswith("raised ") for r in ran)
    line = failed_line(results)
    assert line.startswith("the GPU's arithmetic raised errors (matmul fp32: WRONG (raised NotImplementedError")
    assert "\n" not in line
    with pytest.raises(UserError, match="raised errors"):
        stop_on_canary(results, force=False)


def test_an_allocation_too_small_to_check_is_skipped_not_passed_or_failed():
    """A GPU with (almost) no free memory: the start-up check's block (a quarter of the free memory) was empty and
    'read back exactly' (a pass), or shorter than the tail it reads back and 'WRONG' (a stop, for a healthy GPU)."""
    for gib in (0.0, 1e-6, 2**-12):
        result = check_allocation(torch.device("cpu"), gib)
        assert result.skipped and "too little to check" in result.skipped, result.line()
    assert failed_line([check_allocation(torch.device("cpu"), 1e-6)]) is None
    assert check_allocation(torch.device("cpu"), 2**-10).ok   # 1 MiB: checked


def test_doctor_canary_on_saved_outputs_says_it_did_not_run(tmp_path, capsys):
    """`doctor --canary --from FILE` answered on the saved outputs alone, as if the canary had passed."""
    saved = tmp_path / "smi.txt"
    saved.write_text("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f2b)\n", encoding="utf-8")
    cli_main(["doctor", "--canary", "--allreduce", "--from", str(saved), "--json"])
    out = capsys.readouterr().out
    assert "--canary, --allreduce not run: they check this machine" in out
