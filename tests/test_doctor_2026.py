"""doctor, round 3 (issue 31): the ROCm problems users report most in 2026, each from a real capture in tests/captures/
(its `# source:` line names the thread) where one exists, else a simulated machine (test_doctor's `simulate`: torch's
device queries patched, /sys /proc /dev under tmp_path; installed packages as dist-info metadata), labelled so.
Every problem has a test that finds it, with its fix for that machine, and one where a machine without it gets no
alarm. Problem 1's pip replays and `make setup` are in test_doctor_install.py.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SMI_FIXTURES, needs_shared
from test_doctor import MI300X, find, live, machine, props, simulate
from test_doctor_hardware import _apu_sysfs

from steadytune.cli import main as cli_main
from steadytune.distributed.watchdog import HangWatchdog
from steadytune.doctor.attention import attention_bench_findings, run_attention_bench
from steadytune.doctor.devices import Card, igpu_shadow, mixed_arch_findings, visibility_findings
from steadytune.doctor.live import run_live_checks
from steadytune.doctor.multi_gpu import check_allreduce, rccl_findings, run_allreduce_check
from steadytune.doctor.offline import run_offline_checks
from steadytune.doctor.packages import bitsandbytes_findings, parse_package_text, torch_replacement_findings
from steadytune.hardware.gpu_facts import ARCHS, arch_info, bnb_library_names, install_lines, kernel_bugs_for
from steadytune.hardware.rccl import rccl_hang_hint, rccl_hint_for
from steadytune.hardware.smi_parsers import parse_text
from steadytune.hardware.torch_builds import torch_build, torch_version_of

CAPTURES = Path(__file__).parent / "captures"
GIB = 2**30


def offline(tmp_path: Path, *names: str, extra: dict[str, str] | None = None):
    """doctor --from a folder holding these captures (and extra files): -> findings."""
    folder = tmp_path / "saved"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(CAPTURES / name, folder / name)
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    return run_offline_checks(sorted(folder.iterdir()))


def installed(tmp_path: Path, monkeypatch, packages: dict[str, tuple[str, list[str], list[str]]]) -> Path:
    """Installed packages as pip leaves them (dist-info: METADATA with Requires-Dist, RECORD listing their files),
    without their code; first on sys.path, so they shadow this environment's own."""
    site = tmp_path / "site"
    for name, (version, requires, files) in packages.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                       + "".join(f"Requires-Dist: {r}\n" for r in requires))
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/METADATA"]))
    monkeypatch.syspath_prepend(str(site))
    return site


RX9070XT = props("AMD Radeon RX 9070 XT", "gfx1201", 16, major=12, minor=0)
RX7900 = props("Radeon RX 7900 XTX", "gfx1100", 24, major=11, minor=0)
RX6700 = props("AMD Radeon RX 6700 XT", "gfx1031", 12, major=10, minor=3)
MI355X = props("AMD Instinct MI355X", "gfx950:sramecc+:xnack-", 288)
WHEEL_2026 = ["gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151",
              "gfx1200", "gfx1201"]


# --- 1. pip replacing a ROCm torch (live and real-pip tests: test_doctor_install.py) ------------------------------

def test_1_pip_replacing_a_rocm_prerelease_is_read_from_its_log(tmp_path):
    """pypa/pip #12902: `pip install torch` in the rocm/pytorch image fetches PyPI's CUDA torch over 2.4.0.dev+rocm6.0."""
    _, findings = offline(tmp_path, "pip-install_torch_over_rocm-prerelease.txt")
    [error] = find(findings, "error", "packages", "torch 2.4.0", "is replacing the ROCm build torch 2.4.0.dev20240520+rocm6.0")
    assert "the command line (torch)" in error.why and "pre-release" in error.why and "CUDA build" in error.why
    assert "torch==2.4.0.dev20240520+rocm6.0" in error.fix and "whl/nightly/rocm6.0" in error.fix
    assert "PIP_CONSTRAINT" in error.fix


def test_1_uv_replacing_a_therock_torch_is_read_from_its_output(tmp_path):
    """unslothai/unsloth #7275: the installer's unsloth step turns torch 2.11.0+rocm7.13.0 into PyPI's 2.10.0."""
    _, findings = offline(tmp_path, "uv-install_unsloth_replaces_rocm-torch.txt")
    [error] = find(findings, "error", "packages", "torch 2.10.0", "replaced the ROCm build torch 2.11.0+rocm7.13.0")
    assert "does not name the requirement" in error.why and "steadytune doctor" in error.why   # uv says not who
    assert "torch==2.11.0+rocm7.13.0" in error.fix


def test_1_a_live_amd_machine_with_a_replaced_torch_names_the_package(monkeypatch, tmp_path):
    """Simulated: an RX 7900 XTX machine whose torch is PyPI's 2.10.0 beside torchvision 0.26.0+rocm7.13.0."""
    installed(tmp_path, monkeypatch, {"torch": ("2.10.0", [], []), "torchvision": ("0.26.0+rocm7.13.0", ["torch"], []),
                                      "unsloth": ("2026.7.4", ["torch<2.11.0,>=2.4.0"], [])})
    simulate(monkeypatch, gpus=[], hip=None, cuda="12.8")
    findings = live(monkeypatch, tmp_path, gfx_nodes=[110000])
    assert find(findings, "error", "torch-build", "CUDA 12.8 build", "AMD GPUs")          # round 1's check
    [error] = find(findings, "error", "packages", "replaced the ROCm build torch 2.11.0+rocm7.13.0")
    assert "unsloth 2026.7.4 requires torch<2.11.0,>=2.4.0" in error.why and "upgrade unsloth" in error.fix


def test_1_no_alarm_for_a_rocm_environment_or_a_plain_cpu_one(tmp_path):
    clean = parse_package_text("torch==2.9.1+rocm6.4\ntorchvision==0.24.1+rocm6.4\npytorch-triton-rocm==3.5.1\n", "freeze")
    assert torch_replacement_findings(clean) == []
    cpu = parse_package_text("torch==2.13.0+cpu\nnumpy==2.3.0\n", "freeze")
    assert torch_replacement_findings(cpu) == []
    _, findings = offline(tmp_path, "collect_env_rx5700xt_gfx1010_rocm6.3.txt")
    assert not [f for f in findings if f.check == "packages"]
    assert torch_build("2.9.0+rocmsdk20251116") == "rocm" and torch_version_of("torchvision", "0.24.0+rocm6.4") == "2.9.0+rocm6.4"


# --- 2. bitsandbytes gates per arch, NaNs before 0.50.0, the missing libbitsandbytes_rocmNN.so -------------------

def test_2_a_missing_rocm84_library_from_the_import_error(tmp_path):
    """bitsandbytes #2014: bnb 0.49.2 on ROCm 7.14 looks for libbitsandbytes_rocm84.so."""
    _, findings = offline(tmp_path, "bitsandbytes_rocm84-not-found.txt")
    [error] = find(findings, "error", "optional", "libbitsandbytes_rocm84.so")
    assert "7.14" in error.why and "major*10+minor" in error.why
    assert "ls /opt/app-root/lib64/python3.12/site-packages/bitsandbytes/libbitsandbytes_rocm*.so" in error.fix
    assert "BNB_ROCM_VERSION" in error.fix
    # the capture names its GPU (an MI350P, gfx950) only in words: doctor reads it there, and bnb 0.49.2 has no 4-bit
    # kernels for gfx950 at all (they start with 0.50.0), which is the sharper warning than the NaNs of older RDNA/CDNA
    assert find(findings, "warning", "optional", "bitsandbytes 0.49.2", "no 4-bit kernels for gfx950")
    assert bnb_library_names("7.14.60850") == ("libbitsandbytes_rocm84.so", "libbitsandbytes_rocm714.so")


def test_2_live_library_name_and_arch_gates(monkeypatch, tmp_path):
    """Simulated: bnb 0.49.2 shipping libbitsandbytes_rocm72.so, under a TheRock torch whose HIP is 7.14."""
    installed(tmp_path / "a", monkeypatch, {"bitsandbytes": ("0.49.2", ["torch"], ["bitsandbytes/libbitsandbytes_rocm72.so",
                                                                                   "bitsandbytes/__init__.py"])})
    simulate(monkeypatch, gpus=[RX9070XT], hip="7.14.60850", arch_list=WHEEL_2026)
    findings = live(monkeypatch, tmp_path / "a")
    [error] = find(findings, "error", "optional", "libbitsandbytes_rocm84.so")
    assert error.fix.startswith("export BNB_ROCM_VERSION=72") and "rocm72" in error.why
    assert find(findings, "warning", "optional", "0.49.2", "NaN")


@pytest.mark.parametrize("arch, version, expected", [
    ("gfx942", "0.49.1", "ships no 4-bit kernels for gfx942 (CDNA3)"),   # CDNA from 0.49.2
    ("gfx1100", "0.48.0", "ships no 4-bit kernels for gfx1100 (RDNA3)"),  # RDNA from 0.49.0
    ("gfx1100", "0.49.1", "trains NaN"),                                   # kernels, but NaNs before 0.50.0
    ("gfx1030", "0.49.2", "ships no 4-bit kernels for gfx1030"),           # RDNA2: the 0.50 ROCm 7.14 wheel
    ("gfx906", "0.50.0", "ships no kernels for gfx906"),                   # no wheel: build it
])
def test_2_bitsandbytes_gates_per_architecture(arch, version, expected):
    env = parse_package_text(f"bitsandbytes=={version}\n", "freeze")
    [finding] = bitsandbytes_findings(env, arch, "7.2.53211", rocm=True)
    assert expected in finding.what and finding.severity == "warning"


def test_2_no_alarm_for_a_current_bitsandbytes_or_off_rocm(monkeypatch, tmp_path):
    env = parse_package_text("bitsandbytes==0.50.0\n", "freeze")
    env.bnb_files = ["libbitsandbytes_rocm72.so"]
    assert bitsandbytes_findings(env, "gfx1201", "7.2.53211", rocm=True) == []
    assert bitsandbytes_findings(parse_package_text("bitsandbytes==0.43.0\n", "f"), "sm_90", None, rocm=False) == []
    assert all(row.bnb_4bit or row.gfx in ("gfx803", "gfx900", "gfx902", "gfx90c", "gfx906", "gfx1010", "gfx1012",
                                           "gfx1033") for row in ARCHS)


# --- 3. visibility masks that stack into nothing, an iGPU first, mixed cards ----------------------------------------

def test_3_stacked_masks_from_unsloth_studio_select_no_gpu(tmp_path):
    """unslothai/unsloth #6118's variables (composed from the report) on ROCm/ROCm #5812's two RX 9070 XT."""
    _, findings = offline(tmp_path, "env_unsloth-studio_stacked-visibility.txt", "amd-smi_default_2x_rx9070xt.txt")
    [error] = find(findings, "error", "visibility", "ROCR_VISIBLE_DEVICES='1' then HIP_VISIBLE_DEVICES='1' selects no GPU")
    assert error.fix.startswith("unset HIP_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES; export ROCR_VISIBLE_DEVICES=1")
    assert find(findings, "warning", "hsa-override", "HSA_OVERRIDE_GFX_VERSION=12.0.1", "gfx1201", "unset")


def test_3_stacked_masks_live_and_one_mask_is_fine(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[], arch_list=WHEEL_2026)          # the masks leave torch nothing
    findings = live(monkeypatch, tmp_path / "a", env={"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1"},
                    gfx_nodes=[120001, 120001])
    assert find(findings, "error", "visibility", "selects no GPU")
    simulate(monkeypatch, gpus=[RX9070XT], arch_list=WHEEL_2026)
    findings = live(monkeypatch, tmp_path / "b", env={"ROCR_VISIBLE_DEVICES": "1"}, gfx_nodes=[120001, 120001])
    assert not [f for f in findings if f.check == "visibility" and f.severity != "info"]


def test_3_mixed_cards_get_a_per_node_override_from_the_excerpt(tmp_path):
    """tkamucheka.github.io: an RX 7700 XT (gfx1101) and an RX 6600 (gfx1032); rocm-smi's Node column."""
    _, findings = offline(tmp_path, "rocm-smi_concise_rx7700xt_rx6600_mixed-excerpt.txt")
    [mixed] = find(findings, "warning", "hsa-override", "mixed cards", "GPU 1 (gfx1032) needs 10.3.0")
    assert mixed.fix.startswith("export HSA_OVERRIDE_GFX_VERSION_2=10.3.0")
    assert "ROCR_VISIBLE_DEVICES=0" in mixed.fix
    # the wheel finding of the RX 6600 gives the per-node form too, never the plain one that breaks the 7700 XT
    assert not [f for f in findings if "export HSA_OVERRIDE_GFX_VERSION=" in f.fix]


def test_3_mixed_cards_live_a_plain_override_is_an_error_with_the_per_node_fix(monkeypatch, tmp_path):
    """Simulated: RX 7900 XTX (gfx1100, KFD node 1) + RX 6700 XT (gfx1031, node 2), the issue's example."""
    simulate(monkeypatch, gpus=[RX7900, RX6700], arch_list=WHEEL_2026)
    findings = live(monkeypatch, tmp_path / "a", env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, gfx_nodes=[110000, 100301])
    [error] = find(findings, "error", "hsa-override", "applies to every GPU", "GPU 0 (gfx1100)")
    assert "unset HSA_OVERRIDE_GFX_VERSION; export HSA_OVERRIDE_GFX_VERSION_2=10.3.0" in error.fix
    assert not find(findings, "error", "hsa-override", "another family")       # one finding, not a contradicting one
    [coverage] = find(findings, "error", "arch-coverage", "gfx1031")
    assert coverage.fix.endswith("export HSA_OVERRIDE_GFX_VERSION_2=10.3.0")
    findings = live(monkeypatch, tmp_path / "b", env={"HSA_OVERRIDE_GFX_VERSION_2": "10.3.0"}, gfx_nodes=[110000, 100301])
    assert find(findings, "info", "hsa-override", "per-node overrides set")
    assert not [f for f in findings if f.check == "hsa-override" and f.severity == "error"]


def test_3_no_mixed_alarm_for_matching_cards():
    twins = [Card(0, "gfx1201", 1), Card(1, "gfx1201", 2)]
    assert mixed_arch_findings({}, twins, WHEEL_2026) == []
    both_native = [Card(0, "gfx1100", 1), Card(1, "gfx1201", 2)]
    assert mixed_arch_findings({}, both_native, WHEEL_2026) == []
    assert visibility_findings({}, "rocm", twins) == []


def test_3_an_igpu_first_that_the_wheel_lacks_gets_the_dgpus_uuid():
    """Simulated (the shape of unslothai/unsloth #7669): a Raphael iGPU (gfx1036) enumerated before an RX 7700 XT."""
    cards = [Card(0, "gfx1036", 1, "GPU-XX", integrated=True, name="AMD Radeon Graphics"),
             Card(1, "gfx1101", 2, "GPU-7a1c43b1f2e8a9d0")]
    what, why, fix = igpu_shadow(cards, WHEEL_2026)
    assert "GPU 0 is an integrated GPU" in what and "device kernel image is invalid" in why
    assert fix.startswith("export ROCR_VISIBLE_DEVICES=GPU-7a1c43b1f2e8a9d0")
    assert igpu_shadow(cards[1:], WHEEL_2026) is None


# --- 4. APUs: the TTM default (15.5 / 62 of 128 GB), the OS's headroom ----------------------------------------------

def test_4_strix_halo_at_the_ttm_default_from_a_memory_report(tmp_path):
    """unslothai/unsloth PR #7960's review: 128 GB Strix Halo, torch 62.47 GiB, GTT 128 GiB, RAM 124.92 GiB."""
    gpus, findings = offline(tmp_path, "memory-report_strix-halo_ttm-default.txt")
    assert [(g.arch, g.integrated) for g in gpus] == [("gfx1151", True)]
    [ttm] = find(findings, "warning", "unified-memory", "torch can allocate 62.47 GiB", "half of the 124.92 GiB")
    assert "ttm.pages_limit=28573696" in ttm.fix and "amdttm.pages_limit=28573696" in ttm.fix   # 109 GiB in 4 KiB pages
    assert find(findings, "info", "on-that-machine", "gradient checkpointing", "on 62.47 GiB")   # what HIP allocates


def live_strix_halo(monkeypatch, tmp_path, gtt_gib: int, pages_limit: int):
    """The live checks on a simulated Strix Halo (125 GiB of RAM) whose GTT is gtt_gib, set by ttm.pages_limit."""
    halo = SimpleNamespace(**vars(props("AMD Radeon Graphics", "gfx1151", gtt_gib, integrated=True, major=11, minor=5)),
                           pci_domain_id=0, pci_bus_id=0xC5, pci_device_id=0)
    simulate(monkeypatch, gpus=[halo], arch_list=WHEEL_2026)
    paths, rocm = machine(tmp_path, gfx_nodes=[110501], cmdline=f"ro ttm.pages_limit={pages_limit}")
    _apu_sysfs(paths["sys_root"], "0000:c5:00.0", 512 << 20, gtt_gib << 30)
    (paths["proc_root"] / "meminfo").write_text("MemTotal:       131171464 kB\n")
    return run_live_checks(env={"ROCM_PATH": str(rocm)}, **paths)


def test_4_live_gtt_larger_than_the_ram_leaves_the_os_nothing(monkeypatch, tmp_path):
    """Simulated: a Strix Halo whose GTT was raised to all 128 GiB of a 125 GiB-RAM machine."""
    findings = live_strix_halo(monkeypatch, tmp_path, 128, 33554432)
    [headroom] = find(findings, "warning", "unified-memory", "may map 128 GiB of 125.1 GiB RAM", "leaving the OS")
    assert "ttm.pages_limit=28573696" in headroom.fix                       # 109 GiB: RAM less max(8, RAM/8)
    assert find(findings, "info", "memory", "gradient checkpointing", "on 109 GiB")


def test_4_no_alarm_for_a_sized_gtt(monkeypatch, tmp_path):
    findings = live_strix_halo(monkeypatch, tmp_path, 100, 26214400)
    assert not find(findings, "warning", "unified-memory")


# --- 5. arch coverage: RDNA1 without a ROCm torch, gfx115x/120x wheels, the grouped_mm null kernel -------------------

def test_5_rdna1_with_a_pytorch_org_wheel_from_collect_env(tmp_path):
    """pytorch #145670: an RX 5700 XT (gfx1010) with torch 2.7.0.dev20250123+rocm6.3."""
    gpus, findings = offline(tmp_path, "collect_env_rx5700xt_gfx1010_rocm6.3.txt")
    assert [(g.name, g.arch) for g in gpus] == [("AMD Radeon RX 5700 XT", "gfx1010")]
    [warning] = find(findings, "warning", "arch", "that machine's torch 2.7.0.dev20250123+rocm6.3 has no working code for gfx1010")
    assert 'torch[device-gfx1010]' in warning.fix
    assert find(findings, "info", "on-that-machine", "memory is unknown")          # collect_env shows no memory


@pytest.mark.parametrize("arch", ["gfx1150", "gfx1151", "gfx1200", "gfx1201"])
def test_5_the_newer_consumer_archs_have_a_wheel_line(arch):
    assert any("download.pytorch.org/whl/rocm7.2" in line for _, line in install_lines(arch))
    assert arch_info(arch).bnb_4bit == "0.49.0"


def test_5_grouped_mm_null_kernel_on_rdna4_in_the_rocm712_wheel(monkeypatch, tmp_path):
    """Simulated: an RX 9070 XT with torch 2.10.0+rocm7.12.0 (ROCm/TheRock #5284); the fixed 7.13 wheel gets nothing."""
    simulate(monkeypatch, gpus=[RX9070XT], arch_list=WHEEL_2026, torch_version="2.10.0+rocm7.12.0")
    [warning] = find(live(monkeypatch, tmp_path / "a"), "warning", "arch", "torch._grouped_mm crashes on gfx1201")
    assert "2.11.0+rocm7.13.0" in warning.fix and "TheRock #5284" in warning.why
    simulate(monkeypatch, gpus=[RX9070XT], arch_list=WHEEL_2026, torch_version="2.11.0+rocm7.13.0")
    assert not find(live(monkeypatch, tmp_path / "b"), "warning", "arch", "_grouped_mm")
    assert kernel_bugs_for("gfx1100", "2.10.0+rocm7.12.0") == []


# --- 6. AOTriton: measure, or warn ---------------------------------------------------------------------------------

def test_6_the_attention_bench_runs_for_real_and_raises_no_alarm_on_a_cpu():
    results = run_attention_bench("cpu", "float32", dict(os.environ), (1, 2, 64, 32), iters=2)
    assert results["math"]["ms"] > 0 and results["math"]["rel_err"] == 0.0
    findings = attention_bench_findings(results, None, None, "float32", None, {}, (1, 2, 64, 32))
    assert [f.severity for f in findings] == ["info"] and "math" in findings[0].what


def test_6_the_switch_is_recommended_only_when_measured_faster():
    """Simulated measurements of an RX 7800 XT (gfx1101, experimental in AOTriton): math only without the switch."""
    plain = {"flash": {"error": "RuntimeError: No available kernel"}, "mem-efficient": {"error": "No available kernel"},
             "math": {"ms": 9.8, "rel_err": 0.0}}
    faster = {"flash": {"ms": 2.1, "rel_err": 0.004}, "mem-efficient": {"ms": 2.9, "rel_err": 0.004},
              "math": {"ms": 9.8, "rel_err": 0.0}}
    [_, pays] = attention_bench_findings(plain, faster, "gfx1101", "bfloat16", (7, 2), {})
    assert pays.severity == "warning" and "makes attention faster here: flash 2.1 ms" in pays.what
    assert pays.fix.startswith("export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1")
    slower = {**faster, "flash": {"ms": 11.0, "rel_err": 0.004}, "mem-efficient": {"ms": 12.0, "rel_err": 0.004}}
    [_, keep] = attention_bench_findings(plain, slower, "gfx1101", "bfloat16", (7, 2), {})
    assert keep.severity == "info" and "does not pay" in keep.what
    wrong = {**faster, "flash": {"ms": 2.1, "rel_err": 0.4}}
    assert find(attention_bench_findings(plain, wrong, "gfx1101", "bfloat16", (7, 2), {}), "warning",
                "attention-bench", "disagree with the math kernel", "flash")


def test_6_the_experimental_arch_says_measure_not_set(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[props("AMD Radeon RX 7800 XT", "gfx1101", 16, major=11, minor=0)], arch_list=WHEEL_2026)
    [warning] = find(live(monkeypatch, tmp_path), "warning", "arch", "gfx1101", "experimental in AOTriton")
    assert warning.fix.startswith("measure it here: steadytune doctor --attention-bench")


def test_6_gfx950_with_aotriton_013_warns_and_older_rocm_does_not(monkeypatch, tmp_path):
    """Simulated MI355X with a ROCm 10 (TheRock) torch: ROCm/TheRock #7696's 9-25% training regression."""
    simulate(monkeypatch, gpus=[MI355X], arch_list=WHEEL_2026, torch_version="2.12.0+rocm10.0.0")
    [warning] = find(live(monkeypatch, tmp_path / "a"), "warning", "arch", "AOTriton 0.13b", "gfx950")
    assert "9-25%" in warning.why and "--attention-bench" in warning.fix
    simulate(monkeypatch, gpus=[MI355X], arch_list=WHEEL_2026, torch_version="2.11.0+rocm7.2")
    assert not find(live(monkeypatch, tmp_path / "b"), "warning", "arch", "AOTriton 0.13b")
    measured = {"flash": {"ms": 5.0, "rel_err": 0.003}, "mem-efficient": {"ms": 4.0, "rel_err": 0.003},
                "math": {"ms": 20.0, "rel_err": 0.0}}
    assert find(attention_bench_findings(measured, None, "gfx950", "bfloat16", (10, 0), {}), "warning",
                "attention-bench", "flash attention (5 ms) is slower than mem-efficient")


# --- 7. RCCL deadlocks on RDNA --------------------------------------------------------------------------------------

def test_7_four_r9700_on_rocm_711_get_the_p2p_advice_not_the_rccl227_alarm(tmp_path):
    """ROCm/rccl-tests #162: four Radeon AI PRO R9700 on ROCm 7.1.1 (whose RCCL predates the gfx1201 deadlock)."""
    gpus, findings = offline(tmp_path, "amd-smi_default_4x_r9700_cut.txt")
    assert [g.arch for g in gpus] == ["gfx1201"] * 3
    [p2p] = find(findings, "info", "multi-gpu", "3 consumer RDNA GPUs")
    assert "export NCCL_P2P_DISABLE=1" in p2p.fix and "LLaMA-Factory #6271" in p2p.why
    assert not find(findings, "warning", "multi-gpu", "NCCL_PROTO")


def test_7_rdna4_with_rccl_227_gets_nccl_proto_simple():
    [deadlock, _] = rccl_findings(["gfx1201", "gfx1201"], (2, 27, 7), None, {})
    assert deadlock.severity == "warning" and "RCCL 2.27.7" in deadlock.what and "NCCL_PROTO=Simple" in deadlock.fix
    assert "vllm-project/vllm #40980" in deadlock.why
    assert not [f for f in rccl_findings(["gfx1201", "gfx1201"], (2, 28, 3), None, {}) if f.severity == "warning"]
    assert rccl_findings(["gfx942"] * 8, (2, 27, 7), None, {}) == []                     # no alarm on MI300X
    set_already = rccl_findings(["gfx1201", "gfx1201"], (2, 27, 7), None, {"NCCL_PROTO": "Simple", "NCCL_P2P_DISABLE": "1"})
    assert [f.severity for f in set_already] == ["info"]


def test_7_no_rdna_advice_on_instinct_cards(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X, MI300X])
    findings = live(monkeypatch, tmp_path, cmdline="BOOT_IMAGE=/vmlinuz iommu=pt")
    assert find(findings, "info", "multi-gpu", "2 GPUs visible")
    assert not find(findings, "info", "multi-gpu", "RDNA") and not find(findings, "warning", "multi-gpu")


def test_7_the_all_reduce_retries_with_the_rdna4_settings():
    """Real gloo all-reduces; the simulated deadlock: without NCCL_PROTO=Simple the attempt's time limit is too short."""
    def deadlocks_without_simple(world, backend, timeout, env):
        return run_allreduce_check(world, backend="gloo", env=env,
                                   timeout=timeout if env.get("NCCL_PROTO") == "Simple" else 0.2)
    first, verdict = check_allreduce(2, env=dict(os.environ), attempt=deadlocks_without_simple,
                                     settings={"NCCL_PROTO": "Simple"})
    assert first.severity == "error" and verdict.severity == "warning"
    assert "works with NCCL_PROTO=Simple" in verdict.what and verdict.fix.startswith("to train now: export NCCL_PROTO=Simple")


def test_7_the_watchdog_names_the_settings(tmp_path):
    watchdog = HangWatchdog(tmp_path, rank=0, world_size=2, timeout=60)
    watchdog.rccl_hint = rccl_hint_for(["gfx1201", "gfx1201"], (2, 27, 7), env={})
    beat = SimpleNamespace(step=3, phase="step")
    message = watchdog._message(beat, 61.0, 60.0, True, "all_reduce", {1: {"waiting": True, "where": "x", "step": 3}}, "")
    assert "every rank waits in a collective" in message
    assert "NCCL_PROTO=Simple NCCL_P2P_DISABLE=1" in message and "vllm-project/vllm #40980" in message
    assert rccl_hang_hint(2) == ""                                   # this CPU machine: nothing to name
    assert rccl_hint_for(["gfx942"] * 2, (2, 27, 7), env={}) == ""


# --- 8. excerpts: a table cut inside a card's block still lists the card ---------------------------------------------

@pytest.mark.parametrize("name", ["amd-smi_default_2x_rx9070xt.txt", "amd-smi_default_4x_r9700_cut.txt",
                                  "amd-smi_default_mi325x_partial.txt", "amd-smi_default_strix-halo_gfx1151.txt"])
def test_8_every_card_a_cut_amd_smi_table_names_is_listed(name):
    text = (CAPTURES / name).read_text()
    lines = text.splitlines()
    for cut in range(len(lines) + 1):
        for width in (None, 30):          # at a line end, and inside the line
            part = "\n".join(lines[:cut]) + ("\n" + lines[cut][:width] if width and cut < len(lines) else "")
            named = [l for l in part.splitlines() if l.lstrip().startswith("| 0000:")]
            gpus = [g for r in parse_text(part, name) if r.tool == "amd-smi" for g in r.gpus]
            assert len(gpus) == len(named), (name, cut, width)
            for g in gpus:
                assert g.memory_gib is not None or g.cut      # unknown is marked, never guessed


def test_8_the_cut_card_is_in_the_table_with_unknowns_marked(tmp_path, capsys):
    lines = (CAPTURES / "amd-smi_default_2x_rx9070xt.txt").read_text().splitlines()
    cut = "\n".join(lines[:next(i for i, l in enumerate(lines) if "0000:07:00.0" in l) + 1])
    (tmp_path / "amd-smi.txt").write_text(cut)
    assert cli_main(["doctor", "--from", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1  AMD Radeon RX 9070 XT  gfx1201  ?" in out
    assert "GPU 1: the saved table ends inside this card's block" in out


def test_8_elided_columns_and_no_alarm_for_whole_outputs(tmp_path):
    _, findings = offline(tmp_path, "rocm-smi_concise_rx7700xt_rx6600_mixed-excerpt.txt")
    assert len(find(findings, "warning", "saved-outputs", "columns elided")) == 2
    _, findings = offline(tmp_path / "whole", "amd-smi_default_2x_rx9070xt.txt")
    assert not find(findings, "warning", "saved-outputs", "ends inside")


@needs_shared
@pytest.mark.parametrize("name, marker", [("rocminfo_rx7900xtx_gfx1100.txt", "Name:                    gfx1100"),
                                          ("rocm-smi_json_rx7800xt_gfx11001.json.txt", '"card0"')])
def test_8_a_rocminfo_or_json_cut_after_the_card_starts_keeps_it(name, marker):
    path = SMI_FIXTURES / name if (SMI_FIXTURES / name).exists() else SMI_FIXTURES / name.replace("gfx11001", "gfx1101")
    lines = [l for l in path.read_text().splitlines() if not l.startswith("# ")]
    start = next(i for i, l in enumerate(lines) if marker in l)
    for cut in range(start + 1, min(start + 25, len(lines))):
        gpus = [g for r in parse_text("\n".join(lines[:cut]), name) for g in r.gpus]
        assert gpus, (name, cut)


def test_all_new_captures_read_without_crashing_and_quickly(tmp_path):
    names = sorted(p.name for p in CAPTURES.glob("*.txt"))
    start = time.monotonic()
    for name in names:
        _, findings = offline(tmp_path / name, name)
        assert not [f for f in findings if f.what.startswith("could not read")], name
    assert time.monotonic() - start < 10
    assert sys.modules.get("steadytune.doctor.packages") is not None


def test_2_an_editable_bitsandbytes_that_lists_no_libraries_is_not_called_broken():
    env = parse_package_text("bitsandbytes==0.50.1.dev0\n", "freeze")
    env.bnb_files = []                     # a source/editable install: its RECORD names no libbitsandbytes_rocm*.so
    assert bitsandbytes_findings(env, "gfx1100", "7.14.60850", rocm=True) == []


def test_doctor_config_refuses_what_train_refuses_before_loading(tmp_path):
    """Hostile round 5 (issue 67): `doctor --config` said nothing of a cp_size or sequence_tiling train refuses for a
    Qwen3.5, passed a RoPE factor of 0 (exit 0), and ended in a traceback for a short layer_types list."""
    import json

    from steadytune.config import load_config
    from steadytune.doctor.plan import train_plan_findings
    from steadytune.hardware.backend import HardwareInfo
    from steadytune.model.tiny import save_tiny_model

    info = HardwareInfo(backend="cpu", torch_version="2")
    base = save_tiny_model(tmp_path / "qwen3_5", "qwen3_5")

    def errors(**keys):
        cfg = load_config(None, {"model_name_or_path": str(base), **keys})
        return [f.what for f in train_plan_findings(info, "config", cfg, offline=False) if f.severity == "error"]

    assert errors() == []
    assert errors(cp_size=2) == [errors(cp_size=2)[0]] and "cp_size: 2 splits each row over processes, but its 1 " \
        "gated DeltaNet" in errors(cp_size=2)[0]
    assert "sequence_tiling: true, but model type qwen3_5_text" in errors(sequence_tiling=True)[0]
    config = json.loads((base / "config.json").read_text())
    for field, value, said in (("layer_types", ["linear_attention"], "must be equal to the number of `layer_types`"),
                               ("rope_parameters", {"rope_type": "linear", "factor": 0}, "factor is 0")):
        (base / "config.json").write_text(json.dumps({**config, field: value}))
        found = errors()
        assert len(found) == 1 and found[0].startswith(f"model_name_or_path: {base}/config.json: ") and said in found[0]
