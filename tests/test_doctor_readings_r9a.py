"""doctor, round 9 (issue 63): readings of the wheel-platform and rocm-libs-missing families — bitsandbytes' release
table of native binaries (CUDA and ROCm), a ptxas older than the PTX or the GPU, a binary built for a newer OS (glibc),
the ROCm package that ships a missing library, a module torch removed, a module said missing on an OS where its package
comes another way, nvcc missing where CUDA_HOME points, a PyInstaller bundle without its DLLs, a bundled ROCm runtime
that crashes, Triton up to 2.1 finding libcuda through the ldconfig cache only; and, out of rocm-libs-missing, a
symlink Windows refuses (device-access). Each paste is written for its reading
(another GPU, tool or wording than the mined case that asked for it); the negatives keep each reading out of pastes it
does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # bitsandbytes on Windows wanting a CUDA 12.5 binary the installed 0.43.0 lacks: the first release with it
    ("bitsandbytes==0.43.0 on Windows 11, RTX 4070\nCould not find the bitsandbytes CUDA binary at WindowsPath("
     "'C:/venv/Lib/site-packages/bitsandbytes/libbitsandbytes_cuda125.dll')", "wheel-platform",
     ["bitsandbytes>=0.43.2", "libbitsandbytes_cuda125"]),
    # a user who looked for the CUDA 11.8 file by hand (no loader output): the release that first shipped it
    ("Installed CUDA 11.8 yesterday and bitsandbytes now fails, there is no libbitsandbytes_cuda118.so in the "
     "package folder, it is missing", "wheel-platform", ["bitsandbytes>=0.35.0", "cuda118"]),
    # the old loader (CUDA SETUP lines) with CUDA 11.7 asked for on a CUDA 11 machine: a runtime of x.0, or upgrade
    ("CUDA SETUP: Detected CUDA version 113\nCUDA SETUP: Required library version not found: "
     "libbitsandbytes_cuda113.so. Maybe you need to compile it from source?", "wheel-platform",
     ["11.8", "bitsandbytes"]),
    # the old loader, a CUDA 12.3 runtime, no binary for it: CUDA 12.0's runtime first on the path
    ("CUDA SETUP: Detected CUDA version 123\nCUDA SETUP: Required library version not found: "
     "libbitsandbytes_cuda123.so. Maybe you need to compile it from source?\nbitsandbytes 0.39.1", "wheel-platform",
     ["CUDA 12.0", "0.41.0"]),
    # CUDA 11.4 said with a build of bitsandbytes, no file named: bitsandbytes' oldest CUDA
    ("trying to build bitsandbytes from source for CUDA 11.4 on our cluster, CUDA_VERSION=114 make cuda11x says no "
     "rule to make target", "wheel-platform", ["11.8", "CMake"]),
    # ROCm 6.10 (a two-digit minor) read as 7.0: the joined tag, rocm610
    ("torch 2.9.0+rocm6.10.0 from TheRock\nRuntimeError: Configured ROCm binary not found at "
     "/venv/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_rocm70.so", "wheel-platform",
     ["libbitsandbytes_rocm610", "1889"]),
    # the right tag, not shipped: build for this ROCm or BNB_ROCM_VERSION
    ("torch 2.8.0+rocm6.4\nConfigured ROCm binary not found at /opt/venv/lib/python3.12/site-packages/bitsandbytes/"
     "libbitsandbytes_rocm64.so", "wheel-platform", ["BNB_ROCM_VERSION", "-DCOMPUTE_BACKEND=hip"]),
    # Triton's PTX newer than a CUDA 12.4 ptxas (another ISA pair)
    ("torch.compile on an L40S, CUDA 12.4 toolkit\ntriton.runtime.errors.PTXASError: PTXAS error: Internal Triton "
     "PTX codegen error\nptxas /tmp/k.ptx, line 5; fatal   : Unsupported .version 8.5; current version is '8.4'",
     "wheel-platform", ["TRITON_PTXAS_PATH", "12.5"]),
    # numba (no Triton) with the same ptxas refusal: the ptxas of a newer CUDA first on PATH
    ("numba.cuda.cudadrv.error.NvvmError\nptxas fatal   : Unsupported .version 7.8; current version is '7.4'",
     "wheel-platform", ["CUDA 11.8", "which -a ptxas"]),
    # XLA (TensorFlow this time) with an old ptxas on PATH for an H100
    ("tensorflow 2.15 on an H100\nW external/local_xla/xla/stream_executor/gpu/asm_compiler.cc:225] Falling back to "
     "the CUDA driver for PTX compilation; ptxas does not support CC 9.0\nUsed ptxas at /usr/local/cuda-11.4/bin/ptxas",
     "wheel-platform", ["/usr/local/cuda-11.4/bin/ptxas", "nvidia-cuda-nvcc-cu12"]),
    # a binary linked against glibc 2.31 on Debian 9: the OS release that ships it
    ("$ ./llama-server -m model.gguf\n./llama-server: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.31' not "
     "found (required by ./llama-server)\nPRETTY_NAME=\"Debian GNU/Linux 9 (stretch)\" Debian 9", "wheel-platform",
     ["Debian 11", "Debian 9"]),
    # CentOS 7's glibc 2.17 and a wheel's library built for 2.28
    ("CentOS Linux release 7.9.2009 (Core)\nImportError: /lib64/libc.so.6: version `GLIBC_2.28' not found (required "
     "by /home/u/venv/lib/python3.10/site-packages/ctranslate2.libs/libctranslate2.so.4)", "wheel-platform",
     ["CentOS 8", "glibc 2.28"]),
    # a ROCm library missing whose package shows installed (another library, another tool): reinstall its package
    ("$ python -c 'import torch'\nImportError: librocm_smi64.so.7: cannot open shared object file: No such file or "
     "directory\nbut dpkg -l says rocm-smi-lib is installed", "rocm-libs-missing",
     ["sudo apt install --reinstall rocm-smi-lib"]),
    # a package written before torch 2.0 importing torch._six (apex this time)
    ("ModuleNotFoundError: No module named 'torch._six'\nafter upgrading torch to 2.1.0, apex fails at import",
     "wheel-platform", ["pip install -U apex", "torch 2.0"]),
    # Triton said missing in words, on Windows, in another program (ComfyUI): triton-windows
    ("ComfyUI on Windows 11 with an RTX 4080: the console keeps saying no module named triton when I enable "
     "torch.compile", "wheel-platform", ["triton-windows"]),
    # an op builder that finds no nvcc where CUDA_HOME says (apex), a pip nvcc elsewhere
    ("pip install -v --no-build-isolation apex\nerror: [Errno 2] No such file or directory: "
     "'/usr/local/cuda-12.1/bin/nvcc'", "rocm-libs-missing", ["CUDA_HOME", "bin/nvcc"]),
    # a PyInstaller bundle of another ROCm program without its hipBLAS DLLs
    ("SD-ROCm-Portable 2.1 (ROCm build) on Windows 10\nOSError: Failed to load dynlib/dll "
     "'C:\\\\Users\\\\me\\\\AppData\\\\Local\\\\Temp\\\\_MEI88\\\\ggml_hipblas.dll'. Most likely this dynlib/dll was "
     "not found when the application was frozen.", "rocm-libs-missing", ["hipblas.dll", "rocblas.dll"]),
    # a prebuilt's own libamdhip64 crashing on a machine whose /opt/rocm works (another program, another GPU)
    ("LM Studio's ROCm runtime: Segmentation fault (core dumped) inside its bundled libamdhip64.so.6 on an RX 9070 "
     "XT; hipinfo from /opt/rocm (ROCm 6.4) works fine", "wheel-platform", ["LD_LIBRARY_PATH=/opt/rocm/lib"]),
    # a symlink refused by Windows in another package's build (WinError 1314, a pip install of flash-attn's setup.py)
    ("pip install -e . (Windows 11, RTX 3080)\n  File \"D:\\src\\mamba\\setup.py\", line 61, in link_kernels\n"
     "OSError: [WinError 1314] A required privilege is not held by the client: 'D:\\src\\csrc' -> "
     "'D:\\src\\mamba\\csrc'", "device-access", ["Developer Mode", "symlink", "mamba"]),
    # Triton's own assertion on Kaggle: register the driver folder with ldconfig
    ("Kaggle notebook, P100\nAssertionError: libcuda.so cannot found!\nfrom triton/common/build.py",
     "rocm-libs-missing", ["ldconfig", "libcuda"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # bitsandbytes with CUDA 12.1 that loads fine: no binary reading
    ("bitsandbytes 0.45.0 with CUDA 12.1 on an A100, 4-bit loading works, just slow", "libbitsandbytes_cuda"),
    # a CUDA below 11.8 said without bitsandbytes: not bitsandbytes' minimum
    ("my server runs CUDA 11.4 and torch 1.12, training is slow", "bitsandbytes builds and supports"),
    # the ROCm tag bitsandbytes asks for matches a ROCm it ships: not the parse reading
    ("torch 2.5.1+rocm6.2 and libbitsandbytes_rocm62.so loads fine", "major*10+minor"),
    # ptxas that compiles (no refusal): no ptxas reading
    ("ptxas info    : Used 32 registers, 384 bytes cmem[0]\ntraining runs at 2 it/s", "TRITON_PTXAS_PATH"),
    # a glibc message with no OS release said: not the newer-OS reading
    ("./main: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by ./main)",
     "is not one it supports"),
    # the OS has the glibc asked for (Ubuntu 22.04 has 2.35): not the newer-OS reading
    ("Ubuntu 22.04.3 LTS\n./bin: version `GLIBC_2.34' not found (required by ./bin)", "is not one it supports"),
    # triton said missing on Linux (PyPI has it there): not the Windows build
    ("Ubuntu 22.04, RTX 3090: it says no module named triton, pip install triton fixed it", "triton-windows"),
    # a missing module torch did not remove: not the removed-module reading
    ("ModuleNotFoundError: No module named 'torch_geometric'\ndeepspeed 0.14", "written for torch"),
    # a PyInstaller DLL error of a CUDA build: not the HIP SDK's DLLs
    ("koboldcpp_cu12.exe\nFailed to load dynlib/dll 'koboldcpp_cublas.dll'. Most likely this dynlib/dll was not "
     "found when the application was frozen. RTX 3060", "hipblas.dll"),
    # a crash with no bundled runtime named: not the bundled-runtime reading
    ("llama-server segfaults on startup with ROCm 6.4 in /opt/rocm, RX 7900 XTX", "ahead of the bundled copy"),
    # rocBLAS's empty list where the user names this arch's own file as the missing one: not the empty-folder reading
    ("LM Studio ROCm runtime, RX 6800: missing files such as TensileLibrary_lazy_gfx1030.dat in its folder\n"
     "rocBLAS error: Cannot read C:\\app\\rocblas\\library\\TensileLibrary.dat: No such file or directory for "
     "GPU arch : gfx1030\nList of available TensileLibrary Files :", "its rocblas/library folder is complete"),
    # a WinError 1314 with no link being made (a service install): not the symlink reading
    ("sc create myservice ...\n[WinError 1314] A required privilege is not held by the client", "Developer Mode"),
    # triton 2.1 on a workstation that works: no libcuda reading
    ("triton 2.1.0 with torch 2.1.2 on my RTX 4090 workstation, kernels run fine", "ld.so.conf.d"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
