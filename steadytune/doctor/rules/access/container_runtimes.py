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
  - the toolkit's hook refused the device cgroup (rootless, LXC): no-cgroups = true (toolkit 1.14.0 ignored it);
    NVML's "Insufficient Permissions" on an SELinux host: relabel the driver's files (restorecon).
  - distrobox refusing the engine's own flags given before `--`; a container started without the NVIDIA runtime
    (CUDA's "driver version is insufficient" with a new enough host driver); a TrueNAS app without /dev/kfd.
  - a runtime docker calls unknown although daemon.json registers it: the daemon was not restarted after the edit;
    nvidia-container-cli taking a word of the GPU's name for a path to mount (libnvidia-container before 1.0.2).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.access.driver import _DRIVER_FOR_CUDA
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


# the container toolkit's hook refused the device cgroup: the engine runs without the right to edit it
_CGROUP_REFUSED = re.compile(r"(?i)failed to add device rules|bpf_prog_query\(BPF_CGROUP_DEVICE\) failed|"
                             r"cgroup/devices/\S*devices\.allow: permission denied")
# the toolkit's release as its own tools print it (nvidia-container-cli -V) or as a user names it
_TOOLKIT_RELEASE = re.compile(r"(?i)\b(?:cli|lib)-version:\s*(\d+\.\d+\.\d+)|nvidia-container-(?:toolkit|cli|runtime)"
                              r"\S*?[ :=_-]+v?(\d+\.\d+\.\d+)|\btoolkit\b.{0,30}\bv?(\d+\.\d+\.\d+)|"
                              r"\bwith v(1\.\d+\.\d+)\b")


def _cgroup_refused(ctx: Context, text: str) -> Optional[Diagnosis]:
    """nvidia-container-cli could not attach its device rules to the container's cgroup (cgroup v2: the BPF device
    program, bpf_prog_query ... operation not permitted; v1: devices.allow permission denied): the engine that
    started the container has no right to edit its device cgroup, which is so for rootless docker / podman and for
    an engine inside an unprivileged LXC container. NVIDIA's answer is the toolkit's no-cgroups = true
    (libnvidia-container#154, nvidia-docker#1155): the hook then leaves the cgroup alone and the devices are allowed by
    whoever owns it. Toolkit 1.14.0 ignored config.toml altogether, so the setting did not apply until 1.14.1
    (elezar in nvidia-container-toolkit#381: "the v1.14.0 release had a bug where settings in the config.toml were
    being ignored"; nvidia-container-toolkit#106)."""
    refused = _lines_matching(ctx, _CGROUP_REFUSED)
    if not refused:
        return None
    releases = [next(g for g in m.groups() if g) for m in _TOOLKIT_RELEASE.finditer(text)]
    evidence = [ctx.line_fact(refused[0])]
    if "1.14.0" in releases:
        return _first(_make("device-access", "toolkit 1.14.0 ignores config.toml, so no-cgroups never applies",
                            "the hook tried to edit the container's device cgroup although the engine may not (a "
                            "rootless or nested one); NVIDIA Container Toolkit 1.14.0 did not read "
                            "/etc/nvidia-container-runtime/config.toml at all, so no-cgroups = true set there is "
                            "ignored",
                            "upgrade the toolkit to 1.14.1 or newer (sudo apt install --only-upgrade "
                            "nvidia-container-toolkit libnvidia-container-tools libnvidia-container1; dnf upgrade the "
                            "same), keep no-cgroups = true under [nvidia-container-cli] in "
                            "/etc/nvidia-container-runtime/config.toml for the rootless engine, check nvidia-container-cli "
                            "-V, then run the container again", evidence, refused))
    lxc = re.search(r"(?i)\blxc\b|\bproxmox\b|-pve\b|\bincus\b|\blxd\b", text)
    where = ("an LXC container (the host keeps the device cgroup)" if lxc else
             "a rootless engine (the user's cgroup has no device controller to edit)")
    allow = ("the host's LXC config must already allow and mount them (lxc.cgroup2.devices.allow: c 195:* rwm and the "
             "nvidia-uvm major, lxc.mount.entry for /dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm)" if lxc else
             "a rootless engine passes them without it")
    return _first(_make("device-access", "the container engine may not edit the device cgroup",
                        f"the NVIDIA hook adds the GPU's device rules to the container's cgroup, and the engine runs "
                        f"without the right to do it: {where}",
                        "set no-cgroups = true under [nvidia-container-cli] in /etc/nvidia-container-runtime/config.toml "
                        "(sudo nvidia-ctk config --set nvidia-container-cli.no-cgroups --in-place with toolkit 1.14.4 "
                        "and newer), so the hook leaves the cgroup alone, and pass the device files in explicitly: "
                        "--device /dev/nvidia0 --device /dev/nvidiactl --device /dev/nvidia-uvm (" + allow + ")",
                        evidence, refused))


_NVML_REFUSED = re.compile(r"(?i)Failed to initialize NVML: Insufficient Permissions")
_SELINUX_HOST = re.compile(r"(?i)\bselinux\b|\bRHEL\b|\bRed ?Hat\b|\bcentos\b|\bfedora\b|\brocky\b|\balma ?linux\b|"
                           r"\.el\d+\b|\bel[789]\b|\boracle linux\b")


def _selinux_labels(ctx: Context, text: str) -> Optional[Diagnosis]:
    """NVML refuses the device files handed into a container ("Insufficient Permissions") on a host that enforces
    SELinux (a Red Hat family one, or SELinux named) while --privileged, which drops the label separation, works:
    the driver files and device nodes carry labels the container type (container_t) may not use. NVIDIA's answer
    (nvidia-docker#676) is to relabel them as the host's root: nvidia-container-cli -k list | restorecon -v -f -,
    or to run the container under a type allowed them."""
    refused = _lines_matching(ctx, _NVML_REFUSED)
    if not refused or not _SELINUX_HOST.search(text):
        return None
    return _first(_make("device-access", "SELinux labels keep the container from the NVIDIA device files",
                        "inside the container NVML may not open the NVIDIA device files and libraries the toolkit "
                        "mounted: on this SELinux host they carry labels the container's type (container_t) is not "
                        "allowed, which --privileged hides by turning the separation off",
                        "relabel the driver's files as root on the host: nvidia-container-cli -k list | sudo "
                        "restorecon -v -f - (and sudo restorecon -Rv /dev), then run the container again without "
                        "--privileged; or run it with --security-opt label=disable (or under NVIDIA's SELinux "
                        "module's type: --security-opt label=type:nvidia_container_t); check with ls -Z /dev/nvidia*",
                        [ctx.line_fact(refused[0])], refused))


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
    missing = _lines_matching(ctx, r"(?i)Unable to find group (\S+?):? no matching entries in group file|"
                                   r"no matching entries in group file")
    if not missing:
        return None
    # the group as the message names it, else as the command asked for it (--group-add render) or the prose does
    named = re.search(r"(?i)Unable to find group (\S+?):? no matching", missing[0].line) or \
        re.search(r"--group-add[ =]['\"]?([a-z_][\w-]*)", _text(ctx)) or re.search(r"找不到\s*([a-z_][\w-]*)\s*组", _text(ctx))
    if named is None:
        return None
    group = named.group(1).strip("'\"")
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


# cudart's error 35 (cudaErrorInsufficientDriver) in its words and number
_INSUFFICIENT = re.compile(r"(?i)driver version is insufficient for (?:the )?CUDA runtime|cudaErrorInsufficientDriver|"
                           r"\breturned 35\b|\(35 vs\. 0\)")
# the container asked for the GPU: the toolkit's flags, runtime, variable, compose and Kubernetes keys
_GPU_ASKED = re.compile(r"(?i)--gpus\b|--runtime[= ]nvidia|NVIDIA_VISIBLE_DEVICES|capabilities: *\[ *gpu|"
                        r"nvidia\.com/gpu|runtime: *nvidia|--device[= ]nvidia\.com")
_HOST_DRIVER = re.compile(r"(?i)Driver Version:?\s*(\d{3})\.\d+|NVIDIA-SMI\s+(\d{3})\.\d+|nvidia(?:-driver)?[- ](\d{3})"
                          r"\.\d+")
_CUDA_ASKED = re.compile(r"(?i)\bcuda[:\s-]*v?(1\d)\.(\d)\b|\bcu(1\d)(\d)\b")
_APPLIANCE = re.compile(r"(?i)\bunraid\b|\btruenas\b|\bcasaos\b|\bportainer\b|\bsynology\b")


def _container_without_driver(ctx: Context, text: str) -> Optional[Diagnosis]:
    """cudart's "driver version is insufficient" (error 35) inside a container whose host driver is new enough for
    any CUDA the paste names: cudart reports 35 also when it finds no libcuda at all, which is what a container run
    without the NVIDIA runtime has (the driver's libraries are mounted from the host only by the toolkit: NVIDIA's
    flx42 in nvidia-docker#24, "we need to mount the driver libraries from the host inside the container"; fixed with
    --gpus all in nvidia-docker#400). On appliance UIs (Unraid) the same is the template's --runtime=nvidia and
    NVIDIA_VISIBLE_DEVICES."""
    said = _lines_matching(ctx, _INSUFFICIENT)
    if not said or _GPU_ASKED.search(text) or _vendor(ctx) == "amd":
        return None
    host = _HOST_DRIVER.search(text)
    if not host:
        return None
    branch = int(next(g for g in host.groups() if g))
    runs = max((cuda for cuda, least in _DRIVER_FOR_CUDA if least <= branch), default=None)
    asked = [(int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4))) for m in _CUDA_ASKED.finditer(text)]
    if runs is None or runs < (12, 0) or any(a > runs for a in asked):
        return None   # a driver older than the CUDA named: the driver reading (update it, or an older build)
    appliance = _APPLIANCE.search(text)
    fix = ("start the container with the NVIDIA runtime and the GPU: docker run --gpus all ... (or --runtime=nvidia "
           "-e NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility; compose: "
           "deploy.resources.reservations.devices with capabilities: [gpu]), with the NVIDIA Container Toolkit "
           "installed on the host; check nvidia-smi inside the container")
    if appliance and appliance.group(0).lower() == "unraid":
        fix = ("in the container's Unraid template add --runtime=nvidia to Extra Parameters and the variables "
               "NVIDIA_VISIBLE_DEVICES=<the GPU's UUID from the Nvidia Driver plugin, or all> and "
               "NVIDIA_DRIVER_CAPABILITIES=all, then apply; elsewhere: " + fix)
    return _first(_make("device-access", "the container was started without the NVIDIA driver",
                        f"the host's driver ({branch}) runs CUDA up to {runs[0]}.{runs[1]}, yet CUDA inside the "
                        "container calls it insufficient: CUDA says so also when it finds no driver library at all, "
                        "and a container started without the NVIDIA runtime has none (the toolkit mounts the host's "
                        "libcuda and device files only for a container that asks for the GPU)",
                        fix, [ctx.line_fact(said[0])], said))


_KFD_ABSENT = re.compile(r"(?i)/dev/kfd\S*.{0,60}\b(?:not (?:present|there|available|passed|mounted|exist\w*)|missing|"
                         r"absent|disallowed|not allowed|refused)|\b(?:no|missing|without)\b.{0,20}/dev/kfd|"
                         r"kfd_device_exists\W+false")
_TRUENAS_RELEASE = re.compile(r"(?i)\b(?:TrueNAS|SCALE)\b(?: SCALE)?\W{0,3}(?:version\W{0,3})?(\d{2})\.(\d{2})")


def _truenas_without_kfd(ctx: Context, text: str) -> Optional[Diagnosis]:
    """A TrueNAS app given the AMD GPU ("Passthrough available (non-NVIDIA) GPUs") whose container has /dev/dri but
    no /dev/kfd, so ROCm inside finds no GPU; adding /dev/kfd by hand is refused, as the apps library keeps it on its
    disallowed device list (truenas/apps#2948). The middleware that decides whether to pass /dev/kfd with the GPU
    (kfd_device_exists) always said false when an AMD card was there until 25.10.0 (truenas/middleware#17293,
    "NAS-137792 / 25.10.0 / Fix 'kfd_device_exists' logic for non-NVIDIA gpu")."""
    if not re.search(r"(?i)\btruenas\b", text):
        return None
    absent = _lines_matching(ctx, _KFD_ABSENT)
    if not absent:
        return None
    release = _TRUENAS_RELEASE.search(text)
    if release and (int(release.group(1)), int(release.group(2))) >= (25, 10):
        return None
    return _first(_make("device-access", "the TrueNAS app platform does not pass /dev/kfd to the app",
                        "ROCm inside the app's container needs /dev/kfd as well as /dev/dri; this TrueNAS release's "
                        "apps middleware passes only /dev/dri with a non-NVIDIA GPU (its check for /dev/kfd always "
                        "came out false with an AMD card) and refuses /dev/kfd as an additional device",
                        "upgrade TrueNAS to 25.10 or later (its middleware passes /dev/kfd with the GPU), then edit "
                        "the app, keep GPU passthrough (non-NVIDIA) selected, and redeploy it; check ls -l /dev/kfd "
                        "inside the app's container (do not isolate the GPU: isolation is for VMs only)",
                        [ctx.line_fact(absent[0])], absent))


# distrobox's refusal of an option it does not know (its own parser: "ERROR: Invalid flag '--device'")
_DISTROBOX_REFUSED = re.compile(r"(?i)\bInvalid flag\W{0,3}(--[\w-]+)")
# the container engine's own options a user hands to distrobox create, with their values
_ENGINE_FLAGS = re.compile(r"--(?:device|group-add|security-opt|cap-add|ipc|shm-size|ulimit|env|gpus)[ =]\"?[^\s\\\"]+")

# podman / docker run options a GPU container is given, which distrobox create does not take as its own
_ENGINE_OPTIONS = ("--device", "--group-add", "--security-opt", "--cap-add", "--ipc", "--shm-size", "--ulimit", "--env",
                   "--gpus", "--runtime", "--privileged", "--userns", "--publish", "--network", "--mount", "--annotation")


def _distrobox_engine_flags(ctx: Context, text: str) -> Optional[Diagnosis]:
    """distrobox create refuses the container engine's own options (--device, --group-add, --security-opt) given
    among its own: it hands the engine only what follows a lone `--` or what --additional-flags carries (distrobox's
    docs/usage/distrobox-create.md: "--additional-flags/-a: additional flags to pass to the container manager
    command"; the `--` form is the one kyuz0/amd-strix-halo-toolboxes#102's maintainer restored in the README). The
    container is then not created, or created without the GPU's devices."""
    refused = _lines_matching(ctx, _DISTROBOX_REFUSED)
    if not refused or not re.search(r"(?i)\bdistrobox\b", text):
        return None
    flag = _DISTROBOX_REFUSED.search(refused[0].line).group(1)
    if flag.lower() not in _ENGINE_OPTIONS:
        return None   # not an option of the engine's (a typo, an older distrobox's own option): another reading
    given = list(dict.fromkeys(re.sub(r"^(--[\w-]+)=", r"\1 ", m.group(0)) for m in _ENGINE_FLAGS.finditer(text)))
    flags = " ".join(given) or f"{flag} ..."
    name = re.search(r"(?i)distrobox(?:-| )create\s+(?:--name\s+|-n\s+)?([\w.-]+)", text)
    box = name.group(1) if name and not name.group(1).startswith("-") else "<name>"
    image = re.search(r"(?i)(?:--image|-i)[ =](\S+)", text)
    return _first(_make("device-access", f"distrobox does not take the engine's {flag} among its own options",
                        f"distrobox create parses its own options and refuses {flag}, an option of the container "
                        "engine (podman / docker): the engine's options reach it only after a lone -- (or inside "
                        "--additional-flags), so the container with the GPU devices is never created",
                        f"put the engine's options after --: distrobox create {box} --image "
                        f"{image.group(1) if image else '<the image>'} -- {flags} (or the same inside "
                        f"--additional-flags \"{flags}\"); then distrobox enter {box} and check the GPU is listed "
                        "(rocminfo / nvidia-smi)", [ctx.line_fact(refused[0])], refused))


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


# docker refusing a runtime by name, and the places a paste shows that runtime already registered: daemon.json's
# "runtimes" block (or the toolkit's configure step run), while `docker info` still lists only runc
_RUNTIME_UNKNOWN = re.compile(r"(?i)unknown or invalid runtime name:?\s*([\w.-]+)")
_REGISTERED = r'(?is)"runtimes"\s*:\s*\{{\s*"{0}"|"default-runtime"\s*:\s*"{0}"|(?:nvidia|amd)-ctk runtime configure'
_DOCKER_INFO_RUNTIMES = re.compile(r"(?i)\bRuntimes:[ \t]*([^\r\n]*)")


def _runtime_not_loaded(ctx: Context, text: str) -> Optional[Diagnosis]:
    """docker says it knows no runtime of that name although daemon.json (pasted) already registers it, or the
    toolkit's configure step was run: the daemon reads daemon.json only when it starts, so the file was edited after
    it started and it was never restarted (docker info's Runtimes line, listing runc alone, shows the daemon's own
    view). A restart loads it; nothing needs installing."""
    said = _lines_matching(ctx, _RUNTIME_UNKNOWN)
    if not said:
        return None
    name = _RUNTIME_UNKNOWN.search(said[0].line).group(1)
    if not re.search(_REGISTERED.format(re.escape(name)), text):
        return None   # never registered: installing and configuring the toolkit is device_files' reading
    info = _DOCKER_INFO_RUNTIMES.search(text)
    if info and name in info.group(1):
        return None   # the daemon has it: the refusal comes from another daemon (a context, a snap docker)
    shown = f" (docker info lists only: {info.group(1).strip()})" if info else ""
    toolkit = "amd-ctk" if name == "amd" else "nvidia-ctk"
    wsl = re.search(r"(?i)\bwsl ?2?\b", text)
    return _first(_make("env-not-applied", f"docker's daemon has not loaded the {name} runtime",
                        f"daemon.json registers the {name} runtime, but the docker daemon reads that file only when "
                        f"it starts, and it was not restarted after the edit{shown}: the running daemon does not "
                        f"know {name}",
                        "restart the docker daemon so it reads /etc/docker/daemon.json: sudo systemctl restart docker"
                        + (" (a WSL distribution without systemd: sudo service docker restart; Docker Desktop: "
                           "restart Docker Desktop, whose Settings > Docker Engine holds its own daemon.json)"
                           if wsl else " (Docker Desktop: restart it; its Settings > Docker Engine holds its own "
                           "daemon.json)") +
                        f"; then docker info | grep -i runtime must list {name} (if the file does not parse, "
                        f"sudo {toolkit} runtime configure --runtime=docker writes it again)",
                        [ctx.line_fact(said[0])], said))


# nvidia-container-cli failing to stat a "path" that is a word of the GPU's name (/GeForce, /Tesla, /Quadro): old
# libnvidia-container releases misread the driver's information and took the name's first word for a file to mount
# (NVIDIA/nvidia-docker#957: fixed by libnvidia-container 1.0.2)
_STAT_NAME = re.compile(r"(?i)nvidia-container-cli: mount error: stat failed: /(GeForce|Tesla|Quadro|TITAN|NVIDIA|RTX)"
                        r"\b(?!/)")


def _cli_reads_a_name(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _STAT_NAME)
    if not said:
        return None
    word = _STAT_NAME.search(said[0].line).group(1)
    return _first(_make("device-access", "libnvidia-container takes a word of the GPU's name for a file",
                        f"/{word} is no file of the driver's: it is the first word of the GPU's name, which this "
                        "libnvidia-container release misread from the driver's information as a path to mount into "
                        "the container, so every GPU container fails to start",
                        "upgrade the container toolkit's library: libnvidia-container1 and libnvidia-container-tools "
                        "to 1.0.2 or newer (sudo apt-get install --only-upgrade libnvidia-container1 "
                        "libnvidia-container-tools nvidia-container-toolkit; yum/dnf update the same), then sudo "
                        "systemctl restart docker; nvidia-container-cli -V shows the release",
                        [ctx.line_fact(said[0])], said))


@rule("device-access")
def container_runtime_rules(ctx: Context) -> Optional[Diagnosis]:
    """The container's engine, not the host, withholds the GPU: its cgroup driver, its runtime's config, its device
    spec, its security policy, the image's group file, a toolbox recreated without the devices, --gpus on a machine
    without one."""
    text = _text(ctx)
    if not (_CONTAINED.search(text) or re.search(r"(?i)ramalama|avc:\s+denied|--gpus|--group-add|group file|"
                                                 r"nvidia-container-cli|\blxc\b|\bunraid\b|\btruenas\b", text)):
        return None
    for reading in (_selinux_denial, _group_not_in_image):
        found = reading(ctx)
        if found is not None:
            return found
    for reading in (_runtime_not_loaded, _cli_reads_a_name, _cgroup_refused, _selinux_labels, _distrobox_engine_flags, _container_without_driver,
                    _truenas_without_kfd, _gpus_without_a_gpu, _no_cgroups, _lost_after_a_while, _no_cdi_spec,
                    _toolbox_without_devices):
        found = reading(ctx, text)
        if found is not None:
            return found
    return None
