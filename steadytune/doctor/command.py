"""The `steadytune doctor` subcommand: its arguments, the choice between live and offline mode, and the
report (a GPU table and the findings for people, or one JSON object with --json). Exit code 1 on any error."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from steadytune.config import load_config
from steadytune.doctor.canary import canary_on_this_machine
from steadytune.doctor.case_files import PARTS
from steadytune.doctor.cases import score_part, summary
from steadytune.doctor.findings import Finding, findings_as_dicts, format_findings, has_errors
from steadytune.doctor.live import diagnose_this_machine
from steadytune.doctor.offline import MAX_SAVED_BYTES, RUN_MANIFEST, machine_info, run_folder_files, run_offline_checks
from steadytune.doctor.plan import train_plan_findings
from steadytune.errors import UserError
from steadytune.hardware.archs import bf16_verdict

TOOL_FLAGS = ("rocm-smi", "rocminfo", "amd-smi", "nvidia-smi", "lspci", "dmesg")


def _gpu_table(gpus: list[dict]) -> str:
    if not gpus:
        return "GPUs: none"
    def memory(g: dict) -> str:
        if g["memory_gib"] is None:
            return f"{g['nominal_memory_gib']:g} GiB (model)" if g.get("nominal_memory_gib") else "?"
        usable = g.get("usable_memory_gib")
        return f"{g['memory_gib']:g} GiB" + (f" (usable {usable:g})" if usable and usable != g["memory_gib"] else "")

    rows = [("#", "model", "arch", "memory", "bf16")] + [
        (str(g["index"]), g["name"] or "?", g["arch"] or "?", memory(g),
         {True: "native", False: "no", None: "?"}[g["bf16"]] + (" (iGPU)" if g["integrated"] else ""))
        for g in gpus]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--allreduce", action="store_true",
                        help="also run a real all-reduce across the visible GPUs (needs >= 2; catches RCCL/NCCL hangs); "
                             "if it hangs or fails, retry once with NCCL_P2P_DISABLE=1 and say which works")
    parser.add_argument("--nodes", nargs="?", const="", metavar="HOST:PORT",
                        help="also check this machine as one node of a multi-node job: the rendezvous HOST:PORT "
                             "(default MASTER_ADDR:MASTER_PORT) reachable, the interface NCCL/RCCL and gloo will use, "
                             "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME advice, InfiniBand and P2P settings")
    parser.add_argument("--attention-bench", action="store_true",
                        help="also time SDPA forward+backward under each kernel on the GPU train uses (in a child "
                             "process), with and without TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 where AOTriton marks "
                             "the GPU experimental, and say whether the switch pays")
    parser.add_argument("--canary", action="store_true",
                        help="also run the numerical canary on the GPU: matmuls and attention in each precision a run "
                             "would use, every Triton kernel steadytune ships, an all-reduce across the visible GPUs "
                             "and a large allocation, each checked against the CPU (some ROCm stacks return zeros or "
                             "garbage without an error)")
    parser.add_argument("--deepspeed-ops", action="store_true",
                        help="also build (first time: minutes) and load the DeepSpeed ops a run may need (cpu_adam, "
                             "fused_adam), in a child process with a time limit")
    parser.add_argument("--from", dest="from_dir", metavar="DIR|FILE|-",
                        help="diagnose another machine from what was saved or pasted: a folder, one file, or - (stdin). "
                             "Any text: tool outputs (rocm-smi, amd-smi, rocminfo, nvidia-smi, collect_env, lspci -vv), "
                             "console sessions ($ cmd and its output), tracebacks and logs (read by the error catalogue), "
                             "dmesg/journal, sysfs and /proc reads, pip/uv output, env lines; a run folder (saves/RUN/): "
                             "its recorded error, environment.json and logs. Its GPUs, its packages, the likely cause of "
                             "its errors, and what train would choose there")
    parser.add_argument("--score-cases", choices=PARTS, metavar="train|heldout|fresh",
                        help="score doctor's rules on the mined cases (real pastes from public issue threads with their "
                             "accepted fix, in the package): the share whose cause and fix doctor names, per cause, "
                             "and the misses of the training part (the held-out part and a fresh round not yet read "
                             "for rules are scored, never used to write rules)")
    parser.add_argument("--config", metavar="YAML",
                        help="a train config: report train's choices for its precision, attention, packing, model and batch")
    for tool in TOOL_FLAGS:
        parser.add_argument(f"--{tool}", dest=tool.replace("-", "_"), metavar="FILE", action="append", default=[],
                            help=f"a saved {tool}{' -vv' if tool == 'lspci' else ''} output (repeatable)")


def _offline_inputs(args: argparse.Namespace, scratch: Path) -> tuple[list[Path], dict[Path, str]]:
    paths: list[Path] = []
    expected: dict[Path, str] = {}
    if args.from_dir == "-":   # a paste piped in: `xclip -o | steadytune doctor --from -`
        text = sys.stdin.buffer.read(MAX_SAVED_BYTES + 1)
        if not text.strip():
            raise UserError("--from -: nothing on stdin (pipe a saved output or a paste into it)")
        (scratch / "stdin").write_bytes(text)
        paths.append(scratch / "stdin")
    elif args.from_dir:
        folder = Path(args.from_dir)
        if folder.is_file():   # one saved file: a pasted session may hold every output
            files = [folder]
        elif not folder.is_dir():
            raise UserError(f"--from {folder}: no such folder or file")
        elif (folder / RUN_MANIFEST).is_file():   # a run folder: its recorded error, environment.json and logs
            files = run_folder_files(folder)
        else:
            files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise UserError(f"--from {folder}: the folder has no files")
        paths += files
    for tool in TOOL_FLAGS:
        for name in getattr(args, tool.replace("-", "_"), []) or []:
            path = Path(name)
            if not path.is_file():
                raise UserError(f"--{tool} {path}: no such file")
            paths.append(path)
            expected[path] = tool
    return paths, expected


def _config(args: argparse.Namespace):
    if not getattr(args, "config", None):
        return None
    return load_config(args.config)


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="steadytune-doctor-") as scratch:
        return _run(args, Path(scratch))


def _run(args: argparse.Namespace, scratch: Path) -> int:
    if getattr(args, "score_cases", None):
        print(summary(score_part(args.score_cases), args.score_cases, show_misses=args.score_cases == "train"))
        return 0
    paths, expected = _offline_inputs(args, scratch)
    cfg = _config(args)
    if paths:
        mode = "offline"
        gpu_records, findings = run_offline_checks(paths, expected, cfg)
        findings += _live_only_flags(args)
        usable = {g.index: g.usable_memory_gib for g in (machine_info(gpu_records) or _NoInfo()).gpus}
        gpus = [{**{k: getattr(g, k) for k in ("index", "vendor", "name", "arch", "arch_source", "memory_gib",
                                                "integrated", "uuid", "bus_id", "hip_id", "nominal_memory_gib")},
                 "usable_memory_gib": usable.get(g.index), "bf16": g.bf16} for g in gpu_records]
        title = f"steadytune doctor: saved outputs from {len(paths)} file(s)"
    else:
        mode, gpus, title = "live", [], "steadytune doctor: this machine"
        probe, findings = diagnose_this_machine(allreduce=args.allreduce,
                                                deepspeed_ops=getattr(args, "deepspeed_ops", False),
                                                attention_bench=getattr(args, "attention_bench", False),
                                                nodes=getattr(args, "nodes", None))
        if probe is not None:   # None: torch missing or broken (row 9), which findings explain
            gpus = [{**asdict(g), "bf16": bf16_verdict(g.arch)[0]} for g in probe.info.gpus]
            if getattr(args, "canary", False):
                findings += canary_on_this_machine(probe.info.backend)
            title += f" ({probe.info.backend}, torch {probe.torch_version})"
            if cfg is not None:
                findings += train_plan_findings(probe.info, "config", cfg, offline=False)
    exit_code = 1 if has_errors(findings) else 0
    if args.json:
        print(json.dumps({"mode": mode, "gpus": gpus, "findings": findings_as_dicts(findings),
                          "exit_code": exit_code}, indent=2, ensure_ascii=False))
    else:
        print(f"{title}\n\n{_gpu_table(gpus)}\n\n{format_findings(findings)}")
    return exit_code


# Flags whose checks run on this machine's GPUs and network: with saved outputs they do not run, which is said (a
# `doctor --canary --from out.txt` answered on the saved outputs alone, exit 0, as if the canary had passed).
LIVE_ONLY_FLAGS = {"canary": "--canary", "allreduce": "--allreduce", "attention_bench": "--attention-bench",
                   "deepspeed_ops": "--deepspeed-ops", "nodes": "--nodes"}


def _live_only_flags(args: argparse.Namespace) -> list[Finding]:
    given = [flag for key, flag in LIVE_ONLY_FLAGS.items() if getattr(args, key, None) not in (None, False)]
    if not given:
        return []
    return [Finding.warn("saved-outputs", f"{', '.join(given)} not run: {'it checks' if len(given) == 1 else 'they check'}"
                         " this machine, and the other findings read saved outputs only",
                         fix=f"run `steadytune doctor {' '.join(given)}` on the machine itself")]


class _NoInfo:
    gpus: list = []
