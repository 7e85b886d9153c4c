"""The run's `output_dir`: what is ours in it, who is using it, and how a run may start there.

Three promises, each kept here and nowhere else:
- **Nothing of the user's is replaced.** A manifest (`.steadytune-run.json`) lists every entry a steadytune run
  wrote. Only those may be replaced or removed (`overwrite_output_dir`, reusing an unfinished run's folder). An entry
  this run would write that is already there and is not in the manifest (a user's `tokenizer.json`, their own
  `checkpoint-7/`) makes the run refuse, naming it.
- **One run per folder.** A lock file (`.steadytune.lock`: pid, host, start time) is taken with O_EXCL; a second run
  is refused naming the holder; the lock of a process that no longer exists on this host is taken over, with a
  message, and so is the lock of an earlier attempt of the same elastic launch (torch's agent stopped it before the
  restart; it may have run on another node).
- **A killed run's files are its own.** A run lists the files it is about to write (metrics.jsonl) before writing
  them; and a run killed between writing an entry and listing it (SIGKILL mid-checkpoint) leaves entries the
  manifest does not name: when the next run takes over that run's lock, the entries with the names a run writes,
  modified after the killed run started, are counted as the killed run's (said in one line). A user's file from
  before it started stays the user's.
- **A failed start leaves the folder as it found it.** Until the first optimizer step, everything the run created
  is removed again on an error (the folder too, if the run made it).

The manifest's `status` (running / finished / failed / interrupted / aborted) also tells `report` and a later run
what happened: `running` with a dead lock holder means the run was killed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from steadytune.config import load_yaml_file
from steadytune.errors import UserError, describe_os_error

MANIFEST = ".steadytune-run.json"
LOCK = ".steadytune.lock"
# Each node's launcher tees its processes' output into output_dir/nodes/<node>/ from before the run claims the folder
# to after it ends (distributed/launch.py): the job's own, never foreign, never removed by a run.
NODE_LOGS = "nodes"
# `steadytune studio` keeps what it launches for a run in output_dir/studio/ (the config it wrote, the processes' logs,
# exports), made before the run claims the folder: like NODE_LOGS, never foreign, never removed by a run.
STUDIO_FOLDER = "studio"
# Set by `steadytune train --rdzv-id` (distributed/launch.py) for its processes: the elastic job's id and when this
# node's launcher started, which tell an earlier attempt of the same launch from an older run of the same job id.
ELASTIC_JOB_ENV, LAUNCHED_AT_ENV = "STEADYTUNE_ELASTIC_JOB", "STEADYTUNE_LAUNCHED_AT"
CLOCK_SKEW_S = 5.0   # between the nodes' clocks
# The manifest status of a folder holding only `eval --zero-shot`'s scores of the base model (no run trained there
# yet): training starts there, keeping them (the run's own evaluation may replace them later).
BASE_EVALUATED = "base model evaluated"

# Names a steadytune run or evaluation writes into output_dir (a foreign entry with one of these names would be
# replaced, so it makes the run refuse). Tokenizer and model files vary by family, hence the patterns.
OUTPUT_NAME = re.compile(
    r"^(run_config\.yaml|metrics\.jsonl|environment\.json|train_results\.json|training_loss\.png|report\.html|"
    r"README\.md|base_model\.json|adapter_model\.safetensors|adapter_config\.json|adapter_model\.bin|"
    r"model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|pytorch_model.*\.bin|config\.json|"
    r"generation_config\.json|tokenizer.*|special_tokens_map\.json|chat_template\.(jinja|json)|vocab\.(json|txt)|"
    r"merges\.txt|added_tokens\.json|spiece\.model|checkpoint-\d+(\.tmp)?|eval_results\.json|predictions\.jsonl|"
    r"generated_predictions\.jsonl|completions\.jsonl|confusion_matrix\.(json|png)|errors_to_review\.jsonl|demo_results\.json|"
    r"hang-rank-\d+\.txt|data_stats\.json|runs|logs)$")
CHECKPOINT_NAME = re.compile(r"^checkpoint-\d+$")
PARTIAL_CHECKPOINT = re.compile(r"^checkpoint-\d+\.tmp$")


@dataclass
class StartPlan:
    """How a run starts in its folder, decided before anything is loaded."""
    mode: str                      # fresh | overwrite | reuse | resume
    message: str = ""              # said at start when not fresh
    resume_candidates: list[Path] = field(default_factory=list)  # newest first; the loop falls back down the list


class RunFolder:
    """output_dir for one run: claim (checks, lock, plan), record what the run wrote, release."""

    def __init__(self, path: Path, main_process: bool = True):
        self.path = Path(path)
        self.main = main_process
        self.created = False          # the run made the folder itself
        self.present_at_start: set[str] = set()
        self.foreign: set[str] = set()
        self.manifest: dict = {}
        self._locked = False
        self.started_steps = False    # set once the first optimizer step is done: no clean-up after that
        self.expected: set[str] = set()  # entries the run is about to write, listed before they exist
        self.dead_holder: dict = {}   # the lock of a killed run that this one took over

    # ------------------------------------------------------------------ claiming

    def claim(self) -> None:
        """Make sure the folder is usable, create it, take the lock, read the manifest."""
        if not self.main:
            return
        check_writable_location(self.path, "output_dir")
        if not self.path.exists():
            try:
                self.path.mkdir(parents=True)
            except OSError as e:
                raise UserError(describe_os_error(e, f"output_dir {self.path}")) from None
            self.created = True
        self._lock()
        self.manifest = read_manifest(self.path) or adopt_legacy_run(self.path)
        self.present_at_start = {p.name for p in self.path.iterdir()} - {LOCK, NODE_LOGS, STUDIO_FOLDER}
        refuse_links_written(self.path, [n for n in self.present_at_start
                                         if OUTPUT_NAME.match(n) and not CHECKPOINT_NAME.match(n)])
        self._adopt_killed_runs_entries()
        ours = set(self.manifest.get("files", []))
        if self.manifest:
            # A run killed while saving leaves checkpoint-N.tmp, written after the manifest last listed the folder:
            # in a folder a steadytune run owns, that half-written checkpoint is its own leftover, of no use: removed.
            for name in sorted(n for n in self.present_at_start if PARTIAL_CHECKPOINT.match(n)):
                remove_path(self.path / name)
                self.present_at_start.discard(name)
                print(f"output_dir {self.path}: removed {name}, a checkpoint the killed run had not finished writing")
        self.foreign = {name for name in self.present_at_start if name not in ours and name != MANIFEST}

    def _adopt_killed_runs_entries(self) -> None:
        """Entries a killed run wrote after it last listed its files: ours, when this run took over its lock."""
        if not self.dead_holder or self.manifest.get("status") != "running":
            return
        try:
            since = datetime.strptime(str(self.dead_holder.get("started")), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            return  # a lock without a readable start: nothing can be told apart, nothing adopted
        listed = set(self.manifest.get("files", []))
        adopted = sorted(name for name in self.present_at_start - listed
                         if OUTPUT_NAME.match(name) and _modified(self.path / name) >= since - 1)
        if adopted:
            self.manifest["files"] = sorted(listed | set(adopted))
            print(f"output_dir {self.path}: {', '.join(adopted)} written by the killed run (process "
                  f"{self.dead_holder.get('pid')}) after it last listed its files: counted as that run's", flush=True)

    def plan_start(self, overwrite: bool, resume: object, checkpoints_of) -> StartPlan:
        """Decide fresh / overwrite / reuse / resume from what is in the folder and the two keys.

        resume: the resume_from_checkpoint key (None = unset, False, True, or a path). checkpoints_of(folder) lists a
        folder's complete checkpoints, oldest first. Unset, an unfinished run's folder with checkpoints is continued
        (LLaMA-Factory does the same); False never resumes."""
        if not self.main:
            return StartPlan("fresh")
        ours = (set(self.manifest.get("files", [])) - {MANIFEST}) & self.present_at_start
        status = self.manifest.get("status")
        checkpoints = [p for p in checkpoints_of(self.path) if p.name not in self.foreign]
        collisions = sorted(n for n in self.foreign if OUTPUT_NAME.match(n))
        unfinished = bool(ours) and status != "finished"

        if resume not in (None, True, False):
            target = Path(resume)
            if target.resolve().parent != self.path.resolve() and (ours or self.foreign):
                # Another folder's checkpoint: this folder gets the same checks as a fresh start.
                if collisions:
                    raise UserError(self._collision_message(collisions))
                if not overwrite:
                    raise UserError(f"output_dir {self.path} is not empty ({self._describe(ours, status)}) and the "
                                    f"checkpoint to resume ({target}) is in another folder; choose an empty output_dir, "
                                    "or set overwrite_output_dir=true to replace this folder's run files")
                self._clear(ours)
            elif collisions:
                raise UserError(self._collision_message(collisions))
            return StartPlan("resume", f"resuming from {target}", [target])

        if not ours and not self.foreign:
            if resume is True:
                return StartPlan("fresh", f"resume_from_checkpoint: no checkpoint in {self.path} yet: starting fresh")
            return StartPlan("fresh")
        if collisions:
            raise UserError(self._collision_message(collisions))
        if checkpoints and (resume is True or (resume is None and unfinished and not overwrite)):
            why = ("resume_from_checkpoint: true" if resume is True else
                   f"the run in {self.path} did not finish (status: {status}); continuing it, as LLaMA-Factory does "
                   "(overwrite_output_dir=true starts over, resume_from_checkpoint=false refuses)")
            return StartPlan("resume", f"resuming from {checkpoints[-1].name}: {why}", list(reversed(checkpoints)))
        if overwrite:
            self._clear(ours)
            kept = sorted(self.foreign)
            return StartPlan("overwrite", "overwrite_output_dir: the earlier run's files were replaced"
                             + (f"; kept what no run wrote: {', '.join(kept)}" if kept else ""))
        if status == BASE_EVALUATED and not checkpoints:
            return StartPlan("reuse", f"output_dir {self.path} holds eval --zero-shot's scores of the base model: "
                             "kept; training there")
        if unfinished and not checkpoints:
            # Only a failed or killed start's own files: nothing worth keeping, and no dead end.
            self._clear(ours)
            return StartPlan("reuse", f"no checkpoint in {self.path} yet (the earlier run's status: {status}): "
                             "starting fresh there")
        hint = " or resume_from_checkpoint=true to continue it" if checkpoints else ""
        raise UserError(f"output_dir {self.path} is not empty ({self._describe(ours, status)}); choose another "
                        f"output_dir, or set overwrite_output_dir=true to replace this run's files{hint}")

    def _collision_message(self, collisions: list[str]) -> str:
        shown = ", ".join(collisions[:8]) + (f" and {len(collisions) - 8} more" if len(collisions) > 8 else "")
        return (f"output_dir {self.path} holds {shown}, which this run would write but no steadytune run wrote there; "
                "they are left untouched: move them away or choose another output_dir")

    def _describe(self, ours: set[str], status) -> str:
        parts = []
        if ours:
            parts.append(f"a steadytune run's files, status {status or 'unknown'}")
        if self.foreign:
            parts.append(f"{len(self.foreign)} other file(s): {', '.join(sorted(self.foreign)[:4])}")
        return "; ".join(parts) or "files"

    def _clear(self, names: set[str]) -> None:
        """Remove entries an earlier steadytune run wrote (never anything else)."""
        for name in sorted(names):
            remove_path(self.path / name)
        self.present_at_start -= names

    # ------------------------------------------------------------------ recording

    def record(self, status: str | None = None, **fields) -> None:
        """Write the manifest: every entry now in the folder that was not foreign at the start is this run's."""
        if not self.main or not self.path.is_dir():
            return
        present = {p.name for p in self.path.iterdir() if p.name not in self.foreign and p.name != LOCK}
        names = sorted(present | (self.expected - self.foreign))
        self.manifest.update(fields)
        self.manifest["files"] = names
        if status is not None:
            self.manifest["status"] = status
        self.manifest.setdefault("started", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        self.manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_json_atomic(self.path / MANIFEST, self.manifest)

    def expect(self, names: list[str]) -> None:
        """Entries the run is about to write: listed in the manifest from the next record() on, before they exist,
        so a run killed right after writing one still finds it listed as its own."""
        self.expected |= {n for n in names if n not in self.foreign}

    def undo_failed_start(self) -> None:
        """Remove what this run created before its first step (the folder itself, if it made it)."""
        if not self.main or self.started_steps or not self.path.is_dir():
            return
        for entry in self.path.iterdir():
            if entry.name not in self.present_at_start and entry.name not in (LOCK, NODE_LOGS, STUDIO_FOLDER):
                remove_path(entry)
        if self.manifest.get("files") and MANIFEST in self.present_at_start:
            pass  # the earlier run's manifest stays as it was (it was rewritten only after the first step)
        self.release()
        if self.created:
            try:
                self.path.rmdir()
            except OSError:
                pass

    # ------------------------------------------------------------------ the lock

    def _lock(self) -> None:
        lock = self.path / LOCK
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "process_start": process_start_ticks(os.getpid()), **elastic_attempt()}
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read_lock(lock)
                if holder.get("pid") == os.getpid() and holder.get("host") == me["host"]:
                    self._locked = True   # this process already holds it (a restart within one run)
                    return
                if earlier_attempt(holder, me):
                    print(f"output_dir {self.path}: taking over the lock of attempt {holder.get('attempt')} of this "
                          f"job (process {holder.get('pid')} on {holder.get('host')}), stopped before this restart",
                          flush=True)
                    self.dead_holder = holder
                    lock.unlink(missing_ok=True)
                    continue
                if holder.get("host") == me["host"] and lock_holder_alive(holder) is False:
                    print(f"output_dir {self.path}: taking over the lock of process {holder.get('pid')}, which no "
                          "longer runs (it was killed or crashed)", flush=True)
                    self.dead_holder = holder
                    lock.unlink(missing_ok=True)
                    continue
                where = f"process {holder.get('pid')} on {holder.get('host')}" if holder else "another process"
                raise UserError(f"output_dir {self.path} is in use by {where} (since {holder.get('started', '?')}; "
                                f"lock file {lock}); wait for it, choose another output_dir, or delete the lock "
                                "file if that run is dead")
            except OSError as e:
                raise UserError(describe_os_error(e, f"output_dir {self.path}")) from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self._locked = True
            return

    def release(self) -> None:
        if self._locked:
            (self.path / LOCK).unlink(missing_ok=True)
            self._locked = False


def elastic_attempt() -> dict:
    """{"job", "attempt", "t"} of a process of an elastic launch (ELASTIC_JOB_ENV; the restart count torch's agent
    keeps), else {}."""
    job = os.environ.get(ELASTIC_JOB_ENV)
    if not job:
        return {}
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return {"job": job, "attempt": int(attempt) if attempt.isdigit() else 0, "t": time.time()}


def launched_at() -> float | None:
    try:
        return float(os.environ[LAUNCHED_AT_ENV])
    except (KeyError, ValueError):
        return None


def earlier_attempt(holder: dict, me: dict) -> bool:
    """The lock's holder is an earlier attempt of this elastic launch (the same job id, taken after this node's
    launcher started): the agents stopped every process of that attempt before this one began, on whichever node it
    ran. Not a run of the same job id launched before (its lock is judged as any other)."""
    since, taken = launched_at(), holder.get("t")
    return ("job" in me and holder.get("job") == me["job"] and since is not None
            and isinstance(taken, (int, float)) and taken >= since - CLOCK_SKEW_S
            and (holder.get("pid"), holder.get("host")) != (os.getpid(), me.get("host")))


# ---------------------------------------------------------------------------------------------------------
# Helpers shared with `eval` and others that write into a folder
# ---------------------------------------------------------------------------------------------------------

def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def adopt_legacy_run(folder: Path) -> dict:
    """A run folder written before manifests existed: its run_config.yaml (with steadytune's `decisions`) marks it
    as a steadytune run, so the entries a run writes count as that run's."""
    config = folder / "run_config.yaml"
    if not config.is_file():
        return {}
    try:
        data = load_yaml_file(config, unique_keys=False)
    except Exception:  # an unreadable file is not a run's: nothing adopted
        return {}
    if not isinstance(data, dict) or "decisions" not in data:
        return {}
    done = (folder / "train_results.json").is_file()
    return {"files": sorted(p.name for p in folder.iterdir() if OUTPUT_NAME.match(p.name)),
            "status": "finished" if done else "interrupted", "adopted": True}


def claim_outputs(folder: Path, names: list[str], overwrite: bool, what: str) -> None:
    """Before `what` writes `names` into `folder`: refuse when a live process of another command (a training) holds
    the folder's lock, or when one of `names` exists and no steadytune run wrote it there, unless `overwrite`.
    Afterwards call record_outputs."""
    folder = Path(folder)
    check_writable_location(folder, "--output-dir")
    refuse_if_in_use(folder, what)
    refuse_links_written(folder, [*names, MANIFEST])
    ours = set(read_manifest(folder).get("files", []))
    foreign = [n for n in names if (folder / n).exists() and n not in ours]
    if foreign and not overwrite:
        raise UserError(f"{what}: {folder} already holds {', '.join(foreign)}, which steadytune did not write; "
                        "choose another --output-dir, or pass --overwrite to replace them")


def refuse_if_in_use(folder: Path, what: str) -> None:
    """UserError naming the holder when another live process holds `folder`'s lock (a training writing there); a
    lock held on another host counts as live (it cannot be checked from here), one of a dead process does not."""
    holder = lock_holder_of(folder)
    if holder is not None:
        lock = Path(folder) / LOCK
        who = f"process {holder.get('pid')} on {holder.get('host')}" if holder else "another process"
        raise UserError(f"{what}: {folder} is in use by {who} (since {holder.get('started', '?')}; lock file {lock}); "
                        "wait for that run to end, or choose another --output-dir")


def lock_holder_of(folder: Path) -> dict | None:
    """The lock's holder when a process other than this one holds `folder`'s lock and may still run, else None."""
    lock = Path(folder) / LOCK
    if not lock.is_file():
        return None
    holder = _read_lock(lock)
    if not holder:
        return {}  # being written, or unreadable: in use, as RunFolder's own lock treats it
    if holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        return None
    return holder if lock_holder_alive(holder) is not False else None


def record_outputs(folder: Path, names: list[str], status: str = "finished") -> None:
    """Add entries to a folder's manifest (creating it), so later steadytune commands may replace them. Not while
    another live process holds the folder's lock: the manifest is that run's to write (a report written into a
    running run's folder is listed by the run itself when it ends). `status`: a new manifest's (BASE_EVALUATED for
    `eval --zero-shot` before any training)."""
    folder = Path(folder)
    if lock_holder_of(folder) is not None:
        return
    manifest = read_manifest(folder)
    files = set(manifest.get("files", [])) | {n for n in names if (folder / n).exists()}
    manifest["files"] = sorted(files)
    manifest.setdefault("status", status)
    write_json_atomic(folder / MANIFEST, manifest)


def refuse_links_written(folder: Path, names: list[str]) -> None:
    """A run folder's entry that a command would write (or append to) and that is a symbolic link is refused, naming
    it: the write would land wherever the link points (a folder from elsewhere may hold `metrics.jsonl ->
    ~/.bashrc`). Checkpoints are the exception, handled where they are read and rotated (training/checkpoint.py): a
    user may move one to another disk and leave a link."""
    folder = Path(folder)
    for name in sorted({*names, MANIFEST, MANIFEST + ".tmp"}):
        path = folder / name
        if path.is_symlink():
            raise UserError(f"{path} is a symbolic link (to {os.readlink(path)}); steadytune does not write through "
                            f"links in a run folder: remove it, or choose another output_dir")


def process_start_ticks(pid: int) -> int | None:
    """The start time of a live process in clock ticks after boot (Linux: /proc/PID/stat field 22), None when it does
    not run, is a zombie, or this is not Linux. With the pid, it names one process: a later one that gets the same
    pid starts at another tick."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()   # after "pid (comm) ": state, ppid, ...
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    try:
        return int(rest[19])
    except ValueError:
        return None


def check_writable_location(path: Path, key: str) -> None:
    """One-line errors for a folder that cannot be a run folder: a file, or not writable."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{key} {path} is a file, not a folder; choose a folder path")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{key} {path}: {probe} is a file, so the folder cannot be created there")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{key} {path}: permission denied ({probe} is not writable by this user)")


def write_json_atomic(path: Path, payload: dict) -> None:
    """`path` written whole (a temporary file, then a rename, which replaces a link at `path` rather than its target);
    never through a link planted at the temporary name."""
    tmp = path.with_name(path.name + ".tmp")
    if tmp.is_symlink():
        tmp.unlink()
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def _modified(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _read_lock(lock: Path) -> dict:
    try:
        data = json.loads(lock.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, RecursionError):
        return {}


def lock_holder_alive(holder: dict) -> bool | None:
    """Whether the process named in a run folder's lock still runs: True/False when it can be checked from this
    machine, None when it runs on another host. The one liveness test for the lock (`train` taking over a dead run's
    lock, `report` telling a running run from a killed one)."""
    pid, host = holder.get("pid"), holder.get("host")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
