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
  app_pages    situations the local apps' and servers' own troubleshooting pages list, told in words: an NVIDIA GPU
               lost after suspend, SELinux and a container's devices, LM Studio's CPU runtime, a ggml app on a CPU
               without AVX2, Ollama asked for the CPU, vLLM's PyPI wheel on AMD, SGLang's prefill out of memory

runner.py imports them in this order, which is the order their rules register in.
"""
