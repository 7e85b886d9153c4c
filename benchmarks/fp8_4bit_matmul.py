"""A 4-bit base's matmuls, bitsandbytes' way against fp8 (model/fp8_4bit.py), at the Qwen2.5-7B layer shapes: the
milliseconds of one forward + input gradient of each projection (compiled, as train compiles the decoder layers),
and each result's relative error against the exact product (fp64) of the dequantised 4-bit weight, then against
that of the bf16 weight before quantisation (where the 4 bits' own error is counted too).
Run on a GPU with fp8 tensor cores: python benchmarks/fp8_4bit_matmul.py [tokens ...] (default 1024 4096 16384)"""
import sys

import bitsandbytes as bnb
import bitsandbytes.functional as bnb_functional
import torch

from steadytune.model.fp8_4bit import Fp8Over4bitLinear

SHAPES = (("q_proj", 3584, 3584), ("k_proj", 512, 3584), ("o_proj", 3584, 3584), ("gate_proj", 18944, 3584),
          ("down_proj", 3584, 18944))


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def four_bit(out_f: int, in_f: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """-> (the 4-bit layer on the GPU, the bf16 weight it was quantised from)."""
    linear = torch.nn.Linear(in_f, out_f, bias=False, dtype=torch.bfloat16)
    torch.nn.init.normal_(linear.weight, std=in_f ** -0.5)
    original = linear.weight.detach().clone().cuda()
    layer = bnb.nn.Linear4bit(in_f, out_f, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True,
                              quant_type="nf4", quant_storage=torch.uint8)
    layer.load_state_dict(linear.state_dict())
    return layer.cuda().requires_grad_(False), original


def step_ms(layer, x: torch.Tensor, g: torch.Tensor, repeats: int = 20) -> float:
    """Milliseconds of one forward and input gradient (after two warm-up calls, which also compile)."""
    for _ in range(2):
        torch.autograd.grad(layer(x), x, g)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        torch.autograd.grad(layer(x), x, g)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


torch.manual_seed(0)
print(f"{'layer':10} {'tokens':>6}  bnb ms   fp8 ms  speed-up   error fwd bnb / fp8   error grad bnb / fp8   "
      "against the bf16 weight: fwd bnb / fp8")
for tokens in [int(t) for t in sys.argv[1:]] or [1024, 4096, 16384]:
    totals = [0.0, 0.0]
    for name, out_f, in_f in SHAPES:
        layer, original = four_bit(out_f, in_f)
        fp8 = Fp8Over4bitLinear(layer)
        x = torch.randn(tokens, in_f, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(tokens, out_f, device="cuda", dtype=torch.bfloat16)
        w = bnb_functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state).double()
        exact_y, exact_gx = x.detach().double() @ w.t(), g.double() @ w
        original_y = x.detach().double() @ original.double().t()
        errors, from_original = [], []
        for way in (layer, fp8):
            y = way(x)
            (gx,) = torch.autograd.grad(y, x, g)
            errors.append((relative(y, exact_y), relative(gx, exact_gx)))
            from_original.append(relative(y, original_y))
        ms = []
        for way in (layer, fp8):
            torch._dynamo.reset()   # a fresh compile for each layer: no recompile limit reached, no eager fallback
            ms.append(step_ms(torch.compile(way), x, g))
        totals = [t + m for t, m in zip(totals, ms)]
        print(f"{name:10} {tokens:6}  {ms[0]:6.3f}  {ms[1]:6.3f}  {ms[0] / ms[1]:6.2f}x   "
              f"{errors[0][0]:.2e} / {errors[1][0]:.2e}   {errors[0][1]:.2e} / {errors[1][1]:.2e}   "
              f"{from_original[0]:.2e} / {from_original[1]:.2e}")
        del layer, fp8, w, original
    print(f"{'(a layer)':10} {tokens:6}  {totals[0]:6.3f}  {totals[1]:6.3f}  {totals[0] / totals[1]:6.2f}x  "
          "(q, k, o, gate, down; v as k and up as gate not counted twice)")
