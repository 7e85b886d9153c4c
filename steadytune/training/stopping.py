"""Ctrl-C and SIGTERM (what schedulers send before they kill a job) end a run cleanly.

The first signal asks the loop to stop at the next step boundary: it saves a checkpoint there and exits with a
message and a distinct code (130 for SIGINT, 143 for SIGTERM: 128 + the signal number, the shells' convention).
A second signal exits at once. Before the loop starts there is nothing to save, so a signal stops the set-up
immediately (the run folder is then put back as it was).
"""

from __future__ import annotations

import signal
import sys

from steadytune.errors import EXIT_CODES, RunInterrupted


class StopRequests:
    """Installed for the length of a run; `requested` is the first signal's number once one arrived."""

    def __init__(self):
        self.requested: int | None = None
        self.in_loop = False
        self._previous: dict[int, object] = {}

    def install(self) -> "StopRequests":
        import threading
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only; a run started from another thread keeps the defaults
        for signum in EXIT_CODES:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None or not self.in_loop:
            self.restore()
            if self.requested is not None:
                print(f"\n{name} again: stopping now, without saving", file=sys.stderr, flush=True)
            raise RunInterrupted(signum)
        self.requested = signum
        print(f"\n{name}: saving a checkpoint at the end of this step, then stopping "
              f"(send it again to stop at once)", file=sys.stderr, flush=True)


class RunPruned(Exception):
    """An evaluation hook (`run_training(on_evaluate=...)`: the pruner of `steadytune tune`) asked the run to stop:
    a search's verdict on an unpromising trial, not a failure. The run ends where it is, without a checkpoint."""
