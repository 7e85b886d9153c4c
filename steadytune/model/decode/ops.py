"""The small operations of our decode forward (runner.py), in two sets with the same calls:
- TorchOps: the arithmetic of the transformers modules themselves (their norms and activation are called; rotary as
  `apply_rotary_pos_emb` computes it), one torch op after another: the CPU path, and the reference the kernels are
  tested against;
- TritonOps (a GPU with Triton): each call one kernel (kernels/fused_triton.py): the residual add with the norm that
  follows it (and Gemma's norm of the addend before it), the q/k norms with rotary and the write of the new key and
  value into the slot cache, the activation with the product by `up`; attention and LoRA through their own kernels.

A recorded decode step replays every kernel anyway, but each one still costs a launch slot and a round trip through
memory: a 24-layer step drops from about 30 small kernels a layer to about 12 (see the module docstring of
runner.py for the count).
"""

from __future__ import annotations

from typing import Optional

import torch

from steadytune.model.decode.attention import decode_attention
from steadytune.model.decode.norms import Norm


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TorchOps:
    name = "torch"

    def __init__(self, attention: str = "sdpa"):
        self.attention_impl = attention

    def norm(self, h: torch.Tensor, norm: Norm) -> torch.Tensor:
        return norm.module(h)

    def add_norm(self, h: torch.Tensor, a: torch.Tensor, pre: Optional[Norm], norm: Norm):
        """-> (h + pre(a), norm of that): the residual stream after a block and the next block's input."""
        h = h + (pre.module(a) if pre is not None else a)
        return h, norm.module(h)

    def rotary_store(self, q, k, v, q_norm: Optional[Norm], k_norm: Optional[Norm], cos_table, sin_table,
                     lengths, keys, values, targets):
        """q [rows, heads, dim], k and v [rows, kv heads, dim]: the q/k norms (Qwen3, Gemma 3), rotary at each row's
        position, and the new key and value written to the cache -> q."""
        if q_norm is not None:
            q, k = q_norm.module(q), k_norm.module(k)
        cos, sin = cos_table[lengths][:, None], sin_table[lengths][:, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rows, heads, dim = k.shape
        keys.view(-1, dim).index_copy_(0, targets, k.reshape(rows * heads, dim).to(keys.dtype))
        values.view(-1, dim).index_copy_(0, targets, v.reshape(rows * heads, dim).to(values.dtype))
        return q

    def act_mul(self, gate: torch.Tensor, up: torch.Tensor, act: torch.nn.Module, act_name: str) -> torch.Tensor:
        return act(gate) * up

    def attention(self, q, keys, values, lengths, columns, window, scaling):
        return decode_attention(q, keys, values, lengths, columns, window, scaling, self.attention_impl)

    def lora(self, bank, x, y, index):
        return bank.apply(x, y, index, "torch")

    sampler = None   # sampling.sample_rows


class TritonOps(TorchOps):
    name = "triton"

    def __init__(self, attention: str = "split"):
        super().__init__(attention)
        from steadytune.model.decode.kernels import fused_triton, sample_triton  # lazy: Triton, where it runs
        self._fused = fused_triton
        self.sampler = sample_triton.sample_rows_triton

    def norm(self, h, norm):
        return self._fused.add_norm(h, None, None, norm)[1]

    def add_norm(self, h, a, pre, norm):
        return self._fused.add_norm(h, a, pre, norm)

    def rotary_store(self, q, k, v, q_norm, k_norm, cos_table, sin_table, lengths, keys, values, targets):
        return self._fused.rotary_store(q, k, v, q_norm, k_norm, cos_table, sin_table, lengths, keys, values)

    def act_mul(self, gate, up, act, act_name):
        if act_name is None:
            return super().act_mul(gate, up, act, act_name)
        return self._fused.act_mul(gate, up, act_name)

    def lora(self, bank, x, y, index):
        return bank.apply(x, y, index, "triton")
