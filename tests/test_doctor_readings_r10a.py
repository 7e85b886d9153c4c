"""doctor, round 10 (issue 63): readings of the driver, apu-memory and driver-package families. Each paste is written
for its reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep
each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the open NVIDIA module refusing a pre-Turing card (another card, the refusal on one line): the proprietary one
    ("sudo dmesg | grep NVRM\nNVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1c03) installed in this system is not "
     "supported by open nvidia.ko because it does not include the required GPU System Processor (GSP).",
     "driver", ["proprietary", "GSP", "nvidia-driver-<branch>"]),
    # CUDA_ERROR_UNKNOWN as torch words it, another GPU and torch: reboot / nvidia_uvm
    ("torch.cuda.is_available() warns on my RTX 3080 after installing driver 550:\nUserWarning: CUDA initialization: "
     "CUDA unknown error - this may be due to an incorrectly set up environment", "driver",
     ["reboot", "nvidia_uvm"]),
    # a GPU server's init failing with "unknown error" (another tool words it): the same
    ("llama-server: ggml_cuda_init: failed to initialize the GPU: unknown error (RTX 4070, Fedora 40)", "driver",
     ["rmmod nvidia_uvm"]),
    # the legacy 470 module failing to build for a newer kernel (Fedora's akmods words it differently): the patch
    ("dkms install nvidia/470.256.02 -k 6.12.1-200.fc41.x86_64\nError! Bad return status for module build on kernel: "
     "6.12.1-200.fc41.x86_64 (x86_64)", "driver", ["legacy 470", "patch", "older / LTS kernel"]),
    # a current branch failing to build: its newer release, not the legacy patch
    ("Kernel release: 6.14.0-rc1\n$ sudo dkms install nvidia/565.77\nError! Bad return status for module build on "
     "kernel: 6.14.0-rc1 (x86_64)", "driver", ["newer version of the same branch"]),
    # "insufficient" with the driver branch in nvidia-smi's header: the installed branch named back
    ("vllm serve on a Tesla T4\nDriver Version: 470.199.02   CUDA Version: 11.4\nRuntimeError: CUDA driver version is "
     "insufficient for CUDA runtime version", "driver", ["driver 470", "CUDA 11.4"]),
    # a server started at boot finding no GPU (said another way, an AMD card): the systemd drop-in
    ("After every boot ollama runs only on the CPU with my RX 7800 XT; sudo systemctl restart ollama and it uses the "
     "GPU again", "driver", ["ExecStartPre", "systemctl edit ollama"]),
    # LM Studio's own words for a CUDA runtime that finds no GPU after it worked: reboot, rerun its check
    ("LM Studio 0.3.5 on Linux Mint, RTX 3060: the CUDA llama.cpp runtime now shows 'GPU survey unsuccessful'; it "
     "worked fine last week", "driver", ["reboot", "Rerun compatibility check"]),
    # dpkg refusing a driver package whose files another stack owns (ROCm over the AMD graphics driver)
    ("sudo apt install rock-dkms\ndpkg: error processing archive /var/cache/apt/archives/rock-dkms_3.3-19_all.deb "
     "(--unpack):\n trying to overwrite '/usr/src/amdgpu-3.3-19/Makefile', which is also in package amdgpu-dkms "
     "20.10-1048554", "driver", ["amdgpu-pro-uninstall"]),
    # the NVIDIA flavour: two sources of NVIDIA packages
    ("dpkg: error processing archive nvidia-kernel-common-535_535.183.01-0ubuntu1_amd64.deb (--unpack):\n trying to "
     "overwrite '/lib/udev/rules.d/71-nvidia.rules', which is also in package nvidia-kernel-common-550 550.90.07-1",
     "driver", ["apt purge '*nvidia*'"]),
    # rock-dkms gone from the repository, said by apt-get another way
    ("sudo apt-get install rock-dkms\nPackage rock-dkms is not available, but is referred to by another package.\n"
     "E: Package 'rock-dkms' has no installation candidate", "driver", ["amdgpu-dkms", "amdgpu-install"]),
    # amdgpu-install for compute only, then a desktop that does not come up (another GPU, other use cases)
    ("RX 6800, Ubuntu 22.04, ROCm 6.2: sudo amdgpu-install --usecase=rocm,hiplibsdk\nafter the reboot GDM won't "
     "start, just a blinking cursor", "driver", ["--usecase=graphics,rocm,hiplibsdk"]),
    # ROCm 3.x's rock-dkms on an Ubuntu HWE kernel, the runtime failing: the supported kernel
    ("ROCm 3.0 on Ubuntu 18.04.4 with kernel 5.3.0-28-generic, sudo apt install rocm-dkms went fine but\nROCk module "
     "is NOT loaded, possibly no GPU devices", "driver", ["4.15", "rock-dkms"]),
    # an undefined driver-API call every driver has, in Triton's cached launcher: the caches, not the driver
    ("ImportError: /home/ana/.triton/cache/9f3c/cuda_utils.so: undefined symbol: cuLaunchKernel\ntorch 2.4.1+cu121 on "
     "an A10G", "abi-mismatch", ["~/.triton/cache", "/tmp/torchinductor_$USER"]),
    # the device plugin's 0.16.1 chart with the volume-mounts strategy (said with the plugin's flag): SYS_ADMIN
    ("helm upgrade nvdp nvdp/nvidia-device-plugin --version 0.16.0 --set deviceListStrategy=volume-mounts\n"
     "nvidia-device-plugin-ctr: error starting plugins: nvml init failed: ERROR_LIBRARY_NOT_FOUND", "device-access",
     ["SYS_ADMIN"]),
    # KFD refusing the process's GPU VM, the card not named (another ROCm, torch's runtime line): the GPU's age
    ("ROCm 6.2.4 on Ubuntu 24.04\npython -c 'import torch; torch.zeros(1).cuda()'\nRuntimeError: HIP error: "
     "hipErrorNoDevice\n[  88.402117] amdgpu: Failed to create process VM object", "gpu-unsupported",
     ["gfx7", "rocminfo | grep gfx"]),
    # an APU's GTT asked with amdttm and not granted (another APU, another size): ttm.pages_limit in pages
    ("Ryzen AI 9 HX 370 (890M), Ubuntu 24.04 with amdgpu-dkms: I set amdttm.pages_limit for 48 GiB of GTT but "
     "rocminfo still shows the old size", "apu-memory", ["ttm.pages_limit=12582912"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a Turing card with the open module that merely fails for another reason: not "install the proprietary module"
    ("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:762)\nRTX 2080 with nvidia-open 560", "proprietary"),
    # a CUDA out-of-memory error is not CUDA's unknown error
    ("RuntimeError: CUDA error: out of memory on an RTX 3090", "rmmod nvidia_uvm"),
    # an amdgpu DKMS build failure: not NVIDIA's legacy patch
    ("sudo apt install amdgpu-dkms\nError! Bad return status for module build on kernel: 6.8.0-40-generic (x86_64)\n"
     "Consult /var/lib/dkms/amdgpu/6.7.0-1756574.22.04/build/make.log", "legacy"),
    # Ollama on the CPU after a suspend, not a boot: not the systemd drop-in
    ("ollama uses only the CPU after the laptop resumes from suspend, RTX 4060 laptop", "ExecStartPre"),
    # LM Studio with a survey that fails on an AMD card: not the NVIDIA reboot reading
    ("LM Studio ROCm llama.cpp runtime: GPU survey unsuccessful on my RX 580", "Rerun compatibility check"),
    # dpkg overwriting between two non-driver packages: not the driver-stack reading
    ("dpkg: error processing archive python3-foo_1.2_all.deb (--unpack):\n trying to overwrite '/usr/bin/foo', which "
     "is also in package foo-tools 1.0", "two GPU driver stacks"),
    # amdgpu-install with the graphics use case already: not "add graphics"
    ("sudo amdgpu-install --usecase=graphics,rocm\nblack screen after reboot on my RX 7600", "--usecase=graphics,"
     "graphics"),
    # a current ROCm (amdgpu-dkms) on a new kernel: not the rock-dkms 4.15 reading
    ("ROCm 6.1 on kernel 6.8.0-45-generic: rocminfo hsa api call failure, ROCk module is NOT loaded", "GA kernel 4.15"),
    # ROCm 2.x on its supported 4.15 kernel: not the kernel reading
    ("ROCm 2.6 rocm-dkms on Ubuntu 18.04 kernel 4.15.0-55-generic\nhsa api call failure at line 900", "GA kernel 4.15"),
    # a driver-API call new in CUDA 12.4 undefined: the driver is too old, not a stale cache
    ("undefined symbol: cuGreenCtxCreate (torch 2.6.0+cu126, driver 535)", "~/.triton/cache"),
    # the device plugin 0.15 (which still grants SYS_ADMIN) failing otherwise: not the capability reading
    ("nvidia-device-plugin 0.15.1 with deviceListStrategy=envvar: nvml init failed: ERROR_LIBRARY_NOT_FOUND",
     "SYS_ADMIN"),
    # the same refusal on an RDNA 3 card: not the old-GCN reading
    ("RX 7900 XTX (gfx1100), ROCm 6.3: rocminfo HSA_STATUS_ERROR_OUT_OF_RESOURCES\namdgpu: Failed to create process "
     "VM object", "Mesa rusticl"),
    # ttm.pages_limit already set: not the amdttm reading
    ("Strix Halo: amdttm.pages_limit and ttm.pages_limit=27648000 both set, still no effect on GTT", "amdttm.* values"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
