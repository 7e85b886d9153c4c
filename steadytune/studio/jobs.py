"""The processes the studio starts: train, eval, predict, export, doctor.

Each runs in a session of its own (`start_new_session`: closing the browser, or stopping the studio, does not stop
it), with its output going to a log file next to its record, never to a pipe the studio would have to drain (a full
pipe stops the writer: LLaMA-Factory issue 10584). The record (`jobs/<id>.json`) names the process by pid and start
time, so a studio started later, or a second studio on the same folder, tells a live job from an ended one (and
from a later process that got the same pid). The studio that started a job reaps it and writes its exit code; one
that finds it ended without that knows only that it ended.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

from steadytune.errors import UserError
from steadytune.studio.writes import open_new, read_bytes_nofollow, real_folder, replace_file
from steadytune.training.run_folder import process_start_ticks

JOBS = "jobs"
RUNNING, DONE, FAILED, STOPPED, ENDED = "running", "done", "failed", "stopped", "ended"
STOP_CODES = (130, 143, -signal.SIGTERM, -signal.SIGINT)   # 128 + SIGINT/SIGTERM, as train exits; or killed by it
TAIL_BYTES = 16_384
# tqdm's bar: "train:  45%|████▌     | 18/40 [00:03<...]"; a plain "18/40" count is taken too.
TQDM = re.compile(r"(?:^|\s)(\d{1,3})%\|[^|]*\|\s*(\d+)/(\d+)")
COUNT = re.compile(r"\b(\d+)/(\d+)\s*\[")


@dataclass
class Job:
    id: str
    kind: str                          # train | eval | predict | export | doctor
    argv: list                         # the steadytune arguments (after `steadytune`)
    command: str                       # as shown to the user: `steadytune train ...`
    title: str = ""
    pid: Optional[int] = None
    process_start: Optional[int] = None  # the kernel's start time of that pid: a later process with the same pid differs
    host: str = ""
    started: float = 0.0
    state: str = RUNNING               # running | done | failed | stopped | ended (ended: by a studio that did not start it)
    returncode: Optional[int] = None
    ended: Optional[float] = None
    stop_requested: Optional[float] = None
    outputs: list = field(default_factory=list)   # files the job writes (relative to the store's folder), offered as downloads
    stdout: Optional[str] = None       # a file of its own for stdout (doctor --json), else stdout goes to the log too

    @property
    def active(self) -> bool:
        return self.state == RUNNING

    @classmethod
    def from_dict(cls, data: dict) -> "Job":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class JobStore:
    """The jobs of one folder (a run folder's studio/, or the studio's own folder): records and logs. Nothing is
    written or read through a symbolic link (studio/writes.py): the folder may come from anyone."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.dir = self.folder / JOBS

    def record_path(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.json"

    def log_path(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.log"

    def make_dir(self) -> Path:
        """The jobs/ folder, a real one inside the folder's parent (the run folder, or RUNS_DIR)."""
        return real_folder(self.folder.parent, self.folder.name, JOBS)

    def readable(self) -> bool:
        return not self.folder.is_symlink() and not self.dir.is_symlink() and self.dir.is_dir()

    def save(self, job: Job) -> None:
        self.make_dir()
        replace_file(self.record_path(job.id), json.dumps(asdict(job), indent=1, ensure_ascii=False).encode("utf-8"))

    def load(self, job_id: str) -> Optional[Job]:
        if not re.fullmatch(r"[0-9a-z-]{1,64}", job_id or "") or not self.readable():
            return None
        try:
            data = json.loads(read_bytes_nofollow(self.record_path(job_id)).decode("utf-8"))
            return Job.from_dict(data) if isinstance(data, dict) else None
        except (ValueError, TypeError, RecursionError):
            return None

    def all(self) -> list[Job]:
        """Newest first."""
        if not self.readable():
            return []
        jobs = [self.load(p.stem) for p in self.dir.glob("*.json")]
        return sorted((j for j in jobs if j is not None), key=lambda j: j.started, reverse=True)

    def tail(self, job: Job, size: int = TAIL_BYTES) -> str:
        return read_tail(self.log_path(job.id), size) if self.readable() else ""


def read_tail(path: Path, size: int = TAIL_BYTES) -> str:
    """The last `size` bytes of a file as text, not through a link ("" when unreadable)."""
    return read_bytes_nofollow(path, size).decode("utf-8", errors="replace")


def last_lines(text: str, n: int = 12) -> list[str]:
    """The last `n` lines as a terminal would show them: a carriage return (a progress bar redrawn) overwrites."""
    lines = [line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")]
    return [line for line in lines if line.strip()][-n:]


def progress_of(text: str) -> Optional[dict]:
    """The newest progress bar in a log's tail: {"percent", "done", "total", "line"}, or None."""
    for piece in reversed(re.split(r"[\r\n]", text)):
        match = TQDM.search(piece)
        if match:
            done, total = int(match.group(2)), int(match.group(3))
            return {"percent": int(match.group(1)), "done": done, "total": total, "line": piece.strip()[:200]}
        match = COUNT.search(piece)
        if match and int(match.group(2)) > 0:
            done, total = int(match.group(1)), int(match.group(2))
            return {"percent": min(100, round(100 * done / total)), "done": done, "total": total,
                    "line": piece.strip()[:200]}
    return None


# ------------------------------------------------------------------------------------------------------
# Processes
# ------------------------------------------------------------------------------------------------------

def process_start_time(pid: int) -> Optional[int]:
    """The start time (clock ticks after boot) of a live process, None when it does not run (or is a zombie).
    Linux only; elsewhere, None (use `pid_exists`)."""
    return process_start_ticks(pid)


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_alive(job: Job) -> bool:
    if not isinstance(job.pid, int) or job.pid <= 0:
        return False
    if job.host and job.host != socket.gethostname():
        return True   # another machine's process (a shared folder): not ours to judge
    if Path("/proc/self/stat").exists():
        start = process_start_time(job.pid)
        return start is not None and (job.process_start is None or start == job.process_start)
    return pid_exists(job.pid)


class Launcher:
    """Starts jobs and reaps the ones this studio started (a thread polls them: nothing waits on a pipe)."""

    def __init__(self, cwd: Path, python: str = sys.executable):
        self.cwd, self.python = Path(cwd), python
        self.children: dict[str, tuple[subprocess.Popen, JobStore, Job]] = {}
        self.reaped: set[str] = set()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # --- starting ----------------------------------------------------------------------------------------------
    def start(self, store: JobStore, kind: str, argv: list[str], command: str, title: str = "",
              outputs: Optional[list[str]] = None, separate_stdout: bool = False) -> Job:
        job = Job(id=time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6], kind=kind, argv=list(argv),
                  command=command, title=title or kind, host=socket.gethostname(), started=time.time(),
                  outputs=list(outputs or []))
        store.make_dir()
        log = store.log_path(job.id)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open_new(log, append=True) as out:
            out.write(f"[studio] $ {command}\n[studio] started {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            out.flush()
            stdout = out
            if separate_stdout:
                job.stdout = f"{JOBS}/{job.id}.out"
                stdout = open_new(store.folder / job.stdout)
            try:
                # Its own session: a signal to the studio (Ctrl-C in its terminal) does not reach it, and it outlives
                # the studio. Output to files: nothing here ever has to read it for the job to go on.
                proc = subprocess.Popen([self.python, "-m", "steadytune", *argv], cwd=self.cwd, env=env,
                                        stdin=subprocess.DEVNULL, stdout=stdout, stderr=out, start_new_session=True)
            finally:
                if stdout is not out:
                    stdout.close()
        job.pid = proc.pid
        job.process_start = process_start_time(proc.pid)
        store.save(job)
        with self.lock:
            self.children[job.id] = (proc, store, job)
        return job

    # --- watching ----------------------------------------------------------------------------------------------
    def reap(self) -> None:
        """Record the exit of every job this studio started that has ended."""
        with self.lock:   # taken out under the lock: two threads never finish the same job
            ended = [(job_id, child) for job_id, child in self.children.items() if child[0].poll() is not None]
            for job_id, _ in ended:
                del self.children[job_id]
                self.reaped.add(job_id)
        for job_id, (proc, store, job) in ended:
            code = proc.returncode
            current = store.load(job_id) or job
            current.returncode = code
            current.ended = time.time()
            current.state = finished_state(code, current.stop_requested is not None)
            try:
                store.save(current)
                with open_new(store.log_path(job_id), append=True) as f:
                    f.write(f"\n[studio] exited with code {code} at {time.strftime('%H:%M:%S')}\n".encode())
            except (OSError, UserError):
                pass   # the folder changed under it (a link put in place): its record stays as it was

    def refresh(self, store: JobStore, job: Job) -> Job:
        """The job as it is now: a running record whose process is gone (and is not one this studio will reap)
        becomes `ended`."""
        if job.state != RUNNING:
            return job
        with self.lock:
            ours, reaped = self.children.get(job.id), job.id in self.reaped
        if reaped:   # its exit code is this studio's to write (the reaper may be writing it now)
            return store.load(job.id) or job
        if ours is not None:
            if ours[0].poll() is None:
                return job
            self.reap()
            return store.load(job.id) or job
        if job_alive(job):
            return job
        job.state, job.ended = ENDED, time.time()
        try:
            store.save(job)
        except (OSError, UserError):
            pass   # a folder the studio may not write (a link in its studio/): shown as ended, not recorded
        return job

    def jobs(self, store: JobStore) -> list[Job]:
        return [self.refresh(store, job) for job in store.all()]

    def started_here(self, job_id: str) -> bool:
        """Whether this studio process started the job (and has not reaped it yet)."""
        with self.lock:
            return job_id in self.children

    def stop(self, job_id: str) -> bool:
        """SIGTERM to a job this studio started, through its own process handle (train saves a checkpoint and exits
        143; `--nproc`'s launcher passes it on to its ranks). False when it is not one of this studio's running
        jobs: any other process is studio/stopping.py's to judge."""
        with self.lock:
            child = self.children.get(job_id)
        if child is None or child[0].poll() is not None:
            return False
        proc, store, job = child
        proc.send_signal(signal.SIGTERM)
        current = store.load(job_id) or job
        current.stop_requested = time.time()
        try:
            store.save(current)
        except (OSError, UserError):
            pass
        return True

    def watch(self, interval: float = 0.5) -> None:
        """Reap in a thread until `close`."""
        if self._thread is not None:
            return

        def loop():
            while not self._stop.wait(interval):
                self.reap()

        self._thread = threading.Thread(target=loop, name="studio-reaper", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching; the jobs go on (they are not the studio's to end)."""
        self._stop.set()
        self.reap()


def finished_state(code: int, stop_requested: bool) -> str:
    if code == 0:
        return DONE
    if code in STOP_CODES or (stop_requested and code < 0):
        return STOPPED
    return FAILED
