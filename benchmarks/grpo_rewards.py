"""A user reward for benchmarks/grpo_learns.py's sums, loaded as `reward_funcs: [benchmarks/grpo_rewards.py:first_answer]`
(stage grpo's `path/file.py:function` form): the answer on the completion's first line, whatever follows it.

A base model completing "Question: What is 3 plus 4?\\nAnswer: 7\\nQuestion: What is 5 plus 2?\\nAnswer:" tends to
answer and then write the next question; the built-in `accuracy` reward reads the completion's last number, so an
answer followed by "Question: What is 5 plus 2?" scores 0 there (the model must also learn to stop). This one credits
the answer itself, so a group has spread from the first steps (Gemma 3 270M states the right one-digit sum first about
9 % of the time, sampled at temperature 1, on this machine's CPU).
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d+")


def first_answer(prompts, completions, solution, **columns) -> list[float]:
    """1.0 when the first number on the completion's first non-empty line equals `solution`, else 0.0."""
    out = []
    for completion, gold in zip(completions, solution):
        line = next((part for part in completion.splitlines() if part.strip()), "")
        found = NUMBER.search(line)
        out.append(float(found is not None and found.group() == str(gold).strip()))
    return out
