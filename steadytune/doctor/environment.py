"""environment.json: what a training run records about the machine it ran on (hardware, doctor's findings,
package versions, the environment variables that matter), so a result can be traced to its setup."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional

from steadytune.doctor.findings import Finding, findings_as_dicts
from steadytune.doctor.probe import OPTIONAL_PACKAGES, package_version

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
