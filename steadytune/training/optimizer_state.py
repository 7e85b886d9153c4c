"""Optimizer state keyed by parameter index (torch's own) or by parameter name (portable across sharding and
world sizes), and the conversion between the two through the trainable parameters' names.
"""

from __future__ import annotations

import torch


def trainable_names(model: torch.nn.Module) -> list[str]:
    """Names of the trainable parameters in `model.parameters()` order (= the optimizer's order)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def is_by_name(optimizer_state: dict) -> bool:
    return any(isinstance(k, str) for k in optimizer_state.get("state", {})) or any(
        isinstance(p, str) for group in optimizer_state.get("param_groups", []) for p in group.get("params", []))


def by_name(optimizer_state: dict, names: list[str]) -> dict:
    """Index-keyed -> name-keyed."""
    if is_by_name(optimizer_state):
        return optimizer_state
    state = {names[i]: value for i, value in optimizer_state.get("state", {}).items()}
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in optimizer_state["param_groups"]]
    return {"state": state, "param_groups": groups}


def by_index(optimizer_state: dict, names: list[str]) -> dict:
    """Name-keyed -> index-keyed, in this run's order; a name this model lacks is an error naming it."""
    if not is_by_name(optimizer_state):
        return optimizer_state
    index = {name: i for i, name in enumerate(names)}
    missing = [n for n in optimizer_state["state"] if n not in index]
    if missing:
        raise KeyError(f"optimizer state for {missing[0]!r}, which this model has no trainable parameter for")
    state = {index[n]: value for n, value in optimizer_state["state"].items()}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in optimizer_state["param_groups"]]
    return {"state": state, "param_groups": groups}
