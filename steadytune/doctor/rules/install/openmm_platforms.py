"""OpenMM without its CUDA platform: "There is no registered Platform called "CUDA"", or a platform listing
(Platform.getPlatform(i).getName(), `python -m openmm.testInstallation`) without CUDA. Every platform but Reference is
a plugin that OpenMM loads at import from one folder: OPENMM_PLUGIN_DIR where it is set, else the install's own
lib/plugins. So the listing says which failed:
- only Reference: no plugin was loaded at all, so the folder read is not this install's (an OPENMM_PLUGIN_DIR left
  from another environment or an older OpenMM, a hand-built install's variable);
- CPU and/or OpenCL but no CUDA: the folder is right and the CUDA plugin alone failed to load, which is the CUDA
  libraries it was linked against (a binary OpenMM's CUDA plugin loads only with the CUDA release it was built for);
  Platform.getPluginLoadFailures() prints the loader's error.

Sources: OpenMM's user guide (Installing OpenMM: plugins, OPENMM_PLUGIN_DIR, Platform.getPluginLoadFailures());
openmm/openmm issue 1233 (OpenMM 6.3's binaries load the CUDA plugin only with CUDA 7.0) and issue 3656 (a base
environment's OPENMM_PLUGIN_DIR hiding a new conda environment's plugins)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.facts import Fact
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_OPENMM = re.compile(r"(?i)\bopenmm\b|\bsimtk\b")
_NO_CUDA = re.compile(r"(?i)There is no registered Platform called \W?CUDA\b")
# a listing of platforms: a Python list of names, the test script's numbered lines, or the names in a sentence
_LISTED = re.compile(r"(?i)\[\s*'Reference'[^\]]*\]|\bReference\b(?:\s*(?:,|and|-)\s*(?:CPU|OpenCL|CUDA|HIP)\b)*|"
                     r"\b(?:CPU|OpenCL|CUDA|HIP)\b(?:\s*(?:,|and)\s*(?:CPU|OpenCL|CUDA|HIP|Reference)\b)+")
_ONLY_REFERENCE = re.compile(r"(?i)\[\s*'Reference'\s*\]|\bonly\b[^\n]{0,40}\bReference\b(?!\s*(?:,|and)\s*\w)|"
                             r"There (?:are|is) 1 Platforms? available|"
                             # in Chinese: "只有 1 个，就是 Reference" (not "Reference 和 CPU")
                             r"只有[^\n]{0,20}\bReference\b(?!\s*(?:,|、|和|与|and)\s*\w)")
# the CUDA release each OpenMM release's binaries were built for, where its notes or maintainers say so
_BUILT_FOR_CUDA = {"6.3": "7.0"}   # openmm/openmm issue 1233 (a maintainer: 6.3's binaries use CUDA 7.0)
_VERSION = re.compile(r"(?i)\b(?:openmm|version)\s*(?:==|=|:)?\s*v?(\d+\.\d+)(?:\.\d+)?\b")


# testInstallation's numbered lines, one platform a line ("2 CPU - Successfully computed forces")
_NUMBERED = re.compile(r"(?im)^\W*\d+\s+(Reference|CPU|OpenCL|CUDA|HIP)\s+-\s")


def _listed(text: str) -> set[str]:
    return {name.lower() for m in _LISTED.finditer(text) for name in
            re.findall(r"(?i)\b(Reference|CPU|OpenCL|CUDA|HIP)\b", m.group(0))} | \
        {name.lower() for name in _NUMBERED.findall(text)}


@rule("env-not-applied")
def openmm_loaded_no_plugin(ctx: Context) -> Optional[Diagnosis]:
    """OpenMM lists only its Reference platform: no plugin folder of this install was read."""
    text = _text(ctx)
    if not _OPENMM.search(text):
        return None
    only = _lines_matching(ctx, _ONLY_REFERENCE)
    if not only or _listed(text) - {"reference", "cuda"}:
        return None
    set_dir = re.search(r"(?i)OPENMM_PLUGIN_DIR\s*=\s*(\S+)", text)
    evidence = [Fact("env", f"OPENMM_PLUGIN_DIR={set_dir.group(1)}", 0, set_dir.group(0))] if set_dir else []
    return _make("env-not-applied", "OpenMM loaded none of its plugins (only Reference)",
                 "every OpenMM platform but Reference (CPU, OpenCL, CUDA) is a plugin loaded at import from "
                 "OPENMM_PLUGIN_DIR, else from the install's own lib/plugins; with none loaded, the folder read is not "
                 "this install's: an OPENMM_PLUGIN_DIR left from another environment or an older OpenMM points it "
                 "elsewhere",
                 "echo $OPENMM_PLUGIN_DIR; unset OPENMM_PLUGIN_DIR (and remove its export from ~/.bashrc or the conda "
                 "env's activate scripts), or point it at this environment's plugins: export OPENMM_PLUGIN_DIR="
                 "$CONDA_PREFIX/lib/plugins; then python -c \"import openmm as mm; print([mm.Platform.getPlatform(i)."
                 "getName() for i in range(mm.Platform.getNumPlatforms())], mm.Platform.getPluginLoadFailures())\"",
                 evidence, only)


@rule("rocm-libs-missing")
def openmm_cuda_plugin_not_loaded(ctx: Context) -> Optional[Diagnosis]:
    """OpenMM's other plugins load (CPU, OpenCL) but not CUDA: the CUDA plugin's own libraries failed."""
    text = _text(ctx)
    if not _OPENMM.search(text) or _ONLY_REFERENCE.search(text):
        return None
    listed = _listed(text)
    said = _lines_matching(ctx, _NO_CUDA)
    if listed & {"cpu", "opencl"}:
        if "cuda" in listed and not said:
            return None   # CUDA is listed: it loaded
    elif not said or listed:
        return None
    version = next((m.group(1) for m in _VERSION.finditer(text) if m.group(1) in _BUILT_FOR_CUDA), None)
    cuda = (f"CUDA {_BUILT_FOR_CUDA[version]}, the release OpenMM {version}'s binaries are built with" if version else
            "the CUDA release this OpenMM binary was built with (its release notes; a conda package's cudatoolkit / "
            "cuda-version pin: conda list cuda)")
    lines = said or _lines_matching(ctx, _LISTED)[:1] or _lines_matching(ctx, _NUMBERED)[:1]
    return _make("rocm-libs-missing", "OpenMM's CUDA plugin did not load",
                 "OpenMM found its plugin folder (the CPU/OpenCL platforms load), but its CUDA plugin failed to load: "
                 "it links against the CUDA runtime and cuFFT of the CUDA release it was built with, and the loader "
                 "did not find them",
                 f"print why: python -c \"import openmm as mm; print(mm.Platform.getPluginLoadFailures())\" (simtk.openmm "
                 f"in old releases); install {cuda} and put its lib64 on LD_LIBRARY_PATH, or install the OpenMM build "
                 "for the CUDA you have (conda install -c conda-forge openmm cuda-version=<the driver's CUDA or older>)",
                 [], lines)
