"""Hypothesis over the keys that lay a run out over processes and tiles (issue 67, round 5, this wave's features):
cp_size, ep_size, sequence_tiling, cutoff_len and the process count, on each tiny model family of the suite (the 2026
hybrids, Gemma 4's sliding windows, MoE, dense). Before any weights load (train's check_layout_before_loading, on the
model's config and meta skeleton) every combination is either accepted or one UserError line naming the key; an
accepted one never splits a row of a model whose layers a slice would compute wrongly, never leaves processes over,
and never tiles what the tiles cannot run. Before this round the refusals came after the weights had loaded, and a
Qwen3.5 with cp_size 2 trained on two processes without a word. Settings and profiles: tests/fuzzing.py."""

from __future__ import annotations

import pytest
from fuzzing import fuzz
from hypothesis import example, given
from hypothesis import strategies as st

from steadytune.config import load_config
from steadytune.distributed.sequence_parallel import unsplittable
from steadytune.errors import UserError
from steadytune.model.anatomy import text_config
from steadytune.model.load import model_config_before_loading, model_skeleton
from steadytune.model.moe.anatomy import expert_sites
from steadytune.model.tiling import tiling_blocker
from steadytune.model.tiny import build_tokenizer, save_tiny_model
from steadytune.train import check_layout_before_loading

KINDS = ("qwen3_5", "qwen3_next", "gemma4", "qwen3_moe", "qwen2")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tokenizer = build_tokenizer()
    root = tmp_path_factory.mktemp("layout")
    return {kind: save_tiny_model(root / kind, kind, tokenizer=tokenizer) for kind in KINDS}


@fuzz(40)
@given(kind=st.sampled_from(KINDS), cp=st.sampled_from([1, 2, 3, 4]), ep=st.sampled_from([1, 2, 3, 4]),
       tiling=st.sampled_from([None, True, False]), cutoff=st.sampled_from([8, 16, 64, 4096]),
       world=st.integers(1, 8), dropout=st.sampled_from([0.0, 0.1]))
@example(kind="qwen3_5", cp=2, ep=1, tiling=None, cutoff=64, world=2, dropout=0.0)
@example(kind="gemma4", cp=2, ep=1, tiling=None, cutoff=64, world=2, dropout=0.0)
def test_a_layout_is_accepted_only_where_it_runs_or_refused_in_one_line(folders, kind, cp, ep, tiling, cutoff, world,
                                                                       dropout):
    keys = {"model_name_or_path": str(folders[kind]), "cp_size": cp, "ep_size": ep, "cutoff_len": cutoff,
            "lora_dropout": dropout, **({} if tiling is None else {"sequence_tiling": tiling})}
    cfg = load_config(None, keys)
    try:
        check_layout_before_loading(cfg, world)
    except UserError as e:
        message = str(e)
        assert "\n" not in message and any(message.startswith(f"{key}: ") for key in
                                           ("cp_size", "ep_size", "sequence_tiling")), message
        return
    config = text_config(model_config_before_loading(cfg.model))
    skeleton = model_skeleton(cfg.model)
    if cp > 1:
        assert world % cp == 0 and unsplittable(config, cutoff) is None
    if ep > 1:
        sites = expert_sites(skeleton)
        assert world % ep == 0 and sites and sites[0].experts.num_experts % ep == 0 and cp == 1
    if tiling:
        assert tiling_blocker(skeleton, dropout) is None and cp == 1
