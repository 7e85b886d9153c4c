"""apt refusing one of AMD's own repositories (repo.radeon.com) with 404 / "does not have a Release file" while
amdgpu-install is set up or run (round 18, r18b). Two situations, told apart by the path that is missing:

- a repository named after a ROCm release (amdgpu/7.2, amdgpu/6.4.1): since ROCm 7.x the graphics driver has its
  own version line (amdgpu/30.x), and a ROCm-named amdgpu entry is left in /etc/apt/sources.list.d by an earlier
  amdgpu-install package beside the new installer's entries. AMD's answer (ROCm/legacy-rocm-build#5881 and its
  duplicate #5903): remove the installer and every repository it wrote, then install the new amdgpu-install again
  (amdgpu-install --uninstall --rocmrelease=all; apt purge amdgpu-install; apt autoremove);
- a repository named after a driver release (amdgpu/30.30.2): the ROCm point release's installer names a driver
  repository that is not published (yet); the maintainer's answer in ROCm/legacy-rocm-build#6156 was that ROCm 7.2.2
  deliberately used the previous driver repository (30.30.1), which is why the install quick-start page edits
  amdgpu.list with sed (checked v18b: harkgill-amd's comment there, "hence the `sed` commands in
  .../install/quick-start.html#register-repositories"). The previous release is read as the same line with its last
  number one lower (30.30.2 -> 30.30.1); a .0 release has no previous one to name, and the fix then says the
  quick-start page's list.

Both are the driver family (the GPU driver's packages cannot be installed); the 404 settles the cause, so the
diagnosis leads (a WSL install meets the same stale repository before any WSL question)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule

# apt's refusal of a repo.radeon.com path: "Err:9 https://repo.radeon.com/amdgpu/7.2/ubuntu noble Release 404", "The
# repository '...' does not have a Release file", or a report that the URL "returns 404"
_RADEON_REPO = re.compile(r"(?i)repo\.radeon\.com/amdgpu/(\d+(?:\.\d+){1,2})/(?:ubuntu|rhel|sle|el)\b")
_REFUSED = re.compile(r"(?i)\b404\b|Not Found|does not have a Release file|Release file .{0,40}(?:missing|not found)|"
                      r"\binaccessible\b|远程服务器返回.{0,10}404")
# the amdgpu driver's own version line (30.10, 30.20, 30.30.x), unlike a ROCm release (5.x - 7.x)
# the Ubuntu LTS codenames repo.radeon.com serves (its amdgpu/ and rocm/apt/ trees: bionic, focal, jammy, noble)
_SERVED = ("bionic", "focal", "jammy", "noble", "main")
_DRIVER_LINE = re.compile(r"^(?:[2-9]\d)\.\d+(?:\.\d+)?$")


@rule("driver")
def amdgpu_repository_missing(ctx: Context) -> Optional[Diagnosis]:
    """apt finds no Release file at a repo.radeon.com amdgpu path: a stale ROCm-named repo, or an unpublished driver
    repo."""
    refused = [e for e in _lines_matching(ctx, _RADEON_REPO) if _REFUSED.search(e.line)]
    if not refused:
        # the 404 on its own line right after apt's "Err:N <url> Release" line
        lines = ctx.sheet.lines
        urls = _lines_matching(ctx, _RADEON_REPO)
        refused = [e for e in urls if any(_REFUSED.search(lines[n]) for n in range(e.line_no, min(e.line_no + 2,
                                                                                                   len(lines))))]
    if not refused:
        return None
    # a codename AMD never served (an interim Ubuntu: oracular, plucky) is a distribution the release does not
    # support, another reading
    codename = re.search(r"(?i)/ubuntu/?\s+([a-z]+)\s+(?:InRelease|Release|main)\b", refused[0].line)
    if codename and codename.group(1).lower() not in _SERVED:
        return None
    version = _RADEON_REPO.search(refused[0].line).group(1)
    if _DRIVER_LINE.match(version):
        parts = version.split(".")
        previous = ".".join(parts[:-1] + [str(int(parts[-1]) - 1)]) if len(parts) == 3 and int(parts[-1]) > 0 else None
        point_at = (f"the previous driver release's repository, {previous} (as the ROCm install quick-start page "
                    f"does with its sed commands on /etc/apt/sources.list.d/amdgpu.list: replace {version} by "
                    f"{previous}), then sudo apt update" if previous else
                    "the driver repository the ROCm install quick-start page names for this release (its sed commands "
                    "edit /etc/apt/sources.list.d/amdgpu.list), then sudo apt update")
        return _first(_make("driver", f"AMD's amdgpu {version} repository is not published",
                            f"amdgpu.list names the driver repository amdgpu/{version}, which repo.radeon.com does not "
                            "serve (yet): the ROCm point release's installer points at a driver release that is not "
                            "out, so apt stops before anything is installed",
                            f"point amdgpu.list at {point_at}; or wait until the {version} repository is published and "
                            "keep the default list", [], refused))
    if int(version.split(".")[0]) < 7:
        # before ROCm 7 the amdgpu repositories were named after the ROCm release (amdgpu/6.3/ubuntu), so such a
        # path is not stale; its .0 folder written out (6.3.0) is install/rocm_apt_sources.py's reading
        return None
    return _first(_make("driver", f"a stale amdgpu {version} repository is left in apt's sources",
                        f"apt still reads an amdgpu repository named after ROCm {version}, which repo.radeon.com does "
                        "not serve: an earlier amdgpu-install left its repository entries in /etc/apt/sources.list.d, "
                        "mixed with the new installer's (the driver now has its own version line)",
                        "remove the installer and every repository it wrote, then install it again: sudo amdgpu-install "
                        "--uninstall --rocmrelease=all; sudo apt purge amdgpu-install; sudo apt autoremove; check that "
                        "no amdgpu/rocm entries are left in /etc/apt/sources.list.d (ls /etc/apt/sources.list.d); then "
                        "sudo apt install ./amdgpu-install_<release>_all.deb, sudo apt update and rerun amdgpu-install",
                        [], refused))
