"""The kernel catalogue on a real GPU: every configuration compiled for this GPU (as the CPU build does, but for the
device's own arch), loaded by the driver, and its registers and spills as the driver reports them held against what
kernel_builds.json recorded from the compiled code without a GPU (issue 64: the resource table is read from the code;
this says whether the driver agrees). Then a few kernels launched and held to the torch arithmetic they replace.

    python benchmarks/kernels_on_device.py [--output kernels_on_device.json]

Exit 1 when a configuration the GPU's arch runs does not build or load, or the driver's register count differs from
the record's by more than 8 (AMD: VGPRs; NVIDIA: registers a thread), or a kernel's values differ from torch's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from steadytune.model import kernel_builds as kb  # noqa: E402
from steadytune.model.kernel_catalogue import KERNELS, device_arch, family  # noqa: E402


def driver_view(arch: str) -> list[dict]:
    """Each catalogue configuration of the record's target for this arch, compiled for this GPU and loaded."""
    import importlib

    import triton
    from triton.compiler import ASTSource

    target = kb.record_target(arch) or arch
    recorded = {b.key: b for b in kb.load_record()}
    gpu = triton.runtime.driver.active.get_current_target()
    rows = []
    for kernel in KERNELS:
        fn = getattr(importlib.import_module(kernel.module), kernel.function)
        for config in kernel.configs(target):
            row = {"kernel": kernel.name, "config": config.label, "arch": arch, "runs": config.runs}
            attrs = {(i,): [["tt.divisibility", 16]] for i, (_, kind) in enumerate(kernel.args) if kind.startswith("*")}
            try:
                compiled = triton.compile(ASTSource(fn, kernel.signature(config), constexprs=dict(config.constexprs),
                                                   attrs=attrs), target=gpu, options={"num_warps": config.num_warps})
                compiled._init_handles()   # loads the code object: the driver's registers and spills
                row.update(built=True, registers=compiled.n_regs, spills=compiled.n_spills,
                           lds=int(compiled.metadata.shared))
            except Exception as e:   # a configuration that does not build or load here is the finding
                row.update(built=False, error=kb._first_line(e))
            kept = recorded.get((kernel.name, config.label, target))
            if kept is not None:
                row["record"] = {"arch": target, "built": kept.built, "registers": kept.registers,
                                 "spills": kept.spills, "lds": kept.lds}
            rows.append(row)
    return rows


def disagreements(rows: list[dict]) -> list[str]:
    bad = []
    for row in rows:
        kept = row.get("record")
        name = f"{row['kernel']} [{row['config']}]"
        if row["runs"] and not row["built"]:
            bad.append(f"{name}: {row['error']}")
        elif kept and row["built"] and kept["registers"] is not None and abs(row["registers"] - kept["registers"]) > 8:
            bad.append(f"{name}: the driver says {row['registers']} registers, the record {kept['registers']}")
    return bad


def numerics() -> dict:
    """The decode attention, LoRA bank and grouped matmul kernels against torch on this GPU (bf16)."""
    from steadytune.model.decode.attention import sdpa_decode_attention
    from steadytune.model.decode.kernels.attention_triton import split_decode_attention
    from steadytune.model.decode.kernels.bgmv_triton import bgmv
    from steadytune.model.moe.grouped import loop_grouped_mm
    from steadytune.model.moe.grouped_triton import triton_grouped_mm

    torch.manual_seed(0)
    out = {}
    for dim in (64, 128, 256):
        keys = torch.randn(5, 2, 700, dim, device="cuda", dtype=torch.bfloat16)
        values, q = torch.randn_like(keys), torch.randn(4, 8, dim, device="cuda", dtype=torch.bfloat16)
        lengths = torch.tensor([5, 699, 300, 0], device="cuda")
        want = sdpa_decode_attention(q.float(), keys.float(), values.float(), lengths, 700, None, dim ** -0.5)
        got = split_decode_attention(q, keys, values, lengths, 1024, None, dim ** -0.5).float()
        out[f"attention_d{dim}_max_error"] = float((got - want).abs().max())
    for rank in (8, 64, 128):
        x, y = torch.randn(6, 896, device="cuda", dtype=torch.bfloat16), torch.randn(6, 4864, device="cuda",
                                                                                     dtype=torch.bfloat16)
        a = torch.randn(3, rank, 896, device="cuda", dtype=torch.bfloat16) * 0.05
        b = torch.randn(3, 4864, rank, device="cuda", dtype=torch.bfloat16) * 0.05
        scale, index = torch.tensor([0.0, 2.0, 0.5], device="cuda"), torch.tensor([0, 1, 2, 1, 2, 0], device="cuda")
        want = y.float() + scale[index][:, None] * torch.einsum("rk,rnk->rn", torch.einsum(
            "rk,rjk->rj", x.float(), a[index].float()), b[index].float())
        got = bgmv(x, y.clone(), a, b, scale, index).float()
        out[f"bgmv_r{rank}_relative_error"] = float((got - want).norm() / want.norm())
    x = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 2048, 768, device="cuda", dtype=torch.bfloat16) * 0.02
    ends = torch.tensor([40, 100, 100, 260, 300, 420, 480, 512], device="cuda", dtype=torch.int32)
    want, got = loop_grouped_mm(x.float(), w.float(), ends), triton_grouped_mm(x, w, ends).float()
    out["grouped_mm_relative_error"] = float((got - want).norm() / want.norm())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="kernels_on_device.json")
    args = parser.parse_args()
    arch = device_arch(torch.device("cuda"))
    rows = driver_view(arch)
    bad = disagreements(rows)
    values = numerics()
    limits = {"attention": 0.05, "bgmv": 0.02, "grouped": 0.02}
    bad += [f"{name} = {value:.3g}" for name, value in values.items()
            if value > next(limit for key, limit in limits.items() if name.startswith(key))]
    result = {"gpu": torch.cuda.get_device_name(), "arch": arch, "family": family(arch),
              "record_target": kb.record_target(arch), "torch": torch.__version__,
              "hip": getattr(torch.version, "hip", None), "configurations": rows, "numerics": values,
              "disagreements": bad}
    Path(args.output).write_text(json.dumps(result, indent=1), encoding="utf-8")
    spilled = [f"{r['kernel']} [{r['config']}]: {r['spills']}" for r in rows if r.get("spills")]
    print(f"{arch}: {len(rows)} configurations, {sum(r['built'] for r in rows)} built and loaded; spills by the "
          f"driver: {spilled or 'none'}")
    print("numerics:", json.dumps(values))
    print("disagreements:", bad or "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
