"""The attention check: what `train` will use, which SDPA kernels really run on this GPU (a tiny causal
attention under each backend, with the warnings torch prints), and whether flash-attn is usable (rows 14-19)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from typing import Any, Mapping, Optional

from steadytune.doctor.archs import torch_rocm
from steadytune.doctor.findings import Finding
from steadytune.doctor.probe import Probe
from steadytune.hardware.archs import arch_supports_bf16
from steadytune.hardware.backend import device_for
from steadytune.hardware.gpu_facts import aotriton_regressions_for, arch_info
from steadytune.hardware.policy import choose_attention, choose_packing_attention, flash_attn_status

AOTRITON_SWITCH = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"


def _sdpa_backends():
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "mem-efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def probe_sdpa(device: Any, dtype: Any) -> tuple[dict[str, Optional[str]], list[str]]:
    """Run a tiny causal attention under each SDPA backend. -> ({backend: None if it ran else the error}, warnings)."""
    import torch
    from torch.nn.attention import sdpa_kernel

    results: dict[str, Optional[str]] = {}
    caught: list[str] = []
    q = torch.randn(1, 2, 16, 64, device=device, dtype=dtype)
    for name, backend in _sdpa_backends().items():
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
                if q.is_cuda:
                    torch.cuda.synchronize()
                results[name] = None
            except Exception as e:
                results[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        caught.extend(str(r.message) for r in records)
    return results, caught


def probe_sdpa_memory(device: Any, dtype: Any, lengths: tuple[int, int] = (2048, 4096),
                      heads: int = 8, head_dim: int = 64) -> tuple[float, float]:
    """Peak extra GPU memory (MiB) of one causal SDPA forward+backward with torch's default kernel choice, at two
    lengths. A fused kernel (flash / mem-efficient) needs memory linear in the length; the math fallback holds the
    whole length x length score matrix, so doubling the length quadruples it."""
    import torch

    peaks = []
    for length in lengths:
        q = torch.randn(1, heads, length, head_dim, device=device, dtype=dtype, requires_grad=True)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        torch.cuda.synchronize(device)
        peaks.append((torch.cuda.max_memory_allocated(device) - base) / 2**20)
        del q
    return peaks[0], peaks[1]


def diagnose_sdpa_memory(short_mib: float, long_mib: float, lengths: tuple[int, int], backend: str,
                         env: Mapping[str, str]) -> Finding:
    """Linear or quadratic growth -> which path SDPA takes by default, and on ROCm what to do about it."""
    growth = long_mib / max(short_mib, 1e-6)
    where = f"{short_mib:.0f} MiB at {lengths[0]} tokens, {long_mib:.0f} MiB at {lengths[1]}"
    if growth < 3.0:
        return Finding.info("attention", f"SDPA takes a fused path here: attention memory grows linearly with the "
                                         f"length ({where})")
    fix = "upgrade torch; meanwhile keep cutoff_len short or use packing"
    why = "the math kernel holds the full length x length score matrix"
    if backend == "rocm":
        switch = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"
        if env.get(switch) == "1":
            why += f"; {switch}=1 is set, so AOTriton has no kernel for this GPU at all"
        else:
            why += ("; on RDNA cards AOTriton's flash kernels are experimental and off unless the variable is set "
                    "before torch is imported")
            fix = (f"export {switch}=1 in the shell before starting Python (setting os.environ after `import torch` "
                   "has no effect), then check the loss curve")
    return Finding.warn("attention", f"SDPA falls back to the math kernel: attention memory grows with the square of "
                                     f"the length ({where})", why, fix)


def diagnose_sdpa(results: Mapping[str, Optional[str]], caught: list[str], backend: str,
                  torch_version: str, hip_version: Optional[str]) -> list[Finding]:
    """Rows 14-16 from the probe's outcome and the warnings torch printed."""
    working = [n for n, err in results.items() if err is None]
    findings = [Finding.info("attention", f"SDPA backends that run here: {', '.join(working) or 'none'}")]
    text = "\n".join(caught)
    if "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" in text:
        findings.append(Finding.warn("attention", "fused SDPA is experimental for this AMD GPU and falls back to the slow math kernel",
                                     "the bundled AOTriton marks this architecture experimental",
                                     "export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 (check the loss curve), or upgrade torch"))
    elif re.search(r"not compiled with (flash|memory efficient) attention", text, re.IGNORECASE):
        findings.append(Finding.warn("attention", "this torch was built without fused attention for this GPU (math fallback: slow)",
                                     "ROCm builds before AOTriton (torch <= 2.2) lack flash and mem-efficient SDPA",
                                     "upgrade torch to a current ROCm wheel"))
    elif backend in ("rocm", "cuda") and results and all(results.get(n) for n in ("flash", "mem-efficient")):
        findings.append(Finding.warn("attention", "neither flash nor mem-efficient SDPA runs on this GPU: attention uses the math kernel",
                                     "; ".join(f"{n}: {results[n]}" for n in ("flash", "mem-efficient")),
                                     "upgrade torch; training still works, only slower"))
    if hip_version and torch_version.startswith("2.6.0") and hip_version.startswith("6.2"):
        findings.append(Finding.warn("attention", "torch 2.6.0 + ROCm 6.2: mem-efficient SDPA gives wrong outputs with a padding mask",
                                     "AOTriton bug (pytorch #147460)", "upgrade torch (or disable the mem-efficient backend)"))
    return findings


# flash-attn's CK backend compiles only for these archs in release v2.8.3 (row 17).
FLASH_ATTN_CK_ARCHS = ("gfx90a", "gfx942", "gfx950")


def explain_flash_attn_failure(message: str) -> tuple[str, str]:
    """Rows 18-19: -> (why, fix) for a flash-attn import/run error."""
    if "flash_attn_2_cuda" in message and ("No module" in message or "ModuleNotFound" in message):
        return ("a Triton-backend (ROCm) build of flash-attn <= 2.8.3 imports its CK extension unless the variable is set",
                "export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE")
    if "undefined symbol" in message:
        return ("the flash-attn binary was built against another torch version",
                "pip install --no-build-isolation --force-reinstall flash-attn (rebuild against this torch)")
    return ("flash-attn is installed but unusable here", "use flash_attn: sdpa (the default) or reinstall flash-attn for this platform")


def packing_attention_finding(info) -> Finding:
    """How `train` keeps packed examples apart here: the same policy call train makes (hardware/policy.py), which on a
    GPU runs each variable-length kernel once against SDPA before trusting it."""
    attention, kernel, why = choose_packing_attention(info, "auto")
    name = f"{attention} ({kernel})" if kernel else attention
    return Finding.info("packing", f"packed rows keep examples apart with {name}", why)


def check_attention(probe: Probe) -> list[Finding]:
    """What flash_attn: auto picks, the SDPA backends that run here, and flash-attn's state."""
    import torch

    info, findings = probe.info, []
    impl, why = choose_attention(info, "auto")
    findings.append(Finding.info("attention", f"train with flash_attn: auto uses {impl}", why))
    if probe.run_kernels:
        gpu = info.primary
        dtype = (torch.float32 if gpu is None else torch.bfloat16 if arch_supports_bf16(gpu.arch) else torch.float16)
        results, caught = probe_sdpa(device_for(info), dtype)
        findings += diagnose_sdpa(results, caught, info.backend, probe.torch_version, probe.hip_version)
        if info.backend in ("rocm", "cuda"):
            lengths = (2048, 4096)
            try:
                findings.append(diagnose_sdpa_memory(*probe_sdpa_memory(device_for(info), dtype, lengths), lengths,
                                                     info.backend, probe.env))
            except Exception as e:   # out of memory on a small or busy GPU: say so, the other checks stand
                findings.append(Finding.info("attention", f"SDPA memory probe did not run: {type(e).__name__}"))
    if probe.run_kernels or info.backend == "cpu":
        findings.append(packing_attention_finding(info))
    if importlib.util.find_spec("flash_attn") is not None:
        ok, status = flash_attn_status() if probe.run_kernels else (True, "flash-attn is installed (not run)")
        if ok:
            findings.append(Finding.info("attention", status, fix="flash_attn: fa2 in the YAML uses it"))
        else:
            why, fix = explain_flash_attn_failure(status)
            findings.append(Finding.warn("attention", status, why, fix))
    elif probe.flavour == "rocm" and info.primary is not None and info.primary.arch not in FLASH_ATTN_CK_ARCHS:
        findings.append(Finding.info("attention", f"flash-attn is not installed; its CK build does not support {info.primary.arch}",
                                     f"release v2.8.3 builds CK kernels only for {', '.join(FLASH_ATTN_CK_ARCHS)}",
                                     "nothing to do: SDPA is the default; for flash-attn use its Triton backend "
                                     "(FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE pip install --no-build-isolation flash-attn)"))
    return findings


# --- measure, not a blanket flag (`doctor --attention-bench`) ------------------------------------------------
# TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL is read when SDPA first runs, so each setting gets a process of its own; one
# that crashes or hangs is killed by the time limit and reported, never taking doctor down with it.
_BENCH_SCRIPT = r"""
import json, sys, time
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

device, dtype, iters = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3])
b, h, s, d = (int(x) for x in sys.argv[4].split(","))
torch.manual_seed(0)
base = [torch.randn(b, h, s, d, device=device, dtype=dtype) for _ in range(3)]
grad = torch.randn(b, h, s, d, device=device, dtype=dtype)

def sync():
    if device.startswith("cuda"):
        torch.cuda.synchronize()

def step():
    q, k, v = (t.detach().requires_grad_() for t in base)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(grad)
    return [out.detach().float(), q.grad.float(), k.grad.float(), v.grad.float()]

results = {}
with sdpa_kernel([SDPBackend.MATH]):
    reference = step()
for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("mem-efficient", SDPBackend.EFFICIENT_ATTENTION),
                      ("math", SDPBackend.MATH)):
    try:
        with sdpa_kernel([backend]):
            got = step()
            sync()
            start = time.perf_counter()
            for _ in range(iters):
                step()
            sync()
        ms = (time.perf_counter() - start) * 1000 / iters
        err = max(float((a - r).abs().max() / r.abs().max().clamp_min(1e-6)) for a, r in zip(got, reference))
        results[name] = {"ms": round(ms, 3), "rel_err": err}
    except Exception as e:
        results[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
print("BENCH " + json.dumps(results))
"""

BENCH_SHAPE = (4, 16, 1024, 64)      # batch, heads, tokens, head dim: a LoRA micro-batch of a 1-3B model
TOLERANCE = {"float32": 1e-3, "bfloat16": 3e-2, "float16": 1e-2}


def run_attention_bench(device: str, dtype: str, env: Mapping[str, str], shape: tuple[int, int, int, int] = BENCH_SHAPE,
                        iters: int = 5, timeout: float = 120.0) -> dict[str, dict]:
    """SDPA forward+backward under each backend in a child process -> {backend: {ms, rel_err} or {error}}; the whole
    run's failure as {'run': {'error': ...}}."""
    try:
        done = subprocess.run([sys.executable, "-c", _BENCH_SCRIPT, device, dtype, str(iters), ",".join(map(str, shape))],
                              capture_output=True, text=True, timeout=timeout, env=dict(env))
    except subprocess.TimeoutExpired:
        return {"run": {"error": f"did not finish in {timeout:.0f} s"}}
    line = next((l for l in done.stdout.splitlines() if l.startswith("BENCH ")), None)
    if line is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return {"run": {"error": tail[0][:200]}}
    return json.loads(line[len("BENCH "):])


def _fastest(results: Mapping[str, dict], dtype: str, fused_only: bool = False) -> Optional[tuple[str, float]]:
    tolerance = TOLERANCE.get(dtype, 3e-2)
    ok = [(n, r["ms"]) for n, r in results.items() if "ms" in r and r.get("rel_err", 0) <= tolerance
          and (n != "math" or not fused_only)]
    return min(ok, key=lambda x: x[1]) if ok else None


def _describe(results: Mapping[str, dict]) -> str:
    def one(name: str, r: dict) -> str:
        if "ms" in r:
            return f"{name} {r['ms']:g} ms"
        unavailable = re.search(r"No (viable backend|available kernel)", r["error"])
        return f"{name} not available" if unavailable else f"{name}: {r['error']}"
    return ", ".join(one(n, r) for n, r in results.items())


def attention_bench_findings(plain: Mapping[str, dict], switched: Optional[Mapping[str, dict]], arch: Optional[str],
                             dtype: str, rocm: Optional[tuple[int, int]], env: Mapping[str, str],
                             shape: tuple[int, int, int, int] = BENCH_SHAPE) -> list[Finding]:
    """What the measurement says: which SDPA kernel is fastest (and correct) here, whether the AOTriton experimental
    switch pays on this GPU, and, where AOTriton is known to have regressed (gfx950 + 0.13b), the numbers to judge by."""
    what = f"SDPA forward+backward, {dtype}, batch x heads x tokens x dim = {'x'.join(map(str, shape))}"
    findings = [Finding.info("attention-bench", f"{what}: {_describe(plain)}"
                             + (f"; with {AOTRITON_SWITCH}=1: {_describe(switched)}" if switched else ""))]
    tolerance = TOLERANCE.get(dtype, 3e-2)
    wrong = [f"{n} (relative error {r['rel_err']:.2g})" for res in (plain, switched or {}) for n, r in res.items()
             if "ms" in r and r["rel_err"] > tolerance]
    if wrong:
        findings.append(Finding.warn("attention-bench", f"SDPA kernels that disagree with the math kernel here: "
                                                        f"{', '.join(dict.fromkeys(wrong))}",
                                     f"tolerance {tolerance:g} for {dtype}", "keep them off: do not set the switch; "
                                     "report it upstream with this output"))
    best_plain = _fastest(plain, dtype)
    if switched is not None and env.get(AOTRITON_SWITCH) != "1":
        best_fused = _fastest(switched, dtype, fused_only=True)
        if best_fused and best_plain and best_fused[1] < 0.9 * best_plain[1]:
            findings.append(Finding.warn("attention-bench", f"{AOTRITON_SWITCH}=1 makes attention faster here: "
                                                            f"{best_fused[0]} {best_fused[1]:g} ms against "
                                                            f"{best_plain[0]} {best_plain[1]:g} ms, same results",
                                         f"{arch or 'this GPU'} is experimental in the bundled AOTriton, so without the "
                                         "switch torch falls back", f"export {AOTRITON_SWITCH}=1 in the shell before "
                                                                     "`steadytune train`"))
        elif best_fused:
            findings.append(Finding.info("attention-bench", f"{AOTRITON_SWITCH}=1 does not pay here: {best_fused[0]} "
                                                            f"{best_fused[1]:g} ms against {best_plain[0] if best_plain else '?'} "
                                                            f"{best_plain[1] if best_plain else '?'} ms", fix="leave it unset"))
    for r in aotriton_regressions_for(arch or "", rocm):
        flash, efficient = plain.get("flash", {}), plain.get("mem-efficient", {})
        if "ms" in flash and "ms" in efficient and flash["ms"] > 1.1 * efficient["ms"]:
            findings.append(Finding.warn("attention-bench", f"flash attention ({flash['ms']:g} ms) is slower than "
                                                            f"mem-efficient ({efficient['ms']:g} ms) here",
                                         f"{r.what} ({r.source})", r.workaround))
    return findings


def check_attention_bench(probe: Probe) -> list[Finding]:
    """`doctor --attention-bench`: measure SDPA on the GPU train uses, with and without the AOTriton switch where the
    arch table marks it experimental."""
    info = probe.info
    gpu = info.primary
    if gpu is None:
        dtype, device, shape = "float32", "cpu", (1, 2, 128, 32)
    else:
        dtype = "bfloat16" if arch_supports_bf16(gpu.arch) else "float16"
        device, shape = f"cuda:{gpu.index}", BENCH_SHAPE
    env = {k: v for k, v in (probe.env or os.environ).items() if k != AOTRITON_SWITCH}
    plain = run_attention_bench(device, dtype, env, shape)
    row = arch_info(gpu.arch) if gpu is not None else None
    switched = (run_attention_bench(device, dtype, {**env, AOTRITON_SWITCH: "1"}, shape)
                if probe.flavour == "rocm" and row is not None and row.sdpa in ("experimental", "unknown") else None)
    return attention_bench_findings(plain, switched, gpu.arch if gpu else None, dtype,
                                    torch_rocm(probe.torch_version, probe.hip_version), probe.env, shape)
