"""Shared test set-up.

- Tiny models are faster on one thread (no thread-pool overhead per small kernel).
- `needs_shared` (the `shared` marker): tests that read the real captures and LLaMA-Factory files in
  `../shared/fixtures/` (beside the checkout in development and CI, absent in a user's fresh clone) skip with one reason
  when it is not there. `pytest -m shared` runs just them: CI's in-place pass, after the fresh clone skipped them.
- Two workers (pytest-xdist, `make test`): tests that start two training processes of their own share the
  `two_processes` group, so one worker runs them one after another (two at once on a 2-core machine would be four
  processes on two cores). Everything else is independent: its own tmp_path, ports from the OS, no shared globals.
- `sample_data_dir`: the project's own small datasets (tests/sample_data.py), which the core tests use instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sample_data import write_sample_data_dir

torch.set_num_threads(1)

SHARED = Path(__file__).resolve().parents[2] / "shared"
LF_FIXTURES = SHARED / "fixtures" / "llamafactory"
SMI_FIXTURES = SHARED / "fixtures" / "rocm"
SHARED_REASON = "needs ../shared/fixtures (real LLaMA-Factory files and smi captures), absent in a fresh clone"

HAVE_SHARED = (SHARED / "fixtures").is_dir()
# A marker, not a skipif, so that `-m shared` selects these tests; pytest_collection_modifyitems skips them without it.
needs_shared = pytest.mark.shared
# Tests that start two training processes (DDP, FSDP2, ZeRO-3, two "nodes", two tune workers): one xdist worker runs
# them one after another (`--dist loadgroup`), so the two workers never run two of them at once.
two_processes = pytest.mark.xdist_group("two_processes")


MAX_WORKERS = 8   # each worker holds its own torch and tiny models; more than 8 buys little and costs memory


@pytest.hookimpl(optionalhook=True)   # pytest-xdist's hook: without xdist, nothing calls it
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (make test): one worker per core this process may use, its CPU affinity and any cgroup CPU quota (a
    container's share, not the host's core count, which xdist's own count would give), at most MAX_WORKERS.
    PYTEST_XDIST_AUTO_NUM_WORKERS=N still decides where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, min(cores, MAX_WORKERS))


def pytest_collection_modifyitems(config, items):
    if HAVE_SHARED:
        return
    skip = pytest.mark.skip(reason=SHARED_REASON)
    for item in items:
        if item.get_closest_marker("shared") is not None:
            item.add_marker(skip)


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (the folder is not a package), for tests of the measurement scripts."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def sample_data_dir(tmp_path_factory) -> Path:
    return write_sample_data_dir(tmp_path_factory.mktemp("sample_data"))


@pytest.fixture
def compiled_graphs(monkeypatch) -> list:
    """torch.compile made to count instead of compile: each graph Dynamo hands to the backend is listed (the shapes of
    its tensor inputs) and runs as traced. Dynamo's caches are cleared before and after, so counts are the test's."""
    from steadytune.model import kernels

    compiled: list = []

    def counting_backend(gm, example_inputs):
        compiled.append(tuple(tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)))
        return gm.forward

    monkeypatch.setattr(kernels, "COMPILE_BACKEND", counting_backend)
    torch._dynamo.reset()
    yield compiled
    torch._dynamo.reset()


@pytest.fixture
def live_process():
    """A process that runs while the test does, standing for a training that holds a run folder's lock."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def training_lookalike():
    """A process whose command line reads `python -m steadytune train x.yaml` (it only sleeps): what the studio's Stop
    may signal, after its checks, when a lock or another studio's record names it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "steadytune", "train",
                             "x.yaml"])
    yield proc
    proc.kill()
    proc.wait()


# --- a real browser: headless Chromium (Debian's chromium package) driven by Playwright (test_report, studio) -------
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)
# Flags that let a root-run headless Chromium start here, and keep it from calling home.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """A Chromium the test drives; skipped, with the reason, where playwright or chromium is missing or will not start."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra has it)")
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium; .ci/run installs it)")
    with sync_api.sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        except sync_api.Error as e:
            pytest.skip(f"chromium did not start: {str(e).splitlines()[0]}")
        yield chromium
        chromium.close()
