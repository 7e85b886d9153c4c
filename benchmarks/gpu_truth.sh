#!/usr/bin/env bash
# Issue 62 on the GPU machine: what the CPU cannot check, in stages that fit one device call each.
#   bash benchmarks/gpu_truth.sh tests     # pytest -m gpu (the compiled kernels, recorded decode steps with LoRA)
#   bash benchmarks/gpu_truth.sh decode    # the decode table: 0.5B shape, 1/8/32/128 rows, engine vs static cache
#   bash benchmarks/gpu_truth.sh profile   # torch.profiler tables of one decode step (0.5B shape, 1 and 32 rows)
#   bash benchmarks/gpu_truth.sh grpo      # stage grpo against TRL 1.16 (TRL's wheels in .whl/trl: see below)
# Output goes to $OUT. TRL and what it brings for the machine's Python 3.12 travel in .whl/trl (ignored by git):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl/trl \
#       trl==1.16.0 datasets==5.2.0 dill multiprocess xxhash fsspec
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 STEADYTUNE_CACHE=/root/cache MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$OUT/device.txt"
python3 -c "import torch, transformers, peft, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
for STAGE in "$@"; do
  case $STAGE in
    tests)
      python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 --durations=15 -rs --continue-on-collection-errors tests 2>&1 | tee "$OUT/pytest_gpu.txt" ;;
    decode)
      python3 benchmarks/profile_decode.py --compare --shapes "${DECODE_SHAPES:-qwen2.5-0.5b}" \
          --rows "${DECODE_ROWS:-1,8,32,128}" --output "$OUT/decode_compare.json" 2>&1 \
          | grep -v "Loading weights\|USDT" | tee "$OUT/decode_compare.txt" ;;
    profile)
      # one decode step's kernels (torch.profiler table) at 1 and 32 rows, the engine as serve drives it
      python3 benchmarks/profile_decode.py --shape "${PROFILE_SHAPE:-qwen2.5-0.5b}" --rows 1,32 --profile-dir "$OUT" 2>&1 \
          | grep -v "Loading weights\|USDT" | tee "$OUT/profile_decode.txt" ;;
    grpo)
      python3 -m pip install -q --no-index --no-deps --target /tmp/trlsite .whl/trl/*.whl
      PYTHONPATH=/tmp/trlsite:$PYTHONPATH python3 benchmarks/grpo_vs_trl.py ${GRPO_ARGS:---steps 8 --warmup 2} \
          --output "$OUT/grpo_vs_trl.json" 2>&1 | grep -v "it/s\]\|Warning\|warnings.warn\|^ *{'loss'" \
          | tee "$OUT/grpo_vs_trl.txt" ;;
    *) echo "unknown stage $STAGE"; exit 2 ;;
  esac
done
