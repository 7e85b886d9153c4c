"""One GRPO roll-out after generation: the completions scored, DAPO's dynamic sampling, and the training batches.

- `score`: the episodes' text (stop tokens and special tokens dropped) scored by the reward functions
  (stages/rewards.py), each prompt's group turned into advantages;
- dynamic sampling (DAPO, Yu et al. 2025, arXiv:2503.14476, §3.2; `dynamic_sampling: true`): a group whose rewards
  are all equal has advantage 0 everywhere and trains nothing, so it is replaced by the group of another prompt,
  drawn from the training data by a key of (seed, step, the prompt it replaces, the round): the same replacements
  in a resumed run and on any number of processes. Up to `max_num_gen_batches` generation rounds a step (verl's key:
  the first counts); a group still without spread after them is kept, with advantage 0;
- `lay_out`: each micro-batch's prompt + completion sequences, the completion tokens labelled (the stop token
  included; the tool results of a tool episode and completions cut at max_completion_length with
  mask_truncated_completions not), and the counts the recipe reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from steadytune.data.encode import IGNORE_INDEX
from steadytune.model.decode.sampling import mix_key
from steadytune.stages.episodes import Generated
from steadytune.stages.grpo_losses import units_of
from steadytune.stages.rewards import Advantages, group_advantages, score as score_rewards

RESAMPLE = 0x5A3D   # mixed into a replacement group's keys: never a training step's own (seed, step, example) key


@dataclass
class RollOut:
    """A step's (or an evaluation's) completions, scored: one entry per completion, groups of num_generations."""
    examples: list[dict]
    generated: Generated
    texts: list[str]
    per_function: torch.Tensor          # [completions, functions], NaN where a function returned None
    advantages: Advantages
    replaced: list[bool] = field(default_factory=list)   # per group: dynamic sampling replaced its prompt
    rounds: int = 1                                       # generation rounds the step took


def completion_texts(tokenizer: Any, generated: Generated) -> list[str]:
    return tokenizer.batch_decode(generated.ids, skip_special_tokens=True)


def score(functions, weights: Sequence[float], examples: list[dict], generated: Generated, texts: list[str],
          group_size: int, scale_rewards: str, where: str, timeout: Optional[float],
          batch_std: Optional[Callable] = None) -> tuple[torch.Tensor, Advantages]:
    per_function = score_rewards(functions, [e["prompt"] for e in examples], texts, generated.ids,
                                 [e["columns"] for e in examples], [e["answer"] for e in examples], where, timeout)
    return per_function, group_advantages(per_function, weights, group_size, scale_rewards, batch_std)


# ---------------------------------------------------------------------------------------------------------
# Dynamic sampling
# ---------------------------------------------------------------------------------------------------------

def replacement_index(seed: int, step: int, replaced_id: int, round_: int, pool_size: int) -> int:
    """The training example that replaces the group of example `replaced_id` in `round_` of `step`."""
    return mix_key(seed, step, RESAMPLE, replaced_id, round_) % pool_size


def replacement_keys(seed: int, step: int, replaced_id: int, round_: int, group_size: int) -> list[int]:
    return [mix_key(seed, step, RESAMPLE, replaced_id, round_, g) for g in range(group_size)]


def flat_groups(no_signal: torch.Tensor, group_size: int) -> list[int]:
    """The groups (indices) whose completions carry no signal: equal rewards, or fewer than two that are numbers."""
    return [g for g in range(no_signal.numel() // group_size) if bool(no_signal[g * group_size])]


def splice(rows: list, group: int, group_size: int, new: list) -> None:
    rows[group * group_size:(group + 1) * group_size] = new


def merge_generated(target: Generated, group: int, group_size: int, new: Generated) -> None:
    """Put `new` (one group's rows) in place of group `group` of `target`."""
    for name in ("ids", "truncated", "nonfinite"):
        splice(getattr(target, name), group, group_size, list(getattr(new, name)))
    if target.trained is not None or new.trained is not None:
        if target.trained is None:
            target.trained = [[True] * len(ids) for ids in target.ids]
        splice(target.trained, group, group_size, new.trained or [[True] * len(ids) for ids in new.ids])
    for name in ("tool_calls", "tool_failures"):
        if getattr(target, name) or getattr(new, name):
            splice(getattr(target, name), group, group_size, list(getattr(new, name)) or [0] * group_size)


# ---------------------------------------------------------------------------------------------------------
# Training batches
# ---------------------------------------------------------------------------------------------------------

def sequence_of(example: dict, completion: list[int], trained: Optional[list[bool]], train_it: bool) -> dict:
    """One prompt + completion sequence: the completion's own tokens labelled (not the tool results), nothing when
    `train_it` is false (a cut completion with mask_truncated_completions). A prompt with images keeps its media
    references, grids and token types (the completion's tokens are text: type 0), for the collator's pixels."""
    prompt = list(example["input_ids"])
    if not train_it:
        labels = [IGNORE_INDEX] * len(completion)
    elif trained is None:
        labels = list(completion)
    else:
        labels = [t if mine else IGNORE_INDEX for t, mine in zip(completion, trained)]
    out = {"input_ids": prompt + list(completion), "labels": [IGNORE_INDEX] * len(prompt) + labels}
    for key, value in example.items():
        if key in ("images", "videos") or key.endswith("_grid_thw") or key == "second_per_grid_ts":
            out[key] = value
        elif key in ("token_type_ids", "mm_token_type_ids"):
            out[key] = list(value) + [0] * len(completion)
    if "token_type_ids" in out or "mm_token_type_ids" in out or "images" in out:
        out["attention_mask"] = [1] * len(out["input_ids"])
    return out


def lay_out(batch: dict, collate: Callable[[list[dict]], dict], rollout: RollOut, rows: range, loss_type: str,
            mask_truncated: bool) -> None:
    """Fill one micro-batch (its rows of the roll-out) with its training sequences and counts (in place)."""
    g = rollout.generated
    sequences = [sequence_of(rollout.examples[i], g.ids[i], g.trained[i] if g.trained is not None else None,
                             not (mask_truncated and g.truncated[i])) for i in rows]
    batch.update(collate(sequences))
    tokens = sum(1 for s in sequences for t in s["labels"] if t != IGNORE_INDEX)
    batch.update(advantages=rollout.advantages.advantages[rows.start:rows.stop].clone(), n_sequences=len(sequences),
                 n_target_tokens=tokens, n_units=units_of(loss_type, len(sequences), tokens),
                 n_input_tokens=sum(len(s["input_ids"]) for s in sequences))
    for key in ("old_logps", "ref_logps"):
        batch.pop(key, None)   # a re-rolled batch must not keep the log-probs of other completions
