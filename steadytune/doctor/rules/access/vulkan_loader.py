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


# GPUs older than any Vulkan driver of their vendor, by the names a paste gives them: NVIDIA's Vulkan driver starts at
# Kepler (GeForce 600/700 Kepler parts; Fermi GF1xx and the Tesla generation before it have none), AMD's at GCN
# (TeraScale Radeon HD 2000-6000 have none), Intel's at Skylake on Windows and Ivy Bridge in Mesa (Sandy Bridge's HD Graphics has none).
# Sources: NVIDIA's Vulkan driver support page (Kepler and newer); AMD's Vulkan support notes (GCN and newer); Intel's
# Windows Vulkan driver notes (6th generation Core and newer); SaschaWillems/Vulkan issue 188 (NVS 5400M, Fermi).
_NO_VULKAN = (
    (re.compile(r"(?i)\bNVS ?(?:4200M|5200M|5400M|310|315|300)\b|\bQuadro (?:[45]00|[246]000|5000|[1-5]000M|5010M)\b|"
                r"\b(?:Tesla )?[CM]20(?:50|70|75|90)\b|\bGTX ?(?:4[5-8]0|5[5-9]0|4[6-8]0M|5[6-8]0M)\b|"
                r"\bGT ?(?:4[1-4]0|5[1-4][05]|6[12]0|5[2-5]5M|4[2-4]5M)\b|\bGeForce (?:405|410|510|605)\b|\bfermi\b"),
     "Fermi", "NVIDIA's Vulkan driver starts at Kepler (compute capability 3.0: GeForce GTX 600/700 Kepler parts)"),
    (re.compile(r"(?i)\b(?:GeForce )?(?:8[4-8]00|9[4-8]00) ?(?:GT|GTS|GTX|GS|M|GX2)\b|\bGTX ?2[6-9]5?\b|\bGT ?2[234]0\b|"
                r"\bGeForce 210\b"),
     "Tesla-generation (GeForce 8/9/200)", "NVIDIA's Vulkan driver starts at Kepler (GeForce GTX 600/700 Kepler parts)"),
    (re.compile(r"(?i)\bRadeon HD ?[2-6]\d{3}M?\b|\bTeraScale\b"),
     "TeraScale", "AMD's Vulkan drivers (and Mesa's RADV) start at GCN (Radeon HD 7000 GCN parts, R7/R9 200 and newer)"),
    (re.compile(r"(?i)\bIntel(?:\(R\))? HD Graphics (?:2000|3000)\b|\bSandy ?Bridge\b"),
     "Sandy Bridge", "Intel's Vulkan drivers start at Skylake on Windows, and Mesa's (ANV, hasvk) at Ivy Bridge"),
)


# Intel's Ivy Bridge, Haswell and Broadwell graphics (HD Graphics 2500/4000, 4200-5000 with Iris 5100 / Iris Pro 5200,
# 5300-6000 with Iris 6100 / Iris Pro 6200): no Windows Vulkan driver (Intel's start at Skylake, 6th generation Core),
# while Mesa serves them on Linux (ANV from Broadwell, hasvk for Ivy Bridge and Haswell) - so only where the paste is
# not from Linux (r18d: k4yt3x/video2x#531, an HD Graphics 5500: "has no Vulkan support", a Vulkan GPU needed;
# checked v18b: hwupgrade.it, Feb 2017, on Intel's Windows Vulkan driver: Skylake and Kaby Lake only, Broadwell and
# Haswell left out - Ivy Bridge, older still, by the same start at Skylake)
_NO_WINDOWS_VULKAN = re.compile(r"(?i)\bIntel(?:\(R\))? (?:HD Graphics (?:2500|4000|4[246]00|5000|5[356]00|6000|P4[67]00|"
                                r"P5700)|Iris(?:\(R\))? (?:Pro )?(?:Graphics )?(?:5100|5200|6100|6200))\b")


def gpu_without_vulkan(text: str) -> Optional[tuple[str, str, str]]:
    """The GPU the paste names that no Vulkan driver serves: (its name as written, its generation, the floor)."""
    for pattern, generation, floor in _NO_VULKAN:
        m = pattern.search(text)
        if m:
            return m.group(0), generation, floor
    m = _NO_WINDOWS_VULKAN.search(text)
    if m and not _LINUX.search(text) and not _MAC.search(text):
        return (m.group(0), "Ivy Bridge / Haswell / Broadwell", "Intel's Windows Vulkan drivers start at Skylake (6th "
                "generation Core: HD / UHD Graphics 5xx-6xx, Iris Xe, Arc); Mesa's Linux drivers are the only Vulkan for it")
    return None


@rule("gpu-unsupported")
def vulkan_gpu_below_floor(ctx: Context) -> Optional[Diagnosis]:
    """Vulkan refusing the instance (or finding no device) on a GPU of a generation no Vulkan driver serves: no driver
    reinstall can help."""
    lines = _lines_matching(ctx, _NO_INSTANCE) or _lines_matching(ctx, _NO_VULKAN_DEVICE)
    below = gpu_without_vulkan(_text(ctx))
    if not lines or below is None:
        return None
    name, generation, floor = below
    gpu = name if generation.lower() not in name.lower() else "the GPU"
    return _make("gpu-unsupported", f"{gpu} has no Vulkan driver ({generation})",
                 f"{gpu} is a {generation} GPU; {floor}, so the Vulkan loader finds no driver for it "
                 "(VK_ERROR_INCOMPATIBLE_DRIVER), whatever driver is installed",
                 f"{gpu} ({generation}) cannot run Vulkan: run the program on a Vulkan-capable GPU (NVIDIA Kepler or "
                 "newer, AMD GCN or newer, Intel Skylake or newer), or use the program's OpenGL (or CPU) path where it "
                 "has one; reinstalling the driver will not add Vulkan", [ctx.line_fact(lines[0])], lines[:1])


# the loader's device list empty ("failed to find GPUs with Vulkan support", vkEnumeratePhysicalDevices found 0)
_NO_VULKAN_DEVICE = re.compile(r"(?i)failed to find GPUs with Vulkan support|no Vulkan (?:physical )?devices? "
                               r"(?:found|available)|vkEnumeratePhysicalDevices\b.{0,40}\b(?:0|no)\b")


@rule("driver")
def vulkan_instance_refused(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _NO_INSTANCE)
    if not lines or ctx.sheet.has("platform", "wsl"):
        return None
    if gpu_without_vulkan(_text(ctx)) is not None:
        return None   # a GPU older than any Vulkan driver: vulkan_gpu_below_floor's reading
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
