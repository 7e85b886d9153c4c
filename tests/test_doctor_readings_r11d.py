"""doctor, round 11 (issue 63): readings of the arch-missing and gpu-unsupported families for cards a tool's build or
floor leaves out, asked in words or shown by the tool's own messages. Each paste is written for its reading (another
GPU, tool, version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it
does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # flash-attn's build missing a Jetson's arch (another Orin, the error said by torch): the fix names the arch
    ("pip install flash-attn on a Jetson Orin NX went fine, then\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "arch-missing", ["sm_87", "FLASH_ATTN_CUDA_ARCHS=87"]),
    # Jetson Thor (sm_110) under a CUDA 12.8 torch whose arch list lacks it (another Thor wording, torch's own list)
    ("Jetson AGX Thor, JetPack 7.0: torch 2.8.0+cu128\n>>> torch.cuda.get_arch_list()\n['sm_80', 'sm_90', 'sm_100', "
     "'sm_120']\nRuntimeError: CUDA error: no kernel image is available for execution on the device", "arch-missing",
     ["cu130", "sm_110"]),
    # a Pascal card under a torch+cu128 said as a package (another card, no error line): the cu126 index
    ("pip now resolves torch+cu128 for the project and it doesn't support my GTX 1080 Ti anymore", "arch-missing",
     ["cu126"]),
    # text-embeddings-inference's image for another capability (an A10G, the router's own words)
    ("text-embeddings-router --model-id BAAI/bge-small-en-v1.5 on an A10G\nError: Could not create backend\nCaused by:\n"
     "    Could not start backend: Runtime compute cap 86 is not compatible with compile time compute cap 80",
     "arch-missing", ["86-<version>", "CUDA_COMPUTE_CAP=86"]),
    # a build asked for an AMD card, no tool named (another card and wording): a build with its target, TheRock's index
    ("Any chance of a build for the Radeon RX 7600?\nwould love to try it", "arch-missing",
     ["gfx1102", "AMDGPU_TARGETS", "gfx110X-all"]),
    # a tool with its own ROCm build asked to add a card by model number (koboldcpp, another card)
    ("koboldcpp: could you add the 7900xtx ?\nmy card is gfx1100", "arch-missing", ["koboldcpp-rocm", "gfx1100"]),
    # a build that states its targets crashing on a sibling card (whisper.cpp, another pair)
    ("whisper.cpp built with GPU_TARGETS=gfx1100\nggml_cuda_init: found 1 ROCm devices:\n  Device 0: AMD Radeon RX "
     "7800 XT, gfx1101\nSegmentation fault (core dumped)", "arch-missing", ["gfx1101", "GPU_TARGETS=gfx1101"]),
    # docker's GPU request on a machine with only an Intel GPU (another tool and card): no NVIDIA GPU to hand over
    ("docker run --rm --gpus all -p 7860:7860 sdnext\ndocker: Error response from daemon: could not select device driver "
     "\"\" with capabilities: [[gpu]].\nlaptop: Intel(R) Iris Xe Graphics, no other GPU", "gpu-unsupported",
     ["no NVIDIA GPU", "drop --gpus"]),
    # rocBLAS asked for an APU it ships no kernels for (another card of the arch): its build, and the stopgap with its cost
    ("[Feature request] Radeon 760M support in rocBLAS?\nrocBLAS ships no kernels for this APU. Could you add support "
     "for it?", "arch-missing", ["-DAMDGPU_TARGETS=gfx1103", "HSA_OVERRIDE_GFX_VERSION=11.0.0", "page faults"]),
    # a ROCm release's packaged library folder without the card's files (another card, hipBLASLt)
    ("ROCm 6.2 on a Radeon 760M\n$ ls /opt/rocm/lib/hipblaslt/library | grep 1103\nnothing: the gfx1103 files are missing",
     "gpu-unsupported", ["not supported by ROCm 6.2", "gfx1103"]),
    # torch's capability-range warning for a newer minor of the build's newest major (another GPU): a false alarm
    ("UserWarning:\n    Found GPU0 NVIDIA B300 SXM6 AC which is of cuda capability 10.3.\n    Minimum and Maximum cuda "
     "capability supported by this version of PyTorch is\n    (7.5) - (10.0)", "arch-missing",
     ["false alarm", "sm_100 kernels run on sm_103", "torch 2.11"]),
    # the same warning for a newer major: the build really lacks it
    ("Found GPU0 NVIDIA GeForce RTX 5080 which is of cuda capability 12.0.\nMinimum and Maximum cuda capability "
     "supported by this version of PyTorch is (5.0) - (9.0)", "arch-missing", ["cu128"]),
    # a kernel guarded for one exact arch on a sibling of its family (vLLM on a B300, sm_103)
    ("vllm serve on 8x B300: RuntimeError: This kernel only supports sm100.\nCUDA error: unspecified launch failure",
     "arch-missing", ["enable_sm100_family", "TORCH_CUDA_ARCH_LIST=10.3"]),
    # Ollama on Windows rejecting its iGPU with an empty supported list, the override tried (another iGPU, release)
    ("Ollama 0.11.4 on Windows 11, Ryzen 7 7700 iGPU; set HSA_OVERRIDE_GFX_VERSION=10.3.0, no change\n"
     "time=2025-08-01T10:00:00 level=WARN source=amd_windows.go:140 "
     "msg=\"amdgpu is not supported (supported types:[])\" gpu_type=gfx1036 gpu=0 library=C:\\Users\\me\\AppData"
     "\\Local\\Programs\\Ollama\\lib\\ollama\\rocm\ntime=2025-08-01T10:00:00 level=INFO msg=\"no compatible GPUs were "
     "discovered\"", "gpu-unsupported", ["Vulkan", "OLLAMA_VULKAN=1", "gfx1036"]),
    # a program's HIP "invalid" error on an arch its build left out (another card, wording)
    ("Our p2p copy benchmark fails on the MI350 (ROCm 7.0.1): HIP keeps reporting invalid handles", "arch-missing",
     ["GPU_TARGETS=gfx950", "roc-obj-ls"]),
    # an app offering only its failsafe mode on an old machine (another CPU and Fermi card)
    ("koboldcpp on an old Dell with a Xeon E5520 and a GTX 480: the launcher only lets me pick Failsafe, CuBLAS crashes",
     "gpu-unsupported", ["AVX", "compute capability 5.0"]),
    # Triton's floor asked about by capability, no card named (another wording, Maxwell)
    ("Does Triton work at all on compute capability 5.2? Please consider supporting Maxwell cards", "gpu-unsupported",
     ["7.0", "aot_eager"]),
    # macOS support asked for in a GPU tool's tracker, no tool named (another wording)
    ("Any plans for macOS support?\nI'd like to install this on my MacBook Air", "gpu-unsupported",
     ["macOS", "mps"]),
]

NEGATIVES = [
    # failsafe named among modes that all fail: not the CPU floor
    ("koboldcpp crashes in every mode, even failsafe, on my Ryzen 7 5800X", "has no AVX"),
    # torch's own HIP error: the torch readings, not a program's target list
    ("torch 2.7 on an MI300X: RuntimeError: HIP error: invalid argument", "roc-obj-ls"),
    # the list names the archs it has (a card outside it): the override / build readings, not "accepts none"
    ("Ollama on Windows\nlevel=WARN source=amd_windows.go:140 msg=\"amdgpu is not supported (supported types:[gfx1030 "
     "gfx1100])\" gpu_type=gfx1032 gpu=0", "accepts none of"),
    # a guard for another major (an Ada card under Hopper-only code): not the family guard
    ("vllm on an RTX 4090: This kernel only supports sm90", "enable_sm90_family"),
    # a newer major than the build's range is no false alarm
    ("Found GPU0 NVIDIA GeForce RTX 5080 which is of cuda capability 12.0.\nMinimum and Maximum cuda capability "
     "supported by this version of PyTorch is (5.0) - (9.0)", "false alarm"),
    # the same docker refusal on a machine with an NVIDIA card: the toolkit, not "no NVIDIA GPU"
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].\nGPU: RTX "
     "3060, driver 550", "no NVIDIA GPU"),
    # the card's files are in the library folder: nothing unsupported
    ("ROCm 6.2, RX 7900 XTX\n$ ls /opt/rocm/lib/rocblas/library | grep gfx1100 | wc -l\n212", "does not support"),
    # the card is among the build's targets: the crash is something else
    ("llama.cpp built with AMDGPU_TARGETS=gfx1100;gfx1101\nDevice 0: AMD Radeon RX 7800 XT, gfx1101\nSegmentation "
     "fault (core dumped)", "rebuild for gfx1101"),
    # a build asked for an NVIDIA card: no AMD index
    ("Possible build for the RTX 5090?", "rocm.nightlies.amd.com"),
    # an Orin (sm_87) under the same torch: its JetPack torch, not the CUDA 13 index
    ("Jetson AGX Orin, torch 2.8.0+cu128\nRuntimeError: CUDA error: no kernel image is available for execution on the "
     "device", "cu130"),
    # a Pascal card on the cu126 build, running: nothing lacks
    ("torch+cu126 runs fine on my GTX 1070, thanks!", "dropped sm_61"),
    # a card above Triton's floor, slow: not the floor reading
    ("Triton kernels on my RTX 3090 (compute capability 8.6) are slower than cuBLAS?", "below Triton's floor"),
    # a macOS build that fails with an error line: the error's reading, not "no macOS GPU"
    ("pip install on macOS 14 fails:\nerror: command '/usr/bin/clang' failed with exit code 1",
     "no macOS GPU support"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
