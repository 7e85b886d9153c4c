"""doctor, round 9 (issue 63): readings of the torch-build family (a CPU build or the build for another CUDA, a runtime
without its GPU backend, a nightly that regressed) and of the wheels of one CUDA beside a torch of another. Each paste
is written for its reading (another GPU, tool and wording than the mined case that asked for it); the negatives keep
each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.facts import extract_facts
from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a +cpu torch shown beside "CUDA is not available" (axolotl, another wording): the CUDA build from pytorch.org
    ("axolotl on Windows 11: CUDA is not available, training would run on the CPU\n>>> torch.__version__\n"
     "'2.5.1+cpu'", "torch-build", ["download.pytorch.org/whl/cu"]),
    # a +cpu torch in an environment listing, the GPU said unused in Chinese: the CUDA build
    ("- `llamafactory` version: 0.9.1\n- PyTorch version: 2.5.1+cpu\n训练时用不了GPU，只用cpu", "torch-build",
     ["download.pytorch.org/whl/cu"]),
    # jaxlib's own CPU fallback warning on an NVIDIA card: jax's CUDA build, not torch's
    ("jaxlib 0.4.1 on an A100: An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not "
     "installed. Falling back to cpu.", "torch-build", ["jax[cuda12]"]),
    # the trainer's own "device: cpu, n_gpu: 0" on NVIDIA cards named in Chinese: the CUDA build
    ("服务器有4张RTX 3090，但是训练跑在cpu上\n[INFO|training_args.py:2011] Process rank: 0, device: cpu, n_gpu: 0, "
     "distributed training: False, 16-bits training: True", "torch-build", ["download.pytorch.org/whl/cu"]),
    # a program's own "No NVIDIA GPU detected" beside a card named bare ("a 3070 ti"): the CPU torch in its venv
    ("kohya_ss: No NVIDIA GPU detected, so it trains on the CPU. I have a 3070 ti and the newest driver.",
     "torch-build", ["download.pytorch.org/whl/cu"]),
    # older jax's own words for its missing CUDA backend: the CPU jaxlib goes first
    ("jax 0.3.25 on an RTX 4090\nRuntimeError: Backend 'cuda' failed to initialize: NOT_FOUND", "torch-build",
     ["jaxlib", "jax[cuda12]"]),
    # llama-cpp-python's system info with BLAS = 0 and GPU layers asked for: its CUDA build through CMAKE_ARGS
    ("from llama_cpp import Llama\nllm = Llama(model_path='mistral-7b.Q4_K_M.gguf', n_gpu_layers=35)\n"
     "AVX = 1 | AVX2 = 1 | FMA = 1 | BLAS = 0 | SSE3 = 1\nthe GPU stays idle", "torch-build", ["CMAKE_ARGS"]),
    # BLAS = 0 beside a Radeon named by model only: the ROCm build of llama-cpp-python
    ("llama_cpp_python 0.2.20: BLAS = 0, not offloading to my RX 6800 XT on Ubuntu", "torch-build",
     ["CMAKE_ARGS", "GGML_HIP"]),
    # the same line from llama.cpp's own binary: its cmake option
    ("./main -m llama-2-13b.Q5_K_M.gguf -ngl 40\nsystem_info: n_threads = 8 / 16 | AVX = 1 | BLAS = 0 | NEON = 0\n"
     "nvidia-smi shows no GPU use", "torch-build", ["-DGGML_CUDA=ON"]),
    # Jan on Linux with a Radeon card left idle: its Vulkan backend
    ("Jan 0.6.4 from jan.ai on Ubuntu 24.04 with a Radeon RX 7800 XT: every model runs on the CPU only",
     "torch-build", ["vulkan", "linux-vulkan-x64"]),
    # an installer that chose the CPU torch on an AMD machine: the ROCm build by hand
    ("./install.sh\nNo GPU detected -- installing CPU-only PyTorch\nGPU: AMD Radeon RX 7900 XTX on Ubuntu 24.04",
     "torch-build", ["rocm", "torch.cuda.is_available()"]),
    # ... and on an NVIDIA machine: the CUDA build
    ("setup.bat says: no CUDA detected, installing CPU-only torch. I have an RTX 4080.", "torch-build",
     ["download.pytorch.org/whl/cu"]),
    # a CUDA 11.3 torch under an Ada card: the first CUDA with sm_89 is 11.8
    ("NVIDIA GeForce RTX 4090 with CUDA capability sm_89 is not compatible with the current PyTorch installation.\n"
     "pip list: torch 1.12.1+cu113", "torch-build", ["cu118", "11.8"]),
    # torch.__version__ printed with a CUDA 10.1 build under an Ampere card: a CUDA 11 build
    ("GeForce RTX 3060 with CUDA capability sm_86 is not compatible with the current PyTorch installation.\n"
     ">>> torch.__version__\n'1.7.1+cu101'", "torch-build", ["cu118", "11.1"]),
    # a CUDA 12.4 torch under Blackwell (torch.version.cuda said): cu128
    ("NVIDIA RTX PRO 6000 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
     ">>> torch.version.cuda\n'12.4'", "torch-build", ["cu128"]),
    # a question whether torch supports a newer card (Hopper), no error: the CUDA builds that target it
    ("Just got access to an H100 box. Is the H100 supported by pytorch yet? Is there a workaround?", "torch-build",
     ["cu118", "sm_90"]),
    # an extension built with a newer toolkit than torch's CUDA (causal-conv1d, 12.4 vs 11.8): the cu124 torch
    ("pip install causal-conv1d --no-build-isolation\nRuntimeError: The detected CUDA version (12.4) mismatches the "
     "version that was used to compile PyTorch (11.8). Please make sure to use the same CUDA versions.",
     "torch-build", ["cu124", "12.4"]),
    # torchvision's roi_align without CUDA kernels beside a cu118 torch: all three from one index
    ("detectron2 inference\nNotImplementedError: Could not run 'torchvision::roi_align' with arguments from the 'CUDA' "
     "backend.\ntorch 2.3.1+cu118", "torch-build", ["torchvision", "whl/cu118"]),
    # a dated nightly that broke what the last one ran (another GPU, a CUDA nightly): a newer nightly or a pin
    ("torch 2.8.0.dev20250510+cu128 on an RTX 5090: torch.compile of my model now fails with an AssertionError in "
     "inductor; it was working with last week's nightly", "torch-build", ["nightly/cu128", "2.8.0.dev"]),
    # "since updating" to a ROCm nightly: the same reading, the ROCm nightly index
    ("Since updating to torch 2.7.0.dev20250301+rocm6.3 my training script segfaults in the first matmul on an "
     "RX 7900 XTX", "torch-build", ["nightly/rocm6.3"]),
    # an AutoGPTQ wheel of one CUDA in an image whose torch is of another: AutoGPTQ's build, not torch
    ("FROM nvcr.io/nvidia/pytorch:23.10-py3 (torch 2.1.0+cu121)\nRUN pip install auto_gptq-0.4.2+cu118-cp310-cp310-"
     "linux_x86_64.whl\nCUDA extension not installed.", "wheel-platform", ["auto-gptq", "+cu121"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a +cpu torch on purpose, nothing about CUDA missing: not "install the CUDA build"
    ("torch 2.5.1+cpu on my laptop, LoRA training on the CPU finished in 3 hours", "the CPU build has to go"),
    # the trainer's log on a machine that has GPUs and uses them: no n_gpu: 0
    ("Process rank: 0, device: cuda:0, n_gpu: 1, distributed training: True", "pip cache purge"),
    # a torch whose CUDA already has the GPU's target (cu128 under sm_120): not the "predates" reading
    ("NVIDIA GeForce RTX 5080 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
     "torch 2.7.0+cu128", "predates"),
    # an older toolkit than torch's CUDA: install the toolkit (another reading), not a torch for it
    ("RuntimeError: The detected CUDA version (11.8) mismatches the version that was used to compile PyTorch (12.1).",
     "install the torch built for CUDA 11.8"),
    # the paste says no torch exists for the toolkit: not "install the torch built for it"
    ("my cuda is 12.1 but torch 2.0.1 has no cu121 build, so I use cu118\nRuntimeError: The detected CUDA version "
     "(12.1) mismatches the version that was used to compile PyTorch (11.8).", "install the torch built for CUDA 12.1"),
    # a prebuilt executable left on the CPU, no Python in sight: no torch of the user's to reinstall
    ("Running the portable exe of the latest release, models run on the CPU only (Radeon 890M)", "pip uninstall -y torch"),
    # a support question about an AMD card: not the CUDA builds' answer
    ("Does pytorch support the RX 7900 XTX? I want to train LoRAs on it", "get_arch_list"),
    # a nightly installed with nothing said to have run before: no regression to read
    ("installed the torch nightly 2.9.0.dev20250801+cu128, how do I turn on flash attention in it?",
     "install a newer nightly"),
    # llama.cpp built with its GPU backend: BLAS = 1, not a CPU build
    ("system_info: n_threads = 8 / 16 | AVX = 1 | BLAS = 1 | the GPU is slow with -ngl 20", "CMAKE_ARGS"),
    # Jan on an NVIDIA card: its CUDA runtime reading, not the Vulkan one
    ("Jan Version: 0.5.1, Windows 11, RTX 3060: it only uses the CPU", "vulkan"),
    # an installer that chose the CPU torch on a machine without a GPU named: nothing to install for
    ("No GPU detected -- installing CPU-only PyTorch", "install the ROCm build of torch yourself"),
    # an AutoGPTQ wheel whose CUDA matches torch's: not the other-platform reading
    ("torch 2.1.0+cu118\npip install auto_gptq-0.5.0+cu118-cp310-cp310-linux_x86_64.whl\nCUDA extension not installed.",
     "drop the pinned"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)


@pytest.mark.parametrize("line,model", [("8张A100的卡", "A100"), ("I have a 4060 ti with 16gb", "RTX 4060 Ti"),
                                        ("用RTX 4090跑", "RTX 4090")])
def test_gpu_names_glued_to_chinese_or_spaced_from_ti_are_read(line, model):
    assert model in [f.value for f in extract_facts(line, lambda _lines: []).of("gpu")]


def test_a_number_before_ti_in_a_sentence_about_models_is_no_gpu():
    # "3080" alone is not a card; only a Ti after it makes one
    assert not extract_facts("trained 3080 steps", lambda _lines: []).of("gpu")
