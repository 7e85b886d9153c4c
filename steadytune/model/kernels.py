"""Speed-ups applied to a loaded model: liger-kernel's fused RMSNorm / RoPE / SwiGLU, regional torch.compile
(each decoder layer, one compiled graph per layer type), and skipping peft's no-op LoRA input cast.

Each is a plain function returning what it did, never raising for a missing optional package: speed features must
not stop a run that would otherwise work (a key that *asks* for one is the recipe's business: it raises). Which
of them a run gets is decided by the speed policy (hardware/speed.py).
"""

from __future__ import annotations

import contextlib
import inspect

import torch

from steadytune.model.anatomy import base_model_of, decoder_layers, output_head

# model_type -> liger-kernel's patching function name (liger_kernel.transformers). The loss is ours (training/loss.py),
# so liger's fused linear cross-entropy is switched off when patching.
LIGER_PATCHES = {
    "qwen2": "apply_liger_kernel_to_qwen2",
    "qwen3": "apply_liger_kernel_to_qwen3",
    "llama": "apply_liger_kernel_to_llama",
    "mistral": "apply_liger_kernel_to_mistral",
    "gemma3_text": "apply_liger_kernel_to_gemma3_text",
}


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


# torch.compile's backend for the layers (tests swap in one that counts compilations).
COMPILE_BACKEND = "inductor"


# recompute_pointwise: the one partitioner setting it changes, for the compiled layers only. AOTAutograd's min-cut
# partitioner decides what a compiled layer keeps for its backward. By default it never recomputes a result that the
# backward must write to memory anyway (an operand of a backward matmul: SwiGLU's product, which down_proj's LoRA A
# gradient reads; the normed input of the projections), so it keeps them all. With this off it may recompute them
# from what it keeps. Its allowlist still holds: only elementwise ops and views are recomputed, never a matmul or
# attention. At the Qwen2.5-7B widths a compiled layer then keeps 50,092 bf16 values a token for its backward
# instead of 98,732 (benchmarks/saved_activations.py, on a CPU).
RECOMPUTE_POINTWISE_PARTITION = {"ban_recompute_materialized_backward": False}


def _layer_backend(options: dict | None, recompute_pointwise: bool):
    """-> (backend, options) for Dynamo: COMPILE_BACKEND as it is, or wrapped so that the partition of these
    layers' forward and backward runs under RECOMPUTE_POINTWISE_PARTITION (the partition happens inside the
    backend's call, when a layer first runs; a global setting would reach every other compile in the process)."""
    if not recompute_pointwise:
        return COMPILE_BACKEND, options
    inner = COMPILE_BACKEND

    def backend(graph, example_inputs):
        import torch._functorch.config as partition_config  # lazy: only compiled runs that asked for it

        with partition_config.patch(RECOMPUTE_POINTWISE_PARTITION):
            if inner == "inductor":
                from torch._inductor.compile_fx import compile_fx  # lazy: Inductor's entry, as "inductor" names it

                return compile_fx(graph, example_inputs, config_patches=options)
            return inner(graph, example_inputs)

    return backend, None


def compile_layers(model: torch.nn.Module, static_shapes: bool = False, tune: bool = False,
                   recompute_pointwise: bool = False) -> tuple[bool, str]:
    """Compile each decoder layer on its own ("regional" compilation): one compiled graph reused by every layer
    of a type (Gemma 3's sliding and full layers are two), so compile time does not grow with depth.

    static_shapes: every micro-batch has one shape (packing.StaticShape), so the layers are compiled for exactly
    that shape, once. Without it, packed rows change length every step: shapes are marked dynamic from the start
    (the first new length would otherwise recompile), and some values the layers see still recompile.

    tune: Inductor's coordinate-descent tuning of these layers' Triton kernels (the plan's kernel_tuning), as an
    option of this compilation only, not of every later torch.compile in the process.

    recompute_pointwise: the layers keep about half the activations for their backward and recompute the rest
    from them, elementwise ops only (the plan's recompute_pointwise; RECOMPUTE_POINTWISE_PARTITION says how)."""
    layers = decoder_layers(model)
    if layers is None:
        return False, "torch.compile: no decoder layers found"
    backend, options = _layer_backend({"coordinate_descent_tuning": True} if tune else None, recompute_pointwise)
    for layer in layers:
        layer.compile(dynamic=not static_shapes, backend=backend, options=options)
    mark_fused_cross_entropy(model, True)
    kinds = len({getattr(layer, "attention_type", None) for layer in layers})
    shapes = "one static shape: compiled once" + (f" per layer type ({kinds})" if kinds > 1 else "")
    return True, (f"torch.compile: {len(layers)} decoder layers, " + (shapes if static_shapes else "dynamic shapes")
                  + (", kernels tuned (coordinate descent)" if tune else "")
                  + (", elementwise results recomputed in backward instead of kept" if recompute_pointwise else ""))


def uncompile_layers(model: torch.nn.Module) -> None:
    """Back to eager layers after training: scoring and generation come in many shapes, each of which would
    compile again. (nn.Module.compile keeps the compiled callable in `_compiled_call_impl`; torch has no public
    way to drop it.)"""
    for layer in decoder_layers(model) or []:
        if getattr(layer, "_compiled_call_impl", None) is not None:
            layer._compiled_call_impl = None
    mark_fused_cross_entropy(model, False)


def mark_fused_cross_entropy(model: torch.nn.Module, on: bool) -> None:
    """Let the loss's chunked cross-entropy run its softmax arithmetic compiled (loss.chunk_loss_and_grad, on a
    GPU): wherever the layers are compiled, so is the head's loss, which eager makes ~8 passes over the logits."""
    try:
        head = output_head(model)
    except (AttributeError, TypeError, ValueError):
        return
    if isinstance(head, torch.nn.Module):
        setattr(head, FUSED_CHUNK_FLAG, on)


def eager_layers():
    """Run compiled layers eagerly inside this block (evaluation during training: padded batches of many shapes
    that would each compile again)."""
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    return set_stance("force_eager") if set_stance else contextlib.nullcontext()


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


# Set on an output head (kernels.compile_layers does, where the decoder layers are compiled) to run each chunk's
# softmax arithmetic as one compiled function (chunk_loss_and_grad) on a GPU.
FUSED_CHUNK_FLAG = "steadytune_fused_chunk"
