"""FP8 matrix multiplies for the frozen base of a LoRA model (`fp8_base: true`; bench `--fp8-base on`).

In LoRA training the base weights never change, and two of a linear layer's three matmuls touch them: the forward
(x @ W^T) and the input gradient (g @ W); the weight gradient is not needed. Hopper and Ada tensor cores multiply fp8
at twice the bf16 rate. So each frozen base linear is quantised to fp8 (e4m3) once, at start, in the two layouts
those matmuls read (W with a scale per output row, W^T with a scale per input column), and each step quantises only
the activations and the incoming gradients, one scale per row (token), before `torch._scaled_mm`. The LoRA
adapters, norms, attention and the head stay as they were.

Accumulation: `use_fast_accum`, both matmuls. Hopper's fast mode skips the periodic promotion of the tensor cores'
partial sums to fp32. Measured at the 1.5B shapes (benchmarks/fp8_accum_error.py, docs/speed.md) it moves a
product's relative error from 3.74% to at most 3.75% (the e4m3 rounding of the inputs is nearly all of it) and the
step 1.05x faster. `set_fast_accumulation(model, False)` (bench --fp8-accumulation exact) puts the exact mode back.

Why not torchao's Float8Linear: it is built for training the weight too. It computes the weight gradient in every
backward (a third of the layer's work, thrown away for a frozen weight) and quantises the weight again each step.

Rounding: e4m3 keeps 3 mantissa bits, so each product's inputs carry up to 2^-4 relative rounding; with a scale per
row it does not overflow or flush whole rows. The adapters train in bf16/fp32 as before and are scored, saved and
exported over the bf16 base (`restore_base` after training).

When it is on by default (`decide_fp8_base`, for train and bench): a CUDA GPU that multiplies fp8, a bf16 run whose
decoder layers are compiled (eager, each matmul's quantisation is several kernels of its own), a model large enough
that the matmuls, not the quantisation around them, are the time (hidden >= AUTO_MIN_HIDDEN), and copies that do not
turn gradient checkpointing on.

Where: CUDA GPUs of compute capability 8.9 and up (Ada, Hopper, Blackwell); on a CPU `torch._scaled_mm` also runs
(slowly: it is for tests). Not on ROCm yet: MI300's fp8 is e4m3fnuz, another format, not written here.
"""

from __future__ import annotations

import re

import torch

from steadytune.hardware.memory import choose_gradient_checkpointing
from steadytune.model.anatomy import base_model_of

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
SCALE_FLOOR = 1e-12            # an all-zero row keeps a finite scale (its values quantise to 0 either way)
# The smallest shape measured faster with fp8 on an H200 (Qwen2.5-0.5B, hidden 896: 1.05x the tokens/s; Gemma 3 1B
# 1.05x, 1.5B 1.13x, 7B 1.33x: docs/speed.md). Below it nothing was measured, so the default stays off there.
AUTO_MIN_HIDDEN = 896
FP8_OVER_QUANTIZED = ("quantization_bit {bits}: bitsandbytes holds the base and multiplies it its own way; fp8 is "
                      "for a bf16 base")


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (x in fp8, fp32 scale per row [rows, 1]) with x ~= fp8 * scale; x is 2-D."""
    amax = x.abs().amax(dim=-1, keepdim=True).float()
    scale = (amax / FP8_MAX).clamp(min=SCALE_FLOOR)
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


class _FrozenFp8Matmul(torch.autograd.Function):
    """y = x @ W^T in fp8 with W frozen: forward and the input gradient; no weight gradient."""

    @staticmethod
    def forward(ctx, x2d, w_rows, w_rows_scale, wt_rows, wt_rows_scale, out_dtype, fast):
        ctx.save_for_backward(wt_rows, wt_rows_scale)
        ctx.out_dtype, ctx.fast = out_dtype, fast
        xq, xs = quantize_rows(x2d)
        # _scaled_mm wants its second operand column-major: W row-major [out, in] transposed is [in, out] column-major
        return torch._scaled_mm(xq, w_rows.t(), scale_a=xs, scale_b=w_rows_scale.t(), out_dtype=out_dtype,
                                use_fast_accum=fast)

    @staticmethod
    def backward(ctx, grad):
        wt_rows, wt_rows_scale = ctx.saved_tensors
        gq, gs = quantize_rows(grad.contiguous())
        grad_x = torch._scaled_mm(gq, wt_rows.t(), scale_a=gs, scale_b=wt_rows_scale.t(), out_dtype=ctx.out_dtype,
                                  use_fast_accum=ctx.fast)
        return grad_x, None, None, None, None, None, None


class Fp8FrozenLinear(torch.nn.Module):
    """A frozen nn.Linear whose matmuls run in fp8. Keeps the original `weight` (and `bias`) as they were, so that
    peft, the adapter files and export see the same layer; only its forward changes."""

    def __init__(self, linear: torch.nn.Linear, fast_accumulation: bool = True):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.fast_accumulation = fast_accumulation
        self.weight, self.bias = linear.weight, linear.bias
        with torch.no_grad():
            w = linear.weight.detach()
            w_rows, w_scale = quantize_rows(w)                     # [out, in], scale per output row
            wt_rows, wt_scale = quantize_rows(w.t().contiguous())  # [in, out], scale per input column of W
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
        merged = cls(linear, bases[0].fast_accumulation)
        merged.weight = None
        if merged.bias is not None:   # a copy, not a weight of the model: kept out of its parameters and state_dict
            bias = merged.bias.detach()
            del merged.bias
            merged.register_buffer("bias", bias, persistent=False)
        return merged

    def share_copies(self, shared: "Fp8FrozenLinear", offset: int) -> None:
        """Drop this layer's own fp8 copies: `shared` (a concatenated layer) holds them from column `offset` on."""
        for name in ("w_rows", "w_rows_scale", "wt_rows", "wt_rows_scale"):
            setattr(self, name, None)
        self.shared, self.shared_offset = shared, offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w_rows is None:   # copies shared with sibling layers: their product, this layer's columns
            return self.shared(x)[..., self.shared_offset:self.shared_offset + self.out_features]
        out_dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
            out_dtype = torch.bfloat16
        shape = x.shape
        y = _FrozenFp8Matmul.apply(x.reshape(-1, shape[-1]), self.w_rows, self.w_rows_scale, self.wt_rows,
                                   self.wt_rows_scale, out_dtype, self.fast_accumulation)
        y = y.reshape(*shape[:-1], self.out_features)
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, fp8=e4m3 (frozen), "
                f"fast_accumulation={self.fast_accumulation}")


def fp8_support(device: torch.device) -> tuple[bool, str]:
    """(whether this device runs the fp8 base, why)."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no fp8 matmul (torch._scaled_mm)"
    if device.type == "cuda":
        if getattr(torch.version, "hip", None):
            return fp8_arch_support("rocm", None)
        major, minor = torch.cuda.get_device_capability(device)
        return fp8_arch_support("cuda", f"sm_{major}{minor}")
    if device.type == "cpu":
        return True, "CPU: torch._scaled_mm runs, slower than bf16 (for tests)"
    return False, f"{device.type}: no fp8 matmul here"


def fp8_arch_support(backend: str, arch: str | None) -> tuple[bool, str]:
    """(whether a GPU of this backend and architecture, "sm_90" on CUDA, runs the fp8 base, why): for the device in
    hand and for doctor's reading of a machine alike."""
    if backend == "rocm":
        return False, "ROCm: MI300's fp8 (e4m3fnuz) is not written here yet"
    capability = re.fullmatch(r"sm_(\d+)(\d)", arch or "")
    if backend != "cuda" or capability is None:
        where = f"{backend} {arch}" if arch else f"{backend}, architecture unknown"
        return False, f"{where}: no fp8 tensor cores known for it"
    major, minor = int(capability.group(1)), int(capability.group(2))
    if (major, minor) < (8, 9):
        return False, f"sm_{major}{minor} has no fp8 tensor cores (Ada sm_89, Hopper sm_90 and later do)"
    return True, f"sm_{major}{minor} multiplies fp8 at twice the bf16 rate"


def auto_fp8_blocker(device: torch.device, precision: str, compiled: bool, hidden_size: int) -> str | None:
    """Why fp8_base stays off by default on this run, or None where it goes on (fp8_base: true/false decide alone)."""
    return default_blocker_on(device.type, fp8_support(device), precision, compiled, hidden_size)


def default_blocker_on(device_type: str, support: tuple[bool, str], precision: str, compiled: bool,
                       hidden_size: int) -> str | None:
    """auto_fp8_blocker from what is known of the device: its torch type ("cuda" on ROCm too) and fp8_support's
    answer (doctor passes fp8_arch_support's for a machine it reads)."""
    supported, why = support
    if device_type != "cuda":
        return f"{device_type}: fp8 is faster only on a GPU's fp8 tensor cores (fp8_base: true still runs it here)"
    if not supported:
        return why
    if precision != "bf16":
        return f"precision {precision}: the fp8 base is measured under bf16 only"
    if not compiled:
        return ("the decoder layers are not compiled: eager, each matmul's fp8 quantisation is several kernels of "
                "its own")
    if hidden_size < AUTO_MIN_HIDDEN:
        return (f"hidden {hidden_size} < {AUTO_MIN_HIDDEN}: matmuls this small gain less than their inputs' "
                f"quantisation costs (measured faster from the 0.5B shape, hidden 896, up)")
    return None


def config_blocker(cfg, shard_kind: str | None = None) -> str | None:
    """What in a run's config rules the fp8 base out (for the default, also a stage it was not measured for);
    shard_kind: the run's sharding (deepspeed, fsdp), if any. cfg: a RunConfig."""
    if cfg.method.finetuning_type != "lora":
        return f"finetuning_type {cfg.method.finetuning_type}: only a frozen LoRA base is multiplied in fp8"
    if shard_kind in ("deepspeed", "fsdp"):
        return f"{shard_kind} shards the base weights; the fp8 copies would be whole on every rank"
    if cfg.model.quantization_bit is not None:
        return FP8_OVER_QUANTIZED.format(bits=cfg.model.quantization_bit)
    if cfg.train.fp8_base is None and cfg.method.stage not in ("sft", "pt"):
        return f"stage {cfg.method.stage}: measured for sft and pt only (fp8_base: true asks for it)"
    return None


def default_fp8_blocker(model: torch.nn.Module, device: torch.device, precision: str, compiled: bool, tokens: int,
                        budget_gib: float | None, state_gib: float,
                        checkpointing_asked: bool | None = None) -> str | None:
    """auto_fp8_blocker, and one more where checkpointing is the policy's to choose: the copies must not turn it on
    (recomputing a third of the work costs more than fp8 gains)."""
    config = base_model_of(model).config
    blocker = auto_fp8_blocker(device, precision, compiled, config.hidden_size)
    if blocker is not None or checkpointing_asked is not None:
        return blocker
    copies = fp8_copies_gib(model)
    without = choose_gradient_checkpointing(config, tokens, budget_gib, compiled=compiled, state_gib=state_gib)[0]
    with_copies = choose_gradient_checkpointing(config, tokens, budget_gib, compiled=compiled,
                                                state_gib=state_gib + copies)[0]
    if with_copies and not without:
        return f"its copies of the base ({copies:.1f} GiB) would turn gradient checkpointing on"
    return None


def decide_fp8_base(model: torch.nn.Module, asked: bool | None, device: torch.device, precision: str, compiled: bool,
                    tokens: int, budget_gib: float | None, state_gib: float, checkpointing_asked: bool | None = None,
                    ruled_out: str | None = None) -> tuple[bool, str]:
    """The fp8_base decision of train and bench alike, applied where it is on; -> (on, reason). asked: the key's
    true / false, or None for the default (default_fp8_blocker decides); ruled_out: what in the run's set-up rules
    fp8 out (a 4-bit base, sharding, a stage the default was not measured for)."""
    if asked is False:
        return False, "off: fp8_base: false was asked for"
    if ruled_out is None and asked is None:
        ruled_out = default_fp8_blocker(model, device, precision, compiled, tokens, budget_gib, state_gib,
                                        checkpointing_asked)
    if ruled_out is not None:
        return False, f"off: {ruled_out}"
    on, why = apply_fp8_base(model, device)
    if asked is None and on:
        why = f"on by default: {why}; fp8_base: false turns it off"
    return on, why


def lora_linear_bases(model: torch.nn.Module) -> list:
    """(LoRA layer, its nn.Linear base) for each LoRA layer over a plain linear (not bitsandbytes' 4-bit subclass)."""
    return [(module, module.base_layer) for module in model.modules()
            if hasattr(module, "lora_A") and type(getattr(module, "base_layer", None)) is torch.nn.Linear]


def eligible_layers(model: torch.nn.Module) -> list:
    """(LoRA layer, its frozen nn.Linear base) for each base the fp8 kernels take: sizes multiples of 16."""
    return [(module, base) for module, base in lora_linear_bases(model)
            if not base.weight.requires_grad and base.weight.dtype.is_floating_point
            and base.weight.shape[0] % 16 == 0 and base.weight.shape[1] % 16 == 0]


def fp8_copies_gib(model: torch.nn.Module) -> float:
    """GiB that use_fp8_base would add: two 1-byte layouts of each eligible base and an fp32 scale per row of each."""
    return sum(2 * base.weight.numel() + 4 * (base.out_features + base.in_features)
               for _, base in eligible_layers(model)) / 2**30


def use_fp8_base(model: torch.nn.Module) -> tuple[int, str]:
    """Swap the frozen base linear of every LoRA layer for its fp8 form; -> (layers changed, reason).

    Only layers whose sizes the fp8 kernels take (multiples of 16) and whose weight is frozen; the others stay as they
    are and are counted in the reason. (A GPU run's base is bf16; a CPU run's fp32 base works the same way.)"""
    eligible = eligible_layers(model)
    changed, kept = len(eligible), len(lora_linear_bases(model)) - len(eligible)
    for module, base in eligible:
        module.base_layer = Fp8FrozenLinear(base)
    why = f"the frozen base of {changed} LoRA layers multiplies in fp8 (e4m3, a scale per row), forward and input gradient"
    if kept:
        why += f"; {kept} layers kept as they were (trainable, or sizes not multiples of 16)"
    return changed, why


def restore_base(model: torch.nn.Module) -> int:
    """Put each fp8 base back as the nn.Linear it was (same weight and bias tensors; the copies are freed): after
    training, scoring, generation and export use the bf16 base the adapter will be used on. -> layers restored."""
    restored = 0
    for module in list(model.modules()):
        base = getattr(module, "base_layer", None)
        if isinstance(base, Fp8FrozenLinear):
            linear = torch.nn.Linear(base.in_features, base.out_features, bias=base.bias is not None, device="meta")
            linear.weight, linear.bias = base.weight, base.bias
            module.base_layer = linear
            restored += 1
    return restored


def set_fast_accumulation(model: torch.nn.Module, fast: bool) -> int:
    """Fast (the default) or exact fp8 accumulation in every fp8 base of `model` (bench --fp8-accumulation, to
    measure what it buys); -> layers set."""
    layers = [m for m in model.modules() if isinstance(m, Fp8FrozenLinear)]
    for layer in layers:
        layer.fast_accumulation = fast
    return len(layers)


def apply_fp8_base(model: torch.nn.Module, device: torch.device) -> tuple[bool, str]:
    """fp8 for the frozen base where `device` multiplies fp8; -> (on: some layer changed, why). For train's fp8_base
    and bench's --fp8-base alike; called before the first forward, when the compiled layers trace the fp8 matmuls."""
    supported, why = fp8_support(device)
    if not supported:
        return False, why
    changed, how = use_fp8_base(model)
    return changed > 0, f"{how} ({why})"
