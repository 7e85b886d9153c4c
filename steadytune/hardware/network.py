"""Which network path the machines of a multi-node job talk over: this machine's interfaces with their IPv4
addresses, the one that routes to a given host, and the one NCCL/RCCL and gloo will pick by their own rules (their
environment variables, else their defaults). `doctor --nodes` reports it, and a multi-node training names it beside
the all-reduce it measures at start.

NCCL's rule (its NCCL_SOCKET_IFNAME documentation): a comma list of interface-name prefixes, `=` for exact names,
`^` to exclude; unset, InfiniBand-over-IP interfaces (`ib*`) first, then any interface but `lo` and `docker*`, and
`lo` only when nothing else has an address. gloo's rule (torch's ProcessGroupGloo): GLOO_SOCKET_IFNAME (exact names,
comma separated), else the address this machine's hostname resolves to, so a hostname that resolves to 127.0.x.x in
/etc/hosts puts gloo on the loopback, where no other node can reach it.

The interface table is read with the SIOCGIFADDR ioctl (Linux); where that is not available the answers are empty
and callers say "unknown". Nothing here sends a packet: the route is the kernel's answer for a UDP socket connect.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from steadytune.errors import UserError

SIOCGIFADDR = 0x8915
DEFAULT_PORT = 29500


@dataclass
class NetPath:
    """The interface a library will use, and why."""
    interface: Optional[str]
    address: Optional[str]
    why: str


def interface_addresses() -> dict[str, str]:
    """name -> IPv4 address of every interface that has one (lo included), in the kernel's order."""
    try:
        import fcntl   # lazy: POSIX only; elsewhere there is no table to read
    except ImportError:
        return {}
    out: dict[str, str] = {}
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return out
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue   # no IPv4 address on it
            out[name] = socket.inet_ntoa(packed[20:24])
    return out


def resolve(host: str) -> Optional[str]:
    """The IPv4 address `host` resolves to here, or None."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return infos[0][4][0] if infos else None


def is_loopback(address: Optional[str]) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address in ("localhost",)


def route_to(host: str, port: int = DEFAULT_PORT) -> Optional[str]:
    """This machine's IPv4 address on the way to `host` (the kernel's routing answer; no packet is sent)."""
    address = resolve(host)
    if address is None:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, port or DEFAULT_PORT))
            return s.getsockname()[0]
    except OSError:
        return None


def interface_of(address: Optional[str], addresses: Mapping[str, str]) -> Optional[str]:
    if address is None:
        return None
    if is_loopback(address):
        return next((name for name, a in addresses.items() if is_loopback(a)), "lo")
    return next((name for name, a in addresses.items() if a == address), None)


def nccl_ifname_matches(spec: str, name: str) -> bool:
    """Whether NCCL_SOCKET_IFNAME=`spec` lets NCCL use the interface `name`."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    hit = any(name == n if exact else name.startswith(n) for n in spec.split(",") if n)
    return not hit if exclude else hit


def nccl_interface(env: Mapping[str, str], addresses: Mapping[str, str]) -> NetPath:
    """The interface NCCL/RCCL's socket transport (and its bootstrap) will use (module docstring)."""
    spec = env.get("NCCL_SOCKET_IFNAME")
    if spec:
        chosen = next((n for n in addresses if nccl_ifname_matches(spec, n)), None)
        return NetPath(chosen, addresses.get(chosen or ""), f"NCCL_SOCKET_IFNAME={spec}"
                     + ("" if chosen else " matches no interface with an IPv4 address"))
    for prefer in ("ib",):
        chosen = next((n for n in addresses if n.startswith(prefer)), None)
        if chosen:
            return NetPath(chosen, addresses[chosen], "NCCL's default: ib* interfaces first")
    chosen = next((n for n in addresses if not n.startswith(("lo", "docker"))), None)
    if chosen:
        return NetPath(chosen, addresses[chosen], "NCCL's default: the first interface that is not lo or docker*")
    chosen = next(iter(addresses), None)
    return NetPath(chosen, addresses.get(chosen or ""), "NCCL's default: only the loopback has an address")


def gloo_interface(env: Mapping[str, str], addresses: Mapping[str, str], hostname: Optional[str] = None) -> NetPath:
    """The interface gloo will bind to (module docstring)."""
    spec = env.get("GLOO_SOCKET_IFNAME")
    if spec:
        first = spec.split(",")[0]
        return NetPath(first, addresses.get(first), f"GLOO_SOCKET_IFNAME={spec}"
                     + ("" if first in addresses else " names no interface with an IPv4 address"))
    hostname = hostname or socket.gethostname()
    address = resolve(hostname)
    return NetPath(interface_of(address, addresses), address,
                 f"gloo's default: the address the hostname {hostname!r} resolves to")


def infiniband_devices(sys_root: Path | str = "/sys") -> list[str]:
    """InfiniBand / RoCE HCAs the kernel lists (what NCCL's IB transport would use)."""
    folder = Path(sys_root) / "class" / "infiniband"
    try:
        return sorted(p.name for p in folder.iterdir())
    except OSError:
        return []


def transport(backend: str, env: Mapping[str, str], addresses: Optional[Mapping[str, str]] = None,
              sys_root: Path | str = "/sys") -> str:
    """One phrase for the start-up print: how this process's collectives leave the machine."""
    addresses = interface_addresses() if addresses is None else addresses
    if backend == "gloo":
        path = gloo_interface(env, addresses)
        return f"gloo, TCP over {path.interface or '?'} ({path.address or '?'})"
    hcas = infiniband_devices(sys_root)
    path = nccl_interface(env, addresses)
    name = "RCCL" if "rocm" in backend.lower() else "NCCL"
    if hcas and env.get("NCCL_IB_DISABLE", "0") != "1":
        return f"{name}, InfiniBand/RoCE ({', '.join(hcas[:4])}); bootstrap over {path.interface or '?'}"
    return f"{name}, TCP sockets over {path.interface or '?'} ({path.address or '?'})"


def local_names() -> set[str]:
    """Names and addresses that mean this machine (for 'is the rendezvous host this one?')."""
    names = {"localhost", socket.gethostname(), socket.getfqdn()}
    names |= set(interface_addresses().values())
    return {n for n in names if n}


def describe_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that steer NCCL/RCCL and gloo across machines, as set."""
    keys = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_P2P_DISABLE",
            "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_DEBUG")
    return {k: env[k] for k in keys if env.get(k) not in (None, "")}


# RFC 1123 host names (and "_", which /etc/hosts and some clusters allow); IP addresses are read by ipaddress.
HOST_NAME = re.compile(r"\w(?:[\w-]{0,61}\w)?(?:\.\w(?:[\w-]{0,61}\w)?)*\.?", re.ASCII)


def check_host(address: str, where: str) -> str:
    """A host name or an IP address, as the other nodes reach it; anything else (spaces, `;`, `$(...)`, a URL) is a
    UserError naming `where`, before it reaches a socket, torch's rendezvous or a log line."""
    text = str(address).strip()
    try:
        ipaddress.ip_address(text.strip("[]"))
        return text.strip("[]")
    except ValueError:
        pass
    if len(text) > 253 or not HOST_NAME.fullmatch(text):
        raise UserError(f"{where} {text[:80]!r}: not a host name or IP address (letters, digits, '-', '_' and '.')")
    return text


def port_number(port: int, where: str) -> int:
    """`port` when it is a TCP port (0-65535), else a UserError naming `where`."""
    if not 0 <= port <= 65535:
        raise UserError(f"{where} {port}: a port is 1-65535")
    return port
