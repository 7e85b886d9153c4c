"""What a decode step of the batcher costs the host, and the machinery that keeps it small: no wait on the device in
a step (the tokens come back every few steps, a copy queued behind them) and no cache re-layout while the batch is
unchanged; recorded steps (CUDA graphs, emulated on CPU by
tests/graph_emulation.py) that freeze Python values and turn themselves off when a replay disagrees; single-adapter
and base-model batches on peft's plain forward; LoRA weights in the base dtype without changing a logit."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from graph_emulation import EmulatedGraphBackend, WaitWhileRecording
from test_serve_engine import drive, generate_alone, greedy, random_prompts

from steadytune.eval.scoring import inference
from steadytune.model.decode.adapters import match_model_dtype
from steadytune.model.decode.batch import DecodeBatch
from steadytune.model.decode.graphs import DecodeGraphs
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.sampling import SamplingParams
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.serve.engine import BatchingEngine, Generation

WAITING_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def count_waits(monkeypatch) -> Counter:
    """Counts every call of a Tensor method that makes the host wait for a value on a GPU."""
    counts: Counter = Counter()
    for name in WAITING_METHODS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


@pytest.mark.parametrize("recorded", [False, True], ids=["eager", "recorded"])
def test_a_steady_decode_step_waits_for_nothing_and_lays_nothing_out(tokenizer, monkeypatch, recorded):
    """Three sequences in a gemma3 batch (sliding window 16, passed during these steps): after they joined, an engine
    step (decode, sampling, each row's update, text, retiring) waits on the device only when it reads the tokens
    back, once every READBACK_EVERY steps; it copies no cache and leaves every cache buffer where it was."""
    model = build_model("gemma3", tokenizer, seed=1).eval()
    engine = BatchingEngine(model, tokenizer, max_batch=4)
    engine.batch = DecodeBatch(model, engine.batch.pad_token_id, 4, EmulatedGraphBackend() if recorded else None)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    loop = asyncio.new_event_loop()  # the requests' events go there unread
    for prompt in random_prompts(3, seed=2):
        engine.submit([Generation(0, prompt, None, params)], loop)
    batch = engine.batch
    every = batch.readback_every
    try:
        with inference(model):
            engine._step(engine._admit())
            assert len(batch) == 3
            # the admitting step decodes once too; a recorded step is checked against the eager one on its first two
            # uses; the last of these steps reads back
            for _ in range(2 * every - 1):
                engine._step([])
            assert batch._unread == 0
            buffers = [t.data_ptr() for layer in batch.cache.layers for t in (layer.keys, layer.values)]
            relayouts, lengths = batch.relayouts, [r.length for r in batch.rows]
            replays = batch.graphs.backend.replays if recorded else 0
            waits = count_waits(monkeypatch)
            for step in range(1, 21):
                engine._step([])
                assert sum(waits.values()) == waits["tolist"] == step // every  # one read-back every few steps
        assert batch.relayouts == relayouts
        assert [t.data_ptr() for layer in batch.cache.layers for t in (layer.keys, layer.values)] == buffers
        assert [r.length for r in batch.rows] == [n + 20 for n in lengths]
        assert max(lengths) + 20 > model.config.sliding_window
        assert [r.received for r in batch.rows] == [1 + 2 * every + 20] * 3
        if recorded:
            assert batch.graphs.enabled and batch.graphs.backend.replays == replays + 20
    finally:
        loop.close()


def test_emulated_graphs_freeze_python_values_and_refuse_waits():
    """The CPU stand-in behaves as a CUDA graph would where it matters to these tests."""
    backend = EmulatedGraphBackend()
    x, offset = torch.zeros(3), [1.0]
    replay, out = backend.capture(lambda: x * 2 + offset[0])
    offset[0] = 5.0
    x.add_(1)
    replay()
    assert torch.equal(out, torch.full((3,), 3.0))  # the tensor read live, the Python number frozen at 1
    with pytest.raises(WaitWhileRecording):
        backend.capture(lambda: x * x.sum().item())
    with pytest.raises(WaitWhileRecording):
        backend.capture(lambda: x if bool((x > 0).all()) else -x)


def test_decode_graphs_turn_off_when_a_replay_disagrees_or_recording_fails(caplog):
    state, base = {"n": 0.0}, torch.zeros(4)
    graphs = DecodeGraphs(torch.device("cpu"), EmulatedGraphBackend())
    assert graphs.enabled
    assert torch.equal(graphs.run("k", lambda: base + state["n"]), base)  # recorded, replayed, checked: equal
    state["n"] = 1.0  # the step reads a Python value: the replay is stale from here on
    with caplog.at_level(logging.WARNING, logger="steadytune.decode"):
        out = graphs.run("k", lambda: base + state["n"])
    assert torch.equal(out, base + 1)  # the eager step's answer, not the stale replay's
    assert not graphs.enabled and "other logits" in graphs.disabled_because
    assert "CUDA graphs are off" in caplog.text

    graphs = DecodeGraphs(torch.device("cpu"), EmulatedGraphBackend())
    assert torch.equal(graphs.run("k", lambda: base * base.sum().item()), base)  # waits: cannot be recorded
    assert not graphs.enabled and "WaitWhileRecording" in graphs.disabled_because


def test_a_replay_is_judged_row_by_row_not_by_its_largest_difference():
    """bf16 kernels summing in another order move a few of a large batch's logits by more than 1 % of the largest
    logit (a 1,024 x 262k roll-out on an H200) without changing any row; a row read from a stale buffer changes
    altogether."""
    from steadytune.model.decode.graphs import RELATIVE_ROW_ERROR, row_errors

    def same(a, b):
        errors = row_errors(a, b)
        return errors is not None and float(errors.max()) <= RELATIVE_ROW_ERROR

    g = torch.Generator().manual_seed(0)
    eager = torch.randn(64, 4096, generator=g) * 8
    noisy = eager + torch.randn(64, 4096, generator=g) * 0.02
    noisy[5, 17] += 0.5          # one element off by 0.5 / max(|logit|) ~ 1.4 %
    assert same(noisy, eager)
    stale = noisy.clone()
    stale[9] = eager[10]         # one row holds another row's logits
    assert not same(stale, eager)
    assert not same(eager[:63], eager)


def test_graphs_recorded_after_a_clear_go_into_a_fresh_pool():
    """Once every graph is dropped (the cache grew), the next ones record into a new pool, never into the handle of a
    pool that PyTorch released with its last graph."""
    class Backend(EmulatedGraphBackend):
        pools = 0

        def renew_pool(self):
            self.pools += 1

    backend = Backend()
    graphs = DecodeGraphs(torch.device("cpu"), backend)
    base = torch.ones(3)
    graphs.run("a", lambda: base * 2)
    graphs.clear()
    assert backend.pools == 1 and not graphs.graphs
    assert torch.equal(graphs.run("a", lambda: base * 2), base * 2) and backend.captures == 2


def test_cache_growth_beyond_its_capacity_keeps_every_row(tokenizer):
    """A row that outgrows the first 256 columns makes the slot cache reallocate (and forget its recorded steps);
    the answers still equal generate's."""
    model = build_model("qwen2", tokenizer, seed=1).eval()
    prompts = [random_prompts(1, seed=7)[0] * 40, random_prompts(1, seed=8)[0]]
    prompts[0] = prompts[0][:245]
    budgets = [20, 20]
    expected = [generate_alone(model, p, n) for p, n in zip(prompts, budgets)]
    batch = DecodeBatch(model, pad_token_id=0, graph_backend=EmulatedGraphBackend())
    outputs = [[], []]
    with torch.inference_mode():
        batch.add([Row(p, None, owner=i, params=greedy(n)) for i, (p, n) in enumerate(zip(prompts, budgets))])
        capacity = batch.cache.capacity
        drive(batch, outputs, {})
    assert capacity == 256 and batch.cache.capacity == 512
    assert batch.graphs.enabled and batch.graphs.backend.replays > 0
    assert outputs == expected


def two_adapter_model(tokenizer):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(3)
    model = get_peft_model(build_model("qwen2", tokenizer, seed=1),
                           LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
                           adapter_name="one")
    model.add_adapter("two", LoraConfig(r=4, lora_alpha=16, target_modules=["v_proj", "up_proj"],
                                        init_lora_weights=False))
    return model.eval()


def test_single_adapter_and_base_batches_take_peft_plain_forward(tokenizer, monkeypatch):
    from peft.tuners.lora.layer import Linear

    model = two_adapter_model(tokenizer)
    mixed = Counter()
    original = Linear._mixed_batch_forward

    def counted(self, *args, **kwargs):
        mixed["calls"] += 1
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Linear, "_mixed_batch_forward", counted)
    prompts = random_prompts(2, seed=4)

    def answer(adapters: list) -> list:
        batch = DecodeBatch(model, pad_token_id=0)
        out = [[] for _ in prompts]
        drive(batch, out, {0: [Row(p, a, owner=i, params=greedy(6)) for i, (p, a) in enumerate(zip(prompts, adapters))]})
        return out

    for adapter in ("one", "two", None):
        got = answer([adapter, adapter])
        assert mixed["calls"] == 0
        assert got == [generate_alone(model, p, 6, adapter or "base") for p in prompts]
    assert answer(["one", None]) == [generate_alone(model, prompts[0], 6, "one"),
                                     generate_alone(model, prompts[1], 6, "base")]
    assert mixed["calls"] > 0  # only a batch that really mixes takes peft's adapter_names path


def test_lora_weights_in_the_base_dtype_give_the_same_logits(tokenizer):
    """bf16 base weights, LoRA kept in fp32 by peft, run under autocast (as serve runs them): casting the LoRA
    weights to bf16 changes no bit of the logits, for one adapter and with adapters mixed per row."""
    from peft import LoraConfig, get_peft_model

    from steadytune.eval.scoring import _precision_context

    torch.manual_seed(5)
    model = get_peft_model(build_model("qwen2", tokenizer, seed=1).to(torch.bfloat16),
                           LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False),
                           adapter_name="one")
    model.add_adapter("two", LoraConfig(r=4, target_modules=["q_proj", "up_proj"], init_lora_weights=False))
    model.eval()
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.float32}
    ids = torch.tensor([random_prompts(1, seed=6)[0]] * 2)

    def logits():
        with torch.inference_mode(), _precision_context(model):
            model.set_adapter("one")
            plain = model(input_ids=ids).logits
            mixed = model(input_ids=ids, adapter_names=["one", "two"]).logits
        return plain, mixed

    before = logits()
    assert match_model_dtype(model) > 0
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.bfloat16}
    after = logits()
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])


def test_lora_weights_stay_as_they_are_for_dora_and_fp32_models(tokenizer):
    from peft import LoraConfig, get_peft_model

    fp32 = get_peft_model(build_model("qwen2", tokenizer), LoraConfig(r=4, target_modules=["q_proj"]))
    dora = get_peft_model(build_model("qwen2", tokenizer).to(torch.bfloat16),
                          LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    assert match_model_dtype(fp32) == 0 and match_model_dtype(dora) == 0


def test_profile_decode_script_reports_no_wait_and_no_relayout():
    """benchmarks/profile_decode.py, the measurement the README quotes, on a tiny model."""
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_decode.py"), "--tiny", "--rows", "1,4",
                          "--steps", "2", "--warmup", "1"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split("|") for line in out.stdout.splitlines() if line.strip().startswith(("1 |", "4 |"))]
    assert len(rows) == 2
    for cells in rows:
        ops, waits, _cuda, relayouts = cells[3].split()
        assert int(ops) > 0 and waits == "0" and relayouts == "0"


def test_profile_decode_compare_runs_every_arm_and_its_greedy_check_agrees():
    """benchmarks/profile_decode.py --compare, issue 53's measurement, on a tiny model: every arm gets a number and
    the engine's greedy tokens equal transformers' generate's."""
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_decode.py"), "--tiny", "--compare",
                          "--rows", "1,2", "--steps", "2", "--warmup", "1", "--check-rows", "3", "--check-tokens", "5"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
                         cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    arms = [line.split("|")[0].strip() for line in out.stdout.splitlines() if line.count("|") == 2]
    assert arms == ["arm","engine+lora", "engine+2lora", "engine", "hf+lora", "static", "static+lora"]
    assert "3/3 rows equal, 15/15 tokens" in out.stdout
