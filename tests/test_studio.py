"""`steadytune studio` without a browser: the form generated from the config (every key, errors beside each key, what
is written), run statuses from the run folder and the studio's jobs, the jobs' processes, the key and the other gates,
escaping, uploads and downloads, and the run folder's studio/ folder that a run leaves alone.

The browser flow (launch, watch, stop, resume, chat, export) is tests/test_studio_browser.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from steadytune.cli import main as cli_main
from steadytune.config import SECTION_TYPES, load_config
from steadytune.errors import UserError
from steadytune.model.tiny import save_tiny_model
from steadytune.studio import form as forms
from steadytune.studio.command import check_args
from steadytune.studio.jobs import ENDED, RUNNING, Job, JobStore, Launcher, finished_state, job_alive, progress_of
from steadytune.studio.runs import FAILED_TO_START, NEW, NeedsConfirmation, Runs, check_new_name
from steadytune.studio.stopping import stop_confirmed, verified_target
from steadytune.training.run_folder import LOCK, MANIFEST, STUDIO_FOLDER, process_start_ticks, read_manifest

fastapi = pytest.importorskip("fastapi", reason="the studio needs FastAPI (pip install '.[studio]')")
from fastapi.testclient import TestClient  # noqa: E402

from steadytune.studio.app import StudioSettings, build_app  # noqa: E402

HOSTILE = "<img src=x onerror=alert(1)><script>alert(2)</script>"
HOSTILE_NAME = "run <img src=x onerror=alert(3)><b>bold"
MUTATE = {"X-Studio": "1"}
BASE = "http://127.0.0.1:7860"


def tiny_config(folder: Path, out: Path, dataset: str | None = None, **extra) -> Path:
    model = folder / "model"
    if not model.exists():
        save_tiny_model(model, "qwen2")
    data = folder / "reviews.jsonl"
    if not data.exists():
        data.write_text("\n".join(json.dumps({"text": f"好评 很好 #{i}" if i % 3 == 0 else f"差评 太差 #{i}",
                                              "label": "积极" if i % 3 == 0 else "消极"}, ensure_ascii=False)
                                  for i in range(32)), encoding="utf-8")
    config = {"model_name_or_path": str(model), "dataset": dataset or str(data), "label_names": ["消极", "积极"],
              "prompt_template": "评论：{text}\n情感：", "template": "empty", "output_dir": str(out),
              "per_device_train_batch_size": 4, "max_steps": 3, "logging_steps": 1, "save_steps": 2, **extra}
    config = {k: v for k, v in config.items() if v is not None}
    path = folder / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def client(runs: Path, **settings) -> TestClient:
    return TestClient(build_app(StudioSettings(runs_dir=runs, cwd=runs.parent, **settings)), base_url=BASE)


def minimal_run(folder: Path, config: dict | None = None) -> Path:
    """A run folder as a finished terminal run leaves it (what the report reads), without training."""
    folder.mkdir(parents=True)
    lines = [{"step": s, "loss": 2.0 / s, "grad_norm": 1.0, "lr": 1e-4, "tokens": 100 * s} for s in range(1, 4)]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in lines), encoding="utf-8")
    (folder / "run_config.yaml").write_text(yaml.safe_dump(config or {"learning_rate": 1e-4}, allow_unicode=True),
                                            encoding="utf-8")
    (folder / "train_results.json").write_text(json.dumps({"global_step": 3, "final_loss": 0.67}), encoding="utf-8")
    (folder / MANIFEST).write_text(json.dumps({"status": "finished", "files": ["metrics.jsonl"]}), encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------------------
# The run folder's studio/ folder: made before the run claims the folder, left alone by it
# ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory, sample_data_dir) -> Path:
    """RUNS_DIR with two finished tiny runs: `cls` (classification, its folder holding a studio/ folder before the
    run claimed it, as a launch from the studio leaves it) and `gen` (generation, alpaca rows, qwen's template)."""
    root = tmp_path_factory.mktemp("studio")
    runs_dir = root / "runs"
    cls = runs_dir / "cls"
    (cls / STUDIO_FOLDER / "jobs").mkdir(parents=True)
    (cls / STUDIO_FOLDER / "jobs" / "1.log").write_text("[studio] $ steadytune train ...\n", encoding="utf-8")
    assert cli_main(["train", str(tiny_config(root, cls))]) == 0
    gen = tiny_config(root, runs_dir / "gen", dataset="alpaca_sample", dataset_dir=str(sample_data_dir),
                      template="qwen", label_names=None, prompt_template=None, max_samples=16)
    assert cli_main(["train", str(gen)]) == 0
    return runs_dir


def test_a_run_folder_holding_only_studio_starts_fresh_and_a_failed_start_leaves_studio_in_place(trained, tmp_path):
    out = trained / "cls"
    assert (out / "adapter_model.safetensors").is_file() and (out / STUDIO_FOLDER / "jobs" / "1.log").is_file()
    assert read_manifest(out)["status"] == "finished"

    failed = tmp_path / "failed"
    (failed / STUDIO_FOLDER).mkdir(parents=True)
    (failed / STUDIO_FOLDER / "config.yaml").write_text("x: 1\n", encoding="utf-8")
    assert cli_main(["train", str(tiny_config(tmp_path, failed, dataset=str(tmp_path / "missing.jsonl")))]) == 1
    assert sorted(p.name for p in failed.iterdir()) == [STUDIO_FOLDER]   # the run's own entries removed, not this
    assert (failed / STUDIO_FOLDER / "config.yaml").is_file()


# ------------------------------------------------------------------------------------------------------
# The form
# ------------------------------------------------------------------------------------------------------

def test_every_config_key_has_a_field_with_its_default_help_and_choices():
    keys = {(f"{name}.{f}" if name in ("guard", "fault_injection") else f)
            for name, cls in SECTION_TYPES.items() for f in cls.__dataclass_fields__}
    fields = forms.all_fields()
    assert {f.key for f in fields} == keys and len(fields) == len(keys)
    by_key = {f.key: f for f in fields}
    assert all(f.help for f in fields)
    assert by_key["learning_rate"].default == "5e-05" and by_key["learning_rate"].widget == "text"
    assert by_key["eval_strategy"].widget == "select" and by_key["eval_strategy"].options == ["no", "steps", "epoch"]
    assert by_key["packing"].options == ["", "true", "false"]              # Optional[bool]: unset is a choice
    assert by_key["bf16"].options == ["auto", "true", "false"]
    assert by_key["guard.window"].default == "50" and by_key["output_dir"].readonly
    assert by_key["prompt_template"].widget == "textarea"


def recipe_source() -> forms.Source:
    return forms.from_file("recipe", "gemma3_270m_sentiment.yaml", forms.recipe_file("gemma3_270m_sentiment.yaml"),
                           "gemma3_270m_sentiment", "the shipped recipe")


def shown_values(raw: dict) -> dict[str, str]:
    sections, _ = forms.form_sections(raw)
    return {f.key: f.value for _, _, _, fields in sections for f in fields if not f.readonly}


def test_the_shipped_recipe_passes_through_the_form_unchanged_and_valid():
    source = recipe_source()
    raw, errors = forms.assemble(source.raw, shown_values(source.raw), "")
    assert errors == {} and raw == source.raw
    cfg, errors, general = forms.validate(raw)
    assert cfg is not None and errors == {} and general == []
    # What the form writes is what train reads.
    path_cfg = load_config(None, raw)
    assert path_cfg.data.label_names == ["消极", "积极"] and path_cfg.train.learning_rate == 3e-4


def test_each_bad_key_is_named_beside_it_before_launch():
    source = recipe_source()
    values = dict(shown_values(source.raw), learning_rate="fast", lora_rank="0", eval_strategy="sometimes",
                  prompt_template="no placeholder here", **{"guard.window": "[1, 2]"})
    raw, errors = forms.assemble(source.raw, values, "")
    _, more, general = forms.validate(raw)
    errors.update(more)
    assert set(errors) == {"learning_rate", "lora_rank", "eval_strategy", "prompt_template", "guard.window"}
    assert errors["learning_rate"] == "invalid value 'fast' (expected a number)"
    assert "out of range" in errors["lora_rank"] and "choose one of no, steps, epoch" in errors["eval_strategy"]
    assert "{text}" in errors["prompt_template"] and general == []
    # Keys that disagree with each other: the error goes beside the first key it names.
    _, errors, _ = forms.validate(dict(source.raw, bf16=True, fp16=True))
    assert "bf16 and fp16 are both true" in errors["bf16"]
    _, errors, _ = forms.validate({k: v for k, v in source.raw.items() if k != "dataset"} | {"do_train": True})
    assert "needs dataset" in errors["do_train"]


def test_an_emptied_field_is_unset_numbers_are_numbers_and_other_keys_are_checked_too():
    source = recipe_source()
    values = dict(shown_values(source.raw), max_samples="", learning_rate="5e-3", plot_loss="false",
                  label_names="[差, 好]", **{"guard.guard_policy": "skip"})
    raw, errors = forms.assemble(source.raw, values, "")
    assert errors == {} and "max_samples" not in raw
    assert raw["learning_rate"] == 0.005 and isinstance(raw["learning_rate"], float)
    assert raw["plot_loss"] is False and raw["label_names"] == ["差", "好"] and raw["guard"] == {"guard_policy": "skip"}
    text = forms.config_text(raw, "the shipped recipe")
    assert yaml.safe_load(text)["learning_rate"] == 0.005   # written as a number, not as the text 5e-3
    raw, errors = forms.assemble(source.raw, {}, "cutof_len: 64\n")
    assert errors == {}
    _, errors, _ = forms.validate(raw)
    assert "unknown key 'cutof_len'" in errors[forms.EXTRA] and "did you mean 'cutoff_len'" in errors[forms.EXTRA]
    _, errors = forms.assemble(source.raw, {}, "learning_rate: 1\n")
    assert "field of its own" in errors[forms.EXTRA]


def test_sources_an_lf_v1_file_and_another_runs_config(tmp_path):
    v1 = tmp_path / "examples" / "v1.yaml"
    v1.parent.mkdir()
    v1.write_text("model: Qwen/Qwen3-0.6B\ntrain_dataset: data/v1_sft_demo.yaml\nmicro_batch_size: 2\n",
                  encoding="utf-8")
    source = forms.from_path(str(v1))
    assert source.raw["model_name_or_path"] == "Qwen/Qwen3-0.6B" and source.raw["per_device_train_batch_size"] == 2
    assert source.name == "v1" and any("v1" in note for note in source.notes)
    with pytest.raises(UserError, match="give a .yaml file"):
        forms.from_path(str(tmp_path / "notes.txt"))
    # A LLaMA-Factory example, run from its checkout's root there: its dataset_dir (data) is that checkout's data/.
    lf = tmp_path / "LLaMA-Factory"
    (lf / "examples" / "train_lora").mkdir(parents=True)
    (lf / "data").mkdir()
    (lf / "data" / "dataset_info.json").write_text("{}", encoding="utf-8")
    example = lf / "examples" / "train_lora" / "qwen3_lora_sft.yaml"
    example.write_text("model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\nstage: sft\ndataset: identity,alpaca_en_demo\n"
                       "template: qwen3_nothink\noutput_dir: saves/qwen3-4b/lora/sft\n", encoding="utf-8")
    source = forms.from_path(str(example))
    assert source.raw["dataset_dir"] == str(lf / "data") and source.name == "qwen3_lora_sft"
    assert forms.validate(dict(source.raw, output_dir="runs/x"))[1:] == ({}, [])
    # Another run's config (a terminal run: its run_config.yaml): no folder, resume point, decisions, and none of the
    # keys that let a file run code here.
    run = minimal_run(tmp_path / "runs" / "lr-1e-4", {"learning_rate": 1e-4, "trust_remote_code": True,
                                                       "output_dir": "saves/x", "resume_from_checkpoint": True,
                                                       "decisions": {"precision": {"value": "fp32"}}})
    source = forms.from_run("lr-1e-4", run, {"lr-1e-4", "lr-1e-4-2"})
    assert source.raw == {"learning_rate": 1e-4} and source.name == "lr-1e-4-3"
    assert any("trust_remote_code" in note for note in source.notes)


@pytest.mark.parametrize("name", ["", "   ", ".hidden", "..", "a/b", "a\\b", "two\nlines", "evil\u202egpj", "x" * 101])
def test_a_new_run_name_must_be_one_plain_folder_name(name):
    with pytest.raises(UserError, match="name:"):
        check_new_name(name)


def test_markup_in_a_name_is_a_name():
    assert check_new_name(f" {HOSTILE_NAME} ") == HOSTILE_NAME   # the pages escape it, as every other string


# ------------------------------------------------------------------------------------------------------
# Jobs
# ------------------------------------------------------------------------------------------------------

def test_progress_is_read_from_the_newest_bar_in_the_log():
    text = ("loading\rtrain:  10%|█         | 4/40 [00:01<00:09, 3.9it/s, loss=6.2]"
            "\rtrain:  45%|████▌     | 18/40 [00:03<00:04, 5.3it/s, loss=5.9]")
    assert progress_of(text) == {"percent": 45, "done": 18, "total": 40, "line": text.rsplit("\r", 1)[-1]}
    assert progress_of("scoring 3/12 [00:02<00:06]")["percent"] == 25
    assert progress_of("no bar here") is None


def test_exit_codes():
    assert finished_state(0, False) == "done" and finished_state(143, True) == "stopped"
    assert finished_state(130, False) == "stopped" and finished_state(1, False) == "failed"
    assert finished_state(-9, True) == "stopped" and finished_state(-9, False) == "failed"


def test_a_job_started_by_another_studio_is_running_while_its_process_lives(tmp_path, training_lookalike):
    store = JobStore(tmp_path / STUDIO_FOLDER)
    from steadytune.studio.jobs import process_start_time
    job = Job(id="20260101-000000-abcdef", kind="train", argv=["train", "x.yaml"], command="steadytune train x.yaml",
              pid=training_lookalike.pid, process_start=process_start_time(training_lookalike.pid),
              host=socket.gethostname(), started=time.time())
    store.save(job)
    later = Launcher(tmp_path)   # a studio started later: it did not start the job, it finds it
    assert later.jobs(store)[0].state == RUNNING and job_alive(job)
    # A later process with the same pid is not the job (its start time differs).
    assert not job_alive(Job(**{**job.__dict__, "process_start": (job.process_start or 0) + 1}))
    # Not this studio's own child: its launcher does not signal it; studio/stopping.py judges the record's pid.
    assert not later.stop(job.id)
    target = verified_target(job.pid, job.host, job.process_start, None, "its record")
    with pytest.raises(NeedsConfirmation):
        stop_confirmed(target, None)
    stop_confirmed(target, job.pid)
    assert training_lookalike.wait(timeout=10) == -signal.SIGTERM
    assert later.jobs(store)[0].state == ENDED


def test_a_launched_job_writes_to_its_log_and_is_reaped_with_its_exit_code(tmp_path):
    launcher = Launcher(tmp_path)
    store = JobStore(tmp_path / STUDIO_FOLDER)
    job = launcher.start(store, "doctor", ["--version"], "steadytune --version")
    deadline = time.time() + 60
    while launcher.jobs(store)[0].state == RUNNING:
        assert time.time() < deadline
        time.sleep(0.1)
    done = launcher.jobs(store)[0]
    assert (done.state, done.returncode) == ("done", 0)
    log = store.log_path(job.id).read_text(encoding="utf-8")
    assert log.startswith("[studio] $ steadytune --version") and "steadytune 0." in log and "exited with code 0" in log
    # Its own session: a signal to the studio's process group does not reach it.
    assert os.getsid(os.getpid()) != job.pid


# ------------------------------------------------------------------------------------------------------
# Statuses
# ------------------------------------------------------------------------------------------------------

def test_statuses_from_the_manifest_the_lock_and_the_studios_jobs(tmp_path, live_process):
    runs_dir = tmp_path / "runs"
    minimal_run(runs_dir / "done")
    live = minimal_run(runs_dir / "live")
    (live / "train_results.json").unlink()
    (live / MANIFEST).write_text(json.dumps({"status": "running", "files": []}), encoding="utf-8")
    (live / LOCK).write_text(json.dumps({"pid": live_process.pid, "host": socket.gethostname()}), encoding="utf-8")
    stopped = minimal_run(runs_dir / "stopped")
    (stopped / MANIFEST).write_text(json.dumps({"status": "interrupted", "files": []}), encoding="utf-8")
    (stopped / "train_results.json").unlink()
    (runs_dir / "new" / STUDIO_FOLDER).mkdir(parents=True)
    (runs_dir / "notes").mkdir()   # not a run
    (runs_dir / ".studio").mkdir()
    runs = Runs(runs_dir, Launcher(tmp_path))
    statuses = {v.name: v.status for v in runs.views()}
    assert statuses == {"done": "finished", "live": "running", "stopped": "interrupted", "new": NEW}
    assert runs.view("stopped").can()["resume"] and not runs.view("done").can()["resume"]
    with pytest.raises(UserError, match="no run named"):
        runs.view("notes")
    with pytest.raises(UserError, match="no run named"):
        runs.view("../runs/done")


def test_a_start_that_fails_shows_why(tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    with client(runs_dir) as studio:
        source = {"kind": "upload", "ref": upload(studio, tiny_config(tmp_path, tmp_path / "x",
                                                                      dataset=str(tmp_path / "missing.jsonl")))}
        body = {"source": source, "name": "broken", "values": {}, "extra": ""}
        launched = studio.post("/api/launch", json=body, headers=MUTATE)
        assert launched.status_code == 200, launched.text
        deadline = time.time() + 120
        while (state := studio.get("/api/runs/broken/state").json())["status"] in ("starting", "running"):
            assert time.time() < deadline
            time.sleep(0.3)
        assert state["status"] == FAILED_TO_START and "missing.jsonl" in state["detail"]
        assert sorted(p.name for p in (runs_dir / "broken").iterdir()) == [STUDIO_FOLDER]
        config = yaml.safe_load((runs_dir / "broken" / STUDIO_FOLDER / "config.yaml").read_text(encoding="utf-8"))
        assert config["output_dir"] == str((runs_dir / "broken").resolve())


def upload(studio: TestClient, path: Path) -> str:
    response = studio.post(f"/api/uploads?filename={path.name}", content=path.read_bytes(), headers=MUTATE)
    assert response.status_code == 200, response.text
    return response.json()["id"]


# ------------------------------------------------------------------------------------------------------
# The app's gates and pages
# ------------------------------------------------------------------------------------------------------

def test_any_other_address_than_this_machines_needs_the_key(tmp_path):
    args = SimpleNamespace(port=7860, host="0.0.0.0", api_key=None, runs_dir=str(tmp_path / "runs"))
    with pytest.raises(UserError, match="set an API key"):
        check_args(args)
    with pytest.raises(UserError, match="at least 8"):
        check_args(SimpleNamespace(**{**args.__dict__, "api_key": "short"}))
    assert check_args(SimpleNamespace(**{**args.__dict__, "api_key": "0123456789abcdef"})).is_dir()
    assert check_args(SimpleNamespace(**{**args.__dict__, "host": "127.0.0.1"})).is_dir()
    # The command says so too, before anything starts.
    result = subprocess.run([sys.executable, "-m", "steadytune", "studio", str(tmp_path), "--host", "0.0.0.0"],
                            capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "API_KEY"})
    assert result.returncode == 1 and "set an API key" in result.stderr


def test_the_key_the_studios_header_and_the_host(tmp_path):
    runs_dir = tmp_path / "runs"
    minimal_run(runs_dir / "done")
    key = "0123456789abcdef"
    with client(runs_dir, api_key=key) as studio:
        page = studio.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/"
        assert studio.get("/api/runs").status_code == 401
        assert studio.get("/health").status_code == 200 and studio.get("/static/studio.js").status_code == 200
        wrong = studio.post("/login", content="key=nope&next=/", follow_redirects=False,
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert wrong.status_code == 401 and "not the studio" in wrong.text and "steadytune_studio" not in wrong.headers.get(
            "set-cookie", "")
        assert studio.get("/api/runs", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        signed = studio.post("/login", content=f"key={key}&next=//evil.example/", follow_redirects=False,
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert signed.status_code == 303 and signed.headers["location"] == "/"   # no way out of the studio
        assert "HttpOnly" in signed.headers["set-cookie"] and "SameSite=strict" in signed.headers["set-cookie"]
        assert key not in signed.headers["set-cookie"]
        assert [r["name"] for r in studio.get("/api/runs").json()["runs"]] == ["done"]   # the cookie is kept
        # Changing something needs the studio's header (a form of another site cannot send it).
        assert studio.post("/api/doctor").status_code == 403
        assert studio.post("/api/check", json={}).status_code == 403
        # A page of another site whose name resolves to 127.0.0.1 is not this studio's page.
        assert studio.get("/api/runs", headers={"Host": "evil.example:7860"}).status_code == 400
        page = studio.get("/")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"


def test_markup_from_run_folders_is_text_on_every_page(tmp_path):
    runs_dir = tmp_path / "runs"
    minimal_run(runs_dir / HOSTILE_NAME, {"learning_rate": 1e-4, "dataset": HOSTILE, "label_names": [HOSTILE, "b"]})
    quoted = "/runs/" + __import__("urllib.parse").parse.quote(HOSTILE_NAME, safe="")
    with client(runs_dir) as studio:
        for path in ("/", "/fragments/runs", quoted, f"/fragments{quoted}/panels", f"/new?run={quoted[6:]}",
                     f"{quoted}/chat"):
            page = studio.get(path)
            assert page.status_code == 200, (path, page.text[:300])
            assert "<img src=x" not in page.text and "<script>alert" not in page.text and "<b>bold" not in page.text, path
            assert "&lt;img src=x onerror=alert(" in page.text, path
        state = studio.get(f"/api{quoted}/state").json()
        assert "<img src=x" not in state["header_html"] and "&lt;b&gt;bold" in state["header_html"]


def test_uploads_are_bounded_and_must_be_configs(tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    with client(runs_dir) as studio:
        assert studio.post("/api/uploads?filename=a.yaml", content=b"- a list\n", headers=MUTATE).status_code == 400
        assert studio.post("/api/uploads?filename=a.yaml", content=b"x: [1\n", headers=MUTATE).status_code == 400
        big = b"learning_rate: 1\n" + b"#" * (1 << 20)
        assert studio.post("/api/uploads?filename=a.yaml", content=big, headers=MUTATE).status_code == 413
        ok = studio.post("/api/uploads?filename=../../mine.yaml", content="learning_rate: 2e-4\n".encode(),
                         headers=MUTATE)
        form = studio.get(ok.json()["url"])
        assert form.status_code == 200 and 'value="mine"' in form.text and "2e-4" in form.text
        assert [p.suffix for p in (runs_dir / ".studio" / "uploads").iterdir()].count(".yaml") == 1
        assert "no such upload" in studio.get("/new?upload=../../etc/passwd").text   # said on the page
        check = studio.post("/api/check", headers=MUTATE, json={
            "source": {"kind": "upload", "ref": ok.json()["id"]}, "name": "a/b", "values": {"learning_rate": "x"}})
        assert set(check.json()["errors"]) == {"_name", "learning_rate"}
        body = {"source": {"kind": "upload", "ref": ok.json()["id"]}, "name": "two", "values": {}}
        assert studio.post("/api/check", headers=MUTATE, json={**body, "nproc": "2"}).json()["command"] == \
            "steadytune train runs/two/studio/config.yaml --nproc 2"
        assert "_nproc" in studio.post("/api/check", headers=MUTATE, json={**body, "nproc": "two"}).json()["errors"]
        refused = studio.post("/api/launch", headers=MUTATE, json={
            "source": {"kind": "upload", "ref": ok.json()["id"]}, "name": "fine", "values": {"learning_rate": "x"}})
        assert refused.status_code == 400 and refused.json()["errors"] == {"learning_rate":
                                                                            "invalid value 'x' (expected a number)"}
        assert not (runs_dir / "fine").exists()


def test_downloads_are_files_a_job_wrote_inside_the_run(tmp_path):
    runs_dir = tmp_path / "runs"
    run = minimal_run(runs_dir / "done")
    store = JobStore(run / STUDIO_FOLDER)
    (run / STUDIO_FOLDER / "exports").mkdir(parents=True)
    (run / STUDIO_FOLDER / "exports" / "done.tar.gz").write_bytes(b"archive")
    (tmp_path / "secret.txt").write_text("secret", encoding="utf-8")
    (run / STUDIO_FOLDER / "exports" / "link").symlink_to(tmp_path / "secret.txt")
    store.save(Job(id="20260101-000000-aaaaaa", kind="export", argv=[], command="", state="done", started=1.0,
                   outputs=["exports/done.tar.gz", "exports/link", "../../../secret.txt"]))
    with client(runs_dir) as studio:
        got = studio.get("/runs/done/files/20260101-000000-aaaaaa/0")
        assert got.status_code == 200 and got.content == b"archive" and "attachment" in got.headers["content-disposition"]
        for index in (1, 2, 3, -1):
            assert studio.get(f"/runs/done/files/20260101-000000-aaaaaa/{index}").status_code in (404, 422)
        assert studio.get("/runs/done/files/nope/0").status_code == 404
        assert studio.get("/runs/done/jobs/../../x/log").status_code == 404


def test_stop_signals_only_a_confirmed_steadytune_training_that_the_lock_names(tmp_path, live_process,
                                                                               training_lookalike):
    """Issue 54 class 1: the lock (or a job record) of a folder from elsewhere names any pid it likes. Stop signals
    none of them unless it is this user's steadytune training on this machine, started when the record says, and
    the user confirmed that very process; a training started in a terminal is still stoppable that way."""
    runs_dir = tmp_path / "runs"
    live = minimal_run(runs_dir / "live")
    (live / "train_results.json").unlink()
    (live / MANIFEST).write_text(json.dumps({"status": "running", "files": []}), encoding="utf-8")
    host = socket.gethostname()

    def lock(**holder):
        (live / LOCK).write_text(json.dumps(holder), encoding="utf-8")

    with client(runs_dir) as studio:
        # a process that is no training (the user's editor, say), one of another host, pid 1, a reused pid
        for holder, why in (({"pid": live_process.pid, "host": host}, "not a steadytune training"),
                            ({"pid": training_lookalike.pid, "host": "elsewhere"}, "not training here"),
                            ({"pid": 1, "host": host}, "not a process the studio may stop"),
                            ({"pid": training_lookalike.pid, "host": host, "process_start": 1}, "pid was reused"),
                            ({"pid": training_lookalike.pid, "host": host, "started": "2001-01-01T00:00:00+0000"},
                             "does not match")):
            lock(**holder)
            refused = studio.post("/api/runs/live/stop", json={"confirm_pid": holder["pid"]}, headers=MUTATE)
            assert refused.status_code == 400 and why in refused.json()["error"], (holder, refused.text)
        assert live_process.poll() is None and training_lookalike.poll() is None
        # The training the lock means, as a terminal run writes it: shown first, stopped once confirmed.
        lock(pid=training_lookalike.pid, host=host, started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             process_start=process_start_ticks(training_lookalike.pid))
        assert studio.get("/api/runs/live/state").json()["can"]["stop"]
        busy = studio.post("/api/runs/live/eval", json={}, headers=MUTATE)   # nothing else starts beside it
        assert busy.status_code == 400 and "busy" in busy.json()["error"]
        asked = studio.post("/api/runs/live/stop", headers=MUTATE)
        assert asked.status_code == 409 and asked.json()["confirm"]["pid"] == training_lookalike.pid
        assert "-m steadytune train" in asked.json()["confirm"]["command"] and training_lookalike.poll() is None
        stopped = studio.post("/api/runs/live/stop", json={"confirm_pid": training_lookalike.pid}, headers=MUTATE)
        assert stopped.json()["pid"] == training_lookalike.pid
        assert training_lookalike.wait(timeout=10) == -signal.SIGTERM


# ------------------------------------------------------------------------------------------------------
# Chat, predict, export on finished runs
# ------------------------------------------------------------------------------------------------------

def test_chat_streams_the_run_and_the_base_model_and_scores_labels(trained):
    with client(trained) as studio:
        events = chat_events(studio, "gen", {"text": "Add 3 and 4.", "greedy": True, "max_new_tokens": 6})
        ready = next(e for e in events if e.get("ready"))
        assert ready["sides"] == ["run", "base"] and ready["classification"] is False
        assert [e["side"] for e in events if e.get("done")] == ["run", "base"]
        answer = "".join(e["delta"] for e in events if e.get("side") == "run" and "delta" in e)
        # The same message again with the answer in the history: the conversation goes on.
        history = {"run": [{"role": "user", "content": "Add 3 and 4."}, {"role": "assistant", "content": answer}]}
        again = chat_events(studio, "gen", {"text": "And 5?", "history": history, "side_by_side": False,
                                            "greedy": True, "max_new_tokens": 4})
        assert [e["side"] for e in again if e.get("done")] == ["run"] and not any("error" in e for e in again)
        scored = chat_events(studio, "cls", {"text": "好评 很好"})
        labels = [e for e in scored if "label" in e]
        assert [e["side"] for e in labels] == ["run", "base"]
        assert all(set(e["probabilities"]) == {"消极", "积极"} for e in labels)
        assert abs(sum(labels[0]["probabilities"].values()) - 1) < 1e-5
        bad = studio.post("/api/runs/cls/chat", json={"text": 5}, headers=MUTATE)
        assert "message: expected text" in bad.text


def chat_events(studio: TestClient, run: str, body: dict) -> list[dict]:
    response = studio.post(f"/api/runs/{run}/chat", json=body, headers=MUTATE)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    lines = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def wait_job(studio: TestClient, run: str, kind: str, timeout_s: float = 120) -> dict:
    deadline = time.time() + timeout_s
    while True:
        jobs = JobStore(Path(studio.app.state.runs.root) / run / STUDIO_FOLDER).all()
        job = next((j for j in jobs if j.kind == kind), None)
        if job is not None:
            job = studio.app.state.launcher.refresh(JobStore(Path(studio.app.state.runs.root) / run / STUDIO_FOLDER),
                                                    job)
            if not job.active:
                return job.__dict__
        assert time.time() < deadline, f"{kind} did not end within {timeout_s} s"
        time.sleep(0.2)


def test_predict_a_file_and_download_the_results(trained):
    rows = [{"text": "好评 很好"}, {"text": "差评 太差"}]
    with client(trained) as studio:
        refused = studio.post("/api/runs/cls/predict?filename=rows.txt", content=b"x", headers=MUTATE)
        assert refused.status_code == 400 and ".jsonl, .json or .csv" in refused.text
        started = studio.post("/api/runs/cls/predict?filename=new rows.jsonl", headers=MUTATE,
                              content="\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode())
        assert started.status_code == 200, started.text
        assert "steadytune predict runs/cls --input runs/cls/studio/predict/" in started.json()["command"]
        job = wait_job(studio, "cls", "predict")
        assert job["state"] == "done", job
        got = studio.get(f"/runs/cls/files/{job['id']}/0")
        assert got.status_code == 200
        labelled = [json.loads(line) for line in got.text.splitlines()]
        assert [r["text"] for r in labelled] == ["好评 很好", "差评 太差"]
        assert all(r["label"] in ("消极", "积极") and set(r["probabilities"]) == {"消极", "积极"} for r in labelled)


def test_export_asks_export_for_the_archive_or_the_merged_model_and_its_gguf(trained):
    with client(trained) as studio:
        assert studio.post("/api/runs/gen/export", json={"kind": "gguf", "quant": "q3"}, headers=MUTATE).status_code == 400
        started = studio.post("/api/runs/gen/export", json={"kind": "gguf", "quant": "q8_0"}, headers=MUTATE).json()
        assert started["command"] == ("steadytune export runs/gen --export-dir runs/gen/studio/exports/gen-merged "
                                      "--force --gguf q8_0")
        job = wait_job(studio, "gen", "export", timeout_s=240)
        assert job["state"] == "done", job
        assert job["outputs"] == ["exports/gen-merged/gen-merged-q8_0.gguf", "exports/gen-merged"]
        gguf = studio.get(f"/runs/gen/files/{job['id']}/0")
        assert gguf.status_code == 200 and gguf.content[:4] == b"GGUF"
        folder = studio.get(f"/runs/gen/files/{job['id']}/1")   # the merged folder, packed for its download
        assert folder.status_code == 200 and folder.headers["content-disposition"].endswith('gen-merged.tar.gz"')


# ------------------------------------------------------------------------------------------------------
# Issue 54 class 1: a run folder from elsewhere (copied into RUNS_DIR) grants nothing by its files
# ------------------------------------------------------------------------------------------------------

def sent_folder(trained: Path, runs_dir: Path, name: str, **config) -> Path:
    """A copy of the finished `cls` run as someone may send it: interrupted (so Resume is offered), its run_config.yaml
    changed by `config`."""
    folder = runs_dir / name
    shutil.copytree(trained / "cls", folder, symlinks=True, ignore=shutil.ignore_patterns(STUDIO_FOLDER))
    (folder / STUDIO_FOLDER / "jobs").mkdir(parents=True)
    (folder / "train_results.json").unlink()
    manifest = read_manifest(folder)
    (folder / MANIFEST).write_text(json.dumps({**manifest, "status": "interrupted"}), encoding="utf-8")
    if config:
        raw = yaml.safe_load((folder / "run_config.yaml").read_text(encoding="utf-8"))
        (folder / "run_config.yaml").write_text(yaml.safe_dump({**raw, **config}, allow_unicode=True), encoding="utf-8")
    return folder


def test_a_run_folder_from_elsewhere_gets_no_code_or_command_from_its_files(trained, tmp_path):
    runs_dir = tmp_path / "runs"
    marker = tmp_path / "pwned"
    folder = runs_dir / "sent"
    evil = f"{folder / 'evil.py'}:f"
    sent_folder(trained, runs_dir, "sent", trust_remote_code=True, reward_funcs=[evil],
                export_dir=str(tmp_path / "models"))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef f(prompts, completions, **kw):\n"
                                    "    return [1.0] * len(completions)\n", encoding="utf-8")
    # its studio files name another config and an output_dir elsewhere on the machine
    (folder / STUDIO_FOLDER / "launch.json").write_text(json.dumps({
        "argv": ["train", str(tmp_path / "other.yaml"), f"output_dir={tmp_path / 'elsewhere'}"],
        "command": "steadytune train other.yaml"}), encoding="utf-8")
    jobs_before = len(JobStore(folder / STUDIO_FOLDER).all())   # the copied run's own (from the tests before)
    with client(runs_dir) as studio:
        state = studio.get("/api/runs/sent/state").json()
        assert state["can"]["resume"]
        assert "other.yaml" not in state["header_html"].split("resume runs")[1]
        assert "steadytune train runs/sent/run_config.yaml output_dir=runs/sent resume_from_checkpoint=true" \
            in state["header_html"]
        # the run's page shows each grant the file asks for, with the exact module file, unticked
        assert "trust_remote_code=true" in state["header_html"] and str(folder / "evil.py") in state["header_html"]
        for action, body in (("resume", {}), ("eval", {}), ("resume", {"grant": {"trust_remote_code": True}}),
                             ("eval", {"grant": {"reward_funcs": ["other.py:f"], "trust_remote_code": True}})):
            asked = studio.post(f"/api/runs/sent/{action}", json=body, headers=MUTATE)
            assert asked.status_code == 409, asked.text
            keys = {a["key"] for a in asked.json()["asks"]}
            assert "reward_funcs" in keys and "export_dir" in keys, asked.json()
            assert ("trust_remote_code" in keys) == (not body), asked.json()
        assert len(JobStore(folder / STUDIO_FOLDER).all()) == jobs_before   # nothing started
        # Re-run with changes: the form holds none of it, and says so; typed into the form, it is the user's
        page = studio.get("/new?run=sent").text
        field = page.split('data-field="trust_remote_code"')[1].split("</select>")[0]
        assert "left out" in page and 'value="true" selected' not in field and 'value="false" selected' in field
        body = {"source": {"kind": "run", "ref": "sent"}, "name": "again", "values": {}}
        check = studio.post("/api/check", headers=MUTATE, json=body).json()
        assert "trust_remote_code" not in check["command"] and "evil" not in check["yaml"]
        mine = studio.post("/api/check", headers=MUTATE, json={**body, "values": {"trust_remote_code": "true"}})
        assert mine.json()["command"].endswith("trust_remote_code=true"), mine.json()
        # Granted, exactly as shown: the command passes it on the command line, and nothing from launch.json
        grant = {"trust_remote_code": True, "reward_funcs": [evil], "export_dir": str(tmp_path / "models")}
        started = studio.post("/api/runs/sent/resume", json={"grant": grant}, headers=MUTATE)
        assert started.status_code == 200, started.text
        command = started.json()["command"]
        assert command.startswith("steadytune train runs/sent/run_config.yaml output_dir=runs/sent")
        assert "trust_remote_code=true" in command and evil in command and "elsewhere" not in command
        job = studio.app.state.launcher.children[started.json()["job"]][0]
        job.terminate()
        job.wait(timeout=60)
    assert not marker.exists() and not (tmp_path / "elsewhere").exists()


def test_the_studio_never_writes_through_a_link_in_a_run_folder(trained, tmp_path):
    """exports, predictions and the jobs' records and logs go through studio/writes.py: a link anywhere on the way
    (studio/, studio/exports, an export's folder, studio/jobs, a log) is refused in one line and nothing outside the
    run folder changes; a run folder file a training would write through (metrics.jsonl) is refused by train."""
    runs_dir = tmp_path / "runs"
    models = tmp_path / "models"
    models.mkdir()
    (models / "config.json").write_text('{"mine": true}', encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("secret", encoding="utf-8")
    folder = sent_folder(trained, runs_dir, "linked")
    studio_dir = folder / STUDIO_FOLDER
    (studio_dir / "exports").mkdir()
    (studio_dir / "exports" / "linked-merged").symlink_to(models)
    (studio_dir / "predict").symlink_to(outside)
    with client(runs_dir) as studio:
        merged = studio.post("/api/runs/linked/export", json={"kind": "merged"}, headers=MUTATE)
        assert merged.status_code == 400 and "symbolic link" in merged.json()["error"], merged.text
        (studio_dir / "exports").rename(studio_dir / "exports-old")
        (studio_dir / "exports").symlink_to(outside)
        archive = studio.post("/api/runs/linked/export", json={"kind": "archive"}, headers=MUTATE)
        assert archive.status_code == 400 and "symbolic link" in archive.json()["error"]
        predict = studio.post("/api/runs/linked/predict?filename=rows.jsonl", content=b'{"text": "x"}',
                              headers=MUTATE)
        assert predict.status_code == 400 and "symbolic link" in predict.json()["error"]
        # the jobs' folder a link: no job starts (its record and log would be written there)
        shutil.rmtree(studio_dir / "jobs")
        (studio_dir / "jobs").symlink_to(outside)
        evaluate = studio.post("/api/runs/linked/eval", json={}, headers=MUTATE)
        assert evaluate.status_code == 400 and "symbolic link" in evaluate.json()["error"]
        assert studio.get("/runs/linked").status_code == 200   # the page still shows
        # a job's log that is a link is not read (nor appended to)
        (studio_dir / "jobs").unlink()
        JobStore(studio_dir).save(Job(id="20260101-000000-bbbbbb", kind="eval", argv=[], command="", state="done",
                                      started=1.0))
        (studio_dir / "jobs" / "20260101-000000-bbbbbb.log").symlink_to(secret)
        assert "secret" not in studio.get("/runs/linked/jobs/20260101-000000-bbbbbb/log").text
    assert sorted(p.name for p in outside.iterdir()) == [] and secret.read_text() == "secret"
    assert [p.name for p in models.iterdir()] == ["config.json"] and "mine" in (models / "config.json").read_text()
    # a file the training appends to, as a link: train refuses before writing anything
    (folder / "metrics.jsonl").rename(outside / "metrics.jsonl")
    (folder / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")
    before = (outside / "metrics.jsonl").read_bytes()
    assert cli_main(["train", str(folder / "run_config.yaml"), "max_steps=4"]) == 1
    assert (outside / "metrics.jsonl").read_bytes() == before


def test_the_form_launches_grpo_with_the_users_own_reward_function(trained, tmp_path):
    """Issue 54 class 5: stage grpo's fields were each checked alone, and `stage: grpo` alone needs reward_funcs, so
    the form refused what `train` accepts. The reward module typed in the form is the user's: the command passes it
    on the command line (train grants nothing a run folder's file names), and it runs."""
    root = trained.parent
    marker = tmp_path / "rewarded"
    module = tmp_path / "my_rewards.py"
    module.write_text(f"def short(prompts, completions, **kw):\n    open({str(marker)!r}, 'a').write('x')\n"
                      "    return [1.0 / (1 + len(c)) for c in completions]\n", encoding="utf-8")
    runs_dir = tmp_path / "runs"
    upload_text = yaml.safe_dump(yaml.safe_load(tiny_config(root, tmp_path / "g").read_text(encoding="utf-8")),
                                 allow_unicode=True)
    with client(runs_dir) as studio:
        up = studio.post("/api/uploads?filename=g.yaml", content=upload_text.encode(), headers=MUTATE).json()["id"]
        body = {"source": {"kind": "upload", "ref": up}, "name": "grpo",
                "values": {"stage": "grpo", "reward_funcs": f"[label, {module}:short]", "reward_weights": "[1, 0.5]",
                           "num_generations": "2", "max_completion_length": "2", "max_steps": "1",
                           "per_device_train_batch_size": "2", "save_steps": "1"}}
        check = studio.post("/api/check", headers=MUTATE, json=body).json()
        assert check["ok"], check
        assert f'reward_funcs=["label", "{module}:short"]' in check["command"], check["command"]
        launched = studio.post("/api/launch", headers=MUTATE, json=body)
        assert launched.status_code == 200, launched.text
        job = wait_job(studio, "grpo", "train", timeout_s=240)
        assert job["state"] == "done", (job, JobStore(runs_dir / "grpo" / STUDIO_FOLDER).tail(
            JobStore(runs_dir / "grpo" / STUDIO_FOLDER).load(job["id"])))
    assert marker.exists() and (runs_dir / "grpo" / "adapter_model.safetensors").is_file()
