"""doctor, round 17 (r17b): readings for missed training cases of a package's compiled _C swallowed at import, a
visibility variable assigned from Python after CUDA started, docker without the NVIDIA runtime on an older toolkit, an
app's torch asked of a ROCm index older than it, a CUDA index installed on an AMD GPU, SD.Next's CPU torch read from its
own log, LLaMA-Factory's launcher, an NCCL stall (the gloo backend), WSL's ROCm runtime package and its libcuda path
under conda, and bitsandbytes on Windows. Each paste is written for its reading (another GPU, tool, version or wording
than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # another package's compiled module swallowed at import, then its first op
    ("cloned the repo and ran pip install -e . in a conda env with an RTX 3080\nUserWarning: Failed to load custom C++ "
     "ops. Running on CPU mode Only!\n    value = _C.deform_attn(query, offsets)\nNameError: name '_C' is not defined",
     "torch-build", ["setup.py build", "setup.py install", "CUDA_HOME"]),
    # the variable assigned from Python on AMD, in a notebook after torch, said to do nothing
    ("Radeon PRO W7900 x2, ROCm 6.2\nimport torch\nos.environ[\"HIP_VISIBLE_DEVICES\"] = \"1\"\nthe model still runs "
     "on GPU 0, the setting has no effect", "env-not-applied",
     ["before import torch", "torch.cuda.set_device(1)", "HIP_VISIBLE_DEVICES=1"]),
    # the same in Chinese, with the command line said to work
    ("在train.py里写了 os.environ['CUDA_VISIBLE_DEVICES'] = '3'，但是不生效，还是用的0号卡\n命令行 "
     "CUDA_VISIBLE_DEVICES=3 python train.py 就可以", "env-not-applied", ["before import torch", "set_device"]),
    # docker's --gpus without the runtime, on an older host
    ("$ sudo docker run --rm --gpus all nvidia/cuda:11.4.3-base-ubuntu20.04 nvidia-smi\ndocker: Error response from "
     "daemon: could not select device driver \"\" with capabilities: [[gpu]].\nUbuntu 18.04, driver 470.82.01",
     "device-access", ["nvidia-docker2", "nvidia-container-toolkit"]),
    # an install script asking a ROCm index for a torch it does not carry, the app then on the CPU
    ("our setup script runs: pip install torch==2.5.1 torchvision --index-url https://download.pytorch.org/whl/rocm6.0\n"
     "GPU: Radeon RX 7900 XTX, Ubuntu 22.04\nafter the install the app runs on the CPU", "torch-build",
     ["torch==2.5.1", "whl/rocm6.2"]),
    # InvokeAI through a launcher that takes an older ROCm index, another card
    ("InvokeAI installed from a launcher on Arch Linux, RX 6800 XT\nthe launcher uses the rocm5.7 index\n[InvokeAI]::"
     "INFO --> Using torch device: CPU", "torch-build", ["torch==2.4.1", "whl/rocm6.1"]),
    # a CUDA index on an RDNA3 card under Linux
    ("Fedora 40, Radeon RX 7600\npip install torch torchvision --index-url https://download.pytorch.org/whl/cu121\n"
     "torch.cuda.is_available() returns False", "torch-build", ["fresh environment", "whl/rocm6.2",
                                                               "HSA_OVERRIDE_GFX_VERSION=11.0.0"]),
    # SD.Next's log with a CPU torch on an NVIDIA card under Windows
    ("Windows 11, RTX 4070\n09:01:02-123456 INFO     Torch: torch==2.7.1+cpu torchvision==0.22.1+cpu\n"
     "09:01:03-223456 INFO     Engine: backend=Backend.DIFFUSERS compute=cpu device=cpu attention=\"Scaled-Dot-Product\"",
     "torch-build", ["--reinstall", "--use-cuda", "webui.bat"]),
    # the same on an AMD card under Linux
    ("Ubuntu 24.04, Radeon RX 7800 XT\nINFO     Torch: torch==2.6.0+cpu torchvision==0.21.0+cpu\nINFO     Engine: "
     "backend=Backend.DIFFUSERS compute=cpu device=cpu", "torch-build", ["--use-rocm", "--reinstall"]),
    # LLaMA-Factory named by its layout on Linux, four GPUs
    ("I run python src/train.py examples/train_lora/llama3_lora_sft.yaml on a server with 4 A100\nonly one GPU is "
     "used, how to train on all 4 GPUs?", "visibility",
     ["llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml"]),
    # an NCCL stall after set-up, torchrun
    ("torchrun --nproc_per_node 4 train.py on 4x RTX A5000\nNCCL INFO comm 0x5561 rank 0 nranks 4 cudaDev 0 busId 1000 "
     "- Init COMPLETE\nthen training is stuck forever at the first step", "multi-gpu-transport",
     ["gloo", "NCCL_P2P_DISABLE=1"]),
    # the same under Lightning: its strategy's backend switch
    ("pytorch_lightning Trainer(devices=4, strategy=\"ddp\") freezes\nNCCL INFO comm 0x7f rank 0 nranks 4 cudaDev 0 "
     "busId 3b000 - Init COMPLETE", "multi-gpu-transport", ["process_group_backend=\"gloo\""]),
    # rocminfo under WSL on another card and release
    ("Ubuntu 22.04 under WSL2, Radeon RX 7900 GRE, ROCm 6.1.3\n$ rocminfo\nWSL environment detected.\nhsa api call "
     "failure at: /long_pathname/rocminfo/rocminfo.cc:1306\nCall returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The "
     "runtime failed to allocate the necessary resources.", "wsl", ["hsa-runtime-rocr4wsl-amdgpu"]),
    # cuDNN 8 loading libcuda under WSL, a conda environment, another program
    ("mmdetection training in a conda env on wsl ubuntu\nCould not load library libcudnn_cnn_infer.so.8. Error: "
     "libcuda.so: cannot open shared object file: No such file or directory\nAborted (core dumped)", "wsl",
     ["/usr/lib/wsl/lib", "pytorch-cuda=11.8"]),
    # bitsandbytes asked about on Windows, in other words
    ("Is bitsandbytes usable on Windows 10? I want to QLoRA fine-tune llama with peft but it will not import",
     "wheel-platform", ["bitsandbytes>=0.43.0", "bitsandbytes-windows"]),
]

NEGATIVES = [
    # a NameError of the user's own code: not an extension build
    ("    arr = np.zeros(3)\nNameError: name 'np' is not defined", "setup.py build"),
    # the variable assigned first and working: no late-assignment reading
    ("import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\nimport torch\nprint(torch.cuda.device_count())  # 1, as "
     "expected", "set_device"),
    # the assignment and a terminal mentioned, nothing said to be ignored: no late-assignment reading
    ("I set os.environ['CUDA_VISIBLE_DEVICES'] = '2' in main.py and run it in the terminal; how do I log the loss "
     "every 10 steps?", "set_device"),
    # a CUDA index on an NVIDIA card: not the ROCm reading
    ("RTX 3060, Ubuntu 22.04\npip install torch --index-url https://download.pytorch.org/whl/cu121\n"
     "torch.cuda.is_available() returns False", "whl/rocm"),
    # ZLUDA runs the CUDA build on an AMD card by design
    ("ZLUDA on Windows 11, RX 6700 XT\npip install torch --index-url https://download.pytorch.org/whl/cu118\nRuntimeError: "
     "No CUDA GPUs are available", "ROCm build from"),
    # the index carries the pin: not the older-index reading
    ("pip install torch==2.4.1 --index-url https://download.pytorch.org/whl/rocm6.1\nRX 7900 XTX, Ubuntu 22.04\nthe app "
     "runs on the CPU", "--force-reinstall torch==2.4.1"),
    # SD.Next asked to run on the CPU: its CPU torch is what was asked
    ("./webui.sh --use-cpu all\nINFO     Torch: torch==2.8.0+cpu torchvision==0.23.0+cpu\nINFO     Engine: "
     "backend=Backend.DIFFUSERS compute=cpu device=cpu", "--reinstall"),
    # another project's src/train.py without a YAML config: not LLaMA-Factory
    ("how to train on 2 GPUs? I run python src/train.py --epochs 10 --lr 3e-4", "llamafactory-cli"),
    # NCCL set up and nothing said to stall: no backend switch
    ("NCCL INFO comm 0x43 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\nepoch 1: loss 0.41", "gloo"),
    # the WSL libcuda reading outside conda: no conda stack
    ("Ubuntu on WSL2, pip venv\nCould not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot open shared "
     "object file: No such file or directory", "pytorch-cuda="),
    # --gpus on an AMD machine: not NVIDIA's packages
    ("Radeon RX 7900 XTX, Ubuntu 24.04\ndocker run --gpus all rocm/pytorch\ndocker: Error response from daemon: could "
     "not select device driver \"\" with capabilities: [[gpu]].", "nvidia-docker2"),
    # bitsandbytes on Linux: not the Windows build
    ("Ubuntu 22.04, bitsandbytes 0.41.1\nThe installed version of bitsandbytes was compiled without GPU support.",
     "bitsandbytes-windows"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
