"""Files of an older install left beside a newer one: a program's own libraries from the release before (an undefined
symbol between two of its own files), and a launcher's venv that no longer matches the program's updated code."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text


# Programs installed by a script into a library folder of their own, which the script adds to but does not empty:
# (program, the folder as a paste shows it, the reinstall, source)
_PROGRAM_FOLDERS = (
    ("ollama", re.compile(r"(/(?:usr/(?:local/)?)?lib/ollama)/"), "curl -fsSL https://ollama.com/install.sh | sh",
     "ollama docs/linux.md: when upgrading from a prior version, remove the old libraries (sudo rm -rf "
     "/usr/lib/ollama) first"),
)


@rule("abi-mismatch")
def program_libraries_of_an_older_install(ctx: Context) -> Optional[Diagnosis]:
    """An undefined symbol in a file inside a program's own library folder: the program's files are of two releases
    (the installer wrote the new ones beside the old, and a runner of the old release calls what the new libraries no
    longer export). Emptying the folder and installing again is the fix; no package rebuild helps."""
    if "undefined symbol" not in _text(ctx).lower():
        return None
    for line in _lines_matching(ctx, r"undefined symbol"):
        for program, folder, reinstall, _source in _PROGRAM_FOLDERS:
            found = folder.search(line.line)
            if found is None:
                continue
            where = found.group(1)
            return _make("abi-mismatch", f"{program}'s libraries are of two releases",
                         f"{where} holds libraries of an earlier {program} install beside the new ones; the installer "
                         f"adds files there without removing the old, and a library of the other release does not "
                         "export what the one loading it calls",
                         f"sudo rm -rf {where} (only {program}'s own files are there), then install again: {reinstall}",
                         [ctx.line_fact(line)], [line])
    return None


# the trouble began right after the program's own code was updated (git pull, the launcher's update)
_AFTER_UPDATE = re.compile(r"(?i)\b(?:after|since) (?:(?:i |we )?(?:pull(?:ing|ed)?|git pull(?:ing)?|updat(?:e|ing|ed))"
                           r"(?: to)? (?:the |to the )?(?:latest|last|newest|recent)? ?(?:commits?|version|webui|"
                           r"repo|code|release|update)|(?:a |the )?git pull)\b")
# a web UI whose launcher (webui-user.bat, webui.sh, launch.py) installs the packages into its own venv folder
_LAUNCHER_VENV = re.compile(r"(?i)\btxt2img\b|\bimg2img\b|\bwebui(?:-user)?\.(?:bat|sh)\b|\blaunch\.py\b|"
                            r"stable[- ]diffusion[- ]webui|\bsd\.?next\b|\bforge\b|\bA1111\b|\bautomatic1111\b")


@rule("abi-mismatch")
def launcher_venv_older_than_the_code(ctx: Context) -> Optional[Diagnosis]:
    """A web UI that fails right after its code was updated: its launcher installed the packages of the old code
    (torch-directml, torch, their compiled parts) into its venv and does not replace ones already there, so the new
    code runs on the old packages. Deleting the venv makes the launcher install what the new code pins."""
    text = _text(ctx)
    if not _LAUNCHER_VENV.search(text):
        return None
    said = _lines_matching(ctx, _AFTER_UPDATE.pattern)
    if not said or not re.search(r"(?i)\berror\b|exception|traceback", text):
        return None
    directml = re.search(r"(?i)directml|\bdml\b|The parameter is incorrect", text)
    return _make("abi-mismatch", "the web UI's venv is older than its updated code",
                 "the update changed the code, but the launcher keeps the packages it installed into the venv "
                 "earlier, so the new code runs on packages of the old release",
                 "close the web UI, delete (or rename) the venv folder in its install folder, and start it again "
                 "(webui-user.bat / webui.sh): the launcher reinstalls the packages the updated code pins"
                 + ("; or in that venv: pip install -U torch-directml" if directml else ""),
                 [ctx.line_fact(said[0])], said[:1], confirmed=False)


# Python says "(unknown location)" for a module that has no file: a folder without its __init__.py, imported as a
# namespace package. An installed package's subpackage in that state is what an interrupted or partial uninstall leaves
# (pip removes the files it recorded, not the folders other installs wrote into), with a new install mixed in.
_UNKNOWN_LOCATION = re.compile(r"cannot import name ['\"]?(\w+)['\"]? from ['\"]?([A-Za-z_][\w.]*)['\"]? "
                               r"\(unknown location\)")


def leftover_package(ctx: Context) -> Optional[tuple]:
    """The (line, package) of an installed package's module that imports as an empty folder: the package is shown
    installed (its folder under site-packages, or a pinned `package==version` line)."""
    for line in _lines_matching(ctx, _UNKNOWN_LOCATION.pattern):
        top = _UNKNOWN_LOCATION.search(line.line).group(2).split(".")[0]
        installed = re.search(rf"(?i)(?:site|dist)-packages[/\\]+{re.escape(top)}[/\\]|^\s*{re.escape(top)}\s*==\s*\d",
                              _text(ctx), re.M)
        if installed:
            return line, top
    return None


@rule("abi-mismatch")
def package_folder_left_by_an_older_install(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: "cannot import name X from 'pkg.sub' (unknown location)" with pkg shown installed. The folder of
    pkg.sub has no __init__.py: files of two installs, the old one's removal unfinished. Reinstalling over it keeps the
    leftovers; uninstalling every package that writes into that folder, deleting what remains, and installing again
    is the fix."""
    found = leftover_package(ctx)
    if found is None:
        return None
    line, top = found
    module = _UNKNOWN_LOCATION.search(line.line).group(2)
    text = _text(ctx)
    # the packages of that family the paste lists (torch, torchvision, torch-directml): each writes into or pins it
    family = sorted({m.lower() for m in re.findall(rf"(?im)^\s*({re.escape(top)}[\w-]*)\s*==", text)} | {top})
    folder = re.search(rf"([^\s\"']*?(?:site|dist)-packages[/\\]+){re.escape(top)}[/\\]", text)
    where = f"{folder.group(1)}{top}" if folder else f"site-packages/{top}"
    again = next((p for p in family if p != top and p not in ("torchvision", "torchaudio")), None) or " ".join(family)
    covers = [l for l in _lines_matching(ctx, _UNKNOWN_LOCATION.pattern)
              if _UNKNOWN_LOCATION.search(l.line).group(2).split(".")[0] == top]
    return _make("abi-mismatch", f"{top}'s folder holds files of two installs",
                 f"{module} imports as a folder without its __init__.py (Python's \"unknown location\"): the files of "
                 f"an earlier {top} install were not all removed, and the new install was written beside them",
                 f"pip uninstall -y {' '.join(family)} (repeat until pip says {'they are' if len(family) > 1 else 'it is'} "
                 f"not installed), delete what is "
                 f"left of {where}, then install again: pip install {again}", [ctx.line_fact(line)], covers)
