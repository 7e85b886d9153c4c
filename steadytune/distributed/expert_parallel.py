"""Expert parallelism for a mixture of experts (`ep_size`, LLaMA-Factory v1's fsdpturbo key): each MoE layer's routed
experts split over the ep_size processes of a group, the tokens sent to the process that holds their experts and the
results sent back.

Per MoE layer, on every process of a group (each with its own micro-batch; the router and everything outside the
experts as in data parallelism):
    the router picks each token's top-k experts (unchanged)
    the (token, expert) pairs sorted by the process that holds the expert; counts exchanged, then the pairs' hidden
    rows and expert ids sent there (all-to-all with split sizes, differentiable)
    each process runs its own experts over the rows it received: the same grouped matmuls, base and LoRA's rank-r
    path apart, as one process runs all of them (model/moe/experts_lora.grouped_experts, top-1 per received row)
    the results sent back (the reverse all-to-all) and summed per token with its routing weights.

The frozen base weights of the routed experts are sliced: a process holds 1/ep_size of them (most of a MoE's weights).
LoRA's expert factors stay whole on every process (small: rank r); a process's backward gives gradients only to its
own experts' rows, and the sum over processes that data parallelism already makes (LoRA's flat all-reduce) completes
them, so every process ends a step with the same whole adapter, which is saved as one process would save it.
Routing statistics stay those of the whole model (RoutingRecord); each process's share of the routed pairs is logged
as moe_rank_load (1.0 = an even share).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import torch

from steadytune.errors import UserError
from steadytune.model.moe.anatomy import FUSED_DOWN_NAME, expert_sites, fused_up_name
from steadytune.model.moe.experts_lora import (_compute_dtype, _routing_arguments, backend_for, grouped_experts,
                                               low_rank_factors, param_wrappers, supported)
from steadytune.model.moe.routing import routing_of


@dataclass
class ExpertParallel:
    size: int     # processes a layer's experts are split over (ep_size)
    rank: int     # this process's place in its group
    group: Any    # the group's process group

    def describe(self) -> str:
        return f"routed experts split over {self.size} processes"


def check_expert_parallel(cfg, world: int, model: torch.nn.Module | None = None) -> None:
    """ep_size against the model (the loaded one, or its meta-device skeleton before any weights load; None: not known
    here), the other keys and the process count: the checks that need no process group."""
    size = cfg.train.ep_size
    if size == 1:
        return
    sites = expert_sites(model) if model is not None else None
    if sites is not None and not sites:
        raise UserError(f"ep_size: {size} splits a mixture of experts' routed experts, and this model has none "
                        "(fused experts of transformers 5); set ep_size: 1")
    if world % size:
        raise UserError(f"ep_size: {size} does not divide the {world} processes; start a multiple of {size} (--nproc)")
    experts = sites[0].experts.num_experts if sites else None
    if experts is not None and experts % size:
        raise UserError(f"ep_size: {size} does not divide the model's {experts} routed experts")
    blockers = {"finetuning_type": cfg.method.finetuning_type != "lora" and "the routed experts' base weights must "
                "be frozen (finetuning_type: lora): a process holds only its slice of them",
                "quantization_bit": cfg.model.quantization_bit is not None and "4-bit and 8-bit experts are not split",
                "cp_size": cfg.train.cp_size > 1 and "sequence parallelism is not combined with it",
                "deepspeed": bool(cfg.method.deepspeed) and "DeepSpeed would partition the sliced expert weights as "
                             "if they were one tensor",
                "fsdp": cfg.train.fsdp not in (None, False, "") and "FSDP2 would shard the sliced expert weights as if "
                        "they were one tensor"}
    for key, why in blockers.items():
        if why:
            raise UserError(f"ep_size: {size} with {key}: {why}")


def plan_expert_parallel(cfg, world: int, rank: int, model) -> ExpertParallel | None:
    """ep_size for this run: checked against the model and the other keys, its groups made (every process makes every
    group, in the same order); decisions recorded. None for ep_size 1."""
    size = cfg.train.ep_size
    if size == 1:
        return None
    check_expert_parallel(cfg, world, model)
    sites = expert_sites(model)
    experts = sites[0].experts.num_experts
    if not all(supported(site.experts) for site in sites):
        raise UserError(f"ep_size: {size}: these experts' forward is not one the grouped matmuls compute")
    import torch.distributed as dist   # lazy: only runs that split experts make groups

    group = None
    for g in range(world // size):
        made = dist.new_group(list(range(g * size, (g + 1) * size)))
        if g == rank // size:
            group = made
    ep = ExpertParallel(size, rank % size, group)
    cfg.decide("ep_size", size, f"{ep.describe()}: each holds {experts // size} of each layer's {experts} experts; "
               "tokens go to their experts' process and back by all-to-all; LoRA's factors stay whole on every "
               "process (the gradient sum over processes completes them)")
    return ep


def install_expert_parallel(model: torch.nn.Module, ep: ExpertParallel, backend: str = "auto") -> int:
    """Slice each layer's routed expert weights to this process's experts and give the layer's outermost module the
    dispatching forward; -> layers changed."""
    installed = 0
    for site in expert_sites(model):
        experts = site.experts
        total = experts.num_experts
        per = total // ep.size
        lo = ep.rank * per
        names = [fused_up_name(experts), FUSED_DOWN_NAME]
        names += [f"{n}_bias" for n in names if isinstance(getattr(experts, f"{n}_bias", None), torch.nn.Parameter)]
        for name in names:
            weight = getattr(experts, name)
            # a copy of the slice: the whole tensor's memory goes with the old parameter
            setattr(experts, name, torch.nn.Parameter(weight.data[lo:lo + per].clone(),
                                                      requires_grad=weight.requires_grad))
        experts.num_experts = per
        experts.steadytune_expert_range = (lo, lo + per, total)
        site.module.steadytune_ep = ep
        site.module.grouped_backend = getattr(site.module, "grouped_backend", backend)
        site.module.forward = types.MethodType(expert_parallel_forward, site.module)
        installed += 1
    record = routing_of(model)
    if record is not None:
        record.ranks = ep.size
    return installed


def _exchange(x: torch.Tensor, out_splits: list[int] | None, in_splits: list[int] | None, group) -> torch.Tensor:
    """all-to-all without autograd (counts, expert ids)."""
    import torch.distributed as dist   # lazy: as above

    received = x.new_empty((sum(out_splits), *x.shape[1:]) if out_splits is not None else x.shape)
    dist.all_to_all_single(received, x.contiguous(), out_splits, in_splits, group=group)
    return received


def _all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol   # lazy: torch.distributed's autograd collectives

    return funcol.all_to_all_single_autograd(x.contiguous(), out_splits, in_splits, group)


def expert_parallel_forward(self, hidden: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The experts of one MoE layer across the group (module docstring); hidden [tokens, hidden]."""
    ep: ExpertParallel = self.steadytune_ep
    chain = param_wrappers(self)
    experts = chain[-1].base_layer if chain else self
    lo, hi, _ = experts.steadytune_expert_range
    per = hi - lo
    top_k_index, top_k_weights = _routing_arguments(args, kwargs)
    tokens, top_k = top_k_index.shape
    pairs = top_k_index.reshape(-1)
    owner = torch.div(pairs, per, rounding_mode="floor")
    order = torch.sort(owner, stable=True).indices
    send = torch.bincount(owner, minlength=ep.size)
    receive = _exchange(send, None, None, ep.group)
    send_splits, receive_splits = send.tolist(), receive.tolist()
    rows = _all_to_all(hidden[order // top_k], receive_splits, send_splits, ep.group)
    local_ids = _exchange(pairs[order] - owner[order] * per, receive_splits, send_splits, ep.group)
    dtype = _compute_dtype(getattr(experts, FUSED_DOWN_NAME), hidden.device.type)
    lora = {}
    if chain and not any(w.disable_adapters or w.merged for w in chain):
        adapter = chain[0].active_adapters[0]
        for w in chain:
            a_t, b_t, scaling = low_rank_factors(w, adapter, dtype)
            lora[w.parameter_name] = (a_t[lo:hi], b_t[lo:hi], scaling)
    backend = backend_for(hidden.device, dtype, getattr(self, "grouped_backend", "auto"))
    if rows.shape[0]:
        ones = torch.ones(rows.shape[0], 1, dtype=top_k_weights.dtype, device=hidden.device)
        out = grouped_experts(experts, rows, local_ids[:, None], ones, lora, backend)
    else:   # no token chose this process's experts: an empty answer, still in the graph, so that the backward's
        out = rows * 0.0   # all-to-all (a collective every process must join) runs here too
    back = _all_to_all(out, send_splits, receive_splits, ep.group)   # in `order`
    per_pair = torch.empty_like(back).index_copy(0, order, back)
    weighted = per_pair * top_k_weights.reshape(-1, 1).to(per_pair.dtype)
    return weighted.view(tokens, top_k, -1).sum(dim=1).to(hidden.dtype)
