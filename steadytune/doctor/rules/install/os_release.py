"""A binary built for a newer operating system than this one: the loader's "version `GLIBC_2.27' not found" names the C
library release the binary was linked against, and each distribution release ships one glibc, so the paste's OS
release says whether the OS is too old for the package (the package's supported-OS list, not a missing library)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# the glibc each release ships (packages.ubuntu.com, packages.debian.org and the RHEL/CentOS package lists: libc6 /
# glibc), oldest first
_GLIBC_OF = (("Ubuntu 14.04", "2.19"), ("Ubuntu 16.04", "2.23"), ("Ubuntu 18.04", "2.27"), ("Ubuntu 20.04", "2.31"),
             ("Ubuntu 22.04", "2.35"), ("Ubuntu 24.04", "2.39"),
             ("Debian 9", "2.24"), ("Debian 10", "2.28"), ("Debian 11", "2.31"), ("Debian 12", "2.36"),
             ("CentOS 7", "2.17"), ("RHEL 7", "2.17"), ("CentOS 8", "2.28"), ("RHEL 8", "2.28"), ("RHEL 9", "2.34"))

# the binary in parentheses, "(required by X)" or a bare "( X)" where a paste's path was edited
_GLIBC_WANTED = re.compile(r"version [`'‘]?GLIBC_(2\.\d+)[`'’]? not found(?: \(\s*(?:required by\s+)?([^)\s]{1,200})\))?")

# packages whose newest prebuilt wheels need a newer glibc than their older ones: the last release whose wheels still
# load on that glibc, (module prefix, distribution, glibc, release, source). flash-attn's 2.8 wheels are built on a
# newer Ubuntu and ask for GLIBC_2.32 on Ubuntu 20.04 (Dao-AILab/flash-attention issue 1708, 2.8.0.post2); 2.7.4.post1's
# load on Ubuntu 20.04's glibc 2.31 (Eyeline-Labs/FlashDepth issue 12: "Downgrade flash-attn ... 2.7.4.post1";
# nvidia-cosmos/cosmos-transfer2.5 issue 42, the maintainer's answer)
_LAST_FOR_GLIBC = (("flash_attn", "flash-attn", "2.31", "2.7.4.post1",
                    "Dao-AILab/flash-attention issue 1708; Eyeline-Labs/FlashDepth issue 12"),)


def _older_release(binary: Optional[str], line: str, has: str) -> Optional[tuple[str, str]]:
    """(distribution, release) of the package that owns the binary, where its last release built for this glibc is
    known and this OS's glibc `has` is new enough for it."""
    where = re.search(r"site-packages[/\\]+([A-Za-z_]\w*)", binary or line)
    module = where.group(1) if where else (binary or "").rsplit("/", 1)[-1]
    for prefix, dist, glibc, release, _source in _LAST_FOR_GLIBC:
        if module.startswith(prefix) and _version(has) >= _version(glibc):
            return dist, release
    return None


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))
# the OS release said: "Ubuntu 16.04.7 LTS", "DISTRIB_RELEASE=16.04", "CentOS Linux release 7.9", "Debian 10", "RHEL 8"
_OS_SAID = re.compile(r"(?i)\b(Ubuntu|Debian|CentOS|RHEL|Red Hat Enterprise Linux)(?: GNU/Linux| Linux)?(?: Server)?(?: release)?"
                      r"\s+(\d{1,2})(?:\.(\d{2}))?|DISTRIB_RELEASE=(\d{2})\.(\d{2})")


def _release_said(text: str) -> Optional[tuple[str, str]]:
    """The OS release the paste names ("Ubuntu 16.04") and its glibc, where the table knows it."""
    for m in _OS_SAID.finditer(text):
        if m.group(4):
            name = f"Ubuntu {m.group(4)}.{m.group(5)}"
        else:
            distro = {"red hat enterprise linux": "RHEL"}.get(m.group(1).lower(), m.group(1))
            distro = {"ubuntu": "Ubuntu", "debian": "Debian", "centos": "CentOS", "rhel": "RHEL"}.get(distro.lower(),
                                                                                                       distro)
            name = f"{distro} {m.group(2)}" + (f".{m.group(3)}" if distro == "Ubuntu" and m.group(3) else "")
        glibc = dict(_GLIBC_OF).get(name)
        if glibc:
            return name, glibc
    return None


def _first_with(glibc: str, family: str) -> Optional[str]:
    """The oldest release of the same distribution that ships glibc `glibc` or newer."""
    wanted = tuple(int(x) for x in glibc.split("."))
    return next((name for name, have in _GLIBC_OF if name.split()[0] == family
                 and tuple(int(x) for x in have.split(".")) >= wanted), None)


@rule("wheel-platform")
def built_for_a_newer_os(ctx: Context) -> Optional[Diagnosis]:
    """A program or library linked against a newer glibc than the OS release ships: it was built for a newer release
    of the OS, and no library on this one can satisfy it (glibc is the OS itself)."""
    lines = _lines_matching(ctx, _GLIBC_WANTED.pattern) if "GLIBC_" in _text(ctx) else []
    if not lines:
        return None
    m = _GLIBC_WANTED.search(lines[0].line)
    wanted, binary = m.group(1), m.group(2)
    here = _release_said(_text(ctx))
    if here is None or tuple(int(x) for x in here[1].split(".")) >= tuple(int(x) for x in wanted.split(".")):
        return None   # no OS release said (or one that has it): a library path question, not the OS's age
    name, has = here
    newer = _first_with(wanted, name.split()[0])
    what = binary.rsplit("/", 1)[-1] if binary else "the program"
    older = _older_release(binary, lines[0].line, has)
    stay = (f"install {older[0]} {older[1]}, its last release whose prebuilt wheels load on glibc {has} (pip install "
            f"{older[0]}=={older[1]} --no-build-isolation, or the wheel for this torch, CUDA and Python from that "
            f"release's GitHub page), or build {older[0]} from source on this machine"
            if older else f"stay on the package's last release built for {name} (the older one)")
    return _make("wheel-platform", f"{what} is built for a newer OS than {name}",
                 f"{what} was linked against glibc {wanted}" + (f" ({newer}'s)" if newer else "")
                 + f", and {name} ships glibc {has}: the package is built for a newer OS release, and {name} is not "
                 "one it supports",
                 f"move to an OS release with glibc {wanted} or newer that the package supports "
                 f"({newer + ' or newer' if newer else 'its install guide lists them'}), or {stay}; a container of "
                 "the newer OS release also works", [ctx.line_fact(lines[0])],
                 lines[:1])
