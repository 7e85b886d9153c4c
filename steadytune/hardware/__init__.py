"""What this machine is and the policy built on it: which backend and GPU architecture, which dtype, attention
kernel, memory budget and speed features a run gets, each with its reason. `doctor` reports these decisions and
`train` obeys them, so both read them here.

Modules: backend (the GPUs torch sees: HardwareInfo), gpu_facts (product, architecture and wheel tables, each row
with its source), archs (gfx targets, bf16 per architecture), policy (precision and attention choices),
attention_kernels (the variable-length attention kernels that run here), memory (activation estimates and gradient
checkpointing), speed (static shapes, compile, CUDA graphs, liger), rocm_profile (stability defaults on ROCm),
unified_memory (APUs: GTT vs carve-out), smi_parsers (rocm-smi, amd-smi, rocminfo, nvidia-smi outputs), gpu_ids (PCI
ids and VBIOS parts -> model, arch, memory, iGPU; gpu_ids.tsv from pci.ids), error_catalogue (error signatures from
real reports -> cause and fix; error_catalogue.yaml), layer_shapes (each decoder layer's heads and MLP width from a
config, Gemma 4's two head sizes included), pattern_file (the checked reader of error_catalogue.yaml and of
doctor/error_classes.yaml: named entries, each with a list of regular expressions), visibility (what the
*_VISIBLE_DEVICES masks leave).
Nothing here imports anything of steadytune but `errors` and `config`; torch is imported inside the functions that
need it, so `doctor --from` can read saved tool outputs where torch does not import.
"""
