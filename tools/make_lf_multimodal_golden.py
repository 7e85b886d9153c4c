"""Make tests/golden/multimodal/lf_mllm_demo.json with LLaMA-Factory 0.9.5 itself (not run in CI): for rows of its
`mllm_demo` dataset, the token ids, labels, token-type ids, grid sizes, a summary of the pixel values and Qwen's
rope positions that LLaMA-Factory makes for templates qwen2_vl, qwen3_vl, gemma3 and llava, so that
tests/test_multimodal_golden.py checks steadytune's against them without LLaMA-Factory.

    python3 -m venv /tmp/lfvenv
    /tmp/lfvenv/bin/pip install torch && /tmp/lfvenv/bin/pip install --find-links .whl/lf llamafactory==0.9.5
    /tmp/lfvenv/bin/python tools/make_lf_multimodal_golden.py [--data ../shared/fixtures/llamafactory/data]

(pip pulls torchvision and av beside it; transformers 5.6.0 then builds Qwen-VL's processors with their video
processors.) Each row goes through LLaMA-Factory's own code path: its template (get_template_and_fix_tokenizer), its
SupervisedDatasetProcessor (mm_plugin.process_messages, then the turns and cutoff_len), and its
MultiModalDataCollatorForSeq2Seq (the pixels, token_type_ids, and position_ids from a tiny Qwen-VL model's
get_rope_index).

The processors are transformers' own classes, sized as in tests/multimodal_setup.py (the image processors' Pillow
backend, which steadytune's environment uses too: transformers without torchvision); the tokenizer is the golden
byte-level one with the vision tokens. The pictures are drawn by tests/multimodal_setup.draw_image (computed pixel
by pixel, saved lossless) under mllm_demo's own file names: LLaMA-Factory's photos are not in the shared fixtures,
and drawn pixels are the same in both environments. Videos are given as lists of drawn frames (LLaMA-Factory's
pre-sampled form) and as a lossless video file written with PyAV (frames sampled by video_fps as LLaMA-Factory
samples them).
"""

from __future__ import annotations

import argparse
import copy
import importlib.machinery
import json
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
OUT = ROOT / "tests" / "golden" / "multimodal" / "lf_mllm_demo.json"
DEFAULT_DATA = ROOT.parent / "shared" / "fixtures" / "llamafactory" / "data"

TEMPLATES = ("qwen2_vl", "qwen3_vl", "gemma3", "llava")
# mllm_demo's pictures, drawn: file -> (width, height, seed). 1.jpg is large (image_max_pixels shrinks it), 2.jpg
# smaller than image_min_pixels in the `small` variant, 3.jpg wide (Gemma 3's pan and scan crops it).
PICTURES = {"mllm_demo_data/1.jpg": (300, 200, 1), "mllm_demo_data/2.jpg": (50, 20, 2),
            "mllm_demo_data/3.jpg": (1100, 280, 3)}
# variant -> (LLaMA-Factory keys, rows of mllm_demo used)
VARIANTS = {
    "default": ({}, [0, 1, 2]),
    "small": ({"image_max_pixels": 4096, "image_min_pixels": 2048}, [0, 1]),
    "answer_cut": ({"cutoff_len": "fit"}, [2]),        # cutoff_len that cuts the answer, not the image
    "image_cut": ({"cutoff_len": "image"}, [0]),       # cutoff_len where LLaMA-Factory cuts inside an image
    "pan_and_scan": ({"image_do_pan_and_scan": True}, [2]),   # Gemma 3 only: the wide 3.jpg gets crops
}
VIDEO_FRAMES = [(64, 48, 10 + k) for k in range(3)]    # an odd count: Qwen repeats the last frame
VIDEO_FILE = {"frames": [(64, 48, 20 + k) for k in range(12)], "fps": 6}   # 2 s: video_fps 2 keeps 4 frames
LF_DEFAULTS = dict(image_max_pixels=768 * 768, image_min_pixels=32 * 32, image_do_pan_and_scan=False,
                   crop_to_patches=False, video_max_pixels=256 * 256, video_min_pixels=16 * 16, video_fps=2.0,
                   video_maxlen=128, use_audio_in_video=False, audio_sampling_rate=16000)


def stub_torchaudio() -> None:
    try:
        import torchaudio  # noqa: F401
    except Exception:  # its native library may not load against this torch; images never use it
        stand_in = types.ModuleType("torchaudio")
        stand_in.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
        sys.modules["torchaudio"] = stand_in


def build_processor(name: str, keys: dict):
    from multimodal_setup import GEMMA3_NAMED_TOKENS, GEMMA3_TOKENS_PER_IMAGE, LLAVA_PATCH, image_processor, \
        video_processor, vision_tokenizer
    from transformers import Gemma3Processor, LlavaProcessor, Qwen2VLProcessor, Qwen3VLProcessor

    if name in ("qwen2_vl", "qwen3_vl"):
        tok = vision_tokenizer()
        cls = Qwen2VLProcessor if name == "qwen2_vl" else Qwen3VLProcessor
        proc = cls(image_processor=image_processor(name), tokenizer=tok, video_processor=video_processor(name))
    elif name == "gemma3":
        tok = vision_tokenizer(GEMMA3_NAMED_TOKENS)
        proc = Gemma3Processor(image_processor=image_processor(name), tokenizer=tok,
                               image_seq_length=GEMMA3_TOKENS_PER_IMAGE)
    else:
        tok = vision_tokenizer()
        proc = LlavaProcessor(image_processor=image_processor(name), tokenizer=tok, patch_size=LLAVA_PATCH,
                              vision_feature_select_strategy="default", num_additional_image_tokens=1)
    for key, value in {**LF_DEFAULTS, **{k: v for k, v in keys.items() if k in LF_DEFAULTS}}.items():
        setattr(proc, key, value)   # what LLaMA-Factory's patch_processor sets from its ModelArguments
    return tok, proc


def summary(tensor) -> dict:
    """Shape, sums and a few values of a float tensor (the golden file stays small; the test compares them)."""
    flat = tensor.double().flatten()
    picks = [int(i) for i in range(0, flat.numel(), max(1, flat.numel() // 8))][:8]
    return {"shape": list(tensor.shape), "sum": float(flat.sum()), "abs_sum": float(flat.abs().sum()),
            "picks": {str(i): round(float(flat[i]), 6) for i in picks}}


def compact(ids: list[int], labels: list[int]) -> dict:
    """ids and which of them are trained (1: label = id, 0: ignored), both as runs."""
    from multimodal_setup import runs
    flags = [1 if label == tok else 0 if label == -100 else "x" for tok, label in zip(ids, labels)]
    return {"input_ids": runs(ids), "trained": runs(flags)}


def encode(name: str, keys: dict, messages: list[dict], images: list[str], videos: list, rope_model,
           collate: bool = True):
    """LLaMA-Factory's supervised encoding and collation of one row -> the golden case."""
    from multimodal_setup import runs, steps
    from llamafactory.data.collator import MultiModalDataCollatorForSeq2Seq
    from llamafactory.data.processor.supervised import SupervisedDatasetProcessor
    from llamafactory.data.template import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    tok, proc = build_processor(name, keys)
    data_args = DataArguments(template=name, cutoff_len=keys.get("cutoff_len", 4096))
    template = get_template_and_fix_tokenizer(tok, data_args)
    processor = SupervisedDatasetProcessor(template=template, tokenizer=tok, processor=proc, data_args=data_args)
    prompt, response = messages[:-1], messages[-1:]
    ids, labels = processor._encode_data_example(prompt, response, "", "", list(images), list(videos), [])
    if not collate:
        return ids, tok
    collator = MultiModalDataCollatorForSeq2Seq(tokenizer=tok, template=template, processor=proc,
                                                model=rope_model.get(name), label_pad_token_id=-100)
    case = compact(ids, labels)
    try:
        batch = collator([{"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels,
                           "images": list(images), "videos": list(videos), "audios": []}])
    except (RuntimeError, ValueError, IndexError) as e:   # a row whose image tokens were cut (the image_cut variant)
        case["lf_error"] = f"{type(e).__name__}: {e}"
        return case, tok
    for key in ("pixel_values", "pixel_values_videos"):
        if key in batch:
            case[key] = summary(batch[key])
    for key in ("image_grid_thw", "video_grid_thw"):
        if key in batch:
            case[key] = batch[key].tolist()
    if "token_type_ids" in batch:
        case["token_type_ids"] = runs([int(x) for x in batch["token_type_ids"][0].tolist()])
    if "second_per_grid_ts" in batch:
        case["second_per_grid_ts"] = [float(x) for x in batch["second_per_grid_ts"]]
    if "position_ids" in batch and batch["position_ids"].dim() == 3:   # 4 rows: LF puts the time row first again
        case["position_ids"] = [runs(steps(r)) for r in batch["position_ids"][:, 0].tolist()]
    return case, tok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LLaMA-Factory's data/ folder")
    args = parser.parse_args()
    stub_torchaudio()
    import llamafactory
    import transformers
    from multimodal_setup import draw_image, qwen_vl_config, write_video
    from transformers import AutoModel

    import llamafactory.data.template as lf_template
    pristine = copy.deepcopy(lf_template.TEMPLATES)
    rows = json.loads((args.data / "mllm_demo.json").read_text(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="lf_mm_golden_"))
    for file, (w, h, seed) in PICTURES.items():
        draw_image(work / file, (w, h), seed=seed)
    frames = [str(draw_image(work / f"frames/{k}.png", (w, h), seed=seed)) for k, (w, h, seed) in enumerate(VIDEO_FRAMES)]
    rope_model = {}
    for name, model_type in (("qwen2_vl", "qwen2_vl"), ("qwen3_vl", "qwen3_vl")):
        from multimodal_setup import vision_tokenizer
        rope_model[name] = AutoModel.from_config(qwen_vl_config(model_type, vision_tokenizer()))
    out = {"made_with": f"LLaMA-Factory {llamafactory.__version__}, transformers {transformers.__version__}",
           "pictures": PICTURES, "video_frames": VIDEO_FRAMES, "variants": {}, "rows": {}, "cases": {}}
    for variant, (keys, row_numbers) in VARIANTS.items():
        out["variants"][variant] = keys
        for name in TEMPLATES:
            if variant == "pan_and_scan" and name != "gemma3":
                continue
            for number in row_numbers:
                lf_template.TEMPLATES.clear()
                lf_template.TEMPLATES.update(copy.deepcopy(pristine))
                source = rows[number]
                out["rows"][str(number)] = {"messages": source["messages"], "images": source["images"]}
                images = [str(work / p) for p in source["images"]]
                case_keys = dict(keys)
                if "cutoff_len" in keys:   # worked out from the whole row's LF ids
                    full, tok = encode(name, {**keys, "cutoff_len": 4096}, source["messages"], images, [], rope_model)
                    case_keys["cutoff_len"] = cutoff_for(
                        keys["cutoff_len"], full, tok, name, lambda c: encode(
                            name, {"cutoff_len": c}, source["messages"], images, [], rope_model, collate=False)[0])
                try:
                    case, _ = encode(name, case_keys, source["messages"], images, [], rope_model)
                except (IndexError, RuntimeError, ValueError) as e:   # pan and scan: LF 0.9.5 fails on transformers 5
                    case = {"lf_error": f"{type(e).__name__}: {e}"}
                case["keys"] = case_keys
                out["cases"][f"{name}/{variant}/{number}"] = case
                print(f"{name}/{variant}/{number}: {len(case.get('input_ids', ''))} ids {case.get('lf_error', '')}")
    video_row = [{"role": "user", "content": "<video>What happens in this video?"},
                 {"role": "assistant", "content": "Stripes move."}]
    out["video_row"] = video_row
    video_file = str(write_video(work / "clip.mov", VIDEO_FILE["frames"], VIDEO_FILE["fps"]))
    out["video_file"] = VIDEO_FILE
    for name in ("qwen2_vl", "qwen3_vl"):
        for kind, video in (("frames", frames), ("file", video_file)):
            lf_template.TEMPLATES.clear()
            lf_template.TEMPLATES.update(copy.deepcopy(pristine))
            case, _ = encode(name, {}, video_row, [], [video], rope_model)
            case["keys"] = {}
            out["cases"][f"{name}/video/{kind}"] = case
            print(f"{name}/video/{kind}: {len(case['input_ids'])} ids")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


def cutoff_for(kind: str, full: dict, tok, name: str, cut_ids) -> int:
    """`fit`: a cutoff_len that cuts only the answer (the prompt under half of it, kept whole by LLaMA-Factory's
    rule); `image`: the smallest cutoff_len whose cut (LLaMA-Factory's ids, `cut_ids(cutoff)`) keeps some of the
    first image's tokens but not all of them."""
    from multimodal_setup import expand_runs
    ids, flags = expand_runs(full["input_ids"]), expand_runs(full["trained"])
    if kind == "fit":
        return min(2 * flags.index(1) + 3, len(flags) - 1)
    media = {tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<image_soft_token>", "<image>")}
    n = sum(1 for t in ids if t in media)
    for cutoff in range(8, len(ids)):
        kept = sum(1 for t in cut_ids(cutoff) if t in media)
        if 0 < kept < n:
            return cutoff
    raise SystemExit(f"{name}: no cutoff_len ends inside an image")


if __name__ == "__main__":
    main()
