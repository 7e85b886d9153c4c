"""A Rust program built with cargo whose --device option offers only the CPU: clap lists the values the binary was
compiled with ("invalid value 'cuda' for '--device <DEVICE>'  [possible values: cpu]"), and the GPU backends are cargo
features that a plain `cargo build` leaves out. The fix is a build with the backend's feature, not a driver or CUDA
change: the binary has no GPU code to use them.

Sources: TabbyML/tabby's Dockerfiles and build scripts (cargo build --features cuda --release; its GPU features cuda,
rocm, vulkan; checked v18b: a public Tabby build guide's `cargo build --features cuda --release --package tabby`);
clap's "possible values" error. Mined from TabbyML/tabby#1163 (round 18, r18c)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

# clap refusing a GPU device value, and the values it offers (the next line, or the same one)
_REFUSED = re.compile(r"(?i)invalid value '(cuda|rocm|vulkan|metal)' for '--device")
_OFFERED = re.compile(r"(?i)\[possible values:\s*([^\]]*)\]")
# a binary of cargo's own build tree, or cargo named
_CARGO = re.compile(r"(?i)\btarget[/\\](?:debug|release)[/\\]|\bcargo\s+(?:build|run|install)\b")


@rule("torch-build")
def cargo_build_without_the_gpu_feature(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _REFUSED)
    text = _text(ctx)
    if not lines or not _CARGO.search(text):
        return None
    asked = _REFUSED.search(lines[0].line).group(1).lower()
    offered = _OFFERED.search(text)
    values = offered.group(1).strip() if offered else ""
    if asked in values.lower().replace(" ", "").split(","):
        return None   # the binary has the backend: the refusal is about something else
    program = re.search(r"(?i)target[/\\](?:debug|release)[/\\](\w[\w-]*)", text)
    name = program.group(1) if program else "the program"
    return _make("torch-build", f"{name} was built without its {asked} feature",
                 f"{name} offers --device {values or 'cpu'} only: its GPU backends are cargo features, and the "
                 f"binary was built without the {asked} one, so no driver or CUDA on the machine can make it use the GPU",
                 f"build it again with the backend's feature: cargo build --release --features {asked} (as the "
                 f"project's Dockerfile builds it; add the features it already used, comma-separated), then run "
                 f"target/release/{name if program else '<program>'} with --device {asked}",
                 [ctx.line_fact(lines[0])], lines[:1])
