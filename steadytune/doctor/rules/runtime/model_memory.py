"""A model said to need about as much memory as the machine has, in words and with no error yet: the weights are
the memory, and loading them in 8 bit (half of fp16) or 4 bit is what makes them fit, each tool with its own switch.

Facts: FastChat's README ("Not Enough Memory": --load-8bit cuts memory by about half, on CPU, GPU and Metal;
--cpu-offloading with it on a GPU); transformers' BitsAndBytesConfig(load_in_8bit / load_in_4bit) needs a GPU;
llama.cpp's Q8_0 and Q4_K_M GGUF quantisations take about 8.5 and 4.8 bits a weight.
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


@rule("out-of-memory")
def model_memory(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the memory a model needs and the machine's memory, both said, with a question whether it fits."""
    if ctx.errors:
        return None
    return _memory_said_short(ctx)
