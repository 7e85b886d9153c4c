"""doctor, round 10 (issue 63): readings of the gpu-unsupported and arch-missing families for NVIDIA cards under a
tool's compute-capability floor (tool x oldest capability: Ollama 5.0, LMDeploy 7.0, CTranslate2 3.5, PyTorch 3.5),
a release that raised its floor for a while (Ollama 0.1.19-0.1.21), a Kepler card beside a supported one, and old GCN
cards named in a support request. Each paste is written for its reading (another GPU, tool and wording than the mined
case); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.facts import extract_facts
from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a Kepler card under Ollama's floor, the GPU left idle in the user's words
    ("ollama 0.6.2 on Debian 12 ignores my Tesla K40 and runs everything on the CPU", "gpu-unsupported",
     ["3.5", "5.0", "Ollama"]),
    # a Pascal card under LMDeploy's Volta floor, asked as a question
    ("Can lmdeploy serve qwen2-7b on a GTX 1080 Ti? turbomind won't start", "gpu-unsupported", ["7.0", "6.1", "V100"]),
    # a Fermi-era GeForce (compute capability 1.2) under torch: no current build, the CPU
    ("torch.cuda.is_available() returns False\nGPU 0: GeForce GT 240\nPyTorch version: 1.4.0", "gpu-unsupported",
     ["compute capability 1.2", "cpu"]),
    # a CTranslate2 user on a Kepler 3.0 card
    ("faster-whisper with device='cuda' does not work on my GTX 680, it falls back to cpu", "gpu-unsupported",
     ["3.0", "3.5", "device=\"cpu\""]),
    # Ollama 0.1.20 on a Maxwell card said by its own log line: the release after the raised floor
    ("ollama 0.1.20 in docker\ngpu.go:138: CUDA GPU is too old. Falling back to CPU mode. Compute Capability detected: "
     "5.0\nmy Quadro K2200 used to work", "arch-missing", ["0.1.22", "6.0"]),
    # no tool named: a Kepler card beside a Pascal one and the GPU unused: hide the old card
    ("Server with a Tesla P4 and a Tesla K80, the model never runs on gpu", "gpu-unsupported",
     ["CUDA_VISIBLE_DEVICES", "compute capability 3.7"]),
    # a GCN 1 card named by its chip in a feature request: no ROCm release, GFX6
    ("[Feature]: please support Hainan LE [Radeon HD 8530M] in ROCm", "gpu-unsupported", ["GFX6", "Vulkan"]),
    # whisperX on Apple Silicon asked for CUDA: CTranslate2 has no GPU path there, its CPU mode
    ("whisperx audio.mp3 --device cuda\nValueError: This CTranslate2 package was not compiled with CUDA support\n"
     "running on an M2 Max", "gpu-unsupported", ["device=\"cpu\"", "NVIDIA"]),
    # ... and on an AMD card, where CTranslate2 has published ROCm builds since 4.7.1: that build
    ("is there a way to run faster-whisper on the gpu with my Radeon RX 7800 XT?", "torch-build",
     ["4.7.1", "ROCm"]),
    # an MLC model library compiled on one card, run on a Hopper one: compile it for that GPU
    ("mlc_chat on an H100: CUDA_ERROR_NO_BINARY_FOR_GPU\nthe model lib was built with mlc_llm on my RTX 4090 box",
     "arch-missing", ["compile the model library", "sm_90"]),
    # flash-attn's rotary extension without kernels on a Hopper card: its Triton op
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n  File \"csrc/rotary/"
     "rotary.py\", line 12\nGPU: H100", "arch-missing", ["flash_attn.ops.triton.rotary"]),
    # a gfx macro missing from a tool's source list, another arch and tool
    ("ollama: the HIP code tests defined(__gfx1151__) for RDNA3.5 but my 8060S APU is gfx1151 and takes the slow "
     "path; gfx1150 is not listed either", "arch-missing", ["gfx1151", "defined(__gfx1151__)"]),
    # a CUDA kernel error on a Blackwell card, no torch version shown: the cu128 build
    ("ComfyUI on an RTX 5080: torch.AcceleratorError: CUDA error\nCUDA kernel errors might be asynchronously reported "
     "at some other API call, so the stacktrace below might be incorrect.", "arch-missing", ["cu128", "sm_120"]),
    # Ollama seeing a capability of 1.x for a card the user knows is newer, on Windows: PhysX's old cudart on PATH
    ("ollama 0.1.32 on Windows 11 with an RTX 2060\nmsg=\"CUDA GPU is too old. Compute Capability detected: 1.0\"",
     "rocm-libs-missing", ["PhysX", "PATH"]),
    # ... and on Linux: the old libcudart on LD_LIBRARY_PATH
    ("Ubuntu 22.04, Tesla T4: the server says compute capability 1.0 and falls back to cpu", "rocm-libs-missing",
     ["LD_LIBRARY_PATH"]),
    # a Vega M named as such, asked about under ROCm: never on the list
    ("Radeon RX Vega M GH on my NUC: does ROCm support it? rocminfo fails", "gpu-unsupported", ["Vega M"]),
    # a GFX9 name no compiler has, asked for in English
    ("could someone compile rocBLAS for gfx905? I only find gfx904 and gfx906 libraries", "gpu-unsupported",
     ["gfx905", "Vulkan"]),
    # the targets under one CMake name, the build's program failing: both names
    ("cmake -B build -DGGML_HIP=ON -DGPU_TARGETS=$ARCH\nthe binary crashes at the first matmul with GPU_TARGETS "
     "set, it fails every time", "arch-missing", ["-DAMDGPU_TARGETS=", "-DGPU_TARGETS="]),
    # NCCL's unhandled CUDA error in torchrun across Blackwell cards: the cu128 torch first
    ("torchrun --nproc_per_node 2 train.py on 2x RTX PRO 6000\ntorch.distributed.DistBackendError: NCCL error: "
     "unhandled cuda error", "arch-missing", ["cu128", "NCCL"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a card at Ollama's floor and a release outside the raised window: no floor reading
    ("ollama 0.5.7 does not use my GTX 970, it runs on the CPU", "below Ollama's floor"),
    # ... and the same card under 0.1.25: not "upgrade to 0.1.22"
    ("ollama 0.1.25 does not use my GTX 970, it runs on the CPU", "upgrade Ollama to 0.1.22"),
    # a V100 under LMDeploy is supported: no floor
    ("lmdeploy serve api_server on a V100 fails with out of memory", "LMDeploy's floor"),
    # two supported cards, no tool named: nothing to hide
    ("Server with a Tesla P40 and an RTX 3090, the model never runs on gpu", "CUDA_VISIBLE_DEVICES=<the"),
    # a Kepler card that works, no trouble said: no reading about it
    ("ollama 0.5.1 runs llama3 on my Tesla K80 at 12 tokens/s, nice", "below Ollama's floor"),
    # CTranslate2 on an NVIDIA card: not the "no GPU path" reading
    ("faster-whisper on my RTX 3060: This CTranslate2 package was not compiled with CUDA support", "cannot use"),
    # a kernel error on a Blackwell card under a torch that carries it: not "install the cu128 build"
    ("torch 2.8.0+cu128 on an RTX 5090\nCUDA kernel errors might be asynchronously reported at some other API call",
     "install a torch built with CUDA 12.8"),
    # a layer-norm error without a missing kernel: not the Triton-op reading
    ("dropout_layer_norm: RuntimeError: expected scalar type Half but found Float", "flash_attn.ops.triton"),
    # a gfx arch said plainly, no source list: not the arch-list reading
    ("my gfx1151 runs llama.cpp fine with the Vulkan backend", "defined(__gfx"),
    # a capability of 1.x with no newer card or number said: not the runtime-on-PATH reading
    ("my GeForce 8800 GTX reports compute capability 1.0", "PhysX"),
    # a real GFX9 target asked about: not "no compiler targets it"
    ("could someone compile rocBLAS for gfx909?", "no compiler targets it"),
    # a target variable named for a build that works: nothing to fix
    ("built with -DGPU_TARGETS=gfx1100 and it runs great", "under both names"),
    # a Radeon 740M (an AMD iGPU) is not a GT 740M
    ("ollama does not use my Radeon 740M iGPU", "compute capability 3.0"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)


@pytest.mark.parametrize("line,model,arch", [("GPU 0: GeForce 210", "GeForce 210", "sm_12"),
                                             ("NVIDIA GeForce GT 740M | 3.0", "GeForce GT 740M", "sm_30"),
                                             ("Sun XT [Radeon HD 8670A/8670M/8690M]", "Sun XT", "gfx602")])
def test_old_cards_are_read_with_their_arch(line, model, arch):
    gpus = [(f.value, f.detail) for f in extract_facts(line, lambda _lines: []).of("gpu")]
    assert any(model in value and detail == arch for value, detail in gpus), gpus
