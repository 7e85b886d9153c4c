"""Load test of `steadytune serve`: throughput and latency at 1, 8 and 32 concurrent clients, dynamic batching
(--max-batch 32) side by side with one request at a time (the same server with --max-batch 1).

The script writes a LoRA run (r 8 on every linear layer, as the demo trains; fresh weights, since speed does not
depend on their values) for the chosen base model, starts each server itself on 127.0.0.1 (nothing else is
contacted), and runs closed-loop clients: each sends a streaming chat request, waits for its end, sends the next.
Every answer is exactly --max-tokens long (`ignore_eos`), so both servers do the same work. Bounded: a fixed number
of requests per client and level, and a time limit per level after which no new request starts.

    python benchmarks/serve_load.py --model gemma-3-270m                # the demo model (GPU: about 4 minutes)
    python benchmarks/serve_load.py --tiny --max-tokens 32 --engine-only   # CPU sanity check, tiny random model
    python benchmarks/serve_load.py --model gemma-3-270m --no-http         # the batcher alone (GPU: about a minute)

Prints one table and writes the numbers as JSON (--output).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # --no-http needs no HTTP client
    httpx = None

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = ["Give three tips for staying healthy.", "What is the capital of France?", "Describe a cat in one line.",
             "这个商品很好，质量不错，物流很快。", "Write a short poem about the sea.", "Explain what LoRA is.",
             "太差了，等了一个小时没人理。", "List five fruits."]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m", help="model_name_or_path of the base (default gemma-3-270m)")
    parser.add_argument("--template", default=None, help="chat template (default: gemma for Gemma, else chatml)")
    parser.add_argument("--tiny", action="store_true", help="a tiny random qwen2 instead (CPU sanity check)")
    parser.add_argument("--concurrency", default="1,8,32", help="client counts, comma-separated (default 1,8,32)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per answer (default 128)")
    parser.add_argument("--requests-per-client", type=int, default=2,
                        help="requests each client sends per level on the batching server (default 2)")
    parser.add_argument("--sequential-requests-per-client", type=int, default=1,
                        help="the same on the max-batch-1 server, where each request waits for all before it "
                             "(default 1)")
    parser.add_argument("--no-sequential", action="store_true",
                        help="skip the max-batch-1 server (the batching server's throughput alone: half the time)")
    parser.add_argument("--max-batch", type=int, default=32, help="the batching server's --max-batch (default 32)")
    parser.add_argument("--time-limit", type=float, default=150, help="seconds per level before no new request "
                        "starts (default 150)")
    parser.add_argument("--startup-timeout", type=float, default=900, help="seconds to wait for a server to load")
    parser.add_argument("--engine-only", action="store_true",
                        help="also time the batcher in this process without HTTP, at the same client counts")
    parser.add_argument("--no-http", action="store_true",
                        help="time only the batcher in this process (no servers, no HTTP clients): minutes less")
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    return parser.parse_args()


# ---------------------------------------------------------------------------------------------------------
# The run being served
# ---------------------------------------------------------------------------------------------------------

def write_run(folder: Path, args) -> Path:
    """A LoRA run folder as `train` leaves one: adapter weights + run_config.yaml."""
    import torch
    from peft import LoraConfig, get_peft_model

    sys.path.insert(0, str(REPO))
    from steadytune.config import load_config, save_resolved_config
    from steadytune.model.load import load_model_and_tokenizer

    if args.tiny:
        from steadytune.model.tiny import save_tiny_model
        model_path, template = str(save_tiny_model(folder / "tiny", "qwen2")), "chatml"
    else:
        model_path = args.model
        template = args.template or ("gemma" if "gemma" in model_path.lower() else "chatml")
    run = folder / "run"
    cfg = load_config(None, {"model_name_or_path": model_path, "template": template, "output_dir": str(run),
                             "max_new_tokens": args.max_tokens})
    model, _ = load_model_and_tokenizer(cfg.model, torch.float32)
    torch.manual_seed(0)
    get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")).save_pretrained(run)
    save_resolved_config(cfg, run / "run_config.yaml")
    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`steadytune serve RUN --max-batch N` on 127.0.0.1, as a child process."""

    def __init__(self, run: Path, max_batch: int, log: Path, startup_timeout: float, tiny: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               "PYTHONUNBUFFERED": "1"}
        env.pop("API_KEY", None)
        if tiny:  # a tiny model's kernels are too small to split across threads (on a shared CPU it is 30x slower)
            env.setdefault("OMP_NUM_THREADS", "1")
        self.log = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "steadytune", "serve", str(run), "--host", "127.0.0.1", "--port", str(self.port),
             "--max-batch", str(max_batch), "--max-queue", "1024", "--log-level", "warning"],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + startup_timeout
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited (code {self.process.returncode}); see {log}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"the server did not start in {startup_timeout:.0f} s; see {log}")
            time.sleep(0.5)
        self.model = httpx.get(self.url + "/v1/models").json()["data"][0]["id"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


# ---------------------------------------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------------------------------------

async def one_request(client: httpx.AsyncClient, server: Server, question: str, max_tokens: int) -> dict:
    body = {"model": server.model, "messages": [{"role": "user", "content": question}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first, tokens = None, 0
    async with client.stream("POST", server.url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    return {"start": start, "end": end, "latency": end - start, "ttft": (first or end) - start, "tokens": tokens}


async def run_level(server: Server, clients: int, per_client: int, max_tokens: int, time_limit: float) -> dict:
    stop_at = time.perf_counter() + time_limit
    results: list[dict] = []

    async def client_loop(k: int, client: httpx.AsyncClient):
        for i in range(per_client):
            if time.perf_counter() > stop_at:
                return
            results.append(await one_request(client, server, QUESTIONS[(k + i) % len(QUESTIONS)], max_tokens))

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:
        await one_request(client, server, QUESTIONS[0], 4)  # warm-up: kernels, allocator, first-call costs
        await asyncio.gather(*(client_loop(k, client) for k in range(clients)))
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    latencies = sorted(r["latency"] for r in results)
    return {"clients": clients, "requests": len(results), "tokens": sum(r["tokens"] for r in results),
            "seconds": round(wall, 3), "tokens_per_s": round(sum(r["tokens"] for r in results) / wall, 1),
            "p50_s": round(statistics.median(latencies), 3), "p95_s": round(quantile(latencies, 0.95), 3),
            "ttft_p50_s": round(statistics.median(r["ttft"] for r in results), 3)}


def quantile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[round(q * 100) - 1]


def measure(run: Path, max_batch: int, levels: list[int], per_client: int, args, log: Path) -> list[dict]:
    server = Server(run, max_batch, log, args.startup_timeout, tiny=args.tiny)
    try:
        rows = []
        for clients in levels:
            row = asyncio.run(run_level(server, clients, per_client, args.max_tokens, args.time_limit))
            print(f"  max batch {max_batch:>2}, {clients:>2} clients: {row['tokens_per_s']:>9.1f} tokens/s, "
                  f"p50 {row['p50_s']:.2f} s, p95 {row['p95_s']:.2f} s ({row['requests']} requests)", flush=True)
            rows.append(row)
        metrics = httpx.get(server.url + "/metrics").text
        steps = rows_total = 0.0
        for line in metrics.splitlines():
            if line.startswith("steadytune_forward_steps_total "):
                steps = float(line.split()[1])
            elif line.startswith("steadytune_forward_rows_total "):
                rows_total = float(line.split()[1])
        print(f"  mean batch over the run: {rows_total / max(steps, 1):.1f} sequences per forward", flush=True)
        return rows
    finally:
        server.stop()


def engine_only(run: Path, args, levels: list[int]) -> list[dict]:
    """The batcher alone (no HTTP, no clients' Python in the way): at each level, that many closed-loop clients in
    this process each submit --requests-per-client requests one after another, to an engine of max batch
    --max-batch. A warm-up round at the level's concurrency first (kernels, allocator, CUDA graphs for its
    shapes)."""
    from steadytune.serve.engine import BatchingEngine, Finished, Generation
    from steadytune.serve.loading import load_served
    from steadytune.model.decode.sampling import SamplingParams

    loaded = load_served(str(run), [], [], None)
    entry = next(iter(loaded.served.values()))
    print(loaded.description.splitlines()[0], flush=True)
    prompts = [loaded.tokenizer(q)["input_ids"] for q in QUESTIONS]
    rows = []
    for clients in levels:
        engine = BatchingEngine(loaded.model, loaded.tokenizer, max_batch=args.max_batch, max_queue=4 * clients + 8)

        async def level(per_client: int, max_tokens: int) -> list[dict]:
            loop = asyncio.get_running_loop()
            params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
            done: list[dict] = []

            async def client(k: int) -> None:
                for i in range(per_client):
                    started = time.perf_counter()
                    request = engine.submit([Generation(0, prompts[(k + i) % len(prompts)], entry.adapter, params)],
                                            loop)
                    while not isinstance(event := await request.events.get(), Finished):
                        pass
                    done.append({"latency": time.perf_counter() - started, "tokens": event.completion_tokens,
                                 "end": time.perf_counter(), "start": started})
            await asyncio.gather(*(client(k) for k in range(clients)))
            return done

        engine.start()
        try:
            asyncio.run(level(1, 8))  # warm-up
            steps_before, rows_before = engine.stats.steps, engine.stats.step_rows
            results = asyncio.run(level(args.requests_per_client, args.max_tokens))
        finally:
            engine.stop()
        wall = max(r["end"] for r in results) - min(r["start"] for r in results)
        tokens = sum(r["tokens"] for r in results)
        steps = engine.stats.steps - steps_before
        row = {"clients": clients, "requests": len(results), "tokens": tokens, "seconds": round(wall, 3),
               "tokens_per_s": round(tokens / wall, 1),
               "p50_s": round(statistics.median(r["latency"] for r in results), 3),
               "mean_batch": round((engine.stats.step_rows - rows_before) / max(steps, 1), 1),
               "ms_per_forward": round(1e3 * wall / max(steps, 1), 2)}
        graphs = getattr(engine.batch, "graphs", None)
        if graphs is not None and graphs.backend is not None:
            row["cuda_graphs"] = graphs.disabled_because or f"on ({graphs.captured} recorded)"
        print(f"  engine alone, {clients:>2} clients: {row['tokens_per_s']:>9.1f} tokens/s, p50 {row['p50_s']:.2f} s, "
              f"mean batch {row['mean_batch']}, {row['ms_per_forward']:.1f} ms per forward "
              f"({len(results)} requests of {args.max_tokens} tokens)"
              + (f"; CUDA graphs {row['cuda_graphs']}" if "cuda_graphs" in row else ""), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    args = parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="serve_load_") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        run = write_run(folder, args)
        print(f"run written in {time.perf_counter() - started:.0f} s; {args.max_tokens} tokens per answer", flush=True)
        if args.no_http:
            batched = sequential = None
        else:
            batched = measure(run, args.max_batch, levels, args.requests_per_client, args, folder / "batched.log")
            sequential = None if args.no_sequential else measure(
                run, 1, levels, args.sequential_requests_per_client, args, folder / "sequential.log")
        if (args.engine_only or args.no_http) and args.tiny:
            import torch
            torch.set_num_threads(1)  # as for the tiny servers
        alone = engine_only(run, args, levels) if (args.engine_only or args.no_http) else None
    result = {"model": "tiny" if args.tiny else args.model, "max_tokens": args.max_tokens,
              "max_batch": args.max_batch, "engine_only": alone}
    if batched is not None and sequential is None:
        print()
        print(f"{'clients':>7} | {'batched tok/s':>13} {'p50 s':>7} {'p95 s':>7}")
        for b in batched:
            print(f"{b['clients']:>7} | {b['tokens_per_s']:>13.1f} {b['p50_s']:>7.2f} {b['p95_s']:>7.2f}")
        result.update(batched=batched)
    elif batched is not None:
        print()
        print(f"{'clients':>7} | {'batched tok/s':>13} {'p50 s':>7} {'p95 s':>7} | {'max-batch-1 tok/s':>17} "
              f"{'p50 s':>7} {'p95 s':>7} | speed-up")
        for b, s in zip(batched, sequential):
            print(f"{b['clients']:>7} | {b['tokens_per_s']:>13.1f} {b['p50_s']:>7.2f} {b['p95_s']:>7.2f} | "
                  f"{s['tokens_per_s']:>17.1f} {s['p50_s']:>7.2f} {s['p95_s']:>7.2f} | "
                  f"{b['tokens_per_s'] / s['tokens_per_s']:.1f}x")
        top = levels.index(max(levels))
        ratio = batched[top]["tokens_per_s"] / sequential[top]["tokens_per_s"]
        print(f"dynamic batching at {levels[top]} clients: {ratio:.1f}x the throughput of one request at a time "
              f"(target >= 4x)")
        result.update(batched=batched, sequential=sequential, speedup_at_max_clients=round(ratio, 2))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
