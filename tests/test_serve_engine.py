"""The batcher without HTTP: sequences that join and leave a running batch (one shared KV cache, left padding,
trimming) produce exactly the tokens transformers' `generate` produces for each alone, for full-attention and
sliding-window models and for batches that mix LoRA adapters; text assembly and sampling on their own."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch
from graph_emulation import EmulatedGraphBackend

from steadytune.model.decode.batch import DecodeBatch
from steadytune.model.decode.batch_dynamic import DynamicDecodeBatch
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.runner import make_runner
from steadytune.model.decode.sampling import FAILED_ROW, GREEDY, SamplingParams, sample_rows, settings_of
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.serve.engine import BatchingEngine, Delta, Failed, Finished, Generation
from steadytune.serve.text import TextAssembler


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def random_prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(20, 500) for _ in range(rng.randrange(2, 30))] for _ in range(n)]


def generate_alone(model, prompt: list[int], max_new_tokens: int, adapter=None) -> list[int]:
    """transformers' greedy generate for one prompt, exactly max_new_tokens long."""
    with torch.inference_mode():
        if adapter == "base":
            with model.disable_adapter():
                return generate_alone(model, prompt, max_new_tokens)
        if adapter is not None:
            model.set_adapter(adapter)
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=0, eos_token_id=None)  # end tokens do not end it
    return out[0, len(prompt):].tolist()


BATCHES = ["runner", "runner+graphs", "slots", "slots+graphs", "dynamic"]


def make_batch(model, kind: str):
    """The slot-cache batch with our own forward (runner.py, torch ops) or the model's own forward through peft, each
    eager or with its decode step recorded and replayed as a CUDA graph would be; or the DynamicCache batch."""
    if kind == "dynamic":
        return DynamicDecodeBatch(model, pad_token_id=0)
    runner = make_runner(model, "torch") if kind.startswith("runner") else None
    assert runner is not None or not kind.startswith("runner")
    return DecodeBatch(model, pad_token_id=0, graph_backend=EmulatedGraphBackend() if kind.endswith("+graphs") else None,
                       runner=runner)


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def drive(batch, outputs: list, joins: dict) -> None:
    """Run a batch to the end: at step s the rows joins[s] join; every row's tokens read back go to
    outputs[row.owner]; rows leave once a read-back says they finished."""
    step = 0
    with torch.inference_mode():
        while joins or batch.rows:
            if step in joins and batch.can_admit():
                batch.add(joins.pop(step))
            elif step in joins:
                joins[step + 1] = joins.pop(step) + joins.get(step + 1, [])
            stepping = bool(batch.rows) and batch.needs_step()
            if stepping:
                batch.step()
            for update in batch.poll(wait=not stepping):
                outputs[update.row.owner].extend(update.tokens)
            batch.keep([k for k, r in enumerate(batch.rows) if r.finished is None])
            step += 1
            assert step < 1000, "the batch never finished"


def run_staggered(model, prompts, budgets, adapters=None, join_every=3, per_join=2, batch="slots") -> list[list[int]]:
    """Drive a batch by hand: `per_join` new rows every `join_every` steps, each leaving after its budget (which the
    device enforces: rows end there by themselves)."""
    batch = make_batch(model, batch)
    outputs = [[] for _ in prompts]
    joins = {}
    for n, start in enumerate(range(0, len(prompts), per_join)):
        joins[n * join_every] = [Row(prompts[i], adapters[i] if adapters else None, owner=i, params=greedy(budgets[i]))
                                 for i in range(start, min(start + per_join, len(prompts)))]
    drive(batch, outputs, joins)
    if isinstance(batch, DecodeBatch) and batch.graphs.backend is not None:  # the recorded steps really ran
        assert batch.graphs.disabled_because is None and batch.graphs.backend.replays > 0
    return outputs


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", ["qwen2", "gemma3", "llama", "qwen3"])
def test_rows_joining_and_leaving_match_generate_alone(tokenizer, kind, batch):
    """gemma3's tiny config has a 16-token sliding window, shorter than these sequences: its window layers are
    joined and trimmed too. With recorded steps, rows and columns are bucketed, so idle slots run along, and every
    replay after the first runs with positions and lengths other than those it was recorded with."""
    model = build_model(kind, tokenizer, seed=1).eval()
    prompts = random_prompts(10)
    budgets = [25 - (i % 4) * 3 for i in range(len(prompts))]
    expected = [generate_alone(model, p, n) for p, n in zip(prompts, budgets)]
    assert run_staggered(model, prompts, budgets, batch=batch) == expected


@pytest.mark.parametrize("batch", BATCHES)
def test_mixed_adapter_batches_match_each_adapter_alone(tokenizer, batch):
    """Rows join three at a time, one adapter per join, and leave at different steps: the batch runs one adapter
    alone, then mixes them, and ends with base-model rows alone. Our forward takes every mix from its LoRA banks (an
    adapter index per row; recorded throughout); on the model's own forward, peft's plain forward runs one adapter
    (recorded) and its `adapter_names` forward a mix (eager). The adapters have different ranks and targets."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(3)
    model = get_peft_model(build_model("qwen2", tokenizer, seed=1),
                           LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
                                      init_lora_weights=False),
                           adapter_name="one")
    model.add_adapter("two", LoraConfig(r=8, lora_alpha=16, target_modules=["v_proj", "up_proj"], init_lora_weights=False))
    model.eval()
    prompts = random_prompts(9, seed=5)
    adapters = ["one"] * 3 + ["two"] * 3 + ["base"] * 3
    budgets = [12, 9, 6] * 3
    answers = {a: tuple(tuple(generate_alone(model, p, 12, a)) for p in prompts[:3]) for a in ("one", "two", "base")}
    assert len(set(answers.values())) == 3  # the adapters really answer differently
    expected = [generate_alone(model, p, n, adapter) for p, n, adapter in zip(prompts, budgets, adapters)]
    got = run_staggered(model, prompts, budgets, [None if a == "base" else a for a in adapters], join_every=4,
                        per_join=3, batch=batch)
    assert got == expected


async def answer(engine: BatchingEngine, requests: list) -> list:
    """Wait for each submitted request's text and final event."""
    results = []
    for request in requests:
        text, event = "", None
        while not isinstance(event, (Finished, Failed)):
            event = await request.events.get()
            text += event.text if isinstance(event, Delta) else ""
        results.append((text, event))
    return results


def collect(engine: BatchingEngine, jobs: list[tuple[list[int], str | None, SamplingParams]]) -> list:
    """Submit every job to a started engine at once and gather (text, final event) per job."""
    async def main():
        loop = asyncio.get_running_loop()
        return await answer(engine, [engine.submit([Generation(0, ids, adapter, params)], loop)
                                     for ids, adapter, params in jobs])

    engine.start()
    try:
        return asyncio.run(main())
    finally:
        engine.stop()


def test_engine_keeps_one_adapter_per_batch_for_dora(tokenizer):
    """peft's mixed batches do not take DoRA, so the engine batches one adapter at a time, and the answers still
    equal each adapter's own."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(4)
    config = dict(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False, use_dora=True)
    model = get_peft_model(build_model("qwen2", tokenizer, seed=2), LoraConfig(**config), adapter_name="one")
    model.add_adapter("two", LoraConfig(**config))
    model.eval()
    prompts = random_prompts(6, seed=9)
    adapters = ["one", "two"] * 3
    expected = [tokenizer.decode(generate_alone(model, p, 8, a), skip_special_tokens=True)
                for p, a in zip(prompts, adapters)]
    engine = BatchingEngine(model, tokenizer, max_batch=4)
    assert not engine.mixed_adapters
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    results = collect(engine, [(p, a, params) for p, a in zip(prompts, adapters)])
    assert [type(event) for _, event in results] == [Finished] * 6
    assert [text for text, _ in results] == expected


def test_text_assembler_holds_a_possible_stop_and_cuts_a_real_one(tokenizer):
    ids = tokenizer("Hello! I am an AI assistant.", add_special_tokens=False)["input_ids"]
    assembler = TextAssembler(tokenizer, stop=["AI ass", "zzz"])
    pieces = [assembler.add(t) for t in ids]
    assert "".join(pieces) + assembler.finish() == "Hello! I am an "
    assert assembler.stopped and "A" not in "".join(pieces)  # "A..." was held back, never sent


def test_text_assembler_equals_decode_on_random_token_streams(tokenizer):
    """Random ids put multi-byte characters across token boundaries (and stray bytes) in every position."""
    rng = random.Random(0)
    for _ in range(200):
        ids = [rng.randrange(15, len(tokenizer)) for _ in range(rng.randrange(1, 30))]
        assembler = TextAssembler(tokenizer)
        streamed = "".join(assembler.add(t) for t in ids) + assembler.finish()
        assert streamed == tokenizer.decode(ids, skip_special_tokens=True)


def sample_next(logits, params, keys=None, position=0) -> list[int]:
    """The device sampler on rows with these settings (keys: random unless given)."""
    keys = keys if keys is not None else [random.getrandbits(63) for _ in params]
    kind = max(p.kind for p in params)
    tokens, broken = sample_rows(logits, settings_of(params, keys, [position] * len(params), logits.device), kind)
    return tokens.masked_fill(broken, FAILED_ROW).tolist()


def test_sampling_greedy_top_p_and_seed():
    logits = torch.tensor([[0.0, 5.0, 4.9, -3.0], [2.0, 1.0, 0.0, -1.0]])
    greedy_params = SamplingParams(max_tokens=1, temperature=0.0)
    assert sample_next(logits, [greedy_params, greedy_params]) == [1, 0]
    # top_p 0.6 keeps two tokens of row 0 (probabilities 0.52 and 0.47), one of row 1 (0.64)
    nucleus = SamplingParams(max_tokens=1, temperature=1.0, top_p=0.6)
    draws = {tuple(sample_next(logits, [nucleus, nucleus])) for _ in range(200)}
    assert {d[0] for d in draws} == {1, 2} and {d[1] for d in draws} == {0}
    seeded = SamplingParams(max_tokens=1, temperature=1.5, seed=7)
    flat = torch.zeros(1, 50)
    runs = [sample_next(flat, [seeded], [7]) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert len({sample_next(flat, [seeded], [7], position)[0] for position in range(20)}) > 5  # a new draw a token


def test_sampling_follows_each_rows_own_settings_in_one_batch():
    """One call samples rows with different temperatures, top_k, top_p, min_p and repetition penalties, each as it
    would be sampled alone (the same key gives the same token whatever the other rows are)."""
    logits = torch.tensor([[0.0, 5.0, 4.9, -3.0, 4.0]] * 5)
    settings = [SamplingParams(1, temperature=0.0), SamplingParams(1, temperature=1.0, top_k=2),
                SamplingParams(1, temperature=0.8, top_p=0.4), SamplingParams(1, temperature=1.0, min_p=0.5),
                SamplingParams(1, temperature=1.0)]
    seen = {tuple(sample_next(logits, settings)) for _ in range(300)}
    allowed = [{1}, {1, 2}, {1}, {1, 2, 4}, {0, 1, 2, 3, 4}]
    for column, tokens in enumerate(zip(*seen)):
        assert set(tokens) <= allowed[column]
    keys = [11, 12, 13, 14, 15]
    together = sample_next(logits, settings, keys, 4)
    alone = [sample_next(logits[:1], [p], [k], 4)[0] for p, k in zip(settings, keys)]
    assert together == alone
    # a repetition penalty of 100 on token 1 (already seen) hands greedy decoding to token 2
    penalised = SamplingParams(1, temperature=0.0, repetition_penalty=100.0)
    tokens, _ = sample_rows(logits[:1], settings_of([penalised], [1], [0], logits.device), GREEDY,
                            torch.tensor([[False, True, False, False, False]]))
    assert tokens.tolist() == [2]


def test_sampling_draws_from_the_distribution_with_keyed_noise():
    """The Gumbel-max draw over keyed noise is the softmax distribution (temperature 1), min_p keeps only tokens of
    at least min_p x the top probability, and the noise depends on nothing but the key and the position."""
    probs = torch.tensor([0.5, 0.3, 0.0, 0.15, 0.05])
    n = 20000
    keys = list(range(n))
    params = [SamplingParams(1, temperature=1.0)] * n
    drawn = torch.tensor(sample_next(probs.log().expand(n, 5), params, keys, 3))
    share = torch.bincount(drawn, minlength=5).float() / n
    assert torch.allclose(share, probs, atol=0.015)
    cut = sample_next(probs.log().expand(2000, 5), [SamplingParams(1, min_p=0.35)] * 2000, keys[:2000], 3)
    assert set(cut) == {0, 1}
    assert sample_next(probs.log().expand(4, 5), params[:4], keys[10:14], 3) == drawn[10:14].tolist()


def test_sampling_cannot_make_inf_or_nan_and_marks_a_broken_row_alone():
    """issue 25 case 2: a temperature far below any real one (1e-300 is 0 in float32: logits / 0) made the
    probabilities inf/nan and torch.multinomial raise for the whole batch. Below vLLM's floor (1e-5) a temperature is
    greedy; a tiny top_p keeps the top token; top_k past the vocabulary keeps it all; logits as large as float32 holds
    sample without overflow. A row whose own logits are broken (nan, +inf, all -inf) gets FAILED_ROW and the rows
    beside it are sampled as usual."""
    logits = torch.tensor([[0.0, 5.0, 4.9, -3.0], [2.0, 1.0, 0.0, -1.0]])
    extremes = [SamplingParams(max_tokens=1, temperature=t) for t in (1e-300, 5e-324, 1e-45, 1e-6)]
    extremes += [SamplingParams(max_tokens=1, temperature=1.0, top_p=p) for p in (1e-300, 5e-324)]
    extremes += [SamplingParams(max_tokens=1, temperature=2.0, top_k=1), SamplingParams(max_tokens=1, top_k=10**9, seed=3)]
    for params in extremes:
        for _ in range(20):
            assert sample_next(logits, [params, params])[0] in ((1,) if params.top_k != 10**9 else (0, 1, 2, 3))
    assert all(sample_next(logits, [p, p]) == [1, 0] for p in extremes[:6])
    top_k = SamplingParams(max_tokens=1, temperature=2.0, top_k=2)
    assert {sample_next(logits[:1], [top_k])[0] for _ in range(100)} == {1, 2}
    huge = torch.tensor([[3e38, -3e38, 3e38, 0.0]])  # the float32 range: (a - max) / t cannot overflow
    assert {sample_next(huge, [SamplingParams(max_tokens=1, temperature=0.01)])[0] for _ in range(50)} <= {0, 2}

    nan, inf = float("nan"), float("inf")
    broken = torch.tensor([[0.0, 5.0, nan, 1.0], [inf, 0.0, 0.0, 0.0], [-inf, -inf, -inf, -inf]])
    good = torch.tensor([[0.0, 9.0, -inf, 1.0]])  # a -inf logit (a masked token) is fine
    for params in (SamplingParams(max_tokens=1, temperature=0.0), SamplingParams(max_tokens=1, temperature=0.7),
                   SamplingParams(max_tokens=1, temperature=1.0, top_p=0.5, seed=5)):
        rows = torch.cat([good, broken, good])
        assert sample_next(rows, [params] * len(rows)) == [1, FAILED_ROW, FAILED_ROW, FAILED_ROW, 1]


def test_a_row_whose_numbers_break_fails_alone_and_leaves_nothing_behind(tokenizer):
    """issue 25 case 2: one row of a decode step that cannot be sampled (here: a prompt holding a token whose
    embedding is nan, so that row's logits are nan; a real forward, no mock) fails that request only; the greedy and
    sampled rows beside it answer exactly as they answer alone, and so do the rows that take its slot later (a
    retired row's nan keys and values must not leak into the next row of that slot through a masked column)."""
    model = build_model("llama", tokenizer, seed=1).eval()  # llama: the output head is not the embedding
    poison = 300
    with torch.no_grad():
        model.get_input_embeddings().weight[poison] = float("nan")
    prompts = [p for p in random_prompts(12, seed=11) if poison not in p][:6]
    expected = [tokenizer.decode(generate_alone(model, p, 10), skip_special_tokens=True) for p in prompts]
    greedy = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    # a seed whose answer never draws the poisoned token (a draw of it would break that row too)
    seeded = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.9, seed=5, ignore_eos=True)
    alone, alone_end = collect(BatchingEngine(model, tokenizer, max_batch=3), [(prompts[0], None, seeded)])[0]
    assert isinstance(alone_end, Finished)
    for poisoned_params in (greedy, seeded):
        engine = BatchingEngine(model, tokenizer, max_batch=3)
        poisoned = prompts[1][:3] + [poison] + prompts[1][3:]
        # the poisoned row joins first, then two more rounds reuse its slot
        jobs = [(poisoned, None, poisoned_params), (prompts[0], None, seeded), (prompts[2], None, greedy),
                (prompts[3], None, greedy), (prompts[4], None, greedy), (prompts[5], None, greedy)]
        results = collect(engine, jobs)
        assert isinstance(results[0][1], Failed) and "not finite" in results[0][1].message
        assert [type(event) for _, event in results[1:]] == [Finished] * 5
        assert results[1][0] == alone
        assert [text for text, _ in results[2:]] == expected[2:]
        assert engine.stats.failed == 1


def test_out_of_memory_fails_that_step_and_the_engine_serves_on(tokenizer, monkeypatch):
    """A forward that runs out of device memory fails the sequences in it with a message the client can act on;
    the next request is served as usual (the batch is emptied, not the server)."""
    model = build_model("qwen2", tokenizer, seed=1).eval()
    engine = BatchingEngine(model, tokenizer, max_batch=4)
    real_step, calls = engine.batch._step, []

    def step_once_out_of_memory(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # mid-answer
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_step(*args, **kwargs)

    monkeypatch.setattr(engine.batch, "_step", step_once_out_of_memory)
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    prompt = random_prompts(1)[0]

    async def two_requests():
        loop = asyncio.get_running_loop()
        first = await answer(engine, [engine.submit([Generation(0, prompt, None, params)], loop)])
        second = await answer(engine, [engine.submit([Generation(0, prompt, None, params)], loop)])
        return first + second

    engine.start()
    try:
        (_, failed), (text, finished) = asyncio.run(two_requests())
    finally:
        engine.stop()
    assert isinstance(failed, Failed) and "out of memory" in failed.message and "--max-batch" in failed.message
    assert engine.stats.failed == 1
    assert isinstance(finished, Finished) and finished.completion_tokens == 6
    assert text == tokenizer.decode(generate_alone(model, prompt, 6), skip_special_tokens=True)


@pytest.mark.parametrize("penalty", [5e-324, 0.05, 0.0, 10.5])
def test_a_repetition_penalty_that_would_make_the_logits_infinite_is_refused_in_the_request(penalty):
    """A positive logit is divided by the penalty: a denormal one (which `> 0` lets through) would make it infinite and
    fail the request as a server error; the request body refuses it first (422 in serve), the bounds named."""
    pydantic = pytest.importorskip("pydantic", reason="the request bodies need serve's pydantic (pip install -e '.[serve]')")
    from steadytune.serve.protocol import CompletionRequest

    with pytest.raises(pydantic.ValidationError, match="repetition_penalty"):
        CompletionRequest(model="m", prompt="hi", repetition_penalty=penalty)
    assert CompletionRequest(model="m", prompt="hi", repetition_penalty=0.1).repetition_penalty == 0.1
