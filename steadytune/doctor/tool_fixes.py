"""The tool x family fix table (tool_fixes.yaml): the fix a tool's own install needs for an install-cause family on
this kind of machine (Windows -> triton-windows, an AMD machine -> the ROCm build of the package). A rule that knows the
family and the tool that failed, and has no more specific reading, words its fix from here, so a tool the rules were
never written for still gets its own remedy. The table's format is described at its top."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional

import yaml

from steadytune.doctor.error_lines import load_classes

TABLE = Path(__file__).with_name("tool_fixes.yaml")
KINDS = ("windows", "linux", "macos", "amd", "nvidia")
PLACEHOLDERS = ("package", "caller", "torch", "rocm_index", "cuda_index", "cuda_label")
FIELDS = ("tool", "family", "fix", "source")

# other names of a table tool: doctor's failing-tool names, import names, sibling builds of one package
ALIASES = {
    "llama_cpp": "llama-cpp-python", "flash_attn": "flash-attn", "jaxlib": "jax", "onnxruntime-gpu": "onnxruntime",
    "onnxruntime-rocm": "onnxruntime", "onnxruntime-directml": "onnxruntime", "triton-windows": "triton",
    "pytorch-triton-rocm": "triton", "faster-whisper": "ctranslate2", "faster_whisper": "ctranslate2",
    "whisperx": "ctranslate2", "tensorflow-rocm": "tensorflow", "tensorflow-gpu": "tensorflow",
    "_torch_sox": "torchaudio", "libtorchaudio": "torchaudio",
}


class ToolFixError(ValueError):
    """tool_fixes.yaml is malformed (an editing mistake, caught by the tests)."""


@dataclass(frozen=True)
class ToolFix:
    tool: str
    family: str
    on: tuple[str, ...]
    fix: str
    source: str


@lru_cache(maxsize=2)
def load_tool_fixes(path: Path = TABLE) -> tuple[ToolFix, ...]:
    """The table's rows, checked: known families, machine kinds and placeholders, one row per tool x family x kinds."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(raw, list):
        raise ToolFixError(f"{path.name}: a list of rows expected")
    families = {c.family for c in load_classes()}
    rows, seen = [], set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ToolFixError(f"{path.name} row {i + 1}: a mapping of {', '.join(FIELDS)} expected")
        if True in item:   # YAML 1.1 reads a key `on:` as true
            raise ToolFixError(f"{path.name} row {i + 1}: write `machine:`, not `on:` (YAML reads `on` as true)")
        where = f"{path.name} row {i + 1} ({item.get('tool', '?')} x {item.get('family', '?')})"
        missing = [f for f in FIELDS if not item.get(f)]
        if missing:
            raise ToolFixError(f"{where}: missing {', '.join(missing)}")
        if item["family"] not in families:
            raise ToolFixError(f"{where}: unknown family {item['family']!r}")
        on = tuple(item.get("machine") or ())
        unknown = [k for k in on if k not in KINDS]
        if unknown:
            raise ToolFixError(f"{where}: unknown machine kind {', '.join(map(repr, unknown))} (known: {', '.join(KINDS)})")
        names = {name for _, name, _, _ in string.Formatter().parse(item["fix"]) if name is not None}
        if names - set(PLACEHOLDERS):
            raise ToolFixError(f"{where}: unknown placeholder {', '.join(sorted(names - set(PLACEHOLDERS)))} "
                               f"(known: {', '.join(PLACEHOLDERS)})")
        key = (item["tool"], item["family"], frozenset(on))
        if key in seen:
            raise ToolFixError(f"{where}: a second row for the same tool, family and machine kinds")
        seen.add(key)
        rows.append(ToolFix(str(item["tool"]), item["family"], on, " ".join(str(item["fix"]).split()),
                            str(item["source"])))
    return tuple(rows)


def table_tool(name: Optional[str]) -> Optional[str]:
    """The table's name for a tool, package or import name (None when the table has no row for it)."""
    if not name:
        return None
    key = ALIASES.get(name, ALIASES.get(name.lower(), name.lower().replace("_", "-")))
    return key if any(row.tool == key for row in load_tool_fixes()) else None


# a Windows path, program or message in the paste (C:\\..., python.exe, a DLL, ComfyUI portable's python_embeded, MSVC)
# when no OS fact said so
_WINDOWS = re.compile(r"(?i)\b[A-Z]:\\\\?\w|\w\.(?:exe|dll)\b|\bpython_embeded\b|\\site-packages\\|"
                      r"Microsoft Visual C\+\+|\bMSVC\b|\bWinError\b")
_MACOS = re.compile(r"(?i)\bmacOS\b|\bdarwin\b|\bMac ?OS ?X\b|\bApple M\d\b|\bMacBook|\bMac (?:mini|Studio|Pro)\b|"
                    r"\bM[1-5] (?:Pro|Max|Ultra)\b|/Users/\w+/|\bmps\b")


def machine_kinds(is_windows: bool, vendor: Optional[str], text: str) -> frozenset[str]:
    """The kinds of machine a paste shows: its OS and its GPU vendor."""
    kinds = set()
    if is_windows or _WINDOWS.search(text):
        kinds.add("windows")
    elif _MACOS.search(text):
        kinds.add("macos")
    else:
        kinds.add("linux")
    if vendor in ("amd", "nvidia"):
        kinds.add(vendor)
    return frozenset(kinds)


class _Values(dict):
    def __missing__(self, key: str) -> str:
        return {"caller": "the program", "torch": "the installed torch", "cuda_label": "cu128"}.get(key, f"<{key}>")


def tool_fix(tool: Optional[str], family: str, kinds: frozenset[str], values: Mapping[str, str]) -> Optional[str]:
    """The fix for this tool and family on this machine: the row whose machine kinds all hold, the most specific first;
    None when the table has no row for them."""
    name = table_tool(tool)
    if name is None:
        return None
    rows = [r for r in load_tool_fixes() if r.tool == name and r.family == family and set(r.on) <= kinds]
    if not rows:
        return None
    best = max(rows, key=lambda r: len(r.on))
    return best.fix.format_map(_Values({k: v for k, v in values.items() if v}))
