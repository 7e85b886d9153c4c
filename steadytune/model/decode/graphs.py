"""CUDA graphs of the decode step: on a GPU, a small model's decode step is thousands of tiny kernels (18 Gemma
layers, 7 LoRA-wrapped projections each, norms, rotary embeddings), each launched from Python, so the step takes
tens of milliseconds of host time for a few of GPU work. A CUDA graph records the step's kernels once and replays
them with one launch.

A graph replays the same kernels on the same memory with the Python values of the moment it was recorded, so the
step it records must read everything that changes from tensors that stay in place (the slot cache, the decode
state: state.py, slotcache.py), and may not wait on the device. The step recorded is the whole loop body: forward,
sampling, and the update of every row (its next input, length, board, whether it is done). Graphs are kept per shape
bucket (rows, columns, what the sampler needs; the adapter on peft's path); rows and columns are rounded up
(`bucket_rows`, `bucket_columns`) so a handful of graphs serve a whole run.

The step changes the state it reads, so running it is not free: recording (which runs it once to warm up, and on
the CPU stand-in of the tests runs it to record) and checking put the state back as it was (`snapshot`, a function
that copies the state and returns the function that restores it). Safety: each graph's first two uses also run the
step eagerly, from the same state, and compare the logits (the second use is the one a frozen Python value would
break). A row further than RELATIVE_ROW_ERROR from the eager one is measured against a second eager step from the same
state: where the eager step is as far from itself (kernels that are not bitwise deterministic, in a model that
amplifies last-bit differences), the recording is kept. Any failure or real mismatch turns graphs off for the rest of
the run, with one warning naming the rows and the errors, and the eager step's result is used
(`DecodeGraphs.disabled_because` holds the reason: the benchmarks and the GPU tests fail on it).
STEADYTUNE_CUDA_GRAPHS=0 turns them off.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable, Optional

import torch

logger = logging.getLogger("steadytune.decode")

COLUMN_STEP = 256   # graphs' column buckets: multiples of this
MAX_GRAPHS = 48     # least recently used graphs beyond this are dropped (each holds its own output tensors)
VERIFIED_USES = 2   # uses of a graph checked against the eager step
RELATIVE_ROW_ERROR = 2e-2   # the most a recorded step's row of logits may differ from the eager one's (L2, relative)


def bucket_rows(rows: int, slots: int) -> int:
    """Powers of two up to the slot count (then the slot count itself)."""
    bucket = 1
    while bucket < rows:
        bucket *= 2
    return min(bucket, slots)


def bucket_columns(columns: int) -> int:
    return -(-columns // COLUMN_STEP) * COLUMN_STEP


class CudaGraphBackend:
    """Records with torch.cuda.CUDAGraph, all graphs sharing one memory pool (their steps never overlap)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()

    def renew_pool(self) -> None:
        """A fresh memory pool for the graphs recorded from now on. Called when every graph was dropped: PyTorch
        releases a pool when its last graph goes, and recording into the released pool's handle again is where its
        allocator asserted (`use_count > 0`, CUDACachingAllocator.cpp) in a GRPO run on an H200 (2026-12-01), right
        after the slot cache grew and the graphs were cleared. Not yet confirmed on a GPU to be that cause."""
        self.pool = torch.cuda.graph_pool_handle()

    def capture(self, step: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        # First-use work (cuBLAS handles, workspaces, lazy modules) must not fall inside the capture: run the step
        # once on a side stream, as torch.cuda.graphs recommends. DecodeGraphs puts back what that run changed.
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            step()
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        # Autocast's cast cache would hand the graph tensors that a later step frees; record without it.
        dtype = torch.get_autocast_dtype("cuda")
        enabled = torch.is_autocast_enabled("cuda")
        with torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=False):
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                output = step()
        return graph.replay, output


@dataclass
class _Graph:
    replay: Callable[[], None]
    output: torch.Tensor
    checked: int = 0


class DecodeGraphs:
    """Runs a decode step through a recorded graph for its shape key, or eagerly when graphs are off."""

    def __init__(self, device: torch.device, backend=None):
        wanted = os.environ.get("STEADYTUNE_CUDA_GRAPHS", "1") != "0"
        if backend is None and wanted and device.type == "cuda":
            backend = CudaGraphBackend(device)
        self.backend = backend
        self.graphs: OrderedDict[Hashable, _Graph] = OrderedDict()
        self.disabled_because: Optional[str] = None
        self.captured = 0
        self.tolerated = 0   # checks over the bound that the eager step's own spread explained

    @property
    def enabled(self) -> bool:
        return self.backend is not None and self.disabled_because is None

    def clear(self) -> None:
        """Forget every graph (the buffers they read were reallocated); later graphs record into a fresh pool."""
        self.graphs.clear()
        renew = getattr(self.backend, "renew_pool", None)
        if renew is not None:
            renew()

    def run(self, key: Hashable, step: Callable[[], torch.Tensor],
            snapshot: Optional[Callable[[], Callable[[], None]]] = None) -> torch.Tensor:
        """Run `step` (-> logits) through the graph recorded for `key` (recording it first), or eagerly. `snapshot`
        copies what the step changes and returns the function that puts it back."""
        if not self.enabled:
            return step()
        snapshot = snapshot or _nothing_to_restore
        try:
            return self._run(key, step, snapshot)
        except Exception as e:  # noqa: BLE001 - any failure: decode on without graphs
            self._disable(f"{type(e).__name__}: {e}")
            return step()

    def _run(self, key: Hashable, step: Callable[[], torch.Tensor], snapshot) -> torch.Tensor:
        graph = self.graphs.get(key)
        if graph is None:
            while len(self.graphs) >= MAX_GRAPHS:
                self.graphs.popitem(last=False)
            restore = snapshot()
            try:
                replay, output = self.backend.capture(step)
            finally:
                restore()
            graph = self.graphs[key] = _Graph(replay, output)
            self.captured += 1
        else:
            self.graphs.move_to_end(key)
        if graph.checked >= VERIFIED_USES:
            graph.replay()
            return graph.output
        graph.checked += 1
        restore = snapshot()
        graph.replay()
        recorded = graph.output.clone()
        restore()
        expected = step()
        error = row_errors(recorded, expected)
        if error is not None and float(error.max()) <= RELATIVE_ROW_ERROR:
            return expected
        # Over the bound: is the eager step itself that far from a second eager run of the same state? Kernels that
        # are not bitwise deterministic, in a model that amplifies their last-bit differences (random weights with a
        # random adapter do), move the eager step as far as the recorded one: then the recording is not what differs.
        first = expected.clone()
        restore()
        expected = step()   # the second eager step is the one the batch keeps (its state and cache writes)
        noise = row_errors(expected, first)
        if error is None or noise is None or float(error.max()) > max(RELATIVE_ROW_ERROR, 2 * float(noise.max())):
            self._disable(describe_mismatch(key, error, noise))
            return expected
        self.tolerated += 1
        return expected

    def _disable(self, reason: str) -> None:
        self.disabled_because = reason
        self.graphs.clear()
        logger.warning("decode: CUDA graphs are off for this run (%s); decoding eagerly", reason)


def _nothing_to_restore() -> Callable[[], None]:
    return lambda: None


def row_errors(recorded: torch.Tensor, eager: torch.Tensor) -> Optional[torch.Tensor]:
    """Each row's relative L2 distance between two steps' logits (None when their shapes differ). The same kernels on
    the same inputs give the same logits up to kernels that are not bitwise deterministic; a graph that read a stale
    value or a wrong buffer gives some row other logits altogether (a relative error near 1). Judged per row on the
    whole row, not on its largest element: with 1,024 rows of a 262k vocabulary (Gemma 3, a GRPO roll-out), the single
    largest elementwise difference of two orders of summation exceeded 1 % of the largest logit on an H200
    (2026-12-01), turning graphs off for nothing."""
    if recorded.shape != eager.shape:
        return None
    rows = eager.shape[0] if eager.dim() > 1 else 1
    recorded, eager = recorded.float().reshape(rows, -1), eager.float().reshape(rows, -1)
    return (recorded - eager).norm(dim=1) / eager.norm(dim=1).clamp(min=1e-6)


def describe_mismatch(key: Hashable, error: Optional[torch.Tensor], noise: Optional[torch.Tensor]) -> str:
    """The warning's reason: which rows differ and by how much, against the eager step's own spread."""
    if error is None:
        return f"the recorded step for {key} gave logits of another shape than the eager step"
    bad = (error > RELATIVE_ROW_ERROR).nonzero().flatten().tolist()
    spread = "not measured" if noise is None else f"{float(noise.max()):.2e}"
    return (f"the recorded step for {key} gave other logits than the eager step: rows {bad[:8]}"
            f"{' ...' if len(bad) > 8 else ''} of {error.numel()} differ by up to {float(error.max()):.2e} (relative L2; "
            f"allowed {RELATIVE_ROW_ERROR:.0e}), while two eager steps from the same state differ by {spread}")
