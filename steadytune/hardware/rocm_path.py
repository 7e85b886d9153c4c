"""What differs on ROCm, in one place: for an AMD architecture, the choice a run makes on each point where ROCm is
not CUDA, each with its reason and its source. Read by the run plan (doctor/plan.py: `doctor --from` a machine's
saved outputs, or `doctor --config` on the machine) and by docs/rocm.md's table.

The facts come from the arch table and the known-issue tables (hardware/gpu_facts.py), the speed policy
(hardware/speed.py) and the bitsandbytes floors (hardware/quantization.py), so each is written once. What needs the
model side (the fp8 base's format, which Triton kernels build there) the plan adds from model/ (this package imports
nothing of it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from steadytune.hardware.archs import bf16_verdict
from steadytune.hardware.gpu_facts import (
    RDNA_P2P_SOURCE,
    aotriton_regressions_for,
    arch_info,
    normalise_gfx,
    rccl_issues_for,
    rccl_settings,
)
from steadytune.hardware.quantization import GATE_SOURCE, bnb_floor

# The six AMD targets the kernels are built for (model/kernel_catalogue.AMD_TARGETS; a test holds them equal)
PLANNED_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201")

SDPA_SOURCE = ("aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (AOTriton check_gpu, the experimental switch); "
               "research/rocm.md section 6")
CK_SOURCE = ("flash-attention setup.py: CK arch list gfx90a/gfx942/gfx950 in v2.8.3, RDNA3/4 only on main after PR "
             "#2400; research/rocm.md section 7")
GRAPHS_SOURCE = ("pytorch PR #88202 (hipGraph support: torch.cuda.graphs on ROCm replay HIP graphs); "
                 "hardware/speed.py plan_speed")
COMPILE_SOURCE = ("ROCm torch wheels require pytorch-triton-rocm, which Inductor's Triton kernels compile with; "
                  "hardware/speed.py plan_speed")


@dataclass(frozen=True)
class PathEntry:
    topic: str       # precision | attention | flash_attn | bitsandbytes | rccl | cuda_graphs | torch_compile
    choice: str      # what a run takes there
    why: str
    source: str


def _attention(arch: str, rocm: Optional[tuple[int, int]]) -> PathEntry:
    row = arch_info(arch)
    sdpa = row.sdpa if row is not None else "unknown"
    if sdpa == "native":
        entry = PathEntry("attention", "SDPA with AOTriton's flash / memory-efficient kernels",
                          f"the AOTriton in current ROCm torch wheels builds {arch} natively", SDPA_SOURCE)
    elif sdpa == "experimental":
        entry = PathEntry("attention", "SDPA's math kernel (AOTriton's flash only with "
                          "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1)",
                          f"AOTriton marks {arch} experimental: without the switch SDPA warns once and falls back to "
                          "math; `steadytune doctor --attention-bench` times both on the machine", SDPA_SOURCE)
    elif sdpa == "none":
        entry = PathEntry("attention", "SDPA's math kernel", f"AOTriton has no kernels for {arch}", SDPA_SOURCE)
    else:
        entry = PathEntry("attention", "SDPA, its kernel checked at start",
                          f"no AOTriton record for {arch}: train runs SDPA and doctor's live check says which kernel "
                          "answers", SDPA_SOURCE)
    slower = aotriton_regressions_for(arch, rocm)
    if slower:
        entry = PathEntry(entry.topic, entry.choice, f"{entry.why}; {'; '.join(r.what for r in slower)} "
                          f"({'; '.join(r.workaround for r in slower)})",
                          f"{entry.source}; {'; '.join(r.source for r in slower)}")
    return entry


def _flash_attn(arch: str) -> PathEntry:
    row = arch_info(arch)
    if row is not None and row.flash_attn_ck:
        return PathEntry("flash_attn", "SDPA by default; flash_attn: fa2 takes flash-attn's CK backend",
                         f"flash-attn's CK backend builds for {arch} in release v2.8.3", CK_SOURCE)
    return PathEntry("flash_attn", "SDPA (flash_attn: fa2 is refused unless a flash-attn build imports and runs)",
                     f"flash-attn v2.8.3's CK backend does not build for {arch} (its Triton backend is opt-in: "
                     "FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE at build and run time)", CK_SOURCE)


def _bitsandbytes(arch: str) -> PathEntry:
    floor, why = bnb_floor("rocm", arch)
    if not floor:
        return PathEntry("bitsandbytes", "quantization_bit refused (no wheel has its kernels)", why, GATE_SOURCE)
    return PathEntry("bitsandbytes", f"quantization_bit: 4/8 with bitsandbytes >= {floor} (pip install --no-deps)",
                     why, GATE_SOURCE)


def _rccl(arch: str, gpus: int, rocm: Optional[tuple[int, int]]) -> PathEntry:
    if gpus < 2:
        return PathEntry("rccl", "not used (one GPU)", "collectives run only between two or more GPUs",
                         "hardware/gpu_facts.py RCCL_ISSUES")
    archs = [arch] * gpus
    settings = rccl_settings(archs, None, rocm)
    issues = rccl_issues_for(archs, None, rocm)
    if not settings:
        return PathEntry("rccl", "RCCL as it comes", f"no known RCCL hang or slowdown on {gpus} x {arch}",
                         "hardware/gpu_facts.py RCCL_ISSUES")
    reasons = [i.symptom for i in issues] + (["consumer RDNA boards often lack PCIe peer-to-peer"]
                                             if settings.get("NCCL_P2P_DISABLE") else [])
    sources = [i.source for i in issues] + ([RDNA_P2P_SOURCE] if settings.get("NCCL_P2P_DISABLE") else [])
    return PathEntry("rccl", " ".join(f"{k}={v}" for k, v in settings.items()), "; ".join(reasons), "; ".join(sources))


def rocm_path(arch: str, gpus: int = 1, rocm: Optional[tuple[int, int]] = None) -> list[PathEntry]:
    """The ROCm-specific choices of a run on `gpus` GPUs of this arch (ROCm version if known), each with its reason
    and source."""
    arch = normalise_gfx(arch)
    native, bf16_why = bf16_verdict(arch)
    precision = PathEntry("precision", "bf16" if native else "fp16 with loss scaling (fp16: auto) or fp32",
                          bf16_why + (" (torch.cuda.is_bf16_supported() says True on every AMD GPU: not asked)"
                                      if native is False else ""),
                          "research/rocm.md section 5; hardware/archs.py")
    return [precision, _attention(arch, rocm), _flash_attn(arch), _bitsandbytes(arch), _rccl(arch, gpus, rocm),
            PathEntry("cuda_graphs", "off (cuda_graphs: true is refused on ROCm)",
                      "HIP graphs replay under torch.cuda.graphs, but no run has been timed or checked against eager on "
                      "an AMD GPU yet", GRAPHS_SOURCE),
            PathEntry("torch_compile", "off by default (torch_compile: true turns it on)",
                      "Inductor compiles Triton kernels for AMD too, but its time has not been measured there; with it "
                      "off, fp8_base and fused_swiglu stay off by default as well", COMPILE_SOURCE)]
