"""Host RAM running out (no rules; out_of_memory asks): a kernel package's source build killed by too many
compiler jobs, a worker killed by SIGKILL."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make
from steadytune.doctor.rules.runtime.shared import _text_of


# packages whose source build compiles hundreds of CUDA/HIP kernels with ninja, one nvcc per core: each job can take
# several GB of host RAM (flash-attention's README: under 96 GB of RAM with many cores, limit the jobs with MAX_JOBS)
# (DeepSpeed is left out: its ops are built by ninja at run time too, so "ninja" and a killed training run are no build)
_KERNEL_BUILD = re.compile(r"(?i)\b(flash[-_ ]?attn|flash[-_ ]?attention|xformers|causal[-_]conv1d|mamba[-_]ssm|apex|vllm|"
                           r"sageattention)\b")
# a source build said: ninja / nvcc at work, pip's build without isolation, setup.py, a wheel being built (not torch.compile)
_BUILDING = re.compile(r"(?i)\bninja\b|\bnvcc\b|Building CUDA object|--no-build-isolation|setup\.py|Building wheels? for|"
                       r"\bcompil(?:e|ing|ation) (?:it|from source|the (?:kernels|extension|package))")
# the build stopped without a compiler message: killed, ninja's bare failure, or RAM named as the trouble
_BUILD_STOPPED = re.compile(r"(?i)\bKilled\b|killed signal|signal 9|ninja -v\W{0,3} failed|ninja: build stopped|"
                            r"\b(?:a lot of|too much|much|\d+ ?GB of) RAM\b|\(a lot RAM\)|\bRAM\b.{0,40}\b(?:uses?|using|"
                            r"eats?|runs? out|exhaust\w*)|(?:uses?|using|eats?) .{0,20}\bRAM\b|out of (?:host )?memory")
_COMPILER_SAID = re.compile(r"(?i)\berror:|nvcc fatal|fatal error|CUDA_HOME|unsupported (?:gpu|GNU|compiler)|"
                            r"No such file or directory")


def _build_out_of_host_memory(ctx: Context) -> Optional[Diagnosis]:
    """A from-source build of a CUDA-kernel package that stops with no compiler error (killed, ninja's bare 'failed',
    or RAM said to run out): ninja starts one nvcc per core, and together they exhaust the host's RAM."""
    text = _text_of(ctx)
    package = _KERNEL_BUILD.search(text)
    if not package or not _BUILDING.search(text) or _COMPILER_SAID.search(text):
        return None
    said = _lines_matching(ctx, _BUILD_STOPPED.pattern)
    if not said:
        return None
    name = package.group(1).lower().replace("_", "-").replace(" ", "-")
    name = "flash-attn" if name.startswith("flash") else name
    return _make("out-of-memory", f"the {name} build runs out of host memory",
                 "the build compiles its CUDA kernels with ninja, one nvcc job per CPU core, and each job can take "
                 "several GB of RAM; together they exhaust the host's memory and a job is killed, which ninja "
                 "reports only as a failed build",
                 f"limit the parallel jobs: MAX_JOBS=4 pip install {name} --no-build-isolation (fewer with little RAM: "
                 "about 4-8 GB per job); or install a prebuilt wheel for this torch and CUDA instead of compiling",
                 [], said[:1], confirmed=False)


# a launcher's report of a worker killed by SIGKILL (torchrun's ChildFailedError, subprocess, docker's exit 137)
_SIGNAL_9 = re.compile(r"(?i)\bexitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\) received|<Signals\.SIGKILL: 9>|"
                       r"non-zero exit status -9\b|\bexit(?:ed with)? code 137\b")


def _killed_by_signal_9(ctx: Context) -> Optional[Diagnosis]:
    """A training worker killed by signal 9 with no error of its own: nothing in torch sends SIGKILL, the kernel's
    out-of-memory killer does (host RAM, not the GPU's), most often while every rank loads a full copy of the model
    into CPU memory before moving it to its GPU."""
    said = _lines_matching(ctx, _SIGNAL_9.pattern)
    if not said:
        return None
    ranks = re.search(r"(?i)local_rank|world_size|nproc_per_node|torchrun|多卡|deepspeed", _text_of(ctx))
    return _make("out-of-memory", "a worker was killed by the kernel: host memory ran out",
                 "signal 9 (SIGKILL, exit code -9 / 137) is the kernel's out-of-memory killer stopping the process "
                 "when the machine's RAM (not the GPU's memory) runs out" +
                 (", here with every rank loading its own copy of the model(s) into CPU memory at once" if ranks else ""),
                 "confirm with sudo dmesg | grep -i -e 'out of memory' -e 'killed process'; then give the job more "
                 "host memory (RAM, swap) or load less per rank: fewer processes per node, low_cpu_mem_usage=True, "
                 "DeepSpeed ZeRO-3 (its zero.Init loads the weights sharded), fewer data-loader / preprocessing "
                 "workers; in a container raise its memory limit", [], said[:1],
                 # torchrun's own report names the signal that ended the rank; a bare "Killed" / 137 stays likely
                 confirmed=bool(re.search(r"(?i)Signal 9 \(SIGKILL\) received by PID|exitcode\s*:\s*-9\b",
                                          _text_of(ctx))))
