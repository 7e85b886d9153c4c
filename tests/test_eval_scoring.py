"""score_labels against a brute-force computation: each (prompt, label) alone, full logits, no batching."""

import pytest
import torch

from steadytune.eval.scoring import score_labels
from steadytune.model.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def brute_force_scores(model, prompts, label_targets):
    out = torch.empty(len(prompts), len(label_targets))
    model.eval()
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            for j, target in enumerate(label_targets):
                ids = torch.tensor([prompt + target])
                logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
                out[i, j] = sum(logprobs[len(prompt) - 1 + k, tok] for k, tok in enumerate(target))
    return out


def label_targets_for(tokenizer, words):
    return [tokenizer.encode(w, add_special_tokens=False) + [tokenizer.eos_token_id] for w in words]


PROMPT_TEXTS = [
    "判断下面这段话的情绪类别。文本：这个商品很好，质量不错。情绪：",
    "Review: bad. Sentiment:",
    "文本：太差了，等了一个小时没人理，再也不买了。包装破损，很失望。情绪：",
    "x",
    "Review: this product is great, fast delivery. Sentiment:",
]


@pytest.mark.parametrize("kind", ["qwen2", "llama", "gemma3"])
def test_score_labels_equals_brute_force(tokenizer, kind):
    model = build_model(kind, tokenizer, seed=1)
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in PROMPT_TEXTS]
    # Chinese words split into several tokens; the labels have different lengths.
    targets = label_targets_for(tokenizer, ["消极", "积极", "neutral", "好"])
    assert len({len(t) for t in targets}) > 1 and max(len(t) for t in targets) >= 3
    expected = brute_force_scores(model, prompts, targets)
    for batch_size in (1, 3):  # 3: batches mix prompt lengths, so padding is exercised
        got = score_labels(model, prompts, targets, batch_size=batch_size, pad_token_id=tokenizer.pad_token_id)
        assert got.shape == (len(prompts), len(targets))
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_score_labels_restores_training_mode_and_rejects_empty_inputs(tokenizer):
    model = build_model("qwen2", tokenizer)
    model.train()
    score_labels(model, [[5, 6, 7]], [[8], [9, 10]])
    assert model.training
    with pytest.raises(ValueError, match="empty target"):
        score_labels(model, [[5, 6]], [[8], []])
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        score_labels(model, [[]], [[8]])


def test_score_labels_under_peft_adapter_and_bf16(tokenizer):
    """A peft-wrapped bf16 model with fp32 LoRA weights (the training set-up) scores under autocast, and
    disable_adapter() gives the base model's scores."""
    from peft import LoraConfig, get_peft_model

    base = build_model("qwen2", tokenizer, seed=2)
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in PROMPT_TEXTS[:3]]
    targets = label_targets_for(tokenizer, ["消极", "积极"])
    base_scores = score_labels(base, prompts, targets)
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    adapted = score_labels(model, prompts, targets)
    assert not torch.allclose(adapted, base_scores)
    with model.disable_adapter():
        torch.testing.assert_close(score_labels(model, prompts, targets), base_scores)
    model.to(torch.bfloat16)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()
    low = score_labels(model, prompts, targets)
    assert low.dtype == torch.float32 and torch.isfinite(low).all()
    torch.testing.assert_close(low, adapted, atol=0.15, rtol=0.05)
