"""doctor, round 19 (r19b): readings for missed training cases of CUDA toolkits and drivers, containers, multi-GPU
launchers and GPU visibility: the GPUs a visibility list leaves numbered from 0, a visibility variable holding no
index, enroot's restricted /dev under Slurm's per-task GPUs, Ray Train's NCCL interface (runtime_env), the deepspeed
launcher discarding CUDA_VISIBLE_DEVICES, the linker cache after make install, a container's links to the host's NVML,
WSL 2 images carrying driver libraries, the driver a named CUDA toolkit needs, the stream-ordered allocator under a
driver older than CUDA 11.2, an arch the toolkit dropped, an nvcc older than CUDA 11, hashcat's NVRTC, TensorRT engines
from another GPU and NCCL's missing header. Each paste is written for its reading (another GPU, tool, version or wording
than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # HIP_VISIBLE_DEVICES on an MI210 box, the user seeing ranks on device 0 and 1
    ("HIP_VISIBLE_DEVICES=2,6 torchrun --nproc_per_node 2 train.py\nbut the log says it uses cuda:0, cuda:1 instead of "
     "2 and 6, is the env var being ignored?", "visibility", ["HIP_VISIBLE_DEVICES=2,6", "rocm-smi", "cuda:1"]),
    # accelerate's flag rather than the config file
    ("accelerate launch --gpu_ids 1,3 --num_processes 2 finetune.py\nwhy does torch.cuda.current_device() show device 0 "
     "is used on the first process?", "visibility", ["CUDA_VISIBLE_DEVICES=1,3", "nvidia-smi"]),
    # a script argument left out: $1 empty
    ("#!/bin/bash\nCUDA_VISIBLE_DEVICES=$1 python infer.py\nran ./run.sh without arguments on my RTX 4090 box\n"
     "RuntimeError: No CUDA GPUs are available", "visibility", ["CUDA_VISIBLE_DEVICES=0", "$1"]),
    # pyxis with --gpu-bind, torch in the container
    ("srun -N1 -n4 --gpus-per-task=1 --gpu-bind=single:1 --container-image=nvcr.io#nvidia/pytorch:24.05-py3 python -c "
     "'import torch; print(torch.cuda.device_count())'\nonly one task gets a GPU, the other three see no GPU", "visibility",
     ["ENROOT_RESTRICT_DEV=n", "--gres"]),
    # Ray Train on two nodes, a timeout rather than an error
    ("ray.train.torch TorchTrainer with ScalingConfig(num_workers=4, use_gpu=True) over two nodes of A10Gs\n"
     "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, remote process exited or there was "
     "a network error\nexport NCCL_SOCKET_IFNAME=ens5 on the head node changed nothing", "multi-gpu-transport",
     ["runtime_env", "NCCL_SOCKET_IFNAME", "env_vars"]),
    # the user's own deepspeed command with --num_gpus
    ("CUDA_VISIBLE_DEVICES=1,2 deepspeed --num_gpus 2 train.py --deepspeed ds_z3.json\nDetected "
     "CUDA_VISIBLE_DEVICES=1,2 but ignoring it because one or several of --include/--exclude/--num_gpus/--num_nodes cl "
     "args were used.", "env-not-applied", ["--include localhost:1,2", "--num_gpus"]),
    # through a wrapper that the paste does not show
    ("Detected VISIBLE_DEVICES=4,5 but ignoring it because one or several of --include/--exclude/--num_gpus/--num_nodes "
     "cl args were used. If you want to use CUDA_VISIBLE_DEVICES don't pass any of these arguments to deepspeed.",
     "env-not-applied", ["0.13.0", "--include localhost:4,5"]),
    # NCCL built from source with a prefix, nccl-tests failing to start
    ("git clone nccl && make -j src.build && sudo make install PREFIX=/opt/nccl\n./build/all_reduce_perf -g 2\n"
     "./build/all_reduce_perf: error while loading shared libraries: libnccl.so.2: cannot open shared object file: No "
     "such file or directory", "rocm-libs-missing", ["sudo ldconfig", "/opt/nccl/lib"]),
    # nvidia-smi inside a compose service with gpus set, an A100 host
    ("docker compose up, service has gpus: all\ndocker exec -it app nvidia-smi\nNVIDIA-SMI couldn't find "
     "libnvidia-ml.so library in your system.\non the host nvidia-smi shows the A100 and driver 535.129.03",
     "rocm-libs-missing", ["ln -sf libnvidia-ml.so.<driver version> libnvidia-ml.so.1", "libcuda.so.1"]),
    # WSL 2 with podman? no: docker desktop, libcuda.so.1 the colliding file
    ("Docker Desktop on Windows 11 with the WSL2 backend, RTX 3060\ndocker: Error response from daemon: failed to create "
     "task for container: nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/ab12/merged/"
     "usr/lib/x86_64-linux-gnu/libcuda.so.1: file exists: unknown.", "wsl",
     ["RUN rm -f /usr/lib/x86_64-linux-gnu/libcuda.so.1", "libnvidia-ml.so.1"]),
    # a CUDA 10.1 program on an old driver
    ("Ubuntu 18.04, GTX 1080, built darknet with CUDA 10.1\nCUDA Error: CUDA driver version is insufficient for CUDA "
     "runtime version", "driver", ["418.39"]),
    # nvcc's own release line naming 7.5
    ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 7.5, V7.5.17\n./deviceQuery\n"
     "cudaGetDeviceCount returned 35\n-> CUDA driver version is insufficient for CUDA runtime version", "driver",
     ["352.31"]),
    # the allocator on a driver for CUDA 11.1, another engine
    ("| NVIDIA-SMI 455.32.00    Driver Version: 455.32.00    CUDA Version: 11.1 |\nCUDA error: API call is not "
     "supported in the installed CUDA driver (cudaMallocAsync in the server's memory pool)", "driver",
     ["11.2", "460"]),
    # compute_30 under CUDA 11 (no version said), conda
    ("building the extension in my conda env on an RTX 3060 box\nnvcc fatal   : Unsupported gpu architecture "
     "'compute_30'", "arch-missing", ["CUDA 10.x", "compute_30"]),
    # an old system nvcc on an RTX 3070 laptop, cu121 torch
    ("pip install -e . builds the CUDA ops with the system nvcc; torch 2.3.0+cu121\nnvcc fatal : Value 'c++17' is not "
     "defined for option 'std'\nnvcc fatal   : Unsupported gpu architecture 'compute_86'", "arch-missing",
     ["CUDA 12.1 toolkit", "CUDA_HOME"]),
    # hashcat on an H100? no: an RTX 4090 under an old CUDA 11.7 host toolkit
    ("hashcat -m 22000 capture.hc22000 rockyou.txt on an RTX 4090, CUDA 11.7 installed\nnvrtc: error: invalid value "
     "for --gpu-architecture (-arch)\n* Device #1: Kernel /usr/share/hashcat/OpenCL/shared.cl build failed.",
     "arch-missing", ["--backend-ignore-cuda", "-d 2"]),
    # a TensorRT engine from an A100 on an RTX 3090, TensorRT 8.6
    ("[E] [TRT] 1: [engine.cpp::deserializeEngine::951] Error Code 1: Serialization: The engine plan file is generated "
     "on an incompatible device, expecting compute 8.6 got compute 8.0, please rebuild.", "arch-missing",
     ["target device", "ampere+"]),
    # nccl.h for a CUDA extension, CUDA named
    ("CUDA 12.1 toolkit, building the fused allreduce op\ncsrc/comm.cu:3:10: fatal error: nccl.h: No such file or "
     "directory", "rocm-libs-missing", ["libnccl-dev", "+cuda12.1"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # a list starting at 0 keeps its numbers: no renumbering to explain
    ("CUDA_VISIBLE_DEVICES=0,1 python train.py and it uses cuda:0, cuda:1 as expected, but OOM on the second",
     "nothing to change"),
    # the variable set inside the script: whether it came before CUDA started decides, not the numbering
    ("In main.py I put os.environ['CUDA_VISIBLE_DEVICES'] = '2,3' after the imports, yet it shows cuda:0 is used",
     "nothing to change"),
    # a real index with no device found is not a shell parameter
    ("CUDA_VISIBLE_DEVICES=3 python demo.py\nno CUDA-capable device is detected", "$0 expands"),
    # Slurm per-task GPUs without a container
    ("srun --ntasks=2 --gpus-per-task=1 nvidia-smi -L\nNo devices found", "ENROOT_RESTRICT_DEV"),
    # NCCL failing under torchrun, no Ray
    ("torchrun --nnodes 2 train.py\nNCCL error: unhandled system error", "runtime_env"),
    # a library missing from a pip package, no source install
    ("python -c 'import torch'\nerror while loading shared libraries: libcudnn.so.8: cannot open shared object file",
     "sudo ldconfig, then run"),
    # the "file exists" mount error on a Linux host: the catalogue's reading, not WSL's
    ("Ubuntu 22.04 host\nnvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/9f/merged/"
     "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: file exists: unknown.", "under WSL 2"),
    # a torch build with the insufficient-driver message: torch's own reading, no toolkit floor
    ("torch 2.1.0+cu121\nCUDA driver version is insufficient for CUDA runtime version", "keep the CUDA 12.1 toolkit"),
    # the allocator on a new driver: the switch, not the 11.2 floor
    ("| Driver Version: 535.104 CUDA Version: 12.2 |\nComfyUI: CUDA error: API call is not supported in the installed "
     "CUDA driver", "older than the stream-ordered allocator"),
    # compute_86 with a known CUDA 10.2 toolkit and no c++17 message: the plain nvcc-too-old reading
    ("CUDA 10.2\nnvcc fatal : Unsupported gpu architecture 'compute_86'", "does not help"),
    # NVRTC refusing an arch in torch, not hashcat
    ("torch 1.12.1+cu113 on RTX 4090\nnvrtc: error: invalid value for --gpu-architecture (-arch)",
     "--backend-ignore-cuda"),
    # an engine from another TensorRT release, not another GPU
    ("The engine plan file is not compatible with this version of TensorRT, expecting library version 8.6.1 got "
     "8.5.3, please rebuild.", "target device"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
