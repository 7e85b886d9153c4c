"""How a trainer's launch decides which GPUs its processes see (visibility): a question or complaint about training
on several GPUs, answered by the launcher the paste names; a GPU chosen for a one-process trainer; the DeepSpeed
launcher, which replaces CUDA_VISIBLE_DEVICES with its own list; SLURM's per-task GPU binding.

  several GPUs asked     one process uses one GPU (or splits the model, one busy at a time): the launcher starts one
                         process per GPU — llamafactory-cli over every visible GPU, ms-swift with NPROC_PER_NODE,
                         torchtune's *_distributed recipes, Lightning's Trainer(devices=, strategy="ddp"), accelerate
                         launch (after accelerate config) for a script, TRL's examples and Trainer code
  one GPU chosen         a one-process trainer (Unsloth, a notebook) takes cuda:0 unless CUDA_VISIBLE_DEVICES, set
                         before the first import of torch, leaves only the chosen card
  DataParallel replica   "Caught ... in replica 1 on device 1": the HF Trainer wrapped the model in nn.DataParallel
                         because several GPUs are visible to one process; a one-GPU library fails there
  deepspeed's own list   the deepspeed launcher sets CUDA_VISIBLE_DEVICES for each rank from --include / --num_gpus,
                         so one exported before it is overridden (or turned into slots that do not exist)
  SLURM per-task GPUs    --gpus-per-task / --ntasks-per-gpu bind each task to its own GPU (gpu-bind per task), so
                         every process sees one card

Facts: torchtune's README (tune run --nproc_per_node N full_finetune_distributed; the single_device recipes run on
one GPU); Lightning's Trainer docs (accelerator, devices, strategy="ddp"); LLaMA-Factory's README (CUDA_VISIBLE_DEVICES=0,1 llamafactory-cli train ...; the CLI starts torchrun over the
visible GPUs, NPROC_PER_NODE overrides the count); ms-swift's examples/train/multi-gpu (NPROC_PER_NODE=N with
CUDA_VISIBLE_DEVICES for DDP; one process with several visible GPUs splits the model over them, device_map);
accelerate's docs (Accelerator() in a plain `python script.py` is "Distributed environment: NO, Num processes: 1";
accelerate config + accelerate launch start one process per GPU); transformers' Trainer (n_gpu > 1 in one process
wraps the model in torch.nn.DataParallel); Unsloth's README (open-source Unsloth trains on one GPU); DeepSpeed's
getting-started "Resource Configuration" (--include localhost:<ids>) and deepspeedai/DeepSpeed#662 (the launcher does
not honour CUDA_VISIBLE_DEVICES); Slurm's sbatch man page (--ntasks-per-gpu implies --gpu-bind=single:<ntasks>,
--gpus-per-task implies --gpu-bind=per_task:<gpus_per_task> since 21.08); snakemake-executor-plugin-slurm (the
tasks_per_gpu resource sets --ntasks-per-gpu, a value below 1 leaves it out: snakemake-executor-plugin-slurm#316/#373).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import INFERENCE_TOOLS
from steadytune.doctor.rules.base import (Context, Diagnosis, _first, _lines_matching, _make, on_windows, _text, _vendor,
                                          rule)

# training on several GPUs asked for, or one busy while the others idle, in English and Chinese
_SEVERAL_ASKED = re.compile(
    r"(?i)\bhow (?:to|can I|do I|can we|should I) (?:set|use|enable|do|run|train|configure|launch|start|get)\b.{0,30}"
    r"\b(?:multi[- ]?gpus?|multiple gpus|several gpus|all (?:the |my )?(?:\d+ )?gpus|\d+ gpus|ddp|data[- ]parallel|"
    r"distributed)\b|\bonly (?:one|1|a single) gpu (?:is |was )?(?:being )?used\b|\bonly (?:uses?|using) (?:one|1|a "
    r"single) gpu\b|\bhow to set multi[- ]?gpu\b|"
    r"(?:怎么|如何|怎样).{0,20}(?:多卡|多GPU|多 GPU|DDP|[0-9两三四五六七八]卡)|无法.{0,6}多卡|"
    r"只有(?:一|1)(?:张|个)?卡.{0,10}(?:工作|利用率|在跑)|数据分到不同(?:的)?(?:显卡|GPU|卡)|"
    # data parallel wanted where the model was split over the GPUs ("splits the model ... instead of data parallel",
    # "模型被切到两张卡上 ... 我想要的是 DDP")
    r"\bsplit\w*\b.{0,20}\bmodel\b.{0,60}\b(?:instead of|rather than|not)\b.{0,20}\b(?:data[- ]parallel|DDP)\b|"
    r"模型(?:被)?(?:切|分|拆)(?:到|在|成).{0,60}(?:DDP|数据并行)|(?:想要|想用|想|要的是).{0,6}(?:DDP|数据并行)")
# the user asks to split one model over the GPUs (memory), not to train on all of them: another reading (sharding)
_MODEL_SPLIT_ASKED = re.compile(r"(?i)(?:让|要|想|实现)模型并行|模型切分|\bmodel[- ]parallel|\bshard(?:ing)? (?:the |a |one )?model\b|"
                                r"\bsplit (?:the |a |one )?model\b|(?:每一?(?:个|张)卡|each (?:GPU|card)).{0,12}"
                                r"(?:完整|整个|full|whole|entire)|加载到每一?(?:个|张)卡")
_ERRORS_OF_OTHERS = ("visibility", "multi-gpu-transport", None)

# launchers, by the words that name them (a source path of the tool counts: src/train_web.py is LLaMA-Factory's)
_SWIFT = re.compile(r"(?i)\bswift (?:sft|pt|rlhf|infer)\b|\bms-swift\b|modelscope/swift")
# (LLaMA-Factory's own layout names it too: src/train.py given a YAML config, its examples/ folders of YAML configs)
_LLAMAFACTORY = re.compile(r"(?i)llama[-_ ]?factory|llamafactory-cli|src[/\\](?:train_(?:web|bash)\.py|train\.py\s+\S+"
                           r"\.ya?ml\b)|\bexamples[/\\](?:lora_multi_gpu|full_multi_gpu|train_lora|train_qlora|"
                           r"train_full)[/\\]\S+\.ya?ml\b")
_TORCHTUNE = re.compile(r"(?i)\btorchtune\b|\btune run\b")
_LIGHTNING = re.compile(r"(?i)\bpytorch[_-]lightning\b|\blightning\.(?:pytorch|Trainer)\b|\bLightningModule\b|"
                        r"\bimport lightning\b")
_INFERENCE = re.compile(r"(?i)\bollama\b|\bvllm\b|llama\.cpp|llama-server|\bsglang\b|lm ?studio")

_CN_COUNT = {"两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "two": 2, "three": 3, "four": 4,
             "eight": 8}


def _gpu_count(text: str) -> Optional[int]:
    """How many GPUs the paste says the run should use: a visibility list, "8卡", "4 GPUs"."""
    listed = re.search(r"\bCUDA_VISIBLE_DEVICES\s*=\s*[\"']?(\d+(?:,\d+)+)", text)
    if listed:
        return len(listed.group(1).split(","))
    said = re.search(r"(?i)([2-8两三四五六七八]|two|three|four|eight)\s*[x×]?\s*(?:张)?\s*(?:卡|显卡|GPUs\b|cards\b|"
                     r"(?:NVIDIA |GeForce )?(?:RTX|GTX|Tesla|A100|H100|H200|A6000|V100|L40S?|MI\d{3})\b)", text)
    if said:
        return _CN_COUNT.get(said.group(1).lower()) or int(said.group(1))
    return None


def _several_gpus_asked(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    said = _lines_matching(ctx, _SEVERAL_ASKED.pattern)
    if not said or _INFERENCE.search(text) or set(ctx.sheet.tools) & set(INFERENCE_TOOLS) or \
            _MODEL_SPLIT_ASKED.search(text) or \
            any(e.family not in _ERRORS_OF_OTHERS for e in ctx.errors):
        return None
    count = _gpu_count(text)
    ids = ",".join(str(i) for i in range(count)) if count else "0,1,...,N-1"
    name = "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
    listed = re.search(r"\b(?:CUDA|HIP)_VISIBLE_DEVICES\s*=\s*[\"']?(\d+(?:,\d+)*)", text)
    if _SWIFT.search(text):
        chosen = listed.group(1) if listed else ids
        n = len(chosen.split(",")) if listed else (count or "<the number of GPUs>")
        return _make("visibility", "ms-swift runs one process over the visible GPUs",
                     "started without NPROC_PER_NODE, swift sft runs a single process that splits the model across "
                     "every visible GPU (device_map), so one card computes at a time; data-parallel training needs one "
                     "process per GPU",
                     f"NPROC_PER_NODE={n} {name}={chosen} swift sft ... (NPROC_PER_NODE equal to the number of GPUs "
                     "listed; see ms-swift's examples/train/multi-gpu)", [], said[:1], confirmed=False)
    n = count or "<number of GPUs>"
    if _TORCHTUNE.search(text):
        return _make("visibility", "torchtune trains on several GPUs only with a distributed recipe",
                     "a single-device recipe (lora_finetune_single_device, full_finetune_single_device) runs one "
                     "process on one GPU; the *_distributed recipes run one process per GPU",
                     f"tune run --nproc_per_node {n} lora_finetune_distributed --config <the model's *_lora config> "
                     f"(or full_finetune_distributed), with {name}={ids} to choose the GPUs", [], said[:1],
                     confirmed=False)
    if _LIGHTNING.search(text):
        return _make("visibility", "Lightning uses the devices its Trainer is given",
                     "Lightning's Trainer starts its processes itself from devices= and strategy=; with devices=1 "
                     "(or a single index) it runs on one GPU",
                     f"Trainer(accelerator=\"gpu\", devices={count or -1}, strategy=\"ddp\") (devices=-1: every "
                     f"visible GPU; {name}={ids} chooses which), started with python or srun as usual", [], said[:1],
                     confirmed=False)
    if _LLAMAFACTORY.search(text):
        config = re.search(r"\S+\.ya?ml\b", text)
        config = config.group(0).lstrip(".\\/") if config else "<your config>.yaml"
        # the variable set the way the paste's shell sets it (cmd's `set`, PowerShell's $env:), else on the command
        windows = on_windows(ctx, text) or bool(re.search(r"(?m)^\s*set \w+=|\$env:|\.\\", text))
        start = (f"set {name}={ids} (PowerShell: $env:{name}=\"{ids}\"), then llamafactory-cli train {config}"
                 if windows else f"{name}={ids} llamafactory-cli train {config}")
        return _make("visibility", "LLaMA-Factory trains on the GPUs it can see",
                     "there is no config key for the GPU count: llamafactory-cli starts torchrun with one process per "
                     "visible GPU (NPROC_PER_NODE overrides the count), and the web UI launches training the same way; "
                     "python src/train.py runs a single process, which uses one GPU whatever is visible",
                     f"{start} (not python src/train.py; the web UI: llamafactory-cli webui with the same variable; an "
                     "old checkout started with python src/train_web.py: update LLaMA-Factory first)", [], said[:1],
                     confirmed=False)
    return _make("visibility", "a script started with python runs one process on one GPU",
                 "`python script.py` starts one process, which uses one GPU (accelerate reports \"Distributed "
                 "environment: NO, Num processes: 1\"); training on several GPUs needs one process per GPU, started by "
                 "a launcher",
                 f"run accelerate config once (multi-GPU, {count or 'the number of'} GPUs), then start with "
                 f"accelerate launch --num_processes {count or '<number of GPUs>'} script.py (or torchrun "
                 f"--nproc_per_node {count or '<number of GPUs>'} script.py); to split one large model over the GPUs "
                 "instead, load it with device_map=\"auto\"", [], said[:1], confirmed=False)


# a single card chosen for a one-process trainer: "I want it to use gpu 1", "how to specify the GPU device number"
_ONE_CHOSEN = re.compile(r"(?i)\bwant (?:it|\w+) to use (?:the )?(?:gpu|cuda|card|device) ?:?#?(\d)\b|"
                         r"\b(?:specify|select|choose|pick|set) (?:the |a |which )?(?:gpu|cuda) ?(?:device )?"
                         r"(?:number|id|index|ordinal)\b|\bchange (?:the )?(?:gpu|cuda )?device\b(?!\W{0,3}(?:to|=)\W{0,3}(?:cpu|mps))|"
                         r"\buse (?:gpu|cuda:?) ?(\d) instead\b|指定.{0,6}(?:显卡|GPU|卡)(?:号|编号)?")
_ONE_GPU_TRAINERS = re.compile(r"(?i)\bunsloth\b|jupyter|notebook|\.ipynb\b|colab")


def _one_gpu_chosen(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    said = _lines_matching(ctx, _ONE_CHOSEN.pattern)
    if not said or not _ONE_GPU_TRAINERS.search(text) or _INFERENCE.search(text) or \
            any(e.family not in _ERRORS_OF_OTHERS for e in ctx.errors):
        return None
    index = next((g for m in _ONE_CHOSEN.finditer(text) for g in m.groups() if g), None) or "<the GPU's index>"
    name = "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
    tool = "unsloth" if re.search(r"(?i)\bunsloth\b", text) else "torch"
    return _make("visibility", "the trainer takes the first visible GPU",
                 f"{'Unsloth trains on one GPU and ' if tool == 'unsloth' else ''}a single-process trainer puts the "
                 "model on cuda:0, the first GPU it can see; which card that is is chosen by the visibility variable, "
                 "read once when CUDA starts",
                 f"{name}={index} python train.py (a notebook or script: os.environ[\"{name}\"] = \"{index}\" as the "
                 f"very first lines, before importing {tool} or torch; restart the kernel after changing it); add "
                 "CUDA_DEVICE_ORDER=PCI_BUS_ID so the index is nvidia-smi's", [], said[:1], confirmed=False)


_REPLICA = re.compile(r"(?i)\bCaught \w+ in replica (\d+) on device (\d+)")


def _data_parallel_replica(ctx: Context) -> Optional[Diagnosis]:
    """nn.DataParallel's own words: one process drove several GPUs because they were all visible to it."""
    said = _lines_matching(ctx, _REPLICA.pattern)
    if not said:
        return None
    text = _text(ctx)
    name = "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
    one_gpu = re.search(r"(?i)\bunsloth\b", text)
    return _first(_make("visibility", "one process drove several GPUs through nn.DataParallel",
                        "the error comes from torch.nn.DataParallel's replica on another GPU: with several GPUs "
                        "visible to one process, the transformers Trainer wraps the model in DataParallel, which "
                        + ("Unsloth (one GPU only) and " if one_gpu else "") + "quantized or device_map-split models "
                        "do not survive",
                        f"export {name}=0 (one GPU; or the index of the card to use) before starting, or in the "
                        f"notebook os.environ[\"{name}\"] = \"0\" before importing torch"
                        + ("" if one_gpu else "; for real multi-GPU training start one process per GPU with "
                           "accelerate launch / torchrun instead"), [ctx.line_fact(said[0])], said[:1]))


_DEEPSPEED_LAUNCH = re.compile(r"(?m)^\W*(?:\w+=\S+\s+)*deepspeed\s+(?:--\w|\S+\.py)")
_NO_SLOT = re.compile(r"No slot '(\d+)' specified on host '([\w.-]+)'")


# the user's own account of it: the visibility variable reset, overridden or ignored under deepspeed
_VARIABLE_OVERRIDDEN = re.compile(
    r"(?i)\b(?:CUDA|HIP|ROCR)_VISIBLE_DEVICES\b.{0,40}\b(?:(?:is|was|gets?|got|would be|will be|being) (?:reset|"
    r"overrid\w+|overwrit\w+|replaced|ignored|unset|changed)|not (?:respected|honou?red|tak\w+ effect|work\w*)|"
    r"has no effect|doesn.t work)|\b(?:ignores?|overrides?|resets?|overwrites?) (?:my |the )?(?:CUDA|HIP)_VISIBLE_DEVICES")


def _deepspeed_own_list(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    slot = _lines_matching(ctx, _NO_SLOT.pattern)
    listed = re.search(r"\bCUDA_VISIBLE_DEVICES\s*=\s*[\"']?(\d+(?:,\d+)*)", text)
    overridden = (_lines_matching(ctx, _VARIABLE_OVERRIDDEN) if re.search(r"(?i)\bdeepspeed\b", text) else [])
    if not slot and not (listed and _DEEPSPEED_LAUNCH.search(text)) and not overridden:
        return None
    if not slot and any(e.family not in _ERRORS_OF_OTHERS for e in ctx.errors):
        return None
    ids = (listed.group(1) if listed else _NO_SLOT.search(slot[0].line).group(1) if slot
           else "<the GPU ids, e.g. 1,2>")
    said = (slot or overridden or _lines_matching(ctx, r"\bCUDA_VISIBLE_DEVICES\s*=")
            or _lines_matching(ctx, _DEEPSPEED_LAUNCH.pattern))
    diagnosis = _make("visibility", "the deepspeed launcher chooses the GPUs itself",
                      "the deepspeed launcher builds its own list of GPUs (all of the host's, or --include / "
                      "--num_gpus) and sets CUDA_VISIBLE_DEVICES for each rank from it, so one exported before it is "
                      "overridden, or its indices become slots the host does not have (\"No slot ... specified\")",
                      f"unset CUDA_VISIBLE_DEVICES and pass the GPUs to the launcher: deepspeed --include "
                      f"localhost:{ids} train.py ... (in place of --num_gpus; several nodes: a hostfile with slots, "
                      "and --include host:ids)", [ctx.line_fact(said[0])] if slot else [], said[:1],
                      confirmed=bool(slot))
    return _first(diagnosis) if slot else diagnosis


_PER_TASK = re.compile(r"(?i)--gpus-per-task|--ntasks-per-gpu|\bntasks[-_]per[-_]gpu\b|\bgpus[-_]per[-_]task\b|"
                       r"\btasks_per_gpu\b")
_ONE_EACH = re.compile(r"(?i)\bper[- ]\*?rank\*?\b|\beach (?:(?:rank|task|process|worker) )?(?:having|with|seeing|sees|gets?|"
                       r"has) (?:access to )?"
                       r"(?:a different|its own|one|only one)\b|\bonly (?:ever )?sees? one\b|\bdo(?:es)? not match\b|"
                       r"\bdiffer\w*\b.{0,30}\b(?:rank|task)|\bruns? the code twice\b|"
                       # in Chinese: every rank / process sees only its own card, or a different list
                       r"每个\s*(?:rank|进程|task|任务).{0,30}(?:只有|不一样|不同|各自|自己)")


def _slurm_per_task_gpus(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not re.search(r"(?i)\bslurm\b|\bsrun\b|\bsbatch\b", text) or not _PER_TASK.search(text):
        return None
    said = _lines_matching(ctx, _ONE_EACH.pattern)
    # a rank that sets its device by its local rank finds only one GPU in its binding: "invalid device ordinal" (or
    # HIP's hipErrorInvalidDevice) on every rank but the first settles it
    ordinal = [e for e in ctx.errors if re.search(r"(?i)invalid device ordinal|hipErrorInvalidDevice|"
                                                  r"CUDA_ERROR_INVALID_DEVICE", e.line)]
    if not said and not ordinal:
        return None
    snakemake = re.search(r"(?i)\bsnakemake\b", text)
    # the job's own numbers where it shows them: tasks on a node times GPUs per task are the node's GPUs
    tasks = re.search(r"(?i)--ntasks-per-node[= ](\d+)", text)
    per_task = re.search(r"(?i)--gpus-per-task[= ](\d+)", text)
    gpus = str(int(tasks.group(1)) * int(per_task.group(1))) if tasks and per_task else "<GPUs on each node>"
    diagnosis = _make(
        "visibility", "SLURM binds each task to its own GPU",
        "SLURM's per-task GPU requests bind every task to its GPUs (--gpus-per-task implies --gpu-bind=per_task since "
        "Slurm 21.08, --ntasks-per-gpu implies --gpu-bind=single), so each process sees only its own card and "
        "CUDA_VISIBLE_DEVICES differs from rank to rank"
        + (" (a rank that picks cuda:<local rank> asks for a GPU it cannot see: invalid device ordinal)"
           if ordinal else ""),
        f"request the GPUs per node instead: --gpus-per-node={gpus} with --ntasks-per-node="
        f"{tasks.group(1) if tasks else '<tasks on each node>'} (no --gpus-per-task / --ntasks-per-gpu), so every "
        "task on a node sees all of its GPUs"
        + ("; the snakemake SLURM executor adds --ntasks-per-gpu itself: upgrade "
           "snakemake-executor-plugin-slurm and set the rule's resource tasks_per_gpu=0 so it is left out"
           if snakemake else ""), [ctx.line_fact(ordinal[0])] if ordinal else [], ordinal + said[:1],
        confirmed=bool(ordinal))
    return _first(diagnosis) if ordinal else diagnosis


@rule("visibility")
def launchers(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the launcher the paste names (deepspeed, swift, llamafactory-cli, accelerate, SLURM) and what the
    user asks of the GPUs (several at once, one chosen), or DataParallel's own replica line."""
    return (_deepspeed_own_list(ctx) or _data_parallel_replica(ctx) or _slurm_per_task_gpus(ctx) or
            _several_gpus_asked(ctx) or _one_gpu_chosen(ctx))
