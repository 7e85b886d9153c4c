"""The device files and their groups: /dev/kfd missing or locked, a KFD older than the GPU, groups the user
lacks, ids a user namespace does not map, a service user or a pod without the GPU."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.facts import Fact
from steadytune.hardware.gpu_facts import OFFICIAL_WHEEL_ARCHS
from steadytune.doctor.rules.base import (
    _CONTAINED,
    NOT_DETECTED,
    Context,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    _nvidia_gpu,
    rule,
    _text,
    _vendor,
)

# docker installed as a snap: its install line, its "from Canonical" banner, its snap paths
_SNAP_DOCKER = re.compile(r"(?i)\bsnap (?:install|refresh|list|info|restart)\b[^\n]{0,20}\bdocker\b|^docker [\d.]+ from "
                          r"Canonical|/(?:var/)?snap/(?:bin/)?docker\b", re.M)


# the kubelet's static CPU manager, as a flag or its KubeletConfiguration key
# NVML's "Unknown Error" in a container, as printed or retold ("NVML failed to initialize with an unknown error")
_NVML_UNKNOWN = (r"(?i)Failed to initialize NVML: Unknown Error|\bNVML\b.{0,20}\bfail\w* to initiali[sz]e\b.{0,30}"
                 r"\bunknown error")
_CPU_MANAGER_STATIC = re.compile(r"(?i)--cpu-manager-policy[= ]static\b|cpuManagerPolicy\W{0,3}static\b")


# ---------------------------------------------------------------------------------------------------------
# The process cannot reach the GPU
# ---------------------------------------------------------------------------------------------------------

_DEVICE_LISTING = re.compile(r"^c[rwx-]{9}\S*\s+\d+\s+\S+\s+(\S+)\s+\d+,\s*\d+.*?(/dev/\S+|renderD\d+|kfd)\s*$")



# `ls -l` of a device node whose owner and group are the overflow ids (nobody / nogroup / 65534): inside a user
# namespace, a host id with no mapping shows as the overflow id
_UNMAPPED_NODE = re.compile(r"^\s*c[rwx-]{9}\S*\s+\d+\s+(?:nobody|65534)\s+(?:nobody|nogroup|65534)\s+\d+,")
_ROOTLESS = re.compile(r"(?i)\brootless\b|\bpodman\b|\bkeep-groups\b|--userns|\btoolbox\b|\bdistrobox\b")


def _unmapped_group(ctx: Context) -> Optional[Diagnosis]:
    """A rootless container (podman, toolbox, distrobox) where the GPU's device nodes show as nobody/nogroup: the
    host group that owns them (render, video) is not mapped into the user namespace, so the container's process is
    not in it whatever --group-add says. Passing the host user's supplementary groups through is podman's
    --group-add keep-groups, which only the crun runtime implements (runc ignores it)."""
    text = _text(ctx)
    nodes = _lines_matching(ctx, _UNMAPPED_NODE.pattern)
    said = _lines_matching(ctx, r"(?i)\brootless\b.{0,80}\b(?:devices?|GPUs?|/dev/\w+|renderD\d*|kfd)\b|"
                                r"\b(?:devices?|GPUs?|groups?)\b.{0,60}\brootless\b")
    if not nodes and not (said and re.search(r"(?i)\bgroups?\b|keep-groups|nobody|nogroup", text)):
        return None
    if not _ROOTLESS.search(text) and not (nodes and _CONTAINED.search(text)):
        return None
    return _make("device-access", "the rootless container does not carry the host's GPU groups",
                 "inside the rootless container the GPU's device nodes show as nobody/nogroup: the host group that "
                 "owns them (render, video) is not mapped into the user namespace, so the process is not in it and "
                 "may not open them",
                 "run podman with the crun runtime and --group-add keep-groups (it keeps the host user's own groups; "
                 "runc ignores it): set runtime = \"crun\" under [engine] in ~/.config/containers/containers.conf (or "
                 "podman run --runtime crun --group-add keep-groups --device /dev/kfd --device /dev/dri ...), with the "
                 "host user in render and video (sudo usermod -aG render,video $USER, then log in again)",
                 [], nodes + said + ctx.of("device-access") + ctx.no_gpu())


_KUBERNETES = re.compile(r"(?i)\bkubernetes\b|\bk8s\b|\bkubectl\b|\bhelm\b|\bk3s\b|\bpods?\b|\b(?:nvidia|amd)\.com/gpu\b|"
                         r"device[- ]plugin|\bGPU operator\b")


def _kubernetes_without_gpu(ctx: Context, text: str) -> Optional[Diagnosis]:
    """A pod that finds no GPU: Kubernetes hands GPUs out only through the vendor's device plugin and the pod's
    resource limit (nvidia.com/gpu, amd.com/gpu); the NVIDIA plugin never gives out an AMD GPU."""
    if not _KUBERNETES.search(text) or ctx.of("device-access") or ctx.sheet.of("device_node"):
        return None   # a device refused or lost, or listed inside the pod, is another reading (groups, the runtime)
    if re.search(r"(?i)\bnouveau\b(?!\W{0,20}(?:is |was )?(?:not\b|disabled|absent|gone|unloaded))", text):
        return None   # the inbox driver holding the GPU under the node: access/inbox_driver's reading
    failing = ctx.no_gpu() + ctx.of("visibility") + _lines_matching(
        ctx, r"Found no NVIDIA driver|(?i:no GPUs? (?:found|detected|available)|(?:not|doesn.t|does not|can.t|cannot) "
             r"(?:see|find|detect|use)\w* (?:the |any |my )?GPU)")
    if not failing:
        return None
    if _vendor(ctx) == "amd" or re.search(r"(?i)\bhip|\brocm|/dev/kfd|amd\.com/gpu", text):
        fix = ("deploy AMD's ROCm device plugin (github.com/ROCm/k8s-device-plugin; or the AMD GPU Operator) and request "
               "the GPU in the pod: resources.limits: amd.com/gpu: 1 (the NVIDIA device plugin only hands out NVIDIA "
               "GPUs); the image must be a ROCm build (rocm/pytorch)")
    else:
        fix = ("deploy the NVIDIA device plugin (or the NVIDIA GPU Operator) with the nvidia container runtime as the "
               "node's default, and request the GPU in the pod: resources.limits: nvidia.com/gpu: 1")
    return _make("device-access", "the pod was given no GPU",
                 "Kubernetes passes a GPU into a pod only through the vendor's device plugin and the pod's resource "
                 "limit; without them the container has no device", fix, [], failing)


# a GPU node said (or listed) to belong to group root: "/dev/kfd = crw-rw---- root root", "/dev/kfd resets to root:root"
_ROOT_GROUP_NODE = re.compile(r"(/dev/(?:kfd|dri/renderD\d+))\b[^\n]{0,50}?(?:\bc[rwx-]{9}\S*\s+(?:\d+\s+)?)?"
                              r"\broot[:\s]+root\b")
# a system container, which has no udev of its own to give a node its group: LXC / LXD / Incus, Proxmox's CTs, nspawn
_SYSTEM_CONTAINER = re.compile(r"(?i)\bLXC\b|\bLXD\b|\bincus\b|\bproxmox\b|\bpct\b|systemd-nspawn|"
                               r"\bno udev\b|\bwithout udev\b|\budev (?:is )?(?:not|isn.t) (?:running|there|available)")


def _root_group_in_a_system_container(ctx: Context) -> Optional[Diagnosis]:
    """/dev/kfd (or a render node) owned by group root inside a system container (LXC, Incus, a Proxmox CT): the
    host's udev rule that gives the node to render does not run there, so the node comes up root:root on every boot
    and a user in render still cannot open it. The group is set where the container starts: a chgrp before the
    service, or the device passed with its gid (Proxmox VE's devN: entries take gid=, from its 8.1 release)."""
    text = _text(ctx)
    nodes = [(n, m) for n, line in enumerate(ctx.sheet.lines, 1) if (m := _ROOT_GROUP_NODE.search(line))]
    listed = [f for f in ctx.sheet.of("device_node") if f.detail.split()[0] == "root"]
    if not (nodes or listed) or not _SYSTEM_CONTAINER.search(text):
        return None
    paths = list(dict.fromkeys([m.group(1) for _n, m in nodes] + [f"/dev/{f.value}" if "renderD" not in f.value
                                                                    else f"/dev/dri/{f.value}" for f in listed]))
    if not any(p.endswith("kfd") for p in paths):
        paths.insert(0, "/dev/kfd")
    if not any("renderD" in p for p in paths):
        paths.append("/dev/dri/renderD128")
    where = " ".join(paths)
    unit = re.search(r"\b([\w@-]+)\.service\b", text)
    service = unit.group(1) if unit else "<the service>"
    lines = [ErrorLine(n, ctx.sheet.lines[n - 1].strip(), None) for n, _m in nodes]
    return _first(_make("device-access", "the GPU's device node belongs to root inside the container",
                        f"{paths[0]} comes up owned by group root inside the container: the host's udev rule that gives "
                        "it to render does not run there, so a user in render and video still may not open it and "
                        "ROCm finds no device (the tool falls back to the CPU)",
                        f"give the nodes their group each time the container starts: chgrp render {where} && chmod "
                        f"0660 {where}, run before the program, e.g. a systemd drop-in (systemctl edit {service}: "
                        f"[Service] ExecStartPre=+-/usr/bin/chgrp render {where} and ExecStartPre=+-/usr/bin/chmod "
                        f"0660 {where}); or pass the devices with the group from the host (Proxmox: dev0: /dev/kfd,"
                        "gid=<render's gid in the container>, dev1: /dev/dri/renderD128,gid=<the same>); then ls -l "
                        f"{paths[0]} must show render", [], lines + ctx.no_gpu() + ctx.of("device-access", "visibility")))


def _device_access_said(ctx: Context) -> Optional[Diagnosis]:
    """The kinds of refusal whose fix the wording and the setting decide before any `ls -l` is read: a node the tool
    names (renderD, card), a GPU found only as root, a container given no devices or not the group that owns them."""
    unmapped = _unmapped_group(ctx) or _root_group_in_a_system_container(ctx)
    if unmapped is not None:
        return unmapped
    text = _text(ctx)
    pod = _kubernetes_without_gpu(ctx, text)
    if pod is not None:
        return pod
    node = re.search(r"/dev/dri/(renderD\d+|card\d+)", text)
    refused = _lines_matching(ctx, r"(?i)Permission denied \(os error 13\)|Permission needed to access required GPU")
    if refused and node:
        group = "video" if node.group(1).startswith("card") or re.search(r"owner=\S*video", text) else "render"
        return _make("device-access", f"the user may not open /dev/dri/{node.group(1)}",
                     f"/dev/dri/{node.group(1)} belongs to the {group} group and the user is not in it",
                     f"sudo usermod -aG {group},video $USER (render for /dev/dri/renderD*, video for /dev/dri/card*), "
                     "then log in again (a new ssh session) so the group applies", [], refused)
    as_root = _lines_matching(ctx, r"(?i)(?:run|running|works?|execut\w+) (?:it )?(?:as|with) (?:root|sudo)|"
                                   r"(?:with|under) sudo it works|as root,? it works")
    out = ctx.of("device-access", "driver") + _lines_matching(ctx, r"OUT_OF_RESOURCES|Unable to open /dev/kfd")
    if as_root and out and not _CONTAINED.search(text):
        # the stack works for root, so the GPU, the driver and the build are fine: this comes before any of them
        return _first(_make("device-access", "the GPU opens only for root",
                     "rocminfo and the runtime work as root but not as the user: /dev/kfd and /dev/dri/renderD* "
                     "belong to the render group (video on older systems) and the user is not in both",
                     "sudo usermod -aG render,video $USER, then log out and in (or reboot) so the groups apply; check "
                     "with ls -l /dev/kfd /dev/dri/renderD* and id", [], out + as_root))
    video_only = _video_not_enough(ctx, text)
    if video_only is not None:
        return video_only
    service = _service_user(ctx, text) or _seen_but_not_usable(ctx, text)
    if service is not None:
        return service
    if _CONTAINED.search(text) or "容器" in text:
        no_gpu = _lines_matching(ctx, r"(?i)No (?:HIP|CUDA) GPUs are available|There is no device can be used|"
                                      r"no compatible (?:amd)?gpus? (?:were )?(?:discovered|detected|found)|hipErrorNoDevice|"
                                      r"no ROCm-capable device|Unable to open /dev/kfd|(?:not (?:detected|found|visible|"
                                      r"available|seen)|(?:doesn.t|does not|can.t|cannot|won.t) (?:see|find|detect|use))"
                                      r"\b.{0,40}\b(?:in|inside|within|from) (?:a |the |my )?(?:docker|podman|container)|"
                                      # Chinese: "no GPU found inside the container"
                                      r"(?:容器|docker|podman)\S{0,8}(?:里|内|中)\S{0,8}(?:找不到|检测不到|识别不到|看不到|"
                                      r"用不了|没有).{0,4}(?:GPU|显卡)")
        masked = re.search(r"\bROCR_VISIBLE_DEVICES=\d+,\d", text)   # a job's mask: visibility, not the devices
        if no_gpu and not masked and _vendor(ctx) != "amd" and re.search(r"(?i)NVIDIA|CUDA|GeForce|RTX|GTX", text) \
                and not re.search(r"--gpus", text):
            return _make("device-access", "the container was started without the GPU",
                         "docker gives a container no NVIDIA GPU unless asked, and only through the NVIDIA Container "
                         "Toolkit's runtime",
                         "install the NVIDIA Container Toolkit (sudo nvidia-ctk runtime configure --runtime=docker; sudo "
                         "systemctl restart docker) and start the container with --gpus all (compose: deploy.resources."
                         "reservations.devices with capabilities: [gpu])", [], no_gpu)
        if no_gpu and not masked and not re.search(r"--device[= ]/dev/kfd", text):
            return _make("device-access", "the container was started without the GPU devices",
                         "the container has no /dev/kfd and /dev/dri: ROCm finds no device inside it",
                         "start the container with the GPU devices and their groups: docker run --device=/dev/kfd "
                         "--device=/dev/dri --group-add video --group-add render (podman: the same flags)", [], no_gpu)
        passed = re.search(r"--device[= ]\"?/dev/kfd", text) and re.search(r"--device[= ]\"?/dev/dri", text)
        host_sees = re.search(r"(?i)\bhost(?:'s)?\b.{0,40}\b(?:can |does )?(?:see|sees|detect\w*|find\w*|list\w*|uses?|"
                              r"works?)\b|host is fine|(?:works|fine|runs) on the host|outside (?:of )?(?:the )?(?:container|"
                              r"docker)|宿主机.{0,10}(?:可以|正常|能)", text)
        if no_gpu and not masked and passed and host_sees and _vendor(ctx) != "nvidia":
            # the devices were passed and the host has the GPU: the engine that ran the container does not have them
            return _make("device-access", "the container runs where the host's GPU devices are not",
                         "the run passes /dev/kfd and /dev/dri and the host sees the GPU, yet the container does not: "
                         "the docker engine that ran it is not the host's (Docker Desktop, on Linux too, runs containers "
                         "in its own VM without /dev/kfd; a rootless or remote context has no access either)",
                         "check docker context ls and docker info | grep -i -e 'Operating System' -e rootless: under "
                         "Docker Desktop, switch to the host's Docker Engine (docker context use default, or uninstall "
                         "Docker Desktop and install docker-ce), then run again with --device=/dev/kfd --device=/dev/dri "
                         "--group-add video --group-add render", [], no_gpu)
        # the devices passed without their groups while the container runs as an unprivileged user
        as_user = re.search(r"(?i)--user\b|(?<![\w-])-u \d|\buser \d{3,}|\bnon-?root\b|^\s*USER \w+|\bas (?:a )?user\b",
                            text, re.M)
        if no_gpu and not masked and passed and as_user and not re.search(r"(?<!no )(?<!without )--group-add", text):
            return _make("device-access", "the container's user is not in the GPU devices' groups",
                         "/dev/kfd and /dev/dri were passed, but the container runs as an unprivileged user, and the "
                         "devices keep the host's render and video groups, which that user is not in",
                         "add the groups: docker run --device=/dev/kfd --device=/dev/dri --group-add video --group-add "
                         "render ... (where the container has no group of that name, by number: --group-add $(getent "
                         "group render | cut -d: -f3)); or run the container as root", [], no_gpu)
        if no_gpu and not masked and re.search(r"(?i)numeric|\bGID\b|distrobox|toolbox", text):
            return _make("device-access", "the container user is not in the group that owns the GPU devices",
                         "/dev/kfd and /dev/dri/renderD* keep the host's group id inside the container, and the "
                         "container's user is not in a group with that id",
                         "pass the host's groups by number: --group-add $(getent group render | cut -d: -f3) "
                         "--group-add $(getent group video | cut -d: -f3) with --device /dev/kfd --device /dev/dri "
                         "(distrobox: --additional-flags with the same, docker as its engine), then enter it again",
                         [], no_gpu)
    return None


# a tool that finds the GPU and then cannot use it: "GPU detected but unusable", "found but cannot be used"
_SEEN_NOT_USABLE = re.compile(r"(?i)\b(?:detected|found|recogni[sz]ed|listed|present|visible)\W{0,3}\s+but\s+(?:is\s+|it.s\s+)?"
                              r"(?:unusable|not usable|cannot be used|can.t be used|unavailable)\b|"
                              r"检测到.{0,10}(?:但|却).{0,6}(?:无法使用|不能用|用不了)")


def _seen_but_not_usable(ctx: Context, text: str) -> Optional[Diagnosis]:
    """An AMD GPU on Linux that a tool finds (the driver lists it: sysfs, lspci, amd-smi) and then cannot use: what
    lies between the driver's listing and the compute runtime is opening /dev/kfd and /dev/dri/renderD*, which a
    fresh system's user cannot do until it is in render and video (ROCm's install docs: "Configuring permissions for
    GPU access"). A build for the wrong GPU speaks in its own error lines, which keep this reading out."""
    said = _lines_matching(ctx, _SEEN_NOT_USABLE)
    if not said or _vendor(ctx) != "amd" or _nvidia_gpu(ctx) or ctx.sheet.is_windows or \
            re.search(r"(?i)\bwindows\b|\bwsl\b|\bmacos\b", text) or _CONTAINED.search(text):
        return None
    if any(e.family not in (None, "visibility", "device-access") for e in ctx.errors):
        return None
    groups = ctx.sheet.first("user_groups")
    if groups is not None and "render" in groups.value.split(","):
        return None   # the user is in render already: not the groups
    arch, _fact = ctx.arch()
    if arch and arch.startswith("gfx") and arch not in OFFICIAL_WHEEL_ARCHS:
        return None   # a card outside ROCm's builds is unusable for its arch first (the arch readings)
    return _make("device-access", "the GPU is seen but its compute device cannot be opened",
                 "the tool finds the AMD GPU (the driver lists it) but cannot use it: ROCm, and Vulkan's render node, "
                 "open /dev/kfd and /dev/dri/renderD*, which belong to the render and video groups, and a user on a "
                 "fresh install is not in them, so the work runs on the CPU",
                 "sudo usermod -aG render,video $LOGNAME, then log out and back in (or reboot) so the groups apply; "
                 "check with groups (render and video listed) and ls -l /dev/kfd /dev/dri/renderD*, then start the "
                 "tool again", [], said + ctx.no_gpu(), confirmed=False)


_SERVICE = re.compile(r"(?i)\bsystemd\b|\bsystemctl\b|\b(?:as|via|from) (?:a |the )?(?:system )?service\b|\.service\b|"
                      r"\bdaemon\b|服务")
_AS_ME = re.compile(r"(?i)\b(?:as|with|under) (?:my|me|myself|my own|the logged[- ]in) ?(?:user|account)?\b|\bmanually\b|"
                    r"\bby hand\b|\b(?:ollama|llama-server|comfyui|the server) serve\b.{0,30}\b(?:works?|sees?|uses?|fine)\b|"
                    r"\bin (?:a |my )?terminal\b|手动")


def _service_user(ctx: Context, text: str) -> Optional[Diagnosis]:
    """An AMD GPU the program finds when the user starts it and not when it runs as a system service: the service runs
    as its own user (ollama's installer creates `ollama`), which must be in render and video itself."""
    if not _SERVICE.search(text) or not _AS_ME.search(text) or _vendor(ctx) == "nvidia" or _nvidia_gpu(ctx):
        return None
    if re.search(r"\b[A-Z][A-Z0-9_]{3,}=\S|\bexport\b|\.bashrc|\.profile|Environment=", text):
        return None   # a variable set in the shell and not for the service: the environment, not the groups
    unseen = ctx.no_gpu() + _lines_matching(ctx, NOT_DETECTED) + _lines_matching(
        ctx, r"(?i)\b(?:doesn.t|does not|can.t|cannot|won.t|not) (?:see|find|detect|use)\w*\b.{0,20}\b(?:the )?(?:GPU|card)|"
             r"(?:找不到|检测不到|识别不到|用不了).{0,4}(?:GPU|显卡)")
    if not unseen:
        return None
    tool = ctx.tool(unseen)
    user = "ollama" if tool == "ollama" or re.search(r"(?i)\bollama\b", text) else "<the service's User=>"
    unit = "ollama" if user == "ollama" else "<service>"
    return _first(_make("device-access", "the service's user may not open the GPU",
                        "started by the user the program finds the GPU, as a system service it does not: the service "
                        f"runs as its own user ({user}), which is not in the render and video groups that own "
                        "/dev/kfd and /dev/dri/renderD*",
                        f"sudo usermod -aG render,video {user}, then sudo systemctl restart {unit} (check with "
                        f"systemctl show {unit} -p User and id {user})", [], unseen))


_ROOT_SAID = re.compile(r"(?i)\b(?:required|need|needs|have|has) to be root\b|\brequires? root\b|\bonly (?:as|with|under) "
                        r"(?:root|sudo)\b|\bsudo\b.{0,40}\b(?:works|lists?|shows?|finds?)\b")
_IN_VIDEO = re.compile(r"(?i)\b(?:already |is |am |are )?(?:in|a member of|added to) (?:the )?[`'\"]?video[`'\"]? group\b")


def _video_not_enough(ctx: Context, text: str) -> Optional[Diagnosis]:
    """The GPU opens only as root while the user is (said to be) in `video`: since Ubuntu 20.04 /dev/kfd and
    /dev/dri/renderD* belong to `render`, which video alone does not give."""
    said = _lines_matching(ctx, _IN_VIDEO.pattern)
    root = _lines_matching(ctx, _ROOT_SAID.pattern) or ([ErrorLine(f.line_no, f.line, None)
                                                          for f in ctx.sheet.of("root_only")])
    listed_as_root = re.search(r"(?m)^.*\bsudo\b.*\b(?:clinfo|rocminfo|rocm-smi)\b.*\n(?:.*\n){0,2}.*(?:Platform #|Device "
                               r"#|Agent \d|gfx\d)", text)
    if not said or not (root or listed_as_root) or _CONTAINED.search(text):
        return None
    groups = ctx.sheet.first("user_groups")
    if groups is not None and "render" in groups.value.split(","):
        return None
    return _first(_make("device-access", "video is not enough: the GPU's device files belong to render",
                        "the GPU answers only as root although the user is in video: on Ubuntu 20.04 and newer (and "
                        "most current distributions) /dev/kfd and /dev/dri/renderD* belong to the render group",
                        "sudo usermod -aG render,video $USER, then log out and back in (or reboot); check with "
                        "ls -l /dev/kfd /dev/dri/renderD* and id", [], said + root))


# /dev/kfd refused with EINVAL: the permission check passed (a group or mode problem is EACCES / EPERM); the amdgpu
# KFD returns EINVAL from open while it is locked, that is during a GPU reset or a suspend that never finished
# (kfd_create_process in the kernel's amdkfd/kfd_process.c; newer kernels return it too when no GPU node came up)
_KFD_LOCKED = re.compile(r"(?i)/dev/kfd\b.{0,40}\bInvalid argument|Invalid argument.{0,20}/dev/kfd")


_KFD_ABSENT = re.compile(r"(?i)/dev/kfd\b\S*:?(?: read-write)?:? No such file|No such file or directory\W{0,4}/dev/kfd|"
                         r"/dev/kfd\b.{0,30}\b(?:does not exist|doesn.t exist|is missing|not (?:present|there|found))")


def _kfd_absent_on_the_host(ctx: Context) -> list[ErrorLine]:
    """/dev/kfd said to be missing on a machine itself (no container, no WSL): its lines, else []."""
    text = _text(ctx)
    if _CONTAINED.search(text) or "容器" in text or ctx.sheet.has("platform", "container") or \
            ctx.sheet.has("platform", "wsl") or _WSL_SAID.search(text) or re.search(r"root@[0-9a-f]{12}\b", text):
        return []
    return _lines_matching(ctx, _KFD_ABSENT.pattern)


@rule("driver")
def kfd_node_missing(ctx: Context) -> Optional[Diagnosis]:
    """No /dev/kfd on the machine itself: the node is made by the amdgpu driver's KFD when it binds a GPU it
    supports, so its absence is the driver (not loaded, not built for this kernel, or refusing the GPU), never the
    user's groups."""
    missing = _kfd_absent_on_the_host(ctx)
    if not missing or re.search(r"(?i)not supported in kfd|is missing in supported_devices|kgd2kfd_probe failed",
                                _text(ctx)):
        return None   # KFD refusing the GPU is read by the GPU's own support
    return _make("driver", "there is no /dev/kfd: the amdgpu driver's KFD did not start",
                 "/dev/kfd is created by the amdgpu kernel driver when it binds a GPU; outside a container its absence "
                 "means the driver is not loaded (lsmod | grep amdgpu is empty), was not built for the running kernel, "
                 "or refused the GPU",
                 "lsmod | grep amdgpu; sudo dmesg | grep -i -e amdgpu -e kfd (the driver's refusal or failure); sudo "
                 "modprobe amdgpu; if the module is missing, install it for this kernel (Ubuntu: sudo apt install "
                 "linux-modules-extra-$(uname -r), or sudo amdgpu-install --usecase=dkms), check Secure Boot "
                 "(mokutil --sb-state), reboot", [], missing)


# KFD's "GC IP <version> not supported in kfd": the kernel's amdgpu knows the GPU's graphics IP but its KFD predates
# it. The version is printed in hex (%06x of the kernel's IP_VERSION: major, minor, revision a byte each, shifted one
# byte further in kernels with the full IP version), and it is the gfx target: 12.0.1 is gfx1201, 11.5.1 gfx1151
_GC_IP = re.compile(r"(?i)GC IP ([0-9a-f]{6,8}) (?:VF )?\s*not supported in kfd")


def _gc_ip_target(printed: str) -> tuple[int, str]:
    """(major, gfx target) of KFD's printed GC IP version."""
    value = int(printed, 16)
    shift = 16 if len(printed) <= 6 else 24
    major, minor, rev = value >> shift, (value >> (shift - 8)) & 0xFF, (value >> (shift - 16)) & 0xFF
    return major, f"gfx{major}{minor:x}{rev:x}"


@rule("driver")
def kfd_older_than_gpu(ctx: Context) -> Optional[Diagnosis]:
    """A GPU of a generation ROCm supports that the running kernel's KFD refuses: the kernel (or its amdgpu) is older
    than the GPU. Cards older than GFX9 are not read here: their refusal is the GPU's own support."""
    refused = _lines_matching(ctx, _GC_IP.pattern)
    if not refused:
        return None
    major, arch = _gc_ip_target(_GC_IP.search(refused[0].line).group(1))
    if major < 9:
        return None
    rdna4 = " (RDNA4: ROCm 6.4.1 or newer)" if major >= 12 else ""
    return _first(_make("driver", f"the kernel's amdgpu is older than this GPU ({arch})",
                        f"the kernel's amdgpu knows {arch}'s graphics IP but its KFD does not take it as a compute "
                        "device: the "
                        "running kernel's amdgpu driver predates the GPU",
                        "install the amdgpu-dkms of a ROCm release that lists this GPU" + rdna4 + " (sudo "
                        "amdgpu-install --usecase=dkms,rocm, then reboot), or boot a newer kernel (Ubuntu's HWE "
                        "kernel); then sudo dmesg | grep kfd must no longer say 'not supported'", [], refused))


@rule("device-access")
def device_access(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a refusal to open /dev/kfd or /dev/dri (any wording: permission denied, no such file, a group
    check), the device files' owner and mode (`ls -l`) against the user's groups (`id`, `groups`), 'works only as
    root', and where the process runs (a container without the devices, a rootless one). A runtime that cannot get
    its resources is only a symptom where the driver itself is not loaded."""
    if _lines_matching(ctx, _KFD_LOCKED.pattern):
        return None   # the node opened far enough for the driver to refuse: a stuck GPU (runtime/gpu_hang reads it)
    if _kfd_absent_on_the_host(ctx):
        return None   # no node at all outside a container: the driver never made it (kfd_node_missing, below)
    early = _device_access_said(ctx)
    if early is not None:
        return early
    if re.search(r"(?i)is missing in supported_devices|kgd2kfd_probe failed|not supported in kfd", _text(ctx)):
        return None   # KFD itself refuses the GPU: no group opens a device the driver never created (gpu-unsupported)
    if re.search(r"(?i)Failed to create process VM object", _text(ctx)):
        return None   # the node opened and KFD refused the process's GPU VM: the GPU, not the groups (arch/kfd_process_vm)
    errors = ctx.of("device-access")
    if any(re.search(r"ROCk module is NOT loaded|amdgpu not found in modules", e.line) for e in ctx.of("driver")):
        errors = [e for e in errors if not re.search(r"OUT_OF_RESOURCES|hsa api call failure", e.line)]
    lacking = _groups_lacking(ctx)
    if lacking and not errors:
        errors = ctx.of("visibility") + ctx.no_gpu()
    desktop = ctx.sheet.first("platform") if ctx.sheet.has("platform", "docker-desktop") else None
    if desktop is not None and re.search(r"/dev/(?:kfd|dri)|\bROCm\b|rocm/", "\n".join(ctx.sheet.lines)):
        fact = next(f for f in ctx.sheet.of("platform") if f.value == "docker-desktop")
        return _make("device-access", "Docker Desktop's VM has no /dev/kfd",
                     "Docker Desktop (on Linux too) runs the containers in its own virtual machine, which does not have "
                     "the host's /dev/kfd and /dev/dri, so --device cannot pass them",
                     "run ROCm containers on the host's Docker Engine instead: docker context use default (or quit "
                     "Docker Desktop), then docker run --device=/dev/kfd --device=/dev/dri --group-add video ...",
                     [fact], errors + [e for e in ctx.errors if e.family is None])
    needed = ctx.sheet.first("needs_group")
    if needed is not None and not errors and not ctx.sheet.has("root_only") and not ctx.of("driver"):
        return _make("device-access", f"opening the GPU needs the {needed.value} group",
                     f"the device files belong to the {needed.value} group (newer systems give /dev/kfd to render, "
                     "not video), and a user outside it cannot open them", f"sudo usermod -aG {needed.value}"
                     f"{',video' if needed.value == 'render' else ''} $USER, then log out and back in",
                     [needed], [e for e in ctx.errors if e.family is None])
    root_only = ctx.sheet.first("root_only")
    nodes = ctx.sheet.of("device_node")
    closed = [f for f in nodes if f.detail.split()[0] == "root" and f.detail.split()[1][3:5] == "--"]
    numeric = [f for f in nodes if f.detail.split()[0].isdigit()]
    # a compose file or run line whose /dev/kfd device is commented out: the container starts without it
    disabled = next((i for i, l in enumerate(ctx.sheet.lines, 1)
                     if re.search(r"#\s*-?\s*[\"']?/dev/kfd", l)), None)
    if disabled and not any(re.search(r"^\s*-\s*[\"']?/dev/kfd", l) for l in ctx.sheet.lines):
        return _make("device-access", "the container is started without /dev/kfd",
                     "the /dev/kfd line of the container's devices is commented out, so ROCm inside finds no GPU (and "
                     "the tools that read the arch from it get nothing)",
                     "enable it again: devices: - /dev/kfd - /dev/dri (docker run --device=/dev/kfd --device=/dev/dri "
                     "--group-add video --group-add render)", [Fact("error", "device-access", disabled,
                                                                    ctx.sheet.lines[disabled - 1])],
                     [e for e in ctx.errors if e.family is None] + errors)
    if not errors and root_only is None and not closed and not numeric:
        return None
    if lacking:
        node, group, said = lacking
        return _make("device-access", f"the user is not in {group}, which owns /dev/{node.value}",
                     f"/dev/{node.value} is group {group} ({node.detail.split()[1]}), and the user's groups ({said.line}) "
                     f"do not include {group}: ROCm cannot open the GPU",
                     f"sudo usermod -aG {group}{',video' if group == 'render' else ''} $USER, then log out and back in "
                     "(or reboot); never run the job with sudo instead", [node, said], errors)
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)group .?render.? does not exist", text):
        return _make("device-access", "this system has no render group",
                     "usermod refuses a group the system does not have: older distributions (and kernels before the "
                     "render nodes got their own group) give /dev/kfd and /dev/dri/renderD* to video",
                     "sudo usermod -aG video $USER, then log out and back in; ls -l /dev/kfd /dev/dri/renderD* shows "
                     "the group that owns them (add the user to that one); a node owned by root:root alone needs a "
                     "udev rule: KERNEL==\"kfd\", GROUP=\"video\", MODE=\"0660\"", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)unknown or invalid runtime name: nvidia", text) and _SNAP_DOCKER.search(_text(ctx)):
        # the docker snap carries its own NVIDIA Container Toolkit and registers the nvidia runtime itself (its
        # nvidia-container-toolkit service, run at install and refresh: canonical/docker-snap's hooks and README
        # "NVIDIA support"); a revision from before that support, or one refreshed before the driver was there, has
        # none (canonical/docker-snap#180: fixed by the current stable revision)
        return _make("device-access", "the docker snap has not set up the nvidia runtime",
                     "docker is the snap, which reads its own daemon.json (/var/snap/docker/current/config) and sets "
                     "the nvidia runtime up itself when the host has the NVIDIA driver; this revision did not (an "
                     "older revision, or the driver installed after it)",
                     "update the snap and the host: sudo snap refresh docker (and sudo apt update && sudo apt upgrade "
                     "for the driver), then sudo snap restart docker; snap logs docker.nvidia-container-toolkit shows "
                     "whether it registered the runtime; a host-side nvidia-ctk does not configure the snap's daemon",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)unknown or invalid runtime name: nvidia", text):
        return _make("device-access", "docker does not know the nvidia runtime",
                     "--runtime=nvidia names a runtime docker's daemon.json does not register: the NVIDIA Container "
                     "Toolkit is not installed, or it was never configured for this docker (or docker was not "
                     "restarted after it)",
                     "install the NVIDIA Container Toolkit (sudo apt-get install -y nvidia-container-toolkit), then "
                     "sudo nvidia-ctk runtime configure --runtime=docker (it adds the nvidia runtime to /etc/docker/"
                     "daemon.json) and sudo systemctl restart docker; or drop --runtime=nvidia and use --gpus all; a "
                     "snap docker reads its own daemon.json (snap list docker): use Docker Engine from Docker's apt "
                     "repository instead", [ctx.line_fact(errors[0])], errors)
    if re.search(r"could not select device driver", text) and _vendor(ctx) == "amd" and not _nvidia_gpu(ctx):
        # --gpus is the NVIDIA runtime's flag: an AMD GPU is passed as its device files
        return _make("device-access", "--gpus does not pass an AMD GPU",
                     "docker's --gpus asks for the NVIDIA Container Toolkit's hook; an AMD GPU is passed into a "
                     "container as its device files, /dev/kfd and /dev/dri",
                     "drop --gpus all and start the container with docker run --device=/dev/kfd --device=/dev/dri "
                     "--group-add video --group-add render --security-opt seccomp=unconfined ... (or install the AMD "
                     "Container Toolkit and use --runtime=amd -e AMD_VISIBLE_DEVICES=all)",
                     [ctx.line_fact(errors[0])], errors)
    # (nvidia-docker2: the meta package that configured docker for the toolkit, its last release part of toolkit
    # 1.14.0, superseded by `nvidia-ctk runtime configure`: NVIDIA/nvidia-docker's deprecation notice and releases;
    # rechecked in round 18: the toolkit's v1.15.0 release notes, NVIDIA/cloud-native-docs#40, "The v1.14.0 release
    # was the last release to include the nvidia-container-runtime and nvidia-docker2 packages", and
    # NVIDIA/nvidia-container-toolkit#459 stopped publishing them)
    if re.search(r"could not select device driver", text):
        return _make("device-access", "Docker has no GPU runtime",
                     "`--gpus` needs the NVIDIA Container Toolkit's hook, which is not installed (or docker was not "
                     "restarted after it was)",
                     "install the NVIDIA Container Toolkit: sudo apt-get install -y nvidia-container-toolkit; sudo "
                     "nvidia-ctk runtime configure --runtime=docker; sudo systemctl restart docker (an older host "
                     "whose toolkit has no nvidia-ctk: sudo apt-get install -y nvidia-docker2, the package that "
                     "registered the nvidia runtime in /etc/docker/daemon.json up to toolkit 1.14, then restart "
                     "docker); if docker is the "
                     "snap (snap list docker; it reads its own daemon.json, not /etc/docker, and loses the runtime "
                     "after a restart), remove the snap (sudo snap remove docker) and install Docker Engine from "
                     "Docker's apt repository, then configure the runtime again",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(_NVML_UNKNOWN, text) and _CPU_MANAGER_STATIC.search(_text(ctx)):
        # the kubelet's static CPU manager rewrites each pod's cgroup to pin its CPUs and, doing so, writes the
        # device rules back from what the kubelet knows, which lacks the NVIDIA nodes the runtime hook added (NVIDIA
        # k8s-device-plugin README, --pass-device-specs: "needed for compatibility with the CPUManager static policy";
        # NVIDIA/nvidia-docker#966)
        return _make("device-access", "the kubelet's static CPU manager drops the pods' GPU device rights",
                     "with --cpu-manager-policy=static the kubelet updates the pod's cgroup (its cpuset) and rewrites "
                     "its device list from the devices it knows; the NVIDIA device nodes the container runtime added "
                     "are not among them, so /dev/nvidiactl and /dev/nvidia* give EPERM and NVML fails with 'Unknown "
                     "Error' some time after the pod starts",
                     "start the NVIDIA device plugin with --pass-device-specs=true (PASS_DEVICE_SPECS=true in its "
                     "DaemonSet or Helm values), so the kubelet itself passes the device nodes and keeps them; or run "
                     "the kubelet without the static CPU manager (remove --cpu-manager-policy=static, cpuManagerPolicy: "
                     "none, then drain the node, delete /var/lib/kubelet/cpu_manager_state and restart the kubelet); "
                     "restart the GPU pods", [ctx.line_fact(errors[0])], errors)
    if re.search(_NVML_UNKNOWN, text):
        return _make("device-access", "the containers lose their GPUs",
                     "a systemd daemon-reload (or a cgroup update) drops the containers' device-cgroup rights to the "
                     "NVIDIA device nodes that were not passed as /dev/char links",
                     "sudo nvidia-ctk system create-dev-char-symlinks --create-all (and a udev rule that runs it at "
                     "boot), or docker's cgroupfs cgroup driver (\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"] in "
                     "/etc/docker/daemon.json); restart the containers; if it fails from the "
                     "container's first start (after a toolkit update), check /etc/nvidia-container-runtime/config.toml: "
                     "no-cgroups = false for docker run as root (true is for rootless containers only, which then need "
                     "the devices passed by hand)",
                     [ctx.line_fact(errors[0])], errors)
    if closed and not errors:
        node = closed[0]
        return _make("device-access", f"/dev/{node.value} belongs to root alone",
                     f"/dev/{node.value} is mode {node.detail.split()[1]} owned by root:root: no udev rule gives it to "
                     "a group, so only root can open it",
                     f"add a udev rule, /etc/udev/rules.d/70-amdgpu.rules: KERNEL==\"kfd\", GROUP=\"render\", "
                     "MODE=\"0660\" (and SUBSYSTEM==\"drm\", KERNEL==\"renderD*\", GROUP=\"render\", MODE=\"0660\"); "
                     "sudo udevadm control --reload && sudo udevadm trigger; put the user in render",
                     [node], errors)
    if numeric and not errors:
        gid = numeric[0].detail.split()[0]
        return _make("device-access", f"the GPU devices belong to group {gid}, unknown inside the container",
                     f"the device files keep the host's group id ({gid}, the host's render group), which the "
                     "container's user is not in",
                     f"add gid {gid} to the container's groups: docker run --group-add {gid}; Kubernetes: "
                     f"securityContext.supplementalGroups: [{gid}] (the host's render group)", numeric[:2], errors)
    groups = []
    for line in ctx.sheet.lines:
        m = _DEVICE_LISTING.match(line.strip())
        if m and m.group(1) not in groups and m.group(1) != "root":
            groups.append(m.group(1))
    in_container = ctx.sheet.has("platform", "container")
    joined = "\n".join(ctx.sheet.lines)
    if re.search(r"--device[= ]\"?/dev/kfd", joined) and "/dev/dri" not in joined:
        return _make("device-access", "the container gets /dev/kfd but not /dev/dri",
                     "ROCm opens both /dev/kfd and the render nodes /dev/dri/renderD*; without them (and the video "
                     "group) the container finds no GPU",
                     "docker run --device=/dev/kfd --device=/dev/dri --group-add video --group-add render ...",
                     [ctx.line_fact(e) for e in errors[:1]], errors)
    missing = re.search(r"/dev/kfd\S*:? No such file|No such file or directory.*?/dev/kfd|/dev/dri\S*:? No such file",
                        text) or (in_container and "No such file" in text)
    if missing:
        return _make("device-access", "the GPU device files are not in the container",
                     "/dev/kfd and /dev/dri/renderD* must be passed into the container (and their groups added) or "
                     "ROCm sees no GPU",
                     "docker run --device=/dev/kfd --device=/dev/dri --group-add video --group-add render "
                     "--security-opt seccomp=unconfined ... (podman: the same; apptainer: --rocm, or --bind "
                     "/dev/kfd,/dev/dri)", [ctx.line_fact(e) for e in errors[:2]], errors)
    if in_container and not root_only:
        wanted = groups or ["render", "video"]
        return _make("device-access", "the container's user may not open the GPU device files",
                     "inside a container the device files keep the host's groups: the process needs them added, and a "
                     "rootless container never has more rights than the host user who started it",
                     f"start it with --group-add video --group-add render (rootless podman: --group-add keep-groups), "
                     f"and put the host user in those groups: sudo usermod -aG {','.join(wanted)} $USER, then log in "
                     "again", [ctx.line_fact(e) for e in errors[:2]], errors)
    wanted = groups or ["render", "video"]
    cause = ("only root can open /dev/kfd and /dev/dri/renderD*: the user is not in the group"
             f"{'s' if len(wanted) > 1 else ''} that own them ({', '.join(wanted)})")
    evidence = [ctx.line_fact(e) for e in errors[:2]] + ([root_only] if root_only else [])
    # under sudo it works: the sudo line is the proof, not a second problem
    proof = [e for e in ctx.of("env-not-applied") if root_only and re.search(r"\bsudo\b", e.line)]
    return _make("device-access", "the user may not open the GPU device files", cause,
                 f"sudo usermod -aG {','.join(wanted)} $USER, then log out and back in (or reboot); never run the "
                 "job with sudo instead; if ls -l /dev/kfd shows root root (no group may open it), add a udev rule: "
                 "/etc/udev/rules.d/70-kfd.rules with KERNEL==\"kfd\", GROUP=\"render\", MODE=\"0660\"",
                 evidence, errors + ctx.no_gpu() + proof)


def _groups_lacking(ctx: Context) -> Optional[tuple[Fact, str, Fact]]:
    """(the device file, its group, the line listing the user's groups) where `ls -l` shows a GPU device file whose
    group the user's `id` / `groups` output does not list."""
    nodes = []
    for fact in ctx.sheet.of("device_node"):
        group, mode = fact.detail.split()
        # a group that may read and write it, and no access for others (a world-writable node needs no group)
        if group != "root" and not group.isdigit() and mode[3:5] == "rw" and mode[6:8] != "rw":
            nodes.append(fact)
    if not nodes:
        return None
    said = ctx.sheet.first("user_groups")
    if said is None:
        return None
    groups = said.value.split(",")
    for node in nodes:
        group = node.detail.split()[0]
        if group not in groups:
            return node, group, said
    return None


# WSL said in any case or spelling ("via wsl", "使用wsl2", amdgpu-install's --usecase=wsl, its WSL runtime package)
_WSL_SAID = re.compile(r"(?i)(?<![A-Za-z])wsl ?2?(?![A-Za-z])|--usecase=\S*wsl|rocr4wsl")


# Windows refusing a symbolic link to an account without the right: "OSError: [WinError 1314] A required privilege is
# not held by the client: 'C:\...\flash_attn' -> 'C:\...\_flash_attn'"
_SYMLINK_PRIVILEGE = re.compile(r"(?i)WinError 1314\]|A required privilege is not held by the client")


@rule("device-access")
def windows_symlink_privilege(ctx: Context) -> Optional[Diagnosis]:
    """Creating a symbolic link on Windows needs the SeCreateSymbolicLink right, which only administrators hold unless
    Developer Mode is on (Microsoft's "Symlinks in Windows 10" note); a setup.py or installer that links a folder
    (os.symlink) fails for a normal account with WinError 1314, whatever the GPU or CUDA says around it."""
    lines = _lines_matching(ctx, _SYMLINK_PRIVILEGE.pattern) if "privilege" in _text(ctx) or "1314" in _text(ctx) \
        else []
    if not lines or not re.search(r"(?i)symlink|->|symbolic link|mklink", _text(ctx)):
        return None
    setup = re.search(r"[\\/]([A-Za-z][\w.-]{0,60})[\\/]setup\.py", _text(ctx))   # the package whose build links
    tool = setup.group(1) if setup else ctx.tool() or "the installer"
    return _first(_make("device-access", "Windows refuses the symbolic link",
                        f"{tool} creates a symbolic link (os.symlink), and this Windows account lacks the right to: "
                        "only administrators may, unless Developer Mode is on",
                        "turn on Developer Mode (Settings > System > For developers) or run the install from an "
                        "administrator shell, so the symlink can be made; or use a release of "
                        f"{tool} that copies the folder instead of linking it", [ctx.line_fact(lines[0])], lines[:1]))
