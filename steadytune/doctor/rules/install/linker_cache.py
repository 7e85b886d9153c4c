"""A library just installed from source (make install, cmake --install, ninja install) that the program built with
it cannot load: "error while loading shared libraries: libX.so.N: cannot open shared object file" (rocm-libs-missing).
The library is on disk (by default under /usr/local/lib), but the dynamic linker looks names up in its cache,
/etc/ld.so.cache, which only ldconfig rebuilds; package managers run it in their triggers, `make install` does not.
The fix is ldconfig, with the install prefix's lib folder added to /etc/ld.so.conf.d where it is not listed there.

Sources: ldconfig(8) and ld.so(8) (the cache, /etc/ld.so.conf, the trusted directories); NVIDIA/libnvidia-container#2
(the maintainer: run `sudo ldconfig` after `make install`, confirmed)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_CANNOT_LOAD = re.compile(r"error while loading shared libraries: (\S+?\.so[\d.]*): cannot open shared object file")
# installed by the user's own build: make install, cmake --install, ninja install, meson install, ./configure && make
_SOURCE_INSTALL = re.compile(r"(?i)\b(?:sudo\s+)?(?:make|ninja|meson)\s+(?:-C\s+\S+\s+)?install\b|\bcmake\s+--install\b|"
                             r"\bcheckinstall\b")
# a container or a conda / pip environment: the library comes with the image or package, not a local install
_ELSEWHERE = re.compile(r"(?i)\bdocker run\b|\bsite-packages\b|\bconda (?:install|activate)\b")


@rule("rocm-libs-missing")
def linker_cache_not_rebuilt(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the loader's "cannot open shared object file" after a source install said in the paste."""
    text = _text(ctx)
    found = _CANNOT_LOAD.search(text)
    if not found or not _SOURCE_INSTALL.search(text) or _ELSEWHERE.search(text):
        return None
    name = found.group(1)
    prefix = re.search(r"(?i)(?:--prefix[= ]|PREFIX=|CMAKE_INSTALL_PREFIX=)(/\S+)", text)
    lib = f"{prefix.group(1).rstrip('/')}/lib" if prefix else "/usr/local/lib"
    return _first(_make(
        "rocm-libs-missing", f"{name} was installed, but the dynamic linker's cache does not list it yet",
        f"the source install put {name} under {lib}; the dynamic linker finds libraries through its cache "
        "(/etc/ld.so.cache), which only ldconfig rebuilds -- a package manager runs it, make install does not",
        f"rebuild the cache: sudo ldconfig, then run the program again (ldconfig -p | grep {name.split('.so')[0]} "
        f"must list it); if {lib} is not a folder the linker searches, add it first: echo {lib} | sudo tee "
        f"/etc/ld.so.conf.d/local-lib.conf && sudo ldconfig (or, for one shell only, export "
        f"LD_LIBRARY_PATH={lib}:$LD_LIBRARY_PATH)", [], _lines_matching(ctx, _CANNOT_LOAD)[:1]))
