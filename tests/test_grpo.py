"""stage grpo on tiny models (the losses: tests/test_grpo_losses.py): the group advantages against TRL's, the
reward functions (built-in and the user's own, and a run folder that may not name one), the decoder's sampling (keyed, batch-invariant, greedy = transformers' generate), a tiny
model learning a reward, an exact resume, two processes matching one, evaluation on held-out prompts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import two_processes

from steadytune.config import ConfigError, load_config
from steadytune.errors import UserError
from steadytune.eval.scoring import inference
from steadytune.model.decode.complete import Decoder
from steadytune.model.decode.sampling import SamplingParams, keyed_uniform, mix_key, sample_keyed
from steadytune.model.tiny import build_model, build_tokenizer, save_tiny_model
from steadytune.stages.rewards import (
    accuracy_reward,
    group_advantages,
    label_reward,
    load_reward_functions,
    score,
)
from steadytune.training.folder_config import without_user_functions
from steadytune.train import run_training
from steadytune.training.guard import GuardAbort
from steadytune.training.monitor import read_metrics

QUESTIONS = ["What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a} + {b}."]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny qwen2 whose logits have some range (initializer_range 0.2: at 0.02 the 32-wide model's logits hardly
    differ between tokens, so no reward could move its samples)."""
    return save_tiny_model(tmp_path_factory.mktemp("models") / "qwen2", "qwen2", initializer_range=0.2)


def prompts_dataset(folder: Path, n: int = 40) -> Path:
    """alpaca prompts with a `solution` column (what the accuracy reward compares with), and a classification twin."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"instruction": QUESTIONS[i % 3].format(a=i, b=i % 7), "input": "", "output": str(i + i % 7),
             "solution": str(i + i % 7)} for i in range(n)]
    (folder / "sums.json").write_text(json.dumps(rows), encoding="utf-8")
    reviews = [{"text": ("good product, happy" if i % 2 else "bad product, sad") + f" #{i}",
                "label": "positive" if i % 2 else "negative"} for i in range(n)]
    (folder / "reviews.json").write_text(json.dumps(reviews), encoding="utf-8")
    info = {"sums": {"file_name": "sums.json"},
            "reviews": {"file_name": "reviews.json", "formatting": "classification",
                        "label_names": ["positive", "negative"], "prompt_template": "Review: {text}\nSentiment: "}}
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return folder


def overrides(model: Path, data: Path, out: Path, **extra) -> list[str]:
    base = {"model_name_or_path": str(model), "stage": "grpo", "dataset": "sums", "dataset_dir": str(data),
            "template": "qwen", "cutoff_len": 128, "output_dir": str(out), "per_device_train_batch_size": 2,
            "num_generations": 4, "max_completion_length": 4, "reward_funcs": "[format,length]",
            "reward_format": r"^\s*[A-Za-z]", "learning_rate": 3e-2, "max_steps": 6, "logging_steps": 1,
            "save_steps": 3, "lora_rank": 4, "warmup_steps": 0, "lr_scheduler_type": "constant", "seed": 1}
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def train(args: list[str]):
    return run_training(load_config(None, args), progress=False)


def logged(out: Path) -> list[dict]:
    return [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r and "event" not in r]


# --- advantages (the losses: tests/test_grpo_losses.py) ------------------------------------------------------

def test_group_advantages_equal_trls():
    from trl.trainer.utils import nanstd

    torch.manual_seed(2)
    per_function = torch.randn(12, 2)
    per_function[3, 1] = float("nan")            # one function did not apply to one completion
    per_function[5] = float("nan")               # no function applied: advantage 0
    per_function[8:12, 0] = 1.0                  # a group whose first function gives equal rewards
    per_function[8:12, 1] = 0.5
    weights = [1.0, 0.5]
    got = group_advantages(per_function, weights, 4, "group")
    rewards = (per_function * torch.tensor(weights)).nansum(1)
    rewards[torch.isnan(per_function).all(1)] = float("nan")
    mean = torch.nanmean(rewards.view(-1, 4), dim=1).repeat_interleave(4)
    std = nanstd(rewards.view(-1, 4), dim=1).repeat_interleave(4)
    expected = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)
    assert torch.allclose(got.advantages, expected, atol=1e-6)
    assert got.advantages[5] == 0.0
    assert got.std_zero.tolist() == [False] * 8 + [True] * 4
    unscaled = group_advantages(per_function, weights, 4, "none")
    assert torch.allclose(unscaled.advantages, torch.nan_to_num(rewards - mean, nan=0.0), atol=1e-6)
    batch = group_advantages(per_function, weights, 4, "batch")
    assert torch.allclose(batch.advantages, torch.nan_to_num((rewards - mean) / (nanstd(rewards) + 1e-4), nan=0.0),
                          atol=1e-6)


# --- rewards ------------------------------------------------------------------------------------------------------

def test_accuracy_reads_the_final_answer_numerically_or_as_text():
    completions = ["2 + 3 = 5", "so the answer is 5.", "\\boxed{5.0}", "it is 6", "#### 1,234", "Paris!", "paris",
                   "I think 3/4", "no number"]
    references = ["5", "5", "5", "5", "1234", "Paris", "The answer: Paris", "0.75", "7"]
    got = accuracy_reward(prompts=[""] * 9, completions=completions, reference=references)
    assert got == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    # the solution column wins over the row's own answer; no reference at all: None (left out of the mean)
    assert accuracy_reward(prompts=["", ""], completions=["7", "7"], reference=["5", None],
                           solution=["#### 7", None]) == [1.0, None]


def test_the_label_reward_gives_nothing_for_echoing_the_question():
    """A completion naming both labels ("消极或积极", the question's own words) has not chosen: reward 0 for either gold
    label. Read as its first label it scored 1 on every negative review, and a Gemma 3 270M policy on the H200 learned
    to echo the question and sat at the negative class's share of the reviews."""
    label = label_reward(["消极", "积极"])
    completions = ["消极或积极", "消极，积极", "消极\n评论：很好，积极", "积极的", "消极消极", "不好说"]
    assert label([""] * 6, completions, label=["消极"] * 6) == [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert label([""] * 6, completions, label=["积极"] * 6) == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]


def write_reward_module(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(body, encoding="utf-8")


def test_built_in_and_user_rewards_with_weights(tmp_path, monkeypatch):
    write_reward_module(tmp_path, "my_rewards", "def shouty(prompts, completions, **columns):\n"
                        "    return [float(c.isupper()) if columns['solution'][i] else None "
                        "for i, c in enumerate(completions)]\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["stage=grpo", "reward_funcs=[format,length,my_rewards:shouty,label]",
                             "reward_weights=[1,2,0.5,1]", r"reward_format=^A", "max_completion_length=4",
                             "length_target=2"])
    functions = load_reward_functions(cfg.method, ["yes", "no"])
    assert [f.name for f in functions] == ["format", "length", "shouty", "label"]
    assert [f.weight for f in functions] == [1.0, 2.0, 0.5, 1.0]
    got = score(functions, ["p", "p", "p"], ["ABC", "abc", "yes it is"], [[1, 2], [1, 2, 3, 4], [1]],
                [{"solution": "x", "label": "no"}, {"solution": None, "label": "no"}, {"solution": "y", "label": "yes"}],
                [None, None, None])
    expected = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.5, float("nan"), 0.0], [0.0, 0.75, 0.0, 1.0]])
    assert torch.allclose(got, expected, equal_nan=True)
    # a file path works as well as a module on the path
    by_path = load_config(None, ["stage=grpo", f"reward_funcs=[{tmp_path / 'my_rewards.py'}:shouty]"])
    assert load_reward_functions(by_path.method, None)[0].name == "shouty"


def test_reward_errors_name_the_entry(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_reward_module(tmp_path, "broken", "raise RuntimeError('boom')\n")
    write_reward_module(tmp_path, "short", "def f(prompts, completions, **kw):\n    return [1.0]\n")
    cases = {"[nope]": "unknown reward 'nope'", "[broken:f]": "importing broken failed: RuntimeError: boom",
             "[short:g]": "short has no g", "[label]": "label needs classification data"}
    for funcs, message in cases.items():
        cfg = load_config(None, ["stage=grpo", f"reward_funcs={funcs}"])
        with pytest.raises(ConfigError, match=message):
            load_reward_functions(cfg.method, None)
    cfg = load_config(None, ["stage=grpo", "reward_funcs=[short:f]"])
    with pytest.raises(UserError, match="returned 1 rewards for 2 completions"):
        score(load_reward_functions(cfg.method, None), ["a", "b"], ["a", "b"], [[1], [1]], [{}, {}], [None, None])
    with pytest.raises(ConfigError, match="stage grpo needs a list of reward functions"):
        load_config(None, ["stage=grpo"])
    with pytest.raises(ConfigError, match="reward_weights: one finite number per reward function"):
        load_config(None, ["stage=grpo", "reward_funcs=[format,length]", "reward_weights=[1]"])
    with pytest.raises(ConfigError, match="max_tokens_per_batch: stage grpo does not support"):
        load_config(None, ["stage=grpo", "reward_funcs=format", "max_tokens_per_batch=512"])
    # hostile round 5 (issue 67): a nan weight trained on nothing without a word; a broken pattern was a traceback
    for weights in ("[.nan]", "[.inf]", "[-.inf]"):
        with pytest.raises(ConfigError, match="reward_weights: one finite number per reward function"):
            load_config(None, ["stage=grpo", "reward_funcs=length", f"reward_weights={weights}"])
    with pytest.raises(ConfigError, match=r"reward_format: '\(unclosed' is not a regular expression \(missing \)"):
        load_config(None, ["stage=grpo", "reward_funcs=format", "reward_format=(unclosed"])
    load_config(None, ["stage=grpo", "reward_funcs=length", "reward_format=(unclosed"])   # not read without format


@pytest.mark.parametrize("keys, said", [
    (["reward_funcs=nosuch"], "reward_funcs: unknown reward 'nosuch'"),
    (["reward_funcs=[length, nosuchmodule:f]"], "importing nosuchmodule failed: ModuleNotFoundError"),
    (["reward_funcs=missing/rewards.py:f"], "reward_funcs: 'missing/rewards.py:f': no file"),
    (["reward_funcs=length", "tools=[nosuchmodule]"], "tools: 'nosuchmodule': importing nosuchmodule failed"),
    (["reward_funcs=length", "tools=[missing/tools.py:search]"], "tools: 'missing/tools.py:search': no file"),
])
def test_a_reward_or_tool_that_cannot_be_found_is_said_before_any_weights_load(keys, said, tiny, tmp_path,
                                                                              monkeypatch, capsys):
    """Hostile round 5 (issue 67): a mistyped reward or tool was said only after the model had loaded. Found (not
    imported: a module's code runs once, when the objective is made) before the data and the weights are read; the
    model's weight file here is cut short, so a check after the load would never speak."""
    from steadytune.cli import main

    monkeypatch.chdir(tmp_path)
    base = tmp_path / "base"
    shutil.copytree(tiny, base)
    weights = base / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    data = prompts_dataset(tmp_path / "data")
    run = tmp_path / "run.yaml"
    run.write_text(f"model_name_or_path: {base}\nstage: grpo\ndataset: sums\ndataset_dir: {data}\n"
                   f"template: qwen\noutput_dir: {tmp_path / 'out'}\n", encoding="utf-8")
    assert main(["train", str(run), *keys]) == 1
    err = capsys.readouterr().err
    assert said in err and "damaged" not in err and "Traceback" not in err


def test_finding_a_reward_module_does_not_run_it(tmp_path, monkeypatch):
    from steadytune.stages.rewards import check_reward_names

    monkeypatch.chdir(tmp_path)
    write_reward_module(tmp_path, "noisy", "open('ran.txt', 'w').write('x')\ndef f(p, c, **k):\n    return [1.0]\n")
    check_reward_names(load_config(None, ["stage=grpo", "reward_funcs=[noisy:f, format]"]).method)
    assert not (tmp_path / "ran.txt").exists()


MISBEHAVING = {   # issue 54 class 2: a reward function is user code; each of these ends in one line naming it
    "raises": ("raise ValueError('bad input')", "raised ValueError: bad input"),
    "exits": ("raise SystemExit(0)", "raised SystemExit"),
    "none": ("return None", "returned None instead of a list"),
    "scalar": ("return 0.5", "returned float 0.5 instead of a list"),
    "text": ("return 'good'", "returned str 'good' instead of a list"),
    "nan": ("return float('nan')", "returned float nan instead of a list"),
    "inf": ("return [1.0, float('-inf')]", "returned -inf for completion 1"),
    "huge": ("return [1e300, 0.0]", "returned 1e+300 for completion 0"),
    "strings": ("return ['1.0', '0.0']", "returned str '1.0' for completion 0"),
    "count": ("return [1.0]", "returned 1 rewards for 2 completions"),
    "hangs": ("import time\n    time.sleep(3600)", "did not return within 0.5 s (reward_timeout"),
}


def test_each_misbehaving_reward_function_is_one_line_naming_it_and_the_step(tmp_path):
    body = "".join(f"def {name}(prompts, completions, **kw):\n    {code}\n" for name, (code, _) in MISBEHAVING.items())
    body += "def fine(prompts, completions, **kw):\n    return [float('nan'), 1]\n"
    write_reward_module(tmp_path, "misbehaving", body)
    for name, (_, said) in MISBEHAVING.items():
        cfg = load_config(None, ["stage=grpo", f"reward_funcs=[{tmp_path / 'misbehaving.py'}:{name}]"])
        functions = load_reward_functions(cfg.method, None)
        with pytest.raises(UserError) as caught:
            score(functions, ["p", "p"], ["a", "b"], [[1], [2]], [{}, {}], [None, None], "step 7", timeout=0.5)
        message = str(caught.value)
        assert message.startswith(f"reward function {name} at step 7: ") and said in message, (name, message)
        assert "\n" not in message
    cfg = load_config(None, ["stage=grpo", f"reward_funcs=[{tmp_path / 'misbehaving.py'}:fine]"])
    rewards = score(load_reward_functions(cfg.method, None), ["p", "p"], ["a", "b"], [[1], [2]], [{}, {}],
                    [None, None], "step 1", timeout=0.5)
    assert torch.isnan(rewards[0, 0]) and rewards[1, 0] == 1.0   # NaN is TRL's None: "does not apply"
    # every reward None: no advantage, and no learning signal (the warning's trigger) though no std is 0
    flat = group_advantages(torch.full((4, 1), float("nan")), [1.0], 2, "group")
    assert flat.no_signal.all() and not flat.std_zero.any() and (flat.advantages == 0).all()


def test_a_reward_function_that_fails_mid_run_stops_it_in_one_line_keeping_its_checkpoint(tiny, tmp_path, capsys):
    from steadytune.cli import main
    from steadytune.training.run_folder import read_manifest

    data = prompts_dataset(tmp_path / "data")
    write_reward_module(tmp_path, "late", "calls = []\ndef late(prompts, completions, **kw):\n    calls.append(1)\n"
                        "    if len(calls) == 3:\n        raise SystemExit(0)\n    return [1.0 * len(c) for c in completions]\n")
    out = tmp_path / "run"
    (tmp_path / "run.yaml").write_text("{}\n", encoding="utf-8")
    capsys.readouterr()
    code = main(["train", str(tmp_path / "run.yaml"), *overrides(tiny, data, out, max_steps=4, save_steps=2,
                                                                 reward_funcs=f"[{tmp_path / 'late.py'}:late]")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1] == ("error: reward function late at step 3: raised SystemExit: 0; the run stops here "
                                     "(its last checkpoint is kept)"), err[-3:]
    assert not any("Traceback" in line for line in err)
    assert (out / "checkpoint-2").is_dir() and read_manifest(out)["status"] == "failed"


def test_a_run_folder_never_names_reward_code(tiny, tmp_path, capsys):
    """A run folder's (or an archive's) run_config.yaml that names module:function: chat, predict, export and serve
    read it through load_run_config, which keeps the built-in rewards and drops the code, saying so; the module is
    never imported (its marker file does not appear). The studio's "from a run" does the same."""
    from steadytune.infer.loading import load_run_config
    from steadytune.studio.form import from_run

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil_rewards.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef f(prompts, completions, **kw):\n"
                    "    return [1.0] * len(completions)\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.yaml").write_text(
        f"stage: grpo\nmodel_name_or_path: {tiny}\nreward_funcs: [format, {evil}:f]\nreward_weights: [1.0, 3.0]\n",
        encoding="utf-8")
    cfg = load_run_config(run, [], str(run))
    assert cfg.method.reward_funcs == ["format"] and cfg.method.reward_weights == [1.0]
    assert "names reward functions of its own" in capsys.readouterr().err
    source = from_run("run", run, set())
    assert source.raw["reward_funcs"] == ["format"] and any("left out" in n for n in source.notes)
    # the user's own command line may name it (and then it is theirs to trust)
    mine = load_run_config(run, [f"reward_funcs=[{evil}:f]", "reward_weights=[2.0]"], str(run))
    assert mine.method.reward_funcs == [f"{evil}:f"]
    assert not marker.exists()
    assert without_user_functions("accuracy,m:f", None) == (["accuracy"], None, ["m:f"])


def test_train_eval_and_tune_on_a_run_folders_own_config_refuse_its_reward_code(tiny, tmp_path, capsys):
    """Issue 54 class 1: `steadytune eval FOLDER/run_config.yaml` (or train, or tune, or a config in the folder's
    studio/ or anywhere below it) is a run folder's record, not the user's config: a reward module it names is
    refused in one line naming the file, before anything is imported; on the user's command line it is theirs."""
    from steadytune.cli import main
    from steadytune.training.folder_config import load_config_named

    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    (run / "studio").mkdir(parents=True)
    (run / "sub").mkdir()
    (run / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef f(prompts, completions, **kw):\n"
                                 "    return [1.0] * len(completions)\n", encoding="utf-8")
    text = (f"stage: grpo\nmodel_name_or_path: {tiny}\ndataset: sums\ndataset_dir: {prompts_dataset(tmp_path / 'data')}"
            f"\nreward_funcs: [format, {run / 'evil.py'}:f]\noutput_dir: {tmp_path / 'elsewhere'}\n")
    for name in ("run_config.yaml", "studio/config.yaml", "sub/mine.yaml"):
        (run / name).write_text(text, encoding="utf-8")
    for command in (["eval", "run_config.yaml"], ["train", "studio/config.yaml"], ["train", "sub/mine.yaml"],
                    ["tune", "run_config.yaml", "--trials", "2"]):
        capsys.readouterr()
        assert main([command[0], str(run / command[1]), *command[2:]]) == 1, command
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"error: {run / command[1]}: names reward functions of its own") and \
            "evil.py:f" in err[-1] and "reward_funcs=" in err[-1], err
    assert not marker.exists() and not (tmp_path / "elsewhere").exists()
    # given on the command line, the same function is the user's: it loads (and runs: the marker is written)
    cfg = load_config_named(run / "run_config.yaml", [f"reward_funcs=[format, {run / 'evil.py'}:f]"])
    assert cfg.train.output_dir == str(run)   # the folder itself, never where its file says
    load_reward_functions(cfg.method, None)
    assert marker.exists()


# --- generation -------------------------------------------------------------------------------------------------

def test_keyed_sampling_is_the_distribution_and_does_not_depend_on_the_batch():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.0, 0.15, 0.05]))
    keys = torch.tensor([mix_key(7, i) for i in range(20000)])
    drawn = sample_keyed(logits.expand(20000, 5), SamplingParams(max_tokens=1), keys, 3)
    share = torch.bincount(drawn, minlength=5).float() / 20000
    assert torch.allclose(share, torch.tensor([0.5, 0.3, 0.0, 0.15, 0.05]), atol=0.015)
    nucleus = sample_keyed(logits.expand(20000, 5), SamplingParams(max_tokens=1, top_p=0.7), keys, 3)
    assert set(nucleus.tolist()) == {0, 1}
    assert torch.equal(sample_keyed(logits.expand(4, 5), SamplingParams(max_tokens=1), keys[10:14], 3), drawn[10:14])
    u = keyed_uniform(keys[:2], 0, 1000)
    assert 0 < float(u.min()) and float(u.max()) < 1 and abs(float(u.mean()) - 0.5) < 0.03


@pytest.mark.parametrize("kind", ["qwen2", "gemma3"])
def test_decoder_greedy_equals_generate_and_sampling_is_batch_invariant(kind):
    from peft import LoraConfig, get_peft_model

    tokenizer = build_tokenizer()
    model = get_peft_model(build_model(kind, tokenizer, initializer_range=0.2),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    prompts = [tokenizer("hello world")["input_ids"], tokenizer("The capital of France is")["input_ids"], [5, 6, 7]]
    decoder = Decoder(model, tokenizer.pad_token_id)
    stops = [tokenizer.eos_token_id]
    with inference(model):
        greedy = decoder.generate(prompts, 10, SamplingParams(max_tokens=10, temperature=0.0), stops, [0, 1, 2])
        for ids, prompt in zip(greedy.ids, prompts):
            out = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=10, do_sample=False,
                                 eos_token_id=stops[0], pad_token_id=tokenizer.pad_token_id)
            assert ids == out[0, len(prompt):].tolist()[:len(ids)]
        keys = [mix_key(1, i) for i in range(6)]
        together = decoder.generate(prompts * 2, 10, SamplingParams(max_tokens=10), stops, keys)
        alone = [decoder.generate([p], 10, SamplingParams(max_tokens=10), stops, [k]).ids[0]
                 for p, k in zip(prompts * 2, keys)]
    assert together.ids == alone
    assert together.ids[:3] != together.ids[3:]   # other keys, other completions of the same prompts


# --- training -----------------------------------------------------------------------------------------------------

def test_a_tiny_model_learns_the_format_reward(tiny, tmp_path):
    """A one-token bandit: the completion should start with a letter. From the random start (~40% of completions)
    the reward rises over 40 steps (seeds 1-3 all end 0.26-0.54 higher); the metrics and the report carry it."""
    data = prompts_dataset(tmp_path / "data")
    out = tmp_path / "learn"
    result = train(overrides(tiny, data, out, max_steps=40, per_device_train_batch_size=4, num_generations=8,
                             max_completion_length=1, reward_funcs="[format]", save_steps=1000, learning_rate=5e-2))
    rewards = [r["reward"] for r in logged(out)]
    assert len(rewards) == 40 and len(result.losses) == 40
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.2, rewards
    record = logged(out)[-1]
    for key in ("reward_std", "rewards/format/mean", "rewards/format/std", "completions/mean_length",
                "completions/clipped_ratio", "completions/nonfinite_ratio", "frac_reward_zero_std",
                "clip_ratio/region_mean"):
        assert key in record
    page = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="curve-reward"' in page and 'id="curve-grpo"' in page


def test_resume_reproduces_the_uninterrupted_run(tiny, tmp_path):
    """Weights, optimizer, data position and the completions' keys: the resumed steps are the straight run's, KL
    and all (beta > 0: the reference is the model with its adapter off)."""
    data = prompts_dataset(tmp_path / "data")
    extra = dict(beta=0.05, gradient_accumulation_steps=2, loss_type="grpo")
    straight = train(overrides(tiny, data, tmp_path / "straight", **extra))
    out = tmp_path / "resumed"
    train(overrides(tiny, data, out, **extra))
    resumed = train(overrides(tiny, data, out, resume_from_checkpoint=str(out / "checkpoint-3"), **extra))
    assert resumed.losses == pytest.approx(straight.losses[3:], rel=1e-6, abs=1e-9)
    a, b = logged(tmp_path / "straight"), logged(out)
    assert [r["reward"] for r in b] == pytest.approx([r["reward"] for r in a])
    assert [r["kl"] for r in b] == pytest.approx([r["kl"] for r in a], rel=1e-5)
    assert any(r["kl"] > 0 for r in a)


@two_processes
def test_two_processes_match_one(tiny, tmp_path):
    """DDP on two CPU processes (gloo): the same prompts per step, the same completions (keyed by example, not by
    rank), the group advantages, and the loss normalised over both ranks' completion tokens (dapo)."""
    from test_distributed import losses, run_cli

    data = prompts_dataset(tmp_path / "data")
    common = dict(max_steps=3, save_steps=1000, loss_type="dapo", beta=0.02)
    single = train(overrides(tiny, data, tmp_path / "one", gradient_accumulation_steps=2, **common))
    done = run_cli(overrides(tiny, data, tmp_path / "two", **common) + ["--nproc", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "world size 2" in done.stdout and "per rank 2 x 1 accumulation; x 2 ranks = 4 examples" in done.stdout
    assert losses(tmp_path / "two") == pytest.approx(single.losses, rel=1e-4, abs=1e-7)
    one, two = logged(tmp_path / "one"), logged(tmp_path / "two")
    for a, b in zip(one, two):
        for key in ("reward", "reward_std", "completions/mean_length", "kl"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key


def test_held_out_prompts_are_scored_during_training_and_by_eval(tiny, tmp_path):
    """eval_reward and the functions' means on the held-out split at each evaluation; `steadytune eval` on the saved
    adapter scores the same prompts with the same functions (the same keys: the same completions)."""
    from steadytune.evaluate import evaluate_saved

    data = prompts_dataset(tmp_path / "data")
    out = tmp_path / "eval"
    args = overrides(tiny, data, out, val_size=0.2, eval_strategy="steps", eval_steps=3, max_steps=3,
                     reward_funcs="[accuracy,format]", per_device_eval_batch_size=4, eval_on_start=True)
    train(args)
    evals = [r for r in read_metrics(out / "metrics.jsonl") if "eval_reward" in r]
    assert [r["step"] for r in evals] == [0, 3]   # eval_on_start: the starting point of the curve
    assert {"eval_loss", "eval_rewards/accuracy/mean", "eval_rewards/format/mean"} <= set(evals[-1])
    results = evaluate_saved(load_config(None, args))
    assert results["eval_examples"] == 8
    assert results["eval_reward"] == pytest.approx(evals[-1]["eval_reward"], abs=1e-6)
    assert json.loads((out / "eval_results.json").read_text())["eval_reward"] == results["eval_reward"]


def test_classification_prompts_with_the_label_reward(tiny, tmp_path):
    data = prompts_dataset(tmp_path / "data")
    out = tmp_path / "labels"
    train(overrides(tiny, data, out, dataset="reviews", reward_funcs="[label]", max_steps=2, save_steps=1000))
    record = logged(out)[-1]
    assert 0.0 <= record["rewards/label/mean"] <= 1.0
    config = (out / "run_config.yaml").read_text(encoding="utf-8")
    assert "label_names:\n- positive\n- negative" in config


def test_guard_judges_only_non_finite_values_for_grpo(tiny, tmp_path):
    from steadytune.stages.guard_rules import judge_grad_spikes, judge_loss_spikes

    cfg = load_config(None, ["stage=grpo", "reward_funcs=format"])
    assert judge_loss_spikes(cfg) is False and judge_grad_spikes(cfg) is False
    assert "centred on 0" in cfg.decisions["loss_spikes"]["reason"]
    data = prompts_dataset(tmp_path / "data")
    out = tmp_path / "nan"
    with pytest.raises(GuardAbort):
        train(overrides(tiny, data, out, guard_policy="abort", max_steps=3, **{"fault_injection.nan_loss_step": 2}))
    events = [r for r in read_metrics(out / "metrics.jsonl") if r.get("event") == "guard"]
    assert events and events[0]["kind"] == "nonfinite_loss"
    shutil.rmtree(out, ignore_errors=True)


def test_a_run_without_reward_signal_says_so_once(tiny, tmp_path, capsys):
    """A reward that never fires: every group's rewards are equal, every advantage 0, no step moves the policy. After
    NO_SIGNAL_STEPS such steps the run says so (once), with a completion to look at; a reward that varies says nothing."""
    from steadytune.stages.grpo import NO_SIGNAL_STEPS

    data = prompts_dataset(tmp_path / "data")
    train(overrides(tiny, data, tmp_path / "flat", max_steps=NO_SIGNAL_STEPS + 2, reward_funcs="[format]",
                    reward_format="^NEVER MATCHES", max_completion_length=2, save_steps=1000))
    err = capsys.readouterr().err
    assert err.count("warning: grpo: for 10 steps every group's 4 completions got the same reward (mean 0)") == 1
    assert all(r["frac_reward_zero_std"] == 1.0 for r in logged(tmp_path / "flat"))
    code = tmp_path / "varied.py"
    code.write_text("def spread(completions, **columns):\n    return [float(len(set(c))) for c in completions]\n",
                    encoding="utf-8")
    train(overrides(tiny, data, tmp_path / "varied", max_steps=NO_SIGNAL_STEPS + 2, reward_funcs=f"[{code}:spread]",
                    max_completion_length=4, save_steps=1000))
    assert "warning: grpo" not in capsys.readouterr().err
    # issue 54: a reward that never applies (None or NaN for every completion) is no signal either, and said so
    code.write_text("def never(completions, **columns):\n"
                    "    return [None if i % 2 else float('nan') for i in range(len(completions))]\n", encoding="utf-8")
    train(overrides(tiny, data, tmp_path / "none", max_steps=NO_SIGNAL_STEPS, reward_funcs=f"[{code}:never]",
                    max_completion_length=1, save_steps=1000))
    assert "got the same reward (mean none: every function returned None or NaN)" in capsys.readouterr().err


def test_a_collapsed_policy_is_told_from_a_reward_that_never_fires(tiny, tmp_path, capsys):
    """Groups that agree inside but differ from each other (a reward that depends on the prompt alone stands in for a
    policy that names one label for every review: the H200's label runs after 15 steps): the warning names the
    collapse and the keys that keep sampling apart, not the reward."""
    from steadytune.stages.grpo import NO_SIGNAL_STEPS

    data = prompts_dataset(tmp_path / "data")
    code = tmp_path / "by_prompt.py"
    code.write_text("def by_prompt(prompts, completions, **columns):\n"
                    "    return [float(sum(map(ord, p)) % 2) for p in prompts]\n", encoding="utf-8")
    train(overrides(tiny, data, tmp_path / "collapsed", max_steps=NO_SIGNAL_STEPS + 1, reward_funcs=f"[{code}:by_prompt]",
                    max_completion_length=2, save_steps=1000))
    err = capsys.readouterr().err
    assert err.count("agreed on their reward, though the groups differ (rewards from 0 to 1)") == 1
    assert "beta: 0.04" in err and "epsilon_high: 0.28" in err and "got the same reward" not in err


def test_the_decoder_marks_completions_drawn_from_non_finite_logits(tiny):
    """Sampling from non-finite logits draws uniformly (noise), and the training forward that follows stays finite,
    so only the decoder can say it happened: Completions.nonfinite, which stage grpo logs and warns about."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    prompts, params = [[5, 6, 7], [8, 9]], SamplingParams(max_tokens=3, temperature=1.0)
    with torch.no_grad():
        assert Decoder(model, 0).generate(prompts, 3, params, [10**6], [1, 2]).nonfinite == [False, False]
        model.model.norm.weight[3] = float("nan")   # every position's final hidden state, so every row's logits
        assert Decoder(model, 0).generate(prompts, 3, params, [10**6], [1, 2]).nonfinite == [True, True]


def test_log_completions_writes_the_logged_steps_and_evaluations_and_a_resume_continues_it(tiny, tmp_path):
    """log_completions: each completion of steps 1 and every logging_steps, and of each evaluation, with its rewards
    and advantage; a resumed run cuts the file back to its checkpoint and writes the same lines again (the
    completions are keyed), so the file equals the straight run's."""
    data = prompts_dataset(tmp_path / "data")
    extra = dict(log_completions=True, logging_steps=2, val_size=0.2, eval_strategy="steps", eval_steps=3,
                 eval_on_start=True, per_device_eval_batch_size=4)
    straight = tmp_path / "straight"
    train(overrides(tiny, data, straight, **extra))
    lines = [json.loads(line) for line in (straight / "completions.jsonl").read_text(encoding="utf-8").splitlines()]
    train_lines = [r for r in lines if r["split"] == "train"]
    assert sorted({r["step"] for r in train_lines}) == [1, 2, 4, 6]
    assert len(train_lines) == 4 * 2 * 4                       # steps x prompts x num_generations
    evals = [r for r in lines if r["split"] == "eval"]
    assert sorted({r["step"] for r in evals}) == [0, 3, 6] and len(evals) == 3 * 8 * 4
    first = train_lines[:4]                                     # one prompt's group
    assert len({r["prompt"] for r in first}) == 1
    assert set(first[0]["rewards"]) == {"format", "length"} and 1 <= first[0]["length"] <= 4
    assert sum(r["advantage"] for r in first) == pytest.approx(0.0, abs=1e-5)
    assert "completions.jsonl" in json.loads((straight / ".steadytune-run.json").read_text())["files"]

    out = tmp_path / "resumed"
    train(overrides(tiny, data, out, **extra))
    (out / "completions.jsonl").write_text((out / "completions.jsonl").read_text(encoding="utf-8") + "{\"step\": 99}\n" * 3,
                                           encoding="utf-8")   # lines past the checkpoint must go
    train(overrides(tiny, data, out, resume_from_checkpoint=str(out / "checkpoint-3"), **extra))
    assert (out / "completions.jsonl").read_text(encoding="utf-8") == \
        (straight / "completions.jsonl").read_text(encoding="utf-8")


def test_the_benchmarks_first_answer_reward_loads_as_a_user_file_and_credits_the_first_line():
    """benchmarks/grpo_learns.py's sums use it as `reward_funcs: [benchmarks/grpo_rewards.py:first_answer, accuracy]`."""
    from types import SimpleNamespace

    rewards = Path(__file__).resolve().parents[1] / "benchmarks" / "grpo_rewards.py"
    method = SimpleNamespace(reward_funcs=[f"{rewards}:first_answer", "accuracy"], reward_weights=None,
                             reward_format="", max_completion_length=12, length_target=None)
    functions = load_reward_functions(method, None)
    assert [f.name for f in functions] == ["first_answer", "accuracy"]
    completions = [" 12\nQuestion: What is 5 plus 2?", " 12", "\n 13\n12", "twelve"]
    values = score(functions, ["p"] * 4, completions, [[1]] * 4, [{"solution": "12"}] * 4, [None] * 4)
    assert values[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]      # the first non-empty line's number
    assert values[:, 1].tolist() == [0.0, 1.0, 1.0, 0.0]      # accuracy: the completion's last number
