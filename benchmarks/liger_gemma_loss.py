"""Why the liger peer arm reported a loss of 0.0 on the Gemma 3 shape (docs/speed.md): the same batch's loss from the
plain model, then after liger-kernel patches the instance as transformers' Trainer does (use_liger_kernel: true),
called the ways the Trainer calls it (with and without num_items_in_batch), then one Trainer step that logs.

    python benchmarks/liger_gemma_loss.py [--shape gemma3-270m] [--rows 4] [--length 256]      (a CUDA GPU with liger-kernel installed)

Prints one line per way of computing the loss; a healthy patch gives the same value everywhere (about ln(vocab) on
random weights)."""

from __future__ import annotations

import argparse
import math
import tempfile

import torch

from steadytune.bench.workload import lora_model
from steadytune.data.collators import PadCollator


def batch_of(vocab: int, rows: int, length: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(rows):
        ids = torch.randint(10, vocab, (length,), generator=g).tolist()
        examples.append({"input_ids": ids, "labels": [-100] * (length // 2) + ids[length // 2:]})
    return {k: v.to(device) for k, v in PadCollator(pad_token_id=0)(examples).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="gemma3-270m")
    parser.add_argument("--rows", type=int, default=4, help="examples in the batch (the liger peer ran 32)")
    parser.add_argument("--length", type=int, default=256, help="tokens an example, the second half labelled")
    args = parser.parse_args()
    device = torch.device("cuda")
    model = lora_model(args.shape, device)
    vocab = model.get_base_model().config.vocab_size
    batch = batch_of(vocab, rows=args.rows, length=args.length, device=device)
    targets = int((batch["labels"][:, 1:] != -100).sum())
    print(f"{args.shape}: vocab {vocab} (ln = {math.log(vocab):.3f}), {targets} target tokens, "
          f"{type(model.get_base_model()).__name__}")

    def show(label: str, **extra) -> None:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(**batch, **extra)
        print(f"  {label:<52} loss {float(out.loss):.4f}  logits {None if out.logits is None else tuple(out.logits.shape)}")

    show("plain transformers + peft")
    show("plain, num_items_in_batch given", num_items_in_batch=torch.tensor(targets, device=device))
    from liger_kernel.transformers import _apply_liger_kernel_to_instance
    _apply_liger_kernel_to_instance(model=model.get_base_model())
    model.train()
    show("liger-patched instance (train mode)")
    show("liger-patched, num_items_in_batch given", num_items_in_batch=torch.tensor(targets, device=device))
    model.eval()
    show("liger-patched instance (eval mode)")
    model.train()

    from transformers import Trainer, TrainerCallback, TrainingArguments

    logged = []

    class KeepLogs(TrainerCallback):
        def on_log(self, targs, state, control, logs=None, **kwargs):
            logged.append(logs)

    rows = [{"input_ids": r.tolist(), "labels": l.tolist()} for r, l in zip(batch["input_ids"], batch["labels"])]
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.rows, max_steps=2, learning_rate=1e-4,
                                  bf16=True, logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
                                  remove_unused_columns=False, use_liger_kernel=True, logging_nan_inf_filter=False)
        trainer = Trainer(model=model, args=targs, train_dataset=rows, data_collator=PadCollator(pad_token_id=0),
                          callbacks=[KeepLogs()])
        trainer.train()
    print("  Trainer(use_liger_kernel=True) logs:", [l.get("loss") for l in logged if l and "loss" in l])


if __name__ == "__main__":
    main()
