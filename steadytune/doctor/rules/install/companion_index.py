"""xformers beside a torch of another CUDA than PyPI's default, then an import that fails: xformers' PyPI wheels
are built for one torch and its default CUDA, so installed beside a torch from another CUDA index (+cu118) they are
another build (or pull another torch and Triton in). The xformers README installs it from the same index as torch
(pip install -U xformers --index-url https://download.pytorch.org/whl/cu118), which keeps the pair matched."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _make, _text, rule
from steadytune.doctor.packages import read_import_failure
from steadytune.doctor.error_lines import ErrorLine


_TORCH_LABEL = re.compile(r"(?i)\btorch\s*(?:==|=|\s)\s*(\d+\.\d+\.\d+)\+(cu\d{3})\b")
_XFORMERS = re.compile(r"(?i)\bxformers\s*(?:==|=|\s)\s*(\d+\.\d+\.\d+(?:\.post\d+)?)")


@rule("wheel-platform")
def xformers_off_torch_index(ctx: Context) -> Optional[Diagnosis]:
    """An import failure with xformers named beside a +cuXXX torch, xformers not from that torch's index."""
    text = _text(ctx)
    if "xformers" not in text.lower():
        return None
    torch, xformers = _TORCH_LABEL.search(text), _XFORMERS.search(text)
    failure = read_import_failure(ctx.sheet.lines)
    if torch is None or xformers is None or failure is None:
        return None
    label = torch.group(2).lower()
    if re.search(rf"(?i)xformers[^\n]{{0,120}}download\.pytorch\.org/whl/{label}", text):
        return None   # installed from the torch's index already: another cause
    version = xformers.group(1)
    return _make("wheel-platform", f"xformers {version} is not the build for torch {torch.group(1)}+{label}",
                 f"xformers {version} from PyPI is built for its default torch and CUDA, not torch "
                 f"{torch.group(1)}+{label}; beside it its compiled parts and the Triton it expects do not match "
                 f"(the failing import of {failure.module} is one sign)",
                 f"install xformers from the torch's own index: pip install -U xformers=={version} --index-url "
                 f"https://download.pytorch.org/whl/{label} (the xformers release built for torch {torch.group(1)}), "
                 "then python -m xformers.info to check it loads its kernels",
                 [ctx.line_fact(ErrorLine(failure.line_no, failure.line, None))],
                 [ErrorLine(failure.line_no, failure.line, None)])
