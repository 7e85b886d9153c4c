"""Missing runtime libraries: a ROCm, CUDA or system library the loader does not find, a link that fails, an empty
Tensile folder, ZLUDA, a DLL that does not load, and a package built for another ROCm."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.packages import distribution_of
from steadytune.doctor.rules.base import (
    Context,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    _restate,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)
from steadytune.doctor.rules.install.onnxruntime_cuda import bundled_ort_fix
from steadytune.doctor.rules.install.shared import _table_fix, hip_sdk_release
from steadytune.doctor.rules.install.torch_build import _cudart_missing, _system_cuda_runtime
from steadytune.doctor.fixes import therock_family


# the user says they built the library themselves: "built and installed NCCL from the repo", make NCCL_HOME=<prefix>
_SELF_BUILT = re.compile(r"(?i)\b(?:built|compiled|installed)\b.{0,40}\bfrom (?:the )?(?:source|repo|git)")


def _self_built_prefix(ctx: Context, name: str) -> Optional[str]:
    """Where a library the user built lives: the <NAME>_HOME (or --prefix) the paste gives for it, else a placeholder;
    None when nothing says the user built it."""
    text = _text(ctx)
    stem = re.match(r"lib([a-z]+)", name)
    home = re.search(rf"(?i)\b{stem.group(1)}_(?:HOME|ROOT|DIR|PREFIX)=(\S+)", text) if stem else None
    if home:
        return home.group(1).strip("`'\"")
    if not _SELF_BUILT.search(text):
        return None
    prefix = re.search(r"--prefix[= ](\S+)", text)
    return prefix.group(1).strip("`'\"") if prefix else "<the prefix it was installed into>"


# system libraries a wheel links, by soname prefix: the package that has them (Debian/Ubuntu names)
_SYSTEM_LIBS = {"libmpi": "libopenmpi-dev", "libopenblas": "libopenblas-dev", "libnuma": "libnuma-dev",
                "libgomp": "libgomp1", "libomp": "libomp-dev", "libelf": "libelf1", "libtinfo": "libtinfo6",
                # opencv-python's GUI build (opencv-python-headless needs neither), soundfile, DeepSpeed's async I/O
                "libGL.so": "libgl1", "libgthread": "libglib2.0-0", "libglib": "libglib2.0-0", "libSM.so": "libsm6",
                "libXext": "libxext6", "libsndfile": "libsndfile1", "libaio": "libaio-dev",
                # the Vulkan loader a llama.cpp / ggml binary built with its Vulkan backend links (a ROCm or CUDA
                # image that bundles such a binary lacks it: text-generation-webui-docker#66), and the other graphics
                # loaders slim images leave out (Debian/Ubuntu package names: packages.debian.org)
                "libvulkan.so": "libvulkan1", "libEGL.so": "libegl1", "libOpenCL.so": "ocl-icd-libopencl1",
                "libXrender": "libxrender1"}
# the pip wheel (before its -cuXX) of each CUDA library
_CUDA_WHEELS = {"cublas": "nvidia-cublas", "nvrtc": "nvidia-cuda-nvrtc", "cufft": "nvidia-cufft",
                "curand": "nvidia-curand", "cusparse": "nvidia-cusparse", "cudart": "nvidia-cuda-runtime",
                "cudnn": "nvidia-cudnn"}
# a ROCm / HIP library by its name: the ROCm runtime (or TheRock's wheels) provides it
_ROCM_LIBRARY = re.compile(r"(?i)hip|roc(?:m|blas|fft|rand|solver|sparse|tx|profiler|tracer|_smi)|hsa|miopen|rccl|"
                           r"amd_comgr|amd_smi|amdpython|drm_amdgpu|tensile|migraphx")
# the ROCm package (AMD's repository names, Ubuntu and RHEL alike) that ships each runtime library
_ROCM_PACKAGE_OF = (("libhsakmt", "hsakmt-roct"), ("libhsa-runtime64", "hsa-rocr"), ("libamdhip64", "hip-runtime-amd"),
                    ("libhiprtc", "hip-runtime-amd"), ("librocblas", "rocblas"), ("libhipblaslt", "hipblaslt"),
                    ("libhipblas", "hipblas"), ("libMIOpen", "miopen-hip"), ("librccl", "rccl"),
                    ("librocm_smi64", "rocm-smi-lib"), ("libamd_comgr", "comgr"), ("librocsolver", "rocsolver"),
                    ("librocfft", "rocfft"), ("librocsparse", "rocsparse"), ("librocrand", "rocrand"),
                    ("libroctx64", "roctracer"), ("libroctracer64", "roctracer"))


def _rocm_package_of(name: str) -> Optional[str]:
    return next((package for stem, package in _ROCM_PACKAGE_OF if re.match(re.escape(stem) + r"\.so", name)), None)


# NVIDIA's CUDA libraries on Windows: cudnn_ops_infer64_8.dll, cublas64_12.dll, cublasLt64_11.dll, cudart64_110.dll
_CUDA_WINDOWS_DLL = re.compile(r"(?i)\b(cudnn|cublas|cublasLt|cudart|cufft|curand|cusparse|nvrtc)\w*?64_(\d{1,2})\d*\w*\.dll")


# the CUDA toolkit the user says is installed ("CUDA: 10.0", "cuda toolkit 10.1", nvcc's "release 10.0", a
# /usr/local/cuda-10.0 path), never nvidia-smi's "CUDA Version:" (the driver's ceiling) nor a wheel's +cu100
_TOOLKIT_SAID = re.compile(r"(?i)(?<![\w/.-])(?:CUDA(?:[ _-]?toolkit)?|CudaToolKit)(?!\s+Version:)\s*(?:version\s*)?"
                           r"[:=]?\s*v?(\d{1,2}\.\d)\b|\bnvcc\b.{0,80}\brelease (\d{1,2}\.\d)\b|"
                           r"Cuda compilation tools, release (\d{1,2}\.\d)\b|/usr/local/cuda-(\d{1,2}\.\d)\b")


def _toolkit_said(ctx: Context) -> Optional[str]:
    """The CUDA toolkit release the paste says is installed (X.Y), or None; none where two releases are said, or where
    nothing shows a system toolkit (its /usr/local/cuda path, nvcc, the word toolkit): a CUDA said beside torch may be
    only the one its wheel was built with."""
    if not re.search(r"(?i)/usr/local/cuda|\bnvcc\b|\btoolkit\b", _text(ctx)):
        return None
    found = {next(g for g in m.groups() if g) for line in ctx.sheet.lines for m in _TOOLKIT_SAID.finditer(line)
             if not re.search(r"(?i)CUDA Version:|CUDA used to build", line)}
    return found.pop() if len(found) == 1 else None


# SDKs that are mostly installed by unpacking an archive (no package puts their libraries where the loader looks):
# TensorRT's tar / zip (libnvinfer, its plugins and parsers), the ONNX Runtime C/C++ release archive (libonnxruntime),
# LibTorch's zip (libtorch, libc10). Their install guides end with the archive's lib folder added to LD_LIBRARY_PATH
# (TensorRT's installation guide, tar file: "Add the absolute path to the TensorRT lib directory to the environment
# variable LD_LIBRARY_PATH"; mmdeploy's TensorRT build docs export TENSORRT_DIR and LD_LIBRARY_PATH=$TENSORRT_DIR/lib;
# open-mmlab/mmdeploy#2594 fixed so). The Debian packages of TensorRT are named by major (libnvinfer8, libnvinfer10:
# TensorRT's installation guide, Debian install) (round 20, r20d)
_TAR_SDKS = (
    (re.compile(r"^lib(?:nvinfer|nvonnxparser|nvparsers|nvinfer_plugin)\w*\.so(?:\.(\d+))?"), "TensorRT",
     "<TensorRT-X.Y.Z>/lib:<cuda>/lib64:<cudnn>/lib (the unpacked tar's lib folder, with the CUDA and cuDNN it was "
     "built for)",
     "or install it as packages: NVIDIA's CUDA apt repository's libnvinfer{major} (and its plugin / parser packages), "
     "or pip install tensorrt, whose libraries come with the wheel"),
    (re.compile(r"^libonnxruntime(?:_providers_\w+)?\.so"), "ONNX Runtime's C/C++ release",
     "<onnxruntime-linux-x64-X.Y.Z>/lib (the unpacked archive's lib folder)", ""),
    (re.compile(r"^lib(?:torch|torch_cpu|torch_cuda|c10|c10_cuda)\.so"), "LibTorch",
     "<libtorch>/lib (the unzipped LibTorch's lib folder)", ""),
)


def _tar_sdk_fix(name: str) -> Optional[tuple[str, str]]:
    """(cause, fix) where the missing library is one of an SDK usually unpacked from an archive."""
    for pattern, sdk, folder, packages in _TAR_SDKS:
        m = pattern.match(name)
        if m is None:
            continue
        major = (m.group(1) if m.groups() and m.group(1) else "<major>")
        return (f"{name} is {sdk}'s library; {sdk} unpacked from its archive puts its libraries in its own lib "
                "folder, which the loader does not search unless LD_LIBRARY_PATH names it",
                f"export LD_LIBRARY_PATH={folder.split(' (')[0]}:$LD_LIBRARY_PATH ({folder.split(' (', 1)[1][:-1]}; add the line to ~/.bashrc or the environment's "
                "activate script so every shell has it), then import again"
                + (f"; {packages.format(major=major)}" if packages else ""))
    return None


def _missing_library_fix(ctx: Context, name: str, text: str) -> Optional[tuple[str, str, str]]:
    """(title, cause, fix) for the missing libraries that are not ROCm's own runtime."""
    therock = ctx.sheet.has("layout", "therock")
    if re.search(r"(?i)cannot enable executable stack", text):
        named = re.search(r"(/\S+?\.so[.\d]*):? cannot enable executable stack", text)
        if named and not re.search(r"(?i)amdhip|hiprtc|rocm|/opt/rocm|_rocm|hip", named.group(1)):
            # another package's library (a CUDA or CPU build, onnxruntime, ctranslate2): the flag is cleared on it
            return (f"{named.group(1).rsplit('/', 1)[-1]} asks for an executable stack",
                    "glibc 2.41 and newer refuse to load a library whose GNU_STACK header asks for an executable stack",
                    f"clear the flag on that library: patchelf --clear-execstack {named.group(1)} (or execstack -c "
                    "on it), then import again; or upgrade the package to a release built without the flag")
        return (f"{name} asks for an executable stack", "glibc 2.41 and newer refuse to load a library that asks for "
                "an executable stack, and older ROCm libraries do",
                f"clear the flag on the ROCm libraries in the environment: find <site-packages>/torch/lib \\( -name "
                f"'libamdhip64.so*' -o -name 'libhiprtc.so*' \\) -exec patchelf --clear-execstack {{}} \\; (or a torch "
                "built with a newer ROCm)")
    missing_tool = re.search(r'Can.t exec "(/opt/rocm[^"]*)"', text)
    if missing_tool:
        found = re.search(r"^\s*(/(?:usr|opt/rocm-[\d.]+)\S*?)/(?:bin|lib)/\S+\s*$", "\n".join(ctx.sheet.lines), re.M)
        root = found.group(1) if found else "<where ROCm is: /usr, /opt/rocm-X.Y.Z>"
        return ("the ROCm tools look for /opt/rocm, which is not there", f"hipcc and hipconfig default to /opt/rocm; "
                f"this ROCm lives elsewhere, so {missing_tool.group(1)} does not exist",
                f"export ROCM_PATH={root} (HIP_PATH too) before building, or link the install there: sudo ln -s "
                f"{root} /opt/rocm")
    if re.search(r"(?i)rocm(?:\.|_)?(?:path|home).*not (?:found|set)|Could not find ROCm|Failed to find ROCm root|"
                 r"ROCm not found", text):
        root = ("$(rocm-sdk path --root) (this ROCm came as wheels)" if therock else "/opt/rocm (or /opt/rocm-X.Y.Z, "
                "where it is installed)")
        return ("the ROCm install is not found", "the build or the program looks for ROCm through ROCM_PATH / "
                "ROCM_HOME or /opt/rocm, and finds neither", f"install ROCm (sudo amdgpu-install --usecase=rocm) if it "
                f"is not, then export ROCM_PATH={root} ROCM_HOME=$ROCM_PATH before the command")
    # (Ubuntu's command-not-found words it the other way round: "Command 'hipcc' not found")
    compiler = re.search(r"(?i)\b(hipcc|hipconfig|amdclang\+*|hipify-perl)\W*(?:command )?not found|Unable to find (hipcc)|"
                         r"\bCommand .(hipcc|hipconfig|amdclang\+*|hipify-perl). not found", text)
    # ROCm shown installed (HIP_PATH / ROCM_PATH printed, a versioned /opt/rocm-X.Y.Z): only PATH lacks its bin
    installed = re.search(r"(?i)\b(?:HIP_PATH|ROCM_PATH)\s*[:=]\s*(/opt/rocm(?:-\d[\d.]*)?)\b", _text(ctx))
    if compiler and installed:
        tool = next(g for g in compiler.groups() if g)
        nvidia = re.search(r"(?i)HIP_PLATFORM\s*[:=]\s*(?:nvidia|nvcc)", text)
        root = installed.group(1).rstrip(".")
        return (f"{tool} is installed but not on PATH", f"ROCm is installed ({root}), but its bin folder, which holds "
                f"{tool}, is not on PATH", f"export PATH=$PATH:/opt/rocm/bin"
                + (f" (or {root}/bin, where /opt/rocm does not link to it)" if root != "/opt/rocm" else "")
                + (", with HIP_PLATFORM=nvidia, and compile with hipcc rather than plain nvcc (hipcc adds the HIP "
                   "include path that nvcc alone does not have)" if nvidia else "")
                + f"; then {tool} --version (add the export to ~/.bashrc); where ls {root}/bin/{tool} finds nothing, "
                "it was never installed: sudo amdgpu-install --usecase=rocm,hiplibsdk (or the hipcc package)")
    if compiler:
        tool = next(g for g in compiler.groups() if g)
        where = ('pip install "rocm[devel]" from the index the rocm wheels came from (its bin/ holds them)' if therock
                 else "sudo amdgpu-install --usecase=rocm,hiplibsdk (or the distribution's rocm-hip-sdk / hipcc package)")
        return (f"{tool} is not found", f"building GPU code needs ROCm's compiler tools ({tool}), which are not "
                "installed or not on PATH", f"{where}; then export PATH=/opt/rocm/bin:$PATH ROCM_PATH=/opt/rocm before "
                f"the build (where {tool} is installed but not found)")
    if re.search(r"rocm\[devel\]|rocm_sdk_devel", text):
        return ("the ROCm SDK's development package is missing", "this ROCm came as wheels without rocm[devel], which "
                "holds the tools and headers", "pip install \"rocm[devel]\" from the same index as rocm (in the same "
                "environment)")
    # (amdsmi named beside the amdgpu kernel module not loaded is the driver's reading: access/driver_checks.py)
    if re.search(r"(?i)amdsmi", text) and not re.search(r"(?i)\bamdgpu\W{0,2}\s*(?:kernel )?(?:module|driver)?\s*(?:is |"
                                                        r"was )?(?:not|isn't|wasn't) (?:yet )?loaded", text):
        where = ("pip install <venv>/lib/python3.X/site-packages/_rocm_sdk_core/share/amd_smi (or add that folder to "
                 "PYTHONPATH)" if therock else "cd /opt/rocm/share/amd_smi && pip install .")
        return ("the amdsmi Python package is missing", "ROCm's amdsmi Python module is not installed in this "
                "environment (torch's ROCm build imports it when pynvml is present, and tools query the GPU with it)",
                f"install the amdsmi package: {where}; or, where only pynvml pulled it in (DeepSpeed, a monitoring package), pip "
                "uninstall pynvml nvidia-ml-py")
    cuda_lib = re.search(r"lib(cudnn|cublas\w*|cufft|curand|cusparse|nvrtc|cudart)\w*\.so\.(\d+)", text)
    if cuda_lib:
        what = "cuDNN" if cuda_lib.group(1) == "cudnn" else cuda_lib.group(1)
        major = cuda_lib.group(2)
        bundled = bundled_ort_fix(_text(ctx), name, major) if cuda_lib.group(1) != "cudnn" else None
        if bundled is not None:
            return bundled   # a program that ships its own onnxruntime build: that build's CUDA, or its other build
        provider = re.search(r"libonnxruntime_providers_(cuda|tensorrt)", text)
        if provider and cuda_lib.group(1) != "cudnn":
            # the soname's major is the CUDA the onnxruntime-gpu build links: the wheel, not the machine, is off
            return (f"onnxruntime-gpu is a CUDA {major} build", f"onnxruntime's CUDA provider links {name}, a CUDA "
                    f"{major} library: this onnxruntime-gpu wheel is built for CUDA {major}, not for the CUDA present",
                    "install the onnxruntime-gpu built for the CUDA you have (pip install -U onnxruntime-gpu: 1.19 and "
                    "newer on PyPI are CUDA 12 + cuDNN 9 builds; CUDA 11 builds come from the onnxruntime-cuda-11 "
                    f"index), or install CUDA {major}'s libraries beside the CUDA you have so {name} is found (pip "
                    f"install {_CUDA_WHEELS.get(re.sub(r'Lt$', '', cuda_lib.group(1)), 'nvidia-' + cuda_lib.group(1))}"
                    f"-cu{major}, its lib folder on LD_LIBRARY_PATH), or import torch before onnxruntime so torch's own "
                    "CUDA libraries are loaded first")
        toolkit = _toolkit_said(ctx) if cuda_lib.group(1) != "cudnn" else None
        # (CUDA 10 and older name the release in the soname, libcusparse.so.10.0; CUDA 11 on the major only)
        exact = re.search(rf"lib{cuda_lib.group(1)}\w*\.so\.(\d+\.\d+)", text)
        if toolkit and (toolkit == exact.group(1) if exact and int(major) < 11 else toolkit.split(".")[0] == major):
            release = toolkit
            # the toolkit of that very release is installed: the library is in its lib64, off the loader's path
            return (f"{name} is installed but not on the loader's path", f"the program loads {name}, which the "
                    f"CUDA {release} toolkit installed here has in /usr/local/cuda/lib64 (/usr/local/cuda-{release}/"
                    "lib64); PATH names the toolkit's bin, but the loader searches LD_LIBRARY_PATH and ldconfig's "
                    "folders, and an environment (conda, a venv) carries no copy of its own",
                    f"export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH (in ~/.bashrc, or the conda "
                    f"environment's own variables: conda env config vars set LD_LIBRARY_PATH=/usr/local/cuda/"
                    f"lib64), or add /usr/local/cuda/lib64 to /etc/ld.so.conf.d/cuda.conf and run sudo ldconfig; "
                    f"or link it into the environment: ln -s /usr/local/cuda/lib64/{name} $CONDA_PREFIX/lib/")
        if cuda_lib.group(1) != "cudnn" and int(major) >= 11:
            # a CUDA library, not cuDNN: its own nvidia-* wheel for that CUDA major (cublasLt is in nvidia-cublas)
            wheel = _CUDA_WHEELS.get(re.sub(r"Lt$", "", cuda_lib.group(1)), "nvidia-" + cuda_lib.group(1))
            # the toolkit from NVIDIA's apt repository (cuda-keyring, then cuda-toolkit-<major>-<minor>: NVIDIA's
            # network-repo instructions); any minor of the major carries the soname, 12.4 / 11.8 as the example where
            # the paste names none (xorbitsai/inference#1286 installed cuda-toolkit-12-4)
            said = re.search(rf"(?i)\bCUDA(?: Toolkit)?[ :]*v?({major})\.(\d)\b|\+cu{major}(\d)\b", _text(ctx))
            minor = next((g for g in said.groups()[1:] if g), None) if said else None
            minor = minor or {"12": "4", "11": "8"}.get(major)
            apt = (f"; on Ubuntu/Debian the toolkit comes from NVIDIA's apt repository: install its cuda-keyring "
                   f"package, then sudo apt-get install cuda-toolkit-{major}-{minor} (any CUDA {major}.x toolkit the "
                   f"driver runs carries {name})" if minor and cuda_lib.group(1) == "cudart" else "")
            return (f"{what} {major} is not found", f"the program loads {name} (CUDA {major}'s {what}), which is not "
                    "installed or not on the loader's path (pip's nvidia-* wheels put theirs inside site-packages)",
                    f"install CUDA {major}'s {what}: pip install {wheel}-cu{major} (or the CUDA {major} toolkit) and put "
                    f"its lib folder on the loader's path: export LD_LIBRARY_PATH=<site-packages>/nvidia/"
                    f"{wheel.removeprefix('nvidia-').replace('-', '_')}/lib:$LD_LIBRARY_PATH (or import torch "
                    "first, whose CUDA build loads them)" + apt)
        if cuda_lib.group(1) != "cudnn":
            # a CUDA 10 (or older) library: NVIDIA's nvidia-* wheels start at CUDA 11, so only that toolkit has it
            release = re.search(rf"lib{cuda_lib.group(1)}\w*\.so\.(\d+\.\d+)", text)
            release = release.group(1) if release else f"{major}.x"
            return (f"{what} {major} is not found", f"the program loads {name} (CUDA {major}'s {what}), which is not "
                    "installed or not on the loader's path; no pip wheel carries CUDA libraries this old",
                    f"install the CUDA {release} toolkit (or conda install cudatoolkit={release} in the environment) "
                    f"beside the CUDA you have, and put its lib folder on the loader's path: export LD_LIBRARY_PATH="
                    f"/usr/local/cuda-{release}/lib64:$LD_LIBRARY_PATH; or move the program to a build for the CUDA "
                    "installed")
        return (f"{what} {major} is not found", f"the program loads {name} ({what} {major}), which is not installed "
                "or not on the loader's path (pip's nvidia-* wheels put theirs inside site-packages)",
                f"install {what} {major} (pip install nvidia-cudnn-cu{'12' if int(major) >= 9 else '11'} "
                "nvidia-cublas-cu12, or apt install libcudnn" + major + ") and put its folder on the loader's path: "
                "export LD_LIBRARY_PATH=$(python -c 'import os, nvidia.cudnn, nvidia.cublas; print(os.path.dirname("
                "nvidia.cudnn.__file__) + \"/lib:\" + os.path.dirname(nvidia.cublas.__file__) + \"/lib\")'):"
                "$LD_LIBRARY_PATH (or the venv's torch/lib folder) before starting Python")
    if re.match(r"lib(?:tinfo|ncurses\w*)\.so\.5", name):
        # ncurses 5's ABI: distributions that moved to ncurses 6 ship it only as a compatibility package
        arch_linux = re.search(r"(?i)\barch ?linux\b|\bmanjaro\b|\bpacman\b", text + "\n" + _text(ctx))
        return (f"{name} is not found", f"the binary links {name}, ncurses 5's library, which the distribution (now on "
                "ncurses 6) no longer installs by default",
                ("install the ncurses 5 compatibility package: ncurses5-compat-libs from the AUR (yay -S "
                 "ncurses5-compat-libs); Debian/Ubuntu: sudo apt-get install libtinfo5 libncurses5" if arch_linux else
                 "install the ncurses 5 compatibility package: sudo apt-get install libtinfo5 libncurses5 (Debian/Ubuntu); "
                 "Fedora: ncurses-compat-libs; Arch: ncurses5-compat-libs (AUR)"))
    for prefix, package in _SYSTEM_LIBS.items():
        if name.startswith(prefix):
            if prefix == "libvulkan.so" and re.search(r"(?i)ERROR_INCOMPATIBLE_DRIVER|ERROR_INITIALIZATION_FAILED|"
                                                      r"Vulkan instance|vkCreateInstance", _text(ctx)):
                continue   # the loader got installed and Vulkan then refused the GPU: the vulkan_loader reading's
            # in a container the package goes into the image (a Dockerfile's RUN line), or the running container
            where = (f"; in a container image: RUN apt-get update && apt-get install -y {package} in its Dockerfile "
                     f"(or apt install {package} inside the running container until the image has it)"
                     if re.search(r"(?i)\b(?:docker|podman|container|image)\b", text + "\n" + _text(ctx)) else "")
            return (f"{name} is not found", f"the wheel links the system's {name}, which is not installed",
                    f"sudo apt-get install {package} (the distribution package with {name}){where}")
    if re.search(r"CUDA_HOME does not exist|CUDA_HOME environment variable is not set|/bin/nvcc\b", text) and \
            _vendor(ctx) != "amd":
        tool = ctx.tool() or "the extension"
        return ("the CUDA toolkit (nvcc) is not found", f"{tool} compiles CUDA code at install or first use and needs "
                "the CUDA toolkit's nvcc, which is not installed or not where CUDA_HOME points (torch's wheels carry the "
                "CUDA runtime, not the compiler)",
                "install the CUDA toolkit of torch's CUDA (python -c 'import torch; print(torch.version.cuda)'): the "
                "NVIDIA installer, conda install -c nvidia cuda-toolkit=<that version>, or pip install "
                "nvidia-cuda-nvcc-cu12; then export CUDA_HOME=/usr/local/cuda-<that version> (or $CONDA_PREFIX; the folder "
                "whose bin/nvcc exists: a pip nvcc sits in site-packages/nvidia/cuda_nvcc, not /usr/local/cuda); or "
                f"install a prebuilt wheel of {tool} so nothing compiles (DeepSpeed: DS_BUILD_OPS=0, ops JIT-built later)")
    if name == "libcuda.so" and not re.search(r"(?i)/usr/lib/wsl|\bWSL\b|--gpus|\bdocker\b|\bkubernetes\b|\bpod\b",
                                               text + "\n" + _text(ctx)):
        # the unversioned name: a development link the driver's runtime packages leave out, beside the libcuda.so.1
        # a working driver has (a program or library that dlopens "libcuda.so": Triton, older cuDNN, a JIT)
        return ("the unversioned libcuda.so link is not there", "the program opens libcuda.so, the unversioned "
                "development link; a driver installed without its development files has only libcuda.so.1 (or, with no "
                "libcuda.so.1 either, the NVIDIA driver is not installed)",
                "ldconfig -p | grep libcuda shows the driver's folder: where libcuda.so.1 is listed there, link the "
                "name beside it: sudo ln -s libcuda.so.1 <that folder>/libcuda.so (e.g. /usr/lib/x86_64-linux-gnu), "
                "then sudo ldconfig and start the program again; where no libcuda.so.1 is listed, install the NVIDIA "
                "driver (nvidia-smi must list the GPU)")
    if re.match(r"libcuda\.so", name):
        return ("the NVIDIA driver's libcuda is not found", "libcuda.so.1 comes with the NVIDIA driver, not with CUDA "
                "or torch: the driver is not installed, or the process (a container, WSL) does not see it",
                "install the NVIDIA driver (nvidia-smi must list the GPU); in a container start it with --gpus all "
                "(NVIDIA Container Toolkit); on Kubernetes without the toolkit (GKE) the driver is mounted at "
                "/usr/local/nvidia: put /usr/local/nvidia/lib64 on the container's LD_LIBRARY_PATH; under WSL 2 put "
                "/usr/lib/wsl/lib on LD_LIBRARY_PATH; on an AMD GPU the program needs its ROCm build instead")
    if re.match(r"lib(?:torch|c10)\w*\.so", name):
        return (f"torch's own {name} is not found", f"an extension links {name} from torch's lib folder, which the "
                "loader does not search unless torch was imported first (or this torch lacks it: a CPU torch has no "
                "libtorch_cuda / libc10_cuda)",
                "import torch before the extension; and install the extension built for the installed torch and its "
                "build (pip install --force-reinstall torch <the extension> from the same index)")
    if re.search(r"WinError 127|procedure could not be found", text) and \
            re.search(r"(?i)torch[\\/]+lib[\\/]+\S*\.dll", text) and not re.search(r"(?i)rocm|amdhip|\bhip", _text(ctx)):
        # a torch DLL found but missing an entry point: another copy of a dependency was loaded first, or torch's own
        # files come from two releases (the DLL is there: installing it again elsewhere does not help)
        return (f"{name} is from another build than the DLLs it loads",
                "Windows found the DLL but not a function it needs (WinError 127): an older copy of a dependency was "
                "loaded first (a CUDA toolkit's or another program's folder on PATH, a second torch in the user "
                "site-packages), or torch's files come from two releases",
                "reinstall torch cleanly: pip uninstall -y torch torchvision torchaudio (until none is left; also check "
                "python -m site for a user-site copy), then pip install --no-cache-dir torch --index-url <its index> in "
                "a fresh venv; take other CUDA / cuDNN bin folders off PATH for the run")
    windows_cuda = _CUDA_WINDOWS_DLL.search(text)
    if windows_cuda:
        what = {"cudnn": "cuDNN"}.get(windows_cuda.group(1).lower(), windows_cuda.group(1))
        major = windows_cuda.group(2)
        major = major[:2] if major.startswith("1") and len(major) > 2 else major   # cudart64_110 -> 11
        base = re.sub(r"(?i)lt$", "", windows_cuda.group(1).lower())
        wheel = (f"nvidia-cudnn-cu12=={major}.*" if what == "cuDNN" else f"{_CUDA_WHEELS.get(base, 'nvidia-' + base)}-cu{major}")
        return (f"{what} {major} DLLs are not found", f"the program loads {windows_cuda.group(0)} ({what} {major}), "
                "which is not installed or not on PATH",
                f"install {what} {major}: pip install {wheel} and add its bin folder (<site-packages>\\nvidia\\"
                f"{wheel.split('==')[0].removeprefix('nvidia-').rsplit('-cu', 1)[0].replace('-', '_')}\\bin) to PATH, or NVIDIA's {what} "
                f"{major} installer, or copy the DLLs next to the program; then restart it")
    rocm_dll = re.search(r"(?i)\b(?:amdhip64|rocblas|hipblas\w*|MIOpen|hiprtc\w*|amd_comgr\w*|rocsolver|hipsparse)"
                         r"(?:_\d+)?\.dll", text)
    if not rocm_dll and re.search(r"(?i)\b(?:fbgemm|shm|c10|torch_cpu|torch_python|asmjit|uv)\.dll|WinError 126", text):
        return ("torch's DLLs cannot load their dependencies",
                "torch's fbgemm.dll / shm.dll need libomp140.x86_64.dll and the Visual C++ runtime, which a clean "
                "Windows does not have",
                "install the Microsoft Visual C++ Redistributable (x64) and, for libomp140.x86_64.dll, the MSVC (Visual "
                "C++) build tools from the Visual Studio Installer (or put libomp140.x86_64.dll next to torch\\lib); "
                "then restart the program")
    if re.search(r"(?i)MIOpen", name) and re.search(r"(?i)cuda", text):
        return (f"{name} is not found", "the loader path is set for CUDA, not for ROCm's libraries",
                "remove the CUDA entries and put ROCm's first: export LD_LIBRARY_PATH=/opt/rocm/lib (without "
                "/usr/local/cuda/lib64), and no CUDA_* variables in the environment")
    return None



# a library the build links (-lNAME) that the linker does not find; CUDA's own ones by their pip wheel's folder
_LINK_MISSING = re.compile(r"(?i)\b(?:can ?not|cannot|unable to) find (?:library )?-l([\w+.-]+)")
_CUDA_LINKED = ("cudart", "cublas", "cublasLt", "curand", "cufft", "cusparse", "cusolver", "nvrtc", "cudnn", "nvToolsExt")


def _link_library(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """ld's "cannot find -lNAME": the build links libNAME.so, the unversioned development link, which is not in any
    folder the linker searches (LIBRARY_PATH, -L): a runtime-only install (pip's nvidia wheels, torch's bundled
    libraries) ships only libNAME.so.N."""
    hit = next(((e, m) for e in errors for m in [_LINK_MISSING.search(e.line)] if m), None)
    if hit is None:
        return None
    error, m = hit
    lib = m.group(1)
    so = f"lib{lib}.so"
    tool = ctx.tool([error])
    building = f"{tool}'s build" if tool and tool != "torch" else "the build"
    if lib == "cuda":
        # Triton's launcher build links -lcuda with -L at the folders `ldconfig -p` lists for libcuda.so, or at
        # TRITON_LIBCUDA_PATH (a folder) where set (triton/backends/nvidia/driver.py, libcuda_dirs)
        fix = ("libcuda.so comes with the NVIDIA driver: where the driver is installed (nvidia-smi works), refresh the "
               "linker's cache with sudo ldconfig (ldconfig -p | grep libcuda must list it; Triton links against the "
               "folders listed there) and, if that folder has only libcuda.so.1, add the unversioned name: sudo ln -s "
               "libcuda.so.1 <that folder>/libcuda.so; for Triton alone, export TRITON_LIBCUDA_PATH=<that folder>; to "
               "link without a driver use the CUDA toolkit's stub: export LIBRARY_PATH=$CUDA_HOME/lib64/stubs:"
               "$LIBRARY_PATH (CUDA_HOME=/usr/local/cuda-<torch's CUDA>)")
        # inside a conda environment, the system gcc links with the system's folders only: the environment's own
        # compiler and CUDA packages are the other way (JIA-Lab-research/Seg-Zero#63: conda-forge gxx, cuda-toolkit)
        if re.search(r"(?i)(?:ana|mini|micro)?conda\d?/envs/|\bconda (?:env|activate|create)\b|\$CONDA_PREFIX", _text(ctx)):
            fix += ("; in this conda environment the compiler and CUDA can come from conda-forge instead: conda install "
                    "-c conda-forge gxx cuda-toolkit, then conda deactivate and activate it again so its compiler is the one used")
    elif lib in _CUDA_LINKED:
        wheel = _CUDA_WHEELS.get(re.sub(r"Lt$", "", lib), "nvidia-" + lib.lower())
        folder = wheel.removeprefix("nvidia-").replace("-", "_")   # nvidia/cuda_runtime, nvidia/curand
        fix = (f"install the CUDA toolkit of torch's CUDA (its lib64 has {so}) and point the linker at it: export "
               f"LIBRARY_PATH=$CUDA_HOME/lib64:$LIBRARY_PATH (CUDA_HOME=/usr/local/cuda-<torch.version.cuda>); with pip's "
               f"{wheel} wheel instead, make the link it lacks: ln -s <site-packages>/nvidia/{folder}/lib/{so}.<N> "
               f"<site-packages>/nvidia/{folder}/lib/{so} and add that lib folder to LIBRARY_PATH")
    elif _ROCM_LIBRARY.search(lib):
        fix = ("install ROCm's development libraries (sudo amdgpu-install --usecase=rocm,hiplibsdk) and point the "
               "linker at them: export LIBRARY_PATH=/opt/rocm/lib:$LIBRARY_PATH (ROCm from wheels: $(rocm-sdk path "
               "--root)/lib)")
    else:
        package = next((p for prefix, p in _SYSTEM_LIBS.items() if so.startswith(prefix)), None)
        fix = (f"sudo apt-get install {package}" if package else
               f"install the development package with {so}: apt-file search {so} (dnf provides '*/{so}') names it") + (
               f"; or export LIBRARY_PATH=<the folder with {so}>:$LIBRARY_PATH")
    return _make("rocm-libs-missing", f"the linker cannot find {so}",
                 f"{building} links -l{lib}, and no folder the linker searches has {so} (the unversioned link a "
                 "development install provides; runtime-only installs have only the numbered file)", fix,
                 [ctx.line_fact(error)], [error])


def _rocm_libs_said(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    text = " ".join(e.line for e in errors)
    evidence = [ctx.line_fact(errors[0])]
    if re.search(r"amdgpu\.ids: No such file", text):
        # libdrm names the GPU from this table; only AMD's driver packages put it under /opt/amdgpu, so a ROCm wheel
        # (torch's, TheRock's) on a machine without them prints this and goes on
        return _make("rocm-libs-missing", "libdrm's amdgpu.ids table is not installed",
                     "the ROCm libraries' libdrm looks up the GPU's marketing name in /opt/amdgpu/share/libdrm/amdgpu.ids, "
                     "which only AMD's driver packages install; without it the name is unknown and the GPU still works",
                     "harmless; to silence it install libdrm-amdgpu-common from AMD's amdgpu-install repository (sudo apt "
                     "install libdrm-amdgpu-common; dnf on RHEL/SUSE), which provides /opt/amdgpu/share/libdrm/amdgpu.ids",
                     evidence, [e for e in errors if "amdgpu.ids" in e.line], severity="warning")
    linked = _link_library(ctx, errors)
    if linked is not None:
        return linked
    if re.search(r"(?i)(?:can.?t|cannot|unable to|could not|failed to) find .?ld\.lld|\bld\.lld.{0,20}(?:not found|No "
                 r"such file)", text):
        return _make("rocm-libs-missing", "ROCm's linker ld.lld is not on PATH",
                     "the GPU code is linked with ld.lld, which ROCm ships in its own LLVM (/opt/rocm/llvm/bin), a "
                     "folder that is not on PATH and that older tools (TVM, MLC-LLM) did not search",
                     "export PATH=/opt/rocm/llvm/bin:$PATH before the build (or the tool's own lld path option); the "
                     "distribution's lld package works too where its LLVM is as new as ROCm's; newer TVM/MLC releases "
                     "search /opt/rocm/llvm/bin themselves", evidence, errors)
    if re.search(r"unrecognized command-line option .?--offload-arch", text):
        return _make("rocm-libs-missing", "the HIP code is compiled by the system C++ compiler",
                     "--offload-arch is a clang/hipcc option; the build picked the system c++ (gcc), which does not know "
                     "it", "build with ROCm's compilers: CC=/opt/rocm/llvm/bin/clang CXX=/opt/rocm/llvm/bin/clang++ "
                     "(or CXX=hipcc) in the environment of the build (llama-cpp-python: CC=... CXX=... CMAKE_ARGS=... "
                     "pip install ...)", evidence, errors)
    install = re.search(r"(/opt/rocm-\d+\.\d+(?:\.\d+)?)", _text(ctx))
    if re.search(r"(?i)/usr/bin/hip\w*|/opt/rocm/bin/hip\w*|\bhipcc\b", text) and install:
        return _make("rocm-libs-missing", "ROCm is installed under its versioned path only",
                     f"ROCm is in {install.group(1)}, but the build looks for hipcc in /opt/rocm (and /usr/bin)",
                     f"sudo ln -s {install.group(1)} /opt/rocm (what the installer normally links), and put "
                     f"/opt/rocm/bin on PATH; or pass ROCM_PATH={install.group(1)} to the build", evidence, errors)
    if "libamdpython" in text:
        return _make("rocm-libs-missing", "ROCm's libamdpython link is broken",
                     "rocgdb needs libamdpython.so, a link the ROCm package points at a libpython the system lacks",
                     "link it to the system's libpython: sudo ln -s /usr/lib/python3.X/config-3.X-x86_64-linux-gnu/"
                     "libpython3.X.so /opt/rocm/lib/libamdpython.so (apt install libpython3.X for the file)",
                     evidence, errors)
    if "/.singularity.d/libs/" in text:
        glibcxx = re.search(r"GLIBCXX_[\d.]+|CXXABI_[\d.]+", text)
        return _first(_make("rocm-libs-missing", "the host's ROCm libraries replaced the container's",
                     "apptainer --rocm binds the host's ROCm libraries (rocmliblist.conf) over the container's own; "
                     + (f"they were built against a newer libstdc++ ({glibcxx.group(0)}) than the container has"
                        if glibcxx else "the host rocBLAS then finds no Tensile files it matches"),
                     "let the container use its own ROCm: bind only the devices (--bind /dev/kfd,/dev/dri, without "
                     "--rocm), or remove the math libraries (rocblas, rocfft, ...) from rocmliblist.conf", evidence,
                     errors))
    return None


def _ldd_subject(ctx: Context) -> Optional[tuple[str, str]]:
    """(the Python package, the file) an ldd command in the paste inspects: site-packages/<package>/..."""
    for line in ctx.sheet.lines:
        m = re.search(r"\bldd\s+(\S+\.so\S*)", line)
        if m:
            path = m.group(1)
            inside = re.search(r"(?:site-packages|\.\.\.)/([A-Za-z]\w*)/", path)   # the package under site-packages
            if inside:
                return inside.group(1).removesuffix("_plugins").removesuffix("_lib"), path
    return None


_CUDA_DLL = re.compile(r"(?i)\b(?:cublas(?:Lt)?|cudnn\w*|cusparse|cufft|nvrtc|nvcuda|cudart)(?:64)?[_\w]*\.dll\b")


# torch's NVRTC wrapper DLL (or the CUDA DLLs ZLUDA stands in for) failing on a missing dependency: WinError 126
_ZLUDA_DEPENDENCY = re.compile(r"(?i)WinError 126\b.{0,200}(?:caffe2_nvrtc|nvrtc64|cublas64|cusparse64|nvcuda)\w*\.dll|"
                               r"Error loading \S*(?:caffe2_nvrtc|nvrtc64|cublas64|cusparse64)\w*\.dll\S* or one of its "
                               r"dependencies")


def _zluda_runtime_not_on_path(ctx: Context) -> Optional[Diagnosis]:
    """Under ZLUDA torch's caffe2_nvrtc.dll loads ZLUDA's nvrtc and nvcuda, which load the HIP SDK's amdhip64 and
    hiprtc DLLs: "Error loading caffe2_nvrtc.dll or one of its dependencies" (WinError 126) is one of those not found
    on PATH, the HIP SDK's bin folder or ZLUDA's own (the ZLUDA install guides set HIP_PATH and add %HIP_PATH%bin)."""
    text = _text(ctx)
    if not re.search(r"(?i)zluda", text):
        return None
    failing = _lines_matching(ctx, _ZLUDA_DEPENDENCY)
    if not failing:
        return None
    if (hip_sdk_release(text) or ("",))[0] == "6":
        return None   # ZLUDA's default build is HIP SDK 5.7's: on a 6.x SDK the first cause is that build (zluda_hip_release)
    sdk = re.search(r"(?i)(?:HIP(?: SDK)?|ROCm)\W{0,3}(\d+\.\d+)", text)
    version = sdk.group(1) if sdk else "<ver>"
    return _first(_make("rocm-libs-missing", "ZLUDA's runtime DLLs are not on PATH",
                        "under ZLUDA torch's caffe2_nvrtc.dll loads ZLUDA's nvrtc/nvcuda DLLs, which load the HIP "
                        "SDK's amdhip64 and hiprtc DLLs; WinError 126 says one of those dependencies is not found: the "
                        "HIP SDK's bin folder or the ZLUDA folder is not on the PATH the program starts with",
                        f"set HIP_PATH=C:\\Program Files\\AMD\\ROCm\\{version}\\ and add %HIP_PATH%bin and the ZLUDA "
                        "folder to PATH in both the system and the user variables (where %HIP_PATH%bin\\hiprtc*.dll "
                        "exists), open a new terminal (echo %PATH% must show them) and start the program again; keep "
                        "the install in a short path without spaces (a drive's root) and redo the install steps (the "
                        "patch that copies ZLUDA's DLLs into torch\\lib) if it still fails",
                        [ctx.line_fact(failing[0])], failing))


def _zluda(ctx: Context) -> Optional[Diagnosis]:
    """ZLUDA runs CUDA programs on AMD GPUs by standing in for their CUDA DLLs: a cuBLAS call refused on an AMD GPU, or
    a program that does not work under ZLUDA, means the program still loads its own (NVIDIA) DLLs or an old ZLUDA."""
    text = _text(ctx)
    named = re.search(r"(?i)zluda", text)
    refused = _lines_matching(ctx, r"CUBLAS_STATUS_NOT_SUPPORTED|CUBLAS_STATUS_ARCH_MISMATCH")
    if named and not refused:
        # under ZLUDA, a CUDA DLL (cuBLAS, cuDNN, cuSPARSE, NVRTC, nvcuda) that fails to load or is not found is one
        # of the DLLs ZLUDA should be standing in for
        refused = [e for e in ctx.errors if _CUDA_DLL.search(e.line)]
    # under ZLUDA "no NVIDIA driver" means ZLUDA's nvcuda.dll is not the one loaded: that leads, not a torch build
    no_driver = [] if refused or not named else [e for e in ctx.errors if re.search(
        r"(?i)Found no NVIDIA driver|no CUDA-capable device|CUDA driver initialization failed", e.line)]
    refused = refused or no_driver
    amd = _vendor(ctx) == "amd" or re.search(r"(?i)\brx ?\d{3,4}|radeon", text)
    complaint = ctx.sheet.of("complaint") or _lines_matching(ctx, r"(?i)does not work|doesn't work|not work")
    # another error the paste shows (rocBLAS without the arch's library, say) is its own cause, ZLUDA or not
    if not ((refused and (named or amd)) or (named and not ctx.errors and complaint)):
        return None
    covers = refused or _symptom_lines(ctx, ctx.sheet.of("complaint")[:1]) or complaint[:1]
    diagnosis = _make("rocm-libs-missing", "ZLUDA's DLLs are not the ones the program loads",
                 "under ZLUDA the program must load ZLUDA's cuBLAS/cuSPARSE/NVRTC in place of NVIDIA's; it still loads its "
                 "own copies (or an old ZLUDA's), which refuse the AMD GPU",
                 _table_fix(ctx, "zluda", "rocm-libs-missing"),
                 [ctx.line_fact(covers[0])] if covers else [], covers)
    return _first(diagnosis) if no_driver else diagnosis


def _hip_runtime_older_than_program(ctx: Context) -> Optional[Diagnosis]:
    """Windows: "The procedure entry point hipX could not be found in the dynamic link library ...": the amdhip64 DLL
    that loads (the one AMD's Adrenalin driver installs in System32) is older than the program (ZLUDA's nvcuda.dll,
    a HIP SDK build) expects: the driver is what to update."""
    error = next((e for e in ctx.errors if re.search(r"(?i)procedure entry point (hip\w+) could not be (?:found|located)",
                                                   e.line)), None)
    if error is None:
        return None
    function = re.search(r"(?i)entry point (hip\w+)", error.line).group(1)
    return _make("driver", f"the HIP runtime lacks {function}",
                 f"the amdhip64 DLL Windows loads, which AMD's Adrenalin driver installs, is older than the program "
                 f"(ZLUDA, a HIP SDK build) that calls {function}",
                 "update the AMD Adrenalin driver (a release at least as new as the HIP SDK / ZLUDA release in use; "
                 "AMD's driver page, or AMD Software's update check), then restart; an old amdhip64*.dll copied next to "
                 "the program must go", [ctx.line_fact(error)], [error])


def _wsl_without_gpu_paravirtualization(ctx: Context) -> Optional[Diagnosis]:
    """Under WSL, "dxcore initialization failed" (or /usr/lib/wsl/lib/libdxcore.so missing) and then NVIDIA's libraries
    not found: this Windows build gives WSL no GPU (GPU paravirtualization needs Windows 11 or Windows 10 21H2)."""
    said = _lines_matching(ctx, r"(?i)dxcore initiali[sz]ation failed|libdxcore\.so.{0,40}(?:not found|No such file|cannot)")
    if not said or not re.search(r"\bWSL", _text(ctx)):
        return None
    return _make("wsl", "WSL gives no GPU on this Windows build",
                 "WSL's GPU libraries (/usr/lib/wsl/lib: libdxcore.so, and the driver's libcuda/libnvidia-ml) are not "
                 "there: this Windows build has no GPU paravirtualization for WSL 2",
                 "update Windows to Windows 11 or Windows 10 21H2 (build 19044) or newer, install the NVIDIA (or AMD) "
                 "Windows driver with WSL support, run wsl --update, then wsl --shutdown; never install a Linux GPU "
                 "driver inside WSL", [ctx.line_fact(said[0])], said[:1])


# archs every rocBLAS since ROCm 5.7 carries, on Linux and in the Windows HIP SDK alike (ROCm's and the HIP SDK's GPU
# support tables): an empty library list for one of these is a missing folder, never a missing arch
_EVERY_ROCBLAS = ("gfx1030", "gfx1100", "gfx1101", "gfx1102")


def _empty_tensile_folder(ctx: Context) -> Optional[Diagnosis]:
    """rocBLAS lists the Tensile files it found after "List of available TensileLibrary Files :". An empty list is no
    missing arch: the folder it reads has no library at all (a bundle shipped without it, a path that moved), whatever
    the GPU."""
    lines = ctx.sheet.lines
    for n, line in enumerate(lines):
        if not re.search(r"List of available TensileLibrary Files\s*:?\s*$", line):
            continue
        after = [later for later in lines[n + 1:n + 3] if later.strip()]
        if after and re.search(r"TensileLibrary|\.dat|\.co\b", after[0]):
            return None   # files listed: the arch's own is what is missing (arch-missing's reading)
        read = next((e for e in ctx.errors if re.search(r"(?i)Cannot read .*TensileLibrary", e.line)), None)
        arch = re.search(r"GPU arch\s*:\s*(gfx\w+)", read.line) if read else None
        if not arch or arch.group(1) not in _EVERY_ROCBLAS:
            return None   # an arch some releases lack: the empty list may be that release's answer (arch-missing)
        if any(re.search(rf"TensileLibrary\w*_{arch.group(1)}\b", other) for other in lines):
            return None   # the paste names the arch's own library file as the one missing: arch-missing's reading
        folder = re.search(r"Cannot read (.*?)[\\/]?TensileLibrary", read.line) if read else None
        where = folder.group(1) if folder else "the folder rocBLAS reads"
        covers = [read] if read else _lines_matching(ctx, r"List of available TensileLibrary Files")
        windows = ctx.sheet.is_windows or "\\" in where
        target = ("C:\\Program Files\\AMD\\ROCm\\<ver>\\bin\\rocblas\\library" if windows
                  else "/opt/rocm/lib/rocblas/library")
        return _first(_make("rocm-libs-missing", "rocBLAS's library folder is empty",
                            f"rocBLAS found no Tensile library files at all in {where} (the list it prints is empty): "
                            "the folder is missing or empty, not the GPU's arch",
                            f"point rocBLAS at an installed rocBLAS library: ROCBLAS_TENSILE_LIBPATH={target} (the HIP "
                            "SDK's or ROCm's, of the version the program was built with), or reinstall the program so "
                            "its rocblas/library folder is complete", [ctx.line_fact(covers[0])] if covers else [],
                            covers))
    return None


_DLL_LOAD = re.compile(r"DLL load failed while importing (\w+)")
_FRAME_PACKAGE = re.compile(r"(?:site|dist)-packages[/\\]+([A-Za-z_]\w*)[/\\]")


def _dll_load_failed(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """Windows could not load a compiled module's DLLs ("DLL load failed while importing X: The specified module could
    not be found"): the package's native runtime (the MSVC runtime, the CUDA/ROCm DLLs its build links) is not on the
    machine. The package is the one whose folder the traceback shows, else the module's own name."""
    error = next((e for e in errors if _DLL_LOAD.search(e.line) and "procedure" not in e.line), None)
    if error is None:
        return None
    module = _DLL_LOAD.search(error.line).group(1)
    above = ctx.sheet.lines[max(0, error.line_no - 8): error.line_no]
    frames = [m.group(1) for m in map(_FRAME_PACKAGE.search, above) if m]
    package = distribution_of(frames[-1] if frames else module.split("_pybind")[0])
    if re.match(r"(?i)amdhip|hip|rocm|roc", module):
        return None   # ROCm's own runtime: the HIP SDK reading below
    fix = _table_fix(ctx, package, "rocm-libs-missing", package=package) or (
        f"install the Microsoft Visual C++ Redistributable (vc_redist.x64.exe) and the GPU runtime this {package} build "
        f"links (a CUDA build: the CUDA and cuDNN DLLs on PATH; a ROCm build: the HIP SDK), then pip install "
        f"--force-reinstall {package} in the same Python")
    return _make("rocm-libs-missing", f"{package}'s DLLs cannot be loaded",
                 f"Windows found {module} but not a DLL it depends on: the runtime {package} was built against is not "
                 "installed or not on PATH", fix, [ctx.line_fact(error)], [error])


def _built_for_other_rocm(ctx: Context, name: str, first: ErrorLine) -> Optional[Diagnosis]:
    """libamdhip64.so.N names the HIP major a binary was linked against (ROCm N): a package wanting ROCm 6's runtime on
    a machine with ROCm 7 is a build for the other ROCm, not a missing install."""
    wanted = re.match(r"libamdhip64\.so\.(\d+)", name)
    installed = (ctx.sheet.values("rocm") or ctx.sheet.values("hip"))
    if not wanted or not installed:
        return None
    have = installed[-1].split(".")[0]
    if have == wanted.group(1):
        return None
    above = ctx.sheet.lines[max(0, first.line_no - 8): first.line_no]
    frames = [m.group(1) for m in map(_FRAME_PACKAGE.search, above) if m]
    package = distribution_of(frames[-1]) if frames else None
    own = _table_fix(ctx, package, "torch-build") if package else None
    what = package or "the program"
    return _make("rocm-libs-missing", f"{what} is built for ROCm {wanted.group(1)}",
                 f"{what} links {name}, ROCm {wanted.group(1)}'s HIP runtime; this machine has ROCm {installed[-1]}, "
                 f"whose runtime is libamdhip64.so.{have}",
                 f"install the {what} build made for ROCm {have}" + (f" ({own})" if own else
                 f" (rebuild it here, or the wheel from the index for ROCm {have})") +
                 f"; or install ROCm {wanted.group(1)}'s runtime beside it and put its lib folder on LD_LIBRARY_PATH",
                 [ctx.line_fact(first)], [first])


# TheRock's pip-installed ROCm (rocm[libraries] from rocm.nightlies.amd.com / repo.amd.com, the rocm-sdk wheels)
_ROCM_WHEELS = re.compile(r"(?i)\brocm\[(?:libraries|devel)|\brocm-sdk\b|rocm\.nightlies\.amd\.com|_rocm_sdk_\w+")
# a torch that is not TheRock's: a wheel file installed by path, or a source build's +git local version
_OWN_TORCH = re.compile(r"(?i)(?:\./|/)torch-\d+\.\d+\.\d+\w*(?:\+git\w+)?-cp\d+|\btorch-\d+\.\d+\.\d+a0\+git[0-9a-f]+|"
                        r"\btorch\W{1,3}\d+\.\d+\.\d+a0\+git[0-9a-f]+")


def _own_torch_beside_rocm_wheels(ctx: Context) -> bool:
    """The rocm-sdk wheels installed with pip, and a torch installed from a file or built from source beside them
    (pccr10001/comfyui-gfx1151-fa#1: TheRock's torch preloads its rocm-sdk libraries, another torch does not)."""
    text = _text(ctx)
    return bool(_ROCM_WHEELS.search(text) and _OWN_TORCH.search(text))


def _rocm_wheel_folders(ctx: Context) -> tuple[str, str]:
    """site-packages as the paste shows it (else the interpreter's), and the GPU family of the libraries wheel as its
    folder spells it (the index path /v2/gfx110X-dgpu/, else the family of the machine's arch, else a placeholder).
    TheRock names each wheel's Python folder "_" + the dist name with "-" made "_" (build_tools/packaging/python/
    templates/rocm/src/rocm_sdk/_dist_info.py, get_py_package_name): rocm-sdk-libraries-gfx110X-dgpu installs
    _rocm_sdk_libraries_gfx110X_dgpu, the family's case kept (the X is upper case)."""
    text = _text(ctx)
    site = re.search(r"(/\S*?/(?:site|dist)-packages)\b", text)
    family = re.search(r"\b(gfx\d{2,4}X?(?:-[a-z]+)?)(?=/|\b)", text)   # a family as the index or wheel names it
    if family is None or not ("X" in family.group(1) or "-" in family.group(1) or re.fullmatch(r"gfx115\d",
                                                                                              family.group(1))):
        arch = re.search(r"(?i)\b(gfx\d{2,4}[a-z0-9]*)", text)
        named = therock_family(arch.group(1).lower()) if arch else None
        folder = named.replace("-", "_") if named else (family.group(1) if family else "<gfx family>")
    else:
        folder = family.group(1).replace("-", "_")
    return (site.group(1) if site else "$(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')",
            folder)


# oneAPI's runtime libraries (oneMKL, DPC++ / SYCL, TBB, the Intel compiler runtime, oneDNN): intel/intel-extension-for-
# tensorflow#13 (libmkl_sycl.so.2; the maintainers: install the Base Toolkit's DPC++, oneMKL, TBB and source setvars.sh)
_ONEAPI_LIBRARY = re.compile(r"(?i)^(?:lib)?(?:mkl_\w+|sycl\d*|imf|svml|irng|intlc|ur_loader|pi_level_zero)"
                             r"(?:\.so[\d.]*|\.dll)$")
# TBB, OpenMP and oneDNN come from distributions and pip too: oneAPI's only where the paste is about Intel's stack
_ONEAPI_SHARED = re.compile(r"(?i)^(?:lib)?(?:tbb\w*|iomp5|dnnl)(?:\.so[\d.]*|\.dll)$")
_INTEL_STACK = re.compile(r"(?i)\boneAPI\b|\bITEX\b|intel[-_]extension|\bIPEX\b|\bxpu\b|\bsycl\b|Arc A\d|"
                          r"Data Center GPU (?:Max|Flex)|GPU flex")


@rule("rocm-libs-missing")
def rocm_libs_missing(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("rocm-libs-missing") + [e for e in ctx.of("arch-missing", "abi-mismatch")
                                            if "/.singularity.d/libs/" in e.line]
    cudart = _cudart_missing(ctx.of("torch-build"))
    system_cudart = cudart is not None and _system_cuda_runtime(ctx, cudart)
    if system_cudart:
        errors += [cudart]
    for reading in (_hip_runtime_older_than_program, _wsl_without_gpu_paravirtualization):
        found = reading(ctx)
        if found is not None:
            return found
    zluda = _zluda_runtime_not_on_path(ctx) or _zluda(ctx)
    if zluda is not None:
        return zluda
    empty = _empty_tensile_folder(ctx)
    if empty is not None:
        return empty
    if not errors:
        return None
    said = _rocm_libs_said(ctx, errors)
    if said is not None:
        return said
    first = errors[0]
    if first.catalogue is not None and (first.catalogue.entry.context or first.catalogue.entry.id.startswith("rocm-")):
        # (round 15's ROCm entries name no library to install: their own remedy, restated)
        return _restate("rocm-libs-missing", first, errors)
    # the library the loader could not open, else the first one the line names (a line may name its loader first)
    lib = (re.search(r"(lib[\w\-+.]+?\.so[.\d]*): cannot open", first.line)
           or re.search(r"(lib[\w\-]+\.so[.\d]*|\w+\.dll)", first.line))
    name = lib.group(1) if lib else "a ROCm library"
    needs = _ldd_subject(ctx) if "=> not found" in first.line else None
    if needs is not None:
        # ldd listed what one binary of a Python package lacks: the package's build and the installed libraries differ
        package, path = needs
        missing = ", ".join(dict.fromkeys(re.search(r"(lib[\w.+-]+\.so[.\d]*)", e.line).group(1) for e in errors
                                          if "=> not found" in e.line))
        return _make("rocm-libs-missing", f"{package}'s binary needs libraries nothing installed provides",
                     f"{path} links {missing}, which no installed package ships: this {package} build was made against "
                     "other ROCm libraries than the ones installed",
                     f"install the {package} release built for the installed ROCm (the {package} wheels from PyPI or the "
                     f"index that matches the rocm packages' version), or the ROCm libraries that {package} build "
                     "names; ldd on the same file must then list no \"not found\"", [ctx.line_fact(first)], errors)
    text = " ".join(e.line for e in errors)
    dll = _dll_load_failed(ctx, errors)
    if dll is not None:
        return dll
    other_rocm = _built_for_other_rocm(ctx, name, first)
    if other_rocm is not None:
        return other_rocm
    special = _missing_library_fix(ctx, name, text)
    if special:
        title, cause, fix = special
        diagnosis = _make("rocm-libs-missing", title, cause, fix, [ctx.line_fact(first)], errors)
        if re.match(r"libcudart\.so", name) and system_cudart:
            # the line names the library and the package that loads it from the system: the cause, settled, wherever
            # the machine is (under WSL the Windows driver brings libcuda only, never the CUDA runtime)
            return _first(diagnosis)
        return diagnosis
    if _ONEAPI_LIBRARY.search(name) or (_ONEAPI_SHARED.search(name) and _INTEL_STACK.search(_text(ctx))):
        # a oneAPI runtime library (oneMKL, the DPC++ / SYCL runtime, TBB, the compiler's runtime): Intel's GPU
        # extensions (intel-extension-for-tensorflow / -pytorch) load them from the oneAPI install, whose folders only
        # its setvars script puts on the loader's path; adding one folder by hand misses the others
        fix = (f"{name} is a oneAPI library: in the shell that starts the program, source /opt/intel/oneapi/setvars.sh "
               "(a user install: ~/intel/oneapi/setvars.sh; Windows: the oneAPI command prompt or setvars.bat), which "
               "puts every oneAPI folder on the loader's path; if oneAPI is not installed, install the Intel oneAPI "
               "Base Toolkit components the extension names (DPC++ compiler and library, oneMKL, TBB) of the release "
               "it was built with, then source setvars.sh")
        return _make("rocm-libs-missing", f"{name} (oneAPI) is not found", f"the loader cannot find {name}: the oneAPI "
                     "runtime is not installed, or its environment was not set in this shell", fix,
                     [ctx.line_fact(first)], errors)
    if ctx.sheet.is_windows or name.endswith(".dll"):
        fix = ("install AMD's HIP SDK for Windows (it puts amdhip64 and rocBLAS in C:\\Program Files\\AMD\\ROCm\\<ver>\\bin) "
               "and an Adrenalin driver of the same generation; restart the program so PATH is read again")
        if re.search(r"(?i)site-packages|\bvenv|\bpipx\b", _text(ctx)):
            # a package from a venv (a ROCm CTranslate2, torch from AMD's index) loads the ROCm runtime from wheels
            fix = ("install the ROCm runtime wheels into the same environment: pip install rocm_sdk_core "
                   "rocm_sdk_libraries_custom (AMD's Windows wheels from repo.radeon.com, the release the package was "
                   "built for; pipx: pipx runpip <app> install ...); or " + fix)
    elif not _ROCM_LIBRARY.search(name) and name != "a ROCm library":
        built = _self_built_prefix(ctx, name)
        if built is not None:
            # the user built and installed this library: it is there, in a prefix the loader does not search
            return _make("rocm-libs-missing", f"{name} is not on the loader's path", f"{name} was built and installed "
                         f"into {built}, a folder the loader does not search", f"export LD_LIBRARY_PATH={built}/lib:"
                         "$LD_LIBRARY_PATH before running (in the job script on a cluster), or install it into a "
                         "system prefix and run ldconfig", [ctx.line_fact(first)], errors)
        sdk = _tar_sdk_fix(name)
        if sdk is not None:
            return _make("rocm-libs-missing", f"{name} is not on the loader's path", sdk[0], sdk[1],
                         [ctx.line_fact(first)], errors)
        # not ROCm's: the distribution package or the pip package that ships this library
        fix = (f"install the package that ships {name}: apt-file search {name} (dnf provides '*/{name}') names the "
               "distribution package; a library that lives in site-packages comes with its pip package, so "
               "reinstall that one (pip install --force-reinstall <package>)")
        return _make("rocm-libs-missing", f"{name} is not found", f"the loader cannot find {name}, which is not "
                     "installed or not on its path", fix, [ctx.line_fact(first)], errors, confirmed=False)
    elif _own_torch_beside_rocm_wheels(ctx):
        # a torch not from TheRock's index (a wheel file built elsewhere, a +git build) beside the rocm-sdk wheels: only
        # TheRock's own torch preloads those wheels' libraries, so this one needs their folders on the loader's path
        site, gfx = _rocm_wheel_folders(ctx)
        fix = (f"{name} is in the rocm-sdk wheels installed with pip, which only TheRock's own torch preloads; this torch "
               "was built elsewhere (a local wheel file or +git build), so put the wheels' library folders on the "
               f"loader's path: export LD_LIBRARY_PATH={site}/_rocm_sdk_core/lib:{site}/_rocm_sdk_libraries_{gfx}/lib:"
               "$LD_LIBRARY_PATH (in the venv's bin/activate so every start has it; rocm-sdk path --root shows the "
               "core folder), or install torch from TheRock's index for this GPU")
    elif re.search(r"(?i)\bnightl(?:y|ies)\b|\brocm-sdk\b|\bTheRock\b|\d\.\d+\.\d+a20\d{6}", _text(ctx)):
        # a ROCm torch nightly (TheRock's wheels) that links a library its rocm-sdk wheels do not bring, or bring but
        # torch does not preload: the nightly's packaging, not the machine
        fix = (f"{name} is a ROCm library this torch nightly links: install the rocm-sdk wheels of the same nightly "
               "(pip install --force-reinstall \"rocm[libraries]\" from the index torch came from) and look for it: "
               f"find $(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') -name '{name}*'; if it "
               "is there, torch's preload list (torch/_rocm_init.py) lacks it, a packaging bug of that nightly: take an "
               f"earlier or later nightly, or LD_PRELOAD=<that file> meanwhile; if not, the rocm-sdk wheels lack {name}")
        short = re.match(r"lib([\w-]+?)(?:64)?\.so", name)
        if short and re.search(r"(?i)rocprofiler-sdk-roctx|miopen", name):
            # TheRock's RELEASES.md, the torch nightlies' known issue: preload those libraries before torch
            fix += (f"; TheRock's workaround for the torch nightlies that lack them in their preload list: import "
                    f"rocm_sdk; rocm_sdk.preload_libraries(\"rocprofiler-sdk-roctx\", \"miopen\") before import torch")
    elif ctx.sheet.has("layout", "therock"):
        fix = ("this ROCm comes as Python wheels (TheRock), with no /opt/rocm: install its libraries into the same "
               "environment (pip install 'rocm[libraries]' from the index torch came from) and run from that venv")
    else:
        fix = ("install the ROCm runtime (sudo amdgpu-install --usecase=rocm, or your distribution's rocm packages) "
               "or point the loader at it: export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH")
        owner = _rocm_package_of(name)
        if owner is not None:
            # the package that ships the file, named: where it shows as installed and the file is gone, its files were
            # removed or overwritten under it, and only reinstalling it brings them back
            # round 20 (r20a): older ROCm releases put a component's libraries in the component's own folder
            # (/opt/rocm-3.5.1/rccl/lib: Grench6/RX580-rocM-tensorflow-ubuntu20.4-guide#1, fixed by LD_LIBRARY_PATH
            # on it), which the loader does not search: the file is installed, only not found
            stem = name.split(".so")[0]
            fix = (f"{name} comes with the ROCm package {owner}: first look where it is (find /opt/rocm* -name "
                   f"'{stem}.so*'); where it sits in the package's own folder, as older ROCm releases install it "
                   f"(/opt/rocm-<version>/{owner}/lib), put that folder on the loader's path: export LD_LIBRARY_PATH="
                   f"/opt/rocm/{owner}/lib:$LD_LIBRARY_PATH (or a line in /etc/ld.so.conf.d/rocm.conf, then sudo "
                   f"ldconfig); where it is nowhere: sudo apt install --reinstall {owner} (dnf reinstall {owner}); "
                   f"dpkg -L {owner} | grep {stem} must then list it, and ldconfig -p find it; where more of ROCm is "
                   "missing: " + fix)
    return _make("rocm-libs-missing", f"{name} is not found", f"the loader cannot find {name}: the ROCm runtime is "
                 "not installed where the program looks", fix, [ctx.line_fact(first)], errors)


# PyInstaller's words when a program frozen into one .exe cannot load one of its DLLs: "Failed to load dynlib/dll
# '...\\_MEI1234\\koboldcpp_hipblas.dll'. Most likely this dynlib/dll was not found when the application was frozen."
_FROZEN_DLL = re.compile(r"(?i)Failed to load dynlib/dll\b(?:\s+['\"]?([^'\"\s]{1,300}))?")
# a GPU backend of the bundle built on ROCm's (HIP SDK's) libraries
_HIP_BACKEND = re.compile(r"(?i)\brocm\b|hipblas|\bhip\b")


@rule("rocm-libs-missing")
def frozen_bundle_without_a_dll(ctx: Context) -> Optional[Diagnosis]:
    """A program frozen with PyInstaller (one .exe that unpacks into a _MEI folder) whose backend DLL does not load:
    the DLL, or one it depends on, was left out of the bundle. A ROCm build's backend loads hipblas.dll and
    rocblas.dll (with rocblas\\library) from the bundle or from the HIP SDK on PATH; a release packaged without them
    fails with every backend after it."""
    lines = _lines_matching(ctx, _FROZEN_DLL.pattern) if "dynlib" in _text(ctx).lower() else []
    if not lines:
        return None
    m = _FROZEN_DLL.search(lines[0].line)
    named = m.group(1).rsplit("\\", 1)[-1].rsplit("/", 1)[-1] if m.group(1) else None
    tool = ctx.tool() or "the program"
    if _HIP_BACKEND.search(_text(ctx)):
        return _make("rocm-libs-missing", f"{tool}'s bundle lacks the ROCm libraries its backend loads",
                     f"{tool} is a PyInstaller bundle; its GPU backend{' (' + named + ')' if named else ''} needs "
                     "hipblas.dll and rocblas.dll (and the rocblas\\library kernels), which this release's bundle does "
                     "not carry and no HIP SDK on PATH provides",
                     "put the HIP SDK's libraries where the backend finds them: install AMD's HIP SDK of the version the "
                     "release is built for and add %HIP_PATH%\\bin to PATH, or copy hipblas.dll and rocblas.dll (with "
                     f"the rocblas\\library folder) from the HIP SDK or from {tool}'s previous release into the unpacked "
                     f"_MEI folder (or next to the .exe); or go back to the previous {tool} release",
                     [ctx.line_fact(lines[0])], lines[:1])
    return _make("rocm-libs-missing", f"{tool}'s bundle lacks a DLL",
                 f"{tool} is a PyInstaller bundle, and {named or 'a library it loads'} (or a DLL that one depends on) "
                 "was not packed into it or is not on PATH",
                 f"install the runtime that DLL comes from (the CUDA runtime or the Visual C++ redistributable, as its "
                 f"name says) or go back to {tool}'s previous release, and report the missing file to its maintainers",
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)
