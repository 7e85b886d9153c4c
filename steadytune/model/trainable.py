"""What trains on a loaded base: a fresh adapter (LoRA, OFT) or the weights opened (full, freeze), or an existing
adapter continued (LLaMA-Factory's adapter_name_or_path); PiSSA's starting adapter kept for its conversion at the
end; and LoRA's two forward speed-ups that change no value (model/kernels.py, model/lora_scaling.py). Each choice
is recorded with cfg.decide, as the recipe's other decisions are."""

from __future__ import annotations

import torch

from steadytune.config import RunConfig
from steadytune.model.kernels import skip_lora_input_cast
from steadytune.model.lora import attach_adapter, load_trained_adapter, save_pissa_start
from steadytune.model.lora_scaling import scale_before_lora_b


def continues_adapter(cfg: RunConfig) -> bool:
    """An existing LoRA adapter trains on, instead of a fresh one."""
    return bool(cfg.model.adapter_name_or_path) and cfg.method.finetuning_type == "lora"


def make_trainable(model: torch.nn.Module, cfg: RunConfig, base_dtype: torch.dtype,
                   save_start: bool) -> torch.nn.Module:
    """The model with what trains attached (the adapter) or opened (full, freeze). `save_start`: this process
    writes PiSSA's starting adapter (the main process), which pissa_converted is computed against at the end."""
    if continues_adapter(cfg):
        model = load_trained_adapter(model, cfg.model.adapter_name_or_path, is_trainable=True,
                                     allow_pickle=cfg.model.allow_pickle_weights)
        cfg.decide("adapter_name_or_path", cfg.model.adapter_name_or_path, "training continues from this adapter "
                   "(its rank and targets; lora_* keys do not apply)")
    else:
        model = attach_adapter(model, cfg)
        if cfg.method.pissa_convert and cfg.method.pissa_init and save_start:
            save_pissa_start(model, cfg.train.output_dir)
    if base_dtype != torch.float32 and cfg.method.finetuning_type == "lora" and not cfg.method.use_dora:
        # Every forward of this model runs under autocast (training, eval loss, scoring): see model/kernels.py.
        # (Plain LoRA only: DoRA's own forward has not been measured without the cast.)
        _, why = skip_lora_input_cast(model)
        cfg.decide("lora_input_cast", "off", why)
    if cfg.method.finetuning_type == "lora":
        changed, why = scale_before_lora_b(model)
        if changed:
            cfg.decide("lora_scaling", "before lora_B", why)
    return model
