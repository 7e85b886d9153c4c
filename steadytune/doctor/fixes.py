"""Fixes written with the machine's own values: the override value for its arch, set where its process starts
(a systemd unit, a container, Windows, a notebook, a shell), the rebuild flags of the tool that failed, the wheel
index that has the arch, the group that owns its device files. The rules (rules.py) decide the cause; this module
only words the fix for that machine, from the tables in hardware/gpu_facts.py.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.facts import FactSheet
from steadytune.hardware.gpu_facts import arch_info, install_lines, normalise_gfx, override_for_arch

# The tools whose own build carries the GPU code (so the fix is their build flag), most specific first. A paste that
# names several (a ComfyUI log shows torch too) is about the most specific one that printed an error.
TOOL_ORDER = ("mlc-llm", "text-embeddings-inference", "ollama", "lmstudio", "koboldcpp", "gpt4all", "llama-cpp-python", "stable-diffusion.cpp", "llama.cpp", "whisper.cpp", "vllm", "sglang", "bitsandbytes",
              "flash-attn", "xformers", "rccl-tests", "rccl", "miopen", "hipblaslt", "rocblas", "migraphx", "onnxruntime",
              "ctranslate2", "tensorflow", "paddle", "tinygrad", "jax", "zluda", "triton", "deepspeed", "apex", "mamba-ssm", "gsplat", "torch-extension", "comfyui", "a1111", "unsloth",
              "llamafactory", "torchaudio", "torch", "torchvision")
INFERENCE_TOOLS = ("ollama", "lmstudio", "koboldcpp", "llama-cpp-python", "llama.cpp", "whisper.cpp", "comfyui", "a1111", "zluda",
                   "onnxruntime", "migraphx", "ctranslate2")


def failing_tool(sheet: FactSheet, line_numbers: tuple[int, ...] = ()) -> Optional[str]:
    """The tool that failed: one named on the error lines, else the most specific tool the text names."""
    near = [f.value for f in sheet.of("tool") if f.line_no in line_numbers]
    for pool in (near, sheet.tools):
        for tool in TOOL_ORDER:
            if tool in pool:
                # ggml's own lines name llama.cpp inside a program that bundles it: the bundle is what gets rebuilt
                wrapper = next((w for w in _BUNDLES_LLAMA_CPP if w in sheet.tools), None)
                return wrapper if tool == "llama.cpp" and wrapper else tool
    return None


# programs that ship their own build of llama.cpp or of ggml (its ggml_* lines appear in their logs)
_BUNDLES_LLAMA_CPP = ("lmstudio", "koboldcpp", "llama-cpp-python", "gpt4all", "stable-diffusion.cpp")


def override_value(arch: str, tool: Optional[str]) -> tuple[Optional[str], str]:
    """(HSA_OVERRIDE_GFX_VERSION value, a caveat) for this arch. A value known to work comes plain; one known to
    misbehave under training ("trap" in the arch table) is offered to inference tools only, with its caveat."""
    row = arch_info(arch)
    if row is None:
        return None, ""
    value = override_for_arch(arch)
    if value:
        return value, ""
    if row.override.verdict == "trap" and row.override.value and tool in INFERENCE_TOOLS:
        return row.override.value, f" (runs {row.override.value} code on {arch}; for training it is not safe: " \
                                   f"{row.override.why})"
    if row.override.verdict == "unverified" and row.override.value and tool in INFERENCE_TOOLS:
        return row.override.value, f" (reported for inference: {row.override.why})"
    return None, ""


def where_process_starts(sheet: FactSheet, tool: Optional[str]) -> str:
    """systemd | container | windows | notebook | shell: where the failing process gets its environment."""
    if sheet.is_windows:
        return "windows"
    if sheet.has("platform", "container") or any(f.detail == "docker" for f in sheet.of("env")):
        return "container"
    if sheet.has("platform", "systemd") or (tool == "ollama" and any(f.detail == "server" for f in sheet.of("env"))):
        return "systemd"
    if sheet.has("platform", "notebook"):
        return "notebook"
    return "shell"


def set_variable(name: str, value: str, sheet: FactSheet, tool: Optional[str]) -> str:
    """How to set NAME=VALUE where the failing process will read it."""
    where = where_process_starts(sheet, tool)
    if where == "systemd":
        unit = "ollama" if tool == "ollama" else "<the service>"
        return (f"sudo systemctl edit {unit}.service and add under [Service]: Environment=\"{name}={value}\"; then "
                f"sudo systemctl daemon-reload && sudo systemctl restart {unit}")
    if where == "container":
        return f"start the container with -e {name}={value} (docker run ... -e {name}={value}; compose: environment:)"
    if where == "windows":
        return (f"setx {name} {value} (a user environment variable), then quit and restart the program (for Ollama: "
                "quit it from the tray) so it reads the new environment")
    if where == "notebook":
        # a notebook or IPython session is often where a program (a web UI, a server) is only being tried out: the
        # program itself, and a kernel started from a shell, read the variable from the shell that starts them
        shell = "" if sheet.has("platform", "colab") or re.search(r"(?i)\bcolab\b", "\n".join(sheet.lines)) else \
            (f"; or set it where the session or the program starts: export {name}={value} in the shell before "
             "jupyter / ipython, or before the program's own start command")
        return (f"os.environ[\"{name}\"] = \"{value}\" in the first cell, before import torch (restart the kernel "
                f"first){shell}")
    if tool == "ollama" and not sheet.is_windows:   # Linux installs run it as the ollama service, not from a shell
        return (f"sudo systemctl edit ollama.service and add under [Service]: Environment=\"{name}={value}\"; then "
                f"sudo systemctl daemon-reload && sudo systemctl restart ollama (a hand-started `ollama serve`: "
                f"export {name}={value} before it)")
    return f"export {name}={value} before the command (or {name}={value} <command>)"


def rebuild_line(tool: Optional[str], arch: str) -> Optional[str]:
    """The build flags that put this arch's code into the tool that lacks it."""
    base = normalise_gfx(arch)
    if base.startswith("sm_"):
        cc = base[3:]
        if tool == "bitsandbytes":
            return f"build bitsandbytes from source: cmake -DCOMPUTE_BACKEND=cuda -DCOMPUTE_CAPABILITY={cc} -S . && make"
        if tool == "llama.cpp":
            return f"rebuild: cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES={cc}"
        return f"rebuild it with TORCH_CUDA_ARCH_LIST={cc[:-1]}.{cc[-1]}"
    if tool in ("llama.cpp", "ollama"):
        return f"rebuild llama.cpp: cmake -B build -DGGML_HIP=ON -DAMDGPU_TARGETS={base} && cmake --build build"
    if tool == "bitsandbytes":
        return (f"pip install -U bitsandbytes (0.49+ wheels carry RDNA and CDNA), or build it: cmake -DCOMPUTE_BACKEND=hip "
                f"-DBNB_ROCM_ARCH={base} -S . && make")
    if tool in ("vllm", "flash-attn", "xformers", "deepspeed"):
        return f"rebuild {tool} for the arch: PYTORCH_ROCM_ARCH={base} pip install --no-build-isolation ."
    if tool == "hipblaslt":
        # round 20 (r20a): hipBLASLt is an optional path of torch's matmuls (rocBLAS / hipBLAS carry more archs):
        # torch's switch is the quick way out (catalogue entries hipblaslt-no-paths, hipblaslt-unsupported-arch;
        # Comfy-Org/ComfyUI#3698 for a gfx906 under ROCm 6.1, where the thread notes torch 2.4 is the first to read it)
        return (f"export TORCH_BLAS_PREFER_HIPBLASLT=0 for the program that calls it (torch then runs its matmuls on "
                f"hipBLAS / rocBLAS, which carry {base}; read from torch 2.4), or a hipblaslt built with "
                f"-DAMDGPU_TARGETS={base} (or the ROCm release whose hipblaslt lists {base})")
    if tool in ("rocblas", "hipblaslt", "miopen", "migraphx"):
        return f"a {tool} built with -DAMDGPU_TARGETS={base} (or the ROCm release whose {tool} lists {base})"
    return None


def wheel_line(arch: str) -> Optional[str]:
    lines = install_lines(arch)
    return lines[0][1] if lines else None


def dotted(cc: int) -> str:
    """A compute capability as NVIDIA writes it, from its number: 75 -> "7.5", 120 -> "12.0"."""
    return f"{cc // 10}.{cc % 10}"


def cuda_wheel_for(arch: str) -> Optional[str]:
    """The pytorch.org CUDA index whose wheels carry this compute capability. From torch 2.8 the cu128/cu129 builds
    list sm_70 to sm_120 only (Maxwell and Pascal left them: pytorch/pytorch#157517, PR #158700's warning), and from
    torch 2.11 cu128 leaves out Volta too (pytorch/pytorch#172352); cu126 keeps sm_50 to sm_90 and is the legacy build
    for all three. CUDA 13 builds start at sm_75. Blackwell needs CUDA 12.8 or newer."""
    m = re.fullmatch(r"sm_(\d+)", arch)
    if not m:
        return None
    cc = int(m.group(1))
    if cc == 110:   # Jetson Thor: sm_110 is a CUDA 13 name; the cu128/cu129 wheels have neither its code nor PTX for it
        return ("pip install torch --index-url https://download.pytorch.org/whl/cu130 (sm_110 exists from CUDA 13 on; "
                "the cu130 aarch64 wheels carry it, cu128 has no sm_110 code)")
    if cc >= 100:
        return "pip install torch --index-url https://download.pytorch.org/whl/cu128 (Blackwell needs CUDA 12.8 or newer)"
    if cc < 50:   # Kepler and older: below cu126's oldest arch (sm_50); CUDA 12 no longer compiles them
        return (f"no current pytorch.org index carries sm_{cc} (the oldest is sm_50): build torch from source with "
                f"CUDA 11.x and TORCH_CUDA_ARCH_LIST={dotted(cc)}, or run on the CPU")
    if cc <= 70:
        old = "Volta" if cc == 70 else "Maxwell and Pascal"
        since = "2.11" if cc == 70 else "2.8"
        return ("pip install torch --index-url https://download.pytorch.org/whl/cu126 (the legacy build that still "
                f"carries sm_{cc}: the cu128 and newer builds left {old} out from torch {since} on)")
    return "pip install torch --index-url https://download.pytorch.org/whl/cu128"


# TheRock's wheel indexes are one per GPU family (rocm.nightlies.amd.com/v2/<family>/), by the gfx name's prefix
_THEROCK_FAMILIES = (("gfx110", "gfx110X-all"), ("gfx120", "gfx120X-all"), ("gfx1151", "gfx1151"),
                     ("gfx1150", "gfx1150"), ("gfx94", "gfx94X-dcgpu"), ("gfx950", "gfx950-dcgpu"),
                     ("gfx103", "gfx103X-dgpu"))


def therock_family(arch: Optional[str]) -> Optional[str]:
    """The GPU family whose TheRock index (rocm.nightlies.amd.com/v2/<family>/) carries this arch, or None."""
    return next((family for prefix, family in _THEROCK_FAMILIES if arch and arch.startswith(prefix)), None)


def rocm_index_for(arch: Optional[str]) -> str:
    """The pip line for a ROCm torch that has this arch (the newest stable index), or the current index."""
    if arch:
        line = wheel_line(arch)
        if line:
            return line
        if re.fullmatch(r"gfx[678][0-9a-f]{2}", normalise_gfx(arch)):
            # GCN 1-4: no ROCm 6 or 7 release, so no ROCm torch wheel, runs on it; the current index would not help
            return (f"no ROCm torch wheel runs on {arch} (GCN, outside ROCm 6 and 7): on Windows use the DirectML "
                    f"backend (pip install torch-directml, or the program's DirectML option); on Linux a torch built "
                    f"from source for {arch} against ROCm 5.7 or older, or a Vulkan backend")
        value = override_for_arch(arch)
        if value:
            return (f"pip install torch --index-url https://download.pytorch.org/whl/rocm7.2, then export "
                    f"HSA_OVERRIDE_GFX_VERSION={value} ({arch} runs its sibling's code)")
    return "pip install torch --index-url https://download.pytorch.org/whl/rocm7.2"


# The ROCm wheel indexes pytorch.org published each torch release on, oldest first (pytorch.org/get-started/previous-
# versions): a pin newer than everything one index lists needs one of these
TORCH_ROCM_INDEXES = {
    (2, 0): ("rocm5.4.2",), (2, 1): ("rocm5.6",), (2, 2): ("rocm5.6", "rocm5.7"), (2, 3): ("rocm5.7", "rocm6.0"),
    (2, 4): ("rocm6.0", "rocm6.1"), (2, 5): ("rocm6.1", "rocm6.2"), (2, 6): ("rocm6.1", "rocm6.2.4"),
    (2, 7): ("rocm6.2.4", "rocm6.3"), (2, 8): ("rocm6.3", "rocm6.4"), (2, 9): ("rocm6.3", "rocm6.4"),
}


def rocm_indexes_for_torch(version: str) -> tuple[str, ...]:
    """The pytorch.org ROCm indexes that carry this torch release ("2.4.1" -> rocm6.0, rocm6.1); () when unknown."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return TORCH_ROCM_INDEXES.get((int(m.group(1)), int(m.group(2))), ()) if m else ()
