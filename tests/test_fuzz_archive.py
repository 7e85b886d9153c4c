"""Hypothesis against the adapter-archive reader (issue 25): any bytes named .tar.gz, any gzip stream, and tar
archives of any members (hostile names and kinds, right or wrong manifests, cut short or bit-flipped) either open
to a folder that holds exactly the manifest's files, or are a UserError; never another exception, never a file
outside the cache. Settings and profiles: tests/fuzzing.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st

from steadytune.errors import UserError
from steadytune.model.archive import MANIFEST, open_archive

# CPU seconds of this process, not wall time: a loaded CI machine stretches the wall clock, not the work
SECONDS = 5
NAMES = ["adapter_config.json", "adapter_model.safetensors", "run_config.yaml", "README.md", MANIFEST, "../evil",
         "/etc/evil", "a/b.json", "./x", "", ".", "..", "x\x00y", "C:evil", "\\evil", "-rf", "é.json", "x" * 120,
         "tokenizer.json\n", "run_config.yaml"]
KINDS = [tarfile.REGTYPE] * 6 + [tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE,
                                 tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE]
members = st.lists(st.tuples(st.one_of(st.sampled_from(NAMES), st.text(max_size=12)), st.sampled_from(KINDS),
                             st.binary(max_size=64), st.sampled_from(["", "../target", "/etc/passwd", "README.md"])),
                   max_size=5)
manifests = st.sampled_from(["right", "none", "wrong hash", "extra line", "garbage"])


def tar_bytes(entries, manifest: str, garbage: bytes) -> bytes:
    out = io.BytesIO()
    lines = []
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, data, link in entries:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.CONTTYPE) else 0
            try:
                tar.addfile(info, io.BytesIO(data) if info.size else None)
            except (ValueError, UnicodeError):  # a name tarfile itself cannot write
                continue
            lines.append(f"{hashlib.sha256(data).hexdigest()}  {name}")
        if manifest != "none":
            text = {"right": "\n".join(lines), "wrong hash": "\n".join("0" * 64 + line[64:] for line in lines),
                    "extra line": "\n".join(lines + ["f" * 64 + "  missing.json"]),
                    "garbage": garbage.decode("latin-1")}[manifest]
            body = text.encode("utf-8", "surrogatepass")
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def opens_or_says_why(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "in" / "run.tar.gz"
        archive.parent.mkdir()
        archive.write_bytes(content)
        cache = Path(tmp) / "cache"
        start = time.process_time()
        try:
            folder = open_archive(archive, cache=cache)
        except UserError as e:
            assert "\n" not in str(e).strip(), str(e)
        else:
            listed = {line.split("  ", 1)[1] for line in (folder / MANIFEST).read_text().splitlines() if line.strip()}
            assert {p.name for p in folder.iterdir()} == listed | {MANIFEST}
            for name in listed:
                assert (folder / name).is_file() and not (folder / name).is_symlink()
        assert time.process_time() - start < SECONDS
        # nothing written beside the archive, nor in the cache outside the archive's own folder
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["cache", "in"]
        assert [p.name for p in archive.parent.iterdir()] == ["run.tar.gz"]
        if cache.exists():
            assert all(re.fullmatch(r"[0-9a-f]{32}", p.name) for p in cache.iterdir()), list(cache.iterdir())


@fuzz(100)
@given(st.binary(max_size=2048))
def test_any_bytes_open_or_are_one_line(content):
    opens_or_says_why(content)


@fuzz(100)
@given(st.binary(max_size=2048))
def test_any_gzip_stream_opens_or_is_one_line(content):
    opens_or_says_why(gzip.compress(content))


@fuzz(150)
@given(members, manifests, st.binary(max_size=200), st.one_of(st.none(), st.integers(min_value=0)),
       st.one_of(st.none(), st.integers(min_value=0)))
def test_any_tar_opens_or_is_one_line(entries, manifest, garbage, cut, flip):
    content = tar_bytes(entries, manifest, garbage)
    if cut is not None:
        content = content[:cut % (len(content) + 1)]
    if flip is not None and content:
        at = flip % len(content)
        content = content[:at] + bytes([content[at] ^ (1 << (flip % 8))]) + content[at + 1:]
    opens_or_says_why(content)


def test_a_member_name_ending_in_a_newline_is_refused_on_one_line(tmp_path):
    content = tar_bytes([("tokenizer.json\n", tarfile.REGTYPE, b"{}", "")], "right", b"")
    archive = tmp_path / "run.tar.gz"
    archive.write_bytes(content)
    with pytest.raises(UserError) as err:
        open_archive(archive, cache=tmp_path / "cache")
    assert "\n" not in str(err.value)
