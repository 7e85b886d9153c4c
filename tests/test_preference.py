"""Preference stages (dpo, kto, rm) on tiny models: the losses against their definitions computed directly from full
logits, the reference with the adapter switched off against the base model, learning on held-out pairs, the
reward model saved and loaded back, resume, packing, data and config errors, and LLaMA-Factory's own examples."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import LF_FIXTURES as LF
from conftest import needs_shared, two_processes

from steadytune.cli import main as cli_main
from steadytune.config import ConfigError, load_config
from steadytune.data.encode import infer_seqlen
from steadytune.data.preference import PAIRS, encode_pair
from steadytune.data.prepare import prepare_datasets
from steadytune.errors import UserError
from steadytune.model.tiny import build_model, build_tokenizer, save_tiny_model
from steadytune.stages.batches import FEEDBACK_GROUPS, SequenceCollator
from steadytune.stages.logprobs import ChunkedLinearLogProb, sequence_logprobs
from steadytune.stages.objectives import FeedbackObjective, PairObjective, RewardObjective
from steadytune.stages.reference import Reference
from steadytune.train import run_training
from steadytune.training.monitor import read_metrics


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models") / "qwen2", "qwen2")


COLOURS = ["red", "green", "blue", "black", "white", "brown", "pink", "gray"]


def pairs_dataset(folder: Path, n: int = 48) -> Path:
    """A sharegpt ranking dataset with a preference a tiny model learns in a few steps and that carries over to
    unseen prompts: the chosen answer states the colour, the rejected one dodges the question; plus its
    dataset_info.json entry, as LLaMA-Factory's dpo_en_demo has (and a kto_tag twin)."""
    rows = []
    for i in range(n):
        colour, wrong = COLOURS[i % len(COLOURS)], COLOURS[(i * 3 + 1) % len(COLOURS)]
        wrong = wrong if wrong != colour else COLOURS[(i + 2) % len(COLOURS)]
        rows.append({"conversations": [{"from": "human", "value": f"Paint item {i} {colour}. What colour is it?"}],
                     "chosen": {"from": "gpt", "value": f"It is {colour}."},
                     "rejected": {"from": "gpt", "value": f"Sorry, no idea about {wrong} things."}})
    (folder / "pairs.json").write_text(json.dumps(rows), encoding="utf-8")
    feedback = [{"messages": [{"role": "user", "content": r["conversations"][0]["value"]},
                              {"role": "assistant", "content": (r["chosen"] if i % 2 else r["rejected"])["value"]}],
                 "label": bool(i % 2)} for i, r in enumerate(rows)]
    (folder / "feedback.json").write_text(json.dumps(feedback), encoding="utf-8")
    info = {"pairs": {"file_name": "pairs.json", "ranking": True, "formatting": "sharegpt",
                      "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}},
            "feedback": {"file_name": "feedback.json", "formatting": "sharegpt",
                         "columns": {"messages": "messages", "kto_tag": "label"},
                         "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                  "assistant_tag": "assistant"}}}
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return folder


def overrides(model: Path, data: Path, out: Path, **extra) -> list[str]:
    base = {"model_name_or_path": str(model), "stage": "dpo", "dataset": "pairs", "dataset_dir": str(data),
            "template": "qwen", "cutoff_len": 64, "output_dir": str(out), "per_device_train_batch_size": 4,
            "learning_rate": 1e-2, "max_steps": 6, "logging_steps": 1, "save_steps": 3, "lora_rank": 4,
            "warmup_steps": 0, "lr_scheduler_type": "constant", "seed": 3}
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def train(args: list[str]):
    return run_training(load_config(None, args), progress=False)


# --- the chunked log-probability kernel ---------------------------------------------------------------------

@pytest.mark.parametrize("softcap", [None, 3.0])
def test_chunked_log_probs_and_gradients_match_log_softmax(softcap):
    torch.manual_seed(0)
    hidden = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(37, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 37, (11,))
    upstream = torch.randn(11, dtype=torch.float64)  # each row its own gradient, as a DPO loss gives them

    got = ChunkedLinearLogProb.apply(hidden, weight, targets, softcap, 4)  # 3 chunks
    (got * upstream).sum().backward()
    got_h, got_w = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    logits = hidden @ weight.T
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    want = logits.log_softmax(-1).gather(1, targets[:, None])[:, 0]
    (want * upstream).sum().backward()
    assert torch.allclose(got, want, atol=1e-12)
    assert torch.allclose(got_h, hidden.grad, atol=1e-10)
    assert torch.allclose(got_w, weight.grad, atol=1e-10)


# --- a fixed batch, computed two ways -----------------------------------------------------------------------

def lora_model(seed: int = 0, attn_implementation: str | None = None):
    """Tiny qwen2 with LoRA whose B is non-zero, so the policy differs from its reference (the base)."""
    from peft import LoraConfig, get_peft_model

    tokenizer = build_tokenizer()
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = get_peft_model(build_model("qwen2", tokenizer, seed=seed, **extra),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    torch.manual_seed(seed + 1)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.3)
    return model.double(), tokenizer


def fixed_examples(tokenizer, n: int = 3) -> list[dict]:
    cfg = load_config(None, ["template=qwen", "cutoff_len=40"])
    from steadytune.data.templates import get_template
    template = get_template("qwen", tokenizer)
    out = []
    for i in range(n):
        example = {"messages": [{"role": "user", "content": f"Which colour is item {i}?" + " more" * i}],
                   "chosen": {"role": "assistant", "content": f"It is {COLOURS[i]}."},
                   "rejected": {"role": "assistant", "content": f"Maybe {COLOURS[i + 3]} or so, I think."},
                   "system": None, "tools": None}
        encoded, _ = encode_pair(template, tokenizer, example, cfg.data.cutoff_len)
        out.append(encoded)
    return out


def direct_logp(model, input_ids: list[int], labels: list[int]) -> tuple[float, int]:
    """Sum of log p(label) over the answer of ONE sequence from the model's own full logits (no packing, no chunks)."""
    ids = torch.tensor([input_ids])
    logits = model(input_ids=ids).logits[0].double()
    logp = logits.log_softmax(-1)
    total, count = 0.0, 0
    for t in range(len(input_ids) - 1):
        if labels[t + 1] != -100:
            total += float(logp[t, labels[t + 1]].detach())
            count += 1
    return total, count


def direct_pair_logps(model, examples: list[dict], adapter: bool = True):
    """[(chosen sum, chosen count, rejected sum, rejected count)] per example, directly."""
    out = []
    for e in examples:
        n = e["lengths"][0]
        seqs = [(e["input_ids"][:n], e["labels"][:n]), (e["input_ids"][n:], e["labels"][n:])]
        if adapter:
            values = [direct_logp(model, *s) for s in seqs]
        else:
            with model.disable_adapter():
                values = [direct_logp(model, *s) for s in seqs]
        out.append((*values[0], *values[1]))
    return out


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x > 0 else x - math.log1p(math.exp(x))


def pair_loss_definition(loss: str, pc, pr, rc, rr, beta=0.1, gamma=0.5, eps=0.0) -> float:
    """Each pref_loss written out from its paper for one pair (pc, pr: policy log-probs; rc, rr: reference)."""
    h = (pc - rc) - (pr - rr)
    if loss == "sigmoid":   # Rafailov et al. 2023 eq. 7; label smoothing as cDPO
        return -(1 - eps) * log_sigmoid(beta * h) - eps * log_sigmoid(-beta * h)
    if loss == "hinge":     # SLiC
        return max(0.0, 1 - beta * h)
    if loss == "ipo":       # Azar et al. 2023 eq. 17 (average log-probs)
        return (h - 1 / (2 * beta)) ** 2
    if loss == "orpo":      # Hong et al. 2024 (average log-probs P)
        odds = lambda lp: lp - math.log(1 - math.exp(lp))  # noqa: E731
        return -pc - beta * log_sigmoid(odds(pc) - odds(pr))
    if loss == "simpo":     # Meng et al. 2024 eq. 6 (average log-probs)
        return -log_sigmoid(beta * pc - beta * pr - gamma)
    raise AssertionError(loss)


@pytest.mark.parametrize("pref_loss", ["sigmoid", "hinge", "ipo", "orpo", "simpo"])
@pytest.mark.parametrize("packed", [None, "sdpa", "static sdpa", "static varlen"])
def test_dpo_loss_equals_its_definition_on_a_fixed_batch(pref_loss, packed):
    """Padded, packed, and packed then padded to a static shape planned for a bigger micro-batch (the rows or
    the varlen row's padding pieces must not count): the loss of each pref_loss as its paper writes it."""
    from steadytune.hardware.attention_kernels import segment_sdpa_kernel
    from steadytune.model.attention import register_varlen_attention

    attention = packed.split()[-1] if packed else None
    impl = register_varlen_attention(segment_sdpa_kernel) if attention == "varlen" else None
    model, tokenizer = lora_model(attn_implementation=impl)
    examples = fixed_examples(tokenizer)
    extra = ["dpo_label_smoothing=0.2"] if pref_loss == "sigmoid" else []
    cfg = load_config(None, ["stage=dpo", f"pref_loss={pref_loss}", "pref_beta=0.3", "simpo_gamma=0.7",
                             "pref_ftx=0.25", *extra])
    objective = PairObjective(model, cfg)
    collate = SequenceCollator(tokenizer.pad_token_id, packing_attention=attention, row_len=64)
    if packed and packed.startswith("static"):
        more = examples + fixed_examples(tokenizer, 5)[3:]
        collate = collate.with_static(collate.static_shape_for(more, [[0, 1, 2], [0, 1, 2, 3, 4]]))
    batch = collate(examples)
    if packed and packed.startswith("static"):
        assert batch["static"] is True and batch["input_ids"].numel() > sum(len(e["input_ids"]) for e in examples)
    loss_sum, n = objective(batch)

    averaged = pref_loss in ("ipo", "orpo", "simpo")
    policy = direct_pair_logps(model, examples)
    ref = direct_pair_logps(model, examples, adapter=False)
    want = 0.0
    for (pc, nc, pr, nr), (rc, _, rr, _) in zip(policy, ref):
        if averaged:
            pc, pr, rc, rr = pc / nc, pr / nr, rc / nc, rr / nr
        want += pair_loss_definition(pref_loss, pc, pr, rc, rr, beta=0.3, gamma=0.7,
                                     eps=0.2 if pref_loss == "sigmoid" else 0.0)
        want += 0.25 * -(pc if averaged else pc / nc)  # pref_ftx: the chosen answer's NLL per token
    assert n == len(examples)
    assert float(loss_sum) == pytest.approx(want, rel=1e-9)
    metrics = objective.train_metrics.pop()
    assert {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"} <= set(metrics)


def test_kto_loss_equals_its_definition_on_a_fixed_batch():
    model, tokenizer = lora_model(seed=4)
    pairs = fixed_examples(tokenizer, n=4)
    # feedback examples: [prompt + answer, prompt + another example's answer]; answers 0, 2 desirable
    examples = []
    for i, e in enumerate(pairs):
        n = e["lengths"][0]
        other = pairs[i - 1]
        k = other["lengths"][0]  # the other example's rejected sequence stands in for a mismatched answer
        examples.append({"input_ids": e["input_ids"][:n] + other["input_ids"][k:],
                         "labels": e["labels"][:n] + other["labels"][k:],
                         "lengths": [n, other["lengths"][1]], "kto_tag": i % 2 == 0})
    cfg = load_config(None, ["stage=kto", "pref_beta=0.5", "kto_chosen_weight=1.5", "kto_rejected_weight=0.7"])
    objective = FeedbackObjective(model, cfg)
    loss_sum, n = objective(SequenceCollator(tokenizer.pad_token_id, FEEDBACK_GROUPS)(examples))

    def logps(adapter: bool, part: int):
        out = []
        for e in examples:
            n0 = e["lengths"][0]
            ids, labels = (e["input_ids"][:n0], e["labels"][:n0]) if part == 0 else (e["input_ids"][n0:],
                                                                                       e["labels"][n0:])
            if adapter:
                out.append(direct_logp(model, ids, labels)[0])
            else:
                with model.disable_adapter():
                    out.append(direct_logp(model, ids, labels)[0])
        return out

    policy, ref = logps(True, 0), logps(False, 0)
    z0 = max(0.0, sum(a - b for a, b in zip(logps(True, 1), logps(False, 1))) / len(examples))
    sigmoid = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    want = 0.0
    for e, p, r in zip(examples, policy, ref):
        if e["kto_tag"]:
            want += 1.5 * (1 - sigmoid(0.5 * ((p - r) - z0)))
        else:
            want += 0.7 * (1 - sigmoid(0.5 * (z0 - (p - r))))
    assert n == 4
    assert float(loss_sum) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("packed", ["sdpa", "static varlen"])
def test_reward_loss_equals_its_definition_with_transformers_own_pooling(tmp_path, packed):
    """The score read at each sequence's last token (packed here; or in a static varlen row, pairs in fixed slots)
    equals transformers' sequence-classification forward on that sequence alone; the loss is
    -log sigmoid(r_chosen - r_rejected)."""
    from transformers import AutoModelForSequenceClassification

    from steadytune.hardware.attention_kernels import segment_sdpa_kernel
    from steadytune.model.attention import register_varlen_attention

    folder = save_tiny_model(tmp_path / "m", "llama")
    attention = packed.split()[-1]
    extra = {"attn_implementation": register_varlen_attention(segment_sdpa_kernel)} if attention == "varlen" else {}
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, **extra).double()
    tokenizer = build_tokenizer()
    examples = fixed_examples(tokenizer)
    objective = RewardObjective(model, load_config(None, ["stage=rm"]))
    collate = SequenceCollator(tokenizer.pad_token_id, packing_attention=attention, row_len=64)
    if packed.startswith("static"):
        collate = collate.with_static(collate.static_shape_for(fixed_examples(tokenizer, 5), [[0, 1, 2, 3, 4]]))
    batch = collate(examples)
    assert ("slots" in batch) == packed.startswith("static")
    loss_sum, n = objective(batch)
    want = 0.0
    for e in examples:
        k = e["lengths"][0]
        score = lambda ids: float(model(input_ids=torch.tensor([ids])).logits[0, 0])  # noqa: E731
        want += -log_sigmoid(score(e["input_ids"][:k]) - score(e["input_ids"][k:]))
    assert float(loss_sum) == pytest.approx(want, rel=1e-9)


def test_reference_log_probs_with_the_adapter_disabled_equal_the_base_models(tiny):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    tokenizer = build_tokenizer()
    base = AutoModelForCausalLM.from_pretrained(tiny)
    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny),
                            LoraConfig(r=4, target_modules=["q_proj", "up_proj"]))
    for name, param in policy.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.5)
    batch = SequenceCollator(tokenizer.pad_token_id)(fixed_examples(tokenizer))
    ref, ref_counts = Reference().sequence_logprobs(policy, batch, 6)
    with torch.no_grad():
        want, counts = sequence_logprobs(base, batch, 6)
        moved, _ = sequence_logprobs(policy, batch, 6)
    assert torch.equal(ref_counts, counts)
    assert torch.allclose(ref, want, rtol=1e-6, atol=1e-5)
    assert not torch.allclose(moved, want, atol=1e-3)  # the adapter does change them when on


# --- training ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pref_loss", ["sigmoid", "simpo"])
def test_training_on_pairs_raises_held_out_accuracy_and_margin(tiny, tmp_path, pref_loss):
    """Held-out pairs scored before training (DPO: ties, as policy = reference; SimPO: the untrained model's own
    preferences) and after: accuracy and margin go up, and keep going up between evaluations."""
    from steadytune.model.load import load_model_and_tokenizer
    from steadytune.model.lora import attach_adapter
    from steadytune.stages.evaluation import evaluate_examples
    from steadytune.stages.preference import PREFERENCE_STAGES

    data = pairs_dataset(tmp_path)
    out = tmp_path / "dpo"
    args = overrides(tiny, data, out, max_steps=12, val_size=8, eval_strategy="steps", eval_steps=4,
                     logging_steps=4, save_steps=1000, learning_rate=1e-3, pref_loss=pref_loss,
                     metric_for_best_model="rewards/accuracies")
    cfg = load_config(None, args)
    stage = PREFERENCE_STAGES["dpo"]
    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    model = attach_adapter(model, cfg)
    held_out = stage.prepare_data(cfg, tokenizer).eval
    before = evaluate_examples(stage.make_objective(model, cfg), held_out, stage.make_collator(cfg, tokenizer, None),
                               8, torch.device("cpu"))

    train(args)
    evals = [r for r in read_metrics(out / "metrics.jsonl") if "eval_loss" in r]
    assert len(evals) == 3 and evals[0]["eval_rewards/accuracies"] is not None
    assert [e["step"] for e in evals] == [4, 8, 12]
    after = evals[-1]
    assert before["eval_rewards/accuracies"] < 0.75 <= after["eval_rewards/accuracies"]
    assert before["eval_rewards/margins"] < evals[0]["eval_rewards/margins"] < after["eval_rewards/margins"]
    assert after["eval_loss"] < evals[0]["eval_loss"] < before["eval_loss"]
    steps = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    for key in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"):
        assert key in steps[-1]
    results = json.loads((out / "train_results.json").read_text(encoding="utf-8"))
    assert results["best_metric"] == max(e["eval_rewards/accuracies"] for e in evals)  # metric_for_best_model


def test_dpo_resume_reproduces_the_uninterrupted_curve(tiny, tmp_path):
    data = pairs_dataset(tmp_path)
    straight = train(overrides(tiny, data, tmp_path / "straight"))
    out = tmp_path / "resumed"
    train(overrides(tiny, data, out))
    resumed = train(overrides(tiny, data, out, resume_from_checkpoint=str(out / "checkpoint-3")))
    assert resumed.losses == pytest.approx(straight.losses[3:], rel=1e-6)
    logged = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    assert [r["loss"] for r in logged] == pytest.approx(straight.losses, rel=1e-6)
    assert "rewards/margins" in logged[-1]


def test_packed_and_padded_pairs_train_the_same(tiny, tmp_path):
    """The same token-budget groups, packed or padded: the same loss curve (packing changes only speed)."""
    data = pairs_dataset(tmp_path)
    packed = train(overrides(tiny, data, tmp_path / "p", packing="true", max_tokens_per_batch=200, max_steps=4))
    padded = train(overrides(tiny, data, tmp_path / "u", packing="false", max_tokens_per_batch=200, max_steps=4))
    assert packed.losses == pytest.approx(padded.losses, rel=1e-5)
    # metrics' `tokens` counts answer tokens trained (chosen + rejected), as for sft, not pairs
    tokens = {run: [r["tokens"] for r in read_metrics(tmp_path / run / "metrics.jsonl") if "loss" in r]
              for run in ("p", "u")}
    assert tokens["p"] == tokens["u"] and all(b > a for a, b in zip(tokens["u"], tokens["u"][1:]))
    assert tokens["u"][0] >= 2 * 3 * 2  # at least two pairs a step, two answers of 3+ tokens each


@pytest.mark.parametrize("stage", ["dpo", "rm"])
def test_compiled_pairs_take_one_static_shape_and_train_as_padded_ones(tiny, tmp_path, compiled_graphs, stage):
    """Packed pairs padded to one shape (chosen and rejected as sequences of their own), so compiled layers serve
    every micro-batch: the policy and the reference (adapter off, no gradients) forwards compile a bounded number
    of times, not once per step, and the curve is the padded run's."""
    from test_train_packing import decisions

    compiled = compiled_graphs
    data = pairs_dataset(tmp_path)
    args = dict(stage=stage, max_tokens_per_batch=200, max_steps=5)
    fast = train(overrides(tiny, data, tmp_path / "compiled", packing="true", torch_compile="true", **args))
    chosen = decisions(tmp_path / "compiled")
    assert chosen["static_shapes"]["value"] is True
    assert chosen["torch_compile"]["value"] is True
    assert chosen["cuda_graphs"]["value"] is False   # a CPU; not the stage: dpo and rm compute into fixed slots
    assert "records its metrics" not in chosen["cuda_graphs"]["reason"]
    # one tiny layer type; the policy with gradients, the reference without / with the adapter off: a few graphs
    assert 1 <= len(compiled) <= 6, compiled
    padded = train(overrides(tiny, data, tmp_path / "padded", packing="false", **args))
    assert fast.losses == pytest.approx(padded.losses, rel=1e-4)


def test_kto_keeps_dynamic_shapes_under_compile(tiny, tmp_path):
    data = pairs_dataset(tmp_path)
    with pytest.raises(UserError, match="kto"):   # asked for explicitly: an error naming why, never a silent skip
        train(overrides(tiny, data, tmp_path / "k", stage="kto", dataset="feedback", packing="true",
                        max_tokens_per_batch=200, max_steps=2, cuda_graphs="true"))


def test_kto_trains_and_logs_its_metrics(tiny, tmp_path):
    data = pairs_dataset(tmp_path)
    out = tmp_path / "kto"
    result = train(overrides(tiny, data, out, stage="kto", dataset="feedback", max_steps=8, val_size=8,
                             eval_strategy="steps", eval_steps=8, pref_beta=0.5))
    assert result.losses[-1] < result.losses[0]
    logged = set().union(*(r for r in read_metrics(out / "metrics.jsonl") if "loss" in r))
    # (a step whose answers are all desirable logs no rewards/rejected: means of nothing are left out)
    assert {"kl", "rewards/chosen", "rewards/rejected", "rewards/margins"} <= logged
    assert any("eval_kl" in r for r in read_metrics(out / "metrics.jsonl"))


def test_full_finetuning_dpo_compares_with_a_frozen_copy(tiny, tmp_path):
    data = pairs_dataset(tmp_path)
    out = tmp_path / "full"
    result = train(overrides(tiny, data, out, finetuning_type="full", learning_rate=1e-3, max_steps=3))
    import yaml
    decisions = yaml.safe_load((out / "run_config.yaml").read_text(encoding="utf-8"))["decisions"]
    assert decisions["ref_model"]["value"] == str(tiny)
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-6)  # policy == reference at the start
    assert (out / "model.safetensors").is_file()


def test_reward_model_saves_loads_back_and_scores(tiny, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from steadytune.infer.reward import RewardScorer

    data = pairs_dataset(tmp_path)
    out = tmp_path / "rm"
    args = overrides(tiny, data, out, stage="rm", max_steps=10, val_size=8, eval_strategy="steps", eval_steps=10,
                     learning_rate=5e-3, do_eval="true")
    config = tmp_path / "rm.yaml"
    config.write_text("\n".join(a.replace("=", ": ", 1) for a in args), encoding="utf-8")
    assert cli_main(["train", str(config)]) == 0  # do_eval runs after training, as `steadytune eval` would
    in_training = [r for r in read_metrics(out / "metrics.jsonl") if "eval_loss" in r][-1]
    after = json.loads((out / "eval_results.json").read_text(encoding="utf-8"))  # do_eval: loaded back from out
    for key in ("eval_loss", "eval_rewards/accuracies", "eval_rewards/margins"):
        assert after[key] == pytest.approx(in_training[key], rel=1e-5, abs=1e-7)
    assert json.loads((out / "adapter_config.json").read_text())["task_type"] == "SEQ_CLS"
    assert cli_main(["eval", str(config), "--output-dir", str(tmp_path / "eval")]) == 0  # steadytune eval: the same
    again = json.loads((tmp_path / "eval" / "eval_results.json").read_text(encoding="utf-8"))
    assert again["eval_loss"] == pytest.approx(after["eval_loss"], rel=1e-6)

    cfg = load_config(None, args)
    scorer = RewardScorer.from_run(cfg)
    conversation = {"messages": [{"role": "user", "content": "Paint item 3 black. What colour is it?"},
                                 {"role": "assistant", "content": "It is black."}]}
    ours = scorer.score([conversation])[0]
    # The same reward through plain transformers + peft: the saved folder is the ecosystem's format.
    model = PeftModel.from_pretrained(AutoModelForSequenceClassification.from_pretrained(tiny, num_labels=1), out)
    ids = torch.tensor([scorer.encode(conversation)["input_ids"]])
    assert float(model(input_ids=ids).logits[0, 0]) == pytest.approx(ours, rel=1e-5)


# --- data and configuration --------------------------------------------------------------------------------

def test_pair_truncation_keeps_one_prompt_and_cuts_both_answers_alike():
    tokenizer = build_tokenizer()
    from steadytune.data.templates import get_template
    example = {"messages": [{"role": "user", "content": "Tell me a story. " * 20}],
               "chosen": {"role": "assistant", "content": "Once upon a time " * 30},
               "rejected": {"role": "assistant", "content": "No."}, "system": None, "tools": None}
    encoded, (prompt_cut, answer_cut) = encode_pair(get_template("qwen", tokenizer), tokenizer, example, 96)
    assert prompt_cut > 0 and answer_cut > 0
    n_c, n_r = encoded["lengths"]
    chosen_prompt = [i for i, lab in zip(encoded["input_ids"][:n_c], encoded["labels"][:n_c]) if lab == -100]
    rejected_prompt = [i for i, lab in zip(encoded["input_ids"][n_c:], encoded["labels"][n_c:]) if lab == -100]
    assert chosen_prompt == rejected_prompt and n_c <= 96 and n_r <= 96
    assert infer_seqlen(10, 100, 64) == (10, 54) and infer_seqlen(100, 10, 64) == (54, 10)  # LLaMA-Factory's rule


def test_alpaca_ranking_file_by_path(tmp_path):
    rows = [{"instruction": "Say hi", "input": "politely", "chosen": "Hello there!", "rejected": "Go away."},
            {"instruction": "Count", "input": "", "chosen": "1 2 3", "rejected": ""}]  # an empty answer is dropped
    path = tmp_path / "ranked.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    cfg = load_config(None, ["stage=dpo", f"dataset={path}", "template=qwen", "cutoff_len=256"])
    data = prepare_datasets(cfg, build_tokenizer(), PAIRS)
    assert len(data.train) == 1
    tokenizer = build_tokenizer()
    n = data.train[0]["lengths"][0]
    text = tokenizer.decode(data.train[0]["input_ids"][:n])
    assert "Say hi\npolitely" in text and text.endswith("Hello there!<|im_end|>\n")


def test_stage_and_dataset_mismatches_are_clear_errors(tiny, tmp_path):
    data = pairs_dataset(tmp_path)
    with pytest.raises(ConfigError, match="ranking dataset"):
        train(overrides(tiny, data, tmp_path / "a", stage="sft"))
    with pytest.raises(ConfigError, match="no chosen/rejected"):
        train(overrides(tiny, data, tmp_path / "b", dataset="feedback"))
    with pytest.raises(ConfigError, match="kto_tag"):
        train(overrides(tiny, data, tmp_path / "c", stage="kto"))
    with pytest.raises(ConfigError, match="train_on_prompt"):
        load_config(None, ["stage=dpo", "train_on_prompt=true"])
    with pytest.raises(ConfigError, match="sigmoid"):
        load_config(None, ["stage=dpo", "pref_loss=ipo", "dpo_label_smoothing=0.1"])
    with pytest.raises(ConfigError, match="stage: ppo"):
        load_config(None, ["stage=ppo"])
    with pytest.raises(UserError, match="no trained adapter"):
        from steadytune.evaluate import evaluate_saved
        evaluate_saved(load_config(None, overrides(tiny, data, tmp_path / "none", stage="rm")))


# --- LLaMA-Factory's own examples --------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("example,stage", [("qwen3_lora_dpo.yaml", "dpo"), ("qwen3_lora_kto.yaml", "kto"),
                                           ("qwen3_lora_reward.yaml", "rm")])
def test_llamafactory_preference_examples_run_with_model_and_data_changed(tiny, tmp_path, monkeypatch, example, stage):
    monkeypatch.chdir(tmp_path)
    code = cli_main(["train", str(LF / "examples" / "train_lora" / example), f"model_name_or_path={tiny}",
                     f"dataset_dir={LF / 'data'}", "max_steps=2", "cutoff_len=96", "max_samples=32"])
    assert code == 0
    out = tmp_path / "saves" / "qwen3-4b" / "lora" / {"dpo": "dpo", "kto": "kto", "rm": "reward"}[stage]
    assert (out / "adapter_model.safetensors").is_file()
    logged = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    assert logged and "rewards/chosen" in logged[-1]


GRAPH_GROUPS = [[0, 1], [2, 3, 4], [1, 3], [0, 2, 4], [4], [0, 1, 2]]   # 1-3 pairs per micro-batch


def static_pair_batches(tokenizer, examples: list[dict], groups: list[list[int]]) -> list[dict]:
    """The micro-batches of `groups` packed into one static varlen shape (pairs in fixed slots)."""
    plain = SequenceCollator(tokenizer.pad_token_id, packing_attention="varlen", row_len=64)
    static = plain.with_static(plain.static_shape_for(examples, groups))
    return [static([examples[i] for i in g]) for g in groups]


def train_pairs(objective, batches: list[dict], lr: float, graphed: bool):
    """Three optimizer steps of two micro-batches each, eagerly or through the CPU stand-in for a CUDA graph (its
    "replay" runs the recorded step again on the same buffers; test_speed), as train.forward_backward does:
    -> (loss per pair of each step, logged metrics of each step, sum of the trainable weights, the runner)."""
    from test_speed import RerunStep

    from steadytune.training.graphs import GraphRunner

    params = [p for p in objective.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    runner = GraphRunner(objective.compute, params, torch.device("cpu"), None, step_class=RerunStep,
                         on_replay=lambda b, outputs: objective.record(outputs, b["n_examples"]))
    losses, logged = [], []
    for window in (batches[0:2], batches[2:4], batches[4:6]):
        pairs = sum(b["n_examples"] for b in window)
        total = torch.zeros((), dtype=torch.float64)
        for b in window:
            if graphed and runner.takes(b):
                total += runner(b, 1.0 / pairs)
            else:
                loss_sum, _ = objective(b)
                (loss_sum / pairs).backward()
                total += loss_sum.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(total) / pairs)
        logged.append(objective.train_metrics.pop())
    return losses, logged, sum(float(p.sum()) for p in params), runner


def test_graphed_dpo_micro_batches_update_and_log_exactly_like_eager_ones():
    """stage dpo under CUDA graphs (here the CPU stand-in from test_speed, whose "replay" runs the recorded step
    again on the same buffers): pairs in fixed slots of one static varlen shape, the reference forward inside the
    step, metrics read from the recorded outputs after each replay. Losses, weights and logged rewards equal the
    eager run's, with micro-batches of different numbers of pairs replaying the one graph."""
    from steadytune.hardware.attention_kernels import segment_sdpa_kernel
    from steadytune.model.attention import register_varlen_attention

    impl = register_varlen_attention(segment_sdpa_kernel)
    tokenizer = build_tokenizer()
    batches = static_pair_batches(tokenizer, fixed_examples(tokenizer, 5), GRAPH_GROUPS)
    assert all(b["static"] is True for b in batches)
    assert len({tuple(b["input_ids"].shape) for b in batches}) == 1 and len({b["slots"] for b in batches}) == 1
    cfg = load_config(None, ["stage=dpo", "pref_beta=0.3", "pref_ftx=0.1"])

    def run(graphed: bool):
        model, _ = lora_model(attn_implementation=impl)
        return train_pairs(PairObjective(model, cfg), batches, 1e-2, graphed)

    eager, eager_logged, eager_weights, _ = run(False)
    graphed, graphed_logged, graphed_weights, runner = run(True)
    assert runner.step is not None and runner.eager_batches == 0   # every micro-batch replayed the one graph
    # (the graph's loss scale is an fp32 tensor: 1 / pairs rounds at 1e-8 against this fp64 model's eager division)
    assert graphed == pytest.approx(eager, rel=1e-6)
    assert graphed_weights == pytest.approx(eager_weights, rel=1e-6)
    for want, got in zip(eager_logged, graphed_logged):
        assert set(got) == set(want) and all(got[k] == pytest.approx(want[k], rel=1e-6) for k in want)
    assert graphed[-1] != graphed[0]


def test_graphed_reward_model_micro_batches_update_and_log_exactly_like_eager_ones(tmp_path):
    """stage rm under the CPU stand-in for a CUDA graph: scores read at each slot's last token, listed by the
    collator (no search on the GPU), pairs in fixed slots; losses, weights and logged rewards equal eager ones."""
    from transformers import AutoModelForSequenceClassification

    from steadytune.hardware.attention_kernels import segment_sdpa_kernel
    from steadytune.model.attention import register_varlen_attention

    folder = save_tiny_model(tmp_path / "m", "llama")
    impl = register_varlen_attention(segment_sdpa_kernel)
    tokenizer = build_tokenizer()
    batches = static_pair_batches(tokenizer, fixed_examples(tokenizer, 5), GRAPH_GROUPS)
    cfg = load_config(None, ["stage=rm"])

    def run(graphed: bool):
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1,
                                                                   attn_implementation=impl).double()
        return train_pairs(RewardObjective(model, cfg), batches, 1e-3, graphed)

    eager, eager_logged, _, _ = run(False)
    graphed, graphed_logged, _, runner = run(True)
    assert runner.step is not None and runner.eager_batches == 0
    assert graphed == pytest.approx(eager, rel=1e-6)
    for want, got in zip(eager_logged, graphed_logged):
        assert set(got) == set(want) and all(got[k] == pytest.approx(want[k], rel=1e-6) for k in want)
    assert graphed[-1] != graphed[0]


@two_processes
def test_dpo_on_two_processes_matches_one(tiny, tmp_path):
    """stage dpo on two processes (LoRA: gradients summed by one flat all-reduce after the backward; pairs as the
    loss unit across ranks) gives the one-process curve and metrics for the same global batch."""
    from test_distributed import losses, run_cli

    data = pairs_dataset(tmp_path)
    common = dict(max_tokens_per_batch=200, max_steps=4, packing="true", save_steps=1000)
    single = train(overrides(tiny, data, tmp_path / "one", gradient_accumulation_steps=2, **common))
    done = run_cli(overrides(tiny, data, tmp_path / "two", gradient_accumulation_steps=1, **common) + ["--nproc", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "one all-reduce per step" in done.stdout
    assert losses(tmp_path / "two") == pytest.approx(single.losses, rel=1e-5)
    metrics = {run: [r for r in read_metrics(tmp_path / run / "metrics.jsonl") if "loss" in r] for run in ("one", "two")}
    for a, b in zip(metrics["one"], metrics["two"]):
        assert b["rewards/accuracies"] == pytest.approx(a["rewards/accuracies"])
        assert b["rewards/margins"] == pytest.approx(a["rewards/margins"], rel=1e-4, abs=1e-6)
