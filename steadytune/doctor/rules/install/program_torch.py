"""A program failing to import a torch name its torch does not have ("cannot import name 'return_and_correct_aliasing'
from 'torch.utils._python_dispatch'" on `import torchtune`), where the program says which torch it is made for: the
torch is older than that, and the fix is that torch release, not another release of the program. A table, one row per
program with the torch release its own README or metadata names; a program the table lacks gets the generic reading
(install/wheels.py: the release the program was written for)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.packages import read_import_failure
from steadytune.doctor.fixes import rocm_index_for
from steadytune.doctor.rules.base import Context, Diagnosis, _cuda_index_for_driver, _make, _text, _vendor, rule


@dataclass(frozen=True)
class ProgramTorch:
    program: str     # pip's name, as the paste says it
    releases: str    # the program's releases the row holds for (a paste naming another release is not read)
    torch: str       # the torch release the program is made and tested for
    source: str


PROGRAM_TORCH = (
    ProgramTorch("torchtune", r"0\.1(?:\.\d+)?", "2.2.2", "torchtune 0.1.x README (PyPI): 'tested with the latest stable PyTorch release "
                                       "(2.2.2) as well as the preview nightly version'"),
)


@rule("wheel-platform")
def torch_older_than_the_program(ctx: Context) -> Optional[Diagnosis]:
    """A torch name missing on a program's import, the program in the table: the torch it is tested with."""
    failure = read_import_failure(ctx.sheet.lines)
    if failure is None or not failure.module.startswith("torch.") or failure.module.startswith("torch._C"):
        return None
    text = _text(ctx)
    row = next((r for r in PROGRAM_TORCH if re.search(rf"(?i)(?<![\w-]){re.escape(r.program)}(?![\w-])", text)), None)
    if row is None:
        return None
    release = re.search(rf"(?i)(?<![\w-]){re.escape(row.program)}\s*(?:==|=|\s|version:?\s*)v?(\d+\.\d+(?:\.\d+)?)", text)
    if release and not re.fullmatch(row.releases, release.group(1)):
        return None   # another release of the program, made for another torch
    said = re.search(r"(?i)\btorch\s*(?:==|=|\s|version:?\s*)v?(\d+\.\d+(?:\.\d+)?)", text)
    if said and tuple(int(x) for x in said.group(1).split(".")) >= tuple(int(x) for x in row.torch.split(".")):
        return None   # the torch is already at least that release: the program is older than it, another reading
    arch, _ = ctx.arch()
    index = rocm_index_for(arch) if _vendor(ctx) == "amd" else _cuda_index_for_driver(ctx, arch)
    gone = f"{failure.name} from {failure.module}" if failure.name else failure.module
    line = ErrorLine(failure.line_no, failure.line, None)
    return _make("wheel-platform", f"torch is older than {row.program} needs",
                 f"{row.program} imports {gone}, which the installed torch does not have yet: {row.program} is made "
                 f"and tested for torch {row.torch} ({row.source})",
                 f"upgrade torch to {row.torch} or newer (pip install -U \"torch>={row.torch}\" torchvision "
                 f"torchaudio) from the index of this GPU's build: {index}; then pip check and import {row.program} "
                 "again", [ctx.line_fact(line)], [line])
