"""activation_offloading: the checkpointed decoder layers' inputs wait for backward in host memory, not on the GPU.

With gradient checkpointing a decoder layer keeps one tensor for its backward, its input ([tokens, hidden]); the
rest is recomputed. Those inputs are what checkpointing still holds: at the Qwen2.5-7B shape and 16,384-token
micro-batches, 28 layers x 117 MB = 3.2 GB. Here each one is copied to pinned host memory as the forward makes it, on
a stream of its own (so the copy overlaps the next layer's compute), and copied back one layer ahead of the backward
that reads it. Unsloth's gradient checkpointing ("unsloth") moves the same tensors, and LLaMA-Factory's
use_unsloth_gc calls that; 3.2 GB each way a step is ~0.1 s over PCIe 5, beside a step of about a second.

How: saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks) while the decoder stack runs. Inside a
checkpointed layer checkpointing's own hooks take what the layer saves; what reaches these hooks is saved at the
layer's edge: its inputs (non-reentrant checkpointing saves them through a no-op autograd function precisely so that
hooks like these apply; a compiled layer saves them as inputs of its graph). A compiled layer also saves the weights
its backward reads, and the final norm its weight: weights and buffers stay where they are (matched by storage), as
does anything under MIN_BYTES. A tensor saved by several layers (the rotary tables) is copied once.

Hooks, not a hand-written checkpoint function: the layers keep transformers' checkpointing and torch.compile's
handling of it (the partitioner still recomputes inside the compiled layer); only where the saved inputs live
changes.

Built so that a CUDA graph can record it (graphs.py records forward + backward of a micro-batch once):
- the host copies go to pinned buffers kept for the whole run, one per saved tensor of a micro-batch in the order
  they are saved, so a replay writes and reads the same host memory the recording did (a buffer a recording used
  is never freed, even when a larger micro-batch outgrows it);
- no `record_stream`: under capture the caching allocator would hold a block used on two streams until the graph
  ends, and the memory the copies free would not be freed. Instead each tensor being copied out is kept referenced
  until the compute stream has waited for its copy (at the next save, or the first unpack), and each copy back goes
  into memory allocated on the compute stream, which waits for the copy before reading it. Every copy thus joins
  the compute stream again, as capture requires.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from itertools import chain

import torch

from steadytune.hardware.memory import choose_activation_offloading
from steadytune.hardware.speed import SpeedPlan, SpeedUnavailable
from steadytune.model.anatomy import base_model_of, decoder_body, text_config

MIN_BYTES = 1 << 20  # below this a copy's fixed cost outweighs the memory it frees (masks, position ids)


def _dead():
    return None


@dataclass(eq=False)
class _Offloaded:
    """One saved tensor in host memory; `on_device` is its copy back, once the backward has asked for it (or is
    about to: prefetched)."""
    host: torch.Tensor
    index: int
    on_device: torch.Tensor | None = None
    ready: torch.cuda.Event | None = field(default=None, repr=False)


class HostOffload:
    """The saved-tensor hooks that move a micro-batch's large saved tensors to host memory and back (module
    docstring). One per model; `attach` turns them on around the decoder stack's forward."""

    def __init__(self, model: torch.nn.Module, device: torch.device, min_bytes: int = MIN_BYTES,
                 max_bytes: int | None = None):
        if device.type == "cuda" and device.index is None:   # tensors say cuda:0: "cuda" alone would match none
            device = torch.device("cuda", torch.cuda.current_device())
        self.device, self.min_bytes = device, min_bytes
        # at most this many bytes of a micro-batch go to host memory (the first saved: the lowest layers' inputs,
        # whose backward comes last); the rest stay on the GPU. None: everything that moves.
        self.max_bytes = max_bytes
        # weights stay: a compiled layer saves the parameters its backward reads among its inputs
        self.kept = {t.untyped_storage().data_ptr() for t in chain(model.parameters(), model.buffers())}
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None  # CPU: plain copies (tests)
        self.records: list[weakref.ref] = []   # this micro-batch's offloaded tensors, in the order they were saved
        self.seen: dict[int, tuple[weakref.ref, weakref.ref]] = {}   # id(tensor) -> (it, its record): copied once
        self.leaving: list[tuple[torch.Tensor, torch.cuda.Event]] = []   # copies out the compute stream awaits
        self.host_buffers: list[torch.Tensor] = []   # pinned, one per record index, kept (a graph may read them)
        self.host_users: list[weakref.ref] = []      # the record each buffer holds now
        self.outgrown: list[torch.Tensor] = []       # replaced by larger ones, but a recorded graph copies to them
        self.recorded: set[int] = set()              # indices whose buffer a CUDA graph recording has used
        self.backward_started = False
        self.bytes_offloaded = 0   # in the last (or current) micro-batch's forward
        self._handles: list = []

    # -- hooks ---------------------------------------------------------------------------------------------
    def pack(self, tensor: torch.Tensor):
        if not self._moves(tensor):
            return tensor
        if self.backward_started:   # the first save after a backward: a new micro-batch
            self.records, self.seen, self.backward_started, self.bytes_offloaded = [], {}, False, 0
        known = self.seen.get(id(tensor))
        if known is not None and known[0]() is tensor and known[1]() is not None:
            return known[1]()
        self._let_go()   # the copies started by earlier saves have had a layer's compute to finish
        index = len(self.records)
        host, kept_buffer = self._host_buffer(index, tensor)
        record = _Offloaded(self._copy_out(tensor, host), index=index)
        self.records.append(weakref.ref(record))
        if kept_buffer:
            self.host_users[index] = self.records[-1]
        # weak references only: a record lives as long as autograd keeps it (its copy back is freed with it)
        self.seen[id(tensor)] = (weakref.ref(tensor), weakref.ref(record))
        self.bytes_offloaded += tensor.numel() * tensor.element_size()
        return record

    def unpack(self, packed):
        if not isinstance(packed, _Offloaded):
            return packed
        if not self.backward_started:
            self.backward_started = True
            self._let_go()
        if packed.on_device is None:
            self._fetch(packed)
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_event(packed.ready)
        tensor = packed.on_device
        # backward runs the layers in reverse: the tensor saved before this one is the next one it reads
        earlier = self.records[packed.index - 1]() if packed.index > 0 else None
        if earlier is not None and earlier.on_device is None:
            self._fetch(earlier)
        return tensor

    # -- copies --------------------------------------------------------------------------------------------
    def _moves(self, tensor: torch.Tensor) -> bool:
        nbytes = tensor.numel() * tensor.element_size()
        used = 0 if self.backward_started else self.bytes_offloaded   # a save after a backward starts a micro-batch
        if self.max_bytes is not None and used + nbytes > self.max_bytes:
            return False
        return (tensor.device == self.device and tensor.is_contiguous() and nbytes >= self.min_bytes
                and tensor.untyped_storage().data_ptr() not in self.kept)

    def _copy_out(self, tensor: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
        if self.stream is None:   # CPU (tests): the same bookkeeping, a plain copy
            return host.copy_(tensor)
        compute = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(compute)   # the tensor is written before it is read
        with torch.cuda.stream(self.stream):
            host.copy_(tensor, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        # kept until the compute stream has waited for `done`: its memory is not reused before the copy has read it
        self.leaving.append((tensor, done))
        return host

    def _host_buffer(self, index: int, like: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """-> (the kept buffer for the index-th saved tensor of a micro-batch, viewed as `like`'s shape and dtype,
        True); or (a buffer of its own, False) where the record holding the kept one is still alive (a forward whose
        backward has not run)."""
        nbytes = like.numel() * like.element_size()
        pinned = self.stream is not None
        while len(self.host_buffers) <= index:
            self.host_buffers.append(torch.empty(0, dtype=torch.uint8, pin_memory=pinned))
            self.host_users.append(_dead)
        if self.host_users[index]() is not None:
            return torch.empty(like.shape, dtype=like.dtype, pin_memory=pinned), False
        if self.host_buffers[index].numel() < nbytes:
            if index in self.recorded:
                self.outgrown.append(self.host_buffers[index])
                self.recorded.discard(index)
            self.host_buffers[index] = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        if pinned and torch.cuda.is_current_stream_capturing():
            self.recorded.add(index)
        return self.host_buffers[index][:nbytes].view(like.dtype).view(like.shape), True

    def _let_go(self) -> None:
        """The compute stream waits for the copies out so far; their GPU tensors may then be freed."""
        if self.stream is not None:
            compute = torch.cuda.current_stream(self.device)
            for _, done in self.leaving:
                compute.wait_event(done)
        self.leaving = []

    def _fetch(self, record: _Offloaded) -> None:
        if self.stream is None:
            record.on_device = record.host.clone()
            return
        compute = torch.cuda.current_stream(self.device)
        # allocated on the compute stream, which frees it after use; the copy waits for what ran there before
        record.on_device = torch.empty_like(record.host, device=self.device)
        self.stream.wait_stream(compute)
        with torch.cuda.stream(self.stream):   # after the copy out, which ran on this stream too
            record.on_device.copy_(record.host, non_blocking=True)
            record.ready = torch.cuda.Event()
            record.ready.record(self.stream)

    # -- on and off ----------------------------------------------------------------------------------------
    def attach(self, model: torch.nn.Module) -> None:
        """Turn the hooks on for every forward of the decoder stack (not the head: its loss saves what it needs
        chunk by chunk)."""
        body = decoder_body(model)
        state: list = []

        def enter(module, args):
            context = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
            context.__enter__()
            state.append(context)

        def leave(module, args, output):
            state.pop().__exit__(None, None, None)

        self._handles = [body.register_forward_pre_hook(enter),
                         body.register_forward_hook(leave, always_call=True)]  # also when the forward raises

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


_ATTACHED: "weakref.WeakKeyDictionary[torch.nn.Module, HostOffload]" = weakref.WeakKeyDictionary()


def offloading_blocker(device: torch.device, checkpointing: bool, sharded: str | None) -> str | None:
    """Why activation_offloading cannot run here, or None."""
    if sharded:
        return f"it has not been tried with {sharded} (whose own hooks gather and free the weights it would see)"
    if device.type != "cuda":
        return f"the model is on the {device.type.upper()}, which is already host memory"
    if not checkpointing:
        return "it moves what gradient checkpointing keeps, and gradient_checkpointing is false"
    return None


def plan_activation_offloading(model: torch.nn.Module, plan: SpeedPlan, checkpointing: bool, tokens: int,
                               budget_gib: float | None, state_gib: float, requested: bool | None,
                               sharded: str | None) -> tuple[HostOffload | None, str]:
    """activation_offloading as asked, or by default where checkpointing alone would not fit
    (hardware/memory.choose_activation_offloading), attached when on; -> (the hooks' owner or None, reason). train
    and bench both decide it here. Raises SpeedUnavailable with the reason when asked for where it cannot run."""
    device = next(model.parameters()).device
    blocker = offloading_blocker(device, checkpointing, sharded)
    if requested and blocker:
        raise SpeedUnavailable(blocker)
    on, why = choose_activation_offloading(text_config(model), tokens, budget_gib, checkpointing, state_gib,
                                           compiled=plan.compile, requested=requested, blocker=blocker)
    if not on:
        return None, why
    return offload_activations(model, device), (why + "; the checkpointed decoder layers' inputs wait for backward "
                                                "in pinned host memory, copied out and back on a second stream "
                                                "beside the compute")


def offload_activations(model: torch.nn.Module, device: torch.device, max_bytes: int | None = None) -> HostOffload:
    """Attach host offloading of the checkpointed layers' inputs to `model` (at most `max_bytes` a micro-batch);
    -> the hooks' owner."""
    offload = HostOffload(model, device, max_bytes=max_bytes)
    offload.attach(model)
    _ATTACHED[decoder_body(model)] = offload
    return offload


def remove_offloading(model: torch.nn.Module) -> float | None:
    """Take the hooks off after training; -> GiB the last micro-batch kept in host memory, None if none were on."""
    try:
        offload = _ATTACHED.pop(decoder_body(model), None)
    except (AttributeError, TypeError):
        return None
    if offload is None:
        return None
    offload.detach()
    return offload.bytes_offloaded / 2**30
