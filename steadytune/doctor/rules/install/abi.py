"""An ABI mismatch: a compiled extension built against another torch, CUDA or ROCm than the one installed."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.packages import IMPORT_DISTRIBUTIONS, distribution_of
from steadytune.doctor.rules.base import Context, Diagnosis, _make, _restate, rule, _text
from steadytune.doctor.rules.install.shared import _listed_torch, _MODULE_PACKAGES, _table_fix
from steadytune.doctor.rules.install.wheels import _release


_SYMBOL_LIB = re.compile(r"(?:site-packages|dist-packages)[/\\]([\w\-]+)[/\\]\S*?\.(?:so|pyd|dll)|"
                         r"\b(lib\w+?)(?:_\w+)?\.so\b|\b(\w+?)(?:\.cpython\S*)?\.so: undefined symbol")


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
    torch = next((f.value for f in ctx.sheet.of("torch") if f.value[:1].isdigit()), None) or _listed_torch(ctx)
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
    string_abi = _cxx_string_abi(ctx, package, text, torch, errors)
    if string_abi is not None:
        return string_abi
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


# A C++ symbol taking a std::string says which libstdc++ string ABI its caller was compiled with: the pre-C++11 one
# mangles std::string as `Ss`, the C++11 one as `NSt7__cxx1112basic_string...`. PyTorch's Linux wheels moved to the
# C++11 ABI with 2.6's CUDA 12.6 builds and all builds from 2.7 (pytorch/pytorch pull 142064, issue 143962).
_OLD_STRING = re.compile(r"undefined symbol:?\s*_Z\w*?(?:ENS_\d+\w*?)?(?<=[A-Z0-9_])Ss\w*")
_NEW_STRING = re.compile(r"undefined symbol:?\s*_Z\w*__cxx11\w*")


def _cxx_string_abi(ctx: Context, package: Optional[str], text: str, torch: Optional[str],
                    errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """An undefined torch (c10) symbol whose std::string is of the other C++ ABI than the installed torch's: the
    extension's binary was built for a torch of the other libstdc++ string ABI, so no release pin alone fixes it."""
    if not re.search(r"undefined symbol:?\s*_ZN?K?\d*(?:c10|at|torch)\d", text):
        return None
    old = _OLD_STRING.search(text)
    new = None if old else _NEW_STRING.search(text)
    if not (old or new):
        return None
    name = package or "the extension"
    pip_name = (distribution_of(name) if name in IMPORT_DISTRIBUTIONS else name)
    built, other = ("pre-C++11 (_GLIBCXX_USE_CXX11_ABI=0)", "C++11") if old else \
        ("C++11 (_GLIBCXX_USE_CXX11_ABI=1)", "pre-C++11")
    wheel_tag = "cxx11abiTRUE" if old else "cxx11abiFALSE"
    installed = f"torch {torch}" if torch else "the installed torch"
    # the torch releases whose wheels have the ABI the binary was built for
    back = "2.6.0+cu124 or older" if old else "2.6.0+cu126, or 2.7 and newer"
    return _make("abi-mismatch", f"{name} was built for the other C++ ABI than torch's",
                 f"{name}'s binary was compiled with the {built} std::string ABI, while "
                 f"{'torch ' + torch if torch else 'the installed torch'} uses the {other} ABI (PyTorch's Linux "
                 "wheels use the C++11 ABI from 2.6's CUDA 12.6 builds and in every build from 2.7)",
                 f"install the {pip_name} build made for {installed} and its C++ ABI (release wheels are named "
                 f"{wheel_tag} for it; python -c 'import torch; print(torch.compiled_with_cxx11_abi())' says which "
                 f"one torch has), or build {pip_name} from source against it: pip uninstall -y {pip_name}; "
                 f"pip install --no-build-isolation --no-binary {pip_name} {pip_name}; or move to a torch of the ABI "
                 f"the binary was built for ({back})",
                 [ctx.line_fact(errors[0])], errors)


# torch libraries that exist only in older torch releases: the split CUDA builds of torch 1.x shipped libtorch_cuda_cu
# and libtorch_cuda_cpp, torch 2.x one libtorch_cuda (its lib folder; flash-attention issue 236). An extension that
# links them was compiled against a torch 1.x.
_GONE_TORCH_LIBRARY = re.compile(r"(libtorch_cuda_(?:cu|cpp)\.so)\S{0,10}: cannot open shared object file|"
                                 r"(libtorch_cuda_(?:cu|cpp)\.so)\S{0,10}.{0,20}(?:not found|No such file)")
# flash-attn's optional extensions, each built from a folder of its csrc (flash-attention's README and csrc/)
_FLASH_ATTN_CSRC = {"dropout_layer_norm": "csrc/layer_norm", "fused_dense_lib": "csrc/fused_dense_lib",
                    "rotary_emb": "csrc/rotary", "xentropy_cuda_lib": "csrc/xentropy", "ft_attention": "csrc/ft_attention"}


@rule("abi-mismatch")
def extension_links_a_torch_library_gone(ctx: Context) -> Optional[Diagnosis]:
    """An extension that fails to load because a torch library it links no longer exists in this torch: it was built
    against an older torch, and only a rebuild (or its wheel for this torch) against the installed torch loads."""
    if "libtorch_cuda_c" not in _text(ctx):
        return None
    errors = [e for e in ctx.errors if _GONE_TORCH_LIBRARY.search(e.line)]
    if not errors:
        return None
    m = _GONE_TORCH_LIBRARY.search(errors[0].line)
    library = m.group(1) or m.group(2)
    first = errors[0].line_no
    above = "\n".join(ctx.sheet.lines[max(0, first - 4): first - 1])
    imported = re.findall(r"\bimport\s+(\w+)", above)
    module = imported[-1] if imported else None
    package = _extension_package(ctx, errors) or "the extension"
    if module and module in _FLASH_ATTN_CSRC:
        rebuild = (f"pip uninstall -y {module}; rebuild it from flash-attn's source "
                   f"against the installed torch: git clone https://github.com/Dao-AILab/flash-attention && cd "
                   f"flash-attention/{_FLASH_ATTN_CSRC[module]} && pip install . --no-build-isolation")
    else:
        what = module or package
        rebuild = (f"pip uninstall -y {package if package != 'the extension' else what}; rebuild {what} against the "
                   "installed torch (pip install --no-build-isolation --no-cache-dir, or pip install . in its source "
                   "folder), or install its wheel built for this torch")
    torch = _listed_torch(ctx)
    return _make("abi-mismatch", f"{module or package} was built against an older torch",
                 f"{module or package} links {library}, a library of torch 1.x's split CUDA build; the installed torch "
                 f"{'(' + torch + ') ' if torch else ''}ships one libtorch_cuda.so, so the extension compiled against "
                 "the old torch no longer loads", rebuild, [ctx.line_fact(errors[0])], errors)
