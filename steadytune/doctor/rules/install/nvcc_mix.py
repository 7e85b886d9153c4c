"""A JIT build (FlashInfer, torch extensions, Triton's helpers) with an nvcc of another CUDA release than torch's:
pip's nvidia-cuda-nvcc, the CUDA headers and a system toolkit mixed in one environment. CCCL refuses headers of one
release with a compiler of another ("CUDA compiler and toolkit headers are incompatible"), and code built for torch's
CUDA must come from that CUDA's compiler. The fix is one toolchain, of torch's CUDA release, found first."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

# nvcc's release as pastes show it: "NVCC: 13.3.33", "Cuda compilation tools, release 12.4", "nvcc 12.8"
_NVCC = re.compile(r"(?i)\bnvcc\W{0,3}(?:version\W{0,3})?v?(\d{2})\.(\d)\b|Cuda compilation tools, release (\d{2})\.(\d)")
# torch's CUDA: "torch.version.cuda: 13.0", or the +cuXYZ of the torch fact
_TORCH_CUDA = re.compile(r"torch\.version\.cuda\W{1,4}(\d{2})\.(\d)\b")
_JIT_FAILS = re.compile(r"(?i)compiler and toolkit headers are incompatible|\bJIT\b.{0,60}\b(?:fail\w*|error)|"
                        r"(?:fail\w*|error)\b.{0,60}\bJIT\b")


def _torch_cuda(ctx: Context, text: str) -> Optional[str]:
    said = _TORCH_CUDA.search(text)
    if said:
        return f"{said.group(1)}.{said.group(2)}"
    build = next((f.value for f in ctx.sheet.of("torch") if f.detail == "cuda"), None)
    label = re.search(r"\+cu(\d{2})(\d)$", build) if build else None
    return f"{label.group(1)}.{label.group(2)}" if label else None


@rule("wheel-platform")
def nvcc_of_another_cuda(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a JIT build failing (or CCCL's incompatible-headers error), nvcc's release and torch's CUDA, which
    differ."""
    text = _text(ctx)
    if "nvcc" not in text.lower() and "compilation tools" not in text:
        return None
    failing = _lines_matching(ctx, _JIT_FAILS)
    nvcc = _NVCC.search(text)
    torch_cuda = _torch_cuda(ctx, text)
    if not failing or not nvcc or not torch_cuda:
        return None
    compiler = f"{nvcc.group(1) or nvcc.group(3)}.{nvcc.group(2) or nvcc.group(4)}"
    if compiler == torch_cuda:
        return None
    major = torch_cuda.split(".")[0]
    # CUDA 13's pip wheels drop the -cuXX suffix (nvidia-cuda-nvcc 13.x; nvidia-cuda-nvcc-cu13 is a deprecated
    # placeholder, per its PyPI page); CUDA 12's are nvidia-cuda-nvcc-cu12
    package = "nvidia-cuda-nvcc" if int(major) >= 13 else f"nvidia-cuda-nvcc-cu{major}"
    return _make("wheel-platform", f"nvcc {compiler} builds for a torch of CUDA {torch_cuda}",
                 f"the JIT build runs nvcc {compiler} while torch (and the CUDA headers it was built with) is CUDA "
                 f"{torch_cuda}: several CUDA toolchains are mixed in the environment (pip's nvcc, the headers, a system "
                 "toolkit on another path), and CCCL refuses a compiler and headers of different releases",
                 f"use one toolchain of torch's CUDA {torch_cuda}: pip install \"{package}=={torch_cuda}.*\" (the nvcc of "
                 f"CUDA {torch_cuda}), point CUDA_HOME at that toolkit and put its bin first on PATH (a system CUDA of "
                 "another release off PATH), clear the JIT cache (~/.cache/flashinfer, ~/.cache/torch_extensions) and "
                 "start again; nvcc --version must then print release " + torch_cuda,
                 [ctx.line_fact(failing[0])], failing[:1])
