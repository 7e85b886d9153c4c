#!/usr/bin/env bash
# Downloads into .whl/ the wheels that benchmarks/gpu_speed_session.sh carries to the GPU machine, from PyPI, for the
# machine's Python 3.12 (x86_64). .whl/ is ignored by git (add `.whl/` to .git/info/exclude); it is rebuilt here on
# a fresh checkout in about a minute:
#   bash benchmarks/peer_wheels.sh            # all of it
#   bash benchmarks/peer_wheels.sh lf         # one folder: lf, unsloth, unsloth_deps, bnb130, tools, fla
# The GPU machine has torch 2.11 (CUDA 13), transformers 5.17, peft 0.21, accelerate 1.15, triton 3.6, numpy,
# pandas, pyarrow, matplotlib, httpx and what they need (../shared/DEVICE.md), so each peer's folder holds only what
# it pins to other versions and what it imports that the machine lacks. Versions are exact: the measurements in
# docs/measured name them, and a rerun must use the same ones.
#   lf            LLaMA-Factory 0.9.5 and the versions it pins (its train path: llamafactory.train.tuner.run_exp;
#                 gradio, modelscope, av, scipy and the API server are imported only by its web UI, API or
#                 multimodal paths, so they stay behind); 30 MB
#   unsloth       unsloth and unsloth_zoo 2026.10.9; 31 MB
#   unsloth_deps  what they import that the machine lacks (trl 1.15.0 wants datasets >= 4.7, Unsloth excludes
#                 4.4.*: datasets 4.8.5); no xformers: its newest wheel, 0.0.35, is built for torch 2.10, which
#                 Unsloth declines on the machine's 2.11; 33 MB
#   bnb130        bitsandbytes 0.50.2 with only its CUDA 13 and CPU libraries (7 MB instead of 42; the machine is
#                 CUDA 13), for --quantization-bit 4 in every arm
#   tools         liger-kernel 0.8.5 (the liger arm and LF's enable_liger_kernel) and gguf 0.19.0 (the demo)
#   fla           flash-linear-attention and fla-core 0.6.0 (pure Python + Triton, the linear-attention extra) and
#                 einops 0.8.2, which fla-core imports: benchmarks/gpu_models2026.sh; under 2 MB
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# pip with --platform accepts exactly the tags it is given, so every manylinux tag these wheels carry is listed.
TAGS=(--only-binary=:all: --python-version 3.12 --implementation cp)
for P in manylinux_2_35 manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 \
         manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1 linux; do
  TAGS+=(--platform "${P}_x86_64")
done
fetch() {  # folder, then exact requirements
  local dir=.whl/$1; shift
  mkdir -p "$dir"
  "$PYTHON" -m pip download -q --no-deps "${TAGS[@]}" -d "$dir" "$@" 2>&1 | grep -v "^WARNING: Location" || true
  echo "$dir: $(ls "$dir" | wc -l) wheels, $(du -sh "$dir" | cut -f1)"
}
lf() {
  fetch lf llamafactory==0.9.5 transformers==5.6.0 peft==0.18.1 accelerate==1.11.0 datasets==4.0.0 trl==0.24.0 \
    tokenizers==0.22.2 huggingface_hub==1.33.0 torchaudio==2.11.0 omegaconf==2.4.0 dill==0.3.8 multiprocess==0.70.16 \
    xxhash==4.1.0 fsspec==2025.3.0 aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 \
    frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 einops==0.8.2 fire==0.7.1 termcolor==3.3.0 \
    sentencepiece==0.2.3 tiktoken==0.14.0 protobuf==7.36.2 pydantic==2.12.3 pydantic_core==2.41.4 \
    annotated-types==0.8.0 typing-inspection==0.4.5 tyro==0.8.14 docstring_parser==0.18.0 shtab==1.13.0 \
    rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0
}
unsloth() { fetch unsloth unsloth==2026.10.9 unsloth_zoo==2026.10.9; }
unsloth_deps() {
  fetch unsloth_deps trl==1.15.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 aiohttp==3.14.5 \
    aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 \
    yarl==1.25.1 cut-cross-entropy==25.1.1 diffusers==0.42.1 importlib_metadata==10.2.0 zipp==4.1.2 torchao==0.18.0 \
    torchvision==0.26.0 tyro==1.0.17 docstring_parser==0.18.0 typeguard==4.6.1 rich==15.0.0 markdown-it-py==4.3.0 \
    mdurl==0.1.2 pygments==2.21.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 sentencepiece==0.2.3 protobuf==7.36.2 hf_transfer==0.1.9 json5==0.17.3 \
    nest-asyncio==1.6.0 structlog==26.1.0 msgspec==0.23.0 lazy-importer==0.1.0 wheel==0.48.0 einops==0.8.2 \
    typer==0.29.2 shellingham==1.5.4 click==8.5.1 annotated-doc==0.0.7 certifi==2026.10.19.post1 fsspec==2026.2.0
}
bnb130() {
  local full work
  full=$(mktemp -d); work=$(mktemp -d)
  fetch bnb_full bitsandbytes==0.50.2 >/dev/null
  mv .whl/bnb_full/*.whl "$full/" && rmdir .whl/bnb_full
  (cd "$work" && unzip -q "$full"/bitsandbytes-*.whl)
  # Keep the CUDA 13 and CPU libraries; drop the others and their lines in RECORD, so pip installs a consistent wheel.
  find "$work/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name '*_cpu.so' ! -name '*_cuda13*.so' -delete
  local record; record=$(ls "$work"/*.dist-info/RECORD)
  grep -v 'libbitsandbytes_' "$record" > "$record.kept" || true
  grep 'libbitsandbytes_\(cpu\|cuda13\)' "$record" >> "$record.kept" || true
  mv "$record.kept" "$record"
  mkdir -p .whl/bnb130
  (cd "$work" && zip -qr "$OLDPWD/.whl/bnb130/$(basename "$full"/bitsandbytes-*.whl)" .)
  rm -rf "$full" "$work"
  echo ".whl/bnb130: $(du -sh .whl/bnb130 | cut -f1)"
}
tools() {
  "$PYTHON" -m pip download -q --no-deps "${TAGS[@]}" -d .whl liger-kernel==0.8.5 gguf==0.19.0 2>&1 \
    | grep -v "^WARNING: Location" || true
  ls .whl/*.whl
}
fla() {
  "$PYTHON" -m pip download -q --no-deps -d .whl/fla flash-linear-attention==0.6.0 fla-core==0.6.0 einops==0.8.2 2>&1 \
    | grep -v "^WARNING: Location" || true
  echo ".whl/fla: $(ls .whl/fla | wc -l) wheels, $(du -sh .whl/fla | cut -f1)"
}
for PART in "${@:-lf unsloth unsloth_deps bnb130 tools fla}"; do
  for ONE in $PART; do
    case $ONE in
      lf|unsloth|unsloth_deps|bnb130|tools|fla) $ONE;;
      *) echo "unknown part $ONE (lf, unsloth, unsloth_deps, bnb130, tools, fla)" >&2; exit 2;;
    esac
  done
done
