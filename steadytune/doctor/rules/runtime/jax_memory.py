"""JAX's up-front GPU memory: a JAX process (or a library built on JAX) takes most of the GPU's memory the moment JAX
first runs anything on the GPU, with nothing computed yet. That is JAX's allocator preallocating, not a driver or
install fault. Two readings:
  - the memory said taken at import / while idle in a JAX program: the allocator's three documented switches
    (out-of-memory family);
  - the switch set in the script's own os.environ after an import that already started JAX (a library that runs a JAX
    operation at import time): it is read once, so it comes too late (env-not-applied).

Facts: JAX's "GPU memory allocation" page (jax.readthedocs.io/en/latest/gpu_memory_allocation.html): JAX preallocates
75% of the GPU's memory when the first JAX operation runs; XLA_PYTHON_CLIENT_PREALLOCATE=false turns that off,
XLA_PYTHON_CLIENT_MEM_FRACTION=.XX sets the share, XLA_PYTHON_CLIENT_ALLOCATOR=platform allocates exactly what is needed
(slow); the variables must be set before JAX initialises its backend. (nemos#208's maintainer gave the same three.)
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_JAX = re.compile(r"(?i)\bjax(?:lib)?\b|\bflax\b|\bXLA_PYTHON_CLIENT_")
# memory taken, in the user's words: "18Gb of memory used", "75% of the GPU gets preallocated", "takes all the VRAM"
_TAKEN = re.compile(r"(?i)\bpre-?allocat\w*|\b(?:\d+(?:\.\d+)?\s*[GM]i?B|\d{1,3}\s*%|most|all|nearly all|almost all)\b"
                    r".{0,40}?\b(?:used|taken|allocated|occupied|reserved|grabbed|eaten|consumed|filled)\b|"
                    r"\b(?:takes?|took|grabs?|grabbed|uses?|used|eats?|allocates?|occup(?:y|ies))\b.{0,20}\b(?:all|most|"
                    r"\d{1,3}\s*%|\d+(?:\.\d+)?\s*[GM]i?B)\b.{0,20}\b(?:GPU|VRAM|memory)")
# nothing computed yet: at import, idle, before any fit / computation
_IDLE = re.compile(r"(?i)\b(?:on|upon|at|after|just|when|while|by)\s+(?:\w+\s+){0,2}import(?:ing)?\b|\bimport\w*\b.{0,60}"
                   r"\b(?:causes?|takes?|allocates?|uses?|preallocat)|\b(?:this|that) line\b|\bidle\b|"
                   r"\bno (?:\w+ ){0,2}(?:fits?|computations?|training|work|operations?) (?:has|have|was|were|are)? ?"
                   r"(?:been )?(?:done|run|started)|\bbefore (?:any|a single|doing any)\b|\bpre-?allocat")
# a real allocation failure: the out-of-memory readings' own (a batch too large), not the up-front share
_FAILED = re.compile(r"(?i)RESOURCE_EXHAUSTED|Out of memory while trying to allocate|CUDA_ERROR_OUT_OF_MEMORY")

# a framework start-up variable assigned in Python, and the imports before it
_SET_IN_PYTHON = re.compile(r"""os\.environ\s*(?:\[\s*["'](XLA_PYTHON_CLIENT_[A-Z_]+|XLA_FLAGS)["']\s*\]\s*=|\.(?:setdefault|"""
                            r"""update)\s*\(\s*\{?\s*["'](XLA_PYTHON_CLIENT_[A-Z_]+|XLA_FLAGS)["'])""")
_IMPORT = re.compile(r"^\s*(?:import|from)\s+([\w.]+)")
# modules that never start JAX when imported
_HARMLESS = {"os", "sys", "re", "json", "math", "time", "pathlib", "typing", "argparse", "logging", "__future__",
             "dataclasses", "functools", "itertools", "collections", "warnings", "subprocess", "random"}

# libraries that ran a JAX operation at import time, and the release that stopped it (from the libraries' own
# threads): augmax before 0.3.3 ran a JAX op on import, initialising the GPU backend (khdlr/augmax#9, fixed in 0.3.3)
_IMPORT_TIME_JAX = {"augmax": "0.3.3"}


@rule("out-of-memory")
def jax_preallocates_at_start(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _JAX.search(text) or _FAILED.search(text) or _SET_IN_PYTHON.search(text):
        return None
    taken = _lines_matching(ctx, _TAKEN)
    if not taken or not _IDLE.search(text):
        return None
    return _make("out-of-memory", "JAX preallocates most of the GPU's memory when it starts",
                 "JAX's allocator reserves 75% of the GPU's memory the first time JAX runs anything on the GPU (a "
                 "library built on JAX may do that at import); nvidia-smi shows it as used with nothing computed. "
                 "The driver and install are fine",
                 "set the allocator's switch before Python imports JAX (or anything built on it): export "
                 "XLA_PYTHON_CLIENT_PREALLOCATE=false (JAX then allocates as it goes), or a smaller share: export "
                 "XLA_PYTHON_CLIENT_MEM_FRACTION=.30; XLA_PYTHON_CLIENT_ALLOCATOR=platform allocates only what is "
                 "needed and frees it (slow, for debugging); in a script, os.environ[...] lines go above every import",
                 [], taken[:1], confirmed=False)


@rule("env-not-applied")
def jax_variable_set_after_the_import(ctx: Context) -> Optional[Diagnosis]:
    lines = ctx.sheet.lines
    for number, line in enumerate(lines):
        setting = _SET_IN_PYTHON.search(line)
        if not setting:
            continue
        before = [m.group(1) for m in (_IMPORT.match(x) for x in lines[:number]) if m]
        starters = [name for name in before if name.split(".")[0] not in _HARMLESS]
        if not starters:
            continue
        variable = setting.group(1) or setting.group(2)
        value = re.search(r"""=\s*["']([^"']+)["']""", line[setting.end() - 1:])
        value = value.group(1) if value else "false"
        library = next((name.split(".")[0] for name in starters if name.split(".")[0] in _IMPORT_TIME_JAX), None)
        release = (f"; {library} before {_IMPORT_TIME_JAX[library]} ran a JAX operation when imported, which is what "
                   f"started the backend: pip install -U \"{library}>={_IMPORT_TIME_JAX[library]}\" (the release "
                   "that stopped it)") if library else ""
        covered = _lines_matching(ctx, re.compile(re.escape(line.strip())))
        return _make("env-not-applied", f"{variable} is set after JAX has already started",
                     f"JAX reads {variable} once, when its GPU backend starts; an import above the os.environ line ("
                     f"{', '.join(starters[:3])}) already ran JAX (a library can run a JAX operation at import time), "
                     "so the later setting has no effect",
                     f"set it before any import that can touch JAX: put os.environ[\"{variable}\"] = \"{value}\" "
                     f"above import jax and every library built on it (first lines of the script), or export "
                     f"{variable}={value} in the shell before starting Python{release}",
                     [], covered[:1])
    return None
