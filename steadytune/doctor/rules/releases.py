"""Readings of what a package manager says about releases (install families): a distribution's own ROCm packages
shadowing AMD's repository, a package renamed between ROCm releases, a pinned dependency that was never published,
a version gate a tool offers to skip, a transformers release that treats an optional import as required. Each names
the package from the paste and the release to install."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.libraries import _lines_saying


# apt: "rocm-hip-runtime : Depends: rocminfo (= 1.0.0.50400-72~22.04) but 5.0.0-1 is to be installed"
_APT_PIN = re.compile(r"(?:^|:\s)\s*Depends: ((?:rocm|roc|hip|hsa|miopen|rccl|amd|comgr)[\w.+-]{0,80}) \(= ([^)]{1,80})\) but "
                      r"([\w.+:~-]{1,80}) is to be installed")


# AMD's package versions end in the ROCm release as five digits: 6.4.1.60401-83~24.04, 2.0.70100.70100-20~24.04
# (7.1.0); the distribution's builds do not
_AMD_RELEASE = re.compile(r"\.(\d)(\d\d)(\d\d)-\d+~")


def _amd_release(version: str) -> Optional[str]:
    m = _AMD_RELEASE.search(version)
    if m is None:
        return None
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3))
    return f"{major}.{minor}.{patch}" if patch else f"{major}.{minor}"


@rule("wheel-platform")
def distribution_rocm_packages_shadow_amds(ctx: Context) -> Optional[Diagnosis]:
    """apt picks the distribution's own build of a ROCm package (Ubuntu's universe ships rocminfo, rocm-cmake,
    rocm-device-libs in other versions) over the exact release AMD's metapackage pins: the install stops on unmet
    dependencies until the distribution's packages are removed or AMD's repository is pinned above them."""
    hits = [(line, m) for line in _lines_saying(ctx, "depends:", _APT_PIN.pattern)
            for m in [_APT_PIN.search(line.line)] if m]
    if not hits:
        return None
    clashing = list(dict.fromkeys(m.group(1) for _line, m in hits))
    wanted, offered = hits[0][1].group(2), hits[0][1].group(3)
    target = re.search(r"\bapt(?:-get)? install (?:-\w+ )*([\w.+-]+)", _text(ctx))
    names = " ".join(clashing)
    new, old = _amd_release(wanted), _amd_release(offered)
    if new and old and new != old:
        # both versions are AMD's own builds (6.4.1.60401-83~24.04): two ROCm releases' repositories, not the
        # distribution's packages
        return _make("wheel-platform", "the repositories of two ROCm releases are mixed",
                     f"apt wants {clashing[0]} {wanted} (ROCm {new}) but is left with {offered} (ROCm {old}): AMD's "
                     "repositories of two releases are both in apt's sources (an upgrade that added the new rocm.list "
                     "beside the old one, or amdgpu-install of one release and ROCm packages of another installed)",
                     f"keep one release: grep -r repo.radeon.com /etc/apt/sources.list.d/ and leave rocm.list and "
                     f"amdgpu.list on {new} only (or sudo amdgpu-install --uninstall --rocmrelease=all and install "
                     f"the amdgpu-install of {new} again); then sudo apt update && sudo apt install "
                     f"{target.group(1) if target else 'rocm'}",
                     [ctx.line_fact(hits[0][0])], [line for line, _m in hits])
    return _make("wheel-platform", "the distribution's ROCm packages shadow AMD's repository",
                 f"apt wants {clashing[0]} {wanted} from AMD's repository but picks {offered}, another origin's build "
                 "(the distribution's own ROCm packages), so the pinned dependencies cannot be met",
                 f"sudo apt remove {names} (the distribution's builds); pin AMD's repository above the distribution "
                 "(/etc/apt/preferences.d/rocm-pin-600: Package: *, Pin: release o=repo.radeon.com, Pin-Priority: 600) "
                 f"or use amdgpu-install; then sudo apt update && sudo apt install "
                 f"{target.group(1) if target else 'rocm'}",
                 [ctx.line_fact(hits[0][0])], [line for line, _m in hits])


_MIOPEN_KERNELS = re.compile(r"(?i)(?:Unable to locate package|No match for argument:?|not found:?|no package)\s+"
                             r"miopenkernels-(gfx\w{1,10}?)-(\d+)(?:kdb)?\b")


@rule("rocm-libs-missing")
def miopen_kernel_packages_renamed(ctx: Context) -> Optional[Diagnosis]:
    """MIOpen's precompiled kernel packages were miopenkernels-<gfx>-<CUs>kdb up to ROCm 5.4 and are
    miopen-hip-<gfx>-<CUs>kdb from ROCm 5.5 on: the old name is not in a newer repository."""
    lines = _lines_saying(ctx, "miopenkernels", _MIOPEN_KERNELS.pattern)
    if not lines:
        return None
    m = _MIOPEN_KERNELS.search(lines[0].line)
    new = f"miopen-hip-{m.group(1)}-{m.group(2)}kdb"
    return _make("rocm-libs-missing", "MIOpen's kernel package has a new name",
                 f"from ROCm 5.5 the precompiled MIOpen kernels for {m.group(1)} are packaged as {new}; the "
                 f"miopenkernels-{m.group(1)}-{m.group(2)} name exists only in ROCm 5.4 and older repositories",
                 f"sudo apt install {new} (dnf/zypper: the same name); apt-cache search miopen-hip-{m.group(1)} lists "
                 "the ones this repository has", [ctx.line_fact(lines[0])], lines[:1])


# uv: "there is no version of jax-rocm60-pjrt==0.5.0 and jax-rocm60-plugin==0.5.0 depends on jax-rocm60-pjrt==0.5.0"
_NO_VERSION = re.compile(r"(?i)there is no version of ([A-Za-z][\w.-]*)==([\w.+!-]+)")
_DEPENDS_ON = re.compile(r"(?i)(?<![\w.-])([A-Za-z][\w.-]*)==([\w.+!-]+) depends on ([A-Za-z][\w.-]*)==")


@rule("wheel-platform")
def pinned_dependency_never_published(ctx: Context) -> Optional[Diagnosis]:
    """A resolver that finds no release of a package another one pins exactly: that release is not on the index (not
    published yet, or not for this Python and platform), so the parent cannot install at that version."""
    lines = _lines_saying(ctx, "no version of", _NO_VERSION.pattern)
    if not lines or re.search(r"(?i)different Python", _text(ctx)):
        return None   # uv said the release exists for other Pythons: install/wheels.py's Python reading
    text = " ".join(_text(ctx).split())   # a resolver wraps its sentence over several lines
    missing, version = _NO_VERSION.search(lines[0].line).groups()
    parent = next((m for m in _DEPENDS_ON.finditer(text) if m.group(3).lower() == missing.lower()), None)
    by = f"{parent.group(1)} {parent.group(2)}" if parent else "the package being installed"
    return _make("wheel-platform", f"{missing} {version} is not on the index",
                 f"{by} pins {missing}=={version}, and the index has no {missing} {version} (not published, or no "
                 "file for this Python and platform)",
                 f"pip index versions {missing} lists the releases there are; install the "
                 f"{parent.group(1) if parent else 'parent package'} release whose {missing} pin is published"
                 + (f" (pip install \"{parent.group(1)}<{parent.group(2)}\")" if parent else "")
                 + f", or wait for {missing} {version} to be uploaded (ask its maintainers)",
                 [ctx.line_fact(lines[0])], lines[:1])


_LF_GATE = re.compile(r"(?i)(?<![a-z])(?:llama-?factory|llamafactory-cli)(?![a-z])")   # beside Chinese text too
_VERSION_CLASH = re.compile(r"(?i)(?<![a-z])(transformers|peft|accelerate|datasets|trl|tokenizers)(?![a-z])\s*(?:版本|version)?\s*"
                            r"(?:is required|required|要求|需要|requires?|>=|<=|==|<|>|\d)")


@rule("wheel-platform")
def llamafactory_version_gate(ctx: Context) -> Optional[Diagnosis]:
    """LLaMA-Factory checks the releases of transformers, peft, accelerate, datasets and trl at start and stops outside
    its tested range; a model that needs a newer one than the range allows is run by skipping the check."""
    text = _text(ctx)
    if not _LF_GATE.search(text):
        return None
    lines = [line for line in _lines_matching(ctx, _VERSION_CLASH.pattern)
             if re.search(r"(?i)is required|要求|需要|requires?|conflict|冲突|协调|DISABLE_VERSION_CHECK|but found|"
                          r"版本", line.line)]
    if not lines:
        return None
    package = _VERSION_CLASH.search(lines[0].line).group(1).lower()
    return _make("wheel-platform", f"LLaMA-Factory's {package} range and the model's requirement clash",
                 f"LLaMA-Factory pins a tested {package} range and refuses to start outside it, while the model needs "
                 "a release outside that range",
                 f"install the {package} release the model needs (pip install -U \"{package}>=<the model's minimum>\") "
                 "and skip LLaMA-Factory's check: export DISABLE_VERSION_CHECK=1 (or upgrade LLaMA-Factory to a release "
                 f"whose range includes it)", [ctx.line_fact(lines[0])], lines[:1])


_REMOTE_REQUIRES = re.compile(r"This modeling file requires the following packages that were not found in your "
                              r"environment: ([\w\-, ]+)")


@rule("wheel-platform")
def remote_code_optional_import(ctx: Context) -> Optional[Diagnosis]:
    """transformers checks the imports of a model's remote code (trust_remote_code) before running it; releases before
    4.31.0 counted an import guarded by try/except (flash_attn in Qwen's, for instance) as required."""
    lines = _lines_saying(ctx, "this modeling file requires", _REMOTE_REQUIRES.pattern)
    if not lines:
        return None
    packages = [p.strip() for p in _REMOTE_REQUIRES.search(lines[0].line).group(1).split(",") if p.strip()]
    listed = ", ".join(packages)
    return _make("wheel-platform", f"the model's remote code asks for {listed}",
                 f"transformers found imports of {listed} in the model's own code and stops before loading it; before "
                 "transformers 4.31.0 that check also counted imports the code guards as optional",
                 f"pip install -U \"transformers>=4.31.0\" (the check then skips optional imports, and the model loads "
                 f"without {listed} where its code allows), or install them: pip install {' '.join(packages)}",
                 [ctx.line_fact(lines[0])], lines[:1])


# Triton's own assertion when it finds no libcuda.so: "AssertionError: libcuda.so cannot found!"
_TRITON_NO_LIBCUDA = re.compile(r"libcuda\.so cannot (?:be )?found")
# the user's own check that the ldconfig cache lacks it: "`ldconfig -p | grep libcuda.so` => empty"
_LDCONFIG_EMPTY = re.compile(r"(?i)ldconfig -p\W{0,3}\|\W{0,3}grep\W{0,3}libcuda\S*.{0,12}?(?:=>|->|:|returns|gives|shows|"
                             r"prints)\W{0,3}(?:empty|nothing|no output|no result)")
# a Triton 2.1 release said with a failure: "triton version 2.1.0", "pip install triton==2.1.0 ... fails"
_TRITON_21 = re.compile(r"(?i)\btri?ti?on\W{0,12}(?:version\s{0,3})?(?:==|-|\s)\s{0,3}v?(2\.1(?:\.\d+)?)\b")
# hosted notebooks whose NVIDIA driver library is on LD_LIBRARY_PATH only, not in the ldconfig cache
_NOTEBOOK_HOST = re.compile(r"(?i)\bcol+ab\b|\bkaggle\b|/usr/lib64-nvidia")


@rule("rocm-libs-missing")
def triton_finds_libcuda_through_ldconfig_only(ctx: Context) -> Optional[Diagnosis]:
    """Triton up to 2.1 locates the driver's libcuda.so only through the ldconfig cache (ldconfig -p); where the
    driver library is reachable through LD_LIBRARY_PATH alone (Colab's /usr/lib64-nvidia, some containers) it is not
    found. Triton 2.2 (PR 2883, the one torch 2.2 pins) also searches LD_LIBRARY_PATH; later ones take
    TRITON_LIBCUDA_PATH (PR 2582)."""
    text = _text(ctx)
    said = _lines_matching(ctx, _TRITON_NO_LIBCUDA.pattern) if "cannot" in text else []
    said = said or (_lines_matching(ctx, _LDCONFIG_EMPTY) if "ldconfig" in text else [])
    release = _TRITON_21.search(text) if "ti" in text.lower() else None
    hosted = _NOTEBOOK_HOST.search(text)
    if not said and not (release and hosted and re.search(r"(?i)fail|does(?: not|n'?t) work|error|broken", text)):
        return None
    lines = said or _lines_matching(ctx, _TRITON_21.pattern)[:1]
    where = "/usr/lib64-nvidia" if hosted else "<the folder with libcuda.so.1: find / -name 'libcuda.so*'>"
    if not hosted and any(_LDCONFIG_EMPTY.search(line.line) for line in lines):
        # the user's own check shows the cache lacks the driver library: refreshing it is the first step, and the
        # check settles the reading (a torch fact beside it is a symptom)
        return _first(_make(
            "rocm-libs-missing", "the ldconfig cache does not list the driver's libcuda.so",
            "Triton finds libcuda.so through the loader cache (ldconfig -p), and the paste shows the cache without it "
            "(a driver installed or updated without the cache being rebuilt, or its folder not registered)",
            f"rebuild the cache: sudo ldconfig, then check that ldconfig -p | grep libcuda lists it; if it still does "
            f"not, register the driver library's folder: echo {where} | sudo tee /etc/ld.so.conf.d/libcuda.conf && "
            "sudo ldconfig (newer Triton also takes TRITON_LIBCUDA_PATH=<that folder>)",
            [ctx.line_fact(lines[0])], lines))
    return _make("rocm-libs-missing", "Triton does not find the driver's libcuda",
                 f"Triton{' ' + release.group(1) if release else ''} looks for libcuda.so only in the ldconfig cache, "
                 f"and this machine{' (a hosted notebook)' if hosted else ''} has the driver library only on "
                 "LD_LIBRARY_PATH",
                 f"register the driver library's folder with the loader cache: echo {where} > "
                 f"/etc/ld.so.conf.d/libcuda.conf && ldconfig (in a notebook cell: !...), or upgrade to triton 2.2 or "
                 "newer (pip install -U torch triton: it also searches LD_LIBRARY_PATH; newer ones take "
                 "TRITON_LIBCUDA_PATH)", [ctx.line_fact(lines[0])] if lines else [], lines)


# pip's list of a package's releases: "Available versions: 2022.5.19, 2022.4.2, ..., 8.9.2.26, 8.8.1.3"
_AVAILABLE = re.compile(r"(?i)available versions:\s*(.{0,600})")
_DATE_VERSION = re.compile(r"\b20[12]\d\.\d{1,2}\.\d{1,2}\b")
_REAL_VERSION = re.compile(r"(?<![\d.])(\d{1,2}(?:\.\d+){2,3})(?![\d.])")
# NVIDIA's pip packages of CUDA libraries (nvidia-cudnn-cu11, nvidia-cublas-cu12)
_NVIDIA_WHEEL = re.compile(r"(?i)\bnvidia-([a-z]+)-cu(1\d)\b")
_CUDA_LIBRARY = re.compile(r"(?i)\blib(cudnn|cublas|cufft|cusparse|cusolver|nccl)\w*\.so")


@rule("wheel-platform")
def date_numbered_releases_outrank_real_ones(ctx: Context) -> Optional[Diagnosis]:
    """A package whose release list mixes old date-numbered uploads (2022.5.19) with the real library releases
    (8.9.2.26): a `>=8.x` requirement is met by the date numbers, which sort higher, so pip takes one that is not the
    library (nvidia-cudnn-cu11's 2021-2022 uploads). Pin the real release."""
    text = _text(ctx)
    if "vailable versions" not in text:
        return None
    lines = _lines_matching(ctx, _AVAILABLE)
    listed = _AVAILABLE.search(lines[0].line).group(1) if lines else ""
    dates = _DATE_VERSION.findall(listed)
    real = [v for v in _REAL_VERSION.findall(_DATE_VERSION.sub("", listed))]
    if not dates or not real:
        return None
    wheel = _NVIDIA_WHEEL.search(text)
    library = _CUDA_LIBRARY.search(text)
    cuda = re.search(r"(?i)\bcuda ?(1\d)(?:\.\d)?\b|\+cuda(1\d)", text)
    if wheel:
        package = wheel.group(0).lower()
    elif library and cuda:
        package = f"nvidia-{library.group(1).lower()}-cu{cuda.group(1) or cuda.group(2)}"
    else:
        package = "the package"
    newest = max(real, key=lambda v: tuple(int(x) for x in v.split(".")))
    return _first(_make(
        "wheel-platform", f"pip chose a date-numbered release of {package} over the real ones",
        f"{package}'s release list holds old date-numbered uploads ({', '.join(dates[:2])}) beside the real library "
        f"releases ({newest} ...); a requirement like >=8.x is met by the date numbers, which sort higher, so pip "
        "installed one that does not carry the library the program loads",
        f"pin a real release: pip install -U \"{package}=={newest}\" (or the one the program's requirement names), "
        f"then pip show {package} should print it", [ctx.line_fact(lines[0])], lines))
