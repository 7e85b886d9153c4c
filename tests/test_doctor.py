"""`steadytune doctor`: simulated machines (torch's version attributes and torch.cuda patched, environment
variables, device files and /sys, /proc under a tmp folder) -> the findings of research/rocm.md's symptom
table, one test per applicable row; then offline mode and the CLI end to end."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import torch
from conftest import SMI_FIXTURES as FIXTURES
from conftest import needs_shared

from steadytune.cli import main as cli_main
from steadytune.doctor.attention import diagnose_sdpa, explain_flash_attn_failure, probe_sdpa
from steadytune.doctor.checks import check_device_files
from steadytune.doctor.environment import write_environment
from steadytune.doctor.findings import Finding, format_findings, has_errors
from steadytune.doctor.live import explain_torch_import_error, run_live_checks
from steadytune.doctor.multi_gpu import check_multi_gpu, run_allreduce_check
from steadytune.doctor.probe import collect_probe
from steadytune.hardware.backend import detect, device_for

GIB = 2**30


def props(name, arch, memory_gib, integrated=False, major=9, minor=4):
    return SimpleNamespace(name=name, gcnArchName=arch, total_memory=memory_gib * GIB, major=major, minor=minor,
                           is_integrated=int(integrated))


MI300X = props("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 192)
MI250 = props("AMD Instinct MI250X/MI250", "gfx90a:sramecc+:xnack-", 64)
RX6800 = props("AMD Radeon RX 6800", "gfx1030", 16, major=10, minor=3)
RX6700 = props("AMD Radeon RX 6700 XT", "gfx1031", 12, major=10, minor=3)
RX7900 = props("Radeon RX 7900 XTX", "gfx1100", 24, major=11, minor=0)
RAPHAEL = props("AMD Radeon Graphics (Raphael)", "gfx1036", 0.5, integrated=True, major=10, minor=3)
WHEEL_ARCHS = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100"]


def simulate(monkeypatch, gpus=(), hip="6.2.41133-dd7f95766", cuda=None, arch_list=WHEEL_ARCHS,
             initialized=False, peer=True, torch_version=None):
    """Make this CPU torch look like a ROCm (hip=...) / CUDA (cuda=...) / CPU build with these GPUs."""
    monkeypatch.setattr(torch.version, "hip", hip, raising=False)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(gpus))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(gpus))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: gpus[i])
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch_list))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: peer)
    if torch_version:
        monkeypatch.setattr(torch, "__version__", torch_version)


def machine(tmp_path, kfd=True, render=1, kfd_mode=0o666, gfx_nodes=(), cmdline="BOOT_IMAGE=/vmlinuz ro",
            version="Linux version 6.8.0-generic", interfaces=("lo", "eth0"), rocm_version="6.2.4-120", amdgpu=True):
    """A fake /dev, /sys and /proc (and ROCm root) under tmp_path. -> keyword arguments for run_live_checks."""
    dev, sys_, proc, rocm = tmp_path / "dev", tmp_path / "sys", tmp_path / "proc", tmp_path / "rocm"
    (dev / "dri").mkdir(parents=True)
    proc.mkdir()
    if kfd:
        (dev / "kfd").touch()
        os.chmod(dev / "kfd", kfd_mode)
    for i in range(render):
        (dev / "dri" / f"renderD{128 + i}").touch()
        os.chmod(dev / "dri" / f"renderD{128 + i}", 0o666)
    nodes = sys_ / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for node, value in enumerate([0, *gfx_nodes]):        # node 0 is the CPU
        (nodes / str(node)).mkdir(parents=True)
        (nodes / str(node) / "properties").write_text(f"cpu_cores_count 8\ngfx_target_version {value}\n")
    for name in interfaces:
        (sys_ / "class" / "net" / name).mkdir(parents=True)
    if amdgpu:
        (sys_ / "module" / "amdgpu").mkdir(parents=True)
    (proc / "cmdline").write_text(cmdline)
    (proc / "version").write_text(version)
    if rocm_version:
        (rocm / ".info").mkdir(parents=True)
        (rocm / ".info" / "version").write_text(rocm_version)
    return dict(dev_root=dev, sys_root=sys_, proc_root=proc, root=tmp_path, run_kernels=False, run_tools=False), rocm


def live(monkeypatch, tmp_path, env=None, **machine_kwargs):
    paths, rocm = machine(tmp_path, **machine_kwargs)
    return run_live_checks(env={"ROCM_PATH": str(rocm), **(env or {})}, **paths)


def find(findings, severity, check, *words):
    """Findings of this severity and check whose text contains every word."""
    return [f for f in findings if f.severity == severity and f.check == check
            and all(w in f"{f.what} {f.why} {f.fix}" for w in words)]


# --- this machine, for real --------------------------------------------------------------------------------

def test_live_checks_on_this_cpu_machine_are_quick_and_error_free():
    start = time.monotonic()
    findings = run_live_checks()
    assert time.monotonic() - start < 3.0
    assert not has_errors(findings)
    assert find(findings, "info", "torch-build", "no GPU found")
    assert find(findings, "info", "precision", "fp32")
    assert find(findings, "info", "attention", "SDPA backends that run here", "math")
    assert find(findings, "info", "packing", "packed rows keep examples apart with sdpa")  # train's own policy call


# --- rocm.md symptom table, row by row -------------------------------------------------------------------

def test_row1_cuda_wheel_on_an_amd_machine(monkeypatch, tmp_path):
    simulate(monkeypatch, hip=None, cuda="12.4")
    findings = live(monkeypatch, tmp_path, gfx_nodes=[90402])
    [error] = find(findings, "error", "torch-build", "CUDA 12.4 build", "AMD GPUs")
    assert "--index-url https://download.pytorch.org/whl/rocm6.2" in error.fix


def test_row2_cpu_wheel_on_an_amd_machine(monkeypatch, tmp_path):
    simulate(monkeypatch, hip=None, cuda=None)
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "error", "torch-build", "CPU-only build", "/kfd exists", "whl/rocm6.2")


def test_cpu_wheel_on_an_nvidia_machine(monkeypatch, tmp_path):
    simulate(monkeypatch, hip=None, cuda=None)
    paths, _ = machine(tmp_path, kfd=False, render=0, rocm_version=None)
    (paths["dev_root"] / "nvidiactl").touch()
    findings = run_live_checks(env={}, **paths)
    assert find(findings, "error", "torch-build", "NVIDIA", "whl/cu")


def test_row3_arch_missing_from_the_wheel(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[RX6700])
    findings = live(monkeypatch, tmp_path, gfx_nodes=[100301])
    [error] = find(findings, "error", "arch-coverage", "gfx1031")
    assert error.fix == "export HSA_OVERRIDE_GFX_VERSION=10.3.0"
    simulate(monkeypatch, gpus=[RX7900])
    assert not find(live(monkeypatch, tmp_path / "b", gfx_nodes=[110000]), "error", "arch-coverage")


def test_row4_malformed_or_wrong_family_override(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[RX6800])
    findings = live(monkeypatch, tmp_path / "a", env={"HSA_OVERRIDE_GFX_VERSION": "11"}, gfx_nodes=[100301])
    assert find(findings, "error", "hsa-override", "not in the form X.Y.Z")
    # the card really is gfx1150 (RDNA3.5); 10.3.0 is RDNA2 code -> INVALID_ISA
    findings = live(monkeypatch, tmp_path / "b", env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, gfx_nodes=[110500])
    assert find(findings, "error", "hsa-override", "another family", "gfx1150")
    # a supported card does not need one
    findings = live(monkeypatch, tmp_path / "c", env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, gfx_nodes=[100300])
    assert find(findings, "warning", "hsa-override", "supported by this torch", "unset")
    # the usual, correct use: RX 6700 XT (gfx1031) run as gfx1030
    findings = live(monkeypatch, tmp_path / "d", env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, gfx_nodes=[100301])
    assert not [f for f in findings if f.check == "hsa-override" and f.severity != "info"]


def test_row5_integrated_gpu_enumerated_first(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[RAPHAEL, RX6800])
    findings = live(monkeypatch, tmp_path, gfx_nodes=[100306, 100300])
    [warning] = find(findings, "warning", "devices", "integrated", "Raphael")
    assert warning.fix.startswith("export HIP_VISIBLE_DEVICES=1")
    info = detect()
    assert info.primary.name == "AMD Radeon RX 6800" and device_for(info) == torch.device("cuda", 1)


def test_row6_two_visibility_layers(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X])
    findings = live(monkeypatch, tmp_path / "a", env={"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0,1"})
    assert find(findings, "error", "visibility", "HIP_VISIBLE_DEVICES lists 2", "ROCR_VISIBLE_DEVICES only 1")
    findings = live(monkeypatch, tmp_path / "b", env={"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"})
    assert find(findings, "warning", "visibility", "two visibility layers", "['2']")
    findings = live(monkeypatch, tmp_path / "c", env={"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"})
    assert find(findings, "warning", "visibility", "disagree", "export HIP_VISIBLE_DEVICES only")
    findings = live(monkeypatch, tmp_path / "d", env={"CUDA_VISIBLE_DEVICES": ""})
    assert find(findings, "warning", "visibility", "hides every GPU")


def test_row7_visibility_changed_after_initialisation(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X, MI300X], initialized=True)
    findings = live(monkeypatch, tmp_path, env={"HIP_VISIBLE_DEVICES": "0"}, cmdline="iommu=pt")
    assert find(findings, "warning", "visibility", "lists 1 GPUs but torch sees 2", "before starting Python")


def test_row8_device_files_in_a_container(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[])
    findings = live(monkeypatch, tmp_path / "a", kfd=False, render=0)
    assert find(findings, "error", "device-files", "kfd does not exist", "--device /dev/kfd")
    findings = live(monkeypatch, tmp_path / "b", render=0)
    assert find(findings, "error", "device-files", "renderD* nodes")
    # /dev/kfd owned by a render group this (non-root) user is not in
    paths, rocm = machine(tmp_path / "c", kfd_mode=0o660)
    probe = collect_probe(env={"ROCM_PATH": str(rocm)}, **paths)
    probe.uid, probe.groups = 1000, {1000}
    gid = (paths["dev_root"] / "kfd").stat().st_gid
    assert find(check_device_files(probe), "error", "device-files", "not read-write", f"gid {gid}", "--group-add")
    probe.groups = {1000, gid}
    assert not find(check_device_files(probe), "error", "device-files")


def test_row9_torch_that_does_not_import():
    finding = explain_torch_import_error(ImportError("libamdhip64.so.5: cannot open shared object file: No such file"))
    assert finding.severity == "error" and "libamdhip64.so.5" in finding.why and "rocm" in finding.fix


def test_row10_wsl(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[RX7900])
    findings = live(monkeypatch, tmp_path, version="Linux version 5.15.153.1-microsoft-standard-WSL2")
    assert find(findings, "warning", "wsl", "hipErrorNoDevice", "repo.radeon.com")


def test_row11_no_bf16_on_rdna2_although_torch_says_so(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[RX6800])
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "warning", "precision", "gfx1030", "RDNA1/2", "fp16: true")
    assert find(findings, "info", "precision", "uses fp32")


def test_row12_bf16_where_native_avoids_fp16_overflow(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X])
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "info", "precision", "uses bf16", "gfx942")
    assert not find(findings, "warning", "precision")


def test_row13_fp16_denormals_on_mi200(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI250])
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "warning", "precision", "gfx90a", "denormals", "bf16")


def test_row14_experimental_aotriton_falls_back_to_math():
    caught = ["Flash Efficient attention on Current AMD GPU is still experimental. Enable it with "
              "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1."]
    results = {"flash": "RuntimeError: No available kernel", "mem-efficient": "RuntimeError: No available kernel",
               "cudnn": "RuntimeError: No available kernel", "math": None}
    findings = diagnose_sdpa(results, caught, "rocm", "2.5.1+rocm6.2", "6.2.41133")
    assert find(findings, "warning", "attention", "experimental", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1")
    assert find(findings, "info", "attention", "run here: math")


def test_row15_torch_without_fused_attention():
    findings = diagnose_sdpa({"flash": "RuntimeError: x", "math": None}, ["1Torch was not compiled with flash attention."],
                             "rocm", "2.2.0+rocm5.7", "5.7.31921")
    assert find(findings, "warning", "attention", "without fused attention", "upgrade torch")


def test_row16_mem_efficient_bug_on_torch_2_6_rocm_6_2():
    findings = diagnose_sdpa({"math": None}, [], "rocm", "2.6.0+rocm6.2.4", "6.2.41134")
    assert find(findings, "warning", "attention", "2.6.0", "padding mask")
    assert not find(diagnose_sdpa({"math": None}, [], "rocm", "2.7.1+rocm6.3", "6.3.42131"), "warning", "attention")


def test_sdpa_probe_runs_for_real_on_cpu():
    results, _ = probe_sdpa(torch.device("cpu"), torch.float32)
    assert results["math"] is None and set(results) == {"flash", "mem-efficient", "cudnn", "math"}


def test_row17_flash_attn_ck_does_not_build_for_rdna3(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[RX7900])
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "info", "attention", "CK build does not support gfx1100", "SDPA is the default")
    assert find(findings, "info", "attention", "uses sdpa")


def test_row18_flash_attn_triton_build_without_its_variable():
    why, fix = explain_flash_attn_failure("flash-attn does not import: ModuleNotFoundError: No module named 'flash_attn_2_cuda'")
    assert fix == "export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE"


def test_row19_flash_attn_built_against_another_torch():
    why, fix = explain_flash_attn_failure("ImportError: flash_attn_2_cuda.cpython-311.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")
    assert "another torch" in why and "--no-build-isolation" in fix


def _fake_installed(tmp_path, monkeypatch, **packages):
    """Installed-package metadata (what importlib.metadata reads), without the packages' code."""
    site = tmp_path / "site"
    for name, version in packages.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(site))


def test_row20_old_bitsandbytes_without_kernels_for_this_gpu(monkeypatch, tmp_path):
    _fake_installed(tmp_path, monkeypatch, bitsandbytes="0.48.0")
    simulate(monkeypatch, gpus=[RX6800])
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "warning", "optional", "bitsandbytes 0.48.0", "gfx1030", "invalid device function")
    assert find(findings, "info", "optional", "installed: bitsandbytes 0.48.0")


def test_row21_deepspeed_ops_cannot_build(monkeypatch, tmp_path):
    _fake_installed(tmp_path, monkeypatch, deepspeed="0.14.0")
    simulate(monkeypatch, gpus=[MI300X])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "warning", "optional", "hipcc is not found", "CUDA_HOME does not exist")
    assert find(findings, "warning", "optional", "deepspeed 0.14.0", "FUSED_ADAM")


def test_row22_multi_gpu_without_iommu_pt(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X, MI300X], peer=False)
    paths, rocm = machine(tmp_path)
    probe = collect_probe(env={"ROCM_PATH": str(rocm)}, **{**paths, "run_kernels": True})
    findings = check_multi_gpu(probe)
    assert find(findings, "warning", "multi-gpu", "iommu=pt", "NCCL_P2P_DISABLE=1")
    assert find(findings, "warning", "multi-gpu", "no peer-to-peer access between GPUs [(0, 1)]")
    simulate(monkeypatch, gpus=[MI300X, MI300X], peer=True)
    findings = live(monkeypatch, tmp_path / "b", cmdline="BOOT_IMAGE=/vmlinuz iommu=pt")
    assert not find(findings, "warning", "multi-gpu")


def test_row23_socket_interface_that_does_not_exist(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X])
    findings = live(monkeypatch, tmp_path / "a", env={"NCCL_SOCKET_IFNAME": "ib0"})
    assert find(findings, "error", "multi-gpu", "NCCL_SOCKET_IFNAME='ib0'", "eth0", "Watchdog")
    for spec in ("eth", "=eth0", "^lo"):
        assert not find(live(monkeypatch, tmp_path / spec, env={"NCCL_SOCKET_IFNAME": spec}), "error", "multi-gpu")


def test_row24_allocator_settings(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X], torch_version="2.10.0+rocm6.4")
    findings = live(monkeypatch, tmp_path / "a", env={"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"})
    assert find(findings, "warning", "allocator", "expandable_segments", "max_split_size_mb")
    findings = live(monkeypatch, tmp_path / "b", env={"PYTORCH_ALLOC_CONF": "max_split_mb:512"})
    assert find(findings, "error", "allocator", "unknown allocator option", "max_split_mb")
    findings = live(monkeypatch, tmp_path / "c", env={"PYTORCH_ALLOC_CONF": "max_split_size_mb:512",
                                                      "PYTORCH_HIP_ALLOC_CONF": "garbage_collection_threshold:0.6"})
    assert find(findings, "info", "allocator", "torch reads PYTORCH_ALLOC_CONF")
    assert find(findings, "warning", "allocator", "PYTORCH_HIP_ALLOC_CONF ignored")


def test_rocm_torch_that_sees_no_gpu(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[])
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "error", "torch-build", "sees no GPU")


def test_pytorch_rocm_arch_without_this_gpu(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X])
    findings = live(monkeypatch, tmp_path, env={"PYTORCH_ROCM_ARCH": "gfx90a"})
    [warning] = find(findings, "warning", "rocm", "PYTORCH_ROCM_ARCH='gfx90a'", "gfx942")
    assert warning.fix == 'export PYTORCH_ROCM_ARCH="gfx90a;gfx942"'


# --- output, environment.json, train's refusal ---------------------------------------------------------

def test_format_findings_lists_errors_first_with_counts():
    findings = [Finding("info", "a", "fine"), Finding("error", "b", "broken", "because", "do this"),
                Finding("warning", "c", "careful")]
    text = format_findings(findings)
    lines = text.splitlines()
    assert lines[0].startswith("ERROR") and "broken" in lines[0]
    assert "why: because" in lines[1] and "fix: do this" in lines[2]
    assert lines[-1] == "1 error(s), 1 warning(s), 1 info"
    assert has_errors(findings) and not has_errors(findings[:1])


def test_write_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("SOME_SECRET_TOKEN", "x")
    findings = run_live_checks()
    path = write_environment(tmp_path / "run", detect(), findings)
    record = json.loads(path.read_text())
    assert record["hardware"]["backend"] == "cpu"
    assert record["versions"]["torch"] == importlib.metadata.version("torch")
    assert record["env"] == {k: v for k, v in record["env"].items() if not k.startswith("SOME_")}
    assert record["env"]["HIP_VISIBLE_DEVICES"] == "0"
    assert len(record["findings"]) == len(findings)


def test_allreduce_check_runs_real_processes():
    finding = run_allreduce_check(2, backend="gloo", timeout=120)
    assert finding.severity == "info" and "works" in finding.what


# --- offline mode and the CLI ------------------------------------------------------------------------------

@needs_shared
def test_offline_diagnosis_of_an_rx6800_with_an_igpu(tmp_path, capsys):
    code = cli_main(["doctor", "--rocm-smi", str(FIXTURES / "rocm-smi_csv_rx6800_gfx1030_plus_igpu.txt"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["mode"] == "offline"
    assert [(g["index"], g["arch"], g["integrated"], g["bf16"]) for g in out["gpus"]] == \
        [(0, "gfx1030", False, False), (1, "gfx1036", True, False)]
    assert any(f["severity"] == "warning" and "RDNA1/2" in f["what"] for f in out["findings"])


def test_a_huge_saved_output_is_read_streaming_up_to_a_stated_cap(tmp_path, capsys, monkeypatch):
    """Issue 54 class 4: `doctor --from` a 2 GB text file took 11 GB (read whole, then split and parsed). It is read a
    chunk at a time up to MAX_SAVED_BYTES (cut smaller here: 1 MiB of a 48 MiB file), and the cut is said."""
    import tracemalloc

    from steadytune.doctor import offline

    monkeypatch.setattr(offline, "MAX_SAVED_BYTES", 1 << 20)
    monkeypatch.setattr(offline, "READ_CHUNK", 1 << 16)
    line = "GPU[0] : Temperature (Sensor edge) (C): 35.0\n"
    with (tmp_path / "paste.txt").open("w", encoding="utf-8") as f:
        for _ in range(48):
            f.write(line * ((1 << 20) // len(line)))
    # what doctor loads once per process (the error catalogue, the case library, the rule tables) grows with every
    # mining round and is no part of reading the file: load it first, so the peak measures the reading alone (run
    # first in its process, the test once counted those tables and failed at 25 MiB while the reading held ~1 MiB)
    (tmp_path / "warm").mkdir()
    (tmp_path / "warm" / "paste.txt").write_text(line * 4, encoding="utf-8")
    assert cli_main(["doctor", "--from", str(tmp_path / "warm" / "paste.txt")]) == 0
    capsys.readouterr()
    tracemalloc.start()
    try:
        code = cli_main(["doctor", "--from", str(tmp_path / "paste.txt")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().out
    assert code == 0 and "read the first 1 MiB of paste.txt only (it holds 48 MiB" in out, out
    assert peak < 24 << 20, f"{peak / 2**20:.0f} MiB held while reading a 48 MiB file"


def test_offline_mode_flags_integrated_gpu_first_and_unlisted_arch(tmp_path, capsys):
    # the same machine as the LocalAI fixture, but with the iGPU enumerated first and an RX 6700 XT
    (tmp_path / "smi.csv").write_text(
        "device,VRAM Total Memory (B),Card Series,Card Model,GFX Version\n"
        "card0,67108864,Raphael,0x164e,gfx1036\ncard1,12868124672,Navi 22 [Radeon RX 6700 XT],0x73df,gfx1031\n")
    code = cli_main(["doctor", "--from", str(tmp_path)])
    text = capsys.readouterr().out
    assert code == 0
    assert "GPU 0 is an integrated GPU" in text and "HIP_VISIBLE_DEVICES=1" in text
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in text


def test_offline_mode_with_nothing_readable_exits_1(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("my GPU is broken, please help\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    assert cli_main(["doctor", "--from", str(tmp_path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    problems = [f["what"] for f in out["findings"]]
    assert any(p.startswith("could not read notes.txt") for p in problems)
    assert any("blob.bin" in p and "binary" in p for p in problems)
    assert out["exit_code"] == 1


def test_missing_input_file_is_a_clear_error(tmp_path, capsys):
    assert cli_main(["doctor", "--rocminfo", str(tmp_path / "nope.txt")]) == 1
    assert "--rocminfo" in capsys.readouterr().err


@needs_shared
def test_cli_end_to_end_over_every_fixture():
    done = subprocess.run([sys.executable, "-m", "steadytune", "doctor", "--from", str(FIXTURES), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["mode"] == "offline" and out["exit_code"] == 0
    assert {g["vendor"] for g in out["gpus"]} == {"amd", "nvidia"}
    assert not any(f["what"].startswith("could not read") for f in out["findings"])


def test_doctor_config_gives_checkpointing_for_eager_and_compiled_layers_on_cuda():
    """On CUDA, a run long enough to compile keeps fewer activations: doctor gives train's answer for both, and where
    memory turns checkpointing on, the smaller micro-batch that would fit without it."""
    from steadytune.config import RunConfig
    from steadytune.doctor.plan import checkpointing_findings
    from steadytune.hardware.backend import GPU, HardwareInfo

    def findings(backend: str, memory: float, **train):
        info = HardwareInfo(backend=backend, torch_version=torch.__version__, gpus=[GPU(0, "GPU", "sm_90", memory)])
        cfg = RunConfig()
        cfg.model.model_name_or_path = "Qwen/Qwen2.5-7B"
        for key, value in train.items():
            setattr(cfg.model if key == "quantization_bit" else cfg.train, key, value)
        return [f"{f.what} | {f.why}" for f in checkpointing_findings(info, cfg, "plan")]

    # 7B (15.2 GiB of bf16 weights) on an 80 GiB card at 16,384 tokens: eager layers must recompute, compiled ones
    # (with recompute_pointwise) fit
    eager, compiled = findings("cuda", 80.0, max_tokens_per_batch=16384)
    assert "checkpointing on" in eager and "with eager layers" in eager
    assert "micro-batches of 8,192 tokens (2x gradient_accumulation_steps" in eager   # it turns on above 8,232
    assert "checkpointing off" in compiled and "once its layers compile" in compiled
    # recompute_pointwise: false counts the compiled layers' full activations: on again
    assert "checkpointing on" in findings("cuda", 80.0, max_tokens_per_batch=16384, recompute_pointwise=False)[1]
    # ROCm does not compile by default, and torch_compile: false does not either: one answer, the eager one
    assert len(findings("rocm", 80.0, max_tokens_per_batch=16384)) == 1
    assert len(findings("cuda", 80.0, max_tokens_per_batch=16384, torch_compile=False)) == 1
    # QLoRA: the 4-bit weights (5.2 GiB at 7B) are what the activations sit beside, not the bf16 ones (14.2 GiB);
    # an 8-bit base does not compile, so only the eager answer
    qlora = findings("cuda", 24.0, max_tokens_per_batch=16384, quantization_bit=4)
    assert len(qlora) == 2 and all("weights ~5.2 GiB" in f for f in qlora)
    assert len(findings("cuda", 24.0, max_tokens_per_batch=16384, quantization_bit=8)) == 1


def test_doctor_config_says_whether_train_would_multiply_the_base_in_fp8(tmp_path):
    """doctor --config answers fp8_base with train's own rule, from the GPU's architecture and the model's shape."""
    from steadytune.config import RunConfig
    from steadytune.doctor.plan import fp8_findings
    from steadytune.hardware.backend import GPU, HardwareInfo
    from steadytune.model.tiny import save_tiny_model

    def answer(arch: str, model: str, backend: str = "cuda", quantization_bit: int | None = None, **train) -> str:
        info = HardwareInfo(backend=backend, torch_version=torch.__version__, gpus=[GPU(0, "GPU", arch, 139.8)])
        cfg = RunConfig()
        cfg.model.model_name_or_path = model
        cfg.model.quantization_bit = quantization_bit
        for key, value in train.items():
            setattr(cfg.train, key, value)
        (finding,) = fp8_findings(info, cfg, "plan")
        return f"{finding.what} | {finding.why}"

    hopper = answer("sm_90", "Qwen/Qwen2.5-1.5B-Instruct")
    assert "on by default for Qwen/Qwen2.5-1.5B-Instruct" in hopper and "kernel_tuning joins it" in hopper
    tiny = str(save_tiny_model(tmp_path / "tiny", "qwen2"))   # hidden size below the bar
    assert "stays off" in answer("sm_90", tiny) and "< 896" in answer("sm_90", tiny)
    assert "sm_86 has no fp8 tensor cores" in answer("sm_86", "Qwen/Qwen2.5-7B")
    mi300 = answer("gfx942", "Qwen/Qwen2.5-7B", backend="rocm")   # off by default there, e4m3fnuz when asked for
    assert "off by default on ROCm" in mi300 and "e4m3fnuz" in mi300 and "240" in mi300
    assert "OCP e4m3" in answer("gfx950", "Qwen/Qwen2.5-7B", backend="rocm")
    assert "no fp8 matrix cores" in answer("gfx90a", "Qwen/Qwen2.5-7B", backend="rocm")
    assert answer("sm_90", "Qwen/Qwen2.5-7B", fp8_base=False).startswith("fp8_base: false is asked for")
    assert "precision fp16" in answer("sm_90", "Qwen/Qwen2.5-7B", fp16=True, bf16=False)
    # a 4-bit base (QLoRA) multiplies in fp8 too, unpacked at each matmul; an 8-bit one keeps LLM.int8's own matmuls
    four_bit = answer("sm_90", "Qwen/Qwen2.5-7B", quantization_bit=4)
    assert "on by default" in four_bit and "unpacked straight into fp8" in four_bit and "copies" not in four_bit
    assert "stays off" in answer("sm_90", "Qwen/Qwen2.5-7B", quantization_bit=8)
    assert "LLM.int8" in answer("sm_90", "Qwen/Qwen2.5-7B", quantization_bit=8)
