"""The GPU runtime libraries a program loads by itself rather than through torch: a release archive that leaves them
out (llama.cpp's Windows CUDA zips, Ollama's Linux ROCm payload), a program that needs the CUDA Toolkit installed, and
the wrong copy found first on PATH (the ancient CUDA runtime PhysX installs). vLLM's NCCL, which it loads by path from
its own variable, is install/nccl_library's."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text, _vendor

# llama.cpp's Windows CUDA release asset (llama-b3376-bin-win-cuda-cu12.2.0-x64.zip) and the CUDA DLLs it needs
_LLAMA_WIN_CUDA = re.compile(r"(?i)llama-b\d+-bin-win-cuda-?(cu\d+\.\d+(?:\.\d+)?)-x64")
_CUDA_DLL = re.compile(r"(?i)\b(?:cudart|cublas(?:Lt)?)64_\d+\.dll\b")
_MISSING = re.compile(r"(?i)missing|not found|was not found|could not be found|cannot find|can't find|无法找到|找不到")


@rule("rocm-libs-missing")
def llama_cpp_zip_without_cudart(ctx: Context) -> Optional[Diagnosis]:
    """llama.cpp's Windows CUDA build comes as two archives in each release: the program (llama-...-bin-win-cuda-
    cuX-x64.zip) and the CUDA runtime DLLs it loads (cudart-llama-bin-win-cuX-x64.zip); without the second and
    without a CUDA Toolkit on PATH, cudart64 / cublas64 are missing."""
    text = _text(ctx)
    asset = _LLAMA_WIN_CUDA.search(text)
    dll = _CUDA_DLL.search(text)
    if not (asset or (dll and re.search(r"(?i)llama[-.]?cpp|llama-(?:cli|server)|\bggml", text))) or \
            not _MISSING.search(text):
        return None
    label = asset.group(1) if asset else "<the cuXX of the llama.cpp zip>"
    lines = _lines_matching(ctx, _MISSING.pattern)
    return _make("rocm-libs-missing", "llama.cpp's CUDA runtime DLLs are not beside it",
                 "llama.cpp's Windows CUDA build loads the CUDA runtime DLLs (cudart64, cublas64, cublasLt64) from its "
                 "own folder or PATH; its release zip does not contain them: they come as a second archive",
                 f"download cudart-llama-bin-win-{label}-x64.zip from the same llama.cpp release and extract its DLLs "
                 "into the folder with llama-cli.exe / llama-server.exe (or install the CUDA Toolkit of that version, "
                 "whose bin folder is on PATH)", [ctx.line_fact(lines[0])], lines[:1])


# llama.cpp's Windows HIP / ROCm release asset (llama-b6500-bin-win-hip-radeon-x64.zip, ...-win-rocm-7.14-x64.zip)
_LLAMA_WIN_HIP = re.compile(r"(?i)llama-b\d+-bin-win-(?:hip|rocm)[-\w.]*?-x64")
# the ROCm runtime DLLs the ggml HIP backend loads (the HIP SDK's, or TheRock's for ROCm 7 builds)
_HIP_DLL = re.compile(r"(?i)\b(?:hipblas(?:lt)?|rocblas|amdhip64(?:_\d+)?|rocsolver|hiprtc\w*)\.dll\b")


@rule("rocm-libs-missing")
def llama_cpp_zip_without_rocm_runtime(ctx: Context) -> Optional[Diagnosis]:
    """llama.cpp's Windows HIP build (ggml-hip.dll) loads the ROCm runtime DLLs, hipblas.dll and rocblas.dll with
    rocblas's kernel folder (library\\), hipblaslt.dll with its own, from its folder or PATH; the driver brings only
    amdhip64. A release zip that does not carry them, without a HIP SDK of that ROCm on PATH, loads no HIP backend:
    no device listed, no error (llama.cpp's Windows HIP assets; the AMD HIP SDK's bin folder holds the same files)."""
    text = _text(ctx)
    asset = _LLAMA_WIN_HIP.search(text)
    dll = _HIP_DLL.search(text)
    llama = re.search(r"(?i)llama[-.]?cpp|llama-(?:cli|server)|\bggml|koboldcpp|stable-diffusion\.cpp|whisper\.cpp", text)
    if not (asset or (llama and dll and on_windows(ctx, text))) or not dll or not (
            _MISSING.search(text) or re.search(r"(?i)--list-devices|no devices?|\(none\)|not detected", text)):
        return None
    lines = _lines_matching(ctx, _HIP_DLL) or _lines_matching(ctx, _MISSING.pattern)
    rocm = re.search(r"(?i)rocm[- ](\d+\.\d+(?:\.\d+)?)", asset.group(0) if asset else text)
    which = f"ROCm {rocm.group(1)}" if rocm else "the ROCm / HIP SDK release the build names"
    return _make("rocm-libs-missing", "llama.cpp's HIP backend does not find the ROCm runtime DLLs",
                 "the Windows HIP build loads ROCm's runtime DLLs (hipblas.dll, rocblas.dll with its library folder, "
                 "hipblaslt.dll) from its own folder or PATH; this release's zip does not carry them and no HIP SDK "
                 f"of {which} is on PATH, so the HIP backend does not load and no device is listed",
                 f"copy the runtime of {which} next to llama-server.exe: every DLL of its bin folder (hipblas.dll, "
                 "rocblas.dll, hipblaslt.dll, amdhip64 and their dependencies) plus the rocblas\\library and "
                 "hipblaslt\\library folders (hipblas.dll alone is not enough); or install that HIP SDK and put its bin "
                 "folder on PATH; or go back to the previous release, whose zip carried them",
                 [ctx.line_fact(lines[0])], lines[:1])


# a program's own words that the CUDA Toolkit (its runtime libraries) is missing: Jan's "missing CUDA toolkit",
# "CUDA toolkit not installed / not found"
_TOOLKIT_MISSING = re.compile(r"(?i)\bmissing (?:the )?CUDA toolkit\b|\bCUDA toolkit\b[^\n]{0,20}?\b(?:is )?(?:missing|"
                              r"not (?:installed|found|detected))\b|\"cuda\"\s*:\s*\{\s*\"exist\"\s*:\s*false")


@rule("rocm-libs-missing")
def cuda_toolkit_missing_said(ctx: Context) -> Optional[Diagnosis]:
    """A program that runs its GPU engine on the CUDA runtime of an installed CUDA Toolkit (Jan's llama.cpp engine,
    not a torch wheel that brings its own) says the toolkit is missing: the engine cannot start on the GPU."""
    lines = _lines_matching(ctx, _TOOLKIT_MISSING.pattern)
    if not lines or any(e.family not in (None, "rocm-libs-missing") for e in ctx.errors):
        return None
    version = re.search(r"(?i)\"version\"\s*:\s*\"(\d+)|\bCUDA (?:toolkit )?(\d{2})\b", _text(ctx))
    major = (version.group(1) or version.group(2)) if version else "12"
    return _make("rocm-libs-missing", "the program's GPU engine finds no CUDA Toolkit",
                 "the program's GPU engine (a llama.cpp build for CUDA) loads the CUDA runtime libraries of an "
                 "installed CUDA Toolkit; without it the engine does not start and models fail to load on the GPU",
                 f"install NVIDIA's CUDA Toolkit (CUDA {major}, the release the engine is built for; on Windows its "
                 "installer puts the runtime DLLs on PATH), restart the program; or update the program to a release "
                 "that bundles the CUDA runtime, or turn GPU acceleration off to run on the CPU",
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# Ollama's Linux release is two archives for AMD: ollama-linux-amd64.tgz and the ROCm libraries in
# ollama-linux-amd64-rocm.tgz (ollama docs/linux.md, "Manual install": extract both into /usr)
_OLLAMA_ROCM_ASSET = re.compile(r"(?i)ollama-linux-amd64(?:-rocm)?\.tgz|\bmanual(?:ly)? install\w*")


@rule("rocm-libs-missing")
def ollama_manual_install_without_rocm(ctx: Context) -> Optional[Diagnosis]:
    """Ollama installed by hand on Linux with an AMD GPU: the main archive has no ROCm libraries; the installer script
    fetches the ROCm archive for an AMD machine, a manual install must extract it too."""
    text = _text(ctx)
    if ctx.tool() != "ollama" or on_windows(ctx, text) or not _OLLAMA_ROCM_ASSET.search(text):
        return None
    if not (_vendor(ctx) == "amd" or re.search(r"(?i)\brocm\b|\bradeon\b|\bamd\b", text)):
        return None
    if any(e.family not in (None, "rocm-libs-missing", "visibility") for e in ctx.errors):
        return None
    lines = _lines_matching(ctx, _OLLAMA_ROCM_ASSET.pattern)
    return _make("rocm-libs-missing", "Ollama's ROCm libraries were not installed",
                 "Ollama's Linux archive holds the program without the ROCm libraries its AMD backend loads; they come "
                 "in ollama-linux-amd64-rocm.tgz, which the install script fetches on an AMD machine and a manual "
                 "install leaves out",
                 "install with the script, which fetches them: curl -fsSL https://ollama.com/install.sh | sh; or, for "
                 "a manual install, extract the ROCm archive where the program went: curl -L "
                 "https://ollama.com/download/ollama-linux-amd64-rocm.tgz -o ollama-linux-amd64-rocm.tgz; sudo tar -C "
                 "/usr -xzf ollama-linux-amd64-rocm.tgz; then restart ollama", [ctx.line_fact(lines[0])], lines[:1],
                 confirmed=False)


# a compute capability below 2.0 reported for a GPU: no CUDA runtime of the last decade runs on such a GPU, so the
# number comes from an ancient CUDA runtime DLL the program loaded, the cudart PhysX installs in
# "C:\Program Files (x86)\NVIDIA Corporation\PhysX\Common" (on PATH) among them (ollama issue 4008, fixed in 0.1.33)
_IMPOSSIBLE_CC = re.compile(r"(?i)compute capability (?:detected:?\s*)?(1\.\d)\b|\bdetects? 1\.\d instead of \d\.\d")


# the cards of compute capability 1.x by model (NVIDIA's CUDA GPUs table: GeForce 8 / 9 / GTX 200 series, Tesla C870 /
# C1060)
_TESLA_ERA = re.compile(r"(?i)\bGeForce\s*(?:[89]\d{3}|GTX\s*2[6-9]\d)\b|\bTesla\s*C(?:870|1060)\b")


@rule("rocm-libs-missing")
def ancient_cudart_first_on_path(ctx: Context) -> Optional[Diagnosis]:
    """A program reports compute capability 1.x for an NVIDIA GPU (or blames PhysX's cudart): it loaded an ancient
    CUDA runtime found first on PATH, PhysX's, instead of its own."""
    text = _text(ctx)
    lines = _lines_matching(ctx, _IMPOSSIBLE_CC.pattern)
    physx = re.search(r"(?i)\bPhysX\b", text)
    if not lines and not (physx and re.search(r"(?i)cudart|compute capability", text)):
        return None
    if any(re.fullmatch(r"sm_1\d", g.detail or "") for g in ctx.sheet.of("gpu")) or _TESLA_ERA.search(text):
        return None   # a card named by its model that really is compute capability 1.x (a GeForce 8800)
    lines = lines or _lines_matching(ctx, r"(?i)\bPhysX\b")
    tool = ctx.tool() or "the program"
    if physx or on_windows(ctx, text):
        return _make("rocm-libs-missing", f"{tool} loads an ancient CUDA runtime from PATH",
                     f"{tool} reports a compute capability no current GPU has: it loaded a CUDA runtime (cudart) "
                     "found first on PATH, an old one such as the copy NVIDIA PhysX installs in C:\\Program Files "
                     "(x86)\\NVIDIA Corporation\\PhysX\\Common, instead of the one it ships",
                     "take the PhysX\\Common folder (or the folder of the other old cudart64_*.dll: where cudart64*.dll "
                     f"lists them) off PATH, or put the folder of {tool}'s own CUDA runtime before it, then restart "
                     f"{tool}; or update {tool} to a release that loads its bundled runtime first",
                     [ctx.line_fact(lines[0])], lines[:1])
    # on Linux the old libcudart comes from the loader's path
    return _make("rocm-libs-missing", f"{tool} loads an old CUDA runtime library",
                 f"{tool} reports a compute capability no current GPU has: it loaded an old libcudart found first on "
                 "the loader's path instead of the one it ships",
                 f"find the libcudart {tool} loaded (OLLAMA_DEBUG=1 logs its path; ldd or LD_DEBUG=libs otherwise) and "
                 "take the old one off LD_LIBRARY_PATH, so the runtime matching the driver (nvidia-smi's CUDA version) "
                 f"is loaded; then restart {tool}", [ctx.line_fact(lines[0])], lines[:1])


# a program's DLL found in the Windows system folder, not its own: the loader's path for a library names
# System32 / SysWOW64 (its entry-point dialog, a load failure), for a library Windows itself does not ship as a
# system component. Windows 11 does ship an onnxruntime.dll there (Windows ML's, an older release): a program that
# asks the onnxruntime C API for a newer version than it has hears "The requested API version [N] is not available,
# only API versions [1, M] are supported"
_SYSTEM_DLL = re.compile(r"(?i)\b[A-Z]:\\+Windows\\+(?:System32|SysWOW64)\\+([\w.+-]+\.dll)\b")
_ORT_API = re.compile(r"(?i)requested API version \[(\d+)\] is not available, only API versions \[1, (\d+)\] are "
                      r"supported")
# the runtime redistributables Windows keeps in System32 on purpose: an old copy there is updated, not removed
_REDIST = re.compile(r"(?i)^(?:msvcp\d+\w*|vcruntime\d+\w*|concrt\d+|vcomp\d+|ucrtbase|vulkan-1)\.dll$")
# Windows' own libraries: not a program's copy at all
_WINDOWS_OWN = re.compile(r"(?i)^(?:kernel32|kernelbase|ntdll|user32|gdi32|advapi32|ole32|oleaut32|combase|shell32|"
                          r"ws2_32|api-ms-\S+|d3d\d+\w*|dxgi|dxcore|opengl32|nvcuda|nvml|amdhip64\w*|directml|"
                          r"winmm|version|bcrypt|crypt32|setupapi|cfgmgr32)\.dll$")


@rule("rocm-libs-missing")
def program_dll_from_system32(ctx: Context) -> Optional[Diagnosis]:
    """A program's library loaded from C:\\Windows\\System32 instead of its own copy: a stray or older DLL there (one
    an installer or a user copied in, or Windows' own older onnxruntime.dll) is found before the program's, and lacks
    what the program calls."""
    text = _text(ctx)
    api = _ORT_API.search(text)
    found = next((m for m in _SYSTEM_DLL.finditer(text) if not _WINDOWS_OWN.match(m.group(1))), None)
    if not (api or (found and re.search(r"(?i)entry point|could not be located|DLL load failed|not found|"
                                        r"WinError 127|0xc0000139|ordinal", text))):
        return None
    dll = found.group(1) if found else "onnxruntime.dll"
    lines = _lines_matching(ctx, re.escape(found.group(0)) if found else _ORT_API)
    tool = ctx.tool() or "the program"
    if tool.lower().replace("-", "_") in dll.lower().replace("-", "_"):
        tool = "the program"   # the library's own name is not the program that loads it
    if _REDIST.match(dll):
        return _make("rocm-libs-missing", f"an older {dll} in System32",
                     f"{tool} needs a newer {dll} than the one in C:\\Windows\\System32, which a runtime's older "
                     "installer left there", "install the latest Microsoft Visual C++ Redistributable (x64)" +
                     (" and the GPU's current driver (it brings vulkan-1.dll)" if dll.lower() == "vulkan-1.dll" else
                      "") + f", which replaces System32's copy; then restart {tool}", [ctx.line_fact(lines[0])],
                     lines[:1])
    ort = ("; Windows 11 ships its own, older onnxruntime.dll there (Windows ML's): the program must load the "
           "onnxruntime.dll of the release it was built with" if dll.lower() == "onnxruntime.dll" else "")
    old = f" (the one found speaks API up to {api.group(2)}, the program asks for {api.group(1)})" if api else ""
    return _make("rocm-libs-missing", f"{dll} is loaded from System32, not {tool}'s own",
                 f"Windows finds a {dll} in C:\\Windows\\System32 before {tool}'s own copy{old}, and that copy lacks "
                 f"what {tool} calls{ort}",
                 f"where {dll} lists every copy on the search path: keep {tool}'s own copy first: put its {dll} next "
                 f"to {tool}'s .exe (the application's folder is searched before System32), and rename a stray copy "
                 "a program or a guide put into System32 (not Windows' own: never delete Windows ML's onnxruntime.dll); "
                 "and keep C:\\Windows\\System32 itself on PATH, where the GPU driver's DLLs are",
                 [ctx.line_fact(lines[0])], lines[:1])


# COLMAP's CUDA build counting no CUDA device at its SIFT or PatchMatch start (glog's "Check failed: num_cuda_devices
# > 0 (0 vs. 0)"); a source build of COLMAP links the CUDA runtime of the toolkit it was configured with
_COLMAP_NO_DEVICE = re.compile(r"(?i)Check failed: num_cuda_devices > 0|\bcolmap\b.{0,80}\bno CUDA[- ](?:capable )?device")
_TOOLKIT_SAID = re.compile(r"(?i)\bCUDA(?:[ _-]?toolkit)?[ _-]?v?(\d{1,2}\.\d)(?:\.\d+)?\b(?!\s*\|)")


@rule("rocm-libs-missing")
def colmap_counts_no_cuda_device(ctx: Context) -> Optional[Diagnosis]:
    """COLMAP's CUDA build finds zero CUDA devices outside a container: the CUDA runtime it was built with is not
    what the loader finds (the toolkit's lib64 off LD_LIBRARY_PATH, its bin off PATH), so it cannot count the GPU.
    In a container the GPU not passed in is the container reading's."""
    lines = _lines_matching(ctx, _COLMAP_NO_DEVICE)
    text = _text(ctx)
    if not lines or re.search(r"(?i)\bdocker\b|\bpodman\b|\bsingularity\b|\bapptainer\b|\bWSL\b", text):
        return None
    said = [m.group(1) for m in _TOOLKIT_SAID.finditer(text)]
    folder = f"/usr/local/cuda-{said[0]}" if said else "/usr/local/cuda"
    return _make("rocm-libs-missing", "COLMAP's CUDA build finds no CUDA device",
                 "COLMAP was built against a CUDA toolkit and counts the GPUs through that toolkit's CUDA runtime; "
                 "counting none (0 vs. 0) on a machine with an NVIDIA GPU means the runtime and driver it loads do not "
                 "answer: the toolkit's libraries are not on the loader's path, or another CUDA's are found first",
                 f"put the toolkit COLMAP was built with on the paths before running it: export PATH={folder}/bin:$PATH "
                 f"and export LD_LIBRARY_PATH={folder}/lib64:$LD_LIBRARY_PATH (in ~/.bashrc to keep them); check that "
                 "nvidia-smi lists the GPU and that ldd $(which colmap) | grep cuda finds the libraries; meanwhile "
                 "--SiftExtraction.use_gpu 0 runs feature extraction on the CPU", [ctx.line_fact(lines[0])], lines)
