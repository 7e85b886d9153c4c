"""CUDA code the user built (or a package compiled at install) without the GPU's compute capability: the build system
of what failed says which knob gives it code for the GPU. A PyTorch extension (mmcv, detectron2, pytorch3d, apex and
the like, built through torch.utils.cpp_extension) reads TORCH_CUDA_ARCH_LIST; a CMake project CMAKE_CUDA_ARCHITECTURES;
candle's kernels (mistral.rs, candle's own examples, cargo builds) CUDA_COMPUTE_CAP; a Kokkos build one GPU arch by
name (KOKKOS_ARCH=Maxwell50 in its Makefile build, -DKokkos_ARCH_MAXWELL50=ON in CMake); a flag written into the build
(`-gencode arch=compute_61,code=sm_61`, a Makefile's ARCH line) names the archs itself. Every value is the paste's: each
GPU it names (a build made on one card and run on another needs both), and the toolkit that must know the newest one.

Sources: PyTorch's torch.utils.cpp_extension docs (TORCH_CUDA_ARCH_LIST, "7.0;8.0", +PTX); CMake's
CMAKE_CUDA_ARCHITECTURES docs; candle's bindgen_cuda build helper (CUDA_COMPUTE_CAP, else nvidia-smi's compute_cap) and
candle-kernels' `#if __CUDA_ARCH__ >= 800` bf16 guards (huggingface/candle#43, #1659); NVIDIA's CUDA release notes for
the first toolkit of each compute capability (cuda_builds._NVCC_FIRST); Kokkos' build documentation (Kokkos_ARCH_*
options, one NVIDIA arch per build) and its Cuda::initialize check (kokkos/kokkos issue 1944: a Volta70 build on a
Maxwell 5.0 GPU)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.fixes import dotted
from steadytune.doctor.rules.arch.cuda_builds import _NVCC_FIRST
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

# what was built, by the words of its build: a torch extension, a CMake project, a cargo build of candle's kernels
_TORCH_EXTENSION = re.compile(r"(?i)TORCH_CUDA_ARCH_LIST|\bFORCE_CUDA\b|torch\.utils\.cpp_extension|\bBuildExtension\b|"
                              r"\bCUDAExtension\b|setup\.py (?:install|develop|build_ext)|\bpip install (?:-e|--editable)\b|"
                              r"MMCV_WITH_OPS|\bmmcv(?:-full)?\b|\bdetectron2\b|\bpytorch3d\b|\bapex\b|\bspconv\b|"
                              r"\btorch[-_](?:scatter|sparse|cluster)\b|\bext_module\b|\b_ext\.\w+|\bgsplat\b|"
                              r"diff[-_]gaussian[-_]rasteri[sz]ation|\bsimple[-_]knn\b|\btinycudann\b|tiny-cuda-nn|"
                              r"\bnvdiffrast\b|\bmamba[-_]ssm\b|\bcausal[-_]conv1d\b|\bmish[-_]cuda\b|\bcumm\b|"
                              # the user's word that they built it against torch ("built with pytorch 1.7, cuda 10.2",
                              # "compiled against torch 2.1"): an extension of torch's build, whatever its name
                              # (not a wheel "built for torch 2.1": that one came prebuilt)
                              r"(?<!wheel )(?<!wheels )(?<!binary )\b(?:built|compiled|build|compile|installed from "
                              r"source)\b.{0,40}\b(?:with|against|for|on) (?:py)?torch\b")
_CMAKE = re.compile(r"(?i)\bCMakeLists\.txt\b|\bcmake\b|-DCMAKE_|CMAKE_CUDA_ARCHITECTURES")
_CARGO = re.compile(r"(?i)\bcargo (?:build|run|install)\b|\bcandle(?:-kernels|-core)?\b|\bbindgen_cuda\b|\bcudarc\b|"
                    r"CUDA_COMPUTE_CAP|\bmistral\.?rs\b|\bmistralrs\b")
# a Kokkos application: its namespace in an error, its build's arch knob, its name
_KOKKOS = re.compile(r"(?i)\bKokkos::|\bKOKKOS_ARCH\b|\bKokkos_ARCH_\w+|\bkokkos\b")
# Kokkos' name for each NVIDIA compute capability (the Makefile's KOKKOS_ARCH value; CMake's Kokkos_ARCH_<UPPER>)
_KOKKOS_ARCH = {"30": "Kepler30", "32": "Kepler32", "35": "Kepler35", "37": "Kepler37", "50": "Maxwell50",
                "52": "Maxwell52", "53": "Maxwell53", "60": "Pascal60", "61": "Pascal61", "70": "Volta70",
                "72": "Volta72", "75": "Turing75", "80": "Ampere80", "86": "Ampere86", "87": "Ampere87", "89": "Ada89",
                "90": "Hopper90", "100": "Blackwell100", "120": "Blackwell120"}
# Kokkos' start-up check: the kernels' compute capability against the device's
_KOKKOS_REFUSED = re.compile(r"(?i)Kokkos::Cuda::initialize ERROR:?.{0,40}\bcompiled for compute capability")
_KOKKOS_DEVICE = re.compile(r"(?i)\bdevice with compute capability\s*(\d{1,2})\.(\d)")
# a build's own arch flags: "-gencode=arch=compute_61,code=sm_61", "-arch=sm_61", "ARCH= -gencode arch=compute_52,..."
_GENCODE = re.compile(r"(?i)-gencode[= ]arch=compute_(\d{2,3})|-arch[= ]sm_(\d{2,3})")
# the user's word that they built it ("compile mmcv through the source code", "a clean compile", "cargo build")
_BUILT_HERE = re.compile(r"(?i)\b(?:compil\w*|build(?:ing)?|built|rebuil\w*|make -j\d*|cmake --build|cargo build)\b")
# an error raised in a project's own CUDA source ("src/dag_tracer.cu:135"), not an installed package's
_OWN_SOURCE = re.compile(r"(?<![\w-])(?!\S*site-packages)[\w./\\-]*\.cu[:(]\d+")
# nvidia-smi's compute_cap column (--query-gpu=compute_cap --format=csv): one value a line under its header
_COMPUTE_CAP_HEADER = re.compile(r"(?i)^\s*(?:name,\s*)?compute_cap\s*$")
_COMPUTE_CAP_ROW = re.compile(r"^\s*(?:[^,\n]+,\s*)?(\d{1,2})\.(\d)\s*$")
# the CUDA toolkit the user says they build with ("CUDA 9.0.176", "cuda toolkit 10.1"); not nvidia-smi's "CUDA Version:"
# (the driver's ceiling) and not a torch wheel's +cuXYZ (it brings its own)
_TOOLKIT = re.compile(r"(?i)\bCUDA(?:[ _-]?toolkit)?[ :=]*v?(\d{1,2})\.(\d)(?:\.\d+)?\b(?!\s*(?:\||and later|or later|\+))")
# the run failing for want of code: the runtime's words, and cuDNN's for a kernel it has none of for this GPU
_NO_CODE = re.compile(r"(?i)no kernel image is available|invalid device function|CUDNN_STATUS_EXECUTION_FAILED|"
                      r"CUDNN_STATUS_ARCH_MISMATCH|cudaErrorNoKernelImageForDevice|named symbol not found")
# a bf16 kernel that does not compile for this GPU (nvcc's errors on __nv_bfloat16 below compute capability 8.0)
_BF16_COMPILE = re.compile(r"(?i)\.cu\(\d+\): error\b|error: .{0,80}__nv_bfloat16|__nv_bfloat16.{0,80}\berror\b")


def capabilities(ctx: Context) -> list[str]:
    """Every NVIDIA compute capability the paste names, oldest first, without repeats: the GPUs by name and nvidia-smi's
    compute_cap column ("61", "86")."""
    found = {f.value[3:] for f in ctx.sheet.of("arch") if re.fullmatch(r"sm_\d{2,3}", f.value)}
    lines = ctx.sheet.lines
    for i, line in enumerate(lines):
        if _COMPUTE_CAP_HEADER.match(line):
            for row in lines[i + 1:i + 17]:
                m = _COMPUTE_CAP_ROW.match(row)
                if not m:
                    break
                found.add(m.group(1) + m.group(2))
    return sorted(found, key=int)


def build_system(text: str) -> Optional[str]:
    """What was built, by the words of its build: "cargo", "kokkos", "torch-extension", "cmake", "gencode" (flags written into
    the build) or None (nothing built here: a wheel or a release binary)."""
    if _CARGO.search(text):
        return "cargo"
    if _KOKKOS.search(text):
        return "kokkos"
    if _TORCH_EXTENSION.search(text):
        return "torch-extension"
    if _CMAKE.search(text):
        return "cmake"
    if _GENCODE.search(text):
        return "gencode"
    if _BUILT_HERE.search(text) and _OWN_SOURCE.search(text):
        return "source"   # the user's own compile of a project whose error names its .cu source: its build unknown
    return None


def rebuild_for(ctx: Context, arch: str) -> Optional[str]:
    """The fix for an sm_ arch a build of the user's own lacks, in the build's own knob and every capability the paste
    names (the failing GPU's included); None where nothing in the paste was built here (torch's wheel and a program's
    release take their own fixes)."""
    text = _text(ctx)
    system = build_system(text)
    if system is None:
        return None
    ccs = sorted(set(capabilities(ctx)) | {arch[3:]}, key=int)
    pinned = sorted({a or b for a, b in _GENCODE.findall(text)}, key=int)
    toolkit = _toolkit_note(ctx, ccs[-1])
    if pinned and arch[3:] not in pinned:
        # the build's own flags list other archs: they win over any list the build system would use
        flags = " ".join(f"-gencode=arch=compute_{cc},code=sm_{cc}" for cc in ccs)
        return (f"the build's flags ask only for {', '.join('compute_' + p for p in pinned)}: replace them with the "
                f"GPU's own ({flags}), or remove the variable or Makefile line that sets them so the default list "
                f"applies, then rebuild from a clean tree{toolkit}")
    if system == "kokkos":
        return _kokkos_rebuild(arch[3:], toolkit)
    if system == "torch-extension":
        listed = ";".join(dotted(int(cc)) for cc in ccs)
        return (f"rebuild it with code for every GPU it runs on: export TORCH_CUDA_ARCH_LIST=\"{listed}\" (FORCE_CUDA=1 "
                f"where the package asks for it), remove the old build (the build/ folder, or pip's cached wheel: pip "
                f"install --no-cache-dir --no-build-isolation --force-reinstall <package>) and build it again"
                f"{toolkit}")
    if system == "cmake":
        listed = ";".join(ccs)
        return (f"configure the build for this GPU: cmake -DCMAKE_CUDA_ARCHITECTURES=\"{listed}\" (or set("
                f"CMAKE_CUDA_ARCHITECTURES {' '.join(ccs)}) in CMakeLists.txt), delete the build folder and build again"
                f"{toolkit}")
    if system == "source":
        return (f"rebuild it for this GPU's compute capability {dotted(int(arch[3:]))}: in a CMake project "
                f"-DCMAKE_CUDA_ARCHITECTURES=\"{';'.join(ccs)}\" (or set(CMAKE_CUDA_ARCHITECTURES {' '.join(ccs)}) in "
                f"CMakeLists.txt), in a Makefile the nvcc flags -gencode arch=compute_{arch[3:]},code=sm_{arch[3:]}; "
                f"clean the old build first{toolkit}")
    if system == "cargo":
        return (f"build for the GPU it runs on: CUDA_COMPUTE_CAP={arch[3:]} cargo build --release --features cuda "
                f"(candle's kernels are built for one compute capability, nvidia-smi's when the variable is unset), "
                f"after cargo clean{toolkit}")
    return None


def _kokkos_rebuild(cc: str, toolkit: str = "") -> str:
    """Kokkos' knob for one compute capability: it builds for one NVIDIA arch, named, not a list."""
    name = _KOKKOS_ARCH.get(cc)
    if name is None:
        return (f"rebuild Kokkos and the application for compute capability {dotted(int(cc))}: set KOKKOS_ARCH (Makefile "
                f"builds) or the matching -DKokkos_ARCH_<name>=ON (CMake) to this GPU's arch, from a clean build{toolkit}")
    return (f"rebuild for this GPU's arch: in the Makefile build set KOKKOS_ARCH = {name} (replacing the arch it "
            f"names now), in a CMake build -DKokkos_ARCH_{name.upper()}=ON with -DKokkos_ENABLE_CUDA=ON (Kokkos takes "
            f"one NVIDIA arch per build; drop the other Kokkos_ARCH_ GPU option); clean the build (make clean, or a "
            f"new build folder) and rebuild Kokkos with the application{toolkit}")


def _toolkit_note(ctx: Context, cc: str) -> str:
    """The toolkit the build needs for the newest GPU, where the paste's toolkit is older than that."""
    first = _NVCC_FIRST.get(cc)
    said = _toolkit(ctx)
    if not first or said is None:
        return ""
    needed = tuple(int(x) for x in re.search(r"(\d+)\.(\d)", first).groups())
    return f"; with {first} or newer: CUDA {said[0]}.{said[1]} cannot compile sm_{cc}" if said < needed else ""


def _toolkit(ctx: Context) -> Optional[tuple[int, int]]:
    if re.search(r"\+cu\d{2,3}\b", _text(ctx)):
        return None   # a CUDA torch wheel in play: its toolkit is its own
    if ctx.sheet.values("torch") and not _BUILT.search(_text(ctx)):
        # a torch release named with nothing built here (round 19, r19d: Forge's "torch 2.3.1" on an RTX 5090 beside
        # "CUDA 12.1"): the CUDA is the torch wheel's, and the fix is another wheel, not a rebuild
        return None
    for line in ctx.sheet.lines:
        if re.search(r"(?i)CUDA Version:|CUDA used to build", line):
            continue
        m = _TOOLKIT.search(line)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


# a build of the user's own in the paste: a compiler, a build system, an extension's setup
_BUILT = re.compile(r"(?i)\bnvcc\b|\bcmake\b|\bmake\b|-gencode|setup\.py|\bbuilding\b|\bcompiling\b|"
                    r"\bcompile (?:it|the|my|from)\b")


@rule("arch-missing")
def toolkit_older_than_gpu(ctx: Context) -> Optional[Diagnosis]:
    """A program the user built with a CUDA toolkit older than the GPU (the toolkit stated, the GPU named: RTX 2070,
    sm_75, needs CUDA 10.0), failing for want of code: the toolkit cannot have compiled any for it."""
    failing = _lines_matching(ctx, _NO_CODE)
    said = _toolkit(ctx)
    ccs = capabilities(ctx)
    if not failing or said is None or not ccs:
        return None
    late = [cc for cc in ccs if _NVCC_FIRST.get(cc) and
            said < tuple(int(x) for x in re.search(r"(\d+)\.(\d)", _NVCC_FIRST[cc]).groups())]
    if not late:
        return None
    cc = late[-1]
    first = _NVCC_FIRST[cc]
    return _make("arch-missing", f"CUDA {said[0]}.{said[1]} predates sm_{cc}",
                 f"the program was built with CUDA {said[0]}.{said[1]}, which has no code generation (nor cuDNN "
                 f"kernels) for compute capability {dotted(int(cc))}; the GPU's kernels cannot be in it",
                 f"install {first} or newer (with the cuDNN made for it) and rebuild the program with it "
                 f"(for sm_{cc}: -gencode arch=compute_{cc},code=sm_{cc}, or the project's arch setting)",
                 [ctx.line_fact(failing[0])], failing)


@rule("arch-missing")
def candle_bf16_below_ampere(ctx: Context) -> Optional[Diagnosis]:
    """A cargo build of candle's kernels (mistral.rs, candle) failing in nvcc on __nv_bfloat16 with a GPU below compute
    capability 8.0 among those nvidia-smi lists: the kernels are compiled for that GPU, where bf16 does not build."""
    text = _text(ctx)
    if not _CARGO.search(text) or not re.search(r"(?i)bfloat16|\bbf16\b", text):
        return None
    failing = _lines_matching(ctx, _BF16_COMPILE)
    ccs = capabilities(ctx)
    if not failing or not ccs or int(ccs[0]) >= 80:
        return None
    newer = [cc for cc in ccs if int(cc) >= 80]
    target = (f"CUDA_COMPUTE_CAP={newer[-1]} cargo build --release --features cuda (only the compute capability "
              f"{dotted(int(newer[-1]))} GPU; run the program on it, CUDA_VISIBLE_DEVICES set to that GPU)") if newer else \
        ("build on an Ampere (compute capability 8.0) or newer GPU, or without the bf16 kernels: an older candle / "
         "mistral.rs release whose kernels guard bf16, and the model in f16 (--dtype f16)")
    return _make("arch-missing", f"candle's bf16 kernels do not compile for compute capability {dotted(int(ccs[0]))}",
                 f"the CUDA kernels are compiled for the compute capability nvidia-smi reports (here "
                 f"{', '.join(dotted(int(c)) for c in ccs)}), and their bf16 code needs 8.0 or newer",
                 target, [ctx.line_fact(failing[0])], failing)


@rule("arch-missing")
def kokkos_built_for_another_arch(ctx: Context) -> Optional[Diagnosis]:
    """Kokkos' own start-up refusal: kernels compiled for one compute capability (0.0 where none was built for a CUDA
    arch) on a device of another: the build's KOKKOS_ARCH names another GPU."""
    refused = _lines_matching(ctx, _KOKKOS_REFUSED)
    device = _KOKKOS_DEVICE.search(_text(ctx))
    if not refused or device is None:
        return None
    cc = device.group(1) + device.group(2)
    built = re.search(r"(?i)compiled for compute capability\s*(\d{1,2})\.(\d)", refused[0].line)
    what = (f"for compute capability {built.group(1)}.{built.group(2)}" if built and built.group(1) != "0" else
            "for no CUDA arch this GPU runs (0.0: none matching)")
    return _make("arch-missing", f"the Kokkos build has no kernels for compute capability {dotted(int(cc))}",
                 f"the application's kernels were compiled {what}, and the GPU is compute capability "
                 f"{dotted(int(cc))}: the build's KOKKOS_ARCH (Kokkos_ARCH_* in CMake) names another GPU, so Kokkos "
                 "refuses to launch them", _kokkos_rebuild(cc), [ctx.line_fact(refused[0])], refused)
