"""What a run folder's config asks for that only the user grants, and what the user granted in this studio session.

The studio starts `train` and `eval` on a run folder's own config (studio/config.yaml, run_config.yaml). A folder may
come from anyone, so those commands grant nothing its files ask for (training/folder_config.py: code such as
`trust_remote_code` or a `reward_funcs` module, credentials, writes outside the folder); the studio passes what the
user granted as `key=value` on the command line it shows. A grant comes from the user in this session only:
- the New run form they filled in (its values are theirs, whatever source it started from: a run's own keys of this
  kind are left out of the form, with a note, unless typed again);
- a checkbox on the run's page, which shows the exact key and value (for a reward function, the file it imports),
  sent back with the action: it grants that value only, so a file changed since the page was drawn asks again.
Grants live in this process: a studio started later asks again.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

from steadytune.config import read_yaml
from steadytune.errors import UserError
from steadytune.studio.runs import NeedsConfirmation
from steadytune.training.folder_config import Grant, grants_asked, is_user_function, reward_names


class GrantNeeded(NeedsConfirmation):
    """An action that needs the user's grant for what the folder's config asks (409, with the list)."""

    def __init__(self, message: str, asks: list[dict]):
        super().__init__(message, {"asks": asks})


class SessionGrants:
    """What the user granted, per run folder, in this studio process."""

    def __init__(self):
        self._granted: dict[Path, list[Grant]] = {}
        self._lock = threading.Lock()

    def record(self, folder: Path, grants: list[Grant]) -> None:
        with self._lock:
            held = self._granted.setdefault(Path(folder).resolve(), [])
            held += [g for g in grants if not _holds(held, g)]

    def granted(self, folder: Path, grant: Grant) -> bool:
        with self._lock:
            return _holds(self._granted.get(Path(folder).resolve(), []), grant)

    def overrides_for(self, folder: Path, config: Path, confirmed: Any, cwd: Path, action: str) -> list[str]:
        """The `key=value` words that pass on what `config` asks for: each granted before in this session or confirmed
        now (`confirmed`: {key: value} from the request, each value exactly the file's); GrantNeeded listing the rest."""
        asked = asked_by(config)
        confirmed = confirmed if isinstance(confirmed, dict) else {}
        now = [g for g in asked if g.key in confirmed and confirmed[g.key] == g.value]
        self.record(folder, now)
        missing = [g for g in asked if not self.granted(folder, g)]
        if missing:
            keys = ", ".join(f"{g.key}: {g.override().partition('=')[2][:80]}" for g in missing)
            raise GrantNeeded(f"{action}: {config.name} of this run asks for {keys}; a run folder's files grant "
                              "nothing by themselves: tick what you trust on the run's page (it is passed on the "
                              "command line), or leave it", [describe(g, cwd) for g in missing])
        return [g.override() for g in asked]


def _holds(held: list[Grant], grant: Grant) -> bool:
    return any(g.key == grant.key and g.value == grant.value for g in held)


def asked_by(config: Optional[Path]) -> list[Grant]:
    """What a run folder's config file asks for ([] without the file; an unreadable one is the command's to say)."""
    if config is None or not config.is_file():
        return []
    try:
        return grants_asked(read_yaml(config))
    except UserError:
        return []


def describe(grant: Grant, cwd: Path) -> dict:
    """A grant as the page shows it beside its checkbox: the key, the exact value (sent back to grant it), what it
    does, the command-line word, and for reward functions the file each entry imports."""
    files = []
    if grant.key == "reward_funcs":
        for entry in reward_names(grant.value):
            if is_user_function(entry):
                files.append(module_file(str(entry), cwd))
    return {"key": grant.key, "value": grant.value, "why": grant.why, "override": grant.override(), "files": files}


def module_file(entry: str, cwd: Path) -> str:
    """Where a reward_funcs entry's code is read from, as `train` (running in `cwd`) would import it."""
    where = entry.rpartition(":")[0]
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where).expanduser()
        return f"{entry}: the file {(path if path.is_absolute() else cwd / path).resolve()}"
    return f"{entry}: the module {where}, from {cwd.resolve()} or the installed packages"
