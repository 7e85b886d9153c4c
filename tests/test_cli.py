"""The command line: every subcommand has help, and `doctor` works where torch itself is broken."""

import os
import subprocess
import sys

import pytest

from steadytune.cli import SUBCOMMANDS

# A rocminfo-shaped sample of our own (one GPU agent with the fields the parser reads), not a real capture.
SAMPLE_ROCMINFO = """ROCk module is loaded
==========
HSA Agents
==========
*******
Agent 1
*******
  Name:                    gfx942
  Marketing Name:          AMD Instinct MI300X
  Vendor Name:             AMD
  Device Type:             GPU
  Compute Unit:            304
  Pool Info:
    Pool 1
      Segment:                 GLOBAL; FLAGS: COARSE GRAINED
      Size:                    201310208(0xbffc000) KB
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-
"""


def run_cli(args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "steadytune", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("name", [n for n in SUBCOMMANDS if n != "report"])
def test_every_built_subcommand_has_help(name):
    proc = run_cli([name, "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: steadytune {name}")


def test_top_level_help_lists_every_subcommand():
    proc = run_cli(["--help"])
    assert proc.returncode == 0
    for name in SUBCOMMANDS:
        assert name in proc.stdout


def test_doctor_diagnoses_a_torch_that_does_not_import(tmp_path):
    """The seeds' first failure: a torch build that cannot load. doctor must say so, not crash on import."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise ImportError("libtorch_hip.so: cannot open shared object file")\n')
    proc = run_cli(["doctor"], {"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    assert "torch does not import" in proc.stdout and "libtorch_hip.so" in proc.stdout
    assert "Traceback" not in proc.stderr
    # --help needs no torch either, nor does reading a colleague's saved tool outputs.
    assert run_cli(["--help"], {"PYTHONPATH": str(tmp_path)}).returncode == 0
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "rocminfo.txt").write_text(SAMPLE_ROCMINFO, encoding="utf-8")
    offline = run_cli(["doctor", "--from", str(saved)], {"PYTHONPATH": str(tmp_path)})
    assert offline.returncode == 0 and "gfx942" in offline.stdout and "Traceback" not in offline.stderr


def test_unbuilt_subcommands_say_so():
    import importlib.util
    unbuilt = [n for n, (module, _) in SUBCOMMANDS.items() if importlib.util.find_spec(module) is None]
    if not unbuilt:
        pytest.skip("every subcommand is built")
    proc = run_cli([unbuilt[0]])
    assert proc.returncode == 2 and "not available in this build" in proc.stderr


@pytest.mark.parametrize("name,options", [
    ("export", ["--export-dir", "--gguf", "--archive", "--dtype", "--shard-size", "--no-verify", "--force"]),
    ("chat", ["--system", "--max-new-tokens", "--temperature", "--top-p", "--repetition-penalty", "--greedy", "--seed"]),
    ("predict", ["--input", "--output", "--text-column", "--batch-size", "--max-new-tokens", "--sample", "--seed",
                 "--force"]),
])
def test_inference_commands_list_every_option(name, options):
    proc = run_cli([name, "--help"])
    assert proc.returncode == 0, proc.stderr
    for option in options:
        assert option in proc.stdout, option
