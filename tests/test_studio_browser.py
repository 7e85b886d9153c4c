"""`steadytune studio` driven in a real browser: headless Chromium (Debian's chromium, as tests/test_report.py starts
it) with Playwright, against real studio processes on a folder of runs, training the tiny model for real.

One flow, in the order a user goes: open the studio on an empty folder, make a run from the shipped recipe on the tiny
model, a bad key shown beside it and nothing launched, launch, watch the loss chart grow, stop (SIGTERM: checkpoint,
exit 143), see it interrupted, reload (the state stays), a second studio on the same folder sees the same run, resume,
stop the first studio (the run goes on), see it finish in the second, evaluate (confusion matrix), chat (label scores
beside the base model), export the adapter archive and download it, compare two runs, a run whose name and config hold
markup shown as text, the doctor page. No request leaves the studio, no console error, no dialog. The main pages are
saved as studio_*.png in a temporary folder, or into docs/ with STEADYTUNE_SCREENSHOTS=docs (how docs/studio_*.png
are made: `STEADYTUNE_SCREENSHOTS=docs python -m pytest tests/test_studio_browser.py`), so a test run leaves the
checkout as it found it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from steadytune.model.tiny import save_tiny_model
from steadytune.studio.jobs import JobStore, job_alive

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" if os.environ.get("STEADYTUNE_SCREENSHOTS") == "docs" else \
    Path(tempfile.mkdtemp(prefix="studio-screenshots-"))
HOSTILE = "<img src=x onerror=alert(1)><script>alert(2)</script>"
HOSTILE_NAME = "run <img src=x onerror=alert(3)><b>bold"
RUN = "tiny-sentiment"
RECIPE = "gemma3_270m_sentiment.yaml"


@pytest.fixture(scope="module")
def browser(browser):
    """conftest.py's Chromium, where the studio can run at all."""
    pytest.importorskip("fastapi", reason="the studio needs FastAPI (pip install '.[studio]')")
    return browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Each optimizer step of a training started under this takes at least STEP_DELAY_S more: on a fast idle machine the tiny
# run would otherwise end (hundreds of steps a second) before a page polling once a second could watch and stop it.
# Only this test's processes load it (PYTHONPATH); the training itself is untouched.
STEP_DELAY_S = 0.04
SLOW_STEPS = f"""
import importlib.abc, importlib.util, sys, time


class SlowSteps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "steadytune.train":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            step = module.forward_backward

            def slow(*args, **kwargs):
                time.sleep({STEP_DELAY_S})
                return step(*args, **kwargs)

            module.forward_backward = slow

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, SlowSteps())
"""


class Studio:
    """`steadytune studio RUNS_DIR --port P` as a user starts it, in a process of its own."""

    def __init__(self, runs: Path, cwd: Path, log: Path, slow_steps: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("ab")
        env = dict(os.environ)
        if slow_steps is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(slow_steps), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen([sys.executable, "-m", "steadytune", "studio", str(runs), "--port", str(self.port)],
                                     cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the studio exited with {self.proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise AssertionError("the studio did not answer within 60 s")

    def runs(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/runs", timeout=10) as r:
            return json.loads(r.read())["runs"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Tab:
    """A page in a fresh browser context, recording every request, console error and dialog."""

    def __init__(self, browser, studio: Studio):
        self.studio = studio
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.console: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.console.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        # Anything but the studio itself is refused (and still recorded above): a leak cannot reach a network.
        self.context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(studio.url)
                           else route.abort())

    def go(self, path: str):
        response = self.page.goto(self.studio.url + path)
        until(self.page, "() => document.body.dataset.ready === '1'")
        return response

    def check_clean(self) -> None:
        outside = [u for u in self.requests if not u.startswith(self.studio.url)]
        assert outside == [], f"requests left the studio: {outside}"
        assert self.console == [], self.console
        assert self.dialogs == [], self.dialogs

    def close(self):
        self.context.close()


def until(page, predicate: str, arg=None, timeout_s: float = 30):
    """Wait until the JavaScript function `predicate` (source text) returns something true, by asking the page
    every 100 ms (Playwright's wait_for_function evaluates its predicate with eval, which the studio's
    Content-Security-Policy forbids, as it should)."""
    deadline = time.time() + timeout_s
    while True:
        value = page.evaluate(predicate, arg)
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {predicate}")
        time.sleep(0.1)


def points(page, chart: str = "curve-loss") -> int:
    """Points drawn on a chart's first trace (plotly keeps the decoded arrays in _fullData)."""
    return page.evaluate("""(id) => { const d = document.getElementById(id);
        return d && d._fullData && d._fullData.length ? d._fullData[0].x.length : 0; }""", chart)


def wait_status(page, *statuses: str, timeout_s: float = 90) -> str:
    until(page, "(s) => s.includes(document.body.dataset.status)", list(statuses), timeout_s)
    return page.evaluate("document.body.dataset.status")


def below_header(page, selector: str) -> None:
    """Scroll `selector` to the top of the window, just below the studio's sticky header (for a screenshot)."""
    page.evaluate("(s) => { const el = document.querySelector(s);"
                  " window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 52); }", selector)


def write_reviews(path: Path) -> Path:
    rows = []
    for i in range(64):
        positive = i % 3 == 0
        rows.append({"text": ("这个商品很好，非常满意" if positive else "太差了，很失望") + f" #{i}",
                     "label": "积极" if positive else "消极"})
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return path


def test_the_whole_loop_in_the_browser(browser, tmp_path):
    started = time.perf_counter()
    marks: list[tuple[str, float]] = []

    def mark(what: str) -> None:
        marks.append((what, time.perf_counter() - started))

    work = tmp_path / "work"
    runs = work / "runs"
    runs.mkdir(parents=True)
    model = save_tiny_model(work / "model", "qwen2")
    reviews = write_reviews(work / "reviews.jsonl")
    slow = tmp_path / "slow_steps"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_STEPS, encoding="utf-8")
    first = Studio(runs, work, tmp_path / "studio-1.log", slow)
    second = None
    tab = Tab(browser, first)
    page = tab.page
    try:
        # --- an empty folder, then a run from the shipped recipe ---------------------------------------------------
        tab.go("/")
        assert "No runs here yet" in page.inner_text("#runs-rows")
        page.click("text=New run >> nth=0")
        page.wait_for_url("**/new")
        page.select_option("select[name=recipe]", RECIPE)
        page.click("#load-recipe")
        page.wait_for_selector("#run-form")
        until(page, "() => document.getElementById('run-form').dataset.checked")
        assert "steadytune train runs/" in page.inner_text("#command")
        page.fill("#name", RUN)
        for key, value in {"model_name_or_path": str(model), "dataset": str(reviews), "eval_dataset": "",
                           "max_samples": "", "max_eval_samples": "", "val_size": "0.25", "max_steps": "150",
                           "logging_steps": "1", "save_steps": "100", "per_device_train_batch_size": "4",
                           "cutoff_len": "128", "learning_rate": "fast please"}.items():
            page.fill(f"[data-key='{key}']", value)
        page.select_option("[data-key='plot_loss']", "false")
        # A bad key: its error beside it, before launch; Launch refuses and nothing starts.
        error = page.locator(".field-error[data-error-for='learning_rate']")
        error.wait_for(state="visible")
        assert "invalid value 'fast please'" in error.inner_text()
        page.locator("[data-field='learning_rate']").scroll_into_view_if_needed()
        page.screenshot(path=str(DOCS / "studio_new.png"))
        page.click("#launch")
        until(page, "() => document.body.dataset.launch === 'refused'")
        assert "fix what is marked" in page.inner_text("#launch-status")
        assert not (runs / RUN).exists() and first.runs() == []
        # The browser logs the refusal's 400 as a failed load: that one is expected.
        assert tab.console == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]
        tab.console.clear()
        mark("form: bad key refused")

        # --- launch, watch the loss chart grow --------------------------------------------------------------------
        page.fill("[data-key='learning_rate']", "5e-3")
        until(page, "() => document.getElementById('run-form').dataset.ok === '1'")
        page.click("#launch")
        page.wait_for_url(f"**/runs/{RUN}")
        until(page, "() => document.body.dataset.ready === '1'")
        assert wait_status(page, "starting", "running") in ("starting", "running")
        deadline = time.time() + 90
        while points(page) < 3:
            assert time.time() < deadline, "no loss curve of 3 points within 90 s"
            time.sleep(0.1)
        seen = points(page)
        while points(page) <= seen:
            assert time.time() < deadline + 30, "the loss curve did not grow"
            time.sleep(0.1)
        assert points(page) > seen
        mark(f"training: loss chart grew past {seen} points")
        page.screenshot(path=str(DOCS / "studio_run.png"))

        # --- stop: the checkpoint is saved, the run is interrupted -------------------------------------------------
        page.click("button[data-action=stop]")
        assert wait_status(page, "interrupted", "finished", timeout_s=60) == "interrupted", \
            "the run finished before it could be stopped: give it more steps"
        page.wait_for_selector("tr[data-kind=train][data-state=stopped]")
        assert "exit 143" in page.inner_text("tr[data-kind=train]")
        assert any(p.name.startswith("checkpoint-") for p in (runs / RUN).iterdir())
        stopped_at = points(page)
        mark("stopped: interrupted, exit 143")

        # A reload keeps everything: the state is the run folder's, not the page's.
        page.reload()
        until(page, "() => document.body.dataset.ready === '1'")
        assert wait_status(page, "interrupted") == "interrupted"
        assert points(page) == stopped_at
        assert "resume_from_checkpoint=true" in page.inner_text("[data-panel=header]")

        # A second studio on the same folder sees the same run.
        second = Studio(runs, work, tmp_path / "studio-2.log", slow)
        other = Tab(browser, second)
        other.go("/")
        other.page.wait_for_selector(f"tr[data-name='{RUN}']")
        assert "interrupted" in other.page.inner_text(f"tr[data-name='{RUN}']")
        assert [r["status"] for r in second.runs()] == ["interrupted"]

        # --- resume, then stop the first studio: the run goes on, and the second sees it finish ---------------------
        page.click("button[data-action=resume]")
        assert wait_status(page, "starting", "running") in ("starting", "running")
        tab.check_clean()   # before its studio goes away (the page's next polls then fail, as they should)
        first.stop()
        mark("resumed; first studio stopped")
        other.go(f"/runs/{RUN}")
        assert wait_status(other.page, "finished", timeout_s=120) == "finished"
        train_jobs = other.page.locator("tr[data-kind=train]")
        assert train_jobs.count() == 2
        log = "".join(p.read_text(encoding="utf-8") for p in (runs / RUN / "studio" / "jobs").glob("*.log"))
        assert "resuming from checkpoint-" in log
        mark("finished (watched from the second studio)")
        page = other.page
        tab.close()
        tab = other

        # --- evaluate: results with the confusion matrix and the errors to review ----------------------------------
        page.click("button[data-action=eval]")
        page.wait_for_selector("#confusion-0 .main-svg", timeout=90_000)
        results = page.inner_text("[data-panel=results]")
        assert "zero-shot" in results and "消极" in results
        mark("evaluated")

        # --- chat: label scores from the run and from the base model, side by side ---------------------------------
        page.click("#chat-link")
        page.wait_for_url(f"**/runs/{RUN}/chat")
        until(page, "() => document.body.dataset.ready === '1'")
        page.fill("#chat-text", "这个商品很好，非常满意")
        page.click("#chat-send")
        until(page, "() => document.body.dataset.chat === 'idle'", timeout_s=90)
        for side in ("run", "base"):
            answer = page.inner_text(f"#messages-{side} .message.assistant")
            assert "p=" in answer and "消极" in answer and "积极" in answer, (side, answer)
        assert page.inner_text("#chat-status") == ""
        page.screenshot(path=str(DOCS / "studio_chat.png"))
        mark("chat")

        # --- export the adapter archive and download it --------------------------------------------------------------
        page.goto(f"{second.url}/runs/{RUN}")
        until(page, "() => document.body.dataset.ready === '1'")
        page.check("input[name=export-kind][value=archive]")
        page.click("button[data-action=export]")
        link = page.locator("tr[data-kind=export] a.download")
        link.wait_for(timeout=90_000)
        with page.expect_download() as download:
            link.click()
        saved = tmp_path / "downloaded.tar.gz"
        download.value.save_as(saved)
        with tarfile.open(saved) as tar:
            names = set(tar.getnames())
        assert {"MANIFEST.sha256", "adapter_model.safetensors", "adapter_config.json"} <= names
        mark("exported and downloaded")
        below_header(page, "#actions")
        page.screenshot(path=str(DOCS / "studio_jobs.png"))
        below_header(page, "[data-panel=results]")
        page.screenshot(path=str(DOCS / "studio_results.png"))

        # --- the runs list; two runs compared ----------------------------------------------------------------------------
        # A copy of the run as a terminal leaves it (no studio/ folder), its name and one config value hostile.
        shutil.copytree(runs / RUN, runs / HOSTILE_NAME, ignore=shutil.ignore_patterns("studio"))
        config = runs / HOSTILE_NAME / "run_config.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace(f"dataset: {reviews}", f"dataset: '{HOSTILE}'"),
                          encoding="utf-8")
        tab.go("/")
        page.wait_for_selector(f"tr[data-name='{HOSTILE_NAME}']")
        page.screenshot(path=str(DOCS / "studio_runs.png"))
        page.check(f"input.pick[value='{RUN}']")
        page.check(f"input.pick[value='{HOSTILE_NAME}']")
        page.click("#compare")
        until(page, "() => window.steadytuneReport !== undefined", timeout_s=60)
        assert "2 runs" in page.inner_text("#compare")
        mark("compared")

        # --- markup in a run's name and config is text: escaped, and the policy would block it anyway ------------------
        response = tab.go("/")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert HOSTILE_NAME in page.inner_text("#runs-rows")
        assert page.evaluate("document.querySelectorAll('img, #runs-rows b').length") == 0
        tab.go("/runs/" + urllib.request.quote(HOSTILE_NAME, safe=""))
        assert HOSTILE_NAME in page.inner_text(".run-name")
        page.locator("[data-panel=config] details").last.evaluate("d => d.open = true")
        assert HOSTILE in page.inner_text("[data-panel=config]")
        tab.go("/new?run=" + urllib.request.quote(HOSTILE_NAME, safe=""))
        assert page.input_value("[data-key='dataset']") == HOSTILE
        assert page.evaluate("document.querySelectorAll('img, script:not([src])').length") == 0
        mark("hostile strings")

        # --- the doctor page: this machine's live findings --------------------------------------------------------------
        tab.go("/doctor")
        until(page, "() => document.body.dataset.doctor === 'done'", timeout_s=60)
        assert page.locator("#doctor-findings tr").count() > 2
        page.screenshot(path=str(DOCS / "studio_doctor.png"))
        mark("doctor")
        tab.check_clean()
    finally:
        tab.close()
        for studio in (first, second):
            if studio is not None:
                studio.stop()
        for job in JobStore(runs / RUN / "studio").all():   # after a failure midway: end what is still running
            if job_alive(job):
                os.kill(job.pid, signal.SIGKILL)
        print("\n" + "\n".join(f"  {t:6.1f} s  {what}" for what, t in marks))
