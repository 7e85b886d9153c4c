"""A PyTorch (or other) wheel for one JetPack on a Jetson running another: JetPack fixes the CUDA release of the board
(it cannot be upgraded on its own before JetPack 5), and NVIDIA's Jetson wheels are built per JetPack, so a wheel of
JetPack 4.2/4.3 (CUDA 10.0) asks for libcudart.so.10.0 on a board of JetPack 4.4 or newer (CUDA 10.2). The fix is
the wheel of the board's JetPack, never another CUDA toolkit beside JetPack's.

Sources: NVIDIA's JetPack 4.3 DP / 4.2.2 page (CUDA 10.0.326), L4T R32.4.3's archive page ("included as part of
JetPack 4.4", "CUDA 10.2 Driver Support"), the JetPack 4.4.1-4.6.x component table (CUDA 10.2 throughout).
Mined from dusty-nv/jetson-inference#559 (round 18, r18c)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.jetson_builds import _JETSON

# the CUDA runtime release a Jetson wheel asks for -> (the JetPack releases that ship it, the board's likely JetPack
# when it is missing, that JetPack's CUDA)
_JETPACK_CUDA = {"10.0": ("JetPack 4.2 and 4.3", "JetPack 4.4", "10.2"),
                 "10.2": ("JetPack 4.4 to 4.6", "JetPack 5", "11.4")}
_MISSING = re.compile(r"libcudart\.so\.(\d+\.\d)\b[^\n]*(?:cannot open shared object|No such file|not found)")


@rule("wheel-platform")
def jetson_wheel_of_another_jetpack(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    lines = _lines_matching(ctx, _MISSING)
    if not lines or not (_JETSON.search(text) or re.search(r"aarch64-linux-gnu[^\n]*python3\.6", text)):
        return None
    wanted = _MISSING.search(lines[0].line).group(1)
    if wanted not in _JETPACK_CUDA:
        return None
    made_for, board, cuda = _JETPACK_CUDA[wanted]
    return _make("wheel-platform", f"a Jetson wheel of {made_for} on a board of another JetPack",
                 f"the wheel installed was built for {made_for} (CUDA {wanted}) and asks for libcudart.so.{wanted}; a "
                 f"Jetson's CUDA is its JetPack's, and from {board} that is CUDA {cuda}, so the library is not there",
                 f"pip3 uninstall torch torchvision; install the wheels built for the board's JetPack ({board} and "
                 f"later: the CUDA {cuda} PyTorch wheels of NVIDIA's PyTorch for Jetson page, and torchvision built "
                 "against them); cat /etc/nv_tegra_release shows the L4T release (R32.4.x is JetPack 4.4); do not "
                 f"install a CUDA {wanted} toolkit beside JetPack's", [ctx.line_fact(lines[0])], lines[:1])
