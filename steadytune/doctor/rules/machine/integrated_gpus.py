"""A server that leaves an integrated GPU out of its own choice: Ollama 0.30 and newer skip integrated GPUs (AMD APUs'
Radeon 780M / 890M / 8060S, Intel's Iris Xe and Arc iGPUs) unless OLLAMA_IGPU_ENABLE=1 is set for the server, and run
the model on the CPU; its log says "dropping integrated GPU; to enable, set OLLAMA_IGPU_ENABLE=1".

Sources: Ollama's server log line above and its `server config` map listing OLLAMA_IGPU_ENABLE; threads where setting it
brought the APU back (Crosstalk-Solutions/project-nomad#1092 and PR 1074 on Radeon 780M / 890M / 8060S, Ollama 0.30.x;
SirUli/homeassistant-ollama-addon#319 on an Intel Iris Xe with Ollama 0.32.5)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import set_variable
from steadytune.doctor.rules.base import _APU_ARCHS, Context, Diagnosis, _first, _lines_matching, _make, rule, _text


_DROPPED = re.compile(r"(?i)dropping integrated GPU|to enable, set OLLAMA_IGPU_ENABLE")
# integrated GPUs by name where no arch fact says so (Intel's, and AMD's by their graphics model)
_IGPU_NAME = re.compile(r"(?i)\bRadeon(?:\(TM\))? (?:\d{3}M|80[4-6]0S|Vega \d+)\b|\b(?:Iris(?:\(R\))? Xe|UHD Graphics|"
                        r"Arc(?:\(TM\))? (?:Graphics|1[34]0V))\b|\bintegrated (?:GPU|graphics)\b|\biGPU\b")
# the model left on the CPU, as Ollama shows it (ollama ps, its log) or the user says it
_ON_CPU = re.compile(r"(?i)\b100% CPU\b|library=cpu\b|\bruns? (?:only )?on (?:the )?CPU\b|\bsize_vram=0\b|"
                     r"total_vram=\W?0 B\b|\bno longer (?:uses?|runs? on) (?:the )?GPU\b|\bnot (?:run|running) on (?:the )?"
                     r"GPU\b.{0,20}\b(?:anymore|any more)\b")
# Ollama's versions as a paste shows them (0.30.0, v0.31.2): 0.30 is the first release that drops integrated GPUs
_VERSION = re.compile(r"(?<![\d.])v?0\.(\d{2})\.\d+\b")


@rule("visibility")
def ollama_igpu_dropped(ctx: Context) -> Optional[Diagnosis]:
    """Ollama on an integrated GPU that runs the model on the CPU since 0.30 (or says it dropped the iGPU)."""
    text = _text(ctx)
    if not re.search(r"(?i)\bollama\b", text):
        return None
    if any(re.search(r"(?i)OLLAMA_IGPU_ENABLE\W{0,3}(?:=|:)\W{0,2}(?:1|true)\b", line) and not _DROPPED.search(line)
           for line in ctx.sheet.lines):
        return None   # already set for the server (not the log's advice to set it): another reason
    dropped = _lines_matching(ctx, _DROPPED)
    integrated = any(a in _APU_ARCHS for a in ctx.sheet.machine_archs) or _IGPU_NAME.search(text)
    on_cpu = _lines_matching(ctx, _ON_CPU)
    newer = [int(m.group(1)) for m in _VERSION.finditer(text)]
    late = any(v >= 30 for v in newer)   # an older Ollama on the CPU has other reasons (its ROCm build, an override)
    if not dropped and not (integrated and on_cpu and late):
        return None
    fix = set_variable("OLLAMA_IGPU_ENABLE", "1", ctx.sheet, "ollama")
    diagnosis = _make("visibility", "Ollama leaves the integrated GPU out",
                      "Ollama 0.30 and newer drop integrated GPUs from the ones they use unless OLLAMA_IGPU_ENABLE=1 "
                      "is set for the server (its log: \"dropping integrated GPU; to enable, set "
                      "OLLAMA_IGPU_ENABLE=1\"), so the model runs on the CPU although the APU worked with older "
                      "releases",
                      f"set OLLAMA_IGPU_ENABLE=1 for the server: {fix}; then ollama ps must show the model on the GPU",
                      [], dropped or on_cpu[:1], confirmed=bool(dropped))
    return _first(diagnosis)
