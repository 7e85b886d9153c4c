"""Kubernetes and its GPU pieces: the device plugin that advertises nvidia.com/gpu, and the GPU operator's driver
container.

  - a node that never advertises nvidia.com/gpu (pods Pending, "Insufficient nvidia.com/gpu"): NVIDIA's device
    plugin runs as an ordinary pod and reaches the driver (NVML) only when the node's container runtime starts it
    through the NVIDIA runtime, which is so when nvidia is the engine's default runtime (k8s-device-plugin README,
    "Preparing your GPU Nodes": docker's "default-runtime": "nvidia", containerd's default_runtime_name), or when its
    pod names a RuntimeClass for it. Where the engine's default is runc the plugin finds no GPU and advertises none.
  - the GPU operator's driver daemonset in CrashLoopBackOff: its driver container builds and loads its own kernel
    module, which fails where the host already has an NVIDIA driver loaded (the operator is then to use the host's:
    driver.enabled=false) or where that driver release does not build on the host's kernel (535 releases before
    535.183.08 fail modpost on newer kernels with the GPL-only symbol rcu_read_unlock_strict:
    NVIDIA/gpu-operator#751).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, rule


_KUBERNETES = re.compile(r"(?i)\bkubernetes\b|\bk8s\b|\bk3s\b|\bmicrok8s\b|\bkubectl\b|\bkubelet\b|\bkubeadm\b|"
                         r"\brke2\b|\bminikube\b|\bkind\b cluster|\bopenshift\b|\bgpu-operator\b|\bpods?\b")
# the resource missing, in the scheduler's and the users' words
_NOT_ADVERTISED = re.compile(r"(?i)Insufficient nvidia\.com/gpu|\b(?:lack|absence) of nvidia\.com/gpu|"
                             r"\b(?:no|missing|without)\s+(?:allocatable\s+)?nvidia\.com/gpu|nvidia\.com/gpu\W{0,3}"
                             r"(?:is\s+)?(?:missing|not (?:found|listed|advertised|available|shown|present))|"
                             r"(?<![\w.=/-])nvidia\.com/gpu:\s+0\s*$|"
                             r"(?:does ?n.t|do not|never|not) (?:advertise|show|list|expose|report)s?\b.{0,30}"
                             r"nvidia\.com/gpu|nvidia\.com/gpu.{0,40}\b(?:not|never) (?:get |be )?(?:scheduled|"
                             r"advertised)|(?:not|never|don.t|doesn.t) (?:get |be )?scheduled.{0,40}nvidia\.com/gpu")

# each engine's way to make nvidia the default runtime (NVIDIA Container Toolkit docs, "Configuring containerd / CRI-O /
# Docker"; k3s and microk8s template their containerd config)
_ENGINES = (
    ("microk8s", r"(?i)\bmicrok8s\b",
     "microk8s: microk8s enable gpu (its GPU operator sets the runtime up), or set nvidia as the default runtime in "
     "/var/snap/microk8s/current/args/containerd-template.toml and sudo snap restart microk8s"),
    ("k3s", r"(?i)\bk3s\b|\brke2\b",
     "k3s: k3s finds the NVIDIA runtime at start and registers a RuntimeClass for it: add runtimeClassName: nvidia "
     "to the device plugin's pod (its Helm chart: --set runtimeClassName=nvidia), or start k3s with "
     "--default-runtime nvidia (as a line default-runtime: nvidia in /etc/rancher/k3s/config.yaml, then sudo "
     "systemctl restart k3s; k3s-agent on agent nodes)"),
    ("containerd", r"(?i)\bcontainerd\b",
     "containerd: sudo nvidia-ctk runtime configure --runtime=containerd --set-as-default (default_runtime_name = "
     "\"nvidia\" in /etc/containerd/config.toml), sudo systemctl restart containerd"),
    ("CRI-O", r"(?i)\bcri-?o\b",
     "CRI-O: sudo nvidia-ctk runtime configure --runtime=crio --set-as-default, sudo systemctl restart crio"),
    ("docker", r"(?i)\bdocker\b|daemon\.json",
     "docker (dockershim / cri-dockerd nodes): in /etc/docker/daemon.json set \"default-runtime\": \"nvidia\" beside "
     "the nvidia entry of \"runtimes\" (sudo nvidia-ctk runtime configure --runtime=docker --set-as-default), sudo "
     "systemctl restart docker"),
)


def _plugin_without_driver(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _NOT_ADVERTISED)
    if not said:
        return None
    named = [fix for _name, pattern, fix in _ENGINES if re.search(pattern, text)]
    rest = [fix for _name, pattern, fix in _ENGINES if not re.search(pattern, text)]
    steps = "; ".join(named + rest)
    return _make("device-access", "the node does not advertise nvidia.com/gpu",
                 "nvidia.com/gpu is advertised by NVIDIA's device plugin, which reaches the driver only when the "
                 "node's container runtime starts its pod through the NVIDIA runtime; with the engine's default "
                 "runtime still runc, the plugin finds no GPU, the node offers no nvidia.com/gpu and GPU pods stay "
                 "Pending",
                 "install the NVIDIA Container Toolkit on the node and make nvidia the engine's default runtime "
                 f"(default-runtime), then restart the engine and the device plugin's pod: {steps}; kubectl describe "
                 "node <node> | grep nvidia.com/gpu must then show the GPUs under Capacity and Allocatable",
                 [ctx.line_fact(said[0])], said)


_DRIVER_POD_CRASH = re.compile(r"(?i)nvidia-driver-daemonset\S*.{0,120}(?:CrashLoopBackOff|\bError\b|restart\w*)|"
                               r"(?:CrashLoopBackOff|restart\w* many times).{0,120}nvidia-driver-daemonset")
_HOST_BRANCH = re.compile(r"(?i)\bnvidia-(?:driver-)?(\d{3})\b|Driver Version:?\s*(\d{3})\.")


def _operator_driver_crash(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _DRIVER_POD_CRASH)
    if not said:
        return None
    host = _HOST_BRANCH.search(text)
    branch = next(g for g in host.groups() if g) if host else None
    microk8s = re.search(r"(?i)\bmicrok8s\b", text)
    keep_host = ("microk8s enable gpu --gpu-operator-driver host (or microk8s disable gpu, then enable it so)"
                 if microk8s else "helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator --set "
                 "driver.enabled=false")
    on_host = f"the host's nvidia-{branch}" if branch else "a driver already on the host (nvidia-smi on the node answers)"
    return _make("driver", "the GPU operator's driver container cannot load its driver",
                 "the operator's driver daemonset builds the NVIDIA kernel module in its container and loads it on "
                 f"the node; it crashes in a loop when {on_host} holds the GPU (another branch than the operator's, "
                 "e.g. 555 against its 535), or when its driver release does not build against the node's kernel",
                 f"either keep the host's driver and tell the operator so: {keep_host}; or remove the host's driver "
                 "(sudo apt purge 'nvidia-*' 'libnvidia-*'; reboot) so only the operator's loads, or install on the "
                 "host the branch the operator deploys (the driver pod's log names it: nvidia-535 where it builds "
                 "535); if kubectl logs -n gpu-operator <nvidia-driver-daemonset pod> -c nvidia-driver-ctr shows "
                 "modpost's GPL-only symbol 'rcu_read_unlock_strict', the node's kernel is newer than that driver: "
                 "set driver.version to 535.183.08 or newer (--set driver.version=535.183.08)",
                 [ctx.line_fact(said[0])], said)


# round 20 (r20a): the NVIDIA RuntimeClass is there (k3s registers it when it finds the runtime; the user checked it)
# and still the workloads see no GPU: a RuntimeClass is used only by pods that name it, so every pod that does not
# (the GPU platform's worker pods, the device plugin) still starts under runc. The fix is the engine's default runtime,
# or runtimeClassName: nvidia in each pod (k3s-io/k3s#9702: --default-runtime sets containerd's default runtime;
# k3s reads its flags as keys of /etc/rancher/k3s/config.yaml; gpustack/gpustack#3581: default-runtime: nvidia there
# made the GPUStack workers' GPUs show up)
_RUNTIMECLASS = re.compile(r"(?i)runtimeclass\W{0,3}(?:\w+\W{0,3}){0,2}nvidia|nvidia\W{0,3}runtimeclass|"
                           r"runtimeClassName:\s*nvidia")
_NO_GPU_IN_PODS = re.compile(r"(?i)\b(?:missing|no|without|lack\w*|not (?:see|find|detect|show)\w*|don.t see|doesn.t "
                             r"see|can.t see)\b[^\n]{0,30}\bGPUs?\b|\bGPUs?\b[^\n]{0,30}\b(?:missing|not (?:found|"
                             r"detected|shown|visible|available))|nvidia-smi\W{0,3}(?:command )?not found|"
                             r"Found no NVIDIA driver|No CUDA GPUs are available")


def _runtimeclass_not_default(ctx: Context, text: str) -> Optional[Diagnosis]:
    if not _RUNTIMECLASS.search(text) or _NOT_ADVERTISED.search(text):
        return None
    said = [e for e in _lines_matching(ctx, _NO_GPU_IN_PODS)]
    if not said:
        return None
    named = [fix for _name, pattern, fix in _ENGINES if re.search(pattern, text)]
    rest = [fix for _name, pattern, fix in _ENGINES if not re.search(pattern, text)]
    # (ahead of the device-plugin reading: the RuntimeClass being there says the toolkit and runtime are installed)
    return _ahead_of(_make("visibility", "the NVIDIA RuntimeClass exists, but the pods do not run under it",
                 "a RuntimeClass applies only to pods that name it (runtimeClassName: nvidia); the workloads that do "
                 "not (the GPU platform's worker pods, the device plugin) still start under the engine's default "
                 "runtime, runc, which gives them no GPU",
                 "make nvidia the container engine's default runtime on the GPU nodes: "
                 + "; ".join(named or rest) + "; or add runtimeClassName: nvidia to the spec of every pod that "
                 "needs the GPU; then restart those pods (kubectl exec into one: nvidia-smi must list the GPUs)",
                 [ctx.line_fact(said[0])], said[:1]), "device-access")


@rule("visibility")
def kubernetes_runtimeclass(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Kubernetes named, the NVIDIA RuntimeClass said to exist, and the workloads without GPUs."""
    text = _text(ctx)
    if not _KUBERNETES.search(text):
        return None
    return _runtimeclass_not_default(ctx, text)


@rule("device-access")
def kubernetes_gpus(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Kubernetes named, and the resource never advertised or the operator's driver pod crashing."""
    text = _text(ctx)
    if not _KUBERNETES.search(text):
        return None
    return _operator_driver_crash(ctx, text) or _plugin_without_driver(ctx, text)
