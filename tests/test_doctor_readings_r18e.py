"""doctor, round 18 (r18e): readings for missed training cases of precision modes (a --precision half path giving NaN,
fp8 fast dtypes behind torch._scaled_mm, fp16 NaN frames on a GPU with bf16, a demo's own --fp16 switch), programs'
own memory switches (mmgp's profiles, GPT-SoVITS's batch, CogVLM2's int4 card size, Langchain-Chatchat's load_8bit,
vLLM named before Chinese text), Apple silicon's uncapped MPS allocator, and missing CUDA pieces (the CUDA runtime
with nothing tying it to torch, a JIT kernel or a Windows portable's compile script without the toolkit, a package
build published without its cuDNN 8 DLLs, docker's older "Unknown runtime specified nvidia"). Each paste is written for
its reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # Leela Zero on an RX 580 under Linux, half precision asked for, NaN winrates
    ("Ubuntu 22.04, Radeon RX 580, OpenCL from ROCm\n./leelaz --precision half -w best-network.gz -g\n"
     "genmove b\nNN eval=nan\nwinrate is nan for every move", "precision", ["--precision single"]),
    # a ComfyUI Flux workflow on an RTX 3080 with the fast fp8 weight dtype
    ("RTX 3080 10GB, ComfyUI, Load Diffusion Model node with weight_dtype fp8_e4m3fn_fast\nKSampler\n"
     "RuntimeError: torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm "
     "MI300+", "precision", ["fp8_e4m3fn", "_fast"]),
    # the WanVideo wrapper on an A6000 (Ampere) with fp8 fast quantization
    ("WanVideoSampler fails on my A6000\n  File \"custom_nodes/ComfyUI-WanVideoWrapper/fp8_optimization.py\"\n"
     "RuntimeError: torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 or 8.9",
     "precision", ["fp8 fast mode", "plain fp8_e4m3fn"]),
    # an A100 video demo saving black frames
    ("running the text-to-video demo on an A100 80GB, output mp4 is completely black\n"
     "/opt/app/utils.py:88: RuntimeWarning: invalid value encountered in cast\n  frames = (video * 255).astype(np.uint8)",
     "precision", ["bf16", "--precision bf16"]),
    # a CogAgent user on a V100 converting to float16 by hand
    ("CogAgent on V100 32G: no bfloat16 on this card, so I changed torch_dtype to torch.float16 in my script. It runs but "
     "the answers are garbage\nRuntimeError: \"bf16\" is not supported on this GPU", "precision", ["--fp16"]),
    # HunyuanVideoGP-style app named by its profile, on a 3090
    ("RTX 3090 24GB and 32 GB RAM, Wan2GP i2v 480p with --profile 3\ntorch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 2.50 GiB", "out-of-memory", ["profile 5", "now profile 3"]),
    # GPT-SoVITS on a 6 GB card, in English
    ("Training the GPT model in GPT-SoVITS WebUI on a GTX 1660 6GB with batch_size 4\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB", "out-of-memory",
     ["batch size=1", "short clips"]),
    # CogVLM2's int4 chat model split over two 8 GB cards
    ("cogvlm2-llama3-chat-19B-int4 on two RTX 3070 (8GB)\npython basic_demo/cli_demo_multi_gpus.py\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB", "out-of-memory", ["16G"]),
    # Langchain-Chatchat with Qwen on a 12 GB card, said in English
    ("Langchain-Chatchat 0.2.10 with Qwen-7B-Chat on my RTX 3060 12GB: CUDA out of memory when startup.py loads the "
     "model. How do I quantize it?", "out-of-memory", ["args.load_8bit = True", "startup.py"]),
    # vLLM named before Chinese text, serving a 14B model on a 4090
    ("用vllm部署Qwen2.5-14B-Instruct-AWQ，4090 24G，启动时显存不足 CUDA out of memory", "out-of-memory",
     ["--gpu-memory-utilization"]),
    # a MacBook Pro M2 Max running a diffusion UI, memory climbing until swap freezes it
    ("MacBook Pro M2 Max 64GB, macOS Sonoma, running the webui on mps\nafter a few images the RAM usage keeps growing "
     "to 60GB, then swap and the whole Mac freezes", "apu-memory", ["PYTORCH_MPS_HIGH_WATERMARK_RATIO"]),
    # a TTS server's worker without CUDA 11's runtime, nothing about torch shown
    ("Error: libcudart.so.11.0: cannot open shared object file: No such file or directory\nthe worker exits when I "
     "load the model", "rocm-libs-missing", ["cuda-toolkit-11-8", "cuda-keyring"]),
    # a fused kernel of another vocoder failing to JIT with torch 2.4 cu121
    ("torch 2.4.0+cu121, Debian 12\nWarning: failed to build the fused CUDA kernel, falling back to torch "
     "implementation (slower)", "rocm-libs-missing", ["nvidia/label/cuda-12.1.0", "cuda-toolkit"]),
    # Hunyuan3D-2 WinPortable's other compile script
    ("Windows 10\nD:\\AI\\Hunyuan3D2_WinPortable\\python_standalone\\python.exe -s -m pip install "
     ".\\Hunyuan3D-2\\hy3dgen\\texgen\\differentiable_renderer\n      ninja: build stopped: subcommand failed.\n"
     "      RuntimeError: Error compiling objects for extension", "rocm-libs-missing", ["CUDA Toolkit 12.4.1"]),
    # the GPT-SoVITS package's other cuDNN 8 DLL named
    ("GPT-SoVITS-v3-20250212 整合包 ASR 报错: Could not locate cudnn_cnn_infer64_8.dll. Please make sure it is in your "
     "library path!", "rocm-libs-missing", ["fix2"]),
    # docker's older wording on a Jetson Nano
    ("Jetson Nano 4GB, JetPack 4.6\n$ sudo docker run --runtime nvidia -it dustynv/l4t-pytorch:r32.7.1\n"
     "docker: Error response from daemon: Unknown runtime specified nvidia.", "rocm-libs-missing",
     ["nvidia-jetpack"]),
]

NEGATIVES = [
    # half precision that works: no NaN, no single-precision advice
    ("./leelaz --precision half -w net.gz --benchmark\n1234 visits, 800 n/s", "--precision single"),
    # a _scaled_mm shape error (not the capability refusal): not the fast-mode reading
    ("RuntimeError: torch._scaled_mm: mat2 must be col_major\nRTX 4090", "fp8_e4m3fn_fast"),
    # black images in the SD web UI: the VAE readings, not the bf16 video reading
    ("stable-diffusion-webui on RTX 3090\nRuntimeWarning: invalid value encountered in cast\nblack images, "
     "A tensor with all NaNs was produced in VAE", "--precision bf16"),
    # NaN frames on a GTX 1080 (no bf16): not the bf16 reading
    ("GTX 1080 Ti\nRuntimeWarning: invalid value encountered in cast\nvideo is black", "--precision bf16"),
    # a profiler's "profile 4" in a training run: not mmgp
    ("nsys profile 4 iterations of my training loop\ntorch.cuda.OutOfMemoryError: CUDA out of memory", "profile 5"),
    # an MPS out-of-memory error with a small job: not the watermark cap
    ("MacBook Air M1 8GB\nRuntimeError: MPS backend out of memory (MPS allocated: 6.80 GB, other allocations: 1.2 GB, "
     "max allowed: 9.07 GB)", "PYTORCH_MPS_LOW_WATERMARK_RATIO=0.5"),
    # memory growing on a Linux box with an NVIDIA card: not the MPS reading
    ("Ubuntu, RTX 4070\nRAM usage keeps growing after every generation until the system freezes", "PYTORCH_MPS"),
    # libcudart missing inside a torch traceback with vllm: torch's build, not the apt toolkit
    ("PyTorch version: 2.3.0+cu118\n  File \"/venv/lib/python3.10/site-packages/vllm/_C.py\"\n"
     "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "cuda-keyring"),
    # a JIT kernel that built fine
    ("Loaded the fused CUDA kernel for BigVGAN\ntorch 2.5.1+cu124", "nvidia/label/cuda"),
    # ninja failing on Linux in a venv: not the Windows portable reading
    ("Ubuntu 22.04 venv\npip install ./custom_rasterizer\nninja: build stopped: subcommand failed.\nnvcc fatal   : "
     "Unsupported gpu architecture 'compute_120'", "Visual Studio Build Tools 2022"),
    # the republished package: not the fix2 advice
    ("GPT-SoVITS-v3-20250212fix2 整合包 ASR 报错 cudnn_ops_infer64_8.dll", "download the republished package"),
    # the newer docker wording stays the device-files reading
    ("docker: Error response from daemon: unknown or invalid runtime name: nvidia", "nvidia-jetpack"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
