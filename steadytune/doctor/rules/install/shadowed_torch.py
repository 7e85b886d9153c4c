"""Two torch installs in one Python, the one imported not the one the user installed. A user who installed torch with
conda ("conda install pytorch==1.8.0") while the traceback runs from pip's folders (/usr/local/lib/python3.X/
dist-packages, ~/.local/lib/python3.X/site-packages) has a pip-installed torch (or extension) ahead of conda's on
sys.path: an extension built for conda's torch then meets pip's torch and its symbols are undefined. Reinstalling the
extension for "the installed torch" changes nothing while two torches answer `import torch`; removing pip's copy does
(pytorch3d issue 1315: a pip torch 1.12.1 shadowing conda's 1.8.0, fixed by pip uninstall torch).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, rule

_UNDEFINED = re.compile(r"(?i)undefined symbol:?\s*_ZN\w*(?:at|c10|torch)\w*|\.so: undefined symbol\b")
_CONDA_TORCH = re.compile(r"(?i)\bconda install\b[^\n]{0,60}\bpytorch\b|\bmamba install\b[^\n]{0,60}\bpytorch\b|"
                          r"\binstall(?:ed)? (?:py)?torch (?:\S+ )?(?:with|by|through|via|from) conda\b")
# pip's folders outside any conda environment: the system Python's dist-packages, the user site
_PIP_FOLDER = re.compile(r"(/usr(?:/local)?/lib/python3\.\d+/dist-packages|~?/?[\w/.-]*/\.local/lib/python3\.\d+/"
                         r"site-packages)")


@rule("abi-mismatch")
def pip_torch_shadows_conda_torch(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    errors = _lines_matching(ctx, _UNDEFINED)
    said = _lines_matching(ctx, _CONDA_TORCH)
    folder = _PIP_FOLDER.search(text)
    if not (errors and said and folder) or re.search(r"(?i)/(?:ana|mini)conda3?/|/envs/|/opt/conda/", text):
        return None   # (the failing path is conda's own: the extension's build, not a second torch)
    where = folder.group(1)
    user_site = ".local" in where
    diagnosis = _make("abi-mismatch", "a pip-installed torch shadows the one conda installed",
                      f"torch was installed with conda, but the import runs from {where}, pip's folder "
                      f"{'in your home (the user site)' if user_site else 'of the system Python'}, ahead of conda's "
                      "on sys.path: a second torch (or extension) from pip is what loads, and an extension built for "
                      "the other torch finds its symbols undefined",
                      "remove pip's copy so only conda's torch is left: pip uninstall torch (run it until pip says "
                      "torch is not installed; add --user's folder: python -m pip uninstall torch from the same "
                      "python), likewise the extension if pip installed it there; then python -c \"import torch; "
                      "print(torch.__file__, torch.__version__)\" must show the conda environment's path and release"
                      + ("; PYTHONNOUSERSITE=1 keeps ~/.local out meanwhile" if user_site else ""),
                      [ctx.line_fact(errors[0]), ctx.line_fact(said[0])], errors[:1] + said[:1])
    # it names why the extension's own reading (rebuild it for the installed torch) would not help: it leads that one
    return _ahead_of(diagnosis, "abi-mismatch")
