"""Where a row's images and videos come from, and opening them: local files (relative to `media_dir`, as
LLaMA-Factory resolves them), data URLs and base64 text, raw bytes, or `{"bytes", "path"}` records (a `datasets` Image
column). Nothing is ever fetched from the network: a URL is refused naming the row, so a training run never depends on
(or leaks to) a remote host. A missing or unreadable image is an error naming the file and the row, and so is a decompression bomb: an image
whose header claims more pixels than MAX_IMAGE_PIXELS is refused before a pixel is decoded (a 100 KB PNG can claim
30000 x 30000, which is 2.7 GB once decoded).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
from pathlib import Path
from typing import Any

from steadytune.config import show_value
from steadytune.errors import DataError

# A reference to an image as a dataset row holds it (after resolve_media): a path, bytes, or a {"bytes", "path"} record.
MediaRef = Any

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_DATA_URL = re.compile(r"^data:(?P<mime>[\w/+.-]*)(?P<params>(;[\w-]+=[\w.-]+)*)(?P<b64>;base64)?,(?P<data>.*)$", re.DOTALL)
_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]+={0,2}$")
BASE64_MIN_CHARS = 64   # a shorter string is a file name, not an encoded image
# The most pixels an image may have (width x height, read from its header): Pillow's own refusal threshold (twice
# its Image.MAX_IMAGE_PIXELS), held here so that a library setting Pillow's global to None does not lift it. Far above
# what training uses: every image is shrunk to image_max_pixels (768 x 768 by default) after it is decoded.
MAX_IMAGE_PIXELS = 178_956_970


def is_url(value: str) -> bool:
    """http://, https://, s3://, ... (a data: URL is not a URL in this sense: it carries its bytes)."""
    return bool(_URL.match(value)) and not value.startswith("file://")


def resolve_media(refs: Any, media_dir: str | os.PathLike, where: str, kind: str = "image") -> list[MediaRef]:
    """A row's `images` / `videos` value as a list of references, paths resolved as LLaMA-Factory's converter does:
    joined to `media_dir` when that file exists, else kept as written (relative to where the run starts). A single
    value becomes a one-item list; None or [] is no media. A video may be a list of frame images (each resolved)."""
    if refs is None:
        return []
    items = refs if isinstance(refs, list) else [refs]
    out = []
    for i, item in enumerate(items):
        if kind == "video" and isinstance(item, list):
            out.append([_resolve_one(frame, media_dir, f"{where}: videos[{i}]", "video frame") for frame in item])
        else:
            out.append(_resolve_one(item, media_dir, f"{where}: {kind}s[{i}]", kind))
    return out


def _resolve_one(item: Any, media_dir: str | os.PathLike, where: str, kind: str) -> MediaRef:
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if isinstance(item, dict):
        if item.get("bytes") is None and not isinstance(item.get("path"), str):
            raise DataError(f"{where}: a {kind} record needs `bytes` or a `path` (got keys {', '.join(map(str, item))})")
        if item.get("bytes") is None:
            return _resolve_one(item["path"], media_dir, where, kind)
        return dict(item)
    if not isinstance(item, str):
        raise DataError(f"{where}: a {kind} must be a file path, a data URL or base64 text (got {type(item).__name__})")
    if is_url(item):
        raise DataError(f"{where}: {show_value(item)} is a URL; steadytune never fetches media from the network: "
                        f"download the {kind} and give its local path (relative to media_dir), or embed it as a data URL")
    if item.startswith("file://"):
        item = item[len("file://"):]
    if item.startswith("data:") or _looks_base64(item):
        return item
    joined = Path(media_dir) / item
    return str(joined) if is_file(joined) else item


def is_file(path: str | os.PathLike) -> bool:
    """Whether `path` names a file; False for what cannot be one (pathlib raises for a name over 255 bytes, which
    base64 text often is, and for a NUL in it)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def _looks_base64(value: str) -> bool:
    return len(value) >= BASE64_MIN_CHARS and "." not in value[-6:] and bool(_BASE64.match(value[:4096]))


def media_bytes(ref: MediaRef, where: str, kind: str = "image") -> tuple[bytes | None, str]:
    """(the encoded bytes when the reference carries them, else None; a name for messages)."""
    if isinstance(ref, bytes):
        return ref, f"{kind} bytes"
    if isinstance(ref, dict):
        return bytes(ref["bytes"]), str(ref.get("path") or f"{kind} bytes")
    match = _DATA_URL.match(ref)
    if match:
        data = match.group("data")
        if not match.group("b64"):
            raise DataError(f"{where}: a data URL {kind} must be base64-encoded (data:image/png;base64,...)")
        return _decode_base64(data, where, kind), f"data URL ({match.group('mime') or 'no type'})"
    if _looks_base64(ref) and not is_file(ref):
        return _decode_base64(ref, where, kind), "base64 text"
    return None, ref


def _decode_base64(text: str, where: str, kind: str) -> bytes:
    try:
        return base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError) as e:
        raise DataError(f"{where}: the {kind}'s base64 text does not decode ({e})") from None


def open_image(ref: MediaRef, where: str):
    """A PIL image, fully loaded (so a truncated file fails here, naming it and the row, not later in a worker); an
    image of more than MAX_IMAGE_PIXELS is refused from its header, before its pixels are decoded."""
    from PIL import Image, UnidentifiedImageError

    data, name = media_bytes(ref, where)
    try:
        if data is None:
            if not is_file(name):
                raise DataError(f"{where}: image file not found: {name} (paths are relative to media_dir, which "
                                f"defaults to dataset_dir, else to where the run starts)")
            image = Image.open(name)
        else:
            image = Image.open(io.BytesIO(data))
        check_pixels(image.size, name, where)
        image.load()
    except DataError:
        raise
    except Image.DecompressionBombError as e:   # Pillow's own check, in Image.open, met first
        claimed = re.search(r"\((\d+) pixels\)", str(e))
        raise DataError(too_many_pixels(int(claimed.group(1)) if claimed else None, name, where)) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise DataError(f"{where}: cannot read image {show_value(name, 120)}: {type(e).__name__}: {e}") from None
    return image


def check_pixels(size: tuple[int, int], name: str, where: str) -> None:
    """Refuse an image (or a video frame) larger than MAX_IMAGE_PIXELS, from the size its header gives."""
    width, height = size
    if width * height > MAX_IMAGE_PIXELS:
        raise DataError(too_many_pixels(width * height, name, where, f"{width}x{height}"))


def too_many_pixels(pixels: int | None, name: str, where: str, shape: str = "") -> str:
    claimed = f"{shape} = {pixels:,} pixels" if shape else (f"{pixels:,} pixels" if pixels else "too many pixels")
    return (f"{where}: image {show_value(name, 120)} claims {claimed}, more than the {MAX_IMAGE_PIXELS:,} steadytune "
            "decodes (a decompression bomb, or an image far larger than training uses: each is shrunk to "
            "image_max_pixels); shrink it first, e.g. to 2048 pixels on its longer side")


def video_source(ref: MediaRef, where: str):
    """What the video decoder opens: a path (checked to exist) or a file-like object over the bytes."""
    data, name = media_bytes(ref, where, "video")
    if data is not None:
        return io.BytesIO(data), name
    if not is_file(name):
        raise DataError(f"{where}: video file not found: {name} (paths are relative to media_dir, which defaults to "
                        f"dataset_dir)")
    return name, name
