#!/usr/bin/env bash
# Issue 66's single-GPU long-context measurement, one device call of about 6 minutes (H200) / 3 minutes (H100), no
# carried wheels (torch with CUDA, transformers, peft are the machine's). Run from the repository root:
#     bash benchmarks/gpu_longctx.sh            # results and the log in $OUT
#     LONGCTX_FULL=1 bash benchmarks/gpu_longctx.sh   # also the full 28 layers at the long length (~50 min on an
#                                                     # H200 at 1M tokens: beyond one call's 10 minutes)
# The Qwen2.5-7B shape (Qwen2.5-7B-Instruct-1M's widths and 1,010,000-position window), random weights built on the
# GPU, LoRA r 16 on every linear layer, one row of random tokens, every token labelled (benchmarks/longctx_bench.py):
#   full_depth_64k.json  all 28 layers at 65,536 tokens under train's plan (tiled layers; host layers as the plan
#                        says): tokens/s, peak allocated memory against the plan's estimate, 2 steps (1 warm-up)
#   long_2layers.json    1,000,000 tokens on a GPU of 120 GiB or more (H200), 500,000 on an 80 GB H100, two layers
#                        of the shape, one of their inputs in host memory (so the copies out and back are in the
#                        time), one step: peak against the estimate for that depth, the step time, and the full
#                        depth's step time and tokens/s extrapolated (each layer costs the same); plan_full holds the
#                        plan's estimate and host layers for all 28 layers at that length
set -uo pipefail
OUT=${OUT:-/tmp/gpu_longctx}
mkdir -p "$OUT"
LOG="$OUT/longctx_log.txt"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# one allocation pattern per tile: expandable segments keep the caching allocator from fragmenting 6 GiB tensors
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  grep MemTotal /proc/meminfo
  python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'
} 2>&1 | tee "$LOG"
GIB=$(python3 -c 'import torch; print(int(torch.cuda.get_device_properties(0).total_memory / 2**30))')
if [ "$GIB" -ge 120 ]; then LONG=1000000; else LONG=500000; fi
echo "GPU memory ${GIB} GiB: the long run takes ${LONG} tokens" | tee -a "$LOG"

python3 benchmarks/longctx_bench.py --tokens 65536 --steps 2 --out "$OUT/full_depth_64k.json" 2>&1 | tee -a "$LOG"
python3 benchmarks/longctx_bench.py --tokens "$LONG" --layers 2 --host-layers 1 --steps 1 \
    --out "$OUT/long_2layers.json" 2>&1 | tee -a "$LOG"
if [ "${LONGCTX_FULL:-0}" = "1" ]; then
  python3 benchmarks/longctx_bench.py --tokens "$LONG" --steps 1 --out "$OUT/long_full.json" 2>&1 | tee -a "$LOG"
fi
ls -l "$OUT" | tee -a "$LOG"
