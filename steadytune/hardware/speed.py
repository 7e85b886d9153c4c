"""The speed policy: static shapes, torch.compile, CUDA graphs and liger-kernel for a run, decided in one place
from what is known before it starts (backend, packing kernel, processes, precision, run length), each with its
reason for run_config.yaml's decisions. `train` and `bench` both call `plan_speed`, so a bench number is what a
training run gets by default.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------------------
# The speed policy
# ---------------------------------------------------------------------------------------------------------

# Compiling the layers costs tens of seconds once (one static shape); it pays when the run has enough
# micro-batches to win that back. Qwen2.5-1.5B shape on an H200: 0.29 s a compiled micro-batch of 16,384 tokens
# against 0.41 s eager. The GPU-sized demo (Gemma 3 270M, 247 micro-batches) lost: ~70 s of compiling for 46 s
# of training (dynamic shapes then).
COMPILE_MIN_MICRO_BATCHES = 400
# Inductor's coordinate-descent tuning of the compiled layers' Triton kernels (block sizes, warps): 1.02x the
# tokens/s at the Qwen2.5-1.5B shape on an H200 (77,144 -> 78,631, ~4 ms a micro-batch), for 60-80 s more compiling
# on a cold cache (Inductor keeps the tuned configs, so a rerun of the same shapes pays little). It repays the cold
# cost after ~15,000-20,000 such micro-batches, so by default only runs that long get it.
KERNEL_TUNING_MIN_MICRO_BATCHES = 20_000


@dataclass
class SpeedPlan:
    """What a run gets, each with the reason recorded in run_config.yaml's decisions."""
    static_shapes: bool = False
    compile: bool = False
    cuda_graphs: bool = False
    liger: bool = False
    kernel_tuning: bool = False
    recompute_pointwise: bool = False
    shared_input: bool = False   # applied after the fp8 base (training/speed_plan.py), and recorded there
    reasons: dict = field(default_factory=dict)

    def decide_into(self, cfg) -> None:
        for key, value in (("static_shapes", self.static_shapes), ("torch_compile", self.compile),
                           ("kernel_tuning", self.kernel_tuning),
                           ("recompute_pointwise", self.recompute_pointwise), ("cuda_graphs", self.cuda_graphs),
                           ("use_liger_kernel", self.liger)):
            cfg.decide(key, value, self.reasons[key])


def liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


class SpeedUnavailable(ValueError):
    """A speed feature was asked for (key: true) where it cannot run; the message says why."""


# Static shapes pad every micro-batch to the largest; below this share of real tokens that costs more than
# compiled layers or graphs win (a token budget below cutoff_len makes one long example set the shape for all).
MIN_STATIC_FILL = 0.75


def _needs_compiled_layers(key: str, asked: bool | None, reasons: dict, off_reason: str) -> str:
    """A feature of the compiled layers where nothing is compiled: an error if `key` was asked for, else its
    reason for being off."""
    if asked:
        raise SpeedUnavailable(f"{key}: true, but the layers are not compiled ({reasons['torch_compile']}); "
                               f"set torch_compile: true too, or drop {key}")
    return off_reason


def plan_speed(backend: str, packing_attention: str | None, micro_batches: int, world_size: int = 1,
               precision: str = "bf16", compile_asked: bool | None = None, graphs_asked: bool | None = None,
               liger_asked: bool | None = None, tuning_asked: bool | None = None,
               recompute_asked: bool | None = None, shared_asked: bool | None = None, blockers: dict | None = None,
               static_ok: tuple[bool, str] = (True, ""), static_fill: float | None = None,
               gradient_hooks: bool | None = None) -> SpeedPlan:
    """The speed features of a run, decided in one place.

    backend: cuda | rocm | mps | cpu. packing_attention: varlen | sdpa | flex, or None when unpacked.
    micro_batches: how many the run will compute (forward + backward). *_asked: the user's key (None = unset).
    blockers: reasons that rule CUDA graphs out ({"fault_injection": "..."}): anything that must run eagerly
    between forward and backward. static_ok: whether the packing kernel takes padded static rows (varlen needs
    empty sequences in cu_seq_lens: packing.varlen_static_status), with the reason. static_fill: the share of
    real tokens once every micro-batch is padded to the static shape (StaticShape.fill). gradient_hooks: whether
    a collective runs inside the backward (DDP's hooks; default: with several processes); LoRA's flat all-reduce
    after the backward leaves the micro-batch graphable.
    Raises SpeedUnavailable for a feature asked for that cannot run here."""
    plan = SpeedPlan()
    r = plan.reasons
    gpu = backend in ("cuda", "rocm")
    if static_ok[0] and static_fill is not None and static_fill < MIN_STATIC_FILL:
        static_ok = (False, f"padding every micro-batch to one shape would waste {1 - static_fill:.0%} of the "
                            "compute (is max_tokens_per_batch below cutoff_len?)")
    static_possible = packing_attention in ("varlen", "sdpa") and static_ok[0]
    why_no_static = ("not packed: padded batches change shape every step" if packing_attention is None else
                     f"packing attention {packing_attention} builds its own masks per batch"
                     if packing_attention not in ("varlen", "sdpa") else static_ok[1])

    # --- CUDA graphs: the whole forward + backward of a micro-batch replayed as one launch ----------------
    graph_blockers = dict(blockers or {})
    if backend != "cuda":
        graph_blockers["backend"] = (f"{backend}: HIP graphs exist but have not been tried here" if backend == "rocm"
                                     else f"{backend} has no CUDA graphs")
    if packing_attention != "varlen":
        graph_blockers["packing"] = ("needs varlen packing (one row with cu_seq_lens); " +
                                     (why_no_static if packing_attention is None else
                                      f"this run packs with {packing_attention}, whose masks read the GPU"))
    elif not static_ok[0]:
        graph_blockers["static"] = static_ok[1]
    if gradient_hooks if gradient_hooks is not None else world_size > 1:
        graph_blockers["processes"] = f"{world_size} processes: DDP's gradient hooks run between the kernels"
    if precision == "fp16":
        graph_blockers["precision"] = "fp16's loss scaler decides on the host after backward"
    if graphs_asked is False:
        r["cuda_graphs"] = "cuda_graphs: false"
    elif graph_blockers:
        why = "; ".join(graph_blockers.values())
        if graphs_asked:
            raise SpeedUnavailable(f"cuda_graphs: true, but {why}; set cuda_graphs: false")
        r["cuda_graphs"] = f"off: {why}"
    else:
        plan.cuda_graphs = True
        r["cuda_graphs"] = ("on: one static shape per micro-batch, " +
                            ("one process" if world_size == 1 else f"{world_size} processes whose gradients are summed "
                             "after the backward") + ", no host syncs in the step: forward "
                            "and backward replay as one graph instead of thousands of launches (checked against an "
                            "eager micro-batch at start)" + ("" if graphs_asked else "; cuda_graphs: false turns it off"))

    # --- torch.compile of the decoder layers --------------------------------------------------------------
    if compile_asked is False:
        r["torch_compile"] = "torch_compile: false"
    elif compile_asked:
        plan.compile = True
        r["torch_compile"] = "torch_compile: true was asked for"
    elif backend != "cuda":
        r["torch_compile"] = (f"off by default on {backend}: Inductor emits Triton there too, but it has not been "
                              "timed here; torch_compile: true turns it on" if backend == "rocm" else
                              f"off by default on {backend}: compiling takes longer than it saves on short runs")
    elif not triton_installed():
        r["torch_compile"] = "off: Inductor needs triton, which is not installed"
    elif not static_possible:
        r["torch_compile"] = f"off by default: no static shapes ({why_no_static}), so it would recompile"
    elif micro_batches < COMPILE_MIN_MICRO_BATCHES:
        r["torch_compile"] = (f"off by default: {micro_batches} micro-batches are too few to win back the compile "
                              f"time (on from {COMPILE_MIN_MICRO_BATCHES}); torch_compile: true turns it on")
    else:
        plan.compile = True
        r["torch_compile"] = (f"on: CUDA, static shapes, {micro_batches} micro-batches (from "
                              f"{COMPILE_MIN_MICRO_BATCHES} the compile time pays); torch_compile: false turns it off")

    # --- tuning the compiled kernels: pays on long runs only ------------------------------------------------
    if tuning_asked is False:
        r["kernel_tuning"] = "kernel_tuning: false"
    elif not plan.compile:
        r["kernel_tuning"] = _needs_compiled_layers("kernel_tuning", tuning_asked, r, "off: nothing compiled to tune")
    elif tuning_asked:
        plan.kernel_tuning = True
        r["kernel_tuning"] = "kernel_tuning: true was asked for"
    elif backend != "cuda":
        r["kernel_tuning"] = f"off by default on {backend}: not timed there; kernel_tuning: true turns it on"
    elif micro_batches < KERNEL_TUNING_MIN_MICRO_BATCHES:
        r["kernel_tuning"] = (f"off by default: {micro_batches} micro-batches are too few to win back its minute of "
                              f"tuning (on from {KERNEL_TUNING_MIN_MICRO_BATCHES:,}); kernel_tuning: true turns it on")
    else:
        plan.kernel_tuning = True
        r["kernel_tuning"] = (f"on: {micro_batches} micro-batches (from {KERNEL_TUNING_MIN_MICRO_BATCHES:,} the minute "
                              "of tuning pays); kernel_tuning: false turns it off")

    # --- what the compiled layers keep for backward: about half, where compiled on CUDA ---------------------
    # Timed on an H200 (docs/measured/recompute_*_h200.json): 0.99x the speed at 0.68-0.70x the peak memory on the
    # QLoRA 7B, 1.5B and 0.5B shapes; memory saved also keeps checkpointing (a third more compute) off for longer.
    if recompute_asked is False:
        r["recompute_pointwise"] = "recompute_pointwise: false"
    elif not plan.compile:
        r["recompute_pointwise"] = _needs_compiled_layers("recompute_pointwise", recompute_asked, r,
                                                          "off: nothing compiled")
    elif recompute_asked:
        plan.recompute_pointwise = True
        r["recompute_pointwise"] = ("recompute_pointwise: true was asked for: the compiled layers keep about half "
                                    "their activations and recompute the rest (elementwise ops only) in backward")
    elif backend != "cuda":
        r["recompute_pointwise"] = (f"off by default on {backend}: not timed there; recompute_pointwise: true turns "
                                    "it on")
    else:
        plan.recompute_pointwise = True
        r["recompute_pointwise"] = ("on: the compiled layers keep about half their activations and recompute the "
                                    "rest (elementwise ops only) in backward: measured 0.99x the speed at 0.7x the "
                                    "memory on an H200; recompute_pointwise: false turns it off")

    # --- LoRA layers that read the same input, multiplied as one group (model/shared_input.py) ---------------
    # Timed on an H200 (docs/measured/shared_*_h200.json): 1.039x the tokens/s at the 1.5B and 0.5B shapes, 1.023x
    # at 7B, the same peak memory. It runs eagerly too, but was timed with compiled layers only.
    if shared_asked is False:
        r["shared_input_projections"] = "shared_input_projections: false"
    elif shared_asked:
        plan.shared_input = True
        r["shared_input_projections"] = "shared_input_projections: true was asked for"
    elif not plan.compile:
        r["shared_input_projections"] = ("off by default: timed with compiled layers only; "
                                         "shared_input_projections: true turns it on")
    elif backend != "cuda":
        r["shared_input_projections"] = (f"off by default on {backend}: not timed there; shared_input_projections: "
                                         "true turns it on")
    else:
        plan.shared_input = True
        r["shared_input_projections"] = ("on: measured 1.02-1.04x the tokens/s on an H200 at the same memory; "
                                         "shared_input_projections: false turns it off")

    # --- static shapes: only where something reuses them (padding costs a little compute) -----------------
    if plan.compile or plan.cuda_graphs:
        plan.static_shapes = static_possible
        r["static_shapes"] = ("on: packed micro-batches padded to one shape, so the " +
                              " and ".join(n for n, on in (("compiled layers", plan.compile),
                                                           ("CUDA graph", plan.cuda_graphs)) if on) +
                              " serve every step" if static_possible else f"off: {why_no_static}")
    else:
        r["static_shapes"] = "off: nothing compiled or graphed reuses a fixed shape"

    # --- liger-kernel: fused RMSNorm / RoPE / SwiGLU ------------------------------------------------------
    if liger_asked is False:
        r["use_liger_kernel"] = "use_liger_kernel: false"
    elif liger_asked:
        plan.liger = True
        r["use_liger_kernel"] = "use_liger_kernel: true was asked for"
    elif not gpu:
        r["use_liger_kernel"] = f"off: its Triton kernels need a GPU ({backend})"
    elif plan.compile:
        r["use_liger_kernel"] = "off: the compiled layers fuse RMSNorm, RoPE and SwiGLU themselves"
    elif not liger_installed():
        r["use_liger_kernel"] = "off: liger-kernel is not installed (pip install liger-kernel)"
    else:
        plan.liger = True
        r["use_liger_kernel"] = "on: liger-kernel is installed and the layers are not compiled"
    return plan
