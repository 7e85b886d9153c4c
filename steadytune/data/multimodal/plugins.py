"""Per-template multimodal plugins: how a `<image>` / `<video>` placeholder becomes the model's own tokens, what the
image processor makes of the pixels, and which token-type ids the model needs. The token strings and counts are
LLaMA-Factory 0.9.5's `mm_plugin` (checked against its output: tests/golden/multimodal/):

- qwen2_vl (Qwen2-VL, Qwen2.5-VL): `<|vision_start|>` + `<|image_pad|>` x (t*h*w of image_grid_thw / merge_size^2) +
  `<|vision_end|>`; a video likewise with `<|video_pad|>` and video_grid_thw;
- qwen3_vl (Qwen3-VL): images as qwen2_vl; a video is one block per temporal patch, each preceded by its timestamp
  (`<1.0 seconds>`, the mean time of the patch's frames);
- gemma3: `\\n\\n<start_of_image>` + `<image_soft_token>` x mm_tokens_per_image + `<end_of_image>\\n\\n` (the
  processor's full_image_sequence), with pan-and-scan crops when `image_do_pan_and_scan`; token_type_ids mark the
  soft tokens (Gemma 3 needs them when training: huggingface/trl#5032);
- llava: `<image>` x ((H/patch) * (W/patch) + additional tokens, minus the CLS under the "default" strategy).

The processor is read through the attributes LLaMA-Factory reads (`image_processor`, `video_processor`, `tokenizer`,
gemma3's `full_image_sequence`, llava's `patch_size`...), so a transformers processor and a plain object holding the
same parts (what transformers cannot assemble without torchvision) both work.
"""

from __future__ import annotations

import re
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch

from steadytune.errors import DataError

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"
AUDIO_PLACEHOLDER = "<audio>"
TEXT_TYPE, IMAGE_TYPE, VIDEO_TYPE = 0, 1, 2


@dataclass(frozen=True)
class MediaPlugin:
    """What one template does with media (module docstring). `name` is LLaMA-Factory's plugin name."""

    name: str
    image_token: str | None = None
    video_token: str | None = None
    qwen: bool = False            # Qwen-VL image rules (28-pixel sides) and a temporal patch of two frames
    vision_start: str = "<|vision_start|>"
    vision_end: str = "<|vision_end|>"

    # --- placeholders -> model tokens -----------------------------------------------------------------------

    def count_placeholders(self, messages: list[dict]) -> tuple[int, int, int]:
        text = [m["content"] for m in messages]
        return (sum(t.count(IMAGE_PLACEHOLDER) for t in text), sum(t.count(VIDEO_PLACEHOLDER) for t in text),
                sum(t.count(AUDIO_PLACEHOLDER) for t in text))

    def expand(self, messages: list[dict], inputs: dict, processor: Any, videos: list | None = None) -> list[dict]:
        """The messages with each placeholder replaced by the model's tokens for that image / video (`inputs`: what
        `pixel_inputs` returned for this row's media, in order; `videos`: the decoded videos, for timestamps)."""
        messages = deepcopy(messages)
        image_texts = iter(self.image_texts(inputs, processor))
        video_texts = iter(self.video_texts(inputs, processor, videos or []))
        for message in messages:
            parts = re.split(f"({re.escape(IMAGE_PLACEHOLDER)}|{re.escape(VIDEO_PLACEHOLDER)})", message["content"])
            message["content"] = "".join(next(image_texts) if p == IMAGE_PLACEHOLDER else
                                         next(video_texts) if p == VIDEO_PLACEHOLDER else p for p in parts)
        return messages

    def image_texts(self, inputs: dict, processor: Any) -> list[str]:
        grid = inputs.get("image_grid_thw")
        if self.name in ("qwen2_vl", "qwen3_vl"):
            merge = int(processor.image_processor.merge_size) ** 2
            return [f"{self.vision_start}{self.image_token * (int(g.prod()) // merge)}{self.vision_end}"
                    for g in (grid if grid is not None else [])]
        count = len(inputs.get("pixel_values", [])) if "pixel_values" in inputs else 0
        if self.name == "gemma3":
            crops = [int(c) for c in flatten(inputs.get("num_crops", []))]
            if not crops:
                return [processor.full_image_sequence] * count
            # pixel_values hold each image followed by its crops; one text per original image
            texts = []
            for n in crops:
                if n == 0:
                    texts.append(processor.full_image_sequence)
                else:
                    texts.append("Here is the original image " + processor.full_image_sequence +
                                 " and here are some crops to help you see better " +
                                 " ".join([processor.full_image_sequence] * n))
            return texts
        if self.name == "llava":
            if not count:
                return []
            height, width = inputs["pixel_values"][0].shape[-2:]
            patch = int(processor.patch_size)
            seqlen = (height // patch) * (width // patch) + int(getattr(processor, "num_additional_image_tokens", 0))
            if getattr(processor, "vision_feature_select_strategy", "default") == "default":
                seqlen -= 1
            return [self.image_token * seqlen] * count
        raise AssertionError(self.name)

    def video_texts(self, inputs: dict, processor: Any, videos: list) -> list[str]:
        grid = inputs.get("video_grid_thw")
        if grid is None:
            return []
        video_processor = processor.video_processor
        merge = int(video_processor.merge_size) ** 2
        texts = []
        for k, g in enumerate(grid):
            if self.name == "qwen3_vl":
                times = qwen3_timestamps(videos[k].frame_times, videos[k].settings_fps, int(video_processor.merge_size))
                per_frame = int(g[1:].prod()) // merge
                texts.append("".join(f"<{times[t]:.1f} seconds>{self.vision_start}{self.video_token * per_frame}"
                                     f"{self.vision_end}" for t in range(int(g[0]))))
            else:
                texts.append(f"{self.vision_start}{self.video_token * (int(g.prod()) // merge)}{self.vision_end}")
        return texts

    # --- pixels ---------------------------------------------------------------------------------------------

    def pixel_inputs(self, images: list, videos: list, processor: Any, pan_and_scan: bool = False) -> dict:
        """The image processor's output for this row's images and videos (already resized, see preprocess.py):
        pixel_values (+ image_grid_thw for Qwen; num_crops for Gemma 3 pan-and-scan), pixel_values_videos +
        video_grid_thw."""
        out: dict = {}
        if images:
            kwargs = {}
            if pan_and_scan and self.name == "gemma3":
                kwargs = dict(do_pan_and_scan=True, pan_and_scan_min_crop_size=256, pan_and_scan_max_num_crops=4,
                              pan_and_scan_min_ratio_to_activate=1.2)
            out.update(processor.image_processor(images, return_tensors="pt", **kwargs))
        if videos:
            video_processor = getattr(processor, "video_processor", None)
            if video_processor is None:
                raise DataError("video input needs the model's video processor, which transformers builds only with "
                                "torchvision installed (pip install torchvision)")
            frames = [v.frames for v in videos]
            if self.name == "qwen3_vl":
                metadata = [{"fps": v.settings_fps, "duration": v.duration_s, "total_num_frames": len(v.frames),
                             "frames_indices": v.frame_times} for v in videos]
                out.update(video_processor(videos=frames, video_metadata=metadata, fps=videos[0].settings_fps,
                                           return_metadata=True, do_sample_frames=False, return_tensors="pt"))
                out.pop("video_metadata", None)
            else:
                out.update(video_processor(videos=frames, return_tensors="pt"))
            if self.name == "qwen2_vl":   # Qwen2.5-VL's temporal rope spacing
                temporal = int(getattr(processor.image_processor, "temporal_patch_size", 2))
                out["second_per_grid_ts"] = [temporal / v.fps for v in videos]
        return dict(out)

    # --- ids ------------------------------------------------------------------------------------------------

    def media_token_ids(self, tokenizer: Any) -> dict[int, int]:
        """token id -> modality type (1 image, 2 video) for the tokens that stand for pixels."""
        out = {}
        if self.image_token:
            out[tokenizer.convert_tokens_to_ids(self.image_token)] = IMAGE_TYPE
        if self.video_token:
            out[tokenizer.convert_tokens_to_ids(self.video_token)] = VIDEO_TYPE
        return out

    def block_token_ids(self, tokenizer: Any) -> set[int]:
        """Media tokens and the tokens that open and close a media block: truncation keeps these whole."""
        brackets = {"qwen2_vl": (self.vision_start, self.vision_end), "qwen3_vl": (self.vision_start, self.vision_end),
                    "gemma3": ("<start_of_image>", "<end_of_image>")}.get(self.name, ())
        vocab = tokenizer.get_vocab()
        return set(self.media_token_ids(tokenizer)) | {vocab[t] for t in brackets if t in vocab}

    def type_ids(self, input_ids: list[int], tokenizer: Any) -> dict[str, list[int]]:
        """The token-type ids the model reads: Gemma 3's token_type_ids (1 on image soft tokens), Qwen-VL's
        mm_token_type_ids (1 image, 2 video: transformers 5 computes the 3-D rope positions from them)."""
        kinds = self.media_token_ids(tokenizer)
        types = [kinds.get(i, TEXT_TYPE) for i in input_ids]
        if self.name == "gemma3":
            return {"token_type_ids": types}
        if self.qwen:
            return {"mm_token_type_ids": types}
        return {}


def qwen3_timestamps(frame_times: list[float], fps: float, merge_size: int) -> list[float]:
    """Seconds at each temporal patch of a Qwen3-VL video: the mean of its first and last frame's time (the last
    frame repeated to fill a patch), as Qwen3VLProcessor._calculate_timestamps with LLaMA-Factory's frame times."""
    times = list(frame_times)
    if len(times) % merge_size:
        times += [times[-1]] * (merge_size - len(times) % merge_size)
    seconds = [t / fps for t in times]
    return [(seconds[i] + seconds[i + merge_size - 1]) / 2 for i in range(0, len(seconds), merge_size)]


def flatten(values: Any) -> list:
    if isinstance(values, torch.Tensor):
        return values.flatten().tolist()
    out = []
    for v in values:
        out.extend(flatten(v) if isinstance(v, (list, tuple, torch.Tensor)) else [v])
    return out


PLUGINS: dict[str, MediaPlugin] = {
    "qwen2_vl": MediaPlugin("qwen2_vl", "<|image_pad|>", "<|video_pad|>", qwen=True),
    "qwen3_vl": MediaPlugin("qwen3_vl", "<|image_pad|>", "<|video_pad|>", qwen=True),
    "gemma3": MediaPlugin("gemma3", "<image_soft_token>"),
    "llava": MediaPlugin("llava", "<image>"),
}
# LLaMA-Factory's template name -> its plugin (templates.py holds the chat format of each).
# LLaMA-Factory 0.9.5 gives its Qwen3.5 templates (qwen3_5, qwen3_5_nothink, qwen3_6) Qwen3-VL's plugin.
TEMPLATE_PLUGINS = {"qwen2_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_nothink": "qwen3_vl",
                    "qwen3_5": "qwen3_vl", "qwen3_5_nothink": "qwen3_vl", "qwen3_6": "qwen3_vl",
                    "gemma3": "gemma3", "llava": "llava"}
# A model's type -> its family's plugin, for `template: auto` (LLaMA-Factory v1 files name no template: the chat
# format comes from the tokenizer's chat template, the media tokens from the model's family).
MODEL_TYPE_PLUGINS = {"qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl",
                      "qwen3_vl_moe": "qwen3_vl", "qwen3_5": "qwen3_vl", "qwen3_5_moe": "qwen3_vl",
                      "gemma3": "gemma3", "llava": "llava"}


def plugin_for(template_name: str, model_type: str | None = None) -> MediaPlugin | None:
    """The media plugin of a template, None for a text-only template; `template: auto` takes the model type's."""
    name = TEMPLATE_PLUGINS.get(template_name)
    if name is None and template_name == "auto":
        name = MODEL_TYPE_PLUGINS.get(model_type or "")
    return PLUGINS[name] if name else None
