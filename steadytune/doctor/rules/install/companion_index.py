"""xformers beside a torch of another CUDA than PyPI's default, then an import that fails: xformers' PyPI wheels
are built for one torch and its default CUDA, so installed beside a torch from another CUDA index (+cu118) they are
another build (or pull another torch and Triton in). The xformers README installs it from the same index as torch
(pip install -U xformers --index-url https://download.pytorch.org/whl/cu118), which keeps the pair matched. The same
index answers xFormers' own report that it was built for another torch (xformers_built_for, which abi.py's reading
of that report asks): the release built for the torch kept, or the torch the xformers was built for."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _make, _text, rule
from steadytune.doctor.rules.install.companion_pins import _companions_of
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


# The xformers release built for each torch release: each xformers wheel pins one torch (its requirement torch==X),
# and its CUDA builds sit on torch's own index beside that torch (xformers' CHANGELOG maps the two; the pins are the
# wheels' own requirements: 0.0.23 torch 2.1.1, 0.0.23.post1 2.1.2, vllm-project/vllm#2158; 0.0.24-0.0.26.post1
# torch 2.2.0-2.3.0, bytedance/MVDream-threestudio#29's resolver output; 0.0.27.post2 torch 2.4.0,
# facebookresearch/xformers#1096; 0.0.30 torch 2.7.0, hpcaitech/Open-Sora#870; every row checked against the
# torch_version of the PyPI wheel build, .github/workflows/wheels.yml at each xformers tag v0.0.19 to v0.0.30)
_XFORMERS_FOR_TORCH = {"2.0.0": "0.0.19", "2.0.1": "0.0.22", "2.1.0": "0.0.22.post7", "2.1.1": "0.0.23",
                       "2.1.2": "0.0.23.post1", "2.2.0": "0.0.24", "2.2.1": "0.0.25", "2.2.2": "0.0.25.post1",
                       "2.3.0": "0.0.26.post1", "2.3.1": "0.0.27", "2.4.0": "0.0.27.post2", "2.4.1": "0.0.28.post1",
                       "2.5.1": "0.0.28.post3", "2.6.0": "0.0.29.post3", "2.7.0": "0.0.30"}
# the CUDA of PyPI's torch wheels on Linux, by torch release (a torch listed without +cuXYZ is that build): pytorch.org's
# install selector and release notes
_PYPI_TORCH_CUDA = {(1, 13): "cu117", (2, 0): "cu117", (2, 1): "cu121", (2, 2): "cu121", (2, 3): "cu121",
                    (2, 4): "cu121", (2, 5): "cu124", (2, 6): "cu124", (2, 7): "cu126", (2, 8): "cu128",
                    (2, 9): "cu128"}
# xFormers' own report: "xFormers was built for: PyTorch 2.2.0+cu121 with CUDA 1201 (you have 2.1.2+cu121)"
_XFORMERS_BUILT = re.compile(r"(?s)xFormers was built for:?\s*PyTorch (\d+\.\d+\.\d+)(?:\+(\w+))?(?: with CUDA (\d{2})"
                             r"(\d)\d)?.{0,40}?\(you have (\d+\.\d+\.\d+)(?:\+(\w+))?\)")


def _release_of(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def xformers_built_for(text: str, windows: bool) -> Optional[tuple[str, str, str]]:
    """xFormers' report of the torch it was built for, against the torch installed: (what, why, fix), the fix
    naming torch's own index for the right CUDA tag (whl/cuXYZ). The same torch with another CUDA tag: the xformers
    build for the installed torch's tag; an xformers made for a newer torch: that torch from xformers' tag's index, or
    the older xformers for the torch kept; a torch upgraded past the xformers: the xformers for the new torch. None for
    a CPU torch (another reading: the CUDA torch is what is missing) or where the report is not there."""
    found = _XFORMERS_BUILT.search(text)
    if found is None:
        return None
    built, built_tag, cuda_major, cuda_minor, have, have_tag = found.groups()
    if (have_tag or "").startswith(("cpu", "rocm")) or (built_tag or "").startswith("rocm"):
        return None
    have_release = _release_of(have)
    have_tag = have_tag or _PYPI_TORCH_CUDA.get(have_release[:2])
    built_tag = built_tag or (f"cu{cuda_major}{cuda_minor}" if cuda_major else None)
    if have_tag is None:
        return None
    embedded = re.search(r"(?i)python_embeded", text)   # the portable ComfyUI's own Python, a Windows build
    windows = windows or bool(embedded)
    pip = "python_embeded\\python.exe -m pip" if embedded else "pip"
    index = "--index-url https://download.pytorch.org/whl/"
    pin = _XFORMERS_FOR_TORCH.get(have)
    keep = (f"{pip} uninstall -y xformers; {pip} install xformers{'==' + pin if pin else ''} {index}{have_tag} (the "
            f"xformers built for torch {have}+{have_tag}{'' if pin else '; its CHANGELOG maps releases to torch'})")
    what = f"xformers is built for torch {built}{'+' + built_tag if built_tag else ''}, torch is {have}+{have_tag}"
    why = (f"xformers' compiled kernels were built against torch {built}{'+' + built_tag if built_tag else ''} and "
           f"load only beside it; the installed torch is {have}+{have_tag}, so xformers runs without them (or fails)")
    # (PyPI's Windows torch is the CPU build: pytorch/pytorch.github.io PR 757, checked v20)
    plain = (" (a plain pip install torch takes PyPI's build, the CPU-only one on Windows: name the index)"
             if windows else "")
    if _release_of(built) > have_release and built_tag and built_tag.startswith("cu"):
        from_pins = _companions_of(*_release_of(built)[:2])
        companions = (f" torchvision=={from_pins[0]}.* torchaudio=={from_pins[1]}.*" if from_pins else
                      " torchvision torchaudio")
        fix = (f"move torch to the one xformers was built for: {pip} install -U torch=={built}{companions} "
               f"{index}{built_tag}{plain}; or keep torch {have} and install its own xformers: {keep}")
        return what, why, fix
    if _release_of(built) < have_release:
        why += " (torch was upgraded after xformers was installed)"
    return what, why, f"install the xformers for the installed torch from torch's own index: {keep}; then python -m " \
                      "xformers.info must list its kernels as available"
