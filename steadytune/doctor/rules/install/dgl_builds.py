"""DGL's builds per torch and per CUDA. DGL 2.x ships its C++ parts that link torch (GraphBolt, dgl_sparse) as one
library per torch release (graphbolt/libgraphbolt_pytorch_2.3.0.so); under a torch no such library was built for, the
import fails ("Cannot find DGL C++ graphbolt library", "Cannot load Graphbolt C++ library"). Its wheels are published
per torch and CUDA on DGL's own index (data.dgl.ai/wheels/torch-2.3/cu121/repo.html), older ones per CUDA alone
(dgl-cu101 on PyPI, dgl-cuda10.1 on the dglteam conda channel, later data.dgl.ai/wheels/cu118/repo.html).

Two readings:
- a DGL library for the paste's torch release missing: the DGL release that has one, or the torch the table says
  (abi-mismatch);
- a package whose name carries one CUDA release (dgl-cuda10.0, dgl-cu100, cupy-cuda110, mxnet-cu101) asking for
  another release's CUDA runtime: the package itself is a build for that other CUDA, so installing its build for the
  CUDA named, through pip (DGL's index for DGL), not a second toolkit, is the fix (rocm-libs-missing).

Sources: DGL's install page (www.dgl.ai/pages/start.html: wheels and conda labels per torch and CUDA); dmlc/dgl issue
7247 (DGL 2.1.0 supports torch up to 2.2.1), 7450 (DGL 2.2 not torch 2.3.1), 7822 (DGL 2.4 not torch 2.4.1), 7157
(torch 2.2 with a DGL built up to torch 2.1), 919 (conda dgl-cuda10.0 linked against cudart 9.2; pip's build works)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.shared import _cuda_label

_DGL = re.compile(r"(?i)\bdgl\b|\bgraphbolt\b|\bdgl_sparse\b")
# a DGL library built per torch release that is not there
_NO_TORCH_LIBRARY = re.compile(r"(?i)(?:can ?not|can't|could not|unable to|failed to) (?:find|load)\b.{0,30}"
                               r"\b(graphbolt|sparse)\b.{0,30}\blibrary|\blib(graphbolt|dgl_sparse)_pytorch_[\d.]+\w*\.(?:so|dylib|dll)"
                               r"\b.{0,40}(?:not found|no such file|cannot open)|(?:can ?not|can't|could not|unable to|failed to) "
                               r"(?:find|load)\b.{0,30}\blibrar(?:y|ies)\b.{0,10}\b(graphbolt|dgl_sparse)\b")
# (first DGL release with the libraries for a torch minor release, the last torch patch release it covers) where DGL's
# own maintainers said so; a torch minor without a row has no DGL build (DGL 2.4 was built for torch 2.4.0 at most)
_DGL_FOR_TORCH = {(2, 0): ("2.0.0", "2.0.1"), (2, 1): ("2.0.0", "2.1.2"), (2, 2): ("2.1.0", "2.2.1"),
                  (2, 3): ("2.2.0", "2.3.0"), (2, 4): ("2.4.0", "2.4.0")}
_NEWEST_TORCH = "2.4.0"
_TORCH = (re.compile(r"lib(?:graphbolt|dgl_sparse)_pytorch_(\d+)\.(\d+)(?:\.(\d+))?"),
          re.compile(r"(?i)\b(?:py)?torch\b\W{0,3}(?:version\W{0,3})?(\d+)\.(\d+)(?:\.(\d+))?"))


def _torch(text: str) -> Optional[tuple[int, int, Optional[int]]]:
    for pattern in _TORCH:
        m = pattern.search(text)
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else None
    return None


def _conda_pair(major: int, minor: int, last: str, known: Optional[str]) -> str:
    """The conda route DGL's install page gives from DGL 2.2: a clean environment with torch from the pytorch channel
    (pytorch-cuda=X.Y picks its CUDA) and DGL from its channel's label for that pair, th<torch>_cu<CUDA>
    (dglteam/label/th21_cu118). The page (dglai/dglai.github.io pages/start.html: the th labels came with its
    2024-05-09 update, before which it gave one label per CUDA, dglteam/label/cu121) lists them for torch 2.1 to 2.4
    with CUDA 11.8 and 12.1 (12.4 for 2.4 only) and never for torch 2.0, so torch 2.0 gets no conda route here."""
    if (major, minor) < (2, 1):
        return ""
    cuda = "12.1" if known == "cu121" else "11.8"
    tag = f"th{major}{minor}_cu{cuda.replace('.', '')}"
    other = ("" if cuda == "12.1" else
             f" (th{major}{minor}_cu121 with pytorch-cuda=12.1 on a driver for CUDA 12)")
    return (f"; or a clean conda environment with the pair DGL builds together: conda create -n dgl python=3.10; "
            f"conda install pytorch={last} pytorch-cuda={cuda} -c pytorch -c nvidia; conda install -c "
            f"dglteam/label/{tag} dgl{other}")


@rule("abi-mismatch")
def dgl_library_for_this_torch_missing(ctx: Context) -> Optional[Diagnosis]:
    """DGL's GraphBolt / sparse library for the installed torch release is missing: DGL has no build for it."""
    lines = _lines_matching(ctx, _NO_TORCH_LIBRARY)
    text = _text(ctx)
    if not lines or not _DGL.search(text):
        return None
    torch = _torch(text)
    if torch is None:
        return None
    major, minor, patch = torch
    said = f"{major}.{minor}" + (f".{patch}" if patch is not None else "")
    plus = re.search(r"(?i)\+\s*(cu\d{3})\b", text)
    label = _cuda_label(ctx) or (plus.group(1).lower() if plus else "cu121")
    row = _DGL_FOR_TORCH.get((major, minor))
    if row is None or (patch is not None and tuple(int(x) for x in row[1].split(".")) < (major, minor, patch)):
        newest = row[1] if row else _NEWEST_TORCH
        fix = (f"install the torch DGL is built for: pip install torch=={newest} --index-url "
               f"https://download.pytorch.org/whl/{label}, then pip install dgl -f https://data.dgl.ai/wheels/"
               f"torch-{'.'.join(newest.split('.')[:2])}/{label}/repo.html (no DGL build names torch {said})")
    else:
        first, last = row
        before = _DGL_FOR_TORCH.get((major, minor - 1))
        back = (f"; or go back to torch {before[1].rsplit('.', 1)[0]} (torch=={before[1]}), which the DGL before "
                f"{first} was built for" if before else "")
        fix = (f"install a DGL built for torch {major}.{minor} (DGL {first} or newer, up to torch {last}): pip install "
               f"--force-reinstall dgl -f https://data.dgl.ai/wheels/torch-{major}.{minor}/{label}/repo.html{back}"
               + _conda_pair(major, minor, last, _cuda_label(ctx) or (plus.group(1).lower() if plus else None)))
    return _make("abi-mismatch", f"this DGL has no GraphBolt/sparse library for torch {said}",
                 f"DGL builds its GraphBolt and sparse libraries once per torch release (libgraphbolt_pytorch_<torch>."
                 f"so); the installed DGL has none for torch {said}, so it was built for other torch releases",
                 fix, [ctx.line_fact(lines[0])], lines)


# a package whose name says the CUDA release it is built for: dgl-cuda10.0, dgl-cu100, cupy-cuda110, mxnet-cu101
_NAMED_CUDA = re.compile(r"(?i)\b(dgl|cupy|mxnet|jaxlib|paddlepaddle-gpu)[-_]cu(?:da)?(\d{1,2})\.?(\d)\b")
_RUNTIME_MISSING = re.compile(r"(?i)\blib(cudart|cublas|cufft|curand|cusparse|nvrtc)\.so\.(\d{1,2})(?:\.(\d))?\b.{0,20}"
                              r"cannot open shared object file")


@rule("rocm-libs-missing")
def package_named_for_another_cuda(ctx: Context) -> Optional[Diagnosis]:
    """A package named for CUDA X.Y asking for the runtime of another CUDA: its build is not the one its name says."""
    text = _text(ctx)
    named = _NAMED_CUDA.search(text)
    lines = _lines_matching(ctx, _RUNTIME_MISSING)
    if named is None or not lines:
        return None
    package, want = named.group(1).lower(), (named.group(2), named.group(3))
    asked = _RUNTIME_MISSING.search(lines[0].line)
    # CUDA 11 and later name their libraries by the major alone (libcudart.so.11.0 serves every 11.x, libcublas.so.12):
    # only the major can differ there
    if asked.group(2) == want[0] and (asked.group(3) is None or int(want[0]) >= 11 or asked.group(3) == want[1]):
        return None   # it asks for the CUDA it names: the toolkit missing, libraries_missing's reading
    other = asked.group(2) + (f".{asked.group(3)}" if asked.group(3) else "")
    version = f"{want[0]}.{want[1]}"
    tag = f"cu{want[0]}{want[1]}"
    if package == "dgl":
        install = (f"pip install dgl -f https://data.dgl.ai/wheels/{tag}/repo.html (DGL before 1.0: pip install "
                   f"dgl-{tag}; DGL 2.x: the torch-<X.Y>/{tag} index of its install page)")
    else:
        install = f"pip install --force-reinstall {package}-{tag} (the {package} build for CUDA {version})"
    return _make("rocm-libs-missing", f"{named.group(0)} asks for CUDA {other}'s runtime",
                 f"the installed {named.group(0)} says CUDA {version}, yet its library asks for lib{asked.group(1)}."
                 f"so.{other}: the package was built against CUDA {other} (a mislabelled build), not the CUDA "
                 f"{version} that is installed",
                 f"replace it with the build for CUDA {version} through pip: remove it (conda remove {named.group(0)} "
                 f"or pip uninstall), then {install}; installing CUDA {other} beside it only hides the mislabelled "
                 "build", [ctx.line_fact(lines[0])], lines)
