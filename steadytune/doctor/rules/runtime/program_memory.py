"""Out of GPU memory in a program that has its own switch for it: the program, read from its own names, paths, flags
and log lines, and its knob first (an RL trainer's colocated vLLM rollout share, litgpt's micro batch, a video model's
decode chunk, a vision-language model's pixel budget, Bark's small models, an ncnn-vulkan upscaler's tile size), in
place of a training run's batch and checkpointing. Also the reading of a run as inference or training where the words
for training are only adjectives of a model ("pre-trained", "a fine-tuned checkpoint"). No rules: out_of_memory asks
it before its generic readings.

Facts (each program's README, docs or argument parser):
  verl: actor_rollout_ref.rollout.gpu_memory_utilization is the share of each GPU its vLLM rollout takes (again, on
      wake_up after the actor's update, when the rollout is colocated); the actor's fsdp_config.param_offload /
      optimizer_offload, ppo_micro_batch_size_per_gpu, model.enable_gradient_checkpointing (verl's config docs).
  OpenRLHF (and its forks, lmm-r1): --vllm_gpu_memory_utilization, --vllm_tensor_parallel_size, --colocate_all_models,
      --vllm_enable_sleep / --deepspeed_enable_sleep, --micro_train_batch_size, --adam_offload (train_ppo_ray.py).
  TRL: GRPOConfig(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3 by default).
  litgpt (lit-gpt, lit-llama): --train.micro_batch_size (the older finetune/*.py scripts: micro_batch_size = 4 at the
      top of the script), --quantize bnb.nf4, --precision bf16-true, --train.max_seq_length.
  Stable Video Diffusion (Stability-AI/generative-models scripts/sampling/simple_video_sample.py): decoding_t, the
      frames decoded at a time, 14 by default ("This eats most VRAM"); diffusers' pipeline: decode_chunk_size.
  Wan 2.x generate.py: --offload_model True --t5_cpu (its README's advice on out of memory); HunyuanVideo
      sample_video.py: --use-cpu-offload; diffusers: enable_model_cpu_offload(), enable_vae_tiling().
  Fooocus: --always-low-vram / --always-no-vram.
  Qwen2-VL / Qwen2.5-VL: one visual token per 28x28 pixels; the processor's min_pixels / max_pixels, per-message
      max_pixels / total_pixels, qwen_vl_utils' VIDEO_MAX_PIXELS variable, fps / nframes. InternVL's load_image max_num
      (12 tiles of 448x448, 256 tokens each); MiniCPM-V's max_slice_nums.
  Bark (suno-ai/bark README): the full models need about 12 GB of VRAM; SUNO_USE_SMALL_MODELS=True fits about 8 GB,
      SUNO_OFFLOAD_CPU=True offloads. Tortoise-TTS: TextToSpeech(autoregressive_batch_size=...) (picked from the GPU's
      memory when not given).
  waifu2x / Real-ESRGAN / Real-CUGAN / SRMD -ncnn-vulkan: -t tile size (>=32, 0 = auto by default); ncnn prints
      "vkAllocateMemory failed" with the VkResult, -2 being VK_ERROR_OUT_OF_DEVICE_MEMORY. Real-ESRGAN's
      inference_realesrgan.py --tile (0: none), GFPGAN's --bg_tile (400).
  Swap-Mukham (app.py's parser): --batch_size; FaceFusion: --execution-thread-count, --execution-queue-count,
      --video-memory-strategy (strict / moderate / tolerant); roop, Deep-Live-Cam: --execution-threads (--max-memory is
      the host's RAM). Demucs README: about 7 GB of GPU memory with the defaults, --segment 8 for about 3 GB (htdemucs'
      segment at most 7.8 s), PYTORCH_NO_CUDA_MEMORY_CACHING=1, -d cpu. WhisperX README: --batch_size 4,
      --compute_type int8, a smaller model. ncnn's "vkQueueSubmit failed -4" is VK_ERROR_DEVICE_LOST.
  text-generation-webui: --load-in-4bit, --gpu-memory, --n-gpu-layers. axolotl: micro_batch_size, sequence_len,
      gradient_checkpointing. kohya sd-scripts: --train_batch_size, --gradient_checkpointing, --cache_latents,
      --cache_text_encoder_outputs, --blocks_to_swap. torchtune: batch_size, enable_activation_checkpointing,
      optimizer_in_bwd. Megatron-LM: --micro-batch-size, --recompute-granularity. Ultralytics: batch=-1 (AutoBatch,
      60% of the GPU), imgsz.
  instant-ngp (NVlabs/instant-ngp README and its transforms.json docs): aabb_scale (1-128, powers of two) sets the
      density grid's cascades; colmap2nerf.py --aabb_scale; memory grows with it and with the images' count and size.
      3D Gaussian Splatting (graphdeco-inria README): -r / --resolution, --data_device cpu, --densify_grad_threshold,
      --densify_until_iter. nerfstudio (its ns-train options): --pipeline.datamanager.train-num-rays-per-batch,
      --pipeline.model.eval-num-rays-per-chunk, nerfstudio-data --downscale-factor.
  Online int8/int4 quantization (Baichuan's and ChatGLM's model.quantize(8)): it runs on weights already loaded in
      fp16, so device_map="auto" (or .cuda() first) puts the whole fp16 model on the GPU before it.
  deepbeepmeep's "GPU Poor" apps (HunyuanVideoGP, Wan2GP, Hunyuan3D-2GP, YuE-GP) run on mmgp, whose five profiles
      trade speed for memory: 1 HighRAM_HighVRAM ... 4 LowRAM_LowVRAM (the default) ... 5 VerylowRAM_LowVRAM, the
      most offloading (mmgp's README and profile docstring; the apps' --profile N, Hunyuan3D-2-WinPortable's README
      "replace --profile 5 with --profile 1"; deepbeepmeep/HunyuanVideoGP#4: profile 4 ran out on a 4090, 5 worked).
  GPT-SoVITS (RVC-Boss/GPT-SoVITS#577, the maintainer): a 4 GB card trains SoVITS / GPT only with batch size 1 and
      short clips, other GPU programs closed.
  CogVLM2 (THUDM/CogVLM2 basic_demo/README.md: Int4 inference 16GB; its cli_demo_multi_gpus.py header: "need more
      than 16GB of video memory"; THUDM/CogVLM2#58: the int4 model is loaded whole on one card first, so two 12G
      cards cannot run it).
  Langchain-Chatchat 0.2.x starts FastChat's model worker from startup.py, whose create_model_worker_app sets
      args.load_8bit = False (its startup.py); True loads the model in int8 (chatchat-space/Langchain-Chatchat#2047:
      chatglm3-6b then ran in about 8 GB).
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple, Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make
from steadytune.doctor.rules.runtime.shared import _TRAINING, _training


# ncnn's submit (or its wait) failing with VK_ERROR_DEVICE_LOST (-4): in an ncnn upscaler, the device lost under one
# tile's work (the driver's watchdog, or its memory), which a smaller tile avoids (the upscalers' issue threads)
NCNN_DEVICE_LOST = r"\bvk(?:QueueSubmit|WaitForFences) failed\W{0,3}-4\b"
# the ncnn upscalers by their names (a user's "realsr" or "waifu2x" alone, the -ncnn-vulkan port or an app built on it)
NCNN_UPSCALER = re.compile(r"(?i)\b(?:waifu2x|realesrgan|real-?esrgan-ncnn|realcugan|real-cugan|srmd|realsr)"
                           r"(?:-ncnn-vulkan)?\b|\bUpscayl\b|\bvideo2x\b")


class Program(NamedTuple):
    name: str
    pattern: str
    mode: str            # "training" / "inference": the run it answers; "any": either
    why: str
    fix: str
    inference_fix: str = ""   # where the program both trains and generates, its knob for generating
    # an LLM's or VLM's weights sized against the card first (a model larger than the GPU: a smaller or quantized
    # release); a program whose memory is its own pipeline (a rollout share, a decode chunk, a tile) speaks first
    weights_first: bool = False
    # the fix adapted to the paste's own values (the batch it ran with, the card's size): (joined text, fix) -> fix
    adapt: Optional[Callable[[str, str], str]] = None


def _halve_batch(joined: str, fix: str) -> str:
    """Swap-Mukham's --batch_size: half the one the paste ran with (32 -> 16), not a number from nowhere."""
    given = re.search(r"--batch[_-]size[ =]+(\d+)", joined)
    value = int(given.group(1)) if given else 32
    return fix.replace("{half}", str(max(1, value // 2))).replace("{given}", f" (from {value})" if given else "")


def _demucs_card(joined: str, fix: str) -> str:
    """Demucs' README: about 3 GB of GPU memory with --segment 8, about 7 GB with the defaults; a card below 3 GB runs
    it on the CPU (-d cpu) first."""
    gib = card_gib(joined)
    if gib is not None and gib < 3:
        return (f"on a {gib:g} GB card run it on the CPU: add -d cpu to the command (about 1.5x the track's length "
                "to separate); " + fix)
    return fix


# a name's edges in a paste that runs it into Chinese ("SOVITS时", "Langchain-Chatchat在哪里"): \b sees no boundary
# between two word characters, so the edges are ASCII ones
_ASCII_A = r"(?<![A-Za-z0-9_])"
_ASCII_Z = r"(?![A-Za-z0-9_])"


def _mmgp_profile(joined: str, fix: str) -> str:
    """The profile the paste ran with ("running profile 4", --profile 3), said beside profile 5."""
    given = re.search(r"(?i)profile\W{0,3}(\d(?:\.5|\+)?)", joined)
    return fix.replace("{given}", f" (now profile {given.group(1)})" if given else "")


# most specific first: a fork before its family (OpenRLHF's forks name it), a model's own script before diffusers
_PROGRAMS = (
    Program("verl", r"(?i)(?<![\w-])verl(?![\w-])|\bactor_rollout_ref\.|\bfsdp_vllm\.py\b|\bverl\.trainer\b", "any",
            "verl keeps the vLLM rollout engine and the FSDP actor on the same GPUs: when the engine wakes up after "
            "the actor's update it takes its share of each GPU again (weights and KV cache), on top of what the actor "
            "and the allocator still hold",
            "lower actor_rollout_ref.rollout.gpu_memory_utilization (0.4; a share of each whole GPU) or raise "
            "actor_rollout_ref.rollout.tensor_model_parallel_size; offload the actor while it waits "
            "(actor_rollout_ref.actor.fsdp_config.param_offload=True, optimizer_offload=True, "
            "actor_rollout_ref.ref.fsdp_config.param_offload=True); for the update a smaller "
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (or ppo_max_token_len_per_gpu with use_dynamic_bsz) "
            "and actor_rollout_ref.model.enable_gradient_checkpointing=True"),
    Program("OpenRLHF", r"(?i)\bopenrlhf\b|\blmm-r1\b|\btrain_(?:ppo|grpo|reinforce)\w*_ray\b|--vllm_num_engines\b|"
                        r"--colocate_all_models\b|--vllm_enable_sleep\b", "any",
            "OpenRLHF colocates its vLLM engines with the actor (--colocate_all_models): an engine woken from sleep "
            "takes its memory share back on GPUs the DeepSpeed actor still partly holds",
            "lower --vllm_gpu_memory_utilization (0.5, or 0.4: the share of each GPU an engine takes on wake-up) or "
            "raise --vllm_tensor_parallel_size; with --vllm_enable_sleep add --deepspeed_enable_sleep so the actor "
            "leaves the GPU while vLLM generates; for the update --micro_train_batch_size 1, --gradient_checkpointing, "
            "--adam_offload, --zero_stage 3"),
    Program("TRL (vLLM colocated)", r"(?i)\bvllm_mode\b|\btrl vllm-serve\b|\buse_vllm\s*=\s*True\b", "any",
            "TRL's trainer runs vLLM inside the training processes (vllm_mode=\"colocate\"): the engine's share of the "
            "GPU sits beside the model, its gradients and optimizer state",
            "a lower vllm_gpu_memory_utilization (0.3 by default: 0.2) and vllm_enable_sleep_mode=True where your TRL "
            "has it; or vllm_mode=\"server\" with trl vllm-serve on a GPU of its own; for the update a smaller "
            "per_device_train_batch_size, gradient_checkpointing=True, fewer num_generations, a shorter "
            "max_completion_length"),
    Program("litgpt", r"(?i)(?<![\w-])lit[-_]?(?:gpt|llama)(?![\w-])|\blitgpt (?:finetune|pretrain|generate|chat|serve)|"
                      r"(?s:\bfinetune/(?:lora|adapter(?:_v2)?|full)\.py\b.{0,400}--checkpoint_dir\b)", "any",
            "litgpt's fine-tuning keeps the weights, the adapter's optimizer state and a micro batch of activations on "
            "the GPU; its default micro batch (4) does not fit this GPU for this model",
            "lower the micro batch: --train.micro_batch_size 1 (or 2; lit-gpt's older finetune/*.py scripts: the "
            "micro_batch_size variable at their top, 4 by default; the global batch size stays, through gradient "
            "accumulation), --quantize bnb.nf4 with --precision bf16-true (QLoRA), and a shorter "
            "--train.max_seq_length",
            "litgpt generate / chat: --quantize bnb.nf4 (or bnb.int8) with --precision bf16-true, and a smaller "
            "--max_new_tokens",
            weights_first=True),
    Program("Stable Video Diffusion", r"\bSVD(?:[-_ ]?XT)?\b(?!\s*\()|(?i:stable[-_ ]video[-_ ]diffusion|"
                                      r"\bsimple_video_sample\b|\bdecoding_t\b|StableVideoDiffusionPipeline|\bsvd_xt\w*)",
            "inference",
            "Stable Video Diffusion decodes its latent frames through the VAE decoder decoding_t frames at a time (14, "
            "all of them, by default): that decode takes most of the memory",
            "decode fewer frames at a time: decoding_t=1 (or 2-7; generative-models' "
            "scripts/sampling/simple_video_sample.py --decoding_t 1, or the demo's 'Decode t frames at a time'); "
            "diffusers' StableVideoDiffusionPipeline: decode_chunk_size=2 with pipe.enable_model_cpu_offload(); "
            "fewer frames or a smaller resolution"),
    # kijai's ComfyUI-WanVideoWrapper: its WanVideo BlockSwap node (blocks_to_swap) and its WanVideo VRAM Management
    # node (offload_percent) are its own memory switches (kijai/ComfyUI-WanVideoWrapper#121: block swap at 40 still
    # ran out, the VRAM management node at 100% offload worked); I2V and T2V through "kijai's nodes" name it too
    Program("ComfyUI-WanVideoWrapper", r"(?i)\bWanVideo ?(?:Wrapper|Sampler|BlockSwap|ModelLoader|VRAM|TextEncode|"
                                       r"Decode|Encode)|\bkijai\b.{0,60}\b(?:[it]2v|wan)\b|\b(?:[it]2v|wan)\b.{0,60}\bkijai\b",
            "inference",
            "the WanVideo wrapper keeps the Wan transformer's blocks on the GPU unless its own nodes offload them, and "
            "image-to-video adds the image encoder and a larger latent",
            "raise blocks_to_swap in the WanVideo BlockSwap node (up to all 40 blocks of the 14B model), and where that "
            "is not enough use the WanVideo VRAM Management node instead (offload_percent up to 1.0, slower), with "
            "fewer frames or a smaller resolution; ComfyUI's --lowvram does not reach the wrapper's own model"),
    Program("Wan", r"(?i)(?<![\w-])Wan ?2\.\d\b|\bWan-AI/|\bgenerate\.py\b.{0,80}--task [ti]2v", "inference",
            "Wan's generation keeps the DiT, the large T5 text encoder and the VAE on the GPU together",
            "generate.py --offload_model True --t5_cpu (the T5 encoder stays on the CPU), and the 1.3B model at "
            "832*480 on a smaller card (--task t2v-1.3B --size 832*480); diffusers' WanPipeline: "
            "pipe.enable_model_cpu_offload()"),
    Program("HunyuanVideo", r"(?i)\bHunyuan-?Video\b|\bsample_video\.py\b", "inference",
            "HunyuanVideo keeps its transformer, its LLM text encoder and the VAE on the GPU together",
            "sample_video.py --use-cpu-offload (the models move to the GPU in turn), fewer frames (--video-length) "
            "or a smaller --video-size; diffusers: pipe.enable_model_cpu_offload() and pipe.vae.enable_tiling()"),
    # deepbeepmeep's mmgp apps: their memory is the profile's offloading, named by the app or by "profile N" beside
    # the run (the paste of HunyuanVideoGP#4 says only "running profile 4")
    Program("an mmgp (GPU Poor) app", _ASCII_A + r"(?i:mmgp|(?:HunyuanVideo|Wan2|Hunyuan3D-2|YuE-|Cosmos1|FluxFill|SkyReels\w*)GP)" + _ASCII_Z +
                                      r"|--profile [1-5](?![0-9])|(?i:\b(?:running|using|with|in|on) profile "
                                      r"[1-4](?:\.5|\+)?(?![0-9A-Za-z]|\.\d))", "inference",
            "the GPU Poor apps run on mmgp, whose memory profile decides how much of the models stays in VRAM and RAM "
            "(profile 4, LowRAM_LowVRAM, is the usual default; profile 5, VerylowRAM_LowVRAM, offloads the most)",
            "switch to profile 5 (VerylowRAM_LowVRAM, the most offloading, slower): --profile 5 on the command line "
            "or in the app's configuration{given}; fewer frames or a smaller resolution on top", adapt=_mmgp_profile),
    Program("GPT-SoVITS", _ASCII_A + r"(?i:gpt[-_ ]?sovits|sovits|SoVITS_weights|GPT_weights\w*|s[12]_train\.py)" + _ASCII_Z,
            "any",
            "GPT-SoVITS fine-tunes its SoVITS and GPT models with batch_size clips at once, and a long clip's "
            "activations grow with its length: on a small card (4 GB) only the smallest batch fits",
            "batch size=1 for the SoVITS and GPT training steps (the WebUI's batch_size per card), with short clips "
            "(slice the audio into a few seconds each), and other programs using the GPU closed"),
    Program("CogVLM2 int4", r"(?i)\bcogvlm2[\w.-]*-int4\b|\bint4\b.{0,80}\bcli_demo_multi_gpus\b|"
                            r"\bcli_demo_multi_gpus\b.{0,200}\bint4\b", "inference",
            "the multi-GPU demo loads CogVLM2's int4 model whole on one GPU first, before its device map spreads "
            "the layers, so one card must hold the whole int4 model",
            "each GPU must have more than 16G for the int4 model (the basic demo's README: Int4 inference 16GB; "
            "two 12G cards cannot run it, whatever max_memory_per_gpu says): one card of 16G or more with "
            "cli_demo.py --quant 4, or the BF16 model split over cards with 42GB in all"),
    Program("Langchain-Chatchat", _ASCII_A + r"(?i:langchain[-_ ]?chatchat|chatchat|langchain[-_ ]chatglm)" + _ASCII_Z,
            "inference",
            "Langchain-Chatchat loads the LLM through the FastChat model worker its startup.py starts, in fp16 (its "
            "create_model_worker_app sets args.load_8bit = False), so a model's own quantize call is never reached",
            "set args.load_8bit = True in startup.py (create_model_worker_app, where the FastChat worker's args are "
            "set) and restart: the model loads in int8 (chatglm3-6b then takes about 8 GB); or serve a published "
            "int4 model"),
    Program("Fooocus", r"(?i)\bFooocus\b", "inference",
            "Fooocus keeps the SDXL model on the GPU as its VRAM mode decides",
            "start Fooocus with --always-low-vram (or --always-no-vram; --always-offload-from-vram), a smaller "
            "resolution, one image per run"),
    Program("diffusers", r"(?i)\bdiffusers\b|\b\w+Pipeline\.from_pretrained\b|\bDiffusionPipeline\b", "inference",
            "a diffusers pipeline moved whole to the GPU (pipe.to(\"cuda\")) keeps every model of it there, and the "
            "VAE decodes the whole image or video at once",
            "pipe.enable_model_cpu_offload() instead of pipe.to(\"cuda\") (each model on the GPU only while it runs; "
            "enable_sequential_cpu_offload() for the least memory), pipe.enable_vae_tiling() / "
            "enable_vae_slicing() for large images, video or batches, torch_dtype=torch.float16 (or bfloat16) when "
            "loading, a smaller height / width or num_images_per_prompt"),
    Program("Qwen-VL", r"(?i)\bqwen[\d.]*-?vl\w*|\bqwen_vl_utils\b|\bprocess_vision_info\b", "inference",
            "a Qwen-VL model turns each image, and each video frame, into tokens in proportion to its pixels (one "
            "per 28x28 pixels in Qwen2/2.5-VL): a large image or a video's frames make a sequence far longer than "
            "the text, and its attention and KV cache with it",
            "lower the pixel budget: the processor's max_pixels (AutoProcessor.from_pretrained(model, "
            "min_pixels=256*28*28, max_pixels=1280*28*28)), max_pixels / total_pixels in each image's or video's "
            "message entry; for video fewer frames (fps=1.0 or nframes) and a smaller VIDEO_MAX_PIXELS (the "
            "environment variable qwen_vl_utils reads); vLLM: --mm-processor-kwargs '{\"max_pixels\": 1003520}'",
            weights_first=True),
    Program("InternVL", r"(?i)\binternvl\w*", "inference",
            "InternVL cuts each image into 448x448 tiles (up to max_num, 12 in its example code), 256 tokens each",
            "fewer tiles: load_image(path, max_num=6) (or 1-4), fewer num_segments for a video, and the model in "
            "bf16 with load_in_8bit=True or split over the GPUs (device_map)",
            weights_first=True),
    Program("MiniCPM-V", r"(?i)\bminicpm-?[vo]\w*", "inference",
            "MiniCPM-V slices a large image into several crops, each its own set of visual tokens",
            "fewer slices: model.chat(..., max_slice_nums=2) (or 1), fewer frames for a video (MAX_NUM_FRAMES in its "
            "example), or its int4 release",
            weights_first=True),
    Program("Bark", r"\b[Bb]ark\b|(?i:\bsuno[-_ ]?ai\b|\bSUNO_\w+|\bsuno/bark|\bpreload_models\(|from bark import)",
            "inference",
            "Bark's full text, coarse and fine models need about 12 GB of GPU memory together",
            "SUNO_USE_SMALL_MODELS=True (in the environment, or os.environ[\"SUNO_USE_SMALL_MODELS\"] = \"True\" "
            "before bark is imported): the small models fit about 8 GB; SUNO_OFFLOAD_CPU=True keeps each model on the "
            "CPU until it runs"),
    Program("Tortoise-TTS", r"(?i)\btortoise[-_ ]?tts\b|\btortoise\.(?:api|utils)\b|\bTextToSpeech\(", "inference",
            "Tortoise draws its autoregressive samples in batches sized from the GPU's memory",
            "a smaller autoregressive batch: TextToSpeech(autoregressive_batch_size=1) (or 2), and a preset with "
            "fewer samples (fast, ultra_fast)"),
    Program("an ncnn-vulkan upscaler", r"(?i)\b(?:waifu2x|realesrgan|realcugan|real-cugan|srmd|realsr)-ncnn-vulkan\b|"
                                       r"\bvkAllocateMemory failed\b|\bUpscayl\b|" + NCNN_DEVICE_LOST, "any",
            "the ncnn Vulkan upscalers process the image in tiles; the tile size picked (0, the default, chooses one "
            "from the VRAM it reads) needs more device memory than the GPU can give (vkAllocateMemory -2 is "
            "VK_ERROR_OUT_OF_DEVICE_MEMORY)",
            "a smaller tile size: -t 100 (-t 200 may do on a card of 6 GB or more; 32 is the least), and for several GPUs "
            "one per GPU (-t 100,100); "
            "Upscayl: a smaller Tile Size in its settings"),
    # face swappers (their argument parsers): Swap-Mukham's app.py --batch_size (32 by default) sets the frames sent
    # through the swapper and enhancer at once; FaceFusion's --execution-thread-count / --execution-queue-count and
    # --video-memory-strategy (2.1 on); roop and Deep-Live-Cam's --execution-threads
    Program("Swap-Mukham", r"(?i)\bswap[-_ ]?mukham\b", "any",
            "Swap-Mukham sends --batch_size frames at a time through the face swapper and the face enhancer (CodeFormer "
            "and GFPGAN keep their own activations for each face of the batch)",
            "a smaller batch: python app.py --cuda --batch_size {half}{given}, and halve it again until it fits; a "
            "lighter enhancer (GFPGAN) or none", adapt=_halve_batch),
    Program("FaceFusion", r"(?i)\bface[-_ ]?fusion\b", "any",
            "FaceFusion runs several frames at once, one per execution thread, each through the swapper and enhancer "
            "models it keeps loaded",
            "fewer frames at once: --execution-thread-count 1 (or 2) and --execution-queue-count 1, and "
            "--video-memory-strategy strict (FaceFusion 2.1 and newer) so models are released between stages; a "
            "lower --output-video-resolution, and the face enhancer off where it is not needed"),
    Program("roop / Deep-Live-Cam", r"(?i)\broop(?:[-_]\w+)?\b|\bdeep[-_ ]?live[-_ ]?cam\b", "any",
            "roop and Deep-Live-Cam run one frame per execution thread on the GPU at once",
            "fewer threads: --execution-threads 1 (or 2) with --execution-provider cuda, and the face enhancer "
            "off; --max-memory caps the host's RAM, not the GPU's"),
    # audio separation and transcription (their READMEs): demucs -d cpu / --segment; WhisperX --batch_size,
    # --compute_type int8, a smaller --model
    Program("Demucs", r"(?i)\bdemucs\b|\bhtdemucs\w*", "any",
            "Demucs separates the track in segments on the GPU; its README asks about 7 GB of GPU memory with the "
            "default arguments and at least 3 GB with short segments",
            "shorter segments: --segment 8 (about 3 GB of GPU memory; htdemucs allows at most 7.8, so --segment 7), "
            "with PYTORCH_NO_CUDA_MEMORY_CACHING=1; or on the CPU: -d cpu", adapt=_demucs_card),
    # round 20 (r20a): Segment Anything's checkpoints (facebookresearch/segment-anything's README and download URLs:
    # sam_vit_h_4b8939.pth 2.56 GB, the default; sam_vit_l_0b3195.pth 1.25 GB; sam_vit_b_01ec64.pth 0.38 GB, as the
    # downloaders found by string search give their sizes), its SamAutomaticMaskGenerator's points_per_batch (64 by
    # default); facebookresearch/segment-anything#512: a 4 GB RTX 3050 ran out with ViT-H, ran with ViT-L
    Program("Segment Anything", r"(?i)\bsegment[-_ ]anything\b|\bSAM (?:model|checkpoint)\b|\bsam_model_registry\b|"
                                r"\bSamAutomaticMaskGenerator\b|\bSamPredictor\b|\bsam_vit_[hlb]\w*", "inference",
            "Segment Anything's default checkpoint is ViT-H (2.6 GB of weights, its image encoder's activations on top), "
            "too large for a small card, and its automatic mask generator runs points_per_batch prompts (64) at once",
            "a smaller checkpoint: ViT-L (sam_model_registry[\"vit_l\"] with sam_vit_l_0b3195.pth, 1.25 GB) or ViT-B "
            "(\"vit_b\", sam_vit_b_01ec64.pth, 0.4 GB), and fewer prompts at once: "
            "SamAutomaticMaskGenerator(sam, points_per_batch=16); torch.inference_mode() around the calls"),
    Program("WhisperX", r"(?i)\bwhisperx\b", "inference",
            "WhisperX transcribes batch_size chunks of audio at once beside the alignment and diarization models",
            "--batch_size 4 (lower still on a small card), --compute_type int8, a smaller --model "
            "(small, base)"),
    Program("Real-ESRGAN", r"(?i)\binference_realesrgan\w*\.py\b|\bRealESRGANer\b|\binference_gfpgan\.py\b|"
                           r"\bgfpgan\b", "inference",
            "Real-ESRGAN upscales the whole image at once unless told to tile it (--tile 0, the default)",
            "tile it: inference_realesrgan.py --tile 400 (or 200; RealESRGANer(tile=400)), GFPGAN --bg_tile 200 "
            "(400 by default), and keep half precision (no --fp32)"),
    Program("text-generation-webui", r"(?i)text-generation-webui|\boobabooga\b|\bmodules[/\\]"
                                     r"(?:models|text_generation|ui_model_menu)\.py\b", "inference",
            "text-generation-webui loads the whole model onto the GPU in 16 bit unless told otherwise",
            "load it in 4 bit (--load-in-4bit, or a GPTQ / EXL2 / GGUF quantisation of the model), cap the GPU's "
            "share (--gpu-memory 10 with --cpu-memory for the rest; llama.cpp loader: fewer --n-gpu-layers), a "
            "shorter context (--max_seq_len / truncation length)",
            weights_first=True),
    Program("axolotl", r"(?i)\baxolotl\b", "training",
            "axolotl's config sets the micro batch and the sequence length each GPU holds activations for",
            "micro_batch_size: 1 (gradient_accumulation_steps up to keep the batch), gradient_checkpointing: true, a "
            "shorter sequence_len, adapter: qlora with load_in_4bit: true"),
    Program("kohya sd-scripts", r"(?i)\bsd-scripts\b|\bkohya\w*|\b(?:sdxl_|flux_|sd3_)?train_network\.py\b|"
                                r"\bsdxl_train\.py\b", "training",
            "sd-scripts keeps the diffusion model, its text encoders and the VAE on the GPU beside the batch",
            "--train_batch_size 1, --gradient_checkpointing, --cache_latents (--cache_latents_to_disk), "
            "--mixed_precision bf16 with --sdpa or --xformers; SDXL: --cache_text_encoder_outputs "
            "--network_train_unet_only; FLUX / SD3: --fp8_base and --blocks_to_swap 18"),
    Program("torchtune", r"(?i)\btorchtune\b|\btune run\b", "training",
            "torchtune's recipe config sets the batch and whether activations are kept",
            "override the config on the command line: batch_size=1 gradient_accumulation_steps=8 "
            "enable_activation_checkpointing=True (enable_activation_offloading=True), optimizer_in_bwd=True, "
            "dtype=bf16; or the QLoRA recipe's config (qlora_*)"),
    Program("Megatron-LM", r"(?i)\bmegatron\b|\bpretrain_gpt\.py\b", "training",
            "Megatron keeps each rank's model shard, optimizer state and a micro batch of activations",
            "--micro-batch-size 1, --recompute-granularity full --recompute-method uniform (or selective), "
            "--use-distributed-optimizer, --sequence-parallel with tensor parallel, or more "
            "--tensor-model-parallel-size / --pipeline-model-parallel-size"),
    Program("Ultralytics YOLO", r"(?i)\bultralytics\b|\byolo (?:train|detect|segment|pose|predict)\b|"
                                r"\byolo(?:v\d+|\d+)\w*\.pt\b", "any",
            "YOLO's memory is the batch times the image size",
            "batch=-1 (AutoBatch sizes it to 60% of the GPU's memory) or a smaller batch=8, a smaller imgsz; "
            "YOLOv5's train.py: --batch-size -1 or smaller, --img smaller",
            "a smaller imgsz and batch, half=True"),
    # NeRF and Gaussian-splatting trainers: their memory is the scene's, not a batch's
    Program("instant-ngp", r"(?i)\binstant[-_ ]?ngp\b|\bcolmap2nerf\.py\b|\bpyngp\b|\btestbed\b", "any",
            "instant-ngp keeps the whole scene on the GPU: its density grid's cascades grow with aabb_scale (up to 128), "
            "and every training image is loaded onto the GPU at full resolution",
            "lower aabb_scale in transforms.json (16 -> 4 or 2; colmap2nerf.py --aabb_scale 4 when making it), use fewer "
            "or lower-resolution images (downscale them before training), and close other programs using the GPU"),
    Program("3D Gaussian Splatting", r"(?i)\bgaussian[-_ ]splatting\b|\bdiff[-_]gaussian[-_]rasteri[sz]ation\b|"
                                     r"\b3DGS\b|\bdensify_(?:until_iter|grad_threshold)\b", "training",
            "3D Gaussian Splatting's memory grows with the Gaussians densified and the images kept on the GPU",
            "train at a lower resolution (-r 2 or -r 4), keep the images in host memory (--data_device cpu), and "
            "densify less (a higher --densify_grad_threshold, a lower --densify_until_iter)"),
    Program("nerfstudio", r"(?i)\bnerfstudio\b|\bns-train\b|\bnerfacto\b", "any",
            "nerfstudio's memory is the rays per batch and the images its data manager keeps on the GPU",
            "fewer rays per batch (--pipeline.datamanager.train-num-rays-per-batch 2048, "
            "--pipeline.model.eval-num-rays-per-chunk 4096) and downscaled images (the dataparser's "
            "--downscale-factor 2, e.g. ns-train nerfacto ... nerfstudio-data --downscale-factor 2)"),
)


# a run that generates, not one that learns: the program's verbs for it
_INFERENCE = re.compile(r"(?i)\binferenc\w*|\binfer\b|\.generate\(|\bgenerat(?:e|es|ed|ing)\b|\bpredict\w*|\.chat\(|"
                        r"\bpipeline\(|txt2img|img2img|\bupscal\w*|\btext[-_ ]to[-_ ]speech\b|\bTTS\b|推理|部署|"
                        r"\bdeploy\w*|\bserv(?:e|ing)\b|\blaunch_server\b")
# words of training that only describe a model ("pre-trained", "the fine-tuned checkpoint", "my trained model"): a
# determiner before the participle makes it an adjective ("I fine-tuned the model" stays a training run)
_ADJECTIVE = re.compile(r"(?i)\bpre-?trained\b|\b(?:a|an|the|my|our|your|this|that|its|their)\s+(?:[\w.]+[- ])?"
                        r"(?:fine-?tuned|trained)\b")


def reads_as_inference(ctx: Context) -> bool:
    """The paste runs a model (generates, infers, serves) and its words for training, if any, only describe a model."""
    text = "\n".join(ctx.sheet.lines)
    if not _INFERENCE.search(text):
        return False
    if not _training(ctx):
        return True
    # training said only as a model's adjective, by no trainer the paste names
    return not _TRAINING.search(_ADJECTIVE.sub(" ", text)) and ctx.tool() not in ("unsloth", "llamafactory",
                                                                                   "deepspeed")


def _mode(ctx: Context) -> str:
    return "training" if _training(ctx) and not reads_as_inference(ctx) else "inference"


# a card's memory, where the paste gives it: torch's capacity, or the user's "4GB VRAM" / "8 GB of VRAM"
_CAPACITY = re.compile(r"(?i)total capa\w+ of ([\d.]+) GiB|([\d.]+) GiB total capa\w+|\b(\d{1,2}) ?GB?\b(?: of)? ?VRAM\b")


def card_gib(joined: str) -> Optional[float]:
    found = _CAPACITY.search(joined)
    return float(next(g for g in found.groups() if g)) if found else None


def program_oom(ctx: Context, errors: list[ErrorLine], joined: str, proper: bool, fragmented: Optional[str],
                weights_read: bool) -> Optional[Diagnosis]:
    """The first program of the table the paste names whose mode fits the run: its own knob as the fix. Asked twice
    by out_of_memory: before the model's size is read against the card (weights_read False: the programs whose memory
    is their own pipeline), and after (the LLM and VLM programs, whose weights may be what does not fit)."""
    own_nodes = any(p.name.startswith("ComfyUI-") and re.search(p.pattern, joined) for p in _PROGRAMS)
    if {"a1111", "comfyui"} & set(ctx.sheet.tools) and not own_nodes:
        return None   # the image UIs' own modes (out_of_memory's tool table): the GFPGAN or diffusers inside them,
        # except a node pack that loads its models itself (its own offload nodes, which the UI's modes do not reach)
    mode = _mode(ctx)
    for program in _PROGRAMS:
        if program.mode not in ("any", mode):
            continue
        if program.weights_first != weights_read:
            continue
        if not re.search(program.pattern, joined):
            continue
        if program.name == "Stable Video Diffusion" and re.search(r"(?i)\blinalg\b|\.svd\(", joined):
            continue   # the singular value decomposition, not the video model
        if program.name == "TRL (vLLM colocated)" and re.search(r"(?i)\bswift\b", joined):
            continue   # ms-swift's own rollout switches (out_of_memory's GRPO reading)
        fix = program.inference_fix if mode == "inference" and program.inference_fix else program.fix
        if program.adapt is not None:
            fix = program.adapt(joined, fix)
        if fragmented:
            fix += "; the free memory is fragmented too: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        return _make("out-of-memory", f"{program.name} ran out of GPU memory", program.why, fix,
                     [ctx.line_fact(errors[0])], errors, confirmed=proper)
    return None


def ncnn_device_lost(ctx: Context) -> Optional[Diagnosis]:
    """ncnn's vkQueueSubmit / vkWaitForFences failing with -4 (VK_ERROR_DEVICE_LOST) in a paste about an ncnn
    upscaler (named alone, "realsr" or "waifu2x", or by its -ncnn-vulkan port, or an app on it): the GPU gave up under one
    tile's work, which the upscaler's own tile size makes smaller. Asked by out_of_memory where no line says out of
    memory in words."""
    lines = _lines_matching(ctx, NCNN_DEVICE_LOST)
    if not lines or not NCNN_UPSCALER.search("\n".join(ctx.sheet.lines)):
        return None
    program = next(p for p in _PROGRAMS if p.name == "an ncnn-vulkan upscaler")
    return _make("out-of-memory", "the ncnn upscaler lost the GPU under one tile's work",
                 "ncnn's submit failed with -4, VK_ERROR_DEVICE_LOST: the upscaler runs each tile as one piece of GPU "
                 "work, and a tile too large for this GPU (the default picks it from the VRAM it reads) exhausts its "
                 "memory or runs past the driver's timeout, and the device is lost",
                 program.fix + "; update the GPU driver if the smallest tile still fails", [ctx.line_fact(lines[0])],
                 lines[:1], confirmed=False)


# quantization asked for in code ("int8", "load_in_8bit", .quantize(8), 量化) of a model loaded for inference
_ONLINE_QUANT = re.compile(r"(?i)\.quantize\(\d\)|\bint[48] ?(?:quantiz\w*|量化)|量化")
# quantized while loading (bitsandbytes through transformers, a GPTQ / AWQ / GGUF file): placed small, no such cost
_LOAD_QUANTIZED = re.compile(r"(?i)load_in_[48]bit|BitsAndBytesConfig|bitsandbytes|quantization_config|-int[48]\b|"
                             r"-awq\b|-gptq\b|\.gguf\b|\bq[2-8]_[k0-9]")
_AT_LOAD = re.compile(r"(?i)\bfrom_pretrained\b|\bload(?:ing)?\b.{0,20}\bmodel\b|\bcheckpoint shards\b|\bat (?:start|"
                      r"launch)|启动|加载|载入")


def quantized_after_load(ctx: Context, errors: list[ErrorLine], joined: str, proper: bool) -> Optional[Diagnosis]:
    """Quantization asked for in the code of a model being loaded for inference, and out of memory while it loads: the
    online quantize call (Baichuan's, ChatGLM's model.quantize(8)) runs on the fp16 weights already placed, so with
    device_map="auto" they land on the GPU whole before any is made smaller."""
    if _training(ctx) and not reads_as_inference(ctx):
        return None
    if not (_ONLINE_QUANT.search(joined) and _AT_LOAD.search(joined)) or _LOAD_QUANTIZED.search(joined):
        return None
    return _make("out-of-memory", "the fp16 model is placed on the GPU before it is quantized",
                 "a model's own quantize call (Baichuan's and ChatGLM's model.quantize(8) / quantize(4)) works on "
                 "weights already loaded in fp16; loaded with device_map=\"auto\" (or moved with .cuda() first), the "
                 "whole fp16 model is put on the GPU before quantization, and that does not fit",
                 "load it on the CPU first, without device_map=\"auto\", quantize, then move it: "
                 "AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float16, trust_remote_code=True)"
                 ".quantize(8).cuda(); or let transformers quantize while loading (quantization_config="
                 "BitsAndBytesConfig(load_in_8bit=True) with device_map=\"auto\"), or load the published int8 / int4 "
                 "release", [ctx.line_fact(errors[0])], errors, confirmed=proper)


INFERENCE_OOM_FIX = ("a smaller input (max_new_tokens and the prompt's length, the image size, the batch), the weights "
                     "in fp16 / bf16 (from_pretrained(..., torch_dtype=torch.float16): fp32 is the default), an 8-bit "
                     "or 4-bit load (quantization_config=BitsAndBytesConfig(load_in_4bit=True)), device_map=\"auto\" "
                     "with max_memory={0: \"20GiB\", \"cpu\": \"64GiB\"} to keep the layers that do not fit on the "
                     "CPU, and generation under torch.inference_mode()")
