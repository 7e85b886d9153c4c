"""The keys a DeepSpeed JSON config may hold: one table, read by deepspeed_config.py to name unknown and misspelled
keys before any weights load.

Source: DeepSpeed 0.19.8 (the version steadytune is tested with): the top-level keys are the ones
`deepspeed.runtime.config.DeepSpeedConfig` reads (`runtime/constants.py`, `runtime/config.py`), plus the blocks read by
other modules (`activation_checkpointing`, `flops_profiler`, `aio`, `autotuning`, `optimizer`, `scheduler`); the keys
of a section are the fields (and aliases) of its pydantic model (`runtime/zero/config.py` DeepSpeedZeroConfig,
`runtime/zero/offload_config.py`, `runtime/precision_config.py`, `monitor/config.py`, `comm/config.py`,
`runtime/tensor_parallel/config.py`, `compile/config.py`) or the constants its reader uses. The user-facing
reference is https://www.deepspeed.ai/docs/config-json/. tests/test_deepspeed_config.py compares this table with the
installed DeepSpeed's own models when deepspeed is installed, so a new release that adds keys shows up as a failing test.

How DeepSpeed itself treats a key it does not know: inside a section backed by a pydantic model (zero_optimization,
fp16, bf16, offload_*, tensorboard, ...) it raises `Extra inputs are not permitted` when the engine starts, after the
model has loaded (older releases ignored such keys); at the top level, and inside the blocks read with plain lookups,
it ignores the key without a word. Keys starting with "_" are comments (LLaMA-Factory's files use "_comment").
"""

from __future__ import annotations

DEEPSPEED_VERSION = "0.19.8"

# section path -> its keys; None marks a section whose content is free-form (the optimizer's params, ...) or too
# large to list here (data_efficiency, compression_training, autotuning): those are not checked below the top.
SECTIONS: dict[str, frozenset[str] | None] = {
    "": frozenset({
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
        "managed_gradient_accumulation", "steps_per_print", "dump_state", "disable_python_gc", "disable_allgather",
        "communication_data_type", "seq_parallel_communication_data_type", "prescale_gradients",
        "gradient_predivide_factor", "gradient_allreduce_op", "sparse_gradients", "gradient_clipping",
        "zero_optimization", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "fp16", "bf16",
        "bfloat16", "amp", "torch_autocast", "optimizer", "scheduler", "activation_checkpointing", "flops_profiler",
        "aio", "autotuning", "wall_clock_breakdown", "memory_breakdown", "tensorboard", "wandb", "csv_monitor",
        "comet", "comms_logger", "timers", "checkpoint", "data_types", "dataloader_drop_last", "data_efficiency",
        "compression_training", "quantize_training", "weight_quantization", "pipeline", "tensor_parallel",
        "expert_parallel", "use_data_before_expert_parallelism", "hybrid_engine", "compile", "nebula",
        "datastates_ckpt", "vocabulary_size", "log_level",
    }),
    "zero_optimization": frozenset({
        "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
        "allgather_partitions", "allgather_bucket_size", "overlap_comm", "compute_grad_norm",
        "load_from_fp32_weights", "elastic_checkpoint", "offload_param", "offload_optimizer", "zenflow",
        "sub_group_size", "cpu_offload_param", "cpu_offload_use_pin_memory", "cpu_offload",
        # ZeRO-3 settings: each has a stage3_ spelling (the alias configs use) and a plain one.
        "prefetch_bucket_size", "stage3_prefetch_bucket_size",
        "param_persistence_threshold", "stage3_param_persistence_threshold",
        "model_persistence_threshold", "stage3_model_persistence_threshold",
        "max_live_parameters", "stage3_max_live_parameters",
        "max_reuse_distance", "stage3_max_reuse_distance",
        "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save",
        "module_granularity_threshold", "stage3_module_granularity_threshold",
        "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params",
        "allgather_sequential", "stage3_allgather_sequential",
        "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients", "parameter_alignment",
        "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients", "memory_efficient_linear", "pipeline_loading_checkpoint",
        "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks",
        "save_muon_momentum_buffer_in_memory", "leaf_module",
    }),
    "zero_optimization.offload_param": frozenset({
        "device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory",
    }),
    "zero_optimization.offload_optimizer": frozenset({
        "device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write", "fast_init", "ratio",
        "super_offload", "cpuadam_cores_perc",
    }),
    "fp16": frozenset({
        "enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
        "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads",
    }),
    "bf16": frozenset({
        "enabled", "immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
        "bf16_optimizer_states",
    }),
    "activation_checkpointing": frozenset({
        "partition_activations", "contiguous_memory_optimization", "cpu_checkpointing", "number_checkpoints",
        "synchronize_checkpoint_boundary", "profile",
    }),
    "flops_profiler": frozenset({
        "enabled", "recompute_fwd_factor", "profile_step", "module_depth", "top_modules", "detailed",
        "output_file",
    }),
    "aio": frozenset({
        "block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events", "use_gds",
    }),
    "tensorboard": frozenset({"enabled", "output_path", "job_name"}),
    "wandb": frozenset({"enabled", "group", "team", "project"}),
    "csv_monitor": frozenset({"enabled", "output_path", "job_name"}),
    "comet": frozenset({"enabled", "samples_log_interval", "project", "workspace", "api_key", "experiment_name",
                        "experiment_key", "online", "mode"}),
    "comms_logger": frozenset({"enabled", "prof_all", "prof_ops", "verbose", "debug"}),
    "checkpoint": frozenset({"tag_validation", "load_universal", "use_node_local_storage", "parallel_write"}),
    "data_types": frozenset({"grad_accum_dtype", "param_dtype", "buffer_dtype"}),
    "tensor_parallel": frozenset({
        "dtype", "autotp_size", "tp_overlap_comm", "vocab_parallel_lm_head", "vocab_parallel_ce_backend",
        "tensor_parallel", "tp", "injection_policy_tuple", "partition_config", "preset_model",
        "keep_module_on_host", "replace_with_kernel_inject", "kernel_inject",
    }),
    "optimizer": frozenset({"type", "params", "legacy_fusion"}),
    "scheduler": frozenset({"type", "params"}),
    "optimizer.params": None,
    "scheduler.params": None,
}

# Blocks DeepSpeed 0.19.8 refuses, with its reason (deepspeed/runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS).
REMOVED: dict[str, str] = {
    "eigenvalue": "Eigenvalue-based MoQ was removed from DeepSpeed",
    "sparse_attention": "DeepSpeed Sparse Attention was removed",
    "elasticity": "elastic training was removed; set train_micro_batch_size_per_gpu / gradient_accumulation_steps",
    "graph_harvesting": "graph harvesting was removed",
    "curriculum_learning": "the top-level block was removed; use data_efficiency.data_sampling.curriculum_learning",
    "progressive_layer_drop": "Progressive Layer Dropping was removed",
    "zero_optimization.mics_shard_size": "MiCS ZeRO-3 sharding was removed",
    "zero_optimization.mics_hierarchical_params_gather": "MiCS ZeRO-3 sharding was removed",
    "zero_optimization.zeropp_loco_param": "LoCo-ZeRO++ was removed",
}

# Where an unknown key is an error rather than a warning: sections DeepSpeed validates itself (it would stop there,
# only later), as opposed to the top level and the plain-lookup blocks, where it ignores unknown keys.
VALIDATED_BY_DEEPSPEED = frozenset({
    "zero_optimization", "zero_optimization.offload_param", "zero_optimization.offload_optimizer", "fp16", "bf16",
    "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "tensor_parallel",
})

# Hints for names that are close to no key at all but whose meaning is clear.
HINTS: dict[str, str] = {
    "zero_optimization.stage3_parition_grads": "ZeRO-3 always partitions gradients; there is no such switch",
    "zero_optimization.stage3_partition_grads": "ZeRO-3 always partitions gradients; there is no such switch",
    "zero_optimization.partition_grads": "ZeRO-2 and ZeRO-3 always partition gradients; there is no such switch",
    "monitor_config": "DeepSpeed reads tensorboard, wandb, csv_monitor and comet at the top level",
    "comms_config": "DeepSpeed's communication logging block is comms_logger",
}
