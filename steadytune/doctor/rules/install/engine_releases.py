"""Serving engines' and kernel packages' builds and release pins: a prebuilt wheel made for another torch or CUDA (the
+cu121.torch2.4.0 in its file name), a dependency newer than the release the engine pins, an engine's CUDA 12 build
beside a CUDA 11 torch, an engine with no native Windows build, and a Linux library loaded on Windows."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.packages import distribution_of
from steadytune.doctor.tool_fixes import tool_fix
from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _release_numbers, \
    on_windows, rule, _text
from steadytune.doctor.rules.install.shared import _cuda_label, _table_fix, cuda_of_label


# a problem or a request said about the wheel ("need", "add whl support", "Import Failed", "not installed")
_TROUBLE = re.compile(r"(?i)\b(?:need|request|support|add|missing|fail(?:s|ed|ure)?|errors?|not|no|cannot|can't|"
                      r"unable|doesn't|won't|404)\b")
# a wheel asked for, or one that fails ("need", "please add", "Import Failed"); not a bare "no" ("no issues")
_ASKED = re.compile(r"(?i)\b(?:need|request(?:ed|ing)?|please|add|missing|fail(?:s|ed|ure)?|errors?|cannot|can't|"
                    r"unable|doesn't|won't|404|there is no|no (?:\w+ )?wheels?)\b")
# a wheel whose local version names the CUDA (or ROCm) build and maybe the torch it was built against:
# exllamav2-0.2.1+cu121.torch2.4.0-cp310-..., auto_gptq-0.3.2+cu117-cp38-..., flash_attn-2.6.3+cu123torch2.4cxx11abi...
_BUILD_WHEEL = re.compile(r"\b([A-Za-z][\w]{1,40}?)-(\d[\w.]{0,20}?)\+(cu\d{2,3}|rocm[\d.]{1,8}?)\.?(?:torch(\d+\.\d+"
                          r"(?:\.\d+)?))?[\w.]{0,20}-cp\d+-\w+-\w+\.whl")
_TORCH_SAID = re.compile(r"(?i)\b(?:py)?torch(?: version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+\.\d+)(\+\w+)?")


@rule("wheel-platform")
def prebuilt_wheel_for_another_torch(ctx: Context) -> Optional[Diagnosis]:
    """Packages with compiled kernels (exllamav2, AutoGPTQ, flash-attn) publish one wheel per torch and CUDA build,
    named in the wheel's local version: a wheel for another torch or CUDA does not load its extension, and a torch
    with no wheel of its own needs a release that has one (or a source build against it)."""
    if ".whl" not in _text(ctx):
        return None
    lines = [line for line in _lines_matching(ctx, _BUILD_WHEEL.pattern)]
    if not lines:
        return None
    m = _BUILD_WHEEL.search(lines[0].line)
    package, build, wheel_torch = distribution_of(m.group(1)), m.group(3), m.group(4)
    said = _TORCH_SAID.search(_text(ctx))
    have = said.group(1) + (said.group(2) or "") if said else None
    # the torch's own +cuXYZ where the paste shows it, else the CUDA the paste names beside torch
    label = said.group(2)[1:] if said and (said.group(2) or "").startswith("+cu") else _cuda_label(ctx)
    other_cuda = build.startswith("cu") and label is not None and label != build
    other_torch = wheel_torch is not None and have is not None and \
        _release_numbers(have)[:2] != _release_numbers(wheel_torch)[:2]
    if not (wheel_torch or other_cuda) or not _TROUBLE.search(_text(ctx)):
        return None
    wheel = m.group(0)
    if not (other_cuda or other_torch) and not _ASKED.search(_text(ctx)):
        return None   # the wheel for the torch there, and nothing asked or failing about it
    if other_cuda or other_torch:
        here = f"torch {have}" if have else "the installed torch"
        return _make("wheel-platform", f"the {package} wheel is for another torch",
                     f"{wheel} is built for torch's {build} build{' of torch ' + wheel_torch if wheel_torch else ''}; "
                     f"this environment has {here}{' (CUDA ' + cuda_of_label(label) + ')' if label else ''}, "
                     "so its compiled extension does not load",
                     f"install the {package} build made for {here}: pip install -U {package} (its newest release picks "
                     f"the wheel for this torch, or builds it against it), or the wheel whose tag names this torch's "
                     f"CUDA and release; or move torch to the {build} build the wheel names", [ctx.line_fact(lines[0])],
                     lines[:1])
    return _make("wheel-platform", f"no {package} wheel for torch {wheel_torch}",
                 f"{package}'s prebuilt wheels are each built for one torch and CUDA (+{build}.torch{wheel_torch} in "
                 f"the file name); an extension built for another torch does not import, and this torch "
                 f"{wheel_torch} needs a wheel of its own",
                 f"install the newest {package} release whose wheels include torch {wheel_torch} (its release page "
                 f"lists one wheel per torch and CUDA: pip install <that wheel's URL>), or build {package} from source "
                 f"against the installed torch (pip install . --no-build-isolation in its checkout); or install the "
                 "torch the newest wheel names", [ctx.line_fact(lines[0])], lines[:1])


# Kernel libraries whose release broke the API the engines of their time call, and the release those engines pin:
# (library, the release that changed the API, the release pinned, the engines that pin it, source)
_PINNED = (
    ("flashinfer", "0.2.0", "0.1.6", "sglang 0.3.x to 0.4.1",
     "sglang's install script (scripts/ci_install_dependency.sh) of those releases: pip install flashinfer==0.1.6 "
     "--find-links https://flashinfer.ai/whl/cu124/torch2.4/flashinfer/; flashinfer 0.2.0 release notes (API changes)"),
)


@rule("wheel-platform")
def dependency_newer_than_the_engine_pins(ctx: Context) -> Optional[Diagnosis]:
    """An engine built against one release of a kernel library, run with a release that changed its API: the release
    the engine pins is the fix (or an engine release made for the newer library)."""
    text = _text(ctx)
    for library, breaking, pinned, engines, _source in _PINNED:
        if library not in text.lower():
            continue
        have = re.search(rf"(?i)\b{library}[-_ =v]{{1,3}}(\d+\.\d+\.\d+)", text)
        if have is None or _release_numbers(have.group(1)) < _release_numbers(breaking) or not _TROUBLE.search(text):
            continue
        engine = next((e for e in ("sglang", "vllm") if re.search(rf"(?i)\b{e}\b", text)), None) or ctx.tool()
        who = engine if engine and engine in engines else "the engine"
        lines = _lines_matching(ctx, rf"(?i)\b{library}[-_ =v]{{1,3}}\d")
        return _make("wheel-platform", f"{library} {have.group(1)} is newer than {who} is built for",
                     f"{library} {breaking} changed the API that engines of the time call ({engines} pin {library} "
                     f"{pinned}); {who} here runs with {library} {have.group(1)}",
                     f"pip uninstall -y {library}; pip install {library}=={pinned} (the release {engines} pin; pip "
                     f"show {engine or '<the engine>'} shows yours, and its requirements name the {library} it wants), "
                     f"from {library}'s wheel index for your torch and CUDA; or upgrade {who} to a release made for "
                     f"{library} {have.group(1)}", [ctx.line_fact(lines[0])], lines[:1], confirmed=engine is not None)
    return None


# an engine's compiled module that needs the CUDA runtime of another major than the torch beside it
_CUDART = re.compile(r"libcudart\.so\.(\d+): cannot open")
# engines whose PyPI wheels are CUDA 12 builds, with their other CUDA's build (docs.vllm.ai installation: binaries
# compiled with CUDA 12 by default, CUDA 11.8 wheels on the GitHub releases)
_OTHER_CUDA_BUILD = {"vllm": "vLLM publishes its CUDA 11.8 wheels (+cu118) on its GitHub releases page"}


@rule("wheel-platform")
def engine_built_for_another_cuda(ctx: Context) -> Optional[Diagnosis]:
    """A torch-based engine's wheel built for CUDA N (its _C loads libcudart.so.N through torch) beside a torch that is
    a CUDA M build: the torch is sound, the engine's wheel is for another CUDA. (No torch of a CUDA build shown, or a
    CPU one: torch-build's reading.)"""
    if "libcudart" not in _text(ctx):
        return None
    lines = _lines_matching(ctx, _CUDART.pattern)
    torch = re.search(r"(?i)\btorch\S{0,20}?[\s:=]\s*v?(\d+\.\d+\.\d+)\+cu(\d+?)(\d)\b|\b(?:py)?torch version: (\d+\.\d+\.\d+)"
                      r"\+cu(\d+?)(\d)\b", _text(ctx))
    if not lines or torch is None:
        return None
    version, major, minor = (torch.group(1), torch.group(2), torch.group(3)) if torch.group(1) else (
        torch.group(4), torch.group(5), torch.group(6))
    need = _CUDART.search(lines[0].line).group(1)
    if need == major:
        return None
    tool = ctx.tool(lines[:1])
    package = tool if tool and tool != "torch" else "the package"
    other = _OTHER_CUDA_BUILD.get(package)
    diagnosis = _make("wheel-platform", f"{package} is a CUDA {need} build beside a CUDA {major} torch",
                      f"{package}'s wheel is built for CUDA {need} (its compiled module needs libcudart.so.{need}); "
                      f"torch here is {version}+cu{major}{minor}, a CUDA {major}.{minor} build, which brings no CUDA "
                      f"{need} runtime",
                      f"move the environment to CUDA {need}: a torch CUDA {need} build and a driver for it (pip install "
                      f"{package if package != 'the package' else '<it>'} in a fresh environment pulls the torch it "
                      f"pins); or install {package}'s CUDA {major}.{minor} build"
                      + (f" ({other})" if other else " (its release page lists builds per CUDA)"),
                      [ctx.line_fact(lines[0])], lines[:1])
    # the torch-build reading of the same line (torch not the build the engine needs) follows from this one
    return _ahead_of(diagnosis, "torch-build")


# Windows PowerShell's own output (Invoke-WebRequest's fields, its prompt): a native Windows shell
_POWERSHELL = re.compile(r"System\.__ComObject|^PS [A-Z]:\\|\bParsedHtml\s*:|(?i:\bpowershell\b)", re.M)
_ENGINES = ("vllm", "sglang")


@rule("wheel-platform")
def engine_on_native_windows(ctx: Context) -> Optional[Diagnosis]:
    """A serving engine with no native Windows build (vLLM), installed in a Windows shell: pip gives no working CUDA
    build there, whatever the toolkit; its table row says where it runs (WSL 2, Linux, its image)."""
    text = _text(ctx)
    if not (on_windows(ctx, text) or _POWERSHELL.search(text)):
        return None
    # the pip command, or the install said in words ("Facing issue while installing vllm in local machine")
    installs = _lines_matching(ctx, r"(?i)(?:\b(?:pip3?|uv pip|python3? -m pip) install\s+(?:-\S+\s+)*[\"']?|"
                               r"\binstall(?:ing|ation of)\s+(?:the\s+)?)(?:" + "|".join(_ENGINES) + r")\b")
    if not installs:
        # the engine and Windows named together ("trying out vllm with windows", "does sglang support Windows?"):
        # the user runs it on Windows itself, not in WSL (which the paste would name)
        installs = [] if re.search(r"\bWSL|Windows Subsystem for Linux", text) else _lines_matching(
            ctx, r"(?i)\b(?:" + "|".join(_ENGINES) + r")\b.{0,40}\bwin(?:dows)?\b|\bwin(?:dows)?\b.{0,40}\b(?:"
            + "|".join(_ENGINES) + r")\b")
    if not installs:
        return None
    engine = next(e for e in _ENGINES if re.search(rf"(?i)\b{e}\b", installs[0].line))
    fix = tool_fix(engine, "wheel-platform", frozenset({"windows"}), {})
    if fix is None or not re.search(r"(?i)\bcuda\b|\berror\b|\bfail|\bissue\b|\bproblem\b|can'?t|cannot", text):
        return None
    return _make("wheel-platform", f"{engine} has no native Windows build",
                 f"this is a native Windows install (a Windows shell), and {engine} is built for Linux only, so pip "
                 "gives no working CUDA build of it here", fix, [ctx.line_fact(installs[0])], installs[:1],
                 confirmed=False)


# Windows' loader refusing a file that is not a Windows binary: a Linux .so shipped in a package's Windows install
_NOT_FOR_WINDOWS = re.compile(r"(?i)([\w.\-]+\.so)\b.{0,40}is either not designed to run on Windows")
_PACKAGE_PATH = re.compile(r"(?i)site-packages[/\\]+([A-Za-z_]\w*)[/\\]")


@rule("wheel-platform")
def linux_library_on_windows(ctx: Context) -> Optional[Diagnosis]:
    """A package whose install on Windows carries only its Linux libraries (.so: bitsandbytes before 0.43): Windows'
    loader says the file "is either not designed to run on Windows". The package's Windows build is the fix."""
    if "not designed to run on windows" not in _text(ctx).lower():
        return None
    lines = _lines_matching(ctx, _NOT_FOR_WINDOWS.pattern)
    if not lines:
        return None
    library = _NOT_FOR_WINDOWS.search(lines[0].line).group(1)
    where = _PACKAGE_PATH.search(lines[0].line)
    package = distribution_of(where.group(1)) if where else ctx.tool(lines[:1]) or "the package"
    own = _table_fix(ctx, package, "wheel-platform", frozenset({"windows"}), package=package)
    return _make("wheel-platform", f"{package} carries a Linux library on Windows",
                 f"{library} is a Linux shared library; the {package} installed here has no Windows build of it, so "
                 "Windows cannot load it",
                 own or f"install {package}'s Windows build (a release that publishes win_amd64 wheels), or run under "
                 "WSL 2", [ctx.line_fact(lines[0])], lines[:1])


# the CUDA build said to be what a ROCm install ended with ("falls back to the CUDA wheel", "+cu121 installed")
_GOT_CUDA = re.compile(r"(?i)fall(?:s|ing)? back to (?:the |PyPI's |a )?CUDA|\b(?:got|gets|installs|installed|pulls|pulled|"
                       r"downloads|downloaded) (?:the |a )?CUDA (?:abi3 )?(?:wheel|build)|\bno ROCm\b.{0,30}\bwheels?\b")


@rule("wheel-platform")
def engine_rocm_install_gets_the_cuda_build(ctx: Context) -> Optional[Diagnosis]:
    """A serving engine installed with pip on a ROCm machine that ends with its CUDA build: PyPI's wheel is the CUDA
    one, and the ROCm builds come from the engine's own image or index for the Python they are made for (the table's
    AMD row)."""
    text = _text(ctx)
    if "rocm" not in text.lower():
        return None
    engine = next((e for e in _ENGINES if re.search(rf"(?i)\b{e}\b", text)), None)
    lines = _lines_matching(ctx, _GOT_CUDA.pattern)
    if engine is None or not lines:
        return None
    fix = tool_fix(engine, "wheel-platform", frozenset({"linux", "amd"}), {})
    if fix is None:
        return None
    return _make("wheel-platform", f"{engine}'s ROCm install gets the CUDA build",
                 f"PyPI's {engine} wheel is the CUDA build; its ROCm builds are not on PyPI, so a plain install on a "
                 "ROCm machine (or a Python its ROCm wheels are not made for) ends with the CUDA one", fix,
                 [ctx.line_fact(lines[0])], lines[:1])


# a wheel that cannot be found for the torch build in use ("can't find the whl of torch2.6.0+cu126", "no wheel for
# torch 2.5.1+cu124", "how to compile X locally"), said about a package the tool table knows
_TORCH_BUILD = re.compile(r"(?i)\btorch\W{0,3}v?(\d+\.\d+(?:\.\d+)?)\+(cu\d{3}|rocm\d+(?:\.\d+)*)\b")
_NO_WHEEL = re.compile(r"(?i)\b(?:can.?t|cannot|could ?n.t|unable to|fail\w* to|did ?n.t|does ?n.t) (?:find|get|locate|"
                       r"download)\b.{0,30}\b(?:whl|wheels?|binar(?:y|ies)|builds?)\b|\bno (?:\w+ )?(?:whl|wheels?) "
                       r"(?:for|of|matching)\b|\bhow (?:to|do I|can I) (?:compile|build)\b.{0,40}\b(?:locally|from "
                       r"source|myself|on windows)\b")
# packages whose wheels are built per torch release and CUDA (or ROCm) build, on the pytorch.org indexes or their own
# release pages, that a user looks for by the torch they have
_PER_TORCH_PACKAGES = ("xformers", "flash-attn", "torchvision", "torchaudio", "torch-scatter", "mamba-ssm",
                       "causal-conv1d", "exllamav2", "sageattention", "apex", "mmcv")


@rule("wheel-platform")
def wheel_sought_for_this_torch(ctx: Context) -> Optional[Diagnosis]:
    """A package's wheel not found for the torch build in use: the package's own channel for that build (its table
    row, with the paste's CUDA label) before a source build."""
    said = _lines_matching(ctx, _NO_WHEEL)
    build = _TORCH_BUILD.search(_text(ctx))
    if not said or build is None:
        return None
    text = _text(ctx).lower()
    package = next((p for p in _PER_TORCH_PACKAGES if re.search(r"\b" + re.escape(p).replace(r"\-", "[-_]") + r"\b",
                                                                   text)), None)
    if package is None:
        return None
    label = build.group(2).lower()
    fix = _table_fix(ctx, package, "wheel-platform", cuda_label=label if label.startswith("cu") else None)
    if fix is None:
        return None
    return _make("wheel-platform", f"no {package} wheel found for torch {build.group(1)}+{label}",
                 f"{package}'s wheels are built for one torch release and one CUDA / ROCm build each and published on "
                 f"its own channel (for most, the pytorch.org index of that build, not PyPI's default); the one for "
                 f"torch {build.group(1)}+{label} is looked for in the wrong place, or its release was late for this "
                 "OS", fix + f" (building {package} from source is the last resort)", [ctx.line_fact(said[0])],
                 said[:1], confirmed=False)
