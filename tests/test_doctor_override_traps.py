"""A known-bad override (HSA_OVERRIDE_GFX_VERSION=11.0.0 on gfx1103) is unset, and the card's own code comes from
where the failing program gets it: torch's index for torch, the program's own build for the others, and on Windows a
rocBLAS built for the card (the HIP SDK's libraries, which the override does not reach)."""

from test_doctor_paraphrases import assert_a_rule_reads

from steadytune.doctor.diagnose import diagnose_text


def test_ollama_on_windows_gets_a_rocblas_for_the_card_not_torchs_index():
    paste = ("Ollama 0.5.7 on Windows 11, Radeon 780M (gfx1103)\nI set HSA_OVERRIDE_GFX_VERSION=11.0.0 as a user "
             "variable and restarted, still:\nError: llama runner process has terminated: exit status 0xc0000005\n")
    assert_a_rule_reads(paste, "override-wrong", ["unset HSA_OVERRIDE_GFX_VERSION", "rocblas.dll", "gfx1103"])
    assert "download.pytorch.org" not in _fix(paste)


def test_koboldcpp_on_windows_the_same_with_another_card():
    paste = ("koboldcpp-rocm on Windows 10, Radeon 890M gfx1150, HSA_OVERRIDE_GFX_VERSION=11.0.0 set\n"
             "the model loads, then: Memory access fault by GPU node-1 (Agent handle: 0x1) on address 0x0\n")
    assert_a_rule_reads(paste, "override-wrong", ["unset HSA_OVERRIDE_GFX_VERSION", "rocblas.dll", "gfx1150"])
    assert "download.pytorch.org" not in _fix(paste)


def test_torch_on_linux_still_gets_torchs_index():
    paste = ("Ubuntu 24.04, Radeon 780M gfx1103, torch 2.6.0+rocm6.2.4\nexport HSA_OVERRIDE_GFX_VERSION=11.0.0\n"
             "python train.py\nMemory access fault by GPU node-1 (Agent handle: 0x55d) on address 0x7f. Reason: Page "
             "not present or supervisor privilege.\n")
    assert_a_rule_reads(paste, "override-wrong", ["unset HSA_OVERRIDE_GFX_VERSION", "download.pytorch.org/whl"])
    assert "rocblas.dll" not in _fix(paste)


def _fix(paste: str) -> str:
    top = diagnose_text(paste).top
    return top.fix if top else ""
