"""doctor, round 16 (issue 63): the fine-tuning and serving libraries' own GPU messages (p16a). Each wording
bitsandbytes, flash-attn (and its ROCm CK build), DeepSpeed, accelerate, transformers, unsloth, LLaMA-Factory, TRL,
vLLM, SGLang and Triton print about the GPU, its memory and their own build, pasted in another wording or context than
the probe list had (another release's sentence, the ROCm side, a notebook, a launcher line); the negatives keep the
readings out of the clean start-up lines the same tools print."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # bitsandbytes: no library for torch's ROCm release
    ("torch 2.9.0+rocm7.1\n🚨 ROCm VERSION MISMATCH 🚨\nRequested ROCm version:          7.1\nDetected PyTorch ROCm "
     "version:   7.1\nThe version you're trying to use is NOT distributed with this package", "wheel-platform",
     ["pip install -U bitsandbytes", "BNB_ROCM_VERSION"]),
    # bitsandbytes: a CUDA 11 library asked for by the override, its runtime missing
    ("export BNB_CUDA_VERSION=117\n🚨 CUDA SETUP ERROR: Missing dependency: libcusparse.so.11 🚨\nCUDA 11.x runtime "
     "libraries were not found in the LD_LIBRARY_PATH.", "rocm-libs-missing", ["unset BNB_CUDA_VERSION"]),
    # bitsandbytes' CPU library under a CPU torch
    ("pip list | grep torch\ntorch 2.4.1\n$ python -m bitsandbytes\nWARNING: bitsandbytes is running as CPU-only!\n"
     "8-bit optimizers and GPU quantization are unavailable.", "wheel-platform",
     ["whl/cu124", "python -m bitsandbytes"]),
    # bitsandbytes imported from an unbuilt checkout
    ("(venv) ~/src/bitsandbytes$ python -c 'import bitsandbytes as bnb; bnb.optim.Adam8bit'\n"
     "🚨 Forgot to compile the bitsandbytes library? 🚨\n2. You MUST compile from source", "wheel-platform",
     ["cmake -DCOMPUTE_BACKEND=cuda"]),
    # the ROCm override variable left set
    ("WARNING: BNB_ROCM_VERSION=62 environment variable detected; loading libbitsandbytes_rocm62.so.\nThis overrides "
     "automatic ROCm version selection.", "wheel-platform", ["unset BNB_ROCM_VERSION"]),
    # bitsandbytes' arch probe in a slim ROCm container
    ("docker run --device /dev/kfd --device /dev/dri rocm-slim python train.py\nROCm GPU architecture detection failed "
     "despite ROCm being available.", "rocm-libs-missing", ["export PATH=/opt/rocm/bin"]),
    # bitsandbytes 0.39's path search
    ("bitsandbytes 0.39.0\nCUDA_SETUP: WARNING! libcudart.so not found in any environmental path. Searching in backup "
     "paths...", "rocm-libs-missing", ["pip install -U bitsandbytes"]),
    # LLM.int8() on a Volta GPU with an old bitsandbytes
    ("Tesla V100-SXM2-32GB, load_in_8bit=True\nWARNING: Compute capability < 7.5 detected! Only slow 8-bit matmul is "
     "supported for your GPU! If you run into issues with 8-bit matmul, you can try 4-bit quantization",
     "gpu-unsupported", ["bitsandbytes>=0.45", "load_in_4bit"]),
    # flash-attn's CK build and a wide head
    ("torch 2.6.0+rocm6.3, MI300X\nRuntimeError: CK only supports head dimension at most 256", "attention", ["sdpa"]),
    # flash-attn's ROCm build without hipcc
    ("pip install flash-attn --no-build-isolation\n  UserWarning: flash_attn was requested, but hipcc was not found.",
     "rocm-libs-missing", ["ROCM_HOME"]),
    # flash-attn's ROCm build under a CUDA torch
    ("RuntimeError: GPU_ARCHS not set and current device does not expose gcnArchName. This usually means the active "
     "PyTorch build is not ROCm. Please set GPU_ARCHS explicitly.", "arch-missing", ["GPU_ARCHS=", "whl/rocm"]),
    # an MI50 asked of flash-attn's CK backend
    ("GPU_ARCHS=gfx906 pip install . --no-build-isolation\nAssertionError: Invalid archs: ['gfx906']. Allowed: "
     "['native', 'gfx90a', 'gfx942', 'gfx950']", "attention", ["sdpa", "FLASH_ATTENTION_TRITON_AMD_ENABLE"]),
    # flash-attn on ROCm without the CK extension
    ("import flash_attn\nflash_attn_interface.py:17: UserWarning: flash_attn_2_cuda (which has ROCm/HIP kernels) not "
     "found, falling back to Triton implementation", "attention", ["FLASH_ATTENTION_TRITON_AMD_ENABLE"]),
    # an xformers source build killed for memory
    ("pip install -v -U git+https://github.com/facebookresearch/xformers.git@main#egg=xformers\n"
     "nvcc error   : 'cicc' died due to signal 9 (Kill signal)\nninja: build stopped: subcommand failed.",
     "out-of-memory", ["MAX_JOBS="]),
    # DeepSpeed's prebuilt ops and a newer ROCm torch
    ("RuntimeError: HIP version mismatch! DeepSpeed ops were compiled and installed with a different version than "
     "what is being used at runtime. Please re-install DeepSpeed or switch torch versions. Install HIP version=6.1, "
     "Runtime HIP version=6.2", "abi-mismatch", ["pip install deepspeed --no-cache-dir"]),
    # DeepSpeed's cpu_adam without ninja
    ("zero_stage: 3, offload_optimizer: cpu\nRuntimeError: Unable to JIT load the cpu_adam op due to ninja not being "
     "installed.", "rocm-libs-missing", ["pip install ninja"]),
    # an op DeepSpeed will not build here
    ("RuntimeError: Unable to JIT load the cpu_lion op due to it not being compatible due to hardware/software issue.",
     "gpu-unsupported", ["ds_report"]),
    # ds_report's libaio line
    ("$ ds_report\n [WARNING]  async_io requires the dev libaio .so object and headers but these were not found.",
     "rocm-libs-missing", ["libaio-dev"]),
    # DeepSpeed's JIT build in a forked worker
    ("RuntimeError: DeepSpeed JIT builder for 'transformer_inference' cannot probe CUDA device capabilities in a "
     "forked subprocess where CUDA has already been initialized. Set TORCH_CUDA_ARCH_LIST to specify target "
     "architectures explicitly.", "visibility", ["TORCH_CUDA_ARCH_LIST"]),
    # the CPU Adam destructor after a failed build
    ("Traceback (most recent call last):\n  File \"deepspeed/ops/adam/cpu_adam.py\", line 102, in __del__\n"
     "    self.ds_opt_adam.destroy_adam(self.opt_id)\nAttributeError: 'DeepSpeedCPUAdam' object has no attribute "
     "'ds_opt_adam'", "rocm-libs-missing", ["CPUAdamBuilder().load()"]),
    # DS_ACCELERATOR=gpu
    ("ValueError: DS_ACCELERATOR must be one of ['cuda', 'cpu', 'xpu', 'npu', 'mps', 'hpu', 'mlu']. Value \"gpu\" is "
     "not supported", "override-wrong", ["unset DS_ACCELERATOR"]),
    # a 4-bit model over several GPUs under accelerate launch
    ("accelerate launch --multi_gpu --num_processes 2 qlora.py\nValueError: You can't train a model that has been "
     "loaded in 8-bit or 4-bit precision on multiple devices in any distributed mode. In order to use 8-bit or 4-bit "
     "models that have been loaded across multiple GPUs the solution is to use Naive Pipeline Parallelism.",
     "visibility", ["PartialState().process_index"]),
    # device_map="auto" under torchrun, through SFTTrainer
    ("  File \"trl/trainer/sft_trainer.py\", line 410, in __init__\nValueError: You can't train a model that has been "
     "loaded with `device_map='auto'` in any distributed mode. Please rerun your script specifying "
     "`--num_processes=1`", "visibility", ["python train.py"]),
    # a QLoRA model spilling to the CPU
    ("RTX 3060 12GB, Llama-2-13b, load_in_8bit=True, device_map='auto'\nValueError: You can't train a model that has "
     "been loaded in 8-bit or 4-bit precision with CPU or disk offload.", "out-of-memory", ["4-bit instead of 8-bit"]),
    # accelerate's newer fp16 wording on a CPU-only run
    ("ValueError: fp16 mixed precision requires a device in ['cuda', 'xpu', 'npu', 'mlu', 'musa', 'hpu', 'sdaa'] "
     "(not 'cpu').", "torch-build", ["torch.cuda.is_available()", "--mixed_precision no"]),
    # GPTQ on a machine where torch sees no GPU
    ("model = AutoModelForCausalLM.from_pretrained('TheBloke/Llama-2-7B-GPTQ')\nRuntimeError: GPU is required to "
     "quantize or run quantize model.", "torch-build", ["whl/cu124"]),
    # unsloth's newest wording on a CPU torch
    ("torch 2.5.1+cpu\nNotImplementedError: Unsloth currently only works on NVIDIA, AMD and Intel GPUs.",
     "torch-build", ["whl/cu124"]),
    # unsloth on Kaggle
    ("Kaggle notebook, 2x T4\nUserWarning: Unsloth: CUDA is not linked properly.\nYou need to run in your terminal "
     "`sudo ldconfig /usr/lib64-nvidia` yourself, then import Unsloth.", "rocm-libs-missing",
     ["ldconfig /usr/lib64-nvidia"]),
    # vLLM for a newer CUDA than the driver
    ("Unsloth: vLLM was built for CUDA 13.0 but this system has CUDA 12.8. Please reinstall a vLLM build for CUDA 12",
     "wheel-platform", ["--torch-backend=auto"]),
    # LLaMA-Factory's pure_bf16 on a T4
    ("llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml  # pure_bf16: true, Tesla T4\nValueError: This "
     "device does not support `pure_bf16`.", "precision", ["fp16: true"]),
    # a Mixtral with device_map='auto' on one GPU
    ("ValueError: We need an `offload_dir` to dispatch this model according to this `device_map`, the following "
     "submodules need to be offloaded: model.layers.30, model.norm, lm_head.", "out-of-memory",
     ["load_in_4bit=True", "offload_folder"]),
    # the older 8-bit wording of the same placement
    ("ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the "
     "quantized model. If you want to dispatch the model on the CPU or the disk while keeping these modules in "
     "32-bit, you need to set `load_in_8bit_fp32_cpu_offload=True`", "out-of-memory",
     ["llm_int8_enable_fp32_cpu_offload=True"]),
    # transformers' 8-bit check in a notebook
    ("In [3]: model = AutoModelForCausalLM.from_pretrained(name, load_in_8bit=True)\nImportError: Using `bitsandbytes` "
     "8-bit quantization requires Accelerate: `pip install 'accelerate>=0.26.0'`", "wheel-platform",
     ["pip install -U bitsandbytes accelerate"]),
    # FlashAttention 2 on a model left on the CPU
    ("model = AutoModelForCausalLM.from_pretrained(p, attn_implementation='flash_attention_2')\nYou are attempting to "
     "use Flash Attention 2 with a model not initialized on GPU.", "attention", ["device_map=\"cuda\""]),
    # TRL's GRPO with use_vllm and a broken vLLM
    ("ImportError: vLLM is not available and `use_vllm` is set to True. Please install vLLM with `pip install "
     "trl[vllm]` to use it.", "wheel-platform", ["python -c \"import vllm\""]),
    # vLLM's KV check in the newer wording
    ("vllm serve zai-org/GLM-4.6 --tensor-parallel-size 4\nValueError: To serve at least one request with the model's "
     "max seq len (202752), 24.0 GiB KV cache is needed, which is larger than the available KV cache memory "
     "(9.05 GiB). Based on the available memory, the estimated maximum model length is 76320.", "out-of-memory",
     ["--max-model-len"]),
    # vLLM 0.6 with no blocks at all
    ("INFO 09-01 12:00:00 gpu_executor.py:122] # GPU blocks: 0, # CPU blocks: 2048\nValueError: No available memory "
     "for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", "out-of-memory",
     ["raise --gpu-memory-utilization"]),
    # TRL colocate: the trainer frees memory while vLLM profiles
    ("GRPOConfig(use_vllm=True, vllm_mode='colocate')\nAssertionError: Error in memory profiling. Initial free memory "
     "20.58 GiB, current free memory 22.54 GiB.", "out-of-memory", ["--kv-cache-memory"]),
    # vLLM with no platform
    ("INFO 05-01 10:00:00 __init__.py:207] No platform detected, vLLM is running on UnspecifiedPlatform\n"
     "RuntimeError: Failed to infer device type", "torch-build", ["nvidia-smi", "pip install -U vllm"]),
    # SGLang's pool on a full GPU
    ("python -m sglang.launch_server --model-path Qwen/Qwen2.5-32B-Instruct --mem-fraction-static 0.7\n"
     "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "out-of-memory",
     ["raise --mem-fraction-static"]),
    # Triton's ldconfig search whose traceback names libcuda.so.1: the cache, not a missing link
    ("  File \"triton/backends/nvidia/driver.py\", line 36, in libcuda_dirs\n    assert any(os.path.exists(os.path."
     "join(path, 'libcuda.so.1')) for path in dirs), msg\nAssertionError: libcuda.so cannot found!",
     "rocm-libs-missing", ["ldconfig"]),
]

NEGATIVES = [
    # a bitsandbytes check that passed
    ("$ python -m bitsandbytes\nChecking that the library is importable and callable...\nSUCCESS!",
     "must end in SUCCESS"),
    # vLLM picking another attention backend on a T4 (an INFO line, no failure)
    ("INFO 06-01 10:00:00 selector.py:150] Cannot use FlashAttention-2 backend for Volta and Turing GPUs.\n"
     "INFO 06-01 10:00:00 selector.py:51] Using XFormers backend.", "attn_implementation"),
    # accelerate's defaults note
    ("The following values were not passed to `accelerate launch` and had defaults used instead:\n\t`--num_processes` "
     "was set to a value of `2`", "PartialState"),
    # a ds_report with the op built
    ("fused_adam ............. [NO] ....... [OKAY]\ncpu_adam ............... [YES] ...... [OKAY]", "pip install ninja"),
    # flash-attn's wheel lookup that went on to build fine
    ("Guessing wheel URL:  https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.4/flash_attn-2.7.4.whl"
     "\nPrecompiled wheel not found. Building from source...\nSuccessfully installed flash-attn-2.7.4", "MAX_JOBS=4"),
    # vLLM's KV cache that fits
    ("INFO 07-01 gpu_worker.py:227] Available KV cache memory: 52.3 GiB\nINFO kv_cache_utils.py:716] GPU KV cache "
     "size: 151,552 tokens\nINFO Maximum concurrency for 32,768 tokens per request: 4.62x", "--max-model-len"),
    # unsloth's banner on a working GPU
    ("==((====))==  Unsloth 2025.3.19: Fast Llama patching. Transformers: 4.50.0.\n   NVIDIA GeForce RTX 4090. Num "
     "GPUs = 1. Max memory: 23.65 GB. Platform: Linux.", "ldconfig /usr/lib64-nvidia"),
    # SGLang's pool allocated
    ("[2025-01-01 10:00:00 TP0] KV Cache is allocated. #tokens: 455414, K size: 26.05 GB, V size: 26.05 GB",
     "--mem-fraction-static"),
    # bf16 on an Ampere GPU, working
    ("accelerate launch --mixed_precision bf16 train.py  # NVIDIA A100-SXM4-80GB\n{'loss': 1.23, 'epoch': 0.1}",
     "--mixed_precision fp16"),
    # a libcuda.so dlopen failure (not Triton's search) keeps the link reading
    ("ls /usr/lib/x86_64-linux-gnu/libcuda.so.1\nOSError: libcuda.so: cannot open shared object file: No such file or "
     "directory", "TRITON_LIBCUDA_PATH=<folder"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
