"""The same rows give the same ids, labels, pixels and positions as LLaMA-Factory 0.9.5.

tests/golden/multimodal/lf_mllm_demo.json holds what LLaMA-Factory itself made (tools/make_lf_multimodal_golden.py)
for rows of its mllm_demo dataset with templates qwen2_vl, qwen3_vl, gemma3 and llava: token ids and trained
positions (its SupervisedDatasetProcessor), and from its collator the pixel values (shape, sums, a few values),
grid sizes, Gemma 3's token_type_ids and Qwen's position ids. The pictures are drawn (multimodal_setup.draw_image,
the same pixels in both environments), so these tests need neither LLaMA-Factory nor ../shared.

Two differences are on purpose and checked as such: where LLaMA-Factory's cutoff_len cuts inside an image (its
collator then fails), every image token is kept here; and row 0 of Qwen's 4-row position ids is the plain positions
(LLaMA-Factory repeats the time row there), which is where transformers finds packed examples' boundaries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import LF_FIXTURES, needs_shared
from multimodal_setup import draw_image, expand_runs, processor_for, undo_steps, vision_tokenizer

from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.multimodal.collate import MultimodalCollator
from steadytune.data.multimodal.encode import MediaContext, encode_multimodal
from steadytune.data.multimodal.plugins import plugin_for
from steadytune.data.multimodal.preprocess import MediaSettings
from steadytune.data.multimodal.rope import MRope
from steadytune.data.templates import get_template
from steadytune.errors import DataError

GOLDEN = json.loads((Path(__file__).parent / "golden" / "multimodal" / "lf_mllm_demo.json").read_text("utf-8"))
TOK = vision_tokenizer()
IMAGE_CASES = sorted(k for k in GOLDEN["cases"] if k.split("/")[1] in ("default", "small", "answer_cut"))
ROPE = {"qwen2_vl": MRope(2), "qwen3_vl": MRope(2, frames_as_blocks=True)}


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mllm_demo")
    for name, (w, h, seed) in GOLDEN["pictures"].items():
        draw_image(folder / name, (w, h), seed=seed)
    for k, (w, h, seed) in enumerate(GOLDEN["video_frames"]):
        draw_image(folder / "frames" / f"{k}.png", (w, h), seed=seed)
    return folder


def case_inputs(key: str, pictures: Path, **context_keys):
    template_name, variant, number = key.split("/")
    case = GOLDEN["cases"][key]
    keys = case["keys"]
    settings = MediaSettings(**{k: v for k, v in keys.items() if k in ("image_max_pixels", "image_min_pixels")})
    video = variant == "video"
    ctx = MediaContext(plugin_for(template_name), processor_for(template_name, TOK, video=video), settings,
                       pan_and_scan=keys.get("image_do_pan_and_scan", False), **context_keys)
    if video and number == "file":
        from multimodal_setup import write_video

        clip = write_video(pictures / "clip.mov", GOLDEN["video_file"]["frames"], GOLDEN["video_file"]["fps"])
        example = {"messages": GOLDEN["video_row"], "videos": [str(clip)], "where": key}
    elif video:
        frames = [str(pictures / "frames" / f"{k}.png") for k in range(len(GOLDEN["video_frames"]))]
        example = {"messages": GOLDEN["video_row"], "videos": [frames], "where": key}
    else:
        row = GOLDEN["rows"][number]
        example = {"messages": row["messages"], "images": [str(pictures / p) for p in row["images"]], "where": key}
    return template_name, case, ctx, example, keys.get("cutoff_len", 4096)


def check_against_llamafactory(key: str, pictures: Path) -> None:
    template_name, case, ctx, example, cutoff_len = case_inputs(key, pictures)
    features, _ = encode_multimodal(get_template(template_name, TOK), ctx, example, cutoff_len)
    assert features["input_ids"] == expand_runs(case["input_ids"]), key
    trained = [int(label == t) for t, label in zip(features["input_ids"], features["labels"])]
    assert trained == expand_runs(case["trained"]), key
    batch = MultimodalCollator(ctx, TOK.pad_token_id, rope=ROPE.get(template_name))([features])
    for name in ("pixel_values", "pixel_values_videos"):
        if name in case:
            ours, theirs = batch[name].double(), case[name]
            assert list(ours.shape) == theirs["shape"], (key, name)
            assert ours.sum().item() == pytest.approx(theirs["sum"], rel=1e-6, abs=1e-3), (key, name)
            assert ours.abs().sum().item() == pytest.approx(theirs["abs_sum"], rel=1e-6), (key, name)
            flat = ours.flatten()
            for index, value in theirs["picks"].items():
                assert flat[int(index)].item() == pytest.approx(value, abs=1e-5), (key, name, index)
    for name in ("image_grid_thw", "video_grid_thw"):
        if name in case:
            assert batch[name].tolist() == case[name], (key, name)
    if "token_type_ids" in case:
        assert batch["token_type_ids"][0].tolist() == expand_runs(case["token_type_ids"]), key
    if "position_ids" in case:
        theirs = torch.tensor([undo_steps(expand_runs(r)) for r in case["position_ids"]])
        assert torch.equal(batch["position_ids"][1:, 0], theirs[1:]), key        # time, height, width
        assert torch.equal(theirs[0], theirs[1])                                  # LF: the time row again
        assert torch.equal(batch["position_ids"][0, 0], torch.arange(theirs.shape[1]))   # here: plain positions


def test_the_golden_file_covers_every_template_and_variant():
    names = {k.split("/")[0] for k in IMAGE_CASES}
    variants = {k.split("/")[1] for k in GOLDEN["cases"]}
    assert names == {"qwen2_vl", "qwen3_vl", "gemma3", "llava"}
    assert variants == {"default", "small", "answer_cut", "image_cut", "video", "pan_and_scan"}


@pytest.mark.parametrize("key", IMAGE_CASES)
def test_ids_labels_and_pixels_equal_llamafactorys(key, pictures):
    check_against_llamafactory(key, pictures)


@pytest.mark.parametrize("key", sorted(k for k in GOLDEN["cases"] if "/video/" in k))
def test_video_frames_equal_llamafactorys(key, pictures):
    pytest.importorskip("torchvision", reason="transformers builds Qwen's video processor only with torchvision")
    if key.endswith("/file"):
        pytest.importorskip("av", reason="video files are decoded with PyAV (pip install av)")
    check_against_llamafactory(key, pictures)


@pytest.mark.parametrize("key", sorted(k for k in GOLDEN["cases"] if "/image_cut/" in k))
def test_where_llamafactory_cuts_an_image_every_image_token_is_kept(key, pictures):
    template_name, case, ctx, example, cutoff_len = case_inputs(key, pictures)
    media = set(ctx.plugin.media_token_ids(TOK))
    full, _ = encode_multimodal(get_template(template_name, TOK), ctx, example, 4096)
    n_media = sum(t in media for t in full["input_ids"])
    lf_ids = expand_runs(case["input_ids"])
    assert 0 < sum(t in media for t in lf_ids) < n_media     # LLaMA-Factory's ids end inside an image...
    assert "lf_error" in case or template_name in ("gemma3", "llava")   # ...and its Qwen collator then fails
    features, cut = encode_multimodal(get_template(template_name, TOK), ctx, example, cutoff_len)
    assert sum(t in media for t in features["input_ids"]) == n_media and len(features["input_ids"]) <= cutoff_len
    assert any(label != IGNORE_INDEX for label in features["labels"]) and cut is not None
    batch = MultimodalCollator(ctx, TOK.pad_token_id, rope=ROPE.get(template_name))([features])
    assert batch["pixel_values"].shape[0] > 0
    _, _, refuse_ctx, _, _ = case_inputs(key, pictures, truncation="refuse")
    with pytest.raises(DataError, match=rf"{key}: cutoff_len {cutoff_len} would cut this row's image/video tokens"):
        encode_multimodal(get_template(template_name, TOK), refuse_ctx, example, cutoff_len)


def test_pan_and_scan_crops_come_with_their_tokens(pictures):
    """Gemma 3's image_do_pan_and_scan: LLaMA-Factory 0.9.5 fails on it with transformers 5 (it indexes num_crops as
    transformers 4 shaped it; recorded in the golden file); here each crop gets its image sequence and its pixels."""
    key = "gemma3/pan_and_scan/2"
    assert GOLDEN["cases"][key]["lf_error"].startswith("IndexError")
    template_name, case, ctx, example, cutoff_len = case_inputs(key, pictures)
    features, _ = encode_multimodal(get_template(template_name, TOK), ctx, example, cutoff_len)
    crops = features["num_crops"][0]
    assert crops > 0
    soft = TOK.convert_tokens_to_ids("<image_soft_token>")
    assert features["input_ids"].count(soft) == 4 * (1 + crops)
    assert "here are some crops to help you see better" in TOK.decode(features["input_ids"])
    batch = MultimodalCollator(ctx, TOK.pad_token_id)([features])
    assert batch["pixel_values"].shape[0] == 1 + crops and "num_crops" not in batch


@needs_shared
def test_the_golden_rows_are_llamafactorys_mllm_demo():
    rows = json.loads((LF_FIXTURES / "data" / "mllm_demo.json").read_text(encoding="utf-8"))
    for number, row in GOLDEN["rows"].items():
        assert row == {"messages": rows[int(number)]["messages"], "images": rows[int(number)]["images"]}
