"""The fused LoRA SwiGLU (model/fused_swiglu.py) on a GPU: its kernels against the torch reference, and their time
for a few block sizes beside the compiled unfused step between the same matmuls (LoRA products full width, silu *
up, the fp8 quantisation; forward, and forward + backward), at the Qwen2.5-1.5B and 7B MLP widths. The bases' fp8
matmuls, which both run alike, are left out; bench times the whole.

    python benchmarks/fused_swiglu_speed.py [--tokens 16384] [--rank 16] [--output fused_swiglu.json]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from fp8_scaling_speed import timed   # this folder's timing loop (CUDA events, after warm-up calls)
from steadytune.model import fused_swiglu as fs
from steadytune.model.fp8_matmul import quantize_rows
from steadytune.model.kernel_catalogue import device_arch, swiglu_blocks

WIDTHS = {"qwen2.5-1.5b": 8960, "qwen2.5-7b": 18944}
# (rows, columns, warps) per program, tried for each kernel
BLOCKS = [(32, 128, 4), (64, 64, 4), (64, 64, 8), (64, 128, 4), (64, 128, 8), (64, 256, 8), (128, 64, 4), (128, 128, 8),
          (32, 256, 4), (64, 32, 8)]


def inputs(tokens: int, width: int, rank: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda *shape, std=1.0: (torch.randn(*shape, generator=g, device="cuda") * std).bfloat16()  # noqa: E731
    return [make(tokens, width), make(tokens, width), make(tokens, rank), make(tokens, rank),
            make(width, rank, std=0.05), make(width, rank, std=0.05), make(rank, width, std=0.01)]


@torch.compile
def unfused(gate, up, low_g, low_u, b_g, b_u, a_d):
    """What the compiled layer does without the fused step (the LoRA products are cuBLAS matmuls)."""
    h = F.silu(gate + low_g @ b_g.t()) * (up + low_u @ b_u.t())
    quantized, scale = quantize_rows(h)
    return h, quantized, scale, h @ a_d.t()


def check(args_) -> dict:
    """The kernels against the reference on the same bf16 inputs."""
    got = fs._tiles_forward(*args_)
    want = fs.reference_forward(*args_)
    dh, d_low_d = torch.randn_like(args_[0]), torch.randn_like(args_[2])
    got_b = fs._tiles_backward(dh, d_low_d, *args_)
    got_b = got_b[:2] + got_b[4:]   # without the amax of d gate and d up
    want_b = fs.reference_backward(dh, d_low_d, *args_)
    rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))  # noqa: E731
    return {"h_rel_err": rel(got[0], want[0]), "scale_rel_err": rel(got[2], want[2]),
            "fp8_equal_share": float(got[1].float().eq(want[1].float()).float().mean()),
            "fp8_dequantised_rel_err": rel(got[1].float() * got[2], want[0]), "low_d_rel_err": rel(got[3], want[3]),
            "backward_rel_errs": [rel(a, b) for a, b in zip(got_b, want_b)]}


def forward_backward(fn, args_, dh, d_low_d):
    leaves = [a.detach().requires_grad_() for a in args_]

    def run():
        out = fn(*leaves)
        torch.autograd.grad((out[0], out[3]), leaves, (dh, d_low_d))
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--output")
    args = parser.parse_args()
    results = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "tokens": args.tokens,
               "rank": args.rank, "shapes": {}}
    for shape, width in WIDTHS.items():
        args_ = inputs(args.tokens, width, args.rank)
        dh, d_low_d = torch.randn_like(args_[0]), torch.randn_like(args_[2])
        row = {"check": check(args_),
               "unfused_forward_ms": timed(lambda: unfused(*args_)),
               "unfused_forward_backward_ms": timed(forward_backward(unfused, args_, dh, d_low_d)), "blocks": {}}
        catalogue = swiglu_blocks(device_arch(args_[0].device))   # what runs when nothing is set
        chosen = catalogue["forward"], catalogue["backward"]
        for blocks in BLOCKS:
            fs.FORWARD_BLOCKS = blocks
            forward = timed(lambda: fs._tiles_forward(*args_))
            fs.BACKWARD_BLOCKS = blocks
            backward = timed(lambda: fs._tiles_backward(dh, d_low_d, *args_))
            row["blocks"]["x".join(map(str, blocks))] = {"forward_ms": forward, "backward_kernel_ms": backward}
            fs.FORWARD_BLOCKS = fs.BACKWARD_BLOCKS = None
        row["chosen"] = {"forward": chosen[0], "backward": chosen[1],
                         "forward_ms": timed(lambda: fs._tiles_forward(*args_)),
                         "backward_kernel_ms": timed(lambda: fs._tiles_backward(dh, d_low_d, *args_))}
        results["shapes"][shape] = row
        print(shape, json.dumps(row, indent=1), flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
