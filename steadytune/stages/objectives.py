"""The training objectives of dpo, kto and rm: modules with the interface of train.py's TrainingObjective.

`forward(batch) -> (loss summed over the micro-batch's pairs or answers, their number)`: the recipe divides by the
number over the whole accumulation window (and the ranks), so every pair weighs the same however micro-batches are
cut, as every token does in sft. Each objective also keeps running sums of its metrics (rewards/chosen,
rewards/rejected, rewards/margins, rewards/accuracies, ...; LLaMA-Factory's and TRL's names) that the recipe logs
to metrics.jsonl with each logged step (`pop_metrics`), and evaluation reports with an `eval_` prefix.
"""

from __future__ import annotations

import torch

from steadytune.config import RunConfig
from steadytune.stages.logprobs import hidden_states, last_positions, sequence_logprobs
from steadytune.stages.losses import PAIR_LOSSES, average, kl_reference_point, kto, pairwise_reward, sft_term
from steadytune.stages.reference import build_reference


class MetricSums:
    """Sums and counts of per-example metric values on the device (no host sync per micro-batch); `pop` turns
    them into means (one sync), summed over ranks when `reduce` is given, and starts again.

    `names` fixes the metrics (in order) so every rank reduces the same tensor even when one of them saw none
    of a kind (a KTO micro-batch without undesirable answers); a metric with no values is left out. `spreads`: metrics
    whose standard deviation over the same values is reported too, under the name given (GRPO's reward_std)."""

    def __init__(self, names: tuple[str, ...], spreads: dict[str, str] | None = None):
        self.spreads = dict(spreads or {})
        self.names = tuple(names) + tuple(f"{name}^2" for name in self.spreads)
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, values: torch.Tensor) -> None:
        if values.numel() == 0:
            return
        total = values.detach().float().sum()
        self.sums[name] = self.sums[name] + total if name in self.sums else total
        self.counts[name] = self.counts.get(name, 0) + values.numel()
        if name in self.spreads:
            self.add(f"{name}^2", values.detach().float() ** 2)

    def pop(self, reduce=None, device: torch.device | None = None) -> dict[str, float]:
        if not self.sums and reduce is None:
            return {}
        if device is None:
            device = next(iter(self.sums.values())).device if self.sums else torch.device("cpu")
        zero = torch.zeros((), device=device)
        packed = torch.stack([torch.stack([self.sums.get(n, zero).to(device),
                                           torch.tensor(float(self.counts.get(n, 0)), device=device)])
                              for n in self.names])
        if reduce is not None:
            packed = reduce(packed)
        self.sums, self.counts = {}, {}
        totals = {n: (s, c) for n, (s, c) in zip(self.names, packed.tolist()) if c > 0}
        out = {n: s / c for n, (s, c) in totals.items() if not n.endswith("^2")}
        for name, std_name in self.spreads.items():
            if name in out and totals[name][1] > 1:   # the sample standard deviation (Bessel's correction, as TRL)
                count = totals[name][1]
                variance = (totals[f"{name}^2"][0] / count - out[name] ** 2) * count / (count - 1)
                out[std_name] = max(variance, 0.0) ** 0.5
        if "rewards/chosen" in out and "rewards/rejected" in out:
            # For pairs this is the mean of (chosen - rejected); for KTO, whose answers are not paired, TRL's margin.
            out["rewards/margins"] = out["rewards/chosen"] - out["rewards/rejected"]
        return out


class _StageObjective(torch.nn.Module):
    """What the three objectives share: the model as the one submodule (Accelerate wraps this module), metric
    sums kept apart for training and evaluation."""

    metric_names: tuple[str, ...] = ("rewards/chosen", "rewards/rejected", "rewards/accuracies")

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.train_metrics, self.eval_metrics = MetricSums(self.metric_names), MetricSums(self.metric_names)

    @property
    def metrics(self) -> MetricSums:
        return self.train_metrics if self.training else self.eval_metrics

    def forward(self, batch: dict) -> tuple[torch.Tensor, int]:
        """`compute`, then `record` its metrics: apart, so that a CUDA graph records `compute` alone and `record`
        reads its outputs after each replay (train.make_graph_runner). kto has no such split: its own forward."""
        loss_sum, n, outputs = self.compute(batch)
        self.record(outputs, n)
        return loss_sum, n

    def _record_pairs(self, chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> None:
        self.metrics.add("rewards/chosen", chosen_rewards)
        self.metrics.add("rewards/rejected", rejected_rewards)
        self.metrics.add("rewards/accuracies", (chosen_rewards > rejected_rewards).float())


class PairObjective(_StageObjective):
    """stage dpo: the `pref_loss` of PAIR_LOSSES on the pair's log-probabilities; chosen and rejected go through one
    forward (segments 0..B-1 and B..2B-1), the reference (when the loss has one) through one more without gradients."""

    metric_names = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "logps/chosen", "logps/rejected")

    def __init__(self, model: torch.nn.Module, cfg: RunConfig):
        super().__init__(model)
        self.method = cfg.method
        self.loss = PAIR_LOSSES[cfg.method.pref_loss]
        self.reference = build_reference(model, cfg) if self.loss.uses_reference else None
        if not self.loss.uses_reference:
            cfg.decide("ref_model", None, f"pref_loss {cfg.method.pref_loss} needs no reference model")

    def compute(self, batch: dict) -> tuple[torch.Tensor, int, dict]:
        """-> (loss summed over the pairs, pairs, per-pair tensors for `record`), recording nothing: a CUDA graph
        records this, and `record` reads the tensors after each replay.

        A static batch (SequenceCollator's `slots`) holds its pairs in a fixed number of slots, chosen answers in
        0..S-1 and rejected ones in S..2S-1, `example_mask` saying which are real: every tensor keeps one shape
        and nothing asks the GPU how many pairs there are. Empty slots get stand-in log-probs (-1 over 1 token)
        so that no loss goes non-finite where it is then masked away."""
        n = batch["n_examples"]
        slots = batch.get("slots", n)
        sums, counts = sequence_logprobs(self.model, batch, 2 * slots)
        real = None
        if "example_mask" in batch:
            real = torch.cat([batch["example_mask"], batch["example_mask"]])
            sums = torch.where(real, sums, torch.full_like(sums, -1.0))
            counts = torch.where(real, counts, torch.ones_like(counts))
        logps = average(sums, counts) if self.loss.averaged else sums
        ref = torch.zeros_like(logps)
        if self.reference is not None:
            ref_sums, _ = self.reference.sequence_logprobs(self.model, batch, 2 * slots)
            if real is not None:
                ref_sums = torch.where(real, ref_sums, torch.full_like(ref_sums, -1.0))
            ref = average(ref_sums, counts) if self.loss.averaged else ref_sums
        losses, chosen_rewards, rejected_rewards = self.loss.compute(logps[:slots], logps[slots:], ref[:slots],
                                                                     ref[slots:], self.method)
        extra = sft_term(sums[:slots], counts[:slots], self.method.pref_ftx)
        if extra is not None:
            losses = losses + extra
        if real is not None:
            losses = torch.where(batch["example_mask"], losses, torch.zeros_like(losses))
        outputs = {"rewards/chosen": chosen_rewards, "rewards/rejected": rejected_rewards,
                   "logps/chosen": sums[:slots], "logps/rejected": sums[slots:]}
        return losses.sum(), n, {k: v.detach() for k, v in outputs.items()}

    def record(self, outputs: dict, n: int) -> None:
        """The metrics of the micro-batch's `n` real pairs (the first n slots)."""
        self._record_pairs(outputs["rewards/chosen"][:n], outputs["rewards/rejected"][:n])
        self.metrics.add("logps/chosen", outputs["logps/chosen"][:n])
        self.metrics.add("logps/rejected", outputs["logps/rejected"][:n])


class FeedbackObjective(_StageObjective):
    """stage kto: each answer against the reference point z0 estimated from the mismatched (KL) pairs of the same
    micro-batch; policy on the answers with gradients, policy on the KL pairs and the reference on both without."""

    metric_names = ("rewards/chosen", "rewards/rejected", "kl")

    def __init__(self, model: torch.nn.Module, cfg: RunConfig):
        super().__init__(model)
        self.method = cfg.method
        self.reference = build_reference(model, cfg)

    def forward(self, batch: dict) -> tuple[torch.Tensor, int]:
        n, desirable = batch["n_examples"], batch["kto_tags"]
        sums, counts = sequence_logprobs(self.model, batch, n)
        with torch.no_grad():
            kl_sums, _ = sequence_logprobs(self.model, batch, n, prefix="kl_")
        ref_sums, _ = self.reference.sequence_logprobs(self.model, batch, n)
        ref_kl_sums, _ = self.reference.sequence_logprobs(self.model, batch, n, prefix="kl_")
        z0 = kl_reference_point(kl_sums, ref_kl_sums)
        m = self.method
        losses, chosen_rewards, rejected_rewards = kto(sums, ref_sums, desirable, z0, m.pref_beta,
                                                       m.kto_chosen_weight, m.kto_rejected_weight)
        extra = sft_term(sums, counts, m.pref_ftx)
        if extra is not None:  # the SFT term on desirable answers only
            losses = losses + torch.where(desirable, extra, torch.zeros_like(extra))
        self.metrics.add("rewards/chosen", chosen_rewards)
        self.metrics.add("rewards/rejected", rejected_rewards)
        self.metrics.add("kl", z0[None])
        return losses.sum(), n


class RewardObjective(_StageObjective):
    """stage rm: the score head read at the last token of each sequence, the Bradley-Terry pairwise loss."""

    def __init__(self, model: torch.nn.Module, cfg: RunConfig):
        super().__init__(model)

    def compute(self, batch: dict) -> tuple[torch.Tensor, int, dict]:
        """As PairObjective.compute: the loss over the pairs, recording nothing; a static batch's pairs sit in fixed
        slots (chosen in 0..S-1, rejected in S..2S-1) and its `example_mask` zeroes the empty ones."""
        n = batch["n_examples"]
        slots = batch.get("slots", n)
        scores = sequence_scores(self.model, batch, 2 * slots)
        losses, chosen, rejected = pairwise_reward(scores[:slots], scores[slots:])
        if "example_mask" in batch:
            losses = torch.where(batch["example_mask"], losses, torch.zeros_like(losses))
        return losses.sum(), n, {"rewards/chosen": chosen.detach(), "rewards/rejected": rejected.detach()}

    def record(self, outputs: dict, n: int) -> None:
        self._record_pairs(outputs["rewards/chosen"][:n], outputs["rewards/rejected"][:n])


def sequence_scores(model: torch.nn.Module, batch: dict, n_sequences: int) -> torch.Tensor:
    """A reward model's score of each sequence: its score head on the hidden state of the sequence's last token
    (fp32 at least, [n_sequences])."""
    hidden = hidden_states(model, batch)
    # a static batch lists them (SequenceCollator, made on the CPU: nothing read back from the GPU)
    last = batch["last_index"] if "last_index" in batch else last_positions(batch, n_sequences)
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, last)
    scores = score_head(model)(rows).squeeze(-1)
    return scores.to(torch.promote_types(scores.dtype, torch.float32))


def score_head(model: torch.nn.Module) -> torch.nn.Module:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = getattr(base, "score", None)
    if head is None:
        raise ValueError(f"{type(base).__name__} has no score head (load the model as a sequence scorer)")
    return head


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout of the model (LoRA's included) to p = 0; -> how many. DPO and KTO compare the policy with
    a reference on the same tokens, and dropout in one of them would bias that comparison (LLaMA-Factory and TRL
    do the same by default)."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.p = 0.0
            count += 1
    return count


def pop_metrics(objective: torch.nn.Module, accelerator=None, evaluation: bool = False) -> dict[str, float]:
    """The objective's metric means since the last call (none for an objective that keeps none, e.g. sft's)."""
    inner = accelerator.unwrap_model(objective) if accelerator is not None else objective
    sums = getattr(inner, "eval_metrics" if evaluation else "train_metrics", None)
    if sums is None:
        return {}
    if evaluation or accelerator is None or accelerator.num_processes == 1:
        return sums.pop()  # (every rank evaluates the whole eval split: nothing to sum)
    return sums.pop(lambda t: accelerator.reduce(t, reduction="sum"), accelerator.device)
