"""A simulator that validates one NVIDIA driver per release crashing under another driver branch (driver). Isaac Sim
(Omniverse Kit, its RTX renderer) names in each release's Technical Requirements the Linux driver it was validated
with; a newer branch than that one can crash it at start (the RTX SceneDB start-up crash of newer branches), which a
reinstall of Isaac Sim does not mend - the validated driver does, installed with NVIDIA's .run installer.

Table: Isaac Sim release -> its validated Linux driver. 5.1.0: 580.65.06 (isaac-sim/IsaacSim#646, the maintainer: the
595 branch is not validated for 5.1.0, install 580.65.06 with the .run installer, which supports the RTX 5070 Ti;
analogdevicesinc dex-01-sim-assets' compatibility page: "NVIDIA-validated 580.65.06 (R580) for Isaac Sim 5.1.0").
Other releases are left to their own requirements page (no value here that was not checked)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_VALIDATED = {"5.1": "580.65.06"}
_ISAAC_SIM = re.compile(r"(?i)\bIs+a+c[\s_-]?Sim\b|\bisaacsim\b")
_RELEASE = re.compile(r"(?i)(?:Is+a+c[\s_-]?Sim|isaacsim)(?:\s+version)?[\s:=v#]*\s*(\d+\.\d+)(?:\.\d+)?|"
                      r"^\W*(\d\.\d)\.\d\s*$")
_DRIVER = re.compile(r"(?i)\bDriver(?: Version)?\W{0,3}(\d{3}\.\d+(?:\.\d+)?)|\bNVIDIA-SMI (\d{3}\.\d+(?:\.\d+)?)")
_CRASH = re.compile(r"(?i)\bcrash\w*|segmentation fault|core dumped|\bSIGSEGV\b|fails? to (?:start|launch|open)|"
                    r"(?:won'?t|doesn'?t|does not|cannot|can'?t) (?:start|launch|open)|\bfreez\w*|hangs? at start")


@rule("driver")
def simulator_off_its_validated_driver(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Isaac Sim named with a release of the table, a driver shown that is not that release's validated
    one, and a crash or failed start said."""
    text = _text(ctx)
    if not _ISAAC_SIM.search(text):
        return None
    release = next((g for m in re.finditer(_RELEASE.pattern, text, re.M) for g in m.groups() if g and g in _VALIDATED),
                   None)
    driver = _DRIVER.search(text)
    said = _lines_matching(ctx, _CRASH)
    if release is None or driver is None or not said:
        return None
    installed = next(g for g in driver.groups() if g)
    validated = _VALIDATED[release]
    if installed == validated:
        return None
    return _first(_make(
        "driver", f"Isaac Sim {release} runs on a driver it was not validated with ({installed})",
        f"Isaac Sim {release} is validated with the Linux driver {validated}; driver {installed} is another branch, "
        "and Isaac Sim's RTX renderer can crash at start under a branch it was not validated with, whatever is "
        "reinstalled on the Isaac Sim side",
        f"install the validated driver {validated}: download NVIDIA-Linux-x86_64-{validated}.run from NVIDIA's Unix "
        "driver archive, remove the current driver (sudo apt purge 'nvidia-*' 'libnvidia-*' for a packaged one), "
        f"switch to a text console (sudo systemctl isolate multi-user.target), run sudo sh NVIDIA-Linux-x86_64-"
        f"{validated}.run, reboot; nvidia-smi must then show {validated}; keep apt from upgrading it (do not "
        "reinstall the distribution's nvidia-driver packages)",
        [], said[:1]))
