"""environment.json: what a training run records about the machine it ran on (hardware, doctor's findings,
package versions, the environment variables that matter), so a result can be traced to its setup; and the start-up
checks that write it, whose errors stop a run unless --force."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional

from steadytune.doctor.canary import CanaryResult, failed_line, startup_canary
from steadytune.doctor.findings import Finding, findings_as_dicts, format_findings, has_errors
from steadytune.doctor.live import run_live_checks
from steadytune.doctor.probe import OPTIONAL_PACKAGES, package_version
from steadytune.errors import UserError, describe_os_error

if TYPE_CHECKING:
    from steadytune.hardware.backend import HardwareInfo


def _package_versions() -> dict[str, Optional[str]]:
    names = ("steadytune", "torch", "transformers", "peft", "accelerate", "safetensors", *OPTIONAL_PACKAGES)
    return {n: package_version(n) for n in names}


ENV_PREFIXES = ("HIP_", "ROCR_", "ROCM_", "HSA_", "CUDA_", "NCCL_", "RCCL_", "PYTORCH_", "TORCH_", "GPU_DEVICE_ORDINAL",
                "FLASH_ATTENTION_", "BNB_", "DS_BUILD_", "ACCELERATE_", "OMP_NUM_THREADS", "WORLD_SIZE", "LOCAL_RANK")


def relevant_env(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


def write_environment(output_dir: Path | str, info: "HardwareInfo", findings: list[Finding]) -> Path:
    """output_dir/environment.json: hardware, findings, versions and the environment variables that matter."""
    path = Path(output_dir) / "environment.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "hardware": info.to_dict(),
        "findings": findings_as_dicts(findings),
        "versions": {"python": platform.python_version(), **_package_versions()},
        "platform": platform.platform(),
        "env": relevant_env(),
    }
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def run_startup_checks(info, output_dir: Path, force: bool, write: bool, precision: Optional[str] = None) -> None:
    """The same checks `steadytune doctor` runs, then the cheap part of the numerical canary on the GPU in the run's
    precision; error-level findings and a wrong canary result stop the run unless --force."""
    findings = run_live_checks()
    if write:
        try:
            write_environment(output_dir, info, findings)
        except OSError as e:
            raise UserError(describe_os_error(e, f"output_dir {output_dir}")) from None
    if has_errors(findings):
        message = "start-up checks found errors:\n" + format_findings([f for f in findings if f.severity == "error"])
        if not force:
            raise UserError(message + "\nfix them (see `steadytune doctor`), or pass --force to train anyway")
        print(message + "\n--force given: training anyway", file=sys.stderr)
    stop_on_canary(startup_canary(precision or "fp32"), force)


def stop_on_canary(results: list[CanaryResult], force: bool) -> None:
    """One line and a stop when the GPU's arithmetic is wrong (a warning with --force)."""
    line = failed_line(results)
    if line is None:
        return
    if not force:
        raise UserError(line)
    print(f"warning: {line} (--force given: training anyway)", file=sys.stderr)
