"""tune_report.html: one self-contained page of a hyperparameter search, from its tune_results.json alone.

The optimisation history (every trial's score, the pruned ones where they were stopped, the best so far), each trial's
evaluations over its run (where the pruner cut), how much each key explained the scores (parameter importance), the
final model's test scores beside the baselines, and every trial's keys. Built as report.html is (page.py): plotly.js
and the renderer inlined, figure JSON made script-safe, strings escaped, a CSP that runs only those two scripts.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import plotly
import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, StrictUndefined

from steadytune import __version__
from steadytune.report.charts import Chart, array, base_layout, colour, text
from steadytune.report.page import figure_json, plotly_js, renderer_js, script_json, sha256_source, shown

REPORT = "tune_report.html"
RESULTS = "tune_results.json"
GENERATOR = "steadytune tune"
STATE_STYLE = {"complete": ("circle", "#1f77b4"), "pruned": ("x", "#ff7f0e"), "fail": ("x-thin", "#d62728")}


def write_tune_report(folder: str | Path) -> Path | None:
    """FOLDER/tune_report.html from FOLDER/tune_results.json. A view of saved results: a failure is printed, never
    raised (the search and its results stand without the page)."""
    folder = Path(folder)
    path = folder / REPORT
    try:
        results = json.loads((folder / RESULTS).read_text(encoding="utf-8"))
        page = render(results, folder)
        tmp = path.with_name(f".{REPORT}.tmp")
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)
    except Exception as e:  # noqa: BLE001 - a view must never cost the user a finished search
        print(f"warning: {REPORT} not written ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return path


def render(results: dict, folder: Path) -> str:
    charts = [c for c in (history_chart(results), evaluations_chart(results), importance_chart(results)) if c]
    script, js = renderer_js(), plotly_js()
    csp = ("default-src 'none'; "
           f"script-src {sha256_source(js)} {sha256_source(script)}; "
           "style-src 'unsafe-inline'; img-src data:; font-src data:; connect-src 'none'; "
           "form-action 'none'; base-uri 'none'")
    return template().render(
        folder=str(folder), summary=summary_rows(results), final=final_rows(results), charts=charts,
        importance_note=(results.get("importance") or {}).get("note"), trials=trial_rows(results),
        keys=searched_keys(results), notes=(results.get("space") or {}).get("notes", []),
        figures={c.id: figure_json(c) for c in charts}, tokens_tables=script_json([]),
        generated=datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), generator=f"{GENERATOR} {__version__}",
        csp=csp, plotly_js=js, renderer_js=script, plotly_version=plotly.__version__, plotly_kb=len(js) // 1024)


# ------------------------------------------------------------------------------------------------------
# Charts
# ------------------------------------------------------------------------------------------------------

def history_chart(results: dict) -> Chart | None:
    """Each trial's score by trial number (pruned trials at their last evaluation), and the best so far."""
    trials = results.get("trials") or []
    if not trials:
        return None
    metric, maximize = results.get("metric", "score"), results.get("direction") == "maximize"
    fig = go.Figure()
    for state, (symbol, col) in STATE_STYLE.items():
        shown_trials = [t for t in trials if t["state"] == state and score_of(t) is not None]
        if not shown_trials:
            continue
        fig.add_trace(go.Scatter(
            x=array([t["number"] for t in shown_trials]), y=array([score_of(t) for t in shown_trials]), mode="markers",
            name=text(f"{state} ({len(shown_trials)})"), marker=dict(symbol=symbol, size=9, color=col),
            hovertext=[text(hover_of(t)) for t in shown_trials], hoverinfo="text"))
    numbers, best, running = [], [], None
    for t in sorted(trials, key=lambda t: t["number"]):
        if t["state"] == "complete" and t["value"] is not None:
            running = t["value"] if running is None else (max if maximize else min)(running, t["value"])
        if running is not None:
            numbers.append(t["number"])
            best.append(running)
    if numbers:
        fig.add_trace(go.Scatter(x=array(numbers), y=array(best), mode="lines", name="best so far",
                                 line=dict(color="#2ca02c", shape="hv")))
    fig.update_layout(**base_layout(f"optimisation history: {metric} on the validation split", metric, "trial"))
    return Chart("history", "optimisation history", fig)


def evaluations_chart(results: dict) -> Chart | None:
    """Each trial's evaluations over its run (% of its steps): where the pruner stopped the ones it stopped."""
    trials = [t for t in results.get("trials") or [] if t.get("evaluations")]
    if not trials:
        return None
    fig = go.Figure()
    for i, t in enumerate(trials):
        xs, ys = zip(*t["evaluations"])
        dash = "solid" if t["state"] == "complete" else "dot"
        fig.add_trace(go.Scatter(x=array(xs), y=array(ys), mode="lines+markers", name=text(f"trial {t['number']}"),
                                 line=dict(color=colour(i), dash=dash), hovertext=text(hover_of(t)), showlegend=False))
    fig.update_layout(**base_layout("evaluations during each trial (dotted: pruned)", results.get("metric", ""),
                                    "% of the trial's run"))
    return Chart("evaluations", "evaluations during each trial", fig)


def importance_chart(results: dict) -> Chart | None:
    values = (results.get("importance") or {}).get("values") or {}
    if not values:
        return None
    keys = sorted(values, key=values.get)
    fig = go.Figure(go.Bar(x=np.array([values[k] for k in keys], dtype=np.float32), y=[text(k) for k in keys],
                           orientation="h", marker=dict(color="#1f77b4")))
    fig.update_layout(**base_layout("parameter importance (share of the score's variation)", "", "importance"))
    return Chart("importance", "parameter importance", fig)


def score_of(t: dict) -> float | None:
    if t.get("value") is not None:
        return t["value"]
    return t["evaluations"][-1][1] if t.get("evaluations") else None


def hover_of(t: dict) -> str:
    keys = ", ".join(f"{k}={short(v)}" for k, v in (t.get("keys") or {}).items())
    why = f" ({t['failure']})" if t.get("failure") else f" at {t['pruned_at']}%" if t.get("pruned_at") else ""
    return f"trial {t['number']}: {t['state']}{why}; {keys}"


def short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


# ------------------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------------------

def summary_rows(results: dict) -> list[tuple[str, Any]]:
    trials = results.get("trials") or []
    states = {s: sum(t["state"] == s for t in trials) for s in ("complete", "pruned", "fail", "running")}
    failed = sum(1 for t in trials if t.get("failure"))
    best = results.get("best") or {}
    validation = results.get("validation") or {}
    rows = [("config", f"{results.get('config')} {' '.join(results.get('overrides') or [])}".strip()),
            ("metric", f"{results.get('metric')} on the validation split ({results.get('direction')})"),
            ("validation split", f"{validation.get('validation_examples')} rows held out of "
                                 f"{(validation.get('train_examples') or 0) + (validation.get('validation_examples') or 0)}"
                                 " training rows" if validation else "—"),
            ("test split", validation.get("test_split") or "none"),
            ("trials", f"{states['complete']} complete, {states['pruned']} pruned ({failed} of them failed: out of "
                       f"memory or non-finite), {states['fail']} stopped unfinished; {results.get('trials_asked')} asked"),
            ("sampler, pruner", f"{results.get('sampler')}, {results.get('pruner')} at "
                                f"{results.get('evaluations_per_trial')} evaluations per trial"),
            ("search time", f"{results.get('search_seconds')} s")]
    if best:
        rows.append(("best", f"trial {best.get('number')}: {results.get('metric')} {short(best.get('value'))}"))
    return rows


def final_rows(results: dict) -> list[tuple[str, Any]]:
    final = results.get("final") or {}
    test = final.get("test") or {}
    if not final:
        return []
    rows = [("trained from", f"{final.get('config')} (trial {final.get('trial')}'s keys) on all the training rows: "
                             f"{final.get('steps')} steps in {final.get('train_seconds')} s, in {final.get('output_dir')}/")]
    if "accuracy" in test:
        rows += [("test accuracy", short(test.get("accuracy"))), ("test macro-F1", short(test.get("macro_f1"))),
                 ("majority class", short(test.get("majority_baseline"))),
                 ("zero-shot accuracy", short(test.get("zero_shot_accuracy"))), ("test rows", test.get("n"))]
    else:
        rows += [(k, short(v)) for k, v in test.items()]
    return rows


def searched_keys(results: dict) -> list[str]:
    return list(((results.get("space") or {}).get("search") or {}).keys())


def trial_rows(results: dict) -> list[dict]:
    keys = searched_keys(results)
    rows = []
    for t in sorted(results.get("trials") or [], key=lambda t: t["number"]):
        params = t.get("params") or {}
        rows.append({"number": t["number"], "state": t["state"], "value": score_of(t),
                     "why": t.get("failure") or (f"pruned at {t['pruned_at']}%" if t.get("pruned_at") else ""),
                     "seconds": t.get("seconds"), "values": [short(params.get(k, "")) for k in keys]})
    return rows


@lru_cache(maxsize=1)
def template():
    env = Environment(loader=PackageLoader("steadytune.report", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, finalize=shown)
    env.filters["num"] = lambda v, d=4: "—" if not isinstance(v, (int, float)) else f"{v:.{d}f}"
    return env.get_template("tune.html.j2")
