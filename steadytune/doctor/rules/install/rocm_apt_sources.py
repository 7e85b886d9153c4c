"""apt and AMD's ROCm repository: what apt's own words say about the sources and the packages installed.

1. A source that points at a folder repo.radeon.com does not have: apt's "Err:N https://repo.radeon.com/rocm/apt/6.4.0
   jammy Release  404  Not Found". AMD publishes each release's apt folder under its short number for a .0 release
   (rocm/apt/6.4, not 6.4.0) and a folder for each distribution codename it supports; a rocm.list (or amdgpu.list)
   written by hand, by an old guide or by a mismatched installer names another one. Source: ROCm/legacy-rocm-build#4691
   (rocm/apt/6.4.0 404; the reporter's fix: `deb https://repo.radeon.com/rocm/apt/6.4 jammy main` in
   /etc/apt/sources.list.d/rocm.list; AMD's clean-up: `amdgpu-install --uninstall --rocmrelease=all`, purge
   amdgpu-install, autoremove, reinstall).
2. AMD's rocm meta-package refusing to install because an older ROCm piece is installed: apt's resolver saying "Broken
   rocm:amd64 Depends on rocminfo:amd64 < 5.7.1-3build1 @ii ... > (= 1.0.0.70001-42~24.04)" (apt's short summary of
   the same, "Depends: X (= V) but W is to be installed", is releases.py's reading). AMD's packages pin each other exactly; the distribution's own ROCm packages (Ubuntu 24.04
   ships rocminfo 5.7.1 in universe) or an earlier amdgpu-install's amdgpu-dkms hold other versions. Source:
   ROCm/rocm-install-on-linux#583 (rocm 7.0.1 against the distribution's rocminfo 5.7.1-3build1; removing amdgpu-dkms,
   `sudo apt autoremove` and installing rocm again fixed it)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# apt's failure on a repository's Release file (or InRelease) under repo.radeon.com, with the folder and codename
_RELEASE_404 = re.compile(r"(?i)(https?://repo\.radeon\.com/(rocm/apt|amdgpu)/([\w.]+)(?:/ubuntu)?)\s+(\w+)\s+(?:In)?Release\b")
_NOT_FOUND = re.compile(r"(?i)\b404\b|does not have a Release file|not found")


@rule("rocm-libs-missing")
def radeon_repo_folder_missing(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: apt's failing Release line for a repo.radeon.com folder with a 404 (or "does not have a Release
    file") beside it."""
    hits = _lines_matching(ctx, _RELEASE_404)
    lines = ctx.sheet.lines
    # the 404 on the line itself, or (apt's layout) on one of the two lines under its "Err:N" line
    failing = [e for e in hits if _NOT_FOUND.search(e.line) or
               ("Err:" in e.line and any(re.search(r"\b404\b", line) for line in lines[e.line_no:e.line_no + 2]))]
    if not failing:
        return None
    m = _RELEASE_404.search(failing[0].line)
    url, kind, folder, codename = m.group(1), m.group(2), m.group(3), m.group(4)
    listing = "rocm.list" if kind == "rocm/apt" else "amdgpu.list"
    short = re.fullmatch(r"(\d+\.\d+)\.0", folder)
    if short:
        line = url.replace(f"/{folder}", f"/{short.group(1)}")
        where = (f"the folder of a .0 release is its short number: edit /etc/apt/sources.list.d/{listing} to read "
                 f"deb {line} {codename} main (keep its [arch=... signed-by=...] part)")
        cause = (f"apt asks repo.radeon.com for {kind}/{folder}, a folder AMD does not publish: a .0 release's folder "
                 f"is its short number ({kind}/{short.group(1)})")
    else:
        where = (f"open https://repo.radeon.com/{kind}/ and pick the folder of your release that has {codename} under "
                 f"its dists/ (a release without {codename} does not support this distribution: take a release that "
                 f"does, or the codename of the Ubuntu it is based on), then edit /etc/apt/sources.list.d/{listing} to "
                 f"that deb line")
        cause = (f"apt asks repo.radeon.com for {kind}/{folder} {codename}, and the server has no Release file there: "
                 "that release folder, or that codename under it, is not published")
    return _make("rocm-libs-missing", f"the ROCm apt source points at {kind}/{folder}, which does not exist",
                 cause + "; the list file was written by hand, by an old guide or by another amdgpu-install",
                 # a stale installer's repository 404ing is access/amdgpu_repos.py's reading (its clean-up is the fix
                 # there); here the folder itself is wrong, and the edit is the whole fix
                 f"{where}; then sudo apt update && sudo apt install rocm",
                 [], failing[:1])


# apt's resolver (Debug or the "unmet dependencies" summary): an AMD package pinned to an exact version of another that
# is installed at another version
_RESOLVER = re.compile(r"(?i)Broken\s+(rocm[\w-]*|hip[\w-]*|amdgpu[\w-]*)(?::\w+)?\s+Depends on\s+([\w.+-]+?)(?::\w+)?\s+<\s*"
                       r"([^\s|>]+)\s+@ii\b")
# (apt's short summary, "rocm-hip-runtime : Depends: rocminfo (= V) but W is to be installed", is releases.py's reading)
# a version string of a distribution's own package (Debian/Ubuntu rebuilds), not AMD's (x.y.z.NNNNN-NN~NN.NN)
_DISTRO_VERSION = re.compile(r"(?:build|ubuntu|debian|deb\d+u)\d*|^\d+\.\d+\.\d+-\d+$")


@rule("rocm-libs-missing")
def older_rocm_packages_in_the_way(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: apt's resolver naming a ROCm package whose exact-version dependency is installed at another
    version."""
    found = []
    for e in _lines_matching(ctx, _RESOLVER):
        m = _RESOLVER.search(e.line)
        found.append((e, m.group(2), m.group(3)))
    if not found:
        return None
    error, package, installed = found[0]
    held = sorted({p for _e, p, _v in found})
    distro = _DISTRO_VERSION.search(installed) is not None
    whose = (f"{package} {installed} is the distribution's own package (Ubuntu and Debian ship older ROCm pieces)"
             if distro else f"{package} {installed} is left from an earlier ROCm install")
    return _make("rocm-libs-missing", "older ROCm packages are in the way of AMD's rocm packages",
                 f"AMD's rocm packages depend on exact versions of each other; {whose}, so apt cannot install the new "
                 "set beside it; an amdgpu-dkms from an earlier amdgpu-install is often left too",
                 f"remove what the older install left: sudo apt remove {' '.join(held)} amdgpu-dkms (amdgpu-dkms only if "
                 "dpkg -l amdgpu-dkms lists it: an earlier amdgpu-install's kernel driver), then sudo apt autoremove, "
                 "sudo apt update and sudo apt install rocm again; if that still fails: sudo amdgpu-install --uninstall "
                 "--rocmrelease=all, then install the amdgpu-install package of the release anew",
                 [], [error])
