"""Mixtures of experts: where a model's routed experts, shared experts and routers are (anatomy), LoRA that reaches
the routed experts (targets: PEFT's `target_parameters` for the fused 3-D expert weights of transformers 5), the
experts' forward with LoRA as grouped matmuls over tokens sorted by expert (experts_lora; grouped: the grouped matmul
on torch's kernel, our Triton kernel, or a per-expert loop), and the routers' load-balancing loss and routing
statistics (routing); QLoRA's 4-bit routed experts (quantized: the format and its grouped matmul; quantized_load: as
they load, or a shape built straight into 4 bits).

Modules: anatomy, targets, grouped, grouped_triton, experts_lora, routing, quantized, quantized_load.
"""
