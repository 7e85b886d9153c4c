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


# nvidia-ctk's NVML load failing: "failed to initalize NVML: ERROR_LIBRARY_NOT_FOUND" (go-nvml's words, its typo too)
_NVML_NOT_FOUND = re.compile(r"(?i)(?:failed to initi?a?li[sz]e NVML|nvml\w*\W+init\w*\W+failed)\W{0,4}"
                             r"ERROR_LIBRARY_NOT_FOUND|ERROR_LIBRARY_NOT_FOUND")
# a driver installed under a root of its own: the GPU Operator's / a driver container's /run/nvidia/driver
_DRIVER_ROOT = re.compile(r"(?i)/run/nvidia/driver|driver[- ]container|gpu[- ]operator|--driver-root")


@rule("rocm-libs-missing")
def cdi_generate_without_nvml(ctx: Context) -> Optional[Diagnosis]:
    """`nvidia-ctk cdi generate` loads libnvidia-ml.so.1 to list the GPUs; with the driver installed by a driver
    container (the GPU Operator's, Fedora CoreOS / immutable hosts) the library lives under the driver's root,
    /run/nvidia/driver, not on the host's loader path, so NVML is not found. nvidia-ctk takes that root as
    --driver-root (NVIDIA Container Toolkit docs, "Support for Container Device Interface"; nvidia-ctk cdi generate
    --help)."""
    text = _text(ctx)
    if "nvidia-ctk" not in text.lower() and "cdi" not in text.lower():
        return None
    lines = _lines_matching(ctx, _NVML_NOT_FOUND)
    if not lines:
        return None
    root = re.search(r"(/run/nvidia/driver)\b", text)
    if _DRIVER_ROOT.search(text):
        where = root.group(1) if root else "/run/nvidia/driver"
        return _make("rocm-libs-missing", "nvidia-ctk does not find NVML under the driver container's root",
                     f"the NVIDIA driver here is installed by a driver container, whose files (libnvidia-ml.so.1 "
                     f"among them) live under {where}, not on the host's library path; nvidia-ctk looks on the host's",
                     f"tell nvidia-ctk where the driver is: sudo nvidia-ctk cdi generate --driver-root={where} "
                     "--output=/etc/cdi/nvidia.yaml (rather than editing /etc/ld.so.conf.d), then nvidia-ctk cdi list",
                     [ctx.line_fact(lines[0])], lines[:1])
    return _make("rocm-libs-missing", "nvidia-ctk does not find NVML",
                 "nvidia-ctk cdi generate loads the driver's libnvidia-ml.so.1, which is not on the loader's path: "
                 "the driver is not installed on this host, or under another root",
                 "install the NVIDIA driver on the host (nvidia-smi must run), or, where a driver container installs it, "
                 "pass its root: sudo nvidia-ctk cdi generate --driver-root=/run/nvidia/driver "
                 "--output=/etc/cdi/nvidia.yaml", [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# Docker's --gpus picking its AMD device driver and finding no AMD spec. From moby's source (daemon/devices_linux.go,
# devices_nvidia_linux.go, devices_amd_linux.go; moby/moby#52048, first in Docker 29.3.0): when dockerd starts it
# registers the NVIDIA --gpus driver only if nvidia-cdi-hook or nvidia-container-runtime-hook is on its PATH; without
# either, and with CDI on (Docker 29's default), it registers the AMD driver instead, whose CDI step takes the first
# known vendor among the CDI specs (nvidia.com before amd.com) and answers "AMD CDI spec not found" when that is not
# amd.com ("failed to discover GPU vendor from CDI" when there is none), unless amd-container-runtime is on its PATH.
# So the message means a CDI spec of NVIDIA's is there: on an NVIDIA host the toolkit's hooks were not found when the
# daemon started (installed after it, or elsewhere); on an AMD host a leftover NVIDIA spec shadows AMD's.
_AMD_SPEC_MISSING = re.compile(r"(?i)\bAMD CDI specs? (?:not found|missing)|no AMD CDI specs?\b")
_NVIDIA_SAID = re.compile(r"(?i)\bNVIDIA\b|\bGeForce\b|\b(?:RTX|GTX|Quadro|Tesla)\b|\bRTX ?A\d{4}\b|\b[AHL]\d{2,3}\b")


@rule("device-access")
def amd_cdi_spec_for_gpus(ctx: Context) -> Optional[Diagnosis]:
    """`--gpus` answered "AMD CDI spec not found": an NVIDIA card gets the nvidia runtime named (Unraid's way, where
    the driver plugin registers that runtime: stevezau/media_preview_generator#260, games-on-whales/wolf#386); an AMD
    card gets its CDI spec generated."""
    said = _lines_matching(ctx, _AMD_SPEC_MISSING)
    if not said:
        return None
    text = _text(ctx)
    if _NVIDIA_SAID.search(text) and not re.search(r"(?i)\b(?:Radeon|Instinct|ROCm)\b", text):
        unraid = bool(re.search(r"(?i)\bunraid\b", text))
        return _first(_make(
            "device-access", "docker's --gpus did not find the NVIDIA runtime",
            "dockerd gives --gpus to its NVIDIA driver only when the NVIDIA Container Toolkit's hooks "
            "(nvidia-container-runtime-hook, nvidia-cdi-hook) were on its PATH when the daemon started; not finding "
            "them"
            + (" (Unraid's NVIDIA driver plugin registers an nvidia runtime instead)" if unraid else "")
            + ", Docker 29.3 and newer hand --gpus to the AMD driver, which finds the host's CDI spec is NVIDIA's, "
            "not an AMD one",
            "drop --gpus all and name the runtime: --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all -e "
            "NVIDIA_DRIVER_CAPABILITIES=all (compose: runtime: nvidia with those two environment entries"
            + ("; Unraid: in the template's Extra Parameters, and NVIDIA_VISIBLE_DEVICES set to the GPU's UUID or all"
               if unraid else "")
            + "); or ask for the GPUs by the NVIDIA CDI spec this error implies is there: --device "
            "nvidia.com/gpu=all in place of --gpus all; where the NVIDIA Container Toolkit is installed, sudo "
            "nvidia-ctk runtime configure --runtime=docker and a docker restart (the daemon looks for the hooks only "
            "when it starts) make --gpus find it again", [], said))
    return _first(_make(
        "device-access", "docker's --gpus found no AMD CDI spec",
        "docker passes an AMD GPU for --gpus through the AMD Container Toolkit's CDI spec, but it takes the first GPU "
        "vendor among the host's CDI specs, nvidia.com before amd.com: an NVIDIA spec (a leftover nvidia.yaml) is "
        "there, so AMD's, if any, is never read",
        "generate it: sudo amd-ctk cdi generate --output=/etc/cdi/amd.json (the AMD Container Toolkit), and remove a "
        "leftover NVIDIA spec (/etc/cdi/nvidia.yaml, /var/run/cdi/nvidia*.yaml; docker reads nvidia.com's first), "
        "restart docker, then rerun; or --device amd.com/gpu=all in place of --gpus; or "
        "pass the GPU as its device files instead of --gpus: --device=/dev/kfd --device=/dev/dri --group-add video "
        "--group-add render", [], said))


# the OCI runtime (crun, runc) failing while it runs the CDI spec's hooks for an NVIDIA device: the toolkit's
# create-symlinks hook ("failed to create link", "unexpected link target") or the runtime's own one-line error
_CDI_NVIDIA = re.compile(r"(?i)--device[= ]nvidia\.com/gpu\b|\bnvidia\.com/gpu=|mode\s*=\s*\"?cdi\b|nvidia-cdi-hook")
_HOOK_FAILED = re.compile(r"(?i)\bOCI runtime (?:error|create failed)\b|error (?:executing|running) (?:createContainer )?"
                          r"hook|failed to create link|failed to check if link exists|unexpected link target")
_TOOLKIT_RELEASE = re.compile(r"(?i)(?:nvidia-container-toolkit(?:-base)?|nvidia-ctk|NVIDIA Container Toolkit CLI)"
                              r"\D{0,30}?(1\.\d+\.\d+)")


@rule("device-access")
def cdi_hook_failed(ctx: Context) -> Optional[Diagnosis]:
    """An NVIDIA GPU injected through CDI (podman --device nvidia.com/gpu=all, docker or containerd in cdi mode) whose
    container fails in the OCI runtime, with no stale device named: the spec's hooks (nvidia-cdi-hook create-symlinks,
    update-ldcache) failed. NVIDIA Container Toolkit 1.17.0's create-symlinks hook failed on links that already exist
    (NVIDIA/nvidia-container-toolkit#772, "[v1.17.0, mode = cdi] OCI runtime create failed: failed to create link";
    the fixed release is 1.17.1, container-device-interface#239), and a spec generated by another toolkit release
    names hook paths and arguments the installed one does not take. Decided by: the CDI device name or mode, and
    the runtime's failure."""
    text = _text(ctx)
    if not _CDI_NVIDIA.search(text) or _STALE.search(text):
        return None
    if re.search(r"(?i)nvidia-container-cli|nvml error|driver not loaded|unknown device", text):
        return None   # the runtime's error names its own cause (the driver, a device): those readings
    said = _lines_matching(ctx, _HOOK_FAILED)
    if not said:
        return None
    release = _TOOLKIT_RELEASE.search(text)
    version = tuple(int(p) for p in release.group(1).split(".")) if release else None
    update = ("" if version and version >= (1, 17, 1) else
              "update the NVIDIA Container Toolkit to 1.17.1 or newer (nvidia-container-toolkit and "
              "nvidia-container-toolkit-base together; 1.17.0's create-symlinks hook failed on existing links"
              + (f"; this host has {release.group(1)}" if release else "; nvidia-ctk --version shows the release")
              + "), then ")
    return _first(_make(
        "device-access", "the NVIDIA CDI spec's hooks fail in the container runtime",
        "the container gets the GPU through the CDI spec, whose hooks (nvidia-cdi-hook create-symlinks and "
        "update-ldcache) the OCI runtime runs as the container is created; a hook that fails aborts the start - "
        "NVIDIA Container Toolkit 1.17.0's create-symlinks hook did on links that already exist, and a spec generated "
        "by another toolkit release calls hooks the installed one does not match",
        update + "regenerate the spec with the installed toolkit: sudo nvidia-ctk cdi generate "
        "--output=/etc/cdi/nvidia.yaml (nvidia-ctk cdi list shows the names), and start the container again "
        "(podman run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi)",
        [], said[:1]))
