"""TensorRT-LLM's fused multi-head attention (FMHA) and the GPU archs its kernels are checked against at engine build
or load time (attention.cpp / fmhaRunner.cpp assertions):

  context FMHA on an older GPU   the fused context-phase MHA kernels (--enable_context_fmha, later --context_fmha)
                                 have no Volta or Turing version (V100, T4): fmhaRunner asserts "Unsupported
                                 architecture"; the engine is built without them (unfused attention)
  FP8 FMHA refused               --use_fp8_context_fmha is checked against a list of archs that grew with the
                                 releases ("cannot be enabled on pre-Hopper Arch" in 0.10 refused an L40, Ada;
                                 "except on Ada or Hopper or Blackwell Arch" in 0.18 refused the RTX 5090, sm_120);
                                 a GPU with FP8 tensor cores that the check refuses needs a release whose check
                                 knows it; a GPU without them (Ampere and older) cannot run FP8 FMHA at all

Sources: NVIDIA/TensorRT-LLM#320 (maintainers: no fused context MHA kernels for V100/T4, build without
--enable_context_fmha), NVIDIA/TensorRT-LLM#1864 (FP8 FMHA refused on an L40 by 0.10's pre-Hopper check),
NVIDIA/TensorRT-LLM#2855 (RTX 5090 refused by 0.18's check, verified fixed in v0.20.0); FP8 tensor cores exist from
Ada (sm_89) on (CUDA 12.0 release announcement: FP8 for Hopper and Ada Lovelace).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_TRTLLM = re.compile(r"(?i)tensorrt[_-]?llm|\btrtllm\b|trtllm-build|\[TensorRT-LLM\]")
# the fused context MHA said: its flag (old and new spelling), its runner's source, its own kernels' folder
_CONTEXT_FMHA = re.compile(r"(?i)enable_context_fmha|--context_fmha\b|fmhaRunner|contextFusedMultiHeadAttention|"
                           r"\bFMHA\b")
_UNSUPPORTED_ARCH = re.compile(r"(?i)Assertion failed: Unsupported architecture|Unsupported architecture\W{0,3}\(\S*fmha")
# Volta and Turing (and older) by name or arch: no fused context MHA kernel of TensorRT-LLM runs there
_BEFORE_AMPERE = re.compile(r"(?i)(?<![A-Za-z0-9])(?:V100|T4|P100|P40|P4|RTX ?20\d0|GTX ?1[06]\d0|Titan (?:V|RTX)|"
                            r"Quadro RTX ?\d+)(?![A-Za-z0-9])|\b(?:Volta|Turing|Pascal)\b|\bsm_?(?:[3-6]\d|7[0-5])\b")


def _context_fmha_before_ampere(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _TRTLLM.search(text):
        return None
    refused = _lines_matching(ctx, _UNSUPPORTED_ARCH)
    fmha = _CONTEXT_FMHA.search(text)
    old = _BEFORE_AMPERE.search(text) or next((a for a in ctx.sheet.machine_archs if re.fullmatch(
        r"sm_(?:[3-6]\d|7[0-5])", a)), None)
    if not fmha or not (refused or old):
        return None
    if not refused:
        # the GPU named and the flag, no assertion quoted: a question ("why is FMHA not supported on T4?")
        refused = _lines_matching(ctx, _CONTEXT_FMHA)
    name = old.group(0) if isinstance(old, re.Match) else old
    on = f" ({name})" if name else ""
    return _first(_make("attention", f"TensorRT-LLM's fused context attention has no kernels for this GPU{on}",
                        "TensorRT-LLM's fused context-phase MHA kernels are built for Ampere (sm_80) and newer; on "
                        f"a Volta or Turing GPU{on} fmhaRunner finds no kernel and asserts 'Unsupported "
                        "architecture' (NVIDIA/TensorRT-LLM#320)",
                        "build the engine without the fused context attention: drop --enable_context_fmha (newer "
                        "trtllm-build: --context_fmha disable; also leave --use_fp8_context_fmha off), so the "
                        "attention plugin runs its unfused kernels on this GPU; the fused ones need an A100/A10/L4 or "
                        "newer", [ctx.line_fact(refused[0])], refused[:1]))


_FP8_FMHA = re.compile(r"(?i)FP8 FMHA cannot be enabled\b[^\n]*")
# the GPU a paste names in words, by the generation the assertion lists (the check reads the compute capability)
_GENERATIONS = (
    ("sm_120", "Blackwell (RTX 50 series, sm_120)", re.compile(r"(?i)\bRTX ?50[5-9]0\b|(?<![\w.])50[5-9]0(?: ?Ti)?\b|"
                                                                r"RTX PRO \d{4} Blackwell|\bsm_?120\b")),
    ("sm_100", "Blackwell (B200/GB200, sm_100)", re.compile(r"(?i)\bG?B[12]00\b|\bsm_?100\b")),
    ("sm_90", "Hopper (sm_90)", re.compile(r"(?i)\bH(?:100|200|20|800)\b|\bHopper\b|\bsm_?90\b")),
    ("sm_89", "Ada (sm_89)", re.compile(r"(?i)\bRTX ?40[5-9]0\b|\bL(?:4|20|40S?)\b|\bAda\b|\bsm_?89\b")),
)
# the release that first let each generation past the FP8 FMHA check, where known
_FP8_FMHA_FROM = {"sm_120": "v0.20.0 (NVIDIA/TensorRT-LLM#2855: verified fixed there)"}


def _fp8_fmha_refused(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _FP8_FMHA)
    if not said:
        return None
    text = _text(ctx)
    arch = next((a for a in ctx.sheet.machine_archs if a.startswith("sm_")), None)
    generation = None
    for key, name, named in _GENERATIONS:
        if arch == key or (arch is None and named.search(text)):
            generation = (key, name)
            break
    if generation is None and arch and re.fullmatch(r"sm_\d+", arch) and int(arch[3:]) < 89:
        return _make("precision", f"the GPU ({arch}) has no FP8 tensor cores for FP8 FMHA",
                     "TensorRT-LLM's FP8 fused attention needs FP8 tensor cores, which GPUs have from Ada (sm_89) "
                     f"on; this GPU is {arch}", "build the engine without --use_fp8_context_fmha (and without an "
                     "FP8 KV cache / --qformat fp8 on this GPU): fp16/bf16 attention, or int8 / int4 weight-only "
                     "quantization", [ctx.line_fact(said[0])], said[:1])
    if generation is None:
        return None
    key, name = generation
    release = _FP8_FMHA_FROM.get(key, "a release whose check names this GPU's generation (the release notes list "
                                      "the archs each adds)")
    return _first(_make("arch-missing", f"this TensorRT-LLM's FP8 FMHA check does not know the {name} GPU",
                        f"the GPU is {name}, which has FP8 tensor cores, yet the FP8 FMHA arch check of this "
                        "TensorRT-LLM release refuses it: the check (and its kernels) predate the GPU's compute "
                        "capability (0.10 refused Ada, 0.18 the RTX 5090)",
                        f"upgrade TensorRT-LLM to {release} (pip install -U tensorrt_llm, or the matching NGC "
                        "container) and rebuild the engine; until then build it without --use_fp8_context_fmha "
                        "(the FP8 checkpoint still builds with fp16/bf16 attention)",
                        [ctx.line_fact(said[0])], said[:1]))


@rule("attention")
def trtllm_fused_attention(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: TensorRT-LLM named, its fused MHA assertion (Unsupported architecture in fmhaRunner, FP8 FMHA
    cannot be enabled except on ...) or its flag beside a GPU of a generation the kernels do not cover."""
    return _fp8_fmha_refused(ctx) or _context_fmha_before_ampere(ctx)
