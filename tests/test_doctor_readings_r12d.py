"""doctor, round 12 (issue 63): readings for batch 11's missed training cases of the precision and out-of-memory
families (helper d). Each paste is written for its reading with another GPU, tool, version or wording than the mined
case that asked for it; the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a bf16 kernel missing from the module built for a Pascal card (another kernel, another program on candle)
    ("mistralrs-server on a GTX 1080 Ti, Ubuntu 22.04\nError: DriverError(CUDA_ERROR_NOT_FOUND, \"named symbol not "
     "found\") when loading affine_bf16", "precision", ["8.0", "--dtype f16"]),
    # the f16 kernels' floor (5.3) on a Maxwell card: f32
    ("candle whisper example on a GTX 970\nError: DriverError(CUDA_ERROR_NOT_FOUND, \"named symbol not found\") when "
     "loading cast_f32_f16", "precision", ["5.3", "f32"]),

    # TransformerEngine's FP8 check on an Ampere data-center card (another GPU, the check's line alone)
    ("import transformer_engine.pytorch as te\nwith te.fp8_autocast(enabled=True):\n    y = layer(x)\nAssertionError: "
     "Device compute capability 8.9 or higher required for FP8 execution.\nGPU: NVIDIA A100-SXM4-40GB",
     "precision", ["fp8_autocast(enabled=False)", "bf16"]),
    # the same on a V100, which has no bf16 either: fp16
    ("te.fp8_autocast on our DGX-1 (Tesla V100-SXM2-32GB) fails:\nAssertionError: Device compute capability 8.9 or "
     "higher required for FP8 execution.", "precision", ["fp16", "fp8_autocast"]),

    # transformers' TF32 refusal alone on a T4 (Alpaca's command, which passes --tf32 True)
    ("torchrun --nproc_per_node=1 train.py --model_name_or_path huggyllama/llama-7b --fp16 True --tf32 True\n"
     "ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7\nTesla T4", "precision",
     ["--tf32 False"]),
    # bf16 and TF32 refused together on a Turing card: both off
    ("deepspeed train.py --bf16 True --tf32 True on 4x RTX 2080 Ti\nValueError: Your setup doesn't support bf16/gpu. "
     "You need torch>=1.10, using Ampere GPU with cuda>=11.0\nValueError: --tf32 requires Ampere or a newer GPU arch, "
     "cuda>=11 and torch>=1.7", "precision", ["fp16=True", "--tf32 False"]),

    # a GTX 16xx card's silent audio in RVC (another card, program and wording)
    ("RVC v2 inference on my laptop's GTX 1650 Ti: the converted wav is silent, no error in the console",
     "precision", ["is_half = False"]),
    # ... GPT-SoVITS's web UI (go-webui) giving NaN audio on a GTX 1660, said in English
    ("GPT-SoVITS one-click package, go-webui.bat, GTX 1660: inference returns an audio tensor full of NaN values",
     "precision", ["is_half=False"]),
    # ... its green pictures in ComfyUI
    ("ComfyUI on a GTX 1660 SUPER, SD 1.5 checkpoint: every output is a green square", "precision",
     ["--force-fp32"]),
    # ... its black pictures in the web UI, said in Chinese
    ("显卡 GTX1660S，stable diffusion webui 生成的图片全黑，没有报错", "precision", ["--precision full --no-half"]),

    # a first-generation Qwen chat model too large for a 12 GB card while loading: its Int4 release
    ("model = AutoModelForCausalLM.from_pretrained(\"Qwen/Qwen-7B-Chat\", device_map=\"auto\", "
     "trust_remote_code=True).eval()\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 130.00 MiB "
     "(GPU 0; 11.76 GiB total capacity; 11.20 GiB already allocated; 0 bytes free; 11.31 GiB reserved in total by "
     "PyTorch)", "out-of-memory", ["Qwen/Qwen-7B-Chat-Int4"]),
    # a later Qwen on a 24 GB card (torch 2.x's message): its AWQ release
    ("vision chat demo with Qwen/Qwen2.5-14B-Instruct on an RTX 4090\ntorch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 23.64 GiB of which 20.00 MiB is free.",
     "out-of-memory", ["Qwen/Qwen2.5-14B-Instruct-AWQ"]),
    # ChatGLM2-6B on an 8 GB card: its own quantize call, or the ready-made int4 model
    ("model = AutoModel.from_pretrained(\"THUDM/chatglm2-6b\", trust_remote_code=True).half().cuda()\nRuntimeError: "
     "CUDA out of memory. Tried to allocate 214.00 MiB (GPU 0; 8.00 GiB total capacity; 7.12 GiB already allocated; "
     "0 bytes free; 7.13 GiB reserved in total by PyTorch)", "out-of-memory",
     ["quantize(4)", "THUDM/chatglm2-6b-int4"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # a kernel missing for no number format: not the bf16 reading
    ("Error: DriverError(CUDA_ERROR_NOT_FOUND, \"named symbol not found\") when loading rope_i", "--dtype f16"),
    # FP8 refused by vLLM: not TransformerEngine's autocast
    ("vllm serve neuralmagic/Meta-Llama-3-8B-Instruct-FP8 on an RTX 3090\nValueError: compute capability 8.9 or "
     "higher is required for fp8 quantization", "fp8_autocast"),
    # bf16 refused with no TF32 in the paste: TF32 is not named
    ("ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0\n"
     "Tesla V100 --bf16 True", "--tf32 False"),
    # a GTX 16xx card with a missing kernel: the arch readings, not half precision
    ("GTX 1660 SUPER, stable diffusion webui --xformers\nRuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "--upcast-sampling"),
    # silent audio on a card with working fp16: not the 16xx reading
    ("GPT-SoVITS on an RTX 3090: the synthesized audio is silent", "is_half=False"),
    # faster-whisper's blank text on a GTX 16xx: CTranslate2's compute types, not is_half
    ("faster-whisper on a GTX 1660 Ti: the transcript is empty and the scores are nan", "is_half"),
    # a bare "1660" that is a step count, beside silent audio on a card with working fp16
    ("RVC: after 1660 steps of training the inference audio is silent (RTX 4090)", "is_half"),
    # the Int4 release already loaded: not the quantized-release reading
    ("model = AutoModelForCausalLM.from_pretrained(\"Qwen/Qwen-7B-Chat-Int4\", device_map=\"auto\")\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 5.80 GiB total capacity)",
     "load its 4-bit release"),
    # fine-tuning the same model: the training readings
    ("LoRA fine-tuning Qwen/Qwen-7B-Chat with finetune.py\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 1.00 GiB (GPU 0; 15.77 GiB total capacity)", "load its 4-bit release"),
    # a small model on a large card: the weights fit, the memory goes elsewhere
    ("Qwen/Qwen-1_8B-Chat with a 32k context\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
     "6.00 GiB (GPU 0; 23.65 GiB total capacity)", "load its 4-bit release"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
