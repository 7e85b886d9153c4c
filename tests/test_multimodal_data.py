"""Vision-language data (steadytune/data/multimodal): rows with images become LLaMA-Factory's ids with the pixels
beside them, no image token is ever cut, and batches and packed rows keep every image with its example.

Everything here runs on images the tests draw with Pillow and tiny processors built from config (tests/
multimodal_setup.py); the comparison with LLaMA-Factory's own output is tests/test_multimodal_golden.py.
"""

from __future__ import annotations

import base64
import json
import math

import pytest
import torch
from conftest import LF_FIXTURES, needs_shared
from multimodal_setup import draw_image, processor_for, qwen_vl_config, vision_tokenizer
from PIL import Image

from steadytune.config import ConfigError, load_config
from steadytune.data.encode import IGNORE_INDEX, encode_conversation
from steadytune.data.multimodal.collate import MultimodalCollator
from steadytune.data.multimodal.encode import MediaContext, encode_multimodal, media_inputs
from steadytune.data.multimodal.media import open_image, resolve_media
from steadytune.data.multimodal.packing import MultimodalPackedCollator
from steadytune.data.multimodal.plugins import plugin_for
from steadytune.data.multimodal.preprocess import MediaSettings, resize_image, sample_indices
from steadytune.data.multimodal.rope import MRope, mrope_for_config
from steadytune.data.prepare import prepare_datasets
from steadytune.data.templates import get_template
from steadytune.errors import DataError

TEMPLATES = ("qwen2_vl", "qwen3_vl", "gemma3", "llava")
TOK = vision_tokenizer()


def context(name: str, **keys) -> MediaContext:
    return MediaContext(plugin_for(name), processor_for(name, TOK), **keys)


def row(images, text="<image>What is drawn here?", answer="A red square and a blue disc.", where="test row 0",
        **extra) -> dict:
    return {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
            "images": [str(p) for p in images], "where": where, **extra}


def ids_of(name: str) -> dict:
    return {t: TOK.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                                                       "<|video_pad|>", "<start_of_image>", "<end_of_image>",
                                                       "<image_soft_token>", "<image>")}


# --- the tokens each template writes for an image ---------------------------------------------------------------

@pytest.mark.parametrize("name", TEMPLATES)
def test_placeholder_becomes_the_models_tokens(name, tmp_path):
    image = draw_image(tmp_path / "a.png", (64, 48))
    ctx = context(name)
    features, cut = encode_multimodal(get_template(name, TOK), ctx, row([image]), 512)
    assert cut is None
    ids, tokens = features["input_ids"], ids_of(name)
    inputs, _ = media_inputs(row([image]), ctx)
    if name in ("qwen2_vl", "qwen3_vl"):
        grid = features["image_grid_thw"][0]
        n = math.prod(grid) // 4
        start = ids.index(tokens["<|vision_start|>"])
        assert ids[start:start + n + 2] == [tokens["<|vision_start|>"]] + [tokens["<|image_pad|>"]] * n + \
            [tokens["<|vision_end|>"]]
        assert inputs["pixel_values"].shape[0] == math.prod(grid)   # one row of pixels per patch
        assert features["mm_token_type_ids"] == [int(t == tokens["<|image_pad|>"]) for t in ids]
    elif name == "gemma3":
        start = ids.index(tokens["<start_of_image>"])
        assert ids[start:start + 6] == [tokens["<start_of_image>"]] + [tokens["<image_soft_token>"]] * 4 + \
            [tokens["<end_of_image>"]]
        assert TOK.decode(ids[start - 1:start]) == "\n\n" or TOK.decode(ids[:start]).endswith("\n\n")
        assert features["token_type_ids"] == [int(t == tokens["<image_soft_token>"]) for t in ids]
        assert tuple(inputs["pixel_values"].shape) == (1, 3, 32, 32)
    else:   # llava: (32 / 8)^2 patches, CLS added then dropped by the "default" strategy
        assert ids.count(tokens["<image>"]) == 16
        assert tuple(inputs["pixel_values"].shape) == (1, 3, 32, 32)
    media = [t for t in ids if t in {tokens["<|image_pad|>"], tokens["<image_soft_token>"], tokens["<image>"]}]
    assert all(features["labels"][i] == IGNORE_INDEX for i, t in enumerate(ids) if t in media)


def test_text_around_the_image_is_encoded_as_the_text_path(tmp_path):
    """A row's ids are the template's ids of the expanded messages: the text path, with the image tokens inside."""
    image = draw_image(tmp_path / "a.png")
    ctx = context("qwen2_vl")
    template = get_template("qwen2_vl", TOK)
    example = row([image], text="Look: <image> and say what it is.")
    features, _ = encode_multimodal(template, ctx, example, 512)
    inputs, _ = media_inputs(example, ctx)
    expanded = {**example, "messages": ctx.plugin.expand(example["messages"], inputs, ctx.processor)}
    text_path, _ = encode_conversation(template, TOK, expanded, 512)
    assert features["input_ids"] == text_path["input_ids"] and features["labels"] == text_path["labels"]


def test_a_text_only_row_through_a_vision_template_is_the_text_path():
    ctx = context("qwen3_vl")
    example = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    template = get_template("qwen3_vl", TOK)
    features, _ = encode_multimodal(template, ctx, example, 512)
    text_path, _ = encode_conversation(template, TOK, example, 512)
    assert features["input_ids"] == text_path["input_ids"]
    assert set(features["mm_token_type_ids"]) == {0} and "images" not in features


# --- LLaMA-Factory's image resizing --------------------------------------------------------------------------------

def test_resize_follows_llamafactory():
    big = Image.new("RGB", (300, 200))
    out = resize_image(big, max_pixels=6000, min_pixels=10)
    factor = math.sqrt(6000 / 60000)
    assert out.size == (int(300 * factor), int(200 * factor))
    small = Image.new("L", (10, 5))
    out = resize_image(small, max_pixels=10**6, min_pixels=800)
    factor = math.sqrt(800 / 50)
    assert out.size == (int(10 * factor), int(5 * factor)) and out.mode == "RGB"
    # Qwen: a side under 28 pixels grows to 28; a ratio over 200 is cut to 180
    assert resize_image(Image.new("RGB", (40, 10)), 10**6, 1, qwen=True).size == (40, 28)
    assert resize_image(Image.new("RGB", (6000, 28)), 10**7, 1, qwen=True).size == (28 * 180, 28)


def test_image_max_pixels_changes_the_token_count(tmp_path):
    image = draw_image(tmp_path / "a.png", (200, 200))
    template = get_template("qwen2_vl", TOK)
    many, _ = encode_multimodal(template, context("qwen2_vl"), row([image]), 512)
    few, _ = encode_multimodal(template, context("qwen2_vl", settings=MediaSettings(image_max_pixels=28 * 28)),
                               row([image]), 512)
    assert few["image_grid_thw"] == [[1, 2, 2]] and many["image_grid_thw"] == [[1, 4, 4]]
    assert few["input_ids"].count(TOK.convert_tokens_to_ids("<|image_pad|>")) == 1


def test_video_frames_are_sampled_as_llamafactory():
    # 10 s at 30 fps, video_fps 2 -> 20 frames spread over 300 (numpy linspace, truncated)
    indices = sample_indices(300, 10.0, 2.0, 128)
    assert len(indices) == 20 and indices[0] == 0 and indices[-1] == 299 and indices[1] == 15
    assert len(sample_indices(300, 10.0, 2.0, 8)) == 8            # video_maxlen caps it
    assert sample_indices(5, 0.1, 2.0, 128) == [0]                # at least one frame
    assert sample_indices(0, 0.0, 2.0, 4) == [0, 1, 2, 3]         # no frame count: video_maxlen frames


def test_video_without_its_processor_is_refused_with_the_reason(tmp_path):
    frames = [str(draw_image(tmp_path / f"f{i}.png", seed=i)) for i in range(3)]
    example = {"messages": [{"role": "user", "content": "<video>What happens?"},
                            {"role": "assistant", "content": "Nothing."}], "videos": [frames], "where": "v row 3"}
    with pytest.raises(DataError, match="video processor.*torchvision"):
        encode_multimodal(get_template("qwen2_vl", TOK), context("qwen2_vl"), example, 512)
    with pytest.raises(DataError, match="v row 3: the llava template's model takes no video"):
        encode_multimodal(get_template("llava", TOK), context("llava"), example, 512)


# --- where images come from ------------------------------------------------------------------------------------

def test_media_paths_resolve_as_llamafactory(tmp_path):
    draw_image(tmp_path / "imgs" / "a.png")
    resolved = resolve_media(["imgs/a.png", "elsewhere/b.png"], tmp_path, "r")
    assert resolved == [str(tmp_path / "imgs" / "a.png"), "elsewhere/b.png"]   # not under media_dir: kept as written
    assert resolve_media("imgs/a.png", tmp_path, "r") == [str(tmp_path / "imgs" / "a.png")]


@pytest.mark.parametrize("url", ["http://example.com/a.png", "https://example.com/a.jpg", "s3://bucket/a.png"])
def test_urls_are_never_fetched(url):
    with pytest.raises(DataError, match=r"data\.json row 7: images\[0\]: .* is a URL; steadytune never fetches"):
        resolve_media([url], ".", "data.json row 7")


def test_data_urls_base64_and_bytes_are_read(tmp_path):
    png = draw_image(tmp_path / "a.png").read_bytes()
    text = base64.b64encode(png).decode()
    for ref in (f"data:image/png;base64,{text}", text, png, {"bytes": png, "path": None}):
        (resolved,) = resolve_media([ref], tmp_path, "r")
        assert open_image(resolved, "r").size == (64, 48)


def test_missing_and_corrupt_images_name_the_file_and_row(tmp_path):
    template, ctx = get_template("qwen2_vl", TOK), context("qwen2_vl")
    with pytest.raises(DataError, match=r"rows\.json row 4: images\[0\]: image file not found: .*nope\.png"):
        encode_multimodal(template, ctx, row([tmp_path / "nope.png"], where="rows.json row 4"), 512)
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"broken" * 10)
    with pytest.raises(DataError, match=r"rows\.json row 5: images\[0\]: cannot read image .*bad\.png"):
        encode_multimodal(template, ctx, row([tmp_path / "bad.png"], where="rows.json row 5"), 512)


def test_placeholder_count_must_match_the_images(tmp_path):
    image = draw_image(tmp_path / "a.png")
    template, ctx = get_template("gemma3", TOK), context("gemma3")
    with pytest.raises(DataError, match=r"r 9: 2 <image> placeholder\(s\) in the messages but 1 image\(s\)"):
        encode_multimodal(template, ctx, row([image], text="<image><image>Two?", where="r 9"), 512)
    with pytest.raises(DataError, match=r"r 9: 0 <image> placeholder\(s\) in the messages but 1 image"):
        encode_multimodal(template, ctx, row([image], text="None?", where="r 9"), 512)


# --- never cut an image ----------------------------------------------------------------------------------------

def long_answer_row(tmp_path, where="long.json row 2"):
    image = draw_image(tmp_path / "a.png", (120, 120))
    question = "Please describe, in as much detail as you can, every shape and colour in this picture: <image>"
    return row([image], text=question, answer="The quick brown fox jumps over the lazy dog. " * 12, where=where)


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_fitting_row_is_cut_exactly_as_llamafactory_cuts_text(name, tmp_path):
    """When cutoff_len's cut misses the image, the ids are LLaMA-Factory's rule's (here: the answer is cut)."""
    example = long_answer_row(tmp_path)
    template, ctx = get_template(name, TOK), context(name)
    full, _ = encode_multimodal(template, ctx, example, 4096)
    prompt_len = full["labels"].index(next(x for x in full["labels"] if x != IGNORE_INDEX))
    cutoff = 2 * prompt_len + 5   # a prompt under half of cutoff_len is kept whole by LLaMA-Factory's rule
    assert cutoff < len(full["input_ids"])
    features, cut = encode_multimodal(template, ctx, example, cutoff)
    assert features["input_ids"] == full["input_ids"][:cutoff] and cut.answer_tokens > 0 and cut.prompt_tokens == 0


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_row_that_would_lose_image_tokens_keeps_them_all(name, tmp_path):
    example = long_answer_row(tmp_path)
    template, ctx = get_template(name, TOK), context(name)
    full, _ = encode_multimodal(template, ctx, example, 4096)
    media = set(ctx.plugin.media_token_ids(TOK))
    n_media = sum(t in media for t in full["input_ids"])
    start = next(i for i, t in enumerate(full["input_ids"]) if t in media)
    cutoff = start + n_media // 2 + 4   # LLaMA-Factory's rule would end the prompt inside the image
    features, cut = encode_multimodal(template, ctx, example, cutoff)
    assert len(features["input_ids"]) <= cutoff
    assert sum(t in media for t in features["input_ids"]) == n_media    # every image token kept
    assert any(x != IGNORE_INDEX for x in features["labels"]) and cut.prompt_tokens > 0
    with pytest.raises(DataError, match=rf"long\.json row 2: cutoff_len {cutoff} would cut this row's image/video "
                                        rf"tokens \({n_media} of them"):
        encode_multimodal(template, context(name, truncation="refuse"), example, cutoff)


def test_a_row_whose_image_alone_does_not_fit_is_refused_with_its_number(tmp_path):
    example = long_answer_row(tmp_path, where="long.json row 11")
    with pytest.raises(DataError, match=r"long\.json row 11: its image/video tokens need \d+ of cutoff_len 12"):
        encode_multimodal(get_template("llava", TOK), context("llava"), example, 12)


def test_prepare_refuses_the_row_by_number_when_asked(tmp_path):
    draw_image(tmp_path / "pics" / "a.png", (120, 120))
    rows = [{"messages": [{"role": "user", "content": "<image>What?"}, {"role": "assistant", "content": "Shapes."}],
             "images": ["pics/a.png"]}] * 2
    rows[1] = {**rows[1], "messages": [{"role": "user", "content": "Describe every part of this: <image>"},
                                       {"role": "assistant", "content": "Shapes. " * 20}]}
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"pics": {
        "file_name": "rows.json", "formatting": "sharegpt", "columns": {"messages": "messages", "images": "images"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    keys = dict(dataset="pics", dataset_dir=str(tmp_path), template="qwen2_vl", cutoff_len=60)
    with pytest.raises(DataError, match=r"rows\.json row 1: cutoff_len 60 would cut this row's image/video tokens"):
        prepare_datasets(load_config(None, dict(keys, media_truncation="refuse")), TOK,
                         processor=processor_for("qwen2_vl", TOK))
    data = prepare_datasets(load_config(None, keys), TOK, processor=processor_for("qwen2_vl", TOK))
    pad = TOK.convert_tokens_to_ids("<|image_pad|>")
    assert [e["input_ids"].count(pad) for e in data.train] == [4, 4] and len(data.train[1]["input_ids"]) <= 60


# --- batches ---------------------------------------------------------------------------------------------------

def encoded_rows(name, tmp_path, sizes=((64, 48), (100, 60), (40, 90))):
    template, ctx = get_template(name, TOK), context(name)
    out = []
    for k, size in enumerate(sizes):
        images = [draw_image(tmp_path / f"{k}.png", size, seed=k)]
        text = "<image>Which shapes?" if k != 1 else "Compare <image> with this one: <image>"
        if k == 1:
            images.append(draw_image(tmp_path / "1b.png", (30, 30), seed=9))
        features, _ = encode_multimodal(template, ctx, row(images, text=text, answer="Shapes " * (k + 1)), 512)
        out.append(features)
    return ctx, out


@pytest.mark.parametrize("name", TEMPLATES)
def test_collator_pads_text_and_concatenates_pixels_in_order(name, tmp_path):
    ctx, rows = encoded_rows(name, tmp_path)
    batch = MultimodalCollator(ctx, TOK.pad_token_id)(rows)
    longest = max(len(r["input_ids"]) for r in rows)
    assert batch["input_ids"].shape == (3, longest) and batch["labels"].shape == (3, longest)
    assert batch["attention_mask"].sum().item() == sum(len(r["input_ids"]) for r in rows)
    each = [media_inputs({"images": r["images"], "where": "r"}, ctx)[0]["pixel_values"] for r in rows]
    assert torch.equal(batch["pixel_values"], torch.cat(each))
    if name in ("qwen2_vl", "qwen3_vl"):
        assert batch["image_grid_thw"].tolist() == [g for r in rows for g in r["image_grid_thw"]]
        assert batch["mm_token_type_ids"].shape == (3, longest)
    if name == "gemma3":
        assert batch["token_type_ids"].sum().item() == 4 * 4   # four images, four soft tokens each


# --- Qwen's 3-D rope and packing -------------------------------------------------------------------------------

def tiny_qwen_vl(model_type: str):
    """The text+vision model of `model_type` built from config (random weights): only its get_rope_index is used."""
    from transformers import AutoModel

    return AutoModel.from_config(qwen_vl_config(model_type, TOK))


@pytest.mark.parametrize("model_type, template", [("qwen2_vl", "qwen2_vl"), ("qwen2_5_vl", "qwen2_vl"),
                                                  ("qwen3_vl", "qwen3_vl")])
def test_rope_equals_the_models_get_rope_index(model_type, template, tmp_path):
    model = tiny_qwen_vl(model_type)
    rope = mrope_for_config(model.config)
    assert isinstance(rope, MRope)
    _, rows = encoded_rows(template, tmp_path)
    for example in rows:
        ids = torch.tensor([example["input_ids"]])
        theirs, _ = model.get_rope_index(ids, mm_token_type_ids=torch.tensor([example["mm_token_type_ids"]]),
                                         image_grid_thw=torch.tensor(example["image_grid_thw"]))
        assert torch.equal(rope(example), theirs[:, 0])


def test_rope_of_video_blocks_equals_the_models():
    """Videos: Qwen2.5-VL spaces frames by tokens_per_second x second_per_grid_ts; Qwen3-VL blocks each frame."""
    pad, video = TOK.convert_tokens_to_ids("<|image_pad|>"), TOK.convert_tokens_to_ids("<|video_pad|>")
    for model_type in ("qwen2_5_vl", "qwen3_vl"):
        model = tiny_qwen_vl(model_type)
        rope = mrope_for_config(model.config)
        if model_type == "qwen2_5_vl":   # one video of 3 temporal patches of 2x2 merged tokens, then an image
            types = [0] * 5 + [2] * 12 + [0] * 3 + [1] * 4 + [0] * 2
            grids = dict(video_grid_thw=[[3, 4, 4]], image_grid_thw=[[1, 4, 4]], second_per_grid_ts=[0.5])
        else:                            # each frame its own block, timestamps (text) between
            types = [0] * 4 + [2] * 4 + [0] * 3 + [2] * 4 + [0] * 2
            grids = dict(video_grid_thw=[[2, 4, 4]])
        ids = torch.tensor([[video if t == 2 else pad if t == 1 else 5 for t in types]])
        kwargs = {k: torch.tensor(v) for k, v in grids.items()}
        theirs, _ = model.get_rope_index(ids, mm_token_type_ids=torch.tensor([types]), **kwargs)
        ours = rope.positions(types, grids.get("image_grid_thw", []), grids["video_grid_thw"],
                              grids.get("second_per_grid_ts"))
        assert torch.equal(ours, theirs[:, 0]), model_type


@pytest.mark.parametrize("name", TEMPLATES)
def test_packed_rows_keep_each_image_with_its_example(name, tmp_path):
    ctx, rows = encoded_rows(name, tmp_path)
    rope = MRope(merge_size=2, frames_as_blocks=name == "qwen3_vl") if name in ("qwen2_vl", "qwen3_vl") else None
    packed = MultimodalPackedCollator(ctx, TOK.pad_token_id, row_len=4096, varlen=True, rope=rope)(rows)
    alone = [MultimodalCollator(ctx, TOK.pad_token_id, rope=rope)([r]) for r in rows]
    assert packed["input_ids"].shape[0] == 1
    offsets = packed["cu_seq_lens_q"].tolist()
    for k, single in enumerate(alone):
        cols = slice(offsets[k], offsets[k + 1])
        assert torch.equal(packed["input_ids"][0, cols], single["input_ids"][0])
        # position ids per example: the packed row's slice equals the example's own positions
        assert torch.equal(packed["position_ids"][..., 0, cols] if rope else packed["position_ids"][0, cols],
                           single["position_ids"][..., 0, :] if rope else torch.arange(len(rows[k]["input_ids"])))
        labels = single["labels"][0].clone()
        labels[0] = IGNORE_INDEX
        assert torch.equal(packed["labels"][0, cols], labels)
    # the pixels follow the tokens: example after example, image after image
    assert torch.equal(packed["pixel_values"], torch.cat([s["pixel_values"] for s in alone]))
    if rope is not None:
        assert packed["image_grid_thw"].tolist() == [g for r in rows for g in r["image_grid_thw"]]


def test_first_fit_packing_puts_pixels_in_token_order(tmp_path):
    """Rows filled first-fit reorder the examples: the pixels follow the order their tokens end up in."""
    ctx, rows = encoded_rows("qwen2_vl", tmp_path)
    collator = MultimodalPackedCollator(ctx, TOK.pad_token_id, row_len=max(len(r["input_ids"]) for r in rows) + 5)
    packed = collator(rows)
    order = [i for row_ in collator.rows_of(rows) for i in row_]
    assert order != [0, 1, 2] or packed["input_ids"].shape[0] == 1
    expected = torch.cat([media_inputs({"images": rows[i]["images"], "where": "r"}, ctx)[0]["pixel_values"]
                          for i in order])
    assert torch.equal(packed["pixel_values"], expected)
    pad = TOK.convert_tokens_to_ids("<|image_pad|>")
    tokens_in_order = (packed["input_ids"] == pad).sum().item()
    assert tokens_in_order * 4 == packed["pixel_values"].shape[0]   # each token: 2x2 merged patches


# --- datasets: dataset_info.json, v1 jsonl, the config keys ----------------------------------------------------

def write_mllm_dataset(folder, rows, name="mllm_demo"):
    (folder / f"{name}.json").write_text(json.dumps(rows))
    entry = {"file_name": f"{name}.json", "formatting": "sharegpt",
             "columns": {"messages": "messages", "images": "images"},
             "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}
    (folder / "dataset_info.json").write_text(json.dumps({name: entry}))
    for images in (r.get("images", []) for r in rows):
        for k, path in enumerate(images):
            if not (folder / path).exists():
                draw_image(folder / path, (80 + 10 * k, 60), seed=len(path))


def test_an_lf_yaml_with_image_max_pixels_prepares_an_image_dataset(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "<image>Who are they?"},
                          {"role": "assistant", "content": "Two shapes."},
                          {"role": "user", "content": "And here?<image>"},
                          {"role": "assistant", "content": "The same two."}],
             "images": ["mllm_demo_data/1.jpg", "mllm_demo_data/1.jpg"]},
            {"messages": [{"role": "user", "content": "<image>What is it?"}, {"role": "assistant", "content": "A disc."}],
             "images": ["mllm_demo_data/2.jpg"]}]
    write_mllm_dataset(tmp_path, rows)
    yaml = tmp_path / "qwen2_5vl_lora_sft.yaml"
    yaml.write_text(f"model_name_or_path: tiny\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                    f"dataset: mllm_demo\ndataset_dir: {tmp_path}\ntemplate: qwen2_vl\ncutoff_len: 2048\n"
                    f"image_max_pixels: 784\nimage_min_pixels: 16\noutput_dir: {tmp_path}/out\n")
    cfg = load_config(yaml)
    assert cfg.data.image_max_pixels == 784
    data = prepare_datasets(cfg, TOK, processor=processor_for("qwen2_vl", TOK))
    assert [e["image_grid_thw"] for e in data.train] == [[[1, 2, 2], [1, 2, 2]], [[1, 2, 2]]]
    assert data.train[0]["images"] == [str(tmp_path / "mllm_demo_data" / "1.jpg")] * 2
    with pytest.raises(DataError, match=r"mllm_demo\.json row 0: the row has images or videos, and the model has no "
                                        r"image processor"):
        prepare_datasets(cfg, TOK)
    with pytest.raises(ConfigError, match="template: qwen3 has no image/video support"):
        prepare_datasets(load_config(yaml, ["template=qwen3"]), TOK, processor=processor_for("qwen2_vl", TOK))


def test_v1_content_parts_become_placeholders_and_images(tmp_path):
    image = draw_image(tmp_path / "data" / "mllm_demo_data" / "1.jpg")
    line = {"messages": [{"role": "user", "content": [{"type": "image_url", "value": str(image)},
                                                      {"type": "text", "value": "Who are they?"}]},
                         {"role": "assistant", "content": [{"type": "text", "value": "Shapes."}]}]}
    (tmp_path / "v1.jsonl").write_text(json.dumps(line) + "\n")
    (tmp_path / "v1.yaml").write_text(f"demo:\n  path: {tmp_path / 'v1.jsonl'}\n  source: local\n")
    cfg = load_config(None, dict(dataset=str(tmp_path / "v1.yaml"), template="qwen3_vl_nothink",
                                 dataset_dir=str(tmp_path)))
    data = prepare_datasets(cfg, TOK, processor=processor_for("qwen3_vl", TOK))
    (example,) = data.train
    assert example["images"] == [str(image)] and example["input_ids"].count(TOK.convert_tokens_to_ids("<|image_pad|>"))
    line["messages"][0]["content"].append({"type": "audio_url", "value": "a.wav"})
    (tmp_path / "v1.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(DataError, match=r"v1\.jsonl line 1: not supported: 'audio_url' content"):
        prepare_datasets(cfg, TOK, processor=processor_for("qwen3_vl", TOK))


@pytest.mark.parametrize("key, message", [("use_audio_in_video=true", "not supported: use_audio_in_video (audio"),
                                          ("audio_sampling_rate=16000", "not supported: audio_sampling_rate"),
                                          ("media_truncation=drop", "media_truncation: invalid value 'drop'")])
def test_audio_keys_stay_refused(key, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(None, [key])


def test_image_columns_in_a_preference_stage_are_refused(tmp_path):
    write_mllm_dataset(tmp_path, [{"messages": [{"role": "user", "content": "<image>?"},
                                                {"role": "assistant", "content": "!"}], "images": ["p/a.png"]}])
    cfg = load_config(None, dict(dataset="mllm_demo", dataset_dir=str(tmp_path), stage="pt", template="qwen2_vl"))
    with pytest.raises(ConfigError, match="mllm_demo has images columns; stage pt trains on text only here"):
        prepare_datasets(cfg, TOK, processor=processor_for("qwen2_vl", TOK))


@needs_shared
def test_llamafactory_mllm_demo_rows_prepare(tmp_path):
    """LLaMA-Factory's own mllm_demo.json and its dataset_info.json entry (the images are drawn: the shared fixtures
    hold the rows, not the pictures)."""
    info = json.loads((LF_FIXTURES / "data" / "dataset_info.json").read_text())
    rows = json.loads((LF_FIXTURES / "data" / "mllm_demo.json").read_text())
    write_mllm_dataset(tmp_path, rows)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"mllm_demo": info["mllm_demo"]}))
    for name in TEMPLATES:
        cfg = load_config(None, dict(dataset="mllm_demo", dataset_dir=str(tmp_path), template=name, cutoff_len=1024,
                                     image_max_pixels=262144))
        data = prepare_datasets(cfg, TOK, processor=processor_for(name, TOK))
        assert len(data.train) == len(rows)
        media = set(plugin_for(name).media_token_ids(TOK))
        for example, source in zip(data.train, rows):
            assert len(example["images"]) == len(source["images"])
            assert sum(t in media for t in example["input_ids"]) > 0


@pytest.mark.parametrize("name, config", [
    ("qwen2_vl", {"model_type": "qwen2_5_vl"}), ("qwen3_vl", {"model_type": "qwen3_vl"}),
    ("gemma3", {"model_type": "gemma3", "mm_tokens_per_image": 4}),
    ("llava", {"model_type": "llava", "vision_config": {"patch_size": 8}, "vision_feature_select_strategy": "default"})])
def test_a_model_folders_processor_loads_without_torchvision(name, config, tmp_path):
    """A model folder as saved (config.json, tokenizer, image processor): its processor reads the same rows into the
    same ids and pixels as the processor built in the tests (transformers' own when it can assemble one, else the
    parts: Qwen-VL's processor needs torchvision)."""
    from steadytune.data.multimodal.processor import load_media_processor

    from multimodal_setup import image_processor

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    TOK.save_pretrained(folder)
    image_processor(name).save_pretrained(folder)
    loaded = load_media_processor(folder)
    image = draw_image(tmp_path / "a.png", (90, 70))
    template = get_template(name, loaded.tokenizer)
    ours, _ = encode_multimodal(template, MediaContext(plugin_for(name), loaded), row([image]), 512)
    reference, _ = encode_multimodal(template, context(name), row([image]), 512)
    assert ours["input_ids"] == reference["input_ids"]
    ctx = MediaContext(plugin_for(name), loaded)
    assert torch.equal(media_inputs(row([image]), ctx)[0]["pixel_values"],
                       media_inputs(row([image]), context(name))[0]["pixel_values"])


def test_eval_rows_keep_their_images_in_the_prediction_prompt(tmp_path):
    """do_predict's prompt (the conversation up to the last answer) keeps every image token, cutoff_len or not."""
    rows = [{"messages": [{"role": "user", "content": f"Describe this picture in detail: <image> ({k})"},
                          {"role": "assistant", "content": "Stripes and a block. " * (1 + k)}],
             "images": ["pics/a.png"]} for k in range(4)]
    write_mllm_dataset(tmp_path, rows, name="pics")
    pad = TOK.convert_tokens_to_ids("<|image_pad|>")
    for cutoff in (4096, 40):
        cfg = load_config(None, dict(dataset="pics", dataset_dir=str(tmp_path), template="qwen2_vl", val_size=2,
                                     cutoff_len=cutoff))
        data = prepare_datasets(cfg, TOK, processor=processor_for("qwen2_vl", TOK))
        assert len(data.eval) == 2
        for example in data.eval:
            assert example["prompt_ids"].count(pad) == example["input_ids"].count(pad) > 0
            assert len(example["prompt_ids"]) + len(example["answer_ids"]) <= cutoff
