#!/usr/bin/env bash
# Issue 13's measurements in ONE device call on nvidia-h200-x2 (2 x H200), under a time budget (default 510 s; the
# pieces that would not fit are skipped and say so). Needs the deepspeed wheel and its pure-Python dependencies in
# .whl/ (carry it): deepspeed (built with DS_BUILD_OPS=0), hjson, pydantic, pydantic_core (cp312), annotated_types,
# typing_inspection, typing_extensions. Results in $OUT: multi_gpu_results.md / .json, gpus.txt, logs.tgz (every log, metrics.jsonl,
# hang report).
#
#   run(kind="nvidia-h200-x2", carry=[".whl"], timeout_s=600, command="bash benchmarks/multi_gpu_session.sh")
#
# Pieces, in order of priority (1-GPU pairs run side by side, one on each GPU):
#   ddp1 | z31        Qwen2.5-1.5B shape LoRA, 50 steps, 2 x 8,192 tokens a step (1 GPU: 2 accumulation steps)
#   ddp2              the same on 2 GPUs (DDP): tokens/s and per-step loss against ddp1
#   hang              tiny model, rank 1 hangs at step 3, hang_timeout 15: exit code 5, stacks, time to exit
#   z32               ZeRO-3 on 2 GPUs against z31
#   fsdp1 | plain1    FSDP2 on 1 GPU; the plain recipe (HF Trainer + peft, batch 8, padded) on 1 GPU
#   fsdp2, plain2     FSDP2 on 2 GPUs; the plain recipe under torchrun on 2 GPUs (it scaled 1.37x before)
#   z3_7b2, fsdp_7b2  Qwen2.5-7B shape LoRA on 2 GPUs, ZeRO-3 and FSDP2 (rank 0 loads): peak memory, MFU
#   z3full2           full fine-tune of the 1.5B shape with ZeRO-3 on 2 GPUs
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-510}
W=${WORK:-/root/mg}
OUT=${OUT:-$W/out}
mkdir -p "$W/runs" "$OUT"
: > "$W/timings.tsv"

if [ "${MULTI_GPU_SMOKE:-0}" != 1 ]; then   # the smoke run (CPU, tiny shapes) uses this machine's packages
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/deepspeed-*.whl .whl/hjson-*.whl .whl/pydantic-*.whl .whl/pydantic_core-*.whl \
        .whl/annotated_types-*.whl .whl/typing_inspection-*.whl .whl/typing_extensions-*.whl \
        || echo "wheels did not install: DeepSpeed pieces fail"
fi
# NVLink multicast stays off on this machine (KINDS.md); DeepSpeed builds no op unless asked.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg TOKENIZERS_PARALLELISM=false \
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$OUT/gpus.txt"
python3 -c "import torch, deepspeed, accelerate, transformers, peft; print('torch', torch.__version__, 'deepspeed', \
deepspeed.__version__, 'accelerate', accelerate.__version__, 'transformers', transformers.__version__, 'peft', \
peft.__version__)" 2>&1 | tail -1 | tee -a "$OUT/gpus.txt"

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# PIECES="z31 z32 ..." runs only those pieces (a re-run of what failed); empty runs everything.
want() { [ -z "${PIECES:-}" ] || [[ " $PIECES " == *" $1 "* ]]; }

# The 7B shape is written on the CPU meanwhile (15 GB), so the GPUs start at once.
PREP7=
if want z3_7b2 || want fsdp_7b2; then
    CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=8 python3 benchmarks/multi_gpu_bench.py prepare-7b "$W" > "$W/prepare7b.log" 2>&1 &
    PREP7=$!
fi
python3 benchmarks/multi_gpu_bench.py prepare "$W" 2>&1 | tail -3

# train NAME NPROC VISIBLE_GPUS ESTIMATE_S [key=value ...]: one steadytune run, memory sampled by nvidia-smi.
train() {
    local name=$1 nproc=$2 visible=$3 estimate=$4; shift 4
    want "$name" || return 0
    if [ "$(left)" -lt "$estimate" ]; then
        echo "skipped $name: $(left) s left, it needs ~$estimate s" | tee -a "$W/skipped.txt"; return
    fi
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$W/smi_$name.csv" &
    local smi=$! start=$(date +%s) limit=$(( estimate * 2 < $(left) ? estimate * 2 : $(left) ))
    CUDA_VISIBLE_DEVICES=$visible timeout "$limit" python3 -m steadytune train "$W/base.yaml" \
        output_dir="$W/runs/$name" "$@" --nproc "$nproc" > "$W/log_$name.txt" 2>&1
    local code=$?
    kill $smi 2>/dev/null
    echo "$name $code $(( $(date +%s) - start )) $visible" >> "$W/timings.tsv"
    echo "$name: exit $code, $(( $(date +%s) - start )) s; $(grep -a '^done:' "$W/log_$name.txt" | tail -1)"
}

plain() {   # NAME NPROC VISIBLE ESTIMATE
    local name=$1 nproc=$2 visible=$3 estimate=$4
    want "$name" || return 0
    if [ "$(left)" -lt "$estimate" ]; then echo "skipped $name" | tee -a "$W/skipped.txt"; return; fi
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$W/smi_$name.csv" &
    local smi=$! start=$(date +%s)
    if [ "$nproc" = 1 ]; then
        CUDA_VISIBLE_DEVICES=$visible timeout $(( estimate * 2 )) python3 benchmarks/multi_gpu_bench.py plain "$W" "$name" \
            > "$W/log_$name.txt" 2>&1
    else
        CUDA_VISIBLE_DEVICES=$visible timeout $(( estimate * 2 )) python3 -m torch.distributed.run --standalone \
            --nproc_per_node "$nproc" benchmarks/multi_gpu_bench.py plain "$W" "$name" > "$W/log_$name.txt" 2>&1
    fi
    local code=$?
    kill $smi 2>/dev/null
    echo "$name $code $(( $(date +%s) - start )) $visible" >> "$W/timings.tsv"
    echo "$name: exit $code; $(grep -a 'tokens/s' "$W/log_$name.txt" | tail -1)"
}

ONE="gradient_accumulation_steps=2"
Z3="deepspeed=$W/ds_z3.json"
FSDP=("fsdp=full_shard auto_wrap" "fsdp_config={fsdp_version: 2, reshard_after_forward: true}")

# --- 1.5B LoRA: DDP and ZeRO-3, 1 GPU (side by side) then 2 GPUs ----------------------------------------
train ddp1 1 0 70 $ONE & A=$!
train z31 1 1 80 $ONE $Z3 & B=$!
wait $A $B
train ddp2 2 0,1 55

# --- the hang watchdog: rank 1 stops at step 3; every rank must dump its stacks and exit with 5 -------------
if want hang && [ "$(left)" -gt 60 ]; then
    start=$(date +%s)
    timeout 120 python3 -m steadytune train "$W/hang.yaml" output_dir="$W/runs/hang" --nproc 2 > "$W/log_hang.txt" 2>&1
    code=$?
    end=$(date +%s)
    echo "hang $code $(( end - start )) 0,1" >> "$W/timings.tsv"
    python3 - "$W" "$code" "$start" "$end" <<'PY'
import json, re, sys
from pathlib import Path
work, code, start, end = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
out = work / "runs" / "hang"
log = (work / "log_hang.txt").read_text(errors="replace")
message = next((l.strip() for l in log.splitlines() if "the run hung" in l), "")
stalled = re.search(r"no heartbeat for ([\d.]+) s \(allowed ([\d.]+) s", message)
reports = sorted(out.glob("hang-rank-*.txt"))
first = min((p.stat().st_mtime for p in reports), default=end)
fr = [p.read_text(errors="replace").split("== NCCL/RCCL flight recorder ==")[1].split("==")[0].strip()[:300]
      for p in reports if "flight recorder" in p.read_text(errors="replace")]
json.dump({"exit_code": code, "expected_exit_code": 5, "total_seconds": round(end - start, 1),
           "no_heartbeat_s": float(stalled.group(1)) if stalled else None,
           "hang_timeout_s": float(stalled.group(2)) if stalled else None,
           "seconds_from_first_report_to_exit": round(end - first, 1), "reports": [p.name for p in reports],
           "message": message[:600], "flight_recorder_rank0": fr[0] if fr else None,
           "rescued_checkpoint": (out / "checkpoint-2" / "adapter_model.safetensors").is_file()},
          open(work / "hang.json", "w"), indent=1)
print("hang:", open(work / "hang.json").read())
PY
else
    echo "skipped hang" | tee -a "$W/skipped.txt"
fi

train z32 2 0,1 65 $Z3

# --- FSDP2 on 1 GPU beside the plain recipe on 1 GPU; then both on 2 GPUs ------------------------------
train fsdp1 1 0 70 $ONE "${FSDP[@]}" & A=$!
plain plain1 1 1 60 & B=$!
wait $A $B
train fsdp2 2 0,1 55 "${FSDP[@]}"
plain plain2 2 0,1 55

# --- the 7B shape, LoRA on 2 GPUs: ZeRO-3, then FSDP2 with rank 0 loading -----------------------------
[ -n "$PREP7" ] && { wait $PREP7 2>/dev/null; tail -1 "$W/prepare7b.log"; }
SEVEN=("model_name_or_path=$W/qwen7b" "max_steps=10" "gradient_checkpointing=null")
train z3_7b2 2 0,1 100 "${SEVEN[@]}" $Z3
train fsdp_7b2 2 0,1 100 "${SEVEN[@]}" "fsdp=full_shard auto_wrap" \
    "fsdp_config={fsdp_version: 2, reshard_after_forward: true, cpu_ram_efficient_loading: true}"

# --- full fine-tune of the 1.5B shape under ZeRO-3 -----------------------------------------------------
train z3full2 2 0,1 90 finetuning_type=full learning_rate=1.0e-5 max_steps=10 $Z3

# --- summary ---------------------------------------------------------------------------------------------
python3 benchmarks/multi_gpu_bench.py summary "$W" "$OUT" 2>&1 | tail -40
cat "$W/skipped.txt" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$W" $(cd "$W" && ls log_*.txt timings.tsv hang.json skipped.txt prepare7b.log 2>/dev/null) \
    $(cd "$W" && ls runs/*/metrics.jsonl runs/*/train_results.json runs/*/plain.json runs/hang/hang-rank-*.txt 2>/dev/null)
echo "total $(( $(date +%s) - T0 )) s"
