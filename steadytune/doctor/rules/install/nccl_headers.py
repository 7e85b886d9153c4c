"""A build that compiles against NCCL (Horovod's NCCL operations, a CUDA extension, a framework from source) stopping
at "fatal error: nccl.h: No such file or directory" (rocm-libs-missing): the NCCL runtime package (libnccl2, or the
library a pip wheel ships) has no header; nccl.h comes with NCCL's development package, which must be the same NCCL
release built for the same CUDA as the toolkit that compiles (NVIDIA's packages are versioned <nccl>+cuda<X.Y>). A
path variable pointing at a folder with no nccl.h in it does not help, whatever the user believes is installed.

Sources: NVIDIA's NCCL installation guide (Ubuntu: libnccl2 and libnccl-dev, pinned as
libnccl2=<version>+cuda<X.Y> libnccl-dev=<version>+cuda<X.Y>; RHEL: libnccl and libnccl-devel); Horovod's GPU install
docs (HOROVOD_NCCL_HOME, or HOROVOD_NCCL_INCLUDE and HOROVOD_NCCL_LIB); horovod/horovod#3378 (nccl.h not found with
HOROVOD_NCCL_INCLUDE=/usr/include: solved by reinstalling NCCL with its dev headers for the CUDA in use)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_NO_HEADER = re.compile(r"(?i)fatal error:\s*['\"<]?nccl\.h['\">]?:? No such file or directory|"
                        r"cannot open source file \"nccl\.h\"")


@rule("rocm-libs-missing")
def nccl_header_missing(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the compiler not finding nccl.h (not RCCL's rccl.h: ROCm builds have their own package)."""
    said = _lines_matching(ctx, _NO_HEADER)
    if not said:
        return None
    text = _text(ctx)
    include = re.search(r"\bHOROVOD_NCCL_INCLUDE=(\S+)", text)
    folder = include.group(1) if include else "/usr/include"
    cuda = ctx.sheet.values("cuda")
    pin = f"+cuda{cuda[-1]}" if cuda else "+cuda<X.Y, the CUDA nvcc --version shows>"
    horovod = re.search(r"(?i)\bhorovod\b", text)
    point = ("then reinstall with HOROVOD_NCCL_HOME=<the NCCL prefix> (or HOROVOD_NCCL_INCLUDE / HOROVOD_NCCL_LIB at "
             "the folders holding nccl.h and libnccl.so) and pip install --no-cache-dir horovod" if horovod else
             "then build again (NCCL_ROOT / NCCL_INCLUDE_DIR at that folder where the build asks for one)")
    return _make(
        "rocm-libs-missing", "NCCL's header is not installed",
        f"the compiler finds no nccl.h (looked for under {folder}): the NCCL runtime package carries the library only; "
        "the header comes with NCCL's development package, for the same NCCL release and CUDA as the toolkit that "
        "compiles",
        f"check ls {folder}/nccl.h; install NCCL's development package matching the runtime and the CUDA toolkit: sudo "
        f"apt install libnccl2=<version>{pin} libnccl-dev=<version>{pin} (RHEL: libnccl-devel; or NVIDIA's NCCL "
        f"tarball for that CUDA, unpacked to a prefix); {point}", [], said[:1], confirmed=True)
