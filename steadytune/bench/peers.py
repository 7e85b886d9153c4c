"""The peer arms of `bench`: llamafactory and unsloth, each trained by the peer's own code on bench's model shape,
examples and example order, and timed by the same steady-state rule as every other arm.

Each runs in a child process under a Python the user names (lf_child.py under --lf-python, unsloth_child.py under
--unsloth-python), because neither fits in steadytune's environment: LLaMA-Factory 0.9.5 pins its own transformers,
and Unsloth patches transformers, peft and TRL when imported and pins versions of its own. One protocol serves both,
which keeps every arm in one `bench` call: this side writes the model folder, the examples in the peer's format and a
spec; the child trains with peer_timing.StepTimer (SteadyRate inside the peer's own loop) and writes one JSON result,
which is scored here like the other arms. Unsloth's Python defaults to bench's own (its process alone is patched).

A peer that cannot run here (no Python given, the package missing, no CUDA GPU for Unsloth) gives
{"name", "skipped": why, with the command that fixes it} and the bench goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from steadytune.bench.workload import (
    EOS_ID,
    LORA_RANK,
    PAD_ID,
    NoRoom,
    example_order,
    examples_for,
    make_model_folder,
    score,
    steady_rule,
    words_of,
)
from steadytune.model.shapes import SHAPES, is_moe_shape

LF_VERSION = "0.9.5"
LF_SETUP = (f"python3.11 -m venv lfvenv && lfvenv/bin/pip install 'llamafactory=={LF_VERSION}' liger-kernel, then "
            "pass --lf-python lfvenv/bin/python (or set STEADYTUNE_LF_PYTHON)")
UNSLOTH_SETUP = "pip install unsloth (into bench's Python, or into another one named by --unsloth-python)"
LF_DATASET = "steadytune_bench"
PROBE_SECONDS = 300     # importing a peer's package (torch, transformers and all) can take a minute on a busy machine
CHILD_MARGIN_SECONDS = 30   # the arm's own process is killed at --arm-timeout: its child must stop before that
HERE = Path(__file__).resolve().parent


# --- can the peer run here? ------------------------------------------------------------------------------------

def probe_import(python: str, module: str) -> tuple[str | None, str | None]:
    """-> (version, None) when `python` imports `module`, else (None, why in one line)."""
    if not Path(python).is_file():
        return None, f"no such file: {python}"
    code = f"import {module}; print('VERSION', getattr({module}, '__version__', 'unknown'))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=PROBE_SECONDS,
                              check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{type(e).__name__}: {e}"
    for line in done.stdout.splitlines():
        if line.startswith("VERSION ") and done.returncode == 0:
            return line.split(" ", 1)[1].strip(), None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return None, lines[-1].strip() if lines else f"exit code {done.returncode}"


def llamafactory_python(args) -> str | None:
    return getattr(args, "lf_python", None) or os.environ.get("STEADYTUNE_LF_PYTHON") or None


def unsloth_python(args) -> str:
    return getattr(args, "unsloth_python", None) or os.environ.get("STEADYTUNE_UNSLOTH_PYTHON") or sys.executable


def llamafactory_check(python: str | None) -> tuple[str | None, str | None]:
    """-> (LF's version, None) or (None, why the arm is skipped, with the fix)."""
    if not python:
        return None, f"no LLaMA-Factory Python given (it needs an environment of its own): {LF_SETUP}"
    version, problem = probe_import(python, "llamafactory")
    if problem:
        return None, (f"{python} cannot import llamafactory ({problem}): "
                      f"{python} -m pip install 'llamafactory=={LF_VERSION}' liger-kernel, or {LF_SETUP}")
    return version, None


def unsloth_check(python: str, device: torch.device) -> tuple[str | None, str | None]:
    """-> (Unsloth's version, None) or (None, why the arm is skipped, with the fix). A CUDA GPU comes first:
    Unsloth's kernels need one, and its import fails without one."""
    if device.type != "cuda":
        return None, (f"Unsloth needs a CUDA GPU and this bench runs on {device.type}: run bench on a machine with "
                      f"an NVIDIA GPU (--device cuda) after {UNSLOTH_SETUP}")
    version, problem = probe_import(python, "unsloth")
    if problem:
        return None, f"{python} cannot import unsloth ({problem}): {python} -m pip install unsloth, or {UNSLOTH_SETUP}"
    return version, None


# --- the inputs: the same model folder and examples, written for each peer ---------------------------------------

def prompt_length(example: dict) -> int:
    """Tokens before the first labelled one (synthetic_examples labels the answer only)."""
    return next(i for i, label in enumerate(example["labels"]) if label != -100)


def one_pass(args) -> list[dict]:
    """Every example once, in the order all arms share; a peer cycles through it for as many steps as it needs."""
    examples = examples_for(args)
    return [examples[i] for i in example_order(len(examples), len(examples))]


def write_lf_dataset(examples: list[dict], folder: Path) -> str:
    """Alpaca records (instruction -> output) whose words the model folder's tokenizer turns back into the same ids,
    and the dataset_info.json that names them; -> the dataset name for LF's `dataset` key."""
    records = [{"instruction": words_of(e["input_ids"][:prompt_length(e)]), "input": "",
                "output": words_of(e["input_ids"][prompt_length(e):])} for e in examples]
    (folder / f"{LF_DATASET}.json").write_text(json.dumps(records), encoding="utf-8")
    info = {LF_DATASET: {"file_name": f"{LF_DATASET}.json"}}  # alpaca columns are LF's default
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return LF_DATASET


def write_token_examples(examples: list[dict], path: Path) -> Path:
    """The examples as token ids with TRL's completion_mask (1 on the answer), one JSON object a line."""
    with path.open("w", encoding="utf-8") as f:
        for e in examples:
            p = prompt_length(e)
            f.write(json.dumps({"input_ids": e["input_ids"],
                                "completion_mask": [0] * p + [1] * (len(e["input_ids"]) - p)}) + "\n")
    return path


def base_spec(args, device: torch.device, model_dir: Path, work: Path) -> dict:
    rule = steady_rule(args)
    return {"model_dir": str(model_dir), "device": device.type, "work_dir": str(work), "warmup": args.warmup,
            "steady_rule": rule, "max_steps": args.warmup + (rule["fixed_steps"] or rule["max_steps"]),
            "pad_id": PAD_ID, "eos_id": EOS_ID, "lora_rank": LORA_RANK, "lora_alpha": 2 * LORA_RANK,
            "row_tokens": args.max_tokens, "cutoff_len": args.cutoff_len,
            "quantization_bit": getattr(args, "quantization_bit", None),
            "moe": is_moe_shape(args.shape), "model_type": SHAPES[args.shape]["model_type"]}


def model_folder_for(args, device: torch.device, work: Path) -> Path:
    """The shape's model folder (workload.make_model_folder): in the folder bench keeps for the peers of one call
    (args.model_folders), written once and reused by the next peer, or in `work` when there is none."""
    layers = getattr(args, "num_layers", None)
    shared = getattr(args, "model_folders", None)
    if not shared:
        return make_model_folder(args.shape, work / "model", device, layers)
    folder = Path(shared) / (args.shape if layers is None else f"{args.shape}-{layers}-layers")
    done = folder / ".steadytune-complete"  # written last: a folder without it was cut short and is written again
    if not done.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        make_model_folder(args.shape, folder, device, layers)
        done.write_text("", encoding="utf-8")
    return folder


# --- running a child and scoring what it wrote ------------------------------------------------------------------

def log_path_for(args, name: str) -> Path:
    output = Path(getattr(args, "output", "bench.json"))
    return output.with_name(f"{output.stem}.{name}.log")


def tail(path: Path, lines: int = 15) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def run_child(python: str, script: str, spec: dict, log: Path, timeout: float) -> dict:
    """One training run of a peer in its own process; -> the child's result, or {"error", "out_of_memory"}."""
    work = Path(spec["work_dir"])
    spec_path, result_path = work / "spec.json", work / "result.json"
    result_path.unlink(missing_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_DATASETS_CACHE": str(work / "datasets_cache"), **spec.get("env", {})}
    spec = {**spec, "launched_at": time.time()}  # start-up is counted from here, the child's process start
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n=== {python} {script} attempt {spec['attempt']}\n")
        out.flush()
        try:
            done = subprocess.run([python, str(HERE / script), str(spec_path), str(result_path)], stdout=out,
                                  stderr=subprocess.STDOUT, env=env, timeout=max(timeout, 1.0), check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish in {timeout:.0f} s (--arm-timeout less a margin)", "out_of_memory": False}
    if result_path.is_file():
        return json.loads(result_path.read_text(encoding="utf-8"))
    return {"error": f"its process exited with code {done.returncode} and wrote no result", "out_of_memory": False}


def run_attempts(name: str, python: str, script: str, spec: dict, attempts: list[dict], args, device: torch.device,
                 version: str) -> dict:
    """The child with each attempt (fastest first) until one does not run out of memory; -> the scored result."""
    log = log_path_for(args, name)
    log.write_text("", encoding="utf-8")
    deadline = time.monotonic() + getattr(args, "arm_timeout", 900.0) - CHILD_MARGIN_SECONDS
    tried: list[str] = []
    for i, attempt in enumerate(attempts):
        outcome = run_child(python, script, {**spec, "attempt": {**attempt, "fallback": tried or None}}, log,
                            deadline - time.monotonic())
        if "error" not in outcome:
            return scored_peer(name, outcome, device, version, python, tried)
        if not (outcome.get("out_of_memory") and i + 1 < len(attempts)):
            return {"name": name, "error": f"{outcome['error']} (log: {log}; its end: {tail(log, 3)!r})",
                    "peer_version": f"{name} {version}", "python": python, "log": str(log)}
        tried.append(f"{attempt['label']}: out of memory")
    raise AssertionError("unreachable: the last attempt returns")


def scored_peer(name: str, child: dict, device: torch.device, version: str, python: str, tried: list[str]) -> dict:
    settings = {**child["settings"], "python": python, "fallback": tried or None}
    launched = child["launched_at"]
    startup = (child["first_step_at"] or launched) - launched
    counts = child.get("counts") or {}
    result = score(name, child["summary"], counts.get("mfu_parameters") or 0, counts.get("mfu_lora_parameters") or 0,
                   device, settings, startup, child["peak_memory_gib"], counts)
    timed_from = child.get("timing_started_at")
    result.update(peer_version=f"{name} {version}", loss=child["loss"], loss_step=child["loss_step"],
                  loss_tokens=child.get("loss_tokens"),
                  startup_to_timing_seconds=round(timed_from - launched, 1) if timed_from else None,
                  step_seconds=child["step_seconds"], step_tokens=child["step_tokens"])
    return result


# --- the arms ----------------------------------------------------------------------------------------------------

def lf_attempts(device: torch.device) -> list[dict]:
    """Gradient checkpointing off first (faster where the activations fit), on when off ran out of memory."""
    attempts = [{"label": "gradient checkpointing off", "gradient_checkpointing": False,
                 "reason": "off: faster where the activations fit (tried first)"},
                {"label": "gradient checkpointing on", "gradient_checkpointing": True,
                 "reason": "on: off ran out of memory"}]
    return attempts if device.type == "cuda" else attempts[:1]


def lf_row_tokens(max_tokens: int, examples: list[dict]) -> int:
    """LF's packed row length (its cutoff_len): bench's real-token budget per step, or longer where an example is:
    LF cuts an example to the row, and the same examples must stay whole (LF keeps one token of the row back).
    A multiple of 8: LF 0.9.5's collator pads input_ids to one but not the position ids of packed rows, and the
    two then disagree in length."""
    longest = max(len(e["input_ids"]) for e in examples) + 1
    return -(-max(max_tokens, longest) // 8) * 8


def run_llamafactory(args, device: torch.device) -> dict:
    """LLaMA-Factory's run_exp (stage sft, LoRA) with its fastest options here; lf_child.py says which and why."""
    python = llamafactory_python(args)
    version, why = llamafactory_check(python)
    if why:
        return {"name": "llamafactory", "skipped": why}
    with tempfile.TemporaryDirectory(prefix="steadytune-bench-lf-") as tmp:
        work = Path(tmp)
        try:
            model_dir = model_folder_for(args, device, work)
        except NoRoom as e:
            return {"name": "llamafactory", "error": str(e)}
        examples = one_pass(args)
        spec = {**base_spec(args, device, model_dir, work), "row_tokens": lf_row_tokens(args.max_tokens, examples),
                "dataset": write_lf_dataset(examples, work), "dataset_dir": str(work)}
        return run_attempts("llamafactory", python, "lf_child.py", spec, lf_attempts(device), args, device, version)


def unsloth_attempts(max_tokens: int, cutoff_len: int) -> list[dict]:
    """Packed rows of cutoff_len a step: as many as hold bench's token budget (--max-tokens, the tokens of a
    steadytune step and of LLaMA-Factory's one row), then half as many each time a step runs out of memory.

    Why not the largest of 32/16/8 rows, as first written: 32 rows of 2,048 tokens are 65,536 tokens a step, four
    times the other arms'. On the H200 that made a 1.5B step take 6 s, so the arm's 40 timed seconds held one window
    of 10 steps and the steady-state rule could not judge it; a 7B step would take longer than the arm's time."""
    rows = max(1, max_tokens // cutoff_len)
    attempts = []
    while True:
        attempts.append({"label": f"batch {rows}", "batch": rows, "step_tokens": rows * cutoff_len})
        if rows == 1:
            return attempts
        rows //= 2


def unsloth_env(args) -> dict:
    """The unsloth child's environment for a mixture of experts: UNSLOTH_MOE_BACKEND as --unsloth-moe-backend asks
    (auto: as this environment has it, normally unset, so Unsloth picks, as its MoE notebooks leave it; the child
    reports the backend Unsloth chose)."""
    backend = getattr(args, "unsloth_moe_backend", "auto")
    return {"UNSLOTH_MOE_BACKEND": backend} if backend != "auto" else {}


def run_unsloth(args, device: torch.device) -> dict:
    """Unsloth's FastLanguageModel + TRL's SFTTrainer with packing, rows a step as unsloth_attempts says."""
    python = unsloth_python(args)
    version, why = unsloth_check(python, device)
    if why:
        return {"name": "unsloth", "skipped": why}
    with tempfile.TemporaryDirectory(prefix="steadytune-bench-unsloth-") as tmp:
        work = Path(tmp)
        try:
            model_dir = model_folder_for(args, device, work)
        except NoRoom as e:
            return {"name": "unsloth", "error": str(e)}
        spec = {**base_spec(args, device, model_dir, work),
                "examples": str(write_token_examples(one_pass(args), work / "examples.jsonl")),
                "env": unsloth_env(args)}
        attempts = unsloth_attempts(args.max_tokens, args.cutoff_len)
        return run_attempts("unsloth", python, "unsloth_child.py", spec, attempts, args, device, version)
