"""Scoring with a trained reward model (stage rm).

What `train` saves for stage rm is transformers' sequence-classification format with one output: with LoRA, an
adapter whose `adapter_config.json` says task_type SEQ_CLS and whose weights include the score head
(modules_to_save), loadable as
    AutoModelForSequenceClassification.from_pretrained(base, num_labels=1) + PeftModel.from_pretrained(.., folder);
with full fine-tuning, a `*ForSequenceClassification` model folder. The reward of a conversation is the score head
on the hidden state of its last token (the end of the answer, template's end-of-turn included), as in training.

    scorer = RewardScorer.from_run(load_config("rm.yaml"))
    scorer.score([{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}])
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from steadytune.config import RunConfig
from steadytune.data.encode import infer_seqlen
from steadytune.data.preference import prompt_and_answer_ids
from steadytune.data.templates import ASSISTANT_SIDE, Template, get_template
from steadytune.errors import UserError
from steadytune.infer.loading import load_trained, trained_folder
from steadytune.model.anatomy import SEQUENCE_SCORE
from steadytune.stages.batches import SequenceCollator
from steadytune.stages.objectives import sequence_scores


class RewardScorer:
    def __init__(self, model: torch.nn.Module, tokenizer: Any, template: Template, cutoff_len: int,
                 device: Optional[torch.device] = None, batch_size: int = 8):
        self.model, self.tokenizer, self.template = model.eval(), tokenizer, template
        self.cutoff_len, self.batch_size = cutoff_len, batch_size
        self.device = device or next(model.parameters()).device
        self.collate = SequenceCollator(tokenizer.pad_token_id, groups=(("", (0,)),))

    @classmethod
    def from_run(cls, cfg: RunConfig, batch_size: int = 8) -> "RewardScorer":
        """The reward model a `stage: rm` run saved in output_dir (or adapter_name_or_path)."""
        folder, kind = trained_folder(cfg)
        model, tokenizer = load_trained(cfg, folder, kind, task=SEQUENCE_SCORE)
        return cls(model, tokenizer, get_template(cfg.data.template, tokenizer), cfg.data.cutoff_len,
                   batch_size=batch_size)

    def encode(self, conversation: dict) -> dict:
        """A conversation {"messages": [...ending with the answer], "system"?, "tools"?} as a one-sequence example,
        truncated as training truncates."""
        messages = conversation["messages"]
        if not messages or messages[-1]["role"] not in ASSISTANT_SIDE:
            raise UserError("reward scoring: each conversation must end with the assistant answer to score")
        prompt, answer = prompt_and_answer_ids(self.template, self.tokenizer, messages[:-1], messages[-1],
                                               conversation.get("system"), conversation.get("tools"))
        source, target = infer_seqlen(len(prompt), len(answer), self.cutoff_len)
        ids = prompt[:source] + answer[:target]
        return {"input_ids": ids, "labels": ids, "lengths": [len(ids)]}

    @torch.no_grad()
    def score(self, conversations: list[dict]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(conversations), self.batch_size):
            examples = [self.encode(c) for c in conversations[start:start + self.batch_size]]
            batch = {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v)
                     for k, v in self.collate(examples).items()}
            scores += sequence_scores(self.model, batch, len(examples)).tolist()
        return scores
