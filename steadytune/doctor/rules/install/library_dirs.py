"""A shared library that is installed, only in a folder the dynamic loader does not search: the paste names the file,
says it is not found, and says where it went ("installs libhsa-runtime64.so to /usr/lib/hsa, but that is not in the
LD_LIBRARY_PATH"). Reinstalling changes nothing; the file has to be where the loader looks -- the distribution's
library folder (what a package should do), or that folder added to the loader's configuration.

The distribution's library folder: /usr/lib64 on Gentoo, Fedora / RHEL and openSUSE (their multilib layouts),
/usr/lib/x86_64-linux-gnu on Debian and Ubuntu (the multiarch triplet); ld.so reads extra folders from
/etc/ld.so.conf.d/*.conf after `ldconfig` (ld.so(8), ldconfig(8)).

Source: justxi/rocm#13 (Gentoo overlay: rocr-runtime 2.0.0 installed libhsa-runtime64.so to /usr/lib/hsa and rocminfo
failed; the maintainer changed the ebuild to install it to /usr/lib64)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_LIB = r"(lib[\w+.-]*?\.so(?:\.\d+)*)"
# "installs libX.so to /usr/lib/hsa", "libX.so is in /opt/foo/lib", "libX.so ended up under /usr/local/lib64"
_PUT = re.compile(_LIB + r"\b[^\n]{0,40}?\b(?:to|in|into|under|at)\s+(/[\w/.+-]+?)[,.;:]?(?:\s|$)")
_NOT_SEARCHED = re.compile(r"(?i)(?:not|isn't|is not|aren't)\s+(?:in|on|part of)\s+(?:the\s+|my\s+)?(?:LD_LIBRARY_PATH|"
                           r"library (?:search )?path|loader'?s? (?:search )?path|ld\.so\.conf|linker path)|"
                           r"(?:loader|ld\.so|ldconfig) (?:does not|doesn't) (?:search|look in|find)")
_NOT_FOUND = re.compile(r"(?i)" + _LIB + r"[^\n]{0,60}(?:not found|cannot open shared object|no such file)|"
                        r"(?:not find|cannot find|can't find|couldn't find)\s+" + _LIB)
_LIB64 = re.compile(r"(?i)\bgentoo\b|\bebuild\b|\bemerge\b|\b(?:dev|sys|sci)-\w+/[\w-]+-\d|\bfedora\b|\brhel\b|"
                    r"\bcentos\b|\brocky\b|\balma\w*\b|\bopensuse\b|\bsuse\b|/usr/lib64\b")
_MULTIARCH = re.compile(r"(?i)\bubuntu\b|\bdebian\b|\bmint\b|\bpop!?_os\b|x86_64-linux-gnu")


@rule("rocm-libs-missing")
def library_outside_the_loader_path(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a library said not found, the same library said to be installed in a named folder, and the paste
    saying the loader does not search that folder."""
    text = _text(ctx)
    if not _NOT_SEARCHED.search(text):
        return None
    missing = {m.group(1) or m.group(2) for m in _NOT_FOUND.finditer(text)}
    put = next((m for m in _PUT.finditer(text) if m.group(1) in missing
                or any(m.group(1).split(".so")[0] == n.split(".so")[0] for n in missing)), None)
    if put is None:
        return None
    name, folder = put.group(1), put.group(2).rstrip("/")
    if re.fullmatch(r"/usr/lib(?:64)?|/lib(?:64)?|/usr/lib/x86_64-linux-gnu", folder):
        return None
    libdir = ("/usr/lib64" if _LIB64.search(text) else "/usr/lib/x86_64-linux-gnu" if _MULTIARCH.search(text)
              else "/usr/lib64 (Debian / Ubuntu: /usr/lib/x86_64-linux-gnu)")
    lines = _lines_matching(ctx, re.escape(name.split(".so")[0]))
    return _make("rocm-libs-missing", f"{name} is installed in {folder}, where the loader does not look",
                 f"{name} is there, but in {folder}, a folder the dynamic loader does not search (neither its default "
                 "folders nor /etc/ld.so.conf.d name it), so every program that links it fails to load",
                 f"the library belongs in the distribution's library folder, {libdir}: install it there (the package's "
                 f"fix: its ebuild / spec installs into {libdir}, with its .so links), or link it there (sudo ln -s "
                 f"{folder}/{name.split('.so')[0]}.so* {libdir.split(' ')[0]}/); or tell the loader about the folder: "
                 f"echo {folder} | sudo tee /etc/ld.so.conf.d/{folder.strip('/').split('/')[-1]}.conf && sudo ldconfig "
                 f"(for one shell: export LD_LIBRARY_PATH={folder}:$LD_LIBRARY_PATH); ldconfig -p | grep "
                 f"{name.split('.so')[0]} must then list it", [], lines[:2])
