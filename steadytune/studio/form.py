"""The New run form: one field per config key, generated from config.py's typed sections (the key, its default and
its help, its choices and bounds), filled from a source (a shipped recipe, a LLaMA-Factory example file, an existing
run's config, an uploaded YAML), validated by the same code as `train` (config.build_config, key by key and then
whole), and written as the YAML the `steadytune train` command it shows will read.

A field's text is the value as the YAML would hold it: text fields as written; numbers, lists and mappings as YAML
(`5e-5`, `[消极, 积极]`); an emptied field is unset (its default applies). Keys the form has no field for (another
tool's, a typo) stay in an "other keys" YAML box, where the config's own check names them.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import shlex
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from steadytune.config import (
    NESTED_SECTIONS,
    SECTION_TYPES,
    ConfigError,
    as_our_keys,
    build_config,
    parse_yaml,
    read_yaml,
    resolve_do_train,
)
from steadytune.errors import UserError
from steadytune.training.folder_config import grants_asked, run_folder_of, without_user_functions
from steadytune.studio.runs import CONFIG
from steadytune.training.run_folder import STUDIO_FOLDER

SECTION_TITLES = {"model": "Model", "method": "Method: stage and LoRA", "data": "Data", "train": "Training",
                  "infer": "Generation and export", "guard": "Numerical guard (guard:)",
                  "fault_injection": "Fault injection, to test the guard (fault_injection:)"}
OPEN_SECTIONS = ("model", "method", "data", "train")
LONG_TEXT = ("prompt_template", "default_system")
MANAGED = ("output_dir",)   # set by the studio: each run in its own folder of RUNS_DIR
EXTRA = "_extra"            # the "other keys" box
TYPE_WORDS = {bool: "true/false", int: "a whole number", float: "a number", str: "text", list: "a list",
              dict: "a mapping", type(None): "empty = unset"}


@dataclass
class Field:
    key: str                 # as in YAML: learning_rate, guard.window
    section: str
    widget: str              # select | text | textarea
    options: list            # select: the values offered ("" = unset)
    default: str             # the default, as the field shows it
    help: str
    types: str               # what the value may be, in words
    value: str = ""          # the field's text now
    in_source: bool = False  # the source sets this key
    readonly: bool = False


@dataclass
class Source:
    """Where a new run's config starts."""
    kind: str                # recipe | path | run | upload | blank
    ref: str
    raw: dict                # the keys, ours (a v1 file translated)
    description: str
    name: str                # the suggested run name
    notes: list = field(default_factory=list)


# ------------------------------------------------------------------------------------------------------
# The fields
# ------------------------------------------------------------------------------------------------------

def _options_of(cls: type, f: dataclasses.Field) -> tuple:
    hint = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(hint) is Union:
        return typing.get_args(hint)
    return (hint,)


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]


def shown(value: Any) -> str:
    """A value as its field shows it (and as YAML reads it back)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return repr(value)
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10 ** 6).strip()


def _field_of(section: str, cls: type, f: dataclasses.Field) -> Field:
    key = f"{section}.{f.name}" if section in NESTED_SECTIONS else f.name
    options = _options_of(cls, f)
    optional = type(None) in options
    choices = f.metadata.get("choices")
    meta_help = f.metadata.get("help", "")
    types = " or ".join(TYPE_WORDS.get(o, getattr(o, "__name__", str(o))) for o in options)
    if choices:
        widget, offered = "select", ([""] if optional else []) + [str(c) for c in choices]
    elif set(options) <= {bool, type(None)}:
        widget, offered = "select", ([""] if optional else []) + ["true", "false"]
    elif set(options) == {bool, str}:        # bf16 / fp16: true, false or auto
        widget, offered = "select", ["auto", "true", "false"]
    elif f.name in LONG_TEXT:
        widget, offered = "textarea", []
    else:
        widget, offered = "text", []
    bounds = []
    if f.metadata.get("min") is not None:
        bounds.append((">" if f.metadata.get("exclusive_min") else ">=") + f" {f.metadata['min']}")
    if f.metadata.get("max") is not None:
        bounds.append(f"<= {f.metadata['max']}")
    if bounds:
        types += f" ({', '.join(bounds)})"
    default = shown(_default(f))
    return Field(key=key, section=section, widget=widget, options=offered, default=default, help=meta_help,
                 types=types, value=default, readonly=f.name in MANAGED)


def all_fields() -> list[Field]:
    return [_field_of(section, cls, f) for section, cls in SECTION_TYPES.items() for f in dataclasses.fields(cls)]


FIELD_KEYS = {f.key: f for f in all_fields()}


def flatten(raw: dict) -> dict[str, Any]:
    """Top-level keys as they are; `guard: {window: 5}` as `guard.window`; a top-level guard_policy as
    `guard.guard_policy` (the config takes both)."""
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key)
        if key in NESTED_SECTIONS and isinstance(value, dict):
            for sub, sub_value in value.items():
                flat[f"{key}.{sub}"] = sub_value
        elif key == "guard_policy":
            flat["guard.guard_policy"] = value
        else:
            flat[key] = value
    return flat


def unflatten(flat: dict[str, Any]) -> dict:
    raw: dict = {}
    for key, value in flat.items():
        section, dot, sub = key.partition(".")
        if dot and section in NESTED_SECTIONS:
            raw.setdefault(section, {})[sub] = value
        else:
            raw[key] = value
    return raw


def form_sections(raw: dict) -> tuple[list[tuple[str, str, bool, list[Field]]], str]:
    """(sections of fields filled from `raw`, the other keys as YAML)."""
    flat = flatten(raw)
    sections: dict[str, list[Field]] = {name: [] for name in SECTION_TYPES}
    for f in all_fields():
        if f.key in flat:
            f.value, f.in_source = shown(flat[f.key]), True
        sections[f.section].append(f)
    extra = {k: v for k, v in flat.items() if k not in FIELD_KEYS}
    extra_text = yaml.safe_dump(unflatten(extra), sort_keys=False, allow_unicode=True) if extra else ""
    return [(name, SECTION_TITLES[name], name in OPEN_SECTIONS, sections[name]) for name in SECTION_TYPES], extra_text


# ------------------------------------------------------------------------------------------------------
# From the form back to a config
# ------------------------------------------------------------------------------------------------------

def parse_text(f: Field, text: str) -> Any:
    """A field's text -> the value for the YAML (ConfigError naming the key when it is not valid YAML)."""
    spec = FIELD_KEYS[f.key]
    cls = SECTION_TYPES[spec.section]
    dc_field = next(x for x in dataclasses.fields(cls) if x.name == f.key.split(".")[-1])
    options = set(_options_of(cls, dc_field))
    if spec.widget == "select":
        if text in ("true", "false") and bool in options:
            return text == "true"
        if int in options and re.fullmatch(r"-?\d+", text):
            return int(text)
        return text
    if options <= {str, type(None)}:
        return text
    value = parse_yaml(text, f.key)
    if isinstance(value, str):   # YAML 1.1 reads 5e-3 as text: the number it is, for a key that takes numbers
        for kind in (int, float):
            if kind in options:
                try:
                    return kind(value)
                except ValueError:
                    pass
    return value


def assemble(source: dict, values: dict[str, str], extra_text: str) -> tuple[dict, dict[str, str]]:
    """The config the form describes: the source's keys, each field's text where it differs from what the source
    (or the default) shows, emptied fields unset, and the other keys' YAML. -> (raw config, errors by key)."""
    base = {k: v for k, v in flatten(source).items() if k in FIELD_KEYS}
    flat = dict(base)
    errors: dict[str, str] = {}
    for key, text in values.items():
        f = FIELD_KEYS.get(key)
        if f is None or f.readonly or not isinstance(text, str):
            continue
        before = shown(base[key]) if key in base else f.default
        if text == before:
            continue
        if not text.strip():
            flat.pop(key, None)
            continue
        try:
            flat[key] = parse_text(f, text)
        except ConfigError as e:
            errors[key] = _short(str(e), key)
    if extra_text and extra_text.strip():
        try:
            extra = parse_yaml(extra_text, "other keys")
        except ConfigError as e:
            errors[EXTRA] = str(e)
            extra = None
        if extra is not None and not isinstance(extra, dict):
            errors[EXTRA] = "other keys: write them as key: value lines"
        elif extra:
            for key, value in flatten(extra).items():
                if key in FIELD_KEYS:
                    errors.setdefault(EXTRA, f"{key} has a field of its own above: set it there")
                else:
                    flat[key] = value
    return unflatten(flat), errors


# A key that no value passes alone, by a rule that reads other keys, is checked with those (stage: grpo needs its
# reward_funcs; ref_model_adapters needs ref_model): alone, the form would refuse what `train` accepts.
CHECKED_WITH = {"stage": ("reward_funcs", "reward_weights"), "ref_model_adapters": ("ref_model",)}


def validate(raw: dict) -> tuple[Optional[Any], dict[str, str], list[str]]:
    """(the RunConfig, or None; errors beside keys; errors of the whole) from the config's own checks: each key
    alone first (so every bad key is named, not only the first), then all of them together."""
    errors: dict[str, str] = {}
    flat = flatten(raw)
    for key, value in flat.items():
        try:
            alone = {key: value, **{k: flat[k] for k in CHECKED_WITH.get(key, ()) if k in flat}}
            build_config(unflatten(alone), where="form")
        except ConfigError as e:
            errors[key if key in FIELD_KEYS else EXTRA] = _short(str(e), key)
    general: list[str] = []
    try:
        cfg = build_config(raw, where="form")
        resolve_do_train(cfg)
    except ConfigError as e:
        message = str(e).removeprefix("form: ")
        key = key_named(message)
        if key is None:
            general.append(message)
        else:
            errors.setdefault(key, _short(message, key))
        return None, errors, general
    if errors:
        return None, errors, general
    return cfg, errors, general


def key_named(message: str) -> Optional[str]:
    """The form field an error message is about: the key it starts with, else the first field key it names."""
    match = re.match(r"([\w.]+):", message)
    if match and match.group(1) in FIELD_KEYS:
        return match.group(1)
    for key in sorted(FIELD_KEYS, key=len, reverse=True):
        if re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", message):
            return key
    return None


def _short(message: str, key: str) -> str:
    """"form: learning_rate: invalid value ..." -> "invalid value ..." (shown beside learning_rate)."""
    message = message.removeprefix("form: ")
    return message.removeprefix(f"{key}: ").removeprefix(f"{key.split('.')[-1]}: ")


# ------------------------------------------------------------------------------------------------------
# Sources
# ------------------------------------------------------------------------------------------------------

def recipes() -> list[str]:
    folder = resources.files("steadytune") / "recipes"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".yaml", ".yml")))


def recipe_file(name: str) -> Path:
    if name not in recipes():
        raise UserError(f"no shipped recipe named {name[:80]!r} (there are: {', '.join(recipes())})")
    return Path(str(resources.files("steadytune") / "recipes" / name))


def from_file(kind: str, ref: str, path: Path, name: str, description: str) -> Source:
    raw, decided = as_our_keys(read_yaml(path), str(path))
    notes = [f"LLaMA-Factory v1 file: {key} = {value!r} ({why})" for key, value, why in decided]
    return Source(kind, ref, raw, description, name, notes)


def from_path(ref: str) -> Source:
    """A YAML file on this machine, such as a LLaMA-Factory example. Its relative paths are read from the studio's
    folder, as `train` reads them from where it runs; a LLaMA-Factory example's dataset_dir: data is pointed at the
    data/ folder beside its examples/ when there is one."""
    path = Path(ref).expanduser()
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise UserError(f"{ref}: give a .yaml file")
    source = from_file("path", ref, path, name_from(path.stem), f"the file {path}")
    if run_folder_of(path) is not None:   # a run folder's file, named by path: the same as a run as the source
        source.raw, notes = without_grants(source.raw, str(path))
        source.notes += notes
    dataset_dir = source.raw.get("dataset_dir", "data")
    if source.raw.get("dataset") and isinstance(dataset_dir, str) and not Path(dataset_dir).is_absolute():
        for parent in path.resolve().parents:
            if parent.name == "examples" and (parent.parent / dataset_dir / "dataset_info.json").is_file():
                source.raw["dataset_dir"] = str(parent.parent / dataset_dir)
                source.notes.append(f"dataset_dir: {dataset_dir} is read beside the file's examples/ folder: "
                                    f"{source.raw['dataset_dir']}")
                break
    return source


def from_run(name: str, folder: Path, taken: set[str]) -> Source:
    """An existing run's config (the one the New run form wrote for it, else its run_config.yaml), for a new run: its
    folder, a resume point and its recorded decisions are not carried over, nor anything that lets a file run code or
    write elsewhere (a run folder may come from anyone, and the studio's own files in it with it): each is left out
    with a note, and the user types it into the form if they trust the run."""
    written = folder / STUDIO_FOLDER / CONFIG
    path = written if written.is_file() else folder / "run_config.yaml"
    if not path.is_file():
        raise UserError(f"run {name!r} has no config to start from (no run_config.yaml)")
    raw, notes = without_grants(read_yaml(path), f"{path.relative_to(folder)} of run {name}")
    raw = {k: v for k, v in raw.items() if k not in ("output_dir", "resume_from_checkpoint", "decisions")}
    n = 2
    while f"{name}-{n}" in taken:
        n += 1
    return Source("run", name, raw, f"the config of run {name}", f"{name}-{n}", notes)


def without_grants(raw: dict, where: str) -> tuple[dict, list[str]]:
    """A run folder's config less what only the user grants (training/folder_config.py), and a note for each."""
    raw = dict(raw)
    notes = []
    for grant in grants_asked(raw):
        if grant.key == "reward_funcs":
            funcs, weights, dropped = without_user_functions(raw.get("reward_funcs"), raw.get("reward_weights"))
            raw["reward_funcs"], raw["reward_weights"] = funcs, weights
            notes.append(f"reward_funcs {', '.join(dropped)[:120]} in {where} left out: a run folder's files never "
                         "name code to run (type them into reward_funcs if you trust the run; the command will show "
                         "them)")
            for key in ("reward_funcs", "reward_weights"):
                if raw[key] is None:
                    raw.pop(key)
            continue
        raw.pop(grant.key, None)
        notes.append(f"{grant.key}: {shown(grant.value)[:120]} in {where} left out ({grant.why}): a run folder's "
                     "files never grant it (set it in the form if you trust the run)")
    return raw, notes


def name_from(stem: str) -> str:
    return re.sub(r"[^\w.-]+", "-", stem).strip("-.") or "run"


# ------------------------------------------------------------------------------------------------------
# What is written and run
# ------------------------------------------------------------------------------------------------------

def config_text(raw: dict, description: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    origin = "".join(ch if ch.isprintable() else "?" for ch in description)[:200]
    return (f"# written by steadytune studio on {stamp}, from {origin}\n"
            + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=120))


def shown_path(path: Path, cwd: Path) -> str:
    """A path as the command shows it: relative to the folder the process runs in, when it is inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path.resolve())


def command_line(argv: list[str]) -> str:
    return "steadytune " + shlex.join(argv)


def train_argv(config_path: str, nproc: str) -> list[str]:
    argv = ["train", config_path]
    nproc = (nproc or "").strip()
    if nproc:
        if nproc != "auto" and not (nproc.isdigit() and int(nproc) >= 1):
            raise UserError("processes: a number of processes (one per GPU), auto, or empty for one")
        if nproc != "1":
            argv += ["--nproc", nproc]
    return argv
