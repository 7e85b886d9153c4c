"""doctor, round 11 (issue 63): readings of the precision, attention and visibility families (r11g). Each paste is
written for its reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives
keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # torch.autocast refusing bf16 (a T4, another script, another line number): float16 via the dtype
    ("python finetune_gpt2.py on a Tesla T4\n  File \"/usr/lib/python3/site-packages/torch/amp/autocast_mode.py\", "
     "line 241, in __init__\nRuntimeError: Current CUDA Device does not support bfloat16. Please switch dtype to "
     "float16.", "precision", ["dtype=torch.float16", "GradScaler", "--dtype=float16"]),
    # the same said in a user's words, with nanoGPT's own setting named
    ("nanoGPT on my GTX 1080 Ti: the card does not support dtype=torch.bfloat16, what should I change in ptdtype?",
     "precision", ["float16", "python train.py --dtype=float16"]),
    # a diffusers DreamBooth LoRA script launched with accelerate's precision only: the script's own argument
    ("accelerate launch --mixed_precision=fp16 train_dreambooth_lora_sdxl.py --pretrained_model_name_or_path=sdxl "
     "--instance_data_dir=dog\nValueError: Attempting to unscale FP16 gradients.", "precision",
     ["train_dreambooth_lora_sdxl.py --mixed_precision=\"fp16\""]),
    # a GPTQ model answering with exclamation marks (another engine, English)
    ("Llama-3-8B-Instruct-GPTQ 4-bit served with TGI on an A10G answers every prompt with !!!!!!!!!!!!!!!!",
     "precision", ["calibration", "unquantized"]),
    # fp16 AMP overflow said with apex (no fp16 word): bfloat16
    ("Fine-tuning mT5-base with apex O2 on 8x A100: after 300 steps the encoder outputs overflow and become NaN",
     "precision", ["bfloat16"]),
    # a bf16 checkpoint to be run on a GPU without bf16 (another GPU, English)
    ("We trained Qwen2-7B in bf16 on H800s. Our inference box has T4 cards, which do not support bf16 - can the "
     "bf16 model still run there?", "precision", ["torch_dtype=torch.float16", "infer_dtype: float16"]),
    # NaN losses on an RDNA3 card (another card, another trainer), bf16: the attention implementation
    ("RX 7900 XTX (gfx1100), ROCm 6.4, LLaMA-Factory LoRA with bf16: true\n{'loss': nan, 'grad_norm': nan, "
     "'learning_rate': 1e-05, 'epoch': 0.1}", "attention", ["attn_implementation=\"eager\""]),
    # flash-attention's RMS-norm extension not built (another model's warning wording)
    ("Warning: import flash_attn rms_norm fail, please install FlashAttention layer_norm to get higher efficiency\n"
     "RTX 3090, flash-attn 2.5.8, torch 2.3.1", "attention", ["csrc/layer_norm", "pip install ."]),
    # ROCm schedulers' per-process mask not respected by torch (another scheduler, an MI250X)
    ("SLURM on MI250X nodes sets ROCR_VISIBLE_DEVICES per task, but torch ignores the visible devices and "
     "torch.cuda.device_count() still counts all 8 GCDs", "visibility", ["HIP_VISIBLE_DEVICES=0",
                                                                          "ROCR_VISIBLE_DEVICES"]),
    # device_map auto spreading a model over two GPUs, torch's own words
    ("model = AutoModelForCausalLM.from_pretrained(path, device_map=\"auto\", trust_remote_code=True)\n"
     "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
     "cuda:1!", "visibility", ["CUDA_VISIBLE_DEVICES=0", "device_map={\"\": 0}"]),
    # several GPUs listed, inference on one (English)
    ("CUDA_VISIBLE_DEVICES=0,1 llamafactory-cli chat examples/inference/qwen_gptq.yaml only uses one GPU and runs "
     "out of memory", "visibility", ["quantization_device_map: auto"]),
    # llama.cpp on a machine with mixed cards, wanting only some
    ("llama-server with the Vulkan backend sees my RTX 3090 and the Radeon RX 6600; how do I exclude the RX 6600 "
     "and run only on the 3090?", "visibility", ["--device CUDA0,CUDA1", "--list-devices"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # autocast in fp16 overflowing on a V100: not the bf16 refusal
    ("torch.autocast(device_type='cuda', dtype=torch.float16) on a V100: the loss becomes NaN after 200 steps",
     "choose it with torch.cuda.is_bf16_supported()"),
    # unscale refused where the script got its own --mixed_precision: not the launcher reading
    ("accelerate launch --mixed_precision=fp16 train_lora.py --mixed_precision=fp16\nValueError: Attempting to "
     "unscale FP16 gradients.", "pass the precision to the script too"),
    # exclamation marks from an unquantized model, no quantization named: not the calibration reading
    ("Qwen2-7B-Instruct in bf16 on vLLM prints only !!!!!!!! after I changed the chat template", "calibration"),
    # a user's own exclamation marks about a quantization build: not the model's output
    ("pip install auto-gptq fails on my RTX 4090!!!! please help", "calibration"),
    # NaN losses on an RDNA3 card in fp16: fp16's range, not the attention reading
    ("RX 7900 XTX gfx1100, fp16: true, loss is nan after 50 steps", "attn_implementation=\"eager\""),
    # flash_attn itself failing to import: not an optional extension
    ("ImportError: flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
     "csrc/"),
    # CUDA_VISIBLE_DEVICES not respected on an NVIDIA machine: not the ROCm mask reading
    ("CUDA_VISIBLE_DEVICES=1 is ignored, torch still uses GPU 0 on my two RTX 4090s", "ROCR_VISIBLE_DEVICES"),
    # tensors on two devices without device_map auto (a user's own .to()): not the device_map reading
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
     "device_map={\"\": 0}"),
    # several GPUs visible for training that works: not the one-GPU loader reading
    ("CUDA_VISIBLE_DEVICES=0,1,2,3 llamafactory-cli train lora.yaml runs on all four GPUs fine, loss is 1.2",
     "quantization_device_map"),
    # one GPU on a llama.cpp machine: nothing to choose between
    ("llama-server on my RTX 3060 only uses the CPU, how do I select the GPU?", "--device CUDA0"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
