"""What every doctor check returns: a `Finding` (error / warning / info, each with what, why and fix), and the
two ways findings are shown: a table for people and plain dicts for JSON (`--json`, environment.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

SEVERITIES = ("error", "warning", "info")


# The most characters of a finding's what / why / fix shown: a value or line read from a paste is quoted in them,
# and a hostile or broken paste (one 16 MB line) made a report of megabytes.
MAX_SHOWN = 2000


@dataclass
class Finding:
    severity: str          # error | warning | info
    check: str             # which check produced it (torch-build, visibility, ...)
    what: str
    why: str = ""
    fix: str = ""

    def __post_init__(self):
        self.what, self.why, self.fix = (_cut(self.what), _cut(self.why), _cut(self.fix))

    @classmethod
    def error(cls, check: str, what: str, why: str = "", fix: str = "") -> Finding:
        return cls("error", check, what, why, fix)

    @classmethod
    def warn(cls, check: str, what: str, why: str = "", fix: str = "") -> Finding:
        return cls("warning", check, what, why, fix)

    @classmethod
    def info(cls, check: str, what: str, why: str = "", fix: str = "") -> Finding:
        return cls("info", check, what, why, fix)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(text) - MAX_SHOWN:,} more characters)"


def format_findings(findings: Iterable[Finding]) -> str:
    """A table by severity: one line per finding, then indented why / fix lines."""
    findings = sort_findings(findings)
    width = max((len(f.check) for f in findings), default=0)
    lines = []
    for f in findings:
        lines.append(f"{f.severity.upper():<8} {f.check:<{width}}  {f.what}")
        indent = " " * (8 + 1 + width + 2)
        if f.why:
            lines.append(f"{indent}why: {f.why}")
        if f.fix:
            lines.append(f"{indent}fix: {f.fix}")
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    lines.append(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
    return "\n".join(lines)


def findings_as_dicts(findings: Iterable[Finding]) -> list[dict[str, str]]:
    """Sorted by severity, as the JSON of `doctor --json` and environment.json lists them."""
    return [asdict(f) for f in sort_findings(findings)]
