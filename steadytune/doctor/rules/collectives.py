"""Several GPUs, read from what NCCL leaves behind when it says little: its shared-memory transport refused peer
access (cuMem host buffers), a log whose only NCCL line is the harmless InfiniBand-library warning and then silence,
a load that works on one GPU and not on several, said in words, NCCL's shared memory named in words (/dev/shm, a
pod's emptyDir), nccl-tests whose mpirun ranks each ran alone (built without MPI=1) or whose bus bandwidth crawls
under 1 GB/s over large messages, and TensorRT-LLM's custom all-reduce refusing GPUs without peer access before 0.12.
machine.multi_gpu asks these before its own transport readings; each returns None where its evidence is not there."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor


# NCCL 2.23 added cuMem (VMM) allocations for the host buffers of its SHM transport (NCCL_CUMEM_HOST_ENABLE; on by
# default from 2.24, NCCL's environment-variable docs); mapping them asks CUDA for access between the GPUs, which
# cards without peer access refuse ("peer access is not supported between these two devices", CUDA error 217).
# The legacy /dev/shm host buffers need no peer access (NVIDIA/nccl#1838: NCCL_CUMEM_HOST_ENABLE=0 runs).
_NO_PEER = re.compile(r"(?i)peer access is not supported|Cuda failure 217\b|cudaErrorPeerAccessUnsupported")
_SHM_TRANSPORT = re.compile(r"(?i)transport/shm\.cc|\bcuMem\w*|NCCL_CUMEM\w*")
# a serving engine's own all-reduce refused peer access: its switch, not NCCL's (machine._custom_all_reduce reads it)
_ENGINE_ALLREDUCE = re.compile(r"(?i)custom_?all_?reduce|CustomAllreduce")


def cumem_host_without_peer(ctx: Context, errors: list) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not (_NO_PEER.search(text) and _SHM_TRANSPORT.search(text)) or _ENGINE_ALLREDUCE.search(text):
        return None
    lines = _lines_matching(ctx, _NO_PEER.pattern)
    return _make("multi-gpu-transport", "NCCL's cuMem host buffers need peer access these GPUs lack",
                 "from NCCL 2.23/2.24 the SHM transport (used between GPUs without peer-to-peer) allocates its host "
                 "buffers with cuMem, and mapping them fails with CUDA error 217 'peer access is not supported' on "
                 "GPUs that have no peer access (L4, consumer cards, cards on separate PCIe roots)",
                 "export NCCL_CUMEM_HOST_ENABLE=0 (NCCL's switch: SHM goes back to its legacy /dev/shm buffers, which "
                 "need no peer access), on every rank; in a container keep /dev/shm large (--ipc=host or "
                 "--shm-size=16g); NCCL_DEBUG=INFO shows the transport it picks", [], errors or lines)


# NCCL's warning when it finds no InfiniBand verbs library: it then uses sockets, so on one machine it is harmless
_IBVERBS_ONLY = re.compile(r"(?i)NCCL WARN\W+(?:Failed to open|Could not load) libibverbs")
# distributed training said to have started: Lightning's / torch's start lines, a process count
_STARTED = re.compile(r"(?i)All distributed processes registered|Starting with [2-9] processes|MEMBER: \d/[2-9]\b|"
                      r"\bddp\b|DistributedDataParallel|--nproc_per_node[= ]?[2-9]")


def silent_after_the_ibverbs_warning(ctx: Context, errors: list) -> Optional[Diagnosis]:
    """Every NCCL line is the libibverbs warning, and the log then ends with the processes registered: the warning is
    not the failure (NCCL falls back to sockets on one machine); the run hangs in its first collective, which on a
    workstation or server is the GPUs' PCIe peer path (NCCL's troubleshooting guide: the IOMMU / ACS)."""
    if not errors or not all(_IBVERBS_ONLY.search(e.line) for e in errors):
        return None
    if not _STARTED.search(_text(ctx)):
        return None
    return _make("multi-gpu-transport", "the first collective hangs; the libibverbs warning is harmless",
                 "NCCL's 'Failed to open libibverbs.so' only says it found no InfiniBand library and will use sockets "
                 "(harmless on one machine); the processes registered and then nothing came: the first transfers "
                 "between the GPUs never arrive, which is the IOMMU (VT-d / AMD-Vi) or PCIe ACS redirecting their "
                 "peer-to-peer writes",
                 "confirm with NCCL_P2P_DISABLE=1 (it runs, slower); then disable the IOMMU in the BIOS (VT-d / "
                 "AMD-Vi / IOMMU off) or boot with iommu=pt (intel_iommu=off), and turn PCIe ACS off (sudo lspci -vvv | "
                 "grep -i acsctl shows SrcValid+ where it is on), as NCCL's troubleshooting guide says",
                 [ctx.line_fact(errors[0])], errors, confirmed=False)


# "works on a single GPU" and "not on multiple GPUs", in either order: the step between the GPUs is what fails
_ONE_WORKS = re.compile(r"(?i)\b(?:works?|working|runs?|loads?|fine|ok)\b[^.\n]{0,30}\b(?:on )?(?:a )?(?:single|one|1) "
                        r"(?:GPU|card)\b|单卡(?:可以|能|正常|没问题)")
_SEVERAL_FAIL = re.compile(r"(?i)\b(?:not|n.t|fails?|failed|hangs?|stuck|cannot|can.t)\b[^.\n]{0,40}\b(?:multiple|"
                           r"several|multi|[2-9]|two|four|eight) ?(?:-)?GPUs?\b|多卡(?:不行|报错|卡住|失败|加载不)")


# a launch cut to one process that then runs: "--nproc_per_node=2 改为1可以正常运行", "with --num_processes 1 it works"
_FEWER_WORKS = re.compile(r"(?i)(?:--nproc[_-]per[_-]node|--num[_-]processes|--num_gpus|NPROC_PER_NODE)\W{0,3}[2-9]\s*"
                          r"(?:改为|改成|换成|->|→|to|=>)\s*1(?!\d).{0,30}(?:可以|正常|能跑|works?|runs?|fine|ok)|"
                          r"(?:--nproc[_-]per[_-]node|--num[_-]processes|--num_gpus|NPROC_PER_NODE)\W{0,3}1(?!\d).{0,30}"
                          r"(?:可以|正常|能跑|\bworks?\b|\bruns fine\b|\bis fine\b)")
# the run is in a container, said in English or Chinese
_IN_CONTAINER = re.compile(r"(?i)(?<![a-z])(?:docker|podman|containers?)(?![a-z])|容器")


def one_gpu_works_several_not(ctx: Context) -> Optional[Diagnosis]:
    """A model (or a run) that loads on one GPU and not when spread over several, said in words with no error line:
    the step that is new with several GPUs is NCCL's between them. In a container that is first its shared memory
    (NCCL's buffers live in /dev/shm, 64 MB under docker unless --ipc=host or --shm-size widens it: NCCL's
    troubleshooting guide, "Docker"), on the host the peer-to-peer path, NCCL's first suspect."""
    if ctx.errors:
        return None
    text = _text(ctx)
    fewer = _lines_matching(ctx, _FEWER_WORKS)
    if not (_ONE_WORKS.search(text) and _SEVERAL_FAIL.search(text)) and not fewer:
        return None
    said = _lines_matching(ctx, _SEVERAL_FAIL.pattern) or fewer
    if _IN_CONTAINER.search(text) and not re.search(r"--ipc[= ]host|--shm-size|shm_size|ipc: host", text):
        return _make("multi-gpu-transport", "several GPUs fail in the container, one works",
                     "with several processes the GPUs exchange through NCCL, whose buffers between the processes of "
                     "one machine are in /dev/shm; docker gives a container 64 MB of it (and its own IPC namespace), "
                     "too little for NCCL, so the multi-GPU start fails where one process runs",
                     "start the container with --ipc=host (or --shm-size=16g; compose: ipc: host / shm_size: 16gb), "
                     "and --network=host where the ranks meet over sockets; if it still fails, rerun with "
                     "NCCL_DEBUG=INFO and try NCCL_P2P_DISABLE=1", [], said, confirmed=False)
    return _make("multi-gpu-transport", "it works on one GPU and not across several",
                 "what only several GPUs do is exchange data through NCCL, and its peer-to-peer path between the cards "
                 "(PCIe P2P, broken or missing on consumer boards, or redirected by the IOMMU / ACS) is where such a "
                 "load hangs or fails",
                 "export NCCL_P2P_DISABLE=1 before starting (the transfers go through host memory; slower, the results "
                 "are the same); in a container also --ipc=host (or --shm-size=16g); rerun with NCCL_DEBUG=INFO to see "
                 "the step that stops; for P2P back, iommu=pt on the kernel command line and ACS off in the BIOS",
                 [], said, confirmed=False)


# NCCL's shared memory named in words (a question, a how-to, a complaint): its buffers between the processes of one
# machine live in /dev/shm
_NCCL_SHM_SAID = re.compile(r"(?i)\b[NR]CCL\b[^\n]{0,60}(?:shared[- ]memory|/dev/shm|\bshm\b)|(?:shared[- ]memory|"
                            r"/dev/shm|\bshm\b)[^\n]{0,60}\b[NR]CCL\b")
# a Kubernetes deployment: its pods get the container runtime's 64 MB /dev/shm, and no docker flag reaches them
_KUBERNETES = re.compile(r"(?i)\bkubernetes\b|\bk8s\b|\bkubectl\b|\bhelm\b|\bpods?\b|\bvalues\.yaml\b|\bKServe\b|"
                         r"\bproduction-stack\b|\bStatefulSet\b|\bDeployment\b")


def nccl_shared_memory_said(ctx: Context) -> Optional[Diagnosis]:
    """NCCL's shared memory said in words, no error line: NCCL's SHM transport and its proxy buffers are files in
    /dev/shm, 64 MB in a container unless widened (docker's --shm-size / --ipc=host; a Kubernetes pod only through
    an emptyDir volume of medium Memory mounted at /dev/shm, as Kubernetes' volume docs give it)."""
    if ctx.errors:
        return None
    said = _lines_matching(ctx, _NCCL_SHM_SAID)
    if not said:
        return None
    if _KUBERNETES.search(_text(ctx)):
        where = ("in the pod spec mount a memory-backed emptyDir at /dev/shm: volumes: - name: dshm, emptyDir: "
                 "{medium: Memory, sizeLimit: 16Gi}, and in the container volumeMounts: - name: dshm, mountPath: "
                 "/dev/shm (a Helm chart: its shm / extra-volumes values); the limit counts against the pod's memory")
    else:
        where = ("start the container with --shm-size=16g (or --ipc=host; compose: shm_size: 16gb), and check df -h "
                 "/dev/shm where it runs")
    return _make("multi-gpu-transport", "NCCL's shared-memory buffers need a larger /dev/shm",
                 "NCCL passes data between the processes of one machine (tensor-parallel workers, ranks) through "
                 "buffers in /dev/shm, which a container or a pod gets at 64 MB unless it is widened; too small, "
                 "NCCL fails or the workers die while connecting", where, [], said[:1], confirmed=False)


# nccl-tests / rccl-tests started by an MPI launcher over several ranks (several hosts or -np above 1)
_MPI_LAUNCH = re.compile(r"(?i)\b(?:mpirun|mpiexec|srun)\b[^\n]{0,200}?(?:-np?\s+[2-9]|\s-H\s+\S+,|--host\s+\S+,|"
                         r"--hostfile|-hostfile|-N\s*[2-9])[^\n]{0,200}\b\w+_perf\b")
# the tests' closing summary; printed once per communicator, so once per rank when the ranks never joined
_SUMMARY = re.compile(r"#\s*Avg bus bandwidth\s*:")
# the user's words for ranks that ran apart
_APART = re.compile(r"(?i)\bseparate(?:ly)?\b|\bindependent(?:ly)?\b|\bno communication\b|\bwithout communicat\w*|"
                    r"\beach (?:node|host|rank) (?:runs?|ran)\b|\bnot (?:communicat\w*|talk\w*)")


def tests_built_without_mpi(ctx: Context) -> Optional[Diagnosis]:
    """nccl-tests (or rccl-tests) launched by mpirun over several ranks that each print a whole result of their own:
    the binaries were built without MPI, so every rank starts its own one-process communicator (nccl-tests' README:
    multi-process runs need the tests built with MPI=1)."""
    text = _text(ctx)
    launched = _lines_matching(ctx, _MPI_LAUNCH)
    if not launched or not (len(_SUMMARY.findall(text)) > 1 or _APART.search(text)):
        return None
    rccl = _vendor(ctx) == "amd" or re.search(r"(?i)\brccl\b|\brocm\b|\bhip\b", text)
    tests, lib, home = (("rccl-tests", "RCCL", "HIP_HOME=/opt/rocm RCCL_HOME=/opt/rocm") if rccl else
                        ("nccl-tests", "NCCL", "NCCL_HOME=<nccl's install prefix>"))
    return _make("multi-gpu-transport", f"{tests} were built without MPI: each rank ran alone",
                 f"mpirun started one copy per rank, and each printed its own complete result: {tests} built without "
                 f"MPI support do not join the ranks, so every process made a one-process {lib} communicator over its "
                 "own GPUs and no data crossed between the nodes",
                 f"rebuild {tests} with MPI: make clean && make MPI=1 MPI_HOME=<the MPI prefix mpirun comes from, "
                 f"e.g. /usr/lib/x86_64-linux-gnu/openmpi> {home}; then one rank per GPU (mpirun -np <total GPUs> "
                 "-H host1:<gpus>,host2:<gpus> ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 1); the header then "
                 "lists every rank and one result is printed", [], launched[:1], confirmed=False)


# TensorRT-LLM's own words when its custom all-reduce cannot enable peer access between two GPUs
_TRTLLM_PEER = re.compile(r"(?i)Can.?t enable (?:peer )?access between nodes \d+ and \d+")
_TRTLLM_VERSION = re.compile(r"(?i)(?:tensorrt[-_ ]?llm|trt-?llm)\W{0,3}(?:version\W{0,3})?v?(0\.(\d+)\.\d+\w*)")


def trtllm_peer_access(ctx: Context) -> Optional[Diagnosis]:
    """TensorRT-LLM's tensor-parallel engines enable peer access between every pair of GPUs for its custom
    all-reduce, and before 0.12 it stopped when a pair had none (consumer cards, GPUs on separate PCIe roots);
    TensorRT-LLM 0.12 enables it only where the GPUs support it (maintainers' answer on NVIDIA/TensorRT-LLM#2066,
    fixed in main and v0.12)."""
    said = _lines_matching(ctx, _TRTLLM_PEER)
    if not said:
        return None
    version = _TRTLLM_VERSION.search(_text(ctx))
    if version and int(version.group(2)) >= 12:
        return None
    have = f"TensorRT-LLM {version.group(1)}" if version else "this TensorRT-LLM"
    return _make("multi-gpu-transport", "TensorRT-LLM cannot enable peer access between these GPUs",
                 "with tensor parallelism TensorRT-LLM enables peer access between every pair of GPUs for its custom "
                 f"all-reduce; {have} stops when a pair has none (no P2P between these cards: consumer GPUs, or "
                 "cards on separate PCIe roots), where 0.12 enables it only where it is supported",
                 "upgrade to TensorRT-LLM 0.12 or newer (pip install -U \"tensorrt_llm>=0.12\" --extra-index-url "
                 "https://pypi.nvidia.com, or its 0.12+ container), then rebuild the engines with the same "
                 "trtllm-build; nvidia-smi topo -p2p r shows which pairs lack peer access", [], said[:1])


# the tests' summary figure, the sizes they ran (the -e flag of the command, or the first column of the result rows)
# and the ranks they ran over (-g, mpirun -np, or the header's "#  Rank  1" lines)
_AVG_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\d+(?:\.\d+)?)")
_MAX_BYTES = re.compile(r"\b\w+_perf\b[^\n]*?\s-e\s*(\d+)\s*([KMG]?)\b")
_RESULT_ROW = re.compile(r"(?m)^\s*(\d+)\s+\d+\s+(?:float|half|bfloat16|double|int8|uint8|int32|uint32|int64|uint64)\s")
_RANKS = re.compile(r"\b\w+_perf\b[^\n]*?\s-g\s*([2-9]|1\d)\b|\b(?:mpirun|mpiexec|srun)\b[^\n]*?\s-n(?:p)?\s+([2-9]|\d{2,})\b|"
                    r"#\s+Rank\s+[1-9]\d*\s+Group\b")


def tests_crawl(ctx: Context) -> Optional[Diagnosis]:
    """nccl-tests / rccl-tests over several GPUs whose average bus bandwidth stays under 1 GB/s although they ran
    messages of a megabyte and more: the data crossed, but through a path that crawls. Between GPUs of one machine
    that is peer-to-peer through the IOMMU or PCIe ACS (NCCL's troubleshooting guide: both redirect P2P through the
    root complex), which NCCL_P2P_DISABLE=1 confirms by running faster."""
    text = _text(ctx)
    average = _AVG_BUSBW.search(text)
    if average is None or float(average.group(1)) >= 1.0 or not _RANKS.search(text):
        return None
    sizes = [int(n) for n in _RESULT_ROW.findall(text)]
    flag = _MAX_BYTES.search(text)
    if flag:
        sizes.append(int(flag.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[flag.group(2)])
    if not sizes or max(sizes) < 1 << 20:
        return None   # only small messages: their bandwidth is latency, low on any machine
    rccl = _vendor(ctx) == "amd" or re.search(r"(?i)\brccl\b|\brocm\b", text)
    tests = "rccl-tests" if rccl else "nccl-tests"
    said = _lines_matching(ctx, _AVG_BUSBW)
    return _make("multi-gpu-transport", f"{tests} between the GPUs crawl ({average.group(1)} GB/s)",
                 f"{tests} reached an average bus bandwidth of {average.group(1)} GB/s over messages of a megabyte and "
                 "more, where PCIe gives several GB/s and NVLink / xGMI far more: the transfers go through a path that "
                 "crawls - peer-to-peer writes redirected by the IOMMU or PCIe ACS, or a fallback to sockets",
                 "rerun with NCCL_P2P_DISABLE=1 and with NCCL_DEBUG=INFO (the 'via' lines name the transport: P2P, "
                 "SHM or NET/Socket); if it is faster without P2P, boot with iommu=pt (amd_iommu=on / intel_iommu=on "
                 "iommu=pt) and turn PCIe ACS off (sudo lspci -vvv | grep -i acsctl shows SrcValid+ where it is on), "
                 "as NCCL's troubleshooting guide says; nvidia-smi topo -m (rocm-smi --showtopo) shows the path "
                 "between the GPUs", [], said[:1], confirmed=False)
