"""conda choosing the CPU build of a package whose CPU and CUDA builds share one name (conda-forge's jaxlib, pytorch,
tensorflow): the plan it prints shows the build string, "jaxlib-0.4.4-cpu_py311h7146453_1", and the CUDA one
("cuda120py311h..." / "cuda126_generic_py312...") was passed over, since nothing in the command asked for it (no
__cuda virtual package seen, or another pin held it back). Asking for the build by its build string, conda's
name=version=build match spec, makes the solver take the CUDA build or say why it cannot.

Decided by: conda's plan line for one of these packages with a cpu build string, in a paste that wants the GPU (CUDA,
a GPU, cuda-nvcc named). Sources: jax-ml/jax#14606 (the maintainers' README fix: conda install jaxlib=*=*cuda* jax
cuda-nvcc -c conda-forge -c nvidia); conda's match-spec docs (name=version=build, globs allowed in each part)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


# conda-forge's plan line: "  jaxlib   conda-forge/linux-64::jaxlib-0.4.4-cpu_py311h7146453_1", or a list's
# "jaxlib 0.4.4 cpu_py311h7146453_1 conda-forge" (the pytorch channel's own py3.9_cpu_0 builds are chosen by its
# cudatoolkit / pytorch-cuda pins instead: not this reading)
_CPU_BUILD = re.compile(r"(?i)\b(jaxlib|pytorch|tensorflow(?:-base)?|libtorch|onnxruntime)(?:-|\s+)(\d[\w.]*)(?:-|\s+)"
                        r"cpu_\w*")
_WANTS_GPU = re.compile(r"(?i)\bcuda\b|\bgpu\b|cuda-nvcc|\bnvidia\b")
_CONDA_COMMAND = re.compile(r"(?i)\b(?:conda|mamba|micromamba)\s+(?:install|create)\b[^\n]*")


@rule("torch-build")
def conda_took_the_cpu_build(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    lines = _lines_matching(ctx, _CPU_BUILD)
    if not lines or not _WANTS_GPU.search(text):
        return None
    package = _CPU_BUILD.search(lines[0].line).group(1).lower()
    spec = f"'{package}=*=*cuda*'"
    command = _CONDA_COMMAND.search(text)
    if command:
        # the user's own command with the package asked for by its CUDA build (added where the command left it to a
        # dependency, as jax pulls jaxlib)
        words = command.group(0).split()
        # a channel's name after -c / --channel is not the package ("-c pytorch")
        said = [i for i, w in enumerate(words) if re.fullmatch(re.escape(package) + r"(?:[=<>].*)?", w, re.I)
                and not (i and words[i - 1] in ("-c", "--channel"))]
        words = [spec if i in said else w for i, w in enumerate(words)]
        if not said:
            words.insert(2, spec)
        line = " ".join(words)
    else:
        line = f"conda install {spec} -c conda-forge"
    return _first(_make(
        "torch-build", f"conda installed the CPU-only {package} build",
        f"conda-forge publishes {package} as CPU and CUDA builds under one name; the solver took the CPU one (its build "
        "string starts with cpu), so the GPU is never used",
        f"conda chose the CPU build; ask for the CUDA build by its build string: {line} (conda's name=version=build spec; the plan must then show a "
        f"{package} build with cuda in its name); or conda remove {package} first, and check with conda list {package}",
        [ctx.line_fact(lines[0])], lines[:1]))
