"""Resuming a checkpoint on another number of processes (2 GPUs -> 1, 1 -> 2).

The data a step sees is a pure function of (seed, epoch) and the step batch: epoch e's order is a permutation seeded
by (seed, e), cut into per-device micro-batches (fixed size, or a token budget of consecutive examples), and an
optimizer step takes world_size x gradient_accumulation_steps consecutive micro-batches, ranks taking theirs in turn
(training/batches.py). So a step is the same slice of the order on any number of processes as long as the step holds the same
micro-batches. On resume with another world size, steadytune keeps that step batch:

1. gradient_accumulation_steps is scaled by old_world / new_world when that is a whole number (2 GPUs x 4
   accumulation -> 1 GPU x 8: the same examples per step, summed in another order);
2. else, with fixed-size batches, per_device_train_batch_size is scaled instead (1 GPU x 8 -> 2 GPUs x 4);
3. else (a token budget whose step holds fewer micro-batches than the new world has ranks) it stops and says which
   process counts can continue.

The position then maps exactly: the checkpoint records the micro-batch index b of its layout; the examples (or budget
groups) consumed in the epoch are b x per-device unit x old world, which on the new layout is micro-batch
b x old_world x old_unit / (new_world x new_unit): a whole number, because checkpoints fall on step boundaries and
every step holds whole steps' worth of micro-batches (training/batches.py drops an epoch's tail by whole steps).
"""

from __future__ import annotations

from steadytune.errors import UserError

LAYOUT_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps")


def layout_of(cfg, world_size: int, max_tokens: int | None) -> dict:
    """What a checkpoint records about how its steps were cut."""
    t = cfg.train
    return {"world_size": world_size, "per_device_train_batch_size": t.per_device_train_batch_size,
            "gradient_accumulation_steps": t.gradient_accumulation_steps, "max_tokens_per_batch": max_tokens}


def adapt_to_checkpoint(cfg, saved: dict | None, world_size: int, token_budget: bool) -> dict:
    """Change per_device_train_batch_size / gradient_accumulation_steps so that a step on `world_size` processes holds
    what a step of the checkpoint's layout held. Returns the keys changed ({} when nothing had to change); records
    the change as a decision. UserError when no whole-number layout exists."""
    if not saved or saved.get("world_size", world_size) == world_size:
        return {}
    t = cfg.train
    old_world, old_pd, old_gas = saved["world_size"], saved["per_device_train_batch_size"], \
        saved["gradient_accumulation_steps"]
    if (t.per_device_train_batch_size, t.gradient_accumulation_steps) != (old_pd, old_gas):
        # The user set the keys for the new world themselves: fine if the step batch is the same.
        if t.per_device_train_batch_size * t.gradient_accumulation_steps * world_size == old_pd * old_gas * old_world \
                and (not token_budget or t.per_device_train_batch_size == old_pd):
            return {k: getattr(t, k) for k in LAYOUT_KEYS}
        return {}   # compare_for_resume names the keys that differ
    slots = old_world * old_gas            # per-device micro-batches in one step
    change: dict = {}
    if slots % world_size == 0:
        change["gradient_accumulation_steps"] = slots // world_size
    elif not token_budget and (old_pd * slots) % world_size == 0:
        change.update(per_device_train_batch_size=old_pd * slots // world_size, gradient_accumulation_steps=1)
    else:
        fits = sorted({w for w in range(1, slots + 1) if slots % w == 0})
        raise UserError(f"resume on {world_size} processes: a step of this checkpoint holds {slots} micro-batches "
                        f"({old_world} processes x {old_gas} accumulation"
                        + (", token-budget batches" if token_budget else "") + f"), which {world_size} processes "
                        f"cannot share evenly; continue on {', '.join(map(str, fits))} processes, or start a new run")
    for key, value in change.items():
        setattr(t, key, value)
    old = f"{old_world} x {old_pd} x {old_gas}"
    new = f"{world_size} x {t.per_device_train_batch_size} x {t.gradient_accumulation_steps}"
    cfg.decide("resume_layout", change, f"the checkpoint was trained on {old_world} processes; processes x "
               f"per-device batch x accumulation {old} -> {new} keeps every step's examples")
    return change


def remap_position(state, saved: dict | None, current: dict) -> None:
    """Micro-batch index of the checkpoint's layout -> the same point of the epoch in this run's layout."""
    if not saved or saved.get("world_size") == current["world_size"] and \
            saved.get("per_device_train_batch_size") == current["per_device_train_batch_size"]:
        return
    token_budget = current.get("max_tokens_per_batch") is not None
    old_unit = 1 if token_budget else saved["per_device_train_batch_size"]
    new_unit = 1 if token_budget else current["per_device_train_batch_size"]
    consumed = state.batch_in_epoch * saved["world_size"] * old_unit
    per_micro = current["world_size"] * new_unit
    if consumed % per_micro:
        raise UserError(f"resume: the checkpoint stopped {consumed} {'groups' if token_budget else 'examples'} into "
                        f"epoch {state.epoch}, which is not a micro-batch boundary of this layout")
    state.batch_in_epoch = consumed // per_micro
