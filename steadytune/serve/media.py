"""Images in serve's chat requests: OpenAI's `image_url` content parts, read without touching the network, and the
answer generated with them.

What a part may carry (`--allow-local-images DIR ...` opens the second):
- a data URL, `data:image/png;base64,...` (what the openai SDK sends for a local file): decoded, at most
  --max-image-bytes, at most --max-image-pixels (read from the header before the pixels are decoded);
- with --allow-local-images DIR ..., a local path (`file:///...` or `/...`) to an image file inside one of those
  folders (after links are resolved). Every refusal of a path is the same message, whether the file is outside
  the folders, missing, unreadable, not a regular file, too large or not an image: a client learns nothing about
  which files exist on the server.
An http(s) URL, or any other scheme, is refused with 400 naming the part (`messages[2].content[1].image_url`): the
server never fetches anything. At most --max-images images a request.

A request with images is answered by transformers' `generate` on the engine's worker thread, between two decode steps
of the batch (the decode engine takes token ids, not pixels): one sequence at a time (n = 1), streamed as a single
chunk. Text requests to the same model go through the batching engine as before.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from steadytune.data.multimodal.plugins import IMAGE_PLACEHOLDER
from steadytune.model.vision import type_id_inputs
from steadytune.serve.limits import ImageLimits

_DATA_URL = re.compile(r"^data:(?P<mime>image/[\w.+-]+)?(?P<params>(;[\w-]+=[\w.-]+)*);base64,(?P<data>.*)$",
                       re.DOTALL | re.IGNORECASE)
_SCHEME = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*):")


class ImageRefused(ValueError):
    """A part the server does not take; `param` names it, as OpenAI's errors do."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def has_images(messages: list) -> bool:
    return any(getattr(part, "type", None) == "image_url"
               for m in messages if isinstance(m.content, list) for part in m.content)


def request_images(messages: list, limits: ImageLimits) -> tuple[list[dict], Optional[str], list[bytes]]:
    """(the turns, with one <image> placeholder where each image part was; the system text; each image's bytes,
    checked) of a chat request with image parts. Raises ImageRefused naming the part."""
    system, turns, images = [], [], []
    for i, message in enumerate(messages):
        parts = message.content if isinstance(message.content, list) else [message.content or ""]
        text = []
        for j, part in enumerate(parts):
            if isinstance(part, str) or getattr(part, "type", None) == "text":
                value = part if isinstance(part, str) else part.text
                if IMAGE_PLACEHOLDER in value:
                    raise ImageRefused(f"a text part holds {IMAGE_PLACEHOLDER}, which stands for an image here: send "
                                       "images as image_url parts", param=f"messages[{i}].content")
                text.append(value)
                continue
            where = f"messages[{i}].content[{j}].image_url"
            if message.role != "user":
                raise ImageRefused("images are taken in user messages only", param=where)
            if len(images) == limits.max_images:
                raise ImageRefused(f"more than {limits.max_images} images in one request", param=where)
            images.append(image_bytes(part.image_url.url, where, limits))
            text.append(IMAGE_PLACEHOLDER)
        if message.role in ("system", "developer"):
            system.append("".join(text))
        else:
            turns.append({"role": {"tool": "observation"}.get(message.role, message.role), "content": "".join(text)})
    if not turns or turns[-1]["role"] == "assistant":
        raise ImageRefused("the last message must be the user's (or a tool result)", param="messages")
    return turns, "\n\n".join(system) or None, images


def image_bytes(url: str, where: str, limits: ImageLimits) -> bytes:
    """An image_url's bytes, from a data URL (or, when allowed, a local file), within the limits."""
    match = _DATA_URL.match(url)
    if match:
        try:
            data = base64.b64decode(match.group("data"), validate=True)
        except (binascii.Error, ValueError):
            raise ImageRefused("the data URL's base64 does not decode", param=where) from None
    else:
        scheme = _SCHEME.match(url)
        name = scheme.group("scheme").lower() if scheme else None
        if name == "data":
            raise ImageRefused("a data URL image must be base64-encoded: data:image/png;base64,...", param=where)
        if name not in (None, "file") or (name is None and not url.startswith("/")):
            shown = f"a {name} URL" if name else "not a data URL"
            raise ImageRefused(f"{shown}: this server never fetches images; send the image itself as a data URL "
                               "(data:image/png;base64,...)", param=where)
        if not limits.allow_local_images:
            raise ImageRefused("a local file path: this server takes images as data URLs (data:image/png;base64,...); "
                               "its operator can allow local files with --allow-local-images DIR", param=where)
        return local_image(url, where, limits)
    if len(data) > limits.max_image_bytes:
        raise ImageRefused(f"the image is larger than {limits.max_image_bytes} bytes", param=where)
    check_image(data, where, limits)
    return data


def local_image(url: str, where: str, limits: ImageLimits) -> bytes:
    """The bytes of a local image a request names, when it is an image file inside one of limits.local_image_dirs;
    any refusal is the one message of `refused` (module docstring)."""
    refused = ImageRefused("not an image this server reads: a local path must name an image file (at most "
                           f"{limits.max_image_bytes} bytes and {limits.max_image_pixels} pixels) inside the folders "
                           "its operator allowed with --allow-local-images", param=where)
    raw = urllib.parse.unquote(url[len("file://"):]) if url.startswith("file://") else url
    if not raw.startswith("/") or "\0" in raw:
        raise refused
    real = os.path.realpath(raw)   # links resolved: a link inside a folder to a file outside is outside
    if not any(os.path.commonpath([real, folder]) == folder for folder in limits.local_image_dirs):
        raise refused
    try:
        # O_NONBLOCK: a FIFO in the folder answers at once instead of holding the worker; O_NOFOLLOW: a link swapped in
        # after realpath is not followed
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        raise refused from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limits.max_image_bytes:
            raise refused
        data = b""
        while len(data) <= limits.max_image_bytes:
            chunk = os.read(fd, limits.max_image_bytes + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        raise refused from None
    finally:
        os.close(fd)
    if len(data) > limits.max_image_bytes:
        raise refused
    try:
        check_image(data, where, limits)
    except ImageRefused:
        raise refused from None
    return data


def check_image(data: bytes, where: str, limits: ImageLimits) -> None:
    """An image Pillow reads, of at most max_image_pixels (from its header: nothing is decoded here)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Image.DecompressionBombError:   # Pillow's own bound, checked in Image.open: past ours too
        raise ImageRefused(f"the image claims more pixels than Pillow decodes; this server takes at most "
                           f"{limits.max_image_pixels} (width x height)", param=where) from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise ImageRefused("not an image Pillow can read", param=where) from None
    if width * height > limits.max_image_pixels:
        raise ImageRefused(f"the image has {width}x{height} pixels; this server takes at most "
                           f"{limits.max_image_pixels} (width x height)", param=where)


# ---------------------------------------------------------------------------------------------------------
# Generating with images (on the engine's worker thread)
# ---------------------------------------------------------------------------------------------------------

@dataclass
class MediaAnswer:
    text: str
    finish_reason: str        # "stop" | "length"
    completion_tokens: int


def generate_with_images(model: Any, tokenizer: Any, prompt_ids: list[int], pixels: dict, max_tokens: int,
                         temperature: float, top_p: float, top_k: int, seed: Optional[int],
                         stop_ids: frozenset, stop_strings: list[str]) -> MediaAnswer:
    """One answer from transformers' generate over a prompt with images; stop strings cut the text where the first
    one starts."""
    device = next(model.parameters()).device
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "eos_token_id": sorted(stop_ids) or None,
                              "pad_token_id": tokenizer.pad_token_id}
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else None)
        if seed is not None:
            torch.manual_seed(seed)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    pixels = {k: v.to(device) for k, v in pixels.items()}
    out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **pixels,
                         **type_id_inputs(model, input_ids), **kwargs)
    new = out[0, len(prompt_ids):].tolist()
    stopped = bool(new) and new[-1] in stop_ids
    tokens = len(new)
    text = tokenizer.decode(new[:-1] if stopped else new, skip_special_tokens=True)
    for stop in stop_strings:
        cut = text.find(stop) if stop else -1
        if cut >= 0:
            text, stopped = text[:cut], True
    return MediaAnswer(text, "stop" if stopped or tokens < max_tokens else "length", tokens)
