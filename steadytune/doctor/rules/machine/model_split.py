"""A model split over several GPUs for inference (FastChat's --num-gpus, transformers' device_map="auto") where the
user sees only one GPU working (visibility). device_map="auto" places the layers in order and fills each GPU up to
the memory it may use before the next: a model that fits on the first GPU stays there, and the others get nothing (or
only the last layers), so "only one GPU works" is the placement, not a GPU the process cannot see. Capping each GPU's
share spreads the weights.

Sources: FastChat's README ("the auto device mapping strategy in huggingface/transformers does not perfectly balance
the memory allocation across multiple GPUs. You can use --max-gpu-memory to specify the maximum memory per GPU";
lm-sys/FastChat#1198, --max-gpu-memory 15GiB beside --num-gpus 2, confirmed); transformers' big-model loading docs
(from_pretrained(..., device_map="auto", max_memory={0: "10GiB", 1: "10GiB"}))."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_FASTCHAT = re.compile(r"(?i)\bfastchat\b|--?num[-_]gpus?\b")
_AUTO_MAP = re.compile(r"""(?i)device_map\s*=\s*["']?(?:auto|balanced)\b""")
# the user's words: one GPU works, the other idles
_ONE_WORKS = re.compile(r"(?i)\bonly (?:one|1|a single|the first|GPU ?0|cuda:?0)\b.{0,20}\b(?:GPU|card|device)?s?\b.{0,20}"
                        r"\b(?:works?|is used|used|runs?|loaded|busy|utili[sz]ed)\b|\b(?:second|other|2nd) (?:GPU|card)\b"
                        r".{0,30}\b(?:idle|unused|not used|0 ?%|does nothing|empty)\b|只有(?:一|1)张卡|只用了?(?:一|1)张")
_SIZE = re.compile(r"(?i)\b(\d{2,3})\s*G(?:i?B)?\b")


@rule("visibility")
def split_fills_the_first_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a split over GPUs (FastChat's --num-gpus, device_map="auto") and the user's word that only one GPU
    works. The cap suggested is a little below the smallest GPU memory the paste names, else a placeholder."""
    text = _text(ctx)
    fastchat = bool(_FASTCHAT.search(text))
    if not (fastchat or _AUTO_MAP.search(text)):
        return None
    said = _lines_matching(ctx, _ONE_WORKS)
    if not said:
        return None
    if re.search(r"--max-gpu-memory|max_memory\s*=", text):
        return None   # already capped: another cause
    sizes = [int(m.group(1)) for m in _SIZE.finditer(text) if 8 <= int(m.group(1)) <= 192]
    cap = f"{max(min(sizes) // 2, 4)}GiB" if sizes else "<GiB per GPU>"
    count = re.search(r"(?i)num[-_]gpus?\W{0,3}(\d)", text)
    gpus = count.group(1) if count else "2"
    tool = (f"start FastChat with a cap per GPU beside --num-gpus: --num-gpus {gpus} --max-gpu-memory "
            f"{cap} (below one GPU's memory, so the weights must spread; FastChat's README tip)" if fastchat else
            "cap each GPU's share where the model is loaded: from_pretrained(..., device_map=\"auto\", max_memory={0: "
            f"\"{cap}\", 1: \"{cap}\"}}" + ")")
    return _make(
        "visibility", "the model split fills the first GPU before using the next",
        "both GPUs are visible; device_map=\"auto\" places the layers in order and fills each GPU before moving on, "
        "so a model that fits on the first GPU leaves the second idle",
        tool + "; nvidia-smi then shows memory in use on each GPU (the GPUs still work one after another, layer by "
        "layer: a split saves memory, it does not make one request faster)",
        [], said[:1], confirmed=fastchat)
