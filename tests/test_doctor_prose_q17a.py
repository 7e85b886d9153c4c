"""doctor, round 17 (q17a): situations told in prose, in English. Two retellings each of 40 solved training cases
(random.Random(1717), five per family of arch-missing, rocm-libs-missing, wheel-platform, torch-build, driver,
abi-mismatch, gpu-unsupported, override-wrong), as another user would tell them: another GPU, version or OS of the
same class, the facts in words, the error line cut short, paraphrased or missing. 53/80 were read right before this
round's widening, 78/80 after; each retelling below is one that now passes. The negatives keep each widened reading
out of texts it does not fit (a healthy machine, another card, the fact told as past or solved)."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a retelling of https://github.com/ROCm/Tensile/issues/1907
    ('Please add support for the Ryzen 9 7950X iGPU (Radeon graphics, gfx1036) to rocBLAS.\nThere are no '
     'Tensile kernels for it, rocblas just errors out.',
     'arch-missing', ['10.3.0']),
    ('## Feature request\nmy ryzen 5 7600 has the little integrated radeon gpu, rocminfo says gfx1036. pytorch '
     'on rocm 6.2 fails with no kernel for it. Any chance?',
     'arch-missing', ['10.3.0']),
    # a retelling of https://github.com/ROCm/legacy-rocm-build/issues/2353
    ("tensorflow-rocm skips my RX 6700 XT: 'Ignoring visible gpu device ... AMDGPU version : gfx1031', "
     'supported ones are gfx1030, gfx900 and so on',
     'arch-missing', ['HSA_OVERRIDE_GFX_VERSION=10.3.0']),
    ("TF on ROCm 6.1, Ubuntu 22.04, card is a Radeon RX 6800M (laptop). tf.config.list_physical_devices('GPU') "
     'is empty and the log says it is ignoring the visible gpu device because gfx1031 is not among the '
     'supported AMDGPU versions.',
     'arch-missing', ['HSA_OVERRIDE_GFX_VERSION=10.3.0']),
    # a retelling of https://github.com/ROCm/legacy-rocm-build/issues/1797
    ('RX 6600 (gfx1032) inside the rocm/pytorch docker image.\ntorch.cuda.is_available() aborts with '
     'hipErrorNoBinaryForGpu (unable to find code object for all current devices)',
     'arch-missing', ['HSA_OVERRIDE_GFX_VERSION=10.3.0']),
    ('running the rocm/pytorch:latest container on my rx6650xt, python crashes with core dumped as soon as I '
     "touch the gpu: 'Unable to find code object for all current devices!'",
     'arch-missing', ['HSA_OVERRIDE_GFX_VERSION=10.3.0']),
    # a retelling of https://github.com/NVIDIA/cuda-samples/issues/361
    ('Building cuda-samples (v12.8 tag) on an RTX 4090 with CUDA 12.4 installed: nvcc fatal: Unsupported gpu '
     "architecture 'compute_100'",
     'arch-missing', ['12.8']),
    ('cmake of the cuda samples fails: nvcc says unsupported gpu architecture compute_120. My toolkit is cuda '
     '12.6, the samples are from the 12.8 release, GPU is an L40S.',
     'arch-missing', ['12.8']),
    # a retelling of https://github.com/Comfy-Org/ComfyUI/issues/10468
    ("Same here: 'CUDA error: no kernel image is available for execution on the device' on my GTX 1080 Ti, "
     'Windows 10, after updating ComfyUI',
     'arch-missing', ['cu126']),
    ('comfyui now fails with no kernel image is available for execution on the device. card: geforce 1060 6gb, '
     'win 11, torch 2.8.0+cu128',
     'arch-missing', ['cu126']),
    # a retelling of https://github.com/tensorflow/tensorflow/issues/63362
    ('TensorFlow 2.17 does not see my GPU. pip install tensorflow[and-cuda] in a fresh venv, then '
     "tf.config.list_physical_devices('GPU') returns []. TF 2.15 on the same box works fine.",
     'rocm-libs-missing', ['LD_LIBRARY_PATH']),
    ('After upgrading to tensorflow 2.16.1 (installed with the [and-cuda] extra) my RTX 3090 is no longer '
     'listed, list_physical_devices gives an empty list. Ubuntu 22.04, driver 550.',
     'rocm-libs-missing', ['LD_LIBRARY_PATH']),
    # a retelling of https://github.com/SYSTRAN/faster-whisper/issues/516
    ('faster-whisper on an RTX 3060: Could not load library libcudnn_ops_infer.so.8. Error: '
     'libcudnn_ops_infer.so.8: cannot open shared object file',
     'rocm-libs-missing', ['LD_LIBRARY_PATH']),
    ('whisperx crashes right when transcription starts, it says it could not load library '
     'libcudnn_cnn_infer.so.8',
     'rocm-libs-missing', ['LD_LIBRARY_PATH']),
    # a retelling of https://github.com/ROCm/legacy-rocm-build/issues/1607
    ('Installed ROCm 5.0 with amdgpu-install --usecase=rocm on Ubuntu 20.04 (RX 6900 XT). tensorflow-rocm then '
     'fails to import: libamdhip64.so.4: cannot open shared object file: No such file or directory',
     'rocm-libs-missing', ['/opt/rocm/lib']),
    ("tensorflow-rocm 2.8 can't load its libraries after I installed ROCm 5.1 via amdgpu-install. ImportError: "
     'librocblas.so.0: cannot open shared object file. Radeon VII, Ubuntu 20.04.',
     'rocm-libs-missing', ['/opt/rocm/lib']),
    # a retelling of https://github.com/tensorflow/tensorflow/issues/38090
    ('Windows 10, tensorflow 2.2.0 from pip, CUDA 10.2 and cuDNN 7.6, GTX 1660 Ti. list_physical_devices only '
     'shows the CPU.',
     'rocm-libs-missing', ['10.1']),
    ("tf 2.1 doesn't find my RTX 2070 on win10. I have cuda 10.2 installed. Only CPU:0 in the device list.",
     'rocm-libs-missing', ['10.1']),
    # a retelling of https://github.com/deepgram/self-hosted-resources/pull/177
    ('our engine container on GKE (T4 node pool) exits: error while loading shared libraries: libcuda.so.1: '
     'cannot open shared object file: No such file or directory',
     'rocm-libs-missing', ['/usr/local/nvidia/lib64']),
    ('Deploying the image to Google Kubernetes Engine with an L4 GPU: the binary cannot load libcuda.so.1 (No '
     'such file or directory). The device plugin is installed.',
     'rocm-libs-missing', ['/usr/local/nvidia/lib64']),
    # a retelling of https://github.com/triton-lang/triton/issues/1465
    ('pip install triton on my M2 MacBook (macOS 14, python 3.11):\nERROR: Could not find a version that '
     'satisfies the requirement triton (from versions: none)',
     'wheel-platform', ['Linux']),
    ("Can't install triton on a Mac. macOS Sonoma, Apple silicon. pip says no matching distribution found for "
     'triton.',
     'wheel-platform', ['Linux']),
    # a retelling of https://github.com/tensorflow/tensorflow/issues/64536
    ("tensorflow 2.15 won't use my RTX 4070 on Windows 11. Python 3.11, CUDA 12.2, cuDNN 8.9. PyTorch sees the "
     "GPU fine, but tf.config.list_physical_devices('GPU') is empty.",
     'wheel-platform', ['WSL2']),
    ('**OS:** win10\n**TF:** 2.13\n**CUDA:** 11.8\nHow do I get tensorflow to use the gpu? it only lists the '
     'CPU',
     'wheel-platform', ['WSL2']),
    # a retelling of https://github.com/patientx/ComfyUI-Zluda/issues/107
    ('ComfyUI-Zluda on an RX 7900 XTX with HIP SDK 6.2: OSError, caffe2_nvrtc.dll not found. Tried different '
     'zluda versions.',
     'wheel-platform', ['patchzluda2']),
    ('Using HIP 6.2 (need it for sdnext too) with comfyui-zluda on my rx 6800, and startup dies: File '
     'caffe2_nvrtc.dll not found',
     'wheel-platform', ['patchzluda2']),
    # a retelling of https://github.com/bitsandbytes-foundation/bitsandbytes/issues/972
    ('Is bitsandbytes supported on Windows? win 10, python 3.11, bitsandbytes 0.41.1. import bitsandbytes fails '
     'in peft with a traceback from bitsandbytes\\__init__.py',
     'wheel-platform', ['0.43']),
    ('Windows 11 + conda: importing bitsandbytes (0.40.2) crashes, it looks for libbitsandbytes_cuda121.so. '
     'Does bnb work on windows at all?',
     'wheel-platform', ['0.43']),
    # a retelling of https://github.com/oobabooga/textgen/issues/659
    ("webui won't start on Windows: "
     'C:\\oobabooga\\installer_files\\env\\lib\\site-packages\\bitsandbytes\\libbitsandbytes_cuda118.so is '
     'either not designed to run on Windows or it contains an error.',
     'wheel-platform', ['bitsandbytes']),
    ("text-generation-webui on win11: bitsandbytes' .so file 'is not designed to run on Windows' (error status "
     '0xc000012f)',
     'wheel-platform', ['bitsandbytes']),
    # a retelling of https://github.com/jhj0517/Whisper-WebUI/issues/56
    ('- OS: Windows 10\n- python 3.11\n- CUDA 12.4\nTranscription only uses my CPU, not the RTX 3070. Other '
     'apps use the GPU fine.',
     'torch-build', ['download.pytorch.org/whl/cu']),
    ("Whisper-WebUI doesn't use my GPU at all on Windows 11, only CPU. torch.cuda.is_available() prints False. "
     'GPU is an RTX 4060.',
     'torch-build', ['download.pytorch.org/whl/cu']),
    # a retelling of https://github.com/xxyzz/WordDumb/issues/91
    ('AssertionError: Torch not compiled with CUDA enabled\n(Windows 11, RTX 3080)',
     'torch-build', ['download.pytorch.org/whl/cu']),
    ("I keep getting 'torch not compiled with cuda enabled' when the plugin runs on my laptop's GTX 1650.",
     'torch-build', ['download.pytorch.org/whl/cu']),
    # a retelling of https://github.com/invoke-ai/InvokeAI/issues/5399
    ('After upgrading InvokeAI the xformers warning says it was built for PyTorch 2.2.0+cu121 but I have '
     '2.2.0+cpu. The update replaced my CUDA torch.',
     'torch-build', ['download.pytorch.org/whl/cu']),
    ('Windows, RTX 2060. Updated invokeai and now torch is the cpu build (torch 2.1.2+cpu per pip list), '
     'generation runs on CPU.',
     'torch-build', ['download.pytorch.org/whl/cu']),
    # a retelling of https://github.com/AutoGPTQ/AutoGPTQ/issues/203
    ("auto-gptq says 'CUDA extension not installed'. I have torch 2.0.1+cu117 and system CUDA 11.8 (nvcc 11.8). "
     'Built auto-gptq from source with pip install . and still nothing.',
     'torch-build', ['cu118']),
    ('CUDA extension not installed warning from AutoGPTQ; torch is 2.1.0+cu121 while my nvcc is CUDA 11.8, '
     'building from source fails',
     'torch-build', ['cu118']),
    # a retelling of https://github.com/unslothai/unsloth/issues/2024
    ('Unsloth on Windows: NotImplementedError: Unsloth: No NVIDIA GPU found? I have an RTX 3090 and the newest '
     'drivers. conda env keeps getting the CPU-only torch.',
     'torch-build', ['download.pytorch.org/whl/cu']),
    ("unsloth raises 'No NVIDIA GPU found' on my 4070 Ti Super, torch.__version__ shows 2.5.1+cpu",
     'torch-build', ['download.pytorch.org/whl/cu']),
    # a retelling of https://github.com/apache/mxnet/issues/3486
    ('training on GPU crashes with CUDA driver version is insufficient for CUDA runtime version. Ubuntu 16.04, '
     'cuda 8.0, Driver Version: 361.42',
     'driver', ['driver']),
    ('mxnet-cu101 on CentOS 7, nvidia driver 396.26: the first GPU op fails because the cuda driver version is '
     'insufficient for the cuda runtime version',
     'driver', ['driver']),
    # a retelling of https://github.com/pytorch/pytorch/issues/179891
    ('torch.xpu.get_device_properties(0) segfaults on my Intel Arc B580 (torch 2.9.0+xpu, Ubuntu 24.04, xe '
     'driver). is_available() is True.',
     'driver', ['libze']),
    ('Intel Arc A770, PyTorch 2.8+xpu: is_available and device_count work but get_device_properties crashes '
     'with a segmentation fault (dmesg: segfault at 0 ip 0000000000000000)',
     'driver', ['libze']),
    # a retelling of https://github.com/openmm/openmm/issues/3585
    ('OpenMM fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222).\nnvidia-smi: Driver Version: 470.82.01    '
     'CUDA Version: 11.4',
     'driver', ['cudatoolkit=11.4']),
    # a retelling of https://github.com/ROCm/rocminfo/issues/42
    ('My kernel has amdgpu compiled in (CONFIG_DRM_AMDGPU=y), not as a module, and rocminfo says: ROCk module '
     'is NOT loaded, possibly no GPU devices',
     'driver', ['built', 'rocminfo']),
    ("Gentoo, custom kernel with amdgpu built into the kernel. lsmod doesn't list amdgpu, and rocminfo prints "
     "'ROCk module is NOT loaded'. The GPU works for graphics.",
     'driver', ['built', 'rocminfo']),
    # a retelling of https://github.com/ollama/ollama/issues/16415
    ('ollama 0.12 only uses Vulkan on my 3x RTX 3060 box, it is much slower than before. log: ggml_cuda_init: '
     'failed to initialize CUDA: CUDA driver version is insufficient for CUDA runtime version',
     'driver', ['driver']),
    ('After upgrading ollama my GTX 1080 is slow, ollama ps shows it is on vulkan. The log says CUDA driver '
     'version is insufficient for CUDA runtime version. nvidia driver 525.',
     'driver', ['driver']),
    # a retelling of https://github.com/Cambridge-ICCS/practical-ml-with-pytorch/issues/70
    ('import torch gives: A module that was compiled using NumPy 1.x cannot be run in NumPy 2.1.0 as it may '
     'crash.',
     'abi-mismatch', ['numpy<2']),
    ("after pip upgraded numpy to 2.0.1 my script warns that a module compiled using numpy 1.x can't be run in "
     'numpy 2 and then crashes',
     'abi-mismatch', ['numpy<2']),
    # a retelling of https://github.com/NVIDIA/apex/issues/428
    ('after upgrading torch to 2.1 apex breaks: ImportError: '
     '.../site-packages/fused_layer_norm_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: '
     '_ZN3c106detail14torchCheckFailEPKcS2_jRKSs',
     'abi-mismatch', ['apex']),
    ("apex's amp_C extension fails to import with an undefined symbol since I updated pytorch to 1.13",
     'abi-mismatch', ['apex']),
    # a retelling of https://github.com/open-mmlab/mmdetection/issues/1189
    ('I upgraded pytorch to 1.4 and now mmdet fails: ImportError: '
     'mmdet/ops/nms/nms_cuda.cpython-36m-x86_64-linux-gnu.so: undefined symbol: '
     '_ZN6caffe26detail36_typeMetaDataInstance_preallocated_7E',
     'abi-mismatch', ['reinstall']),
    ('mmdetection ops undefined symbol after updating torch (deform_conv_cuda...so: undefined symbol). how to '
     'fix?',
     'abi-mismatch', ['reinstall']),
    # a retelling of https://github.com/Dao-AILab/flash-attention/issues/928
    ('torch 2.3.0+cu121, python 3.11\nImportError: .../flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: '
     'undefined symbol: _ZN3c104cuda9SetDeviceEi',
     'abi-mismatch', ['flash-attn', 'torch 2.3.0+cu121']),
    ('flash_attn_2_cuda fails with undefined symbol after I went to torch 2.4.1+cu124 (was working before)',
     'abi-mismatch', ['flash-attn', 'torch 2.4.1+cu124']),
    # a retelling of https://github.com/pyg-team/pytorch-frame/pull/525
    ('pytest run: A module that was compiled using NumPy 1.x cannot be run in NumPy 2.0.2 as it may crash; '
     'modules must be compiled with NumPy 2.0',
     'abi-mismatch', ['numpy<2']),
    ("Got the numpy 1.x vs NumPy 2 warning ('compiled using NumPy 1.x cannot be run in NumPy 2.2.3') followed "
     'by AttributeError: _ARRAY_API not found',
     'abi-mismatch', ['numpy<2']),
    # a retelling of https://github.com/ROCm/legacy-rocm-build/issues/528
    ('Does ROCm support the Radeon HD 7970 (Tahiti)? rocminfo fails: hsa api call failure ... Call returned '
     '4104',
     'gpu-unsupported', ['GFX6']),
    ('Trying ROCm on an old laptop with a Radeon R5 M330 (Sun XT). rocminfo: hsa api call failure, returned '
     '4104.',
     'gpu-unsupported', ['GFX6']),
    # a retelling of https://github.com/vosen/ZLUDA/issues/343
    ("zluda doesn't show my rx 570 as a cuda device in blender on linux. am I doing something wrong?",
     'gpu-unsupported', ['RX 5000']),
    ('ZLUDA with a Radeon RX 480 (Polaris) on Windows 10: nothing shows up as CUDA in the app.',
     'gpu-unsupported', ['RX 5000']),
    # a retelling of https://github.com/pytorch/pytorch/issues/6515
    ('Found GPU0 GeForce GT 730 which is of cuda capability 3.0. PyTorch no longer supports this GPU because it '
     'is too old.',
     'gpu-unsupported', ['CPU']),
    ('my laptop has a geforce 710M (compute capability 2.1) and torch says this GPU is too old, then no kernel '
     'image is available for execution on the device',
     'gpu-unsupported', ['CPU']),
    # a retelling of https://github.com/ollama/ollama/issues/12071
    ("Ollama on Windows ignores my Radeon 780M: 'amdgpu is not supported (supported types:[])' "
     'gpu_type=gfx1103, then no compatible GPUs were discovered. HSA_OVERRIDE_GFX_VERSION did nothing.',
     'gpu-unsupported', ['Vulkan']),
    ('Windows 11 laptop with Ryzen 7 7840HS (780M iGPU). Ollama 0.11 says amdgpu is not supported, falls back '
     "to CPU. Setting the override doesn't help on windows.",
     'gpu-unsupported', ['Vulkan']),
    # a retelling of https://github.com/ROCm/legacy-rocm-build/issues/2232
    ('rocminfo: Unable to open /dev/kfd read-write: Cannot allocate memory. dmesg says: kfd kfd: amdgpu: TAHITI '
     'not supported in kfd. Card is a Radeon HD 7950.',
     'gpu-unsupported', ['not supported']),
    ('Radeon R9 270X here. ROCk module is loaded but rocminfo fails with HSA_STATUS_ERROR_OUT_OF_RESOURCES, and '
     "dmesg has 'PITCAIRN not supported in kfd'.",
     'gpu-unsupported', ['not supported']),
    # a retelling of https://github.com/likelovewant/ollama-for-amd/issues/36
    ('ollama-for-amd stopped working on my RX 6700 XT (gfx1031) on Windows 11 after 0.3.13. I set '
     'HSA_OVERRIDE_GFX_VERSION=10.3.0 in the system environment variables a while ago.',
     'override-wrong', ['HSA_OVERRIDE_GFX_VERSION']),
    ("Windows, RX 6600 (gfx1032), ollama-for-amd with the gfx1032 rocblas libs: 'amdgpu is not supported' and "
     'it runs on CPU. I still have HSA_OVERRIDE_GFX_VERSION set system-wide from before.',
     'override-wrong', ['HSA_OVERRIDE_GFX_VERSION']),
    # a retelling of https://github.com/ROCm/ROCR-Runtime/issues/354
    ('docker run -e HSA_OVERRIDE_GFX_VERSION= --device /dev/kfd --device /dev/dri rocm/pytorch\nrocminfo: '
     'Invalid HSA_OVERRIDE_GFX_VERSION format expected "1.2.3", agents show up as gfx000',
     'override-wrong', ['unset']),
    ("Our k8s ConfigMap leaves HSA_OVERRIDE_GFX_VERSION empty and the pod's rocm_agent_enumerator prints gfx000 "
     'for every GPU (Invalid HSA_OVERRIDE_GFX_VERSION format)',
     'override-wrong', ['unset']),
    # a retelling of https://github.com/ROCm/legacy-rocm-build/issues/5696
    ('Strix Halo (Radeon 8060S) plus an RX 9070 XT: rocminfo lists both as gfx1201 although the iGPU is '
     'gfx1151. HSA_OVERRIDE_GFX_VERSION=12.0.1 is exported in my profile.',
     'override-wrong', ['HSA_OVERRIDE_GFX_VERSION']),
    # a retelling of https://github.com/ollama/ollama/issues/6003
    ("Ollama won't use my RX 6700 XT. I started it with HSA_OVERRIDE_GFX_VERSION=gfx1031 ollama serve and it "
     'fails to initialize the tensile host.',
     'override-wrong', ['HSA_OVERRIDE_GFX_VERSION=10.3.0']),
    ('RX 6800M laptop, ollama.service has Environment="HSA_OVERRIDE_GFX_VERSION=gfx1031" and ollama falls back '
     'to CPU.',
     'override-wrong', ['HSA_OVERRIDE_GFX_VERSION=10.3.0']),
    # a retelling of https://github.com/likelovewant/ollama-for-amd/issues/67
    ('Windows ollama-for-amd: msg="amdgpu is not supported (supported types:[])" and the client gets \'An '
     "existing connection was forcibly closed by the remote host'. HSA_OVERRIDE_GFX_VERSION is set in my user "
     'env vars.',
     'override-wrong', ['HSA_OVERRIDE_GFX_VERSION']),
    ('ollama for amd on win11 with an RX 6750 GRE: amdgpu is not supported, supported types empty, wsarecv '
     'connection forcibly closed. I had set HSA_OVERRIDE_GFX_VERSION=10.3.1 earlier.',
     'override-wrong', ['HSA_OVERRIDE_GFX_VERSION']),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    ('pip list says numpy 2.1.0 and torch 2.5.1+cu124; everything imports fine and training runs on the RTX '
     '4090',
     'numpy<2'),
    ('import numpy as np\nimport torch\nprint(torch.__version__)\n2.4.1+cu121',
     'numpy<2'),
    ("tensorflow 2.10 on Windows 10 with CUDA 11.2 and cuDNN 8.1: list_physical_devices('GPU') shows my RTX "
     '3060, all good',
     'WSL2'),
    ('Ollama on Windows ignores my RX 7900 XTX: amdgpu is not supported. HSA_OVERRIDE_GFX_VERSION did nothing.',
     'accepts none of'),
    ('export HSA_OVERRIDE_GFX_VERSION=10.3.0 for my RX 6700 XT, rocminfo shows it as gfx1030 as expected and '
     'torch works',
     'look in ~/.bashrc'),
    ('ollama stopped working on my RX 6700 XT on Ubuntu 22.04 after the update, I run it with '
     'HSA_OVERRIDE_GFX_VERSION=10.3.0',
     'Windows environment'),
    ('auto-gptq: CUDA extension not installed. torch 2.1.0+cu118 and nvcc 11.8, built from source with pip '
     'install .',
     "(the toolkit's CUDA)"),
    ('HSA_OVERRIDE_GFX_VERSION=gfx1031 python train.py on my RX 6700 XT fails with hipErrorNoBinaryForGpu',
     '=10.3.1'),
    ('xformers was built for PyTorch 2.2.0+cu121 and I have 2.2.0+cu121, but it says memory_efficient_attention '
     'is not available',
     'pip uninstall -y torch'),
    ('RX 7900 XTX, Ubuntu 24.04, ROCm 6.2\nrocminfo: hsa api call failure\nUnable to open /dev/kfd read-write: '
     'Permission denied',
     'outside ROCm'),
    ('NCCL WARN Failed to open libibverbs.so\nAll distributed processes registered. Starting with 2 '
     'processes\nthen it hangs',
     'apt-file search libibverbs'),
    ("the 'compiled using NumPy 1.x cannot be run in NumPy 2' warning is gone since I pinned numpy, but now "
     'training on the RTX 3090 fails with torch.OutOfMemoryError: CUDA out of memory',
     'numpy<2'),
    ('fixed: xformers said it was built for PyTorch 2.2.0+cu121 but I had 2.2.0+cpu; after reinstalling torch '
     'from the cu121 index it runs on the GPU. Now xformers is just slow on my RTX 3060',
     'pip uninstall -y torch'),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
