"""doctor, round 12 (issue 63, r12s3): readings for three of round 11's spent held-out cases (pytorch#5125,
ollama-for-amd#35, ROCmLibs-for-gfx1103-AMD780M-APU#65). Each paste is written for its reading (another GPU, tool,
version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not
fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # capabilities a release says it dropped from its binaries, no card named (another release and capabilities):
    # PyTorch built from source for them, with a toolkit that still compiles them
    ("Does torch 2.8 drop compute capability 6.0 and 6.1? what can I do to keep training on these cards?",
     "arch-missing", ["from source", "TORCH_CUDA_ARCH_LIST=\"6.0;6.1\"", "CUDA 12.x"]),
    # the same as an issue title and a question, Kepler capabilities: a CUDA 11 toolkit
    ("remove cuda capability 3.5 and 3.7 from binaries\nour cluster still has those cards, how do we keep using them?",
     "arch-missing", ["from source", "TORCH_CUDA_ARCH_LIST=\"3.5;3.7\"", "CUDA 11.x"]),
    # a card named whose capability is on the dropped list (a K80 beside the same title)
    ("remove cuda capability 3.5 and 3.7 from binaries\nwe still run Tesla K80 nodes, how do we keep using them?",
     "arch-missing", ["from source", "3.7"]),

    # a ROCmLibs package asked for an RDNA3 card AMD's HIP SDK carries, under Ollama (another card, release, wording)
    ("Is there a ROCmLibs build for gfx1100? Ollama 0.9.2 on Windows 11 with my RX 7900 XTX keeps running on the CPU",
     "arch-missing", ["ollama-windows-amd64-rocm", "no ROCmLibs package"]),
    # the same for RDNA4 under ZLUDA and ComfyUI: the HIP SDK release that lists it
    ("ZLUDA + ComfyUI on Windows: which ROCmLibs do I need for my RX 9060 XT (gfx1200)? I can't find a package for "
     "it", "arch-missing", ["HIP SDK 6.4.2", "no ROCmLibs package"]),

    # Ollama on Windows finding no GPU on a Vega card (another card and release, the server's own words): HIP SDK
    # 5.7's rocBLAS for it
    ("Windows 10, RX Vega 64, ollama 0.6.2 never uses the GPU\nPS C:\\Users\\me> ollama serve\n"
     "time=2025-03-20T10:00:00.000+01:00 level=INFO source=gpu.go:217 msg=\"looking for compatible GPUs\"\n"
     "time=2025-03-20T10:00:01.000+01:00 level=INFO source=gpu.go:377 msg=\"no compatible GPUs were discovered\"",
     "arch-missing", ["rocblas.dll", "HIP SDK 5.7", "lib\\ollama"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # only a capability no PyTorch source build targets any more: the floor's reading, no source build
    ("pytorch: CUDA capability 3.0 is no longer supported, what can I do?", "TORCH_CUDA_ARCH_LIST"),
    # torch's own warning naming the card: not a list a release dropped
    ("UserWarning: Found GPU0 NVIDIA GeForce GTX 770 which is of cuda capability 3.0. PyTorch no longer supports this "
     "GPU because it is too old. The minimum cuda capability supported by this library is 3.7.",
     "no longer carry kernels for compute capability"),
    # a ROCmLibs package for an APU the HIP SDK leaves out: such packages are the answer there
    ("Where is the ROCmLibs package for gfx1103? Ollama on Windows 11 with a Radeon 780M keeps using the CPU",
     "no ROCmLibs package"),
    # a replaced rocblas.dll for an RDNA2 card the SDK lacks
    ("I replaced rocblas.dll with the ROCmLibs one for gfx1032 on Windows (RX 6600) and ollama now crashes with "
     "0xc0000005", "no ROCmLibs package"),
    # a Vega card under Ollama on Linux: no HIP SDK there
    ("Ubuntu 22.04, RX Vega 56, ollama 0.5.4 does not use the GPU\ntime=2024-12-20T09:09:12Z level=INFO "
     "source=gpu.go:377 msg=\"no compatible GPUs were discovered\"", "HIP SDK 5.7"),
    # an RDNA3 card under Ollama on Windows with no ROCmLibs asked: not the SDK-arch reading
    ("Windows 11, RX 7900 XTX, ollama 0.9.2 runs on the CPU\nPS C:\\Users\\me> ollama serve\n"
     "time=2025-06-01T10:00:01.000+01:00 level=INFO source=gpu.go:377 msg=\"no compatible GPUs were discovered\"",
     "no ROCmLibs package"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
