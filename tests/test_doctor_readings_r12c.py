"""doctor, round 12 (issue 63): readings for missed training cases of batch 11 (containers' device rules, the NVIDIA
driver's build and start-up, a variable in a service's unit, Strix Halo's CWSR hang). Each paste is written for its
reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the hook refused the device cgroup under cgroup v1 (another wording), docker inside an Incus container
    ("docker inside an incus container on Debian 12, RTX A4000\n$ docker run --rm --gpus all nvidia/cuda:12.2.0-base-"
     "ubuntu22.04 nvidia-smi\ndocker: Error response from daemon: OCI runtime create failed: nvidia-container-cli: mount "
     "error: open failed: /sys/fs/cgroup/devices/user.slice/devices.allow: permission denied: unknown.",
     "device-access", ["no-cgroups = true", "/etc/nvidia-container-runtime/config.toml"]),
    # the same under cgroup v2 from rootless docker, no LXC
    ("rootless docker on Fedora 40, toolkit 1.16.2, GeForce RTX 4070\nnvidia-container-cli: mount error: failed to add "
     "device rules: unable to find any existing device filters attached to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE)"
     " failed: operation not permitted", "device-access", ["no-cgroups = true", "--device /dev/nvidia0"]),
    # the 1.14.0 release that ignored config.toml, named as the package (another GPU, podman wording around it)
    ("after apt upgrade to nvidia-container-toolkit 1.14.0 our rootless GPU containers stopped; no-cgroups = true is "
     "still in config.toml\nnvidia-container-cli: mount error: failed to add device rules: unable to find any existing "
     "device filters attached to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted\nTesla "
     "V100", "device-access", ["1.14.1"]),
    # NVML refused inside a container on an SELinux host (Rocky Linux, SELinux not named by the user, docker-ce)
    ("Rocky Linux 9.3, docker-ce 25, nvidia-container-toolkit 1.15.0, 2x L40S\n$ docker run --rm --gpus all "
     "nvidia/cuda:12.3.2-base-rockylinux9 nvidia-smi\nFailed to initialize NVML: Insufficient Permissions\nwith "
     "--privileged it works", "device-access", ["restorecon", "nvidia-container-cli -k list"]),
    # cudart's error 35 in a compose service whose host driver is new enough, and nothing asks for the GPU
    ("whisperx in docker compose on Ubuntu 22.04\nhost nvidia-smi: Driver Version: 550.54.14  CUDA Version: 12.4\n"
     "inside the container: RuntimeError: CUDA failed with error CUDA driver version is insufficient for CUDA runtime "
     "version", "device-access", ["--gpus all", "NVIDIA_VISIBLE_DEVICES"]),
    # distrobox refusing another engine flag (an NVIDIA box, --group-add first): after --
    ("$ distrobox create cuda-box --image docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 --group-add video "
     "--device=/dev/nvidia0\nERROR: Invalid flag '--group-add'", "device-access",
     ["-- --group-add video --device /dev/nvidia0", "--additional-flags"]),
    # a TrueNAS app (Immich's ROCm machine learning, another release and wording) without /dev/kfd
    ("TrueNAS SCALE 25.04.2, Immich app with the ROCm machine-learning image, RX 7600 passed as non-NVIDIA GPU\n"
     "HIP failure 100: no ROCm-capable device is detected\nls /dev/kfd inside the app: missing, only /dev/dri is there",
     "device-access", ["25.10"]),
    # the closed module refused at modpost on another symbol, a DKMS build of another 535 release
    ("Building DKMS module nvidia/535.129.03 for 6.1.0-18-amd64 ... FAILED\nERROR: modpost: GPL-incompatible module "
     "nvidia.ko uses GPL-only symbol '__rcu_read_lock'", "driver", ["535.183.08", "open kernel modules"]),
    # the same on another branch: the newest of that branch, no 535 number
    ("nvidia-dkms 545.29.06 on kernel 6.7.3-arch1-1\nERROR: modpost: GPL-incompatible module nvidia.ko uses GPL-only "
     "symbol '__rcu_read_unlock'", "driver", ["newest 545 release", "open kernel modules"]),
    # cuInit's NOT_INITIALIZED from another program (ffmpeg), another Blackwell card and driver
    ("RTX 5090, driver 575.64.03, Fedora 42\n$ ffmpeg -hwaccel cuda -i in.mp4 out.mp4\n[AVHWDeviceContext] "
     "cu->cuInit(0) failed -> CUDA_ERROR_NOT_INITIALIZED: initialization error\nnvidia-smi shows the card fine",
     "driver", ["uvm_disable_hmm=1", "/etc/modprobe.d"]),
    # a variable in the unit's drop-in (another variable), the server typed in a terminal
    ("I put Environment=\"OLLAMA_MODELS=/data/ollama\" in /etc/systemd/system/ollama.service.d/override.conf but "
     "when I start ollama serve it still downloads models to ~/.ollama", "env-not-applied",
     ["systemctl restart ollama", "export OLLAMA_MODELS=/data/ollama"]),
    # Strix Halo hanging in another tool (llama.cpp) under another distribution's kernel
    ("llama.cpp HIP build on a Framework Desktop (Ryzen AI MAX+ 395, gfx1151), Fedora 42, kernel "
     "6.15.9-201.fc42.x86_64\nHW Exception by GPU node-1 (Agent handle: 0x55d0) reason :GPU Hang", "gpu-hang",
     ["amdgpu.cwsr_enable=0", "6.18"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # NVML refused on an Ubuntu host with no SELinux: not the relabel
    ("Ubuntu 22.04, docker run --gpus all nvidia/cuda:12.2.0-base-ubuntu22.04 nvidia-smi\nFailed to initialize NVML: "
     "Insufficient Permissions", "restorecon"),
    # error 35 in a container that asked for the GPU, driver too old for the CUDA named: not the runtime reading
    ("docker run --gpus all pytorch/pytorch:2.7.0-cuda12.8-cudnn9-runtime python -c 'import torch; torch.zeros(1)."
     "cuda()'\nRuntimeError: CUDA driver version is insufficient for CUDA runtime version\nDriver Version: 535.183.01",
     "NVIDIA_VISIBLE_DEVICES=<"),
    # a distrobox option of its own refused (a typo): not the engine's flags
    ("$ distrobox create --nmae box --image fedora:40\nERROR: Invalid flag '--nmae'", "-- --"),
    # a TrueNAS release that passes /dev/kfd already
    ("TrueNAS SCALE 25.10.1, Frigate ROCm image: /dev/kfd missing inside the container", "upgrade TrueNAS to 25.10"),
    # another modpost error (a symbol on the 570 branch): no 535 release is named
    ("nvidia 570.153.02 on 6.15.0-cachyos\nERROR: modpost: GPL-incompatible module nvidia.ko uses GPL-only symbol "
     "'__vma_start_write'", "535.183.08"),
    # jax's own NOT_INITIALIZED after its backend failed: not cuInit, not HMM
    ("jax.devices()\nCUDA backend failed to initialize: jaxlib/cuda/versions_helpers.cc:90: operation "
     "gpuDeviceGetAttribute( &major, GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) failed: "
     "CUDA_ERROR_NOT_INITIALIZED", "uvm_disable_hmm"),
    # the service's own ExecStart= names "ollama serve" and the user exported a variable in the shell: not hand-started
    ("sudo systemctl cat ollama\n[Service]\nExecStart=/usr/local/bin/ollama serve\nI did export "
     "OLLAMA_HOST=0.0.0.0 in .bashrc but ollama still listens on 127.0.0.1", "stop the hand-started server"),
    # Strix Halo hanging under a kernel that has the CWSR fix: not the boot flag from this reading
    ("gfx1151 Radeon 8060S, kernel 6.18.3-arch1-1, ROCm 7.2.1: HW Exception by GPU node-1 reason :GPU Hang",
     "keep it until a kernel 6.18"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
