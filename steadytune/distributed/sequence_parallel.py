"""Sequence parallelism (`cp_size`, LLaMA-Factory v1's key): each micro-batch's row split over the cp_size processes
of a group, so that a sequence too long for one GPU's memory trains on several.

Layout: processes [g * cp_size, (g + 1) * cp_size) form group g; the groups are data parallel (each its own
micro-batches), the processes of a group share theirs and each takes one contiguous slice of the row. Everything in
a decoder layer but attention is per token, so it runs on the slice as it is; attention is the one place the slices
meet, in one of two ways (`cp_mode`):

- ulysses (DeepSpeed-Ulysses, arXiv 2309.14509; LLaMA-Factory v1's default): an all-to-all turns [slice of tokens,
  all heads] into [all tokens, 1/cp_size of the heads] for q, k and v; each process attends its heads over the whole
  row (examples kept apart by the row's cu_seq_lens), and a second all-to-all turns the result back. Query heads
  must divide by cp_size; key/value heads fewer than cp_size are repeated (cp_size must then divide by them).
- allgather (the all-gather form of ring attention, as Llama 3's context parallelism does it): the keys and values
  of every slice are gathered on every process (small under grouped-query attention) and each process attends its
  own slice of queries to the keys before them; the backward sums the key/value gradients back to their slice.
  Any head count. Chosen where the heads do not divide.

What each process computes from its slice (shard_batch): position ids of the whole row sliced (RoPE as for the
whole row), the targets shifted over the whole row before slicing (the last token of a slice predicts the first of
the next), the loss summed over its own targets. The step's loss is the sum over all processes divided by every
target of the step (train.forward_backward counts each process's own), and the gradients are summed over all
processes as for data parallelism, so DDP, LoRA's flat all-reduce, ZeRO and FSDP2 compose as they are.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Callable

import torch

from steadytune.data.encode import IGNORE_INDEX
from steadytune.errors import UserError
from steadytune.model.attention import PackingPlan, unsplittable
from steadytune.model.tiling import examples_of, tile_kernel, tile_segments

CP_ATTENTION = "steadytune_cp"
CP_MODES = ("ulysses", "allgather")
CP_STAGES = ("sft", "pt")


@dataclass
class SequenceParallel:
    size: int            # processes a sequence is split over (cp_size)
    rank: int            # this process's place in its group
    group: Any           # the group's process group
    mode: str            # ulysses | allgather
    dp_size: int         # data-parallel groups
    dp_rank: int         # this process's group
    kernel: Callable | None = None   # the attention over [tokens, heads, dim] with cumulative lengths

    def describe(self) -> str:
        return (f"{self.size} processes a sequence ({self.mode}), {self.dp_size} data-parallel group"
                f"{'s' if self.dp_size > 1 else ''}")


@dataclass
class _Run:
    sp: SequenceParallel
    docs: list[tuple[int, int]]   # the whole row's examples
    length: int                   # the whole (padded) row's length


_ACTIVE: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("steadytune_cp", default=None)


def choose_mode(asked: str, user_set: bool, heads: int, kv_heads: int, size: int) -> tuple[str, str]:
    """-> (cp_mode, reason). Ulysses needs the query heads to divide by cp_size and the key/value heads to divide
    it or be divided by it; elsewhere allgather, which takes any head count (an error where ulysses was asked for)."""
    fits = heads % size == 0 and (kv_heads % size == 0 or size % kv_heads == 0)
    if asked == "ulysses" and not fits:
        why = (f"{heads} query heads and {kv_heads} key/value heads do not split over {size} processes (query heads "
               "must divide by cp_size, key/value heads divide it or be divided by it)")
        if user_set:
            raise UserError(f"cp_mode: ulysses, but {why}; set cp_mode: allgather (any head count)")
        return "allgather", f"allgather: {why}, which ulysses needs (LLaMA-Factory's cp_mode ulysses would refuse)"
    if asked == "ulysses":
        repeat = f"; key/value heads repeated x{size // kv_heads}" if kv_heads < size else ""
        return "ulysses", (f"ulysses: {heads // size} of {heads} query heads a process over the whole row, "
                           f"all-to-all before and after attention{repeat}")
    return "allgather", "allgather: every slice's keys and values gathered, each process attends its own queries"


def packing_for_sequence_parallel(cfg, packing: PackingPlan | None) -> PackingPlan | None:
    """The run's packing plan under cp_size (as chosen before the model loads, since it names the attention): with
    cp_size > 1 one row a micro-batch, attention across the processes (register_attention), the plan's by-token choice
    kept; `packing` as it is otherwise. Decisions recorded."""
    if cfg.train.cp_size <= 1:
        return packing
    plan = PackingPlan("varlen", register_attention(), by_tokens=packing.by_tokens if packing else False)
    cfg.decide("packing", True, f"cp_size: {cfg.train.cp_size}: each micro-batch's examples laid out as one row "
               "(positions and attention kept per example), which the processes of a group split")
    cfg.decide("attn_implementation", plan.attn_implementation,
               "sequence parallelism's attention (distributed/sequence_parallel.py)")
    return plan


def check_sequence_parallel(cfg, world: int, model_config=None) -> None:
    """cp_size against the model (its config; None: not known yet), the keys and the process count: the checks that
    need no process group, run before any weights load and again when the groups are made."""
    size = cfg.train.cp_size
    if size == 1:
        return
    why = unsplittable(model_config, cfg.data.cutoff_len) if model_config is not None else None
    if why:
        raise UserError(f"cp_size: {size} splits each row over processes, but {why}; set cp_size: 1")
    if world % size:
        raise UserError(f"cp_size: {size} does not divide the {world} processes (each sequence is split over "
                        f"cp_size of them); start a multiple of {size} (--nproc)")
    if cfg.method.stage not in CP_STAGES:
        raise UserError(f"cp_size: {size} with stage {cfg.method.stage}: sequence parallelism splits the sft and pt "
                        "losses (one sequence a row); set cp_size: 1")
    if cfg.data.class_balance in ("loss", "both"):
        raise UserError("cp_size > 1 with class_balance loss weights: the weights need padded rows, sequence "
                        "parallelism one row a micro-batch; use class_balance: sampler")


def plan_sequence_parallel(cfg, world: int, rank: int, model_config) -> SequenceParallel | None:
    """cp_size for this run: checked, its groups made (every process makes every group, in the same order), its mode
    chosen; decisions recorded. None for cp_size 1."""
    t = cfg.train
    size = t.cp_size
    if size == 1:
        return None
    check_sequence_parallel(cfg, world, model_config)
    import torch.distributed as dist   # lazy: only runs that split sequences make groups

    heads = model_config.num_attention_heads
    kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
    mode, why = choose_mode(t.cp_mode, "cp_mode" in cfg.user_keys, heads, kv_heads, size)
    group = None
    for g in range(world // size):
        made = dist.new_group(list(range(g * size, (g + 1) * size)))
        if g == rank // size:
            group = made
    sp = SequenceParallel(size, rank % size, group, mode, world // size, rank // size)
    cfg.decide("cp_size", size, f"each sequence split over {size} processes; {sp.describe()}")
    cfg.decide("cp_mode", mode, why)
    return sp


def register_attention() -> str:
    """Make CP_ATTENTION a transformers attention implementation (and its mask); -> its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CP_ATTENTION, cp_attention_forward)
    AttentionMaskInterface.register(CP_ATTENTION, _cp_mask)
    return CP_ATTENTION


def _cp_mask(*args, attention_mask=None, **kwargs):
    """No mask for a split row (the attention keeps examples apart by the row's examples); SDPA's mask otherwise
    (evaluation and generation: whole padded rows on every process)."""
    if _ACTIVE.get() is not None:
        return None
    from transformers.masking_utils import sdpa_mask
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def cp_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: query/key/value [1, heads, slice, dim] of this process's slice -> output
    [1, slice, heads, dim]. Outside a split micro-batch: plain SDPA."""
    run = _ACTIVE.get()
    if run is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    if query.shape[0] != 1:
        raise RuntimeError(f"sequence parallelism expects one row a micro-batch, got {query.shape[0]}")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))   # [slice, heads, dim]
    if q.dtype not in (torch.float16, torch.bfloat16) and torch.is_autocast_enabled(q.device.type):
        low = torch.get_autocast_dtype(q.device.type)   # the flash kernels take bf16/fp16, as autocast gives SDPA
        q, k, v = q.to(low), k.to(low), v.to(low)
    attend = _ulysses if run.sp.mode == "ulysses" else _allgather
    return attend(q, k, v, run, scale)[None], None


def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol   # lazy: torch.distributed's autograd collectives

    return funcol.all_to_all_single_autograd(x.contiguous(), None, None, group)


def _ulysses(q, k, v, run: _Run, scale: float) -> torch.Tensor:
    sp, size = run.sp, run.sp.size
    if k.shape[1] < size:   # fewer key/value heads than processes: each process gets a copy of its group's
        k, v = (t.repeat_interleave(size // t.shape[1], dim=1) for t in (k, v))

    def scatter_heads(t):   # [slice, heads, dim] -> [row, heads / size, dim]
        n, h, d = t.shape
        out = _all_to_all(t.reshape(n, size, h // size, d).transpose(0, 1), sp.group)   # chunk j -> process j
        return out.reshape(size * n, h // size, d)

    qa, ka, va = scatter_heads(q), scatter_heads(k), scatter_heads(v)
    _, cu_q, cu_k = tile_segments(run.docs, 0, run.length)
    out = sp.kernel(qa, ka, va, cu_q, cu_k, scale)                       # [row, heads / size, dim]
    n = q.shape[0]
    back = _all_to_all(out.reshape(size, n, *out.shape[1:]), sp.group)   # chunk i: slice of process i's heads
    return back.transpose(0, 1).reshape(n, -1, out.shape[-1])


def _allgather(q, k, v, run: _Run, scale: float) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol   # lazy: torch.distributed's autograd collectives

    sp, n = run.sp, q.shape[0]
    keys = funcol.all_gather_tensor_autograd(k.contiguous(), 0, sp.group)
    values = funcol.all_gather_tensor_autograd(v.contiguous(), 0, sp.group)
    lo, hi = sp.rank * n, (sp.rank + 1) * n
    key_lo, cu_q, cu_k = tile_segments(run.docs, lo, hi)
    return sp.kernel(q, keys[key_lo:hi], values[key_lo:hi], cu_q, cu_k, scale)


def shard_batch(batch: dict, sp: SequenceParallel, pad_token_id: int = 0) -> tuple[dict, list[tuple[int, int]], int]:
    """This process's slice of a one-row micro-batch (on the CPU, before it moves to the device) -> (the slice's
    batch, the whole row's examples, the padded row's length). The row is padded to a multiple of cp_size (padding
    is an example of its own, with no targets); targets are shifted over the whole row, then sliced."""
    ids = batch["input_ids"]
    if ids.shape[0] != 1:
        raise UserError(f"cp_size: {sp.size} splits one row a micro-batch, got {ids.shape[0]} rows (sequence "
                        "parallelism lays each micro-batch out packed, as one row)")
    length = ids.shape[1]
    padded = -(-length // sp.size) * sp.size
    docs = examples_of(batch)[0]
    if padded > length:
        docs.append((length, padded))
    targets = torch.full((padded,), IGNORE_INDEX, dtype=torch.long)
    if "target_index" in batch:
        n = int(batch["n_targets"])
        targets[batch["target_index"][:n]] = batch["target_ids"][:n]
    else:
        labels = batch["labels"][0]
        targets[:length - 1] = labels[1:]
    positions = batch.get("position_ids")
    positions = positions[0] if positions is not None else torch.arange(length)
    full_ids = torch.full((padded,), pad_token_id, dtype=ids.dtype)
    full_ids[:length] = ids[0]
    full_positions = torch.cat([positions, torch.arange(padded - length, dtype=positions.dtype)])
    slice_len = padded // sp.size
    lo, hi = sp.rank * slice_len, (sp.rank + 1) * slice_len
    local = targets[lo:hi]
    index = (local != IGNORE_INDEX).nonzero().flatten()
    out = {"input_ids": full_ids[lo:hi][None], "position_ids": full_positions[lo:hi][None],
           "target_index": index, "target_ids": local[index], "n_targets": int(index.numel())}
    return out, docs, padded


@contextlib.contextmanager
def split_row(sp: SequenceParallel, docs: list[tuple[int, int]], length: int):
    """The attention of a split micro-batch's forward and backward (and any recompute inside the backward) runs
    inside this block."""
    token = _ACTIVE.set(_Run(sp, docs, length))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def attach_kernel(sp: SequenceParallel, device: torch.device, decide) -> None:
    """The attention kernel for the split rows on `device` (model/tiling.tile_kernel: a checked flash varlen kernel
    on a GPU, the reference elsewhere), recorded."""
    sp.kernel, why = tile_kernel(device)
    decide("cp_attention_kernel", why.split(" ")[0], why)
