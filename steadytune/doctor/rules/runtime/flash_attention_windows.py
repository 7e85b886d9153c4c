"""A model or node asking for FlashAttention 2 on Windows, where flash-attn is not importable: flash-attn publishes
no official Windows wheels (its release page lists Linux wheels only) and its source build rarely succeeds there, so
"FlashAttention2 has been toggled on, but it cannot be used" follows. The model runs with PyTorch's own attention
(SDPA) instead, which every loader of these models offers; a community-built Windows wheel of flash-attn matching the
app's Python, torch and CUDA is the optional way to keep it (kijai/ComfyUI-Florence2#2: pip install flash-attn failed
on Windows, the loader's attention set to sdpa worked). The loaders' switches: kijai's ComfyUI-Florence2 loaders
(DownloadAndLoadFlorence2Model, Florence2ModelLoader) take attention = flash_attention_2 / sdpa / eager (its
nodes.py); transformers' from_pretrained takes attn_implementation="sdpa". Checked round 19: no official Windows
wheel: Dao-AILab/flash-attention#553 and #565 (tridao: "only tested on Linux"), PR 1036 ("Windows actions", a
contributor's Windows wheel workflow, still open), #1684 (setup.py's guessed win_amd64 wheel URL: "Precompiled wheel not
found. Building from source"), #1502 (Windows wheels only from community forks)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, on_windows, rule, _text

_ASKED = re.compile(r"(?i)FlashAttention ?2? has been toggled on|flash_attention_2|use_flash_attention_2|"
                    r"attn_implementation\W{0,3}flash")
# flash-attn unavailable: the model's refusal, the import, the build, or the user's words that Windows has none
_UNAVAILABLE = re.compile(r"(?i)toggled on, but it cannot be used|No module named '?flash_attn|flash[-_ ]?attn\w*.{0,60}"
                          r"(?:fail|error)|(?:fail|error).{0,60}flash[-_ ]?attn|pip install flash[-_ ]?attn|"
                          r"linux only|(?:not|no) (?:support|wheel)\w*.{0,20}windows|windows.{0,40}(?:not supported|no wheel)")
# pip collecting torch for the wheel: other_python's reading (the wheel went into another Python)
_COLLECTS_TORCH = re.compile(r"(?i)Collecting torch\S*\s*\(from flash[-_]attn|(?:Downloading|Using cached) torch-\d")

_SWITCHES = (
    (r"(?i)Florence-?2", "set attention to sdpa in the Florence2 loader node (DownloadAndLoadFlorence2Model / "
     "Florence2ModelLoader: flash_attention_2 / sdpa / eager)"),
    (r"(?i)from_pretrained|transformers|attn_implementation", "load the model with attn_implementation=\"sdpa\" "
     "(PyTorch's fused attention) instead of \"flash_attention_2\""),
)


@rule("attention")
def flash_attention_on_windows(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: FlashAttention 2 asked for, on Windows, with flash-attn unavailable (not importable, not building,
    or said to be Linux-only), and no sign that it went into another Python."""
    text = _text(ctx)
    asked = _lines_matching(ctx, _ASKED)
    if not asked or not on_windows(ctx, text) or not _UNAVAILABLE.search(text) or _COLLECTS_TORCH.search(text):
        return None
    switch = next((fix for names, fix in _SWITCHES if re.search(names, text)),
                  "switch the model's attention to sdpa (PyTorch's fused attention: the node's or app's attention "
                  "option, attn_implementation=\"sdpa\" in transformers)")
    diagnosis = _make("attention", "FlashAttention 2 is asked for on Windows, where flash-attn has no official build",
                      "the model (or its loader node) is set to FlashAttention 2, but flash-attn is not importable: it "
                      "publishes no Windows wheels and its source build rarely succeeds there",
                      f"{switch}; it needs no extra package. To keep flash-attn, install a community-built Windows "
                      "flash-attn wheel whose cpXY tag, torch and CUDA match the app's own Python and torch, with that "
                      "Python's pip and --no-deps", [], asked[:1])
    # ahead of the general flash-attn readings (attention.py: install it / build it), which assume a Linux wheel
    return _ahead_of(diagnosis, "attention")
