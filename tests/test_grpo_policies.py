"""stage grpo beyond dense text models, on tiny ones: a mixture of experts (the grouped experts' forward in the
roll-out and in the training step, the routers frozen, the routing recorded) and vision-language models (prompts with
images, completed by transformers' generate with the decode engine's keyed draw, trained with their pixels)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from test_grpo import logged, overrides, prompts_dataset, train

import steadytune.model.moe.experts_lora as experts_lora
from steadytune.config import load_config
from steadytune.model.decode.sampling import SamplingParams, mix_key
from steadytune.model.tiny import save_tiny_model
from steadytune.model.tiny_vlm import TINY_VLM_TEMPLATES, save_tiny_vlm
from steadytune.train import run_training

sys.path.insert(0, str(Path(__file__).parent))
from test_vlm_e2e import draw_dataset  # noqa: E402


def test_a_mixture_of_experts_rolls_out_and_trains_through_the_grouped_experts(tmp_path, monkeypatch, capsys):
    """Every forward of the MoE layers, the decode engine's and the training step's, goes through the grouped
    experts' matmuls (model/moe/experts_lora.py); the routers stay frozen (not in the adapter), the experts' LoRA
    trains, and the routing is logged as sft logs it."""
    calls = {"inference": 0, "training": 0}
    grouped = experts_lora.grouped_mm

    def counted(*args, **kwargs):
        calls["training" if torch.is_grad_enabled() else "inference"] += 1
        return grouped(*args, **kwargs)
    monkeypatch.setattr(experts_lora, "grouped_mm", counted)
    model = save_tiny_model(tmp_path / "moe", "qwen3_moe", initializer_range=0.2)
    data = prompts_dataset(tmp_path / "data")
    out = tmp_path / "run"
    result = train(overrides(model, data, out, max_steps=3, save_steps=1000))
    assert len(result.losses) == 3
    assert calls["inference"] > 0 and calls["training"] > 0
    records = logged(out)
    assert all("moe_aux_loss" in r and r["moe_idle_experts"] >= 0 for r in records)
    with safe_open(str(out / "adapter_model.safetensors"), "pt") as saved:
        names = list(saved.keys())
    assert any("experts" in n and "lora" in n for n in names)
    assert not any(n.endswith("mlp.gate.weight") for n in names)      # the routers: frozen, not saved
    assert "router 0 (frozen)" in capsys.readouterr().out    # the start line's trainable parameters by kind


# --- vision-language models ------------------------------------------------------------------------------------------

def distinct_characters(tmp_path: Path) -> Path:
    path = tmp_path / "spread.py"
    path.write_text("def spread(completions, **columns):\n    return [float(len(set(c))) for c in completions]\n",
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "llava"])
def test_a_vision_language_model_rolls_out_and_trains_on_prompts_with_images(kind, tmp_path):
    """LLaMA-Factory's multimodal rows (an images column, <image> in the prompt) as grpo prompts: each completion
    generated with its prompt's pixels, scored, and trained with them (the training batch carries the pixels); the
    held-out prompts are evaluated the same way; a second run draws the very same completions."""
    draw_dataset(tmp_path / "data", train=8, test=4)
    model = save_tiny_vlm(tmp_path / "model", kind)
    reward = distinct_characters(tmp_path)

    def run(out: Path):
        args = {"model_name_or_path": model, "stage": "grpo", "dataset": "shapes_train", "eval_dataset": "shapes_test",
                "dataset_dir": tmp_path / "data", "template": TINY_VLM_TEMPLATES[kind], "cutoff_len": 128,
                "output_dir": out, "per_device_train_batch_size": 2, "num_generations": 4, "max_completion_length": 4,
                "reward_funcs": f"[{reward}:spread]", "learning_rate": 1e-2, "max_steps": 2, "logging_steps": 1,
                "save_steps": 1000, "log_completions": True, "eval_strategy": "steps", "eval_steps": 2,
                "per_device_eval_batch_size": 2, "seed": 3}
        return run_training(load_config(None, [f"{k}={v}" for k, v in args.items()]), progress=False)

    first = run(tmp_path / "a")
    records = logged(tmp_path / "a")
    assert len(first.losses) == 2 and any(r["grad_norm"] > 0 for r in records)
    evaluated = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
                 if "eval_reward" in x]
    assert evaluated and evaluated[-1]["eval_completions/mean_length"] > 0
    config = (tmp_path / "a" / "run_config.yaml").read_text(encoding="utf-8")
    assert "transformers' generate" in config and "packing:\n    value: false" in config
    again = run(tmp_path / "b")
    assert again.losses == first.losses
    assert (tmp_path / "a" / "completions.jsonl").read_text() == (tmp_path / "b" / "completions.jsonl").read_text()


def test_the_keyed_draw_through_generate_does_not_depend_on_the_group():
    """Rows drawn with the same keys give the same completions whether the group is 4 rows or 2 (the draw is the
    decode engine's keyed Gumbel noise), and greedy equals transformers' own greedy generate."""
    from PIL import Image

    from steadytune.model.tiny_vlm import build_vlm, tiny_image_processor, vision_tokenizer
    from steadytune.stages.vision_rollout import generate_with_images

    tokenizer = vision_tokenizer("llava")
    model = build_vlm("llava", tokenizer).eval()
    processor = tiny_image_processor("llava")
    pixels = processor(images=[Image.new("RGB", (32, 32), (200, 10, 10))], return_tensors="pt")
    image = tokenizer.convert_tokens_to_ids("<image>")
    prompt = tokenizer("USER: ")["input_ids"] + [image] * 16 + tokenizer(" What colour? ASSISTANT:")["input_ids"]
    keys = [mix_key(7, g) for g in range(4)]
    params = SamplingParams(max_tokens=6, temperature=1.0)
    stops = [tokenizer.eos_token_id]
    with torch.no_grad():
        four = generate_with_images(model, [prompt] * 4, lambda i: dict(pixels), keys, 4, params, stops,
                                    tokenizer.pad_token_id)
        two = generate_with_images(model, [prompt] * 2, lambda i: dict(pixels), keys[:2], 2, params, stops,
                                   tokenizer.pad_token_id)
        greedy = generate_with_images(model, [prompt], lambda i: dict(pixels), [0], 1,
                                      SamplingParams(max_tokens=6, temperature=0.0), stops, tokenizer.pad_token_id)
        ids = torch.tensor([prompt])
        theirs = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **pixels, do_sample=False,
                                max_new_tokens=6, eos_token_id=stops, pad_token_id=tokenizer.pad_token_id)
    assert four.ids[:2] == two.ids and len({tuple(x) for x in four.ids}) > 1
    assert greedy.ids[0] == theirs[0, len(prompt):].tolist()[:len(greedy.ids[0])]
