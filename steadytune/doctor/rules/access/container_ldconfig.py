"""The NVIDIA container hook's "ldcache error" (device-access): after mounting the driver's libraries into the
container, nvidia-container-cli runs ldconfig to add them to the container's loader cache, with the binary that the
`ldconfig` setting of /etc/nvidia-container-runtime/config.toml names. A leading "@" means the host's binary (run on the
container's root); without it the container's own is run. Ubuntu's real binary is /sbin/ldconfig.real (/sbin/ldconfig
is a shell wrapper around it), Debian's and the other distributions' is /sbin/ldconfig; a setting that names the other
distribution's path, or a path without the "@" into an image that has no ldconfig there, fails: exit code 127 (not
found), "open failed ... no such file or directory", or exit 1 from a wrapper that cannot run.

Sources: NVIDIA/nvidia-docker#587 (the maintainer: change ldconfig = "@/sbin/ldconfig" to "@/sbin/ldconfig.real" in
/etc/nvidia-container-runtime/config.toml; the reporter confirmed), NVIDIA/nvidia-docker#1424 (the maintainer: with the
"@" the host's ldconfig runs, without it the container's; "@/sbin/ldconfig" is the default on Debian), #614 (Debian
with "@/sbin/ldconfig.real": "open failed: /sbin/ldconfig.real: no such file or directory")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule

_LDCACHE = re.compile(r"(?i)nvidia-container-cli:? ldcache error:? (?:process|open failed:?) ?(\S*ldconfig(?:\.real)?)")
_CONFIG = "/etc/nvidia-container-runtime/config.toml"


@rule("device-access")
def hook_ldconfig(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: nvidia-container-cli's ldcache error, and the ldconfig path it names (the other one is the fix)."""
    said = _lines_matching(ctx, _LDCACHE)
    if not said:
        return None
    path = _LDCACHE.search(said[0].line).group(1).lstrip("@")
    other = "/sbin/ldconfig" if path.endswith(".real") else "/sbin/ldconfig.real"
    host = re.search(r"(?i)\bubuntu\b|\bdebian\b|\bcentos\b|\brhel\b|\bfedora\b|\brocky\b|\bsuse\b", "\n".join(ctx.sheet.lines))
    system = f" ({host.group(0)})" if host else ""
    return _first(_make(
        "device-access", "the NVIDIA container hook cannot run ldconfig",
        f"nvidia-container-cli refreshes the container's library cache with the ldconfig that {_CONFIG} names; "
        f"{path} could not be run there (Ubuntu's real binary is /sbin/ldconfig.real, Debian's and most others' "
        "/sbin/ldconfig; without a leading @ the container's own binary is used), so the hook fails before the "
        "container starts",
        f"edit {_CONFIG}{system}: set ldconfig = \"@{other}\" (the @ runs the host's binary; use the path that exists "
        f"on the host: ls -l /sbin/ldconfig*), keeping the @ prefix, then run the container again (no restart needed; "
        "a toolkit upgrade may rewrite the file: keep the line); check with docker run --rm --gpus all "
        "ubuntu nvidia-smi (the toolkit docs' sample workload)",
        [], said[:1]))
