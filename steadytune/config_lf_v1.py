"""LLaMA-Factory's v1 config schema (USE_V1=1; its examples/v1), read as v1 reads it and translated into our keys.

v1 renamed and regrouped v0's keys (model, peft_config, micro_batch_size, dist_config, ...) and changed some defaults.
config.py loads a v1 file through `translate_v1`, which maps each v1 key onto ours where the feature exists here,
refuses a feature we do not have naming the key, fills v1's own defaults, and returns the decisions that say how the
file was read (they land in run_config.yaml). It stands below config.py: it knows our key names, not our sections,
and imports only errors, so config may import it.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from steadytune.errors import ConfigError, show_value

# How a plugin setting given as text (a JSON string, as v1's command line takes it) is read: config passes its bounded
# YAML parser, so that this module need not import config.
ParseText = Callable[[str, str], Any]

# v1's own keys (src/llamafactory/v1/config/*.py: ModelArguments, DataArguments, TrainingArguments, SampleArguments)
# that the v0 schema does not have; any of them makes a file a v1 file. (Its cp_size and cp_mode are keys of ours
# too, read alike in either schema, so they do not make a file v1.)
V1_KEYS = {"model", "model_class", "custom_chat_template", "init_config", "peft_config", "kernel_config", "quant_config",
           "train_dataset", "micro_batch_size", "global_batch_size", "batching_strategy", "batching_workers",
           "enable_activation_checkpointing", "dist_config", "dp_size", "mp_replicate_size", "mp_shard_size", "dist_timeout", "optim_config", "lr_scheduler_config", "full_determinism", "save_epochs",
           "save_ckpt_as_hf", "sample_backend"}
# v1's defaults where they are not v0's (v1 TrainingArguments / SampleArguments; its optimizer is torch's AdamW with
# torch's defaults and its schedule a constant learning rate unless lr_scheduler_config says otherwise).
V1_DEFAULTS = {"per_device_train_batch_size": 1, "learning_rate": 1e-4, "num_train_epochs": 3, "bf16": True,
               "logging_steps": 1, "gradient_checkpointing": True, "lr_scheduler_type": "constant", "warmup_steps": 0,
               "weight_decay": 0.01, "max_new_tokens": 128}
_V1_ATTENTION = {"sdpa": "sdpa", "eager": "eager", "flash_attention_2": "fa2"}


def is_v1_config(raw: dict) -> bool:
    return any(str(key) in V1_KEYS for key in raw)


def _plugin(raw: dict, key: str, where: str, parse_text: ParseText) -> dict | None:
    """A v1 plugin setting ({name: ..., ...}, or a JSON string of one), as v1's get_plugin_config reads it."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().startswith("{"):
        value = parse_text(value, f"{where}: {key}")
    if not isinstance(value, dict) or "name" not in value:
        raise ConfigError(f"{where}: {key}: a v1 plugin setting needs a mapping with a `name` (got {show_value(value)})")
    return dict(value)


# v1's Muon plugin (plugins/trainer_plugins/optimizers/optimizer.py at the examples' commit): its own learning rate
# and weight decay (it never reads learning_rate), the Muon constructor's defaults, AdamW's betas (0.9, 0.95).
_V1_MUON = {"lr": ("learning_rate", 1e-3),  # v1's Muon ignores the file's learning_rate
            "wd": ("weight_decay", 0.1), "adamw_eps": ("adam_epsilon", 1e-8)}
_V1_MUON_FIXED = {"momentum": 0.95, "nesterov": True, "ns_steps": 5}   # what use_muon's torch.optim.Muon runs with


def v1_optimizer_keys(optim: dict, peft: dict | None, refuse) -> list[tuple[str, Any, str]]:
    """v1's optim_config -> (our key, value, how it was read). Muon only, the one plugin v1 has; its settings at
    the values use_muon runs with, or refused naming the setting."""
    if optim["name"] != "muon":
        refuse(f"optim_config: {optim['name']}", "v1's optimizer plugin here is muon")
    if peft is not None and peft["name"] == "lora":
        refuse("optim_config: muon with peft_config: lora", "v1's Muon moves LoRA's factors to AdamW, v0's "
               "(use_muon) orthogonalises them; steadytune has v0's rule")
    unknown = set(optim) - {"name", "adamw_betas", *_V1_MUON, *_V1_MUON_FIXED}
    if unknown:
        refuse(f"optim_config.{sorted(map(str, unknown))[0]}", "not a setting of v1's Muon")
    for key, default in _V1_MUON_FIXED.items():
        if optim.get(key, default) != default:
            refuse(f"optim_config.{key}: {optim[key]}", f"use_muon runs torch.optim.Muon with {key} {default}")
    out = [("use_muon", True, "optim_config muon -> use_muon: true")]
    for key, (ours, default) in _V1_MUON.items():
        out.append((ours, optim.get(key, default), f"optim_config.{key} {optim.get(key, default)} -> {ours}" +
                    ("" if key in optim else " (v1's Muon default)") +
                    (" (v1's Muon never reads learning_rate)" if key == "lr" else "")))
    betas = optim.get("adamw_betas", [0.9, 0.95])
    if not (isinstance(betas, (list, tuple)) and len(betas) == 2):
        refuse(f"optim_config.adamw_betas: {betas}", "two numbers, [beta1, beta2]")
    out += [("adam_beta1", betas[0], f"optim_config.adamw_betas -> adam_beta1 {betas[0]}"),
            ("adam_beta2", betas[1], f"optim_config.adamw_betas -> adam_beta2 {betas[1]}")]
    return out


def translate_v1(raw: dict, where: str, parse_text: ParseText) -> tuple[dict, list[tuple[str, Any, str]]]:
    """A LLaMA-Factory v1 config -> our flat keys, and the decisions that say how it was read. v1's keys map onto
    ours where the feature exists here; a feature we do not have is refused naming the key; v1's defaults (which
    are not v0's: micro_batch_size 1, learning_rate 1e-4, bf16, checkpointing on, a constant learning rate, AdamW's
    torch defaults) fill the keys the file leaves out. Keys of our schema given beside (overrides) win.
    `parse_text(text, where)` reads a plugin setting given as text (config's bounded YAML parser)."""
    out = {k: v for k, v in raw.items() if str(k) not in V1_KEYS}
    read: list[str] = []

    def refuse(key: str, why: str) -> None:
        raise ConfigError(f"{where}: not supported: {key} ({why}; a LLaMA-Factory v1 config)")

    def put(key: str, value: Any, said: str) -> None:
        if key not in out:
            out[key] = value
            read.append(said)

    if "model" in raw:
        put("model_name_or_path", raw["model"], "model -> model_name_or_path")
    model_class = str(getattr(raw.get("model_class"), "value", raw.get("model_class") or "llm"))
    if model_class != "llm":
        refuse(f"model_class: {model_class}", "only causal language models (model_class: llm) are trained here")
    if raw.get("custom_chat_template"):
        refuse("custom_chat_template", "give the template by name (template: qwen3, llama3, ...)")
    if "flash_attn" in raw:
        attention = _V1_ATTENTION.get(str(raw["flash_attn"]))
        if attention is None:
            raise ConfigError(f"{where}: flash_attn: invalid value {show_value(raw['flash_attn'])} (v1 takes one of "
                              f"{', '.join(_V1_ATTENTION)})")
        out["flash_attn"] = attention
    init = _plugin(raw, "init_config", where, parse_text)
    if init is not None:
        read.append(f"init_config {init['name']}: where the weights are first made; changes no number here")
    # peft_config: none = full fine-tuning; lora with v1's names; freeze with v0's names
    peft = _plugin(raw, "peft_config", where, parse_text)
    if peft is None:
        put("finetuning_type", "full", "no peft_config -> finetuning_type: full")
    elif peft["name"] == "freeze":   # v1's get_freeze_model: v0's rule, with v0's key names
        put("finetuning_type", "freeze", "peft_config freeze -> finetuning_type: freeze")
        for key, value in peft.items():
            if key == "name" or value is None:
                continue
            if key not in ("freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules"):
                refuse(f"peft_config.{key}", "a freeze setting steadytune does not have")
            put(key, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value, f"peft_config.{key}")
    elif peft["name"] != "lora":
        refuse(f"peft_config: {peft['name']}", f"finetuning_type: {peft['name']} is not supported; use lora, freeze "
               "or full")
    else:
        put("finetuning_type", "lora", "peft_config lora -> finetuning_type: lora")
        names = {"r": "lora_rank", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
                 "target_modules": "lora_target", "adapter_name_or_path": "adapter_name_or_path",
                 "export_dir": "export_dir", "export_size": "export_size", "infer_dtype": "infer_dtype",
                 "use_rslora": "use_rslora", "use_dora": "use_dora"}
        for key, value in peft.items():
            if key == "name":
                continue
            if key not in names:
                refuse(f"peft_config.{key}", "a LoRA setting steadytune does not have")
            if key == "target_modules" and isinstance(value, (list, tuple)):
                value = ",".join(map(str, value))
            put(names[key], value, f"peft_config.{key} -> {names[key]}")
    kernel = _plugin(raw, "kernel_config", where, parse_text)
    if kernel is not None and kernel["name"] != "auto":
        if kernel["name"] != "liger_kernel" or set(kernel) != {"name"}:
            refuse(f"kernel_config: {kernel['name']}", "kernels other than liger_kernel are not supported")
        put("use_liger_kernel", True, "kernel_config liger_kernel -> use_liger_kernel: true")
    quant = _plugin(raw, "quant_config", where, parse_text)
    if quant is not None:
        # v1's quantisation plugin: bnb (or auto, which picks bnb for an unquantised model) with quantization_bit.
        if quant["name"] not in ("bnb", "auto"):
            refuse(f"quant_config: {quant['name']}", "on-the-fly quantisation is bitsandbytes only (name: bnb)")
        put("quantization_method", "bnb", f"quant_config {quant['name']} -> quantization_method: bnb")
        for key, value in quant.items():
            if key == "name":
                continue
            if key not in ("quantization_bit", "quantization_type", "double_quantization"):
                refuse(f"quant_config.{key}", "a quantisation setting steadytune does not have")
            put(key, value, f"quant_config.{key} -> {key}")
    dist = _plugin(raw, "dist_config", where, parse_text)
    if dist is not None:
        if dist["name"] == "fsdp2":
            if dist.get("dcp_path"):
                refuse("dist_config.dcp_path", "loading weights from a distributed checkpoint is not supported")
            put("fsdp", "full_shard auto_wrap", "dist_config fsdp2 -> fsdp: full_shard auto_wrap (FSDP2; one process "
                "runs unsharded)")
        elif dist["name"] == "deepspeed":
            if not dist.get("config_file"):
                raise ConfigError(f"{where}: dist_config: deepspeed needs config_file")
            put("deepspeed", dist["config_file"], "dist_config deepspeed -> deepspeed: its config_file")
        elif dist["name"] == "fsdpturbo":
            # v1's expert-parallel plugin: routed experts split over ep_size processes, the rest sharded (FSDP);
            # here the experts split the same way (distributed/expert_parallel.py), the rest data parallel
            for key in dist:
                if key not in ("name", "ep_size", "ep_dispatcher"):
                    refuse(f"dist_config.{key}", "a setting of v1's fsdpturbo steadytune does not have")
            if str(dist.get("ep_dispatcher", "eager")) != "eager":
                refuse(f"dist_config.ep_dispatcher: {dist['ep_dispatcher']}", "tokens are dispatched with plain "
                       "all-to-all (eager)")
            put("ep_size", int(dist.get("ep_size", 1)), f"dist_config fsdpturbo ep_size {dist.get('ep_size', 1)} -> "
                "ep_size (routed experts split over the processes; the rest of the model data parallel, not "
                "sharded: add fsdp to shard it)")
        else:
            refuse(f"dist_config: {dist['name']}", "use fsdp2, deepspeed or fsdpturbo")
    for key, default in (("dp_size", None), ("mp_replicate_size", 1), ("mp_shard_size", None)):
        if raw.get(key, default) != default:
            refuse(f"{key}: {raw[key]}", "model-parallel meshes are not supported; processes are data parallel (with "
                   "FSDP2 or DeepSpeed sharding), cp_size of them splitting each sequence")
    if "dist_timeout" in raw:
        put("ddp_timeout", raw["dist_timeout"], "dist_timeout -> ddp_timeout")
    if "train_dataset" in raw:
        put("dataset", raw["train_dataset"], "train_dataset -> dataset (a v1 dataset YAML is read as v1 reads it)")
        put("dataset_dir", ".", "dataset_dir: . (v1 paths are relative to where it runs)")
    if "micro_batch_size" in raw:
        put("per_device_train_batch_size", raw["micro_batch_size"], "micro_batch_size -> per_device_train_batch_size")
    if raw.get("global_batch_size") is not None:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        micro = int(raw.get("micro_batch_size") or 1)
        accumulation, left = divmod(int(raw["global_batch_size"]), micro * world)
        if accumulation < 1 or left:
            raise ConfigError(f"{where}: global_batch_size {raw['global_batch_size']} is not a multiple of "
                              f"micro_batch_size {micro} x {world} processes")
        put("gradient_accumulation_steps", accumulation, f"global_batch_size {raw['global_batch_size']} / "
            f"(micro_batch_size {micro} x {world} processes) -> gradient_accumulation_steps {accumulation}")
    strategy = str(getattr(raw.get("batching_strategy"), "value", raw.get("batching_strategy") or "normal"))
    budget = int(raw.get("cutoff_len", 2048)) * int(raw.get("micro_batch_size") or 1)
    if strategy == "dynamic_batching":
        put("max_tokens_per_batch", budget, f"batching_strategy dynamic_batching -> max_tokens_per_batch {budget} "
            "(cutoff_len x micro_batch_size; v1 counts padded tokens, steadytune real ones)")
        put("packing", False, "batching_strategy dynamic_batching: padded rows")
    elif strategy == "dynamic_padding_free":
        put("max_tokens_per_batch", budget, f"batching_strategy dynamic_padding_free -> max_tokens_per_batch {budget} "
            "(cutoff_len x micro_batch_size real tokens, as v1)")
        put("packing", True, "batching_strategy dynamic_padding_free -> packing: true")
    elif strategy == "padding_free":
        read.append("batching_strategy padding_free: micro_batch_size examples a micro-batch in one packed row, as "
                    "steadytune's default packing lays them out (CPU, CUDA; padded elsewhere: the same examples)")
    elif strategy != "normal":
        raise ConfigError(f"{where}: batching_strategy: invalid value {show_value(strategy)} (normal, padding_free, "
                          "dynamic_batching, dynamic_padding_free)")
    if "enable_activation_checkpointing" in raw:
        put("gradient_checkpointing", bool(raw["enable_activation_checkpointing"]),
            "enable_activation_checkpointing -> gradient_checkpointing")
    optim = _plugin(raw, "optim_config", where, parse_text)
    if optim is not None:
        for key, value, said in v1_optimizer_keys(optim, peft, refuse):
            out[key] = value   # v1's optimizer plugin reads only optim_config: the file's own keys give way
            read.append(said)
    if _plugin(raw, "lr_scheduler_config", where, parse_text) is not None:
        refuse("lr_scheduler_config", "set lr_scheduler_type and warmup_ratio instead")
    if raw.get("save_epochs") is not None:
        refuse("save_epochs", "use save_steps")
    put("overwrite_output_dir", True, "overwrite_output_dir: true (v1 writes into output_dir whatever it holds; "
        "steadytune still replaces only its own run files)")
    if raw.get("resume_from_checkpoint") == "auto":
        out["resume_from_checkpoint"] = True
    if "sample_backend" in raw:
        backend = str(getattr(raw["sample_backend"], "value", raw["sample_backend"]))
        put("infer_backend", {"hf": "huggingface"}.get(backend, backend), "sample_backend -> infer_backend")
    for key in ("batching_workers", "full_determinism", "save_ckpt_as_hf"):
        if key in raw:
            read.append(f"{key}: changes no number here")
    defaults = []
    for key, value in V1_DEFAULTS.items():
        if key not in out:
            out[key] = value
            defaults.append(f"{key} {value}")
    if "template" not in out:
        out["template"] = "auto"
        read.append("template auto (v1 renders with the tokenizer's own chat template; without one, v1 uses ChatML "
                    "and steadytune `empty`)")
    notes = [("lf_v1", "read", "a LLaMA-Factory v1 config: " + "; ".join(read)),
             ("lf_v1_defaults", "applied", "v1's defaults where the file is silent: " + ", ".join(defaults) +
              " (v1 saves no checkpoint unless save_steps; steadytune every save_steps, 500)"),
             ("lf_v1_differences", "printed", "v1 joins an alpaca row's instruction and input with nothing between them, "
              "steadytune (as v0) with a newline; v1 trains a multi-turn conversation as one example per answer, "
              "steadytune as one example")]
    return out, notes
