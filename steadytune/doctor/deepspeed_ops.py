"""DeepSpeed (research/rocm.md section 9, rows 21): its version, which of its C++/CUDA ops were built into the install,
whether the tools to build the others at first use are here, and, on request (`doctor --deepspeed-ops`), whether the
ops steadytune's configs can need (fused_adam on a GPU, cpu_adam for ZeRO-Offload) really build and load, in a child
process with a time limit.

Without the request nothing imports deepspeed (that alone takes seconds): the installed ops are read from the file
its build wrote (`deepspeed/git_version_info_installed.py`, the data `ds_report` prints).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from steadytune.doctor.findings import Finding
from steadytune.doctor.probe import Probe, package_version

BUILD_TIMEOUT_S = 600.0

_OPS_SCRIPT = r'''
import json, sys, time
import deepspeed
from deepspeed.ops import op_builder
names = sys.argv[1].split(",")
out = {}
for name in names:
    builder = getattr(op_builder, name)()
    entry = {"compatible": bool(builder.is_compatible(verbose=False))}
    if entry["compatible"] and "--load" in sys.argv:
        start = time.time()
        try:
            builder.load(verbose=False)
            entry["loaded"] = True
        except Exception as e:
            entry["loaded"] = False
            entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        entry["seconds"] = round(time.time() - start, 1)
    out[name] = entry
print("OPS " + json.dumps(out))
'''


def installed_build(origin_dir: Path) -> Optional[dict[str, Any]]:
    """installed_ops / accelerator_name / torch_info from the file DeepSpeed's build wrote, without importing it."""
    path = origin_dir / "git_version_info_installed.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return values


def check_deepspeed(probe: Probe, build_ops: bool = False) -> list[Finding]:
    version = package_version("deepspeed")
    if version is None:
        return []
    spec = importlib.util.find_spec("deepspeed")
    findings = [Finding.info("deepspeed", f"deepspeed {version} is installed",
                             "`deepspeed: FILE.json` in a run config uses it (ZeRO-0/2/3, offload); "
                             "`steadytune doctor --deepspeed-ops` builds and loads its ops")]
    build = installed_build(Path(spec.origin).parent) if spec and spec.origin else None
    if build is not None:
        ops = build.get("installed_ops") or {}
        built = sorted(name for name, ok in ops.items() if ok)
        findings.append(Finding.info(
            "deepspeed", f"ops built into this install: {', '.join(built) or 'none'} (built for "
            f"{build.get('accelerator_name', '?')}, torch {(build.get('torch_info') or {}).get('version', '?')})",
            "ops not built in are compiled the first time a config needs them (JIT, with ninja and the GPU compiler)"))
    # hipcc on ROCm and the ROCm op-build bug of old releases are check_optional_libs' (checks.py); here the rest of
    # what a JIT build needs.
    missing = [] if shutil.which("ninja") or importlib.util.find_spec("ninja") else ["ninja"]
    if probe.flavour == "cuda" and not _nvcc(probe):
        missing.append("nvcc (CUDA_HOME)")
    if missing and probe.flavour in ("rocm", "cuda"):
        findings.append(Finding.warn(
            "deepspeed", f"DeepSpeed cannot build its ops here: {', '.join(missing)} not found",
            "fused_adam and cpu_adam are compiled at first use; a config that needs them then fails (steadytune "
            "itself hands DeepSpeed torch's AdamW, which needs no op)",
            "pip install ninja; install the CUDA toolkit matching torch.version.cuda and set CUDA_HOME"))
    if build_ops:
        findings += build_and_load_ops(probe)
    return findings


def _nvcc(probe: Probe) -> Optional[str]:
    cuda_home = probe.env.get("CUDA_HOME") or probe.env.get("CUDA_PATH")
    nvcc = Path(cuda_home) / "bin" / "nvcc" if cuda_home else None
    return shutil.which("nvcc") or (str(nvcc) if nvcc and nvcc.exists() else None)


def build_and_load_ops(probe: Probe, timeout: float = BUILD_TIMEOUT_S) -> list[Finding]:
    """Build (if needed) and load the ops a DeepSpeed run may ask for, in a child process with a time limit."""
    names = ["CPUAdamBuilder"] + (["FusedAdamBuilder"] if probe.flavour in ("rocm", "cuda") else [])
    try:
        done = subprocess.run([sys.executable, "-c", _OPS_SCRIPT, ",".join(names), "--load"], capture_output=True,
                              text=True, timeout=timeout, env=dict(probe.env) or dict(os.environ))
    except subprocess.TimeoutExpired:
        return [Finding.warn("deepspeed", f"building DeepSpeed's ops did not finish in {timeout:.0f} s",
                             "the first JIT build compiles C++/CUDA/HIP sources", "run it again (builds are cached), "
                             "or prebuild: DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_ADAM=1 pip install deepspeed")]
    line = next((l for l in done.stdout.splitlines() if l.startswith("OPS ")), None)
    if line is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
        return [Finding.warn("deepspeed", "deepspeed does not import", " | ".join(tail), "pip install -U deepspeed")]
    findings = []
    for name, entry in json.loads(line[4:]).items():
        op = name.removesuffix("Builder")
        if not entry["compatible"]:
            findings.append(Finding.warn("deepspeed", f"DeepSpeed op {op} is not compatible with this machine",
                                         "ds_report lists the reason", "use configs that do not need it"))
        elif entry.get("loaded"):
            findings.append(Finding.info("deepspeed", f"DeepSpeed op {op} builds and loads ({entry['seconds']} s)"))
        else:
            findings.append(Finding.warn("deepspeed", f"DeepSpeed op {op} does not build or load: {entry.get('error')}",
                                         "rocm.md row 21: old op builders, a missing CUDA_HOME/ROCM_HOME, or a "
                                         "compiler that does not match torch",
                                         "pip install -U deepspeed ninja; set CUDA_HOME or ROCM_HOME"))
    return findings
