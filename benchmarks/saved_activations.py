"""What one decoder layer keeps for its backward, per token: eager, compiled, and compiled with recompute_pointwise.

One layer of a named shape (its real widths, one layer deep, a small vocabulary), bf16, LoRA r16 on every linear
layer with fp32 adapters as train sets them, LoRA inputs left in bf16 (train's skip_lora_input_cast). Autograd's
saved-tensor hook sees every tensor the layer's forward keeps; the weights are not counted (they are held anyway).
The count does not depend on the device, so a CPU answers it, slowly at the 7B widths (about two minutes a mode);
a GPU's peak memory adds the allocator's slack around it. It also prints how many matmuls and attention calls the
compiled backward runs, which recompute_pointwise must leave as they are.

    python benchmarks/saved_activations.py --shape qwen2.5-7b --tokens 64
"""

from __future__ import annotations

import argparse
import logging
import re

import torch
from peft import LoraConfig, get_peft_model

from steadytune.model.kernels import compile_layers, decoder_layers, skip_lora_input_cast
from steadytune.model.shapes import SHAPES, build_shape


def one_layer_model(shape: str):
    spec = {**SHAPES[shape], "num_hidden_layers": 1, "vocab_size": 512}
    SHAPES["_one_layer"] = spec  # build_shape builds by name
    try:
        model = build_shape("_one_layer", dtype=torch.bfloat16)
    finally:
        del SHAPES["_one_layer"]
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0))
    for param in model.parameters():
        if param.requires_grad:
            param.data = param.data.float()
    skip_lora_input_cast(model)
    return model


class BackwardOps(logging.Handler):
    """Counts matmuls and attention calls in the backward graphs AOTAutograd logs (TORCH_LOGS aot_graphs)."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def emit(self, record):
        text = record.getMessage()
        if "Backward graph" not in text:
            return
        for op in re.findall(r"torch\.ops\.aten\.(mm|addmm|bmm|_scaled_dot_product_\w+?)\.default", text):
            kind = "attention" if op.startswith("_scaled_dot_product") and not op.endswith("backward") else op
            self.counts[kind] = self.counts.get(kind, 0) + 1


def kept_per_token(shape: str, mode: str, tokens: int) -> tuple[float, dict]:
    torch._dynamo.reset()
    model = one_layer_model(shape)
    counter = BackwardOps()
    if mode != "eager":
        torch._logging.set_logs(aot_graphs=True)
        for name in [n for n in logging.root.manager.loggerDict if n.startswith("torch")]:
            torch_logger = logging.getLogger(name)  # torch's own handlers would print every graph: counts are wanted
            for handler in torch_logger.handlers[:]:
                torch_logger.removeHandler(handler)
        logging.getLogger("torch._functorch._aot_autograd").addHandler(counter)
        compile_layers(model, static_shapes=True, recompute_pointwise=(mode == "recompute_pointwise"))
    layer = decoder_layers(model)[0]
    hidden = SHAPES[shape]["hidden_size"]
    x = torch.randn(1, tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    positions = torch.arange(tokens)[None]
    rotary = model.get_base_model().model.rotary_emb(x, positions)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(x, position_embeddings=rotary, position_ids=positions)
        return out[0] if isinstance(out, tuple) else out

    forward().float().sum().backward()  # the compiled modes compile here
    held = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    kept: dict[int, int] = {}

    def pack(tensor):
        where = tensor.untyped_storage().data_ptr()
        if where not in held:
            kept[where] = max(kept.get(where, 0), tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    logging.getLogger("torch._functorch._aot_autograd").removeHandler(counter)
    torch._logging.set_logs()  # restores torch's own handler
    return sum(kept.values()) / tokens / 2, counter.counts  # bf16 values (2 bytes) a token


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="qwen2.5-7b", choices=[s for s in SHAPES if s != "tiny"] + ["tiny"])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--modes", default="eager,compiled,recompute_pointwise")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        values, ops = kept_per_token(args.shape, mode, args.tokens)
        backward = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())) if ops else "(eager: not logged)"
        print(f"{args.shape} one layer, {mode:20s}: {values:10,.0f} bf16 values kept a token; backward: {backward}",
              flush=True)


if __name__ == "__main__":
    main()
