"""The speed plan on a vision-language model: the language model gets the text models' plan (static shapes,
compiled layers, CUDA graphs, the fp8 base, the fused SwiGLU, shared-input groups), the vision tower what makes it
fit in that plan; one line among the start-up decisions (`vision_speed`) says what applied and why.

- The tower's attention: a Qwen-VL tower (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5) runs one variable-length kernel
  call per block instead of one SDPA call per image and window (model/vision_attention.py), where such a kernel
  runs here and agrees with SDPA (hardware/attention_kernels.varlen_kernel_status, non-causal).
- Its layout: rotary positions, image and window boundaries worked out from the grids on the CPU with the batch
  (data/multimodal/vision_layout.py), so the tower reads nothing back from the GPU.
- Static shapes: a packed micro-batch's text padded as text packing pads it, its images to one size (a Qwen-VL
  tower's patches by padding images, a fixed-size tower's by blank images: data/multimodal/packing.py); the padding
  changes no real image's features and no token reads the padding's (tests/test_vlm_static.py).
- CUDA graphs: with those, the whole micro-batch (the frozen tower's forward without autograd, the features put in
  place, the language model's forward and backward) replays from one graph (training/graphs.py).
What rules a piece out is said: a tower or projector that trains (its backward has not been tried in a graph), rows
with videos (their frames are not padded), a Qwen-VL tower without its layout (transformers older than 5.17, or no
varlen kernel here: it derives the layout on the GPU), micro-batches padded rather than packed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from steadytune.data.multimodal.packing import MultimodalPackedCollator
from steadytune.data.multimodal.vision_layout import LAYOUT_PREFIX, VisionGeometry, layouts_supported, vision_layout
from steadytune.hardware.attention_kernels import varlen_kernel_status, varlen_kernels
from steadytune.model.anatomy import decoder_layers
from steadytune.model.vision import is_vision_model, vision_frozen
from steadytune.model.vision_attention import cuts_by_cu_seqlens, use_vision_varlen, vision_tower


# Micro-batches a vision-language run makes ahead of the one the GPU works on (training/batches.Prefetched).
PREFETCH = 2


@dataclass
class VisionPlan:
    """What the vision side lets the plan do: static shapes (or why not), what rules CUDA graphs out, and what the
    tower got, for the start-up line."""
    static_ok: tuple[bool, str] = (True, "")
    graph_blockers: dict = field(default_factory=dict)
    tower: list[str] = field(default_factory=list)


def geometry_of(model) -> VisionGeometry:
    """A Qwen-VL tower's layout facts, read from the tower (Qwen3-VL's resampling mode is an attribute of the
    tower, not of its config)."""
    tower = vision_tower(model)
    return VisionGeometry(merge_size=int(tower.spatial_merge_size), patch_size=int(tower.patch_size),
                          window_size=getattr(tower, "window_size", None),
                          position_grid=getattr(tower, "num_grid_per_side", None),
                          interpolation_mode=getattr(tower, "interpolation_mode", "bilinear"),
                          align_corners=bool(getattr(tower, "interpolation_align_corners", True)))


def layout_mismatch(model, geometry: VisionGeometry) -> str | None:
    """Why the tower cannot take a layout worked out with the batch (None: it can): one blank image of a few windows
    through the tower with the layout and without it must give the same features. Checked at start, as the tower's
    family may derive something more from the grids than the layout holds."""
    import torch

    tower = vision_tower(model)
    side = 2 * geometry.merge_size * max(1, (geometry.window_size or 0) // geometry.patch_size // geometry.merge_size)
    grids = [[1, side, side]]
    weight = next(tower.parameters())
    try:
        width = tower.patch_embed.proj.weight[0].numel()   # channels x frames x patch x patch
        pixels = torch.zeros(side * side, width, dtype=weight.dtype, device=weight.device)
        layout = {k[len(LAYOUT_PREFIX):]: v.to(weight.device) if isinstance(v, torch.Tensor) else v
                  for k, v in vision_layout(geometry, grids).items()}
        with torch.no_grad():
            own = tower(pixels, torch.tensor(grids, device=weight.device)).pooler_output
            given = tower(pixels, None, **layout).pooler_output
    except Exception as e:   # a tower built otherwise, or reading the grids for something more: no layout for it
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    if not torch.equal(own, given):
        return f"the tower's features differ with it (max difference {float((own - given).abs().max()):.3g})"
    return None


def plan_vision(model, batches, backend: str) -> VisionPlan | None:
    """The vision side of the plan, applied where it is on (the tower's attention, the collator's layout); None for a
    text model."""
    if not is_vision_model(model):
        return None
    plan = VisionPlan()
    # the pixels are made with each micro-batch (decoded and processed on the CPU): a thread makes them ahead
    batches.prefetch, batches.pin = PREFETCH, backend == "cuda"
    collate = batches.collate
    if not vision_frozen(model):
        plan.graph_blockers["vision"] = ("the vision tower or projector trains: its backward has not been tried "
                                         "inside a CUDA graph")
    if cuts_by_cu_seqlens(model):
        kernel, why = varlen_kernel_status(causal=False) if backend == "cuda" else (None, f"{backend}: no varlen "
                                                                                          "kernel")
        if kernel is None:
            plan.tower.append(f"attention as transformers runs it (one SDPA call per image and window: {why})")
        else:
            use_vision_varlen(model, varlen_kernels()[kernel])
            plan.tower.append(f"attention as one {kernel} call per block")
            if isinstance(collate, MultimodalPackedCollator) and layouts_supported():
                geometry = geometry_of(model)
                wrong = layout_mismatch(model, geometry)
                if wrong is None:
                    batches.collate = collate = collate.with_layout(geometry)
                    plan.tower.append("its layout worked out with the batch on the CPU")
                else:
                    plan.tower.append(f"its layout derived on the GPU, as the tower does it ({wrong})")
    if not isinstance(collate, MultimodalPackedCollator):
        plan.static_ok = (False, "a vision-language model's micro-batches are padded here, not packed (packing: false, "
                                 "or a stage that pads its pairs), so they change shape every step")
        return plan
    blocker = collate.static_media_blocker(batches.data.train)
    if blocker is not None:
        plan.static_ok = (False, f"a vision-language model's images cannot be padded to one size per micro-batch: "
                                 f"{blocker}")
    return plan


def decide_vision_speed(cfg, model, plan: VisionPlan | None, static_shape=None) -> None:
    """The vision side's line among the start-up decisions (nothing for a text model)."""
    if plan is None:
        return
    layers = decoder_layers(model)
    frozen = vision_frozen(model)
    graphs = cfg.decisions.get("cuda_graphs", {}).get("value")
    tower = "; ".join(plan.tower) or "as loaded"
    made = f"; micro-batches made {PREFETCH} ahead in a thread (images decoded and processed meanwhile)"
    padded = (f"; every micro-batch padded to {static_shape.describe()}" if static_shape is not None else "")
    cfg.decide("vision_speed", "language model's plan" + (", tower in the graph" if graphs else ""),
               f"torch_compile, fp8_base, fused_swiglu and shared_input_projections apply to the language model's "
               f"{len(layers) if layers is not None else 0} decoder layers; the vision tower and projector run "
               f"eager, {tower}; images are encoded once per micro-batch"
               + (" without autograd (vision tower and projector frozen)" if frozen else "") + made + padded
               + ("; the tower's forward replays inside the micro-batch's CUDA graph" if graphs else ""))
