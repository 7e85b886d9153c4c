"""A CPU stand-in for CUDA graph capture, so the recorded decode step (steadytune/model/decode/graphs.py) is tested where
no GPU is: recording keeps every aten op of one call of the step, with the tensors and Python values it was called
with, and a replay runs exactly those ops again on the same tensors. As in a CUDA graph, a Python value read while
recording (a length, a position, a shape) stays frozen in every replay, so a step that reads anything changing from
Python gives wrong tokens on later steps; and a call that waits for a tensor's value while recording raises, as the
CUDA driver refuses it during a capture.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

WAITING_OPS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default,
               torch.ops.aten.nonzero.default}
WAITING_METHODS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


class WaitWhileRecording(RuntimeError):
    pass


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in WAITING_OPS:
            raise WaitWhileRecording(f"{func} waits for a tensor's value inside the recorded step")
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out

    def replay(self) -> None:
        for func, args, kwargs, out in self.ops:
            fresh = func(*args, **kwargs)
            for old, new in zip(tree_leaves(out), tree_leaves(fresh)):
                # An in-place op or a view already acted on the recorded tensors (same memory); a new result is
                # copied into the recorded one, which later ops read. (Schemas cannot tell: `aten.to` may alias.)
                if isinstance(old, torch.Tensor) and new.untyped_storage().data_ptr() != old.untyped_storage().data_ptr():
                    old.copy_(new)


@contextlib.contextmanager
def _no_host_reads():
    saved = {name: getattr(torch.Tensor, name) for name in WAITING_METHODS}

    def refuse(name):
        def method(self, *args, **kwargs):
            raise WaitWhileRecording(f"Tensor.{name}() waits for a tensor's value inside the recorded step")
        return method

    for name in WAITING_METHODS:
        setattr(torch.Tensor, name, refuse(name))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


class EmulatedGraphBackend:
    """DecodeGraphs' backend interface (`capture(step) -> (replay, output)`), on any device."""

    def __init__(self):
        self.captures = 0
        self.replays = 0

    def capture(self, step):
        step()  # the warm-up run a CUDA capture makes first
        recorder = _Recorder()
        with _no_host_reads(), recorder:
            output = step()
        self.captures += 1

        def replay():
            recorder.replay()
            self.replays += 1
        return replay, output
