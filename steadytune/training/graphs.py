"""A micro-batch's forward and backward recorded once as a CUDA graph and replayed for every later micro-batch.

Why: a small model's step is thousands of short kernels, and launching them one by one from Python keeps the GPU
idle most of the time (the GPU-sized demo, Gemma 3 270M: 6,360 kernels a step, the H200 busy 17% of it). A graph
replays all of them with one launch.

What makes it possible (and is done elsewhere):
- one shape for every micro-batch (packing.StaticShape): packed rows padded to a token bucket, cu_seq_lens filled
  up with empty sequences, the labelled positions listed (`target_index`) instead of found on the GPU;
- nothing in the step reads a value back to the host: transformers' mask building is skipped for varlen rows
  (packing.packed_mask_placeholder), and the loss runs our chunked cross-entropy (loss.no_host_sync).

How: warm up on a side stream, record forward + backward of `loss_sum * scale` into static input buffers and the
parameters' gradient buffers (allocated here and kept attached to the parameters, so gradient accumulation over
micro-batches works as in eager mode), replay the first micro-batch and compare its loss and gradient norm with the
eager warm-up. The optimizer step, clipping and the guard stay outside the graph, eager, as before.
"""

from __future__ import annotations

import contextlib
import gc
import math
from typing import Callable

import torch

from steadytune.training.loss import causal_lm_loss_sum, no_host_sync

# Batch entries that are Python values, not inputs of the graph (counts the loop reads on the host).
HOST_KEYS = ("n_targets", "static", "n_examples", "n_target_tokens")
# Eager warm-up vs first replay of the same micro-batch: the loss agrees to float rounding; gradients differ by the
# order of atomic additions in attention's backward.
LOSS_TOLERANCE, GRAD_TOLERANCE = 1e-3, 2e-2


class GraphMismatch(RuntimeError):
    """The replayed micro-batch does not give what the eager one gave."""


class GraphedStep:
    """forward + backward of `loss_fn(batch)` for one static batch layout, replayed from a CUDA graph.

    loss_fn(batch) -> (loss sum, target count), the recipe's loss, or (loss sum, count, outputs): a dict of
    tensors the caller reads after each replay (`outputs`: the recorded ones, which every replay rewrites; a
    preference stage's per-pair rewards). `params`: the trainable parameters whose gradients the graph
    accumulates into. `dtype`: autocast dtype (None: no autocast). Tests on CPU replace
    `_record` with one whose "replay" runs the step again on the same buffers, to check the bookkeeping."""

    def __init__(self, loss_fn: Callable, params: list, batch: dict, device: torch.device,
                 dtype: torch.dtype | None = torch.bfloat16):
        self.loss_fn = loss_fn
        self.params = list(params)
        self.device = device
        self.dtype = dtype
        self.static = {k: v.to(device).clone() for k, v in batch.items() if isinstance(v, torch.Tensor)}
        self.constants = {k: v for k, v in batch.items() if not isinstance(v, torch.Tensor) and k not in HOST_KEYS}
        self.scale = torch.ones((), dtype=torch.float32, device=device)
        self.grads = [torch.zeros_like(p) for p in self.params]
        self.graph = None
        self.static_loss = None
        self.outputs: dict | None = None
        self.check: dict = {}

    # --- which batches it takes ---------------------------------------------------------------------------
    def accepts(self, batch: dict) -> bool:
        if batch.get("static") is not True or "token_weights" in batch:
            return False
        tensors = {k for k, v in batch.items() if isinstance(v, torch.Tensor)}
        if tensors != set(self.static):
            return False
        return (all(batch[k].shape == self.static[k].shape for k in tensors)
                and all(batch.get(k) == v for k, v in self.constants.items()))

    # --- recording --------------------------------------------------------------------------------------
    def _forward_backward(self) -> torch.Tensor:
        autocast = (torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=False) if self.dtype
                    else contextlib.nullcontext())
        with no_host_sync(), autocast:
            # the host-side counts (the caller's scale already holds them) are not inputs: the graph reads none
            counts = {k: 0 for k in HOST_KEYS if k != "static"}
            result = self.loss_fn({**self.static, **self.constants, **counts})
        loss_sum = result[0]
        self.outputs = result[2] if len(result) > 2 else None
        (loss_sum * self.scale).backward()
        return loss_sum.detach()

    def _attach_grads(self) -> None:
        """Make the parameters' .grad the graph's buffers again: zeroed where the loop dropped them
        (zero_grad(set_to_none=True) after each optimizer step), kept where a micro-batch already added to them."""
        dropped = [g for p, g in zip(self.params, self.grads) if p.grad is None]
        if dropped:
            torch._foreach_zero_(dropped)
        for p, g in zip(self.params, self.grads):
            if p.grad is not g:
                if p.grad is not None:
                    g.copy_(p.grad)
                p.grad = g

    def _grad_norm(self) -> float:
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in self.grads])))

    def capture(self, warmup: int = 2) -> dict:
        """Warm up, record, replay once and compare with the eager warm-up; raises GraphMismatch if they differ."""
        for p, g in zip(self.params, self.grads):
            g.zero_()
            p.grad = g
        cuda = self.device.type == "cuda"
        side = torch.cuda.Stream(self.device) if cuda else None
        if cuda:
            side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side) if cuda else contextlib.nullcontext():
            for _ in range(warmup):  # compiles, autotunes and allocates whatever the first call needs
                eager_loss = self._forward_backward()
        if cuda:
            torch.cuda.current_stream(self.device).wait_stream(side)
        eager_loss, eager_norm = float(eager_loss), self._grad_norm() / warmup
        for g in self.grads:
            g.zero_()
        if cuda:
            gc.collect()
            torch.cuda.empty_cache()  # the warm-up's activations go back, for the graph's own memory pool
        self.graph = self._record()
        self.graph.replay()
        graph_loss, graph_norm = float(self.static_loss), self._grad_norm()
        for g in self.grads:
            g.zero_()
        self.check = {"eager_loss": eager_loss, "graph_loss": graph_loss, "eager_grad_norm": eager_norm,
                      "graph_grad_norm": graph_norm,
                      "loss_relative_difference": _relative(graph_loss, eager_loss),
                      "grad_norm_relative_difference": _relative(graph_norm, eager_norm)}
        if not (self.check["loss_relative_difference"] <= LOSS_TOLERANCE
                and self.check["grad_norm_relative_difference"] <= GRAD_TOLERANCE):
            raise GraphMismatch(f"replayed loss {graph_loss:.6g} / grad norm {graph_norm:.6g} against eager "
                                f"{eager_loss:.6g} / {eager_norm:.6g}")
        return self.check

    def _record(self):
        graph = torch.cuda.CUDAGraph()
        # thread_local: a data loader's pinning thread may allocate host memory meanwhile; only this thread's
        # calls must be capture-safe (the autograd engine's kernels still go to the capturing stream).
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # records; nothing runs until replay
            self.static_loss = self._forward_backward()
        return graph

    # --- every micro-batch ---------------------------------------------------------------------------------
    def __call__(self, batch: dict, scale: float) -> torch.Tensor:
        """Backward of loss_sum * scale accumulated into the parameters' .grad; -> loss_sum (a device tensor)."""
        for k, buffer in self.static.items():
            value = batch[k]
            if value.device.type == "cpu" and self.device.type == "cuda" and not value.is_pinned():
                value = value.pin_memory()  # a copy from pageable memory would wait for the GPU to go idle
            buffer.copy_(value, non_blocking=True)
        self.scale.fill_(scale)
        self._attach_grads()
        self.graph.replay()
        return self.static_loss.clone()

    def release(self) -> None:
        """Drop the graph and its memory pool; the parameters keep ordinary gradients."""
        self.graph, self.static_loss, self.outputs = None, None, None
        for p, g in zip(self.params, self.grads):
            if p.grad is g:
                p.grad = None
        self.grads, self.static = [], {}


def _relative(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(b), 1e-12)


class GraphRunner:
    """The loop's handle on CUDA graphs: records on the first static micro-batch, replays after, and says once why
    a micro-batch runs eagerly instead. `report(event: dict)` receives what happened (captured, or why not).

    On running out of memory while recording, `on_out_of_memory()` may free some (turn gradient checkpointing on)
    and return what it did; the recording is then tried once more."""

    def __init__(self, loss_fn: Callable, params: list, device: torch.device, dtype: torch.dtype | None,
                 report: Callable[[dict], None] | None = None,
                 on_out_of_memory: Callable[[], str | None] | None = None, step_class: type = GraphedStep,
                 on_replay: Callable[[dict, dict], None] | None = None):
        self.loss_fn, self.params, self.device, self.dtype = loss_fn, params, device, dtype
        self.on_replay = on_replay   # (batch, the step's outputs) after every replay: metrics of loss_fn's outputs
        self.report = report or (lambda event: None)
        self.on_out_of_memory = on_out_of_memory
        self.step_class = step_class
        self.step: GraphedStep | None = None
        self.failed: str | None = None
        self.eager_batches = 0
        self.capture_seconds = 0.0
        self._kept: list | None = None

    @property
    def active(self) -> bool:
        return self.failed is None

    def takes(self, batch: dict) -> bool:
        """Whether this micro-batch replays the graph (recording it first, the first time)."""
        if self.failed is not None:
            return False
        if self.step is None:
            if batch.get("static") is not True:
                self.eager_batches += 1
                return False
            return self._record(batch)
        if self.step.accepts(batch):
            return True
        self.eager_batches += 1
        return False

    def __call__(self, batch: dict, scale: float) -> torch.Tensor:
        loss = self.step(batch, scale)
        if self.on_replay is not None and self.step.outputs is not None:
            self.on_replay(batch, self.step.outputs)
        return loss

    def _record(self, batch: dict) -> bool:
        import time
        started = time.perf_counter()
        freed = None
        # Gradients an eager micro-batch of this window already left: recording uses the buffers, then they go back.
        self._kept = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        for attempt in range(2):
            step = self.step_class(self.loss_fn, self.params, batch, self.device, self.dtype)
            try:
                check = step.capture()
            except torch.OutOfMemoryError:
                step.release()
                del step
                _free_memory(self.device)
                freed = self.on_out_of_memory() if (attempt == 0 and self.on_out_of_memory) else None
                if freed is None:
                    return self._give_up("out of memory while recording")
                continue
            except Exception as e:  # a step that cannot be recorded runs eagerly, as it did before graphs
                step.release()
                _free_memory(self.device)
                first = str(e).splitlines()[0][:200] if str(e) else ""
                return self._give_up(f"{type(e).__name__}: {first}")
            self.step = step
            for g, kept in zip(step.grads, self._kept):
                if kept is not None:
                    g.copy_(kept)
            self._kept = None
            self.capture_seconds = time.perf_counter() - started
            self.report({"event": "cuda_graphs", "captured": True, "seconds": round(self.capture_seconds, 2),
                         **({"out_of_memory": freed} if freed else {}), **check})
            return True
        return self._give_up("out of memory while recording")

    def _give_up(self, why: str) -> bool:
        self.failed = why
        self.report({"event": "cuda_graphs", "captured": False, "reason": f"{why}; every micro-batch runs eagerly"})
        for p, kept in zip(self.params, self._kept or [None] * len(self.params)):
            p.grad = kept
        self._kept = None
        return False

    def release(self) -> None:
        if self.step is not None:
            self.step.release()
            self.step = None


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def describe_recording(event: dict) -> str:
    """The console line of a recording event (`report`'s argument): recorded and checked, or off and why."""
    if event.get("captured"):
        return (f"cuda_graphs: recorded in {event['seconds']:.1f} s; replayed loss matches eager "
                f"(relative difference {event['loss_relative_difference']:.1e})")
    return f"cuda_graphs: off ({event['reason']})"


def graph_runner_for(objective: torch.nn.Module, model: torch.nn.Module, params: list, device: torch.device,
                     precision: str, report: Callable[[dict], None],
                     on_out_of_memory: Callable[[], str | None]) -> GraphRunner:
    """The runner for a run's micro-batches: the graph records the stage objective's computation where it has one
    (dpo, rm: their per-pair metrics are read after each replay), else the causal-LM loss of sft and pt."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if hasattr(objective, "compute"):
        return GraphRunner(objective.compute, params, device, dtype, report=report, on_out_of_memory=on_out_of_memory,
                           on_replay=lambda batch, outputs: objective.record(outputs, batch["n_examples"]))
    return GraphRunner(lambda batch: causal_lm_loss_sum(model, batch), params, device, dtype, report=report,
                       on_out_of_memory=on_out_of_memory)
