"""The numerical canary: a few seconds of arithmetic on the GPU checked against the CPU, because some ROCm stacks
(a wrong override, a library without the arch's kernels, an APU's allocator past its real memory) return zeros or
garbage without raising anything. `steadytune doctor --canary` runs every check; `train` runs the cheap part at start
and stops with one line when it fails.

Checks, each on seeded inputs made on the CPU, run on the GPU and compared with the CPU's answer in fp32:
- matmul in each precision the run would use (fp32 and bf16 or fp16);
- attention (SDPA, causal) in the same precisions;
- every Triton kernel steadytune ships (the fused LoRA SwiGLU, the MoE grouped matmul, the decode step's split-K
  attention, LoRA bank, fused norm/activation and sampling kernels), against the torch arithmetic each replaces;
- an all-reduce across the visible GPUs (child processes; the sum checked on every rank);
- a large allocation, written and read back in full on the GPU, its checksum against the exact sum.

A result is wrong when it is not finite, when it is all zeros where the answer is not, or when its relative error
(Frobenius norm of the difference over that of the answer) passes the precision's tolerance: far above rounding,
far below what garbage gives. torch is imported inside the functions: doctor must load where torch does not.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from steadytune.doctor.findings import Finding
from steadytune.doctor.multi_gpu import run_allreduce_check
from steadytune.hardware.gpu_facts import arch_info

if TYPE_CHECKING:
    import torch

# Relative error allowed per precision: a few units of its rounding over a sum of hundreds of products (fp32 may run
# as TF32 on NVIDIA matrix cores). Garbage and zeros land near 1.
TOLERANCE = {"fp32": 5e-3, "bf16": 4e-2, "fp16": 1e-2}
CHEAP_ALLOCATION_GIB = 1.0      # the start-up check's allocation: enough to pass an APU's carve-out, quick to fill
FULL_ALLOCATION_SHARE = 0.8     # doctor --canary: this share of the free memory, in one block
MIN_ALLOCATION_ELEMENTS = 2**18  # 1 MiB of int32: below it the block says nothing about the allocator


@dataclass
class CanaryResult:
    name: str
    ok: bool
    detail: str
    seconds: float = 0.0
    skipped: str = ""           # why it did not run (no Triton, one GPU, ...)

    def line(self) -> str:
        if self.skipped:
            return f"{self.name}: skipped ({self.skipped})"
        return f"{self.name}: {'ok' if self.ok else 'WRONG'} ({self.detail}, {self.seconds * 1000:.0f} ms)"


def relative_error(got: "torch.Tensor", want: "torch.Tensor") -> float:
    got, want = got.detach().float().cpu(), want.detach().float().cpu()
    scale = float(want.norm()) or 1.0
    return float((got - want).norm()) / scale


def compare(name: str, got: "torch.Tensor", want: "torch.Tensor", tolerance: float, seconds: float = 0.0) -> CanaryResult:
    """The verdict on one result: finite, not zeros where the answer is not, within `tolerance` relative error."""
    import torch
    got_cpu, want_cpu = got.detach().float().cpu(), want.detach().float().cpu()
    if got_cpu.shape != want_cpu.shape:
        return CanaryResult(name, False, f"shape {tuple(got_cpu.shape)}, expected {tuple(want_cpu.shape)}", seconds)
    if not torch.isfinite(got_cpu).all():
        bad = int((~torch.isfinite(got_cpu)).sum())
        return CanaryResult(name, False, f"{bad} of {got_cpu.numel()} values are nan or inf", seconds)
    if not got_cpu.any() and want_cpu.any():
        return CanaryResult(name, False, "every value is zero", seconds)
    error = relative_error(got_cpu, want_cpu)
    return CanaryResult(name, error <= tolerance, f"relative error {error:.1e}, tolerance {tolerance:.0e}", seconds)


def _timed(function: Callable[[], "torch.Tensor"], device: "torch.device") -> tuple["torch.Tensor", float]:
    import torch
    start = time.perf_counter()
    out = function()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


def _dtype(name: str) -> "torch.dtype":
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _generator(seed: int) -> "torch.Generator":
    import torch
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------
# Dense arithmetic
# ---------------------------------------------------------------------------------------------------------

def check_matmul(device: "torch.device", precision: str, size: int = 1024) -> CanaryResult:
    import torch
    g = _generator(1)
    a = torch.randn(size, size, generator=g).to(_dtype(precision))
    b = torch.randn(size, size, generator=g).to(_dtype(precision))
    want = a.float() @ b.float()
    a_dev, b_dev = a.to(device), b.to(device)
    got, seconds = _timed(lambda: a_dev @ b_dev, device)
    return compare(f"matmul {precision} {size}x{size}", got, want, TOLERANCE[precision], seconds)


def check_attention(device: "torch.device", precision: str) -> CanaryResult:
    import torch
    import torch.nn.functional as F
    g = _generator(2)
    q, k, v = (torch.randn(2, 8, 256, 64, generator=g).to(_dtype(precision)) for _ in range(3))
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    qd, kd, vd = q.to(device), k.to(device), v.to(device)
    got, seconds = _timed(lambda: F.scaled_dot_product_attention(qd, kd, vd, is_causal=True), device)
    return compare(f"attention (SDPA, causal) {precision}", got, want, TOLERANCE[precision], seconds)


ALLOCATION_FILL_ELEMENTS = 1 << 24   # 128 MiB of int64 positions at a time beside the block


def check_allocation(device: "torch.device", gib: float) -> CanaryResult:
    """One block of `gib` GiB filled with a known pattern on the GPU and summed there: the exact sum, and the last
    elements read back, must come out. A broken allocator (or an APU past its real memory) returns zeros or stale
    data here without an error."""
    import torch
    name = f"allocation {gib:.2f} GiB"
    count = int(gib * 2**30) // 4
    modulus = 65521   # prime: the pattern does not line up with page or block sizes
    if count < MIN_ALLOCATION_ELEMENTS:   # (an empty block read back "exactly"; one below the tail's 4,096 "WRONG")
        return CanaryResult(name, True, "", skipped=f"{gib * 1024:.2f} MiB to allocate (a quarter of the free memory "
                                                    "at most) is too little to check; free GPU memory first")
    start = time.perf_counter()
    try:
        block = torch.empty(count, dtype=torch.int32, device=device)
        # filled a slice at a time from int64 positions: one arange over the block would need an int64 twin of it
        # (the H100's 62 GiB block asked for 125 GiB) and int32 positions wrap past 2**31 elements (8 GiB)
        for first in range(0, count, ALLOCATION_FILL_ELEMENTS):
            last = min(first + ALLOCATION_FILL_ELEMENTS, count)
            block[first:last] = torch.arange(first, last, dtype=torch.int64, device=device).remainder_(modulus)
    except torch.OutOfMemoryError as e:
        return CanaryResult(name, False, f"out of memory: {str(e).splitlines()[0][:120]}", time.perf_counter() - start)
    # summed a slice at a time too: sum(dtype=int64) over the whole block casts it to an int64 twin first
    got_sum = sum(int(block[first:first + ALLOCATION_FILL_ELEMENTS].sum(dtype=torch.int64))
                  for first in range(0, count, ALLOCATION_FILL_ELEMENTS))
    tail = block[-4096:].cpu()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    del block
    full, rest = divmod(count, modulus)
    want_sum = full * (modulus - 1) * modulus // 2 + rest * (rest - 1) // 2
    want_tail = torch.arange(count - 4096, count, dtype=torch.int64).remainder(modulus).to(torch.int32)
    if got_sum != want_sum or not torch.equal(tail, want_tail):
        return CanaryResult(name, False, f"read back {got_sum}, expected {want_sum} (the memory does not hold what "
                                         "was written)", seconds)
    return CanaryResult(name, True, "written and read back exactly", seconds)


# ---------------------------------------------------------------------------------------------------------
# steadytune's Triton kernels, each against the torch arithmetic it replaces
# ---------------------------------------------------------------------------------------------------------

def _fp8_gpu(device: "torch.device") -> bool:
    """Whether the GPU has fp8 (the fused SwiGLU runs over an fp8 base only): CDNA3/4 and RDNA4, NVIDIA Ada and newer."""
    import torch
    if device.type != "cuda":
        return True   # Triton's interpreter (the tests) emulates fp8 on the CPU
    if torch.version.hip:
        row = arch_info(getattr(torch.cuda.get_device_properties(device), "gcnArchName", ""))
        return bool(row and row.fp8)
    return torch.cuda.get_device_capability(device) >= (8, 9)


def _kernel_swiglu(device: "torch.device") -> list[CanaryResult]:
    import torch
    from steadytune.model import fused_swiglu as fs  # lazy: torch and Triton
    if not _fp8_gpu(device):
        return [CanaryResult("triton: fused LoRA SwiGLU", True, "", skipped="it runs over an fp8 base; this GPU has no "
                                                                           "fp8")]
    g = _generator(3)
    rows, width, rank = 40, 300, 4
    gate, up = torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)
    low_g, low_u = torch.randn(rows, rank, generator=g), torch.randn(rows, rank, generator=g)
    b_g, b_u = torch.randn(width, rank, generator=g) * 0.3, torch.randn(width, rank, generator=g) * 0.3
    a_d = torch.randn(rank, width, generator=g) * 0.1
    want = fs.reference_forward(gate, up, low_g, low_u, b_g, b_u, a_d)
    inputs = [t.to(device) for t in (gate, up, low_g, low_u, b_g, b_u, a_d)]
    got, seconds = _timed(lambda: fs._tiles_forward(*inputs), device)
    return [compare("triton: fused LoRA SwiGLU (forward)", got[0], want[0], TOLERANCE["fp32"], seconds),
            compare("triton: fused LoRA SwiGLU (down LoRA input)", got[3], want[3], TOLERANCE["fp32"])]


def _kernel_grouped(device: "torch.device") -> list[CanaryResult]:
    import torch
    from steadytune.model.moe.grouped import loop_grouped_mm  # lazy: torch and Triton
    from steadytune.model.moe.grouped_triton import triton_grouped_mm  # lazy: torch and Triton
    g = _generator(4)
    # bf16 as the experts run on a GPU; fp32 in Triton's CPU interpreter (the tests), whose bf16 loads are not exact
    precision = "bf16" if device.type == "cuda" else "fp32"
    x = torch.randn(96, 64, generator=g).to(_dtype(precision))
    w = torch.randn(4, 64, 48, generator=g).to(_dtype(precision))
    ends = torch.tensor([10, 10, 60, 96], dtype=torch.int32)   # an empty group too
    want = loop_grouped_mm(x.float(), w.float(), ends)
    xd, wd, ed = x.to(device), w.to(device), ends.to(device)
    got, seconds = _timed(lambda: triton_grouped_mm(xd, wd, ed), device)
    return [compare(f"triton: MoE grouped matmul {precision}", got, want, TOLERANCE[precision], seconds)]


def _kernel_decode(device: "torch.device") -> list[CanaryResult]:
    import torch
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from steadytune.model.decode.attention import sdpa_decode_attention  # lazy: torch and Triton
    from steadytune.model.decode.kernels import fused_triton  # lazy: torch and Triton
    from steadytune.model.decode.kernels.attention_triton import split_decode_attention  # lazy: torch and Triton
    from steadytune.model.decode.kernels.sample_triton import sample_rows_triton  # lazy: torch and Triton
    from steadytune.model.decode.lora_bank import LoraBank  # lazy: torch and Triton
    from steadytune.model.decode.norms import norm_of  # lazy: torch and Triton
    from steadytune.model.decode.ops import TorchOps  # lazy: torch and Triton
    from steadytune.model.decode.sampling import GREEDY, SamplingParams, sample_rows, settings_of  # lazy: torch and Triton
    torch.manual_seed(5)
    results = []
    ref = TorchOps()
    rows, heads, kv, dim, cap = 3, 4, 2, 64, 200
    keys = torch.randn(rows + 1, kv, cap, dim).to(torch.bfloat16)
    values = torch.randn_like(keys)
    q = torch.randn(rows, heads, dim).to(torch.bfloat16)
    lengths = torch.tensor([5, cap - 1, 70])
    want = sdpa_decode_attention(q.float(), keys.float(), values.float(), lengths, int(lengths.max()) + 1, None, 0.125)
    args = [t.to(device) for t in (q, keys, values, lengths)]
    got, seconds = _timed(lambda: split_decode_attention(*args, 512, None, 0.125), device)
    results.append(compare("triton: decode attention bf16", got, want, TOLERANCE["bf16"], seconds))

    parts = {"one": (torch.randn(4, 300), torch.randn(200, 4), 2.0), "two": (torch.randn(8, 300), torch.randn(200, 8), 0.5)}
    x, y, index = torch.randn(5, 300), torch.randn(5, 200), torch.tensor([0, 1, 2, 1, 2])
    want = LoraBank(parts, ["one", "two"]).apply(x, y.clone(), index, "torch")
    bank = LoraBank({k: (a.to(device), b.to(device), s) for k, (a, b, s) in parts.items()}, ["one", "two"])
    got, seconds = _timed(lambda: bank.apply(x.to(device), y.to(device), index.to(device), "triton"), device)
    results.append(compare("triton: LoRA bank (shrink/expand)", got, want, TOLERANCE["fp32"], seconds))

    module = LlamaRMSNorm(256, eps=1e-6)
    with torch.no_grad():
        module.weight.normal_()
    h, a = torch.randn(4, 256), torch.randn(4, 256)
    want = ref.add_norm(h.clone(), a, None, norm_of(module))[1]
    norm = norm_of(module.to(device))
    got, seconds = _timed(lambda: fused_triton.add_norm(h.to(device), a.to(device), None, norm)[1], device)
    results.append(compare("triton: residual add + RMSNorm", got, want, TOLERANCE["fp32"], seconds))
    gate, up = torch.randn(4, 700), torch.randn(4, 700)
    want = ref.act_mul(gate, up, torch.nn.SiLU(), "silu")
    got, seconds = _timed(lambda: fused_triton.act_mul(gate.to(device), up.to(device), "silu"), device)
    results.append(compare("triton: SiLU x up", got, want, TOLERANCE["fp32"], seconds))

    logits = torch.randn(4, 3000) * 3
    params = [SamplingParams(1, temperature=0.0) for _ in range(4)]
    want = sample_rows(logits, settings_of(params, [1, 2, 3, 4], [0] * 4, logits.device), GREEDY)[0]
    settings = settings_of(params, [1, 2, 3, 4], [0] * 4, device)
    got, seconds = _timed(lambda: sample_rows_triton(logits.to(device), settings, GREEDY, None)[0], device)
    same = torch.equal(got.cpu(), want)
    results.append(CanaryResult("triton: greedy sampling", same, "the same tokens as torch" if same else
                                f"tokens {got.cpu().tolist()}, expected {want.tolist()}", seconds))
    return results


TRITON_KERNELS: tuple[tuple[str, Callable[["torch.device"], list[CanaryResult]]], ...] = (
    ("fused LoRA SwiGLU", _kernel_swiglu), ("MoE grouped matmul", _kernel_grouped), ("decode step", _kernel_decode))


def check_triton_kernels(device: "torch.device") -> list[CanaryResult]:
    if importlib.util.find_spec("triton") is None:
        return [CanaryResult("triton kernels", True, "", skipped="Triton is not installed")]
    if device.type != "cuda":
        return [CanaryResult("triton kernels", True, "", skipped="no GPU (Triton kernels run on GPUs)")]
    results = []
    for name, run in TRITON_KERNELS:
        start = time.perf_counter()
        try:
            results += run(device)
        except Exception as e:   # a kernel that does not compile or launch is a failed check, not a crash of doctor
            results.append(CanaryResult(f"triton: {name}", False, f"raised {type(e).__name__}: {str(e).splitlines()[0][:160]}",
                                        time.perf_counter() - start))
    return results


def check_allreduce_values(world: int) -> CanaryResult:
    """An all-reduce across the visible GPUs in child processes, the sum checked on every rank (multi_gpu.py)."""
    if world < 2:
        return CanaryResult("all-reduce", True, "", skipped="fewer than 2 GPUs visible")
    start = time.perf_counter()
    finding = run_allreduce_check(world)
    ok = finding.severity != "error"
    return CanaryResult(f"all-reduce across {world} GPUs", ok, finding.what if ok else f"{finding.what}: {finding.why}",
                        time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------------------

def precisions_for(device: "torch.device", run_precision: Optional[str] = None) -> list[str]:
    """The precisions to check: the run's own (cheap part), else fp32 and every half precision the GPU has."""
    import torch
    if run_precision in TOLERANCE:
        return [run_precision]
    found = ["fp32"]
    if device.type == "cuda":
        found += ["bf16"] if torch.cuda.is_bf16_supported() else []
        found.append("fp16")
    return found


def run_canary(device: Optional["torch.device"] = None, cheap: bool = False,
               run_precision: Optional[str] = None) -> list[CanaryResult]:
    """Every check (or the cheap part: the run's precision, attention, a 1 GiB allocation) on `device` (the first
    GPU by default)."""
    import torch
    device = device or torch.device("cuda", torch.cuda.current_device())
    results = []
    for precision in precisions_for(device, run_precision):
        results.append(_guarded(f"matmul {precision}", lambda: check_matmul(device, precision, 512 if cheap else 1024)))
        results.append(_guarded(f"attention (SDPA, causal) {precision}", lambda: check_attention(device, precision)))
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        gib = min(CHEAP_ALLOCATION_GIB, free / 2**30 / 4) if cheap else free * FULL_ALLOCATION_SHARE / 2**30
    else:
        gib = 1 / 64   # the CPU path (tests, a machine without GPU) checks the same arithmetic on a small block
    results.append(_guarded("allocation", lambda: check_allocation(device, gib)))
    if not cheap:
        results += check_triton_kernels(device)
        results.append(check_allreduce_values(torch.cuda.device_count() if device.type == "cuda" else 0))
    return results


def _guarded(name: str, check: Callable[[], CanaryResult]) -> CanaryResult:
    """A check whose arithmetic raised ("HIP error: invalid device function" from a library without the arch's
    kernels, a device that returns no data) is a failed check naming the error, as for the Triton kernels: not a
    traceback out of doctor or train, and never a pass."""
    start = time.perf_counter()
    try:
        return check()
    except Exception as e:   # noqa: BLE001 - whatever the device raised is the finding
        return CanaryResult(name, False, f"raised {type(e).__name__}: {' '.join(str(e).split())[:160]}",
                            time.perf_counter() - start)


def canary_findings(results: list[CanaryResult]) -> list[Finding]:
    """One finding per check: an error for a wrong result, an info for a right or skipped one."""
    findings = []
    for r in results:
        if r.skipped:
            findings.append(Finding.info("canary", r.line()))
        elif r.ok:
            findings.append(Finding.info("canary", r.line()))
        elif _raised(r):
            findings.append(Finding.error("canary", r.line(),
                                          "the check's arithmetic raised on the GPU instead of computing: a library "
                                          "without this arch's kernels, a wrong HSA_OVERRIDE_GFX_VERSION or a driver "
                                          "fault",
                                          "steadytune doctor (the override and the arch's wheel), then steadytune doctor "
                                          "--canary again; sudo dmesg | grep -i amdgpu for faults"))
        else:
            findings.append(Finding.error("canary", r.line(),
                                          "the GPU returned a wrong result without raising an error: a wrong "
                                          "HSA_OVERRIDE_GFX_VERSION, a library without this arch's kernels, or memory "
                                          "the driver cannot really back (an APU past its carve-out or GTT)",
                                          "steadytune doctor (the override and the arch's wheel), then steadytune doctor "
                                          "--canary again; sudo dmesg | grep -i amdgpu for faults"))
    return findings


def _raised(result: CanaryResult) -> bool:
    return not result.ok and result.detail.startswith("raised ")


def failed_line(results: list[CanaryResult]) -> Optional[str]:
    """The one line `train` stops with, or None when every check passed."""
    wrong = [r for r in results if not r.ok and not r.skipped]
    if not wrong:
        return None
    what = ("the GPU's arithmetic raised errors" if any(_raised(r) for r in wrong) else
            "the GPU computes wrong numbers without an error")
    return (what + " (" + "; ".join(r.line() for r in wrong) +
            "): run `steadytune doctor --canary` for every check, or pass --force to train anyway")


def canary_on_this_machine(backend: str) -> list[Finding]:
    """`doctor --canary`: every check on the first GPU, or one line saying there is none to check."""
    if backend not in ("rocm", "cuda"):
        return [Finding.info("canary", "no GPU: the canary checks a GPU's arithmetic against the CPU; nothing to check")]
    return canary_findings(run_canary())


def startup_canary(precision: str) -> list[CanaryResult]:
    """The cheap part, as `train` runs it before loading the model: the run's precision, attention, 1 GiB."""
    import torch
    if not torch.cuda.is_available():
        return []
    return run_canary(cheap=True, run_precision=precision)
