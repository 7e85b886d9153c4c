"""From any text to diagnoses: the facts (facts.py), the error lines and their families (error_lines.py), the rules
over both (rules.py), and one finding for every error line no rule explains ("unrecognised error: LINE" with the
command whose output would decide). Where no rule reads the paste at all, the solved case it reads most like
(similar.py) is shown as a pointer, never as the likely cause. A long paste is read where its causes are
(long_pastes.py).
`doctor --from` runs it over each file of a paste; the case scorer (cases.py) runs it over each mined case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine, error_facts, family, find_errors
from steadytune.doctor.next_checks import next_checks
from steadytune.doctor.facts import Fact, FactSheet, extract_facts, strip_log_prefix
from steadytune.doctor.findings import Finding
from steadytune.doctor.long_pastes import lines_to_read
from steadytune.doctor.rules import Diagnosis, run_rules
from steadytune.doctor.similar import POINTER_SIMILARITY, Similar, nearest_case
from steadytune.hardware.error_catalogue import Facts, Match, match_text


@dataclass
class Report:
    sheet: FactSheet
    errors: list[ErrorLine]
    diagnoses: list[Diagnosis]
    unrecognised: list[ErrorLine] = field(default_factory=list)
    similar: Optional[Similar] = None       # the solved case the paste reads most like
    by_likeness: bool = False               # no rule read it, and a solved thread reads like it: shown as a pointer
    complains: bool = False                 # an error line, a complaint in words or a tracker's title
    next_checks: list[str] = field(default_factory=list)   # the likely cause's family: what to try if its fix fails

    @property
    def top(self) -> Optional[Diagnosis]:
        return self.diagnoses[0] if self.diagnoses else None


Chunk = tuple[int, int, Facts]   # lines [start, end) of the text, and what is known where they ran (a session's command)


def _catalogue_matches(lines: list[str], chunks: Optional[list[Chunk]], facts: Optional[Facts]) -> list[Match]:
    """The error catalogue over the text, each part with the variables of the command that printed it."""
    if not chunks:
        return match_text("\n".join(lines), facts)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    found = []
    for start, end, chunk_facts in chunks:
        if start >= len(lines):
            continue
        for match in match_text("\n".join(lines[start:end]), chunk_facts):
            found.append(replace(match, position=match.position + offsets[start]))
    return found


def diagnose_text(text: str, catalogue_facts: Optional[Facts] = None, chunks: Optional[list[Chunk]] = None,
                  exclude_case: Optional[str] = None) -> Report:
    """Facts, error lines, diagnoses (best first) and the error lines none of them explains. `chunks` give parts of the
    text their own catalogue facts (a pasted session: each command's variables); else `catalogue_facts` hold for all.
    `exclude_case`: a mined case's source, never its own similar case (the case scorer)."""
    lines = text.splitlines()
    if lines and all(re.match(r"\s*>", line) for line in lines if line.strip()):   # a markdown quote, every line
        lines = [re.sub(r"^\s*>\s?", "", line) for line in lines]
    lines = lines_to_read([strip_log_prefix(line) for line in lines])
    errors = find_errors(lines, _catalogue_matches(lines, chunks, catalogue_facts))
    aside = _aside(lines, errors)
    if aside:   # read without them: their errors and the tools they name are not what the report is about
        lines = ["" if n in aside else line for n, line in enumerate(lines, 1)]
        errors = find_errors(lines, _catalogue_matches(lines, chunks, catalogue_facts))
    joined = "\n".join(lines)
    sheet = extract_facts(joined, lambda _lines: error_facts(errors))
    diagnoses = run_rules(sheet, errors)
    similar = nearest_case(joined, exclude_case)
    # a paste with no error line and no complaint in words (a finished run, "works fine") gets no reading by likeness
    complains = bool(errors) or sheet.has("complaint") or bool(_REPORT_TITLE.search(joined) or _ASKS.search(joined)
                                                               or _TROUBLE.search(joined))
    # a thread that reads like a paste no rule reads is a pointer, not a diagnosis: as a reading it named the right
    # cause family 12 times in 49 on unseen pastes (batches 6-8 at first contact), so it is never the likely cause
    by_likeness = complains and not diagnoses and similar is not None and similar.likely
    covered = {n for d in diagnoses for n in d.covers}
    unrecognised = [e for e in errors if e.line_no not in covered]
    after = next_checks(diagnoses[0].family, diagnoses[0].fix, sheet) if diagnoses else []
    return Report(sheet, errors, diagnoses, unrecognised, similar, by_likeness, complains, after)


# an issue tracker's title form ("[Issue]: ...", "[Bug] ...", "Bug: ..."): the paste is a report of a problem
_REPORT_TITLE = re.compile(r"(?im)^\W{0,3}\[?(?:issue|bug|bug report|problem|feature|feature request|question|help)\]?\s*[:\]]")
# a question asks for help as a complaint does ("Is the CUDA Toolkit required?", "how do I set the visible devices",
# 怎么 / 如何 / 为何 / 能否 / 吗, a full-width ？): the paste is a problem, not a report that all is well
_ASKS = re.compile(r"(?im)[?？]\s*$|^\W*(?:how (?:do|can|to|should)|is it possible|why (?:does|is|do|can)|what (?:is|does|should))\b"
                   r"|怎么|如何|为什么|为何|能否|可否|有没有(?:办法|解决)|吗[？?]?\s*$")

# words of trouble that are no reading's evidence but say the paste reports a problem ("please help", "fails to work",
# "not respected", "performance degradation", "overflowing to inf", 报错 / 无效 / 失败 / 出错): such a paste gets the
# solved thread it reads like and "no cause read", never silence (round 11 found 16 such pastes with no finding at all)
_TROUBLE = re.compile(r"(?i)\bplease help\b|\bhelp (?:me|to|with)\b|\bfail(?:s|ed)? to (?:work|run|load|start|use|detect|"
                      r"build|install|compile|import)\b|\bfailing to\b|\bnot (?:being )?(?:used|respected|honou?red|"
                      r"applied|picked up)\b|\b(?:does|do)(?:n't| not) seem to (?:work|use|run|detect)|\bdoes(?:n't| not) seem "
                      r"like\b|\bperformance (?:degradation|regression|drop)\b|\bdifficult(?:y|ies)\b|\boverflow(?:s|ed|ing)\b"
                      r"|\b(?:can ?not|can't) support\b|\bis (?:it|this|that) normal\b|\bpossible (?:build|support)\b|"
                      r"\bnot (?:yet )?supported\b|\bhangs?\b|\bstuck\b|\bsilently\b|(?<!be )\bignored\b|\bnot starting\b|"
                      r"\b(?:can ?not|can't|couldn't|could not) find\b|\breturns? nan\b|\bproblems? (?:with|allocating|"
                      r"running|using|loading)\b|\bstill depends on\b|\b(?:it|they|test|run|training) stops?\b|"
                      r"报错|无效|失败|出错|卡住")


# a line the user marks as beside the point ("on a side note", "unrelated, but", "btw"): another error on it is a
# second, minor problem, never the one the report is about
_ASIDE = re.compile(r"(?i)\b(?:on |as )?a side ?note\b|\bsidenote\b|\bunrelated\b|\bnot related\b|\bbtw\b|"
                    r"\bby the way\b|\bside issue\b|\bminor issue\b|顺便|另外一个小问题")


def _aside(lines: list[str], errors: list[ErrorLine]) -> set[int]:
    """The error lines said as an aside, where the paste has an error line of its own besides them."""
    aside = {e.line_no for e in errors if _ASIDE.search(lines[e.line_no - 1])}
    return aside if any(e.line_no not in aside and e.family for e in errors) else set()


def _evidence(diagnosis: Diagnosis) -> str:
    lines = {}
    for fact in diagnosis.evidence:
        lines.setdefault(fact.line_no, fact)
    quoted = [f.quote(120) for f in list(lines.values())[:3]]
    return ("; evidence: " + " | ".join(quoted)) if quoted else ""


def report_findings(report: Report, source: str, skip_restated: bool = False) -> list[Finding]:
    """The diagnoses as findings (the first one is the likely cause), then one per unexplained error line. With
    `skip_restated`, a diagnosis that only restates a catalogue entry is left to the catalogue's own finding."""
    findings = []
    for i, d in enumerate(report.diagnoses):
        if skip_restated and d.entry is not None:
            continue
        what = f"{source}: {'likely cause' if i == 0 else 'also'}: {d.title}"
        findings.append(Finding(d.severity, "diagnosis", what, d.cause + _evidence(d), d.fix))
        if i == 0 and report.next_checks:
            findings.append(Finding.info("next-checks", f"{source}: if that fix does not settle it, the other common "
                                         f"causes of {family(d.family).means}",
                                         "the mined cases of this family, in the order their fixes were accepted, for "
                                         "this machine", " | ".join(f"({n}) {c}" for n, c in
                                                                    enumerate(report.next_checks, 1))))
    if report.by_likeness:
        case = report.similar.case
        findings.append(Finding.warn("similar-case", f"{source}: no rule reads this paste; the solved thread it reads "
                                     f"most like: {report.similar.line()}",
                                     f"it settled on: {family(case.cause).means}. A likeness, not a diagnosis: on "
                                     f"pastes doctor had not seen, such a thread was of the right cause about 1 time "
                                     f"in 4", f"the fix accepted there, if it fits this machine: {case.fix}"))
    elif report.similar is not None and report.similar.score >= POINTER_SIMILARITY:
        findings.append(Finding.info("similar-case", f"{source}: a solved thread reads like this one: {report.similar.line()}",
                                     f"it settled on: {family(report.similar.case.cause).means}",
                                     f"the fix accepted there: {report.similar.case.fix}"))
    if report.complains and not report.diagnoses and not report.unrecognised:
        # a complaint in words with no error line doctor knows: say so, and what output would decide
        findings.append(Finding.warn("not-read", f"{source}: no cause read from this text",
                                     "no rule knows its wording and none of its lines is an error message",
                                     f"run and paste: {_next_step(report.sheet, None)}"))
    for error in report.unrecognised:
        cls = family(error.family) if error.family else None
        why = (f"it reads as {cls.means}, but the paste does not say enough to settle the cause" if cls else
               "no rule or catalogue entry knows this message")
        findings.append(Finding.warn("unrecognised-error", f"{source}: unrecognised error: line {error.line_no}: "
                                     f"{_short(error.line)}", why, f"run and paste: {_next_step(report.sheet, cls)}"))
    return findings


def _short(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


_GENERIC_NEXT = {
    "ollama": "OLLAMA_DEBUG=1 ollama serve 2>&1 | tail -60 (the server log, not the client's)",
    "llama.cpp": "the full output of the same command with -v, and ./llama-cli --list-devices",
    "vllm": "python -m vllm.collect_env",
    "bitsandbytes": "python -m bitsandbytes",
    "torch": "python -m torch.utils.collect_env",
    "rccl": "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET <the command>",
    "rccl-tests": "NCCL_DEBUG=INFO ./build/all_reduce_perf -b 8 -e 128M -f 2 -g <GPUs>",
}


def _next_step(sheet: FactSheet, cls) -> str:
    if cls is not None:
        return cls.next
    tool = next((t for t in ("ollama", "llama.cpp", "vllm", "bitsandbytes", "rccl-tests", "rccl", "torch")
                 if t in sheet.tools), None)
    return _GENERIC_NEXT.get(tool or "", "rocminfo | grep -e Marketing -e 'Name:.*gfx'; python -m torch.utils.collect_env; "
                                       "sudo dmesg | grep -i amdgpu | tail -20")


def gpu_facts(sheet: FactSheet) -> list[Fact]:
    """The GPU facts of a paste (model names, PCI ids, gfx strings of the machine), for a GPU table that no tool
    output gave."""
    return [f for f in sheet.facts if f.kind in ("gpu", "pci_id") or (f.kind == "arch" and f.detail == "machine")]
