"""A ROCm program that crashes (segmentation fault) on an AMD card the paste does not name, with no override set: the
commonest cause is a consumer Radeon whose gfx target the ROCm build has no code for, which ROCm answers with a crash
rather than an error. The reading names the override for each consumer family and how to read the card's target,
as a likely cause (arch_missing gives the exact value where the card is named)."""

from __future__ import annotations

from typing import Optional

from steadytune.doctor.rules.base import OVERRIDE, Context, Diagnosis, _make, _vendor, rule


@rule("arch-missing")
def crash_on_an_unnamed_radeon(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a crash line, an AMD GPU said in words, no GPU arch or card in the facts, no override set, and no
    error line of a family."""
    crashes = ctx.crashes()
    if not crashes or _vendor(ctx) != "amd" or ctx.override() is not None:
        return None
    if ctx.sheet.of("arch") or ctx.sheet.of("gpu") or any(e.family is not None for e in ctx.errors):
        return None
    return _make("arch-missing", "a crash on an AMD GPU with no override: likely a card outside the ROCm build",
                 "ROCm's libraries crash (segmentation fault) rather than fail cleanly when the build has no code for "
                 "the card's gfx target, which is the case for most consumer Radeons; nothing in the paste names the "
                 "card or sets an override",
                 f"read the card's target (rocminfo | grep -m1 gfx) and, for a consumer card, run with the override of "
                 f"its family: {OVERRIDE}=10.3.0 for RDNA2 (gfx103x, RX 6000), {OVERRIDE}=11.0.0 for RDNA3 (gfx110x, "
                 f"RX 7000), set on the command ({OVERRIDE}=11.0.0 <the command>); a card ROCm lists needs none",
                 [ctx.line_fact(crashes[0])], crashes[:1], confirmed=False)
