# Two entry points do everything on a fresh machine:
#   make demo   set up, then fine-tune Gemma 3 270M on Chinese review sentiment (the embedded default)
#   make test   set up, then run the CPU test suite (what CI runs): on every core this machine gives the process
#               (pytest-xdist, at most 8 workers: tests/conftest.py), the slowest 20 tests printed at the end
# Everything runs through the Python given (`make test PYTHON=/path/to/venv/bin/python`): pip, pytest and steadytune
# itself are called as `$(PYTHON) -m ...`, never looked up on PATH.
PYTHON ?= python3
# A CPU build of torch for machines without one. A torch that is already installed (ROCm, CUDA or CPU
# build) is never replaced: install the right wheel for your platform first (see README). setup pins the installed
# torch with a pip constraint, so a requirement that excludes it stops the install with pip's reason instead of
# swapping in a PyPI (CUDA/CPU) build, as happens to ROCm torches in the wild (pypa/pip #12902, ROCm/bitsandbytes #37,
# unslothai/unsloth #7275); tests/test_doctor_install.py runs this target against a fake ROCm torch.
TORCH_SPEC ?= torch==2.13.0
# How setup calls pip, and extra arguments for its main install (the tests use --dry-run --report).
PIP ?= $(PYTHON) -m pip
PIP_ARGS ?=
# Overrides of the demo's recipe, e.g. a quick smoke: make demo DEMO_ARGS="max_samples=40 max_eval_samples=20"
DEMO_ARGS ?=
# Extra pytest arguments, e.g. make test PYTEST_ARGS="-k zero3"; CI's in-place pass runs PYTEST_ARGS="-m 'shared and not gpu'"
# (only the tests that read ../shared/fixtures, which a fresh clone skips).
PYTEST_ARGS ?=
# pytest-xdist workers: auto = one per usable core (at most 8), a number, or 0 to run in this one process. Tests that
# start two training processes of their own are one group, run one after another by one worker (--dist loadgroup).
TEST_WORKERS ?= auto
# deepspeed (in the dev extra) builds from source: without its CUDA/ROCm ops, which it compiles on first use instead.
export DS_BUILD_OPS ?= 0

.PHONY: setup demo test

setup:
	@$(PIP) show torch >/dev/null 2>&1 || $(PIP) install -q "$(TORCH_SPEC)"
	@keep=$$(mktemp); \
	$(PYTHON) -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" > $$keep || { rm -f $$keep; exit 1; }; \
	echo "make setup: keeping the installed $$(cat $$keep) (a pip constraint: nothing may replace it)"; \
	$(PIP) install -q -c $$keep -e ".[demo,dev]" $(PIP_ARGS); status=$$?; \
	[ $$status -eq 0 ] || echo "make setup: a requirement excludes the installed $$(cat $$keep), and pip stopped rather than replace it. Install a torch that steadytune's requirement (torch>=2.4) allows, for your platform (README), then run make setup again."; \
	rm -f $$keep; exit $$status

demo: setup
	$(PYTHON) -m steadytune demo $(DEMO_ARGS)

test: setup
	$(PYTHON) -m pytest -q -x -rs --timeout=900 --durations=20 -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)
