"""CTranslate2's Python wheels by release (faster-whisper and WhisperX run on them): the CUDA major each release is built
for, against the CUDA the NVIDIA driver runs, and the releases whose wheels broke on one platform and the release that
fixed them. (The cuDNN major each release links is rules/libraries.py's reading.)
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, on_windows, rule


# The CUDA major of CTranslate2's PyPI wheels by release: 3.x are CUDA 11 builds, 4.0.0 moved to CUDA 12 (CHANGELOG
# v4.0.0: "This major version introduces the breaking change while updating to cuda 12"); 3.24.0 is the last 3.x
# release (CHANGELOG), the one faster-whisper's README names for CUDA 11 and cuDNN 8.
_FIRST_CUDA12 = (4, 0, 0)
_LAST_CUDA11 = "3.24.0"
# the newest CUDA an NVIDIA driver branch runs: 525 and newer run CUDA 12 (NVIDIA's CUDA Toolkit release notes,
# table 3); an older driver stops at CUDA 11.x
_FIRST_CUDA12_DRIVER = 525

_CT2_NAMED = re.compile(r"(?i)ctranslate2|faster[-_ ]whisper|whisperx|whisper-?ctranslate2|CUDA failed with error")
_DRIVER_TOO_OLD = re.compile(r"(?i)CUDA driver version is insufficient for (?:the )?CUDA runtime version|"
                             r"driver (?:on your system )?is too old")
_CT2_VERSION = re.compile(r"(?i)\bctranslate2\s{0,3}(?:==|version:?|v)?\s{0,3}(\d+)\.(\d+)\.(\d+)")
_DRIVER_CUDA = re.compile(r"(?i)CUDA Version:\s{0,3}(\d+)\.(\d+)|nvidia/cuda:(\d+)\.(\d+)")


def _release(groups: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(int(x) for x in groups)


def _driver_cuda_major(ctx: Context, text: str) -> Optional[int]:
    """The CUDA major the machine's driver runs: nvidia-smi's "CUDA Version" (or a CUDA image's tag), else the driver
    branch (below 525: CUDA 11)."""
    said = _DRIVER_CUDA.search(text)
    if said:
        return int(said.group(1) or said.group(3))
    for driver in ctx.sheet.of("driver"):
        branch = re.match(r"(\d{3})\.", driver.value)
        if branch:
            return 12 if int(branch.group(1)) >= _FIRST_CUDA12_DRIVER else 11
    return None


@rule("wheel-platform")
def ctranslate2_cuda12_on_a_cuda11_driver(ctx: Context) -> Optional[Diagnosis]:
    """CTranslate2 4.x (pulled by faster-whisper 1.0 and newer) is a CUDA 12 build: on a driver that runs CUDA 11 at
    most its runtime refuses to start ("CUDA driver version is insufficient"). The driver is sound for what it is; the
    wheel's CUDA is the mismatch, and the last CUDA 11 release of CTranslate2 runs on it."""
    text = _text(ctx)
    if not _CT2_NAMED.search(text):
        return None
    lines = _lines_matching(ctx, _DRIVER_TOO_OLD)
    if not lines:
        return None
    installed = _CT2_VERSION.search(text)
    if installed and _release(installed.groups()) < _FIRST_CUDA12:
        return None   # a CUDA 11 build already: the driver itself is the problem
    if _driver_cuda_major(ctx, text) != 11:
        return None
    driver = ctx.sheet.first("driver")
    here = f"driver {driver.value}" if driver else "this driver"
    diagnosis = _make("wheel-platform", "ctranslate2 4.x is a CUDA 12 build on a CUDA 11 driver",
                      f"ctranslate2 4.0.0 and newer (faster-whisper 1.0 and newer pull them) are built for CUDA 12; "
                      f"{here} runs CUDA 11 at most, so the CUDA 12 runtime refuses to start",
                      f"pip install --force-reinstall ctranslate2=={_LAST_CUDA11} (the last CUDA 11 build of "
                      "ctranslate2; keep faster-whisper's other packages as they are), or update the NVIDIA driver to "
                      f"{_FIRST_CUDA12_DRIVER} or newer to run the CUDA 12 build", [ctx.line_fact(lines[0])],
                      lines[:1])
    # the driver reading of the same line (update the driver) is the other way out; the wheel's CUDA is the cause
    return _ahead_of(diagnosis, "driver")


# Releases whose wheels broke on one platform, and the release that fixed them:
# (package, broken release, fixed release, the platform, what the paste shows, source)
_BROKEN_RELEASES = (
    ("ctranslate2", "4.7.0", "4.7.1", "windows", re.compile(r"(?i)_rocm_sdk_core"),
     "CTranslate2 CHANGELOG v4.7.1 'Fix Windows build (#2007)', the day after v4.7.0 introduced ROCm HIP support"),
)


@rule("wheel-platform")
def release_broken_on_a_platform(ctx: Context) -> Optional[Diagnosis]:
    """A package release whose wheel for one platform fails at import, fixed by the next release: the table row names
    both; the paste shows the broken release (or its sign) on that platform."""
    text = _text(ctx)
    for package, broken, fixed, platform, sign, _source in _BROKEN_RELEASES:
        if package not in text.lower() or broken not in text:
            continue
        if platform == "windows" and not on_windows(ctx, text):
            continue
        lines = _lines_matching(ctx, sign)
        if not lines:
            continue
        return _make("wheel-platform", f"{package} {broken}'s {platform} wheel is broken",
                     f"{package} {broken}'s {platform.capitalize()} wheel fails at import ({lines[0].line.strip()[:80]}); "
                     f"{package} {fixed} fixed the build",
                     f"pip install -U \"{package}>={fixed}\" (or pin {package}=={fixed}); {broken} is the broken "
                     "release", [ctx.line_fact(lines[0])], lines[:1])
    return None
