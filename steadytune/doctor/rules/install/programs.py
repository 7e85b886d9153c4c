"""One program's own words about its install: AutoGPTQ's kernels, hipcc left out, cuBLASLt that does not start,
Jan's and Ollama's GPU engines, and the question whether a torch tool runs on AMD.

These rules of the torch-build and rocm-libs-missing families register after every other install rule (the
registration order breaks ties between diagnoses), so they keep a module of their own, imported last."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.fixes import rocm_index_for
from steadytune.doctor.rules.base import (
    on_windows,
    _first,
    Context,
    Diagnosis,
    _lines_matching,
    _make,
    NOT_DETECTED,
    rule,
    _text,
    _vendor,
)
from steadytune.doctor.rules.install.shared import _table_fix, _torch_cuda
from steadytune.doctor.rules.install.torch_build import _JAN, _ON_CPU


def _said(ctx: Context, needle: str, pattern: str) -> list[ErrorLine]:
    """The lines matching `pattern`, searched only where the paste says `needle` (lower case): a cheap gate that keeps
    the regular expressions off hostile pastes."""
    return _lines_matching(ctx, pattern) if needle in _text(ctx).lower() else []


# AutoGPTQ's own words when its compiled kernels do not load: "CUDA extension not installed.", "name 'autogptq_cuda_256'
# is not defined"
_GPTQ_EXTENSION = re.compile(r"(?i)CUDA extension (?:is )?not installed|autogptq_cuda\w*'? (?:is )?not defined")
# a build of the user's own: "pip install .", "compile from the source", setup.py, a git clone, BUILD_CUDA_EXT
_SOURCE_BUILD = re.compile(r"(?i)\bpip3? install (?:-e )?\.(?:\s|$)|\bcompil\w* (?:it )?from (?:the )?source|"
                           r"\bbuil(?:d|t|ding) (?:it )?from (?:the )?source|\bsetup\.py\b|\bgit clone\b|BUILD_CUDA_EXT")


@rule("torch-build")
def gptq_kernels_not_loaded(ctx: Context) -> Optional[Diagnosis]:
    """AutoGPTQ's prebuilt wheels carry kernels built against one torch of one CUDA (cu118, cu121): next to a torch of
    another CUDA (or a CPU one) they do not load and it falls back to slow paths. Building it from source instead needs
    the CUDA Toolkit (nvcc, CUDA_HOME) of torch's CUDA version."""
    lines = _said(ctx, "not", _GPTQ_EXTENSION.pattern)
    if not lines or any(e.family for e in ctx.errors):
        return None   # an error line of its own (a symbol, a missing library) says more
    text = _text(ctx)
    shown = re.search(r"\+?\b(cu1\d{2})\b", text)
    label = shown.group(1) if shown else "cu118"
    wheel = (f"pip install auto-gptq --no-cache-dir --extra-index-url https://huggingface.github.io/autogptq-index/"
             f"whl/{label}/")
    # a build of the user's own beside a torch of one CUDA and a toolkit (nvcc) of another, both said: the torch of the
    # toolkit's CUDA, then the build again (AutoGPTQ#203: torch cu117, system CUDA 11.8 -> torch from cu118)
    torch_label = re.search(r"\+cu(1\d)(\d)\b", text)
    toolkit = re.search(r"(?i)\b(?:nvcc|system cuda|cuda toolkit|toolkit)\W{0,12}(?:is\s+)?(?:cuda\s*)?v?(1\d)\.(\d)\b", text)
    if torch_label and toolkit and torch_label.groups() != toolkit.groups() and _SOURCE_BUILD.search(text):
        label = f"cu{toolkit.group(1)}{toolkit.group(2)}"
        return _make("torch-build", f"the torch's CUDA (+cu{''.join(torch_label.groups())}) is not the toolkit's "
                     f"({toolkit.group(1)}.{toolkit.group(2)}) that builds AutoGPTQ's kernels",
                     "the source build compiles AutoGPTQ's CUDA kernels with the installed toolkit against torch's "
                     "headers; a torch of another CUDA than that toolkit leaves the extension unbuilt or unloadable",
                     f"pip install torch --index-url https://download.pytorch.org/whl/{label} (the toolkit's CUDA), "
                     "then build auto-gptq again (pip install . --no-build-isolation in its clone)",
                     [ctx.line_fact(lines[0])], lines[:1], confirmed=False)
    if re.search(r"\bCUDA_HOME\b|\bnvcc\b", text):
        return _make("rocm-libs-missing", "the CUDA Toolkit is missing for building AutoGPTQ's kernels",
                     "building AutoGPTQ from source compiles its CUDA kernels with nvcc, found through CUDA_HOME; "
                     "without the CUDA Toolkit the build leaves them out (\"CUDA extension not installed\")",
                     "install the CUDA Toolkit of torch's CUDA version (python -c 'import torch; print(torch.version."
                     "cuda)'; the NVIDIA CUDA Toolkit installer or sudo apt install cuda-toolkit-<X-Y>), export "
                     "CUDA_HOME=/usr/local/cuda-<X.Y>, then pip install . again; or skip the build: " + wheel,
                     [ctx.line_fact(lines[0])], lines[:1], confirmed=False)
    built = re.search(r"\bauto_gptq-([\d.]+)\+(cu\d{3})", text)
    # the environment's CUDA: torch's own build where shown, else the image's or toolkit's ("cuda11.3", "CUDA Toolkit:
    # 11.3")
    cuda = _torch_cuda(text) or next(((int(m.group(1)), int(m.group(2))) for m in
                                      [re.search(r"(?i)\bcuda[ -]?(?:toolkit:?\s*)?(1\d)\.(\d)\b", text)] if m), None)
    held = f"cu{cuda[0]}{cuda[1]}" if cuda else None
    if built and held and held != built.group(2):
        # the paste pins both: a wheel file of one CUDA, installed beside a torch (an image's) of another. The torch
        # is the environment's; the AutoGPTQ build is the one to change
        return _make("wheel-platform", f"the AutoGPTQ wheel is a {built.group(2)} build beside a {held} torch",
                     f"auto_gptq-{built.group(1)}+{built.group(2)} carries kernels built for torch's {built.group(2)} "
                     f"build; the environment's torch is of {held}, so they do not load",
                     f"pip uninstall -y auto-gptq; pip install auto-gptq --no-cache-dir (a newer auto-gptq release "
                     f"picks or builds the kernels for the installed torch), or the auto-gptq wheel whose tag is "
                     f"+{held}; drop the pinned +{built.group(2)} wheel file", [ctx.line_fact(lines[0])], lines[:1])
    if not shown and cuda is None and not _SOURCE_BUILD.search(text):
        # nothing about torch or a build of the user's own: the AutoGPTQ that pip installed is the part that carries
        # kernels for one torch, so it is the one to match to the torch there (the torch itself runs the model)
        return _make("wheel-platform", "the installed AutoGPTQ carries no kernels for this torch",
                     "the pip-installed auto-gptq's compiled kernels are built for one torch and CUDA; for the torch "
                     "installed here they do not load (\"CUDA extension not installed\"), and it falls back to slow "
                     "code",
                     "pip uninstall -y auto-gptq; build it against the installed torch: pip install auto-gptq "
                     "--no-build-isolation --no-cache-dir (or git clone the AutoGPTQ repository and pip install -e . "
                     "there; it needs the CUDA Toolkit of torch's CUDA, python -c 'import torch; "
                     "print(torch.version.cuda)'); or the prebuilt auto-gptq wheel of torch's CUDA from "
                     "https://huggingface.github.io/autogptq-index/whl/cuXYZ/", [ctx.line_fact(lines[0])], lines[:1],
                     confirmed=False)
    return _make("torch-build", "AutoGPTQ's kernels do not match the installed torch",
                 f"AutoGPTQ's prebuilt kernels are built against torch's {label} build; the torch installed is of "
                 "another CUDA (or CPU-only), so they do not load",
                 f"pip install torch --index-url https://download.pytorch.org/whl/{label} (the CUDA the AutoGPTQ wheel "
                 f"names), then {wheel}", [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# the HIP compiler or its headers left out of an install, in the user's words ("hipcc7.1.0 not installed by default")
_HIPCC_NOT_INSTALLED = re.compile(r"(?i)\bhipcc[\d.]*\b.{0,80}\b(?:not|n't|never) (?:been |being |be )?(?:get )?"
                                  r"(?:installed|install|pulled)|(?:doesn'?t|does not|didn'?t|did not|not) (?:trigger|"
                                  r"install|pull)\w*\b.{0,60}\bhipcc")


@rule("rocm-libs-missing")
def hipcc_left_out_of_the_install(ctx: Context) -> Optional[Diagnosis]:
    """hipcc (the HIP compiler wrapper) and the HIP headers are packages of their own (hipcc, hip-dev); a metapackage
    or a runtime-only usecase that does not pull them leaves a ROCm that runs but cannot build."""
    lines = _said(ctx, "hipcc", _HIPCC_NOT_INSTALLED.pattern)
    if not lines:
        return None
    version = re.search(r"(?i)\bhipcc(\d+\.\d+(?:\.\d+)?)\b", _text(ctx))
    suffix = version.group(1) if version else ""
    return _make("rocm-libs-missing", "hipcc and the HIP headers are not installed",
                 "the HIP compiler wrapper (hipcc) and the HIP headers (hip-dev) come in packages of their own, which "
                 "this install did not pull", f"sudo apt install hipcc{suffix} hip-dev{suffix} (dnf install hipcc "
                 "hip-devel), or sudo amdgpu-install --usecase=rocm,hiplibsdk; then hipcc --version",
                 [ctx.line_fact(lines[0])], lines[:1])


# a user asking whether the tool runs on AMD at all: "Does X support AMD graphic cards?", "支援 AMD", "支持AMD显卡吗"
_AMD_SUPPORT_QUESTION = re.compile(r"(?i)\b(?:does|do|is|can)\b.{0,40}\bsupport(?:s|ed)?\b.{0,20}\b(?:AMD|Radeon)\b|"
                                   r"\b(?:AMD|Radeon)\b.{0,30}\bsupported\s*\?|支[援持]\s*(?:AMD|A卡)")


@rule("torch-build")
def amd_support_question(ctx: Context) -> Optional[Diagnosis]:
    """A tool built on torch runs on an AMD GPU with torch's ROCm build (Linux): the question "does it support AMD?"
    is answered by the build of torch installed, not by the tool."""
    lines = _said(ctx, "amd", _AMD_SUPPORT_QUESTION.pattern) or _lines_matching(ctx, r"支[援持]\s*A卡")
    if not lines or ctx.errors:
        return None   # an error says what is actually wrong
    tool = ctx.tool() or "the tool"
    arch, _fact = ctx.arch()
    return _make("torch-build", "AMD GPUs run torch's ROCm build",
                 f"{tool} runs on torch; on an AMD GPU it needs torch's ROCm build in place of the CUDA one",
                 f"on Linux (or WSL 2): pip uninstall -y torch torchvision torchaudio; {rocm_index_for(arch)}; then "
                 f"install {tool} as usual (python -c 'import torch; print(torch.version.hip, torch.cuda."
                 "is_available())' must print a ROCm version and True)", [ctx.line_fact(lines[0])], lines[:1],
                 confirmed=False)


# cpm_kernels' words when it cannot load a CUDA library by name (its library/base.py: a ctypes load of cudart,
# cublas / cublasLt, nvrtc; ChatGLM's quantize() runs on it): "Library cudart is not initialized" (round 20, r20d:
# widened from cublasLt alone; ssbuild/chatglm_finetuning#96 fixed by conda install cudatoolkit=11.7 -c nvidia)
_NOT_INITIALISED = re.compile(r"(?i)Library (cublasLt|cublas|cudart|nvrtc|curand|cusparse) is not initiali[sz]ed")


@rule("rocm-libs-missing")
def cublaslt_not_initialized(ctx: Context) -> Optional[Diagnosis]:
    """"Library cublasLt is not initialized", "Library cudart is not initialized": cpm_kernels (ChatGLM's quantize
    kernels) loads the CUDA runtime libraries by name from the environment, and torch's pip wheels keep theirs under
    names it does not look for: the environment's CUDA runtime (a conda env's cudatoolkit) is missing or of another
    CUDA version than torch's."""
    lines = _said(ctx, "is not initiali", _NOT_INITIALISED.pattern)
    if not lines:
        return None
    name = _NOT_INITIALISED.search(lines[0].line).group(1)
    return _make("rocm-libs-missing", f"the CUDA library {name} is not found by name",
                 f"cpm_kernels (the int4 / int8 kernels of ChatGLM's quantize()) loads {name} itself from the "
                 "environment's CUDA runtime libraries, which are missing or of another CUDA version than torch's",
                 "install the CUDA runtime of torch's CUDA version into the environment: conda install cudatoolkit="
                 f"<python -c 'import torch; print(torch.version.cuda)'> -c nvidia, which brings {name} (or the CUDA "
                 "toolkit of that version, its lib64 on LD_LIBRARY_PATH / its bin on PATH; pip install torch from the CUDA index "
                 "brings cuBLAS for torch alone), and take other CUDA lib64 folders off LD_LIBRARY_PATH",
                 [ctx.line_fact(lines[0])], lines[:1])


_NVIDIA_WORDS = re.compile(r"(?i)\bnvidia\b|\b(?:rtx|gtx)\s*\d{3,4}|\b(?:10[5-8]0|16[56]0|[2-5]0[5-9]0)(?:\s*ti)?\b|"
                           r"\b9[6-8]0\b")


_MODEL_WONT_START = re.compile(r"(?i)\b(?:model|engine)s? (?:fails?|failed|won't|wasn't able|was not able|can(?:'t|not)|"
                               r"couldn't) (?:to )?start|\b(?:unable|not able|wasn't able|was not able) to start (?:the |a )?"
                               r"model")


@rule("rocm-libs-missing")
def jan_without_the_cuda_runtime(ctx: Context) -> Optional[Diagnosis]:
    """Jan's GPU engine (its llama.cpp server built for CUDA) loads the CUDA runtime from a CUDA Toolkit install, not
    from a wheel: with only the display driver it cannot start on the GPU and Jan stays in CPU mode."""
    text = _text(ctx)
    if not _JAN.search(text) or not _NVIDIA_WORDS.search(text) or any(e.family for e in ctx.errors):
        return None
    said = _lines_matching(ctx, _ON_CPU.pattern) or _lines_matching(ctx, r"(?i)\bCPU mode\b|\bnot (?:being )?used\b")
    if not said and re.search(r"(?i)\bGPU\b", text):
        # GPU acceleration turned on and the model no longer starts: the CUDA engine cannot load its runtime
        said = _lines_matching(ctx, _MODEL_WONT_START)
    if not said:
        return None
    return _make("rocm-libs-missing", "Jan finds no CUDA runtime for its GPU engine",
                 "Jan's GPU engine (llama.cpp built for CUDA) loads the CUDA runtime libraries from a CUDA Toolkit "
                 "install; with only the NVIDIA display driver it falls back to CPU mode",
                 "install the NVIDIA CUDA Toolkit (11.7 or newer; on Windows its installer puts the runtime on PATH) "
                 "beside the driver, restart Jan and turn on GPU acceleration in its settings (Advanced: GPU "
                 "Acceleration, choosing the GPUs it may use); nvidia-smi must list the GPU",
                 [ctx.line_fact(said[0])], said[:1], confirmed=False)


# Ollama's Windows layout by release: 0.3.x runs each GPU backend from lib\ollama\runners\<backend> (rocm_v6.1), and
# the runner loads the ROCm DLLs and the rocblas\library folder from its own folder
_OLLAMA_RELEASE = re.compile(r"(?i)\bollama\b[^\n]{0,20}?\bv(?:ersion)?\W{0,3}(\d+)\.(\d+)(?:\.\d+)?|"
                             r"\bollama\W{0,3}v?(\d+)\.(\d+)\.\d+")


@rule("rocm-libs-missing")
def ollama_runner_without_rocblas(ctx: Context) -> Optional[Diagnosis]:
    """Ollama 0.3.x on Windows with an AMD GPU whose rocblas the user replaced (the community's build for a GPU the
    official one lacks): the ROCm runner crashes (0xc0000005) when the rocblas DLL and its library folder are not in
    the runner's own folder, lib\\ollama\\runners\\rocm_v6.1, but beside it in lib\\ollama."""
    text = _text(ctx)
    crashed = ctx.crashes() or re.search(r"0xc0000005|3221225477", text)
    if "rocblas" not in text.lower() or ctx.tool() != "ollama" or not on_windows(ctx, text) or not crashed:
        return None
    release = _OLLAMA_RELEASE.search(text)
    if release is None or (release.group(1) or release.group(3), release.group(2) or release.group(4)) != ("0", "3"):
        return None   # the runners folder of 0.3.x; later releases keep the libraries in lib\ollama\rocm
    said = _lines_matching(ctx, r"(?i)0xc0000005|3221225477|rocblas")
    return _make("rocm-libs-missing", "Ollama's ROCm runner does not find rocblas in its own folder",
                 "Ollama 0.3.x runs the ROCm backend from lib\\ollama\\runners\\rocm_v6.1, and that runner loads the "
                 "ROCm DLLs and rocblas\\library from its own folder; a rocblas replaced in lib\\ollama is not the one "
                 "it loads, and it crashes",
                 "quit Ollama; copy lib\\ollama\\*.dll (rocblas.dll among them) and the rocblas folder (rocblas\\library "
                 "with the tensile files for your GPU) into %LOCALAPPDATA%\\Programs\\Ollama\\lib\\ollama\\runners\\"
                 "rocm_v6.1, then start Ollama again", [ctx.line_fact(said[0])], said[:1])


@rule("torch-build")
def jan_on_an_amd_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Jan runs models with a llama.cpp backend it downloads; its CUDA backends serve NVIDIA GPUs only, and an AMD GPU
    (a Radeon card or iGPU) is reached through the Vulkan backend. Jan on the CPU beside an AMD GPU: the backend in use
    is not the Vulkan one."""
    text = _text(ctx)
    if not _JAN.search(text) or _vendor(ctx) != "amd" or any(e.family for e in ctx.errors):
        return None
    said = _lines_matching(ctx, _ON_CPU.pattern) or _lines_matching(ctx, NOT_DETECTED) or \
        _lines_matching(ctx, r"(?i)\bnot (?:being )?(?:detected|used)\b")
    if not said:
        return None
    system = "win" if on_windows(ctx, text) else "linux"
    return _make("torch-build", "Jan's llama.cpp backend is not the Vulkan build",
                 "Jan runs models through a llama.cpp backend; its CUDA builds serve NVIDIA GPUs only, and an AMD GPU "
                 "is used by the Vulkan build, so with any other backend Jan stays on the CPU",
                 f"in Jan: Settings > Model Providers > Llama.cpp > Backend, choose (or install) the Vulkan backend "
                 f"({system}-vulkan-x64), then restart the model; the GPU's Vulkan driver is the display driver "
                 "(vulkaninfo --summary must list it)", [ctx.line_fact(said[0])], said[:1], confirmed=False)


# llama.cpp's system-info line ("AVX = 1 | ... | BLAS = 0 | ..."): 1 where the build has a BLAS or GPU backend
# (CUDA, ROCm/hipBLAS, Metal, Vulkan, CLBlast), 0 for a CPU-only build
_NO_BLAS = re.compile(r"\bBLAS ?= ?0\b")
_ABOUT_THE_GPU = re.compile(r"(?i)\bGPU\b|\bcuda\b|\brocm\b|\bmetal\b|\bvulkan\b|n_gpu_layers|-ngl\b|\boffload|显卡")


@rule("torch-build")
def llama_cpp_built_for_the_cpu(ctx: Context) -> Optional[Diagnosis]:
    """llama.cpp (or llama-cpp-python, which builds it from source on pip install) prints BLAS = 0 when it was built
    without a GPU backend: an upgrade or a plain pip install rebuilds it for the CPU unless CMAKE_ARGS asks for one."""
    lines = _said(ctx, "blas", _NO_BLAS.pattern)
    text = _text(ctx)
    if not lines or not (_ABOUT_THE_GPU.search(text) or ctx.sheet.machine_archs) or any(e.family for e in ctx.errors):
        return None
    fix = _table_fix(ctx, "llama-cpp-python", "torch-build")
    # llama.cpp run from a Python program (`python generate.py ... model.gguf`, "the wheels") is the llama-cpp-python
    # binding, which pip builds without a GPU backend unless CMAKE_ARGS asks (round 18, r18c: h2oai/h2ogpt#1448)
    if not re.search(r"(?i)llama[-_]cpp[-_]python|\bllama_cpp\b|\bfrom llama_cpp\b|\bpython3?\s+\S+\.py\b|\bwheels?\b",
                     text):
        fix = ("rebuild llama.cpp with its GPU backend: cmake -B build -DGGML_CUDA=ON (NVIDIA; -DGGML_HIP=ON with "
               "-DAMDGPU_TARGETS=<your gfx> for AMD, -DGGML_VULKAN=ON for any Vulkan GPU; releases before mid-2024 "
               "named them LLAMA_CUBLAS / LLAMA_HIPBLAS), then cmake --build build --config Release")
    return _make("torch-build", "llama.cpp was built for the CPU only",
                 "llama.cpp's system info says BLAS = 0: the build has no GPU backend, so it runs on the CPU whatever "
                 "layers are asked to go to the GPU", fix, [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# an installer saying it found no GPU and puts in torch's CPU build ("No GPU detected -- installing CPU-only PyTorch")
_INSTALLS_CPU_TORCH = re.compile(r"(?i)\binstall(?:ing|s)? (?:the )?CPU[- ]only (?:PyTorch|torch)\b|"
                                 r"\bno (?:GPU|CUDA|NVIDIA GPU)s? (?:was )?detected\W{1,6}(?:installing|using) (?:the )?CPU")


@rule("torch-build")
def installer_chose_the_cpu_torch(ctx: Context) -> Optional[Diagnosis]:
    """A tool's installer that looks for a GPU, finds none and installs torch's CPU build, on a machine whose GPU the
    paste names: its detection missed the GPU (an AMD one it does not probe, a device file it cannot read), and the
    torch it left behind will never use it. The GPU build of torch installed by hand comes first; the tool after."""
    lines = _said(ctx, "cpu", _INSTALLS_CPU_TORCH.pattern)
    if not lines:
        return None
    arch, fact = ctx.arch()
    vendor = _vendor(ctx) or ("nvidia" if arch and arch.startswith("sm_") else None)
    if vendor is None:
        return None
    tool = ctx.tool() if ctx.tool() not in (None, "torch") else "the tool"
    index = rocm_index_for(arch) if vendor == "amd" else None
    torch = index or _table_fix(ctx, "torch", "torch-build", frozenset({"nvidia"}))
    return _make("torch-build", "the installer put in torch's CPU build",
                 f"{tool}'s installer did not detect the {'AMD' if vendor == 'amd' else 'NVIDIA'} GPU"
                 f"{' (' + arch + ')' if arch else ''} and installed the CPU-only PyTorch, which never uses it",
                 f"install the {'ROCm' if vendor == 'amd' else 'CUDA'} build of torch yourself into the tool's "
                 f"environment: pip uninstall -y torch torchvision torchaudio; {torch} (python -c 'import torch; "
                 "print(torch.cuda.is_available())' must print True), then install the tool without letting it "
                 "replace torch; or use an installer release whose GPU detection knows this GPU",
                 [f for f in (ctx.line_fact(lines[0]), fact) if f], lines[:1], confirmed=False)


# AutoGPTQ's last release (the project is archived; GPTQModel continues it): its wheels are built per torch CUDA (PyPI's
# for cu121, the autogptq-index's cu118 ones), each release for the torch of its day (AutoGPTQ's README and releases)
_GPTQ_LAST = (0, 7, 1)
_GPTQ_RELEASE = re.compile(r"(?i)\bauto[-_]?gptq\s*(?:==|:|\s)\s*v?(\d+)\.(\d+)\.(\d+)")
_CUDART_MISSING = re.compile(r"(?i)libcudart\.so\.\d+\s*:\s*cannot open shared object file|cudart64_\d+\.dll")


@rule("abi-mismatch")
def gptq_release_before_the_torch(ctx: Context) -> Optional[Diagnosis]:
    """An AutoGPTQ release older than the last one, whose kernels do not load ("CUDA extension not installed", or the
    CUDA runtime of the release's build missing: libcudart.so.12 under a torch of CUDA 11): its wheel was built for
    another torch / CUDA than the environment's, and the last release's wheels fit current torch builds. Source:
    hiyouga/LlamaFactory#3866 (auto-gptq 0.5.0 with libcudart.so.12 missing; the maintainer said upgrade, 0.7.1 fixed
    it)."""
    text = _text(ctx)
    release = _GPTQ_RELEASE.search(text)
    if not release or tuple(int(g) for g in release.groups()) >= _GPTQ_LAST:
        return None
    if re.search(r"\bauto_gptq-[\d.]+\+cu\d{3}", text):
        return None     # a wheel file of one CUDA pinned beside a torch of another: gptq_kernels_not_loaded's reading
    lines = _said(ctx, "not", _GPTQ_EXTENSION.pattern) + _lines_matching(ctx, _CUDART_MISSING)
    if not lines:
        return None
    shown = re.search(r"\+(cu1\d{2})\b", text)
    index = (f" --extra-index-url https://huggingface.github.io/autogptq-index/whl/{shown.group(1)}/"
             if shown and shown.group(1) == "cu118" else "")
    return _first(_make(
        "abi-mismatch", f"auto-gptq {'.'.join(release.groups())}'s kernels were built for another torch / CUDA",
        f"the auto-gptq {'.'.join(release.groups())} wheel carries kernels compiled against the torch and CUDA runtime "
        "of its own day; beside this environment's torch they do not load (its CUDA runtime library missing, \"CUDA "
        "extension not installed\"), so quantized models fail or run without them",
        f"upgrade to AutoGPTQ's last release, whose wheels fit current torch builds: pip uninstall -y auto-gptq; pip "
        f"install auto-gptq==0.7.1 --no-cache-dir{index} (PyPI's wheel is the CUDA 12.1 build; for a cu118 torch add "
        "--extra-index-url https://huggingface.github.io/autogptq-index/whl/cu118/); AutoGPTQ is archived, so for a "
        "newer torch use its successor GPTQModel (pip install gptqmodel --no-build-isolation)",
        [ctx.line_fact(lines[0])], lines[:1]))
