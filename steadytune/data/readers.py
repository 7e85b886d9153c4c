"""Read dataset files (json array, jsonl, csv, parquet) into rows, each tagged with where it came from.

Every failure is a DataError naming the file and the line / row / byte, because a user with 50k rows needs to
know exactly which one is broken.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from steadytune.errors import DataError

SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".txt")
# One row may hold 4 MiB of text: about a million tokens, eight times the longest context steadytune trains. A larger
# row is refused before tokenisation, which would take ~300 bytes of memory per character (a 50 MB row: 14.8 GB).
MAX_ROW_BYTES = 4 << 20
# Lists and objects inside one another within a row: a conversation needs 4; json.loads itself stops near 1,000
# with a RecursionError, and code walking a row that deep would too.
MAX_ROW_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


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
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply (lists or objects more than {MAX_ROW_DEPTH} deep)") from None


def raise_if_too_big(where: str, size: int, text: str | None = None) -> None:
    """DataError when a row's `text` (or its `size` in bytes) is over MAX_ROW_BYTES."""
    size_bytes = len(text.encode("utf-8", "surrogatepass")) if text is not None else size
    if size_bytes > MAX_ROW_BYTES:
        raise DataError(f"{where}: a row of {size_bytes / 1e6:.1f} MB is larger than the {MAX_ROW_BYTES >> 20} MiB a "
                        "row may hold (about a million tokens, past any cutoff_len); split the text into several rows")


def check_row(where: str, item: Any) -> None:
    """A parsed row within MAX_ROW_BYTES of text and MAX_ROW_DEPTH levels, walked without recursion."""
    chars, texts, stack = 0, [], [(item, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            chars += len(value)
            texts.append(value)
            if not value.isascii() and (half := _SURROGATE.search(value)):
                raise DataError(f"{where}: text holds \\u{ord(half.group()):04x}, half of a UTF-16 surrogate pair "
                                "(a JSON escape without its other half): not a character; fix or drop that escape")
        elif isinstance(value, (dict, list, tuple)):
            if depth >= MAX_ROW_DEPTH:
                raise DataError(f"{where}: nested too deeply (lists or objects more than {MAX_ROW_DEPTH} deep)")
            items = [x for pair in value.items() for x in pair] if isinstance(value, dict) else value
            stack.extend((x, depth + 1) for x in items)
    if chars > MAX_ROW_BYTES // 4:  # a character is 1 to 4 bytes of UTF-8: count the bytes only when it may matter
        raise_if_too_big(where, sum(len(t.encode("utf-8", "surrogatepass")) for t in texts))


def _read_json(path: Path) -> list[Row]:
    text = read_text(path)
    if not text.lstrip().startswith("["):
        return _parse_jsonl(path, text)  # a .json file holding one object per line, as `datasets` also accepts
    data = parse_json(path, text)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array of objects, got {type(data).__name__}")
    return [_json_row(f"{path} row {i}", item) for i, item in enumerate(data)]


def _read_jsonl(path: Path) -> list[Row]:
    return _parse_jsonl(path, read_text(path))


def _parse_jsonl(path: Path, text: str) -> list[Row]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_ROW_BYTES // 4:
            raise_if_too_big(f"{path} line {number}", len(line), line)
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path} line {number}: malformed JSON (column {e.colno}: {e.msg})") from None
        except RecursionError:
            raise DataError(f"{path} line {number}: nested too deeply (lists or objects more than "
                            f"{MAX_ROW_DEPTH} deep)") from None
        rows.append(_json_row(f"{path} line {number}", item))
    return rows


def _json_row(where: str, item) -> Row:
    """One row of a .json array or a .jsonl line: an object within the row limits, else DataError at `where`."""
    if not isinstance(item, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(item).__name__}")
    check_row(where, item)
    return Row(where, item)


def _read_csv(path: Path) -> list[Row]:
    text = read_text(path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    # csv's own limit on one field (128 KiB, for the whole process) is lifted while reading: rows are limited below.
    field_limit = csv.field_size_limit(max(len(text) + 1, csv.field_size_limit()))
    try:
        for item in reader:
            # DictReader puts surplus fields under the key None: a row with more cells than the header.
            if None in item:
                raise DataError(f"{path} line {reader.line_num}: more fields than the header has")
            check_row(f"{path} line {reader.line_num}", item)
            rows.append(Row(f"{path} line {reader.line_num}", dict(item)))
    except csv.Error as e:
        raise DataError(f"{path} line {reader.line_num}: malformed CSV ({e})") from None
    finally:
        csv.field_size_limit(field_limit)
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
    for i, record in enumerate(records):
        check_row(f"{path} row {i}", record)
    return [Row(f"{path} row {i}", r) for i, r in enumerate(records)]


def _read_txt(path: Path) -> list[Row]:
    """One row {"text": line} per line, empty lines included (as `datasets`' text loader, which LLaMA-Factory uses
    for .txt files such as wiki_demo.txt)."""
    rows = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if len(line) > MAX_ROW_BYTES // 4:
            raise_if_too_big(f"{path} line {number}", len(line), line)
        rows.append(Row(f"{path} line {number}", {"text": line}))
    return rows


_READERS: dict[str, Callable[[Path], list[Row]]] = {
    ".json": _read_json, ".jsonl": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet, ".txt": _read_txt,
}
