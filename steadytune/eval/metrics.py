"""Classification metrics that tell the truth: accuracy next to the majority-class baseline, macro-F1,
per-class precision / recall / F1, the confusion matrix, and the relative error reduction against a
zero-shot run (seed 003: 0.594 -> 0.734 is a 34.5% error reduction, and 0.594 was barely above the 0.55
majority class).

Inputs are class indices (0..n_classes-1) into an ordered list of label names. Pure functions on lists;
only `plot_confusion_matrix` touches matplotlib (Agg backend, no display needed).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence


def confusion_matrix(gold: Sequence[int], pred: Sequence[int], n_classes: int) -> list[list[int]]:
    """matrix[g][p] = how many examples of gold class g were predicted as class p."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} items, predictions {len(pred)}")
    matrix = [[0] * n_classes for _ in range(n_classes)]
    for g, p in zip(gold, pred):
        matrix[g][p] += 1
    return matrix


def _safe_div(num: float, den: float) -> float:
    # An empty denominator (a class never predicted / never present) scores 0, as scikit-learn's zero_division=0.
    return num / den if den else 0.0


def per_class_scores(matrix: list[list[int]], label_names: Sequence[str]) -> dict[str, dict]:
    """label -> {precision, recall, f1, support} from a confusion matrix."""
    out = {}
    for k, name in enumerate(label_names):
        true_pos = matrix[k][k]
        predicted = sum(row[k] for row in matrix)
        support = sum(matrix[k])
        precision = _safe_div(true_pos, predicted)
        recall = _safe_div(true_pos, support)
        out[name] = {"precision": precision, "recall": recall,
                     "f1": _safe_div(2 * precision * recall, precision + recall), "support": support}
    return out


def accuracy(matrix: list[list[int]]) -> float:
    total = sum(map(sum, matrix))
    return _safe_div(sum(matrix[k][k] for k in range(len(matrix))), total)


def macro_f1(per_class: dict[str, dict], only_present: bool = True) -> float:
    """Unweighted mean of per-class F1; classes absent from gold *and* predictions are left out when
    `only_present`, since they say nothing about this data."""
    scores = [c["f1"] for c in per_class.values()
              if not only_present or c["support"] > 0 or c["precision"] > 0]
    return sum(scores) / len(scores) if scores else 0.0


def majority_baseline(gold: Sequence[int], label_names: Sequence[str]) -> dict:
    """Accuracy of always answering the most frequent gold class: the number any accuracy must beat."""
    if not gold:
        return {"label": None, "accuracy": 0.0}
    label, count = Counter(gold).most_common(1)[0]
    return {"label": label_names[label], "accuracy": count / len(gold)}


def class_distribution(label_ids: Sequence[int], label_names: Sequence[str]) -> dict[str, dict]:
    counts = Counter(label_ids)
    total = len(label_ids)
    return {name: {"count": counts.get(k, 0), "share": _safe_div(counts.get(k, 0), total)}
            for k, name in enumerate(label_names)}


def format_distribution(title: str, label_ids: Sequence[int], label_names: Sequence[str]) -> str:
    """One line a user reads at the start of train / eval: counts, shares and the majority baseline."""
    dist = class_distribution(label_ids, label_names)
    parts = ", ".join(f"{name} {d['count']} ({d['share']:.1%})" for name, d in dist.items())
    base = majority_baseline(label_ids, label_names)
    return f"{title}: {len(label_ids)} examples: {parts}; majority baseline {base['accuracy']:.3f} (always {base['label']})"


def relative_error_reduction(acc: float, acc_baseline: float) -> float | None:
    """(acc - acc0) / (1 - acc0): the share of the baseline's errors that are gone. None if acc0 is 1."""
    if acc_baseline >= 1.0:
        return None
    return (acc - acc_baseline) / (1.0 - acc_baseline)


def classification_report(gold: Sequence[int], pred: Sequence[int], label_names: Sequence[str]) -> dict:
    """Everything a classification result needs, in one JSON-ready dict."""
    matrix = confusion_matrix(gold, pred, len(label_names))
    per_class = per_class_scores(matrix, label_names)
    return {
        "n": len(gold),
        "accuracy": accuracy(matrix),
        "macro_f1": macro_f1(per_class),
        "majority_baseline": majority_baseline(gold, label_names),
        "per_class": per_class,
        "confusion": {"labels": list(label_names), "matrix": matrix,
                      "note": "rows: gold label, columns: predicted label"},
    }


def plot_confusion_matrix(matrix: list[list[int]], label_names: Sequence[str], path: str | Path,
                          title: str = "Confusion matrix") -> Path:
    """Counts with row-normalised colour (per-class recall), so a small class is as visible as a big one."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    # Chinese label words need a CJK font; use one if the system has it, else matplotlib shows boxes.
    cjk = [f.name for f in font_manager.fontManager.ttflist
           if any(k in f.name for k in ("Noto Sans CJK", "Noto Serif CJK", "WenQuanYi", "SimHei", "Source Han"))]
    n = len(label_names)
    # The class index stays readable where no CJK font is installed and the label words render as boxes.
    ticks = [f"{k}: {name}" for k, name in enumerate(label_names)]
    rows = [[_safe_div(v, sum(row)) for v in row] for row in matrix]
    fig, ax = plt.subplots(figsize=(1.2 * n + 2.5, 1.1 * n + 2))
    with plt.rc_context({"font.sans-serif": cjk[:1] + list(plt.rcParams["font.sans-serif"])} if cjk else {}), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        image = ax.imshow(rows, cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(n), labels=ticks, rotation=45, ha="right")
        ax.set_yticks(range(n), labels=ticks)
        ax.set_xlabel("predicted")
        ax.set_ylabel("gold")
        ax.set_title(title)
        for g in range(n):
            for p in range(n):
                ax.text(p, g, str(matrix[g][p]), ha="center", va="center",
                        color="white" if rows[g][p] > 0.5 else "black")
        fig.colorbar(image, ax=ax, label="share of gold row")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
