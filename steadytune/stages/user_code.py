"""The user's own code that stage grpo runs: reward functions (stages/rewards.py) and tools (stages/tool_env.py).

Both are named in the user's config or command line as `module:function` (imported with the current folder on the
path, as `python -m` would) or `path/to/file.py:function`; tools may also name a whole module or file, whose public
functions are the tools. Never from a dataset, an archive or a run folder: training/folder_config.py refuses
those entries in a run folder's files before anything here imports them (docs/security.md).

A call runs in the training process's main thread (as TRL calls reward functions and tools: libraries they use, such
as math_verify, set alarms that work only there) under a `deadline`: past it the call is interrupted, and one that
swallows the interrupt ends the process GIVE_UP_S later.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import signal
import sys
import threading
import time
import types
from pathlib import Path
from typing import Callable, Optional

from steadytune.config import ConfigError

DEADLINE_SIGNAL = getattr(signal, "SIGUSR2", None)
GIVE_UP_S = 30.0   # after the deadline, how long a function that swallows the interrupt may go on before the process exits


def load_module(where: str, key: str, entry: str) -> types.ModuleType:
    """A module by name (the current folder on the path) or a file path; ConfigError naming `key` and `entry`."""
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"{key}: {entry!r}: no file {path}")
            module_spec = importlib.util.spec_from_file_location(f"steadytune_{key}_{path.stem}", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            return module
        cwd = str(Path.cwd())
        added = cwd not in sys.path
        if added:
            sys.path.insert(0, cwd)
        try:
            return importlib.import_module(where)
        finally:
            if added:
                sys.path.remove(cwd)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module failed to import: say which and why, in one line
        raise ConfigError(f"{key}: {entry!r}: importing {where} failed: {type(e).__name__}: {e}") from None


def find_module(where: str, key: str, entry: str) -> None:
    """That `where` names a file or an importable module, without running its code (load_module runs it, once, when
    the stage's objective is made after the model loads): a mistyped name is said before any weights load. A dotted
    name's parent packages are imported to find it, as Python's import system must."""
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"{key}: {entry!r}: no file {path}")
        return
    cwd = str(Path.cwd())
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(where)
    except Exception as e:  # noqa: BLE001 - a parent package failed to import: said as load_module says it
        raise ConfigError(f"{key}: {entry!r}: importing {where} failed: {type(e).__name__}: {e}") from None
    finally:
        if added:
            sys.path.remove(cwd)
    if found is None:
        raise ConfigError(f"{key}: {entry!r}: importing {where} failed: ModuleNotFoundError: No module named "
                          f"{where!r}")


def find_user_entry(spec: str, key: str) -> None:
    """find_module for a `module:function` entry (its function is looked up when the module is imported)."""
    where, _, attribute = str(spec).rpartition(":")
    if not where or not attribute:
        raise ConfigError(f"{key}: {spec!r} is not module:function")
    find_module(where, key, spec)


def load_user_function(spec: str, key: str) -> Callable:
    """`module:function` or `path/to/file.py:function` -> the callable; a ConfigError naming `key` and the entry."""
    where, _, attribute = str(spec).rpartition(":")
    if not where or not attribute:
        raise ConfigError(f"{key}: {spec!r} is not module:function")
    function = load_module(where, key, spec)
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise ConfigError(f"{key}: {spec!r}: {where} has no {attribute}")
    if not callable(function):
        raise ConfigError(f"{key}: {spec!r}: {attribute} is not callable")
    return function


def public_functions(module: types.ModuleType) -> dict[str, Callable]:
    """The functions a module defines itself (not imported ones), whose names do not start with an underscore."""
    return {name: f for name, f in vars(module).items()
            if inspect.isfunction(f) and not name.startswith("_") and f.__module__ == module.__name__}


class UserCodeTimeout(BaseException):
    """Raised inside the user's function when it runs past its deadline (a BaseException: `except Exception` in the
    function does not swallow it)."""


@contextlib.contextmanager
def deadline(seconds: Optional[float], what: str = "a reward function", key: str = "reward_timeout"):
    """Raise UserCodeTimeout in the main thread's code if the block runs past `seconds`. The call stays in the main
    thread; a watcher thread sends DEADLINE_SIGNAL to it at the deadline (a real signal, so a sleep or a blocking read
    returns), again each second while the block goes on (a function that swallows the exception), and after
    GIVE_UP_S more says so (naming `what` and `key`) and ends the process. Elsewhere (another thread, no such signal):
    no limit."""
    if not seconds or DEADLINE_SIGNAL is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    expired, done = threading.Event(), threading.Event()

    def interrupt(signum, frame):
        if expired.is_set() and not done.is_set():
            raise UserCodeTimeout()

    previous = signal.signal(DEADLINE_SIGNAL, interrupt)
    main = threading.main_thread().ident

    def watch():
        if done.wait(seconds):
            return
        expired.set()
        give_up = time.monotonic() + GIVE_UP_S
        while not done.is_set():
            signal.pthread_kill(main, DEADLINE_SIGNAL)
            if time.monotonic() > give_up:
                print(f"error: {what} ran {seconds:g} s past {key} and did not stop when interrupted; ending the "
                      "process (its last checkpoint is kept)", file=sys.stderr, flush=True)
                os._exit(1)
            done.wait(1.0)

    watcher = threading.Thread(target=watch, name="user-code-deadline", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        signal.signal(DEADLINE_SIGNAL, previous)   # after the watcher ended: no signal of ours arrives later
