"""The hang watchdog: a stalled step stops the run within `hang_timeout`, with every rank's stacks on disk and a
message naming the rank and step, instead of a huge ddp_timeout that turns an RCCL/NCCL hang into days of silence
(seed 000's `ddp_timeout: 180000000`).

Each rank runs a daemon thread. The training loop beats a heartbeat (`beat(step, phase)`) at the start of every
optimizer step and before evaluation and saving. When a rank's heartbeat is older than its allowance, or another rank
has reported a hang (a key in the rendezvous store every rank can reach), the thread:
1. writes `output_dir/hang-rank-K.txt`: where the main thread is (waiting in a collective, or running some line),
   every thread's Python stack (faulthandler), the peers' last heartbeats, the NCCL/RCCL flight recorder when it is
   on (TORCH_FR_BUFFER_SIZE > 0; `steadytune train --nproc` turns it on), and the NCCL/RCCL environment;
2. tells the store where it is, and waits a few seconds for the other ranks to do the same;
3. on the main process, saves what it can (`rescue`: a checkpoint of the last finished step when the full state is
   on this rank and the main thread is not in the middle of an update), and records the run as hung;
4. prints one line naming the stalled rank and step, and exits with HANG_EXIT_CODE (the main thread is stuck, so the
   process ends with os._exit; the launcher then stops the other ranks).

The stalled rank is the one whose main thread is *not* waiting in a collective: the others wait for it. When every
rank waits in a collective, no rank is behind: the communication itself hangs (NCCL/RCCL, P2P, the network).
Across nodes the message names the stalled rank's node and host, the step it reached and the last collective it
took part in (the loop names each one it waits in: `waiting(step, what)`); a rank that never reports (its node is
gone, or it is stuck outside Python) is named with its last heartbeat. Keys in the store carry the elastic job's
restart attempt, so a restarted job does not read the previous attempt's reports.

Allowance: `hang_timeout` seconds per step when set; by default max(300 s, 10 x the slowest step so far), and
max(600 s, ...) for the first step (communicators, allocator warm-up, compilation). Evaluation and saving get six
times the step allowance. 0 turns the watchdog off.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable, Optional

from steadytune.hardware.rccl import rccl_hang_hint

HANG_EXIT_CODE = 5
AUTO_FLOOR_S = 300.0
FIRST_STEP_FLOOR_S = 600.0
STEP_FACTOR = 10.0
LONG_PHASES = {"eval": 6.0, "save": 6.0}
PEER_WAIT_S = 10.0
RESCUE_S = 30.0
STORE_PREFIX = "steadytune/watchdog/"
ENV_PREFIXES = ("NCCL_", "RCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED", "HSA_", "HIP_", "ROCR_", "CUDA_VISIBLE",
                "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_",
                "OMP_NUM_THREADS", "GLOO_")
# Where a main thread that waits for its peers sits: torch.distributed's collectives, Accelerate's and DeepSpeed's
# wrappers around them. Backward (torch/autograd) counts too: DDP and FSDP all-reduce / reduce-scatter gradients
# inside it, so a rank waiting for a peer's gradients sits there.
COLLECTIVE_FILES = ("torch/distributed/", "accelerate/utils/operations.py", "deepspeed/comm/",
                    "torch/nn/parallel/distributed.py", "torch/autograd/")


def store_prefix() -> str:
    """Per elastic attempt: the rendezvous store outlives a restart (torch's agent keeps it), its keys must not."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    return STORE_PREFIX + (f"attempt{attempt}/" if attempt and attempt != "0" else "")


@dataclass
class Heartbeat:
    step: int
    phase: str
    at: float          # time.monotonic() of the beat


def allowance(timeout: Optional[float], slowest_step: Optional[float], first_step: bool, phase: str) -> float:
    """Seconds the current phase may go without a heartbeat (module docstring)."""
    if timeout:
        base = timeout
    else:
        base = max(FIRST_STEP_FLOOR_S if first_step else AUTO_FLOOR_S, STEP_FACTOR * (slowest_step or 0.0))
    return base * LONG_PHASES.get(phase, 1.0)


def where_is(frame) -> tuple[bool, str]:
    """(waiting in a collective?, 'file:line in function') for a thread's current frame."""
    stack = traceback.extract_stack(frame)
    if not stack:
        return False, "?"
    in_collective = next((f for f in reversed(stack) if any(part in f.filename.replace("\\", "/")
                                                             for part in COLLECTIVE_FILES)), None)
    ours = next((f for f in reversed(stack) if _is_user_code(f.filename)), stack[-1])
    here = f"{_short(ours.filename)}:{ours.lineno} in {ours.name}"
    if in_collective is not None:
        return True, f"{in_collective.name} ({_short(in_collective.filename)}:{in_collective.lineno}), called from {here}"
    top = stack[-1]
    return False, f"{_short(top.filename)}:{top.lineno} in {top.name}" + (f", called from {here}" if top is not ours else "")


def _is_user_code(path: str) -> bool:
    """Not the standard library nor an installed package: steadytune's own code (or a test's)."""
    import sysconfig
    path = path.replace("\\", "/")
    stdlib = sysconfig.get_paths()["stdlib"].replace("\\", "/")
    return "site-packages/" not in path and not path.startswith(stdlib) and not path.startswith("<")


def _short(path: str) -> str:
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "steadytune/"):
        if marker in path:
            return (marker if marker == "steadytune/" else "") + path.split(marker, 1)[1]
    return path


class HangWatchdog:
    def __init__(self, output_dir: Path, rank: int, world_size: int, timeout: Optional[float],
                 rescue: Optional[Callable[[], str]] = None, on_hang: Optional[Callable[[str], None]] = None,
                 poll_s: float = 1.0, exit: Callable[[int], None] = os._exit):
        self.output_dir = Path(output_dir)
        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        self.rescue, self.on_hang, self.poll_s = rescue, on_hang, poll_s
        self.exit = exit       # os._exit: the main thread is stuck, so the process cannot end normally
        self.beat_ = Heartbeat(0, "start", time.monotonic())
        self.slowest_step: Optional[float] = None
        self.steps_seen = 0
        self._step: Optional[tuple[int, float]] = None   # (step, when its "step" beat came)
        self.main_thread = threading.main_thread()
        self.store = None
        self.prefix = store_prefix()
        self.host = socket.gethostname()
        self.node = int(os.environ.get("GROUP_RANK", "0") or 0)
        self.nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1") or 1)
        self.last_collective: Optional[dict] = None   # {"what", "step", "done"}: the last one the loop waited in
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.fired = False
        self.rccl_hint = ""    # the settings that avoid known RCCL hangs on these GPUs (hardware/rccl.py), set at start

    @property
    def enabled(self) -> bool:
        return self.timeout != 0

    def describe(self) -> str:
        if not self.enabled:
            return "off (hang_timeout: 0)"
        if self.timeout:
            return f"{self.timeout:g} s per step (hang_timeout)"
        return (f"max({AUTO_FLOOR_S:.0f} s, {STEP_FACTOR:g} x the slowest step) per step, "
                f"{FIRST_STEP_FLOOR_S:.0f} s for the first")

    # ------------------------------------------------------------------ the loop's side

    def start(self) -> "HangWatchdog":
        if not self.enabled or self._thread is not None:
            return self
        self.store = connect_store(self.world_size)
        self.rccl_hint = rccl_hang_hint(self.world_size) if self.world_size > 1 else ""   # asked now, not mid-hang
        self.beat_ = Heartbeat(self.beat_.step, "start", time.monotonic())
        self._thread = threading.Thread(target=self._watch, name="steadytune-hang-watchdog", daemon=True)
        self._thread.start()
        return self

    def beat(self, step: int, phase: str = "step") -> None:
        """The main thread is alive at `step` in `phase` (cheap: one object, no I/O). Phases: "step" (a step
        begins), "sync" (waiting for the other ranks from here), "compute", "eval", "save"."""
        now = time.monotonic()
        if phase == "step" and (self._step is None or step > self._step[0]):
            if self._step is not None:
                self.steps_seen += 1
                if self.steps_seen > 1:   # the first step includes warm-up; it does not set the scale
                    self.slowest_step = max(self.slowest_step or 0.0, now - self._step[1])
            self._step = (step, now)
        self.beat_ = Heartbeat(step, phase, now)

    @contextmanager
    def waiting(self, step: int, what: str = "a collective"):
        """Around a point where this rank waits for the others (a collective, or the GPU sync after one); `what`
        names it for a hang report ("the loss all-reduce")."""
        self.last_collective = {"what": what, "step": step, "done": False}
        self.beat(step, "sync")
        try:
            yield
        finally:
            self.last_collective = {"what": what, "step": step, "done": True}
            self.beat(step, "compute")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # ------------------------------------------------------------------ the watching thread

    def _watch(self) -> None:
        published = 0.0
        while not self._stop.wait(self.poll_s):
            beat = self.beat_
            stalled = time.monotonic() - beat.at
            limit = allowance(self.timeout, self.slowest_step, self.steps_seen == 0, beat.phase)
            if time.monotonic() - published > 2.0:
                self._store_set(f"beat/{self.rank}", {**self._identity(), "step": beat.step, "phase": beat.phase,
                                                      "age_s": round(stalled, 1), "at": time.time(),
                                                      "collective": self.last_collective})
                published = time.monotonic()
            peer = self._store_get("hang")
            if stalled > limit or peer is not None:
                if self._stop.is_set():
                    return
                self._fire(beat, stalled, limit, peer)
                return

    def _fire(self, beat: Heartbeat, stalled: float, limit: float, peer: Optional[dict]) -> None:
        self.fired = True
        if peer is None:
            self._store_set("hang", {"rank": self.rank, "step": beat.step, "phase": beat.phase,
                                     "stalled_s": round(stalled, 1), "limit_s": round(limit, 1)})
        frame = sys._current_frames().get(self.main_thread.ident)
        waiting, where = where_is(frame) if frame is not None else (False, "?")
        # NCCL/RCCL collectives return at once and the wait shows at the next GPU sync (`.item()`), a line like any
        # other: the loop's "sync" beat says this rank reached a point where it waits for the others.
        waiting = waiting or beat.phase == "sync"
        report = self.output_dir / f"hang-rank-{self.rank}.txt"
        try:
            self._write_report(report, beat, stalled, limit, peer, waiting, where)
        except OSError as e:
            print(f"[rank {self.rank}] hang report {report} could not be written: {e}", file=sys.stderr, flush=True)
        self._store_set(f"where/{self.rank}", {**self._identity(), "waiting": waiting, "where": where,
                                               "step": beat.step, "phase": beat.phase,
                                               "collective": self.last_collective})
        if self.store is not None:
            try:
                self.store.add(self.prefix + "reported", 1)
            except Exception:
                pass
        rescued = ""
        if self.rescue is not None and waiting:
            rescued = _run_with_limit(_on_side_stream(self.rescue), RESCUE_S)
        peers = self._wait_for_peers()
        message = self._message(beat, stalled, limit, waiting, where, peers, rescued)
        print(f"\nerror: {message}", file=sys.stderr, flush=True)   # after a progress bar's unfinished line
        if self.on_hang is not None:
            try:
                self.on_hang(message)
            except Exception as e:   # recording is best effort: the process must still end
                print(f"[rank {self.rank}] recording the hang failed: {e}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._wait_for_all("exiting")   # the first process to exit makes the launcher stop the others
        self.message = message
        self.exit(HANG_EXIT_CODE)

    def _wait_for_all(self, key: str) -> None:
        if self.store is None:
            return
        try:
            self.store.add(self.prefix + key, 1)
            deadline = time.monotonic() + PEER_WAIT_S
            while time.monotonic() < deadline and self.store.add(self.prefix + key, 0) < self.world_size:
                time.sleep(0.2)
        except Exception:
            pass

    def _wait_for_peers(self) -> dict[int, dict]:
        deadline = time.monotonic() + PEER_WAIT_S
        peers: dict[int, dict] = {}
        while time.monotonic() < deadline:
            peers = {r: v for r in range(self.world_size) if (v := self._store_get(f"where/{r}")) is not None}
            if len(peers) == self.world_size or self.store is None:
                break
            time.sleep(0.2)
        return peers

    def _identity(self) -> dict:
        return {"host": self.host, "node": self.node}

    def _who(self, rank: int, record: Optional[dict]) -> str:
        """'rank 1' on one node; 'rank 1 on node 1 (host-b)' across nodes."""
        if self.nodes < 2 or not record or "host" not in record:
            return f"rank {rank}"
        return f"rank {rank} on node {record.get('node')} ({record.get('host')})"

    def _message(self, beat, stalled, limit, waiting, where, peers: dict[int, dict], rescued: str) -> str:
        mine = {**self._identity(), "waiting": waiting, "where": where, "step": beat.step, "phase": beat.phase,
                "collective": self.last_collective}
        peers = {**peers, self.rank: mine}
        stalled_ranks = sorted(r for r, p in peers.items() if not p.get("waiting"))
        unknown = sorted(set(range(self.world_size)) - set(peers))
        files = f"{self.output_dir}/hang-rank-*.txt"
        if self.world_size == 1:
            text = f"the run hung: step {beat.step} made no progress ({where})"
        elif stalled_ranks:
            first = peers[stalled_ranks[0]]
            who = (self._who(stalled_ranks[0], first) if len(stalled_ranks) == 1 else
                   "ranks " + ", ".join(self._who(r, peers[r]).removeprefix("rank ") for r in stalled_ranks))
            text = (f"the run hung: {who} stalled at step {first['step']} ({first['where']})"
                    f"{describe_collective(first.get('collective'))}; the other ranks waited for it in a collective")
            waiting_in = next((p.get("collective") for r, p in sorted(peers.items()) if p.get("waiting")
                               and p.get("collective")), None)
            if waiting_in:
                text += f" ({waiting_in['what']} of step {waiting_in['step']})"
        else:
            text = (f"the run hung at step {beat.step}: every rank waits in a collective ({where}): a communication "
                    "hang (NCCL/RCCL), not a slow rank; try NCCL_P2P_DISABLE=1 and `steadytune doctor --allreduce`"
                    + (f"; {self.rccl_hint}" if self.rccl_hint else ""))
        if unknown:
            last = {r: self._store_get(f"beat/{r}") for r in unknown}
            text += "; " + ", ".join(
                self._who(r, last[r]) + (f" (last heartbeat at step {last[r]['step']}, "
                                         f"{max(0.0, time.time() - last[r].get('at', time.time())):.0f} s ago"
                                         f"{describe_collective(last[r].get('collective'))})" if last[r] else "")
                for r in unknown) + " did not report (dead, its node gone, or stuck outside Python)"
        text += (f"; no heartbeat for {stalled:.3g} s (allowed {limit:.3g} s; hang_timeout); stacks and NCCL/RCCL "
                 f"state in {files}")
        if rescued:
            text += f"; {rescued}"
        return text

    def _write_report(self, path: Path, beat, stalled, limit, peer, waiting, where) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"steadytune hang report: rank {self.rank} of {self.world_size}, pid {os.getpid()} on "
                    f"{socket.gethostname()}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
            f.write(f"last heartbeat: step {beat.step} ({beat.phase}), {stalled:.1f} s ago; allowed {limit:.1f} s "
                    f"({self.describe()})\n")
            if peer is not None:
                f.write(f"reported first by rank {peer.get('rank')} (step {peer.get('step')}, "
                        f"{peer.get('stalled_s')} s without a heartbeat)\n")
            f.write(f"main thread: {'waiting in a collective: ' if waiting else 'running '}{where}\n\n")
            f.write("== Python stacks of every thread (most recent call first) ==\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.write("\n== peers' last heartbeats (rendezvous store) ==\n")
            for r in range(self.world_size):
                f.write(f"rank {r}: {self._store_get(f'beat/{r}')}\n")
            f.write("\n== NCCL/RCCL flight recorder ==\n")
            f.write(flight_recorder_text() + "\n")
            f.write("\n== environment ==\n")
            for key in sorted(os.environ):
                if key.startswith(ENV_PREFIXES):
                    f.write(f"{key}={os.environ[key]}\n")
            f.write("\n== GPU memory ==\n" + gpu_memory_text() + "\n")

    # ------------------------------------------------------------------ the store

    def _store_set(self, key: str, value: dict) -> None:
        if self.store is None:
            return
        try:
            self.store.set(self.prefix + key, json.dumps(value))
        except Exception:
            self.store = None   # the store's host is gone: carry on alone

    def _store_get(self, key: str) -> Optional[dict]:
        if self.store is None:
            return None
        try:
            if not self.store.check([self.prefix + key]):
                return None
            return json.loads(self.store.get(self.prefix + key))
        except Exception:
            return None


def describe_collective(record: Optional[dict]) -> str:
    """'; its last collective: the loss all-reduce of step 2 (finished)' for a hang message."""
    if not record:
        return ""
    return (f"; its last collective: {record.get('what')} of step {record.get('step')} "
            f"({'finished' if record.get('done') else 'not finished'})")


def connect_store(world_size: int):
    """A client of the rendezvous store every rank already uses (MASTER_ADDR:MASTER_PORT, set by torchrun and
    Accelerate): the watchdogs talk through it without a collective, so they work while the collectives hang."""
    if world_size < 2 or "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        return None
    try:
        import torch.distributed as dist
        return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, is_master=False,
                             timeout=timedelta(seconds=10), wait_for_workers=False)
    except Exception:
        return None


def flight_recorder_text() -> str:
    """The last collectives NCCL/RCCL ran (torch's flight recorder), when TORCH_FR_BUFFER_SIZE > 0."""
    size = os.environ.get("TORCH_FR_BUFFER_SIZE", os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0"))
    if not size.isdigit() or int(size) == 0:
        return ("off: set TORCH_FR_BUFFER_SIZE=2000 (TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.8) to record the "
                "last collectives (steadytune train --nproc does)")
    try:
        import pickle

        import torch
        raw = torch._C._distributed_c10d._dump_nccl_trace(includeCollectives=True, includeStackTraces=False,
                                                           onlyActive=False)
        trace = pickle.loads(raw)
    except Exception as e:   # gloo runs, or a torch without it
        return f"not available here ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
    lines = []
    for entry in (trace.get("entries") or [])[-20:]:
        lines.append(" ".join(f"{k}={entry.get(k)}" for k in ("record_id", "pg_id", "collective_seq_id",
                                                              "profiling_name", "state", "time_discovered_started_ns",
                                                              "input_sizes") if k in entry))
    return "\n".join(lines) or "no collectives recorded"


def gpu_memory_text() -> str:
    try:
        import torch
        if not torch.cuda.is_available():
            return "no GPU"
        device = torch.cuda.current_device()
        return (f"device {device}: allocated {torch.cuda.memory_allocated(device) / 2**30:.2f} GiB, reserved "
                f"{torch.cuda.memory_reserved(device) / 2**30:.2f} GiB, peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB")
    except Exception as e:
        return f"unavailable ({type(e).__name__})"


def _on_side_stream(work: Callable[[], str]) -> Callable[[], str]:
    """Run GPU copies on a stream of their own: the default stream may be queued behind the hung collective."""
    def wrapped() -> str:
        try:
            import torch
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                with torch.cuda.stream(torch.cuda.Stream()):
                    return work()
        except ImportError:
            pass
        return work()
    return wrapped


def _run_with_limit(work: Callable[[], str], seconds: float) -> str:
    """Run `work` in a thread for at most `seconds` (a save can block behind the hung GPU work)."""
    result: list[str] = []

    def target():
        try:
            result.append(work())
        except Exception as e:
            result.append(f"saving failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")

    thread = threading.Thread(target=target, name="steadytune-hang-rescue", daemon=True)
    thread.start()
    thread.join(seconds)
    return result[0] if result else f"saving did not finish within {seconds:.0f} s (it waits behind the hung work)"
