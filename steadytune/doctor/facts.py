"""Facts first: what any text says about the machine and the failure, each fact with the line it came from.

A paste arrives in a hundred wordings (a Linux console, PowerShell, a systemd journal, an Ollama server log, a Docker
command, a notebook cell), but the facts in it are few: the OS and the platform it runs on (WSL 2, a container, a
systemd service, SLURM, a notebook), the kernel and driver, the GPUs (a model name, a PCI id, a `gfx` string, an
override value), the ROCm / HIP / CUDA release and how it was installed (TheRock's wheel-only layout has no
/opt/rocm), the Python and its wheel tags, the torch build, the tool that failed, and every error line. The rules
(rules.py) reason over these facts, never over the wording, so a new wording of a known problem needs a new fact
pattern at most, not a new rule.

Every pattern here is structural (a version's form, a path's shape, a product's name), and each fact keeps its line
number and the line itself so a finding can quote its evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from steadytune.hardware.archs import decode_rocm_smi_gfx, is_gfx_target
from steadytune.hardware.gpu_facts import PRODUCTS, arch_info, lookup_product, normalise_gfx
from steadytune.hardware.gpu_ids import AMD, lookup_id


@dataclass(frozen=True)
class Fact:
    kind: str           # see KINDS
    value: str          # normalised: "gfx1031", "10.3.0", "6.2", "wsl", "ollama" ...
    line_no: int        # 1-based, in the text given to extract_facts
    line: str           # the source line, trimmed
    detail: str = ""    # how it was said, where that matters: "machine" / "list" for an arch, the setter of a variable

    def quote(self, width: int = 160) -> str:
        text = self.line if len(self.line) <= width else self.line[: width - 3] + "..."
        return f"line {self.line_no}: {text}"


KINDS = ("os", "platform", "kernel", "driver", "gpu", "arch", "built_for", "pci_id", "env", "rocm", "hip", "cuda",
         "layout", "python", "wheel_tag", "torch", "tool", "error", "sensors", "root_only", "complaint", "igpu",
         "device_node", "nccl_iface", "memory_total", "user_groups", "cpu_arch", "needs_group",
         "python_bits", "retired_option")


@dataclass
class FactSheet:
    """The facts of one text, in line order."""
    facts: list[Fact] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[Fact]:
        return [f for f in self.facts if f.kind == kind]

    def first(self, kind: str) -> Optional[Fact]:
        return next((f for f in self.facts if f.kind == kind), None)

    def values(self, kind: str) -> list[str]:
        seen: list[str] = []
        for f in self.facts:
            if f.kind == kind and f.value not in seen:
                seen.append(f.value)
        return seen

    def has(self, kind: str, value: Optional[str] = None) -> bool:
        return any(f.kind == kind and (value is None or f.value == value) for f in self.facts)

    def env(self, name: str) -> Optional[Fact]:
        """The last setting of a variable (`env` facts hold NAME=VALUE)."""
        found = [f for f in self.facts if f.kind == "env" and f.value.split("=", 1)[0] == name]
        return found[-1] if found else None

    def env_value(self, name: str) -> Optional[str]:
        fact = self.env(name)
        return fact.value.split("=", 1)[1] if fact else None

    @property
    def machine_archs(self) -> list[str]:
        """The GPU architectures of the machine itself (not the lists of what a build supports), in order."""
        return self.values("arch")

    @property
    def is_windows(self) -> bool:
        return self.has("os", "windows") and not self.has("platform", "wsl")

    @property
    def tools(self) -> list[str]:
        return self.values("tool")


# ---------------------------------------------------------------------------------------------------------
# Patterns: each finds a fact in one line
# ---------------------------------------------------------------------------------------------------------

Finder = Callable[[str], Iterable[tuple[str, str, str]]]   # line -> (kind, value, detail)...
_FINDERS: list[Finder] = []


def finder(function: Finder) -> Finder:
    _FINDERS.append(function)
    return function


_OS = (("ubuntu", r"(?i:\bUbuntu)[\s-]?(\d\d\.\d\d)"), ("ubuntu", r"\bUbuntu\b"), ("debian", r"\bDebian\b"),
       ("fedora", r"\bFedora\b"), ("arch", r"\bArch ?Linux\b|\bEndeavourOS\b|\bManjaro\b|\bCachyOS\b|\barch1\b"),
       ("nixos", r"\bNixOS\b"), ("opensuse", r"\bopenSUSE\b|\bTumbleweed\b"), ("popos", r"\bPop!_OS\b"),
       ("mint", r"\bLinux Mint\b"), ("gentoo", r"\bGentoo\b"), ("rhel", r"\bRHEL\b|Red Hat Enterprise|\bRocky Linux\b|\bAlmaLinux\b"),
       ("windows", r"\bWindows (?:10|11|Server)\b|(?i:\bwin(?:dows)? ?1[01]\b)|\bOS:? Windows\b|[A-Z]:\\\\?(?:Users|Program Files|Windows|ProgramData)\\|\bwin_amd64\b|\.dll\b|\[MSC v\.\d{3,4} (?:32|64) bit|\bPS [A-Z]:\\|(?i:\bLocal\\Temp\\)|(?i:\b[\w-]+\.bat\b)|"
                   r"(?i:\b(?:on|in|under) (?:a )?windows\b(?! subsystem)(?: (?:10|11|machine|pc))?)|"
                   r"(?i:^\W*windows\b(?! subsystem)|\bwindows (?=rocm|hip\b|amd\b|gpu\b|ollama|pytorch|torch\b))"),
       ("macos", r"\bmacOS\b|\bDarwin Kernel\b"))
# (CPython's banner "[MSC v.1934 64 bit (AMD64)]" names the MSVC compiler python.org's Windows builds are made with: a
# Python of Windows)


@finder
def _os(line: str):
    for name, pattern in _OS:
        m = re.search(pattern, line)
        if m:
            yield "os", name, (m.group(1) if m.groups() and m.group(1) else "")
            if name != "ubuntu":
                continue
            break


_PLATFORMS = (
    ("wsl", r"microsoft-standard-WSL2|\bWSL ?2?\b|/dev/dxg\b|librocdxg|\bdxgkrnl\b|/usr/lib/wsl/"),
    ("container", r"\bdocker (?:run|exec|compose)\b|\bdocker-compose\b|\bpodman (?:run|exec)\b|\bDockerfile\b"
                  r"|^\s*(?:\(\S+\)\s*)?root@[0-9a-f]{12}:|\bapptainer\b|\bsingularity (?:exec|run|shell)\b"
                  r"|/\.dockerenv|\bkubectl\b|^\s*devices:\s*$|\brocm/(?:pytorch|vllm|dev-ubuntu)[:\w.-]*"
                  r"|\b(?:ollama/)?ollama:rocm\b|(?<!not )(?<!n't )\b(?:inside|in) (?:the|a|my|this) (?:docker |podman |running )?container\b"
                  r"|(?:docker|容器)\s*(?:里|内|中)|\bdistrobox\b|\btoolbox (?:enter|run)\b"),
    ("systemd", r"\bsystemctl\b|\bjournalctl\b|\bsystemd\[\d+\]|\.service\b|^\s*Environment=|\[Service\]"),
    ("slurm", r"\bsrun\b|\bsbatch\b|\bSLURM_\w+|\bsalloc\b"),
    ("notebook", r"\bipykernel\b|\bJupyter\b|\bjupyter\b|\bColab\b|^\s*In \[\d+\]:|\bCell In\[\d+\]"),
    ("sudo", r"(?:^|[\s$#>])sudo\s+(?!usermod|apt|dnf|yum|pacman|zypper|modprobe|dmesg|reboot|systemctl|tee|cat|"
             r"amdgpu-install|sh\b|bash\b|dkms|update-grub|grub|chmod|chown|ln|cp|mv|rm|mkdir|gpasswd|"
             r"ldconfig|journalctl|lspci)"),
)


@finder
def _platform(line: str):
    for name, pattern in _PLATFORMS:
        if re.search(pattern, line):
            yield "platform", name, ""


@finder
def _kernel(line: str):
    m = re.search(r"\b(\d\.\d{1,2}(?:\.\d{1,3}){1,2}(?:-[\w.]+)?-(?:generic|arch\d[\w-]*|amd64|lowlatency|cachyos[\w-]*|"
                  r"microsoft-standard-WSL2|zen\d|fc\d\d[\w.]*|default|lts|oem|rt|azure|aws|gcp|kvm)\w*)\b", line)
    if m:
        yield "kernel", m.group(1), ""
        if "microsoft-standard-WSL2" in m.group(1):
            yield "platform", "wsl", ""
        return
    m = re.search(r"\b(?:Linux|Kernel(?: version)?:?|uname -r\)?:?)\s+(\d\.\d{1,2}(?:\.\d{1,3})?(?:-\S+)?)", line)
    if m and not re.search(r"Python|GCC", line[: m.start()]):
        yield "kernel", m.group(1), ""


@finder
def _driver(line: str):
    m = re.search(r"(?:amdgpu(?:-dkms)? (?:version|driver)|Driver version|driver_version)\s*[:=]?\s*(\d+\.\d+[\w.\-]*)",
                  line, re.IGNORECASE)
    if m:
        yield "driver", m.group(1), "amdgpu" if "amd" in line.lower() else ""
    m = re.search(r"Driver Version:\s*(\d{3}\.\d+(?:\.\d+)?)", line)
    if m:
        yield "driver", m.group(1), "nvidia"
    else:   # told in words: "nvidia driver 396.26", "Driver is 525.60.13" (NVIDIA's three-digit branch and its release)
        m = re.search(r"(?i)\b(?:nvidia |geforce )?driver (?:version )?(?:is |was |of |= ?|: ?)?v?(\d{3}\.\d{2,3}(?:\.\d{2})?)\b", line)
        if m and not re.search(r"(?i)\bamdgpu|\bradeon|adrenalin", line):
            yield "driver", m.group(1), "nvidia"
    # (the failure close to the package's name: a sentence that mentions installing it and, later, some error is not)
    if re.search(r"\bamdgpu-dkms\b.{0,80}(?<!the )(?<!an )(?<!this )\b(?:failed|error)|\bBad return status for module build\b|dkms.*\bfailed\b", line,
                 re.IGNORECASE):
        yield "driver", "dkms-failed", ""


# gfx strings: the machine's own arch, versus a list of what a build or a tool supports. A line naming three or more
# distinct targets is a list (Ollama's "supported types:[...]", TensorFlow's "supported AMDGPU versions are ...",
# a TensileLibrary listing, PYTORCH_ROCM_ARCH=...), and so is one that names a build's files.
_GFX = re.compile(r"(?<![A-Za-z0-9])(?:amdgcn-amd-amdhsa--)?(gfx(?:[6-9][0-9a-f]{2}|1[0-2][0-9][0-9a-f]{1,2}))"
                  r"(?::(?:sramecc|xnack)[+-])*(?![0-9a-z])", re.IGNORECASE)
_LIST_CONTEXT = re.compile(r"supported|support(?:s|ed)? (?:types|targets|versions|archs?)|available|TensileLibrary_|"
                           r"_lazy_|PYTORCH_ROCM_ARCH|AMDGPU_TARGETS|GPU_TARGETS|GFX_ARCH|BNB_ROCM_ARCH|--offload-arch|"
                           r"HCC_AMDGPU_TARGET|archs?\s*[:=]|arch_list|get_arch_list|compiled for|built for|targets?:",
                           re.IGNORECASE)
_MACHINE_CONTEXT = re.compile(r"gpu_type=|Name:\s+(?:amdgcn-amd-amdhsa--)?gfx|for GPU arch ?: ?gfx|gcnArchName|"
                              r"arch(?:itecture)?[ =:]+gfx|--->\s*gfx|GPU arch|\bdevice\b|\bagent\b|\bgfx\w+ \(|"
                              r"ISA|GFX VER|target=gfx|Target:|\[gfx", re.IGNORECASE)


_MACHINE_BEFORE = re.compile(r"(?:gpu_type=|AMDGPU version\s*:?\s*|for GPU arch\s*:?\s*|GPU arch(?:itecture)?\s*[:=]?\s*|"
                             r"(?:my|your|the) (?:GPU|card) (?:is )?(?:an? )?|Name:\s*(?:amdgcn-amd-amdhsa--)?|"
                             r"gcnArchName\W*|--->\s*)$", re.IGNORECASE)


# what a tool says is the oldest arch it runs on: that gfx is the build's floor, never the GPU's own
_MINIMUM_BEFORE = re.compile(r"(?i)(?:minimum|oldest|lowest)\b[\w ]{0,30}?\b(?:is|:)\s*$|at least\s*$")


@finder
def _arch(line: str):
    found: list[tuple[str, bool]] = []   # (gfx, said to be the machine's by what comes right before it)
    floors: list[str] = []
    for m in _GFX.finditer(line):
        gfx = m.group(1).lower()
        decoded = gfx if is_gfx_target(gfx) else decode_rocm_smi_gfx(gfx)
        if decoded and decoded not in [g for g, _ in found]:
            before = line[max(0, m.start() - 40): m.start()]
            if _MINIMUM_BEFORE.search(before):   # "the minimum required ISA is gfx803": a floor, not this machine's
                floors.append(decoded)
                continue
            if re.search(r"HSA_OVERRIDE_GFX_VERSION\w*\s*[=:]\s*[\"'`]?$", before):
                continue   # "HSA_OVERRIDE_GFX_VERSION=gfx1030": a (malformed) override value, not a GPU
            found.append((decoded, bool(_MACHINE_BEFORE.search(before))))
    for gfx in floors:
        yield "built_for", gfx, "minimum"
    if not found:
        return
    named = len(re.findall(r"(?i)(?<![a-z0-9])gfx[0-9a-z]{2,4}(?![a-z0-9])", line))   # gfx90x, gfx110x count too
    listed = len(found) >= 3 or named >= 3 or bool(_LIST_CONTEXT.search(line))
    if len(found) == 1 and re.search(r"TensileLibrary\w*_gfx", line) and \
            re.search(r"(?i)could not load|cannot read|no such file|not found|failed to load", line):
        listed = False   # the one library file rocBLAS wanted for this GPU and did not find
    for gfx, machine in found:
        if machine or not listed or (len(found) == 1 and _MACHINE_CONTEXT.search(line)):
            yield "arch", gfx, "machine"
        else:
            yield "built_for", gfx, "list"


@finder
def _nvidia_arch(line: str):
    m = re.search(r"\bsm_(\d{2,3})\b", line)
    cc = re.search(r"(?:compute capability|CUDA capability|Compute capability)[^\d]{0,20}(\d{1,2})\.(\d)", line,
                   re.IGNORECASE)
    # Kokkos: "running kernels compiled for compute capability 7.0 (...) on device with compute capability 5.0": the
    # device's is the machine's, the first one the build's
    device = re.search(r"(?i)\bon device with compute capability\s*(\d{1,2})\.(\d)", line)
    if device:
        cc = device
    if cc and re.search(r"(?i)\bROCm\b|\bHIP\b|Radeon|\bAMD\b|\bgfx\d", line):
        cc = None   # llama.cpp's ROCm device line prints the gfx number as a "compute capability" (10.3 is gfx103x)
    if cc:
        yield "arch", f"sm_{cc.group(1)}{cc.group(2)}", "machine"
    elif m and re.search(r"\bwith CUDA capability sm_|\bcapability:?\s*sm_|^\s*(?:- )?Compute capability", line):
        yield "arch", f"sm_{m.group(1)}", "machine"
    # text-embeddings-inference's candle backend: "Runtime compute cap 75 is not compatible with compile time compute
    # cap 80": the GPU's own capability, then the one the image was compiled for
    tei = re.search(r"(?i)Runtime compute cap (\d{2,3}) is not compatible with compile time compute cap (\d{2,3})", line)
    if tei:
        yield "arch", f"sm_{tei.group(1)}", "machine"
        yield "built_for", f"sm_{tei.group(2)}", "list"
    supported = re.search(r"supports CUDA capabilities ((?:sm_\d+\s*)+)", line)
    if supported:
        for sm in re.findall(r"sm_\d+", supported.group(1)):
            yield "built_for", sm, "list"


# GPU model names: the product table's patterns (Radeon, Instinct, Ryzen APU graphics, NVIDIA), read only where the
# line looks like it names a device, not where a sentence compares cards.
_GPU_WORDS = re.compile(r"\b1[06][5-8]0 ?Ti\b|"
                        r"\b(?:20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0)(?: ?Ti| SUPER)?\b|Radeon|\b[5-9]\d\d0 ?(?:XTX|XT|GRE)\b|\bAMD ?\d{3}M\b|\bAMD \d{4}[HU]\b|\bRX ?\d{3,4}|Instinct|\bMI\d{2,3}|Navi ?\d\d|NVIDIA|GeForce|\b[RG]TX ?\d{3,4}|\bRTX\b|\bGTX\b|Tesla|"
                        r"Quadro|FirePro|\b[AHBL]\d{2,3}\b|Vega|Strix|Phoenix|Raphael|Rembrandt|Renoir|Cezanne|Barcelo|Lucienne|Van Gogh|"
                        r"Ryzen AI|\bAI ?MAX\+? ?3[89]\d\b|\bW[5-7]\d00\b|\bV[67]\d0\b|Polaris|Ellesmere|Hawk Point|Krackan|Granite Ridge|"
                        r"Steam Deck|Jetson|Orin|\bAGX Xavier\b|Ryzen (?:[3579]|AI) \d{4}[A-Z]*|\bRyzen [457]\d{3}(?:HS|HX|H|U)\b|\bR[79] ?\d{3}X?\b|\bR9 Nano\b|\bFury\b|\bFiji\b|\bMX ?\d{3}\b|"
                        r"\bGT \d{3,4}\b|\bTitan\b|\bL40S\b|\bA10G\b|\bGB10\b|DGX Spark|"
                        # data-centre cards named bare, often in lower case ("on a v100", "2x p100")
                        r"\b(?:[VP]100|P40|T4|K[48]0m?)\b", re.IGNORECASE)
_MOBILE = re.compile(r"\bRX ?(6[0-9]{3})(M|S)\b", re.IGNORECASE)
# Laptop Radeons by number and suffix (LLVM's processor table, AMD's product pages): the S parts are Navi 23
_MOBILE_ARCH = {("68", "M"): "gfx1031", ("67", "M"): "gfx1031", ("66", "M"): "gfx1032", ("65", "M"): "gfx1034",
                ("64", "M"): "gfx1034", ("63", "M"): "gfx1034", ("68", "S"): "gfx1032", ("67", "S"): "gfx1032",
                ("66", "S"): "gfx1032"}
_APU_CPU = (  # Ryzen CPU model numbers with their graphics (AMD's product pages): the iGPU's target
    (r"Ryzen (?:AI )?(?:Max\+? )?(?:PRO )?3\d\d\b|Ryzen AI Max|\bAI ?MAX\+? ?(?:PRO )?3[89]\d\b", "gfx1151"),
    (r"Ryzen AI (?:9|7|5) (?:HX )?(?:PRO )?3\d\d\b", "gfx1150"),
    (r"Ryzen [3579] (?:PRO )?(?:7[84]\d0|8[4-9]\d0)[HUGS]?S?\b", "gfx1103"),
    (r"(?:Ryzen [3579] )?(?:PRO )?(?:6[6-9]\d0|7[3-7]35)[HU]S?\b", "gfx1035"),
    (r"Ryzen [3579] (?:PRO )?(?:[45]\d\d0)[HUG]E?S?\b|\b[45][67]00GE?\b", "gfx90c"),
    # Ryzen 4000/5000 mobile named without the tier digit ("Ryzen 5825U"), the x25U Barcelo parts and the 7x30U
    # Barcelo-R refresh: Vega graphics, gfx90c (AMD's product pages; LLVM's processor table)
    (r"Ryzen (?:[3579] )?(?:PRO )?(?:[45][1-9][0-9][05](?:HS|HX|H|U)|7[3-7]30U)\b", "gfx90c"),
    (r"Ryzen [35] (?:PRO )?[23][24]00GE?\b|Ryzen [357] (?:PRO )?[23][57]00U\b", "gfx902"),
    (r"Ryzen [3579] (?:PRO )?7\d[05]0X?3?D?\b|Ryzen [3579] (?:PRO )?9\d{3}X?3?D?\b", "gfx1036"),
)


# An APU's graphics named alone ("my 780M", "the 890M iGPU"): the number is also a parameter count ("a 780M model"),
# so it counts only beside a word about a GPU and not before one about a model
_BARE_IGPU = re.compile(r"(?i)(?<![\w.])(?<!GT )(?<!GTX )((?:[67][1-8]|8[4-9])0M|80[4-6]0S)\b(?!\s*(?:param|token|model|LLM|weights|B\b))")
_GPU_CONTEXT = re.compile(r"(?i)\b(?:my|the|iGPU|GPU|APU|graphics|ROCm|HIP|gfx\w*|ollama|vulkan|llama\.cpp|torch|"
                          r"comfyui|laptop|with)\b")


def _bare_igpu(line: str) -> Optional[re.Match]:
    m = _BARE_IGPU.search(line)
    return m if m and _GPU_CONTEXT.search(line) else None


# a Chinese character glued to a model name ("8张A100的卡"): both are word characters, so \b finds no edge between them
_GLUED_MEMORY = re.compile(r"(?i)\b((?:20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0) ?Ti)(?=\d{1,2} ?GB?\b)")
_CJK_EDGE = re.compile(r"(?<=[\u4e00-\u9fff])(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])(?=[\u4e00-\u9fff])")


@finder
def _gpu(line: str):
    if re.search(r"[\u4e00-\u9fff]", line):
        line = _CJK_EDGE.sub(" ", line)
    # a modded card's memory glued to its name ("2080ti22g", the 22 GB RTX 2080 Ti sold in China): the name alone
    line = _GLUED_MEMORY.sub(r"\1 ", line)
    if not (_GPU_WORDS.search(line) or _bare_igpu(line) or _GEFORCE_SERIES.search(line)):
        return
    mobile = _MOBILE.search(line)
    if mobile:
        arch = _MOBILE_ARCH.get((mobile.group(1)[:2], mobile.group(2).upper()))
        if arch:
            yield "gpu", f"Radeon RX {mobile.group(1)}{mobile.group(2).upper()}", arch
            return
    igpu = re.search(r"\b(?:AMD|Radeon)[ -]?(\d{3}M|80[4-6]0S)\b", line, re.IGNORECASE) or _bare_igpu(line)
    if igpu:   # "AMD780M", "Radeon 890M": the graphics model alone
        product = lookup_product(f"Radeon {igpu.group(1).upper()}")
        if product is not None:
            yield "gpu", f"Radeon {igpu.group(1).upper()}", product.arch
            return
    for pattern, arch in _APU_CPU:
        m = re.search(pattern, line, re.IGNORECASE)
        # (核显 / 集显: "the integrated graphics", as Chinese posts name an APU's GPU)
        if m and re.search(r"Radeon|Graphics|iGPU|APU|\bwith\b|Ryzen AI|\bAMD\b|\bAI ?MAX\b|核显|集显|核芯显卡|集成显卡", line, re.IGNORECASE):
            yield "gpu", m.group(0), arch
            rest = line[m.end():]   # a laptop's card named after its CPU ("Ryzen 7 4800H and GTX 1650 Ti")
            if not re.search(r"(?i)\b(?:RTX|GTX|RX) ?\d{3,4}|GeForce|Quadro", rest):
                return
            line = rest
            break
    named = re.sub(r"\bRadeon(?:\(TM\))? (?=[5-9]\d{3}\b)", "Radeon RX ", line)   # "Radeon 7900 XTX" is an RX
    named = re.sub(r"(?i)\bRX[ -]?(\d{3,4})", r"RX \1", named)                   # "RX6700", "rx 580", "RX-7900"
    named = re.sub(r"(?i)\b(RTX|GTX)[ -]?(\d{3,4})", lambda m: f"{m.group(1).upper()} {m.group(2)}", named)   # "Gtx1650ti", "RTX-5090"
    named = re.sub(r"(?i)\bGeForce (1[0-6][5-8]0)\b", r"GTX \1", named)                       # "geforce 1070"
    # a GeForce RTX number after the vendor's name alone ("nvidia 5090", "GeForce 4090"): the RTX card
    named = re.sub(r"(?i)\b(NVIDIA|GeForce) ((?:20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0))\b", r"\1 RTX \2", named)
    # a bare GeForce number said to be a GPU ("a 5080 GPU", "my 4090 card", a blower "4090 turbo"), or after the
    # words for the graphics card ("显卡是两张 4090": "the cards are two 4090s"), never a memory size ("4090 MiB")
    if not re.search(r"(?i)\b(?:RTX|GTX|RX)\s?\d{4}", named):
        named = re.sub(r"(?i)(?<!\w)((?:20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0)(?: ?Ti| SUPER)?)\b(?=\s*(?:GPU|card|graphics|laptop|turbo|显卡|顯卡))",
                       r"RTX \1", named)
        if re.search(r"显卡|顯卡", named):
            named = re.sub(r"(?i)(?<![\w.])(?<!RTX )((?:20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0)(?: ?Ti| SUPER)?)\b"
                           r"(?!\s*(?:MiB|MB|GiB|GB|M\b|W\b|MHz|%|元|块))", r"RTX \1", named)
    # "7800XT", "6700 XT", "9060XT", "6650 XT" (RDNA's x50 / x60 parts too)
    named = re.sub(r"(?i)(?<!RX )(?<!RX)\b([5-9]\d\d0) ?(XTX|XT|GRE)\b", r"RX \1 \2", named)
    # a GTX 10 or 16 series number with its Ti ("1080Ti", "1660 Ti"): the GTX card, whatever follows it
    named = re.sub(r"(?i)(?<![\w.])(?<!GTX )(1[06][5-8]0) ?Ti\b", r"GTX \1 Ti", named)
    # a GeForce number with its Ti glued on ("3080ti", "4070Ti") is a card whatever follows it
    named = re.sub(r"(?i)(?<![\w])(?<!RTX )((?:20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0))Ti\b", r"RTX \1 Ti", named)
    # ... and with a space before its Ti ("a 4060 ti with 16gb"): no parameter count or year is followed by "Ti"
    named = re.sub(r"(?i)(?<![\w.])(?<!RTX )(?<!GTX )((?:20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0)) Ti\b", r"RTX \1 Ti", named)
    # every card the line names, in the order named ("built on an A100, fails on a V100"): each span once, by the
    # first (most specific) product that matches it
    found, taken = [], []
    for product in PRODUCTS:
        for m in re.finditer(product.pattern, named, re.IGNORECASE):
            if not any(m.start() < end and start < m.end() for start, end in taken):
                taken.append((m.start(), m.end()))
                found.append((m.start(), _model_phrase(named, m), product.arch))
    if found:
        for _, phrase, arch in sorted(found):
            yield "gpu", phrase, arch
        return
    series = _GEFORCE_SERIES.search(line)
    if series:   # "50 series cards", "RTX 50xx": the generation, whose compute capability is the same for every card
        generation = next(g for g in series.groups() if g)
        yield "gpu", f"GeForce RTX {generation} series", _SERIES_ARCH[generation]
        return
    if re.search(r"Jetson (?:AGX )?Orin|\bOrin (?:Nano|NX)", line, re.IGNORECASE):
        yield "gpu", "Jetson Orin", "sm_87"


# cloud instance types named for their GPU (AWS's accelerated-computing instance pages; SageMaker writes them with
# "ml."; Google Cloud's accelerator-optimized machine series): the GPU every such instance carries. p5 is H100, while
# p5e and p5en carry H200 (the EC2 offer dstackai/dstack#4110 lists for p5en.48xlarge: gpu=H200:141GB:8); Google's A3
# Ultra (a3-ultragpu-8g) is H200 too, its A3 High / Mega H100 (GoogleCloudPlatform/cluster-toolkit release v1.44.1:
# "A3 Ultra ... 8 NVIDIA H200 GPUs")
_CLOUD_INSTANCES = ((r"p2", "Tesla K80", "sm_37"), (r"g3s?", "Tesla M60", "sm_52"), (r"p3(?:dn)?", "Tesla V100", "sm_70"),
                    (r"g4dn", "Tesla T4", "sm_75"), (r"g5g", "T4G", "sm_75"), (r"g4ad", "Radeon Pro V520", "gfx1011"),
                    (r"g5", "A10G", "sm_86"), (r"g6", "L4", "sm_89"), (r"g6e", "L40S", "sm_89"),
                    (r"p4de?", "A100", "sm_80"), (r"p5", "H100", "sm_90"), (r"p5(?:e|en)", "H200", "sm_90"))
_CLOUD_INSTANCE = re.compile(r"(?i)(?<![\w.-])(?:ml\.)?(p2|g3s?|p3(?:dn)?|g4dn|g5g|g4ad|g5|g6e?|p4de?|p5(?:e|en)?)\."
                             r"(?:\d{0,2}x?large|metal)\b|\b(a2|a3|g2)-(highgpu|megagpu|ultragpu|standard)-\d+g?\b")
_GCP_SERIES = {"a2": ("A100", "sm_80"), "a3": ("H100", "sm_90"), "g2": ("L4", "sm_89")}
_GCP_TIER = {("a3", "ultragpu"): ("H200", "sm_90")}


@finder
def _cloud_instance(line: str):
    m = _CLOUD_INSTANCE.search(line)
    if m is None:
        return
    if m.group(1):
        kind = m.group(1).lower()
        name, arch = next((n, a) for pattern, n, a in _CLOUD_INSTANCES if re.fullmatch(pattern, kind))
    else:
        series, tier = m.group(2).lower(), m.group(3).lower()
        name, arch = _GCP_TIER.get((series, tier)) or _GCP_SERIES[series]
    yield "gpu", f"{name} ({m.group(0)})", arch


# a GeForce generation named as a whole: "50 series cards", "RTX 50-series", "RTX 50xx", "50系显卡" (NVIDIA's compute capability
# per generation: Turing 7.5, Ampere 8.6, Ada 8.9, Blackwell 12.0)
_GEFORCE_SERIES = re.compile(r"(?i)\b(?:RTX )?([2-5]0)[- ]?series (?:cards?|GPUs?|graphics)|\bRTX ?([2-5]0)[- ]?series\b|"
                             r"\bRTX ?([2-5]0)xx\b|(?<!\d)([2-5]0) ?系(?:列)?(?:显卡|N卡|卡)")
_SERIES_ARCH = {"20": "sm_75", "30": "sm_86", "40": "sm_89", "50": "sm_120"}


_NAME_BEFORE = {"amd", "radeon", "radeon(tm)", "rx", "instinct", "nvidia", "geforce", "rtx", "gtx", "pro", "tesla",
                "quadro", "ai", "ryzen"}
_NAME_AFTER = re.compile(r"^(?:\s+(?:XTX|XT|GRE|Ti|SUPER|D|Max|Ultra|PCIe|SXM\w*|\d+GB|M|S|HX)\b)*", re.IGNORECASE)


def _model_phrase(line: str, m: re.Match) -> str:
    """The product's name as the line says it ('AMD Radeon RX 6600 XT'): the match, with the vendor and series words
    right before it and the suffixes right after."""
    words = line[: m.start()].split()
    start = m.start()
    for word in reversed(words[-3:]):
        if word.strip("[](),").lower() not in _NAME_BEFORE:
            break
        start = line.rfind(word, 0, start)
    end = m.end() + len(re.match(r"\w*", line[m.end():]).group(0))   # MI350 -> MI350P
    end += len(_NAME_AFTER.match(line[end:]).group(0))
    return re.sub(r"\s+", " ", line[start:end]).strip(" [](),;:'\"")[:60]


@finder
def _pci(line: str):
    for m in re.finditer(r"\b(?:0x)?(1002|10de):(?:0x)?([0-9a-f]{4})\b", line, re.IGNORECASE):
        vendor, device = int(m.group(1), 16), int(m.group(2), 16)
        row = lookup_id(device, vendor)
        yield "pci_id", f"{m.group(1).lower()}:{m.group(2).lower()}", row.arch if row else ""
    # lspci without -n: "Advanced Micro Devices, Inc. [AMD/ATI] Device 150e"
    m = re.search(r"\[AMD/ATI\] Device ([0-9a-f]{4})\b", line)
    if m:
        row = lookup_id(int(m.group(1), 16), AMD)
        yield "pci_id", f"1002:{m.group(1)}", row.arch if row else ""
    m = re.search(r"\bDID\W+(?:0x)?([0-9a-f]{4})\b|^\s*\d+\s+\d+\s+0x([0-9a-f]{4})\s", line, re.IGNORECASE)
    if m:
        device = m.group(1) or m.group(2)
        row = lookup_id(int(device, 16), AMD)
        if row:
            yield "pci_id", f"1002:{device.lower()}", row.arch


# Variables, however they are set: `export X=1`, `X=1 cmd`, `Environment="X=1"` (systemd), `--env X=1` / `-e X=1`
# (docker), `os.environ["X"] = "1"`, `set -x X 1` (fish), `set X=1` / `$env:X = "1"` (Windows), and what a server
# prints of its own environment (Ollama's `server config env="map[X:1 ...]"`, where an empty value means unset).
_ENV_NAMES = (r"HSA_OVERRIDE_GFX_VERSION(?:_\d+)?|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|"
              r"GPU_DEVICE_ORDINAL|HCC_AMDGPU_TARGET|PYTORCH_ROCM_ARCH|AMDGPU_TARGETS|GPU_TARGETS|HSA_ENABLE_SDMA|"
              r"HSA_XNACK|HIP_PATH|ROCM_PATH|ROCM_HOME|LD_LIBRARY_PATH|NCCL_\w+|RCCL_\w+|TORCH_\w+|PYTORCH_\w+|"
              r"MIOPEN_\w+|OLLAMA_\w+|HSA_\w+|AMD_\w+|HIP_\w+|GGML_\w+|VLLM_\w+|BNB_\w+|FLASH_ATTENTION_\w+")
_SETTERS = (
    ("systemd", re.compile(r"Environment=\"?(%s)=([^\"\s]*)" % _ENV_NAMES)),
    ("docker", re.compile(r"(?:--env|-e)[ =]\"?(%s)=\"?([^\"\s]*)" % _ENV_NAMES)),
    # a compose file's environment: entries, list form ("- NAME=value") or map form ("  NAME: value"), alone on a line
    ("docker", re.compile(r"^\s*-\s*[\"']?(%s)=[\"']?([^\"'\s]*)[\"']?\s*$" % _ENV_NAMES)),
    ("docker", re.compile(r"^\s+(%s):\s*[\"']?([^\"'\s]+)[\"']?\s*$" % _ENV_NAMES)),
    ("python", re.compile(r"""os\.environ\[\s*['"](%s)['"]\s*\]\s*=\s*['"]([^'"]*)['"]""" % _ENV_NAMES)),
    ("python", re.compile(r"""os\.environ\.setdefault\(\s*['"](%s)['"]\s*,\s*['"]([^'"]*)['"]""" % _ENV_NAMES)),
    ("fish-unexported", re.compile(r"\bset (?:-[Ugl]+ )+(%s) \"?([^\"\s]+)" % _ENV_NAMES)),
    ("fish", re.compile(r"\bset (?:-\w*x\w* )+(%s) \"?([^\"\s]+)" % _ENV_NAMES)),
    ("windows", re.compile(r"\$env:(%s)\s*=\s*[\"']?([^\"'\s;]*)" % _ENV_NAMES)),
    ("windows", re.compile(r"(?:^|\s)(?:set|setx)\s+\"?(%s)[= ]\"?([^\"\s]*)" % _ENV_NAMES, re.IGNORECASE)),
    ("export", re.compile(r"\bexport\s+(%s)=[\"']?([^\"'\s]*)" % _ENV_NAMES)),
    ("printed", re.compile(r"^\s*(%s)=(\S*)\s*$" % _ENV_NAMES)),
    ("prefix", re.compile(r"(?:^|[\s$#>]|;\s*)(%s)=[\"']?([^\"'\s]*)[\"']?\s+(?:\S+/)?(?!export)[\w.\-]+" % _ENV_NAMES)),
    # a setting only named in prose or a quoted snippet ("with `HSA_OVERRIDE_GFX_VERSION=10.3.0`", "...=12.0.1 (which")
    ("said", re.compile(r"(?<![\w$])(%s)\s?=\s?[\"'`]?([0-9][\w.,]*)" % _ENV_NAMES)),
)


@finder
def _env(line: str):
    server = re.search(r"server config env=\"?map\[(.*)", line)
    if server:   # Ollama prints every variable it reads; an empty one is unset in the service
        for name, value in re.findall(r"\b(HSA_OVERRIDE_GFX_VERSION|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|"
                                      r"CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL):(\S*)", server.group(1)):
            yield "env", f"{name}={value}", "server"
        return
    skip = re.search(r"skipping rocm gfx compatibility check\"?\s+(HSA_OVERRIDE_GFX_VERSION)=(\S+)", line)
    if skip:
        yield "env", f"{skip.group(1)}={skip.group(2).strip(chr(34))}", "server"
        return
    seen = set()
    for how, pattern in _SETTERS:
        for m in pattern.finditer(line):
            if m.group(1) in seen:
                continue
            seen.add(m.group(1))
            # a value ends where prose in another script begins ("=5，设置了..." has no space before the Chinese)
            value = re.split(r"[^\x21-\x7e]", m.group(2))[0]
            yield "env", f"{m.group(1)}={value.strip(chr(34)).strip(chr(39))}", how


@finder
def _versions(line: str):
    for m in re.finditer(r"\+rocm(\d+\.\d+(?:\.\d+)?)|/opt/rocm-(\d+\.\d+(?:\.\d+)?)|\bROCm[ -]?v?(\d\.\d{1,2}(?:\.\d+)?)\b|"
                         r"\bROCM used to build PyTorch:\s*(\d+\.\d+)|\brocm[_-]v?(\d\.\d(?:\.\d)?)\b|"
                         r"AMD\\+ROCm\\+(\d+\.\d+)|\bHIP SDK (\d\.\d)|\brocm-core[ -](\d+\.\d+(?:\.\d+)?)|"
                         r"\brocm(\d)(\d)(?:_|\.so|\b)", line, re.IGNORECASE):
        groups = [g for g in m.groups() if g]
        value = ".".join(groups) if len(groups) == 2 else groups[0]
        if re.fullmatch(r"1\.\d\d.*", value):
            continue   # ROCm 1.x ran from 1.0 to 1.9: "koboldcpp rocm 1.74" is the program's own release
        yield "rocm", ".".join(value.split(".")[:2]), "windows" if "\\" in m.group(0) or "HIP SDK" in m.group(0) else ""
    m = re.search(r"(?:HIP (?:runtime )?version|HIP version|torch\.version\.hip)\W+(\d+\.\d+\.\d+)", line, re.IGNORECASE)
    if m:
        yield "hip", m.group(1), ""
    for m in re.finditer(r"\+cu(\d{2,3})\b|\bCUDA (?:UMD )?Version:\s*(\d+\.\d)|(?i:\bcuda\s+(?:toolkit\s+)?(?:version\s+)?is\s+v?(\d{1,2}\.\d))\b|\bcuda[_-]v?(\d+\.\d)|CUDA used to build "
                         r"PyTorch:\s*(\d+\.\d)|\bcu(\d{3})\b|"
                         # told in words: "CUDA 12.6", "cuda12.4", "CUDA: 11.8", "CUDA toolkit 12.1", "CUDA/cuDNN
                         # version: 10.2.89" (a release of the 9 to 13 lines; not "CUDA 1.2 GB" or a compute capability)
                         r"(?i:(?<![\w/-])cuda(?:[ -]?toolkit|[/ ]cudnn)?(?: version)?\s*[:=]?\s*v?((?:9|1[0-3])\.\d)(?:\.\d+)*\b"
                         r"(?!\s*(?:GB|MB|GiB|%)))", line):
        groups = [g for g in m.groups() if g]
        raw = groups[0]
        yield "cuda", raw if "." in raw else f"{raw[:-1]}.{raw[-1]}", ""


@finder
def _torch(line: str):
    m = re.search(r"\btorch(?:[-= ]+|\sversion\s*[=:]\s*|\.__version__\W+)(\d+\.\d+\.\d+(?:\.dev\d+|a0|rc\d)?"
                  r"(?:\+[\w.]+)?)|PyTorch version:\s*(\d+\.\d+\.\d+\S*)|(?i:\bpytorch:\s*version:\s*)(\d+\.\d+\.\d+(?:\+[\w.]+)?)|(?<![-=\w.])(\d\.\d{1,2}\.\d+\+(?:rocm\d[\w.]*|cu\d{2,3}\b|cpu\b))",
                  line)
    if not m:   # "PyTorch 2.8.0 + cu129", "pytorch 2.7.1 cu126": the build said beside the version
        m = re.search(r"(?i)\bPyTorch:?\s+v?(\d+\.\d+\.\d+)\s*\+?\s*(cu\d{3}|rocm[\d.]+|cpu)\b", line)
        if m:
            version = f"{m.group(1)}+{m.group(2).lower()}"
            m = None
            label = version.split("+", 1)[1]
            build = "rocm" if label.startswith("rocm") else "cuda" if label.startswith("cu") else "cpu"
            yield "torch", version, build
    if m:
        # (a wheel index's page names the torch too: "torch-1.4.0+cu101.html", not a local label "cu101.html.")
        version = re.sub(r"(?i)(?:\.html?|\.whl)?\.*$", "", next(g for g in m.groups() if g))
        label = version.split("+", 1)[1] if "+" in version else ""
        build = "rocm" if label.startswith("rocm") else "cuda" if label.startswith("cu") else "cpu" if label == "cpu" \
            else "pypi"
        yield "torch", version, build
    if re.search(r"torch\.version\.hip\W+None|\bHIP runtime version: N/A|ROCM used to build PyTorch: N/A", line):
        yield "torch", "not-rocm", "no-hip"
    # a conda list row: pytorch's build string says the variant ("py3.7_cpu_0", "py3.10_cuda12.1_cudnn8.9.2_0"), and
    # the _pytorch_select metapackage ("0.1  cpu_0") picks the CPU one (conda's defaults channel)
    row = re.match(r"\s*(pytorch|pytorch-cpu|_pytorch_select)\s+(\d[\w.]*)\s+(\S+)", line)
    if row:
        variant = row.group(3).lower()
        cuda = re.search(r"cuda(\d+)\.(\d)", variant)
        if "cpu" in variant or row.group(1) == "pytorch-cpu":
            yield "torch", ("cpu-variant" if row.group(1) == "_pytorch_select" else f"{row.group(2)}+cpu"), "cpu"
        elif cuda and row.group(1) == "pytorch":
            yield "torch", f"{row.group(2)}+cu{cuda.group(1)}{cuda.group(2)}", "cuda"


# llama.cpp's build options it renamed (LLAMA_* -> GGML_* in mid 2024, HIPBLAS/CUBLAS -> HIP/CUDA): a build given the
# old name silently ignores it and builds for the CPU (llama.cpp's CMakeLists and its docs/build.md)
# ggml's backend options under their retired names (llama.cpp's LLAMA_* and whisper.cpp's WHISPER_* became GGML_* in
# 2024; GGML_HIPBLAS / GGML_CUBLAS became GGML_HIP / GGML_CUDA): current ggml reads none of them, silently
RETIRED_OPTIONS = {"LLAMA_HIPBLAS": "GGML_HIP", "GGML_HIPBLAS": "GGML_HIP", "LLAMA_HIP": "GGML_HIP",
                   "WHISPER_HIPBLAS": "GGML_HIP",
                   "LLAMA_CUBLAS": "GGML_CUDA", "GGML_CUBLAS": "GGML_CUDA", "LLAMA_CUDA": "GGML_CUDA",
                   "WHISPER_CUBLAS": "GGML_CUDA", "WHISPER_CUDA": "GGML_CUDA",
                   "LLAMA_VULKAN": "GGML_VULKAN", "WHISPER_VULKAN": "GGML_VULKAN", "LLAMA_METAL": "GGML_METAL",
                   "WHISPER_METAL": "GGML_METAL", "LLAMA_SYCL": "GGML_SYCL"}
# the ways a build sets a CMake option: cmake's -DNAME=, a nix derivation's (cmakeBool "NAME" ...), CMake's own
# set(NAME ON) / option(NAME ...), make's NAME=1
_OPTION_SET = re.compile(r"-D(" + "|".join(RETIRED_OPTIONS) + r")(?::BOOL)?=|\bcmake(?:Bool|Feature|OptionType)\s+"
                         r"(?:\w+\s+)?\"(" + "|".join(RETIRED_OPTIONS) + r")\"|\b(?:set|option)\s*\(\s*("
                         + "|".join(RETIRED_OPTIONS) + r")\b|(?<![-\w])(" + "|".join(RETIRED_OPTIONS) + r")=(?:1|ON|on)\b")


@finder
def _retired_option(line: str):
    for m in _OPTION_SET.finditer(line):
        name = next(g for g in m.groups() if g)
        yield "retired_option", name, RETIRED_OPTIONS[name]


@finder
def _python(line: str):
    m = re.search(r"\bPython (3\.\d{1,2})(?:\.\d+)?\b|python(3\.\d{1,2})/site-packages|\bcp3(\d{1,2})-cp3\d{1,2}|"
                  r"(?<![A-Za-z])py ?(3\.\d{1,2})(?![\d.])|Python version:\s*(3\.\d{1,2})|cpython-3(\d{1,2})|\bpy -(3\.\d{1,2})\b|"
                  r"\bpython ?(3\.\d{1,2})\b|[\\/]Python3(\d{2})[\\/]", line, re.IGNORECASE)   # Windows: ...\Python311\
    if m:
        groups = [g for g in m.groups() if g]
        value = groups[0] if groups[0].startswith("3.") else f"3.{groups[0]}"
        yield "python", value, ""
    # a 32-bit Python (Windows' Python37-32 folder, its banner's "32 bit (Intel)", a win32 wheel tag): the ML wheels
    # are published for 64-bit Pythons only
    if re.search(r"(?i)\bPython3\d{1,2}-32\b|\b32 bit \(Intel\)|\(32-bit\)|\bwin32\.whl\b|-win32\b", line):
        yield "python_bits", "32", ""
    for tag in re.findall(r"\b(win_amd64|manylinux\w*|linux_x86_64|linux_aarch64|macosx_\w+|musllinux\w*)\b", line):
        yield "wheel_tag", tag, ""
    if not re.search(r"\.whl\b|manylinux|linux_aarch64", line):   # the machine's CPU, not a wheel's tag
        if re.search(r"(?i)\baarch64\b|\barm64\b|\bJetson\b|\bGrace\b|\bGH200\b|\bDGX Spark\b|Apple M\d", line):
            yield "cpu_arch", "aarch64", ""
        elif re.search(r"(?i)\bx86_64\b|\bamd64\b", line):
            yield "cpu_arch", "x86_64", ""


_LAYOUT = (
    ("therock", r"_rocm_sdk_(?:core|libraries|devel)|\brocm-sdk\b|rocm_sdk|\brocm\[(?:libraries|devel)|TheRock|"
                r"\bdevice wheel\b|amd-torch-device|torch\[device-|"
                r"rocm\.nightlies\.amd\.com|\brocm-sdk-core\b|site-packages/_rocm"),
    ("system", r"/opt/rocm\b"),
    ("wheel-bundled", r"site-packages/torch/lib/(?:lib(?:amdhip64|rocblas|hipblaslt|MIOpen)|rocblas)"),
    ("hip-sdk-windows", r"AMD\\+ROCm\\+\d|HIP_PATH"),
)


@finder
def _layout(line: str):
    for name, pattern in _LAYOUT:
        if re.search(pattern, line):
            yield "layout", name, ""


# The tool that printed or failed: by its own log formats and paths, never by the user's prose alone.
_TOOLS = (
    # (newer releases log from discover/amd.go, runner.go, llama_server.go, native_probe*.go, vulkan.go)
    ("ollama", r"\b[oO]llama\b|source=(?:amd_linux|gpu|routes|server|amd_windows|sched|llm_server|amd|runner|"
               r"llama_server|native_probe\w*|vulkan|cuda_compat|memory)\.go|"
               r"msg=\"amdgpu (?:is not supported|too old)|\bgpu_type=gfx|msg=\"dropping ROCm device"),
    ("llama.cpp", r"\bggml_\w+|\bllama_(?:model|new_context|init|load)\w*|\bllama-(?:cli|server|bench)\b|ggml-(?:cuda|hip)|"
                  r"GGML_HIP|\bllama\.cpp\b|\bload_tensors:|\bLLAMA_HIPBLAS\b"),
    ("vllm", r"\bvllm\b|\bvLLM\b|(?<![A-Za-z0-9_])(?:vllm|VLLM|vLLM)(?=[\u3040-\u30ff\u4e00-\u9fff])|No available memory for the cache blocks|gpu_memory_utilization|\(EngineCore\w*|\(VllmWorker\w*|multiproc_worker_utils\.py|\[core\.py:\d+\]"),
    # its own start-up messages name it where the paste does not ("CUDA SETUP: ...", the Volta/Pascal int8 warning)
    ("bitsandbytes", r"bitsandbytes|libbitsandbytes_\w+|\bCUDA SETUP: |Only slow 8-bit matmul is supported"),
    ("comfyui", r"\bComfyUI\b|comfy[/\\]|\bcomfy\.\w+"),
    ("rccl-tests", r"all_reduce_perf|all_gather_perf|rccl-tests|nccl-tests"),
    ("rccl", r"\bNCCL (?:WARN|INFO|ERROR)|\bRCCL\b|librccl|\bnccl\w*Error\b|ncclUnhandled|\bProcessGroupNCCL\b"),
    ("miopen", r"\bMIOpen\b|miopen::|\bMIOPEN_"),
    ("hipblaslt", r"hipBLASLt|hipblaslt"),
    ("rocblas", r"\brocBLAS\b|\brocblas\b|TensileLibrary|\bTensile\b"),
    ("triton", r"\btriton\b(?!-rocm)|\bTriton\b"),
    ("flash-attn", r"flash_attn|flash-attn|flash_attention|FlashAttention|(?i:flash-attention)"),
    # xformers' CUTLASS attention kernels check the GPU themselves: "FATAL: kernel ... is for sm80, but was built for sm75"
    ("xformers", r"\bxformers\b|\bis for sm_?\d+[\w-]*, but was built for sm_?\d+"),
    ("deepspeed", r"\bdeepspeed\b|DeepSpeed"),
    ("tensorflow", r"\btensorflow\b|TensorFlow"),
    # (the execution providers are onnxruntime's own names: "ONNX Runtime Providers: ['CPUExecutionProvider']")
    ("onnxruntime", r"onnxruntime|(?i:\bONNX Runtime\b)|\b(?:MIGraphX|ROCM|CUDA|CPU|Tensorrt|Dml|OpenVINO|Azure)ExecutionProvider\b"),
    ("migraphx", r"\bmigraphx\b|MIGraphX"),
    ("zluda", r"\bZLUDA\b|zluda"),
    # (its bug-report template's own questions name it where the report names nothing else)
    ("a1111", r"webui\.sh|webui-user|stable-diffusion-webui|\bA1111\b|launch\.py|SD\.Next|\bsdnext\b|AUTOMATIC1111|"
              r"\bCommit where the problem happens\b|\bWhat (?:platforms|browsers) do you use to access (?:the )?UI\b"),
    ("torchaudio", r"torchaudio|_torch_sox|libtorchaudio"),
    ("torch", r"\btorch\b|\bPyTorch\b|torch\.cuda|\bc10::|libtorch"),
    # tools with their own GPU builds (doctor/arch_builds.yaml has their remedies)
    ("llama-cpp-python", r"\bllama_cpp\b|llama-cpp-python|llama_cpp_python"),
    # MLC LLM compiles each model into a library of its own (TVM): mlc_llm.build, mlc_chat, "-cuda.so"
    # (its prebuilt model folders and scripts say mlc-chat: "mlc-chat-Llama-2-13b-chat-hf-q4f16_1", sample_mlc_chat.py)
    ("mlc-llm", r"(?i)\bmlc[-_]llm\b|mlc[-_]chat\b|\bmlc-ai\b"),
    # ggml programs of their own (their logs carry ggml_* lines too: the program, not llama.cpp, is what gets rebuilt)
    ("stable-diffusion.cpp", r"stable-diffusion\.cpp|\bsd\.cpp\b|\bSD_HIPBLAS\b|\bSD_CUDA\b"),
    # frameworks with GPU backends of their own, not torch's
    ("tinygrad", r"\btinygrad\b"),
    ("paddle", r"(?i)\bpaddle(?:paddle(?:-gpu)?|ocr|nlp|detection|x)?\b"),
    ("koboldcpp", r"(?i)\bkoboldcpp"),
    ("gpt4all", r"(?i)\bgpt4all\b"),
    ("lmstudio", r"(?i)\bLM ?Studio\b|\blmstudio\b|\blms (?:load|server)\b"),
    ("sglang", r"\bsglang\b|\bsgl[-_]kernel\b|SGLang"),
    ("apex", r"\bapex\b(?!\s+legends)|\bamp_C\b|fused_layer_norm_cuda"),
    ("ctranslate2", r"(?i)ctranslate2|faster[-_]whisper|whisperx|CUDA failed with error"),
    ("whisper.cpp", r"whisper\.cpp|\bwhisper_(?:init|model_load|full|backend_init)\w*|whisper-cli"),
    ("torchvision", r"\btorchvision\b"),
    ("mamba-ssm", r"\bmamba_ssm\b|\bmamba-ssm\b|selective_scan_cuda|\bcausal_conv1d"),
    # gsplat's rasterizer, and nerfstudio's method built on it (splatfacto): kernels built at install, wheels per torch
    # (ASCII edges: a Chinese sentence glues its words to the name)
    ("gsplat", r"(?<![A-Za-z0-9_])(?:gsplat|splatfacto)(?![A-Za-z0-9_])"),
    ("torch-extension", r"torch_extensions[/\\]|\bload_inline\b|cpp_extension\.load\b"),
    ("rocminfo", r"\brocminfo\b|ROCk module"),
    ("rocm-smi", r"\brocm-smi\b|ROCm System Management Interface"),
    ("amd-smi", r"\bamd-smi\b"),
    ("jax", r"\bjax\b|\bjaxlib\b"),
    ("unsloth", r"\bunsloth\b|Unsloth"),
    ("llamafactory", r"llamafactory|LLaMA-Factory|llamafactory-cli"),
    ("text-embeddings-inference", r"text-embeddings-inference|text-embeddings-router|compile time compute cap"),
)


@finder
def _tool(line: str):
    for name, pattern in _TOOLS:
        if re.search(pattern, line):
            yield "tool", name, ""


@finder
def _root_only(line: str):
    """'works with sudo / as root, not as my user' in any phrasing the prose takes."""
    if re.search(r"(?:only|unless|except)\s+(?:as|with|when|run as|running as)?\s*(?:root|sudo|superuser)|"
                 r"work(?:s|ing|ed)? (?:fine |correctly )?(?:with|as|under) (?:sudo|root)|(?:with|as) (?:sudo|root)[^.]{0,40}works?|"
                 r"\b(?:sudo|root) works\b|\bonly (?:as|for) (?:a |the |my )?(?:normal|regular|non-root|unprivileged) user\b|"
                 # "only sees my card when I run it as root"
                 r"\bonly (?:sees?|works?|detects?|finds?|uses?|recogni[sz]es?|shows?|lists?)\b.{0,50}\bwhen (?:i |you |we )?"
                 r"(?:run|start|launch)\w* (?:it |this |them |the \w+ )?(?:as|with|under) (?:root|sudo)\b|"
                 # Chinese: "only root can", "with sudo it works", "fine under root"
                 r"只有\s*(?:root|sudo)|(?:用|加(?:上)?|使用)\s*sudo\s*(?:运行)?\s*(?:就|才)?\s*(?:可以|能|行|正常)|"
                 r"root\s*(?:用户)?\s*(?:下|运行)?\s*(?:就|才)\s*(?:可以|能|行|正常)",
                 line, re.IGNORECASE):
        yield "root_only", "yes", ""


@finder
def _complaint(line: str):
    """The user saying it does not work, in prose ("cannot get X running", "not using the GPU"): a symptom without
    an error line, which a rule may still explain from the other facts. Slowness is its own value: the rules that
    explain a slow run (MIOpen's kernel search, a transport without P2P) read it, the ones for a failure do not."""
    if re.search(r"(?i)\b(?:takes? (?:forever|ages|minutes|hours)|(?:very|extremely|super|really|painfully) slow|"
                 r"slow(?:er)? than|slow first|first (?:run|step|image|generation) (?:is |takes )?(?:very )?slow|"
                 r"(?:uselessly|unusably|unbearably|incredibly|ridiculously) slow)", line):
        yield "complaint", "slow", ""
    line = re.sub(r"[’´`]", "'", line)   # doesn´t, doesn’t
    # "RX 6700 XT crashes with rocm", not a warning that something "may crash"
    if re.search(r"(?i)(?<!may )(?<!might )(?<!could )(?<!can )(?<!will )(?<!to )\b(?:seg ?fault(?:s|ed|ing)?|crash(?:es|ed|ing)?)\b"
                 r"|崩溃|闪退|段错误", line):
        yield "complaint", "yes", "crash"
        return
    if re.search(r"(?i)\b(?:cannot|can't|can not|unable to) (?:get|make|run|use|install|load)\b|\b(?:doesn't|does not|"
                 r"won't|will not|isn't|is not|not) (?:work|working|run|running|use|using|detect|detected|detecting|"
                 r"recogni[sz]ed?|recogni[sz]ing|detecting)\b|\bno longer (?:works?|uses?|detects?|recogni[sz]es?|"
                 r"supports?|runs?|sees?)\b|\bfalls? back to (?:the )?CPU\b|\bonly (?:uses?|using) (?:the )?CPU\b|\bonly (?:the )?CPU\b|"
                 r"\bno GPU (?:agent|found|detected|device)s?\b|"
                 # "workers missing GPUs", "GPU usage is near 0%", "executed pretty much entirely on CPU"
                 r"\bmissing (?:the |its |their |all |any )?GPUs?\b|\bGPU (?:usage|utili[sz]ation|util|load) (?:is |stays |"
                 r"remains |at )?(?:near |nearly |about |almost |only |just )?0 ?%|\b(?:executed|executing|running|runs?|"
                 r"ran) (?:\w+ ){0,3}(?:entirely|completely|only|all|mostly) on (?:the )?CPU\b|"
                 # terse English ("gfx1035 don't work", "the gpu no use", "cpu is very high but the gpu ...")
                 r"\b(?:don't|do not) work\b|\bGPU (?:is )?(?:no|not) (?:use|used|in use)\b|"
                 r"\bCPU (?:usage )?is (?:very |so )?high\b.{0,30}\bGPU\b|"
                 r"\bis (?:it|this) (?:just )?not supported\b|\b(?:add|adding|request\w*|needs?|plans? (?:to|for)) "
                 r"support (?:for|of)\b|\bwhen (?:will|is|does) .{0,60}\bsupport|\bsupport (?:for|of) .{0,60}\bwill "
                 r"come\b|\bdoes(?:n't| not) support\b|^\W*(?:\[\w+\]:?\s*)?support (?:for|of)\b.{0,40}"
                 r"(?:\bRX ?\d|Radeon|gfx\d|Navi|Instinct|GeForce|RTX|GTX)|\bhow (?:to|can I|do I) (?:run|use|get)\b.{0,60}\b(?:GPU|RX|Radeon)", line):
        yield "complaint", "yes", ""
    elif _CJK_COMPLAINT.search(line):
        yield "complaint", "yes", ""


# The same complaints in Chinese: "can't use / doesn't run / not recognised / only the CPU / doesn't use the card"
_CJK_COMPLAINT = re.compile(r"(?i)无法(?:使用|运行|启动|识别|检测|调用)|用不了|跑不(?:起来|动|了)|不能(?:用|运行|使用|识别)|"
                            r"不(?:工作|识别|支持)|(?:识别|检测|找)不到|(?:只|仅|一直|还是|全)(?:用|使用|走|跑在?)\s*CPU|"
                            r"不(?:用|使用|调用)(?:显卡|GPU)|没有?(?:用|使用|调用)(?:到)?(?:显卡|GPU)|(?:显卡|GPU)\s*(?:没|不)(?:反应|工作|被使用)")


@finder
def _needs_group(line: str):
    """A message or the prose saying which group opens the GPU ("Users must be a member of the "render" group",
    "restrict /dev/kfd to members of the 'render' group", "/dev/kfd owned by root:render")."""
    m = re.search(r"(?i)\bmembers? of (?:the )?[\"'`]?(render|video)[\"'`]? group|/dev/(?:kfd|kdf|dri\S*)\b.{0,60}?\broot:(render|video)\b|"
                  # the user saying they are not in it: "my user is not in the render group", "不在 render 组"
                  r"\bnot (?:a )?(?:in|member of|part of) (?:the )?[\"'`]?(render|video)[\"'`]? group|不在\s*(render|video)\s*(?:用户)?组|"
                  # a tool's own group check (amd-smi: "User is missing the following required groups: render, video")
                  r"\bmissing (?:the following )?(?:required )?groups?\W{1,3}(render|video)\b",
                  line)
    if m:
        yield "needs_group", next(g for g in m.groups() if g).lower(), ""


@finder
def _docker_desktop(line: str):
    """Docker Desktop (on Linux too) runs containers inside its own VM: the host's /dev/kfd and /dev/dri are not there."""
    if re.search(r"(?i)\bDocker Desktop\b", line):
        yield "platform", "docker-desktop", ""


@finder
def _igpu(line: str):
    """The text says the machine has an integrated GPU ("my iGPU is cuda:0", "integrated graphics")."""
    if re.search(r"(?i)\biGPU\b|\bintegrated (?:GPU|graphics)\b|核显|集显|核芯显卡|集成显卡", line):
        if re.search(r"(?i)(?:only|just) (?:an? |the )?(?:iGPU|integrated)|(?:iGPU|integrated (?:GPU|graphics)) only|"
                     r"no (?:discrete|dedicated|separate) (?:GPU|card|graphics)", line):
            yield "igpu", "yes", "only"   # the machine's one GPU: nothing else to pick
        else:
            yield "igpu", "yes", "cuda0" if re.search(r"(?i)(?:cuda|device|hip):? ?0\b|device 0|first device", line) else ""


_NODE = re.compile(r"^\s*(?:\S+\s+)?c([rwx-]{9})\S*\s+\d+\s+(\S+)\s+(\S+)\s+\d+,\s*\d+.*?(/dev/\S+|renderD\d+|\bkfd)\s*$")


@finder
def _device_node(line: str):
    """`ls -l /dev/kfd /dev/dri/renderD*`: the node, its group and mode (value: node, detail: "group mode")."""
    m = _NODE.match(line)
    if m:
        node = m.group(4).split("/")[-1]
        yield "device_node", node, f"{m.group(3)} {m.group(1)}"


@finder
def _nccl_iface(line: str):
    """The socket interfaces NCCL/RCCL lists ("NET/Socket : Using [0]bond0:10.0.0.1<0> [1]br-..."), one per line or
    all on one; and interfaces named in prose ("the interface named enp6s0")."""
    for m in re.finditer(r"\[\d+\]\s?([A-Za-z][\w.-]*?):(?:[0-9a-f.:%]+)<\d+>", line):
        yield "nccl_iface", m.group(1), "listed"
    for m in re.finditer(r"(?i)interface (?:named |called )?\b((?:en|eth|ib|bond|eno|ens|enp)[\w.-]*)", line):
        yield "nccl_iface", m.group(1), "named"


@finder
def _memory_total(line: str):
    """amd-smi's memory usage rows: "VRAM : usage 28108 MiB, total 98304 MiB" (value: MiB, detail: the pool)."""
    m = re.search(r"\b(VRAM|GTT|VIS_VRAM)\s*:\s*usage\s+\d+\s*MiB,\s*total\s+(\d+)\s*MiB", line)
    if m:
        yield "memory_total", m.group(2), m.group(1)
    m = re.search(r"amdgpu: (\d+)M of (VRAM|GTT) memory ready", line)
    if m:
        yield "memory_total", m.group(1), m.group(2)


_SENSOR_READING = r"\b\d+(?:\.\d+)?\s?°?C\b|\b\d+(?:\.\d+)?\s?W\b|\b\d+\s?Mhz\b"   # a temperature, a power, a clock


@finder
def _sensors(line: str):
    """A row of an smi table whose sensors all read N/A: the driver does not answer for that GPU, so the table
    proves nothing about its health. Rows that read numbers are counted too, to tell "all" from "some"."""
    cells = line.split()
    if len(cells) < 6 or not cells[0].isdigit() or not re.search(r"0x[0-9a-f]{4}|N/A|\d+(?:\.\d+)?c\b|W\b|Mhz|%",
                                                                   line, re.IGNORECASE):
        return
    na = sum(c.rstrip(",") in ("N/A", "None", "unknown", "Unknown") for c in cells)
    reading = re.search(_SENSOR_READING, line, re.IGNORECASE)
    if na >= 4 and not reading:
        yield "sensors", "unreadable", f"GPU {cells[0]}"
    elif reading:
        yield "sensors", "read", f"GPU {cells[0]}"


# ---------------------------------------------------------------------------------------------------------
# Reading a text
# ---------------------------------------------------------------------------------------------------------

# What a log puts before each line: the systemd journal's date, host and process, an ISO timestamp (docker logs -t, CI
# logs), a compose service's column, torchrun's rank, kubectl's pod. The line after it is what the tool printed, and
# the readers that anchor at a line's start (a prompt, an `ls -l` row, a traceback's last line) must see that.
_JOURNAL = re.compile(r"^\s*[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ ([\w.\-/@]+)(?:\[\d+\])?: ")
_LOG_PREFIX = re.compile(
    r"^\s*(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"   # ISO timestamp
    r"|\[(?:rank|default)\d+\]:\s?"                                                      # torchrun
    r"|\[pod/[\w.\-]+/[\w.\-]+\]\s"                                                     # kubectl logs --prefix
    r"|[\w][\w.\-]*-\d+\s+\|\s|[a-z][\w.\-]*\s{2,}\|\s)")                                # docker compose service
 

def strip_log_prefix(line: str) -> str:
    """The line as the tool printed it, without a log's prefix (repeated: a journal line may carry a timestamp too)."""
    for _ in range(2):
        m = _JOURNAL.match(line) or _LOG_PREFIX.match(line)
        if not m or m.end() >= len(line):
            break
        line = line[m.end():]
    return line


def _clean(line: str) -> str:
    """A line without the decorations of where it was pasted: a markdown quote, a log's prefix."""
    line = re.sub(r"^\s*>\s?", "", line)
    return strip_log_prefix(line).rstrip()


def extract_facts(text: str, error_lines: Optional[Callable[[list[str]], list[Fact]]] = None) -> FactSheet:
    """Every fact of `text`, line by line; the error lines are found by `error_lines` (error_lines.find_errors), kept
    apart so this module holds no list of messages."""
    raw = text.splitlines()
    lines = [_clean(l) for l in raw]
    sheet = FactSheet(lines=lines)
    seen: set[tuple[str, str, str]] = set()
    for number, line in enumerate(raw, 1):   # a process's lines in the journal: it runs as a service
        journal = _JOURNAL.match(re.sub(r"^\s*>\s?", "", line))
        if journal and journal.group(1) not in ("kernel", "sudo", "su", "systemd-logind") and \
                not any(f.kind == "platform" and f.value == "systemd" for f in sheet.facts):
            sheet.facts.append(Fact("platform", "systemd", number, line.strip(), "journal"))
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.strip().startswith("```"):
            continue
        for find in _FINDERS:
            for kind, value, detail in find(line):
                key = (kind, value, detail)
                if kind in ("env", "error") or key not in seen:
                    seen.add(key)
                    sheet.facts.append(Fact(kind, value, number, line.strip(), detail))
    _listed_env(sheet)
    _bare_number_beside_intel(sheet)
    _gpu_archs(sheet)
    _user_groups(sheet)
    _root_only_answers(sheet)
    _rocm_build_said(sheet)
    if error_lines is not None:
        sheet.facts += error_lines(lines)
        sheet.facts.sort(key=lambda f: f.line_no)
    return sheet


def _listed_env(sheet: FactSheet) -> None:
    """A variable set as a name / value pair over two lines (a Kubernetes pod spec's env list, a Helm values file):
    "- name: HSA_OVERRIDE_GFX_VERSION" then "value: \"10.3.0\"". Read with its neighbour, which a line finder cannot."""
    for number, line in enumerate(sheet.lines[:-1], 1):
        name = re.match(r"\s*-?\s*name:\s*[\"']?(%s)[\"']?\s*$" % _ENV_NAMES, line)
        value = name and re.match(r"\s*value:\s*[\"']?([^\"'\s]*)[\"']?\s*$", sheet.lines[number])
        if value:
            sheet.facts.append(Fact("env", f"{name.group(1)}={value.group(1)}", number + 1,
                                    sheet.lines[number].strip(), "listed"))


# an Intel CPU named by its model ("i7-4710", "Core i5 8300H", "Intel(R) Core(TM)"), and any word of AMD's
_INTEL_CPU = re.compile(r"(?i)\bi[3579][- ]\d{4,5}[A-Z]{0,2}\b|\bIntel(?:\(R\))? Core\b|\bCore(?:\(TM\))? i[3579]\b")
_AMD_WORD = re.compile(r"(?i)\bAMD\b|Radeon|Ryzen|\bROCm\b|\bHIP\b|\bgfx\d|\bAPU\b")


def _bare_number_beside_intel(sheet: FactSheet) -> None:
    """A bare "860m" / "780M" is a Radeon iGPU's number and also a GeForce mobile card's of 2012-2014 (GeForce GT
    640M, GTX 780M, GTX 860M: NVIDIA's 600M-800M series). Radeon iGPUs come only inside Ryzen CPUs, so where the paste
    names an Intel CPU and no word of AMD's, the number is the GeForce: it says no AMD arch."""
    text = "\n".join(sheet.lines)
    if not _INTEL_CPU.search(text) or _AMD_WORD.search(text):
        return
    sheet.facts = [Fact("gpu", f"GeForce {f.value.removeprefix('Radeon ')}", f.line_no, f.line, "")
                   if f.kind == "gpu" and f.value.startswith("Radeon ") and _bare_igpu(f.line) else f
                   for f in sheet.facts]


def _gpu_archs(sheet: FactSheet) -> None:
    """A GPU named by model or PCI id says its arch; that arch is a machine fact too, unless a gfx string already
    said it (a tool's own word beats a name's table row)."""
    named = {f.value for f in sheet.of("arch")}
    extra = []
    for fact in sheet.facts:
        if fact.kind in ("gpu", "pci_id") and fact.detail and fact.detail not in named:
            named.add(fact.detail)
            extra.append(Fact("arch", fact.detail, fact.line_no, fact.line, f"from the {fact.kind.replace('_', ' ')}"))
    sheet.facts += extra
    sheet.facts.sort(key=lambda f: f.line_no)


def _rocm_build_said(sheet: FactSheet) -> None:
    """collect_env's "ROCM used to build PyTorch: 7.0..." settles the build: its "HIP runtime version: N/A" beside it
    (printed for a ROCm torch whose HIP runtime found nothing, or a source build) does not make it a non-ROCm torch."""
    if any(re.search(r"\bROCM used to build PyTorch:\s*\d", line) for line in sheet.lines):
        sheet.facts = [f for f in sheet.facts if not (f.detail == "no-hip" and "HIP runtime version" in f.line)]


def _user_groups(sheet: FactSheet) -> None:
    """The groups the user is in: `id` prints them as groups=1000(me),44(video); `groups` (or `groups me`) prints
    them bare on the next line. Value: the names, comma-separated."""
    found = []
    for number, line in enumerate(sheet.lines, 1):
        m = re.search(r"\buid=\d+\(\S+?\)\s+gid=\d+\(\S+?\)\s+groups=(\S+)", line)
        if m:
            found.append(Fact("user_groups", ",".join(re.findall(r"\(([^)]+)\)", m.group(1))), number, line.strip()))
        elif re.search(r"(?:^|[$#>]\s*)groups(?:\s+\w+)?\s*$", line) and number < len(sheet.lines):
            answer = sheet.lines[number].strip()
            names = answer.split(":", 1)[1].split() if ":" in answer else answer.split()
            if names and all(re.fullmatch(r"[a-z_][\w-]*\$?", n) for n in names):
                found.append(Fact("user_groups", ",".join(names), number + 1, answer))
    sheet.facts += found
    sheet.facts.sort(key=lambda f: f.line_no)


def _root_only_answers(sheet: FactSheet) -> None:
    """The same check run twice, once under sudo: torch sees the GPU as root and not as the user (a `sudo python -c
    "...is_available()"` answered True beside a plain one answered False)."""
    asked = re.compile(r"(?:cuda|xpu)\.is_available\(\)|device_count\(\)|\brocminfo\b|\bclinfo\b")
    said = {True: None, False: None}
    for number, line in enumerate(sheet.lines[:-1], 1):
        if not asked.search(line):
            continue
        answer = sheet.lines[number].strip().strip("`")
        works = answer == "True" or bool(re.fullmatch(r"[1-9]\d*", answer)) or "Agent 2" in answer
        fails = answer in ("False", "0") or "Permission denied" in answer
        root = bool(re.search(r"(?:^|[\s$#>])sudo\s", line))
        if root and works:
            said[True] = (number, line)
        elif not root and fails:
            said[False] = (number, line)
    if said[True] and said[False]:
        number, line = said[True]
        sheet.facts.append(Fact("root_only", "yes", number, line.strip(), "answers"))
        sheet.facts.sort(key=lambda f: f.line_no)


def discrete_archs(sheet: FactSheet) -> list[str]:
    """The machine's archs with integrated GPUs last (an APU listed beside a card is rarely the one that failed)."""
    archs = sheet.machine_archs
    def integrated(arch: str) -> bool:
        row = arch_info(arch)
        return bool(row and row.kind == "apu")
    return sorted(archs, key=integrated)


def _only_amd_apus_beside(sheet: FactSheet, archs: list[str]) -> bool:
    """Every AMD arch of the machine is an APU's integrated GPU, and nothing names ROCm or a ROCm torch."""
    amd = [a for a in archs if a.startswith("gfx")]
    if not amd or sheet.has("rocm") or any(f.detail == "rocm" for f in sheet.of("torch")):
        return False
    return all((arch_info(a) is not None and arch_info(a).kind == "apu") for a in amd)


def vendor_of(sheet: FactSheet) -> Optional[str]:
    """'amd' or 'nvidia' where the text says which, else None."""
    archs = sheet.machine_archs
    if any(a.startswith("sm_") for a in archs) and _only_amd_apus_beside(sheet, archs):
        # an NVIDIA card in a laptop or desktop whose Ryzen CPU has an integrated Radeon ("RTX 3050 Laptop, AMD Ryzen
        # 5 5625U"): the card is the GPU the paste is about, unless ROCm itself is named (round 18, r18c)
        return "nvidia"
    if any(a.startswith("gfx") for a in archs) or sheet.has("rocm") or sheet.has("torch", None) and \
            any(f.detail == "rocm" for f in sheet.of("torch")):
        return "amd"
    if any(a.startswith("sm_") for a in archs) or any(f.detail == "nvidia" for f in sheet.of("driver")):
        return "nvidia"
    if any(f.value.startswith("10de:") for f in sheet.of("pci_id")):
        return "nvidia"
    if any(f.value.startswith("1002:") for f in sheet.of("pci_id")):
        return "amd"
    return None
