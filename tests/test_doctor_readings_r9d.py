"""doctor, round 9 (issue 63): readings of the visibility, driver, override-wrong and device-access families for
pastes from Ollama's scheduler and GPU choice, accelerate, Ray, LM Studio, unsloth and torchtitan, and the drivers
under ZLUDA, vLLM and SGLang. Each paste is written for its reading (another GPU, tool or wording than the mined case
that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text
from test_doctor_paraphrases import PASTINGS, assert_a_rule_reads, pasting_misses

# (paste, family, phrases the fix must say)
READINGS = [
    # two ranks on one GPU in a hand-written FSDP script (not torchtitan): bind each rank before the mesh
    ("torchrun --nproc_per_node 4 my_fsdp.py\n[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device "
     "1a000", "visibility", ["torch.cuda.set_device"]),
    # a HIP function missing from the driver's amdhip64.dll, told in words (ComfyUI-Zluda, another function)
    ("ComfyUI-Zluda won't start: hipGraphExecDestroy entry point not found in amdhip64_6.dll", "driver",
     ["update the AMD driver"]),
    # a CUDA driver API function missing at import (another tool, vLLM, another green-context call, driver 530)
    ("vllm serve Qwen2.5-7B\nImportError: /usr/lib/python3/dist-packages/vllm/_C.abi3.so: undefined symbol: "
     "cuGreenCtxCreate\nDriver Version: 530.30.02", "driver", ["update the NVIDIA driver", "550"]),
    # WinError 1314 from another package's build (a wheel of llama-cpp-python) that symlinks
    ("pip install -e . (sentencepiece fork) on Windows 10\nos.symlink(src, dst)\nOSError: [WinError 1314] A required "
     "privilege is not held by the client: 'third_party\\\\x' -> 'pkg\\\\x'", "device-access", ["Developer Mode"]),
]


@pytest.mark.parametrize("paste,family,phrases", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
    assert_a_rule_reads(paste, family, phrases)


@pytest.mark.parametrize("how", PASTINGS)
def test_every_reading_survives_how_it_is_pasted(how):
    misses = pasting_misses(READINGS, how)
    assert not misses, "\n".join(misses)


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a cuBLAS symbol (the toolkit's library, not the driver's API): not the driver reading
    ("ImportError: libtorch_cuda.so: undefined symbol: cublasLtGetStatusString, version libcublasLt.so.12",
     "update the NVIDIA driver"),
    # the driver has green contexts (560 runs CUDA 12.6): not the driver's age
    ("ImportError: sgl_kernel/common_ops.abi3.so: undefined symbol: cuGreenCtxDestroy\nDriver Version: 560.35.03",
     "predates"),
    # a permission error on Linux (no WinError 1314): not the Windows privilege reading
    ("PermissionError: [Errno 13] Permission denied: '/usr/local/lib/python3.10/site-packages/x'", "Developer Mode"),
]


@pytest.mark.parametrize("paste,not_said", NEGATIVES, ids=[n[0][:48] for n in NEGATIVES])
def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, not_said):
    report = diagnose_text(paste)
    assert report.by_likeness or report.top is None or not_said.lower() not in report.top.fix.lower(), report.top.fix
