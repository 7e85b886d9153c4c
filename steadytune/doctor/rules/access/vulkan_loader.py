"""A Vulkan program that cannot create its Vulkan instance: ncnn's "vkCreateInstance failed -9" (the ncnn upscalers,
Upscayl, chaiNNer's NCNN nodes), vulkan-hpp's "vk::createInstance: ErrorIncompatibleDriver", the loader's
VK_ERROR_INCOMPATIBLE_DRIVER (-9) or VK_ERROR_INITIALIZATION_FAILED (-3) at instance creation. The Vulkan loader found
no usable driver (ICD) for the GPU: the GPU driver's Vulkan part is missing or broken, which the GPU's own driver,
reinstalled, brings back. The platform picks the driver: the vendor's on Windows, Mesa's or NVIDIA's ICD on Linux,
MoltenVK on macOS. Under WSL 2 the wsl reading answers (no hardware Vulkan there at all).

Facts: the VkResult numbers are the Vulkan specification's (VK_ERROR_INITIALIZATION_FAILED = -3,
VK_ERROR_INCOMPATIBLE_DRIVER = -9); ICD manifests live in /usr/share/vulkan/icd.d (Linux); the NVIDIA Container
Toolkit mounts the Vulkan ICD only for the graphics capability (NVIDIA_DRIVER_CAPABILITIES).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (Context, Diagnosis, _CONTAINED, _lines_matching, _make, _text, _vendor,
                                          on_windows, rule)

# instance creation refused: ncnn's words with the VkResult, vulkan-hpp's exception, the result's name beside it
_NO_INSTANCE = re.compile(r"(?i)\bvkCreateInstance failed\W{0,3}-(?:9|3)\b|\bcreateInstance\W{0,3}"
                          r"(?:ErrorIncompatibleDriver|ErrorInitializationFailed)\b|\bvkCreateInstance\b.{0,80}"
                          r"\bVK_ERROR_(?:INCOMPATIBLE_DRIVER|INITIALIZATION_FAILED)\b|\bVK_ERROR_INCOMPATIBLE_DRIVER\b"
                          r".{0,80}\b(?:instance|vkCreateInstance)\b|\b(?:failed to|cannot|could not|unable to) create "
                          r"(?:a )?Vulkan instance\b")
_MAC = re.compile(r"(?i)\bmacOS\b|\bMac ?OS\b|\bDarwin\b|\bApple (?:M\d|Silicon)\b|\bM[1-4] (?:Pro|Max|Ultra)\b|"
                  r"\bMoltenVK\b|\.dmg\b")
_LINUX = re.compile(r"(?i)\bLinux\b|\bUbuntu\b|\bDebian\b|\bFedora\b|\bArch\b|\bMint\b|\bFlatpak\b|\bAppImage\b|/usr/")
# programs of Vulkan compute the paste may name instead of a tool doctor knows
_VULKAN_PROGRAM = re.compile(r"(?i)\b(?:Upscayl|chaiNNer|video2x|(?:waifu2x|realesrgan|realcugan|realsr|srmd|rife)"
                             r"(?:-ncnn-vulkan)?)\b")
_INTEL_GPU = re.compile(r"(?i)\bIntel(?:\(R\))? (?:Arc|Iris|UHD|HD Graphics|Xe)\b")


@rule("driver")
def vulkan_instance_refused(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _NO_INSTANCE)
    if not lines or ctx.sheet.has("platform", "wsl"):
        return None
    text = _text(ctx)
    if re.search(r"(?i)\bWSL ?2?\b", text):
        return None   # WSL's own reading: no hardware Vulkan driver there
    vendor = _vendor(ctx) or ("nvidia" if re.search(r"(?i)\b(?:RTX|GTX|GeForce|Quadro|NVIDIA)\b", text) else
                              "amd" if re.search(r"(?i)\bRadeon\b|\bRX ?\d{3,4}\b", text) else
                              "intel" if _INTEL_GPU.search(text) else None)
    named = _VULKAN_PROGRAM.search(text)
    tool = ctx.tool(lines[:1]) or (named.group(0) if named else "the program")
    windows = on_windows(ctx, text)
    cause = (f"{tool} asks the Vulkan loader for an instance and the loader finds no driver (ICD) it can use for the "
             "GPU: -9 is VK_ERROR_INCOMPATIBLE_DRIVER, -3 VK_ERROR_INITIALIZATION_FAILED; the GPU driver's Vulkan "
             "part is missing, broken or not registered")
    if _MAC.search(text) and not windows:
        fix = (f"macOS has no native Vulkan driver: {tool} needs MoltenVK (the Vulkan SDK for macOS, or the build of "
               f"{tool} that bundles it); on an Intel Mac with an old macOS, update macOS")
    elif _LINUX.search(text) and not windows:
        icd = {"nvidia": "the NVIDIA driver's Vulkan ICD (its full driver package, e.g. Ubuntu's nvidia-driver-<branch> "
                         "with libnvidia-gl-<branch>; a headless or compute-only install has none)",
               "amd": "Mesa's RADV driver (sudo apt install mesa-vulkan-drivers; Fedora: mesa-vulkan-drivers)",
               "intel": "Mesa's ANV driver (sudo apt install mesa-vulkan-drivers)"}.get(
            vendor, "the GPU's Vulkan driver (NVIDIA: the full driver with libnvidia-gl-<branch>; AMD / Intel: "
                    "mesa-vulkan-drivers)")
        fix = (f"install or reinstall {icd}; vulkaninfo --summary (vulkan-tools) must list the GPU, and /usr/share/"
               "vulkan/icd.d must hold its manifest; unset VK_ICD_FILENAMES / VK_DRIVER_FILES if they point elsewhere"
               + ("; in a container add graphics to NVIDIA_DRIVER_CAPABILITIES (=all) so the ICD is mounted"
                  if _CONTAINED.search(text) else ""))
    else:
        driver = {"nvidia": "the NVIDIA driver (a clean install of the current Game Ready / Studio driver from "
                            "nvidia.com or GeForce Experience / the NVIDIA App)",
                  "amd": "the AMD driver (AMD Software: Adrenalin Edition, a clean install)",
                  "intel": "Intel's graphics driver (from intel.com, not the one Windows Update chose)"}.get(
            vendor, "the GPU's own driver from its vendor (NVIDIA, AMD or Intel), a clean install")
        fix = (f"reinstall {driver}: its installer registers the Vulkan driver the loader needs; on a laptop with two "
               "GPUs update both drivers; then restart and run vulkaninfo --summary (from the Vulkan SDK) to see the "
               f"GPU listed before starting {tool} again")
    return _make("driver", "the Vulkan loader finds no usable driver for the GPU", cause, fix,
                 [ctx.line_fact(lines[0])], lines[:1])
