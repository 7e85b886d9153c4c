"""The studio's FastAPI app: pages (Jinja2, autoescaped), the JSON routes their script calls, downloads.

What a request can reach: run folders by their exact name in RUNS_DIR (nothing in a request becomes a path
otherwise: a download is one of the files a job of that run wrote, resolved inside its studio/ folder); uploads are
bounded and stored under names the studio makes. With an API key every route but /login, /health and /static needs
the key (a cookie the login sets, holding an HMAC of it, or `Authorization: Bearer KEY`), compared in constant time.
Every request that changes something needs the header `X-Studio: 1`, which a page of another site cannot send
without the browser asking first (and nothing here answers that question): no cross-site form can launch a run. On
a loopback address, a request must name a loopback host (a page of another site resolving its own name to
127.0.0.1 is refused). Every page carries a Content-Security-Policy that runs only the studio's own scripts and
allows requests to the studio alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import html
import json
import logging
import os
import re
import tarfile
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import plotly.io as pio
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.responses import StreamingResponse
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from steadytune.config import MAX_YAML_BYTES, ConfigError, parse_yaml
from steadytune.errors import UserError
from steadytune.infer.gguf_file import GGUF_TYPES
from steadytune.report.charts import curve_charts, primary_result
from steadytune.report.page import clip, figure_json, plotly_js, render, run_details, run_header, shown
from steadytune.report.rundata import as_number
from steadytune.serve.command import _is_loopback
from steadytune.studio import form as forms
from steadytune.studio.chat import ChatModels
from steadytune.studio.grants import SessionGrants, asked_by, describe
from steadytune.studio.jobs import JobStore, Launcher, read_tail
from steadytune.studio.runs import CONFIG, NeedsConfirmation, NotFound, Runs, RunView, launched_nproc, write_launch
from steadytune.studio.schema import studio_openapi
from steadytune.studio.stopping import stop_confirmed, verified_target
from steadytune.studio.writes import real_folder, refuse_link, write_new
from steadytune.training.folder_config import grants_asked
from steadytune.training.run_folder import STUDIO_FOLDER

logger = logging.getLogger("steadytune.studio")

COOKIE = "steadytune_studio"
MUTATION_HEADER = "x-studio"
OPEN_PATHS = ("/login", "/health", "/openapi.json")
JSON_LIMIT = 1 << 20
PREDICT_LIMIT = 64 << 20
PREDICT_SUFFIXES = (".jsonl", ".json", ".csv")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
STATIC = {"studio.js": "text/javascript; charset=utf-8", "studio.css": "text/css; charset=utf-8"}
STUDIO_HOME = ".studio"     # RUNS_DIR/.studio: uploads, the doctor's jobs


@dataclass
class StudioSettings:
    runs_dir: Path
    host: str = "127.0.0.1"
    port: int = 7860
    api_key: Optional[str] = None
    cwd: Path = field(default_factory=Path.cwd)   # where launched commands run: configs' relative paths start here


class FormErrors(UserError):
    def __init__(self, errors: dict, general: list):
        super().__init__("; ".join([*general, *(f"{k}: {v}" for k, v in errors.items())]) or "invalid")
        self.errors, self.general = errors, general


class TooLarge(UserError):
    pass


# ------------------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------------------

def part(value: Any) -> str:
    """One URL path segment."""
    return urllib.parse.quote(str(value), safe="")


@lru_cache(maxsize=1)
def templates() -> Environment:
    env = Environment(loader=PackageLoader("steadytune.studio", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, finalize=shown)
    env.filters["num"] = lambda v, d=4: "—" if as_number(v) is None else f"{as_number(v):.{d}f}"
    env.filters["clip"] = clip
    env.filters["part"] = part
    env.filters["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else ""
    env.filters["status_class"] = lambda s: "status-" + re.sub(r"[^a-z]+", "-", str(s).lower()).strip("-")
    return env


@lru_cache(maxsize=None)
def static_text(name: str) -> str:
    return (resources.files("steadytune.studio") / "templates" / name).read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """JSON that can sit in a <script type="application/json"> block (as report/page.py writes figures)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).replace("<", "\\u003c").replace(
        ">", "\\u003e").replace("&", "\\u0026")


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    seconds = max(0.0, float(seconds))
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, s = divmod(int(seconds), 60)
    return f"{minutes} min {s} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


# ------------------------------------------------------------------------------------------------------
# The app
# ------------------------------------------------------------------------------------------------------

def build_app(settings: StudioSettings) -> FastAPI:
    runs_dir = Path(settings.runs_dir)
    home = runs_dir / STUDIO_HOME
    launcher = Launcher(settings.cwd)
    runs = Runs(runs_dir, launcher)
    chats = ChatModels()
    grants = SessionGrants()   # what the user granted, per run folder, in this studio process (studio/grants.py)
    key = settings.api_key.encode() if settings.api_key else None
    token = hmac.new(key, b"steadytune studio session", hashlib.sha256).hexdigest() if key else None
    loopback_only = _is_loopback(settings.host)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        launcher.watch()
        try:
            yield
        finally:
            launcher.close()   # the jobs go on: they are not the studio's to end

    app = FastAPI(title="steadytune studio", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings, app.state.runs, app.state.launcher = settings, runs, launcher

    def page(template_name: str, request: Request, status: int = 200, **context) -> HTMLResponse:
        text = templates().get_template(template_name).render(
            runs_dir=str(runs_dir.resolve()), path=request.url.path, **context)
        return HTMLResponse(text, status_code=status)

    def fragment(template_name: str, **context) -> str:
        return templates().get_template(template_name).render(**context)

    # --- the gate: host, key, the studio's header, security headers -------------------------------------------
    def authorized(request: Request) -> bool:
        if key is None:
            return True
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer " and hmac.compare_digest(header[7:].strip().encode(), key):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return hmac.compare_digest(cookie.encode(), token.encode())

    def host_allowed(request: Request) -> bool:
        if not loopback_only:
            return True   # reachable from elsewhere: the key (required) guards it
        host = (request.headers.get("host") or "").lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.strip("[]") in ("localhost", "127.0.0.1", "::1", settings.host.lower())

    @app.middleware("http")
    async def gate(request: Request, call_next):
        path = request.url.path
        if not host_allowed(request):
            response: Response = PlainTextResponse("steadytune studio: unexpected Host header (open it as "
                                                   f"http://127.0.0.1:{settings.port}/)", status_code=400)
        elif not (path in OPEN_PATHS or path.startswith("/static/") or authorized(request)):
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                response = RedirectResponse("/login?next=" + urllib.parse.quote(path), status_code=303)
            else:
                response = JSONResponse({"error": "the studio's API key is missing or wrong (sign in, or send "
                                                  "Authorization: Bearer <key>)"}, status_code=401)
        elif request.method not in ("GET", "HEAD") and path != "/login" \
                and request.headers.get(MUTATION_HEADER) != "1":
            response = JSONResponse({"error": f"requests that change something need the header {MUTATION_HEADER}: 1"},
                                    status_code=403)
        else:
            response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        if not path.startswith("/static/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    # --- errors ---------------------------------------------------------------------------------------------
    @app.exception_handler(UserError)
    async def on_user_error(request: Request, e: UserError):
        status = 404 if isinstance(e, NotFound) else 413 if isinstance(e, TooLarge) else 400
        if isinstance(e, NeedsConfirmation):
            return JSONResponse({"error": str(e), **e.payload}, status_code=409)
        if isinstance(e, FormErrors):
            return JSONResponse({"error": str(e), "errors": e.errors, "general": e.general}, status_code=400)
        if request.url.path.startswith("/api/") or request.method != "GET":
            return JSONResponse({"error": str(e)}, status_code=status)
        return page("error.html.j2", request, status=status, title="not found" if status == 404 else "error",
                    message=str(e))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException):
        """Starlette's own answers (no route for the path, a method the route does not take), in the studio's shape."""
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def on_crash(request: Request, e: Exception):
        logger.exception("studio: unhandled error")
        return JSONResponse({"error": f"internal error ({type(e).__name__}); the studio's log has the details"},
                            status_code=500)

    async def body_bytes(request: Request, limit: int) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise TooLarge(f"request body larger than {limit:,} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"request body larger than {limit:,} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def body_json(request: Request, optional: bool = False) -> dict:
        body = await body_bytes(request, JSON_LIMIT)
        if optional and not body.strip():
            return {}
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise UserError("the request body is not JSON") from None
        if not isinstance(data, dict):
            raise UserError("the request body must be a JSON object")
        return data

    # --- sign-in ----------------------------------------------------------------------------------------------
    @app.get("/login", response_class=HTMLResponse)
    async def login_page(request: Request, next: str = "/"):
        return page("login.html.j2", request, title="sign in", next=safe_next(next), error=None)

    @app.post("/login")
    async def login(request: Request):
        fields = urllib.parse.parse_qs((await body_bytes(request, 4096)).decode("utf-8", "replace"))
        given, target = (fields.get("key") or [""])[0].strip(), safe_next((fields.get("next") or ["/"])[0])
        if key is None:
            return RedirectResponse(target, status_code=303)
        if not hmac.compare_digest(given.encode(), key):
            return page("login.html.j2", request, status=401, title="sign in", next=target,
                        error="That is not the studio's key.")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    @app.get("/health")
    async def health():
        return {"ok": True}

    @app.get("/openapi.json")
    async def openapi_schema():
        return studio_openapi()   # the JSON API, written out (studio/schema.py): the routes read their own bodies

    @app.get("/static/{name}")
    async def static(name: str):
        if name == "plotly.js":
            return Response(plotly_js(), media_type="text/javascript; charset=utf-8",
                            headers={"Cache-Control": "max-age=86400"})
        if name not in STATIC:
            raise NotFound(f"no static file {name[:80]!r}")
        return Response(static_text(name), media_type=STATIC[name], headers={"Cache-Control": "no-cache"})

    # --- runs ---------------------------------------------------------------------------------------------------
    def row(view: RunView) -> dict:
        run, c = view.run, view.config
        best = run.best_eval() if run else None
        final = primary_result(run) if run else None
        if final is not None:
            result = f"test accuracy {final.get('accuracy', 0):.4f}"
        elif best is not None:
            result = f"{best[0].removeprefix('eval_')} {best[1]:.4f} (step {best[2]})"
        else:
            result = ""
        steps = ""
        if run is not None:
            steps = f"{run.last_step}" + (f" / {run.total_steps}" if run.total_steps else "")
        active = view.active
        model = str(c.get("model_name_or_path") or "")
        return {"name": view.name, "status": view.status, "detail": view.detail, "model": model,
                "model_short": Path(model).name if "/" in model and Path(model).is_absolute() else model,
                "stage": c.get("stage", ""), "steps": steps, "result": result, "started": view.started(),
                "activity": f"{active.kind} running" if active and active.kind != "train" else ""}

    @app.get("/", response_class=HTMLResponse)
    async def runs_page(request: Request):
        views = await asyncio.to_thread(runs.views)
        return page("runs.html.j2", request, title="runs", page_name="runs", rows=[row(v) for v in views])

    @app.get("/fragments/runs", response_class=HTMLResponse)
    async def runs_rows(request: Request):
        views = await asyncio.to_thread(runs.views)
        return HTMLResponse(fragment("runs_rows.html.j2", rows=[row(v) for v in views]))

    @app.get("/api/runs")
    async def runs_json():
        views = await asyncio.to_thread(runs.views)
        return {"runs_dir": str(runs_dir.resolve()), "runs": [row(v) for v in views]}

    def header_context(view: RunView) -> dict:
        can = view.can()
        return {"view": view, "h": run_header(view.run) if view.run else None, "can": can,
                "resume_command": forms.command_line(resume_argv(view)) if can["resume"] else "",
                "asks": asks_of(view)}

    def asks_of(view: RunView) -> list[dict]:
        """What the configs Resume and Evaluate read ask for and the user has not granted in this session: each
        shown with a checkbox (run_header.html.j2), sent back with the action."""
        out: list[dict] = []
        for config in (resume_config(view), view.folder / "run_config.yaml"):
            for grant in asked_by(config):
                shown = describe(grant, settings.cwd)
                if not grants.granted(view.folder, grant) and shown not in out:
                    out.append(shown)
        return out

    def jobs_context(view: RunView) -> dict:
        store = runs.store(view.folder)
        jobs = []
        for job in view.jobs[:12]:
            downloads = [(out, Path(out).name + ("/" if (store.folder / out).is_dir() else ""))
                         for out in job.outputs if (store.folder / out).exists()]
            ended = job.ended or (None if job.active else job.started)
            jobs.append({"job": job, "progress": view.progress(job) if job.active else None,
                         "lines": view.log_tail(job, 6), "downloads": downloads,
                         "took": duration((ended or time.time()) - job.started)})
        return {"view": view, "jobs": jobs}

    def curves_of(view: RunView) -> list:
        return curve_charts([view.run]) if view.run is not None and (view.run.steps or view.run.evals) else []

    def versions(view: RunView) -> dict:
        def stamp(*names):
            parts = []
            for name in names:
                try:
                    st = (view.folder / name).stat()
                    parts.append(f"{st.st_mtime_ns}:{st.st_size}")
                except OSError:
                    parts.append("-")
            return "|".join(parts)
        return {"curves": stamp("metrics.jsonl"),
                "panels": stamp("eval_results.json", "predictions.jsonl", "errors_to_review.jsonl", "run_config.yaml",
                                "environment.json", "data_stats.json", "generated_predictions.jsonl",
                                "train_results.json", "demo_results.json")}

    @app.get("/runs/{name}", response_class=HTMLResponse)
    async def run_page(request: Request, name: str):
        view = await asyncio.to_thread(runs.view, name)
        charts = await asyncio.to_thread(curves_of, view)
        details = run_details(view.run, 0) if view.run else None
        figures = {c.id: figure_json(c) for c in charts}
        context = {**header_context(view), **jobs_context(view), **panels_context(view, details)}
        return page("run.html.j2", request, title=view.name, page_name="run", run_name=view.name, plotly=True,
                    charts=charts, figures=figures, gguf_types=GGUF_TYPES, versions=versions(view), **context)

    def panels_context(view: RunView, details: Optional[dict]) -> dict:
        panel_figures = {c.id: figure_json(c) for c in details["charts"]} if details else {}
        return {"details": details, "panel_figures": panel_figures}

    @app.get("/api/runs/{name}/state")
    async def run_state(name: str):
        view = await asyncio.to_thread(runs.view, name)
        return {"status": view.status, "detail": view.detail, "versions": versions(view), "can": view.can(),
                "header_html": fragment("run_header.html.j2", **header_context(view)),
                "jobs_html": fragment("run_jobs.html.j2", **jobs_context(view))}

    @app.get("/api/runs/{name}/curves")
    async def run_curves(name: str):
        view = await asyncio.to_thread(runs.view, name)
        charts = await asyncio.to_thread(curves_of, view)
        body = ",".join(f'{{"id":{json.dumps(c.id)},"figure":{pio.to_json(c.figure, validate=False)}}}'
                        for c in charts)
        return Response(f'{{"charts":[{body}]}}', media_type="application/json")

    @app.get("/fragments/runs/{name}/panels", response_class=HTMLResponse)
    async def run_panels(name: str):
        view = await asyncio.to_thread(runs.view, name)
        details = run_details(view.run, 0) if view.run else None
        return HTMLResponse(fragment("run_panels.html.j2", view=view, **panels_context(view, details)))

    @app.get("/runs/{name}/report", response_class=HTMLResponse)
    async def run_report(name: str):
        view = await asyncio.to_thread(runs.view, name)
        if view.run is None:
            raise NotFound(f"run {name!r} has nothing to report yet")
        return report_response(await asyncio.to_thread(render, [view.run]))

    @app.get("/compare", response_class=HTMLResponse)
    async def compare(request: Request):
        names = list(dict.fromkeys(request.query_params.getlist("run")))
        if len(names) < 2:
            raise UserError("compare: choose two or more runs")
        views = [await asyncio.to_thread(runs.view, n) for n in names[:12]]
        missing = [v.name for v in views if v.run is None]
        if missing:
            raise UserError(f"compare: {', '.join(missing)} has nothing to compare yet")
        return report_response(await asyncio.to_thread(render, [v.run for v in views]))

    @app.get("/runs/{name}/jobs/{job_id}/log", response_class=PlainTextResponse)
    async def job_log(name: str, job_id: str):
        store = runs.store(runs.folder(name))
        job = store.load(job_id)
        if job is None:
            raise NotFound(f"no job {job_id[:40]!r} in run {name!r}")
        text = read_tail(store.log_path(job.id), 2 << 20)
        return PlainTextResponse(text, headers={"Content-Disposition": "inline"})

    @app.get("/runs/{name}/files/{job_id}/{index}")
    async def download(name: str, job_id: str, index: int):
        folder = runs.folder(name)
        store = runs.store(folder)
        job = store.load(job_id)
        if job is None or not 0 <= index < len(job.outputs):
            raise NotFound("no such file")
        target = (store.folder / job.outputs[index])
        studio = store.folder.resolve()
        resolved = target.resolve()
        if studio not in resolved.parents or not resolved.exists():
            raise NotFound("no such file")
        if resolved.is_dir():
            path = await asyncio.to_thread(pack_folder, resolved)
            return FileResponse(path, filename=resolved.name + ".tar.gz", media_type="application/gzip",
                                background=BackgroundTask(os.unlink, path))
        return FileResponse(resolved, filename=resolved.name, media_type="application/octet-stream")

    # --- launching ------------------------------------------------------------------------------------------------
    def load_source(data: dict) -> forms.Source:
        kind, ref = text_of(data, "kind", "source.kind"), text_of(data, "ref", "source.ref")
        if kind == "recipe":
            return forms.from_file("recipe", ref, forms.recipe_file(ref), forms.name_from(Path(ref).stem),
                                   f"the shipped recipe {ref}")
        if kind == "path":
            return forms.from_path(ref)
        if kind == "run":
            folder = runs.folder(ref)
            return forms.from_run(ref, folder, set(runs.names()))
        if kind == "upload":
            path, original = upload_path(ref)
            return forms.from_file("upload", ref, path, forms.name_from(Path(original).stem),
                                   f"the uploaded file {original}")
        if kind == "blank":
            return forms.Source("blank", "", {}, "every default", "run")
        raise UserError("choose where the config starts: a recipe, a file, a run or an upload")

    def upload_path(upload_id: str) -> tuple[Path, str]:
        if not re.fullmatch(r"[0-9a-f]{32}", upload_id):
            raise NotFound("no such upload")
        path = home / "uploads" / f"{upload_id}.yaml"
        if not path.is_file():
            raise NotFound("no such upload")
        try:
            original = (home / "uploads" / f"{upload_id}.name").read_text(encoding="utf-8")[:200]
        except OSError:
            original = "upload.yaml"
        return path, original

    @app.get("/new", response_class=HTMLResponse)
    async def new_page(request: Request):
        q = request.query_params
        chosen = next(((k, q[k]) for k in ("recipe", "path", "run", "upload") if q.get(k)), None)
        if chosen is None and q.get("blank"):
            chosen = ("blank", "")
        context: dict[str, Any] = {"recipes": forms.recipes(), "run_names": runs.names(), "source": None,
                                   "load_error": None, "chosen": chosen}
        if chosen is not None:
            try:
                source = load_source({"kind": chosen[0], "ref": chosen[1]})
                sections, extra = forms.form_sections(source.raw)
                name = source.name
                taken = set(runs.names())
                base, n = name, 2
                while name in taken or (runs_dir / name).exists():
                    name, n = f"{base}-{n}", n + 1
                context.update(source=source, sections=sections, extra=extra, name=name,
                               output_dir=str((runs_dir / name).resolve()))
            except UserError as e:
                context["load_error"] = str(e)
        return page("new.html.j2", request, title="new run", page_name="new", **context)

    def prepare(data: dict) -> dict:
        """The config, errors and command the form describes now."""
        source = load_source(object_of(data, "source"))
        values = data.get("values") or {}
        if not isinstance(values, dict):
            raise UserError("values: expected an object")
        raw, errors = forms.assemble(source.raw, {str(k): v for k, v in values.items()}, text_of(data, "extra"))
        general: list[str] = []
        name = text_of(data, "name")
        folder = None
        try:
            folder = runs.new_folder(name)
        except UserError as e:
            errors["_name"] = str(e).removeprefix("name: ")
        output_dir = (folder or runs_dir / (name or "NAME")).resolve()
        raw = dict(raw, output_dir=str(output_dir))
        cfg, more, general = forms.validate(raw)
        for k, v in more.items():
            errors.setdefault(k, v)
        try:
            config_path = output_dir / STUDIO_FOLDER / CONFIG
            argv = forms.train_argv(forms.shown_path(config_path, settings.cwd), text_of(data, "nproc"))
        except UserError as e:
            errors["_nproc"] = str(e).removeprefix("processes: ")
            argv = ["train", forms.shown_path(output_dir / STUDIO_FOLDER / CONFIG, settings.cwd)]
        # The form's values are the user's, typed (or kept) in this session: what lets a config run code or write
        # elsewhere goes on the command line, since `train` grants nothing a run folder's file asks for.
        granted = grants_asked(raw)
        argv += [g.override() for g in granted]
        return {"raw": raw, "errors": errors, "general": general, "folder": folder, "argv": argv, "granted": granted,
                "output_dir": str(output_dir),
                "command": forms.command_line(argv), "yaml": forms.config_text(raw, source.description),
                "source": source, "ok": not errors and not general}

    @app.post("/api/check")
    async def check(request: Request):
        data = await body_json(request)
        result = await asyncio.to_thread(prepare, data)
        return {k: result[k] for k in ("errors", "general", "command", "yaml", "ok", "output_dir")}

    @app.post("/api/launch")
    async def launch(request: Request):
        data = await body_json(request)
        result = await asyncio.to_thread(prepare, data)
        if not result["ok"]:
            raise FormErrors(result["errors"], result["general"])
        folder: Path = result["folder"]
        try:
            folder.mkdir(parents=True)   # a second launch of the same name loses here
        except FileExistsError:
            raise FormErrors({"_name": f"{folder} already exists; choose another name"}, []) from None
        write_new(real_folder(folder, STUDIO_FOLDER) / CONFIG, result["yaml"].encode("utf-8"))
        write_launch(folder, {"argv": result["argv"], "command": result["command"],
                              "source": result["source"].description, "created": time.time()})
        grants.record(folder, result["granted"])
        await asyncio.to_thread(launcher.start, runs.store(folder), "train", result["argv"], result["command"],
                                "train")
        return {"run": folder.name, "url": f"/runs/{part(folder.name)}", "command": result["command"]}

    @app.post("/api/uploads")
    async def upload(request: Request, filename: str = "upload.yaml"):
        body = await body_bytes(request, MAX_YAML_BYTES)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"{filename[:80]}: not UTF-8 (byte {e.start})") from None
        data = parse_yaml(text, filename[:80])
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{filename[:80]}: expected key: value lines at the top level")
        upload_id = uuid.uuid4().hex
        folder = real_folder(runs_dir, STUDIO_HOME, "uploads")
        write_new(folder / f"{upload_id}.yaml", text.encode("utf-8"))
        write_new(folder / f"{upload_id}.name", (Path(filename).name[:200] or "upload.yaml").encode("utf-8"))
        return {"id": upload_id, "url": f"/new?upload={upload_id}"}

    # --- actions on a run -------------------------------------------------------------------------------------
    def idle_view(name: str) -> RunView:
        view = runs.view(name)
        busy = runs.busy_reason(view)
        if busy:
            raise UserError(f"run {name!r} is busy: {busy}")
        return view

    def start(view: RunView, kind: str, argv: list[str], outputs: Optional[list[str]] = None):
        if kind == "train":
            chats.forget(view.folder)
        job = launcher.start(runs.store(view.folder), kind, argv, forms.command_line(argv), kind, outputs)
        return {"job": job.id, "command": job.command}

    def resume_config(view: RunView) -> Path:
        """The config Resume trains with: the one the New run form wrote for the run, else its run_config.yaml."""
        written = view.folder / STUDIO_FOLDER / CONFIG
        return written if written.is_file() else view.folder / "run_config.yaml"

    def resume_argv(view: RunView, granted: Optional[list[str]] = None) -> list[str]:
        """The command that continues the run, made here and never read from the folder (its studio/launch.json may
        come from anyone): train on the run's config in its own folder from its newest checkpoint, with the processes
        its launch asked for (a number, checked again) and what the user granted (`granted`, key=value words)."""
        argv = ["train", forms.shown_path(resume_config(view), settings.cwd),
                f"output_dir={forms.shown_path(view.folder, settings.cwd)}", "resume_from_checkpoint=true"]
        nproc = launched_nproc(view.launch)
        if nproc:
            argv += ["--nproc", nproc]
        return argv + list(granted or [])

    @app.post("/api/runs/{name}/stop")
    async def stop(request: Request, name: str):
        """A training this studio started: stopped at once. Any other process a file in the folder names (another
        studio's job record, the training's lock): only after studio/stopping.py's checks, and once the user
        confirmed that very process (`confirm_pid`)."""
        data = await body_json(request, optional=True)
        view = await asyncio.to_thread(runs.view, name)
        job = view.train_job
        if job is not None and job.active and launcher.started_here(job.id):
            if launcher.stop(job.id):
                return {"stopping": True, "pid": job.pid}
        holder = view.run.lock if view.run else None
        if job is not None and job.active:
            target = verified_target(job.pid, job.host, job.process_start, None,
                                     f"the studio's record {STUDIO_FOLDER}/jobs/{job.id}.json")
        elif holder and view.lock_or_job_here():
            target = verified_target(holder.get("pid"), holder.get("host"), holder.get("process_start"),
                                     holder.get("started"), "the run's lock file")
        else:
            raise UserError(f"run {name!r} is not training here")
        await asyncio.to_thread(stop_confirmed, target, data.get("confirm_pid"))
        return {"stopping": True, "pid": target.pid}

    @app.post("/api/runs/{name}/resume")
    async def resume(request: Request, name: str):
        data = await body_json(request, optional=True)
        view = await asyncio.to_thread(idle_view, name)
        if view.status == "finished":
            raise UserError(f"run {name!r} has finished; re-run it with changes instead")
        if not resume_config(view).is_file():
            raise UserError(f"run {name!r} has no config to resume from")
        granted = grants.overrides_for(view.folder, resume_config(view), data.get("grant"), settings.cwd, "resume")
        return await asyncio.to_thread(start, view, "train", resume_argv(view, granted))

    @app.post("/api/runs/{name}/eval")
    async def evaluate(request: Request, name: str):
        data = await body_json(request)
        view = await asyncio.to_thread(idle_view, name)
        config = view.folder / "run_config.yaml"
        if not view.has_adapter or not config.is_file():
            raise UserError(f"run {name!r} has no trained adapter to evaluate yet")
        granted = grants.overrides_for(view.folder, config, data.get("grant"), settings.cwd, "evaluate")
        argv = ["eval", forms.shown_path(config, settings.cwd),
                f"output_dir={forms.shown_path(view.folder, settings.cwd)}", *granted]
        if view.is_classification and data.get("zero_shot", True):
            argv.append("--zero-shot")
        review = data.get("review_errors", 20)
        if isinstance(review, int) and not isinstance(review, bool) and 0 < review <= 1000 and view.is_classification:
            argv += ["--review-errors", str(review)]
        return await asyncio.to_thread(start, view, "eval", argv)

    @app.post("/api/runs/{name}/export")
    async def export(request: Request, name: str):
        data = await body_json(request)
        view = await asyncio.to_thread(idle_view, name)
        if not view.has_adapter:
            raise UserError(f"run {name!r} has no trained adapter to export yet")
        kind = data.get("kind")
        folder_arg = forms.shown_path(view.folder, settings.cwd)
        safe = re.sub(r"[^\w.-]+", "_", view.name).strip("._") or "run"
        exports = real_folder(view.folder, STUDIO_FOLDER, "exports")   # never a link out of the run folder
        if kind == "archive":
            out = f"exports/{safe}.tar.gz"
            argv = ["export", folder_arg, "--archive",
                    forms.shown_path(refuse_link(exports / f"{safe}.tar.gz"), settings.cwd), "--force"]
            outputs = [out]
        elif kind in ("merged", "gguf"):
            out = f"exports/{safe}-merged"
            argv = ["export", folder_arg, "--export-dir",
                    forms.shown_path(refuse_link(exports / f"{safe}-merged"), settings.cwd), "--force"]
            outputs = [out]
            if kind == "gguf":
                quant = data.get("quant")
                if quant not in GGUF_TYPES:
                    raise UserError(f"quant: one of {', '.join(GGUF_TYPES)}")
                merged = exports / f"{safe}-merged"
                if merged.is_dir():
                    refuse_link(merged / f"{safe}-merged-{quant}.gguf")
                argv += ["--gguf", quant]
                outputs = [f"{out}/{safe}-merged-{quant}.gguf", out]
        else:
            raise UserError("kind: archive, merged or gguf")
        return await asyncio.to_thread(start, view, "export", argv, outputs)

    @app.post("/api/runs/{name}/predict")
    async def predict(request: Request, name: str, filename: str = "input.jsonl"):
        view = await asyncio.to_thread(idle_view, name)
        if not view.has_adapter:
            raise UserError(f"run {name!r} has no trained adapter to predict with yet")
        suffix = Path(filename).suffix.lower()
        if suffix not in PREDICT_SUFFIXES:
            raise UserError(f"{filename[:80]}: predict reads .jsonl, .json or .csv files")
        body = await body_bytes(request, PREDICT_LIMIT)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        stem = re.sub(r"[^\w.-]+", "_", Path(filename).stem)[:60].strip("._") or "input"
        folder = real_folder(view.folder, STUDIO_FOLDER, "predict")   # never a link out of the run folder
        source = folder / f"{stamp}-{stem}{suffix}"
        write_new(source, body)
        out = f"predict/{stamp}-{stem}-predictions{suffix}"
        argv = ["predict", forms.shown_path(view.folder, settings.cwd), "--input", forms.shown_path(source, settings.cwd),
                "--output", forms.shown_path(refuse_link(folder / f"{stamp}-{stem}-predictions{suffix}"), settings.cwd)]
        return await asyncio.to_thread(start, view, "predict", argv, [out])

    # --- chat ---------------------------------------------------------------------------------------------------
    @app.get("/runs/{name}/chat", response_class=HTMLResponse)
    async def chat_page(request: Request, name: str):
        view = await asyncio.to_thread(runs.view, name)
        return page("chat.html.j2", request, title=f"chat: {view.name}", page_name="chat", run_name=view.name,
                    view=view, can=view.can(), labels=view.config.get("label_names") or [])

    @app.post("/api/runs/{name}/chat")
    async def chat(request: Request, name: str):
        data = await body_json(request)
        view = await asyncio.to_thread(runs.view, name)
        if not view.can()["chat"]:
            raise UserError(f"run {name!r} cannot chat now ({view.status}): chat needs a finished run with its "
                            "adapter, and no job at work in its folder")
        history = data.get("history") if isinstance(data.get("history"), dict) else {}
        max_new = data.get("max_new_tokens")
        max_new = max_new if isinstance(max_new, int) and not isinstance(max_new, bool) and max_new > 0 else None
        system = data.get("system") if isinstance(data.get("system"), str) and data.get("system").strip() else None
        events = chats.stream(view.folder, data.get("text"), history, bool(data.get("side_by_side", True)),
                              bool(data.get("greedy", False)), max_new, system)

        def sse():
            try:
                for event in events:
                    yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
            except UserError as e:
                yield f"data: {json.dumps({'error': str(e)}, ensure_ascii=False)}\n\n"
            except Exception as e:   # the model's own failure: said in the page, the details in the log
                logger.exception("studio: chat failed")
                yield f"data: {json.dumps({'error': f'generation failed ({type(e).__name__}: {e})'[:500]})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # --- doctor ---------------------------------------------------------------------------------------------------
    def doctor_state() -> dict:
        store = JobStore(home)
        jobs = [j for j in launcher.jobs(store) if j.kind == "doctor"]
        job = jobs[0] if jobs else None
        result, error = None, None
        finished = next((j for j in jobs if not j.active), None)
        if finished is not None and finished.stdout:
            text = read_tail(store.folder / finished.stdout, 4 << 20)
            try:
                result = json.loads(text) if text.strip() else None
            except ValueError:
                result = None
            if result is None or not isinstance(result, dict):
                result = None
                error = (read_tail(store.log_path(finished.id), 4000).strip().splitlines() or ["no output"])[-1]
        return {"job": job, "finished": finished, "result": result, "error": error}

    @app.get("/doctor", response_class=HTMLResponse)
    async def doctor_page(request: Request):
        state = await asyncio.to_thread(doctor_state)
        return page("doctor.html.j2", request, title="doctor", page_name="doctor", **state)

    @app.get("/api/doctor")
    async def doctor_json():
        state = await asyncio.to_thread(doctor_state)
        job = state["job"]
        return {"running": bool(job and job.active), "html": fragment("doctor_findings.html.j2", **state),
                "checked": state["finished"].ended if state["finished"] else None}

    @app.post("/api/doctor")
    async def doctor_run():
        store = JobStore(home)
        running = [j for j in launcher.jobs(store) if j.kind == "doctor" and j.active]
        if running:
            return {"job": running[0].id, "running": True}
        job = await asyncio.to_thread(launcher.start, store, "doctor", ["doctor", "--json"],
                                      "steadytune doctor --json", "doctor", None, True)
        return {"job": job.id, "running": True}

    return app


def text_of(data: dict, key: str, label: str | None = None) -> str:
    """A request's text field ("" when absent or null); anything else is a 400 naming it."""
    value = data.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UserError(f"{label or key}: expected text, got {type(value).__name__}")
    return str(value)


def object_of(data: dict, key: str) -> dict:
    """A request's object field ({} when absent or null); anything else is a 400 naming it."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{key}: expected an object, got {type(value).__name__}")
    return value


def safe_next(target: str) -> str:
    """Where to go after signing in: a path of this studio only."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


def report_response(page_text: str) -> HTMLResponse:
    """A report page as `steadytune report` writes it, under its own Content-Security-Policy (its inline scripts are
    allowed by their hashes, as in the file)."""
    match = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page_text)
    policy = html.unescape(match.group(1)) if match else "default-src 'none'"
    return HTMLResponse(page_text, headers={"Content-Security-Policy": policy + "; frame-ancestors 'none'"})


def pack_folder(folder: Path) -> str:
    """A folder (a merged export) as a .tar.gz in a temporary file, for its download."""
    fd, path = tempfile.mkstemp(prefix="steadytune-studio-", suffix=".tar.gz")
    os.close(fd)
    with tarfile.open(path, "w:gz") as tar:
        for entry in sorted(folder.rglob("*")):
            if entry.is_file() and not entry.is_symlink():
                tar.add(entry, arcname=f"{folder.name}/{entry.relative_to(folder)}")
    return path
