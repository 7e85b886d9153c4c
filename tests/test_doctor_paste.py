"""doctor, round 4 (issue 55): `doctor --from FILE|DIR|-` reads what users paste - console sessions, tracebacks, sysfs and
procfs reads, dmesg, tables that show ids only - each piece by what it holds; a failed train prints the likely cause
under its traceback and `doctor --from saves/RUN/` reads the run's recorded error. The three captures of the issue are
in tests/captures/ (their `# source:` lines say where each comes from and what was composed)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from steadytune.cli import main as cli_main
from steadytune.doctor.offline import run_offline_checks
from steadytune.doctor.paste import command_env, split_pieces, unwrap
from steadytune.hardware.gpu_ids import lookup_id
from steadytune.hardware.smi_parsers import parse_text
from steadytune.model.tiny import save_tiny_model

CAPTURES = Path(__file__).parent / "captures"


def doctor(tmp_path: Path, text: str, name: str = "paste.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return run_offline_checks([path])


def capture(name: str) -> str:
    return (CAPTURES / name).read_text(encoding="utf-8")


def find(findings, severity, check, *words):
    return [f for f in findings if f.severity == severity and f.check == check
            and all(w in f"{f.what} {f.why} {f.fix}" for w in words)]


# --- the three captures --------------------------------------------------------------------------------------

def test_1_the_masks_on_the_command_line_are_why_no_hip_gpu_is_available(tmp_path):
    gpus, findings = doctor(tmp_path, capture("session_mi250x_rocr-and-cuda-masks.txt"))
    [error] = find(findings, "error", "known-error", "No HIP GPUs are available")
    assert "ROCR_VISIBLE_DEVICES=1 leaves 1 GPU" in error.why and "CUDA_VISIBLE_DEVICES=1 then asks for index 1" in error.why
    assert error.fix.startswith("unset CUDA_VISIBLE_DEVICES: ROCR_VISIBLE_DEVICES=1 alone gives the machine's GPU 1")
    assert "verl-project/verl#1575" in error.why
    assert not [f for f in findings if "could not read" in f.what]


def test_1_the_same_with_exports_in_the_session(tmp_path):
    text = ("$ export ROCR_VISIBLE_DEVICES=1\n$ export HIP_VISIBLE_DEVICES=1\n"
            "$ python -c 'import torch; torch.zeros(1).cuda()'\nRuntimeError: No HIP GPUs are available\n")
    _, findings = doctor(tmp_path, text)
    [error] = find(findings, "error", "known-error", "HIP_VISIBLE_DEVICES=1 then asks for index 1")
    assert "unset HIP_VISIBLE_DEVICES" in error.fix
    assert find(findings, "error", "visibility", "selects no GPU")   # the exports are that machine's environment too
    unset = text.replace("$ python", "$ unset HIP_VISIBLE_DEVICES\n$ python")
    _, findings = doctor(tmp_path, unset, "unset.txt")
    [plain] = find(findings, "error", "known-error", "No HIP GPUs")
    assert "ls -l /dev/kfd" in plain.fix and "asks for index" not in plain.why


def test_2_strix_halo_sysfs_and_cmdline_give_the_gtt_in_effect(tmp_path):
    gpus, findings = doctor(tmp_path, capture("sysfs_strix-halo_ttm-pages-limit.txt"))
    assert [(g.integrated, g.memory_gib) for g in gpus] == [(True, 4.0)]
    assert find(findings, "info", "unified-memory", "ttm.pages_limit asks for 96 GiB", "in effect (96 GiB)")
    assert find(findings, "info", "unified-memory", "the GPU can use 96 GiB of unified memory")
    assert find(findings, "info", "unified-memory", "the RAM is not in the paste", "MemTotal")
    assert find(findings, "warning", "saved-outputs", "architecture unknown", "rocminfo")
    assert not [f for f in findings if "could not read" in f.what or "not a recognised" in f.what]


def test_2_a_limit_that_did_not_take_and_a_gtt_that_leaves_the_os_nothing(tmp_path):
    text = ("$ cat /proc/cmdline\nBOOT_IMAGE=/vmlinuz-6.14.0 root=UUID=d55f ro quiet amdttm.pages_limit=31457280\n"
            "$ grep . /sys/class/drm/card0/device/mem_info_*_total\n"
            "/sys/class/drm/card0/device/mem_info_gtt_total:66862448640\n"
            "/sys/class/drm/card0/device/mem_info_vram_total:536870912\n"
            "$ grep MemTotal /proc/meminfo\nMemTotal:       130596872 kB\n")
    _, findings = doctor(tmp_path, text)
    [taken] = find(findings, "warning", "unified-memory", "asks for a 120 GiB GTT", "has 62.27 GiB")
    assert "ttm.pages_limit=31457280" in taken.fix and "amdttm.pages_limit=31457280" in taken.fix
    assert not find(findings, "info", "unified-memory", "RAM is not in the paste")
    free = text.replace("$ grep MemTotal /proc/meminfo\nMemTotal:       130596872 kB\n",
                        "$ free -g\n               total        used        free\nMem:             124          10         110\n")
    free = free.replace("amdttm.pages_limit=31457280", "ttm.pages_limit=31457280")
    free = free.replace("66862448640", "128849018880")
    _, findings = doctor(tmp_path, free, "free.txt")
    assert find(findings, "info", "unified-memory", "in effect (120 GiB)")
    assert find(findings, "warning", "unified-memory", "may map 120 GiB of 124 GiB RAM")


def test_3_tables_without_names_say_which_cards_by_pci_id_and_count_them_once(tmp_path):
    gpus, findings = doctor(tmp_path, capture("rocm-smi_showhw_raphael-igpu_rx7900.txt"))
    assert [(g.index, g.arch, g.integrated, g.device_id) for g in gpus] == [(0, "gfx1036", True, 0x164E),
                                                                               (1, "gfx1100", False, 0x744C)]
    assert gpus[0].name.startswith("Raphael") and "RX 7900" in gpus[1].name
    [shadow] = find(findings, "warning", "saved-outputs", "GPU 0 is an integrated GPU")
    assert shadow.fix.startswith("export HIP_VISIBLE_DEVICES=1") and "device kernel image is invalid" in shadow.why
    assert find(findings, "info", "arch", "GPU 1: gfx1100 is a target of pytorch.org")
    # pasted back to back, without the prompts: still two GPUs, not four
    bare = "\n".join(l for l in capture("rocm-smi_showhw_raphael-igpu_rx7900.txt").splitlines() if not l.startswith("$"))
    gpus, _ = doctor(tmp_path, bare, "bare.txt")
    assert [g.index for g in gpus] == [0, 1] and gpus[0].vbios == "102-RAPHAEL-008"


def test_showhw_of_rocm_6_with_node_gfx_and_partitions():
    """ROCm 6's --showhw (two MI210, a 2026 report): 0x ids, KFD nodes, GFX VER."""
    text = ("GPU  NODE  DID     GUID   GFX VER  GFX RAS  SDMA RAS  UMC RAS  VBIOS            BUS           PARTITION ID\n"
            "0    1     0x740f  20068  gfx90a   ENABLED  ENABLED   ENABLED  113-D67301V-075  0000:01:00.0  0\n"
            "1    2     0x740f  48932  gfx90a   ENABLED  ENABLED   ENABLED  113-D67301V-075  0000:02:00.0  0\n")
    [result] = parse_text(text, "showhw.txt")
    assert result.tool == "rocm-smi" and not result.problems
    assert [(g.kfd_node, g.arch, g.bus_id, g.nominal_memory_gib) for g in result.gpus] == \
        [(1, "gfx90a", "0000:01:00.0", 64.0), (2, "gfx90a", "0000:02:00.0", 64.0)]


def test_the_pci_id_table_names_ids_and_vbios_strings():
    assert lookup_id(0x744C).arch == "gfx1100" and lookup_id(0x744C).memory_gib is None   # XT / XTX / GRE share it
    assert lookup_id(0x1586).integrated and lookup_id(0x2330, 0x10DE).arch == "sm_90"
    assert lookup_id(None, vbios="102-RAPHAEL-008").arch == "gfx1036"
    assert lookup_id(0x1234) is None


# --- any text in -----------------------------------------------------------------------------------------------------

def test_prompts_exports_and_inline_variables():
    pieces = split_pieces("(venv) me@box:~/x$ export HSA_OVERRIDE_GFX_VERSION=10.3.0\n"
                          "[root@node ~]# HIP_VISIBLE_DEVICES=1 sudo -E python t.py\nout\n"
                          "PS C:\\Users\\me> python -c 'print(1)'\n1\n> python x.py\nok\n")
    assert [p.command for p in pieces] == ["export HSA_OVERRIDE_GFX_VERSION=10.3.0",
                                           "HIP_VISIBLE_DEVICES=1 sudo -E python t.py", "python -c 'print(1)'",
                                           "python x.py"]
    assert pieces[1].env == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0", "HIP_VISIBLE_DEVICES": "1"}
    assert command_env("env A=1 B='x y' python z.py") == ({"A": "1", "B": "x y"}, ["python", "z.py"])
    assert unwrap("> $ rocm-smi\n> ```\n> GPU  Temp\n> ```") == "$ rocm-smi\nGPU  Temp"
    assert split_pieces("just a line\n")[0].command == ""


def test_a_markdown_quoted_paste_reads_like_the_paste(tmp_path):
    quoted = "\n".join("> " + l for l in capture("session_mi250x_rocr-and-cuda-masks.txt").splitlines())
    _, findings = doctor(tmp_path, quoted)
    assert find(findings, "error", "known-error", "asks for index 1")


def test_a_kernel_log_names_its_gpus_by_id_and_its_faults(tmp_path):
    """ROCm/TheRock#1271's fault lines after the probe lines a Strix Point machine prints (journalctl form)."""
    text = ("Jun 28 17:34:49 box kernel: amdgpu 0000:c2:00.0: amdgpu: initializing kernel modesetting (IP DISCOVERY "
            "0x1002:0x150E 0xF111:0x0005 0xC1).\n"
            "Jun 28 17:35:01 box kernel: amdgpu 0000:c2:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 "
            "pasid:32773)\n"
            "Jun 28 17:35:01 box kernel: amdgpu 0000:c2:00.0: amdgpu:  Process python pid 5578 thread python pid 5578\n")
    gpus, findings = doctor(tmp_path, text)
    assert [(g.arch, g.integrated, g.bus_id) for g in gpus] == [("gfx1150", True, "0000:c2:00.0")]
    [fault] = find(findings, "error", "known-error", "page fault")
    assert "= GPU 0 (Strix" in fault.why and "process python (pid 5578)" in fault.why


def test_device_files_against_the_users_groups(tmp_path):
    text = ("$ ls -l /dev/kfd /dev/dri/renderD128\n"
            "crw-rw---- 1 root render 235,   0 Mar  3 10:00 /dev/kfd\n"
            "crw-rw---- 1 root render 226, 128 Mar  3 10:00 /dev/dri/renderD128\n"
            "$ id\nuid=1000(me) gid=1000(me) groups=1000(me),44(video),27(sudo)\n")
    _, findings = doctor(tmp_path, text)
    [error] = find(findings, "error", "device-files", "not in render")
    assert error.fix.startswith("sudo usermod -aG render $USER")
    _, findings = doctor(tmp_path, text.replace("44(video)", "44(video),110(render)"), "ok.txt")
    assert find(findings, "info", "device-files", "may open the GPU device files")


def test_kfd_topology_and_a_python_probe(tmp_path):
    text = ("$ cat /sys/class/kfd/kfd/topology/nodes/1/properties | grep gfx_target\ngfx_target_version 110501\n"
            "$ python -c 'import torch; print(torch.__version__, torch.version.hip)'\n"
            "2.10.0+rocm7.1 7.1.25424-4179531dcd\n")
    gpus, findings = doctor(tmp_path, text)
    assert [(g.arch, g.kfd_node) for g in gpus] == [("gfx1151", 1)]
    assert find(findings, "info", "arch", "gfx1151") and not find(findings, "warning", "saved-outputs", "unknown")


def test_an_unknown_paste_still_ends_in_one_clear_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("my GPU is broken, please help\n")
    assert cli_main(["doctor", "--from", str(tmp_path / "notes.txt")]) == 1
    out = capsys.readouterr().out
    assert "could not read notes.txt" in out and "could not read any GPU" in out


def test_from_stdin(monkeypatch, capsys):
    data = capture("session_mi250x_rocr-and-cuda-masks.txt").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert cli_main(["doctor", "--from", "-", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert any(f["check"] == "known-error" and "stdin" in f["what"] for f in out["findings"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"  \n")))
    assert cli_main(["doctor", "--from", "-"]) == 1
    assert capsys.readouterr().err.strip() == "error: --from -: nothing on stdin (pipe a saved output or a paste into it)"


# --- a failed run ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    """A real tiny training that runs out of memory at step 2 (fault injection: torch.OutOfMemoryError, as a GPU
    raises it), through the command line."""
    root = tmp_path_factory.mktemp("failing")
    tiny = save_tiny_model(root / "qwen2", "qwen2", seed=0)
    rows = [{"instruction": f"say {i}", "output": f"{i} {i}"} for i in range(16)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = {"model_name_or_path": str(tiny), "dataset": str(root / "train.jsonl"), "template": "empty",
           "cutoff_len": 32, "per_device_train_batch_size": 4, "max_steps": 4, "logging_steps": 1,
           "plot_loss": False, "output_dir": str(root / "saves" / "run"), "fault_injection": {"oom_step": 2}}
    (root / "run.yaml").write_text(yaml.safe_dump(cfg))
    return root


def test_a_failed_train_prints_the_likely_cause_and_doctor_reads_the_run(failing_run, capsys):
    code = cli_main(["train", str(failing_run / "run.yaml"), "--force"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback (most recent call last)" in err and "OutOfMemoryError" in err
    [line] = [l for l in err.splitlines() if l.startswith("likely cause:")]
    assert "gradient_checkpointing: true" in line and "error catalogue: out-of-memory" in line
    run = failing_run / "saves" / "run"
    manifest = json.loads((run / ".steadytune-run.json").read_text())
    assert manifest["status"] == "failed" and "out of memory at step 2" in manifest["error"]
    assert cli_main(["doctor", "--from", str(run), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    known = [f for f in out["findings"] if f["check"] == "known-error"]
    assert known and "out of memory" in known[0]["what"] and "gradient_checkpointing" in known[0]["fix"]
    assert out["gpus"] == [] or all(g["vendor"] for g in out["gpus"])   # environment.json: the CPU machine it ran on


def test_an_error_the_catalogue_does_not_know_keeps_its_plain_traceback(monkeypatch, capsys):
    import steadytune.train as train

    def broken(args):
        raise ValueError("a shape the model does not take")
    monkeypatch.setattr(train, "run", broken)
    assert cli_main(["train", "x.yaml"]) == 1
    err = capsys.readouterr().err
    assert "ValueError: a shape the model does not take" in err and "likely cause" not in err


def test_an_apu_at_the_ttm_default_from_its_dmesg(tmp_path):
    """ROCm/legacy-rocm-build#5595 (a 128 GB Strix Halo seeing 62 GiB): the misspelt parameter, the deprecation, and
    no ttm.pages_limit at all; the GPU from the IP DISCOVERY line."""
    text = ("(base) tiiny@mais-axb3502:~$ sudo dmesg | grep amdgpu\n"
            "[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-6.14.0-1014-oem root=UUID=d55f0c3f ro quiet splash "
            "amdgpu.gtt_size=122880 vt.handoff=7\n"
            "[    3.636913] amdgpu: unknown parameter 'gtt_size' ignored\n"
            "[    3.644221] amdgpu 0000:c6:00.0: amdgpu: initializing kernel modesetting (IP DISCOVERY 0x1002:0x1586 "
            "0x1F66:0x0101 0xC1).\n"
            "[    3.646006] amdgpu 0000:c6:00.0: amdgpu: [drm] Configuring gttsize via module parameter is deprecated, "
            "please use ttm.pages_limit\n"
            "[    3.700001] amdgpu 0000:c6:00.0: amdgpu: amdgpu: 63693M of GTT memory ready.\n")
    gpus, findings = doctor(tmp_path, text)
    assert [(g.arch, g.integrated) for g in gpus] == [("gfx1151", True)]
    assert find(findings, "warning", "known-error", "unknown parameter 'gtt_size' ignored")
    [default] = find(findings, "warning", "unified-memory", "sets no ttm.pages_limit", "62.2 GiB")
    assert "ttm.pages_limit=28311552" in default.fix


def test_two_tools_that_number_the_cards_differently_are_merged_by_bus():
    """amd-smi and rocm-smi --showhw listing the same two cards in another order: two GPUs, each with its own arch."""
    from steadytune.hardware.smi_parsers import GpuRecord, ParseResult, merge_results
    amd_smi = ParseResult("amd-smi", "a", [GpuRecord(0, "amd", "Radeon RX 7900 XTX", "gfx1100", "amd-smi TARGET_GRAPHICS_VERSION",
                                                     bus_id="0000:03:00.0"),
                                           GpuRecord(1, "amd", "AMD Radeon Graphics", "gfx1036",
                                                     "amd-smi TARGET_GRAPHICS_VERSION", bus_id="0000:7b:00.0")])
    showhw = ParseResult("rocm-smi", "b", [GpuRecord(0, "amd", bus_id="0000:7B:00.0", device_id=0x164E, vbios="102-RAPHAEL-008"),
                                           GpuRecord(1, "amd", bus_id="0000:03:00.0", device_id=0x744C)])
    gpus, conflicts = merge_results([showhw, amd_smi])
    assert conflicts == [] and [(g.arch, g.device_id, g.vbios) for g in gpus] == [
        ("gfx1100", 0x744C, None), ("gfx1036", 0x164E, "102-RAPHAEL-008")]
    # an MI300X in CPX mode: partitions share a bus and stay separate cards
    parts = ParseResult("rocm-smi", "c", [GpuRecord(i, "amd", bus_id="0000:01:00.0") for i in range(3)])
    assert len(merge_results([parts, ParseResult("rocm-smi", "d", [GpuRecord(i, "amd") for i in range(3)])])[0]) == 3


def test_a_python_session_that_sets_the_masks_itself(tmp_path):
    text = ("bash-4.4$ python\n>>> import os\n>>> os.environ['ROCR_VISIBLE_DEVICES'] = '1'\n"
            ">>> os.environ[\"HIP_VISIBLE_DEVICES\"] = \"1\"\n>>> import torch\n>>> torch.zeros(1).cuda()\n"
            "RuntimeError: No HIP GPUs are available\n")
    _, findings = doctor(tmp_path, text)
    assert find(findings, "error", "known-error", "HIP_VISIBLE_DEVICES=1 then asks for index 1")


def test_sysfs_sizes_as_numfmt_prints_them(tmp_path):
    text = ("$ numfmt --to=iec < /sys/class/drm/card0/device/mem_info_gtt_total\n96G\n"
            "$ cat /sys/class/drm/card0/device/mem_info_vram_total | numfmt --to=iec\n512M\n")
    gpus, findings = doctor(tmp_path, text)
    assert [(g.integrated, g.memory_gib) for g in gpus] == [(True, 0.5)]
    assert find(findings, "info", "unified-memory", "the GPU can use 96 GiB")


def test_a_finished_run_folder_raises_nothing(tmp_path, capsys):
    run = tmp_path / "saves" / "ok"
    run.mkdir(parents=True)
    (run / ".steadytune-run.json").write_text(json.dumps({"status": "finished", "files": ["adapter_model.safetensors"]}))
    (run / "environment.json").write_text(json.dumps({"hardware": {"backend": "cpu", "torch_version": "2.13.0+cpu",
                                                                   "gpus": []}, "findings": [],
                                                      "versions": {"torch": "2.13.0+cpu"}, "env": {}}))
    assert cli_main(["doctor", "--from", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not [f for f in out["findings"] if f["severity"] != "info"]
    assert any("the run's status: finished" in f["what"] for f in out["findings"])


def test_a_paste_read_as_text_is_not_called_an_unreadable_tool_output(tmp_path, capsys):
    from steadytune.cli import main as cli_main
    paste = tmp_path / "issue.txt"
    paste.write_text("Ollama on my RX 6600 only uses the CPU\nWindows 11, Ollama 0.5.7\n", encoding="utf-8")
    cli_main(["doctor", "--from", str(paste)])
    out = capsys.readouterr().out
    assert "issue.txt: read as text" in out and "not a recognised rocm-smi" not in out
    noise = tmp_path / "noise.txt"
    noise.write_text("hello, nothing to see\n", encoding="utf-8")
    cli_main(["doctor", "--from", str(noise)])
    assert "not a recognised rocm-smi" in capsys.readouterr().out   # nothing read at all: still said
