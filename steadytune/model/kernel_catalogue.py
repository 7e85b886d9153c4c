"""Every Triton kernel steadytune ships, with its argument types and the configurations its launcher can choose on
each GPU architecture: block sizes, warps, constexpr switches, dtypes. The launchers take their block sizes from the
functions here (so the catalogue and what runs cannot drift apart), and model/kernel_builds.py compiles each entry
for NVIDIA and AMD targets without a GPU, which decides what runs where (issue 64) and gives docs/rocm.md its
resource table.

An entry covers what the launcher can pick at run time, bounded by the shapes steadytune runs (model/shapes.py and
the LoRA ranks users set): head dims 64-256, LoRA ranks up to LORA_RANK_LIMIT, hidden sizes up to 8,192, the
activations' dtype (bf16, fp16 where the GPU lacks bf16, fp32 on request). Where a value only changes an index
computation (the number of attention splits), one representative value stands for all. Each configuration carries
tags (dtype, rank, head_dim, ...) so that a verdict about one shape of run refuses that shape only.

Nothing here imports Triton or torch: `doctor` and the run plan read the catalogue where neither is installed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

from steadytune.hardware.gpu_facts import arch_info, normalise_gfx

# ---------------------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------------------

NVIDIA_TARGETS = ("sm_80", "sm_90")
AMD_TARGETS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201")
TARGETS = NVIDIA_TARGETS + AMD_TARGETS

# Local data share (shared memory) a workgroup may use, bytes: CDNA2/3 and RDNA 64 KiB, CDNA4 160 KiB (AMD CDNA4
# ISA guide, "LDS"; LLVM AMDGPUUsage "Memory Spaces"); NVIDIA's opt-in maximum per block (CUDA programming guide,
# "Compute capabilities" table: 163 KiB on sm_80, 227 KiB on sm_90).
LDS_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024, "gfx90a": 64 * 1024, "gfx942": 64 * 1024,
             "gfx950": 160 * 1024, "gfx1100": 64 * 1024, "gfx1151": 64 * 1024, "gfx1201": 64 * 1024}


def lds_limit(arch: str) -> int:
    """LDS bytes a workgroup may use on this target (64 KiB where the table has no row: every AMD arch has at least
    that, and NVIDIA sm_75's opt-in maximum is 64 KiB)."""
    return LDS_LIMIT.get(normalise_gfx(arch), 64 * 1024)


def family(arch: str) -> str:
    """'nvidia' (sm_*), 'cdna' (gfx9: wave64, MFMA) or 'rdna' (gfx10-12: wave32, WMMA on gfx11/12)."""
    arch = normalise_gfx(arch)
    if arch.startswith("sm_"):
        return "nvidia"
    return "cdna" if arch.startswith("gfx9") else "rdna"


def warp_size(arch: str) -> int:
    """Threads a warp (wavefront) has: 64 on CDNA, 32 on RDNA (wave32, as Triton compiles for it) and NVIDIA."""
    return 64 if family(arch) == "cdna" else 32


def fp8_format(arch: str) -> Optional[str]:
    """The e4m3 flavour the GPU's matrix cores multiply: 'ocp' (e4m3fn: NVIDIA sm_89+, gfx950, RDNA4), 'fnuz'
    (e4m3fnuz: MI300, gfx942), or None (no fp8 matrix math). From the arch table (hardware/gpu_facts.py)."""
    arch = normalise_gfx(arch)
    if arch.startswith("sm_"):
        digits = arch[3:].rstrip("a")
        return "ocp" if digits.isdigit() and int(digits) >= 89 else None
    row = arch_info(arch)
    return row.fp8 if row is not None else None


# Triton's names of the e4m3 formats, and their largest finite values (torch.finfo of float8_e4m3fn / _e4m3fnuz)
TRITON_FP8 = {"ocp": "fp8e4nv", "fnuz": "fp8e4b8"}
FP8_MAX = {"ocp": 448.0, "fnuz": 240.0}


# ---------------------------------------------------------------------------------------------------------
# What the launchers choose (each launcher calls these; the catalogue below enumerates them)
# ---------------------------------------------------------------------------------------------------------

def next_power_of_2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


# LoRA ranks the Triton paths take (fused SwiGLU, decode LoRA banks, MoE LoRA factors): every configuration up to it
# is compiled for every target. A larger rank is not refused, but not checked in CI either (kernel_builds.not_covered).
LORA_RANK_LIMIT = 128
# Hidden sizes the decode norms take in one program (a row in registers): up to Llama-70B / Qwen2.5-72B's 8,192.
NORM_WIDTH_LIMIT = 8192
HEAD_DIM_LIMIT = 256

# How the tile sizes below were chosen: every configuration compiled for every target (kernel_builds.py), the
# VGPRs, spills and LDS read from the code, and where a configuration spilled on an AMD family, the smallest change
# that did not (more warps, so each thread holds less of the tile; narrower tiles on RDNA, whose wave32 gives a
# thread twice the share of a wave64 tile). NVIDIA keeps the tiles timed on an H100/H200; where one of those spills
# on NVIDIA, SPILL_MEASURED says which measurement covers it. docs/rocm.md has the table.


def swiglu_rank_block(rank: int) -> int:
    """The rank padded to what a Triton dot takes: a power of two, at least 16."""
    return max(16, next_power_of_2(rank))


def swiglu_rank_limit(arch: str) -> int:
    """The largest rank block the fused SwiGLU takes on this arch: RDNA's rank-r tiles at 128 spill in the backward
    whatever the tile (checked down to 32 x 32 with 8 warps on gfx1201)."""
    return 64 if family(arch) == "rdna" else LORA_RANK_LIMIT


def swiglu_blocks(arch: str) -> dict[str, tuple[int, int, int]]:
    """(rows, columns, warps) of each fused SwiGLU kernel's tile. NVIDIA and CDNA: the fastest of eight tiles timed
    on an H200 at the 1.5B and 7B widths (benchmarks/fused_swiglu_speed.py, docs/speed.md); CDNA holds it without a
    spill (512 VGPRs a lane with the AGPRs). RDNA (wave32): 32 columns and 8 warps, the widest tile that does not
    spill there."""
    if family(arch) == "rdna":
        return {"forward": (64, 32, 8), "backward": (64, 32, 8), "quantize": (32, 256, 4)}
    return {"forward": (64, 64, 4), "backward": (64, 64, 4), "quantize": (32, 256, 4)}


def grouped_blocks(k: int, n: int, dtype: str, arch: str) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, warps) of the MoE grouped matmul: 64-row tiles; narrow outputs (a LoRA factor's
    rank) get narrow tiles, since tl.dot takes 16 at least. RDNA: 64 x 64 x 32 at most, 8 warps (the 64 x 128 x 64
    tile spills there), 16 in fp32; NVIDIA: 8 warps (4 spilled on sm_80; the Triton path is not NVIDIA's default,
    CUTLASS is)."""
    fam = family(arch)
    widest_n, deepest_k = (64, 32) if fam == "rdna" else (128, 64)
    warps = 4 if fam == "cdna" else 16 if fam == "rdna" and dtype == "fp32" else 8
    return 64, min(widest_n, max(16, next_power_of_2(n))), min(deepest_k, max(16, next_power_of_2(k))), warps


# decode attention (attention_triton.py)
ATTENTION_TARGET_PROGRAMS = 256   # about 2 x the multiprocessors of an H100/H200 (132) or an MI300X (304 CUs: ~1 x)


def attention_columns_block(dim: int, dtype: str, arch: str) -> int:
    """Cache columns a split program reads at a time: 64 (timed on an H100 at head dim 64); 32 for head dim 256 and
    for an fp32 cache (which overflowed the 64 KiB LDS of CDNA at 64); on RDNA 32, and 16 above head dim 128."""
    if family(arch) == "rdna":
        return 16 if dim > 128 or dtype == "fp32" else 32
    return 32 if dim > 128 or dtype == "fp32" else 64


def attention_splits(rows: int, kv_heads: int, columns: int, block: int) -> int:
    blocks = -(-columns // block)
    return max(1, min(blocks, -(-ATTENTION_TARGET_PROGRAMS // (rows * kv_heads))))


def attention_blocks(group: int, dim: int, splits: int, dtype: str, arch: str) -> dict[str, int]:
    """Block sizes and warps of the split kernel (query heads of a group padded to 16 for the tensor cores; 8 warps
    above head dim 128, and on RDNA 8, 16 above head dim 128) and of the merge (its [splits, dim] tile in at most
    128 values a thread)."""
    block_d, block_s = max(16, next_power_of_2(dim)), max(2, next_power_of_2(splits))
    rdna = family(arch) == "rdna"
    split_warps = (16 if rdna else 8) if dim > 128 else 8 if rdna else 4
    merge_warps = min(16, max(4, block_s * block_d // (128 * warp_size(arch))))
    return {"BLOCK_G": max(16, next_power_of_2(group)), "BLOCK_D": block_d, "BLOCK_S": block_s,
            "BLOCK": attention_columns_block(dim, dtype, arch), "split_warps": split_warps, "merge_warps": merge_warps}


# decode LoRA banks (bgmv_triton.py)
BGMV_BLOCK_K = 256
BGMV_BLOCK_N = 128


def bgmv_rank_block(rank: int) -> int:
    return max(2, next_power_of_2(rank))


def bgmv_blocks(width: int) -> tuple[int, int]:
    """(SPLITS, BLOCK_S): the shrink's programs a row over the input width, and their partial sums padded for the
    expand."""
    splits = -(-width // BGMV_BLOCK_K)
    return splits, max(2, next_power_of_2(splits))


def bgmv_warps(rank_block: int, block: int, arch: str) -> int:
    """Warps for a LoRA kernel's [block, rank] fp32 tile (A's in the shrink, B's or the partial sums in the expand): 4
    (timed on an H100 at rank 8), more once a thread would hold over 128 values of it (rank 128 spilled at 4 warps on
    NVIDIA and RDNA)."""
    return min(16, max(4, rank_block * block // (128 * warp_size(arch))))


# decode fused small ops (fused_triton.py) and sampling (sample_triton.py)
ACT_BLOCK = 1024
SAMPLE_BLOCK_V = 1024
SAMPLE_CHUNK = 4096   # vocabulary tokens a sampling program takes: one row of 151,936 tokens is 38 programs


def norm_block(width: int) -> tuple[int, int]:
    """(BLOCK, warps) of the residual add + RMSNorm: one program holds a whole row; 8 warps from 8,192 wide (4
    spilled there on every target)."""
    block = next_power_of_2(width)
    return block, 8 if block >= 8192 else 4


# ---------------------------------------------------------------------------------------------------------
# The catalogue
# ---------------------------------------------------------------------------------------------------------

DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Config:
    """One compiled variant of a kernel: constexpr values, the dtypes filled into the signature, launch warps, and
    tags saying which runs pick it (dtype, rank, head_dim, ...). `runs` is False where the kernel's feature never
    runs on the arch (the fused SwiGLU without fp8 matrix cores): built only to show it builds, not held to the
    no-spill rule."""
    constexprs: dict
    types: dict
    num_warps: int = 4
    tags: dict = field(default_factory=dict)
    runs: bool = True

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.tags.items())


@dataclass(frozen=True)
class Kernel:
    name: str                           # short name, unique: "swiglu.forward"
    feature: str                        # the setting that runs it, whose fallback a refusal takes
    module: str                         # where the @triton.jit function lives
    function: str
    args: tuple[tuple[str, str], ...]   # (argument, type) in the function's order; {x} etc. filled from Config.types
    configs: Callable[[str], list[Config]]

    def signature(self, config: Config) -> dict[str, str]:
        return {name: kind.format(**config.types) for name, kind in self.args}


# The settings whose kernels these are, and what a run takes instead when one is refused on an arch.
FEATURES = {
    "fused_swiglu": "the compiled MLP over the fp8 base, without the fused kernels",
    "moe_grouped_mm": "one matmul per expert (moe_grouped_mm: loop)",
    "decode_kernels": "the torch decode ops (attention through SDPA)",
}

# Where a feature runs at all, for a target whose configurations are all built with runs=False.
RUNS_WHERE = {"fused_swiglu": "the fused SwiGLU runs over the fp8 base, which needs fp8 matrix cores",
              "moe_grouped_mm": "every GPU", "decode_kernels": "every GPU"}

# Configurations that spill on NVIDIA and stay, because a measurement on the GPU with the spill in it chose them:
# (kernel, family) -> the measurement.
SPILL_MEASURED = {
    ("swiglu.forward", "nvidia"): "64 x 64 x 4 was the fastest of eight tiles timed on an H200 "
                                  "(benchmarks/fused_swiglu_speed.py, docs/speed.md)",
    ("swiglu.backward", "nvidia"): "64 x 64 x 4 was the fastest of eight tiles timed on an H200 "
                                   "(benchmarks/fused_swiglu_speed.py, docs/speed.md)",
}


def _args(spec: str) -> tuple[tuple[str, str], ...]:
    """'X:*{x} K:i32 BLOCK:constexpr' -> (('X', '*{x}'), ('K', 'i32'), ('BLOCK', 'constexpr'))."""
    return tuple(tuple(part.split(":", 1)) for part in spec.split())


def _constexprs(args: tuple[tuple[str, str], ...], **values) -> dict:
    names = [name for name, kind in args if kind == "constexpr"]
    missing = set(names) ^ set(values)
    if missing:
        raise ValueError(f"constexprs do not match the arguments: {sorted(missing)}")
    return values


# --- fused LoRA SwiGLU (model/swiglu_triton.py, launched by model/fused_swiglu.py) --------------------------

SWIGLU_FORWARD = _args("gate_ptr:*{x} up_ptr:*{x} low_g_ptr:*{x} low_u_ptr:*{x} b_g_ptr:*{x} b_u_ptr:*{x} a_d_ptr:*{x} "
                       "h_ptr:*{x} amax_ptr:*fp32 low_d_parts_ptr:*fp32 M:i32 N:i32 R:i32 "
                       "BLOCK_M:constexpr BLOCK_N:constexpr BLOCK_R:constexpr")
SWIGLU_BACKWARD = _args("dh_ptr:*{x} d_low_d_ptr:*{x} gate_ptr:*{x} up_ptr:*{x} low_g_ptr:*{x} low_u_ptr:*{x} "
                        "b_g_ptr:*{x} b_u_ptr:*{x} a_d_ptr:*{x} dgate_ptr:*{x} dup_ptr:*{x} amax_g_ptr:*fp32 "
                        "amax_u_ptr:*fp32 dlow_g_parts_ptr:*fp32 dlow_u_parts_ptr:*fp32 h_ptr:*{x} M:i32 N:i32 R:i32 "
                        "BLOCK_M:constexpr BLOCK_N:constexpr BLOCK_R:constexpr")
QUANTIZE_ROWS = _args("h_ptr:*{x} scale_ptr:*fp32 hq_ptr:*{fp8} M:i32 N:i32 FP8_MAX:constexpr BLOCK_M:constexpr "
                      "BLOCK_N:constexpr")

# The ranks whose padded block the fused step compiles: 16 (ranks up to 16, LLaMA-Factory's default 8 among them),
# 64 and the limit (a block between two that build without a spill uses fewer registers than the larger).
RANK_BLOCKS = (16, 64, LORA_RANK_LIMIT)


def swiglu_dtypes(arch: str) -> tuple[str, ...]:
    """The activations' dtypes the fused step runs in: any on NVIDIA; bf16 only on ROCm, whose row-scaled fp8
    matmul (hipBLASLt) writes bf16 only (torch ScaledBlas.cpp: "hipblaslt rowwise _scaled_mm only supports BFloat16
    output")."""
    return DTYPES if family(arch) == "nvidia" else ("bf16",)


def _swiglu_configs(which: str, args) -> Callable[[str], list[Config]]:
    def configs(arch: str) -> list[Config]:
        rows, cols, warps = swiglu_blocks(arch)[which]
        runs = fp8_format(arch) is not None
        out = []
        for dtype in (swiglu_dtypes(arch) if runs else ("bf16",)):
            for block_r in (RANK_BLOCKS if dtype == "bf16" and runs else RANK_BLOCKS[:1]):
                if block_r > swiglu_rank_limit(arch):
                    continue
                out.append(Config(_constexprs(args, BLOCK_M=rows, BLOCK_N=cols, BLOCK_R=block_r), {"x": dtype},
                                  warps, {"dtype": dtype, "rank_block": block_r}, runs))
        return out
    return configs


def _quantize_configs(arch: str) -> list[Config]:
    fmt = fp8_format(arch)
    rows, cols, warps = swiglu_blocks(arch)["quantize"]
    # an arch without fp8 never runs it; the OCP build shows whether it would compile
    return [Config(_constexprs(QUANTIZE_ROWS, FP8_MAX=FP8_MAX[fmt or "ocp"], BLOCK_M=rows, BLOCK_N=cols),
                   {"x": dtype, "fp8": TRITON_FP8[fmt or "ocp"]}, warps, {"dtype": dtype, "fp8": fmt or "ocp"},
                   fmt is not None)
            for dtype in (swiglu_dtypes(arch) if fmt else ("bf16",))]


# --- MoE grouped matmul (model/moe/grouped_triton.py) ---------------------------------------------------------

GROUPED_MM = _args("x_ptr:*{x} w_ptr:*{x} y_ptr:*{x} ends_ptr:*i32 tile_group_ptr:*i32 tile_row_ptr:*i32 K:i32 N:i32 "
                   "stride_xm:i32 stride_xk:i32 stride_wg:i32 stride_wk:i32 stride_wn:i32 stride_ym:i32 stride_yn:i32 "
                   "BLOCK_M:constexpr BLOCK_N:constexpr BLOCK_K:constexpr")
GROUPED_WEIGHT_GRAD = _args("x_ptr:*{x} dy_ptr:*{x} dw_ptr:*{x} ends_ptr:*i32 K:i32 N:i32 stride_xm:i32 stride_xk:i32 "
                            "stride_dym:i32 stride_dyn:i32 stride_dwg:i32 stride_dwk:i32 stride_dwn:i32 "
                            "BLOCK_M:constexpr BLOCK_N:constexpr BLOCK_K:constexpr")
# (K, N) of the three products an expert's projection runs: the expert's matrix (wide both ways: the widest tile,
# which any rank above 64 also gets), the LoRA A factor (narrow output: the rank) and B (narrow reduction: the rank).
GROUPED_SHAPES = {"expert": (2048, 768), "lora_a": (2048, 16), "lora_b": (16, 768)}


def _grouped_configs(args) -> Callable[[str], list[Config]]:
    def configs(arch: str) -> list[Config]:
        out = []
        for dtype in DTYPES:
            for product, (k, n) in GROUPED_SHAPES.items():
                if dtype != "bf16" and product != "expert":
                    continue
                m, bn, bk, warps = grouped_blocks(k, n, dtype, arch)
                out.append(Config(_constexprs(args, BLOCK_M=m, BLOCK_N=bn, BLOCK_K=bk), {"x": dtype}, warps,
                                  {"dtype": dtype, "product": product}))
        return out
    return configs


# --- decode attention (model/decode/kernels/attention_triton.py) ----------------------------------------------

ATTENTION_SPLIT = _args("Q:*{x} K:*{x} V:*{x} L:*i64 O_part:*fp32 M_part:*fp32 S_part:*fp32 scaling:fp32 window:i32 "
                        "chunk:i32 stride_qr:i32 stride_qh:i32 stride_ks:i32 stride_kh:i32 stride_kc:i32 stride_vs:i32 "
                        "stride_vh:i32 stride_vc:i32 SPLITS:constexpr G:constexpr BLOCK_G:constexpr D:constexpr "
                        "BLOCK_D:constexpr BLOCK:constexpr IEEE:constexpr")
ATTENTION_MERGE = _args("O_part:*fp32 M_part:*fp32 S_part:*fp32 Out:*{x} SPLITS:constexpr BLOCK_S:constexpr "
                        "D:constexpr BLOCK_D:constexpr")
HEAD_DIMS = (64, 128, HEAD_DIM_LIMIT)
# One representative group size (query heads per kv head: 7 is Qwen2.5-0.5B's, padded to 16 like every group up
# to 16) and split count (it only moves an index computation).
ATTENTION_GROUP, ATTENTION_SPLITS = 7, 8


def _split_configs(arch: str) -> list[Config]:
    out = []
    for dtype in DTYPES:
        for dim in (HEAD_DIMS if dtype == "bf16" else (128,)):
            b = attention_blocks(ATTENTION_GROUP, dim, ATTENTION_SPLITS, dtype, arch)
            out.append(Config(_constexprs(ATTENTION_SPLIT, SPLITS=ATTENTION_SPLITS, G=ATTENTION_GROUP,
                                          BLOCK_G=b["BLOCK_G"], D=dim, BLOCK_D=b["BLOCK_D"], BLOCK=b["BLOCK"],
                                          IEEE=dtype == "fp32"),
                              {"x": dtype}, b["split_warps"], {"dtype": dtype, "head_dim": dim}))
    return out


def _merge_configs(arch: str) -> list[Config]:
    """Splits range from 1 to ATTENTION_TARGET_PROGRAMS (one row, one kv head, a long cache): both ends."""
    out = []
    for dtype in DTYPES:
        for dim in (HEAD_DIMS if dtype == "bf16" else (128,)):
            for splits in ((2, ATTENTION_TARGET_PROGRAMS) if dtype == "bf16" else (ATTENTION_TARGET_PROGRAMS,)):
                b = attention_blocks(ATTENTION_GROUP, dim, splits, dtype, arch)
                out.append(Config(_constexprs(ATTENTION_MERGE, SPLITS=splits, BLOCK_S=b["BLOCK_S"], D=dim,
                                              BLOCK_D=b["BLOCK_D"]),
                                  {"x": dtype}, b["merge_warps"], {"dtype": dtype, "head_dim": dim, "splits": splits}))
    return out


# --- decode LoRA banks (model/decode/kernels/bgmv_triton.py) --------------------------------------------------

BGMV_SHRINK = _args("X:*{x} A:*{w} Index:*i64 Parts:*fp32 stride_x:i32 stride_ae:i32 stride_ar:i32 K:i32 "
                    "R:constexpr BLOCK_R:constexpr SPLITS:constexpr BLOCK:constexpr")
BGMV_EXPAND = _args("Parts:*fp32 B:*{w} Scale:*fp32 Index:*i64 Y:*{x} stride_be:i32 stride_bn:i32 stride_se:i32 "
                    "stride_sn:i32 stride_y:i32 N:i32 R:constexpr BLOCK_R:constexpr SPLITS:constexpr "
                    "BLOCK_S:constexpr BLOCK:constexpr")
BGMV_RANKS = (8, 16, 64, LORA_RANK_LIMIT)
# The projections' input widths at both ends: Qwen2.5-0.5B's hidden size (4 shrink programs a row) and Qwen2.5-72B's
# MLP width (116: the expand then adds 116 partial sums, padded to 128).
BGMV_WIDTHS = (896, 29568)


def _bgmv_configs(which: str) -> Callable[[str], list[Config]]:
    """Activations in the model's dtype; the banks in the adapters' (fp32 while GRPO trains them under bf16)."""
    def configs(arch: str) -> list[Config]:
        out = []
        for x, w in (("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp32")):
            for rank in (BGMV_RANKS if (x, w) == ("bf16", "bf16") else BGMV_RANKS[:1]):
                for width in (BGMV_WIDTHS if which == "expand" and (x, w) == ("bf16", "bf16") else BGMV_WIDTHS[:1]):
                    block_r, (splits, block_s) = bgmv_rank_block(rank), bgmv_blocks(width)
                    tags = {"dtype": x, "adapter_dtype": w, "rank": rank}
                    if which == "shrink":
                        constexprs = _constexprs(BGMV_SHRINK, R=rank, BLOCK_R=block_r, SPLITS=splits,
                                                 BLOCK=BGMV_BLOCK_K)
                        warps = bgmv_warps(block_r, BGMV_BLOCK_K, arch)
                    else:
                        constexprs = _constexprs(BGMV_EXPAND, R=rank, BLOCK_R=block_r, SPLITS=splits,
                                                 BLOCK_S=block_s, BLOCK=BGMV_BLOCK_N)
                        warps = bgmv_warps(block_r, max(block_s, BGMV_BLOCK_N), arch)
                        tags["width"] = width
                    out.append(Config(constexprs, {"x": x, "w": w}, warps, tags))
        return out
    return configs


# --- decode fused small ops and sampling (fused_triton.py, sample_triton.py) ---------------------------------

ADD_NORM = _args("H:*{x} A:*{x} X:*{x} W:*{x} PreW:*{x} stride_h:i32 stride_a:i32 stride_x:i32 N:i32 eps:fp32 "
                 "pre_eps:fp32 HAS_ADD:constexpr HAS_PRE:constexpr GEMMA:constexpr PRE_GEMMA:constexpr BLOCK:constexpr")
ROTARY_STORE = _args("Q:*{x} K:*{x} V:*{x} QW:*{x} KW:*{x} Cos:*{x} Sin:*{x} L:*i64 Keys:*{x} Values:*{x} "
                     "stride_qr:i32 stride_kr:i32 stride_vr:i32 stride_cs:i32 stride_ks:i32 stride_kh:i32 "
                     "stride_kc:i32 stride_vs:i32 stride_vh:i32 stride_vc:i32 q_eps:fp32 k_eps:fp32 HEADS:constexpr "
                     "D:constexpr BLOCK_D:constexpr HAS_NORM:constexpr GEMMA:constexpr")
ACT_MUL = _args("G:*{x} U:*{x} Out:*{x} N:i32 stride_g:i32 stride_u:i32 stride_o:i32 GELU:constexpr BLOCK:constexpr")
SAMPLE_TOP = _args("Logits:*{x} Seen:*{seen} Penalty:*fp32 Top:*fp32 Best:*i64 Bad:*i32 V:i32 stride_l:i32 "
                   "stride_s:i32 CHUNKS:constexpr PENALTY:constexpr CHUNK:constexpr BLOCK:constexpr")
SAMPLE_DRAW = _args("Logits:*{x} Seen:*{seen} Temperature:*fp32 MinP:*fp32 Penalty:*fp32 Seeds:*i64 Top:*fp32 "
                    "Score:*fp32 Drawn:*i64 V:i32 stride_l:i32 stride_s:i32 greedy_below:fp32 CHUNKS:constexpr "
                    "BLOCK_C:constexpr PENALTY:constexpr CHUNK:constexpr BLOCK:constexpr HASH_A:constexpr "
                    "HASH_B:constexpr M32:constexpr WEYL:constexpr")
SAMPLE_PICK = _args("Temperature:*fp32 Top:*fp32 Best:*i64 Bad:*i32 Score:*fp32 Drawn:*i64 Tokens:*i64 Broken:*i8 "
                    "greedy_below:fp32 CHUNKS:constexpr BLOCK_C:constexpr SAMPLE:constexpr")
# (HAS_ADD, HAS_PRE, GEMMA, PRE_GEMMA) of the decode step's norm calls: a llama-style layer's first norm and its
# add + norm, a Gemma layer's first norm and its add of a normed output + norm.
NORM_KINDS = {"llama": (False, False, False, False), "llama_add": (True, False, False, False),
              "gemma": (False, False, True, False), "gemma_add": (True, True, True, True)}
NORM_WIDTHS = (1024, NORM_WIDTH_LIMIT)
# The hash constants of sampling.py (copied, not imported: sampling.py loads torch; a test holds them equal)
HASH_CONSTANTS = {"HASH_A": 0x7FEB352D, "HASH_B": 0x846CA68B, "M32": 0xFFFFFFFF, "WEYL": 0x9E3779B9}


def _add_norm_configs(arch: str) -> list[Config]:
    out = []
    for dtype in DTYPES:
        for kind, (add, pre, gemma, pre_gemma) in NORM_KINDS.items():
            if dtype != "bf16" and kind != "gemma_add":
                continue
            for width in (NORM_WIDTHS if dtype == "bf16" and kind == "gemma_add" else NORM_WIDTHS[:1]):
                block, warps = norm_block(width)
                out.append(Config(_constexprs(ADD_NORM, HAS_ADD=add, HAS_PRE=pre, GEMMA=gemma, PRE_GEMMA=pre_gemma,
                                              BLOCK=block), {"x": dtype}, warps,
                                  {"dtype": dtype, "norm": kind, "width": width}))
    return out


def _rotary_configs(arch: str) -> list[Config]:
    out = []
    for dtype in DTYPES:
        for norm, gemma in ((False, False), (True, False), (True, True)):
            if dtype != "bf16" and not gemma:
                continue
            for dim in ((128, HEAD_DIM_LIMIT) if dtype == "bf16" and gemma else (128,)):
                out.append(Config(_constexprs(ROTARY_STORE, HEADS=16, D=dim, BLOCK_D=next_power_of_2(dim),
                                              HAS_NORM=norm, GEMMA=gemma), {"x": dtype}, 4,
                                  {"dtype": dtype, "qk_norm": "gemma" if gemma else "llama" if norm else "none",
                                   "head_dim": dim}))
    return out


def _act_configs(arch: str) -> list[Config]:
    return [Config(_constexprs(ACT_MUL, GELU=gelu, BLOCK=ACT_BLOCK), {"x": dtype}, 4,
                   {"dtype": dtype, "act": "gelu_tanh" if gelu else "silu"})
            for dtype in DTYPES for gelu in ((False, True) if dtype == "bf16" else (True,))]


# The vocabulary's chunks: 64 for Gemma's 262,144 tokens, the largest vocabulary of the supported models (Qwen's
# 151,936 is 38: the same padded block of 64); CHUNKS only bounds loops and indexes.
SAMPLE_CHUNKS = -(-262144 // SAMPLE_CHUNK)


def _sample_configs(kernel: str) -> Callable[[str], list[Config]]:
    """Logits in the model's dtype; with and without the repetition penalty (Seen is its byte mask; without a
    penalty the launcher passes the int64 tokens buffer)."""
    def configs(arch: str) -> list[Config]:
        out = []
        block_c = max(2, next_power_of_2(SAMPLE_CHUNKS))
        for dtype in DTYPES:
            for penalty in ((False, True) if dtype == "bf16" else (True,)):
                types, tags = {"x": dtype, "seen": "u8" if penalty else "i64"}, {"dtype": dtype, "penalty": penalty}
                if kernel == "top":
                    constexprs = _constexprs(SAMPLE_TOP, CHUNKS=SAMPLE_CHUNKS, PENALTY=penalty, CHUNK=SAMPLE_CHUNK,
                                             BLOCK=SAMPLE_BLOCK_V)
                else:
                    constexprs = _constexprs(SAMPLE_DRAW, CHUNKS=SAMPLE_CHUNKS, BLOCK_C=block_c, PENALTY=penalty,
                                             CHUNK=SAMPLE_CHUNK, BLOCK=SAMPLE_BLOCK_V, **HASH_CONSTANTS)
                out.append(Config(constexprs, types, 4, tags))
        return out
    return configs


def _pick_configs(arch: str) -> list[Config]:
    block_c = max(2, next_power_of_2(SAMPLE_CHUNKS))
    return [Config(_constexprs(SAMPLE_PICK, CHUNKS=SAMPLE_CHUNKS, BLOCK_C=block_c, SAMPLE=sample), {}, 4,
                   {"sample": sample}) for sample in (False, True)]


SWIGLU, GROUPED = "steadytune.model.swiglu_triton", "steadytune.model.moe.grouped_triton"
DECODE = "steadytune.model.decode.kernels."

KERNELS: tuple[Kernel, ...] = (
    Kernel("swiglu.forward", "fused_swiglu", SWIGLU, "swiglu_lora_forward_kernel", SWIGLU_FORWARD,
           _swiglu_configs("forward", SWIGLU_FORWARD)),
    Kernel("swiglu.backward", "fused_swiglu", SWIGLU, "swiglu_lora_backward_kernel", SWIGLU_BACKWARD,
           _swiglu_configs("backward", SWIGLU_BACKWARD)),
    Kernel("swiglu.quantize_rows", "fused_swiglu", SWIGLU, "quantize_rows_kernel", QUANTIZE_ROWS, _quantize_configs),
    Kernel("moe.grouped_mm", "moe_grouped_mm", GROUPED, "_grouped_mm_kernel", GROUPED_MM, _grouped_configs(GROUPED_MM)),
    Kernel("moe.grouped_weight_grad", "moe_grouped_mm", GROUPED, "_grouped_weight_grad_kernel", GROUPED_WEIGHT_GRAD,
           _grouped_configs(GROUPED_WEIGHT_GRAD)),
    Kernel("decode.attention_split", "decode_kernels", DECODE + "attention_triton", "_split_kernel", ATTENTION_SPLIT,
           _split_configs),
    Kernel("decode.attention_merge", "decode_kernels", DECODE + "attention_triton", "_merge_kernel", ATTENTION_MERGE,
           _merge_configs),
    Kernel("decode.lora_shrink", "decode_kernels", DECODE + "bgmv_triton", "_shrink_kernel", BGMV_SHRINK,
           _bgmv_configs("shrink")),
    Kernel("decode.lora_expand", "decode_kernels", DECODE + "bgmv_triton", "_expand_kernel", BGMV_EXPAND,
           _bgmv_configs("expand")),
    Kernel("decode.add_norm", "decode_kernels", DECODE + "fused_triton", "_add_norm_kernel", ADD_NORM,
           _add_norm_configs),
    Kernel("decode.rotary_store", "decode_kernels", DECODE + "fused_triton", "_rotary_store_kernel", ROTARY_STORE,
           _rotary_configs),
    Kernel("decode.act_mul", "decode_kernels", DECODE + "fused_triton", "_act_mul_kernel", ACT_MUL, _act_configs),
    Kernel("decode.sample_top", "decode_kernels", DECODE + "sample_triton", "_chunk_top_kernel", SAMPLE_TOP,
           _sample_configs("top")),
    Kernel("decode.sample_draw", "decode_kernels", DECODE + "sample_triton", "_chunk_draw_kernel", SAMPLE_DRAW,
           _sample_configs("draw")),
    Kernel("decode.sample_pick", "decode_kernels", DECODE + "sample_triton", "_pick_kernel", SAMPLE_PICK,
           _pick_configs),
)

KERNELS_BY_NAME = {k.name: k for k in KERNELS}


def kernels_of(feature: str) -> list[Kernel]:
    return [k for k in KERNELS if k.feature == feature]


# ---------------------------------------------------------------------------------------------------------
# The launchers' view of the device
# ---------------------------------------------------------------------------------------------------------

# Triton's interpreter (tests on the CPU) runs the NVIDIA configuration.
INTERPRETER_ARCH = "sm_90"
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def dtype_name(dtype) -> str:
    """torch.bfloat16 -> 'bf16' (the catalogue's names), without importing torch here."""
    name = str(dtype).rsplit(".", 1)[-1]
    if name not in _TORCH_DTYPES:
        raise ValueError(f"the Triton kernels take bf16, fp16 or fp32, not {dtype}")
    return _TORCH_DTYPES[name]


@functools.lru_cache(maxsize=None)
def _cuda_arch(index: int) -> str:
    import torch  # lazy: the catalogue is read where torch does not import (doctor --from)

    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        return normalise_gfx(getattr(props, "gcnArchName", "") or "")
    return f"sm_{props.major}{props.minor}"


def device_arch(device) -> str:
    """The target of a torch device whose kernels a launcher picks: 'gfx942' on ROCm, 'sm_90' on CUDA;
    INTERPRETER_ARCH for the CPU (Triton's interpreter)."""
    if getattr(device, "type", "cpu") != "cuda":
        return INTERPRETER_ARCH
    if device.index is None:
        import torch  # lazy: as above

        return _cuda_arch(torch.cuda.current_device())
    return _cuda_arch(device.index)
