"""Resuming a run's checkpoint: which checkpoints a resume may use, and the newest that loads put back into the run.

A resume must continue the same run: `vet_resume` skips a damaged checkpoint with a message (one named explicitly is
an error), refuses one written with other keys (training/resume.py names each key, old -> new), and on another number
of processes keeps the step batch (world_resume.py). `restore_checkpoint` loads the newest that loads into the model,
optimizer, schedule and loss scale, through the shards where the run is sharded (sharding.py), falling back to the
previous one when a checkpoint turns out damaged; `restore_run` is the recipe's phase: that, or a fresh state.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from steadytune.config import RunConfig
from steadytune.distributed import sharding
from steadytune.distributed.world_resume import adapt_to_checkpoint, layout_of, remap_position
from steadytune.errors import CheckpointError, UserError
from steadytune.training.checkpoint import CheckpointLinkError, TrainerState, load_checkpoint, read_state
from steadytune.training.resume import compare_for_resume, resume_fingerprint


def vet_resume(cfg: RunConfig, candidates: list[Path], world: int = 1, token_budget: bool = False) -> list[Path]:
    """The checkpoints a resume may use, newest first: damaged ones are skipped with a message (an explicitly named
    one is an error); a checkpoint whose run had other keys is refused, naming each key with old -> new. On another
    number of processes the step batch is kept (distributed/world_resume.py)."""
    usable = []
    for path in candidates:
        try:
            state = read_state(path)
        except CheckpointLinkError as e:
            if not usable:  # the checkpoint this resume would use: refused, not passed over
                raise
            print(f"warning: {e}; not a fallback for this resume", file=sys.stderr, flush=True)
            continue
        except CheckpointError as e:
            if len(candidates) == 1:
                raise
            print(f"warning: {e}; trying the previous checkpoint", file=sys.stderr, flush=True)
            continue
        if not usable:
            changed = adapt_to_checkpoint(cfg, state.extra.get("layout"), world, token_budget)
            saved = state.extra.get("config")
            if saved and changed:
                saved = {**saved, **changed}   # the same step batch on this world size: not a change of the run
            refused, applied = compare_for_resume(saved, resume_fingerprint(cfg))
            if refused:
                raise CheckpointError(f"resume from {path}: these keys differ from the run that wrote it, which would "
                                f"splice another run onto its curve: {'; '.join(refused)}. Put them back, or start a "
                                "new run (another output_dir, or overwrite_output_dir=true)")
            if applied:
                cfg.decide("resume_changes", applied, "keys that may change on resume, applied from here on")
        usable.append(path)
    if candidates and not usable:
        raise UserError(f"no usable checkpoint in {candidates[0].parent}: every one is damaged (see above); "
                        "start over with overwrite_output_dir=true")
    return usable


def restore_checkpoint(cfg: RunConfig, candidates: list[Path], model, optimizer, scheduler, scaler,
                       shard_plan=None, objective=None):
    """Load the newest checkpoint that loads; a damaged one falls back to the previous, with a message."""
    for k, path in enumerate(candidates):
        try:
            restore = None
            if shard_plan is not None and shard_plan.sharded:   # weights and optimizer state go to the shards
                restore = functools.partial(sharding.restore_sharded, shard_plan, objective, optimizer)
            state = load_checkpoint(path, model, optimizer, scheduler, cfg.model.model_name_or_path, scaler=scaler,
                                    restore_sharded=restore,
                                    check_shapes=shard_plan is None or sharding.shapes_checkable(shard_plan, cfg))
        except CheckpointError as e:
            if k + 1 == len(candidates):
                raise
            print(f"warning: {e}; falling back to {candidates[k + 1].name}", file=sys.stderr, flush=True)
            continue
        if k:
            cfg.decide("resume_from_checkpoint", str(path), f"the newer checkpoint(s) were damaged: resumed from "
                       f"{path.name}")
        return state, path
    raise AssertionError("no candidates")  # vet_resume never returns an empty list here


def restore_run(cfg: RunConfig, candidates: list[Path], objective, model, optimizer, scheduler, scaler, shard_plan,
                world: int, max_tokens: int | None) -> tuple[TrainerState, Path | None]:
    """Resume: weights, optimizer, schedule, loss scale, RNG and data position, exactly (the data position moved to
    the same point of the epoch when the steps are now cut over another number of processes); or a fresh state."""
    state = TrainerState(model_name_or_path=cfg.model.model_name_or_path, finetuning_type=cfg.method.finetuning_type)
    if not candidates:
        return state, None
    state, resume_from = restore_checkpoint(cfg, candidates, model, optimizer, scheduler, scaler, shard_plan,
                                            objective)
    remap_position(state, state.extra.get("layout"), layout_of(cfg, world, max_tokens))
    return state, resume_from
