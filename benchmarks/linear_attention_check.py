"""GPU check of the gated DeltaNet path (issue 65), for benchmarks/gpu_models2026.sh: flash-linear-attention's varlen
kernels against transformers' PyTorch reference run once per sequence, their speed, which kernels a packed training
step really launches, and whether the decoder layers compile with them. Writes one JSON (--output).

1. numerics  fla's chunk_gated_delta_rule and causal_conv1d over packed sequences (cu_seqlens) against the reference
             per sequence, fp32 inputs: outputs and the gradients of every input (relative error, max over tensors);
2. speed     forward + backward of one layer's delta rule at 16,384 packed tokens in bf16 (Qwen3.5-0.8B's 16 / 16 heads
             and Qwen3.5-35B-A3B's 16 / 32 heads of 128): fla varlen, against the reference per sequence;
3. model     a Qwen3.5-0.8B-shaped model (4 layers) with LoRA, a packed row through the model: logits and LoRA
             gradients against the same examples one at a time (bf16), and the CUDA kernels the packed step launched
             (fla's by name);
4. compile   the same model's decoder layers compiled (model/kernels.compile_layers) and a packed step run: the
             error in one line where Dynamo or Inductor cannot take fla's kernels.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

import torch
import torch.nn.functional as F


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def packed_lengths(total: int, seed: int = 0) -> list[int]:
    """Sequence lengths like an instruction set's (50-800 tokens), summing to `total`."""
    g = torch.Generator().manual_seed(seed)
    lengths, left = [], total
    while left > 0:
        n = min(left, int(torch.randint(50, 800, (1,), generator=g)))
        lengths.append(n)
        left -= n
    return lengths


def inputs(T: int, hk: int, hv: int, d: int, dtype, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    q, k, v = make(1, T, hk, d), make(1, T, hk, d), make(1, T, hv, d)
    decay = (-torch.rand(1, T, hv, generator=g) * 0.5).to(device)        # log-space, <= 0 (fp32, as the layer makes it)
    beta = torch.rand(1, T, hv, generator=g).to(device=device, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v, decay, beta)]


def reference_rule():
    """transformers' own PyTorch chunked delta rule, under the wrappers that would send a GPU call to fla: ours
    (__wrapped__), the `kernels` package's module (the function in its forward's closure) and transformers' hub
    fallback (functools.wraps' __wrapped__)."""
    import types

    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    rule = m.torch_chunk_gated_delta_rule
    while True:
        if isinstance(rule, torch.nn.Module):
            cells = [c.cell_contents for c in (type(rule).forward.__closure__ or ())]
            inner = next((c for c in cells if callable(c) and not isinstance(c, (type, types.ModuleType))), None)
        else:
            inner = getattr(rule, "__wrapped__", None)
        if inner is None:
            return rule
        rule = inner


def per_sequence(rule, tensors, cu):
    q, k, v, g, beta = tensors
    bounds = cu.tolist()
    return torch.cat([rule(q[:, a:b], k[:, a:b], v[:, a:b], g=g[:, a:b], beta=beta[:, a:b],
                           use_qk_l2norm_in_kernel=True)[0] for a, b in zip(bounds[:-1], bounds[1:])], dim=1)


def numerics(device) -> dict:
    from fla.modules.convolution import causal_conv1d
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    out = {}
    lengths = [37, 200, 9, 130, 64, 300]
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), device=device)
    T = sum(lengths)
    for hk, hv in ((2, 2), (2, 4)):
        a = inputs(T, hk, hv, 64, torch.float32, device)
        b = [t.detach().clone().requires_grad_() for t in a]
        fla, _ = chunk_gated_delta_rule(a[0], a[1], a[2], g=a[3], beta=a[4], use_qk_l2norm_in_kernel=True,
                                        cu_seqlens=cu)
        ref = per_sequence(reference_rule(), b, cu)
        w = torch.randn_like(ref)
        (fla * w).sum().backward()
        (ref * w).sum().backward()
        out[f"delta_rule_{hk}k_{hv}v"] = {"output": rel(fla, ref),
                                          "grads": max(rel(x.grad, y.grad) for x, y in zip(a, b))}
    x = torch.randn(1, T, 96, device=device, requires_grad=True)
    weight = torch.randn(96, 4, device=device, requires_grad=True)
    y = causal_conv1d(x, weight, None, activation="silu", cu_seqlens=cu)
    y = y[0] if isinstance(y, tuple) else y
    x2, w2 = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    bounds = cu.tolist()
    ref = torch.cat([F.silu(F.conv1d(x2[:, s:e].transpose(1, 2), w2.unsqueeze(1), padding=3, groups=96)[..., :e - s])
                     for s, e in zip(bounds[:-1], bounds[1:])], dim=-1).transpose(1, 2)
    gw = torch.randn_like(ref)
    (y * gw).sum().backward()
    (ref * gw).sum().backward()
    out["causal_conv1d"] = {"output": rel(y, ref), "grads": max(rel(x.grad, x2.grad), rel(weight.grad, w2.grad))}
    # A static row (steadytune's static shapes): padding pieces, then empty sequences at the end of cu_seqlens. Does
    # fla give the real sequences what it gives them without, finite everywhere? (model/linear_attention.static_status
    # keeps static shapes off for these models until this holds.)
    a = inputs(T + 40, 2, 4, 64, torch.float32, device)
    padded = torch.cat([cu, torch.tensor([T + 40, T + 40, T + 40], device=device)])
    with torch.no_grad():
        plain, _ = chunk_gated_delta_rule(*(t[:, :T] for t in a[:3]), g=a[3][:, :T], beta=a[4][:, :T],
                                          use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
        static, _ = chunk_gated_delta_rule(*a[:3], g=a[3], beta=a[4], use_qk_l2norm_in_kernel=True,
                                           cu_seqlens=padded)
        conv_static = causal_conv1d(x.detach()[:, :T], weight.detach(), None, activation="silu",
                                    cu_seqlens=torch.cat([cu, cu[-1:], cu[-1:]]))
    conv_static = conv_static[0] if isinstance(conv_static, tuple) else conv_static
    out["empty_sequences"] = {"finite": bool(torch.isfinite(static).all() and torch.isfinite(conv_static).all()),
                              "delta_rule_max_diff": float((static[:, :T] - plain).abs().max()),
                              "conv_max_diff": float((conv_static - y.detach()).abs().max())}
    return out


def timed(fn, repeat: int = 5) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat * 1000


def speed(device) -> dict:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    out = {}
    lengths = packed_lengths(16384)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), device=device)
    for name, hk, hv in (("qwen3.5-0.8b", 16, 16), ("qwen3.5-35b-a3b", 16, 32)):
        t = inputs(16384, hk, hv, 128, torch.bfloat16, device)
        w = torch.randn(1, 16384, hv, 128, device=device, dtype=torch.bfloat16)

        def fla_step():
            o, _ = chunk_gated_delta_rule(t[0], t[1], t[2], g=t[3], beta=t[4], use_qk_l2norm_in_kernel=True,
                                          cu_seqlens=cu)
            (o * w).sum().backward()

        def reference_step():
            (per_sequence(reference_rule(), t, cu) * w).sum().backward()

        fla_ms, ref_ms = timed(fla_step), timed(reference_step, repeat=2)
        out[name] = {"tokens": 16384, "sequences": len(lengths), "fla_ms": round(fla_ms, 2),
                     "reference_ms": round(ref_ms, 1), "speedup": round(ref_ms / fla_ms, 1)}
    return out


def packed_model_step(model, rows, collate, device):
    batch = collate(rows)
    keys = ("input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
    inputs_ = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items() if k in keys}
    from steadytune.model.attention import packed_mask_placeholder
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(**inputs_, attention_mask=packed_mask_placeholder(inputs_["input_ids"]), use_cache=False).logits
    return logits[0]


def model_check(device, compile_: bool) -> dict:
    from steadytune.bench.workload import with_lora
    from steadytune.data.packing import PackedCollator
    from steadytune.hardware.attention_kernels import varlen_kernel_status, varlen_kernels
    from steadytune.model.attention import register_varlen_attention
    from steadytune.model.kernels import compile_layers
    from steadytune.model.linear_attention import keep_packed_sequences_apart
    from steadytune.model.shapes import build_shape

    name, why = varlen_kernel_status()
    impl = register_varlen_attention(varlen_kernels()[name]) if name else "sdpa"
    model = with_lora(build_shape("qwen3.5-0.8b", dtype=torch.bfloat16, device=device, attn_implementation=impl,
                                  num_layers=4))
    keep_packed_sequences_apart(model)
    g = torch.Generator().manual_seed(1)
    lengths = [300, 700, 90, 1000]
    rows = [{"input_ids": torch.randint(5, 240000, (n,), generator=g).tolist()} for n in lengths]
    collate = PackedCollator(pad_token_id=0, row_len=4096, attention="varlen")
    out = {"varlen_kernel": name, "varlen_why": why}
    if compile_:
        ok, why = compile_layers(model)
        out["compile"] = why
    try:
        model.zero_grad()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            packed = packed_model_step(model, rows, collate, device)
            packed.float().logsumexp(-1).sum().backward()
            torch.cuda.synchronize()
        kernels = sorted({e.key for e in prof.key_averages()})
        out["fla_kernels"] = [k for k in kernels if any(s in k.lower() for s in ("delta", "conv1d", "l2norm",
                                                                              "chunk", "fla"))]
        grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        alone = []
        for row in rows:
            ids = torch.tensor([row["input_ids"]], device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(input_ids=ids, use_cache=False).logits[0]
            logits.float().logsumexp(-1).sum().backward()
            alone.append(logits.detach())
        out["packed_vs_alone"] = {"logits": rel(packed.detach(), torch.cat(alone)),
                                  "lora_grads": max(rel(grads[n], p.grad) for n, p in model.named_parameters()
                                                    if p.grad is not None and n in grads)}
    except Exception as e:   # compile or a kernel refusing: the one line is the finding
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        out["traceback"] = traceback.format_exc()[-2000:]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    device = torch.device("cuda")
    import fla
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "fla": fla.__version__}
    for name, step in (("numerics", lambda: numerics(device)), ("speed", lambda: speed(device)),
                       ("model", lambda: model_check(device, compile_=False)),
                       ("model_compiled", lambda: model_check(device, compile_=True))):
        started = time.perf_counter()
        try:
            report[name] = step()
        except Exception as e:
            report[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                            "traceback": traceback.format_exc()[-2000:]}
        report[name + "_seconds"] = round(time.perf_counter() - started, 1)
        print(name, json.dumps(report[name], indent=1)[:3000], flush=True)
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
