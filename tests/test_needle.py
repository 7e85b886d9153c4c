"""Needle retrieval (eval/needle.py, `steadytune eval --needle`): prompts of the asked length with the fact at the
asked depth, through the run's chat template; the grid written and printed; bad arguments named."""

from __future__ import annotations

import json

import pytest
from sample_data import ALPACA

from steadytune.config import load_config
from steadytune.data.prepare import template_for
from steadytune.errors import UserError
from steadytune.eval.needle import evaluate_needle, needle_prompt, parse_ints
from steadytune.model.tiny import build_tokenizer


@pytest.mark.parametrize("depth", [0, 50, 100])
def test_a_prompt_has_the_asked_length_and_the_fact_at_the_asked_depth(depth):
    tokenizer = build_tokenizer()
    template = template_for(load_config(None, ["template=qwen"]), tokenizer)
    prompt = needle_prompt(tokenizer, template, 1200, depth, trial=0)
    assert len(prompt.ids) == 1200
    text = tokenizer.decode(prompt.ids)
    assert text.startswith("<|im_start|>") and text.rstrip().endswith("<|im_start|>assistant")
    body_start, needle = text.index("user") + 5, text.index("The secret number of")
    question = text.index("What is the secret number of")
    assert f"is {prompt.answer}." in text[needle:question]
    share = (needle - body_start) / (question - body_start)
    assert abs(share - depth / 100) < 0.08
    again = needle_prompt(tokenizer, template, 1200, depth, trial=0)
    assert again.ids == prompt.ids and needle_prompt(tokenizer, template, 1200, depth, trial=1).ids != prompt.ids


def test_the_grid_counts_each_cell_and_keeps_every_answer():
    from steadytune.model.tiny import build_model

    tokenizer = build_tokenizer()
    template = template_for(load_config(None, ["template=qwen"]), tokenizer)
    results = evaluate_needle(build_model("qwen2"), tokenizer, template, [200, 300], [0, 100], trials=2,
                              max_new_tokens=4)
    assert set(results["found"]) == {"200", "300"} and set(results["found"]["200"]) == {"0", "100"}
    assert len(results["answers"]) == 8 and {a["tokens"] for a in results["answers"]} == {200, 300}
    found = sum(a["found"] for a in results["answers"])
    assert results["overall"] == found / 8


def test_bad_needle_arguments_are_named():
    with pytest.raises(UserError, match="--needle-depths: values must be in 0..100"):
        parse_ints("0,150", "--needle-depths", 0, 100)
    with pytest.raises(UserError, match="--needle-lengths: expected a comma list"):
        parse_ints("4k", "--needle-lengths", 1)
    with pytest.raises(UserError, match=r"--needle-lengths: values must be at least 1 \(got '0'\)"):
        parse_ints("0", "--needle-lengths", 1)   # said "must lie in 1..any"
    tokenizer = build_tokenizer()
    with pytest.raises(UserError, match="too short to hold the needle"):
        needle_prompt(tokenizer, template_for(load_config(None, ["template=qwen"]), tokenizer), 20, 0, 0)


def test_eval_needle_writes_its_results_for_a_trained_adapter(tmp_path, sample_data_dir, capsys):
    from steadytune.cli import main
    from steadytune.model.tiny import save_tiny_model
    from steadytune.train import run_training

    model = save_tiny_model(tmp_path / "model", "qwen2")
    keys = [f"model_name_or_path={model}", f"dataset={ALPACA}", f"dataset_dir={sample_data_dir}", "template=qwen",
            "cutoff_len=64", "max_samples=8", f"output_dir={tmp_path / 'run'}", "max_steps=1", "lora_rank=4"]
    run_training(load_config(None, keys), progress=False)
    config = tmp_path / "run.yaml"
    config.write_text("\n".join(k.replace("=", ": ", 1) for k in keys), encoding="utf-8")
    assert main(["eval", str(config), "--needle", "--needle-lengths", "256", "--needle-depths", "0,100",
                 "--needle-trials", "1"]) == 0
    results = json.loads((tmp_path / "run" / "needle_results.json").read_text(encoding="utf-8"))
    assert results["lengths"] == [256] and len(results["answers"]) == 2
    # ten million tokens on a model of 512 positions ran for hours (round 5b): one line, the results kept
    capsys.readouterr()
    assert main(["eval", str(config), "--needle", "--needle-lengths", "256,10000000", "--overwrite"]) == 1
    assert ("--needle-lengths 10,000,000: more than 4x this model's window of 512 positions"
            in capsys.readouterr().err)
    assert json.loads((tmp_path / "run" / "needle_results.json").read_text(encoding="utf-8")) == results


def test_the_window_a_needle_may_reach_counts_rope_scaling():
    from types import SimpleNamespace

    from steadytune.eval.needle import check_lengths
    from steadytune.model.config_values import model_window

    assert model_window(SimpleNamespace(max_position_embeddings=4096)) == 4096
    assert model_window(SimpleNamespace(max_position_embeddings=32768, rope_scaling={"rope_type": "yarn",
                                                                                     "factor": 4.0})) == 131072
    assert model_window(SimpleNamespace(max_position_embeddings=None)) is None
    check_lengths([16384], 4096)
    check_lengths([10**12], None)
    with pytest.raises(UserError, match="use lengths up to 16,384"):
        check_lengths([1024, 16385], 4096)
