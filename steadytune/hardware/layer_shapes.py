"""The attention and MLP shape of each decoder layer, read from a model config.

Most configs hold one head size for every layer. Gemma 4's does not: its full-attention layers have heads twice the
size of its sliding-window ones. transformers 5.2x keeps a view per layer (`config.per_layer_config`) and raises
`AmbiguousGlobalPerLayerAttributeError` (a RuntimeError, which `getattr(config, "head_dim", None)` does not catch) when
such an attribute is read from the config as a whole; earlier versions hold the full layers' size in
`global_head_dim`. Memory and parameter estimates read the shape here, so they hold for both.
"""

from __future__ import annotations

from dataclasses import dataclass

FULL_ATTENTION = "full_attention"


@dataclass(frozen=True)
class LayerShape:
    heads: int
    head_dim: int
    kv_heads: int
    intermediate: int       # the dense MLP's width; 0 for a layer of experts


def _uniform(config, name: str):
    """A config attribute that per-layer configs may refuse to answer globally: None there."""
    if getattr(config, "per_layer_config", None) is not None:
        return None
    return getattr(config, name, None)


def layer_shapes(config) -> list[LayerShape]:
    """One LayerShape per decoder layer; head_dim and the KV heads default as transformers does where left out."""
    layers = config.num_hidden_layers
    views = getattr(config, "per_layer_config", None)
    kinds = list(getattr(config, "layer_types", None) or [])
    shapes = []
    for i in range(layers):
        layer = views[i] if views is not None else config
        heads = getattr(layer, "num_attention_heads", None) or config.num_attention_heads
        head_dim = getattr(layer, "head_dim", None) or config.hidden_size // heads
        kv = getattr(layer, "num_key_value_heads", None) or heads
        if views is None and i < len(kinds) and kinds[i] == FULL_ATTENTION:
            # transformers before the per-layer views: Gemma 4's full layers say their own size apart
            head_dim = getattr(config, "global_head_dim", None) or head_dim
            kv = getattr(config, "num_global_key_value_heads", None) or kv
        # a mixture of experts has no dense width (0 here: hardware/moe_shape.py counts its experts)
        inter = getattr(layer, "intermediate_size", None) or (
            getattr(config, "intermediate_size", None) if views is None else None) or 0
        shapes.append(LayerShape(heads, head_dim, kv, inter))
    return shapes


def largest_head_dim(config) -> int:
    """The largest head size of any layer: what one layer's peak memory is planned for."""
    uniform = _uniform(config, "head_dim")
    if uniform and not getattr(config, "global_head_dim", None):
        return uniform
    return max(s.head_dim for s in layer_shapes(config))
