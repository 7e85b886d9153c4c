"""The run folders of RUNS_DIR, and the state of each: what report/rundata.py reads from the manifest and the lock
(running, finished, interrupted, failed, killed, ...), joined with what the studio launched there (a training that
is still starting, a failed start, an eval or export at work)."""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from steadytune.errors import UserError
from steadytune.report.rundata import (
    FINISHED,
    INTERRUPTED,
    KILLED,
    RUN_MARKERS,
    RUNNING,
    Run,
    load_run,
    run_status,
)
from steadytune.studio.jobs import Job, JobStore, Launcher, last_lines, progress_of
from steadytune.studio.writes import read_bytes_nofollow, real_folder, replace_file
from steadytune.training.run_folder import LOCK, STUDIO_FOLDER, lock_holder_alive, lock_holder_of

NEW, STARTING, STOPPING, FAILED_TO_START = "new", "starting", "stopping", "failed to start"
LAUNCH = "launch.json"        # studio/launch.json: how the studio launched the run (its train arguments)
CONFIG = "config.yaml"        # studio/config.yaml: the config the New run form wrote
MAX_NAME = 100


class NotFound(UserError):
    """A run, job or file the request names is not there (404)."""


class NeedsConfirmation(UserError):
    """An action the user must confirm first (409): `payload` says what, as the page shows it (the grants a run's
    config asks for, the process Stop would signal)."""

    def __init__(self, message: str, payload: dict):
        super().__init__(message)
        self.payload = payload


def check_new_name(name: str) -> str:
    """A new run's folder name: one path component of printable characters (anything else is refused, not
    rewritten); pages escape it like every other string."""
    name = unicodedata.normalize("NFC", name or "").strip()
    if not name:
        raise UserError("name: give the run a name (it becomes its folder in RUNS_DIR)")
    if len(name) > MAX_NAME:
        raise UserError(f"name: at most {MAX_NAME} characters (got {len(name)})")
    if name in (".", "..") or name.startswith(".") or "/" in name or "\\" in name:
        raise UserError("name: a folder name, without '/' or '\\', not starting with '.'")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in name):
        raise UserError("name: control and format characters (newlines, bidirectional marks, ...) are not allowed")
    return name


@dataclass
class RunView:
    """One run folder as the studio shows it."""
    name: str
    folder: Path
    run: Optional[Run]                 # None while nothing the report reads is there yet (a launch starting, or failed)
    status: str
    detail: str
    jobs: list = field(default_factory=list)   # newest first
    launch: Optional[dict] = None      # studio/launch.json
    notes: list = field(default_factory=list)

    @property
    def active(self) -> Optional[Job]:
        return next((j for j in self.jobs if j.active), None)

    @property
    def train_job(self) -> Optional[Job]:
        return next((j for j in self.jobs if j.kind == "train"), None)

    @property
    def training(self) -> bool:
        return self.status in (RUNNING, STARTING, STOPPING)

    @property
    def has_adapter(self) -> bool:
        return (self.folder / "adapter_config.json").is_file() or (self.folder / "config.json").is_file()

    @property
    def config(self) -> dict:
        return self.run.config if self.run else {}

    @property
    def is_classification(self) -> bool:
        return bool(self.config.get("label_names"))

    def can(self) -> dict[str, bool]:
        """Which actions the page offers now."""
        busy = self.active is not None or self.training
        finished = self.status == FINISHED
        checkpoints = any(self.folder.glob("checkpoint-*"))
        return {
            "stop": self.status in (RUNNING, STARTING) and self.lock_or_job_here(),
            "resume": not busy and self.status not in (FINISHED, NEW)
                      and (self.launch is not None or (self.folder / "run_config.yaml").is_file()),
            "resume_possible": checkpoints,
            "rerun": True,
            "eval": not busy and self.has_adapter and self.run is not None,
            "predict": not busy and self.has_adapter,
            "chat": not busy and self.has_adapter and finished,
            "export": not busy and self.has_adapter,
        }

    def lock_or_job_here(self) -> bool:
        job = self.train_job
        if job is not None and job.active:
            return True
        return bool(self.run and self.run.lock and lock_holder_alive(self.run.lock) is True)

    def started(self) -> str:
        manifest = (self.run.manifest or {}) if self.run else {}
        if manifest.get("started"):
            return str(manifest["started"]).replace("T", " ")[:19]
        job = self.train_job
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.started)) if job else ""

    def log_tail(self, job: Optional[Job] = None, lines: int = 12) -> list[str]:
        job = job or (self.jobs[0] if self.jobs else None)
        if job is None:
            return []
        return last_lines(JobStore(self.folder / STUDIO_FOLDER).tail(job), lines)

    def progress(self, job: Job) -> Optional[dict]:
        return progress_of(JobStore(self.folder / STUDIO_FOLDER).tail(job, 4096))


class Runs:
    """RUNS_DIR: which folders are runs, each run's state, new run folders."""

    def __init__(self, root: Path, launcher: Launcher):
        self.root = Path(root)
        self.launcher = launcher
        self._cache: dict[Path, tuple[tuple, Run]] = {}
        self._lock = threading.Lock()

    # --- names -----------------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every folder of RUNS_DIR that a run wrote (or the studio launched one into), newest first."""
        found = []
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return []
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            folder = Path(entry.path)
            if (folder / STUDIO_FOLDER).is_dir() or any((folder / m).exists() for m in RUN_MARKERS):
                found.append((_mtime(folder), entry.name))
        return [name for _, name in sorted(found, reverse=True)]

    def folder(self, name: str) -> Path:
        """The folder of an existing run, by its exact name (nothing in a request becomes a path otherwise)."""
        if name not in self.names():
            raise NotFound(f"no run named {name[:120]!r} in {self.root}")
        return self.root / name

    def new_folder(self, name: str) -> Path:
        name = check_new_name(name)
        folder = self.root / name
        if folder.exists():
            raise UserError(f"name: {self.root / name} already exists; choose another name")
        return folder

    def store(self, folder: Path) -> JobStore:
        return JobStore(folder / STUDIO_FOLDER)

    # --- state -----------------------------------------------------------------------------------------------
    def view(self, name: str) -> RunView:
        return self._view(name, self.folder(name))

    def views(self) -> list[RunView]:
        return [self._view(name, self.root / name) for name in self.names()]

    def _view(self, name: str, folder: Path) -> RunView:
        jobs = self.launcher.jobs(self.store(folder))
        run = self.load(folder, name)
        launch = read_launch(folder)
        view = RunView(name=name, folder=folder, run=run, status="", detail="", jobs=jobs, launch=launch)
        view.status, view.detail = self.status_of(view)
        return view

    def load(self, folder: Path, name: str) -> Optional[Run]:
        """rundata's Run, re-read only when one of the run's files changed (its status is judged again each time:
        it depends on whether the lock's process still runs)."""
        key = signature(folder)
        with self._lock:
            cached = self._cache.get(folder)
        if cached is not None and cached[0] == key:
            run = cached[1]
            run.status, run.status_detail = run_status(run)
            return run
        try:
            run = load_run(folder, name)
        except UserError:
            return None
        with self._lock:
            self._cache[folder] = (key, run)
        return run

    def status_of(self, view: RunView) -> tuple[str, str]:
        job = view.train_job
        run = view.run
        if job is not None and job.active:
            if job.stop_requested:
                return STOPPING, "SIGTERM sent: the run saves a checkpoint at the end of this step, then stops"
            if run is not None and run.status == RUNNING:
                return RUNNING, run.status_detail
            return STARTING, "the training process is starting (loading the model and the data)"
        if run is not None:
            status, detail = run.status, run.status_detail
            if status == KILLED and job is not None and job.returncode is not None:
                detail += f" (exit code {job.returncode})"
            if job is not None and job.state in ("failed", "ended") and job.started > _manifest_updated(run):
                view.notes.append(f"the last launch ({job.command}) ended with "
                                  + (f"exit code {job.returncode}" if job.returncode is not None else "no exit code known")
                                  + ": " + (_last_error(view.log_tail(job, 40)) or "see its log"))
            return status, detail
        if job is not None:
            if job.state == "stopped":
                return INTERRUPTED, "stopped before its first step"
            why = _last_error(view.log_tail(job, 40))
            return FAILED_TO_START, why or (f"exit code {job.returncode}" if job.returncode is not None else "see the log")
        return NEW, "not launched yet"

    # --- what a run is doing, for the pages -------------------------------------------------------------------
    def busy_reason(self, view: RunView) -> Optional[str]:
        """Why nothing else may start in this run folder now, or None."""
        if view.active is not None:
            return f"{view.active.kind} is running there ({view.active.command})"
        holder = lock_holder_of(view.folder)
        if holder is not None:
            return f"a training holds it (process {holder.get('pid')} on {holder.get('host')})"
        return None


def signature(folder: Path) -> tuple:
    """What changes when a run writes anything the report reads."""
    out = []
    for name in (*RUN_MARKERS, LOCK, "environment.json", "data_stats.json", "predictions.jsonl",
                 "errors_to_review.jsonl", "generated_predictions.jsonl", "demo_results.json"):
        try:
            st = (folder / name).stat()
            out.append((name, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((name, None, None))
    return tuple(out)


def read_launch(folder: Path) -> Optional[dict]:
    """studio/launch.json, for what it shows (the command the studio ran, its --nproc); never run as it is."""
    try:
        data = json.loads(read_bytes_nofollow(folder / STUDIO_FOLDER / LAUNCH).decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("argv"), list) \
            or not all(isinstance(a, str) for a in data["argv"]):
        return None
    return data


def write_launch(folder: Path, launch: dict) -> None:
    replace_file(real_folder(folder, STUDIO_FOLDER) / LAUNCH,
                 json.dumps(launch, indent=2, ensure_ascii=False, default=str).encode("utf-8"))


def launched_nproc(launch: Optional[dict]) -> Optional[str]:
    """The --nproc of the studio's launch record (a number or auto, else None): all Resume takes from the record,
    which may come from anyone; the command itself is made again."""
    argv = (launch or {}).get("argv") or []
    for flag, value in zip(argv, argv[1:]):
        if flag == "--nproc" and isinstance(value, str) and (value == "auto" or value.isdigit() and 0 < int(value) <= 1024):
            return value
    return None


def _manifest_updated(run: Run) -> float:
    stamp = (run.manifest or {}).get("updated") or (run.manifest or {}).get("started")
    try:
        return datetime.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return run.last_write or 0.0


def _last_error(lines: list[str]) -> str:
    """The line that says what went wrong: `error: ...` (steadytune's own), else the last line of a traceback."""
    for line in reversed(lines):
        if line.startswith("error:") or line.startswith("Error:"):
            return line[:400]
    for line in reversed(lines):
        if line and not line.startswith("[studio]") and ("Error" in line or "error" in line):
            return line[:400]
    return ""


def _mtime(folder: Path) -> float:
    try:
        return max(folder.stat().st_mtime, (folder / STUDIO_FOLDER).stat().st_mtime
                   if (folder / STUDIO_FOLDER).exists() else 0)
    except OSError:
        return 0.0
