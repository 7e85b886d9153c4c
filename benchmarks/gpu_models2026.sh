#!/usr/bin/env bash
# Issue 65's GPU measurements: the 2026 generation (Qwen3.5 dense and MoE, Qwen3-Next, Gemma 4) on one H100/H200,
# models built from the published configs (steadytune/model/shapes.py names each source) with random weights.
# Every number lands in $OUT; each stage fits one device call (under 8 minutes).
#
#   bash benchmarks/gpu_models2026.sh            check, then families                       carry [".whl/fla"]
#   bash benchmarks/gpu_models2026.sh families_mid                                           carry [".whl/fla"]
#   bash benchmarks/gpu_models2026.sh peers_qwen35 | peers_moe | peers_next | peers_gemma4   carry [".whl/fla"]
#                                                (after staging the peers' wheels, as gpu_speed_session.sh's header says)
#
# Wheels carried: .whl/fla (flash_linear_attention-0.6.0, fla_core-0.6.0, einops-0.8.2: 1.5 MB; made by
# `bash benchmarks/peer_wheels.sh fla`). Without them the check stage stops in one line and the families run on
# transformers' PyTorch reference (the start-up line and the arms' settings say so). The peers (LLaMA-Factory 0.9.5,
# Unsloth 2026.10.9) use the wheels staged in /root/keep by gpu_speed_session.sh's staging calls; they see the same fla
# (it is on PYTHONPATH), so their linear layers get its kernels too.
#
# Stages:
#   check    benchmarks/linear_attention_check.py: fla's varlen delta rule and conv against the reference per sequence
#            (values and gradients), the speed of one layer's delta rule at 16k packed tokens (fla vs reference), a
#            packed Qwen3.5-0.8B step (4 layers): packed = one at a time, and the CUDA kernels it launched (fla's by
#            name), then the same with compiled layers                                    (~2 min) -> la_check.json
#   families steadytune against plain (both eager: compiling would take most of an arm's minute), 2 warm-up + 10
#            timed steps an arm, 4k-token steps: qwen3.5-0.8b (24 layers), qwen3.5-35b-a3b and qwen3-next-80b-a3b at
#            8 layers (the published widths; 160 GB for all 48 of Qwen3-Next)                  (~4.5 min) -> fam_*.json
#   families_mid   the same for gemma4-e2b, and gemma4-31b and qwen3.5-27b at 8 layers (a call of its own) -> fam_*.json
#   peers_*  one shape with steadytune, llamafactory, unsloth, plain (the speed bar: >= 3x the fastest peer's
#            tokens/s at <= its memory): peers_qwen35 qwen3.5-0.8b, peers_moe qwen3.5-35b-a3b at 8 layers,
#            peers_next qwen3-next-80b-a3b at 8 layers, peers_gemma4 gemma4-e2b                 -> peers_*.json
# Ends with benchmarks/speed_summary.py over whatever was written.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1
T0=$(date +%s)
stamp() { echo "=== $* ($(( $(date +%s) - T0 )) s)"; }
STAGES=${*:-check families}

if ls .whl/fla/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla/*.whl 2>&1 \
      | grep -v "already exists"
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 STEADYTUNE_CACHE=/root/cache MPLBACKEND=Agg
export TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import importlib.util, torch, transformers, peft, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'triton', triton.__version__, 'fla', 'yes' if importlib.util.find_spec('fla') else 'NO (carry .whl/fla)')"
# Short and equal for every arm: 2 untimed steps, then 10 timed ones in windows of 5.
B="python3 -m steadytune bench --warmup 2 --window 5 --steps 10 --max-tokens 4096 --cutoff-len 1024"

keep() { ls -d /root/keep/$1 .whl/$1 2>/dev/null | head -1; }
peer_env() {  # folder of wheels, target: install once, then a python3 wrapper with the target first on the path
  [ -d "$2" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$2" $(ls $1/*.whl) \
      2>&1 | grep -v "already exists"
  printf '#!/bin/sh\nPYTHONPATH=%s:$PYTHONPATH exec python3 "$@"\n' "$2" > "$2.python"; chmod +x "$2.python"
}
peers() {  # shape, output name, extra bench arguments
  for PEER in lf unsloth unsloth_deps bnb; do
    ls "$(keep $PEER)"/*.whl >/dev/null 2>&1 || {
      echo "peers: no $PEER wheels in /root/keep or .whl; stage them first (gpu_speed_session.sh's header)"; exit 3; }
  done
  peer_env "$(keep lf)" /tmp/lfsite
  peer_env "$(keep unsloth)" /tmp/ussite
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ussite $(ls $(keep unsloth_deps)/*.whl) \
      $(ls $(keep bnb)/*.whl) 2>&1 | grep -v "already exists"
  local shape=$1 name=$2; shift 2
  stamp "$shape $*: steadytune, llamafactory, unsloth, plain"
  # steadytune first, plain last: an arm that outlasts the call costs only its own row and the ones after it
  timeout 450 $B --shape $shape "$@" --arms steadytune,llamafactory,unsloth,plain --arm-timeout 150 \
      --lf-python /tmp/lfsite.python --unsloth-python /tmp/ussite.python --output "$OUT/peers_$name.json" \
      | grep --line-buffered -v Warning
}

for STAGE in $STAGES; do
  case $STAGE in
    check)
      python3 -c "import fla" 2>/dev/null || { echo "check: flash-linear-attention does not import: carry .whl/fla"; continue; }
      stamp "gated DeltaNet kernels: fla varlen against the reference, speed, a packed step's kernels, compiled"
      timeout 170 python3 benchmarks/linear_attention_check.py --output "$OUT/la_check.json" 2>&1 \
          | grep --line-buffered -v Warning
      ;;
    families|families_mid)
      # Compiling the layers would take most of an arm's minute here: these first rows are eager (--compile off, said
      # in each arm's settings); the peers stages run the default policy, compile included.
      RUNS=("qwen3.5-0.8b" "qwen3.5-35b-a3b --num-layers 8" "qwen3-next-80b-a3b --num-layers 8")
      [ $STAGE = families_mid ] && RUNS=("gemma4-e2b" "gemma4-31b --num-layers 8" "qwen3.5-27b --num-layers 8")
      for RUN in "${RUNS[@]}"; do
        set -- $RUN
        stamp "$RUN: steadytune, plain (eager)"
        timeout 90 $B --shape $RUN --arms steadytune,plain --compile off --arm-timeout 60 --output "$OUT/fam_$1.json" \
            | grep --line-buffered -v Warning
      done
      ;;
    peers_qwen35) peers qwen3.5-0.8b qwen3.5-0.8b;;
    peers_moe) peers qwen3.5-35b-a3b qwen3.5-35b-a3b-8l --num-layers 8;;
    peers_next) peers qwen3-next-80b-a3b qwen3-next-8l --num-layers 8;;
    peers_gemma4) peers gemma4-e2b gemma4-e2b;;
    *) echo "unknown stage $STAGE (check, families, families_mid, peers_qwen35, peers_moe, peers_next, peers_gemma4)"
       exit 2;;
  esac
done
stamp "summary"
python3 benchmarks/speed_summary.py $(ls "$OUT"/fam_*.json "$OUT"/peers_*.json 2>/dev/null) || true
stamp "done"
