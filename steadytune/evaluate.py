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


# ---------------------------------------------------------------------------------------------------------
# Generation tasks (SFT): do_predict + predict_with_generate
# ---------------------------------------------------------------------------------------------------------

def predict_generation(model: torch.nn.Module, tokenizer: Any, examples: Sequence[dict], max_new_tokens: int,
                       batch_size: int = 32, output_dir: str | None = None, progress: bool = True) -> dict:
    """Greedy answers to tokenised SFT examples, scored against their trained answers with BLEU-4 and
    ROUGE-1/2/L; writes `generated_predictions.jsonl` (prompt, predict, label) into `output_dir` when given."""
    import json
    from pathlib import Path

    from steadytune.textmetrics import generation_metrics

    prompts = [prompt_ids_of(e) for e in examples]
    references = [tokenizer.decode([t for t in e["labels"] if t != -100], skip_special_tokens=True) for e in examples]
    answers = generate_texts(model, tokenizer, prompts, max_new_tokens, batch_size, progress=progress)
    metrics = {f"predict_{k}": v for k, v in generation_metrics(answers, references).items()}
    if output_dir is not None:
        path = Path(output_dir) / "generated_predictions.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for prompt, answer, reference in zip(prompts, answers, references):
                f.write(json.dumps({"prompt": tokenizer.decode(prompt, skip_special_tokens=False), "predict": answer,
                                    "label": reference}, ensure_ascii=False) + "\n")
    return metrics


# ---------------------------------------------------------------------------------------------------------
# `steadytune eval`
# ---------------------------------------------------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("config", help="the run's YAML (the one it was trained with)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, as for train")
    parser.add_argument("--zero-shot", action="store_true",
                        help="also evaluate the base model without the adapter, and report the relative error reduction")
    parser.add_argument("--mode", choices=("score", "generate", "both"), default="score",
                        help="score: log-probability of each label (exact, default); generate: greedy answer "
                             "matched to a label word; both: report the two side by side")
    parser.add_argument("--batch-size", type=int, default=32, help="prompts per forward pass (default 32)")
    parser.add_argument("--output-dir", default=None, help="where results are written (default: the run's output_dir)")
    parser.add_argument("--known-samples", type=int, default=64,
                        help="training examples scored first as the label-map check (0 skips it)")


def run(args) -> int:
    from steadytune.config import load_config

    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
    cfg = load_config(args.config, args.overrides)
    run_evaluation(cfg, mode=args.mode, zero_shot=args.zero_shot, batch_size=args.batch_size,
                   output_dir=args.output_dir, known_samples=args.known_samples)
    return 0


def _trained_folder(cfg) -> tuple[Any, str]:
    """(folder, "lora" | "full"): what training left in adapter_name_or_path (default: output_dir)."""
    from pathlib import Path

    folder = Path(cfg.model.adapter_name_or_path or cfg.train.output_dir)
    key = "adapter_name_or_path" if cfg.model.adapter_name_or_path else "output_dir"
    if (folder / "adapter_config.json").is_file():
        return folder, "lora"
    if (folder / "config.json").is_file():
        return folder, "full"
    raise UserError(f"{key}: {folder} holds no trained adapter (adapter_config.json) or model (config.json); "
                    "train first, or set adapter_name_or_path to the adapter folder")


def _raw_label_check(cfg) -> None:
    """Compare the raw labels of the test data with label_names before anything is tokenised, so a mismatch
    is reported with both sets in full (not one row at a time)."""
    from steadytune.data.formats import FormatSpec
    from steadytune.data.registry import resolve_datasets

    names = cfg.data.eval_dataset or cfg.data.dataset
    if not names:
        return
    for src in resolve_datasets(names, cfg.data.dataset_dir, "eval_dataset" if cfg.data.eval_dataset else "dataset"):
        label_names = cfg.data.label_names or src.label_names
        if src.formatting not in (None, "classification") or not label_names:
            continue
        rows = src.load()
        column = FormatSpec.build("classification", src.columns).columns.get("label", "label")
        if src.formatting is None and not (rows and column in rows[0].data and "text" in rows[0].data):
            continue
        check_label_set((r.data.get(column) for r in rows if r.data.get(column) is not None), label_names,
                        where=f"{src.name} ({src.origin})")


def _training_label_names(folder) -> list[str] | None:
    import yaml

    path = folder / "run_config.yaml"
    if not path.is_file():
        return None
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return None
    names = saved.get("label_names") or (saved.get("decisions", {}).get("label_names") or {}).get("value")
    return [str(x) for x in names] if names else None


def _check_against_training(folder, label_names: list[str]) -> None:
    """The label words must be those the adapter was trained on; the same words in another order mean
    integer labels now point at other words (seed 003's swapped map)."""
    trained = _training_label_names(folder)
    if trained is None or trained == label_names:
        return
    if sorted(trained) == sorted(label_names):
        _warn(f"label_names order {label_names} differs from training ({trained}, {folder / 'run_config.yaml'}). "
              "Scoring uses the label words, so word labels are unaffected, but integer labels in the data now "
              "map to other words: a swapped label map.")
        return
    raise UserError(f"label_names {label_names} differ from those the adapter in {folder} was trained with "
                    f"({trained}, from run_config.yaml); evaluate with the training label_names")


def _warn(message: str) -> None:
    import sys

    bar = "!" * 100
    print(f"\n{bar}\nWARNING: {message}\n{bar}\n", file=sys.stderr, flush=True)


def _load_for_eval(cfg, folder, kind: str):
    """(model, tokenizer, base_for_zero_shot_or_None) on the device and dtype the hardware policy picks."""
    import dataclasses

    from steadytune import hardware
    from steadytune.model import load_model_and_tokenizer, load_trained_adapter

    info = hardware.detect()
    precision, why = hardware.choose_precision(info, cfg.train.bf16, cfg.train.fp16)
    attn, _ = hardware.choose_attention(info, cfg.model.flash_attn)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    device = hardware.device_for(info)
    print(f"device {device}, {precision} ({why}), attention {attn}")
    if kind == "lora":
        model, tokenizer = load_model_and_tokenizer(cfg.model, dtype, attn, device)
        return load_trained_adapter(model, folder), tokenizer
    model, tokenizer = load_model_and_tokenizer(dataclasses.replace(cfg.model, model_name_or_path=str(folder)),
                                                dtype, attn, device)
    return model, tokenizer


@contextlib.contextmanager
def _zero_shot(cfg, model, kind: str):
    """The same model without what training added: the adapter switched off, or the base model for a full
    fine-tune (loaded only for this)."""
    if kind == "lora":
        with model.disable_adapter():
            yield model
        return
    from steadytune.model import load_model_and_tokenizer

    attn = getattr(model.config, "_attn_implementation", None) or "sdpa"
    base, _ = load_model_and_tokenizer(cfg.model, next(model.parameters()).dtype, attn, _device_of(model))
    yield base


def run_evaluation(cfg, mode: str = "score", zero_shot: bool = False, batch_size: int = 32,
                   output_dir: str | None = None, known_samples: int = 64) -> dict:
    """Everything `steadytune eval` does; returns what it writes to eval_results.json."""
    import json
    import time
    from pathlib import Path

    from steadytune.data import prepare_datasets
    from steadytune.metrics import format_distribution, plot_confusion_matrix, relative_error_reduction

    folder, kind = _trained_folder(cfg)
    out_dir = Path(output_dir or cfg.train.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _raw_label_check(cfg)
    model, tokenizer = _load_for_eval(cfg, folder, kind)
    data = prepare_datasets(cfg, tokenizer)
    if not data.eval:
        raise UserError("no test split: set eval_dataset, or val_size to evaluate on the held-out split of training")

    if not data.label_names:  # a generation (SFT) task
        metrics = predict_generation(model, tokenizer, data.eval, cfg.train.max_new_tokens, batch_size, str(out_dir))
        results = {"task": "generation", "n": len(data.eval), "adapter": str(folder), **metrics}
        (out_dir / "eval_results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
        print(json.dumps(metrics, indent=2))
        return results

    label_names, targets = data.label_names, data.label_targets
    modes = ["score", "generate"] if mode == "both" else [mode]
    _check_against_training(folder, label_names)
    check_labels_distinguishable(targets, label_names, generate="generate" in modes)
    train_gold = [e["label_id"] for e in data.train]
    test_gold = [e["label_id"] for e in data.eval]
    print(format_distribution("train", train_gold, label_names))
    print(format_distribution("test ", test_gold, label_names))

    results: dict[str, Any] = {"task": "classification", "adapter": str(folder), "n": len(data.eval),
                               "label_names": label_names, "label_targets": targets}
    if known_samples > 0:
        check = check_known_samples(model, tokenizer, data.train, label_names, targets, batch_size, known_samples)
        results["known_sample_check"] = check
        print(f"label-map check on {check['n']} training examples: accuracy {check['accuracy']:.3f} "
              f"(majority {check['majority_baseline']['accuracy']:.3f})")
        if check["warning"]:
            _warn(check["warning"])

    def evaluate_all(m) -> dict:
        out = {}
        for each in modes:
            start = time.perf_counter()
            report = evaluate_classification(m, tokenizer, data.eval, label_names, batch_size=batch_size, mode=each,
                                             label_targets=targets, progress=True)
            report["seconds"] = round(time.perf_counter() - start, 3)
            out[each] = report
        return out

    trained = evaluate_all(model)
    zero = None
    if zero_shot:
        with _zero_shot(cfg, model, kind) as base:
            zero = evaluate_all(base)

    lines = [f"{'':24}{'accuracy':>10}{'macro-F1':>10}"]
    for each in modes:
        report = trained[each]
        entry = {k: report[k] for k in ("accuracy", "macro_f1", "majority_baseline", "per_class", "confusion", "seconds")}
        entry["examples_per_second"] = round(len(data.eval) / max(report["seconds"], 1e-9), 1)
        if each == "generate":
            entry["unmatched"] = report["unmatched"]
        lines.append(f"{'fine-tuned (' + each + ')':24}{report['accuracy']:>10.4f}{report['macro_f1']:>10.4f}")
        if zero is not None:
            base = zero[each]
            entry["zero_shot"] = {k: base[k] for k in ("accuracy", "macro_f1", "per_class", "confusion")}
            entry["relative_error_reduction"] = relative_error_reduction(report["accuracy"], base["accuracy"])
            lines.append(f"{'zero-shot (' + each + ')':24}{base['accuracy']:>10.4f}{base['macro_f1']:>10.4f}")
        results[each] = entry
    primary = modes[0]
    baseline = trained[primary]["majority_baseline"]
    results["majority_baseline"] = baseline
    lines.append(f"{'majority baseline':24}{baseline['accuracy']:>10.4f}{'':>10}  (always {baseline['label']})")
    reduction = results[primary].get("relative_error_reduction")
    if reduction is not None:
        lines.append(f"relative error reduction vs zero-shot: {reduction:.1%}  ((acc - acc0) / (1 - acc0))")
    print("\n".join(lines))

    with (out_dir / "predictions.jsonl").open("w", encoding="utf-8") as f:
        for i, record in enumerate(trained[primary]["predictions"]):
            row = dict(record)
            if "generate" in trained and primary != "generate":
                row["generated"] = trained["generate"]["predictions"][i]["generated"]
                row["generated_prediction"] = trained["generate"]["predictions"][i]["prediction"]
            if zero is not None:
                row["zero_shot_prediction"] = zero[primary]["predictions"][i]["prediction"]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    confusion = trained[primary]["confusion"]
    (out_dir / "confusion_matrix.json").write_text(json.dumps(confusion, ensure_ascii=False, indent=2), encoding="utf-8")
    plot_confusion_matrix(confusion["matrix"], confusion["labels"], out_dir / "confusion_matrix.png",
                          title=f"{primary}: accuracy {trained[primary]['accuracy']:.3f}")
    (out_dir / "eval_results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    print(f"wrote eval_results.json, predictions.jsonl, confusion_matrix.json/.png to {out_dir}")
    return results
