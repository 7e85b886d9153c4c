"""An unquantized chat model that runs out of GPU memory while it is loaded for inference, where its publisher ships
a 4-bit release of the same model: that release (or the model's own quantize call) is the remedy the maintainers
give, not a smaller batch. No rules: out_of_memory asks it before its generic readings.

Facts (each publisher's model pages and READMEs):
  Qwen (first generation): Qwen/Qwen-1_8B-Chat-Int4, Qwen-7B-Chat-Int4, Qwen-14B-Chat-Int4, Qwen-72B-Chat-Int4 and
      Qwen/Qwen-VL-Chat-Int4 (GPTQ; auto-gptq and optimum to load them); Qwen-VL-Chat has 9.6B parameters (about 19 GB
      in bf16), its Int4 release about 10 GB of weights (https://huggingface.co/Qwen/Qwen-VL-Chat-Int4;
      QwenLM/Qwen-VL#26: a 16 GB card, solved by the Int4 model).
  Qwen1.5 / Qwen2 / Qwen2.5 and their VL models: an AWQ release beside each chat / instruct model (<name>-AWQ).
  ChatGLM-6B: its remote code quantizes while loading, .half().quantize(4).cuda() (about 6 GB, the README's table:
      13 GB in fp16), and THUDM/chatglm-6b-int4 / chatglm2-6b-int4 are ready-made (zai-org/ChatGLM-6B#39).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import Context, Diagnosis, _make
from steadytune.doctor.rules.runtime.shared import _training


# first-generation Qwen chat models with an Int4 sibling, and their sizes in billions of parameters
_QWEN1 = re.compile(r"(?i)(?<![\w-])(?:Qwen/)?(Qwen-(1_8B|7B|14B|72B|VL)-Chat)(?![\w-])")
_QWEN1_SIZE = {"1_8b": 1.8, "7b": 7.7, "14b": 14.2, "72b": 72.3, "vl": 9.6}
# later Qwen generations' chat / instruct models (an -AWQ sibling each)
_QWEN_LATER = re.compile(r"(?i)(?<![\w-])(?:Qwen/)?(Qwen(?:1\.5|2|2\.5)-(?:VL-)?(\d+(?:\.\d+)?)B-(?:Chat|Instruct))"
                         r"(?![\w-])")
_CHATGLM = re.compile(r"(?i)(?<![\w-])(?:THUDM/|zai-org/)?(chatglm([23]?)-6b)(?![\w-])")
# the model already quantized (or asked to be)
_QUANTIZED = re.compile(r"(?i)-int[48]\b|-awq\b|-gptq\b|\.quantize\(|load_in_[48]bit|BitsAndBytesConfig|bitsandbytes|"
                        r"quantization_bit")
_CAPACITY = re.compile(r"([\d.]+) GiB total capacity|total capacity of ([\d.]+) GiB")
# the fix's last resort, which the sizes' reading (out_of_memory) replaces with its own where it speaks
SPLIT = "; or split it over several GPUs (device_map=\"auto\")"
_LOADING = re.compile(r"\bfrom_pretrained\(|\bAutoModel\w*\b|\.cuda\(\)|device_map")


def _release(text: str) -> Optional[tuple[str, float, str]]:
    """(the model, its size in billions, the fix naming its 4-bit release) for the first model of a known family."""
    qwen = _QWEN1.search(text)
    if qwen:
        name = qwen.group(1)
        return (name, _QWEN1_SIZE[qwen.group(2).lower()],
                f"load its 4-bit release instead: Qwen/{name}-Int4 (GPTQ: pip install auto-gptq optimum; the same "
                f"from_pretrained call with the new name)")
    later = _QWEN_LATER.search(text)
    if later:
        name = later.group(1)
        return (name, float(later.group(2)),
                f"load its 4-bit release instead: Qwen/{name}-AWQ (pip install autoawq; Int4 weights, the same "
                f"from_pretrained call with the new name)")
    glm = _CHATGLM.search(text)
    if glm:
        name = glm.group(1)
        ready = f"THUDM/{name.lower()}-int4" if glm.group(2) in ("", "2") else None
        return (name, 6.2,
                f"load it quantized to 4 bit: AutoModel.from_pretrained(..., trust_remote_code=True).half()"
                f".quantize(4).cuda() (about 6 GB; .quantize(8) about 8 GB)"
                + (f", or the ready-made {ready}" if ready else ""))
    return None


def published_quantized(ctx: Context, errors: list[ErrorLine], joined: str, proper: bool) -> Optional[Diagnosis]:
    """Out of memory in no training run, an unquantized model of a family with a 4-bit release named, and its 16-bit
    weights about the size of the GPU (torch's capacity), or the paste loading it when no capacity is given."""
    if _training(ctx) or _QUANTIZED.search(joined):
        return None
    found = _release(joined)
    if found is None:
        return None
    name, size, fix = found
    weights = size * 2e9 / 2 ** 30
    capacity = _CAPACITY.search(joined)
    gib = float(capacity.group(1) or capacity.group(2)) if capacity else None
    if gib is not None and weights < 0.8 * gib:
        return None   # the weights fit with room to spare: the memory goes elsewhere (a long context, other jobs)
    if gib is None and not _LOADING.search(joined):
        return None
    on = f"the {gib:g} GiB GPU" if gib else "the GPU"
    return _make("out-of-memory", f"{name} in 16 bit does not fit {on}",
                 f"{name} has about {size:g}B parameters: about {weights:.0f} GiB of weights in bf16 / fp16 before "
                 f"any activation, more than {on} holds with room for inference",
                 fix + SPLIT,
                 [ctx.line_fact(errors[0])], errors, confirmed=proper)
