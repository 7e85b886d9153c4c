"""Loading a model runs no code the user did not allow: a model's own Python files only with
trust_remote_code: true (every command that loads a model honours it), and weights from safetensors only unless
allow_pickle_weights: true. Each hostile folder carries a payload that would create a marker file: it must not
appear."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from _infer_runs import classification_keys, make_run, write_jsonl

from steadytune.cli import main
from steadytune.config import load_config
from steadytune.errors import UserError
from steadytune.infer.loading import load_run_config
from steadytune.model.archive import write_archive
from steadytune.model.load import load_model_and_tokenizer
from steadytune.model.lora import load_trained_adapter
from steadytune.model.tiny import save_tiny_model

PAYLOAD = "import pathlib, os\npathlib.Path(os.environ['STEADYTUNE_TEST_MARKER']).write_text('code ran')\n"


@pytest.fixture()
def marker(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "payload-ran"
    monkeypatch.setenv("STEADYTUNE_TEST_MARKER", str(path))
    return path


def with_remote_code(folder: Path, model_type: str) -> Path:
    """A model folder whose config names its own classes (auto_map) in files that run the payload on import."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(model_type=model_type, auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                                   "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (folder / name).write_text(PAYLOAD, encoding="utf-8")
    return folder


def test_every_command_refuses_a_model_that_needs_its_own_code(tmp_path, marker, capsys):
    model = with_remote_code(save_tiny_model(tmp_path / "evil", "qwen2"), "evil_model")
    keys = classification_keys(tmp_path, model, tmp_path / "run", template="empty")
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(keys, ensure_ascii=False), encoding="utf-8")
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": "很好"}])
    commands = {
        "train": ["train", str(config), "max_steps=1", "--force"],
        "export": ["export", str(model), f"export_dir={tmp_path / 'out'}"],
        "chat": ["chat", str(model)],
        "predict": ["predict", str(model), "--input", str(rows), "--output", str(tmp_path / "p.jsonl")],
        "serve": ["serve", str(model), "--port", "8765"],  # refused while loading, before the port is opened
    }
    for name, argv in commands.items():
        capsys.readouterr()
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 1, name
        assert "trust_remote_code: true" in err and "ships its own code" in err, (name, err)
        assert not marker.exists(), name
    # eval (which needs an adapter to evaluate) on that base: refused at the model load too
    base = save_tiny_model(tmp_path / "plain", "qwen2")
    adapter = make_run(tmp_path / "adapter", classification_keys(tmp_path, base, tmp_path / "adapter"))
    capsys.readouterr()
    assert main(["eval", str(config), f"adapter_name_or_path={adapter}", "--known-samples", "0"]) == 1
    assert "trust_remote_code: true" in capsys.readouterr().err
    assert not marker.exists()


def test_built_in_architecture_loads_without_running_the_shipped_code(tmp_path, marker, capsys):
    model = with_remote_code(save_tiny_model(tmp_path / "m", "qwen2"), "qwen2")
    loaded, _ = load_model_and_tokenizer(load_config(None, {"model_name_or_path": str(model)}).model)
    assert type(loaded).__name__ == "Qwen2ForCausalLM"
    assert "is not run" in capsys.readouterr().err
    assert not marker.exists()


class _Payload:
    """Unpickling this runs os.system-like code: what a hostile pytorch_model.bin carries."""

    def __reduce__(self):
        return (exec, (PAYLOAD,))


def test_pickle_weights_are_refused_unless_allowed(tmp_path, marker):
    folder = save_tiny_model(tmp_path / "m", "qwen2")
    state = {k: v.clone() for k, v in load_model_and_tokenizer(
        load_config(None, {"model_name_or_path": str(folder)}).model)[0].state_dict().items()}
    (folder / "model.safetensors").unlink()
    torch.save({**state, "evil": _Payload()}, folder / "pytorch_model.bin")
    cfg = load_config(None, {"model_name_or_path": str(folder)})
    with pytest.raises(UserError, match="allow_pickle_weights: true"):
        load_model_and_tokenizer(cfg.model)
    assert not marker.exists()
    # opted in, transformers still reads the file with torch's weights_only loader: the payload is refused there too
    clean = save_tiny_model(tmp_path / "clean", "qwen2")
    (clean / "model.safetensors").unlink()
    torch.save(state, clean / "pytorch_model.bin")
    allowed = load_config(None, {"model_name_or_path": str(clean), "allow_pickle_weights": True})
    model, _ = load_model_and_tokenizer(allowed.model)
    assert torch.equal(model.state_dict()["model.norm.weight"], state["model.norm.weight"])
    assert not marker.exists()


def test_pickled_adapter_is_refused_unless_allowed(tmp_path, marker):
    base = save_tiny_model(tmp_path / "base", "qwen2")
    adapter = make_run(tmp_path / "run", classification_keys(tmp_path, base, tmp_path / "run"))
    from safetensors.torch import load_file

    weights = load_file(adapter / "adapter_model.safetensors")
    (adapter / "adapter_model.safetensors").unlink()
    torch.save({**weights, "evil": _Payload()}, adapter / "adapter_model.bin")
    model, _ = load_model_and_tokenizer(load_config(None, {"model_name_or_path": str(base)}).model)
    with pytest.raises(UserError, match="allow_pickle_weights: true"):
        load_trained_adapter(model, adapter)
    assert not marker.exists()
    # serve: as SOURCE, and as an extra --adapter (which must be safetensors: its shapes are checked first)
    from steadytune.serve.loading import load_served
    with pytest.raises(UserError, match="allow_pickle_weights: true"):
        load_served(str(adapter), [], [])
    clean = make_run(tmp_path / "clean", classification_keys(tmp_path, base, tmp_path / "clean"))
    with pytest.raises(UserError, match="no adapter_model.safetensors"):
        load_served(str(clean), [f"evil={adapter}"], [])
    assert not marker.exists()
    assert os.environ["STEADYTUNE_TEST_MARKER"] == str(marker)


# ---------------------------------------------------------------------------------------------------------
# Issue 25, case 1: a file we did not get from the user's own command line never grants trust
# ---------------------------------------------------------------------------------------------------------

def _attackers_archive(tmp_path: Path, folder: Path, run_config: str) -> Path:
    """Pack every file of `folder` as an attacker would: with write_archive, so the manifest's hashes match."""
    (folder / "run_config.yaml").write_text(run_config, encoding="utf-8")
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return write_archive(folder, tmp_path / f"{folder.name}.tar.gz", files=files)


def test_an_archive_or_run_folder_never_grants_trust_remote_code(tmp_path, marker, capsys, monkeypatch):
    monkeypatch.setenv("STEADYTUNE_CACHE", str(tmp_path / "cache"))
    model = with_remote_code(save_tiny_model(tmp_path / "evil", "qwen2"), "evil_model")
    archive = _attackers_archive(tmp_path, model, "trust_remote_code: true\nallow_pickle_weights: true\n"
                                                  "template: empty\n")
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": "hi"}])
    for source in (archive, model):  # the archive, and the same files as a run folder from elsewhere
        commands = {
            "chat": ["chat", str(source)],
            "predict": ["predict", str(source), "--input", str(rows), "--output", str(tmp_path / "p.jsonl")],
            "export": ["export", str(source), f"export_dir={tmp_path / 'out'}"],
            "serve": ["serve", str(source), "--port", "8765"],  # refused while loading, before the port is opened
        }
        if source == model:   # issue 54: the folder's run_config.yaml named as a config is the folder's too (the
            # studio's Evaluate ran exactly this command)
            commands["eval"] = ["eval", str(model / "run_config.yaml"), f"output_dir={model}", f"eval_dataset={rows}"]
            commands["chat config"] = ["chat", str(model / "run_config.yaml"), f"model_name_or_path={model}"]
        for name, argv in commands.items():
            monkeypatch.setattr("sys.stdin", io.StringIO("hi\n"))
            capsys.readouterr()
            code = main(argv)
            err = capsys.readouterr().err
            assert code == 1, (name, source, err)
            assert not marker.exists(), (name, source)
            assert "run_config.yaml" in err and "asks for trust_remote_code: true" in err, (name, err)
            assert "Traceback" not in err
    # the user's own command line may grant it: the payload is real (it runs once the user says so)
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\n"))
    try:
        main(["chat", str(archive), "trust_remote_code=true"])
    except Exception:  # the payload defines no model class; what matters is that it ran
        pass
    assert marker.exists()


def test_an_adapter_archive_never_grants_allow_pickle_weights(tmp_path, marker, capsys, monkeypatch):
    monkeypatch.setenv("STEADYTUNE_CACHE", str(tmp_path / "cache"))
    base = save_tiny_model(tmp_path / "base", "qwen2")
    adapter = make_run(tmp_path / "adapter", classification_keys(tmp_path, base, tmp_path / "adapter"))
    from safetensors.torch import load_file

    weights = load_file(adapter / "adapter_model.safetensors")
    (adapter / "adapter_model.safetensors").unlink()
    torch.save({**weights, "evil": _Payload()}, adapter / "adapter_model.bin")
    saved = yaml.safe_load((adapter / "run_config.yaml").read_text(encoding="utf-8"))
    saved.update(allow_pickle_weights=True, vllm_config={"trust_remote_code": True})
    archive = _attackers_archive(tmp_path, adapter, yaml.safe_dump(saved, allow_unicode=True))
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": "很好"}])
    for source in (archive, adapter):
        capsys.readouterr()
        assert main(["predict", str(source), "--input", str(rows), "--output", str(tmp_path / "p.jsonl")]) == 1
        err = capsys.readouterr().err
        assert "run_config.yaml asks for allow_pickle_weights: true" in err, err
        assert "asks for vllm_config" in err
        assert "adapter_model.bin" in err and "Traceback" not in err
        assert not marker.exists()
    # serve's --adapter: a run folder's run_config.yaml is read for its template and labels, never for trust
    cfg = load_run_config(adapter, [], str(adapter))
    assert not cfg.model.allow_pickle_weights and cfg.model.vllm_config is None
    # the user's own override still grants it
    assert load_run_config(adapter, ["allow_pickle_weights=true"], str(adapter)).model.allow_pickle_weights
