"""A model repository's own demo scripts choose their dtype by a flag: where the paste names such a model, its demo's
flag is the way to run in fp16, not an edited torch_dtype in another script. One row per repository, each from its
scripts' argument parsers. No rules: precision.py's bf16 reading asks it for an inference run."""

from __future__ import annotations

import re
from typing import Optional

# (how a paste names the model, the flag's advice)
_DEMO_FLAGS = (
    # THUDM/CogVLM basic_demo/cli_demo_hf.py (and cli_demo_sat.py): --fp16 / --bf16 (store_true), --quant 4; the
    # demo casts the images to the same dtype (zai-org/CogVLM#154: a hand-edited float16 in another script gave output
    # far from the demo's, the demo run with --fp16 was right)
    (re.compile(r"(?i)(?<![A-Za-z0-9_])(?:cogvlm|cogagent)(?!2)"),
     "run CogVLM's own demo with --fp16 instead of --bf16 (basic_demo/cli_demo_hf.py --fp16, or cli_demo_sat.py "
     "--fp16; add --quant 4 to fit a smaller card): the demo casts the images to the same dtype as the model"),
)


# the user's own conversion to fp16 beside a demo whose output it no longer matches ("results differ from the demo",
# 结果和demo相差甚远): the demo's own switch, which converts every input with the model
_DEMO_DIFFERS = re.compile(r"(?i)\bdemo\b.{0,40}(?:differ|different|相差|不一样|不同)|(?:differ\w*|different|相差\w*|不一样|不同)"
                           r".{0,20}\bdemo\b|demo.{0,6}(?:相差|差距|不一样)")


def demo_dtype_flag(text: str) -> Optional[str]:
    """The named model's demo flag for fp16, if the table knows the model; else, where the user converted to fp16 by
    hand and the output no longer matches the demo's, the demo's own fp16 switch."""
    known = next((advice for names, advice in _DEMO_FLAGS if names.search(text)), None)
    if known:
        return known
    if _DEMO_DIFFERS.search(text):
        return ("run the repository's own demo with its fp16 switch (--fp16 instead of --bf16 where its argument parser "
                "has one, as CogVLM's demos do) rather than changing torch_dtype by hand in another script: the demo "
                "casts its inputs (the images too) to the model's dtype")
    return None
