"""Every file the studio writes lies inside the folder it belongs to, and no write follows a symbolic link.

A run folder may come from anyone, and its studio/ folder with it: `studio/jobs -> ~/.ssh`, `studio/exports/x-merged
-> ~/models/mine`, `studio/jobs/ID.log -> ~/.bashrc`. The studio's writes go through here: each folder on the way
(from the run folder, or RUNS_DIR for the studio's own .studio/) must be a real folder, made when missing; files are
opened with O_NOFOLLOW (a link in place of one is an error, never written through); a target a job will write
(an export, predictions) must not exist as a link. What fails is one line naming the link.
"""

from __future__ import annotations

import os
from pathlib import Path

from steadytune.errors import UserError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class LinkRefused(UserError):
    """A folder or file on the way is a symbolic link (or not what it should be)."""


def real_folder(root: Path, *parts: str) -> Path:
    """root/parts...: every part a real folder inside root (made when missing), none a symbolic link. `root` is the
    user's (RUNS_DIR, which may well be a link to another disk) or a run folder the studio lists (never a link), made
    when missing."""
    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    for part in parts:
        folder = folder / part
        try:
            folder.mkdir()
        except FileExistsError:
            pass
        if folder.is_symlink():
            raise LinkRefused(f"{folder} is a symbolic link (to {os.readlink(folder)}); the studio does not write "
                              "through links: remove it")
        if not folder.is_dir():
            raise LinkRefused(f"{folder} is not a folder; the studio keeps its files there: move it away")
    return folder


def refuse_link(path: Path) -> Path:
    """`path`, which a job is about to write: refused when it exists as a symbolic link."""
    if Path(path).is_symlink():
        raise LinkRefused(f"{path} is a symbolic link (to {os.readlink(path)}); the studio does not write through "
                          "links: remove it")
    return Path(path)


def open_new(path: Path, append: bool = False):
    """A binary file object for writing `path`, never through a link: a new file (O_EXCL), or appended to."""
    flags = os.O_WRONLY | os.O_CREAT | NOFOLLOW | (os.O_APPEND if append else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if Path(path).is_symlink():
            raise LinkRefused(f"{path} is a symbolic link; the studio does not write through links") from None
        raise
    return os.fdopen(fd, "ab" if append else "wb")


def write_new(path: Path, data: bytes) -> None:
    with open_new(path) as f:
        f.write(data)


def replace_file(path: Path, data: bytes) -> None:
    """Write `path` whole, atomically: a temporary file beside it (never a link), then renamed over it (a rename
    replaces a link itself, not what it points to)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if tmp.is_symlink():
        tmp.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW
    with os.fdopen(os.open(tmp, flags, 0o644), "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_bytes_nofollow(path: Path, offset_from_end: int | None = None) -> bytes:
    """A file's bytes (the last `offset_from_end` only, when given), not through a link; b"" when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        if offset_from_end is not None:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - offset_from_end))
        return f.read()
