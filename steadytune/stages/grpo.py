"""`stage: grpo`: online reinforcement learning with verifiable rewards (GRPO; TRL's key names and loss), generating
with our own batched decode engine on the policy's current weights, in the training process.

One optimizer step, as the recipe's loop runs it (train.forward_backward):
1. `roll_out` (the Stage's hook, before the step counts its units): the prompts of every micro-batch of the step are
   completed `num_generations` times each, in one batch, by model/decode/complete.Decoder on the model being trained
   (LoRA applied, not merged; eval mode, no autograd), sampled at `temperature` / `top_p` / `top_k`, each
   completion from noise keyed by (seed, step, the prompt's index in the training data, the completion's number):
   the same completions on one process or several, in any batch, and in a resumed run;
2. the completions are decoded and scored by the reward functions (stages/rewards.py), and each prompt's group of
   completions turned into advantages (the reward less the group's mean, over its std);
3. each micro-batch becomes a training batch of prompt + completion sequences (padded, or packed as sft packs), the
   completion tokens labelled (stop token included);
4. the objective's forward (once per micro-batch, under DDP's wrapper): every completion token's log-prob at the
   sampling temperature, the reference's (the same model with its adapter switched off, no second copy:
   stages/reference.py) when beta > 0, and TRL's per-token loss summed as loss_type says (stages/grpo_losses.py).

The step's units (what the recipe divides the summed loss by, over every rank) are completions for grpo and dr_grpo,
completion tokens for dapo: only known after generation, which is why the roll-out comes before the count.

Metrics (metrics.jsonl with each logged step, TRL's names; `eval_` + the same during evaluation): reward, reward_std,
rewards/<function>/mean and /std, completions/mean_length, completions/clipped_ratio (no stop token within
max_completion_length), frac_reward_zero_std (completions whose group's rewards are all equal: no signal), kl,
clip_ratio/low_mean, /high_mean, /region_mean.

Evaluation (during training and `steadytune eval`): the held-out prompts are completed the same way, keyed by the
prompt itself rather than the step (so two evaluations differ by the weights only), and scored by the same
functions.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from steadytune.config import RunConfig
from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.packing import PackedCollator
from steadytune.data.prepare import prepare_datasets, template_for
from steadytune.data.prompts import PROMPTS
from steadytune.eval.scoring import inference
from steadytune.model.anatomy import CAUSAL_LM
from steadytune.model.decode.complete import Decoder
from steadytune.model.decode.sampling import SamplingParams, mix_key
from steadytune.stages import evaluation
from steadytune.stages.base import Stage
from steadytune.stages.batches import _PaddedWithSegments
from steadytune.stages.grpo_losses import (
    LossSettings,
    clip_metric_names,
    clip_metrics,
    per_token_loss,
    summed_loss,
    units_of,
)
from steadytune.stages.logprobs import token_logprobs
from steadytune.stages.objectives import MetricSums, disable_dropout
from steadytune.stages.reference import build_reference
from steadytune.stages.rewards import group_advantages, load_reward_functions, nanstd, score
from steadytune.training.batches import to_device
from steadytune.training.monitor import MetricsLog

EVAL_STEP = -1   # evaluation's completions are keyed by their prompts, not by the step
COMPLETIONS_FILE = "completions.jsonl"   # log_completions: true writes the completions here, in output_dir
NO_SIGNAL_STEPS = 10   # training roll-outs in a row whose every group had equal rewards before the run says so


# ---------------------------------------------------------------------------------------------------------
# Batches: prompts in, prompt + completion sequences out
# ---------------------------------------------------------------------------------------------------------

@dataclass
class Prompts:
    """A micro-batch of prompts as the collator hands it over (under batch["prompts"]), with what turns their
    completions into text and into a training batch."""
    examples: list[dict]
    tokenizer: Any
    stop_ids: list[int]
    collate: Callable[[list[dict]], dict]   # sft-style sequences -> a padded or packed batch with segment_ids


class PromptCollator:
    def __init__(self, cfg: RunConfig, tokenizer: Any, packing_attention: Optional[str]):
        template = template_for(cfg, tokenizer)
        self.tokenizer = tokenizer
        self.stop_ids = sorted({*template.stop_token_ids(), *([tokenizer.eos_token_id]
                                                             if tokenizer.eos_token_id is not None else [])})
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if packing_attention is None:
            self.sequences = _PaddedWithSegments(pad)
        else:
            row = cfg.data.cutoff_len + cfg.method.max_completion_length
            self.sequences = PackedCollator(pad, row_len=row, attention=packing_attention, segment_ids=True)

    def __call__(self, examples: list[dict]) -> dict:
        return {"prompts": Prompts(list(examples), self.tokenizer, self.stop_ids, self.sequences),
                "n_examples": len(examples)}


def make_collator(cfg: RunConfig, tokenizer: Any, packing_attention: Optional[str]) -> PromptCollator:
    return PromptCollator(cfg, tokenizer, packing_attention)


def count_units(batch: dict) -> int:
    """The loss normaliser's share of a rolled-out micro-batch: its completions (grpo, dr_grpo) or their tokens
    (dapo)."""
    return int(batch["n_units"])


def count_completion_tokens(batch: dict) -> int:
    return int(batch["n_target_tokens"])


# ---------------------------------------------------------------------------------------------------------
# The objective
# ---------------------------------------------------------------------------------------------------------

class GRPOObjective(torch.nn.Module):
    """The policy (the one submodule, which Accelerate wraps) and GRPO's loss; `roll_out` generates and scores."""

    def __init__(self, model: torch.nn.Module, cfg: RunConfig):
        super().__init__()
        self.model = model
        m = self.method = cfg.method
        self.functions = load_reward_functions(m, cfg.data.label_names)
        self.reference = build_reference(model, cfg) if m.beta != 0.0 else None
        if self.reference is None:
            cfg.decide("ref_model", None, "beta: 0 (TRL's default): no KL term, so no reference forward")
        self.sampling = sampling_of(cfg)
        self.seed = cfg.train.seed
        self.loss = LossSettings.of(m)
        names = ["reward"] + [f"rewards/{f.name}/mean" for f in self.functions] + [
            "completions/mean_length", "completions/clipped_ratio", "completions/nonfinite_ratio",
            "frac_reward_zero_std", "kl", *clip_metric_names(m.loss_type)]
        spreads = {"reward": "reward_std", **{f"rewards/{f.name}/mean": f"rewards/{f.name}/std"
                                              for f in self.functions}}
        self.train_metrics, self.eval_metrics = MetricSums(tuple(names), spreads), MetricSums(tuple(names), spreads)
        self._decoder: list[Decoder] = []   # made at the first roll-out (a plain list: not a submodule)
        self._no_signal = 0                 # training roll-outs in a row without a group whose rewards differ
        self._streak_range: Optional[tuple[float, float]] = None   # the lowest and highest reward in that streak
        self._said_nonfinite = False
        self._speaks = int(os.environ.get("RANK", "0")) == 0   # the warnings below come from the first process only
        self.completions_log = (MetricsLog(Path(cfg.train.output_dir) / COMPLETIONS_FILE, enabled=self._speaks)
                                if m.log_completions else None)
        # The objective's own logs in output_dir beside metrics.jsonl: the recipe lists them in the run's manifest
        # and cuts them back to the checkpoint on resume, as it does metrics.jsonl (train.begin_steps).
        self.run_logs = (self.completions_log,) if self.completions_log is not None else ()
        self.logging_steps = cfg.train.logging_steps
        self.last_step = 0   # the training step the latest roll-out was for (evaluations are logged under it)

    @property
    def metrics(self) -> MetricSums:
        return self.train_metrics if self.training else self.eval_metrics

    @property
    def temperature(self) -> float:
        return self.sampling.temperature if not self.sampling.greedy else 1.0

    # --- 1-3: generate, score, build the training batches ----------------------------------------------------
    @torch.no_grad()
    def roll_out(self, batches: list[dict], step: int, ids: Optional[list[list[int]]] = None) -> None:
        """Complete, score and lay out every micro-batch of `batches` (in place; see the module docstring). `ids`:
        each micro-batch's example indices in the training data (the completions' keys); None for evaluation."""
        m, G = self.method, self.method.num_generations
        prompts: list[Prompts] = [b["prompts"] for b in batches]
        first = prompts[0]
        examples = [e for p in prompts for e in p.examples for _ in range(G)]
        keys = self.keys_for(prompts, step, ids)
        if not self._decoder:
            self._decoder.append(Decoder(self.model, first.collate.pad_token_id))
        with inference(self.model):
            done = self._decoder[0].generate([e["input_ids"] for e in examples], m.max_completion_length,
                                             self.sampling, first.stop_ids, keys)
        texts = first.tokenizer.batch_decode(done.ids, skip_special_tokens=True)
        where = f"step {step}" if self.training else f"the evaluation after step {self.last_step}"
        per_function = score(self.functions, [e["prompt"] for e in examples], texts, done.ids,
                             [e["columns"] for e in examples], [e["answer"] for e in examples], where,
                             m.reward_timeout)
        advantages = group_advantages(per_function, [f.weight for f in self.functions], G, m.scale_rewards,
                                      self._batch_std if m.scale_rewards == "batch" else None)
        self._record_rewards(per_function, advantages, done, texts)
        if self.training:
            self.last_step = step
        self._log_completions(step, examples, texts, per_function, advantages.advantages, done)
        start = 0
        for batch, p in zip(batches, prompts):
            rows = range(start, start + len(p.examples) * G)
            start = rows.stop
            sequences = []
            for i in rows:
                prompt, completion = list(examples[i]["input_ids"]), done.ids[i]
                trained = completion if not (m.mask_truncated_completions and done.truncated[i]) else \
                    [IGNORE_INDEX] * len(completion)
                sequences.append({"input_ids": prompt + completion, "labels": [IGNORE_INDEX] * len(prompt) + trained})
            batch.update(p.collate(sequences))
            tokens = sum(1 for s in sequences for t in s["labels"] if t != IGNORE_INDEX)
            batch.update(advantages=advantages.advantages[rows.start:rows.stop].clone(), n_sequences=len(sequences),
                         n_target_tokens=tokens, n_units=units_of(m.loss_type, len(sequences), tokens),
                         n_input_tokens=sum(len(s["input_ids"]) for s in sequences))

    def keys_for(self, prompts: list[Prompts], step: int, ids: Optional[list[list[int]]]) -> list[int]:
        """One sampling key per completion: (seed, step, the example's index, the completion's number); evaluation's
        (seed, the prompt's tokens, how many times it came before in this call, the completion's number)."""
        G, keys, seen = self.method.num_generations, [], {}
        for k, p in enumerate(prompts):
            for i, example in enumerate(p.examples):
                if ids is not None:
                    who = (step, ids[k][i])
                else:
                    tokens = tuple(example["input_ids"])
                    seen[tokens] = seen.get(tokens, -1) + 1
                    who = (EVAL_STEP, mix_key(*tokens), seen[tokens])
                keys += [mix_key(self.seed, *who, g) for g in range(G)]
        return keys

    def _batch_std(self, rewards: torch.Tensor) -> torch.Tensor:
        """scale_rewards: batch: the std of every rank's rewards of the step (TRL gathers them all)."""
        real = rewards[~torch.isnan(rewards)].double()
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()) or not self.training:
            return nanstd(rewards)
        device = next(self.model.parameters()).device
        totals = torch.stack([real.sum(), (real ** 2).sum(), torch.tensor(float(real.numel()), dtype=torch.double)])
        totals = totals.to(device)
        torch.distributed.all_reduce(totals)
        s, sq, n = totals.tolist()
        if n < 2:
            return torch.tensor(float("nan"))
        return torch.tensor(max(sq / n - (s / n) ** 2, 0.0) * n / (n - 1)).sqrt().float()

    def _record_rewards(self, per_function: torch.Tensor, advantages, done, texts: list[str]) -> None:
        rewards = advantages.rewards
        self.metrics.add("reward", rewards[~torch.isnan(rewards)])
        for j, f in enumerate(self.functions):
            values = per_function[:, j]
            self.metrics.add(f"rewards/{f.name}/mean", values[~torch.isnan(values)])
        self.metrics.add("completions/mean_length", torch.tensor([float(len(ids)) for ids in done.ids]))
        self.metrics.add("completions/clipped_ratio", torch.tensor([float(t) for t in done.truncated]))
        self.metrics.add("frac_reward_zero_std", advantages.std_zero.float())
        self.metrics.add("completions/nonfinite_ratio", torch.tensor([float(b) for b in done.nonfinite]))
        if any(done.nonfinite) and not self._said_nonfinite and self._speaks:
            self._said_nonfinite = True
            print(f"warning: grpo: {sum(done.nonfinite)} of {len(done.nonfinite)} completions had a token drawn from "
                  "logits that were not finite (drawn uniformly, so they are noise): generation on this model and "
                  "device is broken; try STEADYTUNE_CUDA_GRAPHS=0, or report it with `steadytune doctor`'s output "
                  "(completions/nonfinite_ratio in metrics.jsonl counts them)", file=sys.stderr, flush=True)
        if self.training:
            self._watch_signal(rewards, advantages.no_signal, done, texts[0] if texts else "")

    def _log_completions(self, step: int, examples: list[dict], texts: list[str], per_function: torch.Tensor,
                         advantages: torch.Tensor, done) -> None:
        """log_completions: one JSON line per completion of a logged step's roll-out (the steps whose metrics are
        logged: 1 and every logging_steps) and of every evaluation, with each reward function's value (null where
        it returned None) and the advantage; appended, so a resumed run continues the file."""
        if self.completions_log is None:
            return
        split = "train" if self.training else "eval"
        if split == "train" and step != 1 and step % self.logging_steps:
            return
        names = [f.name for f in self.functions]
        for i, (example, text) in enumerate(zip(examples, texts)):
            rewards = {n: (None if math.isnan(v) else v) for n, v in zip(names, per_function[i].tolist())}
            advantage = float(advantages[i])
            self.completions_log.write({"step": self.last_step, "split": split, "prompt": example["prompt"],
                                        "completion": text, "rewards": rewards,
                                        "advantage": None if math.isnan(advantage) else advantage,
                                        "length": len(done.ids[i]), "truncated": bool(done.truncated[i])})

    def _watch_signal(self, rewards: torch.Tensor, no_signal: torch.Tensor, done, sample: str) -> None:
        """Say once when NO_SIGNAL_STEPS roll-outs in a row had no group whose rewards differed: every advantage
        is 0, so the steps change nothing (the commonest way a GRPO run silently does not learn). Two causes, told
        apart by the rewards over those steps: one value throughout (the reward never fires, or always does), or
        groups that agree inside but differ from each other (the policy answers each prompt the same way every time:
        its sampling has collapsed, as a classifier that names one label for every input does)."""
        if not bool(no_signal.all()):
            self._no_signal, self._streak_range = 0, None
            return
        self._no_signal += 1
        real = rewards[~torch.isnan(rewards)]
        if real.numel():
            low, high = real.min().item(), real.max().item()
            if self._streak_range is not None:
                low, high = min(low, self._streak_range[0]), max(high, self._streak_range[1])
            self._streak_range = (low, high)
        if self._no_signal != NO_SIGNAL_STEPS or not self._speaks:
            return
        value = f"{real.mean().item():.3g}" if real.numel() else "none: every function returned None or NaN"
        cut = sum(done.truncated) / max(len(done.truncated), 1)
        n = self.method.num_generations
        if self._streak_range is not None and self._streak_range[1] > self._streak_range[0]:
            print(f"warning: grpo: for {NO_SIGNAL_STEPS} steps every group's {n} completions agreed on their reward, "
                  f"though the groups differ (rewards from {self._streak_range[0]:.3g} to {self._streak_range[1]:.3g}):"
                  " the policy gives each prompt the same answer every time, so no step changes it. Keep its "
                  "sampling apart: a lower learning_rate, a KL term (beta: 0.04), DAPO's clip-higher "
                  "(epsilon_high: 0.28), more num_generations or a higher temperature.", file=sys.stderr, flush=True)
            return
        print(f"warning: grpo: for {NO_SIGNAL_STEPS} steps every group's {n} completions "
              f"got the same reward (mean {value}), so no step changed the policy. Check that the reward functions "
              f"can score these completions (one of them: {sample[:80]!r}); {cut:.0%} were cut at "
              "max_completion_length; a higher temperature or more num_generations gives groups more spread.",
              file=sys.stderr, flush=True)

    # --- 4: the loss -----------------------------------------------------------------------------------------------
    def forward(self, batch: dict) -> tuple[torch.Tensor, int]:
        """(the micro-batch's loss summed as loss_type normalises it, its units). A batch of prompts that was not rolled
        out yet (evaluation) is rolled out first, from the evaluation seed."""
        m = self.method
        if "input_ids" not in batch:
            self.roll_out([batch], EVAL_STEP)
            batch.update(to_device({k: v for k, v in batch.items() if isinstance(v, torch.Tensor)},
                                   next(self.model.parameters()).device))
        logps, owner = token_logprobs(self.model, batch, self.temperature)
        advantages = batch["advantages"].to(logps.dtype)[owner]
        ref = self.reference.token_logprobs(self.model, batch, self.temperature) if self.reference else None
        # The sampling policy's log-probs: the same weights as now in a synchronous step (so the ratio is 1 and its
        # gradient the policy gradient, TRL's num_iterations 1), the sampling weights' own when the roll-out ran ahead
        old = batch["old_logps"].to(logps.dtype) if "old_logps" in batch else logps.detach()
        n = batch["n_sequences"]
        loss, parts = per_token_loss(logps, old, advantages, ref, owner, n, self.loss)
        if "kl" in parts:
            self.metrics.add("kl", parts["kl"])
        for name, values in clip_metrics(parts["ratio"], advantages, owner, n, self.loss).items():
            self.metrics.add(name, values)
        return summed_loss(loss, owner, n, self.loss), batch["n_units"]

    # What Accelerate's preparation asks of a transformers model, answered by the model inside (as sft's objective).
    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()


def sampling_of(cfg: RunConfig) -> SamplingParams:
    """How completions are sampled: temperature, top_p, top_k as set; unset, TRL's GRPO defaults (1.0, 1.0, off)
    rather than chat's (LLaMA-Factory's 0.95, 0.7, 50), each recorded."""
    i, keys = cfg.infer, cfg.user_keys
    temperature = i.temperature if "temperature" in keys else 1.0
    top_p = i.top_p if "top_p" in keys else 1.0
    top_k = i.top_k if "top_k" in keys else 0
    cfg.decide("grpo_sampling", {"temperature": temperature, "top_p": top_p, "top_k": top_k},
               "completions are sampled at temperature, top_p, top_k as set; unset: TRL's GRPO defaults (1.0, 1.0, "
               "no top_k), not chat's; log-probs are taken at the same temperature, as TRL takes them")
    return SamplingParams(max_tokens=cfg.method.max_completion_length, temperature=temperature, top_p=top_p,
                          top_k=top_k)


def make_objective(model: torch.nn.Module, cfg: RunConfig) -> GRPOObjective:
    switched = disable_dropout(model)
    if switched:
        cfg.decide("dropout", 0.0, f"{switched} dropout layers set to 0 (lora_dropout included): the policy is "
                   "compared with the sampler and the reference on the same tokens")
    return GRPOObjective(model, cfg)


def roll_out(objective: GRPOObjective, window: list, step: int) -> None:
    """The Stage hook: generate and score the completions of every micro-batch of an optimizer step at once."""
    objective.roll_out([mb.batch for mb in window], step, [mb.ids for mb in window])
    for mb in window:
        mb.n_input_tokens = mb.batch["n_input_tokens"]


def evaluate_during_training(cfg: RunConfig, accelerator, objective, data, tokenizer, device) -> dict:
    """eval_loss and eval_reward, eval_rewards/<function>/mean, ... over the held-out prompts (padded batches)."""
    return evaluation.evaluate_examples(accelerator.unwrap_model(objective), data.eval,
                                        make_collator(cfg, tokenizer, None), cfg.train.per_device_eval_batch_size,
                                        device, accelerator.autocast)


GRPO = Stage(name="grpo", model_task=CAUSAL_LM, prepare_data=functools.partial(prepare_datasets, kind=PROMPTS),
             make_collator=make_collator, count_units=count_units, count_tokens=count_completion_tokens,
             make_objective=make_objective, evaluate=evaluate_during_training, roll_out=roll_out)
