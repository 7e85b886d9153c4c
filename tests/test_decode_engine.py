"""The decode engine's loop on the device (model/decode/): sampling and stopping inside the recorded step, the tokens
read back every few steps, prompts shared by a GRPO group prefilled once, LoRA banks that follow an optimizer step,
and sampled answers that depend on their key alone (the same run to run, whatever else is in the batch). Tiny models
on the CPU; recorded steps through the CPU stand-in of tests/graph_emulation.py."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from graph_emulation import EmulatedGraphBackend
from test_serve_decode_step import count_waits
from test_serve_engine import collect, drive, generate_alone, greedy, random_prompts

from steadytune.eval.scoring import inference
from steadytune.model.decode.batch import DecodeBatch
from steadytune.model.decode.complete import CHECK_EVERY, Decoder
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.runner import make_runner
from steadytune.model.decode.sampling import SamplingParams, mix_key
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.serve.engine import BatchingEngine, Finished


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def lora_model(tokenizer, kind="qwen2"):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(3)
    model = get_peft_model(build_model(kind, tokenizer, seed=1),
                           LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    return model.eval()


def test_a_group_of_completions_prefills_its_prompt_once_and_answers_as_separate_rows(tokenizer):
    """GRPO's roll-out: each prompt 4 times with 4 keys. The batch prefills 2 prompts, not 8, and each completion is
    the one its key gives alone."""
    model = lora_model(tokenizer)
    decoder = Decoder(model, 0, kernels="torch")
    prompts = random_prompts(2, seed=3)
    group = [p for p in prompts for _ in range(4)]
    keys = [mix_key(9, i) for i in range(8)]
    params = SamplingParams(max_tokens=6, temperature=1.0)
    with inference(model):
        together = decoder.generate(group, 6, params, [10**6], keys)
        assert decoder.batch.prefilled == 2
        alone = [Decoder(model, 0, kernels="torch").generate([p], 6, params, [10**6], [k]).ids[0]
                 for p, k in zip(group, keys)]
    assert together.ids == alone
    assert len({tuple(ids) for ids in together.ids[:4]}) > 1   # one prompt, other keys, other completions


def test_a_roll_out_waits_for_the_device_only_every_few_steps(tokenizer, monkeypatch):
    """The device stops each row itself; the host reads the tokens back every CHECK_EVERY steps, never once a step."""
    model = lora_model(tokenizer)
    decoder = Decoder(model, 0, kernels="torch")
    prompts = random_prompts(3, seed=4)
    with inference(model):
        decoder.generate(prompts, 4, SamplingParams(max_tokens=4), [10**6], [1, 2, 3])   # first-use work
        issued = decoder.batch.readbacks.issued
        waits = count_waits(monkeypatch)
        done = decoder.generate(prompts, 33, SamplingParams(max_tokens=33), [10**6], [1, 2, 3])
    assert [len(ids) for ids in done.ids] == [33] * 3 and done.truncated == [True] * 3
    reads = decoder.batch.readbacks
    assert 0 < waits["tolist"] <= 33 // CHECK_EVERY + 2      # one per read-back, not one per step
    assert reads.issued - issued <= 33 // CHECK_EVERY + 2


def test_stop_tokens_end_rows_on_the_device(tokenizer):
    """A row whose token is a stop token ends there (the stop token is its last), on the device: its count stops
    while another row runs on to its budget."""
    model = build_model("qwen2", tokenizer, seed=1).eval()
    prompts = random_prompts(2, seed=6)
    free = generate_alone(model, prompts[0], 12)
    stop = free[4]
    first = free.index(stop)
    batch = DecodeBatch(model, 0, runner=make_runner(model, "torch"))
    outputs = [[], []]
    rows = [Row(prompts[0], None, 0, SamplingParams(12, temperature=0.0, stop_token_ids=frozenset({stop}))),
            Row(prompts[1], None, 1, greedy(12))]
    with torch.inference_mode():
        batch.add(rows)
        for _ in range(11):
            batch.step()
        counts = batch.state.count[:2].tolist()
        drive(batch, outputs, {})
    assert outputs[0] == free[: first + 1] and rows[0].finished == "stop"
    assert counts == [first + 1, 12] and rows[1].finished == "length"


@pytest.mark.parametrize("kind", ["qwen2", "gemma3"])
def test_a_repetition_penalty_decodes_as_generate_does(tokenizer, kind):
    """Greedy with repetition_penalty 1.5 over the prompt and the answer so far, token for token as transformers'
    generate, recorded (the seen-token table is part of the recorded step)."""
    model = build_model(kind, tokenizer, seed=1, initializer_range=0.2).eval()
    prompts = random_prompts(3, seed=8)
    expected = []
    with torch.inference_mode():
        for p in prompts:
            out = model.generate(torch.tensor([p]), max_new_tokens=10, min_new_tokens=10, do_sample=False,
                                 repetition_penalty=1.5, pad_token_id=0, eos_token_id=None)
            expected.append(out[0, len(p):].tolist())
    plain = [generate_alone(model, p, 10) for p in prompts]
    assert expected != plain   # the penalty really changes the answers
    batch = DecodeBatch(model, 0, graph_backend=EmulatedGraphBackend(), runner=make_runner(model, "torch"))
    params = SamplingParams(10, temperature=0.0, ignore_eos=True, repetition_penalty=1.5)
    outputs = [[] for _ in prompts]
    drive(batch, outputs, {0: [Row(p, None, i, params) for i, p in enumerate(prompts[:2])],
                           3: [Row(prompts[2], None, 2, params)]})
    assert outputs == expected
    assert batch.graphs.enabled and batch.graphs.backend.replays > 0


def test_sampled_answers_are_the_same_run_to_run_recorded_or_not_and_in_any_batch(tokenizer):
    """Seeded requests through the serve engine: the same text in two fresh engines, alone or beside other requests;
    the recorded step (sampling inside it) draws exactly what the eager step draws."""
    model = build_model("gemma3", tokenizer, seed=1).eval()
    prompts = random_prompts(4, seed=12)
    params = [SamplingParams(12, temperature=0.9, top_p=0.95, seed=s, ignore_eos=True) for s in (1, 2)] + \
             [SamplingParams(12, temperature=1.2, min_p=0.05, seed=3, ignore_eos=True),
              SamplingParams(12, temperature=0.0, ignore_eos=True)]
    jobs = [(p, None, s) for p, s in zip(prompts, params)]
    first = collect(BatchingEngine(model, tokenizer, max_batch=4), jobs)
    again = collect(BatchingEngine(model, tokenizer, max_batch=4), jobs)
    alone = [collect(BatchingEngine(model, tokenizer, max_batch=1), [job])[0] for job in jobs]
    assert [type(e) for _, e in first] == [Finished] * 4
    assert [t for t, _ in first] == [t for t, _ in again] == [t for t, _ in alone]
    assert len({t for t, _ in first}) == 4

    outputs = {}
    for recorded in (False, True):
        batch = DecodeBatch(model, 0, graph_backend=EmulatedGraphBackend() if recorded else None,
                            runner=make_runner(model, "torch"))
        out = [[] for _ in prompts]
        drive(batch, out, {0: [Row(p, None, i, s, key=mix_key(i)) for i, (p, s) in enumerate(zip(prompts, params))]})
        outputs[recorded] = out
        if recorded:
            assert batch.graphs.enabled and batch.graphs.backend.replays > 0
    assert outputs[True] == outputs[False]


def test_the_lora_banks_follow_an_optimizer_step(tokenizer):
    """GRPO updates the adapter in place between roll-outs; the decoder's banks (copies) and its recorded steps follow:
    the next roll-out answers as the updated model does."""
    model = lora_model(tokenizer)
    decoder = Decoder(model, 0, graph_backend=EmulatedGraphBackend(), kernels="torch")
    prompts = random_prompts(2, seed=14)
    params = SamplingParams(max_tokens=8, temperature=0.0)
    with inference(model):
        before = decoder.generate(prompts, 8, params, [10**6], [1, 2]).ids
        assert before == [generate_alone(model, p, 8) for p in prompts]
        with torch.no_grad():
            for name, weight in model.named_parameters():
                if "lora_B" in name:
                    weight.mul_(-3.0)
        after = decoder.generate(prompts, 8, params, [10**6], [1, 2]).ids
    assert after == [generate_alone(model, p, 8) for p in prompts] and after != before
    assert decoder.batch.graphs.enabled and decoder.batch.graphs.captured > 0


def test_our_forward_is_chosen_where_it_applies_and_says_why_not_elsewhere(tokenizer, caplog):
    """The runner takes the families it knows with plain LoRA; DoRA and families it does not know keep the model's
    own forward (with a reason in the log)."""
    from peft import LoraConfig, get_peft_model

    assert make_runner(lora_model(tokenizer, "llama"), "torch") is not None
    dora = get_peft_model(build_model("qwen2", tokenizer), LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    with caplog.at_level("INFO", logger="steadytune.decode"):
        assert make_runner(dora, "torch") is None
        assert make_runner(build_model("qwen3_moe", tokenizer), "torch") is None
    assert "LoRA variant" in caplog.text and "qwen3_moe" in caplog.text
    assert make_runner(build_model("qwen2", tokenizer), "off") is None
    counts = Counter(type(m).__name__ for m in [make_runner(build_model("gemma3", tokenizer), "torch")])
    assert counts["DecodeRunner"] == 1


def test_chat_predict_and_eval_generate_run_on_the_engine_as_generate_answers(tokenizer):
    """eval.scoring.generate_texts (predict, `eval --mode generate`) and infer.generate.stream_answer (chat, studio)
    decode on the engine: 5 prompts through 2 rows at a time (the next joins as one finishes) and a streamed answer
    give transformers' greedy tokens; sampled answers with a seed are the same at any batch size."""
    from steadytune.eval.scoring import generate_texts
    from steadytune.infer.generate import Sampling, stream_answer
    from steadytune.model.decode.generate import decoder_for

    model = lora_model(tokenizer)
    prompts = random_prompts(5, seed=16)
    expected = [tokenizer.decode(generate_alone(model, p, 9), skip_special_tokens=True) for p in prompts]
    counts = [0] * 5
    texts = generate_texts(model, tokenizer, prompts, 9, batch_size=2, stop_token_ids=[10**6], token_counts=counts)
    batch = decoder_for(model, tokenizer.pad_token_id).batch
    assert texts == expected and counts == [9] * 5
    assert batch.prefilled == 5 and batch.readbacks.issued > 0 and batch.runner is not None

    greedy = Sampling(max_new_tokens=9, do_sample=False, temperature=1.0, top_p=1.0, top_k=0, num_beams=1,
                      repetition_penalty=1.0, length_penalty=1.0)
    pieces = list(stream_answer(model, tokenizer, prompts[0], greedy, [10**6]))
    assert "".join(pieces) == expected[0]

    sampled = {"do_sample": True, "temperature": 1.0, "top_p": 0.9, "top_k": 50}
    one = generate_texts(model, tokenizer, prompts, 9, batch_size=1, stop_token_ids=[10**6], sampling=sampled, seed=7)
    all_at_once = generate_texts(model, tokenizer, prompts, 9, batch_size=8, stop_token_ids=[10**6],
                                 sampling=sampled, seed=7)
    other_seed = generate_texts(model, tokenizer, prompts, 9, batch_size=8, stop_token_ids=[10**6],
                                sampling=sampled, seed=8)
    assert one == all_at_once != other_seed


def test_an_adapter_loaded_after_the_engine_started_is_decoded_with(tokenizer):
    """A second adapter added to a running model (on other projections than the first) joins the banks: its rows
    answer as generate does with it."""
    from peft import LoraConfig

    model = lora_model(tokenizer)
    batch = DecodeBatch(model, 0, graph_backend=EmulatedGraphBackend(), runner=make_runner(model, "torch"))
    prompts = random_prompts(2, seed=18)
    first = [[], []]
    drive(batch, first, {0: [Row(p, "default", i, greedy(6)) for i, p in enumerate(prompts)]})
    torch.manual_seed(5)
    model.add_adapter("late", LoraConfig(r=2, target_modules=["k_proj", "lm_head"], init_lora_weights=False))
    model.eval()
    expected = [generate_alone(model, p, 6, "late") for p in prompts]
    assert expected != first
    outputs = [[], []]
    drive(batch, outputs, {0: [Row(p, "late", i, greedy(6)) for i, p in enumerate(prompts)]})
    assert outputs == expected and batch.graphs.enabled
