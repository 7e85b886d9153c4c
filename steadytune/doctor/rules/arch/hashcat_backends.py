"""hashcat's CUDA backend on a GPU newer than the CUDA it compiles with (arch-missing): hashcat compiles its kernels at
run time with the NVRTC of the CUDA toolkit it loads (the host's, or the one in its container image); an NVRTC older
than the GPU's arch refuses the -arch option ("nvrtc: error: invalid value for --gpu-architecture (-arch)",
NVRTC_ERROR_INVALID_OPTION) and the kernel build fails. The same GPU is also listed through the OpenCL backend, which
the NVIDIA driver compiles for itself: selecting that device (or ignoring the CUDA backend) runs now, and a CUDA
toolkit whose NVRTC knows the arch is the lasting fix.

Sources: hashcat's --help (-d / --backend-devices, --backend-ignore-cuda: "Do not try to open CUDA interface on
startup", -I / --backend-info); hashcat's device list (CUDA devices first, the same GPUs again through OpenCL, skipped as
"alias of device #1"); dizcza/docker-hashcat#20 (RTX 5080 under the image's older CUDA: the maintainer's hashcat -b -d 2
ran); cuda_builds._NVCC_FIRST for the first CUDA of each arch."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.cuda_builds import _NVCC_FIRST
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_HASHCAT = re.compile(r"(?i)\bhashcat\b|OpenCL/\w+\.cl build failed")
_NVRTC_ARCH = re.compile(r"(?i)invalid value for --gpu-architecture|NVRTC_ERROR_INVALID_OPTION")
_GPU_COUNT = re.compile(r"(?i)\b([2-8])\s*[x×]\s*(?:NVIDIA\s+)?(?:GeForce\s+)?(?:RTX|GTX|Tesla|[AHBL]\d{2,3})\b")


@rule("arch-missing")
def hashcat_nvrtc_too_old(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: hashcat named, and NVRTC refusing the GPU's arch."""
    text = _text(ctx)
    said = _lines_matching(ctx, _NVRTC_ARCH)
    if not said or not _HASHCAT.search(text):
        return None
    arch, where = ctx.arch()
    first = _NVCC_FIRST.get(arch[3:]) if arch and arch.startswith("sm_") else None
    count = _GPU_COUNT.search(text)
    n = int(count.group(1)) if count else 1
    device = ("-d 2 (one GPU: CUDA device #1 is OpenCL device #2)" if n == 1 else
              f"-d {n + 1}-{2 * n} (the OpenCL entries of the {n} GPUs, after their CUDA entries #1-#{n})")
    newer = (f"a CUDA toolkit of {first} or newer (its NVRTC knows {arch})" if first else
             "a CUDA toolkit whose NVRTC knows the GPU's arch")
    return _first(_make(
        "arch-missing", "hashcat's CUDA backend compiles with an NVRTC older than the GPU",
        f"hashcat builds its kernels at run time with the NVRTC of the CUDA it loads; that CUDA predates the GPU"
        f"{' (' + arch + ')' if arch else ''}, so NVRTC rejects the -arch value and the CUDA kernel build fails",
        f"run the same GPU through hashcat's OpenCL backend: hashcat -I lists the devices, then select the OpenCL one "
        f"with {device}, or start hashcat with --backend-ignore-cuda; to use the CUDA backend again, give hashcat "
        f"{newer}: update the host's toolkit, or rebuild the container image on a newer CUDA base",
        [where] if where else [], said[:1]))
