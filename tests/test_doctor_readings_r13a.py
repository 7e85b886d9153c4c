"""doctor, round 13 (issue 63): out of GPU memory in a program with its own memory knob (program_memory.py): an RL
trainer's colocated vLLM rollout, litgpt, video and image generation scripts, vision-language models' pixel budgets,
a model quantized after it is placed, text-to-speech, ncnn-vulkan upscalers; and a run that generates read as
inference, not training. Each paste is written for its reading (another GPU, tool, version or wording than the mined
case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

_TORCH_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of "
              "79.10 GiB of which 1.02 GiB is free. Of the allocated memory 70.11 GiB is allocated by PyTorch, and "
              "3.20 GiB is reserved by PyTorch but unallocated.")

# (paste, family, phrases the fix must say)
READINGS = [
    # verl's colocated SGLang/vLLM rollout failing to take its share back after the actor's step, in GRPO
    ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.rollout.name=vllm "
     "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct trainer.n_gpus_per_node=4\n"
     "(WorkerDict pid=2231) RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
     "out-of-memory", ["actor_rollout_ref.rollout.gpu_memory_utilization", "param_offload"]),
    # an OpenRLHF PPO run with colocated engines on A100s
    ("deepspeed --module openrlhf.cli.train_ppo_ray --colocate_all_models --vllm_num_engines 8 --vllm_enable_sleep\n"
     "(LLMRayActor pid=9012) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB. GPU 0 has a total "
     "capacity of 79.15 GiB of which 512.00 MiB is free.", "out-of-memory",
     ["--vllm_gpu_memory_utilization", "--deepspeed_enable_sleep"]),
    # TRL's GRPO with vLLM colocated (no ms-swift)
    ("training_args = GRPOConfig(output_dir='out', use_vllm=True, vllm_mode=\"colocate\")\n" + _TORCH_OOM,
     "out-of-memory", ["vllm_gpu_memory_utilization", "vllm_mode=\"server\""]),
    # litgpt's own CLI, a 3090 and a Llama 3 8B LoRA
    ("litgpt finetune lora --checkpoint_dir checkpoints/meta-llama/Meta-Llama-3-8B --precision bf16-true\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 23.68 GiB "
     "of which 44.00 MiB is free.", "out-of-memory", ["micro_batch_size", "bnb.nf4"]),
    # litgpt generating: its quantize switch, not a micro batch
    ("litgpt generate --checkpoint_dir checkpoints/mistralai/Mistral-7B-v0.1 --prompt 'hello'\n"
     "RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 0; 23.69 GiB total capacity; 23.10 GiB already "
     "allocated)", "out-of-memory", ["--quantize bnb.nf4", "--max_new_tokens"]),
    # Stable Video Diffusion XT through its sampling script on a 16 GB card
    ("python scripts/sampling/simple_video_sample.py --input_path assets/cat.png --version svd_xt\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.06 GiB. GPU 0 has a total capacity of 15.70 "
     "GiB of which 2.11 GiB is free.", "out-of-memory", ["decoding_t", "decode_chunk_size"]),
    # Wan 2.1 text-to-video on a 24 GB card
    ("python generate.py --task t2v-14B --size 1280*720 --ckpt_dir ./Wan2.1-T2V-14B --prompt 'a cat surfing'\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.98 GiB. GPU 0 has a total capacity of 23.55 GiB "
     "of which 1.10 GiB is free.", "out-of-memory", ["--offload_model True", "--t5_cpu"]),
    # a diffusers SDXL pipeline moved whole to an 8 GB card
    ("pipe = StableDiffusionXLPipeline.from_pretrained('stabilityai/stable-diffusion-xl-base-1.0').to('cuda')\n"
     "image = pipe(prompt).images[0]\nRuntimeError: CUDA out of memory. Tried to allocate 640.00 MiB (GPU 0; 8.00 GiB "
     "total capacity; 6.81 GiB already allocated; 190.00 MiB free)", "out-of-memory",
     ["enable_model_cpu_offload", "enable_vae_tiling"]),
    # Qwen2-VL answering about a long image set, transformers on an L4
    ("inference with Qwen2-VL-7B-Instruct, 6 high resolution images in one message, transformers 4.45\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.80 GiB. GPU 0 has a total capacity of 22.05 GiB "
     "of which 4.01 GiB is free.", "out-of-memory", ["max_pixels"]),
    # InternVL2 chat with big pictures
    ("model = AutoModel.from_pretrained('OpenGVLab/InternVL2-8B', torch_dtype=torch.bfloat16, trust_remote_code=True)"
     ".eval().cuda()\nresponse = model.chat(tokenizer, pixel_values, question, generation_config)\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB.", "out-of-memory", ["max_num"]),
    # Bark on a 6 GB laptop card
    ("from bark import SAMPLE_RATE, generate_audio, preload_models\npreload_models()\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 6.00 GiB total capacity; "
     "5.30 GiB already allocated; 0 bytes free)", "out-of-memory", ["SUNO_USE_SMALL_MODELS", "SUNO_OFFLOAD_CPU"]),
    # Real-ESRGAN's ncnn build on an Intel iGPU
    ("realesrgan-ncnn-vulkan.exe -i in.png -o out.png -n realesrgan-x4plus\n[0 Intel(R) UHD Graphics 620]  "
     "queueC=0[1]  queueG=0[1]  queueT=0[1]\nvkAllocateMemory failed -2\nvkAllocateMemory failed -2",
     "out-of-memory", ["-t 200", "tile"]),
    # the Python Real-ESRGAN on a big photo
    ("python inference_realesrgan.py -n RealESRGAN_x4plus -i photos/big.jpg --outscale 4\n"
     "RuntimeError: CUDA out of memory. Tried to allocate 6.00 GiB (GPU 0; 10.00 GiB total capacity; 2.98 GiB already "
     "allocated)", "out-of-memory", ["--tile 400"]),
    # online int8 quantization of a remote-code chat model, Chinese prose, on a 3090
    ("RTX 3090 24G，按照 README 加了 model.quantize(8)，加载模型时还是显存不足\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB (GPU 0; 23.69 GiB total capacity; "
     "23.01 GiB already allocated; 120.00 MiB free)", "out-of-memory", ["device_map", ".quantize(8).cuda()"]),
    # the web UI's bug template, a 2 GB card: its lowest-memory mode first
    ("[Bug]: OOM on every txt2img\nCommit where the problem happens: 4af3ca5\nWhat browsers do you use to access the "
     "UI ? Firefox\nGeForce MX150 with 2GB VRAM\nRuntimeError: CUDA out of memory. Tried to allocate 58.00 MiB",
     "out-of-memory", ["on a 2 GB card", "--lowvram"]),
    # a plain transformers generation that reads "pre-trained" but trains nothing: inference knobs
    ("Loading a pre-trained model with AutoModelForCausalLM.from_pretrained and calling model.generate(max_new_tokens="
     "4096) on an RTX 4080\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.35 GiB. GPU 0 has a "
     "total capacity of 15.59 GiB of which 402.00 MiB is free. Of the allocated memory 14.70 GiB is allocated by "
     "PyTorch", "out-of-memory", ["max_new_tokens", "torch_dtype=torch.float16", "max_memory"]),
    # axolotl's config keys
    ("accelerate launch -m axolotl.cli.train examples/llama-3/lora-8b.yml\n" + _TORCH_OOM, "out-of-memory",
     ["micro_batch_size: 1", "sequence_len"]),
    # kohya's SDXL LoRA script
    ("accelerate launch sdxl_train_network.py --pretrained_model_name_or_path sd_xl_base_1.0.safetensors "
     "--train_batch_size 4\n" + _TORCH_OOM, "out-of-memory", ["--cache_latents", "--cache_text_encoder_outputs"]),
    # a torchtune recipe
    ("tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device\n" + _TORCH_OOM, "out-of-memory",
     ["enable_activation_checkpointing=True", "batch_size=1"]),
    # Ultralytics training at a large image size
    ("yolo train model=yolov8x.pt data=coco.yaml imgsz=1280 batch=32\n" + _TORCH_OOM, "out-of-memory",
     ["batch=-1", "imgsz"]),
    # SGLang's server: its own static share and prefill chunk
    ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --port 30000\n" + _TORCH_OOM,
     "out-of-memory", ["--mem-fraction-static"]),
    # text-generation-webui with a 7B model and a long context on a 16 GB card
    ("python server.py --model TheBloke_Mistral-7B-fp16\n  File \"text-generation-webui/modules/models.py\", line 88, "
     "in load_model\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB (GPU 0; 15.70 GiB "
     "total capacity; 15.20 GiB already allocated)", "out-of-memory",
     ["--load-in-4bit", "--gpu-memory"]),
    # Tortoise on an 8 GB card
    ("from tortoise.api import TextToSpeech\ntts = TextToSpeech()\ngen = tts.tts_with_preset(text, preset='standard')\n"
     "RuntimeError: CUDA out of memory. Tried to allocate 1.20 GiB (GPU 0; 8.00 GiB total capacity)", "out-of-memory",
     ["autoregressive_batch_size"]),
    # HunyuanVideo's sampling script on one 48 GB card
    ("python3 sample_video.py --video-size 720 1280 --video-length 129 --prompt 'a dog running'\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 47.50 GiB "
     "of which 3.10 GiB is free.", "out-of-memory", ["--use-cpu-offload"]),
    # "the fine-tuned checkpoint" only describes the model: generating, its knobs
    ("Serving the fine-tuned checkpoint with model.generate() on a T4 (16GB)\ntorch.cuda.OutOfMemoryError: CUDA out "
     "of memory. Tried to allocate 2.10 GiB. GPU 0 has a total capacity of 14.75 GiB of which 1.50 GiB is free.",
     "out-of-memory", ["max_new_tokens", "max_memory"]),
    # a user's words for running out, with a card named
    ("I keep running out of CUDA memory on an RTX 4090 with the litgpt LoRA recipe", "out-of-memory",
     ["micro_batch_size"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # the singular value decomposition is not the video model
    ("U, S, V = torch.linalg.svd(big_matrix)  # SVD of a 60000 x 60000 matrix\n" + _TORCH_OOM, "decoding_t"),
    # a vLLM server of its own, no RL trainer: no verl keys
    ("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 2\n" + _TORCH_OOM, "actor_rollout_ref"),
    # bitsandbytes quantizing while it loads: device_map is right there
    ("model = AutoModelForCausalLM.from_pretrained(name, load_in_8bit=True, device_map='auto')  # int8 quantization\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 MiB (GPU 0; 11.76 GiB total "
     "capacity)", "without device_map"),
    # a Qwen2-VL LoRA fine-tune: the training reading, not the generating one
    ("swift sft --model Qwen/Qwen2-VL-7B-Instruct --train_type lora --dataset my.jsonl\n" + _TORCH_OOM,
     "AutoProcessor.from_pretrained(model, min_pixels"),
    # a Wan LoRA training run: the training reading, not generate.py's switches
    ("musubi-tuner wan_train_network.py --task t2v-14B LoRA training of Wan2.1\n" + _TORCH_OOM, "--t5_cpu"),
    # the web UI on a 12 GB card: no 'on a 12 GB card ... --lowvram' first
    ("Commit where the problem happens: 4af3ca5\nRTX 3060 12GB VRAM\nRuntimeError: CUDA out of memory. Tried to "
     "allocate 1.50 GiB", "--lowvram (COMMANDLINE_ARGS"),
    # Vulkan's host-memory failure is not the GPU's: no tile advice
    ("waifu2x-ncnn-vulkan -i a.png -o b.png\nvkAllocateMemory failed -1", "-t 200"),
    # a real fine-tune that says "pre-trained" too: still the training knobs, not generation's
    ("trainer = Trainer(model=model, args=TrainingArguments(per_device_train_batch_size=8)) on the pre-trained model\n"
     "trainer.train()\n" + _TORCH_OOM, "torch.inference_mode"),
    # QLoRA training in 4 bit: no online-quantize advice, no generation knobs
    ("QLoRA fine-tuning with int8 quantization, loading model with from_pretrained and Trainer\ntrainer.train()\n"
     + _TORCH_OOM, "without device_map"),
    # the web UI's own start-up log names GFPGAN: its --medvram / --lowvram, not Real-ESRGAN's tiling
    ("venv/bin/python launch.py --xformers\nInstalling gfpgan\nLaunching Web UI with arguments: --xformers\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.79 GiB total capacity)",
     "--tile 400"),
    # "bark" is not named: no Bark switch for an anonymous torch OOM
    ("RuntimeError: CUDA out of memory. Tried to allocate 16.00 MiB (GPU 0; 8.00 GiB total capacity; 7.30 GiB "
     "already allocated; 0 bytes free)", "SUNO_USE_SMALL_MODELS"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
