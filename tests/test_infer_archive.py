"""The adapter archive: written with a manifest, used wherever an adapter folder is, and refused when it is
corrupt, altered or hostile (tar-slip, links, devices) before anything is written outside or loaded."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from _infer_runs import hold_lock, learned_classification_run

from steadytune.cli import main
from steadytune.errors import UserError
from steadytune.model import archive
from steadytune.model.archive import MANIFEST, open_archive, write_archive
from steadytune.model.tiny import save_tiny_model
from steadytune.training.run_folder import LOCK


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    model = save_tiny_model(root / "tiny", "qwen2")
    return learned_classification_run(root, model, root / "run")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Unpacked archives go to a cache of this test only."""
    monkeypatch.setenv("STEADYTUNE_CACHE", str(tmp_path / "cache"))


def test_archive_holds_the_run_with_a_manifest_and_a_card(run_dir, tmp_path, capsys):
    target = tmp_path / "run.tar.gz"
    assert main(["export", str(run_dir), "--archive", str(target)]) == 0
    with tarfile.open(target) as tar:
        names = tar.getnames()
        manifest = tar.extractfile(MANIFEST).read().decode()
        card = tar.extractfile("README.md").read().decode()
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "run_config.yaml",
                 "base_model.json", "README.md", MANIFEST):
        assert name in names, name
    assert all(n in manifest for n in names if n != MANIFEST) and len(manifest.splitlines()) == len(names) - 1
    assert "[More Information Needed]" not in card and "## Evaluation" in card
    # the archive name is not overwritten without --force
    assert main(["export", str(run_dir), "--archive", str(target)]) == 1
    assert "--force" in capsys.readouterr().err


def test_archive_works_wherever_the_folder_does(run_dir, tmp_path, capsys):
    target = write_archive(run_dir, tmp_path / "run.tar.gz")
    rows = tmp_path / "new.jsonl"
    rows.write_text('{"text": "太差了"}\n{"text": "很好"}\n', encoding="utf-8")
    assert main(["predict", str(target), "--input", str(rows), "--output", str(tmp_path / "a.jsonl")]) == 0
    assert main(["predict", str(run_dir), "--input", str(rows), "--output", str(tmp_path / "f.jsonl")]) == 0
    assert (tmp_path / "a.jsonl").read_text(encoding="utf-8") == (tmp_path / "f.jsonl").read_text(encoding="utf-8")
    # eval and train take it as adapter_name_or_path
    config = tmp_path / "run.yaml"
    keys = yaml.safe_load((run_dir / "run_config.yaml").read_text("utf-8"))
    keys.pop("decisions")
    keys["adapter_name_or_path"] = str(target)
    config.write_text(json.dumps(keys, ensure_ascii=False), encoding="utf-8")
    assert main(["eval", str(config), "--known-samples", "0", "--output-dir", str(tmp_path / "e")]) == 0
    assert json.loads((tmp_path / "e" / "eval_results.json").read_text(encoding="utf-8"))["score"]["accuracy"] == 1.0
    # a second open reuses the unpacked copy after checking it again
    assert open_archive(target) == open_archive(target)
    # serve and chat name it as the user did: the archive's name, not the cache folder it is unpacked into
    from steadytune.infer.loading import open_run
    from steadytune.serve.loading import load_served
    assert "run" in load_served(str(target), [], []).served
    assert str(target) in open_run(str(target)).describe()


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_or_truncated_archive_is_a_clear_error(run_dir, tmp_path):
    target = write_archive(run_dir, tmp_path / "run.tar.gz")
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    with pytest.raises(UserError, match="corrupt or truncated"):
        open_archive(truncated)
    flipped = tmp_path / "flipped.tar.gz"
    flipped.write_bytes(target.read_bytes())
    _flip_byte(flipped, flipped.stat().st_size // 2)
    with pytest.raises(UserError, match="corrupt"):
        open_archive(flipped)
    assert not list((tmp_path / "cache" / "archives").glob("*/adapter_model.safetensors"))


def _repack(source: Path, target: Path, change) -> Path:
    """A well-formed archive whose members were changed by `change(name, bytes) -> bytes | None`."""
    with tarfile.open(source) as tar, tarfile.open(target, "w:gz") as out:
        for member in tar.getmembers():
            data = change(member.name, tar.extractfile(member).read())
            if data is None:
                continue
            member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    return target


def test_altered_member_missing_member_and_extra_member_are_refused(run_dir, tmp_path):
    target = write_archive(run_dir, tmp_path / "run.tar.gz")

    def tamper(name, data):
        if name == "adapter_model.safetensors":
            data = bytearray(data)
            data[-1] ^= 1  # a weight changed, the header still intact: only the manifest can tell
            return bytes(data)
        return data

    with pytest.raises(UserError, match="adapter_model.safetensors does not match its SHA-256"):
        open_archive(_repack(target, tmp_path / "tampered.tar.gz", tamper))
    with pytest.raises(UserError, match="listed in the manifest but missing"):
        open_archive(_repack(target, tmp_path / "missing.tar.gz",
                             lambda name, data: None if name == "adapter_config.json" else data))
    no_manifest = _repack(target, tmp_path / "nomanifest.tar.gz", lambda name, data: None if name == MANIFEST else data)
    with pytest.raises(UserError, match=f"no {MANIFEST}"):
        open_archive(no_manifest)


def _hostile(tmp_path: Path, name: str, make) -> Path:
    """A real archive of the run plus one hostile member built by `make(tarinfo) -> bytes payload`."""
    path = tmp_path / "hostile.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(MANIFEST)
        body = b""
        info.size = 0
        tar.addfile(info, io.BytesIO(body))
        evil = tarfile.TarInfo(name)
        payload = make(evil)
        evil.size = len(payload)
        tar.addfile(evil, io.BytesIO(payload))
    return path


@pytest.mark.parametrize("name,make,why", [
    ("../escaped.txt", lambda i: b"tar-slip", "climbs out"),
    ("sub/../../escaped.txt", lambda i: b"tar-slip", "climbs out"),
    ("/tmp/steadytune-absolute.txt", lambda i: b"absolute", "absolute path"),
    ("link", lambda i: (setattr(i, "type", tarfile.SYMTYPE), setattr(i, "linkname", "/etc/passwd"), b"")[-1],
     "symbolic link"),
    ("hard", lambda i: (setattr(i, "type", tarfile.LNKTYPE), setattr(i, "linkname", "/etc/passwd"), b"")[-1],
     "hard link"),
    ("device", lambda i: (setattr(i, "type", tarfile.CHRTYPE), setattr(i, "devmajor", 1), b"")[-1],
     "device or fifo"),
    ("fifo", lambda i: (setattr(i, "type", tarfile.FIFOTYPE), b"")[-1], "device or fifo"),
    ("folder/adapter_config.json", lambda i: b"{}", "not a plain file name"),
])
def test_hostile_members_are_refused_before_anything_is_written(tmp_path, name, make, why):
    path = _hostile(tmp_path, name, make)
    with pytest.raises(UserError, match=why):
        open_archive(path)
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path.parent / "escaped.txt").exists()
    assert not Path("/tmp/steadytune-absolute.txt").exists()
    archives = tmp_path / "cache" / "archives"
    assert not archives.exists() or not any(p for p in archives.rglob("*") if p.is_file())
    # the CLI says it in one line
    assert main(["chat", str(path)]) == 1


def test_a_real_run_archive_with_a_tar_slip_member_is_refused(run_dir, tmp_path):
    """The classic attack: a genuine archive with one extra `../` member (and a manifest that even lists it)."""
    target = write_archive(run_dir, tmp_path / "run.tar.gz")
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(target) as tar, tarfile.open(evil, "w:gz") as out:
        for member in tar.getmembers():
            out.addfile(member, tar.extractfile(member))
        info = tarfile.TarInfo("../../slipped.py")
        payload = b"open('/tmp/steadytune-pwned', 'w').write('x')\n"
        info.size = len(payload)
        out.addfile(info, io.BytesIO(payload))
    with pytest.raises(UserError, match="climbs out"):
        open_archive(evil)
    assert not (tmp_path / "slipped.py").exists() and not (tmp_path.parent / "slipped.py").exists()
    assert not Path("/tmp/steadytune-pwned").exists()


def test_archive_of_a_base_model_only_is_refused(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "tiny", "qwen2")
    config = tmp_path / "base.yaml"
    config.write_text(f"model_name_or_path: {model}\n", encoding="utf-8")
    assert main(["export", str(config), "--archive"]) == 1
    assert "no trained adapter" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# Issue 25, case 3: an archive is sized from its headers before anything is written
# ---------------------------------------------------------------------------------------------------------

def _bomb(tmp_path: Path, size: int) -> Path:
    """A well-formed archive (its manifest lists the member, with a hash) of a few KB whose one member unpacks to
    `size` zero bytes."""
    digest = hashlib.sha256()
    zeros = bytes(1 << 20)
    for _ in range(size >> 20):
        digest.update(zeros)
    manifest = f"{digest.hexdigest()}  adapter_model.safetensors\n".encode()
    path = tmp_path / "bomb.tar.gz"
    with gzip.open(path, "wb", compresslevel=1) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        info = tarfile.TarInfo("adapter_model.safetensors")
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def readinto(self, b):
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n

        tar.addfile(info, Zeros())
    return path


def _cache_bytes(tmp_path: Path) -> int:
    archives = tmp_path / "cache" / "archives"
    return sum(p.stat().st_size for p in archives.rglob("*") if p.is_file()) if archives.exists() else 0


def test_an_archive_that_unpacks_to_more_than_the_cap_is_refused_before_writing(tmp_path, capsys, monkeypatch):
    bomb = _bomb(tmp_path, 64 << 20)  # 64 MiB of zeros in a ~64 KB archive
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(UserError, match=r"adapter_model\.safetensors.*unpack.*more than"):
        open_archive(bomb, max_unpacked=4 << 20)
    assert _cache_bytes(tmp_path) == 0
    # the CLI: one line, with the cap set low through the module's constants
    monkeypatch.setattr(archive, "MIN_UNPACKED_CAP", 4 << 20)
    capsys.readouterr()
    assert main(["chat", str(bomb)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "bomb.tar.gz" in err and "Traceback" not in err, err
    assert _cache_bytes(tmp_path) == 0


def test_a_sparse_member_is_refused_before_writing(tmp_path, capsys):
    """A 200-byte archive made by GNU tar --sparse holding a 1 GiB file of holes."""
    if not shutil.which("tar"):
        pytest.skip("no tar command here")
    source = tmp_path / "src"
    source.mkdir()
    (source / MANIFEST).write_text(f"{'0' * 64}  adapter_model.safetensors\n", encoding="utf-8")
    with (source / "adapter_model.safetensors").open("wb") as f:
        f.truncate(1 << 30)
    bomb = tmp_path / "sparse.tar.gz"
    subprocess.run(["tar", "--sparse", "-czf", str(bomb), "-C", str(source), MANIFEST, "adapter_model.safetensors"],
                   check=True)
    assert bomb.stat().st_size < 4096
    with pytest.raises(UserError, match="adapter_model.safetensors.*(sparse|more than)"):
        open_archive(bomb)
    assert _cache_bytes(tmp_path) == 0


def test_the_hash_is_checked_while_unpacking_and_stops_at_the_first_mismatch(run_dir, tmp_path, monkeypatch):
    """A member whose bytes do not match the manifest stops the unpacking there: the members after it are never
    written."""
    target = write_archive(run_dir, tmp_path / "run.tar.gz")
    with tarfile.open(target) as tar:
        order = [m.name for m in tar.getmembers()]
    first = order[1]  # the first member after the manifest

    def tamper(name, data):
        return data + b" " if name == first else data

    written: list[str] = []
    real_open = Path.open

    def spy(self, mode="r", *args, **kwargs):
        if "w" in mode and "archives" in str(self):
            written.append(self.name)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    with pytest.raises(UserError, match=f"{first} does not match its SHA-256"):
        archive.open_archive(_repack(target, tmp_path / "tampered.tar.gz", tamper))
    assert written == [first], written


def test_export_archive_refuses_a_link_out_of_the_run_folder_and_packs_links_inside_as_files(run_dir, tmp_path, capsys):
    """Issue 25 case 13: a run folder whose files are symbolic links: one leading out of the folder is refused
    (naming it), so neither its target's path nor its content goes into an archive, and nothing is written through
    it; one leading to a file inside the folder is packed as a plain file, and the archive opens."""
    folder = tmp_path / "run"
    shutil.copytree(run_dir, folder)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the archive", encoding="utf-8")
    (folder / "README.md").unlink()
    (folder / "README.md").symlink_to(secret)
    capsys.readouterr()
    assert main(["export", str(folder), "--archive", str(tmp_path / "a.tar.gz")]) == 1
    err = capsys.readouterr().err
    assert f"{folder / 'README.md'} is a symbolic link" in err and "outside" in err and "Traceback" not in err, err
    assert secret.read_text(encoding="utf-8") == "not for the archive" and not (tmp_path / "a.tar.gz").exists()
    # a weight or tokenizer file linked out: the same
    (folder / "README.md").unlink()
    shutil.move(folder / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    (folder / "tokenizer_config.json").symlink_to(tmp_path / "tokenizer_config.json")
    assert main(["export", str(folder), "--archive", str(tmp_path / "a.tar.gz")]) == 1
    assert "tokenizer_config.json is a symbolic link" in capsys.readouterr().err
    # a link inside the folder: packed as the file it names
    (folder / "tokenizer_config.json").unlink()
    shutil.move(tmp_path / "tokenizer_config.json", folder / "tokenizer_config.saved")
    (folder / "tokenizer_config.json").symlink_to("tokenizer_config.saved")
    target = tmp_path / "b.tar.gz"
    assert main(["export", str(folder), "--archive", str(target)]) == 0
    with tarfile.open(target) as tar:
        assert all(m.isfile() for m in tar.getmembers())
    assert str(tmp_path).encode() not in gzip.decompress(target.read_bytes())
    assert (open_archive(target) / "tokenizer_config.json").read_bytes() == \
        (folder / "tokenizer_config.saved").read_bytes()


def test_export_refuses_a_run_folder_or_export_dir_a_live_training_holds(run_dir, tmp_path, capsys, live_process):
    """Issue 25, case 10 for export: --archive writes README.md and base_model.json into the run folder, and a merged
    export writes export_dir; neither beside a training that holds the folder's lock."""
    busy = tmp_path / "busy-run"
    shutil.copytree(run_dir, busy)
    hold_lock(busy, live_process.pid)
    before = sorted(p.name for p in busy.iterdir())
    assert main(["export", str(busy), "--archive", str(tmp_path / "x.tar.gz")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"is in use by process {live_process.pid}" in err and "Traceback" not in err
    assert sorted(p.name for p in busy.iterdir()) == before and not (tmp_path / "x.tar.gz").exists()
    merged = tmp_path / "merged"
    hold_lock(merged, live_process.pid)
    assert main(["export", str(run_dir), f"export_dir={merged}"]) == 1
    assert f"is in use by process {live_process.pid}" in capsys.readouterr().err
    assert sorted(p.name for p in merged.iterdir()) == [LOCK]
