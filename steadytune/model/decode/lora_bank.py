"""LoRA in the decode step with an adapter per row: every adapter of a projection stacked in one bank, and each row
picking its own by index (BGMV: batched gather matrix-vector, as Punica, S-LoRA and vLLM name it).

peft applies one adapter to a whole batch (or splits the batch by adapter with Python index lists, a host-to-device
copy per layer and adapter: a step that cannot be recorded). Here a projection's adapters sit in
    A [adapters + 1, r, in], B [adapters + 1, out, r], scale [adapters + 1]
(index 0 is "no adapter": zeros; ranks below the largest are padded with zeros, which adds nothing), and the rows'
indices are a tensor of the decode state: rows of different adapters share one batch and one recorded step, and
the row's index is just data. One kernel per projection on a GPU (kernels/bgmv_triton.py): y += scale[i] B[i] (A[i] x)
into the base output, and one per group of projections that share an input where runner.py stacks their base weights
(FusedLoraBank). The torch path (CPU, and where Triton is absent) computes each
adapter present in the bank over every row and keeps it where the row uses it: exactly peft's arithmetic for each
row, at the cost of one pass per adapter.

The banks hold copies: `refresh` copies the adapters' current weights in (in place, so recorded steps stay valid)
after an optimizer step has changed them (GRPO) and rebuilds the banks when adapters were added.
"""

from __future__ import annotations

from typing import Optional

import torch


def lora_parts(module: torch.nn.Module) -> Optional[dict]:
    """{adapter name: (lora_A weight, lora_B weight, scaling)} of a peft LoRA Linear layer, or None for a module
    without LoRA. Raises ValueError for LoRA this bank cannot apply (DoRA and other variants, a bias in lora_B, a
    merged adapter)."""
    if not (hasattr(module, "lora_A") and hasattr(module, "base_layer")):
        return None
    if getattr(module, "merged_adapters", None):
        raise ValueError("a merged LoRA adapter")
    if getattr(module, "lora_variant", None):
        raise ValueError("a LoRA variant (DoRA, ...)")
    parts = {}
    for name, a in module.lora_A.items():
        b = module.lora_B[name]
        if not isinstance(a, torch.nn.Linear) or not isinstance(b, torch.nn.Linear) or b.bias is not None:
            raise ValueError(f"LoRA adapter {name!r} is not a plain pair of linear layers")
        parts[name] = (a.weight, b.weight, float(module.scaling[name]))
    return parts


class LoraBank:
    """The stacked adapters of one projection."""

    def __init__(self, parts: dict, names: list[str]):
        self.names = names
        sample_a, sample_b, _ = next(iter(parts.values()))
        rank = max(a.shape[0] for a, _, _ in parts.values())
        n = len(names) + 1
        self.A = sample_a.new_zeros(n, rank, sample_a.shape[1])
        self.B = sample_b.new_zeros(n, sample_b.shape[0], rank)
        self.scale = torch.zeros(n, dtype=torch.float32, device=sample_a.device)
        self.present = [names.index(name) + 1 for name in parts]   # bank indices that hold an adapter
        self.scaling = [0.0] * n    # the same as Python numbers: the torch path multiplies by them as peft does
        self.copy(parts)

    def copy(self, parts: dict) -> None:
        with torch.no_grad():
            for name, (a, b, scaling) in parts.items():
                i = self.names.index(name) + 1
                self.A[i, : a.shape[0]].copy_(a)
                self.B[i, :, : b.shape[1]].copy_(b)
                self.scale[i] = scaling
                self.scaling[i] = scaling

    def apply(self, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor, kernels: str) -> torch.Tensor:
        """y (the base output for x [rows, in]) plus each row's adapter's product; `index` [rows] picks the adapter."""
        if kernels == "triton":
            from steadytune.model.decode.kernels.bgmv_triton import bgmv  # lazy: Triton, imported where it runs
            return bgmv(x, y, self.A, self.B, self.scale, index)
        out = y
        for i in self.present:
            a, b = self.A[i], self.B[i]
            delta = torch.nn.functional.linear(torch.nn.functional.linear(x.to(a.dtype), a), b) * self.scaling[i]
            out = torch.where((index == i)[:, None], out + delta, out)
        return out.to(y.dtype)


def adapter_names(model: torch.nn.Module) -> list[str]:
    return list(getattr(model, "peft_config", {}).keys())


class FusedLoraBank:
    """The adapters of projections that read the same input and whose base weights are stacked into one matmul
    (q|k|v, gate|up: runner.py), as one bank: the members' A stacked along the rank, B block-diagonal (member j's
    output columns read only member j's ranks; the zeros add exactly nothing), a scale per adapter and output column.
    One kernel then computes every member's LoRA for a row (kernels/bgmv_triton.py). Triton only: the torch path
    keeps one bank per projection, which is peft's arithmetic exactly."""

    def __init__(self, members: list, names: list[str], widths: list[int]):
        self.names = names
        self.widths = widths
        present = [m for m in members if m]
        sample_a = next(iter(present[0].values()))[0]
        self.ranks = [max((a.shape[0] for a, _, _ in m.values()), default=0) if m else 0 for m in members]
        n, total_rank, total_width = len(names) + 1, sum(self.ranks), sum(widths)
        self.A = sample_a.new_zeros(n, total_rank, sample_a.shape[1])
        self.B = sample_a.new_zeros(n, total_width, total_rank)
        self.scale = torch.zeros(n, total_width, dtype=torch.float32, device=sample_a.device)
        self.copy(members)

    def copy(self, members: list) -> None:
        with torch.no_grad():
            rank_at = width_at = 0
            for parts, rank, width in zip(members, self.ranks, self.widths):
                for name, (a, b, scaling) in (parts or {}).items():
                    i = self.names.index(name) + 1
                    self.A[i, rank_at: rank_at + a.shape[0]].copy_(a)
                    self.B[i, width_at: width_at + width, rank_at: rank_at + b.shape[1]].copy_(b)
                    self.scale[i, width_at: width_at + width] = scaling
                rank_at, width_at = rank_at + rank, width_at + width

    def apply(self, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor, kernels: str) -> torch.Tensor:
        if kernels != "triton":
            raise ValueError("a fused LoRA bank runs on the Triton kernel only (the torch path keeps one bank per "
                             "projection)")
        from steadytune.model.decode.kernels.bgmv_triton import bgmv  # lazy: Triton, imported where it runs
        return bgmv(x, y, self.A, self.B, self.scale, index)
