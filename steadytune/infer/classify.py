"""A classification run answers with a label and how sure it is: label scoring (`scoring.score_labels`), with
the exact training prompt, turned into a probability over the label set.

Two kinds of classification run: one with a `prompt_template` (each text is put into it, as its rows were), and one
trained on conversations whose answers are the label words (sharegpt / openai rows, a vision-language run's images
among them): there a text is the user's message, rendered by the chat template as training rendered its rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from steadytune.data.encode import encode_label_targets
from steadytune.eval.scoring import build_prompts, score_labels
from steadytune.infer.generate import conversation_ids


@dataclass
class LabelScorer:
    model: torch.nn.Module
    tokenizer: Any
    template: Any
    label_names: list[str]
    prompt_template: str | None   # None: a conversation run (module docstring)
    cutoff_len: int

    def __post_init__(self) -> None:
        self.targets = encode_label_targets(self.template, self.tokenizer, self.label_names)
        # The prompt budget the data pipeline used in training: cutoff_len minus the longest label target.
        self.max_prompt_len = self.cutoff_len - max(map(len, self.targets))

    def prompts(self, texts: Sequence[str]) -> list[list[int]]:
        if self.prompt_template is None:
            return [conversation_ids(self.template, self.tokenizer, [{"role": "user", "content": text}])
                    for text in texts]
        return build_prompts(self.tokenizer, list(texts), self.template, self.prompt_template, self.max_prompt_len)

    def probabilities(self, prompts: Sequence[Sequence[int]], batch_size: int = 8,
                      progress: bool = False, media: Sequence[dict] | None = None) -> torch.Tensor:
        """[n, n_labels]: P(label | prompt) over the label set (softmax of each label's summed log-probability);
        `media`: each prompt's pixel inputs (a vision-language model's images)."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        scores = score_labels(self.model, prompts, self.targets, batch_size, pad, progress, media=media)
        return torch.softmax(scores, dim=1)

    def answer(self, text: str) -> tuple[str, float, dict[str, float]]:
        return self.answer_prompt(self.prompts([text])[0])

    def answer_prompt(self, ids: Sequence[int], pixels: dict | None = None) -> tuple[str, float, dict[str, float]]:
        """The label of one encoded prompt (with its images' pixel inputs, if any)."""
        probs = self.probabilities([ids], media=[pixels] if pixels else None)[0]
        best = int(probs.argmax())
        return self.label_names[best], float(probs[best]), {n: float(p) for n, p in zip(self.label_names, probs)}
