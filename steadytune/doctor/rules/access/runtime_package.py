"""docker's older refusal of a runtime, "Unknown runtime specified nvidia" (older daemons' wording; newer ones say
"unknown or invalid runtime name", which device_files.py and container_runtimes.py read), with nothing in the paste
showing the runtime registered: the NVIDIA Container Runtime is not installed at all, a missing package.

Where it comes from differs by machine: on a Jetson it is part of JetPack's components (nvidia-container, which the
nvidia-jetpack meta package installs; SDK Manager installs it after flashing), so a board flashed without the
components lacks it (dusty-nv/jetson-containers#122: sudo apt-get install nvidia-jetpack, then reboot); on a PC or
server it is the NVIDIA Container Toolkit, which `nvidia-ctk runtime configure --runtime=docker` registers in
/etc/docker/daemon.json (NVIDIA Container Toolkit install guide).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_UNKNOWN_SPECIFIED = re.compile(r"(?i)unknown runtime specified:?\s*nvidia\b")
_REGISTERED = re.compile(r'(?is)"runtimes"\s*:\s*\{\s*"nvidia"|"default-runtime"\s*:\s*"nvidia"|nvidia-ctk runtime '
                         r'configure')
_JETSON = re.compile(r"(?i)\bJetson\b|\bJetPack\b|\bL4T\b|\btegra\b|\bOrin\b|\bXavier\b|\bl4t-")


@rule("rocm-libs-missing")
def runtime_package_missing(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: docker's "Unknown runtime specified nvidia", and no daemon.json or configure step that registered
    the runtime (that one is the restart reading)."""
    lines = _lines_matching(ctx, _UNKNOWN_SPECIFIED)
    text = _text(ctx)
    if not lines or _REGISTERED.search(text):
        return None
    jetson = ("on this Jetson it comes with JetPack's components: sudo apt-get install nvidia-jetpack (or install the "
              "runtime components with SDK Manager after flashing), then reboot; re-flash with the components if "
              "apt cannot install them")
    pc = ("on a PC or server install the NVIDIA Container Toolkit (sudo apt-get install -y nvidia-container-toolkit), "
          "then sudo nvidia-ctk runtime configure --runtime=docker and sudo systemctl restart docker")
    fix = (f"{jetson}; ({pc})" if _JETSON.search(text) else
           f"install the NVIDIA Container Runtime: on a Jetson, sudo apt-get install nvidia-jetpack (JetPack's "
           f"components include it; or SDK Manager after flashing), then reboot; {pc}")
    return _make("rocm-libs-missing", "the NVIDIA Container Runtime is not installed",
                 "docker was asked for the nvidia runtime (--runtime nvidia), and its daemon knows no runtime of that "
                 "name: the NVIDIA Container Runtime that registers it is not installed",
                 fix + "; docker info | grep -i runtime must then list nvidia", [ctx.line_fact(lines[0])], lines[:1])
