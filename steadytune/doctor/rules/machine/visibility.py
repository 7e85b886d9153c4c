"""Which GPUs a process sees: the visibility variables in force (misspelt, rewritten by Ray, indexing
GPUs the machine lacks), the order CUDA numbers mixed cards in, a second GPU without code in the build or a Vulkan
layer listed beside the GPU, a tool that takes GPU 0 whatever was chosen."""

from __future__ import annotations

import re
from difflib import get_close_matches
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import set_variable
from steadytune.hardware.gpu_facts import arch_info, OFFICIAL_WHEEL_ARCHS, override_for_arch
from steadytune.doctor.rules.base import (_arch_fact, _catalogue, _CONTAINED, Context, Diagnosis, _first,
                                          _lines_matching, _make, OVERRIDE, _restate, rule, _text, _vendor)


def _visible(ctx: Context) -> dict[str, Fact]:
    """The visibility variables the paste sets, by name (the last setting of each)."""
    found = {}
    for fact in ctx.sheet.of("env"):
        name, value = fact.value.split("=", 1)
        if name.endswith("_VISIBLE_DEVICES") and value:
            found[name] = fact
    return found


_KNOWN_VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
# a name that is almost one of them (CUDA_VISABLE_DEVICES, CUDA_VISIBLE_DEVICE, CUDA_VISIBLE_DEVICS): the runtime
# reads only the exact name, so a misspelt one is an ordinary variable nobody reads
_VISIBLE_LIKE = re.compile(r"\b((?:CUDA|HIP|ROCR)_VI\w*?_?DEV\w*|(?:CUDA|HIP|ROCR)_\w*VISI\w*)\s*[=:]\s*[\"']?([\d,]+)")


def _nvidia_named(ctx: Context) -> bool:
    return any(a.startswith("sm_") for a in ctx.sheet.machine_archs)


def _misspelt_visibility(ctx: Context) -> Optional[Diagnosis]:
    for n, line in enumerate(ctx.sheet.lines, 1):
        for m in _VISIBLE_LIKE.finditer(line):
            name, value = m.group(1), m.group(2).strip(",")
            if name in _KNOWN_VISIBLE or not value:
                continue
            meant = get_close_matches(name, _KNOWN_VISIBLE, n=1, cutoff=0.8)
            if not meant:
                continue
            evidence = Fact("env", f"{name}={value}", n, line.strip(), "misspelt")
            return _first(_make("visibility", f"{name} is not a variable the runtime reads",
                                f"{name} is a misspelling of {meant[0]}: the runtime ignores it, so the process sees "
                                "every GPU and loads onto GPU 0 (or all of them)",
                                f"spell it {meant[0]}={value} (export {meant[0]}={value}, or {meant[0]}={value} in "
                                "front of the command that starts the tool)", [evidence],
                                [ErrorLine(n, line.strip(), None)]))
    return None


# the user saying a GPU choice is not honoured: the tool takes GPU 0 (or every GPU) whatever was set
_CHOICE_IGNORED = re.compile(r"(?i)(?:always|still|only|defaults? to|regardless|ignor\w+|not (?:working|respected|"
                             r"honou?red)|doesn.t work|does not work|仍然|还是|依然|总是|无效|不起作用|没用)")
_GPU_CHOICE = re.compile(r"\b(?:CUDA|HIP|ROCR)_VISIBLE_DEVICES\b|\bgpu_ids\b|指定.{0,10}(?:显卡|GPU|卡)")


def _choice_ignored(ctx: Context) -> Optional[Diagnosis]:
    """A GPU chosen (a visibility variable, accelerate's gpu_ids) that the user says the tool ignores: the variable
    was set where, or when, the process does not read it (another shell line, after the import that starts CUDA, a
    launcher that does not pass it on)."""
    text = _text(ctx)
    if not _GPU_CHOICE.search(text):
        return None
    said = _lines_matching(ctx, r"(?i)(?:" + _CHOICE_IGNORED.pattern[4:] + r").{0,80}(?:GPU|显卡|卡|device|cuda:?\s?\d)|"
                           r"(?:GPU|显卡|device|gpu_ids|VISIBLE_DEVICES).{0,80}(?:" + _CHOICE_IGNORED.pattern[4:] + ")")
    # the complaint is about which GPU runs: an index, every GPU, the first one
    said = [e for e in said if re.search(r"(?i)gpu_ids|(?:\b(?:uses?|using|used|runs?|running|ran|starts?|started|"
                                        r"loads?|loading|loaded|trains?|training|defaults? to|goes to|puts?|placed|"
                                        r"allocat\w*)\b|用的|用|加载到|跑在|报错说)\W{0,3}(?:\w+\W+){0,3}?(?:GPU ?#?\d|"
                                        r"cuda:?\s?\d|\d号|(?:all|every|both|first|other|wrong|same) (?:the )?"
                                        r"(?:GPUs?|cards?)|所有|第一张|device ?\d)", e.line)]
    if not said:
        return None
    tool = ctx.tool()
    if re.search(r"(?i)\bollama\b", text):
        return None   # a server's variable, not the client command's: gpu_choice's Ollama reading
    ids = re.search(r"(?m)^\s*gpu_ids:\s*([\d, ]+)$", text)
    chosen = next((f.value.split("=", 1)[1] for f in reversed(ctx.sheet.of("env"))
                   if f.value.split("=", 1)[0] in _KNOWN_VISIBLE[:3] and f.value.split("=", 1)[1]), None)
    value = (ids.group(1).replace(" ", "") if ids else None) or chosen or "<the GPU index>"
    name = "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
    if ids:
        return _make("visibility", "accelerate's gpu_ids did not reach the processes",
                     f"the config's gpu_ids: {value} is applied by accelerate launch through {name}; where that "
                     "step is skipped (a launcher version that ignores gpu_ids on this setup) every process starts on "
                     "GPU 0, 1, ...",
                     f"export {name}={value} in the same shell before accelerate launch ({name}={value} accelerate "
                     "launch --config_file ... train.py), or upgrade accelerate (pip install -U accelerate)",
                     [], said)
    where = f" before importing {tool} or torch" if tool not in (None, "torch") else " before import torch"
    return _make("visibility", f"the GPU choice does not reach {tool or 'the process'}",
                 "CUDA/HIP read the visibility variable once, when the process first touches the GPU; one exported "
                 "in another shell or a later line, or set in the script after the import that starts CUDA, is "
                 "never seen, so the tool takes GPU 0",
                 f"put it on the command that starts the job: {name}={value} <the command> (a Python script: "
                 f"os.environ[\"{name}\"] = \"{value}\" as its first lines,{where}; add "
                 "CUDA_DEVICE_ORDER=PCI_BUS_ID so the index is nvidia-smi's), then check with nvidia-smi which GPU "
                 "it uses", [], said)


# a Vulkan device that is a translation layer over another (Mesa's Dozen over Direct3D 12) or the CPU (llvmpipe):
# ggml lists it beside the real GPU and splits the model over both
_VK_DEVICE = re.compile(r"^\W*(?:ggml_vulkan:\s*)?Vulkan(\d+):\s*([^|\n]*[^|\s])")
_VK_LAYERED = re.compile(r"(?i)\(Dozen\)|Microsoft Direct3D ?12|\bllvmpipe\b|\bSwiftShader\b|\blavapipe\b")


def _vulkan_layered_twin(ctx: Context) -> Optional[Diagnosis]:
    """ggml's Vulkan backend lists every Vulkan device, and on Windows Mesa's Dozen layer shows the same card again
    through Direct3D 12 (on Linux, llvmpipe shows the CPU): it uses them all, and the layered one fails or crawls.
    GGML_VK_VISIBLE_DEVICES keeps only the real GPU (ggml's own variable, by the index it prints)."""
    devices = [(n, m.group(1), m.group(2)) for n, line in enumerate(ctx.sheet.lines, 1)
               if (m := _VK_DEVICE.search(line))]
    layered = [d for d in devices if _VK_LAYERED.search(d[2])]
    real = [d for d in devices if not _VK_LAYERED.search(d[2])]
    if not layered or not real:
        return None
    keep = ",".join(dict.fromkeys(d[1] for d in real))
    setting = (f"$env:GGML_VK_VISIBLE_DEVICES={keep} (PowerShell; cmd: set GGML_VK_VISIBLE_DEVICES={keep})"
               if ctx.sheet.is_windows or re.search(r"(?i)\.exe\b|Direct3D|windows", _text(ctx)) else
               f"export GGML_VK_VISIBLE_DEVICES={keep}")
    return _make("visibility", "the same GPU is listed twice, once through a translation layer",
                 f"the Vulkan loader lists {real[0][2]} and also {layered[0][2]}, a layer over another device "
                 "(Mesa's Dozen over Direct3D 12, or a CPU renderer); llama.cpp uses every device it lists, and the "
                 "layered one fails",
                 f"keep only the real GPU: {setting} before starting; or remove the layer (uninstall the Mesa "
                 "Dozen / OpenCL-and-Vulkan compatibility pack, or the mesa-vulkan llvmpipe driver)",
                 [ctx.line_fact(ErrorLine(layered[0][0], ctx.sheet.lines[layered[0][0] - 1].strip(), None))],
                 [ErrorLine(d[0], ctx.sheet.lines[d[0] - 1].strip(), None) for d in devices])


# HIP's "Module not initialized" (hip_global.cpp): a kernel module was not loaded on the device the call runs on,
# which is what a second visible GPU without code in the build (a Ryzen's iGPU, gfx1036 / gfx103x) gives
_MODULE_NOT_LOADED = r"(?i)hip_global\.cpp.{0,60}Module not initialized|\bModule not initialized\b"


def _module_not_loaded_on_a_second_gpu(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _MODULE_NOT_LOADED)
    if not said or _nvidia_named(ctx) or not (_vendor(ctx) == "amd" or re.search(r"hip_global\.cpp", _text(ctx))):
        return None
    archs = ctx.sheet.machine_archs
    igpu = next((a for a in archs if arch_info(a) and arch_info(a).kind == "apu"), None)
    card = next((a for a in archs if a.startswith("gfx") and a != igpu), None)
    who = f" ({igpu})" if igpu else " (a Ryzen 7000 / 9000 CPU has one: gfx1036)"
    return _make("visibility", "a second GPU without code for this build is visible",
                 "HIP says a module was never loaded on the device the kernel ran on: the build's code objects cover "
                 f"the card{' (' + card + ')' if card else ''} but not another visible GPU, most often the CPU's "
                 f"integrated GPU{who}, which the run (a DataLoader, AMP, a second device) also touches",
                 "hide everything but the card: export HIP_VISIBLE_DEVICES=0 (rocminfo lists the agents in order: "
                 "use the card's index) before starting, or disable the iGPU in the BIOS",
                 [ctx.line_fact(said[0])], said, confirmed=False)


# NVIDIA models by name, to tell a machine of mixed cards (CUDA numbers them fastest first, nvidia-smi by PCI bus)
_NVIDIA_MODEL = re.compile(r"(?i)(?<![a-z0-9])(A100|A800|H100|H800|H200|L40S?|A6000|A40|A10G?|V100|T4|P40|P100|"
                           r"(?:RTX ?)?[2345]0[5-9]0(?: ?Ti)?|GTX ?1[0-6][5-8]0(?: ?Ti)?|TITAN ?\w+)(?![a-z0-9])")
# the user says the job still lands on another card than the one chosen
_WRONG_CARD = re.compile(r"(?i)(?:一直|总是|还是|都)\W{0,2}(?:在|用|跑在|加载到)?\W{0,2}(?:0号|第一张|另一张)|"
                         r"\b(?:always|still|only)\b.{0,30}\b(?:GPU ?0|cuda:0|card 0|first (?:GPU|card)|other (?:GPU|card))\b|"
                         r"\bwrong (?:GPU|card)\b|"
                         # the card CUDA picks against nvidia-smi's numbering (CUDA's notes: FASTEST_FIRST) - t17b
                         r"\b(?:picks?|selects?|gets?|lands? on|runs? on|uses)\b.{0,40}\bbut nvidia-smi\b.{0,40}"
                         r"\b(?:as|is) (?:GPU|device|card) ?(?:#|no\.? ?)?\d")


def _device_order(ctx: Context) -> Optional[Diagnosis]:
    """A machine of mixed NVIDIA cards, a GPU chosen by index, and the job on another card than meant: CUDA numbers
    the GPUs fastest first (CUDA_DEVICE_ORDER=FASTEST_FIRST, its default), nvidia-smi and nvtop by PCI bus, so the
    index read from nvidia-smi picks another card. The user's complaint is the cause; an OOM on the small card
    that follows is its symptom, so this reading leads."""
    visible = _visible(ctx).get("CUDA_VISIBLE_DEVICES")
    text = _text(ctx)
    models = {re.sub(r"(?i)rtx ?| ?ti", "", m.upper()) for m in _NVIDIA_MODEL.findall(text)}
    said = _lines_matching(ctx, _WRONG_CARD.pattern)
    if visible is None or len(models) < 2 or not said or re.search(r"CUDA_DEVICE_ORDER\s*=\s*PCI_BUS_ID", text):
        return None
    value = visible.value.split("=", 1)[1]
    return _first(_make("visibility", "CUDA numbers mixed GPUs in another order than nvidia-smi",
                        f"with different cards ({', '.join(sorted(models))}) CUDA orders them fastest first, while "
                        "nvidia-smi / nvtop list them by PCI bus; the index taken from nvidia-smi "
                        f"(CUDA_VISIBLE_DEVICES={value}) selects another card in CUDA's order",
                        f"export CUDA_DEVICE_ORDER=PCI_BUS_ID together with CUDA_VISIBLE_DEVICES={value}, so the "
                        "indices are nvidia-smi's; check with python -c \"import torch; "
                        "print(torch.cuda.get_device_name(0))\"", [visible], said[:1]))


# round 20 (r20a): CUDA's own list of the devices (ggml's "Device 1: Quadro K620, compute capability 5.0", a runtime's
# "cuda:1 NVIDIA ...") showing a card the user chose against (a GPU selector, "unselect", "assigned to GPU 1"): the
# choice was made by nvidia-smi's PCI order and applied in CUDA's fastest-first one (gpustack/gpustack#3744: three mixed
# cards, the K620 handed to the model; CUDA_DEVICE_ORDER=PCI_BUS_ID on the container fixed it)
_CUDA_LIST = re.compile(r"(?i)\bDevice (\d+): (?:NVIDIA )?([^,\n]+?), compute capability (\d+\.\d+)")
_CHOSE = re.compile(r"(?i)\b(?:gpu[ _-]?selector|selected|select|unselect\w*|deselect\w*|assign\w*|chose|chosen|"
                    r"picks?|pinned)\b")


def _device_order_listed(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    listed = _CUDA_LIST.findall(text)
    if len({name.strip() for _n, name, _cc in listed}) < 2 or len({cc for _n, _name, cc in listed}) < 2:
        return None
    said = _lines_matching(ctx, _CHOSE)
    if not said or re.search(r"CUDA_DEVICE_ORDER\s*=\s*PCI_BUS_ID", text) or re.search(r"(?i)\bamd\b|rocm|\bhip\b", text):
        return None
    cards = ", ".join(f"{n}: {name.strip()} ({cc})" for n, name, cc in listed)
    inside = bool(re.search(r"(?i)\bdocker\b|\bcontainer\b|\bimage\b|gpustack|kubernetes|\bpod\b", text))
    where = ("in the environment of the server that assigns the GPUs and of the containers it starts (docker run -e "
             "CUDA_DEVICE_ORDER=PCI_BUS_ID ...; Compose: environment: - CUDA_DEVICE_ORDER=PCI_BUS_ID)" if inside else
             "before the program starts (export CUDA_DEVICE_ORDER=PCI_BUS_ID)")
    return _make("visibility", "CUDA numbers mixed GPUs in another order than nvidia-smi",
                 f"CUDA lists the cards fastest first ({cards}), nvidia-smi and the GPU selectors built on it by PCI "
                 "bus; a GPU chosen by nvidia-smi's index is applied in CUDA's order, so another card gets the work",
                 f"set CUDA_DEVICE_ORDER=PCI_BUS_ID {where}, so CUDA's indices are nvidia-smi's; CUDA's device list at "
                 "start must then name the chosen cards", [], said[:1], confirmed=False)


_MULTI_NODE = re.compile(r"(?i)多节点|多机|multi[- ]?node|\bNNODES\b|--nnodes[= ]?[2-9]|\b[2-9] (?:nodes|machines)\b")
_HANG_SAID = re.compile(r"(?i)\b(?:hangs?|hanging|hung|stuck|freez\w*|deadlock\w*)\b|卡住|卡死|不动了")


def _ranks_per_node(ctx: Context) -> Optional[Diagnosis]:
    """LLaMA-Factory's CLI starts torchrun with NPROC_PER_NODE ranks, by default every GPU the machine has; a node
    that narrows CUDA_VISIBLE_DEVICES in a multi-node run then starts more ranks than it has visible GPUs (or the
    nodes disagree with the world size), and the run hangs once the model is loaded."""
    text = _text(ctx)
    if not (re.search(r"(?i)llama.?factory|llamafactory", text) and "CUDA_VISIBLE_DEVICES" in text and
            _MULTI_NODE.search(text) and _HANG_SAID.search(text)) or re.search(r"NPROC_PER_NODE\s*=\s*\d", text):
        return None
    said = _lines_matching(ctx, _HANG_SAID.pattern)
    value = _visible(ctx).get("CUDA_VISIBLE_DEVICES")
    count = len(value.value.split("=", 1)[1].split(",")) if value else None
    return _make("visibility", "the node starts more ranks than it has visible GPUs",
                 "llamafactory-cli runs torchrun with nproc_per_node from NPROC_PER_NODE, by default the count of "
                 "every GPU on the machine; with CUDA_VISIBLE_DEVICES narrowing a node, its ranks and the world size "
                 "the nodes agreed on differ, and the run hangs after loading the model",
                 f"export NPROC_PER_NODE={count or '<the number of GPUs in CUDA_VISIBLE_DEVICES>'} on every node "
                 "beside CUDA_VISIBLE_DEVICES (with NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT), the same GPU count "
                 "on each node", [], said[:1], confirmed=False)


_VLLM_DEVICE_MISSING = re.compile(r"(?i)requested device for vllm \((cuda:\d+)\) is not available")


def _vllm_device_missing(ctx: Context) -> Optional[Diagnosis]:
    """TRL's GRPO (older releases) puts its vLLM generation engine on --vllm_device and refuses an index the
    training processes cannot see: the GPUs chosen by CUDA_VISIBLE_DEVICES are renumbered from 0 in every process,
    and accelerate launch can pass the choice itself (--gpu_ids)."""
    said = _lines_matching(ctx, _VLLM_DEVICE_MISSING.pattern)
    if not said:
        return None
    device = _VLLM_DEVICE_MISSING.search(said[0].line).group(1)
    visible = _visible(ctx).get("CUDA_VISIBLE_DEVICES")
    ids = visible.value.split("=", 1)[1] if visible else "<the GPUs>"
    return _first(_make("visibility", f"GRPO's vLLM device {device} is not among the GPUs the processes see",
                        f"TRL checks --vllm_device ({device}) against the GPUs visible to the training processes, "
                        "which CUDA_VISIBLE_DEVICES renumbers from 0 and which the launched processes share with "
                        "training; the index asked for is not one left free for vLLM",
                        f"let accelerate choose the GPUs: accelerate launch --gpu_ids {ids} --num_processes "
                        "<one fewer than those GPUs> ..., and pass --vllm_device auto (TRL then takes the next free "
                        "GPU for vLLM); newer TRL runs vLLM as a server (trl vllm-serve) on its own GPUs instead",
                        [], said[:1]))


_WHICH_GPU_ASKED = re.compile(r"(?i)\bhow (?:to|can I|do I|can we) (?:select|choose|pick|set|tell \w+ to (?:run|use)(?: on)?|"
                              r"use) (?:a |the |one of the |which )?(?:GPU|card|device)s?\b|"
                              r"\b(?:still|always) (?:runs?|running|starts?|starting|uses?|using) (?:on |in )?(?:the )?"
                              r"(?:other|smaller|wrong|first)\b|怎么指定.{0,6}(?:卡|GPU|显卡)")


def _zluda_device_choice(ctx: Context) -> Optional[Diagnosis]:
    """Choosing one of several AMD GPUs for a program run through ZLUDA: the program's own device flag
    (--cuda-device) indexes what the HIP runtime shows it, so the reliable choice is HIP_VISIBLE_DEVICES, which hides
    the other cards from the runtime before the program starts."""
    text = _text(ctx)
    said = _lines_matching(ctx, _WHICH_GPU_ASKED.pattern)
    if not said or not re.search(r"(?i)\bZLUDA\b", text):
        return None
    index = re.search(r"--cuda-device[= ](\d+)", text)
    value = index.group(1) if index else "<the index of the card to use>"
    return _first(_make("visibility", "the GPU is chosen for ZLUDA by the HIP runtime's visibility",
                        "under ZLUDA the program's CUDA device index maps onto the HIP runtime's device list, whose "
                        "order need not be the program's, so its own device flag lands on another card",
                        f"hide the other cards from the runtime before the program starts: set "
                        f"HIP_VISIBLE_DEVICES={value} in the .bat that starts it (Windows: set HIP_VISIBLE_DEVICES="
                        f"{value} before the launch line; try the other index if the wrong card remains), and drop "
                        "the program's device flag", [], said[:1]))


# Ray said as the launcher: its package pin, its CLI, its variables, or a framework built on it (OpenRLHF, verl)
_RAY = re.compile(r"(?i)\bray\s*(?:==|=)\s*\d|\bray (?:start|cluster|actors?|workers?)\b|\bray\.init\b|\bRAY_[A-Z_]+|"
                  r"ray-project/ray|\bOpenRLHF\b|\bverl\b")
_AMD_DATACENTER = re.compile(r"(?i)\bMI\d{3}X?\b|\bInstinct\b|\bROCm\b|\bgfx9\d\w\b")


def _ray_on_amd(ctx: Context) -> Optional[Diagnosis]:
    """Ray on AMD GPUs: Ray confines each actor by setting ROCR_VISIBLE_DEVICES itself, so the framework's own choice
    (HIP_VISIBLE_DEVICES, the local rank's index) points at GPUs the actor no longer sees; Ray's switch leaves the
    variable alone. Read where Ray and an AMD GPU are both said and no error line of another family speaks."""
    text = _text(ctx)
    if not (_RAY.search(text) and _AMD_DATACENTER.search(text)) or _nvidia_named(ctx):
        return None
    if any(e.family not in (None, "visibility", "multi-gpu-transport") for e in ctx.errors):
        return None
    said = _lines_matching(ctx, _RAY.pattern) or _lines_matching(ctx, _AMD_DATACENTER.pattern)
    return _make("visibility", "Ray rewrites ROCR_VISIBLE_DEVICES for each actor",
                 "on AMD GPUs Ray sets ROCR_VISIBLE_DEVICES for every actor it starts, so the ranks' own device "
                 "choice (HIP_VISIBLE_DEVICES, cuda:<local rank>) indexes GPUs the actor does not see",
                 "export RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES=1 before `ray start` (and in the job's "
                 "runtime_env env_vars), and choose the GPUs with HIP_VISIBLE_DEVICES; where the weights are synced "
                 "between Ray actors over NCCL and that still fails, use gloo for that step (OpenRLHF: "
                 "--vllm_sync_backend gloo)", [], said[:1], confirmed=False)


# the machine's GPU count in the user's words: "one A10G GPU", "a single GPU", "1x RTX 4090", "2 GPUs", 单卡, 一张卡
_ONE_GPU = re.compile(r"(?i)\b(?:one|a single|single|only one|1)\s*[x×]?\s*(?:(?:NVIDIA|AMD|GeForce|Tesla|Radeon)\s+)?"
                      r"(?:(?:RTX|GTX|RX)\s?)?(?:[A-Z]?\d{2,4}\w*\s+)?(?:GPU|card|graphics card)\b(?!s)|单卡|单GPU|"
                      r"(?:一|1)\s*(?:张|块|个)\s*(?:卡|显卡|GPU)")
_SEVERAL_GPUS = re.compile(r"(?i)\b([2-8]|two|three|four|eight)\s*[x×*]?\s*(?:(?:RTX|GTX|RX)\s?)?(?:[A-Z]?\d{2,4}\w*\s+)?"
                           r"GPUs\b|([2-8两三四八])\s*(?:张|块|个)\s*(?:\d+G\S{0,3})?(?:卡|显卡|GPU)")
_COUNT_WORDS = {"two": 2, "three": 3, "four": 4, "eight": 8, "两": 2, "三": 3, "四": 4, "八": 8}


def _gpus_said(text: str) -> Optional[int]:
    """How many GPUs the machine has, in the user's words; None where the paste does not say."""
    one, m = _ONE_GPU.search(text), _SEVERAL_GPUS.search(text)
    if one and m:
        return None   # both said ("works on one GPU, not on 4 GPUs"): not a count of the machine's
    if one:
        return 1
    if m:
        word = m.group(1) or m.group(2)
        return _COUNT_WORDS.get(word.lower()) or int(word)
    return None


@rule("visibility")
def visibility(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the visibility variables in force (ROCR filters, HIP/CUDA index what is left), the machine's GPUs
    (an iGPU enumerated beside a card), and what the tool says it kept or dropped."""
    misspelt = (_misspelt_visibility(ctx) or _ray_on_amd(ctx) or _device_order(ctx) or _device_order_listed(ctx) or _ranks_per_node(ctx) or
                _vllm_device_missing(ctx) or _zluda_device_choice(ctx))
    if misspelt is not None:
        return misspelt
    doubled = _vulkan_layered_twin(ctx) or _module_not_loaded_on_a_second_gpu(ctx)
    if doubled is not None:
        return doubled
    errors = ctx.of("visibility")
    mask = re.search(r"\bROCR_VISIBLE_DEVICES=(\d+(?:,\d+)+)", _text(ctx))
    none = _lines_matching(ctx, r"(?i)No (?:CUDA|HIP) GPUs are available")
    if mask and none and re.search(r"(?i)\bsrun\b|slurm|--container|pyxis|enroot|" + _CONTAINED.pattern[4:], _text(ctx)):
        return _make("visibility", "the host's GPU mask was carried into the job's own view",
                     f"the scheduler already confined the job to its GPUs, which it numbers from 0; the forwarded "
                     f"ROCR_VISIBLE_DEVICES={mask.group(1)} names cards that do not exist there, so none is left",
                     "unset ROCR_VISIBLE_DEVICES (and HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES) before starting the "
                     "runtime inside the container or job step; do not --export the host's mask", [], none)
    # (Ollama logs it at level=INFO, which the error lines leave out: the paste's line itself counts)
    dropped = ([e for e in errors if re.search(r"(?i)dropping integrated GPU", e.line)]
               or _lines_matching(ctx, r"(?i)dropping integrated GPU"))
    # the newest Ollama release the paste shows (a paste comparing 0.24 that worked with 0.30 that does not names both)
    releases = [int(m.group(1) or m.group(2)) for m in re.finditer(
        r"(?i)\bollama\b.{0,30}?\bv?0\.(\d+)\.\d+|\bv?0\.(\d+)\.\d+\b.{0,30}\bollama\b", _text(ctx))]
    releases += [int(m.group(1)) for m in re.finditer(r"(?<![\d.])v?0\.(\d{2})\.\d+\b", _text(ctx))
                 if re.search(r"(?i)\bollama\b", _text(ctx))]
    unused = _lines_matching(ctx, r"(?i)\bGPU\b.{0,30}\b(?:cannot|can.t|could not|isn.t|is not|not) (?:be )?(?:used|"
                                  r"detected|found)|\b(?:runs?|running) on (?:the )?CPU\b|\bno GPU\b|\b100% CPU\b")
    # an integrated GPU: an AMD APU (its CPU beside its Radeon), or Intel's iGPU (Iris Xe, UHD, Arc's integrated ones)
    intel_igpu = re.search(r"(?i)\bIris(?:\(R\))? Xe\b|\bUHD Graphics\b|\bArc(?:\(TM\))? (?:Graphics|1[34]0V)\b",
                           _text(ctx))
    if not dropped and releases and max(releases) >= 30 and unused and ((
            _vendor(ctx) == "amd" and re.search(r"(?i)\bCPU\W{0,3}AMD\b|\bAMD\W{0,3}CPU\b|\bRyzen\b|\bAPU\b|Radeon \d{3,4}M?S?\b",
                                                _text(ctx))) or intel_igpu):
        # an AMD CPU beside an AMD GPU the server stopped using after 0.30: the GPU is likely the APU's own Radeon
        return _make("visibility", "Ollama 0.30+ leaves out integrated GPUs",
                     "Ollama 0.30 and newer skip integrated GPUs that are not on its allow-list; on an AMD APU (Ryzen "
                     "AI, Radeon 8060S / 890M / 780M) or an Intel iGPU the GPU is integrated, so after the upgrade "
                     "the model runs on the CPU", set_variable("OLLAMA_IGPU_ENABLE", "1", ctx.sheet, "ollama") +
                     " (OLLAMA_IGPU_ENABLE=1 for the server, then restart Ollama); a discrete card that is skipped "
                     "instead shows in the server log (OLLAMA_DEBUG=1)", [], unused, confirmed=False)
    if dropped:   # Ollama 0.30+ filters iGPUs that are not on its allow-list
        return _make("visibility", "Ollama drops the integrated GPU",
                     "Ollama (0.30 and newer) leaves out integrated GPUs that are not on its allow-list, so the model "
                     "runs on the CPU", set_variable("OLLAMA_IGPU_ENABLE", "1", ctx.sheet, "ollama") +
                     " (OLLAMA_IGPU_ENABLE=1 for the server; a newer Ollama may list this iGPU by default)",
                     [ctx.line_fact(dropped[0])], errors + ctx.no_gpu())
    visible = _visible(ctx)
    rocr = visible.get("ROCR_VISIBLE_DEVICES")
    inner = visible.get("HIP_VISIBLE_DEVICES") or visible.get("CUDA_VISIBLE_DEVICES")
    if errors and rocr and inner and inner.value.split("=", 1)[1] not in ("0", "0,1"):
        value = rocr.value.split("=", 1)[1]
        return _make("visibility", "two layers of visibility variables leave no GPU",
                     f"ROCR_VISIBLE_DEVICES={value} keeps those GPUs and renumbers them from 0; "
                     f"{inner.value} then asks for an index that no longer exists",
                     f"set only ROCR_VISIBLE_DEVICES={value} (unset HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES), or "
                     "count the inner one from 0 among what ROCR left (HIP_VISIBLE_DEVICES=0)", [rocr, inner], errors)
    hit = _catalogue(errors)
    if hit is not None and re.search(r"VISIBLE_DEVICES=|leaves|selects|index", hit.catalogue.cause):
        return _restate("visibility", hit, errors)
    archs = ctx.sheet.machine_archs
    igpu = [a for a in archs if (arch_info(a) and arch_info(a).kind == "apu")]
    dgpu = [a for a in archs if a not in igpu and a.startswith("gfx")]
    said_igpu = next((f for f in ctx.sheet.of("igpu") if f.detail != "only"), None)
    # the iGPU is in the way when torch finds no usable GPU, or when code fails on it that the card may not even need
    # (an override for the card makes the iGPU run the card's code too)
    missing = ctx.of("arch-missing")
    symptoms = errors + missing + ctx.crashes()
    if said_igpu is not None and _vendor(ctx) == "amd" and not _nvidia_named(ctx):
        # the user's own words for what the iGPU breaks: a crash on load, a tool acting on the wrong card
        symptoms += _lines_matching(ctx, r"(?i)\bcrash\w*|\bwrong (?:card|gpu|device)|\bnot (?:setting|applying)\b|"
                                         r"\bincorrect(?:ly)?\b|\bwrites? (?:\w+ )?to\b")
    if igpu and dgpu:
        # a tool that names the card by the iGPU's target ("detects the 6800 XT as gfx1036"): it took the iGPU first
        symptoms += _lines_matching(ctx, r"(?i)\b(?:detect\w*|reports?|shows?|identif\w+|recogni[sz]\w*|sees?)\b.{0,30}"
                                         r"\bas gfx\w+|\binstead of gfx\w+|\bnothing (?:is )?working\b|"
                                         # the run hangs or crashes with both listed, or torch counts the iGPU too
                                         # (Radeon docs' limitations: disable the iGPU in the BIOS)
                                         r"\bhang(?:s|ing)?\b|\bcrash\w*|\bfreez\w+|device_count\(\)\W{0,12}"
                                         r"(?:returns?|is|=|gives)\W{0,3}2\b")
    if igpu and dgpu and len([f for f in ctx.sheet.of("arch") if f.detail == "machine"]) > 1:
        # an app's own start-up lines name both targets ("GPU arch: gfx1200", "AMD arch: gfx1036") and then an error:
        # the app detected the iGPU beside the card, and whatever it set up for the card failed (its installer picked
        # packages or kernels for both, or the iGPU's)
        symptoms += [e for e in ctx.errors if re.search(r"(?i)^\W{0,3}(?:\[?error\]?|error:)|\bunavailable\b|"
                                                        r"\bnot (?:available|supported)\b", e.line)]
    # Ollama names the iGPU unsupported and goes on with the card it supports: the iGPU is out of the way already
    kept = any(re.search(r'msg="amdgpu is supported"|inference compute.*library=rocm', l) for l in ctx.sheet.lines)
    refused_igpu = [e for e in missing if re.search(r"amdgpu is not supported", e.line) and
                    any(a in e.line for a in igpu)]
    if kept and refused_igpu and len(refused_igpu) == len(missing):
        symptoms = [e for e in symptoms if e not in refused_igpu]
    # an iGPU said to be there counts unless the paste's only GPU is that iGPU (then nothing is in the way)
    # an iGPU said with no card known: only where the text shows a card beside it (else the iGPU is the GPU)
    card_said = re.search(r"(?i)\b(?:dedicated|discrete|dGPU|graphics card|RX ?\d{3,4}|Radeon (?:RX|PRO|VII)|Instinct|"
                          r"MI\d{2,3}|RTX|GTX|card[1-9])\b|\b(?:the|a|my) (?:card|second GPU)\b", _text(ctx))
    if ((igpu and dgpu) or (said_igpu and (dgpu or (not igpu and card_said)))) and symptoms:
        first = said_igpu is not None and said_igpu.detail == "cuda0" or bool(missing)
        value = override_for_arch(dgpu[0]) if dgpu else None
        also = (f"; the card ({dgpu[0]}) also needs {OVERRIDE}={value}, which must not reach the iGPU"
                if value and dgpu[0] not in OFFICIAL_WHEEL_ARCHS else "")
        index = ("export HIP_VISIBLE_DEVICES=1 (the card; the iGPU is device 0 here), or CUDA_VISIBLE_DEVICES=1"
                 if first else "export HIP_VISIBLE_DEVICES=<index of the card> (rocminfo / rocm-smi list the order; "
                 "often the card is 0 and the iGPU 1, or the reverse)")
        who = f"an iGPU ({igpu[0]}) beside the card ({dgpu[0]})" if igpu and dgpu else "an iGPU beside the card"
        # Ollama's GPU page names ROCR_VISIBLE_DEVICES (ids or UUIDs from rocminfo) for its server
        ollama = ("; for the Ollama server set ROCR_VISIBLE_DEVICES=<the card's id or UUID from rocminfo> in its "
                  "environment (sudo systemctl edit ollama.service, Environment=\"ROCR_VISIBLE_DEVICES=...\")"
                  if "ollama" in ctx.sheet.tools and not ctx.sheet.is_windows else "")
        # llama.cpp and its builds split layers (and the KV cache) over every device they see, the iGPU too: its own
        # flags keep the model on one device (llama.cpp docs/multi-gpu.md: --split-mode none, chosen by --main-gpu)
        ggml = ("; or keep llama.cpp on the card alone: -sm none -mg <index of the card> (--split-mode none "
                "--main-gpu N; llama-server and llama-cli take the same flags)"
                if set(ctx.sheet.tools) & {"llama.cpp", "llama-cpp-python", "koboldcpp", "lmstudio"} else "")
        return _make("visibility", "the integrated GPU is in the way",
                     f"the machine has {who}; tools take every GPU or device 0, and the iGPU has no usable ROCm code",
                     f"hide the integrated GPU (iGPU): {index}, or disable the iGPU in the BIOS"
                     f"{' (or in Device Manager)' if ctx.sheet.is_windows else ''}{also}{ollama}{ggml}",
                     [f for f in (_arch_fact(ctx, igpu[0]) if igpu else said_igpu,
                                  _arch_fact(ctx, dgpu[0]) if dgpu else None) if f], symptoms)
    # (hipErrorInvalidDevice while HIP starts, from hipGetDeviceCount / hipInit, is no index: the runtime found no
    # usable device at all, which the arch, access and driver readings explain)
    at_start = re.search(r"(?i)hipGetDeviceCount|hipInit\b|HIP initialization", _text(ctx))
    ordinal = [e for e in errors if re.search(r"(?i)invalid device ordinal", e.line) or
               (re.search(r"hipErrorInvalidDevice", e.line) and not at_start)]
    if ordinal and not (rocr and inner):
        named = inner or rocr
        have = _gpus_said(_text(ctx))
        launch = (f"start no more processes than the {have} GPU{'s' if have > 1 else ''} this machine has: torchrun "
                  f"--nproc_per_node={have} (a run script's NPROC_PER_NODE / GPUS_PER_NODE / --num_gpus={have}, "
                  f"accelerate launch --num_processes={have}; its model-parallel size no more than {have})"
                  if have else "start no more processes than GPUs (--nproc_per_node)")
        return _make("visibility", "the job asks for a GPU index that is not visible",
                     "GPU indices count from 0 among the visible GPUs only" + (f"; {named.value} leaves fewer than "
                                                                               "the index asked" if named else
                                                                               ": the index (cuda:N, --gpu N, "
                                                                               "local_rank) is past the last one"),
                     "use an index below torch.cuda.device_count() (cuda:0 on a one-GPU machine): set "
                     "CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES to the GPUs you mean and count from 0 among them, and "
                     + launch, [f for f in (named,) if f], ordinal)
    fewer = [e for e in errors if re.search(r"(?i)device_count\(\)", e.line)]
    if fewer:
        names = ", ".join(visible) if visible else ""
        return _make("visibility", "the process sees fewer GPUs than the machine has",
                     ("the paste sets " + names + ", which keeps only the GPUs it names") if names else
                     "a visibility variable set elsewhere (the shell profile, the container, the scheduler) or a GPU "
                     "the driver or runtime skips leaves fewer GPUs than are installed",
                     "print env | grep VISIBLE_DEVICES and unset CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / "
                     "ROCR_VISIBLE_DEVICES (or list every index); compare nvidia-smi -L / rocminfo | grep gfx with "
                     "lspci | grep -i -e vga -e display: a card missing there is skipped by the driver (sudo dmesg | "
                     "grep -i -e amdgpu -e nvrm)", list(visible.values())[:2], fewer)
    if any(re.search(r"No CUDA GPUs are available", e.line) for e in errors) and _vendor(ctx) != "amd":
        named = visible.get("CUDA_VISIBLE_DEVICES")
        said = f"{named.value} " if named else ""
        return _make("visibility", "CUDA_VISIBLE_DEVICES hides the GPU",
                     f"the script sets CUDA_VISIBLE_DEVICES {said}to an index this machine does not have (a one-GPU "
                     "machine has only 0), so torch sees no GPU",
                     "set CUDA_VISIBLE_DEVICES=0 (os.environ[\"CUDA_VISIBLE_DEVICES\"] = \"0\" in the script, or the "
                     "run script's export), or remove the line that sets it", [f for f in (named,) if f], errors)
    return _choice_ignored(ctx)


# a visibility variable set empty to hide every GPU ("HIP_VISIBLE_DEVICES= python train.py"), and the GPUs still used
_EMPTY_HIP = re.compile(r"\b(HIP_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL)=(?:\"\"|''|(?=\s|$))")
_STILL_USED = re.compile(r"(?i)\ball (?:the |of the )?GPUs (?:are|were|get|got) (?:still )?used\b|\bstill (?:uses?|sees?|"
                         r"finds?|lists?)\b.{0,20}\bGPUs?\b|\bnot (?:working|respected|honou?red)\b|\b(?:all|every) GPUs? "
                         r"(?:is |are )?(?:still )?visible\b|\bexpected\b.{0,40}\bhidden\b")


@rule("visibility")
def empty_hip_visibility(ctx: Context) -> Optional[Diagnosis]:
    """HIP_VISIBLE_DEVICES set empty to hide every GPU, yet the GPUs are used: HIP of ROCm 3.5 and 3.6 read an empty
    value as unset (AMD's answer in ROCm/ROCm#1170, fixed in 3.7); ROCr's own ROCR_VISIBLE_DEVICES, applied below HIP,
    hides them with an empty value (ROCm's "GPU isolation techniques" docs for the two layers)."""
    set_empty = _lines_matching(ctx, _EMPTY_HIP)
    if not set_empty or not _lines_matching(ctx, _STILL_USED):
        return None
    text = _text(ctx)
    release = re.search(r"(?i)\bROCm\W{0,3}(?:version\W{0,3})?(\d+)\.(\d+)", text)
    old = release and (int(release.group(1)), int(release.group(2))) in ((3, 5), (3, 6))
    name = _EMPTY_HIP.search(set_empty[0].line).group(1)
    return _make("visibility", f"an empty {name} does not hide the GPUs",
                 f"an empty {name} is read as unset by HIP"
                 + (f" of ROCm {release.group(1)}.{release.group(2)} (a regression of ROCm 3.5 and 3.6, fixed in 3.7)"
                    if old else " in some ROCm releases (3.5 and 3.6 among them)")
                 + ", so every GPU stays visible",
                 "hide the GPUs one layer lower, where an empty value means none: ROCR_VISIBLE_DEVICES= <the command> "
                 "(export ROCR_VISIBLE_DEVICES= for a session)"
                 + ("; or upgrade ROCm to 3.7 or newer, where an empty HIP_VISIBLE_DEVICES hides them again" if old
                    else "") + "; check with rocminfo | grep -c gfx or python -c 'import torch; "
                 "print(torch.cuda.device_count())' (0 expected)", [], set_empty)
