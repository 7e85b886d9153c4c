"""How much fp8's fast accumulation adds to the error of the frozen base's matmuls: the relative error against the
exact product (fp64) of the unquantised bf16 operands, for fp8 with the default accumulation and with the fast one,
at the Qwen2.5-1.5B base's shapes and 16,384 tokens, forward and input gradient. Also the fast result's distance
from the default one. Run on a GPU with fp8 tensor cores: python benchmarks/fp8_accum_error.py"""
import torch

from steadytune.model.fp8_matmul import quantize_rows


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


torch.manual_seed(0)
tokens = 16384
print(f"{'layer':10} {'matmul':15} {'K':>5}   fp8 default   fp8 fast   fast vs default")
for name, out_f, in_f in (("q_proj", 1536, 1536), ("k_proj", 256, 1536), ("gate_proj", 8960, 1536),
                          ("down_proj", 1536, 8960)):
    w = torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16) * in_f ** -0.5
    x = torch.randn(tokens, in_f, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(tokens, out_f, device="cuda", dtype=torch.bfloat16) * 1e-3
    for way, left, right in (("forward", x, w), ("input gradient", g, w.t().contiguous())):
        exact = left.double() @ right.double().t()
        aq, a_scale = quantize_rows(left)
        bq, b_scale = quantize_rows(right)
        y = {fast: torch._scaled_mm(aq, bq.t(), scale_a=a_scale, scale_b=b_scale.t(), out_dtype=torch.bfloat16,
                                    use_fast_accum=fast) for fast in (False, True)}
        exact_mode, fast_mode = relative(y[False], exact), relative(y[True], exact)
        print(f"{name:10} {way:15} {left.shape[1]:5}   {exact_mode:.3e}     {fast_mode:.3e}   "
              f"{relative(y[True], y[False]):.3e}")
