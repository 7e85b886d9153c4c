"""The launch flag that picks the GPU backend of the Stable Diffusion web UIs' AMD paths: lshqqytiger's fork
(stable-diffusion-webui-amdgpu, once stable-diffusion-webui-directml) and SD.Next pick DirectML, ZLUDA, ROCm, IPEX or
OpenVINO with --use-<backend>. The fork's early `--backend directml` is no longer read (its maintainer in
stable-diffusion-webui-amdgpu#469: use --use-directml), and SD.Next's --backend chooses its pipeline (original /
diffusers), not a device. Given the old form, no backend is selected: the CUDA torch check fails ("Torch is not able
to use GPU") or the argument is refused, although the flag is in COMMANDLINE_ARGS."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (Context, Diagnosis, _first, _lines_matching, _make, on_windows, _text, _vendor,
                                          rule)


# the backend named the old way: --backend directml / --backend=zluda ...
_OLD_FORM = re.compile(r"(?i)--backend[= ]+[\"']?(directml|dml|zluda|rocm|ipex|openvino|cuda)\b")
# the current flag for each (SD.Next's --use-<name> and the fork's own; "dml" is DirectML's short name)
_CURRENT = {"directml": "--use-directml", "dml": "--use-directml", "zluda": "--use-zluda", "rocm": "--use-rocm",
            "ipex": "--use-ipex", "openvino": "--use-openvino", "cuda": "--use-cuda"}
# what the web UI says when no backend was chosen, or the argument refused
_FAILED = re.compile(r"(?i)Torch is not able to use GPU|unrecognized arguments?:|invalid choice:|"
                     r"Torch not compiled with CUDA|Found no NVIDIA driver|No CUDA GPUs are available|error:")


@rule("env-not-applied")
def webui_backend_flag(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the backend given as --backend <name> and the web UI failing its GPU check."""
    text = _text(ctx)
    old = _OLD_FORM.search(text)
    if old is None:
        return None
    failed = _lines_matching(ctx, _FAILED)
    if not failed:
        return None
    backend = old.group(1).lower()
    flag = _CURRENT[backend]
    windows = "webui-user.bat" if re.search(r"(?i)\.bat\b|[a-z]:\\|\bwin(?:dows)?\s*1[01]\b", text) else "webui-user.sh"
    extra = (" (and keep AMD's HIP SDK installed for it)" if backend == "zluda" else "")
    return _first(_make("env-not-applied", f"{old.group(0).strip()} does not select the {backend} backend",
                        f"the AMD web UIs pick their backend with --use-<backend> flags ({flag} here); "
                        f"{old.group(0).strip()} is the "
                        "fork's old form (SD.Next's --backend picks its pipeline, not a device), so no backend is "
                        "selected and the web UI falls back to its CUDA check, which an AMD GPU fails",
                        f"launch with {flag} instead: set COMMANDLINE_ARGS={flag} in {windows} (remove --backend "
                        f"{backend}){extra}; if the venv was made with the CUDA torch, delete the venv folder once so "
                        "the backend's own torch is installed", [ctx.line_fact(failed[0])], failed[:1]))


# SD.Next named: its start line, its name, its repository
_SDNEXT = re.compile(r"(?i)\bSD\.?\s?Next\b|\bsdnext\b|vladmandic/(?:automatic|sdnext)")
# the backend asked for: the flag, or SD.Next's own log of it ("Torch overrides: cuda=False ... diml=True ...")
_ASKED = re.compile(r"(?i)--use-(directml|zluda|rocm|ipex|openvino)\b|Torch overrides:.*?\b(diml|zluda|rocm|ipex|"
                    r"openvino)=True")
_SHORT = {"diml": "directml"}
# the GPU left idle while the CPU works: in the user's words, or a backend that fell back to the CPU
_ON_CPU = re.compile(r"(?i)\ball CPU\b|\bCPU usage\b|\b(?:only |just )?(?:uses?|using|runs? on) (?:the |my )?CPU\b|"
                     r"\bGPU\b.{0,30}\b(?:idle|\d%|sat at|sits at|not used|unused)|not using (?:the |my )?GPU|"
                     r"\bdevice(?:=| is |: )cpu\b")


@rule("torch-build")
def sdnext_backend_after_install(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: SD.Next, a backend flag given (or logged), and the work still on the CPU. SD.Next installs torch on
    its first start for the backend chosen then; a flag added later selects the backend but keeps the torch in the
    venv (a CPU torch from a first start without it), until --reinstall replaces it (vladmandic/sdnext#2436: the
    reporter's fix, the maintainer's word that the flag belongs to the first install or goes with --reinstall)."""
    text = _text(ctx)
    if not _SDNEXT.search(text):
        return None
    asked = _ASKED.search(text)
    on_cpu = _lines_matching(ctx, _ON_CPU)
    if asked is None or not on_cpu:
        return None
    backend = (asked.group(1) or asked.group(2)).lower()
    backend = _SHORT.get(backend, backend)
    flag = _CURRENT[backend]
    return _make("torch-build", f"SD.Next kept the torch of its first install, not the {backend} one",
                 f"SD.Next installs torch for the backend chosen on its first start; {flag} given afterwards selects "
                 f"the {backend} backend but leaves the torch already in the venv (the CPU build of a first start "
                 "without it), so the work stays on the CPU",
                 f"start it once with {flag} --reinstall (webui.bat {flag} --reinstall; on Linux ./webui.sh), which "
                 f"replaces torch with the {backend} build, then start with {flag} alone; or delete the venv folder "
                 f"and start with {flag}", [ctx.line_fact(on_cpu[0])], on_cpu[:1])


# SD.Next's own log, which names it where the paste does not: its engine line ("Engine: backend=Backend.DIFFUSERS
# compute=cpu ..."), its torch line ("Torch: torch==2.8.0+cpu torchvision==..."), its overrides line
_SDNEXT_LOG = re.compile(r"\bEngine: backend=Backend\.\w+|\bINFO\s+Torch: torch==|\bTorch overrides:")
_CPU_BUILD = re.compile(r"(?i)\btorch==\S+\+cpu\b|\bcompute=cpu\b")


@rule("torch-build")
def sdnext_cpu_torch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: SD.Next (named, or its own log lines), its log showing a CPU torch (torch==X+cpu, compute=cpu), and
    no CPU asked for (--use-cpu). SD.Next's installer chose that torch on a first start that found no GPU backend (a
    launcher's install, a start without the flag); it keeps it until --reinstall (vladmandic/sdnext#4232: relaunching
    with --reinstall replaced the +cpu torch with the CUDA build)."""
    text = _text(ctx)
    if not (_SDNEXT.search(text) or _SDNEXT_LOG.search(text)) or re.search(r"--use-cpu\b", text):
        return None
    if _ASKED.search(text):
        return None   # a backend flag given: sdnext_backend_after_install's reading
    said = _lines_matching(ctx, _CPU_BUILD)
    if not said:
        return None
    vendor = _vendor(ctx)
    windows = on_windows(ctx, text)
    if vendor == "amd":
        flag = "--use-zluda" if windows else "--use-rocm"
    elif vendor == "nvidia":
        flag = "--use-cuda"
    else:
        flag = "--use-cuda (NVIDIA; an AMD GPU: --use-rocm on Linux, --use-zluda on Windows; Intel: --use-ipex)"
    start = "webui.bat" if windows else "./webui.sh"
    return _first(_make("torch-build", "SD.Next runs on the CPU build of torch its installer chose",
                        "SD.Next's log shows torch's CPU build in its venv (compute=cpu): its installer picks torch on "
                        "the first start (or a launcher's install) and keeps it on every later start, so the GPU stays "
                        "unused until the installer is told to replace it",
                        f"start it once with {start} --reinstall and the backend flag for the GPU, {flag}: the "
                        "installer then replaces the CPU torch with that backend's build; afterwards start it as "
                        "usual (or delete the venv folder and start again with the flag)",
                        [ctx.line_fact(said[0])], said[:1]))


# torch refusing the Intel GPU because it is not its XPU build ("Torch not compiled with XPU enabled"), and the signs
# that the paste is SD.Next's (its issue template's "Compute: Intel IPEX", its own name)
_NO_XPU = re.compile(r"(?i)Torch not compiled with XPU enabled|torch\.xpu\.is_available\(\)\s*(?:->|=|:|is|returns)?\s*"
                     r"False")
_SDNEXT_IPEX = re.compile(r"(?i)\bCompute:\s*Intel IPEX\b|--use-ipex\b")


@rule("torch-build")
def torch_without_xpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: torch's "not compiled with XPU enabled": the torch installed is a build without Intel's XPU backend
    (the CPU wheel from PyPI, or a CUDA one). An app that installs torch for itself keeps the one it chose until told
    to reinstall: SD.Next with --use-ipex --reinstall (vladmandic/sdnext#4357, the maintainer's answer); elsewhere
    torch's XPU wheels (pytorch.org's "Getting Started on Intel GPU": pip install torch --index-url
    https://download.pytorch.org/whl/xpu, torch 2.5 and newer) (round 20, r20d)."""
    lines = _lines_matching(ctx, _NO_XPU)
    if not lines:
        return None
    text = _text(ctx)
    windows = on_windows(ctx, text)
    start = "webui.bat" if windows else "./webui.sh"
    wheel = ("pip uninstall -y torch torchvision torchaudio; pip install torch torchvision torchaudio --index-url "
             "https://download.pytorch.org/whl/xpu (with Intel's GPU driver installed); python -c \"import torch; "
             "print(torch.xpu.is_available())\" must print True")
    if _SDNEXT.search(text) or _SDNEXT_LOG.search(text) or _SDNEXT_IPEX.search(text):
        fix = (f"start SD.Next once with {start} --use-ipex --reinstall: its installer then replaces the torch in its "
               "venv with the XPU (IPEX) build; afterwards start it with --use-ipex (or delete the venv folder and "
               "start again with --use-ipex)")
    else:
        fix = ("in the program's own environment (its venv): " + wheel + "; an app that installs torch itself needs "
               "its Intel switch and a reinstall instead (SD.Next: --use-ipex --reinstall)")
    return _make("torch-build", "torch here is not the XPU build for the Intel GPU",
                 "torch's XPU backend, which Intel GPUs run on, is only in its XPU builds; the torch installed (the CPU "
                 "wheel a plain install or a first start without the Intel switch brings) has none",
                 fix, [ctx.line_fact(lines[0])], lines[:1])
