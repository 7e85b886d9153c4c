"""Offline mode: diagnose some other machine from saved outputs (`doctor --from DIR`, `--rocm-smi FILE`, ...):
rocm-smi, amd-smi (its default view too), rocminfo, nvidia-smi and torch's collect_env for the GPUs
(hardware/smi_parsers.py), `lspci -vv` for Resizable BAR (pci.py), `dmesg` and a memory report (torch's total_memory
beside sysfs's GTT and the RAM) for an APU's memory (memory.py), pip / uv output and `pip list` for the packages
(packages.py), and `env` / `export` lines for the visibility and override variables (devices.py). The GPUs read there
become a `HardwareInfo` of *that* machine, and train's own policy functions answer for it (plan.py): the dtype,
attention, packing and gradient checkpointing it would get there. A table cut in the middle still lists every card it
names, with what the cut hides marked unknown.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Optional

from steadytune.doctor.archs import arch_findings, torch_rocm
from steadytune.doctor.checks import discrete_behind_igpu
from steadytune.doctor.diagnose import Report, diagnose_text, gpu_facts, report_findings
from steadytune.doctor.devices import (
    RELEVANT_ENV,
    igpu_shadow,
    mixed_arch_findings,
    parse_env_lines,
    per_node_overrides,
    saved_override_findings,
    use_per_node,
    visibility_findings,
)
from steadytune.doctor.findings import Finding
from steadytune.doctor.memory import (
    KernelLog,
    apu_memory_findings,
    gtt_limit_findings,
    looks_like_dmesg,
    looks_like_memory_report,
    parse_kernel_log,
    parse_memory_report,
)
from steadytune.doctor.multi_gpu import rccl_findings
from steadytune.doctor.paste import (
    Piece,
    SystemReads,
    device_file_findings,
    gfx_of_target_version,
    python_env_assignments,
    read_python_probe,
    read_system,
    split_pieces,
    unwrap,
)
from steadytune.doctor.packages import (
    PythonEnv,
    bitsandbytes_findings,
    looks_like_packages,
    merge_envs,
    parse_package_text,
    torch_replacement_findings,
)
from steadytune.doctor.pci import PciGpu, looks_like_lspci, parse_dmesg_bars, parse_lspci, rebar_findings
from steadytune.doctor.plan import train_plan_findings
from steadytune.hardware.archs import bf16_verdict
from steadytune.hardware.backend import GPU, HardwareInfo
from steadytune.hardware.error_catalogue import Facts, match_text
from steadytune.hardware.gpu_facts import ARCH_COMMANDS, OFFICIAL_WHEEL_ARCHS, arch_info, lookup_product
from steadytune.hardware.gpu_ids import AMD, lookup_id
from steadytune.hardware.rccl import rocm_tuple
from steadytune.hardware.smi_parsers import (
    GpuRecord,
    ParseResult,
    Sample,
    complete_record,
    merge_results,
    parse_sample,
    recognise,
    split_samples,
)
from steadytune.hardware.torch_builds import wheel_archs_of
from steadytune.hardware.unified_memory import DrmCard, usable_gib

if TYPE_CHECKING:
    from steadytune.config import RunConfig
    from steadytune.hardware.backend import HardwareInfo
    from steadytune.hardware.smi_parsers import GpuRecord, ParseResult


@dataclass
class SavedOutputs:
    results: list["ParseResult"] = field(default_factory=list)   # one per tool output (GPU tools, lspci, dmesg)
    pci: list[PciGpu] = field(default_factory=list)               # from lspci -vv and amdgpu's BAR line
    kernel: KernelLog = field(default_factory=KernelLog)          # from dmesg
    python: list[PythonEnv] = field(default_factory=list)         # pip / uv output, pip list, collect_env's [pip3]
    env: dict[str, str] = field(default_factory=dict)             # env / export lines, and each session's exports
    dumped_env: dict[str, str] = field(default_factory=dict)      # env / export lines only (what `env` printed)
    memory: dict[str, object] = field(default_factory=dict)       # a memory report (torch, gtt, vram, ram GiB)
    system: SystemReads = field(default_factory=SystemReads)      # sysfs / procfs reads, device files, groups
    texts: list["TextPiece"] = field(default_factory=list)        # every piece, for the error catalogue
    dmesg_gpus: list["GpuRecord"] = field(default_factory=list)   # GPUs named by id in a kernel log
    run: dict[str, str] = field(default_factory=dict)             # a run folder's status, its environment.json backend
    files: list["PastedFile"] = field(default_factory=list)       # each file's text and pieces, for the rules

    @property
    def rocm_version(self) -> Optional[str]:
        return next((r.rocm_version for r in self.results if r.rocm_version), None)

    @property
    def torch_version(self) -> Optional[str]:
        found = next((r.torch_version for r in self.results if r.torch_version), None)
        packages = merge_envs(self.python)
        return found or (packages.version("torch") if packages else None) or self.memory.get("torch_version")

    @property
    def hip_version(self) -> Optional[str]:
        return next((r.hip_version for r in self.results if r.hip_version), None) or self.memory.get("hip")

    @property
    def rocm(self) -> Optional[tuple[int, int]]:
        """The ROCm release of that machine's torch (its label, HIP version) or of its tools."""
        return torch_rocm(self.torch_version, self.hip_version) or rocm_tuple(self.rocm_version)

    @property
    def read_anything(self) -> bool:
        return bool(self.pci or self.kernel.gtt_gib or self.python or self.env or self.memory or self.system.read_anything
                    or self.run)


@dataclass
class TextPiece:
    """One piece of a saved file as the error catalogue reads it: its text (the command line first), and the variables
    in force where that command ran."""
    source: str
    text: str
    result: "ParseResult"
    command: str = ""
    env: dict[str, str] = field(default_factory=dict)
    exported: dict[str, str] = field(default_factory=dict)
    session: bool = False


@dataclass
class PastedFile:
    """One file as the rules read it: its text without quotes and fences, and its pieces (each command's variables)."""
    source: str
    text: str
    pieces: list[Piece]


def _read_machine_sample(text: str, source: str, saved: SavedOutputs, command: str = "") -> Optional["ParseResult"]:
    """Outputs that are not GPU tables (lspci, dmesg, a memory report, env lines, pip/uv output): their facts go into
    `saved`; -> a ParseResult to report, or None when the sample is none of them."""
    if text.lstrip().startswith("{") and '"hardware"' in text:
        try:
            environment = _environment_json(json.loads(text), source, saved)
        except ValueError:
            environment = None
        if environment is not None:
            return environment
    status = re.match(r"run status: (\S+)", text)
    if status:   # a run folder's manifest (_manifest_text): the catalogue reads the error below the status
        saved.run["status"] = status.group(1)
        return ParseResult(tool="run manifest", source=source, notes=[f"the run's status: {status.group(1)}"])
    if looks_like_lspci(text):
        gpus = parse_lspci(text)
        saved.pci += gpus
        return ParseResult(tool="lspci", source=source, problems=[] if gpus else
                           [f"could not read {source}: an lspci output without a GPU in it"])
    if looks_like_dmesg(text):
        log = parse_kernel_log(text)
        saved.kernel.vram_gib.update(log.vram_gib)
        saved.kernel.gtt_gib.update(log.gtt_gib)
        saved.kernel.cmdline = saved.kernel.cmdline or log.cmdline
        saved.kernel.gttsize_deprecated |= log.gttsize_deprecated
        saved.pci += parse_dmesg_bars(text)
        saved.dmesg_gpus += dmesg_gpus(text, len(saved.dmesg_gpus))
        return ParseResult(tool="dmesg", source=source)
    if looks_like_memory_report(text):
        report = parse_memory_report(text)
        saved.memory.update(report)
        result = ParseResult(tool="memory report", source=source, torch_version=report.get("torch_version"),
                             hip_version=report.get("hip"))
        product = lookup_product(str(report.get("name", "")))
        if product is not None:
            result.gpus.append(GpuRecord(index=0, vendor="amd", name=str(report["name"]), arch=product.arch,
                                         arch_source="product table", memory_gib=report.get("torch"),
                                         integrated=product.integrated))
        return result
    kind = read_system(text, command, saved.system)
    if kind:
        return ParseResult(tool=kind, source=source)
    probe = read_python_probe(text, command)
    if probe:
        saved.memory.update({k: v for k, v in probe.items() if not saved.memory.get(k)})
        return ParseResult(tool="python", source=source, torch_version=probe.get("torch_version"),
                           hip_version=probe.get("hip"))
    variables = parse_env_lines(text)
    if variables:
        saved.env.update(variables)
        saved.dumped_env.update(variables)
        return ParseResult(tool="environment", source=source)
    if looks_like_packages(text) and recognise(Sample(text, command))[0] == "unknown":
        saved.python.append(parse_package_text(text, source, command))
        return ParseResult(tool="packages", source=source)
    return None


def _short(command: str, width: int = 60) -> str:
    return command if len(command) <= width else command[: width - 3] + "..."


_DMESG_DEVICE = re.compile(r"amdgpu ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d):.*?\(\S+(?: \S+)? 0x1002:0x([0-9A-Fa-f]{4})")
_DMESG_VBIOS = re.compile(r"ATOM BIOS: (\S+)")


def dmesg_gpus(text: str, first_index: int = 0) -> list["GpuRecord"]:
    """The GPUs a kernel log names by PCI id ("amdgpu 0000:c2:00.0: ... (IP DISCOVERY 0x1002:0x15BF ...)"), with the
    VBIOS part number amdgpu prints after it; the PCI id table says what each is."""
    gpus: list[GpuRecord] = []
    for line in text.splitlines():
        device = _DMESG_DEVICE.search(line)
        if device and not any(g.bus_id == device.group(1).lower() for g in gpus):
            gpus.append(GpuRecord(index=first_index + len(gpus), vendor="amd", bus_id=device.group(1).lower(),
                                  device_id=int(device.group(2), 16)))
            continue
        vbios = _DMESG_VBIOS.search(line)
        if vbios and gpus and gpus[-1].vbios is None:
            gpus[-1].vbios = vbios.group(1)
    return [complete_record(g) for g in gpus]


# A run folder (training/run_folder.py, which doctor may not import): its manifest records the error that ended the run,
# environment.json the machine it started on, nodes/ and studio/ the processes' output.
RUN_MANIFEST = ".steadytune-run.json"
RUN_LOG_FOLDERS = ("nodes", "studio", "trials", "logs")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
MAX_RUN_LOGS = 40


def run_folder_files(folder: Path) -> list[Path]:
    """What doctor reads of a run folder: the manifest, environment.json, and the newest logs under its log folders."""
    files = [folder / RUN_MANIFEST] + [p for p in (folder / "environment.json",) if p.is_file()]
    logs = [p for sub in RUN_LOG_FOLDERS if (folder / sub).is_dir() for p in (folder / sub).rglob("*")
            if p.is_file() and p.suffix in LOG_SUFFIXES]
    logs += [p for p in folder.glob("*.log") if p.is_file()]
    logs.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return files + logs[:MAX_RUN_LOGS]


def _manifest_text(text: str) -> str:
    """A run's manifest as text: its status and the error it recorded (what the catalogue reads)."""
    try:
        manifest = json.loads(text)
    except ValueError:
        return text
    if not isinstance(manifest, dict):
        return text
    lines = [f"run status: {manifest.get('status', '?')}"]
    if manifest.get("error"):
        lines.append(str(manifest["error"]))
    return "\n".join(lines)


def _environment_json(data: object, source: str, saved: "SavedOutputs") -> Optional[ParseResult]:
    """environment.json, which train writes at the start of a run: that machine's GPUs, versions and variables."""
    if not (isinstance(data, dict) and isinstance(data.get("hardware"), dict) and "versions" in data):
        return None
    hardware, versions = data["hardware"], data.get("versions") or {}
    saved.run["backend"] = str(hardware.get("backend"))
    vendor = {"rocm": "amd", "cuda": "nvidia"}.get(str(hardware.get("backend")), "amd")
    result = ParseResult(tool="environment.json", source=source, torch_version=versions.get("torch"),
                         notes=["the machine the run started on (train writes environment.json at its start)"])
    for g in hardware.get("gpus") or []:
        if isinstance(g, dict) and isinstance(g.get("index"), int):
            result.gpus.append(complete_record(GpuRecord(
                index=g["index"], vendor=vendor, name=g.get("name"), arch=g.get("arch"),
                arch_source="environment.json" if g.get("arch") else None, memory_gib=g.get("memory_gib"),
                integrated=bool(g.get("integrated")), bus_id=g.get("bus_id"))))
    saved.env.update({k: str(v) for k, v in (data.get("env") or {}).items() if RELEVANT_ENV.match(k)})
    return result


MAX_SAVED_BYTES = 16 << 20   # of one saved output read: an smi table or a dmesg is KBs to a few MB; a 2 GB file is not one
READ_CHUNK = 1 << 20


def read_saved_text(path: Path) -> tuple[Optional[str], int]:
    """(the file's text, its size when it was cut to MAX_SAVED_BYTES, else 0), read a chunk at a time so that neither a
    huge file nor a binary one is ever held whole; (None, 0) for a binary file (a NUL byte in what is read)."""
    chunks, read = [], 0
    with path.open("rb") as f:
        while read < MAX_SAVED_BYTES:
            chunk = f.read(min(READ_CHUNK, MAX_SAVED_BYTES - read))
            if not chunk:
                break
            if b"\x00" in chunk:
                return None, 0
            chunks.append(chunk)
            read += len(chunk)
        more = bool(f.read(1))
        size = os.fstat(f.fileno()).st_size if more else 0
    return b"".join(chunks).decode("utf-8", errors="replace"), size


def read_saved_outputs(paths: Iterable[Path], expected_tool: Optional[Mapping[Path, str]] = None) -> SavedOutputs:
    """Every output in every file (a pasted session holds several); unreadable files become problems."""

    saved = SavedOutputs()
    for path in paths:
        try:
            text, cut = read_saved_text(path)
        except OSError as e:
            saved.results.append(ParseResult(tool="unknown", source=path.name, problems=[f"could not read {path}: {e.strerror}"]))
            continue
        if text is None:
            saved.results.append(ParseResult(tool="unknown", source=path.name, problems=[f"could not read {path}: binary file"]))
            continue
        if path.name == RUN_MANIFEST:
            text = _manifest_text(text)
        first = len(saved.results)
        samples = []
        pieces = split_pieces(text)
        saved.files.append(PastedFile(path.name, unwrap(text), pieces))
        for piece in pieces:
            cut_up = split_samples(piece.text) or ([Sample("", piece.command)] if piece.command else [])
            samples += [(Sample(sample.text, sample.command or piece.command), piece) for sample in cut_up]
        if not samples:
            saved.results.append(ParseResult(tool="unknown", source=path.name,
                                             problems=[f"could not read {path.name}: the file is empty"]))
        wanted = (expected_tool or {}).get(path)
        if samples and samples[-1][1].session:   # the session's variables once its last command ran
            saved.env.update({k: v for k, v in samples[-1][1].after.items() if RELEVANT_ENV.match(k)})
        for i, (sample, piece) in enumerate(samples, 1):
            source = path.name if len(samples) == 1 else f"{path.name} (output {i})"
            if piece.command and len(samples) > 1:
                source += f" `{_short(piece.command)}`"
            if not sample.text.strip():   # a command that printed nothing: its line is read by the catalogue only
                result = ParseResult(tool="command", source=source)
            else:
                result = _read_machine_sample(sample.text, source, saved, sample.command) or parse_sample(sample, source)
            if result.tool == "collect_env":   # its [pip3] lines name torch and its companions
                saved.python.append(parse_package_text(sample.text, source))
            if wanted and len(samples) == 1 and result.tool not in (wanted, "unknown"):   # a paste may hold several tools
                result.notes.append(f"given as {wanted} output but reads as {result.tool} output")
            saved.results.append(result)
            text_for_catalogue = (f"$ {piece.command}\n" if piece.command else "") + sample.text
            saved.texts.append(TextPiece(source, text_for_catalogue, result, piece.command, piece.env, piece.exported,
                                         piece.session))
        if cut and len(saved.results) > first:
            saved.results[first].problems.append(
                f"read the first {MAX_SAVED_BYTES >> 20} MiB of {path.name} only (it holds {cut / 2**20:,.0f} MiB; a "
                "saved output is KBs to a few MB: put each output in a file of its own)")
    return saved


def _gtt_for(gpu: "GpuRecord", kernel: KernelLog) -> Optional[float]:
    if gpu.bus_id and gpu.bus_id in kernel.gtt_gib:
        return kernel.gtt_gib[gpu.bus_id]
    return next(iter(kernel.gtt_gib.values())) if len(kernel.gtt_gib) == 1 else None


def machine_info(gpus: list["GpuRecord"], saved: Optional[SavedOutputs] = None) -> Optional["HardwareInfo"]:
    """The saved machine as train would see it (an APU's usable memory from its GTT where dmesg gives it)."""
    usable = [g for g in gpus if g.arch]
    if not usable:
        return None
    info = HardwareInfo(backend="cuda" if usable[0].vendor == "nvidia" else "rocm", torch_version="(saved outputs)")
    for g in usable:
        gpu = GPU(index=g.index, name=g.name or "?", arch=g.arch, memory_gib=g.memory_gib or g.nominal_memory_gib or 0.0,
                  integrated=g.integrated, bus_id=g.bus_id)
        gtt = _gtt_for(g, saved.kernel) if saved else None
        if g.integrated and saved is not None and saved.memory.get("torch"):
            m = saved.memory
            card = DrmCard("saved", g.bus_id, None, m.get("vram"), None, m.get("gtt") or gtt)
            gpu.usable_memory_gib, gpu.memory_note = usable_gib(m.get("torch"), card, m.get("ram"))
        elif g.integrated and gtt and gtt > gpu.memory_gib:
            gpu.usable_memory_gib, gpu.memory_note = gtt, f"GTT {gtt:g} GiB (carve-out {gpu.memory_gib:g} GiB)"
        info.gpus.append(gpu)
    return info


def _describe(g: "GpuRecord") -> Finding:
    native = bf16_verdict(g.arch)[0]
    memory = f"{g.memory_gib:g} GiB" if g.memory_gib is not None else \
        f"{g.nominal_memory_gib:g} GiB (the model's, by its PCI id)" if g.nominal_memory_gib else "memory ?"
    verdict = "bf16 native" if native else "bf16 unknown" if native is None else "no native bf16"
    extras = [f"HIP id {g.hip_id}" if g.hip_id is not None and g.hip_id != g.index else "",
              g.partition or "", f"{g.power_cap_w:g} W cap" if g.power_cap_w else "", "integrated" if g.integrated else "",
              "every sensor N/A (no proof it works)" if g.sensors_unreadable else ""]
    return Finding.info("saved-outputs", f"GPU {g.index}: {g.name or 'model not shown'}, {g.arch or 'arch ?'}, {memory}, "
                                         f"{verdict}" + "".join(f", {e}" for e in extras if e),
                        f"arch from {g.arch_source}" if g.arch_source else "")


def diagnose_gpus(gpus: list["GpuRecord"], check: str = "saved-outputs", saved: Optional[SavedOutputs] = None,
                  cfg: Optional["RunConfig"] = None) -> list[Finding]:
    """Findings about the GPUs of the saved machine: what each is and gets (arch table, that machine's torch), rows 5,
    11 and 13, cut cards, an APU's memory, the visibility and override variables, RCCL on several GPUs, the packages,
    Resizable BAR, and what train would choose there."""

    saved = saved or SavedOutputs()
    findings = []
    torch_version, rocm = saved.torch_version, saved.rocm
    compiled = wheel_archs_of(torch_version)
    whose = f"that machine's torch {torch_version}"
    amd = [g for g in gpus if g.vendor == "amd"]
    wheel_archs = compiled or OFFICIAL_WHEEL_ARCHS
    per_node = per_node_overrides(amd, wheel_archs)   # a mixed machine: overrides go per KFD node
    for g in gpus:
        findings.append(_describe(g))
        label = f"GPU {g.index}"
        if g.cut:
            findings.append(Finding.warn(check, f"{label}: {g.cut}",
                                         "a pasted excerpt: what the cut hides is shown as unknown (?), not guessed",
                                         "save the whole output: amd-smi > amd-smi.txt, rocminfo > rocminfo.txt"))
        if g.arch is None:
            why = ("the tool printed only the generic name 'AMD Radeon Graphics' (APUs such as Strix Halo do)"
                   if g.generic_name else "this output does not name the model or its target")
            findings.append(Finding.warn(check, f"{label}: architecture unknown", why,
                                         f"run on that machine: {ARCH_COMMANDS}; or save `rocminfo` too"))
        elif g.vendor == "amd" and not (g.integrated and discrete_behind_igpu(gpus)):
            findings += use_per_node(arch_findings(g.arch, label, "arch", compiled=compiled, whose=whose,
                                                   torch_version=torch_version, rocm=rocm), per_node.get(g.index))
        native, why = bf16_verdict(g.arch)
        if native is False and not g.integrated:
            findings.append(Finding.warn(check, f"{label}: {why}", "bf16: true would abort or run emulated",
                                         "bf16: auto (fp32) or fp16: true with loss scaling"))
        if g.arch == "gfx90a":
            findings.append(Finding.info(check, f"{label}: gfx90a flushes fp16 denormals in matrix cores",
                                         "fp16 training can slowly diverge on torch >= 2.7", "train in bf16"))
        if g.vendor == "amd" and (g.integrated or g.generic_name):
            m = saved.memory
            findings += apu_memory_findings(f"{label} ({g.arch or 'APU?'})", "unified-memory",
                                            torch_gib=m.get("torch"), vram_gib=m.get("vram") or g.memory_gib,
                                            gtt_gib=m.get("gtt") or _gtt_for(g, saved.kernel),
                                            cmdline=saved.kernel.cmdline, ram_gib=m.get("ram"))
    shadow = igpu_shadow(gpus, wheel_archs)
    if shadow:
        findings.append(Finding.warn(check, *shadow))
    if saved.env:
        nvidia = [g for g in gpus if g.vendor == "nvidia"] or re.search(r"\+cu\d", torch_version or "")
        rocm_hints = amd or "+rocm" in (torch_version or "") or any(k in saved.env for k in ("ROCR_VISIBLE_DEVICES",
                                                                                              "HIP_VISIBLE_DEVICES"))
        findings += visibility_findings(saved.env, "rocm" if rocm_hints and not (nvidia and not amd) else "cuda", gpus)
        findings += saved_override_findings(saved.env, amd, wheel_archs)
    else:
        findings += mixed_arch_findings({}, amd, wheel_archs)
    dgpus = [g.arch for g in amd if g.arch and not g.integrated]
    findings += rccl_findings(dgpus, None, rocm, saved.env)
    info = machine_info(gpus, saved)
    packages = merge_envs(saved.python)
    if packages is not None:
        arch = info.primary.arch if info is not None and info.primary is not None else None
        findings += torch_replacement_findings(packages, arch=arch)
        rocm_machine = bool(amd) or bool(packages.bnb_missing) or "+rocm" in (torch_version or "")
        findings += bitsandbytes_findings(packages, arch, saved.hip_version, rocm_machine)
    if saved.pci:
        by_bus = {g.bus_id: g for g in gpus if g.bus_id}
        for pci in saved.pci:
            record = by_bus.get(pci.bdf)
            if record is not None:
                pci.memory = pci.memory or (int(record.memory_gib * 2**30) if record.memory_gib else None)
                pci.integrated = record.integrated
                pci.name = pci.name or record.name or ""
        findings += rebar_findings(saved.pci, "pci")
    if info is not None:
        findings += train_plan_findings(info, "on-that-machine", cfg, offline=True)
    return findings


def _read_as_logs(saved: SavedOutputs, reports: list[tuple[str, Report]]) -> None:
    """A piece no reader recognised but which holds an error line is a log: the rules answer for it, so it keeps no
    "could not read" problem."""
    erring = {e.line.strip() for _, report in reports for e in report.errors}
    for piece in saved.texts:
        if piece.result.tool in ("unknown", "command") and any(l.strip() in erring or l.strip() in " ".join(erring)
                                                               for l in piece.text.splitlines() if l.strip()):
            piece.result.tool, piece.result.problems = "log", []
            piece.result.notes = [n for n in piece.result.notes if "nothing doctor reads" not in n]


NON_GPU_TOOLS = ("lspci", "dmesg", "packages", "environment", "sysfs", "kernel command line", "meminfo", "device files",
                 "groups", "log", "command", "python", "run manifest")


def system_gpus(saved: SavedOutputs) -> list["GpuRecord"]:
    """GPUs from what is not a GPU table, when no table named any: the kernel log's PCI ids, else the sysfs cards read
    (their vendor / device files, their memory), else the KFD topology's gfx_target_version. An amdgpu card with a
    small VRAM and a larger GTT is taken for an APU, and said so."""
    if saved.dmesg_gpus:
        return [replace(g) for g in saved.dmesg_gpus]
    gpus = []
    for i, card in enumerate(saved.system.cards.values()):
        vendor = card.hex_value("vendor")
        if vendor not in (None, AMD):
            continue
        gpu = GpuRecord(index=i, vendor="amd", device_id=card.hex_value("device"),
                        vbios=card.values.get("vbios_version"), memory_gib=card.bytes_gib("mem_info_vram_total"))
        complete_record(gpu)
        vram, gtt = card.bytes_gib("mem_info_vram_total"), card.bytes_gib("mem_info_gtt_total")
        if gpu.arch is None and vram is not None and gtt is not None and vram <= 4 and gtt >= 4 * vram:
            gpu.integrated = True
            gpu.name = gpu.name or f"{card.card} (an APU by its memory: {vram:g} GiB carve-out, {gtt:g} GiB GTT)"
        gpu.name = gpu.name or f"{card.card} (amdgpu)"
        gpus.append(gpu)
    if gpus:
        return gpus
    for i, (node, value) in enumerate(sorted(saved.system.kfd_targets.items())):
        arch = gfx_of_target_version(value)
        if arch:
            gpus.append(complete_record(GpuRecord(index=len(gpus), vendor="amd", arch=arch, kfd_node=node,
                                                  arch_source="KFD gfx_target_version")))
    return gpus


def _fold_system(saved: SavedOutputs) -> None:
    """sysfs memory, the kernel command line and the RAM into the figures the APU checks read."""
    system = saved.system
    single = len(system.cards) == 1
    for card in system.cards.values():
        gtt, vram = card.bytes_gib("mem_info_gtt_total"), card.bytes_gib("mem_info_vram_total")
        if gtt is not None:
            saved.kernel.gtt_gib.setdefault(None if single else card.card, gtt)
        if vram is not None:
            saved.kernel.vram_gib.setdefault(None if single else card.card, vram)
    if system.cmdline and not saved.kernel.cmdline:
        saved.kernel.cmdline = system.cmdline
    if system.ram_gib and not saved.memory.get("ram"):
        saved.memory["ram"] = system.ram_gib


def _single(figures: dict) -> Optional[float]:
    return next(iter(figures.values())) if len(figures) == 1 else None


def _piece_facts(saved: SavedOutputs, gpus: list["GpuRecord"], text: str, command: str, env: Mapping[str, str],
                 exported: Mapping[str, str], session: bool) -> Facts:
    """What the catalogue knows where a piece ran: its command's variables (a session's exports and prefix, or the
    pasted env lines), the machine's GPUs and torch."""
    variables = {**saved.dumped_env, **env} if session else dict(saved.env)
    variables.update(python_env_assignments(text))   # os.environ[...] = ... in the pasted code
    return Facts(env=variables, command=command, gpus=gpus, torch_version=saved.torch_version,
                 hip_version=saved.hip_version, exported=exported)


def diagnose_files(saved: SavedOutputs, gpus: list["GpuRecord"]) -> list[tuple[str, Report]]:
    """The rules over each file as a whole (facts spread over its pieces), each piece's lines matched by the
    catalogue with the variables of the command that printed them."""
    reports = []
    for pasted in saved.files:
        chunks = [(p.start, max(p.end, p.start + 1), _piece_facts(saved, gpus, p.text, p.command, p.env, p.exported,
                                                               p.session)) for p in pasted.pieces]
        reports.append((pasted.source, diagnose_text(pasted.text, chunks=chunks)))
    return reports


def fact_gpus(reports: list[tuple[str, Report]]) -> list["GpuRecord"]:
    """GPUs the text names (a model, a PCI id, a gfx string) where no tool output listed any: a GPU table says what
    the paste says, each marked as read from the text."""
    gpus: list[GpuRecord] = []
    for _source, report in reports:
        for fact in gpu_facts(report.sheet):
            arch = fact.detail if fact.kind in ("gpu", "pci_id") else fact.value
            if not arch or any(g.arch == arch for g in gpus):
                continue
            name = fact.value if fact.kind == "gpu" else None
            if fact.kind == "pci_id":
                vendor_id, device = (int(x, 16) for x in fact.value.split(":"))
                row = lookup_id(device, vendor_id)
                name = row.name if row else None
            product = arch_info(arch)
            gpus.append(GpuRecord(index=len(gpus), vendor="nvidia" if arch.startswith("sm_") else "amd", name=name,
                                  arch=arch, arch_source="named in the text",
                                  integrated=bool(product and product.kind == "apu")))
    return gpus


def catalogue_findings(saved: SavedOutputs, gpus: list["GpuRecord"]) -> list[Finding]:
    """The error catalogue over every piece, with that piece's variables and the machine's GPUs and torch. A piece no
    reader recognised and in which the catalogue finds nothing keeps its "could not read" problem; one in which it
    finds something is a log."""
    findings: list[Finding] = []
    seen: dict[str, Finding] = {}
    for piece in saved.texts:
        facts = _piece_facts(saved, gpus, piece.text, piece.command, piece.env, piece.exported, piece.session)
        matches = match_text(piece.text, facts)
        if matches and piece.result.tool == "unknown":
            piece.result.tool, piece.result.problems = "log", []
        elif piece.result.tool == "unknown" and piece.command:   # a session's command whose output says nothing known
            piece.result.tool, piece.result.problems = "command", []
            piece.result.notes.append("nothing doctor reads in what it printed")
        for match in matches:
            entry = match.entry
            key = f"{entry.id}|{match.cause}"
            if key in seen:
                continue
            finding = Finding(entry.severity, "known-error", f"{piece.source}: {entry.title}: {match.excerpt}",
                              f"{match.cause} (catalogue entry {entry.id}; seen in {entry.source})", match.fix)
            seen[key] = finding
            findings.append(finding)
    return findings


def run_offline_checks(paths: list[Path], expected_tool: Optional[Mapping[Path, str]] = None,
                       cfg: Optional["RunConfig"] = None, saved: Optional[SavedOutputs] = None
                       ) -> tuple[list["GpuRecord"], list[Finding]]:

    saved = saved or read_saved_outputs(paths, expected_tool)
    _fold_system(saved)
    gpus, conflicts = merge_results([r for r in saved.results if r.tool not in NON_GPU_TOOLS])
    if not gpus:
        gpus = system_gpus(saved)
    reports = diagnose_files(saved, gpus)
    known = catalogue_findings(saved, gpus)   # the visibility arithmetic counts only the GPUs a tool listed
    if not gpus:
        gpus = fact_gpus(reports)
    _read_as_logs(saved, reports)
    diagnosed = [f for source, report in reports for f in report_findings(report, source, skip_restated=True)]
    findings: list[Finding] = []
    # a file with no tool table that was read as text (a diagnosis, an error line or a GPU named in it) is no
    # unreadable tool output: "not a recognised rocm-smi ... output" beside its diagnosis only misleads
    read_as_text = {source for source, report in reports if report.diagnoses or report.errors or gpu_facts(report.sheet)}
    for result in saved.results:
        if result.tool == "unknown" and result.source in read_as_text:
            findings.append(Finding.info("saved-outputs", f"{result.source}: read as text (no tool table in it)"))
            continue
        findings += [Finding.warn("saved-outputs", p, fix="save the full, unedited output of the tool") for p in result.problems]
        findings += [Finding.info("saved-outputs", f"{result.source}: {n}") for n in result.notes]
        if result.problems or result.tool in ("unknown", "command"):
            continue
        if result.tool in NON_GPU_TOOLS:
            findings.append(Finding.info("saved-outputs", f"{result.source}: {result.tool}"
                                         + ("" if result.tool in ("log", "groups", "device files") else " output")))
        else:
            findings.append(Finding.info("saved-outputs", f"{result.source}: {result.tool} output, {len(result.gpus)} GPU(s)"))
    findings += [Finding.warn("saved-outputs", c) for c in conflicts]
    if not gpus and not saved.read_anything and not known and not any(r.errors for _, r in reports):
        findings.append(Finding.error("saved-outputs", "could not read any GPU from the given outputs",
                                      fix="give rocminfo, amd-smi (default view or static), rocm-smi --showproductname "
                                          "--json, nvidia-smi, collect_env, lspci -vv or dmesg output, or the error "
                                          "itself (a traceback, a console session)"))
    findings += diagnosed + known
    findings += device_file_findings(saved.system)
    findings += gtt_limit_findings(saved.kernel.cmdline, saved.memory.get("gtt") or _single(saved.kernel.gtt_gib),
                                   saved.system.ttm_limit_gib, saved.memory.get("ram"),
                                   apu=any(g.integrated for g in gpus) and not any(not g.integrated for g in gpus))
    findings += diagnose_gpus(gpus, saved=saved, cfg=cfg)
    return gpus, findings
