"""A Windows integration package (整合包: an app with its own Python runtime, unpacked from one archive) whose
published build lacks a file, named in the paste beside that very file: the republished package is the fix, not the
machine. A table, one row per package build and what it lacks, each with where the fact comes from.

  GPT-SoVITS-v3-20250212: its runtime's torch no longer carried the cuDNN 8 DLLs (cudnn_ops_infer64_8.dll,
      cudnn_cnn_infer64_8.dll) that the ASR step's faster-whisper loads (a CTranslate2 built on cuDNN 8), so ASR
      failed; the maintainer rolled torch back and republished the package as GPT-SoVITS-v3-20250212fix2.7z, and
      copying the two DLLs from the v2-240821 package into runtime\\Lib\\site-packages\\torch\\lib worked meanwhile
      (RVC-Boss/GPT-SoVITS#2083).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


@dataclass(frozen=True)
class BundleBuild:
    name: str               # the package build, as its archive names it
    names: re.Pattern       # how a paste names that build (and not its republished one)
    lacks: re.Pattern       # the files it lacks, as the paste names them
    why: str
    fix: str
    source: str


BUNDLES = (
    BundleBuild("GPT-SoVITS-v3-20250212",
                re.compile(r"(?i)GPT-SoVITS-v3-20250212(?!\s*fix)(?![\w-])"),
                re.compile(r"(?i)\bcudnn_(?:ops|cnn|adv)_(?:infer|train)64_8\.dll\b"),
                "its runtime's torch no longer carries the cuDNN 8 DLLs, while the ASR step's faster-whisper (a CTranslate2 built on "
                "cuDNN 8) loads cudnn_ops_infer64_8.dll and cudnn_cnn_infer64_8.dll from torch\\lib",
                "download the republished package, GPT-SoVITS-v3-20250212fix2.7z (torch rolled back, the cuDNN 8 DLLs "
                "back in runtime\\Lib\\site-packages\\torch\\lib); or copy cudnn_ops_infer64_8.dll and "
                "cudnn_cnn_infer64_8.dll from an earlier package (v2-240821's runtime\\Lib\\site-packages\\torch\\lib) "
                "into that folder",
                "RVC-Boss/GPT-SoVITS#2083"),
)


@rule("rocm-libs-missing")
def bundle_release_lacks_file(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a package build of the table named in the paste, and a file it lacks named beside it."""
    text = _text(ctx)
    for row in BUNDLES:
        if not row.names.search(text):
            continue
        lines = _lines_matching(ctx, row.lacks)
        if lines:
            # the package build is known to lack these very files: that settles it before any reading of the
            # machine's own cuDNN (its zlib, its PATH)
            return _first(_make("rocm-libs-missing", f"the {row.name} package was published without files it needs",
                         f"{row.why} ({row.source}): the package build, not the machine, lacks them", row.fix,
                         [ctx.line_fact(lines[0])], lines[:1]))
    return None
