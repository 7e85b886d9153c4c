"""Preference pairs with images (stage dpo): the prompt's images belong to both answers; each sequence of a pair is
scored with its pixels, and what DPO sums per sequence is the model's own log-probability of that answer given the
image. Tiny random Qwen2.5-VL from config, drawn images, no hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image

from steadytune.cli import main
from steadytune.config import ConfigError, load_config
from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.multimodal.encode import media_context
from steadytune.data.multimodal.processor import load_media_processor
from steadytune.data.preference import PAIRS
from steadytune.data.prepare import prepare_datasets
from steadytune.model.tiny_vlm import build_vlm, save_tiny_vlm
from steadytune.stages.batches import SequenceCollator
from steadytune.stages.logprobs import sequence_logprobs
from steadytune.training.vision_data import pair_media

COLOURS = [((220, 30, 30), "red", "blue"), ((30, 30, 220), "blue", "red"), ((30, 180, 30), "green", "red")]


def draw_pairs(root: Path, n: int = 6) -> None:
    rows = []
    for i in range(n):
        colour, right, wrong = COLOURS[i % len(COLOURS)]
        Image.new("RGB", (32 + 32 * (i % 2), 32), colour).save(root / f"square{i}.png")
        rows.append({"conversations": [{"from": "human", "value": "<image>What colour is the square?"}],
                     "chosen": {"from": "gpt", "value": f"It is {right}."},
                     "rejected": {"from": "gpt", "value": f"It is {wrong}, I think."}, "images": [f"square{i}.png"]})
    (root / "pairs.json").write_text(json.dumps(rows))
    columns = {"messages": "conversations", "chosen": "chosen", "rejected": "rejected", "images": "images"}
    (root / "dataset_info.json").write_text(json.dumps({"colour_pairs": {
        "file_name": "pairs.json", "ranking": True, "formatting": "sharegpt", "columns": columns}}))


def settings(root: Path, model: Path, **more) -> dict:
    return {"model_name_or_path": str(model), "stage": "dpo", "finetuning_type": "lora", "dataset": "colour_pairs",
            "dataset_dir": str(root), "template": "qwen2_vl", "cutoff_len": 64, "output_dir": str(root / "out"),
            "per_device_train_batch_size": 2, "report_to": "none", **more}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_dpo")
    draw_pairs(root)
    model_dir = save_tiny_vlm(root / "model", "qwen2_5_vl")
    cfg = load_config(None, settings(root, model_dir))
    processor = load_media_processor(model_dir)
    data = prepare_datasets(cfg, processor.tokenizer, PAIRS, processor)
    data.media = media_context(cfg.data, data.template.name, processor)
    return root, model_dir, cfg, processor, data


def test_both_answers_carry_the_prompts_image_tokens(prepared):
    _, _, _, processor, data = prepared
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for example in data.train:
        chosen_len, rejected_len = example["lengths"]
        chosen, rejected = example["input_ids"][:chosen_len], example["input_ids"][chosen_len:]
        assert chosen.count(pad) == rejected.count(pad) > 0
        assert example["mm_token_type_ids"] == [int(t == pad) for t in example["input_ids"]]
        # labels on the answers only (never on an image token)
        assert all(label == IGNORE_INDEX for t, label in zip(example["input_ids"], example["labels"]) if t == pad)
        assert example["images"] and len(example["image_grid_thw"]) == 1


def test_a_short_cutoff_cuts_text_never_the_image(prepared):
    root, model_dir, _, processor, _ = prepared
    cfg = load_config(None, settings(root, model_dir, cutoff_len=12))
    data = prepare_datasets(cfg, processor.tokenizer, PAIRS, processor)
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    grids = {1: 1, 2: 2}   # 32x32 -> 1 token; 64x32 -> 2
    for example in data.train:
        chosen_len = example["lengths"][0]
        assert chosen_len <= 12 and example["input_ids"][:chosen_len].count(pad) in grids.values()
    tiny = load_config(None, settings(root, model_dir, cutoff_len=3))
    with pytest.raises(Exception, match="image/video tokens need"):
        prepare_datasets(tiny, processor.tokenizer, PAIRS, processor)


def test_each_sequences_logprob_is_the_models_own_given_its_image(prepared):
    _, model_dir, cfg, processor, data = prepared
    model = build_vlm("qwen2_5_vl", processor.tokenizer).eval()
    collate = SequenceCollator(processor.tokenizer.pad_token_id).with_media(pair_media(data, model))
    examples = data.train[:2]
    batch = collate(examples)
    assert batch["pixel_values"].shape[0] == sum(int(torch.tensor(g).prod()) for e in examples
                                                 for g in e["image_grid_thw"]) * 2   # per sequence: twice a pair
    with torch.no_grad():
        sums, counts = sequence_logprobs(model, batch, 2 * len(examples))
        one = SequenceCollator(processor.tokenizer.pad_token_id).with_media(pair_media(data, model))
        for i, example in enumerate(examples):
            single = one([example])
            for k in (0, 1):   # chosen, rejected
                row = {key: value[k:k + 1] for key, value in single.items()
                       if key in ("input_ids", "attention_mask", "mm_token_type_ids")}
                n = int(row["attention_mask"].sum())
                grid = single["image_grid_thw"][k:k + 1]
                patches = int(grid.prod())
                pixels = single["pixel_values"][k * patches:(k + 1) * patches]
                logits = model(**row, pixel_values=pixels, image_grid_thw=grid).logits[0, :n - 1].float()
                labels = single["labels"][k, 1:n]
                keep = labels != IGNORE_INDEX
                own = logits.log_softmax(-1)[keep].gather(1, labels[keep, None]).sum()
                torch.testing.assert_close(sums[k * len(examples) + i], own, rtol=1e-4, atol=1e-4)
                assert int(counts[k * len(examples) + i]) == int(keep.sum())
    with pytest.raises(ConfigError, match="packing"):
        SequenceCollator(0, packing_attention="sdpa").with_media(pair_media(data, model))


def test_dpo_trains_with_images_and_rm_refuses_them(prepared, capsys):
    root, model_dir, _, _, _ = prepared
    config = settings(root, model_dir, max_steps=2, val_size=2, eval_strategy="steps", eval_steps=2,
                      pref_loss="sigmoid")
    path = root / "dpo.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["train", str(path)]) == 0
    metrics = [json.loads(line) for line in (root / "out" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_rewards/accuracies" in m for m in metrics)
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics if "loss" in m)
    assert (root / "out" / "adapter_model.safetensors").is_file()
    capsys.readouterr()
    rm = root / "rm.yaml"
    rm.write_text(yaml.safe_dump({**config, "stage": "rm", "output_dir": str(root / "rm")}), encoding="utf-8")
    assert main(["train", str(rm)]) != 0
    assert "stage rm trains on text only here" in capsys.readouterr().err
