"""`prepare_datasets(cfg, tokenizer)`: from the `dataset:` keys to tokenised train / eval examples.

Order of work: resolve names -> read rows -> convert each format -> drop empty rows -> max_samples ->
eval split -> tokenise (with a progress bar). Every step is deterministic: the same config gives the same
examples in the same order.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from tqdm.auto import tqdm

from steadytune.config import ConfigError, RunConfig, show_value
from steadytune.data import split as splitting
from steadytune.data.cache import fingerprint, load_prepared, save_prepared
from steadytune.data.encode import (
    IGNORE_INDEX,
    classification_fixed_len,
    encode_classification,
    encode_conversation,
    encode_label_targets,
    encode_prediction,
)
from steadytune.data.formats import CONVERTERS, KTO_ROW, NO_ANSWER_ROW, FormatSpec, column_names, guess_formatting
from steadytune.data.multimodal.encode import (
    MediaContext,
    encode_multimodal,
    encode_multimodal_prediction,
    media_context,
    with_resolved_media,
)
from steadytune.data.multimodal.plugins import TEMPLATE_PLUGINS
from steadytune.data.pretrain import end_of_text, pretrain_blocks
from steadytune.data.readers import Row
from steadytune.data.registry import DatasetSource, resolve_datasets
from steadytune.data.templates import ASSISTANT_SIDE, Template, get_template, missing_special_tokens
from steadytune.errors import DataError, UserError

log = logging.getLogger(__name__)
TOKENIZE_CHUNK = 1000


@dataclass
class PreparedData:
    train: list[dict]
    eval: Optional[list[dict]]
    template: Template
    label_names: Optional[list[str]] = None
    class_counts: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    # Classification: what evaluation needs to rebuild the exact training prompts and targets.
    prompt_template: Optional[str] = None
    label_targets: Optional[list[list[int]]] = None
    max_prompt_len: Optional[int] = None
    # A vision-language run: the MediaContext its rows were encoded with (the collators make pixels through it).
    media: Any = None


@dataclass(frozen=True)
class ExampleKind:
    """What a stage other than sft trains on: how its rows are checked, converted and tokenised
    (data/preference.py has the pair and feedback kinds). `prepare_datasets(kind=None)` is sft's conversations."""
    name: str
    converters: dict[str, Callable[[Row, FormatSpec], Optional[dict]]]
    tokenize: Callable[[list[dict], str, Template, RunConfig, Any, dict], list[dict]]
    check_source: Callable[[DatasetSource, list[Row], str], None]   # (source, its rows, formatting) -> raise if unfit
    guess_formatting: Callable[[dict], Optional[str]] = guess_formatting
    classification: bool = False   # reads classification rows too, with their label_names and prompt_template (grpo)
    media_stages: tuple[str, ...] = ()   # stages whose rows may carry images (tokenize then takes media=MediaContext)


@dataclass
class _Loaded:
    """Normalised rows of one `dataset:` / `eval_dataset:` list, before tokenisation."""
    kind: str                                   # "conversation" or "classification"
    examples: list[dict]
    label_names: Optional[list[str]] = None
    prompt_template: Optional[str] = None


CACHED_FIELDS = ("train", "eval", "label_names", "class_counts", "stats", "prompt_template", "label_targets",
                 "max_prompt_len")


def prepare_datasets(cfg: RunConfig, tokenizer: Any, kind: ExampleKind | None = None,
                     processor: Any = None) -> PreparedData:
    """Tokenised train/eval examples; with `tokenized_path`, read from (or written to) the on-disk cache.
    `kind`: the examples of a preference stage (None: sft conversations or classification rows). `processor`: a
    vision-language model's processor (data/multimodal/processor.py): rows with images / videos need one."""
    d = cfg.data
    if not d.tokenized_path:
        return _prepare(cfg, tokenizer, kind, processor)

    fp = fingerprint(cfg, tokenizer, processor)
    cached = load_prepared(d.tokenized_path, fp)
    if cached is not None:
        out = PreparedData(template=template_for(cfg, tokenizer), **{k: cached[k] for k in CACHED_FIELDS})
        if out.label_names:
            d.label_names, d.prompt_template = out.label_names, out.prompt_template
        cfg.decide("tokenized_path", d.tokenized_path, "tokenised data read from the cache (same data settings "
                   "and tokenizer); delete the folder to re-tokenise")
        return out
    out = _prepare(cfg, tokenizer, kind, processor)
    file = save_prepared(d.tokenized_path, fp, {k: getattr(out, k) for k in CACHED_FIELDS})
    cfg.decide("tokenized_path", d.tokenized_path, f"tokenised data written to {file} for later runs")
    return out


def template_for(cfg: RunConfig, tokenizer: Any) -> Template:
    """The run's chat template with the data keys that adjust it (tool_format, default_system, thinking)."""
    d = cfg.data
    return get_template(d.template, tokenizer, tool_format=d.tool_format, default_system=d.default_system,
                        enable_thinking=d.enable_thinking, preserve_thinking=d.preserve_thinking)


def _prepare(cfg: RunConfig, tokenizer: Any, kind: ExampleKind | None = None, processor: Any = None) -> PreparedData:
    d = cfg.data
    if not d.dataset and not d.eval_dataset:
        raise ConfigError("dataset: not set; name datasets from dataset_info.json, a built-in one, or a file path")
    template = template_for(cfg, tokenizer)
    if d.template == "auto":
        cfg.decide("template", template.name if template.name != "auto" else "auto (tokenizer chat_template)",
                   "template: auto uses the tokenizer's chat template when it has one, else the plain empty template")
    stats: dict = {"rows_read": {}, "dropped": Counter(), "truncated": 0, "truncation": {}, "warnings": []}
    missing = missing_special_tokens(template, tokenizer)
    if missing:
        warning = (f"template {template.name} uses {', '.join(missing)}, which the tokenizer does not know as single "
                   f"tokens: is this template for another model family?")
        stats["warnings"].append(warning)
        log.warning(warning)

    evaluation: _Loaded | None = None
    if d.eval_dataset and not (d.tune_val_size and d.dataset):   # tune_val_size: the test split stays unread
        evaluation = _load_all(resolve_datasets(d.eval_dataset, d.dataset_dir, "eval_dataset"), cfg, stats,
                               max_samples=d.max_eval_samples or d.max_samples, kind=kind)
    if d.dataset:
        train = _load_all(resolve_datasets(d.dataset, d.dataset_dir, "dataset"), cfg, stats, kind=kind)
    else:  # predict-only (LLaMA-Factory's do_predict with eval_dataset alone): no training rows
        assert evaluation is not None
        train = _Loaded(evaluation.kind, [], evaluation.label_names, evaluation.prompt_template)
    if evaluation is not None:
        if evaluation.kind != train.kind or evaluation.label_names != train.label_names:
            raise ConfigError("eval_dataset: must be the same kind of data as dataset "
                              f"({evaluation.kind} {evaluation.label_names or ''} vs {train.kind} {train.label_names or ''})")
    elif d.val_size > 0 and not d.eval_dataset:
        evaluation = _split_off(train, d.val_size, cfg.train.seed)
        if d.max_eval_samples is not None and len(evaluation.examples) > d.max_eval_samples:
            key = (lambda e: e["label_id"]) if evaluation.kind == "classification" else None
            evaluation.examples = splitting.take(evaluation.examples, d.max_eval_samples, key=key)
    if d.tune_val_size > 0 and train.examples:
        # steadytune tune: trials are scored on rows held out of the very rows the final model trains on (after the
        # test split above is set aside), never on the test split.
        evaluation = _split_off(train, d.tune_val_size, cfg.train.seed, key="tune_val_size")

    out = PreparedData(train=[], eval=None, template=template, label_names=train.label_names)
    if train.kind == "classification":
        # Later stages (evaluation of raw texts, run_config.yaml) and a stage's own tokenizer read the resolved
        # values from the config.
        d.label_names, d.prompt_template = train.label_names, train.prompt_template
    if cfg.method.stage == "pt":
        if train.kind == "classification":
            raise ConfigError("stage: pt trains on plain text; the datasets given are classification data (stage: sft)")
        if train.examples:
            out.train = _pretrain_blocks(train.examples, "train", template, cfg, tokenizer, stats)
        if evaluation is not None:
            out.eval = _pretrain_blocks(evaluation.examples, "eval", template, cfg, tokenizer, stats)
    elif kind is not None:
        media = {"media": media_context(d, template.name, processor)} \
            if processor is not None and cfg.method.stage in kind.media_stages else {}
        out.train = kind.tokenize(train.examples, "train", template, cfg, tokenizer, stats, **media)
        if evaluation is not None:
            out.eval = kind.tokenize(evaluation.examples, "eval", template, cfg, tokenizer, stats, **media)
    elif train.kind == "classification":
        _tokenize_classification(out, train, evaluation, cfg, tokenizer, stats)
    else:
        media = media_context(d, template.name, processor)
        if train.examples:
            out.train = _tokenize_conversations(train.examples, "train", template, cfg, tokenizer, stats, media)
        if evaluation is not None:
            out.eval = _tokenize_conversations(evaluation.examples, "eval", template, cfg, tokenizer, stats, media)
    stats["dropped"] = dict(stats["dropped"])
    say_rows_left_out(stats)
    stats["examples"] = {"train": len(out.train), "eval": len(out.eval) if out.eval is not None else 0}
    stats["tokens"] = {name: sum(len(e["input_ids"]) for e in rows) for name, rows in
                       (("train", out.train), ("eval", out.eval or []))}
    stats["trained_tokens"] = sum(sum(1 for x in e["labels"] if x != IGNORE_INDEX) for e in out.train)
    out.stats = stats
    return out


# --------------------------------------------------------------------------------------------------------
# Reading and converting
# --------------------------------------------------------------------------------------------------------

def _load_all(sources: list[DatasetSource], cfg: RunConfig, stats: dict, max_samples: int | None = None,
              kind: ExampleKind | None = None) -> _Loaded:
    if not sources:
        raise ConfigError("dataset: no dataset names given")
    limit = max_samples if max_samples is not None else cfg.data.max_samples
    draws = random.Random(cfg.train.seed)   # LLaMA-Factory v1's `size`: one stream for all datasets, as its random
    loaded = [_load_one(src, cfg, stats, limit, kind, draws) for src in sources]
    kinds = {x.kind for x in loaded}
    if len(kinds) > 1:
        names = ", ".join(f"{s.name} ({x.kind})" for s, x in zip(sources, loaded))
        raise ConfigError(f"dataset: cannot mix classification and conversation datasets: {names}")
    first = loaded[0]
    for src, x in zip(sources[1:], loaded[1:]):
        if (x.label_names, x.prompt_template) != (first.label_names, first.prompt_template):
            raise ConfigError(f"dataset: {src.name} has other label_names/prompt_template than {sources[0].name}; "
                              f"classification datasets trained together must share them")
    examples = [e for x in loaded for e in x.examples]
    return _Loaded(first.kind, examples, first.label_names, first.prompt_template)


def _load_one(src: DatasetSource, cfg: RunConfig, stats: dict, max_samples: int | None,
              kind: ExampleKind | None = None, draws: random.Random | None = None) -> _Loaded:
    rows = src.load()
    stats["rows_read"][src.name] = len(rows)
    if src.draw is not None and rows:  # v1's adjust_data_index: random.choices over the rows, after set_seed(seed)
        rows = [rows[i] for i in (draws or random.Random(cfg.train.seed)).choices(range(len(rows)), k=src.draw)]
    formatting = src.formatting or (kind.guess_formatting if kind else guess_formatting)(rows[0].data)
    columns = src.columns
    if formatting is None and kind is None and set(rows[0].data) == {"text"}:
        # Plain text (a .txt file, or jsonl of {"text"}) named by path: LLaMA-Factory's pre-training entries
        # (c4_demo, wiki_demo) read it as alpaca with the text as the prompt.
        formatting, columns = "alpaca", {"prompt": "text"}
    if formatting is None:
        found = column_names(rows[0].data)
        raise DataError(f"{src.origin}: cannot tell the format from the columns ({found}); add an entry with "
                        f"`formatting` and `columns` to dataset_info.json")
    media_columns = [c for c in ("images", "videos") if c in (columns or {})]
    reads_media = cfg.method.stage in kind.media_stages if kind is not None else cfg.method.stage != "pt"
    if media_columns and not reads_media:
        raise ConfigError(f"dataset: {src.name} has {' and '.join(media_columns)} columns; stage "
                          f"{cfg.method.stage} trains on text only here (vision-language rows train with stage: sft "
                          "or stage: dpo)")
    if kind is not None:
        kind.check_source(src, rows, formatting)
    elif src.ranking:
        raise ConfigError(f"dataset: {src.name} is a ranking dataset (chosen/rejected pairs, `ranking: true`); "
                          f"train it with stage: dpo or stage: rm, not stage: {cfg.method.stage}")
    label_names = prompt_template = None
    if formatting == "classification" and (kind is None or kind.classification):
        label_names, prompt_template = _classification_settings(src, cfg)
    spec = FormatSpec.build(formatting, columns, src.tags, label_names, from_path=src.from_path and columns is None)
    convert = (kind.converters if kind is not None else CONVERTERS)[formatting]
    examples = []
    for row in rows:
        example = convert(row, spec)
        if example is None:
            stats["dropped"][f"{src.name}: empty {'text' if label_names else 'answer'}"] += 1
        else:
            examples.append(example)
    by_label = (lambda e: e["label_id"]) if label_names else None
    for limit in (src.num_samples, max_samples):
        if limit is not None and len(examples) > limit:
            stats["dropped"][f"{src.name}: beyond max_samples/num_samples"] += len(examples) - limit
            examples = splitting.take(examples, limit, key=by_label)
    if not examples:
        raise DataError(f"{src.origin}: dataset {src.name} is empty after filtering "
                        f"({len(rows)} rows read, none with a usable {'text' if label_names else 'answer'})")
    found = "classification" if label_names else kind.name if kind is not None else "conversation"
    return _Loaded(found, examples, label_names, prompt_template)


def _classification_settings(src: DatasetSource, cfg: RunConfig) -> tuple[list[str], str]:
    d = cfg.data
    label_names = d.label_names or src.label_names
    if not label_names:
        raise ConfigError(f"label_names: dataset {src.name} is a classification dataset; set label_names "
                          f"(the ordered label words) in the config or in its dataset_info.json entry")
    label_names = [str(x) for x in label_names]
    prompt_template = d.prompt_template or src.prompt_template
    if prompt_template is None:
        prompt_template = f"Classify the text as one of: {', '.join(label_names)}.\nText: {{text}}\nLabel: "
        cfg.decide("prompt_template", prompt_template, "no prompt_template given: a plain instruction listing the labels")
    elif "{text}" not in prompt_template:
        raise ConfigError(f"prompt_template of dataset {src.name} must contain {{text}} (got {show_value(prompt_template)})")
    if d.label_names is None:
        cfg.decide("label_names", label_names, f"from dataset {src.name}")
    if d.prompt_template is None and src.prompt_template is not None:
        cfg.decide("prompt_template", prompt_template, f"from dataset {src.name}")
    return label_names, prompt_template


def _split_off(train: _Loaded, val_size: float, seed: int, key: str = "val_size") -> _Loaded:
    n_eval = splitting.held_out_count(val_size, len(train.examples))
    if not 1 <= n_eval < len(train.examples):
        raise ConfigError(f"{key}: {val_size} holds out {n_eval} of {len(train.examples)} examples; "
                          f"it must leave at least one for training and one for evaluation")
    by_label = (lambda e: e["label_id"]) if train.kind == "classification" else None
    kept, held = splitting.split(train.examples, n_eval, seed, key=by_label)
    train.examples = kept
    return _Loaded(train.kind, held, train.label_names, train.prompt_template)


# --------------------------------------------------------------------------------------------------------
# Tokenising
# --------------------------------------------------------------------------------------------------------

def datasets_of(cfg: RunConfig, split_name: str) -> str:
    """The `dataset:` names (files, when given by path) a split's examples come from, for messages."""
    d = cfg.data
    names = str(d.eval_dataset if split_name == "eval" and d.eval_dataset else d.dataset)
    return names if len(names) <= 200 else names[:197] + "..."


def _progress(total: int, split_name: str):
    # disable=None: a bar on a terminal, silence in logs and CI (tqdm's own test for a TTY).
    return tqdm(total=total, desc=f"tokenising {split_name}", unit="ex", disable=None, dynamic_ncols=True)


def _pretrain_blocks(examples: list[dict], split_name: str, template: Template, cfg: RunConfig, tokenizer: Any,
                     stats: dict) -> list[dict]:
    """stage pt: every row's first message is its text; see data/pretrain.py."""

    d = cfg.data
    packing = d.packing is not False
    # LLaMA-Factory shortens cutoff_len by one when packing is asked for explicitly (its DataArguments does this
    # before stage pt turns packing on by default), so blocks are cutoff_len - 1 long then.
    block = d.cutoff_len - 1 if d.packing is True else d.cutoff_len
    texts = [e["messages"][0]["content"] for e in examples]
    blocks = pretrain_blocks(tokenizer, texts, end_of_text(template.name, template.eos_token), block, packing,
                             batch_size=d.preprocessing_batch_size, num_workers=d.preprocessing_num_workers)
    if split_name == "train":
        how = (f"texts + {end_of_text(template.name, template.eos_token)!r} concatenated and cut into blocks of {block} "
               f"tokens per batch of {d.preprocessing_batch_size} rows" if packing else
               f"each text + end token truncated to {block} tokens")
        cfg.decide("pretrain_blocks", len(blocks), f"stage pt: {how}; loss on every token")
    if not blocks:
        raise DataError(f"stage pt: the {split_name} texts ({datasets_of(cfg, split_name)}) give no block of {block} "
                        "tokens (fewer tokens than "
                        f"cutoff_len in every preprocessing batch); lower cutoff_len or add text")
    return [{"input_ids": b, "labels": list(b)} for b in blocks]


def _tokenize_conversations(examples: list[dict], split_name: str, template: Template, cfg: RunConfig,
                            tokenizer: Any, stats: dict, media: MediaContext | None = None) -> list[dict]:
    d = cfg.data
    out = []
    media_dir = d.media_dir if d.media_dir is not None else d.dataset_dir
    with _progress(len(examples), split_name) as bar:
        for example in examples:
            skip = KTO_ROW if "kto_tag" in example else example["left_out"][0] if "left_out" in example else \
                NO_ANSWER_ROW if example["messages"][-1]["role"] not in ASSISTANT_SIDE else None
            if skip:  # rows stage sft leaves out, as LLaMA-Factory does
                stats["dropped"][f"{split_name}: {skip}"] += 1
                if "left_out" in example:
                    stats.setdefault("first_left_out", {}).setdefault(f"{split_name}: {skip}", example["left_out"][1])
                bar.update()
                continue
            if media is not None:
                example = with_resolved_media(example, media_dir)
                encoded, cut = encode_multimodal(template, media, example, d.cutoff_len, d.train_on_prompt,
                                                 d.mask_history)
            elif example.get("images") or example.get("videos"):
                raise DataError(f"{example['where']}: the row has images or videos, and the model has no image "
                                f"processor (a text-only model?); train a vision-language model with its template "
                                f"({', '.join(TEMPLATE_PLUGINS)})")
            else:
                encoded, cut = encode_conversation(template, tokenizer, example, d.cutoff_len,
                                                   d.train_on_prompt, d.mask_history)
            count_truncation(stats, split_name, cut.prompt_tokens if cut else 0, cut.answer_tokens if cut else 0)
            if encoded is None:
                stats["dropped"][f"{split_name}: no answer token within cutoff_len"] += 1
            else:
                if split_name == "eval":  # what do_predict generates from, and the answer it is scored against
                    encoded["prompt_ids"], encoded["answer_ids"] = (
                        encode_multimodal_prediction(template, media, example, d.cutoff_len) if media is not None
                        else encode_prediction(template, tokenizer, example, d.cutoff_len))
                out.append(encoded)
            bar.update()
    if not out:
        reasons = ", ".join(f"{k} ({v})" for k, v in stats["dropped"].items() if k.startswith(split_name)) or \
            f"no example keeps an answer token within cutoff_len={d.cutoff_len}"
        raise DataError(f"{split_name} data ({datasets_of(cfg, split_name)}) is empty after tokenisation: {reasons}")
    return out


def _tokenize_classification(out: PreparedData, train: _Loaded, evaluation: _Loaded | None, cfg: RunConfig,
                             tokenizer: Any, stats: dict) -> None:
    d, template = cfg.data, out.template
    assert train.label_names is not None and train.prompt_template is not None
    targets = encode_label_targets(template, tokenizer, train.label_names)
    longest = max(range(len(targets)), key=lambda i: len(targets[i]))
    fixed = classification_fixed_len(template, tokenizer, train.prompt_template)
    needed = fixed + 1 + len(targets[longest])
    if d.cutoff_len < needed:
        raise ConfigError(f"cutoff_len: {d.cutoff_len} is too short: the prompt takes {fixed} tokens without the "
                          f"text, and the label {train.label_names[longest]!r} with its end token takes "
                          f"{len(targets[longest])}; cutoff_len must be at least {needed}")
    # The same prompt budget for every row and every label, so evaluation can score all labels on one prompt.
    max_prompt_len = d.cutoff_len - len(targets[longest])
    out.prompt_template, out.label_targets, out.max_prompt_len = train.prompt_template, targets, max_prompt_len
    budget = max_prompt_len - fixed

    def tokenize(examples: list[dict], split_name: str) -> list[dict]:
        encoded = []
        with _progress(len(examples), split_name) as bar:
            for start in range(0, len(examples), TOKENIZE_CHUNK):
                chunk = examples[start:start + TOKENIZE_CHUNK]
                text_ids = tokenizer([e["text"] for e in chunk], add_special_tokens=False)["input_ids"]
                for example, ids in zip(chunk, text_ids):
                    count_truncation(stats, split_name, max(0, len(ids) - budget), 0)
                    row = encode_classification(template, tokenizer, train.prompt_template, ids,
                                                targets[example["label_id"]], max_prompt_len, d.train_on_prompt)
                    row.update(label_id=example["label_id"], text=example["text"])
                    encoded.append(row)
                bar.update(len(chunk))
        return encoded

    out.train = tokenize(train.examples, "train")
    names = train.label_names
    out.class_counts = {"train": _count(train.examples, names)}
    if evaluation is not None:
        out.eval = tokenize(evaluation.examples, "eval")
        out.class_counts["eval"] = _count(evaluation.examples, names)
        train_texts = {e["text"] for e in train.examples}
        stats["eval_texts_in_train"] = sum(1 for e in evaluation.examples if e["text"] in train_texts)


def say_rows_left_out(stats: dict) -> None:
    """A warning on the console (and in the report) for rows left out because something in them is wrong, naming
    the first such row; rows beyond max_samples, and those stage sft leaves out by design, are only counted."""
    for reason, where in stats.pop("first_left_out", {}).items():
        split_name, _, why = reason.partition(": ")
        count = stats["dropped"].get(reason, 0)
        warning = (f"{count:,} {'training' if split_name == 'train' else split_name} row{'s' if count != 1 else ''} "
                   f"left out: {why} (first: {where})")
        stats["warnings"].append(warning)
        log.warning(f"warning: {warning}")


def count_truncation(stats: dict, split_name: str, prompt_cut: int, answer_cut: int) -> None:
    """Tally one example's cut (zeros when it fit): how many examples cutoff_len truncated, and by how much."""
    split = stats["truncation"].setdefault(split_name, {"examples": 0, "truncated": 0, "lost_prompt_tokens": 0,
                                                         "examples_losing_prompt": 0, "lost_answer_tokens": 0,
                                                         "most_prompt_tokens_lost": 0})
    split["examples"] += 1
    if prompt_cut or answer_cut:
        stats["truncated"] += 1
        split["truncated"] += 1
        split["lost_prompt_tokens"] += prompt_cut
        split["lost_answer_tokens"] += answer_cut
        split["examples_losing_prompt"] += int(prompt_cut > 0)
        split["most_prompt_tokens_lost"] = max(split["most_prompt_tokens_lost"], prompt_cut)


def truncation_summary(stats: dict, cutoff_len: int) -> tuple[str | None, bool]:
    """(one line for the start-up print, whether to warn): more than 10% of training examples losing prompt tokens
    usually means the question itself was cut away."""
    train = stats.get("truncation", {}).get("train")
    if not train or not train["truncated"]:
        return None, False
    share = train["examples_losing_prompt"] / max(train["examples"], 1)
    line = (f"cutoff_len {cutoff_len} truncated {train['truncated']} of {train['examples']} training examples: "
            f"{train['examples_losing_prompt']} lost prompt tokens ({train['lost_prompt_tokens']:,} in all, up to "
            f"{train['most_prompt_tokens_lost']:,} in one), {train['lost_answer_tokens']:,} answer tokens cut")
    return line, share > 0.10


def _count(examples: list[dict], names: list[str]) -> dict[str, int]:
    counts = Counter(e["label_id"] for e in examples)
    return {name: counts.get(i, 0) for i, name in enumerate(names)}


def check_data_fits_keys(cfg: RunConfig, data) -> str | None:
    """What would silently go wrong with this data and these keys: an error before anything loads, or the warning
    to print (truncation that cut the prompts of many examples; the caller prints it once for all processes)."""
    t = cfg.train
    if not data.eval:
        if t.eval_strategy != "no":
            raise UserError(f"eval_strategy: {t.eval_strategy}, but there is no eval data: set val_size (e.g. 0.1) or "
                            "eval_dataset, or eval_strategy: no")
        if t.metric_for_best_model:
            raise UserError(f"metric_for_best_model: {t.metric_for_best_model}, but there is no eval data to measure "
                            "it on: set val_size or eval_dataset, or remove the key")
    if t.max_tokens_per_batch is not None:
        longest = max((len(x["input_ids"]) for x in data.train if "input_ids" in x), default=0)
        if longest > t.max_tokens_per_batch:
            raise UserError(f"max_tokens_per_batch: {t.max_tokens_per_batch} is below the longest training example "
                            f"({longest} tokens after cutoff_len {cfg.data.cutoff_len}), which would make a micro-batch "
                            f"past the budget on its own: set max_tokens_per_batch to at least {longest} (or lower "
                            "cutoff_len)")
    line, warn = truncation_summary(data.stats, cfg.data.cutoff_len)
    if not line:
        return None
    if warn:
        line += (" -- more than 10% of the examples lost prompt tokens, often the question itself: raise cutoff_len "
                 "or shorten the inputs")
    cfg.decide("truncation", data.stats["truncation"].get("train"), line)
    return line if warn else None
