"""Ollama asked to run on the CPU although it found a GPU: hide the GPUs from the server (an
invalid visibility id), pick the CPU runner library, or set num_gpu 0 for one model. Ollama's troubleshooting and GPU
pages. Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _vendor, rule


_WANT_CPU = re.compile(r"(?i)\b(?:force|make|run|use|keep|want|only)\b[^\n]{0,40}\bCPU\b[^\n]{0,20}(?:only|instead|"
                       r"runner|library|\?)|\b(?:skip|ignore|disable|bypass|without)\b[^\n]{0,15}\b(?:the )?GPU\b|"
                       r"\bCPU[- ]only\b")


@rule("visibility")
def ollama_on_the_cpu(ctx: Context) -> Optional[Diagnosis]:
    """Ollama's troubleshooting and GPU pages: an invalid GPU id hides the GPUs (CUDA_VISIBLE_DEVICES=-1), and
    OLLAMA_LLM_LIBRARY picks a runner library by name on the releases that ship several (cpu_avx2)."""
    if "ollama" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _WANT_CPU)
    if not said:
        return None
    amd = _vendor(ctx) == "amd"
    hide = "ROCR_VISIBLE_DEVICES=-1" if amd else "CUDA_VISIBLE_DEVICES=-1"
    service = ("sudo systemctl edit ollama.service, under [Service] Environment=\"%s\", then sudo systemctl "
               "daemon-reload && sudo systemctl restart ollama" % hide)
    return _make(
        "visibility", "Ollama asked to run on the CPU",
        "Ollama loads onto every GPU it discovers; it runs on the CPU when the server sees no GPU, or when it is told "
        "which runner library to use",
        f"hide the GPUs from the server with an invalid id: {hide} ollama serve (for the service: {service}; Vulkan "
        "GPUs: GGML_VK_VISIBLE_DEVICES=-1); on releases that ship several runner libraries pick the CPU one: "
        "OLLAMA_LLM_LIBRARY=\"cpu_avx2\" ollama serve; for one model only: /set parameter num_gpu 0 (or "
        "\"options\": {\"num_gpu\": 0} in the API)", said[:1], said[:1], confirmed=False)
