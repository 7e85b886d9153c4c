"""doctor, round 11 (issue 63): readings for the spent held-out cases of round 10. Each paste is written for its
reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the early open module refusing a GeForce card (another card, the refusal unwrapped on one line): the opt-in
    ("journalctl -k | grep NVRM\nNVRM: Open nvidia.ko is only ready for use on Data Center GPUs. To force use of Open "
     "nvidia.ko on other GPUs, see the 'OpenRmEnableUnsupportedGpus' kernel module parameter\nRTX 3060, "
     "nvidia-open 525.60.11", "driver", ["NVreg_OpenRmEnableUnsupportedGpus=1", "/etc/modprobe.d"]),
    # GSP asked off with the option, said by a user of the open package on an Ada card: the proprietary modules
    ("Installed nvidia-driver-550-open on Ubuntu 22.04 with an RTX 4090. Added options nvidia "
     "NVreg_EnableGpuFirmware=0 in /etc/modprobe.d/gsp.conf and rebooted, but nvidia-smi -q still shows the GSP "
     "Firmware Version", "driver", ["GSP", "sudo rm /etc/modprobe.d/gsp.conf", "proprietary"]),
    # the same asked for a Blackwell data-center card: it stays on
    ("how can I turn off GSP on our B200 nodes? the open kernel modules ignore NVreg_EnableGpuFirmware=0", "driver",
     ["GSP", "B200"]),
    # a server's own out-of-memory words for the prefill budget (another model, GPU and number): that flag
    ("docker run --gpus all ghcr.io/huggingface/text-generation-inference:2.0 --model-id mistralai/Mistral-7B-v0.1 on "
     "one A10G\nError: Warmup(Generation(\"Not enough memory to handle 8192 prefill tokens. You need to decrease "
     "`--max-batch-prefill-tokens`\"))", "out-of-memory", ["--max-batch-prefill-tokens"]),
    # a tool's own group check (said by another tool, one group): that group
    ("$ rocm-diag\nERROR: user is missing required group: render (add the user to it)\nRX 7900 XT on Ubuntu 24.04",
     "device-access", ["usermod -aG render"]),
    # a stale CDI spec for an AMD card under docker (another engine, vendor and node): its own toolkit
    ("docker run --rm --device amd.com/gpu=all rocm/rocm-terminal rocminfo\ndocker: Error response from daemon: "
     "failed to inject CDI devices: failed to stat CDI host device \"/dev/dri/renderD130\": no such file or directory",
     "device-access", ["amd-ctk cdi generate", "/etc/cdi/amd.json"]),
    # a CDI name no spec defines (podman, another wording): generate it
    ("podman run --device nvidia.com/gpu=0 docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi\nError: setting "
     "up CDI devices: unresolvable CDI devices nvidia.com/gpu=0", "device-access",
     ["nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"]),
    # SLURM's per-task binding met by a rank's device choice (another tool, sbatch lines, HIP's wording): per node
    ("sbatch job for torchrun-free DDP on 2 nodes x 4 MI250X\n#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-task=1\n"
     "srun python train.py\nrank 1: RuntimeError: HIP error: invalid device ordinal", "visibility",
     ["--gpus-per-node=4", "--ntasks-per-node=4"]),
    # deepspeed said to override the variable (prose, HIP's variable, another cluster): its own --include
    ("With deepspeed 0.14 on our MI210 box the HIP_VISIBLE_DEVICES I export is ignored - every run lands on all four "
     "GPUs", "visibility", ["deepspeed --include localhost:"]),

    # jax's CUDA plugin failing in its initialize() (another release, another missing attribute, pip list style)
    ("WARNING: Jax plugin configuration error: Exception when calling jax_plugins.xla_cuda12.initialize()\n"
     "AttributeError: module 'jaxlib.xla_extension' has no attribute 'register_plugin'\njax==0.4.28\njaxlib==0.4.28",
     "wheel-platform", ["jax[cuda12]==0.4.28", "jax-cuda12-plugin"]),
    # a start-up variable set with a notebook's shell escape (TensorFlow, Jupyter): os.environ before the import
    ("In Jupyter I run !export TF_FORCE_GPU_ALLOW_GROWTH=true before training but TensorFlow still grabs all 24 GB of "
     "the RTX 4090", "env-not-applied", ["os.environ[\"TF_FORCE_GPU_ALLOW_GROWTH\"] = \"true\"", "import tensorflow"]),
    # the same said ignored in a Kaggle notebook for torch's allocator (no shell escape)
    ("Kaggle notebook, T4 x2: os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True' seems to be ignored, "
     "the fragmentation warning stays", "env-not-applied", ["import torch", "restart"]),

    # rocm-smi under WSL (another tool and wording, Ubuntu 22.04, an RX 7800 XT): expected there, rocminfo instead
    ("Ubuntu 22.04 under WSL2, RX 7800 XT, Adrenalin 24.12.1\n$ rocm-smi\nERROR:root:Driver not initialized "
     "(amdgpu not found in modules)", "wsl", ["rocm-smi", "rocminfo"]),
    # the WSL thunk asserting in QueryAdapterInfo from torch (another program, a GeForce named beside the Radeon)
    ("wsl2 ubuntu 22.04, RX 7900 GRE plus a GeForce GTX 1650 for the displays\npython3: ./sources/wsl/libhsakmt/src/"
     "thunk_proxy/thunk_proxy.cpp:111: void thunk_proxy::QueryAdapterInfo(D3DKMT_HANDLE, ATIADAPTERINFO*): Assertion "
     "`ret == STATUS_SUCCESS' failed.\nAborted", "wsl", ["GeForce GTX 1650", "Device Manager"]),

    # a trainer's bf16 check refusing a card that has bf16 (another trainer, an Ampere workstation card, newer words)
    ("axolotl on an RTX A5000 (24 GB), torch 2.3.1+cu121\nValueError: Your setup doesn't support bf16/gpu. You need "
     "Ampere+ GPU with cuda>=11.0", "precision", ["upgrade axolotl", "pip install -U axolotl"]),

    # Gemma 2 giving NaN logits on a padded batch (another size, a pipeline, said in other words): eager attention
    ("gemma-2-9b-it via transformers 4.44.0 on an A100: batched generation with padding_side='left' - the logits of "
     "the shorter prompt are all nan", "attention", ["attn_implementation=\"eager\""]),
    # NaN outputs with SDPA and padding for another model (no soft-capping): the same remedy
    ("Qwen2-7B with attn_implementation='sdpa', two prompts padded to the same length: model(**batch) returns nan "
     "hidden states for the padded one (RTX 4090, bf16)", "attention", ["attn_implementation=\"eager\""]),

    # whether whisperX (faster-whisper's engine under it) runs on an AMD card, asked in other words
    ("Can whisperX run on ROCm? I have no NVIDIA card here, only AMD", "gpu-unsupported",
     ["CTranslate2", "ROCm builds"]),

    # Ollama 0.31 in docker on a Radeon 780M, the server's own line (another APU, a container): the variable for it
    ("docker run -d --device /dev/kfd --device /dev/dri ollama/ollama:0.31.2-rocm\ntime=2026-07-01T10:00:00Z "
     "level=INFO source=gpu.go:120 msg=\"dropping integrated GPU; to enable, set OLLAMA_IGPU_ENABLE=1\" "
     "library=ROCm compute=gfx1103 description=\"AMD Radeon 780M Graphics\"", "visibility",
     ["-e OLLAMA_IGPU_ENABLE=1"]),
    # the same told by ollama ps after an upgrade on an Intel iGPU (no log line)
    ("Upgraded ollama to 0.32.5 on my laptop with Intel Iris Xe graphics and OLLAMA_VULKAN=1: ollama ps now shows "
     "llama3.2:3b  100% CPU", "visibility", ["OLLAMA_IGPU_ENABLE=1"]),

    # an empty HIP_VISIBLE_DEVICES that hides nothing (another program, quoted empty, ROCm 3.6): ROCr's variable
    ("ROCm 3.6 on CentOS 8 with two MI50s\nHIP_VISIBLE_DEVICES='' python3 -c 'import torch; "
     "print(torch.cuda.device_count())'\n2\nit still sees both GPUs", "visibility",
     ["ROCR_VISIBLE_DEVICES=", "3.7"]),

    # hipconfig not found in Ubuntu's words with ROCm's path printed (another tool, an AMD card): its bin on PATH
    ("Ubuntu 22.04, ROCm 6.1 from amdgpu-install, RX 7600\n$ echo $ROCM_PATH\nROCM_PATH=/opt/rocm\n$ hipconfig --full\n"
     "Command 'hipconfig' not found, but can be installed with:", "rocm-libs-missing",
     ["export PATH=$PATH:/opt/rocm/bin", "hipconfig --version"]),

    # a hang put down to CWSR in other words (a workstation card, a training job, no dpkg listing): turn it off
    ("Radeon PRO W7900, ROCm 6.4.1, kernel 6.11: after ~2 h of fine-tuning the GPU hangs; AMD's engineer says the "
     "CWSR path hangs on this MES firmware", "gpu-hang", ["amdgpu.cwsr_enable=0", "/sys/module/amdgpu/parameters"]),

    # no xformers wheel found for the torch in use (Linux, another torch and CUDA, pip's words around it): its index
    ("Ubuntu 22.04, torch 2.5.1+cu124 from pytorch.org\nI cannot find any xformers wheel for it on PyPI, pip wants to "
     "build from source", "wheel-platform", ["--index-url https://download.pytorch.org/whl/cu124"]),
    # flash-attn asked how to build on Windows for a torch build: the table's Windows row
    ("Windows 11, Python 3.12, torch==2.6.0+cu124 - how do I compile flash-attn locally on windows? no wheel for "
     "this torch on PyPI", "wheel-platform", ["prebuilt Windows wheel"]),

    # a TheRock build on Linux whose rocminfo finds no device on another target (HIP's error code, rocminfo's words)
    ("Built TheRock from source on Fedora 42 for my Radeon RX 9060 XT (gfx1200)\n$ ./build/dist/rocm/bin/hipInfo\n"
     "hipErrorNoDevice: no ROCm-capable device is detected", "arch-missing",
     ["-DTHEROCK_AMDGPU_TARGETS=gfx1200"]),

    # a newer ROCm crashing where an older one named in the paste works (another card, library, tool and releases)
    ("whisper.cpp HIP build on an RX 6800 (gfx1030): with ROCm 6.4.1 it segfaults in librocblas at the first "
     "matmul\nrebuilding against ROCm 6.2.4 works fine", "gpu-unsupported",
     ["install ROCm 6.2.4 beside the system's ROCm 6.4.1", "/opt/rocm-6.2.4"]),

]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # the parameter already set: not the opt-in again
    ("options nvidia NVreg_OpenRmEnableUnsupportedGpus=1\nNVRM: Open nvidia.ko is only ready for use on Data Center "
     "GPUs.\nNVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)", "sudo tee /etc/modprobe.d/nvidia-open"),
    # GSP disabled on the proprietary driver of a Turing card: that works, nothing about the open modules
    ("RTX 2080 Ti with the proprietary 535 driver: I set NVreg_EnableGpuFirmware=0 to fix stutter in games",
     "GSP cannot be disabled"),
    # a container started without the devices at all (no CDI): not the CDI spec
    ("docker run --rm rocm/pytorch python -c 'import torch; print(torch.cuda.is_available())'\nFalse\nls: cannot "
     "access '/dev/kfd': No such file or directory", "cdi generate"),
    # a group named in a question with no check refusing: not a group fix from that word alone
    ("which group owns /dev/dri/card0 on Fedora 40? my render node works fine", "usermod -aG"),
    # SLURM per-task GPUs with each rank using cuda:0 and an out-of-memory error: not the binding
    ("#SBATCH --gpus-per-task=1\nsrun python train.py\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
     "2.00 GiB", "--gpus-per-node"),
    # a visibility variable ignored by a plain python script (no deepspeed): not deepspeed's launcher
    ("CUDA_VISIBLE_DEVICES=1 is ignored, python train.py still runs on GPU 0 (RTX 3090 x2)", "deepspeed --include"),
    # the spec lists the device and the engine still cannot resolve it: not a stale spec
    ("$ nvidia-ctk cdi list\nINFO[0000] Found 2 CDI devices\nnvidia.com/gpu=all\n$ podman run --device nvidia.com/gpu=all "
     "ubuntu nvidia-smi\nError: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all", "cdi generate"),
    # a start-up variable in a plain script, not said ignored: no notebook reading
    ("export XLA_PYTHON_CLIENT_MEM_FRACTION=.5\npython train.py\njax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of "
     "memory while trying to allocate 1.2GiB", "first cell"),
    # amd-smi failing on native Linux (no WSL): not "expected under WSL"
    ("Ubuntu 24.04, RX 9070 XT\n$ amd-smi list\nERROR: Unable to get devices, driver not initialized (amdgpu not found "
     "in modules)", "expected under WSL"),
    # amd-smi and rocminfo both failing under WSL: the runtime, not the smi tool
    ("WSL2 Ubuntu 24.04 with ROCm 6.4.2\n$ amd-smi\nERROR: Unable to detect any GPU devices\n$ rocminfo\nhsa api call "
     "failure at: ./sources/wsl/rocminfo/rocminfo.cc:1306\nhsa_init Failed", "expected under WSL"),
    # the same refusal on a Turing card: it has no bf16, fp16 is the answer, not an upgrade
    ("unsloth on a Quadro RTX 8000 / T4\nValueError: Your setup doesn't support bf16/gpu. You need Ampere+ GPU with "
     "cuda>=11.0", "pip install -U"),
    # Gemma 1's 2B size (gemma-2b) with an fp16 NaN loss: not the Gemma 2 soft-capping reading
    ("google/gemma-2b LoRA in fp16 on a T4: loss becomes nan after 30 steps", "attn_implementation=\"eager\""),
    # faster-whisper failing with an error on an NVIDIA machine: not the AMD question
    ("faster-whisper large-v3 on an RTX 3060: does it support AMD too? RuntimeError: CUDA failed with error out of "
     "memory", "does not support AMD GPUs"),
    # an older Ollama on an APU running on the CPU: not the 0.30 iGPU switch
    ("ollama 0.5.7 on a Ryzen 7 7840U (Radeon 780M): ollama ps shows 100% CPU", "OLLAMA_IGPU_ENABLE"),
    # an index set and the job on the wrong card: not the empty-value reading
    ("HIP_VISIBLE_DEVICES=1 python train.py still uses GPU 0 (two RX 7900 XTX)", "ROCR_VISIBLE_DEVICES= <the command>"),
    # hipcc not found with no ROCm path shown: not "only PATH lacks it"
    ("$ hipcc --version\nCommand 'hipcc' not found, but can be installed with:\nsudo apt install hipcc",
     "export PATH=$PATH:/opt/rocm/bin"),
    # a hang put down to the MES firmware alone (no CWSR): the firmware rollback, not cwsr_enable
    ("RX 7800 XT: since linux-firmware 20250311 the GPU hangs with MES firmware 0x7e hang messages in dmesg",
     "cwsr_enable=0"),
    # an xformers wheel question with no torch build named: no index is guessed for it
    ("can't find a wheel of xformers, what do I do?", "--index-url https://download.pytorch.org/whl/cu"),
    # a torch from TheRock's index finding no device: the install readings', not a source build's targets
    ("pip install torch --index-url https://rocm.nightlies.amd.com/v2/gfx110X-all/ (TheRock 7.9 build)\n"
     "python -c 'import torch; torch.zeros(1).cuda()'\nRuntimeError: No HIP GPUs are available\nRX 7900 XTX gfx1100",
     "THEROCK_AMDGPU_TARGETS"),
    # a crash under one ROCm with no older release said to work: not "stay on the older release"
    ("llama.cpp on an RX 6700 XT with ROCm 6.4.1: Segmentation fault (core dumped) while loading the model",
     "beside the system's ROCm"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
