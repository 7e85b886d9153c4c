"""WSL 2's ROCm bridge (librocdxg, which ROCr loads to reach the GPU through /dev/dxg) older than the ROCm runtime:
ROCr resolves the thunk (hsaKmt*) entry points in librocdxg by name, and a ROCm release that added entry points fails
on a librocdxg built before them with "dlsym failed: .../librocdxg.so: undefined symbol: hsaKmtX" and a crash. The
bridge must be a release built for the ROCm in use (or the ROCm one the bridge was built for).

Sources: ROCm/librocdxg#4 (hsaKmtHandleImport undefined with librocdxg 1.1.0 under a ROCm 7.12+ TheRock runtime; the
new thunk entry points came with ROCm 7.12, rocm-systems PR 1912; librocdxg PR 3 added the exports)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_MISSING = re.compile(r"(?i)librocdxg\S*\.so\S*:\s*undefined symbol:\s*(hsaKmt\w+)")
# the thunk entry points added in a ROCm release, which a librocdxg built before it lacks
_ADDED_IN = {"hsaKmtHandleImport": "7.12", "hsaKmtHandleExport": "7.12"}
_BRIDGE = re.compile(r"(?i)librocdxg[^\n]{0,20}?\b(\d+\.\d+\.\d+)\b|rocdxg-roct_(\d+\.\d+\.\d+)")


@rule("wsl")
def rocdxg_older_than_rocm(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _MISSING)
    if not lines:
        return None
    symbol = _MISSING.search(lines[0].line).group(1)
    since = _ADDED_IN.get(symbol)
    found = _BRIDGE.search(_text(ctx))
    bridge = f"librocdxg {found.group(1) or found.group(2)}" if found else "the librocdxg installed"
    when = (f"{symbol} is a thunk entry point ROCm {since} added; {bridge} was built before it" if since else
            f"{bridge} was built for an older ROCm than the runtime, which calls {symbol}")
    fix = ("install a librocdxg release built for the ROCm in use (one newer than " + bridge.replace("librocdxg ", "")
           + ", from its releases page, or built from source)" + (f" to match ROCm {since} or newer, or keep a ROCm "
                                                                    f"older than {since} with {bridge}" if since else
                                                                    ", or the ROCm release the bridge was built for"))
    return _first(_make("wsl", "librocdxg is older than the ROCm runtime",
                        f"under WSL 2, ROCr reaches the GPU through librocdxg and resolves its thunk functions by "
                        f"name; {when}, so the lookup fails and the runtime crashes", fix, [], lines[:1]))
