"""A NameError inside an installed library ("NameError: name 'cuda_setup' is not defined" from bitsandbytes): the
library's own code uses a name it never defined on this path, a bug of that release (often on a path only some
machines take: an older GPU, another OS). Nothing on the machine is wrong; a release without the bug, or the
library's removal where the program uses it only when it is installed, is the fix."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule


_NAME_ERROR = re.compile(r"NameError: name '(\w{1,60})' is not defined")
# the library whose frame raised it: the nearest site-packages folder above the error (either slash)
_SITE = re.compile(r"(?i)site-packages[\\/]+([A-Za-z_]\w*)[\\/]")
# programs and the interpreter: their own NameErrors are their code's, not an installed library's
_NOT_LIBRARIES = ("python", "pip", "torch", "ollama", "llama.cpp", "comfyui", "docker")


@rule("wheel-platform")
def name_error_in_a_library(ctx: Context) -> Optional[Diagnosis]:
    """A NameError raised in an installed library's code (its site-packages frame, or its own messages beside it)."""
    lines = _lines_matching(ctx, _NAME_ERROR) if "NameError" in "\n".join(ctx.sheet.lines) else []
    if not lines:
        return None
    error = lines[0]
    above = ctx.sheet.lines[max(0, error.line_no - 8): error.line_no - 1]
    frames = [m.group(1) for line in above for m in [_SITE.search(line)] if m]
    if frames:
        library = frames[-1].replace("_", "-")
    else:
        named = [t for t in ctx.sheet.tools if t not in _NOT_LIBRARIES]
        if len(set(named)) != 1 or any('File "' in line for line in above):
            return None   # no frame and no single library named: the program's own code may have raised it
        library = named[0]
    if library in _NOT_LIBRARIES:
        return None
    name = _NAME_ERROR.search(error.line).group(1)
    return _make("wheel-platform", f"a bug in the installed {library}",
                 f"{library}'s own code uses the name {name}, which that release never defines on the path this "
                 "machine takes (a bug of the release, not of the machine)",
                 f"install a {library} release without the bug: pip install -U {library} (or the release before this "
                 f"one); where the program uses {library} only when it is installed (an optional 8-bit or kernel path "
                 f"you do not need), pip uninstall -y {library} and run without it", [ctx.line_fact(error)], [error])
