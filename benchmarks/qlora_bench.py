"""QLoRA on a GPU: peak memory and tokens/s of a 4-bit base against a bf16 base and the plain peft + bitsandbytes recipe.

    python benchmarks/qlora_bench.py --out /root/qlora                      # H200: Qwen2.5-7B shape, 2k and 8k tokens
    python benchmarks/qlora_bench.py --shape tiny --tokens 128,256 --steps 4 --out /tmp/q   # CPU smoke run

The model: the named shape (steadytune.model.shapes) with random bf16 weights, saved once as a Hugging Face folder with
a small tokenizer, so every arm loads it the way a user's model loads (bitsandbytes quantises random bf16 weights as it
would real ones: speed and memory do not depend on the values). The data: the same text, cut into blocks of exactly
T tokens (stage pt: one block a micro-batch, loss on every token), T = each of --tokens. LoRA r 16 (alpha 32) on every
linear layer, AdamW, lr 2e-4, in every arm. Arms, each in its own process (a clean peak):
  qlora        `steadytune train` with quantization_bit: 4 (nf4, double quantisation, bf16 compute; LF's defaults) and
               nothing else set: the user's default (packing, static shapes, compile, graphs, fp8 base and gradient
               checkpointing as the speed plan decides; the row lists those decisions)
  qlora_gc     the same with gradient_checkpointing: true (the plain recipe's memory regime: the `<= its memory` test)
  plain_qlora  the peft docs' QLoRA recipe, written out: BitsAndBytesConfig(nf4, double quant, bf16 compute),
               prepare_model_for_kbit_training (fp32 non-quantised weights, gradient checkpointing on),
               get_peft_model(all-linear), a plain loop: forward with labels, backward, AdamW step
  bf16         (not run by default) `steadytune train` on the same base in bf16 (the policy's LoRA run)
  qlora_eager  (not run by default) qlora with torch_compile, cuda_graphs and fp8_base false: what the compiled,
               graphed path gains over the same packed micro-batches run eagerly
Per arm and length: peak memory allocated and reserved (torch.cuda.max_memory_*; weights, LoRA state,
activations), tokens/s over the steps after the first two (warm-up), the last loss. Printed as a table, written to
--out/qlora_bench.json. The 16 GB question: the `fits 16 GB` column (peak reserved <= 16 GiB less 1 GiB for the
CUDA context of the seed's card).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ARMS = ("qlora", "qlora_gc", "plain_qlora", "bf16", "qlora_eager")
DEFAULT_ARMS = ("qlora", "qlora_gc", "plain_qlora")
RANK, ALPHA, LR, WARMUP_STEPS = 16, 32, 2e-4, 2
CARD_GIB = 16 - 1   # the seed's 16 GB card, less ~1 GiB of CUDA context and allocator reserve outside torch's count
WORDS = ("the model reads a long document about training language models on small cards with little memory and "
         "learns to predict each next token while four bit weights are decoded block by block before every matmul "
         "判断 这个 商品 质量 物流 很快 非常 满意 书 的 内容 精彩 值得 一读").split()


# --- the shared inputs --------------------------------------------------------------------------------------------

def make_model_folder(shape: str, folder: Path, device: str) -> Path:
    """The shape with random bf16 weights (fp32 on a CPU) and a small tokenizer, saved once."""
    from steadytune.model.shapes import build_shape
    from steadytune.model.tiny import build_chat_tokenizer

    if (folder / "config.json").is_file():
        return folder
    started = time.perf_counter()
    model = build_shape(shape, torch.bfloat16 if device == "cuda" else torch.float32, device)
    model.save_pretrained(folder)
    build_chat_tokenizer("bytelevel").save_pretrained(folder)
    del model
    print(f"{shape}: random weights saved to {folder} in {time.perf_counter() - started:.0f} s", flush=True)
    return folder


def make_text(folder: Path, tokens: int, steps: int) -> Path:
    """A pt dataset of random words, long enough for `steps` blocks of `tokens` tokens (the same file for every arm)."""
    path = folder / f"text_{tokens}_{steps}.jsonl"
    if not path.is_file():
        rng = random.Random(0)
        # ~1.5 tokens a word with the small byte-level tokenizer; twice as much as needed, cut by cutoff_len blocks
        words = 2 * tokens * steps
        rows = [{"text": " ".join(rng.choice(WORDS) for _ in range(2000))} for _ in range(math.ceil(words / 2000))]
        path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return path


def blocks_of(model_dir: Path, text: Path, tokens: int, steps: int) -> list[torch.Tensor]:
    """The plain arm's data: the same text, tokenised and cut into blocks as stage pt cuts it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids: list[int] = []
    for line in text.read_text(encoding="utf-8").splitlines():
        ids += tokenizer(json.loads(line)["text"])["input_ids"] + [tokenizer.eos_token_id]
    return [torch.tensor([ids[i * tokens:(i + 1) * tokens]]) for i in range(min(steps, len(ids) // tokens))]


# --- the arms -------------------------------------------------------------------------------------------------------

def reset_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak(device: str) -> dict:
    if device != "cuda":
        return {"peak_allocated_gib": None, "peak_reserved_gib": None}
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}


def run_steadytune(arm: str, model_dir: Path, text: Path, tokens: int, steps: int, out: Path, device: str) -> dict:
    from steadytune.config import load_config
    from steadytune.train import run_training
    from steadytune.training.monitor import read_metrics

    keys = {"model_name_or_path": str(model_dir), "stage": "pt", "dataset": str(text), "cutoff_len": tokens,
            "per_device_train_batch_size": 1, "max_steps": steps, "learning_rate": LR, "lora_rank": RANK,
            "lora_alpha": ALPHA, "lora_target": "all", "logging_steps": 1, "save_steps": 100000, "seed": 0,
            "output_dir": str(out), "overwrite_output_dir": True, "report_to": "none",
            "bf16": device == "cuda", "lr_scheduler_type": "constant"}
    if arm.startswith("qlora"):
        keys["quantization_bit"] = 4
    if arm == "qlora_gc":
        keys["gradient_checkpointing"] = True
    if arm == "qlora_eager":
        keys.update(torch_compile=False, cuda_graphs=False, fp8_base=False)
    cfg = load_config(None, keys)
    result = run_training(cfg, progress=False)
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "input_tokens_per_s" in r]
    rates = [r["input_tokens_per_s"] for r in rows if r["step"] > WARMUP_STEPS] or [result.input_tokens_per_s]
    decisions = cfg.decisions
    # Every step has the same tokens, so tokens / time over the steps is the harmonic mean of their rates: the same
    # measure as the plain arm's (an arithmetic mean would hide a slow step). step_rates shows where time went.
    return {"tokens_per_s": round(len(rates) / sum(1.0 / r for r in rates)), "step_rates": [round(r) for r in rates],
            "loss": round(result.losses[-1], 4),
            "steps": result.global_step,
            "estimate": decisions.get("memory_estimate", {}).get("value"),
            "gradient_checkpointing": decisions.get("gradient_checkpointing", {}).get("value"),
            **{key: decisions.get(key, {}).get("value") for key in ("packing", "static_shapes", "torch_compile",
                                                                    "cuda_graphs", "fp8_base")},
            # why a piece stayed off, as the start-up print says it
            "off": {key: decisions[key]["reason"] for key in ("static_shapes", "torch_compile", "cuda_graphs",
                                                              "fp8_base")
                    if key in decisions and decisions[key].get("value") is False}}


def run_plain_qlora(model_dir: Path, text: Path, tokens: int, steps: int, device: str) -> dict:
    """The peft docs' QLoRA recipe (huggingface.co/docs/peft, quantization guide), written out as a loop."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    compute = torch.bfloat16 if device == "cuda" else torch.float32
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=compute)
    model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=bnb, dtype=compute,
                                                 device_map={"": 0 if device == "cuda" else "cpu"},
                                                 attn_implementation="sdpa")
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    model.train()
    times, loss = [], None
    for step, ids in enumerate(blocks_of(model_dir, text, tokens, steps), start=1):
        ids = ids.to(model.device)
        started = time.perf_counter()
        with torch.autocast(device, dtype=compute, enabled=device == "cuda"):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = out.loss.item()   # syncs: the step's time is complete
        if step > WARMUP_STEPS:
            times.append(time.perf_counter() - started)
    rate = tokens * len(times) / sum(times) if times else None
    return {"tokens_per_s": round(rate) if rate else None, "step_rates": [round(tokens / t) for t in times],
            "loss": round(loss, 4), "steps": steps,
            "gradient_checkpointing": True}


def run_arm(arm: str, model_dir: Path, work: Path, token_sizes: list[int], steps: int, device: str) -> list[dict]:
    rows = []
    for tokens in token_sizes:
        text = make_text(work, tokens, steps)
        reset_memory(device)
        started = time.perf_counter()
        try:
            if arm == "plain_qlora":
                row = run_plain_qlora(model_dir, text, tokens, steps, device)
            else:
                row = run_steadytune(arm, model_dir, text, tokens, steps, work / f"run-{arm}-{tokens}", device)
        except torch.OutOfMemoryError as e:   # an arm that does not fit is a result, not a crash of the table
            row = {"error": f"out of memory: {str(e).splitlines()[0][:160]}"}
        row.update(arm=arm, tokens=tokens, seconds=round(time.perf_counter() - started, 1), **peak(device))
        print(f"[{arm} {tokens}] " + json.dumps(row), flush=True)
        rows.append(row)
    return rows


# --- the table -------------------------------------------------------------------------------------------------------

def table(rows: list[dict]) -> str:
    lines = [f"{'arm':12} {'tokens':>6} {'tokens/s':>9} {'peak alloc':>10} {'peak resv':>9} {'fits 16 GB':>10} "
             f"{'estimate':>10} {'loss':>7}  notes"]
    for r in rows:
        resv = r.get("peak_reserved_gib")
        fits = "-" if resv is None else ("yes" if resv <= CARD_GIB else "no")
        note = r.get("error") or (f"compile {r.get('torch_compile')}, graphs {r.get('cuda_graphs')}"
                                  if "torch_compile" in r else "")
        lines.append(f"{r['arm']:12} {r['tokens']:>6} {r.get('tokens_per_s') or '-':>9} "
                     f"{r.get('peak_allocated_gib') or '-':>10} {resv or '-':>9} {fits:>10} "
                     f"{r.get('estimate') or '-':>10} {r.get('loss') or '-':>7}  {note}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2.5-7b", help="a steadytune.model.shapes name (tiny: CPU smoke)")
    parser.add_argument("--tokens", default="2048,8192", help="tokens a step (comma list)")
    parser.add_argument("--steps", type=int, default=8, help="steps per arm and length (the first 2 are warm-up)")
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--out", type=Path, default=Path("saves/qlora_bench"))
    parser.add_argument("--model-dir", type=Path, default=None, help="where the random-weight folder is kept "
                                                                     "(default: OUT/model-SHAPE)")
    parser.add_argument("--arm", help=argparse.SUPPRESS)   # a worker: run one arm, write its rows
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    token_sizes = [int(t) for t in args.tokens.split(",") if t]
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = args.model_dir or args.out / f"model-{args.shape}"
    if args.arm:
        rows = run_arm(args.arm, model_dir, args.out, token_sizes, args.steps, device)
        (args.out / f"rows-{args.arm}.json").write_text(json.dumps(rows), encoding="utf-8")
        return 0
    arms = [a for a in args.arms.split(",") if a]
    if set(arms) - set(ARMS):
        raise SystemExit(f"--arms takes {', '.join(ARMS)}")
    make_model_folder(args.shape, model_dir, device)
    rows: list[dict] = []
    for arm in arms:   # each arm in its own process: its peak memory is its own, nothing cached from another arm
        worker = [sys.executable, __file__, "--arm", arm, "--shape", args.shape, "--tokens", args.tokens,
                  "--steps", str(args.steps), "--out", str(args.out), "--model-dir", str(model_dir)]
        if subprocess.run(worker).returncode != 0:
            rows.append({"arm": arm, "tokens": 0, "error": "the arm's process failed (its output is above)"})
            continue
        rows += json.loads((args.out / f"rows-{arm}.json").read_text(encoding="utf-8"))
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    report = {"shape": args.shape, "device": name, "lora_rank": RANK, "steps": args.steps, "rows": rows,
              "torch": torch.__version__, "bitsandbytes": _version("bitsandbytes"), "peft": _version("peft"),
              "transformers": _version("transformers")}
    (args.out / "qlora_bench.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"\n{args.shape} on {name}; LoRA r {RANK} on every linear layer; {args.steps} steps a length "
          f"(tokens/s after {WARMUP_STEPS} warm-up steps); bitsandbytes {report['bitsandbytes']}")
    print(table(rows))
    return 0


def _version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
