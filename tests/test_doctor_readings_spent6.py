"""doctor, round 6's spent held-out cases (issue 63): the readings their misses showed doctor lacked, each as a class of
evidence. Every paste here is written for the reading (another GPU, tool, wording or value than the case); the
negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.facts import extract_facts

# (paste, family, phrases the first diagnosis's fix must say)
READINGS = [
    # a GeForce generation said as a whole is a GPU of that generation: Blackwell's code is in the cu128 build
    ("ComfyUI does not work on RTX 50-series GPUs\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device", "arch-missing", ["cu128"]),
    # a zero loss said in Chinese, with fp16 on the command line
    ("qwen2-7b lora 微调，loss 全是 0\nllamafactory-cli train --stage sft --finetuning_type lora --fp16 true",
     "precision", ["bf16"]),
    # vLLM 0.1-0.2's kernels are top-level modules of its own: the undefined symbol is vLLM's
    ("attention_ops.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "abi-mismatch",
     ["vllm"]),
    # a tool naming the card by the iGPU's target: the integrated GPU is first
    ("Windows 11, HIP SDK 6.2: amdgpu-arch prints gfx1036\nGPUs: AMD Radeon(TM) Graphics, AMD Radeon RX 7900 XTX\n"
     "the 7900 XTX is detected as gfx1036 and nothing is working", "visibility", ["integrated", "HIP_VISIBLE_DEVICES"]),
    # triton on a Mac: its wheels are Linux-only
    ("pip install triton on my M2 Mac (macOS 14)\nERROR: No matching distribution found for triton", "wheel-platform",
     ["Linux"]),
    # an error said as an aside is not the report
    ("RuntimeError: HIP error: invalid device function (RX 6700 XT, ROCm 6.2)\n"
     "btw I also get ModuleNotFoundError: No module named 'xformers'", "arch-missing", ["HSA_OVERRIDE_GFX_VERSION"]),
    # terse complaints: "don't work", "gpu no use"
    ("Radeon 780M gfx1103 don't work\nollama 0.6.2 on windows 11, gpu no use", "arch-missing", ["rocblas"]),
    # a mainline kernel (six-digit ABI) that a DKMS driver does not build for
    ("sudo apt install nvidia-dkms-535 on Ubuntu 22.04\n"
     "Error! Bad return status for module build on kernel: 6.5.0-060500-generic (x86_64)", "driver",
     ["mainline", "linux-generic-hwe-22.04"]),
    # NCCL's own allocation failing: its buffers
    ("node1:123:456 [2] NCCL WARN Cuda failure 'out of memory'\ntorchrun --nproc_per_node 8 train.py (8x A100)",
     "out-of-memory", ["NCCL_BUFFSIZE"]),
    # a program's CPU fallback on an NVIDIA machine with no driver error: a CPU-only torch
    ("my card is a 4070ti, ComfyUI portable on Windows\nWarning: no CUDA device detected, falling back to CPU",
     "torch-build", ["torch", "download.pytorch.org/whl/cu"]),
    # a data-centre card under WSL 2: TCC mode
    ("WSL2 Ubuntu 22.04, GPU: NVIDIA A100 80GB\nnvidia-smi inside WSL does not work, cannot use the GPU", "wsl",
     ["WDDM"]),
    # cuDNN's convolution library not loading under WSL: the driver's libcuda
    ("whisperx on WSL 2 (Ubuntu 24.04)\nCould not load library libcudnn_cnn_infer.so.8", "wsl", ["/usr/lib/wsl/lib"]),
    # bitsandbytes on Windows for code written before 0.43
    ("Windows 10, sd-scripts\nModuleNotFoundError: No module named 'bitsandbytes.cuda_setup.main'", "wheel-platform",
     ["bitsandbytes-windows"]),
    # a ROCm library the user built from source without the GPU's target
    ("I rebuilt hiprand with makepkg last week\nRX 6600 (gfx1032)\n"
     "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!", "arch-missing",
     ["hiprand", "AMDGPU_TARGETS=gfx1032"]),
    # podman older than 5 with unresolvable CDI devices: it cannot read the toolkit's spec
    ("podman version 4.3.1\n$ podman run --device nvidia.com/gpu=all ubuntu nvidia-smi\n"
     "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all", "wheel-platform", ["podman 5"]),
]


@pytest.mark.parametrize("paste,family,phrases", READINGS, ids=[f"{r[1]}-{i}" for i, r in enumerate(READINGS)])
def test_the_reading_names_the_cause_and_fix(paste, family, phrases):
    top = diagnose_text(paste).top
    assert top is not None, "no diagnosis"
    assert top.family == family, f"{top.family}: {top.fix}"
    assert all(p.lower() in top.fix.lower() for p in phrases), top.fix


# (paste, a family and phrase the first diagnosis must NOT give together)
NEGATIVES = [
    # a stock kernel with the same DKMS failure is not a mainline one
    ("sudo apt install nvidia-dkms-535 on Ubuntu 22.04\n"
     "Error! Bad return status for module build on kernel: 6.5.0-27-generic (x86_64)", "driver", "mainline"),
    # the model's own out-of-memory with NCCL logging on is not NCCL's buffers
    ("NCCL_DEBUG=INFO torchrun --nproc_per_node 2 train.py\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory", "NCCL_BUFFSIZE"),
    # a CPU fallback where the driver is down is the driver's
    ("RTX 3080, Ubuntu 22.04\nWarning: no GPU has been detected. Falling back to CPU mode.\n"
     "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", "torch-build", "CPU-only"),
    # a GeForce card under WSL is in WDDM already
    ("WSL2 Ubuntu 22.04, GPU: RTX 4090\nnvidia-smi inside WSL does not work, cannot use the GPU", "wsl", "WDDM"),
    # the same cuDNN failure on a native Linux is no WSL reading
    ("whisperx on Ubuntu 24.04\nCould not load library libcudnn_cnn_infer.so.8", "wsl", "/usr/lib/wsl/lib"),
    # the old bitsandbytes module on Linux: no Windows fork
    ("Ubuntu 22.04, sd-scripts\nModuleNotFoundError: No module named 'bitsandbytes.cuda_setup.main'", "wheel-platform",
     "bitsandbytes-windows"),
    # torch built from source while the error names a library: that library's kernels, not a rebuild of it
    ("gfx908 after building torch from source against rocm 6.2.2\n"
     "RuntimeError: Attempting to use hipBLASLt on a unsupported architecture!", "arch-missing", "rebuild hipblaslt"),
    # a podman that reads the newer spec versions
    ("podman version 5.2.0\nError: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all",
     "wheel-platform", "podman 5"),
    # a single card said with its own target is not an iGPU in the way
    ("rocminfo shows my RX 7900 XTX as gfx1100 and nothing else, torch works", "visibility", "integrated"),
    # a NaN-free loss that is not 0
    ("loss 全是 0.5 不下降\nllamafactory-cli train --fp16 true", "precision", "bf16"),
]


@pytest.mark.parametrize("paste,family,phrase", NEGATIVES, ids=[f"not-{n[1]}-{i}" for i, n in enumerate(NEGATIVES)])
def test_the_reading_stays_out_of_a_paste_it_does_not_fit(paste, family, phrase):
    top = diagnose_text(paste).top
    assert top is None or not (top.family == family and phrase.lower() in top.fix.lower()), top.fix


@pytest.mark.parametrize("line,name,arch", [
    ("I have a 2080ti and the web UI runs on it", "RTX 2080 Ti", "sm_75"),
    ("Not working with 40 series cards yet", "GeForce RTX 40 series", "sm_89"),
    ("does it run on RTX 50xx?", "GeForce RTX 50 series", "sm_120"),
])
def test_a_geforce_said_in_prose_is_a_gpu_of_its_generation(line, name, arch):
    gpus = extract_facts(line).of("gpu")
    assert [(g.value, g.detail) for g in gpus] == [(name, arch)]


@pytest.mark.parametrize("line", ["we ran 50 series of experiments on the cluster", "the model has 3080 tiles"])
def test_numbers_that_are_no_geforce_stay_out_of_the_gpu_facts(line):
    assert not extract_facts(line).of("gpu")


def test_an_aside_is_still_read_when_it_is_the_only_error():
    top = diagnose_text("btw I get ModuleNotFoundError: No module named 'xformers' on Windows").top
    assert top is not None and top.family == "wheel-platform"
