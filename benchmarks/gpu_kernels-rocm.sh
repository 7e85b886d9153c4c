#!/usr/bin/env bash
# Issue 62/64's kernel catalogue on one NVIDIA GPU (H100 or H200), one device call of under 8 minutes, no carried
# wheels (torch, transformers, peft and triton 3.6 of the machine; models built from config with random weights):
#   bash benchmarks/gpu_kernels-rocm.sh                                                    -> $OUT/*.json, $OUT/log
# 1. kernels   every catalogue configuration for this GPU compiled and loaded: the driver's registers and spills
#              against kernel_builds.json (read from cuobjdump on a CPU), and the decode attention (head dims 64,
#              128, 256: the new 32-column tiles with 8 warps at 256), LoRA banks (ranks 8, 64, 128: more warps at
#              128) and grouped matmul (8 warps on NVIDIA now) against torch              -> kernels_on_device.json
# 2. swiglu    the fused SwiGLU's tiles timed (benchmarks/fused_swiglu_speed.py), now with 64x64x8 (no spill on
#              sm_90 in the forward, 176 bytes fewer in the backward) and RDNA's 64x32x8 beside the chosen 64x64x4
#                                                                                          -> fused_swiglu_speed.json
# 3. decode    the decode step on the Gemma 3 270M shape (head dim 256: the split kernel's new tile) and Qwen2.5-0.5B
#              (head dim 64: unchanged), 1/8/32 rows, our kernels against transformers     -> decode_*.txt
# 4. moe       the MoE grouped kernels against torch's and the loop (values, LoRA gradients, time) -> moe_grouped_check.json
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1
T0=$(date +%s)
stamp() { echo "=== $* ($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'triton', triton.__version__)"

stamp "kernels: driver vs record, values vs torch"
timeout 200 python3 benchmarks/kernels_on_device.py --output "$OUT/kernels_on_device.json"
stamp "fused SwiGLU tiles"
timeout 120 python3 benchmarks/fused_swiglu_speed.py --output "$OUT/fused_swiglu_speed.json" | tail -40
for SHAPE in gemma3-270m qwen2.5-0.5b; do
  stamp "decode $SHAPE"
  timeout 75 python3 benchmarks/profile_decode.py --shape $SHAPE --rows 1,8,32 --compare > "$OUT/decode_$SHAPE.txt" 2>&1
  tail -20 "$OUT/decode_$SHAPE.txt"
done
stamp "MoE grouped kernels"
timeout 100 python3 benchmarks/moe_grouped_check.py --output "$OUT/moe_grouped_check.json" | tail -20
stamp "done"
