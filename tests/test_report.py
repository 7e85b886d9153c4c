"""`steadytune report` on real tiny runs: what the page holds, every status a run can be in, a torn
metrics.jsonl, hostile strings, several runs, and the report `train` writes at the end of a run.

The page itself is opened in headless Chromium by tests/test_report_browser.py.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from steadytune.cli import main as cli_main
from steadytune.errors import UserError
from steadytune.model.tiny import save_tiny_model
from steadytune.report.page import render, write_report
from steadytune.report.rundata import ABORTED, FINISHED, KILLED, RUNNING, load_run
from steadytune.training.run_folder import LOCK, MANIFEST, read_manifest

HOSTILE = "<script>alert('xss')</script><img src=x onerror=alert(2)>"
HOSTILE_NAME = "run <img src=x onerror=alert(3)><b>bold"  # a folder name: no "/"
PANELS = ("header", "curves", "results", "data", "config", "environment")


def write_classification_run_config(folder: Path, model: Path, out: Path, *extra: str) -> Path:
    """A tiny classification run: an imbalanced two-class set whose minority class holds a hostile review
    (the untrained model answers the majority class, so that review shows among the misclassified)."""
    rows = []
    for i in range(64):
        positive = i % 3 == 0
        text = ("这个商品很好，非常满意" if positive else "太差了，很失望") + f" #{i}"
        rows.append({"text": HOSTILE + text if i in (0, 3, 6, 9, 12, 15) else text,
                     "label": "积极" if positive else "消极"})
    data = folder / "reviews.jsonl"
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    path = folder / f"{out.name[:8]}.yaml"
    path.write_text("\n".join([
        f"model_name_or_path: {model}", f"dataset: {json.dumps(str(data))}", "label_names: [消极, 积极]",
        "prompt_template: \"评论：{text}\\n情感：\"", "template: empty", f"output_dir: {json.dumps(str(out))}",
        "per_device_train_batch_size: 4", "val_size: 0.25", "max_steps: 8", "logging_steps: 1",
        "eval_strategy: steps", "eval_steps: 4", "do_eval: true", "learning_rate: 5e-3", "save_steps: 4",
        *extra]), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """One finished tiny classification run with a guard event (an injected NaN loss), evaluated; its folder
    name is hostile too."""
    root = tmp_path_factory.mktemp("report")
    model = save_tiny_model(root / "model", "qwen2")
    out = root / HOSTILE_NAME
    config = write_classification_run_config(root, model, out, "fault_injection: {nan_loss_step: 3}")
    assert cli_main(["train", str(config)]) == 0
    return out


def panel_texts(page: str) -> dict[str, str]:
    """data-panel name -> its HTML (the first section of that name)."""
    out = {}
    for match in re.finditer(r'<section class="panel"[^>]*data-panel="(\w+)">(.*?)</section>', page, re.S):
        out.setdefault(match.group(1), match.group(2))
    return out


def test_train_writes_a_report_with_every_panel(tiny_run):
    for name in ("report.html", "data_stats.json", "predictions.jsonl", "eval_results.json"):
        assert (tiny_run / name).is_file(), name
    # Listed in the run folder's manifest, so a later run in this folder may replace them.
    assert {"report.html", "data_stats.json"} <= set(read_manifest(tiny_run)["files"])
    page = (tiny_run / "report.html").read_text(encoding="utf-8")
    panels = panel_texts(page)
    assert set(PANELS) <= set(panels)
    assert "finished" in panels["header"] and "<th>command</th>" in panels["header"]
    assert "&lt;img src=x onerror=alert(3)&gt;&lt;b&gt;bold" in panels["header"]
    # The curves, with the injected NaN's guard event as markers on them.
    for chart in ("curve-loss", "curve-eval", "curve-lr", "curve-grad-norm", "curve-tokens-per-s", "curve-memory"):
        assert f'id="fig-{chart}"' in page, chart
    loss_figure = json.loads(re.search(r'id="fig-curve-loss">(.*?)</script>', page, re.S).group(1))
    assert any(t["name"] == "guard events" for t in loss_figure["data"])
    # Classification: baselines, confusion matrix with the label words, per-class table, misclassified sample.
    assert 'id="fig-baselines-0"' in page and 'id="fig-confusion-0"' in page
    confusion = json.loads(re.search(r'id="fig-confusion-0">(.*?)</script>', page, re.S).group(1))
    assert confusion["data"][0]["x"] == ["消极", "积极"]
    assert "Per class" in panels["results"] and "Misclassified examples" in panels["results"]
    assert "batching efficiency" in panels["data"] and "truncated to cutoff_len" in panels["data"]
    assert "Decisions made for this run" in panels["config"] and "packing" in panels["config"]
    assert "torch" in panels["environment"]


def test_every_string_from_the_run_is_escaped(tiny_run):
    page = (tiny_run / "report.html").read_text(encoding="utf-8")
    # Neither the review nor the folder name appears as markup; the escaped text does.
    assert "<img src=x" not in page and "<script>alert" not in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    # The only scripts are the figure data, the tokens table, plotly.js and the renderer, all allowed by hash.
    scripts = re.findall(r"<script([^>]*)>", page)
    assert sum(1 for attrs in scripts if "application/json" not in attrs) == 2
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1))
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_a_running_run_with_a_torn_last_line(tiny_run, tmp_path):
    run = tmp_path / "live"
    shutil.copytree(tiny_run, run)
    (run / "train_results.json").unlink()
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"step": 9, "loss": 5.9, "grad_n')  # a kill mid-write
    # What run_folder.py leaves while a run trains: the manifest says running, the lock names the process (this
    # test's process stands in for it).
    manifest = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
    (run / MANIFEST).write_text(json.dumps(dict(manifest, status="running")), encoding="utf-8")
    lock = {"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-11-30T10:00:00+0000"}
    (run / LOCK).write_text(json.dumps(lock), encoding="utf-8")
    loaded = load_run(run)
    assert loaded.status == RUNNING
    assert any("1 line(s) could not be read" in note for note in loaded.notes)
    assert [r["step"] for r in loaded.steps][-1] == 8
    page = render([loaded])
    assert "running" in panel_texts(page)["header"] and "could not be read" in page

    # The same folder once its process is gone: killed.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run / LOCK).write_text(json.dumps(dict(lock, pid=int(dead.stdout))), encoding="utf-8")
    assert load_run(run).status == KILLED


def test_a_run_the_guard_stopped_and_a_json_cut_short(tiny_run, tmp_path):
    run = tmp_path / "aborted"
    shutil.copytree(tiny_run, run)
    (run / "train_results.json").unlink()
    (run / "eval_results.json").write_text('{"task": "classification", "score": {"accura', encoding="utf-8")
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"event": "guard", "step": 8, "kind": "nonfinite_loss", "action": "abort",
                            "reason": "loss is nan", "loss": "nan"}) + "\n")
    manifest = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
    (run / MANIFEST).write_text(json.dumps(dict(manifest, status="aborted")), encoding="utf-8")
    loaded = load_run(run)
    assert loaded.status == ABORTED and "nonfinite_loss" in loaded.status_detail
    assert loaded.eval_results is None and any(n.startswith("eval_results.json could not be read") for n in loaded.notes)
    page = render([loaded])
    assert "aborted by the guard" in page


def test_several_runs_are_overlaid_and_compared(tiny_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_run, other)
    config = (other / "run_config.yaml").read_text(encoding="utf-8")
    (other / "run_config.yaml").write_text(config.replace("learning_rate: 0.005", "learning_rate: 0.001"),
                                           encoding="utf-8")
    out = tmp_path / "both.html"
    assert cli_main(["report", str(tiny_run), str(other), "--output", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    compare = panel_texts(page)["compare"]
    assert "learning_rate" in compare and "0.001" in compare and "0.005" in compare
    loss = json.loads(re.search(r'id="fig-curve-loss">(.*?)</script>', page, re.S).group(1))
    assert {t["meta"][0] for t in loss["data"]} == {0, 1}
    assert any(t["name"].startswith("run &lt;img src=x") for t in loss["data"])  # escaped for plotly
    assert page.count('data-panel="results"') == 2


def test_report_command_refuses_what_it_should(tiny_run, tmp_path):
    with pytest.raises(UserError, match="no run here"):
        write_report([tmp_path], tmp_path / "r.html")
    mine = tmp_path / "notes.html"
    mine.write_text("<p>my notes</p>", encoding="utf-8")
    assert cli_main(["report", str(tiny_run), "--output", str(mine)]) == 1
    assert mine.read_text(encoding="utf-8") == "<p>my notes</p>"
    assert cli_main(["report", str(tiny_run), "--output", str(mine), "--force"]) == 0
    assert cli_main(["report", str(tiny_run), "--output", str(mine)]) == 0  # a report may be replaced


def test_a_run_with_only_metrics_still_reports(tmp_path):
    """A folder from an earlier build or another tool: metrics.jsonl alone."""
    lines = [{"step": s, "loss": 2.0 / s, "grad_norm": 1.0, "lr": 1e-4, "tokens": 100 * s, "tokens_per_s": 50.0}
             for s in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in lines), encoding="utf-8")
    run = load_run(tmp_path)
    assert run.status in (RUNNING, KILLED)  # no process record: judged by the last write
    page = render([run])
    assert set(PANELS) <= set(panel_texts(page)) and "No evaluation results" in page


def test_finished_status_comes_from_train_results(tiny_run):
    assert load_run(tiny_run).status == FINISHED


# ------------------------------------------------------------------------------------------------------
# A long run: 10,000 logged steps
# ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def long_run(tiny_run, tmp_path_factory) -> Path:
    """The tiny run's folder with a metrics.jsonl of 10,000 logged steps as a GPU run writes them (memory
    included), an evaluation every 250 steps and 20 guard events."""
    import random

    run = tmp_path_factory.mktemp("long") / "long-run"
    shutil.copytree(tiny_run, run)
    rng = random.Random(0)
    lines, loss, tokens = [], 3.0, 0
    for step in range(1, 10_001):
        loss = max(0.05, loss * 0.9997 + rng.gauss(0, 0.02))
        tokens += rng.randint(3000, 5000)
        lines.append({"step": step, "epoch": round(step / 2500, 4), "loss": loss, "grad_norm": abs(rng.gauss(1, 0.3)),
                      "lr": 1e-4 * min(1.0, step / 300), "tokens": tokens, "tokens_per_s": rng.uniform(9e3, 1.1e4),
                      "mem_allocated_gib": 6.2 + rng.random(), "mem_reserved_gib": 8.0, "mem_peak_gib": 7.5})
        if step % 250 == 0:
            lines.append({"step": step, "eval_loss": loss * 1.1, "eval_accuracy": min(0.95, 0.5 + step / 25000),
                          "eval_macro_f1": min(0.94, 0.45 + step / 25000)})
        if step % 500 == 17:
            lines.append({"event": "guard", "step": step, "kind": "loss_spike", "action": "skip",
                          "reason": "loss 9.1 > mean + 6 sigma", "loss": 9.1, "batch_ids": list(range(16))})
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
    write_report([run], run / "report.html")
    return run


def test_a_report_of_10000_steps_stays_under_8_mb(long_run):
    size = (long_run / "report.html").stat().st_size
    assert size < 8 * 2**20, f"{size / 2**20:.2f} MiB"
    page = (long_run / "report.html").read_text(encoding="utf-8")
    loss = json.loads(re.search(r'id="fig-curve-loss">(.*?)</script>', page, re.S).group(1))
    raw = next(t for t in loss["data"] if t["name"] == "loss")
    assert raw["y"]["dtype"] == "f4"  # typed arrays: 10,000 floats in ~53 kB
    markers = next(t for t in loss["data"] if t["name"] == "guard events")
    assert len(markers["hovertext"]) == 20


# ------------------------------------------------------------------------------------------------------
# In a real browser: headless Chromium (Debian's chromium package) driven by Playwright
# ------------------------------------------------------------------------------------------------------

LOAD_LIMIT_S = 5.0   # `browser` (conftest.py): headless Chromium through Playwright


class Visit:
    """One page opened in a fresh browser context (a fresh profile), with everything it asked for."""

    def __init__(self, browser, path: Path):
        self.context = browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.url = path.resolve().as_uri()
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.console_errors.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.console_errors.append(f"page error: {e}"))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        # Anything but the page itself is refused (and still recorded above), so a leak cannot reach a network.
        self.context.route("**/*", lambda route: route.continue_() if route.request.url == self.url else route.abort())
        self.page.goto(self.url)
        self.page.wait_for_function("window.steadytuneReport !== undefined", timeout=30_000)
        self.ready_s = self.page.evaluate("window.steadytuneReport.readyAt") / 1000

    def close(self):
        self.context.close()


def check_page(visit: Visit) -> None:
    assert visit.requests == [visit.url], f"requests left the page: {visit.requests}"
    assert visit.console_errors == [] and visit.dialogs == []
    panels = visit.page.evaluate("""() => [...document.querySelectorAll('section[data-panel]')]
        .map(s => [s.dataset.panel, s.innerText.trim().length])""")
    for name, length in panels:
        assert length > 40, f"panel {name} is empty"
    charts = visit.page.evaluate("""() => [...document.querySelectorAll('div.chart')].map(d =>
        [d.id, d.querySelectorAll('.main-svg').length, d.data ? d.data.length : 0,
         (d.layout && d.layout.annotations || []).length])""")
    assert charts and all(svg > 0 and (traces > 0 or notes > 0) for _, svg, traces, notes in charts), charts


def test_browser_renders_every_panel_and_requests_nothing(browser, tiny_run, tmp_path):
    visit = Visit(browser, tiny_run / "report.html")
    try:
        check_page(visit)
        names = {p for p, in visit.page.evaluate("() => [...document.querySelectorAll('section[data-panel]')]"
                                                   ".map(s => [s.dataset.panel])")}
        assert set(PANELS) <= names
        # Hostile strings are text: no element was made from them, no script ran, and they read as written.
        assert visit.page.evaluate("document.querySelectorAll('img').length") == 0
        assert visit.page.evaluate("document.querySelector('#header h2 b')") is None
        assert "<img src=x onerror=alert(3)><b>bold" in visit.page.inner_text("#header h2")
        results = visit.page.inner_text("section[data-panel=results]")
        assert HOSTILE in results and "消极" in results
        # The confusion matrix's label words are drawn as text by the browser (CJK through the system's fonts).
        ticks = visit.page.evaluate("[...document.querySelectorAll('#confusion-0 .xtick text')].map(t => t.textContent)")
        assert ticks == ["消极", "积极"]
        # The steps/tokens switch redraws the curves over tokens without an error.
        visit.page.check("input[value=tokens]")
        title = visit.page.evaluate("document.getElementById('curve-loss').layout.xaxis.title.text")
        assert title == "target tokens trained" and visit.console_errors == []
        shot = tmp_path / "report.png"
        visit.page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 50_000
    finally:
        visit.close()


def test_browser_escapes_run_names_inside_charts(browser, tiny_run, tmp_path):
    other = tmp_path / "second"
    shutil.copytree(tiny_run, other)
    write_report([tiny_run, other], tmp_path / "both.html")
    visit = Visit(browser, tmp_path / "both.html")
    try:
        check_page(visit)
        legend = visit.page.evaluate("[...document.querySelectorAll('#curve-loss .legendtext')].map(t => t.textContent)")
        assert any(text.startswith("run <img src=x onerror=alert(3)><b>bold") for text in legend), legend
        assert visit.page.evaluate("document.querySelectorAll('img').length") == 0
    finally:
        visit.close()


def test_browser_opens_10000_steps_in_under_5_s(browser, long_run):
    """Time from navigation to the last figure drawn, in a fresh context each time. The best of up to three
    tries counts: the machines this runs on are shared, and a busy neighbour only ever adds time."""
    times = []
    for _ in range(3):
        visit = Visit(browser, long_run / "report.html")
        try:
            check_page(visit)
            times.append(visit.ready_s)
        finally:
            visit.close()
        if times[-1] < LOAD_LIMIT_S:
            break
    print(f"10,000 steps: rendered {', '.join(f'{t:.2f}' for t in times)} s after navigation")
    assert min(times) < LOAD_LIMIT_S


def test_a_generation_run_shows_bleu_rouge_and_its_answers(tiny_run, tmp_path):
    run = tmp_path / "sft"
    shutil.copytree(tiny_run, run)
    for name in ("predictions.jsonl", "confusion_matrix.json"):
        (run / name).unlink()
    (run / "eval_results.json").write_text(json.dumps({
        "task": "generation", "n": 2, "predict_bleu-4": 12.5, "predict_rouge-1": 30.1, "predict_rouge-2": 11.0,
        "predict_rouge-l": 25.4}), encoding="utf-8")
    rows = [{"prompt": "Say hi", "predict": HOSTILE, "label": "hi"}, {"prompt": "数一二三", "predict": "一二三", "label": "一二三"}]
    (run / "generated_predictions.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows),
                                                     encoding="utf-8")
    page = render([load_run(run)])
    results = panel_texts(page)["results"]
    assert 'id="generation-0"' in results and "rouge-l" in results and "25.40" in results
    assert "一二三" in results and "&lt;script&gt;alert(&#39;xss&#39;)&lt;/script&gt;" in results
    assert "<script>alert" not in page


# ------------------------------------------------------------------------------------------------------
# Issue 25, case 15: results the page does not know, and bidi controls in run strings
# ------------------------------------------------------------------------------------------------------

def minimal_run(folder: Path, config: str = "learning_rate: 0.0001\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"step": s, "loss": 2.0 / s, "grad_norm": 1.0, "lr": 1e-4, "tokens": 100 * s} for s in range(1, 4)]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in lines), encoding="utf-8")
    (folder / "run_config.yaml").write_text(config, encoding="utf-8")
    return folder


@pytest.mark.parametrize("results", [
    {"eval_loss": 0.4321, "eval_rewards/accuracies": 0.75, "eval_examples": 12},      # a dpo run's own results
    {"task": "classification", "accuracy": 0.8765, "note": "written by another tool"},  # a task without its modes
    {"task": "ranking", "ndcg": 0.5432},                                                # a task the page does not know
])
def test_eval_results_the_page_does_not_know_are_shown_not_hidden(tmp_path, results):
    run = minimal_run(tmp_path / "run")
    (run / "eval_results.json").write_text(json.dumps(results), encoding="utf-8")
    page = render([load_run(run)])
    panel = panel_texts(page)["results"]
    assert "No evaluation results" not in panel and "not recognised" in panel
    for key, value in results.items():
        assert html.escape(key) in panel and html.escape(str(value)) in panel


BIDI = "\u202e\u2066\u2067\u2068\u2069\u202a\u202b\u202c\u202d\u200e\u200f\u061c"


def test_bidi_controls_in_run_strings_are_shown_as_codes(tmp_path):
    """U+202E in a config value would show `evil\u202egpj.exe` as `evilexe.jpg`: the page writes each control as
    its code point instead."""
    config = "dataset: \"evil\\u202egpj.exe\"\nlabel_names: [\"a\\u2067b\", \"c\"]\nrun_name: \"x\\u200fy\"\n"
    run = minimal_run(tmp_path / "run\u202eweiver", config)
    (run / "eval_results.json").write_text(json.dumps({"task": "generation", "predict_bleu-4": 1.0}), encoding="utf-8")
    page = render([load_run(run)])
    assert not any(ch in page for ch in BIDI)
    assert "evil[U+202E]gpj.exe" in page and "x[U+200F]y" in page
    assert "a\\u2067b" in page  # inside a list, Python's repr already writes it as an escape
    assert "run[U+202E]weiver" in page


def test_a_report_into_a_running_runs_folder_leaves_its_manifest_alone(tmp_path):
    """Issue 25, case 10: writers of a run folder honour its lock. The page may be written (a view of a run still
    going, as docs/report.md says), but the manifest is the running training's to write."""
    run = minimal_run(tmp_path / "run")
    manifest = {"files": ["metrics.jsonl", "run_config.yaml"], "status": "running"}
    (run / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (run / LOCK).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}), encoding="utf-8")
        assert cli_main(["report", str(run)]) == 0
        assert (run / "report.html").is_file() and read_manifest(run) == manifest
    finally:
        holder.kill()
        holder.wait()
    (run / LOCK).unlink()
    assert cli_main(["report", str(run)]) == 0
    assert "report.html" in read_manifest(run)["files"]
