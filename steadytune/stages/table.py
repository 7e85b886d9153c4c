"""The stages the recipe trains, by `stage:`: each record says what that stage does differently (base.py)."""

from __future__ import annotations

from steadytune.stages.base import Stage
from steadytune.stages.grpo import GRPO
from steadytune.stages.preference import PREFERENCE_STAGES
from steadytune.stages.sft import PT, SFT

STAGES: dict[str, Stage] = {"sft": SFT, "pt": PT, **PREFERENCE_STAGES, "grpo": GRPO}
