"""A quantized model that answers with a run of exclamation marks ("!!!!", 感叹号): its fp16 kernels overflowed."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule
from steadytune.doctor.rules.runtime.shared import _text_of


# the output in the user's words: a run of "!", or its name (English, Chinese)
_BANGS = re.compile(r"(?i)!{4,}|！{3,}|\bexclamation (?:marks?|points?)\b|感叹号")
# the model was quantized: the method, the bit width, or the word
_QUANTIZED = re.compile(r"(?i)\b(?:awq|autoawq|gptq|auto-?gptq|int[48]|[48]-?bit|w4a16|w8a8|quanti[sz]\w*)\b|量化")

# the marks said to be the model's output (not a user's "it fails!!!!")
_OUTPUT = re.compile(r"(?i)\b(?:outputs?|answers?|repl(?:y|ies)|respon\w+|generat\w+|prints?|returns?|says|"
                     r"completions?)\b|输出|回答|回复|生成|出现")


@rule("precision")
def exclamation_output(ctx: Context) -> Optional[Diagnosis]:
    """Token 0 of the Qwen / Llama vocabularies is "!": a quantized model whose fp16 kernels overflow (an activation
    past 65504 turns to inf/NaN) samples it over and over. The quantization, not the serving engine, is to blame where
    the unquantized model answers well: its calibration data left outliers unscaled."""
    said = _lines_matching(ctx, _BANGS)
    text = _text_of(ctx)
    quantized = _QUANTIZED.search(text)
    if not (said and quantized and _OUTPUT.search(text)):
        return None
    return _make("precision", "the quantized model's fp16 kernels overflow",
                 f"the model quantized with {quantized.group(0)} computes in fp16; activations its calibration did "
                 "not cover overflow fp16's range (65504) to inf/NaN, and the sampler then repeats token 0, which is "
                 "\"!\" in byte-level BPE vocabularies (Qwen, Llama 3, GPT-2)",
                 "first check the unquantized model answers correctly on the same engine; then quantize again with a "
                 "larger, more varied calibration dataset from your own domain (AutoAWQ: calib_data=..., "
                 "AutoGPTQ / GPTQModel: several hundred examples), or serve a quantization that computes in bf16, or "
                 "the unquantized model", [], said)
