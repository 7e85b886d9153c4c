"""A ROCm package that apt (or dnf) cannot find because ROCm renamed or folded it, named by another package's
dependency: the package that now provides the old name is the one to install first. Table from the ROCm repositories'
own history (ROCm/legacy-rocm-build#1802: hsakmt-roct was folded into hsakmt-roct-dev, which provides both names; the
last repository that has hsakmt-roct itself is 4.3.1)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule


# old name -> (the package that provides it now, what happened)
_RENAMED = {"hsakmt-roct": ("hsakmt-roct-dev", "after ROCm 4.3 the thunk library's runtime package was folded into "
                                               "hsakmt-roct-dev, which provides the old name too")}
# apt's, dnf's and people's words for a dependency nothing provides
_UNMET = (r"(?i)(?:depends on (?:the )?(?:missing )?|Depends:\s*|requires\s+|nothing provides\s+|Unable to locate package\s+|"
          r"no installation candidate.{{0,40}}|missing\s+)[`'\"]?({names})(?![\w-])")


@rule("rocm-libs-missing")
def rocm_package_renamed(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a dependency on a renamed ROCm package that the repository does not have."""
    names = "|".join(re.escape(n) for n in _RENAMED)
    pattern = re.compile(_UNMET.format(names=names))
    said = _lines_matching(ctx, pattern)
    if not said:
        return None
    old = pattern.search(said[0].line).group(1)
    new, why = _RENAMED[old]
    return _make("rocm-libs-missing", f"{old} is now {new}",
                 f"a ROCm package depends on {old}, which this ROCm repository no longer has: {why}",
                 f"install {new} first (sudo apt install {new}; dnf install {new}), then the rest of ROCm (the "
                 f"dependency on {old} is then met); or install through amdgpu-install, which resolves the renames",
                 [ctx.line_fact(said[0])], said[:1])
