"""Docker's NVIDIA hook failing to initialise inside WSL 2 (wsl): "nvidia-container-cli: initialization error: driver
error: failed to process request" (or "WSL environment detected but no adapters were found") from `docker run --gpus`
in a WSL 2 distribution or Docker Desktop's WSL 2 backend. Under WSL 2 the container's GPU comes from Windows: its GPU
paravirtualisation (/dev/dxg) and the Windows NVIDIA driver's WSL libraries (/usr/lib/wsl/lib). Windows 10 has that
from 21H2 (build 19044) and Windows 11 from its first release; before 21H2 only Windows Insider preview builds (the
Dev channel) had it. A Linux NVIDIA driver installed inside the distribution shadows the WSL libraries and breaks it
too. Nothing in the container or the toolkit mends a Windows side that gives WSL no GPU.

Sources: docker/for-win#10379 (the reporter's fix: the current Insider build, with NVIDIA's WSL driver, at a time
when only Insider builds had GPU compute in WSL 2); rules/access/wsl.py's released-build table (GPU-PV in Windows 10
from 21H2, 19044); NVIDIA's CUDA on WSL user guide (do not install a Linux display driver inside WSL; the Windows
driver supplies libcuda through /usr/lib/wsl/lib)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_INIT = re.compile(r"(?i)nvidia-container-cli:? initialization error:? (?:driver error|WSL environment detected but no "
                   r"adapters)")
# WSL in the paste: the word, its kernel, Docker Desktop for Windows' pages, a Windows machine's default host name at a
# Linux prompt (root@DESKTOP-5A67SBM)
_WSL = re.compile(r"(?i)(?<![A-Za-z])wsl ?2?(?![A-Za-z])|microsoft-standard|docker-for-windows|Docker Desktop|"
                  r"\w+@DESKTOP-[A-Z0-9]+[:\s]|/mnt/c/")


@rule("wsl")
def wsl_docker_init(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the NVIDIA hook's initialization error and WSL in the paste."""
    text = _text(ctx)
    said = _lines_matching(ctx, _INIT)
    if not said or not (ctx.sheet.has("platform", "wsl") or _WSL.search(text)):
        return None
    return _first(_make(
        "wsl", "WSL 2 gives the container no GPU: the Windows side lacks GPU compute for WSL",
        "under WSL 2 docker's NVIDIA hook takes the GPU from Windows (GPU paravirtualisation through /dev/dxg and the "
        "Windows NVIDIA driver's libraries in /usr/lib/wsl/lib); it fails to initialise when the Windows build or "
        "driver gives WSL no GPU, or a Linux NVIDIA driver installed inside the distribution shadows the WSL libraries",
        "fix it on the Windows side: a Windows build with GPU compute in WSL 2 - Windows 11, or Windows 10 21H2 (build "
        "19044) or newer (winver; before 21H2 only Windows Insider preview builds, the Dev channel, had it) - and the "
        "current Windows NVIDIA driver (Game Ready / Studio, which carries the WSL support); then wsl --update and "
        "wsl --shutdown; inside the distribution remove any Linux NVIDIA display driver (sudo apt purge "
        "'nvidia-driver-*', keeping the container toolkit's packages), check nvidia-smi there first, then docker run --rm --gpus all ubuntu nvidia-smi",
        [], said[:1]))
