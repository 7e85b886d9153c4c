"""A Qwen-VL vision tower's attention as one variable-length kernel call per block, instead of one SDPA call per image
and window.

Why: Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3.5 encode every image of a batch as one sequence of patches and keep the
images (and, in Qwen2.5-VL's windowed blocks, windows of 8 x 8 patches) apart by cumulative lengths, `cu_seqlens`.
transformers hands those to the attention only when the implementation's name says "flash"
(is_flash_attention_requested); any other implementation gets the sequence cut into pieces on the host
(`lengths.tolist()`, a GPU sync) and one attention call per piece. At the Qwen2.5-VL-3B shape with 512 x 512 images
that is 25 windows an image: about 3,700 SDPA calls and 32 syncs in a micro-batch of 4 rows, the GPU idle between
them.

How: "steadytune_flash_vision" is registered with transformers' AttentionInterface (a name with "flash" in it, so the
tower passes cu_seqlens) and set on the vision tower's config only: the language model keeps its own attention. It
runs the varlen kernel of hardware/attention_kernels.py without the causal mask (an image attends to all of itself).
Empty sequences at the end of cu_seqlens (a static layout's: data/multimodal/vision_layout.py) add nothing. The
reference kernel (SDPA per piece, as transformers' own path) runs the same layout on a CPU, for the tests.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import nn

from steadytune.hardware.attention_kernels import packed_inputs
from steadytune.model.vision import multimodal_body

VISION_VARLEN = "steadytune_flash_vision"


def make_vision_attention(kernel: Callable) -> Callable:
    """A transformers attention function over a tower's [1, heads, patches, dim] queries, kept to each piece of
    cu_seq_lens_q; without cu_seq_lens (a tower that never passes them) plain SDPA over the whole input."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def vision_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                                 cu_seq_lens_q=None, max_length_q=None, **kwargs):
        if cu_seq_lens_q is None:
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, **kwargs)
        q, k, v, run = packed_inputs(query, key, value, kernel)   # [patches, heads, dim]
        out = run(q, k, v, cu_seq_lens_q.to(device=q.device, dtype=torch.int32), int(max_length_q), scaling, None,
                  causal=False)
        return out[None], None   # [1, patches, heads, dim], as flash implementations return

    return vision_attention_forward


def vision_tower(model: nn.Module) -> nn.Module | None:
    return getattr(multimodal_body(model), "visual", None)


def cuts_by_cu_seqlens(model: nn.Module) -> bool:
    """Whether the model's vision tower keeps its images apart by cu_seqlens (the Qwen-VL towers)."""
    tower = vision_tower(model)
    if tower is None:
        return False
    for module in tower.modules():
        if type(module).__name__.endswith("VisionAttention"):
            return "cu_seqlens" in inspect.signature(module.forward).parameters
    return False


# Set on the tower: the implementation it had before use_vision_varlen, for restore_vision_attention.
PREVIOUS_ATTENTION = "steadytune_previous_attention"


def use_vision_varlen(model: nn.Module, kernel: Callable) -> None:
    """Run the vision tower's attention through `kernel` (module docstring), until restore_vision_attention."""
    from transformers import AttentionInterface

    AttentionInterface.register(VISION_VARLEN, make_vision_attention(kernel))
    tower = vision_tower(model)
    if tower.config._attn_implementation != VISION_VARLEN:
        setattr(tower, PREVIOUS_ATTENTION, tower.config._attn_implementation)
    tower.config._attn_implementation = VISION_VARLEN


def restore_vision_attention(model: nn.Module) -> None:
    """The tower's attention as it was loaded (after training: generation and scoring as transformers runs them)."""
    tower = vision_tower(model)
    if tower is not None and hasattr(tower, PREVIOUS_ATTENTION):
        tower.config._attn_implementation = getattr(tower, PREVIOUS_ATTENTION)
        delattr(tower, PREVIOUS_ATTENTION)
