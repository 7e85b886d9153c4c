"""What every rule shares: the diagnosis a rule returns, the context it reads (the facts and the classed error
lines), the registry, and the helpers that restate a catalogue entry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.facts import Fact, FactSheet, discrete_archs, vendor_of
from steadytune.doctor.fixes import cuda_wheel_for, failing_tool
from steadytune.hardware.gpu_facts import normalise_gfx


OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"
_CRASH = re.compile(r"(?i)segmentation fault|Speicherzugriffsfehler|Erreur de segmentation|Violaci[oó]n de segmento|Errore di segmentazione|段错误|核心已转储|セグメンテーション違反|Ошибка сегментирования|\bseg ?faults?(?:ed|s|ing)?\b|core dumped|0xc0000005|3221225477|access violation|\bsigsegv\b|\baborted\b|\bsigabrt\b|exit (?:status|code) "
                    r"(?:134|139|-11|-6)\b|returned non-zero exit status -?(?:11|6)\b|Floating point exception")
_NO_GPU_USE = re.compile(r"(?i)no compatible (?:amd)?gpus? (?:were )?(?:discovered|detected|found)|"
                         r"library=cpu|running on (?:the )?cpu|100% CPU|inference compute.*library=cpu|"
                         r"offloaded 0/\d+ layers|No HIP GPUs are available|No CUDA GPUs are available|"
                         r"hipErrorNoDevice|no ROCm-capable device")


# A GPU not detected, in the user's words (English and Chinese): "can not detect GPU", "only shows the CPU", 检测不到
NOT_DETECTED = (r"(?i)(?:can ?not|can't|cannot|doesn't|does not|don't|do not|won't|unable to|fails? to|not) (?:detect|see|"
                r"find|list|show|recogni[sz]e)s?\b.{0,30}\bGPU|\bonly (?:detects? |shows? |lists? |sees? |finds? )?(?:the )?CPU\b|"
                r"\bGPU (?:is )?not (?:detected|found|listed)|no GPU (?:agent|found)|检测不到|识别不到|找不到.{0,6}(?:GPU|显卡)|"
                # "sees only the CPU", "can't see my 9070XT" in Chinese: 只看到 CPU, 看不到我的显卡
                r"只(?:看到|显示|识别到?|检测到|列出)了?\s*(?:CPU|处理器)|(?:里|中)?没有\s*(?:GPU|显卡)\s*(?:agent|设备)|(?:里|中)没有\s*(?:GPU|显卡)|"
                r"没有?(?:检测到|识别到|找到)\s*(?:GPU|显卡)|(?:看不到|认不到|认不出).{0,8}(?:GPU|显卡|卡|RX|Radeon|\d{4})")


# Windows said in words ("Windows 11", "win10", "w11"), for pastes whose facts show no Windows path or tool output
WINDOWS_WORD = re.compile(r"(?i)\bw(?:in(?:dows?)?)?\s*1[01]\b|\bwindows\b")


def on_windows(ctx: "Context", text: str) -> bool:
    """The paste is from Windows: its facts say so, or its words do."""
    return ctx.sheet.is_windows or bool(WINDOWS_WORD.search(text))


@dataclass
class Diagnosis:
    family: str
    title: str
    cause: str
    fix: str
    evidence: list[Fact] = field(default_factory=list)
    covers: list[int] = field(default_factory=list)     # the error line numbers it explains
    severity: str = "error"
    confirmed: bool = True                              # the facts establish it; False: the likely reading of a symptom
    rank: int = 50
    entry: Optional[str] = None                         # the catalogue entry it restates, where it adds nothing to it


@dataclass
class Context:
    sheet: FactSheet
    errors: list[ErrorLine]

    def of(self, *families: str) -> list[ErrorLine]:
        # a line whose catalogue entry answers it by itself (`answer: own`: a message that settles its cause, such as
        # the CUDA stack's own wordings) is left to that entry's cause and fix, not to the family's general rules
        return [e for e in self.errors if e.family in families and not (e.catalogue and e.catalogue.entry.own)]

    def crashes(self) -> list[ErrorLine]:
        return [e for e in self.errors if _CRASH.search(e.line)]

    def no_gpu(self) -> list[ErrorLine]:
        return [e for e in self.errors if _NO_GPU_USE.search(e.line)]

    def line_fact(self, error: ErrorLine) -> Fact:
        return Fact("error", error.family or "unknown", error.line_no, error.line)

    def tool(self, errors: list[ErrorLine] = ()) -> Optional[str]:
        return failing_tool(self.sheet, tuple(e.line_no for e in errors))

    def override(self) -> Optional[Fact]:
        """The override in force: the last one set, where a server's own view (Ollama's config line) wins."""
        found = [f for f in self.sheet.of("env") if f.value.split("=", 1)[0] == OVERRIDE]
        server = [f for f in found if f.detail == "server"]
        chosen = (server or found)
        return chosen[-1] if chosen and chosen[-1].value.split("=", 1)[1] else None

    def arch(self, errors: list[ErrorLine] = ()) -> tuple[Optional[str], Optional[Fact]]:
        """The GPU the error is about: a gfx / sm string on (or right beside) the error lines, else the machine's
        first discrete GPU, else its only GPU."""
        numbers = {e.line_no for e in errors}
        near = [f for f in self.sheet.of("arch") if any(abs(f.line_no - n) <= 1 for n in numbers)]
        for fact in near + self.sheet.of("arch"):
            if fact.detail == "machine":
                return normalise_gfx(fact.value), fact
        archs = discrete_archs(self.sheet)
        if archs:
            fact = next(f for f in self.sheet.of("arch") if f.value == archs[0])
            return archs[0], fact
        return None, None


Rule = Callable[[Context], Optional[Diagnosis]]
RULES: list[tuple[str, Rule]] = []


def rule(name: str) -> Callable[[Rule], Rule]:
    def register(function: Rule) -> Rule:
        RULES.append((name, function))
        return function
    return register


# programs that reach the GPU through runtimes of their own (ggml's backends, CTranslate2, JAX's and TensorFlow's
# builds, NCCL's tests, a container's), never through torch: no torch build is part of their fix
NOT_TORCH = ("ollama", "llama.cpp", "llama-cpp-python", "koboldcpp", "lmstudio", "whisper.cpp", "gpt4all", "mlc-llm",
             "stable-diffusion.cpp", "tinygrad", "paddle", "ctranslate2", "tensorflow", "jax", "onnxruntime", "nccl", "nccl-tests", "docker")


def _make(name: str, title: str, cause: str, fix: str, evidence: list[Fact], covers: list[ErrorLine],
          confirmed: bool = True, severity: str = "error") -> Diagnosis:
    # a rule may pass the error lines it read as its evidence: they are quoted as facts of kind "error"
    facts = [f if isinstance(f, Fact) else Fact("error", f.family or "unknown", f.line_no, f.line)
             for f in evidence if f is not None]
    return Diagnosis(name, title, cause, fix, facts, sorted({e.line_no for e in covers}), severity, confirmed,
                     family(name).rank)


def _catalogue(errors: list[ErrorLine]) -> Optional[ErrorLine]:
    return next((e for e in errors if e.catalogue is not None), None)


def _restate(name: str, hit: ErrorLine, covers: list[ErrorLine]) -> Diagnosis:
    """The catalogue entry that matched, as a diagnosis (its cause and fix are already made for the machine)."""
    m = hit.catalogue
    # (a generic symptom, `answer: symptom`, is where the next step starts: never a settled cause)
    diagnosis = _make(name, m.entry.title, m.cause, m.fix, [Fact("error", name, hit.line_no, hit.line)], covers,
                      severity=m.entry.severity, confirmed=not m.entry.symptom)
    diagnosis.entry = m.entry.id
    return diagnosis


def _first(diagnosis: Diagnosis) -> Diagnosis:
    """A diagnosis that rules out the others' causes (the stack works as root; the message names the fix): it leads."""
    diagnosis.rank = 0
    return diagnosis


def _ahead_of(diagnosis: Diagnosis, other: str) -> Diagnosis:
    """A diagnosis that explains the errors family `other` would read (its cause comes first): it ranks just ahead of
    that family, and behind anything that already leads."""
    diagnosis.rank = family(other).rank - 1
    return diagnosis


def _release_numbers(text: str) -> tuple[int, ...]:
    """A release as numbers to compare ("2.4.1" -> (2, 4, 1), "v0.12.5-rocm" -> (0, 12, 5)): its first three numbers."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _text(ctx: Context) -> str:
    return "\n".join(ctx.sheet.lines)


def _lines_matching(ctx: Context, pattern: "str | re.Pattern[str]") -> list[ErrorLine]:
    """The paste's lines that say `pattern`, as lines a diagnosis can cover (a prose complaint, a listing). A compiled
    pattern is used as it is (a string goes through re's cache of compiled patterns, which the rules' many patterns
    can overflow)."""
    found = re.compile(pattern)
    return [ErrorLine(n, line.strip(), None) for n, line in enumerate(ctx.sheet.lines, 1) if found.search(line)]


# a process that runs in a container, a toolbox or a batch job: its devices and groups are the runtime's, not the host's
_CONTAINED = re.compile(r"(?i)\b(?:docker|podman|distrobox|toolbox|containers?|apptainer|singularity|kubernetes|pod)\b")


def _from_catalogue(name: str) -> Rule:
    """A family with no rule of its own: the catalogue entry that matched gives the cause and fix (already made
    specific by its context reader)."""
    def read(ctx: Context) -> Optional[Diagnosis]:
        errors = ctx.of(name)
        hit = _catalogue(errors)
        return _restate(name, hit, errors) if hit is not None else None
    return read


_APU_ARCHS = ("gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1035", "gfx1036", "gfx90c", "gfx1033")


_NVIDIA_DRIVER = re.compile(r"(?i)NVIDIA|CUDA driver|couldn't communicate")


def _nvidia_gpu(ctx: Context) -> bool:
    """An NVIDIA GPU is named in the paste (beside an AMD APU, say): its driver's errors are its own."""
    return any(a.startswith("sm_") for a in ctx.sheet.machine_archs)


def _vendor(ctx: Context) -> Optional[str]:
    """The GPU vendor the text is about: from its facts, else from the words AMD / Radeon / ROCm in it."""
    return vendor_of(ctx.sheet) or ("amd" if re.search(r"\bAMD\b|Radeon|ROCm|\bHIP\b", "\n".join(ctx.sheet.lines))
                                    else None)


def _cuda_index_for_driver(ctx: Context, arch: Optional[str]) -> str:
    """The CUDA wheel index the installed driver can run (nvidia-smi's "CUDA Version" is the newest it supports; driver
    610's nvidia-smi prints it as "CUDA UMD Version"), and that carries the GPU's compute capability; where no driver
    is shown, the CUDA release the user names ("CUDA 12.6", "cuda cudnn: 11.8") when pytorch.org has an index of
    that very release (round 18, r18c)."""
    driver = [f for f in ctx.sheet.of("cuda") if re.search(r"CUDA (?:UMD )?Version:", f.line)]
    cc = int(arch[3:]) if arch and re.fullmatch(r"sm_\d+", arch) else None
    if driver:
        major, minor = (int(x) for x in driver[-1].value.split(".")[:2])
        if major >= 13 and (cc is None or cc >= 75):
            # pytorch.org's CUDA 13.0 builds (torch 2.9 and newer) start at sm_75 (fixes.cuda_wheel_for)
            return (f"pip install torch --index-url https://download.pytorch.org/whl/cu130 (the driver runs CUDA "
                    f"{driver[-1].value}; cu130 wheels exist from torch 2.9)")
    if cc is not None and cc >= 100:   # Blackwell: CUDA 12.8 whatever else
        return cuda_wheel_for(arch) or ""
    if driver:
        label = "cu118" if major < 12 else "cu128" if (major, minor) >= (12, 8) else "cu126"
        return (f"pip install torch --index-url https://download.pytorch.org/whl/{label} (the driver runs CUDA "
                f"{driver[-1].value} at most)")
    said = _said_cuda_label(ctx)
    if said and (cc is None or cc >= 50) and not (cc is not None and cc <= 70 and said[0] in ("cu128", "cu129", "cu130")):
        # (Maxwell, Pascal and Volta are left out of the cu128 and newer builds: cuda_wheel_for's cu126 for them)
        label, release = said
        return (f"pip install torch --index-url https://download.pytorch.org/whl/{label} (the CUDA {release} this "
                "machine has)")
    return (cuda_wheel_for(arch) if arch else None) or "pip install torch --index-url https://download.pytorch.org/whl/cu128"


# pytorch.org's CUDA wheel indexes of current torch releases, each for its own CUDA release (torch_cuda's table of
# labels and the torch releases that carry them): a CUDA named by the user that has one of its own gets it
_CUDA_LABELS = {"11.8": "cu118", "12.1": "cu121", "12.4": "cu124", "12.6": "cu126", "12.8": "cu128", "12.9": "cu129",
                "13.0": "cu130"}
# the user's own words for the CUDA release ("CUDA 12.6", "cuda cudnn:11.8", "CUDA: 12.1"), not a torch build's
# label (+cu121, whl/cu121), which says what was installed rather than what the machine has
_CUDA_SAID = re.compile(r"(?i)(?<![\w/+-])cuda(?:[ -]?toolkit|[/ ]cudnn)?(?: version)?\s*[:=]?\s*v?(\d{2}\.\d)\b")


def _said_cuda_label(ctx: Context) -> Optional[tuple[str, str]]:
    for fact in ctx.sheet.of("cuda"):
        m = _CUDA_SAID.search(fact.line)
        if m and m.group(1) == fact.value and fact.value in _CUDA_LABELS:
            return _CUDA_LABELS[fact.value], fact.value
    return None


def _arch_fact(ctx: Context, arch: str) -> Optional[Fact]:
    return next((f for f in ctx.sheet.of("arch") if f.value == arch), None)


def _symptom_lines(ctx: Context, facts: list[Fact]) -> list[ErrorLine]:
    """A complaint said in prose ("X doesn't use my RX 6600") as a line a rule can cover."""
    return [ErrorLine(f.line_no, f.line, None) for f in facts]
