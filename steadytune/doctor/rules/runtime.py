"""Rules about the running job: memory, MIOpen kernels, GPU hangs, number formats and attention kernels."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.rules.base import (
    WINDOWS_WORD,
    _arch_fact,
    on_windows,
    Context,
    Diagnosis,
    _catalogue,
    _first,
    _lines_matching,
    _make,
    _restate,
    _symptom_lines,
    _vendor,
    rule,
)


_SERVING_OOM_FIX = {
    "llama.cpp": "offload fewer layers (-ngl N smaller) or a smaller context (-c)",
    "ollama": "a smaller context (num_ctx) or fewer GPU layers (num_gpu), or a smaller quantisation",
    # (vLLM's "conserving memory" docs: the CUDA graphs it captures grow with --max-num-seqs; --enforce-eager skips them)
    "vllm": "--gpu-memory-utilization lower (0.75) and --max-model-len smaller (8192); fewer concurrent sequences "
            "(--max-num-seqs 64: the CUDA graphs and activations it reserves grow with it) or --enforce-eager (no CUDA "
            "graphs); or tensor parallel over more GPUs",
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
_WHISPER = re.compile(r"(?i)\b(?:faster[-_ ]?)?whisper\w*|ctranslate2")


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


# a training run (fine-tuning, LoRA, a trainer's own words): its memory is set by the batch, the sequence length and
# whether activations are kept, not by a server's cache sizes
_TRAINING = re.compile(r"(?i)\b(?:Q?LoRA|PEFT|fine-?tun\w*|train(?:ing|er)?|SFT\w*|DPO|GRPO|unsloth|LLaMA-?Factory|"
                       r"llamafactory|axolotl|trl\b|per_device_train_batch_size|gradient_accumulation|epochs?\b|"
                       r"backward\(\)|accelerate launch|deepspeed)")
# torch's, the runtimes' and the tools' own words for running out: the rest ("OOM" in a title, "ran out of VRAM") is
# the user's summary, a likely reading only
_OOM_PROPER = re.compile(r"(?i:(?:HIP|CUDA|GPU) out of memory|RESOURCE_EXHAUSTED|ResourceExhausted|error\W{1,3}out of "
                         r"memory)|hipErrorOutOfMemory|cudaErrorMemoryAllocation|"
                         r"ErrorOutOfDeviceMemory|OutOfMemoryError|(?i:failed to allocate|unable to allocate|"
                         r"out of shared|killed by signal|KV cache|ALLOC_FAILED|Malloc\w* failed|cache blocks|"
                         r"cuda[_ ]out[_ ]of[_ ]memory)")
# a job over several processes or GPUs (a launcher, a distributed script, NCCL): /dev/shm is shared by its ranks
_DISTRIBUTED = re.compile(r"(?i)\w*_distributed\w*|torch\.distributed|\btorchrun\b|--nproc|\bNCCL\b|\bmegatron\b|"
                          r"tensor[-_ ]parallel|\bdeepspeed\b|accelerate launch")
_ILLEGAL_MEMORY = re.compile(r"(?i)\billegal memory\b|hipErrorIllegalAddress|cudaErrorIllegalAddress")

TRAINING_OOM_FIX = ("lower the batch size (per_device_train_batch_size 1-2, gradient_accumulation_steps raised to keep "
                    "the effective batch), turn on gradient checkpointing (gradient_checkpointing: true), shorten the "
                    "max length (cutoff_len / max_seq_length), and load the base model in 4 bit (QLoRA: "
                    "quantization_bit: 4 / load_in_4bit)")


def _training(ctx: Context) -> bool:
    return bool(_TRAINING.search("\n".join(ctx.sheet.lines))) or ctx.tool() in ("unsloth", "llamafactory", "deepspeed")


@rule("out-of-memory")
def out_of_memory(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the runtime's out-of-memory message (or the user's word for it), what runs (a server sizes its
    caches; a training run its batch, length and activations), torch's numbers (fragmentation), and, in a training
    run, an illegal memory access with no fault of the machine beside it (a batch past a kernel's 32-bit indexing)."""
    errors = ctx.of("out-of-memory")
    if not errors:
        return _illegal_access_in_training(ctx) or _killed_by_signal_9(ctx) or _build_out_of_host_memory(ctx)
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
    if any(re.search(r"(?i)DataLoader worker|shared memory|\bshm\b", e.line) for e in errors):
        if _DISTRIBUTED.search(joined):
            # a distributed run's ranks share /dev/shm with their loaders (NCCL's segments too): the container's
            # shared memory is the multi-GPU job's, the transport family's fix
            return _make("multi-gpu-transport", "the container's /dev/shm is too small for the distributed run",
                         "a default Docker container has a 64 MB /dev/shm; the distributed job's data-loader workers "
                         "and NCCL's segments between the ranks live there, and run out (bus error, 'No space left on "
                         "device')", "start the container with --shm-size=64g (or --ipc=host; compose: shm_size / "
                         "ipc: host); dataloader workers 0 confirms it", [ctx.line_fact(errors[0])], errors)
        hit = next((e for e in errors if e.catalogue is not None and e.catalogue.entry.id == "dataloader-shm"), None)
        if hit is not None:
            return _restate("out-of-memory", hit, errors)
        return _make("out-of-memory", "the data loader's workers ran out of shared memory",
                     "workers hand batches over through /dev/shm, which is 64 MB in a default Docker container",
                     "docker run ... --ipc=host (or --shm-size=16g); or fewer data loader workers (0 to confirm)",
                     [ctx.line_fact(errors[0])], errors)
    fragmented = _fragmented(text)
    proper = any(_OOM_PROPER.search(e.line) or e.catalogue is not None for e in errors)
    too_big = _weights_exceed(ctx, errors, joined)
    if too_big is not None:
        return too_big
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
                     _TOOL_OOM_FIX[own] + ("; the free memory is fragmented too: PYTORCH_CUDA_ALLOC_CONF="
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
    if _training(ctx) and tool not in ("ollama", "llama.cpp", "comfyui", "a1111"):
        return _make("out-of-memory", "the training run does not fit the GPU's memory",
                     "the weights, the optimizer state of the trained parameters and the activations of one batch "
                     "need more memory than the GPU has; the activations grow with the batch size and the sequence "
                     "length", _long_sequence(joined) + TRAINING_OOM_FIX, [ctx.line_fact(errors[0])], errors, confirmed=proper)
    full = _full_before_a_small_request(ctx, errors, text)
    if full is not None:
        return full
    hit = _catalogue(errors)
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


# packages whose source build compiles hundreds of CUDA/HIP kernels with ninja, one nvcc per core: each job can take
# several GB of host RAM (flash-attention's README: under 96 GB of RAM with many cores, limit the jobs with MAX_JOBS)
# (DeepSpeed is left out: its ops are built by ninja at run time too, so "ninja" and a killed training run are no build)
_KERNEL_BUILD = re.compile(r"(?i)\b(flash[-_ ]?attn|flash[-_ ]?attention|xformers|causal[-_]conv1d|mamba[-_]ssm|apex|vllm|"
                           r"sageattention)\b")
# a source build said: ninja / nvcc at work, pip's build without isolation, setup.py, a wheel being built (not torch.compile)
_BUILDING = re.compile(r"(?i)\bninja\b|\bnvcc\b|Building CUDA object|--no-build-isolation|setup\.py|Building wheels? for|"
                       r"\bcompil(?:e|ing|ation) (?:it|from source|the (?:kernels|extension|package))")
# the build stopped without a compiler message: killed, ninja's bare failure, or RAM named as the trouble
_BUILD_STOPPED = re.compile(r"(?i)\bKilled\b|killed signal|signal 9|ninja -v\W{0,3} failed|ninja: build stopped|"
                            r"\b(?:a lot of|too much|much|\d+ ?GB of) RAM\b|\(a lot RAM\)|\bRAM\b.{0,40}\b(?:uses?|using|"
                            r"eats?|runs? out|exhaust\w*)|(?:uses?|using|eats?) .{0,20}\bRAM\b|out of (?:host )?memory")
_COMPILER_SAID = re.compile(r"(?i)\berror:|nvcc fatal|fatal error|CUDA_HOME|unsupported (?:gpu|GNU|compiler)|"
                            r"No such file or directory")


def _build_out_of_host_memory(ctx: Context) -> Optional[Diagnosis]:
    """A from-source build of a CUDA-kernel package that stops with no compiler error (killed, ninja's bare 'failed',
    or RAM said to run out): ninja starts one nvcc per core, and together they exhaust the host's RAM."""
    text = _text_of(ctx)
    package = _KERNEL_BUILD.search(text)
    if not package or not _BUILDING.search(text) or _COMPILER_SAID.search(text):
        return None
    said = _lines_matching(ctx, _BUILD_STOPPED.pattern)
    if not said:
        return None
    name = package.group(1).lower().replace("_", "-").replace(" ", "-")
    name = "flash-attn" if name.startswith("flash") else name
    return _make("out-of-memory", f"the {name} build runs out of host memory",
                 "the build compiles its CUDA kernels with ninja, one nvcc job per CPU core, and each job can take "
                 "several GB of RAM; together they exhaust the host's memory and a job is killed, which ninja "
                 "reports only as a failed build",
                 f"limit the parallel jobs: MAX_JOBS=4 pip install {name} --no-build-isolation (fewer with little RAM: "
                 "about 4-8 GB per job); or install a prebuilt wheel for this torch and CUDA instead of compiling",
                 [], said[:1], confirmed=False)


# a launcher's report of a worker killed by SIGKILL (torchrun's ChildFailedError, subprocess, docker's exit 137)
_SIGNAL_9 = re.compile(r"(?i)\bexitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\) received|<Signals\.SIGKILL: 9>|"
                       r"non-zero exit status -9\b|\bexit(?:ed with)? code 137\b")


def _killed_by_signal_9(ctx: Context) -> Optional[Diagnosis]:
    """A training worker killed by signal 9 with no error of its own: nothing in torch sends SIGKILL, the kernel's
    out-of-memory killer does (host RAM, not the GPU's), most often while every rank loads a full copy of the model
    into CPU memory before moving it to its GPU."""
    said = _lines_matching(ctx, _SIGNAL_9.pattern)
    if not said:
        return None
    ranks = re.search(r"(?i)local_rank|world_size|nproc_per_node|torchrun|多卡|deepspeed", _text_of(ctx))
    return _make("out-of-memory", "a worker was killed by the kernel: host memory ran out",
                 "signal 9 (SIGKILL, exit code -9 / 137) is the kernel's out-of-memory killer stopping the process "
                 "when the machine's RAM (not the GPU's memory) runs out" +
                 (", here with every rank loading its own copy of the model(s) into CPU memory at once" if ranks else ""),
                 "confirm with sudo dmesg | grep -i -e 'out of memory' -e 'killed process'; then give the job more "
                 "host memory (RAM, swap) or load less per rank: fewer processes per node, low_cpu_mem_usage=True, "
                 "DeepSpeed ZeRO-3 (its zero.Init loads the weights sharded), fewer data-loader / preprocessing "
                 "workers; in a container raise its memory limit", [], said[:1],
                 # torchrun's own report names the signal that ended the rank; a bare "Killed" / 137 stays likely
                 confirmed=bool(re.search(r"(?i)Signal 9 \(SIGKILL\) received by PID|exitcode\s*:\s*-9\b",
                                          _text_of(ctx))))


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


# MIOpen's system performance database is one file per arch and compute-unit count (<arch>_<CUs>.cd.pdb.txt); a card
# whose CU count has no file gets the "unreadable" warning and untuned defaults. The counts MIOpen's source ships
# (src/kernels of ROCm/MIOpen: gfx803_36, gfx803_64, gfx900_64); the same arch's nearest count is the closest tuning.
_PERF_DB_UNREADABLE = re.compile(r"(?i)File is unreadable:\s*(\S*/)?(gfx\w+?)_(\d+)\.cd\.pdb\.txt")
_SHIPPED_PERF_DB = {"gfx803": (36, 64), "gfx900": (64,)}


def _perf_db_missing(ctx: Context) -> Optional[Diagnosis]:
    """MIOpen warns that the system perf-db of this arch and CU count is unreadable: none ships for this count; the
    same arch's file for the nearest count, copied under this name, gives it tuned parameters (a warning, not a
    failure)."""
    said = _lines_matching(ctx, _PERF_DB_UNREADABLE.pattern)
    if not said:
        return None
    folder, arch, cus = _PERF_DB_UNREADABLE.search(said[0].line).groups()
    folder = folder or "/opt/rocm/share/miopen/db/"
    shipped = _SHIPPED_PERF_DB.get(arch)
    if shipped:
        nearest = min(shipped, key=lambda n: abs(n - int(cus)))
        source = f"{arch}_{nearest}.cd.pdb.txt"
        how = f"sudo cp {folder}{source} {folder}{arch}_{cus}.cd.pdb.txt"
    else:
        source = f"{arch}_<the nearest CU count listed there>.cd.pdb.txt"
        how = f"ls {folder} | grep {arch}; sudo cp {folder}{source} {folder}{arch}_{cus}.cd.pdb.txt"
    return _make("miopen-kernel", f"MIOpen ships no perf-db for {arch} with {cus} CUs",
                 f"MIOpen's system performance database has one file per arch and compute-unit count; none ships for "
                 f"{arch} with {cus} CUs, so it warns and uses untuned kernel parameters (the run goes on)",
                 f"give it the same arch's tuning: {how} (the {source} file is the closest shipped); or ignore the "
                 "warning (MIOpen still runs, its user perf-db in ~/.config/miopen learns with MIOPEN_FIND_ENFORCE=3)",
                 [], said, severity="warning")


@rule("miopen-kernel")
def miopen(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: MIOpen's own errors (a kernel build, its databases, a handle), or MIOpen named beside a run that is
    slow where it should not be (its exhaustive kernel search on each new convolution shape)."""
    errors = ctx.of("miopen-kernel")
    slow = [f for f in ctx.sheet.of("complaint") if f.value == "slow"]
    if not errors and slow and re.search(r"(?i)\bMIOpen\b|\bVAE\b|\bconv(?:olution)?s?\b",
                                         "\n".join(ctx.sheet.lines)) and _vendor(ctx) == "amd":
        errors = _symptom_lines(ctx, slow[:1])
        return _make("miopen-kernel", "MIOpen searches for its convolution kernels",
                     "on AMD GPUs MIOpen benchmarks every solver the first time it meets a convolution shape (a VAE "
                     "decode has many), which is what makes the first run slow", "export MIOPEN_FIND_MODE=2 (FAST: "
                     "takes the first good solver), and keep ~/.config/miopen between runs so what it found is reused",
                     [slow[0]], errors, confirmed=False)
    perf_db = _perf_db_missing(ctx)
    if perf_db is not None:
        return perf_db
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)MIOPEN_FIND_MODE", text):
        return _make("miopen-kernel", "MIOpen's search for the best kernel takes too long",
                     "in its default find mode MIOpen benchmarks every solver for each new convolution size; on large "
                     "ones (a VAE decode) that runs into the driver's timeout",
                     "export MIOPEN_FIND_MODE=2 (FAST: takes the first good solver) before starting the program",
                     [ctx.line_fact(errors[0])], errors)
    kdb = re.search(r"(?i)Missing system database file:?\s*(gfx\w+?)_\d*\.kdb", text)
    if kdb and not re.search(r"(?i)miopen.*(?:Code object build failed|Error)", text):
        return _make("miopen-kernel", f"MIOpen has no precompiled kernels for {kdb.group(1)}",
                     "a warning: MIOpen's kernel database (the .kdb of precompiled kernels) for this GPU is not "
                     "installed, so it compiles each kernel at first use: slower first runs, not a failure",
                     f"install the kernels package: sudo apt install miopen-hip-{kdb.group(1)}kdb (where the ROCm "
                     "release has one for this GPU), or leave it: the compiled kernels are cached in ~/.cache/miopen; "
                     "the error that stopped the run, if any, is another line", [ctx.line_fact(errors[0])], errors,
                     severity="warning")
    if re.search(r"(?i)could not create miopen handle", text):
        return _make("miopen-kernel", "MIOpen cannot start on this GPU",
                     "the MIOpen installed cannot create a handle: the OpenCL flavour (miopen-opencl) instead of the "
                     "HIP one that ROCm's frameworks need, or a build without this GPU",
                     "sudo apt remove miopen-opencl; sudo apt install miopen-hip (the HIP backend), and check that "
                     "its release lists this GPU", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None and not re.search(r"naive_conv", text):
        return _restate("miopen-kernel", hit, errors)
    if re.search(r"naive_conv", text):
        return _make("miopen-kernel", "MIOpen cannot build its naive convolution kernel",
                     "MIOpen's fallback (naive) convolution solver fails to compile on this stack",
                     "export MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_FWD=0 MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_BWD=0 "
                     "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_WRW=0; where the build still fails (hipRTC on a Windows or "
                     "self-built stack), export MIOPEN_FIND_MODE=2 (fast find: MIOpen takes a solution from its "
                     "database instead of compiling and timing every solver, slower kernels at times)",
                     [ctx.line_fact(errors[0])], errors)
    return _make("miopen-kernel", "MIOpen failed to build or find a kernel",
                 "MIOpen compiles kernels at first use and caches them; a stale or unwritable cache or a solver "
                 "without code for the arch fails here",
                 "rm -rf ~/.cache/miopen; export MIOPEN_USER_DB_PATH=/tmp/miopen-$USER MIOPEN_FIND_MODE=FAST; if "
                 "every solver still fails, run the convolutions without MIOpen: torch.backends.cudnn.enabled = False",
                 [ctx.line_fact(errors[0])], errors)


@rule("gpu-hang")
def gpu_hang(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("gpu-hang")
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    joined = "\n".join(ctx.sheet.lines)
    kernel = re.search(r"(?i)\bkernel (?:version )?(\d+)\.(\d+)", joined)
    if re.search(r"(?i)\bring \w+(?:\.\d+)* timeout", text) and (
            re.search(r"(?i)lockup_timeout|(?:was |works? )?fine (?:on|with) (?:the )?kernel", joined)
            or kernel and int(kernel.group(1)) >= 7):
        return _make("gpu-hang", "long GPU jobs trip the driver's lockup watchdog",
                     "kernel 7.x lowered amdgpu's lockup_timeout from 10 s to 2 s: a long compute job (a VAE decode, "
                     "a big matmul) on the GPU that also drives the display is reset as hung",
                     "add amdgpu.lockup_timeout=10000 to the kernel command line (GRUB_CMDLINE_LINUX_DEFAULT, "
                     "update-grub, reboot), or run the job on a GPU without a display", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)hipMemcpy\w*.{0,40}\bhangs?\b|\bhangs?\b.{0,40}\bhipMemcpy", text):
        return _make("gpu-hang", "host-device copies hang in the SDMA engine",
                     "hipMemcpy goes through the SDMA copy engine, which hangs on this GPU/APU with this ROCm",
                     "export HSA_ENABLE_SDMA=0 (copies go through shader blits instead); ROCm 6.1 fixed it for the "
                     "APUs that reported it", [ctx.line_fact(errors[0])], errors)
    evicted = [e for e in errors if re.search(r"(?i)queue vital buffer|queues? (?:was |were )?evicted|eviction", e.line)]
    if evicted:
        arch, fact = ctx.arch(evicted)
        return _make("gpu-hang", "the driver keeps evicting the compute queues until the GPU hangs",
                     "amdgpu's KFD evicts a process's compute queues (saving their waves: compute wave save/restore, "
                     "CWSR) when it needs the GPU back; with several GPU processes at once the evictions pile up on "
                     f"this {'GPU (' + arch + ')' if arch else 'GPU'}, and a failed save/restore leaves it hung",
                     "boot with amdgpu.cwsr_enable=0 (GRUB_CMDLINE_LINUX_DEFAULT, update-grub, reboot; or options "
                     "amdgpu cwsr_enable=0 in /etc/modprobe.d/amdgpu.conf), and move to a newer ROCm and kernel; fewer "
                     "concurrent GPU processes until then", [f for f in (ctx.line_fact(evicted[0]), fact) if f], errors)
    firmware = re.search(r"(?i)\bMES\b[: ]*(?:0x[0-9a-f]+)?|firmware", joined)
    if firmware:
        return _make("gpu-hang", "the GPU hangs under a firmware regression",
                     "the paste ties the hangs to the GPU firmware (the MES scheduler's version, a linux-firmware "
                     "update)", "roll linux-firmware back to the release before the hangs began (check the MES "
                     "version: sudo cat /sys/kernel/debug/dri/*/amdgpu_firmware_info | grep MES), or update to the "
                     "firmware release that fixes it; the kernel and ROCm stay as they are", [ctx.line_fact(errors[0])],
                     errors)
    if re.search(r"(?i)kernel NULL pointer dereference", text):
        return _make("gpu-hang", "the kernel driver crashes opening the GPU",
                     "a NULL pointer dereference in the kernel: a driver regression, often in runtime power management",
                     "add amdgpu.runpm=0 to the kernel command line (GRUB_CMDLINE_LINUX_DEFAULT, update-grub, reboot), "
                     "and move to a kernel without the regression", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("gpu-hang", hit, errors)
    return _hang_otherwise(ctx, errors)


_KFD_EINVAL = r"(?i)/dev/kfd\b.{0,30}:\s*Invalid argument"


@rule("gpu-hang")
def kfd_refuses(ctx: Context) -> Optional[Diagnosis]:
    """/dev/kfd exists and may be opened (the listing or the groups say so), yet opening it fails with EINVAL, not a
    permission or a missing file: the driver has the device node but no working GPU behind it, a GPU left stuck by a
    reset that did not complete (passed through to a VM and handed back, a crashed job). Only a host reboot (a power
    cycle) resets it; a container's flags do not."""
    said = _lines_matching(ctx, _KFD_EINVAL)
    if not said:
        return None
    text = _text_of(ctx)
    allowed = re.search(r"crw-rw-rw-.{0,40}/dev/kfd|\b(?:member of|in) (?:the )?render group|^\S*\s*(?:\w+ )*render\b",
                        text, re.M) or re.search(r"(?m)^(?:\S+ )*(?:video|render)(?: \S+)*$", text)
    if not allowed:
        return None
    passthrough = re.search(r"(?i)passthrough|passed through|vfio|\bVM\b|virtual machine|proxmox", text)
    return _first(_make("gpu-hang", "the GPU behind /dev/kfd is in a stuck state",
                        "opening /dev/kfd fails with 'Invalid argument' although the device node is there and this "
                        "user may open it: the driver has no working GPU behind it, which a reset that did not complete "
                        "leaves" + (" (a GPU passed through to a VM and handed back to the host; the RX 7000 / 9000 "
                                    "series do not reset cleanly)" if passthrough else ""),
                        "reboot the host (a full power cycle if a warm reboot is not enough) to reset the GPU, then "
                        "check sudo dmesg | grep -i amdgpu for init errors; avoid passing the GPU to a VM and back "
                        "without a reboot", [ctx.line_fact(said[0])], said))


# the ROCm releases pytorch.org has built torch for (its --index-url .../whl/rocmX.Y), oldest first
ROCM_TORCH_INDEXES = ("5.6", "5.7", "6.0", "6.1", "6.2", "6.2.4", "6.3", "6.4", "7.0", "7.1", "7.2")


def _rocm_torch(ctx: Context) -> Optional[str]:
    """The ROCm release the paste's torch was built for: its version label (2.3.0+rocm6.0) or 'torch ... rocm 6.0'."""
    labels = [f.value.split("+rocm", 1)[1] for f in ctx.sheet.of("torch") if "+rocm" in f.value]
    if labels:
        return labels[-1]
    said = re.search(r"(?i)\b(?:torch|pytorch)\b.{0,30}\brocm[ -]?(\d\.\d(?:\.\d)?)|\brocm[ -]?(\d\.\d(?:\.\d)?)\b.{0,30}"
                     r"\b(?:torch|pytorch)\b|whl/rocm(\d\.\d(?:\.\d)?)", _text_of(ctx))
    return next((g for g in said.groups() if g), None) if said else None


def _hang_otherwise(ctx: Context, errors: list[ErrorLine]) -> Diagnosis:
    """A hang, fault or illegal access that no specific reading settled: the family's usual remedy for the stack in
    the paste, as a likely reading. A ROCm torch: the torch built for the next ROCm release (each wheel brings its
    own runtime, and hangs are often one release's); an NVIDIA illegal access: the kernel that faulted, named with
    CUDA_LAUNCH_BLOCKING=1, and the library that owns it updated; else the kernel, firmware and dmesg."""
    evidence = [ctx.line_fact(errors[0])]
    # the runtime's or the kernel's own words for the fault (not a user's "it hangs"): the hang itself is settled
    proper = any(re.search(r"(?i)\bring\b.{0,30}time ?out|page fault|Memory access fault|HW Exception|HSA_STATUS_ERROR|"
                           r"hipError|GPU reset|PROTECTION_FAULT", e.line) for e in errors)
    built = _rocm_torch(ctx)
    tool = ctx.tool(errors)
    if built and built in ROCM_TORCH_INDEXES[:-1] and tool in (None, "torch", "comfyui", "a1111", "torchaudio"):
        newer = ROCM_TORCH_INDEXES[ROCM_TORCH_INDEXES.index(built) + 1]
        return _make("gpu-hang", f"the GPU hangs under the torch built for ROCm {built}",
                     f"the torch wheel brings its own ROCm {built} runtime and kernels; a hang or fault in a run that "
                     "worked before (or works elsewhere) is most often that release's",
                     f"install the torch built for the next ROCm: pip install torch torchvision --index-url "
                     f"https://download.pytorch.org/whl/rocm{newer} (or the newest, rocm{ROCM_TORCH_INDEXES[-1]}, "
                     "if the GPU is in its list); if it still hangs: sudo dmesg | grep -i amdgpu, and a newer kernel "
                     "and linux-firmware", evidence, errors, confirmed=proper)
    if _vendor(ctx) != "amd" and any(_ILLEGAL_MEMORY.search(e.line) for e in errors):
        owner = f"update {tool} (pip install -U {tool}); " if tool and tool != "torch" else ""
        return _make("gpu-hang", "a GPU kernel read or wrote outside its memory",
                     "an illegal memory access is a kernel fault: a bug in the library whose kernel ran, inputs it "
                     "does not handle (an index out of range, a batch past its 32-bit offsets), or a driver fault",
                     f"{owner}rerun with CUDA_LAUNCH_BLOCKING=1 so the traceback names the op that faulted; in training, "
                     "try a smaller batch size; update the NVIDIA driver and torch", evidence, errors, confirmed=False)
    if re.search(r"NVRM|\bXid\b", _text_of(ctx)) or (_vendor(ctx) == "nvidia"):
        return _make("gpu-hang", "the GPU faulted or hung",
                     "the NVIDIA driver reported a fault (an Xid) while the job ran: Xid 13 / 31 are a kernel's own "
                     "fault (a library bug, bad input), 43 / 45 the driver stopping the process, 79 the card off the bus",
                     "sudo dmesg | grep -i xid names the kind; for 13 / 31 rerun with CUDA_LAUNCH_BLOCKING=1 to name the "
                     "op and update the library that owns it and the NVIDIA driver; for 79 look at power and the PCIe "
                     "link", evidence, errors, confirmed=False)
    return _make("gpu-hang", "the GPU faulted or hung",
                 "the GPU reset or faulted while running; the paste does not name the kernel or driver at fault",
                 "read sudo dmesg | grep -i -e amdgpu -e 'page fault' -e timeout; update the kernel and linux-firmware; "
                 "on a ROCm torch, the torch built for a newer ROCm (pip install torch --index-url "
                 f"https://download.pytorch.org/whl/rocm{ROCM_TORCH_INDEXES[-1]}); if the GPU also drives the display, "
                 "amdgpu.lockup_timeout=10000 on the kernel command line", evidence, errors, confirmed=False)


# NaN losses and fp16 overflow: the values leave fp16's range (max 65504), not a missing instruction
_NAN = re.compile(r"(?i)\bnan\b|\binf\b|overflow|loss scale")
# GPUs without bf16 arithmetic torch uses: NVIDIA before Ampere, AMD's GCN/RDNA1/RDNA2 (gfx90a, CDNA3, RDNA3+ have it)
_NO_BF16 = re.compile(r"sm_[3-7]\d|gfx[6-8]\w*|gfx90[0-6c]|gfx10\d\d")


def _overflow(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A loss that turns NaN, a gradient overflow, a loss scale driven to its floor: fp16 runs out of range. Where
    the GPU computes bf16 (fp32's range) that is the fix; where it does not, fp16 with dynamic loss scaling, or fp32."""
    nan = [e for e in errors if _NAN.search(e.line)]
    said = " ".join(e.line for e in nan)
    if not nan or (re.search(r"(?i)bf16|bfloat16", said) and not re.search(r"(?i)fp16|float16|half", said)):
        return None   # NaN under bf16 is not fp16's range: the bf16 readings below decide
    arch, fact = ctx.arch(nan)
    names = " ".join(f.value for f in ctx.sheet.of("gpu")) + " " + _text_of(ctx)
    old_gpu = (arch and _NO_BF16.fullmatch(arch)) or re.search(r"(?i)\b(?:V100|P100|P40|T4|GTX ?10\d\d|RTX ?20\d\d|"
                                                              r"Titan V|MI50|MI60|Radeon VII|RX ?[56]\d\d\d)\b", names)
    scaling = ("dynamic loss scaling (torch.amp.GradScaler with fp16; DeepSpeed \"fp16\": {\"loss_scale\": 0}), a "
               "lower learning rate and gradient clipping (max_grad_norm 1.0)")
    if old_gpu:
        fix = (f"this GPU{' (' + arch + ')' if arch else ''} has no bf16: keep fp16 with {scaling}, or train in fp32 "
               "(no fp16/bf16 flag); bf16 (bf16: true) needs Ampere / RDNA3 / CDNA2 or newer")
    else:
        fix = (f"train in bf16 instead of fp16 (bf16: true / --bf16 / bf16=True; fp16 off): it has fp32's range, so "
               f"the values that overflow fp16 do not; if the GPU has no bf16, keep fp16 with {scaling}, or fp32")
    # a NaN loss alone may have other causes (a learning rate, bad data); fp16 named, or its overflow, settles it
    settled = re.search(r"(?i)\bfp16\b|float16|\bhalf\b|\bamp\b|autocast|mixed precision|overflow|loss scale",
                        _text_of(ctx))
    return _make("precision", "the loss overflows fp16", "in fp16 (largest value 65504) activations or gradients "
                 "overflow to inf, and the loss and the weights turn NaN; a loss scale that keeps falling says the "
                 "same", fix, [f for f in (ctx.line_fact(nan[0]), fact) if f], nan, confirmed=bool(settled))


# both formats tried ("bf16 false fp16 true", "tried fp16 and bf16"), on a GPU that computes bf16 (Ampere and newer,
# RDNA3, CDNA2 and newer): the format is not what overflows
_BOTH_TRIED = re.compile(r"(?i)\bbf16\b[^\n]{0,40}\bfp16\b|\bfp16\b[^\n]{0,40}\bbf16\b")
_BF16_GPU = re.compile(r"(?i)(?<![a-z0-9])(?:A100|A800|H100|H800|H200|L40S?|A6000|A10G?|RTX ?[34]0\d0|RTX ?50\d0|"
                       r"MI2[15]0X?|MI3\d\dX?|RX ?[79]\d\d\d)(?![a-z0-9])")


def nan_whatever_the_format(ctx: Context, nan: list[ErrorLine]) -> Optional[Diagnosis]:
    """NaN losses / gradients that stay after the user tried both bf16 and fp16, on a GPU that computes bf16: not the
    format's range but the fused attention kernel chosen automatically (flash / SDPA), which LLaMA-Factory and
    transformers let one turn off."""
    text = _text_of(ctx)
    gpu = _BF16_GPU.search(text)
    if not (nan and gpu and _BOTH_TRIED.search(text)):
        return None
    return _make("attention", "NaN gradients in bf16 and fp16 alike: the attention kernel",
                 f"the loss / grad_norm turns NaN whatever the format, on a GPU that computes bf16 ({gpu.group(0)}): "
                 "the fused attention kernel chosen automatically (flash-attention / SDPA) gives the NaN",
                 "turn the fused attention off and keep bf16: LLaMA-Factory: flash_attn: disabled (or eager); "
                 "transformers: attn_implementation=\"eager\" when loading", [ctx.line_fact(nan[0])], nan,
                 confirmed=False)


_LATENT_NANS = re.compile(r"(?i)\bNaNs? (?:detected|found) in latents\b|\blatents?\b.{0,20}\b(?:contain|contains|have|has) "
                          r"NaNs?\b")
_REFUSES_FP16 = re.compile(r"(?i)please use bf16 or fp32|(?:不支持|does ?n.t support|not support(?:ed)?)\s*(?:for\s+)?fp16\b|"
                           r"\bfp16\b\W{0,3}(?:is )?not (?:supported|allowed)")
_OLD_GPU_NAMES = re.compile(r"(?i)\b(?:V100|P100|P40|P4|T4|K80|GTX ?10\d\d|GTX ?16\d\d|RTX ?20\d\d|Titan V|MI50|MI60|"
                            r"Radeon VII|RX ?[56]\d\d\d)\b")


def _fp16_refused(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A tool that refuses fp16 for this job (ms-swift's full fine-tuning: 'please use bf16 or fp32', fp16's range
    makes a full fine-tune diverge) on a GPU without bf16 (V100, T4, P40; RDNA2 and older): of the formats it allows
    only fp32 is left; LoRA keeps the frozen weights in half precision if fp32 does not fit."""
    refused = [e for e in errors if _REFUSES_FP16.search(e.line)]
    if not refused:
        return None
    arch, fact = ctx.arch(refused)
    names = " ".join(f.value for f in ctx.sheet.of("gpu")) + " " + _text_of(ctx)
    gpu = _OLD_GPU_NAMES.search(names)
    if not ((arch and _NO_BF16.fullmatch(arch)) or gpu):
        return None   # a GPU with bf16: the bf16 readings below say to use it
    said = gpu.group(0) if gpu else arch
    swift = re.search(r"(?i)\bswift\b|sft_type", _text_of(ctx))
    flag = "--dtype fp32" if swift else "fp32 (no fp16 / bf16 flag; torch_dtype=torch.float32)"
    return _make("precision", f"fp16 is refused and the {said} has no bf16",
                 f"the tool refuses fp16 for this job (a full fine-tune in fp16 overflows and the loss diverges), and "
                 f"the {said} cannot compute bf16, so fp32 is the format left",
                 f"train in fp32: {flag}; if fp32 does not fit, fine-tune with LoRA (the frozen weights may stay fp16)",
                 [f for f in (ctx.line_fact(refused[0]), fact) if f], refused)


def image_nans(ctx: Context, nans: list[ErrorLine], vae: Optional[bool] = None) -> Diagnosis:
    """The Stable Diffusion web UI's (and SD.Next's) NaN check: the VAE or the UNet computed in fp16 overflowed. The
    VAE's remedy is keeping it in fp32; the UNet's is upcasting its attention (or the whole model) to fp32."""
    # a black picture is the VAE's NaN in the common case (the web UI's check names which part)
    if vae is None:   # (a caller that read a black picture in words passes True)
        vae = any(re.search(r"(?i)\bVAE\b|black (?:image|picture|output|square)", e.line) for e in nans)
    comfy = ctx.tool(nans) == "comfyui"
    if vae:
        fix = ("--fp32-vae (or --bf16-vae on a GPU with bf16) when starting ComfyUI; where the pictures stay black "
               "(an older or low-memory GPU whose fp16 overflows in the UNet too), --force-fp32" if comfy else
               "add --no-half-vae to COMMANDLINE_ARGS (webui-user.sh / .bat; SD.Next: the same), so the VAE runs in "
               "fp32 (upcast; SD.Next's own VAE upcast setting does it where it is offered), or use a VAE fixed for fp16 (sdxl-vae-fp16-fix)")
    else:
        fix = ("--force-upcast-attention (or --fp32-unet) when starting ComfyUI" if comfy else
               "turn on Settings > Stable Diffusion > \"Upcast cross attention layer to float32\" or start with "
               "--upcast-sampling; if it still fails, --no-half (the whole model in fp32, slower)")
    part = "VAE" if vae else "UNet"
    return _make("precision", f"the {part} overflows fp16", f"the {part} runs in fp16, and its values leave fp16's "
                 "range, so the picture turns to NaN (a black image)", fix, [ctx.line_fact(nans[0])], nans)


def _sft_config(ctx: Context) -> str:
    """trl's SFTTrainer takes its settings from SFTConfig: TrainingArguments passed there can come back with bf16."""
    if not re.search(r"\bSFTTrainer\b|\bSFTConfig\b", _text_of(ctx)):
        return ""
    return ("; with trl's SFTTrainer pass them in SFTConfig(fp16=True, bf16=False) instead of TrainingArguments "
            "(unsloth: fp16=not is_bfloat16_supported(), bf16=is_bfloat16_supported(); update unsloth and "
            "unsloth_zoo)")


def _text_of(ctx: Context) -> str:
    return "\n".join(ctx.sheet.lines)


_ZERO_LOSS = re.compile(r"(?i)\bloss\b.{0,24}?(?<![\d.])0(?:\.0+)?(?![.\d])|loss\s*(?:全|都|全部|全都|一直)?\s*(?:为|是|变成|变为|一直是|都是|直接)\s*0")
# NVIDIA GPUs without fast fp16 (CTranslate2 wants compute capability 7.0 for float16): Kepler, Maxwell, Pascal
# (but the P100, sm_60)
_SLOW_FP16 = re.compile(r"sm_(?:[3-5]\d|6[12])")


def _format_refused(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A tool refusing a number format for this GPU in its own words: CTranslate2's float16 on a GPU without fast
    fp16, ptxas refusing bf16 below sm_80, torch's GradScaler refusing fp16 gradients."""
    text = " ".join(e.line for e in errors)
    joined = _text_of(ctx)
    evidence = [ctx.line_fact(errors[0])]
    arch, _fact = ctx.arch(errors)
    ct2 = re.search(r"(?i)efficient float16 computation", text) or (
        re.search(r"(?i)\b(?:float16|fp16|half)\b.{0,30}\b(?:Maxwell|Pascal|Kepler)\b", text)
        and (_WHISPER.search(joined) or re.search(r"(?i)whisperx", joined)))
    if ct2:
        on = f" ({arch})" if arch else ""
        return _make("precision", "CTranslate2 has no fast float16 on this GPU",
                     f"CTranslate2 (faster-whisper, WhisperX) runs float16 only on GPUs of compute capability 7.0 or "
                     f"newer; this GPU{on} is older (Kepler, Maxwell, Pascal), so the float16 compute type is refused",
                     "load the model with another compute type: compute_type=\"float32\" (WhisperX: --compute_type "
                     "float32), or compute_type=\"int8\" / \"int8_float32\" to save memory (int8 needs compute "
                     "capability 6.1)", evidence, errors)
    ptx = re.search(r"(?i)Feature '\.?bf16' requires \.target (sm_\d+)|\.f32\.bf16' requires \.target (sm_\d+)", text)
    if ptx:
        need = ptx.group(1) or ptx.group(2)
        tool = ctx.tool(errors)
        own = (" (unsloth: fp16 = not is_bfloat16_supported(), bf16 = is_bfloat16_supported(), its own check)"
               if tool == "unsloth" or re.search(r"(?i)\bunsloth\b", joined) else "")
        return _make("precision", f"a Triton kernel was built in bf16 for a GPU older than {need}",
                     f"the run chose bf16 (torch may report bf16 as supported where it is only emulated), and Triton "
                     f"compiled its kernels with bf16 instructions, which ptxas accepts only for {need} and newer; "
                     f"this GPU{' (' + arch + ')' if arch else ''} is older (a T4 or V100 has no bf16)",
                     "train in fp16 instead of bf16 on this GPU: fp16=True, bf16=False (--fp16; the model loaded with "
                     "torch_dtype=torch.float16)" + own, evidence, errors)
    if re.search(r"(?i)Attempting to unscale FP16 gradients", text):
        return _make("precision", "the trained parameters are fp16, which the gradient scaler refuses",
                     "with fp16 mixed precision the GradScaler unscales the gradients of the trained parameters, and "
                     "refuses gradients that are themselves fp16: the LoRA adapter (or the whole model) was created "
                     "or loaded in fp16",
                     "keep the trainable parameters in fp32: cast them before training (for p in model.parameters(): "
                     "if p.requires_grad: p.data = p.data.float(); peft does it with autocast_adapter_dtype=True, "
                     "its default since 0.12), keep the frozen base in fp16; or load the model in fp32 (bf16 where "
                     "the GPU has it)", evidence, errors)
    return None


def _zero_loss(ctx: Context, zero: list[ErrorLine]) -> Diagnosis:
    """A fine-tuning loss that collapses to exactly 0: the fp16 forward overflowed (inf/NaN logits the loss turns
    into 0 or that zero the update), the commonest cause when the model is loaded or trained in fp16."""
    joined = _text_of(ctx)
    arch, fact = ctx.arch(zero)
    old_gpu = bool(arch and _NO_BF16.fullmatch(arch))
    fix = ("this GPU has no bf16: train in fp32 (load with torch_dtype=torch.float32, no fp16 flag), or keep fp16 "
           "with dynamic loss scaling and the trainable parameters in fp32" if old_gpu else
           "load the model in bf16 and train in bf16: torch_dtype=torch.bfloat16 when loading, bf16=True (fp16 off) "
           "in the TrainingArguments (--bf16; LLaMA-Factory: bf16: true); on a GPU without bf16, fp32")
    settled = re.search(r"(?i)\bfp16\b|float16|\bhalf\b|torch_dtype", joined)
    return _make("precision", "the loss collapses to 0: fp16 overflow", "a loss that drops to exactly 0 after the "
                 "first steps means the forward pass overflowed fp16 (largest value 65504) and the logits turned to "
                 "inf/NaN, which the loss and the update then zero; a model loaded in float16 for fine-tuning does it",
                 fix, [f for f in (ctx.line_fact(zero[0]), fact) if f], zero, confirmed=bool(settled))


@rule("precision")
def precision(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("precision")
    if not errors:
        return None
    nans = [e for e in errors if re.search(r"(?i)NaNs was produced in (?:Unet|VAE)|NansException|black (?:image|picture|"
                                           r"output|square)", e.line)]
    if nans:
        return image_nans(ctx, nans)
    latents = [e for e in errors if _LATENT_NANS.search(e.line)]
    if latents:
        return _make("precision", "the VAE overflows fp16 while encoding the latents",
                     "the trainer checks the latents the VAE encodes; NaN there is the VAE run in fp16 (the SDXL VAE "
                     "overflows fp16's range), not the data or the learning rate",
                     "run the VAE in fp32: --no_half_vae (kohya's sd-scripts; kohya_ss GUI: Advanced > Additional "
                     "parameters where the tab has no checkbox), or a VAE fixed for fp16 (sdxl-vae-fp16-fix via "
                     "--vae); the rest of the training stays in mixed precision", [ctx.line_fact(latents[0])], latents)
    fp16_refused = _fp16_refused(ctx, errors)
    if fp16_refused is not None:
        return fp16_refused
    refused = _format_refused(ctx, errors)
    if refused is not None:
        return refused
    attention = nan_whatever_the_format(ctx, [e for e in errors if _NAN.search(e.line) or _ZERO_LOSS.search(e.line)])
    if attention is not None:
        return attention
    zero = [e for e in errors if _ZERO_LOSS.search(e.line)]
    if zero and not _NAN.search(" ".join(e.line for e in errors)):
        return _zero_loss(ctx, zero)
    overflow = _overflow(ctx, errors)
    if overflow is not None:
        return overflow
    text = " ".join(e.line for e in errors)
    evidence = [ctx.line_fact(errors[0])]
    fp4 = re.search(r"(?i)\b(?:MX)?FP4\w*\b[\w ]{0,24}? is not supported on (gfx\w+)", text)
    if fp4 and re.search(r"VLLM_ROCM_USE_AITER|AITER", "\n".join(ctx.sheet.lines)):
        return _make("precision", f"vLLM's AITER path uses FP4, which {fp4.group(1)} lacks",
                     f"with VLLM_ROCM_USE_AITER=1 vLLM turns on AITER's FP4 batched matmul by default; {fp4.group(1)} "
                     "has no FP4 (gfx950 has)", "export VLLM_ROCM_USE_AITER_FP4BMM=0 (keep the rest of AITER), or "
                     "a vLLM release that checks the GPU first", evidence, errors)
    if re.search(r"(?i)cublasLt\w*.{0,80}NOT_SUPPORTED|NOT_SUPPORTED.{0,80}cublasLt", text):
        old = [f.value for f in ctx.sheet.of("torch") if re.search(r"\+cu11", f.value)]
        if old:
            return _make("precision", "this torch's cuBLASLt has no fp8 matmul",
                         f"torch {old[0]} is built with CUDA 11, whose cuBLASLt has no fp8 (e4m3fn) matmul",
                         "pip install -U torch --index-url https://download.pytorch.org/whl/cu124 (or newer), or run "
                         "the model in fp16/bf16 instead of fp8", evidence, errors)
    if re.search(r"(?i)not implemented for .(?:Half|BFloat16).", text):
        # a CPU kernel missing for fp16/bf16: the model runs on the CPU in a GPU's number format
        return _make("precision", "a half-precision model runs on the CPU",
                     "the model was loaded in fp16/bf16 but runs on the CPU, which has no kernel for this op in that "
                     "format: the GPU was not used (torch sees no GPU, or the model was never moved to it)",
                     "check python -c 'import torch; print(torch.cuda.is_available())': if False, fix the GPU first "
                     "(a torch built for this GPU); on the CPU load the model in float32 (torch_dtype=torch.float32; "
                     "web UIs: --no-half / --precision full)", evidence, errors)
    fp8 = re.search(r"(?i)(?:fp8|float8|fp4|mxfp|nvfp)\w*.{0,60}\b(?:requires|needs|only (?:be )?supported|is not "
                    r"supported)\b", text)
    if fp8:
        return _make("precision", "this GPU has no fp8", "fp8 matmuls need Ada (sm_89), Hopper (sm_90) or newer, MI300 "
                     "(gfx942) or RDNA4; this GPU is older", "load the model in bf16 or fp16 instead (vLLM: --dtype "
                     "bfloat16 with a non-fp8 checkpoint, or --quantization none / awq / gptq; transformers: "
                     "torch_dtype=torch.bfloat16), or run it on a GPU with fp8", evidence, errors)
    bf16 = re.search(r"(?i)bf16|bf+loat|16BF", text)   # (bf+loat: BFloat16, and a user's "BFfloat")
    if bf16 and re.search(r"(?i)Bfloat16 is only supported on GPUs with compute capability", text) or \
            (bf16 and ctx.tool(errors) == "vllm"):
        return _make("precision", "the GPU has no bf16", "vLLM loads the model in its bf16 dtype, which this GPU "
                     "cannot compute", "start with --dtype half (= float16; LLM(model=..., dtype=\"float16\")), or "
                     "--dtype float32; "
                     "bf16 needs compute capability 8.0 (Ampere) or newer", evidence, errors)
    if bf16 and re.search(r"(?i)setup doesn.t support bf16|--bf16|bf16=True|TrainingArguments", text):
        return _make("precision", "the GPU has no bf16", "the training is configured for bf16, which this GPU (older "
                     "than Ampere, or RDNA1/2) cannot compute",
                     "train in fp16 instead: fp16=True instead of bf16=True in the TrainingArguments (--fp16 instead "
                     "of --bf16; the same in a DeepSpeed config: \"fp16\": {\"enabled\": true}, \"bf16\": "
                     "{\"enabled\": false})" + _sft_config(ctx), evidence, errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("precision", hit, errors)
    if bf16:
        where = ("fp16: true and bf16: false in the training config (LLaMA-Factory, axolotl; --fp16 instead of --bf16 "
                 "on the command line)" if _training(ctx) else "the project's dtype setting")
        return _make("precision", "bf16 does not run on this stack", "a bf16 operation runs where the GPU (or the "
                     "installed torch and CUDA) has no bf16 support",
                     f"turn bf16 off: run in fp16 (or fp32) instead of bf16: {where}", evidence, errors)
    # a number-format failure no reading above settles: the format the GPU does have, as the likely remedy
    return _make("precision", "the GPU has no instructions for this number format",
                 "an operation runs in a format (bf16, fp8, fp4) this GPU or its build does not compute",
                 "run the model in a format the GPU has: fp16 on GPUs without bf16 (NVIDIA before Ampere, AMD RDNA2 and "
                 "older), bf16 or fp16 where fp8 / fp4 are missing (--dtype, torch_dtype, or the tool's precision "
                 "option), fp32 to confirm", evidence, errors, confirmed=False)


# NVIDIA GPUs older than Ampere, by name: flash-attn 2 has no kernels for them
_PRE_AMPERE = re.compile(r"(?i)(?<![A-Za-z0-9])(?:V100|P100|P40|P4|T4|K80|M40|GTX ?1[06]\d\d|RTX ?20\d\d|Titan (?:V|Xp|RTX)|Quadro RTX ?\d+)"
                         r"(?![A-Za-z0-9])|\b(?:Volta|Turing|Pascal)\b")


def _amd_arch_outside_flash_attention(ctx: Context, text: str) -> Optional[Diagnosis]:
    """ROCm's flash-attention refusing an AMD GPU by its own arch check ("only supports MI200 GPUs or newer"): the
    arch is missing from the build's list, which the maintainers extend (gfx908 was added that way), so the arch
    reading: build it for this arch, or use SDPA."""
    said = _lines_matching(ctx, r"(?i)FlashAttention only supports AMD|only supports AMD MI\d+")
    if not said:
        return None
    allowed = re.compile(r"gfx9(?:0a|4\d|5\d)")
    refused = [a for a in ctx.sheet.machine_archs if a.startswith("gfx") and not allowed.fullmatch(a)]
    if not refused:
        return None
    arch = refused[0]
    return _make("arch-missing", f"ROCm's flash-attention leaves {arch} out of its arch check",
                 f"the flash-attention build checks the GPU's arch against the ones it was made for (MI200 / MI300: "
                 f"gfx90a, gfx94x); {arch} is not in that list, so it refuses the GPU before running",
                 f"build ROCm/flash-attention from a release whose arch check includes {arch} (add it to the valid "
                 f"archs in setup.py and the TORCH_CHECK where it is missing), with GPU_ARCHS={arch} pip install "
                 f"--no-build-isolation .; or skip it: attn_implementation=\"sdpa\"",
                 [f for f in (_arch_fact(ctx, arch),) if f], said)


# flash-attn 1.x checks the GPU before its backward pass for head dims above 64 (is_sm80: the A100's / H100's larger
# shared memory); its README's table says so ("Head dim > 64 backward requires A100 or H100")
_HEAD_DIM_BACKWARD = re.compile(r"(?i)Expected is_sm80(?: \|\| is_sm90)? to be true|\bhead dim > ?\d+ backward requires")


def _head_dim_backward(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """flash-attn 1.x refusing the backward pass of a head dim above 64 on a GPU that is not an A100 / H100 (an RTX
    3090 / 4090, an A40, an A10): the forward runs there, training does not. Not the GPU's arch (no build adds the
    shared memory): flash-attn 2 runs the backward of every head dim up to 256 on Ampere and newer (its README: head
    dim 256 backward on consumer GPUs since 2.5.5, without dropout)."""
    said = [e for e in errors if _HEAD_DIM_BACKWARD.search(e.line)]
    if not said:
        return None
    gpu = next((g.value for g in ctx.sheet.of("gpu") if not re.search(r"(?i)\b[AH]100\b", g.value)), None)
    on = f" on the {gpu}" if gpu else ""
    diagnosis = _make("attention", f"flash-attn 1.x trains head dims above 64 only on an A100 / H100{on}",
                      "FlashAttention 1.x runs the backward pass (training) of a head dim above 64 only on sm80 / sm90 "
                      "GPUs (A100, H100: their larger shared memory); the forward pass (inference) runs on this GPU",
                      "upgrade to flash-attn 2.x (pip install -U flash-attn --no-build-isolation): its backward pass "
                      "runs every head dim up to 256 on Ampere and newer GPUs (RTX 30xx/40xx, A40, A10); with flash-attn "
                      "1.x, train only a model whose head dim is 64 or less, or train on an A100 / H100 (inference "
                      "runs here as is)", [ctx.line_fact(said[0])], said)
    # the arch reading of the same line (rebuild flash-attn for this GPU) cannot add shared memory
    diagnosis.rank = family("arch-missing").rank - 1
    return diagnosis


_SGLANG = re.compile(r"(?i)\bsglang\b")
_FLASHINFER = re.compile(r"(?i)\bflash_?infer\b")
_AMD_WORDS = re.compile(r"(?i)\bamd|\brocm\b|\bhip\b|\bgfx\d|\bMI\d{2,3}\b|\bradeon\b|\binstinct\b")
_TURING_OR_OLDER = re.compile(r"(?i)(?:<=?|or lower|below|older)\W{0,3}sm_?[5-7]\d|\bsm_?[5-7]\d\b\W{0,3}(?:or lower|and below)")


def _flashinfer_outside(ctx: Context) -> Optional[Diagnosis]:
    """SGLang on a GPU its default attention backend, FlashInfer, has no kernels for: an AMD GPU (FlashInfer is CUDA
    only) or an NVIDIA card below sm_80 (FlashInfer's README lists sm80 and newer as supported; sm75 has come and gone
    between releases). SGLang's own switch runs attention through its Triton kernels instead (--attention-backend
    triton, with --sampling-backend pytorch for the sampler; older releases: --disable-flashinfer
    --disable-flashinfer-sampling)."""
    text = _text_of(ctx)
    if not (_SGLANG.search(text) and _FLASHINFER.search(text)):
        return None
    older = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"sm_[5-7]\d", a)]
    amd = bool(_AMD_WORDS.search(text)) and not older
    if not (amd or older or _TURING_OR_OLDER.search(text)):
        return None
    if not (ctx.errors or ctx.sheet.has("complaint", "yes") or re.search(r"\?|？|crash|fail|error|can't|cannot", text)):
        return None
    where = "AMD GPUs (FlashInfer has CUDA kernels only)" if amd else \
        f"this NVIDIA GPU ({older[0] if older else 'below sm_80'}; FlashInfer supports sm80 and newer, sm75 only in some releases)"
    said = _lines_matching(ctx, _FLASHINFER.pattern)[:1]
    upgrade = "" if amd else ("; or upgrade sglang together with flashinfer to a release whose FlashInfer lists this "
                              "arch among its supported ones")
    return _make("attention", "SGLang's FlashInfer attention backend does not run on this GPU",
                 f"SGLang uses FlashInfer for attention and sampling by default, and FlashInfer has no kernels for {where}",
                 "start sglang without FlashInfer: python -m sglang.launch_server ... --attention-backend triton "
                 "--sampling-backend pytorch (releases before the --attention-backend flag: --disable-flashinfer "
                 f"--disable-flashinfer-sampling){upgrade}", [ctx.line_fact(l) for l in said], said, confirmed=False)


def _attention_off(ctx: Context) -> str:
    """How to turn flash-attn off, in the configuration language of the tool the paste uses."""
    text = _text_of(ctx)
    if re.search(r"(?i)\baxolotl\b", text):
        return "flash_attention: false in the axolotl YAML (sdp_attention: true for PyTorch's fused attention)"
    if re.search(r"(?i)llama-?factory|llamafactory-cli", text):
        return "flash_attn: sdpa in the LLaMA-Factory YAML (or disabled)"
    return ("load the model with attn_implementation=\"sdpa\" (or \"eager\") instead of \"flash_attention_2\", and "
            "turn the tool's flash-attention option off (axolotl: flash_attention: false; LLaMA-Factory: flash_attn: "
            "sdpa)")


@rule("attention")
def attention(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("attention")
    if not errors and ctx.tool() == "flash-attn":   # its build fails for this GPU's arch
        errors = [ErrorLine(i, l.strip(), "attention") for i, l in enumerate(ctx.sheet.lines, 1)
                  if re.search(r"(?i)errors? generated when compiling for gfx\w+", l)]
    tgi = _lines_matching(ctx, r"(?i)Flash Attention enabled models")
    old_gpu = _PRE_AMPERE.search(_text_of(ctx))
    if tgi and old_gpu and _lines_matching(ctx, r"(?i)\bSharded \w+ requires Flash Attention"):
        # TGI shards (tensor parallel) a model only through its flash-attention model code, and flash-attention has
        # no kernels before Ampere: no install brings them to this GPU
        return _first(_make("attention", f"TGI shards this model only with flash attention, which the {old_gpu.group(0)} "
                            "cannot run", "text-generation-inference implements the sharded (tensor-parallel) model "
                            "only on its flash-attention model code; flash attention has kernels for Ampere (compute "
                            f"capability 8.0) and newer, and the {old_gpu.group(0)} is older",
                            "run the model unsharded on this GPU (drop --num-shard, or --num-shard 1: TGI then uses the "
                            "transformers code path on one GPU, which must hold the model; quantize it to fit), or "
                            "serve it sharded on Ampere or newer GPUs", [ctx.line_fact(tgi[0])], tgi))
    if tgi:
        # TGI's server imports its own compiled kernels (flash-attention, vLLM's paged-attention ops); a local install
        # without them cannot shard or page; the install readings of the missing module do not fix it
        return _first(_make("attention", "text-generation-inference was installed without its attention kernels",
                            "a local TGI install imports the flash-attention and vLLM paged-attention kernels it "
                            "builds itself (vllm_cache_ops, flash_attn_cuda); without them the models that need them "
                            "(sharded, paged) refuse to load",
                            "build the kernels from TGI's server folder: cd server && make install-flash-attention "
                            "(make install-flash-attention-v2 for newer releases) && make install-vllm, then restart "
                            "the launcher; or run TGI's docker image, which ships them", [ctx.line_fact(tgi[0])],
                            tgi))
    flashinfer = _flashinfer_outside(ctx)
    if flashinfer is not None:
        return flashinfer
    if not errors:
        return None
    head_dim = _head_dim_backward(ctx, errors)
    if head_dim is not None:
        return head_dim
    text = " ".join(e.line for e in errors)
    evidence = [ctx.line_fact(errors[0])]
    if re.search(r"(?i)stack frame size", text) and ctx.tool(errors) == "vllm" or \
            re.search(r"VLLM_USE_TRITON_FLASH_ATTN", "\n".join(ctx.sheet.lines)):
        return _make("attention", "vLLM's Triton flash attention does not build for this GPU",
                     "the Triton flash-attention kernel fails to compile for this arch (stack frame too large)",
                     "export VLLM_USE_TRITON_FLASH_ATTN=0 (vLLM then uses its other attention backend)", evidence,
                     errors)
    cuda = re.search(r"(?i)FlashAttention is only supported on CUDA ([\d.]+)", text)
    if cuda:
        return _make("attention", f"flash-attn needs CUDA {cuda.group(1)} to build",
                     f"building flash-attn from source needs the CUDA toolkit {cuda.group(1)} or newer",
                     f"install a prebuilt flash-attn wheel that matches torch and its CUDA (the release page lists "
                     f"them), or build with a CUDA {cuda.group(1)}+ toolkit", evidence, errors)
    old_gpu = _PRE_AMPERE.search(_text_of(ctx))
    if re.search(r"(?i)Ampere GPUs or newer|(?:lower|older) than ampere", text) or (
            old_gpu and re.search(r"(?i)flash[-_ ]?att", text)):
        on = f" ({old_gpu.group(0)})" if old_gpu else ""
        return _make("attention", f"FlashAttention 2 needs an Ampere or newer GPU{on}",
                     f"flash-attn 2 has kernels for sm_80 (Ampere) and newer only; this GPU{on} is older, so there "
                     "is nothing to build or install for it",
                     f"do not use flash-attn on this GPU{on}: " + _attention_off(ctx) +
                     " (the model runs with the default attention; drop flash-attn from the install)", evidence,
                     errors)
    if re.search(r"(?i)FlashAttention2? has been toggled on|flash_attn\W+(?:seems to be )?not installed|No module named "
                 r"'flash_attn", text):
        amd = _vendor(ctx) == "amd"
        install = ("ROCm's flash-attention (github.com/ROCm/flash-attention, built with GPU_ARCHS=<your gfx>) or its "
                   "Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE)" if amd else
                   "pip install flash-attn --no-build-isolation (a prebuilt wheel matching torch and CUDA)")
        return _make("attention", "flash-attn is not installed", "the model is asked for FlashAttention 2, but the "
                     "flash_attn package is not importable in this environment",
                     f"load the model with attn_implementation=\"sdpa\" (PyTorch's fused attention, no extra package), "
                     f"or install {install}", evidence, errors)
    # on Windows the install reading (rules/install/wheels.py: no Windows wheels, the platform's own build) says more
    if not ctx.sheet.is_windows and not (WINDOWS_WORD.search(text) and re.search(r"(?i)\binstall", text)) and re.search(
            r"(?i)flash[-_ ]?attn\w*\b.{0,40}\b(?:install|build|compil)|(?:install|build|compil)\w*\b.{0,20}\bflash[-_ ]?attn",
            text):
        if _vendor(ctx) == "amd":
            fix = ("build ROCm's fork instead (github.com/ROCm/flash-attention: GPU_ARCHS=<your gfx> pip install "
                   "--no-build-isolation .) or its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE, no CUDA "
                   "build); or skip it: attn_implementation=\"sdpa\"")
        else:
            fix = ("install a prebuilt wheel for this torch, CUDA and Python (the flash-attention release page), or "
                   "build with pip install flash-attn --no-build-isolation and MAX_JOBS=4 (the build runs out of RAM "
                   "with more); or skip it: attn_implementation=\"sdpa\"")
        return _make("attention", "flash-attn does not build here", "flash-attn compiles CUDA (or HIP) kernels at "
                     "install time; without a wheel for this torch and GPU the build fails", fix, evidence, errors)
    if re.search(r"(?i)TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL|current AMD GPU", text):
        return _make("attention", "torch's fused attention is experimental on this AMD GPU",
                     "this ROCm torch builds its flash / memory-efficient SDPA kernels (AOTriton) for this GPU but "
                     "keeps them off by default; attention falls back to the slower math path (a warning, not an error)",
                     "export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 before starting (torch 2.4+ on RDNA3/RDNA4), "
                     "or ignore the warning; a newer torch turns it on for more GPUs", evidence, errors,
                     severity="warning")
    if re.search(r"(?i)Torch was not compiled with (?:flash|memory efficient) attention", text):
        return _make("attention", "this torch has no flash-attention kernel for SDPA",
                     "the torch wheel (the Windows builds, and older ROCm ones) is built without the flash kernel of "
                     "scaled_dot_product_attention; it falls back to the memory-efficient or math kernel and runs on",
                     "nothing to fix: a warning about speed only; for faster attention on Windows use a torch build "
                     "with it (a newer release) or xformers / flash-attn wheels built for this torch; the error that "
                     "stopped the run, if any, is another line", evidence, errors, severity="warning")
    if re.search(r"(?i)memory_efficient_attention", text) and _vendor(ctx) == "amd":
        return _make("attention", "xformers has no kernels for this AMD GPU",
                     "the installed xformers has no ROCm kernels for this arch",
                     "do not use xformers on AMD: uninstall it or start without it (ComfyUI: "
                     "--use-pytorch-cross-attention; A1111: no --xformers) and use PyTorch's SDPA", evidence, errors)
    refused = _amd_arch_outside_flash_attention(ctx, text)
    if refused is not None:
        return refused
    if re.search(r"(?i)not supported by Flash-?Attention|FlashAttention only supports|compiling for gfx", text):
        return _make("attention", "flash-attn does not support this GPU",
                     "this flash-attn build has no kernels for the GPU's arch",
                     "use PyTorch's scaled_dot_product_attention (SDPA; attn_implementation=\"sdpa\") instead of "
                     "flash-attn", evidence, errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("attention", hit, errors)
    # a fused-attention failure no reading above settles: PyTorch's own attention needs no extra kernel package; a
    # package that will not install on Windows is the install reading's (no Windows wheels, the platform's build)
    if on_windows(ctx, text) and re.search(r"(?i)\binstall", text):
        return None
    return _make("attention", "the fused attention kernel does not run here",
                 "the attention kernel the model asked for (flash-attn, xformers, a tool's own) is missing or not "
                 "built for this GPU", "use PyTorch's scaled_dot_product_attention: attn_implementation=\"sdpa\" "
                 "(vLLM: another attention backend, VLLM_ATTENTION_BACKEND; ComfyUI: --use-pytorch-cross-attention), "
                 "or install the kernel package built for this torch and GPU", evidence, errors, confirmed=False)
