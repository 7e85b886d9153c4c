"""FP8 matmuls over a 4-bit base (QLoRA with `fp8_base`): the frozen weight stays packed in bitsandbytes' 4 bits and
is unpacked straight into fp8 for each matmul, where bitsandbytes unpacks it into bf16 and multiplies in bf16.

bitsandbytes stores a 4-bit weight (nf4 or fp4) as two codes a byte, in row-major order, and one absmax per block of
`blocksize` consecutive values (64 in transformers' default); with double quantisation the absmaxes are themselves
8-bit codes with a second absmax per 256 of them and an offset. A value is `code_table[code] * its block's absmax`,
and the largest code is +-1, so a block's absmax is exactly the largest magnitude in it. That gives the fp8 scales
for free, from the absmaxes alone, once at start:
- forward (x @ W^T): one scale per output row, the largest absmax of the row's blocks;
- input gradient (g @ W): one scale per input column, the largest absmax over the rows of the column's block. A
  bound rather than the column's exact maximum: it never overflows, and it is loose by at most the spread of a
  block's values.
Each matmul then unpacks the weight in one pass (read half a byte a value, write one) into the layout it needs and
calls `torch._scaled_mm` as model/fp8_matmul.py does for a bf16 base. Under compiled layers the unpacking (shifts,
the code table, the absmax lookups, the division, the cast) is one fused kernel; eager it runs as several.

The memory is QLoRA's: no copy of the weight is kept, only a scale per row and per column (fp32). The transient fp8
weight of one matmul (the largest at the 7B shape: 18,944 x 3,584, 68 MB) lives as long as that matmul.

Error: e4m3 rounds each unpacked value by up to 2^-4 relative, on top of the 4-bit code's own error (nf4 has 16
levels a block). The adapters still train against the 4-bit base and are scored, merged and exported over it
(restore_base puts bitsandbytes' layer back).
"""

from __future__ import annotations

import torch

from steadytune.model.fp8_matmul import FP8, SCALE_FLOOR, fp8_max, fp8_product, output_dtype, quantize_rows


def is_4bit_linear(module: torch.nn.Module) -> bool:
    """Whether `module` is bitsandbytes' 4-bit linear layer (without importing bitsandbytes where it is absent)."""
    return type(module).__name__ == "Linear4bit" and type(module).__module__.startswith("bitsandbytes")


def fits_4bit_layout(layer: torch.nn.Module) -> bool:
    """Whether this 4-bit layer unpacks here: sizes the fp8 kernels take (multiples of 16), blocks that do not
    straddle rows, the packed bytes in one byte a pair of codes (uint8 storage: steadytune's own loading), in
    bitsandbytes' own order (not the layout its CPU kernel rewrites a weight into for inference,
    model/quantize.keep_training_layout)."""
    state = getattr(layer.weight, "quant_state", None)
    if state is None or len(state.shape) != 2 or getattr(state, "packing_format_for_cpu", False):
        return False
    out_features, in_features = state.shape
    return (out_features % 16 == 0 and in_features % 16 == 0 and in_features % state.blocksize == 0
            and layer.weight.dtype == torch.uint8 and layer.weight.numel() * 2 == out_features * in_features)


def block_absmax(absmax: torch.Tensor, code2: torch.Tensor | None, absmax2: torch.Tensor | None,
                 offset: torch.Tensor, blocksize2: int, rows: int, transposed: bool = False) -> torch.Tensor:
    """The absmax of each block of the weight in fp32, [rows, blocks a row] (or, transposed, [blocks a row, rows]):
    as stored, or from its 8-bit codes (double quantisation: code2[code] * the absmax of its group of blocksize2
    codes + offset). Transposed, the lookups run in the transposed order (see unpack_to_fp8 for why)."""
    stored = absmax.view(rows, -1)
    if transposed:
        stored = stored.t()
    if code2 is None:
        return stored.float()
    group = torch.arange(absmax.numel(), device=absmax.device).view(rows, -1)
    if transposed:
        group = group.t()
    return code2[stored.long()] * absmax2[group // blocksize2] + offset


def unpack_to_fp8(packed: torch.Tensor, code: torch.Tensor, absmax: torch.Tensor, code2: torch.Tensor | None,
                  absmax2: torch.Tensor | None, offset: torch.Tensor, shape: tuple[int, int], blocksize: int,
                  blocksize2: int, scale: torch.Tensor, transposed: bool, dtype: torch.dtype = FP8) -> torch.Tensor:
    """The 4-bit weight [out, in] as fp8 divided by `scale`: [out, in] row-major with a scale per row ([out, 1]),
    or, transposed, [in, out] row-major with a scale per input column ([in, 1]). packed: [out, in / 2] uint8, the
    high four bits the first of each pair (bitsandbytes' order); absmax, code2, absmax2, offset: its statistics as
    block_absmax reads them.

    Each byte is read twice, shifted by 4 for its first code and 0 for its second: expand and shifts, elementwise ops
    the compiler's partitioner may recompute. The transposed layout is built in [in, out] order from the packed bytes,
    not as the forward's values transposed. Compiled, the forward and the backward are one graph before they are
    split: the same ops on the same bytes would be computed once, and the partitioner then kept the backward's fp8
    weight from the forward (a byte a weight, +6 GiB at QLoRA 7B on the H200) instead of reading the packed bytes
    again (torch.stack, used first, is not among the ops it recomputes, which kept the unpacked codes the same way)."""
    out_features, in_features = shape
    blocks = in_features // blocksize
    top = fp8_max(dtype)
    first = torch.arange(in_features, device=packed.device, dtype=torch.uint8) % 2 == 0
    shifts = 4 * first.to(torch.uint8)
    if transposed:
        pairs = packed.t().unsqueeze(1).expand(in_features // 2, 2, out_features).reshape(in_features, out_features)
        codes = (pairs >> shifts.view(in_features, 1)) & 15
        peaks = block_absmax(absmax, code2, absmax2, offset, blocksize2, out_features, transposed=True)
        values = code[codes.long()].view(blocks, blocksize, out_features) * peaks.view(blocks, 1, out_features)
        return (values.view(in_features, out_features) / scale).clamp(-top, top).to(dtype)
    pairs = packed.unsqueeze(-1).expand(out_features, in_features // 2, 2).reshape(out_features, in_features)
    codes = (pairs >> shifts) & 15
    peaks = block_absmax(absmax, code2, absmax2, offset, blocksize2, out_features)
    values = code[codes.long()].view(out_features, blocks, blocksize) * peaks.view(out_features, blocks, 1)
    return (values.view(out_features, in_features) / scale).clamp(-top, top).to(dtype)


class _Fp8Over4bitMatmul(torch.autograd.Function):
    """y = x @ W^T for a frozen 4-bit W unpacked into fp8 in each direction; no weight gradient."""

    @staticmethod
    def forward(ctx, x2d, packed, code, absmax_stored, code2, absmax2, row_scale, col_scale, offset, blocksize,
                blocksize2, shape, out_dtype, fast, fp8_dtype):
        ctx.save_for_backward(packed, code, absmax_stored, code2, absmax2, offset, col_scale)
        ctx.blocksize, ctx.blocksize2, ctx.shape = blocksize, blocksize2, shape
        ctx.out_dtype, ctx.fast, ctx.fp8_dtype = out_dtype, fast, fp8_dtype
        w_rows = unpack_to_fp8(packed, code, absmax_stored, code2, absmax2, offset, shape, blocksize, blocksize2,
                               row_scale, transposed=False, dtype=fp8_dtype)
        xq, xs = quantize_rows(x2d, fp8_dtype)
        return fp8_product(xq, xs, w_rows, row_scale, out_dtype, fast)

    @staticmethod
    def backward(ctx, grad):
        packed, code, absmax_stored, code2, absmax2, offset, col_scale = ctx.saved_tensors
        wt_rows = unpack_to_fp8(packed, code, absmax_stored, code2, absmax2, offset, ctx.shape, ctx.blocksize,
                                ctx.blocksize2, col_scale, transposed=True, dtype=ctx.fp8_dtype)
        gq, gs = quantize_rows(grad.contiguous(), ctx.fp8_dtype)
        return (fp8_product(gq, gs, wt_rows, col_scale, ctx.out_dtype, ctx.fast),) + (None,) * 14


class Fp8Over4bitLinear(torch.nn.Module):
    """A frozen bitsandbytes 4-bit linear whose matmuls run in fp8. Holds the same packed weight (and bias), so the
    layer's memory stays 4-bit; `original` is the bitsandbytes layer, put back by restore_base."""

    def __init__(self, layer: torch.nn.Module, fast_accumulation: bool = True, dtype: torch.dtype = FP8):
        super().__init__()
        state = layer.weight.quant_state
        self.out_features, self.in_features = state.shape
        self.fast_accumulation, self.fp8_dtype = fast_accumulation, dtype
        self.weight, self.bias = layer.weight, layer.bias
        # kept out of the module tree (a plain attribute), so that its parameters are not listed twice
        object.__setattr__(self, "original", layer)
        self.blocksize = state.blocksize
        nested = state.nested
        self.blocksize2 = state.state2.blocksize if nested else 1
        buffers = {"packed": layer.weight.data.view(self.out_features, self.in_features // 2),
                   "code": state.code.float(), "absmax": state.absmax,
                   "code2": state.state2.code.float() if nested else None,
                   "absmax2": state.state2.absmax.float() if nested else None,
                   # a tensor, not a float: compiled layers would otherwise guard on each layer's own value and
                   # compile the decoder layer again for every one of them
                   "offset": (state.offset.detach().float().reshape(()) if nested
                              else torch.zeros((), device=state.absmax.device))}
        for name, tensor in buffers.items():
            self.register_buffer(name, tensor, persistent=False)
        with torch.no_grad():
            # A block's absmax is its largest magnitude times the largest code (1 for nf4 and fp4): the scales come
            # from the absmaxes alone, without unpacking the weight.
            peak = block_absmax(self.absmax, self.code2, self.absmax2, self.offset, self.blocksize2,
                                self.out_features) * self.code.abs().max()
            top = fp8_max(dtype)
            row_scale = (peak.amax(dim=1, keepdim=True) / top).clamp(min=SCALE_FLOOR)
            col_scale = (peak.amax(dim=0) / top).clamp(min=SCALE_FLOOR).repeat_interleave(self.blocksize)
        self.register_buffer("row_scale", row_scale.contiguous(), persistent=False)
        self.register_buffer("col_scale", col_scale[:, None].contiguous(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = _Fp8Over4bitMatmul.apply(x.reshape(-1, shape[-1]), self.packed, self.code, self.absmax, self.code2,
                                     self.absmax2, self.row_scale, self.col_scale, self.offset, self.blocksize,
                                     self.blocksize2, (self.out_features, self.in_features), output_dtype(x),
                                     self.fast_accumulation, self.fp8_dtype)
        y = y.reshape(*shape[:-1], self.out_features)
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, 4-bit unpacked to fp8={self.fp8_dtype} "
                f"(frozen), fast_accumulation={self.fast_accumulation}")
