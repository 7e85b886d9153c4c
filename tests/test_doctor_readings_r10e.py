"""doctor, round 10 (issue 63): readings of the WSL, number-format, memory and attention families that batch 9's
training cases asked for. Each paste is written for its reading (another GPU, tool and wording than the mined case),
pasted plain and in the other ways users paste; the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from test_doctor_paraphrases import PASTINGS, assert_a_rule_reads, assert_no_rule_says, pasting_misses

# (paste, family, phrases the fix must say)
READINGS = [
    # a Windows build older than 1903 (18362) has WSL 1 only: no GPU whatever is installed inside Linux
    ("Debian from the Store under WSL, RTX 3060 laptop\nC:\\> ver\nMicrosoft Windows [Version 10.0.17134.1304]\n"
     "$ python train.py\nRuntimeError: cudaGetDeviceCount returned 100: no CUDA-capable device is detected", "wsl",
     ["WSL 1", "19044"]),
    # ldconfig's warning about the Windows driver's copies in /usr/lib/wsl/lib (the unversioned name this time)
    ("sudo apt upgrade on Ubuntu 24.04 in WSL2 prints at the end:\nldconfig: /usr/lib/wsl/lib/libcuda.so is not a "
     "symbolic link\nIs my CUDA broken? RTX 4070", "wsl", ["libcuda.so.1.1", "mklink", "harmless"]),
    # the WSL runtime rejecting a Radeon outside its WSL list (another card, torch rather than rocminfo)
    ("Radeon RX 7600 on Windows 11, Ubuntu 22.04 under WSL2, ROCm 6.1.3 for WSL installed\n>>> torch.cuda.is_available()"
     "\nROCR: unsupported GPU\nFalse", "wsl", ["RX 7600", "WSL compatibility matrix", "native Linux"]),
    # no AMD GPU under WSL at all (a CI box building HIP code): the runtime's out-of-resources and the enumerator's retry
    ("Building our HIP kernels in WSL2 on a laptop with no AMD GPU (Intel graphics only), hipcc just sits there for a "
     "minute.\n$ rocminfo\nWSL environment detected.\nhsa api call failure at: rocminfo.cc:1306\nCall returned "
     "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.", "wsl",
     ["rocm_agent_enumerator", "--offload-arch"]),
    # a trainer's own bf16 check refusing a GPU torch says computes bf16 (axolotl, an MI300X)
    ("accelerate launch -m axolotl.cli.train qwen.yml on 8x MI300X\nValueError: bf16 is not supported on this device, "
     "use fp16\n>>> torch.cuda.is_bf16_supported()\nTrue", "precision", ["upgrade axolotl", "pip install -U axolotl"]),
    # torchtune's own message, said on an NVIDIA card this time
    ("tune run lora_finetune_single_device --config llama3/8B_lora_single_device on an RTX 3090\nRuntimeError: bf16 "
     "precision was requested but not available on this hardware. Please use fp32 precision instead.", "precision",
     ["upgrade torchtune", "NCCL 2.10"]),
    # a trainer that does not pass its fp16 flag on (LLaMA-Factory's YAML, a T4): upgrade it, fp32 on that GPU
    ("llamafactory-cli train qwen_full.yaml on a Tesla T4\nI put fp16: false in the yaml but it is ignored, the "
     "trainer still uses fp16", "precision", ["upgrade LLaMA-Factory", "fp32"]),
    # unsloth's precision guard raising while the trainer is built, on a T4
    ("Colab T4, full fine-tuning\nmodel, tokenizer = FastLanguageModel.from_pretrained('Qwen3-0.6B', full_finetuning = "
     "True)\n----> 8 trainer = SFTTrainer(\n     12     fp16 = True,\n     13     bf16 = False,\nValueError: Unsloth: "
     "Model is in bfloat16 precision but you want to use float16 precision", "precision", ["upgrade unsloth"]),
    # fp32 tensors into flash-attention (transformers on an RTX 3090)
    ("model = AutoModelForCausalLM.from_pretrained(p, attn_implementation='flash_attention_2')\ntrainer.train()\n"
     "RuntimeError: FlashAttention only supports fp16 and bf16 data type\nGPU: RTX 3090", "precision",
     ["bf16 = True", "torch_dtype=torch.bfloat16"]),
    # a serving engine's own KV-cache share: LMDeploy out of memory (its CLI this time)
    ("lmdeploy serve api_server Qwen/Qwen2-7B-Instruct on an RTX 4090\nRuntimeError: CUDA out of memory",
     "out-of-memory", ["cache_max_entry_count"]),
    # vLLM said to take far more than its weights, no error (an OpenAI server, another model)
    ("vllm serve meta-llama/Llama-3.1-8B-Instruct takes 71 GB on our 80 GB A100, the model is only 16 GB. Is this a "
     "leak?", "out-of-memory", ["gpu_memory_utilization"]),
    # SGLang said to take most of the GPU, in Chinese
    ("sglang 启动 Qwen2.5-7B 以后显存占用很高，H20 上 90% 都被占了", "out-of-memory", ["--mem-fraction-static"]),
    # data-parallel training asked to shard (accelerate, a 34B model, 4 GPUs)
    ("accelerate launch --multi_gpu train.py on 4 GPUs: it loads the full model on every GPU and a 34B model does "
     "not fit, how do I train it with model parallel?", "out-of-memory", ["ZeRO-3", "FSDP"]),
    # NaN at the first step in bf16 (transformers' Trainer log, an A100)
    ("Trainer with bf16=True, Llama-3-8B full fine-tune on 8x A100\n{'loss': 1.9312, 'grad_norm': nan, "
     "'learning_rate': 0.0, 'epoch': 0.0}\n{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1e-07, 'epoch': 0.01}",
     "attention", ["attn_implementation", "flash_attention_2", "eager"]),
]


@pytest.mark.parametrize("paste,family,phrases", READINGS)
def test_a_rule_reads_the_paste(paste, family, phrases):
    assert_a_rule_reads(paste, family, phrases)


@pytest.mark.parametrize("how", PASTINGS)
def test_the_readings_survive_how_they_are_pasted(how):
    assert not pasting_misses(READINGS, how)


@pytest.mark.parametrize("paste,not_said", [
    # a released Windows 10 build with WSL 2 is not WSL-1-only
    ("Microsoft Windows [Version 10.0.19045.3803]\nnvidia-smi in WSL: Failed to initialize NVML: GPU access blocked "
     "by the operating system", "WSL 1"),
    # ldconfig's warning about a library outside WSL's folder, on native Linux: no Windows links to make
    ("ldconfig: /usr/lib/x86_64-linux-gnu/libcudnn.so.8 is not a symbolic link", "mklink"),
    # out of resources on native Linux (no WSL said): not the WSL runtime's no-GPU
    ("rocminfo\nROCk module is loaded\nhsa api call failure at: rocminfo.cc:1102\nCall returned "
     "HSA_STATUS_ERROR_OUT_OF_RESOURCES", "rocm_agent_enumerator"),
    # a V100 really has no bf16: the trainer's check is right, no upgrade of it is the fix
    ("Tesla V100, transformers Trainer(bf16=True)\nValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, "
     "using Ampere GPU with cuda>=11.0", "whose check accepts"),
    # bf16=False passed in Python to trl's SFTTrainer: accelerate's override, not a CLI flag the tool drops
    ("SFTTrainer ignores bf16=False on my T4 and still uses bf16", "later releases pass the flag on"),
    # memory use of a plain transformers script: no serving engine's knob
    ("AutoModelForCausalLM.from_pretrained('Qwen2-7B').cuda() uses 16 GB of VRAM on my 4090", "gpu_memory_utilization"),
    # one GPU, no multi-GPU launch: nothing is copied to other cards
    ("python train.py on one RTX 4090: the model loaded on the GPU takes 20 GB, any way to use model parallel on CPU?",
     "ZeRO-3"),
    # NaN at the first step in fp16: fp16's overflow, the precision reading
    ("fp16: true, Qwen2-7B LoRA on 2x V100\n{'loss': 2.3, 'grad_norm': nan, 'learning_rate': 0.0, 'epoch': 0.0}",
     "SDPA"),
    # NaN long after the start (a later step, no first-step log): not the first-step reading
    ("bf16 Llama-3 fine-tune: at step 1200 {'loss': nan, 'grad_norm': nan, 'learning_rate': 1.8e-05, 'epoch': 0.6}",
     "SDPA"),
])
def test_a_reading_stays_out_of_a_paste_it_does_not_fit(paste, not_said):
    assert_no_rule_says(paste, not_said)


@pytest.mark.parametrize("paste,not_said", [
    # a card on every WSL release's list rejected: the release or the driver, not the card
    ("RX 7900 XTX, Ubuntu 22.04 in WSL2\nrocminfo\nWSL environment detected.\nROCR: unsupported GPU", "does not support the"),
    # Megatron's own log line about model parallelism in a multi-GPU run: nobody asked for sharding
    ("torchrun --nproc_per_node 8 pretrain_gpt.py\n> initializing model parallel with size 1\ntraining ...\n"
     "iteration 100/1000 | elapsed time per iteration (ms): 5200.1\nwhy is training so slow?", "ZeRO-3"),
])
def test_a_reading_keeps_to_its_evidence(paste, not_said):
    assert_no_rule_says(paste, not_said)
