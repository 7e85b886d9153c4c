"""doctor, round 11 (issue 63): readings of the arch-missing and gpu-unsupported families for cards a tool's build or
floor leaves out, asked in words or shown by the tool's own messages. Each paste is written for its reading (another
GPU, tool, version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it
does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # flash-attn's build missing a Jetson's arch (another Orin, the error said by torch): the fix names the arch
    ("pip install flash-attn on a Jetson Orin NX went fine, then\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "arch-missing", ["sm_87", "FLASH_ATTN_CUDA_ARCHS=87"]),
    # Triton's floor asked about by capability, no card named (another wording, Maxwell)
    ("Does Triton work at all on compute capability 5.2? Please consider supporting Maxwell cards", "gpu-unsupported",
     ["7.0", "aot_eager"]),
    # macOS support asked for in a GPU tool's tracker, no tool named (another wording)
    ("Any plans for macOS support?\nI'd like to install this on my MacBook Air", "gpu-unsupported",
     ["macOS", "mps"]),
]

NEGATIVES = [
    # a card above Triton's floor, slow: not the floor reading
    ("Triton kernels on my RTX 3090 (compute capability 8.6) are slower than cuBLAS?", "below Triton's floor"),
    # a macOS build that fails with an error line: the error's reading, not "no macOS GPU"
    ("pip install on macOS 14 fails:\nerror: command '/usr/bin/clang' failed with exit code 1",
     "no macOS GPU support"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
