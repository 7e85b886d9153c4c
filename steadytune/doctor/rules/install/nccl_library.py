"""NCCL's own library that a serving engine loads by path (rocm-libs-missing): vLLM's pynccl opens libnccl.so.2 (or
librccl.so.1) with ctypes, apart from torch, and names the file it could not load; where it finds none (an old
vllm-nccl copy never downloaded, a library torch links statically) the fix is the path of one that exists.

Facts: vLLM's environment variables (VLLM_NCCL_SO_PATH: the NCCL library pynccl loads, vllm/envs.py) and
pynccl's "Failed to load NCCL library from ..." message (vllm/distributed/device_communicators/pynccl_wrapper.py);
the nvidia-nccl-cu12 pip package puts libnccl.so.2 under site-packages/nvidia/nccl/lib.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_NOT_LOADED = re.compile(r"(?i)Failed to load NCCL library from (\S+?)\s*\.?(?:\s|$)|"
                         r"\bname 'nccl\w+' is not defined")


@rule("rocm-libs-missing")
def nccl_library(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: vLLM's pynccl naming the NCCL file it could not load."""
    said = _lines_matching(ctx, _NOT_LOADED.pattern)
    if not said or not re.search(r"(?i)\bvllm\b|pynccl", _text(ctx)):
        return None
    loaded = next((m.group(1) for e in said if (m := _NOT_LOADED.search(e.line)) and m.group(1)), "libnccl.so.2")
    rccl = "rccl" in loaded.lower()
    path = ("/opt/rocm/lib/librccl.so.1" if rccl else
            "$(python -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], \"lib\", "
            "\"libnccl.so.2\"))')")
    return _first(_make("rocm-libs-missing", f"vLLM cannot load the NCCL library {loaded}",
                        f"vLLM's own NCCL wrapper (pynccl) loads {loaded} by path, apart from torch, and found no usable "
                        "file there (its separate copy was never installed, or the name resolves to nothing), so the "
                        "workers fail at init_device",
                        f"point vLLM at a library that exists: export VLLM_NCCL_SO_PATH={path}"
                        + ("" if rccl else " (pip install nvidia-nccl-cu12 if that package is missing)") +
                        ", then upgrade vLLM (newer releases find the NCCL torch ships)",
                        [ctx.line_fact(said[0])], said))
