"""doctor, round 20 (r20b): readings for missed training cases of CUDA toolkits and drivers, containers (docker,
enroot / pyxis, podman's CDI, WSL 2), Isaac Sim / Gym / Lab, numba, Ray / FastChat / TGI launchers, multi-GPU and
GPU visibility: numba's minor version compatibility, a conda toolkit beside the driver's CUDA said in words, a Ray Tune
trial without a GPU, Slurm without ConstrainDevices, the container hook's ldconfig, WSL 2's hook initialisation, the
CDI spec's hooks, nvidia-persistenced's socket, a server's SIGBUS, torch 1.12.0's eager CUDA, a torch installed beside
an app's own Python, Windows' multi-GPU without NCCL, NCCL across nodes, NCCL's watchdog faults, a model split over
GPUs, the Kaggle / Colab T4, a hybrid laptop's default adapter, Isaac Sim's validated driver and Vulkan's devices.
Each paste is written for its reading (another GPU, tool, version or wording than the mined case that asked for it);
the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # numba on an L40S under a CUDA 12.2 driver, PTX from CUDA 12.6
    ("from numba import cuda\nnumba.cuda.cudadrv.driver.LinkerError: [222] Call to cuLinkAddData results in "
     "CUDA_ERROR_UNSUPPORTED_PTX_VERSION\n| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |",
     "driver", ["pynvjitlink-cu12", "NUMBA_CUDA_ENABLE_PYNVJITLINK=1"]),
    # CuPy from conda with a CUDA 11.7 toolkit, the driver's CUDA said in words
    ("conda install -c conda-forge cupy pulled cudatoolkit 11.7\nmy driver supports CUDA 11.4 only\n"
     "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was "
     "compiled with an unsupported toolchain.", "driver", ["cudatoolkit=11.4"]),
    # a Ray Tune trial on an A10G that sees no GPU
    ("using Ray Tune with tune.run(train_fn, config=cfg)\nray.exceptions.RayTaskError(RuntimeError): "
     "ray::ImplicitFunc.train() (pid=2211, ip=10.0.0.5)\nRuntimeError: No CUDA GPUs are available",
     "visibility", ["tune.with_resources", "\"gpu\": 1"]),
    # apptainer under Slurm on an H100 node, device nodes missing, no ConstrainDevices in cgroup.conf
    ("$ cat /etc/slurm/cgroup.conf\nConstrainCores=yes\nConstrainRAMSpace=yes\n$ srun --gres=gpu:1 apptainer exec "
     "--nv pytorch.sif nvidia-smi\nls: cannot access '/dev/nvidia2': No such file or directory\n"
     "RuntimeError: CUDA error: no CUDA-capable device is detected", "visibility", ["ConstrainDevices=yes"]),
    # the container hook on a Debian host pointing at Ubuntu's ldconfig
    ("Debian 12, docker run --gpus all nvidia/cuda:12.2.0-base-ubuntu22.04 nvidia-smi\ndocker: Error response from "
     "daemon: failed to create task: nvidia-container-cli: ldcache error: open failed: /sbin/ldconfig.real: no such "
     "file or directory: unknown.", "device-access", ["@/sbin/ldconfig", "/etc/nvidia-container-runtime/config.toml"]),
    # docker inside a WSL 2 Ubuntu on Windows 10
    ("WSL2 Ubuntu 20.04 on Windows 10, docker run --gpus all ubuntu nvidia-smi\nnvidia-container-cli: "
     "initialization error: driver error: failed to process request: unknown", "wsl", ["19044", "Insider"]),
    # podman with a CDI device on Fedora, the create-symlinks hook failing
    ("podman run --rm --device nvidia.com/gpu=all fedora nvidia-smi\nError: OCI runtime error: crun: "
     "error executing hook `/usr/bin/nvidia-cdi-hook` (exit code: 1)\nnvidia-container-toolkit 1.17.0",
     "device-access", ["1.17.1", "nvidia-ctk cdi generate"]),
    # docker (not enroot) on a host whose persistenced socket cannot be mounted
    ("docker run --gpus all nvcr.io/nvidia/pytorch:23.10-py3\nnvidia-container-cli: mount error: file creation "
     "failed: /var/lib/docker/overlay2/abc/merged/run/nvidia-persistenced/socket: no such device or address",
     "device-access", ["libnvidia-container-tools", "1.12"]),
    # vLLM's worker killed by SIGBUS in a container with tensor parallelism
    ("docker run --gpus all vllm/vllm-openai --tensor-parallel-size 4\nERROR: worker process 88 was killed by "
     "signal 7 (SIGBUS)", "multi-gpu-transport", ["--shm-size", "--ipc=host"]),
    # torch 1.12.0 named as a pip pin, the variable set after import
    ("pip install torch==1.12.0\nimport torch\nos.environ['CUDA_VISIBLE_DEVICES'] = '2'\nstill runs on GPU 0, the "
     "setting has no effect", "env-not-applied", ["1.12.1"]),
    # Applio with an RTX 5080 after a pip install into the system Python
    ("Applio 3.2.9 on Windows 11 with an RTX 5080\nI installed the cu128 torch with pip in my own venv\n"
     "run-applio.bat still fails: sm_120 is not compatible with the current PyTorch installation",
     "env-not-applied", ["env\\python -m pip install", "cu128"]),
    # a HF Trainer script on two RTX 4090s under Windows, torchrun failing
    ("Windows 11, torch 2.3.1+cu121\nset CUDA_VISIBLE_DEVICES=0,1\ntorchrun --nproc_per_node 2 train.py "
     "(transformers Trainer)\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError", "multi-gpu-transport",
     ["ddp_backend", "gloo"]),
    # torchrun on three nodes, ncclRemoteError
    ("torchrun --nnodes 3 --nproc_per_node 8 --rdzv_endpoint 10.1.0.1:29400 train.py\ntorch.distributed."
     "DistBackendError: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5\n"
     "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
     "multi-gpu-transport", ["NCCL_SOCKET_IFNAME"]),
    # rsl_rl on four RTX 6000 Ada, the watchdog's illegal access
    ("python -m torch.distributed.run --nproc_per_node=4 scripts/rsl_rl/train.py --task Isaac-Velocity-Flat-Anymal-"
     "D-v0 --distributed\n[rank2]: Process group watchdog thread terminated with exception: CUDA error: an illegal "
     "memory access was encountered", "multi-gpu-transport", ["NCCL_SHM_DISABLE=1", "NCCL_ALGO=Ring"]),
    # FastChat's model worker on two A6000s using one
    ("python3 -m fastchat.serve.model_worker --model-path lmsys/vicuna-13b-v1.5 --num-gpus 2\nonly one GPU is used, "
     "the second GPU stays idle at 0%", "visibility", ["--max-gpu-memory"]),
    # Colab with a K80-era... a P100 notebook on Colab under torch 2.8 cu128
    ("Google Colab, Tesla P100-PCIE-16GB, torch 2.8.0+cu128\nRuntimeError: CUDA error: no kernel image is available "
     "for execution on the device", "arch-missing", ["T4", "cu126"]),
    # onnxruntime-directml on a Radeon laptop choosing the Intel iGPU
    ("Windows 11 laptop, Intel Iris Xe + NVIDIA RTX 4060 Laptop\nonnxruntime-directml 1.17, providers="
     "['DmlExecutionProvider']\nit is using the integrated Intel Iris GPU instead of the RTX", "visibility",
     ["High performance", "python.exe", "device_id"]),
    # Isaac Sim 5.1 on an RTX 4090 with a 590 driver
    ("Isaac Sim 5.1.0 crashes at start (segmentation fault) after updating the driver\nUbuntu 24.04, RTX 4090\n"
     "| NVIDIA-SMI 590.44.01   Driver Version: 590.44.01   CUDA Version: 13.1 |", "driver", ["580.65.06"]),
    # an Omniverse app in a cloud VM with no Vulkan device
    ("Omniverse Kit on an AWS g5 instance (NVIDIA A10G)\n[Error] [carb.graphics-vulkan.plugin] "
     "vkEnumeratePhysicalDevices failed. No physical device is found.", "rocm-libs-missing",
     ["libegl1", "libvulkan1"]),
    # a Vulkan viewer on a laptop with an RTX 3070 falling back to llvmpipe
    ("Ubuntu 22.04 laptop, GeForce RTX 3070 Laptop GPU, driver 550\nGPU: llvmpipe (LLVM 15.0.7, 256 bits)\n"
     "the viewer window stays black", "visibility", ["MESA_VK_DEVICE_SELECT", "vulkaninfo"]),
]

NEGATIVES = [
    # numba under a CUDA 11 driver with PTX from CUDA 12: across a major release, no pynvjitlink
    ("numba.cuda.cudadrv.driver.LinkerError: [222] Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
     "\nptxas application ptx input, line 9; fatal   : Unsupported .version 8.5; current version is '7.8'",
     "pynvjitlink"),
    # a Ray task that asked for its GPU: not the missing request
    ("@ray.remote(num_gpus=1)\ndef f(): ...\nray.exceptions.RayTaskError: ray::f() RuntimeError: No CUDA GPUs are "
     "available", "tune.with_resources"),
    # Slurm with ConstrainDevices already on
    ("cat /etc/slurm/cgroup.conf\nConstrainDevices=yes\nsrun --gres=gpu:1 --container-image=nvcr.io#nvidia/pytorch:24.01"
     "-py3 python -c 'import torch'\nRuntimeError: No CUDA GPUs are available", "ConstrainDevices=yes"),
    # the hook's initialization error on a native Linux host: not WSL's Windows build
    ("Ubuntu 22.04 server, docker run --gpus all ubuntu nvidia-smi\nnvidia-container-cli: initialization error: nvml "
     "error: driver not loaded: unknown", "Insider"),
    # podman's unresolvable CDI device: the stale spec, not the toolkit release
    ("podman run --device nvidia.com/gpu=all ubuntu nvidia-smi\nError: setting up CDI devices: unresolvable CDI "
     "devices nvidia.com/gpu=all", "1.17.1"),
    # torch 2.1 with the variable set late: no 1.12.1
    ("torch 2.1.0\nimport torch\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\nthe setting has no effect, still GPU 0",
     "1.12.1"),
    # a Linux multi-GPU NCCL failure: not Windows' gloo
    ("Ubuntu 22.04, torchrun --nproc_per_node 2 train.py (transformers Trainer)\nCUDA_VISIBLE_DEVICES=0,1\n"
     "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp, unhandled cuda error", "ddp_backend"),
    # one machine's NCCL internal error: not the nodes' interface
    ("torchrun --nproc_per_node 4 train.py\nncclInternalError: Internal check failed.", "NCCL_SOCKET_IFNAME=<interface>"),
    # an illegal access in a plain training script without NCCL: not the transport variables
    ("python train.py\nRuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might "
     "be asynchronously reported", "NCCL_ALGO=Ring"),
    # a P100 on the user's own server: no accelerator switch
    ("Tesla P100-PCIE-16GB, torch 2.8.0+cu128 on my workstation\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "accelerator"),
    # Isaac Sim 5.1 on its validated driver: not the driver reading
    ("Isaac Sim 5.1.0 crashes at start\n| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |",
     "install the validated driver"),
    # Mesa's message on an AMD-only machine: no NVIDIA device to select
    ("Radeon RX 7800 XT, Fedora 40\nvulkan: No DRI3 support detected - required for presentation",
     "MESA_VK_DEVICE_SELECT=10de"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
