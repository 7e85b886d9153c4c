"""`stage: grpo`: online reinforcement learning with verifiable rewards (GRPO and its 2026 family of losses; TRL's key
names), generating with our own batched decode engine on the policy's current weights, in the training process.

One optimizer step, as the recipe's loop runs it (train.forward_backward):
1. `roll_out` (the Stage's hook, before the step counts its units): the prompts of every micro-batch of the step are
   completed `num_generations` times each, in one batch, by model/decode/complete.Decoder on the model being trained
   (LoRA applied, not merged; eval mode, no autograd), sampled at `temperature` / `top_p` / `top_k`, each
   completion from noise keyed by (seed, step, the prompt's index in the training data, the completion's number):
   the same completions on one process or several, in any batch, and in a resumed run. With `tools`, each row is a
   multi-turn episode, tool calls answered between its turns (stages/episodes.py); prompts with images are
   completed by transformers' generate with the same keyed draw (stages/vision_rollout.py);
2. the completions are decoded and scored by the reward functions (stages/rewards.py), and each prompt's group of
   completions turned into advantages (the reward less the group's mean, over its std); with dynamic_sampling,
   groups without spread are replaced by other prompts' (stages/grpo_rollout.py);
3. each micro-batch becomes a training batch of prompt + completion sequences (padded, or packed as sft packs), the
   completion tokens labelled (stop token included, tool results not);
4. the objective's forward (once per micro-batch, under DDP's wrapper): every completion token's log-prob at the
   sampling temperature, the reference's (the same model with its adapter switched off, no second copy:
   stages/reference.py) when beta > 0, and TRL's per-token loss summed as loss_type says (stages/grpo_losses.py).

Asynchronous roll-outs (stages/rollout_ahead.py; on a GPU by default, `async_staleness`): steps 1-3 of step n+1 run
while step n trains, the generation in a background thread, the scoring and the sampling policy's log-probs
(`old_logps`, the importance ratio's denominator) after step n's backward; step n+1 then trains one optimizer step
off-policy, importance-corrected. The start line says which path a run takes, and why.

The step's units (what the recipe divides the summed loss by, over every rank) are completions for grpo, dr_grpo,
sapo and luspo, completion tokens for dapo and cispo: only known after generation, which is why the roll-out comes
before the count.

Metrics (metrics.jsonl with each logged step, TRL's names; `eval_` + the same during evaluation): reward, reward_std,
rewards/<function>/mean and /std, completions/mean_length (the model's own tokens), completions/clipped_ratio (no stop
token within max_completion_length), frac_reward_zero_std (completions whose group's rewards are all equal: no
signal), kl, clip_ratio/low_mean, /high_mean, /region_mean (cispo: cispo_clip_ratio), tools/call_frequency and
/failure_frequency (tool episodes), dynamic_sampling/replaced (the share of groups replaced) and /rounds, and
rollouts/staleness (optimizer steps between the weights that sampled a step's completions and the weights it trains).

Evaluation (during training and `steadytune eval`): the held-out prompts are completed the same way, keyed by the
prompt itself rather than the step (so two evaluations differ by the weights only), and scored by the same
functions.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from steadytune.config import RunConfig
from steadytune.data.packing import PackedCollator
from steadytune.data.prepare import prepare_datasets, template_for
from steadytune.data.prompts import PROMPTS
from steadytune.data.templates import Template
from steadytune.errors import UserError
from steadytune.eval.scoring import inference, precision_context
from steadytune.model.anatomy import CAUSAL_LM, run_body
from steadytune.model.moe.routing import routing_of, routing_token_mask
from steadytune.model.decode.complete import Decoder
from steadytune.model.decode.sampling import SamplingParams, mix_key
from steadytune.model.vision import is_vision_model
from steadytune.stages import evaluation
from steadytune.stages.base import Stage, StepAhead
from steadytune.stages.batches import _PaddedWithSegments
from steadytune.stages.episodes import Generated, check_tools_found, load_toolbox, run_episodes
from steadytune.stages.grpo_losses import LossSettings, clip_metric_names, clip_metrics, per_token_loss, summed_loss
from steadytune.stages.grpo_rollout import (
    RollOut,
    completion_texts,
    flat_groups,
    lay_out,
    merge_generated,
    replacement_index,
    replacement_keys,
    score,
    splice,
)
from steadytune.stages.logprobs import answer_logprobs, token_logprobs
from steadytune.stages.objectives import MetricSums, disable_dropout
from steadytune.stages.reference import build_reference
from steadytune.stages.rewards import check_reward_names, group_advantages, load_reward_functions, nanstd
from steadytune.stages.rollout_ahead import Background, Pending, choose_async, usable
from steadytune.stages.vision_rollout import generate_with_images, pixel_source
from steadytune.training.batches import to_device
from steadytune.training.loss import model_inputs
from steadytune.training.monitor import MetricsLog
from steadytune.training.vision_data import MediaAdder, pair_media

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
    template: Template
    stop_ids: list[int]
    pad_token_id: int
    collate: Callable[[list[dict]], dict]   # sft-style sequences -> a padded or packed batch with segment_ids
    media: Any = None                       # a vision run's MediaContext: the prompts' images become pixels


class PromptCollator:
    def __init__(self, cfg: RunConfig, tokenizer: Any, packing_attention: Optional[str]):
        self.template = template_for(cfg, tokenizer)
        self.tokenizer = tokenizer
        self.stop_ids = sorted({*self.template.stop_token_ids(), *([tokenizer.eos_token_id]
                                                                  if tokenizer.eos_token_id is not None else [])})
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if packing_attention is None:
            self.sequences = _PaddedWithSegments(self.pad)
        else:
            row = cfg.data.cutoff_len + cfg.method.max_completion_length
            self.sequences = PackedCollator(self.pad, row_len=row, attention=packing_attention, segment_ids=True)
        self.media = None

    def with_media(self, add_media: Optional[MediaAdder]) -> "PromptCollator":
        """This collator for prompts with images: each training batch padded (packing rows of images is not built)
        and completed by `add_media(batch, its sequences)`: pixels, token types, Qwen-VL's positions
        (training/vision_data.pair_media); the roll-out makes the prompts' pixels with its MediaContext."""
        if add_media is None:
            return self
        if not isinstance(self.sequences, _PaddedWithSegments):
            raise UserError("packing: grpo prompts with images are trained padded (packing: false, neat_packing: false)")
        padded = self.sequences
        self.sequences = lambda sequences: add_media(padded(sequences), sequences)
        self.media = add_media.ctx
        return self

    def __call__(self, examples: list[dict]) -> dict:
        return {"prompts": Prompts(list(examples), self.tokenizer, self.template, self.stop_ids, self.pad,
                                   self.sequences, self.media),
                "n_examples": len(examples)}


def make_collator(cfg: RunConfig, tokenizer: Any, packing_attention: Optional[str]) -> PromptCollator:
    return PromptCollator(cfg, tokenizer, packing_attention)


def count_units(batch: dict) -> int:
    """The loss normaliser's share of a rolled-out micro-batch: its completions (grpo, dr_grpo, sapo, luspo) or their
    tokens (dapo, cispo)."""
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
        self.toolbox = load_toolbox(m.tools, m.tool_timeout)
        self.reference = build_reference(model, cfg) if m.beta != 0.0 else None
        if self.reference is None:
            cfg.decide("ref_model", None, "beta: 0 (TRL's default): no KL term, so no reference forward")
        self.sampling = sampling_of(cfg)
        self.seed = cfg.train.seed
        self.loss = LossSettings.of(m)
        self.device = next(model.parameters()).device
        self.vision = is_vision_model(model)
        checkpointing = bool(cfg.decisions.get("gradient_checkpointing", {}).get("value"))
        compiled = bool(cfg.decisions.get("torch_compile", {}).get("value"))
        self.ahead, why = choose_async(m.async_staleness, self.device, checkpointing, self.toolbox is not None,
                                       self.vision, compiled=compiled)
        cfg.decide("rollouts", "asynchronous" if self.ahead else "synchronous", why)
        self._background = Background(self.device) if self.ahead else None
        self._pending: Optional[Pending] = None
        names = ["reward"] + [f"rewards/{f.name}/mean" for f in self.functions] + [
            "completions/mean_length", "completions/clipped_ratio", "completions/nonfinite_ratio",
            "frac_reward_zero_std", "kl", *clip_metric_names(m.loss_type), "tools/call_frequency",
            "tools/failure_frequency", "dynamic_sampling/replaced", "dynamic_sampling/rounds", "rollouts/staleness"]
        spreads = {"reward": "reward_std", **{f"rewards/{f.name}/mean": f"rewards/{f.name}/std"
                                              for f in self.functions}}
        self.train_metrics, self.eval_metrics = MetricSums(tuple(names), spreads), MetricSums(tuple(names), spreads)
        self._decoder: list[Decoder] = []   # made at the first roll-out (a plain list: not a submodule)
        self._no_signal = 0                 # training roll-outs in a row without a group whose rewards differ
        self._streak_range: Optional[tuple[float, float]] = None   # the lowest and highest reward in that streak
        self._said_nonfinite = False
        self._said_fresh = False            # said that a resumed asynchronous run generated a step afresh
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

    # --- 1: generate ------------------------------------------------------------------------------------------
    def generate(self, prompts: Prompts, examples: list[dict], keys: list[int], where: str,
                 background: bool = False) -> Generated:
        """Every completion of `examples` (each prompt's group in a row), by the engine the run uses: the decode
        engine, its turns with tool calls between them, or transformers' generate for prompts with images. In the
        main thread under `inference` (eval mode, no autograd); in the roll-out thread without touching the model's
        mode, which the training step shares (stages/rollout_ahead.py)."""
        m = self.method
        if not self._decoder:
            self._decoder.append(Decoder(self.model, prompts.pad_token_id))
        decoder = self._decoder[0]
        # With asynchronous roll-outs every generation runs on the roll-out stream, the main thread's too
        stream = self._background.on_stream() if self._background is not None and not background else \
            contextlib.nullcontext()
        with stream, (inference(self.model) if not background else _background_inference(self.model)):
            if prompts.media is not None and any(e.get("images") or e.get("videos") for e in examples):
                pixels = pixel_source(prompts.media)
                return generate_with_images(self.model, [e["input_ids"] for e in examples],
                                            lambda i: pixels(examples[i]), keys, m.num_generations,
                                            replace(self.sampling, max_tokens=m.max_completion_length),
                                            prompts.stop_ids, prompts.pad_token_id)

            def turn(contexts, max_new_tokens, row_keys):
                return decoder.generate(contexts, max_new_tokens, self.sampling, prompts.stop_ids, row_keys)

            if self.toolbox is None:
                return Generated.of(turn([e["input_ids"] for e in examples], m.max_completion_length, keys))
            for e in examples:
                self.toolbox.check_definitions(e.get("tools"))
            return run_episodes(turn, [e["input_ids"] for e in examples], keys, prompts.template, prompts.tokenizer,
                                self.toolbox, m.max_completion_length, m.max_tool_calling_iterations, where)

    # --- 2: score (and dynamic sampling) ------------------------------------------------------------------------
    def finish(self, prompts: list[Prompts], examples: list[dict], ids: Optional[list[int]], generated: Generated,
               step: int, pool: Optional[list]) -> RollOut:
        """The roll-out scored, its flat groups replaced when dynamic_sampling asks (training only), its advantages
        made. `ids`: each completion's example index in the training data (None: evaluation)."""
        m, G, first = self.method, self.method.num_generations, prompts[0]
        where = f"step {step}" if step != EVAL_STEP else f"the evaluation after step {self.last_step}"
        weights = [f.weight for f in self.functions]
        batch_std = self._batch_std if m.scale_rewards == "batch" else None
        texts = completion_texts(first.tokenizer, generated)
        resample = bool(m.dynamic_sampling and ids is not None and pool)
        # With resampling, the step-wide std (scale_rewards: batch, over every rank) is taken once, at the end
        per_function, advantages = score(self.functions, weights, examples, generated, texts, G, m.scale_rewards,
                                         where, m.reward_timeout, None if resample else batch_std)
        groups = len(examples) // G
        replaced, rounds = [False] * groups, 1
        if resample:
            original = list(ids[::G])
            for round_ in range(1, m.max_num_gen_batches):
                flat = flat_groups(advantages.no_signal, G)
                if not flat:
                    break
                rounds += 1
                chosen = [pool[replacement_index(self.seed, step, original[g], round_, len(pool))] for g in flat]
                new_examples = [e for e in chosen for _ in range(G)]
                keys = [k for g in flat for k in replacement_keys(self.seed, step, original[g], round_, G)]
                new = self.generate(first, new_examples, keys, where)
                new_texts = completion_texts(first.tokenizer, new)
                new_scores, new_adv = score(self.functions, weights, new_examples, new, new_texts, G, "group", where,
                                            m.reward_timeout)
                for j, g in enumerate(flat):
                    if bool(new_adv.no_signal[j * G]):
                        continue   # no spread either: the group stays, to be tried again next round
                    rows = slice(j * G, (j + 1) * G)
                    splice(examples, g, G, new_examples[rows])
                    splice(texts, g, G, new_texts[rows])
                    merge_generated(generated, g, G, Generated(new.ids[rows], new.truncated[rows], new.nonfinite[rows],
                                                               new.trained[rows] if new.trained else None,
                                                               new.tool_calls[rows], new.tool_failures[rows]))
                    per_function[g * G:(g + 1) * G] = new_scores[rows]
                    replaced[g] = True
                advantages = group_advantages(per_function, weights, G, "group")
            advantages = group_advantages(per_function, weights, G, m.scale_rewards, batch_std)
        return RollOut(examples, generated, texts, per_function, advantages, replaced, rounds)

    def examples_and_keys(self, prompts: list[Prompts], step: int, ids: Optional[list[list[int]]]
                          ) -> tuple[list[dict], list[int], Optional[list[int]]]:
        """Each completion's example, sampling key and example index (None: evaluation). Keys: (seed, step, the
        example's index, the completion's number); evaluation's (seed, the prompt's tokens, how many times it came
        before in this call, the completion's number)."""
        G, examples, keys, seen, owners = self.method.num_generations, [], [], {}, []
        for k, p in enumerate(prompts):
            for i, example in enumerate(p.examples):
                if ids is not None:
                    who = (step, ids[k][i])
                    owners += [ids[k][i]] * G
                else:
                    tokens = tuple(example["input_ids"])
                    seen[tokens] = seen.get(tokens, -1) + 1
                    who = (EVAL_STEP, mix_key(*tokens), seen[tokens])
                examples += [example] * G
                keys += [mix_key(self.seed, *who, g) for g in range(G)]
        return examples, keys, (owners if ids is not None else None)

    def keys_for(self, prompts: list[Prompts], step: int, ids: Optional[list[list[int]]]) -> list[int]:
        return self.examples_and_keys(prompts, step, ids)[1]

    # --- 3: lay out -------------------------------------------------------------------------------------------
    def lay_out(self, batches: list[dict], prompts: list[Prompts], rollout: RollOut) -> None:
        G, start = self.method.num_generations, 0
        for batch, p in zip(batches, prompts):
            rows = range(start, start + len(p.examples) * G)
            start = rows.stop
            lay_out(batch, p.collate, rollout, rows, self.method.loss_type, self.method.mask_truncated_completions)

    # --- the roll-out of a step: synchronous, or the one made ahead -------------------------------------------------
    @torch.no_grad()
    def roll_out(self, batches: list[dict], step: int, ids: Optional[list[list[int]]] = None,
                 ahead: Optional[StepAhead] = None) -> Optional[Callable[..., None]]:
        """Complete, score and lay out every micro-batch of `batches` (in place; see the module docstring), or take
        what the previous step generated ahead for them. `ids`: each micro-batch's example indices in the training
        data (the completions' keys); None for evaluation. Returns what the recipe calls after the backward when the
        next step's roll-out is being generated meanwhile (asynchronous roll-outs), else None."""
        prompts: list[Prompts] = [b["prompts"] for b in batches]
        training = ids is not None
        ok = False
        if self.ahead and training:   # (an evaluation between two steps leaves the next step's roll-out alone)
            pending, self._pending = self._pending, None
            if pending is not None and pending.error is not None and pending.step == step and pending.window_ids == ids:
                raise pending.error   # its roll-out failed while the previous step trained (settle)
            ok, _ = usable(pending, step, ids, step - 1, self.method.async_staleness)
        if ok:
            rollout, staleness = pending.rollout, step - 1 - pending.version
        else:
            if self.ahead and training and pending is None and step > 1 and not self._said_fresh and self._speaks:
                self._said_fresh = True   # a resumed run: the uninterrupted one trained this step on older samples
                print(f"note: grpo: step {step}'s completions are generated now, from the weights of the checkpoint "
                      "the run resumed from, not one step ahead as the uninterrupted run generated them: an "
                      "asynchronous run resumes as a continuation, not step for step (async_staleness: 0 resumes "
                      "exactly)", file=sys.stderr, flush=True)
            examples, keys, owners = self.examples_and_keys(prompts, step, ids)
            where = f"step {step}" if training else f"the evaluation after step {self.last_step}"
            generated = self.generate(prompts[0], examples, keys, where)
            rollout = self.finish(prompts, examples, owners, generated, step, ahead.pool if ahead else None)
            self.lay_out(batches, prompts, rollout)
            staleness = 0
            if self.ahead and training and self.reference is not None:
                self.log_probs_ahead(batches, ahead, old=False)   # nothing may switch the adapter while the thread runs
        if training:
            self.last_step = step
            self.metrics.add("rollouts/staleness", torch.tensor([float(staleness)]))
        self.record(rollout, step)
        if not (self.ahead and training and ahead is not None and ahead.upcoming is not None):
            return None
        return self.launch_ahead(step, ahead)

    def launch_ahead(self, step: int, ahead: StepAhead) -> Callable[..., None]:
        """Start generating step + 1's completions in the background; -> `settle`, which the recipe calls after this
        step's backward: it waits for them, scores and lays them out, and takes their sampling log-probs."""
        upcoming = ahead.upcoming()
        batches = [mb.batch for mb in upcoming]
        prompts: list[Prompts] = [b["prompts"] for b in batches]
        ids = [list(mb.ids) for mb in upcoming]
        examples, keys, owners = self.examples_and_keys(prompts, step + 1, ids)
        where = f"step {step + 1}"
        self._background.launch(lambda: self.generate(prompts[0], examples, keys, where, background=True))
        pending = Pending(step + 1, ids, version=step - 1)

        def settle(abandon: bool = False) -> None:
            # A failure here (a reward function that raises or hangs, a decode that fails) is step n+1's: kept with
            # its roll-out and raised when step n+1 takes it, so that step n's update and checkpoint happen first,
            # as in a synchronous run (raised here, it ended the run with step n's update lost and no checkpoint).
            try:
                generated = self._background.join()
                if abandon:
                    return
                with torch.no_grad():
                    pending.rollout = self.finish(prompts, examples, owners, generated, step + 1, ahead.pool)
                    self.lay_out(batches, prompts, pending.rollout)
                    self.log_probs_ahead(batches, ahead, old=True)
            except Exception as error:   # noqa: BLE001 - raised by the step it belongs to (roll_out)
                if abandon:
                    return   # the step failed already: its error is the one to raise
                pending.error = error
            except BaseException:
                if abandon:
                    return
                raise   # a stop request (RunInterrupted, KeyboardInterrupt) is this step's
            self._pending = pending
        return settle

    @torch.no_grad()
    def log_probs_ahead(self, batches: list[dict], ahead: StepAhead, old: bool) -> None:
        """Each batch's completion tokens' log-probs, computed now with the weights as they are: `old_logps` (the
        sampling policy's, for the importance ratio: these are the weights that generated them) when `old`, and the
        reference's (beta > 0), so that no forward later switches the adapter while a roll-out thread decodes."""
        for batch in batches:
            inputs = to_device({k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}, self.device)
            with ahead.autocast():
                if old:
                    batch["old_logps"] = token_logprobs(self.model, inputs, self.temperature)[0].float()
                if self.reference is not None:
                    batch["ref_logps"] = self.reference.token_logprobs(self.model, inputs, self.temperature).float()

    # --- metrics and logs ----------------------------------------------------------------------------------------
    def record(self, rollout: RollOut, step: int) -> None:
        """The step's (or evaluation's) reward and completion metrics, its completions log, the no-signal watch."""
        g, advantages = rollout.generated, rollout.advantages
        rewards = advantages.rewards
        self.metrics.add("reward", rewards[~torch.isnan(rewards)])
        for j, f in enumerate(self.functions):
            values = rollout.per_function[:, j]
            self.metrics.add(f"rewards/{f.name}/mean", values[~torch.isnan(values)])
        self.metrics.add("completions/mean_length", torch.tensor([float(g.model_tokens(i)) for i in range(len(g.ids))]))
        self.metrics.add("completions/clipped_ratio", torch.tensor([float(t) for t in g.truncated]))
        self.metrics.add("frac_reward_zero_std", advantages.std_zero.float())
        self.metrics.add("completions/nonfinite_ratio", torch.tensor([float(b) for b in g.nonfinite]))
        if self.toolbox is not None:
            self.metrics.add("tools/call_frequency", torch.tensor([float(c) for c in g.tool_calls]))
            calls, failed = sum(g.tool_calls), sum(g.tool_failures)
            self.metrics.add("tools/failure_frequency", torch.tensor([1.0] * failed + [0.0] * (calls - failed)))
        if self.method.dynamic_sampling and self.training:
            self.metrics.add("dynamic_sampling/replaced", torch.tensor([float(r) for r in rollout.replaced]))
            self.metrics.add("dynamic_sampling/rounds", torch.tensor([float(rollout.rounds)]))
        if any(g.nonfinite) and not self._said_nonfinite and self._speaks:
            self._said_nonfinite = True
            print(f"warning: grpo: {sum(g.nonfinite)} of {len(g.nonfinite)} completions had a token drawn from "
                  "logits that were not finite (drawn uniformly, so they are noise): generation on this model and "
                  "device is broken; try STEADYTUNE_CUDA_GRAPHS=0, or report it with `steadytune doctor`'s output "
                  "(completions/nonfinite_ratio in metrics.jsonl counts them)", file=sys.stderr, flush=True)
        if self.training:
            self._watch_signal(rewards, advantages.no_signal, g, rollout.texts[0] if rollout.texts else "")
        self._log_completions(step, rollout)

    def _batch_std(self, rewards: torch.Tensor) -> torch.Tensor:
        """scale_rewards: batch: the std of every rank's rewards of the step (TRL gathers them all)."""
        real = rewards[~torch.isnan(rewards)].double()
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()) or not self.training:
            return nanstd(rewards)
        totals = torch.stack([real.sum(), (real ** 2).sum(), torch.tensor(float(real.numel()), dtype=torch.double)])
        totals = totals.to(self.device)
        torch.distributed.all_reduce(totals)
        s, sq, n = totals.tolist()
        if n < 2:
            return torch.tensor(float("nan"))
        return torch.tensor(max(sq / n - (s / n) ** 2, 0.0) * n / (n - 1)).sqrt().float()

    def _log_completions(self, step: int, rollout: RollOut) -> None:
        """log_completions: one JSON line per completion of a logged step's roll-out (the steps whose metrics are
        logged: 1 and every logging_steps) and of every evaluation, with each reward function's value (null where
        it returned None) and the advantage; appended, so a resumed run continues the file."""
        if self.completions_log is None:
            return
        split = "train" if self.training else "eval"
        if split == "train" and step != 1 and step % self.logging_steps:
            return
        names = [f.name for f in self.functions]
        g = rollout.generated
        for i, (example, text) in enumerate(zip(rollout.examples, rollout.texts)):
            rewards = {n: (None if math.isnan(v) else v) for n, v in zip(names, rollout.per_function[i].tolist())}
            advantage = float(rollout.advantages.advantages[i])
            line = {"step": self.last_step, "split": split, "prompt": example["prompt"], "completion": text,
                    "rewards": rewards, "advantage": None if math.isnan(advantage) else advantage,
                    "length": g.model_tokens(i), "truncated": bool(g.truncated[i])}
            if g.tool_calls:
                line["tool_calls"] = g.tool_calls[i]
            self.completions_log.write(line)

    def _watch_signal(self, rewards: torch.Tensor, no_signal: torch.Tensor, generated: Generated, sample: str) -> None:
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
        cut = sum(generated.truncated) / max(len(generated.truncated), 1)
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
        if "input_ids" not in batch:
            self.roll_out([batch], EVAL_STEP)
            batch.update(to_device({k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}, self.device))
        # A mixture of experts records its routing (and adds the load-balancing loss when asked) in training steps
        routing = routing_of(self.model) if torch.is_grad_enabled() else None
        outputs = run_body(self.model, model_inputs(batch), use_cache=False,
                           **({"output_router_logits": True} if routing is not None else {}))
        logps, owner = answer_logprobs(self.model, outputs.last_hidden_state, batch, self.temperature)
        advantages = batch["advantages"].to(logps.dtype)[owner]
        if "ref_logps" in batch:   # computed ahead (asynchronous roll-outs): see log_probs_ahead
            ref = batch["ref_logps"].to(logps.dtype)
        else:
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
        total = summed_loss(loss, owner, n, self.loss)
        if routing is not None:   # moe_aux_loss_coef x the load-balancing loss, for each of the micro-batch's units
            aux = routing.add(outputs.router_logits, routing_token_mask(batch), batch["n_units"])
            if aux is not None:
                total = total + aux
        return total, batch["n_units"]

    # What Accelerate's preparation asks of a transformers model, answered by the model inside (as sft's objective).
    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()


@contextlib.contextmanager
def _background_inference(model: torch.nn.Module):
    """The roll-out thread's inference: no autograd and the model's precision (both thread-local), the model's
    train/eval mode left as the training step has it."""
    with torch.inference_mode(), precision_context(model):
        yield


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


def roll_out(objective: GRPOObjective, window: list, step: int, ahead: Optional[StepAhead] = None
             ) -> Optional[Callable[..., None]]:
    """The Stage hook: generate and score the completions of every micro-batch of an optimizer step at once (or take
    those generated during the step before); -> the call that finishes the next step's, when one runs ahead."""
    settle = objective.roll_out([mb.batch for mb in window], step, [list(mb.ids) for mb in window], ahead)
    for mb in window:
        mb.n_input_tokens = mb.batch["n_input_tokens"]
    return settle


def evaluate_during_training(cfg: RunConfig, accelerator, objective, data, tokenizer, device) -> dict:
    """eval_loss and eval_reward, eval_rewards/<function>/mean, ... over the held-out prompts (padded batches)."""
    collate = make_collator(cfg, tokenizer, None)
    media = getattr(data, "media", None)
    if media is not None:   # prompts with images: each eval sequence with its pixels
        collate = collate.with_media(pair_media(data, accelerator.unwrap_model(objective).model))
    return evaluation.evaluate_examples(accelerator.unwrap_model(objective), data.eval, collate,
                                        cfg.train.per_device_eval_batch_size, device, accelerator.autocast)


def prepare_prompts(cfg: RunConfig, tokenizer, processor=None):
    """The prompts, after the reward functions and tools named are found (a mistyped name was said only after the
    model had loaded); their code is imported once, when the objective is made."""
    check_reward_names(cfg.method)
    check_tools_found(cfg.method.tools)
    return prepare_datasets(cfg, tokenizer, kind=PROMPTS, processor=processor)


GRPO = Stage(name="grpo", model_task=CAUSAL_LM, prepare_data=prepare_prompts,
             make_collator=make_collator, count_units=count_units, count_tokens=count_completion_tokens,
             make_objective=make_objective, evaluate=evaluate_during_training, roll_out=roll_out)
