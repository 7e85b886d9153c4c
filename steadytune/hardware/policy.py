"""The hardware policy: which mixed precision, which attention implementation and which packing attention a
run gets on this machine, each with its reason (`train` records them, `doctor` prints them).
"""

from __future__ import annotations

from typing import Callable, Optional

from steadytune.errors import UserError
from steadytune.hardware.archs import arch_supports_bf16
from steadytune.hardware.backend import HardwareInfo
from steadytune.hardware.gpu_facts import lookup_product

# torch is imported inside the functions that need it: doctor applies this policy to saved tool outputs of
# another machine, which must work where torch itself does not import.


def choose_precision(info: HardwareInfo, bf16: bool | str = "auto", fp16: bool | str = False) -> tuple[str, str]:
    """-> (dtype name for mixed precision: 'bf16' | 'fp16' | 'fp32', reason)."""
    gpu = info.primary
    if info.backend == "cpu" or gpu is None:
        if bf16 is True or fp16 is True:
            # LLaMA-Factory configs all say bf16: true; on a CPU that would only make the run slower
            # (CPU autocast) and less exact, so the same file runs in fp32 there, and says so.
            return "fp32", "no GPU: fp32 (the config's bf16/fp16: true applies on a GPU; CPU autocast is slower)"
        return "fp32", "CPU: fp32 (bf16 autocast on CPU is slower here and gains nothing in memory for LoRA)"
    native = arch_supports_bf16(gpu.arch)
    if bf16 is True:
        if not native:
            return "bf16", f"bf16: true was asked for, but {gpu.arch} has no native bf16 (emulated, slow); consider fp16"
        return "bf16", "bf16: true"
    if fp16 is True:
        warn = " (gfx90a flushes fp16 denormals in MFMA: prefer bf16)" if gpu.arch == "gfx90a" else ""
        return "fp16", f"fp16: true{warn}"
    if bf16 == "auto":
        if native:
            return "bf16", f"bf16: auto -> {gpu.arch} has native bf16 matrix math"
        if fp16 == "auto":
            return "fp16", f"bf16: auto -> {gpu.arch} lacks native bf16; fp16: auto -> fp16 with loss scaling"
        return "fp32", f"bf16: auto -> {gpu.arch} lacks native bf16 -> fp32 (set fp16: true for speed, with loss scaling)"
    if fp16 == "auto":
        return "fp16", "fp16: auto on a GPU"
    return "fp32", "bf16 and fp16 are off"


# --- attention -------------------------------------------------------------------------------------------

class AttentionUnavailable(UserError, RuntimeError):
    """The attention kernel asked for cannot run here; a user error (one line, exit 1), not a crash."""


def flash_attn_status() -> tuple[bool, str]:
    """Whether flash-attn imports *and runs* here (a broken ROCm build imports fine and fails on first call)."""
    import torch

    try:
        import flash_attn  # noqa: F401
        from flash_attn import flash_attn_func
    except Exception as e:  # ImportError, or an undefined symbol in a mismatched build
        return False, f"flash-attn does not import: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return False, "flash-attn needs a GPU"
    try:
        q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
        flash_attn_func(q, q, q, causal=True)
        torch.cuda.synchronize()
    except Exception as e:
        return False, f"flash-attn imports but fails to run: {type(e).__name__}: {e}"
    return True, f"flash-attn {getattr(flash_attn, '__version__', '?')} runs"


def choose_attention(info: HardwareInfo, requested: str = "auto") -> tuple[str, str]:
    """-> (transformers attn_implementation, reason)."""
    if requested in ("auto", "sdpa"):
        why = "auto -> SDPA (PyTorch fused attention: works on ROCm via AOTriton, on CUDA and CPU)" if requested == "auto" else "sdpa"
        return "sdpa", why
    if requested in ("eager", "disabled"):
        return "eager", f"{requested}: plain matmul attention"
    if requested == "fa2":
        ok, why = flash_attn_status()
        if not ok:
            raise AttentionUnavailable(f"flash_attn: fa2 was asked for, but {why}. Use flash_attn: sdpa "
                                       "(the fast default) or install a flash-attn build for this platform.")
        return "flash_attention_2", why
    raise AttentionUnavailable(f"unknown flash_attn value {requested!r}")


def peak_bf16_tflops(name: str) -> Optional[float]:
    """Dense bf16 peak of a GPU from its product name (for MFU), or None when the table does not know it."""
    product = lookup_product(name)
    return product.peak_bf16_tflops if product else None


def choose_packing_attention(info: HardwareInfo, requested: str = "auto",
                             kernel_status: Optional[Callable[[], tuple[str | None, str]]] = None) -> tuple[str, str | None, str]:
    """-> (packing attention: varlen | sdpa | flex, varlen kernel name or None, reason). See data/packing.py and model/attention.py.

    On a GPU, a variable-length flash kernel (flash-attn, else PyTorch's own) is used only after it has run
    and matched SDPA here; otherwise, and on CPU, SDPA with the block-diagonal mask.
    """
    if kernel_status is None:   # doctor --from passes its own: the saved machine's kernels cannot be run here
        # lazy: hardware.attention_kernels loads torch; doctor --from applies this policy where torch does not import
        from steadytune.hardware.attention_kernels import varlen_kernel_status as kernel_status
    if requested in ("sdpa", "flex"):
        return requested, None, f"{requested} was asked for"
    if info.backend in ("cuda", "rocm"):
        kernel, why = kernel_status()
        if kernel is not None:
            return "varlen", kernel, f"auto -> varlen: {why}; no padding, no masked-out blocks"
        if requested == "varlen":
            raise AttentionUnavailable(f"varlen packing attention was asked for, but {why}")
        return "sdpa", None, f"auto -> SDPA with a block-diagonal mask (no varlen kernel: {why})"
    if requested == "varlen":
        raise AttentionUnavailable("varlen packing attention needs a GPU; use sdpa")
    return "sdpa", None, f"auto -> SDPA with a block-diagonal mask ({info.backend}: no varlen kernel)"


def fallback_precision(info) -> str:
    """Where fp16 keeps overflowing: bf16 if the GPU architecture has native bf16, else fp32."""
    gpu = info.primary
    return "bf16" if gpu is not None and arch_supports_bf16(gpu.arch) else "fp32"
