"""doctor for the AMD machines people own now, and the hardware around the GPU: the product / architecture /
wheel tables (gpu_facts.py), amd-smi's default view, APU unified memory, Resizable BAR, containers, the
all-reduce that retries without P2P, and offline mode reporting train's choices for the saved machine.

Real outputs from public threads are in tests/captures/ (each starts with a `# source:` line); simulated
machines are fake /sys, /proc, /dev trees under tmp_path, with torch's device queries patched (test_doctor's
`simulate`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_doctor import MI300X, find, machine, props, simulate

from steadytune.cli import main as cli_main
from steadytune.config import load_config
from steadytune.doctor.container import check_container
from steadytune.doctor.live import run_live_checks
from steadytune.doctor.memory import parse_kernel_log
from steadytune.doctor.multi_gpu import check_allreduce, run_allreduce_check
from steadytune.doctor.offline import SavedOutputs, diagnose_gpus, machine_info, run_offline_checks
from steadytune.doctor.pci import (
    Bar,
    PciGpu,
    parse_dmesg_bars,
    parse_lspci,
    read_sysfs_gpus,
    rebar_findings,
    rebar_state,
)
from steadytune.doctor.probe import collect_probe
from steadytune.hardware.backend import detect
from steadytune.hardware.gpu_facts import (
    ARCHS,
    PRODUCTS,
    WHEELS,
    arch_info,
    install_lines,
    lookup_product,
    override_for_arch,
)
from steadytune.hardware.smi_parsers import GpuRecord, parse_text

CAPTURES = Path(__file__).parent / "captures"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


# --- the tables -------------------------------------------------------------------------------------------

def test_every_capture_and_table_row_names_its_source():
    for path in CAPTURES.glob("*.txt"):
        assert path.read_text().startswith("# source: https://"), path.name
    assert all(row.source for row in PRODUCTS) and all(row.source for row in ARCHS)
    assert all(row.source and row.override.source for row in ARCHS)
    assert all(w.source for w in WHEELS)


@pytest.mark.parametrize("name, arch, integrated", [
    ("AMD Radeon RX 9070 XT", "gfx1201", False), ("Radeon RX 9070 GRE", "gfx1201", False),
    ("AMD Radeon RX 9060 XT", "gfx1200", False), ("Radeon RX 7900 XTX", "gfx1100", False),
    ("AMD Radeon RX 6700 XT", "gfx1031", False), ("Navi 23 [Radeon RX 6650 XT / 6700S]", "gfx1032", False),
    ("AMD Radeon AI PRO R9700", "gfx1201", False), ("AMD Radeon PRO W7900 Dual Slot", "gfx1100", False),
    ("AMD Radeon PRO W7700", "gfx1101", False), ("Radeon PRO V710", "gfx1101", False),
    ("AMD Instinct MI325X", "gfx942", False), ("AMD Instinct MI355X", "gfx950", False),
    ("AMD RYZEN AI MAX+ 395 w/ Radeon 8060S", "gfx1151", True), ("Radeon 8050S Graphics", "gfx1151", True),
    ("AMD Ryzen AI 9 HX 370 w/ Radeon 890M", "gfx1150", True), ("AMD Radeon 860M", "gfx1152", True),
    ("AMD Radeon 780M", "gfx1103", True)])
def test_product_names_map_to_their_llvm_target(name, arch, integrated):
    row = lookup_product(name)
    assert (row.arch, row.integrated) == (arch, integrated)


def test_the_generic_apu_name_names_no_product_but_a_device_id_does():
    assert lookup_product("AMD Radeon Graphics") is None
    assert lookup_product("AMD Radeon Graphics", device_id=0x1586).arch == "gfx1151"   # Strix Halo's PCI id


def test_wheel_table_gives_the_install_line_per_architecture():
    first = lambda arch: install_lines(arch)[0][1]
    assert first("gfx1151") == "pip install torch --index-url https://download.pytorch.org/whl/rocm7.2"
    assert first("gfx1201") == first("gfx942") == first("gfx1151")
    # gfx906 is listed in newer wheels, but their rocBLAS has no gfx906 kernels: rocm6.3 is the last that runs
    assert first("gfx906") == "pip install torch --index-url https://download.pytorch.org/whl/rocm6.3"
    assert first("gfx1103").startswith("pip install --pre torch --index-url https://download.pytorch.org/whl/nightly/")
    assert install_lines("gfx1152") == [("AMD per-arch staging nightlies (TheRock v2-staging)",
                                         "pip install --pre torch --index-url https://rocm.nightlies.amd.com/v2-staging/gfx1152/")]
    assert ("AMD multi-arch nightlies (TheRock)",
            'pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ "torch[device-gfx1151]"') in install_lines("gfx1151")
    assert install_lines("gfx803") == []


def test_override_verdicts_per_architecture():
    assert [override_for_arch(a) for a in ("gfx1031", "gfx1036", "gfx1101", "gfx1151")] == ["10.3.0", "10.3.0", "11.0.0", "11.0.0"]
    # traps: page faults on gfx1103, INVALID_ISA on gfx1150, wrong numbers on the Steam Deck's gfx1033
    assert [override_for_arch(a) for a in ("gfx1103", "gfx1150", "gfx1033", "gfx1152")] == [None] * 4
    assert {a: arch_info(a).override.verdict for a in ("gfx1103", "gfx1150", "gfx1033")} == dict.fromkeys(
        ("gfx1103", "gfx1150", "gfx1033"), "trap")


def test_newer_architectures_bf16_fp8_and_attention_paths():
    rows = {a: arch_info(a) for a in ("gfx1200", "gfx1201", "gfx1150", "gfx1151", "gfx942", "gfx950")}
    assert all(r.bf16 for r in rows.values())
    assert {a: r.fp8 for a, r in rows.items()} == {"gfx1200": "ocp", "gfx1201": "ocp", "gfx1150": None, "gfx1151": None,
                                                   "gfx942": "fnuz", "gfx950": "ocp"}
    assert {a: r.sdpa for a, r in rows.items()} == {"gfx1200": "experimental", "gfx1201": "native",
                                                    "gfx1150": "experimental", "gfx1151": "experimental",
                                                    "gfx942": "native", "gfx950": "native"}


def test_live_gfx1151_on_a_torch_without_it_gets_the_wheel_line(monkeypatch, tmp_path):
    halo = props("AMD Radeon 8060S", "gfx1151", 96, integrated=True, major=11, minor=5)
    rocm64 = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102",
              "gfx1200", "gfx1201"]                       # a torch 2.9 + ROCm 6.4 wheel's list
    simulate(monkeypatch, gpus=[halo], arch_list=rocm64)
    paths, rocm = machine(tmp_path, gfx_nodes=[110501])
    findings = run_live_checks(env={"ROCM_PATH": str(rocm)}, **paths)
    [error] = find(findings, "error", "arch-coverage", "gfx1151")
    assert error.fix.startswith("pip install torch --index-url https://download.pytorch.org/whl/rocm7.2")


def test_live_override_traps(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[props("AMD Radeon 780M", "gfx1100", 16, integrated=True, major=11, minor=0)])
    paths, rocm = machine(tmp_path / "a", gfx_nodes=[110003])          # the KFD says the card really is gfx1103
    findings = run_live_checks(env={"ROCM_PATH": str(rocm), "HSA_OVERRIDE_GFX_VERSION": "11.0.0"}, **paths)
    [trap] = find(findings, "error", "hsa-override", "11.0.0 on gfx1103 is a known trap", "page faults")
    assert "nightly" in trap.fix
    paths, rocm = machine(tmp_path / "b", gfx_nodes=[110500])          # gfx1150: same family, still INVALID_ISA
    findings = run_live_checks(env={"ROCM_PATH": str(rocm), "HSA_OVERRIDE_GFX_VERSION": "11.0.0"}, **paths)
    assert find(findings, "error", "hsa-override", "gfx1150 is a known trap", "INVALID_ISA")


# --- amd-smi's default view ----------------------------------------------------------------------------------

def _read(name):
    return [(g.index, g.name, g.arch, g.memory_gib, g.bus_id, g.hip_id, g.power_cap_w, g.integrated)
            for r in parse_text(capture(name), name) for g in r.gpus]


def test_amd_smi_default_view_two_rx9070xt():
    [result] = parse_text(capture("amd-smi_default_2x_rx9070xt.txt"), "x")
    assert result.tool == "amd-smi" and result.rocm_version == "7.1.1" and not result.problems
    assert _read("amd-smi_default_2x_rx9070xt.txt") == [
        (0, "AMD Radeon RX 9070 XT", "gfx1201", round(16304 / 1024, 2), "0000:04:00.0", 0, 304.0, False),
        (1, "AMD Radeon RX 9070 XT", "gfx1201", round(16304 / 1024, 2), "0000:07:00.0", 1, 304.0, False)]


def test_amd_smi_default_view_mi325x_without_its_header():
    [result] = parse_text(capture("amd-smi_default_mi325x_partial.txt"), "x")
    [gpu] = result.gpus
    assert (gpu.name, gpu.arch, gpu.partition, gpu.power_w, gpu.power_cap_w) == \
        ("AMD Instinct MI325X", "gfx942", "SPX/NPS1", 144.0, 1000.0)
    assert gpu.memory_gib == pytest.approx(262128 / 1024, abs=0.01)


def test_amd_smi_default_view_of_an_apu_says_only_amd_radeon_graphics():
    amd_smi, rocminfo = parse_text(capture("amd-smi_default_strix-halo_gfx1151.txt"), "x")
    [gpu] = amd_smi.gpus
    assert (gpu.name, gpu.arch, gpu.generic_name, gpu.memory_gib) == ("AMD Radeon Graphics", None, True, 96.0)
    [agent] = rocminfo.gpus        # rocminfo names the target and says APU
    assert (agent.arch, agent.integrated, agent.device_id) == ("gfx1151", True, 0x1586)


def test_offline_apu_with_a_generic_name_says_which_command_tells_the_arch(tmp_path):
    (tmp_path / "amd-smi.txt").write_text(capture("amd-smi_default_strix-halo_512mb-carveout.txt"))
    gpus, findings = run_offline_checks([tmp_path / "amd-smi.txt"])
    [warning] = find(findings, "warning", "saved-outputs", "architecture unknown", "AMD Radeon Graphics")
    assert "rocminfo" in warning.fix and "TARGET_GRAPHICS_VERSION" in warning.fix
    # the dmesg in the same paste gives the GTT the GPU really trains in: 128000 MB, not the 512 MB carve-out
    assert find(findings, "info", "unified-memory", "can use 125 GiB", "GTT 125 GiB", "carve-out 0.5 GiB")


# --- offline mode answers for the saved machine ---------------------------------------------------------------

def test_offline_reports_that_machines_policy_not_this_cpus(tmp_path):
    gpus, findings = run_offline_checks([CAPTURES / "amd-smi_default_2x_rx9070xt.txt"])
    plan = [f for f in findings if f.check == "on-that-machine"]
    assert find(plan, "info", "on-that-machine", "train would use bf16", "gfx1201 has native bf16")
    assert not [f for f in plan if "fp32" in f.what or f.why.startswith(("CPU", "no GPU"))]   # this machine is a CPU
    assert find(plan, "info", "on-that-machine", "would not pack", "rocm")      # train's default on ROCm
    assert find(plan, "info", "on-that-machine", "gradient checkpointing stays off", "15.92 GiB")
    assert find(findings, "info", "arch", "gfx1201", "fp8 (OCP")


def test_offline_plan_with_a_config_decides_checkpointing_for_its_model_and_memory(tmp_path):
    (tmp_path / "train.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct\n"
                                         "per_device_train_batch_size: 16\ncutoff_len: 2048\npacking: true\n")
    cfg = load_config(tmp_path / "train.yaml")
    _, findings = run_offline_checks([CAPTURES / "amd-smi_default_2x_rx9070xt.txt"], cfg=cfg)
    [on] = find(findings, "info", "on-that-machine", "gradient checkpointing on", "qwen2.5-1.5b shape", "32768 tokens")
    assert "turns on above 3538 tokens" in on.why
    assert find(findings, "info", "on-that-machine", "train would pack", "packing: true")
    _, findings = run_offline_checks([CAPTURES / "amd-smi_default_mi325x_partial.txt"], cfg=cfg)
    assert find(findings, "info", "on-that-machine", "gradient checkpointing off", "255.98 GiB")


def test_an_apus_gtt_is_trains_memory_budget():
    log = parse_kernel_log(capture("amd-smi_default_strix-halo_512mb-carveout.txt"))
    assert log.gtt_gib == {"0000:c2:00.0": 125.0} and log.vram_gib == {"0000:c2:00.0": 0.5}
    apu = GpuRecord(index=0, vendor="amd", name="AMD Radeon Graphics", arch="gfx1151", memory_gib=0.5,
                    integrated=True, bus_id="0000:c2:00.0")
    saved = SavedOutputs(kernel=log)
    info = machine_info([apu], saved)
    assert info.primary is info.gpus[0] and info.primary.budget_gib == 125.0   # the APU trains, in its GTT
    findings = diagnose_gpus([apu], saved=saved)
    assert find(findings, "info", "on-that-machine", "stays off", "on 125 GiB (GTT 125 GiB (carve-out 0.5 GiB))")
    assert find(findings, "warning", "arch", "gfx1151", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1")


def test_deprecated_gttsize_on_the_kernel_command_line():
    log = parse_kernel_log(capture("dmesg_strix-halo_gttsize-deprecated.txt"))
    assert log.gttsize_deprecated and "amdgpu.gttsize=65536" in log.cmdline and log.gtt_gib == {"0000:01:00.0": 64.0}
    apu = GpuRecord(index=0, vendor="amd", arch="gfx1151", memory_gib=64.0, integrated=True, bus_id="0000:01:00.0")
    [warning] = find(diagnose_gpus([apu], saved=SavedOutputs(kernel=log)), "warning", "unified-memory", "amdgpu.gttsize=65536")
    assert "ttm.pages_limit" in warning.fix


# --- Resizable BAR ---------------------------------------------------------------------------------------------

def test_lspci_captures_rebar_off_and_on():
    [rtx] = parse_lspci(capture("lspci-vv_rtx3090_rebar_off.txt"))
    assert rtx.bdf == "0000:d8:00.0" and rtx.vendor == "nvidia" and rebar_state(rtx)[0] == "off"
    [radeon] = parse_lspci(capture("lspci-vv_rx7900xtx_rebar_off_excerpt.txt"))   # the audio function is not a GPU
    assert radeon.resizable[0] == (256 << 20, 32 << 30) and rebar_state(radeon)[0] == "off"
    [arc] = parse_lspci(capture("lspci-vv_arc-b580_rebar_on.txt"))
    assert rebar_state(arc)[0] == "on" and max(b.size for b in arc.bars) == 32 << 30
    [dmesg] = parse_dmesg_bars(capture("dmesg_rx9060xt_bar.txt"))
    assert rebar_state(dmesg) == ("on", "BAR 8 GB, GPU memory 7.95 GB")
    [warning] = find(rebar_findings([radeon]), "warning", "pci", "Resizable BAR / Above 4G Decoding is off", "256 MB")
    assert "Above 4G Decoding" in warning.fix and "Re-Size BAR" in warning.fix and "CSM" in warning.fix


def test_rebar_partial_and_apus_skipped():
    partial = PciGpu("0000:03:00.0", "amd", "x", resizable={0: (1 << 30, 16 << 30)}, memory=16 << 30)
    assert rebar_state(partial)[0] == "partial"
    assert rebar_findings([PciGpu("0000:c5:00.0", "amd", "apu", [Bar(0, 256 << 20)], memory=512 << 20, integrated=True)]) == []


def _pci_device(sys_root: Path, bdf: str, bar_bytes: int, vram: int | None, vendor="0x1002", cls="0x030000"):
    device = sys_root / "bus" / "pci" / "devices" / bdf
    device.mkdir(parents=True)
    (device / "class").write_text(cls + "\n")
    (device / "vendor").write_text(vendor + "\n")
    start = 0xF800000000
    mem64_prefetch = 0x0014220C           # IORESOURCE_MEM | PREFETCH | MEM_64 as the kernel writes them
    lines = [f"0x{start:016x} 0x{start + bar_bytes - 1:016x} 0x{mem64_prefetch:016x}",
             "0x0000000000000000 0x0000000000000000 0x0000000000000000",
             f"0x{0xFC000000:016x} 0x{0xFC07FFFF:016x} 0x{0x40200:016x}"]
    (device / "resource").write_text("\n".join(lines) + "\n")
    if vram is not None:
        (device / "mem_info_vram_total").write_text(f"{vram}\n")


def test_live_rebar_from_a_simulated_sysfs(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[props("Radeon RX 7900 XTX", "gfx1100", 24, major=11, minor=0)])
    paths, rocm = machine(tmp_path, gfx_nodes=[110000])
    _pci_device(paths["sys_root"], "0000:03:00.0", 256 << 20, 24 << 30)                   # ReBAR off
    _pci_device(paths["sys_root"], "0000:04:00.0", 32 << 30, 24 << 30)                    # ReBAR on
    _pci_device(paths["sys_root"], "0000:05:00.0", 1 << 20, None, cls="0x020000")         # a NIC: not a GPU
    assert [g.bdf for g in read_sysfs_gpus(paths["sys_root"])] == ["0000:03:00.0", "0000:04:00.0"]
    findings = run_live_checks(env={"ROCM_PATH": str(rocm)}, **paths)
    assert find(findings, "warning", "pci", "0000:03:00.0", "off", "BAR 256 MB, GPU memory 24 GB")
    assert find(findings, "info", "pci", "0000:04:00.0", "Resizable BAR on")


# --- APU unified memory, live -----------------------------------------------------------------------------------

def _apu_sysfs(sys_root: Path, bdf: str, vram: int, gtt: int):
    device = sys_root / "devices" / "pci0000:00" / bdf
    device.mkdir(parents=True)
    for name, value in (("vendor", "0x1002"), ("mem_info_vram_total", vram), ("mem_info_gtt_total", gtt)):
        (device / name).write_text(f"{value}\n")
    card = sys_root / "class" / "drm" / "card1"
    card.mkdir(parents=True)
    (card / "device").symlink_to(device)
    (sys_root / "class" / "drm" / "card1-DP-1").mkdir()                 # a connector, not a card


def test_strix_halo_trains_on_its_gtt(monkeypatch, tmp_path):
    halo = SimpleNamespace(**vars(props("AMD Radeon Graphics", "gfx1151", 0.5, integrated=True, major=11, minor=5)),
                           pci_domain_id=0, pci_bus_id=0xC5, pci_device_id=0)
    simulate(monkeypatch, gpus=[halo], arch_list=["gfx1100", "gfx1151", "gfx1201"])
    paths, rocm = machine(tmp_path, gfx_nodes=[110501], cmdline="ro quiet amdgpu.gttsize=16384")
    _apu_sysfs(paths["sys_root"], "0000:c5:00.0", 512 << 20, 16 << 30)
    (paths["proc_root"] / "meminfo").write_text("MemTotal:       131171464 kB\n")
    info = detect(paths["sys_root"], paths["proc_root"])
    gpu = info.primary
    assert gpu is not None and gpu.integrated and gpu.bus_id == "0000:c5:00.0"   # the APU itself trains
    assert gpu.budget_gib == 16.0 and "GTT 16 GiB" in gpu.memory_note
    findings = run_live_checks(env={"ROCM_PATH": str(rocm)}, **paths)
    [small] = find(findings, "warning", "unified-memory", "may map only 16 GiB of 125.1 GiB RAM")
    assert "ttm.pages_limit=" in small.fix and "amdttm.pages_limit=" in small.fix
    assert find(findings, "warning", "unified-memory", "amdgpu.gttsize=16384")
    assert find(findings, "info", "precision", "bf16")                       # on the APU, not fp32 on the CPU
    assert find(findings, "info", "memory", "gradient checkpointing stays off", "on 16 GiB")
    assert not find(findings, "warning", "devices", "only an integrated GPU")


def test_a_small_igpu_alone_still_means_cpu_training(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[props("AMD Radeon Graphics (Raphael)", "gfx1036", 0.5, integrated=True)])
    assert detect().primary is None


# --- containers ---------------------------------------------------------------------------------------------

def _container(tmp_path, marker=".dockerenv", shm_k=65536, seccomp=2, capeff="00000000a80425fb"):
    paths, rocm = machine(tmp_path, render=2, kfd_mode=0o660)
    (tmp_path / marker).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / marker).touch()
    proc = paths["proc_root"]
    (proc / "mounts").write_text(f"overlay / overlay rw 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size={shm_k}k 0 0\n")
    (proc / "self").mkdir()
    (proc / "self" / "status").write_text(f"Name:\tpython\nCapEff:\t{capeff}\nSeccomp:\t{seccomp}\n")
    return paths, rocm


def test_docker_container_missing_what_multi_gpu_rocm_needs(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X, MI300X])
    paths, rocm = _container(tmp_path)
    probe = collect_probe(env={"ROCM_PATH": str(rocm)}, **paths)
    probe.uid, probe.groups = 1000, {1000}
    gid = (paths["dev_root"] / "kfd").stat().st_gid
    findings = check_container(probe)
    assert find(findings, "info", "container", "docker", "/.dockerenv")
    assert find(findings, "warning", "container", "/dev/shm is 64 MB (Docker's default)", "--ipc=host")
    assert find(findings, "info", "container", "seccomp filter", "seccomp=unconfined")
    assert find(findings, "warning", "container", "CAP_SYS_PTRACE", "--cap-add=SYS_PTRACE")
    [flags] = find(findings, "warning", "container", "start the container with")
    assert flags.fix == (f"docker run --device /dev/kfd --device /dev/dri --group-add {gid} --security-opt seccomp=unconfined "
                         "--ipc=host --cap-add=SYS_PTRACE <image> ...")


def test_well_configured_container_and_no_container(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X, MI300X])
    ptrace = f"{(1 << 19) | 0xa80425fb:016x}"
    paths, rocm = _container(tmp_path / "a", marker="run/.containerenv", shm_k=16 << 20, seccomp=0, capeff=ptrace)
    probe = collect_probe(env={"ROCM_PATH": str(rocm)}, **paths)
    findings = check_container(probe)
    assert find(findings, "info", "container", "podman", "/run/.containerenv")
    assert find(findings, "info", "container", "/dev/shm is 16 GiB")
    assert not [f for f in findings if f.severity != "info"]
    paths, rocm = machine(tmp_path / "b")
    assert check_container(collect_probe(env={"ROCM_PATH": str(rocm)}, **paths)) == []
    probe = collect_probe(env={"ROCM_PATH": str(rocm), "KUBERNETES_SERVICE_HOST": "10.0.0.1"}, **paths)
    assert find(check_container(probe), "info", "container", "kubernetes")


def test_one_gpu_in_a_container_cannot_do_peer_to_peer(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X])
    paths, rocm = _container(tmp_path, shm_k=8 << 20, seccomp=0)
    for node in (paths["dev_root"] / "dri").glob("renderD129"):
        node.unlink()
    findings = check_container(collect_probe(env={"ROCM_PATH": str(rocm)}, **paths))
    assert find(findings, "info", "container", "only one GPU is visible", "--device /dev/dri/renderD")


# --- the all-reduce that falls back to NCCL_P2P_DISABLE=1 -------------------------------------------------------

def _p2p_hangs(world, backend, timeout, env):
    """A real gloo all-reduce across `world` processes that does not finish in time unless P2P is disabled:
    the shape of seed 000's container, where only the path without P2P completed."""
    return run_allreduce_check(world, backend="gloo", env=env,
                               timeout=timeout if env.get("NCCL_P2P_DISABLE") == "1" else 0.2)


def test_allreduce_that_hangs_with_p2p_is_retried_without():
    first, verdict = check_allreduce(2, env=dict(os.environ), attempt=_p2p_hangs)
    assert first.severity == "error" and "did not finish" in first.what
    assert verdict.severity == "warning" and "works with NCCL_P2P_DISABLE=1" in verdict.what
    assert verdict.fix.startswith("to train now: export NCCL_P2P_DISABLE=1")


def test_allreduce_failing_both_ways_and_p2p_already_off():
    never = lambda world, backend, timeout, env: run_allreduce_check(world, backend="gloo", env=env, timeout=0.2)
    first, verdict = check_allreduce(2, env=dict(os.environ), attempt=never)
    assert verdict.severity == "error" and "fails with NCCL_P2P_DISABLE=1 as well" in verdict.what
    # P2P already off: nothing to fall back to, one finding
    [only] = check_allreduce(2, env={**os.environ, "NCCL_P2P_DISABLE": "1"}, attempt=never)
    assert only.severity == "error" and "did not finish" in only.what


# --- the CLI ------------------------------------------------------------------------------------------------

def test_cli_reads_lspci_and_dmesg_and_a_config(tmp_path, capsys):
    (tmp_path / "train.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nbf16: true\n")
    code = cli_main(["doctor", "--amd-smi", str(CAPTURES / "amd-smi_default_2x_rx9070xt.txt"),
                     "--lspci", str(CAPTURES / "lspci-vv_rx7900xtx_rebar_off_excerpt.txt"),
                     "--dmesg", str(CAPTURES / "dmesg_rx9060xt_bar.txt"),
                     "--config", str(tmp_path / "train.yaml"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and [g["hip_id"] for g in out["gpus"]] == [0, 1]
    whats = [f["what"] for f in out["findings"]]
    assert any("Resizable BAR / Above 4G Decoding is off" in w for w in whats)
    assert any("Resizable BAR on" in w for w in whats)
    assert any("train would use bf16 (bf16: True" in w for w in whats)
    assert any("qwen2.5-0.5b shape" in w for w in whats)


def test_cli_config_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("learning_rat: 1e-4\n")
    assert cli_main(["doctor", "--amd-smi", str(CAPTURES / "amd-smi_default_mi325x_partial.txt"),
                     "--config", str(tmp_path / "bad.yaml")]) != 0
    assert "learning_rat" in capsys.readouterr().err
