"""doctor, round 6 phase 2 (issue 63): the install families' readings made from batch 5's training pastes, each held
against wordings of its own (another GPU, tool, library or platform than the case it came from) and a negative that
keeps it out of a paste it does not fit."""

from __future__ import annotations

from steadytune.doctor.diagnose import diagnose_text


def _top(text: str):
    top = diagnose_text(text).top
    assert top is not None, f"no diagnosis for:\n{text}"
    return top


# ------------------------------------------------------------------------------------------------ rocm-libs-missing

def test_libdrm_amdgpu_ids_missing_is_a_harmless_warning_with_its_package():
    top = _top("$ python -c 'import torch; print(torch.cuda.get_device_name(0))'\n"
               "/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory\nAMD Radeon Graphics\n")
    assert top.family == "rocm-libs-missing" and top.severity == "warning"
    assert "libdrm-amdgpu-common" in top.fix
    # a real error beside it leads, the table's warning does not
    top = _top("/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory\n"
               "RuntimeError: No HIP GPUs are available\nrocminfo: Unable to open /dev/kfd read-write: Permission denied\n")
    assert top.family != "rocm-libs-missing"


def test_the_linker_not_finding_a_library_names_that_library_and_where_it_lives():
    cuda = _top("building flash_attn\n/usr/bin/ld: cannot find -lcublas: No such file or directory\n"
                "collect2: error: ld returned 1 exit status\n")
    assert cuda.family == "rocm-libs-missing" and "libcublas.so" in cuda.fix and "LIBRARY_PATH" in cuda.fix
    rocm = _top("ld.lld: error: unable to find library -lhipblas\nclang: error: linker command failed\n")
    assert rocm.family == "rocm-libs-missing" and "/opt/rocm/lib" in rocm.fix
    system = _top("x86_64-linux-gnu-gcc ... -laio\n/usr/bin/ld: cannot find -laio\n")
    assert system.family == "rocm-libs-missing" and "libaio-dev" in system.fix
    # a runtime loader error is not a link step
    loader = _top("OSError: libcurand.so.10: cannot open shared object file: No such file or directory\n")
    assert "linker" not in loader.title


def test_ld_lld_not_found_in_a_rocm_build_points_at_rocm_llvm():
    top = _top("Compiling the model for gfx1100 with TVM\nRuntimeError: cannot find ld.lld, canditates are: "
               "['ld.lld-17.0', 'ld.lld-17', 'ld.lld']\n")
    assert top.family == "rocm-libs-missing" and "/opt/rocm/llvm/bin" in top.fix
    # ld.lld that runs and fails on its input is found
    assert "/opt/rocm/llvm/bin" not in _top("ld.lld: error: undefined symbol: hipLaunchKernel\n").fix


# ------------------------------------------------------------------------------------------------ wheel-platform

def test_only_the_torch_placeholder_releases_mean_a_32_bit_or_too_new_python():
    top = _top("C:\\> py -m pip install torch==2.1.0\nERROR: Could not find a version that satisfies the requirement "
               "torch==2.1.0 (from versions: 0.1.2, 0.1.2.post1, 0.1.2.post2)\n")
    assert top.family == "wheel-platform" and "64-bit" in top.fix
    # a pin older than the Python: that torch's newest Python
    top = _top("Python 3.11.4\n$ pip install torch==1.12.1+cu116\nERROR: Could not find a version that satisfies the "
               "requirement torch==1.12.1+cu116 (from versions: 0.1.2, 0.1.2.post1, 0.1.2.post2)\n")
    assert "Python up to 3.10" in top.fix
    # other versions on offer are not the placeholder reading
    top = _top("ERROR: Could not find a version that satisfies the requirement torch==2.9.0 (from versions: 2.2.0, "
               "2.2.1, 2.3.0)\n")
    assert "placeholder" not in top.cause


def test_amdsmi_missing_a_function_is_the_module_of_another_rocm_release():
    top = _top("ROCm 6.3.1 and ROCm 7.0.2 are installed side by side (/opt/rocm-6.3.1, /opt/rocm-7.0.2)\n"
               "$ amd-smi static\nAttributeError: module 'amdsmi.amdsmi_interface' has no attribute "
               "'amdsmi_get_gpu_board_info'\n")
    assert top.family == "wheel-platform" and "/opt/rocm-7.0.2/share/amd_smi" in top.fix
    # another package's missing attribute is not amdsmi's
    other = diagnose_text("AttributeError: module 'numpy' has no attribute 'float'\n")
    assert other.by_likeness or other.top is None or "amd_smi" not in other.top.fix   # no rule's reading


# ------------------------------------------------------------------------------------------------ abi-mismatch

def test_a_versioned_symbol_missing_from_the_library_loaded_first_is_an_older_copy_on_the_path():
    top = _top("export LD_LIBRARY_PATH=/opt/cudnn-8.0/lib:$LD_LIBRARY_PATH\n"
               "ImportError: /env/lib/python3.10/site-packages/tensorflow/libtensorflow_framework.so.2: symbol "
               "cublasLtMatmulAlgoGetIds, version libcublasLt.so.11 not defined in file libcublasLt.so.11 with link "
               "time reference\n")
    assert top.family == "abi-mismatch" and "libcublasLt" in top.fix and "LD_LIBRARY_PATH" in top.fix
    # an undefined symbol without a version is the extension's build, not a library order
    plain = _top("ImportError: /x/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
                 "_ZN3c104cuda9SetDeviceEi\n")
    assert "loaded first" not in plain.title


def test_nvcc_of_another_cuda_than_torch_builds_with_torch_cuda_toolkit():
    top = _top("$ pip install -v --no-build-isolation ./deepspeed-src\nCuda compilation tools, release 12.4, V12.4.131\n"
               "RuntimeError: The current installed version of nvcc ... Cuda extensions are being compiled with a "
               "version of Cuda that does not match the version used to compile Pytorch binaries.  Pytorch binaries "
               "were compiled with Cuda 11.8\n")
    assert top.family == "abi-mismatch" and "/usr/local/cuda-11.8" in top.fix and "12.4" in top.cause


def test_torch_compiled_with_cuda_none_from_therock_is_a_torch_without_rocm():
    top = _top("pip install torch --index-url https://rocm.nightlies.amd.com/v2/gfx120X-all\n"
               "RuntimeError: Cuda extensions are being compiled with a version of Cuda that does not match the "
               "version used to compile Pytorch binaries.  Pytorch binaries were compiled with Cuda None.\n"
               "OS: Ubuntu 24.04, TheRock 7.10, RX 9070\n")
    assert top.family == "torch-build" and "TheRock 7.10" in top.fix
    assert "rocm.nightlies.amd.com/v2/gfx120X-all" in top.fix
    # Cuda None without TheRock on AMD: pytorch.org's ROCm index
    top = _top("Radeon RX 7900 XTX, ROCm 6.4\nRuntimeError: Cuda extensions are being compiled with a version of "
               "Cuda that does not match the version used to compile Pytorch binaries.  Pytorch binaries were "
               "compiled with Cuda None.\n")
    assert top.family == "torch-build" and "download.pytorch.org/whl/rocm" in top.fix


# ------------------------------------------------------------------------------------------------ torch-build

def test_llama_cpp_retired_hipblas_option_said_in_prose():
    top = _top("Since the llama.cpp update GGML_HIPBLAS is ignored, so my RX 6800 build runs on the CPU\n")
    assert top.family == "torch-build" and "GGML_HIP" in top.fix
    # naming the option while it works is no complaint
    assert diagnose_text("I built with GGML_HIPBLAS and it runs on my RX 6800 fine\n").top is None


def test_an_unquoted_comparison_with_a_build_tag_never_reaches_pip():
    top = _top("$ pip3 install torchaudio>=2.0.1+cu118 -f https://download.pytorch.org/whl/torch_stable.html\n"
               "$ pip list | grep torch\ntorchaudio                2.0.1+cpu\n")
    assert top.family == "torch-build" and top.confirmed
    assert '"torchaudio==2.0.1+cu118"' in top.fix and "whl/cu118/torch_stable.html" in top.fix
    # quoted and pinned with == is fine: no such reading
    assert diagnose_text("$ pip install 'torch==2.0.1+cu118' -f https://download.pytorch.org/whl/torch_stable.html\n"
                         ).top is None


def test_libcudart_missing_under_a_torch_package_is_torch_cuda_build():
    top = _top("Traceback (most recent call last):\n  File \"run.py\", line 3, in <module>\n"
               "    import xformers.ops\nImportError: libcudart.so.12: cannot open shared object file: No such file or "
               "directory\n")
    assert top.family == "torch-build" and "cu121" in top.fix and "xformers" in top.fix
    # a package that loads the CUDA runtime from the system: the library and the loader path, not torch
    top = _top("$ pip install ctranslate2\nfrom ctranslate2 import Translator\nOSError: libcudart.so.12: cannot open "
               "shared object file: No such file or directory\n")
    assert top.family == "rocm-libs-missing" and "nvidia-cuda-runtime-cu12" in top.fix
    assert "nvidia/cuda_runtime/lib" in top.fix and "LD_LIBRARY_PATH" in top.fix


def test_a_package_install_that_replaces_torch_is_built_from_source_against_it():
    top = _top("Whenever I run pip install flash-attn it uninstalls my torch 2.4.0 and pulls torch 2.3.1 with CUDA 11.8")
    assert top.family == "wheel-platform" and "from source" in top.fix and "flash-attn" in top.fix
    # a requirements file is not the package
    top = _top("pip install -r requirements.txt replaced my torch 2.5.1+rocm6.2 with a CUDA torch; it pins vllm\n")
    assert "requirements.txt" not in top.title
    # a torch upgraded on purpose is no complaint about another package
    assert diagnose_text("I upgraded torch to 2.5 yesterday and training is faster now\n").top is None


def test_tensorflow_on_native_windows_finds_no_gpu_after_2_10():
    top = _top("Windows 10, tensorflow 2.15.0, RTX 4070\n>>> tf.config.list_physical_devices('GPU')\n[]  # but the GPU "
               "works in pytorch\n")
    assert top.family == "wheel-platform" and "WSL2" in top.fix and "tensorflow<2.11" in top.fix
    # 2.10 still had a Windows GPU build: not this reading
    top = diagnose_text("Windows 11, tensorflow 2.10.1\n>>> tf.config.list_physical_devices('GPU')\n[]\n").top
    assert top is None or "2.10 was the last" not in top.fix
    # under WSL2 TensorFlow is the Linux build
    top = diagnose_text("Windows 11 with WSL2 Ubuntu, tensorflow 2.15.0\n>>> tf.config.list_physical_devices('GPU')\n[]\n"
                        ).top
    assert top is None or "native Windows" not in top.cause
    # on Linux the same empty list is not a platform matter
    top = diagnose_text("Ubuntu 22.04, tensorflow 2.15.0\n>>> tf.config.list_physical_devices('GPU')\n[]\n").top
    assert top is None or "native Windows" not in top.cause


def test_torchvision_of_another_build_than_torch():
    top = _top("torch 2.3.1+cu121\ntorchvision 0.18.1\nRuntimeError: operator torchvision::roi_align does not exist\n")
    assert top.family == "wheel-platform" and "torchvision==0.18.1+cu121" in top.fix and "whl/cu121" in top.fix
    # the same build on both: the release pairing reading instead
    top = _top("torch 2.3.1+cu121\ntorchvision 0.17.0+cu121\nRuntimeError: operator torchvision::nms does not exist\n")
    assert top.family == "abi-mismatch"
    # releases that do not pair (torchvision 0.20 is torch 2.5's): the release is what differs, whatever the build
    top = _top("RuntimeError: operator torchvision::nms does not exist\ntorch 2.6.0+rocm6.2.4, torchvision 0.20.1\n")
    assert top.family == "abi-mismatch"


def test_a_rocm_library_missing_from_a_torch_nightly_names_that_library_and_its_wheels():
    top = _top("import torch fails with the 2.10.0a20260101 nightly on gfx1151:\nOSError: librocprofiler-sdk.so.1: "
               "cannot open shared object file: No such file or directory\n")
    assert top.family == "rocm-libs-missing" and "librocprofiler-sdk.so.1" in top.fix and "rocm[libraries]" in top.fix
    # a released torch on a machine ROCm: the installed runtime
    top = _top("OSError: libamdhip64.so.6: cannot open shared object file: No such file or directory\n")
    assert "nightly" not in top.fix


def test_a_jit_extension_cache_outlives_a_torch_version_change():
    top = _top("ImportError: /root/.cache/torch_extensions/py311_cu118/fused_adam/fused_adam.so: undefined symbol: "
               "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs\n")
    assert top.family == "abi-mismatch" and "torch version" in top.fix and "torch_extensions" in top.fix


def test_a_torch_pin_newer_than_the_rocm_index_names_the_index_that_has_it():
    top = _top("Radeon RX 7800 XT, the app runs on the CPU instead of the GPU\n$ pip install torch==2.8.0 --index-url "
               "https://download.pytorch.org/whl/rocm6.2\nERROR: Could not find a version that satisfies the requirement "
               "torch==2.8.0 (from versions: 2.5.0+rocm6.2, 2.5.1+rocm6.2)\n")
    assert top.family == "torch-build" and "whl/rocm6.4" in top.fix and "torch==2.8.0" in top.fix
    # no fall-back said: the pin itself fails, a wheel-platform matter with the same index
    top = _top("$ pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/rocm5.7\nERROR: Could not find a "
               "version that satisfies the requirement torch==2.5.1 (from versions: 2.2.0+rocm5.7, 2.3.1+rocm5.7)\n")
    assert top.family == "wheel-platform" and "whl/rocm6.2" in top.fix
    # a pin the index does list for other Pythons is not an old index
    top = _top("$ pip install torch==2.3.1 --index-url https://download.pytorch.org/whl/rocm6.0\nERROR: Could not find a "
               "version that satisfies the requirement torch==2.3.1 (from versions: 2.3.1+rocm6.0, 2.4.0+rocm6.0)\n")
    assert "has no torch 2.3.1" not in top.title


def test_a_tensorflow_rocm_pin_for_a_rocm_point_release_takes_the_minor_release_build():
    top = _top("ROCm 5.7.1 here. pip install tensorflow-rocm==2.13.0.571\nERROR: No matching distribution found for "
               "tensorflow-rocm==2.13.0.571\n")
    assert top.family == "wheel-platform" and "tensorflow-rocm==2.13.0.570" in top.fix
    # a minor-release build that is not found is another matter (a Python, a platform)
    top = diagnose_text("pip install tensorflow-rocm==2.14.0.600\nERROR: No matching distribution found for "
                        "tensorflow-rocm==2.14.0.600\n").top
    assert top is None or "2.14.0.600 (" not in top.fix


def test_jaxlib_not_found_on_windows_is_its_windows_wheels():
    top = _top("On Windows 10: pip install jaxlib==0.3.25\nERROR: Could not find a version that satisfies the requirement "
               "jaxlib==0.3.25 (from versions: none)\n")
    assert top.family == "wheel-platform" and "0.4.13" in top.fix and "WSL2" in top.fix
    # on Linux the same line is a Python matter
    top = _top("Ubuntu 24.04: pip install jaxlib==0.3.25\nERROR: Could not find a version that satisfies the "
               "requirement jaxlib==0.3.25 (from versions: none)\n")
    assert "0.4.13" not in top.fix


def test_a_triton_fork_under_windows_torch_is_replaced_by_triton_windows():
    top = _top("Windows 11, RX 7900 XT, torch from AMD's Windows wheels, triton built from "
               "https://github.com/someone/triton\ntorch.compile fails: triton.compiler.errors.CompilationError: at 1:0 "
               "error in triton kernel\n")
    assert top.family == "wheel-platform" and "triton-windows" in top.fix
    # triton-windows already installed: not this reading
    top = diagnose_text("Windows 11, triton-windows 3.3 and https://github.com/someone/triton\nerror in triton kernel\n"
                        ).top
    assert top is None or "fork" not in top.title


def test_exllamav2_on_a_rocm_older_than_it_needs():
    top = _top("ROCm 5.4.2 with torch 2.0.1+rocm5.4.2\nImportError: /env/site-packages/exllamav2_ext.cpython-310-x86_64-"
               "linux-gnu.so: undefined symbol: hipblasGemmEx\n")
    assert top.family == "abi-mismatch" and "ROCm 5.6 or newer" in top.fix
    # ROCm 6 installed: the extension's own build, not the ROCm release
    top = _top("ROCm 6.2 with torch 2.5.1+rocm6.2\nImportError: /env/site-packages/exllamav2_ext.cpython-310-x86_64-"
               "linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi\n")
    assert top.family == "abi-mismatch" and "5.6" not in top.fix and "exllamav2" in top.fix


def test_a_hip_function_missing_from_the_driver_dll_is_an_old_adrenalin():
    top = _top("The procedure entry point hipMemAdvise could not be located in the dynamic link library "
               "C:\\tools\\zluda\\nvcuda.dll\n")
    assert top.family == "driver" and "Adrenalin" in top.fix
    # a CUDA function from another DLL is not the HIP runtime
    report = diagnose_text("The procedure entry point cudnnGetVersion could not be located in the dynamic link library "
                           "cudnn64_8.dll\n")
    assert report.by_likeness or report.top is None or report.top.family != "driver"   # no rule reads it as the driver


def test_hip6_dlls_wanted_on_a_polaris_or_vega_card():
    top = _top("amdhip64_6.dll not found when starting ZLUDA on my Radeon RX 590")
    assert top.family == "gpu-unsupported" and "RDNA" in top.fix
    # an RDNA card missing the same DLL needs the HIP SDK, not a new GPU
    top = _top("amdhip64_6.dll not found when starting ZLUDA on my Radeon RX 6700 XT")
    assert top.family != "gpu-unsupported"


def test_wsl_without_gpu_paravirtualization():
    top = _top("nvidia-container-cli under WSL2: dxcore initialization failed, continuing assuming a non-WSL environment\n"
               "load library failed: libcuda.so.1: cannot open shared object file: no such file or directory\n")
    assert top.family == "wsl" and "21H2" in top.fix
    # dxcore is WSL's: outside WSL the message is not this reading
    top = diagnose_text("load library failed: libnvidia-ml.so.1: cannot open shared object file\n").top
    assert top is None or "21H2" not in top.fix


def test_compiler_diagnostics_are_no_install_complaint():
    top = diagnose_text("RuntimeError: Internal Triton PTX codegen error:\nptxas /tmp/x.ptx, line 88; error   : "
                        "Feature '.bf16' requires .target sm_80 or higher\n").top
    assert top is None or "does not install" not in top.title
    assert _top("triton install fails on Windows 11\n").family == "wheel-platform"


def test_no_hip_gpus_is_said_by_a_rocm_torch_so_the_build_is_not_blamed():
    top = _top("docker run --device /dev/kfd --device /dev/dri rocm/pytorch\nRuntimeError: No HIP GPUs are available\n")
    assert top.family != "torch-build"
    # a CUDA build on an AMD GPU still is
    top = _top("Radeon RX 7900 XTX\ntorch 2.5.1+cu124\nAssertionError: Torch not compiled with CUDA enabled\n")
    assert top.family == "torch-build"


def test_the_platform_readings_read_chinese_prose():
    top = _top("Windows 11 上 tensorflow 2.16.1 检测不到 GPU，pytorch 可以用 (RTX 3060)\n")
    assert top.family == "wheel-platform" and "WSL2" in top.fix
    top = _top("每次 pip install xformers 都会重新安装了torch 2.0.1，我原来是 torch 2.3.0+cu121\n")
    assert top.family == "wheel-platform" and "xformers" in top.fix and "from source" in top.fix
