"""The project's own small datasets for the core tests, written on demand into a folder.

A fresh clone has no `../shared` (LLaMA-Factory's demo files live there), so everything the core tests need is
generated here: deterministic, original records in LLaMA-Factory's formats (alpaca, sharegpt with tool calls), a
`dataset_info.json` that registers them, and a classification file. Tests that check LLaMA-Factory's *own* files
stay in place behind the `needs_shared` marker (conftest.py).
"""

from __future__ import annotations

import functools
import json
import random
import tempfile
from pathlib import Path

ALPACA = "alpaca_sample"
ALPACA_ZH = "alpaca_zh_sample"
SHAREGPT_TOOLS = "sharegpt_tools_sample"
IMAGES = "images_sample"           # a registry entry with an images column (needs a vision model's processor)

_NUMBERS_EN = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def alpaca_records(n: int = 96, seed: int = 0) -> list[dict]:
    """English instruction/input/output records of varied length (a few tokens to ~150)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        kind = i % 4
        if kind == 0:
            rows.append({"instruction": f"Add {a} and {b}.", "input": "", "output": f"{a} plus {b} is {a + b}."})
        elif kind == 1:
            digits = str(rng.randint(10, 10 ** rng.randint(2, 6)))
            rows.append({"instruction": "Spell out every digit of the number.", "input": digits,
                         "output": " ".join(_NUMBERS_EN[int(d)] for d in digits) + "."})
        elif kind == 2:
            count = rng.randint(2, 12)
            items = ", ".join(str(a + k) for k in range(count))
            rows.append({"instruction": f"List {count} whole numbers starting at {a}.", "input": "",
                         "output": f"Here they are: {items}."})
        else:
            words = " ".join(rng.choice(["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"])
                             for _ in range(rng.randint(3, 30)))
            rows.append({"instruction": "Repeat the text back in capital letters.", "input": words,
                         "output": words.upper()})
    return rows


def alpaca_zh_records(n: int = 32, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        rows.append({"instruction": f"计算 {a} 乘以 {b}。", "input": "", "output": f"{a} 乘以 {b} 等于 {a * b}。",
                     "system": "你是一个会算数的助手。"})
    return rows


def sharegpt_tool_records(n: int = 12, seed: int = 2) -> list[dict]:
    """Conversations with a tool call and its result, then the answer (LLaMA-Factory's sharegpt roles)."""
    rng = random.Random(seed)
    tools = json.dumps([{"name": "add", "description": "Add two integers",
                         "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                         "b": {"type": "integer"}},
                                        "required": ["a", "b"]}}])
    rows = []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        turns = [{"from": "human", "value": f"What is {a} + {b}?"},
                 {"from": "function_call", "value": json.dumps({"name": "add", "arguments": {"a": a, "b": b}})},
                 {"from": "observation", "value": json.dumps({"result": a + b})},
                 {"from": "gpt", "value": f"The sum is {a + b}."}]
        if i % 3 == 0:  # a plain exchange without the tool
            turns = [{"from": "human", "value": "Hello!"}, {"from": "gpt", "value": "Hello! How can I help?"}]
        rows.append({"conversations": turns, "tools": tools})
    return rows


def write_sample_data_dir(folder: Path) -> Path:
    """dataset_info.json + the sample files in `folder`; returns the folder (a `dataset_dir`)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {ALPACA: alpaca_records(), ALPACA_ZH: alpaca_zh_records(), SHAREGPT_TOOLS: sharegpt_tool_records()}
    for name, rows in files.items():
        (folder / f"{name}.json").write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    (folder / f"{IMAGES}.json").write_text(json.dumps([{"messages": [{"role": "user", "content": "<image>What?"},
                                                                 {"role": "assistant", "content": "A cat."}],
                                                    "images": ["a.png"]}]), encoding="utf-8")
    info = {ALPACA: {"file_name": f"{ALPACA}.json"},
            ALPACA_ZH: {"file_name": f"{ALPACA_ZH}.json", "columns": {"prompt": "instruction", "query": "input",
                                                                     "response": "output", "system": "system"}},
            SHAREGPT_TOOLS: {"file_name": f"{SHAREGPT_TOOLS}.json", "formatting": "sharegpt",
                             "columns": {"messages": "conversations", "tools": "tools"}},
            IMAGES: {"file_name": f"{IMAGES}.json", "formatting": "sharegpt",
                     "columns": {"messages": "messages", "images": "images"},
                     "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                              "assistant_tag": "assistant"}}}
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return folder


def classification_rows(n: int = 48) -> list[dict]:
    """A small imbalanced two-class review set (1 positive in 3)."""
    rows = []
    for i in range(n):
        positive = i % 3 == 0
        text = ("这个商品很好，非常满意" if positive else "太差了，很失望") + f" #{i}"
        rows.append({"text": text, "label": "积极" if positive else "消极"})
    return rows


@functools.lru_cache(maxsize=None)
def sample_dir() -> Path:
    """One sample `dataset_dir` per test process (a temporary folder, written on first use)."""
    return write_sample_data_dir(Path(tempfile.mkdtemp(prefix="steadytune-samples-")))
