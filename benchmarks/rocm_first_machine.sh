#!/usr/bin/env bash
# The first AMD GPU steadytune meets (issue 64): everything that could not run without one, in one script, with its
# results written where docs/speed.md's ROCm section reads them: docs/measured/rocm/<arch>/ (commit that folder).
#
#   bash benchmarks/rocm_first_machine.sh            # every stage, ~40-60 minutes on an MI300X
#   bash benchmarks/rocm_first_machine.sh kernels bench   # some stages
#
# Needs: a ROCm torch (pip install torch --index-url https://download.pytorch.org/whl/rocm7.2, or the wheel for the
# GPU that `steadytune doctor` names), then `pip install -e '.[demo,dev]'` from this checkout (pytorch-triton-rocm
# comes with the ROCm torch: do not let pip replace it with the `triton` of the dev extra, which is CUDA's; install
# the dev extra with --no-deps for triton if it tries). Optional peers: LF_PYTHON / UNSLOTH_PYTHON pointing at a
# Python with LLaMA-Factory / Unsloth installed (each in its own environment, as docs/speed.md's peers run).
#
# Stages (each writes into $RESULTS and logs into $RESULTS/log; a failing stage does not stop the others):
#   env      the machine: rocminfo, amd-smi, torch / HIP / Triton versions                       -> env.txt
#   doctor   steadytune doctor --json, with --attention-bench (SDPA's kernels timed, the AOTriton switch)
#                                                                                                 -> doctor.json
#   kernels  every Triton kernel configuration compiled and loaded on this GPU, the driver's registers and spills
#            against kernel_builds.json (built on a CPU), and the kernels' values against torch  -> kernels_on_device.json
#   tests    the test suite's GPU tests (pytest -m gpu), the decode kernels' GPU check, the MoE grouped kernels
#                                                                                                 -> gpu_tests.log
#   canary   the demo (Gemma 3 270M on 320 Chinese reviews): it must beat the majority class (its exit code says)
#                                                                                                 -> canary.log
#   bench    steadytune bench: the plain transformers + peft recipe, the peer (Trainer + liger-kernel where
#            installed, LLaMA-Factory / Unsloth with LF_PYTHON / UNSLOTH_PYTHON) and steadytune's default, on the
#            Qwen2.5-0.5B and 1.5B shapes, each until steady                                   -> bench_<shape>.json
#   levers   steadytune with torch_compile on, and (gfx942 / gfx950 / gfx12) fp8_base on, 1.5B -> lever_<name>.json
#   summary  benchmarks/speed_summary.py over the bench files, and the kernels' disagreements    -> summary.md
set -o pipefail
cd "$(dirname "$0")/.."
ARCH=$(python3 -c "import torch; p=torch.cuda.get_device_properties(0); print(getattr(p,'gcnArchName','').split(':')[0] or f'sm_{p.major}{p.minor}')" 2>/dev/null)
if [ -z "$ARCH" ]; then
  echo "no GPU torch can see: run 'python -m steadytune doctor' first (it says why and what to install)"; exit 2
fi
RESULTS=${RESULTS:-docs/measured/rocm/$ARCH}
mkdir -p "$RESULTS"
exec > >(tee -a "$RESULTS/log") 2>&1
T0=$(date +%s)
stamp() { echo "=== $* ($(( $(date +%s) - T0 )) s)"; }
STAGES=${*:-env doctor kernels tests canary bench levers summary}
B="python3 -m steadytune bench --min-steps 100 --min-tokens 300000 --window 10 --tolerance 0.03 --max-seconds 60 --arm-timeout 600"
PEERS=""
[ -n "${LF_PYTHON:-}" ] && PEERS="$PEERS --lf-python $LF_PYTHON"
[ -n "${UNSLOTH_PYTHON:-}" ] && PEERS="$PEERS --unsloth-python $UNSLOTH_PYTHON"
ARMS=plain,peer,steadytune
[ -n "${LF_PYTHON:-}" ] && ARMS="$ARMS,llamafactory"
[ -n "${UNSLOTH_PYTHON:-}" ] && ARMS="$ARMS,unsloth"

for STAGE in $STAGES; do
  case $STAGE in
  env)
    stamp "env ($ARCH)"
    { date -u; (rocminfo 2>/dev/null | grep -E "Marketing Name|Name: +gfx|Compute Unit" | head -12);
      (amd-smi static --asic 2>/dev/null | head -40);
      python3 -c "import torch, transformers, peft, triton; print('torch', torch.__version__, 'hip', torch.version.hip, 'triton', triton.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'gpu', torch.cuda.get_device_name(0), 'count', torch.cuda.device_count())";
      python3 -m pip list 2>/dev/null | grep -iE "torch|triton|bitsandbytes|flash|liger|llamafactory|unsloth"; } > "$RESULTS/env.txt"
    cat "$RESULTS/env.txt" ;;
  doctor)
    stamp "doctor"
    timeout 600 python3 -m steadytune doctor --json --attention-bench > "$RESULTS/doctor.json"
    python3 -m steadytune doctor --attention-bench | tail -40 ;;
  kernels)
    stamp "kernels on the device"
    timeout 900 python3 benchmarks/kernels_on_device.py --output "$RESULTS/kernels_on_device.json" ;;
  tests)
    stamp "GPU tests"
    { timeout 1200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/;
      timeout 600 python3 benchmarks/profile_decode.py --shape qwen2.5-0.5b --rows 1,8,32 --compare;
      timeout 600 python3 benchmarks/moe_grouped_check.py --output "$RESULTS/moe_grouped_check.json"; } \
      > "$RESULTS/gpu_tests.log" 2>&1
    tail -30 "$RESULTS/gpu_tests.log" ;;
  canary)
    stamp "canary: the demo on 320 reviews"
    timeout 1800 python3 -m steadytune demo max_samples=320 max_eval_samples=80 output_dir=/tmp/rocm-canary \
      > "$RESULTS/canary.log" 2>&1
    echo "demo exit code $? (0: beat the majority class)" | tee -a "$RESULTS/canary.log"
    cp /tmp/rocm-canary/demo_results.json "$RESULTS/demo_canary.json" 2>/dev/null; tail -15 "$RESULTS/canary.log" ;;
  bench)
    for SHAPE in qwen2.5-0.5b qwen2.5-1.5b; do
      stamp "bench $SHAPE: $ARMS"
      timeout 2400 $B --shape $SHAPE --arms $ARMS $PEERS --output "$RESULTS/bench_$SHAPE.json" | grep -v Warning
    done ;;
  levers)
    stamp "levers on 1.5B: torch_compile, fp8_base"
    timeout 900 $B --shape qwen2.5-1.5b --arms steadytune --compile on --output "$RESULTS/lever_compile.json"
    case $ARCH in gfx942|gfx950|gfx1200|gfx1201)
      timeout 900 $B --shape qwen2.5-1.5b --arms steadytune --compile on --fp8-base on \
        --output "$RESULTS/lever_compile_fp8.json" ;;
    esac ;;
  summary)
    stamp "summary"
    { echo "# steadytune on $ARCH ($(python3 -c 'import torch; print(torch.cuda.get_device_name(0))'))"; echo;
      echo "Written by benchmarks/rocm_first_machine.sh on $(date -u +%Y-%m-%d); env.txt has the versions."; echo;
      echo '```'; python3 benchmarks/speed_summary.py "$RESULTS"/bench_*.json "$RESULTS"/lever_*.json "$RESULTS"/demo_canary.json 2>&1;
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('kernels on the device:', len(d['configurations']), 'configurations;', 'disagreements with kernel_builds.json:', d['disagreements'] or 'none'); print('numerics:', d['numerics'])" "$RESULTS/kernels_on_device.json" 2>&1;
      grep -E "passed|failed|error" "$RESULTS/gpu_tests.log" | tail -3; grep "demo exit code" "$RESULTS/canary.log";
      echo '```'; } > "$RESULTS/summary.md"
    cat "$RESULTS/summary.md" ;;
  *) echo "unknown stage $STAGE (env doctor kernels tests canary bench levers summary)"; exit 2 ;;
  esac
done
stamp "done: results in $RESULTS (commit the folder; docs/speed.md's ROCm section links it)"
