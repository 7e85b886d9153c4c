#!/usr/bin/env bash
# Issue 68's GPU measurements of stage grpo (benchmarks/grpo_rl2.py), on one H100 or H200, in one call of under 8
# minutes: random-weight models built here (no hub, no network), torch 2.11 CUDA, transformers 5.x, peft 0.21,
# triton 3.6 as the machine has them. The TRL arms need TRL 1.16 and what it brings for Python 3.12, as
# benchmarks/gpu_session.sh's grpo stage carries them: .whl/trl/*.whl or /root/keep/trl/*.whl (trl, datasets, dill,
# multiprocess, xxhash, fsspec, jinja2, markupsafe: pip download --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux2014_x86_64 -d .whl/trl trl==1.16.0 datasets==5.2.0 ...); without them those arms fail alone.
# Each arm is its own process under `timeout`, so one that runs long or fails leaves the others' JSON; the arms share
# one deadline (RL2_SECONDS, default 460 s), so the whole call ends within 8 minutes: an arm that would start too late
# is skipped, and said so. dr_grpo's and luspo's steps compute what grpo's and gspo's do (only the normaliser
# differs), so they are not timed again here.
#   dense shape (Qwen2.5-0.5B widths), 8 prompts x 8 completions of up to 256 tokens, loss dapo, beta 0:
#     sync   async_staleness: 0 (the synchronous path)        async  async_staleness: 1 (generation of step n+1
#     on a second CUDA stream while step n trains)           loss_*  each loss of the family on the default path
#     trl_dense  TRL's GRPOTrainer (generate, checkpointing on), loss dapo
#   MoE shape (Qwen3-30B-A3B widths, 4 layers: 128 experts, 8 a token), 4 prompts x 8 completions of up to 128:
#     moe  steadytune (grouped experts in roll-out and training, routers frozen)    trl_moe  TRL, the same adapter
# Writes $OUT/rl2_<arm>.json, $OUT/rl2_summary.txt (the ratios issue 68 asks for) and $OUT/rl2.log.
# Usage: bash benchmarks/gpu_rl2.sh [all|async|losses|trl|moe]   (RL2_WORK: where models and runs go;
# RL2_SMOKE=1: tiny shapes and batches, the whole script in a few minutes on a CPU, to check it runs)
set -u
OUT=${OUT:-/tmp/rl2_out}
mkdir -p "$OUT"
WORK=${RL2_WORK:-/tmp/rl2_work}
PART=${1:-all}
WHEELS=$(ls .whl/trl/*.whl 2>/dev/null || ls /root/keep/trl/*.whl 2>/dev/null || true)
[ -n "$WHEELS" ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site $WHEELS
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec > >(tee -a "$OUT/rl2.log") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "no nvidia-smi"
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
python3 -c "import trl; print('trl', trl.__version__)" || echo "trl: not installed (the trl arms will fail)"
B="python3 benchmarks/grpo_rl2.py"
DEADLINE=${RL2_SECONDS:-460}
arm() {   # arm SECONDS NAME ARGS...: one arm in its own process, its JSON in $OUT
  local limit=$1 name=$2; shift 2
  local left=$((DEADLINE - SECONDS - 10))
  if [ "$left" -lt 25 ]; then echo "=== $name: skipped (${left} s left of RL2_SECONDS=$DEADLINE)"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name ($(date +%T), limit ${limit} s)"
  timeout "$limit" $B "$@" --workdir "$WORK" --name "$name" --output "$OUT/rl2_$name.json" \
    2>&1 | grep -v "it/s\]\|s/it\]" | tail -25 || echo "$name: exit $?"
}
SHAPES="" DENSE="--model dense --prompts 8 --generations 8 --completion-length 256"
MOE="--model moe --prompts 4 --generations 8 --completion-length 128"
if [ "${RL2_SMOKE:-0}" = 1 ]; then
  SHAPES="--shape tiny --moe-shape moe-tiny" DENSE="--model dense --prompts 2 --generations 4 --completion-length 8"
  MOE="--model moe --prompts 2 --generations 4 --completion-length 8"
fi
[ -d "$WORK/model_moe" ] || timeout 120 $B prepare --workdir "$WORK" $SHAPES 2>&1 | tail -5
if [ "$PART" = all ] || [ "$PART" = async ]; then
  arm 80 sync steadytune $DENSE --steps 8 --warmup 2 --set async_staleness=0
  arm 80 async steadytune $DENSE --steps 8 --warmup 2 --set async_staleness=1
fi
if [ "$PART" = all ] || [ "$PART" = losses ]; then
  for loss in grpo cispo sapo; do
    arm 40 "loss_$loss" steadytune $DENSE --steps 4 --warmup 2 --set loss_type=$loss
  done
  arm 40 loss_gspo steadytune $DENSE --steps 4 --warmup 2 --set loss_type=grpo --set importance_sampling_level=sequence
fi
if [ "$PART" = all ] || [ "$PART" = trl ]; then
  arm 100 trl_dense trl $DENSE --steps 3 --warmup 1 --loss dapo
fi
if [ "$PART" = all ] || [ "$PART" = moe ]; then
  arm 80 moe steadytune $MOE --steps 5 --warmup 2
  arm 110 trl_moe trl $MOE --steps 2 --warmup 1 --loss dapo
fi
$B summary "$OUT"/rl2_*.json | tee "$OUT/rl2_summary.txt"
