"""A GPU chosen from inside Python (os.environ["CUDA_VISIBLE_DEVICES"] = "1") that the process ignores
(env-not-applied): the CUDA (or HIP) runtime reads the visibility variable once, when the process first initialises
it, and numbers the GPUs from that reading for the rest of the process. Importing torch does not initialise CUDA, but
its first CUDA call does (torch.cuda.is_available(), device_count(), a .cuda() or .to("cuda"), or a library that calls
one of them on import); an assignment after that changes os.environ and nothing else, so the work stays on GPU 0.
The same variable on the command line works, which is how users tell it.

Facts: the CUDA C Programming Guide's environment variables (CUDA_VISIBLE_DEVICES is read when the CUDA runtime
initialises); torch's lazy CUDA initialisation (torch.cuda's _lazy_init, on the first CUDA call); the PyTorch
maintainers' answers in pytorch/pytorch#9158 (set it before importing torch, or on the command line) and #23544
(torch.cuda.is_available() had already initialised CUDA; torch.cuda.set_device or a torch.device chooses the GPU
inside a process); open-mmlab/mmdetection3d#1020 (moved above import torch, it works).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.facts import Fact
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, _vendor, rule

# the variable assigned from Python: os.environ[...] = ..., os.environ.setdefault / update, os.putenv, and the
# os['...'] slip people write for it; the value may be a literal or a name (cudaIndex, args.gpu)
_SET_IN_PYTHON = re.compile(r"\bos(?:\.environ)?\s*\[\s*[\"'](CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES)"
                            r"[\"']\s*\]\s*=\s*([^\s;,)]+)|\bos\.(?:environ\.setdefault|putenv)\(\s*[\"']"
                            r"(CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES)[\"']\s*,\s*([^\s;,)]+)")
# the user's word that the choice has no effect: the work stays on the first GPU, the setting does nothing
_IGNORED = re.compile(r"(?i)\balways\b.{0,40}\b(?:GPU|cuda|card|device|index)|\b(?:GPU|cuda|card|device)\b.{0,40}\balways\b|"
                      r"\bno effect\b|\bdoes ?n[o']?t (?:work|take effect|have (?:any )?effect)|\bnot (?:work|working|"
                      r"take effect|taking effect|respected|honou?red)\b|\b(?:is|was|became|becomes) (?:unavailable|"
                      r"ignored)\b|\blos(?:es|ing|t) (?:its )?(?:efficacy|effect)|\bignor(?:es|ed|ing)\b|"
                      r"\bstill (?:uses?|runs? on|selects?|goes to|on)\b|\bby default\b.{0,20}\b(?:GPU|cuda|index)|"
                      r"无效|不起作用|没有?用|不生效|还是(?:用|在)|总是")
# the same variable on the command line said to work: the proof that the process reads it, just not from there
_COMMAND_LINE = re.compile(r"(?i)\b(?:CUDA|HIP|ROCR)_VISIBLE_DEVICES=\S+\s+(?:python\w*|bash|sh|torchrun|accelerate)\b|"
                           r"\bin (?:the )?(?:bash|shell|terminal|command(?: line)?)\b|\bcommand[- ]line\b|"
                           r"\bexport (?:CUDA|HIP|ROCR)_VISIBLE_DEVICES\b")
_WORKS = re.compile(r"(?i)\bworks?\b|\bworked\b|\bworking (?:fine|well)\b|\buse[sd]? (?:the )?(?:cuda|GPU|device|card)"
                    r"\W{0,2}[1-9]|就可以|可以用|正常")
# what initialises CUDA before the assignment: an import of torch (or a library built on it), a CUDA call
_CUDA_STARTED = re.compile(r"\bimport torch\b|\btorch\.cuda\.(?:is_available|device_count|current_device|init)\(|"
                           r"\.cuda\(\)|\.to\([\"']cuda")
# the user saying that moving the assignment first made it work
_MOVED = re.compile(r"(?i)\b(?:reverse|swap|move|put|place)\w*\b.{0,60}\b(?:works?|worked|solved?)\b|\b(?:top|before)\b.{0,40}"
                    r"\b(?:works?|worked)\b")


# torch 1.12.0 initialised CUDA inside `import torch` (its torch._prims import), so an assignment anywhere after the
# import came too late, where 1.11 and 1.12.1 start CUDA lazily again (pytorch/pytorch#80876: the maintainers traced it,
# the fix shipped in 1.12.1)
_EAGER_RELEASE = re.compile(r"(?i)(?:\btorch\b|\bpytorch\b|\bversion\b|\[)\s*(?:==\s*)?v?1\.12(?:\.0)?(?!\.?\d)")


@rule("env-not-applied")
def visibility_set_after_cuda_started(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a visibility variable assigned from Python, and the user's word that the choice is ignored (the
    work on GPU 0, no effect) or that the same setting works on the command line. Confirmed where the paste shows
    CUDA started before the assignment, the command-line form working, or the reordering that fixed it."""
    if any(e.family not in (None, "visibility", "env-not-applied") for e in ctx.errors):
        return None   # an error of another kind is what failed
    text = _text(ctx)
    assigned = [(n, m) for n, line in enumerate(ctx.sheet.lines, 1) for m in _SET_IN_PYTHON.finditer(line)]
    if not assigned:
        return None
    number, found = assigned[0]
    name = found.group(1) or found.group(3)
    raw = (found.group(2) or found.group(4) or "").strip("\"'`")
    value = raw if re.fullmatch(r"\d+(?:,\d+)*", raw) else "<the GPU index>"
    ignored = _lines_matching(ctx, _IGNORED)
    # (the command line counts where the user says it works there, not where it is only mentioned)
    command_line = _COMMAND_LINE.search(text) and _WORKS.search(text)
    if not ignored and not command_line:
        return None
    started = [n for n, line in enumerate(ctx.sheet.lines, 1) if _CUDA_STARTED.search(line)]
    if started and started[0] > number and not (ignored and command_line) and not _MOVED.search(text):
        return None   # the paste shows the assignment first: the order is right, another cause
    confirmed = bool(command_line or _MOVED.search(text) or (started and started[0] < number))
    index = value.split(",")[0] if value[0].isdigit() else "<index>"
    amd = _vendor(ctx) == "amd" or name != "CUDA_VISIBLE_DEVICES"
    runtime = "HIP" if amd else "CUDA"
    setting = Fact("env", f"{name}={raw}", number, ctx.sheet.lines[number - 1].strip(), "python")
    torch_1120 = bool(_EAGER_RELEASE.search(text)) or any(f.value.split("+")[0] == "1.12.0" for f in ctx.sheet.of("torch"))
    eager = (" - and torch 1.12.0 itself initialised CUDA inside import torch (a regression), so on that release any "
             "assignment after the import is too late" if torch_1120 else "")
    release = ("upgrade to torch 1.12.1, which starts CUDA lazily again (pip install torch==1.12.1 with the same CUDA "
               "build), or " if torch_1120 else "")
    return _first(_make(
        "env-not-applied", f"{name} is set from Python after {runtime} started",
        f"{runtime} reads {name} once, when the process first initialises the GPU: importing torch does not yet, but "
        "its first CUDA call does (torch.cuda.is_available(), device_count(), a .cuda(), or a library that calls them "
        "on import); an assignment after that only changes os.environ, so the process keeps every GPU and works on "
        "GPU 0" + (" (on the command line the variable is there before the process starts, which is why that works)"
                   if command_line else "") + eager,
        release + f"set it before anything starts {runtime}: as the first lines of the entry script, before import torch (and "
        f"before importing any module that imports torch): import os; os.environ[\"{name}\"] = \"{value}\"; then "
        f"import torch; or on the command line: {name}={value} python <script>.py; inside a process that has already "
        f"started {runtime}, choose the GPU with torch.cuda.set_device({index}) or torch.device(\"cuda:{index}\") "
        "instead (indices then count every GPU)", [setting], (ignored or _lines_matching(ctx, _SET_IN_PYTHON))[:2],
        confirmed=confirmed))
