"""Rules about the running job, one module per reading:

  shared         a training run, a speech model, an illegal access, the paste as one text (no rules)
  host_memory    host RAM running out: a kernel build's compiler jobs, a worker killed by SIGKILL (no rules)
  out_of_memory  GPU memory running out (each tool's own knobs, a training run's), and NCCL's own buffers
  quantized_releases  a model family's own 4-bit release, for an unquantized model too large to load (no rules)
  served_memory  a server's out-of-memory message naming its flag; a ggml server's long context (its prompt batch)
  reserved_memory  memory taken by design: a serving engine's KV-cache share, a model copy on every GPU
  model_memory   a model said to need about the memory the machine has: its weights in 8 bit (each tool's switch)
  miopen         MIOpen's kernels: its performance database, its solvers
  gpu_hang       a GPU that hangs, faults or resets, and a /dev/kfd stuck so it refuses to open
  precision      number formats: NaN and zero losses, fp16 overflow, a format the GPU lacks, black images
  own_precision  a trainer's own precision check, flag or guard; fp32 reaching flash-attention
  compute_types  CTranslate2's compute types on GPUs where one fails: int8 on Blackwell, float16 on GTX 16xx
  quantized_output  a quantized model answering with "!!!!": its fp16 kernels overflow
  gtx16_half     a GTX 16xx card whose half-precision output is NaN (green pictures, silent audio)
  attention      attention kernels (flash-attention, FlashInfer) on a GPU they have no kernels for
  app_attention  an image app's attention failing under ZLUDA (cuDNN) or ROCm: the app's own attention switch
  sage_attention SageAttention older than the GPU or the node that patches it in: the 2.x release, where it comes from
  trtllm_fmha    TensorRT-LLM's fused attention (context FMHA, FP8 FMHA) checked against the GPU's arch

runner.py imports the rule modules in this order, which is the order their rules register in; prose.py imports
precision's image_nans and nan_whatever_the_format.
"""
