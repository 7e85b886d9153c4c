"""A requirements install that replaced the torch installed before it, after which xformers no longer loads: pip
fills a plain `torch` requirement from PyPI, whose torch is built for one CUDA per release, and the xformers wheel on
PyPI is built against that same PyPI torch. The pair that loads together is PyPI's torch release with the CUDA PyPI
built it for (companion_index's table: torch 2.0 -> cu117, 2.1-2.4 -> cu121, ...); so the fix installs that torch from
torch's own index for that CUDA, then xformers, then the requirements (which then leave torch alone).
Comfy-Org/ComfyUI#99: the README's torch 1.13 cu118 was replaced by requirements.txt's torch 2.0; the maintainer moved
the install to cu117, the CUDA of PyPI's torch 2.0 and its xformers ("The cu117 build should work even if you have
cuda 11.8 installed")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.companion_index import _PYPI_TORCH_CUDA, _XFORMERS_FOR_TORCH
from steadytune.doctor.rules.install.shared import cuda_of_label


# the requirements install said to replace torch (install / upgrade / uninstall / overwrite / pull in another torch)
_REPLACED = re.compile(r"(?i)\brequirements?(?:\.txt)?\b.{0,120}\b(?:install\w*|upgrad\w*|uninstall\w*|replac\w*|"
                       r"overwr\w*|pull\w*|chang\w*)\b.{0,60}\btorch\b|\btorch\b.{0,80}\b(?:replaced|overwritten|"
                       r"uninstalled|upgraded)\b.{0,60}\brequirements?\b")
_XFORMERS_FAILS = re.compile(r"(?i)\bxformers?\b.{0,60}\b(?:fail\w*|not (?:load|work|found|available)\w*|can'?not load|"
                             r"broke\w*|error\w*|won'?t load)|\b(?:fail\w*|unable|can'?t|cannot)\b.{0,30}\bload\w*\b.{0,20}"
                             r"\bxformers\b|xFormers can't load C\+\+/CUDA extensions")
# the torch the requirements put in: "installs Torch 2.0", "Successfully installed ... torch-2.0.0"
_INSTALLED = re.compile(r"(?i)\binstall\w*\s+(?:the\s+)?(?:wrong\s+|newer\s+|latest\s+)?torch(?:\s+version)?\s*v?(\d+)\.(\d+)|"
                        r"Successfully installed\b.*?\btorch-(\d+)\.(\d+)")


@rule("abi-mismatch")
def requirements_replaced_torch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a requirements install said to replace torch, and xformers failing afterwards."""
    text = _text(ctx)
    said = _lines_matching(ctx, _REPLACED)
    if not said or not _XFORMERS_FAILS.search(text):
        return None
    # the torch the requirements installed: said on their own line first (a README's torch may come before it)
    found = next((m for m in map(_INSTALLED.search, (e.line for e in said)) if m), None) or _INSTALLED.search(text)
    release = tuple(int(g) for g in (found.groups()[:2] if found and found.group(1) else
                                     found.groups()[2:] if found else ()) if g is not None)
    label = _PYPI_TORCH_CUDA.get(release) if len(release) == 2 else None
    if label is None:
        return _make("abi-mismatch", "the requirements replaced torch, and xformers no longer matches it",
                     "installing the requirements replaced the torch installed before them with PyPI's, and xformers "
                     "is built for another torch and CUDA than the one now there",
                     "install torch and xformers as one pair: the torch release the requirements ask for from torch's "
                     "index for the CUDA PyPI builds it with, then pip install xformers (PyPI's, built for that torch), "
                     "then the requirements, which then keep that torch; python -m xformers.info must list its kernels",
                     [ctx.line_fact(said[0])], said[:1], confirmed=False)
    torch = f"{release[0]}.{release[1]}"
    # the newest patch release of that torch that xformers has a release for, and that xformers
    pair = max(((v, x) for v, x in _XFORMERS_FOR_TORCH.items() if v.startswith(torch + ".")),
               key=lambda p: tuple(int(n) for n in p[0].split(".")), default=None)
    pinned = f"torch=={pair[0]}" if pair else f"torch=={torch}.*"
    xformers = f"xformers=={pair[1]}" if pair else "xformers"
    return _make("abi-mismatch", f"the requirements replaced torch with {torch}, and xformers no longer matches it",
                 f"installing the requirements replaced the torch installed before them with PyPI's torch {torch}, "
                 f"built for CUDA {cuda_of_label(label)} ({label}); xformers from PyPI is built against that same "
                 "torch and CUDA, and the torch or xformers installed by hand beside it is another build",
                 f"install the pair PyPI builds together, torch first: pip install {pinned} torchvision "
                 f"--index-url https://download.pytorch.org/whl/{label} (a {label} build runs on any driver for that CUDA or newer, "
                 f"whatever CUDA toolkit is installed), then pip install {xformers} (built for that torch), then pip install -r "
                 "requirements.txt (torch is then "
                 "left as it is); python -m xformers.info must list its kernels",
                 [ctx.line_fact(said[0])], said[:1])
