"""The model side: load a base model and tokenizer (Hugging Face folder, GGUF, built-in alias, hub id), attach
LoRA or open every weight, load a trained adapter or adapter archive, check that saved weights fit a model, find
the parts of a model (head, decoder body, layers), the attention implementations and speed kernels applied to a
loaded model, batched decoding with a KV cache (decode/: what serve answers with and stage grpo generates with),
and tiny random models for tests.

Modules: load, lora, trainable (what trains on a loaded base: an adapter attached or continued, or the weights
opened; LoRA's forward speed-ups), freeze (freeze tuning and LLaMA Pro's trainable set), anatomy, saved_weights,
archive, attention, kernels, fp8_base (fp8_matmul, fp8_4bit), lora_scaling, quantize, shapes, shared_input, tiny,
vision (a vision-language model: its parts, what trains under the freeze_* keys, its forward with images), tiny_vlm;
the packages decode and moe (mixtures of experts: LoRA on the routed experts, grouped matmuls, routing, 4-bit
experts).
"""
