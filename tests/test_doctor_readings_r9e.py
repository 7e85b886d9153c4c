"""doctor, round 9 (issue 63): readings of the attention, gpu-unsupported and arch-missing families — flash-attn 1.x's
head-dim limit of the backward pass, a kernel's own compute-capability floor (vLLM's quantization methods,
flash-attn), SGLang's FlashInfer backend on a GPU FlashInfer lacks, TGI's sharding that needs flash attention, old
NVIDIA cards outside a tool's prebuilt binaries, Triton on pre-CDNA AMD GPUs, a GPU path a later release added — and
one the arch family wrongly took: XLA using an older toolkit's ptxas from PATH. Each paste is written for its reading (another GPU, tool or wording
than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # flash-attn 1.x's backward check quoted from a training run on an RTX 3090: head dim, flash-attn 2, the A100
    ("finetuning a GPT-NeoX model with flash_attn 0.2.8 on my RTX 3090\n  File \"flash_attn/flash_attn_interface.py\", "
     "line 44, in _flash_attn_backward\nRuntimeError: Expected is_sm80 || is_sm90 to be true, but got false.",
     "attention", ["head dim", "flash-attn 2", "A100"]),
    # the README's own line quoted with a question about an A10: the same reading, no error line
    ("Head dim > 64 backward requires A100 or H100. Does that mean I cannot train on the A10?", "attention",
     ["head dim", "flash-attn 2"]),
    # vLLM's quantization floor with another method and card (a T4 and Marlin's floor): the card and the need (fp8's
    # floor is the precision family's: a number format, tests/test_doctor_readings.py)
    ("vllm serve a GPTQ model with Marlin on a t4\nValueError: The quantization method gptq_marlin is not supported "
     "for the current GPU. Minimum capability: 80. Current capability: 75.", "gpu-unsupported", ["T4", "8.0", "7.5"]),
    # flash-attn's old capability message on a P100 (Kaggle): SDPA instead, the card named
    ("pip installed flash attention on kaggle P100, import works but the model says\nGPU with CUDA capability 6 0 is "
     "not supported", "gpu-unsupported", ["P100", "sdpa"]),
    # SGLang on an MI300X asking about FlashInfer in English: SGLang's triton attention backend
    ("Running sglang on MI300X with ROCm 6.2, do I need to pip install flashinfer or should I keep using triton?",
     "attention", ["--attention-backend triton", "--sampling-backend pytorch"]),
    # SGLang crashing in FlashInfer on a V100: the backend switch and FlashInfer's arch
    ("sglang 0.3.0 launch_server crashes inside flashinfer on my Tesla V100 (sm_70)", "attention",
     ["--attention-backend triton", "flashinfer"]),
    # TGI sharded on T4s: run unsharded, not a kernel build
    ("text-generation-launcher --model-id mistralai/Mistral-7B-v0.1 --num-shard 2 on 2x Tesla T4\n"
     "NotImplementedError: Sharded Mistral requires Flash Attention enabled models.", "attention",
     ["--num-shard", "unsharded"]),
    # a build guide titled with the card and its code name in brackets, a CMake target list naming another arch:
    # the tool's own build for the card, not an override left from another card
    ("[HIP] gfx1151 (Strix Halo) support - how I built llama.cpp\nROCm 6.4's CMake adds an invalid target gfx1152, "
     "set AMDGPU_TARGETS before cmake", "arch-missing", ["GGML_HIP=ON", "AMDGPU_TARGETS=gfx1151"]),
    # a Windows bundle (PyInstaller's temp folder) whose rocBLAS lacks the card's own Tensile file, said in words
    ("the extracted C:\\Users\\me\\AppData\\Local\\Temp\\_MEI1234 folder has no TensileLibrary_lazy_gfx1102.dat\n"
     "rocBLAS error: Cannot read C:\\Users\\me\\AppData\\Local\\Temp\\_MEI1234\\rocblas\\library\\"
     "TensileLibrary.dat: No such file or directory for GPU arch : gfx1102\nList of available TensileLibrary Files :",
     "arch-missing", ["rocblas", "gfx1102"]),
    # a thin question about a Kepler card and a current release (another card, English): PyTorch from source
    ("Will the latest PyTorch ever work on my Tesla K20 again?", "arch-missing",
     ["from source", "TORCH_CUDA_ARCH_LIST=3.5", "CUDA 11"]),
    # a release's floor stated in words, a Maxwell card below it: the tool's source build for that card
    ("The install page says compute capability 7.0 or higher is required. Any way to run it on a GTX 980 Ti?",
     "arch-missing", ["from source", "TORCH_CUDA_ARCH_LIST=5.2"]),
    # NCCL built from source on a Kepler GK104 card (another card, no CUDA version): NCCL's own NVCC_GENCODE
    ("Built NCCL with make on two GTX 680 cards, all_reduce_perf fails with unhandled cuda error right away",
     "arch-missing", ["NVCC_GENCODE", "compute_30"]),
    # GPT4All's CUDA device on a Maxwell 5.0 laptop card (another card): its build list, Vulkan meanwhile
    ("GPT4All 3.10 crashes as soon as I send a prompt with the CUDA device selected, GeForce GTX 950M", "arch-missing",
     ["5.0", "Vulkan"]),
    # Triton on a Radeon VII (gfx906) through torch.compile, an error this time: no Triton targets it
    ("torch.compile with the triton backend fails on my Radeon VII (gfx906), ROCm 6.2\n"
     "RuntimeError: Triton Error [HIP]: Code: 209, Messsage: no kernel image is available for execution on the device",
     "gpu-unsupported", ["gfx906", "sdpa", "TORCHDYNAMO_DISABLE=1"]),
    # LLM.int8 asked about on a Maxwell card by name (no Pascal, no bitsandbytes version): the release that added it
    ("Is load_in_8bit possible on a Tesla M40? The int8 matmul seems to need Turing", "arch-missing",
     ["bitsandbytes", "0.37.0"]),
    # XLA under TensorFlow on an H100 with an old toolkit's ptxas on PATH: the pip wheel's ptxas, PATH cleaned
    ("W external/local_xla/xla/stream_executor/gpu/asm_compiler.cc:225] Falling back to the CUDA driver for PTX "
     "compilation; ptxas does not support CC 9.0\nUsed ptxas at /usr/local/cuda-11.2/bin/ptxas\n"
     "E cuda_driver.cc:864] failed to load PTX text as a module: CUDA_ERROR_INVALID_IMAGE: device kernel image is "
     "invalid", "wheel-platform", ["nvidia-cuda-nvcc-cu12", "PATH", "CC 9.0"]),
    # an app's bundled HIP runtime crashing on an RX 7900 XTX while the system ROCm 6.4 works: the system's first
    ("Ollama's bundled ROCm runtime segfaults on start (libamdhip64.so.6 inside its lib folder), RX 7900 XTX.\n"
     "llama.cpp built against the system ROCm 6.4 in /opt/rocm-6.4.1 works fine on the same card", "wheel-platform",
     ["LD_LIBRARY_PATH=/opt/rocm-6.4.1/lib"]),
    # a CUDA nightly after which a working ComfyUI setup now fails: another nightly, from the build's own index
    ("ComfyUI was working fine with last week's build, now every image fails with CUBLAS_STATUS_EXECUTION_FAILED\n"
     "torch 2.8.0.dev20250412+cu128, RTX 5080", "torch-build", ["nightly/cu128", "newer nightly"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # flash-attn 2 refusing a Turing card is the Ampere floor, not the head-dim limit of flash-attn 1.x
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer. (RTX 2080 Ti)", "head dim"),
    # vLLM's AWQ on an Ampere card with another error: no capability floor to read
    ("vllm serve TheBloke/Llama-2-7B-AWQ --quantization awq on an A10G\ntorch.OutOfMemoryError: CUDA out of memory.",
     "Minimum capability"),
    # SGLang with FlashInfer on an H100 crashing for another reason: not the backend switch
    ("sglang with flashinfer on 8x H100: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "--attention-backend triton"),
    # TGI sharded on A100s without its kernels: the kernel build, not "run unsharded"
    ("text-generation-launcher --num-shard 4 on 4x A100\nNotImplementedError: Sharded Llama requires Flash Attention "
     "enabled models.", "unsharded"),
    # an empty Tensile list for a card every rocBLAS carries, no file named: the folder, not the arch
    ("rocBLAS error: Cannot read /opt/app/rocblas/library/TensileLibrary.dat: No such file or directory for GPU arch "
     ": gfx1100\nList of available TensileLibrary Files :", "HSA_OVERRIDE_GFX_VERSION"),
    # a card reported as another family's arch by the runtime (not in a build list): still the hidden override
    ("Radeon RX 7900 XTX\nrocminfo: Name: gfx1030\nHIP error: invalid device function", "AMDGPU_TARGETS"),
    # GPT4All crashing on a card its CUDA build carries (an RTX 3060): not the arch list
    ("GPT4All 3.10 crashes as soon as I send a prompt with the CUDA device selected, GeForce RTX 3060",
     "GGML_CUDA_ARCHITECTURES"),
    # a question about a card above the stated floor: no source build to suggest
    ("The docs say compute capability 7.0 or higher is required. Will it run on an RTX 3090?",
     "TORCH_CUDA_ARCH_LIST"),
    # Triton on an MI210 (CDNA2) failing: not the pre-CDNA reading
    ("triton kernels fail on MI210 (gfx90a) with ROCm 6.2: error: unsupported target", "no upgrade adds it"),
    # int8 on a Pascal card with a bitsandbytes that already has the path: not "update to 0.37.0"
    ("load_in_8bit on a P40 is slow, bitsandbytes==0.43.1, is that expected?", "0.37.0"),
    # int8 on an Ampere card: no older-GPU path to add
    ("load_in_8bit on an RTX 3090 gives garbage output", "0.37.0"),
    # an invalid kernel image with no ptxas said: not the PATH reading
    ("E cuda_driver.cc:864] failed to load PTX text as a module: CUDA_ERROR_INVALID_IMAGE: device kernel image is "
     "invalid", "which -a ptxas"),
    # a bundled runtime crashing with no word that the system ROCm works: not the bundled-runtime reading
    ("The bundled ROCm runtime segfaults on start, RX 7900 XTX, Ubuntu 24.04", "remove the bundled"),
    # a nightly with a failure but no word that it worked before: not the regression reading
    ("torch 2.8.0.dev20250412+cu128 on an RTX 5080: CUBLAS_STATUS_EXECUTION_FAILED on the first matmul",
     "newer nightly"),
    # a question about something else in GPT4All on a card below its CUDA build: no failure, no build to suggest
    ("GPT4All on my GTX 750 Ti: how do I change the model folder? It is on C: by default", "GGML_CUDA_ARCHITECTURES"),
    # int8 on a Pascal card that works, nothing asked: no release to name
    ("load_in_8bit on my P40 works great, 7B fits in 9 GB", "0.37.0"),
    # a Kepler card under torch with an error line of its own: the existing no-kernel reading, not this one's
    ("Tesla K80\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "lowering the capability check"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
