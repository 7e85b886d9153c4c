"""The timing side of a peer arm's child process (lf_child.py, unsloth_child.py): a Trainer callback that counts real
tokens per step, applies bench's steady-state rule and stops the peer's own training loop when it is met, and writes
what it saw as JSON for the parent (peers.py) to score.

Standalone on purpose: a child runs under the peer's Python, whose transformers is not steadytune's, so this file
imports only the standard library, torch, transformers and its sibling steady.py (stdlib only). The child is started
as a script, which puts this folder first on sys.path: that is how `steady` and `peer_timing` are found without
importing the steadytune package.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path

import torch
from steady import SteadyRate  # steadytune/bench/steady.py, found through the script's folder (see above)
from transformers import TrainerCallback


def read_spec(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_json(path: str, payload: dict) -> None:
    Path(path).write_text(json.dumps(payload, default=str), encoding="utf-8")


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def run_guarded(main, argv: list[str]) -> int:
    """Run a child's main(spec, result_path); a failure still leaves a result file that says what went wrong (and
    whether it was memory, which makes the parent try a smaller setting)."""
    spec_path, result_path = argv
    try:
        main(read_spec(spec_path), result_path)
    except Exception as e:  # noqa: BLE001 - the parent turns any failure into the arm's "error"
        traceback.print_exc()
        write_json(result_path, {"error": f"{type(e).__name__}: {e}", "out_of_memory": is_out_of_memory(e)})
        return 1
    return 0


def logical_numel(param) -> int:
    """Weights a parameter stands for: a bitsandbytes 4-bit weight packs two in a byte and keeps the original shape
    in its quant_state (model/quantize.py's logical_numel, restated: this process cannot import steadytune)."""
    shape = getattr(getattr(param, "quant_state", None), "shape", None)
    return int(torch.Size(shape).numel()) if shape is not None else param.numel()


_EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "experts_per_token")
_NOT_ROUTED = {"shared_expert", "shared_experts", "shared_mlp", "gate", "router", "shared_expert_gate"}


def routed_share(config) -> float:
    """top_k / num_experts of a mixture of experts' config (1.0 for a dense model): the share of a routed expert's
    weights a token passes through (model/moe/anatomy.experts_per_layer and experts_per_token, restated)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    experts = next((getattr(config, k) for k in _EXPERT_COUNT_KEYS if isinstance(getattr(config, k, None), int)), 0)
    top_k = next((getattr(config, k) for k in _TOP_K_KEYS if isinstance(getattr(config, k, None), int)), 0)
    return top_k / experts if experts > 0 and top_k > 0 else 1.0


def is_routed_expert(name: str) -> bool:
    """A routed expert's weight (or its LoRA factor): `experts` in its path, no shared expert or router
    (model/moe/anatomy.parameter_kind, restated for transformers 5's fused experts)."""
    segments = name.split(".")
    return "experts" in segments and not any(s in _NOT_ROUTED for s in segments)


def matmul_parameters(model) -> dict:
    """bench's MFU rule (workload.parameter_counts), restated because this process cannot import steadytune:
    mfu_parameters (frozen parameters taking part in a matmul), mfu_lora_parameters (trainable ones), a routed
    expert's at top_k / num_experts; trainable_parameters, total and active (adapters left out); and on a mixture of
    experts the trainable parameters in the routed experts and elsewhere (trainable_by_kind), so the reader sees
    whether this peer trained them."""
    share = routed_share(model.config)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    lookup = embedding.weight if embedding is not None and head is not None and embedding.weight is not head.weight \
        else None  # an untied input embedding is a lookup, not a matmul
    frozen = lora = 0.0
    trainable = total = active = routed_trainable = 0
    for name, param in model.named_parameters():
        n = logical_numel(param)
        routed = is_routed_expert(name)
        used = n * share if routed else n
        if param.requires_grad:
            trainable += n
            lora += used
            routed_trainable += n if routed else 0
        elif param is not lookup:
            frozen += used
        if "lora_" not in name and "modules_to_save" not in name:
            total += n
            active += round(used)
    counts = {"mfu_parameters": round(frozen), "mfu_lora_parameters": round(lora), "trainable_parameters": trainable,
              "total_parameters": total, "active_parameters": active}
    if share < 1.0:
        counts["trainable_by_kind"] = {"routed experts": routed_trainable, "other": trainable - routed_trainable}
    return counts


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepTimer(TrainerCallback):
    """Times the peer's Trainer the way bench times every arm: `warmup` untimed steps, then SteadyRate windows until
    the rate is steady (or a cap); then it asks the Trainer to stop and writes the result file.

    Real tokens are counted on the CPU, in the loader's collate function (wrapped at train begin): every token id
    other than the pad id is real (bench's examples never contain the pad id), whatever the peer's packing does."""

    def __init__(self, spec: dict, result_path: str, settings: dict):
        self.warmup = spec["warmup"]
        self.pad_id = spec["pad_id"]
        self.launched_at = spec["launched_at"]
        self.meter = SteadyRate(**spec["steady_rule"])
        self.result_path = result_path
        self.settings = settings
        self.batch_tokens: list[int] = []
        self.step_seconds: list[float] = []
        self.first_step_at: float | None = None
        self.timing_started_at: float | None = None
        self.last_step_end: float | None = None
        self.loss: tuple[int, float] | None = None
        self.counts: dict | None = None

    def count_real_tokens(self, collate):
        def counting(features):
            self.batch_tokens.append(sum(sum(1 for t in f["input_ids"] if t != self.pad_id) for f in features))
            return collate(features)
        return counting

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        # accelerate wraps the DataLoader; the wrapped one is what its iterator calls collate_fn on
        loader = getattr(train_dataloader, "base_dataloader", train_dataloader)
        loader.collate_fn = self.count_real_tokens(loader.collate_fn)
        if model is not None:
            self.counts = matmul_parameters(model)
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()

    def on_step_begin(self, args, state, control, **kwargs):
        if self.first_step_at is None:
            self.first_step_at = time.time()
        if state.global_step == self.warmup and self.timing_started_at is None:
            self.meter.start(synchronize)
            self.timing_started_at = time.time()
            self.last_step_end = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        k = state.global_step  # steps done; batch k-1 was collated for step k (the loader may run one ahead)
        if k <= self.warmup:
            return
        now = time.perf_counter()
        # the CPU's view of each step (not synchronised: a sync per step would slow the peer); the windows are
        self.step_seconds.append(round(now - self.last_step_end, 5))
        self.last_step_end = now
        if self.meter.step(self.batch_tokens[k - 1], synchronize):
            control.should_training_stop = True
            control.should_log = True  # so the loss of the last steps is logged before the loop ends

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.loss = (state.global_step, float(logs["loss"]))

    def on_train_end(self, args, state, control, **kwargs):
        write_json(self.result_path, self.result())

    def result(self) -> dict:
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
        return {
            "summary": self.meter.summary(), "step_seconds": self.step_seconds,
            "step_tokens": self.batch_tokens[self.warmup:self.warmup + self.meter.steps],
            "loss": self.loss[1] if self.loss else None, "loss_step": self.loss[0] if self.loss else None,
            "loss_tokens": sum(self.batch_tokens[:self.loss[0]]) if self.loss else None,
            "peak_memory_gib": peak, "launched_at": self.launched_at, "first_step_at": self.first_step_at,
            "timing_started_at": self.timing_started_at,
            "counts": self.counts,
            "settings": self.settings,
        }


def versions(*modules: str) -> dict:
    """Versions of the named packages as this Python has them (None: not installed)."""
    found = {"python": sys.version.split()[0]}
    for name in modules:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
