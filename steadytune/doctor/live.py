"""Live mode: take one probe of this machine and run every live check on it. Never raises: a torch that does
not import becomes a finding (row 9), and a check that crashes becomes a warning instead of hiding the rest."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Mapping, Optional

from steadytune.doctor.attention import check_attention, check_attention_bench
from steadytune.doctor.checks import (
    check_allocator,
    check_arch_coverage,
    check_build_env,
    check_device_files,
    check_devices,
    check_hsa_override,
    check_optional_libs,
    check_precision,
    check_torch_build,
    check_visibility,
    check_wsl,
)
from steadytune.doctor.container import check_container
from steadytune.doctor.deepspeed_ops import build_and_load_ops, check_deepspeed
from steadytune.doctor.findings import Finding
from steadytune.doctor.hardware_checks import check_archs, check_rebar, check_train_plan, check_unified_memory
from steadytune.doctor.multi_gpu import check_allreduce, check_multi_gpu, rccl_retry_settings
from steadytune.doctor.nodes import check_nodes
from steadytune.doctor.packages import check_packages
from steadytune.doctor.probe import Probe, collect_probe, package_version
from steadytune.hardware.rccl import rocm_tuple

LIVE_CHECKS: tuple[Callable[[Probe], list[Finding]], ...] = (
    check_torch_build, check_devices, check_visibility, check_hsa_override, check_build_env, check_device_files,
    check_arch_coverage, check_archs, check_precision, check_attention, check_train_plan, check_unified_memory,
    check_rebar, check_container, check_optional_libs, check_packages, check_deepspeed, check_multi_gpu, check_allocator,
    check_wsl,
)


def explain_torch_import_error(error: BaseException) -> Finding:
    """Row 9: torch itself does not import (a ROCm wheel for another ROCm major, missing HIP libraries)."""
    message = f"{type(error).__name__}: {error}"
    library = re.search(r"(lib(?:amdhip64|hsa-runtime64|rocblas|MIOpen|hipblas\w*)\.so[\w.]*)", message)
    if library:
        return Finding.error("torch-build", f"torch does not import: {message}",
                             f"{library.group(1)} is missing: the torch package was built for another ROCm version than the one installed",
                             "install the torch wheel matching your ROCm (pip install torch --index-url "
                             "https://download.pytorch.org/whl/rocmX.Y), or one that bundles the ROCm libraries")
    return Finding.error("torch-build", f"torch does not import: {message}", fix="pip install torch (the wheel for your platform)")


def diagnose_this_machine(env: Optional[Mapping[str, str]] = None, dev_root: Path | str = "/dev",
                          sys_root: Path | str = "/sys", proc_root: Path | str = "/proc", run_kernels: bool = True,
                          run_tools: bool = True, allreduce: bool = False,
                          root: Path | str = "/", deepspeed_ops: bool = False,
                          attention_bench: bool = False,
                          nodes: Optional[str] = None) -> tuple[Optional[Probe], list[Finding]]:
    """-> (the probe, all live findings); the probe is None when torch is missing or broken. Never raises. `nodes`
    ("" or HOST:PORT): also the multi-node checks (doctor/nodes.py), which need no torch."""
    node_findings = check_nodes(os.environ if env is None else env, nodes or None, sys_root) if nodes is not None else []
    try:
        probe = collect_probe(env, dev_root, sys_root, proc_root, run_kernels=run_kernels, run_tools=run_tools,
                              root=root)
    except Exception as e:   # torch missing or broken
        return None, [explain_torch_import_error(e)] + node_findings
    return probe, run_checks(probe, allreduce, deepspeed_ops, attention_bench) + node_findings


def run_live_checks(env: Optional[Mapping[str, str]] = None, dev_root: Path | str = "/dev", sys_root: Path | str = "/sys",
                    proc_root: Path | str = "/proc", run_kernels: bool = True, run_tools: bool = True,
                    allreduce: bool = False, root: Path | str = "/") -> list[Finding]:
    """All live checks on this machine. Fast (no multi-GPU launch unless allreduce=True); never raises."""
    return diagnose_this_machine(env, dev_root, sys_root, proc_root, run_kernels, run_tools, allreduce, root)[1]


def run_checks(probe: Probe, allreduce: bool = False, deepspeed_ops: bool = False,
               attention_bench: bool = False) -> list[Finding]:
    findings: list[Finding] = []
    for check in LIVE_CHECKS:
        try:
            findings += check(probe)
        except Exception as e:  # one broken check must not hide the others
            findings.append(Finding.warn(check.__name__.removeprefix("check_").replace("_", "-"),
                                         f"this check failed to run: {type(e).__name__}: {e}"))
    gpus = [g for g in probe.info.gpus if not g.integrated]
    if deepspeed_ops:
        findings += (build_and_load_ops(probe) if package_version("deepspeed") else
                     [Finding.info("deepspeed", "--deepspeed-ops: deepspeed is not installed; skipped")])
    if attention_bench:
        findings += check_attention_bench(probe)
    if allreduce:
        settings = rccl_retry_settings([g.arch for g in gpus], probe.rccl_version, rocm_tuple(probe.hip_version))
        findings += (check_allreduce(len(gpus), env=probe.env, settings=settings) if len(gpus) >= 2 else
                     [Finding.info("multi-gpu", "--allreduce needs at least 2 visible GPUs; skipped")])
    return findings
