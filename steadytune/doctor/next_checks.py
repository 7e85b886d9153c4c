"""What to check next when the first fix does not settle it (next_checks.yaml): the other common causes of the likely
cause's family, chosen for this paste (its vendor, platform, tools and words) and never repeating what the fix already
says. A family's first fix is right most of the time it is right at all; the mined cases show the rest split over a few
well-known knobs (for several GPUs: peer-to-peer, /dev/shm, the network interface), and a user whose first try failed
should get those, not a search."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

import yaml

from steadytune.doctor.error_lines import load_classes
from steadytune.doctor.facts import FactSheet, vendor_of

TABLE = Path(__file__).with_name("next_checks.yaml")
PLATFORMS = ("windows", "wsl", "container", "linux")
CONDITIONS = ("vendor", "platform", "tool", "said")
MOST_SHOWN = 3


class NextChecksError(ValueError):
    """next_checks.yaml is malformed (an editing mistake, caught by the tests)."""


@dataclass(frozen=True)
class NextCheck:
    family: str
    key: str
    check: str
    vendor: Optional[str]
    platforms: tuple[str, ...]
    tools: tuple[str, ...]
    said: Optional[re.Pattern]
    source: str


@lru_cache(maxsize=2)
def load_next_checks(path: Path = TABLE) -> tuple[NextCheck, ...]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(raw, list):
        raise NextChecksError(f"{path.name}: a list of rows expected")
    families = {c.family for c in load_classes()}
    rows = []
    for i, item in enumerate(raw, 1):
        where = f"{path.name} row {i} ({item.get('family', '?') if isinstance(item, dict) else '?'})"
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) and item[k].strip()
                                                 for k in ("family", "key", "check", "source")):
            raise NextChecksError(f"{where}: family, key, check and source are required text")
        if item["family"] not in families:
            raise NextChecksError(f"{where}: unknown family {item['family']!r}")
        when = item.get("when") or {}
        unknown = sorted(set(when) - set(CONDITIONS)) + sorted(set(item) - {"family", "key", "check", "source", "when"})
        if unknown:
            raise NextChecksError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if when.get("vendor") not in (None, "amd", "nvidia"):
            raise NextChecksError(f"{where}: vendor is amd or nvidia")
        platforms = tuple(when.get("platform") or ())
        if any(p not in PLATFORMS for p in platforms):
            raise NextChecksError(f"{where}: platform is a list of {', '.join(PLATFORMS)}")
        try:
            said = re.compile(when["said"], re.IGNORECASE) if when.get("said") else None
        except re.error as e:
            raise NextChecksError(f"{where}: `said` is not a regular expression: {e}") from None
        rows.append(NextCheck(item["family"], item["key"], " ".join(item["check"].split()), when.get("vendor"),
                              platforms, tuple(when.get("tool") or ()), said, item["source"]))
    return tuple(rows)


def _vendor(sheet: FactSheet, text: str) -> Optional[str]:
    """The facts' vendor, else the words: a check for AMD's stack is no help on an NVIDIA card, and the reverse."""
    known = vendor_of(sheet)
    if known:
        return known
    amd = bool(re.search(r"\bAMD\b|Radeon|ROCm|\bHIP\b|\bgfx\d", text))
    nvidia = bool(re.search(r"(?i)\bnvidia\b|\bCUDA\b|\b(?:rtx|gtx)\s*\d|\bnccl\b", text))
    return "amd" if amd and not nvidia else "nvidia" if nvidia and not amd else None


def _platforms(sheet: FactSheet) -> set[str]:
    kinds = {p for p in ("wsl", "container") if sheet.has("platform", p)}
    kinds.add("windows" if sheet.is_windows and "wsl" not in kinds else "linux")
    return kinds


def _holds(row: NextCheck, vendor: Optional[str], platforms: set[str], tools: set[str], text: str) -> bool:
    return ((row.vendor is None or row.vendor == vendor)
            and (not row.platforms or bool(platforms & set(row.platforms)))
            and (not row.tools or bool(tools & set(row.tools)))
            and (row.said is None or bool(row.said.search(text))))


def next_checks(family: str, fix: str, sheet: FactSheet, tool: Optional[str] = None) -> list[str]:
    """Up to three checks of `family` that hold for this paste and that `fix` does not already say."""
    text = "\n".join(sheet.lines)
    vendor, platforms, tools = _vendor(sheet, text), _platforms(sheet), set(sheet.tools)
    said = fix.lower()
    chosen = [row for row in load_next_checks()
              if row.family == family and row.key.lower() not in said and _holds(row, vendor, platforms, tools, text)]
    # a check the paste's own words, tools or platform called for comes before the family's general ones (a vLLM
    # paste gets vLLM's knob before the training advice); the table's order holds within each
    chosen.sort(key=lambda row: not (row.said or row.tools or row.platforms))
    return [row.check.replace("{tool}", tool or "the program") for row in chosen[:MOST_SHOWN]]
