"""doctor, round 17 (t17d): the situations the fine-tuning and kernel libraries list on their own troubleshooting, FAQ
and install pages (bitsandbytes, flash-attention, DeepSpeed, accelerate, transformers, PEFT, Unsloth, LLaMA-Factory,
xformers, Triton; /work/notes/t17d_situations.md lists them with their pages). Each paste is written in another wording,
card or release than the probe that found the situation; the negatives keep each new reading out of pastes it does not
fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # bitsandbytes CPU-only because torch is the CPU build (NVIDIA; then AMD)
    ("Fedora 40 with an RTX 4070 Ti\ntorch==2.5.1+cpu\nbitsandbytes is running as CPU-only, 8-bit optimizers are not "
     "available", "torch-build", ["pip uninstall -y torch", "whl/cu128", "python -m bitsandbytes"]),
    ("Radeon RX 7800 XT, Ubuntu 24.04\ntorch 2.6.0+cpu\nThe installed version of bitsandbytes was compiled without GPU "
     "support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable.", "torch-build",
     ["whl/rocm"]),
    # bitsandbytes on ROCm from PyPI, an old Windows release, the old runtime search
    ("MI210, ROCm 6.1, torch 2.4.1+rocm6.1\npip install bitsandbytes\nCould not find the bitsandbytes ROCm binary at "
     "PosixPath('/opt/venv/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_rocm61.so')", "wheel-platform",
     ["bitsandbytes"]),
    ("Windows 10, RTX 3080, bitsandbytes 0.38.1\nCUDA SETUP: Required library version not found: "
     "libbitsandbytes_cuda118.dll", "wheel-platform", ["pip install -U bitsandbytes"]),
    ("V100 under a conda env, bitsandbytes 0.40.2\nCUDA_SETUP: WARNING! libcudart.so not found in any environmental "
     "path. Searching in backup paths...\nCUDA SETUP: Problem: The main issue seems to be that the main CUDA runtime "
     "library was not detected.", "rocm-libs-missing", ["LD_LIBRARY_PATH"]),
    # flash-attn: no ninja, memory, Turing, ABI, CUDA_HOME
    ("H100 box, CUDA 12.6, torch 2.6.0\nBuilding wheel for flash_attn (setup.py) ... it has been running for 3 hours "
     "and is still going", "wheel-platform", ["pip install ninja", "echo $?", "MAX_JOBS"]),
    ("compiling flash-attn on a 16 GB RAM workstation, it dies with\ng++: fatal error: Killed signal terminated program "
     "cc1plus", "out-of-memory", ["MAX_JOBS"]),
    ("Tesla T4 on Kaggle, flash_attn 2.6.3\nRuntimeError: FlashAttention only supports Ampere GPUs or newer.",
     "attention", ["sdpa"]),
    ("after pip install -U torch (2.6.0) flash-attn breaks:\nImportError: /opt/conda/lib/python3.11/site-packages/"
     "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "abi-mismatch",
     ["flash-attn"]),
    ("pip install flash-attn --no-build-isolation on an A10G\nOSError: CUDA_HOME environment variable is not set. "
     "Please set it to your CUDA install root.", "rocm-libs-missing", ["CUDA_HOME"]),
    # flash-attn on an AMD card outside the CK backend
    ("Radeon RX 9070 XT (gfx1201), ROCm 6.4\npip install flash-attn --no-build-isolation\nerror: command "
     "'/opt/rocm/bin/hipcc' failed with exit code 1", "attention",
     ["FLASH_ATTENTION_TRITON_AMD_ENABLE=\"TRUE\"", "sdpa"]),
    # DeepSpeed: no torch, CUDA mismatch, stale JIT lock, libaio, CUDA_HOME
    ("DS_BUILD_OPS=1 pip install deepspeed==0.15.1 in a fresh venv\nAssertionError: Unable to pre-compile ops without "
     "torch installed. Please install torch before attempting to pre-compile ops.", "torch-build",
     ["install torch first", "ds_report"]),
    ("ZeRO-3 offload on an RTX A6000, torch 2.4.0+cu124, toolkit 12.1\nException: >- DeepSpeed Op Builder: Installed "
     "CUDA version 12.1 does not match the version torch was compiled with 12.4, unable to compile cuda/cpp extensions "
     "without a matching cuda version.", "abi-mismatch", ["12"]),
    ("Using /home/me/.cache/torch_extensions/py311_cu124 as PyTorch extensions root...\nLoading extension module "
     "fused_adam...\nno progress for 40 minutes, I had pressed Ctrl-C during the first run", "abi-mismatch",
     ["rm -rf /home/me/.cache/torch_extensions/py311_cu124/fused_adam"]),
    (" [WARNING]  async_io requires the dev libaio .so object and headers but these were not found.\nds_report on "
     "Debian 12", "rocm-libs-missing", ["libaio"]),
    ("deepspeed 0.16 ZeRO-2 cpu offload in a slim docker image, L40S\ndeepspeed.ops.op_builder.builder."
     "MissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA op(s)", "rocm-libs-missing", ["CUDA_HOME"]),
    # accelerate: old kernel, RTX 40 cards without P2P, collective timeout
    ("accelerate launch train.py on CentOS 7 with 2x A100\nDetected kernel version 3.10.0, which is below the "
     "recommended minimum of 5.5.0; this can cause the process to hang.", "driver", ["5.5", "uname -r"]),
    ("torchrun --nproc_per_node 2 finetune.py on two RTX 4080 SUPER cards, the job is stuck right after the model "
     "loads, GPU util 100%", "multi-gpu-transport", ["NCCL_P2P_DISABLE=1"]),
    ("python train.py with Accelerator() on 2x RTX 4090\nNotImplementedError: Using RTX 4000 series doesn't support "
     "faster communication broadband via P2P or IB. Please set `NCCL_P2P_DISABLE=\"1\"` and `NCCL_IB_DISABLE=\"1\" or "
     "use `accelerate launch` which will do this automatically.", "multi-gpu-transport", ["NCCL_P2P_DISABLE=1"]),
    # accelerate's newer wording of the same refusal (state.py): "RTX 3090 or 4000 series"
    ("4x RTX 3090, python sft.py (Trainer)\nNotImplementedError: Using RTX 3090 or 4000 series doesn't support faster "
     "communication broadband via P2P or IB. Please set `NCCL_P2P_DISABLE=\"1\"` and `NCCL_IB_DISABLE=\"1\" or use "
     "`accelerate launch` which will do this automatically.", "multi-gpu-transport", ["NCCL_IB_DISABLE=1"]),
    ("tokenizing a big dataset on the main process with accelerate, 8x H100\n[Rank 3] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800321 milliseconds "
     "before timing out.", "multi-gpu-transport", ["timeout"]),
    # transformers: memory, imports, quantisation, precision
    ("Trainer on an RTX 4060 8GB, per_device_train_batch_size=16\ntorch.OutOfMemoryError: CUDA out of memory. Tried "
     "to allocate 512.00 MiB. GPU 0 has a total capacity of 7.63 GiB of which 90.00 MiB is free.", "out-of-memory",
     ["gradient"]),
    ("ImportError: cannot import name 'Qwen2VLForConditionalGeneration' from 'transformers' (/home/u/venv/lib/"
     "python3.11/site-packages/transformers/__init__.py)", "wheel-platform", ["transformers"]),
    ("RTX 4060 Ti 16GB, 34B model in 4-bit\nSome modules are dispatched on the CPU or the disk. Make sure you have "
     "enough GPU RAM to fit the quantized model.", "out-of-memory", ["llm_int8_enable_fp32_cpu_offload"]),
    ("ImportError: Using `bitsandbytes` 8-bit quantization requires the latest version of bitsandbytes: `pip install "
     "-U bitsandbytes`\nA10 24GB", "wheel-platform", ["pip install -U bitsandbytes"]),
    ("V100 32GB, SFTConfig(bf16=True)\nValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using "
     "Ampere GPU with cuda>=11.0", "precision", ["fp16"]),
    ("Flash Attention 2.0 only supports torch.float16 and torch.bfloat16 dtypes, but the current dype in "
     "Qwen2ForCausalLM is torch.float32.\nH100", "precision", ["torch_dtype"]),
    # PEFT
    ("QLoRA on an RTX 3090, model loaded with torch_dtype=torch.float16, TrainingArguments(fp16=True)\nValueError: "
     "Attempting to unscale FP16 gradients.", "precision", ["float()"]),
    # Unsloth
    ("Windows 10, RTX 4080, pip install unsloth in a venv\nModuleNotFoundError: No module named 'triton'",
     "wheel-platform", ["triton-windows"]),
    ("Radeon PRO W7900, ROCm 6.2, Ubuntu 22.04, pip install unsloth\nNotImplementedError: Unsloth cannot find any "
     "torch accelerator? You need a GPU.", "torch-build", ["whl/rocm", "unsloth[amd]"]),
    ("pip install unsloth replaced my torch\nWARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers "
     "was built for:\n    PyTorch 2.3.1+cu121 with CUDA 1201 (you have 2.4.1+cu124)\n    Python  3.10.14 (you have "
     "3.10.14)", "abi-mismatch", ["xformers"]),
    # LLaMA-Factory on Windows
    ("LLaMA-Factory on Windows 11, RTX 2060, quantization_bit: 8\nCUDA Setup failed despite GPU being available\n"
     "libbitsandbytes_cuda118.dll not found", "wheel-platform", ["bitsandbytes"]),
    ("llamafactory-cli webui on Windows 10 with an RTX 3070, flash_attn: fa2\nImportError: FlashAttention2 has been "
     "toggled on, but it cannot be used due to the following error: the package flash_attn seems to be not installed.",
     "attention", ["sdpa"]),
    ("LLaMA-Factory on Windows 10, RTX 3080 Ti\ntorch 2.5.1+cpu\ntorch.cuda.is_available() is False", "torch-build",
     ["whl/cu"]),
    # xformers pulling its own torch, and one without kernels
    ("pip install -U xformers replaced torch: my torch 2.4.1+cu118 is now 2.5.1+cu124\nRTX 3090, driver 535",
     "torch-build", ["torch==2.4.1", "whl/cu118"]),
    ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n`cutlassF` is not "
     "supported because:\n    xFormers wasn't build with CUDA support\nRTX 4090, Linux", "abi-mismatch", ["xformers"]),
    # Triton: libcuda, ptxas for Blackwell, a CUDA torch on AMD, its own ptxas gone
    ("torch.compile in a CI container on an L4\n/usr/bin/ld: cannot find -lcuda\ncollect2: error: ld returned 1 exit "
     "status", "rocm-libs-missing", ["libcuda"]),
    ("RTX 5080, torch 2.6.0+cu126, triton 3.2\nptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'",
     "arch-missing", ["12.8"]),
    ("Radeon RX 7600, ROCm 6.2, torch.compile(model)\nRuntimeError: Found no NVIDIA driver on your system.",
     "torch-build", ["whl/rocm"]),
    ("torch.compile on an A100 in a distroless image\nFileNotFoundError: [Errno 2] No such file or directory: '/app/"
     ".venv/lib/python3.12/site-packages/triton/backends/nvidia/bin/ptxas'\nptxas not found", "rocm-libs-missing",
     ["TRITON_PTXAS_PATH", "--force-reinstall"]),
]

NEGATIVES = [
    # bitsandbytes CPU-only under a CUDA torch: bitsandbytes' own library, not torch's build
    ("RTX 3060, torch 2.3.1+cu121\nThe installed version of bitsandbytes was compiled without GPU support.",
     "pip uninstall -y torch torchvision"),
    # a flash-attn build that finished in minutes: no ninja reading
    ("Building wheel for flash-attn (setup.py) ... done in 6 minutes\nnow how do I enable it in LLaMA-Factory?",
     "pip install ninja"),
    # flash-attn on an MI300X (its CK backend covers gfx942)
    ("MI300X (gfx942), ROCm 6.3\npip install flash-attn\nerror: command '/opt/rocm/bin/hipcc' failed",
     "FLASH_ATTENTION_TRITON_AMD_ENABLE"),
    # a JIT build that failed with an error: the compiler's error, not a stale lock
    ("Loading extension module cpu_adam...\nRuntimeError: Error building extension 'cpu_adam'\nit is stuck",
     "start again so it builds once"),
    # Unsloth without a GPU on an NVIDIA machine: not the ROCm reading
    ("RTX 4090, pip install unsloth\nNotImplementedError: Unsloth cannot find any torch accelerator? You need a GPU.",
     "unsloth[amd]"),
    # another package's requirements replacing torch, xformers then failing: not xformers pulling torch
    ("the requirements install replaced my torch 1.13.1+cu117 with torch 2.0.0 and now xformers fails to load",
     "put the torch back and take the xformers"),
    # one RTX 4090 that hangs: no multi-GPU P2P reading
    ("single RTX 4090, the training loop hangs after 100 steps", "NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1"),
    # several datacentre GPUs hanging: not the consumer-card reading
    ("accelerate launch --multi_gpu on 4x A100 SXM hangs at the first step", "NCCL_IB_DISABLE=1 before launching"),
    # XLA's ptxas missing: JAX's fix, not Triton's
    ("jax on an A100\nCouldn't invoke ptxas --version", "TRITON_PTXAS_PATH"),
    # a new kernel: accelerate's warning is absent
    ("accelerate launch on Ubuntu 22.04, kernel 6.5.0-35-generic, 2x A6000, loss is nan", "linux-generic-hwe"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
