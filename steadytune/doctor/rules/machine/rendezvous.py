"""How the processes of a distributed run find and wait for each other (multi-gpu-transport), read where no NCCL line
says more:

  the 30-minute wait     rank 0 tokenizes (or maps, or downloads) while the other ranks wait in a barrier; the
                         default collective timeout (30 minutes, the Trainer's ddp_timeout=1800) ends the job
  any timeout outwaited  the watchdog's collective waited its whole timeout (read from its line) while one rank
                         clusters, indexes or tokenizes alone: init_process_group's timeout
  the socket interface   across nodes the sockets go out on the first interface found (a bridge, loopback): the run
                         works on one node and hangs on two, or hangs on several at NCCL's start (NCCL_SOCKET_IFNAME),
                         or gloo advertises a loopback address such as Debian's 127.0.1.1 hostname entry
                         (GLOO_SOCKET_IFNAME); NCCL's bootstrap refused or closed between two hosts of its log or
                         between pods (NCCL_SOCKET_IFNAME with the NIC in use or the pod's eth0, mpirun -x)
  multi-node, said       a thin report that multi-node training fails: the same NCCL and CUDA on every node first
  the libuv store        torch 2.4+ starts the TCPStore on libuv, which the Windows wheels lack
  the port in use        the store's MASTER_PORT (29500 by default) held by another job or a crashed run's ranks

Facts: transformers' TrainingArguments (ddp_timeout, default 1800 seconds, passed to init_process_group);
torch.distributed.init_process_group (timeout); LLaMA-Factory's ddp_timeout key (its examples set 180000000);
NCCL's environment docs (NCCL_SOCKET_IFNAME) and torch.distributed's docs (GLOO_SOCKET_IFNAME, "Choosing the network
interface to use"); Debian's /etc/hosts maps the hostname to 127.0.1.1; PyTorch's "Introduction to Libuv TCPStore
Backend" tutorial (torch 2.4 makes libuv the default; USE_LIBUV=0 or use_libuv=False returns to the old store);
torchrun's --master_port (default 29500), accelerate launch's --main_process_port, the deepspeed launcher's
--master_port.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import _CONTAINED, _ahead_of, Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_THIRTY_MINUTES = re.compile(r"(?i)\b30 ?(?:minutes|mins?)\b|\bhalf an hour\b|30 ?分钟|半小时|Timeout\(ms\)=1800000\b|"
                             r"\btimeout=1800\b|\b1800 ?(?:s|seconds)\b")
_PREPROCESSING = re.compile(r"(?i)\btokeni[sz]\w*|\btokeni[sz]er\b|Running tokenizer|\bdataset\.map\b|\.map\(|"
                            r"\bpreprocess\w*|\bbarrier\(\)|\bbarrier\b|数据(?:处理|预处理)|分词")
_TIMED_OUT = re.compile(r"(?i)\btime[ds]? ?out\b|\btimeout\b|\bfail\w*\b|\bkill\w*\b|超时|报错")


def _collective_timeout_while_preprocessing(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not (_THIRTY_MINUTES.search(text) and _PREPROCESSING.search(text) and _TIMED_OUT.search(text)):
        return None
    if any(e.family not in (None, "multi-gpu-transport") for e in ctx.errors):
        return None
    said = _lines_matching(ctx, _THIRTY_MINUTES.pattern)
    if re.search(r"(?i)llama.?factory|llamafactory|src/train_bash\.py|preprocessing_num_workers", text):
        fix = ("add ddp_timeout: 180000000 to the training YAML (or --ddp_timeout 180000000), so the other ranks "
               "outwait the tokenization; tokenize once ahead with tokenized_path (and more preprocessing_num_workers) "
               "to shorten it")
    elif re.search(r"(?i)\b(?:Trainer|TrainingArguments|SFTConfig|DPOConfig|GRPOConfig|trl|transformers)\b", text):
        fix = ("raise the timeout the Trainer passes to torch.distributed: TrainingArguments(ddp_timeout=10800) "
               "(seconds; TRL's SFTConfig / DPOConfig take the same ddp_timeout, or --ddp_timeout 10800); or "
               "tokenize the dataset once ahead and load it pre-tokenized")
    else:
        fix = ("raise the collective timeout: torch.distributed.init_process_group(..., "
               "timeout=datetime.timedelta(hours=3)) (a transformers Trainer: ddp_timeout=10800 seconds); or "
               "preprocess the data once ahead so the ranks do not wait on it")
    # the collective's own timeout line at the default 30 minutes, beside the preprocessing: the facts settle it
    watchdog = [e for e in ctx.errors if _THIRTY_MINUTES.search(e.line)]
    diagnosis = _make("multi-gpu-transport", "the other ranks time out waiting for rank 0's preprocessing",
                      "only the main process tokenizes (or maps) the dataset while the other ranks wait for it in a "
                      "torch.distributed barrier; a wait longer than the default collective timeout (30 minutes, the "
                      "Trainer's ddp_timeout=1800 s) kills the job", fix,
                      [ctx.line_fact(watchdog[0])] if watchdog else [], watchdog or said[:1], confirmed=bool(watchdog))
    return _first(diagnosis) if watchdog else diagnosis


# work that only one rank does while the others wait for it: a clustering or an index built on rank 0 (ColBERT's
# k-means, faiss), a tokenization, an evaluation, a checkpoint written
_ONE_RANK_WORK = re.compile(r"(?i)\bClustering \d+ points\b|\bk-?means\b|\bfaiss\b|\bbuilding (?:the )?index\b|"
                            r"\bindexing\b|\bto index\b|\btokeni[sz]ing\b|Running tokenizer|\bevaluat(?:ing|ion)\b|"
                            r"\bsaving (?:the )?(?:model|checkpoint)\b|聚类|建索引|数据预处理")
# torch's watchdog on the collective that waited the whole timeout: "Timeout(ms)=600000) ran for 600659 milliseconds"
_WATCHDOG_WAITED = re.compile(r"Timeout\(ms\)=(\d{4,9})\)? ran for (\d{4,9}) milliseconds")


def _watchdog_outwaited(ctx: Context) -> Optional[Diagnosis]:
    """The watchdog ended a collective that waited its full timeout (any value, read from its line) while the paste
    shows one rank doing long work of its own (a clustering, an index, a tokenization): the ranks are not broken, the
    others waited longer than the process group's timeout allows; raising it is the fix (torch's
    init_process_group(timeout=...), the Trainer's ddp_timeout)."""
    waited = _lines_matching(ctx, _WATCHDOG_WAITED)
    if not waited or not _ONE_RANK_WORK.search(_text(ctx)):
        return None
    timeout_ms, ran_ms = (int(x) for x in _WATCHDOG_WAITED.search(waited[0].line).groups())
    if ran_ms < timeout_ms:
        return None
    minutes = timeout_ms / 60000
    said = f"{minutes:g} minutes" if minutes >= 1 else f"{timeout_ms / 1000:g} seconds"
    return _first(_make("multi-gpu-transport", f"the other ranks outwaited the {said} collective timeout",
                        f"one rank does long work of its own (the clustering or indexing, tokenization or saving the "
                        f"paste shows) while the others wait in a collective; the process group's timeout ({said}, "
                        f"Timeout(ms)={timeout_ms}) ran out before it finished, and the watchdog took the job down. "
                        "The GPUs' transport is not at fault",
                        "raise the process group's timeout above the longest single-rank step: "
                        "torch.distributed.init_process_group(..., timeout=datetime.timedelta(hours=6)) where the "
                        "program creates it (a transformers Trainer: ddp_timeout=21600 seconds; LLaMA-Factory: "
                        "ddp_timeout: 180000000), or run that step before the process group starts",
                        [ctx.line_fact(waited[0])], waited[:1]))


# several nodes said: "2 nodes", "two machines", "multi-node", mpirun with a hostfile
_NODES = re.compile(r"(?i)\b(?:[2-9]|two|three|four|several|multiple) (?:nodes?|machines|servers|hosts)\b|"
                    r"\bmulti[- ]?nodes?\b|--nnodes[= ]?[2-9]|\bmpirun\b.{0,60}(?:-f|--hostfile|-hostfile|-H)\s|多机|多节点")
_ONE_NODE_WORKS = re.compile(r"(?i)\b(?:can run|runs?|works?|working|fine)\b.{0,30}\b(?:on )?(?:one|1|a single) "
                             r"(?:node|machine)\b|单机(?:可以|能|正常|没问题)")
_STUCK = re.compile(r"(?i)\b(?:hangs?|hanging|hung|stuck|freez\w*|no output|nothing happens)\b|卡住|卡死|不动")
_STUCK_AT_INIT = re.compile(r"(?i)(?:hangs?|hung|stuck|freez\w*|卡在|卡住)[^\n]{0,40}(?<![a-z])(?:init\w*|initiali[sz]\w*)"
                            r"[^\n]{0,12}(?:nccl|process.group|communicator)|(?:hangs?|hung|stuck|卡在|卡住)[^\n]{0,40}"
                            r"(?:ncclCommInitRank|NCCL (?:INFO )?Bootstrap|NCCL\s*初始化)|(?:init\w*|initiali[sz]\w*) "
                            r"(?:nccl|process.group)\w*[^\n]{0,30}(?:hangs?|hung|stuck|never returns)")
_LOOPBACK = re.compile(r"(?i)connect\W{0,3}\[?(127\.\d+\.\d+\.\d+)\]?:(\d+)\W{0,3}.{0,20}(?:Connection refused|"
                       r"timed out|No route)")


# torch's gloo process group says it fell back to loopback (ProcessGroupGloo.cpp, createDefaultDevice: "Unable to
# resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface
# to bind to with GLOO_SOCKET_IFNAME."); harmless on one machine, fatal once a rank on another node (or in another
# network namespace) must dial the address it advertised
_GLOO_FELL_BACK = re.compile(r"(?i)Using the loopback\s+address as fallback|unable to resolve hostname to a \(local\) "
                             r"address")
_GLOO_FAILED = re.compile(r"(?i)connectFullMesh failed|Gloo connect\w* failed|gloo\S*\W.{0,40}(?:timed out|Connection "
                          r"refused)|remote=\[127\.\d+\.\d+\.\d+\]")


def _gloo_fell_back_to_loopback(ctx: Context) -> Optional[Diagnosis]:
    """Gloo said it could not resolve the hostname and took the loopback address, and a gloo connection then failed:
    the other ranks were given 127.x to dial. A pod on the host network (many NICs), a hostname missing from
    /etc/hosts or a container's own hostname all end here."""
    fell_back = _lines_matching(ctx, _GLOO_FELL_BACK)
    failed = _lines_matching(ctx, _GLOO_FAILED)
    if not fell_back or not failed:
        return None
    return _first(_make("multi-gpu-transport", "gloo fell back to the loopback address",
                        "gloo could not resolve this host's name to an address of its own and bound to loopback "
                        "(127.0.0.1); the other ranks then dialled 127.0.0.1, their own machine, and the gloo group "
                        "(torch.distributed's CPU group, which vLLM, DeepSpeed and Ray-based launchers start beside "
                        "NCCL) never connected",
                        "export GLOO_SOCKET_IFNAME=<the interface on the network the nodes share, e.g. eth0> (ip -br "
                        "addr lists them) on every node, NCCL_SOCKET_IFNAME to the same interface for NCCL (in a pod "
                        "on the host network: the primary NIC, or exclude the others: NCCL_SOCKET_IFNAME=^lo,docker,"
                        "veth); or make the hostname resolve to the node's real address (/etc/hosts)",
                        [ctx.line_fact(fell_back[0])], fell_back[:1] + failed[:1]))


def _socket_interface(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    fell_back = _gloo_fell_back_to_loopback(ctx)
    if fell_back is not None:
        return fell_back
    loopback = _lines_matching(ctx, _LOOPBACK.pattern)
    address = _LOOPBACK.search(loopback[0].line).group(1) if loopback else None
    # 127.0.0.1 refused on one machine is a store that never started; 127.0.1.1 (a hostname's Debian entry) or any
    # loopback between nodes is an address advertised to a machine that cannot reach it
    if address and ((address != "127.0.0.1" and re.search(r"(?i)\bgloo\b", text)) or _NODES.search(text)):
        return _first(_make("multi-gpu-transport", f"a node advertised the loopback address {address}",
                            f"the other rank tried to connect to {address}, a loopback address: the node's hostname "
                            "resolves to it (Debian and Ubuntu map the hostname to 127.0.1.1 in /etc/hosts), so gloo "
                            "offered an address no other machine can reach",
                            "export GLOO_SOCKET_IFNAME=<the interface on the shared network, e.g. eth0> (ip -br addr "
                            "or ifconfig lists them) on every node, NCCL_SOCKET_IFNAME too for NCCL, or map the "
                            "hostname to the node's real address in /etc/hosts; for GPU training use the nccl backend",
                            [ctx.line_fact(loopback[0])], loopback[:1]))
    # it works on one node and hangs on two, or it hangs on several nodes right at NCCL's start (the bootstrap's
    # sockets are the first thing that crosses between the nodes)
    if not (_NODES.search(text) and _STUCK.search(text) and
            (_ONE_NODE_WORKS.search(text) or _STUCK_AT_INIT.search(text))):
        return None
    if any(e.family not in (None, "multi-gpu-transport") for e in ctx.errors):
        return None
    # NCCL's own NET/Socket line names the wrong interface it took: cuda_notes' reading names it and the one to use
    if re.search(r"NET/Socket\s*:\s*Using\s*\[\d+\]\s*(?:docker\d*|lo|virbr\d+|veth\w+|br-\w+|cni\d*|flannel\S*)\s*:", text):
        return None
    said = _lines_matching(ctx, _STUCK.pattern)
    mpi = re.search(r"(?i)\bmpirun\b|\bmpi\b", text)
    return _first(_make("multi-gpu-transport", "across nodes NCCL takes an interface that does not reach the other node",
                        ("it runs on one node and hangs on two" if _ONE_NODE_WORKS.search(text) else
                         "it hangs at NCCL's start across the nodes") + ": what only several nodes use is the "
                        "network between them, and NCCL's sockets go out on the first interface it finds (a docker or "
                        "virtual bridge, a link-local or management port) that the other node cannot reach",
                        "export NCCL_SOCKET_IFNAME=<the interface both nodes share, e.g. eth0 or ib0> (ip -br addr "
                        "shows which carries the nodes' addresses) on every node"
                        + (" (mpirun: -x NCCL_SOCKET_IFNAME=eth0 passes it to every rank)" if mpi else "") +
                        "; NCCL_DEBUG=INFO prints the interface NCCL picked (NET/Socket : Using ...)",
                        [], said[:1]))


# NCCL's sockets between the ranks failing: its bootstrap / socket transport's own words, or the user's
_NCCL_SOCKET_FAILED = re.compile(r"(?i)Connection closed by remote peer|Call to connect (?:timeout|returned)\W{0,4}"
                                 r"Connection (?:refused|timed out)|\bNCCL\b.{0,80}\b(?:Connection refused|No route to "
                                 r"host|Connection reset by peer)|\bsocket(?:Start|Poll|Finalize)?Connect\w*\b.{0,80}"
                                 r"(?:refused|failed|timed? ?out)|\bbootstrap\w*\b.{0,60}\b(?:Connection refused|"
                                 r"timed? ?out)")
# NCCL's log prefix: "host:pid:tid [device]"; two hosts in it are two nodes
_NCCL_HOST = re.compile(r"^\s*([A-Za-z][\w.-]*):\d+:\d+ \[\d+\]")
# a Kubernetes job (Kubeflow's MPIJob / PyTorchJob, a pod): each rank is a pod with the pod network's eth0 and its
# loopback; an image's /etc/nccl.conf that only excludes docker0 lets NCCL take lo there
_POD = re.compile(r"(?i)\bkind:\s*\w*Job\b|\bMPIJob\b|\bPyTorchJob\b|\bkubeflow\b|\bkubectl\b|\bkubernetes\b|\bk8s\b|"
                  r"\bpods?\b|\bmpi-operator\b")
# an interface NCCL used that is a real NIC (not loopback, a bridge or a virtual link)
_NIC_USED = re.compile(r"NET(?:/Socket)?\s*:\s*Using (?:interface |\[\d\])?((?:en|eth|ib|bond|em|p\d)\w*)")


def _nccl_sockets_refused(ctx: Context) -> Optional[Diagnosis]:
    """NCCL's bootstrap or socket transport refused or dropped between the ranks, on several nodes (two hosts in
    NCCL's log prefix, or nodes said) or in Kubernetes pods: NCCL dials each rank on the interface that rank
    advertised, which is the first one it found (a docker bridge, a management port, or inside a pod the loopback
    when an image's /etc/nccl.conf excludes only docker0); NCCL_SOCKET_IFNAME names the one that routes, and every
    rank must get it (mpirun -x)."""
    failed = _lines_matching(ctx, _NCCL_SOCKET_FAILED)
    text = _text(ctx)
    if not failed or re.search(r"(?i)NET/IB\b.{0,40}(?:error|fail)|\bibv_\w+ failed|/dev/shm|shm_open", text):
        return None
    hosts = {m.group(1) for line in ctx.sheet.lines for m in [_NCCL_HOST.match(line)] if m}
    pod = _POD.search(text)
    if len(hosts) < 2 and not _NODES.search(text) and not pod:
        return None
    used = _NIC_USED.search(text)
    user = next((m.group(1) for line in ctx.sheet.lines if _NIC_USED.search(line)
                 for m in [_NCCL_HOST.match(line)] if m), None)
    value = used.group(1) if used else ("eth0" if pod else "<the interface on the nodes' shared network>")
    mpi = re.search(r"(?i)\bmpirun\b|\bhorovod(?:run)?\b|\bMPIJob\b", text)
    where = (f"NCCL_SOCKET_IFNAME={value} (the pod network's interface; ip -br addr inside a pod lists it)" if pod else
             f"NCCL_SOCKET_IFNAME={value}" + (f" (the interface {user or 'one rank'}'s NCCL used; it must carry an "
                                              "address the other nodes reach, ip -br addr on each)" if used else
                                              " (ip -br addr shows which carries the nodes' addresses)"))
    return _first(_make("multi-gpu-transport", "NCCL's sockets go out on an interface the other ranks cannot reach",
                        "NCCL's bootstrap and socket transport dial each rank on the address that rank advertised, "
                        "taken from the first interface NCCL found: a docker bridge, a second port on another "
                        "network, or inside a pod the loopback; the other rank then finds the connection refused or "
                        "closed" + (f" (the log shows {len(hosts)} hosts: {', '.join(sorted(hosts)[:3])})"
                                    if len(hosts) > 1 else ""),
                        f"export {where} on every rank, or exclude the ones that do not route: "
                        "NCCL_SOCKET_IFNAME=^docker0,lo" +
                        (f"; with mpirun pass it to all ranks: mpirun -x NCCL_SOCKET_IFNAME={value.split(' ')[0]} ..."
                         if mpi else "") +
                        ("; an image's /etc/nccl.conf may already set NCCL_SOCKET_IFNAME=^docker0 (older Horovod "
                         "images did), which leaves lo to NCCL inside a pod: remove that line or make it ^docker0,lo"
                         if pod or mpi else "") +
                        "; NCCL_DEBUG=INFO prints the interface each rank picks (NET/Socket : Using ...)",
                        [ctx.line_fact(failed[0])], failed[:2]))


_TRAINING_SAID = re.compile(r"(?i)\btrain\w*|\bfine-?tun\w*|\bdeepspeed\b|\btorchrun\b|\bmegatron\b|训练|微调")
_ERROR_SAID = re.compile(r"(?i)\b(?:errors?|fails?|failed|failing|crash\w*|exception)\b|报错|出错|失败|错误")


def _multi_node_error_said(ctx: Context) -> Optional[Diagnosis]:
    """A thin report (a title, a sentence) that multi-node training fails, with no line of the failure: what only
    several nodes bring is a second environment and the network between them; NCCL's first requirement is the same
    NCCL (built for the same CUDA) on every node, then the interface its sockets use."""
    # thin as arch_missing._is_thin counts it: no error line of a known class, a title and a few lines at most
    if any(e.family is not None for e in ctx.errors) or sum(1 for line in ctx.sheet.lines if line.strip()) > 15:
        return None
    text = _text(ctx)
    if not (_NODES.search(text) and _ERROR_SAID.search(text) and _TRAINING_SAID.search(text)):
        return None
    return _make("multi-gpu-transport", "multi-node training fails: the nodes' NCCL and CUDA, then their network",
                 "what several nodes add to a run that works on one is a second software environment and the network "
                 "between them; an NCCL that differs between the nodes, or that was built for another CUDA than the "
                 "torch beside it, fails the connection, and so does a socket on an interface the other node cannot "
                 "reach",
                 "make the environments identical: on every node python -c \"import torch; print(torch.__version__, "
                 "torch.version.cuda, torch.cuda.nccl.version())\" must print the same torch, CUDA and NCCL "
                 "(reinstall the same torch wheel, and no separate nvidia-nccl or system NCCL of another CUDA ahead "
                 "of it); then rerun with NCCL_DEBUG=INFO on every node and export NCCL_SOCKET_IFNAME=<the interface "
                 "the nodes share> (ip -br addr)", [], _lines_matching(ctx, _NODES)[:1], confirmed=False)


# NCCL's internal / remote failure codes and words (ncclInternalError, ncclRemoteError, "NCCL error ... internal
# error"); a system error between nodes ("unhandled system error") is multi_gpu's node reading, which also reads sockets
# and containers
_NCCL_FAILED = re.compile(r"(?i)(?<![A-Za-z])nccl(?:Internal|Remote)Error\b|NCCL error\b.{0,80}\b(?:internal|remote) "
                          r"error")


def _multi_node_nccl_error(ctx: Context) -> Optional[Diagnosis]:
    """NCCL failing on several nodes (multi-node said, or a hostfile) where the paste sets no socket interface: NCCL
    picks the interface for its bootstrap and socket traffic itself (the first non-loopback one, docker0 and virtual
    bridges included), and a node that picks one the other cannot reach fails the connection; the interface the nodes
    share, named in NCCL_SOCKET_IFNAME on every node, is the first fix (NCCL's environment-variable docs:
    NCCL_SOCKET_IFNAME; THUDM/VisualGLM-6B#203, the reporter's fix for ncclInternalError on two nodes)."""
    text = _text(ctx)
    if not (_NODES.search(text) or re.search(r"(?i)--hostfile|\bhostfile\b", text)):
        return None
    if re.search(r"\bNCCL_SOCKET_IFNAME\s*=", text):
        return None   # already set: the socket readings (_socket_interface) read its value
    if re.search(r"(?i)\bsocket\w*|\bconnect\w*|\brecv\b|timed? ?out", text):
        return None   # the socket's own failure shown: multi_gpu's network readings (IB, interface, firewall)
    said = _lines_matching(ctx, _NCCL_FAILED)
    if not said:
        return None
    ib = re.search(r"(?i)\bInfiniBand\b|\bIB\b|\bRoCE\b|\bmlx5|NCCL_IB_", text)
    return _ahead_of(_make(
        "multi-gpu-transport", "NCCL between the nodes: no common network interface chosen",
        "on several nodes NCCL opens its bootstrap and socket connections on an interface it picks by itself (the "
        "first that is up: a docker0 bridge, a virtual or management interface), which the other node may not reach; "
        "the connection then fails inside NCCL",
        "set the interface the nodes share on every node before the launch: export NCCL_SOCKET_IFNAME=<interface> "
        "(ip -br addr shows the one holding the address the nodes use to reach each other, e.g. eth0, ens..., ib0; "
        "a list such as ^docker0,lo excludes the bridges) - in a DeepSpeed hostfile run put it in ~/.deepspeed_env so "
        "every node gets it - and rerun with NCCL_DEBUG=INFO (its NET/Socket line names the interface used)"
        + ("; with InfiniBand keep NCCL_IB_DISABLE=0 and name the card in NCCL_IB_HCA=mlx5_0 (ibv_devinfo lists it)"
           if ib else "")
        + ("; each node in a container: run the containers with --network=host (a bridge network gives each a "
           "private address the other node cannot reach)" if _CONTAINED.search(text) or
           re.search(r"/opt/conda/lib/python|\bnvcr\.io/|/workspace/", text) else ""), [], said[:1]),
        "multi-gpu-transport")


_NO_LIBUV = re.compile(r"(?i)(?:use_)?libuv (?:was |is )?requested but (?:PyTorch|torch) (?:was |is )?buil[dt] "
                       r"without libuv")


def _store_without_libuv(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _NO_LIBUV.pattern)
    if not said:
        return None
    return _first(_make("multi-gpu-transport", "torch's TCPStore asks for libuv, which this build lacks",
                        "since torch 2.4 the rendezvous store (TCPStore) uses libuv by default, and the Windows wheels "
                        "are built without it, so init_process_group fails before any GPU work",
                        "set USE_LIBUV=0 before starting (PowerShell: $env:USE_LIBUV=\"0\"; cmd: set USE_LIBUV=0; or "
                        "os.environ[\"USE_LIBUV\"] = \"0\" before init_process_group, or pass use_libuv=False / "
                        "init_method \"tcp://host:port?use_libuv=0\"); on one GPU, run without a process group",
                        [ctx.line_fact(said[0])], said[:1]))


_PORT_TAKEN = re.compile(r"(?i)\bAddress already in use\b|errno:? 98\b|EADDRINUSE")
_DISTRIBUTED = re.compile(r"(?i)\btorchrun\b|torch\.distributed|\bc10d\b|DistNetworkError|TCPStore|MASTER_PORT|"
                          r"accelerate launch|\bdeepspeed\b|llamafactory-cli|\bswift sft\b|nproc_per_node|:29500\b")


def _port_taken(ctx: Context) -> Optional[Diagnosis]:
    """The rendezvous store could not listen: another job (or a rank left over from a crashed run) holds the port."""
    said = _lines_matching(ctx, _PORT_TAKEN.pattern)
    text = _text(ctx)
    if not said or not _DISTRIBUTED.search(text):
        return None
    port = re.search(r"(?i)(?:\]:|port[ =:]+|MASTER_PORT=|--master_port[= ])(\d{4,5})\b", text)
    value = port.group(1) if port else "29500"
    other = str(int(value) + 1)
    return _first(_make("multi-gpu-transport", f"the rendezvous port {value} is already taken",
                        f"rank 0 starts torch's TCPStore on MASTER_PORT ({value} unless set) and another process on "
                        "this machine already listens there: a second job started beside it, or ranks left over from "
                        "a run that crashed",
                        f"give this job its own port: torchrun --master_port {other} ... (MASTER_PORT={other}; "
                        f"accelerate launch --main_process_port {other}; deepspeed --master_port {other}; "
                        f"llamafactory-cli: MASTER_PORT={other}), or end the leftover processes (ss -ltnp | grep "
                        f"{value} shows which holds it)", [ctx.line_fact(said[0])], said[:1]))


@rule("multi-gpu-transport")
def rendezvous(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the store's libuv error, a loopback address refused between nodes, a run that works on one node
    and hangs on two, or a 30-minute wait while rank 0 preprocesses."""
    return (_store_without_libuv(ctx) or _port_taken(ctx) or _socket_interface(ctx) or _nccl_sockets_refused(ctx) or
            _collective_timeout_while_preprocessing(ctx) or _watchdog_outwaited(ctx) or _multi_node_nccl_error(ctx) or
            _multi_node_error_said(ctx))
