"""Sequence tiling: each decoder layer, the final norm and the loss computed a tile of tokens at a time, so that a
long sequence costs each layer's input in activation memory (which activation_offloading can keep in host memory)
and one tile's working set, instead of [tokens, intermediate] MLP products, fp32 norm copies and attention outputs
of the whole sequence.

Why: at 1,000,000 tokens the Qwen2.5-7B shape's MLP alone makes 3 x 36 GiB of gate/up/product a layer, its RMSNorm
keeps fp32 copies of [tokens, hidden] (13 GiB each) and its query and attention output are 6.7 GiB each; with
gradient checkpointing one layer's recompute still holds all of them at once. Arctic Long Sequence Training's
TiledMLP (arXiv 2506.13996) and Unsloth's tiled MLP compute the MLP a slice of tokens at a time; here the whole
layer is: everything in a decoder layer is per token except attention, and attention of a tile of queries needs
only the keys and values before it, which under grouped-query attention are small (4 of Qwen2.5-7B's 28 heads).

How, for one decoder layer over a row of T tokens (`_LayerRun`):
- forward, without autograd: the keys and values of every token, a tile at a time (input norm, k/v projections,
  RoPE); then per tile of queries: input norm, q projection, RoPE, attention against the keys from the tile's
  first example's start (bottom-right causal: hardware/attention_kernels.py's tile kernels), o projection,
  residual, post-attention norm, MLP, residual. Only the layer's input is saved for backward (`_TiledLayer`).
- backward: the keys and values again (no autograd), then per tile, last first: the tile's forward with autograd
  from its input and from leaf copies of its keys and values, and its backward with the tile's slice of the
  incoming gradient; the tile's input gradient is kept and the key/value gradients are summed (fp32) over the
  tiles that read them; finally each tile's k/v projections are run again with autograd and given those sums.
  Parameter gradients (LoRA's) accumulate as the nested backward calls reach them, as in checkpointing's
  re-entrant form. The tiled layer thus replaces gradient checkpointing for its layers: it keeps what
  checkpointing keeps, and recomputes the forward once.
- the final norm and the loss run per tile too (`_TiledHeadLoss`): each tile's normed rows go through the chunked
  cross-entropy (training/loss.py) and its gradients are taken at once, so only the [tokens, hidden] gradient is
  kept until backward.

The numbers are the model's: the same per-token operations, and attention by a kernel checked against the
definition at start. Which runs are tiled, and the tile size, is the memory plan's decision (hardware/long_context.py);
micro-batches shorter than `min_tokens` (evaluation, short examples) run the model's own forward.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import weakref
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from steadytune.hardware.attention_kernels import tile_attention_reference, tile_kernel_status, tile_kernels
from steadytune.hardware.moe_shape import moe_shape
from steadytune.model.anatomy import decoder_body, decoder_layers, output_head, text_config
from steadytune.model.attention import packed_mask_placeholder

# Decoder layers of these families have the layout the tiled forward reads (input_layernorm, self_attn with
# q/k/v/o_proj and an optional q_norm/k_norm, rotate-half RoPE, post_attention_layernorm, mlp).
TILED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# Tokens a tile: 8,192 tokens of the 7B shape's layer are ~2.4 GiB of working set (24 x hidden + 12 x intermediate
# bytes a token), small beside 1M-token layer inputs of 6.7 GiB, and long enough for the matmuls and the attention
# kernel to run at full speed.
DEFAULT_TILE_TOKENS = 8192
# Under grouped-query attention a flash backward expands each key/value head's gradient to its query heads; the
# tiled backward calls the kernel on groups of key/value heads so that the expansion stays under this many bytes.
KV_GRAD_EXPANSION_BYTES = 1 << 30


def tiling_blocker(model: torch.nn.Module, lora_dropout: float = 0.0) -> str | None:
    """Why this model's layers cannot be tiled here, or None."""
    config = text_config(model)
    model_type = getattr(config, "model_type", "?")
    if moe_shape(config) is not None:
        return "a mixture of experts' layers are not tiled (their routers see the whole sequence)"
    if model_type not in TILED_MODEL_TYPES:
        return f"model type {model_type}: tiled layers exist for {', '.join(TILED_MODEL_TYPES)}"
    layers = decoder_layers(model)
    if not layers:
        return "no decoder layers found"
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim")):
            return f"{type(layer).__name__} does not have the layout the tiled forward reads"
        if getattr(attn, "sliding_window", None):
            return "sliding-window attention is not tiled"
    if getattr(config, "attention_dropout", 0.0):
        return "attention dropout would need its random state replayed per tile"
    if lora_dropout:
        return "lora_dropout would need its random state replayed per tile (set lora_dropout: 0)"
    return None


def token_tiles(total: int, tile: int) -> list[tuple[int, int]]:
    return [(s, min(s + tile, total)) for s in range(0, total, tile)]


def tile_segments(docs: Sequence[tuple[int, int]], lo: int, hi: int) -> tuple[int, list[int], list[int]]:
    """The examples of a row that queries [lo, hi) belong to -> (the first one's start: where the tile's keys begin,
    cumulative query counts, cumulative key counts). `docs`: the row's examples as (start, end), in order, covering
    it. The keys of the segments are contiguous: every example but the first starts where the one before ends."""
    first = bisect.bisect_right([start for start, _ in docs], lo) - 1
    key_lo = docs[first][0]
    cu_q, cu_k = [0], [0]
    for start, end in docs[first:]:
        if start >= hi:
            break
        q_start, q_end = max(start, lo), min(end, hi)
        cu_q.append(cu_q[-1] + q_end - q_start)
        cu_k.append(q_end - key_lo)
    return key_lo, cu_q, cu_k


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of x [1, n, heads, dim] with cos/sin [n, dim] (as the tiled families apply it)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[None, :, None] + rotated * sin[None, :, None]


@dataclass
class TileRun:
    """One tiled micro-batch: its rows' examples as (start, end) lists, the tile size and the attention kernel."""
    docs: list[list[tuple[int, int]]]
    tile: int
    kernel: Callable


_ACTIVE: contextvars.ContextVar[TileRun | None] = contextvars.ContextVar("steadytune_tiling", default=None)


class _LayerRun:
    """A decoder layer's forward and backward, tile by tile (module docstring)."""

    def __init__(self, layer: torch.nn.Module, run: TileRun):
        self.layer, self.attn, self.run = layer, layer.self_attn, run
        self.head_dim = self.attn.head_dim
        self.scale = self.attn.scaling
        self.q_norm = getattr(self.attn, "q_norm", None)
        self.k_norm = getattr(self.attn, "k_norm", None)

    def _heads(self, projection: torch.nn.Module, h: torch.Tensor, norm) -> torch.Tensor:
        out = projection(h).view(*h.shape[:-1], -1, self.head_dim)
        return norm(out) if norm is not None else out

    def keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """k and v [n, kv_heads, dim] of tokens x [1, n, hidden]."""
        h = self.layer.input_layernorm(x)
        k = rope(self._heads(self.attn.k_proj, h, self.k_norm), cos, sin)[0]
        return k, self._heads(self.attn.v_proj, h, None)[0]

    def all_keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """k and v of a whole row x [1, T, hidden], a tile at a time (called without autograd)."""
        k = v = None
        for s, e in token_tiles(x.shape[1], self.run.tile):
            kt, vt = self.keys_values(x[:, s:e], cos[s:e], sin[s:e])
            if k is None:
                k = kt.new_empty((x.shape[1], *kt.shape[1:]))
                v = vt.new_empty((x.shape[1], *vt.shape[1:]))
            k[s:e], v[s:e] = kt, vt
        return k, v

    def attention(self, q, k, v, cu_q, cu_k) -> torch.Tensor:
        """The tile's attention. `k` and `v` are the keys and values its queries read, or lists of them split into
        groups of key/value heads (the backward's leaves: one kernel call per group)."""
        if isinstance(k, torch.Tensor):
            return self.run.kernel(q, k, v, cu_q, cu_k, self.scale)
        group = q.shape[1] // sum(part.shape[1] for part in k)
        parts, first = [], 0
        for kg, vg in zip(k, v):
            heads = kg.shape[1] * group
            parts.append(self.run.kernel(q[:, first:first + heads].contiguous(), kg, vg, cu_q, cu_k, self.scale))
            first += heads
        return torch.cat(parts, dim=1)

    def rest(self, x, cos, sin, k, v, cu_q, cu_k) -> torch.Tensor:
        """The layer's output for tokens x [1, n, hidden], given the keys and values its queries attend to."""
        h = self.layer.input_layernorm(x)
        q = rope(self._heads(self.attn.q_proj, h, self.q_norm), cos, sin)[0]
        o = self.attention(q, k, v, cu_q, cu_k)
        y = x + self.attn.o_proj(o.reshape(1, x.shape[1], -1))
        return y + self.layer.mlp(self.layer.post_attention_layernorm(y))

    def head_groups(self, keys: int, kv_heads: int, element_size: int) -> list[tuple[int, int]]:
        """Key/value heads split so that one backward kernel call expands at most KV_GRAD_EXPANSION_BYTES of key
        and value gradients (one head at least)."""
        group = self.attn.config.num_attention_heads // kv_heads
        per_head = 2 * keys * group * self.head_dim * element_size
        step = max(1, min(kv_heads, KV_GRAD_EXPANSION_BYTES // max(per_head, 1)))
        return [(g, min(g + step, kv_heads)) for g in range(0, kv_heads, step)]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for b in range(x.shape[0]):
            row_cos, row_sin = cos[min(b, cos.shape[0] - 1)], sin[min(b, sin.shape[0] - 1)]
            k, v = self.all_keys_values(x[b:b + 1], row_cos, row_sin)
            for s, e in token_tiles(x.shape[1], self.run.tile):
                key_lo, cu_q, cu_k = tile_segments(self.run.docs[b], s, e)
                out[b:b + 1, s:e] = self.rest(x[b:b + 1, s:e], row_cos[s:e], row_sin[s:e], k[key_lo:e], v[key_lo:e],
                                              cu_q, cu_k)
        return out

    def backward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, grad: torch.Tensor,
                 into_grad: bool = False) -> torch.Tensor:
        """d loss / d x from d loss / d output `grad`. `into_grad`: write it into `grad` itself (each tile's slice of
        `grad` is read before the tile's input gradient is written there), saving a [tokens, hidden] buffer."""
        gx = grad if into_grad else torch.empty_like(x)
        tiles = token_tiles(x.shape[1], self.run.tile)
        for b in range(x.shape[0]):
            row_cos, row_sin = cos[min(b, cos.shape[0] - 1)], sin[min(b, sin.shape[0] - 1)]
            with torch.no_grad():
                k, v = self.all_keys_values(x[b:b + 1], row_cos, row_sin)
            # the tiles' key/value gradients, summed in fp32 over the tiles that read them
            gk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
            gv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
            for s, e in reversed(tiles):
                key_lo, cu_q, cu_k = tile_segments(self.run.docs[b], s, e)
                groups = self.head_groups(e - key_lo, k.shape[1], k.element_size())
                # one leaf per group of heads (not slices of one leaf, whose gradients autograd would pad to the
                # whole tensor)
                kt = [k[key_lo:e, a:z].detach().contiguous().requires_grad_(True) for a, z in groups]
                vt = [v[key_lo:e, a:z].detach().contiguous().requires_grad_(True) for a, z in groups]
                xt = x[b:b + 1, s:e].detach().requires_grad_(True)
                z = self.rest(xt, row_cos[s:e], row_sin[s:e], kt, vt, cu_q, cu_k)
                torch.autograd.backward(z, grad[b:b + 1, s:e])
                gx[b:b + 1, s:e] = xt.grad
                for (a, z_), kg, vg in zip(groups, kt, vt):
                    gk[key_lo:e, a:z_] += kg.grad
                    gv[key_lo:e, a:z_] += vg.grad
                del z, xt, kt, vt
            del k, v
            for s, e in tiles:
                xt = x[b:b + 1, s:e].detach().requires_grad_(True)
                kt, vt = self.keys_values(xt, row_cos[s:e], row_sin[s:e])
                torch.autograd.backward((kt, vt), (gk[s:e].to(kt.dtype), gv[s:e].to(vt.dtype)))
                gx[b:b + 1, s:e] += xt.grad
        return gx


# Gradients the tiled functions made and handed to autograd: the layer below receives one as its incoming gradient
# with no other holder, and may write its own input gradient into it (_LayerRun.backward's into_grad).
_OWNED: dict[int, weakref.ref] = {}


def _own(tensor: torch.Tensor) -> torch.Tensor:
    for key in [key for key, ref in _OWNED.items() if ref() is None]:
        del _OWNED[key]
    _OWNED[id(tensor)] = weakref.ref(tensor)
    return tensor


def _owned(tensor: torch.Tensor) -> bool:
    ref = _OWNED.get(id(tensor))
    return ref is not None and ref() is tensor


def _autocast_state(device_type: str) -> tuple[str, bool, torch.dtype]:
    return device_type, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


class _TiledLayer(torch.autograd.Function):
    """A decoder layer that keeps only its input (and the rotary tables) for backward."""

    @staticmethod
    def forward(ctx, x, cos, sin, anchor, part: _LayerRun):
        # `anchor`: an empty tensor that requires grad, so that the output does whenever the layer has trainable
        # weights, also where x does not (the embeddings' output): the LoRA weights are not inputs of this function
        # (their gradients accumulate in the nested backward), and making x require grad instead would keep the
        # embeddings' output alive in the graph for the whole step
        del anchor
        ctx.part = part
        ctx.autocast = _autocast_state(x.device.type)
        ctx.save_for_backward(x, cos, sin)   # saved-tensor hooks see these: activation_offloading moves x
        return part.forward(x, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        x, cos, sin = ctx.saved_tensors
        device_type, enabled, dtype = ctx.autocast
        reuse = _owned(grad) and grad.dtype == x.dtype and grad.shape == x.shape
        # the forward ran under the caller's autocast; the recompute must run under the same one
        with torch.autocast(device_type, dtype=dtype, enabled=enabled), torch.enable_grad():
            gx = ctx.part.backward(x, cos, sin, grad if reuse else grad.contiguous(), into_grad=reuse)
        return (_own(gx) if ctx.needs_input_grad[0] else None), None, None, None, None


@dataclass
class _HeadRun:
    """The final norm and the loss over a flattened [tokens, hidden] x, per tile of tokens."""
    norm: Callable
    head: torch.nn.Module
    cross_entropy: Callable   # (head, rows, targets) -> summed loss (training/loss.labelled_cross_entropy_sum)
    tiles: list[tuple[int, int, int, int]]   # token tile [s, e) and the slice [a, b) of the targets it holds
    target_index: torch.Tensor
    target_ids: torch.Tensor


class _TiledHeadLoss(torch.autograd.Function):
    """Sum of the cross-entropy over labelled positions of norm(x), a tile at a time; gradients made in forward,
    so only d loss / d x ([tokens, hidden]) waits for backward."""

    @staticmethod
    def forward(ctx, x, part: _HeadRun, *params):
        gx = torch.zeros_like(x)
        gp = [torch.zeros_like(p) for p in params]
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        with torch.enable_grad():
            for s, e, a, b in part.tiles:
                if a == b:
                    continue
                xt = x[s:e].detach().requires_grad_(True)
                rows = part.norm(xt).index_select(0, part.target_index[a:b] - s)
                loss = part.cross_entropy(part.head, rows, part.target_ids[a:b])
                grads = torch.autograd.grad(loss, (xt, *params), allow_unused=True)
                gx[s:e] = grads[0]
                for acc, g in zip(gp, grads[1:]):
                    if g is not None:
                        acc += g
                total += loss.detach().float()
        ctx.gx, ctx.gp = gx, gp
        return total

    @staticmethod
    def backward(ctx, grad):
        gx = _own(ctx.gx.mul_(grad.to(ctx.gx.dtype)))
        return (gx, None, *(g * grad.to(g.dtype) for g in ctx.gp))


@dataclass(eq=False)
class SequenceTiling:
    """Tiled layers attached to a model: which micro-batches they take and how they run one."""
    model_ref: Callable
    tile: int
    min_tokens: int
    kernel: Callable
    kernel_name: str
    # module -> (the forward set on the instance before, or None for the class's; the forward it ran): put back by
    # remove_tiling
    originals: dict = field(default_factory=dict)

    def takes(self, inputs: dict) -> bool:
        ids = inputs.get("input_ids")
        return ids is not None and ids.numel() >= self.min_tokens and "pixel_values" not in inputs

    @contextlib.contextmanager
    def running(self, inputs: dict):
        """The decoder layers and the final norm run tiled inside this block, for these inputs."""
        token = _ACTIVE.set(TileRun(examples_of(inputs), self.tile, self.kernel))
        try:
            yield
        finally:
            _ACTIVE.reset(token)

    def body_inputs(self, inputs: dict) -> dict:
        """The decoder's inputs for a tiled run: an empty 4-D mask, so that transformers builds no [T, T] mask (the
        tiled attention keeps examples apart itself)."""
        return {**inputs, "attention_mask": packed_mask_placeholder(inputs["input_ids"])}

    def loss_sum(self, model, hidden: torch.Tensor, target_index: torch.Tensor, target_ids: torch.Tensor,
                 cross_entropy: Callable) -> torch.Tensor:
        """The final norm and the loss over the body's un-normed output `hidden` [rows, T, hidden] at the labelled
        positions (`target_index` into the flattened rows, ascending)."""
        norm = decoder_body(model).norm
        x = hidden.reshape(-1, hidden.shape[-1])
        starts = torch.tensor([s for s, _ in token_tiles(x.shape[0], self.tile)] + [x.shape[0]],
                              device=target_index.device)
        cuts = torch.searchsorted(target_index, starts).tolist()
        tiles = [(s, e, cuts[i], cuts[i + 1]) for i, (s, e) in enumerate(token_tiles(x.shape[0], self.tile))]
        head = output_head(model)
        params = [p for p in (*norm.parameters(), *head.parameters()) if p.requires_grad]
        part = _HeadRun(self.originals[norm][1], head, cross_entropy, tiles, target_index, target_ids)
        if not torch.is_grad_enabled():   # evaluation: the same sums, no gradients made
            total = torch.zeros((), dtype=torch.float32, device=x.device)
            for s, e, a, b in tiles:
                if a < b:
                    rows = part.norm(x[s:e]).index_select(0, target_index[a:b] - s)
                    total += cross_entropy(head, rows, target_ids[a:b]).float()
            return total
        return _TiledHeadLoss.apply(x, part, *params)


def examples_of(inputs: dict) -> list[list[tuple[int, int]]]:
    """Each row's examples as (start, end), covering the row: from cu_seq_lens (a varlen row), from where the position
    ids restart (packed rows; padding counts from 0 too, so it is an example of its own), else one example a row,
    with right padding (attention_mask zeros) as another."""
    ids = inputs["input_ids"]
    rows, length = ids.shape
    cu = inputs.get("cu_seq_lens_q")
    if cu is not None:
        bounds = [int(b) for b in cu.tolist()]
        return [[(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]]
    positions = inputs.get("position_ids")
    if positions is not None and positions.shape[-1] == length:
        starts = (positions.expand(rows, -1) == 0).nonzero().tolist()
        out = []
        for r in range(rows):
            cuts = sorted({0, *(c for row, c in starts if row == r)})
            out.append(list(zip(cuts, cuts[1:] + [length])))
        return out
    mask = inputs.get("attention_mask")
    if mask is not None and mask.dim() == 2:
        real = mask.sum(dim=1).tolist()
        return [[(0, int(n))] + ([(int(n), length)] if n < length else []) for n in real]
    return [[(0, length)] for _ in range(rows)]


def _layer_forward(layer: torch.nn.Module, original: Callable) -> Callable:
    def forward(hidden_states, *args, position_embeddings=None, **kwargs):
        run = _ACTIVE.get()
        if run is None:
            return original(hidden_states, *args, position_embeddings=position_embeddings, **kwargs)
        cos, sin = position_embeddings
        part = _LayerRun(layer, run)
        if torch.is_grad_enabled():
            return _TiledLayer.apply(hidden_states, cos, sin, _anchor(hidden_states.device), part)
        return part.forward(hidden_states, cos, sin)

    return forward


_ANCHORS: dict[torch.device, torch.Tensor] = {}


def _anchor(device: torch.device) -> torch.Tensor:
    if device not in _ANCHORS:
        _ANCHORS[device] = torch.empty(0, device=device, requires_grad=True)
    return _ANCHORS[device]


def _norm_forward(original: Callable) -> Callable:
    def forward(hidden_states, *args, **kwargs):
        if _ACTIVE.get() is not None:   # the tiled loss applies it, a tile at a time
            return hidden_states
        return original(hidden_states, *args, **kwargs)

    return forward


_ATTACHED: "weakref.WeakKeyDictionary[torch.nn.Module, SequenceTiling]" = weakref.WeakKeyDictionary()


def tile_kernel(device: torch.device) -> tuple[Callable, str]:
    """The tile attention kernel for `device` -> (kernel, its name and why): on a GPU the first flash varlen kernel
    that passes tile_kernel_status's check, elsewhere (or where none passes) the reference."""
    if device.type == "cuda":
        name, why = tile_kernel_status(str(device))
        if name is not None:
            return tile_kernels()[name], why
        return tile_attention_reference, f"reference (no flash varlen kernel passed: {why})"
    return tile_attention_reference, f"reference SDPA per example ({device.type})"


def attach_tiling(model: torch.nn.Module, tile: int = DEFAULT_TILE_TOKENS, min_tokens: int = 0,
                  kernel: tuple[Callable, str] | None = None) -> SequenceTiling:
    """Tile `model`'s decoder layers, final norm and loss for micro-batches of at least `min_tokens` tokens; -> the
    tiling (also found again with tiling_of). Callers check tiling_blocker first."""
    body = decoder_body(model)
    device = next(model.parameters()).device
    fn, name = kernel or tile_kernel(device)
    tiling = SequenceTiling(weakref.ref(model), tile, min_tokens, fn, name)
    for layer in decoder_layers(model):
        tiling.originals[layer] = (layer.__dict__.get("forward"), layer.forward)
        layer.forward = _layer_forward(layer, layer.forward)
    tiling.originals[body.norm] = (body.norm.__dict__.get("forward"), body.norm.forward)
    body.norm.forward = _norm_forward(body.norm.forward)
    _ATTACHED[body] = tiling
    return tiling


def tiling_of(model: torch.nn.Module) -> SequenceTiling | None:
    try:
        return _ATTACHED.get(decoder_body(model))
    except (AttributeError, TypeError):
        return None


def remove_tiling(model: torch.nn.Module) -> bool:
    """Put the layers' and the norm's own forwards back; -> whether tiling was attached."""
    tiling = _ATTACHED.pop(decoder_body(model), None) if tiling_of(model) is not None else None
    if tiling is None:
        return False
    for module, (own, _) in tiling.originals.items():
        if own is None:   # the class's forward: drop the instance's
            module.__dict__.pop("forward", None)
        else:
            module.forward = own
    return True
