"""A mixture of experts in a GGUF file, as llama.cpp reads one (for `gguf_file.write_gguf`).

transformers 5 keeps each MoE layer's routed experts as two fused 3-D parameters: `gate_up_proj` [experts,
2 x expert width, hidden] (the gate's rows, then the up projection's) and `down_proj` [experts, hidden, expert width].
llama.cpp keeps three stacked tensors per layer, `blk.N.ffn_gate_exps` / `ffn_up_exps` / `ffn_down_exps` (ggml shape
{hidden, width, experts} for gate and up, {width, hidden, experts} for down: the same arrays, since a GGUF lists a
numpy array's dimensions in reverse), the router as `ffn_gate_inp`, and a shared expert as `ffn_*_shexp` with its
sigmoid gate `ffn_gate_inp_shexp` (a vector). This is what llama.cpp's convert_hf_to_gguf.py writes for
Qwen2MoeForCausalLM / Qwen3MoeForCausalLM (gate_up_proj split on its rows), and for Mixtral under the `llama`
architecture with experts.

What llama.cpp computes is fixed per architecture, so a model whose config asks for something else is refused rather
than written into a file that answers differently: qwen3moe always renormalises the top-k routing weights, qwen2moe
never does; every layer must be a MoE layer (no `mlp_only_layers`, `decoder_sparse_step` 1). gpt-oss and
DeepSeek-V2 are refused (their llama.cpp forms, MXFP4 experts with attention sinks and yarn, MLA with its split
kv_b, are not written here): the merged export converts with llama.cpp's own convert_hf_to_gguf.py.
"""

from __future__ import annotations

import numpy as np
import torch

from steadytune.errors import UserError

# model_type -> gguf.MODEL_ARCH name, for the mixtures of experts written here.
MOE_ARCHITECTURES = {"qwen3_moe": "QWEN3MOE", "qwen2_moe": "QWEN2MOE", "mixtral": "LLAMA"}
# Mixtures of experts llama.cpp runs whose form is not written here: the one-line reason.
NOT_WRITTEN = {
    "gpt_oss": "llama.cpp's gpt-oss (arch gpt-oss: MXFP4 experts, attention sinks, yarn RoPE)",
    "deepseek_v2": "llama.cpp's DeepSeek-V2 (arch deepseek2: multi-head latent attention with kv_b split in two)",
    "deepseek_v3": "llama.cpp's DeepSeek-V3 (arch deepseek2: multi-head latent attention, grouped routing)",
}
# Whether llama.cpp renormalises the chosen experts' routing weights (build_moe_ffn's norm_w), per architecture.
RENORMALISES = {"QWEN3MOE": True, "QWEN2MOE": False, "LLAMA": True}
_UP, _DOWN = "gate_up_proj", "down_proj"


def refusal(model_type: str) -> str:
    """The one-line refusal for a mixture of experts this writer does not write, pointing to the merged export."""
    what = NOT_WRITTEN.get(model_type, f"a {model_type} mixture of experts")
    return (f"export_format: gguf: {what} is not written by steadytune's GGUF writer (it writes "
            f"{', '.join(sorted(MOE_ARCHITECTURES))}); export the merged Hugging Face folder (without --gguf) and "
            "convert it with llama.cpp's convert_hf_to_gguf.py, or serve it with vLLM or transformers")


def is_moe_config(config) -> bool:
    return any(isinstance(getattr(config, key, None), int) and getattr(config, key) > 0
               for key in ("num_experts", "num_local_experts", "n_routed_experts"))


_NOT_IN_LLAMA_CPP = ("llama.cpp cannot run this model as it was trained, whoever converts it: use the merged Hugging "
                     "Face folder (export without --gguf) with transformers or vLLM, or the run itself with steadytune "
                     "chat / serve")


def check_writable(model, arch: str, config) -> None:
    """Refuse, in one line, a mixture of experts whose llama.cpp form would compute something else."""
    model_type = config.model_type
    if getattr(config, "mlp_only_layers", None) or getattr(config, "decoder_sparse_step", 1) not in (1, None):
        raise UserError(f"export_format: gguf: this {model_type} has dense layers between its MoE layers "
                        "(mlp_only_layers / decoder_sparse_step), which llama.cpp's "
                        f"{arch.lower()} does not run; {_NOT_IN_LLAMA_CPP}")
    asked = getattr(config, "norm_topk_prob", None)   # Mixtral has no such key: it always renormalises
    renormalise = RENORMALISES[arch] if asked is None else bool(asked)
    if renormalise != RENORMALISES[arch]:
        raise UserError(f"export_format: gguf: this {model_type} has norm_topk_prob: {str(renormalise).lower()}, but "
                        f"llama.cpp's {arch.lower()} {'always' if RENORMALISES[arch] else 'never'} renormalises the "
                        f"chosen experts' weights: the GGUF would route differently; {_NOT_IN_LLAMA_CPP}")
    if arch == "LLAMA" and getattr(config, "sliding_window", None):
        raise UserError(f"export_format: gguf: this {model_type} has a sliding window ({config.sliding_window}), which "
                        "llama.cpp's llama architecture does not apply; " + _NOT_IN_LLAMA_CPP)
    for name, module in model.named_modules():
        if name.endswith(".experts") and hasattr(module, _UP):
            if getattr(module, "is_transposed", False) or not getattr(module, "has_gate", True) or getattr(
                    module, "has_bias", False) or not getattr(module, "is_concatenated", True):
                raise UserError(f"export_format: gguf: {name} stores its experts in a layout this writer does not "
                                f"convert; {refusal(model_type).split('; ', 1)[1]}")


def add_expert_hyperparameters(writer, arch: str, config) -> None:
    """expert_count, expert_used_count and the widths llama.cpp reads (convert_hf_to_gguf's set_gguf_parameters)."""
    experts = next(getattr(config, k) for k in ("num_experts", "num_local_experts", "n_routed_experts")
                   if isinstance(getattr(config, k, None), int))
    writer.add_expert_count(experts)
    writer.add_expert_used_count(config.num_experts_per_tok)
    if arch in ("QWEN3MOE", "QWEN2MOE"):
        writer.add_expert_feed_forward_length(config.moe_intermediate_size)
    if arch == "QWEN2MOE":
        writer.add_expert_shared_feed_forward_length(config.shared_expert_intermediate_size)


def expert_tensors(hf_name: str, data: torch.Tensor, layer_name) -> list[tuple[str, np.ndarray]] | None:
    """The GGUF tensors of one of a layer's fused expert parameters, or None if `hf_name` is none: `layer_name(kind,
    bid)` gives `blk.{bid}.{kind}`. gate_up_proj is split on its rows into the gate half and the up half."""
    parts = hf_name.split(".")
    if len(parts) < 3 or parts[-2] != "experts" or parts[-1] not in (_UP, _DOWN) or "layers" not in parts:
        return None
    bid = int(parts[parts.index("layers") + 1])
    array = data.detach().to("cpu", torch.float32).numpy()
    if parts[-1] == _DOWN:
        return [(layer_name("ffn_down_exps", bid), array)]
    width = array.shape[-2] // 2
    return [(layer_name("ffn_gate_exps", bid), np.ascontiguousarray(array[..., :width, :])),
            (layer_name("ffn_up_exps", bid), np.ascontiguousarray(array[..., width:, :]))]


def to_gguf_vector(gguf_name: str, data: np.ndarray) -> np.ndarray:
    """Qwen2-MoE's shared-expert gate is a [1, hidden] linear; llama.cpp reads a vector {hidden}."""
    return data.reshape(-1) if gguf_name.endswith("ffn_gate_inp_shexp.weight") else data


def keeps_f32(gguf_name: str) -> bool:
    """The routers stay f32 (as llama.cpp's converter keeps ffn_gate_inp): a rounded router logit can pick another
    expert, which changes the whole token's output, not a rounding's worth of it."""
    return ".ffn_gate_inp" in gguf_name
