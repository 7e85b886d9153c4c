"""Optional speed-ups applied to a loaded model: liger-kernel's fused RMSNorm / RoPE / SwiGLU, regional
torch.compile, and the gradient-checkpointing default derived from a memory budget.

Each is a plain function returning what it did (for the start-up printout and cfg.decide), never raising for a
missing optional package: speed features must not stop a run that would otherwise work.
"""

from __future__ import annotations

import inspect

import torch

# model_type -> liger-kernel's patching function name (liger_kernel.transformers). The loss is ours (loss.py),
# so liger's fused linear cross-entropy is switched off when patching.
LIGER_PATCHES = {
    "qwen2": "apply_liger_kernel_to_qwen2",
    "qwen3": "apply_liger_kernel_to_qwen3",
    "llama": "apply_liger_kernel_to_llama",
    "mistral": "apply_liger_kernel_to_mistral",
    "gemma3_text": "apply_liger_kernel_to_gemma3_text",
}


def base_model_of(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def apply_liger_kernels(model: torch.nn.Module) -> tuple[bool, str]:
    """Swap in liger-kernel's fused RMSNorm, RoPE and SwiGLU on this model instance, where supported."""
    base = base_model_of(model)
    model_type = getattr(base.config, "model_type", "?")
    name = LIGER_PATCHES.get(model_type)
    if name is None:
        return False, f"liger-kernel: no patch for model type {model_type}"
    if not next(base.parameters()).is_cuda:
        return False, "liger-kernel: its Triton kernels need a GPU"
    try:
        import liger_kernel.transformers as liger
    except ImportError:
        return False, "liger-kernel is not installed (pip install liger-kernel)"
    patch = getattr(liger, name)
    wanted = dict(model=base, rope=True, rms_norm=True, swiglu=True, geglu=True, cross_entropy=False,
                  fused_linear_cross_entropy=False)
    accepted = inspect.signature(patch).parameters
    patch(**{k: v for k, v in wanted.items() if k in accepted})
    return True, f"liger-kernel: fused RMSNorm, RoPE, SwiGLU for {model_type}"


def compile_layers(model: torch.nn.Module) -> tuple[bool, str]:
    """Compile each decoder layer on its own ("regional" compilation): one compiled graph reused by every
    layer, so compile time does not grow with depth, and packed rows of changing length only need dynamic
    shapes (marked dynamic from the start so the first new length does not trigger a recompile)."""
    layers = getattr(getattr(base_model_of(model), "model", None), "layers", None)
    if layers is None:
        return False, "torch.compile: no decoder layers found"
    for layer in layers:
        layer.compile(dynamic=True)
    return True, f"torch.compile: {len(layers)} decoder layers, dynamic shapes"


def skip_lora_input_cast(model: torch.nn.Module) -> tuple[int, str]:
    """Stop peft from casting each LoRA layer's input to the adapter's fp32 dtype; -> (layers changed, reason).

    With a bf16 base and fp32 adapters every forward runs under autocast, which casts that fp32 copy straight
    back to bf16 for the adapter's matmul. The round trip is exact (bf16 -> fp32 -> bf16), so skipping it changes
    no value, forward or backward, and saves two elementwise kernels and one more bf16 copy of the input kept
    for backward, per LoRA layer (seven per decoder layer with lora_target all). Only for models that are only
    ever run under autocast: without it, a bf16 input would meet an fp32 weight."""
    changed = 0
    for module in model.modules():
        if hasattr(module, "cast_input_dtype_enabled") and hasattr(module, "lora_A"):
            module.cast_input_dtype_enabled = False
            changed += 1
    return changed, (f"LoRA inputs stay in the compute dtype under autocast ({changed} layers): peft's cast to "
                     f"fp32 would be undone by autocast at once")


def activation_bytes_per_token(config) -> int:
    """Rough bytes kept for backward per token with LoRA on all linear layers, bf16 base, no checkpointing:
    the inputs of the LoRA'd projections, the attention output, the MLP's gate/up/activation outputs, the norms.
    An upper bound since LoRA inputs stay bf16 (skip_lora_input_cast): at 16,384 tokens on an H200 the whole
    peak was 23.6 GiB for the Qwen2.5-0.5B shape and 48.7 GiB for 1.5B, where this formula says 31 and 62 GiB."""
    hidden = config.hidden_size
    inter = config.intermediate_size
    return config.num_hidden_layers * (24 * hidden + 12 * inter)


# Share of the memory budget a micro-batch's activations may take before checkpointing pays for itself.
ACTIVATION_SHARE = 0.5


def max_tokens_without_checkpointing(config, memory_budget_gib: float) -> int:
    """The largest micro-batch (in tokens) whose activations fit ACTIVATION_SHARE of the budget: above it,
    `choose_gradient_checkpointing` turns checkpointing on."""
    return int(ACTIVATION_SHARE * memory_budget_gib * 2**30 // activation_bytes_per_token(config))


def choose_gradient_checkpointing(config, tokens_per_micro_batch: int, memory_budget_gib: float | None,
                                  requested: bool | None = None) -> tuple[bool, str]:
    """-> (checkpoint activations?, reason). Off unless the activations would exceed half the memory budget:
    recomputation costs a third more compute, so it is worth it only when memory is what limits."""
    if requested is not None:
        return requested, f"gradient_checkpointing: {str(requested).lower()} was asked for"
    need = activation_bytes_per_token(config) * tokens_per_micro_batch / 2**30
    if memory_budget_gib is None:
        return False, f"off: no memory budget known (activations ~{need:.1f} GiB)"
    if tokens_per_micro_batch > max_tokens_without_checkpointing(config, memory_budget_gib):
        return True, f"on: activations ~{need:.1f} GiB > half of the {memory_budget_gib:.0f} GiB budget"
    return False, f"off: activations ~{need:.1f} GiB fit in half of the {memory_budget_gib:.0f} GiB budget"
