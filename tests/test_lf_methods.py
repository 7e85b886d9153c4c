"""LLaMA-Factory's training methods against LLaMA-Factory 0.9.5 itself (tests/golden/lf_methods.json, made by
`tools/make_lf_fidelity_golden.py --methods`): for each method, on its own example file with the keys the golden
changed for a 4-layer tiny Qwen2, the trainable parameters' names, each trainable weight's optimizer settings
(learning rate, weight decay, the method's own), and the loss of each of the first three steps (the whole data set in
one micro-batch a step, so only the method decides them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import LF_FIXTURES, needs_shared

from steadytune.config import load_config

GOLDEN = json.loads((Path(__file__).parent / "golden" / "lf_methods.json").read_text(encoding="utf-8"))
TOKENIZER = Path(__file__).parent / "golden" / "tokenizers" / "bytelevel"
EXAMPLES = LF_FIXTURES / "examples"
LIBRARIES = {"galore": "galore_torch", "galore_layerwise": "galore_torch", "apollo": "apollo_torch",
             "badam": "badam", "adam_mini": "adam_mini"}
# The settings compared per weight (the optimizer's own numbers: learning rate, decay, the method's).
SETTINGS = ("lr", "weight_decay", "rank", "update_proj_gap", "scale", "proj_type", "proj", "scale_type",
            "scale_front", "muon")
# Muon's Newton-Schulz runs in bf16 on torch's side and LLaMA-Factory's, from inputs scaled differently (torch keeps
# its momentum as an average, LLaMA-Factory as a sum): the same update up to bf16 rounding.
LOSS_TOLERANCE = {"muon": 2e-4}


@pytest.fixture(scope="module")
def methods_model(tmp_path_factory) -> Path:
    """The golden's model, built as the tool builds it (the same weights: seed 0, the same config)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("lf_methods") / "qwen2"
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    config = Qwen2Config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                         **GOLDEN["tiny_qwen2"])
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def seeded_peft(monkeypatch):
    """As in the golden: the seed reset to 0 just before peft makes the adapter (LoRA's random A matrices)."""
    import peft

    original = peft.get_peft_model

    def seeded(*args, **kwargs):
        torch.manual_seed(0)
        return original(*args, **kwargs)

    monkeypatch.setattr(peft, "get_peft_model", seeded)


def method_config(name: str, model: Path, out: Path, **extra):
    case = GOLDEN["cases"][name]
    overrides = {**GOLDEN["common"], **case["changes"], "model_name_or_path": str(model),
                 "dataset_dir": str(LF_FIXTURES / "data"), "output_dir": str(out), "overwrite_output_dir": True,
                 "save_steps": 1000, **extra}
    for key in ("deepspeed",):   # the golden ran without it (one process, no GPU)
        overrides.pop(key, None)
    cfg = load_config(EXAMPLES / case["example"], overrides)
    cfg.method.deepspeed = None
    return cfg


def needs_library(name: str):
    module = LIBRARIES.get(name)
    if module is not None:
        pytest.importorskip(module, reason=f"{module} is not installed (pip install 'steadytune[optimizers]')")


def per_weight(groups: list[dict]) -> dict[str, dict]:
    out = {}
    for group in groups:
        for name in group["names"]:
            out[name] = {k: group[k] for k in SETTINGS if k in group and k != "muon"}
            if "muon" in group:
                out[name]["muon"] = name in group["muon"]
    return out


def our_groups(optimizer, model) -> list[dict]:
    names = {id(p): n for n, p in model.named_parameters()}
    inner = getattr(optimizer, "optimizers", [optimizer])   # CombinedOptimizer / LayerwiseOptimizer: the inner ones
    has_muon = any(type(o).__name__ == "Muon" for o in inner)
    groups = []
    for opt in inner:
        for group in opt.param_groups:
            entry = {"names": [names[id(p)] for p in group["params"]], **{k: group[k] for k in SETTINGS if k in group}}
            if has_muon:
                entry["muon"] = entry["names"] if type(opt).__name__ == "Muon" else []
            groups.append(entry)
    return groups


@needs_shared
@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_trainable_set_and_optimizer_groups_are_llamafactorys(name, methods_model, tmp_path, seeded_peft):
    from transformers import AutoModelForCausalLM

    from steadytune.model.lora import attach_adapter
    from steadytune.training.optimizers import build_optimizer

    needs_library(name)
    want = GOLDEN["cases"][name]
    cfg = method_config(name, methods_model, tmp_path)
    model = attach_adapter(AutoModelForCausalLM.from_pretrained(methods_model), cfg)
    optimizer, _ = build_optimizer(model, cfg, "cpu")
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert trainable == want["trainable"]
    want_groups = per_weight(want["groups"])
    ours = per_weight(our_groups(optimizer, model))
    if name == "muon":   # LLaMA-Factory's Muon is one group; ours two optimizers (Muon, AdamW): compare who is whose
        assert {n for n, s in ours.items() if s["muon"]} == {n for n, s in want_groups.items() if s["muon"]}
        assert all(s["lr"] == want["groups"][0]["lr"] and s["weight_decay"] == want["groups"][0]["wd"]
                   for s in ours.values())
        return
    assert set(ours) == set(want_groups)
    for weight, settings in want_groups.items():
        for key, value in settings.items():
            if key in ("lr", "weight_decay"):
                assert ours[weight][key] == pytest.approx(value), (weight, key)
            else:
                assert ours[weight].get(key) == value, (weight, key)


@needs_shared
@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_first_steps_losses_are_llamafactorys(name, methods_model, tmp_path, seeded_peft):
    from steadytune.train import run_training

    needs_library(name)
    want = GOLDEN["cases"][name]["losses"]
    cfg = method_config(name, methods_model, tmp_path / "run", bf16=False)
    result = run_training(cfg, progress=False)
    tolerance = LOSS_TOLERANCE.get(name, 2e-5)
    assert result.losses == pytest.approx(want, rel=tolerance), (result.losses, want)
    # the method moved the loss: a run that trained nothing would repeat the first value
    assert abs(result.losses[-1] - result.losses[0]) > 5 * tolerance * abs(want[0])
