"""What an AMD architecture gets, read from the tables in hardware/gpu_facts.py: which torch wheels carry code for it
and the exact install line, whether HSA_OVERRIDE_GFX_VERSION is a safe stand-in or a trap, native bf16 and
fp8, and which fused attention path runs (with the AOTriton experimental switch where it is needed). Used by
live and offline mode alike, so a saved gfx1151 capture gets the same advice as a gfx1151 machine."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

import yaml

from steadytune.doctor.findings import Finding
from steadytune.hardware.gpu_facts import (
    OFFICIAL_WHEEL_ARCHS,
    aotriton_regressions_for,
    arch_info,
    current_stable_wheel,
    first_stable_wheel,
    install_lines,
    kernel_bugs_for,
    normalise_gfx,
)

AOTRITON_SWITCH = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"


def _install_text(arch: str) -> str:
    lines = install_lines(arch)
    return "; or ".join(f"{line}   [{where}]" for where, line in lines)


def wheel_finding(arch: str, label: str, check: str, compiled: Optional[Iterable[str]] = None,
                  whose: str = "this torch") -> Optional[Finding]:
    """Whether a torch wheel has code for `arch`. `compiled` is that torch's arch list (live mode: get_arch_list();
    offline: the list of the wheel a saved collect_env names, `whose` saying which); without it, the pytorch.org
    wheels of the current release are meant."""
    row = arch_info(arch)
    targets = set(compiled) if compiled is not None else set(OFFICIAL_WHEEL_ARCHS)
    if arch in targets:
        first = first_stable_wheel(arch)
        since = f" (since {first.name}, torch {first.torch})" if first else ""
        return Finding.info(check, f"{label}: {arch} is a target of "
                                   f"{whose if compiled is not None else current_stable_wheel().name}{since}",
                            fix=_install_text(arch) if compiled is None else "")
    lines = install_lines(arch)
    override = row.override if row else None
    if override is not None and override.verdict == "works":
        stand_in = f"or export HSA_OVERRIDE_GFX_VERSION={override.value} ({override.why})"
    else:
        stand_in = ""
    if not lines:
        return Finding.warn(check, f"{label}: no torch wheel carries code for {arch}",
                            (row.note if row else "") or "neither pytorch.org nor AMD's nightlies build for it",
                            stand_in.removeprefix("or ") or "train on the CPU, or build torch with PYTORCH_ROCM_ARCH=" + arch)
    where = whose if compiled is not None else current_stable_wheel().name
    return Finding.warn(check, f"{label}: {where} has no working code for {arch}",
                        "expect 'hipErrorNoBinaryForGpu' / 'invalid device function'",
                        _install_text(arch) + (f"; {stand_in}" if stand_in else ""))


def override_finding(arch: str, label: str, check: str) -> Optional[Finding]:
    """HSA_OVERRIDE_GFX_VERSION for this arch: not needed, a safe stand-in, or a trap."""
    row = arch_info(arch)
    if row is None or row.override.verdict == "none" and arch in OFFICIAL_WHEEL_ARCHS:
        return None
    o = row.override
    if o.verdict == "trap":
        # the trap is a training one: inference tools (Ollama, llama.cpp) are offered the value with its caveat
        # (fixes.override_value), so the warning says whose run it guards
        return Finding.warn(check, f"{label}: HSA_OVERRIDE_GFX_VERSION={o.value} is a trap on {arch} for training",
                            o.why, "for torch / steadytune training do not set it; install a torch with native " + arch
                            + " code (see the wheel finding); an inference tool may run with it, with that caveat")
    if o.verdict == "works":
        state = "not needed (the wheels have it)" if arch in OFFICIAL_WHEEL_ARCHS else "a safe stand-in"
        return Finding.info(check, f"{label}: HSA_OVERRIDE_GFX_VERSION={o.value} on {arch} is {state}", o.why)
    if o.verdict == "unverified":
        return Finding.info(check, f"{label}: no HSA_OVERRIDE_GFX_VERSION value is known to work on {arch}", o.why)
    return None


def capability_finding(arch: str, label: str, check: str) -> Optional[Finding]:
    """Native bf16/fp8 and the fused attention path of this arch."""
    row = arch_info(arch)
    if row is None:
        return None
    fp8 = {"fnuz": "fp8 (FNUZ e4m3/e5m2)", "ocp": "fp8 (OCP e4m3/e5m2)", None: "no fp8"}[row.fp8]
    attention = {
        "native": "SDPA flash/mem-efficient (AOTriton) run natively",
        "experimental": f"SDPA flash/mem-efficient are experimental in AOTriton: without {AOTRITON_SWITCH}=1 torch "
                        "falls back to the slow math kernel",
        "none": "no AOTriton kernels: SDPA uses the math kernel (slow, correct)",
        "unknown": "AOTriton support not listed: doctor's live SDPA probe tells",
    }[row.sdpa]
    what = (f"{label}: {arch} ({row.family}{', APU' if row.kind == 'apu' else ''}): "
            f"{'native bf16' if row.bf16 else 'no native bf16'}, {fp8}; {attention}"
            + ("; flash-attn CK builds for it" if row.flash_attn_ck else ""))
    fix = (f"measure it here: steadytune doctor --attention-bench (SDPA forward+backward with and without "
           f"{AOTRITON_SWITCH}=1); export {AOTRITON_SWITCH}=1 only if the fused kernels win and match"
           if row.sdpa == "experimental" else "")
    return (Finding.warn if row.sdpa == "experimental" else Finding.info)(check, what, row.note, fix)


def torch_rocm(torch_version: Optional[str], hip_version: Optional[str] = None) -> Optional[tuple[int, int]]:
    """The ROCm release a torch belongs to: its '+rocmX.Y' label (TheRock: '+rocm10.0.0a...'), else torch.version.hip."""
    match = re.search(r"\+rocm(\d+)\.(\d+)", torch_version or "")
    if match:
        return int(match.group(1)), int(match.group(2))
    match = re.match(r"(\d+)\.(\d+)", hip_version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def aotriton_findings(arch: str, label: str, check: str, rocm: Optional[tuple[int, int]],
                      env: Optional[dict] = None) -> list[Finding]:
    """Known AOTriton regressions on this arch (gfx950 + AOTriton 0.13b: TheRock #7696): measure, or warn."""
    findings = []
    for r in aotriton_regressions_for(arch, rocm):
        where = f"ROCm {rocm[0]}.{rocm[1]} ships AOTriton {r.aotriton}" if rocm else \
            f"AOTriton {r.aotriton} (ROCm {r.rocm_from[0]}.{r.rocm_from[1]} on) may be the one here"
        make = Finding.warn if rocm else Finding.info
        findings.append(make(check, f"{label}: {where}: {r.what.split(':')[0]} on {normalise_gfx(arch)}", 
                             f"{r.what} ({r.source})", r.workaround))
    return findings


def kernel_bug_findings(arch: str, label: str, check: str, torch_version: Optional[str]) -> list[Finding]:
    """Kernels that crash on this arch in this torch wheel (the null-kernel guards of 2026)."""
    return [Finding.warn(check, f"{label}: {b.op} crashes on {normalise_gfx(arch)} in torch {torch_version}",
                         f"{b.symptom} ({b.source})", f"pip install {b.fix}; dense (non-MoE) models do not call it")
            for b in kernel_bugs_for(arch, torch_version or "")]


def arch_findings(arch: Optional[str], label: str, check: str, compiled: Optional[Iterable[str]] = None,
                  whose: str = "this torch", torch_version: Optional[str] = None,
                  rocm: Optional[tuple[int, int]] = None) -> list[Finding]:
    """Everything the tables say about one AMD GPU's architecture (and, given the torch version, that wheel)."""
    if not arch or not arch.startswith("gfx"):
        return []
    arch = normalise_gfx(arch)
    found = [wheel_finding(arch, label, check, compiled, whose), override_finding(arch, label, check),
             capability_finding(arch, label, check)]
    return ([f for f in found if f is not None] + aotriton_findings(arch, label, check, rocm)
            + kernel_bug_findings(arch, label, check, torch_version))


# --- each tool's own way to get code for an arch ------------------------------------------------------------

BUILDS = Path(__file__).with_name("arch_builds.yaml")
_BUILD_FIELDS = {"name", "cuda", "rocm", "windows", "source"}
_PLACEHOLDERS = {"cuda": {"cc", "cc_dot", "sm", "cu"}, "rocm": {"arch"}, "windows": {"arch"}}


class ArchBuildsError(ValueError):
    """arch_builds.yaml is malformed (an editing mistake, caught when it loads)."""


@dataclass(frozen=True)
class ToolBuild:
    tool: str
    name: str
    cuda: Optional[str]
    rocm: Optional[str]
    windows: Optional[str]
    source: str


@lru_cache(maxsize=1)
def tool_builds() -> dict[str, ToolBuild]:
    """arch_builds.yaml, checked: known fields only, a name and a source for each tool, and only the placeholders
    each remedy can be given."""
    raw = yaml.safe_load(BUILDS.read_text(encoding="utf-8")) or {}
    builds = {}
    for tool, item in raw.items():
        if not isinstance(item, dict) or not item.get("name") or not item.get("source"):
            raise ArchBuildsError(f"{BUILDS.name}: {tool}: needs a name and a source")
        unknown = set(item) - _BUILD_FIELDS
        if unknown:
            raise ArchBuildsError(f"{BUILDS.name}: {tool}: unknown field(s) {', '.join(sorted(unknown))}")
        for where, allowed in _PLACEHOLDERS.items():
            used = set(re.findall(r"\{(\w+)\}", item.get(where) or ""))
            if used - allowed:
                raise ArchBuildsError(f"{BUILDS.name}: {tool}.{where}: unknown placeholder(s) "
                                      f"{', '.join(sorted(used - allowed))} (allowed: {', '.join(sorted(allowed))})")
        builds[tool] = ToolBuild(tool, item["name"], item.get("cuda"), item.get("rocm"), item.get("windows"),
                                 item["source"])
    return builds


def build_fix(tool: Optional[str], arch: Optional[str], windows: bool = False) -> Optional[str]:
    """The failing tool's own remedy for an arch its binary lacks (arch_builds.yaml), in this GPU's values, or None
    where the table has no entry for that tool and vendor."""
    build = tool_builds().get(tool or "")
    if build is None or not arch:
        return None
    if arch.startswith("sm_"):
        cc = arch[3:]
        # the pytorch.org CUDA index that carries it: Blackwell from cu128; Maxwell/Pascal left the newest builds;
        # Jetson Thor's sm_110 exists only from CUDA 13 (the cu130 wheels, aarch64); cu126 is the legacy build for sm_50-sm_70
        cu = "cu126" if int(cc) <= 70 else "cu130" if int(cc) == 110 else "cu128"   # Volta: cu128 dropped it in 2.11
        return build.cuda.format(cc=cc, cc_dot=f"{cc[:-1]}.{cc[-1]}", sm=arch, cu=cu) if build.cuda else None
    template = (build.windows if windows else None) or build.rocm
    return template.format(arch=normalise_gfx(arch)) if template else None
