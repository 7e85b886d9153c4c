"""Batched decoding with a KV cache: the core that `serve` answers requests with and `stage: grpo` generates its
completions with, on the model being trained (LoRA applied, not merged).

Modules: batch + slotcache (the running batch: each row in a slot of a preallocated KV cache, its decode state on the
device), graphs (the decode step recorded as CUDA graphs), adapters (which LoRA adapter a forward uses), prefill (new
rows, left-padded, on a DynamicCache), batch_dynamic + kvcache (the DynamicCache batch, for models the slot cache does
not take), sampling (temperature, top_k, top_p; seeded), transfer (small host lists to the device without a wait),
complete (prompts -> completions in one batch: what a GRPO step generates).
"""
