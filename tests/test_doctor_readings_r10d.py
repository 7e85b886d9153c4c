"""doctor, round 10 (issue 63): readings of the install families (rocm-libs-missing, wheel-platform, torch-build,
abi-mismatch) for pastes of batch 9 it could not read. Each paste is written for its reading (another GPU, tool and
wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a torch op symbol taking a pre-C++11 std::string (`Ss`), another extension (torchaudio-like): the C++ ABI
    ("import xformers.ops\nImportError: /opt/venv/lib/python3.11/site-packages/xformers/_C.so: undefined symbol: "
     "_ZN2at4_ops10zeros_like4callERKNS_6TensorESsN3c108optionalINS5_10ScalarTypeEEE\ntorch 2.7.1+cu128",
     "abi-mismatch", ["C++ ABI", "from source"]),
    # torch without CUDA on Windows, a toolkit the user installed named: PyPI's CPU wheel, the toolkit is not used
    ("Windows 10, GTX 1660 Super. I installed the CUDA 12.8 toolkit but torch.cuda.is_available() still prints False",
     "torch-build", ["download.pytorch.org/whl/cu128", "toolkit"]),
    # llama-cpp-python left on the CPU with CUDA beside it: PyPI's sdist builds the CPU backend
    ("llama-cpp-python 0.3.2 on Ubuntu with CUDA 12.4, the model loads but it doesn't use the GPU at all even with "
     "n_gpu_layers=35", "torch-build", ["CMAKE_ARGS", "GGML_CUDA"]),
    # an AMD GPU's name empty in torch inside a container: libdrm's amdgpu.ids table
    ("Inside the rocm/pytorch container on an MI300X node, torch.cuda.get_device_name(0) returns an empty string, "
     "training itself works", "rocm-libs-missing", ["libdrm-amdgpu-common", "amdgpu.ids"]),
    # torch's cuDNN check with an older cuDNN first on LD_LIBRARY_PATH (another release pair, a conda env)
    ("(train) $ python -c 'import torch; print(torch.backends.cudnn.version())'\nRuntimeError: cuDNN version "
     "incompatibility: PyTorch was compiled against (9, 1, 0) but linked against (8, 9, 7)\n"
     "LD_LIBRARY_PATH=/opt/cudnn-8.9/lib:/usr/local/cuda-12.2/lib64", "wheel-platform",
     ["LD_LIBRARY_PATH", "cuDNN 9.1.0"]),
    # a core driver call undefined in a launcher torch.compile cached (another call, a Triton path)
    ("ImportError: /home/me/.triton/cache/9f2c/cuda_utils.so: undefined symbol: cuLaunchKernel", "abi-mismatch",
     ["torchinductor", "~/.triton/cache"]),
    # an old torch pin on a newer Python, pip's line retyped without its colon: the Python the release was built for
    ("pip install torch==1.8.1+cu102 -f https://download.pytorch.org/whl/torch_stable.html\nERROR: Could not find a "
     "version that satisfies the requirement torch==1.8.1+cu102 (from versions 0.1.2, 0.1.2post1\nPython 3.11.4",
     "wheel-platform", ["Python 3.9"]),
    # tensorflow-rocm from AMD's rocm-rel-6.2 folder under another Python than its wheels': Python 3.10
    ("python3 -m pip install tensorflow-rocm==2.15.1 -f https://repo.radeon.com/rocm/manylinux/rocm-rel-6.2/\n"
     "ERROR: No matching distribution found for tensorflow-rocm==2.15.1\nPython 3.11.9", "wheel-platform",
     ["Python 3.10"]),
    # jax's CUDA extra asked for on Windows (another extra, PowerShell): its GPU wheels are Linux-only
    ("PS C:\\Users\\me\\proj> pip install -U \"jax[cuda12]\"\nWARNING: jax 0.4.30 does not provide the extra 'cuda12'\n"
     ">>> jax.devices()\n[CpuDevice(id=0)]", "wheel-platform", ["WSL2"]),
    # jax's CUDA backend not starting beside a CUDA jaxlib installed on its own: the jax[cuda12] set
    ("jax 0.4.31, jaxlib 0.4.31+cuda12.cudnn91 (installed from the jax_cuda_releases page), A100 80GB\n"
     "CUDA backend failed to initialize: Unable to use CUDA because of the following issues with CUDA components",
     "wheel-platform", ["jax[cuda12]==0.4.31"]),
    # vLLM's NCCL wrapper not loading its library (another model, tensor parallel): vLLM's own path variable
    ("vllm serve Qwen2-7B-Instruct --tensor-parallel-size 2\nERROR 05-02 10:11:12 pynccl.py:53] Failed to load NCCL "
     "library from libnccl.so.2 .It is expected if you are not running on NVIDIA/AMD GPUs.", "rocm-libs-missing",
     ["VLLM_NCCL_SO_PATH", "nvidia.nccl"]),
    # llama.cpp's Windows CUDA zip (another build and CUDA) without its runtime DLLs: the cudart archive
    ("Unzipped llama-b4500-bin-win-cuda-cu11.7-x64 and ran llama-server.exe: The code execution cannot proceed "
     "because cublas64_11.dll was not found.", "rocm-libs-missing", ["cudart-llama-bin-win-cu11.7-x64.zip"]),
    # a program saying the CUDA toolkit is missing for its engine: the toolkit
    ("Jan 0.5.4 on Windows 11 with an RTX 3060: the model engine will not start, app.log says CUDA toolkit not "
     "installed", "rocm-libs-missing", ["CUDA Toolkit"]),
    # Ollama extracted by hand on Linux beside an AMD card: the ROCm archive or the install script
    ("Installed ollama manually on Fedora 40 from ollama-linux-amd64.tgz; my RX 7800 XT (ROCm 6.1) is never used, "
     "everything runs on the CPU", "rocm-libs-missing", ["install.sh", "ollama-linux-amd64-rocm.tgz"]),
    # an impossible compute capability reported on Windows (another program): an old cudart first on PATH
    ("LocalAI on Windows 10 says my RTX 2060 has compute capability 1.3 and refuses to use it", "rocm-libs-missing",
     ["PhysX"]),
    # a torch release older than the GPU (another Ampere card, another release): a first CUDA call that takes minutes
    ("Ubuntu 18.04 with an RTX A6000 and torch 1.4.0: model.cuda() takes several minutes the first time",
     "torch-build", ["CUDA 11", "download.pytorch.org/whl/cu118"]),
    # a support question about a Blackwell card with the installed torch failing: the arch reading, CUDA 12.8 builds
    ("Does PyTorch support the RTX 5080 yet? Every app fails with: CUDA kernel errors might be asynchronously "
     "reported at some other API call", "arch-missing", ["cu128"]),
    # CTranslate2's own "not compiled with CUDA" on a Mac (whisperX, an M2): no CUDA there, the CPU
    ("whisperx on my MacBook Air M2 (macOS 14): ValueError: This CTranslate2 package was not compiled with CUDA "
     "support", "gpu-unsupported", ['device="cpu"']),
    # Ollama calling a card within its documented floor too old (another card, timestamps): that release's build
    ("time=2024-01-20T10:00:00 level=INFO source=gpu.go:140 msg=\"ollama: CUDA GPU is too old. Falling back to CPU "
     "mode. Compute Capability detected: 5.0\" (Quadro M2000)", "arch-missing", ["update ollama", "5.0"]),
    # a Kepler card beside a supported one (another pair), no GPU used: hide the old card
    ("Debian 12 box with a Tesla K40 and an RTX 3060; the server never runs on the GPU, only uses the CPU",
     "gpu-unsupported", ["CUDA_VISIBLE_DEVICES", "compute capability"]),
    # a build for a newer CUDA asked for a Blackwell card (another package, another number): the cu128 builds
    ("Got an RTX 5080, nvidia-smi says CUDA 13.0. When will xformers support CUDA 13.0?", "torch-build", ["cu128"]),
    # conda's pytorch-cpu beside torchvision (another wording): the CPU pair
    ("conda install pytorch-cpu -c pytorch, then conda install torchvision -c pytorch, and now the cuda pytorch is "
     "installed too", "wheel-platform", ["torchvision-cpu", "cpuonly"]),
    # accelerate refusing fp16 beside an NVIDIA card (another tool and card): torch's CPU build
    ("accelerate launch sft.py on Windows 11 with an RTX 3080\nValueError: fp16 mixed precision requires a GPU (not "
     "'cpu').", "torch-build", ["download.pytorch.org/whl/cu", "keep fp16"]),
    # the same told in words, a thin report
    ("kohya_ss on win10 with an RTX 3070 Ti, I get an error about fp16 when training starts", "torch-build",
     ["download.pytorch.org/whl/cu"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # an undefined c10 symbol with the C++11 string of the same ABI as torch's is not told apart: no ABI reading
    # when the symbol carries no std::string at all
    ("ImportError: /usr/lib/python3/dist-packages/mmcv/_ext.so: undefined symbol: _ZN3c104cuda20getCurrentCUDAStreamEa",
     "C++ ABI"),
    # torch without CUDA on Linux (PyPI's torch there is a CUDA build): not the Windows CPU wheel's reading
    ("Ubuntu 22.04, RTX 3090, I installed CUDA 12.4 but torch.cuda.is_available() returns False",
     "the CUDA toolkit can stay"),
    # llama-cpp-python on an AMD card: not the CUDA build
    ("llama-cpp-python on my RX 7900 XTX with ROCm 6.2 doesn't use the GPU, n_gpu_layers=-1", "GGML_CUDA"),
    # an empty name on an NVIDIA card: the table is AMD's
    ("nvidia-smi on my RTX 3090 shows the GPU name as blank after the driver update", "amdgpu.ids"),
    # a driver call new in CUDA 12.4 undefined: the driver is old, not a stale cache
    ("ImportError: /usr/lib/python3/dist-packages/vllm/_C.so: undefined symbol: cuGreenCtxCreate", "torchinductor"),
    # tensorflow-rocm from the rocm-rel-6.2 folder under Python 3.10, which it has: not the Python reading
    ("pip install tensorflow-rocm==2.99.0 -f https://repo.radeon.com/rocm/manylinux/rocm-rel-6.2/\n"
     "ERROR: No matching distribution found for tensorflow-rocm==2.99.0\nPython 3.10.12", "make a Python 3.10"),
    # jax's CUDA extra on Linux: not the Windows reading
    ("$ pip install -U \"jax[cuda12]\"\n$ python -c 'import jax; print(jax.devices())'\nNo GPU/TPU found, falling "
     "back to CPU", "jaxlib had no native Windows wheels"),
    # Ollama by hand beside an NVIDIA card: not the ROCm archive
    ("Installed ollama manually from ollama-linux-amd64.tgz on Ubuntu, my RTX 4090 is not used", "rocm.tgz"),
    # a real compute capability reported too old: not the PhysX reading
    ("ollama: CUDA GPU is too old. Compute Capability detected: 3.5 (Tesla K40)", "PhysX"),
    # a torch release that has the GPU's code, slow for another reason: not the release reading
    ("torch 2.3.1 on an RTX 3090: the first .cuda() call takes several minutes", "predates"),
    # CTranslate2 without CUDA on Linux with an NVIDIA card: its CUDA wheel, not the Mac reading
    ("Ubuntu 22.04, RTX 4070: ValueError: This CTranslate2 package was not compiled with CUDA support",
     "macOS has no CUDA"),
    # Ollama below its documented floor (compute capability 3.7): not the release reading
    ("ollama: CUDA GPU is too old. Compute Capability detected: 3.7", "update ollama"),
    # a Kepler card alone: nothing beside it to leave running
    ("My Tesla K80 is not used by the server, it only uses the CPU", "CUDA_VISIBLE_DEVICES"),
    # a CUDA 12.8 build asked for a Blackwell card: what it needs, not the newer-CUDA reading
    ("RTX 5090 here: does bitsandbytes support CUDA 12.8?", "the cu128 build carries sm_120 and sm_100"),
    # conda's CPU pair already asked for: nothing to add
    ("conda install pytorch-cpu torchvision-cpu -c pytorch fails with a solver conflict", "install the CPU pair together"),
    # an fp16 failure with a CUDA torch shown: the format's own reading, not the CPU build
    ("RTX 4090, torch 2.3.0+cu121: training fails with an error about fp16, the loss goes nan", "keep fp16 (or bf16) on"),
    # an fp16 error shown that is another one (an overflow): not the CPU build
    ("Problem with fp16 on my RTX 2080: RuntimeError: value cannot be converted to type at::Half without overflow",
     "keep fp16 (or bf16) on"),
    # a GeForce 8800 really is compute capability 1.0: not PhysX's cudart
    ("My GeForce 8800 GTX shows compute capability 1.0 and the program refuses it", "PhysX"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
