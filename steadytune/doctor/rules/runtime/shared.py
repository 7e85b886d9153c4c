"""What the runtime readings share (no rules): a training run said, a speech model named, an illegal memory
access, the paste's lines as one text."""

from __future__ import annotations

import re

from steadytune.doctor.rules.base import Context


# a speech model (faster-whisper, CTranslate2): out_of_memory's tool fixes and precision's fp16 reading name it
_WHISPER = re.compile(r"(?i)\b(?:faster[-_ ]?)?whisper\w*|ctranslate2")


# a training run (fine-tuning, LoRA, a trainer's own words): its memory is set by the batch, the sequence length and
# whether activations are kept, not by a server's cache sizes
_TRAINING = re.compile(r"(?i)\b(?:Q?LoRA|PEFT|fine-?tun\w*|train(?:ing|er)?|SFT\w*|DPO|GRPO|unsloth|LLaMA-?Factory|"
                       r"llamafactory|axolotl|trl\b|per_device_train_batch_size|gradient_accumulation|epochs?\b|"
                       r"backward\(\)|accelerate launch|deepspeed)")


# a GeForce GTX 16xx card (gtx16_half's reading; precision leaves it NaN latents): "GTX 1660 SUPER", "GeForce GTX1650", "1660Ti", "1660S" (a bare "1660" is a number unless GTX names it)
_GTX16 = re.compile(r"(?i)(?<![\w.])(?:(?:GeForce\s+)?GTX\s?-?(16[356]0)(?:\s?(?:Ti|SUPER)|S)?|"
                    r"(16[356]0)(?:\s?(?:Ti|SUPER)|S))(?![\w])")


# an illegal memory access: out_of_memory reads it in a training run, gpu_hang on any other
_ILLEGAL_MEMORY = re.compile(r"(?i)\billegal memory\b|hipErrorIllegalAddress|cudaErrorIllegalAddress")


def _training(ctx: Context) -> bool:
    return bool(_TRAINING.search("\n".join(ctx.sheet.lines))) or ctx.tool() in ("unsloth", "llamafactory", "deepspeed")


def _text_of(ctx: Context) -> str:
    return "\n".join(ctx.sheet.lines)
