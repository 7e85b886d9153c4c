"""Where a decode step of `steadytune serve`'s batcher spends its time: the model's forward against everything around
it (cache bookkeeping, masks, sampling, text assembly), and how often each step waits on the device.

It drives the real engine (`BatchingEngine._admit` + `_step`, the worker's loop body, on this thread) with N
sequences submitted at once, and times every decode step with the device synchronised at its edges:

    forward  the model call alone (DecodeBatch._forward; synchronised before and after it)
    other    the rest of the step: input ids, positions, mask, sampling, detokenising, retiring rows
    syncs    host<->device waits counted per step: on CUDA by torch.cuda's sync debug mode (every synchronising call
             the driver sees), on any device by counting the Python-level calls that wait for a value
             (Tensor.item / tolist / cpu / numpy / __bool__ / __int__ / __float__)

    OMP_NUM_THREADS=1 python benchmarks/profile_decode.py --tiny                       # seconds, CPU
    OMP_NUM_THREADS=1 python benchmarks/profile_decode.py --model gemma-3-270m --rows 1,8 --steps 8
    python benchmarks/profile_decode.py --model gemma-3-270m --profile-dir "$OUT"      # GPU: + a torch.profiler table

The model is loaded as `serve` loads it (the hardware policy's dtype and attention: bf16 on a recent GPU) with a
fresh LoRA adapter (r 8 on every linear layer, as the demo trains; random B so the adapter really computes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROMPT = "Give three tips for staying healthy, and explain why each of them matters."
SYNCING_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", default="gemma-3-270m", help="model_name_or_path (default gemma-3-270m)")
    source.add_argument("--shape", default=None, help="a random model of this steadytune.shapes shape instead, with "
                        "the tiny test tokenizer (e.g. gemma3-270m)")
    source.add_argument("--tiny", action="store_true", help="a tiny random gemma3 (seconds, for a smoke run)")
    parser.add_argument("--rows", default="1,8,32", help="sequences decoded together, comma-separated (default "
                        "1,8,32)")
    parser.add_argument("--steps", type=int, default=16, help="decode steps timed per row count (default 16)")
    parser.add_argument("--warmup", type=int, default=4, help="decode steps run first and not timed (default 4)")
    parser.add_argument("--no-adapter", action="store_true", help="the base model alone, no LoRA")
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
            # Only tensors that live on an accelerator make the host wait; on CPU every call would count, so count
            # them there too (a CPU run is where this script checks the code path, not the driver).
            counter[name] += 1
            return original(tensor, *args, **kwargs)
        return wrapped


# ---------------------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------------------

def load(args):
    """(model with a fresh LoRA adapter, tokenizer, description), as `serve` would load it on this machine."""
    from steadytune import hardware
    from steadytune.config import load_config
    from steadytune.model import load_model_and_tokenizer
    from steadytune.tiny import build_model, build_tokenizer

    info = hardware.detect()
    precision, _ = hardware.choose_precision(info, "auto", False)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    device = hardware.device_for(info)
    if args.tiny:
        tokenizer = build_tokenizer()
        model, what = build_model("gemma3", tokenizer, seed=0).to(device, dtype), "tiny gemma3"
    elif args.shape:
        from steadytune.shapes import build_shape
        tokenizer = build_tokenizer()
        model, what = build_shape(args.shape, dtype, device), f"random {args.shape}"
    else:
        cfg = load_config(None, {"model_name_or_path": args.model, "template": "empty", "output_dir": "unused"})
        attn, _ = hardware.choose_attention(info, cfg.model.flash_attn)
        model, tokenizer = load_model_and_tokenizer(cfg.model, dtype, attn, device)
        what = args.model
    model.eval()
    if not args.no_adapter:
        from peft import LoraConfig, get_peft_model
        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                 init_lora_weights=False))
        model.eval()
        what += " + LoRA r8 (all linear layers)"
    return model, tokenizer, f"{what}, {precision} on {device}"


# ---------------------------------------------------------------------------------------------------------
# Driving the engine step by step
# ---------------------------------------------------------------------------------------------------------

def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(model, tokenizer, rows: int, args, profile_dir: Path | None = None) -> dict:
    from steadytune.scoring import inference
    from steadytune.serve import batch as batch_module
    from steadytune.serve.engine import BatchingEngine, Generation
    from steadytune.serve.sampling import SamplingParams

    engine = BatchingEngine(model, tokenizer, max_batch=rows, max_queue=rows)
    adapter = None if args.no_adapter else "default"
    # Long enough that no sequence ends during the timed steps or the profiled ones.
    params = SamplingParams(max_tokens=args.warmup + args.steps + 8, temperature=0.0, ignore_eos=True)
    prompt = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    loop = asyncio.new_event_loop()  # requests post their events here; nobody needs to read them
    for i in range(rows):
        engine.submit([Generation(0, prompt[: len(prompt) - i % 5], adapter, params)], loop)

    forward_seconds = []
    real_forward = batch_module.DecodeBatch._forward

    def timed_forward(self, *a, **k):
        synchronize()
        started = time.perf_counter()
        out = real_forward(self, *a, **k)
        synchronize()
        forward_seconds.append(time.perf_counter() - started)
        return out

    batch_module.DecodeBatch._forward = timed_forward
    relayouts = Counter()
    real_relayout = {name: getattr(batch_module.kvcache, name) for name in ("join", "select_rows", "trim_left")}

    def counted(name):
        def wrapper(*a, **k):
            relayouts[name] += 1
            return real_relayout[name](*a, **k)
        return wrapper

    for name in real_relayout:
        setattr(batch_module.kvcache, name, counted(name))
    result = {"rows": rows, "step_ms": [], "forward_ms": [], "syncs": [], "sync_calls": Counter(), "relayouts": 0}
    try:
        with inference(model):
            engine._step(engine._admit())  # prefill (and the first decode step)
            assert len(engine.batch) == rows, "every sequence should have joined the batch"
            for _ in range(args.warmup):
                engine._step([])
            relayouts.clear()
            for _ in range(args.steps):
                counter = SyncCounter()
                forward_seconds.clear()
                synchronize()
                started = time.perf_counter()
                with counter.counting():
                    engine._step([])
                synchronize()
                total = time.perf_counter() - started
                result["step_ms"].append(total * 1e3)
                result["forward_ms"].append(sum(forward_seconds) * 1e3)
                # The timer's own synchronize calls are not the engine's: on CUDA, 2 per forward are ours.
                result["syncs"].append(sum(counter.calls.values()) + max(counter.cuda - 2 * len(forward_seconds), 0))
                result["sync_calls"].update(counter.calls)
            result["relayouts"] = sum(relayouts.values())
            if profile_dir is not None:
                batch_module.DecodeBatch._forward = real_forward
                write_profile(engine, profile_dir, rows)
    finally:
        batch_module.DecodeBatch._forward = real_forward
        for name, fn in real_relayout.items():
            setattr(batch_module.kvcache, name, fn)
        loop.close()
    return result


def write_profile(engine, folder: Path, rows: int) -> None:
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
    (folder / f"decode_step_{rows}rows.txt").write_text(table, encoding="utf-8")
    prof.export_chrome_trace(str(folder / f"decode_step_{rows}rows.json"))
    print(f"  profile of one decode step ({rows} rows): {folder / f'decode_step_{rows}rows.txt'}")


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    model, tokenizer, description = load(args)
    print(f"{description}; loaded in {time.perf_counter() - started:.0f} s; torch threads {torch.get_num_threads()}")
    levels = [int(r) for r in args.rows.split(",")]
    print(f"{'rows':>5} | {'step ms':>8} {'forward ms':>10} {'other ms':>9} {'other %':>7} | {'tokens/s':>9} | "
          f"{'syncs/step':>10} | {'cache re-layouts':>16}")
    for rows in levels:
        profile_dir = Path(args.profile_dir) if args.profile_dir and rows == max(levels) else None
        r = measure(model, tokenizer, rows, args, profile_dir)
        step, forward = statistics.median(r["step_ms"]), statistics.median(r["forward_ms"])
        other = step - forward
        print(f"{rows:>5} | {step:>8.2f} {forward:>10.2f} {other:>9.2f} {100 * other / step:>6.1f}% | "
              f"{rows * 1e3 / step:>9.1f} | {statistics.median(r['syncs']):>10.0f} | {r['relayouts']:>16}  "
              f"({', '.join(f'{k} {v // args.steps}' for k, v in sorted(r['sync_calls'].items()))})", flush=True)


if __name__ == "__main__":
    main()
