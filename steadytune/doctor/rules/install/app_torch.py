"""The torch an image or voice app runs on is the one in its own Python (a launcher's backend venv, a portable
package's embedded Python, the web UI's venv), not the one a user installed beside it, and some apps pin the CUDA
index their install takes. Two readings from one table of apps:

  - an app on an AMD GPU that looks for CUDA / NVIDIA, or an app said to miss the GPU while torch outside it sees it:
    the ROCm (or CUDA) torch goes into the app's own Python, with that Python (Stability-AI/StableSwarmUI#217: the
    ComfyUI backend's venv under dlbackend/ held a CUDA torch on an RX 6900 XT; the ROCm torch installed there fixed
    it);
  - torch's "not compiled with CUDA" in an app whose own install names a CUDA index: that index and its torch pin,
    before the app's requirements (lllyasviel/Paints-UNDO#6: pip's PyPI torch on Windows is the CPU build; torch 2.3.0
    with xformers from the cu121 index fixed it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.fixes import rocm_index_for
from steadytune.doctor.rules.base import (Context, Diagnosis, _ahead_of, _cuda_index_for_driver, _first, _lines_matching, _make,
                                          on_windows, rule, _text, _vendor)


@dataclass(frozen=True)
class App:
    name: str
    names: str           # what names it in a paste
    python: str          # its own Python on Linux ("" where it has none of its own there)
    python_windows: str  # its own Python on Windows
    knob: str            # its own way of choosing the torch it installs ("" where none)
    index: str           # the CUDA wheel index its install takes ("" where it follows the GPU)
    torch: str           # the torch release its install pins with that index ("" where none)
    source: str


# most specific first (a launcher names the ComfyUI it runs; a portable ComfyUI names ComfyUI)
APPS = (
    App("SwarmUI", r"(?i)\b(?:Stable)?Swarm\s?UI\b|dlbackend", "dlbackend/ComfyUI/venv/bin/python",
        r"dlbackend\comfy\python_embeded\python.exe", "", "", "",
        "SwarmUI's install scripts: a ComfyUI backend in dlbackend/ with its own venv (Linux) or ComfyUI's portable "
        "package (Windows); StableSwarmUI#217"),
    App("Stability Matrix", r"(?i)\bStability\s?Matrix\b", "Data/Packages/<package>/venv/bin/python",
        r"Data\Packages\<package>\venv\Scripts\python.exe",
        "or reinstall the package with the torch version (ROCm / CUDA) picked in its install options", "", "",
        "Stability Matrix keeps each package in Data/Packages/<name> with a venv of its own"),
    App("ComfyUI portable", r"(?i)python_embeded|ComfyUI_windows_portable", "", r"python_embeded\python.exe", "", "",
        "", "ComfyUI's Windows portable package (its README: python_embeded)"),
    App("Fooocus", r"(?i)\bFooocus\b", "fooocus_env/bin/python", r"python_embeded\python.exe",
        "or set TORCH_INDEX_URL before its launch.py installs torch", "cu121", "2.1.0",
        "Fooocus launch.py: torch==2.1.0 from TORCH_INDEX_URL, default whl/cu121; README (venv fooocus_env)"),
    App("SD.Next", r"(?i)\bSD\.?Next\b|\bsdnext\b|vladmandic", "venv/bin/python", r"venv\Scripts\python.exe",
        "or start it once with --use-rocm (NVIDIA: --use-cuda; Windows AMD: --use-zluda) and --reinstall", "", "",
        "SD.Next installer's --use-* backend flags"),
    # (Forge Neo before Forge: its name contains Forge's) its launch_utils.py pins its own torch: 2.8.0+cu128 in the
    # 2025 releases (Haoming02/sd-webui-forge-classic#269: the cu128 build replaced by PyPI's CPU torch 2.9.0 through
    # requirements.txt), torch 2.9.1+cu130 in later ones (its modules/launch_utils.py, TORCH_INDEX_URL default
    # whl/cu130) (round 20, r20d)
    App("Forge Neo", r"(?i)\bforge[-_ ]?neo\b|\bwebui neo\b", "venv/bin/python", r"venv\Scripts\python.exe",
        "or set TORCH_COMMAND in webui-user.bat / .sh, delete venv and start again (releases from torch 2.9.1 on "
        "take whl/cu130, which needs a driver that runs CUDA 13)", "cu128", "2.8.0",
        "Forge Neo modules/launch_utils.py: torch==2.8.0+cu128 (2025), later torch==2.9.1+cu130 from TORCH_INDEX_URL"),
    App("Forge", r"(?i)stable-diffusion-webui-forge|(?<![-\w])Forge\b", "venv/bin/python", r"venv\Scripts\python.exe",
        "or set TORCH_COMMAND in webui-user.sh / .bat, delete venv and start again", "cu121", "2.3.1",
        "Forge modules/launch_utils.py: torch==2.3.1 from TORCH_INDEX_URL, default whl/cu121"),
    App("the web UI", r"(?i)stable-diffusion-webui|webui-user|webui\.sh|\bA1111\b|AUTOMATIC1111", "venv/bin/python",
        r"venv\Scripts\python.exe", "or set TORCH_COMMAND in webui-user.sh / .bat, delete venv and start again",
        "cu121", "2.1.2", "A1111 modules/launch_utils.py (1.7 and later): torch==2.1.2 from TORCH_INDEX_URL, whl/cu121"),
    App("GPT-SoVITS", r"(?i)GPT-?SoVITS", "", r"runtime\python.exe",
        "or install.sh --device CU128 / ROCM, which picks the index", "", "",
        "GPT-SoVITS install.sh --device; its Windows package's runtime folder"),
    App("RVC", r"(?i)\bRVC\b|Retrieval-based-Voice|infer-web\.py", "", r"runtime\python.exe", "", "", "",
        "RVC-WebUI's Windows package (runtime folder)"),
    App("Paints-UNDO", r"(?i)Paints-?UNDO", "", "", "", "cu121", "2.3.0",
        "Paints-UNDO#6: torch 2.3.0 and xformers from the cu121 index (the xformers of its install pins torch 2.3.0)"),
    App("IC-Light", r"(?i)\bIC-?Light\b", "", "", "", "cu121", "", "IC-Light README: torch from whl/cu121"),
    App("Omost", r"(?i)\bOmost\b", "", "", "", "cu121", "", "Omost README: torch from whl/cu121"),
    App("fish-speech", r"(?i)\bfish[-_ ]?speech\b|\bfishenv\b", "", r"fishenv\env\python.exe", "", "cu121", "2.3.1",
        "fish-speech install_env.bat (stable): torch==2.3.1, torchvision==0.18.1, torchaudio==2.3.1 from whl/cu121 "
        "into fishenv\\env"),
    App("FramePack", r"(?i)\bFramePack\b", "", "", "", "cu126", "", "FramePack README: torch from whl/cu126"),
    # Applio's Windows install (run-install.bat) makes an env folder that run-applio.bat starts; its maintainer's
    # command for another torch there is "env\python -m pip install ..." (IAHispano/Applio#969)
    App("Applio", r"(?i)\bApplio\b|run-applio", "", r"env\python", "", "", "",
        "Applio's run-install.bat / run-applio.bat (env folder); IAHispano/Applio#969"),
    # (a manual ComfyUI install runs on whatever Python the user made for it: no path of its own to name)
    App("ComfyUI", r"(?i)\bComfy\s?UI\b", "", "", "", "", "",
        "ComfyUI README (manual install: torch from the GPU's index into the user's environment)"),
)


def app_named(text: str) -> Optional[App]:
    return next((a for a in APPS if re.search(a.names, text)), None)


def windows_paste(ctx: Context, text: str) -> bool:
    """Windows by the facts, the words, or a drive-letter path (D:\\ComfyUI_windows_portable)."""
    return on_windows(ctx, text) or bool(re.search(r"(?<![\w])[A-Za-z]:\\", text))


def app_python(app: App, windows: bool) -> Optional[str]:
    """The app's own Python as the command to run pip with, or None where it has none of its own."""
    path = app.python_windows if windows else app.python
    return f"{path} -m pip" if path else None


_INDEX_URL = re.compile(r"https://download\.pytorch\.org/whl/[\w.]+")

# the app looking for NVIDIA's runtime on an AMD machine, or missing the GPU, in its or the user's words
_WANTS_CUDA = re.compile(r"(?i)looking for (?:an? )?(?:cuda|nvidia)|(?:wants?|expects?|needs?|requires?|asks? for) "
                         r"(?:an? )?(?:cuda|nvidia)|Found no NVIDIA driver|Torch not compiled with CUDA|"
                         r"cuda torch|\bnvidia gpu\b.{0,40}\b(?:not found|missing|required)|"
                         r"(?:can ?not|can't|doesn't|does not|don't|not|isn't|fails? to) (?:detect|see|find|recogni[sz]e)"
                         r"\w*\s+(?:my |the |an? |any )?(?:AMD |NVIDIA )?(?:GPU|graphics|card|radeon|rx)\b|"
                         r"\bGPU\b.{0,20}\b(?:Unknown|not detected)\b")
# torch outside the app said to work: is_available() True, or a torch the user installed themselves
_TORCH_OUTSIDE = re.compile(r"(?i)is_available\(\)\W{0,40}(?:returns?|prints?|says?|gives?|is)?\W{0,20}True|"
                            r"\binstalled\b.{0,60}\b(?:pytorch|torch)\b.{0,40}\b(?:rocm|cuda|nightly)|"
                            r"\b(?:pytorch|torch)\b.{0,20}\brocm\b.{0,20}\b(?:nightly|installed|versions?)\b")
# torch's own words that it is not the build for this GPU (the rest of _WANTS_CUDA is the user's)
_TORCH_SAYS = re.compile(r"(?i)Found no NVIDIA driver|Torch not compiled with CUDA")
_AMD_CARD = re.compile(r"(?i)\bRadeon\b|\bRX ?\d{4}|\b[5-9]\d00 ?XTX?\b|\bgfx\d{3,4}")


def _index_url(line: str) -> str:
    found = _INDEX_URL.search(line)
    return found.group(0) if found else "https://download.pytorch.org/whl/cu128"


@rule("torch-build")
def torch_outside_the_app(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an app from the table with a Python of its own, on an AMD GPU that it says (or the user says) it
    looks for CUDA on or cannot see, or on any GPU where torch outside the app is said to see it."""
    text = _text(ctx)
    app = app_named(text)
    if app is None:
        return None
    windows = windows_paste(ctx, text)
    python = app_python(app, windows)
    if python is None:
        return None
    said = _lines_matching(ctx, _WANTS_CUDA)
    amd = _vendor(ctx) == "amd" or bool(_AMD_CARD.search(text))
    outside = _TORCH_OUTSIDE.search(text)
    if not said or not (amd or outside):
        return None
    if any(e.family not in (None, "torch-build", "visibility", "driver") for e in ctx.errors):
        return None   # an error of another kind says what failed
    if any(f.detail == ("rocm" if amd else "cuda") for f in ctx.sheet.of("torch")):
        return None   # the app's own log shows a torch of the GPU's build: the build is right, another cause
    arch, _ = ctx.arch()
    if amd and windows:
        return None   # no ROCm torch on pytorch.org for Windows: the Windows AMD readings (ZLUDA, DirectML)
    url = _index_url(rocm_index_for(arch) if amd else _cuda_index_for_driver(ctx, arch))
    build = "ROCm" if amd else "CUDA"
    knob = f" ({app.knob})" if app.knob else ""
    return _first(_make(
        "torch-build", f"{app.name}'s own Python has no {build} torch",
        f"{app.name} runs on the torch in its own Python environment, not on the one installed beside it"
        + (" (which is why torch answers True outside it)" if outside else "") +
        f"; its install put a torch there that is not the {build} build" + (", so it looks for an NVIDIA GPU"
                                                                           if amd else ""),
        f"install the {build} torch into {app.name}'s own Python: {python} uninstall -y torch torchvision "
        f"torchaudio; {python} install torch torchvision torchaudio --index-url {url}{knob}; then {python.split()[0]} "
        "-c 'import torch; print(torch.cuda.is_available(), torch.version.hip or torch.version.cuda)' must print "
        "True", [], said[:1], confirmed=bool(_TORCH_SAYS.search(said[0].line))))


# torch's own line that it is a CPU build
_CPU_TORCH = re.compile(r"(?i)Torch not compiled with CUDA enabled|\+cpu\b")


@rule("torch-build")
def cpu_torch_in_an_app(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: torch's CPU build said, an NVIDIA machine (or no AMD one), and an app of the table whose install
    names a CUDA index (that index; cu128 on Blackwell, which the older indexes do not carry) or that has a Python of
    its own (the index for the driver, installed with that Python)."""
    said = _lines_matching(ctx, _CPU_TORCH)
    text = _text(ctx)
    app = app_named(text)
    if not said or app is None or _vendor(ctx) == "amd" or _AMD_CARD.search(text):
        return None
    windows = windows_paste(ctx, text)
    own = app_python(app, windows)
    if not (app.index or own) or any(e.family not in (None, "torch-build") for e in ctx.errors):
        return None
    arch, _ = ctx.arch()
    blackwell = bool(arch and re.fullmatch(r"sm_1\d\d", arch)) or bool(re.search(r"(?i)\bRTX ?50[5-9]0\b", text))
    xformers = bool(re.search(r"(?i)\bxformers\b", text))
    extra = " xformers" if xformers else ""
    if blackwell or not app.index:
        # Blackwell: CUDA 12.8 wheels, torch 2.7 and newer; an app without an index of its own: the driver's
        index, pin = _index_url(_cuda_index_for_driver(ctx, arch)).rsplit("/", 1)[1], "torch torchvision torchaudio"
    else:
        index, pin = app.index, (f"torch=={app.torch} torchvision torchaudio" if app.torch else
                                 "torch torchvision torchaudio")
    python = own or "pip"
    where = (f"; {app.name}'s install takes torch from the {app.index} index ({app.source})" if app.index else
             f"; {app.name} runs on the torch in its own Python ({own.split()[0]}), so that is where it goes")
    return _first(_make(
        "torch-build", f"a CPU torch in {app.name}'s environment",
        f"the torch in {app.name}'s environment is the CPU build (plain pip takes PyPI's torch, which on Windows is "
        "CPU-only" + (", and pip install xformers pulls that torch in" if xformers else "") + ")" + where,
        f"{python} uninstall -y torch torchvision torchaudio{extra}; {python} install {pin}{extra} --index-url "
        f"https://download.pytorch.org/whl/{index}" + (" (Blackwell needs the CUDA 12.8 wheels, torch 2.7 or newer)"
                                                        if blackwell else "") +
        (", then pip install -r requirements.txt (it keeps that torch)" if not own else "") +
        "; torch.cuda.is_available() must print True", [], said[:1]))


# the user's own torch install, into another environment than the app's: conda / anaconda, a system pip, a venv
_INSTALLED_ELSEWHERE = re.compile(r"(?i)\binstall(?:ed|ing)?\b.{0,40}\b(?:py)?torch\b.{0,40}\b(?:via|with|in|into|through|"
                                  r"using|from)\s+(?:the\s+|my\s+|a\s+)?(?:ana|mini)?conda\b|\b(?:ana|mini)?conda\b"
                                  r".{0,40}\binstall(?:ed)?\b.{0,40}\b(?:py)?torch\b|\binstall(?:ed|ing)?\b.{0,30}\b(?:py)?"
                                  r"torch\b.{0,40}\b(?:globally|system[- ]wide|in my (?:own )?(?:venv|env(?:ironment)?|"
                                  r"python))")
# the app still failing: the GPU's architecture refused, the app not starting, the GPU not used
_STILL_FAILS = re.compile(r"(?i)\bsm_\d{2,3}\b.{0,30}\b(?:error|not compatible|not supported)|no kernel image|"
                          r"not (?:able|possible) to (?:start|run|launch)|(?:won'?t|does ?n[o']?t|can'?t|cannot|fails? to)"
                          r" (?:start|launch|open|run)|not compatible with the current PyTorch|still (?:the )?(?:same )?"
                          r"(?:error|fails?|crash)")


@rule("env-not-applied")
def torch_installed_beside_the_app(ctx: Context) -> Optional[Diagnosis]:
    """A newer torch the user installed into another Python (conda, a system pip) while the app, which runs on its own
    Python, keeps failing: the install never reached the app. Decided by: an app of the table with a Python of its
    own on this platform, the user's words for the other install, and the app still failing. The torch build named
    comes from the GPU (Blackwell: cu128) or the driver (_cuda_index_for_driver)."""
    text = _text(ctx)
    app = app_named(text)
    if app is None:
        return None
    python = app_python(app, windows_paste(ctx, text))
    elsewhere = _lines_matching(ctx, _INSTALLED_ELSEWHERE)
    if python is None or not elsewhere or not _STILL_FAILS.search(text):
        return None
    if _vendor(ctx) == "amd":
        return None   # an AMD GPU: the ROCm / ZLUDA readings of the app
    arch, _ = ctx.arch()
    said = re.search(r"(?i)\bsm_(\d{2,3})\b", text)
    if arch is None and said:
        arch = f"sm_{said.group(1)}"
    if arch is None and re.search(r"(?i)\bRTX\s?50\d0\b|\bRTX 5000 series\b|\bBlackwell\b", text):
        arch = "sm_120"
    url = _index_url(_cuda_index_for_driver(ctx, arch))
    # torch's own refusal of the arch beside the user's install of a build that has it: settled
    refused = bool(re.search(r"(?i)not compatible with the current PyTorch installation|no kernel image is available",
                             text))
    # ahead of the architecture reading of the same error: the build that carries the arch is already installed, in
    # the wrong Python
    return _ahead_of(_make(
        "env-not-applied", f"the new torch went into another Python, not {app.name}'s own",
        f"{app.name} starts on the Python of its own install, not on conda's or the system's, so a torch installed "
        "there (the newer build the GPU needs) never reaches it and the app keeps its old torch",
        f"install the torch into {app.name}'s own Python, from its folder: {python} install --upgrade torch "
        f"torchvision torchaudio --index-url {url} (the same command with {python.split()[0]}, not conda's or the "
        f"system's pip); update {app.name} itself too; then {python.split()[0]} -c \"import torch; "
        "print(torch.__version__, torch.cuda.get_arch_list())\" must list the GPU's sm_ value",
        [], elsewhere[:1], confirmed=refused), "arch-missing")
