"""An NVIDIA card below the oldest compute capability a tool runs on at all: a table of tool x floor (each tool's own
documents), and of the releases whose floor was higher for a while. Unlike prebuilt_floor.py (a card the tool's
source build can still target), a card under these floors has no build to make: the tool's kernels, or every CUDA
toolkit the tool builds with, leave it out. The fix is the CPU, a newer card, or (with a supported card beside it)
hiding the old card; a release that raised its floor for a while is the arch reading: the release after it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.error_lines import family
from steadytune.hardware.gpu_facts import lookup_product
from steadytune.doctor.fixes import dotted
from steadytune.doctor.rules.base import NOT_DETECTED, Context, Diagnosis, _lines_matching, _make, rule, _text
from steadytune.doctor.rules.arch.prebuilt_floor import dropped_capabilities


@dataclass(frozen=True)
class Floor:
    tool: str          # the tool as the fix names it
    named: str         # how a paste names it
    oldest: int        # the oldest compute capability it runs on, as digits (50 = 5.0)
    source: str        # where the floor is written
    beyond: str        # what a user with an older card can do ({digits}: the card's capability, 37 for 3.7)


FLOORS: tuple[Floor, ...] = (
    Floor("Ollama", r"(?i)\bollama\b", 50,
          "ollama docs/gpu.md lists compute capability 5.0 and newer; Kepler 3.5/3.7 only in community forks "
          "(ollama #1756, #9620)",
          "run it on the CPU or on a newer GPU; or build it from source for the card with a CUDA 11 toolkit, the last "
          "that compiles Kepler (CMAKE_CUDA_ARCHITECTURES={digits}), as the community Kepler builds do (ollama #1756)"),
    Floor("LMDeploy", r"(?i)lmdeploy|turbomind", 70,
          "LMDeploy installation docs: Volta (sm70) and newer (V100, Turing, Ampere, Ada)",
          "run LMDeploy on a Volta (V100) or newer GPU, or serve the model on this card with an engine that still "
          "runs on it (llama.cpp, transformers)"),
    Floor("CTranslate2", r"(?i)ctranslate2|faster[-_ ]whisper|whisperx", 35,
          "CTranslate2 README: NVIDIA GPUs of compute capability 3.5 and newer",
          "run it with device=\"cpu\" (compute_type=\"int8\") or on a newer GPU"),
    # programs whose release binaries carry no code below a generation, said by their maintainers (before PyTorch: their
    # pastes name torch too)
    Floor("Dorado", r"(?i)\bdorado\b", 70,
          "the Dorado maintainers: Volta and newer, Pascal cards are not supported (nanoporetech/dorado#37)",
          "run Dorado on a Volta (V100) or newer GPU (Turing, Ampere, Ada, Hopper), or on the CPU (--device cpu, "
          "slow)"),
    Floor("BMInf", r"(?i)\bbminf\b|\bcpm[_-]kernels\b", 61,
          "the BMInf maintainers: its cpm_kernels need compute capability 6.1 or newer (OpenBMB/BMInf#29)",
          "run it on a GPU of compute capability 6.1 or newer (GTX 10xx, Tesla P4/P40, T4 and later), or load the "
          "model with transformers on this card instead"),
    # every CUDA toolkit from 11.0 on leaves out compute capability 3.0 and older (CUDA 11.0 release notes: sm_30
    # and sm_32 dropped), and PyTorch's binaries dropped 3.0 in 0.4.1 (its release notes): no build of current torch
    # can target these cards; 3.5-4.x is prebuilt_floor.py's source build
    Floor("PyTorch", r"(?i)\bpy-?torch\b|\btorch\b", 35,
          "CUDA 11.0 release notes (sm_30/sm_32 dropped; Fermi sm_2x already in CUDA 9); PyTorch 0.4.1 release notes "
          "(binaries without compute capability 3.0)",
          "run on the CPU (device=\"cpu\"), or use a newer GPU (compute capability 5.0 or newer for the current CUDA "
          "builds)"),
    # Triton's NVIDIA backend is written for tensor-core GPUs; torch refuses older ones before compiling anything
    Floor("Triton", r"(?i)\btriton\b", 70,
          "torch/_dynamo device check: 'Triton only supports devices of CUDA Capability >= 7.0'; Triton 2.x README: "
          "NVIDIA GPUs (Compute Capability 7.0+), 8.0+ in Triton 3's README",
          "keep Triton off the card: run eager PyTorch or torch.compile(backend=\"aot_eager\") instead of the inductor "
          "backend, or use a GPU of compute capability 7.0 (Volta) or newer"),
)

# Releases whose CUDA build started at a higher capability than the tool's floor, for a while: (tool, first, last,
# their oldest capability, the release that brought the older cards back, source)
RAISED: tuple[tuple[str, tuple[int, ...], tuple[int, ...], int, str, str], ...] = (
    ("Ollama", (0, 1, 19), (0, 1, 21), 60, "0.1.22",
     "ollama #1865; PR #2116 built compute capability 5.0 and 5.2 again after 0.1.21"),
)

# the card's capability said by the tool or the user: "Compute Capability detected: 5.2", "GT 740M | 3.0"
_SAID_CC = re.compile(r"(?i)compute capability(?: detected)?[:\s]+(\d{1,2})\.(\d)\b|\|\s*(\d)\.(\d)\s*$")
# the GPU left idle, in the user's or the tool's words
_IDLE = re.compile(r"(?i)\b(?:not|n't|never) (?:running|runs?|use|using|utili[sz]\w*) (?:on |the )?(?:my )?gpu|"
                   r"\buses? (?:the )?cpu\b|falling back to cpu|fell back to cpu|\bcpu mode\b|no GPU detected|"
                   r"\bruns?\b[^.\n]{0,30}\bon (?:the )?cpu\b|\bignores?\b[^.\n]{0,20}\b(?:gpu|card|tesla|geforce|quadro)\b|"
                   r"too old|can(?:'t|not) detect|\bcuda error\b|no kernel image is available|无法在|不能在|用不了|\?|适配|支持|"
                   # Ollama's own log saying it found no GPU it can use (its GPU page's floor: compute capability 5.0)
                   r"no compatible GPUs were discovered")
# the families whose lines are what an unusable card looks like; any other error line has its own reading
_SYMPTOMS = {None, "visibility", "torch-build", "driver", "gpu-unsupported", "arch-missing"}


# before the install, visibility and driver readings, whose fixes cannot give the card code it has no build of
_BEFORE_INSTALLS = min(family(n).rank for n in ("visibility", "driver", "device-access", "torch-build")) - 1


def tool_release(text: str, tool: str) -> Optional[tuple[int, ...]]:
    """The tool's release the paste runs ("Ollama version 0.5.11", "updated ollama to v0.1.19"): the newest it names,
    since an older one beside it is the release that worked before an upgrade ("fine with 0.1.15, now 0.1.20")."""
    if tool != "Ollama":   # the only tool with a raised-floor row
        return None
    # every Ollama release so far is 0.x: a driver (545.23.08) or a distribution (22.04.3) is not one
    found = [(0, int(m.group(1)), int(m.group(2)))
             for m in re.finditer(r"(?<![\d.])v?0\.(\d+)\.(\d+)(?![\d.])", text)]
    return max(found) if found else None


def _cards(ctx: Context) -> list[tuple[str, int]]:
    """The NVIDIA cards the paste names, with their capability as digits, once each."""
    # one card named twice ("nvidia tesla k80", "nvidia tesla k80 24gb") is one card: one name per capability
    unique: dict[int, str] = {}
    for gpu in ctx.sheet.of("gpu"):
        arch = gpu.detail or ""
        if re.fullmatch(r"sm_\d{2,3}", arch):
            unique.setdefault(int(arch[3:]), re.sub(r"(?i)^nvidia\s+", "", gpu.value).strip())
    # the facts keep one card a line: another card on it ("a tesla p40 and a k80", "a K40 and an RTX 3060") is read here
    for line_no in {g.line_no for g in ctx.sheet.of("gpu")}:
        for part in re.split(r"(?i)\band\b|,|&|\+|/", ctx.sheet.lines[line_no - 1]):
            model = _NVIDIA_MODEL.search(part)
            product = lookup_product(model.group(0)) if model else None
            if product is not None and product.arch.startswith("sm_"):
                unique.setdefault(int(product.arch[3:]), model.group(0).strip())
    if not unique:   # no card named: the capabilities the user asks about ("add support for 6.0, even 5.0 CC?")
        for line in ctx.sheet.lines:
            # a question about them, not a tool's detection line ("Compute Capability detected: 1.0")
            if re.search(r"(?i)compute capability|\bcuda capability|\bCC\b", line) and \
                    re.search(r"(?i)\?|\bsupport", line) and not re.search(r"(?i)\bdetected\b", line):
                for major, minor in _ASKED_CC.findall(line):
                    unique.setdefault(int(major + minor), f"compute capability {major}.{minor} GPU")
    return [(name, cc) for cc, name in unique.items()]


# a capability number in a line about capabilities, not a floor ("7.0+", "at least 7.0", ">= 7.0")
_ASKED_CC = re.compile(r"(?i)(?<!least )(?<!>= )(?<!>=)(?<![\d.])([1-9])\.(\d)(?![\d.+])")


# an NVIDIA model named bare in a list of cards: "k80", "Tesla P40", "GTX 970", "RTX 3090"
_NVIDIA_MODEL = re.compile(r"(?i)\b(?:tesla |quadro )?[KPMTVAL]\d{2,3}\b|\b[GR]TX ?\d{3,4}M?\b")


def _trouble(ctx: Context):
    return _lines_matching(ctx, _IDLE.pattern)[:1] or _lines_matching(ctx, NOT_DETECTED)[:1] or \
        [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]


def _floor_of(ctx: Context) -> Optional[Floor]:
    text = _text(ctx)
    tool = ctx.tool()
    for floor in FLOORS:
        if floor.tool.lower() == (tool or "") or re.search(floor.named, text):
            return floor
    return None


@rule("gpu-unsupported")
def below_the_tools_floor(ctx: Context) -> Optional[Diagnosis]:
    """A card under the floor of the tool the paste names (or, with no tool named, a Kepler card beside a supported
    one: under every CUDA 12 build), with the GPU left idle, a failure or a question: not a build or an install."""
    if any(e.family not in _SYMPTOMS for e in ctx.errors):
        return None
    cards = _cards(ctx)
    trouble = _trouble(ctx)
    if not cards or not trouble:
        return None
    dropped, _said = dropped_capabilities(ctx)
    if any(cc >= 35 for cc in dropped):
        # capabilities a release said it dropped ("3.0 and 5.0 is no longer supported") are its list, not a machine
        # with an old card beside a good one; one a source build still targets is prebuilt_floor.py's reading
        return None
    floor = _floor_of(ctx)
    if floor and floor.tool == "Triton" and ctx.of("gpu-unsupported", "arch-missing"):
        return None   # torch's own GPUTooOldForTriton refusal (gpu_unsupported.py) or a kernel missing from a build
                      # (arch_missing.py, Triton's own remedy): the floor is for the question with no such line
    text = "\n".join(ctx.sheet.lines)
    said = _SAID_CC.search(text)
    if said and len(cards) == 1:   # the tool's or the user's own number for the one card wins over the table
        digits = [g for g in said.groups() if g]
        if digits[0] == "1" and cards[0][1] >= 20:
            return None   # a 1.x answer for a newer card is a wrong runtime library (install/program_runtimes.py)
        cards = [(cards[0][0], int(digits[0] + digits[1]))]
    label = floor.tool if floor else "the current CUDA"
    version = tool_release(text, floor.tool) if floor else None
    for tool, first, last, raised, after, source in RAISED:
        below = [(n, cc) for n, cc in cards if floor.oldest <= cc < raised] if floor and floor.tool == tool else []
        if below and version and first <= version <= last:
            name, cc = below[0]
            raised_release = _make("arch-missing", f"{tool} {'.'.join(map(str, version))} left out the {name}",
                         f"{tool} releases {'.'.join(map(str, first))}-{'.'.join(map(str, last))} were built for "
                         f"compute capability {dotted(raised)} and newer; the {name} is {dotted(cc)}",
                         f"upgrade {tool} to {after} or newer: releases {'.'.join(map(str, first))}-"
                         f"{'.'.join(map(str, last))} carried no code below compute capability {dotted(raised)} (the "
                         f"{name} is {dotted(cc)}), later ones do again ({source})",
                         [g for g in ctx.sheet.of("gpu") if g.detail == f"sm_{cc}"][:1], trouble)
            raised_release.rank = _BEFORE_INSTALLS   # the release's own build: no install of anything else helps
            return raised_release
    oldest = floor.oldest if floor else 50
    old = [(n, cc) for n, cc in cards if cc < oldest]
    good = [(n, cc) for n, cc in cards if cc >= oldest]
    if not old or (floor is None and not good):
        return None   # no tool named: only a mixed machine says which card is the trouble
    name, cc = old[0]
    names = ", ".join(f"the {n} (compute capability {dotted(c)}, sm_{c})" for n, c in old)
    if good:
        keep = good[0][0]
        fix = (f"{names} is below {label}'s floor, compute capability {dotted(oldest)}: hide it so the {keep} is used "
               f"alone (CUDA_VISIBLE_DEVICES=<the {keep}'s index in nvidia-smi>, or take the old card out); some "
               "releases give up on the GPU altogether when any card is too old")
    else:
        fix = f"{names} is below {label}'s floor, compute capability {dotted(oldest)}, and no current release runs on it: " + \
            (floor.beyond.format(digits=cc) if floor else "run on the CPU or a newer GPU")
    diagnosis = _make("gpu-unsupported", f"the {name} is older than {label} supports",
                      f"{label} runs on compute capability {dotted(oldest)} and newer"
                      f"{' (' + floor.source + ')' if floor else ' (CUDA 12 compiles 5.0 and newer)'}; the {name} is "
                      f"{dotted(cc)}", fix, [g for g in ctx.sheet.of("gpu") if g.detail == f"sm_{cc}"][:1],
                      trouble)
    # nothing else can work on the card: the install, visibility and driver readings come after it
    diagnosis.rank = _BEFORE_INSTALLS
    return diagnosis
