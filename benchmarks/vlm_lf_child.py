"""The llamafactory arm of benchmarks/vlm_speed.py: LLaMA-Factory 0.9.5's run_exp on the spec's YAML keys, timed in its
own environment (it pins its own transformers, so this file imports nothing of steadytune).

    LF_PYTHON benchmarks/vlm_lf_child.py SPEC.json RESULT.json

Tokens are counted where the Trainer hands each batch to the model (transformers.Trainer.training_step: the batch's
attention_mask, image placeholder tokens included, padding not); time is the wall clock between the end of the last
warm-up step and the end of the last step (a cuda-synchronised callback at each step's end: data loading, forward,
backward and the optimizer step, as steadytune's metrics count them); peak memory from torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import json
import sys
import time

import torch


def main(spec_path: str, result_path: str) -> None:
    import transformers
    from llamafactory.train.tuner import run_exp

    spec = json.loads(open(spec_path, encoding="utf-8").read())
    cuda = spec["device"] == "cuda" and torch.cuda.is_available()
    counted = {"tokens": 0, "steps": 0, "start": None, "end": None}
    original = transformers.Trainer.training_step

    def training_step(self, model, inputs, *args, **kwargs):
        if self.state.global_step >= spec["warmup"]:   # the step being taken is a timed one
            counted["tokens"] += int(inputs["attention_mask"].sum()) if "attention_mask" in inputs else \
                int(inputs["input_ids"].numel())
            counted["steps"] += 1
        return original(self, model, inputs, *args, **kwargs)

    class StepClock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            if state.global_step == spec["warmup"]:
                counted["start"] = time.perf_counter()
            counted["end"] = time.perf_counter()

    transformers.Trainer.training_step = training_step
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    keys = dict(spec["keys"], disable_tqdm=True, plot_loss=False, dataloader_num_workers=0, overwrite_cache=True)
    run_exp(keys, callbacks=[StepClock()])
    seconds = (counted["end"] - counted["start"]) if counted["start"] is not None else 0.0
    result = {"tokens_per_s": round(counted["tokens"] / max(seconds, 1e-9), 1),
              "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
              "steps": counted["steps"],
              "settings": f"llamafactory {__import__('llamafactory').__version__} run_exp, transformers "
                          f"{transformers.__version__}; keys {json.dumps({k: v for k, v in keys.items() if k not in ('model_name_or_path', 'dataset_dir', 'output_dir')})}"}
    open(result_path, "w", encoding="utf-8").write(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
