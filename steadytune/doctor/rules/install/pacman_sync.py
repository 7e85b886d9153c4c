"""pacman resolving an install against a stale package database: on Arch and its derivatives the sync databases are
fetched only by -Sy; an install from a database older than the repository (a third-party one such as arch4edu, or
the official ones) names dependencies and conflicts the repository no longer has ("unresolvable package conflicts",
a conflict with a package pacman then says it cannot find, a 404 when fetching a file). Refreshing and upgrading
together (pacman -Syu: partial upgrades are unsupported on Arch) before the install is the fix.

Sources: the Arch wiki, pacman ("Upgrading packages", "Partial upgrades are unsupported"; "error: failed retrieving
file ... 404" under Troubleshooting). Mined from arch4edu/arch4edu#101 (round 18, r18c)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_PACMAN = re.compile(r"(?i)\bpacman\s+-S\w*\b|\byay\s+-S\b|\bparu\s+-S\b")
_CONFLICT = re.compile(r"(?i)unresolvable package conflicts detected|failed to prepare transaction \(conflicting "
                       r"dependencies\)|failed to prepare transaction \(could not satisfy dependencies\)")
# the other half of a stale database: a package it names that pacman cannot find, a file the mirror no longer has
_STALE = re.compile(r"(?i)error: target not found:|failed retrieving file '[^']+' from [^\n]*: The requested URL "
                    r"returned error: 404|error: failed retrieving file")


@rule("wheel-platform")
def pacman_database_out_of_date(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _PACMAN.search(text):
        return None
    conflict, stale = _lines_matching(ctx, _CONFLICT), _lines_matching(ctx, _STALE)
    fetch = [line for line in stale if "retriev" in line.line]
    if not (fetch or (conflict and stale)):
        return None
    package = re.search(r"(?i)\bpacman\s+-S\w*\s+([\w@.+-]+)", text)
    what = package.group(1) if package and not package.group(1).startswith("-") else "<package>"
    lines = fetch or conflict
    return _make("wheel-platform", "pacman's package database is out of date",
                 "pacman resolved the install against sync databases older than the repository: the dependencies, "
                 "conflicts or files it asks for are no longer the repository's (a conflict with a package it then "
                 "cannot find, a file the mirror no longer has)",
                 f"refresh the databases and upgrade together, then install: sudo pacman -Syu, then sudo pacman -S "
                 f"{what} (never pacman -Sy alone followed by an install: partial upgrades are unsupported)",
                 [ctx.line_fact(lines[0])], lines[:1] + stale[:1])
