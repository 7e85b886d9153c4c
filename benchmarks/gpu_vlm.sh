#!/usr/bin/env bash
# Vision-language LoRA speed on one GPU, in one call of under 8 minutes (issue 62, "Vision at speed"): steadytune
# (`train` with its defaults, torch_compile: true standing for a run of 400+ micro-batches) against the plain
# transformers + peft loop, at the Qwen2.5-VL-3B shape, then Qwen3-VL-4B and Gemma-3-4B; then, with the time left and
# when its wheels are carried, LLaMA-Factory 0.9.5 at the 3B shape (last: its figure is known from issue 62, and the
# three shapes come first). benchmarks/vlm_speed.py does the work (random weights, rows shaped like LLaMA-Factory's
# mllm_demo, 512 x 512 images, 4 rows a step); each arm in its own process, tokens/s over the timed steps and peak
# torch.cuda.max_memory_allocated. Every shape gets a deadline, so the call ends in time whatever compiling costs; an
# arm cut by it says so.
#
#   bash benchmarks/gpu_vlm.sh            # writes $OUT/vlm_<shape>.json, $OUT/summary.txt and $OUT/log
#
# Nothing to carry for steadytune and plain (the machine's torch 2.11, transformers 5.17, peft 0.21, triton 3.6).
# LLaMA-Factory: `bash benchmarks/peer_wheels.sh lf unsloth_deps` here, then carry .whl/lf and the torchvision 0.26.0
# wheel (from .whl/unsloth_deps, or put alone in .whl/torchvision): 30 + 7.5 MB; either may also sit in /root/keep/
# from an earlier call. Without them the LF arm is skipped, saying so.
set -u
OUT=${OUT:-/tmp/vlm_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1   # a call cut at its limit still returns what was printed
START=$(date +%s)
TOTAL=${VLM_SECONDS:-455}          # the three shapes' share of the call's 8 minutes
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'triton', triton.__version__)"

find_wheels() {  # pattern: the first carried or staged match
  ls .whl/$1 /root/keep/$1 .whl/*/$1 /root/keep/*/$1 2>/dev/null | head -1
}
LF_ARGS=()
LF_WHEELS=$(ls .whl/lf/*.whl /root/keep/lf/*.whl 2>/dev/null | head -1)
TORCHVISION=$(find_wheels "torchvision-0.26.0*.whl")
if [ -n "$LF_WHEELS" ] && [ -n "$TORCHVISION" ]; then
  [ -d /tmp/lfsite ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/lfsite \
      $(dirname "$LF_WHEELS")/*.whl "$TORCHVISION" 2>&1 | grep -v "already exists"
  printf '#!/bin/sh\nPYTHONPATH=/tmp/lfsite:$PYTHONPATH exec python3 "$@"\n' > /tmp/lfsite.python
  chmod +x /tmp/lfsite.python
  LF_ARGS=(--lf-python /tmp/lfsite.python)
else
  echo "LLaMA-Factory arm skipped: carry .whl/lf and a torchvision 0.26.0 wheel (header of this script)"
fi

left() { echo $(( TOTAL - ($(date +%s) - START) )); }
shape() {  # name, output name, seconds to keep for what comes after, then vlm_speed.py's arguments
  local name=$1 out=$2 keep=$3; shift 3
  local budget=$(( $(left) - keep ))
  echo "=== $out: $budget s ($(left) s left in all) ==="
  [ "$budget" -ge 60 ] || { echo "$out: skipped, too little time left"; return; }
  python3 benchmarks/vlm_speed.py --shape "$name" --work /root/vlm --out "$OUT/vlm_$out.json" --deadline "$budget" \
      "$@" 2>&1 | grep --line-buffered -v "it/s\]\|Warning\|warn("
}
# What each shape leaves for the ones after it scales with TOTAL (at 455 s: 290 and 160), so a shorter call shortens
# every shape instead of skipping the first ones (VLM_SECONDS=220 on 2026-12-06 ran only the last shape).
shape qwen2.5-vl-3b qwen2.5-vl-3b $(( TOTAL * 290 / 455 )) --arms steadytune,plain --warmup 5 --steps 25
shape qwen3-vl-4b qwen3-vl-4b $(( TOTAL * 160 / 455 )) --arms steadytune,plain --warmup 4 --steps 16
shape gemma-3-4b gemma-3-4b 0 --arms steadytune,plain --warmup 4 --steps 16
if [ ${#LF_ARGS[@]} -gt 0 ]; then
  TOTAL=$(( TOTAL + ${VLM_LF_SECONDS:-0} ))   # what the LF arm may add (VLM_LF_SECONDS, default none)
  shape qwen2.5-vl-3b qwen2.5-vl-3b-lf 0 --arms llamafactory "${LF_ARGS[@]}" --warmup 5 --steps 25
fi

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path

for path in sorted(Path(sys.argv[1]).glob("vlm_*.json")):
    r = json.loads(path.read_text())
    print(f"{r['spec']['shape']} on {r.get('device')} ({', '.join(f'{k} {v}' for k, v in r.get('versions', {}).items())})")
    for arm, a in r["arms"].items():
        if "tokens_per_s" in a:
            print(f"  {arm:12s} {a['tokens_per_s']:>9,.0f} tokens/s  peak {a.get('peak_gib') or 0:6.1f} GiB  ({a['steps']} steps)")
        else:
            print(f"  {arm:12s} {a.get('skipped')}")
    ours = r["arms"].get("steadytune") or json.loads(path.with_name(path.name.replace("-lf", ""))
                                                      .read_text())["arms"].get("steadytune", {})
    for other in ("plain", "llamafactory"):
        theirs = r["arms"].get(other, {})
        if ours.get("tokens_per_s") and theirs.get("tokens_per_s"):
            print(f"  steadytune / {other}: {ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}x tokens/s at "
                  f"{(ours.get('peak_gib') or 0) / max(theirs.get('peak_gib') or 1e-9, 1e-9):.2f}x its memory")
    if ours.get("plan"):
        print(f"  plan: {ours['plan']}")
        for key, why in ours.get("off", {}).items():
            print(f"    {key} off: {why}")
        for event in ours.get("graphs", []):
            print(f"    graphs: {event}")
PY
echo "gpu_vlm.sh: $(( $(date +%s) - START )) s"
