"""NCCL under Ray Train across several workers (multi-gpu-transport): Ray starts the training workers itself, on every
node, from its own raylet, so variables exported in the user's shell (NCCL_SOCKET_IFNAME, NCCL_DEBUG,
NCCL_P2P_DISABLE) never reach them -- which is also why NCCL_DEBUG set there prints nothing -- and Ray Train's torch
backend sets NCCL_SOCKET_IFNAME itself when the worker has none, to a default interface list that a node whose network
interface is named otherwise (wl*, ib*, enp... under another prefix) does not match. The fix is NCCL_SOCKET_IFNAME set to
the interface the nodes reach each other on, passed through Ray's runtime_env so every worker gets it.

Sources: Ray's python/ray/train/constants.py (DEFAULT_NCCL_SOCKET_IFNAME = "en,eth,bond" in the 2.x releases of 2022,
"^lo,docker,veth" in later ones) and train/torch/config.py (set on each worker when NCCL_SOCKET_IFNAME is unset); Ray's
runtime environments docs (ray.init(runtime_env={"env_vars": {...}}) sets variables in every worker);
ray-project/ray#30333 (the reporter's wireless interface, fixed by NCCL_SOCKET_IFNAME through runtime_env)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_RAY_TRAIN = re.compile(r"(?i)\bTorchTrainer\b|\bray\.train\b|\bray\s+train\b|\bScalingConfig\b|\bray_results\b|"
                        r"\bRay (?:Train|cluster)\b|\bray (?:up|start)\b|\bTrainingFailedError\b")
_NCCL_FAIL = re.compile(r"(?i)\bNCCL (?:error|timeout|WARN)|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
                        r"ProcessGroupNCCL|\bNCCL\b.{0,40}\b(?:fail\w*|error\w*|hang\w*|stuck)")
# the user's own view that it works with one worker / one node only
_ONE_WORKS = re.compile(r"(?i)\b(?:only )?works? (?:only )?(?:if|when|with) (?:I set )?`?--?num_workers\s*=?\s*1|"
                        r"num_workers\s*=\s*1`?\W{0,3}(?:works|is fine)|works (?:fine )?(?:on|with) (?:a )?(?:single|one) "
                        r"(?:node|worker)")


@rule("multi-gpu-transport")
def ray_workers_nccl_interface(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Ray Train named, and NCCL failing (or working with one worker only)."""
    text = _text(ctx)
    if not _RAY_TRAIN.search(text):
        return None
    said = _lines_matching(ctx, _NCCL_FAIL) + _lines_matching(ctx, _ONE_WORKS)
    if not said or not re.search(r"(?i)\bNCCL\b", text):
        return None
    tried = sorted(set(re.findall(r"\b(NCCL_[A-Z_]+)=", text)) - {"NCCL_SOCKET_IFNAME"})
    shell = (f" (the {', '.join(tried)} you exported never reached them, and NCCL_DEBUG printed nothing for the same "
             "reason)" if tried else "")
    return _first(_make(
        "multi-gpu-transport", "Ray Train's workers use an NCCL socket interface the nodes do not share",
        "Ray starts the training workers on every node from its own processes, so variables exported in your shell "
        f"do not reach them{shell}; with none set, Ray Train sets NCCL_SOCKET_IFNAME itself to a default list of "
        "interface prefixes (en,eth,bond in 2022's 2.x releases, ^lo,docker,veth later) that need not match the "
        "interface the nodes reach each other on, so NCCL cannot connect once there is more than one worker",
        "find the interface the nodes talk over (ip -br addr on each node: the one holding the node's cluster IP, "
        "e.g. eth0, ens5, wlp2s0) and pass it to every worker through Ray: ray.init(runtime_env={\"env_vars\": "
        "{\"NCCL_SOCKET_IFNAME\": \"<that interface>\", \"NCCL_DEBUG\": \"INFO\"}}) (or the same runtime_env on ray job "
        "submit); NCCL_DEBUG=INFO then shows in the workers' logs which interface NCCL took",
        [], said[:2], confirmed=True))
