"""steadytune: LoRA fine-tuning of decoder LLMs on AMD ROCm, NVIDIA CUDA and CPU."""

import logging

__version__ = "0.1.0"

# bitsandbytes (the qlora extra; peft imports it whenever it is installed) warns at import, on CPUs with AVX512-BF16,
# that it could not fetch an optional 4-bit kernel from the Hugging Face hub through the `kernels` package. Its own
# CPU kernels run without it, so the line would open every command's output for nothing.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
