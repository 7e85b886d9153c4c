"""Readings of what users say in words, where no error line says what failed: an issue's title, a complaint, the
settings they list. Each reading is a class of evidence a careful engineer would act on (a picture that turns black only past some
size; ...), said in English or Chinese. A reading stands back where an error line of another kind says what failed."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text, _vendor


# ---------------------------------------------------------------------------------------------------------
# A picture that comes out black only at some sizes: the attention kernel, not the number format
# ---------------------------------------------------------------------------------------------------------

_BLACK = (r"(?i)\b(?:all[- ])?black (?:images?|pictures?|outputs?|frames?|squares?|results?)\b|\bblank (?:images?|"
          r"pictures?)\b|\b(?:images?|pictures?|outputs?) (?:is |are |comes? out |turns? |goes |went )?(?:all |"
          r"completely |fully )?black\b|\bturns? (?:the )?(?:images?|pictures?|outputs?) (?:all |completely )?black\b|"
          r"纯黑|全黑|黑图|"
          r"黑色(?:图|画面)")
# the size is what decides: two resolutions set against each other, or words that say "past some size"
_RESOLUTION = re.compile(r"\b(\d{3,4}) ?[x×*] ?(\d{3,4})\b")
_SIZE_WORDS = re.compile(r"(?i)\b(?:some|certain|higher|larger|large|high|bigger|big) (?:resolutions?|sizes?|images?)\b|"
                         r"\b(?:above|over|beyond|past) \d{3,4}(?:px| ?pixels)?\b|\bhi-?res\b|\bupscal\w*|"
                         r"高分辨率|大分辨率|大尺寸|放大")
# what the number-format reading settles: a NaN check, the VAE or fp16 named
_FORMAT_SAID = re.compile(r"(?i)NaNs? (?:was|were) produced|NansException|\bVAE\b|\bfp16\b|\bhalf\b|float16|--no-half")


# the side of a picture every model is made for (SD 1.5: 512, SDXL: 1024): black there is not "past some size"
_ORDINARY_SIDE = 1024
_VRAM_SAID = re.compile(r"(?i)\b(\d(?:\.\d)?) ?GB (?:of )?(?:VRAM|video memory|显存)|\b(?:VRAM|显存)\W{0,3}(\d(?:\.\d)?) ?G")


def _small_gpu(text: str) -> bool:
    """A GPU of 4 GB or less said in the text: a low-end or old card, where fp16 is what fails first."""
    return any(float(a or b) <= 4 for a, b in _VRAM_SAID.findall(text))


@rule("attention")
def black_past_a_size(ctx: Context) -> Optional[Diagnosis]:
    """Pictures that come out black at large resolutions while smaller ones are fine: the tokens the attention kernel
    works on grow with the picture's area, and the memory-efficient kernels (xformers, which ComfyUI and the web UIs
    use when it is installed) have had releases that return garbage past a size instead of failing. A black picture at
    every size is the VAE's fp16 overflow, precision's reading; the size said is what settles it over that one."""
    black = _lines_matching(ctx, _BLACK)
    said = {b.line_no for b in black}
    # an error line of its own says what failed; the black-picture sentence itself (which the number-format reading
    # also reads) is not such a line
    if any(e.family is not None and not (e.family == "precision" and e.line_no in said) for e in ctx.errors):
        return None
    text = _text(ctx)
    if not black or _FORMAT_SAID.search(text):
        return None
    sizes = [max(int(a), int(b)) for a, b in _RESOLUTION.findall(text)]
    sized = len(set(_RESOLUTION.findall(text))) >= 2 or _SIZE_WORDS.search(text)
    if not sized or (sizes and max(sizes) <= _ORDINARY_SIDE) or _small_gpu(text):
        # black already at an ordinary size, or on a small GPU: fp16 on a card that computes it badly, precision's
        return None
    amd = _vendor(ctx) == "amd"
    other = ("--use-split-cross-attention (or --use-quad-cross-attention) in ComfyUI, --opt-sub-quad-attention in the "
             "web UI" if amd else
             "run without it: ComfyUI --use-pytorch-cross-attention, the web UI without --xformers (--opt-sdp-attention)")
    return _first(_make(
        "attention", "black pictures past some size: the attention kernel",
        "the picture turns black only at large resolutions, where the attention runs over many more tokens; the "
        "memory-efficient attention kernel in use (xformers where it is installed) returns NaN or garbage past a size "
        "instead of failing",
        "change the attention kernel, not the number format: pip install xformers at the release before the one "
        "installed (the one built for this torch: pip install \"xformers==<previous>\"), or " + other +
        "; if the pictures are black at every size it is the VAE in fp16 (--fp32-vae / --no-half-vae)",
        [], black[:1]))
