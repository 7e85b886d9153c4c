"""A framework's CUDA build older than the GPU: frameworks that ship one wheel per CUDA release (PaddlePaddle) or run
on the CUDA toolkit installed beside them (TensorFlow up to 2.13) carry code only for the GPU generations their CUDA
release could compile. A GPU of a newer generation needs the framework's build for a newer CUDA, not an override, a
driver or a rebuild of the program on top."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import dotted
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule
# one table of which CUDA each TensorFlow release was built with, kept beside the reading of its library names
from steadytune.doctor.rules.install.framework_cuda_builds import first_tensorflow_built_with

# The oldest CUDA release that compiles code for a GPU generation (compute capability major). A cubin built for
# sm_X0 runs on every GPU of major X with an equal or higher minor (CUDA C++ Programming Guide, "Binary
# Compatibility"), so a build made with that CUDA carries the generation: sm_70 from CUDA 9.0, sm_75 from 10.0, sm_80
# from 11.0, sm_90 from 11.8, sm_100 / sm_120 from 12.8 (the CUDA toolkit release notes of each)
_CUDA_FOR_MAJOR = {7: (9, 0), 8: (11, 0), 9: (11, 8), 10: (12, 8), 12: (12, 8)}


# PaddlePaddle's own check (paddle/phi/backends/gpu/gpu_resources.cc, InitGpuProperties): the GPU's compute capability
# is not among the archs the wheel was compiled for (CUDA_REAL_ARCHS); it names the generation from its own table
# (Ampere for 8.0, 8.6 and 8.9) or, for a capability outside that table, the number itself
_PADDLE_GENERATION = re.compile(r"(?i)GPU architecture in your current machine is (\w+), which is not compatible with "
                                r"Paddle installation with arch: ?([\d ]+)")
_PADDLE_NUMBER = re.compile(r"(?i)GPU compute capability in your current machine is (\d+), which is not supported by Paddle")
# Paddle's start-up note: "GPU Compute Capability: 8.6, Driver API Version: 12.0, Runtime API Version: 10.2"
_PADDLE_NOTE = re.compile(r"(?i)GPU Compute Capability: (\d+)\.(\d)\b.{0,60}?Runtime API Version: (\d+)\.(\d)")
_GENERATION_MAJOR = {"kepler": 3, "kapler": 3, "maxwell": 5, "pascal": 6, "volta": 7, "turing": 7, "ampere": 8,
                     "ada": 8, "hopper": 9, "blackwell": 10}


def _cuda(version: tuple[int, int]) -> str:
    return f"CUDA {version[0]}.{version[1]}"


@rule("arch-missing")
def paddle_build_lacks_arch(ctx: Context) -> Optional[Diagnosis]:
    """Paddle saying the GPU is not among the archs its wheel was compiled for: the wheel is the build for another CUDA
    release (a CUDA 10.2 wheel stops at sm_75, so an Ampere card gets nothing); the fix is the wheel for a CUDA
    release that carries the GPU's generation."""
    text = "\n".join(ctx.sheet.lines)
    generation, number = _PADDLE_GENERATION.search(text), _PADDLE_NUMBER.search(text)
    if generation is None and number is None:
        return None
    note = _PADDLE_NOTE.search(text)
    listed = sorted(int(a) for a in generation.group(2).split()) if generation else []
    if note:
        cc = int(note.group(1)) * 10 + int(note.group(2))
    elif number:
        cc = int(number.group(1))
    else:
        cc = None
    major = cc // 10 if cc else _GENERATION_MAJOR.get(generation.group(1).lower()) if generation else None
    gpu = (f"compute capability {dotted(cc)}" if cc else
           f"an {generation.group(1)} GPU" if generation and generation.group(1)[0].lower() in "aeiou" else
           f"a {generation.group(1)} GPU" if generation else "this GPU")
    runtime = f" (its CUDA runtime: {note.group(3)}.{note.group(4)})" if note else ""
    built = f"it was compiled for sm_{', sm_'.join(map(str, listed))}" if listed else "its compiled archs leave it out"
    lines = _lines_matching(ctx, _PADDLE_GENERATION if generation else _PADDLE_NUMBER)[:1]
    needs = _CUDA_FOR_MAJOR.get(major) if major else None
    if listed and major and max(listed) // 10 < major and needs:
        fix = (f"uninstall this paddlepaddle-gpu and install the paddlepaddle-gpu wheel built with {_cuda(needs)} or "
               f"newer (the CUDA 11.x / 12.x builds on paddlepaddle.org.cn's install page, with the CUDA and cuDNN "
               f"they name): {gpu} needs a build made with {_cuda(needs)}+, and the installed one{runtime} stops at "
               f"sm_{max(listed)}")
    elif listed and cc and min(listed) > cc:
        fix = (f"the installed paddlepaddle-gpu{runtime} starts at sm_{min(listed)}, newer than {gpu}: install a "
               f"paddlepaddle-gpu build for an older CUDA release whose arch list still has sm_{cc}, or the CPU "
               "package (paddlepaddle)")
    else:
        fix = (f"install the paddlepaddle-gpu wheel whose CUDA build carries {gpu}"
               f"{' (' + _cuda(needs) + ' or newer)' if needs else ''} from paddlepaddle.org.cn's install page, "
               f"uninstalling the one in place{runtime}")
    return _first(_make("arch-missing", f"this paddlepaddle-gpu has no code for {gpu}",
                        f"Paddle checks the GPU against the archs its wheel was compiled for: {built}, which do not "
                        f"include {gpu}", fix, lines, lines))


# a CUDA release the user or a tool names ("Cuda 10.1", "cuda: 10.2", "CUDA toolkit 11.2"), not nvidia-smi's
# "CUDA Version" (the newest the driver supports, not what the framework was built with)
_CUDA_SAID = re.compile(r"(?i)\bcuda(?:[ -]?toolkit)?\s*(?:version\s*)?[:：=]?\s*v?(\d{1,2})\.(\d)\b")
_SMI = re.compile(r"(?i)NVIDIA-SMI|Driver Version|CUDA Version:")
# frameworks that run on the CUDA installed beside them (TensorFlow loads the toolkit's libraries the user installed)
_SYSTEM_CUDA_TOOLS = ("tensorflow",)


def _cuda_said(ctx: Context) -> list[tuple[int, int]]:
    return [(int(m.group(1)), int(m.group(2))) for line in ctx.sheet.lines if not _SMI.search(line)
            for m in _CUDA_SAID.finditer(line)]


@rule("arch-missing")
def framework_cuda_predates_gpu(ctx: Context) -> Optional[Diagnosis]:
    """A framework that runs on the system's CUDA (TensorFlow) failing for missing kernels on a GPU whose generation
    is newer than every CUDA release the paste names: no build of the framework for that CUDA has the GPU's code, so
    the framework release built with a newer CUDA is the fix, not a rebuild for the same toolkit."""
    errors = ctx.of("arch-missing")
    tool = ctx.tool(errors)
    if not errors or tool not in _SYSTEM_CUDA_TOOLS:
        return None
    arch, where = ctx.arch(errors)
    said = _cuda_said(ctx)
    if not arch or not re.fullmatch(r"sm_\d{2,3}", arch) or not said:
        return None
    cc = int(arch[3:])
    needs = _CUDA_FOR_MAJOR.get(cc // 10)
    if needs is None or max(said) >= needs:
        return None
    version = f"{max(said)[0]}.{max(said)[1]}"
    first = first_tensorflow_built_with(needs)
    release = (f"TensorFlow {first} and later are built with {_cuda(needs)} or newer" if first else
               f"a TensorFlow release built with {_cuda(needs)} or newer")
    return _first(_make(
        "arch-missing", f"CUDA {version} predates the {arch} GPU",
        f"TensorFlow runs on the CUDA it was built for and the toolkit installed with it; CUDA {version} cannot compile "
        f"for compute capability {dotted(cc)} (that generation needs {_cuda(needs)}), so no TensorFlow on CUDA "
        f"{version} has kernels for this GPU",
        f"install a TensorFlow built with {_cuda(needs)} or newer, with the CUDA and cuDNN it names ({release}; "
        "the tested build configurations are at tensorflow.org/install/source#gpu; from 2.14 pip install -U "
        "\"tensorflow[and-cuda]\" brings them), instead of the one for CUDA " + version,
        [where, ctx.line_fact(errors[0])], errors))


# a GeForce named by its number alone, as users write it ("supports 3090GPU", "my 4090 card"): its compute capability
_BARE_GEFORCE = re.compile(r"(?i)(?<![\w.])(?:RTX\s*)?([2345])0[5-9]0(?:\s*Ti)?\s*(?=GPU|card|显卡)")
_GEFORCE_CC = {"2": "75", "3": "86", "4": "89", "5": "120"}
_TORCH_CUDA_SAID = re.compile(r"(?i)\b(?:py)?torch\s*v?(\d+\.\d+(?:\.\d+)?)\s*(?:\+|with|and|/|,)?\s*cuda\s*v?(\d+)\.(\d)")


@rule("arch-missing")
def torch_cuda_predates_gpu(ctx: Context) -> Optional[Diagnosis]:
    """A torch said with a CUDA release older than the GPU's generation ("Pytorch1.7.1 + Cuda10.1" on an RTX 3090): the
    torch build carries no code the GPU can run, whatever the program (espnet/espnet#3052: the maintainer's answer, the
    same torch 1.7.1 built for CUDA 11.0). The floor is the CUDA that first compiles the generation's X.0 code, which
    runs on every X.y (the binary-compatibility note above)."""
    text = "\n".join(ctx.sheet.lines)
    said = _TORCH_CUDA_SAID.search(text)
    if not said:
        return None
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("sm_")]
    bare = _BARE_GEFORCE.search(text)
    cc = int(archs[0][3:]) if archs else int(_GEFORCE_CC[bare.group(1)]) if bare else None
    if cc is None or cc // 10 not in _CUDA_FOR_MAJOR:
        return None
    floor = _CUDA_FOR_MAJOR[cc // 10]
    cuda = (int(said.group(2)), int(said.group(3)))
    if cuda >= floor:
        return None
    release = said.group(1)
    label = f"cu{floor[0]}{floor[1]}"
    lines = _lines_matching(ctx, _TORCH_CUDA_SAID)
    return _first(_make(
        "arch-missing", f"a torch built for CUDA {cuda[0]}.{cuda[1]} has no code for a compute capability "
        f"{dotted(cc)} GPU",
        f"CUDA {cuda[0]}.{cuda[1]} predates the GPU's generation: no build made with it carries code the {dotted(cc)} "
        f"GPU can run (its generation's code comes with CUDA {floor[0]}.{floor[1]})",
        f"install the torch build for CUDA {floor[0]}.{floor[1]} or newer (the driver must support it): " +
        (f"pip install torch=={release}+{label} -f https://download.pytorch.org/whl/torch_stable.html where that release "
         f"had a {label} build (torch 1.7 was the first for CUDA 11.0), else a newer torch from "
         f"https://download.pytorch.org/whl/<cuXYZ>; conda: conda install pytorch=={release} cudatoolkit="
         f"{floor[0]}.{floor[1]} -c pytorch" if floor < (11, 8) else
         f"pip install torch --index-url https://download.pytorch.org/whl/{label} (a torch release that has a {label} "
         "build)") + f"; torch.cuda.get_arch_list() must then list sm_{cc // 10}0 or sm_{cc}",
        [ctx.line_fact(lines[0])], lines[:1]))
