"""doctor, round 12 (issue 63), helper s1: readings for round 11's spent held-out cases. Each paste is written for its
reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # TensorRT-LLM's fused context MHA on a Turing card (T4, another TRT-LLM build, the newer flag)
    ("trtllm-build --checkpoint_dir ./llama_ckpt --context_fmha enable --output_dir ./engine on a Tesla T4\n"
     "[TensorRT-LLM][ERROR] Assertion failed: Unsupported architecture (/src/tensorrt_llm/kernels/"
     "contextFusedMultiHeadAttention/fmhaRunner.cpp:92)", "attention", ["context_fmha", "disable"]),
    # the same asked as a question about a V100 (no assertion quoted)
    ("TensorRT-LLM 0.9: is --enable_context_fmha not available on V100? the engine build refuses it", "attention",
     ["--enable_context_fmha"]),
    # FP8 FMHA refused on an RTX 5080 (another consumer Blackwell card, named in full)
    ("TensorRT-LLM 0.18.0.dev on an RTX 5080\n[TensorRT-LLM][ERROR] Assertion failed: FP8 FMHA cannot be enabled "
     "except on Ada or Hopper or Blackwell Arch. (/code/tensorrt_llm/cpp/tensorrt_llm/common/attentionOp.cpp:2357)",
     "arch-missing", ["v0.20.0", "--use_fp8_context_fmha"]),
    # FP8 FMHA on an Ampere card: the GPU has no FP8, no release helps
    ("trtllm-build --use_fp8_context_fmha enable on an A100-SXM4-80GB\n[TensorRT-LLM][ERROR] Assertion failed: FP8 "
     "FMHA cannot be enabled except on Ada or Hopper Arch.", "precision", ["--use_fp8_context_fmha"]),
    # xformers said to lack a Blackwell card under Unsloth (English, another card)
    ("Unsloth fails to start on my RTX 5090: xformers has no prebuilt binaries for sm_120, so the import dies",
     "attention", ["unsloth_zoo", "SDPA"]),
    # the same for a plain diffusers script: run without xformers
    ("diffusers on a Blackwell RTX 5070 Ti: xformers does not support this GPU yet (too new), what now?",
     "attention", ["pip uninstall xformers", "SDPA"]),
    # the kubelet's static CPU manager, as its KubeletConfiguration key, on another node and GPU
    ("kubectl exec -it trainer-0 -- nvidia-smi\nFailed to initialize NVML: Unknown Error\n(works for a few minutes "
     "after the pod starts; A10G nodes)\n/var/lib/kubelet/config.yaml: cpuManagerPolicy: static", "device-access",
     ["--pass-device-specs=true", "cpu-manager-policy"]),
    # amd-smi failing with the module not loaded (amd-smi's own words, another GPU and distribution)
    ("$ amd-smi list\nERROR:root:Driver not initialized (amdgpu not found in modules)\nFedora 40, RX 6800, ROCm 6.2",
     "driver", ["sudo modprobe amdgpu", "lsmod"]),
    # gloo falling back to loopback in a torchrun job on two bare-metal nodes
    ("[W socket.cpp:663] [c10d] Warning: Unable to resolve hostname to a (local) address. Using the loopback address "
     "as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.\nRuntimeError: Gloo "
     "connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error", "multi-gpu-transport",
     ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "/etc/hosts"]),
    # a multi-node NCCL failure with no transport named: sockets' interface, and IB off where there is none
    ("torchrun --nnodes=2 --nproc_per_node=4 --rdzv_endpoint=10.0.0.5:29400 train.py\nRuntimeError: NCCL "
     "communicator was aborted: Some NCCL operations have failed or timed out.", "multi-gpu-transport",
     ["NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE=1"]),
    # a Radeon 660M (gfx1035) whose known stand-in 10.3.0 was tried and still crashes in rocBLAS
    ("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory for GPU "
     "arch : gfx1035\nwhisper.cpp with HIP on a Ryzen 7 6800U; HSA_OVERRIDE_GFX_VERSION=10.3.0 still segfaults",
     "gpu-unsupported", ["gfx1035", "Vulkan"]),
    # CTranslate2 asked about an Apple M3 GPU (whisperX, another chip)
    ("does whisperX run on the M3 Max GPU of my MacBook Pro? device='cuda' fails", "gpu-unsupported",
     ["Metal", "int8"]),
    # prebuilt wheels asked for another APU
    ("Please publish prebuilt wheels for gfx1151 (Strix Halo)", "arch-missing", ["rocm.nightlies.amd.com"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # FP8 FMHA refused with no GPU known: no release guessed
    ("[TensorRT-LLM][ERROR] Assertion failed: FP8 FMHA cannot be enabled except on Ada or Hopper Arch.", "v0.20.0"),
    # context FMHA on an A100 that works: no 'drop the flag' reading from the flag alone
    ("trtllm-build --context_fmha enable on 8x A100 finished in 4 minutes, engine runs fine", "--context_fmha disable"),
    # xformers said missing on an Ampere card: not the new-GPU reading
    ("xformers has no prebuilt wheel for my torch 2.5 on an RTX 3090", "unsloth_zoo"),
    # NVML Unknown Error in docker with no kubelet: not the CPU manager
    ("docker exec trainer nvidia-smi\nFailed to initialize NVML: Unknown Error", "--pass-device-specs"),
    # amd-smi saying the module is missing under WSL: no modprobe
    ("WSL2 Ubuntu 24.04\n$ amd-smi\nERROR:root:Driver not initialized (amdgpu not found in modules)",
     "sudo modprobe amdgpu"),
    # gloo's loopback warning on one machine with no failure: nothing to fix about it
    ("Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback.\n"
     "epoch 1 loss 0.53", "GLOO_SOCKET_IFNAME=<the interface on the network the nodes share"),
    # NCCL's log already shows sockets between the nodes: no IB advice
    ("torchrun --nnodes=2 train.py\nNCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>\nRuntimeError: NCCL "
     "communicator was aborted: Some NCCL operations have failed or timed out.", "NCCL_IB_DISABLE"),
    # an RDNA2 iGPU with no override tried: the override reading, not 'unsupported'
    ("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory for GPU "
     "arch : gfx1035", "ROCm does not support gfx1035"),
    # the RX 5700 XT crashing under 10.3.0: a wrong stand-in (its own value is another), not 'unsupported'
    ("rocBLAS error: Cannot read TensileLibrary.dat: No such file or directory for GPU arch : gfx1010\n"
     "HSA_OVERRIDE_GFX_VERSION=10.3.0 crashes", "ROCm does not support gfx1010"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
