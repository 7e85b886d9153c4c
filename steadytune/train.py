"""`steadytune train`: the fine-tuning recipe, readable top to bottom.

    run_training, the driver:  claim output_dir -> set_up -> fit -> finish
    set_up   a list of phases, each a function below: where to start (fresh, reuse, resume) -> processes and
             sharding -> hardware policy -> tokenizer + data, checked before any weights load -> resume checks ->
             Accelerator + start-up checks -> model + what trains (LoRA, OFT, freeze, full) -> batches and steps ->
             speed plan (static shapes, compile, CUDA graphs, liger, checkpointing) -> optimizer + schedule -> restore
             the checkpoint -> guard. Each phase calls the part that does its work (docs/architecture.md's table).
    fit      the loop: forward on labelled positions, token-normalised accumulation, clip, guard, step, log,
             eval, save; a signal saves a checkpoint at the step boundary and stops
    finish   adapter (or model) + tokenizer + results + plot

An fp16 run that keeps overflowing comes back from `fit` asking for another precision: the driver sets up again
from the checkpoint it saved. The loop is ours, on Accelerate (no transformers.Trainer subclass): Accelerate brings
DDP / FSDP / DeepSpeed and autocast; everything that decides the numbers is visible here. What a stage (sft, pt,
dpo, kto, rm, grpo) does differently comes from its record in stages/table.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import get_scheduler

from steadytune.config import RunConfig, describe_keys, resolve_do_train, save_resolved_config
from steadytune.data.balance import uses_loss_weights
from steadytune.data.prepare import check_data_fits_keys
from steadytune.distributed import launch, nodes, ray_launch, sharding
from steadytune.distributed.collectives import (clip_gradients, reduce_sum, says_for_all_ranks, share_from_main,
                                                 sync_gradients_on_last)
from steadytune.distributed.fsdp_config import read_fsdp_keys
from steadytune.distributed.expert_parallel import check_expert_parallel, install_expert_parallel, plan_expert_parallel
from steadytune.distributed.restore import restore_run, vet_resume
from steadytune.distributed.sequence_parallel import (attach_kernel, check_sequence_parallel,
                                                      packing_for_sequence_parallel, plan_sequence_parallel,
                                                      shard_batch, split_row)
from steadytune.distributed.watchdog import HangWatchdog
from steadytune.distributed.world_resume import layout_of
from steadytune.doctor.environment import run_startup_checks
from steadytune.errors import RunInterrupted, UserError, describe_os_error
from steadytune.evaluate import evaluate_saved
from steadytune.hardware.backend import detect
from steadytune.hardware.error_catalogue import error_text
from steadytune.hardware.error_catalogue import explain_failure as explain_failure   # cli: the likely-cause line
from steadytune.hardware.policy import choose_attention, choose_precision, fallback_precision
from steadytune.hardware.rocm_profile import apply_hardware_profile
from steadytune.infer.card import write_run_card
from steadytune.model.anatomy import text_config
from steadytune.model.attention import eager_only_reason, plan_packing
from steadytune.model.linear_attention import kernel_choice as linear_attention_kernels
from steadytune.model.load import (adopt_model, load_model_and_tokenizer, load_tokenizer, model_config_before_loading,
                                   model_skeleton)
from steadytune.model.lora import count_parameters
from steadytune.model.moe.routing import routing_of
from steadytune.model.quantize import is_quantized, keep_training_layout, plan_quantization, record_quantization
from steadytune.model.trainable import continues_adapter, make_trainable
from steadytune.report.record import write_data_stats, write_run_report
from steadytune.stages.base import Stage, StepAhead
from steadytune.stages.guard_rules import guard_for
from steadytune.stages.objectives import pop_metrics
from steadytune.stages.table import STAGES
from steadytune.training.batches import (Steps, TrainBatches, Windows, plan_steps, to_device, token_budget,
                                         uses_token_budget)
from steadytune.training.checkpoint import (TrainerState, data_position, list_checkpoints, save_checkpoint,
                                            save_final_outputs, set_data_position)
from steadytune.training.evaluation import should_evaluate, update_best
from steadytune.training.experts import expert_load_log, pop_routing_metrics, set_up_experts
from steadytune.training.faults import FaultInjector
from steadytune.training.fp8_training import convert_to_fp8, plan_fp8_training
from steadytune.training.graphs import describe_recording, graph_runner_for
from steadytune.training.guard import (ABORT, FP16_OVERFLOW, ROLLBACK, GuardAbort, LiveObjects, NumericalGuard,
                                       weights_are_finite)
from steadytune.training.long_context import check_offloading_before_loading, check_tiling_before_loading
from steadytune.training.lora_budget import check_adapter_fits
from steadytune.training.monitor import MetricsLog, Throughput, plot_loss, step_record
from steadytune.training.optimizers import (build_optimizer, check_optimizer_installed,
                                            check_optimizer_keys_before_loading, chosen_optimizer, may_train,
                                            refuse_with_sharding)
from steadytune.training.folder_config import load_config_named
from steadytune.training.resume import resume_fingerprint
from steadytune.training.run_folder import RunFolder, StartPlan, write_json_atomic
from steadytune.training.speed_plan import (apply_speed_plan, checkpoint_after_graph_oom, choose_base_dtype,
                                             undo_speed_plan)
from steadytune.training.startup import startup_lines
from steadytune.training.stopping import RunPruned, StopRequests
from steadytune.training.trackers import Trackers
from steadytune.training.vision_data import (
    STAGES_WITH_MEDIA,
    load_vision_processor,
    prepare_with_media,
    vision_collator,
)
from steadytune.training.vision_keepalive import keep_vision_tower_in_step


class NonFiniteRun(UserError):
    """The run ended with NaN/inf: no adapter was written."""
    exit_code = 4


@dataclass
class TrainResult:
    output_dir: Path
    global_step: int
    final_loss: float | None
    train_seconds: float
    tokens_per_s: float               # target (labelled) tokens per second
    losses: list[float] = field(default_factory=list)
    exit_code: int = 0
    input_tokens_per_s: float = 0.0   # real (non-pad) tokens processed per second
    model: Any = None                 # the trained model, still in memory (demo scores it without reloading)


# ---------------------------------------------------------------------------------------------------------
# The command: `steadytune train CONFIG [key=value ...]`
# ---------------------------------------------------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="run config (YAML, LLaMA-Factory keys)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override config keys, e.g. learning_rate=5e-5 max_samples=2000 guard.window=20")
    parser.add_argument("--force", action="store_true",
                        help="train even when the start-up hardware checks report errors")
    parser.add_argument("--list-keys", action="store_true", help="print every config key with its default and help")
    parser.add_argument("--nproc", metavar="N",
                        help="start N training processes, one per GPU (a number, or auto = every visible GPU), "
                             "through torch.distributed.run: DDP, or DeepSpeed / FSDP2 when the config asks for them "
                             "(with --nnodes: processes on this node; NPROC_PER_NODE)")
    launch.add_launch_arguments(parser)


def run(args) -> int:
    if args.list_keys:
        print(describe_keys())
        return 0
    if args.config is None:
        raise UserError("steadytune train needs a config file: steadytune train my_run.yaml [key=value ...] "
                        "(see `steadytune train --list-keys`, or `steadytune demo` for the embedded default)")
    cfg = load_config_named(args.config, args.overrides)   # a run folder's run_config.yaml grants nothing
    if not resolve_do_train(cfg):
        # do_train: false (or unset with no dataset), as LLaMA-Factory's predict files: evaluate the adapter in
        # adapter_name_or_path on eval_dataset (do_predict + predict_with_generate: generated answers, BLEU/ROUGE).
        evaluate_saved(cfg, batch_size=cfg.train.per_device_eval_batch_size)
        return 0
    if ray_launch.ray_requested(os.environ) and not launch.under_launcher():   # LLaMA-Factory's USE_RAY=1
        return ray_launch.launch_on_ray(ray_launch.plan_ray(cfg.train), args.config, args.overrides, args.force)
    if cfg.train.ray_num_workers > 1 and not launch.under_launcher():
        print(f"note: ray_num_workers: {cfg.train.ray_num_workers} is read with USE_RAY=1 only (as LLaMA-Factory); "
              "this run starts without Ray", file=sys.stderr, flush=True)
    plan = launch.plan_launch(args, os.environ, launch.visible_gpus())
    if plan is not None:   # --nproc / --nnodes / LLaMA-Factory's FORCE_TORCHRUN: this process becomes the launcher
        return launch.launch(plan, args.config, args.overrides, args.force, cfg.train.output_dir)
    hint = launch.several_gpus_hint(args.config, launch.visible_gpus())
    if hint:
        print(hint, file=sys.stderr, flush=True)
    result = run_training(cfg, force=args.force)
    if result.exit_code == 0 and (cfg.train.do_eval or cfg.train.do_predict):
        # LLaMA-Factory's do_eval / do_predict: evaluate what was just trained, as `steadytune eval` would (sft:
        # label scoring or generation; dpo/kto/rm: their loss and reward metrics on the eval split).
        evaluate_saved(cfg, batch_size=cfg.train.per_device_eval_batch_size)
        write_run_report(cfg.train.output_dir, announce=False)  # again, with the evaluation's results
    if result.exit_code == 0:
        launch.close_process_group()
        launch.leave_finished_rank(0)
    return result.exit_code


# ---------------------------------------------------------------------------------------------------------
# The driver: set up, fit, finish (again from the checkpoint after a precision switch)
# ---------------------------------------------------------------------------------------------------------

def run_training(cfg: RunConfig, force: bool = False, progress: bool = True, model=None,
                 on_evaluate=None) -> TrainResult:
    """`model`: the base model already loaded by the caller (demo scores it zero-shot first), trained in place
    instead of loaded again; it must be the model cfg names, as load_for_inference loaded it. `on_evaluate(step,
    total_steps, results) -> bool`: called after each evaluation (steadytune tune's pruner); True stops the run there
    (RunPruned, status pruned)."""
    # Rank from the launcher's environment too: a CPU run under torchrun that Accelerate does not treat as
    # distributed must still have one process, rank 0, own the folder.
    processes = sharding.process_state(cfg)   # rank and world size (DeepSpeed / FSDP need a process group even alone)
    layout = nodes.node_layout()              # which node, how many, which restart attempt (torchrun's environment)
    folder = RunFolder(Path(cfg.train.output_dir), main_process=processes.is_main_process and layout.rank == 0)
    folder.claim()  # usable folder, lock taken
    stop = StopRequests().install()
    try:
        nodes.start_nodes(cfg, folder, layout, processes.device)
        while True:
            run = set_up(cfg, folder, stop, force, progress, model)
            run.on_evaluate = on_evaluate
            model = None  # a precision switch sets up again from the checkpoint, with freshly loaded weights
            outcome = fit(run)
            if outcome.new_precision is None:
                return finish(run, outcome)
            # fp16 kept overflowing: fit saved the last good state; continue from it in bf16 or fp32.
            resume_in_precision(cfg, outcome)
    except BaseException as error:
        # A collective that failed because another process died: this process stops with one line (the elastic
        # agent restarts the job, which resumes from the last complete checkpoint), not with gloo's traceback.
        lost = nodes.lost_peer(error, layout)
        if not folder.started_steps:
            folder.undo_failed_start()  # a failed start leaves output_dir as it found it
        else:
            folder.record(status=status_of(lost or error), error=error_text(lost or error))   # doctor --from reads it
            if folder.main:
                write_run_report(folder.path)  # it shows where and why the run stopped
        if lost is not None:
            raise lost from None
        raise
    finally:
        stop.restore()
        folder.release()


def resume_in_precision(cfg: RunConfig, outcome: Outcome) -> None:
    """The config for setting up again after fp16 kept overflowing: the fallback precision, from the checkpoint fit
    saved, the switch recorded as a decision."""
    cfg.train.fp16 = False
    cfg.train.bf16 = outcome.new_precision == "bf16"
    cfg.train.resume_from_checkpoint = str(outcome.checkpoint)
    cfg.decide("precision_switch", outcome.new_precision,
               f"fp16 overflowed repeatedly; resumed from {outcome.checkpoint} in {outcome.new_precision}")


def status_of(error: BaseException) -> str:
    """The status the run folder's manifest records for the error that ended the run."""
    if isinstance(error, GuardAbort):
        return "aborted"
    if isinstance(error, (RunInterrupted, KeyboardInterrupt, nodes.PeerLost)):
        return "interrupted"
    if isinstance(error, RunPruned):
        return "pruned"
    return "failed"


@dataclass
class Run:
    """Everything the loop works with: built by set_up, read by fit and finish."""
    cfg: RunConfig
    folder: RunFolder                 # output_dir, claimed: folder.path is where everything is written
    stop: StopRequests
    info: Any                         # hardware.backend.HardwareInfo
    precision: str
    accelerator: Any
    tokenizer: Any
    data: Any
    objective: torch.nn.Module        # the model and its stage's loss, as Accelerate prepared it
    params: list                      # the trainable parameters (sharded ones under FSDP2)
    optimizer: Any
    scheduler: Any
    batches: TrainBatches
    steps: Steps                      # how the data is cut into optimizer steps (training/batches.py)
    state: TrainerState               # progress counters, saved in every checkpoint
    metrics: MetricsLog
    guard: NumericalGuard
    faults: FaultInjector
    live: LiveObjects                 # the live objects guard snapshots copy and rollbacks restore
    trainable: int
    total: int
    resume_from: Path | None
    progress: bool
    trackers: Trackers
    sharding: Any                     # distributed.sharding.ShardingPlan: none, DDP, DeepSpeed ZeRO or FSDP2
    graphs: Any = None                # training.graphs.GraphRunner when CUDA graphs are on (hardware/speed.py)
    watchdog: Any = None              # distributed.watchdog.HangWatchdog
    on_evaluate: Any = None           # run_training's evaluation hook
    expert_load: Any = None           # a mixture of experts' expert_load.jsonl (training/experts.py)
    sequence_parallel: Any = None     # distributed.sequence_parallel.SequenceParallel (cp_size > 1)

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def stage(self) -> Stage:
        return STAGES[self.cfg.method.stage]

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def model(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.objective).model

    @property
    def total_steps(self) -> int:
        return self.steps.total

    def save_checkpoint(self, keep: set[str] | None = None, alone: bool = False) -> Path:
        """checkpoint-N/ of the current state (written by the main process; every process calls this, since under
        sharding the state is first gathered from all ranks). `alone`: the hang watchdog's rescue, on the main
        process only, without collectives (only where the main process holds the whole state)."""
        path = self.folder.path / f"checkpoint-{self.state.global_step}"
        if self.watchdog is not None and not alone:
            self.watchdog.beat(self.state.global_step, "save")
        model, optimizer = (self.model, self.optimizer) if alone else sharding.gather_for_save(
            self.sharding, self.accelerator, self.objective, self.model, self.optimizer)
        if self.is_main:
            self.state.extra.update(guard=self.guard.state_dict(), faults=self.faults.state_dict())
            try:
                path = save_checkpoint(self.folder.path, model, optimizer, self.scheduler,
                                       self.state, self.cfg.train.save_total_limit, keep,
                                       scaler=self.accelerator.scaler)
            finally:
                self.folder.record()
        if not alone:
            self.accelerator.wait_for_everyone()
        return path

    def rescue_checkpoint(self) -> str:
        """What the hang watchdog saves: the last finished step, when this process holds the whole state."""
        path = self.save_checkpoint(alone=True)
        return f"saved {path} (the last finished step); rerun the same command to resume from it"


@dataclass
class Outcome:
    """What fit hands back: the step losses and the time; when fp16 kept overflowing, the precision to continue in
    and the checkpoint to continue from."""
    losses: list[float]
    train_seconds: float
    new_precision: str | None = None
    checkpoint: Path | None = None
    input_tokens: int = 0


# ---------------------------------------------------------------------------------------------------------
# Set-up: one function per phase, in the order they run
# ---------------------------------------------------------------------------------------------------------

def set_up(cfg: RunConfig, folder: RunFolder, stop: StopRequests, force: bool, progress: bool,
           preloaded=None) -> Run:
    """Every phase before the loop, in the order they run; -> the Run that fit and finish work with."""
    stage = STAGES[cfg.method.stage]  # what sft, dpo, kto, rm do differently: data, batches, model kind, objective
    # Where to start, on how many processes; what can be refused without loading anything is refused here.
    start = plan_start(cfg, folder)
    world, shard_plan = sharding.plan_processes(cfg)
    check_layout_before_loading(cfg, world)   # cp_size, ep_size, sequence_tiling on the model's config and skeleton
    check_optimizer_installed(cfg)   # a missing optimizer library stops here, before any loading
    check_optimizer_keys_before_loading(cfg, stage.model_task)   # on the model's meta skeleton
    # The hardware plan, the data, the checkpoints a resume may use, then Accelerate and the start-up checks: all
    # before any weights load, so a bad key, file or machine costs seconds, not a model load.
    info, precision, attn, packing = choose_hardware(cfg)
    check_offloading_before_loading(cfg, info.backend, fsdp=read_fsdp_keys(cfg.train) is not None)
    fp8 = plan_fp8_training(cfg.train, cfg.method, cfg.model, info.backend, info.primary.arch if info.primary else None)
    tokenizer, data = load_data(cfg, stage)
    resume_candidates = vet_resume(cfg, start.resume_candidates, world,
                                   token_budget=uses_token_budget(cfg, packing))
    accelerator, trackers = start_accelerator(cfg, folder, shard_plan, precision, info, world, force)
    # The model and what trains, then how it is spread over the processes.
    compute_dtype = plan_quantization(cfg, info, precision, shard_plan)
    model, tokenizer = build_model(cfg, stage, preloaded, tokenizer, precision, attn, shard_plan, accelerator,
                                   compute_dtype)
    if fp8 is not None:   # LLaMA-Factory's fp8: the linear layers through torchao's float8 matmuls
        cfg.decide("fp8", f"{convert_to_fp8(model, fp8)} linear layers", fp8.why)
    trainable, total = count_parameters(model)
    set_up_experts(cfg, model, accelerator.device, precision)  # a mixture of experts (model/moe/)
    ep = plan_expert_parallel(cfg, accelerator.num_processes, accelerator.process_index, model)
    if ep is not None:   # each process keeps its slice of the routed experts (distributed/expert_parallel.py)
        install_expert_parallel(model, ep, cfg.train.moe_grouped_mm)
    sp = plan_sequence_parallel(cfg, accelerator.num_processes, accelerator.process_index, text_config(model))
    if sp is not None:
        attach_kernel(sp, accelerator.device, cfg.decide)
    # Batches and steps, the speed plan that fits them, the optimizer, then the checkpoint to continue from.
    batches, steps = plan_batches(cfg, folder, stage, data, tokenizer, packing, accelerator, model, sp)
    speed = apply_speed_plan(cfg, model, info, precision, packing, batches, accelerator.num_processes,
                             steps.total * cfg.train.gradient_accumulation_steps, shard_plan,
                             fsdp=read_fsdp_keys(cfg.train) is not None)
    objective, params, optimizer, scheduler = make_optimizer(cfg, stage, model, steps, shard_plan, accelerator)
    keep_vision_tower_in_step(accelerator.unwrap_model(objective), model, data, accelerator.num_processes,
                              shard_plan.shards_parameters, cfg.decide)
    state, resume_from = restore_run(cfg, resume_candidates, objective, accelerator.unwrap_model(objective).model,
                                     optimizer, scheduler, accelerator.scaler, shard_plan, world, batches.max_tokens)
    # What watches the loop: metrics, the numerical guard, the hang watchdog.
    metrics = MetricsLog(folder.path / "metrics.jsonl", enabled=accelerator.is_main_process)
    guard, faults, live = make_guard(cfg, info, precision, metrics, accelerator, objective, optimizer, scheduler,
                                     state, resumed=resume_from is not None)
    run = Run(cfg=cfg, folder=folder, stop=stop, info=info, precision=precision, accelerator=accelerator,
              tokenizer=tokenizer, data=data, objective=objective, params=params, optimizer=optimizer,
              scheduler=scheduler, batches=batches, steps=steps, state=state, metrics=metrics, guard=guard,
              faults=faults, live=live, trainable=trainable, total=total, resume_from=resume_from, progress=progress,
              trackers=trackers, sharding=shard_plan, sequence_parallel=sp)
    run.watchdog = make_watchdog(run)
    run.expert_load = expert_load_log(folder.path, model, accelerator.is_main_process)
    if speed.cuda_graphs:
        run.graphs = make_graph_runner(run)
    if run.is_main:
        print("\n".join(startup_lines(cfg, info, data, accelerator.num_processes, accelerator.process_index,
                                      trainable, total, steps.total, accelerator.num_processes > 1 or
                                      shard_plan.kind != "single", run.watchdog.describe(), resume_from)), flush=True)
    return run


def plan_start(cfg: RunConfig, folder: RunFolder) -> StartPlan:
    """Fresh, over an earlier run, or from a checkpoint (training/run_folder.py); the main process decides."""
    t = cfg.train
    plan = share_from_main(folder.plan_start(t.overwrite_output_dir, t.resume_from_checkpoint, list_checkpoints))
    if plan.message:
        cfg.decide("start", plan.mode, plan.message)
    return plan


def check_layout_before_loading(cfg: RunConfig, world: int) -> None:
    """cp_size, ep_size and sequence_tiling against the process count, the keys and the model's config (its meta
    skeleton), before any weights load; plan_sequence_parallel, plan_expert_parallel and the speed plan check again
    on the loaded model."""
    t = cfg.train
    if t.cp_size > 1:
        config = model_config_before_loading(cfg.model)
        check_sequence_parallel(cfg, world, text_config(config) if config is not None else None)
    if t.ep_size > 1 or t.sequence_tiling:
        skeleton = model_skeleton(cfg.model, STAGES[cfg.method.stage].model_task)
        check_expert_parallel(cfg, world, skeleton)
        check_tiling_before_loading(cfg, skeleton, fsdp=read_fsdp_keys(t) is not None)


def choose_hardware(cfg: RunConfig):
    """The hardware policy: dtype, attention and packing chosen in one place, each recorded with its reason."""
    t = cfg.train
    info = detect()
    precision, precision_why = choose_precision(info, t.bf16, t.fp16)
    attn, attn_why = choose_attention(info, cfg.model.flash_attn)
    cfg.decide("precision", precision, precision_why)
    cfg.decide("attn_implementation", attn, attn_why)
    eager_only = eager_only_reason(cfg.model.model_name_or_path)   # gpt-oss: no SDPA path in transformers
    if eager_only:
        attn = "eager"
        cfg.decide("attn_implementation", attn, eager_only)
    # Packing needs its own attention (examples kept apart), so it is chosen before the model is loaded.
    packing = plan_packing(cfg, info, class_weighted_loss=uses_loss_weights(cfg.data.class_balance),
                           eager_only=eager_only)
    # cp_size > 1: one row a micro-batch, its attention across the processes
    packing = packing_for_sequence_parallel(cfg, packing)
    if packing is not None:
        attn = packing.attn_implementation
    # Stability defaults of the hardware profile (seed 000 on ROCm), only where the user set nothing.
    apply_hardware_profile(cfg, info.backend)
    if t.ddp_timeout > 3 * 3600 and "ddp_timeout" not in cfg.decisions:
        cfg.decide("ddp_timeout", t.ddp_timeout, "kept as asked; note that a huge timeout turns an RCCL/NCCL hang "
                   "into a silent multi-day stall (the default is 1800 s)")
    return info, precision, attn, packing


def load_data(cfg: RunConfig, stage: Stage):
    """Data before weights: a bad file, key or column stops here, not after minutes of loading."""
    tokenizer = load_tokenizer(cfg.model)
    processor = load_vision_processor(cfg, tokenizer) if stage.name in STAGES_WITH_MEDIA else None   # a VLM's images
    data = (prepare_with_media(stage.prepare_data, cfg, tokenizer, processor) if processor is not None
            else stage.prepare_data(cfg, tokenizer))
    if not data.train:
        raise UserError(f"dataset {cfg.data.dataset!r}: no training examples left after filtering")
    warning = check_data_fits_keys(cfg, data)
    if warning and says_for_all_ranks():
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    return tokenizer, data


def start_accelerator(cfg: RunConfig, folder: RunFolder, shard_plan, precision: str, info, world: int, force: bool):
    """Accelerate (with the report_to trackers), the seed, and the same checks `steadytune doctor` runs."""
    t = cfg.train
    trackers = Trackers(t.report_to, folder.path, t.logging_dir, t.run_name)
    accelerator = sharding.make_accelerator(cfg, shard_plan, precision, info, world, log_with=trackers.log_with())
    set_seed(t.seed)
    run_startup_checks(info, folder.path, force=force, write=accelerator.is_main_process, precision=precision)
    return accelerator, trackers


def build_model(cfg: RunConfig, stage: Stage, preloaded, tokenizer, precision: str, attn: str, shard_plan,
                accelerator, compute_dtype: torch.dtype | None = None):
    """The base model (in the compute dtype) with LoRA attached, or an existing adapter to continue, or every
    weight open for full fine-tuning. `compute_dtype`: a quantised base's (plan_quantization)."""
    # Frozen base weights in the compute dtype halve memory (unless lora_base_dtype keeps an fp32 copy);
    # trainable (LoRA) weights stay fp32 so small updates are not rounded away (attach_adapter casts them).
    base_dtype = choose_base_dtype(cfg, precision)
    if preloaded is not None:
        model = adopt_model(preloaded, base_dtype, attn, accelerator.device)
    else:
        model, tokenizer = load_model_and_tokenizer(cfg.model, torch_dtype=base_dtype, attn_implementation=attn,
                                                    device=sharding.model_device(shard_plan, accelerator),
                                                    tokenizer=tokenizer, task=stage.model_task,
                                                    compute_dtype=compute_dtype)
    if is_quantized(model):
        record_quantization(model, cfg.model, str(compute_dtype).replace("torch.", ""), cfg.decide)
        keep_training_layout(model)   # evaluations during training must not repack the weights for inference
    if cfg.method.finetuning_type == "lora" and not continues_adapter(cfg):
        check_adapter_fits(model, cfg.method)   # a huge lora_rank is one line, not the allocator's traceback
    kernels = linear_attention_kernels(model.config, accelerator.device.type)   # Qwen3.5 / Qwen3-Next
    if kernels:
        cfg.decide("linear_attention", *kernels)
    model = make_trainable(model, cfg, base_dtype, save_start=accelerator.is_main_process)   # model/trainable.py
    sharding.match_trainable_dtype(shard_plan, model, precision, cfg)
    return model, tokenizer


def plan_batches(cfg: RunConfig, folder: RunFolder, stage: Stage, data, tokenizer, packing, accelerator, model=None,
                 sp=None):
    """Micro-batches (token budget, packed or padded) and how many optimizer steps they make. With sequence
    parallelism (`sp`) the data-parallel groups take turns, each group's processes the same micro-batches."""
    t = cfg.train
    world, rank = (sp.dp_size, sp.dp_rank) if sp is not None else (accelerator.num_processes,
                                                                  accelerator.process_index)
    lengths = [len(x["input_ids"]) for x in data.train]
    budget, budget_why = token_budget(t, lengths, packing_asked=uses_token_budget(cfg, packing),
                                      asked=bool(cfg.data.packing or cfg.data.neat_packing))
    if budget_why:
        cfg.decide("max_tokens_per_batch", budget, budget_why)
    packing_attention = packing.attention if packing is not None else None
    batches = TrainBatches(cfg, data, tokenizer, world, rank, packing_attention=packing_attention, max_tokens=budget,
                           collate=vision_collator(cfg, data, tokenizer, packing_attention, model,
                                                   stage.make_collator(cfg, tokenizer, packing_attention)),
                           token_mask=routing_of(model) is not None)
    steps = plan_steps(cfg, batches.batches_per_epoch(), len(data.train), world, budget)
    if accelerator.is_main_process:  # for the report: lengths, truncation, batching efficiency
        write_data_stats(folder.path, data, batches.micro_batches(0), packing_attention, cfg.data.cutoff_len)
    return batches, steps


def make_optimizer(cfg: RunConfig, stage: Stage, model, steps: Steps, shard_plan, accelerator):
    """The optimizer (training/optimizers.py: AdamW unless a key chooses another) and the schedule; the stage's
    objective (model + loss) prepared by Accelerate for the sharding."""
    t = cfg.train
    refuse_with_sharding(cfg, shard_plan.sharded, shard_plan.label)
    trainable = may_train(model)   # before BAdam, which switches requires_grad block by block
    optimizer, why = build_optimizer(model, cfg, accelerator.device.type)   # training/optimizers.py
    cfg.decide("optimizer", chosen_optimizer(cfg), why)
    scheduler = get_scheduler(t.lr_scheduler_type, optimizer, num_warmup_steps=steps.warmup,
                              num_training_steps=steps.total)
    sharding.fit_to_model(accelerator, shard_plan, model, cfg)
    objective, optimizer = sharding.prepare_objective(accelerator, shard_plan, stage.make_objective(model, cfg),
                                                      optimizer)
    sharding.keep_sharded_on_cpu(accelerator, shard_plan)
    # FSDP2 replaces the parameters with sharded ones: clipping and the guard must see those.
    params = [p for p in accelerator.unwrap_model(objective).parameters() if p.requires_grad] \
        if shard_plan.sharded else trainable
    return objective, params, optimizer, scheduler


def make_guard(cfg: RunConfig, info, precision: str, metrics: MetricsLog, accelerator, objective, optimizer,
               scheduler, state: TrainerState, resumed: bool):
    """The numerical guard with its stage's spike rules (stages/guard_rules.py) and the fault injector
    (training/faults.py): every action is a metrics.jsonl event."""
    guard = guard_for(cfg, precision, fallback_precision(info), metrics.write,
                      saved=state.extra.get("guard") if resumed else None)
    faults = FaultInjector(cfg.fault_injection, emit=metrics.write, rank=accelerator.process_index)
    if resumed:
        faults.load_state_dict(state.extra.get("faults", {}))
    live = LiveObjects(model=accelerator.unwrap_model(objective).model, optimizer=optimizer, scheduler=scheduler,
                       scaler=accelerator.scaler, data_position=data_position(state))
    return guard, faults, live


def make_watchdog(run: Run) -> HangWatchdog:
    """The hang watchdog (distributed/watchdog.py). The main process may rescue a checkpoint when it holds the whole
    state (one process or DDP); sharded state cannot be gathered while a collective hangs."""
    def on_hang(message: str) -> None:
        if run.is_main:
            run.metrics.write({"event": "hang", "step": run.state.global_step, "message": message})
            run.folder.record(status="hung")
            run.folder.release()

    return HangWatchdog(run.folder.path, run.accelerator.process_index, run.accelerator.num_processes,
                        run.cfg.train.hang_timeout, on_hang=on_hang,
                        rescue=run.rescue_checkpoint if run.is_main and not run.sharding.sharded else None)


def make_graph_runner(run: Run):
    """CUDA graphs for the run's micro-batches (training/graphs.py): recorded on the first one; what happened goes
    to metrics.jsonl and the console. Out of memory while recording turns gradient checkpointing on and tries
    again."""
    def report(event: dict) -> None:
        if run.is_main:
            run.metrics.write({**event, "step": run.state.global_step})
            print(describe_recording(event), flush=True)

    return graph_runner_for(run.accelerator.unwrap_model(run.objective), run.model, run.params, run.device,
                            run.precision, report, lambda: checkpoint_after_graph_oom(run.cfg, run.model))


# ---------------------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------------------

@dataclass
class LoopState:
    """The loop's running values, in one place so that a rollback can rewind them together."""
    windows: Windows                  # the steps' micro-batches, with a look at the next step's
    losses: list[float] = field(default_factory=list)
    window_loss: float = 0.0
    window_steps: int = 0
    first_step: int = 0


def fit(run: Run) -> Outcome:
    """The loop, from the run's current step to its last: one optimizer step a pass, judged by the guard before its
    update, then logged, evaluated and saved as the keys ask."""
    t, state, guard, faults = run.cfg.train, run.state, run.guard, run.faults
    begin_steps(run)
    loop = LoopState(Windows(run.batches.stream(state.epoch, state.batch_in_epoch), t.gradient_accumulation_steps),
                     first_step=state.global_step)
    throughput = Throughput(run.device)
    input_tokens = 0
    started = time.perf_counter()
    bar = tqdm(total=run.total_steps, initial=state.global_step, desc="train", dynamic_ncols=True,
               disable=not (run.progress and run.is_main))
    guard.maybe_snapshot(state.global_step, run.live)  # guard: the starting state is the first good state
    run.stop.in_loop = True
    run.watchdog.start()  # a step that stalls past hang_timeout stops the run with every rank's stacks on disk
    if t.eval_on_start and state.global_step == 0 and run.data.eval:  # a resumed run has its step-0 row already
        evaluate_now(run)
    try:
        while state.global_step < run.total_steps:
            run.watchdog.beat(state.global_step + 1)
            if stop_requested(run):
                interrupt(run, loop, started)
            step = state.global_step + 1  # the optimizer step being computed (faults and guard events use it)
            # One optimizer step = gradient_accumulation_steps micro-batches. The loss is normalised by the target
            # tokens of the whole window (summed over ranks), so every token weighs the same however the
            # micro-batches are cut.
            window = loop.windows.take()  # short at an epoch's end
            window_ids = [i for mb in window for i in mb.ids]
            if guard.should_skip(window_ids):  # guard: a batch that caused a rollback is not replayed
                continue
            faults.begin_step(step)
            # grpo's asynchronous roll-outs generate the next step's completions while this one trains
            upcoming = loop.windows.peek if step < run.total_steps else None
            loss_value, grad_norm, global_tokens = forward_backward(run, window, step, upcoming)

            # --- numerical guard: judge the step before its update is applied (training/guard.py) --------------------
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
            groups = run.sequence_parallel.dp_size if run.sequence_parallel else run.accelerator.num_processes
            window_inputs = sum(mb.n_input_tokens for mb in window) * groups
            throughput.add(window_inputs, global_tokens)
            input_tokens += window_inputs
            loop.losses.append(loss_value)
            loop.window_loss += loss_value
            loop.window_steps += 1
            bar.update(1)

            if state.global_step % t.logging_steps == 0 or state.global_step == run.total_steps:
                record = step_record(state.global_step, run.steps.per_epoch, loop.window_loss / loop.window_steps,
                                     grad_norm, run.scheduler.get_last_lr()[0], state.tokens_seen, throughput,
                                     **pop_metrics(run.objective, run.accelerator),  # dpo/kto/rm: rewards/chosen, ...
                                     **pop_routing_metrics(run.model, run.accelerator, run.expert_load,
                                                           state.global_step))
                run.metrics.write(record)
                run.trackers.log(record)
                # The bar shows input tokens/s (what the hardware processes; metrics.jsonl has both).
                bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}",
                                in_tok_s=f"{record['input_tokens_per_s']:.0f}", guard=guard.event_count)
                loop.window_loss, loop.window_steps = 0.0, 0

            new_best = False
            if should_evaluate(t, state.global_step, run.steps.per_epoch, run.total_steps) and run.data.eval:
                run.watchdog.beat(state.global_step, "eval")
                results = evaluate_now(run)
                new_best = update_best(t, state, results)
                if run.on_evaluate is not None and run.on_evaluate(state.global_step, run.total_steps, results):
                    raise RunPruned(f"stopped after the evaluation at step {state.global_step} of {run.total_steps}")
            # A new best (metric_for_best_model) is saved at once, so best_checkpoint always names a folder that exists.
            if (state.global_step % t.save_steps == 0 and state.global_step < run.total_steps) or new_best:
                run.save_checkpoint(keep={state.best_checkpoint} if state.best_checkpoint else set())
    finally:
        run.watchdog.stop()
        run.stop.in_loop = False
        loop.windows.close()
        bar.close()
    return Outcome(loop.losses, time.perf_counter() - started, input_tokens=input_tokens)


def begin_steps(run: Run) -> None:
    """The run is really starting: its config and manifest go into output_dir, a resumed log is cut back to its
    checkpoint, and from here on a failure keeps the folder (it may hold checkpoints worth resuming)."""
    # metrics.jsonl and any log of the stage's objective (grpo's completions.jsonl): each cut back on resume, and
    # listed in the manifest before its first line is written (a kill may follow)
    logs = [run.metrics, *([run.expert_load] if run.expert_load is not None else []),
            *getattr(run.accelerator.unwrap_model(run.objective), "run_logs", ())]
    if run.is_main:
        out = run.folder.path
        run.state.extra["config"] = resume_fingerprint(run.cfg)
        # How steps are cut here, so that a resume on another number of processes keeps the same steps.
        run.state.extra["layout"] = layout_of(run.cfg, run.accelerator.num_processes, run.batches.max_tokens)
        if run.resume_from is not None:
            for log in logs:
                log.truncate_after(run.state.global_step)
            run.metrics.event("resume", run.state.global_step, checkpoint=str(run.resume_from))
        try:
            save_resolved_config(run.cfg, out / "run_config.yaml")
        except OSError as e:
            raise UserError(describe_os_error(e, f"output_dir {out}")) from None
        if run.faults.active:
            print(run.faults.describe(), flush=True)
    run.folder.started_steps = True
    run.folder.expect([log.path.name for log in logs])
    run.folder.record(status="running", command=" ".join(sys.argv))
    run.trackers.start(run.accelerator, run.cfg.to_dict())


def stop_requested(run: Run) -> bool:
    """A signal reached this process (or, with several processes, any of them)."""
    asked = run.stop.requested is not None
    if run.accelerator.num_processes > 1:
        with run.watchdog.waiting(run.state.global_step + 1, "the stop-request all-reduce"):
            asked = bool(reduce_sum(run.accelerator, int(asked), run.device))
    return asked


def interrupt(run: Run, loop: LoopState, started: float) -> None:
    """Save where the run is (a step boundary) and stop with the signal's exit code."""
    signum = run.stop.requested or signal.SIGTERM
    checkpoint = run.save_checkpoint()
    finish_guard(run)
    steps = run.state.global_step
    raise RunInterrupted(signum, f"stopped by {signal.Signals(signum).name} at step {steps} of {run.total_steps} "
                                 f"after {time.perf_counter() - started:.0f} s; saved {checkpoint}; run the same "
                                 "command again to continue (the unfinished run resumes from its last checkpoint)")


def forward_backward(run: Run, window: list, step: int, upcoming=None) -> tuple[float, torch.Tensor, int]:
    """Forward and backward over one accumulation window; -> (loss per unit, gradient norm, target tokens of the
    window summed over ranks). The loss unit is the stage's: a target token (sft, pt), a pair (dpo, rm), an
    answer (kto). `upcoming`: the next step's window, for a stage that prepares it during this one (None: the last
    step)."""
    accelerator = run.accelerator
    settle = None
    if run.stage.roll_out is not None:  # grpo: the step's completions are generated and scored first (stages/grpo.py)
        ahead = StepAhead(upcoming, accelerator.autocast, run.device, run.data.train)
        settle = run.stage.roll_out(accelerator.unwrap_model(run.objective), window, step, ahead)
    try:
        result = _forward_backward(run, window, step)
    except BaseException:
        if settle is not None:
            settle(abandon=True)   # the next step's roll-out, if one runs, is waited for and dropped
        raise
    # grpo's roll-out of the next step, running since the forward started, is finished and scored here, on the
    # weights it was generated with: before the optimizer changes them
    if settle is not None:
        settle()
    return result


def _forward_backward(run: Run, window: list, step: int) -> tuple[float, torch.Tensor, int]:
    accelerator, faults, sp = run.accelerator, run.faults, run.sequence_parallel
    # sequence parallelism: each process its slice of every micro-batch's row, and the row's examples for attention
    pad = run.tokenizer.pad_token_id or 0
    pieces = [shard_batch(mb.batch, sp, pad) if sp is not None else (mb.batch, None, 0) for mb in window]
    local_units = sum(run.stage.count_units(batch) for batch, _, _ in pieces)
    # A hang report tells ranks that wait for the others from one that stalled, and names the collective.
    with run.watchdog.waiting(step, "the token-count all-reduce"):
        global_tokens = reduce_sum(accelerator, local_units, run.device)
        target_tokens = global_tokens if run.stage.count_tokens is None else reduce_sum(
            accelerator, sum(run.stage.count_tokens(mb.batch) for mb in window), run.device)
    step_loss = torch.zeros((), device=run.device)
    run.objective.train()
    flat = run.sharding is not None and run.sharding.flat_gradients
    # DDP, FSDP and DeepSpeed average gradients over the ranks, so the loss is scaled by the world size to make that
    # a sum over all tokens; the flat all-reduce sums them already.
    ranks_averaged = 1 if flat else accelerator.num_processes
    for i, (cpu_batch, docs, length) in enumerate(pieces):
        if run.graphs is not None and run.graphs.takes(cpu_batch):
            # The whole forward + backward replayed from a CUDA graph (training/graphs.py): no collective inside it.
            step_loss += run.graphs(cpu_batch, 1.0 / max(global_tokens, 1))
            continue
        batch = to_device(cpu_batch, run.device)
        split = split_row(sp, docs, length) if sp is not None else contextlib.nullcontext()
        with split, sync_gradients_on_last(accelerator, run.objective, i == len(window) - 1, run.sharding):
            with accelerator.autocast():
                loss_sum, _ = run.objective(batch)
            if i == 0:
                loss_sum = faults.corrupt_loss(step, loss_sum)  # testing aid: NaN / inf / x factor
            loss = loss_sum * ranks_averaged / max(global_tokens, 1)
            accelerator.backward(loss)
        step_loss += loss_sum.detach()
    if flat:
        with run.watchdog.waiting(step, "the LoRA gradient all-reduce"):
            sharding.sum_gradients_over_ranks(run.params)
    faults.corrupt_gradients(step, run.params)  # testing aid: inf gradients, as an fp16 overflow makes them
    # The guard may have tightened clipping after a rollback (seed 000: 1.0 -> 0.5 -> 0.3).
    grad_norm = clip_gradients(accelerator, run.params, run.guard.max_grad_norm, run.sharding)
    with run.watchdog.waiting(step, "the loss all-reduce"):   # reading the loss waits for the gradients too
        loss_value = reduce_sum(accelerator, step_loss.item(), run.device) / max(global_tokens, 1)
    return loss_value, grad_norm, target_tokens


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
        loop.windows.close()   # a prefetching stream stops making micro-batches (training/batches.py)
        loop.windows = Windows(run.batches.stream(state.epoch, state.batch_in_epoch),
                               run.cfg.train.gradient_accumulation_steps)
        del loop.losses[max(0, state.global_step - loop.first_step):]
        loop.window_loss, loop.window_steps = 0.0, 0
        return decision.new_precision
    return None


def evaluate_now(run: Run) -> dict:
    """The stage's evaluation on the eval split (stages/), one metrics.jsonl row and the trackers' at this step."""
    results = run.stage.evaluate(run.cfg, run.accelerator, run.objective, run.data, run.tokenizer, run.device)
    run.metrics.write({"step": run.state.global_step, **results})
    run.trackers.log({"step": run.state.global_step, **results})
    return results


# ---------------------------------------------------------------------------------------------------------
# Finish
# ---------------------------------------------------------------------------------------------------------

def finish(run: Run, outcome: Outcome) -> TrainResult:
    """The outputs: adapter (or model) and tokenizer, train_results.json, the card, the loss plot and the report; a
    run that ended in NaN/inf saves no adapter (NonFiniteRun)."""
    cfg, state, out = run.cfg, run.state, run.folder.path
    finish_guard(run)
    if run.graphs is not None:
        run.graphs.release()
    offloaded = undo_speed_plan(run.model)   # compiled layers, fp8 copies, offloading: training's alone
    if offloaded and run.is_main:
        print(offloaded)
    run.accelerator.wait_for_everyone()
    final_loss = outcome.losses[-1] if outcome.losses else None
    # A run that ends in NaN/inf must not leave an adapter a script could take for a result (guard on or off).
    # Each rank checks its own shard of the weights; one bad shard is enough.
    bad_weights = reduce_sum(run.accelerator, int(not weights_are_finite(run.params)), run.device)
    diverged = (final_loss is not None and not math.isfinite(final_loss)) or bool(bad_weights)
    # Under sharding the trainable weights are gathered onto the main process first (every rank takes part).
    model_to_save = run.model if diverged else sharding.gather_for_save(
        run.sharding, run.accelerator, run.objective, run.model, run.optimizer, with_optimizer=False)[0]
    summary = {"global_step": state.global_step, "final_loss": final_loss,
               "train_seconds": round(outcome.train_seconds, 2), "tokens_seen": state.tokens_seen,
               "trainable_params": run.trainable, "total_params": run.total,
               "best_checkpoint": state.best_checkpoint, "best_metric": state.best_metric,
               "guard": run.guard.summary(), "status": "diverged" if diverged else "finished"}
    if run.is_main:
        write_json_atomic(out / "train_results.json", summary)
        if diverged:
            run.folder.record(status="diverged")
            what = "loss" if final_loss is not None and not math.isfinite(final_loss) else "weight"
            raise NonFiniteRun(f"the run ended with a non-finite {what} (final loss {final_loss}) at step "
                               f"{state.global_step}: no adapter was saved in {out}. Turn the numerical guard on "
                               "(guard_policy: rollback), lower learning_rate, or use bf16 instead of fp16")
        save_final_outputs(out, model_to_save or run.model, run.tokenizer,
                           pissa_converted=cfg.method.pissa_convert and cfg.method.pissa_init)
        # A card of what the run did, and the base named so another machine finds it (not a cache path).
        write_run_card(out, cfg.model.model_name_or_path)
        if cfg.train.plot_loss:
            plot_loss(out / "metrics.jsonl", out / "training_loss.png")
        run.folder.record(status="finished")
        print(f"done: {state.global_step} steps in {outcome.train_seconds:.1f} s, final loss "
              f"{final_loss if final_loss is None else round(final_loss, 4)}; "
              f"{'adapter' if hasattr(run.model, 'peft_config') else 'model'} in {out}")
        write_run_report(out)
    run.trackers.finish()
    seconds = max(outcome.train_seconds, 1e-9)
    return TrainResult(out, state.global_step, final_loss, outcome.train_seconds, state.tokens_seen / seconds,
                       outcome.losses, input_tokens_per_s=outcome.input_tokens / seconds, model=run.model)


def finish_guard(run: Run) -> None:
    """The guard's summary: one metrics.jsonl event and one printed line."""
    if run.is_main:
        run.metrics.write({"event": "guard_summary", "step": run.state.global_step, **run.guard.summary()})
        print(run.guard.summary_text(), flush=True)
