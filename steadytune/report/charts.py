"""Plotly figures of one or more runs: training curves with guard events, classification and generation
results, data lengths.

plotly renders text as a small subset of HTML (`<b>`, `<br>`, `<a>`), so every string that comes from a run
(run names, label words, event reasons) goes through `text()` first: a review reading `<b>` shows as `<b>`.
Numbers go in as numpy arrays, which plotly stores as base64 typed arrays (a 10,000-step curve is ~53 kB).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from steadytune.report.rundata import Run, as_number
from steadytune.training.monitor import smooth

HEIGHT = 380
# A curve of more points than this is drawn through each bucket's lowest and highest point: at chart width
# (~600 px) that looks the same and keeps every spike, and a 10,000-step run draws in a fraction of the time.
MAX_POINTS = 2000
EVENT_STYLE = {  # event -> (marker symbol, colour)
    "guard": ("x", "#d62728"),
    "fault_injected": ("triangle-down", "#9467bd"),
    "resume": ("diamond", "#7f7f7f"),
}
EVAL_LABELS = {"eval_loss": "eval loss", "eval_accuracy": "eval accuracy", "eval_macro_f1": "eval macro-F1"}
# stage grpo's per-step roll-out statistics: drawn in reward_charts, not among the evaluation scores
ROLLOUT_DETAIL = re.compile(r"^eval_(reward_std|rewards/.*/std|completions/|clip_ratio/|cispo_clip_ratio|frac_reward_zero_std|kl$)")


@dataclass
class Chart:
    id: str
    title: str
    figure: go.Figure
    over_steps: bool = False  # an x axis of optimizer steps, which the page can switch to tokens


# Bidirectional controls reorder the text around them (`evil\u202egpj.exe` shows as `evilexe.jpg`): a page built from
# run strings shows each as its code point instead, in tables and in charts.
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible_controls(value: str) -> str:
    """`value` with every bidirectional control written as [U+XXXX]."""
    return BIDI_CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", value)


def text(value) -> str:
    """A string from a run, made literal for plotly's HTML-like text."""
    return html.escape(visible_controls(str(value)), quote=False)


def colour(i: int) -> str:
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
    return palette[i % len(palette)]


def base_layout(title: str, y_title: str = "", x_title: str = "optimizer step") -> dict:
    return dict(template="plotly_white", height=HEIGHT, margin=dict(l=60, r=20, t=40, b=10),
                title=dict(text=text(title), x=0.01, font=dict(size=14)), hovermode="closest",
                # below the axis, where several runs' entries have room (above, they ran into the title)
                legend=dict(orientation="h", y=-0.2, yanchor="top", x=0, xanchor="left"),
                xaxis=dict(title=dict(text=x_title)), yaxis=dict(title=dict(text=y_title)))


def array(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float32)


# ------------------------------------------------------------------------------------------------------
# Curves over steps
# ------------------------------------------------------------------------------------------------------

def curve_charts(runs: list[Run]) -> list[Chart]:
    """Loss, evaluation, learning rate, gradient norm, throughput and memory over optimizer steps; runs
    overlaid; guard events marked on every curve."""
    charts = [loss_chart(runs)] + reward_charts(runs)
    if any(k != "eval_loss" and not ROLLOUT_DETAIL.match(k) for run in runs for k in run.eval_keys()):
        charts.append(eval_chart(runs))
    charts += [series_chart(runs, "lr", "learning rate", "learning rate"), grad_norm_chart(runs),
               series_chart(runs, "tokens_per_s", "throughput", "tokens / s")]
    memory = [k for k in ("mem_allocated_gib", "mem_reserved_gib", "mem_peak_gib")
              if any(run.series(k)[0] for run in runs)]
    charts.append(memory_chart(runs, memory))
    if any(run.series("moe_load_max")[0] for run in runs):   # a mixture of experts: how evenly the routers spread
        charts += [series_chart(runs, "moe_load_max", "routing: the busiest expert's load (1 = the uniform share)",
                                "x uniform share"),
                   series_chart(runs, "moe_aux_loss", "routing: load-balancing loss (top-k = balanced)", "aux loss")]
    return charts


def _name(run: Run, what: str, runs: list[Run]) -> str:
    return text(what if len(runs) == 1 else f"{run.name}: {what}")


def _line(run_index: int, steps, values, name: str, **style) -> go.Scatter:
    style.setdefault("mode", "lines")
    x, y = decimate(np.asarray(steps, dtype=np.int32), array(values))
    return go.Scatter(x=x, y=y, name=name, meta=[run_index], **style)


def decimate(x: np.ndarray, y: np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ~`limit` points: the first, the last, and each bucket's minimum and maximum, in step order
    (a NaN, a non-finite step, is kept where a bucket holds one, so it still breaks the line)."""
    n = len(x)
    if n <= limit:
        return x, y
    buckets = limit // 2
    size = -(-n // buckets)
    grid = np.pad(y, (0, buckets * size - n), mode="edge").reshape(buckets, size)
    missing = np.isnan(grid)
    start = np.arange(buckets) * size
    lowest = np.where(missing, np.inf, grid).argmin(axis=1)
    highest = np.where(missing, -np.inf, grid).argmax(axis=1)
    gaps = missing.any(axis=1)
    keep = np.concatenate([[0, n - 1], start + lowest, start + highest, start[gaps] + missing[gaps].argmax(axis=1)])
    index = np.unique(np.clip(keep, 0, n - 1))
    return x[index], y[index]


def loss_chart(runs: list[Run]) -> Chart:
    fig = go.Figure(layout=base_layout("training loss (raw, smoothed) and eval loss", "loss"))
    single = len(runs) == 1
    for i, run in enumerate(runs):
        steps, losses = run.series("loss")
        kept = [(s, v) for s, v in zip(steps, losses) if v is not None]
        fig.add_trace(_line(i, steps, losses, _name(run, "loss", runs), line=dict(color=colour(i), width=1),
                            opacity=0.35 if single else 0.25, visible=True if single else "legendonly"))
        if kept:
            s, v = zip(*kept)
            fig.add_trace(_line(i, s, smooth(v), _name(run, "smoothed", runs), line=dict(color=colour(i), width=2)))
        eval_steps, eval_losses = run.series("eval_loss", run.evals)
        if eval_steps:
            fig.add_trace(_line(i, eval_steps, eval_losses, _name(run, "eval loss", runs), mode="lines+markers",
                                line=dict(color=colour(i), dash="dash", width=1.5)))
        add_event_markers(fig, run, i, steps, losses, len(runs) > 1)
    return Chart("curve-loss", "loss", fig, over_steps=True)


def eval_chart(runs: list[Run]) -> Chart:
    fig = go.Figure(layout=base_layout("evaluation during training", "score"))
    dashes = ("solid", "dot", "dashdot", "longdash")
    baselines_drawn: set[float] = set()
    for i, run in enumerate(runs):
        keys = [k for k in run.eval_keys() if k != "eval_loss" and not ROLLOUT_DETAIL.match(k)]
        for j, key in enumerate(keys):
            steps, values = run.series(key, run.evals)
            fig.add_trace(_line(i, steps, values, _name(run, EVAL_LABELS.get(key, key), runs), mode="lines+markers",
                                line=dict(color=colour(i + j if len(runs) == 1 else i), dash=dashes[j % 4])))
        majority = majority_share(run)
        if majority is not None and keys and round(majority, 4) not in baselines_drawn:
            baselines_drawn.add(round(majority, 4))
            fig.add_hline(y=majority, line=dict(color=colour(i), dash="dot", width=1),
                          annotation_text=text(f"majority baseline {majority:.3f}" + ("" if len(runs) == 1
                                                                                       else f" ({run.name})")),
                          annotation_position="bottom right")
        if keys:
            add_event_markers(fig, run, i, *run.series(keys[0], run.evals), len(runs) > 1)
    return Chart("curve-eval", "evaluation", fig, over_steps=True)


def reward_charts(runs: list[Run]) -> list[Chart]:
    """stage grpo: the reward per step (the weighted sum and each function's mean, the held-out prompts' reward as
    markers), the completions' length, and what says whether the policy can still learn: the KL to the reference,
    the share of tokens whose ratio was clipped, of groups whose rewards were all equal, of completions cut at
    max_completion_length. Nothing for a run that logged no reward."""
    if not any(run.series("reward")[0] for run in runs):
        return []
    rewards = go.Figure(layout=base_layout("reward (training completions; held-out prompts as markers)", "reward"))
    for i, run in enumerate(runs):
        keys = ["reward"] + sorted({k for r in run.steps for k in r if k.startswith("rewards/") and k.endswith("/mean")})
        for j, key in enumerate(keys):
            steps, values = run.series(key)
            name = "reward" if key == "reward" else key.removeprefix("rewards/").removesuffix("/mean")
            rewards.add_trace(_line(i, steps, values, _name(run, name, runs),
                                    line=dict(color=colour(i + j if len(runs) == 1 else i), width=2 if j == 0 else 1,
                                              dash="solid" if j == 0 else "dot")))
        eval_steps, eval_values = run.series("eval_reward", run.evals)
        if eval_steps:
            rewards.add_trace(_line(i, eval_steps, eval_values, _name(run, "held-out reward", runs),
                                    mode="lines+markers", line=dict(color=colour(i), dash="dash", width=1.5)))
        add_event_markers(rewards, run, i, *run.series("reward"), len(runs) > 1)
    length = series_chart(runs, "completions/mean_length", "completion length", "tokens")
    shares = go.Figure(layout=base_layout("KL to the reference, clipped tokens, groups without signal, completions "
                                          "cut", "share / KL"))
    dashes = {"kl": "solid", "clip_ratio/region_mean": "dash", "cispo_clip_ratio": "dash", "frac_reward_zero_std": "dot",
              "completions/clipped_ratio": "dashdot"}
    labels = {"kl": "KL", "clip_ratio/region_mean": "clipped tokens", "cispo_clip_ratio": "weights capped (cispo)",
              "frac_reward_zero_std": "groups with equal rewards", "completions/clipped_ratio": "cut at max_completion_length"}
    for i, run in enumerate(runs):
        for key, dash in dashes.items():
            steps, values = run.series(key)
            if steps:
                shares.add_trace(_line(i, steps, values, _name(run, labels[key], runs),
                                       line=dict(color=colour(i), dash=dash, width=1.5)))
    return [Chart("curve-reward", "reward", rewards, over_steps=True), length,
            Chart("curve-grpo", "policy", shares, over_steps=True)]


def series_chart(runs: list[Run], key: str, title: str, y_title: str) -> Chart:
    fig = go.Figure(layout=base_layout(title, y_title))
    for i, run in enumerate(runs):
        steps, values = run.series(key)
        fig.add_trace(_line(i, steps, values, _name(run, title, runs), line=dict(color=colour(i), width=1.5)))
        add_event_markers(fig, run, i, steps, values, len(runs) > 1)
    if key == "lr":
        fig.update_yaxes(exponentformat="e")
    return Chart(f"curve-{re.sub(r'[^a-z0-9]+', '-', key)}", title, fig, over_steps=True)


def grad_norm_chart(runs: list[Run]) -> Chart:
    """Gradient norm before clipping, with the clip threshold as a step line (the guard tightens it after a
    rollback: each guard event that carries max_grad_norm moves the line)."""
    fig = go.Figure(layout=base_layout("gradient norm and clip threshold", "gradient norm"))
    for i, run in enumerate(runs):
        steps, values = run.series("grad_norm")
        fig.add_trace(_line(i, steps, values, _name(run, "gradient norm", runs), line=dict(color=colour(i), width=1.5)))
        threshold = clip_threshold(run, steps)
        if threshold is not None:
            fig.add_trace(_line(i, *threshold, _name(run, "clip threshold (max_grad_norm)", runs),
                                line=dict(color=colour(i), dash="dash", width=1, shape="hv")))
        add_event_markers(fig, run, i, steps, values, len(runs) > 1)
    return Chart("curve-grad-norm", "gradient norm", fig, over_steps=True)


def clip_threshold(run: Run, steps: list[int]) -> tuple[list[int], list[float]] | None:
    start = as_number(run.config.get("max_grad_norm"))
    if not steps or not start:
        return None
    xs, ys = [0], [start]
    for event in run.guard_events:
        value = as_number(event.get("max_grad_norm"))
        if value is not None and value != ys[-1]:
            xs.append(int(event.get("step", 0)))
            ys.append(value)
    xs.append(max(steps[-1], xs[-1]))
    ys.append(ys[-1])
    return xs, ys


def memory_chart(runs: list[Run], keys: list[str]) -> Chart:
    fig = go.Figure(layout=base_layout("GPU memory", "GiB"))
    if not keys:
        fig.add_annotation(text="no GPU memory in metrics.jsonl:<br>this run trained on the CPU<br>(memory is logged "
                                "on CUDA and ROCm devices)", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
    dashes = {"mem_allocated_gib": "solid", "mem_reserved_gib": "dash", "mem_peak_gib": "dot"}
    for i, run in enumerate(runs):
        for key in keys:
            steps, values = run.series(key)
            label = key.removeprefix("mem_").removesuffix("_gib")
            fig.add_trace(_line(i, steps, values, _name(run, label, runs),
                                line=dict(color=colour(i), dash=dashes[key], width=1.5)))
        if keys:
            add_event_markers(fig, run, i, *run.series(keys[0]), len(runs) > 1)
    return Chart("curve-memory", "memory", fig, over_steps=bool(keys))


def add_event_markers(fig: go.Figure, run: Run, run_index: int, steps: list[int], values: list,
                      name_run: bool = False) -> None:
    """Guard, fault-injection and resume events as markers on this curve, each with its details on hover."""
    by_kind: dict[str, list[dict]] = {}
    for event in run.events:
        if event.get("event") in EVENT_STYLE:
            by_kind.setdefault(event["event"], []).append(event)
    for kind, events in by_kind.items():
        symbol, marker_colour = EVENT_STYLE[kind]
        xs = [int(e.get("step", 0)) for e in events]
        ys = [value_near(steps, values, x) for x in xs]
        fig.add_trace(go.Scatter(
            x=np.asarray(xs, dtype=np.int32), y=array(ys), mode="markers", meta=[run_index],
            name=text(f"{kind.replace('_', ' ')} events" + (f" ({run.name})" if name_run else "")),
            marker=dict(symbol=symbol, size=11, color=marker_colour, line=dict(width=1.5, color=marker_colour)),
            hovertext=[event_hover(e) for e in events], hoverinfo="text", legendgroup=f"{kind}-{run_index}",
            showlegend=True))


def value_near(steps: list[int], values: list, step: int) -> float | None:
    """The curve's value at (or just before) `step`, so a marker sits on the line it annotates."""
    best = None
    for s, v in zip(steps, values):
        if v is None:
            continue
        if s <= step or best is None:
            best = v
        if s >= step:
            break
    return best


def event_hover(event: dict) -> str:
    head = event.get("event", "")
    if head == "guard":
        head = f"guard: {event.get('kind', '')} → {event.get('action', '')}"
    elif head == "fault_injected":
        head = f"fault injected: {event.get('kind', '')}"
    lines = [text(head), text(f"step {event.get('step')}")]
    skip = {"event", "kind", "action", "step"}
    for key, value in event.items():
        if key in skip:
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        shown = str(value)
        lines.append(text(f"{key}: {shown[:160]}{'…' if len(shown) > 160 else ''}"))
    return "<br>".join(lines)


# ------------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------------

def majority_share(run: Run) -> float | None:
    primary = primary_result(run)
    if primary and isinstance(primary.get("majority_baseline"), dict):
        return as_number(primary["majority_baseline"].get("accuracy"))
    if run.demo_results:
        return as_number(run.demo_results.get("majority_baseline"))
    counts = (run.data_stats or {}).get("class_counts", {}).get("eval")
    if counts:
        return max(counts.values()) / max(sum(counts.values()), 1)
    return None


def primary_result(run: Run) -> dict | None:
    """The classification result eval wrote for its first mode (score, else generate)."""
    results = run.eval_results or {}
    for mode in ("score", "generate"):
        if isinstance(results.get(mode), dict):
            return dict(results[mode], mode=mode)
    return None


def baseline_rows(run: Run) -> list[tuple[str, float | None, float | None]]:
    """(what, accuracy, macro-F1): the majority class, zero-shot and the fine-tuned model."""
    rows: list[tuple[str, float | None, float | None]] = []
    primary = primary_result(run)
    n_classes = len(run.config.get("label_names") or []) or None
    majority = majority_share(run)
    if majority is not None:
        # Always answering the majority class: F1 2p/(1+p) for that class, 0 for the others.
        macro = 2 * majority / (1 + majority) / n_classes if n_classes else None
        rows.append(("majority class", majority, macro))
    if primary is not None:
        zero = primary.get("zero_shot")
        if isinstance(zero, dict):
            rows.append((f"zero-shot ({primary['mode']})", as_number(zero.get("accuracy")),
                         as_number(zero.get("macro_f1"))))
        elif isinstance((run.demo_results or {}).get("zero_shot"), dict):  # the demo scored the base model first
            zero = run.demo_results["zero_shot"]
            rows.append(("zero-shot (demo, before training)", as_number(zero.get("accuracy")),
                         as_number(zero.get("macro_f1"))))
        rows.append((f"fine-tuned ({primary['mode']})", as_number(primary.get("accuracy")),
                     as_number(primary.get("macro_f1"))))
    elif run.demo_results:
        for key, label in (("zero_shot", "zero-shot (before)"), ("after", "fine-tuned (after)")):
            part = run.demo_results.get(key)
            if isinstance(part, dict):
                rows.append((label, as_number(part.get("accuracy")), as_number(part.get("macro_f1"))))
    return rows


def baseline_chart(run: Run, run_index: int) -> Chart | None:
    rows = baseline_rows(run)
    if not rows:
        return None
    names = [text(r[0]) for r in rows]
    fig = go.Figure(layout=base_layout("accuracy and macro-F1 against the baselines", "", ""))
    for j, (metric, column) in enumerate((("accuracy", 1), ("macro-F1", 2))):
        values = [r[column] for r in rows]
        fig.add_trace(go.Bar(x=names, y=array(values), name=metric, marker_color=colour(j),
                             text=["" if v is None else f"{v:.3f}" for v in values], textposition="outside"))
    fig.update_yaxes(range=[0, 1.1])
    fig.update_layout(barmode="group")
    return Chart(f"baselines-{run_index}", "baselines", fig)


def confusion_chart(run: Run, run_index: int) -> Chart | None:
    primary = primary_result(run)
    confusion = (primary or {}).get("confusion")
    if not isinstance(confusion, dict) or not confusion.get("matrix"):
        return None
    matrix = np.asarray(confusion["matrix"], dtype=np.float64)
    labels = [text(label) for label in confusion.get("labels", range(len(matrix)))]
    recall = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    n = len(labels)
    fig = go.Figure(layout=base_layout("confusion matrix (colour: share of the gold row)", "gold", "predicted"))
    fig.add_trace(go.Heatmap(
        z=recall, x=labels, y=labels, colorscale="Blues", zmin=0, zmax=1, colorbar=dict(title=dict(text="recall")),
        text=[[f"{int(v)}" for v in row] for row in matrix], texttemplate="%{text}",
        hovertemplate="gold %{y}<br>predicted %{x}<br>%{text} examples (%{z:.1%} of the row)<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="bottom")
    fig.update_layout(height=max(HEIGHT, 80 + 45 * n))
    return Chart(f"confusion-{run_index}", "confusion matrix", fig)


def generation_chart(run: Run, run_index: int) -> Chart | None:
    results = run.eval_results or {}
    keys = [k for k in results if k.startswith("predict_") and as_number(results[k]) is not None
            and not k.endswith(("_runtime", "_samples_per_second", "_steps_per_second"))]
    if not keys:
        return None
    names = [text(k.removeprefix("predict_")) for k in keys]
    values = [as_number(results[k]) for k in keys]
    fig = go.Figure(layout=base_layout("generation: BLEU and ROUGE (×100)", "score", ""))
    fig.add_trace(go.Bar(x=names, y=array(values), marker_color=colour(run_index),
                         text=[f"{v:.2f}" for v in values], textposition="outside"))
    return Chart(f"generation-{run_index}", "generation", fig)


def length_chart(run: Run, run_index: int) -> Chart | None:
    stats = run.data_stats or {}
    if not stats.get("train"):
        return None
    fig = go.Figure(layout=base_layout("example lengths (tokens, after truncation)", "examples", "tokens"))
    for j, split in enumerate(("train", "eval")):
        summary = stats.get(split)
        if not summary:
            continue
        edges = np.asarray(summary["histogram"]["edges"], dtype=np.float64)
        counts = np.asarray(summary["histogram"]["counts"], dtype=np.int32)
        fig.add_trace(go.Bar(x=(edges[:-1] + edges[1:]) / 2, y=counts, width=np.diff(edges), name=split,
                             marker_color=colour(j), opacity=0.75,
                             hovertext=[f"{edges[k]:.0f}–{edges[k + 1]:.0f} tokens: {int(c)}" for k, c in
                                        enumerate(counts)], hoverinfo="text"))
    cutoff = as_number(stats.get("cutoff_len"))
    longest = max(s["max"] for s in (stats.get("train"), stats.get("eval")) if s)
    if cutoff and cutoff <= 1.5 * longest:  # drawn where it is near the data; far above it, named in the title
        fig.add_vline(x=cutoff, line=dict(color="#d62728", dash="dash"), annotation_text=f"cutoff_len {cutoff:.0f}")
    elif cutoff:
        fig.update_layout(title_text=f"example lengths (tokens; cutoff_len {cutoff:.0f} is above the longest, {longest})")
    fig.update_layout(barmode="overlay")
    return Chart(f"lengths-{run_index}", "lengths", fig)


def expert_load_chart(run: Run, run_index: int) -> Chart | None:
    """A mixture of experts: each layer's per-expert load over the last logging window, as a multiple of the uniform
    share (expert_load.jsonl): an idle expert is a dark cell, an overloaded one a bright one."""
    record = run.expert_load
    if not record:
        return None
    load = np.asarray([[as_number(v) for v in row] for row in record["load"]], dtype=np.float64)
    fig = go.Figure(layout=base_layout(f"expert load at step {record.get('step')} (x the uniform share)", "layer",
                                       "expert"))
    fig.add_trace(go.Heatmap(z=load, colorscale="Viridis", zmin=0, colorbar=dict(title=dict(text="x uniform")),
                             hovertemplate="layer %{y}, expert %{x}: %{z:.2f} x the uniform share<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=max(HEIGHT, 80 + 12 * load.shape[0]))
    return Chart(f"experts-{run_index}", "expert load", fig)
