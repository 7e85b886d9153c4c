"""The preference stages as `Stage` records: `stage: dpo` (DPO, IPO, ORPO, SimPO, hinge), `stage: kto`, `stage: rm`
(reward model). Their data comes from data/preference.py, the rest from this package's modules."""

from __future__ import annotations

import functools

from steadytune.data.preference import FEEDBACK, PAIRS
from steadytune.data.prepare import prepare_datasets
from steadytune.model.anatomy import CAUSAL_LM, SEQUENCE_SCORE
from steadytune.stages import evaluation, objectives
from steadytune.stages.base import Stage
from steadytune.stages.batches import (
    FEEDBACK_GROUPS,
    PAIR_GROUPS,
    SequenceCollator,
    count_answer_tokens,
    count_examples,
)


def _prepare(kind_name: str):
    def prepare(cfg, tokenizer, processor=None):   # processor: a vision-language model's (stage dpo's images)
        return prepare_datasets(cfg, tokenizer, {"pairs": PAIRS, "feedback": FEEDBACK}[kind_name], processor)
    return prepare


def _collator(groups):
    def make(cfg, tokenizer, packing_attention):
        return SequenceCollator(tokenizer.pad_token_id, groups, packing_attention, row_len=cfg.data.cutoff_len)
    return make


def _objective(cls_name: str, drop_dropout: bool):
    def make(model, cfg):
        if drop_dropout:
            switched = objectives.disable_dropout(model)
            if switched:
                cfg.decide("dropout", 0.0, f"{switched} dropout layers set to 0 (lora_dropout included): the policy is "
                           "compared with the reference on the same tokens, as LLaMA-Factory and TRL do")
        return getattr(objectives, cls_name)(model, cfg)
    return make


def _stage(name: str, task: str, kind: str, groups, objective: str, drop_dropout: bool) -> Stage:
    return Stage(name=name, model_task=task, prepare_data=_prepare(kind), make_collator=_collator(groups),
                 count_units=count_examples, count_tokens=count_answer_tokens,
                 make_objective=_objective(objective, drop_dropout),
                 evaluate=functools.partial(evaluation.evaluate_during_training, groups))


PREFERENCE_STAGES: dict[str, Stage] = {
    "dpo": _stage("dpo", CAUSAL_LM, "pairs", PAIR_GROUPS, "PairObjective", drop_dropout=True),
    "kto": _stage("kto", CAUSAL_LM, "feedback", FEEDBACK_GROUPS, "FeedbackObjective", drop_dropout=True),
    "rm": _stage("rm", SEQUENCE_SCORE, "pairs", PAIR_GROUPS, "RewardObjective", drop_dropout=False),
}
