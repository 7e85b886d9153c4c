"""A package installed into another Python than the one the app runs: the user's pip (a system-wide or user-wide
Python) is not the app's own (a venv, a desktop app's environment, a portable package's embedded Python), so the app
still does not find the package. Two readings, one per way a paste shows it:

  - a torch extension's wheel (flash-attn, xformers, sageattention, ...) installed by a pip that has no torch: pip then
    collects torch from PyPI for it ("Collecting torch (from flash-attn==...)"), which it would not do in the app's
    environment, and the wheel's cpXY tag is this Python's, not the app's (kijai/ComfyUI-Florence2#8: a cp312 wheel
    into the system Python 3.12 while ComfyUI ran from Stability Matrix's Python 3.10 venv; the cp310 wheel installed
    in that venv fixed it);
  - a package tested and working in one Python while the app's own run shows another environment: two different
    torch builds in one paste, or the user saying the install went into the user-wide / system Python
    (woct0rdho/triton-windows#141: triton-windows in the user-wide Python 3.12 with torch 2.8, the ComfyUI desktop app
    on its own venv's torch 2.7; pip from the app's terminal, which runs its venv, fixed it).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text
from steadytune.doctor.rules.install.app_torch import app_named, app_python

# extensions built against torch, whose wheels carry a torch and a Python tag
_EXTENSION = r"(?:flash[-_]attn|xformers|sageattention|bitsandbytes|triton(?:[-_]windows)?|apex|deepspeed|causal[-_]conv1d|mamba[-_]ssm)"
# pip fetching torch for the extension: this Python has no torch
_COLLECTS_TORCH = re.compile(rf"(?i)Collecting torch\S*\s*\(from {_EXTENSION}|(?:Downloading|Using cached) torch-\d")
_WHEEL = re.compile(rf"(?i)\b({_EXTENSION})-[\w.+]+-(cp3\d+)-(?:cp3\d+|abi3|none)-(win_amd64|manylinux\w*|linux_x86_64)\.whl")
# the user's own words that the install went to a Python other than the app's
_OTHER_PYTHON = re.compile(r"(?i)\b(?:user-?wide|system(?:-?wide)?|global(?:ly)?|my (?:own|main)) python\b|"
                           r"\bpython\b.{0,20}\b(?:user-?wide|system-?wide|globally)\b|installed (?:it )?globally")
# an app that runs its own Python
_APP = re.compile(r"(?i)\bComfy\s?UI(?:\b|_)|python_embeded|\bFramePack\b|\bForge\b|stable-diffusion-webui|\bFooocus\b|\bSD\.?Next\b|"
                  r"\bStability\s?Matrix\b|\bSwarm\s?UI\b|\bWan2GP\b|\bkohya_ss\b|\bPinokio\b|\bInvokeAI\b")
# torch builds said in the paste (torch 2.8.0+cu129, "Pytorch version: 2.7.0+cu128")
_TORCH_BUILD = re.compile(r"(?i)\bpy?torch\b\W{0,3}(?:version\W{0,3})?(\d\.\d+(?:\.\d+)?)\s?\+\s?(cu\d+(?:\.\d)?|rocm[\d.]+|cpu)")


def _app_pip(text: str, windows: bool) -> str:
    """The command that installs into the app's own Python: the app's (from app_torch's table), a desktop app's
    terminal, or a venv's."""
    app = app_named(text)
    own = app_python(app, windows) if app else None
    if not own and re.search(r"(?i)\bComfy\s?UI\b", text):
        return ("install it into ComfyUI's own venv: in the ComfyUI desktop app, run pip from its terminal (the bottom "
                "panel), which runs in the app's venv; a manual install: activate the venv ComfyUI starts from "
                "(venv\\Scripts\\activate / source venv/bin/activate) and run pip there")
    if own:
        return f"install it with the app's own Python: {own} install ..."
    return ("install it with the app's own Python: activate the app's venv first (venv\\Scripts\\activate on Windows, "
            "source venv/bin/activate elsewhere; Stability Matrix: Data\\Packages\\<package>\\venv; ComfyUI portable: "
            "python_embeded\\python.exe -m pip) and run pip from there")


@rule("wheel-platform")
def extension_wheel_into_a_python_without_torch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a torch extension's wheel installed while pip collects torch for it (that Python has no torch)."""
    text = _text(ctx)
    collecting = _lines_matching(ctx, _COLLECTS_TORCH)
    wheel = _WHEEL.search(text)
    if not collecting or not (wheel or re.search(rf"(?i)pip\S*\s+install\b.{{0,200}}{_EXTENSION}", text)):
        return None
    windows = on_windows(ctx, text) or bool(wheel and wheel.group(3) == "win_amd64")
    name = wheel.group(1) if wheel else "the extension"
    tag = wheel.group(2) if wheel else None
    version = f"{tag[2]}.{tag[3:]}" if tag else None
    tagged = (f"the wheel's {tag} tag is for Python {version} (the Python this pip runs); " if tag else "")
    return _make("wheel-platform", f"{name} went into a Python without torch, not the app's",
                 f"pip collects torch for {name}, so the Python it installs into has no torch: it is not the "
                 f"environment the app runs (a venv or embedded Python of its own); {tagged}the app's Python still "
                 "lacks the package",
                 f"{_app_pip(text, windows)}; take the wheel whose cpXY tag is that Python's version (python -V in the "
                 "app's environment: cp310 for Python 3.10, cp311 for 3.11, cp312 for 3.12) and whose torch and CUDA "
                 "are the app's torch, and install it with --no-deps so the app's torch stays; remove what went into "
                 "the other Python (pip uninstall there)", [], collecting[:1])


@rule("env-not-applied")
def package_in_another_python(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an app that runs its own Python, and either two different torch builds in the paste or the user's
    words that the package went into the user-wide / system Python, with the app still not finding it."""
    text = _text(ctx)
    if not _APP.search(text):
        return None
    builds = {(m.group(1), m.group(2).lower().replace(".", "")) for m in _TORCH_BUILD.finditer(text)}
    other = _lines_matching(ctx, _OTHER_PYTHON)
    missing = _lines_matching(ctx, r"(?i)cannot find a working|not installed|No module named|could not (?:be )?"
                                   r"(?:found|imported)|is not available|not found")
    if not missing or not (len(builds) > 1 or other):
        return None
    windows = on_windows(ctx, text) or bool(re.search(r"(?<![\w])[A-Za-z]:\\", text))
    seen = (f"the paste shows two torch builds ({', '.join(sorted(v + '+' + c for v, c in builds))}): two Pythons"
            if len(builds) > 1 else "the install went into the user-wide / system Python")
    return _make("env-not-applied", "the package is in another Python than the app's",
                 f"{seen}; the package works where it was installed and tested, but the app runs its own Python "
                 "(a venv, an embedded Python), which does not have it",
                 f"{_app_pip(text, windows)}; then run the package's own test with that same Python (for triton: "
                 "python -c \"import triton\" from the app's environment)", [], (missing + other)[:1])
