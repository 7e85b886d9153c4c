"""LLaMA-Factory v1's optimizer plugin (optim_config: muon), its `pair` data converter, and its dist_config: fsdp2
beside a quantised base or Muon on one process (FSDP left off, said why)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from steadytune.config import ConfigError, load_config
from steadytune.data.preference import PAIRS
from steadytune.data.prepare import prepare_datasets
from steadytune.data.readers import Row
from steadytune.data.registry import pair_rows
from steadytune.distributed.sharding import plan_sharding
from steadytune.errors import DataError
from steadytune.model.tiny import build_tokenizer


def v1_file(folder: Path, **extra) -> Path:
    raw = {"model": "tiny", "model_class": "llm", "train_dataset": "data.json", "output_dir": str(folder / "out"),
           "micro_batch_size": 1, "cutoff_len": 64, "learning_rate": 1e-5, "max_steps": 2, **extra}
    path = folder / "v1.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


MUON = {"name": "muon", "wd": 0.1, "momentum": 0.95, "nesterov": True, "ns_steps": 5, "adamw_betas": [0.9, 0.95],
        "adamw_eps": 1.0e-8}


def test_v1_muon_reads_its_own_learning_rate_and_weight_decay(tmp_path):
    cfg = load_config(v1_file(tmp_path, optim_config=dict(MUON, wd=0.05, adamw_betas=[0.8, 0.9])))
    t = cfg.train
    assert t.use_muon
    # v1's plugin builds Muon(lr=optim_config.get("lr", 1e-3), ...): the file's learning_rate 1e-5 is not read
    assert t.learning_rate == 1e-3
    assert (t.weight_decay, t.adam_beta1, t.adam_beta2, t.adam_epsilon) == (0.05, 0.8, 0.9, 1e-8)
    assert "never reads learning_rate" in cfg.decisions["lf_v1"]["reason"]
    assert load_config(v1_file(tmp_path, optim_config=dict(MUON, lr=0.02))).train.learning_rate == 0.02


@pytest.mark.parametrize("change, refused", [
    ({"momentum": 0.9}, "optim_config.momentum: 0.9"),
    ({"ns_steps": 6}, "optim_config.ns_steps: 6"),
    ({"name": "adamw"}, "optim_config: adamw"),
    ({"betas": [0.9, 0.99]}, "optim_config.betas"),
])
def test_v1_muon_settings_it_cannot_honour_are_refused(tmp_path, change, refused):
    with pytest.raises(ConfigError, match=refused.replace(".", r"\.").replace("[", r"\[")):
        load_config(v1_file(tmp_path, optim_config=dict(MUON, **change)))


def test_v1_muon_with_lora_is_refused_naming_the_difference(tmp_path):
    with pytest.raises(ConfigError, match="LoRA's factors to AdamW"):
        load_config(v1_file(tmp_path, optim_config=MUON, peft_config={"name": "lora", "r": 4}))


@pytest.mark.parametrize("extra, what", [
    ({"optim_config": MUON}, "use_muon optimizer"),
    ({"quant_config": {"name": "bnb", "quantization_bit": 4}, "peft_config": {"name": "lora", "r": 4}},
     "quantised base"),
])
def test_fsdp2_on_one_process_is_left_off_where_it_could_not_wrap(tmp_path, extra, what):
    cfg = load_config(v1_file(tmp_path, dist_config={"name": "fsdp2"}, **extra))
    assert cfg.train.fsdp
    plan = plan_sharding(cfg, world_size=1)
    assert plan.kind == "single" and what in plan.why and "splits nothing" in plan.why
    assert not cfg.train.fsdp and cfg.decisions["fsdp"]["value"] == "off"
    # AdamW (no quant_config, no optim_config) keeps FSDP2 on one process, as before
    plain = load_config(v1_file(tmp_path, dist_config={"name": "fsdp2"}))
    assert plan_sharding(plain, world_size=1).kind == "fsdp"


def test_fsdp_offload_stays_on_for_a_single_muon_process(tmp_path):
    cfg = load_config(v1_file(tmp_path, optim_config=MUON), {"fsdp": "full_shard auto_wrap offload"})
    assert plan_sharding(cfg, world_size=1).kind == "fsdp"   # offload does something on one process: kept (and
    # refused later by optimizers.refuse_with_sharding, as any sharded Muon run)


# --- v1's `pair` converter --------------------------------------------------------------------------------------

QUESTIONS = [("What colour is the sky?", "Blue.", "I cannot say."), ("Name a fruit.", "An apple.", "A chair."),
             ("Two plus two?", "Four.", "Five.")]


def test_pair_rows_are_the_shared_conversation_and_two_answers(tmp_path):
    """The same pairs, once as v1 `pair` rows (a data YAML with converter: pair) and once as LLaMA-Factory v0's
    sharegpt ranking rows: the same tokens and labels."""
    system = {"role": "system", "content": "Be brief."}
    pair = [{"chosen": [system, {"role": "user", "content": q}, {"role": "assistant", "content": good}],
             "rejected": [system, {"role": "user", "content": q}, {"role": "assistant", "content": bad}]}
            for q, good, bad in QUESTIONS]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pair), encoding="utf-8")
    (tmp_path / "v1_dpo.yaml").write_text(yaml.safe_dump(
        {"dpo_demo": {"path": str(tmp_path / "pairs.jsonl"), "source": "local", "converter": "pair"}}))
    sharegpt = [{"conversations": [{"from": "human", "value": q}], "system": "Be brief.",
                 "chosen": {"from": "gpt", "value": good}, "rejected": {"from": "gpt", "value": bad}}
                for q, good, bad in QUESTIONS]
    (tmp_path / "v0.json").write_text(json.dumps(sharegpt), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"v0": {
        "file_name": "v0.json", "ranking": True, "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system", "chosen": "chosen", "rejected": "rejected"}}}))
    tokenizer = build_tokenizer()
    common = {"stage": "dpo", "template": "qwen", "cutoff_len": 128, "dataset_dir": str(tmp_path),
              "output_dir": str(tmp_path / "out")}
    v1 = prepare_datasets(load_config(None, [f"{k}={v}" for k, v in
                                             {**common, "dataset": str(tmp_path / "v1_dpo.yaml")}.items()]),
                          tokenizer, PAIRS)
    v0 = prepare_datasets(load_config(None, [f"{k}={v}" for k, v in {**common, "dataset": "v0"}.items()]),
                          tokenizer, PAIRS)
    assert len(v1.train) == len(v0.train) == len(QUESTIONS)
    key = lambda e: e["input_ids"]   # noqa: E731
    assert sorted(map(key, v1.train)) == sorted(map(key, v0.train))
    assert sorted(e["labels"] for e in v1.train) == sorted(e["labels"] for e in v0.train)


@pytest.mark.parametrize("chosen, rejected", [
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
     [{"role": "user", "content": "other"}, {"role": "assistant", "content": "c"}]),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "d"},
      {"role": "assistant", "content": "e"}],
     [{"role": "user", "content": "a"}, {"role": "assistant", "content": "c"}]),
])
def test_pair_rows_that_differ_before_the_last_answer_are_refused(chosen, rejected):
    with pytest.raises(DataError, match="row 3: chosen and rejected must share every message but the last"):
        pair_rows([Row("pairs.jsonl row 3", {"chosen": chosen, "rejected": rejected})])
    with pytest.raises(DataError, match="lists of messages"):
        pair_rows([Row("pairs.jsonl row 3", {"chosen": "text", "rejected": rejected})])


PAIR_GOLDEN = json.loads((Path(__file__).parent / "golden" / "lf_v1_pair.json").read_text(encoding="utf-8"))


def _text(message: dict) -> tuple[str, str]:
    content = message["content"]
    return message["role"], content if isinstance(content, str) else "".join(b["value"] for b in content)


@pytest.mark.parametrize("index", range(len(PAIR_GOLDEN["rows"])))
def test_pair_rows_split_as_llamafactorys_converter_reads_them(index):
    """LLaMA-Factory 0.9.5's v1 pair converter on the same rows (tools/make_lf_v1_pair_golden.py): its chosen and
    rejected messages are the shared conversation here, then each side's answer. (v1 weighs every assistant turn 1.0;
    a preference pair here is scored on its last answer, the two sides' difference: the same for one-turn rows.)"""
    ours = pair_rows([Row("row", PAIR_GOLDEN["rows"][index])])[0].data
    lf = PAIR_GOLDEN["converted"][index]
    assert [_text(m) for m in ours["messages"]] == [_text(m) for m in lf["chosen_messages"][:-1]] == \
        [_text(m) for m in lf["rejected_messages"][:-1]]
    assert _text(ours["chosen"]) == _text(lf["chosen_messages"][-1])
    assert _text(ours["rejected"]) == _text(lf["rejected_messages"][-1])
    assert lf["chosen_messages"][-1]["loss_weight"] == 1.0
