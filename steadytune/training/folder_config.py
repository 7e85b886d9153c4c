"""A config file that lies in a run folder is that run's record, never the user's own config.

A run folder may come from anyone: a colleague, a shared drive, an archive unpacked by hand, a folder copied into the
studio's runs folder. Its files (`run_config.yaml`, the studio's `studio/config.yaml`) are read for what the run was:
base model, data, template, labels, hyperparameters. What lets a file act on this machine is taken only from the user,
in the command they run now (`key=value` on the command line):

- code: `trust_remote_code` (a model's own Python), `allow_pickle_weights`, `vllm_config` (engine arguments, which can
  carry their own trust_remote_code), the entries of `reward_funcs` that name a module or file (`module:function`),
  and grpo's `tools` (every entry is a module or file);
- credentials: `export_hub_model_id` (an upload with this machine's token), `report_to` naming a tracker other than
  TensorBoard (wandb, mlflow, ... log in with this machine's keys and write outside the run folder);
- write targets: `output_dir` (the run folder itself, wherever the file says the run was), `export_dir`,
  `logging_dir`, `tokenized_path`, `cache_dir`.

A folder's file asking for one of these is said in a note naming the file and the key, and not obeyed: the key keeps
its default (output_dir: the run folder). Reward functions and tools are refused outright where they would run
(training, evaluation): a run without them would be another run. `grants_asked` lists what a folder's config asks for, which is
what the studio shows beside a checkbox before it passes the same values on the command line.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from steadytune.config import (
    KEY_TO_SECTION,
    ConfigError,
    RunConfig,
    load_config,
    parse_overrides,
    parse_yaml,
    read_yaml,
    show_value,
)
from steadytune.errors import UserError
from steadytune.training.run_folder import MANIFEST, STUDIO_FOLDER

RUN_CONFIG = "run_config.yaml"
# Keys that let a file run code on this machine or act with the user's credentials (module docstring).
USER_ONLY_KEYS = ("trust_remote_code", "allow_pickle_weights", "vllm_config", "export_hub_model_id")
# Where a run writes besides its folder; a folder's own config never chooses them.
WRITE_TARGET_KEYS = ("export_dir", "logging_dir", "tokenized_path", "cache_dir")
# Keys only training reads: a command that reads a run (chat, predict, serve, export) resets them without a note, or
# every chat of a run trained with tokenized_path or a tracker said "not granted" about a key it never uses.
TRAINING_ONLY_KEYS = ("tokenized_path", "logging_dir", "report_to")
# Trackers that write only under output_dir (logging_dir): harmless from a folder's file.
LOCAL_TRACKERS = ("none", "tensorboard")


@dataclass
class Grant:
    """One thing a run folder's config asks for that only the user may grant."""
    key: str
    value: Any          # as the file has it
    why: str            # what granting it does, in a few words

    def override(self) -> str:
        """The same value as a `key=value` for the command line."""
        return f"{self.key}={override_text(self.value)}"


# ---------------------------------------------------------------------------------------------------------
# Which files are a run folder's
# ---------------------------------------------------------------------------------------------------------

def run_folder_of(path: str | os.PathLike) -> Optional[Path]:
    """The run folder a config file belongs to, or None for a file of the user's own: a file named run_config.yaml
    (what `train` writes), a file in a run folder's studio/ folder, or any file in a folder (or below one) that a
    run wrote (its manifest or run_config.yaml is there). The path as given and the file it links to both count."""
    given = Path(os.path.abspath(Path(path).expanduser()))
    for candidate in dict.fromkeys([given, given.resolve()]):
        if candidate.name == RUN_CONFIG:
            return candidate.parent
        if candidate.parent.name == STUDIO_FOLDER:
            return candidate.parent.parent
        for folder in candidate.parents:
            if (folder / MANIFEST).is_file() or (folder / RUN_CONFIG).is_file():
                return folder
    return None


# ---------------------------------------------------------------------------------------------------------
# What a folder's config asks for
# ---------------------------------------------------------------------------------------------------------

def is_user_function(name: Any) -> bool:
    """Whether a reward_funcs entry names code (`module:function`, `file.py:function`) rather than a built-in."""
    return ":" in str(name)


def reward_names(value: Any) -> list:
    """reward_funcs as a list (a comma list split), or [] when it is not a list of names."""
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    return list(value) if isinstance(value, list) else []


def without_user_functions(names: Any, weights: Any) -> tuple[Any, Any, list[str]]:
    """(reward_funcs, reward_weights, the dropped entries) with every entry that names code (module:function) left
    out, its weight with it: what a run folder's or an archive's config may keep (it may come from anyone)."""
    if isinstance(names, str):
        names = reward_names(names)
    if not isinstance(names, list):
        return names, weights, []
    dropped = [str(x) for x in names if is_user_function(x)]
    if not dropped:
        return names, weights, []
    kept = [i for i, x in enumerate(names) if not is_user_function(x)]
    if isinstance(weights, list) and len(weights) == len(names):
        weights = [weights[i] for i in kept] or None
    return [names[i] for i in kept] or None, weights, dropped


def remote_trackers(value: Any) -> list[str]:
    """The trackers of a report_to value that log in or write outside the run folder (all but TensorBoard)."""
    items = value if isinstance(value, (list, tuple)) else str(value or "none").split(",")
    return [str(x).strip() for x in items if str(x).strip() and str(x).strip().lower() not in LOCAL_TRACKERS]


def grants_asked(raw: dict) -> list[Grant]:
    """What a folder's config (its raw keys) asks for that only the user grants: code, credentials, outside writes.
    output_dir is not among them: a run folder's own run is always the folder itself."""
    asked = []
    defaults = RunConfig()
    for key in USER_ONLY_KEYS:
        value = raw.get(key)
        if value is not None and value != getattr(getattr(defaults, KEY_TO_SECTION[key]), key) and value is not False:
            asked.append(Grant(key, value, WHY[key]))
    code = [x for x in reward_names(raw.get("reward_funcs")) if is_user_function(x)]
    if code:
        asked.append(Grant("reward_funcs", raw.get("reward_funcs"), "imports and runs " + ", ".join(
            str(x) for x in code)))
    tools = reward_names(raw.get("tools"))
    if tools:
        asked.append(Grant("tools", raw.get("tools"), "imports and runs " + ", ".join(str(x) for x in tools)))
    if remote_trackers(raw.get("report_to")):
        asked.append(Grant("report_to", raw.get("report_to"), "logs in to " + ", ".join(
            remote_trackers(raw.get("report_to"))) + " with this machine's credentials"))
    for key in WRITE_TARGET_KEYS:
        if raw.get(key) not in (None, ""):
            asked.append(Grant(key, raw.get(key), f"writes to {show_value(raw.get(key), 120)}"))
    return asked


WHY = {"trust_remote_code": "runs the Python the model folder ships (config.json auto_map)",
       "allow_pickle_weights": "reads pickle weight files, which can run code when read",
       "vllm_config": "passes engine arguments to vLLM (they may carry their own trust_remote_code)",
       "export_hub_model_id": "uploads to the Hugging Face Hub with this machine's token"}


def override_text(value: Any) -> str:
    """A value as a `key=value` override that parse_overrides reads back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        try:
            if parse_yaml(value, "override") == value:
                return value
        except ConfigError:
            pass
    return json.dumps(value, ensure_ascii=False)   # JSON is YAML flow style, which parse_overrides reads back


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------

def load_config_named(path: str | os.PathLike | None, overrides: list[str] | dict | None = None,
                      runs_rewards: bool = True) -> RunConfig:
    """The config a command's CONFIG argument names, with its `key=value` overrides: the user's own file as it is;
    a run folder's file (run_folder_of) through load_folder_config."""
    if path is not None and run_folder_of(path) is not None:
        return load_folder_config(Path(path), overrides, runs_rewards=runs_rewards)
    return load_config(path, overrides)


def load_folder_config(path: Path, overrides: list[str] | dict | None, origin: str | None = None,
                       runs_rewards: bool = True) -> RunConfig:
    """A run folder's config file with the user's `overrides`, granting nothing the file asks for that the overrides
    do not give (module docstring): each such key is said in a note and keeps its default; output_dir is the run
    folder. `runs_rewards`: the command trains or evaluates the run (train, eval, tune), so a file that names reward
    functions of its own is refused rather than run without them, and an output_dir it names elsewhere is said (for
    chat, predict, export and serve output_dir only locates the folder, which a copied folder has moved away from, and
    the keys only training reads, TRAINING_ONLY_KEYS, are reset without a note)."""
    path = Path(path)
    folder = run_folder_of(path) or path.parent
    origin = origin or str(folder)
    overrides = overrides if isinstance(overrides, dict) else list(overrides or [])
    raw = read_yaml(path)
    given = set(overrides) if isinstance(overrides, dict) else set(parse_overrides(overrides))
    cfg = load_config(path, overrides)
    for grant in grants_asked(raw):
        if grant.key in given:
            continue
        if grant.key == "reward_funcs":
            _drop_user_rewards(cfg, path, origin, runs_rewards)
            continue
        if grant.key == "tools":
            _drop_tools(cfg, path, origin, runs_rewards)
            continue
        if grant.key == "report_to":
            cfg.train.report_to = "none"
        else:
            section = getattr(cfg, KEY_TO_SECTION[grant.key])
            setattr(section, grant.key, getattr(type(section)(), grant.key))
        cfg.user_keys.discard(grant.key)
        if not runs_rewards and grant.key in TRAINING_ONLY_KEYS:
            continue
        note(f"{origin}: {path.name} asks for {grant.key}: {shown(grant.value)} ({grant.why}); not granted: "
             f"a run folder's files never grant it (add {grant.key}=... to the command if you trust where "
             f"{origin} came from)")
    if "output_dir" not in given:
        asked = raw.get("output_dir")
        if runs_rewards and asked not in (None, "") and Path(str(asked)).expanduser().resolve() != folder.resolve():
            note(f"{origin}: {path.name} names output_dir {show_value(asked, 120)}; the run's folder is {folder} "
                 "(a run folder's files never choose where to write; output_dir=... on the command line does)")
        cfg.train.output_dir = str(folder)
        cfg.user_keys.add("output_dir")
    return cfg


def _drop_user_rewards(cfg: RunConfig, path: Path, origin: str, runs_rewards: bool) -> None:
    m = cfg.method
    funcs, weights, dropped = without_user_functions(m.reward_funcs, m.reward_weights)
    if not dropped:
        return
    listed = ", ".join(dropped)[:200]
    if runs_rewards and m.stage == "grpo":
        raise UserError(f"{path}: names reward functions of its own ({listed}); a run folder's files never name code "
                        f"to run: give them on the command line (reward_funcs=[...], the file's module paths) if you "
                        f"trust where {origin} came from")
    m.reward_funcs, m.reward_weights = funcs, weights
    note(f"{origin}: {path.name} names reward functions of its own ({listed}); not imported: a run folder's files "
         f"never name code to run (add reward_funcs=... to the command if you trust where {origin} came from)")


def _drop_tools(cfg: RunConfig, path: Path, origin: str, runs_rewards: bool) -> None:
    m = cfg.method
    listed = ", ".join(str(x) for x in reward_names(m.tools))[:200]
    if runs_rewards and m.stage == "grpo":
        raise UserError(f"{path}: names tools of its own ({listed}); a run folder's files never name code to run: "
                        f"give them on the command line (tools=[...], the file's module paths) if you trust where "
                        f"{origin} came from")
    m.tools = None
    note(f"{origin}: {path.name} names tools of its own ({listed}); not imported: a run folder's files never name "
         f"code to run (add tools=... to the command if you trust where {origin} came from)")


def shown(value: Any) -> str:
    """A value as the YAML file has it, cut for a message."""
    return override_text(value)[:120] if isinstance(value, (bool, str)) else show_value(value, 120)


def note(text: str) -> None:
    """A note on stderr, from the first process of a launch only."""
    if os.environ.get("RANK", "0") == "0":
        print(f"note: {text}", file=sys.stderr, flush=True)
