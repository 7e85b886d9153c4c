"""The fused LoRA SwiGLU (model/fused_swiglu.py): the values and gradients of the MLP's own path, where it applies,
how it steps aside, and (with Triton's interpreter, where Triton is installed) the kernels against the reference."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from steadytune.model.fp8_base import restore_base
from steadytune.model.fused_swiglu import (
    decide_fused_swiglu,
    fusable_mlps,
    fuse_swiglu,
    is_fused,
    reference_backward,
    reference_forward,
)
from steadytune.model.shared_input import share_inputs
from test_lora_scaling import loss_and_grads
from test_shared_input import IDS, lora_model


def _errors_against_exact(model, exact_logits, exact_grads):
    logits, grads = loss_and_grads(model, IDS)
    return (logits - exact_logits).abs().max(), {k: (grads[k] - exact_grads[k]).norm() for k in exact_grads}


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_fused_mlp_is_the_fp8_path_within_its_rounding(kind):
    """Against the bf16-free exact model: the fused MLP is as close as the unfused fp8 path (the same fp8 rounding
    of h, its sums kept in fp32)."""
    fused, unfused, exact = lora_model(kind, fp8=True), lora_model(kind, fp8=True), lora_model(kind)
    assert fuse_swiglu(fused)[0] == 2
    want, want_grads = loss_and_grads(exact, IDS)
    err, grad_errs = _errors_against_exact(fused, want, want_grads)
    ref_err, ref_grad_errs = _errors_against_exact(unfused, want, want_grads)
    assert err <= 1.5 * ref_err + 1e-6
    assert any("gate_proj.lora_B" in k for k in want_grads) and any("down_proj.lora_A" in k for k in want_grads)
    for key in want_grads:
        assert grad_errs[key] <= 1.5 * ref_grad_errs[key] + 1e-3 * want_grads[key].norm(), key


def test_the_reference_arithmetic_matches_autograd():
    """The kernels' yardstick (reference_forward / reference_backward) against autograd through the same forward
    written out in torch, in float64."""
    torch.manual_seed(0)
    rows, width, rank = 7, 24, 4
    args = [torch.randn(rows, width), torch.randn(rows, width), torch.randn(rows, rank), torch.randn(rows, rank),
            torch.randn(width, rank), torch.randn(width, rank), torch.randn(rank, width)]
    args = [a.double() for a in args]
    h, quantized, scale, low_d = reference_forward(*args)
    assert quantized.dtype == torch.float8_e4m3fn and scale.shape == (rows, 1)
    # e4m3: 3 mantissa bits, and subnormals near zero
    torch.testing.assert_close(quantized.double() * scale, h, rtol=0.07, atol=0.01 * float(h.abs().max()))
    dh, d_low_d = torch.randn(rows, width, dtype=torch.double), torch.randn(rows, rank, dtype=torch.double)
    got = reference_backward(dh, d_low_d, *args)
    plain = [a.clone().requires_grad_() for a in args]
    g = plain[0] + plain[2] @ plain[4].t()
    u = plain[1] + plain[3] @ plain[5].t()
    plain_h = torch.nn.functional.silu(g) * u
    want = torch.autograd.grad((plain_h, plain_h @ plain[6].t()), plain[:4], (dh, d_low_d))
    for a, b in zip(got[:4], want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)   # the reference computes in fp32
    torch.testing.assert_close(got[4], plain_h.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(low_d, plain_h.detach() @ args[6].t(), rtol=1e-5, atol=1e-5)


def test_it_steps_aside_after_restore_and_for_a_disabled_adapter():
    model, exact = lora_model(fp8=True), lora_model()
    fuse_swiglu(model)
    with model.disable_adapter(), exact.disable_adapter():   # the fused forward serves adapters only
        disabled = model(input_ids=IDS).logits
        want_disabled = exact(input_ids=IDS).logits
    assert (disabled - want_disabled).abs().max() < 0.1 * want_disabled.abs().max()
    restore_base(model)   # bf16 (here fp32) bases back: the MLP's own forward, exactly peft's values
    torch.testing.assert_close(loss_and_grads(model, IDS)[0], loss_and_grads(exact, IDS)[0], rtol=1e-5, atol=1e-6)


def test_with_the_shared_input_groups_too():
    fused, unfused = lora_model(fp8=True), lora_model(fp8=True)
    share_inputs(fused), share_inputs(unfused)
    assert fuse_swiglu(fused)[0] == 2
    logits, grads = loss_and_grads(fused, IDS)
    ref_logits, ref_grads = loss_and_grads(unfused, IDS)
    assert (logits - ref_logits).abs().max() < 0.05 * ref_logits.abs().max()
    assert grads.keys() == ref_grads.keys()


def test_where_it_applies():
    cpu = torch.device("cpu")
    assert decide_fused_swiglu(lora_model(fp8=True), False, cpu, True) == (False, "off: fused_swiglu: false was asked for")
    on, why = decide_fused_swiglu(lora_model(fp8=True), None, cpu, True)
    assert not on and "cpu: the kernels are Triton's" in why
    model = lora_model(fp8=True)
    on, why = decide_fused_swiglu(model, True, cpu, False)
    assert on and "2 MLPs" in why and all(is_fused(m) for m in fusable_mlps(model))
    on, why = decide_fused_swiglu(lora_model(), True, cpu, True)
    assert not on and "fp8 base" in why   # no fp8 base: nothing to fuse with
    on, why = decide_fused_swiglu(lora_model("gemma3", fp8=True), True, cpu, True)
    assert not on and "activation gelu_pytorch_tanh" in why
    assert fusable_mlps(lora_model(fp8=True)) != []
    partly = lora_model(fp8=True, lora_dropout=0.0)
    for mlp in fusable_mlps(partly):
        mlp.down_proj.base_layer.bias = torch.nn.Parameter(torch.zeros(mlp.down_proj.out_features))
    assert fusable_mlps(partly) == []   # a bias on down: not the kernel's case


KERNEL_CHECK = textwrap.dedent("""
    import torch
    from steadytune.model import fused_swiglu as fs, swiglu_triton as kernels
    import triton
    torch.manual_seed(0)
    rows, width, rank = 40, 300, 4   # rows and width not multiples of the blocks: the masks are exercised
    gate, up = torch.randn(rows, width), torch.randn(rows, width)
    low_g, low_u = torch.randn(rows, rank), torch.randn(rows, rank)
    b_g, b_u, a_d = torch.randn(width, rank) * 0.3, torch.randn(width, rank) * 0.3, torch.randn(rank, width) * 0.1
    blocks = dict(BLOCK_M=16, BLOCK_N=128)
    grid = (triton.cdiv(rows, 16), triton.cdiv(width, 128))
    h, amax, parts = torch.empty(rows, width), torch.zeros(rows), torch.empty(grid[1], rows, rank)
    kernels.swiglu_lora_forward_kernel[grid](gate, up, low_g, low_u, b_g, b_u, a_d, h, amax, parts, rows, width,
                                             rank, BLOCK_R=16, **blocks)
    # OCP e4m3 only: Triton 3.6's interpreter cannot convert to e4m3fnuz ("fail to convert fp8e4b8 to ir type"). The
    # compiler builds the fnuz kernel for gfx942 (tests/test_kernel_builds.py) and tests/test_fp8_base.py checks the
    # fnuz arithmetic (range 240) the kernel follows against torch's dtype.
    for fp8 in (torch.float8_e4m3fn,):
        s = (amax / fs.fp8_max(fp8)).clamp(min=fs.SCALE_FLOOR)
        q = torch.empty(rows, width, dtype=fp8)
        kernels.quantize_rows_kernel[grid](h, s, q, rows, width, FP8_MAX=fs.fp8_max(fp8), **blocks)
        want = fs.reference_forward(gate, up, low_g, low_u, b_g, b_u, a_d, fp8)
        torch.testing.assert_close(h, want[0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(s.unsqueeze(1), want[2], rtol=1e-4, atol=1e-9)
        torch.testing.assert_close(parts.sum(0), want[3], rtol=1e-3, atol=1e-3)
        # The interpreter converts to fp8 in numpy, which rounds a value just under a power of two down to the power
        # below (7.8 -> 4, not 8); the GPU converts in hardware (benchmarks/fused_swiglu_speed.py checks it there).
        # So here: the same values nearly everywhere, and within a factor of two where they differ; never a NaN.
        same = q.float().eq(want[1].float())
        assert same.float().mean() > 0.9, (fp8, same.float().mean())
        assert (q.float().abs() * 2 + 2**-8 >= want[1].float().abs()).all() and (q.float() * want[1].float() >= 0).all()
        assert not q.float().isnan().any() and q.float().abs().max() <= fs.fp8_max(fp8)
    dh, d_low_d = torch.randn(rows, width), torch.randn(rows, rank)
    d_gate, d_up, h_again = torch.empty(rows, width), torch.empty(rows, width), torch.empty(rows, width)
    amax_g, amax_u = torch.zeros(rows), torch.zeros(rows)
    parts_g, parts_u = torch.empty(grid[1], rows, rank), torch.empty(grid[1], rows, rank)
    kernels.swiglu_lora_backward_kernel[grid](dh, d_low_d, gate, up, low_g, low_u, b_g, b_u, a_d, d_gate, d_up,
                                              amax_g, amax_u, parts_g, parts_u, h_again, rows, width, rank,
                                              BLOCK_R=16, **blocks)
    got = [d_gate, d_up, parts_g.sum(0), parts_u.sum(0), h_again]
    for got_one, ref in zip(got, fs.reference_backward(dh, d_low_d, gate, up, low_g, low_u, b_g, b_u, a_d)):
        torch.testing.assert_close(got_one, ref, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(amax_g, d_gate.abs().amax(1)), torch.testing.assert_close(amax_u, d_up.abs().amax(1))
    print("kernels agree")
""")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                    reason="Triton is not installed (CPU torch wheels do not bring it); the GPU check covers it")
def test_the_triton_kernels_match_the_reference_in_triton_s_interpreter():
    """Triton's interpreter runs the kernels on the CPU (in a child: the setting is read at import)."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", KERNEL_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "kernels agree" in run.stdout, run.stderr[-3000:]


def test_the_compiled_layers_trace_the_fused_step_whole():
    """Dynamo traces the op and its backward inside the compiled layer (fullgraph: no break), with the values of
    the eager fused step."""
    from test_shared_input import _compiled_run

    model, eager = lora_model(fp8=True), lora_model(fp8=True)
    fuse_swiglu(model), fuse_swiglu(eager)
    graphs, logits, grads = _compiled_run(model)
    want, want_grads = loss_and_grads(eager, IDS)
    assert graphs <= 2
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-6)
    for key in want_grads:
        torch.testing.assert_close(grads[key], want_grads[key], rtol=1e-4, atol=1e-6)
