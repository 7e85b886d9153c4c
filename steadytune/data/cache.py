"""`tokenized_path`: keep the tokenised dataset on disk and reuse it (LLaMA-Factory's key, same meaning).

The first run tokenises and writes `tokenized_path/prepared.json`; later runs load it instead of reading and
tokenising again. A cache is only reused for the same data settings and the same tokenizer: the file carries a
fingerprint of both, and a mismatch is an error naming the path (never a silent reuse of other data, never an
overwrite of the user's file).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

from steadytune.errors import DataError

CACHE_FILE = "prepared.json"
FORMAT_VERSION = 1
# Data keys that do not change the tokenised examples.
_NOT_IN_FINGERPRINT = {"tokenized_path", "preprocessing_num_workers", "packing", "neat_packing", "class_balance",
                       "max_tokens_per_batch", "packing_attention"}


def fingerprint(cfg, tokenizer: Any, processor: Any = None) -> str:
    """Hash of everything that decides the examples: the data keys, the split seed, the tokenizer (its name, size,
    special tokens and how it encodes a probe text) and a vision model's image processor settings (they decide how
    many tokens an image takes)."""
    data_keys = {k: v for k, v in dataclasses.asdict(cfg.data).items() if k not in _NOT_IN_FINGERPRINT}
    probe = "steadytune 缓存 probe: Hello, 世界!"
    identity = {
        "data": data_keys, "seed": cfg.train.seed, "version": FORMAT_VERSION,
        "tokenizer": [getattr(tokenizer, "name_or_path", ""), len(tokenizer), tokenizer.eos_token_id,
                      tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer(probe)["input_ids"]],
    }
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is not None:
        identity["image_processor"] = image_processor.to_json_string() if hasattr(image_processor, "to_json_string") \
            else repr(image_processor)
    if cfg.method.stage != "sft":  # pairs and feedback rows are tokenised differently from the same files
        identity["stage"] = cfg.method.stage
    return hashlib.sha256(json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def load_prepared(path: str | os.PathLike, expected: str) -> Optional[dict]:
    """The cached fields, or None when there is no cache yet."""
    file = Path(path) / CACHE_FILE
    if not file.is_file():
        return None
    try:
        payload = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise DataError(f"{file}: unreadable tokenised cache ({e}); delete it or choose another tokenized_path") from None
    if payload.get("fingerprint") != expected:
        raise DataError(f"tokenized_path {path}: holds data tokenised with other data settings or another tokenizer; "
                        "choose another tokenized_path, or delete the folder to re-tokenise")
    return payload["data"]


def save_prepared(path: str | os.PathLike, fp: str, data: dict) -> Path:
    """Write atomically (temp file, then rename): a run killed mid-write leaves no half cache."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / CACHE_FILE
    tmp = folder / (CACHE_FILE + ".tmp")
    tmp.write_text(json.dumps({"fingerprint": fp, "data": data}, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, file)
    return file
