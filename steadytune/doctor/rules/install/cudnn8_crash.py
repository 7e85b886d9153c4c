"""A program crashing inside a cuDNN 8 DLL it bundles (abi-mismatch): Windows' application error names the faulting
module (cudnn64_8.dll, cudnn_ops_infer64_8.dll, ...) in the program's own folder, with an exception code such as
0xc0000409 or 0xc0000005. cuDNN 8's Windows builds are made per CUDA major: a program that ships cuDNN 8 (CTranslate2
3.x inside Buzz, Faster-Whisper standalone builds) ships the CUDA 11 build, which takes cuBLAS and the CUDA runtime
from the CUDA 11 found on PATH. With a CUDA 12 toolkit first on PATH, or an older CUDA 11 than the bundle was made
for, the DLLs it meets are not the ones it was built against, and it crashes instead of failing to load.
The fix is the CUDA 11 release the bundle was built for on PATH: 11.8, the last CUDA 11 (chidiwilliams/buzz#723: the
crash with CUDA 11.4 and 12.4 went away with CUDA 11.8; cuDNN 8.9's support matrix lists its CUDA 11 build for
11.0-11.8)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

# the faulting module, as Windows' event log or WER names it: a cuDNN 8 DLL
_FAULTING = re.compile(r"(?i)(?:Faulting|Error) module (?:name|path):?\s*.*?\b(cudnn\w*64_8\.dll)\b")
_CRASH_CODE = re.compile(r"(?i)Exception code:?\s*0xc0000(?:409|005|374)|0xc0000409|0xc0000005")
_CUDA_SAID = re.compile(r"(?i)\bCUDA\s*v?(\d{2})\.(\d)\b")


@rule("abi-mismatch")
def bundled_cudnn8_crash(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Windows naming a cuDNN 8 DLL as the faulting module of a crash, and the CUDA releases the paste
    names (none of them 11.8)."""
    lines = _lines_matching(ctx, _FAULTING)
    text = _text(ctx)
    if not lines or not _CRASH_CODE.search(text):
        return None
    said = sorted({f"{m.group(1)}.{m.group(2)}" for m in _CUDA_SAID.finditer(text)})
    if "11.8" in said:
        return None   # the CUDA it wants is there: something else crashes it
    dll = _FAULTING.search(lines[0].line).group(1)
    have = f" (this machine has CUDA {' and '.join(said)})" if said else ""
    return _make("abi-mismatch", f"the program's bundled {dll} crashes against the CUDA on PATH",
                 f"{dll} is cuDNN 8's CUDA 11 build, shipped inside the program; it takes cuBLAS and the CUDA runtime "
                 f"from the CUDA found on PATH, which is not the CUDA 11 release it was built for{have}",
                 "install CUDA 11.8 (the last CUDA 11 release, which the program's cuDNN 8 build runs on) and put its "
                 "bin folder first on PATH (CUDA_PATH pointing at v11.8), then start the program again; a CUDA 12 "
                 "toolkit can stay installed beside it", [ctx.line_fact(lines[0])], lines[:1])
