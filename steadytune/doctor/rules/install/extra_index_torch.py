"""A requirements (or package) install that named pytorch.org's CUDA index with --extra-index-url and left the program
without a GPU ("No GPU", "Torch not compiled with CUDA enabled", a +cpu torch): pip treats an extra index as equal to
PyPI and takes the highest version either offers, so when PyPI has a newer torch than the CUDA index carries (each
cuNNN index stops at the last torch release built for that CUDA) or the requirement pins one only PyPI matches, it
installs PyPI's wheel, which on Windows is CPU-only. The fix takes torch from the CUDA index alone (--index-url), before the rest.

Facts: pip's documentation of --extra-index-url (all indexes are equal, no priority between them; "Dependency
confusion"); pytorch.org's previous-versions page (which releases each cuNNN index carries); pytorch.org's Get Started
(PyPI's Windows torch wheel is the CPU build). h2ogpt#890 (Windows, requirements with the cu117 extra index, "No GPU";
fixed by installing the +cu117 torch from that index first).

Checked v20: pip gives the extra index no priority: pip's "Finding Packages" docs, clarified by pypa/pip PR 12587 ("DOC:
Clarify lack of index priority": --index-url and --extra-index-url are both just places to look, with no priority
ordering between them), and pypa/pip#8606 (the maintainers: "treating all indexes as equal is by design"; pip takes the
best candidate across all of them, the behaviour behind dependency confusion, pypa/pip PR 13611's warning on
--extra-index-url). PyPI's Windows torch wheels are the CPU build: pytorch/pytorch.github.io PR 757 (malfet: "Windows CPU
only wheels are available on PyPI", so Get Started's Windows CPU command needs no index) and pytorch/pytorch#131731
(malfet: plain `pip3 install torch` on Windows gives the CPU 2.4.0).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import NOT_DETECTED, Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule


_EXTRA = re.compile(r"(?i)--extra-index-url[ =]+https?://download\.pytorch\.org/whl/(cu\d{3})\b")
_INDEX_ALONE = re.compile(r"(?i)--index-url[ =]+https?://download\.pytorch\.org/whl/cu\d{3}\b")
_NO_GPU = re.compile(r"(?i)\bno GPU\b|Torch not compiled with CUDA enabled|is_available\(\)\W{0,10}False|\+cpu\b|"
                     r"\b(?:runs?|running) (?:only )?on (?:the )?CPU\b|" + NOT_DETECTED[4:])


@rule("torch-build")
def extra_index_gave_pypis_torch(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if _INDEX_ALONE.search(text):
        return None   # torch was already taken from the CUDA index alone: another reading
    extra = _lines_matching(ctx, _EXTRA)
    complaint = _lines_matching(ctx, _NO_GPU)
    if not extra or not complaint:
        return None
    label = _EXTRA.search(extra[0].line).group(1)
    windows = on_windows(ctx, text)
    return _make("torch-build", f"pip took PyPI's torch instead of the {label} build",
                 "--extra-index-url puts pytorch.org's index beside PyPI with no priority: pip installs the highest "
                 "torch either offers, and PyPI's is newer than the last release on that CUDA index (or is the only "
                 "match for the requirement's pin)" + ("; PyPI's Windows torch is the CPU-only build" if windows else
                                                       ", a build without this CUDA"),
                 f"install torch from the CUDA index alone first, pinned to a release that index carries: pip install "
                 f"--force-reinstall torch==<release>+{label} torchvision torchaudio --index-url https://download."
                 f"pytorch.org/whl/{label} (pytorch.org's previous-versions page lists the releases of {label}), then "
                 "pip install -r requirements.txt (torch, already satisfied, stays); python -c \"import torch; "
                 f"print(torch.__version__, torch.cuda.is_available())\" must print +{label} True",
                 [], extra[:1] + complaint[:1], confirmed=windows)
