"""A serialized TensorRT engine read on another GPU architecture than the one that built it (arch-missing): TensorRT
picks and compiles its kernels for the building GPU's compute capability, and refuses the plan elsewhere ("The engine
plan file is generated on an incompatible device, expecting compute 6.1 got compute 7.5, please rebuild"). An engine
downloaded, copied from another machine or built in CI is the usual way in; the fix is building it again on the GPU
that runs it, from the model (ONNX) rather than the engine file. TensorRT 8.6's hardware-compatibility mode
(--hardwareCompatibilityLevel=ampere+) makes one engine for every Ampere-or-newer GPU, so it is named only where both
GPUs are compute 8.0 or newer. (The release mismatch, "not compatible with this version of TensorRT", is
install/tensorrt_engines.py's.)

Sources: TensorRT developer guide ("Serialized engines are not portable across platforms"; "Hardware Compatibility",
TensorRT 8.6+, Ampere and later); NVIDIA/TensorRT#564 (an engine from a compute 7.5 card on a GTX 1060: the maintainer
said to rebuild it on the target device, confirmed). Checked round 19: trtexec's own help (NVIDIA/TensorRT
samples/common/sampleOptions.cpp: "--hardwareCompatibilityLevel=mode  Make the engine file compatible with other GPU
architectures", modes none / ampere+); the API's HardwareCompatibilityLevel::kAMPERE_PLUS ("only supported for engines
built on NVIDIA Ampere and later GPUs"); hardware and version compatibility both from TensorRT 8.6 (TensorRT developer
guide, "Version compatibility is supported from version 8.6")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_OTHER_DEVICE = re.compile(r"(?i)engine plan file is generated on an incompatible device|"
                           r"expecting compute (\d+\.\d+) got compute (\d+\.\d+)")


@rule("arch-missing")
def engine_from_another_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: TensorRT's own incompatible-device message."""
    said = _lines_matching(ctx, _OTHER_DEVICE)
    if not said:
        return None
    versions = re.search(r"(?i)expecting compute (\d+\.\d+) got compute (\d+\.\d+)", _text(ctx))
    here, built = (versions.group(1), versions.group(2)) if versions else (None, None)
    which = f" (this GPU is compute {here}; the engine was built on a compute {built} GPU)" if versions else ""
    portable = ""
    if versions and float(here) >= 8.0 and float(built) >= 8.0:
        portable = ("; to share one engine between Ampere-or-newer GPUs, build it with TensorRT 8.6+'s hardware "
                    "compatibility (trtexec --hardwareCompatibilityLevel=ampere+)")
    return _first(_make(
        "arch-missing", "the TensorRT engine was built on another GPU architecture",
        "a serialized TensorRT engine holds kernels chosen and compiled for the GPU that built it" + which +
        ", so TensorRT refuses to load it on this one",
        "rebuild the engine on the target device, the GPU that will run it, from the model rather than the engine file "
        "(trtexec --onnx=model.onnx --saveEngine=model.engine, or the project's own build / export script run on this "
        "machine); another TensorRT release is not needed" + portable, [], said[:1]))
