"""A prebuilt arm64 GPU program on an NVIDIA Jetson failing at its first CUDA call: Jetson's GPU is integrated
(Tegra), its CUDA comes with JetPack / L4T, and the generic arm64 builds are made for discrete-GPU arm64 servers
(SBSA), whose CUDA libraries do not run there; the error then reads like a driver older than the build ("the provided
PTX was compiled with an unsupported toolchain", "no kernel image"). The fix is the program's JetPack build, or a build
from source on the Jetson against JetPack's CUDA, never a driver update (the driver is JetPack's).

Sources: ollama/ollama#6921 (ollama 0.3.11's arm64 build on a Jetson Orin, CUDA 12.6: "the provided PTX was compiled
with an unsupported toolchain"; the maintainer: build from source on the Jetson until Jetson builds exist); ollama's
release assets and install.sh (ollama-linux-arm64-jetpack5.tgz / -jetpack6.tgz, "Downloading JetPack 6 components");
jetson-ai-lab's Ollama tutorial (JetPack 5 / 6 natively, or the jetson-containers image)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_JETSON = re.compile(r"(?i)\bJetson\b|\bAGX (?:Orin|Xavier)\b|\bOrin (?:Nano|NX)\b|\bJetPack\b|\bL4T\b|\btegra\b|"
                     r"\bnvgpu\b")
# the errors of a CUDA build that does not fit the platform's CUDA (not a CUDA error of the work itself: out of memory)
_CUDA_FAILED = re.compile(r"(?i)PTX was compiled with an unsupported toolchain|no kernel image is available|"
                          r"CUDA driver version is insufficient|cudaErrorUnsupportedPtxVersion|"
                          r"CUDA_ERROR_UNSUPPORTED_PTX_VERSION|cudaErrorInsufficientDriver")
# (program, how it is named, its JetPack build or the way it is built on the Jetson)
_PROGRAMS = (
    ("ollama", re.compile(r"(?i)\bollama\b"),
     "build Ollama from source on the Jetson against JetPack's CUDA (its docs/development.md, with "
     "CUDA's bin on PATH), or install a release that ships the JetPack build (curl -fsSL https://ollama.com/"
     "install.sh | sh fetches ollama-linux-arm64-jetpack5/6.tgz beside the arm64 bundle; or the jetson-containers "
     "ollama image)"),
    ("llama.cpp", re.compile(r"(?i)\bllama\.cpp\b|\bllama-server\b|\bllama-cli\b"),
     "build llama.cpp from source on the Jetson: cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=87 (Orin; "
     "72 for Xavier) with JetPack's /usr/local/cuda/bin on PATH, then cmake --build build --config Release"),
)


@rule("wheel-platform")
def generic_arm64_build_on_a_jetson(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _JETSON.search(text):
        return None
    failed = _lines_matching(ctx, _CUDA_FAILED)
    if not failed:
        return None
    for name, named, fix in _PROGRAMS:
        if not named.search(text):
            continue
        # a build from source already (the user's own cmake / go build) is not the prebuilt reading
        if re.search(r"(?i)\bgo build\b|\bcmake -B\b|\bbuilt (?:it )?from source\b", text):
            return None
        jetson = _lines_matching(ctx, _JETSON)
        return _first(_make("wheel-platform", f"{name}'s generic arm64 build on a Jetson",
                            f"the {name} installed is the generic Linux arm64 build, whose CUDA libraries are made for "
                            "discrete-GPU arm64 servers (SBSA); a Jetson's integrated GPU runs JetPack's own CUDA, so "
                            "the first CUDA call fails in words that look like an old driver, which it is not",
                            fix + "; do not update the driver: on a Jetson it is JetPack's",
                            [], failed[:1] + jetson[:1]))
    return None
