"""CTranslate2's compute types (faster-whisper, WhisperX, whisper-ctranslate2) on GPUs where one of them fails: the
int8 GEMMs cuBLAS refuses on Blackwell, the float16 arithmetic that gives garbage on GTX 16xx cards. The remedy is
the compute_type the user passes, not the install."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text


# CTranslate2 named, or its own words: "cuBLAS failed with status ..." is its CUBLAS_CHECK message (torch says "CUDA
# error: CUBLAS_STATUS_... when calling cublasGemmEx"), and compute_type is its option (faster-whisper, WhisperX
# --compute_type)
_CT2 = re.compile(r"(?i)ctranslate2|faster[-_ ]?whisper|whisperx|whisper-ctranslate2|\bcompute_type\b|"
                  r"cuBLAS failed with status")
_NOT_SUPPORTED = re.compile(r"cuBLAS failed with status CUBLAS_STATUS_NOT_SUPPORTED")
# Blackwell: data-center sm_100 / sm_103 and GeForce / workstation sm_120 (RTX 50xx, RTX PRO 6000 Blackwell)
_BLACKWELL_ARCH = re.compile(r"sm_1[02]\d")
_BLACKWELL_NAME = re.compile(r"(?i)\bRTX ?50[5-9]0\b|\bRTX ?50\s?xx\b|\bRTX ?50\b|\bRTX PRO \d{4} Blackwell\b|"
                             r"\bBlackwell\b|\bB[23]00\b|\bGB[23]00\b")


def _blackwell(ctx: Context, text: str) -> Optional[str]:
    arch = next((a for a in ctx.sheet.machine_archs if _BLACKWELL_ARCH.fullmatch(a)), None)
    named = _BLACKWELL_NAME.search(text)
    return named.group(0) if named else arch


def _int8_on_blackwell(ctx: Context) -> Optional[Diagnosis]:
    """CTranslate2's int8 compute types (int8, int8_float16, int8_float32, int8_bfloat16; "auto" picks one of them)
    fail on Blackwell in cuBLAS's int8 GEMM with CUBLAS_STATUS_NOT_SUPPORTED, which float16 / bfloat16 / float32 do
    not (OpenNMT/CTranslate2 issue 1865, every int8 type failing and the float types working on an RTX 50xx). Those
    GEMMs need their dimensions padded for sm_120: PR 1937 turned int8 off there, PR 1982 pads them to multiples of
    16 and turns it back on (https://github.com/OpenNMT/CTranslate2/pull/1982)."""
    said = _lines_matching(ctx, _NOT_SUPPORTED)
    text = _text(ctx)
    if not said or not _CT2.search(text):
        return None
    gpu = _blackwell(ctx, text)
    int8 = re.search(r"(?i)\bint8\w*", text)
    if not (gpu or int8):
        return None   # another GPU and no int8 said: nothing ties the refusal to a compute type
    on = f" on {gpu} (Blackwell)" if gpu else ""
    return _make("precision", f"CTranslate2's int8 GEMM is refused{on}",
                 f"the int8 compute types (int8, int8_float16, int8_float32; compute_type=\"auto\" picks one of them "
                 f"on a GPU) run cuBLAS int8 GEMMs whose shapes cuBLAS does not support{on}, so it answers "
                 "CUBLAS_STATUS_NOT_SUPPORTED; the float compute types do not use them",
                 "choose a float compute type: compute_type=\"float16\" (or \"bfloat16\"; faster-whisper / WhisperX: "
                 "--compute_type float16), not int8 or auto; or a CTranslate2 release with the int8 padding fix "
                 "(OpenNMT/CTranslate2 PR 1982), where int8 runs again", [], said[:1])


# GTX 16xx (Turing TU116 / TU117, no tensor cores): fp16 there gives NaN / garbage in several tools (the Stable
# Diffusion web UI's troubleshooting asks for --precision full --no-half on them:
# https://github.com/AUTOMATIC1111/stable-diffusion-webui/wiki/Troubleshooting)
_GTX16 = re.compile(r"(?i)\bGTX ?16[56]0(?: ?(?:Ti|Super))?\b")
_FLOAT16_TYPE = re.compile(r"(?i)\b(?:int8_)?float16\b|\bfp16\b|compute_type\W{0,3}auto\b")
# wrong output, in the words users use: blank or empty text, wrong language, garbage, repeated tokens
_WRONG = re.compile(r"(?i)\b(?:blank|empty|wrong|incorrect|garbage|gibberish|nonsense|garbled|nothing|nan)\b|"
                    r"\bno (?:text|output|transcri\w+)\b|!!!+")


def _float16_on_gtx16(ctx: Context) -> Optional[Diagnosis]:
    """A GTX 16xx running a float16-based compute type (float16, int8_float16) and giving wrong or empty text: the
    card's fp16 arithmetic misbehaves (faster-whisper issue 310: int8_float16 blank on a GTX 1660 Ti, int8 right);
    the compute types without float16 give the right text."""
    text = _text(ctx)
    gpu = _GTX16.search(text)
    if not (gpu and _CT2.search(text) and _FLOAT16_TYPE.search(text)):
        return None
    said = _lines_matching(ctx, _WRONG)
    if not said:
        return None
    return _make("precision", f"float16 compute types give wrong output on the {gpu.group(0)}",
                 f"the {gpu.group(0)} (a GTX 16xx: Turing without tensor cores) gives wrong results in float16, so "
                 "the compute types that compute in float16 (float16, int8_float16, and auto, which picks them) "
                 "return blank or wrong text while the CPU's are right",
                 "load the model with a compute type without float16: compute_type=\"int8\" (or \"int8_float32\"; "
                 "\"float32\" for full precision; faster-whisper / WhisperX: --compute_type int8)", [], said[:1])


# the programs that bundle faster-whisper / CTranslate2 under a name of their own (Subtitle Edit's Whisper menu runs
# Purfview's standalone Faster-Whisper-XXL; Buzz, noScribe, WhisperX, whisper-ctranslate2 load it as a library)
_CT2_APPS = re.compile(r"(?i)subtitle ?edit|purfview|faster-whisper-xxl|whisper-standalone|\bbuzz\b|noscribe|"
                       r"whisperx|whisper-ctranslate2|faster[-_ ]?whisper")
# output that came back empty, in users' words (no error is printed)
_EMPTY = re.compile(r"(?i)\b(?:empty|blank)\b.{0,30}\b(?:file|output|result|subtitle|transcri\w+|text|srt)s?\b|"
                    r"\b(?:file|output|result|subtitle|transcri\w+|text|srt)s?\b.{0,20}\b(?:is |are |comes? (?:back |out )?)?"
                    r"(?:empty|blank)\b|\bno (?:text|subtitles?|output|transcri\w+)\b|\bnothing (?:is )?"
                    r"(?:transcribed|generated|produced|written)")


def _empty_on_blackwell(ctx: Context) -> Optional[Diagnosis]:
    """A program that runs faster-whisper on a Blackwell card returning empty text with no error: the int8 compute
    types its default ("auto", or the app's int8 default) picks fail there (the GEMMs the int8 reading above is about;
    CTranslate2 releases before the padding fix, built for CUDA before 12.8), and the app writes what came back,
    nothing. Subtitle Edit#10129's reporter, an RTX 5070: --compute_type float16 gave text; so did a newer
    faster-whisper."""
    text = _text(ctx)
    gpu = _blackwell(ctx, text)
    app = _CT2_APPS.search(text)
    if not (gpu and app):
        return None
    said = _lines_matching(ctx, _EMPTY)
    if not said or _lines_matching(ctx, _NOT_SUPPORTED):
        return None
    return _make("precision", f"faster-whisper's int8 compute type gives no text on the {gpu} (Blackwell)",
                 f"{app.group(0)} runs faster-whisper (CTranslate2), whose default compute type on a GPU is an int8 "
                 f"one; the CTranslate2 it bundles runs the int8 GEMMs wrongly on the {gpu} (Blackwell, sm_120), so "
                 "the transcription comes back empty without an error",
                 "choose a float compute type: --compute_type float16 (Subtitle Edit: add it to the Whisper "
                 "parameters / advanced settings; in Python WhisperModel(..., compute_type=\"float16\")); or update "
                 "to a faster-whisper / Faster-Whisper-XXL release whose CTranslate2 supports Blackwell "
                 "(pip install -U faster-whisper ctranslate2, CUDA 12.8 builds)", [], said[:1])


@rule("precision")
def ctranslate2_compute_types(ctx: Context) -> Optional[Diagnosis]:
    return _int8_on_blackwell(ctx) or _float16_on_gtx16(ctx) or _empty_on_blackwell(ctx)
