"""Several machines, seen from one training process: which node it runs on, the checks a multi-node run makes before
anything loads, and what a process says when a peer dies.

- node_layout(): nodes, this node's number, processes per node, the restart attempt, from what torch's elastic agent
  puts in every process's environment (GROUP_RANK, GROUP_WORLD_SIZE, LOCAL_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT,
  TORCHELASTIC_MAX_RESTARTS) and what our launcher adds for an elastic launch (its job id, when it started).
- check_shared_output(): one output folder, owned by global rank 0, on storage every node mounts. Rank 0 writes a
  file with a random token into output_dir; every rank reads it back (waiting a few seconds for a network
  filesystem's caches). A node that does not see it stops the run at start, named, before a checkpoint is written
  where a resume on another node could not find it.
- measure_allreduce(): one all-reduce across the nodes, timed, for the start-up print: its bus bandwidth
  (nccl-tests' convention: algorithm bandwidth x 2(n-1)/n) and the path it took (hardware/network.py).
- continue_after_restart(): an elastic restart continues its own launch's run from the newest complete checkpoint:
  overwrite_output_dir and an explicit resume_from_checkpoint applied to the launch's first start, not to its
  restarts. The run's manifest says which launch started it (job id and start time): torch's restart counter is kept
  per node and does not count restarts forced by a node joining, so it cannot tell a restart from a new launch.
- lost_peer(): a collective that failed because another process died (gloo: "Connection closed by peer"), as one
  line saying that this process stops and what happens next (the agent restarts the job, or how to resume it).

Where the world size may change on restart (`--nnodes MIN:MAX`): checkpoints hold whole weights and optimizer state
under every sharding (DDP, ZeRO, FSDP2: state.py), so a restart on another number of processes resumes where
world_resume.py can keep every step's examples: old processes x accumulation divisible by the new process count, or
(fixed-size batches) the per-device batch rescaled; token-budget batches (packing, max_tokens_per_batch) cannot be
split below one micro-batch per rank and stop naming the process counts that can continue.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from steadytune.distributed.collectives import share_from_main
from steadytune.errors import UserError
from steadytune.hardware.network import transport
from steadytune.training.run_folder import CLOCK_SKEW_S, ELASTIC_JOB_ENV, LAUNCHED_AT_ENV

PROBE_PREFIX = ".steadytune-nodes-"
SHARED_WAIT_S = 5.0
# What a collective's error says when the process at the other end died (gloo; NCCL/RCCL's aborts).
PEER_SIGNS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "remote worker crashing",
              "NCCL communicator was aborted", "ncclRemoteError", "remote process exited", "Connection refused")


@dataclass
class NodeLayout:
    world: int
    rank: int
    local_world: int
    nodes: int
    node_rank: int
    host: str
    attempt: int = 0
    max_restarts: int = 0
    job: Optional[str] = None              # the elastic launch's job id (--rdzv-id / RDZV_ID)
    launched_at: Optional[float] = None    # when this node's launcher started (time.time())

    @property
    def several(self) -> bool:
        return self.nodes > 1

    def where(self) -> str:
        return f"rank {self.rank} on node {self.node_rank} ({self.host})"


def node_layout(env: Mapping[str, str] = os.environ) -> NodeLayout:
    def number(*names: str, default: int) -> int:
        for name in names:
            value = env.get(name, "")
            if value.isdigit():
                return int(value)
        return default

    world = number("WORLD_SIZE", default=1)
    local = number("LOCAL_WORLD_SIZE", default=world)
    nodes = number("GROUP_WORLD_SIZE", default=max(1, -(-world // max(local, 1))))
    return NodeLayout(world=world, rank=number("RANK", default=0), local_world=local, nodes=nodes,
                      node_rank=number("GROUP_RANK", "NODE_RANK", default=0), host=socket.gethostname(),
                      attempt=number("TORCHELASTIC_RESTART_COUNT", default=0),
                      max_restarts=number("TORCHELASTIC_MAX_RESTARTS", default=0),
                      job=env.get(ELASTIC_JOB_ENV) or None, launched_at=_float(env.get(LAUNCHED_AT_ENV)))


def _float(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def check_shared_output(path: Path, layout: NodeLayout, wait_s: float = SHARED_WAIT_S) -> None:
    """Every rank sees the output folder global rank 0 writes to (module docstring); UserError naming the nodes that
    do not. A collective: every rank calls it, after rank 0 has claimed the folder."""
    import torch.distributed as dist

    if not layout.several or not dist.is_initialized():
        return
    token = [secrets.token_hex(8) if layout.rank == 0 else None]
    probe = None
    if layout.rank == 0:
        probe = Path(path) / f"{PROBE_PREFIX}{token[0]}"
        probe.write_text(f"{layout.host} {token[0]}\n", encoding="utf-8")
    dist.broadcast_object_list(token, src=0)
    problem = _sees(Path(path) / f"{PROBE_PREFIX}{token[0]}", token[0], wait_s)
    views: list = [None] * layout.world
    dist.all_gather_object(views, {"rank": layout.rank, "node": layout.node_rank, "host": layout.host,
                                   "problem": problem})
    if probe is not None:
        probe.unlink(missing_ok=True)
    bad: dict[tuple, str] = {}
    for view in views:
        if view["problem"]:
            bad.setdefault((view["node"], view["host"]), view["problem"])
    if bad:
        who = "; ".join(f"node {node} ({host}): {problem}" for (node, host), problem in sorted(bad.items()))
        raise UserError(f"output_dir {path} is not the same folder on every node: global rank 0 (node "
                        f"{views[0]['node']}, {views[0]['host']}) wrote a file there that {who}. The run writes "
                        "checkpoints and the adapter from rank 0 and resumes them from any node: put output_dir on "
                        "storage every node mounts at the same path (NFS, Lustre, a cluster filesystem)")


def _sees(probe: Path, token: str, wait_s: float) -> str:
    """'' when `probe` holds `token` (within wait_s: NFS attribute caches), else what is wrong."""
    deadline = time.monotonic() + wait_s
    while True:
        if not probe.parent.is_dir():
            problem = f"does not see (no folder {probe.parent} there)"
        else:
            try:
                text = probe.read_text(encoding="utf-8")
                if token in text:
                    return ""
                problem = "sees with other content"
            except FileNotFoundError:
                problem = "does not see (the folder exists there but is another one)"
            except OSError as e:
                problem = f"cannot read ({e.strerror or e})"
        if time.monotonic() >= deadline:
            return problem
        time.sleep(0.25)


@dataclass
class AllReduce:
    mib: float
    seconds: float
    bus_gb_s: float
    path: str


def measure_allreduce(device, layout: NodeLayout, mib: Optional[int] = None) -> Optional[AllReduce]:
    """One timed all-reduce of `mib` MiB (256 on a GPU, 16 on the CPU) across every rank, after one untimed (NCCL
    builds its communicator in the first); the slowest rank's time counts. None with one process."""
    import torch
    import torch.distributed as dist

    if layout.world < 2 or not dist.is_initialized():
        return None
    mib = mib or (256 if device.type == "cuda" else 16)
    data = torch.ones(mib * 2**18, dtype=torch.float32, device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    dist.all_reduce(data)
    sync()
    dist.barrier()
    started = time.perf_counter()
    dist.all_reduce(data)
    sync()
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    seconds = max(float(elapsed.item()), 1e-9)
    bus = mib * 2**20 / seconds * 2 * (layout.world - 1) / layout.world / 1e9
    backend = dist.get_backend()
    if backend == "nccl" and getattr(torch.version, "hip", None):
        backend = "rccl"
    return AllReduce(mib, seconds, bus, transport(backend, os.environ))


def record_nodes(cfg, layout: NodeLayout, measured: Optional[AllReduce]) -> None:
    """The start-up lines (and run_config.yaml's decisions) of a multi-node run."""
    restart = (f"; this node's restart {layout.attempt} of {layout.max_restarts}" if layout.attempt else
               f"; up to {layout.max_restarts} restart{'s' if layout.max_restarts > 1 else ''}"
               if layout.max_restarts else "")
    cfg.decide("nodes", f"{layout.nodes} x {layout.local_world}",
               f"{layout.nodes} nodes x {layout.local_world} process{'es' if layout.local_world > 1 else ''} = world "
               f"size {layout.world}"
               + (f", elastic job {layout.job!r}" if layout.max_restarts else "") + restart
               + "; one output folder (global rank 0 writes it), each node's output in nodes/")
    if measured is not None:
        cfg.decide("all_reduce", f"{measured.bus_gb_s:.3g} GB/s",
                   f"one all-reduce of {measured.mib:g} MiB across {layout.nodes} nodes took "
                   f"{measured.seconds * 1000:.1f} ms (bus bandwidth, as nccl-tests counts it); {measured.path}")


def started_by_this_launch(manifest: dict, layout: NodeLayout) -> bool:
    """output_dir's run was started by an earlier attempt of this elastic launch: the same job id, and started after
    this node's launcher (the first attempt starts after every node's launcher joined the rendezvous)."""
    started = manifest.get("job_started")
    return (layout.job is not None and manifest.get("job") == layout.job and layout.launched_at is not None
            and isinstance(started, (int, float)) and started >= layout.launched_at - CLOCK_SKEW_S)


def claim_for_launch(manifest: dict, layout: NodeLayout) -> bool:
    """(main process, after the claim) Mark the run as this launch's; -> whether an earlier attempt of this launch
    started it (a restart)."""
    if layout.job is None:
        return False
    restarted = started_by_this_launch(manifest, layout)
    manifest["job"] = layout.job
    if not restarted:
        manifest["job_started"] = time.time()
    return restarted


def continue_after_restart(cfg, restarted: bool, layout: NodeLayout) -> bool:
    """On a restart of the elastic launch that started output_dir's run (`restarted`: the main process's answer from
    claim_for_launch), continue that run from its newest complete checkpoint: overwrite_output_dir and an explicit
    resume_from_checkpoint were for the launch's first start. Every rank calls it. -> whether it applied."""
    if layout.job is None:
        return False
    if not share_from_main(restarted):
        return False
    t = cfg.train
    changed = [k for k, v in (("overwrite_output_dir", t.overwrite_output_dir),
                              ("resume_from_checkpoint", t.resume_from_checkpoint)) if v not in (None, False)]
    if t.resume_from_checkpoint is False:
        changed.append("resume_from_checkpoint: false")
    t.overwrite_output_dir, t.resume_from_checkpoint = False, None
    cfg.decide("elastic_restart", "continue",
               f"a restart of elastic job {layout.job!r}, whose first attempt started the run in output_dir: it "
               "continues from the newest complete checkpoint"
               + (f" ({', '.join(changed)}: for the launch's first start only)" if changed else ""))
    return True


class PeerLost(UserError):
    """A collective failed because another process of the job died."""


def lost_peer(error: BaseException, layout: NodeLayout, step: Optional[int] = None) -> Optional[PeerLost]:
    """The error a collective raised when a peer died, as one line (module docstring); None for other errors."""
    if layout.world < 2 or not isinstance(error, RuntimeError):
        return None
    text = str(error)
    if not any(sign in text for sign in PEER_SIGNS):
        return None
    first = " ".join(text.split())[:160]
    at = f" at step {step}" if step is not None else ""
    if layout.attempt < layout.max_restarts:
        then = (f"the elastic agent restarts the job through the rendezvous (restart {layout.attempt + 1} of "
                f"{layout.max_restarts}) and it resumes from the last complete checkpoint")
    else:
        then = ("no restart is left (--max-restarts / MAX_RESTARTS): run the same command again on every node to "
                "resume from the last complete checkpoint")
    return PeerLost(f"another process of the job died{at} ({first}); {layout.where()} stops here, saving nothing "
                    f"(the step was not finished); {then}")


def start_nodes(cfg, folder, layout: NodeLayout, device) -> None:
    """Several nodes, at start: every node sees the output folder rank 0 claimed, an elastic restart
    continues its own job's run, and one all-reduce across the nodes is measured for the start-up print."""
    restarted = folder.main and claim_for_launch(folder.manifest, layout)   # which launch's run this is
    if layout.several:
        check_shared_output(folder.path, layout)
    continue_after_restart(cfg, restarted, layout)
    if layout.several:
        record_nodes(cfg, layout, measure_allreduce(device, layout))
