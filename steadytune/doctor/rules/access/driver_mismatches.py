"""The driver against what it runs, one situation each: a GPU the open NVIDIA modules refuse, an APU's MES firmware,
a CUDA (of a toolkit, an image, a bundled runtime) newer than the driver, the fabric manager, a card in TCC mode,
kernels DKMS does not build for, Vulkan and Level Zero, NVML in a container, a ROCm torch with no device.

These rules register after the device-file, WSL and driver readings (the registration order breaks ties between
diagnoses), so the wsl and device-access ones among them stay here rather than beside their families."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (
    _CONTAINED,
    Context,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    _nvidia_gpu,
    rule,
    _symptom_lines,
    _text,
)
from steadytune.doctor.rules.access.device_files import _KUBERNETES
from steadytune.doctor.rules.access.driver import _DRIVER_FOR_CUDA, _first_dkms_release


# NVIDIA's open kernel modules drive Turing and newer GPUs only (they need the GPU System Processor); Maxwell, Pascal
# and Volta cards need the proprietary modules (NVIDIA's open-gpu-kernel-modules README; the driver's installation
# guide since 560, where the open modules became the default)
_OPEN_MODULES = re.compile(r"(?i)nvidia-(?:driver-\d+-)?open\b|\bopen (?:gpu )?kernel modules?\b|-open\b.{0,20}\bdriver|"
                           r"not supported by open nvidia\.ko|required GPU System Processor")
_PRE_TURING = re.compile(r"(?i)\bGTX ?(?:9[5-8]0|10[5-8]0)(?: ?Ti)?\b|\bTitan (?:X|Xp|V)\b|\b(?:Tesla )?[PMK]\d{2,3}\b|"
                         r"\bV100\b|\bQuadro [PMK]\d{3,4}\b|\b(?:Pascal|Maxwell|Volta|Kepler)\b")


@rule("driver")
def open_modules_on_old_gpu(ctx: Context) -> Optional[Diagnosis]:
    """The open NVIDIA kernel modules on a GPU older than Turing: they refuse it (no GSP), so nvidia-smi finds no
    device although the driver is installed."""
    text = _text(ctx)
    # (dmesg wraps NVRM's refusal: "... is not supported by open" and "nvidia.ko because ..." on two lines)
    refused = _lines_matching(ctx, r"(?i)not supported by open(?: nvidia\.ko|\s*$)|required GPU\s+System Processor")
    card = _PRE_TURING.search(text)
    if not refused and not (card and _OPEN_MODULES.search(text)):
        return None
    symptom = refused or _lines_matching(ctx, r"(?i)No devices were found|NVIDIA-SMI has failed|couldn.t communicate|"
                                              r"No CUDA GPUs are available|Found no NVIDIA driver|RmInitAdapter failed")
    if not symptom:
        return None
    branch = re.search(r"(?i)nvidia-driver-(\d{3})|driver (?:version )?(\d{3})\b|\b(\d{3})\.\d+(?:\.\d+)?\b", text)
    number = next((g for g in branch.groups() if g), None) if branch else None
    package = f"nvidia-driver-{number}" if number else "nvidia-driver-<branch>"
    return _first(_make(
        "driver", "the open NVIDIA kernel modules do not drive this GPU" + (f" ({card.group(0)})" if card else ""),
        "NVIDIA's open kernel modules support Turing and newer GPUs only (they run on the GPU System Processor); an "
        "older card (Maxwell, Pascal, Volta) is left without a driver, so nvidia-smi finds no device",
        f"install the proprietary kernel modules of the same branch instead (the open ones need the GPU System "
        f"Processor, GSP, of Turing and newer): sudo apt install {package} (the package "
        f"without -open; it replaces {package}-open), or with NVIDIA's .run installer pick the proprietary flavour "
        "(-m=kernel, not kernel-open); then reboot; branch 580 is the last with Maxwell, Pascal and Volta support",
        [], symptom))


# The Strix / Krackan APUs (gfx1150-gfx1152): linux-firmware 20251125 shipped an MES firmware (0x83) for them that hangs
# or faults ROCm work; 20251111 is the last good release, and the revert came in later packages (legacy-rocm-build
# #5724 and #5616, AMD's answers; kyuz0/amd-strix-halo-toolboxes #37)
_STRIX_APU = re.compile(r"(?i)Strix Halo|Strix Point|Krackan|Ryzen AI Max|\bAI Max\+?|\b(?:AMD|Ryzen AI(?: Max)?\+?) "
                        r"3[89]5\+?\b|\b8060S\b|\b8050S\b|\b890M\b|\b880M\b|\b860M\b|\bgfx115[012]\b")
_STUCK = re.compile(r"(?i)\b(?:still waiting|waiting for|hangs?|hung|stuck|freez\w*|never (?:loads?|finishes|answers)|"
                    r"time[sd]? ?out)\b|MES failed|\bMES\b.{0,40}\b(?:fail|timeout|hang)|卡住|卡死|无响应")


@rule("driver")
def apu_mes_firmware(ctx: Context) -> Optional[Diagnosis]:
    """ROCm work that hangs (or never answers) on a Strix Halo / Strix Point / Krackan APU while the CPU path works:
    the GPU's MES firmware from linux-firmware, not the tool. A likely reading: the package's version decides."""
    text = _text(ctx)
    apu = _STRIX_APU.search(text) or any(a in ("gfx1150", "gfx1151", "gfx1152") for a in ctx.sheet.machine_archs)
    if not apu or not re.search(r"(?i)\brocm\b|\bhip\b|\bgfx11|\bGPU\b", text):
        return None
    stuck = _lines_matching(ctx, _STUCK.pattern)
    if not stuck or ctx.errors and any(e.family not in (None, "driver", "gpu-hang") for e in ctx.errors):
        return None   # an error of its own family (a missing arch, memory, a library) says what it is
    return _make("driver", "the APU's MES firmware from linux-firmware hangs ROCm",
                 "on Strix Halo / Strix Point / Krackan APUs (gfx1150-gfx1152) the linux-firmware 20251125 release "
                 "ships an MES firmware (0x83) under which ROCm work hangs or faults while the CPU path runs",
                 "check the firmware: apt policy linux-firmware (rpm -q linux-firmware; sudo cat "
                 "/sys/kernel/debug/dri/*/amdgpu_firmware_info | grep MES); if it is 20251125, downgrade linux-firmware "
                 "to 20251111 (or update to a package with the MES revert), reboot, and run the GPU path again; or "
                 "take the firmware from AMD's own driver instead: install amdgpu-dkms with amdgpu-dkms-firmware "
                 "(sudo amdgpu-install --usecase=dkms: its firmware goes to /lib/firmware/updates/amdgpu, ahead of "
                 "linux-firmware's), then reboot",
                 [], stuck, confirmed=False)


_PTX_REFUSED = re.compile(r"(?i)no kernel image is available|unsupported PTX version|PTX was compiled with an unsupported "
                          r"toolchain|UNSUPPORTED_PTX_VERSION")


@rule("driver")
def driver_older_than_toolkit(ctx: Context) -> Optional[Diagnosis]:
    """A CUDA toolkit newer than the NVIDIA driver, both named, and the driver refusing the compiled code: the PTX
    the newer toolkit emits is JIT-compiled by the driver, which knows only its own CUDA's PTX (XLA, numba, triton
    and CuPy compile at run time, so "no kernel image" here is the driver's age, not the GPU's architecture)."""
    refused = _lines_matching(ctx, _PTX_REFUSED.pattern)
    if not refused:
        return None
    text = _text(ctx)
    driver = re.search(r"(?i)\b(?:nvidia[- ])?driver(?: version)?\W{0,3}(\d{3})(?:\.\d+){0,2}\b", text)
    # the toolkit said as cuda-11.6 / CUDA 11.6.2 / cuda_12.4, never nvidia-smi's "CUDA Version:" (the driver's own)
    toolkits = [(int(a), int(b)) for a, b in re.findall(r"(?i)\bcuda(?:[- _]|\s+toolkit\s+)(\d{2})\.(\d)(?:\.\d+)?\b", text)]
    if driver is None or not toolkits:
        return None
    branch = int(driver.group(1))
    runs = max((cuda for cuda, least in _DRIVER_FOR_CUDA if least <= branch), default=None)
    newest = max(toolkits)
    if runs is None or newest <= runs:
        return None
    # within one major version a prebuilt wheel's cubins run on the older driver (minor version compatibility): there
    # only code compiled at run time (XLA, numba, CuPy, Triton) meets the driver's PTX limit
    if newest[0] == runs[0] and not re.search(r"(?i)\b(?:jax|jaxlib|xla|numba|cupy|triton|tensorflow)\b", text):
        return None
    least = next(b for cuda, b in _DRIVER_FOR_CUDA if cuda >= newest)
    have = f"{runs[0]}.{runs[1]}"
    return _make("driver", f"the NVIDIA driver {branch} is older than CUDA {newest[0]}.{newest[1]}",
                 f"driver {branch} runs CUDA {have} at most; the code built with the CUDA {newest[0]}.{newest[1]} "
                 "toolkit (its PTX) cannot be loaded by it, so the launch finds no kernel image",
                 f"update the NVIDIA driver to {least} or newer (sudo apt install nvidia-driver-{least} or a later "
                 f"branch, then reboot), or keep driver {branch} and use the CUDA {have} toolkit (and builds made for "
                 f"CUDA {have})", [], refused)


_CUDA_UNUSABLE = re.compile(r"(?i)is_available\(\)\W{0,3}(?:returns?|is|gives|=+|->|:)?\s*False|No CUDA GPUs are "
                            r"available|CUDA (?:is )?(?:not available|unavailable)|cuda(?:Get)?(?:Device|Init)\w*.{0,40}"
                            r"(?:fail|error)|CUDA initialization: The NVIDIA driver on your system is too old")


@rule("driver")
def driver_branch_too_old(ctx: Context) -> Optional[Diagnosis]:
    """A CUDA torch that finds no GPU where the paste names an NVIDIA driver branch too old for the torch's CUDA
    (a CUDA 12 build needs the 525 branch or newer, a CUDA 11 build 450 or newer: CUDA's minor version compatibility
    within a major version, NVIDIA's CUDA compatibility guide)."""
    failing = _lines_matching(ctx, _CUDA_UNUSABLE.pattern)
    if not failing:
        return None
    text = _text(ctx)
    driver = re.search(r"(?i)Driver Version:?\s*(\d{3})\.|nvidia-driver-(\d{3})\b|\bdriver (?:version |branch )?(\d{3})"
                       r"(?:\.\d+){1,2}\b", text)
    if driver is None:
        return None
    branch = int(next(g for g in driver.groups() if g))
    labels = [f.value.split("+cu", 1)[1] for f in ctx.sheet.of("torch") if "+cu" in f.value]
    major = int(labels[-1][:2]) if labels and labels[-1][:2].isdigit() else 12   # today's wheels: CUDA 12
    least = 525 if major >= 12 else 450
    if branch >= least:
        return None
    runs = max((cuda for cuda, b in _DRIVER_FOR_CUDA if b <= branch), default=None)
    most = f"CUDA {runs[0]}.{runs[1]} at most" if runs else "no CUDA 11 or newer"
    older = (" or keep the driver and install a torch built for CUDA 11.8 (pip install torch --index-url "
             "https://download.pytorch.org/whl/cu118)" if major >= 12 and branch >= 450 else "")
    return _make("driver", f"the NVIDIA driver {branch} is too old for this torch's CUDA {major}",
                 f"driver branch {branch} runs {most}; the torch build needs CUDA {major} (driver {least} or newer), so "
                 "it finds no usable GPU",
                 f"update the NVIDIA driver to {least} or newer (sudo ubuntu-drivers install, or sudo apt install "
                 f"nvidia-driver-<branch>, then reboot; a current branch such as 570 serves every CUDA 12 wheel)"
                 f"{older}; if the card is too old for that driver (Kepler and older stop at 470), a CPU build or "
                 "another GPU", [], failing)


# CUDA's 802 (CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"): on NVSwitch systems (HGX / DGX A100, H100,
# H200, B200) CUDA takes no work until nvidia-fabricmanager has set the fabric up (NVIDIA's Fabric Manager guide).
# NCCL's NVLS transport failing on the same fabric is read with the other transports (rules/machine/multi_gpu.py).
_SYSTEM_NOT_READY = re.compile(r"(?i)system not yet initiali[sz]ed|CUDA_ERROR_SYSTEM_NOT_READY|\b(?:Error|error code|"
                               r"err)\W{0,3}802\b")


@rule("driver")
def fabric_manager(ctx: Context) -> Optional[Diagnosis]:
    """CUDA refusing work until the NVSwitch fabric is up: the fabric manager beside the driver, not the GPU."""
    not_ready = _lines_matching(ctx, _SYSTEM_NOT_READY.pattern)
    if not not_ready:
        return None
    driver = re.search(r"(?i)Driver Version:?\s*(\d{3})\.|nvidia-driver\W{0,3}:?\s*(\d{3})\.", _text(ctx))
    branch = (driver.group(1) or driver.group(2)) if driver else "<the driver's branch>"
    return _first(_make(
        "driver", "the NVSwitch fabric is not initialised: nvidia-fabricmanager",
        "on NVSwitch systems (HGX / DGX A100, H100, H200, B200) CUDA refuses work with 'system not yet initialized' "
        "(802) until nvidia-fabricmanager has set the fabric up; it is not installed, not running, or of another "
        "version than the driver",
        f"sudo apt install nvidia-fabricmanager-{branch} (exactly the driver's version; the -server driver branches "
        "match it), sudo systemctl enable --now nvidia-fabricmanager, then check nvidia-smi -q | grep -A2 Fabric "
        "(State: Completed) and run again", [], not_ready))


# Data-centre NVIDIA cards (Tesla, the A/H/L series) start in TCC mode on Windows, a compute-only driver mode that WSL 2's
# GPU paravirtualisation cannot use: it shares only cards in WDDM mode
_TCC_CARD = re.compile(r"(?i)\bTesla\b|\b(?:[AHL]\d{2,3}S?|V100|P100|P40|T4|K80|A10G)\b")


@rule("wsl")
def wsl_tcc_card(ctx: Context) -> Optional[Diagnosis]:
    """A data-centre card that WSL 2 does not see: Windows runs it in TCC mode unless told otherwise, and WSL shares
    only WDDM cards with its Linux (Microsoft's and NVIDIA's CUDA on WSL guides)."""
    if not ctx.sheet.has("platform", "wsl"):
        return None
    cards = [f for f in ctx.sheet.of("gpu") if _TCC_CARD.search(f.value)]
    text = _text(ctx)
    if not cards or (re.search(r"\bWDDM\b", text) and not re.search(r"\bTCC\b", text)):
        return None   # a GeForce / RTX card is WDDM already; a card said to be in WDDM mode is not this
    symptoms = ctx.errors + _symptom_lines(ctx, ctx.sheet.of("complaint"))
    if not symptoms:
        return None
    return _first(_make(
        "wsl", f"the {cards[0].value} is in TCC mode, which WSL 2 cannot use",
        "on Windows data-centre NVIDIA cards run in TCC (compute-only) mode by default; WSL 2 shares a GPU with its "
        "Linux only in WDDM mode, so inside WSL there is no GPU (nvidia-smi fails or lists none)",
        "switch the card to WDDM in Windows, from an administrator prompt: nvidia-smi -i <index> -dm 0 (0 = WDDM; "
        "the data-centre / GRID driver allows it), reboot, then wsl --shutdown and start WSL again; keep only the "
        "Windows driver (no Linux NVIDIA driver inside WSL)", cards[:1], symptoms))


# Ubuntu's mainline kernel builds (kernel.ubuntu.com/mainline) carry a six-digit ABI number ("6.2.0-060200-generic");
# the distribution's own kernels a short one ("6.2.0-39-generic")
_MAINLINE = re.compile(r"\b\d+\.\d+(?:\.\d+)?-0\d{5}(?:rc\d+)?-(?:generic|lowlatency)\b")


# each Ubuntu LTS release's GA kernel series (ubuntu.com/kernel/lifecycle): the one its driver packages are built on
_UBUNTU_GA_KERNEL = {"16.04": "4.4", "18.04": "4.15", "20.04": "5.4", "22.04": "5.15", "24.04": "6.8"}


@rule("driver")
def mainline_kernel(ctx: Context) -> Optional[Diagnosis]:
    """A DKMS driver package (amdgpu-dkms, nvidia-dkms) refusing or failing to build for a mainline kernel: the driver
    packages build only for the kernels the distribution ships (their headers and config), not for mainline builds."""
    text = _text(ctx)
    kernel = _MAINLINE.search(text)
    if kernel is None:
        return None
    failed = _lines_matching(ctx, r"(?i)\bdkms\b.{0,80}(?:not supported|fail|error)|(?:not supported|fail\w*|error)"
                                  r".{0,80}\bdkms\b|kernel package \S+ is not supported|Bad return status|"
                                  r"(?:module|driver) (?:build|install) failed|"
                                  # the module loading and taking the kernel down with it
                                  r"\bmodprobe (?:amdgpu|nvidia)\b.{0,60}\b(?:crash\w*|hangs?|freez\w*|panic\w*|oops)")
    if not failed:
        return None
    ubuntu = re.search(r"(?i)Ubuntu ?(\d\d\.04)", text)
    hwe = f"linux-generic-hwe-{ubuntu.group(1)}" if ubuntu else "linux-generic-hwe-<release>"
    ga = _UBUNTU_GA_KERNEL.get(ubuntu.group(1)) if ubuntu else None
    if ga:
        hwe += f" (or linux-generic, its GA {ga} kernel)"
    evidence = [f for f in ctx.sheet.of("kernel") if kernel.group(0) in f.value][:1]
    # amdgpu-dkms follows new kernels in later ROCm releases: where the table knows the first release that builds for
    # this kernel series and the paste's ROCm is older, that release keeps the kernel
    first = _first_dkms_release(text) if re.search(r"(?i)amdgpu|\brocm\b", text) else None
    keep = (f"; or keep this kernel and install the amdgpu-dkms of ROCm {first[1]} or newer (the first release whose "
            f"driver builds for the {first[0]} kernels: sudo amdgpu-install --uninstall, then the amdgpu-install of "
            f"{first[1]})" if first else "")
    # amdgpu-dkms is optional for ROCm: its user space runs on the kernel's own amdgpu (amdgpu-install --no-dkms), and
    # a mainline kernel's own driver is as new as the DKMS module's source or newer ("module amdgpu/6.16.13-..." is
    # the DKMS driver's kernel base)
    amd = re.search(r"(?i)\bamdgpu-dkms\b|\bmodule amdgpu/|\bamdgpu-install\b", text)
    base = re.search(r"(?i)\bmodule amdgpu/(\d+)\.(\d+)", text)
    series = re.match(r"(\d+)\.(\d+)", kernel.group(0))
    newer = base and series and tuple(map(int, series.groups())) > tuple(map(int, base.groups()))
    skip = ("; or keep this kernel and skip the DKMS module: sudo amdgpu-install --usecase=rocm --no-dkms (sudo "
            "amdgpu-install --uninstall first where amdgpu-dkms is half-installed); ROCm's user space then runs on the "
            "kernel's own amdgpu" + (f", which in {series.group(0)} is newer than the DKMS module's "
                                     f"{base.group(1)}.{base.group(2)} source" if newer else "") if amd else "")
    return _first(_make(
        "driver", f"{kernel.group(0)} is a mainline kernel the driver's DKMS module does not build for",
        f"{kernel.group(0)} is an Ubuntu mainline kernel build (kernel.ubuntu.com/mainline, the six-digit ABI number); "
        "the GPU driver's DKMS package supports only the distribution's own kernels, so it refuses or fails to build",
        f"boot the distribution's kernel instead of the mainline one: sudo apt install {hwe if ga else hwe + ' (or linux-generic)'}, pick it "
        "in GRUB (Advanced options), then remove the mainline linux-image- and linux-headers- packages and install "
        "the driver again" + keep + skip, evidence, failed))


# A crash in a program's Vulkan backend (llama.cpp's ggml-vulkan, koboldcpp, LM Studio's Vulkan runtime): the
# pipeline and shader compilation run inside the GPU's Vulkan driver (Mesa's RADV/ANV on Linux, the vendor driver on
# Windows), and a crash there with no error from the program itself is the driver's bug far more often than the model's.
_VULKAN_IN_USE = re.compile(r"(?i)\bggml_vulkan\b|\bvulkan\b.{0,20}\b(?:backend|runtime|build|pipeline|path|runner)\b|"
                            r"\b(?:backend|runtime|build|runner)\b.{0,12}\bvulkan\b|\bRADV\b|-DGGML_VULKAN=ON")
_VULKAN_CRASH = re.compile(r"(?i)\bcrash(?:es|ed|ing)?\b|heap corruption|corrupt(?:s|ed)? the heap|"
                           r"\bseg ?fault|segmentation fault|0xc0000005|access violation|\bsigsegv\b|崩溃|闪退")
_MESA = re.compile(r"(?i)\bMesa\s*v?(\d{2}\.\d+(?:\.\d+)?)")


@rule("driver")
def vulkan_driver_crash(ctx: Context) -> Optional[Diagnosis]:
    """A program crashing in its Vulkan backend, with no error of its own (no out-of-memory, no missing device): the
    Vulkan driver's bug; the remedy is a newer driver (Mesa on Linux, the GPU vendor's driver on Windows)."""
    text = _text(ctx)
    if not _VULKAN_IN_USE.search(text):
        return None
    crashed = _lines_matching(ctx, _VULKAN_CRASH.pattern)
    if not crashed or re.search(r"(?i)out of (?:device |host )?memory|ErrorOutOfDeviceMemory|No Vulkan devices? found|"
                                r"vkCreateInstance failed|ERROR_INCOMPATIBLE_DRIVER|ERROR_INITIALIZATION_FAILED", text):
        return None   # a memory or device-discovery error is its own reading, not a driver bug in the pipeline
    mesa = _MESA.search(text)
    linux = (f"update Mesa past {mesa.group(1)} (the RADV/ANV Vulkan driver: a newer mesa-vulkan-drivers from the "
             "distribution's backports or the kisak-mesa PPA)" if mesa else
             "on Linux update Mesa (the RADV/ANV Vulkan driver: mesa-vulkan-drivers from the distribution's backports "
             "or the kisak-mesa PPA)")
    return _make("driver", "the GPU's Vulkan driver crashes in the program's Vulkan backend",
                 "the crash happens while the Vulkan backend builds its pipelines or runs its shaders, inside the "
                 "GPU's Vulkan driver" + (f" (Mesa {mesa.group(1)})" if mesa else "") + ", with no error from the "
                 "program itself",
                 f"{linux}; on Windows install the GPU vendor's current driver (AMD Software Adrenalin, the NVIDIA or "
                 "Intel driver); meanwhile run the same model through the HIP/CUDA backend, or skip the part that "
                 "crashes (a vision projector: without --mmproj), to confirm it is the driver",
                 [], crashed, confirmed=False)


# torch's XPU build reaches Intel GPUs through the Level Zero loader (libze1 / ze_loader.dll) and Intel's GPU driver
# behind it (libze-intel-gpu1, the compute runtime). A loader newer than the driver hands out entry points the driver
# does not fill, so a call into one jumps to address 0: a segfault "at 0 ip 0000000000000000" in torch.xpu.
_XPU_TORCH = re.compile(r"(?i)\+xpu\b|torch\.xpu\b|\bxpu:\d\b|device=.?xpu")


@rule("driver")
def level_zero_mismatch(ctx: Context) -> Optional[Diagnosis]:
    """An Intel GPU reached by torch's XPU build (it enumerates devices) whose call crashes: the Level Zero loader and
    Intel's GPU driver of mismatched versions; the remedy is to upgrade both together."""
    text = _text(ctx)
    if not _XPU_TORCH.search(text):
        return None
    crashed = ctx.crashes() or _lines_matching(ctx, r"(?i)segfault at 0 ip 0{8,16}\b|\bsegfaults?\b|zeDevice\w*|"
                                                    r"ZE_RESULT_ERROR_\w+|level[- ]zero.{0,40}(?:error|fail)")
    if not crashed or re.search(r"(?i)out of memory|UR_RESULT_ERROR_OUT_OF_\w*MEMORY", text):
        return None
    return _make("driver", "the Level Zero loader and Intel's GPU driver do not match",
                 "torch's XPU build sees the Intel GPU but crashes calling into it: the Level Zero loader (libze1) "
                 "offers entry points the older Intel GPU driver (libze-intel-gpu1) does not provide, so the call "
                 "jumps to a null address",
                 "upgrade Intel's GPU driver and the Level Zero loader together to matching versions (Ubuntu: sudo apt "
                 "install --only-upgrade libze-intel-gpu1 libze1 intel-opencl-icd from Intel's graphics repository, or "
                 "the compute-runtime release packages; Windows: the current Intel Arc driver), then check "
                 "python -c 'import torch; print(torch.xpu.get_device_properties(0))'",
                 [], crashed, confirmed=False)


# torch's XPU build (or IPEX) counting no Intel GPU: "XPU Device count is zero!" (torch's Device.cpp warning). On
# Linux the GPU is reached through Intel's user-space compute runtime (intel-compute-runtime: the Level Zero GPU driver
# and the OpenCL ICD); with none installed, or one too old for the kernel (the jammy packages on Ubuntu 24.04's 6.8
# kernel), Level Zero lists no device. vladmandic/sdnext#3201: an Arc A770 on Ubuntu 24.04 with Intel's jammy
# repository, fixed by updating intel-compute-runtime to its latest release (the maintainers' answer) (round 20, r20d)
_XPU_NONE = re.compile(r"(?i)XPU Device count is zero|No XPU devices? (?:are |is )?(?:available|found)|"
                       r"torch\.xpu\.device_count\(\)\s*(?:->|=|:|returns)?\s*0\b")
_NEWER_UBUNTU_OLD_REPO = re.compile(r"(?i)(?:ubuntu\s*2[4-9]\.\d\d|\bnoble\b|\bplucky\b|kernel\s*6\.(?:[89]|1\d)).{0,400}"
                                    r"\bjammy\b|\bjammy\b.{0,400}(?:ubuntu\s*2[4-9]\.\d\d|\bnoble\b)", re.S)


@rule("driver")
def xpu_without_compute_runtime(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: torch's XPU warning that it counts no device, on Linux (not a Windows paste)."""
    lines = _lines_matching(ctx, _XPU_NONE)
    text = _text(ctx)
    if not lines or ctx.sheet.is_windows or re.search(r"(?i)\bwindows\b|\bwin1[01]\b|\.bat\b", text):
        return None
    stale = bool(_NEWER_UBUNTU_OLD_REPO.search(text))
    why = ("the packages from Intel's jammy (22.04) repository do not work with this newer Ubuntu's kernel" if stale
           else "that runtime is missing or too old for this kernel and GPU")
    return _make("driver", "Intel's compute runtime does not give torch the GPU",
                 "torch's XPU build reaches the Intel GPU through Intel's compute runtime (intel-compute-runtime: the "
                 f"Level Zero GPU driver and OpenCL ICD) and counts no device: {why}; torch itself is not the problem",
                 "install the latest intel-compute-runtime release (the .deb packages of github.com/intel/compute-"
                 "runtime's releases page: intel-level-zero-gpu / libze-intel-gpu1, intel-opencl-icd, libigdgmm, with "
                 "the Level Zero loader libze1), in place of " + ("the jammy repository's packages" if stale else
                 "older ones") + "; keep the user in the render group; then clinfo -l (or sycl-ls) must list the "
                 "GPU before the app starts", [ctx.line_fact(lines[0])], lines[:1])


# NVML (libnvidia-ml.so.1) not loadable inside a container or pod: the NVIDIA Container Toolkit injects the driver's
# libraries only into containers its runtime starts; one started by plain runc (Kubernetes' device plugin under a
# containerd / docker whose default runtime is runc) has none


@rule("device-access")
def nvml_in_a_container(ctx: Context) -> Optional[Diagnosis]:
    """NVML absent inside a container or Kubernetes pod on a host with the NVIDIA toolkit: the container did not run
    under the nvidia runtime. The device plugin's pods carry no --gpus flag, so the runtime must be the default."""
    failed = _lines_matching(ctx, r"(?i)could not load NVML|libnvidia-ml\.so(?:\.1)?: cannot open shared object|"
                                  r"NVML(?: library)? (?:not found|could not be loaded)")
    # the toolkit's own nvidia-container-cli failing to load NVML is the host's missing driver, not the container's
    failed = [line for line in failed if "nvidia-container-cli" not in line.line]
    text = _text(ctx)
    if not failed or not (_KUBERNETES.search(text) or _CONTAINED.search(text)) or \
            re.search(r"(?i)\bwsl\b", text):
        return None   # on the host itself (or WSL's own NVML) it is the driver's install, read elsewhere
    containerd = re.search(r"(?i)\bcontainerd\b|\bk3s\b|\bcri-o\b", text)
    runtime = ("sudo nvidia-ctk runtime configure --runtime=containerd --set-as-default, sudo systemctl restart "
               "containerd" if containerd else
               "set \"default-runtime\": \"nvidia\" in /etc/docker/daemon.json (sudo nvidia-ctk runtime configure "
               "--runtime=docker --set-as-default writes it), sudo systemctl restart docker")
    return _make("device-access", "the container was not started by the NVIDIA runtime",
                 "NVML (libnvidia-ml.so.1) is missing inside the container: the NVIDIA Container Toolkit puts the "
                 "driver's libraries only into containers its runtime starts, and this one ran under the plain runc "
                 "runtime" + (" (a Kubernetes pod, such as the device plugin's, has no --gpus flag to ask for it)"
                              if _KUBERNETES.search(text) else ""),
                 f"make the nvidia runtime the default: {runtime}; then restart the pod or container (kubectl delete "
                 "pod of the device plugin; it comes back under the new runtime); or use a RuntimeClass named nvidia",
                 [], failed, confirmed=False)


# NVIDIA's device plugin with the volume-mounts device-list strategy needs CAP_SYS_ADMIN; the Helm chart's 0.16.0 and
# 0.16.1 stopped granting it, and the plugin's NVML init then fails (k8s-device-plugin PR 865, "Add CAP_SYS_ADMIN if
# volume-mounts list strategy is included", backported after 0.16.1)
_PLUGIN_016 = re.compile(r"(?i)(?:device[- ]plugin|nvdp)\S*.{0,80}?\bv?0\.16\.[01]\b|\bv?0\.16\.[01]\b.{0,40}"
                         r"device[- ]plugin")
_VOLUME_MOUNTS = re.compile(r"(?i)deviceListStrategy\W{0,3}=?\W{0,3}[\w,\\-]*volume-mounts|device-list-strategy\W{0,3}"
                            r"[\w,\\-]*volume-mounts")


@rule("device-access")
def device_plugin_without_sys_admin(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _PLUGIN_016.search(text) or not _VOLUME_MOUNTS.search(text):
        return None
    failed = _lines_matching(ctx, r"(?i)nvml init failed|ERROR_LIBRARY_NOT_FOUND|CrashLoopBackOff|error starting plugins")
    if not failed:
        return None
    return _first(_make("device-access", "the device plugin's chart 0.16.0 / 0.16.1 no longer grants SYS_ADMIN",
                        "with deviceListStrategy=volume-mounts the NVIDIA device plugin needs the SYS_ADMIN capability; "
                        "the 0.16.0 and 0.16.1 Helm charts stopped adding it to the plugin container, so its NVML "
                        "initialisation fails and the pod crash-loops",
                        "add the capability back: helm upgrade with --set securityContext.capabilities.add[0]=SYS_ADMIN "
                        "(or securityContext.privileged=true), or move to a later chart release that adds SYS_ADMIN "
                        "itself when volume-mounts is in the strategy, or stay on 0.15.x; then delete the plugin pod",
                        [], failed[:2]))


# the NVIDIA container runtime refusing an image whose CUDA needs a newer host driver (the image's NVIDIA_REQUIRE_CUDA)
_IMAGE_NEEDS_CUDA = re.compile(r"(?i)requirement error: unsatisfied condition: cuda\s*>=\s*(\d{1,2})\.(\d)")


@rule("driver")
def image_needs_newer_driver(ctx: Context) -> Optional[Diagnosis]:
    """A container image built on a CUDA the host driver does not run: the NVIDIA container runtime checks the image's
    NVIDIA_REQUIRE_CUDA against the driver before it starts, so the fix is on the host (its driver), or an older image."""
    refused = _lines_matching(ctx, _IMAGE_NEEDS_CUDA.pattern)
    if not refused:
        return None
    found = _IMAGE_NEEDS_CUDA.search(refused[0].line)
    cuda = (int(found.group(1)), int(found.group(2)))
    least = next((b for c, b in _DRIVER_FOR_CUDA if c >= cuda), None)
    branch = f"{least} or newer" if least else "one that supports it"
    return _first(_make("driver", f"the host's NVIDIA driver is too old for the image's CUDA {cuda[0]}.{cuda[1]}",
                        f"the image is built on CUDA {cuda[0]}.{cuda[1]}; the NVIDIA container runtime checks that the "
                        "host driver runs it before it starts the container, and this driver does not",
                        f"update the host's NVIDIA driver to {branch} (CUDA {cuda[0]}.{cuda[1]} needs it; sudo apt install nvidia-driver-{least or '<branch>'} "
                        "or sudo ubuntu-drivers install, then reboot; nothing to change inside the container), or use "
                        f"an older image tag built on the CUDA the driver runs (nvidia-smi shows it as 'CUDA Version'); "
                        "or, where the image's code runs on this driver anyway (a rebuilt image whose requirement rose "
                        "past its real needs, a datacenter GPU with the CUDA forward-compatibility package), skip the "
                        "check: docker run -e NVIDIA_DISABLE_REQUIRE=true (the toolkit's switch for all NVIDIA_REQUIRE_* "
                        "constraints)",
                        [], refused))


# NVIDIA's NGC images (PyTorch, TensorRT-LLM, Triton server, NeMo) check the host driver in their entrypoint and say
# "This container was built for NVIDIA Driver Release 535.86 or later, but version 510.85.02 was detected and
# compatibility mode is UNAVAILABLE": the forward-compatibility package serves only datacenter GPUs on supported
# branches (NVIDIA's CUDA compatibility guide), so anywhere else the host driver has to reach the release named
_NGC_NEEDS_DRIVER = re.compile(r"(?i)container was built for NVIDIA Driver Release (\d{3})(\.\d+)*(?: or later)?")
_NGC_FOUND = re.compile(r"(?i)\bbut\W+version (\d{3}(?:\.\d+){1,2}) was detected")


@rule("driver")
def ngc_image_needs_newer_driver(ctx: Context) -> Optional[Diagnosis]:
    """An NGC container's own entrypoint refusing the host driver: the release it was built for is named, so the fix
    is that driver on the host (or an older image release), not anything inside the container."""
    refused = _lines_matching(ctx, _NGC_NEEDS_DRIVER)
    if not refused:
        return None
    found = _NGC_NEEDS_DRIVER.search(refused[0].line)
    least = found.group(0).split("Release", 1)[1].split()[0]
    branch = found.group(1)
    detected = _NGC_FOUND.search(_text(ctx))
    have = f" (the host has {detected.group(1)})" if detected else ""
    return _first(_make(
        "driver", f"the host's NVIDIA driver is older than the {least} this NGC container was built for",
        f"the container's entrypoint checks the host driver against the release its CUDA was built for{have}; "
        "CUDA's forward compatibility cannot bridge the gap here (it serves datacenter GPUs only, on supported "
        "branches), so the container runs without a usable GPU",
        f"update the host's NVIDIA driver to {least} or later (sudo apt install nvidia-driver-{branch} or a newer "
        "branch, or sudo ubuntu-drivers install; then reboot and check nvidia-smi's 'Driver Version'); nothing inside "
        "the container changes it; or use an older release of the image whose driver requirement the host meets (the "
        "NGC Frameworks Support Matrix lists each release's driver)", [], refused))


# torch built for ROCm, said by itself (collect_env's "ROCM used to build PyTorch: 7.0...", a +rocm version, or
# torch.version.hip printed): the build is right for an AMD GPU, so finding none is the process's access to it
_ROCM_TORCH = re.compile(r"(?i)ROCM used to build PyTorch:\s*\d|\btorch\S*\s*[=:]?\s*\d+\.\d+\.\d+\S*\+rocm\d|"
                         r"torch\.version\.hip\W{0,20}\d+\.\d+")
_HIP_FINDS_NONE = re.compile(r"No HIP GPUs are available|hipErrorNoDevice|(?i:Is CUDA available:\s*False)")


@rule("device-access")
def rocm_torch_without_a_device(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm build of torch that finds no GPU, with nothing else said (no driver failure, no WSL, no GPU the build
    lacks): the process cannot open /dev/kfd and /dev/dri, most often a container started without them."""
    text = _text(ctx)
    failing = _lines_matching(ctx, _HIP_FINDS_NONE.pattern)
    if not failing or not _ROCM_TORCH.search(text) or re.search(r"(?i)\bwsl\b|/dev/dxg", text) or \
            ctx.of("driver", "gpu-unsupported", "arch-missing") or ctx.sheet.of("gpu") or \
            any(not _HIP_FINDS_NONE.search(e.line) for e in ctx.of("visibility")) or \
            re.search(r"(?i)HSA_OVERRIDE_GFX_VERSION|\b(?:HIP|ROCR|CUDA)_VISIBLE_DEVICES\b", text):
        return None   # a named GPU, an override or a visibility setting: the arch or the variables' readings
    container = _CONTAINED.search(text)
    return _make("device-access", "the ROCm torch cannot open the GPU's device files",
                 "torch is a ROCm build, so a ROCm GPU would be found; finding none means the process cannot open "
                 "/dev/kfd and /dev/dri" + (" (the container was not given them)" if container else
                                            " (a container started without them, or a user outside their groups)"),
                 "in a container pass the device files: docker run --device /dev/kfd --device /dev/dri --group-add "
                 "video --group-add render --security-opt seccomp=unconfined ... (podman: --group-add keep-groups); "
                 "on the host: sudo usermod -aG render,video $USER and log in again; check with ls -l /dev/kfd "
                 "/dev/dri/renderD* and rocminfo as the same user",
                 [], failing, confirmed=False)


# Debian's linux-kbuild ships tools/objtool/objtool as a wrapper that picks the real binary by SRCARCH; an out-of-tree
# build such as amdgpu-dkms's configure step calls it without SRCARCH, so every compile test fails and the configure
# script reports kernel features as missing ("dma_resv->seq is missing") that the kernel has (as found in
# legacy-rocm-build #3379)
_CONFIGURE_CHECK_FAILED = re.compile(r"\*\*\* [\w>.\-]+(?:\([^)]*\))? is missing\.?,? exit")


@rule("driver")
def debian_kbuild_objtool(ctx: Context) -> Optional[Diagnosis]:
    """amdgpu-dkms's configure checks failing on a Debian kernel (its own -amd64 flavour, or Debian named): the
    objtool wrapper of Debian's linux-kbuild, not the kernel's features."""
    failed = _lines_matching(ctx, _CONFIGURE_CHECK_FAILED.pattern)
    text = _text(ctx)
    kernel = re.search(r"\b(\d+\.\d+(?:\.\d+)?)(?:-\d+)?-(?:amd64|cloud-amd64|rt-amd64)\b", text)
    if not failed or not (kernel or re.search(r"(?i)\bDebian\b", text)) or re.search(r"(?i)\bUbuntu\b|\.el\d", text):
        return None
    series = kernel.group(1) if kernel else "<kernel version>"
    folder = f"/usr/lib/linux-kbuild-{series}/tools/objtool"
    return _make("driver", "amdgpu-dkms's configure checks fail on Debian's kernel build tools",
                 "the message is misleading: Debian's linux-kbuild ships objtool as a wrapper that needs SRCARCH, "
                 "which the amdgpu-dkms configure step does not pass, so every feature check fails and the first one "
                 "is reported as missing",
                 f"use the x86 objtool in place of the wrapper: cd {folder} && sudo mv objtool objtool.wrapper && sudo "
                 "cp objtool.real-x86 objtool, then rebuild: sudo dkms autoinstall (or reinstall amdgpu-dkms); or use "
                 "the kernel's own amdgpu (sudo amdgpu-install --usecase=rocm --no-dkms)",
                 [], failed, confirmed=False)


# Windows' STATUS_ENTRYPOINT_NOT_FOUND: a DLL the process loaded lacks a function it imports. A CUDA runner (Ollama's,
# llama.cpp's, koboldcpp's) imports the newer driver API entry points from the driver's nvcuda.dll, so on an NVIDIA
# machine the usual missing entry point is the driver's, older than the CUDA the runner was built with
_ENTRYPOINT_NOT_FOUND = re.compile(r"(?i)\b0xc0000139\b|\b3221225785\b|STATUS_ENTRYPOINT_NOT_FOUND|"
                                   r"entry point .{0,80} could not be located")


@rule("driver")
def windows_entry_point_missing(ctx: Context) -> Optional[Diagnosis]:
    """A CUDA program on Windows dying with 0xc0000139 (an entry point missing from a DLL) on an NVIDIA GPU: the
    driver's nvcuda.dll is older than the CUDA the program was built against."""
    missing = _lines_matching(ctx, _ENTRYPOINT_NOT_FOUND.pattern)
    text = _text(ctx)
    if not missing or not (_nvidia_gpu(ctx) or re.search(r"(?i)\bnvidia\b|\bgeforce\b|\b[GR]TX ?\d{3,4}", text)) or \
            re.search(r"(?i)\b(?:amd|radeon|rocm|hip)\b", text):
        return None
    return _make("driver", "the NVIDIA driver is older than the CUDA the program was built with",
                 "0xc0000139 is Windows' 'entry point not found': a DLL lacks a function the program imports; a CUDA "
                 "program imports its CUDA driver API from the NVIDIA driver's nvcuda.dll, which an older driver "
                 "does not have",
                 "install the current NVIDIA driver for the GPU (nvidia.com/drivers or the NVIDIA app; a clean install), "
                 "reboot, and start the program again; nvidia-smi's 'CUDA Version' must be at least the CUDA the "
                 "program bundles (12.x for current Ollama / llama.cpp builds)",
                 [], missing, confirmed=False)


# a program's newer release falling back to the CPU where an older one used the GPU, on a named NVIDIA driver branch
# older than 550: the newer release bundles a newer CUDA runtime (12.8 / 13 for Blackwell) than that driver runs, so
# its GPU discovery filters the GPUs out (Ollama, LM Studio, llama.cpp builds bundle their CUDA runtime)
_ONTO_CPU = re.compile(r"(?i)(?:fully |entirely )?(?:offload\w* to|onto|on|falls? back to|runs? (?:on|in)) (?:the )?CPU\b|"
                       r"CPU[- ]only|library=cpu|0% GPU|100% CPU|not using (?:the )?GPU")
_REGRESSION = re.compile(r"(?i)\b(?:after|since|from|starting with|through|upgrad\w+ to)\s+v?\d+\.\d+|"
                         r"\bv?\d+\.\d+(?:\.\d+)?\b.{0,40}(?:works?|worked|✅)")


@rule("driver")
def bundled_cuda_beyond_the_driver(ctx: Context) -> Optional[Diagnosis]:
    """A tool's newer release using only the CPU where an older release used the GPU, with an NVIDIA driver branch
    below 550 named: the release's bundled CUDA runtime needs a newer driver than the machine's."""
    text = _text(ctx)
    driver = re.search(r"(?i)\bdriver(?: version)?\W{0,3}(?:NVIDIA\s+)?(\d{3})\.\d+", text)
    fell = _lines_matching(ctx, _ONTO_CPU.pattern)
    if driver is None or int(driver.group(1)) >= 550 or not fell or not _REGRESSION.search(text) or \
            not re.search(r"(?i)\b(?:ollama|lm ?studio|llama\.?cpp|koboldcpp|localai|jan)\b", text):
        return None
    branch = driver.group(1)
    return _make("driver", f"the NVIDIA driver {branch} is too old for the newer release's bundled CUDA",
                 f"the newer release bundles a newer CUDA runtime than driver {branch} runs, so its GPU discovery "
                 "drops the GPUs and the model runs on the CPU; the older release bundled a CUDA this driver ran",
                 f"update the NVIDIA driver from {branch} to 550 or newer (570+ runs CUDA 12.8 runners, 580+ CUDA 13): "
                 "sudo apt install nvidia-driver-570 (or a later branch), reboot; in Docker the host's driver is the "
                 "one to update; or keep the last release that used the GPU",
                 [], fell, confirmed=False)


# The CUDA the driver runs, said by nvidia-smi ("CUDA Version: 11.4") or in words beside the driver ("cuda11.4 ... the
# driver"), below CUDA 11.8: the oldest CUDA any prebuilt wheel of today's GPU Python stack is made for (PyTorch's
# cu118 wheels, 2.1 to 2.7; vLLM's CUDA 11.8 builds beside its default CUDA 12; later releases need CUDA 12, driver
# 525+). NVIDIA's CUDA forward compatibility (the cuda-compat package) runs a newer CUDA user-space driver on an older
# kernel driver, on data-center GPUs and the driver branches its table lists.
_DRIVER_CUDA = re.compile(r"CUDA Version:\s*(\d{2})\.(\d)|(?i:\bcuda\s?(\d{2})\.(\d)\b(?=.{0,80}\bdriver\b))")
_WHEEL_STACK = ("vllm", "sglang", "torch", "flash-attn", "xformers", "bitsandbytes", "deepspeed", "unsloth",
                "llama-factory", "transformers", "peft", "trl")
_INSTALL_FAILS = re.compile(r"(?i)\b(?:install|build|compil)\w*\b.{0,80}\b(?:fail\w*|errors?|not work\w*)\b|\bfail\w* to "
                            r"(?:install|build|compile)\b|\bhow (?:can|do|to|should) (?:I|we) install\b|Failed building|"
                            r"No matching distribution")
_DATA_CENTER = re.compile(r"(?i)\bTesla\b|\b(?:V100|P100|P40|T4|A10G?|A30|A40|A100|A800|H100|H800|L4|L40S?)\b")


@rule("driver")
def driver_cuda_below_the_wheels(ctx: Context) -> Optional[Diagnosis]:
    """A tool of the wheel-built stack on a driver whose CUDA is older than 11.8: nothing prebuilt runs there, and a
    build from source needs a toolkit the driver cannot run either; the driver is what has to move."""
    said = _lines_matching(ctx, _DRIVER_CUDA.pattern)
    tool = ctx.tool()
    if not said or tool not in _WHEEL_STACK or not _INSTALL_FAILS.search(_text(ctx)):
        return None   # (a stack that installed and runs there, failing otherwise, is another reading's)
    m = _DRIVER_CUDA.search(said[0].line)
    major, minor = (int(g) for g in (m.groups()[:2] if m.group(1) else m.groups()[2:]))
    if (major, minor) >= (11, 8):
        return None
    # a torch built for a CUDA this driver runs (torch 1.x +cu113 on CUDA 11.4) is an old stack that works there
    built = [f.value.split("+cu", 1)[1] for f in ctx.sheet.of("torch") if "+cu" in f.value]
    if built and built[-1][:3].isdigit() and (int(built[-1][:2]), int(built[-1][2])) <= (major, minor):
        return None
    text = _text(ctx)
    compat = (" If you cannot change the driver (no root), NVIDIA's CUDA forward-compatibility package (cuda-compat-"
              "12-x, its libcuda put first on LD_LIBRARY_PATH) runs a newer CUDA on this data-center GPU where NVIDIA's "
              "compatibility table lists the driver branch; otherwise ask the admin for the driver update"
              if _DATA_CENTER.search(text) else " Without root, ask the admin for the driver update")
    return _make("driver", f"the NVIDIA driver runs CUDA {major}.{minor}, older than {tool}'s builds",
                 f"the driver runs CUDA {major}.{minor} at most; {tool} is built and supported for CUDA 11.8 or newer "
                 "(current releases CUDA 12): its wheels' code compiled at run time, and a build from source with "
                 "the toolkit it needs, both outrun this driver",
                 "update the NVIDIA driver: 520 or newer runs CUDA 11.8, 525+ CUDA 12 (current releases; 570+ for "
                 "CUDA 12.8); sudo apt install nvidia-driver-570 (or the .run installer), reboot, check nvidia-smi's "
                 f"'CUDA Version'.{compat}", [], said, confirmed=False)
