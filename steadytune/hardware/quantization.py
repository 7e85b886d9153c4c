"""The QLoRA side of the policy: whether bitsandbytes can quantise a base on this machine (installed, and recent enough
for this backend and GPU architecture), the dtype its 4-bit layers compute in, and which speed features compose with a
quantised base. Each answer comes with its reason (`train` records it, `doctor` prints the same function's answer).

Nothing here imports bitsandbytes or torch: the version is read from the installed package's metadata, so `doctor`
answers where neither imports, and `train` refuses before minutes of loading.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Optional

from packaging.version import InvalidVersion, Version

from steadytune.hardware.gpu_facts import BNB_NAN_FREE, BNB_NAN_SOURCE, arch_info, normalise_gfx
from steadytune.hardware.memory import run_memory_gib

# The floors, per backend, with where each comes from.
# - CUDA: transformers' own floor for load_in_4bit / load_in_8bit (transformers/utils/import_utils.py
#   BITSANDBYTES_MIN_VERSION, 0.46.1 in transformers 5.x).
# - CPU: the CPU backend steadytune's tests train with (0.50.2: 4-bit nf4/fp4 and 8-bit, forward and backward, on
#   the plain manylinux wheel); the 0.50 line is the first we ran, so it is the floor.
# - ROCm: the arch's first release with 4-bit kernels (gpu_facts.Arch.bnb_4bit: RDNA 0.49.0, bitsandbytes PR #1748;
#   CDNA 0.49.2, blocksize 64 on wave64, PR #1887; both recorded by unsloth PR #4161), and never below 0.50.0:
#   every earlier release decodes 4-bit weights to NaN on AMD GPUs (BNB_NAN_SOURCE).
BNB_CUDA_FLOOR = "0.46.1"
BNB_CPU_FLOOR = "0.50.0"
BNB_ROCM_FLOOR = BNB_NAN_FREE
GATE_SOURCE = ("ROCm: RDNA from 0.49.0 (bitsandbytes PR #1748), CDNA from 0.49.2 (PR #1887), NaN-free from 0.50.0 "
               f"({BNB_NAN_SOURCE}); CUDA: transformers' floor {BNB_CUDA_FLOOR}; CPU: the backend tested here, 0.50")


@dataclass(frozen=True)
class BnbStatus:
    usable: bool
    installed: Optional[str]     # the installed version, None when absent
    floor: str                   # the first release this machine accepts
    why: str
    fix: str = ""                # the exact command that makes it usable ("" when it is)


def installed_bitsandbytes() -> Optional[str]:
    """The installed bitsandbytes version from its metadata (never imported: a broken native library must not stop
    `doctor` or the config check)."""
    try:
        return importlib.metadata.version("bitsandbytes")
    except importlib.metadata.PackageNotFoundError:
        return None


def bnb_floor(backend: str, arch: Optional[str]) -> tuple[str, str]:
    """-> (first bitsandbytes release that quantises on this backend / arch, why)."""
    if backend == "rocm":
        base = normalise_gfx(arch) if arch else None
        row = arch_info(base) if base else None
        first = row.bnb_4bit if row is not None else None
        if row is not None and first is None:
            return "", f"no bitsandbytes wheel ships kernels for {base}"
        if first and Version(first) > Version(BNB_ROCM_FLOOR):
            return first, f"{base} ({row.family}) has 4-bit kernels from bitsandbytes {first}"
        family = f"{base} ({row.family}): 4-bit kernels from {first}; " if row is not None else ""
        return BNB_ROCM_FLOOR, f"{family}releases before {BNB_ROCM_FLOOR} decode 4-bit weights to NaN on AMD GPUs"
    if backend == "cuda":
        return BNB_CUDA_FLOOR, f"transformers loads 4-bit and 8-bit bases with bitsandbytes >= {BNB_CUDA_FLOOR}"
    if backend == "cpu":
        return BNB_CPU_FLOOR, f"bitsandbytes' CPU backend, as tested here from {BNB_CPU_FLOOR}"
    return "", f"bitsandbytes has no {backend} backend that steadytune has tried"


def bitsandbytes_status(backend: str, arch: Optional[str] = None, installed: Optional[str] = None,
                        look_up: bool = True) -> BnbStatus:
    """Whether quantization_bit can run here: bitsandbytes present and at least this backend's floor. `installed`:
    the version (doctor --from passes a saved machine's); with `look_up`, this environment's when not given."""
    if installed is None and look_up:
        installed = installed_bitsandbytes()
    floor, why = bnb_floor(backend, arch)
    if not floor:
        base = normalise_gfx(arch) if arch else "<your gfx>"
        fix = ("build it for this GPU: git clone https://github.com/bitsandbytes-foundation/bitsandbytes && cd "
               f"bitsandbytes && cmake -DCOMPUTE_BACKEND=hip -DBNB_ROCM_ARCH={base} -S . && make && pip install ."
               if backend == "rocm" else "train on a CUDA or ROCm GPU, or on the CPU")
        return BnbStatus(False, installed, "", why, fix)
    install = f"pip install 'bitsandbytes>={floor}'"
    if backend == "rocm":
        # The PyPI wheel carries the ROCm libraries (libbitsandbytes_rocm64 ... rocm72 in 0.50.x); --no-deps keeps pip
        # from replacing the ROCm torch with a PyPI build (pypa/pip #12902, ROCm/bitsandbytes #37).
        install = f"pip install --no-deps 'bitsandbytes>={floor}'"
    if installed is None:
        return BnbStatus(False, None, floor, f"bitsandbytes is not installed ({why})", install)
    try:
        version = Version(installed)
    except InvalidVersion:
        return BnbStatus(False, installed, floor, f"bitsandbytes {installed}: not a version steadytune can compare",
                         install.replace("pip install", "pip install -U"))
    if version < Version(floor):
        return BnbStatus(False, installed, floor, f"bitsandbytes {installed} is older than {floor}: {why}",
                         install.replace("pip install", "pip install -U"))
    return BnbStatus(True, installed, floor, f"bitsandbytes {installed} (>= {floor}: {why})")


def choose_compute_dtype(precision: str) -> tuple[str, str]:
    """-> (dtype the quantised layers dequantise to and multiply in, reason): the run's mixed precision, so a 4-bit
    matmul computes as the bf16 base's would (bnb_4bit_compute_dtype; LLaMA-Factory takes its compute dtype)."""
    name = {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "float32")
    return name, f"the run's precision ({precision}): the 4-bit weights dequantise to {name} for each matmul"


# Bytes a weight takes once quantised (bitsandbytes' layouts): 4-bit packs two weights a byte and keeps one fp32 absmax
# per block of 64; double quantisation stores those absmaxes in 8 bits with one fp32 constant per 256 of them (QLoRA
# paper, section 3: 0.5 -> 0.127 bits a parameter). 8-bit (LLM.int8) keeps one fp32 scale per output row (negligible).
QUANTISED_BYTES = {(4, False): 0.5 + 4 / 64, (4, True): 0.5 + 1 / 64 + 4 / (64 * 256), (8, False): 1.0, (8, True): 1.0}


def quantised_bytes_per_parameter(bits: int, double_quantization: bool) -> float:
    return QUANTISED_BYTES[(bits, bool(double_quantization) and bits == 4)]


def speed_blockers(quantization_bit: Optional[int]) -> dict[str, str]:
    """What a quantised base rules out among the speed features, from what bitsandbytes does in the step.

    8-bit (LLM.int8): every matmul picks the input's outlier columns (|x| > 6) from the values of that batch, a
    data-dependent split that syncs with the host: no CUDA graph can record it, and torch.compile breaks the graph
    there. 4-bit: the base matmul is one registered op (torch.ops.bitsandbytes.gemm_4bit, dequantise + matmul, with
    fake tensors for the compiler) and no host sync, so compile and graphs are left to the normal policy (graphs are
    checked against an eager micro-batch at start anyway); benchmarks/qlora_bench.py measures both on a GPU."""
    if quantization_bit == 8:
        why = ("quantization_bit 8: LLM.int8 splits each matmul's outlier columns by the values of the batch "
               "(a host sync, data-dependent shapes)")
        return {"cuda_graphs": why, "torch_compile": why}
    return {}


def quantized_memory(config, tokens: int, rank: int, checkpointing: bool, bits: int, double_quantization: bool,
                     base_bytes: float = 2.0, compiled: bool = False,
                     recompute_pointwise: bool = False, offloaded: bool = False) -> tuple[str, str]:
    """-> ('~7.7 GiB', the sum and the same run with an unquantised base): what `doctor --config` and the start-up
    print say a QLoRA run needs (hardware/memory.py's estimate with the quantised bytes a weight)."""
    need, parts = run_memory_gib(config, tokens, rank, checkpointing,
                                 quantised_bytes_per_parameter(bits, double_quantization), base_bytes, compiled,
                                 recompute_pointwise, offloaded)
    plain, _ = run_memory_gib(config, tokens, rank, checkpointing, None, base_bytes, compiled, recompute_pointwise,
                              offloaded)
    shown = f"~{need:.1f} GiB" if need >= 1 else f"~{need * 1024:.0f} MiB"
    return shown, f"{parts}; the same run on an unquantised base: ~{plain:.1f} GiB"
