"""Gated DeltaNet (linear-attention) layers of the hybrid models (Qwen3.5 dense and MoE, Qwen3-Next): which kernels
run them, and packed rows that restart every layer's recurrent state and conv window at each sequence start.

What transformers (5.x) does on its own, read from its modeling files: each GatedDeltaNet layer calls module-level
functions `causal_conv1d_forward` (-> `causal_conv1d_fn`) and `torch_chunk_gated_delta_rule`. At import, those are
bound to flash-linear-attention's Triton kernels (`fla`) or the causal-conv1d CUDA package when they import, and to
a PyTorch reference otherwise (a Python loop over 64-token chunks: "correct but much slower"). A packed row's
boundaries reach the layer only as the `cu_seq_lens_q` keyword our varlen collator adds (position ids never reach
it). With that keyword:
- the chunk rule is given `cu_seqlens`: fla's kernel restarts the state there; without fla (or on a CPU) transformers
  raises ("can't keep packed sequences apart");
- the conv ignores it on every path (the reference conv takes no boundaries, and causal-conv1d's kernel takes
  `seq_idx`, not `cu_seqlens`), so the 3-token conv window of each sequence reads the end of the one before.

So for packed rows we route both calls here (`keep_packed_sequences_apart`): fla's varlen chunk rule and its varlen
Triton causal conv1d on a GPU (CUDA or ROCm: both are Triton), and on a CPU or without fla the same reference code
run once per sequence. Without `cu_seq_lens_q` (unpacked batches, generation with a cache) transformers' own
functions run unchanged. Our own code is only the per-sequence loop; the kernels are fla's.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

import torch
import torch.nn.functional as F

FLA_INSTALL = "pip install 'steadytune[linear-attention]'"
# The two functions every GatedDeltaNet layer calls through its modeling module's globals (see the docstring).
CONV_FUNCTION = "causal_conv1d_forward"
CHUNK_FUNCTION = "torch_chunk_gated_delta_rule"
_INSTALLED = "_steadytune_packed_sequences"


def layer_types_of(config) -> list[str]:
    """A config's layer_types, or its text config's (a vision-language Qwen3.5 keeps them there); [] if none."""
    for c in (config, getattr(config, "text_config", None)):
        types = getattr(c, "layer_types", None) if c is not None else None
        if types:
            return list(types)
    return []


def linear_attention_layers(config) -> int:
    """How many of the model's layers are linear attention (gated DeltaNet)."""
    return sum(1 for t in layer_types_of(config) if t == "linear_attention")


def linear_attention_in_folder(config_json: dict) -> int:
    """linear_attention_layers for a config.json read as a dict (before the model is loaded)."""
    for c in (config_json, config_json.get("text_config") or {}):
        types = c.get("layer_types") if isinstance(c, dict) else None
        if types:
            return sum(1 for t in types if t == "linear_attention")
    return 0


# --- flash-linear-attention -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def fla_kernels() -> tuple[Callable, Callable] | None:
    """(chunk_gated_delta_rule, causal_conv1d) from flash-linear-attention, or None where it does not import."""
    try:   # lazy: an optional dependency (the linear-attention extra); importing it also loads Triton
        from fla.modules.convolution import causal_conv1d
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception:   # ImportError, or a build that fails on import (wrong triton): the reference path runs
        return None
    return chunk_gated_delta_rule, causal_conv1d


def fla_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("flash-linear-attention")
    except Exception:
        return None


def kernel_choice(config, device_type: str) -> tuple[str, str] | None:
    """(which kernels run the model's gated DeltaNet layers, the start-up line saying so) or None for a model
    without them. Where the reference runs on a GPU the line names the install that fixes it and what it costs."""
    n = linear_attention_layers(config)
    if not n:
        return None
    if device_type == "cpu":
        return "reference", (f"{n} gated DeltaNet layers: PyTorch reference (flash-linear-attention's kernels are "
                             "Triton, GPU only); packed rows restart each layer's state per example")
    if fla_kernels() is not None:
        return "flash-linear-attention", (f"{n} gated DeltaNet layers: flash-linear-attention {fla_version()} Triton "
                                          "kernels (chunked gated delta rule and causal conv1d, varlen over packed "
                                          "rows)")
    return "reference", (f"{n} gated DeltaNet layers run transformers' PyTorch reference: a Python loop over 64-token "
                         "chunks per layer, the slowest part of the step (benchmarks/gpu_models2026.sh measures it); "
                         f"{FLA_INSTALL} for flash-linear-attention's Triton kernels")


# --- packed rows ----------------------------------------------------------------------------------------------

_LAST_CU: list = [None, None]   # (the collator's cu_seq_lens, its int64 copy): one copy per forward, not per layer


def _as_long(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """cu_seqlens as the int64 tensor fla takes, the same object for every layer of a forward: fla caches the chunk
    indices it works out from it (on the host) by tensor identity, so they are made once a forward, not per layer."""
    if _LAST_CU[0] is not cu_seqlens:
        _LAST_CU[:] = [cu_seqlens, cu_seqlens.long()]
    return _LAST_CU[1]


def _sequences(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) of every non-empty sequence (static shapes end cu_seq_lens with empty ones)."""
    bounds = cu_seqlens.tolist()
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def conv_by_sequence(x: torch.Tensor, weight: torch.Tensor, bias, activation: str | None,
                     cu_seqlens: torch.Tensor, kernels: tuple | None = None) -> torch.Tensor:
    """Depthwise causal conv of x [1, channels, T] whose window restarts at every sequence of cu_seqlens.
    weight: [channels, width]. fla's varlen Triton kernel (`kernels`: fla_kernels()) on a GPU, the reference conv
    per sequence elsewhere."""
    if kernels is not None and x.is_cuda:
        out = kernels[1](x.transpose(1, 2), weight, bias, activation=activation, cu_seqlens=_as_long(cu_seqlens))
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)
    width = weight.shape[-1]
    pieces = []
    for a, b in _sequences(cu_seqlens):
        y = F.conv1d(x[..., a:b].to(weight.dtype), weight.unsqueeze(1), bias, padding=width - 1,
                     groups=x.shape[1])[..., :b - a]
        pieces.append(y)
    out = torch.cat(pieces, dim=-1)
    if activation is not None:
        if activation not in ("silu", "swish"):   # the only activation these layers use (hidden_act)
            raise ValueError(f"packed conv1d: activation {activation!r} is not supported")
        out = F.silu(out)
    return out.to(x.dtype)


# Inside compiled decoder layers the two calls below run eagerly (torch.compiler.disable): Dynamo would otherwise
# trace into fla's autotuned kernels and host-side caches, or into the per-example loop, recompiling for every new
# example length (on a CPU, a tiny Qwen3.5's compiled packed step did not finish in 15 minutes). The projections,
# norms, MLP and full attention around them still compile.
def _packed_conv(original: Callable, kernels: tuple | None) -> Callable:
    @torch.compiler.disable
    def causal_conv1d_forward(conv1d, hidden_states, cache, layer_idx, activation=None, state_idx: int = 0,
                              cu_seq_lens_q=None, **kwargs):
        if cu_seq_lens_q is None or cache is not None:
            return original(conv1d, hidden_states, cache, layer_idx, activation=activation, state_idx=state_idx,
                            **kwargs)
        _one_row(hidden_states, "conv1d")
        return conv_by_sequence(hidden_states, conv1d.weight.squeeze(1), conv1d.bias, activation, cu_seq_lens_q,
                                kernels)

    causal_conv1d_forward.__wrapped__ = original
    return causal_conv1d_forward


def _packed_chunk_rule(original: Callable, kernels: tuple | None) -> Callable:
    @torch.compiler.disable
    def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size: int = 64, initial_state=None,
                               output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                               cu_seqlens=None, **kwargs):
        if cu_seqlens is None:
            return original(query, key, value, g=g, beta=beta, chunk_size=chunk_size, initial_state=initial_state,
                            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                            **kwargs)
        _one_row(query, "gated delta rule")
        if initial_state is not None or output_final_state:
            # A cache continuing packed rows: never made by training, and generation does not pack.
            raise RuntimeError("packed rows (cu_seq_lens) with a recurrent-state cache are not supported")
        if kernels is not None and query.is_cuda:
            out, _ = kernels[0](query, key, value, g=g, beta=beta, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                cu_seqlens=_as_long(cu_seqlens))
            return out, None
        pieces = [original(query[:, a:b], key[:, a:b], value[:, a:b], g=g[:, a:b], beta=beta[:, a:b],
                           chunk_size=chunk_size, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)[0]
                  for a, b in _sequences(cu_seqlens)]
        return torch.cat(pieces, dim=1), None

    chunk_gated_delta_rule.__wrapped__ = original
    return chunk_gated_delta_rule


def _one_row(t: torch.Tensor, what: str) -> None:
    if t.shape[0] != 1:
        raise RuntimeError(f"packed {what}: cu_seq_lens describe one row, got a batch of {t.shape[0]}")


def gated_deltanet_modules(model: torch.nn.Module) -> set[str]:
    """Names of the transformers modeling modules whose gated DeltaNet layers this model has."""
    return {type(m).__module__ for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")}


def keep_packed_sequences_apart(model: torch.nn.Module) -> list[str]:
    """Route the gated DeltaNet layers' conv and chunk rule of packed rows through this module (module docstring),
    once per modeling module; -> the modules changed now. Raises for a modeling module that lacks the two functions
    (a transformers whose layers are built differently): packing would leak state there, silently."""
    changed = []
    for name in sorted(gated_deltanet_modules(model)):
        module = sys.modules[name]
        if getattr(module, _INSTALLED, False):
            continue
        missing = [f for f in (CONV_FUNCTION, CHUNK_FUNCTION) if not callable(getattr(module, f, None))]
        if missing:
            raise RuntimeError(f"{name} has no {', '.join(missing)}: this transformers builds its gated DeltaNet "
                               "layers differently; packed rows could not restart their state")
        kernels = fla_kernels()
        setattr(module, CONV_FUNCTION, _packed_conv(getattr(module, CONV_FUNCTION), kernels))
        setattr(module, CHUNK_FUNCTION, _packed_chunk_rule(getattr(module, CHUNK_FUNCTION), kernels))
        setattr(module, _INSTALLED, True)
        changed.append(name)
    return changed


def deltanet_submodules(model: torch.nn.Module) -> set[int]:
    """ids of every module inside a gated DeltaNet layer (its projections, conv and norm)."""
    return {id(sub) for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet") for sub in m.modules()}


def graph_blockers(model: torch.nn.Module) -> dict[str, str]:
    """What rules CUDA graphs out for a model with gated DeltaNet layers (training/speed_plan.py collects these)."""
    if not gated_deltanet_modules(model):
        return {}
    return {"linear_attention": "gated DeltaNet layers: flash-linear-attention's varlen kernels work out their chunk "
                                "indices from cu_seq_lens on the host at every forward (the reference loops over the "
                                "examples)"}


def static_status(model: torch.nn.Module) -> tuple[bool, str] | None:
    """(False, why) for a model with gated DeltaNet layers: static shapes pad each packed row with empty sequences in
    cu_seq_lens, which flash-linear-attention's varlen kernels have not been checked with here
    (benchmarks/linear_attention_check.py checks it on a GPU); None for other models."""
    if not gated_deltanet_modules(model):
        return None
    return (False, "gated DeltaNet layers: flash-linear-attention's varlen kernels are not yet checked with the empty "
                   "sequences that pad a static row")
