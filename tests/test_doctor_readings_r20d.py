"""doctor, round 20 (r20d): readings for missed training cases of desktop / inference apps and Chinese LLM projects:
TensorRT refusing a GPU generation newer than its release, xformers failing on an RTX 50 card, the ncnn upscalers'
tile size, onnxruntime's CUDA 12 builds of 1.17 / 1.18.0 (cuDNN 8.9), Triton's MMA assertion on a pre-Volta card,
cpm_kernels' "Library X is not initialized", ctranslate2's cuDNN 9 missing after the user's own pip install, TensorRT's
tar-installed libraries off LD_LIBRARY_PATH, a standalone faster-whisper build without its cuBLAS / cuDNN 8 libraries,
a crash in a bundled cuDNN 8 DLL, torch without XPU (SD.Next's --use-ipex --reinstall), torch's XPU device count zero
(intel-compute-runtime), Forge Neo's cu128 torch, CTranslate2's float16 refusal on a GPU that has float16 (the run is
on the CPU), a bare out-of-memory message (the model's int4 release), and a question about the CUDA release beside a
failing run (reinstall torch). Each paste is written for its reading (another GPU, tool, version or wording than the
mined case); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # TensorRT 8.2 on an RTX 4090 (hex SM form), via Python
    ("engine = builder.build_serialized_network(network, config)\n[TRT] [E] 1: [caskUtils.cpp::trtSmToCask::147] Error "
     "Code 1: Internal Error (Unsupported SM: 0x809)\nTensorRT 8.2.5.1, GPU: RTX 4090, Ubuntu 20.04",
     "arch-missing", ["TensorRT 8.5", "11.8"]),
    # trtexec 10.3 on an RTX 5090 in a container
    ("docker run --gpus all nvcr.io/nvidia/tensorrt:24.08-py3\ntrtexec --onnx=yolo.onnx --fp16\n[E] Error[9]: "
     "IBuilder::buildSerializedNetwork: Error Code 9: API Usage Error (Target GPU SM 120 is not supported by this "
     "TensorRT release.)\n&&&& FAILED TensorRT.trtexec [TensorRT v100300]", "arch-missing", ["10.8", "12.8", "image"]),
    # ComfyUI on an RTX 5080, xformers said broken in prose
    ("ComfyUI portable on an RTX 5080: xformers is broken, every KSampler run errors out since I updated",
     "attention", ["uninstall xformers", "--disable-xformers"]),
    # realesrgan-ncnn-vulkan on a 2 GB card
    ("realesrgan-ncnn-vulkan.exe -i in.png -o out.png -s 4\n[0 NVIDIA GeForce GT 1030]\nvkAllocateMemory failed -2\n"
     "vkQueueSubmit failed -4", "out-of-memory", ["tile size", "-t 100"]),
    # onnxruntime-gpu's provider failing with CUDA 12.2 named, no release given
    ("Windows 10, CUDA 12.2\n[E:onnxruntime:Default, provider_bridge_ort.cc:1548] LoadLibrary failed with error 126 \"\" "
     "when trying to load \"C:\\venv\\lib\\site-packages\\onnxruntime\\capi\\onnxruntime_providers_cuda.dll\"",
     "rocm-libs-missing", ["cuDNN 8.9", "cuDNN 9"]),
    # GPTQ-for-LLaMa's triton branch on a GTX 1080 Ti
    ("python llama_inference.py --wbits 4 --load llama-7b-4bit.pt  (GTX 1080 Ti)\npython: /project/lib/Analysis/"
     "Utility.cpp:136: bool mlir::supportMMA(mlir::Value, int): Assertion `(version == 1 || version == 2) && "
     "\"Unexpected MMA layout version found\"' failed.\nAborted (core dumped)", "gpu-unsupported",
     ["Pascal", "Volta"]),
    # ChatGLM2's quantize on Windows, cpm_kernels naming nvrtc
    ("model = AutoModel.from_pretrained('THUDM/chatglm2-6b', trust_remote_code=True).quantize(8).cuda()\n"
     "RuntimeError: Library nvrtc is not initialized", "rocm-libs-missing", ["cudatoolkit", "nvrtc"]),
    # faster-whisper installed by the user on Ubuntu, cuDNN 9 missing
    ("pip install -U faster-whisper\npython transcribe.py\nUnable to load any of {libcudnn_cnn.so.9.1.0, "
     "libcudnn_cnn.so.9.1, libcudnn_cnn.so.9, libcudnn_cnn.so}\nInvalid handle. Cannot load symbol "
     "cudnnCreateConvolutionDescriptor\nAborted (core dumped)", "rocm-libs-missing",
     ["libcudnn9-cuda-12", "ctranslate2==4.4.0", "libcudnn8"]),
    # a detector's TensorRT backend on Linux, TensorRT 10's library missing
    ("python tools/deploy.py configs/detection_tensorrt.py model.onnx\nImportError: libnvinfer.so.10: cannot open shared "
     "object file: No such file or directory", "rocm-libs-missing", ["LD_LIBRARY_PATH", "libnvinfer10"]),
    # a standalone Whisper GUI (PyInstaller) missing cuBLAS 11
    ("WhisperGUI standalone r1.4 running on: CUDA\nRuntimeError: Library cublas64_11.dll is not found or cannot be "
     "loaded\n[4120] Failed to execute script 'main' due to unhandled exception!", "rocm-libs-missing",
     ["cuDNN 8", "next to the program's executable"]),
    # another app's bundled cuDNN 8 DLL crashing, CUDA 12.1 installed
    ("Faulting application name: SubtitleEdit.exe\nFaulting module name: cudnn_ops_infer64_8.dll, version: 6.14.11.8050\n"
     "Exception code: 0xc0000005\nI have CUDA 12.1 installed", "abi-mismatch", ["11.8"]),
    # an Intel Arc B580 with a plain pip torch, no app named
    ("Intel Arc B580, Windows 11\n>>> torch.zeros(1).to('xpu')\nAssertionError: Torch not compiled with XPU enabled",
     "torch-build", ["whl/xpu", "--use-ipex --reinstall"]),
    # SD.Next on an Arc A580, Linux
    ("./webui.sh --use-ipex (SD.Next)\nArc A580, Fedora 41\nAssertionError: Torch not compiled with XPU enabled",
     "torch-build", ["--use-ipex --reinstall"]),
    # Ubuntu 24.10 with the jammy packages, Arc A380, IPEX's own script
    ("Ubuntu 24.10 (oracular), Arc A380, installed intel-opencl-icd from the jammy repo\npython -c 'import torch, "
     "intel_extension_for_pytorch'\n[W Device.cpp:127] Warning: XPU Device count is zero! (function "
     "initGlobalDevicePoolState)", "driver", ["intel-compute-runtime", "jammy"]),
    # Forge Neo on Windows with the CPU torch
    ("C:\\sd\\forge-neo\\venv\\Scripts\\python.exe launch.py\nForge Neo 2.5\nAssertionError: Torch not compiled with "
     "CUDA enabled", "torch-build", ["cu128"]),
    # faster-whisper on an RTX 3060, float16 refused in the user's words
    ("faster-whisper on my RTX 3060 laptop: it keeps telling me the device doesn't support efficient float16 "
     "computation, int8 works", "torch-build", ["cu118", "cuda.is_available"]),
    # a bare out-of-memory under a chat app's template, 6 GB card
    ("RTX 2060 6G\n**Describe the bug**\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB "
     "(GPU 0; 6.00 GiB total capacity; 5.31 GiB already allocated; 0 bytes free; 5.38 GiB reserved in total by "
     "PyTorch)", "out-of-memory", ["int4"]),
    # a 4090 user asking which CUDA release a project needs, in English
    ("RTX 4090, CUDA 11.3 installed. Running the demo errors out right after loading. Which CUDA version do I need "
     "for this project?", "torch-build", ["pip uninstall torch", "pip install torch"]),
]

NEGATIVES = [
    # TensorRT already new enough for the card: no upgrade named
    ("trtexec [TensorRT v100900] on RTX 5090\n[E] Error[9]: Target GPU SM 120 is not supported by this TensorRT "
     "release.", "TensorRT 10.8 or newer"),
    # xformers fine on an RTX 4090: no Blackwell reading
    ("RTX 4090, xformers does not work after updating, error in attention", "SageAttention 2"),
    # onnxruntime 1.20 named: the release's own build, not the 8.9 wording
    ("onnxruntime-gpu 1.20.1, CUDA 12.4\nFailed to create CUDAExecutionProvider. Require cuDNN 9.* and CUDA 12.*",
     "cuDNN 8.9"),
    # Triton's assertion on an A100: no Pascal reading
    ("A100 80GB\nAssertion `(version == 1 || version == 2) && \"Unexpected MMA layout version found\"' failed.",
     "Pascal"),
    # faster-whisper in a Windows app environment: no apt
    ("Whisper-WebUI on Windows 11, cmd_windows.bat\nUnable to load any of {libcudnn_ops.so.9.1.0, libcudnn_ops.so.9}",
     "libcudnn8"),
    # a missing distribution library, not an SDK's: no LD_LIBRARY_PATH tar reading
    ("ImportError: libGL.so.1: cannot open shared object file: No such file or directory", "unpacked tar"),
    # a crash in cuDNN 8 with CUDA 11.8 already there: no 11.8 reading
    ("Faulting module name: cudnn64_8.dll\nException code: 0xc0000409\nCUDA 11.8 installed", "the last CUDA 11 release"),
    # XPU count zero on Windows: not the Linux runtime packages
    ("Windows 11, Arc A770\nWarning: XPU Device count is zero!", "intel-compute-runtime"),
    # float16 refused on a GTX 1060 (no fast fp16): the precision reading, not a CPU torch
    ("faster-whisper, GTX 1060\nValueError: Requested float16 compute type, but the target device or backend do not "
     "support efficient float16 computation.", "cuda.is_available"),
    # an out-of-memory in a training run: no int4 model release
    ("trainer.train()\nepoch 1 loss 2.31\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
     "(GPU 0; 24.00 GiB total capacity; 21.50 GiB already allocated)", "ChatGLM's -int4"),
    # a CUDA-release question on an AMD card: not the NVIDIA torch reading
    ("RX 7900 XTX, which CUDA version do I need? the demo errors out", "pip uninstall torch torchvision"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
