"""The decode engine: batched generation on the model as it is (LoRA applied, never merged), the one path that
`serve` answers with, `stage: grpo` rolls out with, and its tests check token for token against transformers'
`generate`.

How a step runs (a GPU; the CPU runs the same steps with torch ops, eagerly):

    host                                           device (one CUDA graph per shape bucket, replayed)
    batch.add(rows)  prefill (shared by rows of    embedding -> layers (our forward: runner.py) -> head
      one prompt), copy into free slots            -> sampling of every row with its own settings (sampling.py)
    batch.step()     enqueue the graph; no wait    -> each row's token to its board, next input, length, done
    every few steps  copy the boards to pinned     (a stop token, the budget, broken logits end a row: state.py)
      memory behind an event (readback.py)
    batch.poll()     tokens -> text / completions; finished rows leave between steps (batch.keep)

Modules:
- running (what both batches share: rows, decode state, read-backs, the host's side of the loop), batch (the slot
  cache batch: joins, leaves, the recorded step), slotcache (the KV cache of fixed slots), graphs (CUDA graphs per
  bucket, checked against the eager step), batch_dynamic + kvcache (the DynamicCache batch, for models the slot
  cache does not take), prefill (Row; new rows left-padded on a DynamicCache);
- state (per-row tensors on the device and the update after sampling), readback (tokens back to the host without
  a wait per step), sampling (greedy, temperature, top_k, top_p, min_p, repetition penalty; keyed Gumbel noise, so
  an answer depends on its key alone);
- runner (our decode forward for Llama / Qwen2 / Qwen3 / Mistral / Gemma 3 text; other models run their own),
  attention (one token per row over its own length: split-K flash-decoding or SDPA), lora_bank (adapters stacked,
  an adapter index per row: mixed batches in one graph), norms + ops (the small ops, torch or fused kernels),
  kernels/ (the Triton kernels: CUDA and ROCm);
- adapters (which adapter peft's forward uses: prefill, and models on their own forward), complete (prompts ->
  completions: GRPO), transfer (small host lists to the device without a wait).

STEADYTUNE_DECODE_KERNELS=torch|triton|off and STEADYTUNE_DECODE_ATTENTION=split|sdpa choose the kernels (default:
Triton on a GPU that has it); STEADYTUNE_CUDA_GRAPHS=0 turns the recorded step off.
"""
