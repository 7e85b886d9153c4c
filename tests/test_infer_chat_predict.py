"""`steadytune chat` over stdin (history, /reset, /exit, classification answers) and `steadytune predict` on both
task types; LLaMA-Factory's inference YAMLs; infer_backend values we do not drive."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _infer_runs import LABELS, NEG, POS, classification_keys, learned_classification_run, make_run, write_jsonl
from conftest import LF_FIXTURES, needs_shared

from steadytune.cli import main
from steadytune.infer.chat import ChatSession
from steadytune.infer.loading import open_run
from steadytune.model.tiny import save_tiny_model

REPO = Path(__file__).resolve().parents[1]
LF = LF_FIXTURES


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    model = save_tiny_model(root / "qwen2", "qwen2")
    sft = write_jsonl(root / "sft.jsonl", [{"instruction": "Say hi.", "input": "", "output": "Hello!"}])
    generation = make_run(root / "sft", {"model_name_or_path": str(model), "dataset": str(sft), "template": "qwen",
                                         "cutoff_len": 128, "output_dir": str(root / "sft")})
    classification = learned_classification_run(root, model, root / "cls")
    return {"root": root, "model": model, "generation": generation, "classification": classification,
            "qwen3": save_tiny_model(root / "qwen3", "qwen3")}


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """The real command in a subprocess, stdin a pipe (not a terminal), as a script would run it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "steadytune", *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def test_chat_over_stdin_answers_each_line_and_obeys_reset_and_exit(runs):
    proc = cli("chat", str(runs["generation"]), "--greedy", "--max-new-tokens", "6",
               stdin="hello\n/reset\nhello\nhow are you?\n/exit\nthis line is never read\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4 and lines[1] == "(history cleared)", proc.stdout
    assert lines[2] == lines[0]  # greedy, and /reset made the prompt the same again
    assert "Traceback" not in proc.stderr


def test_chat_keeps_history_and_reset_forgets_it(runs):
    session = ChatSession.load(open_run(str(runs["generation"]), ["do_sample=false", "max_new_tokens=4"]), quiet=True)
    first = "".join(session.answer("hello"))
    with_history = session.tokenizer.decode(session.prompt_ids("and now?"))
    assert "hello" in with_history and with_history.count("<|im_start|>user") == 2
    assert first.strip() in with_history
    session.reset()
    assert session.tokenizer.decode(session.prompt_ids("and now?")).count("<|im_start|>user") == 1
    out = io.StringIO()
    assert session.loop(io.StringIO("hi\n\n/help\n"), out, interactive=False) == 0
    assert "/reset" in out.getvalue()


def chat_in_process(monkeypatch, capsys, *args: str, stdin: str = "") -> tuple[int, str, str]:
    """`steadytune chat` in this process, stdin a pipe-like stream (not a terminal)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    code = main(["chat", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_chat_of_a_classification_run_answers_with_label_and_probability(runs, monkeypatch, capsys):
    code, out, err = chat_in_process(monkeypatch, capsys, str(runs["classification"]), stdin=f"{NEG[0]}\n{POS[0]}\n")
    assert code == 0, err
    neg, pos = out.splitlines()
    assert neg.startswith(f"{LABELS[0]} (p=") and pos.startswith(f"{LABELS[1]} (p=")
    p = float(neg.split("p=")[1].split(";")[0])
    assert 0.5 < p <= 1.0


def test_predict_classification_writes_label_and_every_probability(runs, tmp_path, capsys):
    rows = write_jsonl(tmp_path / "new.jsonl", [{"id": i, "text": t} for i, t in enumerate(NEG + POS)])
    out = tmp_path / "pred.jsonl"
    assert main(["predict", str(runs["classification"]), "--input", str(rows), "--output", str(out),
                 "--batch-size", "3"]) == 0
    printed = capsys.readouterr().out
    assert "10 rows ->" in printed and "tokens/s" in printed
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in got] == list(range(10))  # input order kept though batches are sorted by length
    assert [r["label"] for r in got] == [LABELS[0]] * 5 + [LABELS[1]] * 5
    for r in got:
        assert set(r["probabilities"]) == set(LABELS)
        assert sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert r["probability"] == max(r["probabilities"].values())
    # CSV in, CSV out, another text column
    table = tmp_path / "new.csv"
    with table.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "source"])
        writer.writerows([[t, "web"] for t in NEG + POS])
    assert main(["predict", str(runs["classification"]), "--input", str(table), "--output",
                 str(tmp_path / "pred.csv"), "--text-column", "review"]) == 0
    with (tmp_path / "pred.csv").open(encoding="utf-8") as f:
        table_rows = list(csv.DictReader(f))
    assert [r["label"] for r in table_rows] == [r["label"] for r in got]
    assert {"review", "source", "label", "probability", f"prob_{LABELS[0]}", f"prob_{LABELS[1]}"} <= set(table_rows[0])


def test_a_label_run_trained_on_conversations_chats_and_predicts_by_its_labels(runs, tmp_path, capsys):
    """label_names without a prompt_template (sharegpt / openai rows whose answers are the label words): chat and
    predict stopped at "raw texts need a template and a prompt_template" (issue 67). Each message, or each row's turns,
    is scored against the labels after the chat prompt, as the rows were encoded."""
    from steadytune.data.encode import encode_label_targets
    from steadytune.eval.scoring import score_labels
    from steadytune.infer.generate import conversation_ids

    rows = write_jsonl(tmp_path / "new.jsonl", [{"messages": [{"role": "user", "content": t}]} for t in NEG[:2] + POS[:2]])
    out = tmp_path / "pred.jsonl"
    keys = ["template=qwen", "label_names=[bad, good]"]
    assert main(["predict", str(runs["model"]), "--input", str(rows), "--output", str(out), *keys]) == 0
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    session = ChatSession.load(open_run(str(runs["model"]), keys), quiet=True)
    chatted = io.StringIO()
    session.loop(io.StringIO("".join(t + "\n" for t in NEG[:2] + POS[:2])), chatted, interactive=False)
    targets = encode_label_targets(session.template, session.tokenizer, ["bad", "good"])
    for row, line, text in zip(got, chatted.getvalue().splitlines(), NEG[:2] + POS[:2]):
        ids = conversation_ids(session.template, session.tokenizer, [{"role": "user", "content": text}])
        expected = score_labels(session.model, [ids], targets).softmax(1)[0]
        assert row["probabilities"]["good"] == pytest.approx(float(expected[1]), abs=1e-5)
        assert line.startswith(f"{row['label']} (p={row['probability']:.3f}")


def test_predict_generation_is_greedy_and_repeatable_and_seeded_when_sampling(runs, tmp_path, capsys):
    rows = write_jsonl(tmp_path / "prompts.jsonl", [
        {"instruction": "Say hi.", "input": ""},
        {"instruction": "Translate", "input": "很好"},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]},
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "old answer"}]},
        {"prompt": "What is the capital of France?"}])
    args = ["predict", str(runs["generation"]), "--input", str(rows), "max_new_tokens=5"]
    assert main([*args, "--output", str(tmp_path / "a.jsonl")]) == 0
    assert main([*args, "--output", str(tmp_path / "b.jsonl"), "--batch-size", "2"]) == 0
    a = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()]
    b = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["predict"] for r in a] == [r["predict"] for r in b]
    assert all("predict" in r and isinstance(r["predict"], str) for r in a)
    assert "greedy" in capsys.readouterr().out
    sampled = [*args, "--sample", "--seed", "3"]
    assert main([*sampled, "--output", str(tmp_path / "s1.jsonl")]) == 0
    assert main([*sampled, "--output", str(tmp_path / "s2.jsonl")]) == 0
    assert (tmp_path / "s1.jsonl").read_text(encoding="utf-8") == (tmp_path / "s2.jsonl").read_text(encoding="utf-8")
    assert "generated" in capsys.readouterr().out


def test_predict_errors_name_the_row_and_protect_the_output(runs, tmp_path, capsys):
    rows = write_jsonl(tmp_path / "bad.jsonl", [{"text": "很好"}, {"review": "no text column here"}])
    assert main(["predict", str(runs["classification"]), "--input", str(rows), "--output", str(tmp_path / "o.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "bad.jsonl line 2" in err and "--text-column" in err
    existing = tmp_path / "keep.jsonl"
    existing.write_text("mine\n", encoding="utf-8")
    assert main(["predict", str(runs["classification"]), "--input", str(rows), "--output", str(existing)]) == 1
    assert "--force" in capsys.readouterr().err and existing.read_text(encoding="utf-8") == "mine\n"
    assert main(["predict", str(runs["classification"]), "--input", str(rows), "--output", str(tmp_path / "o.txt")]) == 1


def test_predict_on_the_merged_export_matches_the_adapter(runs, tmp_path):
    rows = write_jsonl(tmp_path / "new.jsonl", [{"text": t} for t in NEG + POS])
    assert main(["export", str(runs["classification"]), f"export_dir={tmp_path / 'merged'}"]) == 0
    assert main(["predict", str(tmp_path / "merged"), "--input", str(rows), "--output", str(tmp_path / "m.jsonl")]) == 0
    assert main(["predict", str(runs["classification"]), "--input", str(rows), "--output", str(tmp_path / "a.jsonl")]) == 0
    labels = lambda p: [json.loads(line)["label"] for line in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    assert labels(tmp_path / "m.jsonl") == labels(tmp_path / "a.jsonl")


@pytest.mark.parametrize("backend,message", [("vllm", "vllm is not installed"), ("sglang", "is not supported; use huggingface or vllm"),
                                             ("ktransformers", "is not supported; use huggingface or vllm")])
def test_backends_we_do_not_run_here_are_clear_errors(runs, tmp_path, capsys, backend, message):
    if backend == "vllm" and __import__("importlib").util.find_spec("vllm"):
        pytest.skip("vllm is installed here")
    rows = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "hi"}])
    assert main(["predict", str(runs["generation"]), "--input", str(rows), "--output", str(tmp_path / "o.jsonl"),
                 f"infer_backend={backend}"]) == 1
    assert message in capsys.readouterr().err


@needs_shared
def test_llamafactory_inference_examples_run_with_the_model_path_changed(runs, tmp_path, monkeypatch, capsys):
    examples = LF / "examples" / "inference"
    code, out, err = chat_in_process(monkeypatch, capsys, str(examples / "qwen3.yaml"),
                                     f"model_name_or_path={runs['qwen3']}", "--greedy", "max_new_tokens=4",
                                     stdin="hello\n/exit\n")
    assert code == 0 and len(out.splitlines()) == 1, err
    keys = {**classification_keys(tmp_path, runs["qwen3"], tmp_path / "adapter"), "template": "qwen3_nothink"}
    adapter = make_run(tmp_path / "adapter", keys)
    code, out, err = chat_in_process(monkeypatch, capsys, str(examples / "qwen3_lora_sft.yaml"),
                                     f"model_name_or_path={runs['qwen3']}", f"adapter_name_or_path={adapter}",
                                     stdin="太差了\n")
    assert code == 0, err
    assert out.split(" (p=")[0] in LABELS  # the adapter's run is a classifier: it answers with a label
    code, out, err = chat_in_process(monkeypatch, capsys, str(examples / "qwen3_full_sft.yaml"),
                                     f"model_name_or_path={runs['qwen3']}", "--greedy", "max_new_tokens=3",
                                     stdin="hi\n")
    assert code == 0 and len(out.splitlines()) == 1, err
    code, out, err = chat_in_process(monkeypatch, capsys, str(examples / "qwen3vl.yaml"),
                                     f"model_name_or_path={runs['qwen3']}", "--greedy", "max_new_tokens=3", stdin="hi\n")
    # qwen3_vl's text slots are Qwen3's: a text conversation runs with the template as LLaMA-Factory builds it
    assert code == 0 and len(out.splitlines()) == 1, err


def test_predict_refuses_a_prompt_past_the_models_window_naming_its_row(runs, tmp_path, capsys):
    """A prompt longer than the model's positions was generated from silently (an answer read where the model never
    trained)."""
    rows = write_jsonl(tmp_path / "long.jsonl", [{"prompt": "hello"}, {"prompt": "word " * 2000}])
    out = tmp_path / "o.jsonl"
    assert main(["predict", str(runs["generation"]), "--input", str(rows), "--output", str(out),
                 "max_new_tokens=4"]) == 1
    err = capsys.readouterr().err
    assert "long.jsonl line 2" in err and "positions" in err and not out.exists()
