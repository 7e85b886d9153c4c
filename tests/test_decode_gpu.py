"""The decode engine on a real GPU (`pytest -m gpu`; skipped elsewhere): what the CPU tests cannot see, because the
Triton interpreter accepts code the compiler refuses and no CUDA graph is recorded on a CPU.

- every sampled decode goes through the compiled sampling kernel (it did not compile on 2026-12-06: a module global
  read inside @triton.jit);
- with LoRA adapters the recorded step is kept at every row count (at 32 rows it was switched off, the engine then
  decoding eagerly at 35 ms a step), also with two adapters mixed in one batch, and its tokens equal the eager step's;
- the engine's greedy tokens equal transformers' `generate` with the same adapter, in fp32.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

PROMPT_LENGTHS = (9, 14, 5, 21, 11, 7, 30, 17)


def cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA or ROCm GPU")


def model_with_adapters(shape: str, dtype, adapters: int, layers: int | None = None):
    from peft import LoraConfig, get_peft_model

    from steadytune.model.decode.adapters import match_model_dtype
    from steadytune.model.shapes import build_shape

    model = build_shape(shape, dtype, "cuda", num_layers=layers).eval()
    config = dict(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)   # random B: it computes
    torch.manual_seed(0)
    model = get_peft_model(model, LoraConfig(**config), adapter_name="a")
    for name in "bcd"[: adapters - 1]:
        model.add_adapter(name, LoraConfig(**config))
    match_model_dtype(model)
    return model.eval()


def prompts_of(model, rows: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(3, model.config.vocab_size, (PROMPT_LENGTHS[i % 8],), generator=generator).tolist()
            for i in range(rows)]


def decode(model, rows: int, adapters: list, tokens: int, params=None, graphs: bool = True):
    """(tokens per row, the batch) for `rows` prompts decoded together by our forward with Triton kernels; without
    `graphs`, every step eagerly."""
    from steadytune.eval.scoring import inference
    from steadytune.model.decode.batch import DecodeBatch
    from steadytune.model.decode.prefill import Row
    from steadytune.model.decode.runner import make_runner
    from steadytune.model.decode.sampling import SamplingParams

    params = params or SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    batch = DecodeBatch(model, 0, max_rows=rows, runner=make_runner(model, "triton"))
    if not graphs:
        batch.graphs.backend = None
    outputs = [[] for _ in range(rows)]
    with inference(model):
        batch.add([Row(p, adapters[i % len(adapters)], owner=i, params=params)
                   for i, p in enumerate(prompts_of(model, rows))])
        while batch.rows:
            stepping = batch.needs_step()
            if stepping:
                batch.step()
            for update in batch.poll(wait=not stepping):
                outputs[update.row.owner].extend(update.tokens)
            batch.keep([k for k, r in enumerate(batch.rows) if r.finished is None])
    return outputs, batch


@pytest.mark.parametrize("rows, adapters", [(1, ["a"]), (8, ["a"]), (32, ["a"]), (8, ["a", "b"]), (32, ["a", "b", None])])
def test_recorded_steps_with_lora_stay_on_and_equal_the_eager_steps(rows, adapters):
    cuda_or_skip()
    model = model_with_adapters("qwen2.5-0.5b", torch.bfloat16, 2, layers=8)
    recorded, batch = decode(model, rows, adapters, 24)
    assert batch.graphs.disabled_because is None, batch.graphs.disabled_because
    assert batch.graphs.captured > 0
    eager, _ = decode(model, rows, adapters, 24, graphs=False)
    assert recorded == eager


def test_sampled_decode_compiles_and_is_seeded():
    cuda_or_skip()
    from steadytune.model.decode.sampling import SamplingParams

    model = model_with_adapters("qwen2.5-0.5b", torch.bfloat16, 1, layers=4)
    params = SamplingParams(max_tokens=16, temperature=0.9, min_p=0.05, repetition_penalty=1.1, ignore_eos=True,
                            seed=11)
    first, batch = decode(model, 8, ["a"], 16, params)
    second, _ = decode(model, 8, ["a"], 16, params)
    assert first == second and batch.graphs.disabled_because is None
    assert len({tuple(row) for row in first}) > 1


def test_greedy_equals_generate_with_the_adapter_in_fp32():
    cuda_or_skip()
    model = model_with_adapters("qwen2.5-0.5b", torch.float32, 1, layers=4)
    ours, _ = decode(model, 4, ["a"], 12)
    for prompt, row in zip(prompts_of(model, 4), ours):
        ids = torch.tensor([prompt], device="cuda")
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                 min_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None)
        assert row == out[0, len(prompt):].tolist()
