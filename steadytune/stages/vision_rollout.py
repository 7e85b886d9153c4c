"""GRPO completions of prompts with images: transformers' `generate` on the vision-language model, each token drawn
by the decode engine's keyed sampler.

The decode engine (model/decode/) prefills token ids only; a prompt with images needs the model's vision tower and,
for Qwen-VL, its 3-D rope positions, which transformers' own `generate` works out (serve answers image requests the
same way: serve/media.py). What keeps the roll-out GRPO's is the draw: a logits processor replaces each step's
scores by the one token `sampling.sample_keyed` draws from them (the same temperature, top_p, top_k and keyed Gumbel
noise as the engine's), and greedy decoding takes it. So a completion depends on its key, the weights and its prompt
only, as the engine's do, and a resumed run or another process draws the same.

A prompt's group is one `generate` call: its num_generations rows share the prompt (no padding) and its pixels
(repeated per row, as transformers expects one image set per row).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from steadytune.data.multimodal.collate import batch_media
from steadytune.model.decode.sampling import FAILED_ROW, SamplingParams, sample_keyed
from steadytune.model.vision import type_id_inputs
from steadytune.stages.episodes import Generated


class KeyedDraw(LogitsProcessor):
    """Scores -> 0 for the token sample_keyed draws for each row (its key, the completion position), -inf elsewhere."""

    def __init__(self, params: SamplingParams, keys: torch.Tensor, prompt_length: int):
        self.params, self.keys, self.prompt_length = params, keys, prompt_length
        self.broken = torch.zeros(keys.shape[0], dtype=torch.bool, device=keys.device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        drawn = sample_keyed(scores.float(), self.params, self.keys, input_ids.shape[1] - self.prompt_length)
        failed = drawn == FAILED_ROW
        self.broken |= failed
        drawn = torch.where(failed, torch.zeros_like(drawn), drawn)
        out = torch.full_like(scores, -torch.inf)
        return out.scatter_(1, drawn[:, None], 0.0)


def repeat_pixels(pixels: dict, times: int) -> dict:
    """One prompt's pixel inputs for `times` rows of it: tensors of images (pixel_values, grids) repeated in order."""
    out = {}
    for key, value in pixels.items():
        out[key] = torch.cat([value] * times, dim=0) if isinstance(value, torch.Tensor) else value
    return out


@torch.no_grad()
def generate_with_images(model: torch.nn.Module, prompts: Sequence[Sequence[int]], pixels_of: Callable[[int], dict],
                         keys: Sequence[int], group_size: int, params: SamplingParams, stop_ids: Sequence[int],
                         pad_token_id: int) -> Generated:
    """Every row's completion; rows come in groups of `group_size` with the same prompt; `pixels_of(i)`: the pixel
    inputs of row i's prompt. The caller sets the model's mode and precision (eval.scoring's inference context)."""
    device = next(model.parameters()).device
    ids, truncated, nonfinite = [], [], []
    stops = set(stop_ids)
    for start in range(0, len(prompts), group_size):
        prompt = list(prompts[start])
        rows = torch.tensor([prompt] * group_size, dtype=torch.long, device=device)
        row_keys = torch.tensor(list(keys[start:start + group_size]), dtype=torch.long, device=device)
        draw = KeyedDraw(params, row_keys, len(prompt))
        pixels = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                  for k, v in repeat_pixels(pixels_of(start), group_size).items()}
        out = model.generate(input_ids=rows, attention_mask=torch.ones_like(rows), **pixels,
                             **type_id_inputs(model, rows), logits_processor=LogitsProcessorList([draw]),
                             do_sample=False, temperature=None, top_p=None, top_k=None,
                             max_new_tokens=params.max_tokens, eos_token_id=sorted(stops) or None,
                             pad_token_id=pad_token_id)
        for r in range(group_size):
            new = out[r, len(prompt):].tolist()
            end = next((j for j, t in enumerate(new) if t in stops), None)
            ids.append(new[:end + 1] if end is not None else new)
            truncated.append(end is None)
            nonfinite.append(bool(draw.broken[r]))
    return Generated(ids, truncated, nonfinite)


def pixel_source(media: Any) -> Callable[[dict], dict]:
    """example -> its prompt's pixel inputs (pixel_values, grids; what the processor makes from its images)."""
    return lambda example: batch_media([example], media)
