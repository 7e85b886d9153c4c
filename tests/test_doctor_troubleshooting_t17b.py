"""doctor, round 17 (t17b): the situations NVIDIA's and PyTorch's own pages list with the fix they accept - the CUDA
installation guides (Linux, Windows), the CUDA compatibility page, CUDA on WSL, the NVIDIA Container Toolkit's install,
troubleshooting and CDI pages, cuDNN's install guide, PyTorch's FAQ, CUDA semantics, reproducibility, multiprocessing
and Windows notes, NCCL's troubleshooting page, TensorFlow's pip page and JAX's install and GPU-memory pages. Each paste
is written in another wording, card or version than the probe that asked for the reading (/work/notes/t17b_probe.py);
the negatives keep each new reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # CUDA installation guide (Linux): post-installation PATH, with the machine's own toolkit release
    ("Debian 12, RTX A4000. installed the toolkit with sudo apt install cuda-toolkit-12-6\n$ nvcc -V\n"
     "bash: nvcc: command not found", "rocm-libs-missing", ["/usr/local/cuda-12.6/bin", "LD_LIBRARY_PATH"]),
    ("Windows 11, CUDA 12.8 installer finished, RTX 5080\nPS> nvcc --version\n'nvcc' is not recognized as an internal "
     "or external command", "rocm-libs-missing", ["CUDA\\v12.8\\bin", "CUDA_PATH"]),
    ("ERROR: The Nouveau kernel driver is currently in use by your system. This driver is incompatible with the NVIDIA "
     "driver\nUbuntu 24.04 server, RTX A5000, NVIDIA-Linux-x86_64-560.35.03.run", "driver", ["blacklist nouveau"]),
    ("openSUSE, Quadro RTX 4000, runfile 550.90\nERROR: Unable to find the kernel source tree for the currently "
     "running kernel.", "driver", ["kernel-devel"]),
    ("apt-get update fails on our L40S node (Ubuntu 22.04)\nW: GPG error: https://developer.download.nvidia.com/compute/"
     "cuda/repos/ubuntu2204/x86_64  InRelease: The following signatures couldn't be verified because the public key is "
     "not available: NO_PUBKEY A4B469963BF863CC", "driver", ["cuda-keyring", "apt-key del 7fa2af80"]),
    # the CUDA compatibility page
    ("GTX 1080 Ti, driver 460.91, torch 2.2.2+cu121\nRuntimeError: The NVIDIA driver on your system is too old (found "
     "version 11020).", "driver", ["update the NVIDIA driver"]),
    ("RTX 3090 host, driver 550.120; the image installs cuda-compat-12-8\ncudaGetDeviceCount(): Error 803: system has "
     "unsupported display driver / cuda driver combination", "driver", ["cuda-compat", "LD_LIBRARY_PATH"]),
    ("vllm on an L4, driver 535.104\nRuntimeError: CUDA error: the provided PTX was compiled with an unsupported "
     "toolchain.", "driver", ["update the NVIDIA driver"]),
    # driver state
    ("Ubuntu 22.04 after a kernel upgrade, A6000\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
     "driver. Make sure that the latest NVIDIA driver is installed and running.", "driver", ["running kernel"]),
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 560.35\nRHEL 9, 2x L40",
     "driver", ["reboot"]),
    ("Pop!_OS 22.04, RTX 3070 laptop\nmodprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
     "driver", ["mokutil"]),
    # host compilers: nvcc's newest gcc, from its own message
    ("Ubuntu 24.04 default gcc 13, CUDA 11.8, pip install flash-attn\n/usr/local/cuda-11.8/include/crt/"
     "host_config.h:132:2: error: #error -- unsupported GNU version! gcc versions later than 11 are not supported!",
     "abi-mismatch", ["gcc-11", "g++-11", "CUDAHOSTCXX=g++-11"]),
    ("Fedora 41 (gcc 14), CUDA 12.4 from the rpm repo\n#error -- unsupported GNU version! gcc versions later than 13 are "
     "not supported!", "abi-mismatch", ["gcc-toolset-13", "-ccbin g++-13"]),
    ("Windows 10, CUDA 12.1, compiling xformers from source\nnvcc fatal   : Cannot find compiler 'cl.exe' in PATH",
     "rocm-libs-missing", ["Visual Studio"]),
    ("CUDA 12.2 with Visual Studio 2022 17.12 on Windows 11, RTX 4060\nhost_config.h(153): fatal error C1189: #error:  -- "
     "unsupported Microsoft Visual Studio version! Only the versions between 2017 and 2022 (inclusive) are supported!",
     "abi-mismatch", ["-allow-unsupported-compiler", "MSVC toolset"]),
    # CUDA on WSL
    ("WSL2 Ubuntu 24.04, RTX 4070 Ti. Followed a guide and did sudo apt-get install cuda-drivers\nnvidia-smi: NVIDIA-SMI "
     "has failed because it couldn't communicate with the NVIDIA driver", "wsl", ["cuda-toolkit-12-x",
                                                                               "never install a Linux driver"]),
    ("Ubuntu on WSL, GTX 1660\nldconfig: /usr/lib/wsl/lib/libcuda.so.1 is not a symbolic link", "wsl", ["harmless"]),
    ("training in WSL2 (microsoft-standard-WSL2 kernel), RTX 3080\nDataLoader(..., pin_memory=True, num_workers=8)\n"
     "RuntimeError: CUDA error: out of memory - only when pinning, nvidia-smi shows 2 GB used", "wsl",
     ["pin_memory=False", ".wslconfig"]),
    # NVIDIA Container Toolkit
    ("after a few days the GPU disappears inside our containers (Ubuntu 24.04, 8x H100)\nroot@c0ffee:/# nvidia-smi\n"
     "Failed to initialize NVML: Unknown Error", "device-access", ["create-dev-char-symlinks"]),
    ("fresh Debian 12 host, RTX 4090, driver 560\n$ docker run --gpus all pytorch/pytorch nvidia-smi\ndocker: Error "
     "response from daemon: could not select device driver \"\" with capabilities: [[gpu]].", "device-access",
     ["nvidia-ctk runtime configure"]),
    ("docker run --gpus all nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi\nnvidia-container-cli: initialization error: "
     "load library failed: libnvidia-ml.so.1: cannot open shared object file: no such file or directory: unknown",
     "driver", ["snap", "nvidia-smi must work"]),
    ("host with a P100 on driver 450\ndocker run --gpus all nvidia/cuda:11.8.0-base-ubuntu22.04\nnvidia-container-cli: "
     "requirement error: unsatisfied condition: cuda>=11.8, please update your driver to a newer version, or use an "
     "earlier cuda container: unknown", "driver", ["520"]),
    ("CentOS Stream 9, SELinux enforcing, A30, podman with the nvidia hook\nError: OCI runtime error: crun: error "
     "executing hook: nvidia-container-cli: initialization error: open failed: /dev/nvidiactl: permission denied",
     "device-access", ["label=disable", "restorecon"]),
    ("rootless docker, Ubuntu 24.04, RTX 4080\nnvidia-container-cli: mount error: failed to add device rules: unable to "
     "find any existing device filters attached to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not "
     "permitted: unknown", "device-access", ["no-cgroups = true"]),
    ("podman 4.6 on RHEL 9.3, L40S\n$ podman run --rm --device nvidia.com/gpu=all ubi9 nvidia-smi\nError: setting up CDI "
     "devices: unresolvable CDI devices nvidia.com/gpu=all", "wheel-platform", ["podman 5", "nvidia-ctk cdi generate"]),
    # cuDNN's install guide
    ("Windows 11, GTX 1070, tensorflow 2.10.1, CUDA 11.2 installed\nCould not load dynamic library 'cudnn64_8.dll'; "
     "dlerror: cudnn64_8.dll not found", "rocm-libs-missing", ["TensorFlow 2.10 is the release built for CUDA 11.2",
                                                               "bin folder on PATH"]),
    ("whisperX on Windows 10, RTX 2060, cuDNN 8.6\nCould not locate zlibwapi.dll. Please make sure it is in your library "
     "path!", "rocm-libs-missing", ["zlibwapi.dll"]),
    # PyTorch's CUDA semantics, FAQ, reproducibility, multiprocessing and Windows notes
    ("workstation with an RTX A6000 and an RTX 3060; I set CUDA_VISIBLE_DEVICES=1 and torch uses the A6000, but "
     "nvidia-smi lists the A6000 as GPU 0", "visibility", ["CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1"]),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.15 GiB "
     "of which 1.02 GiB is free. Of the allocated memory 55.40 GiB is allocated by PyTorch, and 21.70 GiB is reserved "
     "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.", "out-of-memory",
     ["expandable_segments:True"]),
    ("GPU memory keeps increasing every iteration on my T4 until it crashes\n    running_loss += criterion(out, y)  # no"
     "\n    epoch_loss += loss", "out-of-memory", ["loss.item()"]),
    ("V100: I deleted the model with del model and ran gc.collect(), yet nvidia-smi keeps showing 14 GB used by the "
     "python process", "out-of-memory", ["empty_cache", "memory_reserved"]),
    ("A100 80GB, custom Triton kernel\nRuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at "
     "some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
     "CUDA_LAUNCH_BLOCKING=1", "gpu-hang", ["CUDA_LAUNCH_BLOCKING=1"]),
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
     "'spawn' start method\n(multiprocessing.Pool over images on an RTX 4070)", "device-access", ["spawn"]),
    ("Trainer(full_determinism=True) on an H100\nRuntimeError: Deterministic behavior was enabled with either "
     "`torch.use_deterministic_algorithms(True)` or `at::Context::setDeterministicAlgorithms(true)`, but this operation "
     "is not deterministic because it uses CuBLAS and you have CUDA >= 10.2.", "env-not-applied",
     ["CUBLAS_WORKSPACE_CONFIG=:4096:8", "warn_only=True"]),
    ("Windows 10, GTX 1650, train.py with DataLoader(num_workers=2) at the top level\nRuntimeError:\n        An attempt "
     "has been made to start a new process before the\n        current process has finished its bootstrapping phase.",
     "device-access", ['if __name__ == "__main__"', "num_workers=0"]),
    # NCCL's troubleshooting page
    ("accelerate launch on 2x A40\nNCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 41000\n"
     "torch.distributed.DistBackendError: NCCL error ... invalid usage", "visibility", ["LOCAL_RANK", "set_device"]),
    ("kubernetes pod, 4x A100, deepspeed\nNCCL WARN Error while creating shared memory segment /dev/shm/nccl-Ab12Cd "
     "(size 4194656)", "multi-gpu-transport", ["shm"]),
    ("two servers with 4x L40S each, torchrun --nnodes 2, stuck at init_process_group\nNCCL INFO NET/Socket : Using "
     "[0]lo:127.0.0.1<0>\nthe servers talk over eno1 (192.168.1.0/24)", "multi-gpu-transport",
     ["NCCL_SOCKET_IFNAME=eno1", "GLOO_SOCKET_IFNAME=eno1"]),
    # TensorFlow's and JAX's install pages
    ("pip install tensorflow==2.16.1 on Ubuntu 24.04 with an RTX 4060 Ti\nCannot dlopen some GPU libraries. Please make "
     "sure the missing libraries mentioned above are installed properly if you would like to use GPU.",
     "rocm-libs-missing", ["tensorflow[and-cuda]"]),
    ("Windows 10 native, RTX 3060, TensorFlow 2.15: tf.config.list_physical_devices('GPU') is empty", "wheel-platform",
     ["WSL2"]),
    ("jax 0.4.30 installed from PyPI, A10G\nAn NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is "
     "not installed. Falling back to cpu.", "torch-build", ["jax[cuda12]"]),
    ("pip install -U \"jax[cuda12]\" on an H100 box; export LD_LIBRARY_PATH=/usr/local/cuda-12.1/lib64 in .bashrc\n"
     "Loaded runtime CuDNN library: 8.9.2 but source was compiled with: 9.1.0.  CuDNN library needs to have matching "
     "major version and equal or higher minor version.", "wheel-platform", ["unset LD_LIBRARY_PATH"]),
    ("flax training on an RTX 4090: as soon as jax starts nvidia-smi shows it grabs almost all the GPU memory, and the "
     "PyTorch dataloader in the same job then fails", "out-of-memory",
     ["XLA_PYTHON_CLIENT_PREALLOCATE=false", "XLA_CLIENT_MEM_FRACTION"]),
]

NEGATIVES = [
    # nvcc found and working: no PATH reading
    ("$ nvcc --version\nCuda compilation tools, release 12.4, V12.4.131\nflash-attn builds fine", "post-installation"),
    # a loss summed as a number: not the history reading
    ("total_loss += loss.item()\nCUDA out of memory. Tried to allocate 2.00 GiB", "accumulate the number"),
    # the loss summed as a tensor but nothing said to grow or fail: no reading
    ("for batch in loader:\n    loss = model(batch)\n    total_loss += loss\nprint(total_loss / len(loader))",
     "accumulate the number"),
    # nvidia-smi mentioned without memory kept: not the caching allocator
    ("nvidia-smi shows driver 550.54 and CUDA Version 12.4 on my RTX 3090", "empty_cache"),
    # an AMD card's memory kept: not torch's CUDA cache reading
    ("rocm-smi still shows 20 GB used after del model on my Radeon PRO W7900", "memory_reserved"),
    # JAX named, memory not said taken: no preallocation reading
    ("import jax; print(jax.devices())  # [CudaDevice(id=0)] on an RTX 4090, works", "XLA_PYTHON_CLIENT_PREALLOCATE"),
    # JAX with the variable already set: not again
    ("XLA_PYTHON_CLIENT_PREALLOCATE=false python train.py\njax still takes 75% of the GPU", "allocate as needed"),
    # pinned memory on native Linux: not the WSL reading
    ("Ubuntu 22.04 on bare metal, RTX 3080\nDataLoader(pin_memory=True)\nRuntimeError: CUDA error: out of memory",
     "wslconfig"),
    # NCCL on the right interface: no interface reading
    ("NCCL INFO NET/Socket : Using [0]ens5:10.0.0.4<0>\nNCCL INFO comm 0x55 rank 0 nranks 16 - Init COMPLETE",
     "NCCL_SOCKET_IFNAME="),
    # the interface already chosen
    ("NCCL_SOCKET_IFNAME=eth0 torchrun ...\nNCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>", "GLOO_SOCKET_IFNAME"),
    # a gcc message with no version limit named: not the newest-gcc reading
    ("gcc: error: unrecognized command-line option '-mavx512fp16'", "beside the default"),
    # Error 803 with no compat package: not the compat reading
    ("Ubuntu 22.04, RTX 4090, driver just upgraded\nError 803: system has unsupported display driver / cuda driver "
     "combination", "cuda-compat-*"),
    # a cuDNN older than built with no LD_LIBRARY_PATH set: no unset advice
    ("pip install jax[cuda12]\nLoaded runtime CuDNN library: 9.0.0 but source was compiled with: 9.1.0.",
     "unset LD_LIBRARY_PATH"),
    # another apt key error, not NVIDIA's repository
    ("W: GPG error: https://download.docker.com/linux/ubuntu jammy InRelease: NO_PUBKEY 7EA0A9C3F273FCD8",
     "cuda-keyring"),
    # deterministic algorithms asked and working: no variable reading
    ("torch.use_deterministic_algorithms(True)\nCUBLAS_WORKSPACE_CONFIG=:4096:8 is set; results are reproducible now",
     "warn_only"),
    # one card model only: no device-order reading
    ("2x RTX 3090; CUDA_VISIBLE_DEVICES=1 python a.py uses the second card as expected, nvidia-smi shows it as GPU 1",
     "CUDA_DEVICE_ORDER"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
