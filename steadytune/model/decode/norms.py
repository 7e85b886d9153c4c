"""The RMSNorm modules of the decoder families our decode forward knows, as the kernels need them: weight, epsilon
and which of the two arithmetics transformers uses (llama style or gemma style)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class Norm:
    """An RMSNorm module and how it computes: llama style (normalise in fp32, cast, times the weight) or gemma style
    (normalise in fp32, times 1 + weight, cast)."""
    module: torch.nn.Module
    eps: float
    gemma: bool

    @property
    def weight(self) -> torch.Tensor:
        return self.module.weight


def norm_of(module: Optional[torch.nn.Module]) -> Optional[Norm]:
    """A Norm for a transformers RMSNorm module (None for None); ValueError for any other kind."""
    if module is None:
        return None
    if hasattr(module, "variance_epsilon") and hasattr(module, "weight"):
        return Norm(module, float(module.variance_epsilon), False)
    if type(module).__name__.startswith("Gemma") and hasattr(module, "eps") and hasattr(module, "weight"):
        return Norm(module, float(module.eps), True)
    raise ValueError(f"a norm this decoder does not know: {type(module).__name__}")
