"""Rules about what was installed, one module per reading:

  shared             the torch a paste lists, its CUDA label and the fix table filled with them (no rules)
  torch_build        the torch build for another vendor or none, a GPU left idle, a fallback to the CPU
  aarch64_torch      PyPI's CPU-only torch on a Linux aarch64 (SBSA) machine: PyTorch's CUDA index
  torch_cuda         the CUDA torch was built with against the GPU, the toolkit and torchvision beside it
  cuda_said_missing  "CUDA is installed but the program finds none": the CPU torch (the toolkit plays no part)
  resolver_swap      an installer record of the GPU torch swapped for PyPI's torch by another package's install
  nightlies          a torch nightly that broke what the one before it ran
  successors         a discontinued package (or build) asked for by its old name: its successor's install
  no_deps            an import that fails after a package was upgraded with --no-deps: its dependencies left behind
  overlapping_packages  a core module of an import name several distributions install (triton, pytorch-triton)
                     missing: the shared folder damaged
  option_values      a library refusing an option value it does not know yet: the library older than the program
  broken_releases    a release whose published builds are known broken, named beside its symptom (a table)
  library_name_errors  a NameError raised in an installed library's own code: a bug of that release
  rocm_dll_releases  a ROCm DLL without the entry point the program calls (Windows): another HIP SDK release's
  zluda_hip_release  torch's CUDA DLLs not loading under a ZLUDA built for HIP SDK 5.7 with a 6.x SDK installed
  compile_backend    torch.compile's backend failing on a ROCm torch, no other error: the Triton beside it
  companion_index    an import failure with PyPI's xformers beside a +cuXXX torch: xformers from torch's index
  program_torch      a torch name missing on a program's import, the program's own torch release known (a table)
  app_torch          the torch in an image or voice app's own Python (a table: its path, the CUDA index it names)
  hidden_imports     a name missing from a package whose __init__ swallows its imports' errors (LLaVA): the
                     hidden error (flash-attn built for another torch)
  wheels             a wheel for another Python or platform, an import or a build that fails, an index behind a pin
  platform_requests  a request for a package's Windows or macOS build (no error line): the table's fix for that OS
  deepspeed_probes   DeepSpeed's op builder probing libaio / cuFile (LNK1181 aio.lib, ld -laio): Linux-only ops
  bnb_cpu_torch      bitsandbytes CPU-only beside a +cpu torch on a GPU machine: torch's GPU build, not bitsandbytes
  ninja_builds       a flash-attn / xformers / DeepSpeed source build said to take hours: no working ninja
  flash_attn_rocm    flash-attn on an AMD GPU outside its CK backend (gfx90a / gfx942 / gfx950): SDPA or its Triton
                     backend
  extension_lock     a JIT extension build waiting for ever on the lock a killed build left in its folder
  unsloth_amd        Unsloth finding no GPU on an AMD machine: the torch beside it is not a ROCm build
  xformers_torch_pin pip install xformers replacing the installed torch: the xformers from that torch's index
  engine_releases    an engine's or kernel package's wheel for another torch, CUDA or OS; a dependency newer than pinned
  tensorrt_engines   a TensorRT engine read by another release than built it; TensorRT-LLM's mpi4py on MPICH
  ctranslate2_builds CTranslate2's wheels by release: CUDA 12 builds on a CUDA 11 driver, a release broken on one
                     platform (faster-whisper, WhisperX)
  twin_packages      a package's CPU and GPU builds installed together (onnxruntime and onnxruntime-gpu)
  companion_pins     a torchvision / torchaudio left pinned to another torch (pip's conflict line)
  cuda_libraries     a CUDA library or the NVIDIA driver older than a binary was built against
  stale_install      files of an older install beside a newer one (a program's library folder, a web UI's venv)
  ptxas              a ptxas older than the PTX or the GPU it is given (two CUDA toolkits mixed), or none found (XLA)
  nvcc_mix           a JIT build with an nvcc of another CUDA release than torch's (CCCL's incompatible headers)
  os_release         a binary linked against a newer glibc than the OS release ships (built for a newer OS)
  nightly_regression a torch nightly in which what worked before stopped working
  build_isolation    torch's CUDA check failing inside pip's isolated build environment (its own torch)
  abi                a compiled extension built against another torch, CUDA or ROCm
  bnb_binaries       bitsandbytes' native library for this CUDA or ROCm (a release table; registered beside libraries)
  tensile_path       rocBLAS reading its Tensile files from the pre-ROCm-5.2 component folder
  hip_sdk_found      a Windows install step (the ZLUDA installers) that does not find the HIP SDK (HIP_PATH, PATH)
  driver_mounts      the NVIDIA driver mounted where the container's loader or linker does not look (GKE's
                     /usr/local/nvidia)
  nvrtc_builtins     NVRTC's versioned builtins library (libnvrtc-builtins.so.X.Y) not on the loader's path
  tensorflow_libraries TensorFlow's GPU libraries installed but not found on Linux ([and-cuda]'s nvidia-* wheels,
                     tensorflow-rocm and a ROCm in /opt/rocm-X.Y.Z)
  framework_cuda_builds  TensorFlow / PaddlePaddle loading CUDA or cuDNN libraries by the versioned names of the
                     release they were built for (a release table each): that CUDA, or the build for the installed one
  cudnn_headers      a CUDA extension build not finding cudnn.h: the variables its build reads (CUDNN_PATH)
  cudnn_windows      cuDNN installed on Windows but not loaded: cuDNN 9's per-CUDA bin folder, cuDNN 8's zlibwapi.dll
  cudnn8_crash       a crash in a program's bundled cuDNN 8 DLL (Windows' faulting module): CUDA 11.8 on PATH
  onnxruntime_cuda   onnxruntime-gpu's CUDA provider: the CUDA / cuDNN of its release (a table) or of a program's
                     bundled build, and the CUDA provider on an Intel or AMD GPU
  libraries_missing  a ROCm, CUDA or system library the loader does not find
  spconv_builds      spconv / cumm by tensorview's own errors: the CPU-only cumm, a wheel without the GPU's
                     kernels (spconv's per-CUDA package table)
  gpu_names          an AMD GPU's name left empty: libdrm's amdgpu.ids table missing or older than the GPU
  bundled_libraries  a library a wheel bundles (torch's cuDNN) shadowed by another copy on LD_LIBRARY_PATH
  program_runtimes   GPU runtime libraries a program loads itself: left out of its archive, the CUDA Toolkit it
                     needs, an ancient cudart first on PATH
  nccl_library       the NCCL library a serving engine (vLLM's pynccl) loads by path
  lmstudio_backends  LM Studio 0.2.25-0.2.x on an AMD card: no OpenCL backend in the download, its extension packs
  programs           one program's own words about its install (AutoGPTQ, hipcc, Jan, Ollama), registered last

runner.py imports them in this order, which is the order their rules register in.
"""
