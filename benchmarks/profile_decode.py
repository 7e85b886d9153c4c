"""The decode engine on one machine: its speed side by side with transformers' own static-cache `generate`, its
greedy output against `generate`'s, and where one engine step spends its time.

--compare (what issue 53's Measure section asks, in one call): for each --shapes (random weights of the named
shapes: steadytune.model.shapes) and each row count, decode tokens/s of
    engine+lora   our engine (model/decode: our forward, Triton kernels on a GPU, the whole step one CUDA graph, no
                  host wait per step) with a LoRA adapter (r 8 on every linear layer, random B so it computes)
    engine+2lora  the same with two adapters, rows alternating between them in one batch
    engine        the base model, no adapter
    hf+lora       our engine on the model's own forward (transformers + peft: STEADYTUNE_DECODE_KERNELS=off), the
                  design before issue 53
    static        transformers' `generate` with its static cache, the base model
    static+lora   the same with the adapter (peft)
each timed over --steps decode steps after --warmup (graph capture, compilation); `generate`'s per-step time is
(time for warmup + steps tokens - time for warmup tokens) / steps, so its prefill is left out as ours is. Then a
greedy check: --check-rows prompts of different lengths, rows joining mid-way, --check-tokens tokens each, our
engine + adapter against transformers' `generate` on the same model + adapter, one prompt at a time; it prints the
rows that agree and where the others first differ (bf16 kernels that sum in another order may flip a near-tie).
--with-serve and --with-grpo add benchmarks/serve_load.py (1 / 8 / 32 clients over HTTP, the demo's model) and
benchmarks/grpo_vs_trl.py (as in docs/training.md) after the table.

Without --compare it drives the serve engine (`BatchingEngine._admit` + `_step`) and reports one engine step:
    step      one engine step: the decode step enqueued, the tokens read back so far turned into text, retiring rows
    decode    the batch's step (forward, sampling, each row's update: one graph replay when recorded), synchronised
              before and after; other = step - decode
    host ops  aten ops the host dispatched in the step (each one kernel launch or more on a GPU)
    waits     host waits on the device per step: Python-level calls that wait for a value (Tensor.item / tolist /
              ...), and on CUDA the synchronising calls torch.cuda's sync debug mode saw; the read-back every few
              steps is the only one (median 0)
    re-layouts  cache copies (joins, leaves, growth) over the counted steps: 0 for a steady batch

    OMP_NUM_THREADS=1 python benchmarks/profile_decode.py --tiny                       # seconds, CPU
    OMP_NUM_THREADS=1 python benchmarks/profile_decode.py --tiny --compare --rows 1,4 --steps 4 --warmup 2
    python benchmarks/profile_decode.py --compare --shapes qwen2.5-0.5b,qwen2.5-1.5b,gemma3-270m \
        --rows 1,8,32,128 --output "$OUT/decode_compare.json"                          # GPU: issue 53's table
    python benchmarks/profile_decode.py --model gemma-3-270m --profile-dir "$OUT"      # GPU: + a torch.profiler table
    python benchmarks/profile_decode.py --model gemma-3-270m --batch dynamic           # the DynamicCache batch

The engine step's model is loaded as `serve` loads it (the hardware policy's dtype and attention: bf16 on a recent
GPU; LoRA weights in the same dtype) with a fresh LoRA adapter (r 8 on every linear layer, as the demo trains; random
B so the adapter really computes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROMPT = "Give three tips for staying healthy, and explain why each of them matters."
SYNCING_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")
ARMS = ("engine+lora", "engine+2lora", "engine", "hf+lora", "static", "static+lora")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", default="gemma-3-270m", help="model_name_or_path (default gemma-3-270m)")
    source.add_argument("--shape", default=None, help="a random model of this steadytune.model.shapes shape instead, with "
                        "the tiny test tokenizer (e.g. gemma3-270m)")
    source.add_argument("--tiny", action="store_true", help="a tiny random gemma3 (seconds, for a smoke run)")
    parser.add_argument("--rows", default="1,8,32", help="sequences decoded together, comma-separated (default "
                        "1,8,32)")
    parser.add_argument("--steps", type=int, default=16, help="decode steps timed per row count (default 16)")
    parser.add_argument("--warmup", type=int, default=4, help="decode steps run first and not timed (default 4)")
    parser.add_argument("--no-adapter", action="store_true", help="the base model alone, no LoRA")
    parser.add_argument("--batch", choices=("slots", "dynamic"), default="slots",
                        help="the slot-cache batch `serve` uses (default), or the DynamicCache batch (the fallback for "
                             "models the slot cache does not take, and what serve used before) to compare")
    parser.add_argument("--profile-dir", default=None, help="write a torch.profiler table (and a Chrome trace) of "
                        "one decode step at the largest row count here")
    parser.add_argument("--compare", action="store_true", help="the side-by-side table (module docstring)")
    parser.add_argument("--shapes", default="qwen2.5-0.5b,qwen2.5-1.5b,gemma3-270m",
                        help="--compare: model shapes, comma-separated (default qwen2.5-0.5b,qwen2.5-1.5b,gemma3-270m)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"--compare: arms, comma-separated (default "
                        f"{','.join(ARMS)})")
    parser.add_argument("--check-rows", type=int, default=6, help="--compare: prompts in the greedy check (default 6)")
    parser.add_argument("--check-tokens", type=int, default=32, help="--compare: tokens per prompt in the greedy "
                        "check (default 32)")
    parser.add_argument("--output", default=None, help="--compare: write the numbers as JSON here")
    parser.add_argument("--greedy", action="store_true", help="only the greedy check against `generate`, on --model "
                        "(default the demo's Gemma 3 270M) as serve loads it, without an adapter and with one "
                        "(--adapter-scale)")
    parser.add_argument("--adapter-scale", type=float, default=1.0, help="multiply the fresh adapter's random B by "
                        "this (default 1: nn.Linear's initialisation, a change of the model's outputs as large as its "
                        "own; 0.05 is closer to a trained adapter's)")
    parser.add_argument("--with-serve", action="store_true", help="--compare: then benchmarks/serve_load.py (the demo "
                        "model over HTTP, 1 / 8 / 32 clients)")
    parser.add_argument("--with-grpo", action="store_true", help="--compare: then benchmarks/grpo_vs_trl.py")
    return parser.parse_args()


# ---------------------------------------------------------------------------------------------------------
# Counting waits on the device
# ---------------------------------------------------------------------------------------------------------

class SyncCounter:
    """Counts calls that make the host wait for a tensor's value. Python-level methods are wrapped (they wait on
    any device); on CUDA the driver-level count comes from torch.cuda.set_sync_debug_mode('warn')."""

    def __init__(self):
        self.calls: Counter = Counter()
        self.cuda = 0
        self._saved = {}

    @contextlib.contextmanager
    def counting(self):
        for name in SYNCING_METHODS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._wrap(name, original))
        cuda = torch.cuda.is_available()
        try:
            if cuda:
                import warnings
                torch.cuda.set_sync_debug_mode("warn")
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    yield self
                self.cuda += sum("synchronizing" in str(w.message).lower() for w in caught)
            else:
                yield self
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
            for name, original in self._saved.items():
                setattr(torch.Tensor, name, original)
            self._saved.clear()

    def _wrap(self, name, original):
        counter = self.calls

        def wrapped(tensor, *args, **kwargs):
            # Counted on every device: on a GPU each call waits for the device; on a CPU the count shows the same
            # code path (where the driver's own count is not available).
            counter[name] += 1
            return original(tensor, *args, **kwargs)
        return wrapped


# ---------------------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------------------

def load(args):
    """(model with a fresh LoRA adapter, tokenizer, description), as `serve` would load it on this machine."""
    from steadytune.hardware.policy import choose_attention, choose_precision
    from steadytune.hardware.backend import detect, device_for
    from steadytune.config import load_config
    from steadytune.model.load import load_model_and_tokenizer
    from steadytune.model.tiny import build_model, build_tokenizer

    info = detect()
    precision, _ = choose_precision(info, "auto", False)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    device = device_for(info)
    if args.tiny:
        tokenizer = build_tokenizer()
        model, what = build_model("gemma3", tokenizer, seed=0).to(device, dtype), "tiny gemma3"
    elif args.shape:
        from steadytune.model.shapes import build_shape
        tokenizer = build_tokenizer()
        model, what = build_shape(args.shape, dtype, device), f"random {args.shape}"
    else:
        cfg = load_config(None, {"model_name_or_path": args.model, "template": "empty", "output_dir": "unused"})
        attn, _ = choose_attention(info, cfg.model.flash_attn)
        model, tokenizer = load_model_and_tokenizer(cfg.model, dtype, attn, device)
        what = args.model
    model.eval()
    if not args.no_adapter:
        from peft import LoraConfig, get_peft_model
        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                 init_lora_weights=False))
        model.eval()
        from steadytune.model.decode.adapters import match_model_dtype
        match_model_dtype(model)  # as serve's loading does
        what += " + LoRA r8 (all linear layers)"
    return model, tokenizer, f"{what}, {precision} on {device}"


# ---------------------------------------------------------------------------------------------------------
# Driving the engine step by step
# ---------------------------------------------------------------------------------------------------------

def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class OpCounter(TorchDispatchMode):
    """aten ops the host dispatches (each one a kernel launch or more on a GPU; a replayed CUDA graph is none)."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def measure(model, tokenizer, rows: int, args, profile_dir: Path | None = None) -> dict:
    from steadytune.eval.scoring import inference
    from steadytune.model.decode.batch_dynamic import DynamicDecodeBatch
    from steadytune.serve.engine import BatchingEngine, Generation
    from steadytune.model.decode.sampling import SamplingParams

    engine = BatchingEngine(model, tokenizer, max_batch=rows, max_queue=rows)
    if args.batch == "dynamic":
        engine.batch = DynamicDecodeBatch(model, engine.batch.pad_token_id)
    adapter = None if args.no_adapter else "default"
    # Long enough that no sequence ends during the timed, counted or profiled steps.
    params = SamplingParams(max_tokens=args.warmup + 2 * args.steps + 8, temperature=0.0, ignore_eos=True)
    prompt = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    loop = asyncio.new_event_loop()  # requests post their events here; nobody needs to read them
    for i in range(rows):
        engine.submit([Generation(0, prompt[: len(prompt) - i % 5], adapter, params)], loop)

    batch = engine.batch
    decode_seconds: list[float] = []
    real_decode = batch.step

    def timed_decode():
        synchronize()
        started = time.perf_counter()
        out = real_decode()
        synchronize()
        decode_seconds.append(time.perf_counter() - started)
        return out

    result = {"rows": rows, "step_ms": [], "decode_ms": [], "syncs": [], "sync_calls": Counter(), "ops": [],
              "cuda_syncs": []}
    try:
        with inference(model):
            engine._step(engine._admit())  # prefill (and the first decode step)
            assert len(batch) == rows, "every sequence should have joined the batch"
            for _ in range(args.warmup):
                engine._step([])
            batch.step = timed_decode
            for _ in range(args.steps):
                decode_seconds.clear()
                synchronize()
                started = time.perf_counter()
                engine._step([])
                synchronize()
                result["step_ms"].append((time.perf_counter() - started) * 1e3)
                result["decode_ms"].append(sum(decode_seconds) * 1e3)
            batch.step = real_decode
            relayouts = batch.relayouts
            for _ in range(args.steps):  # counted apart from the timed steps (counting costs time)
                counter, ops = SyncCounter(), OpCounter()
                with counter.counting(), ops:
                    engine._step([])
                result["syncs"].append(sum(counter.calls.values()))
                result["cuda_syncs"].append(counter.cuda)
                result["sync_calls"].update(counter.calls)
                result["ops"].append(ops.ops)
            result["relayouts"] = batch.relayouts - relayouts
            graphs = getattr(batch, "graphs", None)
            result["graphs"] = ("-" if graphs is None or graphs.backend is None
                                else graphs.disabled_because or f"on ({graphs.captured} recorded)")
            if profile_dir is not None:
                write_profile(engine, profile_dir, rows, args.batch)
    finally:
        batch.step = real_decode
        loop.close()
    return result


def write_profile(engine, folder: Path, rows: int, batch: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    folder.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    engine._step([])  # the step before the profiled one: nothing first-time inside the trace
    synchronize()
    assert engine.batch.rows, "the sequences ended before the profiled step"
    with profile(activities=activities, record_shapes=False) as prof:
        engine._step([])
        synchronize()
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=60)
    name = f"decode_step_{batch}_{rows}rows"
    (folder / f"{name}.txt").write_text(table, encoding="utf-8")
    prof.export_chrome_trace(str(folder / f"{name}.json"))
    print(f"  profile of one decode step ({rows} rows): {folder / name}.txt")

# ---------------------------------------------------------------------------------------------------------
# --compare: the engine against transformers' static cache, and the greedy check
# ---------------------------------------------------------------------------------------------------------

def device_and_dtype():
    from steadytune.hardware.backend import detect, device_for
    from steadytune.hardware.policy import choose_precision

    info = detect()
    precision, _ = choose_precision(info, "auto", False)
    return device_for(info), {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def compare_model(shape: str, tiny: bool, device, dtype):
    """(base model, tokenizer) of a shape, random weights, on the device in the run's dtype."""
    from steadytune.model.shapes import build_shape
    from steadytune.model.tiny import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    if tiny:
        return build_model("gemma3", tokenizer, seed=0).to(device, dtype).eval(), tokenizer
    return build_shape(shape, dtype, device).eval(), tokenizer


def with_adapters(model, count: int):
    """The model with `count` fresh LoRA adapters ("a", "b", ...: r 8 on every linear layer, random B), in the base
    dtype as serve keeps them."""
    from peft import LoraConfig, get_peft_model

    from steadytune.model.decode.adapters import match_model_dtype

    config = dict(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    torch.manual_seed(0)
    peft_model = get_peft_model(model, LoraConfig(**config), adapter_name="a")
    for name in "bcd"[: count - 1]:
        peft_model.add_adapter(name, LoraConfig(**config))
    match_model_dtype(peft_model)
    return peft_model.eval()


def prompts_for(tokenizer, rows: int) -> list[list[int]]:
    ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    return [ids[: len(ids) - i % 5] for i in range(rows)]


def time_engine(model, tokenizer, rows: int, adapters: list, args, kernels: str) -> dict:
    """Our engine: `rows` greedy rows (adapters[i % len] each), --warmup steps, then --steps steps timed."""
    from steadytune.eval.scoring import inference
    from steadytune.model.decode.batch import DecodeBatch
    from steadytune.model.decode.prefill import Row
    from steadytune.model.decode.runner import make_runner
    from steadytune.model.decode.sampling import SamplingParams

    runner = make_runner(model, kernels)
    batch = DecodeBatch(model, 0, max_rows=rows, runner=runner)
    params = SamplingParams(max_tokens=args.warmup + args.steps + 8, temperature=0.0, ignore_eos=True)
    with inference(model):
        batch.add([Row(p, adapters[i % len(adapters)], owner=i, params=params)
                   for i, p in enumerate(prompts_for(tokenizer, rows))])
        for _ in range(args.warmup):
            batch.step()
        batch.poll(wait=True)
        synchronize()
        started = time.perf_counter()
        host = 0.0
        for _ in range(args.steps):
            mark = time.perf_counter()
            batch.step()
            host += time.perf_counter() - mark
        batch.poll(wait=True)
        synchronize()
        seconds = time.perf_counter() - started
        counter = SyncCounter()
        with counter.counting():
            for _ in range(8):
                batch.step()
        waits = sum(counter.calls.values()) + counter.cuda
        batch.poll(wait=True)
    graphs = batch.graphs
    return {"ms_per_step": seconds * 1e3 / args.steps, "tokens_per_s": rows * args.steps / seconds,
            "host_ms_per_step": host * 1e3 / args.steps, "waits_per_8_steps": waits,
            "forward": f"ours ({runner.kernels})" if runner is not None else "the model's own",
            "graphs": "-" if graphs.backend is None else graphs.disabled_because or f"on ({graphs.captured})"}


def time_static(model, tokenizer, rows: int, args) -> dict:
    """transformers' generate with its static cache, greedy, left-padded prompts; per-step time without prefill."""
    from steadytune.eval.scoring import inference

    prompts = prompts_for(tokenizer, rows)
    width = max(len(p) for p in prompts)
    device = next(model.parameters()).device
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)

    def run(tokens: int) -> float:
        synchronize()
        started = time.perf_counter()
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                       do_sample=False, cache_implementation="static", pad_token_id=0, eos_token_id=None)
        synchronize()
        return time.perf_counter() - started

    with inference(model):
        run(args.warmup + args.steps)   # compilation, allocation
        short, long = run(args.warmup), run(args.warmup + args.steps)
    seconds = max(long - short, 1e-9)
    return {"ms_per_step": seconds * 1e3 / args.steps, "tokens_per_s": rows * args.steps / seconds}


def greedy_check(model, tokenizer, args, kernels: str, adapter: str | None = "a") -> dict:
    """Our engine + the adapter (None: the base model) against `generate` on the same model + adapter, prompt by
    prompt."""
    from steadytune.eval.scoring import inference
    from steadytune.model.decode.batch import DecodeBatch
    from steadytune.model.decode.prefill import Row
    from steadytune.model.decode.runner import make_runner
    from steadytune.model.decode.sampling import SamplingParams

    ids = tokenizer(PROMPT + " " + PROMPT, add_special_tokens=False)["input_ids"]
    prompts = [ids[: 6 + (i * 7) % max(1, len(ids) - 6)] for i in range(args.check_rows)]
    n = args.check_tokens
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    device = next(model.parameters()).device
    if getattr(args, "greedy", False) and tokenizer.bos_token_id is not None:
        prompts = [[tokenizer.bos_token_id] + p for p in prompts]   # a real model reads its prompts after BOS
    off = model.disable_adapter() if adapter is None else contextlib.nullcontext()
    with inference(model), off:
        if adapter is not None:
            model.set_adapter(adapter)
        expected = [model.generate(input_ids=torch.tensor([p], device=device), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, pad_token_id=0, eos_token_id=None)[0, len(p):].tolist()
                    for p in prompts]
        batch = DecodeBatch(model, 0, max_rows=len(prompts), runner=make_runner(model, kernels))
        rows = [Row(p, adapter, owner=i, params=params) for i, p in enumerate(prompts)]
        got: list[list[int]] = [[] for _ in prompts]
        half = len(rows) // 2
        batch.add(rows[:half])
        for step in range(4 * n):
            if step == 3 and half < len(rows):
                batch.add(rows[half:])      # rows join a running batch
            if batch.needs_step():
                batch.step()
            for update in batch.poll(wait=not batch.needs_step()):
                got[update.row.owner].extend(update.tokens)
            batch.keep([k for k, r in enumerate(batch.rows) if r.finished is None])
            if not batch.rows and step > 3:
                break
    first = [next((k for k, (a, b) in enumerate(zip(g, e)) if a != b), None) for g, e in zip(got, expected)]
    return {"rows": len(prompts), "equal_rows": sum(f is None and len(g) == len(e) for f, g, e in zip(first, got, expected)),
            "equal_tokens": sum(a == b for g, e in zip(got, expected) for a, b in zip(g, e)),
            "tokens": sum(len(e) for e in expected), "first_difference": first}


def compare(args) -> None:
    from steadytune.model.decode.runner import choose_kernels

    device, dtype = device_and_dtype()
    kernels = choose_kernels(device)
    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise SystemExit(f"--arms: unknown {sorted(unknown)}; known: {', '.join(ARMS)}")
    levels = [int(r) for r in args.rows.split(",")]
    shapes = ["tiny gemma3"] if args.tiny else args.shapes.split(",")
    print(f"decode on {device}, {str(dtype).replace('torch.', '')}; our kernels: {kernels}; CUDA graphs "
          f"{'off' if os.environ.get('STEADYTUNE_CUDA_GRAPHS') == '0' else 'auto'}; {args.steps} steps timed after "
          f"{args.warmup}", flush=True)
    results = {"device": str(device), "dtype": str(dtype), "kernels": kernels, "shapes": {}}
    for shape in shapes:
        started = time.perf_counter()
        base, tokenizer = compare_model(shape, args.tiny, device, dtype)
        table: dict = {arm: {} for arm in arms}
        static = [a for a in arms if a.startswith("static")]
        engine = [a for a in arms if not a.startswith("static")]
        if "static" in static:
            for rows in levels:
                table["static"][rows] = time_static(base, tokenizer, rows, args)
        model = with_adapters(base, 2)
        for rows in levels:
            for arm in engine:
                adapters = {"engine+lora": ["a"], "engine+2lora": ["a", "b"], "engine": [None],
                            "hf+lora": ["a"]}[arm]
                table[arm][rows] = time_engine(model, tokenizer, rows, adapters, args,
                                               "off" if arm == "hf+lora" else kernels)
            if "static+lora" in static:
                model.set_adapter("a")
                table["static+lora"][rows] = time_static(model, tokenizer, rows, args)
        check = greedy_check(model, tokenizer, args, kernels)
        results["shapes"][shape] = {"arms": table, "greedy_check": check}
        print_table(shape, table, levels, check, time.perf_counter() - started)
        del model, base
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"wrote {args.output}")
    fallbacks = graph_fallbacks(results)
    for line in fallbacks:
        print(f"FAILED: CUDA graphs fell back to eager steps: {line}", flush=True)
    if args.with_serve:
        run_script(["serve_load.py", "--model", "gemma-3-270m", "--concurrency", "1,8,32"]
                   + (["--output", str(Path(args.output).with_name("serve_load.json"))] if args.output else []))
    if args.with_grpo:
        run_script(["grpo_vs_trl.py", "--steps", "20"]
                   + (["--output", str(Path(args.output).with_name("grpo_vs_trl.json"))] if args.output else []))
    if fallbacks:
        raise SystemExit(1)


def graph_fallbacks(results: dict) -> list[str]:
    """Every engine measurement whose recorded steps were switched off (a number measured eagerly is not the engine's
    number: the run fails, naming the reason)."""
    return [f"{shape}, {arm}, {rows} rows: {cell['graphs']}"
            for shape, measured in results["shapes"].items() for arm, cells in measured["arms"].items()
            for rows, cell in cells.items()
            if "graphs" in cell and cell["graphs"] != "-" and not cell["graphs"].startswith("on")]


def print_table(shape: str, table: dict, levels: list, check: dict, seconds: float) -> None:
    print(f"\n{shape} (measured in {seconds:.0f} s): tokens/s (ms per step)")
    print(f"{'arm':>13} | " + " | ".join(f"{r:>4} rows{'':>10}" for r in levels))
    for arm, cells in table.items():
        print(f"{arm:>13} | " + " | ".join(f"{cells[r]['tokens_per_s']:>9.0f} ({cells[r]['ms_per_step']:>6.2f})"
                                           for r in levels))
    if "static" in table:
        for arm in ("engine+lora", "engine"):
            if arm in table:
                ratios = [table[arm][r]["tokens_per_s"] / table["static"][r]["tokens_per_s"] for r in levels]
                print(f"{arm + ' / static':>21}: " + "  ".join(f"{x:.2f}x" for x in ratios))
    if "engine+lora" in table and "engine+2lora" in table:
        costs = [table["engine+2lora"][r]["ms_per_step"] / table["engine+lora"][r]["ms_per_step"] for r in levels]
        print(f"{'two adapters / one':>21}: " + "  ".join(f"{x:.2f}x" for x in costs))
    for arm, cells in table.items():
        if arm.startswith("engine") or arm == "hf+lora":
            one = cells[levels[0]]
            print(f"{arm:>13}: forward {one['forward']}, graphs {one['graphs']}, host enqueue "
                  f"{one['host_ms_per_step']:.2f} ms/step at {levels[0]} rows, host waits in 8 steps: "
                  f"{one['waits_per_8_steps']}")
    print(f"greedy check against transformers' generate (adapter a, {check['rows']} prompts, rows joining mid-way): "
          f"{check['equal_rows']}/{check['rows']} rows equal, {check['equal_tokens']}/{check['tokens']} tokens; first "
          f"difference per row: {check['first_difference']}", flush=True)


def run_script(command: list) -> None:
    print(f"\n$ python benchmarks/{' '.join(command)}", flush=True)
    subprocess.run([sys.executable, str(REPO / "benchmarks" / command[0])] + command[1:], check=False)



def greedy_on_model(args) -> None:
    """The greedy check on a real model: the engine (our forward, kernels, recorded steps) against `generate`, without
    an adapter and with one, each row's first difference printed."""
    from steadytune.model.decode.runner import choose_kernels

    args.no_adapter = False
    model, tokenizer, description = load(args)
    if args.adapter_scale != 1.0:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.mul_(args.adapter_scale)
    kernels = choose_kernels(next(model.parameters()).device)
    print(f"{description}; adapter B x {args.adapter_scale}; kernels {kernels}", flush=True)
    results = {}
    for label, adapter_on in (("base model", False), ("with the adapter", True)):
        check = greedy_check(model, tokenizer, args, kernels, adapter="default" if adapter_on else None)
        results[label] = check
        print(f"greedy check against generate, {label} ({check['rows']} prompts, rows joining mid-way): "
              f"{check['equal_rows']}/{check['rows']} rows equal, {check['equal_tokens']}/{check['tokens']} tokens; "
              f"first difference per row: {check['first_difference']}", flush=True)
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2), encoding="utf-8")


def main() -> None:
    args = parse_args()
    if args.compare:
        compare(args)
        return
    if args.greedy:
        greedy_on_model(args)
        return
    started = time.perf_counter()
    model, tokenizer, description = load(args)
    graphs = "off (STEADYTUNE_CUDA_GRAPHS=0)" if os.environ.get("STEADYTUNE_CUDA_GRAPHS") == "0" else "auto"
    print(f"{description}; {args.batch} batch, CUDA graphs {graphs}; loaded in {time.perf_counter() - started:.0f} s; "
          f"torch threads {torch.get_num_threads()}")
    levels = [int(r) for r in args.rows.split(",")]
    print(f"{'rows':>5} | {'step ms':>8} {'decode ms':>9} {'other ms':>8} | {'tokens/s':>9} | {'host ops':>8} "
          f"{'waits':>5} {'cuda':>4} {'re-layouts':>10} | graphs")
    for rows in levels:
        profile_dir = Path(args.profile_dir) if args.profile_dir and rows == max(levels) else None
        r = measure(model, tokenizer, rows, args, profile_dir)
        step, decode = statistics.median(r["step_ms"]), statistics.median(r["decode_ms"])
        calls = ", ".join(f"{k} {v // args.steps}" for k, v in sorted(r["sync_calls"].items()))
        print(f"{rows:>5} | {step:>8.2f} {decode:>9.2f} {step - decode:>8.2f} | {rows * 1e3 / step:>9.1f} | "
              f"{statistics.median(r['ops']):>8.0f} {statistics.median(r['syncs']):>5.0f} "
              f"{statistics.median(r['cuda_syncs']) if torch.cuda.is_available() else '-':>4} {r['relayouts']:>10} | "
              f"{r['graphs']}  (waits per step: {calls or 'none'})", flush=True)
    print("step: one engine step (decode + sampling + text + retiring); decode: the batch's forward with its cache and "
          "mask work (a graph replay when recorded); host ops: aten ops dispatched per step; waits: host waits on "
          "the device per step (Python-level calls that wait; cuda: synchronising calls torch.cuda's sync debug mode "
          "saw); re-layouts: cache copies over all counted steps")


if __name__ == "__main__":
    main()
