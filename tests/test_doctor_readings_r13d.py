"""doctor, round 13 (issue 63): readings for missed training cases of the multi-gpu-transport, env-not-applied and
driver families (a server's variable in a shell start-up file, the process group's backend on Windows, NCCL's sockets
between nodes and pods, a container's /dev/shm for a data loader, amdgpu-dkms on a mainline kernel, NVIDIA driver
pieces without the driver). Each paste is written for its reading (another GPU, tool, version or wording than the
mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # an Ollama variable in ~/.zshrc, said not to take: the service's unit, with the user's own value
    ("Ubuntu 24.04. I put export OLLAMA_HOST=0.0.0.0:11434 in my ~/.zshrc and rebooted, but ollama still listens "
     "on 127.0.0.1 only", "env-not-applied",
     ["systemctl edit ollama.service", "Environment=\"OLLAMA_HOST=0.0.0.0:11434\"", "daemon-reload"]),
    # the models folder in ~/.profile: the unit, and the ollama user's ownership of the folder
    ("added `export OLLAMA_MODELS=/data/llm` to ~/.profile, but the models are still stored in /usr/share/ollama",
     "env-not-applied", ["systemctl edit ollama.service", "OLLAMA_MODELS=/data/llm", "chown -R ollama:ollama /data/llm"]),
    # LocalAI's own variable: its own unit
    ("local-ai installed with the install script on Debian 12\nexport LOCALAI_THREADS=12 is in .bashrc but it is "
     "ignored", "env-not-applied", ["systemctl edit local-ai.service", "LOCALAI_THREADS=12"]),
    # docker pull behind a proxy, the proxy exported in .bashrc: the daemon's unit
    ("export HTTPS_PROXY=http://proxy.corp:3128 is in my ~/.bashrc\n$ docker pull rocm/pytorch:latest\nError "
     "response from daemon: Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such "
     "host\nthe proxy setting doesn't work", "env-not-applied",
     ["systemctl edit docker.service", "HTTPS_PROXY=http://proxy.corp:3128"]),
    # Lightning on Windows: the backend on the strategy; the variable a 2.x release does not read
    ("Windows 11, 2x RTX 4090\nset PL_TORCH_DISTRIBUTED_BACKEND=gloo\npython fit.py\nlightning 2.1.3\nthe distributed "
     "backend is still nccl, how do I switch to gloo?", "multi-gpu-transport",
     ["process_group_backend=\"gloo\"", "does not read PL_TORCH_DISTRIBUTED_BACKEND"]),
    # accelerate on Windows asking for gloo: accelerate's own kwargs handler
    ("How can I use the gloo backend with accelerate on Windows 10? accelerate launch --multi_gpu --num_processes 2 "
     "train.py", "multi-gpu-transport", ["InitProcessGroupKwargs(backend=\"gloo\")"]),
    # two hosts in NCCL's log prefix, a refused bootstrap: NCCL_SOCKET_IFNAME with the NIC one node used
    ("gpu-a:4411:4502 [0] NCCL INFO NET/Socket : Using [0]enp65s0f1:10.0.3.11<0>\n"
     "gpu-b:9120:9188 [2] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<51231> failed : "
     "Connection refused\ngpu-b:9120:9188 [2] NCCL INFO bootstrap.cc:85 -> 2", "multi-gpu-transport",
     ["NCCL_SOCKET_IFNAME=enp65s0f1", "^docker0,lo"]),
    # a PyTorchJob in Kubernetes with NCCL refused, horovod over mpirun: the pod's eth0 passed to every rank
    ("running horovodrun across pods (kind: MPIJob) on our k8s cluster\nNCCL WARN Call to connect returned "
     "Connection refused, retrying\nthe job never starts", "multi-gpu-transport",
     ["NCCL_SOCKET_IFNAME=eth0", "mpirun -x NCCL_SOCKET_IFNAME", "/etc/nccl.conf"]),
    # a data loader's shared-memory file in a Kubernetes pod: the pod's emptyDir at /dev/shm
    ("training in a pod on our kubernetes cluster (JupyterHub)\n  File \"/usr/lib/python3/dist-packages/torch/"
     "multiprocessing/reductions.py\", line 560, in reduce_storage\nRuntimeError: unable to open shared memory "
     "object </torch_88_2033410532_0> in read-write mode: No space left on device (28)", "multi-gpu-transport",
     ["emptyDir", "medium: Memory", "/dev/shm"]),
    # the same in a docker container started by the user: the container's flags
    ("inside a docker container on my workstation (RTX 3090)\nERROR: Unexpected bus error encountered in worker. This "
     "might be caused by insufficient shared memory (shm).", "multi-gpu-transport", ["--ipc=host", "/dev/shm"]),
    # amdgpu-dkms of another ROCm on another mainline kernel: --no-dkms, the kernel's own amdgpu newer than the module
    ("ROCm 6.4.1 install on Ubuntu 24.04, kernel from the mainline PPA\nBuilding module amdgpu/6.12.12 for kernel "
     "6.15.3-061503-generic\nAutoinstall of module amdgpu/6.12.12-2164967.24.04 for kernel 6.15.3-061503-generic\n"
     "ERROR (dkms apport): kernel package linux-headers-6.15.3-061503-generic is not supported", "driver",
     ["--no-dkms", "newer than the DKMS module's 6.12"]),
    # NVIDIA driver pieces of one branch with llama.cpp's Vulkan build finding nothing: the whole driver of the branch
    ("Ubuntu 22.04, RTX 4070\nsudo apt install libnvidia-gl-550 nvidia-utils-550\n./llama-cli -m q4.gguf -ngl 99\n"
     "ggml_vulkan: No devices found.\nthe GPU is not used", "driver",
     ["sudo apt install nvidia-driver-550", "reboot"]),
]

NEGATIVES = [
    # the variable given to the hand-started server in the same shell: it reaches it
    ("export OLLAMA_MODELS=/data/llm\nollama serve\nthe models still go to ~/.ollama, it doesn't work",
     "systemctl edit ollama.service"),
    # the server in a container (-e): the container's reading, not the unit's
    ("docker run -d -e OLLAMA_HOST=0.0.0.0 -p 11434:11434 ollama/ollama\nexport OLLAMA_HOST=0.0.0.0 in .bashrc "
     "doesn't work", "systemctl edit ollama.service"),
    # OLLAMA_HOST naming another machine: the CLI's own variable on a client, not the service's
    ("export OLLAMA_HOST=192.168.1.20:11434 in ~/.bashrc on my laptop, ollama list doesn't work",
     "systemctl edit ollama.service"),
    # a variable in .bashrc that works, no complaint
    ("I keep export OLLAMA_MODELS=/data/llm in ~/.bashrc for the CLI; everything works fine", "systemctl edit"),
    # Lightning on Linux with nccl working: no backend reading
    ("Ubuntu 22.04, lightning 2.2.0, 4x A100, strategy=ddp\ntraining runs fine with nccl", "process_group_backend"),
    # NCCL refused on one host (no second node, no pod): not a socket-interface reading
    ("ws1:2201:2290 [0] NCCL INFO Bootstrap : Using eno1:192.168.1.5<0>\nws1:2201:2290 [0] misc/socket.cc:484 NCCL "
     "WARN socketStartConnect: Connect to 192.168.1.5<40111> failed : Connection refused", "^docker0,lo"),
    # a data loader's bus error with no container said: the out-of-memory reading keeps it
    ("RuntimeError: DataLoader worker (pid 3120) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory. Please try to raise your shared memory limit.", "emptyDir"),
    # the file-descriptor form of the shared-memory error: not /dev/shm's size
    ("RuntimeError: unable to open shared memory object </torch_3310_1947420313_997> in read-write mode: Too many "
     "open files (24)", "emptyDir"),
    # a mainline kernel with NVIDIA's DKMS module: no amdgpu-install
    ("Building module nvidia/550.120 for kernel 6.11.2-061102-generic failed\nERROR (dkms apport): kernel package "
     "linux-headers-6.11.2-061102-generic is not supported", "--no-dkms"),
    # the whole driver installed beside its libraries: no pieces reading
    ("sudo apt install nvidia-driver-535 libnvidia-gl-535\nvulkaninfo: ERROR_INITIALIZATION_FAILED",
     "only pieces"),
    # driver pieces inside WSL: not the Linux driver
    ("WSL2 Ubuntu 22.04\nsudo apt install nvidia-utils-535\nnvidia-smi: NVIDIA-SMI has failed because it couldn't "
     "communicate with the NVIDIA driver", "sudo apt install nvidia-driver-535"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
