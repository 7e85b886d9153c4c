"""The speed plan on a vision-language model: what of it applies to the language model, what the vision side keeps,
and why, one line per piece (recorded as decisions, printed at start).

- torch.compile compiles the language model's decoder layers (model/kernels.py: decoder_layers finds them inside the
  VLM); the vision tower runs eager: each image has its own number of patches (Qwen's dynamic resolution), so a
  compiled encoder would recompile for every new size.
- CUDA graphs are off: a graph replays fixed shapes without the host, while the image encoder sees a different number
  of patches in every batch and Qwen's reads the image grids on the host (its attention's sequence lengths).
- static shapes are off: the multimodal collator pads each batch to its own longest row (its pixels differ anyway).
- fp8_base, the fused SwiGLU and the shared-input groups look for LoRA layers in the language model only
  (model/anatomy.speed_scope): an unfrozen vision tower's LoRA layers stay as peft made them.
- Images are encoded once per micro-batch, apart from the text side, without autograd while the vision tower and the
  projector are frozen (model/vision.encode_media).
"""

from __future__ import annotations

from steadytune.model.anatomy import decoder_layers
from steadytune.model.vision import is_vision_model, vision_frozen

GRAPHS_OFF = ("a vision-language model's image encoder sees a different number of patches in every batch (and reads "
              "the image sizes on the host), which a CUDA graph cannot replay")
STATIC_OFF = "a vision-language model's batches are padded per batch by the multimodal collator"


def vision_graph_blockers(model) -> dict[str, str]:
    """CUDA graphs' blocker for a VLM ({} for a text model)."""
    return {"vision": GRAPHS_OFF} if is_vision_model(model) else {}


def vision_static_status(model) -> tuple[bool, str] | None:
    """(False, why) for a VLM: no static shapes; None for a text model (the plan's own rules apply)."""
    return (False, STATIC_OFF) if is_vision_model(model) else None


def decide_vision_speed(cfg, model) -> None:
    """The vision side's line among the start-up decisions (nothing for a text model)."""
    if not is_vision_model(model):
        return
    layers = decoder_layers(model)
    frozen = vision_frozen(model)
    cfg.decide("vision_speed", "language model only",
               f"torch_compile, fp8_base, fused_swiglu and shared_input_projections apply to the language model's "
               f"{len(layers) if layers is not None else 0} decoder layers; the vision tower and projector run eager "
               "as loaded (each image has its own number of patches: a compiled encoder would recompile per size); "
               "images are encoded once per micro-batch" + (" without autograd (vision tower and projector frozen)"
                                                            if frozen else ""))
