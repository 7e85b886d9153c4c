"""A mixture-of-experts run: what it trains, by kind, said before the first step (so a run whose routed experts stay
frozen says so at once), the choices made for its experts, and what its routers did while it trained
(metrics.jsonl's moe_* values; each layer's per-expert load in expert_load.jsonl, which the report draws).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from steadytune.config import RunConfig
from steadytune.model.anatomy import base_model_of
from steadytune.model.moe.anatomy import count_by_kind, describe_trainable, is_moe, ROUTED_EXPERTS, routed_weight_dtype
from steadytune.model.moe.grouped import choose_grouped_backend
from steadytune.model.moe.routing import aux_loss_coefficient, attach_routing, routing_of
from steadytune.training.monitor import MetricsLog

EXPERT_LOAD_FILE = "expert_load.jsonl"


def set_up_experts(cfg: RunConfig, model: torch.nn.Module, device: torch.device, precision: str) -> bool:
    """For a MoE model: record trainable parameters by kind (a warning when LoRA leaves every routed expert frozen),
    the experts' grouped-matmul backend, and the routers' aux loss; keep a RoutingRecord on the model. -> is MoE."""
    if not is_moe(model):
        return False
    counts = count_by_kind(model)
    cfg.decide("trainable_by_kind", {kind: c.trainable for kind, c in counts.items() if c.total},
               describe_trainable(model))
    if cfg.method.finetuning_type == "lora" and counts[ROUTED_EXPERTS].trainable == 0:
        message = (f"lora_target: {cfg.method.lora_target} adapts none of the routed experts, which hold most of this "
                   "model's weights: they stay frozen (lora_target: all, or add experts, adapts them)")
        print(f"warning: {message}", file=sys.stderr, flush=True)
        cfg.decide("routed_experts", "frozen", message)
    if routed_weight_dtype(model) is not None and cfg.method.finetuning_type == "lora":
        compute_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        backend, why = choose_grouped_backend(device, compute_dtype, cfg.train.moe_grouped_mm)
        cfg.decide("moe_grouped_mm", backend, why + "; tokens sorted by expert, the base and LoRA's rank-r path as "
                   "separate grouped matmuls (no per-expert copy of the adapted weights); dropless: every token reaches "
                   "its top-k experts (no capacity limit, so no token is dropped)")
    config = base_model_of(model).config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    coefficient, why = aux_loss_coefficient(config, cfg.model.moe_aux_loss_coef)
    cfg.decide("moe_aux_loss_coef", coefficient, why)
    attach_routing(model, coefficient)
    return True


def expert_load_log(folder: Path, model: torch.nn.Module, main: bool) -> MetricsLog | None:
    """The per-layer, per-expert load log of a MoE run (None for a dense model)."""
    return MetricsLog(folder / EXPERT_LOAD_FILE, enabled=main) if routing_of(model) is not None else None


def pop_routing_metrics(model: torch.nn.Module, accelerator, log: MetricsLog | None, step: int) -> dict:
    """The logging window's routing metrics (summed over ranks); each layer's expert loads go to expert_load.jsonl."""
    record = routing_of(model)
    if record is None:
        return {}
    reduce = None
    if accelerator is not None and accelerator.num_processes > 1:
        reduce = lambda t: accelerator.reduce(t, reduction="sum")  # noqa: E731
    metrics, load = record.pop(reduce)
    if load is not None and log is not None:
        log.write({"step": step, "load": load, **({"rank_load": record.rank_load} if record.rank_load else {})})
    return metrics
