"""doctor, round 19 (r19a): readings for missed training cases of AMD / ROCm / Ollama / llama.cpp / TheRock / Strix
threads: a per-node HSA_OVERRIDE_GFX_VERSION_<node> for two cards of different families, an iGPU an app detected
beside the card (and llama.cpp's -sm none), xformers under ZLUDA, RDNA 3.5 APUs whose copies fault under a 6.17 kernel,
a torch nightly built on a broken ROCm nightly, Ollama's dropped ROCm archs and its Vulkan backend, AMD's per-arch torch
index for Strix APUs, the device wheel's empty xnack kernel packs, an Adrenalin release that breaks llama.cpp, and a
leftover override on Windows Ollama. Each paste is written for its reading (another GPU, tool, version or wording than
the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # an RX 7900 XTX beside an RX 6700 XT (gfx1031), the override set in the shell
    ("Arch Linux, ROCm 6.3.2, two cards: RX 7900 XTX and RX 6700 XT\nexport HSA_OVERRIDE_GFX_VERSION=10.3.0\nthe 6700 XT "
     "works now but the 7900 XTX crashes with Segmentation fault (core dumped) as soon as I use cuda:0",
     "override-wrong", ["HSA_OVERRIDE_GFX_VERSION_", "10.3.0", "rocminfo"]),
    # a web UI's launch lines naming an RX 7800 XT and a Raphael iGPU, then its error
    ("Launching ComfyUI...\n[INFO] GPU arch: gfx1101\n[INFO] AMD arch: gfx1036\n[ERROR] Flash attention kernels are "
     "unavailable for this device", "visibility", ["iGPU", "BIOS"]),
    # llama-server on an RX 7900 GRE with a Ryzen 7 7700's iGPU, crashing at load
    ("llama-server -m qwen2.5-14b-q4_k_m.gguf -ngl 99\nggml_cuda_init: found 2 ROCm devices:\n  Device 0: AMD Radeon "
     "RX 7900 GRE, gfx1100\n  Device 1: AMD Radeon Graphics, gfx1036 (integrated GPU)\nSegmentation fault (core dumped) "
     "while loading the model", "visibility", ["-sm none", "-mg"]),
    # the web UI through ZLUDA on an RX 6800 XT with --xformers
    ("stable-diffusion-webui-amdgpu with ZLUDA, RX 6800 XT (gfx1030), COMMANDLINE_ARGS=--use-zluda --xformers\n"
     "RuntimeError: CUDA error: named symbol not found\nCUDA kernel errors might be asynchronously reported",
     "attention", ["xformers", "--opt-sdp-attention"]),
    # a Strix Point laptop's torch copy faulting under Fedora's 6.17 kernel
    ("Ryzen AI 9 365 with Radeon 880M (gfx1150), Fedora 43, kernel 6.17.4-300.fc43.x86_64, ROCm 7.1.1\n"
     "x = torch.ones(4).to('cuda')\nMemory access fault by GPU node-1 (Agent handle: 0x55d1) on address 0x7f2a. Reason: "
     "Page not present or supervisor privilege.", "driver", ["1018-oem", "amdgpu-dkms"]),
    # a Strix Point box with a torch nightly of 20260610 crashing at import
    ("gfx1150 laptop, pip install --pre torch from rocm.nightlies.amd.com\ntorch 2.12.0a0+rocm7.14.0a20260610\n"
     "$ python -c 'import torch; torch.cuda.is_available()'\nSegmentation fault (core dumped)", "torch-build",
     ["20260608"]),
    # Ollama 0.13 on a Radeon VII in Docker, falling back to the CPU
    ("docker run --device /dev/kfd --device /dev/dri ollama/ollama:0.13.0-rocm\nRadeon VII (gfx906)\nmsg=\"failure "
     "during GPU discovery\" error=\"runner crashed\"\nmodels now run on the CPU", "gpu-unsupported",
     ["0.12.4", "Vulkan"]),
    # an RX 5700 XT (gfx1010) whose Ollama runner stopped starting after an update
    ("ollama on Ubuntu, RX 5700 XT, HSA_OVERRIDE none, rocm build\nworked on 0.11.10, after upgrading to 0.12.7 every "
     "model load ends with: error=\"timed out waiting for llama runner to start: context canceled\"",
     "gpu-unsupported", ["Vulkan", "OLLAMA_VULKAN=1"]),
    # a Strix Halo mini PC with torch from pytorch.org's rocm7.1 index, an app's installer falling back
    ("installer: AMD GPU gfx1151 (Radeon 8060S)\n[WARN] AMD wheel index not reachable, falling back to "
     "https://download.pytorch.org/whl/rocm7.1\ninstalled torch 2.10.0+rocm7.1", "wheel-platform",
     ["repo.amd.com/rocm/whl/gfx1151", "rocm7.13"]),
    # an MI300X with torch 2.12's device wheel and hipErrorInvalidImage
    ("pip install --index-url https://repo.amd.com/rocm/whl-multi-arch/ torch==2.12.0 amd-torch-device-gfx942==2.12.0\n"
     "MI300X (gfx942)\nRuntimeError: HIP error: hipErrorInvalidImage", "torch-build", ["kpack", "xnack"]),
    # koboldcpp on Windows with an RX 7800 XT after Adrenalin 26.5.2
    ("Windows 11, RX 7800 XT. Since Adrenalin 26.5.2 koboldcpp and LM Studio crash on startup, no error shown.",
     "driver", ["26.3.1"]),
    # Ollama on Windows with an RX 7900 XT it does not detect
    ("Windows 11, Ollama 0.12.3, RX 7900 XT (gfx1100)\nthe GPU is not detected, ollama ps shows 100% CPU",
     "override-wrong", ["HSA_OVERRIDE_GFX_VERSION"]),
]

NEGATIVES = [
    # one card, the override it needs: no per-node override
    ("Ubuntu 24.04, ROCm 6.2, RX 6600 (gfx1032)\nexport HSA_OVERRIDE_GFX_VERSION=10.3.0\nRuntimeError: HIP error: "
     "invalid device function", "HSA_OVERRIDE_GFX_VERSION_<node>"),
    # a discrete card alone, llama.cpp crashing: no -sm none
    ("llama-cli -m model.gguf -ngl 99\nggml_cuda_init: found 1 ROCm devices:\n  Device 0: AMD Radeon RX 7900 XTX, "
     "gfx1100\nSegmentation fault (core dumped)", "-sm none"),
    # ZLUDA with a rocBLAS error, no xformers: the library reading
    ("ZLUDA, RX 6700 XT (gfx1031), HIP SDK 6.2\nrocBLAS error: Cannot read C:\\Program Files\\AMD\\ROCm\\6.2\\bin\\"
     "rocblas\\library\\TensileLibrary.dat: No such file or directory for GPU arch : gfx1031", "xformers"),
    # a Strix Halo copy fault on a 6.18 kernel: not the 6.17 reading
    ("Radeon 8060S (gfx1151), kernel 6.18.2-arch1\nhipMemcpy fails: Memory access fault by GPU node-1 on address "
     "0x7f00. Reason: Page not present or supervisor privilege.", "1018-oem"),
    # a torch nightly from after the fix: no pin
    ("gfx1151, torch 2.13.0a0+rocm7.14.0a20260620\npython -c 'import torch; torch.cuda.is_available()'\nSegmentation "
     "fault (core dumped)", "20260608"),
    # Ollama on a card it still carries: no 0.12.4
    ("ollama 0.13.1, RX 7900 XTX (gfx1100)\nerror=\"runner crashed\"", "0.12.4"),
    # a Strix Halo on AMD's own index already: no index switch
    ("gfx1151, pip install --index-url https://repo.amd.com/rocm/whl/gfx1151/ torch\nRuntimeError: HIP error: "
     "out of memory", "download.pytorch.org"),
    # Linux, an older Adrenalin named in passing: no roll-back
    ("Ubuntu 24.04, RX 9070 XT, llama.cpp Vulkan build crashes: Segmentation fault (core dumped)", "26.3.1"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
