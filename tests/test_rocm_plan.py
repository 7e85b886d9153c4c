"""A run planned for each AMD architecture and each AMD machine captured in ../shared/fixtures/rocm/, end to end on
the CPU with the device faked: the plan a user of that machine would get (the same policy functions train calls,
through `doctor --config`, and `doctor --from` a machine's saved outputs), every choice with its reason. Printed
(pytest -s shows it)."""

from __future__ import annotations

import json

import pytest
from conftest import SMI_FIXTURES, needs_shared

from steadytune.cli import main
from steadytune.config import load_config
from steadytune.doctor.findings import format_findings
from steadytune.doctor.plan import train_plan_findings
from steadytune.hardware.backend import GPU, HardwareInfo
from steadytune.hardware.rocm_path import PLANNED_ARCHS, rocm_path
from steadytune.model.kernel_catalogue import AMD_TARGETS, FEATURES

CONFIG = """\
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
stage: sft
finetuning_type: lora
lora_target: all
dataset: alpaca_en_demo
template: qwen
cutoff_len: 1024
per_device_train_batch_size: 4
bf16: true
output_dir: saves/qwen-lora
"""
# A machine of each planned arch, as torch on it would describe it
MACHINES = {"gfx90a": ("AMD Instinct MI250X", 64.0, False), "gfx942": ("AMD Instinct MI300X", 192.0, False),
            "gfx950": ("AMD Instinct MI355X", 288.0, False), "gfx1100": ("Radeon RX 7900 XTX", 24.0, False),
            "gfx1151": ("AMD Radeon 8060S", 96.0, True), "gfx1201": ("AMD Radeon RX 9070 XT", 16.0, False)}
TOPICS = ("precision", "attention", "flash_attn", "bitsandbytes", "rccl", "cuda_graphs", "torch_compile")


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "qwen_lora.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def test_the_planned_archs_are_the_kernel_targets_and_every_entry_has_a_source():
    assert PLANNED_ARCHS == AMD_TARGETS
    for arch in PLANNED_ARCHS:
        for gpus in (1, 2):
            entries = rocm_path(arch, gpus)
            assert [e.topic for e in entries] == list(TOPICS)
            assert all(e.choice and e.why and e.source for e in entries), arch


@pytest.mark.parametrize("arch", PLANNED_ARCHS)
def test_a_run_is_planned_for_each_amd_arch_with_every_choice_s_reason(arch, config):
    name, memory, apu = MACHINES[arch]
    info = HardwareInfo("rocm", "2.11.0+rocm7.2", hip_version="7.2.53211",
                        gpus=[GPU(0, name, arch, memory, integrated=apu, usable_memory_gib=memory if apu else None)])
    findings = train_plan_findings(info, "plan", load_config(str(config)), offline=True)
    print(f"\n--- {arch}: {name}\n{format_findings(findings)}")
    assert all(f.why for f in findings), [f.what for f in findings if not f.why]
    said = {f.what: f.why for f in findings}
    for topic in TOPICS:
        assert any(what.startswith(f"ROCm {topic}: ") for what in said), (arch, topic)
    for feature in FEATURES:
        unused = feature == "fused_swiglu" and arch in ("gfx90a", "gfx1100", "gfx1151")   # no fp8 matrix cores
        assert f"Triton kernels of {feature}: {'not used on' if unused else 'built for'} {arch}" in said
    fp8 = next(why for what, why in said.items() if what.startswith("fp8_base"))
    expected = {"gfx942": "e4m3fnuz", "gfx950": "OCP e4m3", "gfx1201": "OCP e4m3"}.get(arch, "no fp8 matrix cores")
    assert expected in fp8
    attention = next(what for what in said if what.startswith("ROCm attention"))
    assert ("math" in attention) == (arch == "gfx1151")   # AOTriton marks Strix Halo experimental
    assert "train would use bf16" in " ".join(said)


# Each AMD machine capture, and the architecture its plan must be for (None: the capture does not name the GPU, and
# the plan says what to save instead)
CAPTURES = {
    "rocminfo_mi300x_x4_gfx942.txt": "gfx942", "rocm-smi_-a_mi300x_x4.txt": "gfx942",
    "rocm-smi_mi300x_x4_concise.txt": "gfx942", "amd-smi_static_mi300a.txt": "gfx942",
    "amd-smi_list_and_static-asic_mi308x.txt": "gfx942", "amd-smi_static_mi350x_gfx950_partial.txt": "gfx950",
    "rocminfo_mi250_gfx90a_partial.txt": "gfx90a", "rocm-smi_showproductname_json_mi250x.json.txt": "gfx90a",
    "rocminfo_rx7900xtx_gfx1100.txt": "gfx1100", "rocm-smi_productname_use_meminfo_rx7900xt_gfx1100.txt": "gfx1100",
    "rocminfo_rx7800xt_gfx1101.txt": "gfx1101", "rocm-smi_json_rx7800xt_gfx1101.json.txt": "gfx1101",
    "rocminfo_radeonvii_gfx906.txt": "gfx906", "rocm-smi_csv_rx6800_gfx1030_plus_igpu.txt": "gfx1030",
    "rocm-smi_showproductname_mi100_and_fury.txt": "gfx908", "rocm-smi_concise_mi250x_8gcd.txt": None,
    "rocm-smi_concise_old_rocm3.3_vega10.txt": None, "rocm-smi_showmeminfo_vram_plain.txt": None,
    "amd-smi_metric_power_json.txt": None,
}


@needs_shared
def test_every_amd_capture_is_named_here():
    amd = {p.name for p in SMI_FIXTURES.iterdir() if not p.name.startswith("nvidia-smi")}
    assert amd == set(CAPTURES)


@needs_shared
@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_a_run_is_planned_for_each_captured_amd_machine(capture, config, capsys):
    code = main(["doctor", "--from", str(SMI_FIXTURES / capture), "--config", str(config), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == report["exit_code"] in (0, 1)
    findings = report["findings"]
    with capsys.disabled():
        print(f"\n--- {capture}\n" + "\n".join(f"  {f['what']}\n      why: {f['why']}" for f in findings
                                                if f["check"] == "on-that-machine"))
    plan = [f for f in findings if f["check"] == "on-that-machine"]
    arch = CAPTURES[capture]
    if arch is None:   # no architecture in the capture: no ROCm-specific plan, and nothing made up
        assert not any(f["what"].startswith("ROCm ") for f in plan)
        return
    assert all(f["why"] for f in plan), [f["what"] for f in plan if not f["why"]]
    whats = [f["what"] for f in plan]
    for topic in TOPICS:
        assert any(w.startswith(f"ROCm {topic}: ") for w in whats), (capture, topic)
    kernels = [w for w in whats if w.startswith("Triton kernels of ")]
    assert len(kernels) == len(FEATURES) and all(arch in w for w in kernels)
    # the archs with no build of their own and no sibling among the targets take the fallbacks
    refused = arch in ("gfx906", "gfx908", "gfx1030")
    assert all(("refused on" in w) == refused for w in kernels), kernels
    assert all(("built for" in w) == (not refused and "fused_swiglu" not in w or arch in ("gfx942", "gfx950"))
               for w in kernels), kernels
    if arch in ("gfx906", "gfx1030"):   # no native bf16: fp16 with loss scaling
        assert any("fp16 with loss scaling" in w for w in whats)
