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
    assert "each holds 2 of each layer's 4 experts" in done.stdout and "but its routed experts" in done.stdout
    assert losses(tmp_path / "two") == pytest.approx(single.losses, rel=1e-5)
    from safetensors.torch import load_file
    ours, reference = (load_file(tmp_path / name / "adapter_model.safetensors") for name in ("two", "one"))
    assert sorted(ours) == sorted(reference) and any("experts" in k for k in ours)
    assert all(ours[k].shape == reference[k].shape and torch.allclose(ours[k], reference[k], atol=1e-5) for k in ours)
    rows = [json.loads(line) for line in (tmp_path / "two" / "expert_load.jsonl").read_text().splitlines()]
    assert all(len(r["rank_load"]) == 2 and sum(r["rank_load"]) == pytest.approx(2.0, abs=1e-3) for r in rows)
    from peft import PeftModel
    PeftModel.from_pretrained(build_model("qwen3_moe"), str(tmp_path / "two"))   # loads as a one-process adapter


def _dispatch_worker(rank: int, port: int, results):
    import os

    import torch.distributed as dist

    from steadytune.distributed.expert_parallel import ExpertParallel, install_expert_parallel
    from steadytune.model.moe.anatomy import expert_sites
    from steadytune.model.moe.experts_lora import grouped_experts

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = build_model("qwen3_moe").double()
    site = expert_sites(model)[0]
    generator = torch.Generator().manual_seed(rank)
    hidden = torch.randn(6, 32, dtype=torch.float64, generator=generator)
    cases = {"spread": torch.randint(0, 4, (6, 2), generator=generator),
             "all to rank 0": torch.tensor([[0, 1]] * 6)}   # process 1's experts receive no row at all
    weights = torch.rand(6, 2, dtype=torch.float64, generator=generator)
    want = {}
    for name, index in cases.items():
        x = hidden.clone().requires_grad_(True)
        out = grouped_experts(site.experts, x, index, weights, {}, "loop")
        out.square().sum().backward()
        want[name] = (out.detach(), x.grad)
    install_expert_parallel(model, ExpertParallel(2, rank, dist.new_group([0, 1])), "loop")
    for name, index in cases.items():
        x = hidden.clone().requires_grad_(True)
        out = site.module(x, index, weights)
        out.square().sum().backward()
        results[(rank, name)] = [torch.allclose(a, b, atol=1e-10) for a, b in zip((out.detach(), x.grad), want[name])]
    dist.destroy_process_group()


@two_processes
def test_dispatch_and_combine_give_each_tokens_experts_output_even_to_an_idle_process():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_dispatch_worker, args=(port, results), nprocs=2)
    assert dict(results) == {(r, n): [True, True] for r in (0, 1) for n in ("spread", "all to rank 0")}
