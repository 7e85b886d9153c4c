"""The error catalogue: messages from real reports (error_catalogue.yaml beside this module: one entry per signature, its
real snippet and source, our cause and fix) matched against a text - a traceback, a log, dmesg, a console paste - and
made specific for the machine where the facts around the message say more (the visibility variables of the command
line, the GPU's arch and the wheel that has it, the numbers of an out-of-memory message).

Two readers use it: `doctor --from` over every piece of what a user pastes, and the commands (`train`, `serve`,
`export`) over the error that ended them, which prints one "likely cause" line under the traceback. Nothing here
imports torch; the data file is read on first use.
"""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from steadytune.hardware.gpu_facts import arch_info, first_stable_wheel, install_lines, normalise_gfx, override_for_arch
from steadytune.hardware.gpu_ids import lookup_id
from steadytune.hardware.pattern_file import read_pattern_entries
from steadytune.hardware.torch_builds import wheel_archs_of
from steadytune.hardware.visibility import stack_masks

CATALOGUE = Path(__file__).with_name("error_catalogue.yaml")
SEVERITIES = ("error", "warning", "info")
CONTEXTS = ("visibility", "arch", "oom", "bnb_library", "gpu_node", "dmesg_device", "socket", "sudo", "cuda_wheel")
FIELDS = ("id", "title", "match", "example", "source", "cause", "fix", "severity", "family")


@dataclass(frozen=True)
class Entry:
    id: str
    title: str
    patterns: tuple[re.Pattern, ...]
    example: str
    source: str
    cause: str
    fix: str
    severity: str
    family: str                         # the cause family doctor's rules file it under (doctor/error_classes.yaml)
    context: Optional[str] = None
    own: bool = False                   # `answer: own`: its own cause and fix settle the line; the family's rules leave it
    symptom: bool = False               # `answer: symptom`: a generic symptom; its fix is the next step, never a settled cause


@dataclass
class Facts:
    """What is known around a message: the variables in force where the process started, its command line, the GPUs
    and torch of that machine. Any of it may be missing."""
    env: Mapping[str, str] = field(default_factory=dict)
    command: str = ""
    gpus: Sequence[Any] = ()            # objects with index, vendor, arch, integrated, name, bus_id, kfd_node
    torch_version: Optional[str] = None
    hip_version: Optional[str] = None
    exported: Mapping[str, str] = field(default_factory=dict)   # set earlier in the same shell session


@dataclass
class Match:
    entry: Entry
    excerpt: str                        # the matched text, first line, trimmed
    position: int                       # where in the text
    cause: str
    fix: str

    def line(self) -> str:
        """The one line a failed command prints under its traceback."""
        return f"likely cause: {self.cause}. fix: {self.fix}   [steadytune error catalogue: {self.entry.id}, seen in " \
               f"{self.entry.source}]"


class CatalogueError(ValueError):
    """error_catalogue.yaml is malformed (a packaging or editing mistake, caught by the tests)."""


@lru_cache(maxsize=1)
def load_catalogue(path: Optional[Path] = None) -> tuple[Entry, ...]:
    entries = []
    for item, patterns in read_pattern_entries(path or CATALOGUE, "id", FIELDS, "match", CatalogueError):
        if item["severity"] not in SEVERITIES or item.get("context") not in (None, *CONTEXTS):
            raise CatalogueError(f"entry {item['id']}: severity {item['severity']!r} / context {item.get('context')!r}")
        if item.get("answer") not in (None, "own", "symptom"):
            raise CatalogueError(f"entry {item['id']}: answer {item.get('answer')!r} (only 'own' or 'symptom')")
        entries.append(Entry(item["id"], item["title"], patterns, str(item["example"]), str(item["source"]),
                             str(item["cause"]), str(item["fix"]), item["severity"], str(item["family"]),
                             item.get("context"), item.get("answer") == "own", item.get("answer") == "symptom"))
    return tuple(entries)


# ---------------------------------------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------------------------------------

def match_text(text: str, facts: Optional[Facts] = None) -> list[Match]:
    """Every entry whose signature is in `text` (its first occurrence), in catalogue order: the first is the likely
    cause. A context that finds the entry does not apply here drops it."""
    facts = facts or Facts()
    found = []
    for entry in load_catalogue():
        hit = None
        for pattern in entry.patterns:
            m = pattern.search(text)
            if m and (hit is None or m.start() < hit.start()):
                hit = m
        if hit is None:
            continue
        resolved = _resolve(entry, hit, text, facts)
        if resolved is None:
            continue
        excerpt = hit.group(0).strip().splitlines()[0] if hit.group(0).strip() else ""
        found.append(Match(entry, _trim(_line_at(text, hit.start()) or excerpt), hit.start(), *resolved))
    return found


def likely_cause(text: str, facts: Optional[Facts] = None) -> Optional[Match]:
    matches = match_text(text, facts)
    return matches[0] if matches else None


def error_text(error: BaseException) -> str:
    """An exception and the ones it was raised from or during, as the lines a traceback ends with."""
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts.append("".join(traceback.format_exception_only(type(error), error)).strip())
        error = error.__cause__ or error.__context__
    return "\n".join(reversed(parts))


def explain_failure(error: BaseException, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The "likely cause / fix" line for an exception that ended a command, from this process's environment; None
    when no entry matches. Never raises: a failure to explain must not hide the failure itself."""
    try:
        match = likely_cause(error_text(error), Facts(env=dict(os.environ if env is None else env)))
    except Exception:   # lazy explanation only; the traceback above it is what matters
        return None
    return match.line() if match else None


def _line_at(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return text[start: end if end >= 0 else len(text)].strip()


def _trim(text: str, width: int = 200) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _window(text: str, hit: re.Match, lines: int = 4) -> str:
    """The matched text with a few lines either side (where a message's numbers and names are)."""
    start = hit.start()
    for _ in range(lines):
        start = text.rfind("\n", 0, max(start - 1, 0)) + 1 if start > 0 else 0
    end = hit.end()
    for _ in range(lines):
        nxt = text.find("\n", end + 1)
        end = len(text) if nxt < 0 else nxt
    return text[start:end]


# ---------------------------------------------------------------------------------------------------------
# Contexts: the entry's cause and fix made specific; None drops the entry
# ---------------------------------------------------------------------------------------------------------

Resolver = Callable[[Entry, re.Match, str, Facts], Optional[tuple[str, str]]]


def _resolve(entry: Entry, hit: re.Match, text: str, facts: Facts) -> Optional[tuple[str, str]]:
    resolver = _CONTEXTS.get(entry.context or "")
    return resolver(entry, hit, text, facts) if resolver else (entry.cause, entry.fix)


def _amd_gpus(facts: Facts) -> list[Any]:
    return [g for g in facts.gpus if getattr(g, "vendor", "amd") == "amd"]


def _visibility(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    count = len(_amd_gpus(facts)) or None
    reading = stack_masks(facts.env, count)
    if reading.problem:
        return reading.problem, reading.fix
    if reading.layers:
        return f"{entry.cause} (set: {', '.join(f'{k}={v}' for k, v in reading.layers.items())})", entry.fix
    return entry.cause, entry.fix


_ARCH_IN_MESSAGE = (re.compile(r"for GPU arch ?: ?(gfx[0-9a-f]+)"), re.compile(r"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)"),
                    re.compile(r"\b(gfx[0-9a-f]{3,4})\b(?:'\])? is invalid"), re.compile(r"\b(gfx[0-9a-f]{3,4})\b"))


def _arch_of(hit: re.Match, text: str, facts: Facts) -> tuple[Optional[str], str]:
    """(arch, where it was read) from the message, else from the machine's one discrete AMD GPU architecture."""
    window = _window(text, hit)
    for pattern in _ARCH_IN_MESSAGE:
        m = pattern.search(window)
        if m:
            return normalise_gfx(m.group(1)), "the message"
    known = [g for g in _amd_gpus(facts) if str(getattr(g, "arch", None) or "").startswith("gfx")]
    discrete = [g for g in known if not getattr(g, "integrated", False)] or known   # an APU alone is the GPU
    archs = sorted({normalise_gfx(g.arch) for g in discrete})
    if len(archs) == 1:
        return archs[0], "the GPU table"
    return None, ""


def _override_target(value: str) -> Optional[str]:
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", value.strip())
    return f"gfx{m.group(1)}{m.group(2)}{int(m.group(3)):x}" if m else None


def _family(arch: str) -> str:
    """gfx1031 -> gfx10, gfx1151 -> gfx11, gfx90a -> gfx9: the major version an override's X must keep."""
    base = normalise_gfx(arch)
    return base[:-2] if len(base) >= 6 else base


def _arch(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    arch, where = _arch_of(hit, text, facts)
    override = facts.env.get("HSA_OVERRIDE_GFX_VERSION")
    if override:
        target = _override_target(override)
        if target is None:
            return (f"HSA_OVERRIDE_GFX_VERSION={override} is not of the form X.Y.Z", "unset HSA_OVERRIDE_GFX_VERSION")
        if arch and normalise_gfx(arch) != target and (_family(arch) != _family(target)
                                                        or entry.id == "invalid-isa-override"):
            good = override_for_arch(arch)
            family = "another family's" if _family(arch) != _family(target) else "another chip's"
            return (f"HSA_OVERRIDE_GFX_VERSION={override} makes the GPU ({arch}) run {target} code, {family}",
                    f"export HSA_OVERRIDE_GFX_VERSION={good}" if good else "unset HSA_OVERRIDE_GFX_VERSION")
    if arch is None:
        return entry.cause, f"{entry.fix}; find the arch with rocminfo | grep -m1 -o 'gfx[0-9a-f]*'"
    wheel = wheel_archs_of(facts.torch_version)
    if entry.id in ("llamacpp-arch", "bnb-invalid-device-function", "flash-attn-arch"):
        return f"{entry.cause} ({arch}, read from {where})", entry.fix.replace("<arch>", arch)
    system_lib = re.search(r"(/opt/rocm[^\s:]*/lib\S*?\.so[.\d]*)", _window(text, hit, 6))
    if system_lib:
        return (f"{system_lib.group(1)}, a library of the system's ROCm, has no code for {arch} (read from {where}); "
                "the process loads it instead of the libraries the torch wheel bundles",
                "unset LD_LIBRARY_PATH for the run (the pytorch.org wheels carry their own ROCm libraries), or install "
                f"the ROCm release that supports {arch}")
    first = first_stable_wheel(arch)
    if wheel is None and facts.torch_version is None and first is not None and (first.rocm or (9, 9)) <= (6, 0):
        return (f"{arch} (read from {where}) is in every pytorch.org ROCm wheel since {first.name}, so the code without it is "
                "likely a library built on its own (an extension, a source build, an old torch)",
                "python -c 'import torch; print(torch.__version__, torch.cuda.get_arch_list())' shows what torch has; "
                f"rebuild source-built extensions with PYTORCH_ROCM_ARCH={arch}; unset LD_LIBRARY_PATH for the run")
    if wheel is not None and arch in wheel:
        return (f"torch {facts.torch_version} has code for {arch} (read from {where}), so the kernel that failed "
                "comes from a library built without it (flash-attn, bitsandbytes, llama.cpp, a source build) or from "
                "system ROCm libraries loaded through LD_LIBRARY_PATH",
                f"rebuild that library for {arch} (PYTORCH_ROCM_ARCH={arch}, -DAMDGPU_TARGETS={arch}); unset "
                "LD_LIBRARY_PATH for the run")
    row = arch_info(arch)
    fixes = []
    lines = install_lines(arch)
    if lines:
        fixes.append(lines[0][1])
    value = override_for_arch(arch)
    if value:
        fixes.append(f"export HSA_OVERRIDE_GFX_VERSION={value} (runs {_override_target(value)} code, known to work "
                     f"on {arch})")
    if not fixes:
        fixes.append(f"no torch wheel carries {arch}" + (f": {row.note}" if row and row.note else ""))
    whose = f"torch {facts.torch_version}" if facts.torch_version else "the installed torch"
    return f"{entry.cause}: the GPU is {arch} (read from {where}); check that {whose} lists it " \
           f"(python -c 'import torch; print(torch.cuda.get_arch_list())')", "; or ".join(fixes)


_SIZE = r"([\d.]+) ?(bytes|B|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _gib(text: str, pattern: str) -> Optional[float]:
    m = re.search(pattern.replace("SIZE", _SIZE), text)
    return float(m.group(1)) * _UNITS[m.group(2)] / 2**30 if m else None


def _version(text: Optional[str]) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:2])


def _allocator_fix(rocm: bool, facts: Facts) -> str:
    torch, hip = _version(facts.torch_version), _version(facts.hip_version)
    variable = "PYTORCH_ALLOC_CONF" if torch >= (2, 9) else "PYTORCH_HIP_ALLOC_CONF" if rocm else "PYTORCH_CUDA_ALLOC_CONF"
    if not rocm or (torch >= (2, 11) and hip >= (7, 0)):
        return f"export {variable}=expandable_segments:True"
    if torch and hip:
        return (f"export {variable}=max_split_size_mb:512,garbage_collection_threshold:0.8 (expandable_segments needs "
                f"torch >= 2.11 with ROCm >= 7.0; this is torch {facts.torch_version}, HIP {facts.hip_version})")
    return (f"export {variable}=max_split_size_mb:512,garbage_collection_threshold:0.8 (or expandable_segments:True "
            "with torch >= 2.11 and ROCm >= 7.0)")


def _oom(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    window = _window(text, hit, 2)
    tried = _gib(window, r"Tried to allocate SIZE")
    total = _gib(window, r"total capacity of SIZE")
    free = _gib(window, r"of which SIZE is free")
    allocated = _gib(window, r"SIZE is allocated by PyTorch")
    reserved = _gib(window, r"SIZE is reserved by PyTorch but unallocated")
    rocm = "HIP out of memory" in window or "hipError" in window or bool(facts.hip_version)
    if reserved is not None and reserved >= max(tried or 0, 0.05 * (total or 0), 0.25):
        return (f"fragmentation: {reserved:.2f} GiB sit reserved by PyTorch but unallocated, in pieces smaller than "
                f"the {tried or 0:.2f} GiB asked for", _allocator_fix(rocm, facts) + f"; if it still fails: {entry.fix}")
    if total and free is not None and allocated is not None:
        others = total - free - allocated - (reserved or 0)
        if others > 0.25 * total:
            return (f"another process holds about {others:.1f} of the GPU's {total:.1f} GiB (PyTorch has "
                    f"{allocated:.1f} GiB)", "stop it or use another GPU: " + ("rocm-smi --showpids" if rocm else
                                                                               "nvidia-smi") + " lists the processes")
    if tried and total and tried > total:
        return (f"one allocation of {tried:.1f} GiB is larger than the whole GPU ({total:.1f} GiB)", entry.fix)
    return entry.cause + (f" (asked for {tried:.2f} GiB, {free:.2f} GiB free)" if tried and free is not None else ""), \
        entry.fix


def _bnb_library(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    m = re.search(r"libbitsandbytes_rocm(\d+)\.so", hit.group(0))
    number = m.group(1) if m else "NN"
    cause = entry.cause + f"; this one asks for libbitsandbytes_rocm{number}.so"
    if facts.hip_version:
        cause += f" (HIP {facts.hip_version})"
    return cause, entry.fix


def _gpu_node(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    m = re.search(r"GPU node-(\d+)", hit.group(0))
    node = int(m.group(1)) if m else None
    gpu = next((g for g in facts.gpus if getattr(g, "kfd_node", None) == node), None) if node is not None else None
    where = (f"node-{node} is GPU {gpu.index} ({getattr(gpu, 'name', None) or '?'}, {getattr(gpu, 'arch', None) or '?'})"
             if gpu is not None else f"node-{node} is KFD node {node} (the CPU is node 0; rocminfo's Node: lines say "
             "which GPU)" if node is not None else "")
    cause = entry.cause + (f"; {where}" if where else "")
    override = facts.env.get("HSA_OVERRIDE_GFX_VERSION")
    if override:
        cause += f"; HSA_OVERRIDE_GFX_VERSION={override} is set, so another chip's code may be running"
    return cause, entry.fix


def _dmesg_device(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    window = _window(text, hit, 3)
    details = []
    bus = re.search(r"amdgpu (?:[0-9a-f]{4}:)?([0-9a-f]{2}:[0-9a-f]{2}\.\d)", hit.group(0) + "\n" + _line_at(text, hit.start()))
    if bus:
        gpu = next((g for g in facts.gpus if (getattr(g, "bus_id", None) or "").lower().endswith(bus.group(1))), None)
        details.append(f"on {bus.group(1)}" + (f" = GPU {gpu.index} ({gpu.name or '?'}, {gpu.arch or '?'})" if gpu else ""))
    pci = re.search(r"\b(1002):([0-9a-f]{4})\b", hit.group(0) + _line_at(text, hit.start()))
    if pci:
        row = lookup_id(int(pci.group(2), 16), int(pci.group(1), 16))
        details.append(f"device {pci.group(1)}:{pci.group(2)}" + (f" = {row.name}, {row.arch}" if row else ""))
    process = re.search(r"[Pp]rocess:? (\S+) pid (\d+)", window)
    if process:
        details.append(f"process {process.group(1)} (pid {process.group(2)})")
    return entry.cause + (f" ({'; '.join(details)})" if details else ""), entry.fix


def _socket(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    set_now = {k: facts.env[k] for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY")
               if k in facts.env}
    cause = entry.cause + (f" (set: {', '.join(f'{k}={v}' for k, v in set_now.items())})" if set_now else "")
    return cause, entry.fix


_RELEVANT = re.compile(r"^(ROCR_|HIP_|CUDA_VISIBLE|HSA_|NCCL_|RCCL_|PYTORCH_|TORCH_|BNB_|MIOPEN_|LD_LIBRARY_PATH|"
                       r"VIRTUAL_ENV|PATH$|FLASH_ATTENTION)")


def _sudo(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    lost = sorted(k for k in facts.exported if _RELEVANT.match(k))
    cause = entry.cause + (f"; exported before it and lost: {', '.join(lost)}" if lost else "")
    return cause, entry.fix


def _cuda_wheel(entry: Entry, hit: re.Match, text: str, facts: Facts) -> tuple[str, str]:
    arch, where = _arch_of(hit, text, facts)
    lines = install_lines(arch) if arch and arch.startswith("gfx") else []
    if lines:
        return entry.cause + f" (the GPU is {arch}, read from {where})", f"pip uninstall torch; {lines[0][1]}"
    return entry.cause, entry.fix


_CONTEXTS: dict[str, Resolver] = {"visibility": _visibility, "arch": _arch, "oom": _oom, "bnb_library": _bnb_library,
                                  "gpu_node": _gpu_node, "dmesg_device": _dmesg_device, "socket": _socket,
                                  "sudo": _sudo, "cuda_wheel": _cuda_wheel}
