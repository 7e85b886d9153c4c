"""What the recipe asks of a training stage: one record of functions, looked up by `stage:` in STAGES (table.py).

The recipe (train.py) stays one loop; a stage only says what differs: how its data is read and tokenised, how a
micro-batch is collated and counted (tokens for sft, pairs or answers for the preference stages), what the model
is loaded as, the objective (a module with CausalLMObjective's interface: forward(batch) -> (loss sum, count)),
how it is evaluated during training, and (grpo) what it generates before each step. After training, `steadytune
eval` (evaluate.py) evaluates what was saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from steadytune.config import RunConfig


@dataclass(frozen=True)
class Stage:
    name: str
    model_task: str                                        # model.anatomy.CAUSAL_LM or SEQUENCE_SCORE
    prepare_data: Callable[[RunConfig, Any], Any]          # (cfg, tokenizer) -> data.PreparedData
    make_collator: Callable[[RunConfig, Any, Optional[str]], Optional[Callable]]  # (cfg, tokenizer, packing attention)
    count_units: Callable[[dict], int]                     # a micro-batch's share of the loss normaliser
    make_objective: Callable[[torch.nn.Module, RunConfig], torch.nn.Module]
    evaluate: Callable[..., dict]                          # (cfg, accelerator, objective, data, tokenizer, device)
    # the target tokens a micro-batch trains on (metrics' `tokens`, throughput); None: count_units already is that
    count_tokens: Optional[Callable[[dict], int]] = None
    # (objective, the step's micro-batches, the step, StepAhead) -> a callable or None: fills each micro-batch before
    # the step counts its units and runs forward (grpo: generates and scores the completions of the whole step at
    # once). What it returns, the recipe calls after the step's backward, before the optimizer step (`abandon=True`
    # when the step failed): grpo's asynchronous roll-outs finish the next step's completions there. None: nothing.
    roll_out: Optional[Callable[[torch.nn.Module, list, int, "StepAhead"], Optional[Callable[..., None]]]] = None


@dataclass(frozen=True)
class StepAhead:
    """What a stage may use to prepare the next step during this one (Stage.roll_out)."""
    upcoming: Optional[Callable[[], list]]   # the next step's micro-batches, taken from the stream early (None: last step)
    autocast: Callable[[], Any]              # the training forward's precision (Accelerate's autocast context)
    device: torch.device
    pool: list                               # the training examples (grpo's dynamic sampling draws replacements here)
