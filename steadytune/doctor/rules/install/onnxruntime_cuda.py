"""onnxruntime-gpu's CUDA execution provider loads the CUDA and cuDNN of the release it was built for, found on PATH
(Windows) or the loader's path: when they are not there it says only that CUDA could not be loaded ("CUDA_PATH is set
but CUDA wasn't able to be loaded", LoadLibrary error 126 on onnxruntime_providers_cuda.dll) and falls back to the CPU.
The release says which CUDA and cuDNN it wants (a table); a program that bundles its own onnxruntime (sherpa-onnx's
CUDA wheels) wants that build's. And the CUDA provider asked for on an Intel or AMD GPU is the wrong onnxruntime
build altogether: those GPUs have their own providers (OpenVINO, DirectML, ROCm / MIGraphX).

The table: onnxruntime.ai, CUDA Execution Provider, "Requirements" (the PyPI onnxruntime-gpu of each release).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import family
from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, on_windows, rule

# onnxruntime-gpu release (PyPI's build) -> (CUDA, cuDNN on Linux, cuDNN on Windows). 1.17 and 1.18 had CUDA 12 builds
# on a separate feed (the requirements table: 1.17's CUDA 12.2 build wants cuDNN 8.9.2.26; round 20, r20d); from
# 1.19 PyPI's is the CUDA 12 + cuDNN 9 build and the CUDA 11.8 + cuDNN 8 one is on the feed
ORT_GPU_BUILDS = {(1, 0): ("10.0", "7.6", "7.6"), (1, 1): ("10.0", "7.6", "7.6"),
                  **{(1, m): ("10.1", "7.6", "7.6") for m in (2, 3, 4)}, (1, 5): ("10.2", "8.0", "8.0"),
                  (1, 6): ("10.2", "8.0", "8.0"), (1, 7): ("11.0", "8.0", "8.0"), (1, 8): ("11.0", "8.0", "8.0"),
                  **{(1, m): ("11.4", "8.2", "8.2") for m in (9, 10, 11, 12)}, (1, 13): ("11.6", "8.2", "8.5"),
                  (1, 14): ("11.6", "8.2", "8.5"), **{(1, m): ("11.8", "8.2", "8.5") for m in (15, 16, 17, 18)},
                  **{(1, m): ("12.x", "9", "9") for m in range(19, 25)}}
_NEWEST = max(ORT_GPU_BUILDS)

# programs that ship an onnxruntime GPU build inside their own package: the CUDA and cuDNN that build wants, and the
# way to the build for the other CUDA (sherpa-onnx's install docs, k2-fsa.github.io/sherpa/onnx/cuda.html: the
# "+cuda" wheels are CUDA 11.8 + cuDNN 8 builds, "+cuda12.cudnn9" wheels from 1.12 on)
BUNDLED_ORT = {
    "sherpa-onnx": ("11.8", "8", "pip install sherpa-onnx==<release>+cuda12.cudnn9 -f "
                                 "https://k2-fsa.github.io/sherpa/onnx/cuda.html (the CUDA 12 + cuDNN 9 build, 1.12 "
                                 "and newer), or build sherpa-onnx from source against a CUDA 12 onnxruntime"),
}

_RELEASE = re.compile(r"(?i)\bonnx?ru[nm]time(?:[-_]gpu)?\s*(?:==|version:?\s*|[:=]\s*|v)?\s*(1)\.(\d{1,2})(?:\.\d+)?\b")
_CUDA = re.compile(r"(?i)\bcuda(?:\s*toolkit)?\s*(?:ver(?:sion)?\.?)?\s*[:：=]?\s*v?(1[0-3])(?:\.(\d))?\b")
# the provider saying it could not load its CUDA libraries (Windows: a DLL of the provider's dependencies missing)
_PROVIDER_LOAD = re.compile(r"(?i)CUDA_PATH is set but CUDA wasn'?t able to be loaded|LoadLibrary failed with error 126\b"
                            r".{0,200}onnxruntime_providers_cuda|Failed to create CUDAExecutionProvider|Require cuDNN "
                            r"\d\.\* and CUDA \d+\.\*")
_REQUIRE = re.compile(r"(?i)Require cuDNN (\d)\.\* and CUDA (\d+)\.\*")
# a CUDA or cuDNN library named by its versioned file: the reading of the name (libraries_missing) settles it
_VERSIONED_LIB = re.compile(r"(?i)\blib(?:cudnn|cublas\w*|cufft|curand|cudart)\w*\.so\.\d|\b(?:cudnn|cublas\w*|cufft|"
                            r"curand|cudart)\w*64_\d+\.dll")


def _release(text: str) -> Optional[tuple[int, int]]:
    m = _RELEASE.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def ort_build(release: Optional[tuple[int, int]]) -> Optional[tuple[str, str, str]]:
    """(CUDA, cuDNN Linux, cuDNN Windows) of this onnxruntime-gpu release's PyPI build; a release newer than the table
    is the newest row's kind (CUDA 12 + cuDNN 9)."""
    if release is None:
        return None
    return ORT_GPU_BUILDS.get(release) or (ORT_GPU_BUILDS[_NEWEST] if release > _NEWEST else None)


@rule("rocm-libs-missing")
def onnxruntime_cuda_provider_libraries(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _PROVIDER_LOAD)
    text = _text(ctx)
    if not lines or _VERSIONED_LIB.search(text):
        return None
    # (CUDA_PATH is the Windows installer's variable, and the message that names it is the Windows build's)
    windows = on_windows(ctx, text) or bool(re.search(r"(?i)\.dll\b|CUDA_PATH is set", text))
    where = "PATH" if windows else "LD_LIBRARY_PATH"
    release = _release(text)
    build = ort_build(release)
    required = _REQUIRE.search(text)
    cuda_m = next((m for m in _CUDA.finditer(text) if not re.match(r"(?i)cuda_path", text[m.start():m.end() + 5])), None)
    cuda = f"{cuda_m.group(1)}.{cuda_m.group(2)}" if cuda_m and cuda_m.group(2) else cuda_m.group(1) if cuda_m else None
    if required:
        wanted_cuda, cudnn = required.group(2), required.group(1)
    elif build:
        wanted_cuda, cudnn = build[0], build[2] if windows else build[1]
    else:
        # no release named: the two PyPI generations, for the user to match against pip show onnxruntime-gpu
        return _make("rocm-libs-missing", "onnxruntime-gpu does not find the CUDA and cuDNN it was built for",
                     "the CUDA execution provider loads the CUDA runtime, cuBLAS and cuDNN of the CUDA release its "
                     f"onnxruntime-gpu was built for, from {where}; one of them (or the MSVC runtime) is missing or of "
                     "another major, so the provider does not load and onnxruntime falls back to the CPU",
                     "install the CUDA and cuDNN your onnxruntime-gpu was built for (pip show onnxruntime-gpu gives "
                     "the release): 1.15 to 1.18 from PyPI need CUDA 11.8 and cuDNN 8.x (for CUDA 11), the CUDA 12 builds "
                     "of 1.17 and 1.18.0 (onnxruntime's own feed) CUDA 12.x and cuDNN 8.9 (for CUDA 12), 1.19 and "
                     "newer CUDA 12.x and cuDNN 9.x; put both bin folders on " + where + " and open a new terminal "
                     "(or pip install the release matching the CUDA you have; importing torch first also loads its "
                     "CUDA DLLs)" + _msvc(windows), [ctx.line_fact(lines[0])], lines[:1])
    named = f"onnxruntime-gpu {release[0]}.{release[1]}" if release else "this onnxruntime-gpu"
    cudnn_major = cudnn.split(".")[0]
    cudnn_text = f"cuDNN {cudnn_major}"
    built_with = f" (built with {cudnn}; any {cudnn_major}.x works)" if "." in cudnn else ""
    same = cuda is not None and cuda.split(".")[0] == wanted_cuda.split(".")[0]
    if cuda is not None and not same:
        fix = (f"install CUDA {wanted_cuda} and {cudnn_text} beside CUDA {cuda} (their bin folders on {where}), or "
               "the onnxruntime-gpu built for the CUDA you have (" + ("pip install -U \"onnxruntime-gpu>=1.19\": CUDA "
               "12 + cuDNN 9" if cuda.startswith("12") else "pip install \"onnxruntime-gpu<1.19\": CUDA 11.8 + "
               "cuDNN 8") + ")")
    else:
        fix = (f"install {cudnn_text}{built_with} for CUDA {wanted_cuda.split('.')[0]} (NVIDIA's cuDNN archive"
               + (", the last 8.x: 8.9.7" if cudnn_major == "8" else "") + f"; or pip install nvidia-cudnn-cu"
               f"{wanted_cuda.split('.')[0]}=={cudnn_major}.*) and the CUDA {wanted_cuda} runtime, and put their "
               + ("bin folders on PATH (or copy cuDNN's DLLs into CUDA's bin); " if windows else
                  "lib folders on LD_LIBRARY_PATH (a pip install's: <site-packages>/nvidia/cudnn/lib); ")
               + ("cuDNN 8.3+ on Windows also needs zlibwapi.dll on PATH; " if windows and cudnn_major == "8" else "")
               + "open a new terminal and run again")
    return _make("rocm-libs-missing", f"{named} does not find CUDA {wanted_cuda} / {cudnn_text}",
                 f"{named} is built for CUDA {wanted_cuda} and {cudnn_text} (onnxruntime.ai's CUDA provider "
                 "requirements); its CUDA provider loads them from " + where + " and one of them is not there"
                 + (f" (CUDA {cuda} is, so {cudnn_text} is what is missing or not on {where})" if same else ""),
                 fix + _msvc(windows), [ctx.line_fact(lines[0])], lines[:1])


def _msvc(windows: bool) -> str:
    return "; on Windows the provider also needs the latest Microsoft Visual C++ Redistributable" if windows else ""


def bundled_ort_fix(text: str, lib: str, major: str) -> Optional[tuple[str, str, str]]:
    """(title, cause, fix) where a program in BUNDLED_ORT fails to load a CUDA library of its bundled onnxruntime's
    CUDA major (libcublasLt.so.11 for sherpa-onnx's +cuda wheel)."""
    for program, (cuda, cudnn, other) in BUNDLED_ORT.items():
        named = re.escape(program).replace("\\-", "[-_]")   # the pip name or the import name (sherpa_onnx)
        if re.search(rf"(?i)(?<![\w-]){named}(?![\w-])", text) and cuda.split(".")[0] == major:
            return (f"{program}'s bundled onnxruntime is a CUDA {cuda} build",
                    f"{program}'s CUDA build ships its own onnxruntime, built for CUDA {cuda} and cuDNN {cudnn}; it "
                    f"loads {lib}, CUDA {major}'s library, whatever CUDA (or torch) is installed beside it",
                    f"install CUDA {cuda}'s libraries beside the other CUDA (the CUDA {cuda} toolkit, or pip install "
                    f"nvidia-cublas-cu{major} nvidia-cuda-runtime-cu{major} nvidia-cufft-cu{major} "
                    f"nvidia-curand-cu{major} \"nvidia-cudnn-cu{major}=={cudnn}.*\", their lib folders on "
                    f"LD_LIBRARY_PATH); or, to stay on the newer CUDA: {other}")
    return None


# the GPU the user says they have, where it is no NVIDIA one: an issue template's ticked box ("- [+] Intel", "- [x]
# AMD") under a question about the GPU, or the GPU named (Intel Arc / Iris / UHD, Radeon)
_TICKED = re.compile(r"(?i)^\W*\[\s*[x+✓✔]\s*\]\s*(NVIDIA|AMD|Intel)\b")
_INTEL = re.compile(r"(?i)\bIntel(?:\(R\)|®)?\s+(?:Arc|Iris|UHD|HD Graphics|Xe)\b|\bArc(?:\(TM\))?\s+[AB]\d{3}\b")
_AMD = re.compile(r"(?i)\bRadeon\b|\bRX\s?\d{3,4}\b")
_NVIDIA = re.compile(r"(?i)\bNVIDIA\s+(?:GeForce|RTX|GTX|Tesla|Quadro|[AHLT]\d)|\b(?:RTX|GTX)\s?\d{3,4}\b|\bGeForce\b")
# the CUDA provider's own failures: its calls (CudaCall, "CUDA failure N"), its library, its name
_CUDA_PROVIDER = re.compile(r"(?i)onnxruntime::CudaCall|providers[\\/]cuda[\\/]|onnxruntime_providers_cuda|"
                            r"CUDAExecutionProvider|CUDA failure \d+")


def _said_vendor(ctx: Context) -> Optional[str]:
    lines = ctx.sheet.lines
    for n, line in enumerate(lines):
        ticked = _TICKED.match(line)
        if ticked and any(re.search(r"(?i)\bGPU\b", above) for above in lines[max(0, n - 4):n]):
            return ticked.group(1).lower()
    text = "\n".join(lines)
    if _NVIDIA.search(text):
        return "nvidia"
    return "intel" if _INTEL.search(text) else "amd" if _AMD.search(text) else None


@rule("torch-build")
def onnxruntime_cuda_provider_on_another_gpu(ctx: Context) -> Optional[Diagnosis]:
    """onnxruntime's CUDA provider failing (a CUDA error from its CudaCall, the provider not loading) on a machine whose
    GPU the user says is Intel's or AMD's: CUDA runs on NVIDIA GPUs only, so no driver or CUDA install helps; the
    onnxruntime build with that GPU's provider does."""
    lines = _lines_matching(ctx, _CUDA_PROVIDER)
    if not lines or any(g for g in ctx.sheet.of("gpu") if _NVIDIA.search(g.value)):
        return None
    vendor = _said_vendor(ctx)
    if vendor not in ("intel", "amd"):
        return None
    text = _text(ctx)
    windows = on_windows(ctx, text)
    flag = ("; in a program with an --execution-provider option (Deep-Live-Cam, roop, FaceFusion) pass that provider "
            "(openvino / directml) in place of cuda, or pick it in the program's settings")
    if vendor == "intel":
        fix = ("pip uninstall -y onnxruntime onnxruntime-gpu; pip install onnxruntime-openvino (OpenVINOExecutionProvider, "
               "Intel's GPUs and iGPUs, with Intel's GPU driver)" + (" or onnxruntime-directml (DmlExecutionProvider, "
                                                                     "any DirectX 12 GPU)" if windows else "") + flag)
    else:
        fix = ("pip uninstall -y onnxruntime onnxruntime-gpu; " + (
            "pip install onnxruntime-directml (DmlExecutionProvider, any DirectX 12 GPU)" if windows else
            "install AMD's ROCm / MIGraphX build of onnxruntime (onnxruntime-rocm / onnxruntime-migraphx from "
            "repo.radeon.com for the installed ROCm)") + flag)
    name = {"intel": "Intel", "amd": "AMD"}[vendor]
    diagnosis = _make("torch-build", f"onnxruntime's CUDA provider on an {name} GPU",
                      f"the CUDA execution provider runs on NVIDIA GPUs only, and this machine's GPU is {name}'s: its "
                      "CUDA errors (driver insufficient, no device) say there is no NVIDIA GPU and driver, not that "
                      "one is too old", fix, [ctx.line_fact(lines[0])], lines[:1] + [e for e in ctx.errors
                                                                                      if e not in lines[:1]])
    # no NVIDIA driver or CUDA fix can bring a device on this GPU: the build reading leads
    diagnosis.rank = min(family(n).rank for n in ("driver", "rocm-libs-missing", "torch-build")) - 1
    return diagnosis


# programs that run their models through onnxruntime and offer its providers as their own option (their argument
# parsers list onnxruntime.get_available_providers()): the program -> how it installs its onnxruntime
ORT_PROGRAMS = {
    "FaceFusion": (r"face[-_ ]?fusion", "or rerun FaceFusion's installer for CUDA (python install.py, picking the cuda "
                                        "onnxruntime: --onnxruntime cuda), which pins the onnxruntime-gpu release of "
                                        "that FaceFusion"),
    "roop": (r"roop(?:[-_]\w+)?", "then start it with --execution-provider cuda"),
    "Deep-Live-Cam": (r"deep[-_ ]?live[-_ ]?cam", "then start it with --execution-provider cuda"),
    "Swap-Mukham": (r"swap[-_ ]?mukham", "then start it with --cuda"),
    "rembg": (r"rembg", "or pip install \"rembg[gpu]\", which brings onnxruntime-gpu"),
    "insightface": (r"insightface", "then FaceAnalysis(providers=['CUDAExecutionProvider'])"),
}
# the program's provider list without CUDA: argparse refusing the choice, or the user's word ("execution providers
# not cuda", "no cuda in the execution providers", "only cpu in execution providers")
_CHOICE_REFUSED = re.compile(r"(?i)--execution[-_]providers?\b.{0,20}invalid choice:?\s*'(?:cuda|tensorrt)'")
_PROVIDERS_WITHOUT_CUDA = re.compile(r"(?i)execution[-_ ]providers?\b.{0,40}\b(?:not|no|without|missing|only)\b.{0,20}"
                                     r"\b(?:cuda|cpu)\b|\b(?:no|not|without|missing)\b.{0,20}\bcuda\b.{0,40}"
                                     r"execution[-_ ]providers?\b|execution[-_ ]providers?\b.{0,40}\bonly\b.{0,10}cpu\b|"
                                     r"\bonly\b.{0,10}\bcpu\b.{0,30}\bexecution[-_ ]providers?\b|"
                                     # "can't find cuda or tensorrt in the execution provider tab", "CUDA is no more
                                     # available as the execution provider" (round 18, r18c)
                                     r"\b(?:can'?t|cannot|can not|don'?t|doesn'?t)\s+(?:find|see|get)\b.{0,20}"
                                     r"\b(?:cuda|tensorrt)\b.{0,40}execution[-_ ]providers?\b|"
                                     r"\b(?:cuda|tensorrt)\b.{0,60}\bno (?:more|longer)\b.{0,30}execution[-_ ]providers?\b|"
                                     r"\bcuda\b.{0,30}\b(?:not|isn'?t|doesn'?t|don'?t)\b.{0,20}(?:shown|show|listed|"
                                     r"appear|available|an option|options?)\b")


# the user's word that the program stays off the GPU ("not using GPU", "refuses to run on GPU", "runs only on the CPU")
_OFF_THE_GPU = re.compile(r"(?i)\b(?:not|never|refuses? to|won'?t|doesn'?t|does not|isn'?t|is not|can'?t|cannot)\s+"
                          r"(?:run(?:ning)?|us(?:e|ing)|utili[sz](?:e|ing))\s+(?:on\s+|with\s+)?(?:the\s+|my\s+)?GPU\b|"
                          r"\b(?:runs?|running|ran|stays?)\s+(?:only\s+)?on\s+(?:the\s+)?(?:slow\s+)?CPU\b|"
                          r"\bonly\s+(?:uses?|using)\s+(?:the\s+)?CPU\b|\bfalls?\s+back\s+to\s+(?:the\s+)?CPU\b")


@rule("torch-build")
def ort_program_without_cuda_provider(ctx: Context) -> Optional[Diagnosis]:
    """A program built on onnxruntime (FaceFusion, roop, Deep-Live-Cam) whose execution providers offer no CUDA, on a
    machine whose GPU is no AMD or Intel one: the onnxruntime installed is the CPU build (the plain onnxruntime
    package, alone or installed beside onnxruntime-gpu, whose files it overwrites), so the program lists only cpu."""
    text = _text(ctx)
    program = next(((name, how) for name, (pattern, how) in ORT_PROGRAMS.items()
                    if re.search(rf"(?i)(?<![\w-]){pattern}(?![\w-])", text)), None)
    # the provider list said to lack CUDA speaks of onnxruntime's providers whether or not the program is named (an
    # "execution provider tab" is the program's list of them) (round 18, r18c)
    lines = _lines_matching(ctx, _CHOICE_REFUSED) or [
        line for line in _lines_matching(ctx, _PROVIDERS_WITHOUT_CUDA)
        if program or re.search(r"(?i)execution[-_ ]providers?\b", line.line)]
    # the program named and said to stay off the GPU with no error line of another kind: the likely reading (a GPU
    # torch installed beside it does not help: the program's models run in onnxruntime)
    words = [] if lines or not program or any(e.family not in (None, "torch-build") for e in ctx.errors) else \
        _lines_matching(ctx, _OFF_THE_GPU)
    lines = lines or words
    if not lines or _said_vendor(ctx) in ("intel", "amd") or re.search(r"(?i)\bmac ?os\b|\bApple M\d", text):
        return None
    name, how = program or ("the program", "then pick cuda in its execution providers (a program that installs its "
                                           "own onnxruntime picks the build in its installer: rerun it, as FaceFusion's "
                                           "python install.py --onnxruntime cuda)")
    how_it_shows = (f"{name} runs its models in onnxruntime, which reaches the GPU only through onnxruntime-gpu's "
                    "CUDAExecutionProvider (a CUDA torch beside it does not change that); the onnxruntime installed "
                    "is likely" if words else
                    f"{name} offers the execution providers its onnxruntime has; the onnxruntime installed is")
    diagnosis = _make(
        "torch-build", f"{name}'s onnxruntime is the CPU build",
        f"{how_it_shows} the CPU package (onnxruntime, alone or beside onnxruntime-gpu: both install the same module "
        "and the last one wins), which has no CUDAExecutionProvider",
        "pip uninstall onnxruntime onnxruntime-gpu -y (both, in the program's environment), then pip install "
        f"onnxruntime-gpu alone (the release the program pins; 1.19 and newer are CUDA 12 builds, 1.18 and older CUDA "
        f"11.8); {how}; python -c \"import onnxruntime; print(onnxruntime.get_available_providers())\" must list "
        "CUDAExecutionProvider", [ctx.line_fact(lines[0])], lines[:1], confirmed=not words)
    if words:
        # the program runs its models in onnxruntime, not torch: a torch reading of the same words comes after it
        _ahead_of(diagnosis, "torch-build")
    return diagnosis
