"""doctor, round 6 (issue 63): the install families' readings carry to pastes they were not written from. Each reading
is held against several wordings (other tools, other platforms, Windows paths, thin prose) made up for these tests;
the tool x family fix table (steadytune/doctor/tool_fixes.yaml) is checked as data."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.packages import read_import_failure
from steadytune.doctor.tool_fixes import ToolFixError, load_tool_fixes, machine_kinds, table_tool, tool_fix


# ------------------------------------------------------------------------------------------------ the fix table

def test_the_table_loads_and_every_row_is_reachable_by_its_tool():
    rows = load_tool_fixes()
    assert len(rows) >= 20
    for row in rows:
        assert table_tool(row.tool) == row.tool
        assert tool_fix(row.tool, row.family, frozenset(row.on), {})   # each row is chosen on its own machine kinds


def test_the_most_specific_row_for_the_machine_wins():
    windows = tool_fix("triton", "wheel-platform", machine_kinds(True, "nvidia", ""), {"caller": "unsloth"})
    linux = tool_fix("triton", "wheel-platform", machine_kinds(False, "nvidia", ""), {})
    amd = tool_fix("pytorch-triton-rocm", "wheel-platform", machine_kinds(False, "amd", ""), {"rocm_index": "ROCM"})
    assert "triton-windows" in windows and "unsloth" in windows
    assert "triton-windows" not in linux.split(":")[0] and "torch 2.6 -> triton 3.2" in linux
    assert "pytorch-triton-rocm" in amd and "ROCM" in amd
    assert tool_fix("no-such-tool", "wheel-platform", frozenset({"linux"}), {}) is None
    assert machine_kinds(False, None, r"C:\ComfyUI\python_embeded\python.exe") >= {"windows"}


@pytest.mark.parametrize("row, message", [
    ("- {tool: x, family: no-family, fix: f, source: s}", "unknown family 'no-family'"),
    ("- {tool: x, family: torch-build, machine: [beos], fix: f, source: s}", "unknown machine kind 'beos'"),
    ("- {tool: x, family: torch-build, fix: 'pip install {pkg}', source: s}", "unknown placeholder pkg"),
    ("- {tool: x, family: torch-build, on: [windows], fix: f, source: s}", "write `machine:`, not `on:`"),
    ("- {tool: x, family: torch-build, fix: f}", "missing source"),
    ("- {tool: x, family: torch-build, fix: f, source: s}\n- {tool: x, family: torch-build, fix: g, source: s}",
     "a second row"),
])
def test_a_malformed_table_is_refused_with_the_row_named(tmp_path, row, message):
    path = tmp_path / "tool_fixes.yaml"
    path.write_text(row + "\n", encoding="utf-8")
    with pytest.raises(ToolFixError, match=r"tool_fixes\.yaml row \d") as raised:
        load_tool_fixes(path)
    assert message in str(raised.value)


# ------------------------------------------------------------------------------------------------ the readings

def _top(text: str):
    top = diagnose_text(text).top
    assert top is not None, f"no diagnosis for:\n{text}"
    return top


# a module path that moved between releases of its package: the package and the release to install, and whose code
# imported it
MOVED = [
    ("unsloth", "triton", '  File "/home/a/env/lib/python3.11/site-packages/unsloth/kernels/utils.py", line 9\n'
                          "    from triton.common.build import libcuda_dirs\n"
                          "ModuleNotFoundError: No module named 'triton.common'"),
    ("xformers", "triton", '  File "C:\\\\sd\\\\venv\\\\Lib\\\\site-packages\\\\xformers\\\\triton\\\\k.py", line 3\n'
                           "    from triton.runtime.jit import get_cuda_stream\n"
                           "ModuleNotFoundError: No module named 'triton.runtime.jit'"),
    ("peft", "transformers", '  File "/venv/lib/python3.10/site-packages/peft/tuners/lora.py", line 5\n'
                             "ImportError: cannot import name 'Conv1D' from 'transformers.pytorch_utils' "
                             "(/venv/lib/python3.10/site-packages/transformers/pytorch_utils.py)"),
    ("trl", "transformers", '  File "/usr/local/lib/python3.10/dist-packages/trl/trainer/utils.py", line 20\n'
                            "    from transformers.deepspeed import is_deepspeed_zero3_enabled\n"
                            "ModuleNotFoundError: No module named 'transformers.deepspeed'"),
]


@pytest.mark.parametrize("caller, package, paste", MOVED, ids=[m[0] for m in MOVED])
def test_a_module_that_moved_between_releases_names_the_package_and_its_importer(caller, package, paste):
    top = _top(paste)
    assert top.family == "wheel-platform" and top.confirmed
    assert f"install the {package} release {caller} was written for" in top.fix
    assert f"pip install -U {caller}" in top.fix


def test_an_import_failure_is_read_with_its_importer():
    failure = read_import_failure(MOVED[0][2].splitlines())
    assert (failure.module, failure.caller, failure.distribution, failure.moved) == (
        "triton.common", "unsloth", "triton", True)
    # a package's own compiled part, or a package not installed at all, is no moved path
    assert not read_import_failure(["No module named 'cv2'"]).moved
    assert read_import_failure(["No module named 'cv2'"]).distribution == "opencv-python"
    assert read_import_failure(["all good"]) is None


@pytest.mark.parametrize("paste", [
    "Windows 11, RTX 4090\nModuleNotFoundError: No module named 'triton'",
    "C:\\ComfyUI_windows_portable\\python_embeded\\python.exe -s main.py\nImportError: No module named triton",
    "PS C:\\Users\\me> python -c \"import triton\"\nModuleNotFoundError: No module named 'triton'",
])
def test_triton_missing_on_windows_is_triton_windows(paste):
    top = _top(paste)
    assert top.family == "wheel-platform" and "triton-windows" in top.fix


def test_a_package_missing_elsewhere_is_its_install_into_the_same_python_unconfirmed():
    top = _top("ModuleNotFoundError: No module named 'bitsandbytes'")
    assert top.family == "wheel-platform" and not top.confirmed and "bitsandbytes" in top.fix


@pytest.mark.parametrize("paste, built", [
    ("$ pip install flash-attn\nCollecting flash-attn\n  Getting requirements to build wheel ... error\n"
     "  error: subprocess-exited-with-error\n  ModuleNotFoundError: No module named 'torch'", "flash-attn"),
    ("uv pip install -e .\n  Building wheels for collected packages: apex\n  Building wheel for apex (setup.py) ... "
     "error\n  ModuleNotFoundError: No module named 'packaging'", "apex"),
])
def test_a_module_missing_in_a_source_build_is_build_isolation(paste, built):
    top = _top(paste)
    assert top.family == "wheel-platform" and f"pip install {built} --no-build-isolation" in top.fix


def test_a_compiled_part_missing_is_no_moved_path():
    top = diagnose_text("ImportError: cannot import name '_C' from 'torch' (unknown location)").top
    assert top is None or top.family != "wheel-platform"


@pytest.mark.parametrize("paste, expect", [
    ("UserWarning: Specified provider 'CUDAExecutionProvider' is not in available provider names.Available providers: "
     "'AzureExecutionProvider, CPUExecutionProvider'", "onnxruntime-gpu"),
    ("Windows 11, Radeon RX 6600\nSpecified provider 'DmlExecutionProvider' is not in available provider names. "
     "Available providers: 'CPUExecutionProvider'", "onnxruntime-directml"),
    ("Ubuntu 24.04, RX 7900 XTX\nprovider 'MIGraphXExecutionProvider' is not in available provider names",
     "onnxruntime-migraphx"),
    ("RX 7900 XTX\nRuntimeError: Unable to initialize backend 'rocm': NOT_FOUND: Could not find registered platform "
     "with name: \"rocm\". Available platform names are: Host", "jax[rocm7-local]"),
    ("jaxlib 0.4.30\nRuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices.",
     "jax[cuda12]"),
])
def test_a_runtime_without_the_backend_asked_for_is_that_backends_build(paste, expect):
    top = _top(paste)
    assert top.family == "torch-build" and expect in top.fix


@pytest.mark.parametrize("paste", [
    "Windows 10\nImportError: DLL load failed while importing onnxruntime_pybind11_state: The specified module could "
    "not be found.",
    '  File "C:\\\\py\\\\Lib\\\\site-packages\\\\onnxruntime\\\\capi\\\\_pybind_state.py", line 32\n'
    "ImportError: DLL load failed while importing onnxruntime_pybind11_state: The specified module could not be found.",
])
def test_a_dll_that_cannot_load_names_its_package_runtime(paste):
    top = _top(paste)
    assert top.family == "rocm-libs-missing" and "vc_redist" in top.fix and "onnxruntime" in top.fix


@pytest.mark.parametrize("paste", [
    "--use-zluda\nCould not load cublas64_11.dll",
    "ZLUDA on RX 6700 XT\nOSError: [WinError 126] Error loading \"C:\\sd\\venv\\lib\\site-packages\\torch\\lib\\"
    "cudnn64_9.dll\" or one of its dependencies.",
])
def test_a_cuda_dll_failing_under_zluda_is_zludas_dlls(paste):
    top = _top(paste)
    assert top.family == "rocm-libs-missing" and "cublas64_11.dll" in top.fix


@pytest.mark.parametrize("paste, expect", [
    ("Kohya training only uses CPU instead of GPU on RX 7800 XT (Ubuntu 24.04)", "download.pytorch.org/whl/rocm"),
    ("Fooocus runs on CPU, not my RTX 3060, Windows 11", "download.pytorch.org/whl/cu"),
    ("stable diffusion not using my GPU (win11, 7900xtx)", "ROCm wheels for Windows"),
    ("tensorflow uses CPU instead of GPU on RX 6800 XT, Ubuntu", "tensorflow-rocm"),
])
def test_a_program_left_on_the_cpu_beside_a_named_gpu_is_the_build_without_its_backend(paste, expect):
    top = _top(paste)
    assert top.family == "torch-build" and not top.confirmed and expect in top.fix


def test_an_inference_server_on_the_cpu_is_not_read_as_a_torch_build():
    top = diagnose_text("ollama only uses CPU instead of GPU, RX 6600").top
    assert top is None or top.family != "torch-build"


@pytest.mark.parametrize("paste, expect", [
    ("ImportError: libGL.so.1: cannot open shared object file: No such file or directory", "apt-get install libgl1"),
    ("OSError: cannot load library 'libsndfile.so': libsndfile.so: cannot open shared object file: No such file",
     "libsndfile1"),
    ("OSError: libcuda.so.1: cannot open shared object file: No such file or directory", "NVIDIA driver"),
    ("OSError: libtorch_cuda.so: cannot open shared object file: No such file or directory", "import torch before"),
    ("RuntimeError: libnvrtc.so.12: cannot open shared object file: No such file or directory",
     "nvidia-cuda-nvrtc-cu12"),
    ("Could not locate cudnn_ops_infer64_8.dll. Please make sure it is in your library path!", "cuDNN 8"),
    ("Could not load library cublasLt64_12.dll. Error code 126", "nvidia-cublas-cu12"),
    ("error while loading shared libraries: libfoo_bar.so.2: cannot open shared object file", "apt-file search"),
])
def test_a_missing_library_names_what_ships_it(paste, expect):
    top = _top(paste)
    assert top.family == "rocm-libs-missing" and expect in top.fix
    assert "amdgpu-install" not in top.fix   # none of these is ROCm's


def test_a_rocm_library_missing_is_still_the_rocm_runtime():
    top = _top("./llama-server: error while loading shared libraries: libhipblas.so.3: cannot open shared object file")
    assert top.family == "rocm-libs-missing" and "LD_LIBRARY_PATH=/opt/rocm/lib" in top.fix


def test_no_nvidia_driver_under_zluda_is_zludas_nvcuda_not_a_torch_build():
    top = _top("set COMMANDLINE_ARGS=--use-zluda\nRuntimeError: Found no NVIDIA driver on your system.")
    assert top.family == "rocm-libs-missing" and "nvcuda.dll" in top.fix


@pytest.mark.parametrize("paste, expect, confirmed", [
    ("Windows 11\npip install vllm\nModuleNotFoundError: No module named 'vllm._C'", "no Windows build", True),
    ("ModuleNotFoundError: No module named 'xformers._C'", "pip install --force-reinstall --no-cache-dir xformers",
     False),
])
def test_a_packages_compiled_part_missing_is_its_platform_build(paste, expect, confirmed):
    top = _top(paste)
    assert top.family == "wheel-platform" and expect in top.fix and top.confirmed == confirmed


def test_triton_missing_on_a_mac_says_there_is_no_build():
    top = _top("MacBook Pro M3, torch 2.5\nModuleNotFoundError: No module named 'triton'")
    assert top.family == "wheel-platform" and "no macOS build" in top.fix


@pytest.mark.parametrize("paste, expect", [
    ("OSError: /usr/local/lib/python3.10/dist-packages/torch_scatter/_scatter_cuda.so: undefined symbol: "
     "_ZN3c1017RegisterOperatorsD1Ev", "data.pyg.org"),
    ("ImportError: /opt/conda/lib/python3.11/site-packages/selective_scan_cuda.cpython-311-x86_64-linux-gnu.so: "
     "undefined symbol: _ZN3c107WarningC1E", "causal-conv1d mamba-ssm --no-build-isolation"),
    ("torch 2.5.1\nImportError: /venv/lib/python3.10/site-packages/mmcv/_ext.cpython-310-x86_64-linux-gnu.so: "
     "undefined symbol: _ZN2at4_ops5zeros4callE", "mim install mmcv"),
])
def test_an_extension_built_for_another_torch_gets_its_own_remedy(paste, expect):
    top = _top(paste)
    assert top.family == "abi-mismatch" and expect in top.fix


@pytest.mark.parametrize("paste, expect", [
    ("C:\\Users\\me\\ComfyUI\\venv\\Scripts\\python.exe main.py\nRuntimeError: Cannot find a working triton "
     "installation. Either the package is not installed or it is too old.", "triton-windows"),
    ("ROCm 6.2, RX 7900 XTX\nRuntimeError: Cannot find a working triton installation. More information on installing "
     "Triton can be found at https://github.com/openai/triton", "pytorch-triton-rocm"),
    ("RuntimeError: Cannot find a working triton installation.", "torch 2.6 -> triton 3.2"),
])
def test_torch_compile_without_triton_gets_this_platforms_triton(paste, expect):
    top = _top(paste)
    assert top.family == "wheel-platform" and expect in top.fix and "torch.compile" in top.fix


def test_an_optional_import_a_program_warned_about_is_no_failure():
    warned = ("A matching Triton is not available, some optimizations will not be enabled.\n"
              "Error caught was: No module named 'triton'\n")
    assert read_import_failure(warned.splitlines()) is None
    # beside a real failure (the HIP SDK's rocBLAS without the APU's library), the warning does not lead
    top = _top("C:\\ComfyUI-Zluda\\venv\\Scripts\\python.exe main.py\n" + warned +
               "rocBLAS error: Cannot read C:\\Program Files\\AMD\\ROCm\\5.7\\bin\\/rocblas/library/TensileLibrary.dat: "
               "No such file or directory for GPU arch : gfx1103")
    assert top.family != "wheel-platform"


@pytest.mark.parametrize("paste, expect", [
    ("Windows 11\nERROR: Could not find a version that satisfies the requirement triton (from versions: none)\n"
     "ERROR: No matching distribution found for triton", "triton-windows"),
    ("macOS 14, M3 Max\nERROR: No matching distribution found for vllm", "no macOS wheels"),
    ("error: Microsoft Visual C++ 14.0 or greater is required. Get it with \"Microsoft C++ Build Tools\"\n"
     "ERROR: Failed building wheel for flash-attn", "no Windows wheels"),
])
def test_no_wheel_for_this_os_names_the_packages_own_build_for_it(paste, expect):
    top = _top(paste)
    assert top.family == "wheel-platform" and expect in top.fix


@pytest.mark.parametrize("paste, expect", [
    ("ValueError: This CTranslate2 package was not compiled with CUDA support\nRX 6800", "CTranslate2-rocm"),
    ("ValueError: This CTranslate2 package was not compiled with CUDA support", "pip install -U ctranslate2"),
    ("MacBook Air M2\nAssertionError: Torch not compiled with CUDA enabled", "\"mps\""),
])
def test_a_runtime_built_without_the_gpu_backend_names_its_own_build(paste, expect):
    top = _top(paste)
    assert top.family == "torch-build" and expect in top.fix


def test_a_module_attribute_gone_between_releases_names_the_package_and_its_user():
    top = _top('  File "/home/u/venv/lib/python3.10/site-packages/librosa/core/constantq.py", line 1058\n'
               "    dtype=np.complex,\n"
               '  File "/home/u/venv/lib/python3.10/site-packages/numpy/__init__.py", line 305, in __getattr__\n'
               "AttributeError: module 'numpy' has no attribute 'complex'.")
    assert top.family == "wheel-platform" and "install the numpy release librosa was written for" in top.fix
    # the program's own code, or a circular import, is no release mix-up
    for alone in ("AttributeError: module 'numpy' has no attribute 'float'",
                  "AttributeError: partially initialized module 'torch' has no attribute 'x' (most likely due to a "
                  "circular import)"):
        report = diagnose_text(alone)   # no rule reads a release mix-up (a solved case may still be shown by likeness)
        assert report.by_likeness or report.top is None or report.top.family != "wheel-platform"


def test_a_hip_runtime_of_another_rocm_major_is_a_build_for_that_rocm():
    top = _top("ROCm 7.1.0 installed, RX 7900 XTX\n"
               '  File "/home/u/venv/lib/python3.12/site-packages/llama_cpp/_ctypes_extensions.py", line 67\n'
               "OSError: libamdhip64.so.6: cannot open shared object file: No such file or directory")
    assert top.family == "rocm-libs-missing" and "llama-cpp-python build made for ROCm 7" in top.fix
    assert "-DGGML_HIP=on" in top.fix


@pytest.mark.parametrize("paste, family, expect", [
    ("koboldcpp_rocm.exe\nError: Could not load hipblas.dll", "rocm-libs-missing", "HIP SDK"),
    ("Windows 11, RX 7900 XTX\nERROR: Could not find a version that satisfies the requirement tensorflow-rocm (from "
     "versions: none)", "wheel-platform", "tensorflow-rocm has ROCm builds for Linux only"),
    ("RuntimeError: Couldn't load custom C++ ops. This can happen if your PyTorch and torchvision versions are "
     "incompatible", "abi-mismatch", "torchvision"),
    ("Windows, RX 6800\nROCMExecutionProvider is not in available provider names", "torch-build",
     "onnxruntime-directml"),
    ('  File "/opt/conda/lib/python3.10/site-packages/apex/__init__.py", line 13\n    import amp_C\n'
     "ModuleNotFoundError: No module named 'amp_C'", "wheel-platform", "rebuild apex"),
    ("RTX 4090\nMissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA op(s)", "rocm-libs-missing",
     "CUDA toolkit"),
])
def test_more_wordings_of_the_install_families_name_the_tools_remedy(paste, family, expect):
    top = _top(paste)
    assert top.family == family and expect in top.fix


@pytest.mark.parametrize("paste, expect", [
    ("flash-attn install fails on Windows 11", "no Windows wheels"),
    ("Can't install vllm on Windows", "no Windows build"),
    ("Cannot install pytorch with ROCm on Windows, RX 7900 XTX", "AMD's ROCm PyTorch wheels for Windows"),
    ("triton not installing on windows", "triton-windows"),
    ("Failed building wheel for xformers on ROCm 6.2", "whl/rocm"),
])
def test_a_package_that_will_not_install_said_in_a_title_gets_its_platform_install(paste, expect):
    top = _top(paste)
    assert top.family == "wheel-platform" and not top.confirmed and expect in top.fix


def test_a_runtime_that_does_not_see_the_gpu_is_its_cpu_build():
    top = _top("jax doesn't see my RX 7900 XTX")
    assert top.family == "torch-build" and not top.confirmed and "jax[rocm7-local]" in top.fix


@pytest.mark.parametrize("paste", [
    "set COMMANDLINE_ARGS=--use-zluda\nRX 6800 XT, Windows 11\nAssertionError: Torch not compiled with CUDA enabled",
    "ZLUDA\nAssertionError: Torch not compiled with CUDA enabled",
])
def test_a_torch_without_cuda_under_zluda_is_the_cuda_build_not_rocm(paste):
    top = _top(paste)
    assert top.family == "torch-build" and "whl/cu118" in top.fix and "rocm" not in top.fix.lower()


def test_an_issue_templates_label_is_no_install_complaint():
    """vLLM's "[Installation]:" template heads reports of a deployment that fails long after the install: with torch's
    own version printed below it, "torch does not install here" was a reading of the label, not of the paste."""
    collect_env = ("[Installation]: Error while serving a 70B model on 8x MI250\nPyTorch version: 2.6.0+rocm6.2.4\n"
                   "ROCM used to build PyTorch: 6.2.41134\nGPU models and configuration: AMD Instinct MI250X (gfx90a)")
    top = diagnose_text(collect_env).top
    assert top is None or "does not install" not in top.title
    # the same label over a real install failure still reads as one
    top = diagnose_text("[Installation]: pip install vllm fails on ROCm 6.2 with an MI250").top
    assert top is not None and top.family == "wheel-platform" and "does not install" in top.title


def test_a_paste_with_no_torch_in_it_gets_no_torch_reading():
    """A HIP sample built from TheRock that finds no device names no torch, Python or torch message: reinstalling torch
    cannot be its fix (round 11's review of rocm-systems#2075, where it stood third)."""
    sample = ("built the HIP samples with TheRock for my Radeon 890M (gfx1150)\n./hipInfo\ncheckHipErrors() HIP API "
              "error = 0100 \"no ROCm-capable device is detected\"\nfrom file hipInfo.cpp, line 197.")
    assert not [d for d in diagnose_text(sample).diagnoses if d.family == "torch-build"]
    # torch's own message on an AMD card still is the torch build, with no word of Python around it
    top = diagnose_text("Radeon RX 6600 on Ubuntu 24.04\nRuntimeError: Found no NVIDIA driver on your system. Please "
                        "check that you have an NVIDIA GPU and installed a driver").top
    assert top is not None and top.family == "torch-build"


@pytest.mark.parametrize("sdk", ["HIP SDK 6.2.4", "HIP SDK ROCm 6.2", "ROCm 6.1", "HIP SDK 5.7", "no SDK named"])
def test_a_zluda_dll_that_does_not_load_gets_one_zluda_reading_whatever_the_sdk_spelling(sdk):
    """The two ZLUDA readings (its build for another SDK, its DLLs off PATH) split on one reader of the SDK release:
    a spelling one of them read and the other did not left the paste with neither."""
    paste = (f"ComfyUI-Zluda on an RX 7800 XT, {sdk}\nOSError: [WinError 126] The specified module could not be found. "
             "Error loading \"C:\\ComfyUI\\venv\\Lib\\site-packages\\torch\\lib\\caffe2_nvrtc.dll\" or one of its "
             "dependencies.")
    top = diagnose_text(paste).top
    assert top is not None and "ZLUDA" in top.title, (sdk, top and top.title)
