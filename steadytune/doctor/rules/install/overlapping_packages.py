"""A package's core module missing ("No module named 'triton.language'") while the package itself imports: every
release of it has that module, so no release mix-up explains it. The package folder is damaged, and the usual way it
gets so is two distributions that install the same import name (triton and pytorch-triton, onnxruntime and
onnxruntime-gpu): pip keeps one record per distribution, so installing one over the other, or uninstalling one, leaves
the shared folder with parts of each or with files deleted. The fix removes every distribution of that name until
the import fails, then installs one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.packages import read_import_failure
from steadytune.doctor.rules.base import Context, Diagnosis, _make, rule


@dataclass(frozen=True)
class SharedName:
    module: str                  # the import name the distributions share
    core: tuple[str, ...]        # its submodules every release has had
    distributions: tuple[str, ...]
    which: str                   # which one to install back
    source: str


SHARED_NAMES = (
    SharedName("triton", ("language", "runtime", "compiler"),
               ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-windows"),
               "the one this torch pins (reinstalling torch from its index brings it: pytorch-triton for nightlies, "
               "pytorch-triton-rocm for ROCm builds, triton for CUDA releases; triton-windows on Windows)",
               "torch's wheel metadata pins its Triton (triton, pytorch-triton, pytorch-triton-rocm), all of which "
               "install the import name triton"),
    SharedName("onnxruntime", ("capi",),
               ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-rocm"),
               "the one build for this machine (onnxruntime-gpu for CUDA, onnxruntime-directml on Windows, "
               "onnxruntime for the CPU)",
               "onnxruntime.ai install docs: install only one of the onnxruntime packages in an environment"),
)


@rule("wheel-platform")
def shared_import_name_damaged(ctx: Context) -> Optional[Diagnosis]:
    """A core submodule of a package that several distributions install is missing: the folder is a mix of them."""
    failure = read_import_failure(ctx.sheet.lines)
    if failure is None or failure.name is not None or failure.attribute:
        return None
    parts = failure.module.split(".")
    shared = next((s for s in SHARED_NAMES if parts[0] == s.module and len(parts) == 2 and parts[1] in s.core), None)
    if shared is None:
        return None
    everyone = " ".join(shared.distributions)
    return _make("wheel-platform", f"the {shared.module} package folder is damaged",
                 f"{failure.module} is part of every {shared.module} release, so its absence is no release mix-up: "
                 f"the {shared.module} folder in site-packages is damaged, typically by two distributions that install "
                 f"the import name {shared.module} ({', '.join(shared.distributions)}) written over each other or one "
                 "of them uninstalled from under the other",
                 f"pip list | grep -i {shared.module} shows them; pip uninstall -y {everyone}, repeated until python -c "
                 f"'import {shared.module}' fails with ModuleNotFoundError (delete a {shared.module} folder left in "
                 f"site-packages), then install one: {shared.which}",
                 [ctx.line_fact(ErrorLine(failure.line_no, failure.line, None))],
                 [ErrorLine(failure.line_no, failure.line, None)])
