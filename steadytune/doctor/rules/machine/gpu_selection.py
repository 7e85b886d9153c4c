"""Which of the visible GPUs a tool puts the model on: device_map="auto" spreading it over all of them, a loader
keeping it on one of several, a ggml tool's own device list, and torch on ROCm counting GPUs a per-process mask hid."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text, _vendor


def _visibility_variable(ctx: Context) -> str:
    return "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"


# device_map="auto" (or 'auto') in a from_pretrained call or a config
_DEVICE_MAP_AUTO = re.compile(r"device_map\s*[=:]\s*[\"']?auto\b")
# the tensors of one operation on two GPUs, in torch's words or the user's
_TENSORS_SPLIT = re.compile(r"(?i)Expected all tensors to be on the same device|\bcuda:\d and cuda:\d\b|"
                            r"(?:tensors?|张量)\W{0,3}.{0,20}(?:分布在了?|spread (?:over|across)|on)\s*(?:多个|多张|"
                            r"different|multiple|two|several)\s*(?:GPU|device|卡|显卡)")


def _spread_by_device_map(ctx: Context) -> Optional[Diagnosis]:
    """A model loaded with device_map="auto" whose layers land on several GPUs, and an operation that meets tensors
    from two of them (a model's own code that assumes one device): on one GPU the split does not happen."""
    said = _lines_matching(ctx, _TENSORS_SPLIT)
    if not (said and _DEVICE_MAP_AUTO.search(_text(ctx))):
        return None
    name = _visibility_variable(ctx)
    return _make("visibility", "device_map=\"auto\" spreads the model over every visible GPU",
                 "device_map=\"auto\" places the layers on all the GPUs the process sees; an operation whose inputs "
                 "come from layers on two GPUs (code that assumes one device) then fails",
                 f"where the model fits one GPU, let the process see only that one: {name}=0 <the command> (or "
                 "load with device_map={\"\": 0}); to keep several GPUs, update transformers and accelerate (and the "
                 "model's own code, trust_remote_code models: their latest revision), whose device maps keep such "
                 "layers together", [], said)


# several GPUs listed in a visibility variable
_SEVERAL_VISIBLE = re.compile(r"\b(?:CUDA|HIP)_VISIBLE_DEVICES\s*=\s*[\"']?\d+(?:,\d+)+")
# the job still runs on one of them, said in English or Chinese ("can't infer on 4 cards", 只用了一张卡)
_ONE_USED = re.compile(r"(?i)不能\s*\d+\s*卡|只(?:用|使用|跑)了?\s*(?:一|1|单)\s*张|单卡|only (?:uses?|using|runs? on|"
                       r"loads? (?:on|to|onto)) (?:one|1|a single|the first) (?:GPU|card|device)|"
                       r"(?:can.?t|cannot|unable to) (?:use|run on|infer on) (?:all|both|\d+|several|multiple) "
                       r"(?:GPUs|cards)")
_INFERENCE = re.compile(r"(?i)推理|\binfer\w*|\bchat\b|\bwebchat\b|\bapi\b|\bgenerat\w+|\bserv(?:e|ing)\b|"
                        r"\bpredict\w*")


def _loaded_on_one(ctx: Context) -> Optional[Diagnosis]:
    """Several GPUs visible for inference, the model on one of them: the loader placed it on a single device. A
    quantized model is the common case: LLaMA-Factory loads a quantized model on one device unless told
    quantization_device_map: auto (its model arguments; needs bitsandbytes >= 0.43.0)."""
    text = _text(ctx)
    listed = _SEVERAL_VISIBLE.search(text)
    said = _lines_matching(ctx, _ONE_USED)
    if not (listed and said and _INFERENCE.search(text)):
        return None
    count = listed.group(0).count(",") + 1
    return _make("visibility", f"{count} GPUs visible, the model loaded on one",
                 f"{listed.group(0)} makes {count} GPUs visible, but the loader puts the model on a single device: a "
                 "quantized model is placed on one GPU unless its device map says otherwise",
                 "spread the model over the visible GPUs when loading: LLaMA-Factory: quantization_device_map: auto "
                 "for a quantized model (quantization_bit, or a GPTQ / AWQ checkpoint; needs bitsandbytes >= "
                 "0.43.0), an unquantized one is spread already; transformers: from_pretrained(..., "
                 "device_map=\"auto\")", [], said, confirmed=False)


# tools on ggml that choose their devices by ggml's names (llama.cpp's --device / -dev, koboldcpp's --device)
_GGML_TOOLS = (("koboldcpp", r"(?i)\bkobold(?:cpp|\.cpp)?\b", "--device Vulkan0,Vulkan1 (the GUI's device list)"),
               ("llama.cpp", r"(?i)\bllama(?:\.cpp|-server|-cli|_server)\b|\bggml\b",
                "--device CUDA0,CUDA1 (llama-server --list-devices prints the names; -dev for short)"))
# a wish to use some GPUs and not others: "only using the CUDA cards", "ignoring the RX 590", "select specific GPUs"
_CHOOSE = re.compile(r"(?i)\b(?:select(?:ion of)?|choos\w+|pick\w*|exclud\w+|ignor\w+|skip\w*|only us\w+|restrict\w*)"
                     r"\b.{0,40}\b(?:GPUs?|cards?|devices?|RX ?\d{3,4}|RTX ?\d{4}|GTX ?\d{3,4})\b")


def _ggml_devices(ctx: Context) -> Optional[Diagnosis]:
    """A ggml tool on a machine with several GPUs, the user wanting it to use some of them: the tool's own --device
    list picks them by the names ggml prints, whatever vendor each card is (a visibility variable hides only one
    vendor's cards)."""
    text = _text(ctx)
    tool = next(((name, flag) for name, pattern, flag in _GGML_TOOLS if re.search(pattern, text)), None)
    gpus = re.findall(r"(?i)\b(?:RTX|GTX|RX|Radeon|Arc|Tesla)\s?[A-Z]?\d{3,4}\b", text)
    said = _lines_matching(ctx, _CHOOSE)
    if not (tool and said and len(set(g.upper().replace(" ", "") for g in gpus)) >= 2):
        return None
    name, flag = tool
    return _make("visibility", f"{name} uses every GPU unless its device list says otherwise",
                 f"{name} (ggml) takes every GPU its backend finds; its device option keeps only the ones listed, "
                 "by the names it prints at start (CUDA0, Vulkan1, ...)",
                 f"list the GPUs to use with {name}'s own option: {flag}; the cards left out are not touched",
                 [], said, confirmed=False)


# a plain `python script.py` start (no launcher before it on the line) of a training script
# (at a line's start, or after the prompt or the words that introduce it: "$ ", "> ", "如下命令：")
_PLAIN_PYTHON = re.compile(r"(?m)(?:^\W{0,3}|[:：$>]\s*)(?:CUDA_VISIBLE_DEVICES=\S+\s+)?python3?\s+(?:-u\s+)?\S+\.py\b")
_LAUNCHER = re.compile(r"(?i)\baccelerate launch\b|\btorchrun\b|torch\.distributed\.(?:launch|run)\b|\bdeepspeed\b|"
                       r"FORCE_TORCHRUN|\bsrun\b|\bmpirun\b")
_TRAINING = re.compile(r"(?i)\btrain\w*|\bsft\b|\bfine-?tun\w+|--do_train|训练|微调")


def _plain_python_over_several(ctx: Context) -> Optional[Diagnosis]:
    """A training script started with plain `python` while several GPUs are visible, and an operation meeting tensors
    on two of them: without a launcher one process sees every GPU and the model is spread over them (transformers'
    Trainer wraps it in DataParallel, a trainer's loader places layers by device map), where a launcher (accelerate
    launch, torchrun, deepspeed) starts one process per GPU. LLaMA-Factory's README: multi-GPU training goes through
    accelerate / deepspeed (llamafactory-cli with FORCE_TORCHRUN=1 in later releases; its issue 140)."""
    said = _lines_matching(ctx, _TENSORS_SPLIT)
    text = _text(ctx)
    several = _SEVERAL_VISIBLE.search(text) or re.search(r"(?i)多卡|multi-?GPUs?\b|multiple GPUs|several GPUs|"
                                                          r"\b[2-9] ?(?:x ?)?GPUs\b|[2-9两四八]\s*(?:个|张|块)\S{0,8}?"
                                                          r"(?:GPU|显卡|卡)", text)
    if not (said and several and _PLAIN_PYTHON.search(text) and _TRAINING.search(text)) or _LAUNCHER.search(text) \
            or _DEVICE_MAP_AUTO.search(text):
        return None
    name = _visibility_variable(ctx)
    digit = re.search(r"[2-9]", several.group(0))
    count = (several.group(0).count(",") + 1 if "," in several.group(0) else int(digit.group(0)) if digit
             and not several.group(0).startswith(("CUDA", "HIP")) else None)
    procs = str(count) if count else "<number of GPUs>"
    llama = re.search(r"(?i)llama-?factory|llamafactory|src/train\w*\.py", text)
    own = ("; LLaMA-Factory: FORCE_TORCHRUN=1 llamafactory-cli train <config>.yaml in current releases"
           if llama else "")
    one = (f"set {name}=0 (cmd; PowerShell: $env:{name}=\"0\") in the same terminal before python <script>.py, or "
           f"os.environ[\"{name}\"] = \"0\" as the script's first line, before torch is imported"
           if on_windows(ctx, text) else f"{name}=0 python <script>.py ...")
    return _make("visibility", "a plain python start with several GPUs visible",
                 "started with plain python, the training is one process that sees every visible GPU, and the "
                 "model and its inputs end up on different GPUs; multi-GPU training is meant to start one process "
                 "per GPU through a launcher",
                 f"start the script through a launcher: accelerate launch --num_processes {procs} <script>.py ... "
                 f"(after accelerate config), or torchrun --nproc_per_node {procs} <script>.py ..., or deepspeed"
                 f"{own}; to train on one GPU, make only that one visible: {one}",
                 [], said, confirmed=False)


# a wish to keep some GPUs away from a tool: hide one, leave one free for games or the display
_KEEP_FREE = re.compile(r"(?i)\b(?:hid(?:e|ing|den)|disabl\w+|exclud\w+|reserv\w+|keep\w*|leav\w+)\b.{0,30}\b(?:GPU|card)s?\b"
                        r".{0,40}\b(?:free|open|unused|for (?:gaming|games?|the display|my desktop|other)|from being "
                        r"(?:seen|used)|from (?:\w+\.?\w*))|\b(?:hid(?:e|ing)|disabl\w+)\b.{0,12}\b(?:a |the |one |my )?"
                        r"(?:first |top |main |primary )?(?:GPU|card)s?\b")
# several GPUs of one vendor said by count: "3 5090", "two 3090s", "3 GPUs"
_COUNTED = re.compile(r"(?i)\b([2-8]|two|three|four|five|six|seven|eight)\s*(?:x\s*)?(?:(?:RTX|GTX|RX)\s?)?\d{4}s?\b|"
                      r"\b([2-8]|two|three|four|five|six|seven|eight)\s+(?:GPUs|cards)\b")
_NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def _hide_from_a_tool(ctx: Context) -> Optional[Diagnosis]:
    """A user wanting a tool on a machine with several GPUs of one vendor to leave one of them alone (for games, the
    display): the vendor's visibility variable hides it before the tool starts (a GPU the process does not see is
    never used for its main buffers, whatever its split says); its name spelled exactly, set in the same .bat /
    shell that starts the tool (koboldcpp issue 1935: three RTX 5090s, GPU 0 kept for gaming, a wrongly named
    variable tried)."""
    said = _lines_matching(ctx, _KEEP_FREE)
    text = _text(ctx)
    counted = _COUNTED.search(text)
    if not (said and counted):
        return None
    vendors = {v for v, p in (("nvidia", r"(?i)\b(?:RTX|GTX|NVIDIA|CUDA|Tesla)\b|\b\d0[5-9]0\b"),
                              ("amd", r"(?i)\b(?:Radeon|RX ?\d{4}|AMD|ROCm)\b"), ("intel", r"(?i)\bArc\b"))
               if re.search(p, text)}
    if len(vendors) > 1:
        return None   # cards of several vendors: the ggml device list (_ggml_devices) picks among them
    number = counted.group(1) or counted.group(2)
    count = int(number) if number.isdigit() else _NUMBERS[number.lower()]
    name = "HIP_VISIBLE_DEVICES" if vendors == {"amd"} else "CUDA_VISIBLE_DEVICES"
    keep = ",".join(str(i) for i in range(1, count))
    windows = on_windows(ctx, text) or re.search(r"(?i)\.bat\b|\bbat files?\b|\.exe\b|\bcmd\b|powershell", text)
    how = (f"set {name}={keep} on its own line of the .bat before the program starts (PowerShell: $env:{name}=\"{keep}\")"
           if windows else f"{name}={keep} <the command> (or export {name}={keep} before it)")
    tool = next((n for n, pattern, _flag in _GGML_TOOLS if re.search(pattern, text)), None)
    own = f"; {tool} can also pick them itself with its --device list (the names it prints at start)" if tool else ""
    return _make("visibility", "hide the GPU the tool must leave alone",
                 f"the tool uses every GPU it sees and keeps its main buffers on the first one; {name} decides which "
                 "GPUs the process sees (by index, the order nvidia-smi / rocm-smi list them), and only the exact "
                 "name set before the program starts works",
                 f"hide GPU 0 and keep the others: {how}; inside the program the GPUs left are numbered from 0 again"
                 + own, [], said, confirmed=False)


# a per-process visibility mask the user says torch does not respect, on AMD (schedulers and SLURM set
# ROCR_VISIBLE_DEVICES)
_MASK_IGNORED = re.compile(r"(?i)(?:VISIBLE_DEVICES|visible devices|GPU isolation)\b.{0,60}(?:not (?:respected|honou?red|"
                           r"obeyed)|ignored|still (?:tries|sees|uses|finds|counts))|(?:not respect\w*|ignor\w+)\b.{0,30}"
                           r"(?:VISIBLE_DEVICES|visible devices)|\ball the devices it finds\b")


def _rocr_mask_ignored(ctx: Context) -> Optional[Diagnosis]:
    """torch on ROCm counting GPUs the process's mask hid: torch 2.5 counted devices (through amdsmi) honouring
    HIP_VISIBLE_DEVICES only, not ROCR_VISIBLE_DEVICES, so calls over every device (manual_seed_all) reach GPUs the
    process cannot use; pytorch PR 142292 (issue 140318) made the count honour ROCR_VISIBLE_DEVICES."""
    text = _text(ctx)
    said = _lines_matching(ctx, _MASK_IGNORED)
    amd = _vendor(ctx) == "amd" or re.search(r"(?i)\bAMD\b|\bROCm\b|ROCR_VISIBLE|\bMI[23]\d\dX?\b", text)
    if not (said and amd and re.search(r"(?i)\btorch\b|\bPyTorch\b", text)):
        return None
    return _make("visibility", "torch counts the AMD GPUs the process's mask hid",
                 "the scheduler confines each process with ROCR_VISIBLE_DEVICES; torch 2.5 counts GPUs honouring only "
                 "HIP_VISIBLE_DEVICES, so it counts the masked ones too, and calls over every device "
                 "(torch.cuda.manual_seed_all, device_count) reach GPUs this process cannot use",
                 "set HIP_VISIBLE_DEVICES=0 in each process beside the scheduler's ROCR_VISIBLE_DEVICES (the one GPU "
                 "it left, counted from 0), or upgrade torch to a release whose count honours ROCR_VISIBLE_DEVICES "
                 "(pytorch PR 142292; 2.6 or newer)", [], said)


@rule("visibility")
def gpu_selection(ctx: Context) -> Optional[Diagnosis]:
    return (_rocr_mask_ignored(ctx) or _spread_by_device_map(ctx) or _plain_python_over_several(ctx)
            or _loaded_on_one(ctx) or _ggml_devices(ctx) or _hide_from_a_tool(ctx))
