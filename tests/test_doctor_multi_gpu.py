"""doctor for several GPUs: how to launch on them, DeepSpeed's build and ops, whether SDPA takes its fused path (memory
linear in the length) or the math fallback (quadratic; on RDNA the AOTriton switch)."""

from __future__ import annotations

import pytest
from test_doctor import MI300X, find, live, machine, simulate

from steadytune.doctor.attention import diagnose_sdpa_memory
from steadytune.doctor.deepspeed_ops import check_deepspeed, installed_build
from steadytune.doctor.probe import collect_probe


def test_several_gpus_say_how_to_train_on_them(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X, MI300X])
    findings = live(monkeypatch, tmp_path)
    assert find(findings, "info", "multi-gpu", "2 GPUs visible", "--nproc 2", "deepspeed: FILE.json")


def test_one_gpu_says_nothing_about_launching(monkeypatch, tmp_path):
    simulate(monkeypatch, gpus=[MI300X])
    assert not find(live(monkeypatch, tmp_path), "info", "multi-gpu", "--nproc")


def test_sdpa_memory_growth_tells_the_path():
    linear = diagnose_sdpa_memory(40.0, 81.0, (2048, 4096), "rocm", {})
    assert linear.severity == "info" and "fused path" in linear.what
    quadratic = diagnose_sdpa_memory(300.0, 1210.0, (2048, 4096), "rocm", {})
    assert quadratic.severity == "warning" and "square of the length" in quadratic.what
    assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1" in quadratic.fix and "before starting Python" in quadratic.fix
    already = diagnose_sdpa_memory(300.0, 1210.0, (2048, 4096), "rocm",
                                   {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"})
    assert "no kernel for this GPU" in already.why and "upgrade torch" in already.fix
    cuda = diagnose_sdpa_memory(300.0, 1210.0, (2048, 4096), "cuda", {})
    assert "AOTRITON" not in cuda.fix


def test_deepspeed_build_info_is_read_without_importing_it(tmp_path):
    (tmp_path / "git_version_info_installed.py").write_text(
        "version='0.19.8'\ninstalled_ops={'cpu_adam': True, 'fused_adam': False}\naccelerator_name='cuda'\n"
        "torch_info={'version': '2.11', 'cuda_version': '13.0'}\n")
    build = installed_build(tmp_path)
    assert build["installed_ops"] == {"cpu_adam": True, "fused_adam": False}
    assert build["accelerator_name"] == "cuda" and build["torch_info"]["version"] == "2.11"
    assert installed_build(tmp_path / "missing") is None


def test_deepspeed_findings_on_this_machine(tmp_path):
    pytest.importorskip("deepspeed", reason="deepspeed is not installed here")
    paths, _ = machine(tmp_path)
    probe = collect_probe(env={}, **{**paths, "run_kernels": False})
    findings = check_deepspeed(probe)
    assert find(findings, "info", "deepspeed", "is installed")
    assert find(findings, "info", "deepspeed", "ops built into this install")


def test_no_deepspeed_no_findings(monkeypatch, tmp_path):
    import steadytune.doctor.deepspeed_ops as module
    monkeypatch.setattr(module, "package_version", lambda name: None)
    paths, _ = machine(tmp_path)
    assert check_deepspeed(collect_probe(env={}, **{**paths, "run_kernels": False})) == []
