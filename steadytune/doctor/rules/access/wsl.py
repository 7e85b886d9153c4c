"""WSL 2: a ROCm release without WSL packages, a Windows build without GPU paravirtualisation, one GPU shared,
NVML and the collectives under WSL, a program that hangs there."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import set_variable
from steadytune.doctor.rules.base import (
    NOT_TORCH,
    _CONTAINED,
    Context,
    _cuda_index_for_driver,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    NOT_DETECTED,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)
from steadytune.doctor.rules.access.device_files import _WSL_SAID


# a program said to hang or stop answering once it uses the GPU, in English or Chinese
_WSL_HANG = (r"(?i)\b(?:stops? responding|not responding|hangs?|hung|freez(?:es|ing)|stuck)\b|无响应|卡住|卡死")


# ROCm's WSL runtime (hsa-runtime-rocr4wsl-amdgpu) came only with AMD's WSL point releases (6.1.3 for Ubuntu 22.04,
# then later 6.x point releases for 22.04 and 24.04, 6.4.2 among them: the Radeon docs' WSL matrix, threads ROCm
# #3924, #4064, #5361, discussion #5411); an x.y.0 release and ROCm 7.0 / 7.1 have none; from 7.2 WSL goes through
# librocdxg with the ordinary packages. Only the releases surely without it are named as such.
_NO_WSL_RELEASE = re.compile(r"6\.\d+\.0|7\.[01](?:\.\d+)?")


def _radeon_by_number(text: str) -> Optional[str]:
    """A Radeon named by its number alone ("6950xt", "7900 XTX"): its generation is enough to place it in AMD's WSL
    list (RX 6000: RDNA2, gfx103x; RX 7000: RDNA3; RX 9000: RDNA4)."""
    m = re.search(r"(?i)(?<![\w.])(?:rx ?)?([679])([0-9]{3}) ?(?:xtx|xt|gre)(?![a-z])", text)
    return {"6": "gfx1030", "7": "gfx1100", "9": "gfx1201"}[m.group(1)] if m else None


def _rocm_release(text: str) -> Optional[str]:
    """The ROCm release being installed: amdgpu-install's package (6.2.60203 is 6.2.3), the repository path, or
    the version said."""
    deb = re.search(r"amdgpu-install_(\d+)\.(\d+)\.(\d)0(\d)(\d\d)", text)
    if deb:
        return f"{deb.group(1)}.{deb.group(2)}.{int(deb.group(5))}"
    said = re.search(r"(?i)\bROCm ?(\d+\.\d+(?:\.\d+)?)|/rocm/apt/(\d+\.\d+(?:\.\d+)?)", text)
    return (said.group(1) or said.group(2)) if said else None


def _wsl_specific(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """WSL 2 failures whose message names their own cause: Windows without GPU paravirtualisation, vLLM's pinned
    memory, a container given the native-Linux devices, a ROCm release without WSL packages."""
    dxcore = _lines_matching(ctx, r"(?i)dxcore initialization failed|libdxcore\.so.{0,40}(?:not found|No such file|"
                                  r"cannot open)")
    if dxcore:
        return _make("wsl", "WSL 2 has no GPU paravirtualisation on this Windows",
                     "the container toolkit looks for /usr/lib/wsl/lib/libdxcore.so, which WSL mounts only where "
                     "Windows exposes the GPU to WSL (GPU-PV); on this Windows build it is missing, so no GPU is found",
                     "GPU in WSL 2 needs Windows 11, or Windows 10 21H2 (build 19044) or newer (winver shows the build; "
                     "update Windows), the Windows GPU driver with WSL support, and an updated WSL (wsl --update); then "
                     "ls /usr/lib/wsl/lib/libdxcore.so inside WSL", [fact], dxcore)
    # the Windows side gives WSL no GPU: NVML's "blocked by the operating system", the container toolkit's "no adapters"
    blocked = _lines_matching(ctx, r"(?i)GPU access blocked by the operating system|WSL environment detected but no "
                                   r"adapters were found")
    if blocked:
        return _make("wsl", "Windows gives WSL 2 no GPU",
                     "WSL 2 reaches the GPU only through the Windows driver's paravirtualisation (/dev/dxg and "
                     "/usr/lib/wsl/lib); here Windows exposes no GPU adapter to it (a Windows driver without WSL "
                     "support, an old WSL, or a Linux NVIDIA driver inside WSL shadowing WSL's libraries)",
                     "update the Windows NVIDIA driver (Game Ready / Studio, any current one supports WSL) and WSL "
                     "(wsl --update, then wsl --shutdown); inside WSL remove any Linux NVIDIA driver (sudo apt remove "
                     "'nvidia-driver-*' 'libnvidia-*') and check /usr/lib/wsl/lib/nvidia-smi lists the GPU; Docker: "
                     "use Docker Desktop's WSL 2 backend or the NVIDIA Container Toolkit inside WSL", [fact], blocked)
    uva = _lines_matching(ctx, r"(?i)UVA (?:is not|isn.t|not) available")
    if uva and (ctx.tool() == "vllm" or re.search(r"(?i)\bvllm\b", joined)):
        return _make("wsl", "vLLM turns pinned memory off under WSL 2",
                     "under WSL 2 vLLM disables pinned host memory by default, and without it UVA (the GPU reading "
                     "host memory directly) is unavailable, which its model runner needs at start-up",
                     "export VLLM_WSL2_ENABLE_PIN_MEMORY=1 before vllm serve (WSL 2 kernel 4.19.121 or newer has "
                     "working pinned memory: uname -r), or fall back to the V1 model runner", [fact], uva)
    kfd = _lines_matching(ctx, r"(?i)/dev/kfd\W{0,3}:? ?no such file or directory|no such file or directory.{0,20}"
                               r"/dev/kfd")
    if kfd and (_CONTAINED.search(joined) or re.search(r"(?i)--device", joined)):
        return _make("wsl", "WSL 2 has no /dev/kfd to give the container",
                     "under WSL 2 the GPU is reached through /dev/dxg and the libraries in /usr/lib/wsl/lib; the "
                     "native-Linux container flags (--device=/dev/kfd --device=/dev/dri) name devices WSL does not have",
                     "run the container with --device=/dev/dxg -v /usr/lib/wsl/lib/libdxcore.so:/usr/lib/libdxcore.so "
                     "-v /opt/rocm/lib/libhsa-runtime64.so.1:/opt/rocm/lib/libhsa-runtime64.so.1 (AMD's ROCm-on-WSL "
                     "docker example) instead of --device=/dev/kfd --device=/dev/dri", [fact], kfd)
    missing = _lines_matching(ctx, r"Unable to locate package (?:hsa-runtime-rocr4wsl-amdgpu|amdgpu-lib\b|"
                                   r"rocm-hip-runtime)")
    release = _rocm_release(joined)
    ubuntu = [f.value for f in ctx.sheet.of("os") if f.value.startswith("ubuntu ")]
    noble = any(v.startswith("ubuntu 24.04") for v in ubuntu) or re.search(r"\bnoble\b|Ubuntu ?24\.04", joined)
    outside = release and _NO_WSL_RELEASE.fullmatch(release)
    said = ctx.of("device-access", "wsl", "driver") + ctx.no_gpu()
    if missing or (outside and said and _vendor(ctx) == "amd"):
        why = (f"ROCm {release} has no WSL packages" if outside else
               "the WSL runtime package is not in the repository of the release being installed") + \
              (" for Ubuntu 24.04" if noble else "")
        return _make("wsl", "this ROCm release has no WSL runtime",
                     f"{why}: only AMD's WSL releases ship the WSL runtime (hsa-runtime-rocr4wsl-amdgpu) that "
                     "reaches the GPU through /dev/dxg, and the first of them, 6.1.3, is for Ubuntu 22.04 only",
                     "install the amdgpu-install of a WSL release and use its wsl usecase: ROCm 6.4.2 (Ubuntu 22.04 "
                     "or 24.04; amdgpu-install_6.4.60402-1_all.deb) or 6.1.3 on Ubuntu 22.04 (amdgpu-install_"
                     "6.1.60103-1_all.deb), then amdgpu-install -y --usecase=wsl,rocm --no-dkms (remove the other "
                     "release's repository first: sudo amdgpu-install --uninstall); ROCm 7.2 and newer reach WSL "
                     "through librocdxg instead", [fact], missing or said)
    return None


_COLLECTIVES = re.compile(r"(?i)\b(?:NCCL|RCCL|nccl-tests|all_reduce_perf|torchrun|DistributedDataParallel|DDP|"
                          r"multi[- ]?GPU|--multi_gpu|tensor[_ ]parallel\w*)\b|多卡|多GPU")


def _wsl_one(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """The distribution runs under WSL 1, which has no GPU at all (GPU paravirtualisation is WSL 2's): said, or
    shown by `wsl -l -v` with VERSION 1."""
    listed = re.search(r"(?im)^\s*\*?\s*(\S+)\s+(?:Running|Stopped)\s+1\s*$", joined)
    said = re.search(r"(?i)(?<![A-Za-z])WSL ?1(?![\d.])", joined)
    if not listed and not said:
        return None
    distro = listed.group(1) if listed else "<distro>"
    symptoms = ctx.errors + _symptom_lines(ctx, ctx.sheet.of("complaint")) or _lines_matching(
        ctx, r"(?i)is_available|not found|no GPU|nvidia-smi|rocminfo")
    if not symptoms:
        return None
    return _first(_make("wsl", "the distribution runs under WSL 1, which has no GPU",
                        "only WSL 2 passes the GPU to Linux (through /dev/dxg and /usr/lib/wsl/lib); a distribution "
                        "under WSL 1 sees no GPU whatever is installed in it",
                        f"convert it to WSL2 (WSL 2) from Windows: wsl --set-version {distro} 2 (and wsl --set-default-version "
                        "2 for new ones; needs the Virtual Machine Platform feature), then wsl -l -v must show VERSION "
                        "2", [fact] if fact else [], symptoms))


def _wsl_nvml(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """An NVIDIA tool's NVML start-up failing under WSL 2 (Ollama's GPU discovery, nvidia-smi's own library)."""
    nvml = _lines_matching(ctx, r"(?i)nvml\w* (?:vram )?init failure|libnvidia-ml\.so\S*:? cannot open|"
                                r"Failed to initialize NVML")
    if nvml and (_vendor(ctx) == "nvidia" or re.search(r"(?i)\bCUDA\b|GeForce|\bRTX\b|\bQuadro\b|nvidia-", joined)):
        # NVML is loaded by name: WSL mounts the Windows driver's copy in /usr/lib/wsl/lib, and a libnvidia-ml from a
        # Linux driver package (in /lib/x86_64-linux-gnu) found first fails to start
        return _make("wsl", "WSL 2: the NVML library loaded is not WSL's",
                     "under WSL 2 the NVIDIA management library (libnvidia-ml.so.1) comes from the Windows driver, "
                     "mounted in /usr/lib/wsl/lib; the tool (" + (ctx.tool(nvml) or "its GPU discovery") + ") loaded "
                     "another copy (from a Linux driver package, or an unversioned libnvidia-ml.so that is not WSL's), "
                     "and its start-up fails",
                     "make the WSL copy the one found: sudo ln -sf /usr/lib/wsl/lib/libnvidia-ml.so.1 "
                     "/usr/lib/wsl/lib/libnvidia-ml.so; sudo ldconfig (ldconfig -p | grep nvidia-ml must show "
                     "/usr/lib/wsl/lib first), or export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH for the "
                     "service; remove Linux NVIDIA driver packages inside WSL (sudo apt remove 'libnvidia-*' "
                     "'nvidia-driver-*') and keep only the Windows driver", [fact], nvml)
    return None


def _wsl_collectives(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """NCCL (or RCCL) across GPUs under WSL 2: NCCL did not support WSL 2 at first (NVIDIA/nccl#442: maintainers said
    it was not supported, later releases run there), and WSL 2's GPU paravirtualisation has no peer-to-peer between
    cards, so a multi-GPU job there fails or hangs where native Linux runs it. Said as an error or as a question."""
    said = _lines_matching(ctx, _COLLECTIVES.pattern)
    if not said or not _WSL_SAID.search(joined):
        return None
    rccl = _vendor(ctx) == "amd" or re.search(r"(?i)\bRCCL\b", joined)
    if rccl:
        fix = ("run multi-GPU ROCm jobs on native Linux: ROCm on WSL 2 supports single-GPU work only (AMD's Radeon WSL "
               "limitations); on WSL 2 train on one GPU")
    else:
        fix = ("update NCCL to a release that supports WSL 2 (a current torch wheel brings one: pip install -U torch, "
               "or pip install -U nvidia-nccl-cu12) and run with NCCL_P2P_DISABLE=1 under WSL 2 (no GPU peer-to-peer "
               "there); for multi-GPU training at full speed use native Linux (a dual boot)")
    return _make("wsl", "collectives across GPUs under WSL 2",
                 "under WSL 2 the GPUs are paravirtualised: " + (
                     "RCCL is not supported there" if rccl else
                     "early NCCL releases did not support WSL 2 at all, and later ones run there only without GPU "
                     "peer-to-peer"), fix, [fact], ctx.errors or said)


# the Windows build, as `ver` / winver / systeminfo print it, beside a Linux shell prompt: a WSL 2 session
_WINDOWS_BUILD = re.compile(r"(?im)Microsoft Windows \[Version 10\.0\.(\d{5})(?:\.\d+)?\]|\bOS build\W{0,3}(\d{5})\b|"
                            r"^\W*windows(?:\s+(?:version|build))?\s*[:：]\s*(\d{5})(?:\.\d+)?[ \t]*$|"
                            r"\bWindows (?:1[01] )?(?:Insider )?build\W{0,3}(\d{5})\b")
_LINUX_PROMPT = re.compile(r"^\S+@[\w.-]+:[~/][^$#\n]{0,80}[$#]\s")
# released Windows builds with WSL 2 GPU compute (Windows 10 21H2/22H2, Windows 11 21H2 to 25H2, Server 2022/2025);
# GPU-PV came to Windows 10 with 21H2 (19044): an older build has none, a 2xxxx build outside the list is a preview
_RELEASED_BUILDS = {19044, 19045, 20348, 22000, 22621, 22631, 26100, 26200}
# Insider preview builds whose GPU compute in WSL 2 was broken, and the build that mended it (microsoft/WSL's GPU
# issues: #6098, 20231 fixed in 20236; #6617, 21327 and #6773, 21354, each fixed in the next Insider build): a CUDA
# failure on one of them is that build's, whether or not the paste says WSL
_BROKEN_PREVIEWS = {20231: "20236", 21327: "the Insider build after 21327", 21354: "the Insider build after 21354"}


def _wsl_windows_build(ctx: Context, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """A WSL 2 session failing to reach the GPU on a Windows build that has no (working) GPU compute for WSL: a
    Windows 10 build before 21H2, or an Insider preview build; the fix is on the Windows side, its build."""
    said = _lines_matching(ctx, _WINDOWS_BUILD.pattern)
    if not said:
        return None
    m = _WINDOWS_BUILD.search(said[0].line)
    build = int(next(g for g in m.groups() if g))
    failing = ctx.of("wsl", "driver", "device-access", "visibility") + ctx.no_gpu() + _lines_matching(
        ctx, r"(?i)no CUDA-capable device|cudaGetDeviceCount returned|couldn't communicate with the NVIDIA driver|"
             r"all CUDA-capable devices are busy or unavailable|"
             r"/dev/dxg.{0,40}(?:No such file|not found)")
    if not failing or build in _RELEASED_BUILDS:
        return None
    if build < 18362:
        # WSL 2 itself needs Windows 10 1903 (build 18362.1049) or newer (Microsoft's manual WSL install steps): an
        # older build runs every distribution under WSL 1, which has no GPU at all
        return _make("wsl", f"Windows build {build} has only WSL 1, which has no GPU",
                     f"build {build} is older than Windows 10 1903 (18362), the first with WSL 2; the distribution runs "
                     "under WSL 1, which never passes a GPU to Linux, so no driver installed inside it can help",
                     f"WSL 1 (all that build {build} has) has no GPU: update Windows to Windows 10 21H2 (19044) or "
                     "newer, or Windows 11 (winver shows the build), then wsl --update, convert the distribution to WSL "
                     "2 (wsl --set-version <distro> 2; wsl -l -v shows VERSION 2) and keep only the Windows GPU driver",
                     [fact], said[:1] + failing)
    if build < 19044:
        return _make("wsl", f"Windows build {build} gives WSL 2 no GPU",
                     f"WSL 2 reaches the GPU through Windows' GPU paravirtualisation, which Windows 10 has from 21H2 "
                     f"(build 19044); build {build} is older",
                     f"update Windows from build {build} to Windows 10 21H2 (19044) or newer, or Windows 11 (winver "
                     "shows the build), then wsl --update and wsl --shutdown; nothing to change inside Linux",
                     [fact], said[:1] + failing)
    mended = _BROKEN_PREVIEWS.get(build)
    if mended:
        return _make("wsl", f"Windows preview build {build} broke GPU compute in WSL 2",
                     f"Insider preview build {build} shipped with GPU compute (CUDA, DirectML) in WSL 2 broken, a known "
                     "issue of that build; nothing inside Linux mends it",
                     f"update Windows to build {mended} or newer (Settings > Windows Update, Insider channel), or leave "
                     "the Insider programme for a released build; then wsl --shutdown and run again",
                     [fact], said[:1] + failing)
    return _make("wsl", f"Windows preview build {build} breaks GPU compute in WSL 2",
                 f"build {build} is a Windows Insider preview, not a released build; GPU compute in WSL 2 is provided "
                 "by Windows (its GPU paravirtualisation and the driver's WSL libraries), and some preview builds "
                 "break it, so CUDA inside WSL finds no device whatever is installed in Linux",
                 f"update Windows past build {build} (the next Insider build with the fix, or leave the Insider "
                 "programme for a released build), keep the Windows NVIDIA driver current, then wsl --shutdown; "
                 "nothing to change inside Linux (never install a Linux NVIDIA driver in WSL)",
                 [fact], said[:1] + failing)


def _wsl_pinned(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """ggml's CUDA backend (llama.cpp and the tools built on it) running out of memory under WSL 2 where the model
    fits: it allocates its host buffers page-locked (pinned), and WSL 2 caps pinned host memory far below the RAM."""
    oom = _lines_matching(ctx, r"(?i)(?:CUDA error\W{0,3}|cudaMallocHost|pinned|ggml[-_]cuda\S*).{0,80}out of memory|"
                               r"out of memory.{0,80}(?:ggml[-_]cuda|cudaMallocHost|pinned)")
    if not oom or not re.search(r"(?i)\bggml|llama[._-]?cpp|\bllama_model_load|koboldcpp|\./main\b", joined):
        return None
    return _make("wsl", "WSL 2 limits the pinned memory llama.cpp's CUDA backend asks for",
                 "ggml's CUDA backend allocates its host buffers as pinned (page-locked) memory, which CUDA under WSL 2 "
                 "caps far below the machine's RAM, so the allocation fails with 'out of memory' although the model "
                 "fits in the GPU",
                 "turn pinned memory off for it: export GGML_CUDA_NO_PINNED=1 before starting it (or a build that "
                 "falls back to ordinary memory when the pinned allocation fails: update llama.cpp)", [fact], oom)


# The first Adrenalin release with ROCm on WSL for a Radeon that came after WSL support began: an older Windows driver
# exposes the card to Windows but not to ROCm inside WSL (RX 9070 series: 25.6.1, the accepted answer of ROCm #4471;
# RX 7700 XT: 25.8.1, its release notes' "AMD ROCm on WSL for AMD Radeon RX 7700 XT")
_ADRENALIN_FOR_WSL = ((re.compile(r"(?i)\bRX ?9070(?: ?XT| ?GRE)?\b"), "Radeon RX 9070 series", "25.6.1"),
                      (re.compile(r"(?i)\bRX ?7700 ?XT\b"), "Radeon RX 7700 XT", "25.8.1"))


def _wsl_adrenalin_for_the_card(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """A Radeon that ROCm on WSL supports only from a given Adrenalin release, not seen inside WSL: the Windows
    driver is the fix (nothing inside Linux exposes the card to WSL)."""
    named = "\n".join([joined, *ctx.sheet.values("gpu")])   # the card as the facts read it too ("9070XT" unprefixed)
    card = next(((name, release) for pattern, name, release in _ADRENALIN_FOR_WSL if pattern.search(named)), None)
    said = _lines_matching(ctx, NOT_DETECTED) + ctx.of("wsl", "device-access", "driver") + ctx.no_gpu()
    if card is None or not said:
        return None
    name, release = card
    return _make("wsl", f"the Windows driver gives ROCm on WSL no {name}",
                 f"ROCm inside WSL 2 sees only the GPUs the Windows Adrenalin driver exposes to WSL; ROCm on WSL for "
                 f"the {name} came with Adrenalin {release}, and an older driver leaves rocminfo with the CPU alone",
                 f"install AMD Software: Adrenalin Edition {release} or newer on the Windows host (the WSL-enabled "
                 "release), then wsl --shutdown and run rocminfo again; keep ROCm's WSL packages inside Linux "
                 "(amdgpu-install -y --usecase=wsl,rocm --no-dkms)", [fact], said)


# vLLM's own warning under WSL: it turns pinned host memory off there
_VLLM_UNPINNED = re.compile(r"(?i)Using 'pin_memory=False' as WSL is detected")


def _wsl_unpinned_slow(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """vLLM slower under WSL 2 than on Linux, with its own warning that pinned memory is off: CUDA on WSL limits
    pinned (page-locked) host memory (NVIDIA's CUDA on WSL guide, known limitations), so vLLM runs without it."""
    said = _lines_matching(ctx, _VLLM_UNPINNED.pattern)
    if not said:
        return None
    return _make("wsl", "vLLM runs without pinned memory under WSL 2",
                 "CUDA under WSL 2 limits pinned (page-locked) host memory, so vLLM turns pin_memory off there (its "
                 "warning says so); copies between the host and the GPU (the KV cache's swap space, inputs) are "
                 "slower than on native Linux",
                 "nothing inside WSL brings pinned memory back to full size: for vLLM's full speed run it on native "
                 "Linux (a dual boot or a Linux server); under WSL the slowdown is expected, not a setting to mend",
                 [fact], said, confirmed=False)


# a Vulkan program's driver error: the loader found no Vulkan driver for the GPU
_VULKAN_NO_DRIVER = re.compile(r"(?i)VK_ERROR_INCOMPATIBLE_DRIVER|VK_ERROR_INITIALIZATION_FAILED|"
                               r"(?:no|cannot find a compatible) Vulkan (?:device|driver|ICD)s?\b")


def _wsl_vulkan(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """A Vulkan build (mlc-llm, llama.cpp's, ncnn) inside WSL 2 finding no Vulkan driver: WSL passes the GPU to Linux
    for CUDA, DirectML and ROCm; Vulkan there has only Mesa's software or experimental D3D12 layers."""
    said = _lines_matching(ctx, _VULKAN_NO_DRIVER.pattern)
    if not said:
        return None
    tool = ctx.tool(said) or "the program"
    return _make("wsl", "WSL 2 has no Vulkan driver for the GPU",
                 f"{tool} uses Vulkan, and WSL 2 gives Linux the GPU for CUDA, DirectML and ROCm but no hardware "
                 "Vulkan driver (only Mesa's software rasteriser or its experimental D3D12 layer), so the Vulkan "
                 "loader finds no compatible driver",
                 f"run {tool} natively on Windows (CMD or PowerShell, the Windows build of it, which uses the "
                 "Windows GPU driver's Vulkan), or inside WSL use a CUDA / ROCm build of it instead of the Vulkan one",
                 [fact], said)


# ldconfig's warning for a library WSL mounts from the Windows driver (C:\\Windows\\System32\\lxss\\lib): the driver ships
# libcuda.so and libcuda.so.1 as copies of libcuda.so.1.1, not links, and ldconfig says so on every run
_NOT_A_LINK = re.compile(r"(/usr/lib/wsl/lib/(lib[\w-]+)\.so(?:\.\d+)*) is not a symbolic link")


def _wsl_copies_not_links(ctx: Context, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """ldconfig (run by every package install) warning that a library in /usr/lib/wsl/lib is not a symbolic link:
    the Windows driver's copies, harmless; replacing them with links (on the Windows side, where they live) silences
    it (microsoft/WSL#5548)."""
    said = _lines_matching(ctx, _NOT_A_LINK.pattern)
    if not said:
        return None
    m = _NOT_A_LINK.search(said[0].line)
    path, name = m.group(1), m.group(2)
    target = f"{name}.so.1.1" if name == "libcuda" else f"the versioned {name}.so file beside it"
    return _make("wsl", f"WSL's {name} is a copy, not a link",
                 f"{path} comes from the Windows driver (C:\\Windows\\System32\\lxss\\lib, mounted read-only in "
                 f"/usr/lib/wsl/lib), which ships it as a copy of {target}; ldconfig expects a symbolic link and "
                 "warns on every run (a package install or ldconfig itself); CUDA works regardless",
                 f"the warning is harmless; to silence it replace the copies with links to {target} on the Windows "
                 "side, in an administrator Command Prompt: cd C:\\Windows\\System32\\lxss\\lib, del "
                 f"{name}.so {name}.so.1, mklink {name}.so {target} and mklink {name}.so.1 {target} (a Windows "
                 "driver update puts the copies back); nothing to change inside Linux", [fact], said,
                 severity="warning")


# the ROCm runtime's own words under WSL when it finds no GPU it supports: the WSL runtime rejects a card outside AMD's
# WSL list ("ROCR: unsupported GPU"), and reports "no GPU" as HSA_STATUS_ERROR_OUT_OF_RESOURCES (rocm-systems #1153)
_WSL_REJECTS = re.compile(r"ROCR: unsupported GPU|HSA_STATUS_ERROR_OUT_OF_RESOURCES")
_RADEON_NAMED = re.compile(r"(?i)(?<![\w.])(?:(?:radeon )?(?:pro )?rx ?|pro ?w|w)?([5-9]\d{3}) ?(xtx|xt|gre)?(?![\w])")
# the cards of the first WSL release's list (ROCm 6.1.3 for WSL: RX 7900 XTX / XT / GRE, PRO W7900 / W7800), on every
# later one too
_ON_THE_WSL_LIST = re.compile(r"(?i)7900 ?(?:xtx|xt|gre)|w ?7900|w ?7800")
_NO_AMD_GPU = re.compile(r"(?i)(?:without|no|not have|don.t have|doesn.t have) (?:an?y? )?(?:AMD |Radeon )?(?:GPU|graphics "
                         r"card|card)s?\b|没有.{0,4}(?:AMD|显卡|GPU)")


def _wsl_runtime_rejects(ctx: Context, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """ROCm under WSL 2 refusing the GPU in its own words: a card outside AMD's WSL compatibility list, or no AMD GPU at
    all, which the WSL runtime reports as running out of resources; programs that ask rocm_agent_enumerator for the
    GPUs (hipcc, hipconfig, CMake's detection) then retry it and seem to hang."""
    said = _lines_matching(ctx, _WSL_REJECTS.pattern)
    if not said:
        return None
    text = _text(ctx)
    card = next((m for m in _RADEON_NAMED.finditer(text) if m.group(2) or re.search(r"(?i)rx|w\d", m.group(0))), None)
    if card is not None and _ON_THE_WSL_LIST.search(card.group(0)):
        return None   # a card on every WSL release's list: the release or the Windows driver, other readings
    if card is not None and not _NO_AMD_GPU.search(text):
        name = card.group(0).strip()
        return _make("wsl", f"ROCm on WSL does not support the {name}",
                     f"ROCm under WSL 2 runs only on the GPUs of AMD's WSL compatibility matrix, a shorter list than "
                     f"native Linux's (ROCm 6.1.3's WSL release: Radeon RX 7900 XTX / XT / GRE, PRO W7900 / W7800); "
                     f"the WSL runtime rejects the {name} ('unsupported GPU', then HSA_STATUS_ERROR_OUT_OF_RESOURCES), "
                     "and HSA_OVERRIDE_GFX_VERSION does not change what the WSL runtime accepts",
                     f"check the {name} against the WSL compatibility matrix of the ROCm release installed (Radeon "
                     "docs, Compatibility matrices, WSL): where a later WSL release lists it, install that release's "
                     "amdgpu-install with --usecase=wsl,rocm --no-dkms and the Adrenalin driver it names; otherwise run "
                     "ROCm on native Linux (a dual boot) for this card", [fact], said)
    if _NO_AMD_GPU.search(text) or ctx.tool(said) == "rocminfo" and re.search(r"(?i)\b(?:hipcc|hipconfig|cmake|"
                                                                                r"rocm_agent_enumerator)\b", text):
        return _make("wsl", "WSL has no AMD GPU, which its runtime reports as out of resources",
                     "under WSL 2 with no AMD GPU the ROCm runtime fails with HSA_STATUS_ERROR_OUT_OF_RESOURCES instead "
                     "of saying there is no GPU; rocm_agent_enumerator treats that error as transient and retries "
                     "rocminfo for about a minute, so hipcc, hipconfig and CMake's GPU detection seem to hang",
                     "on a machine without an AMD GPU give the target yourself so nothing asks rocm_agent_enumerator: "
                     "hipcc --offload-arch=gfx1100 (CMake: -DAMDGPU_TARGETS=gfx1100 / -DGPU_TARGETS=gfx1100), and "
                     "update rocminfo to a release that detects the GPU-less WSL early (the fix of rocm-systems issue "
                     "1153)", [fact], said)
    return None


# the driver's libcuda not found, in the words of who loads it by name: the loader ("libcuda.so.1: cannot open shared
# object file"), Triton ("libcuda.so cannot found!"), Rust's cudarc, which mistral.rs, candle and other Rust programs
# load CUDA through ("Unable to find cuda lib under the names [\"cuda\", \"nvcuda\"]", from 0.12 "Unable to
# dynamically load the \"cuda\" shared library"), a dlopen by hand ("Could not load library libcuda.so")
_DRIVER_LIBRARY_MISSING = re.compile(r"(?i)libcuda\.so(?:\.1)?:? (?:not found|cannot (?:open|found|be found))|"
                                     r"unable to find cuda lib under the names|unable to (?:dynamically )?load the "
                                     r"\W?cuda\W? shared library|(?:could not|failed to|cannot|can't) (?:load|dlopen|"
                                     r"open) (?:the )?(?:library )?libcuda\.so")


# In a conda environment the reporter's way out was conda's own CUDA stack for torch (THU-MIG/yolov10#395: pytorch
# 2.0.1 with pytorch-cuda=11.8 from the pytorch and nvidia channels, in place of pip's wheels). The pytorch-cuda
# release is picked from the cuDNN the failing library names: a cuDNN 9 library means a torch of 2.4 or later, whose
# newest CUDA build is 12.4, else 11.8. (Corrected in round 18: the cuDNN follows the torch release, not the CUDA one:
# torch 2.0-2.3 shipped cuDNN 8 with every CUDA build, and from 2.4 cuDNN 9 with CUDA 11.8, 12.1 and 12.4 alike --
# pytorch/builder#1822 "Update cudnn to v9.1.0.70 for cuda11.8, cuda12.1, and cuda12.4"; the image
# pytorch/pytorch:2.4.1-cuda11.8-cudnn9-devel exists. Either pytorch-cuda brings its own cuDNN, so the fix holds.)
_CUDNN_MAJOR = re.compile(r"libcudnn\w*\.so\.(\d)\b")


def _conda_stack(text: str) -> str:
    if not re.search(r"(?i)\bconda\b", text):
        return ""
    major = _CUDNN_MAJOR.search(text)
    cuda = "12.4" if major and major.group(1) == "9" else "11.8"
    return ("; in a conda environment, let conda bring torch with its CUDA libraries instead of pip's wheels: pip "
            f"uninstall -y torch torchvision torchaudio; conda install pytorch torchvision torchaudio pytorch-cuda={cuda} "
            "-c pytorch -c nvidia")


@rule("wsl")
def wsl(ctx: Context) -> Optional[Diagnosis]:
    cuda_lib = _lines_matching(ctx, _DRIVER_LIBRARY_MISSING)
    # cuDNN 8's convolution library (libcudnn_cnn_infer) loads the driver's libcuda itself when it starts: under WSL
    # that load is what fails, and cuDNN reports it as its own library not loading
    cudnn = _lines_matching(ctx, r"(?i)(?:Could not|Unable to|cannot|can't) load (?:the )?library libcudnn_cnn_infer")
    # WSL said, or its driver folder shown (ldconfig -p listing /usr/lib/wsl/lib): the libcuda is WSL's own
    if (cuda_lib or cudnn) and re.search(r"(?i)\bWSL|/usr/lib/wsl/lib\b", _text(ctx)):
        found = _make("wsl", "the WSL driver library is not on the loader path",
                      "under WSL 2 the NVIDIA driver's libcuda.so lives in /usr/lib/wsl/lib, which the loader does not "
                      "search here" + (" (cuDNN's libcudnn_cnn_infer loads libcuda when it starts, and reports that "
                                       "failure as its own)" if cudnn and not cuda_lib else ""),
                      "export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH in the shell (or the script) that "
                      "starts the job (or link /usr/lib/wsl/lib/libcuda.so.1 next to the library that loads it, in "
                      "site-packages/nvidia/cudnn/lib); or refresh the loader's cache, which WSL's /etc/ld.so.conf.d/"
                      "ld.wsl.conf points at that folder: sudo ldconfig, then ldconfig -p | grep libcuda must list it; "
                      "never install a Linux NVIDIA driver inside WSL" + _conda_stack(_text(ctx)), [],
                      cuda_lib or cudnn)
        return _first(found) if cudnn and not cuda_lib else found
    joined = _text(ctx)
    # a Windows build printed beside a Linux shell prompt is a WSL session too
    windows_linux = _WINDOWS_BUILD.search(joined) and any(_LINUX_PROMPT.match(l) for l in ctx.sheet.lines)
    build = _WINDOWS_BUILD.search(joined)
    broken = build and int(next(g for g in build.groups() if g)) in _BROKEN_PREVIEWS
    if not ctx.sheet.has("platform", "wsl") and not _WSL_SAID.search(joined) and not windows_linux and not broken:
        return None
    fact = next((f for f in ctx.sheet.facts if f.kind == "platform" and f.value == "wsl"), None)
    own = (_wsl_windows_build(ctx, fact) or _wsl_pinned(ctx, joined, fact) or _wsl_unpinned_slow(ctx, joined, fact) or
           _wsl_vulkan(ctx, joined, fact) or _wsl_one(ctx, joined, fact) or _wsl_specific(ctx, joined, fact) or _wsl_nvml(ctx, joined, fact)
           or _wsl_collectives(ctx, joined, fact) or _wsl_adrenalin_for_the_card(ctx, joined, fact) or
           _wsl_copies_not_links(ctx, fact) or _wsl_runtime_rejects(ctx, fact))
    if own is not None:
        return own
    if re.search(r"(?i)\blib(?:cudart|cublas\w*|cudnn\w*|nvrtc)\.so(?:\.\d+)*: cannot open", joined) and \
            not re.search(r"(?i)libcuda\.so", joined):
        return None   # a CUDA toolkit library the wheel expects from the system: the loader path, not WSL's driver
    errors = ctx.of("wsl", "visibility", "device-access", "driver") + ctx.no_gpu()
    if not errors and _vendor(ctx) == "amd":
        errors = [e for e in ctx.errors if e.family in (None, "torch-build", "rocm-libs-missing")]
    if not errors:   # the user's words: no GPU found, in English or Chinese
        errors = _lines_matching(ctx, r"(?:读不到|识别不到|找不到|检测不到|用不了|看不到).{0,6}(?i:gpu|显卡)|"
                                      r"(?i:gpu|显卡).{0,6}(?:读不到|识别不到|找不到|检测不到|用不了)")
    if not errors:   # or a program that hangs as soon as it touches the GPU (卡住, 卡死, 无响应)
        errors = _lines_matching(ctx, _WSL_HANG)
    if not errors and not ctx.sheet.has("complaint", "yes"):
        return None
    labels = [f.value.split("+rocm", 1)[1] for f in ctx.sheet.of("torch") if "+rocm" in f.value]
    therock = ctx.sheet.has("layout", "therock") or (labels[-1].startswith("7") if labels else
                                                     any(v.startswith("7") for v in ctx.sheet.values("rocm")))
    text = "\n".join(ctx.sheet.lines)
    arch, arch_fact = ctx.arch(errors)
    if arch is None:
        arch = _radeon_by_number(joined)
    # NVIDIA said in words (nvidia-smi, CUDA, a GeForce) with no AMD word: the paste is about CUDA under WSL
    nvidia_said = re.search(r"(?i)nvidia|\bcuda\b|geforce|\brtx\b|\bgtx\b|quadro|tesla", joined) and not re.search(
        r"(?i)\bamd\b|radeon|rocm|\bhip\b|\bgfx\d", joined)
    too_old = re.search(r"(?i)driver on your system is too old|driver version is insufficient", joined)
    if too_old and ((arch and arch.startswith("sm_")) or _vendor(ctx) == "nvidia" or nvidia_said):
        # under WSL the CUDA driver is the Windows one: updating anything inside Linux cannot help
        return _make("wsl", "WSL 2: the Windows NVIDIA driver is older than this CUDA",
                     "under WSL 2 CUDA runs on the Windows NVIDIA driver (mounted in /usr/lib/wsl/lib); it is older "
                     "than the CUDA the program was built for",
                     "update the Windows NVIDIA driver (Game Ready / Studio from nvidia.com or the NVIDIA app), then "
                     "wsl --shutdown and start WSL again; never install a Linux NVIDIA driver inside WSL; or install "
                     "a build for the older CUDA: " + _cuda_index_for_driver(ctx, arch), [fact], errors)
    if (arch and arch.startswith("sm_")) or _vendor(ctx) == "nvidia" or (arch is None and nvidia_said):
        return _make("wsl", "WSL 2: CUDA does not reach the NVIDIA GPU",
                     "under WSL 2 CUDA goes through the Windows NVIDIA driver, whose libcuda.so WSL mounts in "
                     "/usr/lib/wsl/lib; a Linux NVIDIA driver installed inside WSL, a loader path without that folder, "
                     "or a CPU torch hides the GPU",
                     "keep only the Windows NVIDIA driver (never install a Linux driver in WSL: sudo apt remove "
                     "'nvidia-driver-*' 'libnvidia-*' if one is there; for nvcc install only the toolkit from NVIDIA's "
                     "WSL-Ubuntu repository, sudo apt install cuda-toolkit-12-x, never the cuda or cuda-drivers "
                     "meta-packages, which pull a Linux driver in), export LD_LIBRARY_PATH=/usr/lib/wsl/lib:"
                     "$LD_LIBRARY_PATH" + (", and install a CUDA torch: " + _cuda_index_for_driver(ctx, arch)
                                            if ctx.tool(errors) not in NOT_TORCH else
                                            f" for {ctx.tool(errors)}; update the Windows NVIDIA driver"),
                     [f for f in (fact, arch_fact) if f], errors)
    if ctx.tool(errors) == "ollama":
        return _make("wsl", "WSL 2: Ollama looks for /dev/kfd, which WSL does not have",
                     "under WSL 2 the GPU is reached through /dev/dxg; Ollama's detection skips it unless told to",
                     "install Ollama's ROCm bundle and set HSA_ENABLE_DXG_DETECTION=1 for the server (" +
                     set_variable("HSA_ENABLE_DXG_DETECTION", "1", ctx.sheet, "ollama") + ")", [fact], errors)
    if re.search(r"(?i)(?:detect|find|load|open)\w*\W+(?:\w+\W+){0,2}librocdxg|librocdxg\S*.{0,30}(?:not found|cannot)", text):
        return _make("wsl", "librocdxg is installed but the loader does not find it",
                     "the ROCm runtime loads librocdxg.so by name; /opt/rocm/lib is not on the loader's path (or its "
                     "cache was not refreshed after the install)",
                     "export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH (in the venv's activate script too), or "
                     "sudo ldconfig", [fact], errors)
    if arch and arch.startswith("gfx") and not re.match(r"gfx1[12]\d\d", arch):
        # AMD's WSL support matrix lists RDNA3 and RDNA4 Radeon / Radeon PRO cards only (the "Compatibility matrices"
        # page of rocm.docs.amd.com/projects/radeon, WSL section)
        return _make("wsl", f"ROCm on WSL does not support this GPU ({arch})",
                     f"AMD's ROCm for WSL runs only on RDNA3 and RDNA4 GPUs (Radeon RX 7000 / 9000, Radeon PRO W7000 / "
                     f"R9000); {arch} is not among them, so no WSL runtime sees it",
                     "run ROCm on native Linux (a dual boot) for this GPU, or move to a GPU that ROCm on WSL supports "
                     "(RDNA3 / RDNA4); on Windows itself use a path that supports it (DirectML: torch-directml, or a "
                     "Vulkan build of llama.cpp / Ollama)",
                     [f for f in (fact, arch_fact) if f], errors)
    # (ROCm 6.x for WSL ships its /dev/dxg runtime as the hsa-runtime-rocr4wsl-amdgpu package, libhsa-runtime64 under
    # /opt/rocm-<release>/lib: ROCm/legacy-rocm-build#3924, #4406 and #4682's dpkg -L; nix-community/NixOS-WSL#655 took
    # its .deb apart for a distribution AMD does not package; ROCm 7 replaced it with librocdxg)
    # ROCr of the 7.2 packages enumerates the /dev/dxg GPU only with HSA_ENABLE_DXG_DETECTION=1 (TheRock #5283:
    # "ROCR needs HSA_ENABLE_DXG_DETECTION=1 so it can route through DXG"; later runtimes default it on, rocm-systems
    # #4216), so without it rocminfo says "hsa_init Failed" under WSL although librocdxg is installed
    runtime = ("ROCm 7 on WSL reaches the GPU through librocdxg: export HSA_ENABLE_DXG_DETECTION=1 (in ~/.bashrc too; "
               "ROCr looks for the /dev/dxg GPU only when it is set), install AMD's WSL driver stack (amdgpu-install "
               "--usecase=wsl,rocm --no-dkms) and keep librocdxg on the library path" if therock else
               "install AMD's ROCm for WSL (amdgpu-install -y --usecase=wsl,rocm --no-dkms; its "
               "hsa-runtime-rocr4wsl-amdgpu package is the runtime that goes through /dev/dxg; on a distribution "
               "without AMD's packages, such as NixOS or Arch, unpack that package's .deb from repo.radeon.com/amdgpu/"
               "<release>/ubuntu/pool/main/h/hsa-runtime-rocr4wsl-amdgpu/ and put its opt/rocm-*/lib first on "
               "LD_LIBRARY_PATH), then replace the libhsa-runtime64.so that the torch wheel bundles with "
               "/opt/rocm/lib/libhsa-runtime64.so.1")
    return _make("wsl", "WSL 2: the ROCm runtime cannot see the GPU through /dev/dxg",
                 "under WSL 2 there is no /dev/kfd; only AMD's WSL runtime talks to the Windows driver through "
                 "/dev/dxg, and the stock Linux runtime (the one pytorch.org wheels bundle) finds no GPU",
                 runtime + "; the Windows Adrenalin driver must be the WSL-enabled release", [fact], errors)
