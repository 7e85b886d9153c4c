"""The optimizer a run trains with, and its parameter groups, as LLaMA-Factory 0.9.5 builds them.

AdamW by default, with transformers' two groups (weight decay on every weight but biases and norms); LLaMA-Factory's
other optimizers (its train/trainer_utils.py, create_custom_optimizer) from their own libraries, with its groups:

    loraplus_lr_ratio  LoRA+: lora_A at learning_rate, lora_B and 1-D weights at learning_rate x ratio (torch's AdamW)
    use_galore         galore-torch's GaLoreAdamW: the linear layers' weights projected, the others plain AdamW
    use_apollo         apollo-torch's APOLLOAdamW, the same grouping
    use_badam          badam's BlockOptimizer (layer) or BlockOptimizerRatio (ratio) over AdamW
    use_adam_mini      adam-mini's Adam_mini
    use_muon           torch's Muon for the hidden 2-D weights (adjust_lr_fn match_rms_adamw: LLaMA-Factory's
                       0.2 x sqrt(max(rows, columns))), AdamW for the rest, both with weight_decay on every weight

A library that is not installed stops the run before any weights load, naming what to pip install. Optimizer state is
saved as plain tensors and values (a checkpoint loads without running code): GaLore's and APOLLO's projectors are
written as their tensors and rebuilt on resume; BAdam's block position is saved beside its Adam state.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from typing import Any

import torch
from torch import nn

from steadytune.config import RunConfig
from steadytune.errors import UserError, show_value
from steadytune.model.anatomy import text_config
from steadytune.model.load import model_skeleton

# key -> (module, pip package, what it is)
LIBRARIES = {"use_galore": ("galore_torch", "galore-torch", "GaLore"),
             "use_apollo": ("apollo_torch", "apollo-torch", "APOLLO"),
             "use_badam": ("badam", "badam", "BAdam"),
             "use_adam_mini": ("adam_mini", "adam-mini", "Adam-mini")}
PROJECTOR = "__projector__"


def chosen_optimizer(cfg: RunConfig) -> str:
    """The optimizer key the run set (config.py refuses two), or adamw."""
    t = cfg.train
    for key in ("use_galore", "use_apollo", "use_badam", "use_adam_mini", "use_muon"):
        if getattr(t, key):
            return key
    return "loraplus_lr_ratio" if cfg.method.loraplus_lr_ratio is not None else "adamw"


def check_optimizer_installed(cfg: RunConfig) -> None:
    """Before any weights load: the chosen optimizer's library imports here, or one line naming what to install."""
    key = chosen_optimizer(cfg)
    if key in LIBRARIES:
        module, package, name = LIBRARIES[key]
        if importlib.util.find_spec(module) is None:
            raise UserError(f"{key}: true needs {name}'s library: pip install {package} (or pip install "
                            "'steadytune[optimizers]')")
    if key == "use_muon" and not hasattr(torch.optim, "Muon"):
        raise UserError(f"use_muon: true needs torch.optim.Muon (torch 2.9 or later; this is torch {torch.__version__})")


def check_optimizer_keys_before_loading(cfg: RunConfig, model_task: str) -> None:
    """An optimizer library's keys that depend on the model (BAdam's start block, GaLore's / APOLLO's targets), checked
    on its meta skeleton before any weights load (build_optimizer checks them again on the loaded model)."""
    if chosen_optimizer(cfg) not in ("use_badam", "use_galore", "use_apollo"):
        return
    skeleton = model_skeleton(cfg.model, model_task)
    if skeleton is not None:
        check_optimizer_keys(cfg, skeleton)


def check_optimizer_keys(cfg: RunConfig, model: nn.Module) -> None:
    """The chosen library's keys against the model's own names (a meta skeleton before the weights load, then the
    loaded model): BAdam's badam_start_block among the blocks it makes, each GaLore / APOLLO target naming a linear
    layer. Out of range, the library failed mid-run (an IndexError in BAdam) or ran on nothing (GaLore on 0 weights,
    said only in the decisions table)."""
    t, key = cfg.train, chosen_optimizer(cfg)
    if key == "use_badam" and t.badam_mode == "layer":
        blocks = badam_blocks(model)
        if not blocks:
            raise UserError("use_badam: badam_mode layer trains one block of layers at a time, and BAdam finds no "
                            "`layers.N.` blocks in this model's parameter names: use badam_mode: ratio")
        if t.badam_start_block is not None and t.badam_start_block >= len(blocks):
            raise UserError(f"badam_start_block: {t.badam_start_block} is past this model's {len(blocks)} BAdam blocks "
                            f"(0..{len(blocks) - 1}, {blocks[0]} to {blocks[-1]}): give one of them, or leave it unset "
                            f"for badam_switch_mode {t.badam_switch_mode} to choose")
    if key in ("use_galore", "use_apollo"):
        name = key.removeprefix("use_")
        target = getattr(t, f"{name}_target")
        linear = [n for n, module in model.named_modules() if isinstance(module, nn.Linear)]
        items = _targets(model, target)
        unmatched = [item for item in items if not any(item in n for n in linear)]
        label = "APOLLO" if name == "apollo" else "GaLore"
        if not items or unmatched:
            raise UserError(f"{name}_target: {show_value(unmatched[0] if unmatched else target)} names no linear layer "
                            f"of this model ({', '.join(lf_linear_leaves(model)) or 'it has none'}; all: every one but "
                            f"the output head), so {label} would project nothing")


def badam_blocks(model: nn.Module) -> list[str]:
    """The blocks BAdam's layer mode makes of this model (its own inference from the parameter names, embeddings and
    head left out as our call leaves them), each named by its prefix."""
    from badam import BlockOptimizer  # optional dependency (pip install badam); check_optimizer_installed ran first

    names = [n for n, _ in model.named_parameters()]
    # infer_param_groups reads only the names it is given: called on the class, as BlockOptimizer.__init__ calls it
    return [block[0] for block in BlockOptimizer.infer_param_groups(None, names, False, False)]


def graph_blockers(cfg: RunConfig) -> dict[str, str]:
    """What in the method rules CUDA graphs out (training/speed_plan.py's graph_blockers)."""
    t, m, out = cfg.train, cfg.method, {}
    if t.use_badam:
        out["optimizer"] = "BAdam changes which weights train between steps"
    elif (t.use_galore and t.galore_layerwise) or (t.use_apollo and t.apollo_layerwise):
        out["optimizer"] = "the layer-wise optimizer steps inside the backward"
    if m.use_asft_loss:
        out["loss"] = "the ASFT loss runs the reference model inside the step"
    elif m.use_dft_loss or m.use_eaft_loss:
        out["loss"] = "the DFT/EAFT losses have not been tried under graphs"
    return out


def refuse_with_sharding(cfg: RunConfig, sharded: bool, label: str) -> None:
    key = chosen_optimizer(cfg)
    if sharded and key != "adamw":
        raise UserError(f"{key} with {label}: not supported (its parameter groups and state are not sharded here); "
                        "train on one process or with DDP (--nproc)")


# ---------------------------------------------------------------------------------------------------------
# Which weights decay, and which are the linear layers (transformers' and LLaMA-Factory's rules)
# ---------------------------------------------------------------------------------------------------------

def decay_parameter_names(model: nn.Module) -> set[str]:
    """transformers' Trainer.get_decay_parameter_names: every weight but LayerNorm modules' and names with bias or
    a norm in them (the default AdamW's groups)."""
    from transformers.trainer_pt_utils import get_parameter_names

    patterns = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
    return set(get_parameter_names(model, [nn.LayerNorm], patterns))


def lf_decay_parameter_names(model: nn.Module) -> set[str]:
    """LLaMA-Factory's _get_decay_parameter_names (its LoRA+, GaLore, APOLLO and BAdam groups): every weight but
    LayerNorm modules' and biases (RMSNorm weights decay there)."""
    from transformers.pytorch_utils import ALL_LAYERNORM_LAYERS
    from transformers.trainer_pt_utils import get_parameter_names

    return {name for name in get_parameter_names(model, ALL_LAYERNORM_LAYERS) if "bias" not in name}


def lf_linear_leaves(model: nn.Module) -> list[str]:
    """LLaMA-Factory's find_all_linear_modules: the leaf names of modules whose class is a Linear (not the head)."""
    names = set()
    for name, module in model.named_modules():
        if "lm_head" in name:
            continue
        kind = type(module).__name__
        if "Linear" in kind and "Embedding" not in kind:
            names.add(name.split(".")[-1])
    return sorted(names)


def _targets(model: nn.Module, target: str) -> list[str]:
    items = [t.strip() for t in target.split(",") if t.strip()]
    return lf_linear_leaves(model) if items == ["all"] else items


def projected_parameters(model: nn.Module, target: str) -> list[nn.Parameter]:
    """GaLore's / APOLLO's weights: the trainable matrices of nn.Linear modules whose name holds a target."""
    targets = _targets(model, target)
    out = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and any(t in name for t in targets):
            out += [p for p in module.parameters() if p.requires_grad and p.ndim > 1]
    return out


# ---------------------------------------------------------------------------------------------------------
# Building the optimizer
# ---------------------------------------------------------------------------------------------------------

def build_optimizer(model: nn.Module, cfg: RunConfig, device_type: str) -> tuple[torch.optim.Optimizer, str]:
    """-> (the optimizer over the model's trainable weights, a line saying which and with what groups)."""
    key = chosen_optimizer(cfg)
    check_optimizer_keys(cfg, model)
    return _BUILDERS[key](model, cfg, device_type)


def _adamw_kwargs(cfg: RunConfig) -> dict:
    t = cfg.train
    return {"lr": t.learning_rate, "betas": (t.adam_beta1, t.adam_beta2), "eps": t.adam_epsilon}


def _adamw(model: nn.Module, cfg: RunConfig, device_type: str):
    t = cfg.train
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    fused = (device_type == "cuda" and t.optim == "adamw_torch_fused") or None   # one kernel for all tensors
    v1 = "lf_v1" in cfg.decisions   # a LLaMA-Factory v1 file: v1 makes torch's AdamW over every trainable weight
    if t.weight_decay == 0 or cfg.method.deepspeed or v1:
        # one group: with weight_decay 0 transformers' two groups are the same numbers (DeepSpeed's state code keeps
        # one group's settings)
        groups = [{"params": [p for _, p in trainable], "weight_decay": t.weight_decay}]
        why = "AdamW" + (f" (weight_decay {t.weight_decay} on every weight: "
                         f"{'as LLaMA-Factory v1' if v1 else 'one group under DeepSpeed'})" if t.weight_decay else "")
    else:
        decay = decay_parameter_names(model)
        groups = [{"params": [p for n, p in trainable if n in decay], "weight_decay": t.weight_decay},
                  {"params": [p for n, p in trainable if n not in decay], "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
        why = f"AdamW, weight_decay {t.weight_decay} on every weight but biases and norms (transformers' groups)"
    return torch.optim.AdamW(groups, **_adamw_kwargs(cfg), fused=fused), why


def _loraplus(model: nn.Module, cfg: RunConfig, device_type: str):
    t, m = cfg.train, cfg.method
    decay = lf_decay_parameter_names(model)
    buckets: dict[str, list] = {"lora_a": [], "lora_b": [], "lora_b_nodecay": [], "embedding": []}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if "lora_embedding_B" in name:
            buckets["embedding"].append(param)
        elif "lora_B" in name or param.ndim == 1:
            buckets["lora_b" if name in decay else "lora_b_nodecay"].append(param)
        else:
            buckets["lora_a"].append(param)
    ratio_lr = t.learning_rate * m.loraplus_lr_ratio
    groups = [{"params": buckets["lora_a"], "lr": t.learning_rate, "weight_decay": t.weight_decay},
              {"params": buckets["lora_b"], "lr": ratio_lr, "weight_decay": t.weight_decay},
              {"params": buckets["lora_b_nodecay"], "lr": ratio_lr, "weight_decay": 0.0},
              {"params": buckets["embedding"], "lr": m.loraplus_lr_embedding, "weight_decay": t.weight_decay}]
    groups = [g for g in groups if g["params"]]
    fused = (device_type == "cuda" and t.optim == "adamw_torch_fused") or None
    why = (f"AdamW with LoRA+ groups: lora_A at {t.learning_rate:g}, lora_B at {ratio_lr:g} (x{m.loraplus_lr_ratio:g}), "
           f"LoRA embedding B at {m.loraplus_lr_embedding:g}")
    return torch.optim.AdamW(groups, **_adamw_kwargs(cfg), fused=fused), why


def _projected(model: nn.Module, cfg: RunConfig, kind: str):
    """GaLore or APOLLO, as LLaMA-Factory groups them: non-projected weights without and with decay, then the
    projected ones (with decay and the method's settings); layer-wise: one optimizer per weight, stepped in a hook."""
    t = cfg.train
    if kind == "galore":
        from galore_torch import GaLoreAdamW as cls  # optional dependency (pip install galore-torch)

        settings = {"rank": t.galore_rank, "update_proj_gap": t.galore_update_interval, "scale": t.galore_scale,
                    "proj_type": t.galore_proj_type}
        target, layerwise = t.galore_target, t.galore_layerwise
    else:
        from apollo_torch import APOLLOAdamW as cls  # optional dependency (pip install apollo-torch)

        settings = {"rank": t.apollo_rank, "proj": t.apollo_proj, "proj_type": t.apollo_proj_type,
                    "update_proj_gap": t.apollo_update_interval, "scale": t.apollo_scale,
                    "scale_type": t.apollo_scale_type, "scale_front": t.apollo_scale_front}
        target, layerwise = t.apollo_target, t.apollo_layerwise
    projected = projected_parameters(model, target)
    if not projected:   # its layers exist (check_optimizer_keys) but none of them trains
        raise UserError(f"{kind}_target: {target} matches no trainable weight: the layers it names are frozen "
                        f"(finetuning_type {cfg.method.finetuning_type}; freeze_trainable_layers chooses which train)")
    ids = {id(p) for p in projected}
    decay_names = lf_decay_parameter_names(model)
    decay, nodecay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad and id(param) not in ids:
            (decay if name in decay_names else nodecay).append(param)
    kwargs = {"lr": t.learning_rate, "betas": (t.adam_beta1, t.adam_beta2), "eps": t.adam_epsilon}
    name = "GaLore" if kind == "galore" else "APOLLO"
    said = ", ".join(f"{k} {v}" for k, v in settings.items())
    if not layerwise:
        groups = [{"params": nodecay, "weight_decay": 0.0}, {"params": decay, "weight_decay": t.weight_decay},
                  {"params": projected, "weight_decay": t.weight_decay, **settings}]
        return (CombinedOptimizer([cls([g for g in groups if g["params"]], **kwargs)]),
                f"{name} ({cls.__module__}.{cls.__name__}) on {len(projected)} weights ({said}); AdamW on the other "
                f"{len(decay) + len(nodecay)}")
    optimizers = {}
    for params, wd, extra in ((nodecay, 0.0, {}), (decay, t.weight_decay, {}), (projected, t.weight_decay, settings)):
        for param in params:
            optimizers[param] = cls([{"params": [param], "weight_decay": wd, **extra}], **kwargs)
    return (LayerwiseOptimizer(optimizers),
            f"{name} layer-wise: one optimizer per weight, stepped as soon as its gradient is complete, on "
            f"{len(projected)} projected weights ({said}) and {len(decay) + len(nodecay)} others; the logged "
            "grad_norm is 0 and max_grad_norm does not apply (the gradients are gone when the step ends), as in "
            "LLaMA-Factory")


def _badam(model: nn.Module, cfg: RunConfig, device_type: str):
    t = cfg.train
    decay_names = lf_decay_parameter_names(model)
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.requires_grad and n in decay_names]
    nodecay = [p for n, p in named if p.requires_grad and n not in decay_names]
    groups = [{"params": nodecay, "weight_decay": 0.0}, {"params": decay, "weight_decay": t.weight_decay}]
    kwargs = {"lr": t.learning_rate, "betas": (t.adam_beta1, t.adam_beta2), "eps": t.adam_epsilon}
    import warnings

    if t.badam_mode == "layer":
        from badam import BlockOptimizer  # optional dependency (pip install badam)

        # -1 means never switch (LLaMA-Factory's help); BAdam 1.4 tests (step + 1) % every == 0, which % -1 makes true
        # at every step: it switched at every step instead
        every = sys.maxsize if t.badam_switch_interval == -1 else t.badam_switch_interval
        with warnings.catch_warnings():   # "BAdam expects a bf16 model": the weights stay fp32 here (module docstring)
            warnings.simplefilter("ignore")
            optimizer = BlockOptimizer(base_optimizer=torch.optim.AdamW(groups, **kwargs), named_parameters_list=named,
                                       block_prefix_list=None, switch_block_every=every,
                                       start_block=t.badam_start_block, switch_mode=t.badam_switch_mode,
                                       verbose=t.badam_verbose)
        _keep_badam_position(optimizer)
        switching = ("one block throughout" if t.badam_switch_interval == -1 else
                     f"{t.badam_switch_mode}, a new block every {t.badam_switch_interval} steps")
        return optimizer, (f"BAdam layer-wise: AdamW on one block of {optimizer.block_num} at a time ("
                           f"{switching}); embeddings "
                           "and the output head stay frozen, as BAdam's blocks leave them out")
    from badam import BlockOptimizerRatio  # optional dependency (pip install badam)

    optimizer = BlockOptimizerRatio(param_groups=groups, named_parameters_list=named,
                                    update_ratio=t.badam_update_ratio, mask_mode=t.badam_mask_mode,
                                    verbose=t.badam_verbose, include_embedding=False, **kwargs)
    return optimizer, f"BAdam ratio-wise: {t.badam_update_ratio:g} of each weight updated ({t.badam_mask_mode})"


def _adam_mini(model: nn.Module, cfg: RunConfig, device_type: str):
    from adam_mini import Adam_mini  # optional dependency (pip install adam-mini)

    t, config = cfg.train, text_config(model)   # a vision-language model's sizes are its language model's
    optimizer = Adam_mini(named_parameters=model.named_parameters(), lr=t.learning_rate,
                          betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_epsilon, weight_decay=t.weight_decay,
                          model_sharding=False, dim=getattr(config, "hidden_size", None),
                          n_heads=getattr(config, "num_attention_heads", None),
                          n_kv_heads=getattr(config, "num_key_value_heads", None), verbose=False)
    return optimizer, "Adam-mini: one second moment per attention head (q, k), per neuron (v, o, MLP) or token " \
                      "(embeddings, head), AdamW's for biases"


def _muon(model: nn.Module, cfg: RunConfig, device_type: str):
    t = cfg.train
    muon, adamw = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            hidden = param.ndim == 2 and "embed" not in name and "lm_head" not in name
            (muon if hidden else adamw).append(param)
    optimizers = []
    if muon:
        optimizers.append(torch.optim.Muon(muon, lr=t.learning_rate, weight_decay=t.weight_decay, momentum=0.95,
                                           nesterov=True, ns_steps=5, adjust_lr_fn="match_rms_adamw"))
    if adamw:
        optimizers.append(torch.optim.AdamW(adamw, lr=t.learning_rate, betas=(t.adam_beta1, t.adam_beta2),
                                            eps=t.adam_epsilon, weight_decay=t.weight_decay))
    return CombinedOptimizer(optimizers), (f"Muon (torch.optim.Muon: momentum 0.95, Nesterov, 5 Newton-Schulz steps, "
                                           f"learning rate x 0.2 sqrt(max(rows, columns))) on {len(muon)} hidden "
                                           f"matrices, AdamW on the other {len(adamw)} weights")


_BUILDERS = {"adamw": _adamw, "loraplus_lr_ratio": _loraplus, "use_galore": lambda m, c, d: _projected(m, c, "galore"),
             "use_apollo": lambda m, c, d: _projected(m, c, "apollo"), "use_badam": _badam,
             "use_adam_mini": _adam_mini, "use_muon": _muon}


# ---------------------------------------------------------------------------------------------------------
# Optimizers made of several, and state a checkpoint can hold
# ---------------------------------------------------------------------------------------------------------

class CombinedOptimizer(torch.optim.Optimizer):
    """Several optimizers stepped as one (Muon's two, or one whose state needs plain-value saving): their param
    groups are this optimizer's, so one schedule (and the guard's learning-rate backoff) drives them all."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = list(optimizers)
        super().__init__([torch.zeros(1)], {"lr": optimizers[0].defaults.get("lr", 0.0)})
        self._link()

    def _link(self) -> None:
        self.param_groups = [g for o in self.optimizers for g in o.param_groups]
        self.state = _MergedState(self.optimizers)

    @torch.no_grad()
    def step(self, closure=None):
        for optimizer in self.optimizers:
            optimizer.step()
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"optimizers": [plain_state(o.state_dict()) for o in self.optimizers]}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict.get("optimizers")
        if not isinstance(saved, list) or len(saved) != len(self.optimizers):
            raise ValueError("the checkpoint's optimizer state is of another optimizer")
        for optimizer, state in zip(self.optimizers, saved):
            optimizer.load_state_dict(state)
            rebuild_projectors(optimizer)
        self._link()


class LayerwiseOptimizer(CombinedOptimizer):
    """LLaMA-Factory's layer-wise GaLore / APOLLO: one optimizer per weight, stepped (and its gradient freed) by a
    hook as soon as that weight's gradient is complete; `step` and `zero_grad` of the loop do nothing."""

    def __init__(self, per_param: dict[nn.Parameter, torch.optim.Optimizer]):
        super().__init__(list(per_param.values()))
        for param, optimizer in per_param.items():
            param.register_post_accumulate_grad_hook(_step_now(optimizer))

    def step(self, closure=None):
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None


def _step_now(optimizer: torch.optim.Optimizer):
    def hook(param: nn.Parameter) -> None:
        if param.grad is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return hook


class _MergedState(dict):
    """The inner optimizers' per-weight state, read as one mapping (checkpoint size estimates read it)."""

    def __init__(self, optimizers):
        super().__init__()
        for optimizer in optimizers:
            self.update(optimizer.state)


def plain_state(state_dict: dict) -> dict:
    """An optimizer state_dict whose projector objects (GaLore, APOLLO) are written as dicts of their attributes,
    so that torch.load(weights_only=True) reads it back."""
    out = dict(state_dict)
    out["state"] = {index: {k: _plain(v) for k, v in entry.items()} for index, entry in state_dict["state"].items()}
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, "ortho_matrix") and hasattr(value, "update_proj_gap"):
        return {PROJECTOR: f"{type(value).__module__}:{type(value).__qualname__}", **vars(value)}
    return value


def rebuild_projectors(optimizer: torch.optim.Optimizer) -> None:
    """After load_state_dict: projector dicts back into the library's projector objects."""
    for entry in optimizer.state.values():
        for key, value in list(entry.items()):
            if isinstance(value, dict) and PROJECTOR in value:
                module, _, name = str(value[PROJECTOR]).partition(":")
                if not re.fullmatch(r"(galore_torch|apollo_torch)(\.\w+)*", module):
                    raise ValueError(f"the checkpoint names a projector of {module!r}, not of GaLore or APOLLO")
                cls = getattr(importlib.import_module(module), name)
                projector = cls.__new__(cls)
                projector.__dict__.update({k: v for k, v in value.items() if k != PROJECTOR})
                entry[key] = projector


def _keep_badam_position(optimizer) -> None:
    """BAdam's state_dict is its Adam's only: add the block it is on and its step, so a resume goes on with the
    same block (its Adam state belongs to that block's weights)."""
    base = optimizer.base_optimizer

    def active_block() -> int:   # switch_trainable_params moves current_block_idx on to the next block
        return next(i for i, block in enumerate(optimizer.block_prefix_list)
                    if block + optimizer.active_modules == optimizer.active_param_prefixs)

    def state_dict() -> dict:
        return {"base": base.state_dict(), "active_block": active_block(), "global_step": optimizer.global_step}

    def load_state_dict(state: dict) -> None:
        optimizer.current_block_idx = int(state["active_block"])
        optimizer.global_step = int(state["global_step"])
        optimizer.switch_trainable_params(verbose=0)   # this block's weights trainable, fp32 copies from them
        base.load_state_dict(state["base"])

    optimizer.state_dict = state_dict
    optimizer.load_state_dict = load_state_dict


def may_train(model: nn.Module) -> list[nn.Parameter]:
    """The weights the optimizer may update (BAdam switches requires_grad between steps: this is taken before)."""
    return [p for p in model.parameters() if p.requires_grad]
