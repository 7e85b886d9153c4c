"""steadytune: LoRA fine-tuning of decoder LLMs on AMD ROCm, NVIDIA CUDA and CPU."""

__version__ = "0.1.0"
