"""The unsloth arm's child: Unsloth's FastLanguageModel + get_peft_model and the trainer settings its notebooks
recommend, on bench's model folder and examples (already token ids), timed by peer_timing.StepTimer.

Run by peers.py as `UNSLOTH_PYTHON steadytune/bench/unsloth_child.py SPEC.json RESULT.json`: Unsloth patches
transformers, peft and TRL when it is imported and pins versions of its own, so it gets a process (and, if it needs
one, a Python) of its own. It imports nothing from steadytune. Written for TRL >= 0.20 (SFTConfig's max_length,
packing with padding-free rows, completion_only_loss).

Settings: bf16, LoRA on the seven projections of every layer (as peft's all-linear in the other arms), Unsloth's
own gradient checkpointing ("unsloth", offloaded activations), TRL's packing (its trainer supports it), the batch of
packed rows the parent's attempt names (rows holding bench's token budget, fewer if that runs out of memory:
peers.unsloth_attempts), fused AdamW as
in every other arm (Unsloth's notebooks use 8-bit AdamW to save memory; for LoRA its state is small either way).
"""

from __future__ import annotations

# isort: off
import unsloth  # noqa: F401 - first: Unsloth must patch transformers, peft and TRL before they are imported
# isort: on

import json
import os
import sys
from pathlib import Path

import torch
from peer_timing import StepTimer, run_guarded, versions  # the script's folder is on sys.path (peer_timing says why)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# A mixture of experts, as Unsloth's Qwen3-MoE notebook (nb/Qwen3_MoE.ipynb) sets it up: the seven projections and
# the fused experts' gate_up_proj; Unsloth then adds peft target_parameters for the experts (mlp.experts.gate_up_proj,
# mlp.experts.down_proj) and trains them with its own grouped kernels ("Split LoRA"), the backend picked by
# UNSLOTH_MOE_BACKEND or, unset, by Unsloth (grouped_mm where torch's grouped matmul runs); the notebook's
# use_gradient_checkpointing = True.
MOE_LORA_TARGETS = LORA_TARGETS + ["gate_up_proj"]


def moe_backend() -> str | None:
    """The MoE backend Unsloth picked (unsloth_zoo's select_moe_backend), or None where this Unsloth has none."""
    try:
        from unsloth_zoo.temporary_patches.moe_utils import select_moe_backend
    except ImportError:
        return None
    try:
        return select_moe_backend()
    except Exception as e:  # noqa: BLE001 - only reported
        return f"unknown ({type(e).__name__}: {e})"


def load_examples(path: str):
    from datasets import Dataset

    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    return Dataset.from_list(rows)  # input_ids + completion_mask: TRL trains it as it is, without a tokenizer pass


def target_parameters(model) -> list[str]:
    """The peft target_parameters Unsloth's get_peft_model chose (the fused experts it adapts)."""
    config = getattr(model, "peft_config", {}).get("default")
    return sorted(getattr(config, "target_parameters", None) or [])


def main(spec: dict, result_path: str) -> None:
    from torch.utils.data import SequentialSampler
    from trl import SFTConfig, SFTTrainer
    from unsloth import FastLanguageModel

    batch = spec["attempt"]["batch"]
    quantized = spec.get("quantization_bit") == 4  # bench --quantization-bit 4: Unsloth's own QLoRA (nf4)
    moe = bool(spec.get("moe"))
    targets = MOE_LORA_TARGETS if moe else LORA_TARGETS
    checkpointing = True if moe else "unsloth"   # the MoE notebook's setting; elsewhere Unsloth's offloaded one
    model, tokenizer = FastLanguageModel.from_pretrained(model_name=spec["model_dir"], max_seq_length=spec["cutoff_len"],
                                                         dtype=torch.bfloat16, load_in_4bit=quantized)
    model = FastLanguageModel.get_peft_model(model, r=spec["lora_rank"], lora_alpha=spec["lora_alpha"],
                                             lora_dropout=0.0, bias="none", target_modules=targets,
                                             use_gradient_checkpointing=checkpointing, random_state=0)
    config = SFTConfig(
        output_dir=str(Path(spec["work_dir"]) / "unsloth_output"), per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, max_steps=spec["max_steps"], learning_rate=1e-4, lr_scheduler_type="linear",
        warmup_steps=0, max_grad_norm=1.0, seed=0, bf16=True, optim="adamw_torch_fused",
        max_length=spec["cutoff_len"], packing=True, completion_only_loss=True, dataset_num_proc=1,
        logging_steps=spec["steady_rule"]["window"], save_strategy="no", report_to="none", disable_tqdm=True,
        logging_nan_inf_filter=False,  # a non-finite loss logged as itself (the filter logs 0.0 if every step is)
        dataloader_num_workers=0)  # StepTimer counts tokens in the collate function: it must run in this process
    settings = {
        "trainer": "trl.SFTTrainer under unsloth (FastLanguageModel + get_peft_model)", "batch": batch,
        "packing": "TRL packing (padding-free rows)", "row_tokens": spec["cutoff_len"],
        "gradient_checkpointing": checkpointing, "optimizer": "adamw_torch_fused", "precision": "bf16",
        "base": "4-bit (load_in_4bit)" if quantized else "bf16",
        "lora_targets": targets, "batch_fallback": spec["attempt"].get("fallback"),
        **({"moe_backend": moe_backend(), "UNSLOTH_MOE_BACKEND": os.environ.get("UNSLOTH_MOE_BACKEND"),
            "target_parameters": target_parameters(model)} if moe else {}),
        "versions": versions("unsloth", "unsloth_zoo", "trl", "transformers", "torch", "peft", "triton", "xformers",
                             "flash_attn", "bitsandbytes"),
    }

    class InOrder(SFTTrainer):
        def _get_train_sampler(self, *args, **kwargs):  # bench's shared example order, not a reshuffle
            return SequentialSampler(self.train_dataset)

    trainer = InOrder(model=model, args=config, train_dataset=load_examples(spec["examples"]),
                      processing_class=tokenizer, callbacks=[StepTimer(spec, result_path, settings)])
    trainer.train()


if __name__ == "__main__":
    sys.exit(run_guarded(main, sys.argv[1:]))
