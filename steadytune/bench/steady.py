"""When a throughput measurement can stop: after a minimum of steps and tokens, once the mean rate of the last
windows no longer moves (or at a time cap, which the result then says).

Why: the plain recipe's first steps are slow (allocator, autotuning, uneven lengths): on an H200 the Qwen2.5-1.5B
shape gave 5,252 tokens/s over 20 steps and 7,472 over 200 in the same call. A ratio against a cold baseline
flatters whoever warms up faster.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class SteadyRate:
    """Feed it every timed step; it closes a window every `window` steps (the caller's `sync` makes the clock
    honest on a GPU) and says when to stop.

    Stops when: at least `min_steps` steps or (if set) `min_tokens` tokens were timed, and the mean rate of the last
    `compare` windows is within `tolerance` (relative) of the mean of the `compare` windows before them ("steady");
    or after `max_seconds` ("time cap") or `max_steps` ("step cap"). With `fixed_steps`, exactly that many steps."""

    window: int = 10
    min_steps: int = 100
    min_tokens: int = 0
    tolerance: float = 0.03
    max_seconds: float = 180.0
    max_steps: int = 3000
    compare: int = 3
    fixed_steps: int | None = None
    clock: Callable[[], float] = time.perf_counter
    rates: list[float] = field(default_factory=list)
    window_tokens: list[int] = field(default_factory=list)
    window_seconds: list[float] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    stopped: str | None = None
    _start: float | None = None
    _window_start: float = 0.0
    _pending_tokens: int = 0
    _pending_steps: int = 0

    def start(self, sync: Callable[[], None] = lambda: None) -> None:
        sync()
        self._start = self._window_start = self.clock()

    def step(self, tokens: int, sync: Callable[[], None] = lambda: None) -> bool:
        """One timed step of `tokens` real tokens; -> True when the measurement should stop."""
        if self._start is None:
            raise RuntimeError("SteadyRate.start() first")
        self.steps += 1
        self.tokens += tokens
        self._pending_tokens += tokens
        self._pending_steps += 1
        last = self.fixed_steps is not None and self.steps >= self.fixed_steps
        if self._pending_steps < self.window and not last:
            return False
        sync()
        now = self.clock()
        seconds = max(now - self._window_start, 1e-9)
        self.rates.append(self._pending_tokens / seconds)
        self.window_tokens.append(self._pending_tokens)
        self.window_seconds.append(seconds)
        self._window_start, self._pending_tokens, self._pending_steps = now, 0, 0
        self.stopped = self._verdict(now)
        return self.stopped is not None

    def _verdict(self, now: float) -> str | None:
        if self.fixed_steps is not None:
            return "fixed steps" if self.steps >= self.fixed_steps else None
        enough = self.steps >= self.min_steps or (self.min_tokens > 0 and self.tokens >= self.min_tokens)
        if enough and self.moved() is not None and self.moved() < self.tolerance:
            return "steady"
        if now - self._start >= self.max_seconds:
            return "time cap"
        if self.steps >= self.max_steps:
            return "step cap"
        return None

    def moved(self) -> float | None:
        """Relative change of the mean rate, last `compare` windows against the `compare` before them."""
        k = self.compare
        if len(self.rates) < 2 * k:
            return None
        last, before = statistics.fmean(self.rates[-k:]), statistics.fmean(self.rates[-2 * k:-k])
        return abs(last - before) / before

    def span(self) -> slice:
        """The windows the result is made of: the last 2 x compare when steady (those compared), else the later
        half of all windows (the earlier half is warm-up as far as anyone can tell)."""
        if self.stopped == "steady":
            return slice(-2 * self.compare, None)
        return slice(len(self.rates) // 2, None) if len(self.rates) > 1 else slice(None)

    def summary(self) -> dict:
        s = self.span()
        rates, tokens, seconds = self.rates[s], self.window_tokens[s], self.window_seconds[s]
        if not rates:
            return {"tokens_per_s": 0.0, "steady": False, "stopped": self.stopped or "no window closed"}
        mean = statistics.fmean(rates)
        std = statistics.pstdev(rates) if len(rates) > 1 else 0.0
        return {
            "tokens_per_s": sum(tokens) / sum(seconds),   # pooled over the span: total tokens / total time
            "tokens_per_s_mean": mean, "tokens_per_s_std": std, "relative_std": std / mean if mean else 0.0,
            "tokens_per_s_min": min(rates), "tokens_per_s_max": max(rates),
            "span_tokens": sum(tokens), "span_seconds": sum(seconds), "span_windows": len(rates),
            "steady": self.stopped == "steady", "stopped": self.stopped, "moved": self.moved(),
            "timed_steps": self.steps, "timed_tokens": self.tokens, "window_steps": self.window,
            "window_rates": [round(r, 1) for r in self.rates],
        }
