"""An AMD GPU run on code that is not its own where AMD's TheRock publishes a build with its own code: the fix is
that build (the wheel index of the GPU's family, rocm.nightlies.amd.com/v2/<family>/), without the override.

Two readings. TheRock's `rocm-sdk targets` prints the gfx targets the installed rocm wheels carry: the machine's GPU
missing from that list is a wheel of another family (the gfx110X-dgpu wheels carried gfx1100-1102 only; the
gfx110X-all family adds the APUs' gfx1103). And an APU (Strix Halo gfx1151, Strix Point gfx1150, Phoenix gfx1103)
spoofed with HSA_OVERRIDE_GFX_VERSION as a discrete card faults or hangs once real compute runs: the stand-in's
kernels are not built for the APU's register file and memory, and a ROCm without the APU's own code (a distribution's
ROCm 6.x for gfx1151) leaves nothing else to run.

Sources: ROCm/TheRock#1184 (a Radeon 780M, `rocm-sdk targets` listing gfx1100;gfx1101;gfx1102, the override hanging
the system; closed once gfx110X-all replaced gfx110X-dgpu); ROCm/legacy-rocm-build#5824 (gfx1151 with
HSA_OVERRIDE_GFX_VERSION=11.0.0 on Fedora's ROCm 6.3.1: "Memory access fault by GPU"; the gfx1151 TheRock wheels,
pip install --index-url https://rocm.nightlies.amd.com/v2/gfx1151/ --pre torch torchaudio torchvision)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import therock_family
from steadytune.doctor.rules.arch.overrides import _target
from steadytune.doctor.rules.base import OVERRIDE, Context, Diagnosis, _first, _lines_matching, _make, rule, _text
from steadytune.hardware.gpu_facts import arch_info, normalise_gfx

_TARGETS_CMD = re.compile(r"(?i)\brocm[-_]sdk\s+targets\b")
_LISTING = re.compile(r"^\W*((?:gfx[0-9a-fA-FxX]+\s*[;,]\s*)+gfx[0-9a-fA-FxX]+)\s*$")
_FAULT = re.compile(r"(?i)Memory access fault|page fault|GPU Hang|\bhangs?\b|\bhung\b|\bfreez\w+|"
                    r"HSA_STATUS_ERROR_(?:INVALID_ISA|EXCEPTION|MEMORY_APERTURE_VIOLATION)")


def _install(family: str) -> str:
    return (f"unset {OVERRIDE}; pip uninstall -y torch torchvision torchaudio; pip install --index-url "
            f"https://rocm.nightlies.amd.com/v2/{family}/ --pre torch torchaudio torchvision (TheRock's build for "
            f"the {family} family, which brings its own ROCm into the venv); python -c 'import torch; "
            "print(torch.cuda.get_arch_list())' must list the GPU's own gfx")


@rule("arch-missing")
def therock_wheels_of_another_family(ctx: Context) -> Optional[Diagnosis]:
    """`rocm-sdk targets` printed a list without the machine's GPU."""
    asked = _lines_matching(ctx, _TARGETS_CMD)
    if not asked:
        return None
    lines = ctx.sheet.lines
    listing = None
    for n in range(asked[0].line_no, min(asked[0].line_no + 4, len(lines) + 1)):
        m = _LISTING.match(lines[n - 1])
        if m:
            listing = (n, [normalise_gfx(t) for t in re.split(r"\s*[;,]\s*", m.group(1))])
            break
    if listing is None:
        return None
    listed = [t.lower() for t in listing[1]]
    arch, fact = ctx.arch()
    if not arch or not arch.startswith("gfx") or arch.lower() in listed:
        return None
    family = therock_family(arch)
    if family is None:
        return None
    said = _lines_matching(ctx, r".")[listing[0] - 1:listing[0]]
    return _first(_make("arch-missing", f"the TheRock wheels installed carry no {arch} code",
                        f"rocm-sdk targets lists {';'.join(listing[1])}: the rocm and torch wheels installed were "
                        f"built for another GPU family than this {arch}, so kernels fail with invalid device function "
                        f"(and an override only runs another chip's code)",
                        _install(family), [f for f in (fact,) if f], asked[:1] + said))


@rule("arch-missing")
def apu_faults_on_a_stand_in(ctx: Context) -> Optional[Diagnosis]:
    """An APU with TheRock's own build, run with an override to another target, faulting or hanging."""
    setting = ctx.override()
    if setting is None:
        return None
    target = _target(setting.value.split("=", 1)[1])
    arch, fact = ctx.arch()
    row = arch_info(arch) if arch else None
    if target is None or row is None or row.kind != "apu" or normalise_gfx(arch) == target:
        return None
    family = therock_family(arch)
    faults = _lines_matching(ctx, _FAULT)
    if family is None or not faults:
        return None
    rocm = [f.value for f in ctx.sheet.of("rocm")]
    where = f" (ROCm {rocm[0]} here has no {arch} code of its own)" if rocm else ""
    return _make("arch-missing", f"{arch} faults on {target} code",
                 f"{setting.value} makes this {arch} APU run {target} kernels{where}: they are built for a discrete "
                 f"card, and on the APU they fault or hang as soon as real compute runs; TheRock publishes builds with "
                 f"{arch}'s own code", _install(family), [f for f in (setting, fact) if f], faults[:2])


# a TheRock index named in the paste, by its family: the nightly S3 pages (therock-nightly-python.s3...amazonaws.com/
# <family>/index.html) or rocm.nightlies.amd.com/v2/<family>/
_THEROCK_INDEX = re.compile(r"(?i)(?:therock-nightly-python\.s3[\w.-]*\.amazonaws\.com|rocm\.nightlies\.amd\.com/v2)/"
                            r"(gfx[0-9a-z]+(?:-[a-z]+)?)/")
_NO_CODE = re.compile(r"(?i)invalid device function|hipErrorNoBinaryForGpu|no kernel image|no compatible code objects|"
                      r"Unable to find code object|HSA_STATUS_ERROR_INVALID_ISA")


def _index_covers(index_family: str, arch: str) -> bool:
    """The family's wheels carry this arch: gfx110X-dgpu the discrete gfx1100-1102, gfx110X-all those and the APU's
    gfx1103, gfx120X-all gfx1200/1201, a single target (gfx1151) itself."""
    base, _, kind = index_family.lower().partition("-")
    pattern = base[:-1] + "[0-9a-f]" if base.endswith("x") else base
    if not re.fullmatch(pattern, arch.lower()):
        return False
    row = arch_info(arch)
    return not (kind == "dgpu" and row is not None and row.kind == "apu")


@rule("arch-missing")
def therock_index_of_another_family(ctx: Context) -> Optional[Diagnosis]:
    """TheRock's wheels came from the index of another GPU family than the machine's (RELEASES.md: one index per
    family, gfx110X-dgpu, gfx1151, gfx120X-all, gfx94X-dcgpu ...), and the GPU's kernels are missing."""
    used = [(n, m.group(1)) for n, line in enumerate(ctx.sheet.lines, 1) for m in _THEROCK_INDEX.finditer(line)]
    if not used:
        return None
    arch, fact = ctx.arch()
    if not arch or not arch.startswith("gfx"):
        return None
    family = therock_family(arch)
    index_family = used[-1][1]
    if family is None or _index_covers(index_family, arch):
        return None
    failed = ctx.of("arch-missing") or _lines_matching(ctx, _NO_CODE)
    if not failed:
        return None
    said = _lines_matching(ctx, _THEROCK_INDEX)
    return _first(_make("arch-missing", f"TheRock wheels of the {index_family} family on a {arch}",
                        f"the wheels came from TheRock's {index_family} index, whose libraries carry that family's "
                        f"targets only; this GPU is {arch}, of the {family} family, so its kernels are missing",
                        _install(family), [f for f in (fact,) if f], said[:1] + failed[:1]))
