"""LLaMA-Factory's Ray launch: `USE_RAY=1 steadytune train CONFIG` starts the run's training processes on a Ray
cluster instead of on this machine.

As LLaMA-Factory 0.9.5 does (train/tuner.py, _ray_training_function), with plain Ray actors: one placement-group
bundle per worker (`ray_num_workers` of them, each `resources_per_worker`, placed by `placement_strategy`), ranks
ordered so that rank 0 sits on the node of `master_addr` (default: the node Ray put the first bundle on), and each
worker given RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT. Each actor then runs the same command a
torchrun rank runs, `python -m steadytune train CONFIG ...`, as a child process: the trainer is the one of every
other launch (its process group, checkpoints, watchdog and exit codes), Ray only places and starts it. The ranks'
output reaches this terminal through Ray's log forwarding; the exit code is the first failed rank's.

Every node must see the working folder and the config (shared storage, as for `--nnodes`), and Ray must be
installed on each (pip install 'steadytune[ray]'). `ray_init_kwargs` go to ray.init (`address: auto` joins a
running cluster; without it a local Ray starts, as in the tests). `ray_run_name` (earlier LLaMA-Factory releases,
Ray Train's run name) puts the run in `ray_storage_path/ray_run_name`, where those releases left the results.
Without USE_RAY the ray_* keys are read and do nothing, as in LLaMA-Factory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from steadytune.errors import UserError

PLACEMENT_TIMEOUT_S = 120.0   # how long the workers' bundles may wait for resources before the run is refused
# What a worker's child process must not inherit: this launch (or it would launch again) and the driver's rank.
CHILD_DROPS = ("USE_RAY", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def ray_requested(env: Mapping[str, str]) -> bool:
    """LLaMA-Factory's switch (extras/misc.py use_ray): USE_RAY set to 1 / true / y."""
    return str(env.get("USE_RAY", "")).strip().lower() in ("1", "true", "y", "yes")


@dataclass
class RayPlan:
    num_workers: int
    init_kwargs: dict
    resources: dict | None            # None: {GPU: 1} where the cluster has GPUs, else {CPU: 1}
    strategy: str
    master_addr: str | None
    master_port: int | None
    output_dir: str | None            # ray_storage_path/ray_run_name, when ray_run_name is set
    notes: list[str] = field(default_factory=list)


def _mapping(value, key: str) -> dict | None:
    """A mapping key given as a mapping or as a JSON string (LLaMA-Factory's _convert_str_dict reads both)."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as e:
            raise UserError(f"{key}: not valid JSON ({e.msg} at character {e.pos})") from None
        if isinstance(parsed, dict):
            return parsed
    raise UserError(f"{key}: expected a mapping (or a JSON object as text), got {value!r}")


def plan_ray(train) -> RayPlan:
    """The train section's Ray keys -> a RayPlan; UserError names a bad key."""
    resources = _mapping(train.resources_per_worker, "resources_per_worker")
    if resources is not None:
        bad = [k for k, v in resources.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0]
        if bad or not resources:
            raise UserError(f"resources_per_worker: each resource needs a number >= 0 (got {resources!r})")
    output_dir, notes = None, []
    if train.ray_run_name:
        output_dir = str(Path(train.ray_storage_path).absolute() / train.ray_run_name)
        notes.append(f"ray_run_name: the run's folder is {output_dir} (ray_storage_path/ray_run_name, where "
                     f"LLaMA-Factory's Ray Train kept its results), not output_dir {train.output_dir}")
    return RayPlan(train.ray_num_workers, _mapping(train.ray_init_kwargs, "ray_init_kwargs") or {}, resources,
                   train.placement_strategy, train.master_addr, train.master_port, output_dir, notes)


def worker_resources(plan: RayPlan, cluster: Mapping[str, float]) -> dict:
    """One worker's bundle: resources_per_worker, or a GPU where the cluster has any (LLaMA-Factory: one device a
    worker), else a CPU."""
    if plan.resources is not None:
        return dict(plan.resources)
    return {"GPU": 1} if cluster.get("GPU", 0) >= 1 else {"CPU": 1}


def check_cluster_fits(plan: RayPlan, bundle: dict, cluster: Mapping[str, float]) -> None:
    """Refuse at once (instead of waiting for resources that never come) when the whole cluster holds too little."""
    for name, amount in bundle.items():
        need, have = amount * plan.num_workers, cluster.get(name, 0)
        if need > have:
            raise UserError(f"ray_num_workers: {plan.num_workers} workers x {name} {amount:g} = {need:g}, but the Ray "
                            f"cluster has {have:g} {name}; lower ray_num_workers or resources_per_worker, or give Ray "
                            f"more (ray_init_kwargs: {{num_{name.lower()}s: ...}} for a local Ray)")


def order_ranks(node_of_bundle: list[str], master_addr: str | None) -> list[int]:
    """Bundle indices in rank order: the master's node first (rank 0 listens there), then by node, so that a node's
    ranks are neighbours and LOCAL_RANK counts within a node."""
    first = master_addr if master_addr is not None else node_of_bundle[0]
    if first not in node_of_bundle:
        raise UserError(f"master_addr: {first} is not the address of a node of the Ray cluster that holds a worker "
                        f"(those are {', '.join(sorted(set(node_of_bundle)))})")
    return sorted(range(len(node_of_bundle)), key=lambda i: (node_of_bundle[i] != first, node_of_bundle[i], i))


def rank_environments(node_of_bundle: list[str], order: list[int], master_addr: str, master_port: int) -> list[dict]:
    """The launch variables of each rank (index = rank), as torchrun sets them."""
    world = len(order)
    per_node: dict[str, int] = {}
    for i in order:
        per_node[node_of_bundle[i]] = per_node.get(node_of_bundle[i], 0) + 1
    seen: dict[str, int] = {}
    node_index = {node: n for n, node in enumerate(per_node)}   # in rank order: the master's node is node 0
    out = []
    for rank, i in enumerate(order):
        node = node_of_bundle[i]
        local = seen.get(node, 0)
        seen[node] = local + 1
        out.append({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(per_node[node]), "GROUP_RANK": str(node_index[node]),
                    "GROUP_WORLD_SIZE": str(len(per_node)), "MASTER_ADDR": master_addr,
                    "MASTER_PORT": str(master_port), "TORCHELASTIC_USE_AGENT_STORE": "False"})
    return out


def child_environment(base: Mapping[str, str], rank_env: Mapping[str, str]) -> dict:
    env = {k: v for k, v in base.items() if k not in CHILD_DROPS}
    env.update(rank_env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def launch_on_ray(plan: RayPlan, config: str, overrides: list[str], force: bool) -> int:
    """Start the workers on Ray and wait for them; -> 0, or the exit code of the first rank that failed."""
    try:
        import ray   # optional dependency: the ray extra
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    except ImportError:
        raise UserError("USE_RAY=1 needs Ray: pip install 'steadytune[ray]' (on every node of the cluster), or "
                        "launch without Ray: steadytune train CONFIG --nproc N") from None
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(**plan.init_kwargs)
    pg = None
    try:
        cluster = ray.cluster_resources()
        bundle = worker_resources(plan, cluster)
        check_cluster_fits(plan, bundle, cluster)
        pg = placement_group([dict(bundle) for _ in range(plan.num_workers)], strategy=plan.strategy)
        ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            raise UserError(f"Ray could not place {plan.num_workers} workers of {bundle} ({plan.strategy}) within "
                            f"{PLACEMENT_TIMEOUT_S:.0f} s; the cluster has {dict(cluster)}")

        def on_bundle(i: int, **options):
            return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=i), **options}

        node_ip = ray.remote(num_cpus=0)(_node_address)
        nodes = ray.get([node_ip.options(**on_bundle(i)).remote() for i in range(plan.num_workers)])
        order = order_ranks(nodes, plan.master_addr)
        master_addr = plan.master_addr or nodes[order[0]]
        port = plan.master_port or ray.get(ray.remote(num_cpus=0)(_free_port).options(**on_bundle(order[0])).remote())
        envs = rank_environments(nodes, order, master_addr, port)
        args = [sys.executable, "-u", "-m", "steadytune", "train", str(Path(config).absolute()), *overrides]
        args += [f"output_dir={plan.output_dir}"] if plan.output_dir else []
        args += ["--force"] if force else []
        print(f"steadytune: starting {plan.num_workers} training process{'es' if plan.num_workers > 1 else ''} on "
              f"Ray ({len(set(nodes))} node{'s' if len(set(nodes)) > 1 else ''}, {bundle} each, {plan.strategy}); "
              f"rank 0 at {master_addr}:{port}", flush=True)
        # CPU and GPU counts of an actor are what its bundle reserves: Ray then sets CUDA_VISIBLE_DEVICES for it
        resources = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
        worker = ray.remote(_RankProcess)
        actors = [worker.options(**on_bundle(i, num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0),
                                             resources=resources)).remote() for i in order]
        codes = ray.get([actor.run.remote(args, envs[rank], os.getcwd()) for rank, actor in enumerate(actors)])
    finally:
        if pg is not None:
            remove_placement_group(pg)
        if started_here:
            ray.shutdown()
    failed = [(rank, code) for rank, code in enumerate(codes) if code != 0]
    if failed:
        rank, code = failed[0]
        print(f"error: training process rank {rank} exited with code {code} on Ray (its message is above)",
              file=sys.stderr, flush=True)
        return code if code > 0 else 1
    return 0


def _node_address() -> str:
    import ray
    return ray.util.get_node_ip_address().strip("[]")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class _RankProcess:
    """A Ray actor that runs one rank's `steadytune train` as its child process and returns its exit code."""

    def run(self, args: list[str], rank_env: dict, cwd: str) -> int:
        import ray   # optional dependency: the ray extra (present wherever this actor runs)
        env = child_environment(os.environ, rank_env)   # the actor's own, with Ray's CUDA_VISIBLE_DEVICES
        if ray.get_gpu_ids() and not os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
            # Ray shows this actor only its own GPU: it is device 0 here, whatever the rank's place on the node
            # (LLaMA-Factory's Worker sets LOCAL_RANK 0 the same way)
            env["LOCAL_RANK"] = "0"
        folder = cwd if Path(cwd).is_dir() else None
        return subprocess.run(args, env=env, cwd=folder).returncode
