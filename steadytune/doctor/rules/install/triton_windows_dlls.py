"""triton-windows failing to import its compiled module on Windows: "DLL load failed while importing libtriton" (or
while importing triton's other .pyd modules). libtriton.pyd links the Microsoft Visual C++ runtime (msvcp140.dll,
vcruntime140.dll, vcruntime140_1.dll); an embedded Python (ComfyUI's portable python_embeded, a one-click package's
system\\python) does not find it where a usual Python would. The fix from triton-windows' README ("If you see
ImportError: DLL load failed ..."): install the latest vcredist, or copy the three DLLs from C:\\Windows\\System32\\
into the folder containing python.exe, and delete the cache folder C:\\Users\\<you>\\.triton\\cache\\
(woct0rdho/triton-windows#26: ComfyUI portable, fixed by copying the DLLs into python_embeded)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

# the import of triton's compiled modules failing for a DLL (Windows' own wording)
# (torch's own "while importing _C" is not triton's: only a traceback through triton's folder makes it so)
_TRITON_DLL = re.compile(r"(?i)DLL load failed while importing (?:libtriton|triton\w*)\b|"
                         r"triton[\\/].{0,120}\bDLL load failed")
_TRITON = re.compile(r"(?i)\btriton\b")
# the Python in use, by its folder: an embedded one (ComfyUI portable, one-click packages) or a venv
_EMBEDDED = re.compile(r"(?i)([A-Z]:\\[^\s'\"]*?\\(?:python_embeded|python_embedded|system\\python))\\")


@rule("rocm-libs-missing")
def triton_windows_runtime_dlls(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a DLL load failure while importing libtriton (or a triton module, triton named in the paste)."""
    text = _text(ctx)
    said = [e for e in _lines_matching(ctx, r"(?i)DLL load failed") if _TRITON_DLL.search(e.line)]
    # a traceback through site-packages\triton\ whose last line is the DLL failure
    through = re.search(r"(?i)[\\/]triton[\\/][^\n]*\n(?:[^\n]*\n){0,8}[^\n]*DLL load failed", text)
    if not said and not through:
        return None
    said = said or _lines_matching(ctx, r"(?i)DLL load failed")
    embedded = _EMBEDDED.search(text)
    folder = (f"{embedded.group(1)}\\ (the folder with this python.exe)" if embedded else
              "the folder containing the python.exe that runs it (ComfyUI portable: python_embeded\\)")
    return _first(_make(
        "rocm-libs-missing", "triton-windows cannot load the Visual C++ runtime its libtriton links",
        "triton's compiled module (libtriton.pyd) links the Microsoft Visual C++ runtime (msvcp140.dll, "
        "vcruntime140.dll, vcruntime140_1.dll); this Python does not find it (an embedded Python looks in its own "
        "folder), so the import fails",
        "install the latest Visual C++ Redistributable (https://aka.ms/vs/17/release/vc_redist.x64.exe); if it still "
        f"fails, copy msvcp140.dll, vcruntime140.dll and vcruntime140_1.dll from C:\\Windows\\System32\\ into {folder}, "
        "then delete C:\\Users\\<you>\\.triton\\cache\\ and import triton again (triton-windows' README)",
        [], said[:1]))
