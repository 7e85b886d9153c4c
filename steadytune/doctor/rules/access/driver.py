"""The driver itself: an amdgpu DKMS module that fails for a kernel, the kernels Ubuntu moves to, the Windows AMD
driver, and the NVIDIA driver branch each CUDA toolkit needs."""

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
    _NVIDIA_DRIVER,
    _nvidia_gpu,
    rule,
    _text,
    _vendor,
)
from steadytune.doctor.rules.access.wsl import _rocm_release


def _dkms_version_said(ctx: Context) -> Optional[Diagnosis]:
    """ROCm failing on one amdgpu (DKMS) driver version and working on another, said in the paste: the out-of-tree
    module of that version is the fault, not the user's permissions or the GPU."""
    joined = "\n".join(ctx.sheet.lines)
    versions = re.findall(r"(?i)\bamdgpu(?:-dkms)?\s+(\d+\.\d+\.\d+)", joined)
    if len(set(versions)) < 2 or not re.search(r"(?i)\bworks? (?:on|with)\b|\bworked (?:on|with)\b|downgrad", joined):
        return None
    failing = [e for e in ctx.errors if re.search(r"(?i)HSA_STATUS_ERROR|rocminfo|ROCk module|hipErrorNoDevice", e.line)]
    covers = failing or _lines_matching(ctx, r"(?i)\bamdgpu(?:-dkms)?\s+\d+\.\d+\.\d+")
    return _first(_make("driver", f"the amdgpu {versions[0]} DKMS module fails where {versions[-1]} works",
                        f"ROCm works with amdgpu {versions[-1]} and fails with {versions[0]}: the out-of-tree (DKMS) "
                        "driver of that version does not work with this kernel and firmware",
                        "remove the DKMS module and use the kernel's own amdgpu: sudo amdgpu-install --uninstall (or apt "
                        "remove --purge amdgpu-dkms), then sudo amdgpu-install --usecase=rocm --no-dkms, reboot; or "
                        f"keep amdgpu-dkms at {versions[-1]}", [ctx.line_fact(covers[0])] if covers else [], covers))


# the kernel series Ubuntu's LTS releases shipped, GA and HWE in order (ubuntu.com/kernel/lifecycle): the one before
# a new kernel is the one the machine most likely ran before the update
_UBUNTU_SERIES = ("4.4", "4.8", "4.10", "4.13", "4.15", "4.18", "5.0", "5.3", "5.4", "5.8", "5.11", "5.13", "5.15",
                  "5.19", "6.2", "6.5", "6.8", "6.11", "6.14", "6.17")


# The first ROCm release whose amdgpu-dkms builds for a kernel series that the one before it failed on, as AMD's
# maintainers answered: 6.14 (Ubuntu 24.04 HWE) from 6.4.2 (ROCm #4619, legacy-rocm-build #5074); 6.17 (Ubuntu
# 25.10) from 7.1.1 (legacy-rocm-build #5624)
_DKMS_FIRST_BUILDS = {"6.14": "6.4.2", "6.17": "7.1.1"}
# An old DKMS module version whose build broke on a distribution kernel update, and the ROCm release whose module
# builds there: (kernel that broke it, ROCm release, its module version). ROCm/amdgpu#53 (rock-dkms 1.8-192 fails on
# Ubuntu 4.15.0-33's vga_switcheroo change; AMD released ROCm 1.8.3, module 1.8-199, which builds on it)
_DKMS_MODULE_FIXED = {"1.8-192": ("4.15.0-33", "1.8.3", "1.8-199")}


def _first_dkms_release(text: str) -> Optional[tuple[str, str]]:
    """(kernel series, ROCm release) where the kernel is one the table knows and the ROCm being installed is older."""
    m = re.search(r"\b(\d\.\d+)\.\d+-\d+-(?:generic|lowlatency)\b", text)
    release = _rocm_release(text)
    if not m or m.group(1) not in _DKMS_FIRST_BUILDS or not release:
        return None
    first = _DKMS_FIRST_BUILDS[m.group(1)]
    def as_tuple(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))
    return (m.group(1), first) if as_tuple(release) < as_tuple(first) else None


def _previous_ubuntu_kernel(text: str) -> Optional[str]:
    m = re.search(r"\b(\d\.\d+)\.\d+-\d+-(?:generic|lowlatency)\b", text)
    if not m or m.group(1) not in _UBUNTU_SERIES or m.group(1) == _UBUNTU_SERIES[0]:
        return None
    return _UBUNTU_SERIES[_UBUNTU_SERIES.index(m.group(1)) - 1]


# Windows: a HIP function missing from amdhip64.dll, which the AMD display driver installs
# (said by Windows' dialog, or retold: "hipMemset_spt entry point not found", a translation's "impossible to find entry
# point hipX")
_WINDOWS_HIP_ENTRY = re.compile(r"(?i)(?:procedure )?entry point (hip\w+) could not be (?:located|found)|"
                                r"\b(hip\w+) entry point not found|\b(?:find|locate) (?:the )?entry point (hip\w+)")
_ADRENALIN_VERSION = re.compile(r"(?i)(?:Adrenalin(?: Edition)?|AMD (?:Software|display|graphics|GPU|Radeon)(?: \w+)? "
                                r"drivers?)\s+\(?(?:version\s+)?(\d{2}\.\d{1,2}\.\d)")


# Ollama's GPU line on Windows gives the HIP runtime the AMD driver provides ("library=rocm ... driver=6.1"); ROCm
# libraries of a newer release dropped beside it (a rocBLAS / HIP SDK 6.2 build for an unlisted GPU) need that
# newer runtime, which comes only with a newer Adrenalin driver
_SERVER_HIP = re.compile(r"library=rocm\b.{0,120}?\bdriver=(\d+)\.(\d+)")
_LIBRARIES_RELEASE = re.compile(r"(?i)\b(?:rocm|hip(?: ?sdk)?)[-_ /]?v?(\d)\.(\d)\b")
_RUNNER_DIED = re.compile(r"(?i)runner process has terminated|exit status \d|0xc0000\w+|crash\w*")


def _hip_runtime_older_than_libraries(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    server = _SERVER_HIP.search(text)
    died = _lines_matching(ctx, _RUNNER_DIED.pattern)
    if server is None or not died:
        return None
    runtime = (int(server.group(1)), int(server.group(2)))
    newer = max(((int(a), int(b)) for a, b in _LIBRARIES_RELEASE.findall(text)), default=None)
    if newer is None or newer <= runtime:
        return None
    have, need = f"{runtime[0]}.{runtime[1]}", f"{newer[0]}.{newer[1]}"
    return _make("driver", f"the AMD driver's HIP {have} is older than the ROCm {need} libraries",
                 f"on Windows the HIP runtime comes with the AMD display driver; the server reports driver={have}, "
                 f"and the ROCm {need} libraries put beside it (rocBLAS / the runner's HIP libraries) call into a "
                 "newer runtime than that driver has, so the runner dies as the model loads",
                 f"update the AMD driver: AMD Software: Adrenalin Edition, the current release (its HIP runtime at "
                 f"least {need}), clean install, then restart the server and check its inference compute line shows "
                 f"driver={need} or newer; or use libraries built for HIP {have}", [], died[:2])


# On Windows the HIP runtime ROCm's libraries call is the display driver's (amdhip64): a ROCm release for Windows
# needs the Adrenalin release that carries its runtime. The first such release per ROCm, as AMD's maintainers and the
# reporters confirmed: ROCm 7.1.1 from Adrenalin 26.1.1 (legacy-rocm-build #5829)
_ADRENALIN_FOR_ROCM = {(7, 1, 1): (26, 1, 1)}
_WINDOWS_ROCM = re.compile(r"(?i)\bROCm\s*v?(\d+)\.(\d+)\.(\d+)\b")


def _adrenalin_older_than_rocm(ctx: Context, text: str) -> Optional[Diagnosis]:
    """A ROCm release installed on Windows beside an Adrenalin driver older than the one that carries its HIP
    runtime, and something that broke: the driver is the part to update."""
    named, rocm = _ADRENALIN_VERSION.search(text), _WINDOWS_ROCM.search(text)
    if not named or not rocm:
        return None
    least = _ADRENALIN_FOR_ROCM.get(tuple(int(g) for g in rocm.groups()))
    have = tuple(int(x) for x in named.group(1).split("."))
    if least is None or have >= least:
        return None
    broke = _lines_matching(ctx, r"(?i)\bbr(?:oke|oken|eaks?)\b|stopped working|no longer works?|does(?:n.t| not) "
                                 r"work|fails?\b|crash\w*")
    if not broke:
        return None
    need = ".".join(map(str, least))
    release = ".".join(rocm.groups())
    return _make("driver", f"the Adrenalin {named.group(1)} driver is older than ROCm {release} needs",
                 f"on Windows ROCm's libraries run on the HIP runtime of the display driver; ROCm {release} needs the "
                 f"runtime of Adrenalin {need} or later, and {named.group(1)} has an older one, so the apps on it break",
                 f"update the AMD driver to AMD Software: Adrenalin Edition {need} or later (clean install), then "
                 f"restart the app; or keep {named.group(1)} and the ROCm release that shipped with it",
                 [], broke[:2])


def _windows_amd_driver(ctx: Context) -> Optional[Diagnosis]:
    """The AMD Windows driver (Adrenalin) is what HIP runs on there: a HIP entry point missing from amdhip64.dll is a
    driver older than the tool; a named driver release after which the GPU stopped being used (or crawls) is that
    release."""
    entry = _lines_matching(ctx, _WINDOWS_HIP_ENTRY.pattern)
    if entry:
        name = next(g for g in _WINDOWS_HIP_ENTRY.search(entry[0].line).groups() if g)
        return _make("driver", f"the AMD driver's HIP runtime has no {name}",
                     f"on Windows HIP (amdhip64.dll) comes with the AMD display driver; the installed one predates "
                     f"{name}, which the tool (ZLUDA, a HIP build of llama.cpp, PyTorch for Windows) calls",
                     "update the AMD driver: AMD Software: Adrenalin Edition, the current release (or the one the "
                     "tool's README names), clean install; then check C:\\Windows\\System32\\amdhip64*.dll is the "
                     "new one", [], entry)
    older = _hip_runtime_older_than_libraries(ctx)
    if older is not None:
        return older
    older_driver = _adrenalin_older_than_rocm(ctx, _text(ctx))
    if older_driver is not None:
        return older_driver
    named = _ADRENALIN_VERSION.search(_text(ctx))
    # (the GPU gone from the app's view: "GPU is missing", "no VRAM", models no longer load)
    worse = _lines_matching(ctx, r"(?i)\b(?:slow\w*|acceleration (?:appears |is )?disabled|not (?:being )?(?:using|used|"
                                 r"utili[sz]ed)|no longer "
                                 r"(?:uses?|works?)|falls? back to (?:the )?CPU|stopped working|since (?:the|updating))|"
                                 r"\bGPU (?:is )?(?:missing|gone|not (?:shown|listed|detected))\b|\b(?:see|shows?) no "
                                 r"VRAM\b|\bnot loading any models?\b|\bcan(?:not|'t) load any models?\b")
    if named and worse:
        version = named.group(1)
        # LM Studio, llama.cpp and koboldcpp carry a Vulkan runtime beside the ROCm one, which does not use HIP
        vulkan = ("; or switch the app to its Vulkan runtime until then" if re.search(
            r"(?i)\bLM ?Studio\b|llama\.cpp|koboldcpp|\bbackends?\b|\bruntimes?\b", _text(ctx)) else "")
        return _make("driver", f"the AMD driver {version} broke the GPU path",
                     f"after AMD Software: Adrenalin {version} the GPU is no longer used (or crawls): a regression in "
                     "that driver release (its HIP runtime on Windows), not the tool",
                     f"roll back to the previous driver (AMD's previous-drivers page; a clean install, DDU if needed) "
                     f"or install the release after {version} once it is out; keep the tool as it is{vulkan}", [], worse)
    return None


# catalogue entries (round 15) of the driver family that are warnings of a working driver, with their own remedy
_NOT_A_DEAD_DRIVER = frozenset({"rocm-smi-low-power", "rocm-amdsmi-init"})


@rule("driver")
def driver(ctx: Context) -> Optional[Diagnosis]:
    errors = [e for e in ctx.of("driver") if not re.search(r"not supported in kfd", e.line)
              and not (e.catalogue is not None and e.catalogue.entry.id in _NOT_A_DEAD_DRIVER)
              and not (_NVIDIA_DRIVER.search(e.line) and _vendor(ctx) == "amd" and not _nvidia_gpu(ctx))]
    # (an NVIDIA driver message on an AMD-only machine is a CUDA torch there: torch-build)
    if ctx.sheet.is_windows or re.search(r"(?i)\bWindows\b|\.dll\b|dynamic[- ]link library|Adrenalin", _text(ctx)):
        windows = _windows_amd_driver(ctx)
        if windows is not None:
            return windows
    unreadable = [f for f in ctx.sheet.of("sensors") if f.value == "unreadable"]
    if unreadable and not errors:
        names = ", ".join(dict.fromkeys(f.detail for f in unreadable))
        every = not any(f.value == "read" for f in ctx.sheet.of("sensors"))
        return _make("driver", f"the GPU table reads no sensor of {names}" + (" (of any GPU)" if every else ""),
                     "every sensor reads N/A: the driver does not answer for that GPU (the amdgpu module not bound to "
                     "it, a GPU passed to a VM without its power management, or an smi tool older than the card), so "
                     "the table is no proof of a working GPU",
                     "sudo dmesg | grep -i -e amdgpu -e kfd | tail -30; rocminfo | grep -e Marketing -e gfx (lists "
                     "only the GPUs ROCm can use); amd-smi static --asic", unreadable, [],
                     severity="error" if every else "warning")
    dkms = _dkms_version_said(ctx)
    if dkms is not None:
        return dkms
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    joined = _text(ctx)
    kernel = ctx.sheet.first("kernel")
    secure_boot = ("if Secure Boot is on, it refuses the unsigned module: enroll its key (sudo mokutil --import "
                   "<the DKMS MOK key>) or turn Secure Boot off")
    if re.search(r"(?i)driver/library version mismatch|version-mismatch|does not match DSO version|NVRM: API mismatch",
                 text):
        # XLA names both versions: the loaded kernel module's and the libcuda's (the user-space driver's); NVRM the
        # client's (the libraries') and the kernel module's
        xla = re.search(r"(?i)kernel version (\d+)\.\S+ does not match DSO version (\d+)\.", text)
        nvrm = re.search(r"(?i)client has the version (\d+)\.\S+,? but this kernel module has the version (\d+)\.", text)
        module, libraries = ((xla.group(1), xla.group(2)) if xla else
                             (nvrm.group(2), nvrm.group(1)) if nvrm else (None, None))
        branch = f"nvidia-driver-{libraries} (the libraries' branch; or {module}, the module's)" if libraries \
            else "nvidia-driver-<version>"
        fix = ("reboot: a driver update replaced the user-space libraries while the old kernel module is still loaded; "
               f"if it stays, reinstall one driver version for both cleanly: sudo apt install --reinstall {branch}, "
               "then reboot (nvidia-smi and cat /proc/driver/nvidia/version must name the same version); if it "
               "outlasts a reboot, a link of the old release is left behind: ls -l /usr/lib*/libnvidia-ml.so* "
               "/usr/lib64/nvidia/libnvidia-ml.so* (and libcuda.so*) must point at the loaded module's version; "
               "remove or relink the stale ones, then sudo ldconfig")
        cause = "the loaded NVIDIA kernel module and the user-space driver libraries are different versions"
        # round 20 (r20a): the machine's own listings name both versions -- the module's (/proc/driver/nvidia/version's
        # "Kernel Module 520.56.06") and an installed package's (dpkg -l's "ii nvidia-smi 525.85.12-1") -- and a reboot
        # did not join them: the package upgrade stopped half-way (its new kernel module never built / installed), so
        # apt has to finish it (illinois-scicomp/machine-shop-maintenance#70: apt update + apt install --fix-broken)
        loaded = re.search(r"(?i)Kernel Module\s+(\d+)\.\d+", joined)
        packaged = re.findall(r"(?im)^ii\s+\S*nvidia\S*\s+(?:\d+:)?(\d+)\.\d+", joined)
        newer = [v for v in packaged if loaded and v != loaded.group(1)]
        if newer and not ctx.sheet.is_windows:
            fix = (f"the installed driver packages are {newer[0]} but the kernel module that loads is still "
                   f"{loaded.group(1)}, so the upgrade did not finish (its new module was never built): sudo apt update "
                   f"&& sudo apt install --fix-broken (with the NVIDIA / distribution repositories that upgrade came "
                   f"from still in the sources list), then reboot; cat /proc/driver/nvidia/version must then say "
                   f"{newer[0]}; " + fix)
            cause = (f"a half-finished driver upgrade: user-space {newer[0]} packages over the {loaded.group(1)} kernel "
                     "module, which a reboot does not change")
    # (the kernel's "module verification failed: signature and/or required key missing - tainting kernel" says it
    # LOADED an unsigned module: signatures are not enforced there, so Secure Boot refused nothing)
    elif re.search(r"(?i)Key was rejected by service|Required key not available|unsigned module|module verification "
                   r"failed(?![^\n]*tainting kernel)", text):
        module = ("nvidia" if re.search(r"(?i)nvidia", text) else "amdgpu" if re.search(r"(?i)amdgpu|rocm|radeon", text)
                  else "GPU driver")
        fix = (f"Secure Boot refuses the unsigned {module} module: enroll the DKMS signing key (sudo mokutil --import "
               "/var/lib/dkms/mok.pub, then reboot and complete the enrolment in the blue MOK screen) or turn Secure "
               "Boot off in the firmware settings")
        cause = f"the {module} kernel module is not signed with a key the firmware trusts (Secure Boot is on)"
    elif re.search(r"(?i)nvidia-smi\W{0,3}(?:command )?not found|command not found\W{0,3}nvidia-smi|nvidia-smi. is not "
                   r"recognized", text):
        inside = bool(_CONTAINED.search(joined))
        fix = ("in a container nvidia-smi comes from the host's driver through the NVIDIA Container Toolkit: install it "
               "(sudo nvidia-ctk runtime configure --runtime=docker; restart docker) and start with --gpus all"
               if inside else
               "install the NVIDIA driver (nvidia-smi comes with it): sudo ubuntu-drivers install (or sudo apt install "
               "nvidia-driver-<version>; Fedora: akmod-nvidia), then reboot; with Secure Boot on, enroll its key "
               "(mokutil) when asked")
        cause = "the NVIDIA driver is not installed " + ("in reach of the container" if inside else "on this system")
    elif re.search(r"(?i)Error 804|forward compatibility was attempted", text):
        fix = ("remove the CUDA forward-compatibility package (sudo apt remove cuda-compat-*; unset a LD_LIBRARY_PATH "
               "that points at /usr/local/cuda/compat): it is for datacenter GPUs only; or update the NVIDIA driver "
               "to the one the CUDA version needs")
        cause = "the CUDA forward-compatibility libraries are loaded on a GPU (GeForce, RTX) that does not support them"
    elif re.search(r"(?i)Error 803|unsupported display driver", text):
        fix = ("the user-space driver libraries and the kernel module are of different versions: reboot after a driver "
               "update (or reinstall one driver version cleanly: sudo apt install --reinstall nvidia-driver-<version>), "
               "and remove a stray libcuda.so from LD_LIBRARY_PATH or the container image")
        if _CONTAINED.search(joined):
            # CUDA images may register their forward-compat libcuda (/usr/local/cuda/compat) with ldconfig: on a host
            # whose driver is newer than that compat release, the older compat libcuda is loaded instead of the host's
            fix += ("; in a container, an image that registers CUDA's forward-compat driver (/usr/local/cuda/compat "
                    "in /etc/ld.so.conf.d or LD_LIBRARY_PATH) loads that libcuda ahead of the host driver's: compare "
                    "ldconfig -p | grep libcuda inside it with the host's driver, drop the compat path (then "
                    "ldconfig) or use an image that puts the host driver's library first")
        if re.search(r"(?i)cuda-compat|/cuda[\w.-]*/compat\b", joined):
            # NVIDIA's CUDA compatibility page: the forward-compat package's libcuda must be newer than the driver
            # and is for datacenter GPUs; an installed cuda-compat older than (or unsupported by) the driver gives 803
            fix = ("remove the CUDA forward-compatibility package the paste names (sudo apt remove 'cuda-compat-*', or "
                   "drop /usr/local/cuda/compat from LD_LIBRARY_PATH and /etc/ld.so.conf.d, then ldconfig) so the "
                   "driver's own libcuda is loaded; forward compatibility runs only on datacenter GPUs with a driver "
                   "older than the compat release - else update the NVIDIA driver; " + fix)
        cause = "the CUDA libraries and the loaded NVIDIA driver do not match"
    elif re.search(r"(?i)Error 999|CUDA error\W{0,3}unknown error|CUDA unknown error|init(?:iali[sz]e)? (?:the )?GPU\W{0,3}"
                   r"unknown error|\b(?:err(?:or)?|failure)\W{0,3}999\b|\b(?:after|since) "
                   r"(?:a |the )?(?:sleep|suspend|resume|hibernat\w*|wak(?:e|ing) up)\b|(?:休眠|睡眠|挂起|待机)\S{0,8}后", text):
        # CUDA_ERROR_UNKNOWN at start-up: the loaded module is not the one the libraries expect (a driver installed
        # or updated since boot) or nvidia_uvm was left broken by a suspend / resume
        fix = ("reload the NVIDIA unified-memory module: sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (after a "
               "suspend / resume it is left broken), or reboot (always, when the driver was installed or updated "
               "since the last boot: the old kernel module is still the loaded one); if it comes back after each "
               "sleep, keep the memory across suspend: options nvidia NVreg_PreserveVideoMemoryAllocations=1 and the "
               "nvidia-suspend services")
        cause = ("the CUDA driver is in a broken state (a driver installed or updated without a reboot, or the "
                 "machine slept: nvidia_uvm)")
    elif _CUDA_NOT_INITIALIZED.search(text) and not _CONTAINED.search(joined):
        fix, cause = _uvm_hmm(joined)
    elif re.search(r"(?i)secure ?boot", text):
        module = "nvidia" if re.search(r"(?i)nvidia", joined) else "amdgpu"
        fix = (f"Secure Boot refuses the unsigned {module} module: enroll the DKMS signing key (sudo mokutil --import "
               "/var/lib/dkms/mok.pub, reboot, and complete the enrolment in the blue MOK screen; check with mokutil "
               "--sb-state and sudo dmesg | grep -i -e 'key was rejected' -e lockdown) or turn Secure Boot off in the "
               "firmware settings")
        cause = f"Secure Boot is on and the {module} kernel module is not signed with a key the firmware trusts"
    elif re.search(r"(?i)kernel (?:update|upgrade)|(?:更新|升级)\S{0,12}内核", text) and not re.search(
            r"(?i)Bad return status|fail\w* to (?:build|compile)|build (?:error|fail)|编译失败|构建失败", text):
        nvidia = re.search(r"(?i)nvidia", joined)
        again = ("sudo apt install --reinstall nvidia-dkms-<version> (or sudo dkms autoinstall)" if nvidia else
                 "sudo apt install --reinstall amdgpu-dkms (or sudo dkms autoinstall), or drop DKMS: sudo "
                 "amdgpu-install --usecase=rocm --no-dkms")
        fix = (f"the driver's module was not rebuilt for the new kernel: install its headers (sudo apt install "
               f"linux-headers-$(uname -r)), then {again}, and reboot; meanwhile boot the previous kernel from the GRUB "
               "menu; with Secure Boot on, enroll the DKMS key (sudo mokutil --import /var/lib/dkms/mok.pub)")
        cause = "the kernel update left the GPU driver's module unbuilt (or unsigned) for the new kernel"
    elif re.search(r"^\s*No devices were found\s*$", text) or re.search(r"(?i)\bNo devices were found\b", text) and \
            re.search(r"(?i)nvidia-smi", joined):
        fix = ("nvidia-smi finds no GPU the loaded driver can drive: check lspci | grep -i nvidia (is the card seen), "
               "sudo dmesg | grep -i -e nvrm -e nvidia (the driver's refusal: an unsupported card for this driver "
               "branch, the open kernel modules on a pre-Turing card, a fallen-off-the-bus GPU); reinstall the driver "
               "branch that supports the card and reboot")
        cause = "the NVIDIA driver is loaded but drives no GPU"
    elif re.search(r"(?i)nvidia kernel module (?:is )?missing", text):
        fix = f"the nvidia module is not loaded: {secure_boot}; else reinstall the driver for the running kernel"
        cause = "the NVIDIA kernel module is not loaded for this kernel"
    elif re.search(r"(?i)could not load (?:the )?GPU driver", text):
        # a firmware update puts Secure Boot back to its default (on): the module that loaded before is refused now
        bios = re.search(r"(?i)\bBIOS\b|\bUEFI\b|firmware update", "\n".join(ctx.sheet.lines))
        fix = (("a BIOS update turns Secure Boot back on, and it refuses the unsigned module: turn Secure Boot off again "
                "in the firmware settings, or enroll the module's key (sudo mokutil --import /var/lib/dkms/mok.pub, "
                "then complete the enrolment at the next boot)") if bios else
               f"the GPU's kernel module did not load: {secure_boot}; else reinstall the driver for the running kernel")
        cause = "the GPU driver's kernel module is not loaded" + (" since the BIOS update" if bios else "")
    elif re.search(r"(?i)DKMS\b.{0,80}\b(?:freeze|hang)", text):
        fix = ("drop the DKMS module and use the kernel's own amdgpu: sudo amdgpu-install --uninstall; sudo "
               "amdgpu-install -y --usecase=rocm --no-dkms")
        cause = "the amdgpu-dkms module misbehaves on this kernel" + (f" ({kernel.value})" if kernel else "")
    elif re.search(r"Could not locate dkms\.conf", text):
        tree = re.search(r"(/var/lib/dkms/amdgpu/[^/\s]+)", "\n".join(ctx.sheet.lines))
        # dpkg-reconfigure re-runs the package's own script: dkms add, build and install for the running kernel
        fix = ("rebuild and register the installed module: sudo dpkg-reconfigure amdgpu-dkms (then sudo dkms status "
               "must list amdgpu as installed for $(uname -r)); if dkms still trips over the old version, remove the "
               f"leftover tree: sudo rm -rf {tree.group(1) if tree else '/var/lib/dkms/amdgpu/<old version>'}, then "
               "install the amdgpu-dkms package again")
        cause = "an old amdgpu-dkms version left an empty tree in /var/lib/dkms that dkms cannot read"
    elif re.search(r"(?i)Module (?:amdgpu|nvidia\w*) not found in directory", text):
        module = re.search(r"(?i)Module (amdgpu|nvidia\w*) not found in directory (\S+)", text)
        if module.group(1).lower() == "amdgpu":
            # Ubuntu's cloud / minimal kernels leave the GPU drivers out of the base package (in -modules-extra)
            fix = ("this kernel has no amdgpu module: on Ubuntu install the kernel's extra modules, sudo apt install "
                   "linux-modules-extra-$(uname -r) (cloud / minimal kernels such as -aws, -azure, -gcp, -kvm leave "
                   "amdgpu out; a -generic kernel has it), then sudo modprobe amdgpu; or install amdgpu-dkms for this "
                   "kernel (sudo amdgpu-install --usecase=dkms)")
        else:
            fix = ("the NVIDIA module was not built for this kernel: install its headers (sudo apt install "
                   "linux-headers-$(uname -r)) and rebuild it (sudo dkms autoinstall, or reinstall nvidia-dkms-"
                   "<version>), then sudo modprobe nvidia; " + secure_boot)
        cause = f"the running kernel ({module.group(2).rstrip('/').rsplit('/', 1)[-1]}) has no {module.group(1)} module"
    elif re.search(r"(?i)nvidia-container-cli.{0,80}nvml error: driver not loaded", text):
        # the container toolkit's hook reads the host's driver: the module is missing on the host, not in the image
        fix = ("the host's NVIDIA kernel module is not loaded: run nvidia-smi on the host itself; reinstall the driver "
               "for the host's running kernel (sudo apt install --reinstall nvidia-driver-<version>, or sudo dkms "
               f"autoinstall after a kernel update), {secure_boot}; reboot, then start the container again")
        cause = "the NVIDIA Container Toolkit finds no loaded NVIDIA driver on the host"
    elif re.search(r"(?i)couldn.t communicate with the NVIDIA driver|Failed to initialize NVML: Driver Not Loaded", text):
        fix = ("the NVIDIA kernel module is not loaded: reinstall the driver for the running kernel (sudo apt install "
               "--reinstall nvidia-driver-<version>; or dkms autoinstall), check Secure Boot, reboot")
        cause = "nvidia-smi cannot reach the kernel driver (a kernel update without the module rebuilt, or Secure Boot)"
    elif re.search(r"(?i)driver (?:on your system is too old|version is insufficient)", text):
        found = re.search(r"found version (\d{4,5})", text)
        cuda = ctx.sheet.values("cuda")
        # the driver branch said in words ("driver 470", "nvidia-driver-510"): the newest CUDA it runs
        branch = re.search(r"(?i)\bdriver(?: version)?\W{0,3}(\d{3})(?:\.\d+){0,2}\b|nvidia-driver-(\d{3})\b", joined)
        runs = max((c for c, b in _DRIVER_FOR_CUDA if branch and b <= int(branch.group(1) or branch.group(2))),
                   default=None)
        most = (f"{int(found.group(1)) // 1000}.{int(found.group(1)) % 1000 // 10}" if found else
                cuda[-1] if cuda else f"{runs[0]}.{runs[1]}" if runs else None)
        older = ""
        if most and most.split(".")[0] == "11":
            older = "; or keep the driver and install the torch built for CUDA 11: --index-url " \
                    "https://download.pytorch.org/whl/cu118"
        elif most and most.split(".")[0] == "12":
            older = "; or keep the driver and install the torch built for CUDA 12.6: --index-url " \
                    "https://download.pytorch.org/whl/cu126"
        if most and not older and re.fullmatch(r"\d+\.\d+", most):
            older = (f"; or keep the driver and install a torch built for CUDA {most} (cu{most.replace('.', '')}: "
                     f"an older torch release, from https://download.pytorch.org/whl/cu{most.replace('.', '')})")
        # the installed branch named back (driver 515 runs CUDA 11.7 at most), so the user sees which one to leave
        installed = f"driver {branch.group(1) or branch.group(2)}" if branch else "it"
        # no release in the paste: name where to read it rather than a placeholder
        runs_at_most = (f"{installed} runs CUDA {most} at most" if most else
                        "nvidia-smi's \"CUDA Version\" is the newest CUDA it runs")
        fix = (f"update the NVIDIA driver ({runs_at_most}; a current torch needs a driver "
               f"for CUDA 12: 525 or newer, 570+ for CUDA 12.8){older}")
        cause = "torch was built for a newer CUDA than the installed driver supports"
    elif _GPL_ONLY.search(text):
        fix, cause = _nvidia_gpl_only(joined, text, kernel)
    elif _NVIDIA_DKMS.search(joined) and re.search(r"(?i)Bad return status for module build|dkms.*(?:error|failed)|"
                                                  r"fail(?:s|ed|ing)? to (?:build|compile)", text):
        fix, cause = _nvidia_module_build(joined, kernel)
    elif re.search(r"(?i)Bad return status for module build|dkms.*(?:error|failed)|dkms-failed|DKMS fails? to build|"
                   r"dkms\b.{0,40}\bfail(?:s|ed|ing)? to (?:build|compile|install)|dkms.{0,20}(?:编译|构建)(?:失败|出错)",
                   text):
        previous = _previous_ubuntu_kernel(text + " " + (kernel.value if kernel else ""))
        first = _first_dkms_release(joined + " " + (kernel.value if kernel else ""))
        newer = (f"install the amdgpu-dkms of ROCm {first[1]} or newer (the first release whose driver builds for the "
                 f"{first[0]} kernel: sudo amdgpu-install --uninstall, then the amdgpu-install of {first[1]})" if first
                 else "install the amdgpu-dkms of a newer ROCm release (one that lists this kernel)")
        # round 20 (r20a): the module's own version in its build path, where a release is known to have fixed its
        # build for a kernel update; and the kernel the paste says it still builds on, named back
        module = re.search(r"/var/lib/dkms/(?:amdgpu|rock)\S*?/(\d+\.\d+-\d+)/", joined)
        fixed = _DKMS_MODULE_FIXED.get(module.group(1)) if module else None
        if fixed:
            newer = (f"install ROCm {fixed[1]} (its module {fixed[2]} builds on the {fixed[0]} kernels that "
                     f"{module.group(1)} fails on)")
        worked = re.search(r"(?i)\bworks?(?: fine| well)? (?:with|on) (?:the )?(?:kernel )?(\d+\.\d+\.\d+-\d+)", joined)
        if worked:
            newer += (f"; until then boot the kernel it still builds on, {worked.group(1)} (GRUB's Advanced options), "
                      f"and hold the kernel update (sudo apt-mark hold linux-image-generic linux-headers-generic)")
        fix = (newer + ", or boot a supported kernel (one the ROCm release's compatibility matrix "
               "lists)" + (f" (the series before it, {previous}: sudo apt install linux-image-"
                                         f"{previous}.0-<abi>-generic linux-headers-{previous}.0-<abi>-generic, pick "
                                         "it in GRUB's Advanced options, and hold the newer one until ROCm lists it)"
                                         if previous else "") +
               ", or drop the DKMS module: sudo amdgpu-install --usecase=rocm --no-dkms (the kernel's own amdgpu "
               "driver serves ROCm)")
        cause = "the amdgpu-dkms module does not build for this kernel" + (f" ({kernel.value})" if kernel else "")
    elif re.search(r"amdgpu version file missing", text):
        return None   # Ollama's note on distribution kernels: harmless by itself, the real cause is elsewhere
    elif re.search(r"(?i)firmware|\bSMU\b|\bPSP\b", text):
        fix = "install a newer linux-firmware package (the GPU's firmware files are newer than the distribution's)"
        cause = "amdgpu cannot load this GPU's firmware"
    elif re.search(r"(?i)\bnvidia", text) and not re.search(r"(?i)\bamdgpu\b|\brocm|radeon", joined):
        # an NVIDIA driver component failing with no reading of its own: the kernel module first
        fix = ("read sudo dmesg | grep -i -e NVRM -e nvidia (the kernel module's own error) and nvidia-smi; if the "
               "module is not loaded, reinstall the driver for the running kernel (sudo apt install --reinstall "
               f"nvidia-driver-<version>, or sudo dkms autoinstall after a kernel update); {secure_boot}; reboot")
        cause = "an NVIDIA driver component failed to start (the kernel module not loaded, or not matching)"
    else:
        fix = ("sudo modprobe amdgpu and read sudo dmesg | grep -i amdgpu; if it is not there, install the driver "
               f"(sudo amdgpu-install --usecase=dkms) or boot a kernel that has it; {secure_boot}")
        cause = "the amdgpu kernel driver is not loaded for the GPU"
    # with no driver loaded, nothing above it can work: the runtime's and the tools' own failures are its symptoms
    downstream = ctx.of("device-access", "visibility", "rocm-libs-missing") + ctx.no_gpu() if re.search(
        r"NOT loaded|not found in modules|modprobe|couldn.t communicate", text) else ctx.no_gpu()
    return _make("driver", "the GPU driver is not working", cause, fix, [ctx.line_fact(e) for e in errors[:2]],
                 errors + downstream)


# an NVIDIA module being built by DKMS: "dkms install nvidia/390.157", /var/lib/dkms/nvidia/..., nvidia-dkms-470
_NVIDIA_DKMS = re.compile(r"(?i)\bdkms\b.{0,40}\bnvidia(?:-current)?/(\d{3})\.|/var/lib/dkms/nvidia/(\d{3})\.|"
                          r"\bnvidia-(?:dkms|driver)-(\d{3})\b")
# The legacy branches NVIDIA keeps for old GPUs get fixes for new kernels late or never (390: Fermi / Kepler, ended
# 2022; 470: Kepler, ended 2024; 340: Tesla): a kernel newer than the branch's last release breaks its module build
_LEGACY_BRANCHES = {"304": "GeForce 6 / 7", "340": "Tesla (GeForce 8-300)", "390": "Fermi", "470": "Kepler"}


# CUDA_ERROR_NOT_INITIALIZED (3) from cuInit as a tool prints it (Ollama: "cudart init failure: 3", "cuda driver library
# init failure: 3"; cuInit's own return code or name). Only cuInit's: a later call's NOT_INITIALIZED (jax's
# gpuDeviceGetAttribute after a failed backend start) follows another failure.
_CUDA_NOT_INITIALIZED = re.compile(r"(?i)\b(?:cudart|cuda driver library|cuInit|cuda) init\w*(?:\(\d?\))?\W{0,3}"
                                   r"(?:err(?:or)?|failure|failed|returned)\W{0,3}3\b|\bcuInit\b.{0,40}CUDA_ERROR_NOT_INITIALIZED|"
                                   r"\bcuInit\(\d?\)\W{0,3}(?:returned|returns|failed|error)\W{0,3}3\b")
# the driver branch a paste names: nvidia-smi's header, a libcuda's versioned name, a package
_NVIDIA_BRANCH = re.compile(r"(?i)(?:NVIDIA-SMI|Driver Version:?|libcuda\.so\.|nvidia-(?:driver|open|dkms)-?|"
                            r"nvidia[- ]driver:?)\s*(\d{3})\.?")
_BLACKWELL = re.compile(r"(?i)\bRTX (?:PRO )?\d{4}\b.{0,20}\bBlackwell\b|\bBlackwell\b|\bRTX 50[5-9]0\b|\b[BG]B?200\b|"
                        r"\bB300\b|\bsm_?1[02]0\b")


def _uvm_hmm(joined: str) -> tuple[str, str]:
    """cuInit failing with CUDA_ERROR_NOT_INITIALIZED (3) while the driver is loaded (nvidia-smi works): on NVIDIA's
    open kernel modules, nvidia_uvm's heterogeneous memory management (HMM) breaks CUDA's start-up on some kernels, and
    turning it off is NVIDIA's workaround (open-gpu-kernel-modules#901 "HMM causes CUDA initialization failures",
    #947 cuInit() returns 3 with the open module, #797; ollama#11593). The open modules are the only ones for
    Blackwell and the default from driver 560 on (NVIDIA's "NVIDIA Transitions Fully Towards Open-Source GPU Kernel
    Modules", 2024: https://developer.nvidia.com/blog/nvidia-transitions-fully-towards-open-source-gpu-kernel-modules/)."""
    branch = _NVIDIA_BRANCH.search(joined)
    open_modules = (_BLACKWELL.search(joined) or re.search(r"(?i)\bopen (?:kernel )?modules?\b|nvidia-open|"
                                                           r"kernel-open|-open\b", joined)
                    or (branch and int(branch.group(1)) >= 560))
    which = ("the open kernel modules (which Blackwell requires and driver 560+ installs by default)" if open_modules
             else "the open kernel modules (if installed: modinfo nvidia | grep license says Dual MIT/GPL)")
    fix = ("turn off HMM in nvidia_uvm: echo 'options nvidia_uvm uvm_disable_hmm=1' | sudo tee /etc/modprobe.d/"
           "nvidia-uvm.conf, then sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (or sudo update-initramfs -u and "
           "reboot); cat /sys/module/nvidia_uvm/parameters/uvm_disable_hmm must print 1, then restart the program")
    cause = ("CUDA's start-up (cuInit) fails with CUDA_ERROR_NOT_INITIALIZED (3) although the driver is loaded: under "
             f"{which}, nvidia_uvm's heterogeneous memory management breaks CUDA initialisation on some kernels")
    return fix, cause


# the closed NVIDIA module's link refused by the kernel's modpost: it calls a symbol the kernel exports to GPL modules
# only (a kernel change, often a distribution's backport, turned a helper the driver inlines into such a call)
_GPL_ONLY = re.compile(r"(?i)GPL-incompatible module (nvidia[\w-]*)\.ko uses GPL-only symbol\W{0,3}([\w]+)")
# NVIDIA driver releases as they appear in a driver's name, a package or a config ("535.54.03", "NVIDIA-Linux-x86_64-
# 470.199.02", nvidia-dkms 550.40.07)
_NVIDIA_RELEASE = re.compile(r"(?<![\d.])([3-9]\d{2})\.(\d{2,3})(?:\.(\d{1,3}))?(?![\d.])")
# The first release of a branch whose closed module builds again on the kernels that made rcu_read_unlock_strict (and
# its kin) GPL-only for it: NVIDIA's GPU Operator maintainers on gpu-operator#729 ("This issue should be fixed with
# driver versions >= 535.183.08")
_GPL_FIXED = {"535": (535, 183, 8)}


def _nvidia_gpl_only(joined: str, text: str, kernel) -> tuple[str, str]:
    """The closed NVIDIA module refused at modpost: a kernel change left it calling a GPL-only symbol, and only a
    driver release that avoids the call builds (or the open kernel modules, dual MIT/GPL, which may use it: NVIDIA's
    aritger in open-gpu-kernel-modules#594). Inside the GPU Operator the driver container builds it at each start, so
    the fix is the operator's driver.version."""
    m = _GPL_ONLY.search(text)
    symbol = m.group(2)
    releases = [r for r in _NVIDIA_RELEASE.finditer(joined)]
    release = releases[0] if releases else None
    on = kernel.value if kernel else "this kernel"
    if release:
        branch = release.group(1)
        have = tuple(int(g or 0) for g in release.groups())
        fixed = _GPL_FIXED.get(branch)
        if fixed and have < fixed:
            target = ".".join(str(n) if i < 2 else f"{n:02d}" for i, n in enumerate(fixed))
            to = f"driver {target} or newer (the {branch} release that builds on these kernels again)"
        else:
            target = f"{branch}.<newest>"
            to = f"the newest {branch} release (or the next branch) whose notes list {on}"
        named = f"driver {release.group(0)}"
    else:
        target, to, named = "<a newer release>", f"a driver release whose notes list {on}", "this driver"
    if re.search(r"(?i)gpu[- ]operator|ClusterPolicy|driver-daemonset|nvidia-driver-daemonset", joined):
        how = (f"set the operator's driver to {to}: helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator "
               f"--reuse-values --set driver.version={target} (or spec.driver.version in the ClusterPolicy), and the "
               "driver pods rebuild it for the node's kernel")
    else:
        how = (f"install {to} with the kernel's headers (sudo apt install linux-headers-$(uname -r)), then sudo dkms "
               "autoinstall; or boot the previous kernel until then")
    fix = (how + "; or use NVIDIA's open kernel modules (nvidia-open / kernel-open, Turing and newer), which may call "
           "GPL-only symbols")
    cause = (f"the closed NVIDIA kernel module of {named} does not link on {on}: it uses the GPL-only symbol {symbol}, "
             "which the kernel refuses to a proprietary module")
    return fix, cause


def _nvidia_module_build(joined: str, kernel) -> tuple[str, str]:
    """The NVIDIA module (not amdgpu) failing to build for the running kernel: a legacy branch cannot follow new
    kernels, a current one is fixed by its next release."""
    m = _NVIDIA_DKMS.search(joined)
    branch = next((g for g in m.groups() if g), None)
    running = re.search(r"(?i)(?:kernel(?: release)?:?|KERNEL_UNAME=|on kernel:?)\s*(\d+\.\d+)[.\d]*\S*", joined)
    on = f"kernel {running.group(1)}" if running else (kernel.value if kernel else "this kernel")
    if branch in _LEGACY_BRANCHES:
        fix = (f"the legacy {branch} driver's kernel module does not build for {on} (NVIDIA's {branch} branch for "
               f"{_LEGACY_BRANCHES[branch]} GPUs gets no fixes for new kernels): apply the community compatibility patch "
               f"for that kernel to the DKMS source in /usr/src (on Arch the AUR nvidia-{branch}xx-dkms package carries "
               f"such patches), then sudo dkms install "
               f"nvidia/<version> again; or boot an older / LTS kernel that the {branch} module still builds for and "
               "hold the kernel there; read /var/lib/dkms/nvidia/<version>/build/make.log for the failing source file")
        cause = f"the legacy NVIDIA {branch} kernel module does not build for the newer {on}"
    else:
        fix = (f"install the NVIDIA driver release that supports {on} (a newer version of the same branch, or the "
               "next branch; its release notes list the kernels), with the kernel's headers (sudo apt install "
               "linux-headers-$(uname -r)), then sudo dkms autoinstall; or boot the previous kernel until it comes; "
               "read /var/lib/dkms/nvidia/<version>/build/make.log for the failing source file")
        cause = f"the NVIDIA kernel module does not build for {on}"
    return fix, cause


# The oldest Linux driver branch of each CUDA toolkit (NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions"): a driver runs the CUDA of its branch and older; code a newer toolkit compiled to
# PTX cannot be loaded by it
_DRIVER_FOR_CUDA = (((9, 0), 384), ((9, 1), 390), ((9, 2), 396), ((10, 0), 410), ((10, 1), 418), ((10, 2), 440),
                    ((11, 0), 450), ((11, 1), 455), ((11, 2), 460), ((11, 3), 465), ((11, 4), 470), ((11, 5), 495),
                    ((11, 6), 510), ((11, 7), 515), ((11, 8), 520), ((12, 0), 525), ((12, 1), 530), ((12, 2), 535),
                    ((12, 3), 545), ((12, 4), 550), ((12, 5), 555), ((12, 6), 560), ((12, 8), 570), ((12, 9), 575),
                    ((13, 0), 580))
