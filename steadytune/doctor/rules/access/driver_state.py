"""The NVIDIA driver loaded and of the right version, but in a broken state: Ollama on Linux that finds no usable
NVIDIA GPU and quietly runs on the CPU, with no error of another kind. Ollama's own GPU docs ("Linux Suspend Resume")
name the cause: after a suspend / resume cycle the NVIDIA UVM module is left broken, GPU discovery fails and Ollama
falls back to the CPU; reloading nvidia_uvm (or a reboot) restores it. (A suspend said in words is read in driver.py.)
Also: a GPU server's service started at boot before the GPU was ready, and LM Studio's CUDA runtime that cannot start
CUDA after a driver update in the background (its "GPU survey unsuccessful")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor, on_windows, rule

_NVIDIA_SAID = re.compile(r"(?i)\bnvi?dia\b|\bnvi?dia-smi\b|\bGeForce\b|\b[GR]TX ?\d{3,4}|\bCUDA\b|\bTesla\b")
# the GPU left unused although Ollama runs: nvidia-smi idle, the CPU doing the work, a model not on the GPU
_GPU_IDLE = re.compile(r"(?i)\bnvi?dia-smi\b.{0,40}\bno\b.{0,20}\busage\b|\bno (?:actual )?(?:GPU )?(?:usage|utili[sz]ation)\b|"
                       r"\b(?:not|n't) (?:actually )?(?:using|use|loading|loaded) (?:\w+ )?(?:in|on|into|to)? ?(?:the )?GPU\b|"
                       r"\bruns? (?:only )?(?:on|in) (?:the )?CPU\b|\b100% CPU\b|\blibrary=cpu\b|\bfalls? back to (?:the )?CPU\b")
_ALREADY_RELOADED = re.compile(r"(?i)nvidia_uvm|nvidia-uvm")
_UPGRADED = re.compile(r"(?i)\b(?:after|since) (?:upgrad\w+|updat\w+)|\bupgrad\w+ to v?\d+\.\d+|\bv?\d+\.\d+(?:\.\d+)? "
                       r"(?:works?|worked)\b")


@rule("driver")
def nvidia_uvm_after_sleep(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    idle = _lines_matching(ctx, _GPU_IDLE.pattern)
    if not idle or not re.search(r"(?i)\bollama\b", text) or not _NVIDIA_SAID.search(text) or _vendor(ctx) == "amd":
        return None
    if on_windows(ctx, text) or _ALREADY_RELOADED.search(text) or _UPGRADED.search(text) or ctx.errors:
        return None
    return _make("driver", "Ollama finds no usable NVIDIA GPU and runs on the CPU",
                 "with the driver installed and nothing else failing, Ollama's GPU discovery fails when the NVIDIA "
                 "unified-memory module (nvidia_uvm) is left broken, which a suspend / resume (or hibernation) of "
                 "the host does; Ollama then falls back to the CPU without an error",
                 "reload the module on the host: sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (or reboot), then "
                 "restart Ollama (sudo systemctl restart ollama, or docker restart <container>); its server log's "
                 "'inference compute' line should then say library=cuda. If it recurs after each sleep, keep the "
                 "GPU's memory across suspend (options nvidia NVreg_PreserveVideoMemoryAllocations=1 and the "
                 "nvidia-suspend / nvidia-resume services)", [], idle[:2], confirmed=False)


# a server started at boot that finds no GPU then, while a restart by hand finds it: said as "only CPU after reboot",
# or as the service "started before the GPUs" are initialised
_AFTER_BOOT = re.compile(r"(?i)\b(?:after|since|on|at|during|every) (?:a |each |the |every )?(?:system |machine |pc |computer )?"
                         r"(?:re-?boot(?:ing|s)?|boot(?:ing|-?up)?|start-?up|power[- ]?on)\b|\bservice\b.{0,30}\bstart\w* "
                         r"(?:faster|earlier|sooner|before)\b.{0,30}\b(?:GPU|driver|nvidia|amdgpu)")
_CPU_ONLY = re.compile(r"(?i)\b(?:only|just) (?:the )?CPU\b|\bCPU (?:is )?(?:only )?used\b|\bruns? (?:only )?on (?:the )?CPU\b|"
                       r"\bno GPU\b|\bGPU (?:is )?not (?:used|detected|found)|library=cpu|\bfalls? back to (?:the )?CPU\b|"
                       r"\bstarted faster than\b")


@rule("driver")
def server_started_before_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Ollama's systemd service (enabled at boot) can start before the GPU driver has brought its devices up: its GPU
    discovery runs once at start, finds none, and it serves on the CPU until restarted. The systemd remedy is to order
    or delay the unit's start (a drop-in; systemd.service(5) ExecStartPre)."""
    text = _text(ctx)
    if not re.search(r"(?i)\bollama\b", text) or on_windows(ctx, text) or ctx.errors:
        return None
    boot = _lines_matching(ctx, _AFTER_BOOT.pattern)
    if not boot or not _CPU_ONLY.search(text) or re.search(r"(?i)suspend|resume|sleep|hibernat", text):
        return None
    waits = ("After=nvidia-persistenced.service" if _NVIDIA_SAID.search(text) else
             "After=systemd-modules-load.service")
    return _make("driver", "Ollama's service starts before the GPU is ready and stays on the CPU",
                 "the ollama service is started at boot before the GPU driver has initialised the devices; its GPU "
                 "discovery runs once at start, finds no GPU, and it serves on the CPU until it is restarted (a "
                 "manual sudo systemctl restart ollama finds the GPU)",
                 "delay the service's start with a drop-in: sudo systemctl edit ollama, add [Service] "
                 f"ExecStartPre=/bin/sleep 10 (or [Unit] {waits}), save, sudo systemctl daemon-reload; reboot and "
                 "check its log (journalctl -u ollama -b | grep 'inference compute') names the GPU", [], boot[:2],
                 confirmed=False)


# LM Studio's own words when its runtime finds no GPU it can use ("GPU survey unsuccessful"), while another of its
# engines (Vulkan) still reaches the GPU, or it worked before: the CUDA user-space driver no longer matches the loaded
# kernel module, which a driver update in the background (unattended-upgrades) leaves until the next boot
_SURVEY_FAILED = re.compile(r"(?i)GPU survey (?:unsuccessful|failed)")
_WORKED_BEFORE = re.compile(r"(?i)\bno longer\b|\bnot? (?:a )?problem until\b|\bused to\b|\bworked (?:before|until|fine)\b|"
                            r"\buntil recently\b|\banymore\b|\bsuddenly\b|\bonly vulkan\b|\bvulkan (?:is )?(?:still )?works?")


@rule("driver")
def cuda_runtime_survey_failed(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _SURVEY_FAILED.pattern)
    text = _text(ctx)
    if not said or _vendor(ctx) == "amd" or not (_NVIDIA_SAID.search(text) or _WORKED_BEFORE.search(text)):
        return None
    return _make("driver", "LM Studio's CUDA runtime finds no usable GPU",
                 "the runtime's GPU survey could not start CUDA although the GPU works for Vulkan (or worked before): "
                 "the NVIDIA driver was updated (often in the background, by unattended-upgrades) and the loaded "
                 "kernel module no longer matches the new user-space libraries until the machine reboots",
                 "reboot; then check nvidia-smi works (a 'Driver/library version mismatch' there is the same fault: "
                 "reinstall one driver version, sudo apt install --reinstall nvidia-driver-<branch>, and reboot), "
                 "and in LM Studio rerun the runtime's compatibility check (Runtime / Manage versions: Rerun "
                 "compatibility check) so the CUDA engine is offered again", [], said[:2], confirmed=False)


# HIP's own words for hipErrorNoDevice ("no ROCm-capable device is detected", hipGetErrorString), from a HIP program
# itself rather than a framework on top of it
_HIP_NO_DEVICE = re.compile(r"(?i)no ROCm-capable device (?:is )?detected|\bhipErrorNoDevice\b")
_FRAMEWORK = re.compile(r"(?i)\bimport torch\b|\btorch\b|\bpytorch\b|\btensorflow\b|\bjax\b|\bollama\b|\bllama\.cpp\b|"
                        r"\bcomfyui\b|\bvllm\b")


@rule("driver")
def hip_finds_no_device_after_install(ctx: Context) -> Optional[Diagnosis]:
    """A HIP program (ROCm's samples, hipInfo, a user's own) finding no device on a card ROCm supports, no framework,
    container or override in between: on a machine where ROCm was just installed the new amdgpu module and the user's
    render / video groups are not in force until a reboot, the usual state of a first report."""
    said = _lines_matching(ctx, _HIP_NO_DEVICE)
    text = _text(ctx)
    if not said or _FRAMEWORK.search(text) or _vendor(ctx) == "nvidia" or \
            re.search(r"(?i)\bdocker\b|\bpodman\b|\bcontainer\b|\bwsl\b|HSA_OVERRIDE_GFX_VERSION|_VISIBLE_DEVICES", text):
        return None
    if any(e.family not in (None, "driver", "device-access", "visibility") and not _HIP_NO_DEVICE.search(e.line)
           for e in ctx.errors):
        return None
    if ctx.sheet.is_windows or re.search(r"(?i)\bhipInfo\.exe\b|[A-Z]:\\Program Files\\AMD\\ROCm", text):
        # Windows has no amdgpu module, /dev/kfd or groups: the HIP runtime comes with the Adrenalin driver
        return _make("driver", "HIP on Windows finds no GPU: the Adrenalin driver or the HIP SDK",
                     "on Windows the HIP runtime reaches the GPU through the Adrenalin (or PRO) display driver: no GPU "
                     "means that driver is missing, older than the HIP SDK, or the GPU is not one the HIP SDK supports",
                     "install the current Adrenalin driver (or the one the HIP SDK / AMD's PyTorch wheels name), "
                     "then a HIP SDK release whose Windows support table lists the GPU, and reboot (driver first, "
                     "SDK second); hipInfo.exe must then list the card; an integrated GPU beside it: "
                     "HIP_VISIBLE_DEVICES picks the discrete one", [], said[:2], confirmed=False)
    return _make("driver", "HIP finds no GPU: the new driver or groups not yet in force",
                 "the HIP runtime sees no GPU through /dev/kfd; right after installing ROCm (amdgpu-dkms, the "
                 "render / video groups) that is the state until the machine restarts: the old amdgpu module is still "
                 "loaded and the login session has the old groups",
                 "reboot once after installing ROCm (a log-out is not enough for a new amdgpu module); then rocminfo "
                 "| grep gfx must list the card; if it still does not: groups must show render and video (sudo "
                 "usermod -aG render,video $USER), ls -l /dev/kfd, and sudo dmesg | grep -i -e amdgpu -e kfd for the "
                 "driver's own error", [], said[:2], confirmed=False)
