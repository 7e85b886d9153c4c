"""A model said to need about as much memory as the machine has, in words and with no error yet: the weights are
the memory, and loading them in 8 bit (half of fp16) or 4 bit is what makes them fit, each tool with its own switch.
And out of memory on an APU with one memory for CPU and GPU (Strix Halo) whose size is said: the GPU's share of it.

Facts: FastChat's README ("Not Enough Memory": --load-8bit cuts memory by about half, on CPU, GPU and Metal;
--cpu-offloading with it on a GPU); transformers' BitsAndBytesConfig(load_in_8bit / load_in_4bit) needs a GPU;
llama.cpp's Q8_0 and Q4_K_M GGUF quantisations take about 8.5 and 4.8 bits a weight. AMD's Ryzen AI Max+ 395 page:
up to 128 GB of unified memory, up to 96 GB of it for the GPU (Variable Graphics Memory); OpenAI's gpt-oss-120b card:
about 61 GB of MXFP4 weights, made to fit one 80 GB GPU.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# the memory a model needs, said: "requires around 30GB of CPU memory", "needs about 14 GB VRAM"
_NEED = re.compile(r"(?i)\b(?:requires?|needs?|takes?)\s+(?:around|about|approximately|roughly|~|at least|over|more than|"
                   r"close to)?\s*(\d{1,4}(?:\.\d+)?)\s?G(?:i?B)?\b(?:\s+of)?\s+(?:(?:CPU|GPU|system|host|video)\s+)?"
                   r"(?:memory|RAM|VRAM)\b")
# the memory the machine has: "32 GB RAM", "16GB of VRAM", "has 24 GB memory"
_HAVE = re.compile(r"(?i)\b(\d{1,4}(?:\.\d+)?)\s?G(?:i?B)?\s+(?:of\s+)?(?:(?:system|host|DDR\d|video)\s+)?"
                   r"(?:RAM|VRAM|memory)\b")
# asked whether it fits, or how to make it use less
_ASKED = re.compile(r"(?i)\bcan i\b|\b(?:is there )?(?:a|any) way\b|\bhow to\b|\benough\b|\blimit\w*\b|\breduce\b|\blower\b|\bless (?:memory|RAM)\b|\bfit\b|"
                    r"\bis it possible\b|\bhow (?:do|can) i\b|\bwondering\b")
_ON_CPU = re.compile(r"(?i)\bCPU\b|\bRAM\b|--device cpu")


def _memory_said_short(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    need = _NEED.search(text)
    if not need or not _ASKED.search(text):
        return None
    have = [float(m.group(1)) for m in _HAVE.finditer(text) if not (need.start() <= m.start() < need.end())]
    needed = float(need.group(1))
    if not have or needed < 0.75 * max(have):
        return None
    machine = max(have)
    fastchat = re.search(r"(?i)\bfastchat\b|\bvicuna\b|fastchat\.serve", text)
    where = ("FastChat: add --load-8bit (python3 -m fastchat.serve.cli --model-path <model> --load-8bit, with "
             "--device cpu on a CPU, --cpu-offloading beside it on a small GPU)" if fastchat else
             "FastChat: --load-8bit; transformers on a GPU: BitsAndBytesConfig(load_in_8bit=True) (or load_in_4bit); "
             "llama.cpp / Ollama: a Q8_0 or Q4_K_M GGUF of the model, which also runs on the CPU")
    if fastchat:
        where += ("; or a 4-bit GGUF of the model in llama.cpp / Ollama (about a quarter of fp16)")
    place = "RAM" if _ON_CPU.search(text) else "GPU memory"
    return _make("out-of-memory", f"the model needs about {needed:g} GB and the machine has {machine:g} GB",
                 f"the model's weights in 16 bit need about {needed:g} GB, and this machine has {machine:g} GB of "
                 f"{place}, part of it taken by the system: it does not fit as it is, whatever the batch",
                 f"load the weights in 8 bit, about half ({needed / 2:.0f} GB): {where}",
                 [], _lines_matching(ctx, _NEED)[:1], confirmed=False)


# AMD's Strix Halo (Ryzen AI Max / Max+, Radeon 8050S / 8060S, gfx1151): one memory for CPU and GPU, sold with 32, 64
# or 128 GB; AMD's Variable Graphics Memory gives the GPU up to 96 GB of the 128 GB model (three quarters)
_STRIX_HALO = re.compile(r"(?i)\bStrix[ -]?Halo\b|\bRyzen AI Max\+?|\bAI Max\+? ?3\d\d\b|\bRadeon 80[56]0S\b|\bgfx1151\b")
_SYSTEM_GB = re.compile(r"(?i)(?<![\d.])(32|64|96|128) ?GB\b")
_OOM_SAID = re.compile(r"(?i)\bout of memory\b|\bOOM\b|\bnot enough (?:memory|VRAM)\b|内存不足|显存不足")


def _unified_memory_short(ctx: Context) -> Optional[Diagnosis]:
    """Out of memory said on a Strix Halo whose memory size is said, below the 128 GB model: the GPU's share of the
    one memory (at most three quarters of it, less what the OS keeps) is smaller than the large models AMD's guides
    serve on the 128 GB model (gpt-oss-120b's weights alone are about 61 GB)."""
    text = _text(ctx)
    said = _lines_matching(ctx, _OOM_SAID)
    sizes = [int(m.group(1)) for m in _SYSTEM_GB.finditer(text)]
    if not said or not _STRIX_HALO.search(text) or not sizes or max(sizes) >= 128:
        return None
    total = max(sizes)
    share = total * 3 // 4
    return _make("out-of-memory", f"the model does not fit the GPU's share of a {total} GB Strix Halo",
                 f"Strix Halo's GPU has no memory of its own: it gets a share of the {total} GB the CPU also uses (at "
                 f"most about {share} GB, less what the OS keeps), and the large models these guides run need more "
                 "(gpt-oss-120b's weights alone are about 61 GB)",
                 f"on this {total} GB machine use a model that fits about {share - 8} GB with its context (gpt-oss-20b, "
                 "a 30B-class model in 4 bit) and a smaller context length; the 120B-class models need the 128 GB "
                 "Strix Halo (up to 96 GB for the GPU); give the GPU its largest share in the BIOS (UMA frame buffer / "
                 "Variable Graphics Memory) or through GTT", [], said[:1], confirmed=False)


@rule("out-of-memory")
def model_memory(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the memory a model needs and the machine's memory, both said, with a question whether it fits; or
    out of memory said on a Strix Halo below its 128 GB model."""
    if any(e.family not in (None, "out-of-memory") for e in ctx.errors):
        return None
    return (None if ctx.errors else _memory_said_short(ctx)) or _unified_memory_short(ctx)
