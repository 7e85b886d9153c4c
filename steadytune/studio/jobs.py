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
    """The jobs of one folder (a run folder's studio/, or the studio's own folder): records and logs."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.dir = self.folder / JOBS

    def record_path(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.json"

    def log_path(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.log"

    def save(self, job: Job) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.record_path(job.id)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(job), indent=1, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)

    def load(self, job_id: str) -> Optional[Job]:
        if not re.fullmatch(r"[0-9a-z-]{1,64}", job_id or ""):
            return None
        try:
            data = json.loads(self.record_path(job_id).read_text(encoding="utf-8"))
            return Job.from_dict(data) if isinstance(data, dict) else None
        except (OSError, ValueError, TypeError, RecursionError):
            return None

    def all(self) -> list[Job]:
        """Newest first."""
        if not self.dir.is_dir():
            return []
        jobs = [self.load(p.stem) for p in self.dir.glob("*.json")]
        return sorted((j for j in jobs if j is not None), key=lambda j: j.started, reverse=True)

    def tail(self, job: Job, size: int = TAIL_BYTES) -> str:
        return read_tail(self.log_path(job.id), size)


def read_tail(path: Path, size: int = TAIL_BYTES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            length = f.tell()
            f.seek(max(0, length - size))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


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
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()   # after "pid (comm) ": state, ppid, ...
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


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
        store.dir.mkdir(parents=True, exist_ok=True)
        log = store.log_path(job.id)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with log.open("ab") as out:
            out.write(f"[studio] $ {command}\n[studio] started {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            out.flush()
            stdout = out
            if separate_stdout:
                job.stdout = f"{JOBS}/{job.id}.out"
                stdout = (store.folder / job.stdout).open("wb")
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
            store.save(current)
            try:
                with store.log_path(job_id).open("a", encoding="utf-8") as f:
                    f.write(f"\n[studio] exited with code {code} at {time.strftime('%H:%M:%S')}\n")
            except OSError:
                pass

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
        store.save(job)
        return job

    def jobs(self, store: JobStore) -> list[Job]:
        return [self.refresh(store, job) for job in store.all()]

    def stop(self, store: JobStore, job: Job) -> bool:
        """SIGTERM to the job's process (train saves a checkpoint and exits 143; `--nproc`'s launcher passes it on
        to its ranks). False when it no longer runs."""
        job = self.refresh(store, job)
        if not job.active:
            return False
        try:
            os.kill(job.pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        job.stop_requested = time.time()
        store.save(job)
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
