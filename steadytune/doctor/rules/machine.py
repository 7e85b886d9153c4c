"""Rules about the machine: which GPUs a process sees, APU memory, the platform (BIOS, PCIe), several GPUs."""

from __future__ import annotations

import re
from difflib import get_close_matches
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import set_variable
from steadytune.hardware.gpu_facts import OFFICIAL_WHEEL_ARCHS, arch_info, override_for_arch
from steadytune.hardware.unified_memory import GIB, PAGE
from steadytune.doctor.rules.collectives import (cumem_host_without_peer, one_gpu_works_several_not,
                                                  silent_after_the_ibverbs_warning)
from steadytune.doctor.rules.base import (
    _APU_ARCHS,
    _arch_fact,
    _catalogue,
    _CONTAINED,
    Context,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    NOT_DETECTED,
    OVERRIDE,
    _restate,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)


# ---------------------------------------------------------------------------------------------------------
# Which GPU, how much memory, the platform, several GPUs
# ---------------------------------------------------------------------------------------------------------

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
                           r"(?:RTX ?)?[2345]0[5-9]0(?: ?Ti)?|TITAN ?\w+)(?![a-z0-9])")
# the user says the job still lands on another card than the one chosen
_WRONG_CARD = re.compile(r"(?i)(?:一直|总是|还是|都)\W{0,2}(?:在|用|跑在|加载到)?\W{0,2}(?:0号|第一张|另一张)|"
                         r"\b(?:always|still|only)\b.{0,30}\b(?:GPU ?0|cuda:0|card 0|first (?:GPU|card)|other (?:GPU|card))\b|"
                         r"\bwrong (?:GPU|card)\b")


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


@rule("visibility")
def visibility(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the visibility variables in force (ROCR filters, HIP/CUDA index what is left), the machine's GPUs
    (an iGPU enumerated beside a card), and what the tool says it kept or dropped."""
    misspelt = (_misspelt_visibility(ctx) or _ray_on_amd(ctx) or _device_order(ctx) or _ranks_per_node(ctx) or
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
    dropped = [e for e in errors if re.search(r"(?i)dropping integrated GPU", e.line)]
    newer = re.search(r"(?i)\bollama\b.{0,30}?\bv?0\.(\d+)\.\d+|\bv?0\.(\d+)\.\d+\b.{0,30}\bollama\b", _text(ctx))
    unused = _lines_matching(ctx, r"(?i)\bGPU\b.{0,30}\b(?:cannot|can.t|could not|isn.t|is not|not) (?:be )?(?:used|"
                                  r"detected|found)|\b(?:runs?|running) on (?:the )?CPU\b|\bno GPU\b")
    if not dropped and newer and int(newer.group(1) or newer.group(2)) >= 30 and unused and \
            _vendor(ctx) == "amd" and re.search(r"(?i)\bCPU\W{0,3}AMD\b|\bAMD\W{0,3}CPU\b|\bRyzen\b|\bAPU\b|Radeon \d{3,4}M?S?\b",
                                                _text(ctx)):
        # an AMD CPU beside an AMD GPU the server stopped using after 0.30: the GPU is likely the APU's own Radeon
        return _make("visibility", "Ollama 0.30+ leaves out integrated GPUs",
                     "Ollama 0.30 and newer skip integrated GPUs that are not on its allow-list; on an AMD APU (Ryzen "
                     "AI, Radeon 8060S / 890M / 780M) the GPU is integrated, so after the upgrade the model runs on "
                     "the CPU", set_variable("OLLAMA_IGPU_ENABLE", "1", ctx.sheet, "ollama") +
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
                                         r"\bas gfx\w+|\binstead of gfx\w+|\bnothing (?:is )?working\b")
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
        return _make("visibility", "the integrated GPU is in the way",
                     f"the machine has {who}; tools take every GPU or device 0, and the iGPU has no usable ROCm code",
                     f"hide the integrated GPU (iGPU): {index}, or disable the iGPU in the BIOS"
                     f"{' (or in Device Manager)' if ctx.sheet.is_windows else ''}{also}",
                     [f for f in (_arch_fact(ctx, igpu[0]) if igpu else said_igpu,
                                  _arch_fact(ctx, dgpu[0]) if dgpu else None) if f], symptoms)
    # (hipErrorInvalidDevice while HIP starts, from hipGetDeviceCount / hipInit, is no index: the runtime found no
    # usable device at all, which the arch, access and driver readings explain)
    at_start = re.search(r"(?i)hipGetDeviceCount|hipInit\b|HIP initialization", _text(ctx))
    ordinal = [e for e in errors if re.search(r"(?i)invalid device ordinal", e.line) or
               (re.search(r"hipErrorInvalidDevice", e.line) and not at_start)]
    if ordinal and not (rocr and inner):
        named = inner or rocr
        return _make("visibility", "the job asks for a GPU index that is not visible",
                     "GPU indices count from 0 among the visible GPUs only" + (f"; {named.value} leaves fewer than "
                                                                               "the index asked" if named else
                                                                               ": the index (cuda:N, --gpu N, "
                                                                               "local_rank) is past the last one"),
                     "use an index below torch.cuda.device_count() (cuda:0 on a one-GPU machine): set "
                     "CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES to the GPUs you mean and count from 0 among them, and "
                     "start no more processes than GPUs (--nproc_per_node)", [f for f in (named,) if f], ordinal)
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


_MEMORY_SHORT = re.compile(r"(?i)(?:shared (?:gpu )?memory|\bVRAM\b|\bGTT\b|\bUMA\b|GPU memory).{0,60}"
                           r"(?:can't|cannot|can not|unable|only|not (?:be )?used?|limit(?:s|ed|ing)?|too (?:little|small))|"
                           r"(?:can't|cannot|only|unable to) (?:use|utili[sz]e|allocate|see).{0,40}(?:shared|VRAM|GTT|memory)|"
                           r"\bonly\s*~?\s*\d+(?:\.\d+)?\s*[MG]i?B (?:of )?(?:VRAM|GTT|GPU memory|dedicated|shared)|"
                           r"\bonly (?:use|see|allocate|get)s?\b.{0,20}\b\d+\s*[GM]i?B\b.{0,20}\b(?:of|out of)\b.{0,10}\d+\s*[GM]i?B|\bhalf\b.{0,40}\bGTT\b|\bGTT\b.{0,40}\bhalf\b")


@rule("apu-memory")
def apu_memory(ctx: Context) -> Optional[Diagnosis]:
    archs = ctx.sheet.machine_archs
    apu = [a for a in archs if a in _APU_ARCHS]
    pools = {f.detail: int(f.value) for f in ctx.sheet.of("memory_total")}
    errors = ctx.of("apu-memory", "out-of-memory")
    short = [l for l in ctx.sheet.lines if _MEMORY_SHORT.search(l)]
    gtt_said = [l for l in short if re.search(r"\bGTT\b", l)]
    if any(a not in _APU_ARCHS and a.startswith("gfx") for a in archs):
        return None
    # the APU said in words, or by its graphics' name (Radeon 680M/780M/890M, 8060S) where no arch was read
    said_apu = any(re.search(r"(?i)\bAPUs?\b|unified memory|\biGPU\b|\b(?:Radeon\s*)?[6-9][0-9]0M\b|\b80[4-6]0S\b", l)
                   for l in ctx.sheet.lines)
    limit_said = [l for l in short if re.search(r"(?i)\bUMA\b|\bTTM\b|\bGTT\b", l)]
    if not apu and not ("VRAM" in pools and "GTT" in pools) and not gtt_said and not (said_apu and (limit_said or short)):
        return None
    name = f"the APU ({apu[0]})" if apu else "the APU"
    carve, seen = _vram_bytes(ctx.sheet.lines), _pool_kib(ctx.sheet.lines)
    if apu and carve and seen and carve >= 32 * GIB and seen * 1024 < carve / 2:
        return _make("apu-memory", f"HIP sees {seen / 2**20:.1f} GiB of {name}'s {carve / GIB:.0f} GiB carve-out",
                     "the kernel driver reports the whole carve-out (mem_info_vram_total), but kernels before 6.16.9 "
                     "cap the memory pool ROCm's runtime gets on these APUs",
                     "upgrade the kernel to 6.16.9 or later (a mainline or HWE kernel); ROCm itself needs no change",
                     [_arch_fact(ctx, apu[0])], errors)
    if not errors and not short and not pools:
        return None
    evidence = [_arch_fact(ctx, apu[0])] if apu else ctx.sheet.of("memory_total")[:2]
    if pools.get("VRAM", 0) >= 4 * pools.get("GTT", 1 << 40) and errors:
        return _make("apu-memory", f"{name} puts its tensors in the small GTT",
                     f"the BIOS carve-out (VRAM, {pools['VRAM']} MiB) takes most of the RAM and leaves the GTT only "
                     f"{pools['GTT']} MiB, and allocations beyond the carve-out land in the GTT",
                     "set the UMA frame buffer in the BIOS to its minimum (512 MB) so the GTT covers most of the RAM "
                     "(and raise ttm.pages_limit where the GTT is still capped), then reboot", evidence, errors)
    ram = _ram_gib(ctx.sheet.lines)
    pages = int(ram * 0.75 * GIB / PAGE) if ram else None
    limit = (f"ttm.pages_limit={pages} (3/4 of the {ram:g} GiB RAM in 4 KiB pages)" if pages else
             "ttm.pages_limit=<3/4 of the RAM in 4 KiB pages>")
    tool = ctx.tool(errors)
    ggml = ("; llama.cpp / Ollama (ggml's HIP backend): GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 makes it allocate from "
            "system memory, past the carve-out" if tool in ("llama.cpp", "ollama", None) else "")
    return _make("apu-memory", f"{name} runs out of GPU memory",
                 "an APU's GPU memory is the BIOS carve-out (UMA frame buffer) plus GTT, which the kernel caps at half "
                 "the RAM by default", f"raise the UMA frame buffer in the BIOS, or raise the GTT cap with the kernel "
                 f"parameter {limit} (amdgpu.gttsize is deprecated), then reboot{ggml}", evidence,
                 errors or _symptom_lines(ctx, []))


def _vram_bytes(lines: list[str]) -> Optional[int]:
    """The carve-out the kernel reports: the number printed after `cat .../mem_info_vram_total`."""
    for i, line in enumerate(lines[:-1]):
        if "mem_info_vram_total" in line:
            m = re.match(r"\s*(\d{9,})\b", lines[i + 1])
            if m:
                return int(m.group(1))
    return None


def _pool_kib(lines: list[str]) -> Optional[int]:
    """rocminfo's GPU memory pool size, in KiB (its first pool, the one allocations come from)."""
    for line in lines:
        m = re.match(r"\s*Size:\s+(\d+)\(0x[0-9a-f]+\) KB", line)
        if m:
            return int(m.group(1))
    return None


def _ram_gib(lines: list[str]) -> Optional[float]:
    for line in lines:
        m = re.search(r"MemTotal:\s+(\d+)\s*kB|total RAM (\d+) MB|(\d+(?:\.\d+)?)\s*Gi?B (?:of )?(?:system )?RAM", line)
        if m:
            if m.group(1):
                return round(int(m.group(1)) / 2**20)
            if m.group(2):
                return round(int(m.group(2)) / 1024)
            return float(m.group(3))
    return None


# GCN cards whose ROCm support needed PCIe atomics (gfx8: Fiji, Polaris); ROCm dropped them after 4.x
_NEEDS_ATOMICS = ("gfx801", "gfx802", "gfx803", "gfx805", "gfx810")


def _atomics_for_an_old_release(ctx: Context) -> Optional[Diagnosis]:
    """A Polaris / Fiji card that a ROCm release of its time (before 4.5, which still listed gfx8) does not find: not
    the GPU's support, which that release had, but the platform's PCIe atomics, which gfx8 needs and KFD checks."""
    archs = [a for a in ctx.sheet.machine_archs if a in _NEEDS_ATOMICS]
    release = re.search(r"(?i)\bROCm ?(\d)\.(\d+)", _text(ctx))
    if not archs or not release or (int(release.group(1)), int(release.group(2))) >= (4, 5):
        return None
    unseen = _lines_matching(ctx, NOT_DETECTED)
    if not unseen:
        return None
    return _first(_make("platform-bios", f"the {archs[0]} card is skipped: its PCIe path likely has no atomics",
                        f"ROCm {release.group(1)}.{release.group(2)} supports {archs[0]}, yet finds only the CPU; "
                        f"{archs[0]} (Polaris / Fiji) needs PCIe atomic operations from CPU and board, and KFD skips "
                        "the card where the platform lacks them (sudo dmesg | grep -i atomics shows 'PCI rejects "
                        "atomics')",
                        "check sudo dmesg | grep -i -e kfd -e atomic; put the card in a CPU-attached x16 slot (no "
                        "riser or chipset lanes); where the CPU has no PCIe atomics at all (Intel before Haswell, AMD "
                        "before Zen) ROCm cannot use this card there: another platform, or a gfx9+ card that does not "
                        "need them", [_arch_fact(ctx, archs[0])], unseen))


# the BIOS leaving the card's memory unmapped, said or shown: Above 4G Decoding / Resizable BAR off, a 256 MB BAR
_BAR_OFF = re.compile(r"(?i)(?:resizable|large|re-?size) ?BAR\W{0,3}(?:is |was |=|:)?\s*(?:off|disabled|not (?:enabled|"
                      r"supported|available))|(?:disabled?|turned off|without|no) (?:the )?(?:resizable|re-?size) ?BAR|"
                      r"Above ?4G(?: Decoding)?\W{0,3}(?:is |was |=|:)?\s*(?:off|disabled)|(?:disabled?|turned off|"
                      r"without|no) (?:the )?Above ?4G|关闭.{0,6}(?:Above ?4G|Resizable ?BAR|ReBAR)|(?:Above ?4G|Resizable "
                      r"?BAR|ReBAR).{0,6}(?:关闭|未开启|没开)")
_BAR_INIT_FAILS = re.compile(r"(?i)Fatal error during GPU init|amdgpu.{0,60}probe.{0,40}fail\w*|RmInitAdapter failed|"
                             r"\bBAR \d+: (?:no space|failed to assign)|Not enough PCI address space|"
                             r"(?:fail\w*|unable|can.t|cannot) (?:to )?(?:initiali[sz]e|init) (?:the )?(?:GPU|device)")


def _bar_at_init(ctx: Context) -> Optional[Diagnosis]:
    """The GPU failing to initialise where the BIOS is said to leave Above 4G Decoding / Resizable BAR off: the
    driver's init failure is the symptom, the unmapped memory window the cause (a card with 16 GB or more of VRAM, an
    NVIDIA data-centre card, a second large card: each wants a 64-bit memory window above 4 GB)."""
    failed = _lines_matching(ctx, _BAR_INIT_FAILS.pattern)
    said = _lines_matching(ctx, _BAR_OFF.pattern)
    if not failed or not said:
        return None
    return _first(_make("platform-bios", "the BIOS does not map the GPU's memory, so its init fails",
                        "the GPU's driver fails to initialise it while Above 4G Decoding / Resizable BAR is off: the "
                        "card's memory window (BAR) needs 64-bit address space above 4 GB, which the BIOS then does "
                        "not give",
                        "enable Above 4G Decoding and Resizable BAR in the BIOS (CSM / legacy boot off, UEFI boot), "
                        "then boot and check sudo dmesg | grep -i -e BAR -e amdgpu -e NVRM (amdgpu prints the BAR size "
                        "it got: 'Detected VRAM RAM=... BAR=...'); update the BIOS if it has no such option",
                        [], failed + said))


# rocm-smi / amd-smi reading a GPU's sysfs files while the GPU sleeps in runtime power management (D3): the files
# answer empty ("Expected integer value from monitor, but got \"\""), the table shows N/A; typical of idle cards
_MONITOR_EMPTY = re.compile(r"Expected integer value from monitor, but got")
_IDLE_SAID = re.compile(r"(?i)\bidle\b|after (?:a (?:while|period)|some time|\d+ ?(?:min|hour))|\b(?:runtime )?suspend|"
                        r"\bD3(?:cold|hot)?\b|空闲|一段时间")
_SMI_ROW_NA = re.compile(r"^\s*\d+\s+\d+\s+0x[0-9a-f]{4}.*\bN/A\s+N/A\b")


def _runtime_suspended(ctx: Context) -> Optional[Diagnosis]:
    """The SMI tool reading nothing from cards that runtime power management put to sleep: the sysfs files of a
    suspended device answer empty; waking them (power/control "on") or turning runtime PM off is the remedy."""
    empty = _lines_matching(ctx, _MONITOR_EMPTY.pattern)
    rows = [e for e in _lines_matching(ctx, _SMI_ROW_NA.pattern)] if _IDLE_SAID.search(_text(ctx)) else []
    if not empty and not rows:
        return None
    made = _make("platform-bios", "the idle GPUs are asleep in runtime power management",
                 "rocm-smi reads the GPUs' sysfs files; a card that runtime power management put to sleep (D3) "
                 "answers them empty, so the values come back blank or N/A",
                 "wake the cards and keep them awake: echo on | sudo tee /sys/bus/pci/drivers/amdgpu/*/power/control "
                 "(then rocm-smi reads them again); to keep it across reboots add amdgpu.runpm=0 to the kernel command "
                 "line (GRUB_CMDLINE_LINUX, update-grub, reboot) or a udev rule that sets power/control to on",
                 [], empty + rows, confirmed=bool(empty))
    # the SMI's own empty-read message settles it before any driver reading of the same N/A table
    return _first(made) if empty else made


@rule("platform-bios")
def platform_bios(ctx: Context) -> Optional[Diagnosis]:
    bar = _bar_at_init(ctx) or _runtime_suspended(ctx)
    if bar is not None:
        return bar
    errors = ctx.of("platform-bios")
    if not errors:
        return _atomics_for_an_old_release(ctx)
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)atomic", text):
        pci = next((f for f in ctx.sheet.of("pci_id") if f.line_no in {e.line_no for e in errors}), None)
        card = f" ({pci.value}{', ' + pci.detail if pci.detail else ''})" if pci else ""
        return _make("platform-bios", f"the GPU{card} is skipped: its PCIe path has no atomics",
                     "ROCm's compute queues on GCN cards (gfx8) need PCIe atomic operations all the way to the CPU; a "
                     "chipset slot, a riser, a Thunderbolt/OCuLink enclosure or an old platform without them makes "
                     "KFD skip the card",
                     "put the card in a CPU-attached x16 slot (no riser, no chipset lanes; lspci -vvv shows "
                     "AtomicOpsCap); where the CPU or board has no PCIe atomics at all (Intel before Haswell, AMD "
                     "before Zen, many laptops' chipset links) ROCm cannot use this card: a platform with PCIe 3 "
                     "atomics, or a gfx9+ card, which does not need them", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)fallen off the bus|\bXid\b\W{0,3}(?:\([^)]*\)\W{0,3})?79\b", text):
        return _make("platform-bios", "the GPU fell off the PCIe bus",
                     "the GPU stopped answering on PCIe mid-run (NVIDIA's Xid 79): power (a transient the PSU or its "
                     "cables do not hold), the PCIe link (a riser, a loose card, link power saving) or heat",
                     "check power first (a PSU with headroom, separate PCIe cables per connector; a lower power limit to "
                     "confirm: sudo nvidia-smi -pl <watts>), reseat the card without a riser, set the slot's PCIe "
                     "generation fixed in the BIOS, and add pcie_aspm=off to the kernel command line; watch temperatures",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)data ?parallel|all (?:two|four|eight|\d) GPUs|multiple GPUs", text) and \
            not re.search(r"(?i)corrupt|zeros?\b", text):
        return _make("platform-bios", "the GPUs fail only together: their direct transfers are blocked",
                     "a CUDA error that appears only when several GPUs work together (DataParallel copies the model "
                     "and the batches directly between them) and not on one GPU: the peer-to-peer DMA between the "
                     "GPUs is broken by the platform, most often the IOMMU (AMD-Vi / VT-d) in translation mode, or "
                     "PCIe ACS",
                     "confirm on one GPU (CUDA_VISIBLE_DEVICES=0) and with NCCL_P2P_DISABLE=1; then disable the "
                     "IOMMU in the BIOS (AMD: AMD CBS > NBIO > IOMMU; Intel: VT-d) or set iommu=pt on the kernel "
                     "command line, and turn PCIe ACS off", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)corrupt|zeros?\b|wrong values", text):
        return _make("platform-bios", "copies between the GPUs arrive wrong: the IOMMU is in their way",
                     "a tensor copied from one GPU to another arrives as zeros or other values with no error, while "
                     "the same copy through the CPU is right: the direct (peer-to-peer) DMA between the GPUs goes "
                     "through the IOMMU in translation mode (or PCIe ACS), which drops or misroutes it",
                     "disable the IOMMU in the BIOS (AMD: Advanced > AMD CBS > NBIO Common Options > IOMMU; Intel: "
                     "VT-d) or put it in pass-through: iommu=pt (amd_iommu=on iommu=pt on AMD CPUs) on the kernel "
                     "command line, update-grub, reboot; check PCIe ACS is off (lspci -vvv | grep -i acsctl); until "
                     "then NCCL_P2P_DISABLE=1 avoids the direct copies", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("platform-bios", hit, errors)
    if re.search(r"(?i)BAR|address space|4G", text):
        cause, fix = ("the BIOS does not map the card's memory (no Above 4G Decoding / Resizable BAR)",
                      "enable Above 4G Decoding and Resizable BAR in the BIOS (CSM off)")
    elif re.search(r"(?i)AMD-Vi|IO_PAGE_FAULT|iommu|unable to handle page fault", text):
        cause, fix = ("the IOMMU blocks the GPU's DMA", "add iommu=pt to the kernel command line "
                      "(GRUB_CMDLINE_LINUX), update-grub, reboot")
    else:
        cause, fix = ("the GPU does not come back from power saving", "add amdgpu.runpm=0 to the kernel command line")
    return _make("platform-bios", "the platform keeps the GPU from working", cause, fix, [ctx.line_fact(errors[0])],
                 errors)


def _container_paths(text: str) -> bool:
    """The job runs in a container: said, or seen in the paths of a container image (/opt/conda is the PyTorch and
    NGC images' Python, /workspace their work folder)."""
    return bool(_CONTAINED.search(text) or re.search(r"/opt/conda/lib/python|\bnvcr\.io/|/workspace/", text))


# GPUs joined by an Infinity Fabric (XGMI) bridge that fail their own start-up: the hive is set up while the driver
# starts each GPU (PSP brings up the links), so a faulty bridge fails every GPU's init
_BRIDGE = re.compile(r"(?i)\b(?:Infinity Fabric|XGMI|xGMI)\b.{0,20}\b(?:bridges?|links?|cards?)\b|\bbridge (?:card|board)\b")
_XGMI_INIT_FAILS = re.compile(r"(?i)Fatal error during GPU init|PSP (?:create ring|load|start)\w* failed|psp_hw_start|"
                              r"amdgpu_device_ip_init failed|xgmi.{0,40}(?:fail|error)|hive.{0,30}(?:fail|error)")


@rule("multi-gpu-transport")
def xgmi_bridge(ctx: Context) -> Optional[Diagnosis]:
    """Several Instinct GPUs linked by an Infinity Fabric bridge, each failing in the driver's start-up (the PSP that
    also trains the XGMI links): the bridge is the part to test first, by booting without it."""
    text = _text(ctx)
    bridge = _BRIDGE.search(text)
    failed = _lines_matching(ctx, _XGMI_INIT_FAILS.pattern)
    several = re.search(r"(?i)\b(?:[2-8] ?x ?|[2-8] )(?:AMD )?(?:Instinct )?MI\d{3}\w*|\b(?:[2-8]|four|eight|two) GPUs\b", text)
    if not (bridge and failed and several):
        return None
    return _first(_make("multi-gpu-transport", "the GPUs linked by an Infinity Fabric bridge fail to start",
                        "every GPU of the XGMI hive fails in the driver's start-up (the PSP firmware that also brings "
                        "up the Infinity Fabric links), and the GPUs share one part: the bridge; a faulty bridge or "
                        "connector fails all of them, where a firmware problem would not depend on it",
                        "power off, remove the Infinity Fabric bridge and boot: if every GPU then initialises "
                        "(rocm-smi lists them all), the bridge or a connector is faulty: reseat it, then replace "
                        "the bridge; if they still fail without it, update linux-firmware and amdgpu-dkms",
                        [ctx.line_fact(failed[0])], failed))


# a serving engine's own all-reduce kernel (vLLM's, SGLang's custom_all_reduce) copies over GPU peer access directly;
# NCCL_P2P_DISABLE does not reach it, the engine's own switch does
_CUSTOM_ALLREDUCE = re.compile(r"(?i)custom_?all_?reduce|CustomAllreduce")


def _custom_all_reduce(ctx: Context, errors: list, text: str) -> Optional[Diagnosis]:
    joined = _text(ctx)
    no_peer = re.search(r"(?i)peer access is not supported|hipErrorPeerAccess|cudaErrorPeerAccess", joined)
    tool = ctx.tool(errors)
    if not no_peer or not (_CUSTOM_ALLREDUCE.search(joined) or tool in ("vllm", "sglang")):
        return None
    name = {"sglang": "SGLang", "vllm": "vLLM"}.get(tool or "", "the engine")
    return _make("multi-gpu-transport", f"{name}'s own all-reduce needs GPU peer access these GPUs lack",
                 f"{name} runs tensor parallelism with its custom all-reduce kernel, which maps the other GPUs' memory "
                 "directly (peer access); these GPUs (consumer cards, or cards on separate PCIe roots) have none, so it "
                 "fails where NCCL would fall back",
                 "launch with --disable-custom-all-reduce (vLLM: --disable-custom-all-reduce / "
                 "disable_custom_all_reduce=True; SGLang: --disable-custom-all-reduce, or --enable-p2p-check so it "
                 "tests peer access first) so the all-reduce goes through NCCL; add NCCL_P2P_DISABLE=1 if NCCL then "
                 "hangs", [ctx.line_fact(errors[0])], errors)


def _split_model_garbage(ctx: Context) -> Optional[Diagnosis]:
    """Output that is gibberish only when a model is split over several GPUs: the copies between the GPUs (peer to
    peer over PCIe) arrive corrupted, with no error."""
    joined = _text(ctx)
    several = re.search(r"(?i)found ([2-9]) (?:ROCm|CUDA|HIP) devices|\b([2-9]) ?x ?(?:Instinct|Radeon|RTX|MI\d+)|"
                        r"--tensor-split|-ts \d|--split-mode (?:layer|row)", joined)
    garbage = _lines_matching(ctx, r"(?i)\b(?:gibberish|garbage|nonsense|garbled|random (?:tokens|characters))\b|乱码")
    tool = ctx.tool()
    if not (several and garbage) or tool not in ("llama.cpp", "ollama", None):
        return None
    return _make("multi-gpu-transport", "the copies between the GPUs arrive corrupted",
                 "the model is split over several GPUs and its activations cross between them by peer-to-peer copies; "
                 "where P2P over this PCIe path is broken (a kernel without the vendor's P2P patches, the IOMMU in "
                 "translation mode) they arrive wrong without an error, and the output turns to gibberish",
                 "build llama.cpp with -DGGML_CUDA_NO_PEER_COPY=ON (copies go through host memory), or confirm on one "
                 "GPU first (HIP_VISIBLE_DEVICES=0 / CUDA_VISIBLE_DEVICES=0, or --split-mode none); the platform fix "
                 "is iommu=pt on the kernel command line", [], garbage)


_NCCL_VERSION = re.compile(r"\bNCCL version (\d+)\.(\d+)\.(\d+)")
# the first NCCL release that runs each new NVIDIA generation's collectives (NCCL's release notes; the RTX 50
# series, sm_120, failed alltoall / sendrecv before 2.26.2)
_NCCL_FOR_ARCH = {"sm_120": (2, 26, 2), "sm_100": (2, 26, 2)}


def _nccl_before_the_gpu(ctx: Context, errors: list, joined: str) -> Optional[Diagnosis]:
    """NCCL older than the GPU: its kernels and tuning tables predate this generation, so collectives fail however the
    transport is set; a newer NCCL is the fix, not a transport variable."""
    found = _NCCL_VERSION.search(joined)
    if not found:
        return None
    version = tuple(int(x) for x in found.groups())
    for arch in ctx.sheet.machine_archs:
        need = _NCCL_FOR_ARCH.get(arch)
        if need and version < need:
            have, want = ".".join(map(str, version)), ".".join(map(str, need))
            return _make("arch-missing", f"NCCL {have} predates this GPU ({arch})",
                         f"NCCL {have} was released before this GPU generation ({arch}) was supported: its "
                         "collectives fail or need source patches on it; the transport is not the problem",
                         f"use NCCL {want} or newer: pip install -U \"nvidia-nccl-cu12>={want}\" (torch loads the "
                         f"pip NCCL), or build nccl and nccl-tests from the v{want} tag (make "
                         f"NVCC_GENCODE=\"-gencode=arch=compute_120,code=sm_120\")",
                         [ctx.line_fact(errors[0])], errors)
    return None


# a run over several GPUs, said: a launcher's process count, a count of cards
_SEVERAL_GPUS = re.compile(r"(?i)num_processes\W{1,3}[2-9]|--nproc_per_node[= ]?[2-9]|--num_processes[= ]?[2-9]|"
                           r"\b[2-9] ?x ?(?:RTX|GTX|RX|A\d+|H\d+|MI\d+)|\b[2-9] GPUs\b|multiple GPUs|multi[- ]?GPU")
# the user says the run works once peer-to-peer is off: the P2P path itself is what fails
_P2P_OFF_WORKS = re.compile(r"(?i)NCCL_P2P_DISABLE\s*=\s*1\b.{0,80}\b(?:works?|worked|runs?|ran|fine|solved|fix\w*|"
                            r"helps?|helped|no longer)|\b(?:works?|worked|runs?|ran|fine|solved|fix\w*|helps?|"
                            r"helped)\b.{0,80}NCCL_P2P_DISABLE\s*=?\s*1\b")
# NVLink SHARP (NVLS): NCCL's multicast over the NVSwitch, set up for 3+ GPUs of an NVSwitch machine (H100, H800,
# H200); its setup needs the fabric manager's multicast objects
_NVLS = re.compile(r"\bNVLS\b|transport/nvls\.cc")
_CUDA_INVALID = re.compile(r"(?i)Cuda failure (?:\d+ )?'?invalid argument")


def _nvlink_sharp(ctx: Context, errors: list, joined: str) -> Optional[Diagnosis]:
    """NCCL stops in its NVLS (NVLink SHARP) setup: a CUDA 'invalid argument' from nvls.cc is the multicast objects the
    fabric manager hands out (a fabric manager restarted under running GPUs, or not running); a hang whose last line
    is NVLS is the NVLS setup itself, which NCCL_NVLS_ENABLE=0 skips (NCCL's documented switch)."""
    if not _NVLS.search(joined):
        return None
    nvls_lines = _lines_matching(ctx, _NVLS.pattern)
    if _CUDA_INVALID.search(joined) and re.search(r"nvls\.cc", joined):
        return _make("driver", "the NVSwitch fabric manager's multicast is not available",
                     "NCCL's NVLink SHARP setup (transport/nvls.cc) gets 'invalid argument' from CUDA when it asks for "
                     "multicast memory: the NVSwitch fabric manager is not running, runs another version than the "
                     "driver, or was restarted while processes held the GPUs; 2 GPUs work because NVLS is used from 3",
                     "check systemctl status nvidia-fabricmanager (its version must equal the driver's, nvidia-smi -q "
                     "| grep -i fabric shows its state); restart it only with every GPU idle (stop the GPU jobs, "
                     "systemctl restart nvidia-fabricmanager, or reset the GPUs / reboot the node); until then "
                     "NCCL_NVLS_ENABLE=0 runs without NVLS", [ctx.line_fact(nvls_lines[0])], errors + nvls_lines)
    if re.search(r"(?i)\b(?:hangs?|hanging|stuck|freez\w*|stall\w*|never (?:finishes|returns))\b", joined):
        return _make("multi-gpu-transport", "NCCL hangs setting up NVLink SHARP (NVLS)",
                     "the last thing NCCL logs is its NVLS (NVLink SHARP multicast over the NVSwitch) setup, which it "
                     "uses from 3 GPUs up; that setup is what hangs (in a container it needs the fabric manager's "
                     "multicast and enough locked memory)",
                     "export NCCL_NVLS_ENABLE=0 (NCCL then uses ring/tree over NVLink, a little slower for large "
                     "all-reduces); to keep NVLS, check nvidia-fabricmanager is running at the driver's version and "
                     "start the container with --ulimit memlock=-1 --ipc=host", [ctx.line_fact(nvls_lines[0])],
                     errors + nvls_lines)
    return None


_TP_FLAG = r"--tensor-parallel-size|tensor_parallel_size|--tp-size|\s-tp\s+[2-9]"
_FAILS_SAID = re.compile(r"(?i)\b(?:error|bug|fails?|failed|failing|crash\w*|exception|does ?n.t work|not working)\b|报错|出错|失败")


def _tensor_parallel_fails(ctx: Context) -> Optional[Diagnosis]:
    """A serving engine that fails only when its tensor parallelism is on, said in words with no error line: its
    workers meet over /dev/shm and NCCL, so the engine's documented first checks (a container's shared memory, then
    peer-to-peer) are the likely reading."""
    said = [line for line in _lines_matching(ctx, _TP_FLAG + r"|(?i:multiple GPUs|multi[- ]?GPU|several GPUs)")
            if _FAILS_SAID.search(line.line)]
    if not said or not re.search(_TP_FLAG, _text(ctx)):
        return None
    return _make("multi-gpu-transport", "the engine fails once tensor parallelism spreads it over GPUs",
                 "with tensor parallelism the engine starts one worker per GPU; they exchange through /dev/shm "
                 "(64 MB in a default container) and NCCL (peer-to-peer between the GPUs), which is what fails when "
                 "one GPU works and several do not",
                 "in docker start the container with --ipc=host (or --shm-size=16g), as vLLM's docker docs say; on "
                 "consumer GPUs add NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce; rerun with NCCL_DEBUG=INFO to "
                 "see the step that fails", [], said, confirmed=False)


_NCCL_SET_UP = re.compile(r"\bNCCL INFO\b.{0,200}\bInit COMPLETE\b|\bNCCL INFO Channel \d+\s*:.{0,60}\bvia\b")
_STALL_SAID = re.compile(r"(?i)\b(?:stall\w*|hangs?|hanging|hung|stuck|freez\w*|deadlock\w*)\b|卡住|卡死|没有反应")


def _stalls_after_nccl_setup(ctx: Context) -> Optional[Diagnosis]:
    """NCCL's own log says it connected the GPUs (Init COMPLETE, the channels and their transport), and the user says
    the run then stalls: the setup went through and the first transfers between the GPUs never arrive. On a
    workstation or server that is the PCIe peer path: the IOMMU (VT-d / AMD-Vi) or ACS on the bridges redirecting the
    GPUs' peer writes, NCCL's documented first check for a hang."""
    text = _text(ctx)
    set_up = _lines_matching(ctx, _NCCL_SET_UP.pattern)
    if not set_up or not _STALL_SAID.search(text):
        return None
    if not (_SEVERAL_GPUS.search(text) or re.search(r"(?i)tensor[ _-]?parallel|\bnranks [2-9]|x ?[2-9] GPUs?\b", text)):
        return None
    return _make("multi-gpu-transport", "the GPUs' first transfers stall after NCCL set them up",
                 "NCCL connected the GPUs (its log shows the channels and Init COMPLETE), then the run stalls: the "
                 "transfers between the GPUs never arrive, which on a workstation or server is the IOMMU (VT-d / "
                 "AMD-Vi) or PCIe ACS redirecting their peer-to-peer writes through the CPU",
                 "confirm with NCCL_P2P_DISABLE=1 (it runs, slower); then turn the IOMMU off or to pass-through "
                 "(intel_iommu=off or iommu=pt on the kernel command line, or VT-d off in the BIOS) and ACS off (BIOS, "
                 "or setpci per bridge; sudo lspci -vvv | grep -i acsctl shows SrcValid+ where it is on), as NCCL's "
                 "troubleshooting guide says; then check with nccl-tests' all_reduce_perf", [], set_up[:1],
                 confirmed=False)


# (ASCII edges: "提示bus error" has a Chinese character, a word character to re, before "bus")
_BUS_ERROR_SHM = re.compile(r"(?i)(?<![a-z])bus error\b.{0,80}(?:(?<![a-z])shm\b|shared mem\w*|/dev/shm)|"
                            r"(?:(?<![a-z])shm\b|shared mem\w*|/dev/shm).{0,80}(?<![a-z])bus error\b|共享内存.{0,20}不足")
# more than one GPU or node said, or the user saying one of them works (单机 / 单卡 能运行: works on one machine)
_SEVERAL_SAID = re.compile(r"(?i)多卡|多机|多节点|单机能|单卡能|multi[- ]?node|--nnodes|torchrun|deepspeed|"
                           r"\b(?:works|runs) on (?:one|a single) (?:GPU|node|machine)\b")


def _shared_memory_said(ctx: Context) -> Optional[Diagnosis]:
    """A bus error with shared memory named, said in words, in a run over several GPUs or nodes: the ranks (and their
    data loaders) exchange through /dev/shm, which a container gives 64 MB by default."""
    said = _lines_matching(ctx, _BUS_ERROR_SHM.pattern)
    text = _text(ctx)
    if not said or not (_SEVERAL_SAID.search(text) or _SEVERAL_GPUS.search(text)):
        return None
    return _make("multi-gpu-transport", "shared memory (/dev/shm) is too small for the distributed run",
                 "the ranks and their data-loader workers pass tensors through /dev/shm; in a container it is 64 MB "
                 "unless widened, so the run dies with a bus error while one process fits",
                 "start the container with --shm-size=16g (or --ipc=host; compose: shm_size: 16gb), on every node; "
                 "on the host check df -h /dev/shm; lower the data loader's workers (dataloader_num_workers, "
                 "preprocessing_num_workers) if it cannot grow", [], said[:1], confirmed=False)


@rule("multi-gpu-transport")
def multi_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a collective that fails, times out or hangs (NCCL/RCCL's own lines, a watchdog, rccl-tests, a
    launcher that never gets past the first step), and the facts that pick the transport's fix: Windows (no NCCL),
    a container's /dev/shm, the socket interfaces NCCL listed or the nodes name, IOMMU faults in dmesg, and whether
    the GPUs are consumer cards (RDNA, GeForce: no usable PCIe peer-to-peer) or datacenter ones (iommu=pt)."""
    errors = ctx.of("multi-gpu-transport")
    rocm = re.search(r"(?i)\brocm[ -]?(\d+)\.(\d+)", _text(ctx))
    perf = [e for e in errors if re.search(r"_perf\b", e.line)]
    if perf and rocm and (int(rocm.group(1)), int(rocm.group(2))) < (5, 7):
        return _make("multi-gpu-transport", f"RCCL on ROCm {rocm.group(1)}.{rocm.group(2)} needs fine-grained PCIe memory",
                     "before ROCm 5.7 RCCL's peer buffers need fine-grained memory over PCIe; without it the "
                     "collectives that exchange between every pair fail allocating",
                     "export HSA_FORCE_FINE_GRAIN_PCIE=1 for the run (or move to ROCm 5.7 or newer, where it is not "
                     "needed)", [], perf)
    if not errors and ctx.of("platform-bios") and re.search(r"(?i)\b(?:NCCL|RCCL)\b", "\n".join(ctx.sheet.lines)):
        errors = [e for e in ctx.errors if e.family is None and re.search(r"(?i)\b(?:NCCL|RCCL)\b", e.line)]
    if not errors:
        return (_split_model_garbage(ctx) or _stalls_after_nccl_setup(ctx) or _shared_memory_said(ctx) or
                _tensor_parallel_fails(ctx) or one_gpu_works_several_not(ctx))
    text = " ".join(e.line for e in errors)
    joined = "\n".join(ctx.sheet.lines)
    evidence = [ctx.line_fact(errors[0])]
    too_old = _nccl_before_the_gpu(ctx, errors, joined)
    if too_old is not None:
        return too_old
    quiet = cumem_host_without_peer(ctx, errors) or silent_after_the_ibverbs_warning(ctx, errors)
    if quiet is not None:
        return quiet
    custom = _custom_all_reduce(ctx, errors, text)
    if custom is not None:
        return custom
    nvls = _nvlink_sharp(ctx, errors, joined)
    if nvls is not None:
        return nvls
    if re.search(r"(?i)doesn.t have NCCL", text) or (re.search(r"(?i)\bNCCL\b", text) and ctx.sheet.is_windows):
        gloo = ("use the gloo backend: init_process_group(backend=\"gloo\") (Lightning: DDPStrategy("
                "process_group_backend=\"gloo\"); a config's dist backend: gloo), or run under Linux / WSL 2 for NCCL")
        if re.search(r"(?i)\baccelerate\b", joined) and not _SEVERAL_GPUS.search(joined):
            # accelerate starts a process group only because its saved config says multi-GPU; one GPU needs none
            gloo = ("on one GPU no process group is needed: rerun `accelerate config` and answer \"No distributed "
                    "training\" (or accelerate launch --num_processes 1); for several GPUs on Windows, " + gloo)
        return _make("multi-gpu-transport", "this torch has no NCCL (Windows)",
                     "torch on Windows (and macOS) is built without NCCL, so the nccl backend does not exist",
                     gloo, evidence, errors)
    if re.search(r"(?i)shm_open failed\s*:\s*Permission denied|/dev/shm\S*:? Permission denied", text):
        return _make("multi-gpu-transport", "the user may not create shared memory segments",
                     "NCCL/RCCL create their buffers in /dev/shm, and this user may not create files there",
                     "fix the permissions of /dev/shm: sudo chmod 1777 /dev/shm (it must be world-writable with the "
                     "sticky bit; a container: --ipc=host)", evidence, errors)
    ifaces = ctx.sheet.of("nccl_iface")
    listed = [f.value for f in ifaces if f.detail == "listed"]
    virtual = [i for i in listed if re.match(r"(?:br-|veth|docker|virbr|lo$|cni|flannel|tun|tap)", i)]
    real = [i for i in listed if i not in virtual]
    named = list(dict.fromkeys(f.value for f in ifaces if f.detail == "named"))
    nic = re.search(r"\b((?:enp|ens|eno|eth|ib|bond|en)\w*\d\w*)\b", joined)
    if re.search(r"(?i)no socket interface found", text) and nic:
        return _make("multi-gpu-transport", "NCCL finds no interface by the name it was given",
                     f"NCCL_SOCKET_IFNAME does not match an interface NCCL can use as written; {nic.group(1)} is the "
                     "one that carries the nodes' addresses",
                     f"export NCCL_SOCKET_IFNAME={nic.group(1)} (the bare name, no '=' prefix or spaces) on every node, "
                     f"and GLOO_SOCKET_IFNAME={nic.group(1)}", evidence, errors)
    if len(named) > 1 or (virtual and real):
        value = ",".join(named) if len(named) > 1 else real[0]
        why = ("the nodes name their network interfaces differently, and NCCL picks the first one it finds"
               if len(named) > 1 else f"NCCL also tries container bridges and virtual links ({', '.join(virtual[:3])}) "
               "that do not reach the other node")
        return _make("multi-gpu-transport", "NCCL's sockets take the wrong network interface", why,
                     f"export NCCL_SOCKET_IFNAME={value} on every node (GLOO_SOCKET_IFNAME too, for torch's gloo)",
                     evidence + ifaces[:2], errors)
    if re.search(r"(?i)\bP2P\b.{0,60}\bslower\b|slower than SHM", text):
        return _make("multi-gpu-transport", "peer-to-peer transfers crawl on this platform",
                     "RCCL/NCCL pick P2P between the GPUs, but P2P across these PCIe root ports is broken or "
                     "throttled", "export NCCL_P2P_DISABLE=1 (the transfers go through host shared memory); check ACS "
                     "and the IOMMU (iommu=pt) for a real fix", evidence, errors)
    if re.search(r"(?i)\bibv_reg_\w+.{0,60}Cannot allocate memory", text):
        return _make("multi-gpu-transport", "RDMA cannot pin NCCL's buffers: the locked-memory limit is too small",
                     "InfiniBand / RoCE registers (pins) NCCL's buffers; the process's locked-memory limit (ulimit -l, "
                     "often 64 KiB or 8 MiB by default) is smaller than they need, so registration fails with "
                     "\"Cannot allocate memory\"",
                     "raise the limit: ulimit -l unlimited for the run, and for every login / mpirun-started process "
                     "'* soft memlock unlimited' and '* hard memlock unlimited' in /etc/security/limits.conf (log in "
                     "again; check `ulimit -l` under mpirun / srun); a container: --ulimit memlock=-1; a NCCL_BUFFSIZE "
                     "set very large asks for more pinned memory too (unset it)", evidence, errors)
    if re.search(r"(?i)completion (?:from peer \S+ )?with error 12\b|vendor err 129\b", text):
        roce = re.search(r"(?i)\bRoCE\b|link_layer:\s*Ethernet", joined)
        return _make("multi-gpu-transport", "RDMA transfers between the nodes time out (IB error 12)",
                     "error 12 (vendor err 129) is a transport retry timeout: the RDMA packets never reach the other "
                     "HCA; on RoCE the usual reason is the default GID index, which picks a RoCE v1 or link-local "
                     "address the other node does not route" + (" (these ports are RoCE / Ethernet)" if roce else ""),
                     "on RoCE export NCCL_IB_GID_INDEX=3 (the RoCE v2 IPv4 GID: show_gids lists each port's; use "
                     "the index whose type is v2 with the node's IP) on every node; check PCIe ACS is off; where the "
                     "nodes have no working RDMA path at all, NCCL_IB_DISABLE=1 (sockets) with "
                     "NCCL_SOCKET_IFNAME=<the shared interface>", evidence, errors)
    if re.search(r"(?i)NET/IB\b|\bibv_\w+|\bmlx5|InfiniBand|\bRoCE\b", text):
        return _make("multi-gpu-transport", "NCCL's InfiniBand / RoCE transport fails",
                     "NCCL uses the RDMA network (IB verbs) between the nodes whenever it finds an HCA; a port that is "
                     "down, an HCA the nodes do not share, or a container without the RDMA devices fails it",
                     "where the nodes have no working InfiniBand / RoCE between them: export NCCL_IB_DISABLE=1 (sockets "
                     "instead) with NCCL_SOCKET_IFNAME=<the shared interface>; else pick the working HCA and port "
                     "(NCCL_IB_HCA=mlx5_0:1; ibstat shows which are Active), and in a container pass --device "
                     "/dev/infiniband --cap-add IPC_LOCK; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET shows the choice",
                     evidence, errors)
    if re.search(r"(?i)alltoall", joined) and re.search(r"(?i)XGMI", joined):
        return _make("multi-gpu-transport", "alltoall hangs without XGMI",
                     "without XGMI links the peer-to-peer channels of alltoall(v) over PCIe deadlock",
                     "export NCCL_MAX_P2P_NCHANNELS=2 (RCCL before ROCm 6.0), or update RCCL", evidence, errors)
    if re.search(r"(?i)shared memory|/dev/shm|shm", text):
        return _make("multi-gpu-transport", "shared memory is too small for the GPUs' transport",
                     "RCCL/NCCL pass data between processes through /dev/shm, which is 64 MB in a default container",
                     "docker run --ipc=host (or --shm-size=16g): /dev/shm must hold NCCL's segments",
                     [ctx.line_fact(errors[0])], errors)
    iommu = [e for e in ctx.of("platform-bios") if re.search(r"(?i)AMD-Vi|IO_PAGE_FAULT|DMAR|iommu", e.line)]
    if iommu:   # the IOMMU faulting on the GPUs' DMA is why their peer-to-peer traffic fails
        diagnosis = _make("multi-gpu-transport", "the IOMMU blocks the GPUs' peer-to-peer traffic",
                          "the IOMMU in translation mode faults on the DMA between the GPUs (the fault is in dmesg), so "
                          "the collective fails or hangs", "add iommu=pt (amd_iommu=on iommu=pt on AMD CPUs) to "
                          "GRUB_CMDLINE_LINUX_DEFAULT, sudo update-grub, reboot; until then NCCL_P2P_DISABLE=1 runs "
                          "without peer-to-peer", evidence + [ctx.line_fact(iommu[0])], errors + iommu)
        diagnosis.rank = family("platform-bios").rank - 1
        return diagnosis
    rendezvous = re.search(r"(?i)\[c10d\]|client socket has timed out|TCPStore|rendezvous|MASTER_ADDR", text)
    if (_CONTAINED.search(joined) or ctx.sheet.has("platform", "container")) and not rendezvous and \
            not re.search(r"--ipc[= ]host|--shm-size", joined) and not ctx.sheet.is_windows and _catalogue(errors) is None:
        # (a message the catalogue knows names its own cause, container or not)
        # a container's /dev/shm is 64 MB unless the run widens it: the first thing NCCL/RCCL outgrow there
        return _make("multi-gpu-transport", "the container's shared memory is too small for NCCL",
                     "the GPUs' processes (vLLM's tensor-parallel workers, torchrun's ranks) exchange through "
                     "/dev/shm, which a default container gives only 64 MB, so NCCL/RCCL fail or hang while connecting",
                     "start the container with --shm-size=16g (or --ipc=host; compose: shm_size: 16gb / ipc: host); "
                     "if it still fails, rerun with NCCL_DEBUG=INFO and try NCCL_P2P_DISABLE=1", evidence, errors)
    if rendezvous:
        return _make("multi-gpu-transport", "the processes cannot reach the rendezvous address",
                     "torch's launcher could not connect to MASTER_ADDR:MASTER_PORT (a firewall, an address the other "
                     "node cannot route to, or a socket on the wrong interface)",
                     "check from every node: nc -zv <MASTER_ADDR> <MASTER_PORT>; open the port in the firewall; set "
                     "MASTER_ADDR to the address on the shared network and NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to "
                     "that interface (ip -br addr)", evidence, errors)
    if re.search(r"(?i)remote process exited or there was a network error|\bncclRemoteError\b|"
                 r"socketProgress\w*:.{0,80}(?:Connection reset by peer|failed)", text):
        # NCCL's own words for a peer that vanished: a rank that died first, or the network between the nodes
        return _make("multi-gpu-transport", "NCCL lost its connection to another rank",
                     "NCCL reports a remote error when the connection to another rank drops: that rank died first "
                     "(its own log's first error is the cause), or the network between the nodes failed (an "
                     "InfiniBand port down or flapping, a socket on an interface the other node cannot reach)",
                     "look first for an earlier error on the other ranks (an out-of-memory, a crash); if every rank "
                     "was alive, test the network between the nodes: on InfiniBand check each node's ports (ibstat: "
                     "State Active, same rate; ibv_devinfo) and rerun with NCCL_IB_DISABLE=1 to confirm, repairing or "
                     "leaving out the node whose IB fails; over sockets export NCCL_SOCKET_IFNAME=<the interface that "
                     "reaches the other nodes> (ip -br addr) on every node, GLOO_SOCKET_IFNAME too; NCCL_DEBUG=INFO "
                     "NCCL_DEBUG_SUBSYS=NET,INIT shows the transport and interface", evidence, errors)
    nodes = re.search(r"(?i)\b(?:[2-9]|two|several|multiple) (?:machines|nodes|servers|hosts)\b|--nnodes[= ]?[2-9]", joined)
    if nodes and re.search(r"(?i)unhandled system error|socket|connect|timed? ?out", text) and \
            not re.search(r"(?i)/dev/shm|shm", text):
        return _make("multi-gpu-transport", "the nodes do not reach each other on the interface NCCL picked",
                     "across machines NCCL opens sockets on the first interface it finds; a firewall or an interface "
                     "the other node cannot route to fails the setup (\"unhandled system error\")",
                     "check that the nodes reach each other (ping, a firewall open between them), then export "
                     "NCCL_SOCKET_IFNAME=<the interface on the shared network> (ip -br addr) on every node, "
                     "GLOO_SOCKET_IFNAME too; NCCL_DEBUG=INFO shows the interface it used" +
                     ("; each node in a container (docker run without host networking gives it a private bridge "
                      "address the other node cannot reach): run the containers with --network=host"
                      if _container_paths(joined) else ""), evidence, errors)
    if re.search(r"(?i)unhandled system error", text) and not _CONTAINED.search(_text(ctx)) and \
            not ctx.sheet.has("platform", "container"):
        # the paste does not say where it ran: a container's small /dev/shm (the common cause) or, on the host, the
        # transport between the GPUs; both fixes, the container's first
        visible = "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
        return _make("multi-gpu-transport", "NCCL's setup between the GPUs fails",
                     "\"unhandled system error\" is NCCL failing a system call while it connects the GPUs: in a "
                     "container, its 64 MB /dev/shm; on the host, shared memory or peer-to-peer between the GPUs",
                     "in a container: docker run --ipc=host (or --shm-size=16g); on the host: run on one GPU to confirm "
                     f"({visible}=0 python train.py ... works), then rerun with NCCL_DEBUG=INFO to see the failing "
                     "call, and try NCCL_P2P_DISABLE=1, then NCCL_SHM_DISABLE=1", evidence, errors)
    if _P2P_OFF_WORKS.search(joined):
        return _make("multi-gpu-transport", "peer-to-peer between the GPUs is broken on this platform",
                     "the run works once NCCL_P2P_DISABLE=1 sends the transfers through host memory: the GPUs' direct "
                     "PCIe peer-to-peer path is what hangs, and on a server that is PCIe ACS on the switches or the "
                     "IOMMU (VT-d / AMD-Vi) redirecting every peer write to the CPU",
                     "NCCL_P2P_DISABLE=1 is safe (it costs bandwidth only, results are the same); to get P2P back, "
                     "turn ACS off on the PCIe switches (BIOS, or setpci per bridge: sudo lspci -vvv | grep -i acsctl "
                     "shows SrcValid+ where it is on) and boot with iommu=pt (or VT-d off in the BIOS), then check "
                     "with nccl-tests' all_reduce_perf", evidence, errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("multi-gpu-transport", hit, errors)
    consumer = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"gfx1[0-2]\w+|sm_(?:75|86|89|120)", a)]
    named = " ".join(f.value for f in ctx.sheet.of("gpu"))
    tests_hang = re.search(r"(?i)\b(?:nccl|rccl)[- _]?tests?\b|\ball_reduce_perf\b", joined) and \
        re.search(r"(?i)\b(?:stall\w*|hangs?|hanging|stuck|freez\w*|deadlock\w*)\b", joined)
    if tests_hang and ctx.sheet.machine_archs and not consumer and _vendor(ctx) != "amd":
        # (on AMD GPUs RCCL's documented first requirement is iommu=pt: the fallback below says it)
        # the collective test itself hangs on a server's GPUs: PCIe ACS sends every peer-to-peer write up to the root
        # complex, where it stalls (NCCL's documented first check for a hang on a PCIe server)
        diagnosis = _make("platform-bios", "PCIe ACS blocks the GPUs' peer-to-peer traffic",
                          "on a server whose GPUs talk over PCIe switches, Access Control Services (ACS) on the "
                          "bridges redirect peer-to-peer writes to the CPU's root complex, and NCCL/RCCL's P2P "
                          "transfers stall: the collective hangs",
                          "check the bridges: sudo lspci -vvv | grep -i acsctl (SrcValid+ means ACS is on); disable ACS "
                          "in the BIOS (PCIe ACS control / 'ACS Enable' off) or per bridge with setpci (setpci -s "
                          "<bridge> ECAP_ACS+0x6.w=0000); confirm first with NCCL_P2P_DISABLE=1 (it runs, slower)",
                          evidence, errors)
        return diagnosis
    if consumer and not re.search(r"(?i)\b(?:A100|H100|H200|L40|A40|A6000|RTX A|RTX PRO|W7\d00|MI\d+)", named):
        return _make("multi-gpu-transport", "consumer GPUs without working peer-to-peer",
                     f"these are consumer cards ({', '.join(dict.fromkeys(consumer))}): PCIe peer-to-peer between them "
                     "is missing or broken on desktop boards, and NCCL/RCCL hang or fail when they pick it",
                     "export NCCL_P2P_DISABLE=1 (the transfers go through host memory); if it still hangs, add iommu=pt "
                     "to the kernel command line; NCCL_DEBUG=INFO shows the transport it picked" +
                     ("; vLLM: also --disable-custom-all-reduce (its own all-reduce uses P2P too)"
                      if ctx.tool(errors) == "vllm" else ""), evidence, errors)
    return _make("multi-gpu-transport", "the GPUs cannot reach each other",
                 "peer-to-peer transfers between the GPUs fail or hang (the IOMMU in translation mode, PCIe ACS, or "
                 "a platform without P2P)", "rerun with NCCL_DEBUG=INFO (the line before the failure names the "
                 "transport: P2P, SHM, NET); confirm with NCCL_P2P_DISABLE=1 (slower, but it runs), then add iommu=pt "
                 "to the kernel command line and turn ACS off in the BIOS", [ctx.line_fact(errors[0])], errors)
