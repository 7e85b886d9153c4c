"""doctor, round 7 (issue 63): readings for the driver, WSL, device-access and platform families that carry to pastes
doctor has never seen. Each paste is written for the reading (another GPU, tool, wording or value than the mined case
it came from); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text

# (paste, family, phrases the fix must say)
READINGS = [
    # wsl: the driver's libcuda shown in WSL's folder (ldconfig -p), the unversioned name not found
    ("$ ldconfig -p | grep libcuda\n\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/wsl/lib/libcuda.so.1\n"
     "RuntimeError: libcuda.so: cannot open shared object file: No such file or directory (triton, RTX 4070)",
     "wsl", ["/usr/lib/wsl/lib", "LD_LIBRARY_PATH"]),
    # wsl: a program that hangs once it touches an AMD GPU WSL's ROCm does not support
    ("Ubuntu 22.04 under WSL2, RX 6800 XT, ROCm 6.1.3: python freezes at model.to('cuda'), no error", "wsl",
     ["WSL", "native Linux"]),
    ("WSL2 里用 RX 6750 XT 跑 torch，一调用 GPU 就卡住", "wsl", ["WSL"]),
    # wsl: NVML of another copy than WSL's
    ("LocalAI under WSL2 with a GeForce RTX 3060: gpu discovery: nvml vram init failure: 9", "wsl",
     ["/usr/lib/wsl/lib/libnvidia-ml.so.1", "ldconfig"]),
    # wsl: collectives across GPUs, asked or failing
    ("Is DistributedDataParallel with NCCL supported on WSL 2? two RTX 3090s", "wsl", ["WSL", "NCCL_P2P_DISABLE=1"]),
    ("torchrun --nproc_per_node 2 train.py on wsl2 fails: NCCL error: unhandled system error", "wsl",
     ["NCCL_P2P_DISABLE=1"]),
    # driver: CUDA's unknown error (999) as a tool prints it, after the laptop slept
    ("llama.cpp server after resume from suspend: cuInit failure: 999, RTX 3070 Laptop GPU", "driver",
     ["nvidia_uvm", "NVreg_PreserveVideoMemoryAllocations=1"]),
    # driver: the kernel module and libcuda of different versions, as XLA words it
    ("tensorflow: kernel version 535.104.5 does not match DSO version 545.23.6 -- cannot find working devices in "
     "this configuration", "driver", ["reboot", "nvidia-driver-545"]),
    # driver: a named AMD Windows driver release after which the GPU is not used
    ("Windows 10, RX 7800 XT: after updating to AMD Software Adrenalin 24.12.1 the GPU is not being used by ComfyUI-"
     "ZLUDA anymore", "driver", ["24.12.1", "roll back"]),
    # driver: dkms's leftover tree of another amdgpu version: the package's own script rebuilds and registers it
    ("Error! Could not locate dkms.conf file.\nFile: /var/lib/dkms/amdgpu/6.3.6-1697589.22.04/source/dkms.conf does "
     "not exist.", "driver", ["dpkg-reconfigure amdgpu-dkms", "/var/lib/dkms/amdgpu/6.3.6-1697589.22.04"]),
    # device-access: docker's GPU runtime gone after a restart: a snap docker is one reason
    ('docker: Error response from daemon: could not select device driver "" with capabilities: '
     "[[gpu]].\nworked yesterday, after reboot it fails (RTX 4090)", "device-access",
     ["nvidia-ctk runtime configure", "snap"]),
    # device-access: NVML's unknown error in a container names the runtime's cgroup setting too
    ("docker exec trainer nvidia-smi\nFailed to initialize NVML: Unknown Error\nnvidia-container-toolkit 1.15.0",
     "device-access", ["create-dev-char-symlinks", "no-cgroups = false"]),
    # driver: a toolkit newer than the driver, both named, and the compiled code refused
    ("numba: CUDA_ERROR_UNSUPPORTED_PTX_VERSION with cuda-12.4 installed, nvidia driver 535.183 on a Tesla T4",
     "driver", ["550", "12.2"]),
    # driver: an amdgpu-dkms that fails on a kernel a later ROCm release's driver builds for
    ("sudo apt install ./amdgpu-install_7.0.60002-1_all.deb; sudo amdgpu-install --usecase=rocm\nBuilding for "
     "6.17.0-5-generic\nError! Bad return status for module build on kernel: 6.17.0-5-generic (x86_64)", "driver",
     ["ROCm 7.1.1", "6.17"]),
    # driver (likely): ROCm work that never answers on a Strix APU is its MES firmware from linux-firmware
    ("ollama on a Ryzen AI Max+ 395 (Radeon 8060S), ROCm 7.1: the model load hangs forever, CPU only works fine",
     "driver", ["linux-firmware", "20251111"]),
    # wsl: an NVIDIA paste under WSL with no GPU named is CUDA's WSL path, never AMD's /dev/dxg runtime
    ("WSL 2 Debian: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "wsl",
     ["/usr/lib/wsl/lib", "Windows NVIDIA driver"]),
    # wsl: Windows exposes no GPU to WSL (NVML's and the container toolkit's wording)
    ("wsl2 ubuntu 24.04\n$ nvidia-smi\nFailed to initialize NVML: GPU access blocked by the operating system", "wsl",
     ["wsl --update", "Windows NVIDIA driver"]),
    # device-access: a runtime name docker does not know
    ("docker compose up: Error response from daemon: unknown or invalid runtime name: nvidia (L4 on Debian 12)",
     "device-access", ["nvidia-ctk runtime configure --runtime=docker", "--gpus all"]),
    # device-access: "only root can" in Chinese
    ("普通用户跑 clinfo 看不到显卡，只有 root 可以 (Radeon PRO W7800, Ubuntu 22.04)", "device-access",
     ["usermod -aG render,video"]),
    # device-access: "no GPU inside the container" in Chinese, AMD and NVIDIA
    ("podman 容器内检测不到显卡，镜像 rocm/dev-ubuntu-22.04，RX 6900 XT", "device-access", ["--device=/dev/kfd"]),
    ("在 docker 容器中识别不到 GPU (RTX A5000, nvcr.io/nvidia/pytorch 镜像)", "device-access", ["--gpus all"]),
    # driver: a kernel update said in Chinese; the DKMS build failing said in Chinese
    ("升级内核以后 amdgpu 驱动加载不了，rocminfo 报错", "driver", ["linux-headers", "dkms"]),
    ("Ubuntu 22.04 升级到 6.8.0-49-generic 内核后 amdgpu-dkms 编译失败", "driver", ["6.5", "--no-dkms"]),
    # driver: CUDA lost after the machine slept, in words
    ("since waking up from suspend nvidia-smi works but torch says CUDA unavailable (RTX 4080 desktop)", "driver",
     ["nvidia_uvm"]),
    ("笔记本休眠后 CUDA 用不了，只能重启 (RTX 4060 Laptop)", "driver", ["nvidia_uvm"]),
    # driver: the open NVIDIA kernel modules on a card older than Turing
    ("Fedora 41, GTX 980 Ti, installed nvidia-driver-575-open from the CUDA repo\n$ nvidia-smi\nNo devices were found",
     "driver", ["nvidia-driver-575", "without -open"]),
    ("[   4.21] NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:1db4) installed in this system is not supported by "
     "open nvidia.ko because it does not include the required GPU System Processor (GSP).", "driver",
     ["proprietary kernel modules"]),
    # platform-bios: the GPU's init failing where the BIOS is said to leave Above 4G / Resizable BAR off
    ("NVRM: RmInitAdapter failed! (0x22:0x56:762) on an A40; above 4G decoding is disabled in the BIOS",
     "platform-bios", ["Above 4G Decoding", "Resizable BAR"]),
    ("主板 BIOS 里 ReBAR 关闭了，dmesg: amdgpu 0000:03:00.0: amdgpu: Fatal error during GPU init (RX 9070 XT)",
     "platform-bios", ["Above 4G Decoding"]),
    # driver: the kernel has no module of the GPU's driver (Ubuntu's cloud kernels leave amdgpu out)
    ("sudo modprobe amdgpu\nmodprobe: FATAL: Module amdgpu not found in directory /lib/modules/6.8.0-1021-gcp",
     "driver", ["linux-modules-extra-$(uname -r)"]),
    ("modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.11.0-29-generic", "driver",
     ["linux-headers-$(uname -r)", "dkms autoinstall"]),
    # driver: NVML says the kernel module is not loaded
    ("$ nvidia-smi\nFailed to initialize NVML: Driver Not Loaded\n(Tesla T4 on Rocky Linux 9)", "driver",
     ["reinstall the driver"]),
    # driver: a driver branch too old for the torch's CUDA
    ("GeForce GTX 1080, Driver Version: 418.226.00\ntorch 2.4.1+cu121\n>>> torch.cuda.is_available()\nFalse\n"
     "torch.cuda.is_available() returns False", "driver", ["525"]),
    # device-access: --gpus on an AMD host
    ("docker run --gpus all -it rocm/pytorch:latest\ndocker: Error response from daemon: could not select device "
     "driver \"\" with capabilities: [[gpu]].\nRadeon RX 7800 XT", "device-access", ["--device=/dev/kfd"]),
    # device-access: a system without a render group
    ("$ sudo usermod -aG render,video ana\nusermod: group 'render' does not exist\n(CentOS 7, Radeon VII)",
     "device-access", ["usermod -aG video"]),
    # device-access: the user says they are not in the render group
    ("koboldcpp: ggml_cuda_init: failed to initialize ROCm: no ROCm-capable device is detected; my account is not a "
     "member of the render group (RX 6600)", "device-access", ["usermod -aG render"]),
    # device-access: a service that does not find the GPU its user's own run finds
    ("LocalAI as a systemd service can't find the GPU but when I run it manually it works (Radeon RX 7900 GRE)",
     "device-access", ["usermod -aG render,video"]),
    ("ollama 作为 systemd 服务运行时找不到显卡，手动 ollama serve 就可以 (RX 7600)", "device-access",
     ["usermod -aG render,video ollama", "systemctl restart ollama"]),
    # device-access: the devices passed to a container whose engine is not the host's
    ("docker run -d --device /dev/kfd --device /dev/dri ollama/ollama:rocm\nmsg=\"no compatible GPUs were "
     "discovered\"\n(RX 7800 XT; the host's ollama uses the GPU)", "device-access", ["docker context"]),
    # wsl: Ollama with an NVIDIA card under WSL is CUDA's WSL path, not AMD's DXG detection
    ("Ollama on WSL2 with an RTX 4090: GPU not detected, runs on CPU", "wsl", ["/usr/lib/wsl/lib"]),
    # driver: NVRM's own wording of a module / library mismatch names both versions
    ("[ 512.3] NVRM: API mismatch: the client has the version 570.133.07, but this kernel module has the version "
     "565.57.01.  Please make sure that this kernel module and all NVIDIA driver components have the same version.",
     "driver", ["nvidia-driver-570", "reboot"]),
    # driver: "insufficient" with the driver branch said in words gives the CUDA it runs
    ("CUDA driver version is insufficient for CUDA runtime version (Quadro P4000, nvidia driver 460)", "driver",
     ["CUDA 11.2 at most"]),
    # driver: CUDA's 802 on an NVSwitch machine is the fabric manager
    ("8x H100 SXM5 (HGX), Driver Version: 550.127.05\nRuntimeError: CUDA error: system not yet initialized", "driver",
     ["nvidia-fabricmanager-550", "systemctl enable --now nvidia-fabricmanager"]),
    # driver: the container toolkit finds no driver on the host
    ("podman run --device nvidia.com/gpu=all ...\nError: OCI runtime error: nvidia-container-cli: initialization "
     "error: nvml error: driver not loaded: unknown", "driver", ["on the host"]),
    # wsl: a distribution under WSL 1 has no GPU at all
    ("> wsl -l -v\n  NAME      STATE      VERSION\n* Debian    Running    1\n$ python -c 'import torch; "
     "print(torch.cuda.is_available())'\nFalse", "wsl", ["wsl --set-version Debian 2"]),
    # wsl: torch's "driver too old" under WSL is the Windows driver
    ("Ubuntu 24.04 on WSL2, GeForce RTX 2070: RuntimeError: The NVIDIA driver on your system is too old (found "
     "version 11080)", "wsl", ["update the Windows NVIDIA driver"]),
    # wsl: the container toolkit under WSL not finding WSL's NVML
    ("wsl2 + docker-ce: nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot "
     "open shared object file: no such file or directory", "wsl", ["/usr/lib/wsl/lib"]),
    # driver: no /dev/kfd on the machine itself is the driver, not the groups
    ("$ rocminfo\nROCk module is loaded\nUnable to open /dev/kfd read-write: No such file or directory\n(Fedora 40 "
     "workstation, Radeon PRO W7600)", "driver", ["lsmod | grep amdgpu", "dmesg"]),
    # driver: KFD refusing a GPU generation ROCm supports is a kernel older than the GPU (the IP printed in hex)
    ("[    5.1] kfd kfd: amdgpu: GC IP 0c0000  not supported in kfd\nRadeon RX 9060 XT on Ubuntu 24.04, kernel 6.8",
     "driver", ["amdgpu-dkms", "ROCm 6.4.1"]),
    # device-access: the devices passed to a container that runs as an unprivileged user without their groups
    ("podman run --device /dev/kfd --device /dev/dri --user 1001 vllm-rocm\nRuntimeError: No HIP GPUs are available",
     "device-access", ["--group-add video --group-add render"]),
    # driver: an NVIDIA component failing with no reading of its own gets NVIDIA's checks, never amdgpu's
    ("systemd[1]: nvidia-persistenced.service: nvidia-persistenced failed to initialize. Check syslog for more "
     "details. (Tesla V100, CentOS Stream 9)", "driver", ["NVRM", "nvidia-driver"]),
]


@pytest.mark.parametrize("paste,family,phrases", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
    report = diagnose_text(paste)
    top = report.top
    assert top is not None and not report.by_likeness, paste
    assert top.family == family, (top.family, top.title, top.fix)
    for phrase in phrases:
        assert phrase.lower() in top.fix.lower(), (phrase, top.fix)


@pytest.mark.parametrize("paste,not_family", [
    # a libcuda missing on a native Linux machine is the driver's install, not WSL
    ("OSError: libcuda.so: cannot open shared object file: No such file or directory\nUbuntu 22.04, RTX 4090, "
     "driver 550", "wsl"),
    # a hang on native Linux with the same card is no WSL reading
    ("python freezes at model.to('cuda') on Ubuntu 22.04 with an RX 6800 XT, ROCm 6.1.3", "wsl"),
    # NCCL failing on native Linux is a transport problem
    ("torchrun --nproc_per_node 2 train.py fails: NCCL error: unhandled system error (2x RTX 3090, Ubuntu 22.04)",
     "wsl"),
    # "no kernel image" from a prebuilt torch wheel whose CUDA the driver runs (minor version compatibility) is the
    # GPU's architecture, not the driver
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device\ntorch 2.5.1+cu124, "
     "CUDA 12.4, Driver Version: 535.104.05, GeForce GTX 760", "driver"),
    # a Strix APU whose error is its own (a missing arch) is not the firmware
    ("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory for "
     "GPU arch : gfx1151\nStrix Halo, the server hangs afterwards", "driver"),
    # a hang on a discrete card is no APU firmware
    ("llama-server hangs forever while loading on an RX 7900 XTX with ROCm 6.4", "driver"),
    # an AMD paste under WSL keeps AMD's reading
    ("WSL2, RX 7900 XTX, ROCm 6.1.3: RuntimeError: No HIP GPUs are available", "driver"),
    # an AMD card that misbehaves after suspend is not NVIDIA's unified-memory module
    ("my RX 6800 crashes after resume from suspend", "driver"),
    # Resizable BAR said to be on is no BIOS reading
    ("amdgpu: Fatal error during GPU init, Resizable BAR enabled, RX 7900 GRE", "platform-bios"),
    # a driver branch new enough for the torch's CUDA is not "too old"
    ("Driver Version: 550.54.15\ntorch 2.5.1+cu124\ntorch.cuda.is_available() returns False (RTX 3090)", "driver"),
    # a service without the variable its user's shell sets is the environment, not the groups
    ("ollama as a systemd service ignores the GPU but ollama serve in my terminal uses my RX 6700 XT "
     "(HSA_OVERRIDE_GFX_VERSION=10.3.0 in .bashrc)", "device-access"),
    # a service on an NVIDIA card: its device nodes are open to all, no group reading
    ("ollama.service with an RTX 3090 doesn't use the GPU, manually it works", "device-access"),
    # /dev/kfd missing inside a container is the container's devices
    ("docker exec rocm rocminfo\nUnable to open /dev/kfd read-write: No such file or directory", "driver"),
    # a GCN 1 card refused by KFD is the card's support, not an old kernel
    ("kfd kfd: amdgpu: GC IP 060001 not supported in kfd (FirePro W7000)", "driver"),
    # a 999 that is a count, not CUDA's error code
    ("rocminfo: loaded 999 kernels, error: HSA_STATUS_ERROR_OUT_OF_RESOURCES", "driver"),
])
def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, not_family):
    top = diagnose_text(paste).top
    assert top is None or top.family != not_family, (top.family, top.title)


def test_the_dkms_release_table_names_no_release_older_than_the_one_installed():
    top = diagnose_text("ROCm 6.4.3 amdgpu-dkms: Error! Bad return status for module build on kernel: "
                        "6.14.0-29-generic (x86_64)").top
    assert top is not None and top.family == "driver", top
    assert "ROCm 6.4.2" not in top.fix, top.fix


def test_an_amd_paste_under_wsl_keeps_the_rocm_reading():
    top = diagnose_text("WSL2, RX 7900 XTX, ROCm 6.1.3: RuntimeError: No HIP GPUs are available").top
    assert top is not None and top.family == "wsl" and "CUDA" not in top.title, top.title


def test_the_open_modules_reading_needs_a_card_older_than_turing():
    top = diagnose_text("nvidia-smi: No devices were found (RTX 4090, nvidia-driver-560-open)").top
    assert top is not None and top.family == "driver", top
    assert "open NVIDIA kernel modules do not drive" not in top.title, top.title


def test_ollama_under_wsl_with_an_nvidia_card_gets_no_rocm_variable():
    top = diagnose_text("Ollama on WSL2 with an RTX 4090: GPU not detected, runs on CPU").top
    assert top is not None and "HSA_ENABLE_DXG_DETECTION" not in top.fix and "CUDA torch" not in top.fix, top.fix


def test_wsl_s_own_version_string_is_not_wsl_1():
    top = diagnose_text("WSL version: 1.2.5.0\nKernel version: 5.15.90.1\nUbuntu under wsl2: torch.cuda.is_available() "
                        "False (RTX 3060)").top
    assert top is not None and top.family == "wsl" and "WSL 1" not in top.title, top.title


def test_a_container_given_its_groups_is_not_told_to_add_them():
    top = diagnose_text("docker run --device=/dev/kfd --device=/dev/dri --group-add video --group-add render -u 1000 img\n"
                        "RuntimeError: No HIP GPUs are available (RX 7900 XTX)").top
    assert top is None or "not in the GPU devices' groups" not in top.title, top.title


def test_an_nvidia_component_failing_is_never_given_the_amdgpu_fix():
    top = diagnose_text("nvidia-persistenced failed to initialize. Check syslog for more details.").top
    assert top is not None and top.family == "driver" and "amdgpu" not in top.fix, top.fix
