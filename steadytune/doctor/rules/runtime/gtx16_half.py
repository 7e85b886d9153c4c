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
  The other picture programs each have a switch of their own (_OWN_SWITCHES): the upscaler GUIs an FP16 mode in their
      settings (MangaJaNaiConverterGui#56: a GTX 1660 Ti's solid black output, FP16 mode off fixed it), the face
      restorers' scripts (CodeFormer, GFPGAN, Real-ESRGAN) a half flag, or torch.backends.cudnn.benchmark = True, which
      the web UI's devices.py sets for these cards because it makes their fp16 work (CodeFormer#69: a GTX 1650 Ti's
      black background from --bg_upsampler realesrgan, fixed by cudnn.benchmark = True after the imports).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule
from steadytune.doctor.rules.runtime.shared import _GTX16, _text_of, _WHISPER


# the output that half precision spoils, in the user's words: NaN values, green or black pictures, silent or empty audio
_SPOILED = re.compile(r"(?i)\bnans?\b|\b(?:green|black)\s+(?:screens?|images?|pictures?|outputs?|squares?|backgrounds?|"
                      r"results?|frames?|faces?|videos?)\b|\b(?:solid|completely|all|pure|entirely)\s+(?:black|green)\b|"
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


# programs with a half-precision switch of their own, first found first: (what names it, the switch). The upscaler
# GUIs keep it in their settings (chaiNNer: Settings > PyTorch > FP16 mode; MangaJaNaiConverterGui: App Settings >
# FP16 mode); the face-restoration scripts create RealESRGANer(half=True) on CUDA (Real-ESRGAN's inference script has
# --fp32); the web UI forks built on ComfyUI's model management (Forge, Fooocus) take its --all-in-fp32; InvokeAI reads
# precision from invokeai.yaml
_CUDNN_BENCHMARK = ("add torch.backends.cudnn.benchmark = True (and torch.backends.cudnn.enabled = True) right after "
                    "the imports of the script, which makes fp16 work on these cards (the web UI's devices.py sets it "
                    "for them)")
_OWN_SWITCHES = (
    (r"(?i)MangaJaNai", "turn FP16 mode off in MangaJaNaiConverterGui's App Settings (it upscales in fp32 then)"),
    (r"(?i)\bchaiNNer\b", "turn FP16 mode off in chaiNNer's Settings (PyTorch tab); the model then runs in fp32"),
    (r"(?i)\bCodeFormer\b|inference_codeformer|\bGFPGAN\b|inference_gfpgan|--bg_upsampler",
     "the script's fp16 off or fixed: " + _CUDNN_BENCHMARK + " (inference_codeformer.py / inference_gfpgan.py); or "
     "make the background upsampler fp32 (RealESRGANer(..., half=False))"),
    (r"(?i)Real-?ESRGAN|inference_realesrgan",
     "run Real-ESRGAN with --fp32 (RealESRGANer(..., half=False)), its FP16 off; or " + _CUDNN_BENCHMARK),
    # LoRA trainers on kohya's sd-scripts (the kohya_ss GUI, its "NaN detected in latents" check): the script's own
    # cudnn.benchmark (bmaltais/kohya_ss#1951: a GTX 1660's NaN latents, fixed by cudnn.benchmark = True in the
    # training script), or the VAE in fp32 (sd-scripts' --no_half_vae)
    (r"(?i)\bkohya(?:_ss)?\b|sd-scripts|\b(?:sdxl_)?train_network\.py\b|NaN detected in latents",
     "in the training script (sd-scripts' train_network.py / sdxl_train_network.py, which the kohya_ss GUI runs) " +
     _CUDNN_BENCHMARK.replace("the imports of the script", "its imports") + "; or encode the latents with the VAE in fp32 "
     "(--no_half_vae, kohya_ss GUI: Advanced > Additional parameters)"),
    (r"(?i)\bFooocus\b|(?<![-\w])Forge\b", "start it with --all-in-fp32 (or --vae-in-fp32 where only the decoded picture is "
     "black), FP16 off; fp32 takes about twice the GPU memory"),
    (r"(?i)\bInvokeAI\b", "set precision: float32 in invokeai.yaml (FP16 off) and restart InvokeAI"),
)


def _own_switch(text: str) -> Optional[str]:
    return next((fix for pattern, fix in _OWN_SWITCHES if re.search(pattern, text)), None)


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
    own = _own_switch(text)
    if own is not None:
        fix, made = own, "the pictures come out NaN (black or green)"
    elif _VOICE.search(text) and not _IMAGE.search(text):
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
               "is_half=False, fp16=False), torch_dtype=torch.float32 or .float() instead of .half(); in a script of "
               "your own, " + _CUDNN_BENCHMARK)
        made = "the output comes out NaN"
    return _make("precision", f"the {name} gives NaN in half precision",
                 f"GeForce GTX 16xx cards (TU116 / TU117, Turing without tensor cores) give NaN in these models' "
                 f"half-precision (fp16) paths, so {made}; the programs that know it switch these cards to fp32 "
                 "by their name", fix, [], spoiled[:1], confirmed=False)
