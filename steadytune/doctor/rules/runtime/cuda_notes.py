"""Situations NVIDIA's and PyTorch's own pages list with the fix they accept (round 17, t17b), where no rule read them:

  nvcc not found after a CUDA toolkit install: the install guide's post-installation actions put the toolkit's bin on
      PATH (export PATH=/usr/local/cuda-X.Y/bin${PATH:+:${PATH}}), its lib64 on LD_LIBRARY_PATH
      (https://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html#post-installation-actions).
  nvcc refusing a gcc newer than it supports ("gcc versions later than N are not supported"): a gcc of release N
      beside the default (the guide's table of supported host compilers).
  PyTorch's FAQ ("My model reports cuda runtime error(2): out of memory"): a loss accumulated with its autograd history
      (total_loss += loss) keeps every step's graph alive; loss.item() (https://pytorch.org/docs/stable/notes/faq.html).
  PyTorch's CUDA semantics notes: the caching allocator keeps freed memory reserved, so nvidia-smi still shows it after
      del; torch.cuda.empty_cache() gives it back (https://pytorch.org/docs/stable/notes/cuda.html#memory-management).
  JAX's GPU memory allocation page: JAX preallocates 75% of the GPU at its first operation;
      XLA_PYTHON_CLIENT_PREALLOCATE=false / XLA_PYTHON_CLIENT_MEM_FRACTION (https://docs.jax.dev/en/latest/gpu_memory_allocation.html).
  CUDA on WSL's known limitations: pinned system memory is limited under WSL 2 (https://docs.nvidia.com/cuda/wsl-user-guide/index.html).
  NCCL's troubleshooting page: NCCL picks the first socket interface it finds (docker0, lo, a virtual bridge) unless
      NCCL_SOCKET_IFNAME names the one that reaches the other nodes
      (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html, env.html#nccl-socket-ifname).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (Context, Diagnosis, _first, _lines_matching, _make, _text, on_windows,
                                          rule)


_NVCC_MISSING = re.compile(r"(?i)\bnvcc'?:? (?:command )?not found|Command 'nvcc' not found|'nvcc' is not recogni[sz]ed|"
                           r"\bnvcc\b.{0,12}\bno such file or directory|which: no nvcc in")
# the toolkit release the paste names: the apt package, the folder, or "CUDA 12.4" / "CUDA toolkit 12.4"
_TOOLKIT = re.compile(r"(?i)cuda-toolkit-(\d+)-(\d+)|/usr/local/cuda-(\d+)\.(\d+)|CUDA\\v(\d+)\.(\d+)|"
                      r"\bcuda[_ ](?:toolkit[_ ])?(\d+)\.(\d+)(?:\.\d+)?")


@rule("rocm-libs-missing")
def nvcc_off_path(ctx: Context) -> Optional[Diagnosis]:
    """nvcc not found by the shell after the CUDA toolkit was installed: the toolkit installs into
    /usr/local/cuda-X.Y (Windows: C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\vX.Y) and its bin is on no
    PATH until the install guide's post-installation step adds it."""
    lines = _lines_matching(ctx, _NVCC_MISSING)
    if not lines:
        return None
    text = _text(ctx)
    m = _TOOLKIT.search(text)
    release = next((f"{a}.{b}" for a, b in zip(m.groups()[::2], m.groups()[1::2]) if a), None) if m else None
    if on_windows(ctx, text) and not ctx.sheet.has("platform", "wsl"):
        where = f"C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v{release or 'X.Y'}"
        fix = (f"put the toolkit's bin on PATH: setx PATH \"%PATH%;{where}\\bin\" and set CUDA_PATH={where} (the "
               "installer does it; open a new terminal afterwards), then nvcc --version; if the folder is missing, "
               "install the CUDA Toolkit (not only the driver)")
    else:
        where = f"/usr/local/cuda-{release}" if release else "/usr/local/cuda"
        fix = (f"add the toolkit to the environment as the install guide's post-installation actions say: export "
               f"PATH={where}/bin${{PATH:+:${{PATH}}}} and export LD_LIBRARY_PATH={where}/lib64"
               "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}} (in ~/.bashrc to keep them), then nvcc --version; do not "
               "install Ubuntu's nvidia-cuda-toolkit that the shell suggests beside NVIDIA's (another, older CUDA); "
               f"if {where}/bin/nvcc does not exist, install the toolkit itself (sudo apt install cuda-toolkit"
               + (f"-{release.replace('.', '-')}" if release else "") + "), not only the driver")
    return _make("rocm-libs-missing", "nvcc is not on PATH",
                 "the CUDA toolkit installs nvcc into its own folder" + (f" ({where}/bin)" if release else "")
                 + ", which is on no PATH until it is added; the driver alone has no nvcc",
                 fix, [ctx.line_fact(lines[0])], lines[:1])


_GCC_LATER = re.compile(r"unsupported GNU version! gcc versions later than (\d+) are not supported")


@rule("abi-mismatch")
def nvcc_gcc_newest(ctx: Context) -> Optional[Diagnosis]:
    """nvcc's host_config.h names the newest gcc the toolkit supports: that release is the one to install beside."""
    lines = _lines_matching(ctx, _GCC_LATER)
    if not lines:
        return None
    n = _GCC_LATER.search(lines[0].line).group(1)
    text = _text(ctx)
    arch = bool(re.search(r"(?i)\barch ?linux\b|\bmanjaro\b|\bendeavour|\bpacman\b|/opt/cuda\b", text))
    fedora = bool(re.search(r"(?i)\bfedora\b|\brhel\b|\brocky\b|\balma\b|\bdnf\b", text))
    install = (f"sudo pacman -S gcc{n} (it installs gcc-{n} / g++-{n})" if arch else
               f"a gcc {n} toolset (dnf: gcc-toolset-{n}, then scl enable gcc-toolset-{n} bash; or conda install -c "
               f"conda-forge gxx={n})" if fedora else f"sudo apt install gcc-{n} g++-{n}")
    return _first(_make("abi-mismatch", f"nvcc supports gcc up to {n}",
                        f"this CUDA toolkit supports host compilers up to gcc {n}; the default gcc is newer, and nvcc's "
                        "host_config.h stops the build",
                        f"install gcc {n} beside the default: {install}, and build with it: export CC=gcc-{n} "
                        f"CXX=g++-{n} CUDAHOSTCXX=g++-{n} NVCC_CCBIN=g++-{n} (or nvcc -ccbin g++-{n}); or install a "
                        "newer CUDA toolkit that supports this gcc; -allow-unsupported-compiler skips the check at "
                        "your own risk", [ctx.line_fact(lines[0])], lines[:1]))


# a running sum of the loss tensor itself (with its graph), not of its value: total_loss += loss, losses.append(loss)
_LOSS_KEPT = re.compile(r"(?i)\b\w*loss\w*\s*\+=\s*(?:\w+\.)?loss\b(?!\s*\.\s*(?:item|detach|cpu|data)\b)(?!\w)|"
                        r"\.append\(\s*(?:\w+\.)?loss\s*\)")
_GROWS = re.compile(r"(?i)out of memory|\bOOM\b|memory (?:keeps |slowly )?(?:grows?|growing|increas\w+|leak\w*|climb\w*)|"
                    r"(?:grows?|increas\w+|leaks?) (?:every|each) (?:iteration|step|batch|epoch)|显存.{0,6}(?:增长|增加|泄漏)")


@rule("out-of-memory")
def loss_kept_with_its_graph(ctx: Context) -> Optional[Diagnosis]:
    """PyTorch's FAQ: a loss accumulated as a tensor keeps each step's autograd graph alive, so memory grows until
    it runs out; its value (loss.item()) is what a log needs."""
    kept = _lines_matching(ctx, _LOSS_KEPT)
    if not kept or not _GROWS.search(_text(ctx)):
        return None
    return _first(_make("out-of-memory", "the loss is kept with its autograd history",
                        "the loop accumulates the loss tensor itself, and with it each step's computation graph (and "
                        "the activations it holds), so GPU memory grows every iteration until it runs out",
                        "accumulate the number, not the tensor: total_loss += loss.item() (or loss.detach()); the same "
                        "for lists of losses or outputs kept for logging; run evaluation under torch.no_grad()",
                        [ctx.line_fact(kept[0])], kept[:1]))


_SMI_STILL = re.compile(r"(?i)nvidia-smi\b.{0,40}\b(?:still|keeps?)\b.{0,30}\b(?:shows?|uses?|using|used|holds?|"
                        r"report\w*|occupied)\b|(?:memory|VRAM|显存)\b.{0,30}\b(?:not (?:being )?(?:freed|released|"
                        r"returned)|never (?:freed|released))|(?:after|despite)\s+(?:`?del |deleting |gc\.collect).{0,60}"
                        r"nvidia-smi|显存.{0,10}(?:不释放|没有释放|未释放)")


@rule("out-of-memory")
def caching_allocator_keeps_memory(ctx: Context) -> Optional[Diagnosis]:
    """PyTorch's CUDA semantics notes: the caching allocator keeps freed blocks reserved for reuse, so nvidia-smi
    still shows them; the memory is free to torch, and empty_cache() hands it back to the driver."""
    said = _lines_matching(ctx, _SMI_STILL)
    text = _text(ctx)
    if not said or not re.search(r"(?i)nvidia-smi", text) or re.search(r"(?i)\bROCm\b|rocm-smi|amd-smi|Radeon", text):
        return None
    if re.search(r"(?i)out of memory|\bOOM\b", text):
        return None   # a run that did fail: the memory rules read the failure
    return _make("out-of-memory", "torch's caching allocator keeps freed memory reserved",
                 "PyTorch caches the GPU memory it freed so the next allocation is fast: nvidia-smi counts that reserved "
                 "memory (and the CUDA context, a few hundred MB) as used by the process, though torch can reuse it",
                 "it is not a leak: torch.cuda.memory_allocated() is what tensors use, memory_reserved() what the cache "
                 "holds; after del model (and gc.collect()) call torch.cuda.empty_cache() to give the cache back to "
                 "other processes; the CUDA context is freed only when the process ends",
                 [ctx.line_fact(said[0])], said[:1], severity="warning")


_JAX = re.compile(r"(?i)\bjax(?:lib)?\b|\bflax\b")
_PREALLOC = re.compile(r"(?i)\b75 ?%|prealloc\w*|\b(?:takes?|grabs?|reserves?|allocates?|uses?|occup\w+)\b.{0,20}"
                       r"\b(?:all|most|almost all|nearly all|the whole)\b.{0,10}\b(?:GPU|VRAM|memory)\b")


@rule("out-of-memory")
def jax_preallocates(ctx: Context) -> Optional[Diagnosis]:
    """JAX's GPU memory page: JAX preallocates 75% of the GPU's memory at its first operation (XLA's BFC arena), so
    nvidia-smi shows it taken and another framework or process in the same GPU runs out."""
    text = _text(ctx)
    said = _lines_matching(ctx, _PREALLOC)
    if not _JAX.search(text) or not said or re.search(r"XLA_(?:PYTHON_)?CLIENT_(?:PREALLOCATE|MEM_FRACTION|ALLOCATOR)", text):
        return None
    return _first(_make("out-of-memory", "JAX preallocates 75% of the GPU",
                        "JAX (XLA) reserves 75% of the GPU's memory at its first operation for its own allocator; "
                        "what nvidia-smi shows is that reservation, and other code (torch, TensorFlow, another JAX "
                        "process) on the same GPU gets only the rest",
                        "export XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate as needed) or "
                        "XLA_CLIENT_MEM_FRACTION=.50 (a smaller share; XLA_PYTHON_CLIENT_MEM_FRACTION in JAX releases "
                        "before the rename) before the process starts - before "
                        "import jax; XLA_PYTHON_CLIENT_ALLOCATOR=platform frees memory exactly (slow, for debugging)",
                        [ctx.line_fact(said[0])], said[:1]))


_PINNED = re.compile(r"(?i)pin_memory\s*=\s*True|\bpinn(?:ed|ing)\b|cudaHostAlloc|cudaMallocHost|pin_memory")


@rule("wsl")
def wsl_pinned_memory(ctx: Context) -> Optional[Diagnosis]:
    """CUDA on WSL's known limitations: pinned (page-locked) system memory is limited under WSL 2, so a loader that
    pins large batches fails there while the same script runs on native Linux."""
    # (round 18: the guide's page was not retrieved again; the limit is confirmed second-hand -- microsoft/WSL#8447,
    # CUDA out of memory under WSL 2 with half the GPU memory used, traced to pin_memory; ddpn08/rvc-webui#78's fix
    # is pin_memory=False)
    if not ctx.sheet.has("platform", "wsl"):
        return None
    pinned = _lines_matching(ctx, _PINNED)
    failed = _lines_matching(ctx, r"(?i)out of memory|cudaErrorMemoryAllocation|error|fail")
    if not pinned or not failed:
        return None
    return _first(_make("wsl", "WSL 2 limits pinned system memory",
                        "under WSL 2 the memory an application pins (page-locks) for the GPU is limited (CUDA on WSL's "
                        "known limitations); pinning large buffers fails with an out-of-memory error while the GPU "
                        "itself has room",
                        "turn pinning off: DataLoader(..., pin_memory=False) (a trainer's dataloader_pin_memory=False); "
                        "give WSL more memory in %UserProfile%\\.wslconfig ([wsl2] memory=...) and wsl --shutdown; or "
                        "run where pinning is not capped (native Linux)",
                        [ctx.line_fact(pinned[0])], pinned[:1] + failed[:1]))


_NCCL_IFACE = re.compile(r"NET/Socket\s*:\s*Using\s*\[\d+\]\s*(docker\d*|lo|virbr\d+|veth\w+|br-\w+|cni\d*|flannel\S*)"
                         r"\s*:")
_REAL_IFACE = re.compile(r"(?<![\w/])((?:en|eth|ib|bond|eno|ens|enp)\w*\d\w*)(?![\w/])")


@rule("multi-gpu-transport")
def nccl_wrong_interface(ctx: Context) -> Optional[Diagnosis]:
    """NCCL's troubleshooting page: NCCL uses the first socket interface it finds, a container bridge (docker0) or the
    loopback among them, unless NCCL_SOCKET_IFNAME names the one that reaches the other nodes."""
    lines = _lines_matching(ctx, _NCCL_IFACE)
    text = _text(ctx)
    if not lines or re.search(r"NCCL_SOCKET_IFNAME\s*=", text):
        return None
    # a connection that timed out or was refused is the socket reading's (interface and firewall together)
    if re.search(r"(?i)Connect to \S+ failed|Connection (?:timed out|refused)", text):
        return None
    bad = _NCCL_IFACE.search(lines[0].line).group(1)
    real = next((m.group(1) for m in _REAL_IFACE.finditer(text) if m.group(1) != bad), None)
    name = real or "<the interface of the nodes' network, from ip -br addr>"
    return _first(_make("multi-gpu-transport", f"NCCL talks over {bad}",
                        f"NCCL's bootstrap and socket transport picked {bad}, an interface that does not reach the "
                        "other nodes (a container bridge or the loopback), so the ranks never connect",
                        f"export NCCL_SOCKET_IFNAME={name} (and GLOO_SOCKET_IFNAME={name} for torch's gloo) on every "
                        f"node; or exclude the others: NCCL_SOCKET_IFNAME=^docker0,lo; rerun with NCCL_DEBUG=INFO: "
                        f"the NET/Socket line must name {name}", [ctx.line_fact(lines[0])], lines[:1]))
