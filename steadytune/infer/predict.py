"""`steadytune predict CONFIG|RUN_DIR|ARCHIVE --input FILE --output FILE`: a trained run over new, unlabelled rows.

Input: .jsonl, .json or .csv. A classification run reads each row's text (`text`, or --text-column) and writes
the row with `label`, its `probability` and every label's probability (`probabilities`; `prob_<label>` columns in
CSV). A generation run builds each row's prompt with the run's template from `messages` / `conversations`,
`instruction` + `input` (alpaca), `prompt` or `text`, and writes the row with `predict`, the generated answer.

Batched and sorted by length (little padding), greedy unless do_sample is set, seeded, a progress bar, and the
throughput at the end.

A vision-language run reads each row's `images` (a path relative to the input file, a data URL or base64; one or a
list; never a URL) with its prompt, as LLaMA-Factory's rows hold them: `<image>` placeholders in the text, or none
(then the images go before the first message, as LLaMA-Factory's chat puts them). Generation goes through
transformers' generate; a run trained with label_names scores those labels over the prompt and its images.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

from steadytune.data.readers import read_rows
from steadytune.errors import DataError, UserError
from steadytune.infer.backends import (
    HUGGINGFACE,
    VLLM,
    VllmGenerator,
    check_backend,
    refuse_expert_adapters_on_vllm,
)

OUTPUT_SUFFIXES = (".jsonl", ".json", ".csv")
PROMPT_COLUMNS = ("messages", "conversations", "instruction", "prompt", "text", "query", "question")


def add_arguments(parser) -> None:
    parser.add_argument("source", help="the run: its config YAML, its output folder, an exported merged folder, or "
                                       "an adapter archive (.tar.gz)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. max_new_tokens=64 do_sample=true temperature=0.7 "
                             "infer_backend=vllm infer_dtype=bfloat16")
    parser.add_argument("--input", required=True, metavar="FILE", help="rows to predict: .jsonl, .json or .csv")
    parser.add_argument("--output", required=True, metavar="FILE",
                        help="where predictions go: .jsonl, .json or .csv (the input's columns plus the prediction)")
    parser.add_argument("--text-column", metavar="NAME",
                        help="column holding the text (classification default: text; generation: the first of "
                             f"{', '.join(PROMPT_COLUMNS)})")
    parser.add_argument("--batch-size", type=int, metavar="N",
                        help="rows per forward pass (default: 4 on CPU, 64 on a GPU)")
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="longest answer in tokens (max_new_tokens)")
    parser.add_argument("--sample", action="store_true",
                        help="sample (temperature/top_p/top_k of the config) instead of greedy decoding")
    parser.add_argument("--seed", type=int, help="seed for sampling (default: the run's seed)")
    parser.add_argument("--force", action="store_true", help="replace --output if it exists")


def run(args) -> int:
    # lazy: infer.loading loads torch; `--help` answers without loading it
    from steadytune.infer.loading import open_run

    output = Path(args.output)
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UserError(f"--output {output}: use a .jsonl, .json or .csv file name")
    if output.exists() and not args.force:
        raise UserError(f"--output {output} exists; choose another name or pass --force to replace it")
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
    run_ = open_run(args.source, args.overrides)
    cfg = run_.cfg
    if args.max_new_tokens is not None:
        if args.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
        cfg.train.max_new_tokens = args.max_new_tokens
    if args.sample:
        cfg.infer.do_sample = True
    if args.seed is not None:
        cfg.train.seed = args.seed

    rows = read_rows(args.input)
    result = predict_rows(run_, rows, args.text_column, args.batch_size, media_dir=Path(args.input).parent)
    write_rows(output, result.rows)
    print(result.summary(output))
    return 0


class Prediction:
    def __init__(self, rows: list[dict], seconds: float, prompt_tokens: int, new_tokens: int | None, what: str):
        self.rows, self.seconds, self.prompt_tokens, self.new_tokens, self.what = rows, seconds, prompt_tokens, new_tokens, what

    def summary(self, output: Path) -> str:
        s = max(self.seconds, 1e-9)
        rate = f"{len(self.rows) / s:.1f} rows/s, prompt {self.prompt_tokens / s:,.0f} tokens/s"
        if self.new_tokens is not None:
            rate += f", generated {self.new_tokens / s:,.1f} tokens/s ({self.new_tokens} tokens)"
        return f"{len(self.rows)} rows -> {output} ({self.what}); {self.seconds:.1f} s: {rate}"


def predict_rows(run_, rows, text_column: str | None = None, batch_size: int | None = None,
                 media_dir: Path | None = None) -> Prediction:
    """Predictions for `rows` (data.readers.Row) with the run loaded through the shared loader; a vision-language
    run's images are read relative to `media_dir` (the input file's folder)."""
    import torch

    # lazy: infer.generate loads torch; `--help` answers without loading it
    from steadytune.infer.generate import run_template, sampling_of, stop_token_ids

    # lazy: infer.loading loads torch; `--help` answers without loading it
    from steadytune.infer.loading import load_run

    cfg = run_.cfg
    if cfg.infer.infer_backend == VLLM and run_.folder is not None and not run_.is_classification:
        refuse_expert_adapters_on_vllm([run_.folder])
    backend = check_backend(cfg.infer.infer_backend)
    if backend == VLLM and any(row.data.get("images") or row.data.get("image") for row in rows):
        raise UserError("infer_backend: vllm: rows with images are predicted with transformers here (infer_backend: "
                        "huggingface); steadytune hands vLLM token ids only")
    torch.manual_seed(cfg.train.seed)
    if backend == VLLM and not run_.is_classification:
        return _generate_with_vllm(run_, rows, text_column)
    if backend != HUGGINGFACE:
        raise UserError(f"infer_backend: {backend}: label scoring runs with transformers; use infer_backend: huggingface")
    model, tokenizer = load_run(run_)
    device = next(model.parameters()).device
    # CPU: 4 prompts a batch measured fastest (Gemma 3 270M, 2 cores: 4.8 rows/s against 2.8 at 8; larger batches
    # fall out of cache, as the demo's scoring found); GPU: 64.
    batch_size = batch_size or (4 if device.type == "cpu" else 64)
    template = run_template(cfg, tokenizer)
    started = time.perf_counter()
    # lazy: infer.media loads the image readers; a text run never needs them
    from steadytune.infer.media import VisionPrompts

    vision = VisionPrompts.for_model(cfg, model, tokenizer, template,
                                     folder=run_.folder if run_.kind == "model" else None)
    if vision is not None:
        return _predict_with_images(run_, rows, vision, model, tokenizer, text_column, batch_size,
                                    media_dir or Path("."), started)
    if run_.is_classification:
        # lazy: infer.classify loads torch; `--help` answers without loading it
        from steadytune.infer.classify import LabelScorer

        scorer = LabelScorer(model, tokenizer, template, cfg.data.label_names, cfg.data.prompt_template,
                             cfg.data.cutoff_len)
        if scorer.prompt_template is None:   # trained on conversations whose answers are the labels: the row's turns
            prompts = [_prompt_ids(row, template, tokenizer, text_column) for row in rows]
        else:
            prompts = scorer.prompts([_text_of(row, text_column or "text") for row in rows])
        probs = scorer.probabilities(prompts, batch_size, progress=True)
        out = []
        for row, p in zip(rows, probs):
            best = int(p.argmax())
            out.append({**row.data, "label": scorer.label_names[best], "probability": round(float(p[best]), 6),
                        "probabilities": {n: round(float(x), 6) for n, x in zip(scorer.label_names, p)}})
        return Prediction(out, time.perf_counter() - started, sum(map(len, prompts)), None,
                          f"labels by scoring {len(scorer.label_names)} labels")

    # lazy: eval.scoring loads torch; `--help` answers without loading it
    from steadytune.eval.scoring import generate_texts

    sampling = sampling_of(cfg, sample_by_default=False)
    prompts = [_prompt_ids(row, template, tokenizer, text_column) for row in rows]
    check_prompts_fit(rows, prompts, model.config, sampling.max_new_tokens)
    counts = [0] * len(prompts)
    answers = generate_texts(model, tokenizer, prompts, sampling.max_new_tokens, batch_size,
                             stop_token_ids(template, tokenizer), progress=True, sampling=sampling.generate_kwargs(),
                             token_counts=counts, seed=cfg.train.seed)
    out = [{**row.data, "predict": answer} for row, answer in zip(rows, answers)]
    return Prediction(out, time.perf_counter() - started, sum(map(len, prompts)), sum(counts), sampling.describe())


def _predict_with_images(run_, rows, vision, model, tokenizer, text_column: str | None, batch_size: int,
                         media_dir: Path, started: float) -> Prediction:
    """A vision-language run over rows with images: each row's conversation and images encoded as training encoded
    them (infer/media.py); label scoring for a run with label_names, else generation."""
    import torch

    # lazy: data.encode loads torch; `--help` answers without loading it
    from steadytune.data.encode import encode_label_targets

    # lazy: the image readers load Pillow; a text run never needs them
    from steadytune.data.multimodal.media import resolve_media

    # lazy: eval.scoring loads torch; `--help` answers without loading it
    from steadytune.eval.scoring import generate_texts, score_labels

    # lazy: infer.generate loads torch; `--help` answers without loading it
    from steadytune.infer.generate import sampling_of, stop_token_ids

    cfg = run_.cfg
    encoded = []
    for row in rows:
        messages, system = _messages_of(row, text_column)
        images = resolve_media(row.data.get("images", row.data.get("image")), str(media_dir), row.where)
        encoded.append(vision.encode(messages, system, images, row.where))
    prompts, media = [e.ids for e in encoded], [e.pixels for e in encoded]
    if run_.is_classification:
        names = list(cfg.data.label_names)
        targets = encode_label_targets(vision.template, tokenizer, names)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        probs = torch.softmax(score_labels(model, prompts, targets, batch_size, pad, progress=True, media=media), 1)
        out = []
        for row, p in zip(rows, probs):
            best = int(p.argmax())
            out.append({**row.data, "label": names[best], "probability": round(float(p[best]), 6),
                        "probabilities": {n: round(float(x), 6) for n, x in zip(names, p)}})
        return Prediction(out, time.perf_counter() - started, sum(map(len, prompts)), None,
                          f"labels by scoring {len(names)} labels with each row's images")
    sampling = sampling_of(cfg, sample_by_default=False)
    counts = [0] * len(prompts)
    answers = generate_texts(model, tokenizer, prompts, sampling.max_new_tokens, batch_size,
                             stop_token_ids(vision.template, tokenizer), progress=True,
                             sampling=sampling.generate_kwargs(), token_counts=counts, media=media)
    out = [{**row.data, "predict": answer} for row, answer in zip(rows, answers)]
    return Prediction(out, time.perf_counter() - started, sum(map(len, prompts)), sum(counts),
                      f"{sampling.describe()}, with each row's images (transformers' generate)")


def _generate_with_vllm(run_, rows, text_column) -> Prediction:
    from transformers import AutoTokenizer

    # lazy: infer.generate loads torch; `--help` answers without loading it
    from steadytune.infer.generate import run_template, sampling_of, stop_token_ids

    # lazy: model.load loads torch; `--help` answers without loading it
    from steadytune.model.load import resolve_model_path

    cfg = run_.cfg
    tokenizer = AutoTokenizer.from_pretrained(str(run_.folder or resolve_model_path(cfg.model)),
                                              trust_remote_code=cfg.model.trust_remote_code)
    template = run_template(cfg, tokenizer)
    prompts = [_prompt_ids(row, template, tokenizer, text_column) for row in rows]
    sampling = sampling_of(cfg, sample_by_default=False)
    generator = VllmGenerator(run_, sampling, stop_token_ids(template, tokenizer),
                              dtype=cfg.infer.infer_dtype if cfg.infer.infer_dtype != "auto" else "auto")
    started = time.perf_counter()
    answers, counts = generator.generate(prompts)
    out = [{**row.data, "predict": answer} for row, answer in zip(rows, answers)]
    return Prediction(out, time.perf_counter() - started, sum(map(len, prompts)), sum(counts),
                      f"vllm, {sampling.describe()}")


# ---------------------------------------------------------------------------------------------------------
# Rows in, rows out
# ---------------------------------------------------------------------------------------------------------

def _text_of(row, column: str) -> str:
    value = row.data.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        columns = ", ".join(row.data) or "none"
        raise DataError(f"{row.where}: no text in column {column!r} (columns: {columns}); set --text-column")
    return str(value)


def _messages_of(row, column: str | None) -> tuple[list[dict], str | None]:
    """The conversation to answer: everything up to the last user turn (a trailing answer is dropped)."""
    data = row.data
    column = column or next((c for c in PROMPT_COLUMNS if data.get(c)), None)
    if column is None or data.get(column) in (None, ""):
        raise DataError(f"{row.where}: no prompt (columns: {', '.join(data) or 'none'}); expected one of "
                        f"{', '.join(PROMPT_COLUMNS)}, or set --text-column")
    value = data[column]
    system = data.get("system") or None
    if isinstance(value, list):
        roles = {"human": "user", "gpt": "assistant", "user": "user", "assistant": "assistant", "system": "system",
                 "observation": "observation", "tool": "observation", "function_call": "function_call"}
        messages = []
        for turn in value:
            if not isinstance(turn, dict):
                raise DataError(f"{row.where}: {column} must be a list of turns ({{role, content}} or {{from, value}})")
            role = roles.get(str(turn.get("role", turn.get("from"))))
            content = turn.get("content", turn.get("value"))
            if role is None or content is None:
                raise DataError(f"{row.where}: a turn of {column} has no known role or no content: {turn}")
            if role == "system":
                system = str(content)
            else:
                messages.append({"role": role, "content": str(content)})
        while messages and messages[-1]["role"] in ("assistant", "function_call"):
            messages.pop()
        if not messages:
            raise DataError(f"{row.where}: {column} holds no user turn to answer")
        return messages, system
    text = str(value)
    if column == "instruction" and data.get("input"):
        text = f"{text}\n{data['input']}"
    return [{"role": "user", "content": text}], system


def check_prompts_fit(rows, prompts: list[list[int]], config, max_new_tokens: int) -> None:
    """A prompt at or past the model's window is refused, naming its row: the answer would be read at positions the
    model never trained on (noise), and cutting the prompt would answer another question. One whose answer may run
    past the window is said once: its generation stops early or degrades there."""
    # lazy: model.anatomy loads torch; `--help` answers without loading it
    from steadytune.model.anatomy import text_config

    # lazy: model.config_values loads transformers; `--help` answers without loading it
    from steadytune.model.config_values import model_window

    window = model_window(text_config(config))
    if window is None:
        return
    too_long = [(row, len(ids)) for row, ids in zip(rows, prompts) if len(ids) >= window]
    if too_long:
        row, length = too_long[0]
        others = f" ({len(too_long) - 1} more row(s) like it)" if len(too_long) > 1 else ""
        raise DataError(f"{row.where}: the prompt is {length:,} tokens, but the model reads {window:,} positions; "
                        f"shorten the row or remove it{others}")
    near = sum(len(ids) + max_new_tokens > window for ids in prompts)
    if near:
        print(f"warning: {near} prompt(s) leave fewer than max_new_tokens {max_new_tokens:,} positions of the "
              f"model's {window:,}; their answers may stop early", flush=True)


def _prompt_ids(row, template, tokenizer, column: str | None) -> list[int]:
    """A row's prompt as training encoded it; a row's own `system` replaces the template's default_system."""
    # lazy: infer.generate loads torch; `--help` answers without loading it
    from steadytune.infer.generate import conversation_ids

    messages, system = _messages_of(row, column)
    return conversation_ids(template, tokenizer, messages, system)


def write_rows(path: Path, rows: list[dict]) -> None:
    """Write atomically in the format the suffix names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    suffix = path.suffix.lower()
    with partial.open("w", encoding="utf-8", newline="") as f:
        if suffix == ".jsonl":
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        elif suffix == ".json":
            json.dump(rows, f, ensure_ascii=False, indent=1)
        else:
            flat = [_flatten(row) for row in rows]
            columns: list[str] = []
            for row in flat:
                columns += [c for c in row if c not in columns]
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(flat)
    partial.replace(path)


def _flatten(row: dict) -> dict[str, Any]:
    out = {}
    for key, value in row.items():
        if key == "probabilities" and isinstance(value, dict):
            out.update({f"prob_{name}": p for name, p in value.items()})
        elif isinstance(value, (dict, list)):
            out[key] = json.dumps(value, ensure_ascii=False)
        else:
            out[key] = value
    return out
