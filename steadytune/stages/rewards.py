"""Reward functions of stage grpo, and the group advantages TRL's GRPOTrainer computes from them.

`reward_funcs` names each function: a built-in (below) or the user's own code as `module:function` (imported with
the current folder on the path, as `python -m` would) or `path/to/file.py:function`. Every function is called as TRL
calls one, `f(prompts=..., completions=..., completion_ids=..., **columns)`, with one list entry per completion
(the prompt repeated for each of its completions) and each column of the dataset rows by name, and returns one float
per completion, or None where it does not apply (a row without a reference answer; NaN says the same, as in TRL): None
is left out of that function's mean, and a completion every function leaves out gets advantage 0. Anything else it
does (raise, hang past reward_timeout, return another shape) stops the run in one line naming it and the step.

A reward function is code that runs in the training process, so it only ever comes from the user's own config or
command line: never from a dataset, an archive or a run folder (training/folder_config.py refuses a
`module:function` that a file in a run folder names; docs/security.md).

Built-ins:
- accuracy: 1 when the completion's final answer (the last \\boxed{...}, else what follows "####" or "answer:",
  else the whole completion) equals the reference, numerically when the reference is a number (the last number of
  the answer, commas and $ dropped, a fraction a/b read as one, within 1e-6), else as text (case, spaces and
  surrounding punctuation ignored); 0 otherwise; None without a reference. The reference is the `solution` column,
  else `answer`, else the row's own answer (alpaca `output`, the final assistant turn, the gold label).
- format: 1 when the completion matches `reward_format` (a regular expression matched at its start, `.` matching
  newlines: TRL's think_format_reward by default), else 0.
- label: classification data: 1 when the label read from the completion (eval.scoring.match_label, as `eval
  --mode generate` reads it) is the gold label, else 0; a completion that names two different labels (echoing the
  question's "消极或积极") has not chosen and gets 0.
- length: 1 - |tokens - length_target| / max_completion_length (tokens of the completion, its stop token included;
  length_target defaults to max_completion_length, so longer is better up to the cap).
- soft_overlong_punishment: DAPO's overlong reward shaping (Yu et al. 2025, arXiv:2503.14476, eq. 13; TRL's
  get_soft_overlong_punishment): 0 up to L_max - L_cache tokens, then falling linearly to -1 at L_max, -1 beyond;
  L_max is max_completion_length, L_cache `soft_punish_cache`. Added to a correctness reward, it takes away what an
  answer gains by running long, without punishing one that fits.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

import torch

from steadytune.config import ConfigError, show_value
from steadytune.errors import RunInterrupted, UserError
from steadytune.eval.scoring import match_label
from steadytune.stages.user_code import UserCodeTimeout, deadline, find_user_entry, load_user_function
from steadytune.training.folder_config import is_user_function

BUILTIN_REWARDS = ("accuracy", "format", "label", "length", "soft_overlong_punishment")
THINK_FORMAT = r"^<think>(?!.*<think>)(.*?)</think>.*$"   # TRL's think_format_reward


@dataclass
class RewardFunction:
    name: str                  # its metric name: rewards/<name>/mean
    call: Callable[..., list]
    weight: float = 1.0


# ---------------------------------------------------------------------------------------------------------
# Built-ins
# ---------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|-?\.\d+")
_ANSWER_CUE = re.compile(r"(?:####|answer\s*(?:is)?\s*[:：]?)\s*(.+)", re.IGNORECASE)


def _last_boxed(text: str) -> Optional[str]:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{") - 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None


def final_answer(text: str) -> str:
    """The part of a text that states its answer: the last \\boxed{...}, else what follows the last "####" or
    "answer:" / "answer is", else the text."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    cues = list(_ANSWER_CUE.finditer(text))
    return cues[-1].group(1).strip() if cues else text.strip()


def as_number(text: str) -> Optional[float]:
    """The number a short answer states (commas, $, % and a trailing period dropped; a/b as a fraction), or None."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace("%", "").rstrip(".").strip()
    fraction = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", cleaned)
    if fraction and float(fraction.group(2)) != 0:
        return float(fraction.group(1)) / float(fraction.group(2))
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _normalised(text: str) -> str:
    return " ".join(text.strip().strip("\"'“”‘’「」。.!！,，:：").split()).casefold()


def answer_matches(completion: str, reference: str) -> float:
    gold = final_answer(reference)
    gold_number = as_number(gold)
    answer = final_answer(completion)
    if gold_number is None:
        return float(_normalised(answer) == _normalised(gold))
    value = as_number(answer)
    if value is None:
        numbers = _NUMBER.findall(answer)
        value = as_number(numbers[-1]) if numbers else None
    return float(value is not None and math.isclose(value, gold_number, rel_tol=1e-6, abs_tol=1e-9))


def reference_of(columns: dict, reference: Any) -> Optional[str]:
    for key in ("solution", "answer"):
        value = columns.get(key)
        if value is not None and str(value).strip():
            return str(value)
    return None if reference is None or not str(reference).strip() else str(reference)


def accuracy_reward(prompts, completions, reference, **columns) -> list[Optional[float]]:
    out = []
    for i, completion in enumerate(completions):
        gold = reference_of({k: v[i] for k, v in columns.items()}, reference[i])
        out.append(None if gold is None else answer_matches(completion, gold))
    return out


def format_reward(pattern: str):
    compiled = re.compile(pattern, re.DOTALL | re.MULTILINE)

    def format(prompts, completions, **columns) -> list[float]:  # noqa: A001 - named as the built-in is
        return [1.0 if compiled.match(c) else 0.0 for c in completions]
    return format


def label_reward(label_names: Sequence[str]):
    names = list(label_names)

    def label(prompts, completions, **columns) -> list[Optional[float]]:
        gold = columns.get("label")
        if gold is None:
            raise ConfigError("reward_funcs: label needs classification data (a label column and label_names)")
        out = []
        for completion, g in zip(completions, gold):
            if g is None or str(g) not in names:
                out.append(None)
                continue
            out.append(float(match_label(completion, names) == names.index(str(g))))
        return out
    return label


def length_reward(max_completion_length: int, target: Optional[int]):
    goal = max_completion_length if target is None else target

    def length(prompts, completions, completion_ids, **columns) -> list[float]:
        return [1.0 - abs(len(ids) - goal) / max_completion_length for ids in completion_ids]
    return length


def soft_overlong_punishment(max_completion_length: int, soft_punish_cache: int):
    start = max_completion_length - soft_punish_cache   # where the punishment begins

    def punish(prompts, completions, completion_ids, **columns) -> list[float]:
        out = []
        for ids in completion_ids:
            n = len(ids)
            if n <= start:
                out.append(0.0)
            elif n <= max_completion_length:
                out.append((start - n) / soft_punish_cache)
            else:
                out.append(-1.0)
        return out
    return punish


# ---------------------------------------------------------------------------------------------------------
# Loading what reward_funcs names
# ---------------------------------------------------------------------------------------------------------

def default_punish_cache(m) -> int:
    """soft_punish_cache unset: a fifth of max_completion_length (DAPO's 4,096 of 20,480), at least one token."""
    return max(1, m.max_completion_length // 5)


def check_reward_names(m) -> None:
    """reward_funcs before the data and the weights load: each a built-in, or a module or file that exists (not yet
    imported: its code runs once, in load_reward_functions)."""
    for name in m.reward_funcs or []:
        name = str(name)
        if is_user_function(name):
            find_user_entry(name, "reward_funcs")
        elif name not in BUILTIN_REWARDS:
            raise ConfigError(f"reward_funcs: unknown reward {name!r}; built-ins are {', '.join(BUILTIN_REWARDS)}, "
                              "your own functions are module:function")


def load_reward_functions(m, label_names: Optional[Sequence[str]]) -> list[RewardFunction]:
    """The functions `reward_funcs` names (`m`: the method section), with `reward_weights` (default 1 each)."""
    names = list(m.reward_funcs or [])
    if not names:
        raise ConfigError("reward_funcs: stage grpo needs at least one reward function (a built-in: "
                          f"{', '.join(BUILTIN_REWARDS)}; or your own module:function)")
    weights = list(m.reward_weights) if m.reward_weights is not None else [1.0] * len(names)
    if len(weights) != len(names):
        raise ConfigError(f"reward_weights: {len(weights)} weights for {len(names)} reward_funcs")
    functions = []
    for name, weight in zip(names, weights):
        name = str(name)
        if is_user_function(name):
            call, metric = load_user_function(name, "reward_funcs"), name.rpartition(":")[2]
        elif name == "accuracy":
            call, metric = accuracy_reward, name
        elif name == "format":
            call, metric = format_reward(m.reward_format), name
        elif name == "label":
            if not label_names:
                raise ConfigError("reward_funcs: label needs classification data (label_names and a label column)")
            call, metric = label_reward(label_names), name
        elif name == "length":
            call, metric = length_reward(m.max_completion_length, m.length_target), name
        elif name == "soft_overlong_punishment":
            cache = m.soft_punish_cache if m.soft_punish_cache is not None else default_punish_cache(m)
            call, metric = soft_overlong_punishment(m.max_completion_length, cache), name
        else:
            raise ConfigError(f"reward_funcs: unknown reward {name!r}; built-ins are {', '.join(BUILTIN_REWARDS)}, "
                              "your own functions are module:function")
        if metric in {f.name for f in functions}:
            metric = name
        functions.append(RewardFunction(metric, call, float(weight)))
    return functions


# ---------------------------------------------------------------------------------------------------------
# Scoring and advantages
# ---------------------------------------------------------------------------------------------------------

class RewardFunctionError(UserError):
    """A reward function misbehaved (raised, hung, returned what is not one number or None per completion): one line
    naming it and the step. The run stops there; its checkpoints stay."""


# Rewards are compared within a group in float32 (weighted, summed, their spread squared): beyond this magnitude the
# arithmetic overflows (1e300 is inf in float32), so a larger value is a bug in the function, said as one.
MAX_REWARD = 1e9


def score(functions: Sequence[RewardFunction], prompts: list[str], completions: list[str],
          completion_ids: list[list[int]], columns: list[dict], references: list, where: str = "a roll-out",
          timeout: Optional[float] = None) -> torch.Tensor:
    """[completions, functions] rewards in fp32, NaN where a function returned None. Each function is the user's
    code, called within `timeout` seconds (None or 0: no limit); what it does wrong is a RewardFunctionError naming
    it and `where` (the step)."""
    keys = list(dict.fromkeys(k for row in columns for k in row))
    kwargs = {k: [row.get(k) for row in columns] for k in keys}
    kwargs.setdefault("reference", list(references))
    out = torch.full((len(completions), len(functions)), float("nan"))
    for j, f in enumerate(functions):
        values = call_reward(f, dict(kwargs, prompts=prompts, completions=completions, completion_ids=completion_ids),
                             where, timeout)
        for i, v in enumerate(checked_rewards(f, values, len(completions), where)):
            if v is not None:
                out[i, j] = v
    return out


def call_reward(f: RewardFunction, kwargs: dict, where: str, timeout: Optional[float]) -> Any:
    """f(**kwargs), its failures as one RewardFunctionError: an exception (SystemExit too: a function cannot end the
    run as a success), or running past `timeout`. A stop request (SIGINT, SIGTERM) passes through."""
    def failed(what: str) -> RewardFunctionError:
        return RewardFunctionError(f"reward function {f.name} at {where}: {what}; the run stops here (its last "
                                   "checkpoint is kept)")

    try:
        with deadline(timeout, f"reward function {f.name}", "reward_timeout"):
            return f.call(**kwargs)
    except UserCodeTimeout:
        raise failed(f"did not return within {timeout:g} s (reward_timeout: raise it for a slow judge, or find the "
                     "hang)") from None
    except RunInterrupted:
        raise
    except (Exception, SystemExit) as e:   # noqa: BLE001 - the user's code: whatever it raised, in one line
        detail = " ".join(str(e).split())[:200]
        raise failed(f"raised {type(e).__name__}" + (f": {detail}" if detail else "")) from None


def checked_rewards(f: RewardFunction, values: Any, n: int, where: str) -> list[Optional[float]]:
    """A function's return value as one float or None per completion (NaN read as None, as TRL reads it);
    RewardFunctionError saying what it returned instead (None, NaN or another scalar, text, another count, an entry
    that is text, infinite or beyond MAX_REWARD)."""
    def wrong(what: str) -> RewardFunctionError:
        return RewardFunctionError(f"reward function {f.name} at {where}: returned {what}; it must return a list of "
                                   f"{n} rewards (one per completion: a number, or None where it does not apply); the "
                                   "run stops here (its last checkpoint is kept)")

    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):   # a tensor or a numpy array
        values = values.tolist()
    if values is None or isinstance(values, (str, bytes, dict)) or not isinstance(values, Iterable):
        return_kind = "None" if values is None else f"{type(values).__name__} {show_value(values, 60)}"
        raise wrong(return_kind + " instead of a list")
    values = list(values)
    if len(values) != n:
        raise wrong(f"{len(values)} rewards for {n} completions")
    out: list[Optional[float]] = []
    for i, v in enumerate(values):
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):   # a 0-d tensor or numpy number
            try:
                v = v.item()
            except (TypeError, ValueError):
                pass
        if v is None:
            out.append(None)
            continue
        if not isinstance(v, numbers.Real):
            raise wrong(f"{type(v).__name__} {show_value(v, 60)} for completion {i}")
        v = float(v)
        if math.isnan(v):   # TRL's own spelling of None (it turns None into NaN): "does not apply"
            out.append(None)
            continue
        if math.isinf(v) or abs(v) > MAX_REWARD:
            raise wrong(f"{v!r} for completion {i} (rewards are finite numbers of magnitude at most {MAX_REWARD:g}; "
                        "None or NaN says a reward does not apply)")
        out.append(v)
    return out


def nanstd(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Standard deviation ignoring NaN, with Bessel's correction (TRL's nanstd; NaN for fewer than two values)."""
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    count = (~torch.isnan(values)).sum(dim=dim, keepdim=True)
    variance = variance * torch.where(count > 1, count / (count - 1), torch.full_like(variance, float("nan")))
    std = variance.sqrt()
    return std.squeeze(dim) if dim is not None else std.reshape(())


@dataclass
class Advantages:
    advantages: torch.Tensor    # [completions]: the weighted reward less its group's mean, over the group's std
    rewards: torch.Tensor       # [completions]: the weighted reward (NaN where every function returned None)
    std_zero: torch.Tensor      # [completions]: its group's rewards are all equal (TRL's frac_reward_zero_std)
    no_signal: torch.Tensor     # [completions]: advantage 0 for want of spread: its group's rewards all equal, or fewer
                                # than two of them a number (every function returned None)


def group_advantages(per_function: torch.Tensor, weights: Sequence[float], group_size: int, scale_rewards: str,
                     batch_std: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Advantages:
    """TRL's sum_then_normalize: weighted sum over functions (NaN ignored; NaN when all are), minus the group mean;
    divided by the group's std + 1e-4 (scale_rewards: group), by the whole step's (batch: `batch_std`, which sees
    every rank's rewards), or not (none). Completions are in groups of `group_size`, one prompt's after another."""
    w = torch.as_tensor(list(weights), dtype=per_function.dtype)
    rewards = (per_function * w[None, :]).nansum(dim=1)
    rewards[torch.isnan(per_function).all(dim=1)] = float("nan")
    grouped = rewards.view(-1, group_size)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(group_size)
    if scale_rewards == "batch":
        std = (batch_std or nanstd)(rewards).expand_as(rewards)
    else:
        std = nanstd(grouped, dim=1).repeat_interleave(group_size)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    group_std = nanstd(grouped, dim=1).repeat_interleave(group_size) if scale_rewards == "batch" else std
    std_zero = torch.isclose(group_std, torch.zeros_like(group_std))
    return Advantages(torch.nan_to_num(advantages, nan=0.0), rewards, std_zero, std_zero | torch.isnan(group_std))
