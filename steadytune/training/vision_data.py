"""A vision-language run's data side, as the recipe uses it: the model's processor (read before the weights, so that
a bad image stops the run before minutes of loading), the rows prepared with it (data/multimodal/), and the collators
that make each micro-batch's pixels (padded, or packed with each example's images kept in its row) with Qwen-VL's
3-D rope positions. A text model gets None everywhere and the recipe goes on as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from steadytune.config import RunConfig
from steadytune.data.multimodal.collate import MultimodalCollator, add_media
from steadytune.data.multimodal.encode import media_context, media_inputs
from steadytune.data.multimodal.packing import MultimodalPackedCollator
from steadytune.data.multimodal.processor import load_media_processor
from steadytune.data.multimodal.rope import mrope_for_config
from steadytune.data.answers import answers_as_labels
from steadytune.model.load import resolve_model_path, source_config
from steadytune.model.vision import is_vision_config


# Stages whose rows may carry images: sft, dpo (DPO / ORPO / SimPO pairs: data/multimodal/pairs.py) and grpo (prompts
# with images: data/prompts.py, stages/vision_rollout.py).
STAGES_WITH_MEDIA = ("sft", "dpo", "grpo")


def load_vision_processor(cfg: RunConfig, tokenizer: Any) -> Any | None:
    """The model's processor (transformers', or its parts without torchvision) when model_name_or_path is a
    vision-language model; None for a text model."""
    path = resolve_model_path(cfg.model)
    config = source_config(path, {"trust_remote_code": cfg.model.trust_remote_code})
    if config is None or not is_vision_config(config):
        return None
    return load_media_processor(path, tokenizer)


def prepare_with_media(prepare: Callable, cfg: RunConfig, tokenizer: Any, processor: Any):
    """The stage's prepare_data with the processor (sft reads rows with images through it); the media context kept on
    the prepared data for the collators and evaluation (data.media)."""
    data = prepare(cfg, tokenizer, processor=processor)
    data.media = media_context(cfg.data, data.template.name, processor)
    # with label_names set, answers that are label words are evaluated by label scoring (data/answers.py)
    answers_as_labels(data, cfg.data.label_names, tokenizer)
    return data


@dataclass(frozen=True)
class MediaAdder:
    """(padded batch, its sequences) -> the batch with their pixels, token types and Qwen-VL positions; `ctx` is the
    run's MediaContext (grpo's roll-out makes its prompts' pixels through it too)."""
    ctx: Any
    rope: Any = None

    def __call__(self, batch: dict, sequences: list[dict]) -> dict:
        return add_media(batch, sequences, self.ctx, self.rope)


def pair_media(data, model) -> MediaAdder | None:
    """What a preference stage's or grpo's collator adds per forward (stages/batches.py SequenceCollator.with_media,
    stages/grpo.py PromptCollator.with_media); None for text."""
    ctx = getattr(data, "media", None)
    if ctx is None:
        return None
    return MediaAdder(ctx, mrope_for_config(model.config) if model is not None else None)


def vision_collator(cfg: RunConfig, data, tokenizer, packing_attention: str | None, model,
                    stage_collator: Callable | None = None) -> Callable | None:
    """The micro-batches' collator of a run with media: padded rows with their pixels, or (packing) several examples
    per row each with its own images; a stage's own collator (dpo's pairs) given the media; the stage's collator
    (None: the trainer's own) for a text run."""
    ctx = getattr(data, "media", None)
    if ctx is None:
        return stage_collator
    if stage_collator is not None:
        return stage_collator.with_media(pair_media(data, model))
    rope = mrope_for_config(model.config) if model is not None else None
    if packing_attention is not None:
        return MultimodalPackedCollator(ctx, tokenizer.pad_token_id, row_len=cfg.data.cutoff_len,
                                        varlen=packing_attention == "varlen", rope=rope)
    return MultimodalCollator(ctx, tokenizer.pad_token_id, rope=rope)


def eval_collator(data, tokenizer, model) -> Callable | None:
    """The eval loss's padded batches with pixels (None for a text run)."""
    ctx = getattr(data, "media", None)
    if ctx is None:
        return None
    return MultimodalCollator(ctx, tokenizer.pad_token_id, rope=mrope_for_config(model.config))


def pixels_of(data) -> Callable[[dict], dict] | None:
    """example -> its pixel inputs, for label scoring and generation over prepared examples (None for a text run)."""
    ctx = getattr(data, "media", None)
    if ctx is None:
        return None

    def pixels(example: dict) -> dict:
        inputs, _ = media_inputs(example, ctx)   # its references were resolved when it was prepared
        inputs.pop("num_crops", None)   # the crops are among the pixel values already
        return {k: v for k, v in inputs.items() if hasattr(v, "shape")}

    return pixels
