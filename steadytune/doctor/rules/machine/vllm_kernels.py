"""vLLM's own kernels failing: its compiled ops (vllm/_C) after another torch was installed over the
one its wheel was built against, and its Triton flash-attention kernel on a ROCm GPU it does not fit. vLLM's install
pages: a fresh environment or use_existing_torch.py; VLLM_USE_TRITON_FLASH_ATTN=0.
Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, _vendor, rule


# --- vLLM's compiled ops after another torch was installed over its own -----------------------------------------------

_VLLM_SYMBOL = re.compile(r"(?i)vllm[^\n]{0,80}undefined symbol|undefined symbol[^\n]{0,200}vllm")
_TORCH_SWAPPED = re.compile(r"(?i)\bpip3? install\b[^\n]*\btorch(?:==|>=|\s+-U|\s+--upgrade|\s*$|\s+--index-url)|"
                            r"\b(?:upgraded|updated|downgraded|installed|reinstalled)\b[^\n]{0,20}\btorch\b")
_VLLM_VERSION = re.compile(r"(?i)\bvllm(?:==| |-)v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)\b")


@rule("abi-mismatch")
def vllm_ops_after_torch_swap(ctx: Context) -> Optional[Diagnosis]:
    """vLLM's install page: its wheels are compiled against one torch release; a different torch installed over it
    (for another package) leaves vllm/_C with symbols the new libtorch lacks. A fresh environment, or a build of
    vLLM against the torch that must stay (use_existing_torch.py)."""
    if "vllm" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _VLLM_SYMBOL)
    text = _text(ctx)
    if not said or not _TORCH_SWAPPED.search(text):
        return None
    version = _VLLM_VERSION.search(text)
    pin = f"vllm=={version.group(1)}" if version else "vllm"
    return _first(_make(
        "abi-mismatch", "vLLM's compiled ops were built for another torch",
        "vLLM's wheel is compiled against one torch release, which pip installs with it; a torch installed afterwards "
        "(for another package) replaced it, and vllm/_C now calls libtorch symbols the new torch does not have",
        f"give vLLM back its own torch in a fresh environment: python -m venv vllm-env && . vllm-env/bin/activate && "
        f"pip install {pin} (it pulls the torch it was built for; pip show vllm lists the pin), and keep the package "
        "that wants another torch in an environment of its own; or build vLLM against the torch that must stay: in a "
        "vllm checkout python use_existing_torch.py, pip install -r requirements/build.txt, pip install "
        "--no-build-isolation -e .", said[:1], said[:1]))

# --- vLLM's Triton flash attention on a ROCm GPU ----------------------------------------------------------------------

_TRITON_FAIL = re.compile(r"(?i)triton\.runtime\.errors|OutOfResources: out of resource|triton[^\n]{0,60}"
                          r"(?:compil\w+ (?:error|fail\w*)|stack frame)|_attn_fwd|triton_flash_attention")


@rule("attention")
def vllm_rocm_triton_attention(ctx: Context) -> Optional[Diagnosis]:
    """vLLM's ROCm install page: where its Triton flash-attention kernel fails on the GPU (Radeon cards' smaller
    shared memory, a compile failure), VLLM_USE_TRITON_FLASH_ATTN=0 turns to its CK / naive attention."""
    # VLLM_USE_TRITON_FLASH_ATTN=0 as AMD's MI300X workload guide exports it ("vLLM performance settings") and ROCm
    # benchmark scripts set it ("## Use CK backend."); later vLLM builds warn it is an unknown variable and choose the
    # backend with VLLM_ATTENTION_BACKEND, as the fix says
    if "vllm" not in ctx.sheet.tools or _vendor(ctx) != "amd":
        return None
    if ctx.sheet.env_value("VLLM_USE_TRITON_FLASH_ATTN") == "0":
        return None
    said = _lines_matching(ctx, _TRITON_FAIL)
    if not said:
        return None
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    on = f" on {archs[0]}" if archs else ""
    return _first(_make(
        "attention", f"vLLM's Triton flash attention fails{on}",
        f"vLLM on ROCm runs attention through a Triton flash-attention kernel by default; it does not fit or compile"
        f"{on} (Radeon GPUs have less shared memory per workgroup than the Instinct parts it is tuned for)",
        "export VLLM_USE_TRITON_FLASH_ATTN=0 before starting vLLM (it then uses the CK flash attention or the naive "
        "path); on releases without that variable choose another backend with VLLM_ATTENTION_BACKEND",
        said[:1], said[:1]))
