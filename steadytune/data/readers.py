"""Read dataset files (json array, jsonl, csv, parquet) into rows, each tagged with where it came from.

Every failure is a DataError naming the file and the line / row / byte, because a user with 50k rows needs to
know exactly which one is broken.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from steadytune.errors import DataError

SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".txt")


@dataclass
class Row:
    where: str       # "file.jsonl line 12" / "file.json row 3": used in every message about this row
    data: dict


def read_rows(path: str | Path) -> list[Row]:
    """All rows of a file, or of every supported file in a folder (sorted by name)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in SUFFIXES)
        if not files:
            raise DataError(f"{path}: folder holds no {'/'.join(SUFFIXES)} files")
        return [row for f in files for row in read_rows(f)]
    if not path.is_file():
        raise DataError(f"{path}: dataset file not found")
    suffix = path.suffix.lower()
    reader = _READERS.get(suffix)
    if reader is None:
        raise DataError(f"{path}: unsupported file type {suffix or '(none)'}; use one of {', '.join(SUFFIXES)}")
    rows = reader(path)
    if not rows:
        raise DataError(f"{path}: no rows in file")
    return rows


def read_text(path: Path) -> str:
    """A whole text file as UTF-8 (a BOM is dropped); DataError naming the file for empty or non-UTF-8 input."""
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(f"{path}: file is empty")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{path}: not UTF-8 text (byte offset {e.start}, line {line}); re-save the file as UTF-8") from None


def parse_json(path: Path, text: str):
    """json.loads with an error that names the file, line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None


def _read_json(path: Path) -> list[Row]:
    text = read_text(path)
    if not text.lstrip().startswith("["):
        return _parse_jsonl(path, text)  # a .json file holding one object per line, as `datasets` also accepts
    data = parse_json(path, text)
    rows = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise DataError(f"{path} row {i}: expected a JSON object, got {type(item).__name__}")
        rows.append(Row(f"{path} row {i}", item))
    return rows


def _read_jsonl(path: Path) -> list[Row]:
    return _parse_jsonl(path, read_text(path))


def _parse_jsonl(path: Path, text: str) -> list[Row]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path} line {number}: malformed JSON (column {e.colno}: {e.msg})") from None
        if not isinstance(item, dict):
            raise DataError(f"{path} line {number}: expected a JSON object, got {type(item).__name__}")
        rows.append(Row(f"{path} line {number}", item))
    return rows


def _read_csv(path: Path) -> list[Row]:
    text = read_text(path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    try:
        for item in reader:
            # DictReader puts surplus fields under the key None: a row with more cells than the header.
            if None in item:
                raise DataError(f"{path} line {reader.line_num}: more fields than the header has")
            rows.append(Row(f"{path} line {reader.line_num}", dict(item)))
    except csv.Error as e:
        raise DataError(f"{path} line {reader.line_num}: malformed CSV ({e})") from None
    return rows


def _read_parquet(path: Path) -> list[Row]:
    records: list[dict[str, Any]]
    try:
        import pyarrow.parquet as pq
    except ImportError:
        try:
            import pandas as pd
        except ImportError:
            raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
        records = pd.read_parquet(path).to_dict(orient="records")
    else:
        try:
            records = pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises its own error types for corrupt files
            raise DataError(f"{path}: cannot read parquet ({e})") from None
    return [Row(f"{path} row {i}", r) for i, r in enumerate(records)]


def _read_txt(path: Path) -> list[Row]:
    """One row {"text": line} per line, empty lines included (as `datasets`' text loader, which LLaMA-Factory uses
    for .txt files such as wiki_demo.txt)."""
    return [Row(f"{path} line {number}", {"text": line})
            for number, line in enumerate(read_text(path).splitlines(), start=1)]


_READERS: dict[str, Callable[[Path], list[Row]]] = {
    ".json": _read_json, ".jsonl": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet, ".txt": _read_txt,
}
