"""Vision-language LoRA speed: steadytune against the plain transformers + peft recipe and LLaMA-Factory 0.9.5's VLM
path, on the Qwen2.5-VL-3B, Qwen3-VL-4B and Gemma-3-4B shapes with random weights and rows shaped like
LLaMA-Factory's `mllm_demo` (its six conversations, one or two images each, repeated), tokens/s and peak memory per
arm. benchmarks/gpu_vlm.sh runs it on a GPU (docs/speed.md has the figures); `--shape tiny --device cpu` runs the
same code in a minute here.

    python benchmarks/vlm_speed.py --out vlm_speed.json [--shape qwen3-vl-4b] [--lf-python lfsite.python]
        [--steps 30] [--batch 4] [--deadline SECONDS]

Every arm trains the same model folder on the same rows (the same images, drawn once) with LoRA rank 16 on every
linear layer of the language model (the vision tower and the projector frozen, as LLaMA-Factory's defaults), bf16 on a
GPU, learning rate 1e-4, for `--warmup` + `--steps` optimizer steps of `--batch` rows, and is timed over the last
`--steps`: real tokens (image placeholder tokens included, padding not) per second, and the peak of
torch.cuda.max_memory_allocated. Each arm runs in a process of its own.

- steadytune: `steadytune train` on a LLaMA-Factory YAML (its defaults: packing, chunked loss, the speed plan), with
  `torch_compile: true` on a GPU: the plan compiles by default from 400 micro-batches (hardware/speed.py), which a
  real run has and these 35 steps do not; rates read from its metrics.jsonl (logging_steps 1), with what the plan
  decided (static shapes, compile, CUDA graphs, fp8 base, fused SwiGLU, the vision side) and the graph's recording;
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
the published model's 3.75 B. Qwen3-VL-4B: Qwen3-4B's language model (36 layers of width 2560, 32 heads, 8 KV
heads of 128, MLP 9728), a vision tower of 24 blocks of width 1024 (16-pixel patches, deepstack features from blocks
5, 11 and 17): 4.438 B, the published 4.44 B. Gemma-3-4B: 34 layers of width 2560 (8 heads, 4 KV heads of 256, MLP
10240, sliding windows of 1024 in 5 layers of 6), a SigLIP tower of 27 blocks of width 1152 over 896 x 896 images
(256 tokens each): 4.300 B, the published 4.3 B (its rope scaling left at the default: no effect on speed).
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

QWEN_IDS = ("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id")
SHAPES = {
    "qwen2.5-vl-3b": {
        "model_type": "qwen2_5_vl", "tiny": "qwen2_5_vl", "template": "qwen2_vl",
        "text_config": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                            num_key_value_heads=2, vocab_size=151936, max_position_embeddings=128000,
                            tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                                       "mrope_section": [16, 24, 24]}),
        "vision_config": dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                              patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                              fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2),
    },
    "qwen3-vl-4b": {
        "model_type": "qwen3_vl", "tiny": "qwen3_vl", "template": "qwen3_vl_nothink",
        "text_config": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                            num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
                            tie_word_embeddings=True,
                            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                             "mrope_section": [24, 20, 20], "mrope_interleaved": True}),
        "vision_config": dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2560,
                              patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
                              deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh"),
    },
    "gemma-3-4b": {
        "model_type": "gemma3", "tiny": "gemma3_vl", "template": "gemma3",
        "text_config": dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
                            num_key_value_heads=4, head_dim=256, vocab_size=262208, sliding_window=1024,
                            query_pre_attn_scalar=256, max_position_embeddings=131072),
        "vision_config": dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                              image_size=896, patch_size=14, vision_use_head=False),
        "config": dict(mm_tokens_per_image=256),
    },
    # steadytune/model/tiny_vlm.py's models: CPU smoke runs of this script
    "tiny": {"tiny": "qwen2_5_vl", "template": "qwen2_vl"},
    "tiny-qwen3-vl": {"tiny": "qwen3_vl", "template": "qwen3_vl_nothink"},
    "tiny-gemma-3": {"tiny": "gemma3_vl", "template": "gemma3"},
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
    """The model folder every arm loads: random weights in bf16 (tiny: fp32), the tiny chat tokenizer with the
    family's vision tokens (the vocabulary is the shape's; only the first ids occur), the family's image processor
    (Pillow backend) and, for Gemma 3, its processor (256 image tokens)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from steadytune.model.tiny_vlm import GEMMA3_VISION_TOKENS, QWEN_VISION_TOKENS, save_tiny_vlm, vision_tokenizer

    if (folder / "config.json").is_file():
        return folder
    spec = SHAPES[shape]
    if "model_type" not in spec:
        return save_tiny_vlm(folder, spec["tiny"])
    tokenizer = vision_tokenizer(spec["tiny"])
    common = dict(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                  bos_token_id=tokenizer.bos_token_id)
    if spec["model_type"] == "gemma3":
        boi, eoi, image = (tokenizer.convert_tokens_to_ids(t) for t in GEMMA3_VISION_TOKENS)
        ids = dict(boi_token_index=boi, eoi_token_index=eoi, image_token_index=image)
        text = {**spec["text_config"], **common}
    else:
        ids = dict(zip(QWEN_IDS, (tokenizer.convert_tokens_to_ids(t) for t in QWEN_VISION_TOKENS)))
        text = {**spec["text_config"], **ids, **common}
    config = AutoConfig.for_model(spec["model_type"], text_config=text, vision_config=spec["vision_config"],
                                  tie_word_embeddings=True, **spec.get("config", {}), **ids, **common)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    projection = getattr(model.model, "multi_modal_projector", None)
    if projection is not None and hasattr(projection, "mm_input_projection_weight"):
        with torch.no_grad():   # Gemma 3 starts it at zero; a trained one is not
            projection.mm_input_projection_weight.normal_(std=0.02)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_image_processor(folder, spec)
    return folder


def save_image_processor(folder: Path, spec: dict) -> None:
    """The released models' image processors (Pillow backend), with their patch sizes and normalisation."""
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if spec["model_type"] == "qwen2_5_vl":
        Qwen2VLImageProcessorPil().save_pretrained(folder)   # 14-pixel patches, merged 2x2
    elif spec["model_type"] == "qwen3_vl":
        Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3,
                                 image_std=[0.5] * 3).save_pretrained(folder)
    else:   # Gemma 3: 896 x 896, 256 tokens an image, the named vision tokens in tokenizer_config.json
        from transformers import AutoTokenizer, Gemma3Processor

        from steadytune.model.tiny_vlm import GEMMA3_NAMED_TOKENS

        config_file = folder / "tokenizer_config.json"
        tokenizer_config = json.loads(config_file.read_text(encoding="utf-8"))
        tokenizer_config["extra_special_tokens"] = GEMMA3_NAMED_TOKENS
        config_file.write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
        image_processor = Gemma3ImageProcessorPil(size={"height": 896, "width": 896}, image_mean=[0.5] * 3,
                                                  image_std=[0.5] * 3)   # (its defaults are SigLIP's 224)
        Gemma3Processor(image_processor, AutoTokenizer.from_pretrained(folder),
                        image_seq_length=256).save_pretrained(folder)


def make_dataset(folder: Path, rows: int, image_size: int, fixtures: bool = True) -> Path:
    """`rows` conversations of mllm_demo (cycled) with drawn images of image_size x image_size pixels (at 512: 18 x 18
    merged patches, 324 image tokens an image), and the dataset_info.json naming them. `fixtures`: LF's own file where
    ../shared has it (the benchmark), else the rows written here (tests: the same rows on every machine)."""
    from PIL import Image, ImageDraw

    use_lf = fixtures and LF_DATA.is_file()
    source = json.loads(LF_DATA.read_text(encoding="utf-8")) if use_lf else MLLM_DEMO
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
            "dataset_dir": spec["data_dir"], "template": SHAPES[spec["shape"]]["template"], "cutoff_len": 4096,
            "image_max_pixels": spec["image_size"] ** 2, "per_device_train_batch_size": spec["batch"],
            "gradient_accumulation_steps": 1, "learning_rate": 1e-4, "lr_scheduler_type": "constant",
            "max_steps": spec["warmup"] + spec["steps"], "logging_steps": 1, "save_steps": 100000,
            "bf16": spec["device"] == "cuda", "report_to": "none", "overwrite_output_dir": True, "seed": 0}


# --- the arms (each in its own process) ---------------------------------------------------------------------------

# What the steadytune arm reports of its plan (run_config.yaml's decisions), with the reason where a piece is off.
PLAN_KEYS = ("packing_attention", "static_shapes", "torch_compile", "cuda_graphs", "fp8_base", "fused_swiglu",
             "shared_input_projections", "recompute_pointwise", "gradient_checkpointing", "vision_speed")


def arm_steadytune(spec: dict) -> dict:
    from steadytune.config import load_config
    from steadytune.train import run_training
    from steadytune.training.monitor import read_metrics

    out = Path(spec["work"]) / "steadytune_out"
    keys = {**train_keys(spec), "output_dir": str(out)}
    if spec["device"] == "cuda" and spec.get("compile", True):
        keys["torch_compile"] = True   # what the plan gives a run of 400 micro-batches or more (module docstring)
    cfg = load_config(None, keys)
    run_training(cfg, progress=False)
    records = read_metrics(out / "metrics.jsonl")
    steps = [r for r in records if "input_tokens_per_s" in r]
    # one record per step (logging_steps 1): tokens over seconds of the timed steps (each step's seconds are its
    # target tokens over its target rate; its input tokens, that time its input rate)
    tokens = seconds = 0.0
    previous = {r["step"]: r["tokens"] for r in steps}
    for r in steps:
        if r["step"] > spec["warmup"] and r.get("target_tokens_per_s"):
            step_seconds = (r["tokens"] - previous.get(r["step"] - 1, 0)) / r["target_tokens_per_s"]
            tokens += r["input_tokens_per_s"] * step_seconds
            seconds += step_seconds
    peaks = [r["mem_peak_gib"] for r in steps if "mem_peak_gib" in r]   # (a GPU's: none on a CPU)
    decisions = cfg.decisions
    plan = {k: decisions[k]["value"] for k in PLAN_KEYS if k in decisions}
    off = {k: decisions[k]["reason"] for k in PLAN_KEYS if k in decisions and not decisions[k]["value"]}
    return {"tokens_per_s": round(tokens / max(seconds, 1e-9), 1), "peak_gib": max(peaks) if peaks else None,
            "steps": sum(1 for r in steps if r["step"] > spec["warmup"]),
            "step_rates": [round(r["input_tokens_per_s"]) for r in steps],
            "loss": [round(r["loss"], 4) for r in steps if isinstance(r.get("loss"), float)][-3:],
            "keys": {k: v for k, v in keys.items() if k == "torch_compile"}, "plan": plan, "off": off,
            "vision_speed": decisions.get("vision_speed", {}).get("reason"),
            "static_shape": decisions.get("static_shapes", {}).get("reason"),
            "graphs": [{k: v for k, v in r.items() if k != "step"} for r in records if r.get("event") == "cuda_graphs"]}


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
    result.unlink(missing_ok=True)
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
    parser.add_argument("--no-compile", action="store_true",
                        help="steadytune's arm without torch_compile: true (what a run under 400 micro-batches gets)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds from now: an arm is given what is left of them, one that would start later "
                             "is skipped (saying so)")
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
    import transformers

    ends = time.perf_counter() + args.deadline if args.deadline else None
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.work.mkdir(parents=True, exist_ok=True)
    spec = {"model_dir": str(make_model(args.work / f"model-{args.shape}", args.shape).resolve()),
            "data_dir": str(make_dataset(args.work / "data", args.rows, args.image_size).resolve()),
            "image_size": args.image_size, "batch": args.batch, "warmup": args.warmup, "steps": args.steps,
            "device": device, "lf_python": args.lf_python, "work": str(args.work.resolve()), "shape": args.shape,
            "compile": not args.no_compile}
    spec_file = args.work / f"spec-{args.shape}.json"
    spec_file.write_text(json.dumps(spec, indent=1))
    results = {"spec": spec, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__}, "arms": {}}
    for arm in args.arms.split(","):
        left = None if ends is None else ends - time.perf_counter()
        if left is not None and left < 30:
            results["arms"][arm] = {"skipped": f"the deadline ({args.deadline:.0f} s) left {max(left, 0):.0f} s"}
            continue
        print(f"vlm_speed: {args.shape}: {arm} ...", flush=True)
        started = time.perf_counter()
        out = args.work / f"{arm}_result.json"
        out.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        try:
            done = subprocess.run([sys.executable, __file__, "--arm", arm, "--spec", str(spec_file)], env=env,
                                  timeout=left)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = "timed out at the deadline"
        results["arms"][arm] = (json.loads(out.read_text()) if code == 0 and out.is_file()
                                else {"skipped": f"the arm's process failed ({code}; output above)"})
        results["arms"][arm]["wall_seconds"] = round(time.perf_counter() - started, 1)
        print(f"vlm_speed: {args.shape}: {arm}: {results['arms'][arm]}", flush=True)
        args.out.write_text(json.dumps(results, indent=1))   # what is measured so far, should the call end
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
