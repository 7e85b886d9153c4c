"""Label-map sanity checks, run before any full evaluation (seed 003: a swapped map reported 0.62 for 0.73).

The label set of the data against label_names, label_names against those the adapter was trained with,
label words the model can tell apart, and a scored slice of the training data that must beat the majority
baseline, with the likely cause named when it does not.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from steadytune.config import ConfigError, load_yaml_file
from steadytune.data.formats import FormatSpec
from steadytune.data.registry import resolve_datasets
from steadytune.errors import UserError
from steadytune.eval.scoring import evaluate_classification, label_set_error


def warn(message: str) -> None:
    """A banner on stderr, so a label-map warning stands out from the progress output."""
    bar = "!" * 100
    print(f"\n{bar}\nWARNING: {message}\n{bar}\n", file=sys.stderr, flush=True)


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
        raise label_set_error(found, label_names, where)


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
                        n: int = 64, media=None) -> dict:
    """Score a class-balanced slice of the training set. After training it must beat the majority baseline;
    the result's "warning" says why not when it does not."""
    by_class: dict[int, list[dict]] = {}
    for example in train_examples:
        if example.get("label_id") is not None:   # (a conversation set's other rows carry none: data/answers.py)
            by_class.setdefault(int(example["label_id"]), []).append(example)
    per_class = max(1, n // max(1, len(by_class)))
    sample = [e for k in sorted(by_class) for e in by_class[k][:per_class]]
    report = evaluate_classification(model, tokenizer, sample, label_names, batch_size=batch_size,
                                     label_targets=label_targets, media=media)
    # The slice is balanced, so the baseline is that of the slice, not of the skewed training set.
    return {"n": report["n"], "accuracy": report["accuracy"], "majority_baseline": report["majority_baseline"],
            "confusion": report["confusion"], "warning": diagnose_known_samples(report)}


def check_raw_labels(cfg) -> None:
    """Compare the raw labels of the test data with label_names before anything is tokenised, so a mismatch
    is reported with both sets in full (not one row at a time)."""

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


def _training_label_names(folder: Path) -> list[str] | None:
    path = folder / "run_config.yaml"
    if not path.is_file():
        return None
    try:
        saved = load_yaml_file(path, unique_keys=False) or {}
    except ConfigError:
        return None
    if not isinstance(saved, dict):
        return None
    names = saved.get("label_names") or (saved.get("decisions", {}).get("label_names") or {}).get("value")
    return [str(x) for x in names] if names else None


def check_against_training(folder: Path, label_names: list[str]) -> None:
    """The label words must be those the adapter was trained on; the same words in another order mean
    integer labels now point at other words (seed 003's swapped map)."""
    trained = _training_label_names(folder)
    if trained is None or trained == label_names:
        return
    if sorted(trained) == sorted(label_names):
        warn(f"label_names order {label_names} differs from training ({trained}, {folder / 'run_config.yaml'}). "
             "Scoring uses the label words, so word labels are unaffected, but integer labels in the data now "
             "map to other words: a swapped label map.")
        return
    raise UserError(f"label_names {label_names} differ from those the adapter in {folder} was trained with "
                    f"({trained}, from run_config.yaml); evaluate with the training label_names")
