"""A ROCm torch built for one ROCm release crashing inside the HSA runtime of another that the system provides: the
torch wheel's HIP libraries were built against its own ROCm (+rocm5.4.2), while the process loads the system's
runtime (libhsa-runtime64 of a newer rocm-runtime: NixOS's ROCm packages, a LD_LIBRARY_PATH at /opt/rocm-X), and the
two disagree inside rocr:: (a segfault in hsa_amd_memory_lock_to_pool, say). The torch built for the system's ROCm
release matches it. Apps that install their own torch take it through their own knob (the web UI's TORCH_COMMAND).
Sources: AUTOMATIC1111/stable-diffusion-webui#15464 (torch 2.0.1+rocm5.4.2 on rocm-runtime 5.7.2 segfaulted; the
rocm5.7 wheels through TORCH_COMMAND fixed it); the ROCm indexes each torch release was published on (fixes.py's
TORCH_ROCM_INDEXES, from pytorch.org's previous-versions page)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import TORCH_ROCM_INDEXES
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.app_torch import app_named


# the system's ROCm runtime, as packages and paths name it (not the torch's own +rocm tag)
_SYSTEM_ROCM = re.compile(r"(?i)\brocm-runtime[-_ ]?v?(\d+\.\d+)|\bhsa-rocr(?:-dev)?[-_ ]?v?(\d+\.\d+)|/opt/rocm-(\d+\.\d+)|"
                          r"\brocm-hip-runtime[-_ ]?v?(\d+\.\d+)|\bROCm (\d+\.\d+)(?:\.\d+)? (?:is )?installed\b|"
                          r"\bsystem(?:'s)? ROCm (\d+\.\d+)")
# the crash inside the HSA runtime (its C++ namespace, its hsa_* entry points) or a plain segfault beside it
_RUNTIME_CRASH = re.compile(r"(?i)\brocr::\w|\bin hsa_\w+|libhsa-runtime64\.so\S*.{0,40}(?:segfault|SIGSEGV)|"
                            r"segfault in `?(?:rocr|hsa_)")


def _index_for(release: str) -> Optional[str]:
    """The pytorch.org ROCm index for a system ROCm release ("5.7" -> rocm5.7), where some torch was published on it."""
    for indexes in reversed(TORCH_ROCM_INDEXES.values()):
        for index in indexes:
            if re.fullmatch(rf"rocm{re.escape(release)}(?:\.\d+)?", index):
                return index
    return None


@rule("abi-mismatch")
def rocm_torch_on_another_runtime(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a +rocm torch, a system ROCm runtime of another release, and a crash inside the HSA runtime."""
    torch = next((v for v in ctx.sheet.values("torch") if "+rocm" in v), None)
    system = _SYSTEM_ROCM.search(_text(ctx))
    if torch is None or system is None:
        return None
    built = re.search(r"\+rocm(\d+\.\d+)", torch).group(1)
    release = next(g for g in system.groups() if g)
    if release == built:
        return None
    crash = _lines_matching(ctx, _RUNTIME_CRASH)
    if not crash:
        return None
    index = _index_for(release)
    if index is None:
        return None
    command = f"pip install torch torchvision --index-url https://download.pytorch.org/whl/{index}"
    app = app_named(_text(ctx))
    if app is not None and "TORCH_COMMAND" in app.knob:
        fix = (f"have {app.name} install the torch of the system's ROCm {release}: in webui-user.sh export "
               f"TORCH_COMMAND=\"{command}\", delete the venv folder and start it again")
    else:
        # (a default torch the paste calls the program's own, "the default torch==X": an app's install chose it, so
        # its knob is named beside the plain command - the web UI's TORCH_COMMAND, the commonest such app)
        fix = (f"install the torch built for the system's ROCm {release} in this environment: {command} (an app that "
               "installs its own torch, such as the Stable Diffusion web UI, takes it through its knob: export "
               f"TORCH_COMMAND=\"{command}\" in webui-user.sh, then delete its venv)")
    return _make("abi-mismatch", f"a torch built for ROCm {built} on the system's ROCm {release} runtime",
                 f"torch {torch} was built against ROCm {built}, but the process runs on the system's ROCm {release} "
                 "runtime (libhsa-runtime64), and the two disagree inside it (the crash is in rocr:: / hsa_*)",
                 fix + f"; or run on a ROCm {built} runtime instead", [ctx.line_fact(crash[0])], crash[:1])
