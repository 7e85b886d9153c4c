"""Memory readings of inference servers that out_of_memory's rule leaves generic:

  the message names its knob   a server's own out-of-memory message that says which flag to lower (text-generation-
                               inference's token budget at warmup): that flag, with the values the paste shows
  a long context in a ggml server  Ollama / llama.cpp running out as a long (16k, 32k) context fills: the prompt batch
                               (num_batch, -b/-ub) sizes the compute buffers beside the KV cache, so it is what to lower
  no layer on the GPUs         Ollama seeing the GPUs' memory and offloading no layer: the context's graph and cache
                               fit no single card (OLLAMA_CONTEXT_LENGTH / num_ctx)
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

# "You need to decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`", "try reducing --max-model-len"
_NAMED_KNOB = re.compile(r"(?i)\b(?:you (?:need|have) to|try(?: to)?|please|consider) (?:decreas|lower|reduc)\w* "
                         r"`?(--[a-z][\w-]+)`?(?: (?:or|and(?:/or)?) `?(--[a-z][\w-]+)`?)?")
_VALUE = r"(?i)(?:{flag}|{key})\W{{1,3}}(?:Some\()?(\d+)"


def _value(text: str, flag: str) -> Optional[str]:
    """The flag's value in the paste: `--max-batch-total-tokens 16000` or a config dump's `max_batch_total_tokens: 16000`."""
    key = flag.lstrip("-").replace("-", "_")
    m = re.search(_VALUE.format(flag=re.escape(flag), key=re.escape(key)), text)
    return m.group(1) if m else None


def _knob_named(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("out-of-memory")
    named = [(e, _NAMED_KNOB.search(e.line)) for e in errors]
    named = [(e, m) for e, m in named if m]
    if not named:
        return None
    error, m = named[0]
    text = _text(ctx)
    flags = [f for f in m.groups() if f]
    said = [f"{f} (now {_value(text, f)})" if _value(text, f) else f for f in flags]
    return _first(_make(
        "out-of-memory", f"the server's memory budget ({flags[0]}) does not fit what is left after the weights",
        "the server reserves room for this many batch tokens (its KV cache and activations) at start-up; after the "
        "weights are loaded the GPUs have less memory free than that budget needs",
        f"lower {' and/or '.join(said)} to what fits, as the message says (halve it until the warmup passes), or "
        "give the weights less room: more or larger GPUs (more shards) or a quantized model",
        [ctx.line_fact(error)], [error]))


_GGML_SERVER = re.compile(r"(?i)\bollama\b|\bnum_(?:ctx|gpu|batch|predict)\b|\bModelfile\b|\bllama\.cpp\b|llama-server|"
                          r"\bkoboldcpp\b")
# a long context in the user's words or settings: "context length of 16k", "32k context", num_ctx 16384, -c 32768
_LONG_CONTEXT = re.compile(r"(?i)\b(?:8|1[0-9]|[2-9][0-9]|1[0-9]{2})\s?k (?:context|ctx|tokens?)\b|(?:context|ctx)"
                           r"(?: length| size| window)?(?: of)?\W{0,3}(?:8|1[0-9]|[2-9][0-9]|1[0-9]{2})\s?k\b|"
                           r"(?<![\w-])(?:num_ctx|--ctx-size|-c|n_ctx)\W{1,3}(?:8192|[1-9]\d{4,5})\b|\b(?:large|long|big) "
                           r"context\b")


def _ggml_long_context(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("out-of-memory")
    text = _text(ctx)
    if not errors or not _GGML_SERVER.search(text) or not _LONG_CONTEXT.search(text):
        return None
    ollama = re.search(r"(?i)\bollama\b|\bnum_(?:ctx|gpu|batch)\b|\bModelfile\b", text)
    knob = ("num_batch (Modelfile: PARAMETER num_batch 256, or \"options\": {\"num_batch\": 256} in the API; the "
            "default is 512), and num_ctx no larger than needed" if ollama else
            "the batch sizes (llama-server / llama-cli: -b 256 -ub 256; the defaults are 2048 / 512), and -c no "
            "larger than needed")
    return _first(_make(
        "out-of-memory", "the prompt batch's buffers do not fit beside a long context",
        "with a long context the compute buffers for one prompt batch grow with the batch size times the context, on "
        "top of the KV cache; as the prompt fills the context they pass the GPU's memory",
        f"lower {knob}; fewer layers on the GPU (num_gpu / -ngl) or a quantized KV cache also make room",
        [ctx.line_fact(errors[0])], errors))


# Ollama placing no layer on GPUs it sees: its own log line (layers.offload=0, "offloaded 0/N layers") or the user's
# words, beside the GPU memory it found ("plenty of VRAM", a "memory.available" of tens of GiB)
_NO_LAYERS = re.compile(r"(?i)layers\.offload=0\b|offloaded 0/\d+ layers|(?:can.?t|cannot|can not|unable to|won.?t|"
                        r"doesn.?t|does not|not) (?:load|offload|put|fit) (?:any|a single|one) (?:\w+ )?layers? "
                        r"(?:to|on|onto|into) (?:the )?GPU")
_GPU_MEMORY_SEEN = re.compile(r"(?i)\b(?:plenty|lots|enough|more than enough) of (?:free )?(?:VRAM|GPU memory|memory)\b|"
                              r"\b\d{2,4} ?G(?:i?B)? (?:of )?(?:VRAM|GPU memory)\b|memory\.available=\[?\d{2,3}(?:\.\d)? ?GiB|"
                              r"\b[2-9] ?x ?(?:RTX|A\d{2,3}|H\d{3}|L40|MI\d{2,3})")
_GRAPH = re.compile(r"memory\.graph\.(?:full|partial)=\"?(\d+(?:\.\d+)?) ?([GM])iB")


def _ollama_no_layers_on_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Ollama sees the GPUs and their memory, yet offloads no layer: besides the layers it must fit the compute graph
    and KV cache for the context on a GPU, and a model's default context (a long one, 256k for some) makes that graph
    larger than any one card, so every layer stays on the CPU. The context is the knob (Ollama's FAQ:
    OLLAMA_CONTEXT_LENGTH / num_ctx; OLLAMA_FLASH_ATTENTION=1 with OLLAMA_KV_CACHE_TYPE=q8_0 shrink the cache)."""
    text = _text(ctx)
    said = _lines_matching(ctx, _NO_LAYERS)
    if not said or not re.search(r"(?i)\bollama\b", text) or not (_GPU_MEMORY_SEEN.search(text) or _GRAPH.search(text)):
        return None
    graph = _GRAPH.search(text)
    size = f" (its compute graph alone is {graph.group(1)} {graph.group(2)}iB here)" if graph else ""
    return _first(_make(
        "out-of-memory", "the context's buffers fit no single GPU, so Ollama offloads no layer",
        "Ollama sees the GPUs and their free memory, but before any layer it must place the compute graph and KV cache "
        f"for the model's context on a GPU{size}; with the model's long default context that alone is larger than "
        "one card, so it loads every layer on the CPU",
        f"give the model a smaller context, so its buffers{size} fit one GPU: OLLAMA_CONTEXT_LENGTH=32768 in the server's environment (systemctl edit "
        "ollama: Environment=\"OLLAMA_CONTEXT_LENGTH=32768\"), or num_ctx per request / PARAMETER num_ctx in a "
        "Modelfile; OLLAMA_FLASH_ATTENTION=1 with OLLAMA_KV_CACHE_TYPE=q8_0 shrinks the KV cache further; the log's "
        "'offload to' line (layers.offload, memory.graph) shows the result", [], said[:1]))


@rule("out-of-memory")
def served_memory(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an out-of-memory line that names the flag to lower; or a ggml server, a long context and memory
    running out."""
    return _knob_named(ctx) or _ggml_long_context(ctx) or _ollama_no_layers_on_gpu(ctx)
