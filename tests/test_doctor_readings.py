"""doctor, round 6 (issue 63): readings that carry to pastes doctor has never seen. Each paste below is written for
the reading (another GPU, tool, wording or setting than any mined case), not copied from a thread: the family comes
from a class of wording or a fact (a device node owned by nobody inside a rootless container, a training run out of
memory, a NaN loss under fp16, a collective failing in a container, Secure Boot beside the driver, a hang on a named
ROCm torch), and the fix must name that family's remedy with the machine's values. Each failed before its reading was
written; the negatives keep a reading from spreading to pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text
from test_doctor_paraphrases import PASTINGS, pasting_misses

# (paste, family, phrases the fix must say, confirmed: True / False / None for either)
READINGS = [
    # device-access: a device node shown as nobody/nogroup in a rootless container: the host group is not mapped
    ("$ toolbox enter rocm\n$ ls -l /dev/kfd /dev/dri/renderD129\n"
     "crw-rw----. 1 nobody nobody 235,   0 Feb  2 08:00 /dev/kfd\n"
     "crw-rw----. 1 nobody nobody 226, 129 Feb  2 08:00 /dev/dri/renderD129\n"
     "rocminfo: Unable to open /dev/kfd read-write: Permission denied",
     "device-access", ["crun", "keep-groups"], None),
    ("podman rootless: GPU not accessible, the render group is lost inside the container (RX 7600)\n"
     "crw-rw---- 1 65534 65534 226, 128 Apr  9 11:02 renderD128",
     "device-access", ["crun"], None),
    ("GPU devices not visible in rootless podman, groups are not passed through", "device-access", ["crun"], None),
    # out-of-memory: a training run, in the user's words or torch's; its fix is the batch, checkpointing, length
    ("OOM while doing QLoRA SFT of Mistral 7B on a 16GB RTX 4080", "out-of-memory",
     ["batch size", "gradient checkpointing", "max length"], False),
    ("unsloth fine-tuning llama-3.1-8b runs out of VRAM at step 3 on a T4", "out-of-memory",
     ["batch size", "gradient checkpointing"], False),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 23.98 GiB "
     "of which 312.00 MiB is free.\nllamafactory-cli train examples/train_lora/qwen2_lora_sft.yaml",
     "out-of-memory", ["batch size", "cutoff_len"], True),
    ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
     "while fine-tuning with LoRA on an A40, per_device_train_batch_size=32", "out-of-memory", ["batch size"], False),
    # precision: NaN loss / fp16 overflow; bf16 where the GPU has it, loss scaling or fp32 where it does not
    ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-4, 'epoch': 0.3}\ntraining gemma with fp16=True on an "
     "RTX 4090", "precision", ["bf16"], True),
    ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
     "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\nTesla V100-SXM2-32GB",
     "precision", ["loss scaling", "fp32"], True),
    ("loss goes to nan after 500 steps with mixed precision on MI100", "precision", ["loss scaling"], True),
    # multi-gpu-transport: a collective that fails in a container: its /dev/shm; the generic fix says NCCL_DEBUG
    ("vLLM serve with tensor_parallel_size=4 crashes in the container (podman, 4x MI210)", "multi-gpu-transport",
     ["--shm-size"], None),
    ("accelerate launch --multi_gpu train.py fails inside docker with NCCL error: unhandled system error",
     "multi-gpu-transport", ["--shm-size"], None),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
     "unhandled cuda error, NCCL version 2.20.5\n2x L40S", "multi-gpu-transport", ["NCCL_DEBUG=INFO"], None),
    ("training is stuck at the first step with 4 GPUs (4x RX 7900 XTX) using torchrun --nproc_per_node 4",
     "multi-gpu-transport", ["NCCL_P2P_DISABLE=1"], None),
    # driver: Secure Boot, a kernel update, nvidia-smi seeing no device
    ("After enabling Secure Boot the amdgpu module does not load anymore, rocminfo fails", "driver", ["mokutil"], None),
    ("nvidia driver stopped working after kernel upgrade on Fedora 41", "driver", ["linux-headers", "dkms"], None),
    ("$ nvidia-smi\nNo devices were found", "driver", ["lspci"], None),
    # gpu-hang: a hang on a named ROCm torch; an NVIDIA illegal access outside training; a bare hang
    ("amdgpu: ring comp_1.0.0 timeout during SDXL on a Radeon VII, torch 2.4.1+rocm6.1", "gpu-hang",
     ["whl/rocm6.2"], True),
    ("RuntimeError: CUDA error: an illegal memory access was encountered\nvllm serve Qwen/Qwen2-7B on an RTX 3090",
     "gpu-hang", ["CUDA_LAUNCH_BLOCKING=1", "vllm"], False),
    ("GPU hang while generating images with an RX 6800", "gpu-hang", ["dmesg"], False),
    # each tool's own memory knobs
    ("ComfyUI: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of "
     "11.98 GiB", "out-of-memory", ["--lowvram"], True),
    ("stable-diffusion-webui on RX 6600: RuntimeError: HIP out of memory. Tried to allocate 1.00 GiB",
     "out-of-memory", ["--medvram"], True),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4294967296 bytes."
     "\nimport jax", "out-of-memory", ["XLA_PYTHON_CLIENT_PREALLOCATE=false"], True),
    ("faster_whisper large-v2 on a 6 GB card: RuntimeError: CUDA failed with error out of memory", "out-of-memory",
     ["compute_type"], True),
    ("modules.devices.NansException: A tensor with all NaNs was produced in VAE.\nSD.Next on RX 7600", "precision",
     ["--no-half-vae"], True),
    ("NansException: A tensor with all NaNs was produced in Unet. (stable-diffusion-webui, GTX 1660)", "precision",
     ["upcast"], True),
    # device-access: works only with sudo, in other words
    ("hipErrorNoDevice as my user, sudo works (RX 7800 XT, Ubuntu 24.04)", "device-access", ["usermod"], True),
    # driver: CUDA's own start-up failures, each with its remedy
    ("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set an error? Error 804: forward compatibility was "
     "attempted on non supported HW", "driver", ["cuda-compat"], True),
    ("RuntimeError: CUDA error: unknown error\n(only after the laptop resumes from suspend, RTX 4060)", "driver",
     ["nvidia_uvm"], True),
    # precision: fp16 on the CPU, fp8 on a GPU without it
    ("RuntimeError: \"LayerNormKernelImpl\" not implemented for 'Half'", "precision", ["float32"], True),
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. Current "
     "capability: 80.", "precision", ["bfloat16"], True),
    # attention: torch's own warnings about its fused attention
    ("UserWarning: Memory Efficient attention on Navi31 GPU is still experimental. Enable it with "
     "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.", "attention", ["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1"], True),
    # thin titles: the words decide the family and its usual fix
    ("RCCL timeout on 4x MI210 after a few hours", "multi-gpu-transport", ["NCCL_DEBUG=INFO"], None),
    ("nvidia-smi: command not found (Ubuntu 22.04, RTX 3060)", "driver", ["nvidia"], None),
    ("ROCm no longer works after kernel upgrade to 6.13", "driver", ["linux-headers", "amdgpu-dkms"], None),
    ("rocm-smi: permission denied as my user", "device-access", ["usermod"], None),
    ("PyTorch can't see the GPU inside a docker container, RX 7900 GRE", "device-access", ["--device=/dev/kfd"], None),
    ("torch cannot find the GPU in my container (RTX 4070), torch.cuda.is_available() is False", "device-access",
     ["--gpus all"], None),
    ("SD 1.5 gives black images in half precision on an RX 580", "precision", ["--no-half-vae"], None),
    ("bfloat16 is not supported on the Tesla P100", "precision", ["fp16"], None),
    ("SDXL out of memory on my 8GB RX 7600 in ComfyUI", "out-of-memory", ["--lowvram"], None),
    ("GPU page fault while running llama.cpp on MI100", "gpu-hang", ["dmesg"], None),
    ("torch.cuda.device_count() returns 2 but I have 4 GPUs installed", "visibility", ["VISIBLE_DEVICES"], None),
    ("Ryzen AI Max+ 395: llama.cpp can only use 96GB of 128GB", "apu-memory", ["ttm.pages_limit"], None),
    ("failed to build flash-attn on ROCm 6.3 (MI250)", "attention", ["ROCm/flash-attention"], None),
    # the NVIDIA driver's own fault reports
    ("NVRM: Xid (PCI:0000:01:00): 79, pid=4242, GPU has fallen off the bus.", "platform-bios", ["pcie_aspm=off"], True),
    ("NVRM: Xid (PCI:0000:41:00): 31, pid=2231, Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS faulted",
     "gpu-hang", ["CUDA_LAUNCH_BLOCKING=1"], False),
    ("vllm serve --tensor-parallel-size 2 hangs on 2x RTX 4090", "multi-gpu-transport",
     ["NCCL_P2P_DISABLE=1", "--disable-custom-all-reduce"], None),
    # the transport between nodes over RDMA; the GPU's firmware by its blocks' names
    ("gpu-node2:881:990 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.1.0.3<52100> with "
     "error 12, opcode 0, len 0, vendor err 129", "multi-gpu-transport", ["NCCL_IB_DISABLE=1"], True),
    ("amdgpu 0000:0b:00.0: amdgpu: PSP load tmr failed!", "driver", ["linux-firmware"], True),
    # WSL: AMD's WSL runtime covers RDNA3 / RDNA4 only
    ("WSL2 Ubuntu 24.04: rocminfo finds no GPU agent, Radeon RX 6800 XT", "wsl", ["native Linux"], True),
    ("WSL2 Ubuntu: torch.cuda.is_available() is False, RTX 3080 (nvidia-smi works in Windows)", "wsl",
     ["/usr/lib/wsl/lib", "download.pytorch.org/whl/cu"], True),
    # visibility: an index past the visible GPUs
    ("RuntimeError: CUDA error: invalid device ordinal\n(export CUDA_VISIBLE_DEVICES=2 on a two-GPU box)", "visibility",
     ["count from 0"], True),
    # MIOpen's missing kernel database is a warning with its own package
    ("MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx1101_30.kdb Performance may degrade.",
     "miopen-kernel", ["miopen-hip-gfx1101kdb"], True),
    ("ValueError: The current architecture does not support Flash Attention 2 (Tesla T4)", "attention", ["sdpa"], None),
    # a Kubernetes pod with no GPU: the vendor's device plugin and the pod's resource limit
    ("Pod on k3s with an MI210 node: torch.cuda.is_available() returns False", "device-access",
     ["amd.com/gpu", "device plugin"], True),
    ("kubectl logs trainer-0: RuntimeError: No CUDA GPUs are available (A100 node)", "device-access",
     ["nvidia.com/gpu"], True),
    # a family's line that no specific reading settles still gets the family's likely remedy
    ("error: stack frame size (131112) exceeds limit (131056) in function '_attn_fwd_inner' (a Triton kernel, MI100)",
     "attention", ["sdpa"], False),
    # Secure Boot in the kernel's own words
    ("$ sudo modprobe amdgpu\nmodprobe: ERROR: could not insert 'amdgpu': Required key not available", "driver",
     ["mokutil"], True),
    # older and runtime spellings of the same failures
    ("RuntimeError: HIP error: out of memory\nCompile with `TORCH_USE_HIP_DSA` to enable device-side assertions.\n"
     "peft LoRA on RX 7800 XT", "out-of-memory", ["batch size"], True),
    ("RuntimeError: NCCL communicator was aborted on rank 1. Original reason for failure was: [Rank 1] Watchdog",
     "multi-gpu-transport", ["NCCL_DEBUG=INFO"], True),
    # apu-memory: the APU named by its graphics, and too little VRAM said
    ("Radeon 890M laptop: torch only sees 2 GB VRAM, llama 8B does not fit", "apu-memory", ["BIOS"], None),
    # miopen-kernel: the HIP backend's own spelling of its errors
    ("MIOpen(HIP): Error [Compile] 'hiprtcCompileProgram' naive_conv.cpp: HIPRTC_ERROR_COMPILATION (6)",
     "miopen-kernel", ["NAIVE_CONV"], None),
]


@pytest.mark.parametrize("paste,family,phrases,confirmed", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases, confirmed):
    top = diagnose_text(paste).top
    assert top is not None, paste
    assert top.family == family, (top.family, top.fix)
    missing = [p for p in phrases if p.lower() not in top.fix.lower()]
    assert not missing, (missing, top.fix)
    if confirmed is not None:
        assert top.confirmed is confirmed, top.title


@pytest.mark.parametrize("how", PASTINGS)
def test_every_reading_survives_how_it_is_pasted(how):
    misses = pasting_misses(READINGS, how)
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("paste,not_family", [
    # an illegal access outside training is a kernel fault, not a batch that is too large
    ("RuntimeError: CUDA error: an illegal memory access was encountered\nllama.cpp server on an RTX 3060",
     "out-of-memory"),
    # NaN under bf16 is not fp16's range
    ("loss is nan with bf16 on RX 6800, RuntimeError: bf16 is not supported on this device", None),
    # a bare "OOM" beside a specific MIOpen cause does not outrank it
    ("VAE decode OOM on RX 9070 XT\n- default MIOPEN_FIND_MODE: driver timeout on the VAE decode", "out-of-memory"),
    # a pod whose GPU was lost (NVML's unknown error) is not a pod given no GPU
    ("kubectl exec gpu-pod -- nvidia-smi\nFailed to initialize NVML: Unknown Error", None),
    # nobody-owned listing on a host without any container: not the rootless reading
    ("ls -l /etc/shadow\n-rw-r----- 1 nobody nogroup 1234 Jan 1 00:00 /etc/shadow", "device-access"),
])
def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, not_family):
    top = diagnose_text(paste).top
    if not_family is None:   # the reading named in the comment must not be what it says
        assert top is None or ("overflows fp16" not in top.title and "no GPU" not in top.title), top.title
    else:
        assert top is None or top.family != not_family, (top.family, top.fix)


def test_a_nan_loss_alone_is_a_likely_reading_only():
    top = diagnose_text("loss becomes NaN after a few hundred steps").top
    assert top is not None and top.family == "precision" and not top.confirmed
