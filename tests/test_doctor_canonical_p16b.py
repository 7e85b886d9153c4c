"""doctor, round 16: the layers under the GPU stack (p16b). The own messages of pip, uv and conda (PEP 668, a full disk,
Windows long paths, timeouts, hash mismatches, the OOM-killed torch download, uv's platform tags and first-index rule,
conda's __cuda virtual package, channels, Python conflicts and foreign environment files), the dynamic loader (glibc,
ELF class, static TLS, Mach-O architecture, exec format, executable stack, WinError 127, torch's own _C), DKMS and the
NVIDIA installer (kernel headers, a compiler older than the kernel's, nouveau, modules in use, Secure Boot, no device),
Windows' TDR, WSL's VM platform and NVML, and the container engines (a device the host lacks, the toolkit without a
host driver, apptainer's --nv / --rocm, --gpus unknown, podman's OCI hook) - each in a paste of our own with the
context users paste it in; the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # PEP 668 on Ubuntu 24.04, pip3 --user
    ("$ pip3 install --user bitsandbytes\nerror: externally-managed-environment\n\n× This environment is externally "
     "managed\n╰─> To install Python packages system-wide, try apt install python3-xyz", "wheel-platform",
     ["python3 -m venv", "--break-system-packages"]),
    # a full /tmp during a ROCm torch install
    ("pip3 install torch --index-url https://download.pytorch.org/whl/rocm6.2\n  Downloading torch-2.5.1+rocm6.2-"
     "cp312-cp312-linux_x86_64.whl (3.8 GB)\nERROR: Could not install packages due to an OSError: [Errno 28] No space "
     "left on device", "wheel-platform", ["--no-cache-dir", "TMPDIR="]),
    # the Store Python on Windows and a deep header path
    ("py -m pip install torch --index-url https://download.pytorch.org/whl/cu124\nERROR: Could not install packages due "
     "to an OSError: [WinError 206] The filename or extension is too long\nHINT: This error might have occurred since "
     "this system does not have Windows Long Path support enabled. You can find information regarding how to enable "
     "this at https://pip.pypa.io/warnings/enable-long-paths", "wheel-platform", ["LongPathsEnabled"]),
    # a slow link to PyPI's CDN
    ("pip install -r requirements.txt\nraise ReadTimeoutError(self._pool, None, \"Read timed out.\")\n"
     "pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='files.pythonhosted.org', port=443): "
     "Read timed out.", "wheel-platform", ["--timeout", "--retries"]),
    # a corrupted cached nvidia wheel
    ("pip install -r requirements.txt\nERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you "
     "have updated the package versions, please update the hashes.\n    nvidia-cudnn-cu12 from https://files."
     "pythonhosted.org/packages/nvidia_cudnn_cu12-9.1.0.70-py3-none-manylinux2014_x86_64.whl:", "wheel-platform",
     ["pip cache", "--no-cache-dir"]),
    # a 2 GB VPS, the process killed after the download
    ("root@vps:~# pip install torch\nCollecting torch\n  Downloading torch-2.4.0-cp311-cp311-manylinux1_x86_64.whl "
     "(797.2 MB)\n     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 797.2/797.2 MB 52.1 MB/s eta 0:00:00\nKilled",
     "out-of-memory", ["--no-cache-dir", "swap"]),
    # uv sync on an Intel Mac with a cu124 lock
    ("$ uv sync\nResolved 84 packages in 12ms\n  × No solution found when resolving dependencies for split "
     "(sys_platform == 'darwin'):\n  ╰─▶ Because torch==2.6.0+cu124 has no wheels with a matching platform tag (e.g., "
     "`macosx_13_0_x86_64`) and your project depends on torch==2.6.0+cu124, we can conclude that your project's "
     "requirements are unsatisfiable.", "wheel-platform", ["[tool.uv.sources]", "sys_platform"]),
    # uv stopping at the PyTorch index for jinja2
    ("uv pip install -r requirements.txt --index-url https://download.pytorch.org/whl/cu124\n  × No solution found "
     "when resolving dependencies:\n  ╰─▶ Because jinja2 was found on https://download.pytorch.org/whl/cu124, but not "
     "at the requested version (jinja2>=3.1.5), we can conclude that your requirements are unsatisfiable.",
     "wheel-platform", ["explicit = true", "--index-strategy unsafe-best-match"]),
    # uv pip in a fresh clone
    ("~/src/llm$ uv pip install -e .\nerror: No virtual environment found; run `uv venv` to create an environment, or "
     "pass `--system` to install into a non-virtual environment", "wheel-platform", ["uv venv", "--python"]),
    # mamba on a login node
    ("(base) [user@login01 ~]$ mamba create -n train pytorch pytorch-cuda=12.1 -c pytorch -c nvidia\nerror    "
     "libmamba Could not solve for environment specs\n    The following package could not be installed\n    └─ "
     "pytorch-cuda 12.1**  is not installable because it requires\n       └─ __cuda, which is missing on the system.",
     "wheel-platform", ["CONDA_OVERRIDE_CUDA="]),
    # conda without the nvidia channel
    ("conda install pytorch torchvision torchaudio pytorch-cuda=11.8\nPackagesNotFoundError: The following packages "
     "are not available from current channels:\n\n  - pytorch-cuda=11.8", "wheel-platform",
     ["-c pytorch -c nvidia"]),
    # an old cudatoolkit pin in a Python 3.11 env
    ("conda install pytorch==1.10.1 cudatoolkit=11.3 -c pytorch\nFound conflicts! Looking for incompatible packages.\n"
     "UnsatisfiableError: The following specifications were found to be incompatible with each other:\n\nPackage "
     "python conflicts for:\npython=3.11\npytorch==1.10.1 -> python[version='>=3.6,<3.7.0a0|>=3.7,<3.8.0a0']",
     "wheel-platform", ["conda create -n"]),
    # a Linux environment.yml on Windows
    ("conda env create -f environment.yml\nCollecting package metadata (repodata.json): done\nSolving environment: "
     "failed\n\nResolvePackageNotFound:\n  - libgcc-ng==13.2.0=h807b86a_3\n  - nccl==2.19.3.1=h6103f9b_0",
     "wheel-platform", ["--from-history"]),
    # a flash-attn wheel on CentOS 7, no OS named
    ("python -c 'import flash_attn'\nImportError: /lib64/libc.so.6: version `GLIBC_2.32' not found (required by "
     "/data/venv/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so)", "wheel-platform",
     ["ldd --version"]),
    # a 32-bit Raspberry Pi OS userland
    ("pi@raspberrypi:~ $ python3 -c 'import onnxruntime'\nImportError: /home/pi/.local/lib/python3.11/site-packages/"
     "onnxruntime/capi/onnxruntime_pybind11_state.so: wrong ELF class: ELFCLASS64", "wheel-platform",
     ["struct.calcsize", "64-bit"]),
    # torch's bundled libgomp on a Jetson
    ("jetson@orin:~$ python3 demo.py\nOSError: /home/jetson/.local/lib/python3.10/site-packages/torch/lib/../../"
     "torch.libs/libgomp-804f19d4.so.1.0.0: cannot allocate memory in static TLS block", "rocm-libs-missing",
     ["LD_PRELOAD="]),
    # an Intel conda on Apple silicon
    ("(base) me@MacBook-Pro ~ % python -c 'import torch'\nImportError: dlopen(/Users/me/miniconda3/lib/python3.10/"
     "site-packages/torch/_C.cpython-310-darwin.so, 0x0002): tried: '/Users/me/miniconda3/lib/python3.10/site-packages/"
     "torch/_C.cpython-310-darwin.so' (mach-o file, but is an incompatible architecture (have 'arm64', need "
     "'x86_64'))", "wheel-platform", ["platform.machine()", "arm64"]),
    # an arm64 image on an x86 GPU server (older runc wording)
    ("docker run --rm --gpus all myorg/trainer:latest\nstandard_init_linux.go:228: exec user process caused: exec "
     "format error", "wheel-platform", ["--platform"]),
    # glibc 2.41 refusing a CUDA torch's own library
    ("$ ldd --version\nldd (GNU libc) 2.41\n>>> import torch\nImportError: /opt/venv/lib/python3.12/site-packages/torch/"
     "lib/libtorch_cuda.so: cannot enable executable stack as shared object requires: Invalid argument",
     "rocm-libs-missing", ["patchelf --clear-execstack /opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"]),
    # WinError 127 from a CUDA torch's own DLL
    ("python -c \"import torch\"\nOSError: [WinError 127] The specified procedure could not be found. Error loading "
     "\"D:\\ai\\venv\\Lib\\site-packages\\torch\\lib\\cudnn_ops_infer64_8.dll\" or one of its dependencies.",
     "rocm-libs-missing", ["pip uninstall -y torch", "PATH"]),
    # torch's own _C on Windows
    ("C:\\ai> python\n>>> import torch\n  File \"C:\\ai\\venv\\lib\\site-packages\\torch\\__init__.py\", line 141, in "
     "<module>\nImportError: DLL load failed while importing _C: The specified module could not be found.",
     "rocm-libs-missing", ["vc_redist.x64.exe"]),
    # DKMS after a kernel update on Debian
    ("Setting up linux-image-6.1.0-18-amd64 ...\n/etc/kernel/postinst.d/dkms:\ndkms: running auto installation service "
     "for kernel 6.1.0-18-amd64.\nError! Your kernel headers for kernel 6.1.0-18-amd64 cannot be found at "
     "/lib/modules/6.1.0-18-amd64/build or /lib/modules/6.1.0-18-amd64/source.", "driver",
     ["linux-headers-$(uname -r)", "dkms autoinstall"]),
    # the nvidia module built with gcc 11 for an HWE kernel (make.log)
    ("cat /var/lib/dkms/nvidia/550.120/build/make.log\nwarning: the compiler differs from the one used to build the "
     "kernel\n  The kernel was built by: x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0\n  You are "
     "using:           gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\ncc: error: unrecognized command-line option "
     "'-mharden-sls=all'", "driver", ["gcc-12", "dkms autoinstall"]),
    # nouveau in the journal, nvidia-smi failing
    ("$ journalctl -k | grep -i nvrm\nkernel: NVRM: The NVIDIA probe routine was not called for 1 device(s).\nkernel: "
     "NVRM: No NVIDIA devices probed.", "driver", ["blacklist nouveau", "update-initramfs"]),
    # the .run installer over a running desktop
    ("sudo ./NVIDIA-Linux-x86_64-550.90.07.run\nERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded "
     "in your kernel.  This may be because it is in use (for example, by an X server, a CUDA program, or the NVIDIA "
     "Persistence Daemon)", "driver", ["multi-user.target", "rmmod"]),
    # the .run installer's Secure Boot message
    ("sudo sh NVIDIA-Linux-x86_64-535.154.05.run --dkms\nERROR: The kernel module failed to load. Secure boot is enabled "
     "on this system, so this is likely because it was not signed by a key that is trusted by the kernel. Please try "
     "installing the driver again, and sign the kernel module when prompted to do so.", "driver",
     ["--module-signing-secret-key", "mokutil --import"]),
    # no device for the module (dmesg's words)
    ("$ sudo dmesg | tail -3\n[  61.1] NVRM: No NVIDIA GPU found.\n$ nvidia-smi\nNVIDIA-SMI has failed because it "
     "couldn't communicate with the NVIDIA driver.", "driver", ["lspci -nnk -d 10de:"]),
    # TDR from Event Viewer, Automatic1111 stopping
    ("Windows 11, RTX 3060 laptop\nSystem log, Event ID 4101: Display driver nvlddmkm stopped responding and has "
     "successfully recovered.\nthen the web UI shows CUDA error: unspecified launch failure", "gpu-hang",
     ["TdrDelay"]),
    # WSL install in a VM without nested virtualization
    ("PS C:\\> wsl --install -d Ubuntu-22.04\nInstalling, this may take a few minutes...\nPlease enable the Virtual "
     "Machine Platform Windows feature and ensure virtualization is enabled in the BIOS.", "wsl",
     ["VirtualMachinePlatform", "ExposeVirtualizationExtensions"]),
    # a TCC-mode L40S under WSL
    ("NVIDIA L40S, Windows Server 2022, WSL 2 Ubuntu 22.04\nme@srv:~$ nvidia-smi\nFailed to initialize NVML: GPU access "
     "blocked by the operating system", "wsl", ["-dm 0", "WDDM"]),
    # a compose file with /dev/dri on Docker Desktop
    ("docker compose up ollama\nError response from daemon: error gathering device information while adding custom "
     "device \"/dev/dri\": no such file or directory", "driver", ["modprobe amdgpu", "Docker Engine"]),
    # the toolkit on a host without the driver (nvidia-container-cli info)
    ("$ nvidia-container-cli info\nnvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
     "cannot open shared object file: no such file or directory", "driver", ["nvidia-smi must work", "docker-ce"]),
    # apptainer on a login node
    ("[me@login2 ~]$ singularity run --nv tf.sif python -c 'import tensorflow as tf'\nINFO:    Could not find any nv "
     "files on this host!", "driver", ["--gres=gpu", "ldconfig"]),
    # apptainer --rocm without ROCm on the node
    ("apptainer shell --rocm pytorch_rocm.sif\nWARNING: Could not find any rocm files on this host!", "rocm-libs-missing",
     ["/etc/ld.so.conf.d/rocm.conf"]),
    # docker 18.09 on an old CentOS
    ("$ docker --version\nDocker version 18.09.1, build 4c52b90\n$ docker run --gpus all nvidia/cuda:11.8.0-base nvidia-smi"
     "\nunknown flag: --gpus\nSee 'docker run --help'.", "device-access", ["docker-ce", "nvidia.com/gpu=all"]),
    # podman with the legacy hook
    ("podman run --rm --hooks-dir=/usr/share/containers/oci/hooks.d docker.io/nvidia/cuda:12.2.0-base-ubi8 nvidia-smi\n"
     "Error: crun: error executing hook `/usr/bin/nvidia-container-runtime-hook` (exit code: 1): OCI runtime error",
     "device-access", ["nvidia-ctk cdi generate", "oci-nvidia-hook.json"]),
]

NEGATIVES = [
    # the taint line says the module LOADED: not a Secure Boot refusal
    ("[    4.1] nvidia: module verification failed: signature and/or required key missing - tainting kernel\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "Secure Boot refuses"),
    # GLIBCXX is the C++ runtime, not the OS's glibc
    ("ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by "
     "/opt/conda/lib/libLLVM-15.so)", "ldd --version shows this system"),
    # a Killed training run is not the pip download
    ("python train.py --batch 64\nEpoch 1: 12%|███ | 120/1000\nKilled", "pip install --no-cache-dir torch"),
    # a missing /dev/kfd inside a container that was started: the device flags, not the host driver
    ("docker exec -it rocm bash\nroot@c0ffee:/# rocminfo\nUnable to open /dev/kfd read-write: No such file or directory",
     "error gathering device information"),
    # NVML missing inside a Kubernetes pod: still the runtime reading, not the host driver
    ("kubectl logs nvidia-device-plugin-daemonset-abcde\nE0101 could not load NVML library: libnvidia-ml.so.1: cannot "
     "open shared object file: No such file or directory", "snap docker"),
    # a ROCm library asking for an executable stack: the ROCm fix stays
    ("ImportError: /opt/venv/lib/python3.12/site-packages/torch/lib/libamdhip64.so: cannot enable executable stack as "
     "shared object requires: Invalid argument", "or execstack -c on it"),
    # an extension's DLL failing: still the extension's rebuild, not torch's C++ runtime
    ("import flash_attn\nImportError: DLL load failed while importing flash_attn_2_cuda: The specified procedure could "
     "not be found.", "vc_redist.x64.exe"),
    # WinError 127 from a ROCm (HIP SDK) build: not the CUDA reinstall
    ("OSError: [WinError 127] The specified procedure could not be found. Error loading \"C:\\venv\\Lib\\site-packages\\"
     "torch\\lib\\amdhip64_6.dll\" or one of its dependencies.", "take other CUDA / cuDNN bin folders off PATH"),
    # pip's resolver conflict is not the externally-managed reading
    ("ERROR: Cannot install torch==2.1.0 and xformers==0.0.27 because these package versions have conflicting "
     "dependencies.", "python3 -m venv"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
