"""Errors that reach the user as one clear line and a non-zero exit (no traceback)."""

from __future__ import annotations

import errno
import reprlib
import signal
from typing import Any


class UserError(Exception):
    """Bad input or an impossible request; the message names the file, line or key at fault."""

    exit_code = 1


class DataError(UserError):
    """A dataset file or row is unusable."""


class CheckpointError(UserError):
    """A checkpoint folder is truncated, corrupt, or belongs to another model."""


class ConfigError(UserError, ValueError):
    """A problem with the user's configuration; the message names the key (and file) at fault."""


# How an error message quotes a value the user gave: short, whatever the value holds.
MAX_SHOWN_VALUE = 200          # characters of a value quoted in an error message
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = MAX_SHOWN_VALUE
_SHORT_REPR.maxlist = _SHORT_REPR.maxtuple = _SHORT_REPR.maxdict = _SHORT_REPR.maxset = 20


def show_value(value: Any, limit: int = MAX_SHOWN_VALUE) -> str:
    """repr(value) for an error message, at most `limit` characters, in time bounded by `limit` (reprlib looks at a
    few items of each level only, so a value with a billion items, or nested 10,000 deep, costs microseconds)."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def size_text(n: float, decimal: bool = False) -> str:
    """A byte count as a message writes it: 512 B, 3.2 MiB, 1.5 GiB (binary units, as free disk and memory are
    quoted); `decimal`: 3.4 MB, 1.6 GB (as model downloads and file managers quote a file's size)."""
    step, units = (1000, ("B", "KB", "MB", "GB")) if decimal else (1024, ("B", "KiB", "MiB", "GiB"))
    for unit in units:
        if n < step or unit == units[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= step
    return f"{n:.1f} {units[-1]}"


# Ctrl-C and SIGTERM end a run with 128 + the signal number, the shells' convention (training/stopping.py).
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class RunInterrupted(UserError):
    """A signal arrived; `exit_code` is 128 + its number."""

    def __init__(self, signum: int, message: str = ""):
        super().__init__(message or f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = EXIT_CODES.get(signum, 128 + signum)


def describe_os_error(e: OSError, where: str) -> str:
    """An OSError as one line naming the file and what to do (disk full, permission, read-only)."""
    target = e.filename or where
    if e.errno == errno.ENOSPC:
        return f"disk full while writing {target} ({where}); free space there, or choose another folder"
    if e.errno == errno.EDQUOT:
        return f"disk quota exceeded while writing {target} ({where})"
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied: {target} ({where})"
    if e.errno == errno.EROFS:
        return f"read-only file system: {target} ({where})"
    return f"{where}: {e.strerror or e} ({target})"
