"""GPU memory taken by design, read as running out or as too much: a serving engine that reserves a share of the GPU
for its KV cache up front (each engine's own knob), and multi-GPU training that keeps a whole model copy on every
card (data parallel) where sharding was wanted."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule
from steadytune.doctor.rules.runtime.shared import _text_of, _training


# Serving engines that reserve their KV cache as a share of the GPU when they start, and the knob of each (their
# engine-argument docs): vLLM gpu_memory_utilization (0.9 of the whole GPU by default), LMDeploy TurboMind's
# cache_max_entry_count (a share of the free memory, 0.8 by default since 0.2.1), SGLang --mem-fraction-static,
# TGI --cuda-memory-fraction with its prefill budget --max-batch-prefill-tokens; TensorRT-LLM's KV cache takes
# free_gpu_memory_fraction (0.9 by default) of the memory left free after the weights (KvCacheConfig; trtllm-serve and
# examples/run.py --kv_cache_free_gpu_memory_fraction; the Triton backend's kv_cache_free_gpu_mem_fraction parameter)
_ENGINES = (
    ("vllm", r"(?i)\bvllm\b",
     "vLLM reserves gpu_memory_utilization of the whole GPU (0.9 by default) when it starts, weights, activations "
     "and a KV cache sized to fill the rest",
     "lower it: LLM(model, gpu_memory_utilization=0.5, max_model_len=4096) (vllm serve --gpu-memory-utilization 0.5 "
     "--max-model-len 4096); the KV cache then takes what is left under that share"),
    ("lmdeploy", r"(?i)\blmdeploy\b|\bturbomind\b",
     "LMDeploy's TurboMind engine reserves a share of the GPU's free memory for its k/v cache when the pipeline "
     "starts (cache_max_entry_count, 0.8 by default)",
     "lower cache_max_entry_count: pipeline(model, backend_config=TurbomindEngineConfig(cache_max_entry_count=0.2)) "
     "(lmdeploy serve / chat: --cache-max-entry-count 0.2); a smaller session_len also shrinks what one request needs"),
    ("sglang", r"(?i)\bsglang\b",
     "SGLang reserves --mem-fraction-static of the GPU for the weights and its KV cache pool when it starts",
     "lower --mem-fraction-static (0.7; Engine(mem_fraction_static=0.7)), and --context-length or "
     "--max-running-requests for the rest"),
    ("text-generation-inference", r"(?i)text-generation-(?:inference|launcher)|\bTGI\b",
     "TGI sizes its KV cache from --cuda-memory-fraction of the GPU and warms up with a prefill of "
     "--max-batch-prefill-tokens tokens",
     "lower --max-batch-prefill-tokens and --max-total-tokens (or --max-input-tokens), or --cuda-memory-fraction 0.8"),
    ("tensorrt-llm", r"(?i)tensorrt[-_ ]?llm|\btrtllm\b|\btrt-llm\b",
     "TensorRT-LLM gives its paged KV cache a fraction of the GPU memory still free after the weights when the engine "
     "starts (0.9 by default), so one instance takes nearly the whole GPU",
     "lower that fraction per instance: in the Triton backend's config.pbtxt the parameter kv_cache_free_gpu_mem_fraction "
     "(e.g. 0.4), with trtllm-serve or examples/run.py --kv_cache_free_gpu_memory_fraction 0.4, in the LLM API "
     "kv_cache_config=KvCacheConfig(free_gpu_memory_fraction=0.4); several instances then share one GPU (or cap the "
     "cache in tokens: max_tokens_in_paged_kv_cache)"),
)
# the user's words for memory taken (a size, "the KV cache uses a lot"), in English or Chinese
_TAKES = re.compile(r"(?i)\b(?:requires?|needs?|uses?|using|takes?|taking|occup\w+|eats?|consum\w+|reserv\w+|allocat\w+)"
                    r"\W+(?:\w+\W+){0,3}?\d+(?:\.\d+)? ?G(?:i?B)?\b|\bkv ?cache\b.{0,40}\b(?:vram|memory|a lot|too much)|"
                    r"\bas much (?:GPU |VRAM |video )?memory\b.{0,40}\bas (?:it )?(?:can|could)\b|"
                    r"\b(?:restrict|limit|cap)\w*\W+(?:\w+\W+){0,2}?(?:GPU |VRAM )?memory (?:usage|use)\b|"
                    r"显存占用.{0,6}(?:高|大|多)|占用.{0,6}显存")


def _engine(text: str) -> Optional[tuple[str, str, str]]:
    return next(((name, why, knob) for name, pattern, why, knob in _ENGINES if re.search(pattern, text)), None)


def _engine_reserves(ctx: Context) -> Optional[Diagnosis]:
    """A serving engine out of memory, or said to take far more than its weights: its KV-cache reservation is the
    memory, and its own share knob is the remedy (not a batch size or a training setting)."""
    text = _text_of(ctx)
    found = _engine(text)
    if found is None or _training(ctx):
        return None
    name, why, knob = found
    oom = ctx.of("out-of-memory")
    if oom and name != "vllm":   # (vLLM's out of memory: out_of_memory's own reading has its flags)
        return _first(_make("out-of-memory", f"{name} reserves most of the GPU for its KV cache",
                            why + "; on top of the weights that leaves too little for the rest, or for another "
                            "process", knob + "; check nvidia-smi (rocm-smi) for other processes holding memory on "
                            "this GPU, whose share the engine cannot take", [ctx.line_fact(oom[0])], oom))
    said = _lines_matching(ctx, _TAKES.pattern)
    if oom or not said:
        return None
    return _make("out-of-memory", f"{name} takes GPU memory for its KV cache by design",
                 why + ", so the memory in use is far above the model's weights; that is the cache, not a leak",
                 knob, [], said, confirmed=False)


# a whole model on every GPU said in words, or model parallelism asked for (English and Chinese)
# (model parallelism only as asked for: "initializing model parallel with size 1" is a Megatron log line, no question)
_EVERY_CARD = re.compile(r"(?i)(?:load|put|place|cop(?:y|ies)|replicat)\w*\s+(?:\w+\s+){0,3}?model\w*\s+(?:on|onto|to|in|into)"
                         r"\s+(?:each|every|all)\s+(?:\w+\s+)?(?:GPU|card|device)s?|"
                         r"\b(?:how|can I|could|want|way to|use|enable|support)\b[^\n.]{0,40}\bmodel[- ]parallel|"
                         r"模型(?:都)?(?:加载|放|复制)到每(?:一)?(?:个|张)?(?:卡|GPU|显卡)|每(?:一)?(?:张|个)(?:卡|GPU|显卡).{0,8}"
                         r"(?:完整|整个|一份).{0,4}模型|(?:有没有|如何|怎么|能否|可以|想)[^\n]{0,12}模型并行")
_MULTI_GPU = re.compile(r"(?i)CUDA_VISIBLE_DEVICES=\d+(?:,\d+)+|\bmulti[- ]?GPU\b|\b[2-9] ?(?:GPUs|cards)\b|多卡|单机多卡|"
                        r"--nproc_per_node|torchrun|FORCE_TORCHRUN")


def _copies_on_every_card(ctx: Context) -> Optional[Diagnosis]:
    """Multi-GPU training that loads the whole model on every card: plain multi-GPU training is data parallel (each
    rank a full copy); the weights are split across the GPUs only with ZeRO-3 or FSDP."""
    said = _lines_matching(ctx, _EVERY_CARD.pattern)
    text = _text_of(ctx)
    if not said or not _MULTI_GPU.search(text) or not _training(ctx) and not re.search(r"(?i)\btrain\b", text):
        return None
    lf = re.search(r"(?i)llama-?factory|llamafactory-cli", text)
    how = ("add deepspeed: examples/deepspeed/ds_z3_config.json to the training yaml (ZeRO-3; ds_z3_offload_config."
           "json also moves them to the CPU) and launch with FORCE_TORCHRUN=1 llamafactory-cli train <yaml>" if lf else
           "DeepSpeed ZeRO-3 (a ds_z3 config: \"zero_optimization\": {\"stage\": 3}, passed as --deepspeed / "
           "TrainingArguments(deepspeed=...)) or FSDP (accelerate config: FSDP, full shard)")
    return _make("out-of-memory", "multi-GPU training keeps a whole model on every GPU",
                 "plain multi-GPU training is data parallel: every GPU holds a full copy of the model, its gradients "
                 "and optimizer state and takes its own share of the batches, so more GPUs do not make a larger model "
                 "fit",
                 f"shard the weights, gradients and optimizer state across the GPUs: {how}", [], said, confirmed=False)


@rule("out-of-memory")
def reserved_memory(ctx: Context) -> Optional[Diagnosis]:
    return _engine_reserves(ctx) or _copies_on_every_card(ctx)
