"""Every error line of a text, and its cause family.

A line is an error line by its shape (an exception's last line, `error:`, `ERROR`, `FATAL`, `failed`, a signal, a
refusal such as "Permission denied" or "not supported"), not because we have seen it before: doctor must answer
every one, with a diagnosis or with "unrecognised error" and the command that narrows it. The family comes from two
readers: the error catalogue's entries (hardware/error_catalogue.yaml, each naming its family) and the family
patterns of error_classes.yaml beside this module. Nothing here knows the machine; rules.py joins the two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from steadytune.doctor.facts import Fact
from steadytune.hardware.error_catalogue import Match, load_catalogue, match_text
from steadytune.hardware.pattern_file import read_pattern_entries

CLASSES = Path(__file__).with_name("error_classes.yaml")


@dataclass(frozen=True)
class ErrorClass:
    family: str
    means: str
    rank: int
    next: str
    patterns: tuple[re.Pattern, ...]


class ErrorClassesError(ValueError):
    """error_classes.yaml is malformed (an editing mistake, caught by the tests)."""


@lru_cache(maxsize=1)
def load_classes() -> tuple[ErrorClass, ...]:
    classes = tuple(ErrorClass(item["family"], item["means"], int(item["rank"]), item["next"], patterns)
                    for item, patterns in read_pattern_entries(CLASSES, "family", ("means", "rank", "next"),
                                                               "patterns", ErrorClassesError))
    families = {c.family for c in classes}
    unknown = sorted({e.family for e in load_catalogue()} - families)
    if unknown:
        raise ErrorClassesError(f"error catalogue families not in {CLASSES.name}: {', '.join(unknown)}")
    return classes


def family(name: str) -> ErrorClass:
    return next(c for c in load_classes() if c.family == name)


# Failures every tool words its own way, which no family owns: a package resolver giving up (apt, pip, uv, conda),
# NaN found in a tensor, a runtime not initialised. They make a line an error line, so it gets a finding
# ("unrecognised error" at least). A complaint in Chinese prose ("报错", "失败") is left to the readings of thin pastes
# (a card and a failure word), which need the paste to have no error line.
_GENERIC_FAILURES = (r"|\bunmet dependencies\b|\bno solution found when resolving\b|\bResolutionImpossible\b"
                     r"|\bconflicting dependencies\b|\bUnsatisfiableError\b|\bdependency conflict\b"
                     r"|\bNaN (?:detected|found|encountered)\b|\b(?:detected|found|got|encountered) NaN\b"
                     r"|\bnot initiali[sz]ed\b")

# What makes a line an error line. Lines that only look like one (a count of zero errors, a column header, a
# command being typed, a log's INFO/DEBUG line that merely mentions an error) are left out.
_ERROR_SHAPE = re.compile(
    r"^\s*(?:[\w.]+(?:Error|Exception|Exit|Interrupt|Fault)|error|fatal|panic)\b\s*(?::|$)"   # ValueError: ... / error: ...
    r"|\b(?:[A-Z]\w*Error|[A-Z]\w*Exception)\b(?::|\s*$)"
    r"|\b(?:ERROR|FATAL|CRITICAL|PANIC)\b|level=(?:ERROR|WARN)\b|\[(?:E|ERROR|error)\]|\bE\d{4} "
    r"|(?i:\berror\b\s*[:(\[=]|\berror(?:ed)? (?:while|when|in|loading|during|at|occurred|code)\b|\bfailed\b|\bfailure\b"
    r"|\bcannot\b|\bcan't\b|\bcould not\b|\bcouldn't\b|\bunable to\b|\bnot supported\b|\bunsupported\b|\binvalid\b"
    r"|\bno such file\b|\bpermission denied\b|\boperation not permitted\b|\bundefined symbol\b|\bout of memory\b"
    r"|segmentation fault|Speicherzugriffsfehler|Erreur de segmentation|Violaci[oó]n de segmento|Errore di segmentazione|段错误|核心已转储|セグメンテーション違反|Ошибка сегментирования|\bseg ?fault(?:ed|s|ing)?\b|\baborted\b|core dumped|\bsigsegv\b|\bsigabrt\b|\bsigbus\b|\btimed? ?out\b|\bhang(?:s|ing)?\b"
    r"|\bnot found\b|\bnot available\b|\bmissing\b|\bdenied\b|\bexception\b|\bterminate called\b|\bkilled\b"
    r"|\bno compatible\b|\bnot detected\b|\bnot loaded\b|\bmismatch\b|\bincompatible\b|\bno kernel image\b"
    + _GENERIC_FAILURES + ")")
_NOT_ERRORS = re.compile(
    r"(?i)^\s*(?:\$|#|>>>|PS [A-Z]:|\w+@[\w.-]+[:~])"                  # a prompt: a command, not its output
    r"|\b0 errors?\b|\berrors?:\s*0\b|\bno errors?\b|error_?code[=:]\s*0\b|errors? \(0\)|\bwithout errors?\b"
    r"|\bRAS\b.*\bN/A\b|^\s*(?:GPU|Device)\s+(?:Temp|Node|NODE|DID)\b"    # smi table headers
    r"|level=(?:INFO|DEBUG)\b(?!.*\berror=)|\bINFO\b\s*[:\]-](?!.*\b(?:failed|error)\b)"
    r"|^\s*File \"[^\"]+\", line \d+|^\s*\^+\s*$|^\s*~+\s*$"           # traceback frames
    r"|(?:warn|print)\(|(?-i:^\s*(?:def|class|return|raise)\b)"   # code, not output
    # an import statement or an `if` line ending its block with ":"; "import torch gives: A module that was compiled
    # ..." or "if I run it I get CUDA error: ..." is a sentence that quotes the error
    r"|(?-i:^\s*import\s+[\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*\s*(?:[;#].*)?$)"
    r"|(?-i:^\s*from\s+\.*[\w.]*\s+import\b)|(?-i:^\s*if\b.*:\s*(?:#.*)?$)"
    r"|\bFeature:\s*None specified|Fast f16|Coherent Host Access|^\s*Uuid:"
    # a user saying memory is NOT the problem ("I'm not running out of vram either") says the opposite of an OOM
    r"|\b(?:not|never|isn't|wasn't)\s+(?:\w+\s+)?out of (?:GPU |video |V)?(?:memory|RAM)\b")


# a line of a long paste that is not read (long_pastes.py): one word character, so that no pattern's `\s*` or `^\W*`
# runs across thousands of emptied lines (each such run is searched again from every line start: quadratic)
NOT_READ = "_"


def is_error_line(line: str) -> bool:
    text = line.strip()
    if len(text) < 6 or len(text) > 2000 or not _ERROR_SHAPE.search(text) or _NOT_ERRORS.search(text):
        return False
    return True


@dataclass
class ErrorLine:
    line_no: int
    line: str
    family: Optional[str] = None        # the cause family, when a reader knows it
    catalogue: Optional[Match] = None    # the catalogue entry that matched this line, with its machine-made cause/fix


def _line_starts(text: str) -> list[int]:
    starts, position = [0], 0
    for line in text.split("\n")[:-1]:
        position += len(line) + 1
        starts.append(position)
    return starts


def classify_line(line: str) -> Optional[str]:
    """The family whose patterns match this line, the lowest rank first; None when none does. A line no pattern
    matches as written is tried once more without regard to case: people retype messages ("No kernel image is
    available" inside a sentence, "HIP Out Of Memory") and the wording, not its case, carries the cause."""
    ranked = sorted(load_classes(), key=lambda c: c.rank)
    for cls in ranked:
        if any(p.search(line) for p in cls.patterns):
            return cls.family
    for cls in ranked:
        if any(p.search(line) for p in _caseless(cls.patterns)):
            return cls.family
    return None


@lru_cache(maxsize=None)
def _caseless(patterns: tuple[re.Pattern, ...]) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(p.pattern, p.flags | re.IGNORECASE) for p in patterns)


def find_errors(lines: list[str], matches: Optional[list[Match]] = None) -> list[ErrorLine]:
    """Every error line with its family: a catalogue match on the line first (it carries the machine-specific
    cause and fix), else the family patterns. A line the catalogue matched is an error line whatever its shape."""
    text = "\n".join(lines)
    starts = _line_starts(text)
    by_line: dict[int, Match] = {}
    for match in matches if matches is not None else match_text(text):
        number = max(i for i, s in enumerate(starts) if s <= match.position) + 1
        by_line.setdefault(number, match)
    found = []
    for number, line in enumerate(lines, 1):
        match = by_line.get(number)
        if _says_no_gpu(lines, number):
            found.append(ErrorLine(number, f"{lines[number - 2].strip()} -> {line.strip()}", "visibility"))
            continue
        if match is not None:
            family_name: Optional[str] = match.entry.family
            if match.entry.symptom:   # a generic symptom sets no family: the line's own wording (and the rules) decide
                family_name = classify_line(line)
        elif line == NOT_READ or not line.strip() or _NOT_ERRORS.search(line) or len(line.strip()) > 2000:
            continue
        else:
            family_name = classify_line(line)   # a known wording is an error line whatever its shape (a WARN, prose)
            if family_name is None and not (is_error_line(line) and _is_error_proper(line)):
                continue   # a line with only a weak word ("missing", "cannot") and nothing known in it
        found.append(ErrorLine(number, line.strip(), family_name, match))
    return _merge_continuations(found)


_IS_AVAILABLE = re.compile(r"(?:cuda|xpu)\.is_available\(\)|device_count\(\)")


def _says_no_gpu(lines: list[str], number: int) -> bool:
    """`print(torch.cuda.is_available())` answered False (or device_count() 0): torch sees no GPU, said without an
    error line."""
    if number < 2:
        return False
    answer = lines[number - 1].strip().strip("`")
    return answer in ("False", "0") and bool(_IS_AVAILABLE.search(lines[number - 2]))


_STRONG = re.compile(r"(?i)\b(?:[A-Z]\w*(?:Error|Exception))\b|\berror\b|\bfatal\b|\bfailed\b|segmentation fault|Speicherzugriffsfehler|Erreur de segmentation|Violaci[oó]n de segmento|Errore di segmentazione|段错误|核心已转储|セグメンテーション違反|Ошибка сегментирования|\bseg ?fault(?:ed|s|ing)?\b|"
                     r"core dumped|\baborted\b|permission denied|undefined symbol|out of memory|not supported|"
                     r"terminate called|\bpanic\b|cannot open|no such file|\bkilled\b|timed? ?out|level=ERROR|"
                     r"\binvalid\b|\bunable to\b|\bcould not\b|"
                     # rocminfo's own failure line ("hsa api call failure at ...", retold "hsa api call failure,
                     # returned 4104"): an error whatever else the line says
                     r"\bhsa api call failure\b|"
                     # Windows' Application Error event (Event Viewer, id 1000) as users copy it: the crash's code and
                     # the DLL it happened in ("Exception code: 0xc0000409", "Faulting module name: cudnn64_8.dll")
                     r"\bexception code:\s*0x[0-9a-f]{8}\b|\b(?:faulting|error) (?:module|application) name:"
                     + _GENERIC_FAILURES)


def _is_error_proper(line: str) -> bool:
    return bool(_STRONG.search(line))


def _merge_continuations(found: list[ErrorLine]) -> list[ErrorLine]:
    """Repeated identical lines (a log that prints the same error per GPU or per retry) are kept once."""
    seen: set[str] = set()
    kept = []
    for error in found:
        key = re.sub(r"\d+", "#", error.line)[:200]
        if key in seen:
            continue
        seen.add(key)
        kept.append(error)
    return kept


def error_facts(errors: list[ErrorLine]) -> list[Fact]:
    return [Fact("error", e.family or "unknown", e.line_no, e.line, e.catalogue.entry.id if e.catalogue else "")
            for e in errors]
