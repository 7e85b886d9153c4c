"""spconv 2.x and its kernel library cumm, read from tensorview's own errors (cumm's C++ headers raise them with their
source line, "/io/include/tensorview/tensor.h(171)"): which of the per-CUDA packages the environment needs.

spconv and cumm come as one PyPI package per CUDA release (spconv-cu118 pulls cumm-cu118; the plain names are CPU-only
builds):

  - "don't compiled with cuda" from tensorview: the CPU-only cumm (plain pip install spconv, or a cumm left beside a
    spconv-cuXYZ) runs the GPU code: the pair for torch's CUDA replaces it;
  - tensorview's launch check "CUDA kernel launch blocks must be positive, but got N= 0": the launch found no kernel
    of this GPU's architecture in the wheel (traveller59/spconv#419: spconv-cu111 on Colab's K80; the maintainer: only
    spconv-cu102 still carries Kepler's kernels), so the wheel for an older CUDA or a build for the GPU is the fix.

Sources: the spconv README (one package per CUDA, cumm rebuilt first for a CUDA without prebuilts, CUMM_CUDA_ARCH_LIST
for a source build); PyPI's spconv-cuXYZ names (/work/.library package lists: cu102 to cu126)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

# the CUDA releases spconv 2.x publishes a package for (spconv-cu102 ... spconv-cu126)
SPCONV_CUDA = ("102", "111", "113", "114", "116", "117", "118", "120", "121", "124", "126")

_TENSORVIEW = re.compile(r"(?i)tensorview[/\\]|\bcumm\b|\bspconv\b")
_NOT_CUDA_BUILD = re.compile(r"(?i)don'?t compiled with cuda|(?:not|wasn'?t) compiled with cuda")
_ZERO_BLOCKS = re.compile(r"(?i)kernel launch blocks must be positive|\bN > 0 assert fail")
# Kepler cards (compute capability 3.x): Colab's old K80, the Tesla K40, GTX 7xx
_KEPLER = re.compile(r"(?i)\bK80\b|\bK40m?\b|\bK20\w*\b|\bGTX ?7[5-8]0\b|\bsm_3[57]\b|\bKepler\b")


def spconv_label(cuda: Optional[str]) -> Optional[str]:
    """The spconv package label for a CUDA release ("11.8" -> "118"): the newest spconv publishes at or below it within
    the same major (CUDA's minor version compatibility), None where it has none."""
    if not cuda:
        return None
    m = re.match(r"(\d+)\.(\d)", cuda)
    if not m:
        return None
    want = int(m.group(1)) * 10 + int(m.group(2))
    same = [c for c in SPCONV_CUDA if c[:-1] == m.group(1) and int(c) <= want]
    return same[-1] if same else None


def _torch_cuda(ctx: Context) -> Optional[str]:
    """The CUDA of the torch the paste shows (+cu118 -> "11.8"), else the one CUDA it names."""
    for fact in ctx.sheet.of("torch"):
        m = re.search(r"\+cu(\d{2,3})\b", fact.value)
        if m:
            return f"{m.group(1)[:-1]}.{m.group(1)[-1]}"
    said = {f.value for f in ctx.sheet.of("cuda")}
    return said.pop() if len(said) == 1 else None


@rule("torch-build")
def cpu_cumm_under_spconv(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: tensorview's (cumm's) own "not compiled with cuda" in a spconv / cumm paste."""
    text = _text(ctx)
    said = _lines_matching(ctx, _NOT_CUDA_BUILD)
    if not said or not _TENSORVIEW.search(text):
        return None
    cuda = _torch_cuda(ctx)
    label = spconv_label(cuda)
    pick = (f"spconv-cu{label} cumm-cu{label}" if label else
            "spconv-cuXYZ cumm-cuXYZ, XYZ the CUDA of torch (python -c 'import torch; print(torch.version.cuda)': "
            f"11.8 -> cu118; spconv publishes cu{', cu'.join(SPCONV_CUDA)})")
    return _make("torch-build", "the CPU-only cumm runs spconv's GPU code",
                 "spconv's kernels come from cumm, which PyPI publishes once per CUDA release (cumm-cu118, ...) and "
                 "once without CUDA (plain cumm, pulled in by plain spconv); tensorview says the cumm loaded is that "
                 "CPU build",
                 f"pip uninstall -y spconv cumm; pip install {pick}" + (f" (the pair for torch's CUDA {cuda})" if label
                                                                        else "") +
                 "; pip list | grep -e spconv -e cumm must then show only the -cu packages", [ctx.line_fact(said[0])],
                 said)


@rule("arch-missing")
def spconv_without_the_gpus_kernels(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: tensorview's launch check finding zero blocks in a spconv / cumm paste: the wheel has no kernel for
    this GPU. A Kepler GPU named (or Colab, whose old default was the K80) gets spconv-cu102, the last build with
    Kepler's kernels; any other GPU a build for its compute capability."""
    text = _text(ctx)
    said = _lines_matching(ctx, _ZERO_BLOCKS)
    if not said or not _TENSORVIEW.search(text):
        return None
    named = _KEPLER.search(text)
    kepler = bool(named) or ctx.sheet.has("arch", "sm_37") or ctx.sheet.has("arch", "sm_35")
    colab = re.search(r"(?i)\bcolab\b", text)
    label = spconv_label(_torch_cuda(ctx))
    if kepler or colab:
        gpu = named.group(0) if named else "a Kepler GPU"
        fix = ("pip uninstall -y spconv" + (f"-cu{label} cumm-cu{label}" if label else "-cuXYZ cumm-cuXYZ") +
               "; pip install spconv-cu102 (its CUDA 10.2 build is the one that still carries Kepler's kernels"
               + (", with a torch of CUDA 10.2" if not label or label != "102" else "") + ")" +
               ("; check the GPU first: nvidia-smi -L (on Colab a K80 is a Kepler card; a T4 or newer needs no "
                "change of wheel, only a new runtime)" if not kepler else "") +
               "; or build cumm and spconv from source for the card: CUMM_CUDA_ARCH_LIST=\"3.7\" "
               "SPCONV_DISABLE_JIT=1 pip install -e . in each checkout")
        why = (f"the prebuilt spconv for CUDA 11 and newer has no kernels for {gpu} (Kepler, compute capability "
               "3.x), so tensorview finds nothing to launch and reports zero blocks")
    else:
        fix = ("find the GPU's compute capability (nvidia-smi --query-gpu=name,compute_cap --format=csv); a card the "
               "prebuilt spconv does not cover needs cumm and spconv built for it: pip uninstall -y spconv cumm; in "
               "each checkout (cumm first) CUMM_CUDA_ARCH_LIST=\"<X.Y>\" SPCONV_DISABLE_JIT=1 pip install -e .; "
               "a Kepler card: pip install spconv-cu102")
        why = ("the spconv wheel holds no kernel for this GPU's architecture, so tensorview finds nothing to launch "
               "and reports zero blocks")
    return _make("arch-missing", "spconv's wheel has no kernels for this GPU", why, fix, [ctx.line_fact(said[0])],
                 said, confirmed=bool(kepler))
