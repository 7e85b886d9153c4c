"""The MLP of a LoRA model over an fp8 base, between its matmuls, as Triton kernels (`fused_swiglu`; bench
`--fused-swiglu auto|on|off`).

A SwiGLU MLP computes down(silu(gate(x)) * up(x)). With LoRA on all three and the frozen base in fp8
(model/fp8_base.py), the compiled layer ran, between the matmuls: gate's and up's lora_B products written full width ([tokens, 8,960] at
the 1.5B shape, two of them), one kernel that read them back with the two base outputs, added, applied silu * up,
and quantised the result for down's fp8 matmul. That quantisation needs each row's amax before it can write, so the
kernel read all four inputs twice. The profile of the 1.5B default put it at 19 ms a step and its backward at 20
(docs/measured/profile_qwen15_default_h200.txt): bandwidth, not arithmetic.

Here one custom op (steadytune::swiglu_lora) runs from the MLP's input to down's inputs: gate's and up's fp8
matmuls, then a Triton kernel (model/swiglu_triton.py) that adds the rank-r LoRA products in its tile from the rank-r
inputs (never written full width), writes h = silu(gate) * up in bf16, raises each row's amax and takes its share of
down's lora_A product h @ A_d^T, then a kernel that writes h in fp8 with its scale per row, which down's fp8 matmul
takes as it is (Fp8FrozenLinear.forward_quantized). Nothing full-width is kept for the backward but the two base
outputs (the compiled path kept the two sums). The backward recomputes gate, up and h in the tile, adds down's LoRA
share to h's gradient there, writes the gradients of gate and up with their rows' amax, quantises each in one more
read, and multiplies them by the bases' fp8 copies itself; the LoRA weight gradients (sums over every row) are one
matmul each, as before. Measured 1.044x the tokens/s at the 1.5B shape on an H200 (docs/speed.md).

The values are the unfused path's within rounding: the sums and silu are kept in fp32 inside the kernel (the
compiled path rounded the lora_B products to bf16 first), and the fp8 scales are the same amax / 448 a row.

Where: the plain LoRA case (one active adapter, no dropout, no DoRA, not merged) on gate_proj, up_proj and
down_proj over fp8 bases with their own copies and no bias, and a SiLU activation (Llama, Qwen 2/2.5/3, Mistral;
not Gemma's GELU). Anything else, and a call after restore_base put the bf16 base back, runs the MLP's own forward.
On a CPU the op runs a plain torch reference of the same arithmetic (tests); the kernels need a GPU and Triton.
"""

from __future__ import annotations

import importlib.util
import types

import torch
import torch.nn.functional as F

from steadytune.model.anatomy import speed_scope, text_config
from steadytune.model.kernel_builds import refusal
from steadytune.model.kernel_catalogue import device_arch, swiglu_blocks, swiglu_rank_block, swiglu_rank_limit
from steadytune.model.fp8_matmul import (
    FP8,
    SCALE_FLOOR,
    Fp8FrozenLinear,
    fp8_max,
    fp8_product,
    output_dtype,
    quantize_rows,
)
from steadytune.model.lora_scaling import one_plain_adapter

TRITON = importlib.util.find_spec("triton") is not None   # where the kernels can run (else: the torch reference)
SILU_ACTIVATIONS = ("silu", "swish")
# (rows, columns, warps) of each program's tile: the catalogue's for the GPU's family (kernel_catalogue.swiglu_blocks,
# every choice compiled for every target) unless set here (benchmarks/fused_swiglu_speed.py times other tiles).
FORWARD_BLOCKS: tuple[int, int, int] | None = None
BACKWARD_BLOCKS: tuple[int, int, int] | None = None


def _blocks(which: str, device) -> tuple[int, int, int]:
    chosen = {"forward": FORWARD_BLOCKS, "backward": BACKWARD_BLOCKS}.get(which)
    return chosen or swiglu_blocks(device_arch(device))[which]


def _lora_sums(gate, up, low_g, low_u, b_g, b_u) -> tuple[torch.Tensor, torch.Tensor]:
    return (gate.float() + low_g.float() @ b_g.float().t(), up.float() + low_u.float() @ b_u.float().t())


def reference_forward(gate, up, low_g, low_u, b_g, b_u, a_d, fp8_dtype=FP8):
    """The forward kernels' arithmetic in plain torch, from the base outputs (a CPU, and the tests' yardstick); h
    quantised into the bases' fp8 format."""
    g, u = _lora_sums(gate, up, low_g, low_u, b_g, b_u)
    h = (F.silu(g) * u).to(gate.dtype)
    quantized, scale = quantize_rows(h, fp8_dtype)
    return h, quantized, scale, (h.float() @ a_d.float().t()).to(low_g.dtype)


def reference_backward(dh, d_low_d, gate, up, low_g, low_u, b_g, b_u, a_d):
    """The backward kernel's: (d gate, d up, d low_g, d low_u, h recomputed)."""
    g, u = _lora_sums(gate, up, low_g, low_u, b_g, b_u)
    sig, dh = torch.sigmoid(g), dh.float() + d_low_d.float() @ a_d.float()
    d_gate = (dh * u * sig * (1 + g * (1 - sig))).to(gate.dtype)
    d_up = (dh * g * sig).to(up.dtype)
    return (d_gate, d_up, (d_gate.float() @ b_g.float()).to(low_g.dtype),
            (d_up.float() @ b_u.float()).to(low_u.dtype), (F.silu(g) * u).to(gate.dtype))


def _column_blocks(width: int, blocks: tuple[int, int, int]) -> int:
    return (width + blocks[1] - 1) // blocks[1]


def _launch(kernel, blocks: tuple[int, int, int], rows: int, width: int, *args, rank: int | None = None,
            **constants) -> None:
    """Run a kernel over [rows, width] in tiles of `blocks` (rows, columns, warps)."""
    block_m, block_n, warps = blocks
    if rank is not None:
        constants["BLOCK_R"] = swiglu_rank_block(rank)
    torch.library.wrap_triton(kernel)[((rows + block_m - 1) // block_m, _column_blocks(width, blocks))](
        *args, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, **constants)


def _partial_sums(rows: int, rank: int, width: int, blocks: tuple[int, int, int], device) -> torch.Tensor:
    """fp32 room for one rank-r partial sum per column block (added up in a fixed order after the kernel)."""
    return torch.empty((_column_blocks(width, blocks), rows, rank), dtype=torch.float32, device=device)


def _tiles_forward(gate, up, low_g, low_u, b_g, b_u, a_d, fp8_dtype=FP8):
    """The forward kernels on a GPU: -> (h, h in fp8 of `fp8_dtype`, its scale per row [rows, 1], h @ a_d^T)."""
    from steadytune.model import swiglu_triton  # lazy: Triton is there only where the kernels run

    rows, width = gate.shape
    rank = low_g.shape[1]
    h = torch.empty_like(gate)
    amax = torch.zeros(rows, dtype=torch.float32, device=gate.device)
    blocks = _blocks("forward", gate.device)
    low_d_parts = _partial_sums(rows, a_d.shape[0], width, blocks, gate.device)
    _launch(swiglu_triton.swiglu_lora_forward_kernel, blocks, rows, width, gate, up, low_g, low_u, b_g, b_u,
            a_d, h, amax, low_d_parts, rows, width, rank, rank=rank)
    quantized, scale = _quantized(h, amax, fp8_dtype)
    return h, quantized, scale, low_d_parts.sum(0).to(low_g.dtype)


def _quantized(x: torch.Tensor, amax: torch.Tensor, fp8_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x in fp8 (e4m3fn, or MI300's e4m3fnuz with its own range) with quantize_rows' scale from its rows' amax (one
    kernel: x is read once)."""
    from steadytune.model import swiglu_triton  # lazy: as above

    top = fp8_max(fp8_dtype)
    scale = (amax / top).clamp(min=SCALE_FLOOR)
    quantized = torch.empty(x.shape, dtype=fp8_dtype, device=x.device)
    _launch(swiglu_triton.quantize_rows_kernel, _blocks("quantize", x.device), x.shape[0], x.shape[1], x, scale,
            quantized, x.shape[0], x.shape[1], FP8_MAX=top)
    return quantized, scale.unsqueeze(1)


def _tiles_backward(dh, d_low_d, gate, up, low_g, low_u, b_g, b_u, a_d):
    """The backward kernel on a GPU: -> (d gate, d up, their rows' amax, d low_g, d low_u, h)."""
    from steadytune.model import swiglu_triton  # lazy: as above

    rows, width = gate.shape
    rank = low_g.shape[1]
    d_gate, d_up, h = torch.empty_like(gate), torch.empty_like(up), torch.empty_like(gate)
    amax_g, amax_u = (torch.zeros(rows, dtype=torch.float32, device=gate.device) for _ in range(2))
    blocks = _blocks("backward", gate.device)
    d_low_g = _partial_sums(rows, rank, width, blocks, gate.device)
    d_low_u = torch.empty_like(d_low_g)
    _launch(swiglu_triton.swiglu_lora_backward_kernel, blocks, rows, width, dh, d_low_d, gate, up, low_g,
            low_u, b_g, b_u, a_d, d_gate, d_up, amax_g, amax_u, d_low_g, d_low_u, h, rows, width, rank, rank=rank)
    return d_gate, d_up, amax_g, amax_u, d_low_g.sum(0).to(low_g.dtype), d_low_u.sum(0).to(low_u.dtype), h


def _op(name: str):
    """Register a custom op: torch.library.triton_op where Triton is installed (Inductor then sees into its kernels),
    a plain custom_op on an install without it (a CPU wheel: the torch reference runs; triton_op would warn at each
    import that Triton is missing)."""
    if TRITON:
        return torch.library.triton_op(name, mutates_args=())
    return torch.library.custom_op(name, mutates_args=())


@_op("steadytune::swiglu_lora")
def swiglu_lora(x: torch.Tensor, x_q: torch.Tensor, x_scale: torch.Tensor, w_g: torch.Tensor,
                w_g_scale: torch.Tensor, wt_g: torch.Tensor, wt_g_scale: torch.Tensor, w_u: torch.Tensor,
                w_u_scale: torch.Tensor, wt_u: torch.Tensor, wt_u_scale: torch.Tensor, low_g: torch.Tensor,
                low_u: torch.Tensor, b_g: torch.Tensor, b_u: torch.Tensor, a_d: torch.Tensor, fast: bool
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The MLP from its input to down's inputs. x: [rows, hidden] (its gradient comes back through here), x_q and
    x_scale: x in fp8 (quantize_rows); w_*, w_*_scale: gate's and up's fp8 base copies (Fp8FrozenLinear.w_rows);
    wt_*, wt_*_scale: their transposed copies, for the backward (wt_rows); low_*: [rows, r] lora_A products,
    already scaled; b_*: lora_B weights [width, r]; a_d: down's lora_A weight [r, width]; all contiguous, in x's
    dtype. -> (h, h in fp8, its fp32 scale per row [rows, 1], h @ a_d^T, and the
    two base outputs, which the backward reads) for h = silu(gate + low_g @ b_g^T) * (up + low_u @ b_u^T)."""
    gate = fp8_product(x_q, x_scale, w_g, w_g_scale, x.dtype, fast)
    up = fp8_product(x_q, x_scale, w_u, w_u_scale, x.dtype, fast)
    if gate.device.type != "cuda":
        return *reference_forward(gate, up, low_g, low_u, b_g, b_u, a_d, w_g.dtype), gate, up
    return *_tiles_forward(gate, up, low_g, low_u, b_g, b_u, a_d, w_g.dtype), gate, up


@_op("steadytune::swiglu_lora_backward")
def swiglu_lora_backward(dh: torch.Tensor, d_low_d: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                         low_g: torch.Tensor, low_u: torch.Tensor, b_g: torch.Tensor, b_u: torch.Tensor,
                         a_d: torch.Tensor, wt_g: torch.Tensor, wt_g_scale: torch.Tensor, wt_u: torch.Tensor,
                         wt_u_scale: torch.Tensor, fast: bool
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (d x, d gate, d up, d low_g, d low_u, h) from the gradients of h and of h @ a_d^T; wt_*: the bases' fp8
    copies for the input gradient (Fp8FrozenLinear.wt_rows). The gradients of gate and up are quantised from the
    amax the kernel took while writing them: each is read once more, not twice."""
    if gate.device.type != "cuda":
        d_gate, d_up, d_low_g, d_low_u, h = reference_backward(dh, d_low_d, gate, up, low_g, low_u, b_g, b_u, a_d)
        (g_q, g_scale), (u_q, u_scale) = quantize_rows(d_gate, wt_g.dtype), quantize_rows(d_up, wt_u.dtype)
    else:
        d_gate, d_up, amax_g, amax_u, d_low_g, d_low_u, h = _tiles_backward(dh, d_low_d, gate, up, low_g, low_u,
                                                                            b_g, b_u, a_d)
        (g_q, g_scale), (u_q, u_scale) = _quantized(d_gate, amax_g, wt_g.dtype), _quantized(d_up, amax_u, wt_u.dtype)
    d_x = (fp8_product(g_q, g_scale, wt_g, wt_g_scale, gate.dtype, fast)
           + fp8_product(u_q, u_scale, wt_u, wt_u_scale, gate.dtype, fast))
    return d_x, d_gate, d_up, d_low_g, d_low_u, h


def _save_for_backward(ctx, inputs, output) -> None:
    x, _, _, _, _, wt_g, wt_g_scale, _, _, wt_u, wt_u_scale, low_g, low_u, b_g, b_u, a_d, fast = inputs
    # not h: the backward recomputes it, so the layer keeps no full-width tensor but the two base outputs
    ctx.save_for_backward(output[4], output[5], low_g, low_u, b_g, b_u, a_d, wt_g, wt_g_scale, wt_u, wt_u_scale)
    ctx.fast = fast
    ctx.mark_non_differentiable(*output[1:3], *output[4:])


def _backward(ctx, dh, _d_quantized, _d_scale, d_low_d, _d_gate, _d_up):
    gate, up, low_g, low_u, b_g, b_u, a_d, wt_g, wt_g_scale, wt_u, wt_u_scale = ctx.saved_tensors
    dh = torch.zeros_like(gate) if dh is None else dh.contiguous()
    d_low_d = torch.zeros_like(low_g) if d_low_d is None else d_low_d.to(low_g.dtype).contiguous()
    d_x, d_gate, d_up, d_low_g, d_low_u, h = swiglu_lora_backward(dh, d_low_d, gate, up, low_g, low_u, b_g, b_u, a_d,
                                                                  wt_g, wt_g_scale, wt_u, wt_u_scale, ctx.fast)
    # The LoRA weight gradients are sums over every row (not one program's): a matmul each, as without the kernel
    return (d_x, *[None] * 10, d_low_g, d_low_u, d_gate.t() @ low_g, d_up.t() @ low_u, d_low_d.t() @ h, None)


swiglu_lora.register_autograd(_backward, setup_context=_save_for_backward)


def _like(t: torch.Tensor, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    return t.new_empty(shape, dtype=dtype or t.dtype)


if not TRITON:
    # custom_op (no Triton): the shapes for tracing, which triton_op derives from its body itself
    @swiglu_lora.register_fake
    def _(x, x_q, x_scale, w_g, w_g_scale, wt_g, wt_g_scale, w_u, w_u_scale, wt_u, wt_u_scale, low_g, low_u, b_g,
          b_u, a_d, fast):
        rows, width = x.shape[0], w_g.shape[0]
        return (_like(x, rows, width), _like(x, rows, width, dtype=w_g.dtype), _like(x, rows, 1, dtype=torch.float32),
                _like(low_g, rows, a_d.shape[0]), _like(x, rows, width), _like(x, rows, width))

    @swiglu_lora_backward.register_fake
    def _(dh, d_low_d, gate, up, low_g, low_u, b_g, b_u, a_d, wt_g, wt_g_scale, wt_u, wt_u_scale, fast):
        return (_like(gate, gate.shape[0], wt_g.shape[0]), torch.empty_like(gate), torch.empty_like(up),
                torch.empty_like(low_g), torch.empty_like(low_u), torch.empty_like(gate))


# ---------------------------------------------------------------------------------------------------------
# The MLP forward that uses it
# ---------------------------------------------------------------------------------------------------------

def _projections(mlp) -> tuple:
    return mlp.gate_proj, mlp.up_proj, mlp.down_proj


def _own_fp8(layer) -> bool:
    base = getattr(layer, "base_layer", None)
    return isinstance(base, Fp8FrozenLinear) and base.w_rows is not None and base.bias is None


def serves(mlp) -> bool:
    """Whether the fused step gives this MLP call peft's result: the plain case over fp8 bases (each call: after
    training, restore_base puts the bf16 bases back and the MLP's own forward runs)."""
    layers = _projections(mlp)
    return (all(_own_fp8(layer) and not layer.merged and not layer.disable_adapters for layer in layers)
            and one_plain_adapter(layers))


def _fused_forward(self, x: torch.Tensor) -> torch.Tensor:
    if not serves(self):
        return type(self).forward(self, x)
    gate, up, down = _projections(self)
    name = gate.active_adapters[0]
    shape = x.shape
    x2d = x.reshape(-1, shape[-1])
    a_gate, a_up = gate.lora_A[name].weight, up.lora_A[name].weight
    low = F.linear(gate._cast_input_dtype(x2d, a_gate.dtype), torch.cat([a_gate, a_up]))
    g_base, u_base = gate.base_layer, up.base_layer
    dtype, rank = output_dtype(x2d), a_gate.shape[0]
    x2d = x2d.to(dtype)
    x_q, x_scale = quantize_rows(x2d, g_base.w_rows.dtype)
    as_operand = lambda t: t.to(dtype).contiguous()  # noqa: E731  (the kernels take one dtype, dense)
    h, quantized, scale, low_d, _, _ = swiglu_lora(
        x2d, x_q, x_scale, g_base.w_rows, g_base.w_rows_scale, g_base.wt_rows, g_base.wt_rows_scale, u_base.w_rows,
        u_base.w_rows_scale, u_base.wt_rows, u_base.wt_rows_scale, as_operand(low[:, :rank] * gate.scaling[name]),
        as_operand(low[:, rank:] * up.scaling[name]), as_operand(gate.lora_B[name].weight),
        as_operand(up.lora_B[name].weight), as_operand(down.lora_A[name].weight), g_base.fast_accumulation)
    y = down.base_layer.forward_quantized(h, quantized, scale)   # h itself only carries its gradient back
    y = (y + down.lora_B[name](low_d * down.scaling[name])).to(y.dtype)
    return y.reshape(*shape[:-1], y.shape[-1])


def activation_of(model: torch.nn.Module) -> str | None:
    """The MLP activation's name in the model's config (Gemma's configs call it hidden_activation)."""
    config = text_config(model)
    return getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None)


def fusable_mlps(model: torch.nn.Module) -> list:
    """The MLPs the fused step can serve: SiLU-gated, LoRA on gate, up and down, each over its own fp8 base."""
    from peft.tuners.lora import Linear as LoraLinear   # lazy: peft is imported where adapters are used

    if activation_of(model) not in SILU_ACTIVATIONS:
        return []
    return [m for m in speed_scope(model).modules()
            if all(type(getattr(m, n, None)) is LoraLinear for n in ("gate_proj", "up_proj", "down_proj"))
            and all(_own_fp8(layer) for layer in _projections(m))]


def fused_swiglu_blocker(model: torch.nn.Module, device: torch.device, compiled: bool, default: bool) -> str | None:
    """Why the fused step cannot run (or, default: is not on by default) here, or None."""
    activation = activation_of(model)
    if activation not in SILU_ACTIVATIONS:
        return f"activation {activation}: the fused step is SwiGLU's (silu)"
    if not fusable_mlps(model):
        return "needs LoRA on gate_proj, up_proj and down_proj over the fp8 base (fp8_base), plain LoRA, no bias"
    if default and device.type != "cuda":
        return f"{device.type}: the kernels are Triton's, for a GPU (fused_swiglu: true runs the torch reference)"
    if default and not compiled:
        return "the decoder layers are not compiled (measured with compiled layers only)"
    if device.type == "cuda" and not TRITON:
        return "Triton is not installed (it comes with torch's CUDA wheels)"
    if device.type == "cuda":
        return kernels_blocker(device_arch(device), lora_rank(model))
    return None


def lora_rank(model: torch.nn.Module) -> int:
    """The largest LoRA rank of the MLPs the fused step would serve (their rank-r tiles are sized by it)."""
    return max((layer.lora_A[name].weight.shape[0] for mlp in fusable_mlps(model) for layer in _projections(mlp)
                for name in layer.active_adapters), default=0)


def kernels_blocker(arch: str, rank: int) -> str | None:
    """Why the fused kernels must not run on this GPU architecture at this LoRA rank, or None: a rank above what the
    arch's tiles take without a spill, or a configuration that does not build or spills there (model/kernel_builds.py,
    decided before the run from the compiled code); doctor and the run plan ask it for a machine they read."""
    limit = swiglu_rank_limit(arch)
    if rank > limit:
        return (f"LoRA rank {rank} is above the {limit} the fused kernels take on {arch} without spilling registers "
                "(docs/rocm.md)")
    refused = refusal("fused_swiglu", arch, rank_block=swiglu_rank_block(max(rank, 1)))
    return f"the fused kernels are refused on {arch}: {refused}" if refused is not None else None


def is_fused(mlp) -> bool:
    """Whether fuse_swiglu gave this MLP the fused forward."""
    return getattr(mlp.forward, "__func__", None) is _fused_forward


def fuse_swiglu(model: torch.nn.Module) -> tuple[int, str]:
    """Give each fusable MLP the fused forward (after the fp8 base and before the first forward); -> (MLPs, why)."""
    mlps = fusable_mlps(model)
    for mlp in mlps:
        mlp.forward = types.MethodType(_fused_forward, mlp)
    return len(mlps), (f"{len(mlps)} MLPs run between their matmuls as Triton kernels: gate's and up's LoRA "
                       f"products, silu(gate) * up, down's lora_A product and its fp8 quantisation in one pass, and "
                       f"one pass back")


def decide_fused_swiglu(model: torch.nn.Module, asked: bool | None, device: torch.device,
                        compiled: bool) -> tuple[bool, str]:
    """fused_swiglu for train and bench alike, applied where it is on; -> (on, reason). asked: true / false, or None
    for the default (on where the layers are compiled on a CUDA GPU over the fp8 base)."""
    if asked is False:
        return False, "off: fused_swiglu: false was asked for"
    blocker = fused_swiglu_blocker(model, device, compiled, default=asked is None)
    if blocker is not None:
        return False, f"off: {blocker}"
    _, why = fuse_swiglu(model)
    if asked is None:
        why = f"on by default: {why}; fused_swiglu: false turns it off"
    return True, why
