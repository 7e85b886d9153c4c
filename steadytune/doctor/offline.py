"""Offline mode: diagnose some other machine from saved outputs of rocm-smi, amd-smi, rocminfo and nvidia-smi
(`doctor --from DIR`, `--rocm-smi FILE`, ...). The parsing is smi_parsers.py's job; this module turns the GPUs
read there into findings, with the same policy (hardware.py) that `train` would apply on that machine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Optional

from steadytune.doctor.checks import discrete_behind_igpu
from steadytune.doctor.findings import Finding

if TYPE_CHECKING:
    from steadytune.smi_parsers import GpuRecord, ParseResult


def read_saved_outputs(paths: Iterable[Path], expected_tool: Optional[Mapping[Path, str]] = None) -> list["ParseResult"]:
    """Parse each file (every output in it); unreadable files become ParseResults with a problem."""
    from steadytune.smi_parsers import ParseResult, parse_text

    results: list[ParseResult] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            results.append(ParseResult(tool="unknown", source=path.name, problems=[f"could not read {path}: {e.strerror}"]))
            continue
        if "\x00" in text:
            results.append(ParseResult(tool="unknown", source=path.name, problems=[f"could not read {path}: binary file"]))
            continue
        parsed = parse_text(text, path.name)
        wanted = (expected_tool or {}).get(path)
        for result in parsed:
            if wanted and result.tool not in (wanted, "unknown"):
                result.notes.append(f"{result.source} was given as {wanted} output but reads as {result.tool} output")
        results.extend(parsed)
    return results


def diagnose_gpus(gpus: list["GpuRecord"], check: str = "saved-outputs") -> list[Finding]:
    """Findings about a list of GPUs read from tool outputs: what each is, and rows 3, 5, 11 and 13."""
    from steadytune.hardware import (GPU, OFFICIAL_WHEEL_ARCHS, HardwareInfo, bf16_verdict, choose_precision,
                                     override_for_arch)

    findings = []
    for g in gpus:
        native, why = bf16_verdict(g.arch)
        memory = f"{g.memory_gib:g} GiB" if g.memory_gib is not None else "memory ?"
        verdict = "bf16 native" if native else "bf16 unknown" if native is None else "no native bf16"
        findings.append(Finding.info(check, f"GPU {g.index}: {g.name or 'model not shown'}, {g.arch or 'arch ?'}, {memory}, {verdict}"
                                            + (", integrated" if g.integrated else ""),
                                     f"arch from {g.arch_source}" if g.arch_source else ""))
        if g.arch is None:
            findings.append(Finding.warn(check, f"GPU {g.index}: architecture unknown",
                                         "this output does not name the model or its target",
                                         "also save `rocminfo` (or `amd-smi static --asic`, or `nvidia-smi`) from that machine"))
        elif g.vendor == "amd" and g.arch not in OFFICIAL_WHEEL_ARCHS and not g.integrated:
            override = override_for_arch(g.arch)
            findings.append(Finding.warn(check, f"GPU {g.index}: {g.arch} is not a target of the pytorch.org ROCm wheels",
                                         "expect 'hipErrorNoBinaryForGpu' / 'invalid device function'",
                                         f"export HSA_OVERRIDE_GFX_VERSION={override}" if override else
                                         "use a torch build for this architecture (current ROCm no longer supports it)"))
        if native is False and not g.integrated:
            findings.append(Finding.warn(check, f"GPU {g.index}: {why}", "bf16: true would abort or run emulated",
                                         "bf16: auto (fp32) or fp16: true with loss scaling"))
        if g.arch == "gfx90a":
            findings.append(Finding.info(check, f"GPU {g.index}: gfx90a flushes fp16 denormals in matrix cores",
                                         "fp16 training can slowly diverge on torch >= 2.7", "train in bf16"))
    discrete = discrete_behind_igpu(gpus)
    if discrete:
        findings.append(Finding.warn(check, f"GPU 0 is an integrated GPU ({gpus[0].name}, {gpus[0].arch})",
                                     "tools that take device 0 would train on the iGPU",
                                     f"export HIP_VISIBLE_DEVICES={discrete}   (or ROCR_VISIBLE_DEVICES=<dGPU UUID>)"))
    usable = [g for g in gpus if g.arch]
    if usable:
        backend = "cuda" if usable[0].vendor == "nvidia" else "rocm"
        info = HardwareInfo(backend=backend, torch_version="(offline)", gpus=[
            GPU(index=g.index, name=g.name or "?", arch=g.arch, memory_gib=g.memory_gib or 0.0, integrated=g.integrated)
            for g in usable])
        dtype, reason = choose_precision(info, "auto", False)
        findings.append(Finding.info(check, f"train on this machine with bf16: auto would use {dtype}", reason))
    return findings


def run_offline_checks(paths: list[Path], expected_tool: Optional[Mapping[Path, str]] = None) -> tuple[list["GpuRecord"], list[Finding]]:
    from steadytune.smi_parsers import merge_results

    results = read_saved_outputs(paths, expected_tool)
    findings: list[Finding] = []
    for result in results:
        findings += [Finding.warn("saved-outputs", p, fix="save the full, unedited output of the tool") for p in result.problems]
        findings += [Finding.info("saved-outputs", f"{result.source}: {n}") for n in result.notes]
        if result.tool != "unknown" and not result.problems:
            findings.append(Finding.info("saved-outputs", f"{result.source}: {result.tool} output, {len(result.gpus)} GPU(s)"))
    gpus, conflicts = merge_results(results)
    findings += [Finding.warn("saved-outputs", c) for c in conflicts]
    if not gpus:
        findings.append(Finding.error("saved-outputs", "could not read any GPU from the given outputs",
                                      fix="give rocminfo, amd-smi static, rocm-smi --showproductname --json or nvidia-smi output"))
    findings += diagnose_gpus(gpus)
    return gpus, findings
