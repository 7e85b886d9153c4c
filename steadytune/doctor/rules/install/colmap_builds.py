"""COLMAP without CUDA. COLMAP's SIFT extraction and matching run on the GPU through CUDA when COLMAP was compiled
with it, and otherwise through SiftGPU's OpenGL shaders, which need a desktop OpenGL context with the right
extensions: on a server, over SSH, in a container or under Mesa they fail with "Shader not supported by your
hardware!" / "ERROR: SiftGPU not fully supported" (or "OpenGL ... not supported"). Distribution packages (Debian's and
Ubuntu's apt colmap, Homebrew) are built without CUDA (`colmap -h` prints "without CUDA" beside the commit; COLMAP's
source after 4.1.1, with HIP support, prints "without GPU support" instead: src/colmap/util/version.cc.in, colmap#4420),
so the OpenGL path is the one taken. Sources: COLMAP's install docs (CUDA is optional; -DCUDA_ENABLED,
CMAKE_CUDA_ARCHITECTURES; CMakeLists.txt: option(CUDA_ENABLED "Whether to enable CUDA, if available" ON)) and its FAQ
(--SiftExtraction.use_gpu 0 / --SiftMatching.use_gpu 0 run SIFT on the CPU); colmap issue 1485.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_SIFTGPU = re.compile(r"(?i)SiftGPU (?:is )?not (?:fully )?supported|Shader not supported by your hardware|"
                      r"SiftGPU\b.{0,40}\b(?:OpenGL|GLSL)\b.{0,40}\bnot supported")
_COLMAP = re.compile(r"(?i)\bcolmap\b|\b(?:exhaustive|sequential|vocab_tree|spatial)_matcher\b|\bfeature_extractor\b|"
                     r"--Sift(?:Matching|Extraction)\.")
_WITH_CUDA = re.compile(r"(?i)\bwith CUDA\)")


@rule("torch-build")
def colmap_without_cuda(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _SIFTGPU)
    text = _text(ctx)
    if not lines or not _COLMAP.search(text) or _WITH_CUDA.search(text):
        return None
    stage = "Matching" if re.search(r"(?i)matcher|SiftMatching", text) else "Extraction"
    return _make("torch-build", "this COLMAP was built without CUDA, so SIFT runs on SiftGPU's OpenGL shaders",
                 "COLMAP runs SIFT on the GPU through CUDA only when compiled with CUDA; this build (a distribution "
                 "package is built without it) falls back to SiftGPU's OpenGL path, which this OpenGL context "
                 "(headless, remote, Mesa or an old driver) cannot run",
                 "use a COLMAP compiled with CUDA: build it from source with the CUDA toolkit installed (cmake .. "
                 "-GNinja -DCUDA_ENABLED=ON -DCMAKE_CUDA_ARCHITECTURES=native; ninja; sudo ninja install) or take a "
                 "CUDA build (COLMAP's Windows release marked CUDA, or conda-forge's colmap with a cuda build string); "
                 "colmap -h must then say \"with CUDA\". Until then the CPU runs it: "
                 f"--Sift{stage}.use_gpu 0",
                 [ctx.line_fact(lines[0])], lines[:1])
