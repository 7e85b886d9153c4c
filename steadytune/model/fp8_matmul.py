"""The fp8 arithmetic of a frozen linear layer: quantising rows to e4m3 and the two matmuls of a frozen weight
(forward x @ W^T and input gradient g @ W; no weight gradient), over a bf16 weight quantised once (Fp8FrozenLinear).
model/fp8_4bit.py multiplies a 4-bit base the same way; model/fp8_base.py decides where either is used and swaps
the layers in and out.

Accumulation: `use_fast_accum`, both matmuls. Hopper's fast mode skips the periodic promotion of the tensor cores'
partial sums to fp32. Measured at the 1.5B shapes (benchmarks/fp8_accum_error.py, docs/speed.md) it moves a
product's relative error from 3.74% to at most 3.75% (the e4m3 rounding of the inputs is nearly all of it) and the
step 1.05x faster. `set_fast_accumulation(model, False)` (bench --fp8-accumulation exact) puts the exact mode back.

Rounding: e4m3 keeps 3 mantissa bits, so each product's inputs carry up to 2^-4 relative rounding; with a scale per
row it does not overflow or flush whole rows.

Formats: two e4m3 encodings exist, and a GPU's matrix cores take one. OCP e4m3 (torch.float8_e4m3fn: largest finite
448, NaN but no infinity) on NVIDIA Ada/Hopper/Blackwell, AMD MI350 (gfx950) and RDNA4 (gfx12); MI300's e4m3fnuz
(torch.float8_e4m3fnuz, gfx942: largest finite 240, one zero, the negative-zero code is its only NaN, exponent bias 8
so its smallest subnormal is 2^-10 against 2^-9). A layer holds its weight copies in one of them (`dtype`), and every
activation and gradient it quantises takes the same one and its own range: a scale of amax / 448 into e4m3fnuz would
turn every value above 240 into NaN (tests/test_fp8_base.py checks both against torch's dtypes). torch._scaled_mm
takes either (cuBLASLt; hipBLASLt on ROCm, which accepts e4m3fnuz only on gfx942, e4m3fn elsewhere, and writes bf16
only with row scales: torch ScaledBlas.cpp).
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn          # OCP e4m3: NVIDIA sm_89+, AMD gfx950 and gfx12
FP8_FNUZ = torch.float8_e4m3fnuz   # AMD MI300 (gfx942)
FP8_MAX = torch.finfo(FP8).max     # 448 (e4m3fnuz: 240; fp8_max says which)
SCALE_FLOOR = 1e-12                # an all-zero row keeps a finite scale (its values quantise to 0 either way)
FORMATS = {"ocp": FP8, "fnuz": FP8_FNUZ}   # kernel_catalogue.fp8_format's names -> torch dtypes


def fp8_max(dtype: torch.dtype = FP8) -> float:
    """The largest finite value of an fp8 format: 448 for e4m3fn, 240 for e4m3fnuz."""
    return float(torch.finfo(dtype).max)


def quantize_rows(x: torch.Tensor, dtype: torch.dtype = FP8) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (x in fp8 of `dtype`, fp32 scale per row [rows, 1]) with x ~= fp8 * scale; x is 2-D. The scale maps each
    row's amax onto the format's largest finite value, so nothing overflows it."""
    top = fp8_max(dtype)
    amax = x.abs().amax(dim=-1, keepdim=True).float()
    scale = (amax / top).clamp(min=SCALE_FLOOR)
    return (x.float() / scale).clamp(-top, top).to(dtype), scale


def fp8_product(rows: torch.Tensor, rows_scale: torch.Tensor, weight_rows: torch.Tensor, weight_scale: torch.Tensor,
                out_dtype: torch.dtype, fast: bool) -> torch.Tensor:
    """rows @ weight^T in fp8: rows [n, in] with a scale per row, weight_rows [out, in] with a scale per output row
    (quantize_rows' layout for both); the one fp8 product of every fp8 base (here, fp8_4bit, fused_swiglu)."""
    # _scaled_mm wants its second operand column-major: W row-major [out, in] transposed is [in, out] column-major
    return torch._scaled_mm(rows, weight_rows.t(), scale_a=rows_scale, scale_b=weight_scale.t(), out_dtype=out_dtype,
                            use_fast_accum=fast)


def output_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype an fp8 layer answers in: autocast's where it is on, else the input's (bf16 for anything else)."""
    dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
    return dtype if dtype in (torch.bfloat16, torch.float16, torch.float32) else torch.bfloat16


class _FrozenFp8Matmul(torch.autograd.Function):
    """y = x @ W^T in fp8 with W frozen: forward and the input gradient; no weight gradient."""

    @staticmethod
    def forward(ctx, x2d, w_rows, w_rows_scale, wt_rows, wt_rows_scale, out_dtype, fast, xq=None, xs=None):
        ctx.save_for_backward(wt_rows, wt_rows_scale)
        ctx.out_dtype, ctx.fast = out_dtype, fast
        if xq is None:   # else x2d arrives quantised already (model/fused_swiglu.py writes both)
            xq, xs = quantize_rows(x2d, w_rows.dtype)
        return fp8_product(xq, xs, w_rows, w_rows_scale, out_dtype, fast)

    @staticmethod
    def backward(ctx, grad):
        wt_rows, wt_rows_scale = ctx.saved_tensors
        gq, gs = quantize_rows(grad.contiguous(), wt_rows.dtype)
        return (fp8_product(gq, gs, wt_rows, wt_rows_scale, ctx.out_dtype, ctx.fast),) + (None,) * 8


class Fp8FrozenLinear(torch.nn.Module):
    """A frozen nn.Linear whose matmuls run in fp8. Keeps the original `weight` (and `bias`) as they were, so that
    peft, the adapter files and export see the same layer; only its forward changes."""

    def __init__(self, linear: torch.nn.Linear, fast_accumulation: bool = True, dtype: torch.dtype = FP8):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.fast_accumulation = fast_accumulation
        self.weight, self.bias = linear.weight, linear.bias
        with torch.no_grad():
            w = linear.weight.detach()
            w_rows, w_scale = quantize_rows(w, dtype)                     # [out, in], scale per output row
            wt_rows, wt_scale = quantize_rows(w.t().contiguous(), dtype)  # [in, out], scale per input column of W
        self.register_buffer("w_rows", w_rows, persistent=False)
        self.register_buffer("w_rows_scale", w_scale, persistent=False)
        self.register_buffer("wt_rows", wt_rows, persistent=False)
        self.register_buffer("wt_rows_scale", wt_scale, persistent=False)

    @classmethod
    def concatenated(cls, bases: list["Fp8FrozenLinear"]) -> "Fp8FrozenLinear":
        """One fp8 layer for several bases of one input, their outputs side by side (model/shared_input.py): copies
        quantised from the concatenated weights; the bf16 weights are not kept twice (`weight` is None)."""
        linear = torch.nn.Linear(bases[0].in_features, sum(b.out_features for b in bases),
                                 bias=bases[0].bias is not None, device="meta")
        linear.weight = torch.nn.Parameter(torch.cat([b.weight.detach() for b in bases]), requires_grad=False)
        if linear.bias is not None:
            linear.bias = torch.nn.Parameter(torch.cat([b.bias.detach() for b in bases]), requires_grad=False)
        merged = cls(linear, bases[0].fast_accumulation, bases[0].fp8_dtype)
        merged.weight = None
        if merged.bias is not None:   # a copy, not a weight of the model: kept out of its parameters and state_dict
            bias = merged.bias.detach()
            del merged.bias
            merged.register_buffer("bias", bias, persistent=False)
        return merged

    @property
    def fp8_dtype(self) -> torch.dtype:
        """The fp8 format of this layer's copies (its own, or the shared layer's)."""
        return self.w_rows.dtype if self.w_rows is not None else self.shared.fp8_dtype

    def share_copies(self, shared: "Fp8FrozenLinear", offset: int) -> None:
        """Drop this layer's own fp8 copies: `shared` (a concatenated layer) holds them from column `offset` on."""
        for name in ("w_rows", "w_rows_scale", "wt_rows", "wt_rows_scale"):
            setattr(self, name, None)
        self.shared, self.shared_offset = shared, offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w_rows is None:   # copies shared with sibling layers: their product, this layer's columns
            return self.shared(x)[..., self.shared_offset:self.shared_offset + self.out_features]
        shape = x.shape
        y = _FrozenFp8Matmul.apply(x.reshape(-1, shape[-1]), self.w_rows, self.w_rows_scale, self.wt_rows,
                                   self.wt_rows_scale, output_dtype(x), self.fast_accumulation)
        y = y.reshape(*shape[:-1], self.out_features)
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def forward_quantized(self, x2d: torch.Tensor, quantized: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """forward() of a 2-D input that comes with its fp8 rows and their scales (quantize_rows' arithmetic, done
        by the kernel that made x); the gradient still flows to x."""
        return _FrozenFp8Matmul.apply(x2d, self.w_rows, self.w_rows_scale, self.wt_rows, self.wt_rows_scale,
                                      output_dtype(x2d), self.fast_accumulation, quantized, scale)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, fp8={self.fp8_dtype} (frozen), "
                f"fast_accumulation={self.fast_accumulation}")
