"""Starting the training processes of one machine, or of one node among several.

    steadytune train CONFIG --nproc N           N processes here (torchrun --standalone)
    steadytune train CONFIG --nnodes 2 --node-rank R --master-addr HOST --master-port P [--nproc K]
                                                this node's K processes of a 2-node job (torchrun's static rendezvous)
    steadytune train CONFIG --nnodes 2 --rdzv-id JOB --master-addr HOST --master-port P --max-restarts 3
                                                elastic: the c10d rendezvous numbers the nodes; when a process or a
                                                node dies the job restarts through it and resumes from the last
                                                complete checkpoint (`--nnodes MIN:MAX` lets the node count change)

LLaMA-Factory's launch variables do the same (`FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0 MASTER_ADDR=... MASTER_PORT=...
steadytune train CONFIG`, elastic with `RDZV_ID`, `MIN_NNODES`, `MAX_NNODES`, `MAX_RESTARTS`; NPROC_PER_NODE), with the
same meaning as in its launcher: plan_launch turns flags and variables into one LaunchPlan, flags first.

Everything runs in torch's elastic agent (what `torchrun` runs), started here in-process: one agent per node, which
starts the node's processes, joins the rendezvous and restarts them. Each process is one rank on one GPU (Accelerate
picks the GPU from LOCAL_RANK); without GPUs the processes talk over gloo on the CPU, which is how the tests run
several ranks and several "nodes" on one machine. With several nodes each agent tees its processes' output into
`output_dir/nodes/<node>/` (the folder global rank 0 owns, on storage every node mounts: distributed/nodes.py checks
that at start). The launcher turns on torch's NCCL/RCCL flight recorder (TORCH_FR_BUFFER_SIZE) so that a hang report
(watchdog.py) shows the last collectives, and after the run names the hang reports when the watchdog stopped it.
A plain `steadytune train` on a machine with several visible GPUs says how to use them.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from steadytune.distributed.store_probe import rendezvous_obstacle
from steadytune.distributed.watchdog import HANG_EXIT_CODE
from steadytune.errors import UserError
from steadytune.hardware.network import check_host, is_loopback, port_number
from steadytune.training.run_folder import ELASTIC_JOB_ENV, LAUNCHED_AT_ENV, NODE_LOGS

FLIGHT_RECORDER_ENTRIES = "2000"


def under_launcher() -> bool:
    """This process was started by torchrun / accelerate launch / our --nproc (it is one rank of a group)."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def close_process_group() -> None:
    """End this rank's part in the process group after a run that succeeded: wait for the others (rank 0 may still be
    writing the adapter and report), then destroy the group. A process that exits with the group alive lets gloo's
    worker threads meet interpreter shutdown, which aborts it ("terminate called without an active exception",
    exit -6) now and then -- a finished run reported as a failed rank. Not called after a failure: a rank that
    raised must not wait in a barrier for ranks that may be stuck (the launcher stops them)."""
    import torch
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        if dist.get_world_size() > 1:
            # NCCL/RCCL: name this rank's GPU, or torch guesses one (and warns) for the barrier.
            if dist.get_backend() == "nccl" and torch.cuda.is_available():
                dist.barrier(device_ids=[torch.cuda.current_device()])
            else:
                dist.barrier()
        dist.destroy_process_group()


def leave_finished_rank(code: int) -> None:
    """A launched rank other than the main one, its run finished and its group closed: exit now, skipping the
    interpreter's teardown. Even with the group destroyed, a C++ thread of torch's (store, gloo) now and then meets
    teardown and aborts the process ("terminate called without an active exception", exit -6; seen once in a full
    CPU test run on 2026-12-02, in a two-process DPO run whose training had finished), which reports a finished run
    as a failed rank. Such a rank writes no files of the run (the main rank does), so there is nothing to lose."""
    if under_launcher() and os.environ.get("RANK", "0") != "0":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def visible_gpus() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:   # a broken torch: doctor explains; here it only means "no hint"
        return 0


def resolve_nproc(value: str, gpus: int) -> int:
    """--nproc N or auto (= every visible GPU, at least 1)."""
    if value == "auto":
        return max(1, gpus)
    try:
        n = int(value)
    except ValueError:
        raise UserError(f"--nproc {value!r}: expected a number of processes or auto") from None
    if n < 1:
        raise UserError(f"--nproc {n}: expected 1 or more")
    if gpus and n > gpus:
        raise UserError(f"--nproc {n}: only {gpus} GPU(s) are visible (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES); "
                        f"use --nproc {gpus} or --nproc auto")
    return n


def several_gpus_hint(config: str, gpus: int) -> str | None:
    """What to say when a single-process run starts where several GPUs are visible."""
    if gpus < 2 or under_launcher():
        return None
    return (f"note: {gpus} GPUs are visible and this run uses one. To train on all of them: steadytune train {config} "
            f"--nproc {gpus} (DDP: each GPU holds the model; add deepspeed: ds_z3_config.json or fsdp: full_shard "
            "to shard it when it does not fit)")


# LLaMA-Factory's launcher reads these (llamafactory/cli.py); NPROC_PER_NODE defaults to every visible GPU there.
LF_VARIABLES = ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "RDZV_ID",
                "MIN_NNODES", "MAX_NNODES", "MAX_RESTARTS")
DEFAULT_MASTER_PORT = 29500     # torchrun's
RESOLVE_TIMEOUT_S = 10.0        # how long the rendezvous host's name may take to resolve before the launch says so
DEFAULT_RDZV_TIMEOUT = 900      # seconds a node waits for the others at the rendezvous (torchrun's default)
RENDEZVOUS_EXIT_CODE = 6        # a node never arrived (or the rendezvous host cannot be reached)


@dataclass
class LaunchPlan:
    """How this machine's agent starts its processes and meets the other nodes."""
    nproc: int
    min_nodes: int = 1
    max_nodes: int = 1
    node_rank: Optional[int] = None      # static rendezvous only (elastic: the rendezvous numbers the nodes)
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    rdzv_id: Optional[str] = None        # set: elastic, the c10d rendezvous
    max_restarts: int = 0
    rdzv_timeout: float = DEFAULT_RDZV_TIMEOUT
    rdzv_conf: dict = field(default_factory=dict)
    local_addr: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    @property
    def elastic(self) -> bool:
        return self.rdzv_id is not None

    @property
    def several_nodes(self) -> bool:
        return self.max_nodes > 1

    @property
    def endpoint(self) -> str:
        return f"{self.master_addr}:{self.master_port}"

    def nodes_text(self) -> str:
        return str(self.max_nodes) if self.min_nodes == self.max_nodes else f"{self.min_nodes} to {self.max_nodes}"


def env_enabled(value: Optional[str]) -> bool:
    """LLaMA-Factory's is_env_enabled: true, y or 1."""
    return (value or "").strip().lower() in ("true", "y", "1")


def parse_nnodes(text: str, where: str) -> tuple[int, int]:
    """torchrun's --nnodes: N or MIN:MAX."""
    try:
        low, _, high = str(text).partition(":")
        low_n, high_n = int(low), int(high or low)
    except ValueError:
        raise UserError(f"{where} {text!r}: expected a number of nodes, or MIN:MAX") from None
    if low_n < 1 or high_n < low_n:
        raise UserError(f"{where} {text!r}: expected 1 or more nodes, MIN <= MAX")
    return low_n, high_n


def parse_rdzv_conf(text: Optional[str]) -> dict:
    """torchrun's --rdzv-conf: key=value,key=value (numbers as numbers)."""
    out: dict = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--rdzv-conf {text!r}: expected key=value[,key=value] (e.g. join_timeout=600)")
        out[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return out


def _int(value, where: str, minimum: int = 0) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{where} {value!r}: expected a whole number") from None
    if number < minimum:
        raise UserError(f"{where} {number}: expected {minimum} or more")
    return number


def check_port(value, where: str, allow_any: bool = False) -> int:
    """A TCP port, 1-65535 (0 too with `allow_any`: the system picks a free one)."""
    return port_number(_int(value, where, 0 if allow_any else 1), where)


def resolve_within(host: str, where: str, seconds: float = RESOLVE_TIMEOUT_S) -> None:
    """UserError when `host` does not resolve, or the resolver does not answer within `seconds` (a name that never
    resolves kept the rendezvous waiting without a word)."""
    answer: dict = {}

    def look_up():
        try:
            answer["addresses"] = socket.getaddrinfo(host, None)
        except (OSError, UnicodeError) as e:
            answer["error"] = e

    thread = threading.Thread(target=look_up, name="resolve-master-addr", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise UserError(f"{where} {host}: the name did not resolve within {seconds:g} s; check it (ping {host}), or "
                        "give node 0's IP address")
    if "error" in answer:
        raise UserError(f"{where} {host}: does not resolve to an address ({answer['error']}); check it, or give node "
                        "0's IP address")


def add_launch_arguments(parser) -> None:
    """`steadytune train`'s several-nodes flags, read by plan_launch below."""
    group = parser.add_argument_group("several nodes (torchrun's flags; LLaMA-Factory's variables NNODES, NODE_RANK, "
                                      "MASTER_ADDR, MASTER_PORT, RDZV_ID, MIN_NNODES, MAX_NNODES, MAX_RESTARTS with "
                                      "FORCE_TORCHRUN=1 do the same; see docs/multi-node.md)")
    group.add_argument("--nnodes", metavar="N|MIN:MAX", help="nodes in the job (run this command on each)")
    group.add_argument("--node-rank", type=int, metavar="R", help="this node's number, 0 on --master-addr (static "
                       "rendezvous; with --rdzv-id the rendezvous numbers the nodes)")
    group.add_argument("--master-addr", metavar="HOST", help="address of node 0, where the rendezvous is held")
    group.add_argument("--master-port", type=int, metavar="PORT", help="its port, the same on every node (29500)")
    group.add_argument("--rdzv-id", metavar="JOB", help="elastic: the c10d rendezvous with this job id (the same on "
                       "every node); a dead process or node restarts the job from the last complete checkpoint")
    group.add_argument("--max-restarts", type=int, metavar="N", help="elastic: restarts before the job fails (0)")
    group.add_argument("--rdzv-timeout", type=int, metavar="S",
                       help="seconds a node waits at the rendezvous for the others (900)")
    group.add_argument("--rdzv-conf", metavar="K=V,...", help="more rendezvous settings, as torchrun's --rdzv-conf "
                       "(join_timeout, last_call_timeout, close_timeout, read_timeout)")
    group.add_argument("--local-addr", metavar="ADDR", help="this node's address as the others reach it (default: "
                       "its hostname)")


def plan_launch(args, env: Mapping[str, str], gpus: int) -> Optional[LaunchPlan]:
    """The launch this command asks for, from its flags and LLaMA-Factory's variables (a flag wins over a variable);
    None: train in this process (no launch flag, or this process is already one rank of a launched job)."""
    if under_launcher():
        return None
    flag = {name: getattr(args, name, None) for name in ("nproc", "nnodes", "node_rank", "master_addr", "master_port",
                                                         "rdzv_id", "max_restarts", "rdzv_timeout", "rdzv_conf",
                                                         "local_addr")}
    lf = {name: env[name] for name in LF_VARIABLES if env.get(name) not in (None, "")}
    several = lf.get("NNODES", "1") not in ("1", "1:1")
    asked = any(v is not None for v in flag.values()) or env_enabled(lf.get("FORCE_TORCHRUN")) or several
    if not asked:
        return None
    notes = []
    if several and not env_enabled(lf.get("FORCE_TORCHRUN")) and flag["nnodes"] is None:
        notes.append(f"NNODES={lf['NNODES']} is set: launching on several nodes (LLaMA-Factory needs FORCE_TORCHRUN=1 "
                     "or several GPUs for that)")
    rdzv_id = flag["rdzv_id"] if flag["rdzv_id"] is not None else lf.get("RDZV_ID")
    if flag["nnodes"] is not None:
        min_nodes, max_nodes = parse_nnodes(flag["nnodes"], "--nnodes")
    elif rdzv_id is not None and "MIN_NNODES" in lf and "MAX_NNODES" in lf:   # LF: both, and only when elastic
        min_nodes = _int(lf["MIN_NNODES"], "MIN_NNODES", 1)
        max_nodes = _int(lf["MAX_NNODES"], "MAX_NNODES", min_nodes)
    else:
        min_nodes, max_nodes = parse_nnodes(lf.get("NNODES", "1"), "NNODES")
    if min_nodes != max_nodes and rdzv_id is None:
        raise UserError(f"{min_nodes}:{max_nodes} nodes: a node count that may change needs the elastic rendezvous; "
                        "add --rdzv-id JOB (RDZV_ID), the same on every node")
    nproc_text = flag["nproc"] if flag["nproc"] is not None else lf.get("NPROC_PER_NODE", "auto")
    plan = LaunchPlan(nproc=resolve_nproc(str(nproc_text), gpus), min_nodes=min_nodes, max_nodes=max_nodes,
                      rdzv_id=rdzv_id, notes=notes)
    plan.rdzv_timeout = _int(flag["rdzv_timeout"], "--rdzv-timeout", 1) if flag["rdzv_timeout"] is not None \
        else DEFAULT_RDZV_TIMEOUT
    plan.rdzv_conf = parse_rdzv_conf(flag["rdzv_conf"])
    restarts = flag["max_restarts"] if flag["max_restarts"] is not None else lf.get("MAX_RESTARTS")
    plan.max_restarts = _int(restarts, "--max-restarts" if flag["max_restarts"] is not None else "MAX_RESTARTS") \
        if restarts is not None else 0
    if plan.max_restarts and not plan.elastic:
        if flag["max_restarts"] is not None:
            raise UserError(f"--max-restarts {plan.max_restarts}: restarts go through the elastic rendezvous, which "
                            "every node must join: add --rdzv-id JOB (the same on every node)")
        plan.notes.append(f"MAX_RESTARTS={plan.max_restarts} without RDZV_ID: no restarts (as in LLaMA-Factory, "
                          "restarts need the elastic rendezvous: set RDZV_ID)")
        plan.max_restarts = 0

    addr = flag["master_addr"] or lf.get("MASTER_ADDR")
    port = flag["master_port"] if flag["master_port"] is not None else lf.get("MASTER_PORT")
    if plan.several_nodes:
        if not addr:
            raise UserError(f"{plan.nodes_text()} nodes need the rendezvous host: --master-addr HOST (MASTER_ADDR), "
                            "the address of node 0, the same on every node")
        plan.master_addr = check_host(addr, "--master-addr" if flag["master_addr"] else "MASTER_ADDR")
        plan.master_port = check_port(port, "--master-port" if flag["master_port"] is not None else "MASTER_PORT") \
            if port is not None else DEFAULT_MASTER_PORT
        if not plan.elastic:
            rank = flag["node_rank"] if flag["node_rank"] is not None else lf.get("NODE_RANK",
                                                                                    env.get("SLURM_NODEID"))
            if rank is None:
                raise UserError(f"{plan.max_nodes} nodes: each node needs its number: --node-rank R (NODE_RANK; "
                                f"0 on {addr}, 1..{plan.max_nodes - 1} on the others), or --rdzv-id JOB to let the "
                                "elastic rendezvous number them")
            plan.node_rank = _int(rank, "--node-rank")
            if plan.node_rank >= plan.max_nodes:
                raise UserError(f"--node-rank {plan.node_rank}: a {plan.max_nodes}-node job has nodes 0.."
                                f"{plan.max_nodes - 1}")
    elif plan.elastic:   # one node, restartable: its own rendezvous (a given address and port, else any free port)
        plan.master_addr = check_host(addr, "--master-addr" if flag["master_addr"] else "MASTER_ADDR") if addr \
            else "127.0.0.1"
        plan.master_port = check_port(port, "--master-port" if flag["master_port"] is not None else "MASTER_PORT",
                                      allow_any=True) if port is not None else 0
    # All "nodes" on this machine (tests, a try-out): every address is the loopback, not this host's name.
    plan.local_addr = flag["local_addr"] or ("127.0.0.1" if plan.master_addr and is_loopback(plan.master_addr)
                                             else None)
    return plan


def node_label(plan: LaunchPlan, env: Mapping[str, str]) -> str:
    """This node's name for its log folder: its host, with its node rank when it has one before the rendezvous."""
    host = socket.gethostname()
    rank = plan.node_rank if plan.node_rank is not None else env.get("NODE_RANK", env.get("SLURM_NODEID"))
    return f"node{rank}-{host}" if rank is not None else f"{host}-{os.getpid()}"


def launch(plan: LaunchPlan, config: str, overrides: list[str], force: bool, output_dir: str | None) -> int:
    """Run this node's training processes under torch's elastic agent and wait; -> the exit code (the watchdog's
    when it stopped a hang, RENDEZVOUS_EXIT_CODE when the other nodes never came, else the first failed rank's)."""
    import uuid

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if plan.master_addr and not is_loopback(plan.master_addr):
        resolve_within(plan.master_addr, "--master-addr")
    if plan.several_nodes and plan.master_port:
        # static node 0 creates the store itself; an elastic node may too (the one at master_addr): a store there
        # is fine for it, anything else is in the way
        obstacle = rendezvous_obstacle(plan.master_addr, plan.master_port, hosts_store=plan.node_rank == 0)
        if obstacle:
            print(f"error: rendezvous {plan.endpoint}: {obstacle}", file=sys.stderr, flush=True)
            return RENDEZVOUS_EXIT_CODE
    gpus = visible_gpus()
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    processes = (f"{plan.nproc} training process{'es' if plan.nproc > 1 else ''} "
                 + (f"on {plan.nproc} of {gpus} GPUs" if gpus else "on the CPU (no GPU: gloo, for testing)"))
    logs, created = None, None
    if plan.several_nodes:
        label = node_label(plan, os.environ)
        logs = Path(output_dir or ".") / NODE_LOGS / label
        restarts = (f"up to {plan.max_restarts} restart{'s' if plan.max_restarts != 1 else ''}" if plan.max_restarts
                    else "no restarts")
        where = (f"node {plan.node_rank} of {plan.max_nodes}, static rendezvous at {plan.endpoint}" if not plan.elastic
                 else f"one of {plan.nodes_text()} nodes, elastic rendezvous {plan.rdzv_id!r} at {plan.endpoint}, "
                      + restarts)
        print(f"steadytune: {where}: starting {processes} through torch.distributed (torchrun's agent); this node's "
              f"output also goes to {logs}/", flush=True)
    else:
        print(f"steadytune: starting {processes} through torch.distributed (torchrun's launcher)"
              + (f"; elastic, up to {plan.max_restarts} restarts" if plan.elastic else ""), flush=True)
    if "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ:   # the older name of the same switch
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FLIGHT_RECORDER_ENTRIES)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # torchrun's default: one thread per process unless told otherwise (nproc processes share the cores).
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // plan.nproc)))
    if plan.elastic:
        # Its processes tell a restart of this launch from an older run of the same job id (run_folder, nodes).
        os.environ[ELASTIC_JOB_ENV], os.environ[LAUNCHED_AT_ENV] = plan.rdzv_id, repr(time.time())
        # A fresh store for each attempt: torch's agent otherwise shares one across restarts, and the process group
        # of a restart can read the previous attempt's addresses from it (pytorch#135712, #167288: "Connection
        # refused" at gloo/NCCL start after a restart, seen here too).
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    launch_config = agent_config(plan, LaunchConfig, str(uuid.uuid4()))
    if logs is not None:
        for link in (logs.parent, logs):   # a run folder from elsewhere may hold nodes/ -> anywhere: never written through
            if link.is_symlink():
                raise UserError(f"{link} is a symbolic link (to {os.readlink(link)}); steadytune does not write "
                                "through links in a run folder: remove it, or choose another output_dir")
        created = next((p for p in [logs, *logs.parents] if p.exists()), None)   # what already existed
        try:
            logs.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"output_dir {output_dir}: cannot create this node's log folder {logs}: {e}") from None
        launch_config.logs_specs = node_logs(DefaultLogsSpecs, str(logs), Std.ALL)
    args = ["-u", "-m", "steadytune", "train", config, *overrides] + (["--force"] if force else [])
    started = time.time()
    restore_logger = announce_restarts()
    finished = False
    try:
        elastic_launch(launch_config, sys.executable)(*args)
        finished = True
        return 0
    except ChildFailedError as e:
        reports = hang_reports(output_dir, started)
        if reports:
            print(f"error: the run stopped on a hang; reports: {', '.join(str(p) for p in reports)}",
                  file=sys.stderr, flush=True)
            return HANG_EXIT_CODE
        rank, failure = min(e.failures.items(), key=lambda item: item[1].timestamp)   # the first to fail
        tried = f" (after {plan.max_restarts} restart{'s' if plan.max_restarts != 1 else ''})" if plan.max_restarts else ""
        print(f"error: training process rank {rank} exited with code {failure.exitcode}{tried} (its message is "
              "above); the other processes were stopped", file=sys.stderr, flush=True)
        return failure.exitcode if failure.exitcode and failure.exitcode > 0 else 1
    except RendezvousError as e:   # a node never arrived, or the rendezvous host cannot be reached (timeouts too)
        print(f"error: {rendezvous_message(plan, e)}", file=sys.stderr, flush=True)
        return RENDEZVOUS_EXIT_CODE
    except Exception as e:
        # the static rendezvous: a store that waited in vain, or one torch's client could not talk to (DistError)
        if plan.several_nodes and _is_store_failure(e):
            print(f"error: {rendezvous_message(plan, e)}", file=sys.stderr, flush=True)
            return RENDEZVOUS_EXIT_CODE
        raise
    except KeyboardInterrupt:   # the processes got the same SIGINT: each saves a checkpoint and stops
        return 130
    finally:
        restore_logger()
        if not finished:   # whatever stopped the launch: the log folders it made and nothing wrote into go
            remove_empty_folders(logs, created)


def agent_config(plan: LaunchPlan, launch_config_class, run_id: str):
    """torch's LaunchConfig for the plan: standalone (one node), static (fixed node ranks) or c10d (elastic)."""
    common = dict(nproc_per_node=plan.nproc, max_restarts=plan.max_restarts, monitor_interval=0.5,
                  local_addr=plan.local_addr)
    if not plan.several_nodes and not plan.elastic:
        return launch_config_class(min_nodes=1, max_nodes=1, run_id=run_id, rdzv_backend="c10d",
                                   rdzv_endpoint="localhost:0", **common)
    timeout = int(plan.rdzv_timeout)
    if plan.elastic:
        # join_timeout: how long a node waits for the others; the store's host is the agent on master_addr.
        conf = {"join_timeout": timeout, "timeout": timeout, **plan.rdzv_conf}
        return launch_config_class(min_nodes=plan.min_nodes, max_nodes=plan.max_nodes, run_id=plan.rdzv_id,
                                   rdzv_backend="c10d", rdzv_endpoint=plan.endpoint, rdzv_configs=conf, **common)
    conf = {"rank": plan.node_rank, "timeout": timeout, **plan.rdzv_conf}
    # The static rendezvous keys its store by the run id: the same on every node (torchrun's default, "none").
    return launch_config_class(min_nodes=plan.max_nodes, max_nodes=plan.max_nodes, run_id="none",
                               rdzv_backend="static", rdzv_endpoint=plan.endpoint, rdzv_configs=conf, **common)


def node_logs(default_specs, log_dir: str, everything):
    """torch's log folders (`<log_dir>/<job>_<random>/attempt_<n>/<local rank>/stdout.log, stderr.log`), teed to the
    console, keeping every attempt: torch's agent counts only this node's own failures, so a restart forced by another
    node reuses the attempt number and torch would wipe that attempt's folder (moved aside to attempt_<n>.<k>)."""
    class NodeLogs(default_specs):
        def reify(self, envs):
            run_dir = getattr(self, "_run_log_dir", None)
            if run_dir and envs:
                attempt = Path(run_dir) / f"attempt_{envs[0].get('TORCHELASTIC_RESTART_COUNT', '0')}"
                if attempt.exists():
                    k = 1
                    while attempt.with_name(f"{attempt.name}.{k}").exists():
                        k += 1
                    attempt.rename(attempt.with_name(f"{attempt.name}.{k}"))
            return super().reify(envs)

    return NodeLogs(log_dir=log_dir, redirects=everything, tee=everything)


def remove_empty_folders(logs: Optional[Path], existed: Optional[Path]) -> None:
    """After a rendezvous that never completed: the log folders this launcher made and nothing wrote into."""
    if logs is None:
        return
    for folder in [logs, *logs.parents]:
        if folder == existed:
            return
        try:
            folder.rmdir()   # only when empty
        except OSError:
            return


def rendezvous_message(plan: LaunchPlan, error: BaseException) -> str:
    detail = " ".join(str(error).split())[:300]
    detail = type(error).__name__ + (f": {detail}" if detail and detail != type(error).__name__ else "")
    others = "1" if plan.max_nodes == 2 else f"1..{plan.max_nodes - 1}"
    start = (f"--node-rank {others} on the other node{'s' if plan.max_nodes > 2 else ''}" if not plan.elastic
             else f"--rdzv-id {plan.rdzv_id} on each of them")
    return (f"the rendezvous at {plan.endpoint} did not complete within {plan.rdzv_timeout:g} s: "
            f"{plan.nodes_text()} nodes were expected and not all of them arrived ({detail}). "
            f"Start `steadytune train` with the same config, --nnodes, --master-addr and --master-port and {start}; "
            f"check from each node that {plan.endpoint} is reachable (`steadytune doctor --nodes`); "
            "--rdzv-timeout S waits longer")


def _is_store_failure(error: BaseException) -> bool:
    import torch.distributed as dist   # lazy, as this module's other torch imports: it loads without torch
    text = f"{type(error).__name__} {error}".lower()
    return isinstance(error, getattr(dist, "DistError", ())) or any(
        word in text for word in ("timed out", "timeout", "diststoreerror", "connection refused"))


AGENT_LOGGER = "torch.distributed.elastic.agent.server.api"


class _RestartLines(logging.Handler):
    """The agent's restart decisions as steadytune lines (torch logs them at INFO, which it does not show)."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            print(text, file=sys.stderr, flush=True)
        elif "new nodes" in text:
            print("steadytune: another node (re)joined the rendezvous: restarting this node's processes with it; the "
                  "job resumes from the last complete checkpoint", file=sys.stderr, flush=True)
        elif "will restart worker group" in text:
            left = text.split("FAILED.", 1)[-1].split(";")[0].strip() if "FAILED." in text else ""
            print("steadytune: a training process of this node failed: restarting the job through the rendezvous"
                  + (f" ({left})" if left else "") + "; it resumes from the last complete checkpoint",
                  file=sys.stderr, flush=True)


def announce_restarts():
    """Hook _RestartLines onto the agent's logger; -> a function that puts the logger back."""
    logger = logging.getLogger(AGENT_LOGGER)
    handler, level, propagate = _RestartLines(level=logging.INFO), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False   # its WARNING lines are printed by the handler, once

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    return restore

def hang_reports(output_dir: str | None, since: float) -> list[Path]:
    if not output_dir or not Path(output_dir).is_dir():
        return []
    return sorted(p for p in Path(output_dir).glob("hang-rank-*.txt") if p.stat().st_mtime >= since - 1)
