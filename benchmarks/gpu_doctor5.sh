#!/usr/bin/env bash
# doctor round 5 (issue 63) on a GPU: the numerical canary for real. Writes to $OUT: canary.json (every check of
# `steadytune doctor --canary`: matmul and SDPA per precision, each shipped Triton kernel compiled for this GPU against
# its torch reference, the all-reduce when 2+ GPUs are visible, 80% of the free memory in one block), startup.txt (the
# cheap part `train` runs before loading a model, timed, in bf16 and fp16), and log.txt. No network, no model, no
# wheels beyond torch / triton / transformers (for the decode kernels' RMSNorm). Runs in about a minute on one
# H100/H200; the all-reduce adds a few seconds per GPU.
# Usage: OUT=/some/dir bash benchmarks/gpu_doctor5.sh
set -u
OUT=${OUT:-/tmp/doctor5}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null || rocm-smi --showproductname 2>/dev/null
python3 -c 'import torch, triton; print("torch", torch.__version__, "hip", torch.version.hip, "cuda", torch.version.cuda, "triton", triton.__version__)'

# 1. every check, as a user runs it (exit 1 on any error finding, the canary's or another check's)
start=$(date +%s.%N)
python3 -m steadytune doctor --canary --json > "$OUT/canary.json"
echo "doctor --canary: exit $? in $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
python3 - "$OUT/canary.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
canary = [f for f in report["findings"] if f["check"] == "canary"]
for f in canary:
    print(f["severity"].upper(), f["what"])
wrong = [f for f in canary if f["severity"] == "error"]
print(f"canary: {len(canary)} checks, {len(wrong)} wrong")
PY

# 2. the cheap part train runs at start, timed in each half precision (the issue asks for "a few seconds")
python3 - <<'PY' | tee "$OUT/startup.txt"
import time
from steadytune.doctor.canary import startup_canary, failed_line
for precision in ("bf16", "fp16"):
    start = time.perf_counter()
    results = startup_canary(precision)
    total = time.perf_counter() - start
    for r in results:
        print(precision, r.line())
    print(f"startup canary {precision}: {total:.2f} s, {'FAILED: ' + failed_line(results) if failed_line(results) else 'all right'}")
PY
