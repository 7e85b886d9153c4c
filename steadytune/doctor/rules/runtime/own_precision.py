"""A trainer's own precision handling, not the GPU's: its bf16 check refusing a GPU that computes bf16, a precision
flag it ignores, its precision guard rejecting the format a GPU without bf16 needs; and tensors that reach a
half-precision-only kernel (flash-attention) in fp32. The remedy names the tool (upgrade it) and the format the
machine has."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule
from steadytune.doctor.rules.runtime.precision import _BF16_GPU, _NO_BF16, _OLD_GPU_NAMES
from steadytune.doctor.rules.runtime.shared import _text_of


# trainers with their own precision handling (flags, checks, guards), as a paste names them; the first found is the
# one meant (the most specific: a CLI before the libraries under it); named, or known by its own words and API
# (torchtune's precision message, unsloth's is_bfloat16_supported and FastLanguageModel's full_finetuning)
_TRAINERS = (("torchtune", r"\btorchtune\b|\btune run\b|bf16 precision was requested but not available on this hardware"),
             ("ms-swift", r"(?i)\bms-swift\b|\bswift (?:sft|pt|rlhf|infer)\b"),
             ("unsloth", r"(?i)\bunsloth\b|\bFastLanguageModel\b|\bis_bfloat16_supported\(\)|\bfull_finetuning\s*="),
             ("LLaMA-Factory", r"(?i)llama-?factory|llamafactory-cli"),
             ("axolotl", r"(?i)\baxolotl\b"), ("SimpleTuner", r"(?i)\bsimpletuner\b"),
             ("trl", r"\bSFTTrainer\b|\bSFTConfig\b|\btrl\b"))
# how each is upgraded (their install docs' package names)
_UPGRADE = {"torchtune": "pip install -U torchtune", "ms-swift": "pip install -U ms-swift",
            "unsloth": "pip install -U unsloth unsloth_zoo", "LLaMA-Factory": "git pull; pip install -e . (or pip install -U llamafactory)",
            "axolotl": "pip install -U axolotl", "SimpleTuner": "git pull in SimpleTuner", "trl": "pip install -U trl"}


def _trainer(text: str) -> Optional[str]:
    return next((name for name, pattern in _TRAINERS if re.search(pattern, text)), None)


# a tool refusing bf16 in its own words ("bf16 precision was requested but not available on this hardware", "your
# setup doesn't support bf16", "bf16 is not supported on this device")
_BF16_REFUSED = (r"(?i)\bbf16\b.{0,40}(?:not available|not supported|unsupported|isn.t supported)|"
                 r"(?:doesn.t|does not|don.t) support (?:bf16|bfloat16)")
# torch's own answer that the GPU computes bf16, printed in the paste (the call and True on the same or the next line)
_TORCH_SAYS_BF16 = re.compile(r"(?i)is_bf16_supported\(\)\W{0,20}(?:\n\s*)?(?:>>>\s*)?True\b")
# GPUs that compute bf16, by arch: Ampere and newer, CDNA2 and newer, RDNA3 and newer
_BF16_ARCH = re.compile(r"sm_(?:8\d|9\d|1\d\d)|gfx90a|gfx94\d|gfx95\d|gfx1[12]\d\d")


def _own_bf16_check(ctx: Context) -> Optional[Diagnosis]:
    """A trainer's bf16 check refusing a GPU that torch says computes bf16 (or a GPU known to): the check itself is
    wrong, e.g. torchtune's verify_bf16_support asked for torch.version.cuda >= 11, which is None on ROCm (torchtune
    #801, relaxed for non-CUDA builds by PR 803), and also asks for NCCL 2.10+ where distributed is available (#891)."""
    said = _lines_matching(ctx, _BF16_REFUSED)
    if not said:
        return None
    text = _text_of(ctx)
    archs = [a for a in ctx.sheet.machine_archs if _BF16_ARCH.fullmatch(a)]
    gpu = _BF16_GPU.search(text)
    torch_says = _TORCH_SAYS_BF16.search(text)
    if not (torch_says or archs or gpu):
        return None
    tool = _trainer(text)
    if tool is None:
        return None
    on = gpu.group(0) if gpu else archs[0] if archs else "this GPU"
    own = (" (torchtune's verify_bf16_support required torch.version.cuda >= 11, which is None on a ROCm build)"
           if tool == "torchtune" else "")
    after = ("; torchtune PR 803 relaxed the check for non-CUDA builds, and it still requires NCCL 2.10 or newer where "
             "torch.distributed is available: python -c 'import torch; print(torch.cuda.nccl.version())'"
             if tool == "torchtune" else "")
    return _first(_make("precision", f"{tool}'s own bf16 check refuses a GPU that computes bf16",
                        f"{tool} checks bf16 support by its own test{own}, and that test fails on {on}, although torch "
                        "computes bf16 there" + (" (torch.cuda.is_bf16_supported() says True)" if torch_says else ""),
                        f"upgrade {tool} ({_UPGRADE[tool]}), whose check accepts this GPU{after}; until then keep "
                        "bf16 and skip the tool's check (fp32 only if the upgrade is not possible)", [], said))


# a user saying a precision flag they set to false is not honoured ("fp16 false 无法透传", "--fp16 false is ignored",
# "it still sets fp16=True")
# (a command line's or a YAML file's form: "bf16=False" in Python is accelerate's override, another reading)
_FLAG_OFF = re.compile(r"(?i)(?:--)?\b(fp16|bf16)\b(?::\s*|\s+)(?:false|0)\b")
# trainers driven by their own command line or YAML, which set the trainer's precision themselves
_OWN_FLAGS = ("ms-swift", "LLaMA-Factory", "axolotl", "torchtune")
_NOT_HONOURED = re.compile(r"(?i)无法透传|不能透传|不生效|没有生效|没生效|被(?:指定|设置|强制)为\s*True|仍然是\s*True|"
                           r"\bignor(?:ed|es)\b|not (?:passed|respected|honou?red|forwarded|propagated)|"
                           r"\bstill (?:uses?|set|sets|True|enabled|on)\b|\bforc(?:ed|es)\b|overrid(?:den|es)")


def _flag_ignored(ctx: Context) -> Optional[Diagnosis]:
    """A trainer ignoring the user's precision flag (ms-swift #3896: --fp16 false not passed to TrainingArguments,
    which kept fp16=True on a V100 and gave NaN): the tool's bug, mended in its later releases; on a GPU without bf16
    fp32 is the format to ask for."""
    text = _text_of(ctx)
    off = _FLAG_OFF.search(text)
    said = _lines_matching(ctx, _NOT_HONOURED.pattern)
    tool = _trainer(text)
    if not (off and said) or tool not in _OWN_FLAGS:
        return None
    flag = off.group(1).lower()
    old = _OLD_GPU_NAMES.search(text) or any(_NO_BF16.fullmatch(a) for a in ctx.sheet.machine_archs)
    want = ("fp32 (this GPU has no bf16): --torch_dtype float32 with --" + flag + " false" if old else
            f"--{flag} false with the format you asked for")
    return _make("precision", f"{tool} does not pass {flag} false on to the trainer",
                 f"{tool} sets mixed precision itself and {flag} false on its command line does not reach the "
                 f"trainer's TrainingArguments, so the run stays in {flag}" +
                 (" (where fp16 overflows, the loss and the gradients turn NaN)" if flag == "fp16" else ""),
                 f"upgrade {tool} ({_UPGRADE[tool]}): later releases pass the flag on; then train in {want}",
                 [], said, confirmed=False)


# a traceback raised where the trainer is built (trainer = SFTTrainer(...)), with the precision flags in its frame
_TRAINER_BUILT = re.compile(r"\btrainer\s*=\s*\w*Trainer\(")
_PRECISION_ARGS = re.compile(r"\b(?:fp16|bf16)\s*=")


def _guard_rejects(ctx: Context) -> Optional[Diagnosis]:
    """A trainer's precision guard failing while the trainer is built, on a GPU without bf16 (V100, T4) that asked
    for fp16: the tool's check confuses the model's dtype with the run's (unsloth #4082: a float32 full fine-tune
    taken for bf16 and fp16 refused), fixed in later releases."""
    text = _text_of(ctx)
    built = _lines_matching(ctx, _TRAINER_BUILT.pattern)
    tool = _trainer(text)
    old = _OLD_GPU_NAMES.search(text)
    raised = re.search(r"\b(?:TypeError|ValueError|RuntimeError)\b", text)
    if not (built and tool and old and raised and _PRECISION_ARGS.search(text)) or tool == "trl":
        return None
    return _make("precision", f"{tool}'s precision guard rejects the run on the {old.group(0)}",
                 f"the {old.group(0)} has no bf16, so the run asks for fp16 (or fp32); {tool}'s own check, made when "
                 "the trainer is built, compares the model's dtype with the precision flags and raises for this "
                 "combination (a known bug of its precision guard)",
                 f"upgrade {tool} ({_UPGRADE[tool]}), whose guard accepts it; meanwhile load the model in float16 "
                 "(dtype=torch.float16) with fp16=True, bf16=False, or in float32 with neither flag",
                 [], built, confirmed=False)


# flash-attention's own refusal of fp32 inputs
_FLASH_DTYPE = re.compile(r"(?i)FlashAttention only supports? fp16 and bf16|flash.?attn\w* only supports? (?:fp16|half)")


def _flash_attention_fp32(ctx: Context) -> Optional[Diagnosis]:
    """flash-attention given fp32 tensors: the model or the run is in float32; bf16 (fp16 on a GPU without bf16) is the
    format it needs."""
    said = _lines_matching(ctx, _FLASH_DTYPE.pattern)
    if not said:
        return None
    text = _text_of(ctx)
    tool = _trainer(text)
    old = _OLD_GPU_NAMES.search(text) or any(_NO_BF16.fullmatch(a) for a in ctx.sheet.machine_archs)
    fmt = "fp16 (this GPU has no bf16): fp16 = True" if old else "bf16: bf16 = True (fp16 = True on a GPU without bf16)"
    own = " (unsloth: dtype = None picks the GPU's format when loading)" if tool == "unsloth" else ""
    return _first(_make("precision", "flash-attention was given fp32 tensors",
                        "flash-attention computes in fp16 and bf16 only; the model (or the trainer) ran in float32, so "
                        "its query, key and value reached the kernel as fp32",
                        f"run in {fmt} in the training arguments, and load the model in that format "
                        f"(torch_dtype=torch.bfloat16 / torch.float16){own}; or load with attn_implementation=\"sdpa\" "
                        "to stay in fp32", [], said))


@rule("precision")
def trainer_precision(ctx: Context) -> Optional[Diagnosis]:
    return _flash_attention_fp32(ctx) or _own_bf16_check(ctx) or _flag_ignored(ctx) or _guard_rejects(ctx)
