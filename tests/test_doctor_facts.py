"""doctor, round 5 (issue 63): facts first. Any text gives facts about the machine and the failure, each with the line
it came from; rules reason over the facts, not the wording; every error line gets a finding; a table whose sensors all
read N/A is never a healthy verdict. The pastes here are excerpts of public reports (their threads are in the case
files, steadytune/doctor/cases/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.error_lines import classify_line, find_errors, is_error_line
from steadytune.doctor.facts import extract_facts
from steadytune.doctor.offline import run_offline_checks


def facts(text: str, kind: str) -> list[tuple[str, str]]:
    return [(f.value, f.detail) for f in extract_facts(text).of(kind)]


def doctor(tmp_path: Path, text: str):
    path = tmp_path / "paste.txt"
    path.write_text(text, encoding="utf-8")
    return run_offline_checks([path])


# --- facts, each with its line ---------------------------------------------------------------------------------------

OLLAMA = ('time=2025-02-02T19:28:37.628+08:00 level=WARN source=amd_linux.go:378 msg="amdgpu is not supported '
          '(supported types:[gfx1030 gfx1100 gfx1101 gfx1102 gfx900 gfx906 gfx908 gfx90a gfx940 gfx941 gfx942])" '
          'gpu_type=gfx1031 gpu=0 library=/usr/local/lib/ollama')


def test_the_machines_arch_is_told_from_a_list_of_supported_ones():
    assert facts(OLLAMA, "arch") == [("gfx1031", "machine")]
    assert ("gfx1030", "list") in facts(OLLAMA, "built_for") and ("gfx1031", "list") not in facts(OLLAMA, "built_for")
    tf = ("Ignoring visible gpu device (device: 0, name: , pci bus id: 0000:03:00.0) with AMDGPU version : gfx1031. "
          "The supported AMDGPU versions are gfx1030, gfx900, gfx906, gfx908, gfx90a.")
    assert facts(tf, "arch") == [("gfx1031", "machine")]
    assert facts("      Name:                    amdgcn-amd-amdhsa--gfx906:sramecc+:xnack-", "arch") == \
        [("gfx906", "machine")]


def test_gpus_by_name_pci_id_and_laptop_suffix_give_their_arch():
    sheet = extract_facts("Does ROCm support the RX 6700S (laptop GPU)\nDevice: cuda:0 AMD Radeon RX 6600 : native\n"
                          "07:00.0 VGA compatible controller: Advanced Micro Devices, Inc. [AMD/ATI] Device 150e\n"
                          "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible")
    assert [(f.value, f.detail) for f in sheet.of("gpu")][:2] == [("Radeon RX 6700S", "gfx1032"),
                                                                   ("AMD Radeon RX 6600", "gfx1032")]
    assert ("1002:150e", "gfx1150") in [(f.value, f.detail) for f in sheet.of("pci_id")]
    assert "sm_120" in sheet.machine_archs
    assert [f.line_no for f in sheet.of("gpu")][:2] == [1, 2]


@pytest.mark.parametrize("line, name, arch", [
    ("two NVIDIA P40 cards in the server", "NVIDIA P40", "sm_61"),         # a Tesla named without "Tesla"
    ("training hangs on 4x RTX 5000 Ada (no NVLink)", "RTX 5000 Ada", "sm_89"),
    ("cuda init fails on an RTX 6000 PRO Blackwell", "RTX 6000 PRO", "sm_120"),
    ("GPU: Radeon R9700 AI PRO 32GB", "Radeon R9700", "gfx1201"),        # AMD's name in another word order
    ("my old vega56 is not found", "vega56", "gfx900"),
    ("an old Tesla C2070 in the box", "Tesla C2070", "sm_20"),           # Fermi
    ("NCCL hangs on 2x RTX 4500 Ada", "RTX 4500 Ada", "sm_89"),         # NVIDIA's cuda-gpus page: 8.9
    ("an RTX PRO 4500 Blackwell in the workstation", "RTX PRO 4500", "sm_120"),
])
def test_workstation_data_centre_and_legacy_cards_named_loosely_give_their_arch(line, name, arch):
    assert [(f.value, f.detail) for f in extract_facts(line).of("gpu")] == [(name, arch)]


def test_a_bare_number_like_a_card_is_not_one():
    assert extract_facts("set the pump to GP-40 and the preset to RTX 6000").of("gpu") == []


def test_platforms_and_where_a_variable_was_set():
    sheet = extract_facts('OS: Windows 11 + WSL2 Ubuntu 24.04\nmine is 6.6.87.2-microsoft-standard-WSL2.\n'
                          'root@101acc334128:/var/lib/jenkins# /opt/rocm-5.2.0/bin/rocminfo\n'
                          '[Service]\nEnvironment="HSA_OVERRIDE_GFX_VERSION=10.3.0"\n'
                          '    --env HSA_OVERRIDE_GFX_VERSION="10.3.0" \\\n'
                          'i set it universally with `set -U HSA_OVERRIDE_GFX_VERSION 10.3.0` in fish\n')
    assert {"wsl", "container", "systemd"} <= set(sheet.values("platform"))
    assert "6.6.87.2-microsoft-standard-WSL2" in sheet.values("kernel")
    assert [f.detail for f in sheet.of("env")] == ["systemd", "docker", "fish-unexported"]
    assert sheet.values("rocm") == ["5.2"]


def test_versions_builds_layout_and_tools():
    sheet = extract_facts("torch version = 2.2.1+rocm5.7\nPython 3.12.9\n"
                          "ERROR: torch-2.1.2+cu121-cp311-cp311-win_amd64.whl is not a supported wheel on this platform.\n"
                          "/venv/lib/python3.12/site-packages/_rocm_sdk_core/lib/libamdhip64.so\n"
                          "ggml_cuda_compute_forward: MUL_MAT failed\n")
    assert ("2.2.1+rocm5.7", "rocm") in [(f.value, f.detail) for f in sheet.of("torch")]
    assert {"3.12", "3.11"} <= set(sheet.values("python")) and "win_amd64" in sheet.values("wheel_tag")
    assert "therock" in sheet.values("layout") and "llama.cpp" in sheet.tools


def test_another_librarys_build_label_is_not_a_torch_version():
    # NCCL prints "2.25.1+cuda12.4": the "+cuda" label is NCCL's, torch's labels are cu124 / rocm6.2 / cpu
    sheet = extract_facts("NCCL version 2.25.1+cuda12.4\nfound torch 2.5.1+cu124\n")
    assert [(f.value, f.detail) for f in sheet.of("torch")] == [("2.5.1+cu124", "cuda")]
    assert [f.value for f in extract_facts("libs: 2.6.0+rocm6.2.4\nthen 2.7.0+cpu").of("torch")] == ["2.6.0+rocm6.2.4",
                                                                                                       "2.7.0+cpu"]


# --- error lines and their family ------------------------------------------------------------------------------------

def test_error_lines_by_shape_and_by_known_wording():
    assert is_error_line("RuntimeError: HIP error: invalid device function")
    assert not is_error_line("$ python -c 'import torch'") and not is_error_line("0 errors, 2 warnings")
    assert classify_line("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek for "
                         "GPU arch : gfx1032") == "arch-missing"
    assert classify_line(OLLAMA) == "arch-missing"   # a WARN line, and the wording of another tool
    errors = find_errors(["$ python3 -c \"import torch; print(torch.cuda.is_available())\"", "False"])
    assert [(e.line_no, e.family) for e in errors] == [(2, "visibility")]


# --- rules over facts: the same cause in other words -----------------------------------------------------------------

def test_one_cause_in_three_wordings_gets_one_fix_with_the_machines_value():
    wordings = [OLLAMA,
                'rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek for GPU arch '
                ': gfx1032',
                "It is a gfx1032 GPU\n\"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\""]
    for text in wordings:
        top = diagnose_text(text).top
        assert top.family == "arch-missing" and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in top.fix, text


def test_the_variable_that_never_reached_the_service_is_the_cause_not_the_gpu():
    text = ('Environment="HSA_OVERRIDE_GFX_VERSION=10.3.0"\n'
            'ollama[49742]: routes.go:1125: INFO server config env="map[CUDA_VISIBLE_DEVICES: HSA_OVERRIDE_GFX_VERSION: '
            'OLLAMA_DEBUG:false]"\n' + OLLAMA)
    report = diagnose_text(text)
    assert report.top.family == "env-not-applied"
    assert "systemctl edit ollama.service" in report.top.fix and "daemon-reload" in report.top.fix
    assert [d.family for d in report.diagnoses][:2] == ["env-not-applied", "arch-missing"]


def test_an_override_of_another_family_is_named_with_the_right_value():
    text = ("export HSA_OVERRIDE_GFX_VERSION=11.0.0\n  Name:                    gfx1031\n"
            "Memory access fault by GPU node-1 (Agent handle: 0x5) on address 0x7f. Reason: Page not present")
    top = diagnose_text(text).top
    assert top.family == "override-wrong" and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in top.fix


# --- never silent; never a healthy table without sensors --------------------------------------------------------------

def test_every_error_line_gets_a_finding_and_an_unknown_one_names_the_next_command(tmp_path):
    text = ("$ ./llama-server -m model.gguf\nload_backend: loaded ROCm backend\n"
            "llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' has wrong shape\n")
    gpus, findings = doctor(tmp_path, text)
    [unknown] = [f for f in findings if f.check == "unrecognised-error"]
    assert "line 3: llama_model_load: error loading model" in unknown.what and unknown.fix.startswith("run and paste: ")
    assert not [f for f in findings if "could not read any GPU" in f.what]


def test_a_paste_that_names_its_gpu_fills_the_table(tmp_path):
    gpus, findings = doctor(tmp_path, "I have an RX 6700S (laptop GPU)\nSegmentation fault (core dumped)\n")
    assert [(g.name, g.arch, g.arch_source) for g in gpus] == [("Radeon RX 6700S", "gfx1032", "named in the text")]
    assert not [f for f in findings if "could not read any GPU" in f.what]
    [likely] = [f for f in findings if f.check == "diagnosis" and "likely cause" in f.what]
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in likely.fix



def test_a_windows_crash_report_is_an_error_line_not_an_unreadable_paste(tmp_path):
    """Event Viewer's Application Error, as users copy it from Windows: the crash code and the DLL it happened in are
    the error; "could not read any GPU" alone would tell the user nothing."""
    text = ("Faulting application name: ComfyUI.exe, version: 1.2.0.0, time stamp: 0x6512a0b1\n"
            "Faulting module name: cublasLt64_12.dll, version: 6.14.11.1220, time stamp: 0x64f0e2d4\n"
            "Exception code: 0xc0000005\n")
    gpus, findings = doctor(tmp_path, text)
    answered = [f for f in findings if f.check in ("diagnosis", "unrecognised-error")]
    assert answered and not [f for f in findings if "could not read any GPU" in f.what]
    assert [e.line for e in find_errors(text.splitlines())][-1] == "Exception code: 0xc0000005"
    assert not find_errors(["Exception code: see the table below"])


@pytest.mark.parametrize("words", [
    "The workers came up without their GPUs: the dashboard shows the nodes missing GPUs.",
    "Image generation is unusably slow on the 4090, the GPU usage is near 0% the whole time.",
    "The 70B model runs almost entirely on CPU although the card has room for it.",
])
def test_a_complaint_in_words_gets_a_finding_not_silence(tmp_path, words):
    gpus, findings = doctor(tmp_path, words + "\n")
    assert [f for f in findings if f.check in ("diagnosis", "not-read", "similar-case")], findings


def test_a_healthy_report_in_words_is_no_complaint():
    for words in ("GPU usage is at 98% during training", "The run uses the GPU, nothing runs on CPU",
                  "no GPUs are missing from the list"):
        assert not extract_facts(words).values("complaint"), words

ROCM_SMI_NA = """\
========================================= ROCm System Management Interface =========================================
=================================================== Concise Info ===================================================
Device  Node  IDs              Temp    Power     Partitions          SCLK  MCLK  Fan  Perf     PwrCap  VRAM%  GPU%
              (DID,     GUID)  (Edge)  (Socket)  (Mem, Compute, ID)
====================================================================================================================
0       1     0x73bf,   26934  N/A     N/A       N/A, N/A, 0         N/A   N/A   0%   unknown  N/A     0%     0%
1       2     0x73bf,   45616  N/A     N/A       N/A, N/A, 0         N/A   N/A   0%   unknown  N/A     0%     0%
====================================================================================================================
"""


def test_a_table_whose_sensors_all_read_na_is_an_error_not_two_healthy_gpus(tmp_path):
    gpus, findings = doctor(tmp_path, ROCM_SMI_NA)
    assert len(gpus) == 2 and all(g.sensors_unreadable for g in gpus)
    [error] = [f for f in findings if f.severity == "error" and f.check == "diagnosis"]
    assert "reads no sensor of GPU 0, GPU 1 (of any GPU)" in error.what and "dmesg" in error.fix
    assert all("every sensor N/A" in f.what for f in findings if f.what.startswith("GPU ") and "Navi 21" in f.what)
    readable = ROCM_SMI_NA.replace("0       1     0x73bf,   26934  N/A     N/A  ",
                                   "0       1     0x73bf,   26934  34.0°C  20.0W")
    _, findings = doctor(tmp_path, readable)
    [warning] = [f for f in findings if f.check == "diagnosis"]
    assert warning.severity == "warning" and "GPU 1" in warning.what and "GPU 0" not in warning.what


def test_a_second_card_named_with_its_own_arch_is_not_an_override():
    """An MI100 table beside a note about a Fury X (gfx803) is two machines; an MI100 said to run gfx1030 code is one
    with an override left in force."""
    table = ("card0,Arcturus GL-XL [AMD Instinct MI100],0x0c34,Advanced Micro Devices Inc. [AMD/ATI],D34316\n"
             "another machine: Radeon R9 Fury X / Fiji gfx803\n")
    assert not any("reports gfx803" in d.title for d in diagnose_text(table).diagnoses)
    wrong = ("card0,Arcturus GL-XL [AMD Instinct MI100],0x0c34,Advanced Micro Devices Inc. [AMD/ATI],D34316\n"
             "  Name:                    gfx1030\n")
    assert any("reports gfx1030" in d.title for d in diagnose_text(wrong).diagnoses)


def test_an_override_trap_says_it_is_a_training_one():
    """gfx1103 under 11.0.0 faults in training while Ollama runs with it: the warning names whose run it guards."""
    from steadytune.doctor.archs import override_finding
    trap = override_finding("gfx1103", "GPU 0", "arch")
    assert trap is not None and trap.what.endswith("is a trap on gfx1103 for training")
    assert "inference tool may run with it" in trap.fix


def test_a_programs_own_release_beside_rocm_is_no_rocm_release():
    # koboldcpp's ROCm fork numbers its releases 1.7x: "HIP SDK 1.74" once reached a Windows fix
    assert extract_facts("koboldcpp rocm 1.74 on Windows 11, Radeon 760M").values("rocm") == []
    assert extract_facts("ROCm 1.9.2 with an RX 480").values("rocm") == ["1.9"]
    assert extract_facts("rocm 7.11 nightly wheels").values("rocm") == ["7.11"]


def test_workstation_ada_cards_are_not_read_as_consumer_cards_without_peer_to_peer():
    workstation = diagnose_text("all_reduce hangs with NCCL on 4x RTX 4500 Ada (PCIe, no NVLink)\n"
                                "RuntimeError: NCCL error: unhandled cuda error").top
    consumer = diagnose_text("all_reduce hangs with NCCL on 2x RTX 4090 (PCIe)\n"
                             "RuntimeError: NCCL error: unhandled cuda error").top
    assert workstation is not None and consumer is not None
    assert workstation.family == consumer.family == "multi-gpu-transport"
    assert "consumer" in consumer.cause and "consumer" not in workstation.cause


@pytest.mark.parametrize("line, name", [
    ("显卡是两张 4090 turbo，应该没有显存问题", "RTX 4090"),    # "the cards are two 4090 turbos"
    ("显卡：3060 12G", "RTX 3060"),
    ("two 4080 turbo cards in one box", "RTX 4080"),
])
def test_a_bare_geforce_number_beside_the_word_for_graphics_card_is_the_card(line, name):
    assert [f.value for f in extract_facts(line).of("gpu")] == [name]


def test_a_memory_size_beside_the_word_for_graphics_card_is_not_a_card():
    assert extract_facts("显卡显存已用 4090 MiB / 24564 MiB").of("gpu") == []


def test_an_idle_gpu_said_in_chinese_under_a_torch_llm_stack_is_the_cpu_build_of_torch():
    paste = ("用 Qwen-7B 跑推理特别慢，任务管理器里 GPU 占用为 0，看起来只用CPU\n"
             "- 操作系统: Windows 11\n- 显卡是 4070 Ti")
    top = diagnose_text(paste).top
    assert top is not None and top.family == "torch-build"
    assert "download.pytorch.org/whl/cu" in top.fix
    # the same words under a runner that does not use torch get no torch reading
    other = diagnose_text(paste.replace("用 Qwen-7B 跑推理", "用 ollama 跑 qwen2 推理")).top
    assert other is None or other.family != "torch-build"
