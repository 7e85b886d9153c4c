"""Hypothesis against the image readers (issue 67): training's, chat's, predict's and eval's (data/multimodal/media.py)
and serve's (serve/media.py), fed any bytes and images whose headers claim any size, as files, raw bytes, data URLs
and base64 text; and serve's local paths, any string made of the pieces that escape a folder. Each reader either gives
an image within its bound or refuses in one line (DataError naming the row; ImageRefused naming the part), in bounded
time, never decoding a bomb; every refused local path gets the same answer. Settings and profiles: tests/fuzzing.py."""

from __future__ import annotations

import base64
import io
import os
import struct
import tempfile
import time
import urllib.parse
import zlib
from pathlib import Path

import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from steadytune.data.multimodal.media import MAX_IMAGE_PIXELS, open_image, resolve_media
from steadytune.errors import DataError
from steadytune.serve.limits import ImageLimits
from steadytune.serve.media import ImageRefused, image_bytes

# CPU seconds of this process, not wall time: a loaded CI machine stretches the wall clock, not the work
SECONDS = 5
WHERE = "fuzz.jsonl line 3: images[0]"
sides = st.one_of(st.integers(0, 70), st.integers(0, 2**16 - 1), st.integers(0, 2**31 - 1),
                  st.sampled_from([13377, 30000, 65535, 2**31 - 1]))


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width: int, height: int, depth: int, colour: int, body: bytes) -> bytes:
    """A PNG whose header claims width x height, with `body` compressed as its data (too little, or garbage)."""
    header = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(body)) + chunk(b"IEND", b"")


def gif(width: int, height: int, body: bytes) -> bytes:
    return b"GIF89a" + struct.pack("<HHBBB", width & 0xFFFF, height & 0xFFFF, 0, 0, 0) + body + b";"


def bmp(width: int, height: int, body: bytes) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, width & 0x7FFFFFFF, -(height & 0x7FFFFFFF) if height % 2 else height
                       & 0x7FFFFFFF, 1, 24, 0, len(body), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + len(body), 0, 0, 54) + info + body


def real_image(width: int, height: int, kind: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (max(1, width % 64), max(1, height % 64)), (width % 256, 0, height % 256)).save(buffer, kind)
    return buffer.getvalue()


encoded = st.one_of(
    st.builds(png, sides, sides, st.sampled_from([1, 8, 16]), st.sampled_from([0, 2, 3, 6]), st.binary(max_size=64)),
    st.builds(gif, sides, sides, st.binary(max_size=32)),
    st.builds(bmp, sides, sides, st.binary(max_size=64)),
    st.builds(real_image, sides, sides, st.sampled_from(["PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF"])),
    st.binary(max_size=200),
)
# the image's bytes cut or with a byte flipped, as a damaged download would leave them
damaged = st.tuples(encoded, st.integers(0, 300), st.integers(0, 255)).map(
    lambda t: t[0][: max(1, t[1])] if t[1] % 3 == 0 else bytes(b ^ (t[2] if i == t[1] % max(1, len(t[0])) else 0)
                                                             for i, b in enumerate(t[0])))
images = st.one_of(encoded, encoded, damaged)


def forms(data: bytes, folder: Path) -> list:
    """The ways a dataset row (or chat's /image) hands the reader an image: a file, raw bytes, a record, a data
    URL, base64 text."""
    path = folder / "image.bin"
    path.write_bytes(data)
    text = base64.b64encode(data).decode()
    return [str(path), data, {"bytes": data, "path": "x.png"}, f"data:image/png;base64,{text}", text]


@fuzz(300)
@given(data=images)
def test_training_reads_an_image_or_refuses_it_in_one_line(data):
    with tempfile.TemporaryDirectory() as folder:
        for ref in forms(data, Path(folder)):
            started = time.process_time()
            try:
                resolved = resolve_media(ref, folder, "fuzz.jsonl line 3")[0]
                image = open_image(resolved, WHERE)
            except DataError as e:
                message = str(e)
                assert message.startswith("fuzz.jsonl line 3") and "\n" not in message, message
            else:
                assert image.width * image.height <= MAX_IMAGE_PIXELS
            assert time.process_time() - started < SECONDS


@fuzz(300)
@given(data=images)
def test_serve_reads_an_image_or_refuses_it_naming_the_part(data):
    limits = ImageLimits(max_image_bytes=4096, max_image_pixels=1 << 20)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    try:
        out = image_bytes(url, "messages[0].content[1].image_url", limits)
    except ImageRefused as e:
        assert e.param == "messages[0].content[1].image_url" and "\n" not in str(e)
    else:
        with Image.open(io.BytesIO(out)) as image:
            assert image.width * image.height <= limits.max_image_pixels


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """allowed/ (an image, a link out, a FIFO, a text file, a sub-folder with an image) beside outside/ (an image)."""
    root = tmp_path_factory.mktemp("paths")
    allowed, outside = root / "allowed", root / "outside"
    (allowed / "sub").mkdir(parents=True)
    outside.mkdir()
    Image.new("RGB", (8, 8), (255, 0, 0)).save(allowed / "red.png")
    Image.new("RGB", (8, 8), (0, 0, 255)).save(allowed / "sub" / "blue.png")
    Image.new("RGB", (8, 8), (0, 255, 0)).save(outside / "secret.png")
    (allowed / "link.png").symlink_to(outside / "secret.png")
    (allowed / "sub" / "up").symlink_to(root)
    (allowed / "notes.txt").write_text("hello")
    os.mkfifo(allowed / "pipe.png")
    return root


PIECES = ["..", ".", "", "allowed", "outside", "sub", "up", "red.png", "secret.png", "link.png", "blue.png",
          "notes.txt", "pipe.png", "%2e%2e", "%2F", "etc", "passwd", "\x00", "allowed\x00", "~"]


@fuzz(400)
@given(pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=7), scheme=st.sampled_from(["", "file://"]),
       rooted=st.booleans())
def test_a_local_path_reads_an_allowed_image_or_gets_the_one_refusal(tree, pieces, scheme, rooted):
    """Whatever the path, the answer is the bytes of an image whose real place is inside allowed/, or the one message
    every refusal of a path shares (nothing tells which files exist)."""
    allowed = os.path.realpath(tree / "allowed")
    limits = ImageLimits(max_image_bytes=1 << 16, local_image_dirs=(allowed,))
    path = (str(tree) if rooted else "") + "/" + "/".join(pieces)
    try:
        data = image_bytes(scheme + path, "messages[0].content[0].image_url", limits)
    except ImageRefused as e:
        assert str(e) == ONE_REFUSAL.format(limits=limits), (path, str(e))
    else:
        real = os.path.realpath(urllib.parse.unquote(path) if scheme else path)
        assert os.path.commonpath([real, allowed]) == allowed and Path(real).read_bytes() == data, path


ONE_REFUSAL = ("not an image this server reads: a local path must name an image file (at most "
               "{limits.max_image_bytes} bytes and {limits.max_image_pixels} pixels) inside the folders its operator "
               "allowed with --allow-local-images")


def test_an_image_as_base64_text_with_no_slash_in_255_characters_is_read(tmp_path):
    """Found by the fuzzer above: an image row holding base64 text was tested as a file name first, and pathlib raises
    OSError (File name too long) for a name of more than 255 bytes without a '/': a black image's base64 is such a
    run of 'A's. The row's image is now read."""
    buffer = io.BytesIO()
    Image.new("RGB", (40, 40)).save(buffer, "BMP")
    text = base64.b64encode(buffer.getvalue()).decode()
    assert max(map(len, text.split("/"))) > 255
    ref = resolve_media(text, str(tmp_path), "rows.jsonl line 1")[0]
    assert open_image(ref, WHERE).size == (40, 40)
