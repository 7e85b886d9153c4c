"""What `steadytune tune` searches: a default space per task, and a YAML file that changes it.

A dimension is one config key with a range or a list of choices; `lora_alpha_ratio` stands for lora_alpha as a
multiple of lora_rank (lora_alpha = ratio x rank), so that the scale a rank gets is searched apart from the rank:

    learning_rate: {low: 2.0e-5, high: 2.0e-3, log: true}    # a range of numbers (log: drawn on a log scale)
    num_train_epochs: {low: 1, high: 3}                       # whole numbers at both ends: a range of integers
    lora_rank: [8, 16, 32]                                    # a list: one of these
    lora_dropout: null                                        # not searched: the config's own value
    lora_target: q_proj,v_proj                                # one value: set in every trial, not searched
    default_space: false                                      # start from nothing instead of the task's default

A file's entries replace the default's entries of the same key; every key is checked against the config (its name,
type and range) before the first trial, with the file and key named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from steadytune.config import KEY_TO_SECTION, NESTED_SECTIONS, SECTION_TYPES, ConfigError, read_yaml, show_value

ALPHA_RATIO = "lora_alpha_ratio"      # lora_alpha = ratio x lora_rank
# Keys tune sets in every trial itself (tune/trials.py: trial_config) or that change no trial's score (where files
# go, how often it logs, trackers): in a search space they would be drawn and printed as the best trial's, to no
# effect, so a space naming one is refused.
NOT_SEARCHABLE = {
    "output_dir": "tune gives each trial its own folder (and the final run FINAL/)",
    "overwrite_output_dir": "tune sets it for every trial",
    "resume_from_checkpoint": "tune sets it for every trial",
    "tune_val_size": "the search's validation split is --val-size",
    "eval_strategy": "tune evaluates each trial --evaluations times", "eval_steps": "tune sets it from --evaluations",
    "metric_for_best_model": "the search's metric is --metric", "save_steps": "trials save no checkpoints",
    "do_eval": "tune sets it", "do_predict": "tune sets it", "plot_loss": "tune sets it",
    "report_to": "trials log to no tracker", "logging_dir": "it changes no score", "logging_steps": "it changes no score",
    "run_name": "it changes no score", "cache_dir": "it changes no score", "tokenized_path": "it changes no score",
    "export_dir": "trials export nothing", "per_device_eval_batch_size": "it changes no score, only the speed",
    "hang_timeout": "it changes no score", "ddp_timeout": "it changes no score",
}
USE_DEFAULT = "default_space"         # a file's switch: false starts from an empty space
IMBALANCE = 1.2                       # largest / smallest class in training: above this, class_balance is searched


@dataclass(frozen=True)
class Dimension:
    """One searched key: a range (low..high, on a log scale or not, integers or not) or a list of choices."""
    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple | None = None

    def sample(self, trial) -> Any:
        """The value an Optuna trial draws for this key (TPE proposes it from the trials so far)."""
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), log=self.log)

    def values_to_check(self) -> list:
        """The values that must each make a valid config: the choices, or both ends of the range."""
        return list(self.choices) if self.choices is not None else [self.low, self.high]

    def describe(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(show_value(c) for c in self.choices)
        return f"{self.low:g} .. {self.high:g}" + (" (log)" if self.log else "") + (" (integers)" if self.integer else "")

    def to_dict(self) -> dict:
        if self.choices is not None:
            return {"choices": list(self.choices)}
        return {"low": self.low, "high": self.high, "log": self.log, "integer": self.integer}


@dataclass
class SearchSpace:
    dimensions: dict[str, Dimension] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)     # one value, set in every trial (and in the final model)
    notes: list[str] = field(default_factory=list)          # what the default left out, and why

    def sample(self, trial) -> dict:
        """One trial's draw: {key: value} for every dimension (lora_alpha_ratio still as a ratio)."""
        return {key: dim.sample(trial) for key, dim in self.dimensions.items()}

    def to_dict(self) -> dict:
        return {"search": {k: d.to_dict() for k, d in self.dimensions.items()}, "fixed": dict(self.fixed),
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: dict) -> "SearchSpace":
        dims = {}
        for key, spec in data.get("search", {}).items():
            if "choices" in spec:
                dims[key] = Dimension(key, choices=tuple(spec["choices"]))
            else:
                dims[key] = Dimension(key, spec["low"], spec["high"], bool(spec.get("log")), bool(spec.get("integer")))
        return cls(dims, dict(data.get("fixed", {})), list(data.get("notes", [])))


@dataclass(frozen=True)
class Task:
    """What the default space depends on: the kind of data, the method and whether the run length is in epochs."""
    classification: bool
    lora: bool
    class_counts: dict | None = None   # training rows per label (classification)
    epochs: bool = True                # num_train_epochs sets the length (max_steps is not set)


def default_space(task: Task) -> SearchSpace:
    """The default search per task: the keys that move a LoRA fine-tune's result most, in ranges that hold the
    recipes measured on this project (the demo's GPU recipe: lr 5e-4, r 16, batch 32, 2 epochs, 5 % warm-up)."""
    space = SearchSpace()
    dims = space.dimensions
    if task.lora:
        dims["learning_rate"] = Dimension("learning_rate", 2e-5, 2e-3, log=True)
    else:   # every weight moves: a far smaller step
        dims["learning_rate"] = Dimension("learning_rate", 1e-6, 1e-4, log=True)
    if task.epochs:
        dims["num_train_epochs"] = Dimension("num_train_epochs", 1, 3, integer=True)
    else:
        space.notes.append("num_train_epochs not searched: max_steps sets the run's length")
    if task.lora:
        dims["lora_rank"] = Dimension("lora_rank", choices=(4, 8, 16, 32, 64))
        dims[ALPHA_RATIO] = Dimension(ALPHA_RATIO, choices=(0.5, 1.0, 2.0, 4.0))
    dims["per_device_train_batch_size"] = Dimension("per_device_train_batch_size", choices=(8, 16, 32))
    dims["warmup_ratio"] = Dimension("warmup_ratio", 0.0, 0.1)
    if task.lora:
        dims["lora_dropout"] = Dimension("lora_dropout", 0.0, 0.2)
    dims["weight_decay"] = Dimension("weight_decay", 0.0, 0.1)
    if task.classification:
        counts = [n for n in (task.class_counts or {}).values() if n > 0]
        if counts and max(counts) / min(counts) >= IMBALANCE:
            dims["class_balance"] = Dimension("class_balance", choices=("none", "sampler", "loss"))
        else:
            space.notes.append("class_balance not searched: the training classes are balanced "
                               f"({', '.join(f'{k} {v}' for k, v in (task.class_counts or {}).items())})")
    return space


def read_space(path: str | Path, base: SearchSpace) -> SearchSpace:
    """`base` changed by the YAML file at `path`; a wrong entry is a ConfigError naming the file and the key."""
    raw = read_yaml(path)
    where = str(path)
    start = raw.pop(USE_DEFAULT, True)
    if not isinstance(start, bool):
        raise ConfigError(f"{where}: {USE_DEFAULT}: expected true or false (got {show_value(start)})")
    space = SearchSpace(dict(base.dimensions) if start else {}, dict(base.fixed) if start else {},
                        list(base.notes) if start else [])
    for key, spec in raw.items():
        key = str(key)
        check_key_name(key, where)
        space.fixed.pop(key, None)
        if spec is None:
            space.dimensions.pop(key, None)
            space.notes.append(f"{key} not searched ({where}: null)")
            continue
        if isinstance(spec, list):
            if not spec:
                raise ConfigError(f"{where}: {key}: an empty list of choices")
            if not all(v is None or isinstance(v, (bool, int, float, str)) for v in spec):
                raise ConfigError(f"{where}: {key}: choices must be numbers, words, true/false or null "
                                  f"(got {show_value(spec)})")
            space.dimensions[key] = Dimension(key, choices=tuple(spec))
        elif isinstance(spec, dict):
            space.dimensions[key] = read_range(key, spec, where)
        else:
            if key == ALPHA_RATIO:
                raise ConfigError(f"{where}: {key}: set lora_alpha itself for one value, or give a list or range")
            space.dimensions.pop(key, None)
            space.fixed[key] = spec
    if not space.dimensions:
        raise ConfigError(f"{where}: nothing left to search (every key is fixed or null)")
    return space


def read_range(key: str, spec: dict, where: str) -> Dimension:
    unknown = set(spec) - {"low", "high", "log"}
    if unknown:
        raise ConfigError(f"{where}: {key}: unknown setting {show_value(sorted(unknown)[0])} (a range takes low, high "
                          "and log; a list gives choices)")
    low, high, log = spec.get("low"), spec.get("high"), spec.get("log", False)
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, str):   # YAML 1.1 reads 1e-5 (no dot) as text
            try:
                value = float(value)
            except ValueError:
                pass
            spec = {**spec, name: value}
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ConfigError(f"{where}: {key}: {name} must be a number (got {show_value(spec.get(name))})")
    low, high = spec["low"], spec["high"]
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: {key}: log must be true or false (got {show_value(log)})")
    if not low < high:
        raise ConfigError(f"{where}: {key}: low {low!r} must be below high {high!r}")
    if log and low <= 0:
        raise ConfigError(f"{where}: {key}: a log range needs low > 0 (got {low!r})")
    integer = isinstance(low, int) and isinstance(high, int)
    return Dimension(key, low, high, log=log, integer=integer)


def check_key_name(key: str, where: str) -> None:
    """A key the config knows (flat, or section.key for guard / fault_injection), or lora_alpha_ratio."""
    if key in NOT_SEARCHABLE:
        raise ConfigError(f"{where}: {key}: not a key to search ({NOT_SEARCHABLE[key]}); set it in the config, or "
                          "leave it out of the space")
    if key == ALPHA_RATIO or key in KEY_TO_SECTION:
        return
    section, _, sub = key.partition(".")
    if section in NESTED_SECTIONS and sub in {f.name for f in SECTION_TYPES[section].__dataclass_fields__.values()}:
        return
    raise ConfigError(f"{where}: {key}: not a config key (see `steadytune train --list-keys`; "
                      f"{ALPHA_RATIO} sets lora_alpha as a multiple of lora_rank)")


def config_keys(params: dict, base_rank: int) -> dict:
    """A trial's draw as config keys: lora_alpha_ratio becomes lora_alpha (ratio x the drawn or the config's rank)."""
    keys = {k: v for k, v in params.items() if k != ALPHA_RATIO}
    if ALPHA_RATIO in params:
        keys["lora_alpha"] = float(params[ALPHA_RATIO]) * int(keys.get("lora_rank", base_rank))
    return keys


def config_trial(space: SearchSpace, values: dict) -> dict:
    """The config's own values as a first trial (Optuna's enqueue_trial), for every dimension whose value lies in its
    range or among its choices (the others are drawn): the search starts from the recipe the user wrote, so its best
    is never one the search failed to try. `values`: the config's keys, flat (guard.window for sections)."""
    trial = {}
    for key, dim in space.dimensions.items():
        if key == ALPHA_RATIO:
            rank, alpha = values.get("lora_rank"), values.get("lora_alpha")
            value = (alpha if alpha is not None else 2.0 * rank) / rank if rank else None
        else:
            value = values.get(key)
        if value is None or isinstance(value, bool) != isinstance((dim.choices or (dim.low,))[0], bool):
            continue
        if dim.choices is not None:
            match = [c for c in dim.choices if c == value and type(c) is not bool]
            if match:
                trial[key] = match[0]
        elif isinstance(value, (int, float)) and dim.low <= value <= dim.high:
            if not dim.integer:
                trial[key] = float(value)
            elif float(value).is_integer():
                trial[key] = int(value)
    return trial


def nest(keys: dict) -> dict:
    """{"guard.window": 20} -> {"guard": {"window": 20}}: how load_config takes a section's keys."""
    out: dict = {}
    for key, value in keys.items():
        section, dot, sub = key.partition(".")
        if dot:
            out.setdefault(section, {})[sub] = value
        else:
            out[key] = value
    return out


def check_space(space: SearchSpace, build: Callable[[dict], Any], where: str) -> None:
    """Every choice, both ends of every range, and the fixed values must each make a valid config (build(keys) loads
    one); the first that does not is a ConfigError naming the key and value. `where`: the space's origin."""
    def attempt(keys: dict, key: str, value: Any) -> None:
        try:
            build(keys)
        except ConfigError as e:
            raise ConfigError(f"search space ({where}): {key}: {show_value(value)} does not make a valid config: "
                              f"{e}") from None

    for key, value in space.fixed.items():
        attempt({key: value}, key, value)
    for key, dim in space.dimensions.items():
        for value in dim.values_to_check():
            if key == ALPHA_RATIO:
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                    raise ConfigError(f"search space ({where}): {key}: {show_value(value)} is not a positive number")
                continue
            attempt({key: value}, key, value)
