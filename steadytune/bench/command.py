"""`steadytune bench`: the subcommand (arguments and run); the package docstring says what the parts do."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from steadytune.bench.arms import run_arm as run_here
from steadytune.bench.peers import log_path_for, tail
from steadytune.bench.workload import dataset_lengths, synthetic_examples
from steadytune.errors import UserError
from steadytune.model.shapes import SHAPES, is_moe_shape, shape_config

SPEED_ARMS = ("plain", "peer", "llamafactory", "unsloth", "steadytune")
BASELINES = SPEED_ARMS[:-1]  # what steadytune's ratios are taken against
ARM_ALIASES = {"liger": "peer"}  # the peer arm is the Trainer + liger-kernel recipe: either name selects it
PEER_FRAMEWORKS = ("peer", "llamafactory", "unsloth")  # what a tuned user would pick instead of steadytune


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", default="qwen2.5-0.5b",
                        help="model shape built with random weights from its published config: "
                             + ", ".join(SHAPES) + "; the mixtures of experts ("
                             + ", ".join(name for name in SHAPES if is_moe_shape(name)) + ") train LoRA on their "
                             "routed experts in every arm that can (MFU counts a routed expert at top_k / experts)")
    parser.add_argument("--num-layers", type=int, default=None, metavar="N",
                        help="every arm's model N layers deep instead of the shape's depth (the same widths): a "
                             "30B-A3B shape is 61 GB in bf16, too big to save for the peer arms on a 64 GiB disk")
    parser.add_argument("--arms", default="plain,peer,steadytune",
                        help="comma list of: plain (Trainer + peft, batch --plain-batch), peer or liger (Trainer + "
                             "peft + liger-kernel, the largest of batch 32/16/8 that fits), llamafactory (LLaMA-Factory "
                             "0.9.5's run_exp under --lf-python), unsloth (Unsloth + TRL under --unsloth-python; "
                             "a CUDA GPU), steadytune. A peer that cannot run here is skipped with the reason")
    parser.add_argument("--dataset", default=None,
                        help="alpaca-format JSON file(s), comma-separated, whose prompt/answer lengths are used "
                             "(default: the alpaca demo sets of LLaMA-Factory)")
    parser.add_argument("--examples", type=int, default=1600, help="examples drawn from the dataset's lengths")
    parser.add_argument("--device", default="auto", help="auto, cuda or cpu")
    parser.add_argument("--plain-batch", type=int, default=8, help="examples per step of the plain recipe")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="real tokens per step for steadytune (default: 16384 on a GPU, 1024 on CPU)")
    parser.add_argument("--cutoff-len", type=int, default=2048, help="longest example; packed row length for sdpa")
    parser.add_argument("--packing-attention", default="auto", choices=("auto", "varlen", "sdpa", "flex"))
    parser.add_argument("--moe-grouped-mm", default="auto", choices=("auto", "torch", "triton", "loop"),
                        help="steadytune arm on a mixture of experts: what the experts' grouped matmuls run on "
                             "(train's moe_grouped_mm; auto: torch's grouped matmul on NVIDIA sm_80+, our Triton "
                             "kernel on ROCm)")
    parser.add_argument("--quantization-bit", type=int, default=None, choices=(4,),
                        help="QLoRA: every arm trains on a 4-bit base (bitsandbytes nf4, double quantisation: "
                             "LLaMA-Factory's quantization_bit: 4 defaults; Unsloth's load_in_4bit), quantised from "
                             "the shape's saved folder as it loads. Needs bitsandbytes (pip install 'steadytune[qlora]')")
    group = parser.add_argument_group("steadytune's speed features (auto = what train decides, kernels.plan_speed)")
    group.add_argument("--compile", nargs="?", const="on", default="auto", choices=("auto", "on", "off"),
                       help="torch.compile the decoder layers (bare --compile = on)")
    group.add_argument("--cuda-graphs", default="auto", choices=("auto", "on", "off"))
    group.add_argument("--kernel-tuning", default="auto", choices=("auto", "on", "off"),
                       help="Inductor's coordinate-descent tuning of the compiled layers' kernels (train's "
                            "kernel_tuning); auto: on from 20,000 --run-micro-batches, where its minute pays")
    group.add_argument("--recompute-pointwise", default="auto", choices=("auto", "on", "off"),
                       help="the compiled layers recompute elementwise results in backward instead of keeping them "
                            "(train's recompute_pointwise): about half their activation memory, no matmul "
                            "recomputed; auto: on where the layers are compiled on CUDA")
    group.add_argument("--liger", default="auto", choices=("auto", "on", "off"),
                       help="liger-kernel's fused RMSNorm/RoPE/SwiGLU in the steadytune arm")
    group.add_argument("--gradient-checkpointing", default="auto", choices=("auto", "on", "off"))
    group.add_argument("--activation-offloading", default="auto", choices=("auto", "on", "off"),
                       help="the checkpointed layers' inputs wait for backward in host memory (train's "
                            "activation_offloading; on turns checkpointing on); auto: on only "
                            "where checkpointing alone would not fit")
    group.add_argument("--fp8-base", default="auto", choices=("auto", "off", "on"),
                       help="the frozen base's matmuls in fp8 (train's fp8_base; GPUs of sm_89 and up); auto: train's "
                            "default (on with compiled layers, bf16, hidden >= 896, unless its copies would turn "
                            "gradient checkpointing on)")
    group.add_argument("--lora-input-cast", default="skip", choices=("skip", "keep"),
                       help="skip (default, as train does under bf16): LoRA inputs stay bf16 under autocast; keep: "
                            "peft's cast of each LoRA input to fp32 (for measuring what skipping it saves)")
    group.add_argument("--lora-scaling", default="first", choices=("first", "peft"),
                       help="first (default, as train does): LoRA's scaling on the rank-r tensor before lora_B; peft: "
                            "on lora_B's full-width output, peft's order (for measuring what the order saves)")
    group.add_argument("--fp8-accumulation", default="fast", choices=("fast", "exact"),
                       help="fast (default, as train does): fp8 matmuls accumulate in the tensor cores' fast mode; "
                            "exact: with periodic fp32 promotion (for measuring what fast buys)")
    group.add_argument("--shared-input", default="auto", choices=("auto", "on", "off"),
                       help="LoRA layers that read the same input (q/k/v, gate/up) multiply it once, as a group "
                            "(train's shared_input_projections); auto: on where the layers are compiled on CUDA")
    group.add_argument("--fused-swiglu", default="auto", choices=("auto", "on", "off"),
                       help="the MLP between its matmuls (gate/up's LoRA products, silu(gate) * up, down's fp8 "
                            "quantisation) as Triton kernels (train's fused_swiglu); auto: on where the fp8 base is, "
                            "compiled on CUDA")
    group.add_argument("--read-loss-each-step", action="store_true",
                       help="read each step's loss back to the host, as train's loop does for its guard and log "
                            "(one wait for the GPU a step; off: the loop never waits, the upper bound)")
    group.add_argument("--run-micro-batches", type=int, default=1000,
                       help="the policy decides as for a training run of this many micro-batches (compile pays "
                            "only on long runs)")
    peers = parser.add_argument_group("peer frameworks (each trains in a Python of its own: docs/speed.md)")
    peers.add_argument("--lf-python", default=None, metavar="PATH",
                       help="the Python of a LLaMA-Factory 0.9.5 environment, for the llamafactory arm (default: "
                            "env STEADYTUNE_LF_PYTHON; neither set: the arm is skipped and says how to set one up)")
    peers.add_argument("--unsloth-python", default=None, metavar="PATH",
                       help="the Python that has Unsloth, for the unsloth arm (default: env "
                            "STEADYTUNE_UNSLOTH_PYTHON, else this Python)")
    peers.add_argument("--unsloth-moe-backend", default="auto",
                       choices=("auto", "grouped_mm", "unsloth_triton", "native_torch"),
                       help="the unsloth arm on a mixture of experts: its UNSLOTH_MOE_BACKEND (auto: left unset, "
                            "Unsloth picks: torch's grouped_mm where it runs, as its MoE notebooks leave it)")
    peers.add_argument("--models-dir", default=None, metavar="DIR",
                       help="where the peer arms' model folder (the shape saved with random weights) is written, "
                            "checked for room first (default: the system's temporary folder)")
    steady = parser.add_argument_group("steady state (every arm)")
    steady.add_argument("--warmup", type=int, default=5, help="untimed steps first (compile and graph recording "
                                                                "happen here)")
    steady.add_argument("--window", type=int, default=10, help="steps per timing window")
    steady.add_argument("--min-steps", type=int, default=100, help="timed steps before the rate may be called steady")
    steady.add_argument("--min-tokens", type=int, default=0, help="or this many timed real tokens (0: steps only); big batches reach it sooner")
    steady.add_argument("--tolerance", type=float, default=0.03,
                        help="steady: the mean rate of the last 3 windows within this share of the 3 before")
    steady.add_argument("--max-seconds", type=float, default=150.0, help="timed seconds per arm at most")
    steady.add_argument("--max-steps", type=int, default=3000, help="timed steps per arm at most")
    steady.add_argument("--steps", type=int, default=None, help="exactly this many timed steps (no steady test)")
    extra = parser.add_argument_group("extras")
    extra.add_argument("--check-loss", type=int, default=0, metavar="STEPS",
                       help="also train STEPS steps packed (steadytune's path) and padded on the "
                            "same groups; report the largest relative difference of per-token loss")
    extra.add_argument("--find-max-len", action="store_true",
                       help="also find the longest cutoff_len one steadytune step takes at --max-tokens")
    extra.add_argument("--probe-max", type=int, default=131072, help="longest cutoff_len tried by --find-max-len")
    extra.add_argument("--probe-step", type=int, default=8192, help="resolution of --find-max-len")
    extra.add_argument("--probe-seconds", type=float, default=240.0, help="time for --find-max-len at most")
    parser.add_argument("--isolate", default="process", choices=("process", "none"),
                        help="process (default): each arm in a fresh Python process; none: all in this one")
    parser.add_argument("--arm-timeout", type=float, default=900.0, help="seconds an arm's process may take")
    parser.add_argument("--output", default="bench.json", help="where the JSON result is written (after every arm)")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("bench: --device cuda, but torch sees no GPU here (steadytune doctor says why)")
    if name not in ("cuda", "cpu"):
        raise UserError(f"bench: --device must be auto, cuda or cpu, got {name!r}")
    return torch.device(name)


# Numeric options and the least each may be (issue 54: `--examples 0` ended in a ZeroDivisionError); unset is fine.
AT_LEAST = {"examples": 1, "plain_batch": 1, "max_tokens": 1, "cutoff_len": 1, "warmup": 0, "window": 1,
            "min_steps": 1, "min_tokens": 0, "max_steps": 1, "steps": 1, "check_loss": 0, "probe_max": 1,
            "probe_step": 1, "run_micro_batches": 1}
ABOVE_ZERO = ("tolerance", "max_seconds", "probe_seconds", "arm_timeout")


def check_numbers(args) -> None:
    """One line naming the option for a number out of its range (or not finite)."""
    for name in (*AT_LEAST, *ABOVE_ZERO):
        value = getattr(args, name, None)
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if name in ABOVE_ZERO and not (math.isfinite(value) and value > 0):
            raise UserError(f"bench: {flag} {value}: must be above 0")
        if name in AT_LEAST and value < AT_LEAST[name]:
            raise UserError(f"bench: {flag} {value}: must be at least {AT_LEAST[name]}")


def run(args) -> int:
    check_numbers(args)
    if args.shape not in SHAPES:
        raise UserError(f"bench: unknown --shape {args.shape!r}; known: {', '.join(SHAPES)}")
    try:
        depth = shape_config(args.shape, args.num_layers)["num_hidden_layers"]
    except ValueError as e:
        raise UserError(f"bench: --num-layers {args.num_layers}: {e}") from None
    named = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = set(named) - set(SPEED_ARMS) - set(ARM_ALIASES)
    if unknown:
        raise UserError(f"bench: --arms takes {', '.join(SPEED_ARMS)} (liger is the peer arm); "
                        f"got {', '.join(sorted(unknown))}")
    arms = list(dict.fromkeys(ARM_ALIASES.get(a, a) for a in named))  # in the order given, each arm once
    if not arms and not (args.check_loss or args.find_max_len):
        raise UserError("bench: nothing to run: --arms is empty and neither --check-loss nor --find-max-len is set")
    if args.quantization_bit and importlib.util.find_spec("bitsandbytes") is None:
        raise UserError("bench: --quantization-bit 4 needs bitsandbytes in this Python: pip install 'steadytune[qlora]'")
    device = resolve_device(args.device)
    if args.max_tokens is None:
        args.max_tokens = 16384 if device.type == "cuda" else 1024
    examples = synthetic_examples(dataset_lengths(args.dataset), args.examples, SHAPES[args.shape]["vocab_size"],
                                  args.cutoff_len)
    lengths = sorted(len(e["input_ids"]) for e in examples)
    report = {
        "shape": args.shape, "num_layers": depth,
        "num_layers_overridden": args.num_layers is not None and args.num_layers != SHAPES[args.shape]["num_hidden_layers"],
        "moe": is_moe_shape(args.shape), "quantization_bit": args.quantization_bit,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "examples": len(examples),
        "lengths": {"mean": sum(lengths) / len(lengths), "p90": lengths[int(0.9 * len(lengths))], "max": lengths[-1]},
        "steady_rule": {k: getattr(args, k) for k in ("warmup", "window", "min_steps", "min_tokens", "tolerance",
                                                       "max_seconds", "max_steps", "steps")},
        "arms": {},
    }
    failed = []
    # The peer arms load the model from a folder: one written for the first of them serves the other (a 7B shape is
    # 15 GB to write), and goes when the arms are done.
    if args.models_dir:
        Path(args.models_dir).mkdir(parents=True, exist_ok=True)
    args.model_folders = tempfile.mkdtemp(prefix="steadytune-bench-models-", dir=args.models_dir)
    try:
        for arm in arms:
            result = run_arm(arm, args, device)
            report["arms"][arm] = result
            print(format_arm(result), flush=True)
            failed += [arm] if "error" in result else []
            write_report(args.output, report)
    finally:
        shutil.rmtree(args.model_folders, ignore_errors=True)
    report["ratios"] = ratios(report["arms"])
    for base, r in report["ratios"].items():
        print(f"steadytune / {base.removeprefix('vs_')}: " + ", ".join(f"{k} {v:.2f}x" for k, v in r.items()))
    report["loss_disagreement"] = disagreeing_losses(report["arms"])
    for arm, why in report["loss_disagreement"].items():
        print(f"{arm}: its loss {why}: it did not train what the other arms trained, so its speed is not a "
              f"like-for-like number")
    report["best_peer"] = best_peer(report["ratios"], passed_over=report["loss_disagreement"])
    if report["best_peer"]:
        best = report["best_peer"]
        memory = f" at {best['peak_memory']:.2f}x its peak memory" if "peak_memory" in best else ""
        print(f"steadytune / the fastest peer ({best['arm']}): {best['tokens_per_s']:.2f}x tokens/s{memory}")
    if args.check_loss:
        report["loss_check"] = run_arm("loss_check", args, device)
        if "error" in report["loss_check"]:
            failed.append("loss_check")
            print(f"loss_check: {report['loss_check']['error']}")
        else:
            print(f"packed vs unpacked per-token loss over {args.check_loss} steps: largest relative difference "
                  f"{report['loss_check']['max_relative_difference']:.2e}")
    if args.find_max_len:
        report["max_len"] = found = run_arm("max_len", args, device)
        if "error" in found:
            failed.append("max_len")
            print(f"max_len: {found['error']}")
        else:
            print(f"longest cutoff_len at {args.max_tokens:,}-token steps: {found['max_cutoff_len']} "
                  f"(first out of memory: {found['first_out_of_memory']})")
    write_report(args.output, report)
    print(f"wrote {args.output}")
    if failed:
        print(f"error: bench: {', '.join(failed)} did not finish (see 'error' in {args.output})", file=sys.stderr)
        return 1
    return 0


def run_arm(arm: str, args, device: torch.device) -> dict:
    """One arm, in a process of its own unless --isolate none; a failure becomes {"name", "error"}."""
    if args.isolate == "none":
        try:
            return run_here(arm, args, device)
        except Exception as e:  # noqa: BLE001 - one arm failing must not lose the others' results
            return {"name": arm, "error": f"{type(e).__name__}: {e}"}
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "args.json", Path(tmp) / "result.json"
        spec.write_text(json.dumps({"arm": arm, "device": str(device), "args": vars(args)}), encoding="utf-8")
        package_root = str(Path(__file__).resolve().parents[2])  # this steadytune, wherever it is imported from
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        # A session of its own, so that a stop takes the whole group: a peer arm's child (LLaMA-Factory, Unsloth)
        # left running would keep the GPU, and its memory, from the arms after it.
        process = subprocess.Popen([sys.executable, "-m", "steadytune.bench.arms", str(spec), str(out)], env=env,
                                   start_new_session=True)
        try:
            code = process.wait(timeout=args.arm_timeout)
        except subprocess.TimeoutExpired:
            return {"name": arm, "error": f"did not finish in --arm-timeout {args.arm_timeout:g} s"
                                          + last_words(args, arm)}
        finally:  # also on Ctrl-C, which the arm's own session does not receive
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if code != 0 or not out.is_file():
            return {"name": arm, "error": f"its process exited with code {code} (traceback above)"}
        return json.loads(out.read_text(encoding="utf-8"))


def last_words(args, arm: str) -> str:
    """The last line a peer arm's framework wrote, for an arm stopped by the clock: how far it got (on the Gemma
    shape Unsloth's log ended at its start-up banner, with no step)."""
    log = log_path_for(args, arm)
    line = tail(log, 1).strip()
    return f"; the last line of its log ({log.name}): {line[:300]}" if line else ""


def ratios(arms: dict) -> dict:
    """steadytune against each baseline that finished: tokens/s and peak memory."""
    ours = arms.get("steadytune")
    out = {}
    if not ours or not ours.get("tokens_per_s"):
        return out
    for base in BASELINES:
        theirs = arms.get(base)
        if not theirs or not theirs.get("tokens_per_s"):  # failed, skipped or not asked for
            continue
        r = {"tokens_per_s": ours["tokens_per_s"] / theirs["tokens_per_s"]}
        if ours.get("peak_memory_gib") and theirs.get("peak_memory_gib"):
            r["peak_memory"] = ours["peak_memory_gib"] / theirs["peak_memory_gib"]
        out[f"vs_{base}"] = r
    return out


def best_peer(ratios_: dict, passed_over: dict | None = None) -> dict | None:
    """The fastest of the peer arms that finished (liger peer, LLaMA-Factory, Unsloth) and steadytune's ratios
    against it: the comparison a user choosing a tool makes. The fastest is the one steadytune's speed ratio is
    smallest against. `passed_over`: arms whose loss says they trained something else (disagreeing_losses), which
    are no speed to beat (the liger peer's NaN steps on the Gemma shape were its fastest). None without steadytune
    or any sound peer."""
    finished = [name for name in PEER_FRAMEWORKS if f"vs_{name}" in ratios_ and name not in (passed_over or {})]
    if not finished:
        return None
    name = min(finished, key=lambda n: ratios_[f"vs_{n}"]["tokens_per_s"])
    return {"arm": name, **ratios_[f"vs_{name}"]}


# How far an arm's loss may sit from the arms' median before it counts as a different training. Every arm trains the
# same examples from the same random weights, so after tens of steps their losses sit near ln(vocab) and within a
# few percent of each other (7B shape, 2026-12-02: 12.48 to 12.68); a loss of 0 or one a fifth away is a broken arm.
LOSS_AGREEMENT = 0.2


def disagreeing_losses(arms: dict) -> dict[str, str]:
    """The arms whose loss after the timed steps cannot be the same training as the others', with why. A loss that
    is not a positive finite number is always wrong (cross-entropy on real labels is never 0); a distance from the
    median is judged only with three or more sound losses, so one bad arm cannot move the median it is judged by."""
    losses = {name: r["loss"] for name, r in arms.items() if isinstance(r.get("loss"), (int, float))}
    out = {name: f"is {loss}" for name, loss in losses.items() if not (math.isfinite(loss) and loss > 0)}
    sound = {name: loss for name, loss in losses.items() if name not in out}
    if len(sound) >= 3:
        median = statistics.median(sound.values())
        out.update({name: f"{loss:.4g} is {abs(loss - median) / median:.0%} from the arms' median {median:.4g}"
                    for name, loss in sound.items() if abs(loss - median) > LOSS_AGREEMENT * median})
    return out


def write_report(path: str, report: dict) -> None:
    Path(path).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def format_arm(r: dict) -> str:
    if "skipped" in r:
        return f"{r['name']:>12}: skipped: {r['skipped']}"
    if "error" in r:
        return f"{r['name']:>12}: failed: {r['error']}"
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
    mem = f"{r['peak_memory_gib']:.1f} GiB" if r.get("peak_memory_gib") is not None else "n/a"
    spread = f"±{100 * r.get('relative_std', 0):.1f}%"
    batch = r["settings"].get("batch")
    loss = ""
    if r.get("loss") is not None:
        tokens = f" ({r['loss_tokens']:,} tokens)" if r.get("loss_tokens") else ""
        loss = f", loss {r['loss']:.3f} at step {r['loss_step']}{tokens}"
    peer = f", {r['peer_version']}" if r.get("peer_version") else ""
    if r.get("trainable_by_kind") is not None:   # a mixture of experts: whether the routed experts train
        routed = r["trainable_by_kind"].get("routed experts", 0)
        peer += (f", trains {r.get('trainable_parameters', 0):,} parameters, "
                 + (f"{routed:,} in the routed experts" if routed else "the routed experts frozen"))
    return (f"{r['name']:>12}: {r['tokens_per_s']:>10,.0f} real tokens/s {spread:>7}  MFU {mfu:>6}  peak memory "
            f"{mem:>9}  ({r.get('stopped')} after {r.get('steps', 0)} timed steps, {r.get('span_windows', 0)} windows "
            f"in the mean, start-up {r.get('startup_seconds', 0):.0f} s" + (f", batch {batch}" if batch else "")
            + loss + peer + ")")
