"""A CUDA library or the NVIDIA driver older than the one a binary was built against: a CUDA library's own symbol that
the copy loaded lacks (another, older copy of that library comes first), a driver API call the installed driver does
not have, and JAX finding no usable pip CUDA library because LD_LIBRARY_PATH points at an older toolkit."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, rule, _text
from steadytune.doctor.rules.install.shared import _cuda_label, cuda_of_label


# The CUDA libraries whose API names carry their library's prefix, and the pip package (nvidia-*-cu12, the copies the
# CUDA torch / jax wheels load) and library file of each. Sources: the libraries' API references (ncclCommInitRank,
# cublasLtMatmul, cudnnCreate, cusparseCreate, cufftPlan1d, cusolverDnCreate, curandCreateGenerator, nvrtcCompileProgram,
# nvJitLinkCreate) and the nvidia-* packages on PyPI.
_LIBRARY_SYMBOLS = (
    (re.compile(r"nccl[A-Z]"), "libnccl", "nccl"),
    (re.compile(r"_*nvJitLink"), "libnvJitLink", "nvjitlink"),
    (re.compile(r"cublas(?:Lt)?[A-Z_]"), "libcublas", "cublas"),
    (re.compile(r"cudnn[A-Z]"), "libcudnn", "cudnn"),
    (re.compile(r"cusparse[A-Z]"), "libcusparse", "cusparse"),
    (re.compile(r"cufft[A-Z]"), "libcufft", "cufft"),
    (re.compile(r"cusolver\w*?[A-Z]"), "libcusolver", "cusolver"),
    (re.compile(r"curand[A-Z]"), "libcurand", "curand"),
    (re.compile(r"nvrtc[A-Z]"), "libnvrtc", "cuda-nvrtc"),
)
_UNDEFINED = re.compile(r"undefined symbol:?\s{0,4}(\w{1,200})")
# a driver API entry point (cuInit, cuGreenCtxCreate): "cu" and a capital; the runtime's are cuda*, the libraries' cublas*
# (cuFile* is GPUDirect Storage's libcufile, not the driver)
_DRIVER_API = re.compile(r"cu(?!File)[A-Z]\w*")

# The CUDA release that brought a driver API family (CUDA Toolkit release notes / driver API reference: tensor maps
# with 12.0, multicast objects with 12.1, green contexts with 12.4)
_DRIVER_API_SINCE = ((re.compile(r"cuTensorMap"), "12.0"), (re.compile(r"cuMulticast"), "12.1"),
                     (re.compile(r"cuGreenCtx|cuDevResource|cuCtxFromGreenCtx"), "12.4"))
# Driver API functions every driver a current CUDA build runs on has (the CUDA Driver API reference: the module, launch,
# context, memory, stream and event calls of CUDA 4.0 and before, with their _v2 forms): when one is undefined the
# driver is not too old; the binary calling it was built without libcuda linked, or for another setup
_LONG_STANDING = re.compile(r"cu(?:Init|DriverGetVersion|Device(?:Get|GetAttribute|GetCount|GetName|PrimaryCtx\w+)|"
                            r"Ctx(?:Create|Destroy|GetCurrent|SetCurrent|PushCurrent|PopCurrent|Synchronize|GetDevice)|"
                            r"Module(?:GetFunction|Load\w*|Unload|GetGlobal)|LaunchKernel|Func(?:GetAttribute|"
                            r"SetAttribute|SetCacheConfig)|Mem(?:Alloc|Free|cpy|set|GetInfo)\w*|Stream\w+|Event\w+|"
                            r"GetErrorString|GetErrorName|PointerGetAttribute|Occupancy\w+)(?:_v\d)?")


# The oldest Linux driver of each CUDA toolkit release (CUDA Toolkit release notes, table "CUDA Toolkit and
# Corresponding Driver Versions")
_LINUX_DRIVER_FOR = {"11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03",
                     "12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03",
                     "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06"}


def _undefined_symbols(ctx: Context) -> list[tuple[ErrorLine, str]]:
    if "undefined symbol" not in _text(ctx).lower():
        return []
    return [(line, m.group(1)) for line in _lines_matching(ctx, r"undefined symbol")
            for m in [_UNDEFINED.search(line.line)] if m]


def _built_cuda(ctx: Context) -> Optional[str]:
    """The CUDA the failing build was made for: the torch's +cuXYZ (or a cuXYZ index) the paste names."""
    label = _cuda_label(ctx)
    return cuda_of_label(label) if label else None


@rule("driver")
def driver_older_than_a_driver_api_call(ctx: Context) -> Optional[Diagnosis]:
    """An undefined cu* symbol is a CUDA driver API function: it lives in libcuda, which the NVIDIA driver installs, so
    the binary was built for a newer CUDA than the driver provides. Reinstalling the package cannot help; the driver
    must move."""
    found = next(((line, symbol) for line, symbol in _undefined_symbols(ctx) if _DRIVER_API.fullmatch(symbol)
                  and not _LONG_STANDING.fullmatch(symbol)), None)
    if found is None:
        return None
    line, symbol = found
    since = next((version for pattern, version in _DRIVER_API_SINCE if pattern.match(symbol)), None)
    need = since or _built_cuda(ctx)
    driver = next((f.value for f in ctx.sheet.of("driver") if f.detail == "nvidia"), None) or (
        lambda m: m.group(1) if m else None)(re.search(r"(?i)driver version:?\s*(\d{3}\.\d+(?:\.\d+)?)", _text(ctx)))
    tool = ctx.tool([line]) or "the package"
    minimum = _LINUX_DRIVER_FOR.get(need or "")
    return _make("driver", f"the NVIDIA driver lacks {symbol}",
                 f"{symbol} is a CUDA driver API function (libcuda, installed by the NVIDIA driver)"
                 f"{', new in CUDA ' + since if since else ''}; {tool}'s binary calls it, and the driver here"
                 f"{' (' + driver + ')' if driver else ''} is older than that",
                 f"upgrade the NVIDIA driver to one for CUDA {need or 'the release ' + tool + ' was built for'} or newer"
                 f"{' (Linux driver ' + minimum + ' or newer' + (', e.g. the 550 series or later' if need == '12.4' else '') + ')' if minimum else ''}"
                 f"; nvidia-smi's \"CUDA Version\" must show it; or use a {tool} release built for the CUDA this driver "
                 "runs", [ctx.line_fact(line)], [line])


@rule("abi-mismatch")
def launcher_without_libcuda(ctx: Context) -> Optional[Diagnosis]:
    """An undefined driver API call that every driver has (cuModuleGetFunction, cuLaunchKernel): the binary was not
    linked against libcuda. The binaries most often in that state are the launchers Triton and torch.compile
    (Inductor) compile at run time and keep in their caches, loaded again after torch, CUDA or the driver changed;
    the remedy is to let them be compiled afresh."""
    found = next(((line, symbol) for line, symbol in _undefined_symbols(ctx) if _LONG_STANDING.fullmatch(symbol)),
                 None)
    if found is None:
        return None
    line, symbol = found
    return _make("abi-mismatch", f"a compiled launcher calls {symbol} without libcuda",
                 f"{symbol} is a CUDA driver API function that every NVIDIA driver has, so the driver is not too old: "
                 "the shared object calling it was built without libcuda linked or for another setup, most often a "
                 "kernel launcher that Triton or torch.compile (Inductor) compiled into its cache earlier and loads "
                 "again after torch, CUDA or the driver changed",
                 "clear the compile caches so they are rebuilt: rm -rf ~/.triton/cache /tmp/torchinductor_$USER (or "
                 "the folders TRITON_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR point at), then rerun; if the path on the "
                 "error line is a pip package's .so instead, reinstall that package built for the installed torch "
                 "and CUDA (pip install --force-reinstall --no-cache-dir <package>)", [ctx.line_fact(line)], [line])


@rule("abi-mismatch")
def cuda_library_older_than_built_against(ctx: Context) -> Optional[Diagnosis]:
    """An undefined symbol that is a CUDA library's own API (ncclCommRegister, __nvJitLinkAddData_12_1): the binary
    was linked against a newer release of that library than the copy the loader found first (a system package, a
    toolkit folder on LD_LIBRARY_PATH, or another pip package's copy)."""
    for line, symbol in _undefined_symbols(ctx):
        row = next((r for r in _LIBRARY_SYMBOLS if r[0].match(symbol)), None)
        if row is None:
            continue
        _, library, pip_part = row
        cuda_major = (_built_cuda(ctx) or "12").split(".")[0]
        who = ("torch" if re.search(r"(?i)\btorch\b|libtorch|libc10", line.line + "\n" + _text(ctx)) else
               ctx.tool([line]) or "the package")
        return _make("abi-mismatch", f"an older {library} than {who} was built against is loaded first",
                     f"{symbol} is {library}'s own function; {who} was linked against a {library} release that has it, "
                     f"and the copy the loader finds first is older (a system {library} package, a CUDA toolkit folder "
                     "on LD_LIBRARY_PATH, or another package's copy)",
                     f"find the older copy (ldconfig -p | grep {library}; echo $LD_LIBRARY_PATH; pip list | grep "
                     f"-i {pip_part}) and remove it, or take its folder off LD_LIBRARY_PATH (unset LD_LIBRARY_PATH), so "
                     f"the nvidia-{pip_part}-cu{cuda_major} that {who} installs is used: pip install --force-reinstall "
                     f"nvidia-{pip_part}-cu{cuda_major} at the release {who} requires (pip show {who} / pip check name "
                     f"it); or go back to the {who} release built for the {library} you have", [ctx.line_fact(line)],
                     [line])
    return None


_JAX_LOAD = re.compile(r"Unable to load (cu[A-Za-z]{2,12}|CUDA|NCCL|nvJitLink)\. Is it installed\?")


@rule("abi-mismatch")
def jax_pip_cuda_shadowed(ctx: Context) -> Optional[Diagnosis]:
    """jaxlib's CUDA plugin loads the CUDA libraries of pip's nvidia-*-cu12 packages; a toolkit folder on
    LD_LIBRARY_PATH is searched first, and its older libraries fail to load against the pip ones (JAX's installation
    guide: LD_LIBRARY_PATH can override the pip-installed NVIDIA CUDA libraries, so keep it unset)."""
    if "unable to load" not in _text(ctx).lower():
        return None
    lines = _lines_matching(ctx, _JAX_LOAD.pattern)
    if not lines or not re.search(r"(?i)\bjax", _text(ctx)):
        return None
    library = _JAX_LOAD.search(lines[0].line).group(1)
    path = re.search(r"(?m)LD_LIBRARY_PATH=(\S{1,120})", _text(ctx))
    if not path and not re.search(r"(?i)jax\[cuda\d*\w*\]|LD_LIBRARY_PATH|/usr/local/cuda|cuda-1\d\.\d/lib", _text(ctx)):
        # no fresh install of the set shown, no toolkit folder on the loader's path: the pip set itself is the
        # suspect (a jax, jaxlib and plugin installed apart, a nvidia-* package missing), and reinstalling it as one
        # set comes first (google-deepmind/mujoco_playground#137); LD_LIBRARY_PATH is the next thing to check
        return _ahead_of(_make("rocm-libs-missing", f"jax's CUDA plugin cannot load {library}",
                     f"jax's CUDA plugin checks the {library} of pip's nvidia-*-cu12 packages at start-up and could not "
                     "load it: the set of jax, jaxlib, the jax-cuda12 plugin packages and the nvidia-* libraries is "
                     "incomplete or of mixed releases, so jax falls back to the CPU",
                     "reinstall them as one set: pip uninstall -y jax jaxlib jax-cuda12-plugin jax-cuda12-pjrt; pip "
                     "install -U \"jax[cuda12]\" (pin a release with jax[cuda12]==<version> where a project needs one; "
                     "it brings the matching plugin and nvidia-* libraries); if it still fails, unset LD_LIBRARY_PATH "
                     "so no CUDA toolkit folder shadows the pip libraries", [ctx.line_fact(lines[0])], lines[:1]),
                         "wheel-platform")
    return _make("abi-mismatch", f"JAX cannot load pip's {library}",
                 f"jax's CUDA plugin uses the {library} of pip's nvidia-*-cu12 packages; a CUDA toolkit folder on "
                 f"LD_LIBRARY_PATH{' (' + path.group(1) + ')' if path else ''} puts its older libraries first, and "
                 f"{library} fails to load against them",
                 "unset LD_LIBRARY_PATH (or remove the CUDA toolkit's lib64 folders from it, in ~/.bashrc too) and run "
                 "again, so the pip nvidia-* libraries jax[cuda12] installed are used; if it still fails, pip install "
                 "-U --force-reinstall \"jax[cuda12]\" brings matching ones", [ctx.line_fact(lines[0])], lines[:1])
