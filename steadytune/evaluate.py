"""`steadytune eval`: evaluate a trained adapter (or full fine-tune) on the run's test split and write the results.

Classification: label-map checks first (eval/labelcheck), then accuracy, macro-F1, the majority baseline and the
confusion matrix by label scoring and/or generation (eval/scoring), optionally next to the zero-shot base model.
Generation (SFT) tasks: greedy answers scored with BLEU-4 / ROUGE. Preference stages (dpo, kto, rm): their loss and
reward metrics on the eval split.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from steadytune.config import RunConfig
from steadytune.data.prepare import prepare_datasets, template_for
from steadytune.data.registry import split_names
from steadytune.errors import UserError, describe_os_error
from steadytune.eval.labelcheck import (
    check_against_training,
    check_known_samples,
    check_labels_distinguishable,
    check_raw_labels,
    warn,
)
from steadytune.eval.metrics import format_distribution, plot_confusion_matrix, relative_error_reduction
from steadytune.eval.needle import check_lengths, evaluate_needle, format_needle, parse_ints
from steadytune.data.answers import answers_as_labels
from steadytune.eval.scoring import evaluate_classification, generate_texts, prompt_ids_of
from steadytune.eval.textmetrics import generation_metrics
from steadytune.infer.generate import predict_sampling_note, sampling_of
from steadytune.infer.loading import BASE, LORA, load_trained, trained_folder
from steadytune.training.vision_data import load_vision_processor, pixels_of, prepare_with_media
from steadytune.model.config_values import model_window
from steadytune.model.load import load_model_and_tokenizer, resolve_model_path
from steadytune.stages.base import Stage
from steadytune.stages.evaluation import evaluate_examples
from steadytune.stages.preference import PREFERENCE_STAGES
from steadytune.stages.table import STAGES
from steadytune.training.folder_config import load_config_named
from steadytune.training.run_folder import BASE_EVALUATED, claim_outputs, record_outputs


def add_arguments(parser) -> None:
    parser.add_argument("config", help="the run's YAML (the one it was trained with)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, as for train")
    parser.add_argument("--zero-shot", action="store_true",
                        help="also evaluate the base model without the adapter, and report the relative error reduction")
    parser.add_argument("--mode", choices=("score", "generate", "both"), default="score",
                        help="score: log-probability of each label (exact, default); generate: greedy answer "
                             "matched to a label word; both: report the two side by side")
    parser.add_argument("--batch-size", type=int, default=32, help="prompts per forward pass (default 32)")
    parser.add_argument("--output-dir", default=None, help="where results are written (default: the run's output_dir)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace result files in --output-dir that steadytune did not write (refused otherwise)")
    parser.add_argument("--known-samples", type=int, default=64,
                        help="training examples scored first as the label-map check (0 skips it)")
    parser.add_argument("--needle", action="store_true",
                        help="long-context check instead of the dataset's metrics: find one fact (a city's secret "
                             "number) placed at several depths of filler text of several lengths (needle_results.json)")
    parser.add_argument("--needle-lengths", default=None, metavar="N,N",
                        help="context lengths in tokens (default: a quarter, half and all of cutoff_len)")
    parser.add_argument("--needle-depths", default="0,25,50,75,100", metavar="P,P",
                        help="where the fact sits, in percent of the text (default 0,25,50,75,100)")
    parser.add_argument("--needle-trials", type=int, default=3, metavar="N",
                        help="prompts per length and depth, each with its own city, number and filler order")
    parser.add_argument("--review-errors", type=int, default=0, metavar="N",
                        help="also write N misclassified test examples, drawn at random (seeded), to "
                             "errors_to_review.jsonl and print them: reading them tells label noise from model "
                             "errors (0: off)")


def run(args) -> int:
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
    if args.review_errors < 0:
        raise UserError(f"--review-errors must be 0 or more (got {args.review_errors})")
    cfg = load_config_named(args.config, args.overrides)   # a run folder's run_config.yaml grants nothing
    if args.needle:
        cutoff = cfg.data.cutoff_len
        lengths = (parse_ints(args.needle_lengths, "--needle-lengths", low=1) if args.needle_lengths else
                   sorted({max(64, cutoff // 4), max(64, cutoff // 2), cutoff}))
        if args.needle_trials < 1:
            raise UserError(f"--needle-trials must be at least 1 (got {args.needle_trials})")
        evaluate_needle_run(cfg, lengths, parse_ints(args.needle_depths, "--needle-depths", 0, 100),
                            args.needle_trials, args.batch_size, args.output_dir, args.overwrite)
        return 0
    evaluate_saved(cfg, mode=args.mode, zero_shot=args.zero_shot, batch_size=args.batch_size,
                   output_dir=args.output_dir, known_samples=args.known_samples, review_errors=args.review_errors,
                   overwrite=args.overwrite)
    return 0


def evaluate_needle_run(cfg: RunConfig, lengths: list[int], depths: list[int], trials: int, batch_size: int = 1,
                        output_dir: str | None = None, overwrite: bool = False) -> dict:
    """`steadytune eval --needle`: the trained model (adapter on its base, or the full model) asked for a needle at
    each length and depth (eval/needle.py); needle_results.json and the grid printed."""
    folder, kind = trained_folder(cfg)
    out = Path(output_dir or cfg.train.output_dir)
    claim_outputs(out, ["needle_results.json"], overwrite, "steadytune eval --needle")
    model, tokenizer = load_trained(cfg, folder, kind)
    window = model_window(model.config.get_text_config() if hasattr(model.config, "get_text_config") else
                          model.config)
    check_lengths(lengths, window)
    if window and max(lengths) > window:
        print(f"warning: --needle-lengths up to {max(lengths):,} tokens, past the model's window of {window:,} "
              "positions (it never trained there)", flush=True)
    results = {"adapter": str(folder), **evaluate_needle(model, tokenizer, template_for(cfg, tokenizer), lengths,
                                                         depths, trials, seed=cfg.train.seed, batch_size=batch_size)}
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "needle_results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    except OSError as e:
        raise UserError(describe_os_error(e, f"--output-dir {out}")) from None
    record_outputs(out, ["needle_results.json"])
    print(format_needle(results))
    print(f"-> {out / 'needle_results.json'}")
    return results


def evaluate_saved(cfg: RunConfig, **options) -> dict:
    """What `steadytune eval` (and `train` with do_eval / do_predict) does with a run's saved output: sft and pt are
    scored as classification or generation (run_evaluation); dpo, kto, rm and grpo report their loss and reward
    metrics on the eval split (evaluate_preference_run: the options about classification or generation do not apply)."""
    if cfg.method.stage in PREFERENCE_STAGES or cfg.method.stage == "grpo":
        return evaluate_preference_run(STAGES[cfg.method.stage], cfg, batch_size=options.get("batch_size"),
                                       output_dir=options.get("output_dir"), overwrite=options.get("overwrite", False))
    return run_evaluation(cfg, **options)


def evaluate_preference_run(stage: Stage, cfg: RunConfig, batch_size: int | None = None,
                            output_dir: str | None = None, overwrite: bool = False) -> dict:
    """Load what a dpo / kto / rm / grpo run saved (the adapter onto the base model, or the full model; the reference
    of dpo, kto and grpo rebuilt as in training), evaluate it on the eval split (grpo: its prompts completed and
    scored by the run's reward functions), write eval_results.json; -> the results."""
    out = Path(output_dir or cfg.train.output_dir)
    claim_outputs(out, ["eval_results.json"], overwrite, "steadytune eval")  # never over a file we did not write
    folder, kind = trained_folder(cfg)
    model, tokenizer = load_trained(cfg, folder, kind, task=stage.model_task)
    dtype = next(model.parameters()).dtype
    cfg.decide("precision", "bf16" if dtype == torch.bfloat16 else "fp32", "as the evaluated model was loaded")
    data = stage.prepare_data(cfg, tokenizer)
    if not data.eval:
        raise UserError("no eval split: set eval_dataset, or val_size to evaluate on the held-out part of dataset")
    cfg.method.log_completions = False   # grpo's completions.jsonl is the training run's log, not eval's
    objective = stage.make_objective(model, cfg)
    collate = stage.make_collator(cfg, tokenizer, None)
    results = evaluate_examples(objective, data.eval, collate, batch_size or cfg.train.per_device_eval_batch_size,
                                next(model.parameters()).device)
    results["eval_examples"] = len(data.eval)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    record_outputs(out, ["eval_results.json"])
    print(f"stage {stage.name}: {len(data.eval)} eval examples -> {out / 'eval_results.json'}")
    for key, value in results.items():
        print(f"  {key:<26} {value:.4f}" if isinstance(value, float) else f"  {key:<26} {value}")
    return results


# What `eval` writes into its output folder; a file of these names that no steadytune command wrote is not replaced.
EVAL_OUTPUTS = ["eval_results.json", "predictions.jsonl", "generated_predictions.jsonl", "confusion_matrix.json",
                "confusion_matrix.png", "errors_to_review.jsonl"]


def warn_if_other_base(cfg, folder: Path) -> None:
    """An adapter trained on another base model loads without complaint when the shapes agree, and scores
    nonsense: say so, naming both."""
    config = folder / "adapter_config.json"
    if not config.is_file():
        return
    try:
        recorded = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, RecursionError, AttributeError):
        return
    if not recorded:
        return
    asked = cfg.model.model_name_or_path
    candidates = {asked, str(Path(asked).expanduser().resolve()) if Path(asked).exists() else asked}
    try:
        candidates.add(str(Path(resolve_model_path(cfg.model)).resolve()))
    except UserError:
        pass
    if recorded not in candidates and str(Path(recorded).resolve()) not in candidates:
        warn(f"the adapter in {folder} was trained on base model {recorded!r}, but this evaluation loads "
             f"{asked!r}: the scores describe another combination than the one trained (set model_name_or_path "
             "to the adapter's base)")


@contextlib.contextmanager
def _zero_shot(cfg, model: torch.nn.Module, kind: str) -> Iterator[torch.nn.Module]:
    """The same model without what training added: the adapter switched off, or the base model for a full
    fine-tune (loaded only for this)."""
    if kind == LORA:
        with model.disable_adapter():
            yield model
        return

    attn = getattr(model.config, "_attn_implementation", None) or "sdpa"
    weight = next(model.parameters())
    base, _ = load_model_and_tokenizer(cfg.model, weight.dtype, attn, weight.device)
    yield base


def evaluated_folder(cfg: RunConfig, zero_shot: bool) -> tuple[Path | None, str]:
    """(folder, kind) of what eval scores: the trained run; with --zero-shot before any training (output_dir holds no
    adapter yet, and no adapter_name_or_path is set), the base model alone, said in a line."""
    try:
        return trained_folder(cfg)
    except UserError:
        if not zero_shot or cfg.model.adapter_name_or_path:
            raise
    print(f"note: output_dir {cfg.train.output_dir} holds no trained adapter or model yet: --zero-shot scores the base "
          f"model {cfg.model.model_name_or_path} alone (after training, eval --zero-shot sets the two side by side)",
          flush=True)
    return None, BASE


def run_evaluation(cfg, mode: str = "score", zero_shot: bool = False, batch_size: int = 32,
                   output_dir: str | None = None, known_samples: int = 64, review_errors: int = 0,
                   overwrite: bool = False) -> dict:
    """Everything `steadytune eval` does; returns what it writes to eval_results.json."""


    folder, kind = evaluated_folder(cfg, zero_shot)
    base_only = kind == BASE   # --zero-shot before any training: the base model is all there is to score
    out_dir = Path(output_dir or cfg.train.output_dir)
    claim_outputs(out_dir, EVAL_OUTPUTS, overwrite, "steadytune eval")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(describe_os_error(e, f"--output-dir {out_dir}")) from None
    check_raw_labels(cfg)
    if not base_only:
        warn_if_other_base(cfg, folder)
    model, tokenizer = load_trained(cfg, folder, kind)
    processor = load_vision_processor(cfg, tokenizer)   # a vision-language run reads its rows' images with it
    data = (prepare_with_media(prepare_datasets, cfg, tokenizer, processor) if processor is not None
            else prepare_datasets(cfg, tokenizer))
    if not data.eval:
        raise UserError("no test split: set eval_dataset, or val_size to evaluate on the held-out split of training")
    if data.media is not None:   # a vision-language set whose answers are label words: scored as classification
        answers_as_labels(data, cfg.data.label_names, tokenizer)
    media = pixels_of(data)

    if not data.label_names:  # a generation (SFT) task
        sampling = sampling_of(cfg, sample_by_default=False)  # greedy unless do_sample: true (then the config's keys)
        note = predict_sampling_note(cfg, sampling)
        if note:
            cfg.decide("do_sample", False, note)
            print(f"do_sample: {note}", flush=True)
        metrics = predict_generation(model, tokenizer, data.eval, sampling.max_new_tokens, batch_size, str(out_dir),
                                     stop_token_ids=data.template.stop_token_ids(),
                                     sampling=sampling.generate_kwargs(), media=media)
        results = {"task": "generation", "n": len(data.eval), "adapter": str(folder) if folder else None,
                   "decoding": sampling.describe(), **metrics}
        (out_dir / "eval_results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
        record_outputs(out_dir, EVAL_OUTPUTS, BASE_EVALUATED if base_only else "finished")
        print(json.dumps(metrics, indent=2))
        return results

    label_names, targets = data.label_names, data.label_targets
    modes = ["score", "generate"] if mode == "both" else [mode]
    if not base_only:
        check_against_training(folder, label_names)
    check_labels_distinguishable(targets, label_names, generate="generate" in modes)
    train_gold = [e["label_id"] for e in data.train if e.get("label_id") is not None]
    test_gold = [e["label_id"] for e in data.eval]
    print(format_distribution("train", train_gold, label_names))
    print(format_distribution("test ", test_gold, label_names))
    cap_note = eval_cap_note(cfg, data.stats)
    if cap_note:
        print(cap_note)

    results: dict[str, Any] = {"task": "classification", "adapter": str(folder) if folder else None, "n": len(data.eval),
                               "label_names": label_names, "label_targets": targets}
    if known_samples > 0 and not base_only:   # the check is of a trained adapter against its own training rows
        check = check_known_samples(model, tokenizer, data.train, label_names, targets, batch_size, known_samples,
                                    media=media)
        results["known_sample_check"] = check
        print(f"label-map check on {check['n']} training examples: accuracy {check['accuracy']:.3f} "
              f"(majority {check['majority_baseline']['accuracy']:.3f})")
        if check["warning"]:
            warn(check["warning"])

    def evaluate_all(m) -> dict:
        out = {}
        for each in modes:
            start = time.perf_counter()
            report = evaluate_classification(m, tokenizer, data.eval, label_names, batch_size=batch_size, mode=each,
                                             label_targets=targets, progress=True, media=media)
            report["seconds"] = round(time.perf_counter() - start, 3)
            out[each] = report
        return out

    trained = evaluate_all(model)
    zero = None
    if zero_shot and not base_only:
        with _zero_shot(cfg, model, kind) as base:
            zero = evaluate_all(base)

    lines = [f"{'':24}{'accuracy':>10}{'macro-F1':>10}"]
    for each in modes:
        report = trained[each]
        entry = {k: report[k] for k in ("accuracy", "macro_f1", "majority_baseline", "per_class", "confusion", "seconds")}
        entry["examples_per_second"] = round(len(data.eval) / max(report["seconds"], 1e-9), 1)
        if each == "generate":
            entry["unmatched"] = report["unmatched"]
        name = "zero-shot" if base_only else "fine-tuned"
        lines.append(f"{name + ' (' + each + ')':24}{report['accuracy']:>10.4f}{report['macro_f1']:>10.4f}")
        if zero is not None:
            base = zero[each]
            entry["zero_shot"] = {k: base[k] for k in ("accuracy", "macro_f1", "per_class", "confusion")}
            entry["relative_error_reduction"] = relative_error_reduction(report["accuracy"], base["accuracy"])
            lines.append(f"{'zero-shot (' + each + ')':24}{base['accuracy']:>10.4f}{base['macro_f1']:>10.4f}")
        results[each] = entry
    primary = modes[0]
    baseline = trained[primary]["majority_baseline"]
    results["majority_baseline"] = baseline
    lines.append(f"{'majority baseline':24}{baseline['accuracy']:>10.4f}{'':>10}  (always {baseline['label']})")
    reduction = results[primary].get("relative_error_reduction")
    if reduction is not None:
        lines.append(f"relative error reduction vs zero-shot: {reduction:.1%}  ((acc - acc0) / (1 - acc0))")
    print("\n".join(lines))

    with (out_dir / "predictions.jsonl").open("w", encoding="utf-8") as f:
        for i, record in enumerate(trained[primary]["predictions"]):
            row = dict(record)
            if "generate" in trained and primary != "generate":
                row["generated"] = trained["generate"]["predictions"][i]["generated"]
                row["generated_prediction"] = trained["generate"]["predictions"][i]["prediction"]
            if zero is not None:
                row["zero_shot_prediction"] = zero[primary]["predictions"][i]["prediction"]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    if review_errors:
        write_errors_to_review(trained[primary]["predictions"], review_errors, out_dir / "errors_to_review.jsonl")
    confusion = trained[primary]["confusion"]
    (out_dir / "confusion_matrix.json").write_text(json.dumps(confusion, ensure_ascii=False, indent=2), encoding="utf-8")
    plot_confusion_matrix(confusion["matrix"], confusion["labels"], out_dir / "confusion_matrix.png",
                          title=f"{primary}: accuracy {trained[primary]['accuracy']:.3f}")
    (out_dir / "eval_results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    record_outputs(out_dir, EVAL_OUTPUTS, BASE_EVALUATED if base_only else "finished")
    print(f"wrote eval_results.json, predictions.jsonl, confusion_matrix.json/.png to {out_dir}")
    return results


def eval_cap_note(cfg, stats: dict) -> str | None:
    """A line saying the test split was cut by max_samples / max_eval_samples, and how to score all of it:
    max_samples caps every dataset (LLaMA-Factory's meaning), so a run trained on 800 examples also scores
    only 800 test examples unless told otherwise."""
    if not cfg.data.eval_dataset:
        return None
    names = split_names(cfg.data.eval_dataset)
    cut = sum(v for k, v in stats.get("dropped", {}).items()
              if k.endswith("beyond max_samples/num_samples") and k.split(":")[0] in names)
    if not cut:
        return None
    key = "max_eval_samples" if cfg.data.max_eval_samples else "max_samples"
    return (f"test : {cut} more examples left out by {key}; add max_samples=null max_eval_samples=null to score "
            f"the whole split")


def sample_errors(predictions: Sequence[dict], n: int, seed: int = 0) -> list[dict]:
    """Up to n misclassified predictions drawn at random with a fixed seed, in test-set order.

    An accuracy alone cannot say whether the misses are the model's or the labels' (seed 003 checked its label
    map on 50 examples read by a person); reading a random sample of the misses can."""
    import random

    errors = [i for i, p in enumerate(predictions) if p["prediction"] != p["gold"]]
    chosen = sorted(random.Random(seed).sample(errors, min(n, len(errors))))
    return [{"index": i, **predictions[i], "verdict": ""} for i in chosen]


def write_errors_to_review(predictions: Sequence[dict], n: int, path: Path) -> None:
    rows = sample_errors(predictions, n)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    misses = sum(p["prediction"] != p["gold"] for p in predictions)
    print(f"{len(rows)} of {misses} misclassified test examples, drawn at random, to read by hand "
          f"(fill in verdict: label wrong / model wrong / unclear) -> {path}")
    for row in rows:
        text = " ".join(row["text"].split())
        print(f"  #{row['index']:<5} gold {row['gold']}  predicted {row['prediction']}  {text[:90]}")


def predict_generation(model: torch.nn.Module, tokenizer: Any, examples: Sequence[dict], max_new_tokens: int,
                       batch_size: int = 32, output_dir: str | None = None, progress: bool = True,
                       stop_token_ids: Sequence[int] = (), sampling: dict | None = None, media=None) -> dict:
    """Answers (greedy unless `sampling` says otherwise) to tokenised SFT examples, scored against their reference answers with BLEU-4 and
    ROUGE-1/2/L as LLaMA-Factory scores them; writes `generated_predictions.jsonl` (prompt, predict, label) into
    `output_dir` when given. An example prepared for prediction carries prompt_ids / answer_ids (the conversation
    up to its last answer, and that answer: LLaMA-Factory's do_predict encoding); others are cut at their first
    trained token."""
    prompts = [e["prompt_ids"] if "prompt_ids" in e else prompt_ids_of(e) for e in examples]
    references = [tokenizer.decode(e["answer_ids"] if "answer_ids" in e else [t for t in e["labels"] if t != -100],
                                   skip_special_tokens=True) for e in examples]
    answers = generate_texts(model, tokenizer, prompts, max_new_tokens, batch_size, stop_token_ids=stop_token_ids,
                             progress=progress, sampling=sampling,
                             media=[media(e) for e in examples] if media is not None else None)
    metrics = {f"predict_{k}": v for k, v in generation_metrics(answers, references).items()}
    if output_dir is not None:
        path = Path(output_dir) / "generated_predictions.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for prompt, answer, reference in zip(prompts, answers, references):
                f.write(json.dumps({"prompt": tokenizer.decode(prompt, skip_special_tokens=False), "predict": answer,
                                    "label": reference}, ensure_ascii=False) + "\n")
    return metrics
