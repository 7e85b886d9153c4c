"""A GeForce GTX 16xx card whose half-precision output is NaN: green or black pictures, silent or NaN audio, with no
error line. The cards (TU116 / TU117: Turing without tensor cores) compute fp16, but the half-precision paths of
these models give NaN there, so the tools that know it switch them to fp32 by the card's name:

  GPT-SoVITS's config.py: is_half = False where the GPU's name has "16" (not a V100), or is a P40 / P10x / 1060-1080
      (https://github.com/RVC-Boss/GPT-SoVITS/blob/main/config.py; RVC's configs/config.py has the same test);
      GPT-SoVITS#24 and #202 (GTX 1660 SUPER / Ti: NaN and silent audio) were fixed by is_half=False.
  Stable Diffusion web UI: modules/devices.py treats "GeForce GTX 16" cards apart (cudnn.benchmark, manual casting),
      and its wiki's remedy for green or black pictures on them is --upcast-sampling, else --precision full --no-half
      (AUTOMATIC1111/stable-diffusion-webui#28: a 1660 SUPER's green screen; --precision full alone fails with
      "expected scalar type Half but found Float", the weights stay half without --no-half).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule
from steadytune.doctor.rules.runtime.shared import _text_of, _WHISPER


# the cards: "GTX 1660 SUPER", "GeForce GTX1650", "1660Ti", "1660S" (a bare "1660" is a number unless GTX names it)
_GTX16 = re.compile(r"(?i)(?<![\w.])(?:(?:GeForce\s+)?GTX\s?-?(16[356]0)(?:\s?(?:Ti|SUPER)|S)?|"
                    r"(16[356]0)(?:\s?(?:Ti|SUPER)|S))(?![\w])")
# the output that half precision spoils, in the user's words: NaN values, green or black pictures, silent or empty audio
_SPOILED = re.compile(r"(?i)\bnans?\b|\b(?:green|black)\s+(?:screens?|images?|pictures?|outputs?|squares?)\b|"
                      r"\b(?:silent|empty|blank|mute)\b.{0,30}\b(?:audio|wav|sound|voice|speech|output)\b|"
                      r"\b(?:audio|wav|sound|voice|speech)\b.{0,30}\b(?:is |are )?(?:silent|empty|blank|mute)\b|"
                      r"\bno sound\b|无声|没有声音|没声音|静音|(?:音频|声音|语音).{0,10}(?:空|无声)|黑图|绿图|全黑|全绿|"
                      r"(?:绿|黑)屏")
# the program, by what it makes: speech (GPT-SoVITS, RVC and their one-click packages), pictures (the web UIs)
_VOICE = re.compile(r"(?i)GPT-?SoVITS|so-?vits|\bRVC\b|Retrieval-based-Voice|\bTTS\b|\bis_half\b|\baudio\b|\bvoice\b|"
                    r"\bspeech\b|\bwav\b|语音|音频|声音|合成|变声")
_COMFY = re.compile(r"(?i)\bcomfy\s?ui\b")
# (not "webui" alone: GPT-SoVITS and RVC are web UIs too)
_IMAGE = re.compile(r"(?i)stable[- ]?diffusion|automatic1111|\bA1111\b|\bForge\b|\bSD(?:XL|\.Next| ?1\.5)?\b|"
                    r"--precision|--no-half|txt2img|img2img|relauncher|\b(?:images?|pictures?)\b|图片|图像|出图|"
                    r"绿图|黑图|(?:绿|黑)屏|\bgreen\s+screens?\b")


@rule("precision")
def gtx16_half_precision(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a GTX 16xx card named, output said to be NaN / green / black / silent, and no error line of another
    family (a missing kernel, a driver) that would explain a failure instead."""
    text = _text_of(ctx)
    card = _GTX16.search(text) or next((m for g in ctx.sheet.of("gpu") for m in [_GTX16.search(g.value)] if m), None)
    spoiled = _lines_matching(ctx, _SPOILED)
    if card is None or not spoiled or any(e.family not in (None, "precision") for e in ctx.errors):
        return None
    if _WHISPER.search(text):
        return None   # CTranslate2's compute types: the precision readings of faster-whisper
    name = card.group(0).strip()
    if _VOICE.search(text) and not _IMAGE.search(text):
        fix = ("turn half precision off: GPT-SoVITS: is_half=False (config.py's is_half, or the environment variable "
               "is_half=False before starting go-webui; for training, fp32 in its s1 / s2 configs), RVC: is_half = "
               "False in configs/config.py; releases that test the GPU's name do it for 16xx cards themselves, so "
               "updating helps too; fp32 takes more GPU memory")
        made = "the audio comes out NaN (silent or empty)"
    elif _COMFY.search(text):
        fix = "start ComfyUI with --force-fp32 (or --fp32-unet --fp32-vae); fp32 takes about twice the GPU memory"
        made = "the pictures come out NaN (black or green)"
    elif _IMAGE.search(text):
        fix = ("start the web UI with --upcast-sampling, and where the pictures stay green or black with --precision "
               "full --no-half (both: --precision full alone keeps the weights half and fails with \"expected scalar "
               "type Half but found Float\"), in COMMANDLINE_ARGS of webui-user.bat / .sh; add --medvram if fp32 "
               "does not fit")
        made = "the pictures come out NaN (green or black)"
    else:
        fix = ("run the model in fp32: the program's half-precision switch off (--no-half, --precision full, "
               "is_half=False, fp16=False), torch_dtype=torch.float32 or .float() instead of .half()")
        made = "the output comes out NaN"
    return _make("precision", f"the {name} gives NaN in half precision",
                 f"GeForce GTX 16xx cards (TU116 / TU117, Turing without tensor cores) give NaN in these models' "
                 f"half-precision (fp16) paths, so {made}; the programs that know it switch these cards to fp32 "
                 "by their name", fix, [], spoiled[:1], confirmed=False)
