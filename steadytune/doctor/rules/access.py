"""Rules about reaching the GPU: device files and groups, WSL 2, and the driver."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import set_variable
from steadytune.doctor.rules.base import (
    _CONTAINED,
    NOT_DETECTED,
    Context,
    _cuda_index_for_driver,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    _NVIDIA_DRIVER,
    _nvidia_gpu,
    rule,
    _symptom_lines,
    _text,
    _vendor,
)


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


def _device_access_said(ctx: Context) -> Optional[Diagnosis]:
    """The kinds of refusal whose fix the wording and the setting decide before any `ls -l` is read: a node the tool
    names (renderD, card), a GPU found only as root, a container given no devices or not the group that owns them."""
    unmapped = _unmapped_group(ctx)
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
    service = _service_user(ctx, text)
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
        return None   # the node opened far enough for the driver to refuse: a stuck GPU (rules/runtime.py reads it)
    if _kfd_absent_on_the_host(ctx):
        return None   # no node at all outside a container: the driver never made it (kfd_node_missing, below)
    early = _device_access_said(ctx)
    if early is not None:
        return early
    if re.search(r"(?i)is missing in supported_devices|kgd2kfd_probe failed|not supported in kfd", _text(ctx)):
        return None   # KFD itself refuses the GPU: no group opens a device the driver never created (gpu-unsupported)
    errors = ctx.of("device-access")
    if any(re.search(r"ROCk module is NOT loaded|amdgpu not found in modules", e.line) for e in ctx.of("driver")):
        errors = [e for e in errors if not re.search(r"OUT_OF_RESOURCES", e.line)]
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
    if re.search(r"could not select device driver", text):
        return _make("device-access", "Docker has no GPU runtime",
                     "`--gpus` needs the NVIDIA Container Toolkit's hook, which is not installed (or docker was not "
                     "restarted after it was)",
                     "install the NVIDIA Container Toolkit: sudo apt-get install -y nvidia-container-toolkit; sudo "
                     "nvidia-ctk runtime configure --runtime=docker; sudo systemctl restart docker; if docker is the "
                     "snap (snap list docker; it reads its own daemon.json, not /etc/docker, and loses the runtime "
                     "after a restart), remove the snap (sudo snap remove docker) and install Docker Engine from "
                     "Docker's apt repository, then configure the runtime again",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)Failed to initialize NVML: Unknown Error", text):
        return _make("device-access", "the containers lose their GPUs",
                     "a systemd daemon-reload (or a cgroup update) drops the containers' device-cgroup rights to the "
                     "NVIDIA device nodes that were not passed as /dev/char links",
                     "sudo nvidia-ctk system create-dev-char-symlinks --create-all (and a udev rule that runs it at "
                     "boot), or the cgroupfs cgroup driver for docker; restart the containers; if it fails from the "
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


# programs that reach CUDA without torch: a CUDA torch is no part of their fix
_NOT_TORCH = ("ollama", "llama.cpp", "llama-cpp-python", "koboldcpp", "lmstudio", "whisper.cpp", "ctranslate2",
              "tensorflow", "jax", "onnxruntime", "nccl", "nccl-tests", "docker")
# a program said to hang or stop answering once it uses the GPU, in English or Chinese
_WSL_HANG = (r"(?i)\b(?:stops? responding|not responding|hangs?|hung|freez(?:es|ing)|stuck)\b|无响应|卡住|卡死")
# WSL said in any case or spelling ("via wsl", "使用wsl2", amdgpu-install's --usecase=wsl, its WSL runtime package)
_WSL_SAID = re.compile(r"(?i)(?<![A-Za-z])wsl ?2?(?![A-Za-z])|--usecase=\S*wsl|rocr4wsl")
# ROCm's WSL runtime (hsa-runtime-rocr4wsl-amdgpu) came only with AMD's WSL point releases (6.1.3 for Ubuntu 22.04,
# then later 6.x point releases for 22.04 and 24.04, 6.4.2 among them: the Radeon docs' WSL matrix, threads ROCm
# #3924, #4064, #5361, discussion #5411); an x.y.0 release and ROCm 7.0 / 7.1 have none; from 7.2 WSL goes through
# librocdxg with the ordinary packages. Only the releases surely without it are named as such.
_NO_WSL_RELEASE = re.compile(r"6\.\d+\.0|7\.[01](?:\.\d+)?")


def _radeon_by_number(text: str) -> Optional[str]:
    """A Radeon named by its number alone ("6950xt", "7900 XTX"): its generation is enough to place it in AMD's WSL
    list (RX 6000: RDNA2, gfx103x; RX 7000: RDNA3; RX 9000: RDNA4)."""
    m = re.search(r"(?i)(?<![\w.])(?:rx ?)?([679])([0-9]{3}) ?(?:xtx|xt|gre)(?![a-z])", text)
    return {"6": "gfx1030", "7": "gfx1100", "9": "gfx1201"}[m.group(1)] if m else None


def _rocm_release(text: str) -> Optional[str]:
    """The ROCm release being installed: amdgpu-install's package (6.2.60203 is 6.2.3), the repository path, or
    the version said."""
    deb = re.search(r"amdgpu-install_(\d+)\.(\d+)\.(\d)0(\d)(\d\d)", text)
    if deb:
        return f"{deb.group(1)}.{deb.group(2)}.{int(deb.group(5))}"
    said = re.search(r"(?i)\bROCm ?(\d+\.\d+(?:\.\d+)?)|/rocm/apt/(\d+\.\d+(?:\.\d+)?)", text)
    return (said.group(1) or said.group(2)) if said else None


def _wsl_specific(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """WSL 2 failures whose message names their own cause: Windows without GPU paravirtualisation, vLLM's pinned
    memory, a container given the native-Linux devices, a ROCm release without WSL packages."""
    dxcore = _lines_matching(ctx, r"(?i)dxcore initialization failed|libdxcore\.so.{0,40}(?:not found|No such file|"
                                  r"cannot open)")
    if dxcore:
        return _make("wsl", "WSL 2 has no GPU paravirtualisation on this Windows",
                     "the container toolkit looks for /usr/lib/wsl/lib/libdxcore.so, which WSL mounts only where "
                     "Windows exposes the GPU to WSL (GPU-PV); on this Windows build it is missing, so no GPU is found",
                     "GPU in WSL 2 needs Windows 11, or Windows 10 21H2 (build 19044) or newer (winver shows the build; "
                     "update Windows), the Windows GPU driver with WSL support, and an updated WSL (wsl --update); then "
                     "ls /usr/lib/wsl/lib/libdxcore.so inside WSL", [fact], dxcore)
    # the Windows side gives WSL no GPU: NVML's "blocked by the operating system", the container toolkit's "no adapters"
    blocked = _lines_matching(ctx, r"(?i)GPU access blocked by the operating system|WSL environment detected but no "
                                   r"adapters were found")
    if blocked:
        return _make("wsl", "Windows gives WSL 2 no GPU",
                     "WSL 2 reaches the GPU only through the Windows driver's paravirtualisation (/dev/dxg and "
                     "/usr/lib/wsl/lib); here Windows exposes no GPU adapter to it (a Windows driver without WSL "
                     "support, an old WSL, or a Linux NVIDIA driver inside WSL shadowing WSL's libraries)",
                     "update the Windows NVIDIA driver (Game Ready / Studio, any current one supports WSL) and WSL "
                     "(wsl --update, then wsl --shutdown); inside WSL remove any Linux NVIDIA driver (sudo apt remove "
                     "'nvidia-driver-*' 'libnvidia-*') and check /usr/lib/wsl/lib/nvidia-smi lists the GPU; Docker: "
                     "use Docker Desktop's WSL 2 backend or the NVIDIA Container Toolkit inside WSL", [fact], blocked)
    uva = _lines_matching(ctx, r"(?i)UVA is not available")
    if uva and (ctx.tool() == "vllm" or re.search(r"(?i)\bvllm\b", joined)):
        return _make("wsl", "vLLM turns pinned memory off under WSL 2",
                     "under WSL 2 vLLM disables pinned host memory by default, and without it UVA (the GPU reading "
                     "host memory directly) is unavailable, which its model runner needs at start-up",
                     "export VLLM_WSL2_ENABLE_PIN_MEMORY=1 before vllm serve (WSL 2 kernel 4.19.121 or newer has "
                     "working pinned memory: uname -r), or fall back to the V1 model runner", [fact], uva)
    kfd = _lines_matching(ctx, r"(?i)/dev/kfd\W{0,3}:? ?no such file or directory|no such file or directory.{0,20}"
                               r"/dev/kfd")
    if kfd and (_CONTAINED.search(joined) or re.search(r"(?i)--device", joined)):
        return _make("wsl", "WSL 2 has no /dev/kfd to give the container",
                     "under WSL 2 the GPU is reached through /dev/dxg and the libraries in /usr/lib/wsl/lib; the "
                     "native-Linux container flags (--device=/dev/kfd --device=/dev/dri) name devices WSL does not have",
                     "run the container with --device=/dev/dxg -v /usr/lib/wsl/lib/libdxcore.so:/usr/lib/libdxcore.so "
                     "-v /opt/rocm/lib/libhsa-runtime64.so.1:/opt/rocm/lib/libhsa-runtime64.so.1 (AMD's ROCm-on-WSL "
                     "docker example) instead of --device=/dev/kfd --device=/dev/dri", [fact], kfd)
    missing = _lines_matching(ctx, r"Unable to locate package (?:hsa-runtime-rocr4wsl-amdgpu|amdgpu-lib\b|"
                                   r"rocm-hip-runtime)")
    release = _rocm_release(joined)
    ubuntu = [f.value for f in ctx.sheet.of("os") if f.value.startswith("ubuntu ")]
    noble = any(v.startswith("ubuntu 24.04") for v in ubuntu) or re.search(r"\bnoble\b|Ubuntu ?24\.04", joined)
    outside = release and _NO_WSL_RELEASE.fullmatch(release)
    said = ctx.of("device-access", "wsl", "driver") + ctx.no_gpu()
    if missing or (outside and said and _vendor(ctx) == "amd"):
        why = (f"ROCm {release} has no WSL packages" if outside else
               "the WSL runtime package is not in the repository of the release being installed") + \
              (" for Ubuntu 24.04" if noble else "")
        return _make("wsl", "this ROCm release has no WSL runtime",
                     f"{why}: only AMD's WSL releases ship the WSL runtime (hsa-runtime-rocr4wsl-amdgpu) that "
                     "reaches the GPU through /dev/dxg, and the first of them, 6.1.3, is for Ubuntu 22.04 only",
                     "install the amdgpu-install of a WSL release and use its wsl usecase: ROCm 6.4.2 (Ubuntu 22.04 "
                     "or 24.04; amdgpu-install_6.4.60402-1_all.deb) or 6.1.3 on Ubuntu 22.04 (amdgpu-install_"
                     "6.1.60103-1_all.deb), then amdgpu-install -y --usecase=wsl,rocm --no-dkms (remove the other "
                     "release's repository first: sudo amdgpu-install --uninstall); ROCm 7.2 and newer reach WSL "
                     "through librocdxg instead", [fact], missing or said)
    return None


_COLLECTIVES = re.compile(r"(?i)\b(?:NCCL|RCCL|nccl-tests|all_reduce_perf|torchrun|DistributedDataParallel|DDP|"
                          r"multi[- ]?GPU|--multi_gpu|tensor[_ ]parallel\w*)\b|多卡|多GPU")


def _wsl_one(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """The distribution runs under WSL 1, which has no GPU at all (GPU paravirtualisation is WSL 2's): said, or
    shown by `wsl -l -v` with VERSION 1."""
    listed = re.search(r"(?im)^\s*\*?\s*(\S+)\s+(?:Running|Stopped)\s+1\s*$", joined)
    said = re.search(r"(?i)(?<![A-Za-z])WSL ?1(?![\d.])", joined)
    if not listed and not said:
        return None
    distro = listed.group(1) if listed else "<distro>"
    symptoms = ctx.errors + _symptom_lines(ctx, ctx.sheet.of("complaint")) or _lines_matching(
        ctx, r"(?i)is_available|not found|no GPU|nvidia-smi|rocminfo")
    if not symptoms:
        return None
    return _first(_make("wsl", "the distribution runs under WSL 1, which has no GPU",
                        "only WSL 2 passes the GPU to Linux (through /dev/dxg and /usr/lib/wsl/lib); a distribution "
                        "under WSL 1 sees no GPU whatever is installed in it",
                        f"convert it to WSL 2 from Windows: wsl --set-version {distro} 2 (and wsl --set-default-version "
                        "2 for new ones; needs the Virtual Machine Platform feature), then wsl -l -v must show VERSION "
                        "2", [fact] if fact else [], symptoms))


def _wsl_nvml(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """An NVIDIA tool's NVML start-up failing under WSL 2 (Ollama's GPU discovery, nvidia-smi's own library)."""
    nvml = _lines_matching(ctx, r"(?i)nvml\w* (?:vram )?init failure|libnvidia-ml\.so\S*:? cannot open|"
                                r"Failed to initialize NVML")
    if nvml and (_vendor(ctx) == "nvidia" or re.search(r"(?i)\bCUDA\b|GeForce|\bRTX\b|\bQuadro\b|nvidia-", joined)):
        # NVML is loaded by name: WSL mounts the Windows driver's copy in /usr/lib/wsl/lib, and a libnvidia-ml from a
        # Linux driver package (in /lib/x86_64-linux-gnu) found first fails to start
        return _make("wsl", "WSL 2: the NVML library loaded is not WSL's",
                     "under WSL 2 the NVIDIA management library (libnvidia-ml.so.1) comes from the Windows driver, "
                     "mounted in /usr/lib/wsl/lib; the tool (" + (ctx.tool(nvml) or "its GPU discovery") + ") loaded "
                     "another copy (from a Linux driver package, or an unversioned libnvidia-ml.so that is not WSL's), "
                     "and its start-up fails",
                     "make the WSL copy the one found: sudo ln -sf /usr/lib/wsl/lib/libnvidia-ml.so.1 "
                     "/usr/lib/wsl/lib/libnvidia-ml.so; sudo ldconfig (ldconfig -p | grep nvidia-ml must show "
                     "/usr/lib/wsl/lib first), or export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH for the "
                     "service; remove Linux NVIDIA driver packages inside WSL (sudo apt remove 'libnvidia-*' "
                     "'nvidia-driver-*') and keep only the Windows driver", [fact], nvml)
    return None


def _wsl_collectives(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """NCCL (or RCCL) across GPUs under WSL 2: NCCL did not support WSL 2 at first (NVIDIA/nccl#442: maintainers said
    it was not supported, later releases run there), and WSL 2's GPU paravirtualisation has no peer-to-peer between
    cards, so a multi-GPU job there fails or hangs where native Linux runs it. Said as an error or as a question."""
    said = _lines_matching(ctx, _COLLECTIVES.pattern)
    if not said or not _WSL_SAID.search(joined):
        return None
    rccl = _vendor(ctx) == "amd" or re.search(r"(?i)\bRCCL\b", joined)
    if rccl:
        fix = ("run multi-GPU ROCm jobs on native Linux: ROCm on WSL 2 supports single-GPU work only (AMD's Radeon WSL "
               "limitations); on WSL 2 train on one GPU")
    else:
        fix = ("update NCCL to a release that supports WSL 2 (a current torch wheel brings one: pip install -U torch, "
               "or pip install -U nvidia-nccl-cu12) and run with NCCL_P2P_DISABLE=1 under WSL 2 (no GPU peer-to-peer "
               "there); for multi-GPU training at full speed use native Linux (a dual boot)")
    return _make("wsl", "collectives across GPUs under WSL 2",
                 "under WSL 2 the GPUs are paravirtualised: " + (
                     "RCCL is not supported there" if rccl else
                     "early NCCL releases did not support WSL 2 at all, and later ones run there only without GPU "
                     "peer-to-peer"), fix, [fact], ctx.errors or said)


# the Windows build, as `ver` / winver / systeminfo print it, beside a Linux shell prompt: a WSL 2 session
_WINDOWS_BUILD = re.compile(r"(?i)Microsoft Windows \[Version 10\.0\.(\d{5})(?:\.\d+)?\]|\bOS build\W{0,3}(\d{5})\b|"
                            r"\bWindows (?:1[01] )?(?:Insider )?build\W{0,3}(\d{5})\b")
_LINUX_PROMPT = re.compile(r"^\S+@[\w.-]+:[~/][^$#\n]{0,80}[$#]\s")
# released Windows builds with WSL 2 GPU compute (Windows 10 21H2/22H2, Windows 11 21H2 to 25H2, Server 2022/2025);
# GPU-PV came to Windows 10 with 21H2 (19044): an older build has none, a 2xxxx build outside the list is a preview
_RELEASED_BUILDS = {19044, 19045, 20348, 22000, 22621, 22631, 26100, 26200}


def _wsl_windows_build(ctx: Context, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """A WSL 2 session failing to reach the GPU on a Windows build that has no (working) GPU compute for WSL: a
    Windows 10 build before 21H2, or an Insider preview build; the fix is on the Windows side, its build."""
    said = _lines_matching(ctx, _WINDOWS_BUILD.pattern)
    if not said:
        return None
    m = _WINDOWS_BUILD.search(said[0].line)
    build = int(next(g for g in m.groups() if g))
    failing = ctx.of("wsl", "driver", "device-access", "visibility") + ctx.no_gpu() + _lines_matching(
        ctx, r"(?i)no CUDA-capable device|cudaGetDeviceCount returned|couldn't communicate with the NVIDIA driver|"
             r"/dev/dxg.{0,40}(?:No such file|not found)")
    if not failing or build in _RELEASED_BUILDS:
        return None
    if build < 19044:
        return _make("wsl", f"Windows build {build} gives WSL 2 no GPU",
                     f"WSL 2 reaches the GPU through Windows' GPU paravirtualisation, which Windows 10 has from 21H2 "
                     f"(build 19044); build {build} is older",
                     f"update Windows from build {build} to Windows 10 21H2 (19044) or newer, or Windows 11 (winver "
                     "shows the build), then wsl --update and wsl --shutdown; nothing to change inside Linux",
                     [fact], said[:1] + failing)
    return _make("wsl", f"Windows preview build {build} breaks GPU compute in WSL 2",
                 f"build {build} is a Windows Insider preview, not a released build; GPU compute in WSL 2 is provided "
                 "by Windows (its GPU paravirtualisation and the driver's WSL libraries), and some preview builds "
                 "break it, so CUDA inside WSL finds no device whatever is installed in Linux",
                 f"update Windows past build {build} (the next Insider build with the fix, or leave the Insider "
                 "programme for a released build), keep the Windows NVIDIA driver current, then wsl --shutdown; "
                 "nothing to change inside Linux (never install a Linux NVIDIA driver in WSL)",
                 [fact], said[:1] + failing)


def _wsl_pinned(ctx: Context, joined: str, fact: Optional[Fact]) -> Optional[Diagnosis]:
    """ggml's CUDA backend (llama.cpp and the tools built on it) running out of memory under WSL 2 where the model
    fits: it allocates its host buffers page-locked (pinned), and WSL 2 caps pinned host memory far below the RAM."""
    oom = _lines_matching(ctx, r"(?i)(?:CUDA error\W{0,3}|cudaMallocHost|pinned|ggml[-_]cuda\S*).{0,80}out of memory|"
                               r"out of memory.{0,80}(?:ggml[-_]cuda|cudaMallocHost|pinned)")
    if not oom or not re.search(r"(?i)\bggml|llama[._-]?cpp|\bllama_model_load|koboldcpp|\./main\b", joined):
        return None
    return _make("wsl", "WSL 2 limits the pinned memory llama.cpp's CUDA backend asks for",
                 "ggml's CUDA backend allocates its host buffers as pinned (page-locked) memory, which CUDA under WSL 2 "
                 "caps far below the machine's RAM, so the allocation fails with 'out of memory' although the model "
                 "fits in the GPU",
                 "turn pinned memory off for it: export GGML_CUDA_NO_PINNED=1 before starting it (or a build that "
                 "falls back to ordinary memory when the pinned allocation fails: update llama.cpp)", [fact], oom)


@rule("wsl")
def wsl(ctx: Context) -> Optional[Diagnosis]:
    cuda_lib = _lines_matching(ctx, r"(?i)libcuda\.so(?:\.1)? not found|libcuda\.so: cannot open")
    # cuDNN 8's convolution library (libcudnn_cnn_infer) loads the driver's libcuda itself when it starts: under WSL
    # that load is what fails, and cuDNN reports it as its own library not loading
    cudnn = _lines_matching(ctx, r"(?i)(?:Could not|Unable to|cannot|can't) load (?:the )?library libcudnn_cnn_infer")
    # WSL said, or its driver folder shown (ldconfig -p listing /usr/lib/wsl/lib): the libcuda is WSL's own
    if (cuda_lib or cudnn) and re.search(r"\bWSL|/usr/lib/wsl/lib\b", _text(ctx)):
        found = _make("wsl", "the WSL driver library is not on the loader path",
                      "under WSL 2 the NVIDIA driver's libcuda.so lives in /usr/lib/wsl/lib, which the loader does not "
                      "search here" + (" (cuDNN's libcudnn_cnn_infer loads libcuda when it starts, and reports that "
                                       "failure as its own)" if cudnn and not cuda_lib else ""),
                      "export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH in the shell (or the script) that "
                      "starts the job (or link /usr/lib/wsl/lib/libcuda.so.1 next to the library that loads it, in "
                      "site-packages/nvidia/cudnn/lib); never install a Linux NVIDIA driver inside WSL", [],
                      cuda_lib or cudnn)
        return _first(found) if cudnn and not cuda_lib else found
    joined = _text(ctx)
    # a Windows build printed beside a Linux shell prompt is a WSL session too
    windows_linux = _WINDOWS_BUILD.search(joined) and any(_LINUX_PROMPT.match(l) for l in ctx.sheet.lines)
    if not ctx.sheet.has("platform", "wsl") and not _WSL_SAID.search(joined) and not windows_linux:
        return None
    fact = next((f for f in ctx.sheet.facts if f.kind == "platform" and f.value == "wsl"), None)
    own = (_wsl_windows_build(ctx, fact) or _wsl_pinned(ctx, joined, fact) or _wsl_one(ctx, joined, fact) or _wsl_specific(ctx, joined, fact) or _wsl_nvml(ctx, joined, fact)
           or _wsl_collectives(ctx, joined, fact))
    if own is not None:
        return own
    if re.search(r"(?i)\blib(?:cudart|cublas\w*|cudnn\w*|nvrtc)\.so(?:\.\d+)*: cannot open", joined) and \
            not re.search(r"(?i)libcuda\.so", joined):
        return None   # a CUDA toolkit library the wheel expects from the system: the loader path, not WSL's driver
    errors = ctx.of("wsl", "visibility", "device-access", "driver") + ctx.no_gpu()
    if not errors and _vendor(ctx) == "amd":
        errors = [e for e in ctx.errors if e.family in (None, "torch-build", "rocm-libs-missing")]
    if not errors:   # the user's words: no GPU found, in English or Chinese
        errors = _lines_matching(ctx, r"(?:读不到|识别不到|找不到|检测不到|用不了|看不到).{0,6}(?i:gpu|显卡)|"
                                      r"(?i:gpu|显卡).{0,6}(?:读不到|识别不到|找不到|检测不到|用不了)")
    if not errors:   # or a program that hangs as soon as it touches the GPU (卡住, 卡死, 无响应)
        errors = _lines_matching(ctx, _WSL_HANG)
    if not errors and not ctx.sheet.has("complaint", "yes"):
        return None
    labels = [f.value.split("+rocm", 1)[1] for f in ctx.sheet.of("torch") if "+rocm" in f.value]
    therock = ctx.sheet.has("layout", "therock") or (labels[-1].startswith("7") if labels else
                                                     any(v.startswith("7") for v in ctx.sheet.values("rocm")))
    text = "\n".join(ctx.sheet.lines)
    arch, arch_fact = ctx.arch(errors)
    if arch is None:
        arch = _radeon_by_number(joined)
    # NVIDIA said in words (nvidia-smi, CUDA, a GeForce) with no AMD word: the paste is about CUDA under WSL
    nvidia_said = re.search(r"(?i)nvidia|\bcuda\b|geforce|\brtx\b|\bgtx\b|quadro|tesla", joined) and not re.search(
        r"(?i)\bamd\b|radeon|rocm|\bhip\b|\bgfx\d", joined)
    too_old = re.search(r"(?i)driver on your system is too old|driver version is insufficient", joined)
    if too_old and ((arch and arch.startswith("sm_")) or _vendor(ctx) == "nvidia" or nvidia_said):
        # under WSL the CUDA driver is the Windows one: updating anything inside Linux cannot help
        return _make("wsl", "WSL 2: the Windows NVIDIA driver is older than this CUDA",
                     "under WSL 2 CUDA runs on the Windows NVIDIA driver (mounted in /usr/lib/wsl/lib); it is older "
                     "than the CUDA the program was built for",
                     "update the Windows NVIDIA driver (Game Ready / Studio from nvidia.com or the NVIDIA app), then "
                     "wsl --shutdown and start WSL again; never install a Linux NVIDIA driver inside WSL; or install "
                     "a build for the older CUDA: " + _cuda_index_for_driver(ctx, arch), [fact], errors)
    if (arch and arch.startswith("sm_")) or _vendor(ctx) == "nvidia" or (arch is None and nvidia_said):
        return _make("wsl", "WSL 2: CUDA does not reach the NVIDIA GPU",
                     "under WSL 2 CUDA goes through the Windows NVIDIA driver, whose libcuda.so WSL mounts in "
                     "/usr/lib/wsl/lib; a Linux NVIDIA driver installed inside WSL, a loader path without that folder, "
                     "or a CPU torch hides the GPU",
                     "keep only the Windows NVIDIA driver (never install a Linux driver in WSL: sudo apt remove "
                     "'nvidia-driver-*' 'libnvidia-*' if one is there), export LD_LIBRARY_PATH=/usr/lib/wsl/lib:"
                     "$LD_LIBRARY_PATH" + (", and install a CUDA torch: " + _cuda_index_for_driver(ctx, arch)
                                            if ctx.tool(errors) not in _NOT_TORCH else
                                            f" for {ctx.tool(errors)}; update the Windows NVIDIA driver"),
                     [f for f in (fact, arch_fact) if f], errors)
    if ctx.tool(errors) == "ollama":
        return _make("wsl", "WSL 2: Ollama looks for /dev/kfd, which WSL does not have",
                     "under WSL 2 the GPU is reached through /dev/dxg; Ollama's detection skips it unless told to",
                     "install Ollama's ROCm bundle and set HSA_ENABLE_DXG_DETECTION=1 for the server (" +
                     set_variable("HSA_ENABLE_DXG_DETECTION", "1", ctx.sheet, "ollama") + ")", [fact], errors)
    if re.search(r"(?i)(?:detect|find|load|open)\w*\W+(?:\w+\W+){0,2}librocdxg|librocdxg\S*.{0,30}(?:not found|cannot)", text):
        return _make("wsl", "librocdxg is installed but the loader does not find it",
                     "the ROCm runtime loads librocdxg.so by name; /opt/rocm/lib is not on the loader's path (or its "
                     "cache was not refreshed after the install)",
                     "export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH (in the venv's activate script too), or "
                     "sudo ldconfig", [fact], errors)
    if arch and arch.startswith("gfx") and not re.match(r"gfx1[12]\d\d", arch):
        # AMD's WSL support matrix lists RDNA3 and RDNA4 Radeon / Radeon PRO cards only (the "Compatibility matrices"
        # page of rocm.docs.amd.com/projects/radeon, WSL section)
        return _make("wsl", f"ROCm on WSL does not support this GPU ({arch})",
                     f"AMD's ROCm for WSL runs only on RDNA3 and RDNA4 GPUs (Radeon RX 7000 / 9000, Radeon PRO W7000 / "
                     f"R9000); {arch} is not among them, so no WSL runtime sees it",
                     "run ROCm on native Linux (a dual boot) for this GPU, or move to a GPU that ROCm on WSL supports "
                     "(RDNA3 / RDNA4); on Windows itself use a path that supports it (DirectML: torch-directml, or a "
                     "Vulkan build of llama.cpp / Ollama)",
                     [f for f in (fact, arch_fact) if f], errors)
    runtime = ("ROCm 7 on WSL reaches the GPU through librocdxg: install AMD's WSL driver stack (amdgpu-install "
               "--usecase=wsl,rocm --no-dkms) and keep librocdxg on the library path" if therock else
               "install AMD's ROCm for WSL (amdgpu-install -y --usecase=wsl,rocm --no-dkms), then replace the "
               "libhsa-runtime64.so that the torch wheel bundles with /opt/rocm/lib/libhsa-runtime64.so.1")
    return _make("wsl", "WSL 2: the ROCm runtime cannot see the GPU through /dev/dxg",
                 "under WSL 2 there is no /dev/kfd; only AMD's WSL runtime talks to the Windows driver through "
                 "/dev/dxg, and the stock Linux runtime (the one pytorch.org wheels bundle) finds no GPU",
                 runtime + "; the Windows Adrenalin driver must be the WSL-enabled release", [fact], errors)


def _dkms_version_said(ctx: Context) -> Optional[Diagnosis]:
    """ROCm failing on one amdgpu (DKMS) driver version and working on another, said in the paste: the out-of-tree
    module of that version is the fault, not the user's permissions or the GPU."""
    joined = "\n".join(ctx.sheet.lines)
    versions = re.findall(r"(?i)\bamdgpu(?:-dkms)?\s+(\d+\.\d+\.\d+)", joined)
    if len(set(versions)) < 2 or not re.search(r"(?i)\bworks? (?:on|with)\b|\bworked (?:on|with)\b|downgrad", joined):
        return None
    failing = [e for e in ctx.errors if re.search(r"(?i)HSA_STATUS_ERROR|rocminfo|ROCk module|hipErrorNoDevice", e.line)]
    covers = failing or _lines_matching(ctx, r"(?i)\bamdgpu(?:-dkms)?\s+\d+\.\d+\.\d+")
    return _first(_make("driver", f"the amdgpu {versions[0]} DKMS module fails where {versions[-1]} works",
                        f"ROCm works with amdgpu {versions[-1]} and fails with {versions[0]}: the out-of-tree (DKMS) "
                        "driver of that version does not work with this kernel and firmware",
                        "remove the DKMS module and use the kernel's own amdgpu: sudo amdgpu-install --uninstall (or apt "
                        "remove --purge amdgpu-dkms), then sudo amdgpu-install --usecase=rocm --no-dkms, reboot; or "
                        f"keep amdgpu-dkms at {versions[-1]}", [ctx.line_fact(covers[0])] if covers else [], covers))


# the kernel series Ubuntu's LTS releases shipped, GA and HWE in order (ubuntu.com/kernel/lifecycle): the one before
# a new kernel is the one the machine most likely ran before the update
_UBUNTU_SERIES = ("4.4", "4.8", "4.10", "4.13", "4.15", "4.18", "5.0", "5.3", "5.4", "5.8", "5.11", "5.13", "5.15",
                  "5.19", "6.2", "6.5", "6.8", "6.11", "6.14", "6.17")


# The first ROCm release whose amdgpu-dkms builds for a kernel series that the one before it failed on, as AMD's
# maintainers answered: 6.14 (Ubuntu 24.04 HWE) from 6.4.2 (ROCm #4619, legacy-rocm-build #5074); 6.17 (Ubuntu
# 25.10) from 7.1.1 (legacy-rocm-build #5624)
_DKMS_FIRST_BUILDS = {"6.14": "6.4.2", "6.17": "7.1.1"}


def _first_dkms_release(text: str) -> Optional[tuple[str, str]]:
    """(kernel series, ROCm release) where the kernel is one the table knows and the ROCm being installed is older."""
    m = re.search(r"\b(\d\.\d+)\.\d+-\d+-(?:generic|lowlatency)\b", text)
    release = _rocm_release(text)
    if not m or m.group(1) not in _DKMS_FIRST_BUILDS or not release:
        return None
    first = _DKMS_FIRST_BUILDS[m.group(1)]
    def as_tuple(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))
    return (m.group(1), first) if as_tuple(release) < as_tuple(first) else None


def _previous_ubuntu_kernel(text: str) -> Optional[str]:
    m = re.search(r"\b(\d\.\d+)\.\d+-\d+-(?:generic|lowlatency)\b", text)
    if not m or m.group(1) not in _UBUNTU_SERIES or m.group(1) == _UBUNTU_SERIES[0]:
        return None
    return _UBUNTU_SERIES[_UBUNTU_SERIES.index(m.group(1)) - 1]


# Windows: a HIP function missing from amdhip64.dll, which the AMD display driver installs
_WINDOWS_HIP_ENTRY = re.compile(r"(?i)(?:procedure )?entry point (hip\w+) could not be (?:located|found)")
_ADRENALIN_VERSION = re.compile(r"(?i)(?:Adrenalin(?: Edition)?|AMD (?:Software|display|graphics|GPU|Radeon)(?: \w+)? "
                                r"drivers?)\s+\(?(?:version\s+)?(\d{2}\.\d{1,2}\.\d)")


def _windows_amd_driver(ctx: Context) -> Optional[Diagnosis]:
    """The AMD Windows driver (Adrenalin) is what HIP runs on there: a HIP entry point missing from amdhip64.dll is a
    driver older than the tool; a named driver release after which the GPU stopped being used (or crawls) is that
    release."""
    entry = _lines_matching(ctx, _WINDOWS_HIP_ENTRY.pattern)
    if entry:
        name = _WINDOWS_HIP_ENTRY.search(entry[0].line).group(1)
        return _make("driver", f"the AMD driver's HIP runtime has no {name}",
                     f"on Windows HIP (amdhip64.dll) comes with the AMD display driver; the installed one predates "
                     f"{name}, which the tool (ZLUDA, a HIP build of llama.cpp, PyTorch for Windows) calls",
                     "update the AMD driver: AMD Software: Adrenalin Edition, the current release (or the one the "
                     "tool's README names), clean install; then check C:\\Windows\\System32\\amdhip64*.dll is the "
                     "new one", [], entry)
    named = _ADRENALIN_VERSION.search(_text(ctx))
    worse = _lines_matching(ctx, r"(?i)\b(?:slow\w*|acceleration (?:appears |is )?disabled|not (?:being )?(?:using|used|"
                                 r"utili[sz]ed)|no longer "
                                 r"(?:uses?|works?)|falls? back to (?:the )?CPU|stopped working|since (?:the|updating))")
    if named and worse:
        version = named.group(1)
        return _make("driver", f"the AMD driver {version} broke the GPU path",
                     f"after AMD Software: Adrenalin {version} the GPU is no longer used (or crawls): a regression in "
                     "that driver release (its HIP memory allocation on Windows), not the tool",
                     f"roll back to the previous driver (AMD's previous-drivers page; a clean install, DDU if needed) "
                     f"or install the release after {version} once it is out; keep the tool as it is", [], worse)
    return None


@rule("driver")
def driver(ctx: Context) -> Optional[Diagnosis]:
    errors = [e for e in ctx.of("driver") if not re.search(r"not supported in kfd", e.line)
              and not (_NVIDIA_DRIVER.search(e.line) and _vendor(ctx) == "amd" and not _nvidia_gpu(ctx))]
    # (an NVIDIA driver message on an AMD-only machine is a CUDA torch there: torch-build)
    if ctx.sheet.is_windows or re.search(r"(?i)\bWindows\b|\.dll\b|Adrenalin", _text(ctx)):
        windows = _windows_amd_driver(ctx)
        if windows is not None:
            return windows
    unreadable = [f for f in ctx.sheet.of("sensors") if f.value == "unreadable"]
    if unreadable and not errors:
        names = ", ".join(dict.fromkeys(f.detail for f in unreadable))
        every = not any(f.value == "read" for f in ctx.sheet.of("sensors"))
        return _make("driver", f"the GPU table reads no sensor of {names}" + (" (of any GPU)" if every else ""),
                     "every sensor reads N/A: the driver does not answer for that GPU (the amdgpu module not bound to "
                     "it, a GPU passed to a VM without its power management, or an smi tool older than the card), so "
                     "the table is no proof of a working GPU",
                     "sudo dmesg | grep -i -e amdgpu -e kfd | tail -30; rocminfo | grep -e Marketing -e gfx (lists "
                     "only the GPUs ROCm can use); amd-smi static --asic", unreadable, [],
                     severity="error" if every else "warning")
    dkms = _dkms_version_said(ctx)
    if dkms is not None:
        return dkms
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    joined = _text(ctx)
    kernel = ctx.sheet.first("kernel")
    secure_boot = ("if Secure Boot is on, it refuses the unsigned module: enroll its key (sudo mokutil --import "
                   "<the DKMS MOK key>) or turn Secure Boot off")
    if re.search(r"(?i)driver/library version mismatch|version-mismatch|does not match DSO version|NVRM: API mismatch",
                 text):
        # XLA names both versions: the loaded kernel module's and the libcuda's (the user-space driver's); NVRM the
        # client's (the libraries') and the kernel module's
        xla = re.search(r"(?i)kernel version (\d+)\.\S+ does not match DSO version (\d+)\.", text)
        nvrm = re.search(r"(?i)client has the version (\d+)\.\S+,? but this kernel module has the version (\d+)\.", text)
        module, libraries = ((xla.group(1), xla.group(2)) if xla else
                             (nvrm.group(2), nvrm.group(1)) if nvrm else (None, None))
        branch = f"nvidia-driver-{libraries} (the libraries' branch; or {module}, the module's)" if libraries \
            else "nvidia-driver-<version>"
        fix = ("reboot: a driver update replaced the user-space libraries while the old kernel module is still loaded; "
               f"if it stays, reinstall one driver version for both cleanly: sudo apt install --reinstall {branch}, "
               "then reboot (nvidia-smi and cat /proc/driver/nvidia/version must name the same version)")
        cause = "the loaded NVIDIA kernel module and the user-space driver libraries are different versions"
    elif re.search(r"(?i)Key was rejected by service|Required key not available|unsigned module|module verification "
                   r"failed", text):
        module = "nvidia" if re.search(r"(?i)nvidia", text) else "amdgpu"
        fix = (f"Secure Boot refuses the unsigned {module} module: enroll the DKMS signing key (sudo mokutil --import "
               "/var/lib/dkms/mok.pub, then reboot and complete the enrolment in the blue MOK screen) or turn Secure "
               "Boot off in the firmware settings")
        cause = f"the {module} kernel module is not signed with a key the firmware trusts (Secure Boot is on)"
    elif re.search(r"(?i)nvidia-smi\W{0,3}(?:command )?not found|command not found\W{0,3}nvidia-smi|nvidia-smi. is not "
                   r"recognized", text):
        inside = bool(_CONTAINED.search(joined))
        fix = ("in a container nvidia-smi comes from the host's driver through the NVIDIA Container Toolkit: install it "
               "(sudo nvidia-ctk runtime configure --runtime=docker; restart docker) and start with --gpus all"
               if inside else
               "install the NVIDIA driver (nvidia-smi comes with it): sudo ubuntu-drivers install (or sudo apt install "
               "nvidia-driver-<version>; Fedora: akmod-nvidia), then reboot; with Secure Boot on, enroll its key "
               "(mokutil) when asked")
        cause = "the NVIDIA driver is not installed " + ("in reach of the container" if inside else "on this system")
    elif re.search(r"(?i)Error 804|forward compatibility was attempted", text):
        fix = ("remove the CUDA forward-compatibility package (sudo apt remove cuda-compat-*; unset a LD_LIBRARY_PATH "
               "that points at /usr/local/cuda/compat): it is for datacenter GPUs only; or update the NVIDIA driver "
               "to the one the CUDA version needs")
        cause = "the CUDA forward-compatibility libraries are loaded on a GPU (GeForce, RTX) that does not support them"
    elif re.search(r"(?i)Error 803|unsupported display driver", text):
        fix = ("the user-space driver libraries and the kernel module are of different versions: reboot after a driver "
               "update (or reinstall one driver version cleanly: sudo apt install --reinstall nvidia-driver-<version>), "
               "and remove a stray libcuda.so from LD_LIBRARY_PATH or the container image")
        cause = "the CUDA libraries and the loaded NVIDIA driver do not match"
    elif re.search(r"(?i)Error 999|CUDA error\W{0,3}unknown error|\b(?:err(?:or)?|failure)\W{0,3}999\b|\b(?:after|since) "
                   r"(?:a |the )?(?:sleep|suspend|resume|hibernat\w*|wak(?:e|ing) up)\b|(?:休眠|睡眠|挂起|待机)\S{0,8}后", text):
        fix = ("reload the NVIDIA unified-memory module: sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (after a "
               "suspend / resume it is left broken), or reboot; if it comes back after each sleep, keep the memory "
               "across suspend: options nvidia NVreg_PreserveVideoMemoryAllocations=1 and the nvidia-suspend services")
        cause = "the CUDA driver is in a broken state (most often after the machine slept: nvidia_uvm)"
    elif re.search(r"(?i)secure ?boot", text):
        module = "nvidia" if re.search(r"(?i)nvidia", joined) else "amdgpu"
        fix = (f"Secure Boot refuses the unsigned {module} module: enroll the DKMS signing key (sudo mokutil --import "
               "/var/lib/dkms/mok.pub, reboot, and complete the enrolment in the blue MOK screen; check with mokutil "
               "--sb-state and sudo dmesg | grep -i -e 'key was rejected' -e lockdown) or turn Secure Boot off in the "
               "firmware settings")
        cause = f"Secure Boot is on and the {module} kernel module is not signed with a key the firmware trusts"
    elif re.search(r"(?i)kernel (?:update|upgrade)|(?:更新|升级)\S{0,12}内核", text) and not re.search(
            r"(?i)Bad return status|fail\w* to (?:build|compile)|build (?:error|fail)|编译失败|构建失败", text):
        nvidia = re.search(r"(?i)nvidia", joined)
        again = ("sudo apt install --reinstall nvidia-dkms-<version> (or sudo dkms autoinstall)" if nvidia else
                 "sudo apt install --reinstall amdgpu-dkms (or sudo dkms autoinstall), or drop DKMS: sudo "
                 "amdgpu-install --usecase=rocm --no-dkms")
        fix = (f"the driver's module was not rebuilt for the new kernel: install its headers (sudo apt install "
               f"linux-headers-$(uname -r)), then {again}, and reboot; meanwhile boot the previous kernel from the GRUB "
               "menu; with Secure Boot on, enroll the DKMS key (sudo mokutil --import /var/lib/dkms/mok.pub)")
        cause = "the kernel update left the GPU driver's module unbuilt (or unsigned) for the new kernel"
    elif re.search(r"^\s*No devices were found\s*$", text) or re.search(r"(?i)\bNo devices were found\b", text) and \
            re.search(r"(?i)nvidia-smi", joined):
        fix = ("nvidia-smi finds no GPU the loaded driver can drive: check lspci | grep -i nvidia (is the card seen), "
               "sudo dmesg | grep -i -e nvrm -e nvidia (the driver's refusal: an unsupported card for this driver "
               "branch, the open kernel modules on a pre-Turing card, a fallen-off-the-bus GPU); reinstall the driver "
               "branch that supports the card and reboot")
        cause = "the NVIDIA driver is loaded but drives no GPU"
    elif re.search(r"(?i)nvidia kernel module (?:is )?missing", text):
        fix = f"the nvidia module is not loaded: {secure_boot}; else reinstall the driver for the running kernel"
        cause = "the NVIDIA kernel module is not loaded for this kernel"
    elif re.search(r"(?i)could not load (?:the )?GPU driver", text):
        # a firmware update puts Secure Boot back to its default (on): the module that loaded before is refused now
        bios = re.search(r"(?i)\bBIOS\b|\bUEFI\b|firmware update", "\n".join(ctx.sheet.lines))
        fix = (("a BIOS update turns Secure Boot back on, and it refuses the unsigned module: turn Secure Boot off again "
                "in the firmware settings, or enroll the module's key (sudo mokutil --import /var/lib/dkms/mok.pub, "
                "then complete the enrolment at the next boot)") if bios else
               f"the GPU's kernel module did not load: {secure_boot}; else reinstall the driver for the running kernel")
        cause = "the GPU driver's kernel module is not loaded" + (" since the BIOS update" if bios else "")
    elif re.search(r"(?i)DKMS\b.{0,80}\b(?:freeze|hang)", text):
        fix = ("drop the DKMS module and use the kernel's own amdgpu: sudo amdgpu-install --uninstall; sudo "
               "amdgpu-install -y --usecase=rocm --no-dkms")
        cause = "the amdgpu-dkms module misbehaves on this kernel" + (f" ({kernel.value})" if kernel else "")
    elif re.search(r"Could not locate dkms\.conf", text):
        tree = re.search(r"(/var/lib/dkms/amdgpu/[^/\s]+)", "\n".join(ctx.sheet.lines))
        # dpkg-reconfigure re-runs the package's own script: dkms add, build and install for the running kernel
        fix = ("rebuild and register the installed module: sudo dpkg-reconfigure amdgpu-dkms (then sudo dkms status "
               "must list amdgpu as installed for $(uname -r)); if dkms still trips over the old version, remove the "
               f"leftover tree: sudo rm -rf {tree.group(1) if tree else '/var/lib/dkms/amdgpu/<old version>'}, then "
               "install the amdgpu-dkms package again")
        cause = "an old amdgpu-dkms version left an empty tree in /var/lib/dkms that dkms cannot read"
    elif re.search(r"(?i)Module (?:amdgpu|nvidia\w*) not found in directory", text):
        module = re.search(r"(?i)Module (amdgpu|nvidia\w*) not found in directory (\S+)", text)
        if module.group(1).lower() == "amdgpu":
            # Ubuntu's cloud / minimal kernels leave the GPU drivers out of the base package (in -modules-extra)
            fix = ("this kernel has no amdgpu module: on Ubuntu install the kernel's extra modules, sudo apt install "
                   "linux-modules-extra-$(uname -r) (cloud / minimal kernels such as -aws, -azure, -gcp, -kvm leave "
                   "amdgpu out; a -generic kernel has it), then sudo modprobe amdgpu; or install amdgpu-dkms for this "
                   "kernel (sudo amdgpu-install --usecase=dkms)")
        else:
            fix = ("the NVIDIA module was not built for this kernel: install its headers (sudo apt install "
                   "linux-headers-$(uname -r)) and rebuild it (sudo dkms autoinstall, or reinstall nvidia-dkms-"
                   "<version>), then sudo modprobe nvidia; " + secure_boot)
        cause = f"the running kernel ({module.group(2).rstrip('/').rsplit('/', 1)[-1]}) has no {module.group(1)} module"
    elif re.search(r"(?i)nvidia-container-cli.{0,80}nvml error: driver not loaded", text):
        # the container toolkit's hook reads the host's driver: the module is missing on the host, not in the image
        fix = ("the host's NVIDIA kernel module is not loaded: run nvidia-smi on the host itself; reinstall the driver "
               "for the host's running kernel (sudo apt install --reinstall nvidia-driver-<version>, or sudo dkms "
               f"autoinstall after a kernel update), {secure_boot}; reboot, then start the container again")
        cause = "the NVIDIA Container Toolkit finds no loaded NVIDIA driver on the host"
    elif re.search(r"(?i)couldn.t communicate with the NVIDIA driver|Failed to initialize NVML: Driver Not Loaded", text):
        fix = ("the NVIDIA kernel module is not loaded: reinstall the driver for the running kernel (sudo apt install "
               "--reinstall nvidia-driver-<version>; or dkms autoinstall), check Secure Boot, reboot")
        cause = "nvidia-smi cannot reach the kernel driver (a kernel update without the module rebuilt, or Secure Boot)"
    elif re.search(r"(?i)driver (?:on your system is too old|version is insufficient)", text):
        found = re.search(r"found version (\d{4,5})", text)
        cuda = ctx.sheet.values("cuda")
        # the driver branch said in words ("driver 470", "nvidia-driver-510"): the newest CUDA it runs
        branch = re.search(r"(?i)\bdriver(?: version)?\W{0,3}(\d{3})(?:\.\d+){0,2}\b|nvidia-driver-(\d{3})\b", joined)
        runs = max((c for c, b in _DRIVER_FOR_CUDA if branch and b <= int(branch.group(1) or branch.group(2))),
                   default=None)
        most = (f"{int(found.group(1)) // 1000}.{int(found.group(1)) % 1000 // 10}" if found else
                cuda[-1] if cuda else f"{runs[0]}.{runs[1]}" if runs else None)
        older = ""
        if most and most.split(".")[0] == "11":
            older = "; or keep the driver and install the torch built for CUDA 11: --index-url " \
                    "https://download.pytorch.org/whl/cu118"
        elif most and most.split(".")[0] == "12":
            older = "; or keep the driver and install the torch built for CUDA 12.6: --index-url " \
                    "https://download.pytorch.org/whl/cu126"
        if most and not older and re.fullmatch(r"\d+\.\d+", most):
            older = (f"; or keep the driver and install a torch built for CUDA {most} (cu{most.replace('.', '')}: "
                     f"an older torch release, from https://download.pytorch.org/whl/cu{most.replace('.', '')})")
        fix = (f"update the NVIDIA driver (it runs CUDA {most or '?'} at most; a current torch needs a driver for "
               f"CUDA 12: 525 or newer, 570+ for CUDA 12.8){older}")
        cause = "torch was built for a newer CUDA than the installed driver supports"
    elif re.search(r"(?i)Bad return status for module build|dkms.*(?:error|failed)|dkms-failed|DKMS fails? to build|"
                   r"dkms\b.{0,40}\bfail(?:s|ed|ing)? to (?:build|compile|install)|dkms.{0,20}(?:编译|构建)(?:失败|出错)",
                   text):
        previous = _previous_ubuntu_kernel(text + " " + (kernel.value if kernel else ""))
        first = _first_dkms_release(joined + " " + (kernel.value if kernel else ""))
        newer = (f"install the amdgpu-dkms of ROCm {first[1]} or newer (the first release whose driver builds for the "
                 f"{first[0]} kernel: sudo amdgpu-install --uninstall, then the amdgpu-install of {first[1]})" if first
                 else "install the amdgpu-dkms of a newer ROCm release (one that lists this kernel)")
        fix = (newer + ", or boot a supported kernel (one the ROCm release's compatibility matrix "
               "lists)" + (f" (the series before it, {previous}: sudo apt install linux-image-"
                                         f"{previous}.0-<abi>-generic linux-headers-{previous}.0-<abi>-generic, pick "
                                         "it in GRUB's Advanced options, and hold the newer one until ROCm lists it)"
                                         if previous else "") +
               ", or drop the DKMS module: sudo amdgpu-install --usecase=rocm --no-dkms (the kernel's own amdgpu "
               "driver serves ROCm)")
        cause = "the amdgpu-dkms module does not build for this kernel" + (f" ({kernel.value})" if kernel else "")
    elif re.search(r"amdgpu version file missing", text):
        return None   # Ollama's note on distribution kernels: harmless by itself, the real cause is elsewhere
    elif re.search(r"(?i)firmware|\bSMU\b|\bPSP\b", text):
        fix = "install a newer linux-firmware package (the GPU's firmware files are newer than the distribution's)"
        cause = "amdgpu cannot load this GPU's firmware"
    elif re.search(r"(?i)\bnvidia", text) and not re.search(r"(?i)\bamdgpu\b|\brocm|radeon", joined):
        # an NVIDIA driver component failing with no reading of its own: the kernel module first
        fix = ("read sudo dmesg | grep -i -e NVRM -e nvidia (the kernel module's own error) and nvidia-smi; if the "
               "module is not loaded, reinstall the driver for the running kernel (sudo apt install --reinstall "
               f"nvidia-driver-<version>, or sudo dkms autoinstall after a kernel update); {secure_boot}; reboot")
        cause = "an NVIDIA driver component failed to start (the kernel module not loaded, or not matching)"
    else:
        fix = ("sudo modprobe amdgpu and read sudo dmesg | grep -i amdgpu; if it is not there, install the driver "
               f"(sudo amdgpu-install --usecase=dkms) or boot a kernel that has it; {secure_boot}")
        cause = "the amdgpu kernel driver is not loaded for the GPU"
    # with no driver loaded, nothing above it can work: the runtime's and the tools' own failures are its symptoms
    downstream = ctx.of("device-access", "visibility", "rocm-libs-missing") + ctx.no_gpu() if re.search(
        r"NOT loaded|not found in modules|modprobe|couldn.t communicate", text) else ctx.no_gpu()
    return _make("driver", "the GPU driver is not working", cause, fix, [ctx.line_fact(e) for e in errors[:2]],
                 errors + downstream)


# NVIDIA's open kernel modules drive Turing and newer GPUs only (they need the GPU System Processor); Maxwell, Pascal
# and Volta cards need the proprietary modules (NVIDIA's open-gpu-kernel-modules README; the driver's installation
# guide since 560, where the open modules became the default)
_OPEN_MODULES = re.compile(r"(?i)nvidia-(?:driver-\d+-)?open\b|\bopen (?:gpu )?kernel modules?\b|-open\b.{0,20}\bdriver|"
                           r"not supported by open nvidia\.ko|required GPU System Processor")
_PRE_TURING = re.compile(r"(?i)\bGTX ?(?:9[5-8]0|10[5-8]0)(?: ?Ti)?\b|\bTitan (?:X|Xp|V)\b|\b(?:Tesla )?[PMK]\d{2,3}\b|"
                         r"\bV100\b|\bQuadro [PMK]\d{3,4}\b|\b(?:Pascal|Maxwell|Volta|Kepler)\b")


@rule("driver")
def open_modules_on_old_gpu(ctx: Context) -> Optional[Diagnosis]:
    """The open NVIDIA kernel modules on a GPU older than Turing: they refuse it (no GSP), so nvidia-smi finds no
    device although the driver is installed."""
    text = _text(ctx)
    refused = _lines_matching(ctx, r"(?i)not supported by open nvidia\.ko|required GPU System Processor")
    card = _PRE_TURING.search(text)
    if not refused and not (card and _OPEN_MODULES.search(text)):
        return None
    symptom = refused or _lines_matching(ctx, r"(?i)No devices were found|NVIDIA-SMI has failed|couldn.t communicate|"
                                              r"No CUDA GPUs are available|Found no NVIDIA driver|RmInitAdapter failed")
    if not symptom:
        return None
    branch = re.search(r"(?i)nvidia-driver-(\d{3})|driver (?:version )?(\d{3})\b|\b(\d{3})\.\d+(?:\.\d+)?\b", text)
    number = next((g for g in branch.groups() if g), None) if branch else None
    package = f"nvidia-driver-{number}" if number else "nvidia-driver-<branch>"
    return _first(_make(
        "driver", "the open NVIDIA kernel modules do not drive this GPU" + (f" ({card.group(0)})" if card else ""),
        "NVIDIA's open kernel modules support Turing and newer GPUs only (they run on the GPU System Processor); an "
        "older card (Maxwell, Pascal, Volta) is left without a driver, so nvidia-smi finds no device",
        f"install the proprietary kernel modules of the same branch instead: sudo apt install {package} (the package "
        f"without -open; it replaces {package}-open), or with NVIDIA's .run installer pick the proprietary flavour "
        "(-m=kernel, not kernel-open); then reboot; branch 580 is the last with Maxwell, Pascal and Volta support",
        [], symptom))


# The Strix / Krackan APUs (gfx1150-gfx1152): linux-firmware 20251125 shipped an MES firmware (0x83) for them that hangs
# or faults ROCm work; 20251111 is the last good release, and the revert came in later packages (legacy-rocm-build
# #5724 and #5616, AMD's answers; kyuz0/amd-strix-halo-toolboxes #37)
_STRIX_APU = re.compile(r"(?i)Strix Halo|Strix Point|Krackan|Ryzen AI Max|\bAI Max\+?|\b(?:AMD|Ryzen AI(?: Max)?\+?) "
                        r"3[89]5\+?\b|\b8060S\b|\b8050S\b|\b890M\b|\b880M\b|\b860M\b|\bgfx115[012]\b")
_STUCK = re.compile(r"(?i)\b(?:still waiting|waiting for|hangs?|hung|stuck|freez\w*|never (?:loads?|finishes|answers)|"
                    r"time[sd]? ?out)\b|MES failed|\bMES\b.{0,40}\b(?:fail|timeout|hang)|卡住|卡死|无响应")


@rule("driver")
def apu_mes_firmware(ctx: Context) -> Optional[Diagnosis]:
    """ROCm work that hangs (or never answers) on a Strix Halo / Strix Point / Krackan APU while the CPU path works:
    the GPU's MES firmware from linux-firmware, not the tool. A likely reading: the package's version decides."""
    text = _text(ctx)
    apu = _STRIX_APU.search(text) or any(a in ("gfx1150", "gfx1151", "gfx1152") for a in ctx.sheet.machine_archs)
    if not apu or not re.search(r"(?i)\brocm\b|\bhip\b|\bgfx11|\bGPU\b", text):
        return None
    stuck = _lines_matching(ctx, _STUCK.pattern)
    if not stuck or ctx.errors and any(e.family not in (None, "driver", "gpu-hang") for e in ctx.errors):
        return None   # an error of its own family (a missing arch, memory, a library) says what it is
    return _make("driver", "the APU's MES firmware from linux-firmware hangs ROCm",
                 "on Strix Halo / Strix Point / Krackan APUs (gfx1150-gfx1152) the linux-firmware 20251125 release "
                 "ships an MES firmware (0x83) under which ROCm work hangs or faults while the CPU path runs",
                 "check the firmware: apt policy linux-firmware (rpm -q linux-firmware; sudo cat "
                 "/sys/kernel/debug/dri/*/amdgpu_firmware_info | grep MES); if it is 20251125, downgrade linux-firmware "
                 "to 20251111 (or update to a package with the MES revert), reboot, and run the GPU path again",
                 [], stuck, confirmed=False)


# The oldest Linux driver branch of each CUDA toolkit (NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions"): a driver runs the CUDA of its branch and older; code a newer toolkit compiled to
# PTX cannot be loaded by it
_DRIVER_FOR_CUDA = (((11, 0), 450), ((11, 1), 455), ((11, 2), 460), ((11, 3), 465), ((11, 4), 470), ((11, 5), 495),
                    ((11, 6), 510), ((11, 7), 515), ((11, 8), 520), ((12, 0), 525), ((12, 1), 530), ((12, 2), 535),
                    ((12, 3), 545), ((12, 4), 550), ((12, 5), 555), ((12, 6), 560), ((12, 8), 570), ((12, 9), 575),
                    ((13, 0), 580))
_PTX_REFUSED = re.compile(r"(?i)no kernel image is available|unsupported PTX version|PTX was compiled with an unsupported "
                          r"toolchain|UNSUPPORTED_PTX_VERSION")


@rule("driver")
def driver_older_than_toolkit(ctx: Context) -> Optional[Diagnosis]:
    """A CUDA toolkit newer than the NVIDIA driver, both named, and the driver refusing the compiled code: the PTX
    the newer toolkit emits is JIT-compiled by the driver, which knows only its own CUDA's PTX (XLA, numba, triton
    and CuPy compile at run time, so "no kernel image" here is the driver's age, not the GPU's architecture)."""
    refused = _lines_matching(ctx, _PTX_REFUSED.pattern)
    if not refused:
        return None
    text = _text(ctx)
    driver = re.search(r"(?i)\b(?:nvidia[- ])?driver(?: version)?\W{0,3}(\d{3})(?:\.\d+){0,2}\b", text)
    # the toolkit said as cuda-11.6 / CUDA 11.6.2 / cuda_12.4, never nvidia-smi's "CUDA Version:" (the driver's own)
    toolkits = [(int(a), int(b)) for a, b in re.findall(r"(?i)\bcuda(?:[- _]|\s+toolkit\s+)(\d{2})\.(\d)(?:\.\d+)?\b", text)]
    if driver is None or not toolkits:
        return None
    branch = int(driver.group(1))
    runs = max((cuda for cuda, least in _DRIVER_FOR_CUDA if least <= branch), default=None)
    newest = max(toolkits)
    if runs is None or newest <= runs:
        return None
    # within one major version a prebuilt wheel's cubins run on the older driver (minor version compatibility): there
    # only code compiled at run time (XLA, numba, CuPy, Triton) meets the driver's PTX limit
    if newest[0] == runs[0] and not re.search(r"(?i)\b(?:jax|jaxlib|xla|numba|cupy|triton|tensorflow)\b", text):
        return None
    least = next(b for cuda, b in _DRIVER_FOR_CUDA if cuda >= newest)
    have = f"{runs[0]}.{runs[1]}"
    return _make("driver", f"the NVIDIA driver {branch} is older than CUDA {newest[0]}.{newest[1]}",
                 f"driver {branch} runs CUDA {have} at most; the code built with the CUDA {newest[0]}.{newest[1]} "
                 "toolkit (its PTX) cannot be loaded by it, so the launch finds no kernel image",
                 f"update the NVIDIA driver to {least} or newer (sudo apt install nvidia-driver-{least} or a later "
                 f"branch, then reboot), or keep driver {branch} and use the CUDA {have} toolkit (and builds made for "
                 f"CUDA {have})", [], refused)


_CUDA_UNUSABLE = re.compile(r"(?i)is_available\(\)\W{0,3}(?:returns?|is|gives|=+|->|:)?\s*False|No CUDA GPUs are "
                            r"available|CUDA (?:is )?(?:not available|unavailable)|cuda(?:Get)?(?:Device|Init)\w*.{0,40}"
                            r"(?:fail|error)|CUDA initialization: The NVIDIA driver on your system is too old")


@rule("driver")
def driver_branch_too_old(ctx: Context) -> Optional[Diagnosis]:
    """A CUDA torch that finds no GPU where the paste names an NVIDIA driver branch too old for the torch's CUDA
    (a CUDA 12 build needs the 525 branch or newer, a CUDA 11 build 450 or newer: CUDA's minor version compatibility
    within a major version, NVIDIA's CUDA compatibility guide)."""
    failing = _lines_matching(ctx, _CUDA_UNUSABLE.pattern)
    if not failing:
        return None
    text = _text(ctx)
    driver = re.search(r"(?i)Driver Version:?\s*(\d{3})\.|nvidia-driver-(\d{3})\b|\bdriver (?:version |branch )?(\d{3})"
                       r"(?:\.\d+){1,2}\b", text)
    if driver is None:
        return None
    branch = int(next(g for g in driver.groups() if g))
    labels = [f.value.split("+cu", 1)[1] for f in ctx.sheet.of("torch") if "+cu" in f.value]
    major = int(labels[-1][:2]) if labels and labels[-1][:2].isdigit() else 12   # today's wheels: CUDA 12
    least = 525 if major >= 12 else 450
    if branch >= least:
        return None
    runs = max((cuda for cuda, b in _DRIVER_FOR_CUDA if b <= branch), default=None)
    most = f"CUDA {runs[0]}.{runs[1]} at most" if runs else "no CUDA 11 or newer"
    older = (" or keep the driver and install a torch built for CUDA 11.8 (pip install torch --index-url "
             "https://download.pytorch.org/whl/cu118)" if major >= 12 and branch >= 450 else "")
    return _make("driver", f"the NVIDIA driver {branch} is too old for this torch's CUDA {major}",
                 f"driver branch {branch} runs {most}; the torch build needs CUDA {major} (driver {least} or newer), so "
                 "it finds no usable GPU",
                 f"update the NVIDIA driver to {least} or newer (sudo ubuntu-drivers install, or sudo apt install "
                 f"nvidia-driver-<branch>, then reboot; a current branch such as 570 serves every CUDA 12 wheel)"
                 f"{older}; if the card is too old for that driver (Kepler and older stop at 470), a CPU build or "
                 "another GPU", [], failing)


# CUDA's 802 (CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"): on NVSwitch systems (HGX / DGX A100, H100,
# H200, B200) CUDA takes no work until nvidia-fabricmanager has set the fabric up (NVIDIA's Fabric Manager guide).
# NCCL's NVLS transport failing on the same fabric is read with the other transports (rules/machine.py).
_SYSTEM_NOT_READY = re.compile(r"(?i)system not yet initiali[sz]ed|CUDA_ERROR_SYSTEM_NOT_READY|\b(?:Error|error code|"
                               r"err)\W{0,3}802\b")


@rule("driver")
def fabric_manager(ctx: Context) -> Optional[Diagnosis]:
    """CUDA refusing work until the NVSwitch fabric is up: the fabric manager beside the driver, not the GPU."""
    not_ready = _lines_matching(ctx, _SYSTEM_NOT_READY.pattern)
    if not not_ready:
        return None
    driver = re.search(r"(?i)Driver Version:?\s*(\d{3})\.|nvidia-driver\W{0,3}:?\s*(\d{3})\.", _text(ctx))
    branch = (driver.group(1) or driver.group(2)) if driver else "<the driver's branch>"
    return _first(_make(
        "driver", "the NVSwitch fabric is not initialised: nvidia-fabricmanager",
        "on NVSwitch systems (HGX / DGX A100, H100, H200, B200) CUDA refuses work with 'system not yet initialized' "
        "(802) until nvidia-fabricmanager has set the fabric up; it is not installed, not running, or of another "
        "version than the driver",
        f"sudo apt install nvidia-fabricmanager-{branch} (exactly the driver's version; the -server driver branches "
        "match it), sudo systemctl enable --now nvidia-fabricmanager, then check nvidia-smi -q | grep -A2 Fabric "
        "(State: Completed) and run again", [], not_ready))


# Data-centre NVIDIA cards (Tesla, the A/H/L series) start in TCC mode on Windows, a compute-only driver mode that WSL 2's
# GPU paravirtualisation cannot use: it shares only cards in WDDM mode
_TCC_CARD = re.compile(r"(?i)\bTesla\b|\b(?:[AHL]\d{2,3}S?|V100|P100|P40|T4|K80|A10G)\b")


@rule("wsl")
def wsl_tcc_card(ctx: Context) -> Optional[Diagnosis]:
    """A data-centre card that WSL 2 does not see: Windows runs it in TCC mode unless told otherwise, and WSL shares
    only WDDM cards with its Linux (Microsoft's and NVIDIA's CUDA on WSL guides)."""
    if not ctx.sheet.has("platform", "wsl"):
        return None
    cards = [f for f in ctx.sheet.of("gpu") if _TCC_CARD.search(f.value)]
    text = _text(ctx)
    if not cards or (re.search(r"\bWDDM\b", text) and not re.search(r"\bTCC\b", text)):
        return None   # a GeForce / RTX card is WDDM already; a card said to be in WDDM mode is not this
    symptoms = ctx.errors + _symptom_lines(ctx, ctx.sheet.of("complaint"))
    if not symptoms:
        return None
    return _first(_make(
        "wsl", f"the {cards[0].value} is in TCC mode, which WSL 2 cannot use",
        "on Windows data-centre NVIDIA cards run in TCC (compute-only) mode by default; WSL 2 shares a GPU with its "
        "Linux only in WDDM mode, so inside WSL there is no GPU (nvidia-smi fails or lists none)",
        "switch the card to WDDM in Windows, from an administrator prompt: nvidia-smi -i <index> -dm 0 (0 = WDDM; "
        "the data-centre / GRID driver allows it), reboot, then wsl --shutdown and start WSL again; keep only the "
        "Windows driver (no Linux NVIDIA driver inside WSL)", cards[:1], symptoms))


# Ubuntu's mainline kernel builds (kernel.ubuntu.com/mainline) carry a six-digit ABI number ("6.2.0-060200-generic");
# the distribution's own kernels a short one ("6.2.0-39-generic")
_MAINLINE = re.compile(r"\b\d+\.\d+(?:\.\d+)?-0\d{5}(?:rc\d+)?-(?:generic|lowlatency)\b")


@rule("driver")
def mainline_kernel(ctx: Context) -> Optional[Diagnosis]:
    """A DKMS driver package (amdgpu-dkms, nvidia-dkms) refusing or failing to build for a mainline kernel: the driver
    packages build only for the kernels the distribution ships (their headers and config), not for mainline builds."""
    text = _text(ctx)
    kernel = _MAINLINE.search(text)
    if kernel is None:
        return None
    failed = _lines_matching(ctx, r"(?i)\bdkms\b.{0,80}(?:not supported|fail|error)|(?:not supported|fail\w*|error)"
                                  r".{0,80}\bdkms\b|kernel package \S+ is not supported|Bad return status|"
                                  r"(?:module|driver) (?:build|install) failed")
    if not failed:
        return None
    ubuntu = re.search(r"(?i)Ubuntu ?(\d\d\.04)", text)
    hwe = f"linux-generic-hwe-{ubuntu.group(1)}" if ubuntu else "linux-generic-hwe-<release>"
    evidence = [f for f in ctx.sheet.of("kernel") if kernel.group(0) in f.value][:1]
    return _first(_make(
        "driver", f"{kernel.group(0)} is a mainline kernel the driver's DKMS module does not build for",
        f"{kernel.group(0)} is an Ubuntu mainline kernel build (kernel.ubuntu.com/mainline, the six-digit ABI number); "
        "the GPU driver's DKMS package supports only the distribution's own kernels, so it refuses or fails to build",
        f"boot the distribution's kernel instead of the mainline one: sudo apt install {hwe} (or linux-generic), pick it "
        "in GRUB (Advanced options), then remove the mainline linux-image- and linux-headers- packages and install "
        "the driver again", evidence, failed))


# A crash in a program's Vulkan backend (llama.cpp's ggml-vulkan, koboldcpp, LM Studio's Vulkan runtime): the
# pipeline and shader compilation run inside the GPU's Vulkan driver (Mesa's RADV/ANV on Linux, the vendor driver on
# Windows), and a crash there with no error from the program itself is the driver's bug far more often than the model's.
_VULKAN_IN_USE = re.compile(r"(?i)\bggml_vulkan\b|\bvulkan\b.{0,20}\b(?:backend|runtime|build|pipeline|path|runner)\b|"
                            r"\b(?:backend|runtime|build|runner)\b.{0,12}\bvulkan\b|\bRADV\b|-DGGML_VULKAN=ON")
_VULKAN_CRASH = re.compile(r"(?i)\bcrash(?:es|ed|ing)?\b|heap corruption|corrupt(?:s|ed)? the heap|"
                           r"\bseg ?fault|segmentation fault|0xc0000005|access violation|\bsigsegv\b|崩溃|闪退")
_MESA = re.compile(r"(?i)\bMesa\s*v?(\d{2}\.\d+(?:\.\d+)?)")


@rule("driver")
def vulkan_driver_crash(ctx: Context) -> Optional[Diagnosis]:
    """A program crashing in its Vulkan backend, with no error of its own (no out-of-memory, no missing device): the
    Vulkan driver's bug; the remedy is a newer driver (Mesa on Linux, the GPU vendor's driver on Windows)."""
    text = _text(ctx)
    if not _VULKAN_IN_USE.search(text):
        return None
    crashed = _lines_matching(ctx, _VULKAN_CRASH.pattern)
    if not crashed or re.search(r"(?i)out of (?:device |host )?memory|ErrorOutOfDeviceMemory|No Vulkan devices? found|"
                                r"vkCreateInstance failed|ERROR_INCOMPATIBLE_DRIVER|ERROR_INITIALIZATION_FAILED", text):
        return None   # a memory or device-discovery error is its own reading, not a driver bug in the pipeline
    mesa = _MESA.search(text)
    linux = (f"update Mesa past {mesa.group(1)} (the RADV/ANV Vulkan driver: a newer mesa-vulkan-drivers from the "
             "distribution's backports or the kisak-mesa PPA)" if mesa else
             "on Linux update Mesa (the RADV/ANV Vulkan driver: mesa-vulkan-drivers from the distribution's backports "
             "or the kisak-mesa PPA)")
    return _make("driver", "the GPU's Vulkan driver crashes in the program's Vulkan backend",
                 "the crash happens while the Vulkan backend builds its pipelines or runs its shaders, inside the "
                 "GPU's Vulkan driver" + (f" (Mesa {mesa.group(1)})" if mesa else "") + ", with no error from the "
                 "program itself",
                 f"{linux}; on Windows install the GPU vendor's current driver (AMD Software Adrenalin, the NVIDIA or "
                 "Intel driver); meanwhile run the same model through the HIP/CUDA backend, or skip the part that "
                 "crashes (a vision projector: without --mmproj), to confirm it is the driver",
                 [], crashed, confirmed=False)


# torch's XPU build reaches Intel GPUs through the Level Zero loader (libze1 / ze_loader.dll) and Intel's GPU driver
# behind it (libze-intel-gpu1, the compute runtime). A loader newer than the driver hands out entry points the driver
# does not fill, so a call into one jumps to address 0: a segfault "at 0 ip 0000000000000000" in torch.xpu.
_XPU_TORCH = re.compile(r"(?i)\+xpu\b|torch\.xpu\b|\bxpu:\d\b|device=.?xpu")


@rule("driver")
def level_zero_mismatch(ctx: Context) -> Optional[Diagnosis]:
    """An Intel GPU reached by torch's XPU build (it enumerates devices) whose call crashes: the Level Zero loader and
    Intel's GPU driver of mismatched versions; the remedy is to upgrade both together."""
    text = _text(ctx)
    if not _XPU_TORCH.search(text):
        return None
    crashed = ctx.crashes() or _lines_matching(ctx, r"(?i)segfault at 0 ip 0{8,16}\b|\bsegfaults?\b|zeDevice\w*|"
                                                    r"ZE_RESULT_ERROR_\w+|level[- ]zero.{0,40}(?:error|fail)")
    if not crashed or re.search(r"(?i)out of memory|UR_RESULT_ERROR_OUT_OF_\w*MEMORY", text):
        return None
    return _make("driver", "the Level Zero loader and Intel's GPU driver do not match",
                 "torch's XPU build sees the Intel GPU but crashes calling into it: the Level Zero loader (libze1) "
                 "offers entry points the older Intel GPU driver (libze-intel-gpu1) does not provide, so the call "
                 "jumps to a null address",
                 "upgrade Intel's GPU driver and the Level Zero loader together to matching versions (Ubuntu: sudo apt "
                 "install --only-upgrade libze-intel-gpu1 libze1 intel-opencl-icd from Intel's graphics repository, or "
                 "the compute-runtime release packages; Windows: the current Intel Arc driver), then check "
                 "python -c 'import torch; print(torch.xpu.get_device_properties(0))'",
                 [], crashed, confirmed=False)


# NVML (libnvidia-ml.so.1) not loadable inside a container or pod: the NVIDIA Container Toolkit injects the driver's
# libraries only into containers its runtime starts; one started by plain runc (Kubernetes' device plugin under a
# containerd / docker whose default runtime is runc) has none


@rule("device-access")
def nvml_in_a_container(ctx: Context) -> Optional[Diagnosis]:
    """NVML absent inside a container or Kubernetes pod on a host with the NVIDIA toolkit: the container did not run
    under the nvidia runtime. The device plugin's pods carry no --gpus flag, so the runtime must be the default."""
    failed = _lines_matching(ctx, r"(?i)could not load NVML|libnvidia-ml\.so(?:\.1)?: cannot open shared object|"
                                  r"NVML(?: library)? (?:not found|could not be loaded)")
    text = _text(ctx)
    if not failed or not (_KUBERNETES.search(text) or _CONTAINED.search(text)) or \
            re.search(r"(?i)\bwsl\b", text):
        return None   # on the host itself (or WSL's own NVML) it is the driver's install, read elsewhere
    containerd = re.search(r"(?i)\bcontainerd\b|\bk3s\b|\bcri-o\b", text)
    runtime = ("sudo nvidia-ctk runtime configure --runtime=containerd --set-as-default, sudo systemctl restart "
               "containerd" if containerd else
               "set \"default-runtime\": \"nvidia\" in /etc/docker/daemon.json (sudo nvidia-ctk runtime configure "
               "--runtime=docker --set-as-default writes it), sudo systemctl restart docker")
    return _make("device-access", "the container was not started by the NVIDIA runtime",
                 "NVML (libnvidia-ml.so.1) is missing inside the container: the NVIDIA Container Toolkit puts the "
                 "driver's libraries only into containers its runtime starts, and this one ran under the plain runc "
                 "runtime" + (" (a Kubernetes pod, such as the device plugin's, has no --gpus flag to ask for it)"
                              if _KUBERNETES.search(text) else ""),
                 f"make the nvidia runtime the default: {runtime}; then restart the pod or container (kubectl delete "
                 "pod of the device plugin; it comes back under the new runtime); or use a RuntimeClass named nvidia",
                 [], failed, confirmed=False)


# the NVIDIA container runtime refusing an image whose CUDA needs a newer host driver (the image's NVIDIA_REQUIRE_CUDA)
_IMAGE_NEEDS_CUDA = re.compile(r"(?i)requirement error: unsatisfied condition: cuda\s*>=\s*(\d{2})\.(\d)")


@rule("driver")
def image_needs_newer_driver(ctx: Context) -> Optional[Diagnosis]:
    """A container image built on a CUDA the host driver does not run: the NVIDIA container runtime checks the image's
    NVIDIA_REQUIRE_CUDA against the driver before it starts, so the fix is on the host (its driver), or an older image."""
    refused = _lines_matching(ctx, _IMAGE_NEEDS_CUDA.pattern)
    if not refused:
        return None
    found = _IMAGE_NEEDS_CUDA.search(refused[0].line)
    cuda = (int(found.group(1)), int(found.group(2)))
    least = next((b for c, b in _DRIVER_FOR_CUDA if c >= cuda), None)
    branch = f"{least} or newer" if least else "one that supports it"
    return _first(_make("driver", f"the host's NVIDIA driver is too old for the image's CUDA {cuda[0]}.{cuda[1]}",
                        f"the image is built on CUDA {cuda[0]}.{cuda[1]}; the NVIDIA container runtime checks that the "
                        "host driver runs it before it starts the container, and this driver does not",
                        f"update the host's NVIDIA driver to {branch} (sudo apt install nvidia-driver-{least or '<branch>'} "
                        "or sudo ubuntu-drivers install, then reboot; nothing to change inside the container), or use "
                        f"an older image tag built on the CUDA the driver runs (nvidia-smi shows it as 'CUDA Version')",
                        [], refused))


# torch built for ROCm, said by itself (collect_env's "ROCM used to build PyTorch: 7.0...", a +rocm version, or
# torch.version.hip printed): the build is right for an AMD GPU, so finding none is the process's access to it
_ROCM_TORCH = re.compile(r"(?i)ROCM used to build PyTorch:\s*\d|\btorch\S*\s*[=:]?\s*\d+\.\d+\.\d+\S*\+rocm\d|"
                         r"torch\.version\.hip\W{0,20}\d+\.\d+")
_HIP_FINDS_NONE = re.compile(r"No HIP GPUs are available|hipErrorNoDevice|(?i:Is CUDA available:\s*False)")


@rule("device-access")
def rocm_torch_without_a_device(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm build of torch that finds no GPU, with nothing else said (no driver failure, no WSL, no GPU the build
    lacks): the process cannot open /dev/kfd and /dev/dri, most often a container started without them."""
    text = _text(ctx)
    failing = _lines_matching(ctx, _HIP_FINDS_NONE.pattern)
    if not failing or not _ROCM_TORCH.search(text) or re.search(r"(?i)\bwsl\b|/dev/dxg", text) or \
            ctx.of("driver", "gpu-unsupported", "arch-missing") or ctx.sheet.of("gpu") or \
            any(not _HIP_FINDS_NONE.search(e.line) for e in ctx.of("visibility")) or \
            re.search(r"(?i)HSA_OVERRIDE_GFX_VERSION|\b(?:HIP|ROCR|CUDA)_VISIBLE_DEVICES\b", text):
        return None   # a named GPU, an override or a visibility setting: the arch or the variables' readings
    container = _CONTAINED.search(text)
    return _make("device-access", "the ROCm torch cannot open the GPU's device files",
                 "torch is a ROCm build, so a ROCm GPU would be found; finding none means the process cannot open "
                 "/dev/kfd and /dev/dri" + (" (the container was not given them)" if container else
                                            " (a container started without them, or a user outside their groups)"),
                 "in a container pass the device files: docker run --device /dev/kfd --device /dev/dri --group-add "
                 "video --group-add render --security-opt seccomp=unconfined ... (podman: --group-add keep-groups); "
                 "on the host: sudo usermod -aG render,video $USER and log in again; check with ls -l /dev/kfd "
                 "/dev/dri/renderD* and rocminfo as the same user",
                 [], failing, confirmed=False)


# Debian's linux-kbuild ships tools/objtool/objtool as a wrapper that picks the real binary by SRCARCH; an out-of-tree
# build such as amdgpu-dkms's configure step calls it without SRCARCH, so every compile test fails and the configure
# script reports kernel features as missing ("dma_resv->seq is missing") that the kernel has (as found in
# legacy-rocm-build #3379)
_CONFIGURE_CHECK_FAILED = re.compile(r"\*\*\* [\w>.\-]+(?:\([^)]*\))? is missing\.?,? exit")


@rule("driver")
def debian_kbuild_objtool(ctx: Context) -> Optional[Diagnosis]:
    """amdgpu-dkms's configure checks failing on a Debian kernel (its own -amd64 flavour, or Debian named): the
    objtool wrapper of Debian's linux-kbuild, not the kernel's features."""
    failed = _lines_matching(ctx, _CONFIGURE_CHECK_FAILED.pattern)
    text = _text(ctx)
    kernel = re.search(r"\b(\d+\.\d+(?:\.\d+)?)(?:-\d+)?-(?:amd64|cloud-amd64|rt-amd64)\b", text)
    if not failed or not (kernel or re.search(r"(?i)\bDebian\b", text)) or re.search(r"(?i)\bUbuntu\b|\.el\d", text):
        return None
    series = kernel.group(1) if kernel else "<kernel version>"
    folder = f"/usr/lib/linux-kbuild-{series}/tools/objtool"
    return _make("driver", "amdgpu-dkms's configure checks fail on Debian's kernel build tools",
                 "the message is misleading: Debian's linux-kbuild ships objtool as a wrapper that needs SRCARCH, "
                 "which the amdgpu-dkms configure step does not pass, so every feature check fails and the first one "
                 "is reported as missing",
                 f"use the x86 objtool in place of the wrapper: cd {folder} && sudo mv objtool objtool.wrapper && sudo "
                 "cp objtool.real-x86 objtool, then rebuild: sudo dkms autoinstall (or reinstall amdgpu-dkms); or use "
                 "the kernel's own amdgpu (sudo amdgpu-install --usecase=rocm --no-dkms)",
                 [], failed, confirmed=False)


# Windows' STATUS_ENTRYPOINT_NOT_FOUND: a DLL the process loaded lacks a function it imports. A CUDA runner (Ollama's,
# llama.cpp's, koboldcpp's) imports the newer driver API entry points from the driver's nvcuda.dll, so on an NVIDIA
# machine the usual missing entry point is the driver's, older than the CUDA the runner was built with
_ENTRYPOINT_NOT_FOUND = re.compile(r"(?i)\b0xc0000139\b|\b3221225785\b|STATUS_ENTRYPOINT_NOT_FOUND|"
                                   r"entry point .{0,80} could not be located")


@rule("driver")
def windows_entry_point_missing(ctx: Context) -> Optional[Diagnosis]:
    """A CUDA program on Windows dying with 0xc0000139 (an entry point missing from a DLL) on an NVIDIA GPU: the
    driver's nvcuda.dll is older than the CUDA the program was built against."""
    missing = _lines_matching(ctx, _ENTRYPOINT_NOT_FOUND.pattern)
    text = _text(ctx)
    if not missing or not (_nvidia_gpu(ctx) or re.search(r"(?i)\bnvidia\b|\bgeforce\b|\b[GR]TX ?\d{3,4}", text)) or \
            re.search(r"(?i)\b(?:amd|radeon|rocm|hip)\b", text):
        return None
    return _make("driver", "the NVIDIA driver is older than the CUDA the program was built with",
                 "0xc0000139 is Windows' 'entry point not found': a DLL lacks a function the program imports; a CUDA "
                 "program imports its CUDA driver API from the NVIDIA driver's nvcuda.dll, which an older driver "
                 "does not have",
                 "install the current NVIDIA driver for the GPU (nvidia.com/drivers or the NVIDIA app; a clean install), "
                 "reboot, and start the program again; nvidia-smi's 'CUDA Version' must be at least the CUDA the "
                 "program bundles (12.x for current Ollama / llama.cpp builds)",
                 [], missing, confirmed=False)


# a program's newer release falling back to the CPU where an older one used the GPU, on a named NVIDIA driver branch
# older than 550: the newer release bundles a newer CUDA runtime (12.8 / 13 for Blackwell) than that driver runs, so
# its GPU discovery filters the GPUs out (Ollama, LM Studio, llama.cpp builds bundle their CUDA runtime)
_ONTO_CPU = re.compile(r"(?i)(?:fully |entirely )?(?:offload\w* to|onto|on|falls? back to|runs? (?:on|in)) (?:the )?CPU\b|"
                       r"CPU[- ]only|library=cpu|0% GPU|100% CPU|not using (?:the )?GPU")
_REGRESSION = re.compile(r"(?i)\b(?:after|since|from|starting with|through|upgrad\w+ to)\s+v?\d+\.\d+|"
                         r"\bv?\d+\.\d+(?:\.\d+)?\b.{0,40}(?:works?|worked|✅)")


@rule("driver")
def bundled_cuda_beyond_the_driver(ctx: Context) -> Optional[Diagnosis]:
    """A tool's newer release using only the CPU where an older release used the GPU, with an NVIDIA driver branch
    below 550 named: the release's bundled CUDA runtime needs a newer driver than the machine's."""
    text = _text(ctx)
    driver = re.search(r"(?i)\bdriver(?: version)?\W{0,3}(?:NVIDIA\s+)?(\d{3})\.\d+", text)
    fell = _lines_matching(ctx, _ONTO_CPU.pattern)
    if driver is None or int(driver.group(1)) >= 550 or not fell or not _REGRESSION.search(text) or \
            not re.search(r"(?i)\b(?:ollama|lm ?studio|llama\.?cpp|koboldcpp|localai|jan)\b", text):
        return None
    branch = driver.group(1)
    return _make("driver", f"the NVIDIA driver {branch} is too old for the newer release's bundled CUDA",
                 f"the newer release bundles a newer CUDA runtime than driver {branch} runs, so its GPU discovery "
                 "drops the GPUs and the model runs on the CPU; the older release bundled a CUDA this driver ran",
                 f"update the NVIDIA driver from {branch} to 550 or newer (570+ runs CUDA 12.8 runners, 580+ CUDA 13): "
                 "sudo apt install nvidia-driver-570 (or a later branch), reboot; in Docker the host's driver is the "
                 "one to update; or keep the last release that used the GPU",
                 [], fell, confirmed=False)
