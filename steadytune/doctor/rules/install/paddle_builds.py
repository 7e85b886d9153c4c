"""Which PaddlePaddle build fits the machine. Paddle publishes one build per CUDA release, told apart by a version
suffix (paddlepaddle-gpu==2.0.0.post101 is the CUDA 10.1 build) or, from 3.0, by the index it comes from
(https://www.paddlepaddle.org.cn/packages/stable/cu126/); the plain PyPI name is one CUDA release, and `paddlepaddle`
without -gpu is the CPU build. Three readings:
  - Paddle's own "Mismatched GPU Architecture: ... compiled for 60 61 70 75 80 86, but your current GPU is 120": the
    build of a CUDA release that has the GPU's architecture (a Blackwell card: the cu129 index);
  - Paddle's "CUDA driver version is insufficient" under a plain paddlepaddle-gpu==X.Y.Z, whose PyPI wheel is a newer
    CUDA than an older driver runs: that release's build for an older CUDA (its .postNNN wheel);
  - `paddlepaddle` (the CPU build) listed alone while the program is said to run on the CPU beside an NVIDIA GPU:
    paddlepaddle-gpu of the same release.

Facts: Paddle's install pages per release (PaddlePaddle/docs release/2.x, install/pip/linux-pip.md: the plain PyPI
wheel is CUDA 10.2 up to 2.4 and CUDA 11.8 in 2.5 and 2.6, the others .post102 / .post112 / .post116 / .post117 from
https://www.paddlepaddle.org.cn/whl/linux/mkl/avx/stable.html, 2.6's from .../packages/stable/cuNNN/; 2.0.0.post101
and 2.1.1.post101 are the CUDA 10.1 builds: Paddle issue 30933, PaddlePaddle/PASSL's INSTALL.md); 3.x from the per-CUDA
index (cu118, cu126, and cu129 for the 50 series from 3.2.0: the maintainer's answer in Paddle issue 76037; 3.1's
cu126 build lists 75 80 86 89 and not 120: PaddleX issue 4285).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.install.framework_cuda_builds import _PADDLE_BUILDS, _pypi_cuda
from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _first, _lines_matching, _make, _text, rule

_INDEX = "https://www.paddlepaddle.org.cn/packages/stable"
_WHL = "https://www.paddlepaddle.org.cn/whl/linux/mkl/avx/stable.html"

def _cuda(label: str) -> tuple[int, ...]:
    return tuple(map(int, label.split(".")))


def _pypi_row(release: tuple[int, int]) -> Optional[tuple[str, dict[str, str]]]:
    """Paddle 2.x release -> (the CUDA of its plain PyPI wheel, {older CUDA: the .postNNN suffix of that build}), from
    the one table of Paddle's builds per release (framework_cuda_builds: its install pages, release/2.0 ... 2.6)."""
    builds = _PADDLE_BUILDS.get(release)
    if builds is None:
        return None
    pypi = _pypi_cuda(release)
    return pypi, {c: "post" + c.replace(".", "") for c in builds if _cuda(c) < _cuda(pypi)}


# the compute capabilities a Paddle 3.x CUDA index builds for, newest CUDA first, and its label: Blackwell's sm_100 /
# sm_120 only in the CUDA 12.9 build (3.2.0 on); the rest in cu126
_ARCH_INDEX = ((100, "cu129", "3.2.0"), (0, "cu126", "3.0.0"))

_MISMATCH = re.compile(r"(?i)Mismatched GPU Architecture\b.{0,80}compiled for ([\d ,]+?)\s*,?\s*but your current GPU is "
                       r"(\d{2,3})\b")
_DRIVER_OLD = re.compile(r"(?i)CUDA driver version is insufficient|Cuda error\s*\(35\)")
_PADDLE_PIN = re.compile(r"(?i)\bpaddlepaddle-gpu\s*(?:==|\s)\s*(\d+)\.(\d+)\.(\d+)(\.post\d+)?\b")
_PADDLE_SAID = re.compile(r"(?i)\bpaddle(?:paddle)?\b|\bpaddle/|\bppgan\b|\bpaddleocr\b|\bpaddlex\b")
_DRIVER_CUDA = re.compile(r"CUDA Version:\s*(\d+)\.(\d+)")


@rule("arch-missing")
def paddle_without_the_gpus_arch(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _MISMATCH)
    if not lines:
        return None
    m = _MISMATCH.search(lines[0].line)
    built, gpu = m.group(1).split(), int(m.group(2))
    label, release = next((lab, rel) for floor, lab, rel in _ARCH_INDEX if gpu >= floor)
    return _make("arch-missing", f"this PaddlePaddle build has no code for compute capability {gpu // 10}.{gpu % 10}",
                 f"the installed paddlepaddle-gpu was compiled for compute capabilities {' '.join(built)} only; the "
                 f"GPU is {gpu // 10}.{gpu % 10} (sm_{gpu}), which only Paddle's {label} build carries",
                 f"pip uninstall -y paddlepaddle-gpu paddlepaddle; python -m pip install paddlepaddle-gpu=={release} -i "
                 f"{_INDEX}/{label}/ (Paddle {release} or newer, from the {label} index; its wheel brings its own "
                 f"CUDA runtime; the driver must run CUDA {label[2:4]}.{label[4:]}); then "
                 "python -c \"import paddle; paddle.utils.run_check()\"",
                 [ctx.line_fact(lines[0])], lines[:1])


# Blackwell said without Paddle's own mismatch line (its inference tools say "GPU not in the supported list", or
# nothing): a paddlepaddle-gpu before 3.2.0, or one not from the cu129 index, has no sm_100 / sm_120 code (round 19,
# r19c; PaddleOCR#16200: paddlepaddle-gpu 3.1.0 on an RTX 5060, the CUDA 12.9 build the maintainers' answer)
_BLACKWELL_INDEX = next((lab, rel) for floor, lab, rel in _ARCH_INDEX if floor >= 100)
_FROM_CU129 = re.compile(r"(?i)packages/(?:stable|nightly)/cu1(?:29|3\d)\b")


# the GPU refused or unused, in words or an error (not another problem on a Blackwell machine that runs Paddle)
_GPU_REFUSED = re.compile(r"(?i)不支持|不在支持|not (?:be )?supported|unsupported|not in (?:the )?support|(?:falls?|fell) back to "
                          r"(?:the )?CPU|runs? on (?:the )?CPU|no kernel image|NoKernelImage|not (?:detect|find|use|using)\w*\b.{0,20}"
                          r"GPU|\bGPU\b.{0,30}\bnot (?:detected|found|used|available)|error")


@rule("arch-missing")
def paddle_on_a_blackwell_gpu(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _PADDLE_SAID.search(text) or _MISMATCH.search(text) or _FROM_CU129.search(text):
        return None
    blackwell = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"sm_1[0-2]\d", a)]
    if not blackwell or not _GPU_REFUSED.search(text):
        return None
    pin = _PADDLE_PIN.search(text)
    label, release = _BLACKWELL_INDEX
    if pin and tuple(int(x) for x in pin.groups()[:3]) >= tuple(int(x) for x in release.split(".")):
        return None   # a release that has the build: which index it came from is the question, not this reading
    arch = blackwell[0]
    fact = next((f for f in ctx.sheet.of("arch") if f.value == arch), None)
    said = f"paddlepaddle-gpu {'.'.join(pin.groups()[:3])}" if pin else "this paddlepaddle-gpu"
    # the arch settles it whatever else the paste shows (a WSL 2 machine included: the same build is the fix there)
    return _first(_make("arch-missing", f"{said} has no code for the Blackwell GPU ({arch})",
                        f"Paddle's default builds (cu118 / cu126, and every release before {release}) are compiled up "
                        f"to sm_90; only the CUDA 12.9 build ({label}) carries {arch}",
                        f"pip uninstall -y paddlepaddle-gpu paddlepaddle; python -m pip install paddlepaddle-gpu=="
                        f"{release} -i {_INDEX}/{label}/ (Paddle {release} or newer from the {label} index; the "
                        "driver must run CUDA 12.9: nvidia-smi's CUDA Version 12.9 or higher); then python -c \"import paddle; "
                        "paddle.utils.run_check()\"", [fact] if fact else [],
                        _lines_matching(ctx, _PADDLE_SAID)[:1]))


@rule("driver")
def paddle_for_a_newer_cuda_than_the_driver(ctx: Context) -> Optional[Diagnosis]:
    errors = _lines_matching(ctx, _DRIVER_OLD)
    text = _text(ctx)
    if not errors or not _PADDLE_SAID.search(text):
        return None
    pin = _PADDLE_PIN.search(text)
    if pin is None or pin.group(4):   # no release shown, or already a .post build of a chosen CUDA
        return None
    release = (int(pin.group(1)), int(pin.group(2)))
    row = _pypi_row(release)
    if row is None:
        return None
    pypi, older = row
    version = ".".join(pin.group(i) for i in (1, 2, 3))
    driver = _DRIVER_CUDA.search(text)
    runs = (int(driver.group(1)), int(driver.group(2))) if driver else None
    fits = [(c, s) for c, s in older.items() if runs is None or _cuda(c) <= runs]
    if not fits:
        return None   # no older build of this release: the driver's own reading (update it) stands
    cuda, suffix = max(fits, key=lambda cs: _cuda(cs[0]))
    # 2.6 moved its per-CUDA builds to an index of their own; earlier releases list them on one find-links page
    where = f"-i {_INDEX}/cu{cuda.replace('.', '')}/" if release >= (2, 6) else f"-f {_WHL}"
    diagnosis = _make("driver", f"paddlepaddle-gpu {version} from PyPI is its CUDA {pypi} build",
                 f"the plain paddlepaddle-gpu=={version} on PyPI is built with CUDA {pypi}, newer than this NVIDIA "
                 f"driver runs" + (f" (it runs CUDA {runs[0]}.{runs[1]} at most)" if runs else "") +
                 f"; Paddle publishes the same release for older CUDAs as .postNNN builds",
                 f"install that release's CUDA {cuda} build: pip uninstall -y paddlepaddle-gpu; python -m pip install "
                 f"paddlepaddle-gpu=={version}.{suffix} {where} (or update the NVIDIA driver to one that runs CUDA "
                 f"{pypi}: nvidia-smi's \"CUDA Version\" is the newest it runs)",
                 [ctx.line_fact(errors[0])], errors[:1])
    # the same line the driver's general reading covers: this one names the build, so it leads that reading
    return _ahead_of(diagnosis, "driver")


# the CPU build listed by pip (paddlepaddle 3.1.0, paddlepaddle==3.1.0), and no paddlepaddle-gpu anywhere
_CPU_LISTED = re.compile(r"(?i)(?<![\w-])paddlepaddle(?:\s{0,3}(?:==|:|-)\s{0,3}|[ \t]{1,30})v?(\d+\.\d+\.\d+)")
_ON_CPU = re.compile(r"(?i)\b(?:does ?n[o']t|not|never|doesn't) (?:use|using|run on|running on)\b.{0,10}\bGPU\b|\buses? "
                     r"(?:the )?cpu\b|\bon (?:the )?cpu\b|\bonly (?:the )?cpu\b|\bcpu (?:for )?inference\b|没有?用(?:到)?GPU|"
                     r"只用CPU|用的是CPU|is_compiled_with_cuda\(\)\W{0,20}False")
_NVIDIA = re.compile(r"(?i)\bNVIDIA-SMI\b|\bGeForce\b|\bRTX ?\d|\bGTX ?\d|\b[VAHL]100\b|\bA10G?\b|\bT4\b|\bTesla\b|"
                     r"\bQuadro\b|\bCUDA Version:")


@rule("torch-build")
def paddle_cpu_build_alone(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if "paddlepaddle-gpu" in text.lower():
        return None   # both listed: twin_packages' reading; the GPU build alone: another cause
    listed = _lines_matching(ctx, _CPU_LISTED)
    symptom = _lines_matching(ctx, _ON_CPU)
    if not (listed and symptom and _NVIDIA.search(text)):
        return None
    version = _CPU_LISTED.search(listed[0].line).group(1)
    major = int(version.split(".")[0])
    driver = _DRIVER_CUDA.search(text)
    runs = (int(driver.group(1)), int(driver.group(2))) if driver else None
    if major >= 3:
        label = "cu118" if runs and runs < (12, 6) else "cu126"
        install = (f"python -m pip install paddlepaddle-gpu=={version} -i {_INDEX}/{label}/ ({label}: "
                   + ("the driver runs CUDA below 12.6" if label == "cu118" else "a driver for CUDA 12.6; cu118 for "
                      "an older one") + ")")
    else:
        install = f"python -m pip install paddlepaddle-gpu=={version} (the build for your CUDA from Paddle's install page)"
    return _make("torch-build", "paddlepaddle is Paddle's CPU build",
                 f"the environment has paddlepaddle {version}, the CPU-only build (Paddle's GPU build is a separate "
                 "package, paddlepaddle-gpu), so the program runs on the CPU whatever GPU the machine has",
                 f"pip uninstall -y paddlepaddle; {install}; check it with python -c \"import paddle; "
                 "print(paddle.device.is_compiled_with_cuda()); paddle.utils.run_check()\"",
                 [ctx.line_fact(listed[0]), ctx.line_fact(symptom[0])], listed[:1] + symptom[:1])
