"""The adapter archive: one `.tar.gz` that carries a run to another machine, checked before anything is loaded.

It holds the adapter (or a full fine-tune's weights), the tokenizer, run_config.yaml, the results files, a model
card and `MANIFEST.sha256` (the SHA-256 of every other member, in `sha256sum` format, so
`sha256sum -c MANIFEST.sha256` also checks an unpacked copy by hand).

An archive is untrusted input. Opening one reads every header first and writes nothing until they all pass:
1. every member must be a regular file with a plain name (no folder, no absolute path, no `..`, no symlink or
   hardlink, no device, fifo or sparse file): anything else is refused (`tarfile`'s `data` filter is applied too
   where Python has it);
2. the members must be exactly the files the manifest lists;
3. their sizes, from the headers, must add up to no more than the cap (MAX_EXPANSION times the archive's own size,
   at least MIN_UNPACKED_CAP: a few KB of gzip cannot unpack to gigabytes) and fit in the free space; the header
   pass stops at the member that crosses the cap, so a bomb is not even decompressed past it;
4. then each member is written, hashed as it streams, and the unpacking stops at the first one that does not match
   its SHA-256 in the manifest;
5. only then is the folder moved into place (`<cache>/archives/<archive sha256>/`) and handed to a loader.
A truncated, altered or oversized archive is a one-line error naming the archive and the member.
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

from steadytune.errors import UserError, describe_os_error, size_text
from steadytune.model.load import default_cache_dir

MANIFEST = "MANIFEST.sha256"
CHUNK = 1 << 20
# What an archive may unpack to: MAX_EXPANSION times its own size, and never less than MIN_UNPACKED_CAP. Trained
# weights barely compress (gzip keeps ~90% of a safetensors file), tokenizer files shrink ~4x: 20x is far above
# any archive steadytune writes and far below a bomb (3 MB -> 3 GiB is 1000x).
MAX_EXPANSION = 20
MIN_UNPACKED_CAP = 256 << 20
MANIFEST_CAP = 1 << 20  # a manifest lists a few dozen files

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
    refuse_links_out(folder, [f.name for f in files])
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
            # Plain members only: no owner names, no folders, no links (a link inside the folder is packed as the
            # file it names, so no link target ever goes into an archive).
            member = tarfile.TarInfo(f.name)
            stat = f.stat()
            member.size, member.mtime, member.mode = stat.st_size, int(stat.st_mtime), 0o644
            with f.open("rb") as handle:
                tar.addfile(member, handle)
    os.replace(partial, target)
    return target


def refuse_links_out(folder: Path, names: Iterable[str], written: Iterable[str] = ()) -> None:
    """Entries of `folder` that are symbolic links leading out of it are refused, naming the link: their content is
    not the run's, and a file written there (`written`) would land elsewhere."""
    root = Path(folder).resolve()
    for name in [*names, *written]:
        path = Path(folder) / name
        if not path.is_symlink():
            continue
        target = path.resolve()
        if name not in written and root in target.parents:
            continue
        where = "outside" if root not in target.parents else "inside"
        raise UserError(f"{path} is a symbolic link to {os.readlink(path)} ({where} {folder}); an archive carries the "
                        "run folder's own files, and steadytune does not write through links: put a copy of the file "
                        "in place of the link, or remove it")


def parse_manifest(text: str, archive: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = re.fullmatch(r"([0-9a-f]{64}) [ *]?(.+)", line.strip())
        if not match or not _SAFE_NAME.fullmatch(match.group(2)) or match.group(2) in entries:
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
    elif member.issparse():
        why = f"is a sparse file ({size_text(member.size)} of mostly holes; steadytune never writes one)"
    elif not member.isfile():
        why = "is not a regular file"
    elif not _SAFE_NAME.fullmatch(name):
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


def open_archive(archive: str | os.PathLike, cache: Path | None = None, max_unpacked: int | None = None) -> Path:
    """Verify `archive` and return the folder it unpacks to (unpacked once per archive content). `max_unpacked`:
    the most bytes it may unpack to (default: unpack_cap)."""
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
        _unpack(archive, work, unpack_cap(archive) if max_unpacked is None else max_unpacked)
        try:
            work.rename(target)
        except OSError:
            if not (target / MANIFEST).is_file():  # not another process that unpacked the same archive first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def unpack_cap(archive: Path) -> int:
    return max(MIN_UNPACKED_CAP, archive.stat().st_size * MAX_EXPANSION)


def _unpack(archive: Path, work: Path, cap: int) -> None:
    """Check every header (_plan), then write each member ourselves, to a path we build from its checked name
    (nothing can land elsewhere), hashing it as it streams; the manifest is written last."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members, manifest, manifest_bytes = _plan(tar, archive, work, cap)
            for member in members:
                _write_member(tar, member, work, manifest[member.name], archive)
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise UserError(_corrupt(archive, e)) from None
    except OSError as e:
        if e.filename is None and e.errno is None:  # gzip's own errors ("Not a gzipped file") carry neither
            raise UserError(_corrupt(archive, e)) from None
        raise UserError(describe_os_error(e, f"unpacking {archive} into {work.parent}")) from None
    try:
        (work / MANIFEST).write_bytes(manifest_bytes)
    except OSError as e:
        raise UserError(describe_os_error(e, f"unpacking {archive} into {work.parent}")) from None


def _corrupt(archive: Path, e: Exception) -> str:
    first = str(e).splitlines()[0].rstrip(":") if str(e) else ""  # tarfile lists every method it tried
    return f"{archive}: the archive is corrupt or truncated ({type(e).__name__}: {first})"


def _plan(tar: tarfile.TarFile, archive: Path, work: Path, cap: int) -> tuple[list[tarfile.TarInfo], dict, bytes]:
    """One pass over the headers, before anything is written: every member safe, listed once in the manifest, and
    all of them within `cap` bytes and the free space. Stops at the member that crosses the cap."""
    members: list[tarfile.TarInfo] = []
    seen: set[str] = set()
    manifest_bytes = None
    total = 0
    for member in tar:
        _refuse_unsafe(member, archive, work)
        if member.name in seen:
            raise UserError(f"{archive}: member {member.name!r} appears twice; refusing to unpack this archive")
        seen.add(member.name)
        if member.name == MANIFEST:
            if member.size > MANIFEST_CAP:
                raise UserError(f"{archive}: {MANIFEST} is {size_text(member.size)}, not a steadytune manifest; refusing "
                                "to unpack this archive")
            manifest_bytes = tar.extractfile(member).read()
            continue
        total += member.size
        if total > cap:
            raise UserError(f"{archive}: member {member.name!r} ({size_text(member.size)}) would unpack the archive to "
                            f"{size_text(total)} or more, more than the {size_text(cap)} an archive of "
                            f"{size_text(archive.stat().st_size)} may unpack to; refusing to unpack it (nothing written)")
        members.append(member)
    if manifest_bytes is None:
        raise UserError(f"{archive}: no {MANIFEST} inside: not a steadytune archive, or cut off")
    try:
        text = manifest_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{archive}: {MANIFEST} is not UTF-8 text: not a steadytune archive") from None
    manifest = parse_manifest(text, archive)
    present = {m.name for m in members}
    extra, missing = sorted(present - set(manifest)), sorted(set(manifest) - present)
    if extra:
        raise UserError(f"{archive}: {extra[0]} is not in the manifest: the archive was altered")
    if missing:
        raise UserError(f"{archive}: {missing[0]} is listed in the manifest but missing: the archive is incomplete")
    free = shutil.disk_usage(work).free
    if total > free:
        raise UserError(f"{archive}: unpacks to {size_text(total)}, but {work.parent} has {size_text(free)} free; free "
                        f"{size_text(total - free)} or more there (or set STEADYTUNE_CACHE to a larger disk)")
    return members, manifest, manifest_bytes


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, work: Path, expected: str, archive: Path) -> None:
    source = tar.extractfile(member)
    digest = hashlib.sha256()
    with source, (work / member.name).open("wb") as out:
        for block in iter(lambda: source.read(CHUNK), b""):
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != expected:
        raise UserError(f"{archive}: {member.name} does not match its SHA-256 in the manifest: the archive is corrupt "
                        "or was altered")


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
