"""Does a saved folder (checkpoint, adapter, full model) belong to the model at hand, and is it whole?

Files are checked before any weight is loaded: safetensors headers and data lengths, json, torch zip archives,
then every saved key and shape against what the model would save.
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn

from steadytune.errors import CheckpointError
from steadytune.model.anatomy import _tied_names, auto_model_class, model_task


def check_checkpoint_matches(checkpoint_dir: str | os.PathLike, model: nn.Module,
                             required_files: Iterable[str] = ()) -> None:
    """Raise CheckpointError if `checkpoint_dir` is truncated or was saved from a different model.

    Checks: the folder and `required_files` exist and are non-empty; every safetensors file's header parses
    and its data is complete; .json files parse; torch .pt/.bin files are intact zip archives; and the
    saved weights (adapter or full model) have exactly the keys and shapes `model` would save."""
    folder = Path(checkpoint_dir)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    for name in required_files:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder}: checkpoint is incomplete: {name} is missing")
    for file in sorted(folder.iterdir()):
        if file.is_file():
            _check_file_readable(file)
    weights = _find_weight_files(folder)
    if not weights:
        raise CheckpointError(f"{folder}: checkpoint is incomplete: no adapter_model.safetensors or model.safetensors")
    saved = _saved_shapes(weights)
    if any(f.name.startswith("adapter_model") for f in weights):
        _compare_shapes(folder, saved, _expected_adapter_shapes(model, folder), what="adapter")
    else:
        _compare_shapes(folder, saved, _expected_full_shapes(model), what="model", allow_missing=_tied_names(model))


def _find_weight_files(folder: Path) -> list[Path]:
    adapter = sorted(folder.glob("adapter_model*.safetensors"))
    return adapter or sorted(folder.glob("model*.safetensors"))


def _check_file_readable(file: Path) -> None:
    """Catch the usual damage of an interrupted save: zero-size, truncated or unparsable files."""
    folder = file.parent
    if file.stat().st_size == 0:
        raise CheckpointError(f"{folder}: {file.name} is empty (zero bytes): the checkpoint was cut off while saving")
    suffix = file.suffix
    if suffix == ".safetensors":
        _check_safetensors_complete(file)
    elif suffix == ".json":
        try:
            json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise CheckpointError(f"{folder}: {file.name} is not valid JSON ({e}): the checkpoint is damaged") from None
    elif suffix in (".pt", ".bin", ".pth"):
        if not zipfile.is_zipfile(file):
            raise CheckpointError(f"{folder}: {file.name} is truncated or corrupt (not a complete torch archive)")


def _check_safetensors_complete(file: Path) -> None:
    """Parse the header and compare the byte length it promises with the file's size."""
    size = file.stat().st_size
    try:
        with file.open("rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            if header_len <= 0 or 8 + header_len > size:
                raise ValueError("header is cut off")
            header = json.loads(f.read(header_len))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise CheckpointError(f"{file.parent}: {file.name} is corrupt ({e}): the checkpoint is damaged") from None
    if 8 + header_len + end != size:
        raise CheckpointError(f"{file.parent}: {file.name} is truncated ({size} bytes, its header promises "
                              f"{8 + header_len + end}): the checkpoint was cut off while saving")


def _saved_shapes(files: list[Path]) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    shapes = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def _expected_adapter_shapes(model: nn.Module, folder: Path) -> dict[str, tuple[int, ...]]:
    """Keys and shapes that an adapter saved by `folder`'s adapter_config would have on this base model.

    Builds that adapter on a meta-device copy of the model's structure: cheap, and it answers for any
    rank / targets / modules_to_save the folder asks for."""
    from peft import PeftConfig, PeftModel, get_peft_model, get_peft_model_state_dict

    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        raise CheckpointError(f"{folder}: adapter weights without adapter_config.json")
    try:
        config = PeftConfig.from_pretrained(str(folder))   # the saved kind's config (LoRA, OFT)
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{folder}: adapter_config.json is not a LoRA or OFT config: {e}") from None
    if hasattr(config, "init_lora_weights"):
        config.init_lora_weights = True   # shapes only: no PiSSA decomposition of the meta skeleton's weights
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    skeleton = _meta_copy(base)
    try:
        with warnings.catch_warnings():  # peft warns that the skeleton's name differs from the saved base's
            warnings.simplefilter("ignore")
            peft_skeleton = get_peft_model(skeleton, config)
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"{folder}: adapter was saved from a different model: {str(e).splitlines()[0]}") from None
    state = get_peft_model_state_dict(peft_skeleton)
    return {k: tuple(v.shape) for k, v in state.items()}


def _meta_copy(model: nn.Module) -> nn.Module:
    """The same architecture (the same class: a reward model keeps its score head) with weights on the meta device
    (no memory, no copy)."""
    with torch.device("meta"):
        return auto_model_class(model_task(model), model.config).from_config(model.config)


def _expected_full_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    from peft import PeftModel

    base = model.get_base_model() if isinstance(model, PeftModel) else model
    return {k: tuple(v.shape) for k, v in base.state_dict().items()}


def _compare_shapes(folder: Path, saved: dict[str, tuple], expected: dict[str, tuple], what: str,
                    allow_missing: set[str] = frozenset()) -> None:
    unexpected = sorted(set(saved) - set(expected))
    missing = sorted(set(expected) - set(saved) - set(allow_missing))
    wrong = sorted(k for k in set(saved) & set(expected) if saved[k] != expected[k])
    if wrong:
        k = wrong[0]
        raise CheckpointError(f"{folder}: {what} was saved from a different model: {k} has shape {list(saved[k])}, "
                              f"this model needs {list(expected[k])} ({len(wrong)} tensors differ)")
    if unexpected:
        raise CheckpointError(f"{folder}: {what} was saved from a different model: {len(unexpected)} tensors this "
                              f"model does not have, e.g. {unexpected[0]}")
    if missing:
        raise CheckpointError(f"{folder}: {what} is incomplete or from a different model: {len(missing)} tensors "
                              f"missing, e.g. {missing[0]}")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
