"""Readings of the shared libraries a GPU package loads (install families): a cuDNN major that the package and torch
disagree on, a library release older than the one a binary was built against, pip's CUDA libraries shadowed by the
system's on LD_LIBRARY_PATH, the unversioned libcuda.so a runtime-only driver install lacks, a Windows DLL whose
dependencies Python's restricted search does not find, a ROCm tool's own Python modules, a bundled ROCm runtime that crashes
where the system's works."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _release_numbers, _text, on_windows, rule


def _lines_saying(ctx: Context, needle: str, pattern: str) -> list:
    """The lines matching `pattern`, searched only where the paste says `needle` (lower case) at all: a cheap gate that
    keeps the regular expressions off hostile pastes that cannot match."""
    return _lines_matching(ctx, pattern) if needle in _text(ctx).lower() else []


# "Unable to load any of {libcudnn_ops.so.9.1.0, ...}" (ctranslate2), "Could not load library libcudnn_ops_infer.so.8"
_CUDNN_WANTED = re.compile(r"(?i)(?:Unable to load any of \{|Could not load library |cannot open shared object file.{0,40}?)"
                           r"libcudnn\w{0,40}\.so\.(\d+)|libcudnn\w{0,40}\.so\.(\d+)\S{0,20}: cannot open shared object|"
                           r"\bcudnn[ _]?\w{0,20}?64_(\d+)\.dll\W{0,3}(?:is )?(?:not found|could not|cannot|missing)|"
                           r"(?i:missing)\W{1,3}libcudnn\w{0,40}\.so\.(\d+)|"   # said in words: "the missing `libcudnn_ops_infer.so.8`"
                           # cuDNN 8's own loader on Windows: "Could not locate cudnn_ops_infer64_8.dll. Please make sure
                           # it is in your library path!"
                           r"Could not locate cudnn\w{0,30}?64_(\d+)\.dll")
_CT2_RELEASE = re.compile(r"(?i)ctranslate2\W{0,3}(?:==|version\s+(?:is\s+)?(?:now\s+)?(?:bumped\s+)?(?:to\s+)?|\s+)"
                          r"v?(\d+\.\d+)")
_CTRANSLATE2 = re.compile(r"(?i)ctranslate2|faster[-_]whisper|whisperx|whisper-?ctranslate2")
# torch's release, or the floor a requirement sets ("torch>=2.5.1": every torch it allows brings the same cuDNN major)
# (and in words: "pytorch >= 2.4.0")
_TORCH_RELEASE = re.compile(r"(?i)\b(?:py)?torch(?:\s?(?:==|>=)\s?|\s+|\s*version:?\s*|-)(\d+\.\d+(?:\.\d+)?)")


@rule("wheel-platform")
def ctranslate2_cudnn_major(ctx: Context) -> Optional[Diagnosis]:
    """CTranslate2 (faster-whisper, WhisperX) links cuDNN by major: 4.4.0 and older need cuDNN 8, 4.5.0 and newer cuDNN
    9. torch's CUDA wheels bring cuDNN 8 up to torch 2.3 and cuDNN 9 from torch 2.4: the two must agree, and where the
    paste shows no torch the pip-installed cuDNN is only off the loader's path."""
    text = _text(ctx)
    if not _CTRANSLATE2.search(text):
        return None
    lines = _lines_saying(ctx, "cudnn", _CUDNN_WANTED.pattern)
    if not lines:
        return None
    m = _CUDNN_WANTED.search(lines[0].line)
    wanted = int(m.group(1) or m.group(2) or m.group(3) or m.group(4) or m.group(5))
    torch = _TORCH_RELEASE.search(text)
    torch_cudnn = (9 if _release_numbers(torch.group(1)) >= (2, 4) else 8) if torch else None
    evidence, covers = [ctx.line_fact(lines[0])], lines[:1]
    if torch_cudnn == 8 and wanted >= 9:
        return _make("wheel-platform", "ctranslate2 wants cuDNN 9, torch brings cuDNN 8",
                     f"ctranslate2 4.5.0 and newer are built for cuDNN 9; torch {torch.group(1)} comes with cuDNN 8",
                     "pip install ctranslate2==4.4.0 (the last cuDNN 8 release), or move to torch 2.4 or newer (cuDNN 9)",
                     evidence, covers)
    if torch_cudnn == 9 and wanted == 8:
        return _make("wheel-platform", "ctranslate2 wants cuDNN 8, torch brings cuDNN 9",
                     f"ctranslate2 4.4.0 and older are built for cuDNN 8; torch {torch.group(1)} comes with cuDNN 9",
                     "pip install -U \"ctranslate2>=4.5.0\" (cuDNN 9; relax the program's pin on ctranslate2), or keep "
                     "torch below 2.4 with ctranslate2 4.4.0", evidence, covers)
    ct2 = _CT2_RELEASE.search(text)
    if torch is None and wanted >= 9 and m.group(3) and ct2 and _release_numbers(ct2.group(1)) >= (4, 5):
        # on Windows (a cuDNN DLL), after the ctranslate2 upgrade that moved it to cuDNN 9: no LD_LIBRARY_PATH there,
        # the cuDNN 9 DLLs come with torch 2.4+ (torch/lib), which faster-whisper's process loads
        return _make("wheel-platform", f"ctranslate2 {ct2.group(1)} wants cuDNN 9",
                     f"ctranslate2 4.5.0 and newer are built for cuDNN 9; the environment brings cuDNN 8 (torch before "
                     "2.4, or a cuDNN 8 install on PATH)",
                     "move to torch 2.4 or newer, which brings cuDNN 9 (pip install -U \"torch>=2.4\" from the CUDA "
                     "index of your CUDA), or pip install ctranslate2==4.4.0 (the last cuDNN 8 release)",
                     evidence, covers)
    if wanted >= 9:
        # (the other way out, the release before cuDNN 9 with the cuDNN 8 runtime: Softcatala/whisper-ctranslate2#115,
        # ctranslate2 4.4.0 and libcudnn8 from NVIDIA's CUDA apt repository; round 20, r20d)
        return _make("rocm-libs-missing", "pip's cuDNN 9 is not on the loader's path",
                     "ctranslate2 opens cuDNN by name; pip's nvidia-cudnn-cu12 puts it in site-packages/nvidia/cudnn/lib, "
                     "a folder the loader does not search",
                     "pip install nvidia-cudnn-cu12 (if it is not installed) and export LD_LIBRARY_PATH=$(python -c "
                     "'import os, nvidia.cudnn; print(os.path.dirname(nvidia.cudnn.__file__))')/lib:$LD_LIBRARY_PATH "
                     "before starting the program; or install cuDNN 9 system-wide from NVIDIA's CUDA apt repository "
                     "(sudo apt-get install libcudnn9-cuda-12, then sudo ldconfig), which the loader finds by itself"
                     + ("" if torch is not None else
                        # (no torch shown: nothing else in the environment wants cuDNN 9; a torch 2.4+ beside it
                        # brings cuDNN 9 itself, so the pin back would be the wrong way there)
                        "; or, on a machine that keeps cuDNN 8, pip install ctranslate2==4.4.0 (the last release "
                        "built for cuDNN 8) with the cuDNN 8 runtime from the same repository (sudo apt-get install "
                        "libcudnn8)"), evidence, covers)
    return None


# ctranslate2's own cuDNN 9 loader failing (its "Unable to load any of {libcudnn_ops.so.9...}" / "Cannot load symbol
# cudnnCreateTensorDescriptor", or the Windows cudnn_ops64_9.dll said loaded "without its dependencies")
_CT2_CUDNN9 = re.compile(r"Unable to load any of \{libcudnn_\w+\.so\.9|Cannot load symbol cudnnCreate\w*Descriptor|"
                         r"(?i:loaded cudnn_\w+64_9\.dll without its dependencies)")


# the user's own pip install of a CTranslate2 program or of ctranslate2 itself ("pip install --upgrade
# git+https://github.com/Softcatala/whisper-ctranslate2", "pip install faster-whisper")
_OWN_PIP_INSTALL = re.compile(r"(?i)\bpip3? install\b.{0,120}(?:ctranslate2|faster[-_]whisper|whisperx)")


@rule("abi-mismatch")
def ctranslate2_pulled_by_program(ctx: Context) -> Optional[Diagnosis]:
    """ctranslate2's cuDNN 9 loader failing inside a program's or a notebook's environment that the user did not build
    (no torch release, no ctranslate2 release named): the program's requirements took the newest ctranslate2 (4.5.0
    and newer are built for cuDNN 9) beside the torch the environment already had, whose cuDNN is 8 (torch before
    2.4). The two packages disagree on the cuDNN major; the maintainers' fix in those threads was to pin ctranslate2
    back to 4.4.0, the last cuDNN 8 release, in that environment (Whisper-WebUI#346's notebook, alltalk_tts#391's
    start_environment; CTranslate2's release notes: 4.5.0 moved to cuDNN 9). Where the user names the releases the
    rule above reads them instead."""
    text = _text(ctx)
    if "cudnn" not in text.lower() or _TORCH_RELEASE.search(text) or _CT2_RELEASE.search(text):
        return None
    lines = _lines_matching(ctx, _CT2_CUDNN9)
    wanted = _CUDNN_WANTED.search(text)
    if not lines or (wanted and next(g for g in wanted.groups() if g) == "8"):
        return None   # (a cuDNN 8 library is what failed to load: the other way round, read above)
    if re.search(r"(?i)\\CUDNN\\|/cudnn[-_/]|\bcuDNN\s*v?9\.\d", text):
        return None   # a cuDNN 9 the user installed: its path is the question (the install readings), not a pin
    notebook = ctx.sheet.has("platform", "notebook")
    if not notebook and not on_windows(ctx, text) and _lines_matching(ctx, _OWN_PIP_INSTALL):
        # the user's own pip install of a CTranslate2 program on Linux, no app environment around it: the machine's
        # cuDNN is the question (ctranslate2_cudnn_major's cuDNN 9 or cuDNN 8 ways), not a program's torch (r20d)
        return None
    where = ("in a notebook cell: !pip install ctranslate2==4.4.0, then restart the runtime" if notebook else
             "inside the program's own environment (activate it first: the app's start_environment / cmd_windows.bat / "
             "its venv): pip install ctranslate2==4.4.0")
    return _make("abi-mismatch", "ctranslate2's cuDNN 9 build beside a torch of cuDNN 8",
                 "ctranslate2 4.5.0 and newer (pulled in by the program's requirements) are built for cuDNN 9; the torch "
                 "the environment carries brings cuDNN 8 (torch before 2.4), so ctranslate2 finds no cuDNN 9 it can load",
                 f"{where} (the last release built for cuDNN 8); or, when python -c \"import torch; "
                 "print(torch.__version__)\" says 2.4 or newer (cuDNN 9 already installed by pip), keep ctranslate2 and put "
                 "pip's nvidia/cudnn/lib folder on the loader path", [ctx.line_fact(lines[0])], lines[:1])


_CUDNN_OLDER = re.compile(r"(?i)Loaded runtime CuDNN library: (\d+(?:\.\d+)*) but source was compiled with: (\d+(?:\.\d+)*)")


@rule("wheel-platform")
def cudnn_older_than_built_against(ctx: Context) -> Optional[Diagnosis]:
    """A binary built against one cuDNN minor refuses an older one at run time (same major, equal or newer minor)."""
    lines = _lines_saying(ctx, "cudnn library", _CUDNN_OLDER.pattern)
    if not lines:
        return None
    runtime, built = _CUDNN_OLDER.search(lines[0].line).groups()
    # jaxlib prints TensorFlow's stream executor lines (its XLA is TensorFlow's): jax named anywhere wins
    tool = next((t for t in ("jaxlib", "tensorflow", "torch") if t[:3] in _text(ctx).lower()), "the package")
    # JAX's and TensorFlow's install pages: their pip CUDA wheels bring their own cuDNN, and a LD_LIBRARY_PATH set to
    # a system CUDA is searched first and shadows it (t17b): the older copy is the one on that path
    shadow = re.search(r"LD_LIBRARY_PATH\s*=\s*\S*(?:cuda|cudnn)", _text(ctx), re.I)
    first = ("unset LD_LIBRARY_PATH (it points at a system CUDA / cuDNN whose older copy is loaded ahead of the one "
             "pip installed with the package) and run again; else " if shadow else "")
    # jaxlib's own wheel tag names the cuDNN it was built for (+cuda11.cudnn86): when that is the "compiled with"
    # release and the user names no cuDNN install of their own, the older copy is another package's, loaded first in
    # the same process - a GPU TensorFlow beside jax (jax#15230: replaced by tensorflow-cpu, which brings no CUDA
    # libraries of its own into the process) or a torch wheel with its bundled cuDNN
    tag = re.search(r"(?i)jaxlib\S*\s*\S*\+cuda\d+\.cudnn(\d)(\d+)", _text(ctx))
    own = re.search(r"(?i)\b(?:I (?:use|have|installed)|installed)\b.{0,30}\bcudnn\b|libcudnn8?[=_ ]\d", _text(ctx))
    if tag and not shadow and not own and _release_numbers(built)[:2] == (int(tag.group(1)), int(tag.group(2))):
        return _make("abi-mismatch", f"another package's cuDNN {runtime} is loaded before jaxlib's {built}",
                     f"jaxlib (+cudnn{tag.group(1)}{tag.group(2)}) was built for cuDNN {built}, but an older cuDNN "
                     f"{runtime} that another package in the same environment brings is loaded first",
                     "find what brings it: pip list | grep -i -e tensorflow -e torch -e cudnn (conda list cudnn). A GPU "
                     "TensorFlow beside jax (used for data loading, tfds) is the usual one: pip uninstall tensorflow "
                     "tensorflow-gpu, then pip install tensorflow-cpu (no CUDA libraries of its own); otherwise give jax "
                     "an environment of its own", [ctx.line_fact(lines[0])], lines[:1])
    return _make("wheel-platform", f"cuDNN {runtime} is older than the {built} it was built for",
                 f"{tool} was built against cuDNN {built}; the cuDNN loaded is {runtime}, an older minor",
                 f"{first}upgrade cuDNN to {built} or newer of the same major (pip install \"nvidia-cudnn-cu"
                 f"{'12' if _release_numbers(built) >= (9,) else '11'}>={built}\", or the system libcudnn package), or install "
                 f"the {tool} build made for cuDNN {runtime}", [ctx.line_fact(lines[0])], lines[:1])


# a library inside pip's nvidia-* wheels that misses a symbol another (older) copy lacks: the system's CUDA is first
_PIP_NVIDIA_SYMBOL = re.compile(r"(?:site|dist)-packages/(?:torch/lib/\.\./\.\./)?nvidia/(\w{1,40})/lib/(lib[\w.]{1,60}?\.so[.\d]{0,12}): "
                                r"undefined symbol: (\S+?)(?:, version (lib[\w.]+))?$")


@rule("abi-mismatch")
def system_cuda_shadows_pip_libraries(ctx: Context) -> Optional[Diagnosis]:
    """torch's CUDA wheels load their CUDA libraries from pip's nvidia-* packages; a CUDA toolkit's lib64 on
    LD_LIBRARY_PATH is searched first, so one of those libraries picks up an older system copy of its sibling."""
    lines = _lines_saying(ctx, "undefined symbol", _PIP_NVIDIA_SYMBOL.pattern)
    if not lines:
        return None
    m = _PIP_NVIDIA_SYMBOL.search(lines[0].line)
    sibling = m.group(4) or "its sibling library"
    # pip's copy of the sibling: site-packages/nvidia/<its name>/lib (libnvJitLink.so.12 -> nvidia/nvjitlink/lib)
    folder = re.sub(r"lt$", "", re.sub(r"^lib|\.so.*$", "", sibling).lower()) if m.group(4) else None
    return _make("abi-mismatch", f"a system CUDA library shadows pip's {m.group(2)}'s sibling",
                 f"pip's {m.group(2)} needs {m.group(3)} from {sibling}; the loader found an older {sibling} first "
                 "(a CUDA toolkit's lib64 on LD_LIBRARY_PATH), which lacks it",
                 "drop the system CUDA folders from the loader's path for this environment: unset LD_LIBRARY_PATH (or "
                 "export LD_LIBRARY_PATH without /usr/local/cuda*/lib64) and run again; torch then loads the copies "
                 "pip installed beside it" + (f"; or put pip's {folder} first: export LD_LIBRARY_PATH=<site-packages>/"
                                              f"nvidia/{folder}/lib:$LD_LIBRARY_PATH (pip install nvidia-{folder}-cu12 "
                                              "if it is missing)" if folder else ""), [ctx.line_fact(lines[0])],
                 lines[:1] + _lines_matching(ctx, r"(?i)undefined symbol"))   # a title saying it is the same error


_LIBCUDA_UNVERSIONED = re.compile(r"(?i)libcuda\.so(?![.\w])")
_LIBCUDA_ONE = re.compile(r"libcuda\.so\.1\b")


@rule("rocm-libs-missing")   # or wsl, under WSL 2
def unversioned_libcuda(ctx: Context) -> Optional[Diagnosis]:
    """The NVIDIA driver's runtime install has libcuda.so.1 only; the unversioned libcuda.so is a development link
    (Triton's launcher links -lcuda, libcudnn dlopens "libcuda.so"). Under WSL 2 the driver's libraries are in
    /usr/lib/wsl/lib, which ldconfig caches by soname only."""
    text = _text(ctx)
    if not (_LIBCUDA_ONE.search(text) and _LIBCUDA_UNVERSIONED.search(text)):
        return None
    # Triton's own "libcuda.so cannot found!" is its search of the ldconfig cache, not a missing link: left to the
    # Triton rule (releases.py), also where its traceback names libcuda.so.1
    lines = [line for line in _lines_matching(ctx, r"(?i)libcuda\.so(?![.\w])|-lcuda\b")
             if not re.search(r"libcuda\.so cannot (?:be )?found", line.line)
             and re.search(r"(?i)cannot open|not found|no such file|lack|missing|fail|cannot find|only|-lcuda", line.line)]
    if not lines:
        return None
    evidence, covers = [ctx.line_fact(lines[0])], lines[:1]
    if "/usr/lib/wsl/lib" in text or ctx.sheet.has("platform", "wsl"):
        return _make("wsl", "WSL 2's libcuda.so is not on the loader's path",
                     "under WSL 2 the driver's libcuda lives in /usr/lib/wsl/lib, where ldconfig lists only "
                     "libcuda.so.1; a dlopen of libcuda.so finds nothing",
                     "export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH (in ~/.bashrc for every shell)",
                     evidence, covers)
    tool = ctx.tool(lines[:1]) or "the program"
    return _make("rocm-libs-missing", "the driver install has libcuda.so.1 but no libcuda.so",
                 f"{tool} links or opens the unversioned libcuda.so, a development link that driver-only installs and "
                 "runtime images do not ship (they have libcuda.so.1)",
                 "create the link beside the driver's library: sudo ln -s libcuda.so.1 <its folder>/libcuda.so (ldconfig "
                 f"-p | grep libcuda.so.1 shows the folder; sudo ldconfig after), or a {tool} release that links "
                 "libcuda.so.1 itself", evidence, covers)


# Python 3.8+ on Windows loads a DLL's dependencies from its own folder and the system only, not PATH
_CTYPES_DLL = re.compile(r"Could not find module '([^'\n]{1,400}?\.dll)' \(or one of its dependencies\)")


@rule("rocm-libs-missing")
def windows_dll_dependencies_off_search_path(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_saying(ctx, "could not find module", _CTYPES_DLL.pattern)
    if not lines:
        return None
    path = _CTYPES_DLL.search(lines[0].line).group(1)
    if re.search(r"(?i)site-packages", path):
        return None   # a package's own DLL: its loader adds its folders; a dependency missing there is another wheel
    folder = "%HIP_PATH%bin (the HIP SDK's)" if re.search(r"(?i)zluda|hip|rocm|amd", _text(ctx)) else \
        "the folder of the libraries it needs"
    return _make("rocm-libs-missing", f"Windows cannot load {path.split(chr(92))[-1]}'s dependencies",
                 f"{path} is loaded with ctypes; since Python 3.8 Windows resolves its dependencies without PATH, so "
                 "the libraries it links (from another folder) are not found",
                 f"load it with the standard search: ctypes.CDLL(r\"{path}\", winmode=0), or call "
                 f"os.add_dll_directory({folder}) before loading it", [ctx.line_fact(lines[0])],
                 lines[:1] + _lines_matching(ctx, re.escape(path.split(chr(92))[-1])))   # a title naming the DLL too


_MODULE_MISSING = re.compile(r"No module named '?([\w.]+)'?")
_ROCM_CLI = re.compile(r"(?i)(?<![\w-])(amd-smi|rocm-smi|rocminfo|rocprof\w*|hipify-\w+)(?![\w-])")
_PIP_NAMES = {"yaml": "PyYAML", "google": "protobuf", "cv2": "opencv-python"}


@rule("rocm-libs-missing")
def rocm_tool_python_module(ctx: Context) -> Optional[Diagnosis]:
    """ROCm's command-line tools written in Python run under the system python3 and import modules the ROCm packages
    do not always pull in."""
    lines = _lines_saying(ctx, "no module named", _MODULE_MISSING.pattern)
    if not lines:
        return None
    # the tool run just before the error (its command line up to 3 lines above): not one only named elsewhere in a
    # paste whose import error is another program's
    ran = [line for line in _lines_matching(ctx, _ROCM_CLI.pattern) if 0 <= lines[-1].line_no - line.line_no <= 3]
    if not ran:
        return None
    tool = _ROCM_CLI.search(ran[-1].line)
    module = _MODULE_MISSING.search(lines[-1].line).group(1).split(".")[0]
    package = _PIP_NAMES.get(module, module)
    extra = ("; or reinstall amd-smi's own package: cd /opt/rocm/share/amd_smi && sudo python3 -m pip install ."
             if tool.group(1).lower() == "amd-smi" else "")
    return _make("rocm-libs-missing", f"{tool.group(1)} cannot import {module}",
                 f"{tool.group(1)} runs under the system python3 and imports {module}, which the ROCm packages did not "
                 "install there", f"sudo python3 -m pip install {package} (the python3 of {tool.group(1)}'s first line; "
                 f"apt: python3-{module.lower()}){extra}", [ctx.line_fact(lines[-1])], lines[-1:])


_ORT_RELEASE = re.compile(r"(?i)\bonnx?ru[nm]time(?:-gpu)?\s*(?:==|version:?\s*|v)?\s*(1\.\d+(?:\.\d+)?)")
_CUDA_MAJOR = re.compile(r"(?i)\bCUDA\s*(?:SDK\s*|version:?\s*|toolkit\s*)?(1[12])(?:\.\d+)?\b|\bcu(1[12])\d\b")
_ORT_CUDA_FAILED = re.compile(r"(?i)Failed to (?:create|load)\W{0,3}(?:cuda|CUDAExecutionProvider)|"
                              r"libonnxruntime_providers_cuda|CUDAExecutionProvider'? is not in available")


@rule("wheel-platform")
def onnxruntime_gpu_cuda_major(ctx: Context) -> Optional[Diagnosis]:
    """onnxruntime-gpu is built for one CUDA major: on PyPI 1.18 and older are CUDA 11.8 builds (CUDA 12 builds from
    1.17 on a separate feed), 1.19 and newer CUDA 12 builds. A release for the other major cannot create its CUDA
    provider."""
    lines = _lines_saying(ctx, "cuda", _ORT_CUDA_FAILED.pattern)
    text = _text(ctx)
    release, cuda = _ORT_RELEASE.search(text), _CUDA_MAJOR.search(text)
    if not lines or not release or not cuda:
        return None
    ort, major = release.group(1), int(cuda.group(1) or cuda.group(2))
    if major == 12 and _release_numbers(ort) < (1, 19):
        fix = ("pip install -U \"onnxruntime-gpu>=1.19\" (PyPI's CUDA 12 builds); 1.17 and 1.18 have CUDA 12 builds on "
               "the onnxruntime-cuda-12 feed only")
        built = "CUDA 11.8"
    elif major == 11 and _release_numbers(ort) >= (1, 19):
        fix = ("install the CUDA 11 build from the onnxruntime-cuda-11 feed (pip install onnxruntime-gpu --index-url "
               "https://aiinfra.pkgs.visualstudio.com/PublicPackages/_packaging/onnxruntime-cuda-11/pypi/simple/), or "
               "pip install \"onnxruntime-gpu<1.19\"")
        built = "CUDA 12"
    else:
        return None
    return _make("wheel-platform", f"onnxruntime-gpu {ort} is a {built} build",
                 f"onnxruntime-gpu {ort} from PyPI is built for {built}, and this machine has CUDA {major}: its CUDA "
                 "provider cannot load", fix, [ctx.line_fact(lines[0])], lines[:1])


# clang/hipcc: "cannot find ROCm device library; provide its path via '--rocm-path' or '--rocm-device-lib-path'", and
# users' words for it
_DEVICE_LIBS = re.compile(r"(?i)cannot find ROCm device librar|(?:can'?t|cannot|fails? to|unable to|not) (?:find|locate)"
                          r".{0,30}\b(?:rocm-)?device[-_ ]lib|device[-_ ]lib(?:s|-path)?\b.{0,30}\b(?:missing|not found)")


@rule("rocm-libs-missing")
def device_bitcode_not_found(ctx: Context) -> Optional[Diagnosis]:
    """The HIP compiler links every kernel with ROCm's device libraries (ocml, ockl: amdgcn/bitcode/*.bc) and looks for
    them under the ROCm root only; a build of its own or a distribution's packaging puts them elsewhere."""
    lines = _lines_saying(ctx, "device", _DEVICE_LIBS.pattern)
    if not lines:
        return None
    shown = re.search(r"(/\S{1,200}?/amdgcn/bitcode)\b", _text(ctx))
    folder = shown.group(1) if shown else "<the folder with ocml.bc: find / -name ocml.bc>"
    return _make("rocm-libs-missing", "the HIP compiler cannot find ROCm's device libraries",
                 "hipcc/clang link each kernel with the device bitcode (ocml.bc, ockl.bc) and look for it under the ROCm "
                 "root only; here it lives elsewhere",
                 f"export HIP_DEVICE_LIB_PATH={folder} DEVICE_LIB_PATH={folder} (hipcc reads them) before the build, or "
                 f"pass --rocm-device-lib-path={folder} to clang (HIPCC_COMPILE_FLAGS_APPEND, or the CMake "
                 "CMAKE_HIP_FLAGS); where find finds no ocml.bc the package that ships them is not installed: sudo "
                 "apt install rocm-device-libs (dnf install rocm-device-libs)", [ctx.line_fact(lines[0])], lines[:1])


# "CUDA Toolkit _not_ installed", "without the CUDA toolkit", "CUDA runtime is not installed", "没有安装CUDA"
_NO_CUDA_TOOLKIT = re.compile(r"(?i)\bCUDA (?:toolkit|runtime)[\W_]{0,3}(?:is |was |were )?[*_]?(?:not|isn't|wasn't|n't)[*_]?\s*installed|"
                              r"\bwithout (?:the |a )?CUDA (?:toolkit|runtime)\b|\bno CUDA (?:toolkit|runtime)\b|"
                              r"(?:没有|未)安装\s*CUDA")


@rule("rocm-libs-missing")
def cuda_toolkit_not_installed(ctx: Context) -> Optional[Diagnosis]:
    """A program whose GPU engine loads the CUDA runtime libraries from a CUDA Toolkit install (not from a wheel of
    its own) fails on a machine with only the display driver: the user says the toolkit is not installed."""
    lines = _lines_saying(ctx, "cuda", _NO_CUDA_TOOLKIT.pattern)
    if not lines or any(e.family for e in ctx.errors):
        return None   # an error line of its own says more than the remark
    tool = ctx.tool() or "the program"
    windows = on_windows(ctx, _text(ctx))
    return _make("rocm-libs-missing", "the CUDA runtime libraries are not installed",
                 f"{tool}'s GPU engine loads the CUDA runtime (cudart, cuBLAS) from a CUDA Toolkit install; with only "
                 "the display driver it cannot start on the GPU",
                 f"install the NVIDIA CUDA Toolkit of the CUDA version {tool} is built for (its release notes name it; "
                 f"{'the Windows installer adds its bin folder to PATH' if windows else 'then put its lib64 on LD_LIBRARY_PATH'}"
                 f"), or {tool}'s own CUDA runtime download where it offers one; then restart {tool}",
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# "pytorch-triton-rocm==2.3.1 uses ROCM 6's libamdhip64.so instead of ROCM 5.7"
_OTHER_HIP = re.compile(r"(?i)(?<![\w.-])([a-z][\w.-]*?)(?:==[\w.+]+)?\s+(?:uses|loads|links(?: against)?|picks up|wants|needs)\s+"
                        r"ROCm\s*(\d+)(?:\.\d+)*'?s?\s+libamdhip64\S*\s+(?:instead of|but|not|while|and not)\s+(?:the\s+)?"
                        r"ROCm\s*(\d+(?:\.\d+)*)")


@rule("wheel-platform")
def wheel_built_for_another_rocm(ctx: Context) -> Optional[Diagnosis]:
    """A wheel that loads another ROCm major's HIP runtime than the rest of the stack: the index served a build made for
    the other ROCm (pytorch-triton-rocm was one file for several ROCm indexes)."""
    lines = _lines_saying(ctx, "libamdhip64", _OTHER_HIP.pattern)
    if not lines:
        return None
    package, built, have = _OTHER_HIP.search(lines[0].line).groups()
    if built == have.split(".")[0]:
        return None
    return _make("wheel-platform", f"{package} is built for ROCm {built}",
                 f"the {package} wheel installed loads ROCm {built}'s libamdhip64 while the stack is ROCm {have}: the "
                 f"index served a build made for ROCm {built}",
                 f"move the whole stack to ROCm {built} (torch and {package} from the download.pytorch.org/whl/rocm"
                 f"{built}.x index, with a ROCm {built} runtime), or build {package} from source against ROCm {have}",
                 [ctx.line_fact(lines[0])], lines[:1])


# CTranslate2's own wording (faster-whisper, WhisperX): "Library libcublas.so.12 is not found or cannot be loaded"
# and on Windows, where the library is a DLL named by the same major: "Library cublas64_12.dll is not found or cannot be
# loaded" (CTranslate2 4.0.0, the first CUDA 12 release, issue 1630)
# (the short form "Library libcublas.so.12 is not found" is the same message as some releases and wrappers print it)
_CT2_CUBLAS = re.compile(r"Library ((?:lib)?cublas(?:Lt)?(?:\.so\.|64_)(\d+)(?:\.dll)?) is not found(?: or cannot be loaded)?")


# a frozen (PyInstaller) or standalone program: its own folder is where it loads DLLs from
_FROZEN = re.compile(r"(?i)Failed to execute script|\bstandalone\b|\bPyInstaller\b|_MEIPASS|\b_MEI\d+")


@rule("rocm-libs-missing")
def ctranslate2_cuda_major(ctx: Context) -> Optional[Diagnosis]:
    """CTranslate2 opens cuBLAS by the CUDA major it was built for: 3.x releases CUDA 11 (libcublas.so.11), 4.x CUDA
    12. A machine or image with the other CUDA has no library of that name."""
    lines = _lines_saying(ctx, "is not found", _CT2_CUBLAS.pattern)
    if not lines:
        return None
    library, major = _CT2_CUBLAS.search(lines[0].line).groups()
    other = "ctranslate2>=4 (CUDA 12)" if major == "11" else "ctranslate2==3.24.0 (the last CUDA 11 release)"
    # faster-whisper pins ctranslate2 by its own release: 1.0.0 moved to ctranslate2 4.x (CUDA 12); 0.10.1 is the last
    # release on ctranslate2 3.x, the CUDA 11 builds (SYSTRAN/faster-whisper#734: "faster-whisper==0.10.1,
    # ctranslate2==3.24.0" for CUDA 11; collabora/WhisperLive#159); an app that installs faster-whisper gets it back
    # with its pin
    if major == "12":
        other += ("; with faster-whisper (Whisper web UIs, WhisperX, whisper-ctranslate2) pin its CUDA 11 release: "
                  "pip install faster-whisper==0.10.1 (it brings ctranslate2 3.x)")
    if library.endswith(".dll"):
        # Windows: no LD_LIBRARY_PATH; the DLL comes with the CUDA toolkit's bin folder (on PATH by its installer) or
        # with pip's nvidia-cublas wheel, whose bin folder must be put on PATH
        # the venv's torch carries cuBLAS DLLs of its own CUDA in torch\lib: a cu12 torch has this very DLL (import
        # torch first puts its folder on the DLL path); with a cu11 torch, copying its cublas64_11.dll and
        # cublasLt64_11.dll under the _12 names is the workaround RealtimeSTT's maintainer gave and users confirmed
        # (KoljaB/RealtimeSTT#220)
        torch_cu = re.search(r"\+cu1(\d)\d", _text(ctx))
        if major == "12" and not (torch_cu and torch_cu.group(1) == "2"):
            borrowed = ("; or, where the environment's torch is a CUDA 11 build, copy its torch\\lib\\cublas64_11.dll "
                        "and cublasLt64_11.dll in that folder under the names cublas64_12.dll and cublasLt64_12.dll "
                        "(the workaround faster-whisper apps' users confirm)")
        elif major == "12":
            borrowed = ("; or import torch before ctranslate2 (faster-whisper): this CUDA 12 torch's torch\\lib holds "
                        f"{library} and goes on the DLL search path")
        else:
            borrowed = ""
        # CUDA 11 builds (ctranslate2 3.x) open cuDNN 8 next (faster-whisper's README before 1.0: "cuBLAS for CUDA 11"
        # and "cuDNN 8 for CUDA 11"); a standalone (frozen) program loads both from its own folder, and such builds
        # publish them as a separate download (Purfview/whisper-standalone-win#237: the "libs" release, placed next
        # to the executable) (round 20, r20d)
        cudnn = " and cuDNN 8 for CUDA 11 (NVIDIA's cuDNN archive), which it opens next" if major == "11" else ""
        if _FROZEN.search(_text(ctx)):
            return _make("rocm-libs-missing", f"the standalone program lacks CUDA {major}'s libraries",
                         f"this standalone build's ctranslate2 is built for CUDA {major} and loads {library} (and "
                         f"cuDNN) from the program's own folder; they are not shipped in the executable's package",
                         f"put cuBLAS for CUDA {major}{cudnn.replace(', which it opens next', '')} next to the "
                         "program's executable: the program's README names its separate libraries download (the "
                         f"cuBLAS and cuDNN DLLs); or install the CUDA {major} toolkit and that cuDNN with their bin "
                         "folders on PATH", [ctx.line_fact(lines[0])], lines[:1])
        return _make("rocm-libs-missing", f"ctranslate2 needs CUDA {major}'s cuBLAS DLL",
                     f"this ctranslate2 is built for CUDA {major} and loads {library}, which the CUDA installed on "
                     f"this Windows machine (another major) does not have, or not on the DLL search path",
                     f"install the CUDA {major} toolkit (its bin folder goes on PATH){cudnn}, or pip install "
                     f"nvidia-cublas-cu{major} and add <site-packages>\\nvidia\\cublas\\bin to PATH before starting "
                     f"the program{borrowed}; or install the ctranslate2 built for the CUDA you have: {other}",
                     [ctx.line_fact(lines[0])], lines[:1])
    # Ubuntu's own cuBLAS packages (universe): libcublas11 on 22.04, the base of Colab's image (SYSTRAN/faster-whisper
    # #663 names it; Softcatala/whisper-ctranslate2#74's fix on Colab), libcublas12 on 24.04 (canonical/inference-snaps
    # PR 78; checked v18b: speechlib's and Style-Bert-VITS2's Colab notes run `apt install libcublas11`,
    # charmed-hpc/charmed-hpc-benchmarks' README `sudo apt install libcublas12`)
    system = {"11": "; on Ubuntu 22.04 (Google Colab's image too) the system package: sudo apt-get install libcublas11",
              "12": "; on Ubuntu 24.04 the system package: sudo apt-get install libcublas12"}.get(major, "")
    # CUDA 12 builds (ctranslate2 4.x) open cuDNN next, so pip's cuBLAS alone moves the failure one library on:
    # faster-whisper's README installs both wheels and puts both lib folders on LD_LIBRARY_PATH (cuDNN 9 for
    # ctranslate2 4.5+, cuDNN 8 for 4.0-4.4: its note on ctranslate2==4.4.0) (round 19, r19c; wyoming-faster-whisper#30)
    pip_libs = (f"pip install nvidia-cublas-cu{major} and export LD_LIBRARY_PATH=<site-packages>/nvidia/cublas/lib:"
                "$LD_LIBRARY_PATH" if major != "12" else
                "pip install nvidia-cublas-cu12 nvidia-cudnn-cu12==9.* (==8.* under ctranslate2 4.0-4.4) into the same "
                "environment and export LD_LIBRARY_PATH=$(python3 -c 'import os, nvidia.cublas.lib, nvidia.cudnn.lib; "
                "print(os.path.dirname(nvidia.cublas.lib.__file__) + \":\" + os.path.dirname(nvidia.cudnn.lib.__file__))')"
                " before starting the program (a service: in its unit's Environment= or its start script)")
    return _make("rocm-libs-missing", f"ctranslate2 needs CUDA {major}'s cuBLAS",
                 f"this ctranslate2 is built for CUDA {major} and opens {library}, which the CUDA installed here (or "
                 "the container's base image) does not have",
                 f"install CUDA {major}'s cuBLAS beside it{system}; or {pip_libs} (or the CUDA {major} toolkit; in "
                 f"a container a CUDA {major} base image, nvidia/cuda:{major}.x-cudnn-runtime); or install the "
                 f"ctranslate2 built for the CUDA you have: {other}", [ctx.line_fact(lines[0])], lines[:1])


_CUDNN_HANDLE = re.compile(r"(?i)(?:could not|cannot|can't|unable to) create (?:a )?cudnn handle|"
                           r"CUDNN_STATUS_(?:NOT_INITIALIZED|INTERNAL_ERROR)")


@rule("rocm-libs-missing")
def cudnn_handle_not_created(ctx: Context) -> Optional[Diagnosis]:
    """cuDNN failing at its very first call (creating its handle) is most often a cuDNN that is not installed, or not
    for this CUDA, where the framework expects a system cuDNN (jaxlib's local-CUDA builds, TensorFlow); a GPU whose
    memory another process or the framework's preallocation took comes next. The likely reading."""
    lines = _lines_saying(ctx, "cudnn", _CUDNN_HANDLE.pattern)
    if not lines or any(e.family for e in ctx.errors):
        return None   # an error line of its own (out of memory, a driver) says which
    jax = "jax" in _text(ctx).lower()
    return _make("rocm-libs-missing", "cuDNN cannot start",
                 "cuDNN fails at its first call: the framework finds no cuDNN for the installed CUDA (it expects a "
                 "system one), or the GPU's memory is already taken",
                 "install cuDNN for the installed CUDA (pip install nvidia-cudnn-cu12 for CUDA 12, or NVIDIA's cuDNN "
                 "package for that CUDA" + ("; jax: pip install -U \"jax[cuda12]\" brings its own" if jax else "")
                 + "); where cuDNN is installed, stop the framework taking all GPU memory first ("
                 + ("XLA_PYTHON_CLIENT_PREALLOCATE=false" if jax else "TensorFlow: tf.config.experimental."
                    "set_memory_growth") + ")", [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# "ImportError: cannot import name 'intel' from 'triton._C.libtriton'"
_LIBTRITON_NAME = re.compile(r"cannot import name '(\w+)' from 'triton\._C\.libtriton")


@rule("wheel-platform")
def triton_backend_without_its_library(ctx: Context) -> Optional[Diagnosis]:
    """triton loads every backend folder under triton/backends/ and each imports its part of the compiled libtriton; a
    folder another triton package left there (pytorch-triton-xpu's intel, a CUDA triton's nvidia under a ROCm one)
    asks the installed libtriton for a part it was not built with."""
    lines = _lines_saying(ctx, "libtriton", _LIBTRITON_NAME.pattern)
    if not lines:
        return None
    name = _LIBTRITON_NAME.search(lines[0].line).group(1)
    return _make("wheel-platform", f"a triton backend '{name}' the installed libtriton lacks",
                 f"triton/backends/{name} comes from another triton package installed into the same environment "
                 f"(two tritons overwrite each other's files); the libtriton in place was built without '{name}'",
                 f"remove the stray backend and reinstall the one triton torch pins: pip uninstall -y triton "
                 f"pytorch-triton-rocm pytorch-triton-xpu, delete site-packages/triton if it stays (its backends/{name} "
                 "folder), then pip install the triton torch names (pip show torch lists it; ROCm: pytorch-triton-rocm "
                 "from torch's index)", [ctx.line_fact(lines[0])], lines[:1])


# clang's OpenMP / HIP offload searching LIBRARY_PATH for its device runtime bitcode before its own lib folder
_OFFLOAD_BITCODE = re.compile(r"No such file or directory: '?(\S+?)/libomptarget-(amdgpu|nvptx)[-\w]*\.bc")


@rule("rocm-libs-missing")
def offload_bitcode_taken_from_library_path(ctx: Context) -> Optional[Diagnosis]:
    """amdclang/clang look for the offload runtime's device bitcode (libomptarget-amdgpu-gfxXXX.bc) in every folder of
    LIBRARY_PATH before ROCm's own lib/llvm/lib: a folder of another package there (a module system's prepend-path)
    is taken, and the file is not in it."""
    lines = _lines_saying(ctx, "libomptarget", _OFFLOAD_BITCODE.pattern)
    if not lines:
        return None
    folder = _OFFLOAD_BITCODE.search(lines[0].line).group(1)
    if re.search(r"(?i)/lib/llvm/lib$|/llvm/lib$", folder):
        return None   # the compiler's own folder: the bitcode itself is missing, not the search order
    root = re.search(r"(/\S*?/rocm[-\w.]*)/(?:lib/)?llvm/bin\b", _text(ctx))
    llvm_lib = f"{root.group(1)}/lib/llvm/lib" if root else "$ROCM_PATH/lib/llvm/lib"
    return _make("rocm-libs-missing", "the offload bitcode is looked for in another package's folder",
                 f"LIBRARY_PATH names {folder}, which clang searches for its device runtime before ROCm's own "
                 "folder; the bitcode is not there",
                 f"put ROCm's folder first: export LIBRARY_PATH={llvm_lib}:$LIBRARY_PATH (or drop {folder} from "
                 "LIBRARY_PATH for the GPU build)", [ctx.line_fact(lines[0])], lines[:1])


# ROCm installed outside /opt/rocm, in the user's words or by DeepSpeed's read of /opt/rocm/.info/version
_ROCM_ELSEWHERE = re.compile(r"(?i)\bROCm\b.{0,60}\b(?:installed|lives?|sits?)\b.{0,30}\b(?:in(?:to)?|at|under) (?:a )?"
                             r"(?:different|another|other|non-?standard|custom)\b|\bROCm\b.{0,60}\bnot (?:in(?:to)?|"
                             r"under|at) [`']?/opt/rocm|No such file or directory: '/opt/rocm/\.info/version")


@rule("rocm-libs-missing")
def rocm_outside_opt_rocm(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm installed elsewhere than /opt/rocm (a distribution's /usr, an HPC module's prefix): each tool has its own
    variable for where it is, and without it looks in /opt/rocm. Triton links its ROCm kernels with ROCm's ld.lld
    (TRITON_HIP_LLD_PATH); DeepSpeed's op builder and torch's extension builder read ROCM_HOME."""
    lines = _lines_saying(ctx, "rocm", _ROCM_ELSEWHERE.pattern)
    if not lines:
        return None
    text = _text(ctx)
    root = "<the ROCm prefix: dirname $(dirname $(which hipcc)), /usr on Gentoo, Fedora, Arch>"
    if re.search(r"(?i)\btriton\b", text):
        fix = (f"export TRITON_HIP_LLD_PATH={root}/llvm/bin/ld.lld (triton's own variable for ROCm's linker; ROCm 6.x "
               f"and older: {root}/llvm/bin/ld.lld, distributions: the ld.lld of their rocm-llvm package)")
    else:
        fix = (f"export ROCM_HOME={root} ROCM_PATH=$ROCM_HOME before the build (DeepSpeed's op builder and torch's "
               "extension builder read ROCM_HOME); old DeepSpeed releases read /opt/rocm/.info/version regardless: "
               "pip install -U deepspeed, or link the prefix there: sudo ln -s <prefix> /opt/rocm")
    return _make("rocm-libs-missing", "ROCm is not under /opt/rocm", "the tool looks for ROCm in /opt/rocm unless its "
                 "variable names another prefix, and this ROCm lives elsewhere", fix, [ctx.line_fact(lines[0])],
                 lines[:1])


# a ROCm runtime library the program ships inside its own folder, said crashing: "the crash occurs inside the bundled
# libhsa-runtime64.so.1.21.0", ".../prebuilt/lib/libamdhip64.so.7 segfaults"
_BUNDLED_RUNTIME = re.compile(r"(?i)\b(?:bundled|shipped|vendored|packaged|its own|prebuilt'?s?)\W{0,4}(?:(?:ROCm|HIP) runtime"
                              r"[^\n(]{0,40}?)?\W{0,4}(?:\(?`?)(lib(?:hsa-runtime64|amdhip64|rocblas|hipblas|hiprtc|amd_comgr)"
                              r"[\w.]{0,20})")
_SYSTEM_ROCM = re.compile(r"(?i)\bsystem ROCm\b|/opt/rocm\b")
# the installed ROCm the paste names (/opt/rocm-6.4.1): the fix points the loader there
_ROCM_PREFIX = re.compile(r"/opt/rocm(?:-\d+(?:\.\d+){1,2})?\b")


@rule("wheel-platform")
def bundled_rocm_runtime_crashes(ctx: Context) -> Optional[Diagnosis]:
    """A prebuilt program that carries its own copy of the ROCm runtime (llama.cpp prebuilts, app bundles) and
    crashes inside that copy, on a machine whose installed ROCm works: the bundled runtime is a build for other
    kernels or GPUs than this one, and the system's runtime is the one to load."""
    text = _text(ctx)
    lines = _lines_saying(ctx, "lib", _BUNDLED_RUNTIME.pattern) if re.search(r"(?i)bundled|shipped|vendored|packaged|"
                                                                            r"its own|prebuilt", text) else []
    crashed = ctx.crashes() or _lines_matching(ctx, r"(?i)\bsigsegv\b|segfault|segmentation fault|core dumped")
    if not lines or not crashed or not _SYSTEM_ROCM.search(text):
        return None
    library = _BUNDLED_RUNTIME.search(lines[0].line).group(1)
    prefix = (_ROCM_PREFIX.search(text) or re.match(r".*", "/opt/rocm")).group(0)
    tool = ctx.tool() or "the program"
    return _make("wheel-platform", f"{tool}'s bundled ROCm runtime crashes here",
                 f"{tool} loads its own copy of the ROCm runtime ({library}), built for other GPUs or kernels than "
                 "this machine's, and crashes in it; the ROCm installed on the machine runs this GPU",
                 f"load the system ROCm's runtime ahead of the bundled copy: export LD_LIBRARY_PATH={prefix}/lib:"
                 f"$LD_LIBRARY_PATH before starting {tool} (or remove the bundled {library.split('.so')[0]} files from "
                 f"its folder so the loader takes {prefix}'s); a {tool} release that prefers the system ROCm fixes it "
                 "for good", [ctx.line_fact(lines[0])], lines[:1] + crashed[:1])
