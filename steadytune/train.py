"""`steadytune train`: the fine-tuning recipe, readable top to bottom.

    run_training, the driver:  claim output_dir -> set_up -> fit -> finish
    set_up   where to start (fresh, reuse, resume) -> hardware policy -> tokenizer + data, checked before any
             weights load -> resume checks -> Accelerator -> model + LoRA -> batches and steps -> optimizer +
             schedule -> restore the checkpoint -> guard
    fit      the loop: forward on labelled positions, token-normalised accumulation, clip, guard, step, log,
             eval, save; a signal saves a checkpoint at the step boundary and stops
    finish   adapter (or model) + tokenizer + results + plot

An fp16 run that keeps overflowing comes back from `fit` asking for another precision: the driver sets up again
from the checkpoint it saved. The loop is ours, on Accelerate (no transformers.Trainer subclass): Accelerate brings
DDP / FSDP / DeepSpeed and autocast; everything that decides the numbers is visible here.
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
from typing import Any

import torch
from tqdm.auto import tqdm

from steadytune import hardware
from steadytune.batches import TrainBatches, token_budget
from steadytune.checkpoint import TrainerState, list_checkpoints, load_checkpoint, read_state, save_checkpoint
from steadytune.config import RunConfig, describe_keys, load_config, save_resolved_config
from steadytune.errors import CheckpointError, UserError
from steadytune.faults import FaultInjector
from steadytune.guard import (ABORT, FP16_OVERFLOW, ROLLBACK, GuardAbort, NumericalGuard, TrainState,
                              apply_hardware_profile, fallback_precision)
from steadytune.loss import causal_lm_loss_sum, count_target_tokens
from steadytune.monitor import MetricsLog, Throughput, memory_stats, plot_loss
from steadytune.run_folder import RunFolder, describe_os_error
from steadytune.stopping import RunInterrupted, StopRequests


class NonFiniteRun(UserError):
    """The run ended with NaN/inf: no adapter was written."""
    exit_code = 4


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
# The driver
# ---------------------------------------------------------------------------------------------------------

def run_training(cfg: RunConfig, force: bool = False, progress: bool = True) -> TrainResult:
    from accelerate import PartialState

    folder = RunFolder(Path(cfg.train.output_dir), main_process=PartialState().is_main_process)
    folder.claim()  # usable folder, lock taken
    stop = StopRequests().install()
    try:
        while True:
            run = set_up(cfg, folder, stop, force, progress)
            outcome = fit(run)
            if outcome.new_precision is None:
                return finish(run, outcome)
            # fp16 kept overflowing: fit saved the last good state; continue from it in bf16 or fp32.
            resume_in_precision(cfg, outcome)
    except BaseException as error:
        if not folder.started_steps:
            folder.undo_failed_start()  # a failed start leaves output_dir as it found it
        else:
            folder.record(status=status_of(error))
        raise
    finally:
        stop.restore()
        folder.release()


@dataclass
class Run:
    """Everything the loop works with: built by set_up, read by fit and finish."""
    cfg: RunConfig
    folder: RunFolder
    stop: StopRequests
    info: Any
    precision: str
    accelerator: Any
    tokenizer: Any
    data: Any
    objective: torch.nn.Module
    params: list
    optimizer: Any
    scheduler: Any
    batches: TrainBatches
    steps_per_epoch: int
    total_steps: int
    state: TrainerState
    metrics: MetricsLog
    guard: NumericalGuard
    faults: FaultInjector
    live: TrainState                  # the live objects guard snapshots copy and rollbacks restore
    trainable: int
    total: int
    resume_from: Path | None
    progress: bool

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def model(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.objective).model

    def save_checkpoint(self, keep: set[str] | None = None) -> Path:
        """checkpoint-N/ of the current state (written by the main process; every process calls this)."""
        path = Path(self.cfg.train.output_dir) / f"checkpoint-{self.state.global_step}"
        if self.is_main:
            self.state.extra.update(guard=self.guard.state_dict(), faults=self.faults.state_dict())
            try:
                path = save_checkpoint(self.cfg.train.output_dir, self.model, self.optimizer, self.scheduler,
                                       self.state, self.cfg.train.save_total_limit, keep,
                                       scaler=self.accelerator.scaler)
            finally:
                self.folder.record()
        self.accelerator.wait_for_everyone()
        return path


@dataclass
class Outcome:
    losses: list[float]
    train_seconds: float
    new_precision: str | None = None
    checkpoint: Path | None = None


# ---------------------------------------------------------------------------------------------------------
# Set-up
# ---------------------------------------------------------------------------------------------------------

def set_up(cfg: RunConfig, folder: RunFolder, stop: StopRequests, force: bool, progress: bool) -> Run:
    t, d = cfg.train, cfg.data

    # --- where to start: fresh, over an earlier run, or from a checkpoint (run_folder.py) ---------------------
    plan = share_from_main(folder.plan_start(t.overwrite_output_dir, t.resume_from_checkpoint, list_checkpoints))
    if plan.message:
        cfg.decide("start", plan.mode, plan.message)

    # --- hardware policy: dtype and attention chosen in one place, with the reason -----------------------
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

    # --- data before weights: a bad file, key or column stops here, not after minutes of loading ------------
    from steadytune.data import prepare_datasets
    from steadytune.model import load_tokenizer

    tokenizer = load_tokenizer(cfg.model)
    data = prepare_datasets(cfg, tokenizer)
    if not data.train:
        raise UserError(f"dataset {d.dataset!r}: no training examples left after filtering")
    check_data_fits_keys(cfg, data)
    resume_candidates = vet_resume(cfg, plan.resume_candidates)

    # --- Accelerate, and the same checks `steadytune doctor` runs --------------------------------------------
    accelerator = make_accelerator(cfg, precision, info)
    device = accelerator.device
    from accelerate.utils import set_seed
    set_seed(t.seed)
    run_startup_checks(info, Path(t.output_dir), force=force, write=accelerator.is_main_process)

    # --- model + LoRA ----------------------------------------------------------------------------------
    from steadytune.model import attach_adapter, count_parameters, load_model_and_tokenizer, load_trained_adapter

    # Frozen base weights in the compute dtype halve memory; trainable (LoRA) weights stay fp32 so small
    # updates are not rounded away (attach_adapter casts them).
    base_dtype = torch.bfloat16 if (precision == "bf16" and cfg.method.finetuning_type == "lora") else torch.float32
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch_dtype=base_dtype, attn_implementation=attn,
                                                device=device, tokenizer=tokenizer)
    if cfg.model.adapter_name_or_path and cfg.method.finetuning_type == "lora":
        # Continue training an existing adapter (LLaMA-Factory's adapter_name_or_path) instead of a fresh one.
        model = load_trained_adapter(model, cfg.model.adapter_name_or_path, is_trainable=True,
                                     allow_pickle=cfg.model.allow_pickle_weights)
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

    # --- batches and steps -------------------------------------------------------------------------------
    lengths = [len(x["input_ids"]) for x in data.train]
    budget, budget_why = token_budget(t, lengths, packed=packing is not None)
    if budget_why:
        cfg.decide("max_tokens_per_batch", budget, budget_why)
    batches = TrainBatches(cfg, data, tokenizer, accelerator.num_processes, accelerator.process_index,
                           packing_attention=packing.attention if packing is not None else None, max_tokens=budget)
    enable_gradient_checkpointing_if_needed(cfg, model, info, batches)
    micro_batches_per_epoch = batches.batches_per_epoch()
    steps_per_epoch = max(1, math.ceil(micro_batches_per_epoch / t.gradient_accumulation_steps))
    total_steps = t.max_steps if t.max_steps > 0 else max(1, math.ceil(steps_per_epoch * t.num_train_epochs))
    warmup = t.warmup_steps if t.warmup_steps > 0 else int(round(t.warmup_ratio * total_steps))
    cfg.decide("total_steps", total_steps, f"{'max_steps' if t.max_steps > 0 else 'num_train_epochs'}: "
               f"{micro_batches_per_epoch} micro-batches per epoch / {t.gradient_accumulation_steps} accumulation")
    cfg.decide("warmup_steps", warmup, "warmup_steps" if t.warmup_steps > 0 else f"warmup_ratio {t.warmup_ratio}")
    check_steps_fit_keys(cfg, micro_batches_per_epoch, total_steps)

    # --- optimizer + schedule ----------------------------------------------------------------------------
    from transformers import get_scheduler

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=t.learning_rate, betas=(t.adam_beta1, t.adam_beta2),
                                  eps=t.adam_epsilon, weight_decay=t.weight_decay,
                                  # one fused kernel for all LoRA tensors instead of several per tensor
                                  fused=device.type == "cuda" or None)
    scheduler = get_scheduler(t.lr_scheduler_type, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)
    objective, optimizer = accelerator.prepare(TrainingObjective(model), optimizer)

    # --- resume: weights, optimizer, schedule, loss scale, RNG and data position, exactly ----------------------
    state = TrainerState(model_name_or_path=cfg.model.model_name_or_path, finetuning_type=cfg.method.finetuning_type)
    resume_from = None
    if resume_candidates:
        state, resume_from = restore_checkpoint(cfg, resume_candidates, accelerator.unwrap_model(objective).model,
                                                optimizer, scheduler, accelerator.scaler)
    metrics = MetricsLog(Path(t.output_dir) / "metrics.jsonl", enabled=accelerator.is_main_process)

    # --- numerical guard + fault injection (guard.py, faults.py): every action is a metrics.jsonl event ----
    guard = NumericalGuard(cfg.guard, precision, emit=metrics.write, max_grad_norm=t.max_grad_norm,
                           fallback_precision=fallback_precision(info))
    faults = FaultInjector(cfg.fault_injection, emit=metrics.write)
    if resume_from is not None:
        guard.load_state_dict(state.extra.get("guard", guard.state_dict()))
        faults.load_state_dict(state.extra.get("faults", {}))
        guard.precision = precision
    live = TrainState(model=accelerator.unwrap_model(objective).model, optimizer=optimizer, scheduler=scheduler,
                      scaler=accelerator.scaler, data_position=data_position(state))
    run = Run(cfg, folder, stop, info, precision, accelerator, tokenizer, data, objective, params, optimizer,
              scheduler, batches, steps_per_epoch, total_steps, state, metrics, guard, faults, live, trainable, total,
              resume_from, progress)
    if run.is_main:
        print_startup(run)
    return run


def share_from_main(obj):
    """The main process's value on every rank (only the main process reads and changes output_dir)."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    if PartialState().num_processes == 1:
        return obj
    return broadcast_object_list([obj], from_process=0)[0]


def make_accelerator(cfg: RunConfig, precision: str, info):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    # Each set-up fixes its own precision: forget an earlier Accelerator's settings in this process (the process
    # group, if any, is kept). Without this a second set-up with another precision fails.
    AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(
        mixed_precision={"bf16": "bf16", "fp16": "fp16", "fp32": "no"}[precision],
        cpu=info.backend == "cpu",
        kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=cfg.train.ddp_timeout))],
        deepspeed_plugin=deepspeed_plugin(cfg),
    )


def check_data_fits_keys(cfg: RunConfig, data) -> None:
    """What would silently go wrong with this data and these keys: say it before anything loads."""
    t = cfg.train
    if not data.eval:
        if t.eval_strategy != "no":
            raise UserError(f"eval_strategy: {t.eval_strategy}, but there is no eval data: set val_size (e.g. 0.1) or "
                            "eval_dataset, or eval_strategy: no")
        if t.metric_for_best_model:
            raise UserError(f"metric_for_best_model: {t.metric_for_best_model}, but there is no eval data to measure "
                            "it on: set val_size or eval_dataset, or remove the key")
    from steadytune.data.prepare import truncation_summary
    line, warn = truncation_summary(data.stats, cfg.data.cutoff_len)
    if line:
        if warn:
            line += (" -- more than 10% of the examples lost prompt tokens, often the question itself: raise cutoff_len "
                     "or shorten the inputs")
            print(f"warning: {line}", file=sys.stderr, flush=True)
        cfg.decide("truncation", data.stats["truncation"].get("train"), line)


def check_steps_fit_keys(cfg: RunConfig, micro_batches_per_epoch: int, total_steps: int) -> None:
    t, f = cfg.train, cfg.fault_injection
    if t.gradient_accumulation_steps > micro_batches_per_epoch:
        message = (f"gradient_accumulation_steps {t.gradient_accumulation_steps} is more than the "
                   f"{micro_batches_per_epoch} micro-batches of an epoch: every optimizer step spans more than one "
                   "epoch (lower it, or raise the data)")
        print(f"warning: {message}", file=sys.stderr, flush=True)
        cfg.decide("gradient_accumulation_steps", t.gradient_accumulation_steps, message)
    for key in ("nan_loss_step", "inf_loss_step", "spike_loss_step", "fp16_overflow_step", "lr_spike_start"):
        step = getattr(f, key)
        if step is not None and step > total_steps:
            raise UserError(f"fault_injection.{key}: step {step} is beyond the run's {total_steps} steps; the fault "
                            "would never fire")


def vet_resume(cfg: RunConfig, candidates: list[Path]) -> list[Path]:
    """The checkpoints a resume may use, newest first: damaged ones are skipped with a message (an explicitly named
    one is an error); a checkpoint whose run had other keys is refused, naming each key with old -> new."""
    from steadytune.resume import compare_for_resume, resume_fingerprint

    usable = []
    for path in candidates:
        try:
            state = read_state(path)
        except CheckpointError as e:
            if len(candidates) == 1:
                raise
            print(f"warning: {e}; trying the previous checkpoint", file=sys.stderr, flush=True)
            continue
        if not usable:
            refused, applied = compare_for_resume(state.extra.get("config"), resume_fingerprint(cfg))
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


def restore_checkpoint(cfg: RunConfig, candidates: list[Path], model, optimizer, scheduler, scaler):
    """Load the newest checkpoint that loads; a damaged one falls back to the previous, with a message."""
    for k, path in enumerate(candidates):
        try:
            state = load_checkpoint(path, model, optimizer, scheduler, cfg.model.model_name_or_path, scaler=scaler)
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


def resume_in_precision(cfg: RunConfig, outcome: Outcome) -> None:
    cfg.train.fp16 = False
    cfg.train.bf16 = outcome.new_precision == "bf16"
    cfg.train.resume_from_checkpoint = str(outcome.checkpoint)
    cfg.decide("precision_switch", outcome.new_precision,
               f"fp16 overflowed repeatedly; resumed from {outcome.checkpoint} in {outcome.new_precision}")


def status_of(error: BaseException) -> str:
    if isinstance(error, GuardAbort):
        return "aborted"
    if isinstance(error, (RunInterrupted, KeyboardInterrupt)):
        return "interrupted"
    return "failed"


# ---------------------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------------------

@dataclass
class LoopState:
    """The loop's running values, in one place so that a rollback can rewind them together."""
    batches: Any
    losses: list[float] = field(default_factory=list)
    window_loss: float = 0.0
    window_steps: int = 0
    first_step: int = 0


def fit(run: Run) -> Outcome:
    cfg, t, state, guard, faults = run.cfg, run.cfg.train, run.state, run.guard, run.faults
    begin_steps(run)
    loop = LoopState(run.batches.stream(state.epoch, state.batch_in_epoch), first_step=state.global_step)
    throughput = Throughput(run.device)
    started = time.perf_counter()
    bar = tqdm(total=run.total_steps, initial=state.global_step, desc="train", dynamic_ncols=True,
               disable=not (run.progress and run.is_main))
    guard.maybe_snapshot(state.global_step, run.live)  # guard: the starting state is the first good state
    run.stop.in_loop = True
    try:
        while state.global_step < run.total_steps:
            if stop_requested(run):
                interrupt(run, loop, started)
            step = state.global_step + 1  # the optimizer step being computed (faults and guard events use it)
            # One optimizer step = gradient_accumulation_steps micro-batches. The loss is normalised by the target
            # tokens of the whole window (summed over ranks), so every token weighs the same however the
            # micro-batches are cut.
            window = [next(loop.batches) for _ in range(t.gradient_accumulation_steps)]
            window_ids = [i for mb in window for i in mb.ids]
            if guard.should_skip(window_ids):  # guard: a batch that caused a rollback is not replayed
                continue
            faults.begin_step(step)
            loss_value, grad_norm, global_tokens = forward_backward(run, window, step)

            # --- numerical guard: judge the step before its update is applied (guard.py) --------------------
            decision = guard.inspect(step, loss_value, grad_norm, window_ids)
            if not decision.apply_update:
                new_precision = recover(run, loop, decision, step)
                bar.n = state.global_step
                bar.set_postfix(guard=guard.event_count)
                bar.refresh()
                if new_precision:
                    checkpoint = run.save_checkpoint()
                    # Logged at the restored step: the resumed run keeps metrics.jsonl up to its checkpoint only.
                    run.metrics.write({"event": "guard", "step": state.global_step, "kind": FP16_OVERFLOW,
                                       "action": "precision_switch", "new_precision": new_precision,
                                       "checkpoint": str(checkpoint)})
                    return Outcome(loop.losses, time.perf_counter() - started, new_precision, checkpoint)
                continue
            with faults.scaled_lr(step, run.optimizer):  # testing aid: x100 learning rate for a span of steps
                run.optimizer.step()
            run.scheduler.step()
            run.optimizer.zero_grad(set_to_none=True)

            state.global_step += 1
            state.epoch, state.batch_in_epoch = window[-1].next_position
            state.tokens_seen += global_tokens
            run.live.data_position = data_position(state)
            guard.maybe_snapshot(state.global_step, run.live)  # guard: keep a good state every snapshot_steps
            throughput.add(sum(mb.n_input_tokens for mb in window) * run.accelerator.num_processes)
            loop.losses.append(loss_value)
            loop.window_loss += loss_value
            loop.window_steps += 1
            bar.update(1)

            if state.global_step % t.logging_steps == 0 or state.global_step == run.total_steps:
                record = {"step": state.global_step, "epoch": round(state.global_step / run.steps_per_epoch, 4),
                          "loss": loop.window_loss / loop.window_steps, "grad_norm": float(grad_norm),
                          "lr": run.scheduler.get_last_lr()[0], "tokens": state.tokens_seen,
                          "tokens_per_s": round(throughput.report(), 1), **memory_stats(run.device)}
                run.metrics.write(record)
                bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}",
                                tok_s=f"{record['tokens_per_s']:.0f}", guard=guard.event_count)
                loop.window_loss, loop.window_steps = 0.0, 0

            new_best = False
            if should_evaluate(t, state.global_step, run.steps_per_epoch, run.total_steps) and run.data.eval:
                results = evaluate_during_training(cfg, run.accelerator, run.objective, run.data, run.tokenizer,
                                                   run.device)
                run.metrics.write({"step": state.global_step, **results})
                new_best = update_best(t, state, results)
            # A new best (metric_for_best_model) is saved at once, so best_checkpoint always names a folder that exists.
            if (state.global_step % t.save_steps == 0 and state.global_step < run.total_steps) or new_best:
                run.save_checkpoint(keep={state.best_checkpoint} if state.best_checkpoint else set())
    finally:
        run.stop.in_loop = False
        bar.close()
    return Outcome(loop.losses, time.perf_counter() - started)


def begin_steps(run: Run) -> None:
    """The run is really starting: its config and manifest go into output_dir, a resumed log is cut back to its
    checkpoint, and from here on a failure keeps the folder (it may hold checkpoints worth resuming)."""
    if run.is_main:
        out = Path(run.cfg.train.output_dir)
        from steadytune.resume import resume_fingerprint
        run.state.extra["config"] = resume_fingerprint(run.cfg)
        if run.resume_from is not None:
            run.metrics.truncate_after(run.state.global_step)
            run.metrics.event("resume", run.state.global_step, checkpoint=str(run.resume_from))
        try:
            save_resolved_config(run.cfg, out / "run_config.yaml")
        except OSError as e:
            raise UserError(describe_os_error(e, f"output_dir {out}")) from None
        if run.faults.active:
            print(run.faults.describe(), flush=True)
    run.folder.started_steps = True
    run.folder.record(status="running", command=" ".join(sys.argv))


def forward_backward(run: Run, window: list, step: int) -> tuple[float, torch.Tensor, int]:
    """Forward and backward over one accumulation window; -> (loss per target token, gradient norm, target tokens
    of the window summed over ranks)."""
    accelerator, faults = run.accelerator, run.faults
    local_tokens = sum(count_target_tokens(mb.batch) for mb in window)
    global_tokens = reduce_sum(accelerator, local_tokens, run.device)
    step_loss = torch.zeros((), device=run.device)
    run.objective.train()
    for i, mb in enumerate(window):
        batch = to_device(mb.batch, run.device)
        with sync_gradients_on_last(accelerator, run.objective, i == len(window) - 1):
            with accelerator.autocast():
                loss_sum, _ = run.objective(batch)
            if i == 0:
                loss_sum = faults.corrupt_loss(step, loss_sum)  # testing aid: NaN / inf / x factor
            # DDP averages gradients over ranks, so scale by the world size to get a sum over all tokens.
            loss = loss_sum * accelerator.num_processes / max(global_tokens, 1)
            accelerator.backward(loss)
        step_loss += loss_sum.detach()
    faults.corrupt_gradients(step, run.params)  # testing aid: inf gradients, as an fp16 overflow makes them
    # The guard may have tightened clipping after a rollback (seed 000: 1.0 -> 0.5 -> 0.3).
    grad_norm = clip_gradients(accelerator, run.params, run.guard.max_grad_norm)
    loss_value = reduce_sum(accelerator, step_loss.item(), run.device) / max(global_tokens, 1)
    return loss_value, grad_norm, global_tokens


def sync_gradients_on_last(accelerator, objective, is_last: bool):
    """Gradients are all-reduced once per window, on its last micro-batch (no_sync on the others)."""
    return contextlib.nullcontext() if is_last else accelerator.no_sync(objective)


def recover(run: Run, loop: LoopState, decision, step: int) -> str | None:
    """The guard refused this step's update: drop it, and roll back or stop as it decided. Returns a precision
    to switch to when fp16 kept overflowing (the caller saves and comes back in it), else None."""
    state, guard = run.state, run.guard
    if decision.kind == FP16_OVERFLOW and run.accelerator.scaler is not None:
        run.optimizer.step()  # the loss scaler skips the inf step itself and lowers its scale
    run.optimizer.zero_grad(set_to_none=True)
    if decision.action == ABORT:
        # No refused update ever reached the weights: the live state is the last good one. Save it.
        checkpoint = run.save_checkpoint()
        finish_guard(run)
        raise guard.abort_error(decision, str(checkpoint))
    if decision.action == ROLLBACK:
        state.global_step = guard.restore(run.live)
        set_data_position(state, run.live.data_position)
        loop.batches = run.batches.stream(state.epoch, state.batch_in_epoch)
        del loop.losses[max(0, state.global_step - loop.first_step):]
        loop.window_loss, loop.window_steps = 0.0, 0
        return decision.new_precision
    return None


def stop_requested(run: Run) -> bool:
    """A signal reached this process (or, with several processes, any of them)."""
    asked = run.stop.requested is not None
    if run.accelerator.num_processes > 1:
        asked = bool(reduce_sum(run.accelerator, int(asked), run.device))
    return asked


def interrupt(run: Run, loop: LoopState, started: float) -> None:
    """Save where the run is (a step boundary) and stop with the signal's exit code."""
    import signal

    signum = run.stop.requested or signal.SIGTERM
    checkpoint = run.save_checkpoint()
    finish_guard(run)
    steps = run.state.global_step
    raise RunInterrupted(signum, f"stopped by {signal.Signals(signum).name} at step {steps} of {run.total_steps} "
                                 f"after {time.perf_counter() - started:.0f} s; saved {checkpoint}; run the same "
                                 "command again to continue (the unfinished run resumes from its last checkpoint)")


# ---------------------------------------------------------------------------------------------------------
# Finish
# ---------------------------------------------------------------------------------------------------------

def finish(run: Run, outcome: Outcome) -> TrainResult:
    cfg, state, out = run.cfg, run.state, Path(run.cfg.train.output_dir)
    finish_guard(run)
    run.accelerator.wait_for_everyone()
    final_loss = outcome.losses[-1] if outcome.losses else None
    # A run that ends in NaN/inf must not leave an adapter a script could take for a result (guard on or off).
    diverged = (final_loss is not None and not math.isfinite(final_loss)) or not weights_are_finite(run.params)
    summary = {"global_step": state.global_step, "final_loss": final_loss,
               "train_seconds": round(outcome.train_seconds, 2), "tokens_seen": state.tokens_seen,
               "trainable_params": run.trainable, "total_params": run.total,
               "best_checkpoint": state.best_checkpoint, "best_metric": state.best_metric,
               "guard": run.guard.summary(), "status": "diverged" if diverged else "finished"}
    if run.is_main:
        write_json(out / "train_results.json", summary)
        if diverged:
            run.folder.record(status="diverged")
            what = "loss" if final_loss is not None and not math.isfinite(final_loss) else "weight"
            raise NonFiniteRun(f"the run ended with a non-finite {what} (final loss {final_loss}) at step "
                               f"{state.global_step}: no adapter was saved in {out}. Turn the numerical guard on "
                               "(guard_policy: rollback), lower learning_rate, or use bf16 instead of fp16")
        save_final_outputs(run, out)
        # A card of what the run did, and the base named so another machine finds it (not a cache path).
        from steadytune.infer.card import write_run_card
        write_run_card(out, cfg.model.model_name_or_path)
        if cfg.train.plot_loss:
            plot_loss(out / "metrics.jsonl", out / "training_loss.png")
        run.folder.record(status="finished")
        print(f"done: {state.global_step} steps in {outcome.train_seconds:.1f} s, final loss "
              f"{final_loss if final_loss is None else round(final_loss, 4)}; "
              f"{'adapter' if cfg.method.finetuning_type == 'lora' else 'model'} in {out}")
    tokens_per_s = state.tokens_seen / max(outcome.train_seconds, 1e-9)
    return TrainResult(out, state.global_step, final_loss, outcome.train_seconds, tokens_per_s, outcome.losses)


def save_final_outputs(run: Run, out: Path) -> None:
    """The adapter (or full model) and tokenizer, written into a temporary folder and moved into place, so a disk
    that fills up mid-save leaves no half-written adapter behind (the checkpoints stay)."""
    tmp = out / ".final.tmp"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        run.model.save_pretrained(tmp, safe_serialization=True)
        run.tokenizer.save_pretrained(tmp)
        for item in tmp.iterdir():
            target = out / item.name
            if target.is_dir():
                shutil.rmtree(target)
            item.replace(target)
    except OSError as e:
        from steadytune.checkpoint import latest_checkpoint
        latest = latest_checkpoint(out)
        kept = f"; {latest.name} is complete and can be resumed" if latest else ""
        raise UserError(describe_os_error(e, f"saving the final adapter in {out}") + kept) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def weights_are_finite(params: list) -> bool:
    with torch.no_grad():
        return all(bool(torch.isfinite(p).all()) for p in params)


def finish_guard(run: Run) -> None:
    """The guard's summary: one metrics.jsonl event and one printed line."""
    if run.is_main:
        run.metrics.write({"event": "guard_summary", "step": run.state.global_step, **run.guard.summary()})
        print(run.guard.summary_text(), flush=True)


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


def data_position(state: TrainerState) -> dict:
    """What a guard snapshot records about the data stream, to rewind it on rollback."""
    return {"epoch": state.epoch, "batch_in_epoch": state.batch_in_epoch, "tokens_seen": state.tokens_seen}


def set_data_position(state: TrainerState, position: dict) -> None:
    state.epoch, state.batch_in_epoch, state.tokens_seen = (position["epoch"], position["batch_in_epoch"],
                                                            position["tokens_seen"])


def run_startup_checks(info, output_dir: Path, force: bool, write: bool) -> None:
    """The same checks `steadytune doctor` runs; error-level findings stop the run unless --force."""
    try:
        from steadytune.doctor import format_findings, has_errors, run_live_checks, write_environment
    except ImportError:
        return
    findings = run_live_checks()
    if write:
        try:
            write_environment(output_dir, info, findings)
        except OSError as e:
            raise UserError(describe_os_error(e, f"output_dir {output_dir}")) from None
    if has_errors(findings):
        message = "start-up checks found errors:\n" + format_findings([f for f in findings if f.severity == "error"])
        if not force:
            raise UserError(message + "\nfix them (see `steadytune doctor`), or pass --force to train anyway")
        print(message + "\n--force given: training anyway", file=sys.stderr)


def print_startup(run: Run) -> None:
    cfg, t, data, world = run.cfg, run.cfg.train, run.data, run.accelerator.num_processes
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * world
    mean_len = sum(len(x["input_ids"]) for x in data.train) / len(data.train)
    lines = [
        f"steadytune train -> {t.output_dir}",
        f"  model        {cfg.model.model_name_or_path} ({cfg.method.finetuning_type}); trainable "
        f"{run.trainable:,} of {run.total:,} parameters ({100 * run.trainable / max(run.total, 1):.3f}%)",
        f"  hardware     {run.info.backend}" + (f", {run.info.primary.name} ({run.info.primary.arch})"
                                               if run.info.primary else "")
        + (f", {world} processes" if world > 1 else ""),
        f"  data         {len(data.train):,} training examples (mean {mean_len:.0f} tokens)"
        + (f", {len(data.eval):,} eval" if data.eval else ""),
        f"  batch        {t.per_device_train_batch_size} x {t.gradient_accumulation_steps} accumulation x {world} "
        f"= {effective} examples (~{effective * mean_len:,.0f} tokens) per step; {run.total_steps} steps",
    ]
    budget = cfg.decisions.get("max_tokens_per_batch", {}).get("value")
    if budget:
        tokens = budget * t.gradient_accumulation_steps * world
        lines[-1] = (f"  batch        {budget:,} tokens x {t.gradient_accumulation_steps} accumulation x {world} = "
                     f"{tokens:,} tokens (~{tokens / mean_len:.0f} examples) per step; {run.total_steps} steps")
    if data.label_names:
        for split in ("train", "eval"):
            counts = data.class_counts.get(split)
            if counts:
                lines.append(f"  {split + ' classes':<12} {counts}; majority baseline {majority_share(counts):.3f}")
        lines.append(f"  class_balance {cfg.data.class_balance}")
    for key, decision in cfg.decisions.items():
        value = decision["value"]
        shown = "" if isinstance(value, (dict, list)) else f"{value}  "
        lines.append(f"  {key:<12} {shown}({decision['reason']})")
    if run.resume_from is not None:
        lines.append(f"  resume       from {run.resume_from}")
    print("\n".join(lines), flush=True)


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
    memory (recomputing costs about a third more compute, worth it only when memory is the limit). An APU's
    memory is what it can map (GTT), not the small carve-out tools print (GPU.budget_gib)."""
    from steadytune.kernels import choose_gradient_checkpointing

    tokens = batches.max_tokens or cfg.train.per_device_train_batch_size * max(batches.lengths)
    budget = info.primary.budget_gib if info.primary is not None else None
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


def should_evaluate(t, step: int, steps_per_epoch: int, total_steps: int) -> bool:
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


def update_best(t, state: TrainerState, results: dict) -> bool:
    """Track metric_for_best_model (`t`: the train section); True when this evaluation is the best so far."""
    name = t.metric_for_best_model
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

