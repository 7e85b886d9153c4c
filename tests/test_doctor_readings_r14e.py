"""doctor, round 14 (issue 63): a CUDA build of the user's own without the GPU's code, read by its build system (a torch
extension's TORCH_CUDA_ARCH_LIST for every GPU named, a CMake project's CMAKE_CUDA_ARCHITECTURES, candle's
CUDA_COMPUTE_CAP, -gencode flags pinned to other archs), a toolkit older than the GPU, and programs whose release has a
floor of its own (Dorado, BMInf). Each paste is written for its reading; the negatives keep each out of pastes it does
not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

from steadytune.doctor.diagnose import diagnose_text

# (paste, family, phrases the fix must say)
READINGS = [
    # a torch extension built on one card and run on another: both capabilities in the list
    ("I built detectron2 from source on my RTX 3090 box and copied the conda env to a node with a Tesla T4\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
     "  File \"/opt/detectron2/detectron2/layers/roi_align.py\", line 58, in forward", "arch-missing",
     ['TORCH_CUDA_ARCH_LIST="7.5;8.6"', "--no-cache-dir"]),
    # the build's own -gencode flags pinned to another arch than the GPU's
    ("export NVCC_FLAGS=\"-gencode=arch=compute_86,code=sm_86\"\npip install -e . (spconv from source)\n"
     "GPU: RTX 4090\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "arch-missing", ["-gencode=arch=compute_89,code=sm_89"]),
    # a CMake project on an old card
    ("cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j\n./build/raytrace scene.json\n"
     "GTX 1070 here\nERROR src/render.cu:88: cuda error \"no kernel image is available for execution on the device\"",
     "arch-missing", ['-DCMAKE_CUDA_ARCHITECTURES="61"']),
    # a project's own .cu source in the error, a compile of the user's own, no build system named
    ("did a fresh build of the tracer on my GeForce GTX 960\nstarting...\n"
     "src/trace_kernels.cu(212): CUDA error: no kernel image is available for execution on the device",
     "arch-missing", ["CMAKE_CUDA_ARCHITECTURES", "compute_52"]),
    # a program built with a CUDA older than the GPU (another program, another card)
    ("Windows 10, Visual Studio 2017, CUDA 10.2.89, cuDNN 7.6.5\nbuilt yolo_cpp_dll myself; on the new RTX 3060 it "
     "stops at the first layer:\ncuDNN Error: CUDNN_STATUS_EXECUTION_FAILED", "arch-missing", ["CUDA 11.1"]),
    # candle's kernels compiled for the older of two cards (another model, other cards)
    ("cargo build --release --features cuda   (candle examples)\nnvidia-smi --query-gpu=compute_cap --format=csv\n"
     "compute_cap\n7.5\n8.9\nsrc/affine.cu(31): error: no suitable conversion function from \"__nv_bfloat16\" to "
     "\"float\" exists", "arch-missing", ["CUDA_COMPUTE_CAP=89"]),
    # a program with a maintainers' floor: Dorado on a Pascal card
    ("dorado basecaller sup pod5s/ > calls.bam on our Tesla P40 nodes\nError - no kernel image is available for "
     "execution on the device", "gpu-unsupported", ["Volta"]),
    # BMInf's kernels on a compute capability 6.0 card
    ("import bminf\nmodel = bminf.models.CPM2()\nGPU: Tesla P100-SXM2-16GB\nRuntimeError: CUDA Error: no kernel image "
     "is available for execution on the device", "gpu-unsupported", ["6.1"]),
]

NEGATIVES = [
    # torch's own wheel lacking a new card: torch's index, not a build knob
    ("torch 2.5.1+cu124 on an RTX 5090\nRuntimeError: CUDA error: no kernel image is available for execution on the "
     "device", "CMAKE_CUDA_ARCHITECTURES"),
    # a CMake project built with a toolkit that knows the card: no "predates"
    ("CUDA 12.4 toolkit, cmake -B build && cmake --build build\nRTX 3060\nERROR src/render.cu:88: cuda error no "
     "kernel image is available for execution on the device", "cannot compile sm_86"),
    # BMInf on a card above its floor
    ("import bminf\nGPU: RTX 3090\nRuntimeError: CUDA Error: no kernel image is available for execution on the device",
     "6.1 or newer"),
    # candle on a single Ampere card: nothing about compiling below 8.0
    ("cargo build --release --features cuda\nnvidia-smi --query-gpu=compute_cap --format=csv\ncompute_cap\n8.6\n"
     "src/affine.cu(31): error: identifier \"foo\" is undefined", "do not compile for compute capability"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)


def test_every_card_a_line_names_is_read():
    """'built on an A100, run on a V100': both cards, in the order named; a GTX 10/16 number with its Ti is the card."""
    sheet = diagnose_text("When I build it on an A100 it works, but on a V100 it fails").sheet
    assert [f.value for f in sheet.of("arch")][:2] == ["sm_80", "sm_70"]
    sheet = diagnose_text("GPU: 1080Ti (11 GB)").sheet
    assert "sm_61" in [f.value for f in sheet.of("arch")]
