# Two entry points do everything on a fresh machine:
#   make demo   set up, then fine-tune Gemma 3 270M on Chinese review sentiment (the embedded default)
#   make test   set up, then run the CPU test suite (what CI runs)
# Everything runs through the Python given (`make test PYTHON=/path/to/venv/bin/python`): pip, pytest and steadytune
# itself are called as `$(PYTHON) -m ...`, never looked up on PATH.
PYTHON ?= python3
# A CPU build of torch for machines without one. A torch that is already installed (ROCm, CUDA or CPU
# build) is never replaced: install the right wheel for your platform first (see README).
TORCH_SPEC ?= torch==2.13.0
# Overrides of the demo's recipe, e.g. a quick smoke: make demo DEMO_ARGS="max_samples=40 max_eval_samples=20"
DEMO_ARGS ?=
# Extra pytest arguments, e.g. make test PYTEST_ARGS="-k zero3"
PYTEST_ARGS ?=
# deepspeed (in the dev extra) builds from source: without its CUDA/ROCm ops, which it compiles on first use instead.
export DS_BUILD_OPS ?= 0

.PHONY: setup demo test

setup:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q "$(TORCH_SPEC)"
	$(PYTHON) -m pip install -q -e ".[demo,dev]"

demo: setup
	$(PYTHON) -m steadytune demo $(DEMO_ARGS)

test: setup
	$(PYTHON) -m pytest -q -x -rs --timeout=900 --durations=25 $(PYTEST_ARGS)
