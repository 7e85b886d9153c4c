"""`steadytune doctor`: can this machine train, what will it use, and what must change.

Live mode inspects this machine: the torch build, the GPUs torch sees, visibility and override variables,
device files and groups, precision and attention choices, optional libraries, multi-GPU settings and the
caching allocator. Offline mode (`--from DIR`, `--rocm-smi F`, ...) reads saved tool outputs of another
machine. Both produce `Finding`s (error / warning / info, each with what, why and fix); any error gives exit
code 1, and `train` refuses to start on errors unless `--force`.

The facts behind each check, with sources, are in research/rocm.md; "row N" in a comment points to its
symptom table. The policy (which dtype, which attention) is not decided here: it comes from hardware.py,
the module `train` obeys, so doctor reports exactly what `train` will do.

Modules: findings (the Finding type and its output), probe (facts about this machine), checks, attention,
multi_gpu, deepspeed_ops, container and hardware_checks (the live checks), archs (what an AMD architecture gets, from the
tables in gpu_facts.py), plan (what train would choose on a machine), memory (APU unified memory), pci
(Resizable BAR), live (runs them all), offline (saved tool outputs), environment (environment.json) and cli
(the subcommand). No module imports torch at import time: a broken torch install (rocm.md row 9) must still get
a diagnosis instead of a traceback.
"""

from steadytune.doctor.attention import (FLASH_ATTN_CK_ARCHS, check_attention, diagnose_sdpa, diagnose_sdpa_memory,
                                         explain_flash_attn_failure, probe_sdpa, probe_sdpa_memory)
from steadytune.doctor.deepspeed_ops import build_and_load_ops, check_deepspeed
from steadytune.doctor.checks import (ALLOCATOR_OPTIONS, check_allocator, check_arch_coverage, check_build_env,
                                      check_device_files, check_devices, check_hsa_override, check_optional_libs,
                                      check_precision, check_torch_build, check_visibility, check_wsl, device_access)
from steadytune.doctor.cli import TOOL_FLAGS, add_arguments, run
from steadytune.doctor.environment import ENV_PREFIXES, relevant_env, write_environment
from steadytune.doctor.findings import SEVERITIES, Finding, format_findings, has_errors, sort_findings
from steadytune.doctor.live import LIVE_CHECKS, explain_torch_import_error, run_checks, run_live_checks
from steadytune.doctor.archs import arch_findings
from steadytune.doctor.container import check_container
from steadytune.doctor.hardware_checks import check_archs, check_rebar, check_train_plan, check_unified_memory
from steadytune.doctor.multi_gpu import check_allreduce, check_multi_gpu, run_allreduce_check
from steadytune.doctor.plan import train_plan_findings
from steadytune.doctor.offline import diagnose_gpus, read_saved_outputs, run_offline_checks
from steadytune.doctor.probe import OPTIONAL_PACKAGES, Probe, collect_probe

__all__ = [
    "ALLOCATOR_OPTIONS", "ENV_PREFIXES", "arch_findings", "build_and_load_ops", "check_deepspeed",
    "diagnose_sdpa_memory", "probe_sdpa_memory", "check_allreduce", "check_archs", "check_container",
    "check_rebar", "check_train_plan", "check_unified_memory", "train_plan_findings", "FLASH_ATTN_CK_ARCHS", "LIVE_CHECKS", "OPTIONAL_PACKAGES", "SEVERITIES",
    "TOOL_FLAGS", "Finding", "Probe", "add_arguments", "check_allocator", "check_arch_coverage", "check_attention",
    "check_build_env", "check_device_files", "check_devices", "check_hsa_override", "check_multi_gpu",
    "check_optional_libs", "check_precision", "check_torch_build", "check_visibility", "check_wsl", "collect_probe",
    "device_access", "diagnose_gpus", "diagnose_sdpa", "explain_flash_attn_failure", "explain_torch_import_error",
    "format_findings", "has_errors", "probe_sdpa", "read_saved_outputs", "relevant_env", "run",
    "run_allreduce_check", "run_checks", "run_live_checks", "run_offline_checks", "sort_findings",
    "write_environment",
]
