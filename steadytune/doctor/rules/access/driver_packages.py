"""The GPU driver's packages, read from what the package manager and the installer say: two kernel-driver stacks that
collide, the ROCm kernel-driver package renamed (rock-dkms before ROCm 4.5, amdgpu-dkms after), an amdgpu-install
that replaced the display driver without its graphics use case, the old rock-dkms on a kernel its release never
built for, and pieces of an NVIDIA driver branch installed without the driver itself."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.access.wsl import _rocm_release
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

# dpkg refusing to unpack a package whose files another installed package owns ("trying to overwrite 'X', which is
# also in package Y"), where both are kernel-driver packages of different stacks
_OVERWRITE = re.compile(r"(?i)trying to overwrite .{1,160}?, which is also in package ([\w.+-]+)")
_DRIVER_PACKAGE = re.compile(r"(?i)\b(?:amdgpu(?:-pro)?(?:-dkms|-core)?|rock-dkms|rocm-dkms|nvidia-[\w-]*(?:dkms|"
                             r"driver|kernel)[\w-]*|libnvidia-[\w-]+)")


def _stack_of(package: str) -> str:
    return "nvidia" if package.lower().startswith(("nvidia", "libnvidia")) else "amd"


@rule("driver")
def driver_stacks_collide(ctx: Context) -> Optional[Diagnosis]:
    """Two driver stacks installed side by side (AMD's amdgpu-pro / graphics driver and ROCm's rock-dkms; a
    distribution's NVIDIA packages and NVIDIA's own repository): their kernel-module packages ship the same files, so
    dpkg refuses the second. Only one stack can be installed; the old one is removed with its own uninstaller."""
    hits = _lines_matching(ctx, _OVERWRITE.pattern)
    if not hits:
        return None
    owner = _OVERWRITE.search(hits[0].line).group(1)
    text = _text(ctx)
    if not _DRIVER_PACKAGE.search(owner):
        return None
    if _stack_of(owner) == "nvidia":
        remove = ("remove the NVIDIA packages of the other source first (sudo apt purge '*nvidia*' 'libnvidia-*', "
                  "then sudo apt autoremove), keep one repository (Ubuntu's or NVIDIA's CUDA repository), and install "
                  "the driver from it again")
    elif re.search(r"(?i)amdgpu-pro|\b1[89]\.\d0\b|\b2[0-2]\.\d0\b", text + " " + owner):
        remove = ("uninstall the amdgpu-pro driver first (amdgpu-pro-uninstall, or amdgpu-uninstall on newer "
                  "packages), reboot, then install ROCm (sudo apt install rocm-dkms, or amdgpu-install --usecase=rocm "
                  "on ROCm 4.5 and newer), which brings its own kernel driver")
    else:
        remove = ("remove the other AMD driver stack first (sudo amdgpu-uninstall, or sudo apt purge amdgpu-dkms "
                  "rock-dkms), reboot, then install one of them: amdgpu-install --usecase=graphics,rocm installs both "
                  "uses from one stack")
    return _first(_make("driver", f"two GPU driver stacks collide over {owner}'s files",
                        f"the package being installed ships kernel-driver files that the installed {owner} already "
                        "owns: two driver stacks (the display driver's and ROCm's, or two NVIDIA sources) cannot be "
                        "installed side by side", remove, [ctx.line_fact(hits[0])], hits[:2]))


# apt asked for ROCm's old kernel-driver package, which the repository no longer has: from ROCm 4.5 the kernel driver
# is amdgpu-dkms from the separate repo.radeon.com/amdgpu repository, installed by amdgpu-install (ROCm 4.5 release
# notes, "Installation": the unified amdgpu-install, rock-dkms replaced by amdgpu-dkms)
_ROCK_DKMS_GONE = re.compile(r"(?i)Depends: rock-dkms\b.{0,40}\bnot (?:installable|going to be installed)|"
                             r"Unable to locate package rock-dkms|\brock-dkms'? (?:has no installation candidate|is not "
                             r"available)|"
                             r"\brock-dkms\b.{0,40}\b(?:disappeared|missing|gone|not found|no longer)")


@rule("driver")
def rock_dkms_renamed(ctx: Context) -> Optional[Diagnosis]:
    hits = _lines_matching(ctx, _ROCK_DKMS_GONE.pattern)
    if not hits:
        return None
    return _first(_make("driver", "rock-dkms is no longer in the ROCm repository",
                        "from ROCm 4.5 the kernel driver is not shipped as rock-dkms in the rocm repository: it is "
                        "amdgpu-dkms (with amdgpu-dkms-firmware) in the separate repo.radeon.com/amdgpu repository, "
                        "so the old rocm-dkms metapackage cannot be satisfied",
                        "install the kernel driver from the amdgpu repository: install the amdgpu-install package of "
                        "the ROCm release (from repo.radeon.com/amdgpu-install/), then sudo amdgpu-install "
                        "--usecase=rocm (it adds the amdgpu repository and installs amdgpu-dkms); or add "
                        "repo.radeon.com/amdgpu/<release>/ubuntu to apt's sources and sudo apt install amdgpu-dkms "
                        "rocm; on a kernel whose own amdgpu serves ROCm, --no-dkms skips it",
                        [ctx.line_fact(hits[0])], hits[:2]))


# amdgpu-install with compute use cases only, on a desktop whose screen then stays black: amdgpu-dkms replaced the
# kernel's display driver and the user-space graphics stack of that release was left out (amdgpu-install's use
# cases: graphics is the desktop's Mesa / display part)
_USECASES = re.compile(r"(?i)amdgpu-install\b[^\n]*?--usecase[= ]([\w,-]+)")
_NO_DISPLAY = re.compile(r"(?i)\bblack screen\b|\bno (?:display|video) (?:output|signal)\b|\b(?:desktop|display|GUI|"
                         r"login screen|gdm|X ?server|Wayland)\b.{0,30}\b(?:does(?:n.t| not) (?:start|come up|load)|"
                         r"fails? to start|won.t start|not start\w*|broken|gone)\b|\bboots? to (?:a )?(?:black|blank)|"
                         r"\bblank screen\b|黑屏")


@rule("driver")
def compute_without_graphics(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    usecase = _USECASES.search(text)
    dark = _lines_matching(ctx, _NO_DISPLAY.pattern)
    if not usecase or not dark or "--no-dkms" in text:
        return None
    cases = [c for c in usecase.group(1).lower().split(",") if c]
    if "graphics" in cases or "workstation" in cases:
        return None
    wanted = ",".join(["graphics"] + cases)
    return _first(_make("driver", "amdgpu-install replaced the display driver without its graphics stack",
                        f"amdgpu-install --usecase={usecase.group(1)} installs the amdgpu-dkms kernel driver, which "
                        "replaces the kernel's own display driver, but leaves out the matching user-space graphics "
                        "(Mesa) of that release, so the desktop does not start after the reboot",
                        f"boot to a text console (Ctrl+Alt+F3, or recovery mode) and reinstall with the graphics use "
                        f"case: sudo amdgpu-install --usecase={wanted}, then reboot; or, for compute only on the "
                        f"kernel's own driver: sudo amdgpu-uninstall, then sudo amdgpu-install --usecase="
                        f"{','.join(cases)} --no-dkms", [], dark[:2]))


# ROCm releases before 4.5 shipped their kernel driver as rock-dkms, built for the Ubuntu LTS kernels they listed
# (ROCm 1.x-2.x READMEs: Ubuntu 16.04 / 18.04 with their 4.13-4.15 kernels); on another kernel it fails to build,
# to load, or to boot. Linux 4.17 and newer carry KFD for discrete GPUs themselves, so the user space runs on them
# without rock-dkms.
_OLD_KERNEL_DRIVER = re.compile(r"(?i)\brock-dkms\b|\brocm-dkms\b|\bamdkcl\b")
_KERNEL_SAID = re.compile(r"(?i)\bkernel[ :(]{1,3}v?(\d)\.(\d+)|\bLinux version (\d)\.(\d+)|\b(\d)\.(\d+)\.\d+-\d+-generic\b")
_FAILED = re.compile(r"(?i)hsa api call failure|no (?:kfd|/dev/kfd)|/dev/kfd.{0,30}(?:missing|not (?:exist|found|there))|"
                     r"\bcan(?:not|.t)? (?:no longer )?boot|\bfails? to boot|\bboot (?:fails?|hangs?)|ROCk module is NOT "
                     r"loaded|clGetPlatformIDs\(-1001\)|VGACON disables amdgpu")


@rule("driver")
def rock_dkms_kernel(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    release = _rocm_release(text)
    if not _OLD_KERNEL_DRIVER.search(text) or not release:
        return None
    major, minor = (int(x) for x in release.split(".")[:2])
    if (major, minor) >= (4, 5):
        return None
    kernel = _KERNEL_SAID.search(text)
    failed = _lines_matching(ctx, _FAILED.pattern)
    if not kernel or not failed:
        return None
    numbers = [int(g) for g in kernel.groups() if g is not None]
    series = (numbers[0], numbers[1])
    if (4, 13) <= series <= (4, 15):
        return None
    running = f"{series[0]}.{series[1]}"
    return _first(_make("driver", f"ROCm {release}'s rock-dkms driver on kernel {running}, which it does not support",
                        f"ROCm {release} ships its kernel driver as rock-dkms, built for the kernels of the Ubuntu LTS "
                        f"releases it lists (Ubuntu 16.04 / 18.04, kernels 4.13-4.15); on kernel {running} it does "
                        "not build, load or let the machine boot, so there is no working /dev/kfd",
                        "boot a supported kernel: Ubuntu 18.04's GA kernel 4.15 (sudo apt install linux-image-generic "
                        "linux-headers-generic, the GA series rather than -hwe-18.04; pick it in GRUB's Advanced "
                        "options, then sudo dkms autoinstall), on a supported Ubuntu release; or remove rock-dkms "
                        "(sudo apt remove "
                        "rock-dkms) and run the ROCm user space on the kernel's own amdgpu (Linux 4.17 and newer have "
                        "KFD for discrete GPUs); or install a current ROCm release, whose amdgpu-dkms lists this "
                        "kernel", [ctx.line_fact(failed[0])], failed[:3]))


# Ubuntu's NVIDIA driver is split into packages of one branch (nvidia-driver-NNN depends on them all): the libraries
# (libnvidia-gl-NNN holds the Vulkan / OpenGL driver, libnvidia-compute-NNN CUDA's), the tools (nvidia-utils-NNN:
# nvidia-smi) and the kernel module (linux-modules-nvidia-NNN / nvidia-dkms-NNN). Installed one by one, the pieces
# have no kernel module: nouveau keeps the card, and every program finds no NVIDIA device
_DRIVER_PIECE = re.compile(r"(?i)\b((?:lib)?nvidia-(?:gl|compute|utils|compute-utils|decode|encode|extra|fbc1|cfg1|"
                           r"common|kernel-common|kernel-source))-(\d{3})(-server|-open)?\b")
_WHOLE_DRIVER = re.compile(r"(?i)\bnvidia-driver-\d{3}|\bnvidia-dkms-\d{3}|\blinux-modules-nvidia-\d{3}|\bcuda-drivers\b|"
                           r"\bubuntu-drivers (?:autoinstall|install)\b|\bnvidia-headless-\d{3}|\bakmod-nvidia\b|"
                           r"\bNVIDIA-Linux-x86_64-\d")
_INSTALLS = re.compile(r"(?i)\b(?:apt(?:-get)?|aptitude|nala)\s+(?:-\S+\s+)*install\b")


@rule("driver")
def driver_pieces_without_the_driver(ctx: Context) -> Optional[Diagnosis]:
    """Pieces of one NVIDIA driver branch installed by hand (libnvidia-gl-NNN for Vulkan, nvidia-utils-NNN for
    nvidia-smi), and never the driver itself, with a GPU failure beside them: without nvidia-driver-NNN there is no
    kernel module (nouveau keeps the card), so Vulkan and CUDA programs see no NVIDIA device; pieces of two branches
    cannot work together either. The remedy is the whole driver of one branch."""
    text = _text(ctx)
    if ctx.sheet.has("platform", "wsl") or ctx.sheet.has("platform", "container") or _WHOLE_DRIVER.search(text):
        return None
    pieces = [m for line in ctx.sheet.lines if _INSTALLS.search(line) for m in _DRIVER_PIECE.finditer(line)]
    failing = [e for e in ctx.errors if e.family in (None, "driver", "visibility", "device-access")]
    if not pieces or not (failing or ctx.sheet.has("complaint")):
        return None
    newest = max(pieces, key=lambda m: int(m.group(2)))
    branch, flavour = newest.group(2), (newest.group(3) or "").lower()
    branches = sorted({m.group(2) for m in pieces})
    names = ", ".join(dict.fromkeys(m.group(0) for m in pieces))
    mixed = (f"; the pieces are of {len(branches)} branches ({', '.join(branches)}), which do not work together"
             if len(branches) > 1 else "")
    stray = [m.group(0) for m in pieces if m.group(2) != branch]
    server = f" (a headless server: nvidia-driver-{branch}-server)" if flavour == "-server" else ""
    return _make("driver", f"only pieces of the NVIDIA {branch} driver are installed, not the driver",
                 f"{names} are parts of Ubuntu's NVIDIA driver (its Vulkan/OpenGL libraries and tools); without "
                 f"nvidia-driver-{branch} no NVIDIA kernel module is installed, the open nouveau driver keeps the card, "
                 "and programs (Vulkan ones such as GPT4All and llama.cpp's Vulkan build, CUDA ones) find no NVIDIA "
                 "device" + mixed,
                 f"install the whole driver of one branch: sudo apt install nvidia-driver-{branch}{server} (or sudo "
                 "ubuntu-drivers install, which picks the recommended one)" +
                 (f", remove the other branch's pieces (sudo apt purge {' '.join(dict.fromkeys(stray))})" if stray
                  else "") + ", and reboot; check: nvidia-smi lists the GPU, lsmod | grep nouveau is empty, and "
                 "vulkaninfo --summary shows the NVIDIA GPU (not llvmpipe)",
                 [], (failing or _lines_matching(ctx, _DRIVER_PIECE))[:2])
