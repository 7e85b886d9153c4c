"""doctor, round 17 (q17b): situations told in prose, in Chinese, mixed Chinese/English and English, for the
families visibility, device-access, env-not-applied, wsl, multi-gpu-transport, out-of-memory, apu-memory, precision,
attention, platform-bios, gpu-hang and miopen-kernel. Each reading retells a solved training case (40 drawn with
random.Random(1718)) as another user would: another GPU, version or OS of the same class, the facts in words, the
error line cut short, paraphrased or missing. The negatives keep each widened reading out of texts it does not fit:
another vendor, a healthy machine, the fact said as not the case."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

from steadytune.doctor.facts import extract_facts

# (paste, family, phrases the fix must say)
READINGS = [
    # ms-swift/4282
    ('swift sft 用 CUDA_VISIBLE_DEVICES=0,1 跑 Qwen2.5-7B，发现模型被切到两张卡上了（模型并行），我想要的是 DDP 数据并行，每张卡一份模型，怎么设置？',
     'visibility', ['NPROC_PER_NODE=2']),
    ('**ms-swift question**: I set `CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7` and ran `swift sft`, but it splits the model across the 8 A100s instead of doing data parallel. how do i get DDP?',
     'visibility', ['NPROC_PER_NODE=8']),
    # a1111/3207
    ('Fedora 40 上 ComfyUI 只有 sudo 才能用 GPU，普通用户跑 torch 找不到显卡 (RX 6800)',
     'device-access', ['usermod', 'video']),
    ('pytorch only sees my 7800xt when i run it as root. As my normal user torch.cuda.is_available() returns False. Arch linux, rocm 6.2',
     'device-access', ['usermod', 'video']),
    # jax/5555
    ("On a Kaggle notebook I did `!export XLA_PYTHON_CLIENT_MEM_FRACTION=.5` but jax still grabs 75% of the T4's memory on the first op. Ignored?",
     'env-not-applied', ['import jax']),
    ('jupyter lab 里 `!export XLA_PYTHON_CLIENT_PREALLOCATE=false` 没用，jax 一上来还是把 A100 显存占了 75%',
     'env-not-applied', ['import jax', 'XLA_PYTHON_CLIENT_PREALLOCATE']),
    # vllm/47387
    ("vllm serve Qwen/Qwen3-4B on WSL 2 (Ubuntu 24.04), RTX 3060 laptop gpu. engine init crashes saying UVA isn't available",
     'wsl', ['VLLM_WSL2_ENABLE_PIN_MEMORY=1']),
    ('win11 + wsl2 跑 vllm 0.25，显卡 4070 Ti，启动的时候报 UVA is not available 然后 engine 起不来',
     'wsl', ['VLLM_WSL2_ENABLE_PIN_MEMORY=1']),
    # torchtitan/853
    ('torchrun with 4x A100 inside a docker container (plain docker run --gpus all). NCCL fails at init: error while creating shared memory segment under /dev/shm',
     'multi-gpu-transport', ['shm-size']),
    ('docker 里用 deepspeed 多卡训练 llama-factory，8 张 4090，报 NCCL unhandled system error，日志里说 /dev/shm 创建共享内存段失败',
     'multi-gpu-transport', ['shm-size']),
    # trl/999
    ('升级 trl 到 0.9 之后，同样的 SFT 脚本在 3090 上 OOM 了，以前老版本只用 12G 显存',
     'out-of-memory', ['gradient_checkpointing']),
    ('After upgrading trl my DPO run of mistral-7b on an A6000 runs out of memory; the same config worked on the old version',
     'out-of-memory', ['gradient_checkpointing']),
    # llama.cpp/18159
    ('llama.cpp HIP build on a Ryzen AI Max+ 395 (128GB): the UMA detection limits the memory to the BIOS carve-out even though I raised TTM to 96 GB, so big models do not load',
     'apu-memory', ['GGML_CUDA_ENABLE_UNIFIED_MEMORY']),
    ('8060S 核显，llama-server 的 rocm 版本只识别到 BIOS 里分的显存，GTT 设了 100G 也用不上，大模型加载失败',
     'apu-memory', ['GGML_CUDA_ENABLE_UNIFIED_MEMORY']),
    # LlamaFactory/5167
    ('服务器 cuda 11.3，torch 1.12，用 bf16 训练报错，升级 torch 又跑不起来。llamafactory lora sft 怎么不用 bf16？',
     'precision', ['fp16']),
    ("LLaMA-Factory: bf16: true crashes on our old cluster (torch 1.13, cuda 11.6) and we can't upgrade torch. How do I train without bf16?",
     'precision', ['fp16']),
    # sglang/1911
    ('Running sglang on MI300X with ROCm 6.3 - do I need flashinfer? pip install flashinfer fails',
     'attention', ['--attention-backend triton']),
    ('7900xtx 上跑 sglang，flashinfer 装不上（好像只有 CUDA 版），怎么启动？',
     'attention', ['--attention-backend triton']),
    # rocm/192
    ('RX 480 on an old Core i7-3770 board, rocminfo shows no GPU agent. dmesg says kfd skipped the device because PCI rejects atomics',
     'platform-bios', ['atomics']),
    ('至强 E5-2680 v2 + RX 590，dmesg 显示 kfd: skipped device 1002:67df, PCI rejects atomics，rocminfo 里没有 GPU',
     'platform-bios', ['atomics']),
    # pytorch/128302
    ('Vega Frontier Edition (gfx900), torch 2.3 +rocm6.0: during SD generation the screen freezes and dmesg shows a ring timeout',
     'gpu-hang', ['rocm6.1']),
    ('MI25 刷了 WX9100 的 bios (gfx900)，ComfyUI 出图时显卡直接挂掉，dmesg 里 ring gfx timeout，torch 装的是 rocm6.0 版本',
     'gpu-hang', ['rocm6.1']),
    # MIOpen/3862
    ('Windows 11, RX 9070 XT (gfx1201), PyTorch built with TheRock. ComfyUI VAE decode fails: MIOpen hiprtc compile error on naive_conv.cpp -> miopenStatusUnknownError',
     'miopen-kernel', ['MIOPEN_FIND_MODE']),
    ('win11 下用 TheRock 的 torch，9060XT，跑 SD 卷积的时候 MIOpen 报 HIPRTC_ERROR_COMPILATION，naive_conv 编译失败',
     'miopen-kernel', ['MIOPEN_FIND_MODE']),
    # LlamaFactory/4293
    ('CUDA_VISIBLE_DEVICE=0 llamafactory-cli train qwen_lora.yaml，结果两张 3090 都在占显存',
     'visibility', ['CUDA_VISIBLE_DEVICES=0']),
    ('I ran `CUDA_VISIBLE_DEVICE=2 python train.py` but nvidia-smi shows all four GPUs in use',
     'visibility', ['CUDA_VISIBLE_DEVICES=2']),
    # ComfyUI-Docker/67
    ('docker run --device /dev/kfd --device /dev/dri --group-add video my-comfy-image fails right away: unable to find group video, no matching entries in group file',
     'device-access', ['video']),
    ('podman run --group-add render 启动容器报错，说找不到 render 组 (no matching entries in group file)',
     'device-access', ['render']),
    # webui-amdgpu/469
    ('webui-user.bat: set COMMANDLINE_ARGS=--backend directml ; RX 6600, Win 11; still says Torch is not able to use GPU',
     'env-not-applied', ['--use-directml']),
    ('A卡 webui（amdgpu 分支）在 webui-user.bat 里加了 --backend directml，还是报 Torch is not able to use GPU，显卡 RX 5700XT',
     'env-not-applied', ['--use-directml']),
    # rocm/4471
    ('WSL2 里 rocminfo 只看到 CPU，看不到我的 9070XT，rocm-smi 也报错',
     'wsl', ['25.6.1']),
    ('new Radeon RX 9070 XT, rocminfo inside WSL only lists my Ryzen 7 9700X as an agent, no GPU',
     'wsl', ['Adrenalin']),
    # lightning/19425
    ('单机多卡 DDP 训练卡住了，驱动升级到 550 之后就这样，GPU 利用率一直 100%',
     'multi-gpu-transport', ['NCCL_P2P_DISABLE=1']),
    ('DDP on 2x RTX 4090 hangs at the first all_reduce after a driver update to 560; GPU util stuck at 100%',
     'multi-gpu-transport', ['NCCL_P2P_DISABLE=1']),
    # ms-swift/6209
    ('a100*8 用 swift grpo 全参训练 qwen2.5-32b，开了 zero3 还是 OOM',
     'out-of-memory', ['move_model_batches']),
    ('ms-swift GRPO LoRA on 2x A10 with qwen3-4b runs out of GPU memory even with deepspeed zero2',
     'out-of-memory', ['move_model_batches']),
    # rocm/5562
    ('Strix Halo (Ryzen AI Max 395, 128GB), Fedora 43 kernel 6.17: amdttm.page_pool_size on the kernel cmdline is ignored, GTT stays at 62 GB. I want 110 GiB for the GPU',
     'apu-memory', ['ttm.pages_limit', '28835840']),
    ('AI MAX+ 395 的机器，内核参数写了 amdttm.pages_limit 没生效，GTT 还是默认一半内存，想给 GPU 96G',
     'apu-memory', ['ttm.pages_limit', '25165824']),
    # Qwen3/710
    ('T4 显卡跑 Qwen2.5-VL 报 cutlassF: no kernel found to launch，torch 2.3',
     'precision', ['float16']),
    ("getting a cutlass 'no kernel found to launch' error when running Qwen3-8B on a Tesla V100",
     'precision', ['float16']),
    # ms-swift/2089
    ('warning at startup: import flash_attn rotary fail. A100, torch 2.3, cuda 12.1',
     'attention', ['rotary']),
    ('推理时提示 flash_attn rotary 导入失败，显卡 3090，ubuntu20.04',
     'attention', ['rotary']),
    # ROCm/558
    ('E5-2690 v2 + RX 570，ubuntu 18.04 装了 rocm 3.5，rocminfo 里没有显卡，dmesg 有 PCI rejects atomics',
     'platform-bios', ['atomics']),
    ('old Sandy Bridge i5-2500K with an RX 580; kfd skips the device because the PCI rejects atomics',
     'platform-bios', ['atomics']),
    # rocm/5379
    ('Proxmox: passed the 7900 XTX through to a Windows VM, shut the VM down, now in an LXC on the host rocminfo says Unable to open /dev/kfd read-write: Invalid argument',
     'gpu-hang', ['reboot']),
    ('pve 下 9070 直通给虚拟机后又还给宿主机，lxc 里 rocminfo 报 Unable to open /dev/kfd read-write: Invalid argument，权限都是对的 crw-rw-rw-',
     'gpu-hang', ['reboot']),
    # tvm/16154
    ('MIOpen: No invoker was registered for convolution backward data. Was find executed?',
     'miopen-kernel', ['miopenFindConvolutionForwardAlgorithm']),
    ('自己写的推理程序直接调 miopenConvolutionForward，报 No invoker was registered for convolution forward，Was find executed?',
     'miopen-kernel', ['miopenFindConvolutionForwardAlgorithm']),
    # ollama/17832
    ('ollama 服务用 systemctl edit 加了 Environment="CUDA_VISIBLE_DEVICES=1"，两张 A6000，但 nvidia-smi 看模型总在另一张卡上',
     'visibility', ['UUID']),
    ('I export CUDA_VISIBLE_DEVICES=1 before `ollama run llama3`, but the model always loads on GPU 0 (4x L40S, Ubuntu 24.04)',
     'visibility', ['UUID']),
    # ollama/6685
    ('ollama:rocm container on a 7800 XT: rocminfo inside the container says Unable to open /dev/kfd read-write: Permission denied, root is not member of video group',
     'device-access', ['--group-add']),
    ('docker 里跑 ollama:rocm，6800XT，容器里 /dev/kfd 打不开 Permission denied',
     'device-access', ['--group-add']),
    # pytorch3d/318
    ("Dockerfile 里写了 RUN FORCE_CUDA=1 && pip install 'git+https://github.com/facebookresearch/detectron2.git'，build 成功但运行时说 not compiled with GPU support",
     'env-not-applied', ['FORCE_CUDA=1 pip install']),
    ('my Dockerfile has `RUN FORCE_CUDA=1 && pip install -e .` for pytorch3d; image builds fine but at runtime: Not compiled with GPU support',
     'env-not-applied', ['FORCE_CUDA=1 pip install']),
    # cudf/11382
    ('cuDF 23.10 on WSL2 Ubuntu 22.04 with a GTX 1080 Ti: cudaErrorNotSupported operation not supported on basically any operation',
     'wsl', ['Pascal']),
    ('wsl2 里用 rapids cudf，显卡 1070，报 801 cudaErrorNotSupported operation not supported',
     'wsl', ['Pascal']),
    # EDTalk/24
    ('windows 上训练报错 use_libuv was requested but PyTorch was build without libuv support，torch 2.5',
     'multi-gpu-transport', ['USE_LIBUV=0']),
    ('On Windows 10 with torch 2.4.1, accelerate launch fails: libuv was requested but pytorch was built without libuv',
     'multi-gpu-transport', ['USE_LIBUV']),
    # demucs/9
    ('demucs on my GTX 950 (2GB): CUDA out of memory every time',
     'out-of-memory', ['-d cpu']),
    ('用 demucs 分离音轨，显卡 MX150 只有 2G 显存，报 CUDA out of memory',
     'out-of-memory', ['-d cpu']),
    # rocm/2014
    ('Ryzen 7 5700U 核显，ubuntu 22.04，torch 报 HIP out of memory，total capacity 只有 512MB',
     'apu-memory', ['BIOS']),
    ('780M iGPU (Ryzen 7 7840HS) shows only 512 MiB total capacity in torch and goes OOM instantly',
     'apu-memory', ['BIOS']),
    # ms-swift/3896
    ('ms-swift sft on a V100 gives nan loss; I pass --fp16 false --torch_dtype float32 but the TrainingArguments still get fp16=True',
     'precision', ['fp16']),
    ('swift sft 在 T4 上 loss 变 nan，传了 --fp16 false 不生效，还是 fp16 混合精度',
     'precision', ['fp16']),
    # PointLLM/47
    ('训练时提示 FlashAttention only supports Ampere GPUs or newer，显卡是 V100',
     'attention', ['attn_implementation']),
    ("flash attention complains it only supports ampere or newer - I'm on a Titan RTX",
     'attention', ['attn_implementation']),
    # rocm/2071
    ('Ubuntu 20.04, RX 470 4GB: installed ROCm 4.2 and 5.4 several times, rocminfo shows no GPU agent at all, only the CPU, and clinfo has no devices',
     'platform-bios', ['atomics']),
    ('RX 580 8G，全新 ubuntu 20.04 装了 rocm 4.3 和 5.4.3，rocminfo 里没有 GPU agent，clinfo 也没有设备',
     'platform-bios', ['atomics']),
    # InvokeAI/9539
    ('升级到 7.0 内核后 ComfyUI VAE 解码时 dmesg 报 ring gfx_0.0.0 timeout，然后 ring reset，6.17 内核下没问题，显卡 9070XT',
     'gpu-hang', ['lockup_timeout']),
    ("Since kernel 7.0 my 7900 XTX resets during long jobs: 'ring gfx_0.0.0 timeout' then 'device wedged, but recovered through reset'. fine on 6.17",
     'gpu-hang', ['lockup_timeout']),
    # MIOpen/3964
    ('Radeon 8060S, torch 2.9 rocm7.1: MIOpen says Invalid elapsed time detected in EvaluateInvokers and every conv ends in miopenStatusUnknownError',
     'miopen-kernel', ['cudnn.enabled']),
    ('Strix Halo 上跑卷积报 MIOpen Error EvaluateInvokers: Invalid elapsed time，miopenStatusUnknownError',
     'miopen-kernel', ['cudnn.enabled']),
    # meld/114
    ('after the Slurm upgrade to 23.02, with --gpus-per-task=1 each rank sees a different CUDA_VISIBLE_DEVICES and our per-host device check fails',
     'visibility', ['--gpus-per-node']),
    ('slurm 用 --gpus-per-task=1 提交多进程作业，每个 rank 的 CUDA_VISIBLE_DEVICES 都只有自己那张卡，程序检查设备不一致报错',
     'visibility', ['--gpus-per-node']),
    # nvidia-docker/1671
    ('容器跑了几天后 nvidia-smi 报 Failed to initialize NVML: Unknown Error，重启容器就好了 (docker --gpus all)',
     'device-access', ['create-dev-char-symlinks']),
    ('After some hours the GPUs vanish inside my running docker containers: nvidia-smi there says NVML failed to initialize with an unknown error. Restarting the container fixes it (Ubuntu 22.04, --gpus all)',
     'device-access', ['create-dev-char-symlinks']),
    # openmm/3656
    ('Upgraded OpenMM to 8.1 in a new conda env, now \'There is no registered Platform called "CUDA"\', the only platform listed is Reference',
     'env-not-applied', ['OPENMM_PLUGIN_DIR']),
    ('conda 新环境装了 openmm 8.0，getNumPlatforms 只有 1 个，就是 Reference，没有 CUDA 平台',
     'env-not-applied', ['OPENMM_PLUGIN_DIR']),
    # rocm/5866
    ('WSL2 Ubuntu 24.04 装了 ROCm 6.4.1 和 pytorch，torch 说 No HIP GPUs are available，显卡 7900 GRE，Adrenalin 驱动 25.9.1',
     'wsl', ['Adrenalin']),
    ('ROCm 6.3 in WSL, RX 7800 XT: torch.cuda.is_available() is False (No HIP GPUs are available). Windows driver is 25.3.1',
     'wsl', ['Adrenalin']),
]

NEGATIVES = [
    # root-only said the other way round: fails as root, works as the user
    ("torch.cuda.is_available() only returns False when I run it as root; as my user it is True", "usermod"),
    # /dev/kfd's EINVAL with nothing said of a passthrough or of the user's access: not the stuck-GPU reading
    ("rocminfo\nUnable to open /dev/kfd read-write: Invalid argument", "reboot the host"),
    # NVML's other failure: not the cgroup reading
    ("nvidia-smi in the container: Failed to initialize NVML: Driver/library version mismatch",
     "create-dev-char-symlinks"),
    # sglang with FlashInfer on an Ada card: not the AMD / pre-Ampere reading
    ("sglang with flashinfer on an RTX 4090 crashes at startup", "--attention-backend triton"),
    # a visibility variable ignored outside Ollama: not Ollama's server reading
    ("CUDA_VISIBLE_DEVICES=1 python train.py but it always uses GPU 0", "ollama.service"),
    # ms-swift asked for model parallel: not data parallel's NPROC_PER_NODE
    ("swift sft 想要模型并行，把 72B 模型切到 8 张卡上怎么设置", "NPROC_PER_NODE"),
    # the cutlass message on an Ampere card: the format is not the cause
    ("RuntimeError: cutlassF: no kernel found to launch! on my A100", "bf16 needs compute capability"),
    # fp16 crashing where bf16 works: not the bf16-off reading
    ("fp16 crashes with nan, bf16 works fine on my A100", "turn bf16 off"),
    # MIOpen's kernel build failing: not the Find-step reading
    ("MIOpen Error: /long_pathname/MIOpen/src/hipoc/hipoc_program.cpp:304: Code object build failed. Source: "
     "MIOpenBatchNormFwdTrainSpatial.cl", "miopenFindConvolutionForwardAlgorithm"),
    # a network card's ring timeout in dmesg: not the GPU's
    ("dmesg shows a tx ring timeout on eth0 during the download", "lockup_timeout"),
    # OpenMM listing its CPU plugin beside Reference: plugins load, not the plugin-folder reading
    ("conda 装了 openmm 8.0，platforms 只有 Reference 和 CPU，没有 CUDA", "unset OPENMM_PLUGIN_DIR"),
    # a healthy Polaris on an old release: GPU seen, no atomics reading
    ("RX 580 + rocm 4.3，rocminfo 正常列出 gfx803 agent，没有 GPU 报错", "atomics"),
    # Ollama using both GPUs as asked: no choice ignored
    ("ollama 设置了 CUDA_VISIBLE_DEVICES=0,1，两张卡都在用，正常", "GPU-<uuid>"),
    # a discrete Radeon short of memory in Chinese: not the APU's GTT
    ("RX 7900 XTX 跑 70B 显存不够用，只能用 24G", "ttm.pages_limit"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)


def test_the_facts_read_from_words():
    """The facts the retellings needed, read from prose: a card named without its RX, an APU beside 核显, a container
    said in words (and not where it is said not to be there), root-only said as "only ... when I run it as root"."""
    def facts(text, kind):
        return [(f.value, f.detail) for f in extract_facts(text).of(kind)]
    assert ("RX 9070 XT", "gfx1201") in facts("显卡 9070XT", "gpu")
    assert ("RX 9060 XT", "gfx1200") in facts("my 9060XT", "gpu")
    assert ("RX 6650 XT", "gfx1032") in facts("6650XT here", "gpu")
    assert facts("i9 9950X cpu", "gpu") == []
    assert ("Ryzen 7 5700U", "gfx90c") in facts("Ryzen 7 5700U 核显，torch 报 HIP out of memory", "gpu")
    assert ("container", "") in facts("rocminfo inside the container says Permission denied", "platform")
    assert ("container", "") in facts("docker 里跑 ollama:rocm", "platform")
    assert ("container", "") not in facts("bare metal, not in a container", "platform")
    assert facts("pytorch only sees my 7800xt when i run it as root", "root_only")
    assert not facts("it only fails when I run it as root", "root_only")
    assert ("ubuntu", "22.04") in facts("ubuntu 22.04，torch 2.3", "os")
