"""How a process numbers the GPUs a visibility list leaves it (visibility), two readings:

  renumbered       GPUs chosen by a list (accelerate's gpu_ids / --gpu_ids, CUDA_VISIBLE_DEVICES=3,4, HIP_VISIBLE_DEVICES,
                   docker --gpus '"device=2,3"') and the user sees cuda:0, cuda:1 ... in use: nothing is wrong, the
                   process numbers the GPUs it sees from 0, so physical 3,4 are its cuda:0, cuda:1; nvidia-smi (or
                   rocm-smi) outside the process shows which physical cards carry the work.
  not an index     CUDA_VISIBLE_DEVICES set to something that is no GPU index ($0, the shell's or script's own name; an
                   unset $GPU or a missing script argument, which expands to nothing) and no device found: give it an
                   index nvidia-smi -L lists.

Facts: CUDA's programming guide (CUDA_VISIBLE_DEVICES: only the listed devices are visible, enumerated in the listed
order from 0; CUDA_DEVICE_ORDER=PCI_BUS_ID orders them as nvidia-smi does); accelerate's launch docs (--gpu_ids: which
GPUs to use, applied as CUDA_VISIBLE_DEVICES, huggingface/accelerate#3389: the maintainer's answer); bash's special
parameters ($0 expands to the name of the shell or script; an unset variable expands to the empty string)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, _vendor, rule

# a list of GPUs chosen: the variable, accelerate's gpu_ids (config or flag), docker's device list
_CHOSEN = re.compile(r"(?i)\b(?:(CUDA|HIP|ROCR)_VISIBLE_DEVICES|gpu_ids|--gpu[_-]ids|device_ids|--gpus)\W{1,4}"
                     r"(?:device=)?(\d{1,2}(?:\s*,\s*\d{1,2})+|[1-9]\d?)\b")
# the user sees the process on the low indices: "cuda:0, cuda:1 ... are used", "it runs on GPU 0", "device 0 is used"
_LOW_INDEX = re.compile(r"(?i)\b(?:cuda|device|gpu|rank)\s*[:#]?\s*0\b.{0,60}\b(?:are|is|were|was|get|gets|being)?\s*"
                        r"(?:used|chosen|selected|occupied|loaded|utili[sz]ed)|\b(?:uses?|using|runs? on|goes to|"
                        r"lands? on|shows?)\s+(?:the\s+)?(?:cuda|device|gpu)\s*[:#]?\s*0\b|"
                        r"\bcuda:0\s*(?:,\s*cuda:\d\s*)+")


def _renumbered(ctx: Context, text: str) -> Optional[Diagnosis]:
    chosen = _CHOSEN.search(text)
    if not chosen or any(e.family not in (None, "visibility") for e in ctx.errors):
        return None
    if re.search(r"(?i)\bollama\b", text):
        return None   # Ollama's server picks its GPUs in its own way (UUIDs, its Vulkan backend): gpu_choice's readings
    if re.search(r"(?i)os\.environ|os\.putenv|setenv\(|%env\b|%set_env\b", text):
        return None   # set from inside the program: whether it came before CUDA started is machine/late_visibility's
    ids = re.sub(r"\s+", "", chosen.group(2))
    if ids.split(",")[0] == "0":
        return None   # a list that starts at 0 keeps its numbers for the first GPU: no renumbering to explain
    said = _lines_matching(ctx, _LOW_INDEX)
    if not said:
        return None
    amd = _vendor(ctx) == "amd" or (chosen.group(1) or "").upper() in ("HIP", "ROCR")
    name = "HIP_VISIBLE_DEVICES" if amd else "CUDA_VISIBLE_DEVICES"
    smi = "rocm-smi" if amd else "nvidia-smi"
    count = len(ids.split(","))
    inside = ", ".join(f"cuda:{n}" for n in range(count))
    return _first(_make(
        "visibility", "the chosen GPUs are numbered from 0 inside the process",
        f"the GPU list {ids} is applied as {name}={ids}, which hides the other GPUs; the process numbers the GPUs it "
        f"sees from 0, so physical GPUs {ids} are its {inside}: the work is on the GPUs that were chosen",
        f"nothing to change: {name}={ids} makes physical GPUs {ids} appear as {inside} inside the process; check with "
        f"{smi} outside the process (its processes list shows the physical GPU of each process); set "
        "CUDA_DEVICE_ORDER=PCI_BUS_ID as well where the indices must match nvidia-smi's order",
        [], said[:1] + _lines_matching(ctx, _CHOSEN)[:1]))


# CUDA_VISIBLE_DEVICES set to no index: a shell parameter ($0, $1, $GPU, ${GPU_ID}) or nothing at all
_NOT_INDEX = re.compile(r"\b(CUDA|HIP)_VISIBLE_DEVICES=(\$\{?\w+\}?|\"\"|''|(?=\s))")
_NO_DEVICE = re.compile(r"(?i)no CUDA-capable device is detected|cudaErrorNoDevice|No CUDA GPUs are available|"
                        r"No HIP GPUs are available|hipErrorNoDevice|device_count\(\)\W{0,4}(?:=+|returns?|is|->)\s*0\b|"
                        r"is_available\(\)\W{0,4}(?:=+|returns?|is|->)\s*False")


def _not_an_index(ctx: Context, text: str) -> Optional[Diagnosis]:
    chosen = _NOT_INDEX.search(text)
    if not chosen:
        return None
    said = _lines_matching(ctx, _NO_DEVICE)
    if not said:
        return None
    name = f"{chosen.group(1)}_VISIBLE_DEVICES"
    value = chosen.group(2).strip()
    if value.startswith("$"):
        param = value.strip("${}")
        what = ("$0 expands to the name of the shell or script, not to a GPU index" if param == "0" else
                f"${param} is a script argument that expands to nothing when it is not given" if param.isdigit() else
                f"${param} is a shell variable that expands to nothing where it is not set in that shell")
    else:
        what = "an empty value hides every GPU"
    smi = "rocm-smi" if chosen.group(1) == "HIP" else "nvidia-smi -L"
    return _first(_make(
        "visibility", f"{name} holds no GPU index",
        f"the command sets {name}={value}: {what}, so the process is shown no GPU at all",
        f"give it the GPU's index instead of {value or 'an empty value'}: {name}=0 <the command> for the first GPU (the indices {smi} lists), or leave it "
        f"unset to see every GPU; echo ${name} in the same shell shows what it holds",
        [], said[:1] + _lines_matching(ctx, _NOT_INDEX)[:1]))


@rule("visibility")
def gpu_numbering(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    return _not_an_index(ctx, text) or _renumbered(ctx, text)
