"""Vision-language LoRA speed: steadytune against the plain transformers + peft recipe and LLaMA-Factory 0.9.5's VLM
path, on a Qwen2.5-VL-3B shape with random weights and rows shaped like LLaMA-Factory's `mllm_demo` (its six
conversations, one or two images each, repeated), tokens/s and peak memory per arm. For the next GPU session
(docs/speed.md says the command); `--shape tiny --device cpu` runs the same code in a minute here.

    python benchmarks/vlm_speed.py --out vlm_speed.json [--lf-python lfvenv/bin/python] [--steps 30] [--batch 4]

Every arm trains the same model folder on the same rows (the same images, drawn once) with LoRA rank 16 on every
linear layer of the language model (the vision tower and the projector frozen, as LLaMA-Factory's defaults), bf16 on a
GPU, learning rate 1e-4, for `--warmup` + `--steps` optimizer steps of `--batch` rows, and is timed over the last
`--steps`: real tokens (image placeholder tokens included, padding not) per second, and the peak of
torch.cuda.max_memory_allocated. Each arm runs in a process of its own.

- steadytune: `steadytune train` on a LLaMA-Factory YAML (its defaults: packing, chunked loss, the speed plan),
  rates read from its metrics.jsonl (logging_steps 1);
- plain: AutoModelForImageTextToText + peft's LoraConfig on the same linear layers, the model's own forward with
  labels (logits at every position), padded batches of the same rows (made by steadytune's data code, so the
  comparison is the training path, not the preprocessing), torch AdamW;
- llamafactory: LLaMA-Factory's run_exp on the same YAML keys (template qwen2_vl, mllm_demo-style dataset), timed by
  a callback in its own environment (benchmarks/vlm_lf_child.py; it needs torchvision there: transformers 5 builds
  Qwen2.5-VL's processor only with it).

The Qwen2.5-VL-3B shape: its language model is Qwen2.5-3B's (model/shapes.py), its vision tower 32 blocks of width
1280 (MLP 3420, 16 heads, 14-pixel patches merged 2x2, windows of 112 pixels with full attention in blocks 7, 15, 23
and 31), as in Qwen/Qwen2.5-VL-3B-Instruct's config.json as recalled here (no hub on the machine that wrote this);
built on the meta device it has 3.755 B parameters, 0.669 B of them in the vision tower (tests/test_vlm_speed.py),
the published model's 3.75 B.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LF_DATA = ROOT.parent / "shared" / "fixtures" / "llamafactory" / "data" / "mllm_demo.json"
LORA_RANK = 16

SHAPES = {
    "qwen2.5-vl-3b": {
        "text_config": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                            num_key_value_heads=2, vocab_size=151936, max_position_embeddings=128000,
                            tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                                       "mrope_section": [16, 24, 24]}),
        "vision_config": dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                              patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                              fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2),
    },
    "tiny": None,   # steadytune/model/tiny_vlm.py's Qwen2.5-VL: a CPU smoke run of this script
}
# LLaMA-Factory's data/mllm_demo.json (the shape of its rows: multi-turn, 1-2 images), used when the fixtures are not
# beside the checkout.
MLLM_DEMO = [
    {"messages": [{"content": "<image>Who are they?", "role": "user"},
                  {"content": "They're Kane and Gretzka from Bayern Munich.", "role": "assistant"},
                  {"content": "What are they doing?<image>", "role": "user"},
                  {"content": "They are celebrating on the soccer field.", "role": "assistant"}],
     "images": ["mllm_demo_data/1.jpg", "mllm_demo_data/1.jpg"]},
    {"messages": [{"content": "<image>Who is he?", "role": "user"},
                  {"content": "He's Thomas Muller from Bayern Munich.", "role": "assistant"},
                  {"content": "Why is he on the ground?", "role": "user"},
                  {"content": "Because he's sliding on his knees to celebrate.", "role": "assistant"}],
     "images": ["mllm_demo_data/2.jpg"]},
    {"messages": [{"content": "<image>Please describe this image", "role": "user"},
                  {"content": "Chinese astronaut Gui Haichao is giving a speech.", "role": "assistant"},
                  {"content": "What has he accomplished?", "role": "user"},
                  {"content": "He was appointed to be a payload specialist on Shenzhou 16 mission in June 2022.",
                   "role": "assistant"}],
     "images": ["mllm_demo_data/3.jpg"]},
]
DATASET_INFO = {"vlm_bench": {"file_name": "vlm_bench.json", "formatting": "sharegpt",
                              "columns": {"messages": "messages", "images": "images"},
                              "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                       "assistant_tag": "assistant"}}}


# --- the shared inputs ---------------------------------------------------------------------------------------------

def make_model(folder: Path, shape: str) -> Path:
    """The model folder every arm loads: random weights in bf16 (tiny: fp32), the tiny chat tokenizer with Qwen's
    vision tokens (the vocabulary is the shape's; only the first ids occur), Qwen2.5-VL's image processor."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from steadytune.model.tiny_vlm import QWEN_VISION_TOKENS, save_tiny_vlm, vision_tokenizer

    if (folder / "config.json").is_file():
        return folder
    if SHAPES[shape] is None:
        return save_tiny_vlm(folder, "qwen2_5_vl")
    tokenizer = vision_tokenizer("qwen2_5_vl")
    start, end, image, video = (tokenizer.convert_tokens_to_ids(t) for t in QWEN_VISION_TOKENS)
    ids = dict(vision_start_token_id=start, vision_end_token_id=end, image_token_id=image, video_token_id=video,
               pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
               bos_token_id=tokenizer.bos_token_id)
    spec = SHAPES[shape]
    config = AutoConfig.for_model("qwen2_5_vl", text_config={**spec["text_config"], **ids},
                                  vision_config=spec["vision_config"], tie_word_embeddings=True, **ids)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    Qwen2VLImageProcessorPil().save_pretrained(folder)   # Qwen2.5-VL's defaults: 14-pixel patches, merged 2x2
    return folder


def make_dataset(folder: Path, rows: int, image_size: int) -> Path:
    """`rows` conversations of mllm_demo (cycled) with drawn images of image_size x image_size pixels (at 512: 18 x 18
    merged patches, 324 image tokens an image), and the dataset_info.json naming them."""
    from PIL import Image, ImageDraw

    source = json.loads(LF_DATA.read_text(encoding="utf-8")) if LF_DATA.is_file() else MLLM_DEMO
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted({i for row in source for i in row["images"]}):
        k = len(name)
        image = Image.new("RGB", (image_size, image_size), (230, 200 - 10 * k % 150, 180))
        draw = ImageDraw.Draw(image)
        draw.rectangle([image_size // 8, image_size // 8, image_size // 2, image_size // 2], fill=(200, 40, 60))
        draw.ellipse([image_size // 3, image_size // 3, image_size - 4, image_size - 4], fill=(30, 90, 210))
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        image.save(folder / name)
    (folder / "vlm_bench.json").write_text(json.dumps([source[i % len(source)] for i in range(rows)]),
                                            encoding="utf-8")
    (folder / "dataset_info.json").write_text(json.dumps(DATASET_INFO, indent=1), encoding="utf-8")
    return folder


def train_keys(spec: dict) -> dict:
    """The LLaMA-Factory keys every YAML-driven arm trains with."""
    return {"model_name_or_path": spec["model_dir"], "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "lora_target": "all", "lora_rank": LORA_RANK, "lora_alpha": 2 * LORA_RANK, "dataset": "vlm_bench",
            "dataset_dir": spec["data_dir"], "template": "qwen2_vl", "cutoff_len": 4096,
            "image_max_pixels": spec["image_size"] ** 2, "per_device_train_batch_size": spec["batch"],
            "gradient_accumulation_steps": 1, "learning_rate": 1e-4, "lr_scheduler_type": "constant",
            "max_steps": spec["warmup"] + spec["steps"], "logging_steps": 1, "save_steps": 100000,
            "bf16": spec["device"] == "cuda", "report_to": "none", "overwrite_output_dir": True, "seed": 0}


# --- the arms (each in its own process) ---------------------------------------------------------------------------

def arm_steadytune(spec: dict) -> dict:
    from steadytune.config import load_config
    from steadytune.train import run_training
    from steadytune.training.monitor import read_metrics

    out = Path(spec["work"]) / "steadytune_out"
    cfg = load_config(None, {**train_keys(spec), "output_dir": str(out)})
    run_training(cfg, progress=False)
    steps = [r for r in read_metrics(out / "metrics.jsonl") if "input_tokens_per_s" in r]
    steady = [r for r in steps if r["step"] > spec["warmup"]]
    # one record per step (logging_steps 1): the mean of the steps' rates (the steps carry about the same tokens)
    rate = sum(r["input_tokens_per_s"] for r in steady) / max(len(steady), 1)
    peaks = [r["mem_peak_gib"] for r in steps if "mem_peak_gib" in r]   # (a GPU's: none on a CPU)
    return {"tokens_per_s": round(rate, 1), "peak_gib": max(peaks) if peaks else None,
            "steps": len(steady), "decisions": {k: v["value"] for k, v in cfg.decisions.items()
                                                if not isinstance(v["value"], (dict, list))}}


def arm_plain(spec: dict) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from steadytune.config import load_config
    from steadytune.data.prepare import prepare_datasets
    from steadytune.model.load import load_tokenizer
    from steadytune.training.vision_data import load_vision_processor, prepare_with_media, vision_collator

    device = torch.device(spec["device"])
    cfg = load_config(None, {**train_keys(spec), "output_dir": str(Path(spec["work"]) / "plain_out")})
    tokenizer = load_tokenizer(cfg.model)
    data = prepare_with_media(prepare_datasets, cfg, tokenizer, load_vision_processor(cfg, tokenizer))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForImageTextToText.from_pretrained(spec["model_dir"], dtype=dtype).to(device)
    targets = r".*language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
    model = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules=targets))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    collate = vision_collator(cfg, data, tokenizer, None, model.get_base_model())   # padded rows with pixels
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model.train()
    timed_tokens, timed_seconds, b = 0, 0.0, spec["batch"]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(spec["warmup"] + spec["steps"]):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()   # the step as a loop runs it: the batch made (its pixels too), then trained
        rows = [data.train[(step * b + i) % len(data.train)] for i in range(b)]
        batch = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in collate(rows).items()}
        batch.pop("images", None)
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= spec["warmup"]:
            timed_seconds += time.perf_counter() - started
            timed_tokens += int(batch["attention_mask"].sum())
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {"tokens_per_s": round(timed_tokens / max(timed_seconds, 1e-9), 1),
            "peak_gib": None if peak is None else round(peak, 3), "steps": spec["steps"],
            "settings": "model(**batch, labels) (logits at every position), padded batches, bf16 autocast, "
                        "peft LoRA r16 on the language model's linear layers, torch AdamW"}


def arm_llamafactory(spec: dict) -> dict:
    python = spec.get("lf_python")
    if not python:
        return {"skipped": "no LLaMA-Factory Python (--lf-python): python3 -m venv lfvenv && lfvenv/bin/pip install "
                           "'llamafactory==0.9.5' torchvision (matching its torch)"}
    result = Path(spec["work"]) / "llamafactory_result.json"
    spec_file = Path(spec["work"]) / "llamafactory_spec.json"
    spec_file.write_text(json.dumps({**spec, "keys": {**train_keys(spec),
                                                       "output_dir": str(Path(spec["work"]) / "lf_out")}}))
    done = subprocess.run([python, str(Path(__file__).with_name("vlm_lf_child.py")), str(spec_file), str(result)],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                               "DISABLE_VERSION_CHECK": "1"})
    if not result.is_file():
        tail = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()][-3:]
        return {"skipped": f"LLaMA-Factory's run failed (exit {done.returncode}): {' | '.join(tail)}"}
    return json.loads(result.read_text())


ARMS = {"steadytune": arm_steadytune, "plain": arm_plain, "llamafactory": arm_llamafactory}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2.5-vl-3b", choices=sorted(SHAPES))
    parser.add_argument("--arms", default="steadytune,plain,llamafactory")
    parser.add_argument("--device", default=None, help="cuda (default when there is one) or cpu")
    parser.add_argument("--batch", type=int, default=4, help="rows per step (every arm)")
    parser.add_argument("--rows", type=int, default=96, help="rows of the dataset (mllm_demo's, cycled)")
    parser.add_argument("--image-size", type=int, default=512, help="side of the drawn square images, in pixels")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the timing starts")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--lf-python", default=os.environ.get("STEADYTUNE_LF_PYTHON"),
                        help="the Python of an environment with llamafactory==0.9.5 (and torchvision)")
    parser.add_argument("--work", type=Path, default=Path("vlm_speed_work"))
    parser.add_argument("--out", type=Path, default=Path("vlm_speed.json"))
    parser.add_argument("--arm", help=argparse.SUPPRESS)        # internal: run one arm in this process
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        result = ARMS[args.arm](json.loads(args.spec.read_text()))
        (args.spec.parent / f"{args.arm}_result.json").write_text(json.dumps(result, indent=1))
        return 0

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.work.mkdir(parents=True, exist_ok=True)
    spec = {"model_dir": str(make_model(args.work / f"model-{args.shape}", args.shape).resolve()),
            "data_dir": str(make_dataset(args.work / "data", args.rows, args.image_size).resolve()),
            "image_size": args.image_size, "batch": args.batch, "warmup": args.warmup, "steps": args.steps,
            "device": device, "lf_python": args.lf_python, "work": str(args.work.resolve()), "shape": args.shape}
    spec_file = args.work / "spec.json"
    spec_file.write_text(json.dumps(spec, indent=1))
    results = {"spec": spec, "arms": {}}
    for arm in args.arms.split(","):
        print(f"vlm_speed: {arm} ...", flush=True)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--arm", arm, "--spec", str(spec_file)],
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        out = args.work / f"{arm}_result.json"
        results["arms"][arm] = (json.loads(out.read_text()) if done.returncode == 0 and out.is_file()
                                else {"skipped": f"the arm's process failed (exit {done.returncode}; output above)"})
        results["arms"][arm]["wall_seconds"] = round(time.perf_counter() - started, 1)
        print(f"vlm_speed: {arm}: {results['arms'][arm]}", flush=True)
    ours = results["arms"].get("steadytune", {}).get("tokens_per_s")
    for other in ("plain", "llamafactory"):
        theirs = results["arms"].get(other, {}).get("tokens_per_s")
        if ours and theirs:
            results[f"speedup_vs_{other}"] = round(ours / theirs, 2)
    args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in results.items() if k != "spec"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
