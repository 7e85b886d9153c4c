"""Issue 25, case 9: with allow_pickle_weights: true, a pickled adapter whose content torch's weights_only loader
refuses is one line naming the file, from every command that loads an adapter (the payload never runs)."""

from __future__ import annotations

import io
import sys

import pytest
import torch
from _infer_runs import classification_keys, make_run, write_jsonl
from safetensors.torch import load_file

from steadytune.cli import main

PAYLOAD = "import pathlib, os\npathlib.Path(os.environ['STEADYTUNE_TEST_MARKER']).write_text('code ran')\n"


class _Payload:
    """Unpickling this would run code: what a hostile adapter_model.bin carries."""

    def __reduce__(self):
        return (exec, (PAYLOAD,))


@pytest.fixture(scope="module")
def pickled_run(tmp_path_factory):
    from steadytune.model.tiny import save_tiny_model

    root = tmp_path_factory.mktemp("pickled")
    base = save_tiny_model(root / "base", "qwen2")
    run = make_run(root / "run", classification_keys(root, base, root / "run"))
    weights = load_file(run / "adapter_model.safetensors")
    (run / "adapter_model.safetensors").unlink()
    torch.save({**weights, "evil": _Payload()}, run / "adapter_model.bin")
    return root, run


@pytest.mark.parametrize("command", ["chat", "predict", "eval"])
def test_a_refused_pickle_is_one_line_naming_the_file(pickled_run, command, capsys, monkeypatch, tmp_path):
    root, run = pickled_run
    marker = tmp_path / "payload-ran"
    monkeypatch.setenv("STEADYTUNE_TEST_MARKER", str(marker))
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": "很好"}])
    argv = {"chat": ["chat", str(run), "allow_pickle_weights=true"],
            "predict": ["predict", str(run), "--input", str(rows), "--output", str(tmp_path / "p.jsonl"),
                        "allow_pickle_weights=true"],
            "eval": ["eval", str(run / "run_config.yaml"), "allow_pickle_weights=true", "--known-samples", "0",
                     "--output-dir", str(tmp_path / "eval")]}[command]
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]   # (transformers' progress bar aside)
    assert "Traceback" not in err and len(errors) == 1, err
    assert str(run / "adapter_model.bin") in errors[0] and "weights_only loader refused" in errors[0], err
    assert not marker.exists()
