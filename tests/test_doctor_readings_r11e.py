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
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a pod on GKE that never requested the GPU: the device plugin's reading, not the mount
    ("kubectl apply -f job.yaml on GKE: RuntimeError: Found no NVIDIA driver on your system.", "/usr/local/nvidia/lib64"),
    # a link of -lcuda on a workstation with no folder shown: the toolkit's stub, not a mount
    ("/usr/bin/ld: cannot find -lcuda\ncollect2: error: ld returned 1 exit status (building bitsandbytes from source)",
     "/usr/local/nvidia"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
