"""`steadytune doctor`: can this machine train, what will it use, and what must change.

Live mode inspects this machine: the torch build, the GPUs torch sees, visibility and override variables,
device files and groups, precision and attention choices, optional libraries, multi-GPU settings and the
caching allocator. Offline mode (`--from DIR`, `--rocm-smi F`, ...) reads saved tool outputs of another
machine. Both produce `Finding`s (error / warning / info, each with what, why and fix); any error gives exit
code 1, and `train` refuses to start on errors unless `--force`.

The facts behind each check, with sources, are in research/rocm.md; "row N" in a comment points to its
symptom table. The policy (which dtype, which attention, memory, speed) is not decided here: it comes from
hardware/, which `train` obeys, so doctor reports exactly what `train` will do.

Modules: findings (the Finding type and its output), probe (facts about this machine), checks, attention,
multi_gpu, deepspeed_ops, container and hardware_checks (the live checks), archs (what an AMD architecture gets, from the
tables in hardware/gpu_facts.py), plan (what train would choose on a machine), memory (APU unified memory), pci
(Resizable BAR), live (runs them all), offline (saved outputs, pasted text and run folders, with the error catalogue of
hardware/), paste (a paste cut into pieces: console sessions, sysfs/procfs reads), environment (environment.json, and the
checks `train` runs at start) and command (the subcommand). Round 5 reads any text by its facts: facts (each with its
line), error_lines (every error line and its cause family), rules (a cause per family from the facts), fixes (worded
with the machine's values), diagnose (the three over one text), cases (the mined public cases and their score) and
canary (the GPU's arithmetic against the CPU). No module imports torch at import time: a broken torch
install (rocm.md row 9) must still get a diagnosis instead of a traceback.
"""
