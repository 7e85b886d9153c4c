"""Where a decode step of `steadytune serve`'s batcher spends its time, and how much the host does per step.

It drives the real engine (`BatchingEngine._admit` + `_step`, the worker's loop body, on this thread) with N
sequences submitted at once, lets the batch settle (warm-up steps: on a GPU, CUDA graphs get recorded there), then
reports per decode step, as medians:

    step      one engine step: the decode, sampling, feeding the sampled ids back, text assembly, retiring rows
    decode    the batch's forward with its cache and mask work (synchronised before and after; on a GPU with CUDA
              graphs, one graph replay); other = step - decode
    host ops  aten ops the host dispatched in the step (each one kernel launch or more on a GPU)
    waits     host waits on the device: Python-level calls that wait for a value (Tensor.item / tolist / cpu / numpy /
              __bool__ / __int__ / __float__), and on CUDA the synchronising calls torch.cuda's sync debug mode saw
    re-layouts  cache copies (joins, leaves, growth) over the counted steps: 0 for a steady batch

    OMP_NUM_THREADS=1 python benchmarks/profile_decode.py --tiny                       # seconds, CPU
    OMP_NUM_THREADS=1 python benchmarks/profile_decode.py --model gemma-3-270m --rows 1,8 --steps 8
    python benchmarks/profile_decode.py --model gemma-3-270m --profile-dir "$OUT"      # GPU: + a torch.profiler table
    python benchmarks/profile_decode.py --model gemma-3-270m --batch dynamic           # the DynamicCache batch

The model is loaded as `serve` loads it (the hardware policy's dtype and attention: bf16 on a recent GPU; LoRA
weights in the same dtype) with a fresh LoRA adapter (r 8 on every linear layer, as the demo trains; random B so
the adapter really computes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
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


def main() -> None:
    args = parse_args()
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
