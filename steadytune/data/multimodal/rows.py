"""The media of a dataset row, as LLaMA-Factory reads them:

- v0 rows (alpaca, sharegpt, openai): the `images` / `videos` columns that the dataset_info.json entry maps
  (`"columns": {"images": "images"}`), or, for a file named by path, columns called `images` / `videos` when present;
  the messages carry one `<image>` / `<video>` placeholder per item;
- v1 rows (LLaMA-Factory v1's jsonl: a message's content is a list of typed parts): an `image_url` / `video_url` part
  becomes a placeholder at its place in the text and its value the next image / video of the row.

Paths are resolved later (media.resolve_media, against media_dir), when the data settings are known.
"""

from __future__ import annotations

from typing import Any

from steadytune.config import show_value
from steadytune.data.multimodal.plugins import IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER
from steadytune.errors import DataError

MEDIA_KEYS = ("images", "videos")
AUDIO_KEY = "audios"
V1_PARTS = {"text": None, "image_url": ("images", IMAGE_PLACEHOLDER), "video_url": ("videos", VIDEO_PLACEHOLDER)}


def media_of(data: dict, columns: dict, where: str) -> dict:
    """{"images": [...], "videos": [...], "where": row} for a row with media in its mapped columns; {} without."""
    out: dict[str, Any] = {}
    if columns.get(AUDIO_KEY) and data.get(columns[AUDIO_KEY]):
        raise DataError(f"{where}: not supported: audio ({columns[AUDIO_KEY]} column); images and video are")
    for key in MEDIA_KEYS:
        name = columns.get(key)
        value = data.get(name) if name else None
        if value is None or value == []:
            continue
        if not isinstance(value, (list, str, dict, bytes)):
            raise DataError(f"{where}: column {show_value(name)} must list the row's {key} "
                            f"(got {type(value).__name__})")
        out[key] = value if isinstance(value, list) else [value]
    if out:
        out["where"] = where
    return out


def v1_content(content: list, where: str) -> tuple[str, dict[str, list]]:
    """A v1 message's typed parts -> (its text with placeholders, {"images": [...], "videos": [...]})."""
    text = []
    media: dict[str, list] = {}
    for i, part in enumerate(content):
        if not isinstance(part, dict) or "type" not in part:
            raise DataError(f"{where}: content part {i} must be an object with a `type`")
        kind = part["type"]
        if kind not in V1_PARTS:
            raise DataError(f"{where}: not supported: {show_value(kind)} content (text, image_url and video_url are)")
        value = part.get("value")
        if V1_PARTS[kind] is None:
            text.append("" if value is None else str(value))
            continue
        key, placeholder = V1_PARTS[kind]
        if not isinstance(value, str) or not value:
            raise DataError(f"{where}: content part {i} ({kind}) needs a `value`: a file path or a data URL")
        media.setdefault(key, []).append(value)
        text.append(placeholder)
    return "".join(text), media
