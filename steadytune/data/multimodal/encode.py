"""One multimodal conversation -> features: input_ids, labels, attention_mask, the media references (pixels are made
per batch by the collator, as LLaMA-Factory does: a dataset's pixel values would not fit in memory), the grid sizes,
and the token-type ids the model needs.

The ids are LLaMA-Factory's (placeholders expanded by the template's plugin, then the chat template encodes the turns,
then cutoff_len shares the room between prompt and answer by its rule), with one difference, on purpose:
**an image's tokens are never cut.** LLaMA-Factory's truncation can end a prompt inside a run of `<|image_pad|>`,
and training then stops with "Image features and image tokens do not match" (LLaMA-Factory #5968, #9313,
QwenLM/Qwen3-VL#556). Here, when its rule would cut a media token:
- `media_truncation: shorten_text` (the default) keeps every media token and cuts text instead (the prompt's text
  from its end, then the answer), and refuses the row, naming it, when the media tokens alone leave no room for one
  trained token;
- `media_truncation: refuse` refuses the row, naming it and the cutoff_len that would fit it.
A row whose ids LLaMA-Factory's rule leaves whole is encoded exactly as there (tests/golden/multimodal/).

Image and video tokens never carry a label, not even with train_on_prompt (LLaMA-Factory would label them then; a
pad token standing for pixels is not a prediction target).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steadytune.config import ConfigError
from steadytune.data.encode import IGNORE_INDEX, Truncation, add_turn, close_turns, encode_oneturn, infer_seqlen
from steadytune.data.multimodal.media import open_image, resolve_media, video_source
from steadytune.data.multimodal.plugins import TEMPLATE_PLUGINS, MediaPlugin, flatten, plugin_for
from steadytune.data.multimodal.preprocess import (
    DecodedVideo,
    MediaSettings,
    decode_video,
    frames_video,
    resize_image,
)
from steadytune.data.templates import Template, encode_parts
from steadytune.errors import DataError

MEDIA_TRUNCATIONS = ("shorten_text", "refuse")


@dataclass
class MediaContext:
    """What encoding a multimodal row needs beside the chat template: the template's plugin, the model's processor
    (or an object with its parts), and the media settings."""
    plugin: MediaPlugin
    processor: Any
    settings: MediaSettings = MediaSettings()
    pan_and_scan: bool = False           # Gemma 3's image_do_pan_and_scan
    truncation: str = "shorten_text"     # media_truncation (module docstring)

    @property
    def tokenizer(self) -> Any:
        return getattr(self.processor, "tokenizer", None)


def media_context(data: Any, template_name: str, processor: Any) -> MediaContext | None:
    """The MediaContext of a run (`data`: the config's data section), None for a text-only run (no processor).
    Refuses a processor paired with a template that has no media plugin."""
    if processor is None:
        return None
    model_type = getattr(processor, "model_type", None)   # processor.py records it
    # `template: auto` resolves to the tokenizer's chat format (or `empty`); its media tokens are the model family's
    plugin = plugin_for("auto" if getattr(data, "template", None) == "auto" else template_name, model_type)
    if plugin is None:
        raise ConfigError(f"template: {template_name} has no image/video support for model type {model_type}; a "
                          f"vision-language model needs its family's template ({', '.join(TEMPLATE_PLUGINS)})")
    settings = MediaSettings(data.image_max_pixels, data.image_min_pixels, data.video_max_pixels,
                             data.video_min_pixels, data.video_fps, data.video_maxlen)
    return MediaContext(plugin, processor, settings, data.image_do_pan_and_scan, data.media_truncation)


def with_resolved_media(example: dict, media_dir: str) -> dict:
    """The example with its image/video references resolved against media_dir (media.resolve_media)."""
    if not example.get("images") and not example.get("videos"):
        return example
    where = example.get("where", "row")
    return {**example, "images": resolve_media(example.get("images"), media_dir, where, "image"),
            "videos": resolve_media(example.get("videos"), media_dir, where, "video")}


def load_images(refs: list, where: str, ctx: MediaContext) -> list:
    """The row's images, opened and resized as LLaMA-Factory does."""
    s = ctx.settings
    return [resize_image(open_image(ref, f"{where}: images[{i}]"), s.image_max_pixels, s.image_min_pixels,
                         ctx.plugin.qwen) for i, ref in enumerate(refs)]


def load_videos(refs: list, where: str, ctx: MediaContext) -> list[DecodedVideo]:
    """The row's videos: each a file (frames sampled by video_fps / video_maxlen) or a list of frame images."""
    out = []
    for i, ref in enumerate(refs):
        here = f"{where}: videos[{i}]"
        if isinstance(ref, list):
            frames = [open_image(frame, f"{here}[{j}]") for j, frame in enumerate(ref)]
            out.append(frames_video(frames, ctx.settings, ctx.plugin.qwen))
        else:
            source, name = video_source(ref, here)
            out.append(decode_video(source, name, ctx.settings, here, ctx.plugin.qwen))
    return out


def media_inputs(example: dict, ctx: MediaContext) -> tuple[dict, list[DecodedVideo]]:
    """(the processor's output for the row's media, the decoded videos)."""
    where = example.get("where", "row")
    images = load_images(example.get("images") or [], where, ctx)
    videos = load_videos(example.get("videos") or [], where, ctx)
    if not images and not videos:
        return {}, []
    return ctx.plugin.pixel_inputs(images, videos, ctx.processor, ctx.pan_and_scan), videos


def check_placeholders(example: dict, plugin: MediaPlugin) -> None:
    """As LLaMA-Factory: as many `<image>` / `<video>` placeholders in the messages as images / videos in the row."""
    where = example.get("where", "row")
    n_images, n_videos, n_audios = plugin.count_placeholders(example["messages"])
    images, videos = len(example.get("images") or []), len(example.get("videos") or [])
    if n_images != images:
        raise DataError(f"{where}: {n_images} <image> placeholder(s) in the messages but {images} image(s) in the row")
    if n_videos != videos:
        raise DataError(f"{where}: {n_videos} <video> placeholder(s) in the messages but {videos} video(s) in the row")
    if images and plugin.image_token is None:
        raise DataError(f"{where}: template's model takes no images")
    if videos and plugin.video_token is None:
        raise DataError(f"{where}: the {plugin.name} template's model takes no video (images only)")
    if n_audios:
        raise DataError(f"{where}: <audio> placeholders: audio input is not supported")


def encode_multimodal(template: Template, ctx: MediaContext, example: dict, cutoff_len: int,
                      train_on_prompt: bool = False, mask_history: bool = False) -> tuple[dict | None, Truncation | None]:
    """(features, what cutoff_len cut) for one conversation with media; features None when no answer token is left
    (as the text path). Raises DataError naming the row when its media tokens cannot be kept whole."""
    if ctx.truncation not in MEDIA_TRUNCATIONS:
        raise ValueError(f"media_truncation must be one of {MEDIA_TRUNCATIONS}, got {ctx.truncation!r}")
    check_placeholders(example, ctx.plugin)
    tokenizer = ctx.tokenizer
    inputs, videos = media_inputs(example, ctx)
    messages = ctx.plugin.expand(example["messages"], inputs, ctx.processor, videos)
    per_message = template.message_parts(messages, example.get("system"), example.get("tools"), mask_history)
    encoded = [encode_parts(tokenizer, parts) for parts in per_message]
    pairs = [(encoded[i], encoded[i + 1]) for i in range(0, len(encoded), 2)]
    media_ids = set(ctx.plugin.media_token_ids(tokenizer))
    n_media = sum(1 for ids in encoded for t in ids if t in media_ids)
    expected = _expected_media_tokens(inputs, ctx)
    if n_media != expected:   # a tokenizer that splits the media token, or a processor at odds with the plugin
        raise DataError(f"{example.get('where', 'row')}: the template wrote {n_media} media tokens but the processor "
                        f"made features for {expected}: does the tokenizer know {ctx.plugin.image_token} as one token?")
    input_ids, labels, cut = _truncate(template, pairs, cutoff_len, train_on_prompt, mask_history, media_ids, None)
    kept = sum(1 for t in input_ids if t in media_ids)
    if kept != n_media:
        needed = sum(len(s) + len(t) for s, t in pairs) + (1 if template.efficient_eos else 0)
        if ctx.truncation == "refuse":
            raise DataError(f"{example.get('where', 'row')}: cutoff_len {cutoff_len} would cut this row's image/video "
                            f"tokens ({n_media} of them; the row needs {needed} tokens in all); raise cutoff_len, lower "
                            f"image_max_pixels, or set media_truncation: shorten_text to cut its text instead")
        input_ids, labels, cut = _truncate(template, pairs, cutoff_len, train_on_prompt, mask_history,
                                           ctx.plugin.block_token_ids(tokenizer), example.get("where", "row"))
    labels = [IGNORE_INDEX if t in media_ids else label for t, label in zip(input_ids, labels)]
    if all(label == IGNORE_INDEX for label in labels):
        return None, cut
    features = {"input_ids": input_ids, "labels": labels, "attention_mask": [1] * len(input_ids),
                **ctx.plugin.type_ids(input_ids, tokenizer)}
    features.update(_grids(inputs))
    if example.get("images"):
        features["images"] = list(example["images"])
    if example.get("videos"):
        features["videos"] = list(example["videos"])
    return features, cut


def encode_multimodal_prediction(template: Template, ctx: MediaContext, example: dict,
                                 cutoff_len: int) -> tuple[list[int], list[int]]:
    """(prompt ids, reference answer ids) of a row for do_predict, as data/encode.py's encode_prediction, with the
    prompt's media tokens kept whole (its text cut instead; the row refused when the media alone do not fit)."""
    check_placeholders(example, ctx.plugin)
    inputs, videos = media_inputs(example, ctx)
    messages = ctx.plugin.expand(example["messages"], inputs, ctx.processor, videos)
    if messages[-1]["role"] not in ("assistant", "function_call"):
        messages = messages + [{"role": "assistant", "content": ""}]
    prompt, answer = encode_oneturn(template, ctx.tokenizer, messages, example.get("system"), example.get("tools"))
    prompt_len, answer_len = infer_seqlen(len(prompt), len(answer), cutoff_len)
    protected = ctx.plugin.block_token_ids(ctx.tokenizer)
    needed = _n_media(prompt, protected)
    if prompt_len < len(prompt) and _n_media(prompt[:prompt_len], protected) < needed:
        if needed > cutoff_len:
            raise DataError(f"{example.get('where', 'row')}: its image/video tokens need {needed} of cutoff_len "
                            f"{cutoff_len} tokens; raise cutoff_len or lower image_max_pixels / video_max_pixels")
        prompt_len = max(prompt_len, needed)
        answer_len = min(answer_len, cutoff_len - prompt_len)
        return _keep(prompt, prompt_len, protected), answer[:answer_len]
    return prompt[:prompt_len], answer[:answer_len]


def encode_multimodal_prompt(template: Template, ctx: MediaContext, example: dict, cutoff_len: int
                             ) -> tuple[dict, int]:
    """(a GRPO prompt with media: its ids up to where the answer starts, its token types, grids and media references,
    from which the roll-out and the training batches make pixels; the tokens cutoff_len cut from it, text only: its
    media tokens are kept whole, the row refused when they alone do not fit)."""
    check_placeholders(example, ctx.plugin)
    inputs, videos = media_inputs(example, ctx)
    messages = ctx.plugin.expand(example["messages"], inputs, ctx.processor, videos)
    prompt, _ = encode_oneturn(template, ctx.tokenizer, messages + [{"role": "assistant", "content": ""}],
                               example.get("system"), example.get("tools"))
    cut = max(0, len(prompt) - cutoff_len)
    if cut:
        protected = ctx.plugin.block_token_ids(ctx.tokenizer)
        if _n_media(prompt, protected) > cutoff_len:
            raise DataError(f"{example.get('where', 'row')}: its image/video tokens need {_n_media(prompt, protected)}"
                            f" of cutoff_len {cutoff_len} tokens; raise cutoff_len or lower image_max_pixels / "
                            "video_max_pixels")
        prompt = _keep(prompt[::-1], cutoff_len, protected)[::-1]   # the latest text: the question, the answer's start
    features = {"input_ids": prompt, **ctx.plugin.type_ids(prompt, ctx.tokenizer), **_grids(inputs)}
    for key in ("images", "videos"):
        if example.get(key):
            features[key] = list(example[key])
    return features, cut


def _expected_media_tokens(inputs: dict, ctx: MediaContext) -> int:
    """How many media tokens the model will fill with features for this row's inputs."""
    total = 0
    merge = None
    if "image_grid_thw" in inputs or "video_grid_thw" in inputs:
        merge = int(ctx.processor.image_processor.merge_size) ** 2
    for key in ("image_grid_thw", "video_grid_thw"):
        if key in inputs:
            total += sum(int(g.prod()) // merge for g in inputs[key])
    if merge is None and "pixel_values" in inputs:
        texts = ctx.plugin.image_texts(inputs, ctx.processor)
        token = ctx.plugin.image_token
        total += sum(t.count(token) for t in texts)
    return total


def _grids(inputs: dict) -> dict:
    out = {}
    for key in ("image_grid_thw", "video_grid_thw"):
        if key in inputs:
            out[key] = [[int(x) for x in g] for g in inputs[key]]
    if "num_crops" in inputs:
        out["num_crops"] = [int(x) for x in flatten(inputs["num_crops"])]
    if "second_per_grid_ts" in inputs:   # Qwen2.5-VL video: its rope spaces frames by it
        out["second_per_grid_ts"] = [float(x) for x in inputs["second_per_grid_ts"]]
    return out


def _truncate(template: Template, pairs: list, cutoff_len: int, train_on_prompt: bool, mask_history: bool,
              media_ids: set, keep_media_in: str | None) -> tuple[list[int], list[int], Truncation | None]:
    """LLaMA-Factory's supervised truncation (data/encode.py's rule); with `keep_media_in` (the row, for messages)
    media tokens are kept whole: each turn keeps its media tokens and as much of its text as the room allows,
    room for the later turns' media tokens reserved first."""
    input_ids: list[int] = []
    labels: list[int] = []
    total = 1 if template.efficient_eos else 0
    truncated = False
    kept_source = kept_target = 0
    order = pairs[::-1] if mask_history else pairs
    protected_after = [sum(_n_media(s, media_ids) + _n_media(t, media_ids) for s, t in order[k + 1:])
                       for k in range(len(order))]
    for turn, (source, target) in enumerate(order):
        if keep_media_in is None and total >= cutoff_len:
            truncated = True
            break
        room = cutoff_len - total
        if keep_media_in is not None:
            room -= protected_after[turn]
            need = _n_media(source, media_ids) + _n_media(target, media_ids)
            if room < need or (room <= 0 and need == 0):
                if need == 0 and protected_after[turn] == 0:
                    truncated = True
                    break
                if room < need:
                    raise DataError(f"{keep_media_in}: its image/video tokens need "
                                    f"{need + protected_after[turn] + total} of cutoff_len {cutoff_len} tokens before "
                                    f"any text; raise cutoff_len or lower image_max_pixels / video_max_pixels")
        source_len, target_len = infer_seqlen(len(source), len(target), max(room, 0))
        if keep_media_in is not None:
            media_in_source = _n_media(source, media_ids)
            if source_len < media_in_source:
                source_len = media_in_source
                target_len = min(len(target), max(room - source_len, 0))
            target_len = max(target_len, min(_n_media(target, media_ids), len(target)))
            kept_s, kept_t = _keep(source, source_len, media_ids), _keep(target, target_len, media_ids)
        else:
            kept_s, kept_t = source[:source_len], target[:target_len]
        truncated |= (len(kept_s), len(kept_t)) != (len(source), len(target))
        total += len(kept_s) + len(kept_t)
        kept_source, kept_target = kept_source + len(kept_s), kept_target + len(kept_t)
        input_ids, labels = add_turn(template, input_ids, labels, turn, kept_s, kept_t, train_on_prompt, mask_history)
    return input_ids, labels, close_turns(template, input_ids, labels, pairs, kept_source, kept_target, truncated)


def _n_media(ids: list[int], media_ids: set) -> int:
    return sum(1 for t in ids if t in media_ids)


def _keep(ids: list[int], length: int, media_ids: set) -> list[int]:
    """`length` tokens of `ids`: every media token, and the earliest text tokens for the rest of the room."""
    if length >= len(ids):
        return list(ids)
    text_room = length - _n_media(ids, media_ids)
    out = []
    for t in ids:
        if t in media_ids:
            out.append(t)
        elif text_room > 0:
            out.append(t)
            text_room -= 1
    return out
