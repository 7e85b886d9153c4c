"""Every LLaMA-Factory key we accept has LLaMA-Factory's default, or a recorded, printed difference.

tests/golden/lf_defaults.json lists the default of every key of LLaMA-Factory's argument classes (made from its
dataclasses by tools/make_template_golden.py, with the transformers version it pins).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from steadytune.config import (
    FLAT_SECTIONS,
    LF_DEFAULT_DIFFERENCES,
    NOOP_KEYS,
    SECTION_TYPES,
    UNSUPPORTED_KEYS,
    load_config,
)

LF = json.loads((Path(__file__).parent / "golden" / "lf_defaults.json").read_text(encoding="utf-8"))["keys"]
OURS = {f.name: f for name in FLAT_SECTIONS for f in dataclasses.fields(SECTION_TYPES[name])}
SHARED = sorted(set(OURS) & set(LF))
# The same default written two ways: transformers' warmup_ratio None means no warm-up, as our 0.0 does.
SAME_MEANING = {("warmup_ratio", None): 0.0}


def our_default(key: str):
    f = OURS[key]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


@pytest.mark.parametrize("key", SHARED)
def test_default_is_llamafactorys_or_a_recorded_difference(key):
    lf_default = LF[key]["default"]
    lf_default = SAME_MEANING.get((key, lf_default), lf_default)
    if key in LF_DEFAULT_DIFFERENCES:
        recorded, why = LF_DEFAULT_DIFFERENCES[key]
        assert recorded == lf_default, f"{key}: the table says LLaMA-Factory's default is {recorded!r}, it is {lf_default!r}"
        # Either the value differs, or both leave it unset and resolve it differently (the reason says how).
        assert our_default(key) != lf_default or why.startswith("unset"), \
            f"{key}: the same default as LLaMA-Factory; drop it from the table"
    else:
        assert our_default(key) == lf_default, (f"{key}: default {our_default(key)!r} here, {lf_default!r} in "
                                                f"LLaMA-Factory; use theirs or add it to LF_DEFAULT_DIFFERENCES")


def test_the_table_names_only_llamafactory_keys_we_have():
    assert set(LF_DEFAULT_DIFFERENCES) <= set(SHARED)
    assert set(NOOP_KEYS) <= set(OURS)
    assert not set(UNSUPPORTED_KEYS) & set(OURS)


def test_shared_keys_cover_the_everyday_ones():
    for key in ("learning_rate", "lr_scheduler_type", "num_train_epochs", "per_device_train_batch_size",
                "gradient_accumulation_steps", "cutoff_len", "lora_rank", "lora_alpha", "lora_dropout", "lora_target",
                "warmup_steps", "weight_decay", "max_grad_norm", "seed", "max_new_tokens", "enable_thinking", "optim"):
        assert key in SHARED


def test_unset_differences_are_recorded_and_set_keys_are_not():
    cfg = load_config(None, {"dataset": "x"})
    for key in ("bf16", "logging_steps", "output_dir"):
        assert "LLaMA-Factory's default" in cfg.decisions[key]["reason"]
    assert cfg.train.learning_rate == 5e-5 and cfg.train.lr_scheduler_type == "linear"
    cfg = load_config(None, {"dataset": "x", "bf16": True, "logging_steps": 1})
    assert "bf16" not in cfg.decisions and "logging_steps" not in cfg.decisions


def test_noop_keys_are_accepted_and_recorded():
    cfg = load_config(None, {"dataset": "x", "overwrite_cache": True, "dataloader_num_workers": 4,
                             "preprocessing_num_workers": 16, "ddp_timeout": 180000000})
    for key in ("overwrite_cache", "dataloader_num_workers", "preprocessing_num_workers", "ddp_timeout"):
        assert cfg.decisions[key]["reason"], key
    assert "overwrite_cache" not in load_config(None, {"dataset": "x", "overwrite_cache": False}).decisions
