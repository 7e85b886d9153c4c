"""A flash-attn / xformers / DeepSpeed / apex source build said to take hours: without a working ninja
torch's extension builder compiles one file at a time. flash-attention's README: ninja --version; echo $? must be 0,
MAX_JOBS bounds the compilers' memory. Split out of library_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_EXT_BUILD = re.compile(r"(?i)(?:Building wheel for|pip install|building|compil\w+|setup\.py)\W+(?:[\w-]+\W+){0,3}?"
                        r"(flash[-_]attn|flash[-_]attention|xformers|deepspeed|apex|causal[-_]conv1d|mamba[-_]ssm)")
_SLOW_SAID = re.compile(r"(?i)\b(?:for|over|after|takes?|taking|took|been)\b[^\n]{0,30}\b(?:hours?|hrs?)\b|"
                        r"\b\d+\s*(?:hours?|hrs?|h)\b[^\n]{0,20}\b(?:still|and|later|no progress)|"
                        r"takes? (?:forever|ages)|taking (?:forever|ages)|very slow\w*|never finish\w*|"
                        r"stuck (?:at|on) Building wheel|编译.{0,8}(?:很久|很慢|几个小时)")


@rule("wheel-platform")
def extension_build_without_ninja(ctx: Context) -> Optional[Diagnosis]:
    """A flash-attn (xformers, DeepSpeed, apex ...) source build said to take hours: without a working ninja torch's
    extension builder compiles one file at a time (the flash-attention README: two hours instead of minutes)."""
    text = _text(ctx)
    build = _EXT_BUILD.search(text)
    if not build or not _SLOW_SAID.search(text) or re.search(r"(?i)Killed signal|out of memory|cc1plus.*Killed", text):
        return None
    package = build.group(1).lower().replace("_", "-")
    package = "flash-attn" if package.startswith("flash") else package
    said = _lines_matching(ctx, _SLOW_SAID)
    return _make("wheel-platform", f"the {package} build compiles without ninja",
                 f"{package} compiles its CUDA/HIP kernels through torch's extension builder, which runs them in "
                 "parallel only through ninja; without ninja (or with a broken one) every file is compiled in turn, "
                 "and the build takes hours",
                 "pip install ninja, then check it: ninja --version; echo $? must print 0 (if not: pip uninstall -y "
                 f"ninja && pip install ninja); then MAX_JOBS=4 pip install {package} --no-build-isolation (MAX_JOBS "
                 "bounds the parallel compilers, each of which takes several GB of RAM); or skip the build with a "
                 "prebuilt wheel for this torch, CUDA and Python from the project's releases", [], said[:1],
                 confirmed=False)
