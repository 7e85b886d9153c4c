"""Rules about code for this GPU's arch, one module per reading:

  overrides        HSA_OVERRIDE_GFX_VERSION naming the wrong arch, or set where the paste does not show it
  cuda_builds      the CUDA side of a missing arch: toolkits, torch builds and wheels by compute capability (no rules)
  old_gcn          old GCN cards and the ROCm of their era (no rules)
  arch_missing     code missing for the GPU's arch, and the override or rebuild that brings it
  nccl             NCCL releases that predate a Blackwell GPU
  gpu_unsupported  a GPU outside every build: Intel under CUDA or ROCm, old GCN cards, GPUs the apps or KFD dropped
  target_lists     the targets a source build or an SDK carries
  prebuilt_floor   an NVIDIA card older than a tool's prebuilt binaries, or capabilities a release says it dropped: the
                   tool's source build for them
  card_floors      a card within a program's documented floor that its release calls too old: that release's build
  tool_floors      an NVIDIA card under a tool's floor (Ollama 5.0, LMDeploy 7.0...), or a release that raised it
  kernel_errors    a CUDA kernel error on a Blackwell card under a torch not shown to carry it: the cu128 build
  vendor_only      a tool whose GPU path is one vendor's (CTranslate2: NVIDIA) on a Mac or another vendor's GPU
  contrib_extensions  flash-attn's separately built CUDA extensions (layer_norm...) without kernels: their Triton ops
  no_compiler_target  a GFX9 name LLVM has no processor for (gfx903): no build can be made for it
  release_added    a feature path for older GPUs that a tool's later release added (bitsandbytes' int8 matmul)
  tensorrt_archs   TensorRT refusing the GPU's SM: the first release with its generation (8.5 Ada/Hopper, 10.8 Blackwell)
  triton_mma       Triton's MMA-version assertion on a card without tensor cores (Pascal and older): unsupported
  kfd_process_vm   KFD failing to create a process's GPU VM: a GPU older than gfx9, not the user's groups
  source_builds    a self-built ROCm (TheRock) whose runtime skips the machine's gfx target: build it for that target
  release_regressions  a newer ROCm crashing on a card an older ROCm the paste names runs: that release, side by side
  gpu_asks         the line of a short paste that asks for the GPU itself (no rules)
  build_asks       a short ask for a build for an AMD GPU, no tool with its own remedy named: a build with its target
  arch_guards      a kernel guarded for one exact sm_XX run on a sibling of its family (sm120-only on sm_121)
  ollama_windows   Ollama on Windows with an empty ROCm supported list for every GPU: its Vulkan backend
  cpu_floor        an app offering only its failsafe (no-AVX) mode: a CPU without AVX, and a GPU below every backend
  windows_rocblas  which rocBLAS carries a Radeon on Windows: the HIP SDK's own for an arch it lists (no ROCmLibs
                   package is made for it), HIP SDK 5.7's for Vega and Polaris under Ollama
  capability_range torch's "Minimum and Maximum cuda capability" warning read by its numbers (a newer minor is fine)
  framework_cuda   a framework's CUDA build older than the GPU's generation (Paddle's arch check, TensorFlow on CUDA 10)
  nvrtc_targets    NVRTC asked for an arch its CUDA release does not know: a build for a CUDA that knows the GPU
  tinygrad_backends  tinygrad's AMD backend refusing a gfx target: its HIP backend (HIP=1)
  op_floors        a DeepSpeed op whose builder keeps no target for the GPU (inference-v2 ops need 8.0)

runner.py imports the rule modules in this order, which is the order their rules register in.
"""
