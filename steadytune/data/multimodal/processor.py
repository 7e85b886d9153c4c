"""The model's processor as the media plugins read it: `MediaProcessor` holds the parts (tokenizer, image processor,
video processor) and the few facts the plugins need (Gemma 3's image sequence, LLaVA's patch size), under the
attribute names of transformers' processors, so a transformers processor can be used in its place.

Why not always transformers' processor: transformers 5 assembles Qwen2-VL's and Qwen3-VL's processors only with
torchvision installed (their video processor needs it), while their image processors run on Pillow alone. So
`load_media_processor(folder)` takes AutoProcessor's when it can be built and the parts otherwise (images then work,
video does not, and says why). transformers 5.17 goes further: without torchvision its AutoImageProcessor itself is a
placeholder that raises, so the image processor is then built from the Pillow class its preprocessor_config.json names
(`Qwen2VLImageProcessor` -> `Qwen2VLImageProcessorPil`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class MediaProcessor:
    tokenizer: Any
    image_processor: Any
    video_processor: Any = None
    model_type: str | None = None   # config.json's, for `template: auto` (plugins.MODEL_TYPE_PLUGINS)
    # Gemma 3
    image_seq_length: int | None = None
    boi_token: str | None = None
    eoi_token: str | None = None
    soft_token: str | None = None
    # LLaVA
    patch_size: int | None = None
    num_additional_image_tokens: int = 0
    vision_feature_select_strategy: str = "default"

    @property
    def full_image_sequence(self) -> str:
        """Gemma 3's text for one image (its processor's attribute of the same name)."""
        return f"\n\n{self.boi_token}{self.soft_token * int(self.image_seq_length)}{self.eoi_token}\n\n"


def gemma3_parts(tokenizer: Any, image_processor: Any, mm_tokens_per_image: int) -> MediaProcessor:
    return MediaProcessor(tokenizer, image_processor, image_seq_length=mm_tokens_per_image,
                          boi_token=getattr(tokenizer, "boi_token", None) or "<start_of_image>",
                          eoi_token=getattr(tokenizer, "eoi_token", None) or "<end_of_image>",
                          soft_token=getattr(tokenizer, "image_token", None) or "<image_soft_token>")


def llava_parts(tokenizer: Any, image_processor: Any, patch_size: int, num_additional_image_tokens: int = 1,
                vision_feature_select_strategy: str = "default") -> MediaProcessor:
    return MediaProcessor(tokenizer, image_processor, patch_size=patch_size,
                          num_additional_image_tokens=num_additional_image_tokens,
                          vision_feature_select_strategy=vision_feature_select_strategy)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def load_image_processor(folder: Path, auto_class: Any) -> Any:
    """The folder's image processor: AutoImageProcessor's, or (where it needs torchvision to exist at all, as on
    transformers 5.17) the Pillow backend of the class preprocessor_config.json names."""
    import transformers

    try:
        return auto_class.from_pretrained(folder)
    except ImportError:
        name = _read_json(folder / "preprocessor_config.json").get("image_processor_type") or ""
        pil = getattr(transformers, name if name.endswith("Pil") else f"{name}Pil", None) if name else None
        if pil is None:
            raise
        log.info("AutoImageProcessor needs torchvision here; using %s", pil.__name__)
        return pil.from_pretrained(folder)


def load_media_processor(folder: str | Path, tokenizer: Any = None) -> Any:
    """The processor of a model folder: transformers' own (AutoProcessor) when it builds, else MediaProcessor from
    its image processor, tokenizer and config (see the module docstring)."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    folder = Path(folder)
    config = _read_json(folder / "config.json")
    try:
        processor = AutoProcessor.from_pretrained(folder)
        if getattr(processor, "image_processor", None) is not None:
            if tokenizer is not None:
                processor.tokenizer = tokenizer
            if hasattr(processor, "patch_size") and processor.patch_size is None:
                # a LLaVA folder without processor_config.json: the vision tower's patch (and CLIP's CLS token)
                processor.patch_size = int((config.get("vision_config") or {}).get("patch_size") or 14)
                processor.num_additional_image_tokens = processor.num_additional_image_tokens or 1
                processor.vision_feature_select_strategy = (processor.vision_feature_select_strategy
                                                            or config.get("vision_feature_select_strategy")
                                                            or "default")
            processor.model_type = config.get("model_type")
            return processor
    except Exception as e:  # transformers raises ImportError / AttributeError / ValueError for a missing backend
        log.info("AutoProcessor could not build %s's processor (%s); using its parts", folder, e)
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(folder)
    image_processor = load_image_processor(folder, AutoImageProcessor)
    video_processor = None
    try:
        from transformers import AutoVideoProcessor

        video_processor = AutoVideoProcessor.from_pretrained(folder)
    except Exception:  # no torchvision, or a model without video
        video_processor = None
    settings = _read_json(folder / "processor_config.json")
    model_type = config.get("model_type", "")
    if model_type.startswith("gemma3"):
        n = settings.get("image_seq_length") or config.get("mm_tokens_per_image") or 256
        parts = gemma3_parts(tokenizer, image_processor, int(n))
    elif "llava" in model_type:
        vision = config.get("vision_config") or {}
        parts = llava_parts(tokenizer, image_processor,
                           int(settings.get("patch_size") or vision.get("patch_size") or 14),
                           int(settings.get("num_additional_image_tokens", 1)),
                           settings.get("vision_feature_select_strategy")
                           or config.get("vision_feature_select_strategy") or "default")
    else:
        parts = MediaProcessor(tokenizer, image_processor, video_processor)
    parts.model_type = model_type or None
    return parts
