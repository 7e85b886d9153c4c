"""A container runtime's own rules for the GPU devices it passes: what the engine, its cgroup driver, its device
spec (CDI), its security policy (SELinux) and the image's group file decide, with the host's driver and groups fine.

  - Docker's systemd cgroup driver: a systemd reload rewrites the container's device cgroup and drops the NVIDIA
    device nodes the toolkit added, so a container that had the GPU loses it after a while (NVML's "Unknown Error",
    CUDA error 800, a server falling back to the CPU). NVIDIA's container toolkit troubleshooting and Ollama's
    docs/troubleshooting.md give the fix: "exec-opts": ["native.cgroupdriver=cgroupfs"] in /etc/docker/daemon.json.
  - the toolkit's no-cgroups = true (in /etc/nvidia-container-runtime/config.toml, meant for rootless containers):
    a root docker container is then not granted the devices, and NVML says the access is blocked.
  - podman and the tools on it (RamaLama, toolbox) pass an NVIDIA GPU through CDI only: without the spec nvidia-ctk
    generates (/etc/cdi/nvidia.yaml) they run on the CPU (NVIDIA Container Toolkit docs, "Support for Container
    Device Interface"; RamaLama's docs/ramalama-cuda.7.md).
  - SELinux's container_t denied the GPU device's type (dri_device_t): container-selinux's policy grants it
    (v2.213.0 added the map permission on dri_device_t).
  - `--group-add NAME` resolves NAME in the image's /etc/group, not the host's: an image without that group fails
    to start; a number always works.
  - a distrobox / toolbox container created (or recreated by a refresh) without the GPU's device flags.
  - `--gpus` on a machine without an NVIDIA GPU (a CPU image needs no GPU runtime at all).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (
    _CONTAINED,
    Context,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    _text,
    _vendor,
    rule,
)


# a GPU that worked in the container and is gone after a while, in users' words
_LOST_LATER = re.compile(r"(?i)after (?:some |a )?(?:idle|idling|inactivity|being idle|a while|some time|sometime|a few "
                         r"(?:hours|minutes|days)|several hours|hours)|after (?:being )?idle|idle (?:for )?(?:some|a) ?time|"
                         r"(?:have|need) to restart the (?:docker )?container every ?time|works? (?:at first|initially)"
                         r".{0,60}(?:then|later|after)|at first.{0,120}after a while")
_LOST_SAID = re.compile(r"(?i)Failed to initialize NVML: Unknown Error|device context 800|CUDA error 800|"
                        r"(?:error|code)[ =:]+800\b|library=cpu|CPU buffer size|falls? back to (?:the )?CPU|"
                        r"(?:fails?|failing) to (?:us(?:e|ing)|initiate|initiali[sz]e|detect|find) (?:the |my )?gpu|"
                        r"(?:not|no longer|stops?) us(?:e|es|ing) (?:the )?GPU|GPU (?:is )?(?:unavailable|not available)")
_DOCKER = re.compile(r"(?i)\bdocker\b|\bcontainers?\b|\bcompose\b")


def _lost_after_a_while(ctx: Context, text: str) -> Optional[Diagnosis]:
    if not (_DOCKER.search(text) and _LOST_LATER.search(text)) or _vendor(ctx) == "amd":
        return None
    lost = _lines_matching(ctx, _LOST_SAID)   # the GPU itself lost, not any failure that comes after a while
    if not lost:
        return None
    podman = re.search(r"(?i)\bpodman\b", text) and not re.search(r"(?i)\bdocker\b", text)
    fix = ('set docker\'s cgroup driver to cgroupfs: add "exec-opts": ["native.cgroupdriver=cgroupfs"] to '
           "/etc/docker/daemon.json, then sudo systemctl restart docker and recreate the container; or keep systemd "
           "and let the toolkit pass the device nodes as /dev/char links: sudo nvidia-ctk system "
           "create-dev-char-symlinks --create-all (a udev rule runs it at boot)")
    if podman:
        fix = ("pass the GPU through CDI (sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml; podman run "
               "--device nvidia.com/gpu=all), which survives a systemd reload; with docker: " + fix)
    return _make("device-access", "the container loses the GPU when systemd reloads",
                 "under docker's systemd cgroup driver a systemd daemon-reload (a package update, a timer) rewrites the "
                 "container's device cgroup and drops the NVIDIA device nodes the toolkit added at start: the GPU "
                 "works, then after a while the container cannot open it (NVML: Unknown Error, CUDA error 800) and the "
                 "program falls back to the CPU until the container restarts", fix, [ctx.line_fact(lost[0])], lost)


def _no_cgroups(ctx: Context, text: str) -> Optional[Diagnosis]:
    blocked = _lines_matching(ctx, r"(?i)GPU access blocked by the operating system")
    outside = re.search(r"(?i)nvidia-smi works\b|works (?:well|fine) (?:in|on) (?:wsl|the host)|(?:in|inside|within) "
                        r"(?:the |a |my )?(?:docker )?container|docker container", text)
    if not blocked or not outside or not re.search(r"(?i)\bdocker\b|nvidia[-_]container", text):
        return None
    return _first(_make("device-access", "the container runtime does not grant the GPU devices",
                        "the GPU works outside the container and NVML inside it is refused: the NVIDIA container "
                        "runtime is set to no-cgroups = true (meant for rootless containers), so a container run by "
                        "the docker daemon is given no access to the GPU devices",
                        "in /etc/nvidia-container-runtime/config.toml set no-cgroups = false (sudo nvidia-ctk config "
                        "--set nvidia-container-cli.no-cgroups=false --in-place), then sudo systemctl restart docker "
                        "(under WSL 2: wsl --shutdown and start again) and run the container with --gpus all",
                        [ctx.line_fact(blocked[0])], blocked))


_PODMAN_FAMILY = re.compile(r"(?i)\bramalama\b|\bpodman\b|\btoolbox\b|CDISpecDirs")
_NVIDIA_SAID = re.compile(r"(?i)\bnvidia\b|\bcuda\b|GeForce|\bRTX\b")
_UNUSED = re.compile(r"(?i)(?:not|isn.t|doesn.t|does not|don.t|never) (?:being )?us(?:e|es|ing) (?:the |my |any )?GPU|"
                     r"GPU (?:is )?not (?:being )?used|no GPU usage|runs? on (?:the )?CPU|\"?Accelerator\"?: ?-1|"
                     r"CDISpecDirs\"?: ?\[\]")


def _no_cdi_spec(ctx: Context, text: str) -> Optional[Diagnosis]:
    if not (_PODMAN_FAMILY.search(text) and _NVIDIA_SAID.search(text)) or _vendor(ctx) == "amd":
        return None
    unused = _lines_matching(ctx, _UNUSED)
    if not unused or re.search(r"(?i)failed to stat CDI host device|Found [1-9]\d* CDI devices|unresolvable CDI", text):
        # a spec there but stale or unreadable (a device that moved, a spec version the engine cannot parse) is
        # wheels' reading of the toolkit's release
        return None
    tool = "RamaLama" if re.search(r"(?i)ramalama", text) else "podman"
    return _make("device-access", f"{tool} has no CDI spec for the NVIDIA GPU",
                 f"{tool} passes an NVIDIA GPU into its container through the Container Device Interface only; no CDI "
                 "spec for it exists (the spec folders list nothing), so the container runs without the GPU",
                 "generate the spec with the NVIDIA Container Toolkit: sudo nvidia-ctk cdi generate --output=/etc/cdi/"
                 "nvidia.yaml (again after every driver update), check nvidia-ctk cdi list shows nvidia.com/gpu=all, "
                 f"then start {tool} again" + (" (podman run --device nvidia.com/gpu=all ...)" if tool == "podman" else ""),
                 [ctx.line_fact(unused[0])], unused)


_AVC_DEVICE = re.compile(r"(?i)avc:\s+denied\b.*\b(?:container_t|container_runtime_t)\b.*\b(?:dri_device_t|"
                         r"xserver_misc_device_t|kfd_device_t|device_t|nvidia\w*_t)\b|avc:\s+denied\b.*?/dev/(?:dri|kfd|nvidia)")


def _selinux_denial(ctx: Context) -> Optional[Diagnosis]:
    denied = _lines_matching(ctx, _AVC_DEVICE)
    if not denied:
        return None
    return _first(_make("device-access", "SELinux denies the container the GPU device",
                        "the device was passed into the container, but SELinux's policy for containers (container_t) "
                        "does not allow it the GPU device's type (the audit log's avc: denied line names both)",
                        "update the container SELinux policy: sudo dnf upgrade container-selinux (v2.213.0 and newer "
                        "let containers map /dev/dri render nodes; setsebool -P container_use_devices=1 where the "
                        "boolean exists); meanwhile run with --security-opt label=disable rather than setenforce 0",
                        [ctx.line_fact(denied[0])], denied))


def _group_not_in_image(ctx: Context) -> Optional[Diagnosis]:
    missing = _lines_matching(ctx, r"(?i)Unable to find group (\S+?):? no matching entries in group file")
    if not missing:
        return None
    group = re.search(r"(?i)Unable to find group (\S+?):? no matching", missing[0].line).group(1).strip("'\"")
    return _first(_make("device-access", f"the image has no group named {group}",
                        f"--group-add {group} (or group_add in compose) looks the name up in the image's /etc/group, "
                        f"not the host's; this image has no {group} group, so the container does not start",
                        f"pass the host's group by number: --group-add $(getent group {group} | cut -d: -f3) (compose: "
                        f"group_add: [\"<that number>\"]), or create the group in the image (RUN groupadd -r {group} "
                        "in the Dockerfile, and add the user to it)", [ctx.line_fact(missing[0])], missing))


_TOOLBOX = re.compile(r"(?i)\bdistrobox\b|\btoolbox\b")
_RECREATED = re.compile(r"(?i)refresh\w*|re-?creat\w*|re-?pull\w*|upgrad\w*|updat\w* the (?:container|image|toolbox)|"
                        r"new (?:image|container)")
_NO_DEVICES = re.compile(r"(?i)(?:can ?not|can.t|cannot|doesn.t|does not|unable to|fails? to|won.t|no longer) "
                         r"(?:find|see|detect|use|list)s?\b.{0,20}\b(?:rocm |the |any |my )?(?:gpu|device|rocm)s?|"
                         r"no (?:rocm |hip |gpu )?devices? (?:found|detected)|hipErrorNoDevice|no ROCm-capable device|"
                         r"No HIP GPUs are available|ggml_cuda_init: failed")


def _toolbox_without_devices(ctx: Context, text: str) -> Optional[Diagnosis]:
    if not (_TOOLBOX.search(text) and _RECREATED.search(text)) or _vendor(ctx) == "nvidia":
        return None
    lost = _lines_matching(ctx, _NO_DEVICES)
    if not lost or not re.search(r"(?i)\brocm\b|\bhip\b|\bamd\b|radeon|/dev/kfd|\bgfx\d", text):
        return None
    name = re.search(r"(?i)distrobox (?:enter|create|rm)\s+(?:--name\s+)?([\w.-]+)", text)
    box = name.group(1) if name else "<name>"
    return _make("device-access", "the recreated container has no GPU devices",
                 "the container was created again (a refresh, a new image) without the flags that pass the GPU: "
                 "ROCm inside needs /dev/kfd and /dev/dri and the video and render groups, which the new one lacks",
                 f"remove it and create it again with the device flags after --: distrobox rm {box}; distrobox create "
                 f"{box} --image <the image> -- --device /dev/dri --device /dev/kfd --group-add video --group-add "
                 "render --security-opt seccomp=unconfined (toolbox: the same flags to podman create); then enter it "
                 "and check rocminfo lists the GPU", [ctx.line_fact(lost[0])], lost)


_NO_GPU_HERE = re.compile(r"(?i)(?:machine|server|host|box|computer|laptop|vm|instance) (?:without|with no|has no|that "
                          r"has no) (?:a )?(?:gpu|graphics card|nvidia)|\bno (?:gpu|graphics card|nvidia gpu)s?\b(?: "
                          r"(?:card|here|on (?:this|the|my)))|\bcpu[- ]only\b|:cpu[-\w.]*\b|\bcpu-\d[\w.]*|"
                          r"\bwhy would the cpu")


def _gpus_without_a_gpu(ctx: Context, text: str) -> Optional[Diagnosis]:
    refused = _lines_matching(ctx, r'could not select device driver "" with capabilities: \[\[gpu\]\]')
    if not refused or not _NO_GPU_HERE.search(text) or not re.search(r"--gpus", text):
        return None
    return _first(_make("device-access", "--gpus asks for a GPU this machine does not have",
                        "docker's --gpus asks the NVIDIA Container Toolkit for a GPU; on a machine without an NVIDIA "
                        "GPU (and a CPU image that needs none) there is nothing to give, and docker refuses to start",
                        "remove --gpus all from the docker run command (compose: the deploy.resources.reservations."
                        "devices entry): the CPU image runs without it", [ctx.line_fact(refused[0])], refused))


@rule("device-access")
def container_runtime_rules(ctx: Context) -> Optional[Diagnosis]:
    """The container's engine, not the host, withholds the GPU: its cgroup driver, its runtime's config, its device
    spec, its security policy, the image's group file, a toolbox recreated without the devices, --gpus on a machine
    without one."""
    text = _text(ctx)
    if not (_CONTAINED.search(text) or re.search(r"(?i)ramalama|avc:\s+denied|--gpus|--group-add|group file", text)):
        return None
    for reading in (_selinux_denial, _group_not_in_image):
        found = reading(ctx)
        if found is not None:
            return found
    for reading in (_gpus_without_a_gpu, _no_cgroups, _lost_after_a_while, _no_cdi_spec, _toolbox_without_devices):
        found = reading(ctx, text)
        if found is not None:
            return found
    return None
