"""Readers for saved outputs of rocm-smi, amd-smi, rocminfo and nvidia-smi, so `doctor --from DIR` can
diagnose a machine from pasted text.

Each reader turns one tool output into `GpuRecord`s: model, architecture, memory. The architecture comes
from the most trustworthy field available: rocminfo's agent `Name:` or ISA line, amd-smi's
`TARGET_GRAPHICS_VERSION`, then rocm-smi's `GFX Version` decoded (it prints gfx9010 for gfx90a and gfx11001
for gfx1101, research/rocm.md section 1), then the product-name table in gpu_facts.py.

A file may hold several outputs (a pasted session); `split_samples` cuts it at `# ...` comment blocks and
`$ command` prompt lines. Nothing here raises on odd input: a reader that fails leaves a "could not read"
problem in its `ParseResult`.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from steadytune.hardware.archs import bf16_verdict, decode_rocm_smi_gfx, is_gfx_target
from steadytune.hardware.gpu_facts import GENERIC_AMD_NAMES, lookup_product, normalise_gfx
from steadytune.hardware.gpu_ids import AMD, lookup_id


@dataclass
class GpuRecord:
    index: int
    vendor: str                         # amd | nvidia
    name: Optional[str] = None
    arch: Optional[str] = None          # gfx942 / sm_90
    arch_source: Optional[str] = None   # which field the arch came from
    memory_gib: Optional[float] = None
    integrated: bool = False
    uuid: Optional[str] = None
    bus_id: Optional[str] = None
    device_id: Optional[int] = None
    reported_gfx: Optional[str] = None  # rocm-smi's raw "GFX Version", kept to explain a mismatch
    hip_id: Optional[int] = None        # the index HIP (and torch) give it, where the tool says (amd-smi)
    power_w: Optional[float] = None     # current draw
    power_cap_w: Optional[float] = None
    partition: Optional[str] = None     # MI300-class compute/memory partition mode (SPX/NPS1 ...)
    generic_name: bool = False          # the tool printed only "AMD Radeon Graphics": the model is unknown
    kfd_node: Optional[int] = None      # the KFD topology node (rocminfo "Node:", rocm-smi's Node column): the N of
                                        # HSA_OVERRIDE_GFX_VERSION_N; the CPU is node 0
    cut: Optional[str] = None           # the saved output ends (or elides) inside this card's block: what is missing
    vbios: Optional[str] = None         # the VBIOS part number (rocm-smi --showhw, dmesg's ATOM BIOS line)
    nominal_memory_gib: Optional[float] = None   # the product's size from the PCI id table, where the output shows none
    sensors_unreadable: bool = False    # every sensor of its row reads N/A: the driver does not answer for it

    @property
    def bf16(self) -> Optional[bool]:
        return bf16_verdict(self.arch)[0]


@dataclass
class ParseResult:
    tool: str                           # rocminfo | rocm-smi | amd-smi | nvidia-smi | unknown
    source: str                         # file name (and sample number) for messages
    gpus: list[GpuRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # facts worth a finding (versions, pitfalls)
    problems: list[str] = field(default_factory=list)   # "could not read ..." messages
    rocm_version: Optional[str] = None                  # where the output states it (amd-smi's default view)
    torch_version: Optional[str] = None                 # collect_env's "PyTorch version"
    hip_version: Optional[str] = None                   # collect_env's "HIP runtime version"


@dataclass
class Sample:
    text: str
    command: str = ""                   # from a `# COMMAND:` header or a `$ ...` prompt, when present


# ---------------------------------------------------------------------------------------------------------
# Splitting a pasted file into tool outputs
# ---------------------------------------------------------------------------------------------------------

# A shell prompt before a tool command: "$ ", "~$ ", "user@host:~/dir$ ", "[root@host ~]# ".
_PROMPT = re.compile(r"^\s*(?:\[[^\]]*\]|(?:[\w.\-]+@[\w.\-]+:)?[~\w/.\-]*)[$#]\s+"
                     r"((?:sudo\s+)?\S*(?:rocm-smi|amd-smi|rocminfo|nvidia-smi)\b.*)$")


_SMI_BANNER = re.compile(r"^\s*=+\s*ROCm System Management Interface\s*=+\s*$")


def split_samples(text: str) -> list[Sample]:
    """Cut a file at comment blocks (`# ...`) and shell prompts (`$ rocm-smi ...`); empty pieces dropped."""
    samples: list[Sample] = []
    lines: list[str] = []
    command = ""
    in_header = False

    def flush() -> None:
        body = "\n".join(lines)
        if body.strip():
            samples.append(Sample(body, command))

    for line in text.splitlines():
        if _SMI_BANNER.match(line) and any(l.strip() and not _SMI_BANNER.match(l) and not set(l.strip()) <= {"="}
                                           for l in lines):
            flush()   # a second rocm-smi table pasted right after the first: an output of its own
            lines, in_header = [], False
        prompt = _PROMPT.match(line)
        if line.startswith("# ") or line.strip() == "#" or prompt:
            if not in_header:
                flush()
                lines, command = [], ""
            in_header = not prompt
            header_command = re.match(r"#\s*COMMAND[^:]*:\s*(.*)", line, re.IGNORECASE)
            if prompt:
                command = prompt.group(1).strip()
            elif header_command:
                command = header_command.group(1).strip()
            continue
        in_header = False
        lines.append(line)
    flush()
    return samples


# ---------------------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------------------

def _gib(value: float, unit: str) -> float:
    scale = {"b": 1, "kb": 2**10, "kib": 2**10, "mb": 2**20, "mib": 2**20, "gb": 2**30, "gib": 2**30}[unit.lower()]
    return round(value * scale / 2**30, 2)


def _int(text: Any) -> Optional[int]:
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        return None


def _is_hex_id(text: str) -> bool:
    return bool(re.fullmatch(r"0x[0-9a-fA-F]+", text.strip()))


def _complete(gpu: GpuRecord) -> GpuRecord:
    """Fill arch / integrated / a product name from the tables when the output itself did not say: the product table
    by name, then the PCI id table (hardware/gpu_ids.tsv) by device id or VBIOS part number. A generic name ("AMD
    Radeon Graphics", printed for many APUs) is kept but names no product."""
    gpu.generic_name = bool(gpu.name and GENERIC_AMD_NAMES.match(gpu.name))
    row = lookup_id(gpu.device_id, AMD, gpu.vbios) if gpu.vendor == "amd" else None
    product = lookup_product(gpu.name or "", gpu.device_id)
    if product is not None:
        if gpu.arch is None:
            gpu.arch, gpu.arch_source = product.arch, "product table"
        gpu.integrated = gpu.integrated or product.integrated
    elif row is not None:
        if gpu.arch is None:
            gpu.arch, gpu.arch_source = row.arch, "PCI id table"
        gpu.integrated = gpu.integrated or row.integrated
    if row is not None:
        if gpu.name is None or gpu.generic_name:
            gpu.name = row.name if gpu.name is None else f"{gpu.name} ({row.name})"
            gpu.generic_name = False
        if gpu.memory_gib is None and row.memory_gib:
            gpu.nominal_memory_gib = row.memory_gib
    return gpu


complete_record = _complete   # for readers elsewhere (doctor's dmesg and sysfs pieces)


def _arch_from_rocm_smi(gpu: GpuRecord, raw: Optional[str], notes: list[str]) -> None:
    if not raw or raw.upper() == "N/A":
        return
    gpu.reported_gfx = raw
    decoded = decode_rocm_smi_gfx(raw)
    if decoded is None:
        return
    gpu.arch, gpu.arch_source = decoded, "rocm-smi GFX Version (decoded)"
    if decoded != raw.strip().lower():
        notes.append(f"GPU {gpu.index}: rocm-smi prints GFX Version {raw!r}, which is not a compiler target; "
                     f"it decodes to {decoded} (rocminfo and torch's gcnArchName say {decoded})")


# ---------------------------------------------------------------------------------------------------------
# rocminfo
# ---------------------------------------------------------------------------------------------------------

_KV = re.compile(r"^\s*([A-Za-z][\w .()/#-]*?):\s*(.*?)\s*$")


def parse_rocminfo(text: str, result: ParseResult) -> None:
    """HSA agents of Device Type GPU, in order (that order is what HIP_VISIBLE_DEVICES indexes)."""
    blocks = re.split(r"^\s*Agent\s+\d+\s*$", text, flags=re.MULTILINE)[1:]
    runtime = re.search(r"ROCk module(?: version (\S+))? is loaded", text)
    if runtime and runtime.group(1):
        result.notes.append(f"amdgpu kernel driver (ROCk) {runtime.group(1)}")
    for block in blocks:
        fields: dict[str, str] = {}
        isa = None
        memory_kb = None
        lines = block.splitlines()
        pairs = [(m.group(1).strip(), m.group(2)) for m in map(_KV.match, lines) if m]
        for i, (key, value) in enumerate(pairs):
            fields.setdefault(key, value)
            if key == "Name" and value.startswith("amdgcn-amd-amdhsa--") and isa is None:
                isa = value.split("--", 1)[1]
            # VRAM is the first coarse-grained global pool; its Size follows the Segment line.
            if key == "Segment" and "COARSE GRAINED" in value and memory_kb is None:
                size = next((v for k, v in pairs[i + 1:i + 3] if k == "Size"), None)
                memory_kb = _int(size.split("(")[0]) if size else None
        device_type = fields.get("Device Type", "").upper()
        cut = None
        if not device_type and is_gfx_target(fields.get("Name", "")):
            cut = "the output ends inside this agent's block (no Device Type, memory or ISA lines)"   # an excerpt
        elif device_type != "GPU":
            continue
        gpu = GpuRecord(index=len(result.gpus), vendor="amd", name=fields.get("Marketing Name") or None,
                        uuid=fields.get("Uuid"), device_id=_int(fields.get("Chip ID", "").split("(")[0]),
                        kfd_node=_int(fields.get("Node")), cut=cut)
        agent_name = fields.get("Name", "")
        if is_gfx_target(agent_name):
            gpu.arch, gpu.arch_source = normalise_gfx(agent_name), "rocminfo Name"
        elif isa and is_gfx_target(isa):
            gpu.arch, gpu.arch_source = normalise_gfx(isa), "rocminfo ISA"
        if memory_kb:
            gpu.memory_gib = _gib(memory_kb, "kb")
        gpu.integrated = "APU" in fields.get("Memory Properties", "").upper()   # rocminfo of ROCm 6.4+ says so
        result.gpus.append(_complete(gpu))


# ---------------------------------------------------------------------------------------------------------
# rocm-smi: --json, --csv, plain "GPU[i] : key: value", concise table
# ---------------------------------------------------------------------------------------------------------

def _rocm_smi_card(index: int, fields: dict[str, str], notes: list[str]) -> GpuRecord:
    """One card from rocm-smi's key/value fields (same keys in --json, --csv and plain; case varies)."""
    f = {k.strip().lower(): str(v).strip() for k, v in fields.items()}
    gpu = GpuRecord(index=index, vendor="amd", uuid=f.get("unique id"), bus_id=f.get("pci bus"))
    series, model, device_name = f.get("card series", ""), f.get("card model", ""), f.get("device name", "")
    # "Card model" is a name on old cards ("Radeon R9 FURY X") and a PCI id on new ones ("0x74a1").
    names = [n for n in (model if not _is_hex_id(model) else "", series, device_name) if n and n != "N/A"]
    gpu.name = names[0] if names else None
    gpu.device_id = _int(f.get("device id") or (model if _is_hex_id(model) else None))
    total = f.get("vram total memory (b)")
    if total and _int(total):
        gpu.memory_gib = _gib(_int(total), "b")
    _arch_from_rocm_smi(gpu, f.get("gfx version"), notes)
    return _complete(gpu)


def parse_rocm_smi_json(data: Any, result: ParseResult) -> None:
    cards = sorted(((int(k[4:]), v) for k, v in data.items() if re.fullmatch(r"card\d+", k)), key=lambda kv: kv[0])
    for index, fields in cards:
        result.gpus.append(_rocm_smi_card(index, fields, result.notes))
    system = data.get("system", {})
    if isinstance(system, dict) and system.get("Driver version"):
        result.notes.append(f"amdgpu driver {system['Driver version']}")


def parse_rocm_smi_json_cut(text: str, result: ParseResult) -> None:
    """`rocm-smi --json` pasted only in part (the JSON does not close): every "cardN" object that starts in the text
    is a card, with the "key": "value" pairs that made it in."""
    starts = list(re.finditer(r'"(card\d+)"\s*:\s*\{', text))
    for i, match in enumerate(starts):
        segment = text[match.end(): starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        fields = dict(re.findall(r'"([^"]+)"\s*:\s*"([^"]*)"', segment))
        gpu = _rocm_smi_card(int(match.group(1)[4:]), fields, result.notes)
        if i + 1 == len(starts):
            gpu.cut = "the saved JSON ends inside this card's object: the fields after the cut are unknown"
        result.gpus.append(gpu)
    if not result.gpus:
        raise ValueError("no cardN object in the cut JSON")


def parse_rocm_smi_csv(text: str, result: ParseResult) -> None:
    for row in csv.DictReader(io.StringIO(text.strip())):
        device = (row.get("device") or "").strip()
        if device == "cardsystem" and row.get("Driver version"):
            result.notes.append(f"rocm-smi driver version {row['Driver version']}")
        if re.fullmatch(r"card\d+", device):
            result.gpus.append(_rocm_smi_card(int(device[4:]), row, result.notes))


_ROCM_SMI_PLAIN = re.compile(r"^GPU\[(\d+)\]\s*:\s*([^:]+?):\s*(.*?)\s*$")


def parse_rocm_smi_plain(text: str, result: ParseResult) -> None:
    """`rocm-smi -a`, `--showproductname`, `--showmeminfo vram`: lines `GPU[i] : key: value`."""
    cards: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        match = _ROCM_SMI_PLAIN.match(line.strip())
        if match:
            cards.setdefault(int(match.group(1)), {}).setdefault(match.group(2).strip(), match.group(3))
        elif line.startswith("GPU[") or line.strip().startswith("GPU["):
            cards.setdefault(int(re.match(r"\s*GPU\[(\d+)\]", line).group(1)), {})
    driver = re.search(r"^Driver version:\s*(\S+)", text, re.MULTILINE)
    if driver:
        result.notes.append(f"amdgpu driver {driver.group(1)}")
    for index in sorted(cards):
        result.gpus.append(_rocm_smi_card(index, cards[index], result.notes))


def parse_rocm_smi_concise(text: str, result: ParseResult) -> None:
    """The default table. Its layout changed with ROCm 3, 5 and 6; only ROCm 6+ shows a name (on a second
    line under the device row) and a PCI id (`[0x74a1 : 0x00]`)."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if re.match(r"\s*(GPU|Device)\s+", l)), None)
    if start is None:
        raise ValueError("no GPU/Device header row")
    has_node = bool(re.match(r"\s*Device\s+Node\b", lines[start]))
    current: Optional[GpuRecord] = None
    for line in lines[start + 1:]:
        if line.startswith("=") or not line.strip():
            continue
        row = re.match(r"^(\d+)\s+(.*)$", line)
        if row:
            current = GpuRecord(index=int(row.group(1)), vendor="amd")
            node = re.match(r"(\d+)\s", row.group(2)) if has_node else None
            current.kfd_node = int(node.group(1)) if node else None
            device_id = re.search(r"\b0x([0-9a-fA-F]{4})\b", row.group(2))
            if device_id:
                current.device_id = int(device_id.group(1), 16)
            cells = row.group(2).split()
            current.sensors_unreadable = sum(c.rstrip(",") in ("N/A", "None", "unknown") for c in cells) >= 4 and \
                not re.search(r"\b\d+(?:\.\d+)?\s?°?C\b|\b\d+(?:\.\d+)?\s?W\b|\b\d+\s?Mhz\b", row.group(2), re.IGNORECASE)
            if "..." in row.group(2):
                current.cut = "columns elided ('...') in the saved table"
            result.gpus.append(current)
        elif current is not None and line[:1].isspace() and current.name is None and not line.strip().startswith("("):
            current.name = line.strip()
    result.gpus[:] = [_complete(g) for g in result.gpus]


_BUS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d$")


def parse_rocm_smi_showhw(text: str, result: ParseResult) -> None:
    """`rocm-smi --showhw` ("Concise Hardware Info"): no names, but the PCI device id (DID: `7408` in ROCm 4-5, `0x740f`
    in ROCm 6), the VBIOS part number, the bus and, from ROCm 6, the KFD node, GFX VER and the partition. Columns are
    told apart by their form, not their width, so a paste whose spaces were squeezed still reads."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if re.match(r"\s*GPU\s+(NODE\s+)?DID\b", l)), None)
    if start is None:
        raise ValueError("no GPU/DID header row")
    has_node = bool(re.match(r"\s*GPU\s+NODE\b", lines[start]))
    has_gfx = "GFX VER" in lines[start]
    for line in lines[start + 1:]:
        tokens = line.split()
        if not tokens or not tokens[0].isdigit():
            if tokens and set(line.strip()) <= {"="}:
                continue
            if result.gpus:
                break
            continue
        index, rest = int(tokens[0]), tokens[1:]
        gpu = GpuRecord(index=index, vendor="amd")
        if has_node and rest and rest[0].isdigit():
            gpu.kfd_node, rest = int(rest[0]), rest[1:]
        if rest and re.fullmatch(r"(0x)?[0-9a-fA-F]{4}", rest[0]):
            gpu.device_id, rest = int(rest[0][2:] if rest[0].lower().startswith("0x") else rest[0], 16), rest[1:]
        for token in rest:
            if has_gfx and gpu.reported_gfx is None and re.fullmatch(r"gfx[0-9a-fA-F]+", token):
                _arch_from_rocm_smi(gpu, token, result.notes)
            elif _BUS.match(token):
                gpu.bus_id = token.lower()
            elif re.fullmatch(r"\d{3}-[\w.-]+", token):
                gpu.vbios = token
        result.gpus.append(_complete(gpu))
    if not result.gpus:
        raise ValueError("no GPU rows under the --showhw header")


# ---------------------------------------------------------------------------------------------------------
# amd-smi: plain (indented tree) and --json
# ---------------------------------------------------------------------------------------------------------

def _amd_smi_gpu(index: int, tree: dict[str, Any]) -> GpuRecord:
    """One GPU from amd-smi's fields, flattened to lower-case dotted keys (asic.market_name, vram.size)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and not ({"value", "unit"} >= set(node) and "value" in node):
            for key, value in node.items():
                walk(value, f"{prefix}.{key.lower()}" if prefix else key.lower())
        elif isinstance(node, dict):
            flat[prefix] = f"{node['value']} {node.get('unit', '')}".strip()
        else:
            flat[prefix] = node

    walk(tree, "")
    gpu = GpuRecord(index=index, vendor="amd", uuid=flat.get("uuid") or flat.get("asic.asic_serial"),
                    bus_id=flat.get("bdf") or flat.get("bus.bdf"), device_id=_int(flat.get("asic.device_id")))
    name = flat.get("asic.market_name") or flat.get("board.product_name")
    gpu.name = str(name) if name and name != "N/A" else None
    target = str(flat.get("asic.target_graphics_version") or "")
    if is_gfx_target(target):
        gpu.arch, gpu.arch_source = normalise_gfx(target), "amd-smi TARGET_GRAPHICS_VERSION"
    size = re.match(r"^\s*([\d.]+)\s*([KMG]i?B|B)?\s*$", str(flat.get("vram.size", "")))
    if size:
        gpu.memory_gib = _gib(float(size.group(1)), size.group(2) or "MB")
    return _complete(gpu)


def parse_amd_smi_plain(text: str, result: ParseResult) -> None:
    """`amd-smi list` / `amd-smi static`: `GPU: N` blocks of `KEY: value` lines nested by indentation."""
    gpus: dict[int, dict[str, Any]] = {}
    stack: list[tuple[int, dict[str, Any]]] = []   # (indent, node); the GPU's root sits at indent -1
    for line in text.splitlines():
        match = re.match(r"^(\s*)([^:]+):\s*(.*?)\s*$", line)
        if not match:
            continue
        indent, key, value = len(match.group(1)), match.group(2).strip(), match.group(3)
        if indent == 0:   # a new top-level block: GPU: N (CPU: N blocks of an APU are skipped)
            index = _int(value) if key == "GPU" else None
            stack = [(-1, gpus.setdefault(index, {}))] if index is not None else []
            continue
        if not stack:
            continue
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if value:
            parent.setdefault(key, value)
        else:
            parent[key] = child = {}
            stack.append((indent, child))
    for index in sorted(gpus):
        result.gpus.append(_amd_smi_gpu(index, gpus[index]))


def parse_amd_smi_json(data: Any, result: ParseResult) -> None:
    entries = data if isinstance(data, list) else data.get("gpu_data", [data]) if isinstance(data, dict) else []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        index = _int(entry.get("gpu"))
        result.gpus.append(_amd_smi_gpu(position if index is None else index,
                                        {k: v for k, v in entry.items() if k != "gpu"}))


_AMD_SMI_ROW1 = re.compile(r"^\s*\|\s*([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*?)\s*\|(.*)\|\s*$")
# The first line of a card's block cut short: the BDF and (some of) the name, no closing bar.
_AMD_SMI_ROW1_CUT = re.compile(r"^\s*\|\s*([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*([^|]*?)\s*(?:\|.*)?$")
_AMD_SMI_ROW2 = re.compile(r"^\s*\|\s*(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s*\|(.*)\|\s*$")
_AMD_SMI_POWER = re.compile(r"(N/A|[\d.]+)(?:/(N/A|[\d.]+))?\s*W\s*$")
_AMD_SMI_MEMORY = re.compile(r"(\d+)/(\d+)\s*MB\s*$")


def _number(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text not in (None, "N/A") else None
    except ValueError:
        return None


def parse_amd_smi_default(text: str, result: ParseResult) -> None:
    """`amd-smi` with no arguments (ROCm 6.4+/7): an nvidia-smi-like box, two lines per GPU:
    `| BDF  GPU-Name | Mem-Uti Temp UEC Power-Usage |` then `| GPU HIP-ID OAM-ID Partition-Mode | ... Mem-Usage |`.
    The name can be a marketing name, the generic "AMD Radeon Graphics" (APUs), or a PCI device id ("0x1586")."""
    header = re.search(r"ROCm version:\s*(\S+)", text)
    if header:
        result.rocm_version = header.group(1)
    driver = re.search(r"amdgpu version:\s*(\d[\w.+-]*)", text)   # some builds print "Linuxver" there
    if header or driver:
        result.notes.append(", ".join(p for p in (f"ROCm {header.group(1)}" if header else "",
                                                  f"amdgpu driver {driver.group(1)}" if driver else "") if p))
    if re.search(r"Platform:\s*Linux Guest", text):
        result.notes.append("runs in a virtual machine (amd-smi: Platform: Linux Guest); a name ending in 'VF' is an "
                            "SR-IOV virtual function")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        first = _AMD_SMI_ROW1.match(line) or _AMD_SMI_ROW1_CUT.match(line)
        second = _AMD_SMI_ROW2.match(lines[i + 1]) if first and i + 1 < len(lines) else None
        if not first:
            continue
        if second is None:   # an excerpt cut inside this card's block: keep the card, mark what is missing
            bdf, name = first.group(1), first.group(2)
            index = result.gpus[-1].index + 1 if result.gpus else 0
            gpu = GpuRecord(index=index, vendor="amd", bus_id=bdf.lower(),
                            cut="the saved table ends inside this card's block: its index is inferred (the card "
                                "before it + 1); HIP id and memory unknown")
            name = name.strip() if name else ""
            if _is_hex_id(name):
                gpu.device_id = int(name, 16)
            elif name and name != "N/A":
                gpu.name = name
            result.gpus.append(_complete(gpu))
            continue
        bdf, name = first.group(1), first.group(2)
        metrics = first.group(3) if first.re is _AMD_SMI_ROW1 else ""
        gpu = GpuRecord(index=int(second.group(1)), vendor="amd", bus_id=bdf.lower(), hip_id=_int(second.group(2)))
        if _is_hex_id(name):
            gpu.device_id = int(name, 16)
        elif name and name != "N/A":
            gpu.name = name
        power = _AMD_SMI_POWER.search(metrics.strip())
        if power:
            gpu.power_w, gpu.power_cap_w = _number(power.group(1)), _number(power.group(2))
        partition = second.group(4)
        gpu.partition = partition if partition != "N/A" else None
        memory = _AMD_SMI_MEMORY.search(second.group(5).strip())
        if memory:
            gpu.memory_gib = _gib(int(memory.group(2)), "mib")
        result.gpus.append(_complete(gpu))
    if not result.gpus:
        raise ValueError("no GPU rows in the amd-smi table")


# ---------------------------------------------------------------------------------------------------------
# nvidia-smi: the default table and --query-gpu CSV
# ---------------------------------------------------------------------------------------------------------

_NVIDIA_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)")
_NVIDIA_MEMORY = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")


def parse_nvidia_smi_table(text: str, result: ParseResult) -> None:
    header = re.search(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)", text)
    if header:
        result.notes.append(f"NVIDIA driver {header.group(1)}, CUDA {header.group(2)} (driver API)")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        row = _NVIDIA_ROW.match(line)
        if not row:
            continue
        gpu = GpuRecord(index=int(row.group(1)), vendor="nvidia", name=row.group(2).strip(), bus_id=row.group(3))
        memory = _NVIDIA_MEMORY.search(lines[i + 1]) if i + 1 < len(lines) else None
        if memory:
            gpu.memory_gib = _gib(int(memory.group(2)), "mib")
        result.gpus.append(_complete(gpu))


_QUERY_FIELDS = {"index": "index", "name": "name", "memory.total": "memory", "uuid": "uuid", "gpu_uuid": "uuid",
                 "pci.bus_id": "bus_id", "gpu_bus_id": "bus_id", "compute_cap": "compute_cap"}


def parse_nvidia_query_csv(text: str, command: str, result: ParseResult) -> None:
    """`--query-gpu=... --format=csv[,noheader][,nounits]`. Without a header the field list comes from the
    command line; without either, only the name and UUID are recognisable."""
    rows = [[c.strip() for c in row] for row in csv.reader(io.StringIO(text.strip())) if row]
    fields_from_command = re.search(r"--query-gpu[= ]([\w.,]+)", command)
    first = [c.split(" [")[0].strip() for c in rows[0]]
    if any(c in _QUERY_FIELDS for c in first):
        columns, rows = first, rows[1:]
    elif fields_from_command:
        columns = fields_from_command.group(1).split(",")
    else:
        columns = []
        result.notes.append("nvidia-smi CSV without a header or command line: columns guessed; "
                            "save it with the header (drop 'noheader') for a full reading")
    seen: set[int] = set()
    for position, row in enumerate(rows):
        values = {_QUERY_FIELDS[c]: v for c, v in zip(columns, row) if c in _QUERY_FIELDS}
        if not columns:
            values["name"] = next((v for v in row if re.search(r"NVIDIA|GeForce|Tesla|Quadro|RTX|TITAN", v)), "")
            values["uuid"] = next((v for v in row if v.startswith("GPU-")), "")
        index = _int(values.get("index"))
        index = position if index is None else index
        if index in seen:        # `-l N` repeats every GPU once per interval
            continue
        seen.add(index)
        gpu = GpuRecord(index=index, vendor="nvidia", name=values.get("name") or None,
                        uuid=values.get("uuid") or None, bus_id=values.get("bus_id") or None)
        memory = re.match(r"([\d.]+)\s*(MiB)?", values.get("memory", ""))
        if memory:
            gpu.memory_gib = _gib(float(memory.group(1)), "mib")
        cap = re.fullmatch(r"(\d+)\.(\d+)", values.get("compute_cap", ""))
        if cap:
            gpu.arch, gpu.arch_source = f"sm_{cap.group(1)}{cap.group(2)}", "nvidia-smi compute_cap"
        result.gpus.append(_complete(gpu))


# ---------------------------------------------------------------------------------------------------------
# torch's collect_env (python -m torch.utils.collect_env): the torch build and, on ROCm, the current GPU
# ---------------------------------------------------------------------------------------------------------

def parse_collect_env(text: str, result: ParseResult) -> None:
    """`PyTorch version: 2.7.0.dev20250123+rocm6.3`, `ROCM used to build PyTorch: 6.3.42131-fa1d09cbd`, `HIP runtime
    version: 6.3.42131`, `GPU models and configuration: AMD Radeon RX 5700 XT (gfx1010:xnack-)` (ROCm: the current
    GPU only) or `GPU 0: NVIDIA ...` lines (nvidia-smi -L)."""
    def field(name: str) -> Optional[str]:
        match = re.search(rf"^{name}:[ \t]*(.*?)\s*$", text, re.MULTILINE)
        return match.group(1) if match and match.group(1) not in ("", "N/A", "Could not collect") else None

    result.torch_version = field("PyTorch version")
    rocm = field("ROCM used to build PyTorch")
    result.rocm_version = rocm.split("-")[0] if rocm else None
    result.hip_version = field("HIP runtime version")
    gpus = field("GPU models and configuration")
    lines = [gpus] if gpus else []
    block = re.search(r"^GPU models and configuration:[ \t]*\n((?:GPU \d+: .*\n?)+)", text, re.MULTILINE)
    if block:
        lines = block.group(1).splitlines()
    for line in lines:
        match = re.match(r"(?:GPU (\d+): )?(.*?)(?: \((gfx[0-9a-f]+)[^)]*\))?(?: \(UUID: (GPU-[^)]*)\))?$", line.strip())
        if not match or not match.group(2):
            continue
        vendor = "amd" if match.group(3) or result.rocm_version else "nvidia"
        gpu = GpuRecord(index=int(match.group(1)) if match.group(1) else len(result.gpus), vendor=vendor,
                        name=match.group(2), uuid=match.group(4))
        if match.group(3):
            gpu.arch, gpu.arch_source = normalise_gfx(match.group(3)), "collect_env gcnArchName"
        result.gpus.append(_complete(gpu))
    if result.rocm_version and len(result.gpus) == 1:
        result.notes.append("collect_env names only the current GPU on ROCm; save rocminfo or amd-smi for the others")


# ---------------------------------------------------------------------------------------------------------
# Recognising which tool wrote a sample
# ---------------------------------------------------------------------------------------------------------

def _load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def recognise(sample: Sample) -> tuple[str, Optional[Callable[[ParseResult], None]]]:
    """-> (tool, reader bound to this sample) or ('unknown', None)."""
    text, command = sample.text, sample.command
    stripped = text.strip()
    if stripped[:1] in "[{":
        data = _load_json(stripped)
        if isinstance(data, dict) and any(re.fullmatch(r"card\d+", k) for k in data):
            return "rocm-smi", lambda r: parse_rocm_smi_json(data, r)
        if isinstance(data, (list, dict)) and data is not None:
            items = data if isinstance(data, list) else data.get("gpu_data", [data])
            if items and all(isinstance(i, dict) and "gpu" in i for i in items):
                return "amd-smi", lambda r: parse_amd_smi_json(data, r)
        if data is None and re.search(r'"card\d+"\s*:\s*\{', stripped):
            return "rocm-smi", lambda r: parse_rocm_smi_json_cut(stripped, r)
    if re.search(r"^PyTorch version:", text, re.MULTILINE) and re.search(r"^(ROCM|CUDA) used to build PyTorch:", text,
                                                                         re.MULTILINE):
        return "collect_env", lambda r: parse_collect_env(text, r)
    if re.search(r"\bGPU-Name\b", text) and re.search(r"\bHIP-ID\b", text):
        return "amd-smi", lambda r: parse_amd_smi_default(text, r)
    if re.search(r"^\s*HSA Agents\s*$", text, re.MULTILINE) or re.search(r"^\s*Agent \d+\s*$", text, re.MULTILINE):
        return "rocminfo", lambda r: parse_rocminfo(text, r)
    if "NVIDIA-SMI" in text or _NVIDIA_ROW.search(text):
        return "nvidia-smi", lambda r: parse_nvidia_smi_table(text, r)
    first_line = stripped.splitlines()[0] if stripped else ""
    if first_line.startswith("device,"):
        return "rocm-smi", lambda r: parse_rocm_smi_csv(text, r)
    query_header = re.match(r"^(index|name|memory\.total|uuid|pci\.bus_id|[\w.]+ \[\w+\]),", first_line)
    query_row = "," in first_line and re.search(r"\bGPU-[0-9a-fA-F]{8}|NVIDIA|GeForce|Tesla|Quadro", first_line)
    if "--query-gpu" in command or query_header or query_row:
        return "nvidia-smi", lambda r: parse_nvidia_query_csv(text, command, r)
    if re.search(r"^GPU\[\d+\]\s*:", text, re.MULTILINE):
        return "rocm-smi", lambda r: parse_rocm_smi_plain(text, r)
    if "Concise Hardware Info" in text or re.search(r"^\s*GPU\s+(NODE\s+)?DID\s", text, re.MULTILINE):
        return "rocm-smi", lambda r: parse_rocm_smi_showhw(text, r)
    if "ROCm System Management Interface" in text or re.search(r"^\s*(GPU|Device)\s+(Temp|\[Model|Node)", text, re.MULTILINE):
        return "rocm-smi", lambda r: parse_rocm_smi_concise(text, r)
    if re.search(r"^GPU:\s*\d+\s*$", text, re.MULTILINE):
        return "amd-smi", lambda r: parse_amd_smi_plain(text, r)
    return "unknown", None


def parse_sample(sample: Sample, source: str) -> ParseResult:
    """Read one tool output. Never raises: failures become `problems`."""
    tool, reader = recognise(sample)
    result = ParseResult(tool=tool, source=source)
    if reader is None:
        result.problems.append(f"could not read {source}: not a recognised rocm-smi, amd-smi, rocminfo or "
                               "nvidia-smi output")
        return result
    try:
        reader(result)
    except Exception as e:  # a layout we have not seen: report it, keep going with the other files
        result.gpus.clear()
        result.problems.append(f"could not read {source} as {tool} output ({type(e).__name__}: {e})")
    if len({g.index for g in result.gpus}) < len(result.gpus):   # two tables of one tool in one piece: the same cards
        merged, _ = merge_results([ParseResult(tool=tool, source=source, gpus=[g]) for g in result.gpus])
        result.gpus[:] = merged
    return result


def parse_text(text: str, source: str) -> list[ParseResult]:
    """All tool outputs in one file, each read separately."""
    samples = split_samples(text)
    if not samples:
        return [ParseResult(tool="unknown", source=source, problems=[f"could not read {source}: the file is empty"])]
    if len(samples) == 1:
        return [parse_sample(samples[0], source)]
    return [parse_sample(s, f"{source} (output {i})") for i, s in enumerate(samples, 1)]


# ---------------------------------------------------------------------------------------------------------
# One machine from several outputs
# ---------------------------------------------------------------------------------------------------------

# Who to believe for the architecture, best first.
_ARCH_TRUST = ("rocminfo Name", "rocminfo ISA", "amd-smi TARGET_GRAPHICS_VERSION", "KFD gfx_target_version",
               "collect_env gcnArchName", "environment.json",
               "nvidia-smi compute_cap",
               "rocm-smi GFX Version (decoded)", "product table", "PCI id table")
def _trust(source: Optional[str]) -> int:
    return _ARCH_TRUST.index(source) if source in _ARCH_TRUST else len(_ARCH_TRUST)


# Who names the product best: marketing names first, rocm-smi's PCI-database series last.
_NAME_TRUST = ("amd-smi", "rocminfo", "nvidia-smi", "collect_env", "rocm-smi")


def _bus(bus_id: Optional[str]) -> Optional[str]:
    """'0000:C1:00.0' / '00000000:C1:00.0' / 'c1:00.0' -> 'c1:00.0'."""
    match = re.search(r"([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)$", (bus_id or "").strip())
    return match.group(1).lower() if match else None


def merge_results(results: list[ParseResult]) -> tuple[list[GpuRecord], list[str]]:
    """Combine outputs from the same machine, GPU by GPU: by PCI bus where two outputs give it (and it names one card in
    each: an MI300's partitions share theirs), else by index, per vendor. -> (gpus, conflicts)."""
    conflicts: list[str] = []
    merged: dict[tuple, GpuRecord] = {}
    origin: dict[tuple, str] = {}
    by_bus: dict[str, tuple] = {}
    ordered = sorted((r for r in results if r.gpus), key=lambda r: _NAME_TRUST.index(r.tool) if r.tool in _NAME_TRUST else 9)
    for result in ordered:
        buses = [_bus(g.bus_id) for g in result.gpus]
        for gpu, bus in zip(result.gpus, buses):
            bus = bus if bus and buses.count(bus) == 1 else None
            key = by_bus.get(bus) if bus else None
            if key is None:
                key = (gpu.vendor, gpu.index)
                other = _bus(merged[key].bus_id) if key in merged else None
                if bus and other and other != bus:   # the same index, another card: an output numbered differently
                    key = (gpu.vendor, gpu.index, bus)
            if bus:
                by_bus.setdefault(bus, key)
            if key not in merged:
                merged[key], origin[key] = replace(gpu), result.source
                continue
            base = merged[key]
            tables = ("product table", "PCI id table")
            if base.arch and gpu.arch and base.arch != gpu.arch and gpu.arch_source not in tables \
                    and base.arch_source not in tables:
                conflicts.append(f"GPU {gpu.index}: {origin[key]} says {base.arch}, {result.source} says {gpu.arch}; "
                                 "are these outputs from the same machine?")
                continue
            if gpu.arch and (base.arch is None or _trust(gpu.arch_source) < _trust(base.arch_source)):
                base.arch, base.arch_source = gpu.arch, gpu.arch_source
            for name in ("name", "memory_gib", "uuid", "bus_id", "device_id", "reported_gfx", "hip_id", "power_w",
                         "power_cap_w", "partition", "kfd_node", "vbios",
                         "nominal_memory_gib"):
                if getattr(base, name) is None:
                    setattr(base, name, getattr(gpu, name))
            base.integrated = base.integrated or gpu.integrated
            if base.cut and not gpu.cut:   # another output has this card whole
                base.cut = None
    return [merged[k] for k in sorted(merged)], conflicts
