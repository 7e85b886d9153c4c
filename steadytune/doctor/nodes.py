"""`steadytune doctor --nodes [HOST:PORT]`: is this machine ready to be one node of a multi-node job?

Run it on every node with the rendezvous address the job will use (node 0's, MASTER_ADDR:MASTER_PORT by default).
It says, without starting a job or touching a GPU:
- whether the rendezvous host resolves and answers on its port (node 0 hosts it once its launcher runs; on node 0
  itself: whether the port is free), and over which interface this node reaches it;
- which interface NCCL/RCCL and gloo will use by their own rules (hardware/network.py), and when that is not the one
  that reaches the other nodes: the loopback (a hostname that resolves to 127.0.x.x puts gloo there), or a docker or
  virtual bridge NCCL picked first; then the NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME line that fixes it;
- the InfiniBand/RoCE devices NCCL would use across nodes, and what the P2P / IB variables that are set change: the
  fall-backs multi-node hang reports end in (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_IB_DISABLE; LLaMA-Factory issues
  7300, 8864, 3611).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Mapping, Optional

from steadytune.doctor.findings import Finding
from steadytune.errors import UserError
from steadytune.hardware.network import (
    DEFAULT_PORT,
    check_host,
    gloo_interface,
    infiniband_devices,
    interface_addresses,
    interface_of,
    is_loopback,
    nccl_interface,
    port_number,
    resolve,
    route_to,
)

CHECK = "nodes"
CONNECT_TIMEOUT_S = 3.0
VIRTUAL_PREFIXES = ("docker", "virbr", "veth", "br-", "cni", "flannel", "tailscale", "wg", "tun", "tap")


def parse_target(target: Optional[str], env: Mapping[str, str]) -> tuple[Optional[str], int]:
    """HOST[:PORT] from --nodes, else MASTER_ADDR / MASTER_PORT; port 29500 (torchrun's) when none is given. A port
    that is not 1-65535, or a host that is not a name or an address, is a UserError naming where it came from."""
    host, port, port_where = None, None, "--nodes"
    if target:
        host, sep, port_text = target.rpartition(":") if target.count(":") == 1 else (target, "", "")
        host = host or target
        if sep:
            port = _port(port_text, "--nodes")
    host_where = "--nodes" if host else "MASTER_ADDR"
    host = host or env.get("MASTER_ADDR") or None
    if port is None and env.get("MASTER_PORT", "").strip():
        port, port_where = _port(env["MASTER_PORT"], "MASTER_PORT"), "MASTER_PORT"
    port = DEFAULT_PORT if port is None else port
    if port == 0:
        raise UserError(f"{port_where} 0: a port is 1-65535")
    return (check_host(host, host_where) if host else None), port


def _port(text: str, where: str) -> int:
    if not text.strip().isdigit():
        raise UserError(f"{where} {text[:40]!r}: the port must be a number, 1-65535")
    return port_number(int(text.strip()[:12]), where)


def check_nodes(env: Mapping[str, str], target: Optional[str] = None, sys_root: Path | str = "/sys",
                addresses: Optional[Mapping[str, str]] = None, connect=None) -> list[Finding]:
    """The findings of `doctor --nodes` (module docstring). `addresses` (name -> IPv4) and `connect(host, port,
    timeout)` stand in for this machine's in tests."""
    addresses = interface_addresses() if addresses is None else dict(addresses)
    connect = connect or _connect
    findings: list[Finding] = []
    shown = ", ".join(f"{name} {address}" for name, address in addresses.items()) or "unknown"
    findings.append(Finding.info(CHECK, f"network interfaces with an IPv4 address: {shown}"))

    host, port = parse_target(target, env)
    route_interface = None
    if host is None:
        findings.append(Finding.warn(CHECK, "no rendezvous address to check",
                                     "every node of a job meets at node 0's address and port",
                                     "steadytune doctor --nodes HOST:PORT (node 0's address), or set MASTER_ADDR and "
                                     "MASTER_PORT as the launch line will"))
    else:
        findings += _rendezvous_findings(host, port, addresses, connect)
        address = resolve(host)
        if address is not None and not is_loopback(address):
            local = route_to(address, port)
            route_interface = interface_of(local, addresses)
            if local and not _is_local(address, addresses):
                findings.append(Finding.info(CHECK, f"this node reaches {host} over {route_interface or '?'} "
                                                    f"({local})"))
    findings += _interface_findings(env, addresses, host, route_interface)
    findings += _transport_findings(env, sys_root)
    return findings


def _is_local(address: str, addresses: Mapping[str, str]) -> bool:
    return is_loopback(address) or address in addresses.values()


def _rendezvous_findings(host: str, port: int, addresses: Mapping[str, str], connect) -> list[Finding]:
    where = f"{host}:{port}"
    address = resolve(host)
    if address is None:
        return [Finding.error(CHECK, f"the rendezvous host {host!r} does not resolve here",
                              "every node connects to node 0 by this name or address",
                              "use node 0's IP address (ip -br addr on node 0), or fix DNS / /etc/hosts")]
    if _is_local(address, addresses):
        findings = []
        if is_loopback(address):
            findings.append(Finding.warn(CHECK, f"the rendezvous address {host} is this machine's loopback",
                                         "other machines cannot reach it: it serves only nodes on this machine "
                                         "(a test of several nodes on one host)",
                                         "give node 0's network address (the one the other nodes reach) as "
                                         "--master-addr / MASTER_ADDR"))
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("" if not is_loopback(address) else address, port))
        except OSError as e:
            findings.append(Finding.warn(CHECK, f"this machine hosts the rendezvous at {where}, but port {port} is "
                                                f"taken ({e.strerror or e})",
                                         "node 0's launcher must listen on it; another job (or a leftover launcher) "
                                         "holds it",
                                         f"choose another --master-port / MASTER_PORT, the same on every node "
                                         f"(or find the holder: ss -ltnp | grep {port})"))
        else:
            findings.append(Finding.info(CHECK, f"this machine is the rendezvous host {where} (node 0): port {port} "
                                                "is free for its launcher"))
        return findings
    outcome, seconds = connect(address, port, CONNECT_TIMEOUT_S)
    if outcome == "open":
        return [Finding.info(CHECK, f"the rendezvous {where} answers ({seconds * 1000:.0f} ms): node 0's launcher "
                                    "is listening")]
    if outcome == "refused":
        return [Finding.warn(CHECK, f"{host} is reachable but nothing listens on port {port} yet",
                             "node 0's launcher hosts the rendezvous once it starts; a firewall that rejects the port "
                             "looks the same",
                             "start node 0 first, then rerun this; if it still refuses, open the port between the "
                             f"nodes (e.g. firewall-cmd --add-port={port}/tcp)")]
    return [Finding.error(CHECK, f"no answer from the rendezvous {where} within {CONNECT_TIMEOUT_S:g} s ({outcome})",
                          "a firewall drops the packets, the address is not node 0's network address, or there is "
                          "no route between the nodes: the job would wait at the rendezvous until its timeout",
                          "check the address (ip -br addr on node 0), open the port, or choose a reachable "
                          "--master-addr")]


def _connect(address: str, port: int, timeout: float) -> tuple[str, float]:
    """'open', 'refused', or what went wrong; and the seconds it took."""
    import time

    started = time.monotonic()
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return "open", time.monotonic() - started
    except ConnectionRefusedError:
        return "refused", time.monotonic() - started
    except socket.timeout:
        return "timed out", time.monotonic() - started
    except OSError as e:
        return e.strerror or type(e).__name__, time.monotonic() - started


def _interface_findings(env: Mapping[str, str], addresses: Mapping[str, str], host: Optional[str],
                        route_interface: Optional[str]) -> list[Finding]:
    findings = []
    several_hosts = host is not None and not is_loopback(resolve(host) or host)
    nccl, gloo = nccl_interface(env, addresses), gloo_interface(env, addresses)
    target = route_interface
    fix_both = (f"export NCCL_SOCKET_IFNAME={target} GLOO_SOCKET_IFNAME={target} on this node" if target else
                "export NCCL_SOCKET_IFNAME=<interface> GLOO_SOCKET_IFNAME=<interface> (the one that connects the "
                "nodes; ip -br addr) on every node")
    findings.append(Finding.info(CHECK, f"NCCL/RCCL would use {nccl.interface or 'no interface'} "
                                        f"({nccl.address or '?'}): {nccl.why}"))
    if env.get("NCCL_SOCKET_IFNAME") and nccl.interface is None:
        findings.append(Finding.error(CHECK, f"NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']} matches no interface "
                                             "with an address here",
                                      "NCCL cannot open its socket: the job hangs at its first collective",
                                      fix_both))
    elif several_hosts and nccl.interface and (is_loopback(nccl.address) or nccl.interface.startswith(
            VIRTUAL_PREFIXES) or (target and nccl.interface != target and not nccl.interface.startswith("ib"))):
        findings.append(Finding.warn(CHECK, f"NCCL would use {nccl.interface}, "
                                            + (f"but this node reaches {host} over {target}" if target else
                                               "a loopback or virtual interface"),
                                     "its bootstrap and TCP traffic would go where the other nodes are not (the "
                                     "hangs of LLaMA-Factory issues 7300 / 8864 / 3611 that end in an IFNAME line)",
                                     fix_both))
    findings.append(Finding.info(CHECK, f"gloo would use {gloo.interface or 'no interface'} ({gloo.address or '?'}): "
                                        f"{gloo.why}"))
    if several_hosts and (gloo.interface is None or is_loopback(gloo.address)):
        findings.append(Finding.error(CHECK, f"gloo would bind to {gloo.address or 'no address'}"
                                             + (" (the loopback)" if is_loopback(gloo.address) else ""),
                                      "the other nodes cannot reach this one: a gloo (CPU) group, and the object "
                                      "collectives steadytune runs at start, fail with 'Gloo connectFullMesh failed'",
                                      fix_both))
    elif several_hosts and target and gloo.interface != target:
        findings.append(Finding.warn(CHECK, f"gloo would use {gloo.interface}, but this node reaches {host} over "
                                            f"{target}", "its connections may go where the other nodes are not",
                                     f"export GLOO_SOCKET_IFNAME={target}"))
    virtual = [n for n in addresses if n.startswith(VIRTUAL_PREFIXES)]
    if virtual and not env.get("NCCL_SOCKET_IFNAME"):
        findings.append(Finding.info(CHECK, f"virtual interfaces present ({', '.join(virtual)})",
                                     "NCCL skips only docker* by default; bridges and VPNs can still be picked",
                                     fix_both))
    return findings


def _transport_findings(env: Mapping[str, str], sys_root: Path | str) -> list[Finding]:
    findings = []
    hcas = infiniband_devices(sys_root)
    ib_off = env.get("NCCL_IB_DISABLE") == "1"
    if hcas and ib_off:
        findings.append(Finding.warn(CHECK, f"InfiniBand/RoCE devices present ({', '.join(hcas)}) but "
                                            "NCCL_IB_DISABLE=1",
                                     "NCCL sends across nodes over TCP sockets instead: several times slower",
                                     "unset NCCL_IB_DISABLE unless IB itself is what hangs (then NCCL_DEBUG=INFO "
                                     "shows why)"))
    elif hcas:
        findings.append(Finding.info(CHECK, f"InfiniBand/RoCE devices: {', '.join(hcas)}: NCCL uses them across "
                                            "nodes (NET/IB)",
                                     "" if env.get("NCCL_IB_HCA") else "NCCL_IB_HCA unset: NCCL uses every device",
                                     "NCCL_IB_HCA=mlx5_0,... picks some; NCCL_IB_DISABLE=1 falls back to TCP"))
    else:
        findings.append(Finding.info(CHECK, "no InfiniBand/RoCE device: NCCL goes across nodes over TCP sockets "
                                            "(NET/Socket)", "expect far less bandwidth than within a node",
                                     "" if ib_off else "export NCCL_IB_DISABLE=1 to skip NCCL's IB probe"))
    p2p = {"NCCL_P2P_DISABLE": "GPUs of one node exchange data through host memory instead of PCIe/NVLink peer "
                               "access: stable where P2P is broken (IOMMU/ACS), slower",
           "NCCL_P2P_LEVEL": "peer access only up to this topology distance (NVL, PIX, PXB, PHB, SYS); the usual "
                             "fall-back when P2P across a PCIe switch or CPU socket hangs",
           "NCCL_NET_GDR_LEVEL": "GPUDirect RDMA only up to this distance between the NIC and the GPU",
           "NCCL_SOCKET_NTHREADS": "threads per socket connection (TCP transport)",
           "NCCL_NSOCKS_PERTHREAD": "sockets per thread (TCP transport)"}
    for key, meaning in p2p.items():
        if env.get(key):
            findings.append(Finding.info(CHECK, f"{key}={env[key]}", meaning))
    if not env.get("NCCL_DEBUG"):
        findings.append(Finding.info(CHECK, "NCCL_DEBUG is unset",
                                     "NCCL_DEBUG=INFO prints the interface and transport each rank picked (NET/IB or "
                                     "NET/Socket, 'via P2P/IPC' or 'via SHM') on the first collective",
                                     "NCCL_DEBUG=INFO for the first run on a new cluster"))
    return findings
