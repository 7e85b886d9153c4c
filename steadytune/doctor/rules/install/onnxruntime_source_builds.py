"""onnxruntime built from source without the execution provider's switch: build.sh / build.bat compile only the CPU
provider unless a provider is asked for with its --use_* option; the paths to CUDA and cuDNN (--cuda_home,
--cudnn_home) alone enable nothing. So a self-built wheel that lists only CPUExecutionProvider, beside a build
command or its options, is rebuilt with the switch, not replaced by another package.

Source: onnxruntime.ai/docs/build/eps.html (CUDA: ./build.sh --use_cuda --cudnn_home <path> --cuda_home <path>,
.\\build.bat on Windows; TensorRT: --use_tensorrt --tensorrt_home; OpenVINO: --use_openvino <device>);
onnxruntime.ai/docs/build (the wheel: --build_wheel, then build/<OS>/<config>/dist/*.whl). Mined from
microsoft/onnxruntime PR 26994 (round 18, r18c). Checked v18b: the OpenVINO build page's
`./build.sh --config Release --use_openvino <hardware_option> --build_shared_lib --build_wheel`."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule

_MISSING = re.compile(r"(?i)'?(CUDA|Tensorrt|OpenVINO)ExecutionProvider'? is not in available provider")
# the build script, its options, or the user's word that the wheel is their own build
_SOURCE_BUILD = re.compile(r"(?i)\bbuild\.(?:sh|bat)\b|--build_wheel\b|--cuda_home\b|--cudnn_home\b|--tensorrt_home\b|"
                           r"--enable_pybind\b|\bbuil[td] (?:it |onnxruntime |ort )?from source\b|\bself[- ]built\b")
# provider -> its build switch and the paths it takes
_SWITCH = {"cuda": "--use_cuda --cuda_home <CUDA folder> --cudnn_home <cuDNN folder>",
           "tensorrt": "--use_cuda --use_tensorrt --cuda_home <CUDA folder> --cudnn_home <cuDNN folder> "
                       "--tensorrt_home <TensorRT folder>",
           "openvino": "--use_openvino CPU (or GPU, the device it is to run on)"}


@rule("torch-build")
def onnxruntime_built_without_the_provider(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _MISSING)
    text = _text(ctx)
    if not lines or not _SOURCE_BUILD.search(text):
        return None
    provider = _MISSING.search(lines[0].line).group(1).lower()
    switch = _SWITCH[provider]
    given = re.search(rf"--use_{'cuda' if provider == 'tensorrt' else provider}\b", text)
    script = ".\\build.bat" if on_windows(ctx, text) else "./build.sh"
    system = "Windows" if script.startswith(".\\") else "Linux"
    return _make("torch-build", f"onnxruntime was built without the {provider} execution provider",
                 f"the onnxruntime wheel is a source build, and build.sh compiles only the CPU provider unless its "
                 f"--use_{provider} switch is given; the CUDA / cuDNN paths alone enable nothing" +
                 (" (the switch is in the paste: check the wheel installed is the one that build made)" if given else ""),
                 f"rebuild with the provider's switch: {script} --config Release --build_wheel --parallel {switch}, "
                 f"then pip uninstall onnxruntime -y and pip install the new wheel from build/{system}/Release/dist/; "
                 "python -c \"import onnxruntime; print(onnxruntime.get_available_providers())\" must list "
                 f"{'Tensorrt' if provider == 'tensorrt' else provider.upper() if provider == 'cuda' else 'OpenVINO'}"
                 "ExecutionProvider", [ctx.line_fact(lines[0])], lines[:1])
