"""The NVIDIA driver loaded and of the right version, but in a broken state: Ollama on Linux that finds no usable
NVIDIA GPU and quietly runs on the CPU, with no error of another kind. Ollama's own GPU docs ("Linux Suspend Resume")
name the cause: after a suspend / resume cycle the NVIDIA UVM module is left broken, GPU discovery fails and Ollama
falls back to the CPU; reloading nvidia_uvm (or a reboot) restores it. (A suspend said in words is read in driver.py.)"""

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
