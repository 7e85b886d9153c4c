"""The decode step's Triton kernels (steadytune/model/decode/kernels/) against the torch arithmetic they replace, in
Triton's interpreter on the CPU (a child process: TRITON_INTERPRET is read when Triton is imported), and our forward
with every kernel on (attention, LoRA banks, fused norms/rotary/activation, sampling) decoding token for token as
transformers' `generate` for mixed-adapter batches. Skipped where Triton is not installed (CPU torch wheels do not
bring it); on a GPU, benchmarks/profile_decode.py checks the compiled kernels the same way."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Triton 3.6's interpreter turns a loop bound read from memory into a Python int with int() of a 1-element array,
# which numpy >= 2.4 refuses; the compiled kernels are not affected. The child patches that one conversion.
INTERPRETER_SHIM = """
import triton.runtime.interpreter as interpreter
_original = interpreter._patch_lang_tensor
def _patched(tensor, scope):
    _original(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
interpreter._patch_lang_tensor = _patched
"""

KERNELS = INTERPRETER_SHIM + """
import random
import torch
from transformers.activations import ACT2FN
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from steadytune.model.decode.attention import sdpa_decode_attention
from steadytune.model.decode.kernels import fused_triton
from steadytune.model.decode.kernels.attention_triton import split_decode_attention
from steadytune.model.decode.kernels.sample_triton import sample_rows_triton
from steadytune.model.decode.lora_bank import LoraBank
from steadytune.model.decode.norms import norm_of
from steadytune.model.decode.ops import TorchOps
from steadytune.model.decode.sampling import GREEDY, SAMPLE, SamplingParams, sample_rows, settings_of

torch.manual_seed(0)
ref = TorchOps()

# attention: GQA groups of 2 and 4, a sliding window, rows of very different lengths (one of a single column), fp32
# exactly, bf16 within its rounding; `columns` (the recorded bucket) larger than any row
for rows, heads, kv, dim, cap, window, dtype, tol in [(3, 4, 2, 8, 200, None, torch.float32, 1e-5),
                                                      (2, 4, 1, 16, 130, 16, torch.float32, 1e-5),
                                                      (4, 6, 3, 32, 300, None, torch.bfloat16, 3e-2)]:
    keys = torch.randn(rows + 1, kv, cap, dim).to(dtype)
    values = torch.randn_like(keys)
    q = torch.randn(rows, heads, dim).to(dtype)
    lengths = torch.tensor([5, cap - 1, 70, 0][:rows])
    want = sdpa_decode_attention(q.float(), keys.float(), values.float(), lengths, int(lengths.max()) + 1, window, 0.3)
    got = split_decode_attention(q, keys, values, lengths, 512, window, 0.3)
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)

# LoRA banks: three adapters of two ranks, rows of each and of none; the base output of index-0 rows untouched
parts = {"one": (torch.randn(4, 300), torch.randn(200, 4), 2.0), "two": (torch.randn(8, 300), torch.randn(200, 8), 0.5)}
bank = LoraBank(parts, ["one", "two", "three"])
x, y = torch.randn(5, 300), torch.randn(5, 200)
index = torch.tensor([0, 1, 2, 1, 3])
want = bank.apply(x, y.clone(), index, "torch")
got = bank.apply(x, y.clone(), index, "triton")
torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-3)
assert torch.equal(got[0], y[0]) and torch.equal(got[4], y[4])

# a fused bank (q|k|v stacked: runner.py) equals each member's own bank: members of other widths and ranks, one member
# without LoRA, an adapter on some members only
from steadytune.model.decode.lora_bank import FusedLoraBank
members = [{"one": (torch.randn(4, 300), torch.randn(200, 4), 2.0), "two": (torch.randn(8, 300), torch.randn(200, 8), 0.5)},
           None, {"two": (torch.randn(8, 300), torch.randn(60, 8), 4.0)}]
widths = [200, 100, 60]
fused = FusedLoraBank(members, ["one", "two", "three"], widths)
y = torch.randn(5, sum(widths))
got = fused.apply(x, y.clone(), index, "triton")
for part, (member, start) in zip(got.split(widths, dim=1), zip(members, (0, 200, 300))):
    base = y[:, start: start + part.shape[1]]
    want = LoraBank(member, ["one", "two", "three"]).apply(x, base.clone(), index, "torch") if member else base
    torch.testing.assert_close(part, want, rtol=1e-5, atol=1e-3)

# fused small ops: llama- and gemma-style norms, with and without Gemma's norm of the addend; q/k norms + rotary +
# cache write; SiLU and tanh-GELU times up. fp32 to rounding; bf16 within an ulp or two (the interpreter rounds bf16
# by truncation)
for dtype, tol in ((torch.float32, 2e-6), (torch.bfloat16, 0.13)):
    for cls in (LlamaRMSNorm, Gemma3RMSNorm):
        n1, n2 = cls(48, eps=1e-6), cls(48, eps=1e-5)
        with torch.no_grad():
            n1.weight.normal_(), n2.weight.normal_()
        a, b = norm_of(n1.to(dtype)), norm_of(n2.to(dtype))
        h, r = torch.randn(3, 48).to(dtype), torch.randn(3, 48).to(dtype)
        for pre in (None, b):
            for w, g in zip(ref.add_norm(h.clone(), r, pre, a), fused_triton.add_norm(h.clone(), r, pre, a)):
                torch.testing.assert_close(g.float(), w.float(), rtol=tol, atol=tol)
        torch.testing.assert_close(fused_triton.add_norm(h.clone(), None, None, a)[1].float(), ref.norm(h, a).float(),
                                   rtol=tol, atol=tol)
    for qk in (None, LlamaRMSNorm, Gemma3RMSNorm):
        rows, heads, kv, dim, cap = 3, 4, 2, 16, 40
        q, k = torch.randn(rows, heads, dim).to(dtype), torch.randn(rows, kv, dim).to(dtype)
        v = torch.randn_like(k)
        cos, sin = torch.randn(cap, dim).to(dtype), torch.randn(cap, dim).to(dtype)
        lengths = torch.tensor([3, 17, 39])
        qn = kn = None
        if qk is not None:
            m1, m2 = qk(dim).to(dtype), qk(dim).to(dtype)
            with torch.no_grad():
                m1.weight.normal_(), m2.weight.normal_()
            qn, kn = norm_of(m1), norm_of(m2)
        outs = []
        for fused in (False, True):
            keys = torch.zeros(rows + 1, kv, cap, dim, dtype=dtype)
            values = torch.zeros_like(keys)
            targets = (torch.arange(rows * kv).view(rows, kv) * cap + lengths[:, None]).view(-1)
            if fused:
                qo = fused_triton.rotary_store(q.clone(), k.clone(), v.clone(), qn, kn, cos, sin, lengths, keys, values)
            else:
                qo = ref.rotary_store(q.clone(), k.clone(), v.clone(), qn, kn, cos, sin, lengths, keys, values, targets)
            outs.append((qo.float(), keys.float(), values.float()))
        for w, g in zip(*outs):
            torch.testing.assert_close(g, w, rtol=tol, atol=2 * tol)
    g, u = torch.randn(3, 70).to(dtype), torch.randn(3, 70).to(dtype)
    for name, act in (("silu", "silu"), ("gelu_tanh", "gelu_pytorch_tanh")):
        torch.testing.assert_close(fused_triton.act_mul(g, u, name).float(),
                                   ref.act_mul(g, u, ACT2FN[act], name).float(), rtol=tol, atol=tol)

# sampling: the same tokens as the torch sampler, bit for bit (the same keyed noise), for greedy and sampled rows
# with temperatures, min_p and repetition penalties, in fp32 and bf16; broken rows (nan, all -inf) flagged alike
rows, vocab = 6, 3000
logits = torch.randn(rows, vocab) * 3
logits[2, 5], logits[3], logits[4, 7] = float("nan"), float("-inf"), 50.0
params = [SamplingParams(1, temperature=0.0), SamplingParams(1, temperature=0.7), SamplingParams(1, temperature=1.0),
          SamplingParams(1), SamplingParams(1, temperature=1.3, min_p=0.1, repetition_penalty=1.5),
          SamplingParams(1, temperature=0.9, repetition_penalty=0.7)]
seen = torch.rand(rows, vocab) < 0.3
for dtype in (torch.float32, torch.bfloat16):
    for position in range(3):
        s = settings_of(params, [random.getrandbits(63) for _ in params], [position] * rows, logits.device)
        for kind, table in ((GREEDY, None), (SAMPLE, None), (SAMPLE, seen), (GREEDY, seen)):
            want = sample_rows(logits.to(dtype), s, kind, table)
            got = sample_rows_triton(logits.to(dtype), s, kind, table)
            assert torch.equal(want[1], got[1])
            assert torch.equal(want[0][~want[1]], got[0][~want[1]])
print("kernels agree")
"""

END_TO_END = INTERPRETER_SHIM + """
import sys
import torch
from peft import LoraConfig, get_peft_model
sys.path.insert(0, "tests")
from test_serve_engine import drive, generate_alone, greedy, random_prompts
from steadytune.model.decode.batch import DecodeBatch
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.runner import make_runner
from steadytune.model.tiny import build_model, build_tokenizer

tokenizer = build_tokenizer()
for kind in ("qwen2", "gemma3"):
    torch.manual_seed(3)
    model = get_peft_model(build_model(kind, tokenizer, seed=1),
                           LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False),
                           adapter_name="one")
    model.add_adapter("two", LoraConfig(r=8, lora_alpha=16, target_modules=["v_proj", "up_proj"],
                                        init_lora_weights=False))
    model.eval()
    prompts = random_prompts(4, seed=5)
    adapters, budgets = ["one", "two", None, "one"], [8, 6, 7, 5]
    expected = [generate_alone(model, p, n, a or "base") for p, n, a in zip(prompts, budgets, adapters)]
    batch = DecodeBatch(model, 0, runner=make_runner(model, "triton"))
    assert batch.runner.kernels == "triton" and batch.runner.ops.attention_impl == "split"
    assert all(layer.qkv is not None and layer.gate_up is not None for layer in batch.runner.layers)
    rows = [Row(p, a, owner=i, params=greedy(n)) for i, (p, a, n) in enumerate(zip(prompts, adapters, budgets))]
    outputs = [[] for _ in prompts]
    drive(batch, outputs, {0: rows[:2], 2: rows[2:]})   # two rows join mid-way
    assert outputs == expected, (kind, outputs, expected)
print("triton decode equals generate")
"""

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="Triton is not installed (CPU torch wheels do not bring it)")


def run_interpreted(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=REPO)


@needs_triton
def test_the_decode_kernels_match_the_torch_arithmetic_in_triton_s_interpreter():
    run = run_interpreted(KERNELS)
    assert run.returncode == 0 and "kernels agree" in run.stdout, run.stderr[-3000:]


@needs_triton
def test_the_decode_step_on_triton_kernels_equals_generate_with_mixed_adapters():
    """Our forward with every kernel on, LoRA on all linear layers for one adapter and two for the other (different
    ranks), a base-model row, rows joining mid-way: greedy tokens equal `generate`'s for Qwen2 and Gemma 3 (sliding
    window, q/k norms, sandwich norms, tanh-GELU)."""
    run = run_interpreted(END_TO_END)
    assert run.returncode == 0 and "triton decode equals generate" in run.stdout, run.stderr[-3000:]
