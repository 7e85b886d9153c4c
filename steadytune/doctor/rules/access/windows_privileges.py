"""Windows refusing an operation the account may not do (WinError 1314, "a required privilege is not held by the
client"): most often a symbolic link, which Windows lets only an administrator or an account in Developer Mode make
(Python's os.symlink documentation: SeCreateSymbolicLinkPrivilege, or Developer Mode on Windows 10 and later)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule

_PRIVILEGE_NOT_HELD = re.compile(r"(?i)\[WinError 1314\]|A required privilege is not held by the client|"
                                 r"ERROR_PRIVILEGE_NOT_HELD")
_SYMLINK = re.compile(r"(?i)\bsymlink\w*|symbolic link|\bmklink\b|os\.link\b")


@rule("device-access")
def privilege_not_held(ctx: Context) -> Optional[Diagnosis]:
    """WinError 1314 is the account's rights, whatever else the build printed around it (a CUDA_HOME note, a
    metadata-generation failure): the step that needs the privilege fails first."""
    refused = _lines_matching(ctx, _PRIVILEGE_NOT_HELD.pattern)
    if not refused:
        return None
    linking = bool(_SYMLINK.search("\n".join(ctx.sheet.lines)))
    what = "create a symbolic link" if linking else "do what the failing step asks"
    fix = ("turn on Windows Developer Mode (Settings > System > For developers), which lets an ordinary account "
           "create symlinks, or run the install from an elevated (Run as administrator) shell; a release of the "
           "package that copies instead of symlinking on Windows avoids it" if linking else
           "run the command from an elevated (Run as administrator) shell, or grant the account the privilege the "
           "step needs (Local Security Policy > User Rights Assignment)")
    return _first(_make("device-access", "Windows refused a privilege the account does not hold",
                        f"WinError 1314: the account may not {what}; only an administrator (or, for symlinks, "
                        "an account in Developer Mode) may", fix, [], refused))
