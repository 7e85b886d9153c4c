"""Write a model as one GGUF file for llama.cpp / Ollama / LM Studio, in-process, with the `gguf` package.

The `gguf` package (llama.cpp's own Python side) gives the tensor-name map (`get_tensor_name_map`), the metadata
writer and the quantisers (f16, bf16, q8_0). What llama.cpp's `convert_hf_to_gguf.py` adds on top, for the four
architectures we train, is small and written out here: the hyper-parameters each architecture reads, Llama's
q/k row permutation (llama.cpp's RoPE pairs neighbouring dimensions, transformers' pairs the two halves), and
Gemma's norm weights stored as `1 + w` (Gemma computes `x * (1 + w)`, llama.cpp `x * w`).

The tokenizer goes in as llama.cpp describes one: a byte-level BPE (Qwen, Llama 3) as `gpt2` with its merges and
pre-tokenizer name; a sentencepiece-style BPE with byte fallback (Gemma) as `llama` with scores that keep its merge
order. The chat template the run trained with goes in as `tokenizer.chat_template`.

Mixtures of experts (Qwen3-MoE, Qwen2-MoE, Mixtral): their experts, routers and shared experts as llama.cpp reads
them, and what is refused, are in gguf_experts.py.

`verify_gguf` loads the file back with transformers (`gguf_file=`) and compares tokenisation, logits and greedy
answers with the model it was written from (Mixtral, whose GGUF transformers does not read: its weights through the
gguf package's reader, `read_back`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from steadytune.errors import UserError
from steadytune.infer.gguf_experts import (
    MOE_ARCHITECTURES,
    add_expert_hyperparameters,
    check_writable,
    expert_tensors,
    is_moe_config,
    keeps_f32,
    refusal,
    to_gguf_vector,
)
from steadytune.model.vision import is_vision_model

GGUF_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k_m")
# The gguf package quantises f16/bf16/q8_0 itself; it has no k-quant quantiser (its Q4_K is de-quantise only), so
# q4_k_m goes through llama.cpp's own quantiser, in-process, where llama-cpp-python is installed.
LLAMA_CPP_TYPES = {"q4_k_m": 15}  # LLAMA_FTYPE_MOSTLY_Q4_K_M
# model_type -> the name of gguf.MODEL_ARCH
ARCHITECTURES = {"qwen2": "QWEN2", "qwen3": "QWEN3", "llama": "LLAMA", "gemma3_text": "GEMMA3", **MOE_ARCHITECTURES}

# Largest relative logit error (max |logit - reference| / max |reference logit|) accepted by `verify_gguf`,
# per tensor type. Measured: see README (export section) for the figures on Gemma 3 270M and the tiny models.
TOLERANCE = {"f32": 1e-5, "f16": 1e-2, "bf16": 4e-2, "q8_0": 1e-1, "q4_k_m": 3e-1}


def _text_config(model) -> Any:
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _tensor_type(kind: str):
    import gguf
    return {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
            "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0}[kind]


def _file_type(kind: str):
    import gguf
    return {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
            "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[kind]


# The 2026 generation: llama.cpp has each architecture (gguf.MODEL_ARCH names it), but writing one takes conversions
# this writer does not make (gated DeltaNet: the conv and A_log layouts llama.cpp's converter rewrites; Gemma 4: the
# per-layer input tables), and a GGUF written without them would load and compute something else. Refused by name.
NOT_WRITTEN = {
    "qwen3_5_text": ("QWEN35", "Qwen3.5", "gated DeltaNet (linear-attention) layers"),
    "qwen3_5": ("QWEN35", "Qwen3.5", "gated DeltaNet (linear-attention) layers"),
    "qwen3_5_moe_text": ("QWEN35MOE", "Qwen3.5-MoE", "gated DeltaNet (linear-attention) layers"),
    "qwen3_5_moe": ("QWEN35MOE", "Qwen3.5-MoE", "gated DeltaNet (linear-attention) layers"),
    "qwen3_next": ("QWEN3NEXT", "Qwen3-Next", "gated DeltaNet (linear-attention) layers"),
    "gemma4_text": ("GEMMA4", "Gemma 4", "per-layer input embeddings and projections"),
    "gemma4": ("GEMMA4", "Gemma 4", "per-layer input embeddings and projections"),
}


def gguf_architecture(model) -> str:
    config = _text_config(model)
    model_type = config.model_type
    if model_type in NOT_WRITTEN:
        arch, name, parts = NOT_WRITTEN[model_type]
        raise UserError(f"export_format: gguf: {name} ({model_type}): llama.cpp reads it (architecture "
                        f"{arch.lower()}), but this GGUF writer does not convert its {parts}; export the merged "
                        "Hugging Face folder (export_format unset) and convert it with llama.cpp's "
                        "convert_hf_to_gguf.py")
    if model_type not in ARCHITECTURES and is_moe_config(config):
        raise UserError(refusal(model_type))
    if model_type not in ARCHITECTURES:
        raise UserError(f"export_format: gguf: no GGUF writer for model_type {model_type!r} here "
                        f"(supported: {', '.join(sorted(ARCHITECTURES))}); export the Hugging Face folder and convert "
                        "it with llama.cpp's convert_hf_to_gguf.py")
    return ARCHITECTURES[model_type]


# ---------------------------------------------------------------------------------------------------------
# Hyper-parameters
# ---------------------------------------------------------------------------------------------------------

def _rope(config) -> tuple[float | None, float | None, dict]:
    """(global rope theta, sliding-window rope theta, global rope parameters) from a transformers 4 or 5 config."""
    params = getattr(config, "rope_parameters", None) or {}
    full = params.get("full_attention", params) if isinstance(params, dict) else {}
    sliding = params.get("sliding_attention", {}) if isinstance(params, dict) else {}
    theta = full.get("rope_theta", getattr(config, "rope_theta", None))
    local = sliding.get("rope_theta", getattr(config, "rope_local_base_freq", None))
    return theta, local, full


def add_hyperparameters(writer, arch: str, config) -> None:
    import gguf

    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    theta, local_theta, rope = _rope(config)
    if theta is not None:
        writer.add_rope_freq_base(theta)
    rope_type = rope.get("rope_type", "default")
    if rope_type == "linear" and rope.get("factor"):
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope["factor"])
    elif rope_type not in ("default", None):
        raise UserError(f"export_format: gguf: rope_type {rope_type!r} is not written by this exporter; export the "
                        "Hugging Face folder and convert it with llama.cpp's convert_hf_to_gguf.py")
    if is_moe_config(config):
        add_expert_hyperparameters(writer, arch, config)
    if arch == "LLAMA":
        writer.add_rope_dimension_count(head_dim)
    if arch in ("QWEN3", "QWEN3MOE", "GEMMA3") or head_dim != config.hidden_size // config.num_attention_heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch == "GEMMA3":
        if getattr(config, "attn_logit_softcapping", None):
            raise UserError("export_format: gguf: Gemma 3 with attn_logit_softcapping is not a Gemma 3 llama.cpp runs")
        if getattr(config, "final_logit_softcapping", None):
            writer.add_final_logit_softcapping(config.final_logit_softcapping)
        layer_types = getattr(config, "layer_types", None)
        if getattr(config, "sliding_window", None) and layer_types and "sliding_attention" in layer_types:
            writer.add_sliding_window(config.sliding_window)
            # Which layers slide, layer by layer (llama.cpp otherwise assumes Gemma 3's 5-of-6 pattern).
            writer.add_sliding_window_pattern([t == "sliding_attention" for t in layer_types])
            if local_theta is not None:
                writer.add_rope_freq_base_swa(local_theta)


# ---------------------------------------------------------------------------------------------------------
# Tensors
# ---------------------------------------------------------------------------------------------------------

def _permute_rope_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """transformers' Llama rotates the two halves of each head; llama.cpp rotates neighbouring pairs."""
    return (weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _unpermute_rope_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    return (weight.reshape(n_head, weight.shape[0] // n_head // 2, 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def to_gguf_layout(arch: str, name: str, data: np.ndarray, config) -> np.ndarray:
    if arch == "LLAMA":
        if name.endswith("q_proj.weight"):
            return _permute_rope_rows(data, config.num_attention_heads)
        if name.endswith("k_proj.weight"):
            return _permute_rope_rows(data, config.num_key_value_heads)
    if arch == "GEMMA3" and name.endswith("norm.weight"):
        return data + 1.0  # Gemma3RMSNorm computes x * (1 + w)
    return data


def _encode_tensor(data: np.ndarray, kind: str, keep_f32: bool = False):
    """(array to write, its GGML type): vectors stay f32 (llama.cpp's rule), and what `keep_f32` says (a mixture of
    experts' routers); q8_0 needs rows of whole 32-blocks."""
    import gguf

    if data.ndim <= 1 or kind == "f32" or keep_f32:
        return data.astype(np.float32), gguf.GGMLQuantizationType.F32
    if kind == "q8_0" and data.shape[-1] % 32:
        kind = "f16"  # as llama.cpp's converter does for a row that does not fill its blocks
    qtype = _tensor_type(kind)
    if kind == "f16":
        return data.astype(np.float16), qtype
    return gguf.quants.quantize(data.astype(np.float32), qtype), qtype


def _tensor_names(arch: str, config):
    import gguf
    return gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch), config.num_hidden_layers)


def _layer_name(kind: str, bid: int) -> str:
    return f"blk.{bid}.{kind}.weight"


def written_tensors(arch: str, model) -> Iterator[tuple[str, str, np.ndarray]]:
    """(transformers name, GGUF name, f32 array in the GGUF layout) of every tensor the file holds: a mixture of
    experts' fused gate_up_proj gives two (gguf_experts.expert_tensors)."""
    config = _text_config(model)
    names = _tensor_names(arch, config)
    # llama.cpp's qwen2moe requires output.weight even where the head is tied to the embeddings.
    tied = bool(getattr(config, "tie_word_embeddings", False)) and arch != "QWEN2MOE"
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and tied:
            continue  # llama.cpp reuses token_embd when output.weight is absent
        experts = expert_tensors(hf_name, tensor, _layer_name)
        if experts is not None:
            yield from ((hf_name, gguf_name, data) for gguf_name, data in experts)
            continue
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise UserError(f"export_format: gguf: no GGUF name for tensor {hf_name} of this {config.model_type} model")
        data = to_gguf_layout(arch, hf_name, tensor.detach().to("cpu", torch.float32).numpy(), config)
        yield hf_name, gguf_name, to_gguf_vector(gguf_name, data)


def add_tensors(writer, arch: str, model, kind: str, progress: bool = True) -> int:
    import gguf
    from tqdm.auto import tqdm

    count = 0
    for _, gguf_name, data in tqdm(written_tensors(arch, model), desc=f"GGUF {kind}", unit="tensor",
                                   disable=not progress, dynamic_ncols=True):
        array, qtype = _encode_tensor(data, kind, keep_f32=keeps_f32(gguf_name))
        writer.add_tensor(gguf_name, array, raw_dtype=qtype if qtype not in (gguf.GGMLQuantizationType.F32,
                                                                            gguf.GGMLQuantizationType.F16) else None)
        count += 1
    return count


# ---------------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------------

def _pre_tokenizer_name(spec: dict) -> str:
    """llama.cpp's name for how a byte-level BPE splits text before merging (its `tokenizer.ggml.pre`)."""
    pre = spec.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    split = next((p for p in parts if p.get("type") == "Split"), None)
    if split is None and any(p.get("type") == "ByteLevel" and p.get("use_regex", True) for p in parts):
        return "gpt-2"  # llama.cpp's name for GPT-2's split pattern
    regex = (split or {}).get("pattern", {}).get("Regex")
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    except ImportError:  # older transformers: the two we train most
        from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX
        GGUF_PRE_TOKENIZER_SPLITS = {"qwen2": PRETOKENIZE_REGEX}
    for name, pattern in GGUF_PRE_TOKENIZER_SPLITS.items():
        if regex == pattern:
            return name
    raise UserError("export_format: gguf: this tokenizer splits text with a pattern llama.cpp has no name for; the "
                    "GGUF would tokenise differently. Convert the exported folder with llama.cpp's "
                    "convert_hf_to_gguf.py instead")


def _special_ids(tokenizer) -> set[int]:
    return {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}


def _looks_special(token: str) -> bool:
    # llama.cpp's converter treats these as control tokens even where a tokenizer does not mark them special.
    return (token in ("<pad>", "<mask>") or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<unused") and token.endswith(">")))


def add_tokenizer(writer, arch: str, tokenizer, vocab_size: int, chat_template: str | None,
                  stop_ids: Sequence[int]) -> None:
    import gguf

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    model = spec.get("model", {})
    if model.get("type") != "BPE":
        raise UserError(f"export_format: gguf: tokenizer model {model.get('type')!r} is not written here (BPE only)")
    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    added = tokenizer.added_tokens_decoder
    special = _special_ids(tokenizer)
    byte_level = not model.get("byte_fallback")
    tokens, types, scores = [], [], []
    for i in range(vocab_size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            scores.append(-1000.0)
            continue
        if i in added:
            kind = gguf.TokenType.CONTROL if i in special or _looks_special(token) else gguf.TokenType.USER_DEFINED
            if kind == gguf.TokenType.USER_DEFINED and not byte_level:
                token = token.replace("\u2581", " ")  # llama.cpp matches user-defined tokens on raw text
            score = -1000.0
        elif not byte_level and token.startswith("<0x") and token.endswith(">") and len(token) == 6:
            kind, score = gguf.TokenType.BYTE, 0.0
        elif i == tokenizer.unk_token_id:
            kind, score = gguf.TokenType.UNKNOWN, -1000.0
        elif not byte_level and arch == "GEMMA3" and len(token) > 1 and set(token) == {"\u2581"}:
            # Gemma's runs of spaces are user-defined tokens spelled with real spaces (as Google's file has them).
            token, kind, score = " " * len(token), gguf.TokenType.USER_DEFINED, -1000.0
        else:
            # Sentencepiece merges the pair whose result scores highest: a token's rank in the vocabulary is its
            # merge order (transformers rebuilds Gemma's merges from that order too).
            kind, score = gguf.TokenType.NORMAL, -float(i)
        tokens.append(token)
        types.append(kind)
        scores.append(score)

    if byte_level:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(_pre_tokenizer_name(spec))
        merges = model.get("merges") or []
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    else:
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_add_space_prefix(_adds_space_prefix(spec))
    for setter, token_id in ((writer.add_bos_token_id, tokenizer.bos_token_id),
                             (writer.add_eos_token_id, tokenizer.eos_token_id),
                             (writer.add_unk_token_id, tokenizer.unk_token_id),
                             (writer.add_pad_token_id, tokenizer.pad_token_id)):
        if token_id is not None:
            setter(token_id)
    eot = [i for i in stop_ids if i != tokenizer.eos_token_id]
    if eot:
        writer.add_eot_token_id(eot[0])
    ids = tokenizer("a")["input_ids"]
    writer.add_add_bos_token(bool(ids) and ids[0] == tokenizer.bos_token_id)
    writer.add_add_eos_token(False)
    if chat_template:
        writer.add_chat_template(chat_template)


def _adds_space_prefix(spec: dict) -> bool:
    normalizer = json.dumps(spec.get("normalizer") or {})
    pre = spec.get("pre_tokenizer") or {}
    return '"Prepend"' in normalizer or (pre.get("type") == "Metaspace" and pre.get("prepend_scheme") != "never")


# ---------------------------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------------------------

def check_gguf(model) -> str:
    """The GGUF architecture `model` is written as; a UserError, before anything is written, for one this writer
    does not write or a mixture of experts llama.cpp would compute otherwise (gguf_experts.check_writable)."""
    if is_vision_model(model):   # its language model alone would be written, the image path lost without a word
        raise UserError("export_format: gguf: a vision-language model: llama.cpp keeps its vision tower and projector "
                        "in a separate mmproj file, which steadytune does not write; export the Hugging Face folder "
                        "and convert it with llama.cpp's convert_hf_to_gguf.py (with --mmproj for the vision part)")
    arch = gguf_architecture(model)
    config = _text_config(model)
    if is_moe_config(config):
        check_writable(model, arch, config)
    return arch


def write_gguf(model, tokenizer, path: Path, kind: str, chat_template: str | None, stop_ids: Sequence[int],
               name: str, progress: bool = True) -> Path:
    """Write `model` (a plain transformers model, any dtype) as one GGUF file of tensor type `kind`, atomically."""
    import gguf

    if kind not in GGUF_TYPES:
        raise UserError(f"export_gguf_type: {kind!r} is not one of {', '.join(GGUF_TYPES)}")
    if kind in LLAMA_CPP_TYPES:
        f16 = path.with_name(path.name + ".f16")
        try:
            write_gguf(model, tokenizer, f16, "f16", chat_template, stop_ids, name, progress)
            return quantize_with_llama_cpp(f16, path, kind)
        finally:
            f16.unlink(missing_ok=True)
    arch = check_gguf(model)
    config = _text_config(model)
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), gguf.MODEL_ARCH_NAMES[getattr(gguf.MODEL_ARCH, arch)])
    try:
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(name)
        writer.add_file_type(_file_type(kind))
        if kind == "q8_0":
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        add_hyperparameters(writer, arch, config)
        add_tokenizer(writer, arch, tokenizer, config.vocab_size, chat_template, stop_ids)
        add_tensors(writer, arch, model, kind, progress)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=False)
    finally:
        writer.close()
    partial.replace(path)
    return path


def quantize_with_llama_cpp(source: Path, path: Path, kind: str) -> Path:
    """llama.cpp's quantiser (`llama_model_quantize`, what `llama-quantize` runs), called in-process."""
    try:
        import llama_cpp
    except ImportError:
        raise UserError(f"export_gguf_type: {kind} needs llama.cpp's quantiser: pip install llama-cpp-python (it "
                        "builds llama.cpp); the gguf package quantises only f16, bf16 and q8_0") from None
    import ctypes
    import os

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_CPP_TYPES[kind]
    params.nthread = os.cpu_count() or 1
    partial = path.with_name(path.name + ".partial")
    code = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), ctypes.byref(params))
    if code != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise UserError(f"export_gguf_type: {kind}: llama.cpp's quantiser failed (code {code}) on {source}")
    partial.replace(path)
    return path


# ---------------------------------------------------------------------------------------------------------
# Round trip
# ---------------------------------------------------------------------------------------------------------

@dataclass
class GGUFCheck:
    kind: str
    max_abs_logit_error: float
    relative_logit_error: float       # max |Δ logit| / max |reference logit|
    top1_agreement: float             # share of positions whose most likely next token is the same
    greedy_same: int                  # prompts whose greedy answer is the same token for token
    prompts: int
    tokenizer_same: bool
    seconds: float
    tolerance: float
    notes: list[str] = field(default_factory=list)
    reader: str = "transformers"      # what read the weights back (see verify_gguf)

    @property
    def ok(self) -> bool:
        return self.tokenizer_same and self.relative_logit_error <= self.tolerance

    def describe(self) -> str:
        return (f"GGUF {self.kind} loaded back with {self.reader}: logits max |Δ| {self.max_abs_logit_error:.2e} "
                f"({self.relative_logit_error:.2e} of the largest logit; tolerance {self.tolerance:.0e}), next-token "
                f"agreement {self.top1_agreement:.1%}, greedy answers identical on {self.greedy_same}/{self.prompts} "
                f"prompts, tokenizer {'identical' if self.tokenizer_same else 'DIFFERENT'} ({self.seconds:.1f} s)")


# Mixtures of experts whose GGUF transformers' loader reads (its Qwen2MoeTensorProcessor joins ffn_gate_exps and
# ffn_up_exps back into gate_up_proj). It has no reader for experts under the llama architecture (Mixtral).
TRANSFORMERS_READS_MOE = ("QWEN2MOE", "QWEN3MOE")


def read_back(path: Path, model, arch: str):
    """A copy of `model` holding the weights of the GGUF file at `path`, read with the gguf package's reader
    (dequantised) and put back into transformers' layout: for the mixtures of experts transformers cannot load
    from a GGUF. Every tensor the writer meant to write must be in the file."""
    import copy
    from collections import defaultdict

    import gguf

    reader = gguf.GGUFReader(str(path))
    stored = {t.name: np.asarray(gguf.dequantize(t.data, t.tensor_type), dtype=np.float32) for t in reader.tensors}
    config = _text_config(model)
    pieces: dict[str, list[np.ndarray]] = defaultdict(list)
    for hf_name, gguf_name, _ in written_tensors(arch, model):
        if gguf_name not in stored:
            raise UserError(f"{path}: tensor {gguf_name} ({hf_name}) is missing from the GGUF just written")
        pieces[hf_name].append(stored[gguf_name])
    loaded = copy.deepcopy(model).float().eval()
    with torch.no_grad():
        for hf_name, tensor in loaded.state_dict().items():
            parts = pieces.get(hf_name)
            if not parts:
                continue   # the tied head: the embeddings
            array = np.concatenate(parts, axis=-2) if len(parts) > 1 else parts[0]   # gate rows, then up rows
            if arch == "LLAMA" and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = config.num_attention_heads if "q_proj" in hf_name else config.num_key_value_heads
                array = _unpermute_rope_rows(array, heads)
            tensor.copy_(torch.tensor(array).reshape(tensor.shape))
    return loaded


def verify_gguf(path: Path, model, tokenizer, prompts: Sequence[Sequence[int]], texts: Sequence[str],
                kind: str, max_new_tokens: int = 8) -> GGUFCheck:
    """Load `path` back with transformers and compare it with `model` (the weights it was written from). A mixture
    of experts transformers reads no GGUF of (Mixtral: llama with experts) has its weights read back with the gguf
    package's reader instead (`read_back`), the tokenizer still by transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    folder, name = str(path.parent), path.name
    config = _text_config(model)
    arch = gguf_architecture(model)
    reader = "transformers"
    try:
        loaded_tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        if is_moe_config(config) and arch not in TRANSFORMERS_READS_MOE:
            loaded, reader = read_back(path, model, arch), "the gguf reader"
        else:
            # transformers' GGUF reader knows no expert widths (moe_intermediate_size ...): a mixture of experts is
            # read back into the written model's own config, its tensors through transformers' GGUF name map.
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                          config=model.config if is_moe_config(config) else None
                                                          ).eval()
    except UserError:
        raise
    except Exception as e:  # the reader fails in many places on a bad file; the message is what matters
        raise UserError(f"{path}: transformers cannot load the GGUF just written ({type(e).__name__}: {e})") from None
    tokenizer_same = all(loaded_tokenizer(t, add_special_tokens=False)["input_ids"]
                         == tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts)
    reference = model.float().eval() if next(model.parameters()).dtype != torch.float32 else model.eval()
    worst, scale, agree, positions, greedy_same = 0.0, 0.0, 0, 0, 0
    stop = reference.generation_config.eos_token_id
    with torch.inference_mode():
        for ids in prompts:
            x = torch.tensor([list(ids)])
            a = reference(x.to(next(reference.parameters()).device)).logits[0].float().cpu()
            b = loaded(x).logits[0].float()
            worst = max(worst, (a - b).abs().max().item())
            scale = max(scale, a.abs().max().item())
            agree += int((a.argmax(-1) == b.argmax(-1)).sum())
            positions += a.shape[0]
            # one stopping rule for both: the reader builds its generation config from the file (one eos id) while
            # the model may stop on several (Qwen3's [<|im_end|>, <|endoftext|>]); a greedy answer that reached one
            # of the others would end early on one side only and read as a different answer
            ga = reference.generate(x.to(next(reference.parameters()).device), max_new_tokens=max_new_tokens,
                                    do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=stop)[0].cpu()
            gb = loaded.generate(x, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=stop)[0]
            greedy_same += int(torch.equal(ga, gb))
    del loaded
    return GGUFCheck(kind, worst, worst / max(scale, 1e-12), agree / max(positions, 1), greedy_same, len(prompts),
                     tokenizer_same, time.perf_counter() - started, TOLERANCE[kind], reader=reader)
