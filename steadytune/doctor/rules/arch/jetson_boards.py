"""What a Jetson board's own CPU and GPU ask of the programs built for it (JetPack's Ubuntu on aarch64, an integrated
GPU of its own compute capability):

- vLLM on a Jetson Orin (compute capability 8.7) failing with "no kernel image": vLLM's PyPI wheels carry no 8.7 code
  (the maintainers: not planned, for the wheel size limit) and its CMake arch filter dropped 8.7 even when asked,
  until vllm-project/vllm PR 19328 (merged June 2025) let TORCH_CUDA_ARCH_LIST=8.7 build it. Source: that PR's thread.
- an `Illegal instruction` on a Jetson Nano / TX1 / TX2 (Cortex-A57 cores) at `import numpy` / `import torch` (often
  inside a setup.py): the OpenBLAS under numpy picks a kernel for a newer ARM core type it detects wrongly there;
  OPENBLAS_CORETYPE=ARMV8 makes it use the plain ARMv8 kernels. Source: NVIDIA-AI-IOT/torch2trt#609 (the reporter's
  fix, confirmed), the same variable NVIDIA's Jetson forum gives for numpy 1.19.5's crash (checked v18b:
  numpy/numpy#18131, OpenBLAS's CPU detection on Jetson; basler/pypylon#475, "setting the environment variable
  OPENBLAS_CORETYPE=ARMV8")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_VLLM = re.compile(r"(?i)\bvllm\b|\bVLLM_[A-Z_]+")
_NO_KERNEL = re.compile(r"(?i)no kernel image is available")


@rule("arch-missing")
def vllm_on_jetson_orin(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: vLLM named, a Jetson Orin named (sm_87), and CUDA's no-kernel-image error."""
    if "sm_87" not in [f.detail for f in ctx.sheet.of("gpu")] or not _VLLM.search(_text(ctx)):
        return None
    lines = _lines_matching(ctx, _NO_KERNEL)
    if not lines:
        return None
    # vLLM's own kernels are what lack 8.7 (NVIDIA's JetPack torch underneath carries it): this leads the torch reading
    return _first(_make("arch-missing", "vLLM built without compute capability 8.7 (Jetson Orin)",
                 "vLLM's PyPI wheels carry no code for the Orin's compute capability 8.7, and before PR #19328 its CMake "
                 "filter dropped 8.7 from a source build too (kernels built for 8.0 run on 8.6 and 8.9 cards, not on 8.7)",
                 "build vLLM from source on the board, from a tree that includes PR #19328 (merged June 2025), with "
                 "TORCH_CUDA_ARCH_LIST=8.7 set for the build, on top of NVIDIA's JetPack torch (or use a vLLM image "
                 "built for Orin, such as jetson-containers'); the PyPI wheels will not carry 8.7",
                 [ctx.line_fact(lines[0])], lines[:1]))


_ILLEGAL = re.compile(r"(?i)\billegal instruction\b|非法指令|exit code 132\b|SIGILL")
# the boards with Cortex-A57 CPU cores (Nano, TX1, TX2): OpenBLAS' core detection misreads them
_A57_BOARD = re.compile(r"(?i)\bJetson (?:Nano|TX[12])\b|\bTegra X1\b|\bTX2\b")


@rule("arch-missing")
def openblas_core_on_jetson(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an Illegal instruction on a Jetson Nano / TX1 / TX2 (not a GPU error: the CPU's)."""
    text = _text(ctx)
    if not _A57_BOARD.search(text) or "OPENBLAS_CORETYPE" in text:
        return None
    lines = _lines_matching(ctx, _ILLEGAL)
    if not lines:
        return None
    return _make("arch-missing", "OpenBLAS picks a CPU kernel the Jetson's cores cannot run",
                 "an Illegal instruction at `import numpy` / `import torch` (a setup.py that imports torch too) on a "
                 "Jetson Nano / TX1 / TX2: the OpenBLAS under numpy detects the Cortex-A57 as another ARM core type and "
                 "runs instructions it does not have",
                 "export OPENBLAS_CORETYPE=ARMV8 before running (and before pip install / python setup.py install of a "
                 "package whose build imports torch; put it in ~/.bashrc to keep it)",
                 [ctx.line_fact(lines[0])], lines[:1])
