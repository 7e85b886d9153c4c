"""The routers' side of a training step: the load-balancing loss and the routing statistics.

The decoder returns every MoE layer's router logits when asked (`output_router_logits=True`, transformers' own
recorder: hooks that collect only inside the forward call, so the recompute of gradient checkpointing adds nothing).
From them, outside the compiled layers and without reading anything back to the host (a CUDA graph records it):

- the load-balancing loss of the Switch Transformer as transformers computes it for LLaMA-Factory
  (`load_balancing_loss_func`: over all layers' rows, each expert's share of the top-k choices times its mean router
  probability, summed, times the number of experts; padding left out), added to the loss as
  `moe_aux_loss_coef x aux` for every labelled token, so that a step's loss is the token mean of cross-entropy plus the
  coefficient times the token-weighted aux loss. LLaMA-Factory turns it on (`output_router_logits`,
  `router_aux_loss_coef`) for the model types of its list only (model/model_utils/moe.py, configure_moe), so here too;
- per layer and expert, how many (token, expert) choices it received: summed on the device over the logging window,
  then each expert's load as a multiple of the uniform share (1.0 = balanced; 0 = an expert no token reached).
Routing is dropless (every token reaches its top-k experts: the grouped matmuls take any number of rows per expert),
so no token is dropped to report.
"""

from __future__ import annotations

import torch

from steadytune.model.anatomy import base_model_of
from steadytune.model.moe.anatomy import experts_per_layer, experts_per_token

# LLaMA-Factory's configure_moe: the model types whose router_aux_loss_coef it sets (and output_router_logits).
LF_AUX_LOSS_TYPES = ("granitemoe", "jamba", "llama4", "mixtral", "olmoe", "phimoe", "qwen2_moe", "qwen3_moe")
ROUTING_ATTRIBUTE = "steadytune_routing"


def aux_loss_coefficient(config, asked: float | None) -> tuple[float | None, str]:
    """-> (the coefficient the loss adds, why). `asked`: moe_aux_loss_coef. Unset: the model config's own setting,
    which transformers' forward would apply (router_aux_loss_coef when output_router_logits is true)."""
    model_type = getattr(config, "model_type", "?")
    if asked:
        if model_type not in LF_AUX_LOSS_TYPES:
            return None, (f"moe_aux_loss_coef: {asked} is not applied to model type {model_type}: LLaMA-Factory sets it "
                          f"for {', '.join(LF_AUX_LOSS_TYPES)} only")
        return asked, f"moe_aux_loss_coef: the routers' load-balancing loss x {asked} is added to the loss"
    if getattr(config, "output_router_logits", False) and getattr(config, "router_aux_loss_coef", None):
        coef = config.router_aux_loss_coef
        return coef, (f"the model's config sets output_router_logits with router_aux_loss_coef {coef}, which its "
                      "forward adds: so is it here")
    return None, ("off: moe_aux_loss_coef unset (LLaMA-Factory's default) and the model's config does not ask for it; "
                  "the aux loss is still measured and logged (moe_aux_loss)")


def load_balancing_loss(router_logits: tuple, num_experts: int, top_k: int,
                        token_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (the Switch load-balancing loss over every layer's rows, top-k choices per layer and expert [layers,
    experts]); `token_mask` [rows] (1 = a real token) or None. The loss is transformers' load_balancing_loss_func's."""
    layers = len(router_logits)
    device = router_logits[0].device
    mask = None if token_mask is None else token_mask.reshape(-1).to(device=device, dtype=torch.float32)
    counts = torch.zeros(layers, num_experts, dtype=torch.float32, device=device)
    prob_sum = torch.zeros(num_experts, dtype=torch.float32, device=device)
    rows = torch.zeros((), dtype=torch.float32, device=device)
    for layer, logits in enumerate(router_logits):
        probs = torch.softmax(logits.float(), dim=-1)
        chosen = torch.topk(probs, top_k, dim=-1).indices.reshape(-1)
        weight = torch.ones_like(chosen, dtype=torch.float32) if mask is None else mask.repeat_interleave(top_k)
        counts[layer].scatter_add_(0, chosen, weight)
        prob_sum = prob_sum + (probs.sum(0) if mask is None else (probs * mask[:, None]).sum(0))
        rows = rows + (probs.shape[0] if mask is None else mask.sum())
    rows = rows.clamp_min(1.0)
    aux = (counts.detach().sum(0) / rows * (prob_sum / rows)).sum() * num_experts
    return aux, counts.detach()


def routing_token_mask(batch: dict) -> torch.Tensor | None:
    """Which rows of the flattened batch are real tokens: packed rows name their padding (segment_ids -1: the
    training batches of a MoE run carry them), padded rows have their attention mask; None when every row is one."""
    if "segment_ids" in batch:
        return (batch["segment_ids"].reshape(-1) >= 0).float()
    mask = batch.get("attention_mask")
    if mask is None or mask.dim() != 2:
        return None
    return (mask.reshape(-1) > 0).float()


class RoutingRecord:
    """Kept on the model while it trains: the aux coefficient, and the window's sums on the device (allocated on the
    first step, then added to in place, so a recorded CUDA graph keeps adding to them)."""

    def __init__(self, num_experts: int, top_k: int, coefficient: float | None):
        self.num_experts, self.top_k, self.coefficient = num_experts, top_k, coefficient
        self.counts: torch.Tensor | None = None      # [layers, experts] top-k choices
        self.ranks = 1   # processes the experts are split over (expert parallelism: distributed/expert_parallel.py)
        self.rank_load: list[float] | None = None    # each process's share of the last window's pairs (1.0 = even)
        self.aux_sum: torch.Tensor | None = None     # aux loss summed over micro-batches
        self.micro_batches: torch.Tensor | None = None

    def add(self, router_logits: tuple, token_mask: torch.Tensor | None, labelled: int) -> torch.Tensor | None:
        """Account one micro-batch's routing; -> what its loss sum gains (coefficient x aux x labelled tokens), or None
        without a coefficient."""
        aux, counts = load_balancing_loss(router_logits, self.num_experts, self.top_k, token_mask)
        if torch.is_grad_enabled():   # training steps only, not the evaluations
            if self.counts is None or self.counts.shape != counts.shape:
                self.counts = torch.zeros_like(counts)
                self.aux_sum = torch.zeros((), dtype=torch.float32, device=counts.device)
                self.micro_batches = torch.zeros((), dtype=torch.float32, device=counts.device)
            self.counts.add_(counts)
            self.aux_sum.add_(aux.detach())
            self.micro_batches.add_(1.0)
        return aux * (self.coefficient * labelled) if self.coefficient else None

    def pop(self, reduce=None) -> tuple[dict[str, float], list[list[float]] | None]:
        """-> (the window's metrics, each layer's expert loads as multiples of the uniform share), summed over ranks
        by `reduce`; the sums start again (in place)."""
        if self.counts is None:
            return {}, None
        packed = torch.cat([self.counts.reshape(-1), self.aux_sum.reshape(1), self.micro_batches.reshape(1)])
        if reduce is not None:
            packed = reduce(packed)
        self.counts.zero_()
        self.aux_sum.zero_()
        self.micro_batches.zero_()
        counts = packed[:-2].reshape(self.counts.shape).double()
        aux_sum, micro_batches = packed[-2].item(), packed[-1].item()
        if micro_batches == 0:
            return {}, None
        per_layer = counts.sum(1, keepdim=True).clamp_min(1.0)
        load = counts * self.num_experts / per_layer          # 1.0 = the uniform share
        metrics = {"moe_aux_loss": aux_sum / micro_batches, "moe_load_max": float(load.max()),
                   "moe_load_min": float(load.min()), "moe_idle_experts": int((counts == 0).sum())}
        if self.ranks > 1:   # each process's experts' pairs, over all layers, as a multiple of an even share
            by_rank = counts.reshape(counts.shape[0], self.ranks, -1).sum(dim=(0, 2))
            self.rank_load = [round(v, 4) for v in (by_rank * self.ranks / by_rank.sum().clamp_min(1.0)).tolist()]
            metrics["moe_rank_load_max"] = max(self.rank_load)
        return metrics, [[round(v, 4) for v in row] for row in load.tolist()]


def attach_routing(model: torch.nn.Module, coefficient: float | None) -> RoutingRecord | None:
    """Keep a RoutingRecord on a MoE model (training/loss.py asks the decoder for router logits when one is there)."""
    config = base_model_of(model).config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    experts, top_k = experts_per_layer(config), experts_per_token(config)
    if not experts or not top_k:
        return None
    record = RoutingRecord(experts, top_k, coefficient)
    setattr(base_model_of(model), ROUTING_ATTRIBUTE, record)
    return record


def routing_of(model: torch.nn.Module) -> RoutingRecord | None:
    return getattr(base_model_of(model), ROUTING_ATTRIBUTE, None)


def detach_routing(model: torch.nn.Module) -> None:
    base = base_model_of(model)
    if hasattr(base, ROUTING_ATTRIBUTE):
        delattr(base, ROUTING_ATTRIBUTE)
