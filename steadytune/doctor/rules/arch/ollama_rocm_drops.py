"""Ollama's bundled ROCm leaving older AMD GPUs behind, and its Vulkan backend as the way on. Two readings:

  a GPU whose ROCm code a known Ollama release dropped (a table: the archs, the first release without them, the last
  one with them), failing on that release or a later one: stay on the last release with its code, or run the newer
  Ollama on Vulkan;
  an older consumer Radeon (RDNA2 and before) that ran on an older Ollama and crashes, hangs or times out starting its
  runner on a newer one, with no missing-code line: the maintainers' answer for these targets is the Vulkan backend,
  not ROCm.

Sources: ollama/ollama#12774 (rick-github: "As of 0.12.5 Vega 10 is not supported by ROCm ... stick with 0.12.4"); the
v0.12.5 release notes, as relayed in getumbrel/umbrel-apps PR 3813 (its update to v0.12.5: "AMD gfx900 and gfx906
(MI50, MI60, etc) GPUs are no longer supported via ROCm"); ollama/ollama PR 12481 (merged 2025-10-02, "AMD: block
running on unsupported gfx900/gfx906"). Corrected round 19: this cited the v0.12.6 notes for the drop, but
github.com/ollama/ollama/releases/tag/v0.12.6 does not mention gfx900/gfx906 (umbrel's v0.12.6 PR 3876 repeats
0.12.5's list); the first release without them is 0.12.5. ollama/ollama#12673 (dhiltgen: "In 0.12.11 Vulkan is now
included in the official binaries, but still experimental. To enable, set OLLAMA_VULKAN=1 for the server"; the #12600
cited before for this was not checked); ollama/ollama#12939 and #16771 (dhiltgen: ROCm support for these targets is not
planned, current builds include Vulkan, enabled by default when the driver is available; for Docker the standard
ollama/ollama image with the GPU devices exposed)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import (
    _NO_GPU_USE, Context, Diagnosis, _CRASH, _first, _lines_matching, _make, _release_numbers, rule, _text,
)


class Dropped(NamedTuple):
    archs: tuple[str, ...]
    names: str              # the GPUs, in words
    first_without: str      # the first Ollama release without their ROCm code
    last_with: str          # the last release with it


_DROPPED = (
    Dropped(("gfx900", "gfx906"), "Vega 10 / Vega 20 (Vega 56/64, Frontier Edition, Radeon VII, MI25/MI50/MI60)",
            "0.12.5", "0.12.4"),
)

_VULKAN = ("update to a current Ollama and run it on its Vulkan backend, which supports this GPU (Vulkan is in the "
           "official builds from 0.12.11, behind OLLAMA_VULKAN=1 for the server; current releases turn it on by "
           "default where the Vulkan driver is present; in Docker use the standard ollama/ollama image with /dev/dri "
           "passed in, not the :rocm one)")

# The ROCm image's tag is <version>-rocm (ollama/ollama#12774's title names 0.12.5-rocm and 0.12.3-rocm, #738
# 0.1.23-rocm). Checked v20: ollama/ollama's .github/workflows/release.yaml at tag v0.12.4 pushes each release twice,
# docker-merge-push with suffix ['', '-rocm'] and docker/metadata-action's type=semver,pattern={{version}}, so the v0.12.4
# release publishes ollama/ollama:0.12.4-rocm (read from the workflow; Docker Hub's tag list itself was not reachable).
# Ollama's versions as users write them: "0.12.5-rocm", "v0.12.6-rc0", "ollama version is 0.12.3", "ollama:0.12.5"
_VERSION = re.compile(r"(?i)(?:\bv|\bollama(?: version(?: is)?)?[: ]\s*v?|\b)(0\.\d{1,2}\.\d{1,2})(?:-rc\d+|-rocm)?\b")
_FAILS = re.compile(r"(?i)runner crashed|failure during GPU discovery|timed out waiting for (?:the )?llama runner|"
                    r"llm server not responding|\bcrash\w*|\bfreez\w+|\bhangs?\b|\breboot\b|\bno longer\b|"
                    r"\bstopped working\b|\bnot used\b|\bslow\b|on (?:the )?CPU\b")


def _versions(text: str) -> list[str]:
    return sorted({m.group(1) for m in _VERSION.finditer(text)}, key=_release_numbers)


@rule("gpu-unsupported")
def ollama_release_dropped_the_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Ollama, a GPU of the table, a release in the paste at or after the one that dropped it, and a
    failure (a crash, discovery failing, the CPU used)."""
    if "ollama" not in ctx.sheet.tools and not re.search(r"(?i)\bollama\b", _text(ctx)):
        return None
    text = _text(ctx)
    arch, fact = ctx.arch()
    versions = _versions(text)
    failed = _lines_matching(ctx, _FAILS) + ctx.no_gpu() + ctx.crashes()
    for row in _DROPPED:
        if arch not in row.archs or not failed:
            continue
        late = [v for v in versions if _release_numbers(v) >= _release_numbers(row.first_without)]
        if not late:
            continue
        return _first(_make(
            "gpu-unsupported", f"Ollama {late[-1]} no longer carries ROCm code for {arch}",
            f"from {row.first_without} Ollama's bundled ROCm no longer supports {row.names}: the {arch} is dropped at "
            "discovery or its runner crashes, and models run on the CPU",
            f"stay on Ollama {row.last_with} (the last release with {arch} ROCm code; in Docker the "
            f"ollama/ollama:{row.last_with}-rocm image), or {_VULKAN}", [f for f in (fact,) if f], failed[:2]))
    return None


# older consumer Radeons: GCN (gfx8, gfx9 but not the Instinct gfx90a / gfx94x) and RDNA1 / RDNA2 (gfx10)
_OLDER = re.compile(r"^gfx(?:8\d\w|90[0-9c]|10\d\w)$")
_WORKED = re.compile(r"(?i)\bworked\b|\bworking\b|\bbefore\b|\bprevious(?:ly)?\b|\bafter\b|\bbeginning\b|\bsince\b|"
                     r"\bstarted\b|\bregress\w*|>\s*v?0\.\d")


@rule("gpu-unsupported")
def ollama_rocm_regression_on_an_older_radeon(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Ollama's ROCm (its rocm image or runner), an older consumer Radeon, two Ollama releases or a
    "worked before" in the paste, and the runner crashing, hanging or timing out -- with no missing-code line (that is
    the arch readings')."""
    text = _text(ctx)
    if "ollama" not in ctx.sheet.tools and not re.search(r"(?i)\bollama\b", text):
        return None
    if not re.search(r"(?i)\brocm\b", text) or ctx.of("arch-missing"):
        return None
    arch, fact = ctx.arch()
    if not arch or not _OLDER.match(arch) or any(arch in row.archs for row in _DROPPED):
        return None
    versions = _versions(text)
    failed = _lines_matching(ctx, r"(?i)timed out waiting for (?:the )?llama runner|llm server not responding|"
                                  r"runner crashed|\bcrash\w*|\bfreez\w+|\bhangs?\b|\bfull reboot\b") + ctx.crashes()
    # round 20 (r20a): GPU discovery itself failing or taking the machine down on a 0.12 release (the releases around
    # which Vulkan came in) is the same answer without a "worked before" (ollama/ollama#13070: an RX 6700 XT on
    # 0.12.10, closed by dhiltgen with "ROCm support for gfx1031 not planned; use Vulkan")
    discovery = re.search(r"(?i)failure during GPU discovery|GPU discovery\W{0,3}(?:fail|crash|hang)|"
                          r"system[- ]wide crash|whole (?:system|machine|PC) (?:crash|freez|hang)", text)
    recent = versions and _release_numbers(versions[-1]) >= (0, 12, 0)
    if not failed or not (len(versions) >= 2 or (versions and _WORKED.search(text)) or (discovery and recent)):
        return None
    return _first(_make(
        "gpu-unsupported", f"Ollama's newer ROCm builds no longer run reliably on {arch}",
        f"the ROCm that newer Ollama releases bundle does not carry this older Radeon ({arch}) well: the runner "
        "crashes, hangs or never starts (sometimes taking the machine with it); ROCm support for these targets is not "
        "planned in Ollama",
        f"{_VULKAN}; until then stay on the last Ollama release that worked here"
        + (f" ({versions[0]} or the release before the failing one)" if versions else ""),
        [f for f in (fact,) if f], failed[:2]))
