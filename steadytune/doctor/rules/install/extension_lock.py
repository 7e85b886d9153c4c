"""A torch JIT extension (DeepSpeed's ops are built this way) stuck at "Loading extension module X"
after a build that was killed half way: the builder's lock file stays in the extension's folder and every later run
waits on it. DeepSpeed's installation details (https://www.deepspeed.ai/tutorials/advanced-install/). Split out of
library_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_JIT_LAST = re.compile(r"Loading extension module (\w+)|Emitting ninja build file (\S+)")
_EXT_ROOT = re.compile(r"Using (\S+) as PyTorch extensions root")
_WAITS_SAID = re.compile(r"(?i)\b(?:hangs?|hanging|hung|stuck|freez\w*|forever|never (?:returns|finishes|ends)|"
                         r"no progress|waits?|waiting)\b|卡住|卡死|不动")


@rule("abi-mismatch")
def jit_extension_stale_lock(ctx: Context) -> Optional[Diagnosis]:
    """DeepSpeed (or any torch JIT extension) stuck at "Loading extension module X" after a build that was killed
    half way: torch's builder left its lock file in the extension's folder and every later run waits for it."""
    text = _text(ctx)
    last = _lines_matching(ctx, _JIT_LAST)
    if not last or not _WAITS_SAID.search(text):
        return None
    if re.search(r"(?i)\berror\b(?!s? ?=)|Traceback|undefined symbol|failed", text):
        return None
    # torch's own code (torch/utils/cpp_extension.py, checked in round 18 against torch 2.13): the root is
    # TORCH_EXTENSIONS_DIR or user_cache_dir("torch_extensions") (~/.cache/torch_extensions), then a py<XY>_cu<ZZZ>
    # folder, then one per extension; _jit_compile takes FileBaton(<build dir>/lock), and file_baton.py's wait() sleeps
    # while that file exists -- so deleting the extension's folder (the lock with it) is what frees the next run
    names = [m.group(1) for m in _JIT_LAST.finditer(text) if m.group(1)]
    root = _EXT_ROOT.search(text)
    folder = f"{root.group(1).rstrip('.')}/{names[-1] if names else '<the extension>'}" if root else \
        f"~/.cache/torch_extensions/<py and CUDA tag>/{names[-1] if names else '<the extension>'}"
    return _first(_make("abi-mismatch", "a JIT extension build waits on the lock a killed build left",
                        "torch's extension builder (DeepSpeed's ops are built this way, just in time) takes a lock "
                        "file in the extension's folder while compiling; a run killed during that build leaves the "
                        "lock behind, and every later run waits on it without an error",
                        f"stop the run, delete the extension's folder: rm -rf {folder} (or the whole torch_extensions "
                        "root; TORCH_EXTENSIONS_DIR moves it), and start again so it builds once; with several ranks "
                        "let one finish the build first, or pre-build the op: DS_BUILD_CPU_ADAM=1 pip install "
                        "deepspeed (ds_report shows what is installed)", [], last[-1:]))
