"""Tiny processors and drawn images for the vision-language data tests (no hub, no ../shared).

The tokenizer is the golden byte-level one (tests/golden/tokenizers/bytelevel) plus the vision tokens of the four
families; the image processors are the families' real transformers classes (Pillow backend), sized so an image
costs a handful of tokens (the sizes of steadytune/model/tiny_vlm.py's models). tools/make_lf_multimodal_golden.py
builds the same ones in LLaMA-Factory's environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from transformers import PreTrainedTokenizerFast

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
# Qwen's video processors (transformers builds them only with torchvision installed).
VIDEO_PROCESSORS = {
    "qwen2_vl": ("transformers.Qwen2VLVideoProcessor", dict(min_pixels=28 * 28, max_pixels=4 * 28 * 28)),
    "qwen3_vl": ("transformers.Qwen3VLVideoProcessor",
                 dict(size={"shortest_edge": 32 * 32, "longest_edge": 8 * 32 * 32}, patch_size=16)),
}
GEMMA3_TOKENS_PER_IMAGE = 4
LLAVA_PATCH = 8


# Gemma 3's tokenizer names its vision tokens (tokenizer.boi_token, ...), which transformers' Gemma3Processor reads.
GEMMA3_NAMED_TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}


def vision_tokenizer(named: dict | None = None) -> PreTrainedTokenizerFast:
    """The golden byte-level tokenizer with every family's vision tokens (ids 640-647); `named`: vision tokens it
    also names (Gemma 3's boi_token, ...), same ids."""
    tok = PreTrainedTokenizerFast.from_pretrained(GOLDEN / "tokenizers" / "bytelevel")
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS}, replace_extra_special_tokens=False)
    if named:
        import tempfile

        with tempfile.TemporaryDirectory() as folder:   # names are read at load: save, load with them
            tok.save_pretrained(folder)
            tok = PreTrainedTokenizerFast.from_pretrained(folder, extra_special_tokens=named)
    return tok


def qwen_vl_config(model_type: str, tokenizer):
    """A tiny Qwen2-VL / Qwen2.5-VL / Qwen3-VL config with the tokenizer's vision token ids (get_rope_index reads it)."""
    from transformers import AutoConfig

    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=len(tokenizer),
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]})
    vision = dict(depth=1, hidden_size=32, num_heads=2, spatial_merge_size=2, temporal_patch_size=2)
    if model_type == "qwen2_vl":
        vision.update(embed_dim=32, patch_size=14)
    elif model_type == "qwen2_5_vl":
        vision.update(intermediate_size=64, out_hidden_size=32, patch_size=14, tokens_per_second=2, window_size=56,
                      fullatt_block_indexes=[0])
    else:
        text.update(head_dim=8, rope_parameters=dict(text["rope_parameters"], mrope_interleaved=True))
        vision.update(intermediate_size=64, out_hidden_size=32, patch_size=16, num_position_embeddings=16,
                      deepstack_visual_indexes=[0])
    ids = {k: tokenizer.convert_tokens_to_ids(t) for k, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    return AutoConfig.for_model(model_type, text_config=text, vision_config=vision, **ids)


def _build(path: str, kwargs: dict):
    import importlib

    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)(**kwargs)


def image_processor(template: str):
    return _build(*IMAGE_PROCESSORS[template])


def video_processor(template: str):
    """Qwen's video processor; needs torchvision (ImportError without it)."""
    return _build(*VIDEO_PROCESSORS[template])


def processor_for(template: str, tokenizer=None, video: bool = False):
    """steadytune's processor parts for `template` (tools/make_lf_multimodal_golden.py builds transformers' own);
    `video`: with Qwen's video processor (torchvision needed)."""
    from steadytune.data.multimodal.processor import MediaProcessor, gemma3_parts, llava_parts

    tokenizer = tokenizer or vision_tokenizer()
    if template == "gemma3":
        return gemma3_parts(tokenizer, image_processor(template), GEMMA3_TOKENS_PER_IMAGE)
    if template == "llava":
        return llava_parts(tokenizer, image_processor(template), LLAVA_PATCH)
    return MediaProcessor(tokenizer, image_processor(template), video_processor(template) if video else None)


def draw_image(path: Path, size: tuple[int, int] = (64, 48), seed: int = 0, mode: str = "RGB") -> Path:
    """A picture computed pixel by pixel (stripes and a block, from `seed`): the same pixels from every Pillow
    version, saved lossless (PNG) whatever the file's suffix, so LLaMA-Factory's environment and this one read the
    same pixels (tools/make_lf_multimodal_golden.py draws its images with this function)."""
    w, h = size
    data = bytearray()
    for y in range(h):
        for x in range(w):
            inside = w // 4 <= x < w // 2 + seed % 5 and h // 4 <= y < (3 * h) // 4
            data += bytes(((x * 7 + seed * 31) % 256, 40 if inside else (y * 11 + seed * 17) % 256,
                           200 if inside else ((x + y) * 5 + seed) % 256))
    image = Image.frombytes("RGB", (w, h), bytes(data))
    if mode != "RGB":
        image = image.convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG")
    return path


def bomb_png(path: Path, side: int = 30000) -> Path:
    """A decompression bomb: a real, valid PNG of side x side black pixels (1 bit each, 900 million at the default)
    in about 110 KB; decoded as RGB it would take 2.7 GB."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\0" * (1 + (side + 7) // 8)   # filter byte 0, then the row's bits
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)   # 1-bit greyscale
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path


def write_video(path: Path, frames: list[tuple[int, int, int]], fps: int = 6) -> Path:
    """A lossless video (PNG frames in a QuickTime file, which reports its frame count and duration) of drawn
    frames (width, height, seed), written with PyAV."""
    av = pytest.importorskip("av", reason="video tests need PyAV (pip install av)")

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("png", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames[0][0], frames[0][1], "rgb24"
        for k, (w, h, seed) in enumerate(frames):
            image = Image.open(draw_image(path.parent / f"{path.stem}_frame{k}.png", (w, h), seed=seed))
            for packet in stream.encode(av.VideoFrame.from_image(image.convert("RGB"))):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


# The golden file's codec (tests/golden/multimodal/, written by tools/make_lf_multimodal_golden.py, read by
# tests/test_multimodal_golden.py): long runs of one id written once with their count, positions as steps.
def runs(values: list) -> str:
    """A list as text, runs written once with their count ("640*16"): image tokens come in long runs."""
    out, k = [], 0
    while k < len(values):
        n = 1
        while k + n < len(values) and values[k + n] == values[k]:
            n += 1
        out.append(f"{values[k]}*{n}" if n > 2 else " ".join([str(values[k])] * n))
        k += n
    return " ".join(out)


def steps(values: list[int]) -> list[int]:
    """The first value, then the differences (positions mostly step by 1: long runs)."""
    return values[:1] + [b - a for a, b in zip(values, values[1:])]


def expand_runs(text: str) -> list[int]:
    out = []
    for item in text.split():
        value, _, count = item.partition("*")
        out += [int(value)] * int(count or 1)
    return out


def undo_steps(values: list[int]) -> list[int]:
    """steps undone."""
    out = values[:1]
    for step in values[1:]:
        out.append(out[-1] + step)
    return out
