"""Variable-length attention kernels (flash-attn's, PyTorch's own, and a reference one), and which of them
runs *and* agrees with SDPA on this machine.

A varlen kernel attends within each example of one concatenated row, driven by cumulative sequence lengths
(`cu_seq_lens`); the model side registers the chosen one with transformers (model/attention.py).
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import torch

# --- the varlen attention implementation ---------------------------------------------------------------------

def _torch_varlen_kernel() -> Callable | None:
    """PyTorch's built-in flash varlen attention (torch >= 2.9, CUDA), adapted to one calling convention."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters

    def kernel(q, k, v, cu, max_len, scale, window=None, causal=True):
        if k.shape[1] != q.shape[1] and "enable_gqa" not in params:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        extra = {"scale": scale} if "scale" in params else {}
        if "enable_gqa" in params:
            extra["enable_gqa"] = k.shape[1] != q.shape[1]
        if window and not causal:
            raise NotImplementedError("a sliding window is causal here")
        if "window_size" in params:   # (-1, -1): every key of the sequence, (-1, 0): causal
            extra["window_size"] = (window - 1 if window else -1, 0 if causal else -1)
        elif window:
            raise NotImplementedError("this torch's varlen_attn has no sliding window")
        else:
            extra["is_causal"] = causal
        return varlen_attn(q, k, v, cu, cu, max_len, max_len, **extra)

    return kernel


def _flash_attn_varlen_kernel() -> Callable | None:
    try:
        from flash_attn import flash_attn_varlen_func
    except Exception:  # ImportError, or an undefined symbol in a mismatched build
        return None

    def kernel(q, k, v, cu, max_len, scale, window=None, causal=True):
        return flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, softmax_scale=scale, causal=causal,
                                      window_size=(window - 1 if window else -1, 0 if causal else -1))

    return kernel


def segment_sdpa_kernel(q, k, v, cu, max_len, scale, window=None, causal=True):
    """Reference varlen kernel: SDPA on each example in turn (causal, or every key of the example: a vision tower's
    images and windows). Correct anywhere, slow; used on CPU."""
    del max_len
    out = torch.empty_like(q)
    bounds = cu.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end == start:
            continue  # an empty sequence (static shapes fill cu_seq_lens up with them)
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))  # [heads, n, dim]
        n = end - start
        allowed = torch.ones(n, n, dtype=torch.bool, device=q.device)
        if causal:
            allowed = allowed.tril()
        if window:
            allowed &= ~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(-window)
        mask = allowed if causal or window else None   # no mask: SDPA as transformers calls it on one image
        out[start:end] = torch.nn.functional.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=mask, scale=scale, enable_gqa=ks.shape[0] != qs.shape[0]).transpose(0, 1)
    return out


def varlen_kernels() -> dict[str, Callable]:
    """Variable-length kernels that import here, best first."""
    found = {"flash_attn": _flash_attn_varlen_kernel(), "torch_varlen": _torch_varlen_kernel()}
    return {name: k for name, k in found.items() if k is not None}


@functools.lru_cache(maxsize=None)
def varlen_kernel_status(device: str = "cuda", causal: bool = True) -> tuple[str | None, str]:
    """-> (name of the first varlen kernel that runs *and* agrees with SDPA here, reason). causal: as a decoder
    attends (packed rows); False: every key of a sequence, as a vision tower attends within an image or window,
    with empty sequences at the end (a static layout's)."""
    if not torch.cuda.is_available():
        return None, "no GPU: varlen kernels need one"
    reasons = []
    for name, kernel in varlen_kernels().items():
        try:
            torch.manual_seed(0)
            lens = [5, 11, 3]
            heads = 2 if causal else 4   # grouped queries for a decoder; a vision tower's keys have every head
            bounds = [0, 5, 16, 19] + ([] if causal else [19, 19])
            cu = torch.tensor(bounds, dtype=torch.int32, device=device)
            q = torch.randn(19, 4, 64, device=device, dtype=torch.bfloat16)
            k = torch.randn(19, heads, 64, device=device, dtype=torch.bfloat16)
            v = torch.randn(19, heads, 64, device=device, dtype=torch.bfloat16)
            got = kernel(q, k, v, cu, max(lens), 0.125, causal=causal)
            want = segment_sdpa_kernel(q.float(), k.float(), v.float(), cu, max(lens), 0.125, causal=causal)
            err = float((got.float() - want).norm() / want.norm())
            if not err < 2e-2:
                reasons.append(f"{name}: wrong result (relative error {err:.3g})")
                continue
            return name, f"{name} runs and matches SDPA (relative error {err:.1e})"
        except Exception as e:  # a kernel that imports but fails on this GPU is simply not used
            reasons.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    return None, "; ".join(reasons) or "neither flash-attn nor torch.nn.attention.varlen is available"


@functools.lru_cache(maxsize=None)
def varlen_static_status(name: str, device: str = "cuda") -> tuple[bool, str]:
    """-> (can kernel `name` run static-shape rows, reason): cu_seq_lens ending in empty sequences and padding cut
    into pieces must give the examples exactly what the plain call gives them, and finite values everywhere."""
    kernel = varlen_kernels().get(name)
    if kernel is None or not torch.cuda.is_available():
        return False, f"{name} is not available here"
    try:
        torch.manual_seed(0)
        q = torch.randn(32, 4, 64, device=device, dtype=torch.bfloat16)
        k = torch.randn(32, 2, 64, device=device, dtype=torch.bfloat16)
        v = torch.randn(32, 2, 64, device=device, dtype=torch.bfloat16)
        plain = kernel(q[:19], k[:19], v[:19], torch.tensor([0, 5, 16, 19], dtype=torch.int32, device=device),
                       11, 0.125)
        # the same three examples, then 13 padding tokens as pieces of at most 11, then two empty sequences
        cu = torch.tensor([0, 5, 16, 19, 30, 32, 32, 32], dtype=torch.int32, device=device)
        static = kernel(q, k, v, cu, 11, 0.125)
        if not bool(torch.isfinite(static).all()):
            return False, f"{name}: non-finite values with empty sequences"
        err = float((static[:19].float() - plain.float()).abs().max())
        if err > 1e-3:
            return False, f"{name}: empty sequences change the result (max difference {err:.2g})"
        return True, f"{name} takes padded rows with empty sequences"
    except Exception as e:
        return False, f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


# --- tile attention: a slice of queries against the keys before them (model/tiling.py) ---------------------------
#
# One call takes several segments at once: segment j is queries [qs_j, qe_j) of one example and that example's keys
# from its first token to qe_j, so the queries are the *last* rows of their causal square (bottom-right aligned:
# query i of a segment sees keys 0 .. i + nk - nq). cu_q / cu_k are the segments' cumulative query and key counts.

def tile_attention_reference(q, k, v, cu_q, cu_k, scale):
    """The tile attention by definition: causal SDPA per segment with an explicit bottom-right mask. Exact anywhere,
    O(nq x nk) memory per segment: the CPU's kernel and the reference the GPU kernels are checked against."""
    out = torch.empty_like(q)
    for qa, qb, ka, kb in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
        nq, nk = qb - qa, kb - ka
        if nq == 0:
            continue
        allowed = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq)
        qs, ks, vs = q[qa:qb].transpose(0, 1), k[ka:kb].transpose(0, 1), v[ka:kb].transpose(0, 1)
        out[qa:qb] = torch.nn.functional.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=allowed, scale=scale, enable_gqa=ks.shape[0] != qs.shape[0]).transpose(0, 1)
    return out


def _torch_varlen_tile_kernel() -> Callable | None:
    """PyTorch's flash varlen attention with separate query and key lengths (causal = bottom-right in flash)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters

    def kernel(q, k, v, cu_q, cu_k, scale):
        if k.shape[1] != q.shape[1] and "enable_gqa" not in params:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        extra = {}
        if "scale" in params:
            extra["scale"] = scale
        elif abs(scale - q.shape[-1] ** -0.5) > 1e-12:
            raise NotImplementedError("this torch's varlen_attn takes no scale")
        if "enable_gqa" in params:
            extra["enable_gqa"] = k.shape[1] != q.shape[1]
        if "window_size" in params:
            extra["window_size"] = (-1, 0)
        else:
            extra["is_causal"] = True
        lens_q = [b - a for a, b in zip(cu_q[:-1], cu_q[1:])]
        lens_k = [b - a for a, b in zip(cu_k[:-1], cu_k[1:])]
        cq = torch.tensor(cu_q, dtype=torch.int32, device=q.device)
        ck = torch.tensor(cu_k, dtype=torch.int32, device=q.device)
        return varlen_attn(q, k, v, cq, ck, max(lens_q), max(lens_k), **extra)

    return kernel


def _flash_attn_tile_kernel() -> Callable | None:
    try:
        from flash_attn import flash_attn_varlen_func
    except Exception:  # ImportError, or an undefined symbol in a mismatched build
        return None

    def kernel(q, k, v, cu_q, cu_k, scale):
        lens_q = [b - a for a, b in zip(cu_q[:-1], cu_q[1:])]
        lens_k = [b - a for a, b in zip(cu_k[:-1], cu_k[1:])]
        cq = torch.tensor(cu_q, dtype=torch.int32, device=q.device)
        ck = torch.tensor(cu_k, dtype=torch.int32, device=q.device)
        return flash_attn_varlen_func(q, k, v, cq, ck, max(lens_q), max(lens_k), softmax_scale=scale, causal=True)

    return kernel


def _sdpa_lower_right_tile_kernel() -> Callable | None:
    """SDPA per segment with torch's bottom-right causal bias (its flash kernel on a GPU, where it takes the shapes),
    for a torch without the varlen kernel."""
    try:
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:
        return None

    def kernel(q, k, v, cu_q, cu_k, scale):
        out = torch.empty_like(q)
        for qa, qb, ka, kb in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
            if qb == qa:
                continue
            qs, ks, vs = (t.transpose(0, 1)[None] for t in (q[qa:qb], k[ka:kb], v[ka:kb]))
            out[qa:qb] = torch.nn.functional.scaled_dot_product_attention(
                qs, ks, vs, attn_mask=causal_lower_right(qb - qa, kb - ka), scale=scale,
                enable_gqa=ks.shape[1] != qs.shape[1])[0].transpose(0, 1)
        return out

    return kernel


def tile_kernels() -> dict[str, Callable]:
    """Tile attention kernels that import here, best first."""
    found = {"flash_attn": _flash_attn_tile_kernel(), "torch_varlen": _torch_varlen_tile_kernel(),
             "sdpa_lower_right": _sdpa_lower_right_tile_kernel()}
    return {name: k for name, k in found.items() if k is not None}


@functools.lru_cache(maxsize=None)
def tile_kernel_status(device: str = "cuda") -> tuple[str | None, str]:
    """-> (name of the first tile kernel that runs, aligns its causal mask bottom-right and agrees with the reference
    in forward and backward here, reason). Checked once per process."""
    if not torch.cuda.is_available():
        return None, "no GPU: the flash varlen kernels need one"
    reasons = []
    for name, kernel in tile_kernels().items():
        try:
            torch.manual_seed(0)
            cu_q, cu_k = [0, 6, 13], [0, 9, 20]   # 6 queries after 3 earlier keys; 7 queries after 4
            q = torch.randn(13, 4, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(20, 2, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(20, 2, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
            got = kernel(q, k, v, cu_q, cu_k, 0.125)
            grads = torch.autograd.grad(got.float().square().sum(), (q, k, v))
            leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
            want = tile_attention_reference(*leaves, cu_q, cu_k, 0.125)
            wanted = torch.autograd.grad(want.square().sum(), leaves)
            errors = [float((a.float() - b).norm() / b.norm()) for a, b in zip((got, *grads), (want, *wanted))]
            if not max(errors) < 3e-2:
                reasons.append(f"{name}: wrong result (relative error {max(errors):.3g}; is its causal mask "
                               "aligned top-left?)")
                continue
            return name, f"{name} runs and matches the reference in forward and backward (error {max(errors):.1e})"
        except Exception as e:  # a kernel that imports but fails on this GPU is simply not used
            reasons.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    return None, "; ".join(reasons) or "neither flash-attn nor torch.nn.attention.varlen is available"


def packed_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kernel):
    """transformers' [1, heads, length, dim] q, k and v as the [tokens, heads, dim] a varlen kernel takes, and the
    kernel to run them on. Flash kernels take fp16/bf16 only: fp32 inputs (fp32 weights under autocast: full
    fine-tuning, a vision tower kept in fp32) are cast as autocast casts SDPA's inputs, or without autocast run on the
    exact reference kernel."""
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    if q.dtype in (torch.float16, torch.bfloat16):
        return q, k, v, kernel
    if torch.is_autocast_enabled(q.device.type):
        low = torch.get_autocast_dtype(q.device.type)
        return q.to(low), k.to(low), v.to(low), kernel
    return q, k, v, segment_sdpa_kernel
