"""Running out of GPU memory: a serving engine's or a tool's own knobs, a training run's batch, sequence and
format, memory that grows until it runs out, weights larger than the GPU, NCCL's own buffers."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import (_catalogue, _CONTAINED, Context, Diagnosis, _first, _lines_matching, _make, _restate,
                                          rule, _vendor)
from steadytune.doctor.rules.runtime.shared import _ILLEGAL_MEMORY, _training, _WHISPER
from steadytune.doctor.rules.runtime.host_memory import _build_out_of_host_memory, _killed_by_signal_9
from steadytune.doctor.rules.runtime.quantized_releases import published_quantized, SPLIT
from steadytune.doctor.rules.runtime.program_memory import (card_gib, INFERENCE_OOM_FIX, ncnn_device_lost, program_oom,
                                                            quantized_after_load, reads_as_inference)


_SERVING_OOM_FIX = {
    # (llama.cpp's build page: on Linux, GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 lets the CUDA / HIP backend spill into
    # system RAM instead of failing, slower)
    "llama.cpp": "offload fewer layers (-ngl N smaller) or a smaller context (-c); on Linux "
                 "GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 lets it spill into system RAM instead of failing (slower)",
    "ollama": "a smaller context (num_ctx) or fewer GPU layers (num_gpu), or a smaller quantisation",
    # (vLLM's "conserving memory" docs: the CUDA graphs it captures grow with --max-num-seqs; --enforce-eager skips them)
    "vllm": "--gpu-memory-utilization lower (0.75) and --max-model-len smaller (8192); fewer concurrent sequences "
            "(--max-num-seqs 64: the CUDA graphs and activations it reserves grow with it) or --enforce-eager (no CUDA "
            "graphs); or tensor parallel over more GPUs",
    # (SGLang's server arguments: the static share for weights and KV cache, the prefill chunk, the running batch)
    "sglang": "--mem-fraction-static lower (0.7), --chunked-prefill-size 4096 (1024 on GPUs under 35 GB, whose default "
              "is 2048), fewer --max-running-requests "
              "and --cuda-graph-max-bs, a shorter --context-length; or --tp over more GPUs",
}

# Tools that run out of memory by their own rules, with their own knobs (each tool's documented options): an image
# UI's low-memory modes, a framework that grabs the whole GPU up front, a speech model's compute type.
_TOOL_OOM_FIX = {
    "comfyui": "start ComfyUI with --lowvram (or --novram; --reserve-vram 1 on a card that also drives the display), "
               "a smaller image size or batch, and the tiled VAE decode node for large images",
    "a1111": "start the web UI with --medvram (or --lowvram; SD.Next: --medvram / --lowvram too) in COMMANDLINE_ARGS, "
             "a smaller image size or batch, and tiled VAE for large images",
    "tensorflow": "let TensorFlow grow its memory instead of taking it all: tf.config.experimental.set_memory_growth("
                  "gpu, True) for each GPU (or TF_FORCE_GPU_ALLOW_GROWTH=true), and a smaller batch size",
    "jax": "export XLA_PYTHON_CLIENT_PREALLOCATE=false (JAX takes 75% of the GPU up front) or a smaller "
           "XLA_PYTHON_CLIENT_MEM_FRACTION, and a smaller batch size",
    "whisper": "a smaller compute type (faster-whisper / CTranslate2: compute_type=\"int8_float16\"), a smaller "
               "model (medium, small) or batch_size, one model per GPU",
}


def _low_card_first(tool: str, joined: str) -> str:
    """The tool's fix, with the lowest-memory mode first on a card of 4 GB or less (A1111's wiki: --lowvram where
    --medvram still runs out on 4 GB; ComfyUI's --lowvram is already first)."""
    gib = card_gib(joined)
    if tool == "a1111" and gib is not None and gib <= 4.5:
        return (f"on a {gib:g} GB card start the web UI with --lowvram (COMMANDLINE_ARGS in webui-user.sh / "
                "webui-user.bat; --medvram is the next step up), a smaller image size or batch, and tiled VAE for "
                "large images")
    return _TOOL_OOM_FIX[tool]


_SIZE = r"([\d.]+) ([KMG])i?B"


def _mib(number: str, unit: str) -> float:
    return float(number) * {"K": 1 / 1024, "M": 1, "G": 1024}[unit]


def _fragmented(text: str) -> Optional[str]:
    """torch's OOM message when the request would fit: as much free, or reserved-but-unallocated, as asked."""
    asked = re.search(r"Tried to allocate " + _SIZE, text)
    free = re.search(r"of which " + _SIZE + " is free", text)
    spare = re.search(_SIZE + r" is reserved by PyTorch but unallocated", text)
    total = re.search(r"total capacity of " + _SIZE, text)
    if not asked:
        return None
    need = _mib(*asked.groups())
    # a few MiB left over on a full GPU is not fragmentation: the spare must be a real share of the memory
    floor = max(need, 0.04 * _mib(*total.groups()) if total else 256.0)
    for found, what in ((free, "free"), (spare, "reserved by PyTorch but unallocated")):
        if found and _mib(*found.groups()) >= floor:
            return (f"the request ({asked.group(1)} {asked.group(2)}iB) is smaller than what is {what} "
                    f"({found.group(1)} {found.group(2)}iB): no block of that size is contiguous")
    return None


# torch's, the runtimes' and the tools' own words for running out: the rest ("OOM" in a title, "ran out of VRAM") is
# the user's summary, a likely reading only
_OOM_PROPER = re.compile(r"(?i:(?:HIP|CUDA|GPU) out of memory|RESOURCE_EXHAUSTED|ResourceExhausted|error\W{1,3}out of "
                         r"memory)|hipErrorOutOfMemory|cudaErrorMemoryAllocation|"
                         r"ErrorOutOfDeviceMemory|OutOfMemoryError|(?i:failed to allocate|unable to allocate|"
                         r"out of shared|killed by signal|KV cache|ALLOC_FAILED|Malloc\w* failed|cache blocks|"
                         r"cuda[_ ]out[_ ]of[_ ]memory)")
# a job over several processes or GPUs (a launcher, a distributed script, NCCL): /dev/shm is shared by its ranks
# (OpenMMLab's tools/dist_train.sh and dist_test.sh start torch.distributed's launcher, one rank per GPU given)
_DISTRIBUTED = re.compile(r"(?i)\w*_distributed\w*|torch\.distributed|\btorchrun\b|--nproc|\bNCCL\b|\bmegatron\b|"
                          r"tensor[-_ ]parallel|\bdeepspeed\b|accelerate launch|\bdist_(?:train|test)\.sh\b")
# the container's shared memory already asked for: it is set when the container is created, so a container made
# before the flag (then started or exec'd into) keeps its 64 MB
_SHM_ASKED = re.compile(r"--ipc[= ]host|--shm-size")


def _shm_fix(joined: str, fix: str) -> str:
    if not _SHM_ASKED.search(joined):
        return fix
    return ("the --ipc=host / --shm-size flag takes effect only when a container is created: check df -h /dev/shm "
            "inside it (64M means it is not in force), and create a new container with docker run --ipc=host (or "
            "--shm-size=16g) rather than docker start / docker exec into one made before the flag (docker commit it "
            "first to keep its changes); " + fix)


# a container or a pod said: the data loader's /dev/shm is the container runtime's (64 MB unless widened), set where
# the container or pod is created
_POD_SAID = re.compile(r"(?i)\bkubernetes\b|\bk8s\b|\bkubectl\b|\bkubeflow\b|\bpods?\b|\bjupyterhub\b|"
                       r"\bnotebook server\b|\bhelm\b")
# the flag given on a command line (docker run ... --ipc=host), not only named in a question about it
# or said done in words ("I already added --shm-size=8g to my docker run")
_SHM_GIVEN = re.compile(r"(?i)\b(?:docker|podman|nvidia-docker)\s+(?:run|create)\b[^\n]*(?:--ipc[= ]host|--shm-size)|"
                        r"^\s*(?:shm_size|ipc):\s*\S|\b(?:already|I)\s+(?:added|set|gave|passed|used|use|started it "
                        r"with)\b[^\n]{0,30}(?:--ipc[= ]host|--shm-size)", re.M)


def _container_shm(ctx: Context, errors: list, joined: str) -> Optional[Diagnosis]:
    """A data loader's worker failing on shared memory where the paste says it runs in a container or a pod: the
    container's /dev/shm (64 MB by default in Docker and in a Kubernetes pod) is what the workers' batches fill; it is
    set where the container is created (docker --ipc=host / --shm-size; a pod only through an emptyDir volume of
    medium Memory mounted at /dev/shm), so the reading is the container's transport between processes."""
    pod = _POD_SAID.search(joined)
    if not (pod or ctx.sheet.has("platform", "container") or _CONTAINED.search(joined)):
        return None
    given = _SHM_GIVEN.search(joined)
    if given and not pod:
        return None   # the flag is on the run already: the reading below (a container made before it) says why
    docker = ("where you start the container yourself, docker run --ipc=host (or --shm-size=16g; compose: shm_size: "
              "16gb / ipc: host)")
    kube = ("a notebook or job that a platform starts in a Kubernetes pod (Kubeflow, JupyterHub on Kubernetes) takes "
            "no docker flag: mount an emptyDir volume with medium: Memory at /dev/shm in the pod spec (volumes: - "
            "name: dshm, emptyDir: {medium: Memory}; volumeMounts: - name: dshm, mountPath: /dev/shm; Kubeflow's "
            "notebook form: Enable Shared Memory)")
    return _make("multi-gpu-transport", "the container's /dev/shm is too small for the data loader's workers",
                 "the DataLoader's worker processes hand each batch to the main process through files in /dev/shm; "
                 "in a container or pod it is 64 MB unless widened, and the workers fail to write or open them",
                 (f"{kube}; {docker}" if pod else f"{docker}; {kube}") +
                 "; check df -h /dev/shm inside it; num_workers=0 confirms it (no shared memory used)",
                 [ctx.line_fact(errors[0])], errors)


TRAINING_OOM_FIX = ("lower the batch size (per_device_train_batch_size 1-2, gradient_accumulation_steps raised to keep "
                    "the effective batch), turn on gradient checkpointing (gradient_checkpointing: true), shorten the "
                    "max length (cutoff_len / max_seq_length), and load the base model in 4 bit (QLoRA: "
                    "quantization_bit: 4 / load_in_4bit)")


@rule("out-of-memory")
def out_of_memory(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the runtime's out-of-memory message (or the user's word for it), what runs (a server sizes its
    caches; a training run its batch, length and activations), torch's numbers (fragmentation), and, in a training
    run, an illegal memory access with no fault of the machine beside it (a batch past a kernel's 32-bit indexing)."""
    errors = ctx.of("out-of-memory")
    if not errors:
        return (_illegal_access_in_training(ctx) or _killed_by_signal_9(ctx) or _build_out_of_host_memory(ctx) or
                ncnn_device_lost(ctx))
    tool = ctx.tool(errors)
    if tool == "torch" and ctx.tool() in _SERVING_OOM_FIX and not _training(ctx):
        tool = ctx.tool()   # torch.OutOfMemoryError names torch inside any program: the server that sizes its caches
    text = " ".join(e.line for e in errors)
    joined = "\n".join(ctx.sheet.lines)
    rocm = re.search(r"(?i)\brocm[ -]?(\d+)\.(\d+)", joined)
    if re.search(r"(?i)\b(?:alltoall|all_reduce|gather|scatter|sendrecv)\w*_perf\b|rccl-tests", joined) and rocm and \
            (int(rocm.group(1)), int(rocm.group(2))) < (5, 7):
        return _make("multi-gpu-transport", f"RCCL on ROCm {rocm.group(1)}.{rocm.group(2)} needs fine-grained PCIe memory",
                     "before ROCm 5.7 RCCL's peer buffers need fine-grained memory over PCIe; without it the "
                     "collectives that exchange between every pair fail allocating",
                     "export HSA_FORCE_FINE_GRAIN_PCIE=1 for the run (or move to ROCm 5.7 or newer, where it is not "
                     "needed)", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)maximum number of tokens that can be stored in KV cache", text):
        return _make("out-of-memory", "the KV cache is smaller than one full sequence",
                     "vLLM sizes the KV cache from the memory left under gpu_memory_utilization; it holds fewer tokens "
                     "than max_model_len", "raise gpu_memory_utilization (0.9; --gpu-memory-utilization) or lower "
                     "max_model_len (--max-model-len) so one sequence fits", [ctx.line_fact(errors[0])], errors)
    if any(re.search(r"(?i)DataLoader worker|shared memory|\bshm\b|</?torch_\d", e.line) for e in errors):
        contained = _container_shm(ctx, errors, joined)
        if contained is not None:
            return contained
        if _DISTRIBUTED.search(joined):
            # a distributed run's ranks share /dev/shm with their loaders (NCCL's segments too): the container's
            # shared memory is the multi-GPU job's, the transport family's fix
            return _make("multi-gpu-transport", "the container's /dev/shm is too small for the distributed run",
                         "a default Docker container has a 64 MB /dev/shm; the distributed job's data-loader workers "
                         "and NCCL's segments between the ranks live there, and run out (bus error, 'No space left on "
                         "device')", _shm_fix(joined, "start the container with --shm-size=64g (or --ipc=host; "
                                              "compose: shm_size / ipc: host); dataloader workers 0 confirms it"),
                         [ctx.line_fact(errors[0])], errors)
        hit = next((e for e in errors if e.catalogue is not None and e.catalogue.entry.id == "dataloader-shm"), None)
        if hit is not None and not _SHM_ASKED.search(joined):   # (the flag already given: the reading below says why)
            return _restate("out-of-memory", hit, errors)
        return _make("out-of-memory", "the data loader's workers ran out of shared memory",
                     "workers hand batches over through /dev/shm, which is 64 MB in a default Docker container",
                     _shm_fix(joined, "docker run ... --ipc=host (or --shm-size=16g); or fewer data loader workers "
                              "(0 to confirm)"),
                     [ctx.line_fact(errors[0])], errors)
    fragmented = _fragmented(text)
    proper = any(_OOM_PROPER.search(e.line) or e.catalogue is not None for e in errors)
    # the model's own 4-bit release (Qwen's -Int4 / -AWQ, ChatGLM's quantize(4)) where its publisher ships one; where
    # the name also gives the size, the sizes' reading speaks and names the release first
    # a program whose memory is its own pipeline (an RL trainer's rollout share, a video model's decode chunk, a TTS
    # model's small weights, an upscaler's tile, a trainer's config keys): its knob first
    program = program_oom(ctx, errors, joined, proper, fragmented, weights_read=False)
    if program is not None:
        return program
    released = published_quantized(ctx, errors, joined, proper)
    too_big = _weights_exceed(ctx, errors, joined)
    if too_big is not None:
        return replace(too_big, fix=f"{released.fix.removesuffix(SPLIT)}; or {too_big.fix}") if released else too_big
    if released is not None:
        return released
    # an LLM or VLM program with its own knob (litgpt's micro batch, a vision-language model's pixel budget), once
    # the weights alone are known to fit
    program = program_oom(ctx, errors, joined, proper, fragmented, weights_read=True)
    if program is not None:
        return program
    late = quantized_after_load(ctx, errors, joined, proper)
    if late is not None:
        return late
    diffusion = _DIFFUSION_LORA.search(joined)
    if diffusion and re.search(r"(?i)\blora\b|train\w*|fine-?tun\w*", joined) and tool not in ("comfyui", "a1111"):
        return _make("out-of-memory", f"the {diffusion.group(0)} weights do not fit beside each other for training",
                     f"a LoRA of {diffusion.group(0)} keeps the transformer and its large text encoder (T5 / Gemma / "
                     "Qwen-VL class) on the GPU together; with few images at a small size the memory is the weights, "
                     "so fewer or smaller pictures do not help",
                     "offload the text encoder to the CPU (ai-toolkit: Text Encoder Offload % to 100, or cache the "
                     "text embeddings and unload it; musubi-tuner / kohya: cache the text encoder outputs), swap or "
                     "offload transformer blocks (ai-toolkit: Transformer Offload %, Low VRAM; musubi-tuner: "
                     "--blocks_to_swap), and quantize the transformer (fp8 / qfloat8)", [ctx.line_fact(errors[0])],
                     errors, confirmed=proper)
    # faster-whisper runs on CTranslate2: the tool read may be either, the knob (compute_type) is the same
    own = "whisper" if _WHISPER.search(joined) and tool in (None, "torch", "ctranslate2") else tool
    if own in _TOOL_OOM_FIX:
        name = {"a1111": "the Stable Diffusion web UI", "comfyui": "ComfyUI"}.get(own, own)
        return _make("out-of-memory", f"{name} ran out of GPU memory",
                     f"{name} needs more GPU memory for this model and size than the GPU has free",
                     _low_card_first(own, joined) + ("; the free memory is fragmented too: PYTORCH_CUDA_ALLOC_CONF="
                                           "expandable_segments:True" if fragmented else ""),
                     [ctx.line_fact(errors[0])], errors, confirmed=proper)
    framework = _framework_oom(ctx, errors, joined, proper)
    if framework is not None:
        return framework
    if tool == "deepspeed" and _training(ctx):
        return _make("out-of-memory", "the DeepSpeed run does not fit the GPUs' memory",
                     "the sharded states and one batch's activations need more memory than each GPU has",
                     _long_sequence(joined) + "ZeRO stage 3 with CPU offload (\"zero_optimization\": {\"stage\": 3, "
                     "\"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}}); and " +
                     TRAINING_OOM_FIX,
                     [ctx.line_fact(errors[0])], errors, confirmed=proper)
    ggml = tool == "llama.cpp" or re.search(r"(?i)LLAMA_CUBLAS|GGML_CUDA|\bllama\.cpp\b|\.gguf\b", joined)
    if ggml and re.search(r"(?i)\bJetson\b|\bOrin\b|\btegra\b|\bXavier\b", joined):
        # a Jetson's GPU shares the RAM and its driver reserves less virtual address space than ggml's CUDA pool asks
        return _make("out-of-memory", "llama.cpp's CUDA memory pool reserves more than a Jetson can",
                     "llama.cpp's CUDA backend reserves one large virtual address range for its memory pool (CUDA "
                     "VMM); on a Jetson (integrated GPU sharing the RAM) that reservation fails and reads as out of "
                     "memory, though the model fits",
                     "build llama.cpp with -DGGML_CUDA_NO_VMM=ON (the pool then allocates plainly), or lower the "
                     "pool's reservation (CUDA_POOL_VMM_MAX_SIZE in ggml-cuda, e.g. 32 GB) and rebuild; a release "
                     "before the VMM pool works as well", [ctx.line_fact(errors[0])], errors, confirmed=proper)
    if tool in _SERVING_OOM_FIX:   # a server sizes its own caches: its knobs, not a training step's
        return _make("out-of-memory", f"{tool} ran out of GPU memory",
                     f"{tool} reserves its weights and caches up front; this model and context do not fit the memory "
                     "it may take", _SERVING_OOM_FIX[tool] + ("; the free memory is fragmented too: "
                                                              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
                                                              if fragmented else ""), [ctx.line_fact(errors[0])], errors)
    if fragmented:
        return _make("out-of-memory", "the GPU's memory is fragmented, not full", fragmented,
                     "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_HIP_ALLOC_CONF on ROCm) before "
                     "the run, so the allocator can grow its segments instead of needing one free block",
                     [ctx.line_fact(errors[0])], errors)
    grows = _grows_until_out(ctx, errors, joined, proper)
    if grows is not None and tool not in ("ollama", "llama.cpp", "comfyui", "a1111"):
        return grows
    inference = reads_as_inference(ctx)
    if _training(ctx) and not inference and tool not in ("ollama", "llama.cpp", "comfyui", "a1111"):
        return _make("out-of-memory", "the training run does not fit the GPU's memory",
                     "the weights, the optimizer state of the trained parameters and the activations of one batch "
                     "need more memory than the GPU has; the activations grow with the batch size and the sequence "
                     "length", _long_sequence(joined) + TRAINING_OOM_FIX, [ctx.line_fact(errors[0])], errors, confirmed=proper)
    full = _full_before_a_small_request(ctx, errors, text)
    if full is not None:
        return full
    hit = _catalogue(errors)
    if inference and (hit is None or hit.catalogue.entry.id in ("out-of-memory", "rocm-ggml-out-of-memory")):
        # the catalogue's general entry speaks of a training step; a run that generates has other knobs
        return _make("out-of-memory", "the model and its inputs do not fit the GPU's memory",
                     "the weights, in the precision they were loaded in, and the activations and cache of one "
                     "generation need more memory than the GPU has free", INFERENCE_OOM_FIX,
                     [ctx.line_fact(errors[0])], errors, confirmed=proper)
    if hit is not None and hit.catalogue.entry.id == "out-of-memory" and not _training(ctx) and proper:
        # neither a training run nor a model run is said (a bare torch message under an issue template): the general
        # entry's knobs are a training step's, and a run that only loads and runs a model has one of its own, its
        # 4-bit / 8-bit release (binary-husky/gpt_academic#533: ChatGLM on an 8 GB RTX 3070, fixed by its int4
        # checkpoint) (round 20, r20d)
        diagnosis = _restate("out-of-memory", hit, errors)
        diagnosis.fix = (f"{diagnosis.fix}; where the program only runs the model (chat, generation), load a smaller "
                         "form of it instead: its int4 (4-bit) or int8 quantized release (ChatGLM's -int4 checkpoints, "
                         "or from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True))), in "
                         "fp16 rather than fp32")
        diagnosis.entry = None
        return diagnosis
    if hit is not None:
        return _restate("out-of-memory", hit, errors)
    return _make("out-of-memory", "the GPU ran out of memory", "the job needs more GPU memory than is free",
                 "a smaller batch size or sequence length (max length), gradient checkpointing, or a quantised model",
                 [ctx.line_fact(errors[0])], errors, confirmed=proper)


# memory said to grow during the run ("逐渐爆显存", "keeps increasing"), or a progress bar past its first steps beside the
# out-of-memory: the first batches fit, a later (longer) one does not
_GROWS = re.compile(r"(?i)逐渐(?:增大|增加|上涨|变大|爆)|越来越(?:大|多)|慢慢(?:增大|增加|上涨)|(?:gradually|slowly|steadily|"
                    r"keeps?|kept) (?:grow|increas|ris|climb)\w*|(?:grows?|growing|increas\w+|creeps? up) (?:over|with|"
                    r"every|each|after) (?:time|steps?|iterations?|epochs?)")
_STEPS_DONE = re.compile(r"\|\s*(\d+)/(\d+) \[\d")
# each trainer's own key for the longest sequence it keeps (ms-swift's --max_length, LLaMA-Factory's cutoff_len,
# TRL's SFTConfig max_length, Unsloth's max_seq_length): their docs' names
_SWIFT = re.compile(r"(?i)\bms-swift\b|\bswift (?:sft|pt|rlhf)\b")
_LLAMAFACTORY = re.compile(r"(?i)llama-?factory|llamafactory-cli")


def _grows_until_out(ctx: Context, errors: list[ErrorLine], joined: str, proper: bool) -> Optional[Diagnosis]:
    """A training run whose memory grows until it runs out, or that ran out after many steps that fit: a batch
    later in the data is longer than the first ones (a dataset with some very long samples), so the cap on the
    sequence length is the fix, not a leak."""
    if not _training(ctx) and not _SWIFT.search(joined):
        return None
    steps = [(int(a), int(b)) for a, b in _STEPS_DONE.findall(joined)]
    past_start = any(10 <= done < total for done, total in steps)
    if not (_GROWS.search(joined) or past_start):
        return None
    if _SWIFT.search(joined):
        key = "ms-swift: --max_length 2048 (or lower; samples longer are truncated or dropped, --truncation_strategy)"
    elif _LLAMAFACTORY.search(joined):
        key = "LLaMA-Factory: cutoff_len: 2048 (or lower)"
    else:
        key = ("the trainer's sequence cap (ms-swift --max_length, LLaMA-Factory cutoff_len, TRL SFTConfig "
               "max_length, Unsloth max_seq_length), e.g. 2048")
    return _make("out-of-memory", "memory grows until a long batch does not fit",
                 "the run fitted its first steps and ran out later: the activations grow with the length of each "
                 "batch, and a dataset with some very long samples makes a later batch far larger than the first "
                 "ones (the allocator also keeps the peak reserved, so the memory seems to creep up)",
                 f"cap the sequence length: {key}; look for the longest samples in the data; then "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against the fragmentation, and gradient "
                 "checkpointing", [ctx.line_fact(errors[0])], errors, confirmed=proper)


def _full_before_a_small_request(ctx: Context, errors: list[ErrorLine], text: str) -> Optional[Diagnosis]:
    """torch's out-of-memory for a request of a few MiB on a GPU with next to nothing free, in no training run: the
    memory was taken before the request, by something that reserves it up front (an inference engine sizing its KV
    cache and CUDA graphs to a share of the GPU) or by another process, not by this step's tensors."""
    asked = re.search(r"Tried to allocate " + _SIZE, text)
    free = re.search(r"of which " + _SIZE + " is free", text)
    total = re.search(r"total capacity of " + _SIZE, text)
    if not (asked and free and total) or _training(ctx):
        return None
    if _mib(*asked.groups()) > 64 or _mib(*free.groups()) > 0.01 * _mib(*total.groups()):
        return None
    # torch's own account of this process's tensors: most of the GPU held by them is this job's memory, read as such
    own = re.search(_SIZE + r" is allocated by PyTorch", text)
    if own and _mib(*own.groups()) >= 0.5 * _mib(*total.groups()):
        return None
    return _make("out-of-memory", "the GPU was full before a small request",
                 f"a request of {asked.group(1)} {asked.group(2)}iB failed with {free.group(1)} {free.group(2)}iB "
                 "free: the memory was already taken, reserved up front (an inference engine takes a share of the "
                 "GPU for its KV cache, then its CUDA graphs on top) or held by another process on this GPU",
                 "check nvidia-smi (rocm-smi) for other processes on this GPU; for a serving engine lower what it "
                 "reserves: vLLM --gpu-memory-utilization 0.8, --max-num-seqs 64 (its CUDA graphs grow with it) or "
                 "--enforce-eager, --max-model-len smaller; SGLang --mem-fraction-static 0.8",
                 [ctx.line_fact(errors[0])], errors, confirmed=False)


# the sequence length a training config sets (LLaMA-Factory's cutoff_len, TRL's max_seq_length, torchtitan's seq_len)
_SEQUENCE = re.compile(r"\b(cutoff_len|max_seq_length|max_seq_len|seq_len|max_length|model_max_length)\b\W{1,4}(\d{4,6})\b")


def _long_sequence(joined: str) -> str:
    """The config's sequence length, where it is long: activation memory grows with it (linearly with fused
    attention, the logits with it times the vocabulary), so it is the first knob to turn."""
    found = [(m.group(1), int(m.group(2))) for m in _SEQUENCE.finditer(joined)]
    if not found or max(n for _, n in found) < 4096:
        return ""
    key, n = max(found, key=lambda kv: kv[1])
    return (f"{key} {n} is the largest cost here (activations and logits grow with the sequence length): lower it "
            f"({key}: {max(1024, n // 2 // 1024 * 1024)} or less) first; then ")


# training frameworks with their own names for the memory knobs: GRPO's rollout engine, torchtitan's TOML
_GRPO = re.compile(r"(?i)\bGRPO\w*")
# image and video diffusion models trained with LoRA, whose text encoders are LLM-sized
_DIFFUSION_LORA = re.compile(r"(?i)\bLTX(?:-?Video|-?2)?\b|\bWan ?2\.\d\b|\bHunyuan ?Video\b|\bFLUX(?:\.1)?\b|"
                             r"\bQwen-Image\b|\bHiDream\b|\bSD3(?:\.5)?\b")
# vision-language models, whose images become tokens by the pixel (Qwen-VL, InternVL, LLaVA, MiniCPM-V, GLM-4V)
_VISION_LANGUAGE = re.compile(r"(?i)\bqwen[\d.]*-?vl\w*|\binternvl\w*|\bllava\w*|\bminicpm-?v\w*|\bglm-?4v\w*|"
                              r"\bMAX_PIXELS\b|\bimage_max_pixels\b")
_TORCHTITAN = re.compile(r"(?i)\btorchtitan\b|train_configs/\S+\.toml")


def _framework_oom(ctx: Context, errors: list[ErrorLine], joined: str, proper: bool) -> Optional[Diagnosis]:
    """Out of memory in a trainer whose memory is not only the batch: GRPO holds a rollout engine beside the trained
    model (ms-swift's and TRL's own switches for it), torchtitan sets the batch in its TOML config."""
    evidence = [ctx.line_fact(errors[0])]
    if _GRPO.search(joined):
        return _make("out-of-memory", "GRPO's rollout beside the training does not fit the GPUs",
                     "GRPO keeps a generation (rollout) engine and the trained model on the GPUs at once and copies "
                     "the weights into the engine each step; the copy and the rollout's cache come on top of the "
                     "training memory (DeepSpeed shards only the training side)",
                     "ms-swift: --move_model_batches 16 (sync the weights to the rollout engine in batches), "
                     "--offload_model true --offload_optimizer true, --sleep_level 1 with vLLM colocated, and a lower "
                     "--vllm_gpu_memory_utilization (update ms-swift for these); TRL: vllm_gpu_memory_utilization 0.3, "
                     "ds3_gather_for_generation=False under ZeRO-3; both: fewer num_generations, a shorter "
                     "max_completion_length, gradient checkpointing", evidence, errors, confirmed=proper)
    if _VISION_LANGUAGE.search(joined) and _training(ctx):
        swift = re.search(r"(?i)\bswift\b", joined)
        own = ("ms-swift: lower MAX_PIXELS (an environment variable: MAX_PIXELS=401408, or 200704; VIDEO_MAX_PIXELS "
               "and FPS_MAX_FRAMES / NFRAMES for video)" if swift else
               "lower the images' pixel cap: LLaMA-Factory image_max_pixels (video_max_pixels, video_maxlen for "
               "video); transformers: the processor's max_pixels; ms-swift: the MAX_PIXELS variable")
        return _make("out-of-memory", "the images' tokens do not fit the GPUs",
                     "a vision-language model turns every image into tokens in proportion to its pixels (Qwen2-VL: "
                     "one per 28x28 patch), so a large image, or a video's frames, makes sequences (and attention "
                     "and activations) far longer than the text alone",
                     own + "; then ZeRO-3 (--deepspeed default-zero3 / ds_z3_config.json), gradient checkpointing and "
                     "a batch size of 1", evidence, errors, confirmed=proper)
    if _TORCHTITAN.search(joined):
        return _make("out-of-memory", "the torchtitan config does not fit the GPUs",
                     "torchtitan's TOML config sets the per-GPU batch and sequence length; this model's config asks "
                     "more activation memory than each GPU has",
                     "lower [training] local_batch_size in the model's train_configs/*.toml (or on the command line: "
                     "--training.local_batch_size 4), keep global_batch_size with gradient accumulation; then "
                     "[activation_checkpoint] mode = \"full\", a shorter [training] seq_len, or more FSDP / "
                     "pipeline sharding", evidence, errors, confirmed=proper)
    return None


# a model's size in its name or the prose ("llama-13b-hf", "Meta-Llama-3-8B-Instruct", "使用 13B 模型")
_MODEL_SIZE = re.compile(r"(?<![\w.])(?:[\w.]*?[-_/ ])?(\d{1,3}(?:\.\d)?)[bB](?![A-Za-z0-9])")
_QUANTISED = re.compile(r"(?i)load_in_[48]bit|\b[48]-?bit\b|\bint[48]\b|\bgguf\b|\bq[2-8]_|\bawq\b|\bgptq\b|"
                        r"bitsandbytes|quantiz|quantization_bit")
_SHARDED = re.compile(r"(?i)device_map|tensor[-_ ]parallel|--tp\b|\b[2-9] ?x ?(?:RTX|GTX|RX|A\d+|H\d+|L\d+|MI\d+|V100|"
                      r"Tesla|NVIDIA)|\bzero[-_ ]?3\b|\bstage\W{0,3}3\b|\bFSDP\b|--nproc|num_processes:\s*[2-9]|[2-9]卡")
# sizes most model families ship (Llama 7/13/70, CodeLlama 34, Qwen 0.5/1.5/3/7/14/32/72 close to these)
_LADDER = (0.5, 1.5, 3, 7, 13, 34, 70)


def _weights_exceed(ctx: Context, errors: list[ErrorLine], joined: str) -> Optional[Diagnosis]:
    """The model's weights alone, in fp16, are larger than the whole GPU (torch's OOM message gives its capacity):
    no batch size or checkpointing helps; a smaller model, or the same one quantised, does."""
    total = re.search(r"([\d.]+) GiB total capacity|total capacity of ([\d.]+) GiB", joined)
    sizes = [float(m.group(1)) for m in _MODEL_SIZE.finditer(joined) if 0.3 <= float(m.group(1)) <= 700]
    if not total or not sizes or _QUANTISED.search(joined) or _SHARDED.search(joined):
        return None   # (a model sharded over several GPUs need not fit one)
    gib = float(total.group(1) or total.group(2))
    size = max(sizes)
    fp16 = size * 2e9 / 2 ** 30
    if fp16 < 0.95 * gib:
        return None
    # the largest common size that fits in fp16, and (a real step down) in 8 bit, each with a GiB of room
    in_fp16 = [s for s in _LADDER if s < size and s * 2e9 / 2 ** 30 + 1 < gib]
    in_8bit = [s for s in _LADDER if s <= size / 1.5 and s * 1e9 / 2 ** 30 + 1 < gib]
    choices = []
    if in_8bit and (not in_fp16 or in_8bit[-1] > in_fp16[-1]):
        choices.append(f"{in_8bit[-1]:g}B in 8 bit (about {in_8bit[-1] * 1e9 / 2 ** 30:.0f} GiB)")
    if in_fp16:
        choices.append(f"{in_fp16[-1]:g}B in fp16 (about {in_fp16[-1] * 2e9 / 2 ** 30:.0f} GiB)")
    smaller = "a smaller model: " + " or ".join(choices) if choices else "a smaller model"
    four = size * 0.55e9 / 2 ** 30
    quantised = (f"this model in 4 bit (load_in_4bit / QLoRA: about {four:.0f} GiB)" if four + 1 < gib else
                 "this model split over more GPUs (device_map=\"auto\") or on the CPU")
    return _make("out-of-memory", f"a {size:g}B model does not fit a {gib:g} GiB GPU",
                 f"the weights alone take about {fp16:.0f} GiB in fp16 ({size:g}B parameters x 2 bytes), more than "
                 f"the GPU's {gib:g} GiB: no batch size or allocator setting makes it fit",
                 f"use {smaller}, or {quantised}", [ctx.line_fact(errors[0])], errors)


def _illegal_access_in_training(ctx: Context) -> Optional[Diagnosis]:
    """An illegal memory access in a fine-tuning run whose paste shows nothing wrong with the machine (no page fault
    in dmesg, no arch override, no kernel bug named): a batch too large for a kernel (32-bit offsets past 2**31
    elements) or memory running out inside a fused kernel; a smaller batch is the accepted first step."""
    said = [e for e in ctx.errors if _ILLEGAL_MEMORY.search(e.line)] or _lines_matching(ctx, _ILLEGAL_MEMORY.pattern)
    if not said or not _training(ctx) or _vendor(ctx) == "amd" or ctx.sheet.env("HSA_OVERRIDE_GFX_VERSION"):
        return None
    if ctx.of("platform-bios", "driver", "arch-missing", "abi-mismatch"):
        return None
    return _make("out-of-memory", "the training batch is too large for the GPU's kernels",
                 "an illegal memory access in a training step, on a machine with nothing else wrong, is most often "
                 "the batch: past the GPU's memory inside a fused kernel, or past a kernel's 32-bit offsets",
                 TRAINING_OOM_FIX + "; CUDA_LAUNCH_BLOCKING=1 names the kernel if a batch of 1 still fails",
                 [ctx.line_fact(said[0])], said, confirmed=False)


# NCCL's own CUDA/HIP allocation failing: its buffers, not the model's memory and not a transport
_NCCL_OOM = r"(?i)\b[NR]CCL\b.{0,60}\b(?:Cuda|HIP) failure '?out of memory|\b[NR]CCL WARN.{0,60}\bout of memory"


@rule("out-of-memory")
def nccl_buffers(ctx: Context) -> Optional[Diagnosis]:
    """NCCL (RCCL) failing its own GPU allocation: every channel of every peer gets NCCL_BUFFSIZE bytes (4 MiB by
    default), allocated after the framework has taken the memory it reserves (TensorFlow nearly all of it); the warning
    comes before any transport is set up, so the transport readings do not apply."""
    lines = _lines_matching(ctx, _NCCL_OOM)
    if not lines:
        return None
    return _first(_make(
        "out-of-memory", "NCCL could not allocate its buffers on the GPU",
        "NCCL allocates its communication buffers (NCCL_BUFFSIZE per channel and peer, 4 MiB by default; newer NCCL "
        "releases use more channels) on each GPU after the framework has reserved its memory, and the allocation fails",
        "shrink NCCL's buffers: export NCCL_BUFFSIZE=2097152 (2 MiB) before starting the job (NCCL_MAX_NCHANNELS lowers "
        "the count too), or leave more GPU memory free for NCCL (TensorFlow: a smaller per_process_gpu_memory_fraction "
        "or allow_growth; PyTorch: a smaller batch)", [ctx.line_fact(lines[0])], lines))
