"""The rest of DAPO (Yu et al. 2025, arXiv:2503.14476) in stage grpo: overlong reward shaping (eq. 13, against its
formula worked by hand and TRL's get_soft_overlong_punishment) and dynamic sampling (groups whose rewards do not
differ replaced by other prompts' groups, keyed so a run is reproducible)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from test_grpo import logged, overrides, prompts_dataset, train

from steadytune.config import ConfigError, load_config
from steadytune.model.tiny import save_tiny_model
from steadytune.stages.grpo_rollout import flat_groups, replacement_index, replacement_keys
from steadytune.stages.rewards import load_reward_functions


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models") / "qwen2", "qwen2", initializer_range=0.2)


def overlong(max_completion_length: int, cache):
    method = SimpleNamespace(reward_funcs=["soft_overlong_punishment"], reward_weights=None, reward_format="",
                             max_completion_length=max_completion_length, length_target=None, soft_punish_cache=cache)
    return load_reward_functions(method, None)[0]


def test_soft_overlong_punishment_by_hand_and_as_trl_computes_it():
    """L_max 10, L_cache 4: up to 6 tokens nothing; 7 -> (6 - 7) / 4 = -0.25; 8 -> -0.5; 10 -> -1; beyond -1."""
    from trl.rewards import get_soft_overlong_punishment

    f = overlong(10, 4)
    ids = [[1] * n for n in (3, 6, 7, 8, 10, 11)]
    mine = f.call(prompts=[""] * 6, completions=[""] * 6, completion_ids=ids)
    assert mine == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    assert mine == get_soft_overlong_punishment(10, 4)(completion_ids=ids)
    assert f.name == "soft_overlong_punishment"
    assert overlong(20, None).call(prompts=[""], completions=[""], completion_ids=[[1] * 17]) == [-0.25]   # cache 4


def test_soft_punish_cache_in_the_config():
    cfg = load_config(None, ["stage=grpo", "reward_funcs=[accuracy,soft_overlong_punishment]",
                             "max_completion_length=100"])
    assert cfg.decisions["soft_punish_cache"]["value"] == 20
    with pytest.raises(ConfigError, match="soft_punish_cache: 200 is longer than max_completion_length"):
        load_config(None, ["stage=grpo", "reward_funcs=[soft_overlong_punishment]", "max_completion_length=100",
                           "soft_punish_cache=200"])


def test_replacements_are_keyed_by_the_step_the_prompt_and_the_round():
    draws = [replacement_index(1, step, example, round_, 40) for step in (1, 2) for example in (0, 5)
             for round_ in (1, 2)]
    assert draws == [replacement_index(1, step, example, round_, 40) for step in (1, 2) for example in (0, 5)
                     for round_ in (1, 2)]
    assert len(set(draws)) > 4 and all(0 <= d < 40 for d in draws)
    keys = replacement_keys(1, 3, 5, 1, 4)
    assert len(set(keys)) == 4 and keys != replacement_keys(1, 3, 5, 2, 4)
    assert flat_groups(torch.tensor([True] * 4 + [False] * 4 + [True] * 4), 4) == [0, 2]


def prompt_dependent_reward(folder):
    """Flat for the "plus" questions (every completion 0: no signal), spread for the others."""
    path = folder / "by_prompt.py"
    path.write_text("def spread(prompts, completions, **columns):\n"
                    "    return [0.0 if 'plus' in p else float(len(c) % 3) for p, c in zip(prompts, completions)]\n",
                    encoding="utf-8")
    return path


def test_dynamic_sampling_replaces_groups_without_signal(tiny, tmp_path):
    """A third of the prompts ("What is a plus b?") can never score: without dynamic sampling their groups train
    nothing; with it they are replaced by other prompts' groups that differ, and the run is the same run again."""
    data = prompts_dataset(tmp_path / "data")
    reward = prompt_dependent_reward(tmp_path)
    common = dict(reward_funcs=f"[{reward}:spread]", max_steps=4, save_steps=1000, per_device_train_batch_size=3,
                  log_completions=True)
    train(overrides(tiny, data, tmp_path / "plain", **common))
    result = train(overrides(tiny, data, tmp_path / "dynamic", dynamic_sampling=True, **common))
    plain, dynamic = logged(tmp_path / "plain"), logged(tmp_path / "dynamic")
    assert sum(r["frac_reward_zero_std"] for r in plain) >= 4 * (1 / 3) - 1e-6
    assert sum(r["frac_reward_zero_std"] for r in dynamic) < sum(r["frac_reward_zero_std"] for r in plain)
    assert sum(r["dynamic_sampling/replaced"] for r in dynamic) > 0 and max(r["dynamic_sampling/rounds"]
                                                                           for r in dynamic) >= 2
    lines = [json.loads(x) for x in (tmp_path / "dynamic" / "completions.jsonl").read_text().splitlines()]
    assert sum("plus" in x["prompt"] for x in lines) < sum("plus" in x["prompt"] for x in
                                                           map(json.loads, (tmp_path / "plain" / "completions.jsonl")
                                                               .read_text().splitlines()))
    again = train(overrides(tiny, data, tmp_path / "again", dynamic_sampling=True, **common))
    assert again.losses == result.losses
