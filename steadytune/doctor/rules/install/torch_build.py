"""The torch build for another vendor or none: a CUDA or CPU torch on an AMD machine, a runtime without its GPU
backend, a GPU left idle, the CUDA runtime torch brings, and programs that fall back to the CPU."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import rocm_index_for, therock_family, wheel_line
from steadytune.hardware.gpu_facts import override_for_arch
from steadytune.doctor.packages import distribution_of
from steadytune.doctor.tool_fixes import machine_kinds, table_tool, tool_fix
from steadytune.doctor.rules.base import (
    NOT_TORCH,
    on_windows,
    Context,
    _cuda_index_for_driver,
    Diagnosis,
    _lines_matching,
    _make,
    _NVIDIA_DRIVER,
    NOT_DETECTED,
    _nvidia_gpu,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)
from steadytune.doctor.rules.install.shared import _listed_torch_version, _table_fix


# ---------------------------------------------------------------------------------------------------------
# What was installed
# ---------------------------------------------------------------------------------------------------------

# families whose rules explain a GPU torch cannot see better than "the wrong torch" would
_DEEPER = ("device-access", "driver", "wsl", "rocm-libs-missing", "override-wrong", "gpu-unsupported", "platform-bios")



# the programs built on ggml that take its backend options
_GGML_PROGRAM = re.compile(r"(?i)\bwhisper[.-]cpp\b|\bllama[.-]cpp\b|\bstable-diffusion\.cpp\b|\bkoboldcpp\b")


def _other_runtime_build(ctx: Context, errors: list[ErrorLine], vendor: Optional[str]) -> Optional[Diagnosis]:
    """A runtime other than torch built for another backend: CTranslate2's PyPI wheels (faster-whisper, whisperX) are CUDA,
    llama.cpp built with an option its version ignores is CPU-only, a torch that is the CPU build under a CUDA
    extension."""
    text = " ".join(e.line for e in errors)
    if re.search(r"CUDA failed with error", text) and vendor == "amd":
        return _make("torch-build", "CTranslate2 is a CUDA build",
                     "\"CUDA failed with error\" is CTranslate2's (faster-whisper, whisperX): its wheels are CUDA "
                     "builds and find no NVIDIA driver on an AMD machine, whatever torch is installed",
                     "install a ROCm build of CTranslate2: 4.7.1 and newer publish ROCm wheels with their GitHub "
                     "releases (OpenNMT/CTranslate2 PR 1989, built for ROCm 7.x; the CTranslate2-rocm fork, "
                     "arlo-phoenix/CTranslate2-rocm, for an older ROCm), in the same environment, with torch from the "
                     "ROCm index; or run the model on the CPU (device=\"cpu\", compute_type=\"int8\")", [], errors)
    own = re.search(r"(?i)(\w+) (?:package|library|build) (?:was|is) not (?:compiled|built) with (CUDA|ROCm|HIP|GPU) "
                    r"support", text)
    if own and own.group(1).lower() not in ("torch", "the", "this"):
        # the runtime says so itself (CTranslate2, a framework's CPU wheel): its own GPU build, from the tool table
        tool = own.group(1).lower()
        if own.group(2).upper() == "CUDA" and "macos" in machine_kinds(False, None, _text(ctx)):
            # a Mac has no NVIDIA GPU and no CUDA: no build of the runtime would use its GPU through CUDA
            return _make("gpu-unsupported", "CUDA asked for on a Mac",
                         f"{tool} runs on a GPU through CUDA only, and macOS has no CUDA (no NVIDIA GPU, no CUDA "
                         f"driver): {tool}'s macOS build is CPU-only, so there is nothing to reinstall",
                         f"run {tool} on the CPU: device=\"cpu\" (with compute_type=\"int8\" where it takes one, for "
                         "speed); for the Mac's own GPU, a tool with an Apple Metal / MPS backend (whisper.cpp, "
                         "mlx-whisper for faster-whisper's models)", [], errors)
        fix = _table_fix(ctx, tool, "torch-build")
        if fix:
            return _make("torch-build", f"{tool} is a build without {own.group(2)}", f"the installed {tool} says it was "
                         f"built without {own.group(2)} support, whatever torch is installed", fix, [], errors)
    hipblas = re.search(r"(?:-D)?(?:GGML|LLAMA)_HIPBLAS\b", text)
    if hipblas:
        return _make("torch-build", "llama.cpp was built without its ROCm backend",
                     f"llama.cpp renamed its ROCm option to GGML_HIP; {hipblas.group(0)} is ignored and the build "
                     "falls back to the CPU",
                     "configure with -DGGML_HIP=ON (llama-cpp-python: CMAKE_ARGS=\"-DGGML_HIP=on\" pip install "
                     "--force-reinstall --no-cache-dir llama-cpp-python), with -DAMDGPU_TARGETS=<your gfx>", [], errors)
    retired = ctx.sheet.first("retired_option")
    if retired is not None:
        # the build command itself names an option llama.cpp no longer reads: whatever follows runs on the CPU
        new = retired.detail
        program = _GGML_PROGRAM.search(text + "\n" + _text(ctx))
        name = program.group(0).lower().replace("-", ".") if program else "llama.cpp"
        nix = re.search(r"\bcmakeBool\b", retired.line)
        library = "libggml-" + new.split("_", 1)[1].lower()
        diagnosis = _make("torch-build", f"{name}'s {retired.value} option is retired",
                     f"ggml (the engine of {name}) renamed {retired.value} to {new}; a build given the old name "
                     f"ignores it without a word, so the {new.split('_', 1)[1]} backend ({library}) is never built "
                     "and the program runs on the CPU only (it says no GPU found)",
                     f"configure with -D{new}=ON instead" +
                     (f" (in the nix package: cmakeBool \"{new}\" ...)" if nix else "") +
                     f"; the build then makes ggml's backend module {library} (.so / .dll: check it is there)" +
                     (f" (llama-cpp-python: CMAKE_ARGS=\"-D{new}=on\" pip install --force-reinstall --no-cache-dir "
                      "llama-cpp-python)" if name == "llama.cpp" else "") + (", with -DAMDGPU_TARGETS=<your gfx>" if new == "GGML_HIP" else ""),
                     [retired], errors or _symptom_lines(ctx, [retired]),
                     # likely, not settled: the old names were right for the releases before the rename, and the
                     # paste rarely says which llama.cpp it builds; a cause the facts settle goes first
                     confirmed=False)
        if ctx.sheet.machine_archs and re.search(r"AMDGPU_TARGETS|GPU_TARGETS|HSA_OVERRIDE", "\n".join(ctx.sheet.lines)):
            # the paste is about which GPU arch the build targets (its targets or an override beside the GPU's own
            # arch): that reading comes first, the option's name after it
            diagnosis.rank = family("arch-missing").rank + 1
        return diagnosis
    cpu = re.search(r"xFormers was built for:?\s*PyTorch (\S+)\+(cu\d+).{0,40}\(you have (\S+)\+cpu\)",
                    " ".join(ctx.sheet.lines)) or \
        re.search(r"(?i)\bxformers\b.{0,80}?\bbuilt for:?\s*(?:PyTorch|torch)\s*(\d[\w.]*?)\+(cu\d{3})\b.{0,60}?"   # retold
                  r"\b(?:you have|I have|installed is|but got|got)\s*(?:torch\s*)?(\d[\w.]*?)\+cpu\b", " ".join(ctx.sheet.lines))
    if cpu:
        return _make("torch-build", "torch is the CPU build",
                     f"xformers is built for torch {cpu.group(1)}+{cpu.group(2)} but the installed torch is "
                     f"{cpu.group(3)}+cpu: no GPU at all",
                     f"pip uninstall -y torch; pip install torch=={cpu.group(3)} --index-url "
                     f"https://download.pytorch.org/whl/{cpu.group(2)} (the build xformers expects)", [], errors)
    return None


# a runtime that names the GPU backend it lacks: onnxruntime's execution provider, jax/XLA's platform. The backend says
# which build is wanted (ROCm/MIGraphX -> AMD's, CUDA/TensorRT -> NVIDIA's, DirectML -> Windows'), whatever else the
# paste says about the machine
_CUDA_BUILD_NO_DRIVER = re.compile(r"Found no NVIDIA driver on your system")

_NO_PROVIDER = re.compile(r"(?i)(?:provider )?'?(\w+?)ExecutionProvider'? is not in available provider|no (ROCm) provider "
                          r"available")
_NO_BACKEND = re.compile(r"(?i)(?:Unable to initialize backend '|Backend ')(rocm|cuda|gpu)'|registered platform with name: .?(rocm|cuda)")
_BACKEND_KIND = {"rocm": "amd", "migraphx": "amd", "cuda": "nvidia", "tensorrt": "nvidia", "dml": "windows"}


def _runtime_without_backend(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    for error in errors:
        provider, backend = _NO_PROVIDER.search(error.line), _NO_BACKEND.search(error.line)
        if not (provider or backend):
            continue
        tool = "onnxruntime" if provider else "jax"
        wanted = next(g for g in (provider or backend).groups() if g).lower()
        kinds = set(machine_kinds(ctx.sheet.is_windows, _vendor(ctx), _text(ctx)))
        if wanted in _BACKEND_KIND:
            kinds = (kinds - {"amd", "nvidia"}) | {_BACKEND_KIND[wanted]}
        arch, _ = ctx.arch()
        fix = tool_fix(tool, "torch-build", frozenset(kinds), {"rocm_index": rocm_index_for(arch)})
        what = {"onnxruntime": "onnxruntime without the execution provider asked for",
                "jax": "jax without its GPU backend"}[tool]
        cause = (f"the installed {tool} is a build without the {wanted.upper() if wanted != 'dml' else 'DirectML'} "
                 f"{'execution provider' if provider else 'backend'}: a CPU build, or the build for another GPU vendor")
        return _make("torch-build", what, cause, fix or f"install the {tool} build with that backend", 
                     [ctx.line_fact(error)], [error])
    return None


_BNB_NO_GPU = re.compile(r"(?i)bitsandbytes was compiled without GPU support")


# the program's own readout of its device: "Using device_type cpu", "using device: cpu", a UI's device list that
# "says (0 CPU)" / "shows CPU" where the GPU's name should be. Unlike a complaint in words it is the program's answer
# itself: torch (or the runtime) reported no GPU
_DEVICE_READOUT = re.compile(r"(?i)\busing device(?:_type)?\W{0,3}cpu\b|\b(?:says|shows|displays|lists)\W{0,3}"
                             r"(?:\d\W{0,2})?CPU\b")


# a complaint in prose that the program works on the CPU and leaves the GPU idle ("Train Device Set to CPU", "only
# uses CPU instead of GPU", "not using my GPU"), with a GPU named by its model alone ("9070xt", "RTX 3060")
_ON_CPU = re.compile(r"(?i)\btorch device:? CPU\b|\bswitch(?:es|ed)? to (?:the )?CPU\b|"
                     r"\b(?:uses?|using|runs?|ran|running|set to|falls? back to|defaults? to|stuck on)\s+(?:only\s+)?"
                     r"(?:on\s+)?(?:the\s+|my\s+)?CPU\b|\bCPU (?:only|instead of (?:the |my )?GPU)|\bnot (?:using|use|uses) "
                     r"(?:the |my )?(?:GPU|graphics card)|\bGPU (?:is )?not (?:being )?used|\bno GPU (?:usage|acceleration)|"
                     r"\b(?:running|runs?|ran) off (?:the )?CPU\b|\b(?:won'?t|will not|doesn'?t|does not|didn'?t) use "
                     r"(?:the |my |any )?GPU\b.{0,30}\bonly (?:the )?CPUs?\b|" + _DEVICE_READOUT.pattern.removeprefix("(?i)"))
_NOT_SEEN = re.compile(r"(?i)\b(?:doesn'?t|does not|can'?t|cannot|won'?t|not|never) (?:see|detect|find|use|using|"
                       r"recogni[sz]e)s? (?:my |the |any )?(?:GPU|graphics|card|rx|rtx|radeon|geforce)")
_AMD_MODEL = re.compile(r"(?i)\b(?:rx\s*)?[5-9]\d{3}\s*(?:xtx|xt|gre)\b|\brx\s*[4-9]\d{2,3}\b|\bradeon\b|\bstrix halo\b|"
                        r"\bgfx\d{3,4}")
_NVIDIA_MODEL = re.compile(r"(?i)\b(?:rtx|gtx)\s*\d{3,4}|\bgeforce\b|\b[AH]100\b|\bTesla\b")


def _gpu_left_idle(ctx: Context) -> Optional[tuple[str, bool, list[ErrorLine]]]:
    """(vendor, on Windows, the complaint's lines) when the paste only says the program runs on the CPU beside a GPU
    it names: with nothing else wrong, the torch (or the runtime) installed is a build without that GPU's backend."""
    # bitsandbytes' "compiled without GPU support" follows from a torch without the GPU: not a cause of its own here
    if any(e.family and not _BNB_NO_GPU.search(e.line) for e in ctx.errors) or ctx.crashes():
        return None
    said = _lines_matching(ctx, _ON_CPU.pattern)
    if not said and ctx.tool() in ("jax", "tensorflow", "onnxruntime", "ctranslate2", "llama-cpp-python"):
        # a runtime of its own that "does not see" the GPU: its CPU build is the usual reason (torch's own "not seen"
        # has many causes, the visibility and driver readings among them)
        said = _lines_matching(ctx, _NOT_SEEN.pattern)
    if not said:
        return None
    text = _text(ctx)
    vendor = _vendor(ctx) or ("amd" if _AMD_MODEL.search(text) else "nvidia" if _NVIDIA_MODEL.search(text) else None)
    if vendor is None and re.search(r"(?i)\bGPU:\s*(?:cuda|nvidia)\b", text):
        vendor = "nvidia"   # an issue template's "GPU: cuda"
    if vendor is None and ctx.tool() in _OWN_GPU_BUILDS and re.search(r"(?i)\bcuda\b", text):
        vendor = "nvidia"   # a runtime with a CUDA build of its own, said to have CUDA beside it
    if vendor is None and re.search(r"(?im)^\W{0,4}cuda(?: version)?\s*[:=]\s*\d", text):
        vendor = "nvidia"   # an issue template's "- cuda: 12": the user's CUDA, on the NVIDIA GPU it is for
    if vendor is None and not (_DEVICE_READOUT.search(said[0].line) and _PYTHON_PROGRAM_INSTALL.search(text)):
        # no GPU named: only the program's own device readout, after an install of a Python program, says the
        # environment's torch has no GPU backend (the fix then names both vendors' indexes)
        return None
    return vendor, on_windows(ctx, text), said[:1]


# the user installed the (Python) program themselves: "installed X manually", "fresh install", "pip install"
_PYTHON_PROGRAM_INSTALL = re.compile(r"(?i)\binstall(?:ed|ing)?\b[^\n]{0,30}\b(?:manually|by hand|from source|myself)\b|"
                                     r"\b(?:manual|fresh|clean|new)\s+install|\bpip3? install\b|\bvenv\b|\bconda\b")


# a program run as a prebuilt executable ("the exe of the latest release"), and the words of a Python environment whose
# torch could be the one at fault
_PREBUILT_PROGRAM = re.compile(r"(?i)\bexe\b|\.exe\b|\bAppImage\b|\.dmg\b")
# programs of C/C++ that reach the GPU through HIP or OpenCL themselves, with no torch beneath them
_NATIVE_PROGRAM = re.compile(r"(?i)\bhip_?info\b|\.(?:cpp|cc|cu|hip)\b|\brocminfo\b|\bclinfo\b|\bhip-tests\b")
_PYTHON_WORDS = re.compile(r"(?i)\btorch\b|\bpytorch\b|\bpip\b|\bpython\b|\bvenv\b|\bconda\b|site-packages")


def _therock_torch(ctx: Context, joined: str, evidence: list, errors: list[ErrorLine],
                   unsure: bool) -> Optional[Diagnosis]:
    """A torch from AMD's TheRock indexes (rocm.nightlies.amd.com, the rocm-sdk wheels) without ROCm in it: the wheel
    picked is not a ROCm build for this GPU family, and the index of the TheRock release in use has one."""
    index = re.search(r"https?://rocm\.nightlies\.amd\.com/\S+", joined)
    if not (index or re.search(r"(?i)\bTheRock\b|\brocm-sdk\b", joined)):
        return None
    release = re.search(r"(?i)\b(?:TheRock|ROCm)\b[^\d\n]{0,12}(\d+\.\d+)", joined)
    where = index.group(0).rstrip("/`'\".,)") if index else "https://rocm.nightlies.amd.com/v2/<your GPU family>/"
    arch, _fact = ctx.arch(errors)
    family = therock_family(arch)
    if family and not where.rstrip("/").endswith("/" + family):
        # the index of this GPU's family (the one shown names none, another, or a cut-off one: "gfx110X-al")
        where = f"https://rocm.nightlies.amd.com/v2/{family}/ (the index for {arch}'s family)"
    what = f"TheRock {release.group(1)}" if release else "the TheRock release in use"
    return _make("torch-build", "a torch without ROCm from TheRock's index",
                 "the torch wheel installed carries no ROCm (torch.version.hip is None, so extensions see \"Cuda None\"): "
                 "the index served a build without ROCm for this GPU family",
                 f"pip uninstall -y torch; install the ROCm torch of {what} for this GPU family: pip install "
                 f"--force-reinstall torch --index-url {where} (a later {what} nightly where this one lacks ROCm); "
                 "python -c 'import torch; print(torch.version.hip)' must print a ROCm version before building "
                 "extensions", evidence, errors, confirmed=not unsure)


# packages that bring no CUDA of their own and load the CUDA runtime from the system (not through torch)
_WITHOUT_TORCH = re.compile(r"(?i)llama_cpp|libllama|ggml|ctranslate2|onnxruntime|tensorflow|jaxlib|cupy|paddle")
# the user saying torch has no CUDA ("cuda is not available", "cuda is no avaible", 找不到cuda), or torch.cuda.is_available()
# answering False
_NO_CUDA_SAID = re.compile(r"(?i)(?<![a-z])cuda\b[^\n]{0,30}?\b(?:is\s*)?(?:not|no|isn'?t)\s+(?:be\s+)?ava\w*|"
                           r"is_available\(\)\W{0,6}False|(?:找不到|检测不到|识别不到|没有)\s*cuda|cuda\s*(?:不可用|用不了)|"
                           r"(?:用不了|无法使用|不能用|没用上)\s*(?:GPU|显卡|cuda)|只(?:用|能用|在用)\s*cpu")
# transformers' TrainingArguments log line (LLaMA-Factory's parser prints it too): torch answered that there is no GPU;
# PyTorch Lightning's own: "GPU available: False" at start, "But your machine only has: []" when gpus=N is asked for
_TRAINER_ON_CPU = re.compile(r"\bdevice: cpu, n_gpu: 0\b|\bGPU available: False\b|\byour machine only has: \[\]")


def _no_cuda_from_a_cpu_torch(ctx: Context, builds: list[Fact]) -> list[ErrorLine]:
    """The lines saying torch has no CUDA where the paste shows why: the torch listed is the +cpu build, or the
    trainer's own log says it runs on the CPU with no GPU ("device: cpu, n_gpu: 0") with no driver error beside it."""
    said = _lines_matching(ctx, _TRAINER_ON_CPU.pattern)
    if said:
        return said[:1]
    if any(f.detail == "cpu" for f in builds):
        # the build shown settles it: any complaint that the GPU goes unused is enough
        return (_lines_matching(ctx, _NO_CUDA_SAID.pattern) or _lines_matching(ctx, _ON_CPU.pattern) or
                _lines_matching(ctx, NOT_DETECTED))[:1]
    return []


# the CUDA 12 build pytorch.org's default index (and PyPI's Linux torch) carries, by torch release
_TORCH_CUDA12 = ("cu121 for torch 2.1-2.4, cu124 for 2.5-2.6, cu126 for 2.7, cu128 for 2.8 and newer")
def _cudart_missing(errors: list[ErrorLine]) -> Optional[ErrorLine]:
    return next((e for e in errors if re.search(r"libcudart\.so\.(\d+): cannot open", e.line)), None)


def _system_cuda_runtime(ctx: Context, error: ErrorLine) -> bool:
    """The package that cannot load libcudart is one without torch (llama-cpp-python's CUDA wheels, CTranslate2): it
    loads the CUDA runtime from the system, not from torch's CUDA build."""
    around = "\n".join(ctx.sheet.lines[max(0, error.line_no - 6): error.line_no + 1])
    if _WITHOUT_TORCH.search(around) or (_WITHOUT_TORCH.search(_text(ctx)) and
                                         not re.search(r"(?i)\btorch\b", _text(ctx))):
        return True
    # nothing in the paste ties the runtime to torch (no torch, no import, no traceback: a server's worker relaying
    # the loader's message, xinference's "[address=..., pid=...]"): the CUDA runtime missing from the machine is the
    # plain reading, and installing it the fix the users confirm (xorbitsai/inference#1286, round 18)
    # (PyTorch named by collect_env, a package's compiled module such as vllm._C: torch's side, as before)
    return not re.search(r"(?i)torch\b|\w\._C\b|^\s*(?:from|import)\s+\w|\bFile \"", _text(ctx), re.M)


def _cuda_runtime_of_torch(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """libcudart.so.N not found while a package built on torch loads (vLLM, xformers, flash-attn): it takes the CUDA
    runtime from torch's own CUDA build, so torch is not a CUDA N build. A package without torch is the missing-library
    reading's case (rocm-libs-missing)."""
    error = _cudart_missing(errors)
    if error is None or _system_cuda_runtime(ctx, error):
        return None
    major = re.search(r"libcudart\.so\.(\d+)", error.line).group(1)
    around = "\n".join(ctx.sheet.lines[max(0, error.line_no - 6): error.line_no + 1])
    imported = re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", around, re.M)
    package = (distribution_of(imported[-1]) if imported else None) or ctx.tool([error])
    index = _TORCH_CUDA12 if major == "12" else "cu118" if major == "11" else f"a CUDA {major} index"
    what = package if package and package != "torch" else "the package"
    return _make("torch-build", f"torch is not the CUDA {major} build {what} needs",
                 f"{what} is built against torch's CUDA {major} build and loads libcudart.so.{major} through it; the "
                 f"installed torch is another CUDA (or CPU) build, which does not bring CUDA {major}'s runtime",
                 f"install the CUDA {major} torch {what} was built with (pip show {what} names the torch release; its "
                 f"index is {index}): pip install --force-reinstall torch==<that release> --index-url "
                 f"https://download.pytorch.org/whl/cuXXX; or install the {what} build made for the installed torch's CUDA",
                 [ctx.line_fact(error)], [error])


# `pip install torch>=1.7.1+cu110` typed into a shell without quotes: the shell reads `>` as a redirection
_UNQUOTED = re.compile(r"\b(?:pip3?|uv pip|python3? -m pip) install\b[^'\"\n]*?\b(torch|torchvision|torchaudio)\s*>=?\s*"
                       r"([\d.]+)\+(cu\d+|rocm[\d.]+|cpu)")


def _unquoted_comparison(ctx: Context) -> Optional[Diagnosis]:
    """An unquoted `>=` in a pip command is a shell redirection: pip gets the bare name (whatever build the links page
    offers first, a ROCm or CPU build among them), and the version with its +cuXXX goes to a file named "=X+cuXXX".
    A `>=` never selects a local build tag either: the pin is `==` with the tag, quoted, from that build's own page."""
    line = next(((n, m) for n, l in enumerate(ctx.sheet.lines, 1) for m in [_UNQUOTED.search(l)] if m), None)
    if line is None:
        return None
    number, m = line
    tag = m.group(3)
    pins = re.findall(r"\b(torch|torchvision|torchaudio)\s*>=?\s*([\d.]+)\+" + re.escape(tag), ctx.sheet.lines[number - 1])
    quoted = " ".join(f'"{name}=={version}+{tag}"' for name, version in pins)
    page = (f"https://download.pytorch.org/whl/{tag}/torch_stable.html" if re.search(r"torch_stable", _text(ctx))
            else None)
    installed = re.findall(r"(?im)^\s*(torch\w*)\s+[\d.]+\+(\w[\w.]*)\s*$", _text(ctx))
    other = [f"{name} +{build}" for name, build in installed if build != tag]
    command = (f"pip install {quoted} -f {page}" if page else
               f"pip install {quoted} --index-url https://download.pytorch.org/whl/{tag}")
    return _make("torch-build", f"the {tag} pin never reached pip",
                 f"in `{m.group(0)[:80]}` the shell reads the unquoted > as a redirection and a >= cannot pin a +{tag} "
                 "build, so pip installs whatever build of the bare name the links page offers" +
                 (f" (installed: {', '.join(other)})" if other else ""),
                 f"pin with == and quote it, from the {tag}-only page: {command}",
                 [Fact("error", "torch-build", number, ctx.sheet.lines[number - 1])],
                 [ErrorLine(number, ctx.sheet.lines[number - 1], None)], confirmed=bool(other))


# the pytorch channel's releases for each pytorch-cuda (pytorch.org "previous versions"), as conda pins, oldest first
_PYTORCH_CUDA_TRIOS = {
    "11.6": ("pytorch=1.13.1 torchvision=0.14.1 torchaudio=0.13.1",),
    "11.7": ("pytorch=1.13.1 torchvision=0.14.1 torchaudio=0.13.1", "pytorch=2.0.1 torchvision=0.15.2 torchaudio=2.0.2"),
    "11.8": ("pytorch=2.0.1 torchvision=0.15.2 torchaudio=2.0.2", "pytorch=2.5.1 torchvision=0.20.1 torchaudio=2.5.1"),
    "12.1": ("pytorch=2.1.2 torchvision=0.16.2 torchaudio=2.1.2", "pytorch=2.5.1 torchvision=0.20.1 torchaudio=2.5.1"),
    "12.4": ("pytorch=2.4.1 torchvision=0.19.1 torchaudio=2.4.1", "pytorch=2.5.1 torchvision=0.20.1 torchaudio=2.5.1"),
}


def _conda_unpinned_trio(text: str) -> Optional[tuple[str, tuple[str, ...]]]:
    """(the pytorch-cuda, the pinned releases to use) for a conda install that pins pytorch-cuda but leaves
    torchvision or torchaudio without a release."""
    line = re.search(r"(?i)\bconda install\b[^\n]*\bpytorch-cuda=(\d+\.\d+)[^\n]*", text)
    if not line or line.group(1) not in _PYTORCH_CUDA_TRIOS:
        return None
    if not re.search(r"(?<![\w-])(?:torchvision|torchaudio)(?![\w=-])", line.group(0)):
        return None
    return line.group(1), _PYTORCH_CUDA_TRIOS[line.group(1)]


@rule("torch-build")
def torch_build(ctx: Context) -> Optional[Diagnosis]:
    vendor = _vendor(ctx)
    errors = ctx.of("torch-build") + ([e for e in ctx.of("driver") if _NVIDIA_DRIVER.search(e.line)]
                                      if vendor == "amd" and not _nvidia_gpu(ctx) else [])
    errors += [e for e in ctx.of("abi-mismatch") if re.search(r"you have \S+\+cpu|compiled with Cuda None", e.line)]
    said_by_torch = bool(errors)   # torch's own words ("Found no NVIDIA driver", "Torch not compiled with CUDA")
    builds = ctx.sheet.of("torch")
    if re.search(r"ROCM used to build PyTorch: \d", _text(ctx)):
        # collect_env's "HIP runtime version: N/A" beside a ROCm version torch was built with: a ROCm torch that cannot
        # reach the GPU (its HIP runtime is read through the device), not a build without ROCm
        builds = [f for f in builds if f.detail != "no-hip"]
    wrong = [f for f in builds if (vendor == "amd" and f.detail in ("cuda", "cpu", "no-hip")) or
             (vendor in ("nvidia", None) and f.detail in ("rocm", "cpu"))]
    joined = "\n".join(ctx.sheet.lines)
    redirected = _unquoted_comparison(ctx)
    if redirected is not None:
        return redirected
    cudart = _cudart_missing(errors)
    if cudart is not None and _system_cuda_runtime(ctx, cudart):
        return None   # the system's CUDA runtime, not torch's build: rocm-libs-missing reads it
    runtime = _cuda_runtime_of_torch(ctx, errors)
    if runtime is not None:
        return runtime
    other = _other_runtime_build(ctx, errors, vendor)
    if other is not None:
        return other
    provider = _runtime_without_backend(ctx, errors)
    if provider is not None:
        return provider
    conda = re.search(r"\bconda\b|\bconda-forge\b|py3\S*_cpu_0|\bcpuonly\b|^\s*_pytorch_select\s", joined, re.M)
    unsure, windows = False, ctx.sheet.is_windows
    # a GPU the paste names (by model, PCI id or arch) beside a torch built for another vendor, or for none, is the
    # fault by itself, with or without an error line, unless another family's error is what the paste is about
    archs = ctx.sheet.machine_archs
    named = [f for f in wrong if (f.detail in ("cuda", "no-hip") and any(a.startswith("gfx") for a in archs)
                                  and not _nvidia_gpu(ctx)) or
             (f.detail == "rocm" and archs and all(a.startswith("sm_") for a in archs)) or
             (f.detail == "cpu" and archs)]
    others = [e for e in ctx.errors if e.family not in (None, "visibility", "torch-build")]
    if named and not errors and not others:
        errors = ctx.of("visibility") + ctx.no_gpu() or _symptom_lines(ctx, named[:1])
    # the trainer's "no GPU" line alone is likely the CPU build, not shown to be one (unsure)
    if not errors and not others:
        errors = _no_cuda_from_a_cpu_torch(ctx, builds)
        unsure = bool(errors) and not any(f.detail == "cpu" for f in builds)
    rocm_said = [e for e in ctx.of("visibility") + ctx.no_gpu()
                 if re.search(r"No HIP GPUs|hipErrorNoDevice|HIP initialization|hipGetDeviceCount|no ROCm-capable device",
                              e.line)]
    if not errors and not wrong and rocm_said:
        return None   # torch's ROCm build printed it: the build is right, the GPU is what it cannot reach
    if not errors and not (wrong and (ctx.no_gpu() or ctx.of("visibility"))):
        # torch sees no GPU on an AMD machine (or after a conda install) and nothing else explains it: the build
        if not (ctx.of("visibility") and (vendor == "amd" or conda)) or ctx.of(*_DEEPER):
            prose = _gpu_left_idle(ctx)
            if prose is None:
                return None
            if _JAN.search(joined):
                return None   # Jan is no torch program: its GPU engine's runtime (jan_without_the_cuda_runtime)
            if _PREBUILT_PROGRAM.search(joined) and not _PYTHON_WORDS.search(joined):
                return None   # a prebuilt executable brings its own GPU runtime: no torch of the user's to reinstall
            vendor, windows, errors = prose
            errors = errors + [e for e in ctx.errors if _BNB_NO_GPU.search(e.line)]   # its consequence, explained
            tool = ctx.tool()
            if tool not in (None, "torch", "comfyui", "a1111", "unsloth", "llamafactory", "torchaudio", "triton",
                            "bitsandbytes"):
                # a runtime of its own (onnxruntime, jax, tensorflow): its GPU build is its own package
                fix = _table_fix(ctx, tool, "torch-build")
                return None if fix is None else _make(
                    "torch-build", f"{tool} is a build without GPU support", f"the installed {tool} is a CPU build or "
                    "the build for another GPU vendor", fix, [ctx.line_fact(errors[0])], errors, confirmed=False)
        unsure = True
    if _NATIVE_PROGRAM.search(joined) and not (builds or said_by_torch or _PYTHON_WORDS.search(joined)):
        return None   # a HIP program of C++ (hipInfo, a sample, rocminfo) and no torch in sight: no torch to blame
    arch, where = ctx.arch(errors)
    evidence = [ctx.line_fact(e) for e in errors[:1]] + wrong[:1] + [where]
    if re.search(r"(?i)zluda", joined):
        # ZLUDA runs torch's CUDA build on the AMD GPU: a CPU (or ROCm) torch under it is the wrong build
        return _make("torch-build", "a torch without CUDA under ZLUDA",
                     "ZLUDA translates CUDA calls for the AMD GPU, so it needs torch's CUDA build; the installed torch "
                     "has no CUDA", _table_fix(ctx, "zluda", "torch-build"), evidence, errors + ctx.no_gpu(),
                     confirmed=not unsure)
    unpinned = _conda_unpinned_trio(joined)
    if conda and vendor != "amd" and unpinned:
        cuda, trios = unpinned
        return _make("torch-build", "conda's unpinned torchvision / torchaudio pulled another pytorch",
                     f"the conda line pins pytorch-cuda={cuda} but not the packages' releases, so the solver takes the "
                     f"newest torchvision / torchaudio, whose pytorch has no pytorch-cuda={cuda} build, and settles on a "
                     "CPU (or mismatched) pytorch",
                     f"pin all three to one release built for pytorch-cuda={cuda}: conda install {trios[0]} "
                     f"pytorch-cuda={cuda} -c pytorch -c nvidia" + (f" (or {', or '.join(trios[1:])})" if trios[1:]
                                                                      else ""),
                     evidence, errors + ctx.of("visibility"), confirmed=not unsure)
    if conda and vendor != "amd":
        return _make("torch-build", "conda installed the CPU build of pytorch",
                     "conda picked a CPU-only pytorch (a build string like py3.9_cpu_0): the channel has no CUDA build "
                     "for the asked pytorch + CUDA pair, or conda-forge's build won",
                     "conda list pytorch shows the build; install a pair the pytorch channel has, forcing it: conda "
                     "install pytorch torchvision pytorch-cuda=<12.1|11.8> -c pytorch -c nvidia (older: cudatoolkit="
                     "<ver> -c pytorch; the CPU build also comes with cpuonly), or pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu128", evidence, errors + ctx.of("visibility"),
                     confirmed=not unsure)
    # "Found no NVIDIA driver" is torch's CUDA build speaking (a CPU build says "Torch not compiled with CUDA
    # enabled"): the build is the CUDA one, and what it lacks is the driver (or, on an AMD GPU, it is the wrong build)
    no_driver = [e for e in errors if _CUDA_BUILD_NO_DRIVER.search(e.line)]
    if (no_driver and len(no_driver) == len(errors) and not any(f.detail == "cpu" for f in builds)
            and vendor in ("nvidia", None) and "macos" not in machine_kinds(False, None, joined)):
        driver_fix = ("install the NVIDIA driver for this GPU and reboot (sudo ubuntu-drivers install, or NVIDIA's "
                      "installer; Windows: the GeForce / Studio driver): nvidia-smi must list the GPU; in a container "
                      "start it with --gpus all (the NVIDIA Container Toolkit on the host); under WSL 2 install only the "
                      "Windows driver, never a Linux one inside")
        if vendor == "nvidia":
            return _make("driver", "torch's CUDA build finds no NVIDIA driver",
                         "the installed torch is the CUDA build, and no NVIDIA driver answers on this machine (none "
                         "installed, the kernel module not loaded, or a container started without the GPU)",
                         driver_fix, evidence, errors + ctx.no_gpu(), confirmed=not unsure)
        return _make("torch-build", "torch's CUDA build finds no NVIDIA driver",
                     "the installed torch is the CUDA build (a CPU build says \"Torch not compiled with CUDA enabled\" "
                     "instead) and it finds no NVIDIA driver: either the driver is missing or this is not an NVIDIA GPU",
                     "with an NVIDIA GPU: " + driver_fix + "; with an AMD GPU: pip uninstall -y torch torchvision "
                     "torchaudio; pip install torch torchvision torchaudio --index-url "
                     "https://download.pytorch.org/whl/rocm7.2 (Linux)", evidence, errors + ctx.no_gpu(),
                     confirmed=not unsure)
    if vendor == "nvidia":
        return _make("torch-build", "a torch without CUDA on an NVIDIA GPU",
                     "the installed torch is a CPU (or ROCm) build", "pip uninstall -y torch; pip cache purge; " +
                     _cuda_index_for_driver(ctx, arch), evidence, errors + ctx.no_gpu(), confirmed=not unsure)
    if vendor is None and "macos" in machine_kinds(False, None, joined):
        return _make("torch-build", "CUDA asked for on a Mac",
                     "macOS has no CUDA: torch's macOS build runs on the CPU and on Apple's GPU through MPS",
                     "run on the Mac's GPU with device \"mps\" (torch.backends.mps.is_available()), or on the CPU: the "
                     "program's device option (--device mps / cpu), or .to(\"mps\") in place of .cuda(); there is no "
                     "CUDA torch to install on macOS", evidence, errors + ctx.no_gpu(), confirmed=not unsure)
    if vendor is None:
        return _make("torch-build", "a torch without GPU support",
                     "the installed torch is a CPU build (PyPI's default on Windows and macOS, or a cached CPU wheel), "
                     "so it finds no GPU",
                     "the CPU build has to go: pip uninstall -y torch; pip cache purge; then the GPU build from "
                     "pytorch.org's index (on Windows PyPI has only the CPU build; a uv/poetry source must send Windows "
                     "there too): pip install "
                     "torch --index-url https://download.pytorch.org/whl/cu128 (NVIDIA; cu118 for a driver older than "
                     "CUDA 12) or https://download.pytorch.org/whl/rocm7.2 (AMD, Linux)", evidence,
                     errors + ctx.no_gpu(), confirmed=not unsure)
    program = _table_fix(ctx, ctx.tool(), "torch-build", frozenset({"windows", "amd"})) if windows else None
    if program is not None and ctx.tool() in ("a1111", "comfyui"):
        # a program with its own AMD route on Windows (DirectML, ZLUDA): its flag, not a torch index
        return _make("torch-build", f"{ctx.tool()}'s CUDA torch on a Windows AMD machine",
                     "the program installed torch's CUDA build (or PyPI's CPU one), which finds no AMD GPU, and "
                     "pytorch.org publishes no ROCm torch for Windows", program, evidence, errors + ctx.no_gpu(),
                     confirmed=not unsure)
    if windows:
        return _make("torch-build", "a torch without GPU support on a Windows AMD machine",
                     "pip on Windows installs PyPI's CPU torch; pytorch.org publishes no ROCm wheels for Windows",
                     "AMD's ROCm wheels for Windows (repo.radeon.com, for the RDNA3/RDNA4 and Strix GPUs they list), "
                     "or run under WSL 2 or Linux with the pytorch.org ROCm index", evidence, errors + ctx.no_gpu(),
                     confirmed=not unsure)
    therock = _therock_torch(ctx, joined, evidence, errors, unsure)
    if therock is not None:
        return therock
    if arch and arch.startswith("gfx") and not wheel_line(arch) and not override_for_arch(arch):
        # no ROCm torch carries this GPU, and no sibling's code runs on it: the GPU torch for it is not a ROCm one
        return _make("torch-build", f"a torch without a build for {arch}",
                     f"the installed torch is a CUDA or CPU build, which finds no AMD GPU, and no ROCm torch carries "
                     f"{arch} either",
                     "on Windows use the program's DirectML backend (torch-directml: pip install torch-directml, or the "
                     "program's own DirectML option) and reinstall its torch; on Linux the CPU build, or a Vulkan "
                     "backend where the program has one", evidence, errors + ctx.no_gpu(), confirmed=not unsure)
    return _make("torch-build", "a torch without ROCm on an AMD machine",
                 "the installed torch is a CUDA or CPU build (PyPI's default), which finds no AMD GPU",
                 # in the environment the program runs: a launcher's backend keeps a venv of its own (SwarmUI's
                 # ComfyUI backend, dlbackend/ComfyUI/venv: mcmonkeyprojects/SwarmUI#1432, round 18 r18c)
                 "pip uninstall torch torchvision torchaudio -y (with the program's own Python: a launcher's backend has "
                 "its own venv, such as SwarmUI's dlbackend/ComfyUI/venv); " + rocm_index_for(arch) + " (python -c 'import torch; "
                 "print(torch.version.hip)' must print a ROCm version; check that pip found a wheel for this Python)",
                 evidence, errors + ctx.no_gpu() + ctx.of("visibility"), confirmed=not unsure)


# runtimes whose GPU support is a build of their own package, not torch's (tool_fixes.yaml has their rows)
_OWN_GPU_BUILDS = ("jax", "tensorflow", "onnxruntime", "llama-cpp-python", "ctranslate2")


# a program saying it found no GPU and runs on the CPU (its own warning, not torch's error)
_CPU_FALLBACK = (r"(?i)\bno (?:NVIDIA |CUDA )?(?:GPU|CUDA device)s? (?:has been |have been |was |were )?(?:detected|found)\b|"
                 r"\bfall(?:s|ing)? back to (?:the )?CPU\b|\busing CPU (?:mode|instead)\b")


@rule("torch-build")
def cpu_fallback_with_nvidia(ctx: Context) -> Optional[Diagnosis]:
    """A program that warns it found no GPU and falls back to the CPU, on a machine with an NVIDIA card and no driver
    error: torch in the program's environment is the CPU-only build (pip's default wheel on Windows, or an
    installer's CPU option that ran first and stayed), so torch.cuda.is_available() is False."""
    if not _nvidia_gpu(ctx) or _vendor(ctx) == "amd":
        return None
    lines = _lines_matching(ctx, _CPU_FALLBACK)
    if not lines or any(e.family for e in ctx.errors):
        return None   # an error line of its own (a driver, a visibility, a WSL one) says why the GPU was not found
    if re.search(r"(?i)NVIDIA-SMI has failed|couldn't communicate with the NVIDIA driver|\+cu\d{3}", _text(ctx)):
        return None   # the driver is down, or the torch shown is a CUDA build
    arch, fact = ctx.arch()
    tool = table_tool(ctx.tool(lines))
    if tool in _OWN_GPU_BUILDS:
        # a runtime with a GPU build of its own (jaxlib's "a CUDA-enabled jaxlib is not installed"): its package
        fix = _table_fix(ctx, tool, "torch-build")
        if fix:
            return _make("torch-build", f"{tool} is its CPU build", f"{tool} finds no GPU although an NVIDIA card is "
                         f"there and nothing says the driver failed: the {tool} installed is its CPU build", fix,
                         [f for f in (fact,) if f], lines, confirmed=False)
    if (ctx.tool(lines) or ctx.tool()) in NOT_TORCH:
        return None   # a program with a GPU runtime of its own: no torch of any build is in its way
    return _make(
        "torch-build", "the program's torch is the CPU-only build",
        "the program finds no GPU although an NVIDIA card is there and nothing says the driver failed: the Python "
        "environment it runs in holds torch's CPU-only build (pip's default wheel on Windows, or an installer's CPU "
        "option run before its GPU one, which then left that torch in place)",
        "check in the program's own environment: python -c \"import torch; print(torch.__version__, "
        "torch.cuda.is_available())\" (a +cpu version, False); then pip uninstall -y torch and "
        + _cuda_index_for_driver(ctx, arch) + " in that environment (or delete the program's environment folder and run "
        "only its NVIDIA installer)", [f for f in (fact,) if f], lines, confirmed=False)


# a library refusing to go on without a GPU (transformers' quantizers, accelerate): torch answered that there is none
_GPU_NEEDED = re.compile(r"(?i)No GPU found\. A GPU is needed|requires? a (?:CUDA |NVIDIA )?GPU\b.{0,40}\bnone (?:was )?found|"
                         r"\bGPU is (?:required|needed) for (?:quantization|\w+-bit)")


@rule("torch-build")
def library_needs_a_gpu_torch_cannot_see(ctx: Context) -> Optional[Diagnosis]:
    """transformers (bitsandbytes, GPTQ, AWQ quantization) asks torch for a GPU and stops when torch.cuda.is_available()
    is False: with no driver error beside it, the torch in that environment is a CPU-only build."""
    lines = _lines_matching(ctx, _GPU_NEEDED.pattern)
    if not lines or any(e.family and e.family != "torch-build" for e in ctx.errors):
        return None   # a driver, visibility or device error of its own says why torch sees no GPU
    torch = _listed_torch_version(ctx)
    arch, _fact = ctx.arch()
    amd = _vendor(ctx) == "amd"
    index = (rocm_index_for(arch) if amd else None) or _cuda_index_for_driver(ctx, arch)
    return _make("torch-build", "torch sees no GPU", f"the library asks torch for a GPU and torch"
                 f"{' ' + torch if torch else ''} answers there is none: a CPU-only build of torch (pip's default on "
                 "Windows), or one for the other GPU vendor",
                 "check: python -c \"import torch; print(torch.__version__, torch.version.cuda, torch.version.hip, "
                 f"torch.cuda.is_available())\"; reinstall the {'ROCm' if amd else 'CUDA'} build of torch"
                 f"{' ' + torch.split('+')[0] if torch else ''}: pip uninstall -y torch; {index}",
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# Jan (janhq), named by its issue template ("Jan Version: 0.4.3") or its own name, leaving an NVIDIA GPU idle
_JAN = re.compile(r"\bJan [Vv]ersion\b|\bjanhq\b|\bJan (?:decides|uses|runs|falls|stays|only|does(?:n't| not)|won't|"
                  r"was(?:n't| not) able|is(?:n't| not) able|can(?:'t|not)|couldn't|fails|failed)\b|"
                  r"\bJan app\b|\bjan\.ai\b|\bJan_\d+\.\d+")


# torch answering that it has no CUDA, in any wording ("is_available() is showing as False", "cuda is not available")
_TORCH_NO_CUDA = re.compile(r"(?i)is_available\(\)[^\n]{0,25}?\bFalse\b|" + _NO_CUDA_SAID.pattern.removeprefix("(?i)"))
# a CUDA toolkit the user installed, with its version ("CUDA toolkit 13 installed", "installed CUDA 12.4")
_TOOLKIT_SAID = re.compile(r"(?i)\bCUDA(?: toolkit)?\s*(?:v(?:ersion)?\s*)?(\d{2})(?:\.(\d))?\b[^\n]{0,20}?\binstalled\b|"
                           r"\binstalled (?:the )?(?:latest )?CUDA(?: toolkit)?\s*(?:v(?:ersion)?\s*)?(\d{2})(?:\.(\d))?\b")


def _index_for_toolkit(major: int, minor: int) -> str:
    """pytorch.org's CUDA index nearest below a toolkit the user has (its driver runs that CUDA): cu130 from torch
    2.9, cu128 from 2.7, cu126 from 2.6, cu118 for CUDA 11 (pytorch.org's install selector and release notes)."""
    if major >= 13:
        return "cu130"
    if major == 12:
        return "cu128" if minor >= 8 else "cu126"
    return "cu118"


@rule("torch-build")
def toolkit_beside_a_cpu_torch(ctx: Context) -> Optional[Diagnosis]:
    """torch says it has no CUDA on Windows while the user points at the CUDA toolkit they installed (or an NVIDIA GPU):
    torch's CUDA wheels bring their own CUDA runtime and never use the toolkit, and pip's torch on Windows is PyPI's
    CPU-only build, so the toolkit's version is beside the point; the CUDA build from pytorch.org's index is the fix."""
    text = _text(ctx)
    said = _lines_matching(ctx, _TORCH_NO_CUDA.pattern)
    if not said or _vendor(ctx) == "amd" or not on_windows(ctx, text):
        return None
    if any(e.family not in (None, "visibility", "torch-build") for e in ctx.errors) or ctx.crashes():
        return None   # a driver, WSL or library error of its own says why torch has no GPU
    if any(f.detail in ("cuda", "rocm") for f in ctx.sheet.of("torch")):
        return None   # the torch shown is a GPU build: not the CPU wheel's reading
    if "is_available" not in said[0].line and ctx.tool() not in (None, "torch"):
        return None   # "CUDA 12.6 not available" about another package's build (xformers' wheels): not torch's answer
    toolkit = _TOOLKIT_SAID.search(text)
    if toolkit is None and not _nvidia_gpu(ctx):
        return None
    if toolkit:
        major, minor = toolkit.group(1) or toolkit.group(3), toolkit.group(2) or toolkit.group(4) or "0"
        label = _index_for_toolkit(int(major), int(minor))
        index = (f"pip install torch --index-url https://download.pytorch.org/whl/{label} (the build for the CUDA "
                 f"{major} driver this machine has; any older CUDA build runs too)")
    else:
        arch, _fact = ctx.arch()
        index = _cuda_index_for_driver(ctx, arch)
    # (PyPI's Windows torch is the CPU build: pytorch/pytorch.github.io PR 757, checked v20)
    return _make("torch-build", "pip's torch on Windows is the CPU-only build",
                 "torch.cuda.is_available() is False because the torch pip installed on Windows is PyPI's CPU-only "
                 "build; torch's CUDA builds bring their own CUDA runtime, so the CUDA toolkit on the machine is "
                 "neither needed nor used",
                 "python -c \"import torch; print(torch.__version__)\" shows +cpu; pip uninstall -y torch torchvision "
                 f"torchaudio; {index}; the CUDA toolkit can stay as it is", [], said[:1], confirmed=False)


# fp16 refused or failing, in the trainer's words (accelerate's "fp16 mixed precision requires a GPU") or the user's
# ("an error about fp16"), where the GPU named has fp16 and nothing else failed
_FP16_REFUSED = re.compile(r"(?i)fp16 mixed precision requires a GPU|\b(?:error|bug|problem|issue|fails?)\b[^\n]{0,20}"
                           r"\b(?:about|with|on)\s+(?:--)?fp16\b|--fp16\b[^\n]{0,30}\b(?:error|fails?)\b")


@rule("torch-build")
def fp16_refused_beside_an_nvidia_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Training in fp16 refused on a machine with an NVIDIA GPU that has fp16 (every card CUDA builds still run):
    transformers / accelerate refuse fp16 only when torch sees no GPU, so the torch in the program's environment is a
    CPU-only build (PyPI's on Windows, or a web UI's requirements that installed it); dropping fp16 would train on the
    CPU instead."""
    lines = _lines_matching(ctx, _FP16_REFUSED.pattern)
    if not lines or not _nvidia_gpu(ctx) or _vendor(ctx) == "amd":
        return None
    if any(e.family not in (None, "torch-build", "precision") for e in ctx.errors):
        return None
    said_by_accelerate = "requires a GPU" in lines[0].line
    if not said_by_accelerate and re.search(r"[a-z]Error:|Exception\b|Traceback|(?i:overflow|\bnan\b|\binf\b|"
                                            r"\bHalf\b|unscale|scaler)", _text(ctx)):
        return None   # the error itself is shown and is another one (an overflow, the scaler): the format's reading
    if any(f.detail in ("cuda", "rocm") for f in ctx.sheet.of("torch")) or re.search(r"\+cu\d{3}", _text(ctx)):
        return None   # a CUDA torch: the format's own reading (precision), not the build
    arch, fact = ctx.arch()
    return _make("torch-build", "fp16 refused: torch sees no GPU",
                 "fp16 training is refused only when torch finds no GPU; with an NVIDIA card present, the torch in the "
                 "program's environment is the CPU-only build (pip's default on Windows, or one a requirements file "
                 "installed), so removing fp16 would only move training to the CPU",
                 "in the program's own environment: python -c \"import torch; print(torch.__version__, "
                 "torch.cuda.is_available())\" (a +cpu version, False); then pip uninstall -y torch and "
                 + _cuda_index_for_driver(ctx, arch) + " in that environment, and keep fp16 (or bf16) on",
                 [f for f in (fact,) if f], lines[:1], confirmed=False)


# the user asking which CUDA release the program needs, or whether the CUDA release is the cause ("是CUDA版本的问题吗？",
# "最低CUDA版本是哪个", "which CUDA version do I need", "is it a CUDA version problem")
_CUDA_RELEASE_ASKED = re.compile(r"(?i)(?:是|因为)\s*CUDA\s*版本的?问题|最低\s*(?:的)?\s*CUDA\s*版本|CUDA\s*版本\s*(?:要求|需要|是多少|是哪个)|"
                                 r"\bwhich CUDA (?:version|release)\b[^\n]{0,30}\b(?:need|require|support)|"
                                 r"\b(?:minimum|lowest|required) CUDA (?:version|release)\b|"
                                 r"\bis (?:it|this) (?:a|the) CUDA version (?:problem|issue)\b")
_FAILED_SAID = re.compile(r"(?i)报错|出错|错误|\berrors?\b|\berrored\b|\bfails?\b|\bfailed\b|\bcrash\w*")


@rule("torch-build")
def cuda_release_asked(ctx: Context) -> Optional[Diagnosis]:
    """A run failing on an NVIDIA card and the user asking whether the installed CUDA release is the cause: a torch
    CUDA wheel brings its own CUDA runtime, so the toolkit release is not what decides; the torch in the environment is
    (an old release pinned by the project's requirements, or a build without the card's arch). Reinstalling torch,
    a current build for the card, is the fix (OpenMOSS/MOSS#109: an RTX 3090 with CUDA 11.1 failing int4 inference
    on requirements.txt's torch 1.10.1; pip uninstall torch then pip install torch fixed it) (round 20, r20d)."""
    asked = _lines_matching(ctx, _CUDA_RELEASE_ASKED)
    if not asked or not _nvidia_gpu(ctx) or _vendor(ctx) == "amd":
        return None
    if any(e.family not in (None, "torch-build") for e in ctx.errors) or not _lines_matching(ctx, _FAILED_SAID):
        return None
    arch, _fact = ctx.arch()
    index = _cuda_index_for_driver(ctx, arch)
    return _make("torch-build", "the torch in the environment, not the CUDA toolkit, decides",
                 "torch's CUDA wheels bring their own CUDA runtime: the CUDA toolkit release installed is not what the "
                 "run uses (only the driver must be new enough); the torch in the environment is (an old release "
                 "pinned by the project's requirements, or a build without this card)",
                 "pip uninstall torch torchvision torchaudio -y, then pip install torch again, a current build for "
                 f"this card: {index}; check python -c \"import torch; print(torch.__version__, "
                 "torch.cuda.is_available())\", then run the program again (keep its other requirements; drop only "
                 "its old torch pin)", [], asked[:1], confirmed=False)
