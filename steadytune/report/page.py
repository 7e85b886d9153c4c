"""One HTML page from one or more runs: plotly.js and the page's own script inlined, nothing fetched.

Safety of a page built from untrusted strings (reviews, label words, model output, file names):
- the Jinja2 template autoescapes every value it prints;
- figure JSON sits in `<script type="application/json">` blocks with `<`, `>` and `&` written as \\u escapes,
  so no string can close the block; plotly text is escaped in charts.py;
- the Content-Security-Policy runs only the two inline scripts whose SHA-256 it names (an injected script or
  `onerror=` handler would not run) and allows no request at all: `default-src 'none'`, images and fonts
  only from data: URLs.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import plotly.io as pio
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from steadytune import __version__
from steadytune.report.charts import (
    Chart,
    baseline_chart,
    baseline_rows,
    confusion_chart,
    curve_charts,
    expert_load_chart,
    generation_chart,
    length_chart,
    primary_result,
    visible_controls,
)
from steadytune.report.rundata import Run, as_number, load_run
from steadytune.training.run_folder import MANIFEST, record_outputs

GENERATOR = "steadytune report"


def write_report(run_dirs: list[str | Path], output: str | Path) -> Path:
    """Read the runs, render the page, and write it atomically (a reader never sees half a file)."""
    runs = load_runs(run_dirs)
    page = render(runs)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    if tmp.is_symlink():   # a run folder from elsewhere may plant one: the page is never written through it
        tmp.unlink()
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, output)
    if (output.parent / MANIFEST).is_file():
        # Written into a run folder: listed in its manifest, so a later run there may replace it (training/run_folder.py
        # refuses to replace what no steadytune command wrote).
        record_outputs(output.parent, [output.name])
    return output


def load_runs(run_dirs: list[str | Path]) -> list[Run]:
    """Runs named by their folder; two folders of the same name get their parent's name too."""
    paths = [Path(p) for p in run_dirs]
    names = [p.resolve().name for p in paths]
    runs = []
    for path, name in zip(paths, names):
        if names.count(name) > 1:
            name = f"{path.resolve().parent.name}/{name}"
        runs.append(load_run(path, name))
    return runs


def render(runs: list[Run]) -> str:
    curves = curve_charts(runs)
    details = [run_details(run, i) for i, run in enumerate(runs)]
    charts = curves + [c for d in details for c in d["charts"]]
    script = renderer_js()
    js = plotly_js()
    csp = ("default-src 'none'; "
           f"script-src {sha256_source(js)} {sha256_source(script)}; "
           "style-src 'unsafe-inline'; img-src data:; font-src data:; connect-src 'none'; "
           "form-action 'none'; base-uri 'none'")
    return template().render(
        runs=runs, headers=[run_header(run) for run in runs], curves=curves, details=details,
        figures={c.id: figure_json(c) for c in charts},
        tokens_tables=script_json([tokens_table(run) for run in runs]),
        config_diff=config_diff(runs) if len(runs) > 1 else None, results=results_table(runs),
        generated=datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), generator=f"{GENERATOR} {_version()}",
        csp=csp, plotly_js=js, renderer_js=script, plotly_version=_plotly_version(), plotly_kb=len(js) // 1024)


# ------------------------------------------------------------------------------------------------------
# What the template shows
# ------------------------------------------------------------------------------------------------------

def run_header(run: Run) -> dict[str, Any]:
    c, manifest, results = run.config, run.manifest or {}, run.train_results or {}
    method = c.get("finetuning_type", "?")
    if method == "lora":
        target = run.decisions.get("lora_target", {}).get("value", c.get("lora_target"))
        alpha = run.decisions.get("lora_alpha", {}).get("value", c.get("lora_alpha"))
        extras = [name for name, on in (("DoRA", c.get("use_dora")), ("rsLoRA", c.get("use_rslora"))) if on]
        method = f"LoRA r={c.get('lora_rank')} alpha={alpha} on {target}" + (f" ({', '.join(extras)})" if extras else "")
    data = str(c.get("dataset") or "?")
    if c.get("eval_dataset"):
        data += f"; eval {c['eval_dataset']}"
    elif c.get("val_size"):
        data += f"; val_size {c['val_size']}"
    examples = (run.data_stats or {}).get("train", {}) or {}
    if examples.get("examples"):
        data += f" ({examples['examples']:,} training examples)"
    best = run.best_eval()
    final = primary_result(run)
    rows = [
        ("status", run.status + (f": {run.status_detail}" if run.status_detail else "")),
        ("model", c.get("model_name_or_path", "?")),
        ("method", method),
        ("data", data),
        ("steps", f"{run.last_step}" + (f" of {run.total_steps}" if run.total_steps else "")),
        ("wall time", wall_time(run)),
        ("target tokens", f"{run.tokens_seen:,}" if run.tokens_seen is not None else "—"),
        ("final loss", _fmt(results.get("final_loss") if results else _last(run, "loss"))),
        ("best eval", f"{best[0]} {best[1]:.4f} at step {best[2]}" if best else "—"),
    ]
    if final is not None:
        rows.append(("test result", f"accuracy {final.get('accuracy', 0):.4f}, macro-F1 {final.get('macro_f1', 0):.4f} "
                                    f"({final['mode']}, {(run.eval_results or {}).get('n', '?')} examples)"))
    elif run.demo_results and isinstance(run.demo_results.get("after"), dict):
        after = run.demo_results["after"]
        rows.append(("test result", f"accuracy {after.get('accuracy', 0):.4f}, macro-F1 {after.get('macro_f1', 0):.4f} "
                                    f"(demo, {run.demo_results.get('test_examples', '?')} examples)"))
    precision = run.decisions.get("precision", {}).get("value")
    if precision:
        rows.append(("precision", str(precision)))
    return {"rows": rows, "command": command_of(manifest.get("command")), "started": manifest.get("started"),
            "status": run.status, "notes": run.notes + list((run.data_stats or {}).get("warnings", []))}


def command_of(recorded: str | None) -> str | None:
    """The manifest's command (" ".join(sys.argv)) as the user typed it: `steadytune train ...`."""
    if not recorded:
        return None
    first, _, rest = recorded.partition(" ")
    if Path(first).name in ("__main__.py", "steadytune"):
        return f"steadytune {rest}".strip()
    return recorded


def started_at(manifest: dict) -> float | None:
    try:
        return datetime.datetime.strptime(manifest.get("started", ""), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (TypeError, ValueError):
        return None


def wall_time(run: Run) -> str:
    results = run.train_results or {}
    parts = []
    if results.get("train_seconds") is not None:
        parts.append(f"training {duration(results['train_seconds'])}")
    started = started_at(run.manifest or {})
    if started is not None:
        end = datetime.datetime.now().timestamp() if run.status == "running" else (run.last_write or started)
        parts.append(f"{'running for' if run.status == 'running' else 'start to last write'} {duration(end - started)}")
    return "; ".join(parts) or "—"


def duration(seconds: float) -> str:
    seconds = max(float(seconds), 0.0)
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {s} s"
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min"


def _fmt(value) -> str:
    number = as_number(value)
    return "—" if number is None else f"{number:.4f}"


def _last(run: Run, key: str):
    values = [v for v in run.series(key)[1] if v is not None]
    return values[-1] if values else None


def run_details(run: Run, index: int) -> dict[str, Any]:
    """Everything shown for one run below the curves: results, data, config, environment."""
    charts = [c for c in (baseline_chart(run, index), confusion_chart(run, index), generation_chart(run, index),
                          length_chart(run, index), expert_load_chart(run, index)) if c is not None]
    by_kind = {c.id.rsplit("-", 1)[0]: c for c in charts}
    primary = primary_result(run)
    per_class = []
    if primary and isinstance(primary.get("per_class"), dict):
        zero = (primary.get("zero_shot") or {}).get("per_class") or {}
        for label, scores in primary["per_class"].items():
            per_class.append({"label": label, **{k: scores.get(k) for k in ("precision", "recall", "f1", "support")},
                              "zero_f1": (zero.get(label) or {}).get("f1")})
    stats = run.data_stats or {}
    batching = stats.get("batching") or {}
    train = stats.get("train") or {}
    truncated = stats.get("truncated")
    return {
        "index": index, "run": run, "charts": charts, "chart": by_kind, "task": run.task,
        "baselines": baseline_rows(run), "primary": primary, "per_class": per_class,
        "misclassified": run.misclassified, "misclassified_source": run.misclassified_source,
        "label_scores": primary is not None and primary.get("mode") == "score",
        "generated": run.generated, "generation_metrics": generation_metrics(run),
        "other_results": other_results(run, primary),
        "data": stats, "data_rows": data_rows(stats, train, truncated, batching),
        "decisions": [(k, v.get("value"), v.get("reason")) for k, v in run.decisions.items() if isinstance(v, dict)],
        "config_rows": flatten(run.config),
        "environment": environment_rows(run.environment),
        "findings": (run.environment or {}).get("findings", []),
    }


MAX_RESULT_ROWS = 100


def other_results(run: Run, primary: dict | None) -> list[tuple[str, Any]]:
    """eval_results.json as written, when the page cannot show it as classification or generation results (a
    dpo/kto/rm run's losses and rewards, another tool's file, a task of another name): never "no results yet" for a
    file that is there."""
    results = run.eval_results
    if not results:
        return []
    task = results.get("task")
    if (task == "classification" and primary is not None) or (task == "generation" and generation_metrics(run)):
        return []
    return flatten(results)[:MAX_RESULT_ROWS]


def generation_metrics(run: Run) -> list[tuple[str, float]]:
    results = run.eval_results or {}
    return [(k.removeprefix("predict_"), results[k]) for k in results
            if k.startswith("predict_") and as_number(results[k]) is not None]


def data_rows(stats: dict, train: dict, truncated, batching: dict) -> list[tuple[str, str]]:
    if not stats:
        return []
    rows = []
    for split in ("train", "eval"):
        s = stats.get(split)
        if s:
            rows.append((f"{split} examples", f"{s['examples']:,}: {s['tokens']:,} tokens; mean {s['mean']}, median "
                                              f"{s['p50']}, p90 {s['p90']}, max {s['max']} tokens"))
    per_split = stats.get("truncation") or {}
    for split, cut in per_split.items():
        if isinstance(cut, dict) and cut.get("examples"):
            rows.append((f"{split} truncated to cutoff_len",
                         f"{cut['truncated']:,} of {cut['examples']:,} ({100 * cut['truncated'] / cut['examples']:.1f}%)"
                         + (f"; {cut['examples_losing_prompt']:,} lost prompt tokens ({cut['lost_prompt_tokens']:,} "
                            f"in all), {cut['lost_answer_tokens']:,} answer tokens cut" if cut["truncated"] else "")
                         + f"; cutoff_len {stats.get('cutoff_len')}"))
    if truncated is not None and not per_split:
        share = f" ({100 * truncated / train['examples']:.1f}% of training examples)" if train.get("examples") else ""
        rows.append(("truncated to cutoff_len", f"{truncated:,}{share}; cutoff_len {stats.get('cutoff_len')}"))
    for reason, count in (stats.get("dropped") or {}).items():
        rows.append(("dropped", f"{count:,}: {reason}"))
    if stats.get("trained_tokens") is not None:
        rows.append(("trained (target) tokens", f"{stats['trained_tokens']:,}"))
    if batching.get("efficiency") is not None:
        rows.append(("batching efficiency", f"{100 * batching['efficiency']:.1f}% of computed token slots hold real "
                                            f"tokens ({batching['mode']}; {batching['real_tokens']:,} real of "
                                            f"{batching['computed_tokens']:,} over {batching['micro_batches']:,} "
                                            "micro-batches of one epoch)"))
    for split, counts in (stats.get("class_counts") or {}).items():
        if counts:
            total = sum(counts.values())
            rows.append((f"{split} classes", ", ".join(f"{k} {v:,} ({100 * v / total:.1f}%)" for k, v in counts.items())))
    return rows


def flatten(mapping: dict, prefix: str = "") -> list[tuple[str, Any]]:
    rows = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            rows += flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def environment_rows(environment: dict | None) -> list[tuple[str, Any]]:
    if not environment:
        return []
    hardware = environment.get("hardware") or {}
    rows = [("backend", hardware.get("backend")), ("torch", hardware.get("torch_version"))]
    for key in ("hip_version", "cuda_version"):
        if hardware.get(key):
            rows.append((key.replace("_", " "), hardware[key]))
    for i, gpu in enumerate(hardware.get("gpus") or []):
        if isinstance(gpu, dict):
            rows.append((f"GPU {i}", ", ".join(f"{k} {v}" for k, v in gpu.items() if v not in (None, "", []))))
    rows.append(("platform", environment.get("platform")))
    for name, version in (environment.get("versions") or {}).items():
        rows.append((name, version))
    for name, value in (environment.get("env") or {}).items():
        rows.append((f"${name}", value))
    return rows


def config_diff(runs: list[Run]) -> dict[str, Any]:
    """Keys whose resolved value differs between the runs (config and recorded decisions)."""
    tables = [dict(flatten(run.config)) | {f"decision: {k}": v.get("value") for k, v in run.decisions.items()
                                           if isinstance(v, dict)} for run in runs]
    keys = []
    for table in tables:
        keys += [k for k in table if k not in keys]
    rows = [(k, [table.get(k, "—") for table in tables]) for k in keys
            if len({repr(table.get(k, "—")) for table in tables}) > 1]
    return {"names": [run.name for run in runs], "rows": rows, "same": len(keys) - len(rows)}


def results_table(runs: list[Run]) -> dict[str, Any]:
    rows = []
    for run in runs:
        best = run.best_eval()
        final = primary_result(run)
        after = (run.demo_results or {}).get("after") if final is None else final
        results = run.train_results or {}
        steps = [r for r in run.steps if as_number(r.get("tokens_per_s")) is not None]
        rows.append({"name": run.name, "status": run.status, "steps": run.last_step,
                     "final_loss": _fmt(results.get("final_loss") if results else _last(run, "loss")),
                     "best": f"{best[0]} {best[1]:.4f} (step {best[2]})" if best else "—",
                     "accuracy": _fmt((after or {}).get("accuracy")), "macro_f1": _fmt((after or {}).get("macro_f1")),
                     "train_seconds": duration(results["train_seconds"]) if results.get("train_seconds") else "—",
                     "tokens_per_s": f"{sum(r['tokens_per_s'] for r in steps) / len(steps):,.0f}" if steps else "—",
                     "guard_events": len(run.guard_events)})
    return {"rows": rows}


def tokens_table(run: Run) -> list[list[float]]:
    """[[steps], [target tokens trained]] for the page's steps/tokens switch."""
    pairs = [(int(r["step"]), float(r["tokens"])) for r in run.steps if as_number(r.get("tokens")) is not None]
    return [[0] + [p[0] for p in pairs], [0.0] + [p[1] for p in pairs]]


# ------------------------------------------------------------------------------------------------------
# Page assembly
# ------------------------------------------------------------------------------------------------------

def figure_json(chart: Chart) -> str:
    return script_safe(pio.to_json(chart.figure, validate=False, pretty=False))


def script_json(value: Any) -> str:
    import json
    return script_safe(json.dumps(value, ensure_ascii=False, allow_nan=False))


def script_safe(json_text: str) -> str:
    """JSON that can sit inside a <script> block: `<`, `>` and `&` only ever occur inside JSON strings,
    where their \\u escapes mean the same, so no `</script>` or `<!--` can appear."""
    return json_text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def sha256_source(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"


@lru_cache(maxsize=1)
def plotly_js() -> str:
    from plotly.offline import get_plotlyjs
    return get_plotlyjs()


@lru_cache(maxsize=1)
def renderer_js() -> str:
    return (resources.files("steadytune.report") / "templates" / "render.js").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def template():
    env = Environment(loader=PackageLoader("steadytune.report", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, finalize=shown)
    env.filters["num"] = lambda v, d=4: "—" if as_number(v) is None else f"{as_number(v):.{d}f}"
    env.filters["count"] = lambda v: f"{v:,}" if isinstance(v, int) else ("—" if v is None else str(v))
    env.filters["clip"] = clip
    return env.get_template("report.html.j2")


def shown(value: Any) -> Any:
    """Every value the template prints, before escaping: bidirectional controls written as [U+XXXX] (a config value
    `evil\u202egpj.exe` would show as `evilexe.jpg`). The page's own scripts and JSON blocks (Markup) pass as
    they are: their hashes are in the Content-Security-Policy."""
    if isinstance(value, Markup) or value is None or isinstance(value, (bool, int, float)):
        return value
    return visible_controls(str(value))


def clip(value: Any, limit: int = 600) -> str:
    """Long texts (reviews, prompts, answers) cut for the tables; the files keep them whole."""
    value = str(value)
    return value if len(value) <= limit else value[:limit] + "…"


def _plotly_version() -> str:
    import plotly
    return plotly.__version__


def _version() -> str:
    return __version__
