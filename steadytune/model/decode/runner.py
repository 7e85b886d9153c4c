"""Our own forward of the decode step for the decoder families it knows (Llama, Qwen2, Qwen3, Mistral without a
sliding window, Gemma 3's text model), reading the weights of the transformers modules in place (nothing is copied
but the LoRA banks).

Why not the model's own forward: one decode token per row is a few small matmuls between many smaller operations,
and transformers' layer code plus peft's wrappers spend them freely (a cast, a view, a mask broadcast, a LoRA
dropout, each a kernel). Here a step is
    embedding -> per layer: [norm] q k v (+ LoRA, an adapter per row: lora_bank.py) -> q/k norm + rotary + cache write
    -> attention over each row's real length (attention.py) -> o (+ LoRA) -> [residual add + norm] -> gate, up
    (+ LoRA) -> activation x up -> down (+ LoRA) -> [residual add + next norm] -> head
with the bracketed parts one kernel each on a GPU (ops.TritonOps), and q|k|v and gate|up each one matmul with one LoRA
kernel over their stacked weights (FusedProj: about 15 kernels a layer with LoRA on every projection, against about
30 for transformers + peft), and with the torch arithmetic of the transformers modules
themselves elsewhere (ops.TorchOps: the CPU path, equal to `generate` token for token). The batch records the whole
step, sampling included, as one CUDA graph (batch.py, graphs.py).

Rotary's cos/sin are tables over positions 0..capacity-1 made by the model's own rotary module (so every RoPE
variant it implements comes out the same), indexed by each row's length in the step. RoPE variants that change with
the sequence length (dynamic, longrope) are left to the model's own forward.

`make_runner` returns None for anything else (other families, DoRA, LoRA on the embedding, modules_to_save,
logit soft-capping in attention): the batch then runs the model's own forward.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import Optional

import torch

from steadytune.model.decode import slotcache
from steadytune.model.decode.lora_bank import FusedLoraBank, LoraBank, adapter_names, lora_parts
from steadytune.model.decode.norms import Norm, norm_of
from steadytune.model.decode.ops import TorchOps, TritonOps
from steadytune.model.kernel_builds import refusal
from steadytune.model.kernel_catalogue import device_arch

logger = logging.getLogger("steadytune.decode")

FAMILIES = {"llama", "qwen2", "qwen3", "mistral", "gemma3_text"}
ACTIVATIONS = {"SiLUActivation": "silu", "SiLU": "silu", "PytorchGELUTanh": "gelu_tanh",
               "GELUTanh": "gelu_tanh"}   # what the fused kernel computes for each activation module
KERNELS_ENV = "STEADYTUNE_DECODE_KERNELS"     # torch | triton | off (the model's own forward); default: auto
ATTENTION_ENV = "STEADYTUNE_DECODE_ATTENTION"  # split | sdpa; default: split with Triton kernels, else sdpa


@dataclass
class Proj:
    """A projection: its base layer (whatever module it is: nn.Linear, an fp8 or 4-bit one) and its LoRA bank."""
    base: torch.nn.Module
    bank: Optional[LoraBank]
    module: torch.nn.Module       # the model's module (peft's wrapper when it has LoRA), for refresh

    def __call__(self, x: torch.Tensor, index: torch.Tensor, ops) -> torch.Tensor:
        y = self.base(x)
        return ops.lora(self.bank, x, y, index) if self.bank is not None else y


@dataclass
class FusedProj:
    """Projections that read the same input (q|k|v, gate|up) as one matmul over their base weights stacked, and one
    LoRA bank for all of them: on a GPU a decode step's small matmuls cost their launch more than their arithmetic
    (q, k and v of the 0.5B shape took 4.2 us each, 1.6 MB of weights apiece: torch.profiler on an H100, 2026-12-06).
    The members' weights become views of the stacked tensor (stack_linears), so nothing is held twice."""
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    widths: list[int]
    bank: Optional[FusedLoraBank]
    modules: list                 # the model's modules (peft's wrappers), for refresh

    def __call__(self, x: torch.Tensor, index: torch.Tensor, ops) -> torch.Tensor:
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        return ops.lora(self.bank, x, y, index) if self.bank is not None else y


def stack_linears(bases: list) -> Optional[tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """(weight, bias) of plain frozen nn.Linear layers with one input, stacked along the output, each layer's own
    weight and bias then a view into them (in place: the model computes as before, and saving it writes the same
    tensors); None where they cannot be stacked (quantised or fp8 bases, sharded or trainable weights, mixed dtypes,
    some with a bias and some without). Layers stacked before (a runner planned again) are found as they are."""
    if not all(type(b) is torch.nn.Linear for b in bases):
        return None
    weights = [b.weight for b in bases]
    biases = [b.bias for b in bases]
    first = weights[0]
    if any(w.requires_grad or w.dtype != first.dtype or w.device != first.device or w.dim() != 2
           or w.shape[1] != first.shape[1] or type(w.data) is not torch.Tensor for w in weights):
        return None
    if any(b is None for b in biases) and not all(b is None for b in biases):
        return None
    return _stacked(weights), None if biases[0] is None else _stacked(biases)


def _stacked(parts: list) -> torch.Tensor:
    """One tensor over `parts` stacked along dim 0, whose rows the parts' .data become."""
    first = parts[0].data
    storage, offset = first.untyped_storage(), first.storage_offset()
    adjacent, at = True, offset
    for p in parts:
        d = p.data
        adjacent &= (d.is_contiguous() and d.untyped_storage().data_ptr() == storage.data_ptr()
                     and d.storage_offset() == at)
        at += d.numel()
    shape = (sum(p.shape[0] for p in parts),) + tuple(first.shape[1:])
    if adjacent:   # stacked already: a view over the same storage
        return first.new_empty(0).set_(storage, offset, shape, torch.empty(shape, device="meta").stride())
    with torch.no_grad():
        stacked = torch.cat([p.data for p in parts])
    at = 0
    for p in parts:
        p.data = stacked[at: at + p.shape[0]]
        at += p.shape[0]
    return stacked


@dataclass
class Layer:
    q: Proj
    k: Proj
    v: Proj
    o: Proj
    gate: Proj
    up: Proj
    down: Proj
    attn_in: Norm
    attn_out: Optional[Norm]      # Gemma's norm of the attention output before the residual add
    mlp_in: Norm
    mlp_out: Optional[Norm]       # Gemma's norm of the MLP output before the residual add
    q_norm: Optional[Norm]
    k_norm: Optional[Norm]
    act: torch.nn.Module
    act_name: Optional[str]
    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    kind: str                     # slotcache.FULL or SLIDING
    window: Optional[int]
    qkv: Optional[FusedProj] = None       # q, k and v as one matmul (Triton kernels: _fuse)
    gate_up: Optional[FusedProj] = None   # gate and up as one matmul


def choose_kernels(device: torch.device, wanted: Optional[str] = None) -> str:
    """torch, triton or off: `wanted`, else STEADYTUNE_DECODE_KERNELS, else Triton on a GPU that has it, unless a
    configuration of the kernels does not build (or spills) for the GPU's arch (model/kernel_builds.py): then the
    torch ops, with the reason logged."""
    wanted = wanted or os.environ.get(KERNELS_ENV, "auto")
    if wanted == "auto":
        if device.type != "cuda" or importlib.util.find_spec("triton") is None:
            return "torch"
        refused = refusal("decode_kernels", device_arch(device))
        if refused is not None:
            logger.warning("decode: the torch ops instead of the Triton kernels: %s", refused)
            return "torch"
        return "triton"
    if wanted not in ("torch", "triton", "off"):
        raise ValueError(f"{KERNELS_ENV} must be torch, triton, off or auto, got {wanted!r}")
    return wanted


def make_runner(model: torch.nn.Module, kernels: Optional[str] = None, attention: Optional[str] = None):
    """Our decode forward for this model, or None where it does not apply (the module docstring says when)."""
    device = next(model.parameters()).device
    chosen = choose_kernels(device, kernels)
    if chosen == "off":
        return None
    try:
        return DecodeRunner(model, chosen, attention)
    except ValueError as e:
        logger.info("decode: the model's own forward decodes (%s)", e)
        return None


class DecodeRunner:
    def __init__(self, model: torch.nn.Module, kernels: str = "torch", attention: Optional[str] = None):
        self.model = model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = slotcache.text_config(model)
        if config.model_type not in FAMILIES:
            raise ValueError(f"model type {config.model_type!r} is not one it knows")
        if getattr(config, "attn_logit_softcapping", None) is not None:
            raise ValueError("attention logit soft-capping")
        if getattr(config, "use_bidirectional_attention", False):
            raise ValueError("bidirectional attention")
        rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
        types = {p.get("rope_type", "default") for p in rope.values() if isinstance(p, dict)} or \
            {rope.get("rope_type", rope.get("type", "default"))}
        if types & {"dynamic", "longrope"}:
            raise ValueError(f"RoPE {sorted(types)} changes with the sequence length")
        kinds = slotcache.attention_kinds(model)
        if kinds is None:
            raise ValueError("cache layers the slot cache does not take")
        decoder = getattr(base, "model", None)
        if decoder is None or not hasattr(decoder, "layers") or not hasattr(base, "lm_head"):
            raise ValueError("not a decoder with .model.layers and .lm_head")
        if any(type(m).__name__ == "ModulesToSaveWrapper" for m in model.modules()):
            raise ValueError("modules_to_save (a whole module per adapter)")
        if lora_parts(decoder.embed_tokens) is not None:
            raise ValueError("LoRA on the embedding")
        self.names = adapter_names(model)
        self.embed = decoder.embed_tokens
        self.final_norm = norm_of(decoder.norm)
        self.rotary = decoder.rotary_emb
        self.layer_rope = getattr(self.rotary, "layer_types", None) is not None   # Gemma 3: a RoPE per kind
        self.head = self._proj(base.lm_head)
        self.softcap = getattr(config, "final_logit_softcapping", None)
        self.window = getattr(config, "sliding_window", None)
        self.layers = [self._layer(layer, kind) for layer, kind in zip(decoder.layers[: config.num_hidden_layers],
                                                                       kinds)]
        self.kernels = kernels
        if kernels == "triton":
            for layer in self.layers:
                layer.qkv = self._fuse([layer.q, layer.k, layer.v])
                layer.gate_up = self._fuse([layer.gate, layer.up])
        if attention is None:
            attention = os.environ.get(ATTENTION_ENV) or ("split" if kernels == "triton" else "sdpa")
        self.ops = TritonOps(attention) if kernels == "triton" else TorchOps(attention)
        self.tables: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def sampler(self):
        return self.ops.sampler

    # --- the plan ------------------------------------------------------------------------------------------
    def _proj(self, module: torch.nn.Module) -> Proj:
        parts = lora_parts(module)
        if parts is None:
            return Proj(module, None, module)
        return Proj(module.base_layer, LoraBank(parts, self.names) if parts else None, module)

    def _fuse(self, projs: list[Proj]) -> Optional[FusedProj]:
        """The projections as one FusedProj, or None where their bases cannot be stacked (stack_linears)."""
        stacked = stack_linears([p.base for p in projs])
        if stacked is None:
            return None
        weight, bias = stacked
        widths = [p.base.out_features for p in projs]
        members = [lora_parts(p.module) if p.bank is not None else None for p in projs]
        bank = FusedLoraBank(members, self.names, widths) if any(members) else None
        return FusedProj(weight, bias, widths, bank, [p.module for p in projs])

    def _layer(self, layer: torch.nn.Module, kind: str) -> Layer:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        names = ("q_proj", "k_proj", "v_proj", "o_proj")
        if attn is None or mlp is None or not all(hasattr(attn, n) for n in names) or \
                not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            raise ValueError(f"a decoder layer of another shape ({type(layer).__name__})")
        sandwich = hasattr(layer, "pre_feedforward_layernorm")   # Gemma 2/3: norms after each block too
        q = self._proj(attn.q_proj)
        heads = getattr(attn.config, "num_attention_heads")
        return Layer(
            q=q, k=self._proj(attn.k_proj), v=self._proj(attn.v_proj), o=self._proj(attn.o_proj),
            gate=self._proj(mlp.gate_proj), up=self._proj(mlp.up_proj), down=self._proj(mlp.down_proj),
            attn_in=norm_of(layer.input_layernorm),
            attn_out=norm_of(layer.post_attention_layernorm) if sandwich else None,
            mlp_in=norm_of(layer.pre_feedforward_layernorm if sandwich else layer.post_attention_layernorm),
            mlp_out=norm_of(layer.post_feedforward_layernorm) if sandwich else None,
            q_norm=norm_of(getattr(attn, "q_norm", None)), k_norm=norm_of(getattr(attn, "k_norm", None)),
            act=mlp.act_fn, act_name=ACTIVATIONS.get(type(mlp.act_fn).__name__),
            heads=heads, kv_heads=attn.config.num_key_value_heads, head_dim=attn.head_dim,
            scaling=float(attn.scaling), kind=kind, window=self.window if kind == slotcache.SLIDING else None)

    def adapter_index(self, adapter: Optional[str]) -> int:
        if adapter is None:
            return 0
        if adapter not in self.names:
            raise ValueError(f"adapter {adapter!r} is not in the decode banks ({self.names})")
        return self.names.index(adapter) + 1

    def banks(self) -> list[Proj]:
        projs = [self.head] + [p for layer in self.layers
                               for p in (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down)]
        fused = [f for layer in self.layers for f in (layer.qkv, layer.gate_up) if f is not None]
        return [p for p in projs + fused if p.bank is not None]

    def refresh(self) -> bool:
        """Copy the adapters' current weights into the banks (in place: recorded steps stay valid); when adapters were
        added (peft may have wrapped more projections), plan the model again -> whether the banks were rebuilt (the
        caller forgets its recorded steps)."""
        if adapter_names(self.model) != self.names:
            self.__init__(self.model, self.kernels, self.ops.attention_impl)
            return True
        for proj in self.banks():
            if isinstance(proj, FusedProj):
                proj.bank.copy([lora_parts(m) for m in proj.modules])
            else:
                proj.bank.copy(lora_parts(proj.module))
        return False

    def prepare(self, cache: slotcache.SlotCache) -> None:
        """Rotary tables for every position the cache holds (made again when it grew)."""
        capacity = cache.capacity
        kinds = sorted({layer.kind for layer in self.layers}) if self.layer_rope else ["all"]
        if all(k in self.tables and self.tables[k][0].shape[0] >= capacity for k in kinds):
            return
        weight = self.embed.weight
        positions = torch.arange(capacity, device=weight.device)[None, :]
        probe = torch.zeros(1, 1, dtype=weight.dtype, device=weight.device)
        with torch.no_grad():
            for kind in kinds:
                cos, sin = (self.rotary(probe, positions, kind) if self.layer_rope else self.rotary(probe, positions))
                self.tables[kind] = (cos[0].contiguous(), sin[0].contiguous())

    # --- the step ------------------------------------------------------------------------------------------
    def forward(self, state, cache: slotcache.SlotCache, rows: int, columns: int) -> torch.Tensor:
        """The first `rows` slots' next tokens through the model -> their logits [rows, vocab]. Reads the state's
        next ids, lengths and adapter indices; writes each row's new key and value at its length."""
        self.prepare(cache)
        ops = self.ops
        ids, lengths, index = state.next_ids[:rows, 0], state.lengths[:rows], state.adapter[:rows]
        targets = {}
        h = self.embed(ids)
        x = ops.norm(h, self.layers[0].attn_in)
        for i, layer in enumerate(self.layers):
            buffers = cache.layers[i]
            if layer.kv_heads not in targets and ops.name == "torch":   # the Triton kernel writes at the lengths
                first = torch.arange(rows * layer.kv_heads, device=ids.device).view(rows, layer.kv_heads)
                targets[layer.kv_heads] = (first * cache.capacity + lengths.view(-1, 1)).view(-1)
            cos, sin = self.tables[layer.kind if self.layer_rope else "all"]
            if layer.qkv is not None:
                q, k, v = layer.qkv(x, index, ops).split(layer.qkv.widths, dim=1)
            else:
                q, k, v = layer.q(x, index, ops), layer.k(x, index, ops), layer.v(x, index, ops)
            q = q.view(rows, layer.heads, layer.head_dim)
            k = k.view(rows, layer.kv_heads, layer.head_dim)
            v = v.view(rows, layer.kv_heads, layer.head_dim)
            q = ops.rotary_store(q, k, v, layer.q_norm, layer.k_norm, cos, sin, lengths, buffers.keys,
                                 buffers.values, targets.get(layer.kv_heads))
            a = ops.attention(q, buffers.keys, buffers.values, lengths, columns, layer.window, layer.scaling)
            h, x = ops.add_norm(h, layer.o(a.to(x.dtype), index, ops), layer.attn_out, layer.mlp_in)
            if layer.gate_up is not None:
                gate, up = layer.gate_up(x, index, ops).split(layer.gate_up.widths, dim=1)
            else:
                gate, up = layer.gate(x, index, ops), layer.up(x, index, ops)
            m = layer.down(ops.act_mul(gate, up, layer.act, layer.act_name), index, ops)
            following = self.layers[i + 1].attn_in if i + 1 < len(self.layers) else self.final_norm
            h, x = ops.add_norm(h, m, layer.mlp_out, following)
        logits = self.head(x, index, ops)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits
