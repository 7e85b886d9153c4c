"""Images and video frames before the model's image processor sees them, as LLaMA-Factory 0.9.5 prepares them
(its mm_plugin `_preprocess_image`, `_get_video_sample_indices`, `_regularize_videos`), so the same row gives the
same pixels:

- an image above `image_max_pixels` (width x height) is shrunk, one below `image_min_pixels` enlarged, both by
  sqrt(limit / pixels) with each side truncated to an integer (PIL's default resampling), then converted to RGB;
- Qwen-VL models further enlarge a side under 28 pixels to 28 and cap the aspect ratio at 200 (to 180);
- a video keeps floor(duration x video_fps) frames (at least 1, at most video_maxlen and its frame count), spread
  evenly over its frames (numpy linspace, truncated); Qwen-VL repeats the last frame when the count is odd (its
  temporal patch is 2 frames). Frames are decoded with PyAV (`pip install av`), the library LLaMA-Factory uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from steadytune.data.multimodal.media import check_pixels
from steadytune.errors import DataError

# LLaMA-Factory's defaults (hparams/model_args.py).
IMAGE_MAX_PIXELS = 768 * 768
IMAGE_MIN_PIXELS = 32 * 32
VIDEO_MAX_PIXELS = 256 * 256
VIDEO_MIN_PIXELS = 16 * 16
VIDEO_FPS = 2.0
VIDEO_MAXLEN = 128
QWEN_MIN_SIDE = 28
QWEN_MAX_RATIO = 200


@dataclass(frozen=True)
class MediaSettings:
    """The data keys that shape images and videos (LLaMA-Factory's names and defaults)."""
    image_max_pixels: int = IMAGE_MAX_PIXELS
    image_min_pixels: int = IMAGE_MIN_PIXELS
    video_max_pixels: int = VIDEO_MAX_PIXELS
    video_min_pixels: int = VIDEO_MIN_PIXELS
    video_fps: float = VIDEO_FPS
    video_maxlen: int = VIDEO_MAXLEN


def _scale(image, limit: int):
    factor = math.sqrt(limit / (image.width * image.height))
    return image.resize((int(image.width * factor), int(image.height * factor)))


def resize_image(image, max_pixels: int, min_pixels: int, qwen: bool = False):
    """One image as LLaMA-Factory hands it to the image processor (module docstring)."""
    if image.width * image.height > max_pixels:
        image = _scale(image, max_pixels)
    if image.width * image.height < min_pixels:
        image = _scale(image, min_pixels)
    if image.mode != "RGB":
        image = image.convert("RGB")
    if qwen:
        if min(image.width, image.height) < QWEN_MIN_SIDE:
            image = image.resize((max(image.width, QWEN_MIN_SIDE), max(image.height, QWEN_MIN_SIDE)))
        if image.width / image.height > QWEN_MAX_RATIO:
            image = image.resize((image.height * 180, image.height))
        if image.height / image.width > QWEN_MAX_RATIO:
            image = image.resize((image.width, image.width * 180))
    return image


def sample_indices(total_frames: int, duration_s: float, video_fps: float, video_maxlen: int) -> list[int]:
    """Which frames of a video are kept (LLaMA-Factory's `_get_video_sample_indices`): a stream that reports no frame
    count is treated as endless and gives indices 0..video_maxlen-1."""
    import numpy as np

    if total_frames == 0:
        return np.linspace(0, video_maxlen - 1, video_maxlen).astype(np.int32).tolist()
    wanted = max(1, math.floor(duration_s * video_fps))
    wanted = min(total_frames, video_maxlen, wanted)
    return np.linspace(0, total_frames - 1, wanted).astype(np.int32).tolist()


@dataclass
class DecodedVideo:
    frames: list            # PIL images, resized as LLaMA-Factory resizes them
    duration_s: float
    fps: float              # frames kept per second of video (Qwen2-VL's second_per_grid_ts uses it)
    frame_times: list[float]  # LF's `frames_indices`: index / source fps * video_fps (Qwen3-VL timestamps)
    settings_fps: float       # the video_fps setting the frame times are counted in


def require_pyav(where: str):
    try:
        import av
    except ImportError:
        raise DataError(f"{where}: reading video needs PyAV, the decoder LLaMA-Factory uses (pip install av); "
                        "or give the video as a list of frame images") from None
    return av


def decode_video(source: Any, name: str, settings: MediaSettings, where: str, qwen: bool = False) -> DecodedVideo:
    """The kept frames of one video file (a path or file-like object), decoded with PyAV."""
    av = require_pyav(where)
    try:
        container = av.open(source, "r")
    except (av.FFmpegError, OSError) as e:
        raise DataError(f"{where}: cannot open video {name}: {e}") from None
    try:
        stream = next((s for s in container.streams if s.type == "video"), None)
        if stream is None:
            raise DataError(f"{where}: {name} has no video stream")
        # a frame size the header claims past the image bound is refused before a frame is decoded (a bomb)
        check_pixels((stream.codec_context.width or 0, stream.codec_context.height or 0), name, where)
        duration = float(stream.duration * stream.time_base) if stream.duration is not None else None
        indices = sample_indices(stream.frames, duration or 0.0, settings.video_fps, settings.video_maxlen)
        source_fps = float(stream.average_rate) if stream.average_rate else settings.video_fps
        wanted, last = set(indices), max(indices)
        container.seek(0)
        frames = []
        for i, frame in enumerate(container.decode(stream)):
            if i in wanted:
                check_pixels((frame.width, frame.height), name, where)   # a stream may change size mid-way
                frames.append(frame.to_image())
            if i >= last:   # the frames after the last one kept are never decoded (an hour of video past them)
                break
    except av.FFmpegError as e:
        raise DataError(f"{where}: cannot decode video {name}: {e}") from None
    finally:
        container.close()
    if not frames:
        raise DataError(f"{where}: no frame could be decoded from video {name}")
    if duration is None:
        duration, fps = len(frames) / settings.video_fps, settings.video_fps
    else:
        fps = len(indices) / duration
    times = [i / source_fps * settings.video_fps for i in indices]
    return DecodedVideo(_video_frames(frames, settings, qwen), duration, fps, times, settings.video_fps)


def frames_video(frames: list, settings: MediaSettings, qwen: bool = False) -> DecodedVideo:
    """A video given as a list of frame images (already sampled, as LLaMA-Factory assumes)."""
    duration = len(frames) / settings.video_fps
    kept = _video_frames(list(frames), settings, qwen)
    # LLaMA-Factory's Qwen3-VL timestamps of pre-sampled frames count the frames as the video processor returns
    # them: one per frame, the repeated last one included (a file's frames are timed from the stream instead)
    return DecodedVideo(kept, duration, settings.video_fps, [float(i) for i in range(len(kept))], settings.video_fps)


def _video_frames(frames: list, settings: MediaSettings, qwen: bool) -> list:
    if qwen and len(frames) % 2:
        frames.append(frames[-1])   # a temporal patch is two frames
    return [resize_image(f, settings.video_max_pixels, settings.video_min_pixels, qwen) for f in frames]
