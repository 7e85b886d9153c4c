"""Ollama asked to use only some of several GPUs: which ones the server sees is set in the
server's own environment (CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, UUIDs steadier than numbers), not the client's.
Ollama's GPU page. Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, _vendor, rule


# "use only the 4090", "only one GPU", "limit ollama to GPU 1", "just the second card" (a card or a count, never a
# bare "only use GPU", which asks for the GPU instead of the CPU)
_SOME = (r"(?:(?:one|a single|the (?:first|second|third|fourth|last)) (?:GPU|card)|(?:GPU|card|device) ?#?\d\b|"
         r"(?:the |my )?(?:[GR]TX ?)?\d{4}\b|RX ?\d{3,4}\b|A\d{3,4}\b)")
_ONLY_SOME = re.compile(r"(?i)\b(?:only|just)\s+(?:use\s+|run\s+on\s+|on\s+|load\s+onto\s+)?(?:the\s+|my\s+)?" + _SOME +
                        r"|\b(?:limit|restrict|pin)\w*\b[^\n]{0,25}\bto\s+(?:the\s+|my\s+)?" + _SOME +
                        r"|\b(?:use|run on|load onto)\b[^\n]{0,20}\bonly\s+(?:the\s+|my\s+)?" + _SOME)
# the opposite wish: the model spread over both / all GPUs (OLLAMA_SCHED_SPREAD's reading)
_SPREAD = re.compile(r"(?i)\b(?:use|on|across|over) (?:both|all)\b|\bspread\b|\bsplit\b[^\n]{0,20}\bGPUs\b")
_UUID_LINE = re.compile(r"GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)")


@rule("visibility")
def ollama_on_some_gpus(ctx: Context) -> Optional[Diagnosis]:
    """Ollama's GPU page: to keep the server to some of several GPUs, CUDA_VISIBLE_DEVICES (NVIDIA) or
    ROCR_VISIBLE_DEVICES (AMD) in the server's environment; UUIDs are steadier than numbers, whose order may vary."""
    if "ollama" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _ONLY_SOME)
    text = _text(ctx)
    several = len(ctx.sheet.of("gpu")) >= 2 or _UUID_LINE.search(text) or re.search(
        r"(?i)\b(?:[2-8]|two|three|four) ?x? ?(?:GPUs|cards)\b|\b[2-8]x ", text)
    if not said or not several or _SPREAD.search(text):
        return None
    amd = _vendor(ctx) == "amd" and not any(a.startswith("sm_") for a in ctx.sheet.machine_archs)
    name = "ROCR_VISIBLE_DEVICES" if amd else "CUDA_VISIBLE_DEVICES"
    value = "<the GPU's UUID from rocminfo, or its index>" if amd else "<the GPU's UUID from nvidia-smi -L>"
    # the card the user named, found in nvidia-smi -L's listing: its UUID
    wanted = re.search(r"(?i)\b((?:[GR]TX ?)?\d{4}(?: Ti| SUPER)?|A\d{3,4})\b", said[0].line)
    for _index, card, uuid in _UUID_LINE.findall(text):
        if wanted and wanted.group(1).replace(" ", "").lower() in card.replace(" ", "").lower():
            value = uuid
            break
    return _first(_make(
        "visibility", "Ollama asked to use only some of the GPUs",
        "the Ollama server uses every GPU it discovers; which ones it may see is set in the server's own environment, "
        "not the client's",
        f"set {name}={value} for the server: sudo systemctl edit ollama.service, under [Service] "
        f"Environment=\"{name}={value}\", then sudo systemctl daemon-reload && sudo systemctl restart ollama (a "
        f"hand-started server: {name}={value} ollama serve; Windows: a user variable, then restart Ollama from the "
        "tray); UUIDs are steadier than numeric ids, whose order may vary", said[:1], said[:1]))
