"""Multi-GPU readiness: the static check (NCCL/RCCL variables, socket interface, iommu=pt, peer access) and,
on request (`--allreduce`), a real all-reduce across the visible GPUs in child processes with a time limit.
When that all-reduce hangs or fails with peer-to-peer, it is tried once more with NCCL_P2P_DISABLE=1 (RCCL
honours the NCCL_ names), so the user learns whether the stable-but-slower path through host memory works: the
outcome of seed 000, whose container blocked RCCL's P2P path."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

from steadytune.doctor.container import detect_container
from steadytune.doctor.findings import Finding
from steadytune.doctor.probe import Probe, peer_access
from steadytune.hardware.gpu_facts import RDNA_P2P_SETTINGS, RDNA_P2P_SOURCE, is_rdna, rccl_issues_for
from steadytune.hardware.rccl import rocm_tuple


def rccl_findings(archs: list[str], rccl_version: Optional[tuple[int, ...]], rocm_version: Optional[tuple[int, int]],
                  env: Mapping[str, str], peer_ok: Optional[bool] = None, check: str = "multi-gpu") -> list[Finding]:
    """Several GPUs: the known RCCL problems of these archs with this RCCL / ROCm (gpu_facts.RCCL_ISSUES) and, on 2+
    consumer RDNA cards, peer-to-peer off unless P2P is known to work. Each with the settings that avoid it."""
    if len(archs) < 2:
        return []
    findings = []
    version = (f"RCCL {'.'.join(map(str, rccl_version))}" if rccl_version else
               f"ROCm {rocm_version[0]}.{rocm_version[1]}" if rocm_version else "RCCL version unknown")
    names = ", ".join(sorted(set(archs)))
    for issue in rccl_issues_for(archs, rccl_version, rocm_version):
        missing = {k: v for k, v in issue.settings.items() if env.get(k) != v}
        setting = " ".join(f"{k}={v}" for k, v in issue.settings.items())
        if not missing:
            findings.append(Finding.info(check, f"{setting} is set: it avoids a known RCCL problem on {names}",
                                         f"{issue.symptom} ({issue.source})"))
            continue
        maybe = "" if (rccl_version or rocm_version) else " (may apply: the RCCL version is not known)"
        findings.append(Finding.warn(check, f"{len(archs)} x {names} with {version}: {issue.symptom.split(':')[0]}{maybe}",
                                     f"{issue.symptom} ({issue.source}); fixed in: {issue.fixed_in}",
                                     f"export {' '.join(f'{k}={v}' for k, v in missing.items())}   before "
                                     f"`steadytune train CONFIG --nproc {len(archs)}` (`steadytune doctor --allreduce` "
                                     "tries the all-reduce with and without it)"))
    rdna = [a for a in archs if is_rdna(a)]
    if len(rdna) >= 2 and env.get("NCCL_P2P_DISABLE") != "1" and peer_ok is not True:
        findings.append(Finding.info(check, f"{len(rdna)} consumer RDNA GPUs ({names}): multi-GPU runs that hang where one "
                                            "GPU works are usually missing PCIe peer-to-peer between the cards",
                                     f"cards on different root complexes have no P2P path and RCCL's P2P transport then "
                                     f"hangs or fails ({RDNA_P2P_SOURCE})",
                                     "steadytune doctor --allreduce (it retries without P2P); if only that works: "
                                     + " ".join(f"export {k}={v}" for k, v in RDNA_P2P_SETTINGS.items())))
    return findings


def rccl_retry_settings(archs: list[str], rccl_version: Optional[tuple[int, ...]],
                        rocm_version: Optional[tuple[int, int]]) -> dict[str, str]:
    """The known-hang settings `--allreduce` tries when the plain all-reduce fails (P2P off is tried anyway)."""
    settings: dict[str, str] = {}
    for issue in rccl_issues_for(archs, rccl_version, rocm_version):
        if issue.hang:
            settings.update(issue.settings)
    return settings


def check_multi_gpu(probe: Probe) -> list[Finding]:
    """Rows 22-23: NCCL/RCCL variables, peer access, the iommu kernel flag, the socket interface."""
    import torch

    env, findings = probe.env, []
    nccl = {k: v for k, v in env.items() if k.startswith(("NCCL_", "RCCL_")) or k == "HSA_FORCE_FINE_GRAIN_PCIE"}
    if nccl:
        findings.append(Finding.info("multi-gpu", "set: " + ", ".join(f"{k}={v}" for k, v in sorted(nccl.items()))))
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname:
        interfaces = sorted(p.name for p in (probe.sys_root / "class" / "net").glob("*"))
        if interfaces and not _ifname_matches(ifname, interfaces):
            findings.append(Finding.error("multi-gpu", f"NCCL_SOCKET_IFNAME={ifname!r} matches no network interface ({', '.join(interfaces)})",
                                          "NCCL/RCCL cannot open its socket: init hangs until 'Watchdog caught collective operation timeout'",
                                          "set NCCL_SOCKET_IFNAME to the interface that connects the nodes (see `ip -br addr`)"))
    gpus = [g for g in probe.info.gpus if not g.integrated]
    if len(gpus) < 2:
        return findings
    findings.append(Finding.info("multi-gpu", f"{len(gpus)} GPUs visible: `steadytune train CONFIG --nproc {len(gpus)}` "
                                              "trains on all of them",
                                 "DDP by default; `deepspeed: FILE.json` or `fsdp: full_shard` shard a model that does "
                                 "not fit on one GPU; a stalled step stops within hang_timeout with every rank's stack",
                                 "steadytune doctor --allreduce runs one all-reduce across them first"))
    in_container = detect_container(probe.root, probe.proc_root, probe.env)[0] is not None   # container.py reports P2P there
    peer_ok = None
    if probe.flavour == "rocm":
        try:
            cmdline = (probe.proc_root / "cmdline").read_text()
        except OSError:
            cmdline = None
        if cmdline is not None and "iommu=pt" not in cmdline:
            findings.append(Finding.warn("multi-gpu", "the kernel command line lacks iommu=pt",
                                         "RCCL warns 'Missing \"iommu=pt\" from kernel command line'; with IOMMU/ACS in the way "
                                         "PCIe peer-to-peer hangs at the first all-reduce",
                                         "add iommu=pt (and amd_iommu=on) to the kernel command line; meanwhile NCCL_P2P_DISABLE=1"))
    if probe.run_kernels and not in_container:
        blocked = [(a.index, b.index) for a in gpus for b in gpus
                   if a.index < b.index and not peer_access(torch, a.index, b.index)]
        if blocked:
            findings.append(Finding.warn("multi-gpu", f"no peer-to-peer access between GPUs {blocked}",
                                         "collectives go through host memory (slower), and broken P2P is the usual cause of hangs",
                                         "check ACS/IOMMU settings; NCCL_P2P_DISABLE=1 avoids P2P altogether"))
        else:
            peer_ok = True
            findings.append(Finding.info("multi-gpu", f"peer-to-peer access between all {len(gpus)} GPUs"))
    if probe.flavour == "rocm":
        findings += rccl_findings([g.arch for g in gpus], probe.rccl_version, rocm_tuple(probe.hip_version), env, peer_ok)
    if "NCCL_IB_DISABLE" not in env and not (probe.sys_root / "class" / "infiniband").exists():
        findings.append(Finding.info("multi-gpu", "no InfiniBand/RoCE device found",
                                     "single-node runs need nothing; multi-node runs without IB should say so",
                                     "for multi-node: export NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=<interface>"))
    return findings


def _ifname_matches(spec: str, interfaces: list[str]) -> bool:
    """NCCL_SOCKET_IFNAME syntax: comma list of prefixes; '=' for exact names; '^' to exclude."""
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    names = [n for n in spec.lstrip("=").split(",") if n]
    hit = [i for i in interfaces if any(i == n if exact else i.startswith(n) for n in names)]
    return bool(set(interfaces) - set(hit)) if exclude else bool(hit)


# Run as a separate script, not in this process: a collective hang must be killable by the time limit.
_ALLREDUCE_SCRIPT = r'''
import os, sys, datetime
import torch, torch.distributed as dist, torch.multiprocessing as mp

def work(rank, world, port, backend):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    x = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(x)
    if backend == "nccl":
        torch.cuda.synchronize()
    expected = world * (world + 1) / 2
    if not torch.all(x == expected):
        raise SystemExit(f"rank {rank}: all-reduce gave {x[0].item()}, expected {expected}")
    dist.destroy_process_group()

if __name__ == "__main__":
    world, port, backend = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    mp.spawn(work, args=(world, port, backend), nprocs=world)
    print("ALLREDUCE_OK")
'''


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run_allreduce_check(world: int, backend: str = "nccl", timeout: float = 120.0,
                        env: Optional[Mapping[str, str]] = None) -> Finding:
    """Spawn `world` processes and all-reduce 4 MiB once. A hang here is the hang a training run would hit."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "allreduce_check.py"
        script.write_text(_ALLREDUCE_SCRIPT)
        start = time.monotonic()
        try:
            done = subprocess.run([sys.executable, str(script), str(world), _free_port(), backend], capture_output=True,
                                  text=True, timeout=timeout, env=dict(env or os.environ))
        except subprocess.TimeoutExpired:
            return Finding.error("all-reduce", f"all-reduce across {world} GPUs did not finish in {timeout:.0f} s",
                                 "a collective hang: usually PCIe P2P blocked by IOMMU/ACS, or the wrong network interface",
                                 "rerun with NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1; add iommu=pt to the kernel command line")
        seconds = time.monotonic() - start
    if done.returncode != 0 or "ALLREDUCE_OK" not in done.stdout:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Finding.error("all-reduce", f"all-reduce across {world} {'GPUs' if backend == 'nccl' else 'processes'} failed",
                             " | ".join(tail), "rerun with NCCL_DEBUG=INFO and read the first WARN line")
    return Finding.info("all-reduce", f"all-reduce across {world} {'GPUs' if backend == 'nccl' else 'processes'} ({backend}) works "
                                      f"({seconds:.1f} s including start-up)")


P2P_OFF = "NCCL_P2P_DISABLE"


def check_allreduce(world: int, env: Optional[Mapping[str, str]] = None, backend: str = "nccl", timeout: float = 120.0,
                    attempt: Callable[..., Finding] = run_allreduce_check,
                    settings: Optional[Mapping[str, str]] = None) -> list[Finding]:
    """The all-reduce as train would run it; if it hangs or fails, once more with the known-hang `settings` of these
    GPUs (RDNA4 + RCCL 2.27: NCCL_PROTO=Simple), then with NCCL_P2P_DISABLE=1 too, and say which works. `attempt`
    runs one all-reduce (tests give it a gloo run)."""
    env = dict(os.environ if env is None else env)
    first = attempt(world, backend=backend, timeout=timeout, env=env)
    if first.severity != "error":
        return [first]
    extra = {k: v for k, v in (settings or {}).items() if env.get(k) != v and k != P2P_OFF}
    tries = [extra] if extra else []
    if env.get(P2P_OFF) != "1":
        tries.append({**extra, P2P_OFF: "1"})
    if not tries:
        return [first]
    last = first
    for extra_env in tries:
        last = attempt(world, backend=backend, timeout=timeout, env={**env, **extra_env})
        if last.severity != "error":
            return [first, _works_with(extra_env, last)]
    tried = " and then with ".join(" ".join(f"{k}={v}" for k, v in t.items()) for t in tries)
    return [first, Finding.error("all-reduce", f"the all-reduce fails with {tried} as well",
                                 f"so {'peer-to-peer is' if len(tries) == 1 else 'these settings are'} not the (only) "
                                 f"cause: {last.what}; {last.why}",
                                 "rerun with NCCL_DEBUG=INFO and read the first WARN line; multi-node: check "
                                 "NCCL_SOCKET_IFNAME / NCCL_IB_DISABLE")]


def _works_with(extra_env: Mapping[str, str], result: Finding) -> Finding:
    setting = " ".join(f"{k}={v}" for k, v in extra_env.items())
    timing = result.what.split("works")[-1].strip()
    if set(extra_env) == {P2P_OFF}:
        return Finding.warn("all-reduce", f"the all-reduce works with {P2P_OFF}=1 ({timing}), not with peer-to-peer",
                            "the P2P path between the GPUs is broken (IOMMU/ACS on the host, ReBAR off, consumer cards "
                            "on different root complexes, or a container without --ipc=host / SYS_PTRACE); without it "
                            "collectives go through host memory: stable, slower",
                            f"to train now: export {P2P_OFF}=1 (stable, slower); to get P2P back: iommu=pt on the kernel "
                            "command line, Above 4G Decoding + Re-Size BAR in the BIOS, and in a container "
                            "docker run --ipc=host --cap-add=SYS_PTRACE")
    return Finding.warn("all-reduce", f"the all-reduce works with {setting} ({timing}), not without",
                        "a known RCCL problem of these GPUs (the multi-gpu finding names it and its source)",
                        f"to train now: export {setting}; the fix is a newer RCCL (see the multi-gpu finding)")
