"""Vision-language models (VLMs): recognising one from its config, its parts, and which of them train.

transformers 5 builds a VLM (Qwen2.5-VL, Qwen3-VL, Gemma 3 4B/12B/27B, LLaVA, ...) as one module holding three parts:
a vision tower (the image encoder), a projector (image features -> the language model's width) and a language model
(a decoder like any text model, with the output head beside it). LLaMA-Factory 0.9.5 names the three per model type
by fragments of parameter names (src/llamafactory/model/model_utils/visual.py, its composite-model table, copied
below as data) and decides what trains by substring match on those names:
- `freeze_vision_tower` (default true), `freeze_multi_modal_projector` (default true), `freeze_language_model` (default
  false) make those parts' names "forbidden" (get_forbidden_modules);
- full and freeze tuning leave every forbidden parameter frozen (_setup_full_tuning / _setup_freeze_tuning; freeze
  tuning adds the projector to what trains when it is not frozen);
- LoRA: `lora_target: all` is every linear layer's leaf name outside the head and the projector (and the vision tower
  while it is frozen) (find_all_linear_modules), then every module whose name holds a target and no forbidden or
  conflicting fragment (patch_target_modules): LoRA on the language model by default.
The same rules here give the same trainable parameters (tests/test_vlm_freeze.py checks them against names recorded
from LLaMA-Factory itself, tests/golden/lf_vlm_trainable.json).

One difference, said when it applies: with LoRA, LLaMA-Factory's `freeze_multi_modal_projector: false` changes nothing
for `lora_target: all` (the projector is never among its targets); here it trains the projector in full, saved
with the adapter (peft's modules_to_save), which is what the key says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from torch import nn

from steadytune.config import ConfigError


@dataclass(frozen=True)
class VisionParts:
    """Fragments of parameter names, per part of a VLM (matched as substrings, as LLaMA-Factory matches them)."""
    projector: tuple[str, ...] = ("multi_modal_projector",)
    vision_tower: tuple[str, ...] = ("vision_tower",)
    language_model: tuple[str, ...] = ("language_model", "lm_head")
    # names that must never get LoRA even where a target matches them (a convolution named like a linear's leaf)
    lora_conflicts: tuple[str, ...] = ()


_QWEN2_VL = VisionParts(projector=("visual.merger",), vision_tower=("visual.patch_embed", "visual.blocks"),
                        lora_conflicts=("patch_embed",))
_QWEN3_VL = VisionParts(projector=("visual.merger",), vision_tower=("visual.pos_embed", "visual.patch_embed",
                                                                    "visual.blocks", "visual.deepstack_merger_list"),
                        lora_conflicts=("patch_embed",))
_QWEN3_5 = VisionParts(projector=("model.visual.merger",), vision_tower=("visual.pos_embed", "visual.patch_embed",
                                                                       "visual.blocks"),
                       lora_conflicts=("patch_embed",))
_GLM4V = _QWEN2_VL
# LLaMA-Factory 0.9.5's composite-model table, for the model types transformers 5 builds itself.
VISION_PARTS: dict[str, VisionParts] = {
    "qwen2_vl": _QWEN2_VL, "qwen2_5_vl": _QWEN2_VL, "qwen3_vl": _QWEN3_VL, "qwen3_vl_moe": _QWEN3_VL,
    "qwen3_5": _QWEN3_5, "qwen3_5_moe": _QWEN3_5,
    "glm4v": _GLM4V, "glm4v_moe": _GLM4V,
    "gemma3": VisionParts(),
    "gemma3n": VisionParts(vision_tower=("vision_tower", "audio_tower"),
                           lora_conflicts=("timm_model", "subsample_conv_projection")),
    "llava": VisionParts(), "llava_next": VisionParts(), "llava_next_video": VisionParts(), "video_llava": VisionParts(),
    "internvl": VisionParts(), "paligemma": VisionParts(),
    "mistral3": VisionParts(projector=("model.multi_modal_projector",)),
    "mllama": VisionParts(vision_tower=("vision_model",)),
    "llama4": VisionParts(vision_tower=("vision_model",)),
}

# Keys of a batch that carry images or videos, or say where their tokens sit: handed to a VLM's forward as they are.
VISION_INPUT_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts",
                     "token_type_ids", "mm_token_type_ids", "image_sizes")
PIXEL_KEYS = ("pixel_values", "pixel_values_videos")


def config_model_type(config) -> str | None:
    return config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)


def is_vision_config(config) -> bool:
    """A config (a transformers config or config.json as a dict) of a model with a vision tower that transformers
    builds as an image-text-to-text model."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    vision = config.get("vision_config") if isinstance(config, dict) else getattr(config, "vision_config", None)
    return vision is not None and config_model_type(config) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def is_vision_folder(path: str | Path) -> bool:
    """Whether a model folder holds a VLM (read from its config.json; a missing or unreadable one: no)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and is_vision_config(config)


def _base(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def is_vision_model(model: nn.Module) -> bool:
    return is_vision_config(_base(model).config)


def vision_parts(model_or_config) -> VisionParts | None:
    """The part names of a VLM's model type (VisionParts' defaults for a VLM type the table does not list); None for
    a text model."""
    config = model_or_config if not isinstance(model_or_config, nn.Module) else _base(model_or_config).config
    if not is_vision_config(config):
        return None
    return VISION_PARTS.get(config_model_type(config), VisionParts())


def forbidden_parts(parts: VisionParts, method) -> list[str]:
    """Name fragments that must not train under `method`'s freeze_* keys (LLaMA-Factory's get_forbidden_modules)."""
    forbidden: list[str] = []
    if method.freeze_vision_tower:
        forbidden += parts.vision_tower
    if method.freeze_multi_modal_projector:
        forbidden += parts.projector
    if method.freeze_language_model:
        forbidden += parts.language_model
    return forbidden


def vision_freeze_reason(method) -> str:
    """The freeze_* keys as a clause for the decisions printed at start."""
    return ", ".join(f"{k}: {str(getattr(method, k)).lower()}" for k in
                     ("freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model"))


def _matches(name: str, fragments: Iterable[str]) -> bool:
    return any(f in name for f in fragments)


def freeze_forbidden(model: nn.Module, method) -> list[str]:
    """Full and freeze tuning of a VLM: every parameter of a frozen part stops training; -> the fragments frozen."""
    parts = vision_parts(model)
    if parts is None:
        return []
    forbidden = forbidden_parts(parts, method)
    for name, param in model.named_parameters():
        if _matches(name, forbidden):
            param.requires_grad_(False)
    return forbidden


def projector_trains_in_freeze(model: nn.Module, method) -> list[str]:
    """Freeze tuning with `freeze_multi_modal_projector: false`: the projector's fragments, which train beside the
    chosen layers (LLaMA-Factory adds them to its trainable layers)."""
    parts = vision_parts(model)
    return list(parts.projector) if parts is not None and not method.freeze_multi_modal_projector else []


def unquantised_vision_modules(config) -> list[str]:
    """QLoRA on a VLM quantises its language model only: patterns (transformers' bitsandbytes skip list: a regex
    matched from the start of a module's name) for the vision tower and the projector, which stay in the load dtype.
    Differs from LLaMA-Factory, which quantises every linear layer: the vision tower is a small share of the weights
    (Qwen2.5-VL-7B: 0.67 B of 8.3 B parameters; 4 bits would save about 1 GiB), and it stays the encoder the model
    was trained with, its image features not rounded. [] for a text model."""
    import re

    parts = vision_parts(config) if config is not None else None
    if parts is None:
        return []
    return [rf"(?:.*\.)?{re.escape(fragment)}" for fragment in (*parts.vision_tower, *parts.projector)]


def _is_linear(module: nn.Module) -> bool:
    # LLaMA-Factory's test: the class name says Linear (peft's and bitsandbytes' linears too), not an embedding
    name = type(module).__name__
    return "Linear" in name and "Embedding" not in name


def all_linear_leaves(model: nn.Module, method) -> list[str]:
    """`lora_target: all` on a VLM: the leaf names of its linear layers outside the output head, the projector, and
    the vision tower while frozen (LLaMA-Factory's find_all_linear_modules)."""
    parts = vision_parts(model)
    excluded = ["lm_head", *parts.projector] + (list(parts.vision_tower) if method.freeze_vision_tower else [])
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if _is_linear(module) and not _matches(name, excluded)})


def lora_module_names(model: nn.Module, targets: list[str], method) -> list[str]:
    """The full names of the modules LoRA adapts on a VLM: those whose name holds a target and no fragment of a frozen
    part or a conflict (LLaMA-Factory's patch_target_modules); only linear layers are kept, so a container module
    whose name happens to hold a target is not handed to peft. An empty result is an error naming what froze it."""
    parts = vision_parts(model)
    forbidden = forbidden_parts(parts, method) + list(parts.lora_conflicts)
    names = [name for name, module in model.named_modules()
             if _matches(name, targets) and not _matches(name, forbidden) and _is_linear(module)]
    if not names:
        frozen = [k for k in ("freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model")
                  if getattr(method, k)]
        raise ConfigError(f"lora_target: {method.lora_target}: no linear layer of this vision-language model is left "
                          f"to adapt once {', '.join(frozen) or 'nothing'} is applied (set freeze_language_model: "
                          "false, or freeze_vision_tower: false to adapt the vision tower)")
    return names


def projector_modules(model: nn.Module) -> list[str]:
    """The projector's module names as they appear in the model (the shortest names holding a projector fragment),
    for peft's modules_to_save."""
    parts = vision_parts(model)
    found = [name for name, _ in model.named_modules() if any(name.endswith(p) for p in parts.projector)]
    return sorted(found)


def part_of(name: str, parts: VisionParts) -> str:
    """Which part a parameter belongs to: vision_tower, projector or language_model (everything else: the
    language model's embeddings, norms and head)."""
    if _matches(name, parts.projector):
        return "projector"
    if _matches(name, parts.vision_tower):
        return "vision_tower"
    return "language_model"


# The name part of peft's ModulesToSaveWrapper under which the module's untouched original sits (what the adapter's
# disable_adapter() switches back to); the trained copy is under modules_to_save.<adapter>.
PEFT_FROZEN_COPY = ".original_module."


def trainable_by_part(model: nn.Module) -> dict[str, tuple[int, int]]:
    """{part: (trainable, total) parameters}, printed at start so that nothing is frozen silently."""
    parts = vision_parts(model)
    counts: dict[str, list[int]] = {"vision_tower": [0, 0], "projector": [0, 0], "language_model": [0, 0]}
    for name, param in model.named_parameters():
        if PEFT_FROZEN_COPY in name:   # peft keeps the untrained original beside a trained module (modules_to_save):
            continue                   # counted, the whole projector training read "half of it trainable"
        part = part_of(name, parts)
        counts[part][1] += param.numel()
        if param.requires_grad:
            counts[part][0] += param.numel()
    return {k: (v[0], v[1]) for k, v in counts.items()}


def describe_trainable(model: nn.Module) -> str:
    """One line: trainable / total parameters of each part."""
    return "; ".join(f"{part} {trainable:,} of {total:,} trainable" for part, (trainable, total)
                     in trainable_by_part(model).items())


# ---------------------------------------------------------------------------------------------------------
# The forward: which body a batch goes through
# ---------------------------------------------------------------------------------------------------------

def takes_pixels(inputs: dict) -> bool:
    return any(inputs.get(k) is not None for k in PIXEL_KEYS)


def vision_frozen(model: nn.Module) -> bool:
    """Whether nothing in the vision tower or the projector trains (the default): images are then encoded without
    autograd (no activations kept for a backward that never reaches them)."""
    parts = vision_parts(model)
    return not any(p.requires_grad for name, p in model.named_parameters()
                   if _matches(name, (*parts.vision_tower, *parts.projector)))


def _feature_arguments(method, inputs: dict, config) -> dict:
    """The arguments a family's get_image_features / get_video_features takes, by name: pixels and grids from the
    batch, the rest (LLaVA's vision_feature_layer, ...) from the model's config."""
    import inspect

    taken = {}
    for name in inspect.signature(method).parameters:
        if name in inputs:
            taken[name] = inputs[name]
        elif name.startswith("vision_feature") and hasattr(config, name):
            taken[name] = getattr(config, name)
    return taken


def encode_media(model: nn.Module, inputs: dict, video_inputs: tuple[str, str] = ("pixel_values_videos",
                                                                               "video_grid_thw")) -> dict:
    """The image (and video) encoder's outputs for a batch, as transformers' `mm_encoder_outputs` takes them: the
    vision tower and projector run once here, on the pixel inputs alone. Computed apart from the language model's
    forward so that nothing of the text side reaches the vision tower (a packed batch's cu_seq_lens_* would be read by
    its attention as its own), and without autograd when the vision parts are frozen."""
    import contextlib

    import torch

    body = multimodal_body(model)
    grad = contextlib.nullcontext() if not vision_frozen(model) else torch.no_grad()
    encoded = {}
    with grad:
        if inputs.get("pixel_values") is not None:
            method = body.get_image_features
            encoded["image"] = method(**_feature_arguments(method, inputs, body.config), return_dict=True)
        if inputs.get(video_inputs[0]) is not None and hasattr(body, "get_video_features"):
            method = body.get_video_features
            encoded["video"] = method(**_feature_arguments(method, inputs, body.config), return_dict=True)
    return encoded


def images_in(pixels: dict) -> int:
    """How many images a processor output holds (Qwen: one grid per image; the others: one pixel tensor each)."""
    if pixels.get("image_grid_thw") is not None:
        return len(pixels["image_grid_thw"])
    values = pixels.get("pixel_values")
    return 0 if values is None else len(values)


def concat_pixels(pixels: list[dict]) -> dict:
    """The pixel inputs of several prompts in one batch, in row order (the model walks image tokens left to right,
    row by row, and takes the features in the same order)."""
    import torch

    parts: dict[str, list] = {}
    for one in pixels:
        for key, value in one.items():
            parts.setdefault(key, []).append(value)
    return {key: torch.cat(values) for key, values in parts.items()}


def type_id_inputs(model: nn.Module, input_ids) -> dict:
    """The token-type ids a VLM reads beside the ids, made from them: Qwen-VL's mm_token_type_ids (1 image, 2 video:
    transformers computes the 3-D rope positions from them), Gemma 3's token_type_ids (1 on image soft tokens: its
    attention is bidirectional inside an image); {} for the others."""
    config = _base(model).config
    image = getattr(config, "image_token_id", None)
    if getattr(config, "vision_start_token_id", None) is not None:
        types = (input_ids == image).long() + 2 * (input_ids == getattr(config, "video_token_id", -1)).long()
        return {"mm_token_type_ids": types}
    if config_model_type(config) == "gemma3":
        return {"token_type_ids": (input_ids == image).long()}
    return {}


def multimodal_body(model: nn.Module) -> nn.Module:
    """The VLM's body without the head (vision tower + projector + language model: `model.model` in transformers 5),
    which takes pixel inputs and returns the language model's last hidden states."""
    return _base(model).model
