"""Training on several GPUs: everything train.py does differently when there is more than one process, or sharding.

Modules:
    launch           `steadytune train --nproc N`, `--nnodes N --node-rank R --master-addr HOST` and LLaMA-Factory's
                     launch variables: one launch plan, run by torch's elastic agent (static or c10d rendezvous,
                     restarts, each node's logs); the several-GPUs hint
    store_probe      before a node joins: whether torch's rendezvous store answers at --master-addr:--master-port (or
                     another service holds the port), asked by torch's own client in a child with a deadline
    ray_launch       LLaMA-Factory's USE_RAY=1: the run's ranks as Ray actors in one placement group, each running
                     the same `steadytune train` a torchrun rank runs
    nodes            several nodes seen from one process: the layout, one output folder on shared storage, the
                     all-reduce measured at start, an elastic restart continuing its launch's run, a lost peer
    sharding         which sharding (none, DDP, DeepSpeed ZeRO, FSDP2) and why; the Accelerator for it; the per-sharding
                     steps of the loop (accumulating without a sync) and of checkpoints (gather, scatter)
    deepspeed_config `deepspeed: FILE.json`: read, check every key (deepspeed_keys: DeepSpeed's key table), fill "auto"
    fsdp_config      `fsdp` / `fsdp_config` / `fsdp_version` -> Accelerate's FSDP2 plugin
    state            full weights and optimizer state gathered from / scattered to FSDP2 and DeepSpeed ranks
    world_resume     resuming on another number of processes: the same step batch, the same data position
    restore          resuming a run: which checkpoints it may use (damaged, another run's), the newest that loads
                     put back, through the shards where the run is sharded, or a fresh state (train's restore phase)
    watchdog         the hang watchdog: heartbeats, stacks and NCCL/RCCL state to hang-rank-K.txt, a clear exit

Accelerate brings DDP, FSDP2 and DeepSpeed; torch.distributed.run starts the processes; DeepSpeed's fragment API and
torch.distributed.checkpoint's state-dict API gather and scatter sharded state.
"""
