"""Situations AMD's own install, troubleshooting and limitations pages list, with the fix each page gives (round 17,
t17a). Each reads the machine's facts, not one report's words:

- the amdgpu-dkms build with no headers for the running kernel: the ROCm prerequisites page installs
  linux-headers-$(uname -r) and linux-modules-extra-$(uname -r) (named here with the kernel of the paste); under
  WSL 2 there is no amdgpu module to build at all, and the Radeon WSL install page uses
  amdgpu-install --usecase=wsl,rocm --no-dkms
  (rocm.docs.amd.com/projects/install-on-linux/en/latest/install/prerequisites.html,
  rocm.docs.amd.com/projects/radeon/en/latest/docs/install/wsl/install-radeon.html);
- several Radeon cards under WSL 2: "Microsoft does not currently support mGPU setup in WSL" (Radeon mGPU page,
  rocm.docs.amd.com/projects/radeon-ryzen/en/docs-6.2.3/docs/install/native_linux/mgpu.html);
- a Ryzen AI APU (Strix Point gfx1150, Strix Halo gfx1151) on a kernel older than 6.14 that ROCm does not see: the
  Ryzen PyTorch page requires the 6.14 OEM kernel on Ubuntu 24.04 (sudo apt-get install linux-oem-24.04c)
  (rocm.docs.amd.com/projects/radeon-ryzen/en/docs-7.0.2/docs/install/installryz/native_linux/install-pytorch.html;
  rechecked in round 18 against the install-ryzen.html page of the same docs as users quote it: "For ROCm on Ryzen,
  it is required to operate on the 6.14-1018 OEM kernel or newer ... sudo apt install linux-oem-24.04c");
- ROCm's tools not found after the install: the post-install page adds /opt/rocm/bin to PATH (and the libraries to
  ld.so.conf.d) (rocm.docs.amd.com/projects/install-on-linux/en/latest/install/post-install.html);
- several ROCm releases side by side, the tools and the libraries of different ones: the multi-version install page
  chooses the release /opt/rocm points to with update-alternatives --config rocm
  (rocm.docs.amd.com/projects/install-on-linux/en/latest/install/install-methods/multi-version-install.html);
- the distribution's own ROCm runtime (Ubuntu 24.04's libhsa-runtime64-1 / libhsakmt1, ROCm 5.7) found first in
  /lib/x86_64-linux-gnu, ahead of AMD's /opt/rocm: remove those packages (unverified on AMD's pages: a ROCm-on-WSL
  setup guide, github.com/andweng/wsl-rocm, states it);
- PyTorch on Windows (AMD's wheels) on an Adrenalin driver older than the one the release asks for. (The 25.9.2 floor
  is unverified, round 18: no AMD page stating it was found; ROCm/ROCm#5440 ran the 6.4.4 preview on AMD's separate
  "PyTorch preview" driver, RN-AMDGPU-WINDOWS-PYTORCH-PREVIEW, and third-party installers name 25.9.2 for ROCm 7.)"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (NOT_DETECTED, Context, Diagnosis, _first, _lines_matching, _make, _text,
                                          _vendor, rule)
from steadytune.doctor.rules.machine.visibility import _gpus_said

_HEADERS = re.compile(r"(?i)Your kernel headers for kernel (\S+) cannot be found|"
                      r"Unable to find the kernel source tree for the currently running kernel")
_WSL_KERNEL = re.compile(r"(?i)microsoft-standard-WSL2?|-microsoft-standard|\bWSL ?2?\b")


def _amd_driver_build(ctx: Context) -> bool:
    return bool(re.search(r"(?i)amdgpu-dkms|amdgpu-install|\bamdgpu\b.{0,20}DKMS|\bROCm\b", _text(ctx))) and \
        not re.search(r"(?i)\bnvidia\b|\bcuda\b", _text(ctx))


@rule("driver")
def amdgpu_dkms_without_headers(ctx: Context) -> Optional[Diagnosis]:
    """amdgpu-dkms found no headers for the running kernel: the headers of that kernel, or, under WSL 2, no DKMS."""
    said = _lines_matching(ctx, _HEADERS)
    if not said or not _amd_driver_build(ctx):
        return None
    m = _HEADERS.search(said[0].line)
    kernel = (m.group(1) if m and m.group(1) else None) or next((f.value for f in ctx.sheet.of("kernel")), None)
    if ctx.sheet.has("platform", "wsl") or (kernel and _WSL_KERNEL.search(kernel)):
        return _first(_make("wsl", "amdgpu-dkms built under WSL 2, which has no amdgpu module",
                            "WSL 2 runs Microsoft's kernel, and the GPU is reached through /dev/dxg and the Windows "
                            "Adrenalin driver: there is no amdgpu kernel module to build, so the dkms step fails on "
                            "headers that do not exist",
                            "rerun the installer without the kernel part, with the WSL usecase: sudo amdgpu-install -y "
                            "--usecase=wsl,rocm --no-dkms (and sudo apt remove amdgpu-dkms if it is half installed); the "
                            "Windows side needs the Adrenalin driver that release names", [], said))
    k = kernel or "$(uname -r)"
    os_name = next((f.value for f in ctx.sheet.of("os")), "")
    if re.search(r"(?i)rhel|fedora|centos|rocky|alma|oracle|suse|sles", os_name):
        install = f"sudo dnf install kernel-devel-{k} kernel-headers-{k} (SLES: sudo zypper install kernel-default-devel)"
    else:
        install = f"sudo apt install linux-headers-{k} linux-modules-extra-{k}"
    return _make("driver", f"no headers for kernel {k}, so amdgpu-dkms cannot build",
                 f"amdgpu-dkms compiles the amdgpu module against the running kernel's headers "
                 f"(/lib/modules/{k}/build), and they are not installed",
                 f"{install} (ROCm's prerequisites), then rebuild the module: sudo dkms autoinstall, or rerun "
                 "sudo amdgpu-install --usecase=rocm; if no headers package exists for that kernel any more, boot the "
                 "newest kernel (with its headers) first", [], said)


_SEVERAL_CARDS = re.compile(r"(?i)\b(?:two|2|three|3|four|4|both|multiple|several|all)\s*(?:x\s*)?(?:\w+\s){0,4}?"
                            r"(?:GPUs|cards|Radeons?)\b|\b[2-8] ?x ?(?:RX|Radeon|W7\d00|R9700)|\bmulti-?GPU\b|\bmGPU\b|"
                            r"\bboth (?:cards|GPUs)\b")
_ONE_SEEN = re.compile(r"(?i)device_count\(\)\W{0,12}(?:returns?|is|=|gives)\W{0,3}1\b|only (?:one|1) (?:GPU|card|agent|"
                       r"device)|\bsees? (?:only )?(?:one|1) (?:GPU|card)|how (?:do|can) I use (?:both|all)")


@rule("wsl")
def several_gpus_under_wsl(ctx: Context) -> Optional[Diagnosis]:
    """Several Radeon cards under WSL 2, and only one reaches ROCm (or multi-GPU is asked for)."""
    text = _text(ctx)
    if not ctx.sheet.has("platform", "wsl") or _vendor(ctx) != "amd":
        return None
    several = (_gpus_said(text) or 0) >= 2 or bool(_SEVERAL_CARDS.search(text)) or \
        len({f.value for f in ctx.sheet.of("gpu")}) >= 2
    asked = _lines_matching(ctx, _ONE_SEEN)
    if not several or not asked:
        return None
    return _make("wsl", "multi-GPU is not supported under WSL 2 for ROCm",
                 "AMD's Radeon multi-GPU page: Microsoft does not currently support a multi-GPU setup in WSL, so "
                 "ROCm under WSL 2 reaches one GPU whatever is installed",
                 "run multi-GPU work under native Linux (a dual boot with Ubuntu and ROCm's amdgpu-install); under "
                 "WSL keep to one GPU", [], asked)


_STRIX = ("gfx1150", "gfx1151")


def _kernel(ctx: Context) -> Optional[tuple[int, int]]:
    for fact in ctx.sheet.of("kernel"):
        m = re.match(r"(\d+)\.(\d+)", fact.value)
        if m and not _WSL_KERNEL.search(fact.value):
            return int(m.group(1)), int(m.group(2))
    return None


_UNSEEN = re.compile(NOT_DETECTED + r"|is_available\(\)\W{0,12}(?:returns?|is|=|gives)?\W{0,3}False|^\W*False\s*$|"
                     r"only (?:the )?CPU agent|No HIP GPUs|hipErrorNoDevice|no GPU agent")


@rule("driver")
def ryzen_apu_on_an_older_kernel(ctx: Context) -> Optional[Diagnosis]:
    """A Ryzen AI APU (gfx1150 / gfx1151) under Linux on a kernel before 6.14, and ROCm does not use it."""
    if ctx.sheet.is_windows or ctx.sheet.has("platform", "wsl"):
        return None
    apu = next((a for a in ctx.sheet.machine_archs if a in _STRIX), None)
    kernel = _kernel(ctx)
    if apu is None or kernel is None or kernel >= (6, 14):
        return None
    unseen = _lines_matching(ctx, _UNSEEN)
    if not unseen:
        return None
    ubuntu = next((f.detail for f in ctx.sheet.of("os") if f.value == "ubuntu"), "")
    how = ("sudo apt-get install linux-oem-24.04c, reboot, and uname -r must print a 6.14 kernel"
           if ubuntu.startswith("24.04") or not ubuntu else
           "a 6.14 or newer kernel (Ubuntu 24.04's OEM kernel: sudo apt-get install linux-oem-24.04c)")
    return _first(_make("driver", f"the {apu} APU needs a 6.14 kernel", 
                        f"this Ryzen AI APU ({apu}) runs kernel {kernel[0]}.{kernel[1]}; AMD's Ryzen install page "
                        f"requires the 6.14 OEM kernel for PyTorch on it, and the older amdgpu driver does not give ROCm "
                        "a working GPU agent", how + "; then rerun rocminfo (a gfx agent) before torch", [], unseen))


# (the compilers, hipcc / hipconfig / amdclang, are libraries_missing.py's reading, which weighs a build's needs)
_TOOLS = r"(rocminfo|rocm-smi|amd-smi|rocm_agent_enumerator|rocprof\w*)"
# the shell's own words for a command it cannot find (not a build naming a path it looked in: "/usr/bin/hipcc not found")
_NOT_FOUND = re.compile(r"(?i)Command '" + _TOOLS + r"' not found|(?<![/\w-])" + _TOOLS + r": command not found|"
                        r"command not found: " + _TOOLS + r"\b")


@rule("rocm-libs-missing")
def rocm_tools_not_on_path(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm tool "not found" after ROCm was installed: /opt/rocm/bin is not on PATH."""
    said = _lines_matching(ctx, _NOT_FOUND)
    if not said or ctx.sheet.is_windows or ctx.sheet.has("layout", "therock"):
        return None
    tool = next(g for g in _NOT_FOUND.search(said[0].line).groups() if g)
    if not re.search(r"(?i)\binstall(?:ed|ing)?\b.{0,40}\brocm\b|\brocm\b.{0,40}\binstall|amdgpu-install|/opt/rocm",
                     _text(ctx)):
        return None
    versions = [f.value for f in ctx.sheet.of("rocm") if re.fullmatch(r"\d+\.\d+(?:\.\d+)?", f.value)]
    folder = f"/opt/rocm-{versions[0]}" if versions and versions[0].count(".") == 2 else "/opt/rocm"
    return _make("rocm-libs-missing", f"{tool} is not on PATH",
                 f"ROCm installs its tools under {folder}/bin, which is not on the default PATH (the distribution's "
                 f"package hint to apt install {tool} would add another, older copy)",
                 f"export PATH=$PATH:/opt/rocm/bin (add it to ~/.bashrc; ROCm's post-install steps), and for the "
                 "libraries: echo -e '/opt/rocm/lib\\n/opt/rocm/lib64' | sudo tee /etc/ld.so.conf.d/rocm.conf && "
                 f"sudo ldconfig; ls {folder}/bin/{tool} must exist, else install it: sudo apt install rocm", [], said)


_ALTERNATIVES = re.compile(r"(?i)/etc/alternatives/rocm|update-alternatives|/opt/rocm\s*->|multi-?version install")
# the programs said to use different releases
_MIXED = re.compile(r"(?i)\b(?:different|mixed?|wrong|another|two) (?:ROCm )?(?:versions?|releases?)\b|\bpick(?:s|ed)? up\b|"
                    r"\blinks?\b.{0,40}\bbut\b|\bmismatch\w*")


@rule("rocm-libs-missing")
def several_rocm_releases(ctx: Context) -> Optional[Diagnosis]:
    """Several ROCm releases installed side by side, and the programs pick up different ones."""
    text = _text(ctx)
    versions = sorted(set(re.findall(r"(?i)\brocm[-_ ]?(\d+\.\d+\.\d+)\b", text)))
    said = _lines_matching(ctx, _ALTERNATIVES)
    if len(versions) < 2 or not said or ctx.sheet.is_windows or not _MIXED.search(text):
        return None
    newest = versions[-1]
    return _make("rocm-libs-missing", f"ROCm {', '.join(versions)} installed side by side",
                 "with several ROCm releases installed, /opt/rocm is a link chosen through update-alternatives, and "
                 "tools, libraries and builds that use /opt/rocm get that one while others name /opt/rocm-<version>",
                 f"choose the release: sudo update-alternatives --config rocm (pick /opt/rocm-{newest}), check with "
                 f"ls -l /opt/rocm /etc/alternatives/rocm; export ROCM_PATH=/opt/rocm-{newest} and put "
                 f"/opt/rocm-{newest}/bin first on PATH for builds; or remove the release you do not use "
                 "(ROCm's multi-version install page)", [], said)


_DISTRO_RUNTIME = re.compile(r"(libhsa-runtime64\.so\.1|libhsakmt\.so\.1)\S*\s.*=>\s*(/(?:usr/)?lib/x86_64-linux-gnu/\S+)")


@rule("rocm-libs-missing")
def distribution_runtime_first(ctx: Context) -> Optional[Diagnosis]:
    """The distribution's own ROCm runtime (Ubuntu's libhsa-runtime64-1 / libhsakmt1) resolves before AMD's."""
    said = [e for e in _lines_matching(ctx, _DISTRO_RUNTIME)]
    if not said or not re.search(r"(?i)/opt/rocm|repo\.radeon\.com|amdgpu-install|\bROCm [67]\.", _text(ctx)):
        return None
    m = _DISTRO_RUNTIME.search(said[0].line)
    return _first(_make("rocm-libs-missing", "the distribution's ROCm runtime is loaded instead of AMD's",
                        f"{m.group(1)} resolves to {m.group(2)}, the distribution's own package (Ubuntu 24.04 ships "
                        "ROCm 5.7's runtime there), which the loader finds before /opt/rocm/lib",
                        "remove the distribution's copies: sudo apt remove libhsa-runtime64-1 libhsakmt1 (and rocminfo "
                        "if it came from Ubuntu), then sudo ldconfig; ldconfig -p | grep hsa-runtime must point into "
                        "/opt/rocm/lib", [], said))


_ADRENALIN = re.compile(r"(?i)\bAdrenalin(?: Edition)?\s*(?:driver\s*)?v?(\d{2})\.(\d{1,2})(?:\.(\d+))?")
_WINDOWS_ROCM_TORCH = re.compile(r"(?i)torch[\w ]{0,30}\+rocm|PyTorch on Windows|rocm[\w ]{0,20}Windows wheels?")


@rule("driver")
def windows_pytorch_on_an_older_adrenalin(ctx: Context) -> Optional[Diagnosis]:
    """AMD's PyTorch wheels for Windows on an Adrenalin driver older than 25.9, and no GPU for torch."""
    if not ctx.sheet.is_windows and not re.search(r"(?i)\bwindows\b", _text(ctx)):
        return None
    text = _text(ctx)
    m = _ADRENALIN.search(text)
    if not m or not _WINDOWS_ROCM_TORCH.search(text):
        return None
    version = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if version >= (25, 9, 2):
        return None
    unseen = _lines_matching(ctx, _UNSEEN) + ctx.no_gpu()
    if not unseen:
        return None
    said = ".".join(g for g in m.groups() if g)
    return _make("driver", f"Adrenalin {said} is older than PyTorch on Windows needs",
                 f"AMD's ROCm PyTorch wheels for Windows run on the Adrenalin driver their release names (25.9.2 or "
                 f"newer for the 6.4.4 preview); Adrenalin {said} does not give them the GPU",
                 "install the newest AMD Software: Adrenalin Edition (25.9.2 or newer; the driver the PyTorch on "
                 "Windows release notes name), reboot, then python -c \"import torch; print(torch.cuda.is_available())\"",
                 [], unseen)
