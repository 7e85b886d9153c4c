"""`steadytune eval` end to end on a tiny model whose LoRA adapter has learned a trivial task, and the
label-map checks: a swapped map is caught, a label set mismatch is refused with both sets listed."""

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from _infer_runs import hold_lock

from steadytune.cli import main
from steadytune.config import load_config
from steadytune.data.prepare import prepare_datasets
from steadytune.errors import UserError
from steadytune.eval.labelcheck import (
    best_label_permutation,
    check_label_set,
    check_labels_distinguishable,
    diagnose_known_samples,
)
from steadytune.eval.metrics import classification_report
from steadytune.eval.scoring import evaluate_classification, match_label
from steadytune.model.tiny import save_tiny_model
from steadytune.training.loss import causal_lm_loss_sum
from steadytune.training.run_folder import LOCK, claim_outputs

LABELS = ["消极", "积极"]
STEPS = 80  # lr 5e-3: steady; at 2e-2 the tiny model's accuracy oscillates from step to step
NEG = ["太差了", "很失望", "再也不买了", "包装破损", "讨厌"]
POS = ["很好", "质量不错", "非常满意", "物流很快", "喜欢"]


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A tiny qwen2 + LoRA trained in-process (seconds) on integer-labelled reviews: 0 = 消极, 1 = 积极."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("run")
    model_dir = save_tiny_model(root / "tiny", "qwen2", seed=0)
    rows = [{"text": t, "label": 0} for t in NEG] + [{"text": t, "label": 1} for t in POS]
    write_rows(root / "train.jsonl", rows * 2)
    write_rows(root / "test.jsonl", rows)
    config = {"model_name_or_path": str(model_dir), "dataset": str(root / "train.jsonl"),
              "eval_dataset": str(root / "test.jsonl"), "template": "empty", "label_names": LABELS,
              "prompt_template": "评论：{text}情感：", "cutoff_len": 64, "output_dir": str(root / "out"),
              "bf16": False}
    (root / "run.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    cfg = load_config(root / "run.yaml")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data = prepare_datasets(cfg, tokenizer)
    torch.manual_seed(0)  # LoRA A init: the run is deterministic
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    from steadytune.data.collators import PadCollator
    batch = PadCollator(tokenizer.pad_token_id)(data.train)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
    for _ in range(STEPS):
        loss, n = causal_lm_loss_sum(model, batch)
        (loss / n).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(root / "out")
    (root / "out" / "run_config.yaml").write_text(yaml.safe_dump({"label_names": LABELS}, allow_unicode=True),
                                                  encoding="utf-8")
    return root, model, tokenizer, data


def test_eval_cli_writes_every_result(trained_run, capsys):
    root, *_ = trained_run
    code = main(["eval", str(root / "run.yaml"), "--zero-shot", "--mode", "both", "--batch-size", "3",
                 "--output-dir", str(root / "eval")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "majority baseline 0.500" in captured.out and "LABEL-MAP CHECK FAILED" not in captured.err
    results = json.loads((root / "eval" / "eval_results.json").read_text(encoding="utf-8"))
    score = results["score"]
    assert score["accuracy"] == 1.0 and score["macro_f1"] == 1.0      # the task is trivially learnable
    assert results["majority_baseline"]["accuracy"] == 0.5
    zero = score["zero_shot"]["accuracy"]
    assert score["relative_error_reduction"] == pytest.approx((1.0 - zero) / (1 - zero))
    assert results["known_sample_check"]["warning"] is None
    assert "generate" in results and "unmatched" in results["generate"]
    rows = [json.loads(line) for line in (root / "eval" / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 10 and set(rows[0]) >= {"text", "gold", "prediction", "scores", "zero_shot_prediction",
                                                "generated"}
    assert set(rows[0]["scores"]) == set(LABELS)
    confusion = json.loads((root / "eval" / "confusion_matrix.json").read_text(encoding="utf-8"))
    assert confusion["matrix"] == [[5, 0], [0, 5]]
    assert (root / "eval" / "confusion_matrix.png").stat().st_size > 1000


def test_swapped_label_map_is_caught(trained_run, capsys):
    """label_names in the other order: the integer labels now name the wrong words (seed 003's bug)."""
    root, *_ = trained_run
    code = main(["eval", str(root / "run.yaml"), "label_names=[积极, 消极]", "--output-dir", str(root / "swapped")])
    err = capsys.readouterr().err
    assert code == 0
    assert "differs from training" in err
    assert "LABEL-MAP CHECK FAILED" in err and "swapped label map" in err
    results = json.loads((root / "swapped" / "eval_results.json").read_text(encoding="utf-8"))
    assert results["score"]["accuracy"] == 0.0 and results["known_sample_check"]["warning"]


def test_label_set_mismatch_is_refused_listing_both_sets(trained_run, capsys):
    root, *_ = trained_run
    write_rows(root / "bad_test.jsonl", [{"text": "很好", "label": "积极"}, {"text": "一般", "label": "中性"}])
    code = main(["eval", str(root / "run.yaml"), f"eval_dataset={root / 'bad_test.jsonl'}"])
    err = capsys.readouterr().err
    assert code == 1
    assert "['中性']" in err and "Dataset labels: ['中性', '积极']" in err and "label_names: ['消极', '积极']" in err


def test_missing_adapter_is_a_clear_error(trained_run, capsys, tmp_path):
    root, *_ = trained_run
    assert main(["eval", str(root / "run.yaml"), f"output_dir={tmp_path / 'nothing'}"]) == 1
    assert "holds no trained adapter" in capsys.readouterr().err


def test_evaluate_classification_on_raw_texts_matches_examples(trained_run):
    _, model, tokenizer, data = trained_run
    from_examples = evaluate_classification(model, tokenizer, data.eval, LABELS, data.template, data.prompt_template)
    texts = [e["text"] for e in data.eval]
    from_texts = evaluate_classification(model, tokenizer, texts, LABELS, data.template, data.prompt_template,
                                         cutoff_len=64)
    assert from_texts["predicted_ids"] == from_examples["predicted_ids"]
    assert "accuracy" not in from_texts  # no gold labels, no metrics


def test_label_checks():
    with pytest.raises(Exception, match="Dataset labels"):
        check_label_set(["a", "b", "c"], ["a", "b"])
    with pytest.raises(Exception, match="outside label_names"):
        check_label_set([0, 2], ["a", "b"])
    check_label_set([0, 1, "a"], ["a", "b"])
    with pytest.raises(Exception, match="same ids"):
        check_labels_distinguishable([[5, 1], [5, 1]], ["x", "y"], generate=False)
    check_labels_distinguishable([[5, 1], [5, 2, 1]], ["x", "y"], generate=False)
    with pytest.raises(Exception, match="same token"):
        check_labels_distinguishable([[5, 1], [5, 2, 1]], ["x", "y"], generate=True)


def test_permutation_diagnosis_and_label_matching():
    assert best_label_permutation([[0, 9], [8, 1]]) == ([1, 0], 17)
    # three classes, two swapped: gold 1 predicted as 2 and back
    report = classification_report([0] * 4 + [1] * 4 + [2] * 4, [0] * 4 + [2] * 4 + [1] * 4, ["a", "b", "c"])
    message = diagnose_known_samples(report)
    assert "swapped label map" in message and "gold 'b' -> predicted 'c'" in message
    assert diagnose_known_samples(classification_report([0, 1], [0, 1], ["a", "b"])) is None
    assert match_label(" 消极。", LABELS) == 0 and match_label("积极的评论", LABELS) == 1
    assert match_label("我觉得是消极", LABELS) == 0 and match_label("不知道", LABELS) is None
    # the first line that names a label decides; two different labels in it are no answer (wrong, never the first)
    assert match_label("消极或积极", LABELS) is None and match_label("积极，消极", LABELS) is None
    assert match_label("答案：\n积极\n评论：太差了，消极", LABELS) == 1 and match_label("消极消极", LABELS) == 0
    # a shorter label inside a longer one is not named twice
    assert match_label("不满意", ["满意", "不满意"]) == 1 and match_label("满意", ["满意", "不满意"]) == 0


def test_review_errors_samples_only_misses_reproducibly():
    from steadytune.evaluate import sample_errors
    predictions = [{"text": f"t{i}", "gold": "a", "prediction": "b" if i % 3 == 0 else "a"} for i in range(30)]
    first = sample_errors(predictions, 4)
    assert len(first) == 4 and all(r["gold"] != r["prediction"] and r["verdict"] == "" for r in first)
    assert [r["index"] for r in first] == sorted(r["index"] for r in first)
    assert first == sample_errors(predictions, 4)                      # seeded: the same sample every time
    assert len(sample_errors(predictions, 100)) == 10                  # never more than there are misses


def test_review_errors_file_from_the_cli(trained_run, capsys):
    """The swapped label map misclassifies every example: the file holds the asked number of them."""
    root, *_ = trained_run
    code = main(["eval", str(root / "run.yaml"), "label_names=[积极, 消极]", "--known-samples", "0",
                 "--review-errors", "3", "--output-dir", str(root / "review")])
    out = capsys.readouterr().out
    assert code == 0 and "3 of 10 misclassified" in out
    rows = [json.loads(line) for line in (root / "review" / "errors_to_review.jsonl").read_text(encoding="utf-8")
            .splitlines()]
    assert len(rows) == 3 and all(r["gold"] != r["prediction"] for r in rows)


def test_a_capped_test_split_says_so_and_how_to_lift_it(trained_run, capsys):
    root, *_ = trained_run
    code = main(["eval", str(root / "run.yaml"), "max_eval_samples=4", "--known-samples", "0",
                 "--output-dir", str(root / "capped")])
    out = capsys.readouterr().out
    assert code == 0 and "test : 4 examples" in out
    assert "6 more examples left out by max_eval_samples; add max_samples=null max_eval_samples=null" in out
    main(["eval", str(root / "run.yaml"), "--known-samples", "0", "--output-dir", str(root / "whole")])
    assert "left out" not in capsys.readouterr().out


def test_eval_refuses_a_folder_a_live_training_holds(trained_run, capsys, live_process):
    """Issue 25, case 10: eval wrote eval_results.json, predictions and the confusion matrix beside a running training,
    whose report then showed another model's accuracy as its own."""
    root, *_ = trained_run
    busy = root / "busy"
    hold_lock(busy, live_process.pid)
    code = main(["eval", str(root / "run.yaml"), "--output-dir", str(busy)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{busy} is in use by process {live_process.pid}" in err and str(busy / LOCK) in err
    assert sorted(p.name for p in busy.iterdir()) == [LOCK]     # nothing written beside the training


def test_eval_writes_where_the_lock_holder_is_dead_or_itself(trained_run, capsys, tmp_path):
    """A lock left by a killed run, or held by this very process, is no reason to refuse."""
    root, *_ = trained_run
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for folder, pid in ((tmp_path / "dead", dead.pid), (tmp_path / "mine", os.getpid())):
        hold_lock(folder, pid)
        claim_outputs(folder, ["eval_results.json"], False, "steadytune eval")


def test_eval_refuses_a_lock_held_on_another_host(tmp_path):
    hold_lock(tmp_path / "remote", 12345, host="another-host.example")
    with pytest.raises(UserError, match=r"in use by process 12345 on another-host.example"):
        claim_outputs(tmp_path / "remote", ["eval_results.json"], False, "steadytune eval")
