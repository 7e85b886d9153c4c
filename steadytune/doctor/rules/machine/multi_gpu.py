"""Several GPUs over NCCL or a serving engine's own all-reduce: the transport (P2P, NVLink SHARP, shared
memory), an NCCL older than the GPU, a job that stalls after NCCL's set-up, and the process group's backend set on
the framework's own option (Windows' gloo)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.collectives import (cumem_host_without_peer, nccl_shared_memory_said,
                                                 one_gpu_works_several_not, silent_after_the_ibverbs_warning,
                                                 tests_built_without_mpi, tests_crawl, trtllm_peer_access)
from steadytune.doctor.rules.base import (_catalogue, _CONTAINED, Context, Diagnosis, _ahead_of, _lines_matching, _make, _restate,
                                          on_windows, rule, _text, _vendor)


def _container_paths(text: str) -> bool:
    """The job runs in a container: said, or seen in the paths of a container image (/opt/conda is the PyTorch and
    NGC images' Python, /workspace their work folder)."""
    return bool(_CONTAINED.search(text) or re.search(r"/opt/conda/lib/python|\bnvcr\.io/|/workspace/", text))


# a serving engine's own all-reduce kernel (vLLM's, SGLang's custom_all_reduce) copies over GPU peer access directly;
# NCCL_P2P_DISABLE does not reach it, the engine's own switch does
_CUSTOM_ALLREDUCE = re.compile(r"(?i)custom_?all_?reduce|CustomAllreduce")


def _custom_all_reduce(ctx: Context, errors: list, text: str) -> Optional[Diagnosis]:
    joined = _text(ctx)
    no_peer = re.search(r"(?i)peer access is not supported|hipErrorPeerAccess|cudaErrorPeerAccess", joined)
    tool = ctx.tool(errors)
    if not no_peer or not (_CUSTOM_ALLREDUCE.search(joined) or tool in ("vllm", "sglang")):
        return None
    name = {"sglang": "SGLang", "vllm": "vLLM"}.get(tool or "", "the engine")
    return _make("multi-gpu-transport", f"{name}'s own all-reduce needs GPU peer access these GPUs lack",
                 f"{name} runs tensor parallelism with its custom all-reduce kernel, which maps the other GPUs' memory "
                 "directly (peer access); these GPUs (consumer cards, or cards on separate PCIe roots) have none, so it "
                 "fails where NCCL would fall back",
                 "launch with --disable-custom-all-reduce (vLLM: --disable-custom-all-reduce / "
                 "disable_custom_all_reduce=True; SGLang: --disable-custom-all-reduce, or --enable-p2p-check so it "
                 "tests peer access first) so the all-reduce goes through NCCL; add NCCL_P2P_DISABLE=1 if NCCL then "
                 "hangs", [ctx.line_fact(errors[0])], errors)


def _split_model_garbage(ctx: Context) -> Optional[Diagnosis]:
    """Output that is gibberish only when a model is split over several GPUs: the copies between the GPUs (peer to
    peer over PCIe) arrive corrupted, with no error."""
    joined = _text(ctx)
    several = re.search(r"(?i)found ([2-9]) (?:ROCm|CUDA|HIP) devices|\b([2-9]) ?x ?(?:Instinct|Radeon|RTX|MI\d+)|"
                        r"--tensor-split|-ts \d|--split-mode (?:layer|row)", joined)
    garbage = _lines_matching(ctx, r"(?i)\b(?:gibberish|garbage|nonsense|garbled|random (?:tokens|characters))\b|乱码")
    tool = ctx.tool()
    if not (several and garbage) or tool not in ("llama.cpp", "ollama", None):
        return None
    return _make("multi-gpu-transport", "the copies between the GPUs arrive corrupted",
                 "the model is split over several GPUs and its activations cross between them by peer-to-peer copies; "
                 "where P2P over this PCIe path is broken (a kernel without the vendor's P2P patches, the IOMMU in "
                 "translation mode) they arrive wrong without an error, and the output turns to gibberish",
                 "build llama.cpp with -DGGML_CUDA_NO_PEER_COPY=ON (copies go through host memory), or confirm on one "
                 "GPU first (HIP_VISIBLE_DEVICES=0 / CUDA_VISIBLE_DEVICES=0, or --split-mode none); the platform fix "
                 "is iommu=pt on the kernel command line", [], garbage)


_NCCL_VERSION = re.compile(r"\bNCCL version (\d+)\.(\d+)\.(\d+)")
# the first NCCL release that runs each new NVIDIA generation's collectives (NCCL's release notes; the RTX 50
# series, sm_120, failed alltoall / sendrecv before 2.26.2)
_NCCL_FOR_ARCH = {"sm_120": (2, 26, 2), "sm_100": (2, 26, 2)}


def _nccl_before_the_gpu(ctx: Context, errors: list, joined: str) -> Optional[Diagnosis]:
    """NCCL older than the GPU: its kernels and tuning tables predate this generation, so collectives fail however the
    transport is set; a newer NCCL is the fix, not a transport variable."""
    found = _NCCL_VERSION.search(joined)
    if not found:
        return None
    version = tuple(int(x) for x in found.groups())
    for arch in ctx.sheet.machine_archs:
        need = _NCCL_FOR_ARCH.get(arch)
        if need and version < need:
            have, want = ".".join(map(str, version)), ".".join(map(str, need))
            return _make("arch-missing", f"NCCL {have} predates this GPU ({arch})",
                         f"NCCL {have} was released before this GPU generation ({arch}) was supported: its "
                         "collectives fail or need source patches on it; the transport is not the problem",
                         f"use NCCL {want} or newer: pip install -U \"nvidia-nccl-cu12>={want}\" (torch loads the "
                         f"pip NCCL), or build nccl and nccl-tests from the v{want} tag (make "
                         f"NVCC_GENCODE=\"-gencode=arch=compute_120,code=sm_120\")",
                         [ctx.line_fact(errors[0])], errors)
    return None


# a run over several GPUs, said: a launcher's process count, a count of cards
_SEVERAL_GPUS = re.compile(r"(?i)num_processes\W{1,3}[2-9]|--nproc_per_node[= ]?[2-9]|--num_processes[= ]?[2-9]|"
                           r"\b[2-9] ?x ?(?:RTX|GTX|RX|A\d+|H\d+|MI\d+)|\b[2-9] GPUs\b|multiple GPUs|multi[- ]?GPU")
# the user says the run works once peer-to-peer is off: the P2P path itself is what fails
_P2P_OFF_WORKS = re.compile(r"(?i)NCCL_P2P_DISABLE\s*=\s*1\b.{0,80}\b(?:works?|worked|runs?|ran|fine|solved|fix\w*|"
                            r"helps?|helped|no longer)|\b(?:works?|worked|runs?|ran|fine|solved|fix\w*|helps?|"
                            r"helped)\b.{0,80}NCCL_P2P_DISABLE\s*=?\s*1\b")
# NVLink SHARP (NVLS): NCCL's multicast over the NVSwitch, set up for 3+ GPUs of an NVSwitch machine (H100, H800,
# H200); its setup needs the fabric manager's multicast objects
_NVLS = re.compile(r"\bNVLS\b|transport/nvls\.cc")
_CUDA_INVALID = re.compile(r"(?i)Cuda failure (?:\d+ )?'?invalid argument")


def _nvlink_sharp(ctx: Context, errors: list, joined: str) -> Optional[Diagnosis]:
    """NCCL stops in its NVLS (NVLink SHARP) setup: a CUDA 'invalid argument' from nvls.cc is the multicast objects the
    fabric manager hands out (a fabric manager restarted under running GPUs, or not running); a hang whose last line
    is NVLS is the NVLS setup itself, which NCCL_NVLS_ENABLE=0 skips (NCCL's documented switch)."""
    if not _NVLS.search(joined):
        return None
    nvls_lines = _lines_matching(ctx, _NVLS.pattern)
    if _CUDA_INVALID.search(joined) and re.search(r"nvls\.cc", joined):
        return _make("driver", "the NVSwitch fabric manager's multicast is not available",
                     "NCCL's NVLink SHARP setup (transport/nvls.cc) gets 'invalid argument' from CUDA when it asks for "
                     "multicast memory: the NVSwitch fabric manager is not running, runs another version than the "
                     "driver, or was restarted while processes held the GPUs; 2 GPUs work because NVLS is used from 3",
                     "check systemctl status nvidia-fabricmanager (its version must equal the driver's, nvidia-smi -q "
                     "| grep -i fabric shows its state); restart it only with every GPU idle (stop the GPU jobs, "
                     "systemctl restart nvidia-fabricmanager, or reset the GPUs / reboot the node); until then "
                     "NCCL_NVLS_ENABLE=0 runs without NVLS", [ctx.line_fact(nvls_lines[0])], errors + nvls_lines)
    if re.search(r"(?i)\b(?:hangs?|hanging|stuck|freez\w*|stall\w*|never (?:finishes|returns))\b", joined):
        return _make("multi-gpu-transport", "NCCL hangs setting up NVLink SHARP (NVLS)",
                     "the last thing NCCL logs is its NVLS (NVLink SHARP multicast over the NVSwitch) setup, which it "
                     "uses from 3 GPUs up; that setup is what hangs (in a container it needs the fabric manager's "
                     "multicast and enough locked memory)",
                     "export NCCL_NVLS_ENABLE=0 (NCCL then uses ring/tree over NVLink, a little slower for large "
                     "all-reduces); to keep NVLS, check nvidia-fabricmanager is running at the driver's version and "
                     "start the container with --ulimit memlock=-1 --ipc=host", [ctx.line_fact(nvls_lines[0])],
                     errors + nvls_lines)
    return None


_TP_FLAG = r"--tensor-parallel-size|tensor_parallel_size|--tp-size|\s-tp\s+[2-9]"
_FAILS_SAID = re.compile(r"(?i)\b(?:error|bug|fails?|failed|failing|crash\w*|exception|does ?n.t work|not working)\b|报错|出错|失败")


def _tensor_parallel_fails(ctx: Context) -> Optional[Diagnosis]:
    """A serving engine that fails only when its tensor parallelism is on, said in words with no error line: its
    workers meet over /dev/shm and NCCL, so the engine's documented first checks (a container's shared memory, then
    peer-to-peer) are the likely reading."""
    said = [line for line in _lines_matching(ctx, _TP_FLAG + r"|(?i:multiple GPUs|multi[- ]?GPU|several GPUs)")
            if _FAILS_SAID.search(line.line)]
    if not said or not re.search(_TP_FLAG, _text(ctx)):
        return None
    return _make("multi-gpu-transport", "the engine fails once tensor parallelism spreads it over GPUs",
                 "with tensor parallelism the engine starts one worker per GPU; they exchange through /dev/shm "
                 "(64 MB in a default container) and NCCL (peer-to-peer between the GPUs), which is what fails when "
                 "one GPU works and several do not",
                 "in docker start the container with --ipc=host (or --shm-size=16g), as vLLM's docker docs say; on "
                 "consumer GPUs add NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce; rerun with NCCL_DEBUG=INFO to "
                 "see the step that fails", [], said, confirmed=False)


_NCCL_SET_UP = re.compile(r"\bNCCL INFO\b.{0,200}\bInit COMPLETE\b|\bNCCL INFO Channel \d+\s*:.{0,60}\bvia\b")
_STALL_SAID = re.compile(r"(?i)\b(?:stall\w*|hangs?|hanging|hung|stuck|freez\w*|deadlock\w*)\b|卡住|卡死|没有反应")


def _stalls_after_nccl_setup(ctx: Context) -> Optional[Diagnosis]:
    """NCCL's own log says it connected the GPUs (Init COMPLETE, the channels and their transport), and the user says
    the run then stalls: the setup went through and the first transfers between the GPUs never arrive. On a
    workstation or server that is the PCIe peer path: the IOMMU (VT-d / AMD-Vi) or ACS on the bridges redirecting the
    GPUs' peer writes, NCCL's documented first check for a hang."""
    text = _text(ctx)
    set_up = _lines_matching(ctx, _NCCL_SET_UP.pattern)
    if not set_up or not _STALL_SAID.search(text):
        return None
    if not (_SEVERAL_GPUS.search(text) or re.search(r"(?i)tensor[ _-]?parallel|\bnranks [2-9]|x ?[2-9] GPUs?\b", text)):
        return None
    return _make("multi-gpu-transport", "the GPUs' first transfers stall after NCCL set them up",
                 "NCCL connected the GPUs (its log shows the channels and Init COMPLETE), then the run stalls: the "
                 "transfers between the GPUs never arrive, which on a workstation or server is the IOMMU (VT-d / "
                 "AMD-Vi) or PCIe ACS redirecting their peer-to-peer writes through the CPU",
                 "confirm with NCCL_P2P_DISABLE=1 (it runs, slower); then turn the IOMMU off or to pass-through "
                 "(intel_iommu=off or iommu=pt on the kernel command line, or VT-d off in the BIOS) and ACS off (BIOS, "
                 "or setpci per bridge; sudo lspci -vvv | grep -i acsctl shows SrcValid+ where it is on), as NCCL's "
                 "troubleshooting guide says; then check with nccl-tests' all_reduce_perf; to train meanwhile, "
                 f"{_gloo_switch(text)} (gloo moves the tensors through host memory, never GPU to GPU)", [], set_up[:1],
                 confirmed=False)


# torch.distributed's gloo backend needs no peer path between the GPUs (it copies through the host): where NCCL's
# transfers stall it runs, slower, which both confirms the transport and lets the job train (Lightning's DDPStrategy
# takes process_group_backend="gloo": Lightning-AI/pytorch-lightning#16614, where that let 8 GPUs train)
def _gloo_switch(text: str) -> str:
    if re.search(r"(?i)lightning\b|\bLightningModule\b", text):
        return ("switch DDP to the gloo backend: Trainer(strategy=DDPStrategy(process_group_backend=\"gloo\")) "
                "(from lightning.pytorch.strategies import DDPStrategy)")
    if re.search(r"(?i)\baccelerate\b|\bdeepspeed\b", text):
        return "start torch.distributed with the gloo backend (init_process_group(backend=\"gloo\"))"
    return "switch the process group to the gloo backend: torch.distributed.init_process_group(backend=\"gloo\")"


# (ASCII edges: "提示bus error" has a Chinese character, a word character to re, before "bus")
_BUS_ERROR_SHM = re.compile(r"(?i)(?<![a-z])bus error\b.{0,80}(?:(?<![a-z])shm\b|shared mem\w*|/dev/shm)|"
                            r"(?:(?<![a-z])shm\b|shared mem\w*|/dev/shm).{0,80}(?<![a-z])bus error\b|共享内存.{0,20}不足")
# more than one GPU or node said, or the user saying one of them works (单机 / 单卡 能运行: works on one machine)
_SEVERAL_SAID = re.compile(r"(?i)多卡|多机|多节点|单机能|单卡能|multi[- ]?node|--nnodes|torchrun|deepspeed|"
                           r"\b(?:works|runs) on (?:one|a single) (?:GPU|node|machine)\b")


def _shared_memory_said(ctx: Context) -> Optional[Diagnosis]:
    """A bus error with shared memory named, said in words, in a run over several GPUs or nodes: the ranks (and their
    data loaders) exchange through /dev/shm, which a container gives 64 MB by default."""
    said = _lines_matching(ctx, _BUS_ERROR_SHM.pattern)
    text = _text(ctx)
    if not said or not (_SEVERAL_SAID.search(text) or _SEVERAL_GPUS.search(text)):
        return None
    return _make("multi-gpu-transport", "shared memory (/dev/shm) is too small for the distributed run",
                 "the ranks and their data-loader workers pass tensors through /dev/shm; in a container it is 64 MB "
                 "unless widened, so the run dies with a bus error while one process fits",
                 "start the container with --shm-size=16g (or --ipc=host; compose: shm_size: 16gb), on every node; "
                 "on the host check df -h /dev/shm; lower the data loader's workers (dataloader_num_workers, "
                 "preprocessing_num_workers) if it cannot grow", [], said[:1], confirmed=False)


# each framework's own option for the process group's backend, which the framework passes to init_process_group (a
# variable or a torch call around it does not reach it): Lightning's DDPStrategy(process_group_backend=) (1.6+; its
# PL_TORCH_DISTRIBUTED_BACKEND variable was deprecated in 1.6 for removal in 1.8), accelerate's InitProcessGroupKwargs,
# transformers' TrainingArguments.ddp_backend, deepspeed.init_distributed(dist_backend=), mmengine's env_cfg.dist_cfg,
# fairseq's --distributed-backend
_BACKEND_OPTIONS = (
    ("Lightning", r"(?i)pytorch[-_ ]lightning|\blightning\b|\bPL_TORCH_\w+|\bLightningModule\b|\bpl\.Trainer\b",
     "Trainer(strategy=DDPStrategy(process_group_backend=\"gloo\")) (from lightning.pytorch.strategies import "
     "DDPStrategy; Fabric takes the same strategy)"),
    ("accelerate", r"(?i)\baccelerate\b",
     "Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend=\"gloo\")]) (from accelerate.utils)"),
    ("transformers", r"\bTrainingArguments\b|--ddp_backend|\bSFTConfig\b|\btransformers\b",
     "TrainingArguments(ddp_backend=\"gloo\") (--ddp_backend gloo)"),
    ("DeepSpeed", r"(?i)\bdeepspeed\b", "deepspeed.init_distributed(dist_backend=\"gloo\")"),
    ("mmengine", r"(?i)\bmm(?:engine|cv|det|seg|pose|action)\b|\bdist_train\.sh\b",
     "env_cfg = dict(dist_cfg=dict(backend=\"gloo\")) in the config (mmcv 1.x configs: dist_params = "
     "dict(backend=\"gloo\"))"),
    ("fairseq", r"(?i)\bfairseq\b", "--distributed-backend gloo"),
)
_LIGHTNING_VERSION = re.compile(r"(?i)\b(?:pytorch[-_ ])?lightning\W{1,4}v?(\d+)\.(\d+)")


def _backend_option(text: str) -> Optional[tuple[str, str]]:
    """The framework the paste runs and its own switch for the backend, or None for plain torch."""
    return next(((name, option) for name, named, option in _BACKEND_OPTIONS if re.search(named, text)), None)


# the backend asked for in words ("change the distributed backend to gloo") or by the variables users try
_BACKEND_ASKED = re.compile(r"(?i)\bgloo\b.{0,60}\b(?:backend|windows)\b|\b(?:backend|windows)\b.{0,60}\bgloo\b|"
                            r"\bPL_TORCH_DISTRIBUTED_BACKEND\b|\bNCCL\b.{0,40}\b(?:not available|unavailable|not "
                            r"supported)\b.{0,30}\bwindows\b")


def _backend_asked(ctx: Context) -> Optional[Diagnosis]:
    """A distributed run whose backend the user tries to set to gloo (Windows' torch has no NCCL), with no error line:
    the framework creates the process group itself and takes the backend only from its own option; Lightning from 1.8
    no longer reads PL_TORCH_DISTRIBUTED_BACKEND at all."""
    text = _text(ctx)
    said = _lines_matching(ctx, _BACKEND_ASKED)
    if not said:
        return None
    windows = on_windows(ctx, text)
    variable = re.search(r"\bPL_TORCH_DISTRIBUTED_BACKEND\b", text)
    if not windows and not variable:
        return None
    own = _backend_option(text)
    version = _LIGHTNING_VERSION.search(text)
    ignored, release = "", ""
    if variable:
        release = f"Lightning {version.group(1)}.{version.group(2)}" if version else "current Lightning"
        ignored = (f"; {release} does not read PL_TORCH_DISTRIBUTED_BACKEND (deprecated in 1.6, dropped in 1.8), so "
                   "setting it changes nothing")
        own = own or next((n, o) for n, _, o in _BACKEND_OPTIONS if n == "Lightning")
    fix = ((f"set it on {own[0]}'s own option: {own[1]}" + (f"; {release} does not read PL_TORCH_DISTRIBUTED_BACKEND, "
                                                            "so unset it" if variable else "") if own else
            "pass it where the process group is created: torch.distributed.init_process_group(backend=\"gloo\")") +
           ("; on Windows NCCL does not exist, so gloo is the backend there (or run under Linux / WSL 2 for NCCL)"
            if windows else ""))
    return _make("multi-gpu-transport", "the process group's backend is chosen on the framework, not by a variable",
                 ("torch on Windows is built without NCCL, so a distributed run there needs the gloo backend; " if windows
                  else "") + "the framework starts the process group itself and takes its backend only from its own "
                 "option" + ignored, fix, [], said[:1])


# the generic lines NCCL and torch print around NCCL's own reason (which follows as "Last error:")
_NCCL_WRAPPER = re.compile(r"(?i)NCCL error in:|\bnccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage)Error\b|"
                           r"unhandled (?:system|cuda) error|remote process exited or there was a network error|"
                           r"Call to CUDA function failed|^\W*Last error\W*$")


@rule("multi-gpu-transport")
def multi_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a collective that fails, times out or hangs (NCCL/RCCL's own lines, a watchdog, rccl-tests, a
    launcher that never gets past the first step), and the facts that pick the transport's fix: Windows (no NCCL),
    a container's /dev/shm, the socket interfaces NCCL listed or the nodes name, IOMMU faults in dmesg, and whether
    the GPUs are consumer cards (RDNA, GeForce: no usable PCIe peer-to-peer) or datacenter ones (iommu=pt)."""
    errors = ctx.of("multi-gpu-transport")
    # NCCL's and torch's wrappers ("ncclInternalError", "unhandled cuda error", "NCCL error in:") around a "Last
    # error:" line whose catalogue entry settles the cause (a full GPU, a refused socket): that entry answers
    owned = [e for e in ctx.errors if e.catalogue is not None and e.catalogue.entry.own]
    if owned and errors and all(_NCCL_WRAPPER.search(e.line) for e in errors):
        return None
    rocm = re.search(r"(?i)\brocm[ -]?(\d+)\.(\d+)", _text(ctx))
    perf = [e for e in errors if re.search(r"_perf\b", e.line)]
    if perf and rocm and (int(rocm.group(1)), int(rocm.group(2))) < (5, 7):
        return _make("multi-gpu-transport", f"RCCL on ROCm {rocm.group(1)}.{rocm.group(2)} needs fine-grained PCIe memory",
                     "before ROCm 5.7 RCCL's peer buffers need fine-grained memory over PCIe; without it the "
                     "collectives that exchange between every pair fail allocating",
                     "export HSA_FORCE_FINE_GRAIN_PCIE=1 for the run (or move to ROCm 5.7 or newer, where it is not "
                     "needed)", [], perf)
    if not errors and ctx.of("platform-bios") and re.search(r"(?i)\b(?:NCCL|RCCL)\b", "\n".join(ctx.sheet.lines)):
        errors = [e for e in ctx.errors if e.family is None and re.search(r"(?i)\b(?:NCCL|RCCL)\b", e.line)]
    apart = tests_built_without_mpi(ctx) or trtllm_peer_access(ctx) or tests_crawl(ctx)
    if apart is not None:
        return apart
    if not errors:
        return (_backend_asked(ctx) or _split_model_garbage(ctx) or _stalls_after_nccl_setup(ctx) or _shared_memory_said(ctx) or
                _tensor_parallel_fails(ctx) or one_gpu_works_several_not(ctx) or nccl_shared_memory_said(ctx))
    text = " ".join(e.line for e in errors)
    joined = "\n".join(ctx.sheet.lines)
    evidence = [ctx.line_fact(errors[0])]
    too_old = _nccl_before_the_gpu(ctx, errors, joined)
    if too_old is not None:
        return too_old
    quiet = cumem_host_without_peer(ctx, errors) or silent_after_the_ibverbs_warning(ctx, errors)
    if quiet is not None:
        return quiet
    custom = _custom_all_reduce(ctx, errors, text)
    if custom is not None:
        return custom
    nvls = _nvlink_sharp(ctx, errors, joined)
    if nvls is not None:
        return nvls
    if re.search(r"(?i)doesn.t have NCCL", text) or (re.search(r"(?i)\bNCCL\b", text) and ctx.sheet.is_windows):
        own = _backend_option(joined)
        gloo = ("use the gloo backend: " + (f"{own[1]} ({own[0]}'s own option), or " if own else "") +
                "init_process_group(backend=\"gloo\") (Lightning: DDPStrategy(process_group_backend=\"gloo\"); a "
                "config's dist backend: gloo), or run under Linux / WSL 2 for NCCL")
        if re.search(r"(?i)\baccelerate\b", joined) and not _SEVERAL_GPUS.search(joined):
            # accelerate starts a process group only because its saved config says multi-GPU; one GPU needs none
            gloo = ("on one GPU no process group is needed: rerun `accelerate config` and answer \"No distributed "
                    "training\" (or accelerate launch --num_processes 1); for several GPUs on Windows, " + gloo)
        return _make("multi-gpu-transport", "this torch has no NCCL (Windows)",
                     "torch on Windows (and macOS) is built without NCCL, so the nccl backend does not exist",
                     gloo, evidence, errors)
    if re.search(r"(?i)shm_open failed\s*:\s*Permission denied|/dev/shm\S*:? Permission denied", text):
        return _make("multi-gpu-transport", "the user may not create shared memory segments",
                     "NCCL/RCCL create their buffers in /dev/shm, and this user may not create files there",
                     "fix the permissions of /dev/shm: sudo chmod 1777 /dev/shm (it must be world-writable with the "
                     "sticky bit; a container: --ipc=host)", evidence, errors)
    ifaces = ctx.sheet.of("nccl_iface")
    listed = [f.value for f in ifaces if f.detail == "listed"]
    virtual = [i for i in listed if re.match(r"(?:br-|veth|docker|virbr|lo$|cni|flannel|tun|tap)", i)]
    real = [i for i in listed if i not in virtual]
    named = list(dict.fromkeys(f.value for f in ifaces if f.detail == "named"))
    nic = re.search(r"\b((?:enp|ens|eno|eth|ib|bond|en)\w*\d\w*)\b", joined)
    if re.search(r"(?i)no socket interface found", text) and nic:
        return _make("multi-gpu-transport", "NCCL finds no interface by the name it was given",
                     f"NCCL_SOCKET_IFNAME does not match an interface NCCL can use as written; {nic.group(1)} is the "
                     "one that carries the nodes' addresses",
                     f"export NCCL_SOCKET_IFNAME={nic.group(1)} (the bare name, no '=' prefix or spaces) on every node, "
                     f"and GLOO_SOCKET_IFNAME={nic.group(1)}", evidence, errors)
    if len(named) > 1 or (virtual and real):
        value = ",".join(named) if len(named) > 1 else real[0]
        why = ("the nodes name their network interfaces differently, and NCCL picks the first one it finds"
               if len(named) > 1 else f"NCCL also tries container bridges and virtual links ({', '.join(virtual[:3])}) "
               "that do not reach the other node")
        return _make("multi-gpu-transport", "NCCL's sockets take the wrong network interface", why,
                     f"export NCCL_SOCKET_IFNAME={value} on every node (GLOO_SOCKET_IFNAME too, for torch's gloo)",
                     evidence + ifaces[:2], errors)
    if re.search(r"(?i)\bP2P\b.{0,60}\bslower\b|slower than SHM", text):
        return _make("multi-gpu-transport", "peer-to-peer transfers crawl on this platform",
                     "RCCL/NCCL pick P2P between the GPUs, but P2P across these PCIe root ports is broken or "
                     "throttled", "export NCCL_P2P_DISABLE=1 (the transfers go through host shared memory); check ACS "
                     "and the IOMMU (iommu=pt) for a real fix", evidence, errors)
    if re.search(r"(?i)\bibv_reg_\w+.{0,60}Cannot allocate memory", text):
        return _make("multi-gpu-transport", "RDMA cannot pin NCCL's buffers: the locked-memory limit is too small",
                     "InfiniBand / RoCE registers (pins) NCCL's buffers; the process's locked-memory limit (ulimit -l, "
                     "often 64 KiB or 8 MiB by default) is smaller than they need, so registration fails with "
                     "\"Cannot allocate memory\"",
                     "raise the limit: ulimit -l unlimited for the run, and for every login / mpirun-started process "
                     "'* soft memlock unlimited' and '* hard memlock unlimited' in /etc/security/limits.conf (log in "
                     "again; check `ulimit -l` under mpirun / srun); a container: --ulimit memlock=-1; a NCCL_BUFFSIZE "
                     "set very large asks for more pinned memory too (unset it)", evidence, errors)
    if re.search(r"(?i)completion (?:from peer \S+ )?with (?:error |status=)(?:\w+\()?12\b|vendor[ _]err\W?129\b", text):
        roce = re.search(r"(?i)\bRoCE\b|link_layer:\s*Ethernet", joined)
        return _make("multi-gpu-transport", "RDMA transfers between the nodes time out (IB error 12)",
                     "error 12 (vendor err 129) is a transport retry timeout: the RDMA packets never reach the other "
                     "HCA; on RoCE the usual reason is the default GID index, which picks a RoCE v1 or link-local "
                     "address the other node does not route" + (" (these ports are RoCE / Ethernet)" if roce else ""),
                     "on RoCE export NCCL_IB_GID_INDEX=3 (the RoCE v2 IPv4 GID: show_gids lists each port's; use "
                     "the index whose type is v2 with the node's IP) on every node; check PCIe ACS is off; where the "
                     "nodes have no working RDMA path at all, NCCL_IB_DISABLE=1 (sockets) with "
                     "NCCL_SOCKET_IFNAME=<the shared interface>", evidence, errors)
    if re.search(r"(?i)NET/IB\b|\bibv_\w+|\bmlx5|InfiniBand|\bRoCE\b", text):
        return _make("multi-gpu-transport", "NCCL's InfiniBand / RoCE transport fails",
                     "NCCL uses the RDMA network (IB verbs) between the nodes whenever it finds an HCA; a port that is "
                     "down, an HCA the nodes do not share, or a container without the RDMA devices fails it",
                     "where the nodes have no working InfiniBand / RoCE between them: export NCCL_IB_DISABLE=1 (sockets "
                     "instead) with NCCL_SOCKET_IFNAME=<the shared interface>; else pick the working HCA and port "
                     "(NCCL_IB_HCA=mlx5_0:1; ibstat shows which are Active), and in a container pass --device "
                     "/dev/infiniband --cap-add IPC_LOCK; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET shows the choice",
                     evidence, errors)
    if re.search(r"(?i)alltoall", joined) and re.search(r"(?i)XGMI", joined):
        return _make("multi-gpu-transport", "alltoall hangs without XGMI",
                     "without XGMI links the peer-to-peer channels of alltoall(v) over PCIe deadlock",
                     "export NCCL_MAX_P2P_NCHANNELS=2 (RCCL before ROCm 6.0), or update RCCL", evidence, errors)
    if re.search(r"(?i)shared memory|/dev/shm|shm", text):
        return _make("multi-gpu-transport", "shared memory is too small for the GPUs' transport",
                     "RCCL/NCCL pass data between processes through /dev/shm, which is 64 MB in a default container",
                     "docker run --ipc=host (or --shm-size=16g): /dev/shm must hold NCCL's segments",
                     [ctx.line_fact(errors[0])], errors)
    iommu = [e for e in ctx.of("platform-bios") if re.search(r"(?i)AMD-Vi|IO_PAGE_FAULT|DMAR|iommu", e.line)]
    if iommu:   # the IOMMU faulting on the GPUs' DMA is why their peer-to-peer traffic fails
        diagnosis = _make("multi-gpu-transport", "the IOMMU blocks the GPUs' peer-to-peer traffic",
                          "the IOMMU in translation mode faults on the DMA between the GPUs (the fault is in dmesg), so "
                          "the collective fails or hangs", "add iommu=pt (amd_iommu=on iommu=pt on AMD CPUs) to "
                          "GRUB_CMDLINE_LINUX_DEFAULT, sudo update-grub, reboot; until then NCCL_P2P_DISABLE=1 runs "
                          "without peer-to-peer", evidence + [ctx.line_fact(iommu[0])], errors + iommu)
        return _ahead_of(diagnosis, "platform-bios")
    rendezvous = re.search(r"(?i)\[c10d\]|client socket has timed out|TCPStore|rendezvous|MASTER_ADDR", text)
    if (_CONTAINED.search(joined) or ctx.sheet.has("platform", "container")) and not rendezvous and \
            not re.search(r"--ipc[= ]host|--shm-size", joined) and not ctx.sheet.is_windows and _catalogue(errors) is None:
        # (a message the catalogue knows names its own cause, container or not)
        # a container's /dev/shm is 64 MB unless the run widens it: the first thing NCCL/RCCL outgrow there
        return _make("multi-gpu-transport", "the container's shared memory is too small for NCCL",
                     "the GPUs' processes (vLLM's tensor-parallel workers, torchrun's ranks) exchange through "
                     "/dev/shm, which a default container gives only 64 MB, so NCCL/RCCL fail or hang while connecting",
                     "start the container with --shm-size=16g (or --ipc=host; compose: shm_size: 16gb / ipc: host); "
                     "if it still fails, rerun with NCCL_DEBUG=INFO and try NCCL_P2P_DISABLE=1", evidence, errors)
    if rendezvous:
        return _make("multi-gpu-transport", "the processes cannot reach the rendezvous address",
                     "torch's launcher could not connect to MASTER_ADDR:MASTER_PORT (a firewall, an address the other "
                     "node cannot route to, or a socket on the wrong interface)",
                     "check from every node: nc -zv <MASTER_ADDR> <MASTER_PORT>; open the port in the firewall; set "
                     "MASTER_ADDR to the address on the shared network and NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to "
                     "that interface (ip -br addr)", evidence, errors)
    if re.search(r"(?i)remote process exited or there was a network error|\bncclRemoteError\b|"
                 r"socketProgress\w*:.{0,80}(?:Connection reset by peer|failed)", text):
        # NCCL's own words for a peer that vanished: a rank that died first, or the network between the nodes
        return _make("multi-gpu-transport", "NCCL lost its connection to another rank",
                     "NCCL reports a remote error when the connection to another rank drops: that rank died first "
                     "(its own log's first error is the cause), or the network between the nodes failed (an "
                     "InfiniBand port down or flapping, a socket on an interface the other node cannot reach)",
                     "look first for an earlier error on the other ranks (an out-of-memory, a crash); if every rank "
                     "was alive, test the network between the nodes: on InfiniBand check each node's ports (ibstat: "
                     "State Active, same rate; ibv_devinfo) and rerun with NCCL_IB_DISABLE=1 to confirm, repairing or "
                     "leaving out the node whose IB fails; over sockets export NCCL_SOCKET_IFNAME=<the interface that "
                     "reaches the other nodes> (ip -br addr) on every node, GLOO_SOCKET_IFNAME too; NCCL_DEBUG=INFO "
                     "NCCL_DEBUG_SUBSYS=NET,INIT shows the transport and interface", evidence, errors)
    nodes = re.search(r"(?i)\b(?:[2-9]|two|several|multiple) (?:machines|nodes|servers|hosts)\b|--nnodes[= ]?[2-9]", joined)
    if nodes and re.search(r"(?i)unhandled system error|socket|connect|timed? ?out", text) and \
            not re.search(r"(?i)/dev/shm|shm", text):
        return _make("multi-gpu-transport", "the nodes do not reach each other on the interface NCCL picked",
                     "across machines NCCL opens sockets on the first interface it finds; a firewall or an interface "
                     "the other node cannot route to fails the setup (\"unhandled system error\")",
                     "check that the nodes reach each other (ping, a firewall open between them), then export "
                     "NCCL_SOCKET_IFNAME=<the interface on the shared network> (ip -br addr) on every node, "
                     "GLOO_SOCKET_IFNAME too; NCCL_DEBUG=INFO shows the interface it used" +
                     # NCCL prefers an IB/RoCE device wherever it finds one (an RDMA NIC present but not cabled or
                     # configured between these nodes); NCCL_IB_DISABLE=1 makes it use IP sockets (NCCL's
                     # environment variables docs, NCCL_IB_DISABLE). Moot where its log shows it chose sockets.
                     ("; where the nodes have no working InfiniBand / RoCE between them, export NCCL_IB_DISABLE=1 on "
                      "every node (NCCL tries an RDMA device it finds before sockets)"
                      if not re.search(r"NET/Socket|NET/IB\s*:\s*No device found", joined) else "") +
                     ("; each node in a container (docker run without host networking gives it a private bridge "
                      "address the other node cannot reach): run the containers with --network=host"
                      if _container_paths(joined) else ""), evidence, errors)
    if re.search(r"(?i)unhandled system error", text) and not _CONTAINED.search(_text(ctx)) and \
            not ctx.sheet.has("platform", "container"):
        # the paste does not say where it ran: a container's small /dev/shm (the common cause) or, on the host, the
        # transport between the GPUs; both fixes, the container's first
        visible = "HIP_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
        return _make("multi-gpu-transport", "NCCL's setup between the GPUs fails",
                     "\"unhandled system error\" is NCCL failing a system call while it connects the GPUs: in a "
                     "container, its 64 MB /dev/shm; on the host, shared memory or peer-to-peer between the GPUs",
                     "in a container: docker run --ipc=host (or --shm-size=16g); on the host: run on one GPU to confirm "
                     f"({visible}=0 python train.py ... works), then rerun with NCCL_DEBUG=INFO to see the failing "
                     "call, and try NCCL_P2P_DISABLE=1, then NCCL_SHM_DISABLE=1", evidence, errors)
    if _P2P_OFF_WORKS.search(joined):
        return _make("multi-gpu-transport", "peer-to-peer between the GPUs is broken on this platform",
                     "the run works once NCCL_P2P_DISABLE=1 sends the transfers through host memory: the GPUs' direct "
                     "PCIe peer-to-peer path is what hangs, and on a server that is PCIe ACS on the switches or the "
                     "IOMMU (VT-d / AMD-Vi) redirecting every peer write to the CPU",
                     "NCCL_P2P_DISABLE=1 is safe (it costs bandwidth only, results are the same); to get P2P back, "
                     "turn ACS off on the PCIe switches (BIOS, or setpci per bridge: sudo lspci -vvv | grep -i acsctl "
                     "shows SrcValid+ where it is on) and boot with iommu=pt (or VT-d off in the BIOS), then check "
                     "with nccl-tests' all_reduce_perf", evidence, errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("multi-gpu-transport", hit, errors)
    consumer = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"gfx1[0-2]\w+|sm_(?:75|86|89|120)", a)]
    named = " ".join(f.value for f in ctx.sheet.of("gpu"))
    tests_hang = re.search(r"(?i)\b(?:nccl|rccl)[- _]?tests?\b|\ball_reduce_perf\b", joined) and \
        re.search(r"(?i)\b(?:stall\w*|hangs?|hanging|stuck|freez\w*|deadlock\w*)\b", joined)
    if tests_hang and ctx.sheet.machine_archs and not consumer and _vendor(ctx) != "amd":
        # (on AMD GPUs RCCL's documented first requirement is iommu=pt: the fallback below says it)
        # the collective test itself hangs on a server's GPUs: PCIe ACS sends every peer-to-peer write up to the root
        # complex, where it stalls (NCCL's documented first check for a hang on a PCIe server)
        diagnosis = _make("platform-bios", "PCIe ACS blocks the GPUs' peer-to-peer traffic",
                          "on a server whose GPUs talk over PCIe switches, Access Control Services (ACS) on the "
                          "bridges redirect peer-to-peer writes to the CPU's root complex, and NCCL/RCCL's P2P "
                          "transfers stall: the collective hangs",
                          "check the bridges: sudo lspci -vvv | grep -i acsctl (SrcValid+ means ACS is on); disable ACS "
                          "in the BIOS (PCIe ACS control / 'ACS Enable' off) or per bridge with setpci (setpci -s "
                          "<bridge> ECAP_ACS+0x6.w=0000); confirm first with NCCL_P2P_DISABLE=1 (it runs, slower)",
                          evidence, errors)
        return diagnosis
    if set(consumer) == {"sm_120"} and not _NCCL_VERSION.search(joined) and not any(
            re.match(r"2\.(?:[7-9]|\d\d)\b", f.value) for f in ctx.sheet.of("torch")):
        return None   # Blackwell cards with no NCCL or torch release said: arch/nccl.py's reading (too old for sm_120)
    # the workstation cards (RTX A6000, RTX 5000 / 5880 / 6000 Ada, RTX PRO, Radeon PRO W7x00) share a consumer arch
    # but not its missing peer path
    if consumer and not re.search(r"(?i)\b(?:A100|H100|H200|L40|A40|A6000|RTX A|RTX PRO|W7\d00|MI\d+)|"
                                  r"\bRTX [2-6]\d{3} (?:Ada|PRO)\b", named):
        return _make("multi-gpu-transport", "consumer GPUs without working peer-to-peer",
                     f"these are consumer cards ({', '.join(dict.fromkeys(consumer))}): PCIe peer-to-peer between them "
                     "is missing or broken on desktop boards, and NCCL/RCCL hang or fail when they pick it",
                     "export NCCL_P2P_DISABLE=1 (the transfers go through host memory); if it still hangs, add iommu=pt "
                     "to the kernel command line; NCCL_DEBUG=INFO shows the transport it picked" +
                     ("; vLLM: also --disable-custom-all-reduce (its own all-reduce uses P2P too)"
                      if ctx.tool(errors) == "vllm" else ""), evidence, errors)
    return _make("multi-gpu-transport", "the GPUs cannot reach each other",
                 "peer-to-peer transfers between the GPUs fail or hang (the IOMMU in translation mode, PCIe ACS, or "
                 "a platform without P2P)", "rerun with NCCL_DEBUG=INFO (the line before the failure names the "
                 "transport: P2P, SHM, NET); confirm with NCCL_P2P_DISABLE=1 (slower, but it runs), then add iommu=pt "
                 "to the kernel command line and turn ACS off in the BIOS" +
                 (f"; to train meanwhile, {_gloo_switch(joined)}" if _STALL_SAID.search(joined) else ""),
                 [ctx.line_fact(errors[0])], errors)
