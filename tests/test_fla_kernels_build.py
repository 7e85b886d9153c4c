"""flash-linear-attention's varlen kernels (the linear-attention extra) build for NVIDIA and AMD GPUs: the recurrent
state pass of the chunked gated delta rule and the causal conv1d, as a packed Qwen3.5-35B-A3B / Qwen3-Next layer
calls them (16 key heads serving 32 value heads of 128, cu_seqlens), compiled by Triton without a GPU. A target the
compiler refuses fails here as it would on that GPU. Skipped without the extra (CI does not install it)."""

from __future__ import annotations

import pytest

pytest.importorskip("fla", reason="flash-linear-attention is the linear-attention extra "
                                  "(pip install 'steadytune[linear-attention]')")
triton = pytest.importorskip("triton", reason="building kernels needs Triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

TARGETS = [GPUTarget("cuda", 80, 32), GPUTarget("cuda", 90, 32), GPUTarget("hip", "gfx90a", 64),
           GPUTarget("hip", "gfx942", 64)]


def jit_function(kernel):
    """The @triton.jit function under fla's heuristics and autotune wrappers."""
    while not isinstance(kernel, triton.runtime.jit.JITFunction):
        kernel = kernel.fn
    return kernel


def build(kernel, signature: dict, constants: dict, target) -> dict:
    fn = jit_function(kernel)
    assert set(signature) == set(fn.arg_names), "fla changed this kernel's arguments"
    source = ASTSource(fn, signature, {(fn.arg_names.index(k),): v for k, v in constants.items()})
    return triton.compile(source, target=target, options={"num_warps": 4, "num_stages": 2}).asm


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t.arch))
def test_the_varlen_delta_rule_state_pass_builds(target):
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_kernel_h_blockdim64 as kernel

    pointers = dict.fromkeys(("k", "v", "w", "v_new", "h"), "*bf16")
    constants = {"gk": None, "h0": None, "ht": None, "H": 16, "HV": 32, "K": 128, "V": 128, "BT": 64, "BV": 32,
                 "USE_G": True, "USE_GK": False, "USE_INITIAL_STATE": False, "STORE_FINAL_STATE": False,
                 "SAVE_NEW_VALUE": True, "STATE_V_FIRST": False, "IS_VARLEN": True}
    signature = {**pointers, "g": "*fp32", "cu_seqlens": "*i64", "chunk_offsets": "*i64", "T": "i32",
                 **dict.fromkeys(constants, "constexpr")}
    asm = build(kernel, signature, constants, target)
    assert ("cubin" if target.backend == "cuda" else "hsaco") in asm


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t.arch))
def test_the_varlen_causal_conv1d_builds(target):
    from fla.modules.causal_conv1d.ops import causal_conv1d_fwd_kernel as kernel

    constants = {"bias": None, "residual": None, "initial_state": None, "D": 8192, "W": 4, "BT": 64, "BW": 4,
                 "BD": 64, "ACTIVATION": "silu", "HAS_WEIGHT": True, "HAS_BIAS": False, "HAS_RESIDUAL": False,
                 "USE_INITIAL_STATE": False, "IS_VARLEN": True}
    signature = {"x": "*bf16", "y": "*bf16", "weight": "*bf16", "cu_seqlens": "*i64", "chunk_indices": "*i64",
                 "B": "i32", "T": "i32", "stride_x_n": "i64", "stride_x_t": "i64", "stride_x_d": "i64",
                 **dict.fromkeys(constants, "constexpr")}
    asm = build(kernel, signature, constants, target)
    assert ("cubin" if target.backend == "cuda" else "hsaco") in asm
