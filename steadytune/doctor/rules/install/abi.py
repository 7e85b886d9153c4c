"""An ABI mismatch: a compiled extension built against another torch, CUDA or ROCm than the one installed."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.packages import IMPORT_DISTRIBUTIONS, distribution_of
from steadytune.doctor.rules.base import Context, Diagnosis, _make, _restate, on_windows, rule, _text
from steadytune.doctor.rules.install.companion_index import xformers_built_for
from steadytune.doctor.rules.install.shared import _cuda_label, _listed_torch, _MODULE_PACKAGES, _table_fix, _torch_cuda
from steadytune.doctor.rules.install.torch_build import _index_for_toolkit
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
    report = xformers_built_for(_text(ctx), on_windows(ctx, _text(ctx))) if built else None
    if report is not None:
        what, why, fix = report
        return _make("abi-mismatch", what, why, fix, evidence, errors)
    if operator or built and not built.group(2).endswith("+cpu"):
        package = "xformers" if built else operator.group(1).replace("_", "-")
        have = built.group(2) if built else torch
        # xformers' own warning beside a crash: xformers then falls back to torch's attention and cannot be what
        # crashed the process: it stands as a warning beside the crash, not as the error that ended the run
        aside = bool(built) and bool(re.search(r"WARNING\[XFORMERS\]|can't load C\+\+/CUDA extensions", text)) and \
            bool(ctx.crashes())
        return _make("abi-mismatch", f"{package} is built for another torch",
                     f"{package}'s compiled operators were built for {'torch ' + built.group(1) if built else 'another torch'}"
                     f"{', and torch is ' + have if have else ''}",
                     f"pip uninstall -y {package}; pip install {package} built for the installed torch"
                     f"{' ' + have if have else ''} (from torch's own index, or a release pinned to it); or run "
                     f"without it{' (drop --xformers: torch SDPA does the same)' if package == 'xformers' else ''}",
                     evidence, errors, severity="warning" if aside else "error")
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
    deepspeed = _DEEPSPEED_TOOLKIT.search(text)
    if deepspeed:
        return _deepspeed_toolkit(ctx, deepspeed, evidence, errors)
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


# DeepSpeed's op builder (op_builder/builder.py, assert_no_cuda_mismatch) compares the toolkit at CUDA_HOME with
# torch.version.cuda before it compiles an op: a minor mismatch inside one major is accepted (its
# cuda_minor_mismatch_ok table: "accepting this combination"), a major mismatch stops with "Installed CUDA version X
# does not match the version torch was compiled with Y"; DS_SKIP_CUDA_CHECK=1 skips the check
_DEEPSPEED_TOOLKIT = re.compile(r"(?i)Installed CUDA version (\d+)\.(\d+) does not match (?:the version )?torch"
                                r"(?:[^\n]*?compiled with (\d+)\.(\d+))?(?![^\n]*accepting this combination)")


def _deepspeed_toolkit(ctx: Context, found: re.Match, evidence: list, errors: list[ErrorLine]) -> Diagnosis:
    """The toolkit DeepSpeed builds its ops with and torch's CUDA: the torch built for the toolkit's major (the index
    nearest below it), or the toolkit of torch's CUDA at CUDA_HOME."""
    major, minor = int(found.group(1)), int(found.group(2))
    built = (int(found.group(3)), int(found.group(4))) if found.group(3) else _torch_cuda(_text(ctx))
    index = _index_for_toolkit(major, minor)
    torch_cuda = f"CUDA {built[0]}.{built[1]}" if built else "python -c 'import torch; print(torch.version.cuda)' names it"
    other = f"/usr/local/cuda-{built[0]}.{built[1]}" if built else "/usr/local/cuda-<torch.version.cuda>"
    same = bool(built and built[0] == major)
    if same:
        # the same major: DeepSpeed releases with the minor-mismatch table accept it
        fix = (f"pip install -U deepspeed (its op builder accepts another minor of CUDA {major}), or point CUDA_HOME at "
               f"the toolkit of torch's CUDA (export CUDA_HOME={other}); DS_SKIP_CUDA_CHECK=1 skips the check")
    else:
        fix = (f"install the torch built for CUDA {major}.x, the toolkit's major: pip install torch --index-url "
               f"https://download.pytorch.org/whl/{index} (and the matching torchvision / torchaudio), then rerun; or "
               f"install the CUDA toolkit torch was built with and export CUDA_HOME={other} before DeepSpeed builds "
               "its ops")
    refused = ("this DeepSpeed release refuses even another minor of the same major" if same else
               "a toolkit of another major than torch's CUDA is refused")
    return _make("abi-mismatch", f"the CUDA toolkit {major}.{minor} does not match torch's CUDA",
                 f"DeepSpeed compiles its ops with the CUDA toolkit at CUDA_HOME (CUDA {major}.{minor}) and checks it "
                 f"against the CUDA torch was built with ({torch_cuda}): {refused}", fix, evidence, errors)


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


# The torch a package's prebuilt wheels of each release were compiled against, where the release's own notes (or its
# maintainers) say so, before its wheel names carried the torch: (first, last release, torch)
# exllamav2: 0.0.6's wheels moved to torch 2.1 (oobabooga/text-generation-webui pull 4285), 0.0.13 to torch 2.2 (0.0.12
# the last for 2.1: Zuellni/ComfyUI-ExLlama-Nodes issue 7), 0.0.20's notes: "Wheels compiled for PyTorch 2.3.0"
# (turboderp-org/exllamav2 issue 434)
_RELEASE_WHEEL_TORCH = {"exllamav2": (("0.0.6", "0.0.12", "2.1"), ("0.0.13", "0.0.19", "2.2"),
                                      ("0.0.20", "0.0.20", "2.3.0"))}


def _release_wheels_for_another_torch(ctx: Context, package: Optional[str], torch: Optional[str], evidence: list,
                                      errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A package release the table knows, whose wheels are built for another torch release than the installed one:
    the torch those wheels need, or the package's last release built for this torch."""
    rows = _RELEASE_WHEEL_TORCH.get(package or "")
    if not rows or not torch:
        return None
    text = _text(ctx)
    version = r"(\d+\.\d+\.\d+(?:\.post\d+)?)(?![\d.])"
    # the release installed: the one named after the package or after "to" (an update), else the newest named
    named = re.findall(rf"(?i)\b{re.escape(package)}[\s=:-]{{1,3}}v?{version}|\b(?:to|->|→)\s*v?{version}", text)
    said = [a or b for a, b in named] or re.findall(rf"(?<![\w.]){version}", text)
    known = [v for v in said if any(_release(first) <= _release(v) <= _release(last) for first, last, _ in rows)]
    if not known:
        return None
    have = max(known, key=_release)
    built = next(t for first, last, t in rows if _release(first) <= _release(have) <= _release(last))
    if _release(torch)[:2] == _release(built)[:2]:
        return None
    same = [last for first, last, t in rows if _release(t)[:2] == _release(torch)[:2]]
    torch_pin = built if built.count(".") == 2 else built + ".*"
    own = re.search(r"\+(cu\d{3})$", torch)
    label = own.group(1) if own else _cuda_label(ctx)
    index = f" --index-url https://download.pytorch.org/whl/{label}" if label else ""
    keep = (f"; or keep torch {torch} with {package} {same[-1]}, its last release built for torch "
            f"{'.'.join(torch.split('.')[:2])}" if same else "")
    return _make("abi-mismatch", f"{package} {have}'s wheels are built for torch {built}",
                 f"{package} {have}'s prebuilt wheels are compiled against torch {built}, and torch {torch} does not "
                 "export what its extension calls", f"install the torch {package} {have} is built for: pip install "
                 f"torch=={torch_pin}{index}{keep}; or build {package} from source against torch {torch} (pip install "
                 ". --no-build-isolation in its checkout)", evidence, errors)


# an undefined symbol of the C++ standard library itself (std::runtime_error(const char*) is _ZNSt13runtime_errorC2EPKc,
# std::terminate _ZSt9terminatev): the libstdc++ loaded is older than the compiler's that built the extension. Not the
# C++11 string ABI's std::__cxx11 (a torch ABI mismatch), clang's libc++ (std::__1), nor a std template over torch's
# types (std::vector<at::Tensor>: torch's own).
_STD_SYMBOL = re.compile(r"undefined symbol:?\s*(_Z(?:N|NK|T[VIS])?St(?!7__cxx11)(?!3__1)(?!\w*(?:2at|3c10|5torch)\d)"
                         r"\d+[A-Za-z_]\w*)")


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
    # (a C++ runtime symbol missing from an extension the user built, an .egg of setup.py install, is that build's: the
    # package's own pre-built release below, not the runtime)
    if re.search(r"GLIBCXX|CXXABI_\d", text) or (_STD_SYMBOL.search(text) and not re.search(r"\.egg[/\\]", text)):
        std = _STD_SYMBOL.search(text)
        return _make("abi-mismatch", "an older libstdc++ than the extension needs",
                     "the process loads a libstdc++ (often conda's) older than the one the extension was built with"
                     + (f" (the undefined {std.group(1)} is a symbol of the C++ runtime itself, not of torch: the "
                        "libstdc++ loaded predates it)" if std else ""),
                     "update the C++ runtime in that environment: conda install -c conda-forge 'libstdcxx-ng>=12' "
                     "(an older Anaconda environment's own runtime package: conda install libgcc), or "
                     "put the system's newer one first: "
                     "export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6", evidence, errors)
    if re.search(r"torchvision::\w+|torchvision versions are incompatible", text):
        other_build = _companion_of_other_build(ctx, "torchvision", torch, errors)
        if other_build is not None:
            return other_build
        nightly = _companion_of_a_nightly(ctx, "torchvision", torch, evidence, errors)
        if nightly is not None:
            return nightly
        return _make("abi-mismatch", "torchvision does not match torch",
                     "torchvision's compiled operators were built for another torch release or build",
                     "install torchvision from the same index as torch, the matching release (torchvision 0.N pairs "
                     f"with torch 2.(N-15)){': torch is ' + torch if torch else ''}; e.g. pip install --force-reinstall "
                     "torch torchvision --index-url <torch's index>", evidence, errors)
    joined = "\n".join(ctx.sheet.lines)
    compiled = re.search(r"used to compile\s+PyTorch \(([\d.]+)\)", joined)
    if re.search(r"(?i)detected CUDA version", text):
        want = compiled.group(1) if compiled else "the one torch was built with"
        detected = re.search(r"(?i)detected CUDA version \(([\d.]+)\)", joined)
        return _make("abi-mismatch", "the CUDA toolkit differs from torch's",
                     "an extension is built with nvcc from another CUDA than the one torch was compiled with",
                     f"build with CUDA {want} (torch.version.cuda): install that toolkit and point CUDA_HOME at it, or "
                     "install the prebuilt wheel of the extension instead of building it"
                     + (_torch_for_toolkit(detected.group(1)) if detected else ""), evidence, errors)
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
    if package in (None, "torch") and re.search(r"DLL load failed while importing _C: The specified module could not "
                                                 r"be found", text) and \
            re.search(r"(?i)\bimport torch\b|torch[\\/]+(?:lib|__init__)", text + "\n" + joined):
        # torch's own _C, not an extension: a DLL it links is missing (the C++ runtime, or a half-replaced torch)
        return _make("rocm-libs-missing", "torch's own _C module could not load its DLLs",
                     "torch\\_C.pyd loads torch\\lib's DLLs and the Microsoft C++ runtime; one of them is missing (no "
                     "Visual C++ Redistributable, or a torch whose files were half replaced by another install)",
                     "install the Microsoft Visual C++ Redistributable 2015-2022 (x64, https://aka.ms/vs/17/release/"
                     "vc_redist.x64.exe), then reinstall torch cleanly in that environment: pip uninstall -y torch "
                     "(until none is left, a user-site copy included), pip install --no-cache-dir torch --index-url "
                     "<its index>", evidence, errors)
    if re.search(r"(?i)xFormers", text):
        package = "xformers"
    nightly = _companion_of_a_nightly(ctx, package, torch, evidence, errors)
    if nightly is not None:
        return nightly
    string_abi = _cxx_string_abi(ctx, package, text, torch, errors)
    if string_abi is not None:
        return string_abi
    too_old = _rocm_older_than_needed(ctx, package, errors)
    if too_old is not None:
        return too_old
    release_torch = _release_wheels_for_another_torch(ctx, package, torch, evidence, errors)
    if release_torch is not None:
        return release_torch
    windows = re.search(r"(?i)procedure could not be found|DLL load failed", text)
    # the package's own remedy from the tool table (tool_fixes.yaml), else the reinstall every extension takes
    # pip knows the extension by its distribution's name where that differs (awq_ext comes with autoawq-kernels)
    pip_name = (distribution_of(package) if package in IMPORT_DISTRIBUTIONS else package) or "<the extension>"
    # a package pip built from source is cached as a wheel under its own name and version, not torch's: a plain
    # reinstall after a torch upgrade takes that old build again (pip's "Caching" docs: locally built wheels are
    # reused), so the rebuild goes past the cache (horovod's maintainers on a CI cache restoring an old build)
    fix = _table_fix(ctx, package, "abi-mismatch", package=package) or (
        f"pip uninstall -y {pip_name}; reinstall it built for {against} (the wheel made for that "
        f"torch and CUDA/ROCm, or pip install --no-cache-dir --no-build-isolation {pip_name} so it compiles "
        "against the torch you have: without --no-cache-dir pip reuses the wheel it built for the old torch; a CI "
        "job's restored pip cache does the same)")
    what = "a function it needs" if windows else "a symbol"
    return _make("abi-mismatch", f"{package or 'a compiled extension'} was built for another torch",
                 f"{package or 'the extension'} calls {what} the installed torch (or library) does not export: it "
                 f"was compiled against another release than {against}", fix, evidence, errors)


# a nightly torch: its version's .devYYYYMMDD, or the nightly named beside torch (pytorch-nightly, torch nightly)
_NIGHTLY = re.compile(r"(?i)\b(?:py)?torch[\w-]{0,10}?[\s=:-]{1,3}(?:v(?:ersion)?\s*)?(\d+\.\d+(?:\.\d+)?\.dev\d{6,8}\S*)|"
                      r"\b(pytorch[- ]nightly|(?:py)?torch nightl(?:y|ies)|nightly (?:build of )?(?:py)?torch)\b")


def _nightly_torch(ctx: Context, torch: Optional[str]) -> Optional[str]:
    """The nightly torch the paste shows (its version, or the words naming it), None for a release."""
    if torch and ".dev" in torch:
        return torch
    found = _NIGHTLY.search(_text(ctx))
    return (found.group(1) or found.group(2)) if found else None


# torch's companions, each built from its own repository against one torch (the pytorch/<repo> to build from)
_COMPANION_REPOS = {"torchvision": "vision", "torchaudio": "audio"}


def _companion_of_a_nightly(ctx: Context, package: Optional[str], torch: Optional[str], evidence: list,
                            errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A companion release (torchvision, torchaudio) whose compiled operators do not link under a nightly torch: no
    release is built against a nightly; the companion's nightly of the same day (pytorch.org's nightly index) or a
    source build against the installed nightly is."""
    nightly = _nightly_torch(ctx, torch) if package in _COMPANION_REPOS else None
    if nightly is None:
        return None
    repo = _COMPANION_REPOS[package]
    return _make("abi-mismatch", f"{package} is a release, torch a nightly build",
                 f"torch is a nightly build ({nightly}); {package}'s releases are each compiled against one torch "
                 "release, so a release's compiled operators do not link against a nightly",
                 f"install {package}'s nightly of the same day from torch's nightly index (pip install --pre "
                 f"--force-reinstall torch {package} --index-url https://download.pytorch.org/whl/nightly/<cu1XX|cpu>), "
                 f"or build {package} from source against the installed nightly: git clone "
                 f"https://github.com/pytorch/{repo} && cd {repo} && pip install --no-build-isolation -e . (with the "
                 "CUDA toolkit of torch's CUDA)", evidence, errors)


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
    mislabelled = _mislabelled_wheel(ctx, pip_name, bool(old), torch)
    if mislabelled is not None:
        return _make("abi-mismatch", f"{pip_name}'s wheel was built for the other C++ ABI than its name says",
                     f"{pip_name}'s binary was compiled with the {built} std::string ABI, while {installed} uses the "
                     f"{other} ABI; {mislabelled[0]}", mislabelled[1], [ctx.line_fact(errors[0])], errors)
    return _make("abi-mismatch", f"{name} was built for the other C++ ABI than torch's",
                 f"{name}'s binary was compiled with the {built} std::string ABI, while "
                 f"{'torch ' + torch if torch else 'the installed torch'} uses the {other} ABI (PyTorch's Linux "
                 "wheels use the C++11 ABI from 2.6's CUDA 12.6 builds and in every build from 2.7)",
                 f"reinstall the {pip_name} build made for {installed} and its C++ ABI (release wheels are named "
                 f"{wheel_tag} for it; python -c 'import torch; print(torch.compiled_with_cxx11_abi())' says which "
                 f"one torch has), or build {pip_name} from source against it: pip uninstall -y {pip_name}; "
                 f"pip install --no-build-isolation --no-binary {pip_name} {pip_name}; or move to a torch of the ABI "
                 f"the binary was built for ({back})",
                 [ctx.line_fact(errors[0])], errors)


# Releases whose prebuilt wheels carry the other C++ ABI than their file name says, and the release before them whose
# wheels match: flash-attn's 2.8 wheels named torch2.6 ... cxx11abiFALSE are compiled with the C++11 ABI (undefined
# c10::Error(..., std::__cxx11::basic_string) under torch 2.6.0+cu124), while 2.7.4.post1's load in the same
# environment (Dao-AILab/flash-attention issues 1717 and 1783: 2.8.0.post2, 2.8.2; huggingface/open-r1 issue 684).
# (pip name, releases, the torch release of the mislabelled wheels, the good release)
_MISLABELLED_ABI = (("flash-attn", r"2\.8\.\d+(?:\.post\d+)?", (2, 6), "2.7.4.post1"),)


def _mislabelled_wheel(ctx: Context, pip_name: str, binary_old: bool, torch: Optional[str]) -> Optional[tuple[str, str]]:
    """A binary of the C++11 ABI under a pre-C++11 torch where the package's wheels for that torch are known to be
    mislabelled (or the paste's wheel name says the torch's ABI): the why and the fix, else None."""
    if binary_old:
        return None
    text = _text(ctx)
    for package, releases, torch_release, good in _MISLABELLED_ABI:
        if package != pip_name or torch is None or _release(torch)[:2] != torch_release or "+cu126" in torch:
            continue   # torch 2.6.0+cu126 has the C++11 ABI itself: the plain reading's case
        names = package.replace("-", "[-_]")
        named = re.search(rf"(?i){names}(?:\W{{1,3}}|==)v?({releases})(?![\d])", text)
        wheel = re.search(rf"(?i){names}-\S*?cxx11abiFALSE\S*\.whl", text)
        if not (named or wheel):
            continue
        which = f"{package} {named.group(1)}" if named else f"{package}'s wheel {wheel.group(0)}"
        major, minor = torch_release
        return (f"{which} is one of the {package} releases whose torch {major}.{minor} wheels, named cxx11abiFALSE, "
                f"are compiled with the C++11 ABI: the wheel is mislabelled, not the wrong pick",
                f"install {package} {good}, the release whose torch {major}.{minor} cxx11abiFALSE wheels are built "
                f"with the pre-C++11 ABI: pip uninstall -y {package}; pip install --no-build-isolation "
                f"\"{package}=={good}\" (or its wheel for this torch, CUDA and Python from the release page); or build "
                f"{package} from source against torch {torch} (pip install --no-build-isolation --no-binary {package} "
                f"{package}); or move to torch 2.7 or newer, whose C++11 ABI these wheels have")
    return None


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


# pytorch.org's conda channel publishes the pytorch-cuda metapackage for these CUDA releases (pytorch.org's previous
# versions page: pytorch-cuda=11.6 / 11.7 / 11.8 / 12.1 / 12.4), its pip indexes cuXYZ for many more
_PYTORCH_CUDA = ("11.6", "11.7", "11.8", "12.1", "12.4")


def _torch_for_toolkit(toolkit: str) -> str:
    """The other way out of torch's "detected CUDA version (X) mismatches ... PyTorch (Y)": keep the toolkit and install
    a torch built for it (neuralangelo#176: pip uninstall torch, then conda's pytorch-cuda=11.7)."""
    major_minor = ".".join(toolkit.split(".")[:2])
    label = "cu" + major_minor.replace(".", "")
    conda = (f" (conda: conda install pytorch torchvision torchaudio pytorch-cuda={major_minor} -c pytorch -c nvidia)"
             if major_minor in _PYTORCH_CUDA else "")
    return (f"; or keep the CUDA {major_minor} toolkit and install a torch built for it: pip uninstall torch torchvision "
            f"torchaudio, then pip install torch torchvision torchaudio --index-url "
            f"https://download.pytorch.org/whl/{label} (a torch release that has a {label} build){conda}")
