"""A model folder's config.json read as transformers reads it, with the values it lets through checked before anything
is built from them.

transformers (5.x) validates a config's fields as it constructs it, raising huggingface_hub's StrictDataclassError
(a layer_types list whose length is not num_hidden_layers, an unknown layer type, rope_parameters that are not a
mapping); that error surfaced as a two-part traceback out of the tokenizer's load. Other values it only warns about
and the run goes on wrongly: a RoPE factor of 0 made every loss nan (the guard stopped the run after 21 skipped
steps), a negative one trained silently, and a factor that is text or an unknown rope_type ended in a TypeError or
KeyError inside the model's constructor. Each is one line here, naming config.json and the field, before the
tokenizer, the data or any weight is read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from steadytune.errors import UserError

# RoPE types whose factor stretches the positions (transformers' own validators want a number >= 1 for each).
FACTOR_TYPES = ("linear", "dynamic", "yarn", "longrope", "llama3")


def read_config(path: str, common: dict[str, Any]):
    """transformers' config of the model at `path` (a folder or a hub id), or None where it cannot be read here (the
    load that follows says why); a field transformers refuses, or a RoPE value it would build a wrong model from, is
    one UserError naming the file and the field."""
    where = f"model_name_or_path: {path}/config.json" if Path(path).is_dir() else f"model_name_or_path: {path}: config"
    try:
        config = AutoConfig.from_pretrained(path, **common)
    except StrictDataclassError as e:
        raise UserError(f"{where}: {_first_line(e.__cause__ or e)}") from None
    except (ValueError, KeyError, TypeError) as e:
        if Path(path).is_dir():   # transformers' own checks (rope keys missing for the rope_type, ...): the file's
            raise UserError(f"{where}: {_first_line(e)}") from None
        return None
    except OSError:
        return None
    problem = config_problem(config)
    if problem:
        raise UserError(f"{where}: {problem}")
    return config


def config_problem(config) -> str | None:
    """What in a transformers config would build a wrong model or fail inside its constructor, or None."""
    configs = [config]
    text = config.get_text_config() if hasattr(config, "get_text_config") else None
    if text is not None and text is not config:
        configs.append(text)
    for c in configs:
        window = getattr(c, "max_position_embeddings", None)
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
            return f"max_position_embeddings is {window!r}; it is the model's window, a whole number of positions > 0"
        types = getattr(c, "layer_types", None) or []
        if types and all(kind == "linear_attention" for kind in types):
            return ("layer_types are all linear_attention; transformers' cache for these hybrid models needs at least "
                    "one full_attention layer (its forward with a cache fails without one)")
        for name, params in _rope_parameter_sets(getattr(c, "rope_parameters", None)):
            problem = _rope_problem(params)
            if problem:
                return f"{name}: {problem}"
    return None


def _rope_parameter_sets(rope) -> list[tuple[str, dict]]:
    """(the field's name as written, its parameters): one set, or one per layer type (Gemma 3 and 4 keep one for
    full and one for sliding attention)."""
    if not isinstance(rope, dict):
        return []
    if rope and all(isinstance(v, dict) for v in rope.values()):
        return [(f"rope_parameters.{kind}", params) for kind, params in rope.items()]
    return [("rope_parameters", rope)]


def _rope_problem(params: dict) -> str | None:
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
        return (f"rope_type {kind!r} is not one transformers computes ({', '.join(['default', *ROPE_INIT_FUNCTIONS])}"
                ")")
    theta = params.get("rope_theta")
    if theta is not None and not (_number(theta) and theta > 0):
        return f"rope_theta is {theta!r}; RoPE's base is a number > 0"
    factor = params.get("factor")
    # (absent: transformers' own check names a missing required key; longrope may leave it out and derive it)
    if kind in FACTOR_TYPES and factor is not None and not (_number(factor) and factor >= 1):
        return (f"factor is {factor!r} for rope_type {kind}; it stretches the positions and must be a number >= 1 "
                "(1: none)")
    return None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _first_line(error: BaseException) -> str:
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line if len(line) <= 400 else line[:400] + " ..."


def model_window(config: Any) -> int | None:
    """The positions a model reads: max_position_embeddings, times a RoPE scaling factor where its config sets one
    (rope_scaling, or transformers 5's rope_parameters, also one set per layer type)."""
    window = getattr(config, "max_position_embeddings", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    sets = [params for key in ("rope_scaling", "rope_parameters")
            for _, params in _rope_parameter_sets(getattr(config, key, None))]
    factor = max([f.get("factor") for f in sets if _number(f.get("factor"))] or [1.0])
    return int(window * max(factor, 1.0))

