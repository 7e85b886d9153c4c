"""Packing: several tokenised examples per row, attention that never crosses from one example into another.

Why: the plain recipe pads every batch to its longest example and wastes most of the GPU on pad tokens
(alpaca lengths: mean 187, p90 383, max 752). Packing fills rows with real tokens instead.

Correctness rests on three things, all done here:
- position ids restart at 0 for every example, so RoPE sees each example exactly as it would alone;
- attention is confined to each example (block-diagonal causal), by one of the kernels below;
- the first token of every example gets label -100, so the last token of the previous example is never
  trained to predict it (the loss shifts labels by one; see loss.shifted_targets).

Attention kernels (`choose_packing_attention` in hardware.py picks one per backend):
- "varlen": every example of a micro-batch concatenated into one row of shape [1, T], no padding at all, and a
  variable-length flash kernel driven by cumulative sequence lengths (flash-attn's `flash_attn_varlen_func`,
  or PyTorch's own `torch.nn.attention.varlen.varlen_attn`). Registered with transformers as the attention
  implementation "steadytune_varlen".
- "sdpa": rows of at most `row_len` tokens with position ids and *no* 2-D attention mask: transformers then
  finds where position ids restart and builds the block-diagonal causal mask itself (per layer type, so
  sliding-window layers stay correct) and hands it to SDPA. Runs everywhere (CPU, CUDA, ROCm); O(row_len^2)
  per row.
- "flex": rows as above; transformers builds the same document mask as a block-sparse mask for torch's
  flex_attention, which skips the blocks that cross examples.

Batching is by token budget: consecutive examples (in sampler order) are grouped until the budget of real
tokens is reached, so every optimizer step sees about the same number of tokens whatever the lengths. The
same grouping, padded instead of packed, is the unpacked reference: same examples, same order, same steps.
"""

from __future__ import annotations

import functools
import inspect
import math
import random
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

IGNORE_INDEX = -100
PACKING_ATTENTIONS = ("varlen", "sdpa", "flex")
VARLEN_IMPLEMENTATION = "steadytune_varlen"


# --- grouping -----------------------------------------------------------------------------------------------

def group_by_token_budget(lengths: Sequence[int], order: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Consecutive examples of `order` grouped so that each group holds at most `max_tokens` real tokens.

    An example longer than the budget forms a group of its own (it is never split or dropped here: truncation
    to cutoff_len is the tokeniser's job).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index in order:
        n = int(lengths[index])
        if current and used + n > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += n
    if current:
        groups.append(current)
    return groups


def pack_into_rows(lengths: Sequence[int], row_len: int) -> list[list[int]]:
    """Positions 0..len(lengths)-1 packed into rows of at most `row_len` tokens, first-fit decreasing.

    First-fit decreasing wastes little (rows end nearly full) and is O(n * rows), which is nothing next to a
    training step. Examples longer than `row_len` get a row of their own.
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(max(row_len - n, 0))
    for row in rows:
        row.sort()  # keep the sampler's order inside a row: easier to read, same result
    return rows


class TokenBudgetBatchSampler(torch.utils.data.Sampler):
    """Yields lists of dataset indices, each list holding at most `max_tokens` real tokens.

    Shuffles per epoch (seeded) before grouping, so group composition changes between epochs as it would
    with a fixed batch size. Call `set_epoch(epoch)` each epoch (Accelerate does it when present).
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, shuffle: bool = True, seed: int = 0):
        self.lengths = [int(n) for n in lengths]
        self.max_tokens = int(max_tokens)
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def groups(self) -> list[list[int]]:
        order = list(range(len(self.lengths)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return group_by_token_budget(self.lengths, order, self.max_tokens)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.groups())

    def __len__(self) -> int:
        return len(self.groups())


# --- collators ----------------------------------------------------------------------------------------------

def _as_list(values) -> list[int]:
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def _labels_of(example: dict) -> list[int]:
    return _as_list(example["labels"]) if "labels" in example else _as_list(example["input_ids"])


@dataclass
class PaddedCollator:
    """Dynamic padding to the longest example of the batch (right side), the unpacked reference."""

    pad_token_id: int
    pad_to_multiple_of: int | None = None

    def __call__(self, examples: list[dict]) -> dict:
        longest = max(len(e["input_ids"]) for e in examples)
        if self.pad_to_multiple_of:
            longest = math.ceil(longest / self.pad_to_multiple_of) * self.pad_to_multiple_of
        ids = torch.full((len(examples), longest), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(examples), longest), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(examples), longest), dtype=torch.long)
        for row, example in enumerate(examples):
            n = len(example["input_ids"])
            ids[row, :n] = torch.tensor(_as_list(example["input_ids"]))
            labels[row, :n] = torch.tensor(_labels_of(example))
            mask[row, :n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}


@dataclass(frozen=True)
class StaticShape:
    """One shape for every packed micro-batch of a run, so that compiled code and CUDA graphs made for the first
    micro-batch serve them all (a new shape would mean a recompile, or a graph that cannot replay).

    varlen: one row of `tokens` tokens; `cu_seq_lens` has `sequences` + 1 entries (the examples, then the padding cut
    into pieces of at most `max_len` tokens, then empty sequences); `max_len` is the kernel's max_seqlen.
    sdpa/flex: `rows` rows of `tokens // rows` tokens. Either way the head sees `targets` gathered positions
    (`target_index`), the real ones first and then padding entries whose target is ignored."""

    attention: str
    tokens: int
    rows: int
    sequences: int
    targets: int
    max_len: int
    fill: float = 1.0   # mean share of real tokens in the micro-batches it was made for

    def describe(self) -> str:
        layout = (f"1 x {self.tokens:,} tokens, {self.sequences} sequences of at most {self.max_len}"
                  if self.attention == "varlen" else f"{self.rows} x {self.tokens // self.rows:,} tokens")
        return f"{layout}, {self.targets:,} target rows; {100 * (1 - self.fill):.1f}% padding"


def round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-int(n) // multiple) * multiple)


def targets_of(example: dict) -> int:
    """Positions of an example that are trained on once packed: its labels after the first (the first label is
    ignored in a packed row, see PackedCollator)."""
    return sum(1 for label in _labels_of(example)[1:] if label != IGNORE_INDEX)


def static_shape_for(groups: Sequence[Sequence[int]], lengths: Sequence[int], targets: Sequence[int],
                     attention: str, row_len: int, multiple: int = 64) -> StaticShape:
    """The smallest StaticShape that holds every group (micro-batch) of `groups`: token count rounded up to
    `multiple`, and for varlen room for the examples plus the padding pieces of the emptiest micro-batch."""
    if attention not in PACKING_ATTENTIONS:
        raise ValueError(f"packing attention must be one of {PACKING_ATTENTIONS}, got {attention!r}")
    used = [sum(lengths[i] for i in g) for g in groups]
    most_targets = round_up(max(sum(targets[i] for i in g) for g in groups), multiple)
    if attention == "varlen":
        tokens = round_up(max(used), multiple)
        max_len = max(lengths[i] for g in groups for i in g)
        sequences = max(len(g) + -(-(tokens - u) // max_len) for g, u in zip(groups, used))
        return StaticShape(attention, tokens, 1, sequences, min(most_targets, tokens), max_len,
                           sum(used) / (tokens * len(groups)))
    rows = max(len(pack_into_rows([lengths[i] for i in g], row_len)) for g in groups)
    width = max(row_len, max(lengths[i] for g in groups for i in g))
    tokens = rows * width
    return StaticShape(attention, tokens, rows, 0, min(most_targets, tokens), width,
                       sum(used) / (tokens * len(groups)))


@dataclass
class PackedCollator:
    """Packs the examples of one batch into rows; output depends on the attention kernel (module docstring).

    Every output has input_ids, labels and position_ids of shape [rows, length] and no attention_mask (the
    position ids define the examples); "varlen" packs into one row and adds the cumulative sequence lengths
    its kernel needs (`cu_seq_lens_q/k`, `max_length_q/k`: names transformers forwards to the attention).
    Every output also lists the positions the loss reads (`target_index` into the flattened rows, `target_ids`,
    `n_targets`), worked out here on the CPU so that the loss never has to ask the GPU which positions carry a
    label (each such question stops the CPU until the GPU has caught up).

    With `static`, every batch that fits is padded to that one shape (StaticShape); one that does not (more
    tokens, sequences or targets than the run was planned for) comes out unpadded with `static: False`.
    """

    pad_token_id: int
    row_len: int
    attention: str = "sdpa"
    segment_ids: bool = False  # also return which example each position holds (-1: padding), for per-example sums
    static: StaticShape | None = None

    def __post_init__(self):
        if self.attention not in PACKING_ATTENTIONS:
            raise ValueError(f"packing attention must be one of {PACKING_ATTENTIONS}, got {self.attention!r}")
        if self.static is not None and self.static.attention != self.attention:
            raise ValueError(f"static shape for {self.static.attention}, collator for {self.attention}")

    def __call__(self, examples: list[dict]) -> dict:
        lengths = [len(e["input_ids"]) for e in examples]
        if self.attention == "varlen":
            rows = [list(range(len(examples)))]
        else:
            rows = pack_into_rows(lengths, self.row_len)
        shape = self._static_fit(examples, lengths, rows)
        width = max(sum(lengths[i] for i in row) for row in rows)
        n_rows = len(rows)
        if shape is not None:
            n_rows, width = shape.rows, shape.tokens // shape.rows
        ids = torch.full((n_rows, width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((n_rows, width), IGNORE_INDEX, dtype=torch.long)
        # Pad positions continue counting from 0 so transformers' packed-sequence detection (flex) sees the
        # padding as one more "example", never as part of the last real one.
        positions = torch.zeros((n_rows, width), dtype=torch.long)
        segments = torch.full((n_rows, width), -1, dtype=torch.long)
        for r, row in enumerate(rows):
            start = 0
            for i in row:
                n = lengths[i]
                ids[r, start:start + n] = torch.tensor(_as_list(examples[i]["input_ids"]))
                example_labels = torch.tensor(_labels_of(examples[i]))
                example_labels[0] = IGNORE_INDEX  # the previous example's last token must not predict this
                labels[r, start:start + n] = example_labels
                positions[r, start:start + n] = torch.arange(n)
                segments[r, start:start + n] = i
                start += n
            positions[r, start:] = torch.arange(width - start)
        for r in range(len(rows), n_rows):
            positions[r] = torch.arange(width)
        batch = {"input_ids": ids, "labels": labels, "position_ids": positions}
        if self.segment_ids:
            batch["segment_ids"] = segments
        if self.attention == "varlen":
            bounds = [0] + list(_cumsum(lengths))
            max_len = max(lengths)
            if shape is not None:
                bounds, max_len = _padded_bounds(bounds, shape), shape.max_len
                for a, b in zip(bounds[len(lengths):-1], bounds[len(lengths) + 1:]):
                    positions[0, a:b] = torch.arange(b - a)  # each padding piece is a sequence of its own
            cu = torch.tensor(bounds, dtype=torch.int32)
            batch.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max_len, max_length_k=max_len)
        batch.update(target_positions(labels, shape.targets if shape is not None else None))
        if self.static is not None:
            batch["static"] = shape is not None
        return batch

    def _static_fit(self, examples: list[dict], lengths: list[int], rows: list[list[int]]) -> StaticShape | None:
        shape = self.static
        if shape is None or sum(targets_of(e) for e in examples) > shape.targets:
            return None
        if self.attention == "varlen":
            pieces = -(-(shape.tokens - sum(lengths)) // shape.max_len) if sum(lengths) <= shape.tokens else 0
            fits = (sum(lengths) <= shape.tokens and max(lengths) <= shape.max_len
                    and len(lengths) + pieces <= shape.sequences)
        else:
            width = shape.tokens // shape.rows
            fits = len(rows) <= shape.rows and all(sum(lengths[i] for i in row) <= width for row in rows)
        return shape if fits else None


def _padded_bounds(bounds: list[int], shape: StaticShape) -> list[int]:
    """cu_seq_lens of a static varlen row: the examples', then the padding in pieces of at most max_len tokens
    (a kernel computes no row beyond max_len, so one long padding sequence would leave garbage that backward
    multiplies by zero into NaN), then empty sequences up to `shape.sequences`."""
    out = list(bounds)
    while out[-1] < shape.tokens:
        out.append(min(out[-1] + shape.max_len, shape.tokens))
    out += [shape.tokens] * (shape.sequences + 1 - len(out))
    return out


def target_positions(labels: torch.Tensor, size: int | None = None) -> dict:
    """Where the loss reads: position p of the flattened rows predicts token p + 1 when that token's label is not
    ignored. -> target_index (positions), target_ids (their targets), n_targets; padded to `size` entries with
    position 0 and an ignored target."""
    following = torch.full_like(labels, IGNORE_INDEX)
    following[:, :-1] = labels[:, 1:]
    following = following.flatten()
    index = (following != IGNORE_INDEX).nonzero().flatten()
    n = int(index.numel())
    size = n if size is None else size
    target_index = torch.zeros(size, dtype=torch.long)
    target_ids = torch.full((size,), IGNORE_INDEX, dtype=torch.long)
    target_index[:n] = index
    target_ids[:n] = following[index]
    return {"target_index": target_index, "target_ids": target_ids, "n_targets": n}


def _cumsum(values: Sequence[int]) -> Iterator[int]:
    total = 0
    for v in values:
        total += v
        yield total


# --- the varlen attention implementation ---------------------------------------------------------------------

def _torch_varlen_kernel() -> Callable | None:
    """PyTorch's built-in flash varlen attention (torch >= 2.9, CUDA), adapted to one calling convention."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters

    def kernel(q, k, v, cu, max_len, scale, window=None):
        if k.shape[1] != q.shape[1] and "enable_gqa" not in params:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        extra = {"scale": scale} if "scale" in params else {}
        if "enable_gqa" in params:
            extra["enable_gqa"] = k.shape[1] != q.shape[1]
        if "window_size" in params:
            extra["window_size"] = (window - 1 if window else -1, 0)
        elif window:
            raise NotImplementedError("this torch's varlen_attn has no sliding window")
        else:
            extra["is_causal"] = True
        return varlen_attn(q, k, v, cu, cu, max_len, max_len, **extra)

    return kernel


def _flash_attn_varlen_kernel() -> Callable | None:
    try:
        from flash_attn import flash_attn_varlen_func
    except Exception:  # ImportError, or an undefined symbol in a mismatched build
        return None

    def kernel(q, k, v, cu, max_len, scale, window=None):
        return flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, softmax_scale=scale, causal=True,
                                      window_size=(window - 1 if window else -1, 0))

    return kernel


def segment_sdpa_kernel(q, k, v, cu, max_len, scale, window=None):
    """Reference varlen kernel: causal SDPA on each example in turn. Correct anywhere, slow; used on CPU."""
    del max_len
    out = torch.empty_like(q)
    bounds = cu.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end == start:
            continue  # an empty sequence (static shapes fill cu_seq_lens up with them)
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))  # [heads, n, dim]
        n = end - start
        allowed = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        if window:
            allowed &= ~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(-window)
        out[start:end] = torch.nn.functional.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=allowed, scale=scale, enable_gqa=ks.shape[0] != qs.shape[0]).transpose(0, 1)
    return out


def varlen_kernels() -> dict[str, Callable]:
    """Variable-length kernels that import here, best first."""
    found = {"flash_attn": _flash_attn_varlen_kernel(), "torch_varlen": _torch_varlen_kernel()}
    return {name: k for name, k in found.items() if k is not None}


@functools.lru_cache(maxsize=None)
def varlen_kernel_status(device: str = "cuda") -> tuple[str | None, str]:
    """-> (name of the first varlen kernel that runs *and* agrees with SDPA here, reason)."""
    if not torch.cuda.is_available():
        return None, "no GPU: varlen kernels need one"
    reasons = []
    for name, kernel in varlen_kernels().items():
        try:
            torch.manual_seed(0)
            lens = [5, 11, 3]
            cu = torch.tensor([0, 5, 16, 19], dtype=torch.int32, device=device)
            q = torch.randn(19, 4, 64, device=device, dtype=torch.bfloat16)
            k = torch.randn(19, 2, 64, device=device, dtype=torch.bfloat16)
            v = torch.randn(19, 2, 64, device=device, dtype=torch.bfloat16)
            got = kernel(q, k, v, cu, max(lens), 0.125)
            want = segment_sdpa_kernel(q.float(), k.float(), v.float(), cu, max(lens), 0.125)
            err = float((got.float() - want).norm() / want.norm())
            if not err < 2e-2:
                reasons.append(f"{name}: wrong result (relative error {err:.3g})")
                continue
            return name, f"{name} runs and matches SDPA (relative error {err:.1e})"
        except Exception as e:  # a kernel that imports but fails on this GPU is simply not used
            reasons.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    return None, "; ".join(reasons) or "neither flash-attn nor torch.nn.attention.varlen is available"


def packed_mask_placeholder(input_ids: torch.Tensor) -> torch.Tensor:
    """What a varlen-packed batch passes as attention_mask: an empty 4-D tensor. transformers returns a 4-D mask
    as it is instead of building one, and building one would read the GPU (its packed-sequence check ends in a
    Python bool): a host sync in every forward, which also makes the forward impossible to record in a CUDA graph.
    The varlen attention keeps examples apart by cu_seq_lens and never reads it."""
    return input_ids.new_empty((1, 1, 0, 0), dtype=torch.bool)


@functools.lru_cache(maxsize=None)
def varlen_static_status(name: str, device: str = "cuda") -> tuple[bool, str]:
    """-> (can kernel `name` run static-shape rows, reason): cu_seq_lens ending in empty sequences and padding cut
    into pieces must give the examples exactly what the plain call gives them, and finite values everywhere."""
    kernel = varlen_kernels().get(name)
    if kernel is None or not torch.cuda.is_available():
        return False, f"{name} is not available here"
    try:
        torch.manual_seed(0)
        q = torch.randn(32, 4, 64, device=device, dtype=torch.bfloat16)
        k = torch.randn(32, 2, 64, device=device, dtype=torch.bfloat16)
        v = torch.randn(32, 2, 64, device=device, dtype=torch.bfloat16)
        plain = kernel(q[:19], k[:19], v[:19], torch.tensor([0, 5, 16, 19], dtype=torch.int32, device=device),
                       11, 0.125)
        # the same three examples, then 13 padding tokens as pieces of at most 11, then two empty sequences
        cu = torch.tensor([0, 5, 16, 19, 30, 32, 32, 32], dtype=torch.int32, device=device)
        static = kernel(q, k, v, cu, 11, 0.125)
        if not bool(torch.isfinite(static).all()):
            return False, f"{name}: non-finite values with empty sequences"
        err = float((static[:19].float() - plain.float()).abs().max())
        if err > 1e-3:
            return False, f"{name}: empty sequences change the result (max difference {err:.2g})"
        return True, f"{name} takes padded rows with empty sequences"
    except Exception as e:
        return False, f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def make_varlen_attention(kernel: Callable) -> Callable:
    """A transformers attention function over a [1, T] row, driven by the cu_seq_lens the collator made.

    A batch without cu_seq_lens (evaluation, scoring or generation with the model being trained) is not packed:
    it goes through plain SDPA with the mask transformers built for it (see `_varlen_mask`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def varlen_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                                 sliding_window=None, cu_seq_lens_q=None, max_length_q=None, **kwargs):
        if cu_seq_lens_q is None:
            if attention_mask is not None and attention_mask.numel() == 0:
                raise RuntimeError("steadytune_varlen attention: the packed-mask placeholder came without cu_seq_lens")
            if attention_mask is None and sliding_window and query.shape[2] > sliding_window:
                # No mask means plain causal attention, which would ignore the sliding window here.
                raise RuntimeError("steadytune_varlen attention: pass an attention_mask for unpacked sequences "
                                   "longer than the sliding window")
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, **kwargs)
        if query.shape[0] != 1:
            raise RuntimeError(f"steadytune_varlen attention expects one packed row, got batch {query.shape[0]}")
        # transformers hands [batch, heads, length, dim]; varlen kernels take [tokens, heads, dim].
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
        run = kernel
        if q.dtype not in (torch.float16, torch.bfloat16):
            # fp32 weights under autocast (full fine-tuning) give fp32 q/k after RoPE; flash kernels take only
            # fp16/bf16, so cast as autocast casts SDPA's inputs; without autocast use the exact reference kernel.
            if torch.is_autocast_enabled(q.device.type):
                low = torch.get_autocast_dtype(q.device.type)
                q, k, v = q.to(low), k.to(low), v.to(low)
            else:
                run = segment_sdpa_kernel
        cu = cu_seq_lens_q.to(device=q.device, dtype=torch.int32)
        max_len = int(max_length_q)
        # A window no example is longer than changes nothing (Gemma 3's 512 under a cutoff_len of 256): drop it,
        # so kernels without sliding-window support still run.
        window = sliding_window if sliding_window and sliding_window < max_len else None
        out = run(q, k, v, cu, max_len, scaling, window)
        return out[None], None  # [1, T, heads, dim], as the other implementations return

    return varlen_attention_forward


def _varlen_mask(*args, attention_mask=None, **kwargs):
    """Mask for the "steadytune_varlen" implementation: none for packed rows (they come without an
    attention_mask; the kernel keeps examples apart by cu_seq_lens, and a [T, T] mask would cost memory for
    nothing), SDPA's mask for padded batches so their fallback is exact (padding, sliding windows)."""
    if attention_mask is None:
        return None
    from transformers.masking_utils import sdpa_mask
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register_varlen_attention(kernel: Callable) -> str:
    """Make "steadytune_varlen" a transformers attention implementation backed by `kernel`; -> its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(VARLEN_IMPLEMENTATION, make_varlen_attention(kernel))
    AttentionMaskInterface.register(VARLEN_IMPLEMENTATION, _varlen_mask)
    return VARLEN_IMPLEMENTATION


def attn_implementation_for(packing_attention: str, kernel: Callable | None = None) -> str:
    """The transformers attn_implementation a model needs for this packing attention."""
    if packing_attention == "varlen":
        if kernel is None:
            raise ValueError("varlen packing needs a kernel (see varlen_kernel_status)")
        return register_varlen_attention(kernel)
    if packing_attention == "flex":
        return "flex_attention"
    return "sdpa"


@dataclass
class PackingPlan:
    """How `train` packs: the attention over packed rows and the attn_implementation the model is loaded with."""

    attention: str            # varlen | sdpa | flex
    attn_implementation: str  # transformers' name: steadytune_varlen | sdpa | flex_attention


def plan_packing(cfg, info, class_weighted_loss: bool) -> PackingPlan | None:
    """None when `train` does not pack; else the attention chosen for this hardware (hardware.py's policy, the
    one `doctor` reports). Both choices are recorded with cfg.decide."""
    from steadytune.errors import UserError
    from steadytune.hardware import AttentionUnavailable, choose_packing_attention

    if not decide_packing(cfg, class_weighted_loss, info):
        return None
    try:
        attention, kernel, why = choose_packing_attention(info, cfg.data.packing_attention)
    except AttentionUnavailable as e:
        raise UserError(f"packing_attention: {e}") from None
    implementation = attn_implementation_for(attention, varlen_kernels()[kernel] if kernel else None)
    cfg.decide("packing_attention", attention, why)
    cfg.decide("attn_implementation", implementation, f"set by packing_attention {attention}")
    return PackingPlan(attention, implementation)


def decide_packing(cfg, class_weighted_loss: bool, info=None) -> bool:
    """Whether `train` packs its micro-batches; records the choice and why with cfg.decide."""
    d = cfg.data
    if cfg.method.stage == "pt":
        # Pre-training rows are already full cutoff_len blocks (or single truncated texts): nothing to pack.
        cfg.decide("packing", d.packing is not False, "stage pt: packing concatenates the texts into cutoff_len blocks "
                   "(LLaMA-Factory's pt packing, on by default); the blocks are batched as they are")
        return False
    asked = bool(d.packing or d.neat_packing)
    if asked and class_weighted_loss:
        cfg.decide("packing", False, "packing asked for, but class_balance loss weights need padded rows; unpacked")
        return False
    if asked:
        cfg.decide("packing", True, "packing: true -> token-budget micro-batches packed into rows, position ids "
                                    "restart per example, attention kept inside each example")
        return True
    if d.packing is False:
        cfg.decide("packing", False, "packing: false")
        return False
    # Unset: on where it was measured faster (same loss either way: tests/test_train_packing.py).
    if class_weighted_loss:
        cfg.decide("packing", False, "off by default: class_balance loss weights need padded rows")
        return False
    backend = getattr(info, "backend", "cpu")
    if backend == "cpu":
        cfg.decide("packing", True, "on by default on CPU: the demo's step is ~1.16x faster packed "
                                    "(benchmarks/cpu_demo_speed.py); set packing: false for fixed-size batches")
        return True
    if backend == "cuda":
        cfg.decide("packing", True, "on by default on GPU: the GPU-sized demo trains 1.5x more examples/s packed "
                                    "(H200: 336 vs 219 reviews/s); set packing: false for fixed-size batches")
        return True
    # ROCm: the same code runs (SDPA block mask where no varlen kernel works) but has not been timed there.
    cfg.decide("packing", False, f"off by default on {backend}: not measured there; set packing: true to pack")
    return False
