"""The grouped matmul of a mixture of experts: rows sorted by expert, each group of rows times its expert's matrix,
`out[rows of e] = x[rows of e] @ w[e]`, in one call instead of one matmul per expert.

Three ways to run it, one arithmetic (`moe_grouped_mm`, chosen by choose_grouped_backend):
- torch: torch's grouped matmul (`torch.nn.functional.grouped_mm`, `torch._grouped_mm` before it): CUTLASS on
  NVIDIA sm_80 and up; on a CPU a plain loop inside torch (float32 / bfloat16). Its autograd is torch's own.
- triton: our Triton kernel (grouped_triton.py), forward and backward. For ROCm, where torch's grouped matmul falls
  back to a slow path because the Composable Kernel one "is not performant yet" (pytorch#170159, pytorch#171140: opt-in
  with ROCM_ALLOW_GROUP_GEMM_CK=1) and RDNA4 ships an empty `_grouped_mm` kernel up to ROCm 7.12 (ROCm/TheRock#5284),
  and for NVIDIA GPUs below sm_80 or dtypes torch's kernel does not take.
- loop: one matmul per expert over its rows (reads the group sizes back to the host): the reference the others are
  tested against, and the path of an old torch with neither.

`offsets` are the groups' end rows (int32, cumulative, one per expert), as torch's grouped matmul takes them; rows at
and past offsets[-1] are left out (their output rows are zero here, whatever the kernel).
"""

from __future__ import annotations

import importlib.util

import torch

from steadytune.errors import UserError
from steadytune.model.kernel_builds import refusal
from steadytune.model.kernel_catalogue import device_arch, dtype_name

BACKENDS = ("torch", "triton", "loop")
TRITON = importlib.util.find_spec("triton") is not None


def _torch_grouped_mm():
    return getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def torch_kernel_status(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether torch's grouped matmul runs well here, and why not."""
    if _torch_grouped_mm() is None:
        return False, f"torch {torch.__version__} has no grouped matmul (torch 2.8 and later do)"
    if device.type == "cpu":
        if dtype not in (torch.float32, torch.bfloat16):
            return False, f"torch's CPU grouped matmul takes float32 and bfloat16, not {dtype}"
        return True, "torch's grouped matmul (on a CPU: its loop over the groups)"
    if device.type != "cuda":
        return False, f"no grouped matmul kernel for {device.type}"
    if torch.version.hip is not None:
        return False, ("torch's grouped matmul on ROCm falls back to a slow path (its Composable Kernel path is opt-in, "
                       "'not performant yet': pytorch#170159) and is empty on RDNA4 up to ROCm 7.12 (ROCm/TheRock#5284)")
    if torch.cuda.get_device_capability(device) < (8, 0):
        return False, "torch's grouped matmul needs an NVIDIA GPU of sm_80 or later"
    if dtype != torch.bfloat16:
        return False, f"torch's CUDA grouped matmul is measured in bfloat16 only, not {dtype}"
    return True, "torch's grouped matmul (CUTLASS)"


def triton_kernel_status(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether our Triton grouped kernel runs here: Triton installed, a GPU, and every configuration the launcher can
    pick for this dtype built for the GPU's arch without a spill (model/kernel_builds.py)."""
    if not TRITON:
        return False, "Triton is not installed"
    if device.type != "cuda":
        return False, "Triton kernels need a GPU"
    if dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return False, f"our Triton grouped kernel takes bf16, fp16 or fp32, not {dtype}"
    refused = refusal("moe_grouped_mm", device_arch(device), dtype=dtype_name(dtype))
    if refused is not None:
        return False, f"our Triton grouped kernel is refused here: {refused}"
    return True, "our Triton grouped kernel"


def choose_grouped_backend(device: torch.device, dtype: torch.dtype, asked: str = "auto") -> tuple[str, str]:
    """-> (backend, why): what the experts' grouped matmuls run on. `asked`: the moe_grouped_mm key."""
    torch_ok, torch_why = torch_kernel_status(device, dtype)
    triton_ok, triton_why = triton_kernel_status(device, dtype)
    if asked == "torch":
        if not torch_ok:
            raise UserError(f"moe_grouped_mm: torch, but {torch_why}; set moe_grouped_mm: auto")
        return "torch", torch_why
    if asked == "triton":
        if not triton_ok:
            raise UserError(f"moe_grouped_mm: triton, but {triton_why}; set moe_grouped_mm: auto")
        return "triton", triton_why
    if asked == "loop":
        return "loop", "one matmul per expert (asked for)"
    if torch_ok and (device.type == "cpu" or torch.version.hip is None):
        return "torch", torch_why
    if triton_ok:
        return "triton", f"{triton_why} ({torch_why})"
    return "loop", f"one matmul per expert ({torch_why}; {triton_why})"


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, backend: str) -> torch.Tensor:
    """x [rows, K] sorted by group, w [groups, K, N] (any strides), offsets int32 [groups] -> [rows, N]."""
    if backend == "torch" and (torch.compiler.is_compiling() and x.dtype != torch.bfloat16 or not _aligned(x, w)):
        # torch's grouped matmul traces in bfloat16 only (its fake kernel checks the dtype), and takes rows of a
        # multiple of 16 bytes only (widths of real models are; the rank-r factors are padded to be)
        backend = "loop"
    if backend == "torch":
        return _torch_grouped_mm()(x, w, offs=offsets)
    if backend == "triton":
        from steadytune.model.moe.grouped_triton import triton_grouped_mm  # lazy: Triton imports only on a GPU run

        return triton_grouped_mm(x, w, offsets)
    return loop_grouped_mm(x, w, offsets)


def _aligned(x: torch.Tensor, w: torch.Tensor) -> bool:
    size = x.element_size()
    return (x.shape[1] * size) % 16 == 0 and (w.shape[-1] * size) % 16 == 0


def loop_grouped_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The reference: one matmul per group over its rows; rows past the last group are zero. A custom op (with its
    own backward, below), so torch.compile takes it whole instead of stopping at the group sizes it reads back."""
    return torch.ops.steadytune.grouped_mm_loop(x, w, offsets)


def _groups(offsets: torch.Tensor):
    start = 0
    for group, end in enumerate(offsets.tolist()):
        yield group, start, end
        start = end


@torch.library.custom_op("steadytune::grouped_mm_loop", mutates_args=())
def _grouped_mm_loop(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    out = x.new_zeros(x.shape[0], w.shape[-1])
    for group, start, end in _groups(offsets):
        if end > start:
            out[start:end] = x[start:end] @ w[group]
    return out


@_grouped_mm_loop.register_fake
def _(x, w, offsets):
    return x.new_empty(x.shape[0], w.shape[-1])


@torch.library.custom_op("steadytune::grouped_weight_grad_loop", mutates_args=())
def _grouped_weight_grad_loop(x: torch.Tensor, dy: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """dw[g] = x[rows of g]^T @ dy[rows of g]; zero for an empty group."""
    dw = x.new_zeros(offsets.shape[0], x.shape[1], dy.shape[1])
    for group, start, end in _groups(offsets):
        if end > start:
            dw[group] = x[start:end].T @ dy[start:end]
    return dw


@_grouped_weight_grad_loop.register_fake
def _(x, dy, offsets):
    return x.new_empty(offsets.shape[0], x.shape[1], dy.shape[1])


def _loop_setup(ctx, inputs, output):
    x, w, offsets = inputs
    ctx.save_for_backward(x, w, offsets)


def _loop_backward(ctx, dy):
    x, w, offsets = ctx.saved_tensors
    dx = torch.ops.steadytune.grouped_mm_loop(dy, w.transpose(-2, -1), offsets) if ctx.needs_input_grad[0] else None
    dw = (torch.ops.steadytune.grouped_weight_grad_loop(x, dy, offsets).to(w.dtype) if ctx.needs_input_grad[1]
          else None)
    return dx, dw, None


_grouped_mm_loop.register_autograd(_loop_backward, setup_context=_loop_setup)


def group_ends(sorted_groups: torch.Tensor, groups: int) -> torch.Tensor:
    """The end row of each group in a sorted list of group ids, as int32 offsets; on the device, no host sync
    (searchsorted, where bincount would read the largest id back, and a CUDA graph cannot hold that)."""
    bounds = torch.arange(1, groups + 1, device=sorted_groups.device, dtype=sorted_groups.dtype)
    return torch.searchsorted(sorted_groups, bounds, right=False).to(torch.int32)
