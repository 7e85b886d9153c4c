"""doctor, round 6 (issue 63): readings of the arch families that carry to pastes never seen. Each test is a reading,
tried over several wordings, GPUs and tools written here (none is a mined case): a compiled extension or tool built
without the GPU's arch gets that tool's own remedy (doctor/arch_builds.yaml), a thin paste naming a card outside the
wheels plus a failure word gets the override, a variable lost on its way (sudo, a container) is named as lost."""

from __future__ import annotations

import re

import pytest

from steadytune.doctor.archs import ArchBuildsError, build_fix, tool_builds
from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.facts import extract_facts
from steadytune.doctor.fixes import TOOL_ORDER


def _top(text: str):
    top = diagnose_text(text).top
    assert top is not None, f"no diagnosis for:\n{text}"
    return top


# --- the tool table -------------------------------------------------------------------------------------------

def test_every_tool_in_the_table_is_one_facts_can_name_and_every_remedy_formats():
    for tool, build in tool_builds().items():
        assert tool in TOOL_ORDER, f"{tool}: facts.py / fixes.TOOL_ORDER never name it, so its entry is dead"
        assert build.cuda or build.rocm or build.windows
        for arch in ("sm_120", "sm_61", "gfx1032", "gfx942"):
            fix = build_fix(tool, arch)
            if fix:
                assert "{" not in fix and (arch[3:] in fix or arch in fix or "." in fix), (tool, arch, fix)


def test_a_malformed_table_is_refused_naming_the_tool(tmp_path, monkeypatch):
    import steadytune.doctor.archs as archs
    bad = tmp_path / "arch_builds.yaml"
    bad.write_text("llama.cpp:\n  name: llama.cpp\n  source: docs\n  rocm: \"cmake -DAMDGPU_TARGETS={gfx}\"\n")
    monkeypatch.setattr(archs, "BUILDS", bad)
    archs.tool_builds.cache_clear()
    try:
        with pytest.raises(ArchBuildsError, match=r"llama\.cpp\.rocm: unknown placeholder"):
            archs.tool_builds()
    finally:
        archs.tool_builds.cache_clear()


# --- a tool built without the arch gets its own remedy ----------------------------------------------------------

_TOOL_PASTES = [
    # (paste, the tool's own word or flag the fix must carry)
    ("NVIDIA GeForce RTX 5090, torch 2.8.0+cu128\nimport flash_attn\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "FLASH_ATTN_CUDA_ARCHS=120"),
    ("faster-whisper large-v3 on a GTX 960\nRuntimeError: CUDA failed with error no kernel image is available for "
     "execution on the device", "CUDA_ARCH_LIST=5.2"),
    ("onnxruntime-gpu 1.17, RTX 5080\n2025-01-01 [E:onnxruntime:Default] CUDA failure 209: no kernel image is available "
     "for execution on the device", "onnxruntime-gpu"),
    ("2025-03-02 I tensorflow/core: TensorFlow was not built with CUDA kernel binaries compatible with compute "
     "capability 12.0. CUDA kernels will be jit-compiled from PTX, which could take 30 minutes or longer.",
     "TF_CUDA_COMPUTE_CAPABILITIES=12.0"),
    ("C:\\ComfyUI-Zluda> comfyui-n.bat\nZLUDA on an RX 6600, Windows 11\nhipErrorNoBinaryForGpu: Unable to find code "
     "object for all current devices!", "ZLUDA"),
    ("llama_cpp python bindings, RX 6600 XT\nggml_cuda_compute_forward: ROCm error: invalid device function\n"
     "  in llama_cpp/lib/libggml-hip.so", "CMAKE_ARGS=\"-DGGML_HIP=on -DAMDGPU_TARGETS=gfx1032\""),
    ("koboldcpp hipBLAS build, Radeon RX 6750 XT\nROCm error: invalid device function", "koboldcpp"),
    ("jaxlib 0.4.35 rocm plugin on an RX 7600\nhipErrorNoBinaryForGpu: Unable to find code object for all current "
     "devices", "--rocm_amdgpu_targets=gfx1102"),
    ("triton, RTX 5070 Ti\nptxas fatal   : Value 'sm_120' is not defined for option 'gpu-name'", "Triton"),
    ("deepspeed fused_adam on RTX 4060\nRuntimeError: CUDA error: no kernel image is available for execution on the "
     "device", "DS_BUILD_OPS"),
]


@pytest.mark.parametrize("paste,said", _TOOL_PASTES, ids=[s for _, s in _TOOL_PASTES])
def test_a_tool_without_the_arch_gets_that_tools_own_remedy(paste, said):
    top = _top(paste)
    assert top.family == "arch-missing", (top.family, top.fix)
    assert said.lower() in top.fix.lower(), top.fix


def test_an_app_on_a_torch_that_lacks_the_gpu_gets_torchs_index_not_a_rebuild():
    top = _top("RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
               "NVIDIA GeForce RTX 5060 Ti, torch 2.5.1+cu124, ComfyUI portable")
    assert top.family == "arch-missing" and "cu128" in top.fix


# --- thin pastes: a card and a failure word --------------------------------------------------------------------

@pytest.mark.parametrize("paste,value", [
    ("RX 6600 segfault with rocm", "10.3.0"),
    ("Radeon RX 6750 XT: stable diffusion seg faults on first image", "10.3.0"),
    ("Ollama doesn't use my 780M, runs on CPU", "11.0.0"),
    ("the 680M iGPU crashes in torch", "10.3.0"),
    ("rx 6700 crashed when generating with ROCm 6.1", "10.3.0"),
])
def test_a_thin_paste_naming_a_card_outside_the_wheels_gets_its_override(paste, value):
    top = _top(paste)
    assert top.family == "arch-missing" and f"HSA_OVERRIDE_GFX_VERSION={value}" in top.fix, (top.family, top.fix)


@pytest.mark.parametrize("text", ["This module may crash with NumPy 2", "BART-large has 780M parameters",
                                  "the model 680M params runs fine"])
def test_a_warning_or_a_parameter_count_is_not_a_crash_or_a_gpu(text):
    sheet = extract_facts(text)
    assert not sheet.of("gpu") and not sheet.has("complaint", "yes"), sheet.facts


@pytest.mark.parametrize("name,arch", [
    ("GTX 760", "sm_30"), ("GTX 750 Ti", "sm_50"), ("MX150", "sm_61"), ("MX450", "sm_75"), ("Quadro RTX 4000", "sm_75"),
    ("Quadro P1000", "sm_61"), ("A10G", "sm_86"), ("L40S", "sm_89"), ("DGX Spark", "sm_121"), ("R9 390", "gfx702"),
    ("Radeon 890M", "gfx1150"), ("my 8060S", "gfx1151"),
])
def test_a_card_named_alone_reads_as_its_arch(name, arch):
    sheet = extract_facts(f"{name} is not working")
    assert [f.detail for f in sheet.of("gpu")] == [arch], sheet.facts


def test_a_kepler_gpu_under_torch_is_outside_every_current_build_not_a_cu126_index():
    top = _top("GeForce GTX 770, torch 2.3.1\nRuntimeError: CUDA error: no kernel image is available for execution on "
               "the device")
    # every CUDA toolkit from 11.0 on leaves sm_30 out (CUDA 11.0 release notes), so no torch build of today can be made
    # for it: the CPU or a newer card (an earlier reading offered a CUDA 11 source build, which cannot target it)
    assert top.family == "gpu-unsupported" and "sm_30" in top.fix and "CPU" in top.fix and "cu126" not in top.fix


# --- a variable that never reached the process -----------------------------------------------------------------

@pytest.mark.parametrize("run", ["sudo python train.py", "$ sudo ./webui.sh --listen", "sudo -H python3 app.py"])
def test_a_variable_exported_then_dropped_by_sudo(run):
    top = _top(f"export HSA_OVERRIDE_GFX_VERSION=10.3.0\n{run}\nRX 6600 XT\n"
               "RuntimeError: HIP error: invalid device function")
    assert top.family == "env-not-applied" and "sudo HSA_OVERRIDE_GFX_VERSION=10.3.0" in top.fix, top.fix


def test_sudo_that_keeps_the_environment_or_sets_the_variable_is_not_blamed():
    for run in ("sudo -E python train.py", "sudo HSA_OVERRIDE_GFX_VERSION=10.3.0 python train.py"):
        top = _top(f"export HSA_OVERRIDE_GFX_VERSION=10.3.0\n{run}\nRX 6600 XT\n"
                   "RuntimeError: HIP error: invalid device function")
        assert top.family != "env-not-applied", (run, top.title)


@pytest.mark.parametrize("start", ["docker run -it --device=/dev/kfd --device=/dev/dri rocm/pytorch:latest",
                                   "podman run --rm -it --device /dev/kfd --device /dev/dri ollama/ollama:rocm"])
def test_a_variable_exported_on_the_host_but_not_given_to_the_container(start):
    top = _top(f"export HSA_OVERRIDE_GFX_VERSION=10.3.0\n{start}\nRadeon RX 6700 XT\n"
               "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!")
    assert top.family == "env-not-applied" and re.search(r"-e HSA_OVERRIDE_GFX_VERSION=10\.3\.0", top.fix), top.fix


# --- a GPU below a tool's floor, an override the runtime cannot read -------------------------------------------

@pytest.mark.parametrize("card,cc", [("NVIDIA GeForce GTX 1080 Ti", "6.1"), ("Tesla P100-PCIE-16GB", "6.0")])
def test_triton_refusing_an_old_gpu_means_running_without_torch_compile(card, cc):
    top = _top(f"RuntimeError: Found {card} which is too old to be supported by the triton GPU compiler, which is used "
               f"as the backend. Triton only supports devices of CUDA Capability >= 7.0, but your device is of CUDA "
               f"capability {cc}")
    assert top.family == "gpu-unsupported" and "torch.compile" in top.fix, (top.family, top.fix)


@pytest.mark.parametrize("line", ['level=WARN source=amd_linux.go:273 msg="amdgpu too old gfx803" gpu=0',
                                  'time=2024-05-01 level=WARN msg="amdgpu too old gfx701" gpu=1'])
def test_ollama_skipping_an_amd_gpu_as_too_old_is_outside_rocm_not_an_nvidia_floor(line):
    top = _top(line)
    assert top.family == "gpu-unsupported" and "Vulkan" in top.fix, (top.family, top.fix)


@pytest.mark.parametrize("setting,card,value", [
    ("export HSA_OVERRIDE_GFX_VERSION=gfx1030", "RX 6700 XT", "10.3.0"),
    ("HSA_OVERRIDE_GFX_VERSION=10.3 ollama serve", "RX 6600 XT", "10.3.0"),
    ("export HSA_OVERRIDE_GFX_VERSION=gfx1100", "Radeon 780M", "11.0.0"),
])
def test_an_override_that_is_not_a_version_gets_the_version_for_the_card(setting, card, value):
    top = _top(f"{setting}\n{card}\nhipErrorNoBinaryForGpu: Unable to find code object for all current devices!")
    assert top.family == "override-wrong" and f"HSA_OVERRIDE_GFX_VERSION={value}" in top.fix, (top.family, top.fix)


def test_on_windows_an_override_that_changes_nothing_is_not_read_as_the_right_override():
    top = _top("set HSA_OVERRIDE_GFX_VERSION=10.3.0\nWindows 11, RX 6600, ComfyUI\n"
               "RuntimeError: HIP error: invalid device function")
    assert top.family == "arch-missing" and "rocblas" in top.fix.lower(), top.fix


@pytest.mark.parametrize("paste", ["RTX 5090 not working with pytorch", "my RTX 5070 Ti doesn't work in ComfyUI",
                                   "Can't get torch to use the RTX PRO 6000"])
def test_a_thin_blackwell_complaint_gets_the_cuda_12_8_index_as_the_likely_cause(paste):
    top = _top(paste)
    assert top.family == "arch-missing" and not top.confirmed and "cu128" in top.fix, (top.family, top.fix)


@pytest.mark.parametrize("paste,value", [
    ("Transcription error with faster-whisper\nRadeon RX 6750 XT, ROCm 6.1", "10.3.0"),
    ("Image generation fails\nAMD Radeon RX 6600, Ubuntu 24.04", "10.3.0"),
    ("Model won't load on my Radeon 860M (llama.cpp HIP build)", "11.5.0"),
])
def test_a_title_and_a_card_with_a_failure_word_get_the_cards_override_as_likely(paste, value):
    top = _top(paste)
    assert top.family == "arch-missing" and not top.confirmed and f"HSA_OVERRIDE_GFX_VERSION={value}" in top.fix, \
        (top.family, top.fix)


def test_a_hang_that_names_the_firmware_scheduler_is_not_settled_as_missing_code():
    top = _top("Strix Point GPU hang (gfx1150) Ryzen AI 9 HX 370 (MES:0x7b) after linux-firmware update")
    assert top.family == "gpu-hang", (top.family, top.fix)


@pytest.mark.parametrize("paste", [
    'level=INFO source=amd_linux.go msg="no compatible amdgpu devices detected"\nRX 6600 XT',
    'time=2025-02-01 level=INFO source=gpu.go:386 msg="no compatible GPUs were discovered"\nollama 0.5.7, Radeon RX 6750 XT',
])
def test_ollama_rejecting_every_amd_gpu_at_info_level_is_the_cards_missing_code(paste):
    top = _top(paste)
    assert top.family == "arch-missing" and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in top.fix \
        and "systemctl edit ollama.service" in top.fix, (top.family, top.fix)


def test_lm_studio_on_a_card_its_rocm_runtime_lacks_gets_its_vulkan_runtime():
    top = _top("LM Studio 0.3.9, ROCm llama.cpp runtime\nRadeon RX 6700 XT\nFailed to load model: ROCm error: "
               "invalid device function")
    assert top.family == "arch-missing" and "Vulkan llama.cpp runtime" in top.fix, (top.family, top.fix)


@pytest.mark.parametrize("paste", ["RX 6600 跑 ComfyUI 段错误", "RX 6700 XT: Speicherzugriffsfehler (Speicherabzug geschrieben)",
                                   "Radeon RX 6650 XT, stable diffusion : Erreur de segmentation (core dumped)",
                                   "RX 6650 XT 运行 Stable Diffusion 报错"])
def test_a_crash_or_failure_said_in_another_language_reads_the_same(paste):
    top = _top(paste)
    assert top.family == "arch-missing" and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in top.fix, (top.family, top.fix)


# how each tool in the table shows itself in a paste (its import, its command, its log)
_TOOL_WORDS = {"xformers": "xformers 0.0.28", "gsplat": "import gsplat", "flash-attn": "import flash_attn", "bitsandbytes": "bitsandbytes 0.45.0",
               "llama.cpp": "llama-server -m model.gguf", "llama-cpp-python": "from llama_cpp import Llama",
               "koboldcpp": "koboldcpp 1.80", "lmstudio": "LM Studio 0.3.9", "ollama": "ollama 0.5.7",
               "vllm": "vllm serve model", "sglang": "python -m sglang.launch_server", "deepspeed": "deepspeed fused_adam",
               "apex": "from apex import amp", "ctranslate2": "faster-whisper large-v3", "onnxruntime": "onnxruntime-gpu 1.20",
               "tensorflow": "tensorflow 2.17", "jax": "jaxlib 0.4.35", "zluda": "ZLUDA 3.8", "triton": "triton 3.1",
               "whisper.cpp": "whisper-cli -m ggml-base.bin", "torchvision": "torchvision 0.19.0+cu121",
               "mamba-ssm": "from mamba_ssm import Mamba", "gpt4all": "GPT4All 3.10", "mlc-llm": "mlc_llm chat Llama-3-8B-q4f16_1-MLC",
               "torch-extension": "Loading extension module fused from /home/me/.cache/torch_extensions/py311_cu121/fused/",
               "text-embeddings-inference": "docker run ghcr.io/huggingface/text-embeddings-inference:1.5",
               "stable-diffusion.cpp": "[INFO ] stable-diffusion.cpp:185  - loading model from sd_xl.safetensors"}
_CARDS = {"sm_120": ("NVIDIA GeForce RTX 5090, torch 2.8.0+cu128", "CUDA error: no kernel image is available for execution "
                     "on the device"),
          "sm_61": ("NVIDIA GeForce GTX 1080", "CUDA error: no kernel image is available for execution on the device"),
          "gfx1032": ("AMD Radeon RX 6600", "RuntimeError: HIP error: invalid device function"),
          "gfx1010": ("AMD Radeon RX 5700 XT", "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!")}


def test_every_tool_in_the_table_is_named_in_its_fix_on_every_kind_of_gpu():
    assert set(_TOOL_WORDS) == set(tool_builds())
    misses = []
    for tool, word in _TOOL_WORDS.items():
        for arch, (card, error) in _CARDS.items():
            if not build_fix(tool, arch):
                continue
            top = diagnose_text(f"{word}\n{card}\n{error}").top
            # the tool's name (the override fix says "give NAME code for ...") or its own remedy from the table
            said = top.fix.lower() if top else ""
            if top is None or top.family != "arch-missing" or not (
                    tool_builds()[tool].name.lower() in said or build_fix(tool, arch)[:60].lower() in said):
                misses.append(f"{tool} on {arch}: {top.family if top else None}: {top.fix[:120] if top else ''}")
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("setting", ["      HSA_OVERRIDE_GFX_VERSION: 10.3.0", "      - HSA_OVERRIDE_GFX_VERSION=10.3.0",
                                     "docker run -d --device /dev/kfd -e HSA_OVERRIDE_GFX_VERSION=10.3.0 ollama/ollama:rocm"])
def test_an_override_in_the_containers_settings_that_ollama_never_saw_means_recreating_it(setting):
    top = _top(f"services:\n  ollama:\n    image: ollama/ollama:rocm\n    environment:\n{setting}\nRX 6700 XT\n"
               'level=WARN source=amd_linux.go msg="amdgpu is not supported" gpu=0 gpu_type=gfx1031')
    assert top.family == "env-not-applied" and "--force-recreate" in top.fix, (top.family, top.fix)


def test_a_bullet_in_prose_is_not_a_compose_setting():
    sheet = extract_facts("I tried:\n- HSA_OVERRIDE_GFX_VERSION=10.3.0 didn't help")
    assert [f.detail for f in sheet.of("env")] != ["docker"], sheet.of("env")


_INIT = ("UserWarning: HIP initialization: Unexpected error from hipGetDeviceCount(). Did you run some cuda functions "
         "before calling NumHipDevices() that might have already set an error? Error 101: hipErrorInvalidDevice")


@pytest.mark.parametrize("card,arch", [("AMD Radeon RX 9070 XT", "gfx1201"), ("Radeon RX 7800 XT", "gfx1101")])
def test_hip_failing_to_count_the_gpus_on_a_named_card_is_a_runtime_older_than_its_arch(card, arch):
    top = _top(f">>> torch.cuda.is_available()\n{_INIT}\nFalse\nrocm/pytorch image from last year on a {card}")
    assert top.family == "arch-missing" and arch in top.fix, (top.family, top.fix)


def test_with_a_visibility_variable_set_the_init_failure_is_not_read_as_an_old_runtime():
    top = _top(f"export HIP_VISIBLE_DEVICES=2\n{_INIT}\nRadeon RX 7800 XT")
    assert top.family != "arch-missing" or "predates" not in top.title, top.title


@pytest.mark.parametrize("text", ["VGA compatible controller: AMD/ATI Barcelo (rev c1)", "My CPU is an AMD Ryzen 5825U",
                                  "AMD Ryzen 5 7530U with Radeon Graphics", "Lucienne iGPU"])
def test_vega_apus_named_by_code_name_or_cpu_are_gfx90c(text):
    assert [f.detail for f in extract_facts(text).of("gpu")] == ["gfx90c"]


@pytest.mark.parametrize("paste", [
    'Windows 11, ollama 0.6.2\ntime=2025-03-01 level=WARN source=amd_windows.go:138 msg="amdgpu is not supported '
    '(supported types:[])" gpu_type=gfx1032',
    "ollama app.exe on win11, RX 6700 XT: newer version no longer uses my GPU\nI set HSA_OVERRIDE_GFX_VERSION=10.3.0 in "
    "the system environment variables",
])
def test_a_windows_ollama_that_rejects_the_gpu_with_an_override_left_in_the_environment(paste):
    top = _top(paste)
    assert top.family == "override-wrong" and "remove HSA_OVERRIDE_GFX_VERSION" in top.fix, (top.family, top.fix)


def test_on_linux_the_same_refusal_is_not_read_as_a_windows_leftover():
    top = _top('level=WARN source=amd_linux.go msg="amdgpu is not supported" gpu=0 gpu_type=gfx1032\nRX 6600')
    assert "Windows" not in top.title, top.title


@pytest.mark.parametrize("paste", ["Ollama not detecting my Radeon VII (gfx906) after the update",
                                   "koboldcpp ROCm build doesn't use the MI50, falls back to CPU"])
def test_an_inference_app_missing_a_gpu_that_rocm_dropped_gets_its_vulkan_backend(paste):
    top = _top(paste)
    assert top.family == "gpu-unsupported" and "Vulkan" in top.fix, (top.family, top.fix)


def test_an_old_gcn_card_under_zluda_is_outside_zlud_as_rdna_floor_before_its_missing_dlls():
    top = _top("ZLUDA on Windows 10 with an RX 570 4GB\nhipErrorNoBinaryForGpu\namdhip64_6.dll not found")
    assert top.family == "gpu-unsupported" and "RDNA" in top.fix, (top.family, top.fix)
