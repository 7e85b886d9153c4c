"""The few collectives the training loop runs itself, each a no-op with one process: the main process's value on every
rank, a sum over ranks, gradients synchronised once per accumulation window, the gradient norm every rank agrees on."""

from __future__ import annotations

import contextlib

import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list

from steadytune.distributed.sharding import accumulate_without_sync


def says_for_all_ranks() -> bool:
    """Whether this process says things once for all ranks (the main process; also when there is only one)."""
    return PartialState().is_main_process


def share_from_main(obj):
    """The main process's value on every rank (only the main process reads and changes output_dir)."""
    if PartialState().num_processes == 1:
        return obj
    return broadcast_object_list([obj], from_process=0)[0]


def reduce_sum(accelerator, value: float | int, device) -> float | int:
    """`value` summed over the ranks (an int stays an int)."""
    if accelerator.num_processes == 1:
        return value
    tensor = torch.tensor(float(value), device=device)
    total = accelerator.reduce(tensor, reduction="sum").item()
    return int(total) if isinstance(value, int) else total


def sync_gradients_on_last(accelerator, objective, is_last: bool, plan=None):
    """Gradients are all-reduced once per window, on its last micro-batch (no_sync on the others; DeepSpeed steps its
    engine there)."""
    if is_last:
        return contextlib.nullcontext()
    return accumulate_without_sync(accelerator, objective, plan) if plan is not None else \
        accelerator.no_sync(objective)


def clip_gradients(accelerator, params, max_norm: float, plan=None) -> torch.Tensor | None:
    """Clip to `max_norm` (0: do not clip) and return the gradient norm before clipping; the guard and the log read
    it either way."""
    if plan is not None and plan.kind == "deepspeed":
        # The engine clipped (gradient_clipping) and stepped inside backward; this is the norm it measured (None
        # where it measures none: ZeRO-0 in fp32).
        norm = accelerator.clip_grad_norm_(params, max_norm or 1.0)
        return None if norm is None else torch.tensor(float(norm))
    if max_norm and max_norm > 0:
        return accelerator.clip_grad_norm_(params, max_norm)
    grads = [p.grad.detach().float().norm() for p in params if p.grad is not None]
    return torch.stack(grads).norm() if grads else torch.zeros(())
