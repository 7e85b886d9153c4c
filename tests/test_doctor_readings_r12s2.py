"""doctor, round 12 (issue 63), helper s2: readings for round 11's spent held-out cases of the precision,
rocm-libs-missing, torch-build, visibility and wheel-platform families. Each paste is written for its reading
(another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each reading out of
pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # CTranslate2's int8 GEMM refused on Blackwell (whisperX, an RTX 5090, int8 asked for): a float compute type
    ("whisperx audio.mp3 --compute_type int8 --device cuda on my new RTX 5090\nTraceback (most recent call last):\n"
     "RuntimeError: cuBLAS failed with status CUBLAS_STATUS_NOT_SUPPORTED", "precision",
     ["compute_type=\"float16\"", "int8"]),
    # the same through CTranslate2 directly on a data-center Blackwell (an nvidia-smi line, a translator)
    ("ctranslate2 4.5.0 Translator(model, device='cuda', compute_type='int8_float16') on a B200\ntranslator."
     "translate_batch(batch)\nRuntimeError: cuBLAS failed with status CUBLAS_STATUS_NOT_SUPPORTED", "precision",
     ["float16", "PR 1982"]),
    # float16 compute types giving empty text on a GTX 16xx (another card, another tool, other words)
    ("GTX 1650 Super, whisper-ctranslate2 with --compute_type float16 gives empty transcripts, the same file on CPU "
     "is fine", "precision", ["compute_type=\"int8\""]),

    # CTranslate2 built for CUDA 11 on Windows, asking for cublas64_11.dll (the other major)
    ("faster-whisper with ctranslate2 3.24.0 on Windows 11, CUDA 12.4 installed\nRuntimeError: Library cublas64_11.dll "
     "is not found or cannot be loaded", "rocm-libs-missing", ["CUDA 11", "nvidia-cublas-cu11", "PATH"]),

    # PyPI's CPU torch on an ARM server (GH200, torch's own words)
    ("GH200 node (aarch64), pip install torch gave 2.5.1\n>>> torch.cuda.is_available()\nFalse\nnvidia-smi shows the "
     "H100 and CUDA 12.6", "torch-build", ["download.pytorch.org/whl/cu128"]),

    # a CDI spec field an engine does not know (another field, containerd, another toolkit release)
    ("sudo nerdctl run --device nvidia.com/gpu=all ubuntu nvidia-smi (containerd 1.7.2)\nfailed to refresh CDI "
     "registry: failed to parse CDI Spec \"/etc/cdi/nvidia.yaml\": json: unknown field \"intelRdt\"", "wheel-platform",
     ["containerd", "nvidia-ctk cdi generate"]),

    # a TensorRT engine read by another release, in TensorRT's older words
    ("trtexec --loadEngine=model.plan\n[E] [TRT] 1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: "
     "Serialization (Serialization assertion magicTagRead == kMAGIC_TAG failed.)\n[E] [TRT] The engine plan file is not "
     "compatible with this version of TensorRT, expecting library version 8.6.1.6 got 8.5.3.1, please rebuild.",
     "wheel-platform", ["TensorRT", "rebuild the engine"]),
    # TensorRT-LLM hanging on MPICH (a pip list, another wording)
    ("python -c 'import tensorrt_llm' never returns on our A100 box; conda list shows mpich 4.1.2 and mpi4py 3.1.5 "
     "from the default channel, it hangs at MPI_Init_thread", "wheel-platform", ["mpi4py", "openmpi"]),

    # a plain python start with several GPUs (four GPUs, another script, English)
    ("CUDA_VISIBLE_DEVICES=0,1,2,3 python finetune.py --model_name_or_path meta-llama/Llama-2-7b-hf --do_train\n"
     "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:2 and cuda:0!",
     "visibility", ["accelerate launch --num_processes 4", "torchrun"]),
    # hiding one GPU from a tool (Ollama on Linux, two 3090s, keep one for the display)
    ("I have two 3090s and want ollama to keep the first card free for my desktop, but it always loads onto both",
     "visibility", ["CUDA_VISIBLE_DEVICES=1"]),

    # LM Studio 0.2.26 on an RX 6700 XT: offload greyed out
    ("LM Studio 0.2.26 on Windows, Radeon RX 6700 XT: the GPU offload slider is greyed out, worked before the update",
     "rocm-libs-missing", ["OpenCL extension pack"]),
]

NEGATIVES = [
    # CUBLAS_STATUS_NOT_SUPPORTED from torch's own matmul (no CTranslate2): not the compute type
    ("RTX 5080, torch 2.6.0+cu124\nRuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasGemmEx",
     "compute_type"),
    # faster-whisper working fine on a GTX 1660: nothing wrong said
    ("faster-whisper on a GTX 1660 Super with compute_type float16 transcribes a 1h file in 4 minutes", "compute type without float16"),
    # a Jetson (aarch64 too): JetPack's wheels, not the cu128 index
    ("Jetson Orin Nano, JetPack 6, aarch64: torch.cuda.is_available() False after pip install torch (CUDA 12.2)",
     "download.pytorch.org/whl/cu128"),
    # a CDI spec naming a device the host lost: not an engine too old
    ("podman run --device nvidia.com/gpu=all ubuntu\nError: failed to stat CDI host device \"/dev/nvidia1\": no such "
     "file or directory", "cannot read the CDI spec"),
    # torchrun already used: not the launcher fix
    ("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 2 train.py\nExpected all tensors to be on the same device, but "
     "found at least two devices, cuda:0 and cuda:1!", "accelerate launch --num_processes"),
    # LM Studio on an NVIDIA card: not the AMD backend packs
    ("LM Studio 0.2.25 with an RTX 3060: GPU offload is inactive", "OpenCL extension pack"),
    # TensorRT-LLM with OpenMPI: no MPICH, not this reading
    ("import tensorrt_llm hangs after Initializing MPI with thread mode 3 (openmpi 4.1.5, mpi4py 3.1.6)",
     "replace MPICH with OpenMPI"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
