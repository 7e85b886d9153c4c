"""The error catalogue (hardware/error_catalogue.yaml): every entry matched by the real snippet it quotes, the first
match being that entry; the contexts that make a cause and fix specific (the visibility arithmetic, the arch and the
wheel or override for it, an out-of-memory message's numbers, the GPU a kernel message names); and no alarm on
outputs that hold no error. The command-line wiring (a failed train prints the line) is in test_doctor_paste.py."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SMI_FIXTURES, needs_shared

from steadytune.hardware.error_catalogue import (
    CATALOGUE,
    CatalogueError,
    Facts,
    error_text,
    explain_failure,
    likely_cause,
    load_catalogue,
    match_text,
)
from steadytune.hardware.visibility import stack_masks

CAPTURES = Path(__file__).parent / "captures"
ENTRIES = load_catalogue()
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+#\d+$|^https://\S+$")


def gpu(index, arch, integrated=False, name=None, bus_id=None, kfd_node=None, vendor="amd"):
    return SimpleNamespace(index=index, arch=arch, integrated=integrated, name=name or arch, bus_id=bus_id,
                           kfd_node=kfd_node, vendor=vendor)


def test_at_least_forty_entries_each_with_a_real_source_and_a_short_snippet():
    assert len(ENTRIES) >= 40
    assert len({e.id for e in ENTRIES}) == len(ENTRIES)
    for entry in ENTRIES:
        assert SOURCE.match(entry.source), entry.id
        assert 0 < len(entry.example) <= 320, entry.id
        assert entry.cause and entry.fix and entry.title, entry.id


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_each_entry_is_the_first_match_of_its_own_snippet(entry):
    matches = match_text(entry.example)
    assert matches and matches[0].entry.id == entry.id, [m.entry.id for m in matches]
    assert matches[0].excerpt and matches[0].cause and matches[0].fix


def test_a_malformed_catalogue_is_refused_with_the_entry_named(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("- id: x\n  title: t\n  match: ['(']\n  example: e\n  source: a/b#1\n  cause: c\n  fix: f\n"
                   "  severity: error\n  family: arch-missing\n")
    with pytest.raises(CatalogueError, match="entry x: bad pattern"):
        load_catalogue.__wrapped__(bad)
    bad.write_text("- id: x\n  title: t\n")
    with pytest.raises(CatalogueError, match=r"entry 0 \(x\): missing match"):
        load_catalogue.__wrapped__(bad)
    # One pattern written as a string, not a list: refused (it would have been read as one pattern a character).
    bad.write_text("- id: x\n  title: t\n  match: 'HIP error'\n  example: e\n  source: a/b#1\n  cause: c\n  fix: f\n"
                   "  severity: error\n  family: arch-missing\n")
    with pytest.raises(CatalogueError, match=r"entry 0 \(x\): missing match"):
        load_catalogue.__wrapped__(bad)
    assert CATALOGUE.is_file()


# --- no false alarms -------------------------------------------------------------------------------------------------

EXPECTED_IN_CAPTURES = {"bitsandbytes_rocm84-not-found.txt": {"bnb-rocm-library-missing"},
                        "dmesg_strix-halo_gttsize-deprecated.txt": {"gttsize-deprecated", "gtt-ttm-mismatch"},
                        "session_mi250x_rocr-and-cuda-masks.txt": {"no-hip-gpus"}}


@pytest.mark.parametrize("name", sorted(p.name for p in CAPTURES.glob("*.txt")))
def test_the_captures_raise_only_what_they_hold(name):
    """Tool outputs, pip logs, env dumps and dmesg without an error match nothing; the error captures their own entry."""
    found = {m.entry.id for m in match_text((CAPTURES / name).read_text(encoding="utf-8"))}
    assert found == EXPECTED_IN_CAPTURES.get(name, set())


def test_no_alarm_for_a_clean_session_and_a_clean_training_log():
    session = """$ python -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())"
2.9.1+rocm6.4 True 2
$ rocminfo | grep -m2 gfx
  Name:                    gfx1100
$ steadytune train sft.yaml
steadytune: gfx1100, bf16, attention sdpa, 2 GPUs
step 10/100  loss 1.734  lr 2.0e-04  tokens/s 5120  memory 11.2 GiB of 24 GiB
step 100/100  loss 0.912  done in 0:04:10; saved saves/sft
"""
    assert match_text(session) == []


@needs_shared
def test_no_alarm_in_the_shared_tool_outputs():
    for path in sorted(SMI_FIXTURES.iterdir()):
        assert match_text(path.read_text(encoding="utf-8")) == [], path.name


# --- contexts ------------------------------------------------------------------------------------------------------

def test_the_masks_of_the_command_line_are_worked_out():
    """ROCR_VISIBLE_DEVICES=1 leaves one GPU, numbered 0; CUDA_VISIBLE_DEVICES=1 asks for index 1: nothing."""
    match = likely_cause("RuntimeError: No HIP GPUs are available",
                         Facts(env={"ROCR_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "1"}))
    assert match.entry.id == "no-hip-gpus"
    assert "ROCR_VISIBLE_DEVICES=1 leaves 1 GPU" in match.cause and "asks for index 1" in match.cause
    assert match.fix.startswith("unset CUDA_VISIBLE_DEVICES: ROCR_VISIBLE_DEVICES=1 alone")
    plain = likely_cause("RuntimeError: No HIP GPUs are available", Facts(env={}))
    assert "render and video" in plain.fix and "ls -l /dev/kfd" in plain.fix


@pytest.mark.parametrize("env, count, selected", [
    ({"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "1"}, None, ["1"]),
    ({"ROCR_VISIBLE_DEVICES": "GPU-a,GPU-b", "CUDA_VISIBLE_DEVICES": "0"}, 4, ["GPU-a"]),
    ({"HIP_VISIBLE_DEVICES": "1"}, 2, ["1"]),
    ({"HIP_VISIBLE_DEVICES": "3"}, 2, []),
    ({"CUDA_VISIBLE_DEVICES": ""}, 2, []),
    ({"ROCR_VISIBLE_DEVICES": "5"}, 2, []),
    ({}, None, None),
])
def test_mask_arithmetic(env, count, selected):
    reading = stack_masks(env, count)
    assert reading.selected == selected
    assert bool(reading.problem) == (selected == [])


def test_a_missing_arch_gets_the_override_or_the_wheel_that_has_it():
    rx6700 = Facts(gpus=[gpu(0, "gfx1031")])
    match = likely_cause("RuntimeError: HIP error: invalid device function", rx6700)
    assert "gfx1031" in match.cause and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in match.fix
    strix = likely_cause("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or "
                         "directory for GPU arch : gfx1151")
    assert "gfx1151" in strix.cause and "--index-url" in strix.fix
    # the wheel has the arch: the failing kernel comes from elsewhere
    inside = likely_cause("RuntimeError: HIP error: invalid device function",
                          Facts(gpus=[gpu(0, "gfx90a")], torch_version="2.9.1+rocm6.4"))
    assert "has code for gfx90a" in inside.cause and "LD_LIBRARY_PATH" in inside.fix
    # a system ROCm library without the arch (ROCm/legacy-rocm-build#4208's AMD_LOG_LEVEL lines), an arch every wheel has
    system = likely_cause("RuntimeError: HIP error: invalid device function\n:1:hip_fatbin.cpp :276 : Cannot find CO in the "
                          "bundle /opt/rocm-6.2.1/lib/libMIOpen.so.1.0.60201 for ISA: amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-")
    assert system.cause.startswith("/opt/rocm-6.2.1/lib/libMIOpen.so.1.0.60201, a library of the system's ROCm")
    assert "unset LD_LIBRARY_PATH" in system.fix
    old_arch = likely_cause("RuntimeError: HIP error: invalid device function\nMissing CO for these ISAs - "
                            "amdgcn-amd-amdhsa--gfx942")
    assert "in every pytorch.org ROCm wheel since pytorch.org rocm6.0" in old_arch.cause
    # an override of another family is the cause
    wrong = likely_cause("HSA_STATUS_ERROR_INVALID_ISA", Facts(env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
                                                                gpus=[gpu(0, "gfx1031")]))
    assert "(gfx1031) run gfx1100 code, another family's" in wrong.cause and wrong.fix == "export HSA_OVERRIDE_GFX_VERSION=10.3.0"


def test_a_source_build_is_told_its_own_arch():
    match = likely_cause("ggml_cuda_compute_forward: MUL_MAT failed\nROCm error: invalid device function\n"
                         "  current device: 1, in function ggml_cuda_compute_forward",
                         Facts(gpus=[gpu(0, "gfx1201"), gpu(1, "gfx1103", integrated=True)]))
    assert match.entry.id == "llamacpp-arch" and "-DAMDGPU_TARGETS=gfx1201" in match.fix


def test_out_of_memory_numbers_tell_fragmentation_from_a_full_gpu():
    message = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 6.64 GiB. GPU 0 has a total capacity of "
               "19.92 GiB of which 6.22 GiB is free. Of the allocated memory 5.34 GiB is allocated by PyTorch, and 7.10 "
               "GiB is reserved by PyTorch but unallocated.")   # pytorch/pytorch#138002
    fragmented = likely_cause(message, Facts(torch_version="2.11.0+rocm7.2", hip_version="7.2.26015"))
    assert fragmented.cause.startswith("fragmentation: 7.10 GiB")
    assert "PYTORCH_ALLOC_CONF=expandable_segments:True" in fragmented.fix
    old = likely_cause(message, Facts(torch_version="2.7.1+rocm6.3", hip_version="6.3.42131"))
    assert "max_split_size_mb:512" in old.fix and "expandable_segments needs torch >= 2.11" in old.fix
    shared = likely_cause("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.64 GiB of "
                          "which 12.31 MiB is free. Of the allocated memory 2.25 GiB is allocated by PyTorch, and "
                          "24.85 MiB is reserved by PyTorch but unallocated.")
    assert shared.cause.startswith("another process holds about 21.4") and "nvidia-smi" in shared.fix
    full = likely_cause("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of "
                        "which 1.00 GiB is free. Of the allocated memory 22.3 GiB is allocated by PyTorch, and "
                        "50.00 MiB is reserved by PyTorch but unallocated.")
    assert "gradient_checkpointing: true" in full.fix and "asked for 2.00 GiB, 1.00 GiB free" in full.cause


def test_kernel_messages_name_the_gpu_and_the_process():
    fault = likely_cause("[ 1008.330834] amdgpu 0000:c2:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 "
                         "pasid:32773)\n[ 1008.330841] amdgpu 0000:c2:00.0: amdgpu:  Process python pid 5578 thread "
                         "python pid 5578", Facts(gpus=[gpu(0, "gfx1150", True, "Radeon 890M", "0000:c2:00.0")]))
    assert "on c2:00.0 = GPU 0 (Radeon 890M, gfx1150)" in fault.cause and "process python (pid 5578)" in fault.cause
    atomics = likely_cause("[    7.026427] kfd kfd: amdgpu: skipped device 1002:67df, PCI rejects atomics")
    assert "Ellesmere" in atomics.cause and "gfx803" in atomics.cause
    node = likely_cause("Memory access fault by GPU node-2 (Agent handle: 0x5) on address 0x7f. Reason: Page not "
                        "present or supervisor privilege.",
                        Facts(env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}, gpus=[gpu(0, "gfx1100", kfd_node=1),
                                                                                 gpu(1, "gfx1151", kfd_node=2)]))
    assert "node-2 is GPU 1" in node.cause and "HSA_OVERRIDE_GFX_VERSION=11.0.0 is set" in node.cause


def test_sudo_says_which_exported_variables_it_drops():
    match = likely_cause("$ sudo python train.py", Facts(exported={"HSA_OVERRIDE_GFX_VERSION": "10.3.0", "HOME": "/h"}))
    assert match.entry.id == "sudo-drops-env" and "lost: HSA_OVERRIDE_GFX_VERSION" in match.cause
    assert likely_cause("$ sudo -E python train.py") is None
    assert likely_cause("$ sudo usermod -aG render $USER") is None


def test_a_cuda_wheel_on_an_amd_machine_gets_the_rocm_index_for_its_gpu():
    match = likely_cause("RuntimeError: Found no NVIDIA driver on your system.", Facts(gpus=[gpu(0, "gfx1201")]))
    assert "gfx1201" in match.cause and "download.pytorch.org/whl/rocm" in match.fix


def test_explain_failure_reads_the_exception_chain_and_never_raises():
    try:
        try:
            raise OSError("libamdhip64.so.6: cannot open shared object file: No such file or directory")
        except OSError as inner:
            raise ImportError("torch failed to load") from inner
    except ImportError as error:
        assert "libamdhip64" in error_text(error)
        line = explain_failure(error, env={})
    assert line.startswith("likely cause: a package built for another ROCm") and "[steadytune error catalogue: " \
        "libamdhip-missing, seen in ROCm/ROCm#1753]" in line
    assert explain_failure(ValueError("shapes (3,) and (4,) do not align"), env={}) is None
