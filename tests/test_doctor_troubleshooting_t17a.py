"""doctor, round 17 (t17a): the situations AMD's own pages list with their fix - ROCm's install prerequisites and
post-install steps, the multi-version install, the Radeon and Ryzen limitations / mGPU / WSL pages, the Ryzen PyTorch
install page, the MI300X system optimization guide, amd-smi's release notes, TheRock's RELEASES.md. Each paste is
written in other words, on another card or release than the probe in /work/notes/t17a_probes.py; the negatives keep
each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a Ryzen 7000's iGPU beside the card, the run crashing (Radeon limitations: disable the iGPU in the BIOS)
    ("Ryzen 7 7700X with a Radeon RX 7800 XT, Fedora 40, ROCm 6.2\nrocminfo shows two agents, gfx1101 and gfx1036\n"
     "my training crashes right after loading the model", "visibility", ["iGPU", "BIOS"]),
    # several cards hanging in RCCL (mGPU page: IOMMU)
    ("4x Radeon PRO W7800 on Ubuntu 24.04, ROCm 6.3\naccelerate launch with 4 processes hangs at the first all_reduce",
     "multi-gpu-transport", ["iommu=pt"]),
    # the DRM group message of rocminfo, another user
    ("$ /opt/rocm/bin/rocminfo\nROCk module is loaded\nUnable to open /dev/kfd read-write: Permission denied\nbob is not "
     "member of \"render\" group, the default DRM access group.", "device-access", ["usermod", "render"]),
    # amdgpu-dkms without headers, another kernel: the kernel's own packages
    ("Ubuntu 24.04, sudo amdgpu-install --usecase=graphics,rocm\nSetting up amdgpu-dkms (1:6.8.5.60202-2041575.24.04) ...\n"
     "Error! Your kernel headers for kernel 6.8.0-45-generic cannot be found at /lib/modules/6.8.0-45-generic/build or "
     "/lib/modules/6.8.0-45-generic/source.", "driver", ["linux-headers-6.8.0-45-generic",
                                                       "linux-modules-extra-6.8.0-45-generic"]),
    # the same on RHEL: kernel-devel of that kernel
    ("RHEL 9.4, amdgpu-install 6.2 for MI210\nError! Your kernel headers for kernel 5.14.0-427.13.1.el9_4.x86_64 cannot "
     "be found at /lib/modules/5.14.0-427.13.1.el9_4.x86_64/build", "driver",
     ["kernel-devel-5.14.0-427.13.1.el9_4.x86_64"]),
    # the same under WSL: no DKMS at all
    ("installing rocm 6.1.3 inside wsl2 (kernel 5.15.167.4-microsoft-standard-WSL2) with amdgpu-install --usecase=rocm\n"
     "Error! Your kernel headers for kernel 5.15.167.4-microsoft-standard-WSL2 cannot be found at "
     "/lib/modules/5.15.167.4-microsoft-standard-WSL2/build", "wsl", ["--usecase=wsl,rocm", "--no-dkms"]),
    # several cards under WSL
    ("Windows 11 + WSL2 (Ubuntu 22.04), 2x Radeon RX 7900 XT, ROCm 6.2.3 for WSL\nonly one GPU shows up in rocminfo, "
     "is multi-GPU possible?", "wsl", ["native Linux"]),
    # a Strix Point laptop on Ubuntu 24.04's GA kernel
    ("Ryzen AI 9 HX 370 laptop (Radeon 890M, gfx1150), Ubuntu 24.04.2, kernel 6.11.0-19-generic, ROCm 7.0.2\n"
     ">>> torch.cuda.is_available()\nFalse", "driver", ["linux-oem-24.04c"]),
    # rocm-smi not found after the install
    ("just did sudo amdgpu-install --usecase=rocm (6.2.2) on Debian 12 with an RX 7600\n$ rocm-smi\nbash: rocm-smi: "
     "command not found", "rocm-libs-missing", ["export PATH=$PATH:/opt/rocm/bin"]),
    # two releases side by side, another pair
    ("Ubuntu 22.04, MI250X, multi-version install of rocm 5.7.1 and rocm 6.0.2\nmy HIP build links 5.7.1 libraries but "
     "hipcc is 6.0.2; /opt/rocm -> /etc/alternatives/rocm", "rocm-libs-missing",
     ["update-alternatives --config rocm", "/opt/rocm-6.0.2"]),
    # Ubuntu's runtime found first, shown by ldd
    ("Ubuntu 24.04 + ROCm 6.2.4 from repo.radeon.com, RX 7900 GRE\n$ ldd /opt/rocm/bin/rocminfo | grep hsa\n"
     "\tlibhsa-runtime64.so.1 => /usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1 (0x00007f3a)\nrocminfo: ROCk module "
     "is NOT loaded", "rocm-libs-missing", ["libhsa-runtime64-1", "libhsakmt1"]),
    # PyTorch on Windows on an old Adrenalin
    ("Windows 11, Radeon RX 9060 XT, Adrenalin 24.12.1\nI installed the PyTorch on Windows wheels (torch 2.8.0a0+rocm)\n"
     "torch.cuda.is_available() returns False", "driver", ["Adrenalin", "25.9.2"]),
    # Smart App Control, another DLL
    ("Win11 Home, Ryzen AI Max+ 395\nImportError: DLL load failed while importing _C: An Application Control policy "
     "has blocked this file.", "rocm-libs-missing", ["Smart App Control"]),
    # PCIe atomics through a chipset slot, another card
    ("Radeon RX 7600 in an x4 chipset slot, ROCm 6.1\nkfd kfd: amdgpu: skipped device 1002:7480, PCI rejects atomics "
     "730<0", "platform-bios", ["atomics", "slot"]),
    # the container started without the devices
    ("podman run -it docker.io/rocm/dev-ubuntu-22.04:6.2\nrocminfo\nUnable to open /dev/kfd read-write: No such file "
     "or directory", "device-access", ["--device=/dev/kfd"]),
    # amd-smi's Python module
    ("MI210, ROCm 6.0\npython3 -c 'import amdsmi'\nModuleNotFoundError: No module named 'amdsmi'", "rocm-libs-missing",
     ["/opt/rocm/share/amd_smi"]),
    # amd-smi's bad-pages null pointer
    ("MI300A node, ROCm 6.1.1\n$ sudo amd-smi bad-pages --gpu 0\nTraceback (most recent call last):\nValueError: Null "
     "pointer access", "driver", ["rocm-smi --showretiredpages"]),
    # TheRock's index of another family: an RDNA3 card on the gfx1151 index
    ("RX 7900 XTX (gfx1100)\npip install --index-url https://rocm.nightlies.amd.com/v2/gfx1151/ --pre torch\n"
     "RuntimeError: HIP error: invalid device function", "arch-missing", ["v2/gfx110X-all/"]),
    # TheRock on Python 3.10
    ("Ubuntu 22.04 system python 3.10, RX 9070\npip install --pre --find-links "
     "https://therock-nightly-python.s3.amazonaws.com/gfx120X-all/index.html rocm[libraries,devel]\nERROR: Could not "
     "find a version that satisfies the requirement rocm-sdk-libraries-gfx120X-all==6.5.0rc20250620 (from versions: "
     "none)", "wheel-platform", ["Python 3.12"]),
    # TheRock's torch nightly missing MIOpen at import
    ("torch 2.7.0a0+rocmsdk20250612 (TheRock nightly) on a W7900\nimport torch\nImportError: libMIOpen.so.1: cannot "
     "open shared object file: No such file or directory", "rocm-libs-missing", ["rocm_sdk.preload_libraries"]),
    # NUMA balancing on an Instinct machine
    ("MI300X x8, ROCm 6.3, RCCL all_reduce_perf bus bandwidth is unstable between runs\n$ sysctl kernel.numa_balancing\n"
     "kernel.numa_balancing = 1", "multi-gpu-transport", ["/proc/sys/kernel/numa_balancing"]),
]

NEGATIVES = [
    # an iGPU and a card, and nothing wrong said: no iGPU reading
    ("Ryzen 9 7900X + RX 7900 XTX, rocminfo lists gfx1100 and gfx1036, training runs fine at 14 it/s", "iGPU"),
    # kernel headers missing for NVIDIA's DKMS: no amdgpu packages
    ("sudo apt install nvidia-driver-550\nError! Your kernel headers for kernel 6.8.0-45-generic cannot be found",
     "linux-modules-extra"),
    # one GPU under WSL: no multi-GPU reading
    ("WSL2 Ubuntu 22.04, RX 7900 XTX, ROCm 6.1.3\ntorch.cuda.device_count() returns 1 as expected", "native Linux"),
    # a Strix Halo on 6.14 already: no kernel reading
    ("Ryzen AI Max+ 395 (gfx1151), Ubuntu 24.04, kernel 6.14.0-1007-oem\ntorch.cuda.is_available() False",
     "linux-oem-24.04c"),
    # a Strix Halo working on an older kernel: nothing to fix there
    ("gfx1151 on kernel 6.11, Ubuntu 24.04, torch runs fine and sees the GPU", "linux-oem-24.04c"),
    # a tool not found with no ROCm install said: not the PATH reading
    ("$ nvcc --version\nbash: nvcc: command not found", "/opt/rocm/bin"),
    # one ROCm release: no alternatives reading
    ("ROCm 6.2.4 on Ubuntu 22.04, /opt/rocm -> /etc/alternatives/rocm, hipcc works", "update-alternatives --config rocm"),
    # the runtime from /opt/rocm: no distribution-package reading
    ("ldconfig -p | grep hsa\nlibhsa-runtime64.so.1 (libc6,x86-64) => /opt/rocm/lib/libhsa-runtime64.so.1\nROCm 6.3",
     "libhsakmt1"),
    # a new Adrenalin: no driver reading
    ("Windows 11, RX 9070 XT, Adrenalin 25.10.2, torch 2.8.0a0+rocm\ntorch.cuda.is_available() returns False", "25.9.2"),
    # TheRock's index of the card's own family: no family reading
    ("RX 7900 XTX (gfx1100)\npip install --index-url https://rocm.nightlies.amd.com/v2/gfx110X-dgpu/ --pre torch\n"
     "RuntimeError: HIP error: invalid device function", "TheRock wheels of the"),
    # TheRock on Python 3.12 with nothing offered: not the Python-floor reading
    ("python 3.12 venv\npip install --pre --find-links https://therock-nightly-python.s3.amazonaws.com/gfx1151/index.html "
     "rocm[libraries,devel]\nERROR: Could not find a version that satisfies the requirement rocm-sdk-core (from "
     "versions: none)", "create the environment with Python 3.12"),
    # NUMA balancing off: no reading
    ("MI300X x8\n$ cat /proc/sys/kernel/numa_balancing\n0\nRCCL bandwidth is lower than expected", "echo 0 >"),
    # NUMA balancing on an NVIDIA machine: not AMD's guide
    ("8x H100, NCCL all_reduce_perf bandwidth is low\nkernel.numa_balancing = 1", "MI300X"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
