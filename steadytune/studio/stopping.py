"""Which process Stop may signal.

A process this studio started is stopped through its own handle (it cannot be another process: the studio has not
reaped it). Any other pid comes from a file in the run folder (the training's lock, another studio's job record), and
the folder may come from anyone: a pid from a file could name the user's editor, or init when the studio runs as
root. Such a pid is signalled only when every check holds and the user confirmed that process in this request:
- it runs on this machine (the record's host is this one's name), as this user;
- it is a steadytune training: its command line runs `steadytune train` (`python -m steadytune ... train`);
- it is the process the record means: its start time is the one recorded (job records, and locks written since
  issue 54, carry the kernel's start tick), or, for an older lock that has only a start date, it started at most
  MAX_LOCK_DELAY_S before that date and not after it (a training takes its lock while it starts);
- the request carries `confirm_pid` equal to it, after the page showed the pid, its command line and start.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from steadytune.errors import UserError
from steadytune.studio.runs import NeedsConfirmation
from steadytune.training.run_folder import process_start_ticks

MAX_LOCK_DELAY_S = 3600   # a training's lock is written within this long of its process starting (model loading)
CLOCK_SLACK_S = 2.0


@dataclass
class Target:
    pid: int
    command: str          # its command line, as /proc shows it (cut)
    started: float        # when it started (epoch seconds)
    source: str           # which file named it

    def shown(self) -> dict:
        return {"pid": self.pid, "command": self.command, "source": self.source,
                "started": datetime.datetime.fromtimestamp(self.started).strftime("%Y-%m-%d %H:%M:%S")}


def process_argv(pid: int) -> Optional[list[str]]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def is_steadytune_train(argv: list[str]) -> bool:
    """`steadytune train ...`, `python -m steadytune train ...`, with any options between."""
    for i, word in enumerate(argv):
        runs_steadytune = (Path(word).name == "steadytune" and i == 0 or
                           word in ("steadytune", "steadytune.__main__") and i > 0 and argv[i - 1] == "-m")
        if runs_steadytune:
            return "train" in argv[i + 1:]
    return False


def started_at(ticks: int) -> Optional[float]:
    """A start tick as epoch seconds (boot time from /proc/stat)."""
    try:
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def verified_target(pid, host, recorded_ticks, recorded_date, source: str) -> Target:
    """The process a record names, if every check of the module docstring holds; UserError saying which fails."""
    what = f"process {pid!r} named by {source}"
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise UserError(f"{what}: not a process the studio may stop")
    if host and host != socket.gethostname():
        raise UserError(f"{what} runs on {host}, not on this machine: stop it there")
    ticks = process_start_ticks(pid)
    argv = process_argv(pid)
    if ticks is None or argv is None:
        raise UserError(f"{what}: no such process on this machine (it ended, or this system cannot tell)")
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        raise UserError(f"{what}: no such process on this machine") from None
    if owner != os.getuid():
        raise UserError(f"{what} belongs to another user; the studio stops only its user's trainings")
    if not is_steadytune_train(argv):
        raise UserError(f"{what} is not a steadytune training ({' '.join(argv)[:120]}); the studio stops nothing else")
    started = started_at(ticks)
    if isinstance(recorded_ticks, int) and not isinstance(recorded_ticks, bool):
        if recorded_ticks != ticks:
            raise UserError(f"{what} is not the process that record means (it started at another time: the pid was "
                            "reused)")
    else:
        lock_time = _parse_date(recorded_date)
        if started is None or lock_time is None or not (
                started - CLOCK_SLACK_S <= lock_time <= started + MAX_LOCK_DELAY_S):
            raise UserError(f"{what} is not the process that record means (its start does not match the record's "
                            f"{recorded_date!r})")
    return Target(pid, " ".join(argv)[:300], started or 0.0, source)


def _parse_date(text) -> Optional[float]:
    try:
        return datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def stop_confirmed(target: Target, confirmed_pid) -> None:
    """SIGTERM to `target` when the request confirmed that pid; NeedsConfirmation (what the page shows) otherwise."""
    if confirmed_pid != target.pid:
        raise NeedsConfirmation(f"stop: confirm process {target.pid} ({target.command[:120]}), named by "
                                f"{target.source}: the studio did not start it", {"confirm": target.shown()})
    try:
        os.kill(target.pid, signal.SIGTERM)
    except ProcessLookupError:
        raise UserError(f"process {target.pid} ended before the stop reached it") from None
