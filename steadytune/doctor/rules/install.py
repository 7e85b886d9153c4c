"""Rules about what was installed: the torch build for another vendor, a wheel for another Python or platform, an
ABI mismatch between a compiled extension and its torch, and missing ROCm libraries."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import rocm_index_for, rocm_indexes_for_torch, wheel_line
from steadytune.hardware.gpu_facts import override_for_arch
from steadytune.doctor.packages import IMPORT_DISTRIBUTIONS, distribution_of, read_import_failure
from steadytune.doctor.tool_fixes import ALIASES, load_tool_fixes, machine_kinds, tool_fix
from steadytune.doctor.rules.base import (
    on_windows,
    Context,
    _cuda_index_for_driver,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    _NVIDIA_DRIVER,
    _nvidia_gpu,
    _restate,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)


def _listed_torch_version(ctx: Context) -> Optional[str]:
    return next((f.value for f in ctx.sheet.of("torch") if f.value != "not-rocm"), None) or _listed_torch(ctx)


def _cuda_label(ctx: Context) -> Optional[str]:
    """The CUDA label of the torch the paste is about (cu126): a pytorch.org index it names, a +cuXYZ build, else a
    CUDA version it states beside torch ("PyTorch 2.6.0 and cuda 12.6")."""
    text = _text(ctx)
    said = (re.search(r"download\.pytorch\.org/whl/(?:nightly/)?(cu\d{3})\b", text)
            or re.search(r"\btorch\S*?\+(cu\d{3})\b", text))
    if said:
        return said.group(1)
    version = re.search(r"(?i)\bcuda\s*(?:version:?\s*)?(1[12])\.(\d)\b", text)
    return f"cu{version.group(1)}{version.group(2)}" if version else None


def _table_fix(ctx: Context, tool: Optional[str], family_name: str, kinds: Optional[frozenset[str]] = None,
               **values: Optional[str]) -> Optional[str]:
    """The tool x family table's fix (tool_fixes.yaml) for this machine's OS and GPU vendor (or the `kinds` given),
    with its values."""
    arch, _ = ctx.arch()
    torch = _listed_torch_version(ctx)
    filled = {"torch": f"torch {torch}" if torch else None, "rocm_index": rocm_index_for(arch),
              "cuda_index": _cuda_index_for_driver(ctx, arch), "cuda_label": _cuda_label(ctx), **values}
    if kinds is None:
        kinds = machine_kinds(ctx.sheet.is_windows, _vendor(ctx), _text(ctx))
    return tool_fix(tool, family_name, kinds, filled)


# ---------------------------------------------------------------------------------------------------------
# What was installed
# ---------------------------------------------------------------------------------------------------------

# families whose rules explain a GPU torch cannot see better than "the wrong torch" would
_DEEPER = ("device-access", "driver", "wsl", "rocm-libs-missing", "override-wrong", "gpu-unsupported", "platform-bios")



def _other_runtime_build(ctx: Context, errors: list[ErrorLine], vendor: Optional[str]) -> Optional[Diagnosis]:
    """A runtime other than torch built for another backend: CTranslate2 (faster-whisper, whisperX) is CUDA-only,
    llama.cpp built with an option its version ignores is CPU-only, a torch that is the CPU build under a CUDA
    extension."""
    text = " ".join(e.line for e in errors)
    if re.search(r"CUDA failed with error", text) and vendor == "amd":
        return _make("torch-build", "CTranslate2 is a CUDA build",
                     "\"CUDA failed with error\" is CTranslate2's (faster-whisper, whisperX): its wheels are CUDA "
                     "builds and find no NVIDIA driver on an AMD machine, whatever torch is installed",
                     "install a ROCm build of CTranslate2 (the CTranslate2-rocm fork, arlo-phoenix/CTranslate2-rocm) "
                     "in the same environment, with torch from the ROCm index; or run the model on the CPU "
                     "(device=\"cpu\", compute_type=\"int8\")", [], errors)
    own = re.search(r"(?i)(\w+) (?:package|library|build) (?:was|is) not (?:compiled|built) with (CUDA|ROCm|HIP|GPU) "
                    r"support", text)
    if own and own.group(1).lower() not in ("torch", "the", "this"):
        # the runtime says so itself (CTranslate2, a framework's CPU wheel): its own GPU build, from the tool table
        tool = own.group(1).lower()
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
        diagnosis = _make("torch-build", f"llama.cpp's {retired.value} option is retired",
                     f"llama.cpp renamed {retired.value} to {new}; a build given the old name ignores it and builds "
                     "for the CPU only",
                     f"configure with -D{new}=on instead (llama-cpp-python: CMAKE_ARGS=\"-D{new}=on\" pip install "
                     "--force-reinstall --no-cache-dir llama-cpp-python)" +
                     (", with -DAMDGPU_TARGETS=<your gfx>" if new == "GGML_HIP" else ""),
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
                    " ".join(ctx.sheet.lines))
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
_NO_PROVIDER = re.compile(r"(?i)(?:provider )?'?(\w+?)ExecutionProvider'? is not in available provider|no (ROCm) provider "
                          r"available")
_NO_BACKEND = re.compile(r"(?i)Unable to initialize backend '(rocm|cuda|gpu)'|registered platform with name: .?(rocm|cuda)")
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


# a complaint in prose that the program works on the CPU and leaves the GPU idle ("Train Device Set to CPU", "only
# uses CPU instead of GPU", "not using my GPU"), with a GPU named by its model alone ("9070xt", "RTX 3060")
_ON_CPU = re.compile(r"(?i)\btorch device:? CPU\b|\bswitch(?:es|ed)? to (?:the )?CPU\b|"
                     r"\b(?:uses?|using|runs?|ran|running|set to|falls? back to|defaults? to|stuck on)\s+(?:only\s+)?"
                     r"(?:on\s+)?(?:the\s+)?CPU\b|\bCPU (?:only|instead of (?:the |my )?GPU)|\bnot (?:using|use|uses) "
                     r"(?:the |my )?(?:GPU|graphics card)|\bGPU (?:is )?not (?:being )?used|\bno GPU (?:usage|acceleration)")
_NOT_SEEN = re.compile(r"(?i)\b(?:doesn'?t|does not|can'?t|cannot|won'?t|not|never) (?:see|detect|find|use|using|"
                       r"recogni[sz]e)s? (?:my |the |any )?(?:GPU|graphics|card|rx|rtx|radeon|geforce)")
_AMD_MODEL = re.compile(r"(?i)\b(?:rx\s*)?[5-9]\d{3}\s*(?:xtx|xt|gre)\b|\brx\s*[4-9]\d{2,3}\b|\bradeon\b|\bstrix halo\b|"
                        r"\bgfx\d{3,4}")
_NVIDIA_MODEL = re.compile(r"(?i)\b(?:rtx|gtx)\s*\d{3,4}|\bgeforce\b|\b[AH]100\b|\bTesla\b")


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


def _gpu_left_idle(ctx: Context) -> Optional[tuple[str, bool, list[ErrorLine]]]:
    """(vendor, on Windows, the complaint's lines) when the paste only says the program runs on the CPU beside a GPU
    it names: with nothing else wrong, the torch (or the runtime) installed is a build without that GPU's backend."""
    # bitsandbytes' "compiled without GPU support" follows from a torch without the GPU: not a cause of its own here
    if any(e.family and not _BNB_NO_GPU.search(e.line) for e in ctx.errors) or ctx.crashes():
        return None
    said = _lines_matching(ctx, _ON_CPU.pattern)
    if not said and ctx.tool() in ("jax", "tensorflow", "onnxruntime", "ctranslate2"):
        # a runtime of its own that "does not see" the GPU: its CPU build is the usual reason (torch's own "not seen"
        # has many causes, the visibility and driver readings among them)
        said = _lines_matching(ctx, _NOT_SEEN.pattern)
    if not said:
        return None
    text = _text(ctx)
    vendor = _vendor(ctx) or ("amd" if _AMD_MODEL.search(text) else "nvidia" if _NVIDIA_MODEL.search(text) else None)
    if vendor is None and re.search(r"(?i)\bGPU:\s*(?:cuda|nvidia)\b", text):
        vendor = "nvidia"   # an issue template's "GPU: cuda"
    if vendor is None:
        return None
    return vendor, on_windows(ctx, text), said[:1]


# TheRock's wheel indexes are one per GPU family (rocm.nightlies.amd.com/v2/<family>/), by the gfx name's prefix
_THEROCK_FAMILIES = (("gfx110", "gfx110X-all"), ("gfx120", "gfx120X-all"), ("gfx1151", "gfx1151"),
                     ("gfx1150", "gfx1150"), ("gfx94", "gfx94X-dcgpu"), ("gfx950", "gfx950-dcgpu"),
                     ("gfx103", "gfx103X-dgpu"))


def _therock_family(arch: Optional[str]) -> Optional[str]:
    return next((family for prefix, family in _THEROCK_FAMILIES if arch and arch.startswith(prefix)), None)


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
    family = _therock_family(arch)
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
# the CUDA 12 build pytorch.org's default index (and PyPI's Linux torch) carries, by torch release
_TORCH_CUDA12 = ("cu121 for torch 2.1-2.4, cu124 for 2.5-2.6, cu126 for 2.7, cu128 for 2.8 and newer")
def _cudart_missing(errors: list[ErrorLine]) -> Optional[ErrorLine]:
    return next((e for e in errors if re.search(r"libcudart\.so\.(\d+): cannot open", e.line)), None)


def _system_cuda_runtime(ctx: Context, error: ErrorLine) -> bool:
    """The package that cannot load libcudart is one without torch (llama-cpp-python's CUDA wheels, CTranslate2): it
    loads the CUDA runtime from the system, not from torch's CUDA build."""
    around = "\n".join(ctx.sheet.lines[max(0, error.line_no - 6): error.line_no + 1])
    return bool(_WITHOUT_TORCH.search(around) or (_WITHOUT_TORCH.search(_text(ctx)) and
                                                  not re.search(r"(?i)\btorch\b", _text(ctx))))


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
    conda = re.search(r"\bconda\b|\bconda-forge\b|py3\S*_cpu_0|\bcpuonly\b", joined)
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
    rocm_said = [e for e in ctx.of("visibility") + ctx.no_gpu() if re.search(r"No HIP GPUs|hipErrorNoDevice", e.line)]
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
                     errors + ctx.no_gpu())
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
                 "pip uninstall -y torch torchvision torchaudio; " + rocm_index_for(arch) + " (python -c 'import torch; "
                 "print(torch.version.hip)' must print a ROCm version; check that pip found a wheel for this Python)",
                 evidence, errors + ctx.no_gpu() + ctx.of("visibility"), confirmed=not unsure)


_WHEEL = re.compile(r"(\S+?)-(\d[\w.+!]*)-(?:\d\w*-)?(cp\d+|py3\w*)-(\w+)-(\w+)\.whl")



# the newest Python each torch release has wheels for (pytorch.org's release notes and its wheel indexes)
_TORCH_PYTHON = (((0, 4), "3.6"), ((1, 4), "3.7"), ((1, 7), "3.8"), ((1, 11), "3.9"), ((1, 13), "3.10"),
                 ((2, 2), "3.11"), ((2, 5), "3.12"), ((2, 9), "3.13"))


def _python_for(package: str, version: str) -> Optional[str]:
    """The newest Python a torch release was built for (None for other packages and for releases after 2.8)."""
    numbers = re.match(r"(\d+)\.(\d+)", version)
    if package.lower() != "torch" or not numbers:
        return None
    release = (int(numbers.group(1)), int(numbers.group(2)))
    return next((python for before, python in _TORCH_PYTHON if release < before), None)


def _older(version: str, than: str) -> bool:
    """Python version `version` is older than `than` ("3.9" < "3.10")."""
    return tuple(int(x) for x in version.split(".")[:2]) < tuple(int(x) for x in than.split(".")[:2])


# a compiled part of a package (torch._C, xformers._C, a *_cuda module): missing means a broken or mismatched build,
# which the abi-mismatch and torch-build readings own
_COMPILED_PART = re.compile(r"^_C$|^_\w*(?:cuda|hip|ext|ops)\w*$|\w+_cuda$")


_BUILDING = re.compile(r"(?i)Getting requirements to build (?:wheel|editable)|Preparing metadata \(pyproject|"
                       r"Failed building wheel for|Microsoft Visual C\+\+ 1\d\.\d or greater|"
                       r"subprocess-exited-with-error|Building wheels? for|python setup\.py (?:egg_info|bdist_wheel)")
_BUILT = re.compile(r"(?i)(?:Building wheel for|Failed to build|Failed building wheel for|Running setup\.py install for)"
                    r"\s+([A-Za-z][\w.\-]*)|"
                    r"\b(?:pip|uv pip)3? install\s+(?:-\S+\s+)*([A-Za-z][\w.\-]*)|^\s*Collecting\s+([A-Za-z][\w.\-]*)")


def _isolated_build(ctx: Context) -> Optional[str]:
    """The package pip was building from source when the paste failed (its name, or "the package"), None when the
    paste shows no source build."""
    text = _text(ctx)
    if not _BUILDING.search(text):
        return None
    names = [next(g for g in m.groups() if g) for line in ctx.sheet.lines for m in [_BUILT.search(line)] if m]
    names = [re.split(r"[=<>\[]", n)[0] for n in names if n.lower() not in ("torch", "-r", "-e", "--upgrade")]
    return names[-1] if names else "the package"


def _import_failure(ctx: Context, errors: list[ErrorLine], attribute_only: bool = False) -> Optional[Diagnosis]:
    """"No module named X" / "cannot import name N from X" / "module X has no attribute N": a module path that moved
    between releases of its package (the importing package and the installed one are releases that do not go together)
    names that package and the release to install; a package's compiled part missing names its build for this
    platform; a module missing in a pip source build is build isolation; a package that is not installed names its
    install for this platform (the tool table)."""
    failure = read_import_failure(ctx.sheet.lines)
    if failure is None or (attribute_only and not failure.attribute):
        return None
    if failure.attribute and (failure.caller is None or failure.caller == failure.top):
        return None   # an attribute missing in the program's own code, or inside the package itself: no release mix-up
    covers = [e for e in errors if e.line_no == failure.line_no] or [ErrorLine(failure.line_no, failure.line, None)]
    part = failure.name or failure.module.split(".")[-1]
    package, evidence = failure.distribution, [ctx.line_fact(covers[0])]
    caller = failure.caller.replace("_", "-") if failure.caller else None
    platform = _table_fix(ctx, package, "wheel-platform", package=package, caller=caller)
    kinds = machine_kinds(ctx.sheet.is_windows, _vendor(ctx), _text(ctx))
    owner = next((pkg for pattern, pkg in _MODULE_PACKAGES if re.fullmatch(pattern, failure.top)), None)
    if owner and caller and distribution_of(failure.caller) == owner and owner != package:
        # a package importing a compiled module of its own that is a top-level name (apex's amp_C): it was installed
        # without its extensions
        rebuild = _table_fix(ctx, owner, "abi-mismatch", package=owner)
        return _make("wheel-platform", f"{owner} was installed without its compiled extensions",
                     f"{owner} imports {failure.module}, its own compiled extension, which this install does not have "
                     "(a build without its C++/CUDA options, or a pure-Python install)",
                     rebuild or f"reinstall {owner} with its extensions built against the installed torch: pip install "
                     f"--no-build-isolation --force-reinstall {owner}", evidence, covers)
    if _COMPILED_PART.search(part) and failure.caller in (None, failure.top):
        # the package's own compiled part is missing: a build for another platform or Python, or its source folder
        # imported in place of the installed wheel
        if platform and kinds & {"windows", "macos"}:
            return _make("wheel-platform", f"{package} has no build for this platform", f"{failure.module} is "
                         f"{package}'s compiled part, which no {package} package for this platform carries", platform,
                         evidence, covers)
        return _make("wheel-platform", f"{package}'s compiled part is missing", f"{failure.module} is {package}'s "
                     "compiled part: the install has none for this Python and platform, or the program imports "
                     f"{package}'s source folder instead of the installed wheel",
                     f"pip install --force-reinstall --no-cache-dir {package} (the wheel for this Python and "
                     f"platform{', or: ' + platform if platform else ''}); run from outside {package}'s source "
                     "checkout", evidence, covers, confirmed=False)
    built = _isolated_build(ctx)
    if built is not None and failure.name is None and "." not in failure.module:
        # pip builds a source package in a fresh environment holding only its declared build requirements: a setup.py
        # that imports torch (flash-attn, xformers, apex, ...) finds none there, whatever the environment has
        return _make("wheel-platform", f"{built}'s build cannot see {package}",
                     f"pip builds {built} in an isolated environment that has only its declared build requirements; its "
                     f"build imports {failure.module}, which is not one of them",
                     f"install {package} first, then build against it: pip install {built} --no-build-isolation (uv: "
                     f"--no-build-isolation-package {built}); or install a prebuilt {built} wheel made for this "
                     "torch, Python and platform", evidence, covers)
    if failure.moved:
        gone = (f"{failure.module}.{failure.name}" if failure.attribute else
                f"{failure.name} from {failure.module}" if failure.name else failure.module)
        cause = (f"{caller or 'the program'} {'uses' if failure.attribute else 'imports'} {gone}, which the installed "
                 f"{package} does not have: the path "
                 f"moved or went away between {package} releases, so the two are releases that do not go together")
        if caller:
            fix = (f"install the {package} release {caller} was written for: pip install -U {caller} (a release "
                   f"written for the newer {package}), or pip install \"{package}==<the release {caller} requires>\" "
                   f"(pip show {caller} and pip check name it); a new environment with both pinned avoids the mix")
        else:
            fix = (f"install the {package} release the program was written for (its requirements file pins it): pip "
                   f"install \"{package}==<that release>\", or update the program to one written for this {package}")
        if platform:
            fix += f"; for {package} itself: {platform}"
        # settled where another installed package's frame ran the import (the line alone may be the program's own
        # stale code); an attribute error beside another family's error may be its consequence: likely then
        settled = caller is not None and not (failure.attribute and any(e.family for e in ctx.errors))
        return _make("wheel-platform", f"{package} is another release than {caller or 'the program'} expects", cause,
                     fix, evidence, covers, confirmed=settled)
    where = (f"{caller}'s" if caller else "the program's")
    cause = f"{package} is not installed in the Python that runs {where} code" + (
        " (its PyPI package has no build for this platform)" if platform and kinds & {"windows", "macos"} else "")
    fix = (platform or f"install {package} into the same Python that runs the program: python -m pip install "
           f"{package} with that interpreter (a venv's python, ComfyUI portable's python_embeded\\python.exe -m pip)")
    # a platform the package has no PyPI build for settles it; otherwise the package may just not be installed yet
    return _make("wheel-platform", f"{package} is missing for this platform", cause, fix, evidence, covers,
                 confirmed=bool(platform and kinds & {"windows", "macos"}))


# a complaint in prose that a package will not install (or build) on this machine: a title such as "flash-attn install
# fails on Windows 11" or "Can't install vllm on Windows"
_INSTALL_FAILS = re.compile(r"(?i)\b(?:install(?:ing|ation|s)?|build(?:ing|s)?|compil(?:e|ing)|wheel)\b.{0,30}?\b(?:fail"
                            r"(?:s|ed|ing)?|errors?|broken|impossible)\b|\b(?:can'?t|cannot|unable to|fail(?:s|ed)? to|"
                            r"won'?t|not) (?:be )?(?:install|build|compile)|\bnot installing\b|failed building wheel|"
                            r"\bnot working on (?:windows|mac)")


def _named_tool(text: str) -> Optional[str]:
    """The most specific tool of the fix table the text names by word (torch only when no other is named)."""
    named = [row.tool for row in load_tool_fixes()
             if re.search(r"(?i)(?<![\w-])" + "[-_ ]?".join(map(re.escape, row.tool.split("-"))) + r"(?![\w-])", text)]
    named += [tool for alias, tool in ALIASES.items() if re.search(rf"(?i)(?<![\w-]){re.escape(alias)}(?![\w-])", text)]
    if re.search(r"(?i)\bpytorch\b", text):
        named.append("torch")
    specific = [t for t in named if t != "torch"]
    return (specific or named or [None])[0]


def _install_complaint(ctx: Context) -> Optional[Diagnosis]:
    """A package that will not install here, said in prose with no error line: that package's own install for this OS
    and GPU (the tool table), as the likely reading. The complaint itself may be classed as an error line (a title
    naming flash-attn reads as an attention line); any other error line says more than the complaint."""
    if any(e.family and not _INSTALL_FAILS.search(e.line) for e in ctx.errors):
        return None
    # a compiler's own diagnostics (ptxas, a kernel's codegen, file:line) are a kernel failing at run time, not an install
    said = [line for line in _lines_matching(ctx, _INSTALL_FAILS.pattern)
            if not re.search(r"(?i)\bptxas\b|\bcodegen\b|\.target sm_|\bline \d+;|\.(?:cu|cpp|c|h|py):\d+", line.line)]
    if not said:
        return None
    text = _text(ctx)
    tool = _named_tool(text)
    kinds = machine_kinds(on_windows(ctx, text), _vendor(ctx) or (
        "amd" if _AMD_MODEL.search(text) else "nvidia" if _NVIDIA_MODEL.search(text) else None), text)
    fix = _table_fix(ctx, tool, "wheel-platform", kinds, package=tool) if tool else None
    if fix is None:
        return None
    return _make("wheel-platform", f"{tool} does not install on this platform", f"{tool} has no ready build for this "
                 "OS, GPU or Python on PyPI, so pip fails (or builds it from source and fails)", fix,
                 [ctx.line_fact(said[0])], said[:1], confirmed=False)


def _amdsmi_release(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """amdsmi's Python module without a function amd-smi calls: the module is another ROCm release's than the amd-smi
    (and libamd_smi) in use, typical where several ROCm releases sit side by side (/opt/rocm-X.Y.Z) and pip installed
    one release's module for all."""
    error = next((e for e in errors if re.search(r"module '?amdsmi[\w.]*'? has no attribute", e.line)), None)
    if error is None:
        return None
    # the releases the paste names: /opt/rocm-X.Y.Z, and the X.Y.Z numbers of a line that speaks of ROCm (a driver's
    # own 30.10 numbering has two digits)
    named = re.findall(r"/opt/rocm-(\d+\.\d+(?:\.\d+)?)", _text(ctx)) + [
        v for line in ctx.sheet.lines if re.search(r"(?i)\brocm\b", line)
        for v in re.findall(r"(?<![\w.])([1-9]\.\d+\.\d+)(?![\w.])", line)]
    releases = sorted(set(named), key=lambda v: tuple(int(x) for x in v.split(".")))
    target = f"/opt/rocm-{releases[-1]}" if releases else "/opt/rocm-<the release in use>"
    several = len(releases) > 1
    diagnosis = _make("wheel-platform", "the amdsmi Python package is another ROCm release's",
                      "the amdsmi module Python imports lacks a function the amd-smi in use calls: it was installed "
                      "from another ROCm release" + (f" (this machine has ROCm {', '.join(releases)})" if several
                                                     else ""),
                      f"install the module of the ROCm in use: python3 -m pip install --force-reinstall "
                      f"{target}/share/amd_smi (or prepend {target}/share/amd_smi to PYTHONPATH in that ROCm's "
                      "environment module); python3 -c 'import amdsmi, os; print(os.path.dirname(amdsmi.__file__))' "
                      "shows which one loads", [ctx.line_fact(error)], [error])
    # two releases side by side settle it: the others' lines (the driver named in prose) are the setting, not the fault
    return _first(diagnosis) if several else diagnosis


# TensorFlow saying it has no GPU: its own build query, an empty GPU list, or its GPU package not found / available
_TF_NO_GPU = re.compile(r"(?i)is_built?_with_cuda\(\).{0,30}\bfalse|list_physical_devices\(.GPU.\).{0,30}\[\]|"
                        r"tensorflow(?:-gpu)?\b.{0,60}\b(?:not (?:available|found|detect\w*|see\w*|use\w*)|can.?n?.?t "
                        r"(?:detect|see|use|find|install)|(?:does not|doesn.t) (?:detect|see|use))|"
                        r"no (?:matching )?(?:version|distribution)\b.{0,30}tensorflow-gpu|tensorflow-gpu\b.{0,40}was not "
                        r"found|No version \S+ of (?:the )?tensorflow-gpu|"
                        # Chinese: cannot detect / find / use the GPU
                        r"tensorflow(?:-gpu)?\b.{0,40}(?:检测不到|识别不到|找不到|用不了|无法使用|无法识别|没有识别)")


def _tensorflow_on_windows(ctx: Context) -> Optional[Diagnosis]:
    """TensorFlow on native Windows that finds no GPU (or whose GPU package will not install): from 2.11 on TensorFlow
    publishes no GPU build for native Windows, whatever CUDA is installed (torch beside it may well see the GPU)."""
    text = _text(ctx)
    if not on_windows(ctx, text) or not re.search(r"(?i)\btensorflow", text) or \
            re.search(r"\bWSL|Windows Subsystem for Linux", text):
        return None   # under WSL TensorFlow is the Linux build, with its GPU
    lines = ctx.sheet.lines
    # the answer on the line itself (a comment) or on the next one (an interactive session's output)
    said = [ErrorLine(n, line.strip(), None) for n, line in enumerate(lines, 1)
            if _TF_NO_GPU.search(line + " " + (lines[n].strip() if n < len(lines) else ""))]
    if not said:
        return None
    version = re.search(r"(?i)\b(?:tensorflow(?:-gpu)?|tf)\b\D{0,20}\b2\.(\d+)(?:\.\d+)?\b", text)
    if version and int(version.group(1)) <= 10:
        return None   # a release that still had a Windows GPU build: its CUDA/cuDNN pair is the question
    fix = _table_fix(ctx, "tensorflow", "wheel-platform", frozenset({"windows"}))
    return _make("wheel-platform", "no GPU TensorFlow for native Windows",
                 f"TensorFlow {'2.' + version.group(1) + ' ' if version else ''}has no GPU build for native Windows "
                 "(the last was 2.10): on Windows it runs on the CPU only, and tensorflow-gpu is no longer published",
                 fix, [ctx.line_fact(said[0])], said[:1], confirmed=bool(version))


# a package whose install replaces the torch already there ("pip install xformers re-installs torch 2.0.1")
_REPLACES_TORCH = re.compile(r"(?i)\b(?:re-?install|replac|downgrad|uninstall|overwrit|swap)\w*\s+(?:(?:my|the|our|"
                             r"existing|installed|current)\s+)*(?:torch|pytorch)\b|"
                             # Chinese: reinstalls / overwrites / uninstalls / downgrades torch
                             r"(?:重新安装|重装|覆盖|卸载|降级|替换)了?(?:原来的|已有的|我的)?\s*(?:torch|pytorch)")


def _package_replaces_torch(ctx: Context) -> Optional[Diagnosis]:
    """Installing a compiled package swaps out the torch that was there: each of its wheels is built for one torch
    release (and CUDA), so pip brings that torch along; building the package against the installed torch keeps it."""
    said = _lines_matching(ctx, _REPLACES_TORCH.pattern)
    if not said:
        return None
    text = _text(ctx)
    named = [n for n in re.findall(r"(?i)\b(?:pip3?|uv pip) install\s+(?:-\S+\s+)*([A-Za-z][\w.\-]*)", text)
             if not re.match(r"(?i)torch|pytorch", n) and not re.search(r"\.(?:txt|toml|cfg|in)$", n)]
    package = named[0] if named else _named_tool(text)
    if not package or package in ("torch", "pytorch"):
        return None
    package = re.split(r"[=<>\[]", package)[0]
    return _make("wheel-platform", f"{package}'s wheel brings its own torch",
                 f"each prebuilt {package} wheel is built for one torch release and CUDA, and declares it: pip replaces "
                 f"the torch that is installed with that one",
                 f"build {package} from source against the installed torch, so nothing else is replaced: pip install "
                 f"--no-build-isolation --no-deps --no-binary {package} {package} (or pip install --no-build-isolation "
                 f"git+<{package}'s repository>; the CUDA toolkit of torch's CUDA must be there); or install the {package} "
                 "release built for the installed torch (its release notes pair them) with --no-deps",
                 [ctx.line_fact(said[0])], said[:1], confirmed=False)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def _index_older_than_pin(ctx: Context, pin: Optional[re.Match], offered: Optional[re.Match],
                          errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """`torch==2.4.1` asked of an index whose builds (all +rocm5.6) stop at an older release: the index is that of an
    older ROCm, made before this torch; the ROCm indexes that carry the release are known. An installer that falls
    back to the default torch then leaves a CUDA build on the AMD machine (torch-build), else the pin fails."""
    if not (pin and offered) or pin.group(1).lower() != "torch":
        return None
    versions = [v.strip() for v in offered.group(1).split(",") if v.strip()]
    tags = {v.split("+", 1)[1] for v in versions if "+" in v}
    if len(tags) != 1 or not all("+" in v for v in versions) or not next(iter(tags)).startswith("rocm"):
        return None
    if _release(pin.group(2)) <= max(_release(v) for v in versions):
        return None
    carried = rocm_indexes_for_torch(pin.group(2))
    if not carried:
        return None
    old, new = next(iter(tags)), carried[-1]
    text = _text(ctx)
    fell_back = bool(_ON_CPU.search(text) or re.search(r"(?i)installs? (?:the )?(?:torch )?CUDA|\bCPU\b.{0,40}\btorch "
                                                         r"device|falls? back", text))
    pins = " ".join(dict.fromkeys(re.findall(r"\b(?:torch|torchvision|torchaudio)==[\w.]+", text))) or pin.group(0)
    return _make("torch-build" if fell_back else "wheel-platform",
                 f"the {old} index has no torch {pin.group(2)}",
                 f"the {old} index stops at torch {max(versions, key=_release).split('+')[0]}; torch {pin.group(2)} "
                 f"was published for {' and '.join(carried)}" + (", so the install fell back to the default (CUDA) "
                                                                 "torch, which runs on the CPU here" if fell_back else ""),
                 f"pip install {pins} --index-url https://download.pytorch.org/whl/{new} (the ROCm index of that torch "
                 f"release{'; ' + carried[0] + ' works too' if len(carried) > 1 else ''}); python -c 'import torch; "
                 "print(torch.version.hip)' must print a ROCm version", [ctx.line_fact(errors[0])], errors)


# tensorflow-rocm's version carries the ROCm it was built for: 2.14.0.600 is TensorFlow 2.14.0 for ROCm 6.0
_TF_ROCM = re.compile(r"(?i)tensorflow-rocm\s*(?:/|==|=|\s)\s*(\d+\.\d+\.\d+)\.(\d)(\d)(\d)\b")
_NOT_THERE = re.compile(r"(?i)not found|can.?not (?:be )?(?:install|find)|could not find|no matching|not available|"
                        r"no version")


def _tensorflow_rocm_release(ctx: Context) -> Optional[Diagnosis]:
    """A tensorflow-rocm pin for a ROCm point release (2.14.0.602 for ROCm 6.0.2): AMD builds one per ROCm minor
    release (.600), which runs on its point releases; later ROCm releases' builds are on repo.radeon.com, not PyPI."""
    for n, line in enumerate(ctx.sheet.lines, 1):
        m = _TF_ROCM.search(line)
        if not m or m.group(4) == "0" or not _NOT_THERE.search(_text(ctx)):
            continue
        version, major, minor = m.group(1), m.group(2), m.group(3)
        release = f"{version}.{major}{minor}0"
        return _make("wheel-platform", f"no tensorflow-rocm {m.group(0).split()[-1].split('/')[-1]}",
                     f"tensorflow-rocm's last number is the ROCm release it was built for, one build per ROCm minor "
                     f"release: there is {release} (ROCm {major}.{minor}), and none for the point release {major}."
                     f"{minor}.{m.group(4)}",
                     f"pip install tensorflow-rocm=={release} (the ROCm {major}.{minor} build runs on ROCm {major}.{minor}"
                     f".x); for ROCm 6.1 and newer AMD publishes tensorflow-rocm on repo.radeon.com/rocm/manylinux/"
                     "rocm-rel-X.Y/ rather than PyPI (pip install <that wheel>)",
                     [Fact("error", "wheel-platform", n, line)], [ErrorLine(n, line.strip(), None)])
    return None


def _triton_fork_on_windows(ctx: Context) -> Optional[Diagnosis]:
    """On Windows Triton comes as triton-windows (which supports ROCm's Windows torch too); a triton built from a fork
    (github.com/<someone>/triton) is made for another torch, and torch.compile's kernels fail with it."""
    text = _text(ctx)
    kinds = machine_kinds(on_windows(ctx, text), _vendor(ctx), text)
    fork = re.search(r"(?i)github\.com/(?!triton-lang/|woct0rdho/|openai/)[\w.-]+/triton\b", text)
    if "windows" not in kinds or not fork or re.search(r"(?i)triton-windows", text):
        return None
    said = _lines_matching(ctx, r"(?i)\btriton\b.{0,80}(?:error|cannot|failed)|(?:error|cannot|failed).{0,80}\btriton\b")
    if not said:
        return None
    return _make("wheel-platform", "a Triton fork under Windows torch",
                 f"the triton installed is a fork's build ({fork.group(0)}) made for another torch; on Windows the "
                 "maintained Triton is the triton-windows package, which supports both CUDA and ROCm's Windows torch",
                 _table_fix(ctx, "triton", "wheel-platform", kinds, package="triton"),
                 [ctx.line_fact(said[0])], said[:1])


# a program saying it found no GPU and runs on the CPU (its own warning, not torch's error)
_CPU_FALLBACK = (r"(?i)\bno (?:GPU|CUDA device|CUDA GPU)s? (?:has been |have been |was |were )?(?:detected|found)\b|"
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


@rule("wheel-platform")
def podman_older_than_the_cdi_spec(ctx: Context) -> Optional[Diagnosis]:
    """podman refusing CDI devices ("unresolvable CDI devices") from a spec the NVIDIA Container Toolkit wrote, with a
    podman older than 5: the toolkit writes each spec at the newest CDI spec version it knows, and an older podman's CDI
    library cannot read a spec newer than it, so the devices it names do not resolve."""
    lines = _lines_matching(ctx, r"(?i)unresolvable CDI devices?")
    text = _text(ctx)
    version = re.search(r"(?i)\bpodman\S*\s+(?:version\s+)?(?:now\s+)?v?(\d+)\.(\d+)(?:\.\d+)?", text)
    if not lines or version is None or int(version.group(1)) >= 5:
        return None
    said = f"{version.group(1)}.{version.group(2)}"
    return _make(
        "wheel-platform", f"podman {said} cannot read the CDI spec the toolkit wrote",
        f"the NVIDIA Container Toolkit writes its CDI spec (nvidia-ctk cdi generate, /etc/cdi or /var/run/cdi) at the "
        f"newest spec version it knows; podman {said}'s CDI library is older and rejects that spec, so its devices "
        "are unresolvable although nvidia-ctk cdi list shows them",
        "upgrade podman to a release that reads the spec version (podman 5.x), or go back to the toolkit release "
        "before the one that broke it (or generate an older spec version) and regenerate: sudo nvidia-ctk cdi generate "
        "--output=/etc/cdi/nvidia.yaml", [], lines)


@rule("wheel-platform")
def wheel_platform(ctx: Context) -> Optional[Diagnosis]:
    for reading in (_tensorflow_on_windows, _tensorflow_rocm_release, _triton_fork_on_windows):
        found = reading(ctx)
        if found is not None:
            return found
    errors = ctx.of("wheel-platform")
    if not errors and not any(e.family for e in ctx.errors):
        replaced = _package_replaces_torch(ctx)
        if replaced is not None:
            return replaced
    if not errors:
        return _import_failure(ctx, [], attribute_only=True) or _install_complaint(ctx)
    text = "\n".join(e.line for e in errors)
    python = ctx.sheet.values("python")
    if re.search(r"No module named '?triton\.ops", text):
        return _make("wheel-platform", "bitsandbytes is older than the installed triton",
                     "bitsandbytes before 0.45.2 imports triton.ops, which triton 3.2 (the one torch 2.6 and newer "
                     "installs) removed",
                     "pip install --upgrade bitsandbytes (0.45.2 or newer no longer imports triton.ops); keeping "
                     "triton 3.1 works too but holds torch back", [ctx.line_fact(errors[0])], errors)
    amdsmi = _amdsmi_release(ctx, errors)
    if amdsmi is not None:
        return amdsmi
    failed = _import_failure(ctx, errors)
    if failed is not None:
        return failed
    if re.search(r"(?i)Cannot find a working triton installation", text):
        # torch.compile's inductor backend generates Triton kernels; PyPI has Triton for Linux only. The table words the
        # Triton of this platform (triton-windows, the ROCm torch's pytorch-triton-rocm, none on macOS)
        kinds = machine_kinds(ctx.sheet.is_windows, _vendor(ctx), _text(ctx))
        platform = _table_fix(ctx, "triton", "wheel-platform", package="triton")
        return _make("wheel-platform", "torch.compile finds no usable Triton",
                     "torch.compile (the inductor backend) needs Triton, and the installed one is missing or older than "
                     "this torch expects" + ("; PyPI publishes Triton for Linux only" if kinds & {"windows", "macos"}
                                             else ""),
                     f"{platform}; or run without torch.compile (the program's no-compile option, or "
                     "torch._dynamo.config.suppress_errors = True to fall back to eager)",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"\+cu\d+", text) and re.search(r"(?i)\bmacOS\b|\bdarwin\b|Mac ?OS ?X?\b", _text(ctx)):
        return _make("wheel-platform", "no CUDA builds for macOS",
                     "the +cuXXX torch builds exist for Linux and Windows only; macOS has no CUDA",
                     "on macOS install the plain release without the +cu suffix (pip install torch==<version> "
                     "torchvision==<version>): it runs on the CPU or Apple's MPS", [ctx.line_fact(errors[0])], errors)
    if _BNB_NO_GPU.search(text) and _gpu_left_idle(ctx) is not None:
        return None   # torch itself runs on the CPU: its build is the cause (build_without_gpu), bitsandbytes follows
    if re.search(r"(?i)bitsandbytes|CUDA Setup failed|'NoneType' object has no attribute 'c", text):
        return _make("wheel-platform", "bitsandbytes has no GPU binary for this platform",
                     "the installed bitsandbytes carries no native library for this OS and GPU (releases before 0.43 "
                     "had no Windows build; the PyPI wheels before 0.49 had no ROCm build), so its GPU functions are "
                     "None",
                     "pip install -U 'bitsandbytes>=0.43' (Windows or CUDA: the wheels carry the library); on ROCm, "
                     "pip install -U 'bitsandbytes>=0.49' or build the multi-backend bitsandbytes from source "
                     "(cmake -DCOMPUTE_BACKEND=hip -S . && make && pip install .); python -m bitsandbytes shows what "
                     "it loads", [ctx.line_fact(errors[0])], errors)
    bits = ctx.sheet.first("python_bits")
    if bits is not None:   # no wheel for any version: the Python itself is 32-bit, and the wheels are 64-bit only
        return _make("wheel-platform", "a 32-bit Python",
                     "this Python is a 32-bit build; torch and the other ML packages publish 64-bit wheels only, so "
                     "pip finds none (or only ancient source releases)",
                     "install a 64-bit Python (the x86-64 installer from python.org, or conda/uv) and make a fresh "
                     "environment with it; python -c 'import struct; print(struct.calcsize(\"P\") * 8)' must print 64",
                     [bits, ctx.line_fact(errors[0])], errors)
    compiler = re.search(r"(?i)Microsoft Visual C\+\+ 1\d\.\d or greater is required", text)
    if compiler:
        # pip found no wheel for this Python and platform, so it builds from source, and Windows has no compiler
        built = _isolated_build(ctx) or "the package"
        own = _table_fix(ctx, built, "wheel-platform", package=built) if built != "the package" else None
        return _make("wheel-platform", f"no {built} wheel for this Python on Windows",
                     f"pip found no {built} wheel for this Python and platform and fell back to building it from source, "
                     "which needs the MSVC compiler",
                     (own + "; or " if own else "") + f"use a Python that {built} publishes Windows wheels for (its PyPI "
                     "files list the cpXY tags), or install the Microsoft C++ Build Tools (the \"Desktop development with "
                     "C++\" workload) so the source build can run", [ctx.line_fact(errors[0])], errors)
    m = _WHEEL.search(text)
    if m:
        tag, platform = m.group(3), m.group(5)
        wanted = f"3.{tag[3:]}" if tag.startswith("cp3") else None
        here = [p for p in python if p != wanted]
        cause = f"{m.group(1)} {m.group(2)} is built for {'Python ' + wanted if wanted else tag} on {platform}"
        if here:
            cause += f"; this Python is {here[-1]}"
        if wanted and here:
            fix = (f"use a Python {wanted} environment (uv venv -p {wanted}, or conda create -n env python={wanted}), "
                   f"or download the wheel tagged cp{here[-1].replace('.', '')}")
        elif wanted:
            fix = (f"this wheel needs Python {wanted} (check python --version): use a Python {wanted} environment, "
                   "or the wheel built for your Python")
        else:
            fix = f"download the wheel built for this platform and Python (not {platform}, {tag})"
        if "win" in platform and not ctx.sheet.is_windows or ("linux" in platform and ctx.sheet.is_windows):
            fix = f"this is a {platform} wheel: use the one built for this OS (or run under WSL 2 / Linux)"
        machine = ctx.sheet.values("cpu_arch")
        built = "aarch64" if re.search(r"aarch64|arm64", platform) else "x86_64" if re.search(r"x86_64|amd64",
                                                                                                 platform) else None
        if machine and built and machine[-1] != built:
            fix = (f"this wheel is built for {built} ({platform}); this machine is {machine[-1]}: install the "
                   f"{machine[-1]} build (a wheel tagged linux_{machine[-1]} / manylinux_*_{machine[-1]}, built from "
                   "source where the project publishes none; on a Jetson, NVIDIA's JetPack wheels)")
            cause = f"{cause}; this machine's CPU is {machine[-1]}"
        return _make("wheel-platform", "a wheel for another Python or platform", cause, fix,
                     [ctx.line_fact(errors[0])], errors)
    uv = re.search(r"(?i)there is no version of ([\w\-]+)==([\w.+]+)|available for a different Python \(you have "
                   r"Python (3\.\d+)\)", text + "\n" + "\n".join(ctx.sheet.lines))
    if uv and re.search(r"(?i)different Python", "\n".join(ctx.sheet.lines)):
        have = re.search(r"you have Python (3\.\d+)", "\n".join(ctx.sheet.lines))
        pinned = re.search(r"there is no version of ([\w\-]+)==([\w.+]+)", "\n".join(ctx.sheet.lines))
        what = f"{pinned.group(1)} {pinned.group(2)}" if pinned else "this release"
        py = have.group(1) if have else (python[-1] if python else "this Python")
        return _make("wheel-platform", f"no {what} for Python {py}",
                     f"the index has {what} only for other Pythons than {py} (uv's resolver says so)",
                     f"use an older Python for {what} (uv venv -p 3.11, or uv python pin 3.11; conda create -n env "
                     f"python=3.11), or a newer release of it that has Python {py} wheels",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"not a supported wheel", text) and python:
        # no wheel file named: the wheels on offer are for another Python; the release before this one usually has them
        major, minor = (int(x) for x in python[-1].split(".")[:2])
        older = f"{major}.{minor - 1}"
        return _make("wheel-platform", f"the wheels are not built for Python {python[-1]}",
                     f"pip refuses the wheels as built for another Python than {python[-1]} (or another platform)",
                     f"use an environment with the Python the wheels are built for, usually the release before: "
                     f"Python {older} (uv venv -p {older}, conda create -n env python={older}); the cpXY in a wheel's "
                     "file name says which", [ctx.line_fact(errors[0])], errors)
    package = re.search(r"(?:requirement|distribution found for) (\S+)", text)
    name = package.group(1).rstrip(";`'\".,)") if package else "the package"
    py = python[-1] if python else None
    cause = (f"the index has no {name} for this Python{' (' + py + ')' if py else ''} and platform")
    pin = re.fullmatch(r"([\w\-]+)==([\w.]+?)(?:\+(\w+))?", name)
    offered = re.search(r"\(from versions: ([^)]*)\)", text)
    same = [v.strip() for v in offered.group(1).split(",") if pin and v.strip().split("+")[0] == pin.group(2)] \
        if offered else []
    if re.match(r"(?i)torch\b", name) and offered and all(re.fullmatch(r"0\.1\.2(?:\.post\d+)?", v.strip())
                                                          for v in offered.group(1).split(",")):
        # PyPI's only files for torch that fit every interpreter are the 0.1.2 placeholders (source releases): no torch
        # wheel fits this one, a 32-bit Python (torch is 64-bit only) or a Python newer than the releases
        newest = _python_for("torch", pin.group(2)) if pin else None
        return _make("wheel-platform", "no torch wheel fits this Python",
                     f"pip sees only torch's 0.1.2 placeholder releases, so no torch wheel matches this interpreter: it "
                     f"is a 32-bit Python (torch publishes 64-bit wheels only), or a Python{' ' + py if py else ''} "
                     "newer than the torch releases",
                     (f"torch {pin.group(2)} was built for Python up to {newest}, and this one is {py}: use a 64-bit "
                      f"Python {newest} (conda create -n env python={newest}, uv venv -p {newest}) for that pin, or a "
                      f"torch release built for Python {py}" if newest and py and _older(newest, py) else
                      "install a 64-bit Python of a version torch supports (python.org's x86-64 installer, conda or uv: "
                      "uv venv -p 3.12) and rerun the pip command in it; python -c 'import struct, sys; "
                      "print(struct.calcsize(\"P\") * 8, sys.version)' must print 64"), [ctx.line_fact(errors[0])],
                     errors)
    parent = re.search(r"\(from (torch==[\w.]+\+(rocm[\d.]+|cu\d+))\)", text)
    if parent:
        fix = (f"{name} is published on the index of {parent.group(1)}, not on PyPI: install with that index, pip "
               f"install torch --index-url https://download.pytorch.org/whl/{parent.group(2)}, so the dependency "
               "resolves there")
        return _make("wheel-platform", f"{name} is not on PyPI", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and re.search(r"\.dev\d|\+rocm|post\d+\.dev", name):
        fix = (f"{name} is a development build the project makes for its own ROCm image, not on PyPI: use the "
               "project's ROCm docker image (its release notes name the tag) instead of pip")
        return _make("wheel-platform", f"{name} is not published", cause, fix, [ctx.line_fact(errors[0])], errors)
    if ctx.sheet.is_windows and re.search(r"(?i)whl/rocm|\+rocm|rocm\d|-rocm\b", text + "\n" + "\n".join(ctx.sheet.lines)):
        torchlike = re.match(r"(?i)torch|pytorch", name)
        fix = (("pytorch.org's ROCm wheels are Linux only" if torchlike else f"{name.split('==')[0]} has ROCm builds "
                "for Linux only") + ": run under WSL 2 (AMD's ROCm for WSL) or Linux, or install "
               "AMD's ROCm wheels for Windows (repo.radeon.com) for the GPUs they list")
        return _make("wheel-platform", f"no ROCm {name} for Windows", cause, fix, [ctx.line_fact(errors[0])], errors)
    base = pin.group(1) if pin else re.split(r"[=<>!~\[;]", name)[0]
    kinds = machine_kinds(on_windows(ctx, _text(ctx)), _vendor(ctx), _text(ctx))
    platform = _table_fix(ctx, base, "wheel-platform", kinds, package=base) if kinds & {"windows", "macos"} else None
    if platform and tool_fix(base, "wheel-platform", kinds, {}) != tool_fix(base, "wheel-platform", frozenset(), {}):
        # the package has a build of its own for this OS, or none at all (triton-windows; vLLM, flash-attn on Windows)
        return _make("wheel-platform", f"no {base} on PyPI for this platform", cause, platform,
                     [ctx.line_fact(errors[0])], errors)
    if offered and offered.group(1).strip() == "none":
        base = pin.group(1) if pin else name.split("==")[0].split(">")[0].split("<")[0]
        newest = _python_for(pin.group(1), pin.group(2)) if pin else None
        if newest:
            fix = (f"{pin.group(1)} {pin.group(2)} was built for Python up to {newest}, and this Python"
                   f"{' (' + py + ')' if py else ''} is not one of them: create the environment with an older Python, "
                   f"{newest} "
                   f"(conda create -n env python={newest}, uv venv -p {newest}) and install the pin there")
        else:
            # the Python just below this one is the likeliest to have wheels (a package reaches a new Python late),
            # and never above 3.12, the newest every GPU index (ROCm, DirectML, CUDA) has carried for long
            older = f"3.{min(int(py.split('.')[1]) - 1, 12)}" if py and re.fullmatch(r"3\.\d+", py) else "3.12"
            before = f"3.{int(older.split('.')[1]) - 1}"
            fix = (f"the index has no {base} wheel at all for this Python{' (' + py + ')' if py else ''} and "
                   f"platform: use an older Python (a {older} environment, else {before}: uv venv -p {older}, conda "
                   f"create -n env python={older}; delete the old venv folder first); a new Python gets {base} wheels "
                   "only months after its release, and old pins never do")
        return _make("wheel-platform", f"no {base} for this Python", cause, fix, [ctx.line_fact(errors[0])], errors)
    stale = _index_older_than_pin(ctx, pin, offered, errors)
    if stale is not None:
        return stale
    if pin and same:
        fix = (f"the index has no {name} for this platform; it does have {', '.join(same)}: pick one of those "
               f"(pip install {pin.group(1)}=={same[-1]} -f <the index>)")
        return _make("wheel-platform", f"no {name} for this platform", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and offered:
        fix = (f"{pin.group(1)}=={pin.group(2)} has no wheel for this Python{' (' + py + ')' if py else ''}: install "
               f"a {pin.group(1)} release the index lists for it (from versions: {offered.group(1)[-60:]}), or use an "
               f"older Python for {pin.group(1)} {pin.group(2)}"
               + (f" (it was built for Python up to {_python_for(pin.group(1), pin.group(2))}: conda create -n env "
                  f"python={_python_for(pin.group(1), pin.group(2))})" if _python_for(pin.group(1), pin.group(2))
                  else ""))
        return _make("wheel-platform", f"no {name} for this Python", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and re.search(r"\+cu\d+|\+rocm", name) and not ctx.sheet.is_windows:
        fix = (f"{name} has no wheel for this Python{' (' + py + ')' if py else ''}: create the environment with an "
               f"older Python that release was built for (conda create -n env python=3.9, uv venv -p 3.9), then "
               f"install the pin again; a torch installed by hand instead is usually the CPU build")
        diagnosis = _make("wheel-platform", f"no {name} for this Python", cause, fix, [ctx.line_fact(errors[0])],
                          errors + ctx.of("torch-build"))
        if ctx.of("torch-build"):   # the CPU torch that followed is its symptom
            diagnosis.rank = family("torch-build").rank - 1
        return diagnosis
    if not re.search(r"(?i)could not find a version|no matching distribution|from versions|not a supported wheel|"
                     r"no version of|is not available for|no wheels?\b|wheels? (?:for|is not)|requires a different "
                     r"python", _text(ctx)):
        return None   # no installer said it found no wheel: a module missing at run time (a kernel not built) is not
    if ctx.sheet.is_windows and re.search(r"rocm", text):
        fix = "pytorch.org's ROCm wheels are Linux only: use WSL 2 or Linux, or AMD's Windows wheels"
    else:
        fix = (f"use a Python the index builds for (3.10-3.12 for most ROCm wheels; check with pip index versions "
               f"{name.split('==')[0]} --index-url <the index>), or pick a version the index lists")
    return _make("wheel-platform", "no wheel for this Python or platform", cause, fix, [ctx.line_fact(errors[0])],
                 errors)


_SYMBOL_LIB = re.compile(r"(?:site-packages|dist-packages)[/\\]([\w\-]+)[/\\]\S*?\.(?:so|pyd|dll)|"
                         r"\b(lib\w+?)(?:_\w+)?\.so\b|\b(\w+?)(?:\.cpython\S*)?\.so: undefined symbol")


# The compiled modules people meet in these errors, by the name in the path or the import, and the pip package that
# ships each (the fix reinstalls the package, not the module)
_MODULE_PACKAGES = (
    (r"flash_attn", "flash-attn"),
    # vLLM 0.1-0.2 shipped its kernels as top-level modules of their own (setup.py's CUDAExtension names)
    (r"vllm|\b(?:cache|attention|activation|pos_encoding|layernorm|quantization)_ops\b|\b_moe_C\b", "vllm"), (r"xformers", "xformers"), (r"bitsandbytes", "bitsandbytes"),
    (r"torchaudio|_torch_sox", "torchaudio"), (r"torchvision", "torchvision"), (r"deepspeed|fused_adam|cpu_adam|"
    r"transformer_inference|fused_lamb", "deepspeed"), (r"\bapex\b|amp_C|fused_layer_norm_cuda", "apex"),
    (r"sageattention|_qattn", "sageattention"), (r"mamba_ssm|selective_scan", "mamba-ssm"),
    (r"causal_conv1d", "causal-conv1d"), (r"torch_scatter|torch_sparse|torch_cluster|torch_spline_conv", "torch-scatter"),
    (r"mmcv", "mmcv"), (r"detectron2", "detectron2"), (r"pytorch3d", "pytorch3d"), (r"exllamav2\w*", "exllamav2"), (r"auto_gptq|exllama\w*",
    "auto-gptq"), (r"transformer_engine", "transformer-engine"), (r"llama_cpp", "llama-cpp-python"),
    (r"torch_directml", "torch-directml"), (r"natten", "natten"), (r"spconv", "spconv"), (r"gsplat|diff_gaussian",
    "the gaussian-splatting extension"), (r"nvdiffrast", "nvdiffrast"), (r"tinycudann|tiny_cuda_nn", "tinycudann"),
)


def _extension_package(ctx: Context, errors: list[ErrorLine]) -> Optional[str]:
    """The pip package of the compiled module that failed to load: a path or module name on the error lines, else the
    import right above the first one (a traceback's `import flash_attn_2_cuda`), else the tool the paste names."""
    first = errors[0].line_no
    above = [l for l in ctx.sheet.lines[max(0, first - 4): first - 1] if re.search(r"\bimport\b|site-packages", l)]
    for text in [e.line for e in errors] + above[::-1]:
        found = _package_of(text) or ""
        module = re.search(r"(?:while importing|import)\s+([\w.]+)", text)
        where = " ".join(x for x in (found, module.group(1) if module else "", text) if x)
        for pattern, package in _MODULE_PACKAGES:
            if re.search(pattern, where, re.IGNORECASE):
                return package
        if found and found not in ("torch", "c10", "libtorch", "libc10"):
            return found
    return next((t for t in (ctx.tool(errors),) if t not in (None, "torch")), None)



def _listed_torch(ctx: Context) -> Optional[str]:
    """torch's version from a package list (`- torch 2.1.2`, `torch==2.1.2`, `torch: 2.1.2`) when no fact holds it."""
    found = re.search(r"(?im)^\W*torch\s*(?:==|:|\s)\s*(\d+\.\d+\.\d+[\w.+]*)\s*$", _text(ctx))
    return found.group(1) if found else None


def _abi_said(ctx: Context, errors: list[ErrorLine], text: str, torch: Optional[str]) -> Optional[Diagnosis]:
    """Kinds the line names by itself: an operator a compiled package registers that is not there (its build is
    for another torch), xformers' own report of the torch it was built for, a library of a ROCm before 3.5 (HCC)."""
    evidence = [ctx.line_fact(errors[0])]
    operator = re.search(r"No such operator (\w+)::", text)
    built = re.search(r"xFormers was built for:?\s*PyTorch (\S+).{0,40}\(you have (\S+)\)", _text(ctx))
    if operator or built and not built.group(2).endswith("+cpu"):
        package = "xformers" if built else operator.group(1).replace("_", "-")
        have = built.group(2) if built else torch
        return _make("abi-mismatch", f"{package} is built for another torch",
                     f"{package}'s compiled operators were built for {'torch ' + built.group(1) if built else 'another torch'}"
                     f"{', and torch is ' + have if have else ''}",
                     f"pip uninstall -y {package}; pip install {package} built for the installed torch"
                     f"{' ' + have if have else ''} (from torch's own index, or a release pinned to it); or run "
                     f"without it{' (drop --xformers: torch SDPA does the same)' if package == 'xformers' else ''}",
                     evidence, errors)
    versioned = re.search(r"symbol (\w+),? version (\S+) not defined in file (\S+?)(?:\.so[.\d]*)? with link time", text)
    if versioned:
        # the extension was linked against a newer release of the library than the copy the loader finds first
        lib = versioned.group(2)
        base = re.sub(r"\.so.*", "", lib)
        package = _extension_package(ctx, errors) or "the extension"
        path = re.search(r"(?m)LD_LIBRARY_PATH=(\S+)", _text(ctx))
        return _make("abi-mismatch", f"an older {lib} is loaded first",
                     f"{package} was built against a newer {lib} (one that has {versioned.group(1)}) than the copy the "
                     "loader finds first" + (f" (LD_LIBRARY_PATH={path.group(1)[:80]})" if path else ""),
                     f"put the newer {base} first: drop the old {base} folder from LD_LIBRARY_PATH or put the folder of "
                     f"a newer {lib} before it (ldconfig -p | grep {base} lists the copies; a {base.removeprefix('lib')} "
                     f"release at least as new as {package} was built with), then start Python again", evidence, errors)
    toolkit = re.search(r"(?i)compiled with a version of Cuda that does not match.*?compiled with Cuda (\d[\d.]*\d|None)",
                        _text(ctx), re.S)
    if toolkit and toolkit.group(1) != "None":
        # torch.utils.cpp_extension compares nvcc's CUDA with torch.version.cuda: the extension must be compiled by
        # the toolkit torch was built with
        want = ".".join(toolkit.group(1).split(".")[:2])
        nvcc = re.search(r"(?i)Cuda compilation tools, release ([\d.]+)", _text(ctx))
        package = _extension_package(ctx, errors) or ctx.tool(errors) or "the extension"
        return _make("abi-mismatch", "the CUDA toolkit differs from torch's",
                     f"{package}'s CUDA code is compiled by nvcc{' of CUDA ' + nvcc.group(1) if nvcc else ''}, while "
                     f"torch was built with CUDA {want}",
                     f"build with CUDA {want}'s toolkit: install it and export CUDA_HOME=/usr/local/cuda-{want} "
                     f"PATH=/usr/local/cuda-{want}/bin:$PATH before the build; or install a torch built for the local "
                     "CUDA (its index, e.g. .../whl/cuXYZ) so the two agree", evidence, errors)
    rocm = re.search(r"(?i)\brocm[\s-]{0,3}v?(\d+)\.(\d+)", _text(ctx))
    if "libhip_hcc" in text and rocm and (rocm.group(1), rocm.group(2)) == ("3", "5"):
        # ROCm 3.5, the release of the rename to libamdhip64, still installs libhip_hcc.so in /opt/rocm/hip/lib, a
        # folder the loader does not search (later releases drop it: the abi reading below)
        return _make("rocm-libs-missing", "the HIP runtime's folder is not on the loader's path",
                     f"ROCm {rocm.group(1)}.{rocm.group(2)} installs libhip_hcc.so in /opt/rocm/hip/lib, which the "
                     "loader does not search", "export LD_LIBRARY_PATH=/opt/rocm/hip/lib:/opt/rocm/lib:$LD_LIBRARY_PATH "
                     "(or add /opt/rocm/hip/lib to /etc/ld.so.conf.d/rocm.conf and run sudo ldconfig)", evidence, errors)
    if re.search(r"libmcwamp|libhip_hcc", text):
        return _make("abi-mismatch", "a build for a ROCm before 3.5",
                     "libmcwamp is the HCC runtime of ROCm 3.x and older; the framework package was built for it and "
                     "the installed ROCm no longer has it",
                     "install the framework build that matches the installed ROCm (pip install tensorflow-rocm or torch "
                     "of the release built for that ROCm), or the ROCm the package was built for", evidence, errors)
    return None


def _companion_of_other_build(ctx: Context, package: str, torch: Optional[str],
                              errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """torch is one build of pytorch.org's (+cpu, +cu121, +rocm6.2) and its companion (torchvision, torchaudio) another:
    the companion came from PyPI (its default build) or another index, so its compiled operators do not register."""
    tag = re.search(r"\+(cpu|cu\d+|rocm[\d.]+)$", torch or "")
    if tag is None:
        return None
    versions = [v for line in ctx.sheet.lines if re.search(rf"(?i)\b{package}\b", line)
                for v in [re.findall(r"(?<![\w.])(\d+\.\d+\.\d+(?:\+[\w.]+)?)(?![\w.])", line)] if v]
    if not versions:
        return None
    have = versions[-1][-1]
    if have.endswith("+" + tag.group(1)):
        return None
    release = have.split("+")[0]
    # only the build differs where the releases pair (torchvision 0.N with torch 2.(N-15), torchaudio 2.N with 2.N);
    # otherwise the release is what differs, the abi reading's case
    major, minor = (int(x) for x in release.split(".")[:2])
    paired = (2, minor - 15) if package == "torchvision" and major == 0 else (major, minor)
    if _release(torch)[:2] != paired:
        return None
    return _make("wheel-platform", f"{package} is another build than torch's +{tag.group(1)}",
                 f"torch is {torch}, pytorch.org's +{tag.group(1)} build, but {package} {have} is "
                 f"{'another build (+' + have.split('+')[1] + ')' if '+' in have else 'PyPI’s default build'}, made "
                 f"for another torch build, so its compiled operators do not register",
                 f"install the {package} of the same build: pip install --force-reinstall {package}=={release}+"
                 f"{tag.group(1)} --index-url https://download.pytorch.org/whl/{tag.group(1)} (the index torch came "
                 "from)", [ctx.line_fact(errors[0])], errors)


# the oldest ROCm a package's ROCm build runs on, where its sources say so (exllamav2: pull 154 / issue 46, ROCm 5.6)
_ROCM_MINIMUM = {"exllamav2": (5, 6)}


def _rocm_older_than_needed(ctx: Context, package: Optional[str], errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A ROCm library's symbol (hipblas*, rocblas*, hip*) undefined in a package built for a newer ROCm than the one
    the paste shows: the installed ROCm's library predates the call, so the machine's ROCm must move, not the build."""
    need = _ROCM_MINIMUM.get(package or "")
    symbol = re.search(r"undefined symbol:?\s*(_Z\w*?)?((?:hip|roc)\w+)", "\n".join(e.line for e in errors))
    if need is None or symbol is None:
        return None
    shown = re.findall(r"(?i)\brocm[\s_-]?(\d+)\.(\d+)", _text(ctx)) + [
        tuple(v.split(".")[:2]) for v in ctx.sheet.values("rocm")]
    if not shown:
        return None
    have = min((int(a), int(b)) for a, b in shown)
    if have >= need:
        return None
    want = f"{need[0]}.{need[1]}"
    return _make("abi-mismatch", f"{package} needs ROCm {want} or newer",
                 f"{package}'s ROCm build calls {symbol.group(2)}, which the ROCm {have[0]}.{have[1]} libraries here do "
                 f"not export: {package} needs ROCm {want} or newer",
                 f"move to ROCm {want} or newer with the ROCm torch built for it (pip install torch --index-url "
                 f"https://download.pytorch.org/whl/rocm<that ROCm>), then rebuild {package} against that torch (pip "
                 "install . --no-build-isolation in its checkout)", [ctx.line_fact(errors[0])], errors)


@rule("abi-mismatch")
def abi_mismatch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an error line saying a compiled module cannot link to what is installed (an undefined symbol, a
    procedure not found in a DLL, an operator that does not exist, a module built for another NumPy, GLIBCXX, a CUDA
    toolkit that differs), the module's package (its path, its import), and the torch version the paste shows. The fix
    rebuilds or reinstalls that package for that torch; the wording of the line only says which of the kinds it is."""
    errors = ctx.of("abi-mismatch")
    if not errors:
        return None
    first = errors[0]
    if first.catalogue is not None and first.catalogue.entry.id == "undefined-symbol-rocm-libs":
        return _restate("abi-mismatch", first, errors)
    text = "\n".join(e.line for e in errors)
    torch = next((f.value for f in ctx.sheet.of("torch") if f.value != "not-rocm"), None) or _listed_torch(ctx)
    evidence = [ctx.line_fact(first)]
    said = _abi_said(ctx, errors, text, torch)
    if said is not None:
        return said
    if re.search(r"compiled with Cuda None", text):
        return None   # torch itself has no CUDA (or ROCm): torch-build's reading
    if re.search(r"(?i)numpy|_ARRAY_API|multiarray failed to import|module compiled against ABI version", text):
        return _make("abi-mismatch", "a module built for NumPy 1.x under NumPy 2",
                     "the extension was compiled against NumPy 1.x; NumPy 2 changed the ABI",
                     "pip install 'numpy<2' (or upgrade the module to a release built for NumPy 2)", evidence, errors)
    if re.search(r"GLIBCXX|CXXABI_\d", text):
        return _make("abi-mismatch", "an older libstdc++ than the extension needs",
                     "the process loads a libstdc++ (often conda's) older than the one the extension was built with",
                     "conda install -c conda-forge 'libstdcxx-ng>=12' in that environment, or put the system's first: "
                     "export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6", evidence, errors)
    if re.search(r"torchvision::\w+|torchvision versions are incompatible", text):
        other_build = _companion_of_other_build(ctx, "torchvision", torch, errors)
        if other_build is not None:
            return other_build
        return _make("abi-mismatch", "torchvision does not match torch",
                     "torchvision's compiled operators were built for another torch release or build",
                     "install torchvision from the same index as torch, the matching release (torchvision 0.N pairs "
                     f"with torch 2.(N-15)){': torch is ' + torch if torch else ''}; e.g. pip install --force-reinstall "
                     "torch torchvision --index-url <torch's index>", evidence, errors)
    joined = "\n".join(ctx.sheet.lines)
    compiled = re.search(r"used to compile\s+PyTorch \(([\d.]+)\)", joined)
    if re.search(r"(?i)detected CUDA version", text):
        want = compiled.group(1) if compiled else "the one torch was built with"
        return _make("abi-mismatch", "the CUDA toolkit differs from torch's",
                     "an extension is built with nvcc from another CUDA than the one torch was compiled with",
                     f"build with CUDA {want} (torch.version.cuda): install that toolkit and point CUDA_HOME at it, or "
                     "install the prebuilt wheel of the extension instead of building it", evidence, errors)
    if re.search(r"(?i)\bODR\b|duplicate libamd_smi", text):
        return _make("abi-mismatch", "two copies of libamd_smi in one process",
                     "the separate amdsmi package loads its own libamd_smi beside the one the ROCm torch wheel bundles",
                     "pip uninstall amdsmi (the torch wheel brings what it needs)", evidence, errors)
    against = f"torch {torch}" if torch else "the installed torch"
    if re.search(r"torch_extensions", text + "\n" + joined):
        return _make("abi-mismatch", "a JIT-built extension cached for another torch",
                     "torch's JIT extensions (DeepSpeed ops, fused kernels) are compiled once into "
                     "~/.cache/torch_extensions, in a folder named for the Python and CUDA (py310_cu121), not for the "
                     "torch version: a build cached before a torch upgrade is loaded again and no longer links",
                     f"rm -rf ~/.cache/torch_extensions (or $TORCH_EXTENSIONS_DIR), then rerun so the ops rebuild "
                     f"against {against} (after every torch version change: the cache does not notice it); a package "
                     f"pinning a torch release (its requirements): that torch version; for DeepSpeed's prebuilt ops: DS_BUILD_OPS=0 pip install --force-reinstall "
                     "deepspeed", evidence, errors)
    package = _extension_package(ctx, errors)
    if re.search(r"(?i)xFormers", text):
        package = "xformers"
    too_old = _rocm_older_than_needed(ctx, package, errors)
    if too_old is not None:
        return too_old
    windows = re.search(r"(?i)procedure could not be found|DLL load failed", text)
    # the package's own remedy from the tool table (tool_fixes.yaml), else the reinstall every extension takes
    # pip knows the extension by its distribution's name where that differs (awq_ext comes with autoawq-kernels)
    pip_name = (distribution_of(package) if package in IMPORT_DISTRIBUTIONS else package) or "<the extension>"
    fix = _table_fix(ctx, package, "abi-mismatch", package=package) or (
        f"pip uninstall -y {pip_name}; reinstall it built for {against} (the wheel made for that "
        f"torch and CUDA/ROCm, or pip install --no-build-isolation {pip_name} so it compiles "
        "against the torch you have)")
    what = "a function it needs" if windows else "a symbol"
    return _make("abi-mismatch", f"{package or 'a compiled extension'} was built for another torch",
                 f"{package or 'the extension'} calls {what} the installed torch (or library) does not export: it "
                 f"was compiled against another release than {against}", fix, evidence, errors)


def _package_of(line: str) -> Optional[str]:
    m = _SYMBOL_LIB.search(line)
    if not m:
        return None
    name = next(g for g in m.groups() if g)
    return re.sub(r"^lib", "", name) if name.startswith("libbitsandbytes") else name


# system libraries a wheel links, by soname prefix: the package that has them (Debian/Ubuntu names)
_SYSTEM_LIBS = {"libmpi": "libopenmpi-dev", "libopenblas": "libopenblas-dev", "libnuma": "libnuma-dev",
                "libgomp": "libgomp1", "libomp": "libomp-dev", "libelf": "libelf1", "libtinfo": "libtinfo6",
                # opencv-python's GUI build (opencv-python-headless needs neither), soundfile, DeepSpeed's async I/O
                "libGL.so": "libgl1", "libgthread": "libglib2.0-0", "libglib": "libglib2.0-0", "libSM.so": "libsm6",
                "libXext": "libxext6", "libsndfile": "libsndfile1", "libaio": "libaio-dev"}
# the pip wheel (before its -cuXX) of each CUDA library
_CUDA_WHEELS = {"cublas": "nvidia-cublas", "nvrtc": "nvidia-cuda-nvrtc", "cufft": "nvidia-cufft",
                "curand": "nvidia-curand", "cusparse": "nvidia-cusparse", "cudart": "nvidia-cuda-runtime",
                "cudnn": "nvidia-cudnn"}
# a ROCm / HIP library by its name: the ROCm runtime (or TheRock's wheels) provides it
_ROCM_LIBRARY = re.compile(r"(?i)hip|roc(?:m|blas|fft|rand|solver|sparse|tx|profiler|tracer|_smi)|hsa|miopen|rccl|"
                           r"amd_comgr|amd_smi|amdpython|drm_amdgpu|tensile|migraphx")
# NVIDIA's CUDA libraries on Windows: cudnn_ops_infer64_8.dll, cublas64_12.dll, cublasLt64_11.dll, cudart64_110.dll
_CUDA_WINDOWS_DLL = re.compile(r"(?i)\b(cudnn|cublas|cublasLt|cudart|cufft|curand|cusparse|nvrtc)\w*?64_(\d{1,2})\d*\w*\.dll")


def _missing_library_fix(ctx: Context, name: str, text: str) -> Optional[tuple[str, str, str]]:
    """(title, cause, fix) for the missing libraries that are not ROCm's own runtime."""
    therock = ctx.sheet.has("layout", "therock")
    if re.search(r"(?i)cannot enable executable stack", text):
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
    compiler = re.search(r"(?i)\b(hipcc|hipconfig|amdclang\+*|hipify-perl)\W*(?:command )?not found|Unable to find (hipcc)",
                         text)
    if compiler:
        tool = compiler.group(1) or compiler.group(2)
        where = ('pip install "rocm[devel]" from the index the rocm wheels came from (its bin/ holds them)' if therock
                 else "sudo amdgpu-install --usecase=rocm,hiplibsdk (or the distribution's rocm-hip-sdk / hipcc package)")
        return (f"{tool} is not found", f"building GPU code needs ROCm's compiler tools ({tool}), which are not "
                "installed or not on PATH", f"{where}; then export PATH=/opt/rocm/bin:$PATH ROCM_PATH=/opt/rocm before "
                f"the build (where {tool} is installed but not found)")
    if re.search(r"rocm\[devel\]|rocm_sdk_devel", text):
        return ("the ROCm SDK's development package is missing", "this ROCm came as wheels without rocm[devel], which "
                "holds the tools and headers", "pip install \"rocm[devel]\" from the same index as rocm (in the same "
                "environment)")
    if re.search(r"(?i)amdsmi", text):
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
        if cuda_lib.group(1) != "cudnn" and int(major) >= 11:
            # a CUDA library, not cuDNN: its own nvidia-* wheel for that CUDA major (cublasLt is in nvidia-cublas)
            wheel = _CUDA_WHEELS.get(re.sub(r"Lt$", "", cuda_lib.group(1)), "nvidia-" + cuda_lib.group(1))
            return (f"{what} {major} is not found", f"the program loads {name} (CUDA {major}'s {what}), which is not "
                    "installed or not on the loader's path (pip's nvidia-* wheels put theirs inside site-packages)",
                    f"install CUDA {major}'s {what}: pip install {wheel}-cu{major} (or the CUDA {major} toolkit) and put "
                    f"its lib folder on the loader's path: export LD_LIBRARY_PATH=<site-packages>/nvidia/"
                    f"{wheel.removeprefix('nvidia-').replace('-', '_')}/lib:$LD_LIBRARY_PATH (or import torch "
                    "first, whose CUDA build loads them)")
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
            return (f"{name} is not found", f"the wheel links the system's {name}, which is not installed",
                    f"sudo apt-get install {package} (the distribution package with {name})")
    if re.search(r"CUDA_HOME does not exist|CUDA_HOME environment variable is not set", text) and _vendor(ctx) != "amd":
        tool = ctx.tool() or "the extension"
        return ("the CUDA toolkit (nvcc) is not found", f"{tool} compiles CUDA code at install or first use and needs "
                "the CUDA toolkit's nvcc, which is not installed or not where CUDA_HOME points (torch's wheels carry the "
                "CUDA runtime, not the compiler)",
                "install the CUDA toolkit of torch's CUDA (python -c 'import torch; print(torch.version.cuda)'): the "
                "NVIDIA installer, conda install -c nvidia cuda-toolkit=<that version>, or pip install "
                "nvidia-cuda-nvcc-cu12; then export CUDA_HOME=/usr/local/cuda-<that version> (or $CONDA_PREFIX); or "
                f"install a prebuilt {tool} wheel so nothing compiles (DeepSpeed: DS_BUILD_OPS=0, ops JIT-built later)")
    if re.match(r"libcuda\.so", name):
        return ("the NVIDIA driver's libcuda is not found", "libcuda.so.1 comes with the NVIDIA driver, not with CUDA "
                "or torch: the driver is not installed, or the process (a container, WSL) does not see it",
                "install the NVIDIA driver (nvidia-smi must list the GPU); in a container start it with --gpus all "
                "(NVIDIA Container Toolkit); under WSL 2 put /usr/lib/wsl/lib on LD_LIBRARY_PATH; on an AMD GPU the "
                "program needs its ROCm build instead")
    if re.match(r"lib(?:torch|c10)\w*\.so", name):
        return (f"torch's own {name} is not found", f"an extension links {name} from torch's lib folder, which the "
                "loader does not search unless torch was imported first (or this torch lacks it: a CPU torch has no "
                "libtorch_cuda / libc10_cuda)",
                "import torch before the extension; and install the extension built for the installed torch and its "
                "build (pip install --force-reinstall torch <the extension> from the same index)")
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
        fix = ("libcuda.so comes with the NVIDIA driver; to link without one use the CUDA toolkit's stub: export "
               "LIBRARY_PATH=$CUDA_HOME/lib64/stubs:$LIBRARY_PATH (CUDA_HOME=/usr/local/cuda-<torch's CUDA>)")
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
    zluda = _zluda(ctx)
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
    if first.catalogue is not None and first.catalogue.entry.context:
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
        # not ROCm's: the distribution package or the pip package that ships this library
        fix = (f"install the package that ships {name}: apt-file search {name} (dnf provides '*/{name}') names the "
               "distribution package; a library that lives in site-packages comes with its pip package, so "
               "reinstall that one (pip install --force-reinstall <package>)")
        return _make("rocm-libs-missing", f"{name} is not found", f"the loader cannot find {name}, which is not "
                     "installed or not on its path", fix, [ctx.line_fact(first)], errors, confirmed=False)
    elif re.search(r"(?i)\bnightl(?:y|ies)\b|\brocm-sdk\b|\bTheRock\b|\d\.\d+\.\d+a20\d{6}", _text(ctx)):
        # a ROCm torch nightly (TheRock's wheels) that links a library its rocm-sdk wheels do not bring, or bring but
        # torch does not preload: the nightly's packaging, not the machine
        fix = (f"{name} is a ROCm library this torch nightly links: install the rocm-sdk wheels of the same nightly "
               "(pip install --force-reinstall \"rocm[libraries]\" from the index torch came from) and look for it: "
               f"find $(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') -name '{name}*'; if it "
               "is there, torch's preload list (torch/_rocm_init.py) lacks it, a packaging bug of that nightly: take an "
               f"earlier or later nightly, or LD_PRELOAD=<that file> meanwhile; if not, the rocm-sdk wheels lack {name}")
    elif ctx.sheet.has("layout", "therock"):
        fix = ("this ROCm comes as Python wheels (TheRock), with no /opt/rocm: install its libraries into the same "
               "environment (pip install 'rocm[libraries]' from the index torch came from) and run from that venv")
    else:
        fix = ("install the ROCm runtime (sudo amdgpu-install --usecase=rocm, or your distribution's rocm packages) "
               "or point the loader at it: export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH")
    return _make("rocm-libs-missing", f"{name} is not found", f"the loader cannot find {name}: the ROCm runtime is "
                 "not installed where the program looks", fix, [ctx.line_fact(first)], errors)


def _said(ctx: Context, needle: str, pattern: str) -> list[ErrorLine]:
    """The lines matching `pattern`, searched only where the paste says `needle` (lower case): a cheap gate that keeps
    the regular expressions off hostile pastes."""
    return _lines_matching(ctx, pattern) if needle in _text(ctx).lower() else []


# AutoGPTQ's own words when its compiled kernels do not load: "CUDA extension not installed.", "name 'autogptq_cuda_256'
# is not defined"
_GPTQ_EXTENSION = re.compile(r"(?i)CUDA extension (?:is )?not installed|autogptq_cuda\w*'? (?:is )?not defined")


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
    if re.search(r"\bCUDA_HOME\b|\bnvcc\b", text):
        return _make("rocm-libs-missing", "the CUDA Toolkit is missing for building AutoGPTQ's kernels",
                     "building AutoGPTQ from source compiles its CUDA kernels with nvcc, found through CUDA_HOME; "
                     "without the CUDA Toolkit the build leaves them out (\"CUDA extension not installed\")",
                     "install the CUDA Toolkit of torch's CUDA version (python -c 'import torch; print(torch.version."
                     "cuda)'; the NVIDIA CUDA Toolkit installer or sudo apt install cuda-toolkit-<X-Y>), export "
                     "CUDA_HOME=/usr/local/cuda-<X.Y>, then pip install . again; or skip the build: " + wheel,
                     [ctx.line_fact(lines[0])], lines[:1], confirmed=False)
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


@rule("rocm-libs-missing")
def cublaslt_not_initialized(ctx: Context) -> Optional[Diagnosis]:
    """"Library cublasLt is not initialized": torch found a cuBLASLt it cannot start, the CUDA runtime libraries of the
    environment (a conda env's cudatoolkit) missing or of another CUDA version than torch's."""
    lines = _said(ctx, "cublaslt", r"(?i)Library cublasLt is not initiali[sz]ed")
    if not lines:
        return None
    return _make("rocm-libs-missing", "cuBLASLt does not start",
                 "torch loads a cuBLASLt it cannot initialise: the environment's CUDA runtime libraries are missing or "
                 "of another CUDA version than torch's",
                 "install the CUDA runtime of torch's CUDA version into the environment: conda install cudatoolkit="
                 "<python -c 'import torch; print(torch.version.cuda)'> (or pip install torch from the CUDA index, "
                 "whose wheels bring cuBLAS), and take other CUDA lib64 folders off LD_LIBRARY_PATH",
                 [ctx.line_fact(lines[0])], lines[:1])


# Jan (janhq), named by its issue template ("Jan Version: 0.4.3") or its own name, leaving an NVIDIA GPU idle
_JAN = re.compile(r"\bJan [Vv]ersion\b|\bjanhq\b|\bJan (?:decides|uses|runs|falls|stays|only|does(?:n't| not)|won't)\b|"
                  r"\bJan app\b")
_NVIDIA_WORDS = re.compile(r"(?i)\bnvidia\b|\b(?:rtx|gtx)\s*\d{3,4}|\b(?:10[5-8]0|16[56]0|[2-5]0[5-9]0)(?:\s*ti)?\b|"
                           r"\b9[6-8]0\b")


@rule("rocm-libs-missing")
def jan_without_the_cuda_runtime(ctx: Context) -> Optional[Diagnosis]:
    """Jan's GPU engine (its llama.cpp server built for CUDA) loads the CUDA runtime from a CUDA Toolkit install, not
    from a wheel: with only the display driver it cannot start on the GPU and Jan stays in CPU mode."""
    text = _text(ctx)
    if not _JAN.search(text) or not _NVIDIA_WORDS.search(text) or any(e.family for e in ctx.errors):
        return None
    said = _lines_matching(ctx, _ON_CPU.pattern) or _lines_matching(ctx, r"(?i)\bCPU mode\b|\bnot (?:being )?used\b")
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
