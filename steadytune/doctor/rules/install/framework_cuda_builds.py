"""TensorFlow and PaddlePaddle load the CUDA and cuDNN libraries by the names of the release they were built with: the
name carries the version (libcublas.so.9.0, cudart64_101.dll, cusolver64_10.dll, cudnn64_7.dll), so another CUDA or
cuDNN installed beside them is not found, however installed. The library name says which CUDA / cuDNN the framework
wants; the release tables below say which framework release was built for the CUDA the machine has. Two fixes follow:
install the CUDA / cuDNN the library name asks for (beside the other), or the framework build made for the installed
one. Where the library the name asks for is the installed one's, it is only off the loader's path.

The tables:
  - TensorFlow: the tested build configurations, https://www.tensorflow.org/install/source#gpu (Linux) and
    https://www.tensorflow.org/install/source_windows#gpu (Windows, same CUDA majors; native Windows GPU builds end
    with 2.10).
  - PaddlePaddle: the install pages per release, https://www.paddlepaddle.org.cn/documentation/docs/en/2.4/install/
    pip/windows-pip_en.html (and linux-pip_en.html; 2.2's, 2.5's alike): the PyPI paddlepaddle-gpu of 2.0 to 2.4 is the
    CUDA 10.2 / cuDNN 7.6 build, of 2.5 and 2.6 the CUDA 11.8 / cuDNN 8.6 one (PaddlePaddle/docs release/2.5 and
    release/2.6, docs/install/pip/linux-pip.md: "CUDA11.8 的 PaddlePaddle ... pip install paddlepaddle-gpu==2.5.2");
    the others are X.Y.Z.postNNN from https://www.paddlepaddle.org.cn/whl/<os>/mkl/avx/stable.html (2.6: the
    .../packages/stable/cuNNN/ index).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule

# TensorFlow release -> (CUDA, cuDNN) of its GPU wheel (tensorflow.org/install/source#gpu, "Tested build configurations",
# checked against tensorflow/docs site/en/install/source.md of 2026-03: 2.18 to 2.21 are CUDA 12.5 / cuDNN 9.3;
# rechecked in round 18: the Linux GPU table's row tensorflow-2.21.0 reads cuDNN 9.3, CUDA 12.5, as quoted from
# https://www.tensorflow.org/install/source#gpu, page updated 2026-03-12);
# also read by arch/framework_cuda.py for the first release built with a CUDA that knows a GPU generation
TF_BUILDS = {(1, 0): ("8.0", "5.1"), (1, 1): ("8.0", "5.1"), (1, 2): ("8.0", "5.1"), (1, 3): ("8.0", "6"),
              (1, 4): ("8.0", "6"), **{(1, m): ("9.0", "7") for m in range(5, 13)},
              (1, 13): ("10.0", "7.4"), (1, 14): ("10.0", "7.4"), (1, 15): ("10.0", "7.4"), (2, 0): ("10.0", "7.4"),
              (2, 1): ("10.1", "7.6"), (2, 2): ("10.1", "7.6"), (2, 3): ("10.1", "7.6"), (2, 4): ("11.0", "8.0"),
              **{(2, m): ("11.2", "8.1") for m in range(5, 12)}, (2, 12): ("11.8", "8.6"), (2, 13): ("11.8", "8.6"),
              (2, 14): ("11.8", "8.7"), (2, 15): ("12.2", "8.9"), (2, 16): ("12.3", "8.9"), (2, 17): ("12.3", "8.9"),
              **{(2, m): ("12.5", "9.3") for m in range(18, 22)}}
# PaddlePaddle release -> its GPU builds by CUDA (the wheel's .postNNN suffix; the PyPI one has none), cuDNN by CUDA;
# from each release branch's install page (PaddlePaddle/docs release/2.0 ... release/2.6, install/pip/linux-pip.md)
_PADDLE_BUILDS = {(2, 0): ("9.0", "10.0", "10.1", "10.2", "11.0"), (2, 1): ("10.1", "10.2", "11.0", "11.2"),
                  (2, 2): ("10.1", "10.2", "11.0", "11.1", "11.2"), (2, 3): ("10.1", "10.2", "11.1", "11.2", "11.6"),
                  (2, 4): ("10.2", "11.2", "11.6", "11.7"), (2, 5): ("10.2", "11.2", "11.6", "11.7", "11.8", "12.0"),
                  (2, 6): ("11.2", "11.6", "11.7", "11.8", "12.0")}


def _pypi_cuda(release: Optional[tuple[int, int]]) -> str:
    """The CUDA of PyPI's paddlepaddle-gpu wheel: 10.2 up to 2.4, 11.8 from 2.5 (the same install pages)."""
    return "11.8" if release and release >= (2, 5) else "10.2"


# (the cuDNN each CUDA build was made with; 11.2 was cuDNN 8.1.1 in 2.1 to 2.3's pages and 8.2.1 from 2.4's, the
# major the same)
_PADDLE_CUDNN = {"9.0": "7.6", "10.0": "7.6", "10.1": "7.6", "10.2": "7.6", "11.0": "8.0", "11.1": "8.1",
                 "11.2": "8.2", "11.6": "8.4", "11.7": "8.4", "11.8": "8.6", "12.0": "8.9"}

# the CUDA releases, in order, that a library major may belong to
_CUDA_RELEASES = ("8.0", "9.0", "9.1", "9.2", "10.0", "10.1", "10.2") + tuple(f"11.{m}" for m in range(9)) + \
    tuple(f"12.{m}" for m in range(10)) + ("13.0",)

_LIBS = r"cudart|cublasLt|cublas|cudnn|cufft|curand|cusolver|cusparse"
# a CUDA library by its versioned name: Linux soname (libcublas.so.10.0, libcudnn.so.7) or Windows DLL (cudart64_101.dll)
_VERSIONED = re.compile(rf"\blib({_LIBS})\w{{0,12}}\.so\.(\d+(?:\.\d+)?)|\b({_LIBS})\w{{0,12}}?64_(\d+)\.dll", re.I)
_UNVERSIONED = re.compile(rf"\blib({_LIBS})\.so\b(?!\.\d)|\b({_LIBS})64\.dll\b|Cannot load (cudnn|cublas|cudart) shared "
                          r"library|(cudnn|cublas)_dso_handle should not be null", re.I)
# the frameworks' words for a library they could not load
_LOAD_FAILED = re.compile(r"(?i)cannot open shared object|Could not load dynamic library|not configured correctly|"
                          r"DLL load failed|Cannot load \w+ shared library|dso_handle should not be null|"
                          r"\b(?:missing|can't find|cannot find|could not find|not found|找不到|缺少)\b")

# (TensorFlow's short name counts where a release follows it: "tf 2.1", "**TF:** 2.13")
_TF = re.compile(r"(?i)\btensorflow|\btf-nightly|\bTF\b(?=\W{0,6}v?\d\.\d)")
_PADDLE = re.compile(r"(?i)\bpaddle")
# the framework's release: "TensorFlow version: 1.6", "tensorflow-gpu==1.13.1", "TensorFlow-GPU 1.13.1",
# "TensorFlow version (you are using): 2.2.0-rc4", "paddlepaddle-gpu：2.4.2", "PaddlePaddle version    2.0.2"
_TF_RELEASE = re.compile(r"(?i)\b(?:tensorflow(?:[-_]gpu)?|tf-nightly(?:-gpu)?|tf)(?:\s+version)?(?:\s*\([^)\n]{0,40}\))?"
                         r"(?:\*\*)?\s*(?:==|[:：=]|\s)\s*(?:\*\*\s*)?v?(\d)\.(\d{1,2})(?:\.\d+)?((?:-?(?:rc|dev)\d*)?)")
_PADDLE_RELEASE = re.compile(r"(?i)\bpaddle(?:paddle)?(?:[-_]gpu)?(?:\s+version)?\s*(?:==|[:：=]|\s)\s*v?(\d)\.(\d{1,2})"
                             r"(?:\.(\d+))?")
# the installed CUDA / cuDNN, said by the user: "CUDA version: 9.1", "Cuda 11.1", "CUDA：11.3", "Cuda_10.1.105",
# "including CUDA10.0", "cuDNN 8.0.4", "CUDNN：8.9.1", TensorFlow's issue template "CUDA/cuDNN version: 10.2 / 7.6" (CUDA
# first); not nvidia-smi's "CUDA Version" (the driver's ceiling)
_INSTALLED_CUDA = re.compile(r"(?i)\bcuda(?:[ _-]?toolkit)?(?:\s*/\s*cudnn)?(?:\s*version)?\s*[:：=]?\s*[_v]?(\d{1,2}\.\d)"
                             r"(?:\.\d+)?\b"
                             r"(?!\s*(?:\||and later|or later|\+))")
_INSTALLED_CUDNN = re.compile(r"(?i)\bcudnn(?:\s*version)?\s*[:：=]?\s*v?(\d)(?:\.\d+)*\b")


# TensorFlow's own answer that it has no GPU: a device list with the CPU only, "Num GPUs Available: 0",
# is_gpu_available() False, or the user's "GPU not found" / "doesn't detect my GPU"
_NO_GPU_LISTED = re.compile(r"(?i)^\W*\[PhysicalDevice\(name='/physical_device:CPU:0', device_type='CPU'\)\]\W*$|"
                            r"Num GPUs Available\W{0,3}0\b|is_gpu_available\(\)\W{0,6}False|\bGPU (?:is )?not (?:found|"
                            r"detected|recogni[sz]ed)|\b(?:doesn'?t|does not|can'?t|cannot|won'?t) (?:see|detect|find|"
                            r"recogni[sz]e) (?:my |the |any )?GPU|"
                            # told in words: "list_physical_devices only shows the CPU", "only CPU:0 in the device list"
                            r"\bonly (?:shows?|lists?|sees?|finds?|returns?) (?:the |my )?CPU\b|\bonly (?:the )?CPU(?::0)? "
                            r"(?:is )?(?:listed|shown|in the (?:device )?list)")


def _release(m: Optional[re.Match]) -> Optional[tuple[int, int]]:
    return (int(m.group(1)), int(m.group(2))) if m else None


def _cuda_of(lib: str, version: str) -> list[str]:
    """The CUDA releases whose copy of `lib` carries this version in its name. Up to 10.0 every library is named by
    the CUDA release (libcublas.so.9.0, cublas64_100.dll); from 10.1 the math libraries carry their own major:
    cuBLAS / cuSPARSE follow CUDA's major (10 in 10.1-10.2), cuSOLVER is 10 through CUDA 11.0 and 11 from 11.1 (on
    into CUDA 12), cuFFT 10 through 11.x, cuRAND 10 from 10.1 on; the runtime is cudart 10.1 / 10.2, 11.0 for every
    11.x, 12 for 12.x (NVIDIA's CUDA Toolkit release notes, the libraries' version tables)."""
    lib = lib.lower()
    if "." in version or len(version) == 3 or version in ("80", "90", "91", "92"):
        exact = version if "." in version else f"{version[:-1]}.{version[-1]}"
        if exact == "11.0" and lib == "cudart":
            return [r for r in _CUDA_RELEASES if r.startswith("11.")]
        return [exact] if exact in _CUDA_RELEASES else []
    major = int(version)
    if lib == "cusolver":
        span = ("10.1", "11.0") if major == 10 else ("11.1", "12.9") if major == 11 else (f"{major + 1}.0",) * 2
    elif lib == "cufft":
        span = ("10.1", "11.8") if major == 10 else ("12.0", "12.9") if major == 11 else (f"{major + 1}.0",) * 2
    elif lib == "curand":
        span = ("10.1", "12.9") if major == 10 else ("13.0", "13.0")
    elif major == 10:
        span = ("10.1", "10.2")
    else:
        span = (f"{major}.0", f"{major}.9")
    order = list(_CUDA_RELEASES)
    if span[0] not in order:
        return []
    last = span[1] if span[1] in order else span[0]
    return order[order.index(span[0]): order.index(last) + 1]


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def _installed(ctx: Context, lib: Optional[str], wanted_version: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(CUDA, cuDNN major) the user says are installed; else the other version of the same library the paste names
    as present ("I do have cusolver64_11.dll")."""
    cuda = cudnn = None
    for line in ctx.sheet.lines:
        if re.search(r"(?i)Driver Version|NVIDIA-SMI", line):
            continue
        for m in _INSTALLED_CUDA.finditer(line):
            if m.group(1) in _CUDA_RELEASES:
                cuda = cuda or m.group(1)
        for m in _INSTALLED_CUDNN.finditer(line):
            if not re.match(r"(?i)cudnn\w*64_|cudnn\.h", line[m.start():m.start() + 12]):
                cudnn = cudnn or m.group(1)
    if lib and wanted_version and not (cuda if lib != "cudnn" else cudnn):
        others = {(m.group(2) or m.group(4)) for m in _VERSIONED.finditer(_text(ctx))
                  if (m.group(1) or m.group(3)).lower() == lib} - {wanted_version}
        if others:
            other = sorted(others)[-1]
            if lib == "cudnn":
                cudnn = other.split(".")[0]
            else:
                found = _cuda_of(lib, other)
                cuda = found[0] if len(found) == 1 else None
    return cuda, cudnn


def _wanted(ctx: Context) -> tuple[Optional[str], Optional[str], list]:
    """The versioned library the framework failed to load: (library, version in its name, the lines naming it)."""
    lines = _lines_matching(ctx, _VERSIONED)
    failing = [e for e in lines if _LOAD_FAILED.search(e.line)] or lines
    if not failing:
        return None, None, []
    m = _VERSIONED.search(failing[0].line)
    return (m.group(1) or m.group(3)).lower(), m.group(2) or m.group(4), failing


def _tf_for(cuda: str, windows: bool) -> Optional[str]:
    """The newest TensorFlow release built for this CUDA. From CUDA 11.1 the library names carry CUDA's major only
    (cuSOLVER 11, cuBLAS 11, cudart 11.0), so a release built for an older minor of the same major loads the newer
    one's libraries too (not across 11.0 / 11.1, where cuSOLVER's name changed). Native Windows: 2.10 was the last
    GPU build."""
    releases = {r: c for r, (c, _) in TF_BUILDS.items() if not windows or r <= (2, 10)}
    same = [r for r, c in releases.items() if c == cuda]
    if not same and _key(cuda) >= (11, 1):
        same = [r for r, c in releases.items() if _key(c)[0] == _key(cuda)[0] and (11, 1) <= _key(c) <= _key(cuda)]
    return ".".join(map(str, max(same))) if same else None


def _paddle_build(release: tuple[int, int], cuda: str) -> Optional[str]:
    """The release's build for the installed CUDA: the newest of its CUDA builds of the same major, not above it."""
    builds = _PADDLE_BUILDS.get(release, ())
    fits = [b for b in builds if _key(b)[0] == _key(cuda)[0] and _key(b) <= _key(cuda)]
    return max(fits, key=_key) if fits else None


def _paddle_install(release: tuple[int, int], patch: Optional[str], cuda: str, windows: bool) -> str:
    version = f"{release[0]}.{release[1]}.{patch or 0}"
    if cuda == _pypi_cuda(release):
        return f"pip install paddlepaddle-gpu=={version} (PyPI's is the CUDA {cuda} build)"
    post = cuda.replace('.', '')
    if release >= (2, 6):   # 2.6 moved its wheels to one package index per CUDA
        return (f"pip install paddlepaddle-gpu=={version}.post{post} -i "
                f"https://www.paddlepaddle.org.cn/packages/stable/cu{post}/")
    where = "windows" if windows else "linux"
    return (f"pip install paddlepaddle-gpu=={version}.post{post} -f "
            f"https://www.paddlepaddle.org.cn/whl/{where}/mkl/avx/stable.html")


@rule("rocm-libs-missing")
def framework_built_for_another_cuda(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    paddle = bool(_PADDLE.search(text))
    if not paddle and not _TF.search(text):
        return None
    if re.search(r"(?i)\brocm\b|tensorflow-rocm|\bhip\b", text):
        return None   # the ROCm builds: tensorflow_libraries' reading
    windows = on_windows(ctx, text) or bool(re.search(r"(?i)\.dll\b", text))
    name = "PaddlePaddle" if paddle else "TensorFlow"
    lib, version, lines = _wanted(ctx)
    release_m = (_PADDLE_RELEASE if paddle else _TF_RELEASE).search(text)
    release = _release(release_m)
    preview = bool(release_m and not paddle and release_m.group(3))
    if lib is None:
        return _unversioned(ctx, paddle, name, release, release_m, windows)
    cuda, cudnn = _installed(ctx, lib, version)
    folder_var = "PATH" if windows else "LD_LIBRARY_PATH"
    evidence, covers = [ctx.line_fact(lines[0])], lines[:1]
    if lib == "cudnn":
        wanted_cudnn = version.split(".")[0]
        table = (_PADDLE_CUDNN.get(_pypi_cuda(release)) if paddle and release in _PADDLE_BUILDS else
                 TF_BUILDS.get(release, (None, None))[1] if not paddle else None)
        if cudnn == wanted_cudnn:
            return _off_path(ctx, name, f"cuDNN {cudnn}", lines, windows)
        # the CUDA of the build that carries that cuDNN: Paddle's PyPI build where its cuDNN is that major, else the
        # release's (or any) build with it; TensorFlow's from its table
        if paddle:
            builds = [c for c in _PADDLE_BUILDS.get(release, tuple(_PADDLE_CUDNN))
                      if _PADDLE_CUDNN.get(c, "").split(".")[0] == wanted_cudnn]
            built_cuda = _pypi_cuda(release) if _pypi_cuda(release) in builds else builds[-1] if builds else None
        else:
            built_cuda = TF_BUILDS.get(release, (None,))[0] if release else None
        has = f"cuDNN {cudnn}" + (f" with CUDA {cuda}" if cuda else "") if cudnn else (f"CUDA {cuda}" if cuda else None)
        cause = (f"this {name} build loads {_named(lib, version, windows)}, cuDNN {wanted_cudnn}'s "
                 f"library" + (f" (the {name} {release[0]}.{release[1]} build it is: cuDNN {table})" if table and
                               not paddle else "") + (f"; this machine has {has}" if has else "") +
                 f", whose library has another name, so it is not found")
        fix = _rebuild_fix(ctx, paddle, name, release, release_m, cuda, windows,
                           f"install cuDNN {wanted_cudnn}" + (f" for CUDA {built_cuda}" if built_cuda else "") +
                           f" beside it and put its folder on {folder_var}")
        return _make("rocm-libs-missing", f"{name} wants cuDNN {wanted_cudnn}", cause, fix, evidence, covers)
    candidates = _cuda_of(lib, version)
    if not candidates:
        return None
    table_cuda = TF_BUILDS.get(release, (None,))[0] if release and not paddle else None
    if cuda in candidates:
        return _off_path(ctx, name, f"CUDA {cuda}", lines, windows)
    if table_cuda in candidates and not (preview and cuda and _key(cuda)[0] == _key(table_cuda)[0]):
        wanted = table_cuda
    else:
        near = [c for c in candidates if cuda and _key(c)[0] == _key(cuda)[0]]
        wanted = (near[-1] if near else candidates[0] if len(candidates) == 1 else
                  f"{candidates[0]}" if not cuda else candidates[-1])
    cudnn_of = (TF_BUILDS.get(release, (None, None))[1] if table_cuda == wanted else None) if not paddle else \
        _PADDLE_CUDNN.get(wanted)
    cause = (f"{name} loads {_named(lib, version, windows)}, CUDA {wanted}'s {lib} library: this {name} "
             + (f"({release[0]}.{release[1]}) " if release else "") + f"was built against CUDA {wanted}"
             + (f" and cuDNN {cudnn_of}" if cudnn_of else "")
             + (f"; the CUDA installed here is {cuda}, whose {lib} carries another version in its name, so it is not "
                "found" if cuda else ", and no CUDA of that release is found"))
    fix = _rebuild_fix(ctx, paddle, name, release, release_m, cuda, windows,
                       f"install CUDA {wanted}" + (f" with cuDNN {cudnn_of}" if cudnn_of else "")
                       + f" (beside the other CUDA; its {'bin' if windows else 'lib64'} folder on {folder_var})")
    return _make("rocm-libs-missing", f"{name} is built for CUDA {wanted}", cause, fix, evidence, covers)


def _named(lib: str, version: str, windows: bool) -> str:
    return f"{lib}64_{version}.dll" if windows and "." not in version else f"lib{lib}.so.{version}"


def _rebuild_fix(ctx: Context, paddle: bool, name: str, release: Optional[tuple[int, int]],
                 release_m: Optional[re.Match], cuda: Optional[str], windows: bool, install: str) -> str:
    """Either fix: the framework build for the installed CUDA, or the CUDA (cuDNN) its build wants."""
    if paddle and release in _PADDLE_BUILDS and cuda:
        build = _paddle_build(release, cuda)
        if build:
            return (f"install the {name} build for the installed CUDA {cuda}: "
                    f"{_paddle_install(release, release_m.group(3), build, windows)} (the CUDA {build} build, cuDNN "
                    f"{_PADDLE_CUDNN.get(build, '8')}; uninstall the other paddlepaddle-gpu first); or {install}")
        return (f"{name} {release[0]}.{release[1]} has builds for CUDA {', '.join(_PADDLE_BUILDS[release])} only: "
                f"{install}, or move to a {name} release with a build for CUDA {cuda}")
    if paddle:
        return (f"{install}; or install the paddlepaddle-gpu build made for the installed CUDA (X.Y.Z.postNNN for "
                "CUDA NN.N, from https://www.paddlepaddle.org.cn/whl/<linux|windows>/mkl/avx/stable.html; PyPI's 2.0 "
                "to 2.4 are the CUDA 10.2 build, 2.5 and 2.6 the CUDA 11.8 build)")
    other = _tf_for(cuda, windows) if cuda else None
    if other and (release is None or other != f"{release[0]}.{release[1]}"):
        pip = "tensorflow-gpu" if _key(other) < (2, 1) else "tensorflow"
        return (f"{install}; or install the TensorFlow release built for the installed CUDA {cuda}: pip install "
                f"{pip}=={other}.* ({pip} {other}: CUDA {TF_BUILDS[_key(other)[:2]][0]}, cuDNN "
                f"{TF_BUILDS[_key(other)[:2]][1]}, per tensorflow.org/install/source#gpu)")
    if other:
        # this TensorFlow is the release built for the installed CUDA: only its cuDNN is missing or off the path
        # (cuDNN's install guide: its bin / lib folder on PATH / LD_LIBRARY_PATH) - t17b
        return (f"{install}; TensorFlow {other} is the release built for CUDA {cuda} (cuDNN "
                f"{TF_BUILDS[_key(other)[:2]][1]}): put cuDNN's {'bin' if windows else 'lib'} folder on "
                f"{'PATH' if windows else 'LD_LIBRARY_PATH'}, or copy its files into the CUDA {cuda} folder's "
                f"{'bin' if windows else 'lib64'}") + " (tensorflow.org/install/source#gpu lists each release's CUDA and cuDNN)"
    return (f"{install}; no TensorFlow release is built for CUDA {cuda}" if cuda else install) + \
        " (tensorflow.org/install/source#gpu lists each release's CUDA and cuDNN)"


def _off_path(ctx: Context, name: str, what: str, lines: list, windows: bool) -> Diagnosis:
    folder = ("the CUDA bin folder (C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\vX.Y\\bin) and cuDNN's "
              "bin folder on PATH, then open a new terminal" if windows else
              "export LD_LIBRARY_PATH=/usr/local/cuda/lib64:<cuDNN's lib folder>:$LD_LIBRARY_PATH (in ~/.bashrc or "
              "the job script; or sudo ldconfig on an /etc/ld.so.conf.d entry)")
    return _make("rocm-libs-missing", f"{name} does not find {what}'s libraries",
                 f"the library {name} asks for is {what}'s, which is installed, but its folder is not on the "
                 f"loader's path", f"put its folder on the path: {folder}", [ctx.line_fact(lines[0])], lines[:1])


def _unversioned(ctx: Context, paddle: bool, name: str, release: Optional[tuple[int, int]],
                 release_m: Optional[re.Match], windows: bool) -> Optional[Diagnosis]:
    """No versioned name: Paddle's own words for an unversioned library it cannot open (the folder is off the
    loader's path), or TensorFlow's import failing where the release's CUDA is not the installed one."""
    cuda, _ = _installed(ctx, None, None)
    if paddle:
        lines = _lines_matching(ctx, _UNVERSIONED)
        lines = [e for e in lines if _LOAD_FAILED.search(e.line)] or lines
        if not lines:
            return None
        build = _paddle_build(release, cuda) if release in _PADDLE_BUILDS and cuda else None
        match = (f"; and the paddlepaddle-gpu build must be the one for the installed CUDA {cuda}: "
                 f"{_paddle_install(release, release_m.group(3), build, windows)}" if build else
                 f"; {name} {release[0]}.{release[1]} has builds for CUDA {', '.join(_PADDLE_BUILDS[release])} only, "
                 f"install one of those CUDA releases" if release in _PADDLE_BUILDS and cuda else "")
        folder = ("add the folders of cudnn64_*.dll and the CUDA DLLs (CUDA's bin) to PATH: set "
                  "PATH=<that folder>;%PATH%" if windows else
                  "find where it is (find / -name 'libcudnn.so*' 2>/dev/null; ldconfig -p | grep cudnn; a conda env "
                  "has it in $CONDA_PREFIX/lib) and export LD_LIBRARY_PATH=<that folder>:/usr/local/cuda/lib64:"
                  "$LD_LIBRARY_PATH in the shell that starts Python (an IDE started elsewhere does not inherit it)")
        return _make("rocm-libs-missing", "PaddlePaddle does not find the CUDA / cuDNN library it opens",
                     "Paddle opens CUDA's and cuDNN's libraries itself at run time, from the loader's path; the one it "
                     "names is not installed or not on that path", folder + match, [ctx.line_fact(lines[0])],
                     lines[:1])
    if release is None or release not in TF_BUILDS or cuda is None:
        return None
    built, cudnn = TF_BUILDS[release]
    if built == cuda or (_key(cuda)[0] >= 11 and _key(built)[0] == _key(cuda)[0]):
        return None
    lines = _lines_matching(ctx, r"(?i)DLL load failed|ImportError: lib\S*\.so|cannot open shared object|"
                                 r"Could not load dynamic library|Failed to load the native TensorFlow runtime")
    silent = not lines
    if silent:
        # no load error shown, only TensorFlow listing no GPU: a release whose CUDA libraries are not found skips the
        # GPU (its "Could not load dynamic library" lines are warnings the paste left out) and runs on the CPU
        lines = _lines_matching(ctx, _NO_GPU_LISTED)
    if not lines:
        return None
    dll = f"cudart64_{built.replace('.', '')}.dll" if windows else f"libcudart.so.{built}"
    fix = _rebuild_fix(ctx, False, name, release, release_m, cuda, windows,
                       f"install CUDA {built} with cuDNN {cudnn} (beside the other CUDA; its "
                       f"{'bin' if windows else 'lib64'} folder on {'PATH' if windows else 'LD_LIBRARY_PATH'})")
    what = ("TensorFlow does not find them, skips the GPU and lists only the CPU" if silent else "the import fails")
    return _make("rocm-libs-missing", f"TensorFlow {release[0]}.{release[1]} is built for CUDA {built}",
                 f"TensorFlow {release[0]}.{release[1]} is built against CUDA {built} and cuDNN {cudnn} and loads "
                 f"them by versioned name ({dll}); this machine has CUDA {cuda}, whose libraries carry another, so "
                 f"{what}", fix, [ctx.line_fact(lines[0])], lines[:1])


def first_tensorflow_built_with(cuda: tuple[int, int]) -> Optional[str]:
    """The oldest TensorFlow release whose GPU wheel was built with this CUDA or a newer one (None past the table)."""
    newer = [r for r, (c, _) in TF_BUILDS.items() if tuple(int(x) for x in c.split(".")) >= cuda]
    return f"{min(newer)[0]}.{min(newer)[1]}" if newer else None
