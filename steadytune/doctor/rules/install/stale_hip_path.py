"""A HIP_PATH left over from an older ROCm: up to ROCm 5.x, HIP lived in its own folder (/opt/rocm-X/hip, with
hip/bin/hipcc and hip/share/hip/version); ROCm 6 dropped that folder and keeps hipcc in <rocm>/bin. hipconfig and hipcc
take HIP_PATH from the environment when it is set, so a HIP_PATH written into a shell profile by an earlier install
sends them to <rocm>/hip/..., which the new release does not have: "HIP version file ... not found", "<rocm>/hip/bin/hipcc:
not found", and clang's "cannot find HIP runtime". The release is sound; the variable is stale.

Sources: ROCm 5.3's release notes (the Linux filesystem hierarchy, with a backward-compatible layout for a while);
StanfordLegion/legion MR 1153 ("As of ROCm 6, the path /opt/rocm-6.0.0/hip no longer exists"; set ROCM_PATH to
/opt/rocm-X.Y.Z, not .../hip; checked v18b); ROCm/legacy-rocm-build#6285 (hipconfig looking for /opt/rocm-7.2.3/hip/share/hip/version; AMD's answer: a stale
HIP_PATH from a previous install; `sudo amdgpu-install --uninstall --rocmrelease=all`, `sudo apt purge amdgpu-install`,
`sudo apt autoremove`, unset the leftover variable, reinstall with `amdgpu-install -y --usecase=graphics,rocm`; the
reporter confirmed it)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


# a path into the old hip/ folder of a ROCm prefix (/opt/rocm-7.2.3/hip/bin/hipcc, /opt/rocm/hip/share/hip/version),
# on a line that says it is missing
_OLD_HIP = re.compile(r"(/opt/rocm(?:-(\d+)\.(\d+)(?:\.\d+)?)?)/hip/(?:share/hip/version|bin/hip\w*|include\b|lib\b)")
_MISSING = re.compile(r"(?i)not found|no such file|cannot find|does not exist|doesn't exist|missing")
# the ROCm release the paste names otherwise ("ROCm 7.2.3", amdgpu-install_7.2.3..., rocm-7.2.3)
_ROCM_RELEASE = re.compile(r"(?i)\brocm[-_ ]?(\d+)\.(\d+)")
_FIRST_WITHOUT_HIP_FOLDER = 6   # ROCm 6.0 has no hip/ folder (5.x kept it for backward compatibility)


@rule("rocm-libs-missing")
def stale_hip_path(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a path into <rocm>/hip/ said missing, under a ROCm release of 6 or later (from that path, or named
    elsewhere in the paste), where that folder no longer exists."""
    lines = [e for e in _lines_matching(ctx, _OLD_HIP) if _MISSING.search(e.line)]
    if not lines:
        return None
    m = _OLD_HIP.search(lines[0].line)
    prefix = m.group(1)
    major = int(m.group(2)) if m.group(2) else None
    if major is None:
        named = [int(r.group(1)) for r in _ROCM_RELEASE.finditer(_text(ctx))]
        major = max(named) if named else None
    if major is None or major < _FIRST_WITHOUT_HIP_FOLDER:
        return None
    release = prefix.removeprefix("/opt/rocm").lstrip("-") or None
    reinstall = (f"reinstall {release} (its amdgpu-install package for your distribution, then sudo amdgpu-install -y "
                 "--usecase=graphics,rocm)" if release else
                 "reinstall the release (its amdgpu-install package, then sudo amdgpu-install -y --usecase=graphics,rocm)")
    return _first(_make(
        "rocm-libs-missing", "a stale HIP_PATH points hipcc and hipconfig at the old hip/ folder",
        f"ROCm {major} has no {prefix}/hip folder (HIP moved into the ROCm prefix itself in ROCm 6: {prefix}/bin/hipcc); "
        "hipconfig and hipcc take HIP_PATH from the environment, and a HIP_PATH left by an earlier install (or set by "
        "hand) sends them to the old layout, so the version file, hipcc and the HIP runtime are \"not found\"",
        "unset HIP_PATH (and ROCM_PATH / HIP_* set by hand) and delete the line that sets it from ~/.bashrc, ~/.profile, "
        "~/.zprofile or /etc/environment; where older releases are still installed beside it, clean them out first: "
        "sudo amdgpu-install --uninstall --rocmrelease=all, sudo apt purge amdgpu-install, sudo apt autoremove, "
        f"then {reinstall}; hipconfig --full must then report HIP_PATH as the ROCm prefix itself",
        [], lines[:3]))
