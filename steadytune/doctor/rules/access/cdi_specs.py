"""The Container Device Interface spec that podman (and docker, CRI-O, containerd with CDI) reads to give a container
its GPUs: generated once from the host's devices, it goes stale when they change (a render node renumbered, a driver
upgraded, a card added), and then names device files that are no longer there.

Sources: NVIDIA Container Toolkit docs, "Support for Container Device Interface" (generate the spec with
`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`; a new spec is needed after the device or driver
configuration changes; `nvidia-ctk cdi list` shows the names it defines); the AMD Container Toolkit docs (`amd-ctk cdi
generate`, the spec at /etc/cdi/amd.json); podman's "unresolvable CDI devices" for a name that no spec defines."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text


_STALE = re.compile(r"(?i)failed to stat CDI host device \W?(/dev/\S+?)\W?(?::|$|\s)|unresolvable CDI devices?\b|"
                    r"CDI device injection failed|failed to inject (?:CDI )?devices?.{0,80}\bCDI\b")
_VENDOR_KIND = re.compile(r"(?i)\b(nvidia|amd)\.com/gpu\b")


@rule("device-access")
def stale_cdi_spec(ctx: Context) -> Optional[Diagnosis]:
    """A CDI device that cannot be injected: the spec names devices the host no longer has, or none defines it."""
    said = _lines_matching(ctx, _STALE)
    if not said:
        return None
    text = _text(ctx)
    # the spec lists the device (nvidia-ctk cdi list shows it) and the engine still cannot resolve it: the engine
    # cannot read that spec (its version), not a stale one
    if re.search(r"(?i)Found \d+ CDI devices?|^\W*(?:nvidia|amd)\.com/gpu=\w+\s*$", text, re.M):
        return None
    # an unresolvable device under a podman older than 5: it cannot read the spec version the toolkit writes (the
    # install readings' podman_older_than_the_cdi_spec), whether or not the spec is current
    podman = re.search(r"(?i)\bpodman\S*\s+(?:version\s+)?(?:now\s+)?v?(\d+)\.\d+", text)
    if podman and int(podman.group(1)) < 5 and not any(_STALE.search(e.line).group(1) for e in said):
        return None
    kind = _VENDOR_KIND.search(text)
    vendor = kind.group(1).lower() if kind else ("amd" if re.search(r"(?i)\b(?:amd|rocm|radeon|instinct)\b", text)
                                                 else "nvidia")
    tool = "nvidia-ctk" if vendor == "nvidia" else "amd-ctk"
    spec = re.search(r"/(?:etc|var/run)/cdi/[\w.-]+\.(?:ya?ml|json)\b", text)
    output = spec.group(0) if spec else ("/etc/cdi/nvidia.yaml" if vendor == "nvidia" else "/etc/cdi/amd.json")
    missing = next((m.group(1) for m in map(_STALE.search, (e.line for e in said)) if m and m.group(1)), None)
    return _first(_make(
        "device-access", "the container's CDI spec does not match the host's GPUs",
        "the CDI spec the container engine reads was generated from the host's devices at another time"
        + (f": it names {missing}, which this host no longer has" if missing else
           ", or none was generated for this device name")
        + " (render nodes are renumbered when cards, drivers or boot order change), so the devices cannot be injected",
        f"regenerate the spec as root: sudo {tool} cdi generate --output={output} (again after every driver upgrade or "
        "hardware change)" + (", check the names it defines with nvidia-ctk cdi list" if tool == "nvidia-ctk" else "")
        + ", then rerun the container (rootless too: the spec is read from the system directory)",
        [], said))
