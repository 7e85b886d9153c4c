"""A torch-directml older than the program that runs on it: each torch-directml release is built for, and pins, one
torch release, so a program updated to code for a newer torch (the DirectML web UI forks move with upstream's torch)
fails on a venv that kept an old torch-directml; the updater does not replace a package already installed. The fix is
the plug-in's newest release in that venv, which brings its torch with it (lshqqytiger in
stable-diffusion-webui-amdgpu#77: pip install torch-directml --upgrade after the fork dropped the 0.1.13 builds)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# torch-directml's releases and the torch each pins (PyPI's torch-directml files and their requirements; from memory,
# to check against PyPI): the 0.1.13 line is torch 1.13, the 0.2 line torch 2.x
DIRECTML_TORCH = (((0, 1, 13), "1.13.1"), ((0, 2, 0), "2.0.0"), ((0, 2, 1), "2.3.1"), ((0, 2, 2), "2.3.1"),
                  ((0, 2, 3), "2.3.1"), ((0, 2, 4), "2.4.1"), ((0, 2, 5), "2.4.1"))
# the line the DirectML programs of today are written for: older ones are what an update leaves behind
_CURRENT_LINE = (0, 2)

# torch-directml's version as pip show / pip list / pip freeze / a requirement print it
_VERSION = re.compile(r"(?i)Name:\s*torch-directml\s*\n[^\n]{0,40}?Version:\s*(\d+)\.(\d+)\.(\d+)|"
                      r"torch[-_]directml\s*(?:==|\s)\s*(\d+)\.(\d+)\.(\d+)")
# an update just made (the program's newest commit, a git pull), or the program failing at all
_UPDATED = re.compile(r"(?i)\b(?:newest|latest|new|recent)\s+(?:commit|update|version|release)|\bgit pull\b|"
                      r"\bafter (?:the |an? )?(?:update|updating|upgrad\w+|pull\w*)|\bupdated\b")
_FAILS = re.compile(r"(?i)\berror\b|\bexception\b|\btraceback\b|\bthrows?\b|\bfail\w*|\bcrash\w*|"
                    r"\bno longer works?\b|\bbroke\w*\b")


def _torch_of(release: tuple[int, int, int]) -> Optional[str]:
    pinned = [torch for version, torch in DIRECTML_TORCH if version <= release]
    return pinned[-1] if pinned else None


@rule("abi-mismatch")
def torch_directml_behind_its_program(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an installed torch-directml of a line older than today's, and the program failing after an update
    (or failing, when the paste is about the plug-in's version)."""
    text = _text(ctx)
    version = _VERSION.search(text)
    if version is None:
        return None
    release = tuple(int(g) for g in version.groups() if g is not None)[:3]
    if release[:2] >= _CURRENT_LINE:
        return None
    if not (_UPDATED.search(text) and _FAILS.search(text)):
        return None
    shown = _lines_matching(ctx, r"(?i)torch[-_]directml|Version:\s*\d")
    torch = _torch_of(release)
    newest_torch = DIRECTML_TORCH[-1][1]
    return _make("abi-mismatch", "torch-directml is older than the program's code",
                 f"the venv keeps torch-directml {'.'.join(map(str, release))}, built for torch {torch or 'an old '}"
                 f"; the program was updated to code for the torch of the current torch-directml releases (the 0.2 "
                 f"line, torch 2.x up to {newest_torch}), and its updater does not replace a package already "
                 "installed, so it fails on the old one",
                 "upgrade the plug-in inside the program's venv, which brings its torch along: venv\\Scripts\\activate "
                 "(Linux/WSL: source venv/bin/activate), then pip install torch-directml --upgrade; or delete the venv "
                 "folder and start the program once so it installs everything anew", [], shown[:1])
