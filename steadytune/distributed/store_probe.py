"""Before a node joins the rendezvous: is it torch's rendezvous store that answers at --master-addr:--master-port?

Another service on that address and port (ssh, a web server, a database) made torch's store client retry for the whole
rendezvous timeout (900 s by default), printing a C++ stack at every try, then end in a DistNetworkError traceback of
174 lines; one that accepts and stays silent (a web server waiting for a request line) made it wait without end. Node
0 of a static rendezvous hosts the store itself, so there anything already listening on the port is in the way.

The question is put to torch's own store client, in a child process with a timeout: the store's wire format is
torch's business, a child that hangs can be stopped, and its C++ log lines stay off the console. Nothing listening
yet is not a problem here: node 0 may start later, and the rendezvous timeout covers that wait.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Optional

CONNECT_TIMEOUT_S = 3.0    # a TCP connection to the address
GREETING_WAIT_S = 0.5      # a store speaks only when spoken to; a service that greets first is not one
STORE_TIMEOUT_S = 5        # torch's client: connect, validate and ping

CHILD_TIMEOUT_S = 120      # the child as a whole (importing torch included), a bound that only a stuck machine meets
NO_ANSWER = 3              # the child's exit code when the store client neither succeeded nor failed in time

# The child imports torch, then asks in a thread it waits for: a client talking to a silent service can hang past
# its own timeout (seen: a web server waiting for a request line), and the import's time must not count.
_ASK_THE_STORE = f"""
import datetime, os, sys, threading
from torch.distributed import TCPStore
said = []
def ask():
    try:
        TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=float(sys.argv[3])))
        said.append("")
    except Exception as e:
        said.append(type(e).__name__ + ": " + (str(e).splitlines() or [""])[0])
asking = threading.Thread(target=ask, daemon=True)
asking.start()
asking.join(float(sys.argv[3]) + 2)
if said and said[0]:
    print(said[0], file=sys.stderr)
sys.stderr.flush()
os._exit(0 if said and not said[0] else 2 if said else {NO_ANSWER})
"""


def listening(host: str, port: int) -> tuple[bool, bytes]:
    """(something accepted a connection, what it said first without being asked)."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
            sock.settimeout(GREETING_WAIT_S)
            try:
                return True, sock.recv(64)
            except OSError:   # nothing said (a timeout), or the connection closed
                return True, b""
    except OSError:   # refused, unreachable, timed out: nothing there yet (or a firewall: the rendezvous says so later)
        return False, b""


def answers_as_store(host: str, port: int) -> Optional[str]:
    """None when torch's store client validates against host:port; else how it failed, in a few words."""
    try:
        done = subprocess.run([sys.executable, "-c", _ASK_THE_STORE, host, str(port), str(STORE_TIMEOUT_S)],
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None   # the machine, not the service: the rendezvous's own timeout will tell
    if done.returncode == 0:
        return None
    if done.returncode == NO_ANSWER:
        return "it accepts connections but never answers torch's store protocol"
    said = [line.strip() for line in done.stderr.splitlines() if line.strip() and "Error" in line]
    return f"torch's store client: {said[-1][:200]}" if said else f"torch's store client exited {done.returncode}"


def rendezvous_obstacle(host: str, port: int, hosts_store: bool) -> Optional[str]:
    """What stands at host:port in the way of the rendezvous, in one phrase, or None. `hosts_store`: this node's
    launcher will create the store there itself (node 0 of a static rendezvous)."""
    up, greeting = listening(host, port)
    if not up:
        return None
    if hosts_store:
        return (f"another process on this machine already listens on port {port} (node 0 hosts the rendezvous store "
                f"there): stop it (ss -ltnp | grep :{port} names it) or choose another --master-port")
    if greeting:
        return (f"the service answering at {host}:{port} is not torch's rendezvous store (it greets first: "
                f"{greeting[:40]!r}); --master-addr/--master-port must be node 0's launcher")
    failure = answers_as_store(host, port)
    if failure is None:
        return None
    return (f"the service answering at {host}:{port} is not torch's rendezvous store ({failure}); "
            "--master-addr/--master-port must be node 0's launcher")
