"""Model + examples -> predictions and metrics: classification by label scoring, or by generation.

A generative classifier answers with a label word. Instead of generating and parsing text, we *score* each
label: the sum of log-probabilities of its full target token sequence (label word + end-of-sequence) after
the prompt. That is exact for labels of several tokens (seed 003's "消极" splits into two) and never
produces an unparseable answer. Generation is kept as an option, to compare with what a user would see.

Speed: one row per (prompt, label) pair, right-padded and sorted by length so a batch carries little
padding; the output head (262k columns for Gemma 3) runs only at the few positions that predict a label
token, never at every position.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F

from steadytune.data.encode import encode_classification_prompt, encode_label_targets
from steadytune.errors import UserError
from steadytune.eval.metrics import classification_report
from steadytune.model.anatomy import decoder_body, final_logit_softcap, output_head
from steadytune.model.decode.generate import generate_all, params_from_generate_kwargs
from steadytune.model.media_features import run_multimodal, select_images
from steadytune.model.vision import (
    concat_pixels,
    encode_media,
    images_in,
    is_vision_model,
    type_id_inputs,
)


def _precision_context(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """bf16/fp16 weights (possibly with fp32 LoRA adapters) run under autocast of that dtype; fp32 runs as is."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    for low in (torch.bfloat16, torch.float16):
        if low in dtypes:
            return torch.autocast(device_type=_device_of(model).type, dtype=low)
    return contextlib.nullcontext()


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextlib.contextmanager
def _inference(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode, no autograd, the model's precision; the train/eval mode is restored afterwards, so the
    training loop can call this between steps."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), _precision_context(model):
            yield
    finally:
        model.train(was_training)


# `serve` runs its forwards the same way (eval mode, no autograd, the model's precision).
inference = _inference
# The model's precision alone (autocast is per thread): GRPO's roll-out thread, which leaves the model's mode alone.
precision_context = _precision_context


def _length_sorted_batches(prompts: Sequence[Sequence[int]], batch_size: int, progress: bool,
                           desc: str) -> Iterable[list[int]]:
    """Prompt indices in batches of `batch_size`, in order of prompt length, so a batch carries little padding."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    if progress:
        from tqdm.auto import tqdm
        return tqdm(batches, desc=desc, unit="batch", dynamic_ncols=True)
    return batches


def _check_scoring_inputs(prompts: Sequence[Sequence[int]], label_targets: Sequence[Sequence[int]]) -> None:
    if not label_targets:
        raise ValueError("no label targets to score")
    for j, target in enumerate(label_targets):
        if len(target) == 0:
            raise ValueError(f"label {j} has an empty target token sequence")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty: the first label token needs a position to be predicted from")


def _score_chunk(model: torch.nn.Module, prompts: list[Sequence[int]], label_targets: Sequence[Sequence[int]],
                 pad_token_id: int, device: torch.device, media: list[dict] | None = None) -> torch.Tensor:
    """[len(prompts), n_labels] summed log-probabilities, one forward pass over every (prompt, label) row. `media`:
    each prompt's pixel inputs (a vision-language model's prompts with images), encoded once per prompt."""
    rows = [list(p) + list(t) for p in prompts for t in label_targets]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    # Where each target token sits: position t predicts token t+1, so label token k of a row whose prompt
    # has P tokens is predicted at position P-1+k.
    row_index, position, token = [], [], []
    for r, ids in enumerate(rows):
        input_ids[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        prompt_len = len(prompts[r // len(label_targets)])
        target = label_targets[r % len(label_targets)]
        row_index.extend([r] * len(target))
        position.extend(range(prompt_len - 1, prompt_len - 1 + len(target)))
        token.extend(target)
    # Right padding needs no attention mask: under causal attention no real token ever sees a pad after it,
    # and without a mask SDPA takes its fastest (is_causal) path.
    if media and any(media):
        hidden = _media_hidden(model, input_ids.to(device), media, len(label_targets), device)
    else:
        hidden = decoder_body(model)(input_ids=input_ids.to(device)).last_hidden_state
    row_index_t = torch.tensor(row_index, device=device)
    selected = hidden[row_index_t, torch.tensor(position, device=device)]
    logits = output_head(model)(selected).float()
    cap = final_logit_softcap(model)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    token_logprob = F.log_softmax(logits, dim=-1).gather(1, torch.tensor(token, device=device)[:, None])[:, 0]
    per_row = torch.zeros(len(rows), dtype=torch.float32, device=device).index_add_(0, row_index_t, token_logprob)
    return per_row.view(len(prompts), len(label_targets)).cpu()


def _media_hidden(model: torch.nn.Module, input_ids: torch.Tensor, media: list[dict], n_labels: int,
                  device: torch.device) -> torch.Tensor:
    """Last hidden states of the (prompt, label) rows of prompts with images: each prompt's images go through the
    vision encoder once, and every label's row of that prompt reads the same features (model/media_features.py)."""
    counts = [images_in(m) for m in media]
    pixels = {k: v.to(device) for k, v in concat_pixels([m for m in media if m]).items()}
    encoded = encode_media(model, pixels)
    first = [sum(counts[:p]) for p in range(len(counts))]
    index = [first[p] + k for p in range(len(media)) for _ in range(n_labels) for k in range(counts[p])]
    inputs = {"input_ids": input_ids, **type_id_inputs(model, input_ids)}
    if "image_grid_thw" in pixels:
        inputs["image_grid_thw"] = pixels["image_grid_thw"][torch.as_tensor(index, device=device)]
    return run_multimodal(model, inputs, select_images(encoded, index)).last_hidden_state


def score_labels(model: torch.nn.Module, prompts: Sequence[Sequence[int]], label_targets: Sequence[Sequence[int]],
                 batch_size: int = 32, pad_token_id: int = 0, progress: bool = False,
                 media: Sequence[dict] | None = None) -> torch.Tensor:
    """-> [n_prompts, n_labels]: log P(label's full target sequence | prompt), summed over its tokens.

    `batch_size` counts prompts per forward pass (each carries one row per label). Prompts are scored in
    order of length to cut padding; the result is in the caller's order. The model's train/eval mode is
    restored afterwards, so the training loop can call this between steps. `media`: each prompt's pixel inputs ({}
    for a prompt without images), for a vision-language model.
    """
    _check_scoring_inputs(prompts, label_targets)
    scores = torch.empty(len(prompts), len(label_targets), dtype=torch.float32)
    device = _device_of(model)
    with _inference(model):
        for chunk in _length_sorted_batches(prompts, batch_size, progress, "scoring labels"):
            chunk_media = [media[i] for i in chunk] if media is not None else None
            scores[chunk] = _score_chunk(model, [prompts[i] for i in chunk], label_targets, pad_token_id, device,
                                         chunk_media)
    return scores


# ---------------------------------------------------------------------------------------------------------
# Generation (the alternative to scoring, and `do_predict` on SFT data)
# ---------------------------------------------------------------------------------------------------------

def generate_texts(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                   batch_size: int = 32, stop_token_ids: Iterable[int] = (), progress: bool = False,
                   sampling: dict | None = None, token_counts: list[int] | None = None,
                   media: Sequence[dict] | None = None, seed: int | None = None) -> list[str]:
    """Continuation of each prompt (greedy unless `sampling` gives other model.generate arguments), decoded without
    special tokens. On the decode engine (model/decode: the one serve and GRPO use; `batch_size` rows decode at once
    and the next prompt joins as a row finishes; sampled rows draw from keys made from `seed`); beam search, which the
    engine does not do, and a vision-language model (`media`: each prompt's pixel inputs, {} for none), whose images
    transformers' generate takes at the prefill, on transformers' `generate`. `token_counts`, when given, receives the
    number of new tokens of each answer (up to and including its stop token)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stops = sorted({*stop_token_ids, *([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])})
    settings = {"max_new_tokens": max_new_tokens, "do_sample": False, **(sampling or {})}
    params = params_from_generate_kwargs(settings, stops)
    if params is None or media is not None or is_vision_model(model):
        return _generate_with_transformers(model, tokenizer, prompts, batch_size, progress, settings, pad_id, stops,
                                           token_counts, media)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(prompts), desc="generating", unit="answer", dynamic_ncols=True)
    with _inference(model):
        done = generate_all(model, prompts, params, pad_id if pad_id is not None else 0, max_rows=max(1, batch_size),
                            seed=seed, on_finished=bar.update if bar is not None else None)
    if bar is not None:
        bar.close()
    if token_counts is not None:
        token_counts[:] = [len(ids) for ids in done.ids]
    return [tokenizer.decode(ids, skip_special_tokens=True) for ids in done.ids]


def _generate_with_transformers(model, tokenizer, prompts, batch_size, progress, settings, pad_id, stops,
                                token_counts, media=None) -> list[str]:
    """transformers' generate, batched with left padding in order of length (beam search, vision-language models)."""
    device = _device_of(model)
    texts: list[str] = [""] * len(prompts)
    with _inference(model):
        for chunk in _length_sorted_batches(prompts, batch_size, progress, "generating"):
            width = max(len(prompts[i]) for i in chunk)
            input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                n = len(prompts[i])
                input_ids[r, width - n:] = torch.tensor(list(prompts[i]), dtype=torch.long)
                attention_mask[r, width - n:] = 1
            extra = {}
            if media is not None and any(media[i] for i in chunk):
                extra = {k: v.to(device) for k, v in concat_pixels([media[i] for i in chunk if media[i]]).items()}
                extra.update(type_id_inputs(model, input_ids.to(device)))
            out = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                 pad_token_id=pad_id, eos_token_id=stops or None, **settings, **extra)
            for r, i in enumerate(chunk):
                texts[i] = tokenizer.decode(out[r, width:], skip_special_tokens=True)
                if token_counts is not None:
                    token_counts[i] = _answer_length(out[r, width:].tolist(), stops)
    return texts


def _answer_length(new_tokens: list[int], stops: Sequence[int]) -> int:
    """Tokens generated for one row of a batch: up to its first stop token (the padding after it is not counted);
    a row with no stop token ran to max_new_tokens."""
    for k, token in enumerate(new_tokens):
        if token in stops:
            return k + 1
    return len(new_tokens)


def match_label(generated: str, label_names: Sequence[str]) -> int | None:
    """Map a generated answer to a label. The answer is its first line that names a label (a model that goes on past
    its answer often writes the next example, with other labels in it). Exact match after stripping, else the labels
    that line names, longer names first (so "不满意" is not also "满意"): exactly one -> that label ("消极的",
    "我觉得是消极", "消极消极"); none or two different ones -> None, wrong. Two labels in one line ("消极或积极", which
    echoes the question) is no choice: counting it as the first named, as this did before 2026-12-02, scored echoing
    the question as the first label; a GRPO policy on the H200 learned exactly that and scored the majority class.
    None is never silently mapped to a default class, as seed 003's script did."""
    punctuation = "\"'“”‘’「」。.!！,，:："
    names = list(label_names)
    by_length = sorted(range(len(names)), key=lambda k: -len(names[k]))
    for line in generated.splitlines() or [""]:
        text = line.strip().strip(punctuation).strip()
        if text in names:
            return names.index(text)
        named = set()
        for k in by_length:
            if names[k] and names[k] in text:
                named.add(k)
                text = text.replace(names[k], "\0")   # a shorter name inside a longer one is not named again
        if named:
            return named.pop() if len(named) == 1 else None
    return None


# ---------------------------------------------------------------------------------------------------------
# Classification evaluation
# ---------------------------------------------------------------------------------------------------------

def prompt_ids_of(example: dict) -> list[int]:
    """The prompt of a tokenised classification example: its tokens before the first trained one, i.e. exactly
    what the model saw in training before the label."""
    labels = example["labels"]
    first = next((t for t, label in enumerate(labels) if label != -100), None)
    if first is None or first == 0:
        raise ValueError("example has no prompt/answer border (labels are all ignored, or all trained "
                         "(train_on_prompt); pass raw texts instead)")
    return list(example["input_ids"][:first])


def label_set_error(dataset_labels: set[str], label_names: Sequence[str], where: str) -> UserError:
    """The error for gold labels outside label_names, listing both sets in full."""
    unknown = sorted(dataset_labels - set(label_names))
    return UserError(f"{where}: labels {unknown} are not in label_names. Dataset labels: {sorted(dataset_labels)}; "
                     f"label_names: {list(label_names)}. Fix label_names (or the dataset) so they agree")


def _gold_of(example: dict | str, label_names: Sequence[str]) -> int | None:
    if isinstance(example, str):
        return None
    if example.get("label_id") is not None:
        return int(example["label_id"])
    label = example.get("label")
    if label is None:
        return None
    if str(label) not in label_names:
        raise label_set_error({str(label)}, label_names, where="example")
    return list(label_names).index(str(label))


def build_prompts(tokenizer: Any, examples: Sequence[dict | str], template: Any, prompt_template: str | None,
                  max_prompt_len: int) -> list[list[int]]:
    """Prompt ids for each example: from its tokenised form when present (the training prompt, exactly), else
    rendered from its text with the same encoder the data pipeline uses."""
    prompts = []
    for example in examples:
        if isinstance(example, dict) and "input_ids" in example and "labels" in example:
            prompts.append(prompt_ids_of(example))
            continue
        text = example if isinstance(example, str) else example["text"]
        if prompt_template is None or template is None:
            raise ValueError("raw texts need a template and a prompt_template")
        prompts.append(encode_classification_prompt(template, tokenizer, prompt_template, text, max_prompt_len))
    return prompts


def prompt_text(tokenizer: Any, ids: Sequence[int]) -> str:
    """What a conversation row asked, for a prediction record (such a row has no "text" column): its prompt decoded
    without the template's control tokens (an image's tokens among them)."""
    return tokenizer.decode(list(ids), skip_special_tokens=True).strip()


def media_names(refs: Any) -> dict:
    """{"images": [...]} naming a row's images for a prediction record (a file by its path; an embedded image by its
    size, not its bytes), {} for a row without images."""
    if not refs:
        return {}
    names = []
    for ref in refs:
        if isinstance(ref, dict) and ref.get("path"):
            ref = str(ref["path"])
        if isinstance(ref, str) and not ref.startswith("data:") and len(ref) < 4096:
            names.append(ref)
        else:
            data = ref.get("bytes") if isinstance(ref, dict) else ref
            names.append(f"(embedded image, {len(data or b'')} bytes)")
    return {"images": names}


def evaluate_classification(model: torch.nn.Module, tokenizer: Any, examples_or_texts: Sequence[dict | str],
                            label_names: Sequence[str], template: Any = None, prompt_template: str | None = None,
                            batch_size: int = 32, max_prompt_len: int | None = None, mode: str = "score",
                            label_targets: Sequence[Sequence[int]] | None = None, progress: bool = False,
                            cutoff_len: int | None = None, media: Callable[[dict], dict] | None = None) -> dict:
    """Classify examples (tokenised examples from `prepare_datasets`, dicts with "text", or plain strings).

    mode "score": the label with the highest summed log-probability. mode "generate": greedy generation,
    normalised by `match_label`. Returns the metrics of `metrics.classification_report` (when gold labels are
    known) plus "mode", "predictions" (per example: text, gold, prediction, every label's score or the
    generated answer) and "predicted_ids".

    Tokenised examples are scored on their own prompt ids (exactly the training prompt). Raw texts are
    rendered with `template` + `prompt_template` and cut to `max_prompt_len` tokens (default: `cutoff_len`
    minus the longest label target, the budget the data pipeline uses). `media(example) -> pixel inputs`: a
    vision-language run's images of each tokenised example.
    """
    if mode not in ("score", "generate"):
        raise ValueError(f"mode must be score or generate, got {mode!r}")
    label_names = list(label_names)
    if label_targets is None:
        label_targets = encode_label_targets(template, tokenizer, label_names)
    if max_prompt_len is None:
        max_prompt_len = (cutoff_len or 2048) - max(map(len, label_targets))
    prompts = build_prompts(tokenizer, examples_or_texts, template, prompt_template, max_prompt_len)
    gold = [_gold_of(e, label_names) for e in examples_or_texts]
    gold_names = [None if g is None else label_names[g] for g in gold]
    texts = [e if isinstance(e, str) else e.get("text") if e.get("text") is not None else prompt_text(tokenizer, p)
             for e, p in zip(examples_or_texts, prompts)]
    images = [media_names(e.get("images")) if isinstance(e, dict) else {} for e in examples_or_texts]
    pixels = [media(e) if isinstance(e, dict) else {} for e in examples_or_texts] if media is not None else None

    records: list[dict] = []
    if mode == "score":
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        scores = score_labels(model, prompts, label_targets, batch_size, pad_id, progress, media=pixels)
        predicted = scores.argmax(dim=1).tolist()
        for i, k in enumerate(predicted):
            records.append({"index": i, "text": texts[i], **images[i], "gold": gold_names[i],
                            "prediction": label_names[k],
                            "scores": {name: round(float(s), 4) for name, s in zip(label_names, scores[i])}})
    else:
        # Room for the longest label plus a little chatter before the end token.
        max_new = max(map(len, label_targets)) + 4
        answers = generate_texts(model, tokenizer, prompts, max_new, batch_size,
                                 {t[-1] for t in label_targets}, progress, media=pixels)
        matched = [match_label(a, label_names) for a in answers]
        # An answer naming no label is its own (always wrong) column of the confusion matrix.
        predicted = [len(label_names) if k is None else k for k in matched]
        for i, k in enumerate(matched):
            records.append({"index": i, "text": texts[i], **images[i], "gold": gold_names[i],
                            "prediction": None if k is None else label_names[k], "generated": answers[i]})

    result: dict[str, Any] = {"mode": mode, "label_names": label_names}
    if all(g is not None for g in gold) and gold:
        names = label_names + (["(no label)"] if mode == "generate" else [])
        result.update(classification_report(gold, predicted, names))
        if mode == "generate":
            result["unmatched"] = sum(k is None for k in matched)
    result["predicted_ids"] = predicted
    result["predictions"] = records
    return result
