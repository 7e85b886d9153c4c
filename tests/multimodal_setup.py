"""Tiny processors and drawn images for the vision-language data tests (no hub, no ../shared).

The tokenizer is the golden byte-level one (tests/golden/tokenizers/bytelevel) plus the vision tokens of the four
families; the image processors are the families' real transformers classes (Pillow backend), sized so an image
costs a handful of tokens (the sizes of steadytune/model/tiny_vlm.py's models). tools/make_lf_multimodal_golden.py
builds the same ones in LLaMA-Factory's environment.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw
from transformers import PreTrainedTokenizerFast

from steadytune.data.multimodal.processor import MediaProcessor, gemma3_parts, llava_parts

GOLDEN = Path(__file__).parent / "golden"
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<start_of_image>",
                 "<end_of_image>", "<image_soft_token>", "<image>"]
# template -> (image processor class path, its keyword arguments); gemma3: 4 soft tokens, llava: 8-pixel patches.
IMAGE_PROCESSORS = {
    "qwen2_vl": ("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl.Qwen2VLImageProcessorPil",
                 dict(min_pixels=28 * 28, max_pixels=4 * 28 * 28, patch_size=14, merge_size=2, temporal_patch_size=2)),
    "qwen3_vl": ("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl.Qwen2VLImageProcessorPil",
                 dict(min_pixels=32 * 32, max_pixels=4 * 32 * 32, patch_size=16, merge_size=2, temporal_patch_size=2,
                      image_mean=[0.5] * 3, image_std=[0.5] * 3)),
    "gemma3": ("transformers.models.gemma3.image_processing_pil_gemma3.Gemma3ImageProcessorPil",
               dict(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)),
    "llava": ("transformers.models.clip.image_processing_pil_clip.CLIPImageProcessorPil",
              dict(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})),
}
GEMMA3_TOKENS_PER_IMAGE = 4
LLAVA_PATCH = 8


def vision_tokenizer() -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast.from_pretrained(GOLDEN / "tokenizers" / "bytelevel")
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS}, replace_extra_special_tokens=False)
    return tok


def image_processor(template: str):
    import importlib

    path, kwargs = IMAGE_PROCESSORS[template]
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)(**kwargs)


def processor_for(template: str, tokenizer=None):
    tokenizer = tokenizer or vision_tokenizer()
    if template == "gemma3":
        return gemma3_parts(tokenizer, image_processor(template), GEMMA3_TOKENS_PER_IMAGE)
    if template == "llava":
        return llava_parts(tokenizer, image_processor(template), LLAVA_PATCH)
    return MediaProcessor(tokenizer, image_processor(template))


def draw_image(path: Path, size: tuple[int, int] = (64, 48), seed: int = 0, mode: str = "RGB") -> Path:
    """A small picture with shapes, the same for the same arguments (lossless PNG unless the suffix says JPEG)."""
    image = Image.new("RGB", size, (20 + 40 * seed % 200, 200, 90))
    draw = ImageDraw.Draw(image)
    w, h = size
    draw.rectangle([w // 8, h // 8, w // 2, h // 2], fill=(200, 30 + seed * 17 % 200, 40))
    draw.ellipse([w // 3, h // 3, w - 2, h - 2], fill=(30, 60, 220 - seed * 13 % 200))
    if mode != "RGB":
        image = image.convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path
