"""MIOpen picking a convolution solver whose kernel the GPU cannot run: the solver's applicability check lets the
GPU's target through, and the kernel then fails to launch or crashes. Until a MIOpen with the fixed check is
installed, the solver (or its whole class) is switched off with MIOpen's own solver-filter variables. A table of known
ones: (the solver, the GPUs, the fix's pull request), and a general reading for a Winograd solver said to fail.

Sources: ROCm/rocm-libraries#3947 and ROCm/TheRock#2978 (gfx1150 selects ConvBinWinogradRxSf2x3g1 / the Winograd Fury
f2x3 kernels it cannot run; fixed by rocm-libraries PR 4023); MIOpen's debugging docs ("Filtering the solutions on an
individual basis": MIOPEN_DEBUG_CONV_WINOGRAD=0 disables every Winograd solver; MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3=0
and MIOPEN_DEBUG_AMD_WINOGRAD_FURY_RXS_F2X3=0 the single ones)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.fixes import therock_family
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text


class SolverBug(NamedTuple):
    solver: "re.Pattern[str]"
    archs: tuple[str, ...]
    pull: str
    switch: str          # the variable that turns that solver off


_KNOWN = (
    SolverBug(re.compile(r"ConvBinWinogradRxSf2x3g1|ConvWinoFuryRxS|Conv_Winograd_Fury\w*f2x3"), ("gfx1150",),
              "rocm-libraries PR 4023",
              "MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3_G1=0 MIOPEN_DEBUG_AMD_WINOGRAD_FURY_RXS_F2X3=0"),
)
_WINOGRAD = re.compile(r"\b(Conv\w*Wino\w*|ConvBinWinograd\w*)")
_FAILS = re.compile(r"(?i)unsupported|not supported|failed to launch|crash\w*|fault|invalid\w*|error")


@rule("miopen-kernel")
def miopen_picks_a_solver_the_gpu_cannot_run(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    named = _lines_matching(ctx, _WINOGRAD)
    if not named or not re.search(r"(?i)\bMIOpen\b", text) or not _FAILS.search(text):
        return None
    arch, fact = ctx.arch()
    solver = _WINOGRAD.search(named[0].line).group(1)
    for row in _KNOWN:
        if row.solver.search(text) and (arch in row.archs or any(a in text for a in row.archs)):
            gpu = arch if arch in row.archs else next(a for a in row.archs if a in text)
            return _make("miopen-kernel", f"MIOpen selects {solver}, which {gpu} cannot run",
                         f"MIOpen's applicability check lets {gpu} pick the {solver} solver, whose kernel this "
                         f"target cannot run (it fails to launch or crashes); {row.pull} fixed the check",
                         f"use a ROCm / MIOpen build that includes {row.pull} (a nightly built after it, or the "
                         f"release that ships it); until then turn the solver off before starting: export "
                         f"{row.switch} (or every Winograd solver: MIOPEN_DEBUG_CONV_WINOGRAD=0; in torch, "
                         "torch.backends.cudnn.enabled = False skips MIOpen's convolutions)",
                         [f for f in (fact,) if f], named[:1])
    return _make("miopen-kernel", f"MIOpen's {solver} fails on this GPU",
                 f"MIOpen selected the {solver} solver and its kernel fails on {arch or 'this GPU'}: the solver's "
                 "applicability check admits a target its kernel does not run on",
                 "turn the Winograd solvers off before starting: export MIOPEN_DEBUG_CONV_WINOGRAD=0 (or torch."
                 "backends.cudnn.enabled = False to skip MIOpen's convolutions), and report the solver and the GPU "
                 "to ROCm (a newer MIOpen may have fixed its check)", [f for f in (fact,) if f], named[:1],
                 confirmed=False)


# MIOpen compiling its convolution kernels for an RDNA 3.5 APU (gfx1150 / gfx1151 / gfx1152) and failing on the kernel
# source itself: inline assembly not valid for the target's ISA, which MIOpen's code-object reader then trips over
# ("miopenStatusUnknownError: stoul", a compile error naming the ISA). The ROCm releases and wheels of the time (ROCm
# 7.1 / 7.2, older TheRock wheels) carried the MIOpen with that assembly; TheRock's nightly wheels of the arch's own
# family carry the fixed MIOpen. Source: ROCm/rocm-libraries#4070 (gfx1151: AMD retested on a fresh gfx1151 nightly,
# pip install --index-url https://rocm.nightlies.amd.com/v2/gfx1151/ ... --force-reinstall, and it passed; cf.
# ROCm/TheRock#2488).
_NEW_APUS = ("gfx1150", "gfx1151", "gfx1152")
_COMPILE_FAILED = re.compile(r"(?i)miopenStatusUnknownError\W{0,4}stoul|\binline (?:asm|assembly)\b.{0,80}\b(?:not valid|"
                             r"invalid|unsupported)|\bMIOpen\b.{0,60}\b(?:fails? to compile|compil\w+ (?:failure|failed|error))")


@rule("miopen-kernel")
def miopen_kernel_source_on_a_new_apu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: MIOpen's kernel compile failing on an RDNA 3.5 APU, no Winograd solver named (the table above)."""
    arch, fact = ctx.arch()
    if arch not in _NEW_APUS or _WINOGRAD.search(_text(ctx)):
        return None
    said = _lines_matching(ctx, _COMPILE_FAILED)
    family = therock_family(arch)
    if not said or family is None:
        return None
    return _first(_make(
        "miopen-kernel", f"the installed MIOpen's kernels do not compile for {arch}",
        f"the MIOpen in this ROCm / torch build carries convolution kernels whose inline assembly is not valid for "
        f"{arch}'s ISA, so compiling them fails (and what reads their output trips: stoul); its cache and find mode do "
        "not change the source",
        f"reinstall TheRock's current nightly wheels for {arch}'s family, whose MIOpen has the fixed kernels: pip "
        f"install --index-url https://rocm.nightlies.amd.com/v2/{family}/ --pre torch torchaudio torchvision "
        "--force-reinstall (in the venv that fails; older wheels keep the stale MIOpen); then rm -rf ~/.cache/miopen",
        [f for f in (fact,) if f], said[:1]))
