# Two entry points do everything on a fresh machine:
#   make demo   set up, then fine-tune Gemma 3 270M on Chinese review sentiment (the embedded default)
#   make test   set up, then run the CPU test suite (what CI runs)
PYTHON ?= python3
# A CPU build of torch for machines without one. A torch that is already installed (ROCm, CUDA or CPU
# build) is never replaced: install the right wheel for your platform first (see README).
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test

setup:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q "$(TORCH_SPEC)"
	$(PYTHON) -m pip install -q -e ".[demo,dev]"

demo: setup
	steadytune demo

test: setup
	$(PYTHON) -m pytest -q -x -rs --timeout=900
