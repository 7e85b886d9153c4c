"""LLaMA-Factory's Ray launch (USE_RAY=1 and its ray_* keys): the plan, the rank layout, and a real run of two
training processes on a local Ray (skipped where Ray is not installed: pip install 'steadytune[ray]')."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import two_processes

from steadytune.config import load_config
from steadytune.distributed.ray_launch import (
    RayPlan,
    check_cluster_fits,
    child_environment,
    order_ranks,
    plan_ray,
    ray_requested,
    rank_environments,
    worker_resources,
)
from steadytune.errors import UserError
from steadytune.model.tiny import save_tiny_model

ROOT = Path(__file__).resolve().parents[1]


def plan(**keys) -> RayPlan:
    return plan_ray(load_config(None, [f"{k}={v}" for k, v in keys.items()]).train)


def test_use_ray_is_read_as_llamafactory_reads_it():
    assert all(ray_requested({"USE_RAY": v}) for v in ("1", "true", "True", "y"))
    assert not any(ray_requested(env) for env in ({}, {"USE_RAY": "0"}, {"USE_RAY": "false"}, {"USE_RAY": ""}))


def test_plan_reads_the_keys_of_both_llamafactory_generations(tmp_path):
    p = plan(ray_num_workers=4, ray_init_kwargs='{"num_cpus": 8}', resources_per_worker='{"GPU": 1, "CPU": 4}',
             placement_strategy="SPREAD", ray_run_name="qwen", ray_storage_path=str(tmp_path))
    assert (p.num_workers, p.init_kwargs, p.resources, p.strategy) == (4, {"num_cpus": 8}, {"GPU": 1, "CPU": 4},
                                                                       "SPREAD")
    assert p.output_dir == str(tmp_path / "qwen") and "ray_storage_path/ray_run_name" in p.notes[0]
    assert plan().output_dir is None and plan().num_workers == 1
    with pytest.raises(UserError, match="ray_init_kwargs: not valid JSON"):
        plan(ray_init_kwargs="{num_cpus")
    with pytest.raises(UserError, match="resources_per_worker: each resource needs a number"):
        plan(resources_per_worker='{"GPU": "one"}')


def test_worker_resources_and_the_cluster_check():
    p = plan(ray_num_workers=4)
    assert worker_resources(p, {"CPU": 64, "GPU": 8}) == {"GPU": 1}
    assert worker_resources(p, {"CPU": 2}) == {"CPU": 1}
    check_cluster_fits(p, {"GPU": 1}, {"GPU": 4})
    with pytest.raises(UserError, match=r"4 workers x CPU 1 = 4, but the Ray cluster has 2 CPU.*num_cpus"):
        check_cluster_fits(p, {"CPU": 1}, {"CPU": 2})


def test_ranks_start_on_the_master_node_and_count_locally():
    nodes = ["10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.1"]
    order = order_ranks(nodes, "10.0.0.1")
    assert [nodes[i] for i in order] == ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"]
    envs = rank_environments(nodes, order, "10.0.0.1", 29500)
    assert [(e["RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"], e["GROUP_RANK"]) for e in envs] == \
        [("0", "0", "2", "0"), ("1", "1", "2", "0"), ("2", "0", "2", "1"), ("3", "1", "2", "1")]
    assert {e["GROUP_WORLD_SIZE"] for e in envs} == {"2"}
    assert {(e["WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("4", "10.0.0.1", "29500")}
    assert [nodes[i] for i in order_ranks(nodes, None)][0] == "10.0.0.2"   # default: the first bundle's node
    with pytest.raises(UserError, match="master_addr: 10.9.9.9 is not the address of a node"):
        order_ranks(nodes, "10.9.9.9")


def test_a_workers_child_does_not_launch_again():
    env = child_environment({"USE_RAY": "1", "RANK": "7", "PATH": "/bin", "CUDA_VISIBLE_DEVICES": "3"},
                            {"RANK": "1", "WORLD_SIZE": "2"})
    assert "USE_RAY" not in env and env["RANK"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "3"


@two_processes
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install "
                    "'steadytune[ray]'): the Ray launch is tested on its plan only")
def test_use_ray_trains_two_ranks_on_a_local_ray(tmp_path, sample_data_dir):
    model = save_tiny_model(tmp_path / "model", "qwen2")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": str(model), "dataset": "alpaca_sample", "dataset_dir": str(sample_data_dir),
        "template": "qwen", "cutoff_len": 64, "max_samples": 16, "max_steps": 2, "per_device_train_batch_size": 2,
        "output_dir": "ignored", "ray_num_workers": 2, "ray_run_name": "run", "ray_storage_path": str(tmp_path / "saves"),
        "ray_init_kwargs": {"num_cpus": 2, "include_dashboard": False}}), encoding="utf-8")
    env = dict(os.environ, USE_RAY="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, "-m", "steadytune", "train", str(config)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting 2 training processes on Ray" in done.stdout
    out = tmp_path / "saves" / "run"
    assert (out / "adapter_model.safetensors").is_file() and not (tmp_path / "ignored").exists()
    decisions = yaml.safe_load((out / "run_config.yaml").read_text(encoding="utf-8"))["decisions"]
    assert decisions["sharding"]["value"] == "DDP" and decisions["sharding"]["reason"].startswith("2 processes")
