"""doctor, round 10 (issue 63): three corrections the round's review found, each a wrong or missing reading for any
paste of its kind: a card's name written with a hyphen, the kernel's note that it LOADED an unsigned module, and a
program that never uses torch told to reinstall torch."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.facts import extract_facts


@pytest.mark.parametrize("said, model, arch", [("RTX-5090 not working with comfyui", "RTX 5090", "sm_120"),
                                               ("GTX-1080 Ti, torch 2.5", "GTX 1080 Ti", "sm_61"),
                                               ("RX-7900 XTX with rocm 6.2", "RX 7900 XTX", "gfx1100")])
def test_a_card_named_with_a_hyphen_is_read(said, model, arch):
    assert (model, arch) in [(f.value, f.detail) for f in extract_facts(said).of("gpu")]


def test_the_kernel_loading_an_unsigned_module_is_not_secure_boot_refusing_it():
    # "module verification failed ... tainting kernel": signatures are not enforced, the module loaded
    loaded = diagnose_text("[    5.1] nvidia: module verification failed: signature and/or required key missing - "
                           "tainting kernel\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    assert loaded.top is not None and "Secure Boot refuses" not in loaded.top.fix, loaded.top.fix
    refused = diagnose_text("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service")
    assert refused.top is not None and "Secure Boot refuses" in refused.top.fix


@pytest.mark.parametrize("program", ["ollama 0.1.25", "LM Studio 0.3.5", "koboldcpp 1.70"])
def test_a_program_that_ships_its_gpu_runtime_is_never_told_to_reinstall_torch(program):
    report = diagnose_text(f"{program} on Windows 11 with an RTX 3060\nno GPU detected, falling back to CPU")
    assert report.top is None or "pip uninstall -y torch" not in report.top.fix, report.top.fix
    # a torch program with the same words still gets the CPU-only torch reading
    torch_app = diagnose_text("ComfyUI on Windows 11 with an RTX 3060\nno GPU detected, falling back to CPU")
    assert torch_app.top is not None and torch_app.top.family == "torch-build"
