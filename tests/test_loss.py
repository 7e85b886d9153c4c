"""The loss equals transformers' own, chunked or not, and its gradients equal those of the full logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from steadytune.data.collators import PadCollator
from steadytune.data.encode import IGNORE_INDEX
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.training.loss import causal_lm_loss_sum, count_target_tokens, labelled_cross_entropy_sum

TOKENIZER = build_tokenizer()


def padded_batch(seed=0, lengths=(12, 7, 19)):
    g = torch.Generator().manual_seed(seed)
    examples = []
    for n in lengths:
        ids = torch.randint(20, len(TOKENIZER), (n,), generator=g).tolist()
        examples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * (n // 2) + ids[n // 2:]})
    return PadCollator(TOKENIZER.pad_token_id)(examples)


@pytest.mark.parametrize("kind", ["qwen2", "llama", "gemma3"])
def test_loss_sum_equals_transformers_loss(kind):
    model = build_model(kind, TOKENIZER).eval()
    batch = padded_batch()
    with torch.no_grad():
        ours, n = causal_lm_loss_sum(model, batch)
        theirs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       labels=batch["labels"]).loss
    assert n == count_target_tokens(batch)
    assert float(ours) / n == pytest.approx(float(theirs), rel=1e-5)


@pytest.mark.parametrize("softcap", [None, 5.0])
@pytest.mark.parametrize("weighted", [False, True])
def test_chunked_fused_equals_full_logits_in_value_and_gradient(softcap, weighted):
    g = torch.Generator().manual_seed(1)
    head = torch.nn.Linear(16, 300, bias=False, dtype=torch.float64)
    hidden = torch.randn(53, 16, dtype=torch.float64, generator=g, requires_grad=True)
    targets = torch.randint(0, 300, (53,), generator=g)
    weights = torch.rand(53, dtype=torch.float64, generator=g) if weighted else None

    def full():
        logits = head(hidden)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        per_token = F.cross_entropy(logits, targets, reduction="none")
        return (per_token * weights).sum() if weighted else per_token.sum()

    want = full()
    want_grads = torch.autograd.grad(want, (hidden, head.weight))
    for rows in (1, 7, 53, 1000):  # one row at a time, uneven chunks, exactly one chunk, more than needed
        got = labelled_cross_entropy_sum(head, hidden, targets, weights, softcap, chunk_rows=rows)
        got_grads = torch.autograd.grad(got * 3.0, (hidden, head.weight))
        assert float(got) == pytest.approx(float(want), rel=1e-12)
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a, 3.0 * b, rtol=1e-10, atol=1e-12)


def test_frozen_head_gets_no_gradient_and_lora_still_trains():
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(build_model("qwen2", TOKENIZER), LoraConfig(r=4, target_modules="all-linear"))
    batch = padded_batch(seed=2)
    loss, n = causal_lm_loss_sum(model, batch)
    (loss / n).backward()
    assert model.get_output_embeddings().weight.grad is None
    lora_b = [p for name, p in model.named_parameters() if "lora_B" in name]
    assert lora_b and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora_b)


def test_token_weights_scale_each_target():
    model = build_model("qwen2", TOKENIZER).eval()
    batch = padded_batch(seed=3)
    weights = torch.full(batch["labels"].shape, 2.0)
    with torch.no_grad():
        plain, n = causal_lm_loss_sum(model, batch)
        doubled, n2 = causal_lm_loss_sum(model, batch, token_weights=weights)
    assert n == n2
    assert float(doubled) == pytest.approx(2 * float(plain), rel=1e-6)


def test_no_labelled_token_gives_zero_with_a_graph():
    model = build_model("qwen2", TOKENIZER)
    batch = padded_batch()
    batch["labels"][:] = IGNORE_INDEX
    loss, n = causal_lm_loss_sum(model, batch)
    assert n == 0 and float(loss) == 0.0
    loss.backward()  # must not raise
