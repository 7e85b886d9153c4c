"""Ollama's CUDA 12 runner on an NVIDIA driver of the 525 branch or older (round 18, r18b). Ollama ships a cuda_v11
and a cuda_v12 runner and picks one by the driver; from 0.3.7-rc6 it picked cuda_v12 on every CUDA 12 driver, and
the 525 branch (CUDA 12.0) runs that library badly: garbage answers, "illegal memory access", crashes, while
cuda_v11 on the same machine answers fine (ollama#6556, where OLLAMA_LLM_LIBRARY=cuda_v11 was the comparison). The
maintainers' PR #6620 ("Use cuda v11 for driver 525 and older", merged 2024-09-03) makes ollama choose cuda_v11 on
such drivers; the later CUDA 12 builds support drivers from 531 (CUDA 12.1) on (ollama PR #12000's description:
"Today we support v12.1 or newer (531 Feb 2023)")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

# Ollama by name, or by its runner libraries' names (cuda_v11, cuda_v12, cpu_avx2: the names OLLAMA_LLM_LIBRARY takes)
_OLLAMA = re.compile(r"(?i)\bollama\b|\bOLLAMA_\w+|\bcuda_v1[1-3]\b")
_V12 = re.compile(r"(?i)\bcuda_?v12\b|\blibrary=cuda\b.{0,40}\bvariant=v12\b")
_DRIVER = re.compile(r"(?i)Driver Version:?\s*(\d{3})\.\d+|\bdriver (?:version )?(\d{3})\.\d+|nvidia-driver-(\d{3})\b")
_BAD = re.compile(r"(?i)illegal memory access|poor results|garbage|gibberish|nonsense|degrad\w+|crash\w*|"
                  r"CUDA error|segmentation fault|wrong (?:answers?|output)")


@rule("driver")
def ollama_cuda12_on_driver_525(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _OLLAMA.search(text) or not _V12.search(text):
        return None
    driver = _DRIVER.search(text)
    branch = int(next(g for g in driver.groups() if g)) if driver else None
    if branch is None or branch > 525:
        return None
    bad = _lines_matching(ctx, _BAD)
    if not bad:
        return None
    return _make("driver", f"Ollama's CUDA 12 runner misbehaves on NVIDIA driver {branch}",
                 f"driver {branch} runs CUDA 12.0 at most, and Ollama's cuda_v12 runner (its default on CUDA 12 drivers "
                 "since 0.3.7-rc6) gives wrong answers or illegal memory accesses there; its cuda_v11 runner works on "
                 "the same driver",
                 "update Ollama to a release with PR 6620 (\"Use cuda v11 for driver 525 and older\"), which picks the "
                 "cuda_v11 runner on drivers 525 and older; until then start the server with OLLAMA_LLM_LIBRARY=cuda_v11 "
                 "(e.g. OLLAMA_LLM_LIBRARY=cuda_v11 ollama serve, or in the service's / container's environment); or "
                 "update the NVIDIA driver to 535 or newer and keep cuda_v12", [], bad[:2])
