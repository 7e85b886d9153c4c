"""The first use of a vision-language run, as a new user tries it (issue 67): the docs' red/blue example trained with
label_names, then chat, predict and eval on it; a decompression bomb among its images; eval --zero-shot before
anything is trained. A tiny Qwen2.5-VL trained for two steps (the answers are not the point, the paths are)."""

from __future__ import annotations

import io
import json
import re

import pytest
import yaml
from multimodal_setup import bomb_png
from test_vlm_e2e import draw_dataset

from steadytune.cli import main
from steadytune.model.tiny_vlm import save_tiny_vlm

LABEL_LINE = re.compile(r"^(red|blue) \(p=[01]\.\d{3}; red [01]\.\d{3}, blue [01]\.\d{3}\)$")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trained red/blue run; `bomb.png` beside the images and `shapes_bomb`, the training set with one row's
    image swapped for it."""
    root = tmp_path_factory.mktemp("first_use")
    draw_dataset(root, train=8, test=4)
    bomb_png(root / "images" / "bomb.png")
    rows = json.loads((root / "shapes_train.json").read_text())
    rows[2]["images"] = ["images/bomb.png"]
    (root / "shapes_bomb.json").write_text(json.dumps(rows), encoding="utf-8")
    info = json.loads((root / "dataset_info.json").read_text())
    info["shapes_bomb"] = dict(info["shapes_train"], file_name="shapes_bomb.json")
    (root / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    config = {"model_name_or_path": str(save_tiny_vlm(root / "model", "qwen2_5_vl")), "stage": "sft",
              "finetuning_type": "lora", "lora_rank": 8, "dataset": "shapes_train", "eval_dataset": "shapes_test",
              "dataset_dir": str(root), "template": "qwen2_vl", "cutoff_len": 128, "label_names": ["red", "blue"],
              "output_dir": str(root / "out"), "per_device_train_batch_size": 4, "max_steps": 2, "save_steps": 100,
              "report_to": "none"}
    (root / "run.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["train", str(root / "run.yaml")]) == 0
    return root


def one_error_line(err: str, *words: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and all(w in lines[0] for w in words), err
    return lines[0]


def test_a_decompression_bomb_is_one_line_naming_its_row_in_train_predict_and_eval(run, capsys):
    """A 110 KB PNG claiming 30000 x 30000 pixels ended train, predict and eval --mode generate in Pillow's
    DecompressionBombError traceback; now one line naming the file and the row, refused from the header."""
    capsys.readouterr()
    assert main(["train", str(run / "run.yaml"), "dataset=shapes_bomb", f"output_dir={run / 'bombed'}"]) == 1
    one_error_line(capsys.readouterr().err, "shapes_bomb.json row 2: images[0]", "bomb.png",
                   "900,000,000 pixels", "decompression bomb")
    assert not (run / "bombed").exists()   # the failed start left nothing
    rows = json.loads((run / "shapes_test.json").read_text())
    rows[1]["images"] = ["images/bomb.png"]
    (run / "bomb.jsonl").write_text("".join(json.dumps({"messages": r["messages"][:1], "images": r["images"]}) + "\n"
                                            for r in rows), encoding="utf-8")
    assert main(["predict", str(run / "out"), "--input", str(run / "bomb.jsonl"),
                 "--output", str(run / "bomb_predicted.jsonl")]) == 1
    one_error_line(capsys.readouterr().err, "bomb.jsonl line 2: images[0]", "decompression bomb")
    assert main(["eval", str(run / "run.yaml"), "eval_dataset=shapes_bomb", "--mode", "generate",
                 "--output-dir", str(run / "bomb_eval")]) == 1
    one_error_line(capsys.readouterr().err, "shapes_bomb.json row 2: images[0]", "decompression bomb")


def test_chat_of_a_label_run_scores_its_labels_for_text_and_images_and_keeps_the_conversation(run):
    """The docs' red/blue run (label_names, sharegpt rows, no prompt_template): chat crashed with "raw texts need a
    template and a prompt_template", for a text question too. Now each message, with the images attached to it, is
    scored against the labels; a bomb attached is one line and the conversation goes on."""
    from steadytune.infer.chat import ChatSession
    from steadytune.infer.loading import open_run

    session = ChatSession.load(open_run(str(run / "out")), quiet=True)
    out = io.StringIO()
    script = (f"What colour is the square?\n/image {run / 'images' / 'bomb.png'}\n"
              f"/image {run / 'images' / 'test_1.png'}\nWhat colour is the square?\nAnd this text?\n")
    session.loop(io.StringIO(script), out, interactive=False)
    lines = out.getvalue().splitlines()
    assert LABEL_LINE.match(lines[0]), lines
    assert "bomb.png" in lines[1] and "decompression bomb" in lines[1], lines
    assert lines[2].startswith("(image 1 attached") and LABEL_LINE.match(lines[3]) and LABEL_LINE.match(lines[4])
    # the image changes the scores: the same question with and without it
    with_image = ChatSession.load(open_run(str(run / "out")), quiet=True)
    with_image.pending_images.append(str(run / "images" / "test_1.png"))
    probabilities = [with_image.scorer.answer_prompt(*with_image.prompt("What colour is the square?"))[2],
                     session.scorer.answer("What colour is the square?")[2]]
    assert probabilities[0] != probabilities[1]


def test_eval_zero_shot_scores_the_base_model_before_a_run_exists_and_the_folder_then_trains(run, capsys):
    """`eval --zero-shot` before training stopped at "holds no trained adapter": now the base model is scored alone
    (said), its results written; `train` then starts in that folder, keeping them."""
    config = yaml.safe_load((run / "run.yaml").read_text())
    config["output_dir"] = str(run / "fresh")
    (run / "fresh.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["eval", str(run / "fresh.yaml"), "--zero-shot"]) == 0
    out = capsys.readouterr().out
    assert "holds no trained adapter or model yet: --zero-shot scores the base model" in out
    assert re.search(r"zero-shot \(score\)\s+\d", out) and "fine-tuned" not in out and "label-map check" not in out
    results = json.loads((run / "fresh" / "eval_results.json").read_text())
    assert results["adapter"] is None and results["n"] == 4
    assert main(["train", str(run / "fresh.yaml")]) == 0
    assert "holds eval --zero-shot's scores of the base model: kept; training there" in capsys.readouterr().out
    assert (run / "fresh" / "adapter_model.safetensors").is_file()


def test_prediction_records_name_their_row_its_images_and_what_it_asked(run, capsys):
    """predictions.jsonl rows of an image set carried "text": null and nothing tying them to their input row (and
    --review-errors crashed on the null); now each has its index, its images and its prompt's text."""
    assert main(["eval", str(run / "run.yaml"), "--review-errors", "4", "--output-dir", str(run / "evaluated")]) == 0
    records = [json.loads(line) for line in (run / "evaluated" / "predictions.jsonl").read_text().splitlines()]
    rows = json.loads((run / "shapes_test.json").read_text())
    assert [r["index"] for r in records] == list(range(len(rows)))
    for record, row in zip(records, rows):
        assert record["images"] == [str(run / row["images"][0])]
        assert "What colour is the square?" in record["text"] and "<|image_pad|>" not in record["text"]
        assert record["gold"] == row["messages"][1]["content"]


def test_reading_a_run_does_not_note_the_keys_only_training_reads(tmp_path, capsys):
    """Every chat, serve and predict of a run trained with tokenized_path (or a tracker) printed that it was "not
    granted"; those keys are reset quietly when a run is read, and still said when it is trained again."""
    from steadytune.infer.loading import load_run_config
    from steadytune.training.folder_config import load_folder_config

    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.yaml").write_text("model_name_or_path: m\ntokenized_path: /tmp/tokens\nreport_to: wandb\n"
                                         "logging_dir: /tmp/logs\ntrust_remote_code: true\n", encoding="utf-8")
    cfg = load_run_config(run, [], str(run))
    err = capsys.readouterr().err
    assert cfg.data.tokenized_path is None and cfg.train.report_to == "none"
    assert "trust_remote_code" in err and not any(k in err for k in ("tokenized_path", "report_to", "logging_dir"))
    load_folder_config(run / "run_config.yaml", [], str(run), runs_rewards=True)
    err = capsys.readouterr().err
    assert all(f"asks for {k}" in err for k in ("tokenized_path", "report_to", "logging_dir"))
