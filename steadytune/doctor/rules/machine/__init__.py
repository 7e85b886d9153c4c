"""Rules about the machine, one module per reading:

  visibility   which GPUs a process sees: the visibility variables, mixed cards' order, a second GPU or Vulkan layer
  late_visibility  a visibility variable assigned from Python after CUDA / HIP started (env-not-applied)
  gpu_selection  which visible GPUs a tool loads onto: device_map auto, one of several, ggml's --device list,
                 torch on ROCm counting GPUs ROCR_VISIBLE_DEVICES hid
  apu_memory   an APU's GPU memory: the carve-out and the GTT pool
  platform     the platform under the GPU: PCIe atomics, the BIOS's BAR, a card asleep in runtime power management
  xgmi_bridge  GPUs joined by an Infinity Fabric bridge that fail their start-up, or RCCL's P2P over it
               (amdgpu.use_xgmi_p2p=0)
  rccl_releases  RCCL issues a ROCm release lists as known, and the release that resolved them
  multi_gpu    several GPUs: NCCL's transports, its release against the GPU, a serving engine's own all-reduce
  launchers    how a trainer's launch picks its GPUs: one process per GPU (llamafactory-cli, swift, accelerate),
               a GPU chosen for a one-process trainer, DataParallel's replicas, deepspeed's list, SLURM's per-task GPUs
  schedulers   GPUs a scheduler hides from a task that did not ask for them: Ray's num_gpus, SLURM's --gres
  rendezvous   how the ranks find and wait for each other: the collective timeout outwaited, the socket interface,
               libuv, the port, a thin report of multi-node failure
  situations the local apps' and servers' own troubleshooting pages list, told in words (round 17's app_pages.py,
  one module each since round 18):
  suspend_resume     an NVIDIA GPU lost after suspend / resume: nvidia_uvm to reload
  selinux_devices    SELinux keeping a container from the GPU device nodes
  lmstudio_runtimes  LM Studio running its CPU llama.cpp runtime beside a GPU
  ggml_avx2          a ggml app's prebuilt CPU code on a CPU without AVX2 (Illegal instruction)
  ollama_cpu_only    Ollama asked to run on the CPU
  vllm_rocm_wheels   vLLM's PyPI (CUDA) wheel on an AMD machine
  sglang_prefill     SGLang's prefill of long prompts out of memory: --chunked-prefill-size
  vllm_kernels       vLLM's compiled ops after another torch, its Triton flash attention on ROCm
  ollama_gpu_subset  Ollama asked to use only some of several GPUs

runner.py imports them in this order, which is the order their rules register in.
"""
