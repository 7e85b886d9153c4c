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


# ---------------------------------------------------------------------------------------------------------
# Issue 54 class 4: bounds of numbers and names, each one line instead of a traceback or a wait without end
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_run_config(tmp_path_factory, sample_data_dir):
    from steadytune.model.tiny import save_tiny_model

    folder = tmp_path_factory.mktemp("bounds")
    model = save_tiny_model(folder / "model", "qwen2")
    config = folder / "run.yaml"
    config.write_text(f"model_name_or_path: {model}\ndataset: alpaca_sample\ndataset_dir: {sample_data_dir}\n"
                      f"template: qwen\nmax_steps: 1\noutput_dir: {folder / 'out'}\n", encoding="utf-8")
    return config


BOUNDS = {
    "port out of range": (["train", "{config}", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                           "--master-port", "70000"], {}, "--master-port 70000: a port is 1-65535"),
    "MASTER_PORT out of range": (["train", "{config}"], {"FORCE_TORCHRUN": "1", "NNODES": "2", "NODE_RANK": "1",
                                                         "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "99999"},
                                 "MASTER_PORT 99999: a port is 1-65535"),
    "shell in MASTER_ADDR": (["train", "{config}"], {"FORCE_TORCHRUN": "1", "NNODES": "2", "NODE_RANK": "1",
                                                     "MASTER_ADDR": "h; rm -rf ~"}, "MASTER_ADDR 'h; rm -rf ~': not a host"),
    "shell in --master-addr": (["train", "{config}", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                                "$(reboot)"], {}, "--master-addr '$(reboot)': not a host name"),
    "a name that never resolves": (["train", "{config}", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                                    "no-such-host.invalid"], {}, "--master-addr no-such-host.invalid: "),
    "doctor --nodes port": (["doctor", "--nodes", "10.0.0.1:70000"], {}, "--nodes 70000: a port is 1-65535"),
    "doctor --nodes text port": (["doctor", "--nodes", "node0:http"], {}, "--nodes 'http': the port must be a number"),
    "bench --examples 0": (["bench", "--examples", "0"], {}, "bench: --examples 0: must be at least 1"),
    "learning_rate=1e39": (["train", "{config}", "learning_rate=1e39"], {}, "learning_rate: 1e+39 is out of range"),
    "learning_rate=100": (["train", "{config}", "learning_rate=100"], {}, "learning_rate: 100.0 is out of range"),
    "max_steps=1e30": (["train", "{config}", "max_steps=1000000000000000000000000000000"], {},
                       "max_steps: 1000000000000000000000000000000 is out of range"),
    "a huge lora_rank": (["train", "{config}", "lora_rank=1000000000000"], {}, "lora_rank 1000000000000: the "
                                                                               "adapters would hold"),
}


@pytest.mark.parametrize("case", list(BOUNDS))
def test_each_bound_is_one_line(case, tiny_run_config, capsys, monkeypatch):
    import time

    from steadytune.cli import main

    argv, env, said = BOUNDS[case]
    for name in ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    code = main([a.format(config=tiny_run_config) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and err and err[-1].startswith("error: ") and said in err[-1], (case, err[-3:])
    assert not any("Traceback" in line for line in err) and time.monotonic() - started < 30


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """`steadytune doctor ... | head -1`: the rest of the output has nowhere to go; no 'error: Broken pipe'."""
    paste = tmp_path / "paste.txt"
    paste.write_text("RuntimeError: HIP error: invalid device function\nrocminfo: gfx1031\n", encoding="utf-8")
    read_end, write_end = os.pipe()
    os.close(read_end)   # the reader has gone before the first line: every write meets a closed pipe
    try:
        done = subprocess.run([sys.executable, "-m", "steadytune", "doctor", "--from", str(paste)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 141
