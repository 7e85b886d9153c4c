"""doctor, round 11 (issue 63): readings of the wheel-platform family found on batch 10's training cases. Each paste
is written for its reading (another GPU, tool, version or wording than the mined case that asked for it); the
negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the discontinued DirectML torch fork asked for by a Python it never had: its successor, in a Python it has
    ("Windows 11, RX 6600, Python 3.11.4\npip install pytorch-directml\nERROR: No matching distribution found for "
     "pytorch-directml", "wheel-platform", ["torch-directml", "python 3.10"]),
    # a jaxlib CUDA build pinned by its local label: the CUDA plugin extra
    ("pip install jaxlib==0.4.31+cuda12.cudnn91 -f https://storage.googleapis.com/jax-releases/jax_cuda_releases.html\n"
     "ERROR: Could not find a version that satisfies the requirement jaxlib==0.4.31+cuda12.cudnn91 (from versions: "
     "0.4.7, 0.4.31)\nRTX A5000, Ubuntu 22.04", "wheel-platform", ["jax[cuda12]"]),
    # the retired tensorflow-gpu name on a new Python
    ("python 3.12 on Ubuntu 24.04 with an RTX 4090\n$ pip install tensorflow-gpu\nERROR: Could not find a version that "
     "satisfies the requirement tensorflow-gpu (from versions: none)", "wheel-platform", ["tensorflow[and-cuda]"]),
    # a request for a package's Windows build, no error line (another package, another wording): the table's row
    ("Is there a flash-attn wheel for win64? I have an RTX 4070 Ti and Python 3.11, only the linux ones are on the "
     "release page", "wheel-platform", ["prebuilt Windows wheel"]),
    ("looking for vllm for Windows, my GPU is an RTX 3090", "wheel-platform", ["WSL 2"]),
    # DeepSpeed's probe of cuFile failing under MSVC (another program, one library): the Windows build flags
    ("C:\\Users\\li\\axolotl> python -m axolotl.cli.train config.yml\n[INFO] [real_accelerator.py:219:get_accelerator] "
     "Setting ds_accelerator to cuda (auto detect)\ntest.c\nLINK : fatal error LNK1181: cannot open input file "
     "'cufile.lib'", "wheel-platform", ["DS_BUILD_GDS=0", "DS_BUILD_AIO=0"]),
    # an upgrade with --no-deps, then a dependency's import failing (another package, a name rather than a module)
    ("Worked yesterday on an L4 in Colab. Today:\n!pip install -U --no-deps git+https://github.com/huggingface/trl.git\n"
     "from trl import SFTTrainer\nImportError: cannot import name 'is_torch_greater_or_equal' from "
     "'transformers.utils'", "wheel-platform", ["without --no-deps", "trl"]),
    ("pip install --force-reinstall --no-deps axolotl==0.6.0\nModuleNotFoundError: No module named "
     "'transformers.models.gemma3'\nRTX 4090, Ubuntu 22.04", "wheel-platform", ["without --no-deps", "axolotl"]),
    # a core module of an import name two distributions share, missing (another module, a traceback through torch)
    ("torch 2.5.1+cu124 on an RTX 4080, pip list shows triton 3.1.0\n  File \"/opt/venv/lib/python3.11/site-packages/"
     "torch/_inductor/runtime/triton_heuristics.py\", line 60, in <module>\n    from triton.runtime import Config\n"
     "ModuleNotFoundError: No module named 'triton.runtime'", "wheel-platform",
     ["pytorch-triton", "pip uninstall -y triton"]),
    ("import onnxruntime fails on my RTX 3060 box\nModuleNotFoundError: No module named 'onnxruntime.capi'",
     "wheel-platform", ["onnxruntime-gpu", "pip uninstall -y onnxruntime"]),
    # a library's own check refusing an option value it does not know yet (another library, an enum's words)
    ("llamafactory-cli train qwen_lora.yaml on 2x RTX 3090\n  File \"/home/u/miniconda3/envs/lf/lib/python3.10/"
     "site-packages/transformers/training_args.py\", line 1530, in __post_init__\n    self.optim = "
     "OptimizerNames(self.optim)\nValueError: 'adamw_torch_4bit' is not a valid OptimizerNames", "wheel-platform",
     ["transformers", "pip install -U transformers"]),
    ("python finetune/lora.py --precision 16-true\nC:\\proj\\.venv\\Lib\\site-packages\\lightning\\fabric\\"
     "connector.py, line 563\nValueError: Precision '16-true' is invalid. Allowed precision values: ('16-mixed', "
     "'bf16-mixed', '32-true')", "wheel-platform", ["lightning", "requirements.txt"]),
    # a release the table knows broken, beside its symptom (another GPU, the import name, another CUDA error)
    ("H20 x8, torch 2.7.1+cu126, pip show flash_attn: Version: 2.8.1\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "wheel-platform", ["2.8.0.post2"]),
    # a NameError raised in an installed library's frame (another library, a traceback rather than its messages)
    ("Traceback (most recent call last):\n  File \"/usr/local/lib/python3.10/dist-packages/peft/tuners/lora.py\", "
     "line 40, in <module>\n  File \"/usr/local/lib/python3.10/site-packages/auto_gptq/nn_modules/qlinear/"
     "qlinear_cuda.py\", line 12, in forward\nNameError: name 'autogptq_cuda_256' is not defined\nTesla P40",
     "wheel-platform", ["pip install -U auto-gptq", "pip uninstall -y auto-gptq"]),
    # the library known only by its own start-up messages
    ("CUDA SETUP: Loading binary /opt/conda/lib/python3.9/libbitsandbytes_cuda117.so...\nNameError: name "
     "'str2optimizer32bit' is not defined", "wheel-platform", ["pip install -U bitsandbytes"]),
    # a ROCm DLL lacking an entry point the program calls (another program and DLL): the program's HIP SDK release
    ("koboldcpp_rocm.exe on an RX 6650 XT, Windows 11\nThe procedure entry point rocblas_gemm_ex3 could "
     "not be located in the dynamic link library C:\\kcpp\\hipblas.dll", "wheel-platform",
     ["ROCmLibs", "HIP SDK <the release"]),
    # Ollama's 0.5 series after a swapped rocBLAS: the release its builds use
    ("replaced rocblas.dll and the library folder with the gfx1032 files for my RX 6600\nollama version is 0.5.7\n"
     "The procedure entry point rocblas_sgemm_strided_batched_64 could not be located in the dynamic link library "
     "C:\\Users\\me\\AppData\\Local\\Programs\\Ollama\\lib\\ollama\\rocblas.dll", "wheel-platform",
     ["HIP SDK 6.1.2"]),
    # torch's CUDA DLLs not loading under ZLUDA with a HIP SDK 6.x (another tool, DLL and wording)
    ("SD.Next with --use-zluda, RX 7900 GRE, AMD HIP SDK 6.2.4 installed\nOSError: [WinError 126] The specified module "
     "could not be found. Error loading \"C:\\sdnext\\venv\\lib\\site-packages\\torch\\lib\\cublas64_11.dll\" "
     "or one of its dependencies.", "wheel-platform", ["patchzluda2.bat", "ROCm 6"]),
    # torch.compile's backend failing on a ROCm torch, no other error (another torch, GPU and exception)
    ("torch 2.4.1+rocm6.1 on an RX 7900 XTX, model = torch.compile(model)\ntorch._dynamo.exc.BackendCompilerFailed: "
     "backend='inductor' raised:\nKeyError: 'waves_per_eu'", "wheel-platform",
     ["pytorch-triton-rocm", "pip uninstall -y triton"]),
    # PyPI's xformers beside a torch of another CUDA index, then an import failing (other releases, another module)
    ("conda env with torch==2.4.0+cu118 and xformers==0.0.27.post2 on an RTX A4000\nModuleNotFoundError: No module "
     "named 'xformers.ops.fmha.triton_splitk'", "wheel-platform",
     ["--index-url https://download.pytorch.org/whl/cu118", "xformers==0.0.27.post2"]),
    # a torch name missing on a program's import, the program's own torch known (another name, a traceback)
    ("tune run lora_finetune_single_device --config llama2/7B_lora_single_device on an RTX 3090, torch 2.1.2+cu121\n"
     "  File \"/home/kim/.venv/lib/python3.10/site-packages/torchtune/utils/_device.py\", line 9\n"
     "ImportError: cannot import name 'is_compiling' from 'torch.compiler'", "wheel-platform",
     ["torch>=2.2.2", "https://download.pytorch.org/whl/"]),
]

# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # torch-directml itself missing for a new Python: no successor to name
    ("pip install torch-directml\nERROR: Could not find a version that satisfies the requirement torch-directml (from "
     "versions: none)\nPython 3.13 on Windows 11", "its successor"),
    # a plain jaxlib pin (no CUDA label) pip cannot find: not the plugin reading
    ("ERROR: Could not find a version that satisfies the requirement jaxlib==0.3.2 (from versions: 0.4.13, 0.4.30)",
     "drop the -f jax_cuda_releases"),
    # tensorflow-gpu merely named in a log of a working install: no install failure, no successor
    # a request for a Linux build of a package that comes the same way everywhere: no OS reading
    ("Is there a flash-attn wheel for torch 2.8 and CUDA 12.8 on Ubuntu?", "prebuilt Windows wheel"),
    # a Windows request beside a real error: the error says more
    ("where can I get triton for windows?\nRuntimeError: CUDA error: out of memory (RTX 4060, 8 GB)", "triton-windows"),
    # the same probe under GNU ld on Linux: libaio's development package, not the Windows flags
    ("pip install deepspeed on Ubuntu 22.04, RTX 3090\n/usr/bin/ld: cannot find -laio: No such file or directory\n"
     "collect2: error: ld returned 1 exit status", "DS_BUILD_GDS=0"),
    # --no-deps for a fresh install of the instructions' pinned packages, and a failure that is no import: not the reading
    ("pip install --no-deps trl peft accelerate bitsandbytes\nRuntimeError: CUDA error: out of memory on an RTX 3060",
     "without --no-deps"),
    # a deeper triton module that moved between releases: a release mix-up, not a damaged folder
    ("from triton.runtime.autotuner import OutOfResources\nModuleNotFoundError: No module named "
     "'triton.runtime.autotuner.heuristics'", "repeated until"),
    # a value refused by the program's own code (no library's file raised it): no library to upgrade
    ("train.py: ValueError: Precision 'fp8-true' is invalid. Allowed precision values: ('16-mixed', 'bf16-mixed')",
     "requirements.txt in its folder"),
    # the release after it with the same symptom: not the table's row
    ("flash-attn 2.8.3 on an RTX 5090: RuntimeError: CUDA error: no kernel image is available for execution on the "
     "device", "2.8.0.post2"),
    # a NameError in the user's own script: no library's bug
    ("  File \"/home/ana/train.py\", line 88, in main\n    trainer = Trainer(model=model, args=args)\nNameError: name "
     "'Trainer' is not defined\nbitsandbytes 0.43.1 on an RTX 3090", "release without the bug"),
    # an entry point missing in the Python DLL: no ROCm release mix-up
    ("The procedure entry point PyUnicode_AsUTF8AndSize could not be located in the dynamic link library "
     "C:\\Python38\\python38.dll", "HIP SDK"),
    # the same failure on HIP SDK 5.7, the ZLUDA default: not the 6.x build
    ("ComfyUI-Zluda on HIP SDK 5.7.1, RX 6800\nFile caffe2_nvrtc.dll not found", "patchzluda2.bat"),
    # the same backend failure on a CUDA torch: not the ROCm Triton
    ("torch 2.4.1+cu121 on an RTX 4090\ntorch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
     "KeyError: 'waves_per_eu'", "pytorch-triton-rocm"),
    # xformers already from the torch's index: not the index reading
    ("torch==2.4.0+cu118; pip install xformers==0.0.27.post2 --index-url https://download.pytorch.org/whl/cu118\n"
     "ModuleNotFoundError: No module named 'xformers.ops.fmha.triton_splitk'", "the torch's own index"),
    # a later torchtune (made for a later torch): not the 0.1 row
    ("pip install torchtune==0.3.1\nImportError: cannot import name 'fully_shard' from "
     "'torch.distributed._composable.fsdp'", "torch>=2.2.2"),
    # another library the linker misses: not DeepSpeed's probes
    ("/usr/bin/ld: cannot find -lcuda: No such file or directory\ncollect2: error: ld returned 1 exit status",
     "DS_BUILD_AIO"),
    ("import tensorflow as tf  # tensorflow-gpu 2.10 on Windows 10 works, GPU found, training at 40 it/s", "pip uninstall -y tensorflow-gpu"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
