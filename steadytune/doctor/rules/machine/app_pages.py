"""Situations the local apps' and servers' own troubleshooting / FAQ / install pages list, told in words rather than in
a message of the program's own (round 17, t17c): an NVIDIA GPU lost after suspend (Ollama's GPU page), SELinux keeping
a container from the GPU devices, LM Studio running a CPU runtime on a machine with a GPU, a ggml app's prebuilt CPU
code on a CPU without AVX2 (koboldcpp's FAQ, llama.cpp's build page), Ollama asked to run on the CPU, vLLM's PyPI
wheel on an AMD machine, and SGLang's long-prompt prefill running out of memory. Each fix uses the machine's values."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (Context, Diagnosis, _CONTAINED, _first, _lines_matching, _make, _text,
                                          _vendor, rule)


# --- an NVIDIA GPU lost after suspend / resume ------------------------------------------------------------------------

# the machine slept: "after suspend", "since it woke from sleep", "suspend/resume", 休眠/睡眠后
_SLEPT = re.compile(r"(?i)\b(?:after|from|since|following|post)\b[^\n]{0,40}\b(?:suspend(?:ing|ed)?|sleep(?:ing)?|"
                    r"hibernat\w*|resum\w*|standby|wak(?:e|es|ing) ?up)\b|\bsuspend ?/ ?resume\b|"
                    r"\bwakes? (?:up )?from (?:sleep|suspend|hibernation)\b|(?:休眠|睡眠|待机)(?:后|之后|唤醒)")
# the job ends or a batch system holds it: not a computer that slept
_JOB_SUSPENDED = re.compile(r"(?i)\bslurm|\bscontrol\b|\bjob (?:was )?suspended|\bsuspended (?:job|process)|"
                            r"time\.sleep|\bsleep \d|kill -(?:STOP|CONT)|SIGSTOP|SIGCONT")
# the GPU is not used or not reachable afterwards
_GPU_GONE = re.compile(r"(?i)\bCPU\b|no compatible GPUs|cuda(?:_| )?(?:error|init)[^\n]{0,40}\b999\b|"
                       r"\bunknown error\b|is_available\(\)[^\n]{0,20}False|\bNo CUDA GPUs\b|"
                       r"(?:can ?not|can't|cannot|doesn't|does not|no longer|won't)\s+(?:find|detect|see|use)\w*\b[^\n]{0,20}\bGPU|"
                       r"\bGPU\b[^\n]{0,30}\b(?:not (?:found|detected|used)|missing|gone|lost)\b")


@rule("driver")
def nvidia_lost_after_suspend(ctx: Context) -> Optional[Diagnosis]:
    """NVIDIA's Linux driver often leaves its unified-memory module (nvidia_uvm) unusable after a suspend / resume:
    CUDA then fails to start (error 999, "unknown error") and Ollama, torch or llama.cpp fall back to the CPU while
    nvidia-smi still lists the card. Ollama's GPU page: reload the module."""
    text = _text(ctx)
    slept = _lines_matching(ctx, _SLEPT)
    if not slept or _JOB_SUSPENDED.search(text) or not _GPU_GONE.search(text) or ctx.sheet.is_windows:
        return None
    if not (any(a.startswith("sm_") for a in ctx.sheet.machine_archs) or re.search(r"(?i)\bnvidia|\bcuda\b", text)):
        return None
    if _vendor(ctx) == "amd" and not any(a.startswith("sm_") for a in ctx.sheet.machine_archs):
        return None
    stop = ("sudo systemctl stop ollama; " if "ollama" in ctx.sheet.tools else "")
    start = ("; sudo systemctl start ollama" if "ollama" in ctx.sheet.tools else "; then start the program again")
    return _first(_make(
        "driver", "the NVIDIA driver's UVM module is unusable after suspend / resume",
        "after the machine resumed from sleep, NVIDIA's nvidia_uvm kernel module is left in a state where CUDA cannot "
        "initialise (cuInit fails with 999, unknown error); the card is still listed (nvidia-smi), but the program "
        "finds no usable GPU and runs on the CPU",
        f"reload the module: {stop}sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm{start} (or reboot); to keep it "
        "from recurring, let the driver save video memory across sleep: echo 'options nvidia "
        "NVreg_PreserveVideoMemoryAllocations=1' | sudo tee /etc/modprobe.d/nvidia-power-management.conf, sudo "
        "systemctl enable nvidia-suspend nvidia-resume nvidia-hibernate, then reboot",
        slept[:1], slept[:1]))


# --- SELinux keeps a container from the GPU devices -------------------------------------------------------------------

_SELINUX = re.compile(r"(?i)\bselinux\b|\bsetenforce\b")
_SELINUX_OFF = re.compile(r"(?i)selinux[^\n]{0,30}\b(?:disabled|permissive|is off|turned off)\b|setenforce 0[^\n]{0,40}"
                          r"\b(?:still|same|doesn't|does not|didn't|no)\b|container_use_devices")
_DENIED = re.compile(r"(?i)permission denied|operation not permitted|avc:\s+denied|no (?:compatible )?GPUs?\b|"
                     r"No HIP GPUs|No CUDA GPUs|no GPU|not (?:detect|find|see)\w*\b[^\n]{0,20}GPU|"
                     r"Failed to initialize NVML|Unable to open /dev/kfd")


@rule("device-access")
def selinux_blocks_container_devices(ctx: Context) -> Optional[Diagnosis]:
    """On Fedora, RHEL and their kin SELinux labels the GPU device nodes so that a container may not open them, even
    when --device passes them in: /dev/kfd or /dev/nvidia* is refused with permission denied. Ollama's GPU page:
    allow containers to use devices."""
    text = _text(ctx)
    said = _lines_matching(ctx, _SELINUX)
    if not said or _SELINUX_OFF.search(text) or not _CONTAINED.search(text) or not _DENIED.search(text):
        return None
    if re.search(r"(?i)\bavc:\s+denied\b", text):
        return None   # the audit log's own denial names the permission and the policy: the access rules read it
    if re.search(r"nvidia-container-cli: (?:initialization|mount) error:", text):
        return None   # the NVIDIA hook's own refusal: its catalogue entry gives the toolkit's relabel / label=disable fix
    amd = _vendor(ctx) == "amd"
    devices = ("--device /dev/kfd --device /dev/dri --group-add video --group-add render" if amd else
               "--gpus all (podman: --device nvidia.com/gpu=all through CDI)")
    return _first(_make(
        "device-access", "SELinux keeps the container from the GPU devices",
        "SELinux is enforcing on the host and its policy denies containers the GPU device nodes (/dev/kfd and "
        "/dev/dri on AMD, /dev/nvidia* on NVIDIA), so the program inside finds no GPU or gets permission denied even "
        "though the devices are passed in",
        "on the host allow containers to use devices: sudo setsebool -P container_use_devices=1 (or start this one "
        f"container with --security-opt label=disable), and keep {devices}; sudo ausearch -m avc -ts recent shows "
        "the denials", said[:1], said[:1]))


# --- LM Studio running a CPU runtime ----------------------------------------------------------------------------------

_CPU_RUNTIME = re.compile(r"(?i)\bCPU (?:llama\.cpp|runtime)\b|\bruntime\b[^\n]{0,20}\bCPU\b|\bllama\.cpp[^\n]{0,10}"
                          r"\(?CPU\)?\b")


@rule("torch-build")
def lmstudio_cpu_runtime(ctx: Context) -> Optional[Diagnosis]:
    """LM Studio runs GGUF models through a llama.cpp runtime it downloads (CPU, CUDA, Vulkan, ROCm); with the CPU
    runtime selected a GPU in the machine is never used. LM Studio's runtimes page: pick the GPU's runtime."""
    # the runtime names as LM Studio lists them: "CUDA 12 llama.cpp (Linux)" (lmstudio-ai/lmstudio-bug-tracker#966),
    # "Vulkan llama.cpp (Windows)" (#1041); Ctrl+Shift+R opens the runtimes page (#1925)
    if "lmstudio" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _CPU_RUNTIME)
    archs = ctx.sheet.machine_archs
    if not said or not archs:
        return None
    arch = archs[0]
    if arch.startswith("sm_"):
        runtime = "the CUDA 12 llama.cpp runtime (CUDA llama.cpp on older drivers)"
    elif arch.startswith("gfx"):
        runtime = (f"the Vulkan llama.cpp runtime (the ROCm llama.cpp runtime where it lists {arch}; the card is "
                   f"{arch})")
    else:
        runtime = "the Vulkan llama.cpp runtime"
    gpu = ctx.sheet.first("gpu")
    name = gpu.value if gpu else arch
    return _first(_make(
        "torch-build", "LM Studio runs its CPU runtime",
        f"LM Studio's selected runtime for GGUF is its CPU build of llama.cpp, which never uses the {name}; the GPU "
        "runtimes are downloaded and selected separately",
        f"open the runtimes page (Ctrl+Shift+R, or Settings > Runtime), download and select {runtime} for GGUF, then "
        "load the model again with GPU offload raised (the model's load settings, GPU Offload to the most layers that "
        "fit)", said[:1], said[:1]))


# --- a ggml app's CPU code on a CPU without AVX2 ----------------------------------------------------------------------

_ILLEGAL = re.compile(r"(?i)\billegal instruction\b|\bSIGILL\b|0xc000001d|exit (?:status|code) 132\b|非法指令|"
                      r"Ungültiger Maschinenbefehl")
_GGML_APPS = ("koboldcpp", "llama.cpp", "llama-cpp-python", "ollama", "lmstudio", "gpt4all", "whisper.cpp")
# the GPU's own fault, not the CPU's: a kernel trap, an override, a HIP / CUDA exception
_GPU_FAULT = re.compile(r"(?i)HSA_OVERRIDE_GFX_VERSION|GPU node|HW Exception|hipError|cudaError|"
                        r"illegal instruction was encountered|illegal memory access")
_NO_AVX = re.compile(r"(?i)\b(?:no|without|lacks?|missing|doesn't (?:have|support)|does not (?:have|support))\b"
                     r"[^\n]{0,20}\bAVX2?\b|\bAVX2?\b[^\n]{0,20}\b(?:not supported|unsupported|missing)\b|"
                     r"\b(?:Xeon (?:E5|E7|X5|L5|W35)|Core 2|Phenom|Pentium|Celeron|Atom|Sandy Bridge|Ivy Bridge|FX-\d{4}|"
                     r"i[357]-[23]\d{3}[a-z]?)\b")


@rule("gpu-unsupported")
def ggml_app_needs_avx2(ctx: Context) -> Optional[Diagnosis]:
    """ggml's prebuilt CPU code (koboldcpp's default build, llama.cpp's release binaries, llama-cpp-python's wheels)
    uses AVX2 / FMA / F16C; on a CPU without them the process dies with Illegal instruction at start, before any GPU
    work. koboldcpp's FAQ: its no-AVX2 mode; llama.cpp's build page: a build without the host's missing extensions."""
    tools = [t for t in ctx.sheet.tools if t in _GGML_APPS]
    said = _lines_matching(ctx, _ILLEGAL)
    text = _text(ctx)
    if not tools or not said or _GPU_FAULT.search(text):
        return None
    tool = tools[0]
    if tool == "koboldcpp":
        fix = ("start koboldcpp in its old-CPU mode: --noavx2 (the launcher's \"Old CPU, No AVX2\" preset), or "
               "--failsafe on a CPU without AVX at all; the GPU still works through --usecublas / --usevulkan")
    elif tool == "llama-cpp-python":
        fix = ("build it for this CPU: CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF\" "
               "pip install --force-reinstall --no-cache-dir llama-cpp-python (add -DGGML_CUDA=on for the GPU)")
    elif tool == "ollama":
        fix = ("update Ollama: current releases choose their CPU code at run time and run on CPUs without AVX2; on an "
               "older release build it from source without the missing extensions")
    else:
        fix = ("build llama.cpp for this CPU: cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF "
               "-DGGML_F16C=OFF (plus -DGGML_CUDA=ON / -DGGML_HIP=ON / -DGGML_VULKAN=ON for the GPU), or "
               "-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON so it picks the CPU code at run time")
    # koboldcpp's own flags (LostRuins/koboldcpp:koboldcpp.py, its argument parser): --noavx2 "Do not use AVX2
    # instructions, a slower compatibility mode for older devices", --failsafe "extremely old CPU compatibility mode
    # that should work on all devices"
    fix += "; grep -o -w 'avx2' /proc/cpuinfo | head -1 prints nothing on such a CPU"
    return _make(
        "gpu-unsupported", f"{tool}'s CPU code needs AVX2 this CPU lacks",
        f"{tool}'s prebuilt CPU code uses AVX2 / FMA / F16C instructions; this CPU does not have them, so the process "
        "is killed with Illegal instruction as it starts, before the GPU is used",
        fix, said[:1], said[:1], confirmed=bool(_NO_AVX.search(text)))


# --- Ollama asked to run on the CPU ------------------------------------------------------------------------------------

_WANT_CPU = re.compile(r"(?i)\b(?:force|make|run|use|keep|want|only)\b[^\n]{0,40}\bCPU\b[^\n]{0,20}(?:only|instead|"
                       r"runner|library|\?)|\b(?:skip|ignore|disable|bypass|without)\b[^\n]{0,15}\b(?:the )?GPU\b|"
                       r"\bCPU[- ]only\b")


@rule("visibility")
def ollama_on_the_cpu(ctx: Context) -> Optional[Diagnosis]:
    """Ollama's troubleshooting and GPU pages: an invalid GPU id hides the GPUs (CUDA_VISIBLE_DEVICES=-1), and
    OLLAMA_LLM_LIBRARY picks a runner library by name on the releases that ship several (cpu_avx2)."""
    if "ollama" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _WANT_CPU)
    if not said:
        return None
    amd = _vendor(ctx) == "amd"
    hide = "ROCR_VISIBLE_DEVICES=-1" if amd else "CUDA_VISIBLE_DEVICES=-1"
    service = ("sudo systemctl edit ollama.service, under [Service] Environment=\"%s\", then sudo systemctl "
               "daemon-reload && sudo systemctl restart ollama" % hide)
    return _make(
        "visibility", "Ollama asked to run on the CPU",
        "Ollama loads onto every GPU it discovers; it runs on the CPU when the server sees no GPU, or when it is told "
        "which runner library to use",
        f"hide the GPUs from the server with an invalid id: {hide} ollama serve (for the service: {service}; Vulkan "
        "GPUs: GGML_VK_VISIBLE_DEVICES=-1); on releases that ship several runner libraries pick the CPU one: "
        "OLLAMA_LLM_LIBRARY=\"cpu_avx2\" ollama serve; for one model only: /set parameter num_gpu 0 (or "
        "\"options\": {\"num_gpu\": 0} in the API)", said[:1], said[:1], confirmed=False)


# --- vLLM's PyPI wheel on an AMD machine --------------------------------------------------------------------------------

# (an index or a wheel named for ROCm, or a source checkout, is AMD's own build)
_PIP_VLLM = re.compile(r"(?i)\b(?:uv )?pip3? install\b[^\n]*\bvllm\b(?![^\n]*(?:/rocm|\+rocm|-rocm|--no-build-isolation|"
                       r"-e \.))")
_CUDA_ON_AMD = re.compile(r"(?i)libcuda\.so|Failed to infer device type|No CUDA GPUs|NVIDIA driver|nvidia-smi|"
                          r"libcudart|CUDA driver|torch\.cuda\.is_available\(\)[^\n]{0,20}False|\+cu1\d\d")


@rule("torch-build")
def vllm_pypi_wheel_on_amd(ctx: Context) -> Optional[Diagnosis]:
    """vLLM's install page: the wheels on PyPI are built for CUDA (and pull a CUDA torch); on ROCm vLLM comes from
    AMD's docker image or a build from source against a ROCm torch."""
    if "vllm" not in ctx.sheet.tools or _vendor(ctx) != "amd":
        return None
    if any(a.startswith("sm_") for a in ctx.sheet.machine_archs):
        return None
    said = _lines_matching(ctx, _PIP_VLLM)
    symptom = _lines_matching(ctx, _CUDA_ON_AMD)
    if not said or not symptom:
        return None
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    arch = archs[0] if archs else "<gfx arch from rocminfo>"
    return _first(_make(
        "torch-build", "vLLM's PyPI wheel is a CUDA build, on an AMD GPU",
        "pip install vllm takes the wheel from PyPI, which is built for CUDA and brings a CUDA torch; on a ROCm machine "
        "it finds no NVIDIA driver (libcuda.so, no CUDA GPUs, no device type)",
        "use AMD's build: docker pull rocm/vllm:latest and run it with --device /dev/kfd --device /dev/dri "
        "--group-add video --ipc=host --shm-size 16G; or build vLLM from source against a ROCm torch in a fresh "
        "environment: pip install torch --index-url https://download.pytorch.org/whl/rocm6.4, then in the vllm "
        f"checkout pip install -r requirements/rocm.txt and PYTORCH_ROCM_ARCH={arch} python setup.py develop",
        said[:1] + symptom[:1], said[:1] + symptom[:1]))


# --- SGLang's prefill of long prompts out of memory -------------------------------------------------------------------

_OOM = re.compile(r"(?i)out of memory|OutOfMemoryError|\bOOM\b")
_PREFILL = re.compile(r"(?i)\bprefill\b|forward_extend|\bextend\b|long (?:prompts?|inputs?|context)|"
                      r"\b\d+k[- ]tokens?\b|\b\d{5,} tokens\b")
_GRAPH_CAPTURE = re.compile(r"(?i)capture cuda graph|cuda graph capture|cuda-graph-max-bs")


@rule("out-of-memory")
def sglang_prefill_oom(ctx: Context) -> Optional[Diagnosis]:
    """SGLang's troubleshooting page: out of memory during prefill -> a smaller --chunked-prefill-size, so a long
    prompt is prefilled in pieces."""
    # the defaults, corrected in round 18 (sgl-project/sglang python/sglang/srt/server_args.py, chunked prefill size by
    # GPU memory: under 35 GB 2048, under 160 GB 8192, else 16384; 4096 when the memory is unknown)
    text = _text(ctx)
    if "sglang" not in ctx.sheet.tools or _GRAPH_CAPTURE.search(text):
        return None
    oom = _lines_matching(ctx, _OOM)
    if not oom or not _PREFILL.search(text):
        return None
    return _first(_make(
        "out-of-memory", "SGLang ran out of memory prefilling long prompts",
        "a long prompt is prefilled in chunks of --chunked-prefill-size tokens (by default 2048 on GPUs under 35 GB, "
        "8192 on A100 / H100 / H200-class ones, 16384 above; -1 turns chunking off); one chunk's activations did not "
        "fit beside the weights and the KV cache",
        "start the server with a --chunked-prefill-size below its default (4096 on an A100 / H100-class GPU, 1024 on "
        "one under 35 GB, where the default is already 2048), and if it still runs out lower --mem-fraction-static "
        "(0.8, 0.7) or --max-running-requests",
        oom[:1], oom[:1]))


# --- vLLM's compiled ops after another torch was installed over its own -----------------------------------------------

_VLLM_SYMBOL = re.compile(r"(?i)vllm[^\n]{0,80}undefined symbol|undefined symbol[^\n]{0,200}vllm")
_TORCH_SWAPPED = re.compile(r"(?i)\bpip3? install\b[^\n]*\btorch(?:==|>=|\s+-U|\s+--upgrade|\s*$|\s+--index-url)|"
                            r"\b(?:upgraded|updated|downgraded|installed|reinstalled)\b[^\n]{0,20}\btorch\b")
_VLLM_VERSION = re.compile(r"(?i)\bvllm(?:==| |-)v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)\b")


@rule("abi-mismatch")
def vllm_ops_after_torch_swap(ctx: Context) -> Optional[Diagnosis]:
    """vLLM's install page: its wheels are compiled against one torch release; a different torch installed over it
    (for another package) leaves vllm/_C with symbols the new libtorch lacks. A fresh environment, or a build of
    vLLM against the torch that must stay (use_existing_torch.py)."""
    if "vllm" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _VLLM_SYMBOL)
    text = _text(ctx)
    if not said or not _TORCH_SWAPPED.search(text):
        return None
    version = _VLLM_VERSION.search(text)
    pin = f"vllm=={version.group(1)}" if version else "vllm"
    return _first(_make(
        "abi-mismatch", "vLLM's compiled ops were built for another torch",
        "vLLM's wheel is compiled against one torch release, which pip installs with it; a torch installed afterwards "
        "(for another package) replaced it, and vllm/_C now calls libtorch symbols the new torch does not have",
        f"give vLLM back its own torch in a fresh environment: python -m venv vllm-env && . vllm-env/bin/activate && "
        f"pip install {pin} (it pulls the torch it was built for; pip show vllm lists the pin), and keep the package "
        "that wants another torch in an environment of its own; or build vLLM against the torch that must stay: in a "
        "vllm checkout python use_existing_torch.py, pip install -r requirements/build.txt, pip install "
        "--no-build-isolation -e .", said[:1], said[:1]))


# --- vLLM's Triton flash attention on a ROCm GPU ----------------------------------------------------------------------

_TRITON_FAIL = re.compile(r"(?i)triton\.runtime\.errors|OutOfResources: out of resource|triton[^\n]{0,60}"
                          r"(?:compil\w+ (?:error|fail\w*)|stack frame)|_attn_fwd|triton_flash_attention")


@rule("attention")
def vllm_rocm_triton_attention(ctx: Context) -> Optional[Diagnosis]:
    """vLLM's ROCm install page: where its Triton flash-attention kernel fails on the GPU (Radeon cards' smaller
    shared memory, a compile failure), VLLM_USE_TRITON_FLASH_ATTN=0 turns to its CK / naive attention."""
    # VLLM_USE_TRITON_FLASH_ATTN=0 as AMD's MI300X workload guide exports it ("vLLM performance settings") and ROCm
    # benchmark scripts set it ("## Use CK backend."); later vLLM builds warn it is an unknown variable and choose the
    # backend with VLLM_ATTENTION_BACKEND, as the fix says
    if "vllm" not in ctx.sheet.tools or _vendor(ctx) != "amd":
        return None
    if ctx.sheet.env_value("VLLM_USE_TRITON_FLASH_ATTN") == "0":
        return None
    said = _lines_matching(ctx, _TRITON_FAIL)
    if not said:
        return None
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    on = f" on {archs[0]}" if archs else ""
    return _first(_make(
        "attention", f"vLLM's Triton flash attention fails{on}",
        f"vLLM on ROCm runs attention through a Triton flash-attention kernel by default; it does not fit or compile"
        f"{on} (Radeon GPUs have less shared memory per workgroup than the Instinct parts it is tuned for)",
        "export VLLM_USE_TRITON_FLASH_ATTN=0 before starting vLLM (it then uses the CK flash attention or the naive "
        "path); on releases without that variable choose another backend with VLLM_ATTENTION_BACKEND",
        said[:1], said[:1]))


# --- Ollama limited to some of several GPUs ----------------------------------------------------------------------------

# "use only the 4090", "only one GPU", "limit ollama to GPU 1", "just the second card"
# "use only the 4090", "only one GPU", "limit ollama to GPU 1", "just the second card" (a card or a count, never a
# bare "only use GPU", which asks for the GPU instead of the CPU)
_SOME = (r"(?:(?:one|a single|the (?:first|second|third|fourth|last)) (?:GPU|card)|(?:GPU|card|device) ?#?\d\b|"
         r"(?:the |my )?(?:[GR]TX ?)?\d{4}\b|RX ?\d{3,4}\b|A\d{3,4}\b)")
_ONLY_SOME = re.compile(r"(?i)\b(?:only|just)\s+(?:use\s+|run\s+on\s+|on\s+|load\s+onto\s+)?(?:the\s+|my\s+)?" + _SOME +
                        r"|\b(?:limit|restrict|pin)\w*\b[^\n]{0,25}\bto\s+(?:the\s+|my\s+)?" + _SOME +
                        r"|\b(?:use|run on|load onto)\b[^\n]{0,20}\bonly\s+(?:the\s+|my\s+)?" + _SOME)
# the opposite wish: the model spread over both / all GPUs (OLLAMA_SCHED_SPREAD's reading)
_SPREAD = re.compile(r"(?i)\b(?:use|on|across|over) (?:both|all)\b|\bspread\b|\bsplit\b[^\n]{0,20}\bGPUs\b")
_UUID_LINE = re.compile(r"GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)")


@rule("visibility")
def ollama_on_some_gpus(ctx: Context) -> Optional[Diagnosis]:
    """Ollama's GPU page: to keep the server to some of several GPUs, CUDA_VISIBLE_DEVICES (NVIDIA) or
    ROCR_VISIBLE_DEVICES (AMD) in the server's environment; UUIDs are steadier than numbers, whose order may vary."""
    if "ollama" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _ONLY_SOME)
    text = _text(ctx)
    several = len(ctx.sheet.of("gpu")) >= 2 or _UUID_LINE.search(text) or re.search(
        r"(?i)\b(?:[2-8]|two|three|four) ?x? ?(?:GPUs|cards)\b|\b[2-8]x ", text)
    if not said or not several or _SPREAD.search(text):
        return None
    amd = _vendor(ctx) == "amd" and not any(a.startswith("sm_") for a in ctx.sheet.machine_archs)
    name = "ROCR_VISIBLE_DEVICES" if amd else "CUDA_VISIBLE_DEVICES"
    value = "<the GPU's UUID from rocminfo, or its index>" if amd else "<the GPU's UUID from nvidia-smi -L>"
    # the card the user named, found in nvidia-smi -L's listing: its UUID
    wanted = re.search(r"(?i)\b((?:[GR]TX ?)?\d{4}(?: Ti| SUPER)?|A\d{3,4})\b", said[0].line)
    for _index, card, uuid in _UUID_LINE.findall(text):
        if wanted and wanted.group(1).replace(" ", "").lower() in card.replace(" ", "").lower():
            value = uuid
            break
    return _first(_make(
        "visibility", "Ollama asked to use only some of the GPUs",
        "the Ollama server uses every GPU it discovers; which ones it may see is set in the server's own environment, "
        "not the client's",
        f"set {name}={value} for the server: sudo systemctl edit ollama.service, under [Service] "
        f"Environment=\"{name}={value}\", then sudo systemctl daemon-reload && sudo systemctl restart ollama (a "
        f"hand-started server: {name}={value} ollama serve; Windows: a user variable, then restart Ollama from the "
        "tray); UUIDs are steadier than numeric ids, whose order may vary", said[:1], said[:1]))
