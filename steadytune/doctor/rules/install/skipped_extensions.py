"""A package whose plain `pip install` leaves its CUDA extension out: the package installs and imports, then says at
run time that its CUDA kernels are not there ("please install with cuda_ext", "CUDA extension ... not installed"). The
extension is built only when an environment variable asks for it at install time, or comes in the project's own
prebuilt wheels; pip's --global-option does not turn it on. One row per package, from its install page.

Facts: ColossalAI's setup.py, read at each release tag in v20 (hpcaitech/ColossalAI): v0.1.x and v0.2.0 build the
extension by default when nvcc matches torch's CUDA, NO_CUDA_EXT=1 (v0.1.2: --no_cuda_ext) leaves it out; v0.2.1 to
v0.3.4 build it only with CUDA_EXT=1; v0.3.5 (2024-02-08) and later read BUILD_EXT=1 (v0.3.5's README still said
CUDA_EXT=1; the current README says BUILD_EXT=1). Corrected v20: this said 0.2.x to 0.3.3 read CUDA_EXT and BUILD_EXT
came with 0.3.6, and led with CUDA_EXT=1, which a current release ignores. Its installation page
(colossalai.org/docs/get_started/installation: "BUILD_EXT=1 pip install colossalai", extensions otherwise built at run
time); ColossalAI#774's maintainers pointed at the prebuilt wheels with the CUDA extension at
https://www.colossalai.org/download.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# package -> (how its message names the missing extension, the fix)
_PACKAGES = {
    "colossalai": (re.compile(r"(?i)install with cuda_ext|cuda_ext\b.{0,40}\b(?:not|no)\b|colossal.{0,60}CUDA extension"
                              r".{0,40}(?:not (?:installed|built|found)|skipped)"),
                   "take ColossalAI's prebuilt wheel that has the CUDA extension built in (https://www.colossalai.org/"
                   "download, the one for your torch and CUDA), or build it at install time with the variable its "
                   "setup.py reads: pip uninstall -y colossalai; BUILD_EXT=1 pip install colossalai (0.3.5 and "
                   "later; 0.2.1 to 0.3.4 read CUDA_EXT=1 instead; 0.1.x and 0.2.0 build it by default, only "
                   "NO_CUDA_EXT=1 leaves it out, so there it was skipped because nvcc was missing or did not match "
                   "torch's CUDA) with nvcc of the CUDA torch was built with on PATH; "
                   "--global-option / --global_option does not turn it on"),
}


@rule("torch-build")
def cuda_extension_left_out(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    for package, (said, fix) in _PACKAGES.items():
        if package not in text.lower():
            continue
        lines = _lines_matching(ctx, said)
        if not lines:
            continue
        return _make("torch-build", f"{package} was installed without its CUDA extension",
                     f"a plain pip install of {package} skips building its CUDA kernels (only an install-time variable "
                     "or the project's prebuilt wheel brings them), so it runs without them and says so",
                     fix, [ctx.line_fact(lines[0])], lines[:1])
    return None
