#!/usr/bin/env bash
# Issue 28's GPU measurement, in ONE device call on nvidia-h200-x2 (2 x H200): two single-GPU "nodes" on NCCL over
# TCP (the loopback) against one node with both GPUs, with the same global batch. Not run yet (the 2-GPU machine was
# not lent when it was written); the CPU smoke run (MULTI_GPU_SMOKE=1, gloo, tiny shapes) checks the script itself.
#
#   run(kind="nvidia-h200-x2", timeout_s=600, command="bash benchmarks/multi_node_session.sh")
#   MULTI_GPU_SMOKE=1 bash benchmarks/multi_node_session.sh                  # here, on the CPU
#   GPU1=0 PIECES="two hang restart" TWO_CONFIG=/root/mn/tiny2.yaml bash ...  # NCCL path only, on one GPU
#
# Each "node" is a `steadytune train --nnodes 2 --node-rank R --master-addr 127.0.0.1` launcher with one GPU
# (CUDA_VISIBLE_DEVICES). NCCL_HOSTID gives each a host of its own, so NCCL treats them as two machines and takes
# its network transport between them (NET/Socket: NCCL_IB_DISABLE=1, NCCL_SOCKET_IFNAME=lo) instead of NVLink/P2P;
# NCCL_DEBUG=INFO lines name the transport it chose. Pieces, in order (each skipped, saying so, when the time
# budget would not hold it):
#   one      Qwen2.5-1.5B shape LoRA, 50 steps of 2 x 8,192 tokens, DDP on one node with both GPUs (--nproc 2)
#   two      the same on two single-GPU nodes over TCP: per-step losses against `one`, tokens/s ratio, transport,
#            the start-up all-reduce bandwidth
#   hang     tiny model, two nodes, rank 1 stalls at step 3 (hang_timeout 15): every node exits 5 naming node 1
#   restart  tiny model, two elastic nodes, rank 1's process killed at step 3: the job restarts through the c10d
#            rendezvous and finishes from checkpoint-2 with the uninterrupted curve (NCCL's side of what the CPU
#            tests prove on gloo: on NCCL a dead peer hangs the survivor instead of raising)
# Results in $OUT: multi_node_results.md / .json, logs.tgz (every log, metrics.jsonl, hang reports, node logs).
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-540}
W=${WORK:-/root/mn}
OUT=${OUT:-$W/out}
mkdir -p "$W/runs" "$OUT"
: > "$W/timings.tsv"
: > "$W/skipped.txt"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg TOKENIZERS_PARALLELISM=false
if [ "${MULTI_GPU_SMOKE:-0}" = 1 ]; then
    export OMP_NUM_THREADS=1
    GPU0= GPU1= BOTH=
else
    # NVLink multicast stays off on this machine (KINDS.md).
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    # GPU1=0 puts both "nodes" on one GPU (NCCL accepts it: NCCL_HOSTID makes them two hosts), for a functional
    # check of the NCCL path on a one-GPU machine; the speed ratio then means nothing.
    GPU0=${GPU0:-0} GPU1=${GPU1:-1} BOTH=${BOTH:-0,1}
    nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$OUT/gpus.txt"
fi
python3 -c "import torch, accelerate, transformers, peft; print('torch', torch.__version__, 'accelerate', \
accelerate.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'nccl', \
torch.cuda.nccl.version() if torch.cuda.is_available() else None)" 2>&1 | tail -1 | tee -a "$OUT/gpus.txt"

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
want() { [ -z "${PIECES:-}" ] || [[ " $PIECES " == *" $1 "* ]]; }
fits() {   # NAME ESTIMATE_S
    want "$1" || return 1
    if [ "$(left)" -lt "$2" ]; then echo "skipped $1: $(left) s left, it needs ~$2 s" | tee -a "$W/skipped.txt"; return 1; fi
}
port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

python3 benchmarks/multi_gpu_bench.py prepare "$W" 2>&1 | tail -2
python3 - "$W" <<'PY'
import sys, yaml
from pathlib import Path
work = Path(sys.argv[1])
base = yaml.safe_load((work / "base.yaml").read_text())
tiny = {**base, "model_name_or_path": str(work / "tiny"), "max_tokens_per_batch": 1024, "cutoff_len": 256,
        "max_steps": 6, "save_steps": 2}
(work / "hang2.yaml").write_text(yaml.safe_dump({**tiny, "hang_timeout": 15,
                                                 "fault_injection": {"hang_step": 3, "hang_rank": 1}}))
(work / "restart2.yaml").write_text(yaml.safe_dump({**tiny, "fault_injection": {"kill_step": 3, "kill_rank": 1}}))
(work / "tiny2.yaml").write_text(yaml.safe_dump(tiny))
PY

# The network path between the two "nodes": TCP sockets over the loopback, as NCCL would take between machines
# without InfiniBand.
NET=(NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1
     NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)

# two_nodes NAME CONFIG ESTIMATE [flags and key=value ...]: the two launchers side by side, one GPU each (@RANK@ in
# an argument becomes the node's number).
two_nodes() {
    local name=$1 config=$2 estimate=$3; shift 3
    local p start limit
    p=$(port); start=$(date +%s); limit=$(( estimate * 2 < $(left) ? estimate * 2 : $(left) ))
    for rank in 0 1; do
        local gpu=$GPU0 args=()
        [ "$rank" = 1 ] && gpu=$GPU1
        for a in "$@"; do args+=("${a//@RANK@/$rank}"); done
        env "${NET[@]}" NCCL_HOSTID="node$rank" CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" \
            python3 -m steadytune train "$config" output_dir="$W/runs/$name" "${args[@]}" --master-addr 127.0.0.1 \
            --master-port "$p" --nproc 1 > "$W/log_${name}_node$rank.txt" 2>&1 &
        eval "pid$rank=\$!"
    done
    wait "$pid0"; local code0=$?
    wait "$pid1"; local code1=$?
    echo "$name $code0,$code1 $(( $(date +%s) - start ))" >> "$W/timings.tsv"
    echo "$name: exit $code0 / $code1, $(( $(date +%s) - start )) s; $(grep -a 'done:' "$W/log_${name}_node0.txt" | tail -1)"
}

if fits one 90; then
    start=$(date +%s)
    CUDA_VISIBLE_DEVICES=$BOTH timeout 180 python3 -m steadytune train "$W/base.yaml" output_dir="$W/runs/one" \
        --nproc "${NPROC_CPU:-2}" > "$W/log_one.txt" 2>&1
    echo "one $? $(( $(date +%s) - start ))" >> "$W/timings.tsv"
    echo "one: $(grep -a 'done:' "$W/log_one.txt" | tail -1)"
fi
if fits two 100; then
    two_nodes two "${TWO_CONFIG:-$W/base.yaml}" 100 --nnodes 2 --node-rank @RANK@
fi
if fits hang 70; then
    two_nodes hang "$W/hang2.yaml" 70 --nnodes 2 --node-rank @RANK@
fi
if fits restart 90; then
    two_nodes restart "$W/restart2.yaml" 90 --nnodes 2 --rdzv-id bench-restart --max-restarts 1
fi

python3 - "$W" "$OUT" <<'PY'
import json, re, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from multi_gpu_bench import parity, read_run
work, out = Path(sys.argv[1]), Path(sys.argv[2])
runs = {name: read_run(work / "runs" / name) for name in ("one", "two", "hang", "restart")}
logs = {p.stem.removeprefix("log_"): p.read_text(errors="replace") for p in work.glob("log_*.txt")}
def grep(pattern, text, limit=6):
    return sorted({m.group(0).strip() for m in re.finditer(pattern, text)})[:limit]
two_log = logs.get("two_node0", "") + logs.get("two_node1", "")
result = {
    "timings": (work / "timings.tsv").read_text(), "skipped": (work / "skipped.txt").read_text(),
    "one_node_tokens_per_s": runs["one"] and runs["one"]["tokens_per_s"],
    "two_nodes_tokens_per_s": runs["two"] and runs["two"]["tokens_per_s"],
    "loss_parity_two_vs_one": parity(runs["one"]["losses"], runs["two"]["losses"]) if runs["one"] and runs["two"] else None,
    "transport_lines": grep(r"[^\n]*(via NET/\S+|NET/Socket : Using[^\n]*|Using network \S+)", two_log),
    "startup_all_reduce": grep(r"all_reduce +[^\n]*", two_log, 1),
    "hang_messages": grep(r"error: the run hung[^\n]*", logs.get("hang_node0", "") + logs.get("hang_node1", ""), 2),
    "restart_lines": grep(r"(steadytune: a training process[^\n]*|another process of the job died[^\n]{0,200}|"
                          r"elastic_restart[^\n]*|resuming from[^\n]*)",
                          logs.get("restart_node0", "") + logs.get("restart_node1", ""), 8),
    "restart_losses": runs["restart"] and runs["restart"]["losses"],
}
one, two = result["one_node_tokens_per_s"], result["two_nodes_tokens_per_s"]
result["ratio_two_nodes_over_one"] = two / one if one and two else None
(out / "multi_node_results.json").write_text(json.dumps(result, indent=1))
lines = ["# Two single-GPU nodes over TCP (loopback) against one 2-GPU node", "",
         f"- tokens/s: one node {one}, two nodes {two}, ratio {result['ratio_two_nodes_over_one']}",
         f"- per-step loss, two nodes vs one: {result['loss_parity_two_vs_one']}",
         f"- transport: {result['transport_lines']}", f"- start-up all-reduce: {result['startup_all_reduce']}",
         f"- hang: {result['hang_messages']}", f"- restart: {result['restart_lines']}",
         f"- restart losses: {result['restart_losses']}", "", "```", result["timings"], result["skipped"], "```"]
(out / "multi_node_results.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
tar czf "$OUT/logs.tgz" -C "$W" $(cd "$W" && ls log_*.txt timings.tsv skipped.txt 2>/dev/null) \
    $(cd "$W" && ls runs/*/metrics.jsonl runs/*/train_results.json runs/*/hang-rank-*.txt 2>/dev/null) \
    $(cd "$W" && find runs -path '*/nodes/*' -name '*.log' 2>/dev/null)
echo "total $(( $(date +%s) - T0 )) s"
