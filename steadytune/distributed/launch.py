"""Starting several training processes: `steadytune train CONFIG --nproc N` runs `python -m torch.distributed.run
--standalone --nproc_per_node N -m steadytune train CONFIG ...` (what `torchrun` and `accelerate launch` do), and a
plain `steadytune train` on a machine with several visible GPUs says how to use them.

Each process is one rank on one GPU (Accelerate picks the GPU from LOCAL_RANK); without GPUs the processes talk over
gloo on the CPU, which is how the tests run several ranks. The launcher turns on torch's NCCL/RCCL flight recorder
(TORCH_FR_BUFFER_SIZE) so that a hang report (watchdog.py) shows the last collectives, and after the run
names the hang reports when the watchdog stopped it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from steadytune.distributed.watchdog import HANG_EXIT_CODE
from steadytune.errors import UserError

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


def launch(nproc: int, config: str, overrides: list[str], force: bool, output_dir: str | None) -> int:
    """Run the training processes and wait; -> the exit code (the watchdog's when it stopped a hang, else the first
    failed rank's). torch's elastic launcher (what torchrun runs) starts them with a standalone rendezvous."""
    import uuid

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch


    gpus = visible_gpus()
    print(f"steadytune: starting {nproc} training process{'es' if nproc > 1 else ''} "
          + (f"on {nproc} of {gpus} GPUs" if gpus else "on the CPU (no GPU: gloo, for testing)")
          + " through torch.distributed (torchrun's launcher)", flush=True)
    if "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ:   # the older name of the same switch
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FLIGHT_RECORDER_ENTRIES)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # torchrun's default: one thread per process unless told otherwise (nproc processes share the cores).
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    launch_config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                                 rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                                 monitor_interval=0.5)
    args = ["-u", "-m", "steadytune", "train", config, *overrides] + (["--force"] if force else [])
    started = time.time()
    try:
        elastic_launch(launch_config, sys.executable)(*args)
        return 0
    except ChildFailedError as e:
        reports = hang_reports(output_dir, started)
        if reports:
            print(f"error: the run stopped on a hang; reports: {', '.join(str(p) for p in reports)}",
                  file=sys.stderr, flush=True)
            return HANG_EXIT_CODE
        rank, failure = min(e.failures.items(), key=lambda item: item[1].timestamp)   # the first to fail
        print(f"error: training process rank {rank} exited with code {failure.exitcode} (its message is above); "
              "the other processes were stopped", file=sys.stderr, flush=True)
        return failure.exitcode if failure.exitcode and failure.exitcode > 0 else 1
    except KeyboardInterrupt:   # the processes got the same SIGINT: each saves a checkpoint and stops
        return 130


def hang_reports(output_dir: str | None, since: float) -> list[Path]:
    if not output_dir or not Path(output_dir).is_dir():
        return []
    return sorted(p for p in Path(output_dir).glob("hang-rank-*.txt") if p.stat().st_mtime >= since - 1)
