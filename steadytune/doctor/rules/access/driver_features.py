"""A CUDA runtime call the installed NVIDIA driver does not provide: cudaErrorCallRequiresNewerDriver, "API call is not
supported in the installed CUDA driver". Torch makes such a call mostly through the stream-ordered allocator
(cudaMallocAsync), which image apps switch on by themselves (ComfyUI's and Fooocus' launch code sets
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync on torch 2.x unless told not to) and which an old driver, or a card or
mode where the driver offers no memory pools, refuses. The fix is the app's own switch off (a table), the variable
cleared, or a driver new enough for the CUDA torch was built with.

Sources: CUDA runtime API error codes (cudaErrorCallRequiresNewerDriver = 36); ComfyUI's cli_args
(--disable-cuda-malloc) and cuda_malloc.py; Fooocus' args (--disable-async-cuda-allocation: lllyasviel/Fooocus
ldm_patched/modules/args_parser.py, checked round 19; lllyasviel/Fooocus#96, where commenting out the cuda_malloc()
line of its 2023 launch.py fixed "CUDA error: operation not supported" and lllyasviel answered that the latest version
removed it; the #95 this cited before was not checked against a source); Forge's --cuda-malloc (off unless asked for);
NVIDIA's CUDA toolkit release notes for the driver branch of each CUDA release (arch/cuda_builds._CUDA_MIN_DRIVER)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.cuda_builds import _CUDA_MIN_DRIVER
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_NEWER_DRIVER_CALL = re.compile(r"(?i)API call is not supported in the installed CUDA driver|"
                                r"cudaErrorCallRequiresNewerDriver|CUDA_ERROR_NOT_SUPPORTED.{0,80}cudaMallocAsync|"
                                r"cudaMallocAsync.{0,80}(?:not supported|requires? a newer driver)")

# (the app as a paste names it, its name, its switch that turns the async allocator off); an app that turns it on by
# default first, Forge (off unless --cuda-malloc is given) last
_ALLOCATOR_SWITCHES = (
    (r"(?i)\bFooocus\b|entry_with_update\.py", "Fooocus", "start it with --disable-async-cuda-allocation (python "
     "entry_with_update.py --disable-async-cuda-allocation; in run.bat after the script name)"),
    (r"(?i)\bSwarm\s?UI\b", "SwarmUI's ComfyUI backend", "add --disable-cuda-malloc to the backend's ExtraArgs "
     "(Server > Backends)"),
    (r"(?i)\bComfy\s?UI\b|comfy[/\\]|python_embeded|main\.py --", "ComfyUI", "start it with --disable-cuda-malloc "
     "(python main.py --disable-cuda-malloc; the portable package: add it to run_nvidia_gpu.bat)"),
    (r"(?i)stable-diffusion-webui-forge|\bForge\b", "Forge", "remove --cuda-malloc from COMMANDLINE_ARGS in "
     "webui-user.bat / webui-user.sh"),
)


def _torch_cuda(ctx: Context) -> Optional[tuple[int, int]]:
    """The CUDA torch was built with (+cu117, torch2.0.1+cu117), as (major, minor)."""
    m = re.search(r"\+cu(\d{1,2})(\d)\b", _text(ctx))
    return (int(m.group(1)), int(m.group(2))) if m else None


@rule("driver")
def call_the_driver_lacks(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the runtime's "API call is not supported in the installed CUDA driver" (or cudaMallocAsync refused)
    on an NVIDIA stack. The app named picks its own allocator switch; torch's CUDA picks the driver branch."""
    said = _lines_matching(ctx, _NEWER_DRIVER_CALL)
    if not said:
        return None
    text = _text(ctx)
    app = next(((name, switch) for names, name, switch in _ALLOCATOR_SWITCHES if re.search(names, text)), None)
    cuda = _torch_cuda(ctx)
    branch = _CUDA_MIN_DRIVER.get(cuda) if cuda else None
    driver = (f"update the NVIDIA driver to the {branch} branch or newer (torch's CUDA {cuda[0]}.{cuda[1]} build "
              "needs it; the newest Game Ready / Studio driver for the card is safest)" if branch else
              "update the NVIDIA driver to the newest release for the card")
    if app:
        name, switch = app
        allocator = (f"{name} turns on torch's asynchronous allocator (cudaMallocAsync), a call this driver does not "
                     f"provide: {switch}")
    else:
        allocator = ("turn torch's asynchronous allocator (cudaMallocAsync) off: remove backend:cudaMallocAsync from "
                     "PYTORCH_CUDA_ALLOC_CONF (unset it, or PYTORCH_CUDA_ALLOC_CONF=backend:native); an image app "
                     "sets it by itself: ComfyUI --disable-cuda-malloc, Fooocus --disable-async-cuda-allocation")
    runs = re.search(r"CUDA (?:UMD )?Version:?\s*(\d+)\.(\d+)", text)
    if runs and (int(runs.group(1)), int(runs.group(2))) < (11, 2):
        # (round 19, r19b) the driver runs CUDA 11.0 / 11.1 at most: the stream-ordered allocator (cudaMallocAsync,
        # memory pools) came with CUDA 11.2 (NVIDIA's CUDA 11.2 release notes and its blog "Using the NVIDIA CUDA
        # Stream-Ordered Memory Allocator"), so no allocator switch of torch's helps a program that calls it itself
        # (lmdeploy's TurboMind allocator, InternLM/lmdeploy#340): the driver is what must change. The branch of
        # CUDA 11.2 is 460 (arch/cuda_builds._CUDA_MIN_DRIVER). Checked round 19: CuPy's cupy.cuda.malloc_async docs
        # ("requires CUDA >= 11.2") and MLIR's CudaRuntimeWrappers ("the async version that was available since CUDA
        # 11.2"); NVIDIA's driver table gives CUDA 11.2.0 GA >= 460.27.03 (Linux) / 460.82 (Windows)
        said_runs = f"{runs.group(1)}.{runs.group(2)}"
        floor = _CUDA_MIN_DRIVER.get((11, 2))
        return _first(_make(
            "driver", f"the driver runs CUDA {said_runs}, older than the stream-ordered allocator",
            f"the installed NVIDIA driver runs CUDA {said_runs} at most (nvidia-smi's CUDA Version); the program calls "
            "the stream-ordered allocator (cudaMallocAsync / memory pools), which came with CUDA 11.2, so the driver "
            "answers that the call is not supported",
            f"update the NVIDIA driver to one for CUDA 11.2 or newer ({floor} branch or newer; the newest driver for the "
            "card is safest, as it also runs the CUDA the program was built with) and check "
            "nvidia-smi's CUDA Version afterwards; a program that calls cudaMallocAsync itself has no switch to avoid "
            f"it{'; ' + allocator if app else ''}", [ctx.line_fact(said[0])], said))
    # (it leads: the runtime's own code names the cause, where the driver family's general reading guesses)
    return _first(_make("driver", "a CUDA call the installed driver does not provide",
                 "the CUDA runtime asked the driver for a call it does not have (cudaErrorCallRequiresNewerDriver): "
                 "the driver is older than the runtime's feature, most often the asynchronous memory allocator "
                 "(cudaMallocAsync) that image apps switch on",
                 f"{allocator}; or {driver}", [ctx.line_fact(said[0])], said))
