"""TensorRT and TensorRT-LLM pieces that must come from one release or one build: a serialized engine read by another
TensorRT than the one that built it, TensorRT-LLM's MPI layer over an MPI it was not built for."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text


# TensorRT refusing an engine serialized by another release, in the words of its releases: the version tag check
# ("Serialization assertion stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not match", TensorRT 8.6
# and later) and the older plan check ("The engine plan file is not compatible with this version of TensorRT,
# expecting library version 8.6.1 got 8.5.3, please rebuild"). An engine is tied to the TensorRT release that built it
# (TensorRT developer guide, "Version Compatibility": engines are not portable across releases unless built with the
# version-compatible flag); TensorRT-LLM issue 660: built in the v0.6.1 image, served from tritonserver 23.10-trtllm.
_ENGINE_VERSION = re.compile(r"(?i)stdVersionRead == kSERIALIZATION_VERSION|Version tag does not match|"
                             r"engine plan file is not compatible with this version of TensorRT|"
                             r"expecting library version (\d+\.\d+(?:\.\d+)*) got (\d+\.\d+(?:\.\d+)*)")


def _engine_from_another_release(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _ENGINE_VERSION)
    if not said:
        return None
    text = _text(ctx)
    versions = re.search(r"(?i)expecting library version (\S+?),? got (\S+?)[,.]?(?:\s|$)", text)
    which = (f" (this runtime is TensorRT {versions.group(1)}, the engine was built with {versions.group(2)})"
             if versions else "")
    llm = re.search(r"(?i)tensorrt[-_ ]llm|trtllm|trt-llm", text)
    server = re.search(r"(?i)tritonserver:(\d\d\.\d\d)", text)
    serve = (f"serve it with the Triton image whose TensorRT-LLM backend is the release that built it (the "
             f"tritonserver:{server.group(1)}-trtllm-python-py3 image carries one TensorRT-LLM release: build the "
             "engine inside that same image, or pick the tritonserver image of your TensorRT-LLM release)"
             if server else "run it with the same TensorRT (and TensorRT-LLM) release that built it")
    build = "trtllm-build (or the build script) of the serving release" if llm else "trtexec / the builder of the runtime's release"
    return _make("wheel-platform", "the engine was built by another TensorRT release",
                 "a serialized TensorRT engine can be read only by the TensorRT release that built it" + which +
                 "; the runtime here is another release, so it refuses the engine's version tag",
                 f"rebuild the engine with the TensorRT release the runtime uses ({build}), or {serve}; check both "
                 "with python -c 'import tensorrt; print(tensorrt.__version__)' in each environment",
                 [], said[:1])


# TensorRT-LLM's MPI layer: its wheel's mpi4py is meant for OpenMPI (its install guide installs libopenmpi-dev);
# an mpi4py built on MPICH (conda's default mpi4py pulls mpich) stalls at its first MPI call (TensorRT-LLM issue
# 2405: `import tensorrt_llm` stuck after "Initializing MPI with thread mode 3", conda's mpi4py 3.1.4 on mpich 3.3.2;
# conda-forge's mpi4py with openmpi ran)
_MPICH = re.compile(r"(?i)\bmpich\b")


def _mpi4py_on_mpich(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not (re.search(r"(?i)tensorrt[-_]llm|TensorRT-LLM", text) and _MPICH.search(text)):
        return None
    said = _lines_matching(ctx, r"(?i)Initializing MPI|\bMPI_Init\w*|(?:stuck|hang\w*|freez\w*|blocks?)\b|\bmpi4py\b")
    if not said:
        return None
    return _make("wheel-platform", "TensorRT-LLM's mpi4py is built on MPICH",
                 "TensorRT-LLM initializes MPI through mpi4py when it is imported and expects OpenMPI; the mpi4py in "
                 "this environment is built on MPICH (conda's mpi / mpich packages), and the import stalls at MPI's "
                 "initialization",
                 "replace MPICH with OpenMPI under mpi4py: conda install -c conda-forge mpi4py openmpi (removing mpich; "
                 "check with conda list mpi), or outside conda apt install libopenmpi-dev and pip install "
                 "--force-reinstall --no-binary mpi4py mpi4py", [], said[:1], confirmed=False)


@rule("wheel-platform")
def tensorrt_pieces(ctx: Context) -> Optional[Diagnosis]:
    return _engine_from_another_release(ctx) or _mpi4py_on_mpich(ctx)
