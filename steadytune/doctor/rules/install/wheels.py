"""A wheel for another Python or platform: no wheel for this Python, an import that fails, an install that does not
build, an index older than the pin, packages that replace torch, and podman older than the CDI spec."""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import rocm_indexes_for_torch
from steadytune.doctor.packages import distribution_of, read_import_failure
from steadytune.doctor.tool_fixes import ALIASES, load_tool_fixes, machine_kinds, tool_fix
from steadytune.doctor.rules.base import (
    on_windows,
    Context,
    Diagnosis,
    _ahead_of,
    _first,
    _lines_matching,
    _make,
    rule,
    _text,
    _vendor,
)
from steadytune.doctor.rules.install.shared import _MODULE_PACKAGES, _table_fix
from steadytune.doctor.rules.install.hidden_imports import hidden_import
from steadytune.doctor.rules.install.stale_install import leftover_package
from steadytune.doctor.rules.install.torch_build import _AMD_MODEL, _BNB_NO_GPU, _gpu_left_idle, _NVIDIA_MODEL, _ON_CPU
from steadytune.doctor.rules.install.spconv_builds import _torch_cuda as spconv_cuda, spconv_label


_WHEEL = re.compile(r"(\S+?)-(\d[\w.+!]*)-(?:\d\w*-)?(cp\d+|py3\w*)-(\w+)-(\w+)\.whl")



# the newest Python each torch release has wheels for (pytorch.org's release notes and its wheel indexes)
_TORCH_PYTHON = (((0, 4), "3.6"), ((1, 4), "3.7"), ((1, 7), "3.8"), ((1, 11), "3.9"), ((1, 13), "3.10"),
                 ((2, 2), "3.11"), ((2, 5), "3.12"), ((2, 9), "3.13"))


def _python_for(package: str, version: str, linux: bool = True) -> Optional[str]:
    """The newest Python a torch release was built for (None for other packages and for releases after 2.8); `linux`
    False for Windows and macOS, where torch 1.13's Python 3.11 wheels never came: 1.13 published cp311 wheels for
    Linux x86-64 only, and Windows / macOS got Python 3.11 with torch 2.0 (pytorch/pytorch issues 86566 and 92826)."""
    numbers = re.match(r"(\d+)\.(\d+)", version)
    if package.lower() != "torch" or not numbers:
        return None
    release = (int(numbers.group(1)), int(numbers.group(2)))
    if not linux and release[:2] == (1, 13):
        return "3.10"
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


# torch modules a torch release removed, which packages written before it still import (the PyTorch 2.0 release
# notes: torch._six went, its names moved to torch and the standard library)
_TORCH_REMOVED = {"torch._six": "2.0"}


def _import_failure(ctx: Context, errors: list[ErrorLine], attribute_only: bool = False) -> Optional[Diagnosis]:
    """"No module named X" / "cannot import name N from X" / "module X has no attribute N": a module path that moved
    between releases of its package (the importing package and the installed one are releases that do not go together)
    names that package and the release to install; a package's compiled part missing names its build for this
    platform; a module missing in a pip source build is build isolation; a package that is not installed names its
    install for this platform (the tool table)."""
    failure = read_import_failure(ctx.sheet.lines)
    if failure is None or (attribute_only and not failure.attribute):
        return None
    if hidden_import(failure.module, failure.name) is not None or leftover_package(ctx) is not None:
        return None   # not a release mix-up or a missing package: hidden_imports' and stale_install's readings
    if failure.caller is None:
        # a title restating the error ("No module named 'x' when loading a model") comes before the traceback, whose
        # repeat of it names the package that ran the import
        later = read_import_failure(ctx.sheet.lines[failure.line_no:])
        if later is not None and later.module == failure.module and later.caller is not None:
            failure = dataclasses.replace(later, line_no=later.line_no + failure.line_no)
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
    removed = _TORCH_REMOVED.get(failure.module) if package == "torch" and failure.caller is None else None
    if removed is not None:
        # no traceback frame names the importer: the package the paste names beside torch is the one that imports it
        importer = next((t for t in ctx.sheet.tools if t not in ("torch", "python")), None)
        if importer is not None:
            return _make("wheel-platform", f"{importer} predates torch {removed}",
                         f"{importer} imports {failure.module}, which torch {removed} removed: the installed {importer} "
                         f"is a release written for torch before {removed}",
                         f"upgrade {importer} to a release written for torch {removed} and newer: pip install -U "
                         f"{importer} (or pip uninstall -y {importer} && pip install {importer}); or keep torch below "
                         f"{removed} for this {importer}", evidence, covers)
    if failure.moved:
        gone = (f"{failure.module}.{failure.name}" if failure.attribute else
                f"{failure.name} from {failure.module}" if failure.name else failure.module)
        cause = (f"{caller or 'the program'} {'uses' if failure.attribute else 'imports'} {gone}, which the installed "
                 f"{package} does not have: the path "
                 f"moved or went away between {package} releases, so the two are releases that do not go together")
        per_cuda = _per_cuda_package(ctx, package)
        if per_cuda:
            # a package PyPI publishes once per CUDA release (cumm-cu114 beside spconv-cu114): the upgrade names the
            # build of the machine's CUDA, never the plain CPU-only name (traveller59/spconv#367: pip install -U
            # cumm-cu114)
            fix = (f"upgrade {package} to the release {caller or 'the program'} needs, in the build of this CUDA: pip "
                   f"install -U {per_cuda} (spconv and cumm come as one package per CUDA release; pip list | grep -e "
                   f"spconv -e cumm must show the same -cuXYZ for both)")
        elif caller:
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

# an issue template's label at the head of a title: "[Installation]: ...", "[Bug] ...", "[Build]:"
_TRACKER_LABEL = re.compile(r"^\W*\[[^\]\n]{1,30}\]\s*:?\s*")


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
    # a package manager's own message the catalogue settles ("No space left on device", uv's platform tags) is no
    # complaint in prose: its entry's cause and fix speak for it
    if any(e.catalogue and e.catalogue.entry.own for e in ctx.errors):
        return None
    # a compiler's own diagnostics (ptxas, a kernel's codegen, file:line) are a kernel failing at run time, not an install
    # a tracker's label is no complaint: vLLM's "[Installation]:" template heads reports of anything that fails after
    said = [line for line in _lines_matching(ctx, _INSTALL_FAILS.pattern)
            if _INSTALL_FAILS.search(_TRACKER_LABEL.sub("", line.line))
            and not re.search(r"(?i)\bptxas\b|\bcodegen\b|\.target sm_|\bline \d+;|\.(?:cu|cpp|c|h|py):\d+", line.line)]
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


# "it says no module named Triton": the import error retold in a sentence (any case, no quotes), with no traceback
_MODULE_SAID = re.compile(r"(?i)\bno module named\s+['\"`]?([A-Za-z_][\w.]*)")


def _missing_module_said(ctx: Context) -> Optional[Diagnosis]:
    """A module said to be missing, in words, on an OS where its package comes another way than on Linux (Triton on
    Windows is triton-windows): the package's own install for this OS (the tool table), as the likely reading."""
    lines = _lines_matching(ctx, _MODULE_SAID.pattern) if "module named" in _text(ctx).lower() else []
    if not lines:
        return None
    text = _text(ctx)
    kinds = machine_kinds(on_windows(ctx, text), _vendor(ctx), text)
    module = _MODULE_SAID.search(lines[0].line).group(1).split(".")[0].lower()
    package = ALIASES.get(module, distribution_of(module))
    if not kinds & {"windows", "macos"} or tool_fix(package, "wheel-platform", kinds, {}) in (
            None, tool_fix(package, "wheel-platform", frozenset(), {})):
        return None   # the package has no build of its own for this OS: being missing says nothing about the OS
    return _make("wheel-platform", f"{package} is missing on this OS",
                 f"{package} is not installed where the program runs, and on this OS it is installed its own way "
                 "(another package or release than the Linux one; the fix says which)", _table_fix(ctx, package, "wheel-platform", kinds, package=package,
                                                caller=_named_tool(_MODULE_SAID.sub("", text))),
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


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
_TF_NO_GPU = re.compile(r"(?i)is_built?_with_cuda\(\).{0,30}\bfalse|list_physical_devices\(.GPU.\).{0,30}(?:\[\]|\bempty\b)|"
                        r"tensorflow(?:-gpu)?\b.{0,60}\b(?:not (?:available|found|detect\w*|see\w*|use\w*)|can.?n?.?t "
                        r"(?:detect|see|use|find|install)|(?:does not|doesn.t|won.?t|will not) (?:detect|see|use|find))|"
                        # told in words: "it only lists the CPU", "only shows CPU:0"
                        r"\bonly (?:shows?|lists?|sees?|finds?|uses?) (?:the |my )?CPU\b|"
                        r"no (?:matching )?(?:version|distribution)\b.{0,30}tensorflow-gpu|tensorflow-gpu\b.{0,40}was not "
                        r"found|No version \S+ of (?:the )?tensorflow-gpu|"
                        # Chinese: cannot detect / find / use the GPU
                        r"tensorflow(?:-gpu)?\b.{0,40}(?:检测不到|识别不到|找不到|用不了|无法使用|无法识别|没有识别)|"
                        # the user's words in a TensorFlow paste: "GPU is NOT AVAILABLE", "2.12 not support GPU"
                        r"\bGPU\b.{0,12}\b(?:is )?not (?:available|found|detected)|\bnot (?:support(?:s|ed)?|"
                        r"detect(?:s|ed|ing)?|see(?:s|ing)?|us(?:e|es|ing)) (?:the |my |a |any )?GPU|"
                        # TensorFlow's C library for Windows' GPU (libtensorflow-gpu-windows-x86_64-2.11.0.zip) not there
                        r"libtensorflow-gpu-windows\S*\b(?:.{0,80}\b(?:not found|NoSuchKey|does not exist|404)\b)?")


def _tensorflow_on_windows(ctx: Context) -> Optional[Diagnosis]:
    """TensorFlow on native Windows that finds no GPU (or whose GPU package will not install): from 2.11 on TensorFlow
    publishes no GPU build for native Windows, whatever CUDA is installed (torch beside it may well see the GPU)."""
    text = _text(ctx)
    if not on_windows(ctx, text) or not re.search(r"(?i)\b(?:lib)?tensorflow", text) or \
            re.search(r"\bWSL|Windows Subsystem for Linux", text):
        return None   # under WSL TensorFlow is the Linux build, with its GPU
    lines = ctx.sheet.lines
    # the answer on the line itself (a comment) or on the next one (an interactive session's output)
    said = [ErrorLine(n, line.strip(), None) for n, line in enumerate(lines, 1)
            if _TF_NO_GPU.search(line + " " + (lines[n].strip() if n < len(lines) else ""))]
    if not said:
        return None
    version = re.search(r"(?i)\b(?:tensorflow(?:-gpu)?|tf)\b\D{0,20}\b2\.(\d+)(?:\.\d+)?\b|"
                        r"libtensorflow-gpu-windows-[\w]+-2\.(\d+)", text)
    minor = next((g for g in version.groups() if g), None) if version else None
    if minor and int(minor) <= 10:
        return None   # a release that still had a Windows GPU build: its CUDA/cuDNN pair is the question
    fix = _table_fix(ctx, "tensorflow", "wheel-platform", frozenset({"windows"}))
    return _make("wheel-platform", "no GPU TensorFlow for native Windows",
                 f"TensorFlow {'2.' + minor + ' ' if minor else ''}has no GPU build for native Windows "
                 "(the last was 2.10): on Windows it runs on the CPU only, and tensorflow-gpu is no longer published",
                 fix, [ctx.line_fact(said[0])], said[:1], confirmed=bool(version))


# a package whose install replaces the torch already there ("pip install xformers re-installs torch 2.0.1")
_REPLACES_TORCH = re.compile(r"(?i)\b(?:re-?install|replac|downgrad|uninstall|overwrit|swap)\w*\s+(?:(?:my|the|our|"
                             r"existing|installed|current)\s+)*(?:torch|pytorch)\b|"
                             # Chinese: reinstalls / overwrites / uninstalls / downgrades torch
                             r"(?:重新安装|重装|覆盖|卸载|降级|替换)了?(?:原来的|已有的|我的)?\s*(?:torch|pytorch)")


_BY_THE_USER = re.compile(r"(?i)\b(?:I|we)(?:'ve| have| had| already| also| then| just| even)*\s*$")


def _package_replaces_torch(ctx: Context) -> Optional[Diagnosis]:
    """Installing a compiled package swaps out the torch that was there: each of its wheels is built for one torch
    release (and CUDA), so pip brings that torch along; building the package against the installed torch keeps it."""
    # the user's own reinstall of torch ("I have uninstalled pytorch and reinstalled it") is not a package doing it
    said = [line for line in _lines_matching(ctx, _REPLACES_TORCH.pattern)
            if not _BY_THE_USER.search(line.line[:_REPLACES_TORCH.search(line.line).start()][-40:])]
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


# The Pythons AMD's repo.radeon.com/rocm/manylinux/rocm-rel-X.Y/ folders carry tensorflow-rocm wheels for (their file
# names: tensorflow_rocm-2.16.1-cp39-... and -cp310-... in rocm-rel-6.2), and the Python each Ubuntu release ships
# (Ubuntu release notes: 22.04 ships 3.10, 24.04 ships 3.12)
_RADEON_TF_PYTHONS = {"6.2": ("3.9", "3.10")}
_UBUNTU_PYTHON = {"20.04": "3.8", "22.04": "3.10", "24.04": "3.12"}
_RADEON_INDEX = re.compile(r"repo\.radeon\.com/rocm/manylinux/rocm-rel-(\d+\.\d+)")


def _radeon_index_python(ctx: Context) -> Optional[Diagnosis]:
    """tensorflow-rocm from a repo.radeon.com rocm-rel folder finds no version at all: the folder's wheels are built for
    older Pythons than the one pip runs (Ubuntu 24.04's 3.12), so pip sees none of them."""
    text = _text(ctx)
    index = _RADEON_INDEX.search(text)
    if not index or not re.search(r"(?i)tensorflow[-_]rocm", text) or \
            not re.search(r"(?i)from versions: none|no matching distribution", text):
        return None
    pythons = _RADEON_TF_PYTHONS.get(index.group(1))
    if pythons is None:
        return None
    ubuntu = re.search(r"(?i)ubuntu\s*(\d\d\.04)", text)
    here = (ctx.sheet.values("python") or [None])[-1] or (_UBUNTU_PYTHON.get(ubuntu.group(1)) if ubuntu else None)
    if here is None or here in pythons:
        return None
    newest = pythons[-1]
    lines = _lines_matching(ctx, r"(?i)from versions: none|no matching distribution")
    return _make("wheel-platform", f"no tensorflow-rocm for Python {here} on rocm-rel-{index.group(1)}",
                 f"AMD's rocm-rel-{index.group(1)} folder has tensorflow-rocm wheels for Python "
                 f"{' and '.join(pythons)} only (cp{newest.replace('.', '')} is the newest tag), and pip runs Python "
                 f"{here}{' (Ubuntu ' + ubuntu.group(1) + ' ships it)' if ubuntu and not ctx.sheet.values('python') else ''}, "
                 "so it sees no version at all",
                 f"make a Python {newest} environment (conda create -n tf python={newest}, or uv venv -p {newest}) and "
                 "run the same pip command in it; or use AMD's rocm/tensorflow docker image", [ctx.line_fact(lines[0])],
                 lines[:1])


# a package's GPU extra in a pip line (jax[cuda12_pip], tensorflow[and-cuda]) or pip's warning that the release has none
_GPU_EXTRA = re.compile(r"(?i)\b([a-z][\w-]*)\[(cuda\w*|rocm\w*|gpu|and-cuda)\]|"
                        r"\b([a-z][\w-]*) [\d.]+ does not provide the extra '(cuda\w*|rocm\w*|gpu|and-cuda)'")


def _gpu_extra_off_linux(ctx: Context) -> Optional[Diagnosis]:
    """A package's CUDA/ROCm extra installed on Windows or macOS where the package builds its GPU wheels for Linux only
    (the tool table's row for that OS differs from its fallback): the extra installs nothing for the GPU here, and the
    package runs on the CPU ("No GPU/TPU found, falling back to CPU")."""
    text = _text(ctx)
    extra = _GPU_EXTRA.search(text)
    if extra is None:
        return None
    package = (extra.group(1) or extra.group(3)).lower()
    # WSL 2 is Linux: "a WSL distribution on Windows 11" names Windows, but the package runs under Linux there
    wsl = ctx.sheet.has("platform", "wsl") or re.search(r"(?i)(?<![A-Za-z])wsl ?2?(?![A-Za-z])", text)
    kinds = machine_kinds(on_windows(ctx, text) and not wsl, _vendor(ctx), text)
    if not kinds & {"windows", "macos"}:
        return None
    own = tool_fix(package, "wheel-platform", kinds, {})
    if own is None or own == tool_fix(package, "wheel-platform", frozenset(), {}):
        return None
    fix = _table_fix(ctx, package, "wheel-platform", kinds, package=package)
    lines = _lines_matching(ctx, re.escape(extra.group(0)))
    return _make("wheel-platform", f"{package}'s GPU build is not made for this OS",
                 f"{package} publishes its {extra.group(2) or extra.group(4)} GPU build for Linux only, so on this OS "
                 "the extra brings no GPU support and it runs on the CPU", fix, [ctx.line_fact(lines[0])], lines[:1])


# the backend failing to start, or its CUDA plugin (a package of its own since jax 0.4.26: jax-cuda12-plugin) failing
# in its initialize() against a jaxlib of another release (an attribute of jaxlib.xla_client it expects is missing)
_JAX_CUDA_INIT = re.compile(r"CUDA backend failed to initialize|Jax plugin configuration error|"
                            r"jax_plugins[./]xla_cuda\d+\b.{0,40}\binitiali[sz]e")


def _jax_cuda_pieces(ctx: Context) -> Optional[Diagnosis]:
    """jax's "CUDA backend failed to initialize" with a CUDA jaxlib: the pieces jax's CUDA backend is made of (jax,
    jaxlib, its CUDA plugin and the nvidia-* CUDA/cuDNN packages) were installed apart and do not match; the
    jax[cuda12] extra installs them as one set (docs.jax.dev installation: pip install -U "jax[cuda12]")."""
    lines = _lines_matching(ctx, _JAX_CUDA_INIT)
    text = _text(ctx)
    if not lines or not re.search(r"(?i)\bjax", text):
        return None
    version = re.search(r"(?im)^\W*jax\s*[=: ]\s*=?\s*(\d+\.\d+\.\d+)\b|\bjax==(\d+\.\d+\.\d+)", text)
    pinned = f"=={version.group(1) or version.group(2)}" if version else ""
    cuda = re.search(r"\+cuda(\d+)", text)
    extra = f"cuda{cuda.group(1)}" if cuda else "cuda12"
    return _make("wheel-platform", "jax's CUDA pieces do not match",
                 "jax's CUDA backend is jax, a CUDA jaxlib (or jaxlib with the jax-cuda plugin packages) and the CUDA and "
                 "cuDNN libraries pinned for it; installed "
                 "one by one (a CUDA jaxlib beside a plain jax, or the system's CUDA in place of the pinned packages) "
                 "they do not fit, and the backend fails to start, leaving jax on the CPU",
                 f"reinstall them as one set: pip uninstall -y jax jaxlib jax-{extra}-plugin jax-{extra}-pjrt; pip install -U \"jax[{extra}]{pinned}\" (it "
                 "brings the matching jaxlib, CUDA plugin and nvidia-* libraries); keep LD_LIBRARY_PATH free of other "
                 "CUDA folders", [ctx.line_fact(lines[0])], lines[:1])


def _conda_cpu_pair(ctx: Context) -> Optional[Diagnosis]:
    """conda's pytorch-cpu package (the pytorch channel's CPU build name for 1.0 and older) with torchvision: the plain
    torchvision package depends on the GPU pytorch and pulls it in beside pytorch-cpu; the channel's CPU pair is
    pytorch-cpu with torchvision-cpu (pytorch.org previous-versions: conda install pytorch-cpu==1.0.1
    torchvision-cpu==0.2.2 -c pytorch), and later releases take the cpuonly package instead."""
    text = _text(ctx)
    if not re.search(r"(?i)\bpytorch-cpu\b", text) or not re.search(r"(?i)\btorchvision\b(?!-cpu)", text):
        return None
    if re.search(r"(?i)\btorchvision-cpu\b", text):
        return None
    lines = _lines_matching(ctx, r"(?i)\btorchvision\b")
    return _make("wheel-platform", "torchvision pulls the GPU pytorch beside pytorch-cpu",
                 "conda's torchvision package depends on the GPU pytorch package, so installing it next to pytorch-cpu "
                 "brings the GPU build in as well",
                 "install the CPU pair together: conda install pytorch-cpu torchvision-cpu -c pytorch (pytorch 1.0 and "
                 "older); for later releases: conda install pytorch torchvision cpuonly -c pytorch",
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


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


# the CDI library of a container engine refusing a field of the spec it reads: 'failed to parse CDI Spec
# "/etc/cdi/nvidia.yaml": ... json: unknown field "additionalGids"' (nvidia-container-toolkit issue 1860: toolkit 1.19.1
# against Ubuntu 24.04's podman 4.9.3). Each CDI spec version adds fields (additionalGids and intelRdt came with spec
# 0.7.0: https://github.com/cncf-tags/container-device-interface/blob/main/SPEC.md), and a library older than the
# spec's version does not know them.
_CDI_UNKNOWN_FIELD = re.compile(r"(?i)(?:parse|unmarshal\w*|load)\W{0,3}CDI Spec.{0,200}?unknown field \W?(\w+)")
_CDI_ENGINES = (("podman", r"(?i)\bpodman\b"), ("CRI-O", r"(?i)\bcri-?o\b"), ("containerd", r"(?i)\bcontainerd\b"),
                ("docker", r"(?i)\bdocker\b"))


def _cdi_field_unknown(ctx: Context) -> Optional[Diagnosis]:
    """A CDI spec with a field the container engine's CDI library does not know: the spec was written at a newer CDI
    version (by a newer NVIDIA Container Toolkit) than the engine reads."""
    lines = _lines_matching(ctx, _CDI_UNKNOWN_FIELD)
    if not lines:
        return None
    text = _text(ctx)
    field = _CDI_UNKNOWN_FIELD.search(lines[0].line).group(1)
    engine = next((name for name, pattern in _CDI_ENGINES if re.search(pattern, text)), "podman")
    version = re.search(rf"(?i)\b{re.escape(engine)}\S*\s+(?:version\s+)?v?(\d+\.\d+(?:\.\d+)?)", text)
    said = f"{engine} {version.group(1)}" if version else engine
    toolkit = re.search(r"(?i)(?:toolkit|nvidia-ctk|version)\s+v?(1\.\d+\.\d+)", text)
    back = f"the toolkit release before {toolkit.group(1)}" if toolkit else "the toolkit release that wrote specs it read"
    return _make("wheel-platform", f"{said} cannot read the CDI spec's \"{field}\" field",
                 f"the NVIDIA Container Toolkit writes its CDI spec at the newest CDI version it knows; \"{field}\" "
                 f"belongs to a spec version newer than {said}'s CDI library, which refuses the whole spec, so no "
                 "GPU device from it can be injected",
                 f"upgrade {engine} to a release whose CDI library reads that spec version ("
                 + ("a recent podman 5.x; " if engine == "podman" else "") +
                 f"the distribution's backports or the upstream packages), or go back to {back} and regenerate the spec: sudo nvidia-ctk "
                 "cdi generate --output=/etc/cdi/nvidia.yaml (remove a stale copy in /var/run/cdi too)",
                 [], lines)


@rule("wheel-platform")
def podman_older_than_the_cdi_spec(ctx: Context) -> Optional[Diagnosis]:
    """podman refusing CDI devices ("unresolvable CDI devices") from a spec the NVIDIA Container Toolkit wrote, with a
    podman older than 5: the toolkit writes each spec at the newest CDI spec version it knows, and an older podman's CDI
    library cannot read a spec newer than it, so the devices it names do not resolve."""
    newer = _cdi_field_unknown(ctx)
    if newer is not None:
        return newer
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


# an install that found nothing to install, in pip's words or a launcher's ("Couldn't install torch."), the package
# name cut off or not said
_INSTALL_FAILED = re.compile(r"(?i)could not find a version that satisfies|no matching distribution found|"
                             r"\bcould(?:n'?t| not) install\b|\bfailed to install\b|not a supported wheel")


def _thirty_two_bit_python(ctx: Context) -> Optional[Diagnosis]:
    """An install that fails under a 32-bit Python (its banner's "32 bit (Intel)", a Python3X-32 folder, a win32 wheel
    tag): torch and the other GPU packages publish 64-bit wheels only, so pip finds nothing whatever is asked for, and
    the name pip printed (often cut off in a paste) says nothing more."""
    bits = ctx.sheet.first("python_bits")
    if bits is None:
        return None
    failed = _lines_matching(ctx, _INSTALL_FAILED.pattern)
    if not failed:
        return None
    return _make("wheel-platform", "a 32-bit Python",
                 "this Python is a 32-bit build; torch and the other ML packages publish 64-bit wheels only, so "
                 "pip finds none to install (or only ancient source releases)",
                 "install a 64-bit Python (the x86-64 installer from python.org, or conda/uv) of a version the "
                 "program supports, delete the environment made with the 32-bit one (a web UI's venv folder) and "
                 "create it again with the 64-bit Python; python -c 'import struct; print(struct.calcsize(\"P\") * 8)' "
                 "must print 64", [bits, ctx.line_fact(failed[0])], failed[:2])


# packages PyPI has for Windows only (their files are all win_amd64 / win32 / win_arm64 wheels, no source release):
# package -> what it is, and its counterpart elsewhere by GPU vendor (None: any vendor)
_WINDOWS_ONLY = {
    "onnxruntime-directml": ("onnxruntime's DirectML build (DirectX 12)",
                             {"amd": "onnxruntime-rocm / onnxruntime-migraphx (AMD's ROCm wheels from repo.radeon.com; "
                                     "the program's ROCm requirements file, RVC's requirements-amd.txt)",
                              "nvidia": "onnxruntime-gpu", None: "onnxruntime (CPU), onnxruntime-gpu on NVIDIA, "
                                                                 "onnxruntime-rocm on AMD"}),
    "onnxruntime-genai-directml": ("onnxruntime-genai's DirectML build",
                                   {"nvidia": "onnxruntime-genai-cuda", None: "onnxruntime-genai (CPU) or "
                                                                              "onnxruntime-genai-cuda on NVIDIA"}),
    "triton-windows": ("the Windows port of Triton", {None: "triton (Linux wheels; torch installs its own)"}),
    "pywin32": ("the Win32 API bindings", {None: "nothing: leave it out of the requirements on Linux/macOS (a "
                                                 "marker: pywin32; sys_platform == 'win32')"}),
}
_NOT_FOUND_FOR = re.compile(r"(?i)(?:No matching distribution found for|Could not find a version that satisfies the "
                            r"requirement)\s+([A-Za-z][\w.-]*)")


def _windows_only_package(ctx: Context) -> Optional[Diagnosis]:
    """pip finding no file at all of a package that is published for Windows only, on Linux or macOS: no Python
    version would help (onnxruntime-directml's DirectML is a Windows API; RVC-Project#1109 on Pop!_OS: its
    requirements-dml.txt is the Windows path, ROCm the Linux one)."""
    said = _lines_matching(ctx, _NOT_FOUND_FOR)
    hits = [(line, _NOT_FOUND_FOR.search(line.line).group(1).lower()) for line in said]
    hits = [(line, name) for line, name in hits if name in _WINDOWS_ONLY]
    if not hits:
        return None
    text = _text(ctx)
    kinds = machine_kinds(on_windows(ctx, text), _vendor(ctx), text)
    if "windows" in kinds:
        return None   # on Windows it is the Python or the architecture: the general reading
    line, name = hits[0]
    what, counterparts = _WINDOWS_ONLY[name]
    vendor = "amd" if "amd" in kinds else "nvidia" if "nvidia" in kinds else None
    instead = counterparts.get(vendor) or counterparts[None]
    os_name = "macOS" if "macos" in kinds else "Linux"
    requirements = re.search(r"(?i)requirements[\w-]*dml[\w-]*\.txt", text)
    return _make("wheel-platform", f"{name} is published for Windows only",
                 f"{name} is {what}, and PyPI has it only as Windows wheels (win_amd64 and the like): on {os_name} "
                 "pip finds no file of it for any Python, so changing the Python does not help",
                 (f"{requirements.group(0)} is the Windows (DirectML) path: " if requirements else "") +
                 f"on {os_name} install {instead} instead of {name}; keep {name} for Windows",
                 [ctx.line_fact(line)], [line])


@rule("wheel-platform")
def wheel_platform(ctx: Context) -> Optional[Diagnosis]:
    for reading in (_windows_only_package, _thirty_two_bit_python, _tensorflow_on_windows, _tensorflow_rocm_release, _radeon_index_python, _triton_fork_on_windows,
                    _gpu_extra_off_linux, _jax_cuda_pieces, _conda_cpu_pair):
        found = reading(ctx)
        if found is not None:
            return found
    errors = ctx.of("wheel-platform")
    if not errors and not any(e.family for e in ctx.errors):
        replaced = _package_replaces_torch(ctx)
        if replaced is not None:
            return replaced
    if not errors:
        return _import_failure(ctx, [], attribute_only=True) or _install_complaint(ctx) or _missing_module_said(ctx)
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
    failed = _import_failure(ctx, errors) or _missing_module_said(ctx)
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
    # pip's line runs into its "(from versions ...)" with no space in some pastes: the name ends at the parenthesis
    name = package.group(1).split("(")[0].rstrip(";`'\".,)") if package else "the package"
    py = python[-1] if python else None
    cause = (f"the index has no {name} for this Python{' (' + py + ')' if py else ''} and platform")
    pin = re.fullmatch(r"([\w\-]+)==([\w.]+?)(?:\+(\w+))?", name)
    offered = re.search(r"\(from versions:? ([^)\n]*)\)?", text)   # retyped by hand: the colon or ")" left out
    same = [v.strip() for v in offered.group(1).split(",") if pin and v.strip().split("+")[0] == pin.group(2)] \
        if offered else []
    if re.match(r"(?i)torch\b", name) and offered and all(re.fullmatch(r"0\.1\.2(?:\.?post\d+)?", v.strip())
                                                          for v in offered.group(1).split(",")):
        # PyPI's only files for torch that fit every interpreter are the 0.1.2 placeholders (source releases): no torch
        # wheel fits this one, a 32-bit Python (torch is 64-bit only) or a Python newer than the releases
        newest = _python_for("torch", pin.group(2), not on_windows(ctx, text)) if pin else None
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
    if offered and offered.group(1).strip() == "none" and ctx.sheet.has("layout", "therock") and py and \
            re.fullmatch(r"3\.\d+", py) and int(py.split(".")[1]) < 11:
        # TheRock's rocm / torch wheels start at Python 3.11 (RELEASES.md: "We currently support Python 3.11 and
        # 3.12"): an older Python finds none at all, and an older one still would not either
        base = pin.group(1) if pin else re.split(r"[=<>!~\[;]", name)[0]
        return _make("wheel-platform", f"no TheRock {base} for Python {py}",
                     f"TheRock's ROCm and torch wheels are built for Python 3.11 and newer only (3.11, 3.12, later "
                     f"3.13), so the index offers nothing for this Python {py}",
                     f"create the environment with Python 3.12 (uv venv -p 3.12, or python3.12 -m venv .venv; conda "
                     f"create -n rocm python=3.12), activate it and rerun the same pip install with its --find-links / "
                     f"--index-url", [ctx.line_fact(errors[0])], errors)
    if offered and offered.group(1).strip() == "none":
        base = pin.group(1) if pin else name.split("==")[0].split(">")[0].split("<")[0]
        newest = _python_for(pin.group(1), pin.group(2), not on_windows(ctx, text)) if pin else None
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
        newest = _python_for(pin.group(1), pin.group(2), not on_windows(ctx, text))
        fix = (f"{pin.group(1)}=={pin.group(2)} has no wheel for this Python{' (' + py + ')' if py else ''}: install "
               f"a {pin.group(1)} release the index lists for it (from versions: {offered.group(1)[-60:]}), or use an "
               f"older Python for {pin.group(1)} {pin.group(2)}"
               + (f" (it was built for Python up to {newest}: conda create -n env python={newest})" if newest
                  else ""))
        return _make("wheel-platform", f"no {name} for this Python", cause, fix, [ctx.line_fact(errors[0])], errors)
    if pin and re.search(r"\+cu\d+|\+rocm", name) and not ctx.sheet.is_windows:
        fix = (f"{name} has no wheel for this Python{' (' + py + ')' if py else ''}: create the environment with an "
               f"older Python that release was built for (conda create -n env python=3.9, uv venv -p 3.9), then "
               f"install the pin again; a torch installed by hand instead is usually the CPU build")
        diagnosis = _make("wheel-platform", f"no {name} for this Python", cause, fix, [ctx.line_fact(errors[0])],
                          errors + ctx.of("torch-build"))
        if ctx.of("torch-build"):   # the CPU torch that followed is its symptom
            _ahead_of(diagnosis, "torch-build")
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


def _per_cuda_package(ctx: Context, package: str) -> Optional[str]:
    """The per-CUDA PyPI name of spconv / cumm for the paste's CUDA (cumm -> cumm-cu114), or None."""
    if package not in ("cumm", "spconv"):
        return None
    label = spconv_label(spconv_cuda(ctx))
    return f"{package}-cu{label}" if label else None
