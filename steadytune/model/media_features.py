"""A vision-language model's forward in two halves, joined here: the image encoder's features as plain tensors, then
the language model over the text with those features in place of their placeholder tokens.

Why not hand the features to the model's own forward: transformers 5.17 (the version on our GPU machines) has no
way to pass features computed beforehand (its multimodal forward takes pixels only; the `mm_encoder_outputs`
argument came later), and a keyword it does not know is passed on to the attention and ignored, so a step that
encoded its images apart trained on the text alone. Joining them here works the same on every version.

How, so that a CUDA graph can record it (training/vision_step.py): the features are one tensor `media_features`
[M, hidden] (the images' rows, then the videos', each in the order their tokens appear in the flattened batch, then
any zero rows a static shape adds); every position finds its row with an index computed on the device from the
ids (a cumulative count of media tokens), and the input embeddings are gathered from the text's and the features'
rows at once. Nothing is read back to the host, and the same shapes repeat when M does. Qwen3-VL's deepstack
features (added to the hidden states after the first decoder layers, at the media positions) are gathered the same
way, from a zero row for text, and added where transformers adds them.

The values equal the model's own forward: text rows are the embedding as it is, media rows the feature as it is
(tests/test_vlm_train.py, test_vlm_speed.py)."""

from __future__ import annotations

import contextlib
import inspect

import torch
from torch import nn

from steadytune.model.vision import (
    PIXEL_KEYS,
    VISION_INPUT_KEYS,
    _base,
    encode_media,
    multimodal_body,
    type_id_inputs,
    vision_frozen,
)

# Batch keys that carry encoded media (in place of the pixel keys): what a step reads once the images are encoded.
FEATURE_KEYS = ("media_features", "deepstack_features")
# A Qwen-VL tower's inputs worked out from the image grids with the batch (data/multimodal/vision_layout.py makes
# them under these names: the tower's own keywords behind this prefix; tests/test_vlm_speed.py holds the two lists
# equal): given them, the tower reads nothing back from the GPU.
LAYOUT_PREFIX = "vision_"
LAYOUT_KEYS = tuple(LAYOUT_PREFIX + k for k in ("position_ids", "cu_seqlens", "max_seqlen", "window_index",
                                                 "cu_window_seqlens", "max_window_seqlen", "interp_indices",
                                                 "interp_weights"))
# What the language model takes beside the embeddings (the varlen packing kernel's keys among them).
LANGUAGE_MODEL_KEYS = ("attention_mask", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                       "max_length_k")


def has_features(inputs: dict) -> bool:
    return inputs.get("media_features") is not None


def _rows(value) -> torch.Tensor:
    """An encoder output (one tensor, or one per image) as rows of features [tokens, hidden]."""
    if isinstance(value, torch.Tensor):
        return value.reshape(-1, value.shape[-1])
    return torch.cat([v.reshape(-1, v.shape[-1]) for v in value])


def features_of(encoded: dict) -> dict:
    """encode_media's outputs as the step's tensors: media_features [M, hidden] (images' then videos'), and for
    Qwen3-VL deepstack_features [layers, M, hidden] in the same row order."""
    parts, deep = [], []
    for kind in ("image", "video"):
        out = encoded.get(kind)
        if out is None:
            continue
        parts.append(_rows(out.pooler_output))
        layers = getattr(out, "deepstack_features", None)
        if layers is not None:
            deep.append(torch.stack([_rows(layer) for layer in layers]))
    if not parts:
        return {}
    features = {"media_features": torch.cat(parts)}
    if deep:
        features["deepstack_features"] = torch.cat(deep, dim=1)
    return features


def tokens_per_image(encoded: dict) -> list[int]:
    """How many feature rows each encoded image has (Qwen: one tensor per image; Gemma 3, LLaVA: [images, tokens,
    hidden])."""
    pooled = encoded["image"].pooler_output
    if isinstance(pooled, torch.Tensor):
        return [pooled.shape[1]] * pooled.shape[0] if pooled.dim() == 3 else [1] * pooled.shape[0]
    return [len(p) for p in pooled]


def select_images(encoded: dict, index: list[int]) -> dict:
    """features_of's tensors for images `index` (repeats allowed) of those encode_media encoded, in that order: label
    scoring encodes each prompt's images once and hands the same features to every label's row."""
    counts = tokens_per_image(encoded)
    starts = [sum(counts[:i]) for i in range(len(counts))]
    features = features_of({"image": encoded["image"]})
    rows = torch.cat([torch.arange(starts[i], starts[i] + counts[i]) for i in index])
    rows = rows.to(features["media_features"].device)
    selected = {"media_features": features["media_features"].index_select(0, rows)}
    if "deepstack_features" in features:
        selected["deepstack_features"] = features["deepstack_features"].index_select(1, rows)
    return selected


def encode_features(model: nn.Module, inputs: dict) -> dict:
    """The batch's images and videos through the vision tower and projector (model/vision.encode_media: without
    autograd while both are frozen), as features_of's tensors. With a precomputed layout (LAYOUT_KEYS: images only)
    the tower is called with it directly, its merged output already the features' rows in image order (padding
    images' rows last)."""
    layout = {k[len(LAYOUT_PREFIX):]: inputs[k] for k in LAYOUT_KEYS if k in inputs}
    if not layout or inputs.get("pixel_values_videos") is not None:
        return features_of(encode_media(model, inputs))
    tower = multimodal_body(model).visual
    with contextlib.nullcontext() if not vision_frozen(model) else torch.no_grad():
        out = tower(inputs["pixel_values"].type(tower.dtype), None, **layout)
    return features_of({"image": out})


def media_token_ids(model: nn.Module) -> tuple[int | None, int | None]:
    config = _base(model).config
    return getattr(config, "image_token_id", None), getattr(config, "video_token_id", None)


def media_index(input_ids: torch.Tensor, image_id: int | None, video_id: int | None) -> torch.Tensor:
    """[tokens of the flattened batch]: the feature row each position takes (-1 for text): the k-th image token the
    k-th row, the k-th video token the row after every image's. Computed on the device, no host sync."""
    ids = input_ids.reshape(-1)
    is_image = ids == image_id if image_id is not None else torch.zeros_like(ids, dtype=torch.bool)
    index = torch.cumsum(is_image, 0) - 1
    media = is_image
    if video_id is not None:
        is_video = ids == video_id
        index = torch.where(is_video, is_image.sum() + torch.cumsum(is_video, 0) - 1, index)
        media = is_image | is_video
    return torch.where(media, index, -1)


def place_media(embeds: torch.Tensor, index: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """embeds [batch, tokens, hidden] with the media positions' rows taken from `features` (one gather over the
    text's and the features' rows: gradients reach both, each row from one place)."""
    batch, tokens, hidden = embeds.shape
    flat = embeds.reshape(batch * tokens, hidden)
    source = torch.cat([flat, features.to(flat.dtype)])
    rows = torch.where(index >= 0, index + batch * tokens, torch.arange(batch * tokens, device=index.device))
    return source.index_select(0, rows).view(batch, tokens, hidden)


def spread_media(index: torch.Tensor, features: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """[batch, tokens, hidden]: `features`' rows at the media positions, zeros elsewhere (deepstack's addend)."""
    source = torch.cat([features.new_zeros(1, features.shape[-1]), features])
    return source.index_select(0, index + 1).view(shape)


@contextlib.contextmanager
def deepstack_added(language_model: nn.Module):
    """Qwen3-VL's text model adds each deepstack feature after its layer through `_deepstack_process(hidden, mask,
    embeds)`, which indexes the hidden states by a boolean mask (a host sync). Inside this block, on this instance
    only, it adds a dense addend instead (spread_media's: zeros at text positions, so the sums are the same)."""
    language_model._deepstack_process = lambda hidden, _mask, addend: hidden + addend.to(hidden.dtype)
    try:
        yield
    finally:
        del language_model._deepstack_process


def qwen_positions(model: nn.Module, inputs: dict) -> torch.Tensor:
    """Qwen-VL's 3-D rope positions worked out by the model (get_rope_index) for a batch that came without them
    (scoring, generation-free evaluation); the collators give them to every training batch."""
    body = multimodal_body(model)
    known = dict(inputs)
    if known.get("mm_token_type_ids") is None:
        known.update(type_id_inputs(model, inputs["input_ids"]))
    method = body.get_rope_index
    accepted = inspect.signature(method).parameters
    positions, _ = method(**{k: v for k, v in known.items() if k in accepted})
    return positions


def language_model_over(model: nn.Module, inputs: dict, features: dict, **kwargs):
    """The VLM's language model (no head) over `inputs`' text with `features` (features_of's tensors) in place of
    the media tokens; -> the language model's output (last_hidden_state)."""
    body = multimodal_body(model)
    image_id, video_id = media_token_ids(model)
    ids = inputs["input_ids"]
    index = media_index(ids, image_id, video_id)
    # media ids may lie outside the vocabulary (Gemma 3's image token): their rows are replaced, any id will do
    embeds = body.get_input_embeddings()(ids.masked_fill(index.view(ids.shape) >= 0, 0))
    embeds = place_media(embeds, index, features["media_features"])
    text = {k: v for k, v in inputs.items() if k in LANGUAGE_MODEL_KEYS}
    if not hasattr(body, "get_rope_index"):
        # Gemma 3, LLaVA, ...: the multimodal body without pixels is their language model behind the masks it
        # builds (Gemma 3's bidirectional attention inside an image, from token_type_ids). Qwen-VL's (3-D rope
        # positions) computes nothing more after merging: its language model is called directly
        extra = {k: inputs[k] for k in ("token_type_ids",) if k in inputs}
        if "token_type_ids" in extra and text.get("cu_seq_lens_q") is not None:
            text = packed_image_attention(text, inputs["token_type_ids"], body.config.get_text_config())
        return body(input_ids=None, inputs_embeds=embeds, **text, **extra, **kwargs)
    if text.get("position_ids") is None:
        text["position_ids"] = qwen_positions(model, inputs)
    language_model = body.language_model
    deep = features.get("deepstack_features")
    if deep is None:
        return language_model(input_ids=None, inputs_embeds=embeds, **text, **kwargs)
    addends = [spread_media(index, layer, embeds.shape) for layer in deep]
    with deepstack_added(language_model):
        return language_model(input_ids=None, inputs_embeds=embeds, visual_pos_masks=index,
                              deepstack_visual_embeds=addends, **text, **kwargs)


def packed_image_masks(cu_seq_lens: torch.Tensor, token_type_ids: torch.Tensor, sliding_window: int | None) -> dict:
    """Gemma 3's attention over one packed row, as boolean masks [1, 1, tokens, tokens] per layer type: each example
    (a piece of cu_seq_lens) attends causally to itself, and the tokens of one image to each other both ways (the
    model's own rule, token_type_ids 1 on image tokens); sliding layers also look back less than the window."""
    tokens = token_type_ids.shape[-1]
    position = torch.arange(tokens, device=token_type_ids.device)
    segment = torch.searchsorted(cu_seq_lens[1:].to(position.dtype).contiguous(), position, right=True)
    image = token_type_ids.reshape(-1) == 1
    starts = image & ~torch.cat([image.new_zeros(1), image[:-1]])
    block = torch.where(image, torch.cumsum(starts, 0), -1)
    allowed = (segment[:, None] == segment[None, :]) & (
        (position[None, :] <= position[:, None]) | ((block[:, None] == block[None, :]) & image[:, None]))
    masks = {"full_attention": allowed[None, None]}
    if sliding_window:
        masks["sliding_attention"] = (allowed & (position[:, None] - position[None, :] < sliding_window))[None, None]
    return masks


def packed_image_attention(text: dict, token_type_ids: torch.Tensor, config) -> dict:
    """A packed row of a model whose images attend both ways (Gemma 3): a varlen kernel attends causally only, so the
    row goes through SDPA with packed_image_masks instead (the cu_seq_lens read here, not passed on: the packing
    attention then takes the masks)."""
    masks = packed_image_masks(text["cu_seq_lens_q"], token_type_ids, getattr(config, "sliding_window", None))
    kept = {k: v for k, v in text.items() if not k.startswith(("cu_seq_lens", "max_length"))}
    return {**kept, "attention_mask": masks}


def text_side(inputs: dict) -> dict:
    """The inputs of a multimodal batch without its pixels (what language_model_over reads beside the features)."""
    return {k: v for k, v in inputs.items() if k not in PIXEL_KEYS and k not in FEATURE_KEYS
            and k not in LAYOUT_KEYS}


def run_multimodal(model: nn.Module, inputs: dict, features: dict | None = None, **kwargs):
    """The multimodal forward over a batch with media: its features (in the batch already, given as features_of's
    tensors, or encoded now from its pixels), then the language model over the text with them."""
    if features is None and has_features(inputs):
        features = {k: inputs[k] for k in FEATURE_KEYS if inputs.get(k) is not None}
    if features is None:
        features = encode_features(model, inputs)
    return language_model_over(model, text_side(inputs), features, **kwargs)


def only_text(inputs: dict) -> dict:
    """A batch without media goes through the language model alone: the vision keys left out."""
    return {k: v for k, v in inputs.items() if k not in VISION_INPUT_KEYS and k not in FEATURE_KEYS
            and k not in LAYOUT_KEYS}
