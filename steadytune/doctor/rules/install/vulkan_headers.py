"""A build that looks for Vulkan with CMake (llama.cpp's and whisper.cpp's GGML_VULKAN, llama-cpp-python's wheel
build, stable-diffusion.cpp) and does not find it, on a machine whose GPU runs Vulkan programs (vulkaninfo, vkcube):
running Vulkan needs only the loader and the driver, building against it needs the loader's development files and
headers (find_package(Vulkan) looks for vulkan/vulkan.h and the libvulkan.so link), and ggml's shaders need the glslc
compiler. Each distribution ships them in its own packages.

Sources: CMake's FindVulkan module (Vulkan_INCLUDE_DIR, Vulkan_LIBRARY, the glslc component); llama.cpp's
docs/build.md, Vulkan section (Ubuntu: libvulkan-dev and glslc, or the LunarG SDK; Windows: the Vulkan SDK);
abetlen/llama-cpp-python#1927 (Fedora: vulkan-devel); Fedora's vulkan-loader-devel, vulkan-headers and glslc packages;
Arch's vulkan-headers, vulkan-icd-loader and shaderc; openSUSE's vulkan-devel and shaderc."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text

# CMake's own words, and the user's ("cmake can't find it", "Vulkan not found when building")
_NOT_FOUND = re.compile(r"(?i)Could NOT find Vulkan|Could not find (?:a package configuration file provided by )?"
                        r"\"?Vulkan\b|Vulkan_INCLUDE_DIR(?:-NOTFOUND)?|Failed to find Vulkan|"
                        r"\bcmake\b[^\n]{0,40}\b(?:can'?t|cannot|can not|doesn'?t|does not|unable to|fails? to|won'?t)\s+"
                        r"(?:find|detect|locate|see)\b")
_VULKAN = re.compile(r"(?i)\bvulkan\b")
_BUILD = re.compile(r"(?i)\bcmake\b|building wheel|GGML_VULKAN|pip install|\bbuild(?:ing)?\b")

# (os fact, the packages that carry the loader's development files, the headers and glslc)
# Fedora's names checked in round 18: vulkan-devel is what Fedora's vulkan-loader.spec declares its -devel package
# provides ("Provides: vulkan-devel", so dnf resolves it to vulkan-loader-devel, which requires vulkan-headers);
# glslc is a Fedora package of its own (kallyaleksiev/llms-on-strix-halo:vulkan_llamacpp_build.sh and
# orimanabu/fedora-llama-vulkan:Dockerfile both `dnf install glslc` to build llama.cpp with GGML_VULKAN)
_PACKAGES = {
    "fedora": "sudo dnf install vulkan-devel glslc",
    "ubuntu": "sudo apt install libvulkan-dev glslc",
    "debian": "sudo apt install libvulkan-dev glslc",
    "popos": "sudo apt install libvulkan-dev glslc",
    "arch": "sudo pacman -S vulkan-headers vulkan-icd-loader shaderc",
    "opensuse": "sudo zypper install vulkan-devel shaderc",
}


@rule("rocm-libs-missing")
def vulkan_development_files_missing(ctx: Context) -> Optional[Diagnosis]:
    """CMake (or the user) saying it cannot find Vulkan during a build: the development package, by distribution."""
    text = _text(ctx)
    if not _VULKAN.search(text) or not _BUILD.search(text):
        return None
    said = [e for e in _lines_matching(ctx, _NOT_FOUND)
            if _VULKAN.search(e.line) or re.search(r"(?i)\bcmake\b", e.line)]
    if not said:
        return None
    if on_windows(ctx, text) and not ctx.sheet.of("os"):
        fix = ("install LunarG's Vulkan SDK (it sets VULKAN_SDK, which CMake's FindVulkan reads), open a new "
               "terminal, and build again")
    else:
        systems = [f.value for f in ctx.sheet.of("os") if f.value in _PACKAGES]
        if systems:
            fix = _PACKAGES[systems[0]]
        else:
            fix = ("the distribution's Vulkan development packages: Fedora sudo dnf install vulkan-devel glslc; "
                   "Debian/Ubuntu sudo apt install libvulkan-dev glslc; Arch sudo pacman -S vulkan-headers shaderc; "
                   "or LunarG's Vulkan SDK")
        fix += (", then build again from a clean build folder (pip: --no-cache-dir --force-reinstall, so the wheel "
                "is not taken from pip's cache)")
    return _make("rocm-libs-missing", "Vulkan's development files are missing for the build",
                 "running Vulkan programs needs only the loader and the GPU's driver; building against Vulkan needs "
                 "the loader's development files and headers (CMake's find_package(Vulkan) looks for vulkan/vulkan.h "
                 "and the libvulkan link) and the glslc shader compiler, which are separate packages",
                 fix, [], said[:1])
