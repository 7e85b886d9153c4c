"""doctor, round 14 (issue 63): readings for missed training cases of GPU visibility, multi-GPU transport, device
access, the driver under an operator and extension ABI. Each paste is written for its reading (another GPU, tool,
scheduler, version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it
does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a source-built extension failing to link after a torch upgrade: the rebuild goes past pip's wheel cache
    ("upgraded torch to 2.4.0 and now\nImportError: /home/ana/.venv/lib/python3.11/site-packages/pytorch3d/_C.cpython-"
     "311-x86_64-linux-gnu.so: undefined symbol: _ZN3c1010Dispatcher17runRecordFunctionERN2at14RecordFunctionE",
     "abi-mismatch", ["--no-cache-dir"]),
    # a source-built kernel package the tool table knows, the same: its own rebuild goes past the cache too
    ("torch 2.5.1+cu124\nImportError: /opt/conda/lib/python3.11/site-packages/causal_conv1d_cuda.cpython-311-x86_64-"
     "linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "abi-mismatch",
     ["--no-build-isolation --no-cache-dir"]),
    # a Ray actor that never asked for a GPU sees none (an actor, torch's own check, no placement group)
    ("import ray, torch\nray.init()\n@ray.remote\nclass Worker:\n    def probe(self):\n        return "
     "torch.cuda.is_available()\nw = Worker.remote()\nprint(ray.get(w.probe.remote()))  # prints False on a 4xA100 "
     "node", "visibility", ["num_gpus=1"]),
    # a SLURM batch job without a GPU request
    ("#!/bin/bash\n#SBATCH --job-name=ft\n#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --time=04:00:00\nsrun python "
     "train.py\n\nlog: RuntimeError: No CUDA GPUs are available (the node has 4 A100 GPUs)", "visibility",
     ["--gres=gpu:4"]),
    # more ranks than GPUs, the count said in words (two cards): the launch count that fits
    ("torchrun --nproc_per_node=4 pretrain.py on my workstation with two RTX 3090 GPUs\nRuntimeError: CUDA error: "
     "invalid device ordinal", "visibility", ["--nproc_per_node=2"]),
    # a plain python start on a server of several cards, the count said in Chinese, on Linux
    ("服务器有2张A100显卡，训练命令：python train_sft.py --do_train --model_name_or_path qwen-7b\nRuntimeError: Expected "
     "all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!", "visibility",
     ["CUDA_VISIBLE_DEVICES=0 python", "--nproc_per_node 2"]),
    # the same on Windows, in English: the variable set the Windows way or in the script
    ("Windows 11, 2 GPUs (RTX 4090 + RTX 3090). I run: python finetune.py --do_train --finetuning_type lora\n"
     "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1!",
     "visibility", ["$env:CUDA_VISIBLE_DEVICES", "os.environ"]),
    # several processes fail in a container and one works: NCCL's shared memory
    ("Running in a podman container on 4x L40S. accelerate launch --num_processes 4 train.py dies right at "
     "accelerator.prepare, no traceback. With --num_processes 1 it works fine.", "multi-gpu-transport",
     ["--ipc=host"]),
    # a render node owned by root in an Incus container, the service user in render
    ("Incus container running ollama.service as user ollama (member of render and video).\nAfter every restart "
     "/dev/dri/renderD128 is crw-rw---- root root and ollama logs: no compatible GPUs were discovered", "device-access",
     ["chgrp render", "/dev/dri/renderD128", "systemctl edit ollama"]),
    # an AMD GPU a tool finds but cannot use, on a fresh Linux install
    ("Fedora 42 fresh install, Radeon RX 7900 XTX (gfx1100). The app lists the GPU as detected but not usable and "
     "every model runs on the CPU.", "device-access", ["usermod -aG render,video"]),
    # the AMD GPU operator over the inbox amdgpu: another error, another GPU
    ("Installed the AMD GPU Operator (amd-gpu-operator helm chart) on our MI210 nodes, k8s 1.30. In the pod:\n"
     "python -c 'import torch; print(torch.cuda.get_device_properties(0))'\nhipErrorInvalidValue raised by "
     "hipGetDeviceProperties", "driver",
     ["blacklist amdgpu", "update-initramfs -u"]),
    # NVIDIA's operator with nouveau still holding the GPU
    ("nvidia gpu-operator driver pod CrashLoopBackOff on a fresh Ubuntu node, nouveau is loaded on the host; in the "
     "test pod: RuntimeError: No CUDA GPUs are available", "driver",
     ["blacklist nouveau", "update-initramfs -u"]),
    # a blacklist written and the module still loaded after a reboot
    ("I put blacklist nouveau in /etc/modprobe.d/blacklist-nouveau.conf and rebooted, but lsmod | grep nouveau shows "
     "it is still loaded and the installer says the Nouveau kernel driver is currently in use by your system.",
     "driver", ["update-initramfs -u", "dracut -f"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # the Ray task asked for its GPU: not the num_gpus answer
    ("@ray.remote(num_gpus=1)\ndef f():\n    import torch\n    return torch.cuda.is_available()\nray.get(f.remote())  "
     "# False", "request the GPU on the task itself"),
    # the SLURM job asked for GPUs already
    ("#SBATCH --gres=gpu:2\n#SBATCH --nodes=1\nsrun python train.py\nRuntimeError: No CUDA GPUs are available",
     "#SBATCH --gres=gpu:"),
    # one GPU working and four not: no count of the machine's GPUs to launch with
    ("works on one GPU but fails with 4 GPUs\ntorchrun --nproc_per_node=4 train.py\nRuntimeError: CUDA error: invalid "
     "device ordinal", "--nproc_per_node=1"),
    # the container already shares the host's IPC: not the same flag again
    ("docker run --gpus all --ipc=host img; accelerate launch --num_processes 2 train.py fails at accelerator.prepare, "
     "--num_processes 1 works fine", "start the container with --ipc=host"),
    # a root-owned /dev/kfd on the host itself (udev runs there): not the container's chgrp
    ("Ubuntu 24.04 workstation, ls -l /dev/kfd shows crw-rw---- root root, rocminfo fails as my user", "chgrp render"),
    # a GPU found but not usable on Windows: no Linux groups
    ("Windows 11, Radeon RX 6800 XT, the app shows the GPU as detected but not usable, runs on CPU",
     "usermod -aG render,video"),
    # a card outside ROCm's builds found but not usable: its arch comes first, not the groups
    ("Ollama on Ubuntu 24.04, RX 6600 detected but unusable, everything runs on the CPU", "usermod -aG render,video"),
    # a plain python start with one GPU visible and one device: not the several-GPU launcher answer
    ("python train.py --do_train on one RTX 4090\nRuntimeError: Expected all tensors to be on the same device, but "
     "found at least two devices, cpu and cuda:0!", "torchrun --nproc_per_node"),
    # the NVIDIA operator without nouveau said: not the blacklist
    ("nvidia gpu-operator on k8s 1.29, test pod: RuntimeError: No CUDA GPUs are available", "blacklist nouveau"),
    # nouveau said to be gone under the NVIDIA operator: not its blacklist
    ("nvidia gpu-operator, nouveau is not loaded (lsmod is empty), test pod: RuntimeError: No CUDA GPUs are "
     "available", "blacklist nouveau"),
    # the initramfs already rebuilt after the blacklist: not the rebuild again
    ("blacklist nouveau added, ran sudo update-initramfs -u and rebooted, nouveau still loaded",
     "the blacklist is not in the initramfs"),
    # an extension built for NumPy 1.x: no pip cache in its answer
    ("ImportError: numpy.core.multiarray failed to import\nA module that was compiled using NumPy 1.x cannot be run in "
     "NumPy 2.0.0", "--no-cache-dir"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
