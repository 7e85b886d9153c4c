"""Which GPUs a tool uses when the machine has several, and the user says it takes the wrong ones (visibility):

  Ollama's scheduler   puts a model on one GPU when it fits (OLLAMA_SCHED_SPREAD=1 spreads it over all)
  Ollama's devices     CUDA_VISIBLE_DEVICES is the server's, by UUID, and 0.30+'s Vulkan backend ignores it
  a launch's GPUs      "how do I choose the GPUs": the visibility variable on the launch (accelerate's --gpu_ids)
  Ray's resources      a Ray task or actor sees only the GPUs it requested (num_gpus)
  ROCm's layers        an index counted in the wrong layer of ROCR / HIP / CUDA_VISIBLE_DEVICES leaves no GPU
  a choice not taken   the variable chooses GPU N, yet the user sees the work on another GPU and N empty: the
                       variable never reached the process (misspelled, set after torch started, dropped by sudo)

Facts: Ollama's FAQ ("How does Ollama load models on multiple GPUs?": a model that fits one GPU goes on one GPU) and
its server variables (OLLAMA_SCHED_SPREAD: schedule the model across all GPUs); Ollama's GPU docs (CUDA_VISIBLE_DEVICES
numeric IDs may be ordered differently, UUIDs from `nvidia-smi -L` are reliable); the Ollama maintainers' answer on
ollama/ollama#16592 and #17609 (OLLAMA_VULKAN=0 turns the Vulkan backend off, which otherwise takes the GPUs that
CUDA_VISIBLE_DEVICES hides from the CUDA backend); accelerate's `launch --gpu_ids`; Ray's accelerator docs (Ray sets
CUDA_VISIBLE_DEVICES in a task or actor to the GPUs it reserved for it; ray.get_gpu_ids() lists them); ROCm's
GPU isolation docs (ROCR_VISIBLE_DEVICES filters first, HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES index what is left)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import set_variable
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, _vendor, rule

_OLLAMA = re.compile(r"(?i)\bollama\b")
# several GPUs said: "four 4090 GPUs", "Dual RTX 3090's", "multiple GPUs", "2x RTX 3090", "三张卡"
_SEVERAL_GPUS = re.compile(r"(?i)\b(?:dual|multiple|several|two|three|four|five|six|seven|eight|[2-8])\s*[x×]?\s*"
                           r"(?:[\w-]+\s+){0,3}?(?:GPU|card|[A-Z]*\d{3,4}(?: ?Ti)?)'?s\b|\b[2-8]\s*[x×]\s*"
                           r"(?:[\w-]+\s+){0,2}?[A-Z]*\d{3,4}\b|多卡|[两三四五六七八]张(?:卡|显卡)")
# the model kept on fewer GPUs than the machine has, or spilled onto the CPU beside them
_NOT_SPREAD = re.compile(r"(?i)\bonly (?:one|1|a single) (?:GPU|card)\b|\bonly uses? (?:one|1|a single|the first)\b|"
                         r"\b(?:cannot|can't|can not|unable to) use (?:them |all )?(?:all|both)\b|\bnot (?:fully |all )?"
                         r"(?:being )?(?:fully )?utili[sz]ed|\bsplit\w* between (?:the )?CPU and (?:the )?GPU|"
                         r"\d+%/\d+% CPU/GPU|只用了?一张")
# a GPU choice said not to be honoured by the server
_CHOICE_NOT_HONOURED = re.compile(r"(?i)\balways (?:uses?|utili[sz]es|shows?|loads?|picks?|runs? on|goes to)\b|"
                                  r"\bregardless\b|\bdoes ?n[o']?t work\b|\bnot (?:respected|honou?red|working|"
                                  r"applied)\b|\bignor\w+|总(?:是)?在|始终|一直在|还是|仍然|依然|无效|不生效|不起作用|\ball (?:the )?(?:cards|GPUs)\b.{0,20}\b(?:finds|it sees|used)")
_VISIBLE_NAME = re.compile(r"\b(CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES)\b")


def _ollama_spread(ctx: Context, text: str) -> Optional[Diagnosis]:
    """Several GPUs, Ollama, and the model on one of them (or partly on the CPU): the scheduler's choice, not a
    fault; OLLAMA_SCHED_SPREAD=1 makes it use every GPU."""
    said = _lines_matching(ctx, _NOT_SPREAD.pattern)
    if not said or not _SEVERAL_GPUS.search(text) or ctx.errors:
        return None
    return _make("visibility", "Ollama keeps the model on fewer GPUs than the machine has",
                 "Ollama's scheduler puts a model on a single GPU when it fits there (spreading it gives no speed-up), "
                 "and fits what does not fit one GPU by its own estimate, spilling the rest onto the CPU; the other "
                 "GPUs stay idle", set_variable("OLLAMA_SCHED_SPREAD", "1", ctx.sheet, "ollama") +
                 " (OLLAMA_SCHED_SPREAD=1 schedules every model across all GPUs; keep CUDA_VISIBLE_DEVICES, if set, "
                 "listing all of them), then reload the model and check `ollama ps` shows 100% GPU", [], said[:2],
                 confirmed=False)


def _ollama_devices_ignored(ctx: Context, text: str) -> Optional[Diagnosis]:
    """A visibility variable set for Ollama that the user says it ignores (all cards used, always the same one)."""
    name = _VISIBLE_NAME.search(text)
    said = _lines_matching(ctx, _CHOICE_NOT_HONOURED.pattern)
    if name is None or not said:
        return None
    variable = name.group(1)
    amd = variable != "CUDA_VISIBLE_DEVICES" or _vendor(ctx) == "amd"
    listing = "rocminfo | grep -i uuid" if amd else "nvidia-smi -L"
    return _first(_make("visibility", f"{variable} does not confine Ollama",
                        f"{variable} is read by the Ollama server when it starts, not by `ollama run` (a client: "
                        "exporting it there does nothing); numeric indices may be ordered differently from "
                        f"{listing.split()[0]}'s; and Ollama 0.30+ also runs a Vulkan backend, which ignores {variable} "
                        "and takes the GPUs it hides",
                        f"set it in the server's environment by the GPU's UUID ({listing} prints them): "
                        f"{set_variable(variable, 'GPU-<uuid>', ctx.sheet, 'ollama')}; and turn the Vulkan backend "
                        "off the same way (OLLAMA_VULKAN=0); then check the server log's inference compute lines "
                        "list only the chosen GPUs", [], said[:2], confirmed=False))


_WHICH_GPUS = re.compile(r"(?i)\bhow (?:to|can I|do I|can we|should I) (?:set|choose|select|specify|pick|restrict|"
                         r"limit)\b.{0,25}\b(?:visible devices|GPUs|cards|devices|which (?:GPU|card|device))\b|\bhow "
                         r"(?:to|can I|do I|can we) use (?:only )?(?:specific|certain|particular|some of the|a subset of "
                         r"the) GPUs\b|\bonly \d+ (?:of (?:the|my|"
                         r"them) )?GPUs? (?:can|should|may|are free to) be used\b|\buse only (?:the )?(?:GPUs? )?\d")


def _which_gpus_asked(ctx: Context, text: str) -> Optional[Diagnosis]:
    """A question how to run on some of the machine's GPUs (the launcher takes the first N by default): the
    visibility variable on the launch command; the processes number the chosen GPUs from 0."""
    said = _lines_matching(ctx, _WHICH_GPUS.pattern)
    if not said or ctx.errors or re.search(r"(?i)\bZLUDA\b", text) or _OLLAMA.search(text):
        return None
    name = "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
    ids = "<the free GPUs' indices, e.g. 3,4,5,6,7>"
    return _make("visibility", "the GPUs a launch uses are chosen by the visibility variable",
                 "a launcher (accelerate launch, torchrun, deepspeed) starts its processes on GPU 0, 1, ... of the GPUs "
                 f"it sees, so it takes the first ones unless {name} narrows what it sees",
                 f"{name}={ids} <the launch command> (accelerate launch: or --gpu_ids with the same list; deepspeed: "
                 f"--include localhost:<the list>); the processes then number those GPUs from 0, and --num_processes "
                 "must not exceed how many are listed", [], said[:1], confirmed=False)


_RAY = re.compile(r"(?i)\bray\.(?:init|remote|get_gpu_ids)\b|\bRay\b(?!\s*tracing)|\bRLlib\b|\bray\s*(?:==|=)\s*\d")
_RAY_NO_GPU = re.compile(r"(?i)get_gpu_ids\(\).{0,40}(?:\[\]|empty)|^\W*(?:#\s*)?prints?\s*\[\]|"
                         r"\b(?:not|n't|never) (?:finding|find|seeing|see|detecting|detect|using|use)s? (?:any |the )?"
                         r"(?:GPU|of them)|devices \['/cpu:0'\]")


def _ray_gpus_not_requested(ctx: Context, text: str) -> Optional[Diagnosis]:
    """Ray and a GPU it does not give: Ray assigns GPUs per task or actor by its request, and sets CUDA_VISIBLE_DEVICES
    in it to those; one that asked for none (or the driver script) sees no GPU, whatever torch sees outside Ray."""
    said = _lines_matching(ctx, _RAY_NO_GPU.pattern)
    if not said or not _RAY.search(text) or any(e.family not in (None, "visibility") for e in ctx.errors):
        return None
    return _make("visibility", "Ray gives a task or actor only the GPUs it requests",
                 "Ray reserves GPUs per task or actor by their num_gpus request and sets CUDA_VISIBLE_DEVICES in each "
                 "to the reserved ones; ray.init(num_gpus=N) only says how many the node has, so work that requested "
                 "none runs with no GPU (ray.get_gpu_ids() is [])",
                 "request the GPUs where the work runs: @ray.remote(num_gpus=1) on the task or actor, num_gpus in the "
                 "RLlib trainer config (config={\"num_gpus\": 2}), ScalingConfig(use_gpu=True) in Ray Train; check "
                 "inside it that ray.get_gpu_ids() is not empty", [], said[:2], confirmed=False)


_NONE_LEFT = re.compile(r"(?i)no usable HIP accelerator|No HIP GPUs are available|no GPU backend available|"
                        r"device_count\(\)\W{0,4}(?:=+|returns?|is|->)\s*0\b|hipErrorNoDevice")


def _index_in_the_wrong_layer(ctx: Context, text: str) -> Optional[Diagnosis]:
    """ROCm: a GPU chosen by an index other than 0 (HIP_ / CUDA_VISIBLE_DEVICES=1) on a machine of several GPUs,
    and the runtime then finds none: the index is counted among what ROCR_VISIBLE_DEVICES (set by the tool, a
    launcher, a container) already left, renumbered from 0, so it points past the end."""
    if _vendor(ctx) != "amd" or not _SEVERAL_GPUS.search(text):
        return None
    chosen = [f for f in ctx.sheet.of("env") if f.value.split("=", 1)[0] in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
              and re.fullmatch(r"\d+(?:,\d+)*", f.value.split("=", 1)[1]) and f.value.split("=", 1)[1] != "0"]
    none = _lines_matching(ctx, _NONE_LEFT.pattern)
    if not chosen or not none or any(f.value.startswith("ROCR_VISIBLE_DEVICES=") for f in ctx.sheet.of("env")):
        return None   # (both layers said: machine/visibility.py's two-layer reading names them)
    value = chosen[-1].value.split("=", 1)[1]
    return _make("visibility", "the GPU index is counted in the wrong visibility layer",
                 f"on ROCm ROCR_VISIBLE_DEVICES filters the GPUs first and HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES "
                 f"index what it left, renumbered from 0; with the ROCR layer already narrowed (the tool setting all "
                 f"three to {value}, a launcher or container setting it), index {value} points past the end and no GPU "
                 "is left", f"choose the GPU in one layer only: ROCR_VISIBLE_DEVICES={value} with HIP_VISIBLE_DEVICES "
                 "and CUDA_VISIBLE_DEVICES unset, or leave ROCR_VISIBLE_DEVICES as the launcher set it and count "
                 "HIP_VISIBLE_DEVICES from 0 among what it left; `env | grep VISIBLE` in the failing process shows "
                 "what is set", [chosen[-1]], none)


# the user's view of which GPU the work went to: "nothing is on GPU=1", "GPU 1 is empty", "only GPU=0 is filled"
_IDLE_GPU = re.compile(r"(?i)\bnothing (?:is )?(?:on|in) (?:GPU|cuda|device)\W{0,2}(\d)\b|\b(?:GPU|cuda|device)\W{0,2}(\d) "
                       r"(?:is|stays|remains) (?:empty|idle|unused|free)\b")
_BUSY_GPU = re.compile(r"(?i)\bonly (?:GPU|cuda|device)\W{0,2}(\d) (?:is |gets )?(?:filled|used|full|busy|loaded)\b|"
                       r"\b(?:still|instead) (?:runs|loads|goes|uses|allocates)\w* (?:on |to )?(?:GPU|cuda|device)\W{0,2}(\d)\b")


def _choice_not_taken(ctx: Context, text: str) -> Optional[Diagnosis]:
    """A GPU chosen by CUDA_ / HIP_VISIBLE_DEVICES=N, and the user sees GPU N idle and another one used: inside the
    process the variable is not what the shell shows (a misspelled name, an export after torch initialised CUDA, sudo
    or a launcher dropping the environment), so CUDA numbers the GPUs as usual and GPU 0 takes the work."""
    chosen = [f for f in ctx.sheet.of("env") if f.value.split("=", 1)[0] in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
              and re.fullmatch(r"\d+", f.value.split("=", 1)[1])]
    if not chosen:
        return None
    value = chosen[-1].value.split("=", 1)[1]
    idle = [m for m in _IDLE_GPU.finditer(text) if (m.group(1) or m.group(2)) == value]
    busy = [m for m in _BUSY_GPU.finditer(text) if (m.group(1) or m.group(2)) != value]
    if not idle and not busy:
        return None
    name = chosen[-1].value.split("=", 1)[0]
    said = _lines_matching(ctx, _IDLE_GPU if idle else _BUSY_GPU)[:1]
    return _first(_make(
        "visibility", f"{name}={value} is not in effect in the process",
        f"the paste sets {name}={value}, yet GPU {value} stays idle and the work lands on another GPU: the process "
        "numbers the GPUs as if the variable were unset (its name misspelled where it was really set, exported after "
        "torch had initialised the GPU, or dropped by sudo or a launcher), so it fills a GPU another job already uses",
        f"set it on the command itself: {name}={value} <the command> (spelled exactly {name}); check it inside the "
        f"process (python -c \"import os; print(os.environ.get('{name}'))\" in the same shell; nvidia-smi / rocm-smi "
        f"should then show the process on GPU {value}); in Python set os.environ['{name}'] before importing torch",
        [chosen[-1]], said))


@rule("visibility")
def gpu_choice(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if _OLLAMA.search(text):
        return _ollama_devices_ignored(ctx, text) or _ollama_spread(ctx, text)
    return _index_in_the_wrong_layer(ctx, text) or _ray_gpus_not_requested(ctx, text) or \
        _choice_not_taken(ctx, text) or _which_gpus_asked(ctx, text)
