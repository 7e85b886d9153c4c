"""doctor, round 18 (r18a): readings for missed training cases of a stale HIP_PATH under ROCm 6+, apt sources pointing at
a repo.radeon.com folder that does not exist, older ROCm packages in the way of AMD's, rocminfo without kmod (lsmod),
Transformer Engine's source build not finding cuDNN (CUDNN_PATH), rocBLAS used without its header since ROCm 5.7,
ctranslate2's CUDA libraries from the system (libcublas11, libcudnn9-cuda-12) or faster-whisper's CUDA 11 release,
Triton's -lcuda (ldconfig, TRITON_LIBCUDA_PATH, conda-forge's gxx), Windows' old System32 DirectML.dll, no OpenCL
runtime for an AMD GPU, and the ZLUDA and TheRock releases that shipped without a working piece. Each paste is written
for its reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # hipcc under a HIP_PATH of the 5.x layout, on ROCm 6.2.4 (Fedora, a CMake build)
    ("Fedora 40, ROCm 6.2.4 from amdgpu-install\n$ cmake -DCMAKE_CXX_COMPILER=hipcc ..\nsh: line 1: "
     "/opt/rocm-6.2.4/hip/bin/hipcc: No such file or directory\nCMake Error: the C++ compiler is not able to compile a "
     "simple test program", "rocm-libs-missing", ["unset HIP_PATH", "--rocmrelease=all", "6.2.4"]),
    # the same with the unversioned prefix and the release said elsewhere
    ("upgraded to ROCm 6.1 and now hipconfig prints: HIP version file /opt/rocm/hip/share/hip/version not found",
     "rocm-libs-missing", ["unset HIP_PATH"]),
    # apt's 404 for the amdgpu repository's .0 folder on noble
    ("sudo apt update\nHit:1 http://archive.ubuntu.com/ubuntu noble InRelease\nErr:5 https://repo.radeon.com/amdgpu/6.3.0/"
     "ubuntu noble Release\n  404  Not Found [IP: 23.1.2.3 443]\nE: The repository 'https://repo.radeon.com/amdgpu/6.3.0/"
     "ubuntu noble Release' does not have a Release file.", "rocm-libs-missing",
     ["amdgpu.list", "repo.radeon.com/amdgpu/6.3/ubuntu noble"]),
    # a release folder without the machine's codename (not a .0 folder): the listing to pick from
    ("E: The repository 'https://repo.radeon.com/rocm/apt/5.7.1 noble Release' does not have a Release file.",
     "rocm-libs-missing", ["rocm.list", "noble", "repo.radeon.com/rocm/apt/"]),
    # apt's resolver (Debug::pkgProblemResolver) on Debian 13, the distribution's hipcc in the way of ROCm 6.2
    ("Debian 13, sudo apt -o Debug::pkgProblemResolver=yes install rocm-hip-runtime\nStarting pkgProblemResolver with "
     "broken count: 1\nBroken rocm-hip-runtime:amd64 Depends on hipcc:amd64 < 5.2.3-12 @ii mK > (= 1.1.1.60200-66~22.04)",
     "rocm-libs-missing", ["sudo apt remove hipcc", "amdgpu-dkms", "autoremove"]),
    # rocminfo in a container image without lsmod
    ("podman run -it --device /dev/kfd --device /dev/dri rocm/dev-ubuntu-24.04\n# rocminfo\nsh: 1: lsmod: not found\n"
     "ROCk module is NOT loaded, possibly no GPU devices", "rocm-libs-missing", ["apt-get install kmod"]),
    # Transformer Engine from git, cuDNN's header not found, a cu124 torch
    ("pip install git+https://github.com/NVIDIA/TransformerEngine.git@stable\ntorch 2.4.1+cu124, nvidia-cudnn-cu12 9.1 "
     "installed with pip\n/tmp/te/transformer_engine/common/fused_attn/fused_attn.cpp:9:10: fatal error: cudnn.h: No "
     "such file or directory", "rocm-libs-missing", ["CUDNN_PATH", "cuda-12.4", "build/"]),
    # a hipified extension on ROCm 6.1 with a rocBLAS name undeclared
    ("ROCm 6.1.2, building the extension with hipcc\nsrc/blas_utils_hip.cpp:42:5: error: use of undeclared identifier "
     "'rocblas_gemm_strided_batched_ex'", "rocm-libs-missing", ["#include <rocblas/rocblas.h>", "blas_utils_hip.cpp"]),
    # WhisperX on an Ubuntu 22.04 server whose CUDA is 12: CUDA 11's cuBLAS from the system
    ("whisperx audio.mp3 --model large-v2\nUbuntu 22.04, CUDA 12.2 driver\nRuntimeError: Library libcublas.so.11 is not "
     "found or cannot be loaded", "rocm-libs-missing", ["sudo apt-get install libcublas11"]),
    # a subtitle app on faster-whisper, Windows 10, a GTX 1660
    ("Subtitle Edit's faster-whisper engine on Windows 10 with a GTX 1660 Super:\nLibrary cublas64_12.dll is not found "
     "or cannot be loaded", "rocm-libs-missing", ["faster-whisper==0.10.1"]),
    # cuDNN 9's cnn library under ctranslate2 4.6 with no torch in the environment
    ("ctranslate2==4.6.0 faster-whisper 1.1.1 on an Ubuntu 24.04 VM, no torch installed\nUnable to load any of "
     "{libcudnn_cnn.so.9.1.0, libcudnn_cnn.so.9.1, libcudnn_cnn.so.9, libcudnn_cnn.so}\nInvalid handle. Cannot load "
     "symbol cudnnCreateConvolutionDescriptor", "rocm-libs-missing", ["libcudnn9-cuda-12"]),
    # torch.compile's Triton launcher build on a workstation, no conda
    ("torch 2.3.1+cu121, model = torch.compile(model)\n/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
     "collect2: error: ld returned 1 exit status\ntorch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised",
     "rocm-libs-missing", ["sudo ldconfig", "TRITON_LIBCUDA_PATH", "stubs"]),
    # the same in a miniconda environment: conda-forge's compiler and CUDA
    ("subprocess.CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpa1/main.c', '-O3', '-shared', '-lcuda', "
     "'-L/home/li/miniconda3/envs/vllm/lib/python3.11/site-packages/triton/backends/nvidia/lib']' returned non-zero exit "
     "status 1.\n/usr/bin/ld: cannot find -lcuda", "rocm-libs-missing", ["conda install -c conda-forge gxx"]),
    # an ONNX app on an RX 7600 taking Windows' own DirectML.dll
    ("Amuse crashes on my RX 7600 as soon as the DirectML session starts (onnxruntime-directml 1.20)\n"
     "PS> (Get-Item C:\\Windows\\System32\\DirectML.dll).VersionInfo.FileVersion\n1.8.2109.1013", "rocm-libs-missing",
     ["Microsoft.AI.DirectML", "1.15.4", "beside the program's onnxruntime.dll"]),
    # hashcat's newer wording, an RX 7800 XT, ROCm installed without OpenCL
    ("Ubuntu 24.04, Radeon RX 7800 XT, ROCm 6.2 installed with amdgpu-install --usecase=rocm\n$ hashcat -I\n"
     "clGetPlatformIDs(): CL_PLATFORM_NOT_FOUND_KHR\nATTENTION! No OpenCL, HIP or CUDA compatible platform found.",
     "rocm-libs-missing", ["amdgpu-install --usecase=opencl", "amdgpu-pro", "clinfo"]),
    # darktable's OpenCL said through clinfo
    ("darktable doesn't offer OpenCL on my Radeon RX 6650 XT (Debian 12, ROCm 6.0)\n$ clinfo\nNumber of platforms"
     "                               0", "rocm-libs-missing", ["--usecase=opencl"]),
    # ZLUDA 3.8.3 said short
    ("ZLUDA 3.8.3 zip is missing cudart.dll, so SD.Next won't start", "rocm-libs-missing", ["v3.8.4"]),
    # another date of the broken TheRock nightlies, amd-smi from a script
    ("pip install -i https://rocm.nightlies.amd.com/v2/gfx1151/ rocm[libraries]==7.11.0a20260111\n$ amd-smi list\n"
     "amd-smi: error: the console script exits with status 1", "rocm-libs-missing", ["dbad34bf", "2188"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # ROCm 5.4 still had the hip/ folder: a missing hipcc there is not a stale variable
    ("ROCm 5.4.3\n/opt/rocm-5.4.3/hip/bin/hipcc: No such file or directory", "unset HIP_PATH"),
    # apt reaching the repository fine, the package name wrong
    ("Hit:7 https://repo.radeon.com/rocm/apt/6.4 jammy InRelease\nE: Unable to locate package rocm-hip-sdk6", "short number"),
    # a distribution's own package conflict outside ROCm
    ("The following packages have unmet dependencies:\n libnvidia-compute-550 : Depends: libnvidia-gl-550 but it is not "
     "going to be installed", "amdgpu-dkms"),
    # the module really missing on the host: the driver's reading, not kmod
    ("rocminfo\nROCk module is NOT loaded, possibly no GPU devices\n$ sudo modprobe amdgpu\nmodprobe: FATAL: Module amdgpu "
     "not found in directory /lib/modules/6.8.0-45-generic", "apt-get install kmod"),
    # Transformer Engine's wheel at run time, no source build
    ("pip install transformer-engine[pytorch]\nimport transformer_engine\nOSError: libcudnn.so.9: cannot open shared "
     "object file: No such file or directory", "CUDNN_PATH"),
    # rocBLAS failing at run time is not a missing header
    ("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory for GPU "
     "arch : gfx1032", "#include <rocblas/rocblas.h>"),
    # Windows' DirectML.dll of the redistributable's own line is not the old copy
    ("onnxruntime-directml crashes at start\nC:\\Windows\\System32\\DirectML.dll FileVersion 1.15.4.0",
     "Microsoft.AI.DirectML"),
    # no OpenCL platform on an NVIDIA machine is not AMD's runtime
    ("RTX 3070, driver 550.54\nclGetPlatformIDs(): CL_PLATFORM_NOT_FOUND_KHR\nATTENTION! No OpenCL, HIP or CUDA "
     "compatible platform found.", "amdgpu-pro"),
    # another ZLUDA release without the file said missing
    ("ZLUDA 3.9.2 with HIP SDK 6.2: cublas64_11.dll not found", "v3.8.4"),
    # a TheRock nightly after the revert
    ("rocm[libraries,devel]==7.11.0a20260120\n$ amd-smi\nerror: failed to open the device", "dbad34bf"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
