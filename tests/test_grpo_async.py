"""Asynchronous GRPO roll-outs (stages/rollout_ahead.py) on a CPU, with a background thread as on a GPU: which path
a run takes and why, the staleness bound, the correction weights (the sampling weights' log-probs, the ratio to the
trained weights), and equality with the synchronous run where the weights do not move."""

from __future__ import annotations

import contextlib
import copy
import threading
import time

import pytest
import torch
from test_grpo import logged, overrides, prompts_dataset, train

from steadytune.config import load_config
from steadytune.errors import UserError
from steadytune.model.tiny import build_model, build_tokenizer, save_tiny_model
from steadytune.stages.base import StepAhead
from steadytune.stages.grpo import PromptCollator, make_objective
from steadytune.stages.grpo_losses import per_token_loss
from steadytune.stages.logprobs import token_logprobs
from steadytune.stages.rollout_ahead import ASYNC_ENV, Background, Pending, choose_async, usable
from steadytune.training.batches import MicroBatch, Windows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models") / "qwen2", "qwen2", initializer_range=0.2)


CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


def test_the_path_a_run_takes_and_why():
    assert choose_async(1, GPU, False, False, False, "auto")[0]
    off = {"async_staleness: 0": choose_async(0, GPU, False, False, False, "on"),
           "nothing to overlap": choose_async(1, CPU, False, False, False, "auto"),
           "tool calls run between turns": choose_async(1, GPU, False, True, False, "auto"),
           "images": choose_async(1, GPU, False, False, True, "auto"),
           "gradient checkpointing": choose_async(1, GPU, True, False, False, "on"),
           "compiled for training": choose_async(1, GPU, False, False, False, "auto", compiled=True),
           f"{ASYNC_ENV}=off": choose_async(1, GPU, False, False, False, "off")}
    for said, (on, why) in off.items():
        assert not on and said in why, (said, why)
    assert choose_async(1, CPU, False, False, False, "on")[0]
    with pytest.raises(UserError, match=f"{ASYNC_ENV}=.sometimes.: must be auto, on or off"):
        choose_async(1, CPU, False, False, False, "sometimes")


def test_the_staleness_bound():
    ids = [[3, 4], [5, 6]]
    made = Pending(step=5, window_ids=ids, version=3, rollout="scored")
    assert usable(made, 5, ids, 4, 1) == (True, "1 step stale")
    assert usable(made, 5, ids, 3, 1) == (True, "0 steps stale")          # a refused update: the same weights
    assert not usable(made, 5, ids, 5, 1)[0]                              # two steps behind, bound 1
    assert usable(made, 5, ids, 5, 2)[0]
    assert "async_staleness 0" in usable(made, 5, ids, 4, 0)[1]
    assert "rollback or a skipped window" in usable(made, 6, ids, 4, 1)[1]
    assert not usable(made, 5, [[3, 4], [5, 7]], 4, 1)[0]
    assert not usable(Pending(5, ids, 3), 5, ids, 4, 1)[0]                # its generation did not finish
    assert not usable(None, 5, ids, 4, 1)[0]
    assert not usable(made, 5, ids, 2, 1)[0]                              # weights older than the roll-out's


def test_the_background_runs_one_piece_of_work_and_hands_back_its_result_or_error():
    worker = Background(CPU)
    started = threading.Event()

    def work():
        started.set()
        assert threading.current_thread() is not threading.main_thread()
        time.sleep(0.05)
        return 42
    worker.launch(work)
    assert started.wait(5) and worker.running
    with pytest.raises(RuntimeError, match="already running"):
        worker.launch(work)
    assert worker.join() == 42 and not worker.running

    def fail():
        raise ValueError("decode broke")
    worker.launch(fail)
    with pytest.raises(ValueError, match="decode broke"):
        worker.join()
    with pytest.raises(RuntimeError, match="no background"):
        worker.join()


def test_a_peek_at_the_next_window_is_the_window_taken_next():
    stream = iter([MicroBatch({"n": i}, 1, (0, i + 1), [i]) for i in range(5)])
    windows = Windows(stream, 2)
    ahead = windows.peek()
    assert windows.peek() is ahead
    assert windows.take() is ahead and [mb.ids for mb in ahead] == [[0], [1]]
    assert [mb.ids for mb in windows.take()] == [[2], [3]]


# --- the objective: what settle leaves for the next step --------------------------------------------------------

def objective_on(model, tokenizer, monkeypatch, mode: str):
    monkeypatch.setenv(ASYNC_ENV, mode)
    cfg = load_config(None, ["stage=grpo", "reward_funcs=[length]", "num_generations=4", "max_completion_length=5",
                             "template=empty", "loss_type=grpo", "epsilon=0.1"])
    return make_objective(model, cfg), PromptCollator(cfg, tokenizer, None)


def prompt_examples(tokenizer, texts):
    return [{"input_ids": tokenizer(t)["input_ids"], "labels": [], "prompt": t, "answer": None, "columns": {}}
            for t in texts]


def test_the_next_step_trains_on_the_sampling_weights_log_probs(monkeypatch):
    """Step 1's roll-out launches step 2's in the background (weights theta0); settle scores it and takes its tokens'
    log-probs under theta0; an 'optimizer step' then moves the weights to theta1. Step 2 trains on exactly the
    completions a synchronous roll-out from theta0 gives for step 2's keys, with old_logps = theta0's log-probs, so
    the importance weight is exp(logp_theta1 - logp_theta0) and the loss is the clipped surrogate of that."""
    from peft import LoraConfig, get_peft_model

    tokenizer = build_tokenizer()
    model = get_peft_model(build_model("qwen2", tokenizer, initializer_range=0.2),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    objective, collate = objective_on(model, tokenizer, monkeypatch, "on")
    assert objective.ahead
    first = collate(prompt_examples(tokenizer, ["What is 1 plus 2?", "Add 3 and 4."]))
    second = collate(prompt_examples(tokenizer, ["Compute 5 + 6.", "What is 7 plus 8?"]))
    upcoming = [MicroBatch(second, 0, (0, 2), [2, 3])]
    ahead = StepAhead(lambda: upcoming, contextlib.nullcontext, CPU, [])
    settle = objective.roll_out([first], 1, [[0, 1]], ahead)
    assert settle is not None and "old_logps" not in first      # step 1 generated from its own weights
    settle()
    theta0 = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.5)
    assert objective.roll_out([second], 2, [[2, 3]], StepAhead(None, contextlib.nullcontext, CPU, [])) is None

    # the completions: what theta0 samples for step 2's keys, synchronously
    sync_objective, sync_collate = objective_on(theta0, tokenizer, monkeypatch, "off")
    again = sync_collate(prompt_examples(tokenizer, ["Compute 5 + 6.", "What is 7 plus 8?"]))
    sync_objective.roll_out([again], 2, [[2, 3]])
    assert torch.equal(again["input_ids"], second["input_ids"]) and torch.equal(again["labels"], second["labels"])
    assert torch.equal(again["advantages"], second["advantages"])
    # the correction: the sampling weights' log-probs, and the ratio to the trained weights'
    with torch.no_grad():
        sampled, owner = token_logprobs(theta0, second)
        current, _ = token_logprobs(model, second)
    assert torch.allclose(second["old_logps"], sampled, atol=1e-6)
    ratio = torch.exp(current - second["old_logps"])
    assert (ratio - 1).abs().max() > 0.05
    loss, units = objective(second)
    expected, _ = per_token_loss(current, second["old_logps"], second["advantages"][owner], None, owner,
                                 second["n_sequences"], objective.loss)
    per_sequence = torch.zeros(second["n_sequences"]).index_add(0, owner, expected) / torch.bincount(owner)
    assert float(loss.detach()) == pytest.approx(float(per_sequence.sum()), rel=1e-5)
    assert objective.train_metrics.counts["clip_ratio/region_mean"] == owner.numel()


def test_an_abandoned_step_drops_the_roll_out_it_started(monkeypatch):
    from peft import LoraConfig, get_peft_model

    tokenizer = build_tokenizer()
    model = get_peft_model(build_model("qwen2", tokenizer), LoraConfig(r=4, target_modules=["q_proj"]))
    objective, collate = objective_on(model, tokenizer, monkeypatch, "on")
    first = collate(prompt_examples(tokenizer, ["a b"]))
    second = collate(prompt_examples(tokenizer, ["c d"]))
    settle = objective.roll_out([first], 1, [[0]], StepAhead(lambda: [MicroBatch(second, 0, (0, 2), [1])],
                                                           contextlib.nullcontext, CPU, []))
    settle(abandon=True)
    assert "input_ids" not in second and objective._pending is None and not objective._background.running


# --- whole runs --------------------------------------------------------------------------------------------------

def test_an_asynchronous_run_equals_the_synchronous_one_where_the_weights_do_not_move(tiny, tmp_path, monkeypatch):
    """A learning rate too small to change a float32 weight: the generation ahead samples from the very weights the
    step trains, so staleness 1 is staleness 0 in effect, and every step's completions, rewards and loss equal the
    synchronous run's (the roll-out thread, the peeked window, the old log-probs' separate forward and the deferred
    metrics all in the path)."""
    data = prompts_dataset(tmp_path / "data")
    runs = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(ASYNC_ENV, mode)
        runs[mode] = train(overrides(tiny, data, tmp_path / mode, max_steps=5, save_steps=1000, learning_rate=1e-30,
                                     gradient_accumulation_steps=2))
    assert runs["on"].losses == pytest.approx(runs["off"].losses, abs=1e-7)
    sync, ahead = logged(tmp_path / "off"), logged(tmp_path / "on")
    for key in ("reward", "reward_std", "completions/mean_length", "clip_ratio/region_mean"):
        assert [r[key] for r in ahead] == pytest.approx([r[key] for r in sync]), key
    assert [r["rollouts/staleness"] for r in ahead] == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert [r["rollouts/staleness"] for r in sync] == [0.0] * 5
    config = (tmp_path / "on" / "run_config.yaml").read_text(encoding="utf-8")
    assert "rollouts:\n    value: asynchronous" in config


def test_an_asynchronous_run_learns_off_policy_with_its_ratio_clipped(tiny, tmp_path, monkeypatch):
    """With a learning rate that moves the weights, step n+1's completions come from step n's weights: the ratio
    is no longer 1 and the clip bites (clip_ratio/region_mean > 0), where the synchronous run's never does."""
    data = prompts_dataset(tmp_path / "data")
    monkeypatch.setenv(ASYNC_ENV, "on")
    train(overrides(tiny, data, tmp_path / "run", max_steps=4, save_steps=1000, epsilon=0.05))
    records = logged(tmp_path / "run")
    assert records[0]["clip_ratio/region_mean"] == 0.0
    assert max(r["clip_ratio/region_mean"] for r in records[1:]) > 0.0


def test_a_resumed_asynchronous_run_says_it_continues_rather_than_repeats(tiny, tmp_path, monkeypatch, capsys):
    """The checkpoint holds the weights, not the roll-out generated ahead for the next step: the resumed run
    generates that step from the checkpoint's weights (one step fresher than the uninterrupted run's), and says so."""
    data = prompts_dataset(tmp_path / "data")
    monkeypatch.setenv(ASYNC_ENV, "on")
    out = tmp_path / "run"
    train(overrides(tiny, data, out, max_steps=4, save_steps=2))
    capsys.readouterr()
    resumed = train(overrides(tiny, data, out, max_steps=4, save_steps=2,
                              resume_from_checkpoint=str(out / "checkpoint-2")))
    assert len(resumed.losses) == 2
    assert capsys.readouterr().err.count("note: grpo: step 3's completions are generated now") == 1
    assert [r["rollouts/staleness"] for r in logged(out)][-2:] == [0.0, 1.0]


def test_a_reward_that_fails_ahead_fails_its_own_step_after_the_last_one_is_saved(tiny, tmp_path, monkeypatch):
    """Step 2's completions are scored while step 1 trains: a reward function raising there ended the run inside
    step 1, its update lost and no checkpoint-1 written, while the message said the last checkpoint was kept. Now
    the error is step 2's, raised when step 2 starts: step 1 is trained, logged and saved, as the synchronous run."""
    from steadytune.stages.rewards import RewardFunctionError

    data = prompts_dataset(tmp_path / "data")
    reward = tmp_path / "flaky_reward.py"
    reward.write_text("calls = 0\n\ndef flaky(prompts, completions, **kwargs):\n    global calls\n    calls += 1\n"
                      "    if calls == 2:\n        raise ValueError('the judge is down')\n"
                      "    return [float(len(c) % 3) for c in completions]\n", encoding="utf-8")
    for mode in ("off", "on"):
        monkeypatch.setenv(ASYNC_ENV, mode)
        out = tmp_path / mode
        with pytest.raises(RewardFunctionError, match="flaky at step 2: raised ValueError: the judge is down"):
            train(overrides(tiny, data, out, max_steps=3, save_steps=1, reward_funcs=f"[{reward}:flaky]"))
        assert (out / "checkpoint-1" / "adapter_model.safetensors").is_file(), mode
        assert [r["step"] for r in logged(out)] == [1], mode
