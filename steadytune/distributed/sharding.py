"""Which sharding a run uses, and why; the Accelerator built for it; and the few places where the recipe must act
differently per sharding (accumulating without a sync, gathering state for a checkpoint, loading it back).

    single     one process
    ddp        several processes, every rank holds the whole model. Full fine-tuning: torch's DDP averages the
               gradients in buckets during the backward. LoRA: the model is not wrapped; its few gradients are summed
               over the ranks by one all-reduce of one flat buffer after the window's last backward, so nothing
               collective runs inside a micro-batch's forward + backward and it can be replayed as a CUDA graph.
    deepspeed  `deepspeed: FILE.json` (ZeRO-0/1/2/3, offload): Accelerate's DeepSpeed plugin
    fsdp       `fsdp` / `fsdp_config` / `fsdp_version`: Accelerate's FSDP2 plugin

Accelerate runs DeepSpeed and FSDP only on GPUs (on a CPU it falls back to DDP). torch's FSDP2 and DeepSpeed's CPU
accelerator both work over gloo, so on a CPU-only machine steadytune switches Accelerate's state to the plugin
itself (run_sharded_on_cpu): the code path is the GPU one, and the tests run it without a GPU.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from steadytune.distributed.deepspeed_config import (
    DeepSpeedFile,
    fill_from_model,
    fill_from_run,
    leftover_auto,
    read_deepspeed_file,
)
from steadytune.distributed.fsdp_config import FsdpSettings, make_plugin, read_fsdp_keys
from steadytune.distributed.state import (
    GatheredModel,
    GatheredOptimizer,
    deepspeed_gather,
    deepspeed_scatter,
    fsdp_gather,
    fsdp_scatter,
)
from steadytune.errors import UserError
from steadytune.hardware.backend import detect_backend
from steadytune.model.anatomy import layer_classes
from steadytune.model.moe.anatomy import moe_block_classes
from steadytune.training.checkpoint import refuse_non_finite
from steadytune.training.optimizers import chosen_optimizer


@dataclass
class ShardingPlan:
    kind: str                              # single | ddp | deepspeed | fsdp
    label: str
    why: str
    deepspeed: DeepSpeedFile | None = None
    fsdp: FsdpSettings | None = None
    notes: list[str] = field(default_factory=list)
    # ddp only: trainable gradients summed by one flat all-reduce per step instead of DDP's hooks (see above)
    flat_gradients: bool = False

    @property
    def sharded(self) -> bool:
        """Weights or optimizer state live in pieces across ranks: saving gathers, loading scatters."""
        return self.kind in ("deepspeed", "fsdp")

    @property
    def shards_parameters(self) -> bool:
        """The parameters themselves live in pieces (FSDP, ZeRO-3): every forward all-gathers them on every rank."""
        return self.kind == "fsdp" or (self.kind == "deepspeed" and self.deepspeed.stage == 3)


def plan_processes(cfg) -> tuple[int, ShardingPlan]:
    """How many processes, and which sharding and why; its file and keys checked before any loading."""
    world = process_state(cfg).num_processes
    plan = plan_sharding(cfg, world)
    apply_plan(cfg, plan, world)
    return world, plan


def plan_sharding(cfg, world_size: int) -> ShardingPlan:
    """Read the sharding keys (errors name the key or file) and choose; nothing is loaded yet. Started by
    `accelerate launch --config_file X`, the DeepSpeed or FSDP settings of X (which Accelerate passes on in the
    environment) count as keys of the run."""
    t = cfg.train
    adopt_accelerate_launch_settings(cfg, os.environ)
    fsdp = read_fsdp_keys(t)
    if cfg.method.deepspeed and fsdp is not None:
        raise UserError("deepspeed and fsdp are both set: choose one way to shard (remove the other key)")
    if cfg.method.deepspeed:
        ds = read_deepspeed_file(cfg.method.deepspeed)
        plan = ShardingPlan("deepspeed", ds.label(), f"deepspeed: {ds.path}", deepspeed=ds, notes=list(ds.warnings))
    elif fsdp is not None:
        keys = [k for k in ("fsdp", "fsdp_config", "fsdp_version") if getattr(t, k) not in (None, "", [])]
        plan = ShardingPlan("fsdp", fsdp.label(), ", ".join(keys) + " set", fsdp=fsdp, notes=list(fsdp.notes))
    elif world_size > 1:
        lora = cfg.method.finetuning_type == "lora"
        how = ("LoRA's gradients are summed by one all-reduce per step, after the backward" if lora else
               "gradients are averaged by DDP during the backward")
        return ShardingPlan("ddp", "DDP", f"{world_size} processes and no sharding key: every rank holds the whole "
                                          f"model; {how} (set deepspeed: or fsdp: to shard)", flat_gradients=lora)
    else:
        return ShardingPlan("single", "none", "one process")
    if world_size == 1:
        idle = idle_fsdp_reason(cfg, plan)
        if idle:
            return ShardingPlan("single", "none", idle)
        plan.why += " (on one process nothing is split; offload still applies)"
    return plan


def idle_fsdp_reason(cfg, plan: ShardingPlan) -> str | None:
    """Why FSDP is left off for this one-process run, or None. FSDP2 on one process splits nothing (offload aside),
    so a run whose base or optimizer FSDP cannot wrap (a quantised base; an optimizer of several parameter groups
    with its own state) trains the same numbers unwrapped. LLaMA-Factory v1 files set dist_config: fsdp2 beside
    quant_config or optim_config; with several processes those stay refused (train.plan_quantization,
    optimizers.refuse_with_sharding)."""
    if plan.kind != "fsdp" or plan.fsdp.offload_params:
        return None
    needs = []
    if cfg.model.quantization_bit is not None:
        needs.append(f"a quantised base (quantization_bit: {cfg.model.quantization_bit})")
    if chosen_optimizer(cfg) != "adamw":
        needs.append(f"the {chosen_optimizer(cfg)} optimizer")
    if not needs:
        return None
    t = cfg.train
    t.fsdp, t.fsdp_config, t.fsdp_version = "", None, None
    why = (f"one process: fsdp is set, but FSDP2 on one process splits nothing and {' and '.join(needs)} trains "
           "unwrapped, with the same numbers (with several processes this is refused)")
    cfg.decide("fsdp", "off", why)
    return why


# Accelerate's environment names for its FSDP settings -> the fsdp_config keys (accelerate/commands/launch.py).
_ACCELERATE_FSDP_ENV = {"FSDP_VERSION": "version", "FSDP_RESHARD_AFTER_FORWARD": "reshard_after_forward",
                        "FSDP_CPU_RAM_EFFICIENT_LOADING": "cpu_ram_efficient_loading",
                        "FSDP_OFFLOAD_PARAMS": "offload_params", "FSDP_STATE_DICT_TYPE": "state_dict_type",
                        "FSDP_AUTO_WRAP_POLICY": "auto_wrap_policy",
                        "FSDP_TRANSFORMER_CLS_TO_WRAP": "transformer_layer_cls_to_wrap",
                        "FSDP_MIN_NUM_PARAMS": "min_num_params", "FSDP_ACTIVATION_CHECKPOINTING": "activation_checkpointing",
                        "FSDP_SHARDING_STRATEGY": "sharding_strategy"}


def adopt_accelerate_launch_settings(cfg, env) -> None:
    """`accelerate launch --config_file fsdp2_config.yaml -m steadytune train run.yaml`: the launcher's DeepSpeed or
    FSDP choice becomes the run's deepspeed / fsdp_config keys (unless the run sets them itself), recorded."""
    t = cfg.train
    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" and not cfg.method.deepspeed:
        path = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
        if not path or path == "none":
            raise UserError("accelerate launch asks for DeepSpeed without a DeepSpeed config file; put "
                            "`deepspeed: ds_z3_config.json` in the run's YAML (or deepspeed_config_file in Accelerate's)")
        cfg.method.deepspeed = path
        cfg.decide("deepspeed", path, "from accelerate launch's config (ACCELERATE_DEEPSPEED_CONFIG_FILE)")
    if env.get("ACCELERATE_USE_FSDP", "").lower() == "true" and t.fsdp in (None, "", []) and t.fsdp_config is None:
        settings = {key: env[name] for name, key in _ACCELERATE_FSDP_ENV.items() if env.get(name) not in (None, "")}
        t.fsdp_config = settings
        t.fsdp = "full_shard auto_wrap"
        cfg.decide("fsdp_config", settings, "from accelerate launch's FSDP config (its FSDP_* environment)")


def apply_plan(cfg, plan: ShardingPlan, world_size: int) -> None:
    """What the plan changes in the run's keys, each recorded with its reason."""
    t, faults = cfg.train, cfg.fault_injection
    if faults.hang_step is not None and faults.hang_rank >= world_size:
        raise UserError(f"fault_injection.hang_rank: {faults.hang_rank}, but the run has {world_size} process"
                        f"{'es' if world_size > 1 else ''} (ranks 0..{world_size - 1})")
    if faults.kill_step is not None and faults.kill_rank >= world_size:
        raise UserError(f"fault_injection.kill_rank: {faults.kill_rank}, but the run has {world_size} process"
                        f"{'es' if world_size > 1 else ''} (ranks 0..{world_size - 1})")
    why = plan.why
    if plan.kind == "ddp" and t.ep_size > 1:   # distributed/expert_parallel.py keeps a slice of the experts a rank
        why = why.replace("every rank holds the whole model", f"every rank holds the whole model but its routed "
                          f"experts, split over ep_size {t.ep_size} ranks")
    cfg.decide("sharding", plan.label, why)
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    if plan.deepspeed is not None:
        _precision_from_deepspeed(cfg, plan.deepspeed)
        if cfg.guard.guard_policy in ("skip", "rollback"):
            # The engine applies its update inside backward (and skips fp16 overflow steps itself), so the guard
            # sees a step only after it is taken and has no unsharded state to snapshot.
            cfg.decide("guard_policy", "warn", f"{cfg.guard.guard_policy} needs the update held back and a copy of "
                       "the state; under DeepSpeed the engine steps inside backward and owns the partitioned state, "
                       "so the guard reports (warn) and DeepSpeed skips fp16 overflow steps itself")
            cfg.guard.guard_policy = "warn"
    if plan.fsdp is not None and plan.fsdp.activation_checkpointing:
        if t.gradient_checkpointing is False:
            raise UserError("fsdp_config.activation_checkpointing: true, but gradient_checkpointing: false; choose one")
        t.gradient_checkpointing = True
        cfg.decide("gradient_checkpointing", True, "fsdp_config.activation_checkpointing: true")
    if world_size > 1 and t.ddp_timeout > 3 * 3600:
        cfg.decide("ddp_timeout", t.ddp_timeout, "kept as asked; a stalled collective is caught by the hang watchdog "
                   "(hang_timeout) long before this")


def _precision_from_deepspeed(cfg, ds: DeepSpeedFile) -> None:
    """An explicit fp16/bf16 "enabled": true in the DeepSpeed file is a precision request, as the run's own keys are.
    Where the run's keys say otherwise, that is an error (transformers reports the same mismatch)."""
    wanted = ds.requested_precision()
    if wanted is None:
        return
    t = cfg.train
    run_says = "fp16" if t.fp16 is True else "bf16" if t.bf16 is True else None
    if run_says is not None and run_says != wanted:
        raise UserError(f"deepspeed: {ds.path} enables {wanted} but the run's keys set {run_says}: true; set "
                        f"{wanted}.enabled to \"auto\" in the file, or change the run's key")
    if run_says is None:
        t.fp16, t.bf16 = wanted == "fp16", wanted == "bf16"
        cfg.decide("precision_request", wanted, f"{wanted}.enabled is true in {ds.path}")


# ---------------------------------------------------------------------------------------------------------
# The Accelerator
# ---------------------------------------------------------------------------------------------------------

def process_state(cfg):
    """Accelerate's PartialState for this process (rank, world size), created the way the Accelerator will be: on a
    machine without GPUs with cpu=True, else Accelerate would not see the other processes (it sets up a process
    group on the CPU only when asked to)."""
    from accelerate import PartialState

    ensure_process_group_env(cfg)
    # The process group is made here, so here it gets ddp_timeout (NCCL/RCCL's own limit for one collective).
    return PartialState(cpu=detect_backend() == "cpu", timeout=timedelta(seconds=cfg.train.ddp_timeout))


def ensure_process_group_env(cfg) -> None:
    """DeepSpeed and FSDP need a process group even on one process: started without a launcher, this process
    becomes rank 0 of 1 (as the deepspeed launcher does for one GPU)."""
    if "LOCAL_RANK" in os.environ or not (cfg.method.deepspeed or read_fsdp_keys(cfg.train) is not None):
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))


def make_accelerator(cfg, plan: ShardingPlan, precision: str, info, world_size: int, log_with: list | None = None):
    """The Accelerator for this plan. Each set-up fixes its own precision: an earlier Accelerator's settings in this
    process are forgotten (the process group, if any, is kept), so a set-up in another precision works."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    AcceleratorState._reset_state(reset_partial_state=False)
    kwargs: dict[str, Any] = {}
    if plan.deepspeed is not None:
        _check_deepspeed_installed()
        # DeepSpeed calls collectives newer torch renamed; the warning is about its code and repeats every step.
        warnings.filterwarnings("ignore", message=r".*(all_gather_into_tensor|reduce_scatter_tensor).* is deprecated",
                                category=FutureWarning)
        from accelerate.utils import DeepSpeedPlugin
        filled = fill_from_run(plan.deepspeed, cfg.train, precision, world_size, cpu=info.backend == "cpu")
        cfg.decide("deepspeed_config", "; ".join(filled), "the file's \"auto\" values filled from the run's "
                   "keys, as transformers does")
        kwargs["deepspeed_plugin"] = DeepSpeedPlugin(hf_ds_config=plan.deepspeed.config)
        # From here on fill the plugin's own copy (Accelerate copies the dict it is given).
        plan.deepspeed.config = kwargs["deepspeed_plugin"].deepspeed_config
    if plan.fsdp is not None:
        kwargs["fsdp_plugin"] = make_plugin(plan.fsdp, [], precision)
    cpu = info.backend == "cpu"
    accelerator = Accelerator(
        mixed_precision={"bf16": "bf16", "fp16": "fp16", "fp32": "no"}[precision], cpu=cpu,
        kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=cfg.train.ddp_timeout))],
        log_with=log_with, **kwargs)
    if cpu and plan.sharded:
        run_sharded_on_cpu(accelerator, plan, kwargs.get("deepspeed_plugin") or kwargs.get("fsdp_plugin"))
    elif plan.deepspeed is not None:
        # transformers loads a ZeRO-3 model inside deepspeed.zero.Init, whose config reads the world size from
        # DeepSpeed's own collectives: they must sit on the process group before the model loads, or every rank
        # sees a world of 1 and the batch check fails (seen on 2 H200s). Over the existing group, no new one.
        from deepspeed import comm
        if not comm.is_initialized():
            comm.init_distributed(dist_backend="gloo" if cpu else "nccl", auto_mpi_discovery=False)
    return accelerator


def run_sharded_on_cpu(accelerator, plan: ShardingPlan, plugin) -> None:
    """Switch Accelerate's state to DeepSpeed / FSDP on a CPU-only machine (module docstring)."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    kind = DistributedType.DEEPSPEED if plan.kind == "deepspeed" else DistributedType.FSDP
    if not accelerator.state.initialized or accelerator.num_processes < 1:
        return
    # AcceleratorState copies PartialState's fields each time it is created: set both.
    PartialState().distributed_type = kind
    accelerator.state.distributed_type = kind
    if plan.kind == "deepspeed":
        from deepspeed import comm
        if not comm.is_initialized():   # DeepSpeed's collectives over the process group Accelerate made (gloo)
            comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        accelerator.state.deepspeed_plugins = plugin
        plugin.select(_from_accelerator_state=True)
    else:
        accelerator.state.fsdp_plugin = plugin


def keep_sharded_on_cpu(accelerator, plan: ShardingPlan) -> None:
    """Accelerate re-creates its state inside prepare(); on a CPU-only machine the switch is made again after it."""
    if accelerator.device.type == "cpu" and plan.sharded:
        plugin = accelerator.state.deepspeed_plugin if plan.kind == "deepspeed" else accelerator.state.fsdp_plugin
        run_sharded_on_cpu(accelerator, plan, plugin)


def _check_deepspeed_installed() -> None:
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        raise UserError("deepspeed: the deepspeed package is not installed (pip install 'steadytune[deepspeed]'); "
                        "for LoRA on several GPUs plain DDP needs nothing: remove the key, or use fsdp") from None


def model_device(plan: ShardingPlan, accelerator):
    """Where the loaded model goes before prepare(): FSDP2 moves each shard to the GPU itself (a whole copy there
    first would cost the memory sharding saves), so it stays on the CPU; everything else goes to the device."""
    return None if plan.kind == "fsdp" else accelerator.device


def match_trainable_dtype(plan: ShardingPlan, model, precision: str, cfg) -> None:
    """DeepSpeed keeps the fp32 master copy of trainable weights in its optimizer and computes in the half dtype;
    its ZeRO-3 linear does not autocast, so fp32 adapters would meet bf16 inputs (seen on the H200): under DeepSpeed
    in bf16 or fp16 the trainable weights are cast to it. Every other plan keeps them in fp32."""
    if plan.kind != "deepspeed" or precision not in ("bf16", "fp16"):
        return
    import torch

    half = torch.bfloat16 if precision == "bf16" else torch.float16
    for param in model.parameters():
        if param.requires_grad and param.dtype == torch.float32:
            param.data = param.data.to(half)
    cfg.decide("trainable_dtype", str(half).replace("torch.", ""), "DeepSpeed holds the fp32 master weights in "
               "its optimizer; the module computes in the half precision")


def fit_to_model(accelerator, plan: ShardingPlan, model, cfg) -> None:
    """Settings that need the loaded model: DeepSpeed's hidden-size "auto" values; FSDP2's layer classes."""
    if plan.deepspeed is not None:
        gather_experts_whole(plan, model, cfg)
        notes = fill_from_model(plan.deepspeed, model.config)
        left = leftover_auto(plan.deepspeed)
        if left:
            raise UserError(f"deepspeed: {plan.deepspeed.path}: \"auto\" values steadytune cannot fill: "
                            f"{', '.join(left)}; give numbers")
        if notes:
            decided = cfg.decisions.get("deepspeed_config", {}).get("value", "")
            cfg.decide("deepspeed_config", "; ".join(filter(None, [decided, *notes])), "the file's \"auto\" values "
                       "filled from the run's keys and the model's hidden size, as transformers does")
    if plan.fsdp is not None:
        plugin = accelerator.state.fsdp_plugin
        if not plugin.transformer_cls_names_to_wrap:
            plugin.transformer_cls_names_to_wrap = layer_classes(model) or None


def gather_experts_whole(plan: ShardingPlan, model, cfg) -> None:
    """ZeRO-3 gathers a module's weights when the module's forward is called; the grouped experts forward
    (model/moe/experts_lora.py) reads the experts' weights from the layer's MoE block without calling the experts
    module, so the block is made one ZeRO-3 leaf (its weights gathered at its forward), as LLaMA-Factory does for its MoE
    models (add_z3_leaf_module)."""
    if plan.deepspeed is None or plan.deepspeed.stage != 3:
        return
    blocks = moe_block_classes(model)
    if not blocks:
        return
    from deepspeed.utils import set_z3_leaf_modules   # lazy: deepspeed is an optional dependency

    set_z3_leaf_modules(model, blocks)
    cfg.decide("z3_leaf_modules", [b.__name__ for b in blocks], "ZeRO-3 gathers each MoE block's experts and router "
               "whole at its forward (the grouped experts read them without calling their module)")


def prepare_objective(accelerator, plan: ShardingPlan, objective, optimizer):
    """-> (objective, optimizer) through Accelerate. With flat gradients the model is placed and given mixed
    precision but not wrapped in DDP, and the trainable weights start from rank 0's, as DDP would make them."""
    if not plan.flat_gradients:
        return accelerator.prepare(objective, optimizer)
    import torch
    import torch.distributed as dist

    objective = accelerator.prepare_model(objective, evaluation_mode=True)   # evaluation_mode: no DDP wrapper
    optimizer = accelerator.prepare_optimizer(optimizer)
    with torch.no_grad():
        for param in objective.parameters():
            if param.requires_grad:
                dist.broadcast(param.data, src=0)
    return objective, optimizer


def sum_gradients_over_ranks(params: list) -> None:
    """Every rank's gradients replaced by their sum over the ranks: one all-reduce per dtype of one flat buffer
    (LoRA's gradients are a few MB, so one message costs less than DDP's buckets and leaves the backward free of
    collectives). A parameter without a gradient on this rank takes part with zeros."""
    import torch
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    for param in params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
    by_dtype: dict = {}
    for param in params:
        by_dtype.setdefault(param.grad.dtype, []).append(param.grad)
    for grads in by_dtype.values():
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        for grad, summed in zip(grads, _unflatten_dense_tensors(flat, grads)):
            grad.copy_(summed)


# ---------------------------------------------------------------------------------------------------------
# In the loop
# ---------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def accumulate_without_sync(accelerator, objective, plan: ShardingPlan):
    """Backward of a micro-batch that is not the last of its accumulation window: no gradient all-reduce (DDP,
    FSDP2), and under DeepSpeed no engine step (Accelerate steps the engine whenever sync_gradients is true)."""
    if plan.kind == "deepspeed":
        accelerator.sync_gradients = False
        try:
            yield
        finally:
            accelerator.sync_gradients = True
    else:
        with accelerator.no_sync(objective):
            yield


# ---------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------

def gather_for_save(plan: ShardingPlan, accelerator, objective, model, optimizer, with_optimizer: bool = True):
    """-> (model, optimizer) objects training/checkpoint.py and the final save can write from. Under sharding this gathers the
    full trainable weights (and, for checkpoints, the optimizer state) onto the main process: a collective, every
    rank calls it."""
    if not plan.sharded:
        return model, optimizer

    main = accelerator.is_main_process
    if plan.kind == "deepspeed":
        weights, optim = deepspeed_gather(objective, main, with_optimizer)
    else:
        weights, optim = fsdp_gather(objective, optimizer, main, with_optimizer)
    return GatheredModel(model, weights), GatheredOptimizer(optim)


def restore_sharded(plan: ShardingPlan, objective, optimizer, checkpoint, optimizer_state: dict) -> None:
    """Load a checkpoint's weights and optimizer state (written whole, by any sharding and world size) into a
    sharded model; every rank reads the files."""
    from safetensors.torch import load_file


    adapter = checkpoint / "adapter_model.safetensors"
    files = [adapter] if adapter.is_file() else sorted(checkpoint.glob("model*.safetensors"))
    weights: dict = {}
    for f in files:
        weights.update(load_file(f))
    refuse_non_finite(weights, checkpoint)
    inner = inner_model(plan, objective)
    if adapter.is_file():
        weights = _peft_names(inner, weights)
    if plan.kind == "deepspeed":
        deepspeed_scatter(objective, weights, optimizer_state)
    else:
        fsdp_scatter(objective, optimizer, weights, optimizer_state)


def inner_model(plan: ShardingPlan, objective):
    """The model inside the prepared objective (DeepSpeed's engine holds it as .module)."""
    return objective.module.model if plan.kind == "deepspeed" else objective.model


def shapes_checkable(plan: ShardingPlan, cfg) -> bool:
    """Whether a checkpoint's shapes can be compared with the live model's: not under ZeRO-3, where the live
    parameters are empty partitions and transformers builds any model (even the meta-device skeleton the check
    uses) through DeepSpeed's partitioning. The model name is still checked, and a mismatched tensor fails to load."""
    return not (plan.kind == "deepspeed" and plan.deepspeed.stage == 3)


def _peft_names(model, saved: dict) -> dict:
    """PEFT saves adapter keys without the adapter's name ('...lora_A.weight', '...embed_tokens.weight'); the live
    parameters carry it ('...lora_A.default.weight', '...embed_tokens.modules_to_save.default.weight')."""
    live_by_saved = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            for adapter in getattr(model, "peft_config", {}):
                saved_name = name.replace(f"modules_to_save.{adapter}.", "").replace(f".{adapter}.", ".")
                live_by_saved[saved_name] = name
    return {live_by_saved.get(key, key): value for key, value in saved.items()}
