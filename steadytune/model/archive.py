"""The adapter archive: one `.tar.gz` that carries a run to another machine, checked before anything is loaded.

It holds the adapter (or a full fine-tune's weights), the tokenizer, run_config.yaml, the results files, a model
card and `MANIFEST.sha256` (the SHA-256 of every other member, in `sha256sum` format, so
`sha256sum -c MANIFEST.sha256` also checks an unpacked copy by hand).

An archive is untrusted input. Opening one:
1. every member must be a regular file with a plain name (no folder, no absolute path, no `..`, no symlink or
   hardlink, no device or fifo): anything else is refused before a byte is written (`tarfile`'s `data` filter is
   applied too where Python has it);
2. the members must be exactly the files the manifest lists, each with its SHA-256;
3. only then is the folder moved into place (`<cache>/archives/<archive sha256>/`) and handed to a loader.
A truncated or altered archive is a one-line error naming the archive and the member.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Iterable

from steadytune.errors import UserError
from steadytune.model.load import default_cache_dir

MANIFEST = "MANIFEST.sha256"
CHUNK = 1 << 20

# What a run folder contributes to its archive: weights, configs, tokenizer, records. Checkpoints, plots and
# pickle files stay out (an archive never carries a file that runs code when loaded).
INCLUDE = (
    "adapter_model*.safetensors", "adapter_config.json", "model*.safetensors", "model.safetensors.index.json",
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja", "run_config.yaml",
    "eval_results.json", "train_results.json", "demo_results.json", "environment.json", "base_model.json",
    "README.md",
)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_members(folder: Path) -> list[Path]:
    """The files of `folder` that go into its archive, in a stable order."""
    found = {p for pattern in INCLUDE for p in folder.glob(pattern) if p.is_file()}
    return sorted(found, key=lambda p: p.name)


def write_archive(folder: Path, target: Path, files: Iterable[Path] | None = None, overwrite: bool = False) -> Path:
    """Pack `files` (default: `archive_members(folder)`) and their manifest into `target` (.tar.gz), atomically."""
    files = list(files) if files is not None else archive_members(folder)
    if not any(f.name == "adapter_config.json" or f.name == "config.json" for f in files):
        raise UserError(f"{folder}: no adapter (adapter_config.json) or model (config.json) to archive")
    if target.exists() and not overwrite:
        raise UserError(f"{target} exists; remove it or pass --force to replace it")
    manifest = "".join(f"{sha256_file(f)}  {f.name}\n" for f in files).encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode = len(manifest), 0o644
        tar.addfile(info, io.BytesIO(manifest))
        for f in files:
            # Plain members only: no owner names, no folders, no links.
            member = tar.gettarinfo(str(f), arcname=f.name)
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            member.mode = 0o644
            with f.open("rb") as handle:
                tar.addfile(member, handle)
    os.replace(partial, target)
    return target


def parse_manifest(text: str, archive: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = re.fullmatch(r"([0-9a-f]{64}) [ *]?(.+)", line.strip())
        if not match or not _SAFE_NAME.match(match.group(2)) or match.group(2) in entries:
            raise UserError(f"{archive}: {MANIFEST} line {number} is malformed ({line[:80]!r}): the archive is damaged "
                            "or was not written by steadytune")
        entries[match.group(2)] = match.group(1)
    return entries


def _refuse_unsafe(member: tarfile.TarInfo, archive: Path, destination: Path) -> None:
    """Every way a member could write outside the folder, or be something other than a file, is refused."""
    name = member.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        why = "has an absolute path"
    elif ".." in Path(name).parts or ".." in name.split("\\"):
        why = "climbs out of the folder (..)"
    elif member.issym() or member.islnk():
        why = f"is a {'symbolic' if member.issym() else 'hard'} link (to {member.linkname!r})"
    elif member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        why = "is a device or fifo"
    elif not member.isfile():
        why = "is not a regular file"
    elif not _SAFE_NAME.match(name):
        why = "is not a plain file name (archives hold no folders)"
    else:
        why = ""
    if not why and hasattr(tarfile, "data_filter"):
        try:
            tarfile.data_filter(member, str(destination))
        except tarfile.FilterError as e:
            why = f"is refused by tarfile's data filter ({e})"
    if why:
        raise UserError(f"{archive}: member {name!r} {why}; refusing to unpack this archive")


ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


def is_archive(path: Path) -> bool:
    return Path(path).name.endswith(ARCHIVE_SUFFIXES)


def archive_stem(path: Path) -> str:
    """demo.tar.gz -> demo: the run's name an archive carries."""
    name = Path(path).name
    return next(name[:-len(s)] for s in ARCHIVE_SUFFIXES if name.endswith(s))


def unpacked(path: str | os.PathLike) -> Path:
    """`path` itself, or, for an archive file, the folder it is verified and unpacked to: where a run's folder may
    be named, its archive may be named instead."""
    path = Path(path)
    return open_archive(path) if path.is_file() and is_archive(path) else path


def archives_cache() -> Path:
    return default_cache_dir() / "archives"


def open_archive(archive: str | os.PathLike, cache: Path | None = None) -> Path:
    """Verify `archive` and return the folder it unpacks to (unpacked once per archive content)."""
    archive = Path(archive)
    if not archive.is_file():
        raise UserError(f"{archive}: archive not found")
    digest = sha256_file(archive)
    target = (cache or archives_cache()) / digest[:32]
    if (target / MANIFEST).is_file():
        verify_folder(target, archive)  # an unpacked copy is checked again: it is only as good as its files
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        _unpack(archive, work)
        verify_folder(work, archive)
        try:
            work.rename(target)
        except OSError:
            if not (target / MANIFEST).is_file():  # not another process that unpacked the same archive first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _unpack(archive: Path, work: Path) -> None:
    """Write each member ourselves, to a path we build from its checked name: nothing can land elsewhere."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            names = [m.name for m in members]
            for member in members:
                _refuse_unsafe(member, archive, work)
            if len(set(names)) != len(names):
                raise UserError(f"{archive}: a member appears twice; refusing to unpack this archive")
            if MANIFEST not in names:
                raise UserError(f"{archive}: no {MANIFEST} inside: not a steadytune archive, or cut off")
            for member in members:
                source = tar.extractfile(member)
                with source, (work / member.name).open("wb") as out:
                    shutil.copyfileobj(source, out, CHUNK)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        first = str(e).splitlines()[0].rstrip(":") if str(e) else ""  # tarfile lists every method it tried
        raise UserError(f"{archive}: the archive is corrupt or truncated ({type(e).__name__}: {first})") from None


def verify_folder(folder: Path, archive: Path) -> None:
    """The files in `folder` are exactly those of the manifest, byte for byte (SHA-256)."""
    manifest = parse_manifest((folder / MANIFEST).read_text(encoding="utf-8"), archive)
    present = {p.name for p in folder.iterdir()} - {MANIFEST}
    missing, extra = sorted(set(manifest) - present), sorted(present - set(manifest))
    if missing:
        raise UserError(f"{archive}: {missing[0]} is listed in the manifest but missing: the archive is incomplete")
    if extra:
        raise UserError(f"{archive}: {extra[0]} is not in the manifest: the archive was altered")
    for name, expected in manifest.items():
        if sha256_file(folder / name) != expected:
            raise UserError(f"{archive}: {name} does not match its SHA-256 in the manifest: the archive is corrupt "
                            "or was altered")
