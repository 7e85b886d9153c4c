"""Several nodes, as two "nodes" on this machine over the loopback: two launchers (`steadytune train --nnodes 2`, or
LLaMA-Factory's launch variables), each starting one CPU process on gloo.

- the loss curve of 2 nodes x 1 process equals one process with the same global batch (DDP LoRA through LF's
  variables and the static rendezvous; FSDP2 LoRA through the elastic one; ZeRO-3 full fine-tuning), the per-node
  logs and the start-up all-reduce line;
- a process killed mid-run (fault_injection.kill_step) costs an elastic restart through the rendezvous, which resumes
  from the last complete checkpoint and gives the uninterrupted curve; the survivor stops with one line;
- a node that never arrives ends in a rendezvous timeout that says what to do;
- the hang watchdog names the stalled rank's node and host, its step and last collective;
- a node that sees another output folder stops the run at start;
plus the pieces without processes: the launch plan from flags and LF's variables, `doctor --nodes`, the lock of an
earlier attempt, the lost-peer line.

The single-node equivalence (2 processes on one node == 1 process) is tests/test_distributed.py's. Each two-node
launch costs ~15 s of start-up on two shared cores, so one launch proves two things where it can (ZeRO-3 parity and
the hang message)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import two_processes
from sample_data import ALPACA

from steadytune.config import load_config
from steadytune.distributed.launch import RENDEZVOUS_EXIT_CODE, plan_launch
from steadytune.distributed.nodes import NodeLayout, lost_peer, started_by_this_launch
from steadytune.distributed.watchdog import HANG_EXIT_CODE
from steadytune.doctor.nodes import check_nodes
from steadytune.errors import UserError
from steadytune.model.tiny import save_tiny_model
from steadytune.train import run_training
from steadytune.training.monitor import read_metrics
from steadytune.training.run_folder import earlier_attempt

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_TIMEOUT_S = 240
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed is not installed (pip install 'steadytune[deepspeed]')")


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("model") / "qwen2", "qwen2")


def keys(model: Path, data_dir: Path, out: Path, **extra) -> dict:
    base = {"model_name_or_path": str(model), "dataset": ALPACA, "dataset_dir": str(data_dir), "template": "qwen",
            "cutoff_len": 64, "max_samples": 64, "output_dir": str(out), "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 2, "learning_rate": 5e-3, "max_steps": 4, "logging_steps": 1,
            "save_steps": 2, "warmup_steps": 1, "lora_rank": 4, "seed": 7}
    return {**base, **extra}


@pytest.fixture(scope="module")
def one_process(tiny_qwen, sample_data_dir, tmp_path_factory):
    """The reference curve: one process, 4 accumulation steps = 2 nodes x 1 process x 2 (16 examples a step)."""
    out = tmp_path_factory.mktemp("one") / "run"
    config = keys(tiny_qwen, sample_data_dir, out, gradient_accumulation_steps=4)
    return run_training(load_config(None, [f"{k}={v}" for k, v in config.items()]), progress=False).losses


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(config: dict) -> Path:
    """The YAML a user would write beside output_dir (`section.key` items nested under their section)."""
    nested: dict = {}
    for key, value in config.items():
        section, dot, name = key.partition(".")
        if dot:
            nested.setdefault(section, {})[name] = value
        else:
            nested[key] = value
    path = Path(str(config["output_dir"]) + ".yaml")
    path.write_text(yaml.safe_dump(nested), encoding="utf-8")
    return path


def start_node(config: Path, flags: list[str], env: dict | None = None) -> subprocess.Popen:
    environ = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "OMP_NUM_THREADS": "1", **(env or {})}
    for name in ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "RDZV_ID", "MAX_RESTARTS"):
        if env is None or name not in env:
            environ.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "steadytune", "train", str(config), *flags], cwd=ROOT,
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(nodes: list[subprocess.Popen]) -> list[SimpleNamespace]:
    done = []
    for node in nodes:
        try:
            out, err = node.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other in nodes:
                other.kill()
            raise
        done.append(SimpleNamespace(returncode=node.returncode, stdout=out, stderr=err))
    return done


def losses(out: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(out / "metrics.jsonl") if "loss" in r and "event" not in r]


# ---------------------------------------------------------------------------------------------------------
# Two launchers on this machine
# ---------------------------------------------------------------------------------------------------------

@two_processes
def test_lf_launch_line_on_two_nodes_matches_one_process(tiny_qwen, sample_data_dir, tmp_path, one_process):
    """FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=R MASTER_ADDR=... MASTER_PORT=... steadytune train run.yaml, as
    LLaMA-Factory's README launches its two nodes."""
    out = tmp_path / "lf"
    config = write_config(keys(tiny_qwen, sample_data_dir, out))
    port = str(free_port())
    nodes = [start_node(config, [], {"FORCE_TORCHRUN": "1", "NNODES": "2", "NODE_RANK": str(rank),
                                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}) for rank in (0, 1)]
    first, second = finish(nodes)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr + second.stderr)[-3000:]
    assert f"node 0 of 2, static rendezvous at 127.0.0.1:{port}" in first.stdout
    assert "nodes        2 x 1" in first.stdout and "gloo, TCP over " in first.stdout
    assert "all_reduce" in first.stdout and "GB/s" in first.stdout
    assert losses(out) == pytest.approx(one_process, rel=1e-5)
    # One output folder, written by global rank 0; each node's output under nodes/.
    assert (out / "adapter_model.safetensors").is_file() and (out / "checkpoint-2").is_dir()
    for rank in (0, 1):
        logs = list((out / "nodes").glob(f"node{rank}-*/*/attempt_0/0/stdout.log"))
        assert logs, sorted(str(p) for p in (out / "nodes").rglob("*"))
    assert "done: 4 steps" in next((out / "nodes").glob("node0-*/*/attempt_0/0/stdout.log")).read_text()
    assert "nodes" in json.loads((out / ".steadytune-run.json").read_text())["files"]
    assert not list(out.glob(".steadytune-nodes-*"))   # the shared-storage probe is gone


@two_processes
def test_killed_process_costs_an_elastic_restart_from_the_last_checkpoint(tiny_qwen, sample_data_dir, tmp_path,
                                                                          one_process):
    """FSDP2 on two elastic nodes: rank 1's process is SIGKILLed at step 3; the survivor stops with one line, both
    launchers restart through the c10d rendezvous, the job resumes from checkpoint-2 and ends with the curve of the
    uninterrupted run."""
    out = tmp_path / "elastic"
    config = write_config(keys(tiny_qwen, sample_data_dir, out, fsdp="full_shard auto_wrap",
                               fsdp_config={"fsdp_version": 2}, overwrite_output_dir=True,
                               **{"fault_injection.kill_step": 3, "fault_injection.kill_rank": 1}))
    flags = ["--nnodes", "2", "--rdzv-id", "test-job", "--master-addr", "127.0.0.1", "--master-port",
             str(free_port()), "--max-restarts", "1"]
    results = finish([start_node(config, flags) for _ in range(2)])
    text = "".join(r.stdout + r.stderr for r in results)
    assert all(r.returncode == 0 for r in results), text[-4000:]
    assert "elastic rendezvous 'test-job'" in text and "sharding     FSDP2" in text
    assert "killing rank 1's process" in text
    assert "another process of the job died" in text and "stops here, saving nothing" in text
    assert "Traceback" not in text   # the survivor stopped with one line
    assert "restarting" in text
    # overwrite_output_dir was for the launch's first start: the restart continued the run.
    assert "elastic_restart continue" in text and "resuming from checkpoint-2" in text
    events = read_metrics(out / "metrics.jsonl")
    assert [e["step"] for e in events if e.get("event") == "resume"] == [2]
    assert losses(out) == pytest.approx(one_process, rel=1e-5)
    assert (out / "adapter_model.safetensors").is_file()


@two_processes
def test_a_node_that_never_arrives_ends_in_a_rendezvous_timeout(tiny_qwen, sample_data_dir, tmp_path):
    out = tmp_path / "alone"
    config = write_config(keys(tiny_qwen, sample_data_dir, out))
    port = free_port()
    started = time.monotonic()
    (done,) = finish([start_node(config, ["--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                                          "--master-port", str(port), "--rdzv-timeout", "3"])])
    assert done.returncode == RENDEZVOUS_EXIT_CODE, done.stderr[-3000:]
    assert f"the rendezvous at 127.0.0.1:{port} did not complete within 3 s" in done.stderr
    assert "1/2 clients joined" in done.stderr and "--node-rank 1 on the other node" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()   # the launcher's empty log folders are gone with it
    assert time.monotonic() - started < 60


class Impostor:
    """A TCP service on a free port that is not torch's store: one that greets first (as ssh does) or one that reads a
    request line and never answers (as a web server waits)."""

    def __init__(self, greeting: bytes):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port, self.greeting, self.held = self.sock.getsockname()[1], greeting, []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)   # kept open: a silent service never closes either
            if self.greeting:
                conn.sendall(self.greeting)

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("greeting", [b"SSH-2.0-OpenSSH_9.6\r\n", b""], ids=["greets", "silent"])
def test_another_service_at_the_rendezvous_address_is_one_line_at_once(tiny_qwen, sample_data_dir, tmp_path, capfd,
                                                                         greeting):
    """--master-addr where another service answers: torch's client retried with C++ stacks for the whole rendezvous
    timeout (900 s) and ended in a DistNetworkError traceback of 174 lines, or waited without end behind a silent
    one (issue 67). Now the launcher asks torch's own client first, in a child with a deadline: one line, exit 6;
    node 0 finding its port taken is one line too; the log folders are never made."""
    from steadytune.cli import main

    impostor = Impostor(greeting)
    out = tmp_path / "node"
    config = write_config(keys(tiny_qwen, sample_data_dir, out))
    started = time.monotonic()
    try:
        codes = [main(["train", str(config), "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                       "--master-port", str(impostor.port)]) for rank in (1, 0)]
    finally:
        impostor.close()
    assert time.monotonic() - started < 60
    assert codes == [RENDEZVOUS_EXIT_CODE] * 2
    err = capfd.readouterr().err
    assert "Traceback" not in err and "frame #" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and f"127.0.0.1:{impostor.port} is not torch's rendezvous store" in errors[0], errors
    assert ("greets first" if greeting else "never answers torch's store protocol") in errors[0]
    assert f"already listens on port {impostor.port}" in errors[1]
    assert not out.exists()


def test_a_launch_that_fails_leaves_no_empty_log_folder(tmp_path, monkeypatch, capfd):
    """Past the check (it is switched off here), torch's agent meets the impostor itself: its DistNetworkError ended
    the launch in a traceback and left an empty nodes/<node>/ in the output folder it had created (issue 67). Now one
    line, exit 6, and the folders it made and nothing wrote into are gone."""
    from steadytune.distributed import launch as launching

    monkeypatch.setattr(launching, "rendezvous_obstacle", lambda *a, **k: None)
    impostor = Impostor(b"SSH-2.0-OpenSSH_9.6\r\n")
    try:
        plan = plan_launch(args(nnodes="2", node_rank=1, master_addr="127.0.0.1", master_port=impostor.port,
                                rdzv_timeout=3), {}, gpus=0)
        out = tmp_path / "made" / "run"
        assert launching.launch(plan, "x.yaml", [], False, str(out)) == RENDEZVOUS_EXIT_CODE
    finally:
        impostor.close()
    err = capfd.readouterr().err
    assert f"error: the rendezvous at 127.0.0.1:{impostor.port} did not complete within 3 s" in err
    assert "DistNetworkError" in err and "Traceback" not in err
    assert not (tmp_path / "made").exists()


# LLaMA-Factory's examples/deepspeed/ds_z3_config.json, as it is.
LF_DS_Z3 = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
            "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                     "hysteresis": 2, "min_loss_scale": 1},
            "bf16": {"enabled": "auto"},
            "zero_optimization": {"stage": 3, "overlap_comm": False, "contiguous_gradients": True,
                                  "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                                  "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                                  "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                                  "stage3_gather_16bit_weights_on_model_save": True}}


@two_processes
@needs_deepspeed
def test_zero3_full_on_two_nodes_matches_one_process_until_the_watchdog_names_the_stalled_node(
        tiny_qwen, sample_data_dir, tmp_path):
    """ZeRO-3 full fine-tuning across two nodes gives one process's losses; at step 3 rank 1 stalls, and every node
    ends with the same message naming its node, host, step and last collective (one launch for both, to keep the
    suite short: each two-node start costs ~15 s here)."""
    full = dict(finetuning_type="full", learning_rate=1e-4)
    reference = run_training(load_config(None, [f"{k}={v}" for k, v in keys(
        tiny_qwen, sample_data_dir, tmp_path / "one", gradient_accumulation_steps=4, **full).items()]),
        progress=False).losses
    out = tmp_path / "hang"
    ds_file = tmp_path / "ds_z3_config.json"
    ds_file.write_text(json.dumps(LF_DS_Z3), encoding="utf-8")
    config = write_config(keys(tiny_qwen, sample_data_dir, out, hang_timeout=4, deepspeed=str(ds_file), **full,
                               **{"fault_injection.hang_step": 3, "fault_injection.hang_rank": 1}))
    port = str(free_port())
    results = finish([start_node(config, ["--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                                          "--master-port", port]) for rank in (0, 1)])
    assert "sharding     DeepSpeed ZeRO-3" in results[0].stdout
    assert losses(out) == pytest.approx(reference[:2], rel=1e-5)
    host = socket.gethostname()
    for done in results:
        assert done.returncode == HANG_EXIT_CODE, done.stderr[-3000:]
        assert f"rank 1 on node 1 ({host}) stalled at step 3" in done.stderr
        assert "its last collective: the stop-request all-reduce of step 3 (finished)" in done.stderr
        assert "the other ranks waited for it in a collective (the token-count all-reduce of step 3)" in done.stderr
    report = (out / "hang-rank-1.txt").read_text()
    assert f"on {host}" in report and "maybe_hang" in report


SHARED_CHECK = """
import os, sys
import torch.distributed as dist
from steadytune.distributed.nodes import check_shared_output, node_layout
from steadytune.errors import UserError
rank = int(sys.argv[2])
os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", GROUP_WORLD_SIZE="2", GROUP_RANK=str(rank))
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=rank, world_size=2)
layout = node_layout()
check_shared_output(sys.argv[3], layout, wait_s=0.5)     # the same folder on both "nodes"
try:
    check_shared_output(sys.argv[3 + rank], layout, wait_s=0.5)   # node 1 sees another folder
    print("passed")
except UserError as e:
    print("refused:", e)
dist.destroy_process_group()
"""


@two_processes
def test_a_node_that_sees_another_output_folder_is_stopped_at_start(tmp_path):
    script = tmp_path / "shared.py"
    script.write_text(SHARED_CHECK)
    for name in ("shared", "elsewhere"):
        (tmp_path / name).mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), str(rank),
                               str(tmp_path / "shared"), str(tmp_path / "elsewhere")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-2000:]
        assert out.startswith("refused:"), out + err
        assert f"node 1 ({socket.gethostname()}): does not see (the folder exists there but is another one)" in out
        assert "storage every node mounts" in out
    assert not list((tmp_path / "shared").iterdir())   # the probe file is removed


# ---------------------------------------------------------------------------------------------------------
# Without processes
# ---------------------------------------------------------------------------------------------------------

def args(**given) -> SimpleNamespace:
    names = ("nproc", "nnodes", "node_rank", "master_addr", "master_port", "rdzv_id", "max_restarts", "rdzv_timeout",
             "rdzv_conf", "local_addr")
    return SimpleNamespace(**{name: given.get(name) for name in names})


def test_launch_plan_from_llamafactory_variables_and_flags(monkeypatch):
    for name in ("LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert plan_launch(args(), {}, gpus=0) is None                           # a plain run
    assert plan_launch(args(), {"MASTER_ADDR": "10.0.0.1"}, gpus=0) is None  # a variable alone launches nothing
    lf = {"FORCE_TORCHRUN": "1", "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
          "NPROC_PER_NODE": "8"}
    plan = plan_launch(args(), lf, gpus=8)
    assert (plan.min_nodes, plan.max_nodes, plan.node_rank, plan.nproc, plan.endpoint, plan.elastic) == \
        (2, 2, 1, 8, "10.0.0.1:29500", False)
    # LF's elastic line: RDZV_ID, MIN_NNODES:MAX_NNODES, MAX_RESTARTS; no NODE_RANK (the rendezvous numbers nodes).
    elastic = {"FORCE_TORCHRUN": "1", "MIN_NNODES": "1", "MAX_NNODES": "3", "MAX_RESTARTS": "3",
               "RDZV_ID": "llamafactory", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    plan = plan_launch(args(), elastic, gpus=0)
    assert (plan.min_nodes, plan.max_nodes, plan.rdzv_id, plan.max_restarts, plan.node_rank, plan.nproc) == \
        (1, 3, "llamafactory", 3, None, 1)
    # Flags win over variables; the loopback makes every address the loopback.
    plan = plan_launch(args(nnodes="2", node_rank=0, master_addr="127.0.0.1", master_port=1234), lf, gpus=8)
    assert (plan.node_rank, plan.master_port, plan.local_addr, plan.nproc) == (0, 1234, "127.0.0.1", 8)
    # Without FORCE_TORCHRUN, NNODES=2 still asks for several nodes (said in a note).
    plan = plan_launch(args(), {k: v for k, v in lf.items() if k != "FORCE_TORCHRUN"}, gpus=8)
    assert plan.several_nodes and "NNODES=2" in plan.notes[0]
    # MAX_RESTARTS without RDZV_ID: no restarts, as in LF (said); the flag is an error.
    plan = plan_launch(args(), {**lf, "MAX_RESTARTS": "2"}, gpus=8)
    assert plan.max_restarts == 0 and "RDZV_ID" in plan.notes[0]
    with pytest.raises(UserError, match="add --rdzv-id JOB"):
        plan_launch(args(nnodes="2", node_rank=0, master_addr="h", max_restarts=2), {}, gpus=0)
    with pytest.raises(UserError, match=r"--master-addr HOST \(MASTER_ADDR\)"):
        plan_launch(args(nnodes="2", node_rank=0), {}, gpus=0)
    with pytest.raises(UserError, match=r"--node-rank R \(NODE_RANK"):
        plan_launch(args(nnodes="2", master_addr="h"), {}, gpus=0)
    with pytest.raises(UserError, match="1:2 nodes: a node count that may change needs the elastic rendezvous"):
        plan_launch(args(nnodes="1:2", master_addr="h"), {}, gpus=0)
    with pytest.raises(UserError, match=r"--node-rank 2: a 2-node job has nodes 0..1"):
        plan_launch(args(nnodes="2", node_rank=2, master_addr="h"), {}, gpus=0)
    assert plan_launch(args(nnodes="2", master_addr="h"), {"SLURM_NODEID": "1"}, gpus=0).node_rank == 1   # srun


def test_the_slurm_script_launches_one_elastic_agent_per_node(monkeypatch):
    """examples/slurm/train_2nodes.sbatch: its srun line, with SLURM's variables filled, is a launch plan of 2 nodes x
    8 processes on the c10d rendezvous at the allocation's first host."""
    from steadytune import cli

    text = (ROOT / "examples" / "slurm" / "train_2nodes.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    end = next(i for i in range(start, len(lines)) if not lines[i].rstrip().endswith("\\"))
    line = " ".join(part.rstrip().rstrip("\\") for part in lines[start:end + 1])
    values = {"$CONFIG": "run.yaml", '"$@"': "", "$SLURM_JOB_NUM_NODES": "2", "$GPUS_PER_NODE": "8",
              "$SLURM_JOB_ID": "4242", "$MASTER_ADDR": "gpu-a", "$MASTER_PORT": "29500", "${MAX_RESTARTS:-3}": "3"}
    for name, value in values.items():
        line = line.replace(name, value)
    words = shlex.split(line)
    words = words[words.index("steadytune") + 1:]
    for name in ("LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    parsed = cli.build_parser(words).parse_args(words)
    plan = plan_launch(parsed, {}, gpus=8)
    assert (plan.max_nodes, plan.nproc, plan.rdzv_id, plan.endpoint, plan.max_restarts) == \
        (2, 8, "4242", "gpu-a:29500", 3)


def test_doctor_nodes_names_the_interfaces_and_the_fix():
    addresses = {"lo": "127.0.0.1", "docker0": "172.17.0.1", "eth0": "192.0.2.2"}
    found = check_nodes({"MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "29400"}, None, addresses=addresses,
                        connect=lambda host, port, timeout: ("timed out", timeout))
    text = "\n".join(f"{f.severity} {f.what} | {f.why} | {f.fix}" for f in found)
    assert "error no answer from the rendezvous 192.0.2.1:29400 within 3 s (timed out)" in text
    assert "NCCL/RCCL would use eth0 (192.0.2.2)" in text
    assert "virtual interfaces present (docker0)" in text
    assert "no InfiniBand/RoCE device" in text and "NCCL_IB_DISABLE=1" in text
    refused = check_nodes({"NCCL_SOCKET_IFNAME": "ens", "NCCL_P2P_LEVEL": "PHB"}, "192.0.2.1:29500",
                          addresses=addresses, connect=lambda host, port, timeout: ("refused", 0.001))
    text = "\n".join(f"{f.severity} {f.what} | {f.why} | {f.fix}" for f in refused)
    assert "warning 192.0.2.1 is reachable but nothing listens on port 29500 yet" in text
    assert "error NCCL_SOCKET_IFNAME=ens matches no interface" in text
    assert "NCCL_P2P_LEVEL=PHB" in text
    assert any(f.severity == "warning" and "no rendezvous address" in f.what for f in check_nodes({}, None))


def test_an_earlier_attempt_of_the_same_launch_is_told_from_an_older_run(monkeypatch):
    now = time.time()
    monkeypatch.setenv("STEADYTUNE_LAUNCHED_AT", repr(now - 60))
    me = {"pid": 2, "host": "b", "job": "j", "attempt": 1, "t": now}
    assert earlier_attempt({"pid": 1, "host": "a", "job": "j", "attempt": 0, "t": now - 30}, me)
    # A node-forced restart leaves torch's counter where it was: the time, not the counter, decides.
    assert earlier_attempt({"pid": 1, "host": "a", "job": "j", "attempt": 3, "t": now - 30}, me)
    assert not earlier_attempt({"pid": 1, "host": "a", "job": "j", "attempt": 0, "t": now - 3600}, me)  # older launch
    assert not earlier_attempt({"pid": 1, "host": "a", "job": "other", "t": now - 30}, me)
    assert not earlier_attempt({"pid": 1, "host": "a", "started": "x"}, {"pid": 2, "host": "b"})   # not elastic
    layout = NodeLayout(world=2, rank=0, local_world=1, nodes=2, node_rank=0, host="a", job="j",
                        launched_at=now - 60)
    assert started_by_this_launch({"job": "j", "job_started": now - 30}, layout)
    assert not started_by_this_launch({"job": "j", "job_started": now - 3600}, layout)


def test_a_lost_peer_is_one_line_saying_what_happens_next():
    layout = NodeLayout(world=4, rank=2, local_world=2, nodes=2, node_rank=1, host="b", attempt=0, max_restarts=2)
    error = RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.1]:1234")
    lost = lost_peer(error, layout, step=7)
    assert "another process of the job died at step 7" in str(lost) and "rank 2 on node 1 (b)" in str(lost)
    assert "restart 1 of 2" in str(lost)
    last = lost_peer(error, NodeLayout(world=4, rank=2, local_world=2, nodes=2, node_rank=1, host="b"))
    assert "no restart is left" in str(last)
    assert lost_peer(RuntimeError("CUDA out of memory"), layout) is None
    assert lost_peer(error, NodeLayout(world=1, rank=0, local_world=1, nodes=1, node_rank=0, host="b")) is None
