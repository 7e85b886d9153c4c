"""A package's CUDA extension that was never built: packages installed from source (pip install ., setup.py) compile
their CUDA kernels only where the CUDA toolkit (nvcc, CUDA_HOME) is there at install time, and otherwise install
without them, silently or with a warning; the import of the compiled module then fails. It reads the module's name
against a table of such packages and answers with the toolkit and the package's own build switch.

Sources: ColossalAI's README and setup.py (CUDA kernels built at install by default in 0.1.x-0.2.0, with CUDA_EXT=1 in
0.2.1-0.3.4, with BUILD_EXT=1 from 0.3.5, February 2024: setup.py read at each tag in v20; otherwise built at first
use, which needs the toolkit too; hpcaitech/ColossalAI#1773); GroundingDINO's README (CUDA_HOME must be set
before the install, else it runs without its _C ops); detectron2's and PyTorch3D's install notes (FORCE_CUDA=1);
mmcv's install guide (MMCV_WITH_OPS=1; mmcv-lite has no ops); Deformable DETR's and Mask2Former's ops/make.sh."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule


class ExtensionBuild(NamedTuple):
    package: str
    module: str       # the compiled module, as the import names it (a regex)
    build: str        # the package's own way to build it, once the toolkit is there


_BUILDS = (
    ExtensionBuild("colossalai", r"colossal_C|colossalai\._C(?:\.\w+)?", "BUILD_EXT=1 pip install . in the ColossalAI "
                   "checkout (0.3.5 and later; CUDA_EXT=1 for 0.2.1 to 0.3.4; 0.1.x and 0.2.0 build them by default "
                   "once the toolkit is there), or let its kernels build at first use, which needs the same toolkit"),
    ExtensionBuild("GroundingDINO", r"groundingdino\._C", "pip install --no-build-isolation -e . in the GroundingDINO "
                   "checkout (CUDA_HOME set first, or it installs without its ops)"),
    ExtensionBuild("detectron2", r"detectron2\._C", "FORCE_CUDA=1 pip install --no-build-isolation "
                   "'git+https://github.com/facebookresearch/detectron2.git'"),
    ExtensionBuild("pytorch3d", r"pytorch3d\._C", "FORCE_CUDA=1 pip install --no-build-isolation "
                   "'git+https://github.com/facebookresearch/pytorch3d.git'"),
    ExtensionBuild("mmcv", r"mmcv\._ext", "MMCV_WITH_OPS=1 pip install -e . in the mmcv checkout (or the prebuilt mmcv "
                   "for this torch and CUDA: mim install mmcv; mmcv-lite has no ops)"),
    ExtensionBuild("the MultiScaleDeformableAttention ops (Deformable DETR, Mask2Former, DINO)",
                   r"MultiScaleDeformableAttention", "cd into the model's ops folder and run sh make.sh (python setup.py "
                   "build install)"),
    ExtensionBuild("the gaussian-splatting rasterizer", r"diff_gaussian_rasterization(?:\._C)?|simple_knn(?:\._C)?",
                   "pip install --no-build-isolation submodules/diff-gaussian-rasterization submodules/simple-knn"),
)
_MISSING = re.compile(r"No module named '?([\w.]+)'?|cannot import name '?_C'? from '?([\w.]+)")


# mmcv's packages (its install guide): in 1.x the plain `mmcv` is the lite package without ops and `mmcv-full` the one
# with its compiled ops; from 2.0 `mmcv` carries the ops and `mmcv-lite` does not. So mmcv._ext missing where no source
# build of mmcv is shown is the package without ops, not a toolkit missing at build time
_MMCV_SOURCE_BUILD = re.compile(r"(?i)MMCV_WITH_OPS|setup\.py (?:develop|install|build)|pip install (?:-e )?\.|"
                                r"building (?:wheel|extension)s? for mmcv|mmcv[\w-]*\.tar\.gz|git\+\S*mmcv")
_MMCV_VERSION = re.compile(r"(?i)(?<![\w-])mmcv(-full|-lite)?(?:\s{0,3}(?:==|:|-)\s{0,3}|[ \t]{1,30}|\s+version\s+)v?(\d+)\.(\d+)")


@rule("torch-build")
def mmcv_without_ops(ctx: Context) -> Optional[Diagnosis]:
    lines = [l for l in _lines_matching(ctx, _MISSING) if re.search(r"mmcv\._ext", l.line)]
    text = "\n".join(ctx.sheet.lines)
    if not lines or _MMCV_SOURCE_BUILD.search(text):
        return None
    shown = _MMCV_VERSION.search(text)
    major = int(shown.group(2)) if shown else None
    if major is not None and major >= 2:
        package, fix = ("mmcv-lite" if shown.group(1) == "-lite" else "mmcv 2.x built without ops",
                        "pip uninstall -y mmcv-lite mmcv; pip install -U openmim; mim install \"mmcv>=2.0.0\" (the "
                        "prebuilt mmcv with ops for this torch and CUDA)")
    else:
        package = "mmcv 1.x's plain mmcv package (the lite one)"
        fix = ("pip uninstall -y mmcv; then install mmcv-full, the 1.x package with the compiled ops, prebuilt for this "
               "torch and CUDA: pip install -U openmim; mim install mmcv-full (or pip install mmcv-full -f "
               "https://download.openmmlab.com/mmcv/dist/cu<CUDA>/torch<X.Y>/index.html); an mmdetection 3.x or "
               "newer wants mmcv>=2.0.0 instead, where the package named mmcv carries the ops")
    return _make("torch-build", "mmcv is installed without its compiled ops (mmcv._ext)",
                 f"mmcv._ext is mmcv's compiled ops module; {package} does not ship it, so every model using its ops "
                 "fails at import", fix, [ctx.line_fact(lines[0])], lines[:1])


@rule("rocm-libs-missing")
def extension_never_built(ctx: Context) -> Optional[Diagnosis]:
    """The compiled module of a package that builds its CUDA kernels only where the toolkit is: missing at import."""
    for line in _lines_matching(ctx, _MISSING):
        m = _MISSING.search(line.line)
        name = m.group(1) or f"{m.group(2)}._C"
        row = next((r for r in _BUILDS if re.fullmatch(r.module, name)), None)
        if row is None or (row.package == "mmcv" and not _MMCV_SOURCE_BUILD.search("\n".join(ctx.sheet.lines))):
            continue   # (mmcv without a source build shown: mmcv_without_ops' reading)
        torch = [f.value.split("+cu", 1)[1] for f in ctx.sheet.of("torch") if "+cu" in f.value]
        cuda = f"{torch[-1][:-1]}.{torch[-1][-1]}" if torch and torch[-1].isdigit() else None
        toolkit = (f"the CUDA {cuda} toolkit (torch is +cu{torch[-1]})" if cuda else
                   "the CUDA toolkit of the CUDA torch was built with (python -c 'import torch; "
                   "print(torch.version.cuda)')")
        return _make("rocm-libs-missing", f"{row.package} was installed without its CUDA extension",
                     f"{name} is {row.package}'s compiled CUDA extension; it is built at install time only where the "
                     "full CUDA toolkit (nvcc, found through CUDA_HOME) is present, and this install went on without "
                     "it (a driver and the torch wheel bring no nvcc)",
                     f"install {toolkit} with nvcc (nvcc --version must answer), export CUDA_HOME=/usr/local/cuda (or "
                     f"the toolkit's folder), then rebuild: {row.build}", [], [line])
    return None


# The compiled module's import swallowed, then its first call: packages that import their extension in a try block
# (GroundingDINO's ms_deform_attn: `try: from groundingdino import _C` / except: "Failed to load custom C++ ops.
# Running on CPU mode Only!") fail later with a NameError on the module's name, at the first op that needs it
_NAME_UNDEFINED = re.compile(r"NameError: name '(_C|_ext)' is not defined|Failed to load custom C\+\+ ops")
# the install the user ran (or says they ran) from the package's checkout: setup.py or pip from the folder
_SOURCE_INSTALL = re.compile(r"(?i)setup\.py (?:install|develop|build)|pip install (?:--no-build-isolation )?(?:-e )?\.")


@rule("torch-build")
def extension_import_swallowed(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the NameError on `_C` / `_ext` (or the package's own "Failed to load custom C++ ops"). The package
    was installed, but its compiled module was not built into it: setup.py builds the CUDA extension only when it runs
    where torch has CUDA and CUDA_HOME names the toolkit, and otherwise installs the Python part alone (or keeps an
    old build/ folder made without them). The fix rebuilds it in the CUDA environment, build first, so the compile's
    own errors show (IDEA-Research/Grounded-Segment-Anything#360: `python setup.py build` then `install` in the CUDA
    environment compiled the _C .so)."""
    lines = _lines_matching(ctx, _NAME_UNDEFINED)
    if not lines:
        return None
    text = "\n".join(ctx.sheet.lines)
    module = next((m.group(1) for l in lines if (m := re.search(r"name '(\w+)'", l.line))), "_C")
    row = next((r for r in _BUILDS if re.search(r"(?i)" + re.escape(r.package.split()[0]), text)
                and not r.package.startswith("the ")), None)
    if row is None and re.search(r"(?i)ms_deform_attn", text):
        row = next(r for r in _BUILDS if r.package == "GroundingDINO")
    package = row.package if row else "the package"
    tried = _SOURCE_INSTALL.search(text)
    cuda = next((f.value for f in ctx.sheet.of("cuda")), None)
    home = f"/usr/local/cuda-{cuda}" if cuda else "/usr/local/cuda"
    return _make("torch-build", f"{package}'s compiled {module} module was never built",
                 f"{package} imports its compiled {module} module in a try block and goes on without it, so the first "
                 f"op that needs it fails with this NameError; the install "
                 + ("the paste shows " if tried else "") + "ran where the CUDA build was skipped (torch without CUDA "
                 "in that environment, CUDA_HOME unset, or an old build/ folder made without them), leaving the "
                 "package without the extension",
                 f"in the environment that runs it (the notebook's kernel: its python), check python -c 'import "
                 "torch; print(torch.cuda.is_available(), torch.version.cuda)' prints True and the CUDA of nvcc "
                 f"--version; then in {package}'s checkout: export CUDA_HOME={home}; rm -rf build; python setup.py "
                 "build (its output must show the CUDA sources compiling, with no error), then python setup.py "
                 "install (or pip install --no-build-isolation -e .); restart the kernel and import it again",
                 [ctx.line_fact(lines[0])], lines[:1])
