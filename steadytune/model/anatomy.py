"""Where things are in a transformers model, through a peft wrapper: its task (causal LM or sequence score),
output head, decoder body and layers, linear layers, and weights stored under two names (tied).
"""

from __future__ import annotations

import torch
from torch import nn

from steadytune.model.media_features import has_features, only_text, run_multimodal
from steadytune.model.vision import is_vision_config, is_vision_model, takes_pixels

# What a model is loaded as, by task: a causal LM (sft, dpo, kto), or the same body with a one-output linear head
# read at a sequence's last token (the reward model of stage rm; transformers' *ForSequenceClassification, the
# format TRL's reward models and `text-classification` pipelines load).
SEQUENCE_SCORE = "sequence_score"
CAUSAL_LM = "causal_lm"


def auto_model_class(task: str, config=None):
    """transformers' auto class for `task`; a causal LM whose config (a config object or config.json as a dict) has
    a vision tower loads as an image-text-to-text model, whole (LLaMA-Factory loads every such config so): its
    language model trains, and rows with images go through its vision tower (model/vision.py)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForSequenceClassification

    if task == CAUSAL_LM and config is not None and is_vision_config(config):
        return AutoModelForImageTextToText
    return {CAUSAL_LM: AutoModelForCausalLM, SEQUENCE_SCORE: AutoModelForSequenceClassification}[task]


def model_task(model: nn.Module) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return SEQUENCE_SCORE if type(base).__name__.endswith("ForSequenceClassification") else CAUSAL_LM


def _ties_embeddings(model: nn.Module) -> bool:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return bool(getattr(config, "tie_word_embeddings", False))


def output_head_names(model: nn.Module) -> set[str]:
    """Qualified names of the output head (a reward model's score head too) and of any linear whose weight is the
    input embedding (tied)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None and model_task(model) == SEQUENCE_SCORE:
        head = getattr(model, "score", None)
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    embedding_weight = getattr(embeddings, "weight", None)
    names = set()
    for name, module in model.named_modules():
        if module is head:
            names.add(name)
        elif isinstance(module, nn.Linear) and embedding_weight is not None and module.weight is embedding_weight:
            names.add(name)
    return names


def linear_module_names(model: nn.Module) -> list[str]:
    """Qualified names of every nn.Linear except the output head."""
    excluded = output_head_names(model)
    return [name for name, module in model.named_modules() if isinstance(module, nn.Linear) and name not in excluded]


def tied_aliases(model: nn.Module) -> dict[str, str]:
    """{later state-dict key: first key} of weights stored once under two names (Qwen's and Gemma's output head is
    the input embedding); save_pretrained writes only the first."""
    from peft import PeftModel

    base = model.get_base_model() if isinstance(model, PeftModel) else model
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for key, tensor in base.state_dict(keep_vars=True).items():
        if id(tensor) in first:
            aliases[key] = first[id(tensor)]
        else:
            first[id(tensor)] = key
    return aliases


def _tied_names(model: nn.Module) -> set[str]:
    """State-dict keys that save_pretrained leaves out because they share storage with another weight."""
    aliases = tied_aliases(model)
    return set(aliases) | set(aliases.values())


def base_model_of(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def text_config(model_or_config):
    """The language model's config: a vision-language model nests it (config.text_config), a text model is its own
    (sizes such as hidden_size and num_hidden_layers live there)."""
    config = model_or_config
    if isinstance(model_or_config, torch.nn.Module):
        config = base_model_of(model_or_config).config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def decoder_layers(model: torch.nn.Module):
    """The decoder layers of the language model (`model.model.layers`; a vision-language model's sit in its
    language model: `model.model.language_model.layers`), or None."""
    layers = getattr(getattr(base_model_of(model), "model", None), "layers", None)
    if layers is None:
        try:
            layers = getattr(decoder_body(model), "layers", None)
        except AttributeError:
            return None
    return layers


def speed_scope(model: torch.nn.Module) -> torch.nn.Module:
    """Where the speed features (fp8 base, fused SwiGLU, shared-input groups) look for layers: a vision-language
    model's language model only (its vision tower and projector run as loaded), a text model whole."""
    return decoder_body(model) if is_vision_model(model) else model


def run_body(model: torch.nn.Module, inputs: dict, **kwargs):
    """The decoder body's forward (no head) over a batch's model inputs: a vision-language model's rows with pixels
    (or their features, encoded already) go through its vision tower, projector and language model
    (model/media_features.py), rows without through its language model alone; a text model through its decoder."""
    if is_vision_model(model):
        if takes_pixels(inputs) or has_features(inputs):
            return run_multimodal(model, inputs, **kwargs)
        inputs = only_text(inputs)
    return decoder_body(model)(**inputs, **kwargs)


def output_head(model: torch.nn.Module) -> torch.nn.Module:
    """The vocabulary projection of a (possibly peft-wrapped) causal LM."""
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings")
    return head


def decoder_body(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer stack without the head: `model.model` for HF causal LMs, through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder() if hasattr(base, "get_decoder") else base.model


def final_logit_softcap(model: torch.nn.Module) -> float | None:
    return getattr(text_config(model), "final_logit_softcapping", None)


def layer_classes(model) -> list[str]:
    """The decoder layer classes to shard as units: the model's own `_no_split_modules` (what transformers and
    Accelerate use for device maps and FSDP auto-wrap)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return list(getattr(base, "_no_split_modules", None) or [])
