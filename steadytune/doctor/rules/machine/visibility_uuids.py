"""GPUs chosen by UUID for a torch that reads only numbers: CUDA_VISIBLE_DEVICES may name GPUs by index or by UUID
("GPU-8932f937-...", a unique prefix too; schedulers such as HTCondor hand out UUIDs), but torch before 2.0 parsed the
variable for its NVML-based device count as integers only, so a UUID entry was dropped and torch.cuda.device_count()
said 0 while CUDA itself saw the GPU. pytorch/pytorch PR 92315 ("Fix NVML visible device parsing", January 2023, in
torch 2.0) taught it UUIDs (full and partial). Sources: pytorch/pytorch#90543 and PR 92315."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_UUID_VALUE = re.compile(r"^(?:GPU|MIG)-")
# the symptom: no GPU counted, in torch's words or the user's
_NONE_COUNTED = re.compile(r"(?i)device_count\(\)\W{0,20}(?:returns?|is|gives?|=|says?)?\W{0,4}0\b|\bbut it is 0\b|"
                           r"result (?:is|was) 0\b|No CUDA GPUs are available|is_available\(\)\W{0,12}(?:returns?\W{0,3})?False|"
                           r"\bentries are ignored\b")


def _torch_release(ctx: Context) -> Optional[tuple[int, int]]:
    for value in ctx.sheet.values("torch"):
        m = re.match(r"(\d+)\.(\d+)", value)
        if m:
            return int(m.group(1)), int(m.group(2))
    said = re.search(r"(?i)\b(?:py)?torch(?: version)?:?\s*v?(\d)\.(\d{1,2})\b", _text(ctx))
    return (int(said.group(1)), int(said.group(2))) if said else None


@rule("visibility")
def uuid_visible_devices_before_torch_2(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: CUDA_VISIBLE_DEVICES set to GPU UUIDs, a torch before 2.0, and no GPU counted."""
    uuid = next((f for f in ctx.sheet.of("env") if f.value.startswith("CUDA_VISIBLE_DEVICES=")
                 and _UUID_VALUE.match(f.value.split("=", 1)[1].strip("\"'"))), None)
    if uuid is None:   # said in words ("the batch system sets CUDA_VISIBLE_DEVICES=GPU-...")
        uuid = next((f for f in _lines_matching(ctx, r"\bCUDA_VISIBLE_DEVICES\s*=\s*[\"']?(?:GPU|MIG)-")), None)
        uuid = ctx.line_fact(uuid) if uuid else None
    release = _torch_release(ctx)
    if uuid is None or release is None or release >= (2, 0):
        return None
    said = _lines_matching(ctx, _NONE_COUNTED)
    if not said:
        return None
    torch = ".".join(str(x) for x in release)
    return _first(_make(
        "visibility", f"torch {torch} does not read GPU UUIDs in CUDA_VISIBLE_DEVICES",
        f"CUDA_VISIBLE_DEVICES names the GPU by UUID, which CUDA accepts; torch before 2.0 (this is {torch}) parsed the "
        "variable as integers only for its device count, dropped the UUID entries and counted 0 GPUs",
        "upgrade to torch 2.0 or later (it resolves full and partial GPU- UUIDs: pytorch PR 92315); on this torch give "
        "the GPUs by index instead (nvidia-smi -L lists each index with its UUID), e.g. have the scheduler's UUID "
        "mapped to its index before python starts",
        [uuid], said[:1]))
