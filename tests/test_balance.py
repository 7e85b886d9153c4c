"""Class balance: inverse-frequency weights, a sampler that evens out classes, label tokens weighted in the loss."""

from collections import Counter

import pytest
import torch

from steadytune.data.balance import class_weights, label_token_weights, make_sampler, uses_loss_weights, uses_sampler
from steadytune.data.encode import IGNORE_INDEX
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.training.loss import causal_lm_loss_sum


def test_class_weights_are_inverse_frequency_and_average_to_one():
    w = class_weights([90, 10])
    # N / (K * n_c): 100 / (2 * 90) and 100 / (2 * 10)
    torch.testing.assert_close(w, torch.tensor([100 / 180, 5.0]))
    assert float((w * torch.tensor([90.0, 10.0])).sum() / 100) == pytest.approx(1.0)
    # mapping input, and a class without examples gets 0 (never used) instead of inf
    torch.testing.assert_close(class_weights({0: 30, 2: 10}), torch.tensor([40 / 60, 0.0, 2.0]))
    with pytest.raises(ValueError):
        class_weights([0, 0])


def test_modes():
    assert [uses_sampler(m) for m in ("none", "sampler", "loss", "both")] == [False, True, False, True]
    assert [uses_loss_weights(m) for m in ("none", "sampler", "loss", "both")] == [False, False, True, True]


def test_sampler_draws_classes_evenly_on_imbalanced_data():
    labels = [0] * 900 + [1] * 80 + [2] * 20
    sampler = make_sampler(labels, seed=7)
    assert len(sampler) == len(labels)
    drawn = Counter(labels[i] for _ in range(10) for i in sampler)
    shares = {k: drawn[k] / sum(drawn.values()) for k in range(3)}
    for k in range(3):
        assert shares[k] == pytest.approx(1 / 3, abs=0.03), shares
    # reproducible from the seed, different for another seed
    assert list(make_sampler(labels, seed=7)) == list(make_sampler(labels, seed=7))
    assert list(make_sampler(labels, seed=7)) != list(make_sampler(labels, seed=8))


def test_sampler_works_in_a_dataloader():
    labels = [0] * 30 + [1] * 3
    loader = torch.utils.data.DataLoader(list(range(33)), batch_size=11, sampler=make_sampler(labels, seed=0))
    seen = torch.cat(list(loader))
    assert len(seen) == 33 and int(seen.max()) < 33


@pytest.fixture(scope="module")
def batch_and_model():
    tok = build_tokenizer()
    rows = []
    for text, label in [("这个商品很好，质量不错。", "积极"), ("太差了，再也不买了。", "消极")]:
        prompt = tok.encode(f"文本：{text}情绪：", add_special_tokens=False)
        target = tok.encode(label, add_special_tokens=False) + [tok.eos_token_id]
        rows.append((prompt + target, [IGNORE_INDEX] * len(prompt) + target))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((2, width), tok.pad_token_id)
    labels = torch.full((2, width), IGNORE_INDEX)
    for r, (ids, lab) in enumerate(rows):
        input_ids[r, :len(ids)] = torch.tensor(ids)
        labels[r, :len(lab)] = torch.tensor(lab)
    batch = {"input_ids": input_ids, "labels": labels, "label_ids": torch.tensor([0, 1])}
    return batch, build_model("qwen2", tok, seed=3)


def test_label_token_weights_shape_and_values(batch_and_model):
    batch, _ = batch_and_model
    w = label_token_weights(batch, torch.tensor([0.25, 4.0]))
    assert w.shape == batch["labels"].shape
    trained = batch["labels"] != IGNORE_INDEX
    assert torch.all(w[0][trained[0]] == 0.25) and torch.all(w[1][trained[1]] == 4.0)
    assert torch.all(w[~trained] == 1.0)
    with pytest.raises(KeyError):
        label_token_weights({"labels": batch["labels"]}, [1.0, 1.0])


def _row_grad_norm(model, batch, row, weights):
    model.zero_grad()
    one = {k: v[row:row + 1] for k, v in batch.items()}
    token_weights = label_token_weights(one, weights) if weights is not None else None
    loss, _ = causal_lm_loss_sum(model, one, token_weights)
    loss.backward()
    return torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None))


def test_weighted_loss_gives_minority_tokens_larger_gradient(batch_and_model):
    """Majority class 0 (90 examples), minority class 1 (10): each row's gradient scales by its class weight."""
    batch, model = batch_and_model
    weights = class_weights([90, 10])
    plain = [_row_grad_norm(model, batch, r, None) for r in range(2)]
    weighted = [_row_grad_norm(model, batch, r, weights) for r in range(2)]
    assert float(weighted[0] / plain[0]) == pytest.approx(float(weights[0]), rel=1e-4)
    assert float(weighted[1] / plain[1]) == pytest.approx(float(weights[1]), rel=1e-4)
    # relative to the unweighted loss, the minority row's share of the gradient grows 9-fold
    assert float((weighted[1] / weighted[0]) / (plain[1] / plain[0])) == pytest.approx(9.0, rel=1e-4)
