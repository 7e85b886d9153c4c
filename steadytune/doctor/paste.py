"""Any text in: what users paste into an issue, cut into pieces and each piece recognised by what it holds, never by the
file's name. A console transcript is cut at its prompts (`$ cmd`, `user@host:~$ cmd`, `[root@host ~]# cmd`,
`(venv) ... $ cmd`, `PS C:\\> cmd`, `> cmd`), each command with what it printed and the variables in force for it (the
`export`s before it in the session and its own `VAR=value` prefix); a markdown quote (`> ` on every line) and code
fences are taken off first. Besides the tool outputs the smi parsers read, a piece may be a sysfs or procfs read
(`cat /sys/class/drm/card1/device/mem_info_gtt_total`, `grep . /sys/...`, /proc/cmdline, /proc/meminfo, `free`), the
device files and the user's groups (`ls -l /dev/kfd /dev/dri`, `id`, `groups`), or a traceback / log / dmesg /
journal, which the error catalogue (hardware/error_catalogue.py) reads.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from steadytune.doctor.findings import Finding
from steadytune.hardware.unified_memory import GIB, PAGE

# Words that begin a command after a bare `> ` prompt (a bare `>` line is otherwise a quote or a shell continuation).
_COMMANDS = ("python", "python3", "pip", "pip3", "uv", "steadytune", "rocm-smi", "amd-smi", "rocminfo", "nvidia-smi",
             "cat", "export", "unset", "env", "printenv", "ls", "dmesg", "journalctl", "sudo", "docker", "podman",
             "torchrun", "accelerate", "llamafactory-cli", "grep", "lspci", "uname", "id", "groups", "free", "echo",
             "srun", "source", "conda", "HIP_", "ROCR_", "CUDA_", "HSA_")
_PROMPT = re.compile(
    r"""^\s*(?:\([\w.\-]+\)\s*)?                        # (venv)
        (?:PS\s+[^>]*>                                  # PowerShell: PS C:\Users\me>
          |\[[^\]\n]*\]\s*[$#]                          # [root@host ~]#
          |[\w.\-]+@[\w.\-]+(?::[^\s$#>]*)?\s*[$#>]     # user@host:~/dir$  (user@host:~> on SUSE)
          |(?:[~/][^\s$#>]*\s*)?\$                      # ~/dir$  /opt$  $
          |[\w.\-]+-\d[\w.]*[$#]                         # bash-4.4$  sh-5.1#
          |>(?=\s+(?:%s)))                              # > python ...
        \s+(?P<command>\S.*)$""" % "|".join(re.escape(c) for c in _COMMANDS), re.VERBOSE)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)


@dataclass
class Piece:
    text: str                                          # what the command printed (or the whole text, with no prompt)
    command: str = ""                                  # the command line, without its prompt
    env: dict[str, str] = field(default_factory=dict)  # in force for the command: the session's exports and its prefix
    exported: dict[str, str] = field(default_factory=dict)   # exported earlier in the same session
    session: bool = False                              # the piece came from a console transcript
    after: dict[str, str] = field(default_factory=dict)      # the session's exports once this command has run
    start: int = 0                                     # its lines in unwrap(text): [start, end)
    end: int = 0


def unwrap(text: str) -> str:
    """A markdown quote (`> ` on most lines) and code-fence lines taken off."""
    lines = text.splitlines()
    nonempty = [l for l in lines if l.strip()]
    quoted = [l for l in nonempty if l.lstrip().startswith(">") and not l.lstrip().startswith(">>>")]
    if nonempty and len(quoted) >= 0.6 * len(nonempty):
        lines = [re.sub(r"^\s*> ?", "", l) for l in lines]
    return "\n".join(l.rstrip() for l in lines if not l.strip().startswith("```"))


def _split_words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=False)
    except ValueError:   # an unbalanced quote in a pasted line
        return command.split()


def command_env(command: str) -> tuple[dict[str, str], list[str]]:
    """A command line's `VAR=value` prefix (also after `sudo` and `env`) -> (those variables, the remaining words)."""
    words = _split_words(command)
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        match = _ASSIGNMENT.match(word)
        if match:
            found[match.group(1)] = match.group(2)
        elif word in ("sudo", "env") or (word.startswith("-") and i and words[i - 1] in ("sudo", "env")):
            pass
        else:
            break
        i += 1
    return found, words[i:]


def split_pieces(text: str) -> list[Piece]:
    """A text cut at its shell prompts; the variables exported in the session follow each command."""
    lines = unwrap(text).splitlines()
    pieces: list[Piece] = []
    session: dict[str, str] = {}
    current = Piece(text="")
    body: list[str] = []

    def close(end: int) -> None:
        current.text = "\n".join(body)
        current.after = dict(session)
        current.end = end
        if current.text.strip() or current.command:
            pieces.append(current)

    for number, line in enumerate(lines):
        prompt = _PROMPT.match(line)
        if not prompt or line.lstrip().startswith("# "):
            body.append(line)
            continue
        close(number)
        command = prompt.group("command").strip()
        inline, words = command_env(command)
        if words[:1] == ["export"] or (not words and inline):
            for word in words[1:]:
                match = _ASSIGNMENT.match(word)
                if match:
                    session[match.group(1)] = match.group(2)
            if not words:
                session.update(inline)   # `VAR=value` alone sets a shell variable (exported if it already was)
        elif words[:1] == ["unset"]:
            for word in words[1:]:
                session.pop(word, None)
        exported = dict(session)
        current = Piece(text="", command=command, env={**session, **inline}, exported=exported, session=True,
                        start=number)
        body = []
    close(len(lines))
    if not pieces:
        return [Piece(text=text, end=len(lines))]
    return pieces


# ---------------------------------------------------------------------------------------------------------
# sysfs and procfs reads
# ---------------------------------------------------------------------------------------------------------

_SYSFS_CARD = re.compile(r"/sys/class/drm/(card\d+|card\*)/device/(\w+)")
_SYSFS_LINE = re.compile(r"^\s*(/sys/\S+?)(?::|\s+)\s*(\S+)")
_KFD_PROPERTY = re.compile(r"/sys/(?:class|devices/virtual)/kfd/kfd/topology/nodes/(\d+|\*)/properties")
_DRM_ATTRIBUTES = ("mem_info_vram_total", "mem_info_gtt_total", "mem_info_vis_vram_total", "vendor", "device",
                   "vbios_version", "unique_id", "mem_info_vram_used", "mem_info_gtt_used")


@dataclass
class SysfsCard:
    card: str
    values: dict[str, str] = field(default_factory=dict)

    def bytes_gib(self, name: str) -> Optional[float]:
        """A size in bytes (or as `numfmt --to=iec` prints it: 96G, 512M) -> GiB."""
        raw = self.values.get(name)
        if raw is None:
            return None
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT])(?:i?B?)?", raw.strip(), re.IGNORECASE)
        if match:
            return round(float(match.group(1)) * 1024 ** " KMGT".index(match.group(2).upper()) / GIB, 2)
        try:
            return round(int(raw, 0) / GIB, 2)
        except ValueError:
            return None

    def hex_value(self, name: str) -> Optional[int]:
        try:
            return int(self.values[name], 16) if name in self.values else None
        except ValueError:
            return None


@dataclass
class SystemReads:
    """What sysfs and procfs pieces say about the machine."""
    cards: dict[str, SysfsCard] = field(default_factory=dict)
    ttm_pages_limit: Optional[int] = None              # /sys/module/ttm/parameters/pages_limit (what is in effect)
    kfd_targets: dict[int, int] = field(default_factory=dict)   # KFD node -> gfx_target_version
    cmdline: Optional[str] = None
    ram_gib: Optional[float] = None
    device_files: dict[str, tuple[str, str]] = field(default_factory=dict)   # path -> (mode, group)
    user_groups: Optional[list[str]] = None
    user_is_root: bool = False

    @property
    def ttm_limit_gib(self) -> Optional[float]:
        return round(self.ttm_pages_limit * PAGE / GIB, 2) if self.ttm_pages_limit else None

    @property
    def read_anything(self) -> bool:
        return bool(self.cards or self.ttm_pages_limit or self.kfd_targets or self.cmdline or self.ram_gib
                    or self.device_files or self.user_groups is not None)


def _value(text: str) -> str:
    return text.split("#", 1)[0].strip()


def read_system(piece_text: str, command: str, reads: SystemReads) -> Optional[str]:
    """Fold a sysfs / procfs / `ls -l /dev` / `id` piece into `reads`; -> what it was ('sysfs', 'kernel command line',
    'meminfo', 'device files', 'groups'), or None when it is none of them."""
    text = piece_text.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    # cat /sys/class/drm/cardN/device/X   (one value) or a glob over cards (one value per card)
    target = _SYSFS_CARD.search(command)
    if target and lines and all(not _SYSFS_LINE.match(l) for l in lines):
        values = [_value(l) for l in lines if _value(l)]
        if values and target.group(1) != "card*":
            reads.cards.setdefault(target.group(1), SysfsCard(target.group(1))).values[target.group(2)] = values[0]
            return "sysfs"
        if values:
            for i, value in enumerate(values):
                name = f"card{i} (by order)"
                reads.cards.setdefault(name, SysfsCard(name)).values[target.group(2)] = value
            return "sysfs"
    # grep . /sys/... or `path value` lines
    found = False
    for line in lines:
        match = _SYSFS_LINE.match(line)
        if not match:
            continue
        path, value = match.group(1), _value(match.group(2))
        card = _SYSFS_CARD.search(path)
        if card and card.group(1) != "card*":
            reads.cards.setdefault(card.group(1), SysfsCard(card.group(1))).values[card.group(2)] = value
            found = True
        elif path.endswith("/ttm/parameters/pages_limit") and value.isdigit():
            reads.ttm_pages_limit, found = int(value), True
    if found:
        return "sysfs"
    if "/sys/module/ttm/parameters/pages_limit" in command or "/sys/module/amdttm/parameters/pages_limit" in command:
        if lines and _value(lines[0]).isdigit():
            reads.ttm_pages_limit = int(_value(lines[0]))
            return "sysfs"
    if _KFD_PROPERTY.search(command) or re.search(r"^gfx_target_version\s+\d+", text, re.MULTILINE):
        targets = [int(v) for v in re.findall(r"^gfx_target_version\s+(\d+)", text, re.MULTILINE)]
        node = re.search(r"nodes/(\d+)/", command)
        if targets:
            if node and len(targets) == 1:
                reads.kfd_targets[int(node.group(1))] = targets[0]
            else:
                for i, value in enumerate(targets):
                    reads.kfd_targets[i] = value
            return "sysfs"
    # /proc/cmdline
    cmdline = _cmdline(text, command)
    if cmdline:
        reads.cmdline = cmdline
        return "kernel command line"
    # /proc/meminfo and free
    mem = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    if mem:
        reads.ram_gib = round(int(mem.group(1)) * 1024 / GIB, 1)
        return "meminfo"
    free = re.search(r"^Mem:\s+([\d.,]+)\s*([KMGT]i?B?|[KMGT])?\b", text, re.MULTILINE)
    if free and (command.startswith("free") or re.search(r"^\s+total\s+used\s+free", text, re.MULTILINE)):
        reads.ram_gib = _free_gib(free.group(1), free.group(2), command)
        return "meminfo"
    # ls -l /dev/kfd /dev/dri/*
    perms = re.findall(r"^(c[rwx-]{9})\S*\s+\d+\s+(\S+)\s+(\S+)\s+\d+,\s*\d+\s+.*?(/dev/\S+|renderD\d+|card\d+|kfd)\s*$",
                       text, re.MULTILINE)
    if perms:
        for mode, _owner, group, path in perms:
            reads.device_files[path if path.startswith("/dev/") else f"/dev/.../{path}"] = (mode, group)
        return "device files"
    # id / groups
    identity = re.search(r"^uid=(\d+)\([^)]*\)\s+gid=\d+\([^)]*\)(?:\s+groups=(\S+))?", text, re.MULTILINE)
    if identity:
        reads.user_is_root = identity.group(1) == "0"
        reads.user_groups = re.findall(r"\d+\(([^)]+)\)", identity.group(2) or "")
        return "groups"
    if re.match(r"\s*groups\b", command) and len(lines) == 1:
        words = lines[0].split(":")[-1].split()
        reads.user_groups = words
        reads.user_is_root = "root" in words[:1]
        return "groups"
    return None


def _cmdline(text: str, command: str) -> Optional[str]:
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    if not lines:
        return None
    first = re.sub(r"^/proc/cmdline:\s*", "", lines[0])
    if "/proc/cmdline" in command and len(lines) <= 2:
        return first
    if lines[0].startswith(("BOOT_IMAGE=", "/proc/cmdline:")) and len(lines) <= 3:
        return first
    if len(lines) == 1 and re.search(r"(?:^|\s)root=\S+", first) and re.search(r"(?:^|\s)(?:ro|rw|quiet)(?:\s|$)", first):
        return first
    return None


def _free_gib(number: str, unit: Optional[str], command: str) -> float:
    value = float(number.replace(",", "."))
    unit = (unit or "").upper().rstrip("B").rstrip("I")
    if not unit:
        unit = "G" if "-g" in command else "M" if "-m" in command else "T" if "-t" in command else "K"
    return round(value * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[unit] / GIB, 1)


def gfx_of_target_version(value: int) -> Optional[str]:
    """KFD's gfx_target_version (110501, 90010) -> gfx1151, gfx90a."""
    if value <= 0:
        return None
    major, minor, step = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor}{step:x}"


def device_file_findings(reads: SystemReads, check: str = "device-files") -> list[Finding]:
    """`ls -l /dev/kfd /dev/dri` beside `id`: the groups that own the device files against the user's."""
    if not reads.device_files:
        return []
    needed = sorted({group for mode, group in reads.device_files.values() if mode[7:9] != "rw"})
    if reads.user_groups is None:
        return [Finding.info(check, "device files: " + ", ".join(f"{p} {m} group {g}"
                                                                  for p, (m, g) in reads.device_files.items()),
                             fix="paste `id` too to check the user's groups against them")]
    missing = [g for g in needed if g not in reads.user_groups and g != "root"]
    if reads.user_is_root or not missing:
        return [Finding.info(check, f"the user may open the GPU device files (groups: {', '.join(needed) or '-'})")]
    return [Finding.error(check, f"the user is not in {' and '.join(missing)}, the group{'s' if len(missing) > 1 else ''} "
                                 "that own the GPU device files",
                          f"ROCm opens /dev/kfd and /dev/dri/renderD* read-write: without the group torch sees no GPU "
                          "('No HIP GPUs are available', rocminfo's 'Unable to open /dev/kfd')",
                          f"sudo usermod -aG {','.join(missing)} $USER, then log in again   (in a container: "
                          "--group-add $(getent group render | cut -d: -f3))")]


_TORCH_VERSION = re.compile(r"\b(\d+\.\d+\.\d+(?:\.dev\d+|a\d+|rc\d+)?\+(?:rocm|cu|cpu|xpu)[\w.]*)")
_HIP_VERSION = re.compile(r"(?<![\w.+])(\d\.\d{1,2}\.\d{5}(?:-[0-9a-f]+)?)(?![\w.])")


def read_python_probe(text: str, command: str) -> dict[str, str]:
    """What a `python -c "import torch; print(...)"` printed: torch's version (2.7.1+rocm6.3) and HIP's (6.3.42131)."""
    if not re.search(r"python\S*\s+(?:\S+\s+)*-c\b", command) or "torch" not in command \
            or len([l for l in text.splitlines() if l.strip()]) > 6:
        return {}
    found: dict[str, str] = {}
    version = _TORCH_VERSION.search(text)
    if version:
        found["torch_version"] = version.group(1)
    hip = _HIP_VERSION.search(text)
    if hip and "version.hip" in command:
        found["hip"] = hip.group(1)
    return found


_PY_ENV = re.compile(r"""os\.environ\[\s*['"]([A-Z_][A-Z0-9_]*)['"]\s*\]\s*=\s*['"]([^'"]*)['"]"""
                     r"""|os\.environ\.setdefault\(\s*['"]([A-Z_][A-Z0-9_]*)['"]\s*,\s*['"]([^'"]*)['"]""")


def python_env_assignments(text: str) -> dict[str, str]:
    """Variables a pasted Python session sets for itself: os.environ["HIP_VISIBLE_DEVICES"] = "1"."""
    found: dict[str, str] = {}
    for match in _PY_ENV.finditer(text):
        name, value = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        found[name] = value
    return found
