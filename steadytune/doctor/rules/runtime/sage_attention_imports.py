"""An app that keeps saying SageAttention is not installed after the user installed it: the app only tries `import
sageattention` and reports any failure as "not installed". SageAttention imports Triton (its quantization kernels are
Triton's), so without Triton in the same Python the import fails (on Windows the package is triton-windows, pinned
to the torch release); and a one-click package runs its own embedded Python, so pip must be that Python's
(lllyasviel/FramePack#209: SageAttention installed and still "not installed", fixed by installing Triton too after
running the package's environment.bat; FramePack#105, triton-windows' maintainer: the one-click package's
system\\python\\python.exe -m pip install -U "triton-windows<3.3" for its torch 2.6, and the include and libs folders
of its Python version copied into system\\python\\ so Triton can compile; FramePack#59: the package's environment.bat
sets up its own Python). The torch-to-triton-windows pins are checked in runtime/sage_attention.py (_TRITON_FOR_TORCH,
round 19; v20 against woct0rdho/triton-windows' README table, torch 2.6 -> Triton 3.2, 2.7 -> 3.3, 2.8 -> 3.4)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text
from steadytune.doctor.rules.install.app_torch import app_named, app_python, windows_paste
from steadytune.doctor.rules.runtime.sage_attention import _TORCH, _TRITON_FOR_TORCH

_NOT_INSTALLED = re.compile(r"(?i)sage[- ]?(?:attn|attention)\w*\W{0,3}(?:is )?not (?:installed|found|available)|"
                            r"No module named '?sageattention|cannot import name 'sageattn'? from")
# the user saying it was installed
_INSTALLED = re.compile(r"(?i)\binstall(?:ed|ing)?\b|\bpip\b|\.whl\b")
# the apps' own Python for pip, where the paste names one (one-click packages first)
_OWN = (
    (r"(?i)\bFramePack\b|framepack_cu\d+", "FramePack's one-click package",
     "in the package folder run environment.bat first (call environment.bat: it sets up the package's own Python) "
     "and then pip, or call that Python directly: system\\python\\python.exe -m pip install ...; triton in an "
     "embedded Python also needs the include and libs folders of the same Python version copied into system\\python\\"),
    (r"(?i)python_embeded|ComfyUI_windows_portable", "ComfyUI's portable package",
     "with its embedded Python: python_embeded\\python.exe -m pip install ...; triton there also needs the include "
     "and libs folders of the same Python version copied into python_embeded\\"),
)


@rule("attention")
def sage_attention_installed_but_not_importable(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the app's "SageAttention not installed" (or the import failing) with the user saying it was
    installed; the app (table) gives its own Python."""
    said = _lines_matching(ctx, _NOT_INSTALLED)
    text = _text(ctx)
    if not said or not _INSTALLED.search(_NOT_INSTALLED.sub("", text)):
        return None
    if re.search(r"(?i)not new enough|too old|\b1\.0\.\d\b", text):
        return None   # SageAttention 1.x: sage_attention.py's reading
    # (FramePack's one-click package is Windows'; a Linux path or distribution says otherwise)
    windows = windows_paste(ctx, text) or bool(re.search(r"(?i)\.bat\b|\.exe\b|FramePack|python_embeded|_windows_portable", text)
                                                and not re.search(r"(?i)/home/|\bLinux\b|\bUbuntu\b", text))
    own = next(((name, how) for names, name, how in _OWN if re.search(names, text)), None)
    if own is None:
        app = app_named(text)
        python = app_python(app, windows) if app else None
        own = ((app.name, f"with its own Python: {python} install ...") if python else
               ("the app", "with the Python the app runs (its venv activated, or its embedded python.exe -m pip)"))
    name, how = own
    torch = _TORCH.search(text)
    pin = (f"\"triton-windows<{_TRITON_FOR_TORCH[int(torch.group(1))]}\"" if torch and int(torch.group(1)) in
           _TRITON_FOR_TORCH else "the triton-windows release for its torch (torch 2.6: \"triton-windows<3.3\", 2.7: "
           "<3.4, 2.8: <3.5)")
    triton = f"pip install -U {pin} (on Windows the package is triton-windows)" if windows else "pip install triton (Linux torch wheels bring it; check its release)"
    return _make("attention", "SageAttention is installed but does not import in the app's Python",
                 f"{name} reports SageAttention as not installed whenever `import sageattention` fails; SageAttention "
                 "imports Triton, so without Triton in that same Python (or with SageAttention in another Python) the "
                 "import fails",
                 f"install Triton into the same Python as SageAttention: {triton}; for {name}, {how}; then "
                 "python -c \"import triton, sageattention\" with that Python must print nothing", [], said[:1])
