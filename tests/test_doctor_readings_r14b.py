"""doctor, round 14 (issue 63): readings for upscalers, face swappers and audio tools: a program's own memory knob
(program_memory's table), an ncnn upscaler losing the device under a tile, a Vulkan instance refused for want of a
driver, onnxruntime's CPU build under a program that offers its providers, the unversioned libcuda.so link, and a
program's DLL found in System32. Each paste is written for its reading (another GPU, tool, version or wording than the
mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # Swap-Mukham on a 6 GB card with a batch of 64: half of it
    ("running swap-mukham with codeformer enabled\npython app.py --cuda --batch_size 64\ntorch.cuda.OutOfMemoryError: "
     "CUDA out of memory. Tried to allocate 1.19 GiB (GPU 0; 6.00 GiB total capacity; 4.10 GiB already allocated)",
     "out-of-memory", ["--batch_size 32"]),
    # demucs (htdemucs) on a 4 GB laptop card: shorter segments first, the CPU named too
    ("demucs -n htdemucs song.wav on my GTX 1650 laptop\nRuntimeError: CUDA out of memory. Tried to allocate 300.00 MiB "
     "(GPU 0; 4.00 GiB total capacity; 3.01 GiB already allocated; 12.00 MiB free)", "out-of-memory",
     ["--segment", "-d cpu"]),
    # demucs on a 2 GB card: the CPU first
    ("python -m demucs.separate -n mdx_extra track.flac\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 90.00 MiB (GPU 0; 1.96 GiB total capacity; 1.40 GiB already allocated)", "out-of-memory",
     ["on a 1.96 GB card run it on the CPU", "-d cpu"]),
    # WhisperX: its batch and compute type
    ("whisperx interview.mp3 --model large-v2 --batch_size 16\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 50.00 MiB. GPU 0 has a total capacity of 7.75 GiB", "out-of-memory",
     ["--batch_size 4", "--compute_type int8"]),
    # FaceFusion out of memory: its threads and memory strategy
    ("facefusion 2.4.1 run with face_enhancer on an RTX 3050\n[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero "
     "status code returned while running Conv node. CUDA failure 2: out of memory", "out-of-memory",
     ["--execution-thread-count 1", "--video-memory-strategy strict"]),
    # waifu2x-ncnn-vulkan losing the device on a small card
    ("waifu2x-ncnn-vulkan.exe -i big.png -o out.png -s 4 on a GTX 750 Ti\n[0 NVIDIA GeForce GTX 750 Ti]  queueC=2[8]"
     "\nvkWaitForFences failed -4", "out-of-memory", ["-t 200"]),
    # the Vulkan instance refused on Linux with an AMD card: Mesa's driver
    ("Ubuntu 22.04, Radeon RX 6600\n./realesrgan-ncnn-vulkan -i a.jpg -o b.jpg\nvkCreateInstance failed -9",
     "driver", ["mesa-vulkan-drivers", "vulkaninfo"]),
    # vulkan-hpp's words on Windows with an Intel iGPU: Intel's driver
    ("Windows 11, Intel Iris Xe Graphics\nchaiNNer NCNN backend: vk::createInstance: ErrorIncompatibleDriver",
     "driver", ["Intel's graphics driver"]),
    # the Vulkan instance in a container on an NVIDIA host: the graphics capability
    ("docker run --gpus all video2x ... (Debian host, RTX 4070)\nvkCreateInstance failed -9", "driver",
     ["NVIDIA_DRIVER_CAPABILITIES"]),
    # Deep-Live-Cam refusing cuda as a provider: onnxruntime's CPU build
    ("python run.py --execution-provider cuda\nrun.py: error: argument --execution-provider: invalid choice: 'cuda' "
     "(choose from 'cpu')\nDeep-Live-Cam 1.8 on Windows 10 with an RTX 4060", "torch-build",
     ["pip uninstall onnxruntime onnxruntime-gpu", "pip install onnxruntime-gpu", "--execution-provider cuda"]),
    # roop in words: only cpu among the execution providers
    ("roop shows only cpu in the execution providers, GTX 1080 Ti, cuda 11.8 installed", "torch-build",
     ["onnxruntime-gpu"]),
    # the unversioned libcuda.so on a native Linux (Triton's loader, another distribution)
    ("Fedora 40, RTX A4000, driver from rpmfusion\nRuntimeError: Failed to load libcuda.so: cannot open shared object "
     "file: No such file or directory", "rocm-libs-missing", ["ln -s libcuda.so.1", "ldconfig"]),
    # Windows 11's own older onnxruntime.dll answering a newer program
    ("my app starts, then: The requested API version [18] is not available, only API versions [1, 13] are supported "
     "in this build. Windows 11 23H2", "rocm-libs-missing", ["onnxruntime.dll", "System32"]),
    # a stray zlib in System32
    ("The procedure entry point inflateValidate could not be located in the dynamic link library "
     "C:\\Windows\\System32\\zlib1.dll", "rocm-libs-missing", ["zlib1.dll", "next to"]),
]

NEGATIVES = [
    # an ncnn program's device lost with no upscaler named: not a tile
    ("ncnn benchmark on my phone\nvkQueueSubmit failed -4", "-t 200"),
    # a Vulkan instance refused under WSL 2: WSL's reading, not a Windows driver reinstall
    ("WSL2 Ubuntu, RTX 3080\nvkCreateInstance failed -9", "reinstall the NVIDIA driver"),
    # a Vulkan out-of-memory (not the instance): no driver reading
    ("realesrgan-ncnn-vulkan -i x.png -o y.png\nvkAllocateMemory failed -2", "vulkaninfo"),
    # the GPU's providers on an AMD card: not the CUDA onnxruntime
    ("facefusion execution providers has no cuda, my GPU is Radeon RX 7900 XTX", "pip install onnxruntime-gpu alone"),
    # libcuda.so.1 itself missing in a container: the driver, not a link
    ("docker run myimage python app.py\nImportError: libcuda.so.1: cannot open shared object file: No such file or "
     "directory", "ln -s libcuda.so.1"),
    # a Windows DLL of Windows' own in System32: not a stray copy
    ("The procedure entry point GetSystemTimePreciseAsFileTime could not be located in the dynamic link library "
     "C:\\Windows\\System32\\KERNEL32.dll", "rename a stray copy"),
    # "860M" beside an AMD CPU stays the Radeon: and a bare GeForce-era number beside an Intel CPU is no AMD arch
    ("Ryzen 5 8645HS with 760M graphics, ollama runs on CPU", "GeForce"),
    ("Laptop: Intel Core i7-4710HQ, gpu: 860m\nwaifu2x run error vkQueueSubmit failed -4", "gfx1152"),
    # an unrelated program's --batch_size is not Swap-Mukham's
    ("python train.py --batch_size 32\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
     "python app.py --cuda"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
