"""The reference model of DPO, KTO and GRPO: where the log-probabilities the policy is compared against come from.

- LoRA without `ref_model` (the default): the model being trained with its adapter switched off
  (`peft`'s `disable_adapter()`), which *is* the base model: no second copy in memory, one extra forward without
  gradients. LLaMA-Factory and TRL do the same.
- `ref_model` (and `ref_model_adapters`): that model, loaded frozen next to the policy.
- Full fine-tuning without `ref_model`: a frozen copy of `model_name_or_path` (the policy's own weights move).

The reference runs under torch.no_grad(), without dropout (the preference stages switch it off), on the same
batch as the policy.
"""

from __future__ import annotations

import dataclasses

import torch

from steadytune.config import RunConfig
from steadytune.errors import UserError
from steadytune.model.load import load_model_and_tokenizer
from steadytune.model.lora import load_trained_adapter
from steadytune.stages.logprobs import sequence_logprobs, token_logprobs


class Reference:
    """Reference log-probabilities for a batch: `sequence_logprobs(policy, batch, n, prefix)` -> (sums, counts)."""

    def __init__(self, model: torch.nn.Module | None = None):
        # Kept out of the nn.Module tree of the objective (a plain list), so that Accelerate/DDP never wraps or
        # synchronises a frozen model, and checkpoints hold only what is trained.
        self._frozen = [model] if model is not None else []

    @property
    def separate(self) -> torch.nn.Module | None:
        return self._frozen[0] if self._frozen else None

    @torch.no_grad()
    def sequence_logprobs(self, policy: torch.nn.Module, batch: dict, n_sequences: int, prefix: str = ""):
        if self.separate is not None:
            return sequence_logprobs(self.separate, batch, n_sequences, prefix)
        # Dropout is off in the preference stages (objectives.disable_dropout), so train mode is deterministic too.
        with policy.disable_adapter():
            return sequence_logprobs(policy, batch, n_sequences, prefix)

    @torch.no_grad()
    def token_logprobs(self, policy: torch.nn.Module, batch: dict, temperature: float = 1.0) -> torch.Tensor:
        """Each answer token's log-probability under the reference, in logprobs.token_logprobs's order (GRPO)."""
        if self.separate is not None:
            return token_logprobs(self.separate, batch, temperature)[0]
        with policy.disable_adapter():
            return token_logprobs(policy, batch, temperature)[0]


def build_reference(model: torch.nn.Module, cfg: RunConfig) -> Reference:
    """The reference for this run (module docstring), with the choice recorded in run_config.yaml's decisions."""
    m = cfg.method
    if m.ref_model:
        ref = _load_frozen(model, cfg, m.ref_model, m.ref_model_adapters)
        cfg.decide("ref_model", m.ref_model, "ref_model was set" + (f", with adapters {m.ref_model_adapters}"
                                                                    if m.ref_model_adapters else ""))
        return Reference(ref)
    if m.finetuning_type == "lora":
        if not hasattr(model, "disable_adapter"):
            raise UserError("ref_model: the model has no LoRA adapter to switch off; set ref_model")
        why = "the trained model with its LoRA adapter switched off (= the base model; no second copy in memory)"
        if cfg.model.adapter_name_or_path:
            why += "; training continues adapter_name_or_path, so the reference is the base without that adapter"
        cfg.decide("ref_model", "adapter disabled", why)
        return Reference()
    cfg.decide("ref_model", cfg.model.model_name_or_path, "full fine-tuning: a frozen copy of the starting model")
    return Reference(_load_frozen(model, cfg, cfg.model.model_name_or_path, None))


def _load_frozen(policy: torch.nn.Module, cfg: RunConfig, path: str, adapters: str | None) -> torch.nn.Module:

    weight = next(policy.parameters())
    precision = cfg.decisions.get("precision", {}).get("value", "fp32")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    attn = getattr(policy.config, "_attn_implementation", None) or "sdpa"
    ref, _ = load_model_and_tokenizer(dataclasses.replace(cfg.model, model_name_or_path=path), dtype, attn,
                                      weight.device)
    if adapters:
        ref = load_trained_adapter(ref, adapters)
    head, policy_head = ref.get_output_embeddings(), policy.get_output_embeddings()
    if head.weight.shape[0] != policy_head.weight.shape[0]:
        raise UserError(f"ref_model: {path} has a vocabulary of {head.weight.shape[0]} tokens, the trained model "
                        f"{policy_head.weight.shape[0]}; the reference must share the tokenizer")
    ref.eval()
    ref.requires_grad_(False)
    return ref
