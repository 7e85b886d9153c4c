"""Expert parallelism (ep_size, distributed/expert_parallel.py): a mixture of experts whose routed experts are split
over two processes (gloo, on the CPU) trains as one process does, each process holding half of every layer's expert
weights, the adapter saved whole; each process's share of the routed pairs is logged; what it cannot run with is
refused naming the key."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import two_processes
from test_distributed import losses, one_process, overrides, run_cli

from steadytune.config import load_config
from steadytune.distributed.expert_parallel import plan_expert_parallel
from steadytune.errors import UserError
from steadytune.model.tiny import build_model


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory):
    from steadytune.model.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("ep_model") / "qwen3_moe", "qwen3_moe")


def test_ep_size_is_refused_where_it_cannot_split_the_experts():
    moe, dense = build_model("qwen3_moe"), build_model("qwen2")   # 4 routed experts a layer
    with pytest.raises(UserError, match="has none"):
        plan_expert_parallel(load_config(None, ["ep_size=2"]), 2, 0, dense)
    with pytest.raises(UserError, match="does not divide the model's 4 routed experts"):
        plan_expert_parallel(load_config(None, ["ep_size=3"]), 3, 0, moe)
    with pytest.raises(UserError, match="ep_size: 2 with finetuning_type"):
        plan_expert_parallel(load_config(None, ["ep_size=2", "finetuning_type=full"]), 2, 0, moe)
    with pytest.raises(UserError, match="ep_size: 2 with fsdp"):
        plan_expert_parallel(load_config(None, ["ep_size=2", "fsdp=full_shard"]), 2, 0, moe)
    assert plan_expert_parallel(load_config(None, []), 2, 0, moe) is None


@two_processes
def test_experts_split_over_two_processes_train_as_one_process_and_save_the_whole_adapter(tiny_moe, sample_data_dir,
                                                                                          tmp_path):
    # the same examples a step: one process x 4 accumulation = two processes x 2
    single = one_process(tiny_moe, sample_data_dir, tmp_path / "one", max_steps=3, gradient_accumulation_steps=4)
    done = run_cli(overrides(tiny_moe, sample_data_dir, tmp_path / "two", max_steps=3, ep_size=2) + ["--nproc", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "each holds 2 of each layer's 4 experts" in done.stdout
    assert losses(tmp_path / "two") == pytest.approx(single.losses, rel=1e-5)
    from safetensors.torch import load_file
    ours, reference = (load_file(tmp_path / name / "adapter_model.safetensors") for name in ("two", "one"))
    assert sorted(ours) == sorted(reference) and any("experts" in k for k in ours)
    assert all(ours[k].shape == reference[k].shape and torch.allclose(ours[k], reference[k], atol=1e-5) for k in ours)
    rows = [json.loads(line) for line in (tmp_path / "two" / "expert_load.jsonl").read_text().splitlines()]
    assert all(len(r["rank_load"]) == 2 and sum(r["rank_load"]) == pytest.approx(2.0, abs=1e-3) for r in rows)
    from peft import PeftModel
    PeftModel.from_pretrained(build_model("qwen3_moe"), str(tmp_path / "two"))   # loads as a one-process adapter
