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
    garbage = compare("garbage", torch.randn(64, 64), want, 4e-2)
    assert not garbage.ok and "relative error 1.4e+00" in garbage.detail
    assert "expected (64, 64)" in compare("shape", want[:2], want, 1).detail


def test_the_whole_canary_runs_and_passes_on_the_cpu():
    results = run_canary(torch.device("cpu"))
    assert [r.name for r in results][:2] == ["matmul fp32 1024x1024", "attention (SDPA, causal) fp32"]
    assert all(r.ok for r in results) and failed_line(results) is None
    assert {r.name for r in results if r.skipped} == {"triton kernels", "all-reduce"}
    assert check_allocation(torch.device("cpu"), 1 / 256).detail == "written and read back exactly"


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
