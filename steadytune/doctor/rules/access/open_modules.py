"""NVIDIA's open kernel modules and what they ask of the card: the opt-in the early releases required for GeForce and
workstation GPUs, and the GSP firmware they always run on.

Sources: NVIDIA/open-gpu-kernel-modules README (R515: "production ready for data center GPUs", GeForce and Workstation
support alpha quality and enabled with the NVreg_OpenRmEnableUnsupportedGpus=1 module parameter, beta from 545.23.06's
release notes; the open modules the default from the 560 series, NVIDIA's driver installation guide); the driver prints "Open nvidia.ko is only ready for use on Data Center GPUs" and names that parameter); the NVIDIA Linux
driver README, chapter "GSP Firmware" (NVreg_EnableGpuFirmware=0 turns GSP off for the proprietary kernel modules only:
the open kernel modules require it) and the driver installation guide (Blackwell GPUs are supported by the open kernel
modules only)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text


# NVRM's refusal of a card the early open module did not support by default (dmesg may wrap it over several lines)
_ONLY_DATA_CENTER = re.compile(r"(?i)Open nvidia\.ko is only ready for use on Data Center GPUs|"
                               r"OpenRmEnableUnsupportedGpus")
_MODPROBE_FILE = "/etc/modprobe.d/nvidia-open.conf"


@rule("driver")
def open_module_opt_in(ctx: Context) -> Optional[Diagnosis]:
    """The open module of R515-R555 on a GeForce / workstation card: it stops at RmInitAdapter unless opted in."""
    said = _lines_matching(ctx, _ONLY_DATA_CENTER)
    if not said:
        return None
    # the parameter already set and still refused is another problem (then the card itself is the question)
    if re.search(r"(?i)NVreg_OpenRmEnableUnsupportedGpus\s*=\s*1", _text(ctx)):
        return None
    failed = _lines_matching(ctx, r"(?i)RmInitAdapter failed|rm_init_adapter failed|No devices were found")
    return _first(_make(
        "driver", "the open NVIDIA kernel module refuses a GeForce / workstation GPU until opted in",
        "the open nvidia.ko of drivers 515-555 drives data-center GPUs by default; on a GeForce or workstation card it "
        "stops (RmInitAdapter fails, no device) unless its OpenRmEnableUnsupportedGpus parameter is set",
        f"set the module parameter NVreg_OpenRmEnableUnsupportedGpus=1: echo 'options nvidia "
        f"NVreg_OpenRmEnableUnsupportedGpus=1' | sudo tee {_MODPROBE_FILE}, then sudo update-initramfs -u (dracut -f "
        "on Fedora) and reboot; or install the proprietary kernel modules of the same branch (or a driver of the 560 "
        "series or newer, where the open modules are NVIDIA's default for Turing and newer cards)",
        [], said + failed))


# GSP turned off by the user's own modprobe option, or asked how to turn it off
_GSP_OFF = re.compile(r"(?i)NVreg_EnableGpuFirmware\s*=\s*0|\b(?:disabl\w+|turn\w* off|switch\w* off|deactivat\w+)\b"
                      r".{0,20}\bGSP\b|\bGSP\b.{0,30}\b(?:disabl\w+|turn\w* off|still (?:on|enabled|active|loaded))")
# what says the open modules are the ones loaded: their name, or a card only they drive (Blackwell: RTX 50, B100/B200,
# RTX PRO 6000 Blackwell, GB200)
_OPEN_IN_USE = re.compile(r"(?i)\bopen[- ](?:gpu[- ])?kernel(?:[- ]modules?)?\b|nvidia-(?:driver-\d+-)?open\b|"
                          r"kernel-open\b|\bopen nvidia\.ko\b|\bRTX ?50[5-9]0(?: ?Ti)?\b|\bB[12]00\b|\bGB[12]0\d\b|"
                          r"\bBlackwell\b|\bsm_1[02]0\b")


@rule("driver")
def gsp_on_open_modules(ctx: Context) -> Optional[Diagnosis]:
    """GSP asked off (NVreg_EnableGpuFirmware=0, or "how do I disable GSP") where the open modules drive the card."""
    asked = _lines_matching(ctx, _GSP_OFF)
    text = _text(ctx)
    if not asked or not _OPEN_IN_USE.search(text):
        return None
    conf = re.search(r"/etc/modprobe\.d/[\w.-]+\.conf", text)
    blackwell = re.search(r"(?i)\bRTX ?50[5-9]0(?: ?Ti)?\b|\bB[12]00\b|\bGB[12]0\d\b|\bBlackwell\b|\bsm_1[02]0\b", text)
    return _first(_make(
        "driver", "the open NVIDIA kernel modules always run on the GSP firmware",
        "NVreg_EnableGpuFirmware=0 is read by the proprietary kernel modules only; the open kernel modules run the "
        "driver's core on the GPU System Processor (GSP) and cannot work without its firmware, so the option is "
        "ignored and nvidia-smi -q still shows a GSP Firmware Version",
        "GSP cannot be disabled while the open kernel modules are loaded; remove the ignored option again ("
        + (f"sudo rm {conf.group(0)}" if conf else "the /etc/modprobe.d file that sets NVreg_EnableGpuFirmware=0") + ")"
        + ("; this card (" + blackwell.group(0) + ") is driven by the open modules only, so GSP stays on for it"
           if blackwell else
           "; to run without GSP, install the proprietary kernel modules of the same branch (the package without "
           "-open, or the .run installer's -m=kernel) and keep NVreg_EnableGpuFirmware=0"),
        [], asked))
