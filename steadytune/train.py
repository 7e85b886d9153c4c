"""`steadytune train`: the fine-tuning recipe, readable top to bottom.

    config -> output folder -> hardware policy -> model + LoRA -> data -> optimizer + schedule -> resume
           -> loop (forward on labelled positions, token-normalised accumulation, clip, step, log, eval, save)
           -> adapter + tokenizer + plot

The loop is ours, on Accelerate (no transformers.Trainer subclass): Accelerate brings DDP / FSDP / DeepSpeed
and autocast; everything that decides the numbers is visible here.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
from tqdm.auto import tqdm

from steadytune import hardware
from steadytune.checkpoint import (TrainerState, latest_checkpoint, list_checkpoints, load_checkpoint,
                                   read_state, save_checkpoint)
from steadytune.config import RunConfig, describe_keys, load_config, save_resolved_config
from steadytune.errors import UserError
from steadytune.faults import FaultInjector
from steadytune.guard import (ABORT, FP16_OVERFLOW, ROLLBACK, NumericalGuard, TrainState,
                              apply_hardware_profile, fallback_precision)
from steadytune.loss import causal_lm_loss_sum, count_target_tokens
from steadytune.monitor import MetricsLog, Throughput, memory_stats, plot_loss

# Files a run writes into output_dir; anything else there is the user's and is never touched.
RUN_FILES = ("run_config.yaml", "metrics.jsonl", "environment.json", "train_results.json", "training_loss.png",
             "adapter_model.safetensors", "adapter_config.json")


@dataclass
class TrainResult:
    output_dir: Path
    global_step: int
    final_loss: float | None
    train_seconds: float
    tokens_per_s: float
    losses: list[float] = field(default_factory=list)
    exit_code: int = 0


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="run config (YAML, LLaMA-Factory keys)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override config keys, e.g. learning_rate=5e-5 max_samples=2000 guard.window=20")
    parser.add_argument("--force", action="store_true",
                        help="train even when the start-up hardware checks report errors")
    parser.add_argument("--list-keys", action="store_true", help="print every config key with its default and help")


def run(args) -> int:
    if args.list_keys:
        print(describe_keys())
        return 0
    if args.config is None:
        raise UserError("steadytune train needs a config file: steadytune train my_run.yaml [key=value ...] "
                        "(see `steadytune train --list-keys`, or `steadytune demo` for the embedded default)")
    cfg = load_config(args.config, args.overrides)
    result = run_training(cfg, force=args.force)
    if result.exit_code == 0 and (cfg.train.do_eval or cfg.train.do_predict):
        # LLaMA-Factory's do_eval / do_predict: evaluate the adapter just trained, as `steadytune eval` would
        # (classification: label scoring; SFT with predict_with_generate: generated_predictions.jsonl + BLEU/ROUGE).
        from steadytune.evaluate import run_evaluation
        run_evaluation(cfg, batch_size=cfg.train.per_device_eval_batch_size)
    return result.exit_code


# ---------------------------------------------------------------------------------------------------------
# The recipe
# ---------------------------------------------------------------------------------------------------------

def run_training(cfg: RunConfig, force: bool = False, progress: bool = True) -> TrainResult:
    t, d = cfg.train, cfg.data

    # --- where results go: never over a user's files, unless asked or resuming --------------------------
    output_dir = Path(t.output_dir)
    resume_from = resolve_resume(cfg, output_dir)
    check_output_dir(cfg, output_dir, resuming=resume_from is not None)
    output_dir.mkdir(parents=True, exist_ok=True)

    # --- hardware policy: dtype and attention chosen in one place, with the reason -----------------------
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs, set_seed

    info = hardware.detect()
    precision, precision_why = hardware.choose_precision(info, t.bf16, t.fp16)
    attn, attn_why = hardware.choose_attention(info, cfg.model.flash_attn)
    cfg.decide("precision", precision, precision_why)
    cfg.decide("attn_implementation", attn, attn_why)
    # Packing needs its own attention (examples kept apart), so it is chosen before the model is loaded.
    from steadytune import balance
    from steadytune.packing import plan_packing
    packing = plan_packing(cfg, info, class_weighted_loss=balance.uses_loss_weights(d.class_balance))
    if packing is not None:
        attn = packing.attn_implementation
    # Stability defaults of the hardware profile (seed 000 on ROCm), only where the user set nothing (guard.py).
    apply_hardware_profile(cfg, info.backend)
    if t.ddp_timeout > 3 * 3600:
        cfg.decide("ddp_timeout", t.ddp_timeout, "kept as asked; note that a huge timeout turns an RCCL/NCCL hang "
                   "into a silent multi-day stall (the default is 1800 s)")
    # Each run sets its own precision: forget a previous run's Accelerator settings in this process (the
    # process group, if any, is kept). Without this a second run_training with another precision fails.
    from accelerate.state import AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=False)
    accelerator = Accelerator(
        mixed_precision={"bf16": "bf16", "fp16": "fp16", "fp32": "no"}[precision],
        cpu=info.backend == "cpu",
        kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=t.ddp_timeout))],
        deepspeed_plugin=deepspeed_plugin(cfg),
    )
    device = accelerator.device
    set_seed(t.seed)
    is_main = accelerator.is_main_process
    run_startup_checks(cfg, info, output_dir, force=force, write=is_main)

    # --- model + LoRA ----------------------------------------------------------------------------------
    from steadytune.model import attach_adapter, count_parameters, load_model_and_tokenizer, load_trained_adapter

    # Frozen base weights in the compute dtype halve memory; trainable (LoRA) weights stay fp32 so small
    # updates are not rounded away (attach_adapter casts them).
    base_dtype = torch.bfloat16 if (precision == "bf16" and cfg.method.finetuning_type == "lora") else torch.float32
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch_dtype=base_dtype, attn_implementation=attn,
                                                device=device)
    if cfg.model.adapter_name_or_path and cfg.method.finetuning_type == "lora":
        # Continue training an existing adapter (LLaMA-Factory's adapter_name_or_path) instead of a fresh one.
        model = load_trained_adapter(model, cfg.model.adapter_name_or_path, is_trainable=True)
        cfg.decide("adapter_name_or_path", cfg.model.adapter_name_or_path, "training continues from this adapter "
                   "(its rank and targets; lora_* keys do not apply)")
    else:
        model = attach_adapter(model, cfg)
    if base_dtype != torch.float32 and cfg.method.finetuning_type == "lora" and not cfg.method.use_dora:
        # Every forward of this model runs under autocast (training, eval loss, scoring): see kernels.py.
        # (Plain LoRA only: DoRA's own forward has not been measured without the cast.)
        from steadytune.kernels import skip_lora_input_cast
        _, why = skip_lora_input_cast(model)
        cfg.decide("lora_input_cast", "off", why)
    apply_optional_kernels(cfg, model)
    record_inactive_keys(cfg)
    trainable, total = count_parameters(model)

    # --- data --------------------------------------------------------------------------------------------
    from steadytune.data import prepare_datasets

    data = prepare_datasets(cfg, tokenizer)
    if not data.train:
        raise UserError(f"dataset {d.dataset!r}: no training examples left after filtering")
    loader_factory = TrainBatches(cfg, data, tokenizer, accelerator.num_processes, accelerator.process_index,
                                  packing_attention=packing.attention if packing is not None else None)
    enable_gradient_checkpointing_if_needed(cfg, model, info, loader_factory)
    micro_batches_per_epoch = loader_factory.batches_per_epoch()
    steps_per_epoch = max(1, math.ceil(micro_batches_per_epoch / t.gradient_accumulation_steps))
    total_steps = t.max_steps if t.max_steps > 0 else max(1, math.ceil(steps_per_epoch * t.num_train_epochs))
    warmup = t.warmup_steps if t.warmup_steps > 0 else int(round(t.warmup_ratio * total_steps))
    cfg.decide("total_steps", total_steps, f"{'max_steps' if t.max_steps > 0 else 'num_train_epochs'}: "
               f"{micro_batches_per_epoch} micro-batches per epoch / {t.gradient_accumulation_steps} accumulation")
    cfg.decide("warmup_steps", warmup, "warmup_steps" if t.warmup_steps > 0 else f"warmup_ratio {t.warmup_ratio}")

    # --- optimizer + schedule ----------------------------------------------------------------------------
    from transformers import get_scheduler

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=t.learning_rate, betas=(t.adam_beta1, t.adam_beta2),
                                  eps=t.adam_epsilon, weight_decay=t.weight_decay,
                                  # one fused kernel for all LoRA tensors instead of several per tensor
                                  fused=device.type == "cuda" or None)
    scheduler = get_scheduler(t.lr_scheduler_type, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)
    objective = TrainingObjective(model)
    objective, optimizer = accelerator.prepare(objective, optimizer)

    # --- resume: weights, optimizer, schedule, RNG and data position, exactly -------------------------------
    state = TrainerState(model_name_or_path=cfg.model.model_name_or_path, finetuning_type=cfg.method.finetuning_type)
    metrics = MetricsLog(output_dir / "metrics.jsonl", enabled=is_main)
    if resume_from is not None:
        state = load_checkpoint(resume_from, unwrap(accelerator, objective).model, optimizer, scheduler,
                                cfg.model.model_name_or_path)
        metrics.truncate_after(state.global_step)
        metrics.event("resume", state.global_step, checkpoint=str(resume_from))
    # --- numerical guard + fault injection (guard.py, faults.py): every action is a metrics.jsonl event ----
    guard = NumericalGuard(cfg.guard, precision, emit=metrics.write, max_grad_norm=t.max_grad_norm,
                           fallback_precision=fallback_precision(info))
    faults = FaultInjector(cfg.fault_injection, emit=metrics.write)
    if resume_from is not None:
        guard.load_state_dict(state.extra.get("guard", guard.state_dict()))
        faults.load_state_dict(state.extra.get("faults", {}))
        guard.precision = precision
    train_state = TrainState(model=unwrap(accelerator, objective).model, optimizer=optimizer, scheduler=scheduler,
                             scaler=accelerator.scaler, data_position=data_position(state))
    if is_main:
        save_resolved_config(cfg, output_dir / "run_config.yaml")
        print_startup(cfg, info, trainable, total, data, total_steps, accelerator.num_processes, resume_from)
        if faults.active:
            print(faults.describe(), flush=True)

    # --- the loop --------------------------------------------------------------------------------------
    batches = loader_factory.stream(state.epoch, state.batch_in_epoch)
    throughput = Throughput(device)
    losses: list[float] = []
    window_loss, window_steps = 0.0, 0
    started = time.perf_counter()
    bar = tqdm(total=total_steps, initial=state.global_step, desc="train", disable=not (progress and is_main),
               dynamic_ncols=True)
    first_step = state.global_step
    guard.maybe_snapshot(state.global_step, train_state)  # guard: the starting state is the first good state
    while state.global_step < total_steps:
        step = state.global_step + 1  # the optimizer step being computed (faults and guard events use it)
        # One optimizer step = gradient_accumulation_steps micro-batches. The loss is normalised by the target
        # tokens of the whole window (summed over ranks), so every token weighs the same however the
        # micro-batches are cut.
        window = [next(batches) for _ in range(t.gradient_accumulation_steps)]
        window_ids = [i for mb in window for i in mb.ids]
        if guard.should_skip(window_ids):  # guard: a batch that caused a rollback is not replayed
            continue
        if faults.active:
            faults.begin_step(step)
        local_tokens = sum(count_target_tokens(mb.batch) for mb in window)
        global_tokens = reduce_sum(accelerator, local_tokens, device)
        step_loss = torch.zeros((), device=device)
        objective.train()
        for i, mb in enumerate(window):
            batch = to_device(mb.batch, device)
            sync_now = i == len(window) - 1
            with accelerator.no_sync(objective) if not sync_now else contextlib.nullcontext():
                with accelerator.autocast():
                    loss_sum, _ = objective(batch)
                if faults.active and i == 0:
                    loss_sum = faults.corrupt_loss(step, loss_sum)  # testing aid: NaN / inf / x factor
                # DDP averages gradients over ranks, so scale by the world size to get a sum over all tokens.
                loss = loss_sum * accelerator.num_processes / max(global_tokens, 1)
                accelerator.backward(loss)
            step_loss += loss_sum.detach()
        if faults.active:
            faults.corrupt_gradients(step, params)  # testing aid: inf gradients, as an fp16 overflow makes them
        # The guard may have tightened clipping after a rollback (seed 000: 1.0 -> 0.5 -> 0.3).
        grad_norm = clip_gradients(accelerator, params, guard.max_grad_norm)
        loss_value = reduce_sum(accelerator, step_loss.item(), device) / max(global_tokens, 1)

        # --- numerical guard: judge the step before its update is applied (guard.py) ---------------------
        decision = guard.inspect(step, loss_value, grad_norm, window_ids)
        if not decision.apply_update:
            if decision.kind == FP16_OVERFLOW and accelerator.scaler is not None:
                optimizer.step()  # the loss scaler skips the inf step itself and lowers its scale
            optimizer.zero_grad(set_to_none=True)
            if decision.action == ABORT:
                checkpoint = save_last_good_state(guard, train_state, state, output_dir, cfg, faults, is_main, step)
                finish_guard(guard, metrics, state, is_main)
                bar.close()
                raise guard.abort_error(decision, checkpoint)
            if decision.action == ROLLBACK:
                state.global_step = guard.restore(train_state)
                set_data_position(state, train_state.data_position)
                batches = loader_factory.stream(state.epoch, state.batch_in_epoch)
                del losses[max(0, state.global_step - first_step):]
                window_loss, window_steps = 0.0, 0
                bar.n = state.global_step
                if decision.new_precision:
                    bar.close()
                    return restart_in_precision(cfg, decision.new_precision, guard, train_state, state, output_dir,
                                                faults, metrics, force, progress)
            bar.set_postfix(guard=guard.event_count)
            bar.refresh()
            continue
        with faults.scaled_lr(step, optimizer):  # testing aid: x100 learning rate for a span of steps
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        state.global_step += 1
        state.epoch, state.batch_in_epoch = window[-1].next_position
        state.tokens_seen += global_tokens
        train_state.data_position = data_position(state)
        guard.maybe_snapshot(state.global_step, train_state)  # guard: keep a good state every snapshot_steps
        throughput.add(sum(mb.n_input_tokens for mb in window) * accelerator.num_processes)
        losses.append(loss_value)
        window_loss += loss_value
        window_steps += 1
        bar.update(1)

        if state.global_step % t.logging_steps == 0 or state.global_step == total_steps:
            record = {"step": state.global_step, "epoch": round(state.global_step / steps_per_epoch, 4),
                      "loss": window_loss / window_steps, "grad_norm": float(grad_norm),
                      "lr": scheduler.get_last_lr()[0], "tokens": state.tokens_seen,
                      "tokens_per_s": round(throughput.report(), 1), **memory_stats(device)}
            metrics.write(record)
            bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}", tok_s=f"{record['tokens_per_s']:.0f}",
                            guard=guard.event_count)
            window_loss, window_steps = 0.0, 0

        if should_evaluate(cfg, state.global_step, steps_per_epoch, total_steps) and data.eval:
            results = evaluate_during_training(cfg, accelerator, objective, data, tokenizer, device)
            metrics.write({"step": state.global_step, **results})
            new_best = update_best(cfg, state, results)
        else:
            new_best = False

        # A new best (metric_for_best_model) is saved at once, so best_checkpoint always names a folder that exists.
        if ((state.global_step % t.save_steps == 0 and state.global_step < total_steps) or new_best) and is_main:
            keep = {state.best_checkpoint} if state.best_checkpoint else set()
            state.extra.update(guard=guard.state_dict(), faults=faults.state_dict())  # a resume continues the guard
            save_checkpoint(output_dir, unwrap(accelerator, objective).model, optimizer, scheduler, state,
                            t.save_total_limit, keep)
    bar.close()
    train_seconds = time.perf_counter() - started
    finish_guard(guard, metrics, state, is_main)

    # --- outputs: the adapter (or full model) where PeftModel.from_pretrained expects it -------------------
    accelerator.wait_for_everyone()
    if is_main:
        final_model = unwrap(accelerator, objective).model
        final_model.save_pretrained(output_dir, safe_serialization=True)
        tokenizer.save_pretrained(output_dir)
        summary = {"global_step": state.global_step, "final_loss": losses[-1] if losses else None,
                   "train_seconds": round(train_seconds, 2), "tokens_seen": state.tokens_seen,
                   "trainable_params": trainable, "total_params": total,
                   "best_checkpoint": state.best_checkpoint, "best_metric": state.best_metric,
                   "guard": guard.summary()}
        write_json(output_dir / "train_results.json", summary)
        if t.plot_loss:
            plot_loss(output_dir / "metrics.jsonl", output_dir / "training_loss.png")
        print(f"done: {state.global_step} steps in {train_seconds:.1f} s, final loss "
              f"{summary['final_loss'] if summary['final_loss'] is None else round(summary['final_loss'], 4)}; "
              f"{'adapter' if cfg.method.finetuning_type == 'lora' else 'model'} in {output_dir}")
    tokens_per_s = state.tokens_seen / max(train_seconds, 1e-9)
    return TrainResult(output_dir, state.global_step, losses[-1] if losses else None, train_seconds, tokens_per_s,
                       losses)


# ---------------------------------------------------------------------------------------------------------
# Pieces of the recipe
# ---------------------------------------------------------------------------------------------------------

class TrainingObjective(torch.nn.Module):
    """The model plus its loss, as one module: Accelerate wraps *this* for DDP/FSDP, so the forward that
    computes the loss goes through the wrapper and gradients are synchronised."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> tuple[torch.Tensor, int]:
        return causal_lm_loss_sum(self.model, batch, batch.get("token_weights"))


@dataclass
class MicroBatch:
    batch: dict
    n_input_tokens: int                 # real (non-pad) tokens, for throughput
    next_position: tuple[int, int]      # (epoch, batch index) of the micro-batch after this one
    ids: list[int] = field(default_factory=list)  # training-example indices (guard events name bad batches)


class TrainBatches:
    """Deterministic micro-batches: epoch e's order is a permutation seeded by (seed, e), so a resumed run
    sees exactly the batches the uninterrupted run would have seen, from (epoch, batch index) alone.

    Two ways to cut that order into micro-batches:
    - fixed size (the default unpacked): global batches of per_device_train_batch_size x world examples, each
      rank taking its slice;
    - token budget (with packing, or max_tokens_per_batch set): consecutive examples of the order grouped up to
      the budget of real tokens (packing.group_by_token_budget), consecutive groups dealt to the ranks in turn.
    The same order and budget give the same groups packed or padded, so packing changes nothing but speed."""

    def __init__(self, cfg: RunConfig, data, tokenizer, world_size: int = 1, rank: int = 0,
                 packing_attention: str | None = None):
        from steadytune.data import PadCollator

        from steadytune import balance

        self.cfg, self.data = cfg, data
        self.world_size, self.rank = world_size, rank
        self.global_batch = cfg.train.per_device_train_batch_size * world_size
        self.collate = PadCollator(tokenizer.pad_token_id, padding_side="right")
        # Class balance (seed 003: a 55% majority class drove the loss up). The sampler draws each class about
        # equally often; the loss weights scale each example's label tokens by its class's inverse frequency.
        mode = cfg.data.class_balance if data.label_names else "none"
        self.label_ids = [x["label_id"] for x in data.train] if mode != "none" else []
        self.balanced_sampling = balance.uses_sampler(mode)
        self.loss_weights = None
        if balance.uses_loss_weights(mode):
            counts = [0] * len(data.label_names)
            for label in self.label_ids:
                counts[label] += 1
            self.loss_weights = balance.class_weights(counts)
        if packing_attention is not None:
            from steadytune.packing import PackedCollator
            self.collate = PackedCollator(tokenizer.pad_token_id, row_len=cfg.data.cutoff_len,
                                          attention=packing_attention)
        self.lengths = [len(x["input_ids"]) for x in data.train]
        self.max_tokens = token_budget(cfg, self.lengths, packed=packing_attention is not None)
        self._epoch_groups: tuple[int, list[list[int]]] | None = None

    def batches_per_epoch(self) -> int:
        if self.max_tokens is None:
            return max(1, len(self.data.train) // self.global_batch)
        return len(self.micro_batches(0))

    def order(self, epoch: int) -> list[int]:
        seed = self.cfg.train.seed * 1000 + epoch
        if self.balanced_sampling:
            from steadytune.balance import make_sampler
            return list(make_sampler(self.label_ids, seed))
        generator = torch.Generator().manual_seed(seed)
        return torch.randperm(len(self.data.train), generator=generator).tolist()

    def micro_batches(self, epoch: int) -> list[list[int]]:
        """This rank's micro-batches (example indices) of `epoch`, a pure function of (seed, epoch)."""
        if self._epoch_groups is not None and self._epoch_groups[0] == epoch:
            return self._epoch_groups[1]
        order = self.order(epoch)
        if self.max_tokens is None:
            g = self.global_batch
            mine = [order[b * g:(b + 1) * g][self.rank::self.world_size]
                    for b in range(max(1, len(order) // g))]
        else:
            from steadytune.packing import group_by_token_budget
            groups = group_by_token_budget(self.lengths, order, self.max_tokens)
            # Every rank runs the same number of micro-batches (DDP steps together); a short tail is dropped.
            count = max(1, len(groups) // self.world_size)
            mine = [groups[(b * self.world_size + self.rank) % len(groups)] for b in range(count)]
        self._epoch_groups = (epoch, mine)
        return mine

    def stream(self, epoch: int = 0, start_batch: int = 0):
        while True:
            micro_batches = self.micro_batches(epoch)
            n = len(micro_batches)
            for b in range(start_batch, n):
                indices = micro_batches[b]
                examples = [self.data.train[i] for i in indices]
                batch = self.collate(examples)
                if self.loss_weights is not None:
                    from steadytune.balance import label_token_weights
                    batch["token_weights"] = label_token_weights(batch, self.loss_weights)
                next_position = (epoch, b + 1) if b + 1 < n else (epoch + 1, 0)
                yield MicroBatch(batch, sum(len(e["input_ids"]) for e in examples), next_position, list(indices))
            epoch, start_batch = epoch + 1, 0


def token_budget(cfg: RunConfig, lengths: list[int], packed: bool) -> int | None:
    """Real tokens per micro-batch, or None for fixed-size batches; the choice is recorded with cfg.decide.

    Packed without a budget given: per_device_train_batch_size x the mean example length, so a step holds about
    as many examples as unpacked and the learning rate and step count keep their meaning (LLaMA-Factory's packed
    batch, rows of cutoff_len, is max_tokens_per_batch = per_device_train_batch_size x cutoff_len)."""
    t = cfg.train
    if t.max_tokens_per_batch is not None:
        cfg.decide("max_tokens_per_batch", t.max_tokens_per_batch, "max_tokens_per_batch was set")
        return t.max_tokens_per_batch
    if not packed:
        return None
    mean = sum(lengths) / max(len(lengths), 1)
    budget = max(1, math.ceil(t.per_device_train_batch_size * mean))
    cfg.decide("max_tokens_per_batch", budget, f"packing: per_device_train_batch_size {t.per_device_train_batch_size}"
               f" x mean example length {mean:.1f} (about as many examples per step as unpacked)")
    return budget


def data_position(state: TrainerState) -> dict:
    """What a guard snapshot records about the data stream, to rewind it on rollback."""
    return {"epoch": state.epoch, "batch_in_epoch": state.batch_in_epoch, "tokens_seen": state.tokens_seen}


def set_data_position(state: TrainerState, position: dict) -> None:
    state.epoch, state.batch_in_epoch, state.tokens_seen = (position["epoch"], position["batch_in_epoch"],
                                                            position["tokens_seen"])


def save_last_good_state(guard: NumericalGuard, train_state: TrainState, state: TrainerState, output_dir: Path,
                         cfg: RunConfig, faults: FaultInjector, is_main: bool, step: int) -> str | None:
    """Before the guard stops a run: write the last good state back into the model and save it as a checkpoint."""
    if guard.snapshots:
        state.global_step = guard.restore(train_state, before_step=step)
        set_data_position(state, train_state.data_position)
    if not is_main:
        return None
    state.extra.update(guard=guard.state_dict(), faults=faults.state_dict())
    return str(save_checkpoint(output_dir, train_state.model, train_state.optimizer, train_state.scheduler, state,
                               cfg.train.save_total_limit))


def finish_guard(guard: NumericalGuard, metrics: MetricsLog, state: TrainerState, is_main: bool) -> None:
    """The guard's summary: one metrics.jsonl event and one printed line."""
    if is_main:
        metrics.write({"event": "guard_summary", "step": state.global_step, **guard.summary()})
        print(guard.summary_text(), flush=True)


def restart_in_precision(cfg: RunConfig, precision: str, guard: NumericalGuard, train_state: TrainState,
                         state: TrainerState, output_dir: Path, faults: FaultInjector, metrics: MetricsLog,
                         force: bool, progress: bool) -> TrainResult:
    """fp16 kept overflowing: save the last good state (already restored) and continue from it in bf16/fp32.
    Accelerate fixes the precision when it starts, so the run resumes in a fresh Accelerator."""
    from accelerate.state import AcceleratorState

    state.extra.update(guard=guard.state_dict(), faults=faults.state_dict())
    checkpoint = save_checkpoint(output_dir, train_state.model, train_state.optimizer, train_state.scheduler, state)
    # Logged at the restored step: the resumed run keeps metrics.jsonl lines up to its checkpoint only.
    metrics.write({"event": "guard", "step": state.global_step, "kind": "fp16_overflow", "action": "precision_switch",
                   "new_precision": precision, "checkpoint": str(checkpoint)})
    cfg.train.fp16 = False
    cfg.train.bf16 = precision == "bf16"
    cfg.train.resume_from_checkpoint = str(checkpoint)
    cfg.decide("precision_switch", precision, f"fp16 overflowed repeatedly; resumed from {checkpoint} in {precision}")
    AcceleratorState._reset_state(reset_partial_state=False)
    return run_training(cfg, force=force, progress=progress)


def resolve_resume(cfg: RunConfig, output_dir: Path) -> Path | None:
    """resume_from_checkpoint: true -> the latest complete checkpoint in output_dir (none: start fresh);
    a path -> that checkpoint, validated."""
    value = cfg.train.resume_from_checkpoint
    if value is None or value is False:
        return None
    if value is True:
        latest = latest_checkpoint(output_dir)
        if latest is None:
            cfg.decide("resume_from_checkpoint", None, f"no checkpoint in {output_dir} yet: starting fresh")
            return None
        read_state(latest)
        return latest
    path = Path(value)
    read_state(path)  # raises CheckpointError naming the folder when truncated
    return path


def check_output_dir(cfg: RunConfig, output_dir: Path, resuming: bool) -> None:
    if resuming or not output_dir.exists() or not any(output_dir.iterdir()):
        return
    if not cfg.train.overwrite_output_dir:
        hint = " or resume_from_checkpoint=true to continue it" if list_checkpoints(output_dir) else ""
        raise UserError(f"output_dir {output_dir} is not empty; choose another output_dir, or set "
                        f"overwrite_output_dir=true to replace this run's files{hint}")
    # Overwrite replaces what an earlier run wrote (its checkpoints would otherwise pass for this run's);
    # files the run did not write stay.
    for path in list_checkpoints(output_dir) + [output_dir / name for name in RUN_FILES]:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def deepspeed_plugin(cfg: RunConfig):
    if not cfg.method.deepspeed:
        return None
    path = Path(cfg.method.deepspeed)
    if not path.is_file():
        raise UserError(f"deepspeed: config file {path} not found")
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        raise UserError("deepspeed: the deepspeed package is not installed (pip install 'steadytune[deepspeed]'); "
                        "on one GPU, LoRA needs no DeepSpeed: remove the key") from None
    from accelerate.utils import DeepSpeedPlugin

    ds = json.loads(path.read_text(encoding="utf-8"))
    t = cfg.train
    # Fill the "auto" values the way users of LLaMA-Factory's JSON files expect.
    fills = {"train_micro_batch_size_per_gpu": t.per_device_train_batch_size,
             "gradient_accumulation_steps": 1,  # we accumulate ourselves
             "gradient_clipping": t.max_grad_norm}
    for key, value in fills.items():
        if ds.get(key, "auto") == "auto":
            ds[key] = value
    ds.pop("train_batch_size", None)
    return DeepSpeedPlugin(hf_ds_config=ds)


def run_startup_checks(cfg: RunConfig, info, output_dir: Path, force: bool, write: bool) -> None:
    """The same checks `steadytune doctor` runs; error-level findings stop the run unless --force."""
    try:
        from steadytune.doctor import format_findings, has_errors, run_live_checks, write_environment
    except ImportError:
        return
    findings = run_live_checks()
    if write:
        write_environment(output_dir, info, findings)
    if has_errors(findings):
        message = "start-up checks found errors:\n" + format_findings([f for f in findings if f.severity == "error"])
        if not force:
            raise UserError(message + "\nfix them (see `steadytune doctor`), or pass --force to train anyway")
        print(message + "\n--force given: training anyway", file=sys.stderr)


def print_startup(cfg: RunConfig, info, trainable: int, total: int, data, total_steps: int, world: int,
                  resume_from: Path | None) -> None:
    t = cfg.train
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * world
    mean_len = sum(len(x["input_ids"]) for x in data.train) / len(data.train)
    lines = [
        f"steadytune train -> {t.output_dir}",
        f"  model        {cfg.model.model_name_or_path} ({cfg.method.finetuning_type}); trainable "
        f"{trainable:,} of {total:,} parameters ({100 * trainable / max(total, 1):.3f}%)",
        f"  hardware     {info.backend}" + (f", {info.primary.name} ({info.primary.arch})" if info.primary else "")
        + (f", {world} processes" if world > 1 else ""),
        f"  data         {len(data.train):,} training examples (mean {mean_len:.0f} tokens)"
        + (f", {len(data.eval):,} eval" if data.eval else ""),
        f"  batch        {t.per_device_train_batch_size} x {t.gradient_accumulation_steps} accumulation x {world} "
        f"= {effective} examples (~{effective * mean_len:,.0f} tokens) per step; {total_steps} steps",
    ]
    budget = cfg.decisions.get("max_tokens_per_batch", {}).get("value")
    if budget:
        tokens = budget * t.gradient_accumulation_steps * world
        lines[-1] = (f"  batch        {budget:,} tokens x {t.gradient_accumulation_steps} accumulation x {world} = "
                     f"{tokens:,} tokens (~{tokens / mean_len:.0f} examples) per step; {total_steps} steps")
    if data.label_names:
        for split in ("train", "eval"):
            counts = data.class_counts.get(split)
            if counts:
                lines.append(f"  {split + ' classes':<12} {counts}; majority baseline {majority_share(counts):.3f}")
        lines.append(f"  class_balance {cfg.data.class_balance}")
    for key, decision in cfg.decisions.items():
        lines.append(f"  {key:<12} {decision['value']}  ({decision['reason']})")
    if resume_from is not None:
        lines.append(f"  resume       from {resume_from}")
    print("\n".join(lines), flush=True)


def apply_optional_kernels(cfg: RunConfig, model) -> None:
    """use_liger_kernel / torch_compile: applied where they work and recorded; a requested kernel that cannot be
    used is an error, never a silent skip."""
    from steadytune.kernels import apply_liger_kernels, compile_layers

    t = cfg.train
    for key, wanted, apply in (("use_liger_kernel", t.use_liger_kernel, apply_liger_kernels),
                               ("torch_compile", t.torch_compile, compile_layers)):
        if not wanted:
            continue
        applied, why = apply(model)
        if not applied:
            raise UserError(f"{key}: true, but {why}; set {key}: false")
        cfg.decide(key, True, why)


def enable_gradient_checkpointing_if_needed(cfg: RunConfig, model, info, batches: "TrainBatches") -> None:
    """gradient_checkpointing unset: on only when a micro-batch's activations would not fit in half the GPU's
    memory (recomputing costs about a third more compute, worth it only when memory is the limit)."""
    from steadytune.kernels import choose_gradient_checkpointing

    tokens = batches.max_tokens or cfg.train.per_device_train_batch_size * max(batches.lengths)
    budget = info.primary.memory_gib if info.primary is not None else None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    use, why = choose_gradient_checkpointing(base.config, tokens, budget, cfg.train.gradient_checkpointing)
    cfg.decide("gradient_checkpointing", use, why)
    if use:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": cfg.model.use_reentrant_gc})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()


def record_inactive_keys(cfg: RunConfig) -> None:
    """LLaMA-Factory keys that change nothing in this recipe are recorded with the reason, never dropped silently."""
    t = cfg.train
    if t.dataloader_num_workers:
        cfg.decide("dataloader_num_workers", 0, "examples are tokenised before training and collated in the training "
                   "process (microseconds a batch), so no loader workers are started")
    if cfg.data.preprocessing_num_workers:
        cfg.decide("preprocessing_num_workers", 1, "tokenisation runs in one process (seconds at these sizes; "
                   "tokenized_path caches it for later runs)")
    if t.save_only_model:
        cfg.decide("save_only_model", False, "checkpoints always keep optimizer, scheduler and RNG state, so every "
                   "checkpoint can be resumed exactly")


def majority_share(counts: dict) -> float:
    total = sum(counts.values())
    return max(counts.values()) / total if total else 0.0


def should_evaluate(cfg: RunConfig, step: int, steps_per_epoch: int, total_steps: int) -> bool:
    t = cfg.train
    if t.eval_strategy == "steps":
        return step % (t.eval_steps or t.logging_steps) == 0 or step == total_steps
    if t.eval_strategy == "epoch":
        return step % steps_per_epoch == 0 or step == total_steps
    return False


@torch.no_grad()
def evaluate_during_training(cfg: RunConfig, accelerator, objective, data, tokenizer, device) -> dict:
    """Eval loss over the eval split (token-weighted), plus accuracy and macro-F1 for classification."""
    from steadytune.data import PadCollator

    objective.eval()
    collate = PadCollator(tokenizer.pad_token_id, padding_side="right")
    size = cfg.train.per_device_eval_batch_size
    loss_total, tokens = 0.0, 0
    for start in range(0, len(data.eval), size):
        batch = to_device(collate(data.eval[start:start + size]), device)
        with accelerator.autocast():
            loss_sum, n = objective(batch)
        loss_total += float(loss_sum)
        tokens += n
    results = {"eval_loss": loss_total / max(tokens, 1)}
    if data.label_names:
        results.update(classification_metrics(cfg, unwrap(accelerator, objective).model, tokenizer, data))
    objective.train()
    return results


def classification_metrics(cfg: RunConfig, model, tokenizer, data) -> dict:
    try:
        from steadytune.scoring import evaluate_classification
    except ImportError:
        return {}
    report = evaluate_classification(model, tokenizer, data.eval, data.label_names, data.template,
                                     cfg.data.prompt_template, cfg.train.per_device_eval_batch_size,
                                     cutoff_len=cfg.data.cutoff_len, progress=False)
    return {"eval_accuracy": report["accuracy"], "eval_macro_f1": report["macro_f1"]}


def update_best(cfg: RunConfig, state: TrainerState, results: dict) -> bool:
    """Track metric_for_best_model; True when this evaluation is the best so far."""
    name = cfg.train.metric_for_best_model
    if not name:
        return False
    key = name if name in results else f"eval_{name}"
    if key not in results:
        return False
    value = results[key]
    lower_is_better = "loss" in key
    better = (state.best_metric is None or (value < state.best_metric if lower_is_better else value > state.best_metric))
    if better:
        state.best_metric = value
        state.best_checkpoint = f"checkpoint-{state.global_step}"
    return better


def clip_gradients(accelerator, params, max_norm: float) -> torch.Tensor:
    if max_norm and max_norm > 0:
        return accelerator.clip_grad_norm_(params, max_norm)
    # Still measure the norm: the guard and the log need it.
    grads = [p.grad.detach().float().norm() for p in params if p.grad is not None]
    return torch.stack(grads).norm() if grads else torch.zeros(())


def reduce_sum(accelerator, value: float | int, device) -> float | int:
    if accelerator.num_processes == 1:
        return value
    tensor = torch.tensor(float(value), device=device)
    total = accelerator.reduce(tensor, reduction="sum").item()
    return int(total) if isinstance(value, int) else total


def to_device(batch: dict, device) -> dict:
    return {k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def unwrap(accelerator, objective) -> TrainingObjective:
    return accelerator.unwrap_model(objective)


def write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str), encoding="utf-8")

