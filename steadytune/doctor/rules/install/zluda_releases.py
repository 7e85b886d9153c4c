"""ZLUDA releases (lshqqytiger's fork, the one ComfyUI-Zluda and the DirectML web UI forks install) whose zips shipped
without a file the release before had, and the release that put it back: a table, one row per release, each with
where the fact comes from. Mixing the missing file from an older release with the newer DLLs is not a fix (the DLLs of
one release go together): the next release is.

Sources: lshqqytiger/ZLUDA#44 (v3.8.3's ZLUDA-windows-rocm5-amd64.zip and -rocm6- zips have no cudart.dll; v3.8's
cudart.dll with v3.8.3's DLLs gives blurry images; the maintainer shipped v3.8.4 with cudart.dll in its zips; checked
v18b: "v3.8.4 was released with cudart.dll.")."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


class MissingFile(NamedTuple):
    release: str        # the release whose zips lack the file
    file: str           # the file, as the paste names it
    fixed: str          # the release that ships it again
    source: str


_MISSING_FILES = (
    MissingFile("3.8.3", "cudart", "3.8.4", "lshqqytiger/ZLUDA#44"),
)
_LACKS = r"(?i)(?:no|missing|lacks?|without|(?:doesn't|does not|don't|do not) (?:have|contain|include))\b[^\n]{0,40}\b{file}|{file}\S*\s+(?:is )?(?:missing|not (?:found|included|there))"


@rule("rocm-libs-missing")
def zluda_release_without_a_file(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: ZLUDA named, the release of a row named (v3.8.3), and the paste saying its file is missing."""
    text = _text(ctx)
    if "zluda" not in text.lower():
        return None
    for row in _MISSING_FILES:
        if not re.search(rf"(?<![\d.])v?{re.escape(row.release)}(?![\d])", text):
            continue
        lines = _lines_matching(ctx, _LACKS.replace("{file}", re.escape(row.file)))
        if not lines:
            continue
        return _make("rocm-libs-missing", f"ZLUDA v{row.release}'s zips lack {row.file}.dll",
                     f"ZLUDA v{row.release}'s release zips were published without {row.file}.dll, which the release "
                     f"before shipped ({row.source}); a {row.file}.dll taken from another release does not match "
                     "v{0}'s other DLLs (wrong or blurry output)".format(row.release),
                     f"install ZLUDA v{row.fixed} (its zips ship {row.file}.dll again): replace every ZLUDA DLL with "
                     f"v{row.fixed}'s, taking the zip for your HIP SDK (rocm5 for 5.7, rocm6 for 6.x), then delete "
                     "ZLUDA's cache (%LOCALAPPDATA%\\ZLUDA\\ComputeCache) and start again; never mix DLLs of two "
                     "releases", [], lines[:1])
    return None
