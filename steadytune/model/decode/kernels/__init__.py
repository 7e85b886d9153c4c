"""The decode step's Triton kernels (NVIDIA CUDA and AMD ROCm alike): split-K attention over each row's length
(attention_triton), the LoRA shrink/expand pair with an adapter per row (bgmv_triton), the fused small ops: residual
add + RMSNorm, q/k norm + rotary + cache write, activation x up (fused_triton), and sampling (sample_triton). Imported
only where they run (a GPU with Triton); ops.TorchOps holds the reference each is tested against, in Triton's
interpreter on the CPU (tests/test_decode_kernels.py)."""
