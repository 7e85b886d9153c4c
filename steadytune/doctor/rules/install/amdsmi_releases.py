"""amd-smi (or a program importing amdsmi) failing with an undefined amdsmi_* symbol in libamd_smi.so: the amdsmi
Python package that loaded is another ROCm release's than the library it opens. Where several ROCm releases have been
installed, a pip-installed amdsmi left in a site-packages folder (/usr/local/lib/python3.X/site-packages, ~/.local)
by an earlier release shadows the one of the ROCm in use, and loads its own release's libamd_smi. (A module without a
function the CLI calls is the same cause, read by install/wheels.py.)

Sources: ROCm/amdsmi#186 (the 7.1.1 CLI importing a 7.0.1 amdsmi package, "undefined symbol:
amdsmi_get_gpu_partition_metrics_info"); AMD SMI's install docs and known issues (pip uninstall amdsmi, then install
the package of the target ROCm from /opt/rocm/share/amd_smi with python3 -m pip install --user .)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_UNDEFINED = re.compile(r"(libamd_smi\S*?\.so[.\d]*):\s*undefined symbol:\s*(amdsmi_\w+)")
_RELEASE_PATH = re.compile(r"/opt/rocm-(\d+\.\d+(?:\.\d+)?)")
_PACKAGE_DIR = re.compile(r"(/\S*?/(?:site|dist)-packages)/amdsmi/")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


@rule("abi-mismatch")
def amdsmi_package_of_another_release(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _UNDEFINED)
    if not lines:
        return None
    library, symbol = _UNDEFINED.search(lines[0].line).groups()
    text = _text(ctx)
    loaded = _RELEASE_PATH.search(library)
    releases = sorted({m.group(1) for m in _RELEASE_PATH.finditer(text)}, key=_key)
    # the ROCm in use: the newest release the paste's paths name other than the library's (the CLI's own folder)
    others = [r for r in releases if not loaded or r != loaded.group(1)]
    target = f"/opt/rocm-{others[-1]}" if others else "/opt/rocm"
    package = _PACKAGE_DIR.search(text)
    where = f" (the one in {package.group(1)})" if package else ""
    in_use = f"ROCm {others[-1]}'s" if others else "a newer release's"
    sudo = ", with sudo for " + package.group(1) if package and package.group(1).startswith("/usr") else ""
    stale = f"ROCm {loaded.group(1)}'s " if loaded else "another release's "
    diagnosis = _make("abi-mismatch", "the amdsmi Python package is another ROCm release's",
                      f"{library} has no {symbol}: the amdsmi Python package that loaded{where} was installed by an "
                      f"earlier ROCm and opens {stale}libamd_smi, while the amd-smi in use is "
                      f"{in_use}",
                      f"pip uninstall amdsmi (run it until pip finds none left{sudo}), "
                      f"then install the package of the ROCm in use: cd {target}/share/amd_smi && python3 -m pip "
                      "install --user . (or leave it uninstalled where only the amd-smi command is needed); "
                      "python3 -c 'import amdsmi; print(amdsmi.__file__)' shows which one loads", [], lines[:1])
    # two releases named on the paths settle it
    return _first(diagnosis) if others else diagnosis
