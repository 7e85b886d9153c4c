"""SGLang running out of memory while prefilling long prompts: one chunk of --chunked-prefill-size
tokens did not fit beside the weights and the KV cache. SGLang's troubleshooting page: a smaller chunk.
Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_OOM = re.compile(r"(?i)out of memory|OutOfMemoryError|\bOOM\b")
_PREFILL = re.compile(r"(?i)\bprefill\b|forward_extend|\bextend\b|long (?:prompts?|inputs?|context)|"
                      r"\b\d+k[- ]tokens?\b|\b\d{5,} tokens\b")
_GRAPH_CAPTURE = re.compile(r"(?i)capture cuda graph|cuda graph capture|cuda-graph-max-bs")


@rule("out-of-memory")
def sglang_prefill_oom(ctx: Context) -> Optional[Diagnosis]:
    """SGLang's troubleshooting page: out of memory during prefill -> a smaller --chunked-prefill-size, so a long
    prompt is prefilled in pieces."""
    # the defaults, corrected in round 18 (sgl-project/sglang python/sglang/srt/server_args.py, chunked prefill size by
    # GPU memory: under 35 GB 2048, under 160 GB 8192, else 16384; 4096 when the memory is unknown)
    text = _text(ctx)
    if "sglang" not in ctx.sheet.tools or _GRAPH_CAPTURE.search(text):
        return None
    oom = _lines_matching(ctx, _OOM)
    if not oom or not _PREFILL.search(text):
        return None
    return _first(_make(
        "out-of-memory", "SGLang ran out of memory prefilling long prompts",
        "a long prompt is prefilled in chunks of --chunked-prefill-size tokens (by default 2048 on GPUs under 35 GB, "
        "8192 on A100 / H100 / H200-class ones, 16384 above; -1 turns chunking off); one chunk's activations did not "
        "fit beside the weights and the KV cache",
        "start the server with a --chunked-prefill-size below its default (4096 on an A100 / H100-class GPU, 1024 on "
        "one under 35 GB, where the default is already 2048), and if it still runs out lower --mem-fraction-static "
        "(0.8, 0.7) or --max-running-requests",
        oom[:1], oom[:1]))
