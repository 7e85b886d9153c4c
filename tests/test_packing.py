"""Packing keeps examples apart: a packed row gives every example the hidden states and loss it has alone."""

from __future__ import annotations

import random

import pytest
import torch
from token_budget_sampler import TokenBudgetBatchSampler

from steadytune.data.collators import PadCollator
from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.packing import PackedCollator, group_by_token_budget, pack_into_rows
from steadytune.hardware.attention_kernels import segment_sdpa_kernel
from steadytune.model.anatomy import decoder_body
from steadytune.model.attention import register_varlen_attention
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.training.loss import causal_lm_loss_sum

TOKENIZER = build_tokenizer()


def make_examples(lengths, seed=0, vocab=None):
    rng = random.Random(seed)
    vocab = vocab or len(TOKENIZER)
    examples = []
    for n in lengths:
        ids = [rng.randrange(20, vocab) for _ in range(n)]
        prompt = rng.randrange(1, n)
        examples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * prompt + ids[prompt:]})
    return examples


def hidden_alone(model, example):
    ids = torch.tensor([example["input_ids"]])
    return decoder_body(model)(input_ids=ids, use_cache=False).last_hidden_state[0]


def loss_alone(model, examples):
    total, count = 0.0, 0
    for e in examples:
        batch = PadCollator(TOKENIZER.pad_token_id)([e])
        s, n = causal_lm_loss_sum(model, batch)
        total, count = total + float(s), count + n
    return total, count


def packed_hidden_slices(model, batch, examples):
    """Hidden states of each example, cut back out of the packed rows (positions restart at 0 per example)."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    hidden = decoder_body(model)(**inputs, use_cache=False).last_hidden_state
    found = []
    for e in examples:
        n = len(e["input_ids"])
        want = torch.tensor(e["input_ids"])
        for r in range(hidden.shape[0]):
            starts = (batch["position_ids"][r] == 0).nonzero().flatten().tolist()
            for s in starts:
                if s + n <= hidden.shape[1] and torch.equal(batch["input_ids"][r, s:s + n], want) \
                        and int(batch["position_ids"][r, s + n - 1]) == n - 1:
                    found.append(hidden[r, s:s + n])
                    break
            else:
                continue
            break
    assert len(found) == len(examples)
    return found


@pytest.mark.parametrize("kind", ["qwen2", "gemma3"])
def test_sdpa_packing_matches_examples_alone(kind):
    model = build_model(kind, TOKENIZER).eval()
    # gemma3's sliding window is 16: the 40-token example checks that packed rows keep it too.
    examples = make_examples([9, 40, 5, 17, 12, 3], seed=1)
    batch = PackedCollator(TOKENIZER.pad_token_id, row_len=48, attention="sdpa")(examples)
    assert batch["input_ids"].shape[0] < len(examples)  # several examples share a row
    with torch.no_grad():
        for e, got in zip(examples, packed_hidden_slices(model, batch, examples)):
            torch.testing.assert_close(got, hidden_alone(model, e), atol=1e-5, rtol=1e-4)
        packed_sum, packed_n = causal_lm_loss_sum(model, batch)
        alone_sum, alone_n = loss_alone(model, examples)
    assert packed_n == alone_n
    assert float(packed_sum) == pytest.approx(alone_sum, rel=1e-5)


@pytest.mark.parametrize("kind", ["qwen2", "gemma3"])
def test_varlen_packing_matches_examples_alone(kind):
    model = build_model(kind, TOKENIZER, attn_implementation=register_varlen_attention(segment_sdpa_kernel)).eval()
    examples = make_examples([9, 40, 5, 17], seed=2)
    batch = PackedCollator(TOKENIZER.pad_token_id, row_len=48, attention="varlen")(examples)
    assert batch["input_ids"].shape == (1, sum(len(e["input_ids"]) for e in examples))  # no padding at all
    reference = build_model(kind, TOKENIZER).eval()
    with torch.no_grad():
        packed_sum, packed_n = causal_lm_loss_sum(model, batch)
        alone_sum, alone_n = loss_alone(reference, examples)
    assert packed_n == alone_n
    assert float(packed_sum) == pytest.approx(alone_sum, rel=1e-5)


def test_varlen_gives_flash_kernels_only_half_precision():
    """Flash kernels take fp16/bf16 only. An fp32 model (full fine-tuning) under bf16 autocast has fp32 q/k after
    RoPE (found on the H200): they are cast as autocast casts SDPA's inputs; without autocast the exact reference
    kernel runs instead."""
    seen = []

    def flash_like(q, k, v, cu, max_len, scale, window=None):
        if q.dtype not in (torch.float16, torch.bfloat16):
            raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
        seen.append(q.dtype)
        return segment_sdpa_kernel(q, k, v, cu, max_len, scale, window)

    model = build_model("gemma3", TOKENIZER, attn_implementation=register_varlen_attention(flash_like)).eval()
    examples = make_examples([9, 14, 5], seed=4)
    batch = PackedCollator(TOKENIZER.pad_token_id, row_len=48, attention="varlen")(examples)
    reference = build_model("gemma3", TOKENIZER).eval()
    with torch.no_grad():
        alone_sum, _ = loss_alone(reference, examples)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            packed_sum, _ = causal_lm_loss_sum(model, batch)
        assert seen and set(seen) == {torch.bfloat16}
        assert float(packed_sum) == pytest.approx(alone_sum, rel=2e-2)  # bf16 attention
        seen.clear()
        exact_sum, _ = causal_lm_loss_sum(model, batch)  # fp32, no autocast: the reference kernel, exact
    assert not seen and float(exact_sum) == pytest.approx(alone_sum, rel=1e-5)


def test_varlen_drops_a_sliding_window_no_example_reaches():
    """Gemma 3 layers pass a sliding window (16 in the tiny config, 512 in the real one); when every packed example
    is shorter it changes nothing, so kernels without window support (torch 2.11's varlen_attn) still run."""
    windows = []

    def no_window_support(q, k, v, cu, max_len, scale, window=None):
        windows.append(window)
        return segment_sdpa_kernel(q, k, v, cu, max_len, scale, window)

    model = build_model("gemma3", TOKENIZER, attn_implementation=register_varlen_attention(no_window_support)).eval()
    with torch.no_grad():
        for lengths, expect_window in (([9, 14, 5], False), ([9, 40, 5], True)):
            windows.clear()
            examples = make_examples(lengths, seed=6)
            batch = PackedCollator(TOKENIZER.pad_token_id, row_len=48, attention="varlen")(examples)
            with torch.autocast("cpu", dtype=torch.bfloat16):  # half precision: the kernel itself runs
                packed_sum, _ = causal_lm_loss_sum(model, batch)
            alone_sum, _ = loss_alone(build_model("gemma3", TOKENIZER).eval(), examples)
            assert float(packed_sum) == pytest.approx(alone_sum, rel=2e-2)
            assert windows and any(w is not None for w in windows) is expect_window


def test_plain_concatenation_would_leak_across_examples():
    """The check above can fail: without restarting positions and masks, later examples see earlier ones."""
    model = build_model("qwen2", TOKENIZER).eval()
    examples = make_examples([9, 12], seed=3)
    ids = torch.tensor([examples[0]["input_ids"] + examples[1]["input_ids"]])
    with torch.no_grad():
        leaked = decoder_body(model)(input_ids=ids, use_cache=False).last_hidden_state[0, 9:]
        alone = hidden_alone(model, examples[1])
    assert (leaked - alone).abs().max() > 1e-3


def test_packed_gradients_match_examples_alone():
    model = build_model("qwen2", TOKENIZER)
    examples = make_examples([7, 20, 11], seed=4)
    batch = PackedCollator(TOKENIZER.pad_token_id, row_len=40, attention="sdpa")(examples)
    s, _ = causal_lm_loss_sum(model, batch)
    packed = torch.autograd.grad(s, model.model.layers[0].self_attn.q_proj.weight)[0]
    alone = torch.zeros_like(packed)
    for e in examples:
        s1, _ = causal_lm_loss_sum(model, PadCollator(TOKENIZER.pad_token_id)([e]))
        alone += torch.autograd.grad(s1, model.model.layers[0].self_attn.q_proj.weight)[0]
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-4)


def test_first_token_of_each_example_is_never_a_target():
    examples = [{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}, {"input_ids": [8, 9], "labels": [8, 9]}]
    batch = PackedCollator(0, row_len=8)(examples)
    assert batch["labels"].tolist() == [[IGNORE_INDEX, 6, 7, IGNORE_INDEX, 9]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]


def test_token_budget_groups_consecutive_examples_within_budget():
    lengths = [5, 7, 3, 9, 2, 20, 1]
    groups = group_by_token_budget(lengths, range(len(lengths)), max_tokens=12)
    assert [i for g in groups for i in g] == list(range(len(lengths)))  # same order, nothing lost
    for g in groups:
        assert len(g) == 1 or sum(lengths[i] for i in g) <= 12
    assert groups[-2] == [5]  # longer than the budget: a group of its own
    with pytest.raises(ValueError):
        group_by_token_budget(lengths, range(3), max_tokens=0)


def test_a_long_context_budget_gives_a_long_example_a_micro_batch_of_its_own():
    """From a 32K budget, an example of half the budget or more runs alone and the short ones around it keep
    filling their micro-batch (by sampler order it would close their half-full one, or take some of them along)."""
    lengths = [5000, 40000, 6000, 30000, 7000]
    assert group_by_token_budget(lengths, range(5), max_tokens=65536) == [[1], [0, 2, 3, 4]]
    assert group_by_token_budget([50, 400, 300], range(3), max_tokens=600) == [[0, 1], [2]]   # short budgets: as before


def test_token_budget_sampler_reshuffles_per_epoch_and_covers_everything():
    lengths = [random.Random(i).randrange(1, 30) for i in range(200)]
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=100, seed=7)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert sorted(i for g in first for i in g) == list(range(200))
    assert first != second
    assert len(sampler) == len(second)
    assert all(sum(lengths[i] for i in g) <= 100 for g in first)


def test_rows_are_nearly_full():
    rng = random.Random(0)
    lengths = [rng.randrange(10, 200) for _ in range(300)]
    rows = pack_into_rows(lengths, 512)
    assert sorted(i for r in rows for i in r) == list(range(300))
    assert all(sum(lengths[i] for i in r) <= 512 for r in rows)
    assert sum(lengths) / (512 * len(rows)) > 0.95


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_varlen_model_runs_unpacked_padded_batches_like_sdpa(padding_side):
    """The model trained with varlen packing is also evaluated and scored on padded batches (no cu_seq_lens):
    those must go through SDPA with the padding and sliding-window mask, exactly as an SDPA model would."""
    varlen = build_model("gemma3", TOKENIZER, attn_implementation=register_varlen_attention(segment_sdpa_kernel)).eval()
    reference = build_model("gemma3", TOKENIZER).eval()
    examples = make_examples([40, 9, 23], seed=5)  # 40 > gemma3's sliding window of 16
    batch = PadCollator(TOKENIZER.pad_token_id, padding_side=padding_side)(examples)
    with torch.no_grad():
        got = varlen(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        want = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-4)
