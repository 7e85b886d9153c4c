"""A Windows laptop with an integrated GPU beside a discrete one (Intel or AMD graphics with an RTX / Radeon card)
where a program that picks its GPU through Windows' graphics stack - DirectML (onnxruntime-directml, torch-directml,
Olive's DirectML examples), Vulkan or OpenGL apps - runs on the integrated GPU (visibility). Windows hands such a
program its default adapter, which on a hybrid laptop is the power-saving (integrated) one unless the program is
given the high-performance preference; CUDA programs never run on an Intel or AMD iGPU, so the reading leaves them.

Sources: microsoft/Olive#307 (the DirectML maintainer: DirectML defaults to the power-saving adapter on hybrid
laptops; add python.exe under Settings > Display > Graphics and set it to High performance); onnxruntime's DirectML
execution provider docs (the device_id provider option picks the adapter by index); torch-directml's
torch_directml.device(index)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text

# the program choosing its GPU through Windows' adapters
_DIRECTX = re.compile(r"(?i)directml|\bdml\b|DmlExecutionProvider|torch[-_]directml|onnxruntime-directml|\bOlive\b|"
                      r"\bVulkan\b|\bOpenGL\b|\bDirectX\b|\bD3D1[12]\b")
# the user's words: it runs on the integrated GPU
_ON_IGPU = re.compile(r"(?i)\b(?:run(?:s|ning)?|uses?|using|picks?|select(?:s|ed)?|on)\b.{0,30}\b(?:integrated|intel "
                      r"(?:UHD|Iris|HD)|iGPU|onboard|AMD Radeon\(TM\) Graphics|Radeon Graphics)\b|\b(?:integrated|iGPU)\b"
                      r".{0,30}\b(?:instead|rather than|not the)\b|集成显卡|核显")
_DISCRETE = re.compile(r"(?i)\bRTX\s?\d{4}|\bGTX\s?\d{3,4}|\bRX\s?\d{4}|\bnvidia\b|\bGeForce\b|\blaptop\b")


@rule("visibility")
def hybrid_default_adapter(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Windows, a program on DirectML / Vulkan / OpenGL, the user's word that it runs on the integrated
    GPU, and a discrete GPU (or a laptop) named."""
    text = _text(ctx)
    if not on_windows(ctx, text) or not _DIRECTX.search(text) or not _DISCRETE.search(text):
        return None
    said = _lines_matching(ctx, _ON_IGPU)
    if not said:
        return None
    dml = re.search(r"(?i)directml|\bdml\b|\bOlive\b", text)
    return _make(
        "visibility", "Windows gives the program the laptop's power-saving (integrated) GPU",
        "on a hybrid-graphics laptop Windows hands a program its default adapter, the power-saving integrated GPU, "
        "unless the program is set to high performance"
        + ("; DirectML takes that default adapter" if dml else ""),
        "Settings > System > Display > Graphics: add the program's python.exe (the one in its venv / env folder; "
        "Browse to it), Options > High performance (the discrete GPU), save and start it again"
        + ("; or pick the adapter in code: onnxruntime's providers=[(\"DmlExecutionProvider\", {\"device_id\": 1})], "
           "torch_directml.device(1) (the index of the discrete GPU in the adapter list)" if dml else "")
        + "; on NVIDIA laptops the NVIDIA Control Panel's Manage 3D settings > Program settings can also set "
        "python.exe to the high-performance NVIDIA processor",
        [], said[:1], confirmed=bool(dml))
