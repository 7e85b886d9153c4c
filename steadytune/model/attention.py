"""The attention implementation a model is loaded with when a run packs: "steadytune_varlen" (a varlen kernel
registered with transformers), SDPA with a block-diagonal mask, or flex attention; and whether a run packs.

Packing itself (grouping, collators, static shapes) is data/packing.py; which kernels run here is
hardware/attention_kernels.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from steadytune.errors import UserError
from steadytune.hardware.attention_kernels import packed_inputs, segment_sdpa_kernel, varlen_kernels
from steadytune.hardware.policy import AttentionUnavailable, choose_packing_attention
from steadytune.model.linear_attention import linear_attention_in_folder
from steadytune.model.vision import is_vision_folder

VARLEN_IMPLEMENTATION = "steadytune_varlen"


def packed_mask_placeholder(input_ids: torch.Tensor) -> torch.Tensor:
    """What a varlen-packed batch passes as attention_mask: an empty 4-D tensor. transformers returns a 4-D mask
    as it is instead of building one, and building one would read the GPU (its packed-sequence check ends in a
    Python bool): a host sync in every forward, which also makes the forward impossible to record in a CUDA graph.
    The varlen attention keeps examples apart by cu_seq_lens and never reads it."""
    return input_ids.new_empty((1, 1, 0, 0), dtype=torch.bool)


def make_varlen_attention(kernel: Callable) -> Callable:
    """A transformers attention function over a [1, T] row, driven by the cu_seq_lens the collator made.

    A batch without cu_seq_lens (evaluation, scoring or generation with the model being trained) is not packed:
    it goes through plain SDPA with the mask transformers built for it (see `_varlen_mask`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def varlen_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                                 sliding_window=None, cu_seq_lens_q=None, max_length_q=None, **kwargs):
        if cu_seq_lens_q is None:
            if attention_mask is not None and attention_mask.numel() == 0:
                raise RuntimeError("steadytune_varlen attention: the packed-mask placeholder came without cu_seq_lens")
            if attention_mask is None and sliding_window and query.shape[2] > sliding_window:
                # No mask means plain causal attention, which would ignore the sliding window here.
                raise RuntimeError("steadytune_varlen attention: pass an attention_mask for unpacked sequences "
                                   "longer than the sliding window")
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, **kwargs)
        if query.shape[0] != 1:
            raise RuntimeError(f"steadytune_varlen attention expects one packed row, got batch {query.shape[0]}")
        q, k, v, run = packed_inputs(query, key, value, kernel)
        cu = cu_seq_lens_q.to(device=q.device, dtype=torch.int32)
        max_len = int(max_length_q)
        # A window no example is longer than changes nothing (Gemma 3's 512 under a cutoff_len of 256): drop it,
        # so kernels without sliding-window support still run.
        window = sliding_window if sliding_window and sliding_window < max_len else None
        out = run(q, k, v, cu, max_len, scaling, window)
        return out[None], None  # [1, T, heads, dim], as the other implementations return

    return varlen_attention_forward


def _varlen_mask(*args, attention_mask=None, **kwargs):
    """Mask for the "steadytune_varlen" implementation: none for packed rows (they come without an
    attention_mask; the kernel keeps examples apart by cu_seq_lens, and a [T, T] mask would cost memory for
    nothing), SDPA's mask for padded batches so their fallback is exact (padding, sliding windows)."""
    if attention_mask is None:
        return None
    from transformers.masking_utils import sdpa_mask
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register_varlen_attention(kernel: Callable) -> str:
    """Make "steadytune_varlen" a transformers attention implementation backed by `kernel`; -> its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(VARLEN_IMPLEMENTATION, make_varlen_attention(kernel))
    AttentionMaskInterface.register(VARLEN_IMPLEMENTATION, _varlen_mask)
    return VARLEN_IMPLEMENTATION


def attn_implementation_for(packing_attention: str, kernel: Callable | None = None) -> str:
    """The transformers attn_implementation a model needs for this packing attention."""
    if packing_attention == "varlen":
        if kernel is None:
            raise ValueError("varlen packing needs a kernel (see varlen_kernel_status)")
        return register_varlen_attention(kernel)
    if packing_attention == "flex":
        return "flex_attention"
    return "sdpa"


@dataclass
class PackingPlan:
    """How `train` packs: the attention over packed rows and the attn_implementation the model is loaded with."""

    attention: str            # varlen | sdpa | flex
    attn_implementation: str  # transformers' name: steadytune_varlen | sdpa | flex_attention
    # Micro-batches cut by a token budget rather than by per_device_train_batch_size examples: when packing is asked
    # for, and by default on a CUDA GPU, where compiled layers and CUDA graphs need every micro-batch to fit one
    # static shape (a fixed number of examples varies too much in tokens: training/batches.token_budget says why).
    by_tokens: bool = False


def choose_packing_for(info, asked: str, recurrent: str | None,
                       kernel_status: Callable | None = None) -> tuple[str, str | None, Callable | None, str]:
    """-> (packing attention, the varlen kernel's name and the kernel to register, or None, why) for a model;
    `recurrent`: why it has
    linear-attention layers (linear_attention_reason), which need the one-row varlen layout. `kernel_status`: as for
    choose_packing_attention (doctor --from passes the saved machine's). Raises AttentionUnavailable for an attention
    that cannot run here or cannot keep such a model's examples apart."""
    if recurrent and asked in ("sdpa", "flex"):
        raise AttentionUnavailable(f"{asked}, but {recurrent}; set packing_attention: auto (or varlen)")
    attention, kernel, why = choose_packing_attention(info, "auto" if recurrent else asked, kernel_status)
    varlen_kernel = varlen_kernels().get(kernel) if kernel else None
    if recurrent and attention != "varlen":
        # The full-attention layers then take the exact reference kernel (SDPA per example, a loop): slower than a
        # flash kernel, but a block-diagonal mask would leave the linear-attention layers leaking across examples.
        attention, kernel, varlen_kernel = "varlen", "segment_sdpa", segment_sdpa_kernel
        why = f"{recurrent}; no varlen flash kernel here ({why}), so full attention runs SDPA per example"
    return attention, kernel, varlen_kernel, why


def plan_packing(cfg, info, class_weighted_loss: bool, eager_only: str | None = None) -> PackingPlan | None:
    """None when `train` does not pack; else the attention chosen for this hardware (hardware/policy.py, the
    one `doctor` reports). Both choices are recorded with cfg.decide. `eager_only`: why the model runs only eager
    attention (eager_only_reason): its packed rows are kept apart by transformers' block-diagonal mask."""
    if not decide_packing(cfg, class_weighted_loss, info):
        return None
    asked = cfg.data.packing_attention
    if eager_only:
        if asked in ("varlen", "flex"):
            raise UserError(f"packing_attention: {asked}, but {eager_only}; set packing_attention: auto")
        cfg.decide("packing_attention", "sdpa", f"{eager_only}: rows kept apart by a block-diagonal mask")
        cfg.decide("attn_implementation", "eager", eager_only)
        return PackingPlan("sdpa", "eager", by_tokens=packs_by_tokens(cfg, info))
    recurrent = linear_attention_reason(cfg.model.model_name_or_path)
    try:
        attention, _, varlen_kernel, why = choose_packing_for(info, asked, recurrent)
    except AttentionUnavailable as e:
        raise UserError(f"packing_attention: {e}") from None
    implementation = attn_implementation_for(attention, varlen_kernel)
    cfg.decide("packing_attention", attention, why)
    cfg.decide("attn_implementation", implementation, f"set by packing_attention {attention}")
    return PackingPlan(attention, implementation, by_tokens=packs_by_tokens(cfg, info))


def packs_by_tokens(cfg, info) -> bool:
    """Whether packed micro-batches are cut by a token budget (asked for, or on CUDA) rather than by row count."""
    d = cfg.data
    # grpo's micro-batches are prompts whose completions do not exist yet: always per_device_train_batch_size of them.
    return (bool(d.packing or d.neat_packing) or info.backend == "cuda") and cfg.method.stage != "grpo"


def decide_packing(cfg, class_weighted_loss: bool, info=None) -> bool:
    """Whether `train` packs its micro-batches; records the choice and why with cfg.decide."""
    d = cfg.data
    if cfg.method.stage == "pt":
        how = ("stage pt: packing concatenates the texts into cutoff_len blocks (LLaMA-Factory's pt packing, on by "
               "default)" if d.packing is not False else "stage pt, packing: false: each text is one example, "
               "truncated to cutoff_len")
        if getattr(info, "backend", "cpu") == "cuda" and not class_weighted_loss and d.packing is not False:
            # The blocks of a micro-batch laid out as one varlen row (attention and positions kept per block): the
            # same numbers as separate rows, and one static shape, so compiled layers, CUDA graphs and the fp8 base
            # apply (a QLoRA pt run stayed eager without it: docs/speed.md)
            cfg.decide("packing", d.packing is not False, how + "; on GPU each micro-batch's examples are laid out "
                       "as one packed row (the same examples and numbers, one static shape for compile and graphs)")
            return True
        cfg.decide("packing", d.packing is not False, how + "; the examples are batched as they are")
        return False
    asked = bool(d.packing or d.neat_packing)
    if asked and class_weighted_loss:
        cfg.decide("packing", False, "packing asked for, but class_balance loss weights need padded rows; unpacked")
        return False
    if asked:
        cfg.decide("packing", True, "packing: true -> token-budget micro-batches packed into rows, position ids "
                                    "restart per example, attention kept inside each example (LLaMA-Factory packs "
                                    "knapsack rows of cutoff_len instead: its steps differ too)")
        return True
    if d.packing is False:
        cfg.decide("packing", False, "packing: false")
        return False
    # Unset: on where it was measured faster (same loss either way: tests/test_train_packing.py).
    if cfg.method.stage in ("dpo", "grpo") and is_vision_folder(cfg.model.model_name_or_path):
        what = "preference pairs" if cfg.method.stage == "dpo" else "prompt + completion sequences"
        cfg.decide("packing", False, f"off by default: a vision-language model's {what} are padded (each "
                                     f"sequence with its prompt's images; packed {cfg.method.stage} rows with images "
                                     "are not built)")
        return False
    if class_weighted_loss:
        cfg.decide("packing", False, "off by default: class_balance loss weights need padded rows")
        return False
    backend = getattr(info, "backend", "cpu")
    if backend == "cpu":
        cfg.decide("packing", True, "on by default on CPU: the demo's step is ~1.16x faster packed "
                                    "(benchmarks/cpu_demo_speed.py); each micro-batch keeps its "
                                    f"{cfg.train.per_device_train_batch_size} examples, laid out as one packed row "
                                    "instead of padded rows, so the steps are LLaMA-Factory's; packing: false pads")
        return True
    if backend == "cuda":
        cfg.decide("packing", True, "on by default on GPU: the GPU-sized demo trains 1.5x more examples/s packed "
                                    "(H200: 336 vs 219 reviews/s); micro-batches are cut by a token budget of about "
                                    f"{cfg.train.per_device_train_batch_size} examples so that one static shape fits "
                                    "them all (total_steps says how the steps differ from LLaMA-Factory's); "
                                    "packing: false pads")
        return True
    # ROCm: the same code runs (SDPA block mask where no varlen kernel works) but has not been timed there.
    cfg.decide("packing", False, f"off by default on {backend}: not measured there; set packing: true to pack")
    return False


# Model types whose attention transformers runs only eagerly (or through a kernels-hub FlashAttention-3 build): gpt-oss
# adds a learned "sink" to each head's softmax, which neither SDPA nor the varlen kernels take.
EAGER_ONLY_MODEL_TYPES = {"gpt_oss": "gpt-oss's attention sinks run only in eager attention in transformers"}


def _folder_config(model_name_or_path: str) -> dict:
    try:
        config = json.loads((Path(str(model_name_or_path)) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def linear_attention_reason(model_name_or_path: str, config: dict | None = None) -> str | None:
    """Why a local model folder (or a `config` dict) packs only as one varlen row (it has gated DeltaNet layers), or
    None: those layers learn where each example starts only from cu_seq_lens (model/linear_attention.py)."""
    n = linear_attention_in_folder(config if config is not None else _folder_config(model_name_or_path))
    if not n:
        return None
    return (f"its {n} gated DeltaNet (linear-attention) layers restart their state and conv window at each "
            "example only in one varlen row (cu_seq_lens)")


def eager_only_reason(model_name_or_path: str) -> str | None:
    """Why a local model folder must load with eager attention (its config.json's model_type), or None."""
    try:
        config = json.loads((Path(str(model_name_or_path)) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type is None and isinstance(config, dict):
        model_type = (config.get("text_config") or {}).get("model_type")
    return EAGER_ONLY_MODEL_TYPES.get(model_type)


def unsplittable(model_config, cutoff_len: int) -> str | None:
    """Why this model's layers cannot run on a slice of the row under sequence parallelism (cp_size), or None. Only
    attention meets across the slices (distributed/sequence_parallel.cp_attention_forward); it takes queries, keys and
    values and nothing else, so a layer that carries a state along the row, attends through a window, or adds its own
    terms to the scores would be computed wrongly, and silently:
    - gated DeltaNet (linear-attention) layers: each process's slice would start from an empty recurrent state and
      conv window, and examples inside a slice would run into each other (no cu_seq_lens reach them);
    - sliding-window (or chunked) layers where an example can be longer than the window: the split rows' attention
      attends the whole example;
    - attention sinks (gpt-oss, eager attention only) and score soft-capping (Gemma 2): terms it does not add."""
    types = list(getattr(model_config, "layer_types", None) or [])
    linear = sum(1 for kind in types if kind == "linear_attention")
    if linear:
        return (f"its {linear} gated DeltaNet (linear-attention) layers carry a recurrent state along the row, which "
                "a slice would start empty (sequence parallelism exchanges only attention between the processes)")
    eager = EAGER_ONLY_MODEL_TYPES.get(getattr(model_config, "model_type", None))
    if eager:
        return f"{eager}, which the split rows' attention does not compute"
    if getattr(model_config, "attn_logit_softcapping", None):
        return "its attention soft-caps the scores (attn_logit_softcapping), which the split rows' attention does not"
    windowed = sorted({kind for kind in types if kind not in ("full_attention", "linear_attention")})
    sliding = getattr(model_config, "sliding_window", None)
    if not types and isinstance(sliding, int):   # Mistral, Mixtral: no layer_types, every layer slides
        windowed = ["sliding-window"]
    window = getattr(model_config, "attention_chunk_size", None) if "chunked_attention" in windowed else sliding
    if windowed and (not isinstance(window, int) or window < cutoff_len):
        return (f"its {', '.join(windowed)} layers attend within a window of {window} tokens, shorter than cutoff_len "
                f"{cutoff_len}, and the split rows' attention attends the whole example")
    return None
