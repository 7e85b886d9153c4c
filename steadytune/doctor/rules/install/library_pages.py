"""Situations the fine-tuning and kernel libraries list on their own troubleshooting, FAQ and install pages (round 17,
t17d), read from the machine's facts rather than from one message:

- bitsandbytes' installation guide (https://huggingface.co/docs/bitsandbytes/main/en/installation): a bitsandbytes that
  reports itself CPU-only beside a torch built for the CPU is torch's build, not bitsandbytes';
- flash-attention's README: without a working ninja the build takes hours (`ninja --version; echo $?` must be 0,
  MAX_JOBS for the memory); on ROCm the Composable Kernel backend covers MI200 / MI300 (gfx90a, gfx942, gfx950) and the
  Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE") the other AMD GPUs
  (https://github.com/Dao-AILab/flash-attention#amd-rocm-support);
- DeepSpeed's installation details: ops are built just in time with ninja under the torch extensions root; a build
  killed half way leaves its lock there and the next run waits on it for ever
  (https://www.deepspeed.ai/tutorials/advanced-install/);
- Unsloth's AMD guide: a ROCm torch first, then unsloth[amd] (https://unsloth.ai/docs/get-started/install/amd);
- xformers' README: its wheels are built for one torch, installed from that torch's own index."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.facts import Fact, vendor_of
from steadytune.doctor.fixes import cuda_wheel_for, rocm_index_for
from steadytune.doctor.rules.base import (Context, Diagnosis, _first, _lines_matching, _make, _text, _vendor, rule)
from steadytune.hardware.gpu_facts import normalise_gfx


def _sm(ctx: Context) -> tuple[Optional[int], Optional[Fact]]:
    """The NVIDIA GPU's compute capability (sm_XY as XY) and the fact that names it."""
    for fact in ctx.sheet.of("arch"):
        m = re.fullmatch(r"sm_(\d+)", fact.value)
        if m:
            return int(m.group(1)), fact
    return None, None


# a failure said: an error line, a refusal, a crash
_FAILS = re.compile(r"(?i)\berror\b|not supported|unsupported|fail\w*|exception|invalid device function|"
                    r"no kernel image|doesn'?t work|does not work|crash\w*|Traceback")


# --- bitsandbytes CPU-only beside a CPU torch --------------------------------------------------------------------------
_BNB_CPU = re.compile(r"bitsandbytes was compiled without GPU support|CPU-only version of bitsandbytes|"
                      r"bitsandbytes is running as CPU-only")


@rule("torch-build")
def bnb_cpu_only_under_cpu_torch(ctx: Context) -> Optional[Diagnosis]:
    """bitsandbytes says it runs CPU-only and the torch beside it is a +cpu build on a machine with a GPU: bitsandbytes
    follows torch, so torch's build is the cause, and upgrading bitsandbytes changes nothing."""
    said = _lines_matching(ctx, _BNB_CPU)
    if not said:
        return None
    cpu_torch = next((f for f in ctx.sheet.of("torch") if f.detail == "cpu" or "+cpu" in f.value), None)
    if cpu_torch is None:
        return None
    vendor = _vendor(ctx)
    cc, fact = _sm(ctx)
    if vendor == "amd":
        arch = next((normalise_gfx(f.value) for f in ctx.sheet.of("arch") if f.value.startswith("gfx")), None)
        index = rocm_index_for(arch)
    elif cc is not None:
        index = cuda_wheel_for(f"sm_{cc}") or "pip install torch --index-url https://download.pytorch.org/whl/cu128"
    else:
        return None
    return _first(_make("torch-build", "bitsandbytes is CPU-only because torch is a CPU build",
                        f"torch {cpu_torch.value} is built for the CPU, so bitsandbytes finds no GPU through it and "
                        "loads its CPU library; the 8-bit / 4-bit GPU kernels are missing whatever bitsandbytes "
                        "release is installed",
                        f"install torch's GPU build first: pip uninstall -y torch torchvision torchaudio; {index}; "
                        "python -c \"import torch; print(torch.cuda.is_available())\" must print True; then "
                        "python -m bitsandbytes must end in SUCCESS", [cpu_torch], said[:1]))


# --- flash-attn / xformers source builds without ninja ----------------------------------------------------------------
_EXT_BUILD = re.compile(r"(?i)(?:Building wheel for|pip install|building|compil\w+|setup\.py)\W+(?:[\w-]+\W+){0,3}?"
                        r"(flash[-_]attn|flash[-_]attention|xformers|deepspeed|apex|causal[-_]conv1d|mamba[-_]ssm)")
_SLOW_SAID = re.compile(r"(?i)\b(?:for|over|after|takes?|taking|took|been)\b[^\n]{0,30}\b(?:hours?|hrs?)\b|"
                        r"\b\d+\s*(?:hours?|hrs?|h)\b[^\n]{0,20}\b(?:still|and|later|no progress)|"
                        r"takes? (?:forever|ages)|taking (?:forever|ages)|very slow\w*|never finish\w*|"
                        r"stuck (?:at|on) Building wheel|编译.{0,8}(?:很久|很慢|几个小时)")


@rule("wheel-platform")
def extension_build_without_ninja(ctx: Context) -> Optional[Diagnosis]:
    """A flash-attn (xformers, DeepSpeed, apex ...) source build said to take hours: without a working ninja torch's
    extension builder compiles one file at a time (the flash-attention README: two hours instead of minutes)."""
    text = _text(ctx)
    build = _EXT_BUILD.search(text)
    if not build or not _SLOW_SAID.search(text) or re.search(r"(?i)Killed signal|out of memory|cc1plus.*Killed", text):
        return None
    package = build.group(1).lower().replace("_", "-")
    package = "flash-attn" if package.startswith("flash") else package
    said = _lines_matching(ctx, _SLOW_SAID)
    return _make("wheel-platform", f"the {package} build compiles without ninja",
                 f"{package} compiles its CUDA/HIP kernels through torch's extension builder, which runs them in "
                 "parallel only through ninja; without ninja (or with a broken one) every file is compiled in turn, "
                 "and the build takes hours",
                 "pip install ninja, then check it: ninja --version; echo $? must print 0 (if not: pip uninstall -y "
                 f"ninja && pip install ninja); then MAX_JOBS=4 pip install {package} --no-build-isolation (MAX_JOBS "
                 "bounds the parallel compilers, each of which takes several GB of RAM); or skip the build with a "
                 "prebuilt wheel for this torch, CUDA and Python from the project's releases", [], said[:1],
                 confirmed=False)


# --- flash-attn on AMD GPUs outside the CK backend ------------------------------------------------------------------
# the flash-attention README's AMD section: "FlashAttention-2 ROCm CK backend currently supports: MI200x, MI250x,
# MI300x, and MI355x GPUs" -- gfx90a, gfx942 and gfx950 (Dao-AILab/flash-attention#amd-rocm-support, checked round 18)
_CK_ARCHS = ("gfx90a", "gfx942", "gfx950")


@rule("attention")
def flash_attn_amd_outside_ck(ctx: Context) -> Optional[Diagnosis]:
    """flash-attn failing to build or run on an AMD GPU that its Composable Kernel backend does not cover (the CK
    backend builds for MI200 / MI300 only); the Triton backend runs on the other ROCm GPUs."""
    text = _text(ctx)
    if not re.search(r"(?i)flash[-_]?attn|flash[-_]attention", text) or "FLASH_ATTENTION_TRITON_AMD_ENABLE" in text:
        return None
    archs = [normalise_gfx(f.value) for f in ctx.sheet.of("arch") if f.value.startswith("gfx")]
    if not archs or any(a in _CK_ARCHS for a in archs):
        return None
    failed = _lines_matching(ctx, _FAILS)
    if not failed:
        return None
    arch = archs[0]
    return _make("attention", f"flash-attn's CK backend does not build for {arch}",
                 f"flash-attn's default ROCm backend (Composable Kernel) is built for MI200 / MI300 (gfx90a, gfx942, "
                 f"gfx950) only; on {arch} it fails to build or has no kernels, while its Triton backend covers the "
                 "other ROCm GPUs",
                 "skip flash-attn and use PyTorch's SDPA attention: attn_implementation=\"sdpa\" in from_pretrained "
                 "(LLaMA-Factory: flash_attn: sdpa; pip uninstall -y flash-attn); or, for flash-attn itself, its Triton "
                 "backend: FLASH_ATTENTION_TRITON_AMD_ENABLE=\"TRUE\" pip install flash-attn --no-build-isolation (a "
                 "ROCm torch and its triton installed first), with FLASH_ATTENTION_TRITON_AMD_ENABLE=\"TRUE\" "
                 "exported when running", [], failed[:1])


# --- a JIT extension build waiting on a stale lock ------------------------------------------------------------------
_JIT_LAST = re.compile(r"Loading extension module (\w+)|Emitting ninja build file (\S+)")
_EXT_ROOT = re.compile(r"Using (\S+) as PyTorch extensions root")
_WAITS_SAID = re.compile(r"(?i)\b(?:hangs?|hanging|hung|stuck|freez\w*|forever|never (?:returns|finishes|ends)|"
                         r"no progress|waits?|waiting)\b|卡住|卡死|不动")


@rule("abi-mismatch")
def jit_extension_stale_lock(ctx: Context) -> Optional[Diagnosis]:
    """DeepSpeed (or any torch JIT extension) stuck at "Loading extension module X" after a build that was killed
    half way: torch's builder left its lock file in the extension's folder and every later run waits for it."""
    text = _text(ctx)
    last = _lines_matching(ctx, _JIT_LAST)
    if not last or not _WAITS_SAID.search(text):
        return None
    if re.search(r"(?i)\berror\b(?!s? ?=)|Traceback|undefined symbol|failed", text):
        return None
    # torch's own code (torch/utils/cpp_extension.py, checked in round 18 against torch 2.13): the root is
    # TORCH_EXTENSIONS_DIR or user_cache_dir("torch_extensions") (~/.cache/torch_extensions), then a py<XY>_cu<ZZZ>
    # folder, then one per extension; _jit_compile takes FileBaton(<build dir>/lock), and file_baton.py's wait() sleeps
    # while that file exists -- so deleting the extension's folder (the lock with it) is what frees the next run
    names = [m.group(1) for m in _JIT_LAST.finditer(text) if m.group(1)]
    root = _EXT_ROOT.search(text)
    folder = f"{root.group(1).rstrip('.')}/{names[-1] if names else '<the extension>'}" if root else \
        f"~/.cache/torch_extensions/<py and CUDA tag>/{names[-1] if names else '<the extension>'}"
    return _first(_make("abi-mismatch", "a JIT extension build waits on the lock a killed build left",
                        "torch's extension builder (DeepSpeed's ops are built this way, just in time) takes a lock "
                        "file in the extension's folder while compiling; a run killed during that build leaves the "
                        "lock behind, and every later run waits on it without an error",
                        f"stop the run, delete the extension's folder: rm -rf {folder} (or the whole torch_extensions "
                        "root; TORCH_EXTENSIONS_DIR moves it), and start again so it builds once; with several ranks "
                        "let one finish the build first, or pre-build the op: DS_BUILD_CPU_ADAM=1 pip install "
                        "deepspeed (ds_report shows what is installed)", [], last[-1:]))


# --- Unsloth on an AMD GPU --------------------------------------------------------------------------------------------
_UNSLOTH_NO_GPU = re.compile(r"Unsloth cannot find any torch accelerator|Unsloth: No NVIDIA GPU found|"
                             r"Unsloth currently only works on NVIDIA, AMD and Intel GPUs")


@rule("torch-build")
def unsloth_amd_without_rocm_torch(ctx: Context) -> Optional[Diagnosis]:
    """Unsloth finding no GPU on an AMD machine: the torch beside it is not the ROCm build."""
    said = _lines_matching(ctx, _UNSLOTH_NO_GPU)
    # the machine's own facts say AMD (a Radeon / Instinct named, a gfx arch, ROCm): Unsloth's message names AMD itself
    amd = vendor_of(ctx.sheet) == "amd" or any(f.value.startswith("gfx") for f in ctx.sheet.of("arch")) or \
        ctx.sheet.has("rocm")
    if not said or not amd or any(a.startswith("sm_") for a in ctx.sheet.machine_archs):
        return None
    arch = next((normalise_gfx(f.value) for f in ctx.sheet.of("arch") if f.value.startswith("gfx")), None)
    return _first(_make("torch-build", "Unsloth finds no GPU: the torch on this AMD machine is not a ROCm build",
                        "Unsloth reaches the GPU through torch; a CUDA or CPU torch (what pip install unsloth pulls "
                        f"from PyPI) sees no AMD GPU{' (' + arch + ')' if arch else ''}, so Unsloth stops",
                        f"pip uninstall -y torch torchvision torchaudio; {rocm_index_for(arch)} (python -c \"import "
                        "torch; print(torch.version.hip, torch.cuda.is_available())\" must print a ROCm version and "
                        "True); then pip install \"unsloth[amd]\" (its AMD extra brings the ROCm bitsandbytes), as "
                        "Unsloth's AMD guide installs it", [], said[:1]))


# --- xformers pulling another torch ---------------------------------------------------------------------------------
_XF_PULLED = re.compile(r"(?i)(?:pip install|installing)\s+(?:-U\s+)?xformers\b[^\n]{0,80}\b(?:pulled|replaced|"
                        r"upgraded|downgraded|uninstalled|removed|overwr\w+|changed|installed)\b[^\n]{0,40}\btorch|"
                        r"\bxformers\s+(?:pulled|replaced|upgraded|downgraded|uninstalled|overwr\w+)\b[^\n]{0,30}\btorch")


@rule("torch-build")
def xformers_pulls_other_torch(ctx: Context) -> Optional[Diagnosis]:
    """pip install xformers replacing the installed torch: each xformers wheel is built for one torch release and pins
    it, so the resolver swaps torch; the xformers for the installed torch comes from that torch's own index."""
    said = _lines_matching(ctx, _XF_PULLED)
    if not said:
        return None
    text = _text(ctx)
    builds = re.findall(r"\btorch[ =-]{1,2}(\d+\.\d+\.\d+)\+(cu\d+|rocm[\d.]+)", text) or \
        re.findall(r"\b(\d+\.\d+\.\d+)\+(cu\d+|rocm[\d.]+)", text)
    kept = builds[-1] if builds else None
    if len(builds) >= 2:
        # the user's own torch is the one they name as theirs ("over my torch X"), else the earlier one
        mine = re.search(r"(?i)\bmy torch[ =-]{0,2}(\d+\.\d+\.\d+)\+(cu\d+|rocm[\d.]+)", text)
        kept = (mine.group(1), mine.group(2)) if mine else builds[0]
    if kept:
        version, tag = kept
        fix = (f"put the torch back and take the xformers built for it from its index: pip install torch=={version} "
               f"--index-url https://download.pytorch.org/whl/{tag}; pip install -U xformers --index-url "
               f"https://download.pytorch.org/whl/{tag} --no-deps (or pin the xformers release made for torch "
               f"{version}); python -m xformers.info then shows its kernels available")
    else:
        fix = ("install xformers from the index of the installed torch: pip install -U xformers --index-url "
               "https://download.pytorch.org/whl/<torch's cuXXX tag> (or pin the xformers release made for that torch, "
               "with --no-deps); python -m xformers.info then shows its kernels available")
    return _first(_make("torch-build", "installing xformers replaced the installed torch",
                        "every xformers wheel is built against one torch release and requires exactly it, so pip "
                        "swapped the installed torch for that one (and its CUDA)", fix, [], said[:1]))
