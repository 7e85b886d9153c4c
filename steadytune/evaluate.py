"""Classification by label scoring, and the `steadytune eval` subcommand.

A generative classifier answers with a label word. Instead of generating and parsing text, we *score* each
label: the sum of log-probabilities of its full target token sequence (label word + end-of-sequence) after
the prompt. That is exact for labels of several tokens (seed 003's "消极" splits into two) and never
produces an unparseable answer. Generation is kept as an option, to compare with what a user would see.

Speed: one row per (prompt, label) pair, right-padded and sorted by length so a batch carries little
padding; the output head (262k columns for Gemma 3) runs only at the few positions that predict a label
token, never at every position.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Sequence

import torch
import torch.nn.functional as F

from steadytune.errors import UserError
from steadytune.loss import decoder_body, final_logit_softcap, output_head
from steadytune.metrics import classification_report


def _precision_context(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """bf16/fp16 weights (possibly with fp32 LoRA adapters) run under autocast of that dtype; fp32 runs as is."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    for low in (torch.bfloat16, torch.float16):
        if low in dtypes:
            return torch.autocast(device_type=_device_of(model).type, dtype=low)
    return contextlib.nullcontext()


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _check_scoring_inputs(prompts: Sequence[Sequence[int]], label_targets: Sequence[Sequence[int]]) -> None:
    if not label_targets:
        raise ValueError("no label targets to score")
    for j, target in enumerate(label_targets):
        if len(target) == 0:
            raise ValueError(f"label {j} has an empty target token sequence")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty: the first label token needs a position to be predicted from")


def _score_chunk(model: torch.nn.Module, prompts: list[Sequence[int]], label_targets: Sequence[Sequence[int]],
                 pad_token_id: int, device: torch.device) -> torch.Tensor:
    """[len(prompts), n_labels] summed log-probabilities, one forward pass over every (prompt, label) row."""
    rows = [list(p) + list(t) for p in prompts for t in label_targets]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    # Where each target token sits: position t predicts token t+1, so label token k of a row whose prompt
    # has P tokens is predicted at position P-1+k.
    row_index, position, token = [], [], []
    for r, ids in enumerate(rows):
        input_ids[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        prompt_len = len(prompts[r // len(label_targets)])
        target = label_targets[r % len(label_targets)]
        row_index.extend([r] * len(target))
        position.extend(range(prompt_len - 1, prompt_len - 1 + len(target)))
        token.extend(target)
    # Right padding needs no attention mask: under causal attention no real token ever sees a pad after it,
    # and without a mask SDPA takes its fastest (is_causal) path.
    hidden = decoder_body(model)(input_ids=input_ids.to(device)).last_hidden_state
    row_index_t = torch.tensor(row_index, device=device)
    selected = hidden[row_index_t, torch.tensor(position, device=device)]
    logits = output_head(model)(selected).float()
    cap = final_logit_softcap(model)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    token_logprob = F.log_softmax(logits, dim=-1).gather(1, torch.tensor(token, device=device)[:, None])[:, 0]
    per_row = torch.zeros(len(rows), dtype=torch.float32, device=device).index_add_(0, row_index_t, token_logprob)
    return per_row.view(len(prompts), len(label_targets)).cpu()


def score_labels(model: torch.nn.Module, prompts: Sequence[Sequence[int]], label_targets: Sequence[Sequence[int]],
                 batch_size: int = 32, pad_token_id: int = 0, progress: bool = False) -> torch.Tensor:
    """-> [n_prompts, n_labels]: log P(label's full target sequence | prompt), summed over its tokens.

    `batch_size` counts prompts per forward pass (each carries one row per label). Prompts are scored in
    order of length to cut padding; the result is in the caller's order. The model's train/eval mode is
    restored afterwards, so the training loop can call this between steps.
    """
    _check_scoring_inputs(prompts, label_targets)
    scores = torch.empty(len(prompts), len(label_targets), dtype=torch.float32)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    if progress:
        from tqdm.auto import tqdm
        chunks = tqdm(chunks, desc="scoring labels", unit="batch", dynamic_ncols=True)
    device = _device_of(model)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), _precision_context(model):
            for chunk in chunks:
                scores[chunk] = _score_chunk(model, [prompts[i] for i in chunk], label_targets, pad_token_id, device)
    finally:
        model.train(was_training)
    return scores


# ---------------------------------------------------------------------------------------------------------
# Generation (the alternative to scoring, and `do_predict` on SFT data)
# ---------------------------------------------------------------------------------------------------------

def generate_texts(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                   batch_size: int = 32, stop_token_ids: Iterable[int] = (), progress: bool = False) -> list[str]:
    """Greedy continuation of each prompt, decoded without special tokens; batched with left padding."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stops = sorted({*stop_token_ids, *([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])})
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    if progress:
        from tqdm.auto import tqdm
        chunks = tqdm(chunks, desc="generating", unit="batch", dynamic_ncols=True)
    device = _device_of(model)
    texts: list[str] = [""] * len(prompts)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), _precision_context(model):
            for chunk in chunks:
                width = max(len(prompts[i]) for i in chunk)
                input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
                attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for r, i in enumerate(chunk):
                    n = len(prompts[i])
                    input_ids[r, width - n:] = torch.tensor(list(prompts[i]), dtype=torch.long)
                    attention_mask[r, width - n:] = 1
                out = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                     max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_id,
                                     eos_token_id=stops or None)
                for r, i in enumerate(chunk):
                    texts[i] = tokenizer.decode(out[r, width:], skip_special_tokens=True)
    finally:
        model.train(was_training)
    return texts


def match_label(generated: str, label_names: Sequence[str]) -> int | None:
    """Map a generated answer to a label: exact match after stripping, else the label the answer starts
    with (longest first, so "消极的" is 消极), else the label mentioned first. None: no label in the answer,
    which counts as wrong (never silently mapped to a default class, as seed 003's script did)."""
    text = generated.strip().strip("\"'“”‘’「」。.!！,，:：").strip()
    if text in label_names:
        return list(label_names).index(text)
    by_length = sorted(range(len(label_names)), key=lambda k: -len(label_names[k]))
    for k in by_length:
        if text.startswith(label_names[k]):
            return k
    found = [(text.find(label_names[k]), -len(label_names[k]), k) for k in by_length if label_names[k] in text]
    return min(found)[2] if found else None


# ---------------------------------------------------------------------------------------------------------
# Classification evaluation
# ---------------------------------------------------------------------------------------------------------

def prompt_ids_of(example: dict) -> list[int]:
    """The prompt of a tokenised classification example: its tokens before the first trained one, i.e. exactly
    what the model saw in training before the label."""
    labels = example["labels"]
    first = next((t for t, label in enumerate(labels) if label != -100), None)
    if first is None or first == 0:
        raise ValueError("example has no prompt/answer border (labels are all ignored, or all trained "
                         "(train_on_prompt); pass raw texts instead)")
    return list(example["input_ids"][:first])


def _gold_of(example: dict | str, label_names: Sequence[str]) -> int | None:
    if isinstance(example, str):
        return None
    if example.get("label_id") is not None:
        return int(example["label_id"])
    label = example.get("label")
    if label is None:
        return None
    if str(label) not in label_names:
        raise _label_set_error({str(label)}, label_names, where="example")
    return list(label_names).index(str(label))


def build_prompts(tokenizer: Any, examples: Sequence[dict | str], template: Any, prompt_template: str | None,
                  max_prompt_len: int) -> list[list[int]]:
    """Prompt ids for each example: from its tokenised form when present (the training prompt, exactly), else
    rendered from its text with the same encoder the data pipeline uses."""
    prompts = []
    for example in examples:
        if isinstance(example, dict) and "input_ids" in example and "labels" in example:
            prompts.append(prompt_ids_of(example))
            continue
        text = example if isinstance(example, str) else example["text"]
        if prompt_template is None or template is None:
            raise ValueError("raw texts need a template and a prompt_template")
        from steadytune.data.encode import encode_classification_prompt
        prompts.append(encode_classification_prompt(template, tokenizer, prompt_template, text, max_prompt_len))
    return prompts


def evaluate_classification(model: torch.nn.Module, tokenizer: Any, examples_or_texts: Sequence[dict | str],
                            label_names: Sequence[str], template: Any = None, prompt_template: str | None = None,
                            batch_size: int = 32, max_prompt_len: int | None = None, mode: str = "score",
                            label_targets: Sequence[Sequence[int]] | None = None, progress: bool = False,
                            cutoff_len: int | None = None) -> dict:
    """Classify examples (tokenised examples from `prepare_datasets`, dicts with "text", or plain strings).

    mode "score": the label with the highest summed log-probability. mode "generate": greedy generation,
    normalised by `match_label`. Returns the metrics of `metrics.classification_report` (when gold labels are
    known) plus "mode", "predictions" (per example: text, gold, prediction, every label's score or the
    generated answer) and "predicted_ids".

    Tokenised examples are scored on their own prompt ids (exactly the training prompt). Raw texts are
    rendered with `template` + `prompt_template` and cut to `max_prompt_len` tokens (default: `cutoff_len`
    minus the longest label target, the budget the data pipeline uses).
    """
    if mode not in ("score", "generate"):
        raise ValueError(f"mode must be score or generate, got {mode!r}")
    label_names = list(label_names)
    if label_targets is None:
        from steadytune.data.encode import encode_label_targets
        label_targets = encode_label_targets(template, tokenizer, label_names)
    if max_prompt_len is None:
        max_prompt_len = (cutoff_len or 2048) - max(map(len, label_targets))
    prompts = build_prompts(tokenizer, examples_or_texts, template, prompt_template, max_prompt_len)
    gold = [_gold_of(e, label_names) for e in examples_or_texts]
    texts = [e if isinstance(e, str) else e.get("text") for e in examples_or_texts]

    records: list[dict] = []
    if mode == "score":
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        scores = score_labels(model, prompts, label_targets, batch_size, pad_id, progress)
        predicted = scores.argmax(dim=1).tolist()
        for i, k in enumerate(predicted):
            records.append({"text": texts[i], "gold": None if gold[i] is None else label_names[gold[i]],
                            "prediction": label_names[k],
                            "scores": {name: round(float(s), 4) for name, s in zip(label_names, scores[i])}})
    else:
        # Room for the longest label plus a little chatter before the end token.
        max_new = max(map(len, label_targets)) + 4
        answers = generate_texts(model, tokenizer, prompts, max_new, batch_size,
                                 {t[-1] for t in label_targets}, progress)
        matched = [match_label(a, label_names) for a in answers]
        # An answer naming no label is its own (always wrong) column of the confusion matrix.
        predicted = [len(label_names) if k is None else k for k in matched]
        for i, k in enumerate(matched):
            records.append({"text": texts[i], "gold": None if gold[i] is None else label_names[gold[i]],
                            "prediction": None if k is None else label_names[k], "generated": answers[i]})

    result: dict[str, Any] = {"mode": mode, "label_names": label_names}
    if all(g is not None for g in gold) and gold:
        names = label_names + (["(no label)"] if mode == "generate" else [])
        result.update(classification_report(gold, predicted, names))
        if mode == "generate":
            result["unmatched"] = sum(k is None for k in matched)
    result["predicted_ids"] = predicted
    result["predictions"] = records
    return result


# ---------------------------------------------------------------------------------------------------------
# Label-map sanity checks: run before any full evaluation (seed 003: a swapped map reported 0.62 for 0.73)
# ---------------------------------------------------------------------------------------------------------

def _label_set_error(dataset_labels: set[str], label_names: Sequence[str], where: str) -> UserError:
    unknown = sorted(dataset_labels - set(label_names))
    return UserError(f"{where}: labels {unknown} are not in label_names. Dataset labels: {sorted(dataset_labels)}; "
                     f"label_names: {list(label_names)}. Fix label_names (or the dataset) so they agree")


def check_label_set(dataset_labels: Iterable[Any], label_names: Sequence[str], where: str = "eval dataset") -> None:
    """Refuse when a gold label is not among label_names (integer labels are indices into label_names)."""
    found = set()
    for label in dataset_labels:
        if isinstance(label, int) and not isinstance(label, bool):
            if not 0 <= label < len(label_names):
                raise UserError(f"{where}: integer label {label} is outside label_names {list(label_names)} "
                                f"(valid: 0..{len(label_names) - 1})")
            continue
        found.add(str(label).strip())
    if found - set(label_names):
        raise _label_set_error(found, label_names, where)


def check_labels_distinguishable(label_targets: Sequence[Sequence[int]], label_names: Sequence[str],
                                 generate: bool) -> None:
    """Scoring cannot tell apart labels with identical target ids; short generation cannot tell apart labels
    that start with the same token."""
    seen: dict[tuple, str] = {}
    for name, target in zip(label_names, label_targets):
        key = tuple(target)
        if key in seen:
            raise UserError(f"labels {seen[key]!r} and {name!r} tokenise to the same ids {list(key)}; "
                            "the model cannot tell them apart. Use different label words")
        seen[key] = name
    if generate:
        first: dict[int, str] = {}
        for name, target in zip(label_names, label_targets):
            if target[0] in first:
                raise UserError(f"labels {first[target[0]]!r} and {name!r} start with the same token "
                                f"{target[0]}, so generation cannot tell them apart by their first token; "
                                "use --mode score (exact for multi-token labels) or different label words")
            first[target[0]] = name


def best_label_permutation(matrix: list[list[int]]) -> tuple[list[int], int]:
    """(perm, correct): predicted class perm[g] is read as gold class g; the mapping with the most correct
    answers. Exhaustive for up to 7 classes (5,040 mappings), greedy beyond."""
    import itertools

    n = len(matrix)
    if n <= 7:
        best = max(itertools.permutations(range(n)), key=lambda p: sum(matrix[g][p[g]] for g in range(n)))
        return list(best), sum(matrix[g][best[g]] for g in range(n))
    perm, used = [0] * n, set()
    for g in sorted(range(n), key=lambda g: -max(matrix[g])):
        p = max((p for p in range(n) if p not in used), key=lambda p: matrix[g][p])
        perm[g], used = p, used | {p}
    return perm, sum(matrix[g][perm[g]] for g in range(n))


def diagnose_known_samples(report: dict) -> str | None:
    """None when accuracy on known (training) samples beats the majority baseline; else a warning naming
    the likely cause."""
    acc, base = report["accuracy"], report["majority_baseline"]["accuracy"]
    if acc > base:
        return None
    names = report["confusion"]["labels"]
    matrix = report["confusion"]["matrix"]
    n = min(len(matrix), len(names))
    square = [row[:n] for row in matrix[:n]]
    perm, correct = best_label_permutation(square)
    total = max(1, report["n"])
    lines = [f"LABEL-MAP CHECK FAILED: on {report['n']} training examples the model scores accuracy {acc:.3f}, "
             f"not above the majority baseline {base:.3f} (always {report['majority_baseline']['label']})."]
    if perm != list(range(n)) and correct / total > max(acc, base) + 0.1:
        swaps = ", ".join(f"gold {names[g]!r} -> predicted {names[perm[g]]!r}" for g in range(n) if perm[g] != g)
        lines.append(f"Likely cause: a swapped label map. Predictions agree with gold {correct / total:.3f} of the "
                     f"time under the mapping {swaps}: label_names order (or integer labels) differs from training.")
    else:
        lines.append("Likely causes: a swapped label map (label_names order or integer labels differ from training), "
                     "a prompt_template or template different from training, or the wrong adapter "
                     "(adapter_name_or_path) / no adapter at all.")
    return "\n".join(lines)


def check_known_samples(model: torch.nn.Module, tokenizer: Any, train_examples: Sequence[dict],
                        label_names: Sequence[str], label_targets: Sequence[Sequence[int]], batch_size: int = 32,
                        n: int = 64) -> dict:
    """Score a class-balanced slice of the training set. After training it must beat the majority baseline;
    the result's "warning" says why not when it does not."""
    by_class: dict[int, list[dict]] = {}
    for example in train_examples:
        by_class.setdefault(int(example["label_id"]), []).append(example)
    per_class = max(1, n // max(1, len(by_class)))
    sample = [e for k in sorted(by_class) for e in by_class[k][:per_class]]
    report = evaluate_classification(model, tokenizer, sample, label_names, batch_size=batch_size,
                                     label_targets=label_targets)
    # The slice is balanced, so the baseline is that of the slice, not of the skewed training set.
    return {"n": report["n"], "accuracy": report["accuracy"], "majority_baseline": report["majority_baseline"],
            "confusion": report["confusion"], "warning": diagnose_known_samples(report)}
