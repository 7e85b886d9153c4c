"""doctor, round 11 (issue 63): readings of driver libraries mounted where a container does not look, NVRTC's builtins
library, the container runtimes' own device rules (the cgroup driver, CDI, SELinux, an image without the group a run
adds, a toolbox recreated without the devices, --gpus on a machine without a GPU), and the variables a launcher does
not pass to its ranks. Each paste is written for its reading (another GPU, tool, version or wording than the mined
case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a pod on GKE that requests the GPU and whose image finds no driver (another library, torch's words via HF)
    ("Deploying our transformers inference image (python:3.11-slim base) on a GKE Autopilot node pool with "
     "nvidia.com/gpu: 1 in limits; torch.cuda.is_available() returns False", "rocm-libs-missing",
     ["/usr/local/nvidia/lib64", "LD_LIBRARY_PATH"]),
    # Triton's launcher link failing inside a GKE pod, the mount shown by ls: LIBRARY_PATH
    ("sglang on GKE, torch.compile:\n/usr/bin/ld: cannot find -l:libcuda.so.1: No such file or directory\ncollect2: "
     "error: ld returned 1 exit status\n$ ls /usr/local/nvidia/lib64/libcuda.so.1\n/usr/local/nvidia/lib64/libcuda.so.1",
     "rocm-libs-missing", ["LIBRARY_PATH=/usr/local/nvidia/lib64", "ldconfig"]),
    # the mount already on LD_LIBRARY_PATH and still not found: the loader's cache
    ("Container-Optimized OS node, T4\nenv: LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64\n"
     "OSError: libcuda.so.1: cannot open shared object file: No such file or directory", "rocm-libs-missing",
     ["ldconfig"]),
    # a bare libcuda.so.1 miss, nothing said of the machine: the list names GKE's mount among the places
    ("./server: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or "
     "directory", "rocm-libs-missing", ["/usr/local/nvidia/lib64", "--gpus all"]),
    # a container that had the GPU and loses it hours later (another server, NVML's words): the cgroup driver
    ("vllm in docker compose on an RTX A5000: works at first, then after a few hours nvidia-smi inside the container "
     "says Failed to initialize NVML: Unknown Error until I restart it", "device-access",
     ["native.cgroupdriver=cgroupfs", "/etc/docker/daemon.json"]),
    # the same said as a fallback to the CPU after idling (CUDA error 800 in the log)
    ("LocalAI container on a GeForce RTX 3060 stops using the GPU after being idle overnight\nCUDA error 800: "
     "operation not permitted", "device-access", ["cgroupfs"]),
    # NVML blocked only inside docker, the GPU fine outside: the runtime's no-cgroups
    ("Ubuntu 24.04 with docker-ce and nvidia-container-toolkit 1.17; nvidia-smi works on the host but inside the "
     "docker container: Failed to initialize NVML: GPU access blocked by the operating system", "device-access",
     ["no-cgroups = false", "config.toml"]),
    # podman with an NVIDIA card that runs on the CPU: the CDI spec
    ("podman run --rm -it localhost/llamacpp-cuda on my RTX 4080: the model runs on the CPU, no GPU usage in "
     "nvidia-smi", "device-access", ["nvidia-ctk cdi generate"]),
    # an SELinux denial of a container on the AMD compute node (another device type)
    ("podman run --device /dev/kfd --device /dev/dri rocm/pytorch rocminfo\ntype=AVC msg=audit(1712.1:88): avc:  "
     "denied  { read write } for  pid=4411 comm=\"rocminfo\" path=\"/dev/dri/renderD129\" scontext=system_u:"
     "system_r:container_t:s0:c1,c2 tcontext=system_u:object_r:dri_device_t:s0 tclass=chr_file permissive=0",
     "device-access", ["container-selinux", "label=disable"]),
    # --group-add of a group the image lacks (render this time)
    ("docker compose up\nError response from daemon: Unable to find group render: no matching entries in group file",
     "device-access", ["--group-add $(getent group render | cut -d: -f3)", "groupadd -r render"]),
    # a toolbox recreated after an image upgrade on an RX 7900 XTX: the device flags
    ("after I upgraded the image and recreated my distrobox (distrobox create rocm-box --image rocm/dev-ubuntu-24.04), "
     "rocminfo inside no longer finds the GPU; RX 7900 XTX", "device-access",
     ["--device /dev/kfd", "distrobox create rocm-box"]),
    # --gpus on a cloud VM that has no GPU, running a CPU-only image
    ("docker run --gpus all -p 8080:8080 localai/localai:latest-cpu\ndocker: Error response from daemon: could not "
     "select device driver \"\" with capabilities: [[gpu]].\nthe VM has no GPU, it's CPU-only", "device-access",
     ["remove --gpus all"]),
    # NVRTC's builtins of CUDA 12.4 not found (CuPy's words, another GPU): the pinned wheel and its folder
    ("cupy.cuda.compiler.CompileException: nvrtc: error: failed to open libnvrtc-builtins.so.12.4.\n  Make sure that "
     "libnvrtc-builtins.so.12.4 is installed correctly.\n(RTX 4070 Ti, Ubuntu 22.04)", "rocm-libs-missing",
     ['nvidia-cuda-nvrtc-cu12==12.4.*', "nvidia/cuda_nvrtc/lib", "libnvrtc-builtins.so.12.4"]),
    # CUDA 13's builtins (the new wheel layout)
    ("torch.jit fuser on a B200: RuntimeError: nvrtc: error: failed to open libnvrtc-builtins.so.13.1", "rocm-libs-missing",
     ['nvidia-cuda-nvrtc==13.1.*', "nvidia/cu13/lib"]),
    # WSL's libcuda.so not found by a dlopen (another library): the loader's cache as well as the variable
    ("Ubuntu 22.04 under WSL2, RTX 3080 laptop\nllama_cpp: OSError: libcuda.so: cannot open shared object file: No such "
     "file or directory", "wsl", ["sudo ldconfig", "/usr/lib/wsl/lib"]),
    # TensorFlow with [and-cuda] listing no GPU on Linux (another release, GPU, the list on the same line)
    ("Ubuntu 22.04, RTX 4090, pip install 'tensorflow[and-cuda]==2.17.0' in a fresh venv\n>>> tf.config."
     "list_physical_devices('GPU')\n[]", "rocm-libs-missing", ["LD_LIBRARY_PATH", "nvidia.__path__"]),
    # tensorflow-rocm after a ROCm upgrade, the loader's words
    ("RX 7900 XT, installed ROCm 6.1 with amdgpu-install, pip install tensorflow-rocm\nImportError: "
     "libMIOpen.so.1: cannot open shared object file: No such file or directory", "rocm-libs-missing",
     ["LD_LIBRARY_PATH=/opt/rocm/lib"]),
    # ZLUDA's stand-in DLLs failing on a dependency (SD.Next, another card, cuBLAS's DLL this time; on a 6.x SDK the
    # first cause is the ZLUDA build for 5.7, r11a's zluda_hip_release)
    ("SD.Next with ZLUDA on an RX 6800 XT, HIP SDK 5.7\nOSError: [WinError 126] The specified module could not be "
     "found. Error loading \"C:\\sdnext\\venv\\Lib\\site-packages\\torch\\lib\\cublas64_11.dll\" or one of its "
     "dependencies.", "rocm-libs-missing", ["%HIP_PATH%bin", "ROCm\\5.7", "ZLUDA folder to PATH"]),
    # a rank under torchrun that sees no GPU when the process group starts (another launcher's prefix)
    ("torchrun --nnodes 2 --nproc-per-node 8 train.py\n[rank3]: RuntimeError: ProcessGroupNCCL is only supported with "
     "GPUs, no GPUs found!", "env-not-applied", ["LD_LIBRARY_PATH", ".deepspeed_env", "mpirun -x"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a pod on GKE that never requested the GPU: the device plugin's reading, not the mount
    ("kubectl apply -f job.yaml on GKE: RuntimeError: Found no NVIDIA driver on your system.", "/usr/local/nvidia/lib64"),
    # a Google Cloud VM without the driver, no container: install the driver, not GKE's mount
    ("GCP VM (n1-standard-8 with a T4), Ubuntu 22.04, pip install torch\nRuntimeError: Found no NVIDIA driver on your "
     "system.", "/usr/local/nvidia/lib64"),
    # a link of -lcuda on a workstation with no folder shown: the toolkit's stub, not a mount
    ("/usr/bin/ld: cannot find -lcuda\ncollect2: error: ld returned 1 exit status (building bitsandbytes from source)",
     "/usr/local/nvidia"),
    # a container that never had the GPU: not the cgroup driver
    ("docker run ollama/ollama on my RTX 3090: library=cpu from the first start, no GPU detected", "cgroupdriver"),
    # a failure after a while in a container that is not the GPU lost: not the cgroup driver
    ("training in a docker container on an RTX 4090: after a while it crashes with torch.OutOfMemoryError: CUDA out "
     "of memory. Tried to allocate 2.00 GiB", "cgroupdriver"),
    # NVML blocked in WSL itself, no container: WSL's reading, not the runtime's config
    ("nvidia-smi in WSL 2 Ubuntu: Failed to initialize NVML: GPU access blocked by the operating system",
     "no-cgroups"),
    # podman with an AMD card on the CPU: devices, not NVIDIA's CDI
    ("podman run rocm/llama.cpp on my RX 7800 XT runs on the CPU, no GPU usage", "nvidia-ctk cdi"),
    # --gpus with no toolkit on a machine that has an NVIDIA GPU: install the toolkit, keep --gpus
    ("docker run --gpus all nvidia/cuda:12.4.1-base nvidia-smi on my RTX 4090 host\ndocker: Error response from "
     "daemon: could not select device driver \"\" with capabilities: [[gpu]].", "remove --gpus all"),
    # a distrobox on an NVIDIA card: not the ROCm device flags
    ("distrobox recreated after upgrade, CUDA cannot find the GPU on my RTX 3070", "--device /dev/kfd"),
    # libnvrtc itself (not its builtins) missing: the CUDA library reading, not the builtins'
    ("OSError: libnvrtc.so.12: cannot open shared object file: No such file or directory", "libnvrtc-builtins"),
    # TensorFlow without [and-cuda] on Linux listing no GPU: not the wheels' folders
    ("pip install tensorflow==2.15.0 (plain, CUDA 12.2 toolkit installed)\n>>> tf.config.list_physical_devices('GPU')"
     "\n[]", "nvidia.__path__"),
    # TensorFlow on native Windows: no GPU build at all, not the loader path
    ("Windows 11, pip install tensorflow[and-cuda]\n>>> tf.config.list_physical_devices('GPU')\n[]",
     "nvidia.__path__"),
    # torch's DLLs failing without ZLUDA: the Visual C++ runtime reading, not ZLUDA's PATH
    ("OSError: [WinError 126] The specified module could not be found. Error loading \"C:\\venv\\Lib\\site-"
     "packages\\torch\\lib\\caffe2_nvrtc.dll\" or one of its dependencies. (RTX 3060, Windows 11)", "ZLUDA folder"),
    # a CPU torch in the rank: not the launcher's environment
    ("torch 2.3.0+cpu\n[rank0]: RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
     ".deepspeed_env"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
