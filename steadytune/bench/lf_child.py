"""The llamafactory arm's child: LLaMA-Factory's own training entry point (llamafactory.train.tuner.run_exp) on bench's
model folder and examples, with the fastest options LF offers that apply here, timed by peer_timing.StepTimer.

Run by peers.py as `LF_PYTHON steadytune/bench/lf_child.py SPEC.json RESULT.json` under LLaMA-Factory's own
environment (it pins its own transformers), so it imports nothing from steadytune: stdlib, torch, transformers,
llamafactory and its sibling peer_timing.py only.

What it asks LF for, and why:
- neat_packing: examples packed into rows of `row_tokens` (bench's --max-tokens) and kept apart in attention, as
  steadytune's packing keeps them; batch 1, which LF requires of neat packing with FlashAttention-2, so one step
  carries about the real-token budget a steadytune step carries;
- flash_attn fa2 where flash-attn imports on a GPU, else sdpa (LF then builds a block-diagonal 4-D mask);
- enable_liger_kernel where liger-kernel imports on a GPU (its Triton kernels need one);
- bf16 on a GPU; gradient checkpointing as the parent's attempt says (off first: faster when it fits);
- disable_shuffling: LF trains the rows in the order its packing made them from bench's shared example order.

On a mixture of experts (Qwen3-MoE and the others), LF's own MoE path as its examples run it (lora_target: all, no
moe_aux_loss_coef, which LF leaves unset), with liger-kernel off (MOE_LIGER_REASON). Note what `all` means there: LF
picks the modules whose class name holds "Linear", and its src/ has no target_parameters, so under transformers 5
the fused routed experts get no LoRA and stay frozen: the arm trains attention (and a shared expert or dense layer
where the model has one) only, a lighter job than the other arms'. Its JSON says so (trainable_by_kind), and so does
`settings.reasons.lora_target`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from peer_timing import StepTimer, run_guarded, versions  # the script's folder is on sys.path (peer_timing says why)


MOE_LIGER_REASON = ("off on a mixture of experts: LF's MoE examples do not turn it on, and liger-kernel's MoE patches "
                    "have not been run here on transformers 5's fused experts")
MOE_TARGET_REASON = ("all: LF 0.9.5 adapts the modules whose class name holds 'Linear' and has no target_parameters, so "
                     "under transformers 5 the fused routed experts stay frozen (see trainable_by_kind): this arm trains "
                     "less than the others, and its speed is of a lighter job")


def fast_options(cuda: bool, moe: bool = False) -> dict:
    """The speed options of LF that this environment can take, each with the reason it was chosen."""
    flash = cuda and importlib.util.find_spec("flash_attn") is not None
    liger = cuda and importlib.util.find_spec("liger_kernel") is not None and not moe
    if moe:
        return {**fast_options(cuda), "enable_liger_kernel": False, "liger_reason": MOE_LIGER_REASON}
    return {
        "flash_attn": "fa2" if flash else "sdpa",
        "flash_attn_reason": ("flash-attn imports on this GPU" if flash else
                              "sdpa: " + ("no GPU" if not cuda else "flash-attn is not installed (pip install flash-attn)")),
        "enable_liger_kernel": liger,
        "liger_reason": ("liger-kernel imports on this GPU" if liger else
                         "off: " + ("no GPU (Triton kernels)" if not cuda else "not installed (pip install liger-kernel)")),
    }


def lf_arguments(spec: dict, fast: dict) -> dict:
    """run_exp's arguments: the keys a user puts in an LF training YAML (with bench --quantization-bit 4, LF's
    quantization_bit: 4, whose defaults are bitsandbytes nf4 with double quantisation, as in the other arms)."""
    cuda = spec["device"] == "cuda"
    quantized = {"quantization_bit": spec["quantization_bit"]} if spec.get("quantization_bit") else {}
    return {**quantized,
        "stage": "sft", "do_train": True, "finetuning_type": "lora",
        "model_name_or_path": spec["model_dir"],
        "lora_rank": spec["lora_rank"], "lora_alpha": spec["lora_alpha"], "lora_dropout": 0.0,
        "lora_target": "all",  # LF's "all": every linear layer but the head, as peft's all-linear in the other arms
        "dataset": spec["dataset"], "dataset_dir": spec["dataset_dir"], "template": "empty",
        "cutoff_len": spec["row_tokens"], "neat_packing": True, "overwrite_cache": True,
        "disable_shuffling": True,
        "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "max_steps": spec["max_steps"],
        "learning_rate": 1e-4, "lr_scheduler_type": "linear", "warmup_steps": 0, "max_grad_norm": 1.0, "seed": 0,
        "bf16": cuda,
        "flash_attn": fast["flash_attn"], "enable_liger_kernel": fast["enable_liger_kernel"],
        "disable_gradient_checkpointing": not spec["attempt"]["gradient_checkpointing"],
        "output_dir": str(Path(spec["work_dir"]) / "lf_output"), "overwrite_output_dir": True,
        "save_strategy": "no", "report_to": "none", "plot_loss": False, "disable_tqdm": True,
        "logging_steps": spec["steady_rule"]["window"],  # bench syncs at window ends anyway: logging there is free
        # A non-finite loss logged as itself: with the filter (the Trainer's default) every step non-finite logs 0.0.
        "logging_nan_inf_filter": False,
        "dataloader_num_workers": 0,  # StepTimer counts tokens in the collate function: it must run in this process
    }


def main(spec: dict, result_path: str) -> None:
    from llamafactory.train.tuner import run_exp  # here, not at the top: its import takes seconds

    fast = fast_options(spec["device"] == "cuda" and torch.cuda.is_available(), moe=bool(spec.get("moe")))
    arguments = lf_arguments(spec, fast)
    settings = {
        "trainer": "llamafactory.train.tuner.run_exp (stage sft, LoRA)",
        "lf_arguments": {k: v for k, v in arguments.items() if k not in ("model_name_or_path", "dataset_dir", "output_dir")},
        "reasons": {"flash_attn": fast["flash_attn_reason"], "enable_liger_kernel": fast["liger_reason"],
                    "gradient_checkpointing": spec["attempt"]["reason"],
                    **({"lora_target": MOE_TARGET_REASON} if spec.get("moe") else {})},
        "batch": 1, "row_tokens": spec["row_tokens"], "packing": "neat_packing (examples kept apart)",
        "versions": versions("llamafactory", "transformers", "torch", "peft", "accelerate", "datasets",
                             "liger-kernel", "flash-attn", "bitsandbytes"),
    }
    run_exp(arguments, callbacks=[StepTimer(spec, result_path, settings)])


if __name__ == "__main__":
    sys.exit(run_guarded(main, sys.argv[1:]))
