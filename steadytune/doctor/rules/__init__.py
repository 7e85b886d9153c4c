"""Rules over facts, not over wording, one module per cause family: each rule reads the facts of a paste (facts.py)
and its classed error lines (error_lines.py) and, where they establish a cause, returns a `Diagnosis` whose fix
carries the machine's own values (fixes.py). A rule that cannot settle its family returns None and leaves the lines
to another rule or to the "unrecognised error" finding.

  base       the Diagnosis, the Context a rule reads, the registry and the helpers the families share
  variables  a variable set where the process does not start
  arch/      code for this GPU's arch: overrides (a wrong or hidden override), arch_missing (missing from a build),
             nccl (NCCL older than the GPU), gpu_unsupported (a GPU outside every build), target_lists (source builds'
             and SDKs' targets, registered last); cuda_builds and old_gcn hold what they share
  access/    reaching the GPU: device_files (device files and groups), wsl (WSL 2), driver (the driver itself),
             driver_mismatches (the driver against the CUDA, kernel or container it serves, registered last)
  install/   what was installed, one module per reading: torch_build (the torch build for another vendor or
             none), wheels (another Python or platform), abi (extensions built for another torch), libraries_missing
             (ROCm, CUDA and system libraries not found), programs (one program's own words, registered last)
  libraries  the shared libraries a GPU package loads: cuDNN/cuBLAS majors, shadowed or unversioned libraries, DLLs
  releases   what package managers say about releases: clashing distribution packages, renames, unpublished pins
  machine/   the machine, one module per reading: visibility (which GPUs a process sees), apu_memory, platform
             (BIOS, PCIe), xgmi_bridge (a bridge failing the GPUs' start-up), multi_gpu (several GPUs' transports)
  collectives  several GPUs read from what NCCL leaves unsaid (asked by machine/multi_gpu's rule)
  runtime/   the running job, one module per reading: out_of_memory (and host_memory, no rules), miopen,
             gpu_hang, precision (number formats), attention (attention kernels); shared holds what they share
  prose      what users say in words with no error line: titles, complaints, the settings they list
  runner     every rule over one paste, best first

Order: every rule runs; the diagnoses are sorted so that one the facts confirm comes before a likely one, and a root
cause (the variable that never reached the service) before its symptom (the GPU that was not found).
"""

# the public face stays `steadytune.doctor.rules` (diagnose.py and the tests import from here); names are defined in
# base and runner, this file only re-exports them
from steadytune.doctor.rules.base import Context, Diagnosis, RULES  # noqa: F401
from steadytune.doctor.rules.runner import run_rules  # noqa: F401
