"""What the fp8 layer tests share (tests/test_fp8_base.py, tests/test_fp8_4bit.py): a layer compiled in one graph
against the same layer eager."""

from __future__ import annotations

import torch


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


def compiled_against_eager(layer: torch.nn.Module, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `layer` compiled with fullgraph (a graph break fails) and eager on the same input under bf16 autocast,
    forward and backward; assert they agree within the fused quantisation's bf16 rounding; -> (the input, the eager
    output)."""
    compiled = torch.compile(layer, fullgraph=True)
    x = torch.randn(8, in_features, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = compiled(x), layer(x_eager)
    out.float().sum().backward()
    ref.float().sum().backward()
    assert out.dtype == ref.dtype == torch.bfloat16
    assert relative(out, ref) < 0.01 and relative(x.grad, x_eager.grad) < 0.01
    return x.detach(), ref
