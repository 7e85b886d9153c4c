"""The studio's JSON API as an OpenAPI document: what GET /openapi.json serves, and what tests/test_studio_fuzz.py
(schemathesis) sends requests from, as tests/test_serve_fuzz.py does for serve.

The routes read their bodies themselves (bounded, any JSON, errors in the studio's own `{"error": ...}` shape), so
FastAPI cannot describe them: they are written out here, every status each can answer included. The pages (HTML),
downloads and static files are not part of the API.
"""

from __future__ import annotations

from typing import Any

ERROR = {"$ref": "#/components/schemas/Error"}
NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1},
        "description": "a run's folder name in RUNS_DIR, exactly"}
FILENAME = {"name": "filename", "in": "query", "required": False, "schema": {"type": "string"}}
STUDIO_HEADER = {"name": "X-Studio", "in": "header", "required": True, "schema": {"type": "string", "enum": ["1"]},
                 "description": "every request that changes something sends it (a page of another site cannot)"}


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _error(why: str) -> dict:
    return {"description": why, "content": _json(ERROR)}


KEY_ERRORS = {"401": _error("the API key is missing or wrong (with --api-key)")}
CHANGE_ERRORS = {**KEY_ERRORS, "403": _error("the X-Studio: 1 header is missing"),
                 "400": _error("the request is not what the route takes (one line saying why)"),
                 "413": _error("the body is larger than the route takes")}
RUN_ERRORS = {"404": _error("no run of that name in RUNS_DIR")}
CONFIRM = {"409": {"description": "the user must confirm first: the grants the run's config asks for (asks), or the "
                                  "process Stop would signal (confirm)",
                   "content": _json({"$ref": "#/components/schemas/Confirm"})}}
JOB = {"type": "object", "required": ["job", "command"],
       "properties": {"job": {"type": "string"}, "command": {"type": "string"}}}
GRANT = {"type": "object", "description": "key -> the exact value the run's config asks for, as the page showed it",
         "additionalProperties": True}


def _ok(schema: dict, media: str = "application/json") -> dict:
    return {"200": {"description": "done", "content": {media: {"schema": schema}}}}


def _operation(summary: str, responses: dict, parameters: list | None = None, body: dict | None = None,
               media: str = "application/json", required: bool = True, changes: bool = True) -> dict:
    operation: dict[str, Any] = {"summary": summary, "responses": responses, "security": [{"bearer": []}]}
    params = list(parameters or []) + ([STUDIO_HEADER] if changes else [])
    if params:
        operation["parameters"] = params
    if body is not None:
        operation["requestBody"] = {"required": required, "content": {media: {"schema": body}}}
    return operation


def _object(properties: dict, required: tuple = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": True}


def _run_action(summary: str, body: dict | None, ok: dict, confirm: bool = False, media: str = "application/json",
                query: list | None = None, required: bool = True) -> dict:
    responses = {**ok, **CHANGE_ERRORS, **RUN_ERRORS, **(CONFIRM if confirm else {})}
    return {"post": _operation(summary, responses, [NAME, *(query or [])], body, media, required=required)}


def studio_openapi() -> dict:
    run_row = _object({"name": {"type": "string"}, "status": {"type": "string"}, "detail": {"type": "string"},
                       "model": {"type": "string"}, "stage": {"type": "string"}, "steps": {"type": "string"},
                       "result": {"type": "string"}, "started": {"type": "string"}, "activity": {"type": "string"}},
                      ("name", "status"))
    source = _object({"kind": {"type": "string", "enum": ["recipe", "path", "run", "upload", "blank"]},
                      "ref": {"type": "string"}}, ("kind",))
    form = _object({"source": source, "name": {"type": "string"},
                    "values": {"type": "object", "additionalProperties": {"type": "string"}},
                    "extra": {"type": "string"}, "nproc": {"type": "string"}}, ("source", "name"))
    checked = _object({"errors": {"type": "object", "additionalProperties": {"type": "string"}},
                       "general": {"type": "array", "items": {"type": "string"}}, "command": {"type": "string"},
                       "yaml": {"type": "string"}, "ok": {"type": "boolean"}, "output_dir": {"type": "string"}},
                      ("errors", "general", "command", "yaml", "ok", "output_dir"))
    paths = {
        "/health": {"get": {"summary": "the studio answers", "security": [],
                            "responses": _ok(_object({"ok": {"type": "boolean"}}, ("ok",)))}},
        "/api/runs": {"get": _operation("the runs of RUNS_DIR, newest first", {**_ok(_object(
            {"runs_dir": {"type": "string"}, "runs": {"type": "array", "items": run_row}}, ("runs_dir", "runs"))),
            **KEY_ERRORS}, changes=False)},
        "/api/runs/{name}/state": {"get": _operation("a run's state, the actions it offers, its header and jobs",
                                                     {**_ok(_object({"status": {"type": "string"},
                                                                     "detail": {"type": "string"},
                                                                     "versions": {"type": "object"},
                                                                     "can": {"type": "object"},
                                                                     "header_html": {"type": "string"},
                                                                     "jobs_html": {"type": "string"}},
                                                                    ("status", "can", "header_html", "jobs_html"))),
                                                      **KEY_ERRORS, **RUN_ERRORS}, [NAME], changes=False)},
        "/api/runs/{name}/curves": {"get": _operation("a run's charts (plotly figures)", {**_ok(_object(
            {"charts": {"type": "array", "items": _object({"id": {"type": "string"}, "figure": {"type": "object"}},
                                                          ("id", "figure"))}}, ("charts",))), **KEY_ERRORS,
            **RUN_ERRORS}, [NAME], changes=False)},
        "/api/check": {"post": _operation("the New run form checked: errors beside keys, the YAML and the command",
                                          {**_ok(checked), **CHANGE_ERRORS, "404": _error("no such run or upload")},
                                          body=form)},
        "/api/launch": {"post": _operation("write the form's config into a new run folder and start train there",
                                           {**_ok(_object({"run": {"type": "string"}, "url": {"type": "string"},
                                                           "command": {"type": "string"}}, ("run", "command"))),
                                            **CHANGE_ERRORS, "404": _error("no such run or upload")}, body=form)},
        "/api/uploads": {"post": _operation("store an uploaded YAML config for the form", {**_ok(_object(
            {"id": {"type": "string"}, "url": {"type": "string"}}, ("id", "url"))), **CHANGE_ERRORS},
            [FILENAME], body={"type": "string", "format": "binary"}, media="application/octet-stream")},
        "/api/runs/{name}/stop": _run_action(
            "SIGTERM to the run's training: at once when this studio started it, else once confirmed (confirm_pid)",
            _object({"confirm_pid": {"type": "integer"}}), _ok(_object({"stopping": {"type": "boolean"},
                                                                        "pid": {"type": "integer"}}, ("stopping",))),
            confirm=True, required=False),
        "/api/runs/{name}/resume": _run_action("continue the run from its newest checkpoint",
                                               _object({"grant": GRANT}), _ok(JOB), confirm=True, required=False),
        "/api/runs/{name}/eval": _run_action("steadytune eval on the run", _object(
            {"zero_shot": {"type": "boolean"}, "review_errors": {"type": "integer"}, "grant": GRANT}), _ok(JOB),
            confirm=True),
        "/api/runs/{name}/export": _run_action("steadytune export: the archive, the merged model or a GGUF file",
                                               _object({"kind": {"type": "string",
                                                                 "enum": ["archive", "merged", "gguf"]},
                                                        "quant": {"type": "string"}}, ("kind",)), _ok(JOB)),
        "/api/runs/{name}/predict": _run_action("steadytune predict over the uploaded rows (.jsonl, .json, .csv)",
                                                {"type": "string", "format": "binary"}, _ok(JOB),
                                                media="application/octet-stream", query=[FILENAME]),
        "/api/runs/{name}/chat": _run_action("one chat turn, streamed (the run, and the base model beside it)",
                                             _object({"text": {"type": "string"}, "history": {"type": "object"},
                                                      "side_by_side": {"type": "boolean"},
                                                      "greedy": {"type": "boolean"},
                                                      "max_new_tokens": {"type": "integer"},
                                                      "system": {"type": "string"}}, ("text",)),
                                             _ok({"type": "string"}, media="text/event-stream")),
        "/api/doctor": {
            "get": _operation("the newest doctor check's findings", {**_ok(_object(
                {"running": {"type": "boolean"}, "html": {"type": "string"},
                 "checked": {"type": ["number", "null"]}}, ("running", "html"))), **KEY_ERRORS}, changes=False),
            "post": _operation("start `steadytune doctor --json` (or find the one running)", {**_ok(_object(
                {"job": {"type": "string"}, "running": {"type": "boolean"}}, ("job", "running"))),
                **CHANGE_ERRORS})},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "steadytune studio", "version": "1",
                 "description": "The JSON routes the studio's pages call (docs/studio.md)."},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "the studio's --api-key / API_KEY, when it has one"}},
            "schemas": {
                "Error": _object({"error": {"type": "string"}}, ("error",)),
                "Confirm": _object({"error": {"type": "string"},
                                    "asks": {"type": "array", "items": _object(
                                        {"key": {"type": "string"}, "value": {}, "why": {"type": "string"},
                                         "override": {"type": "string"},
                                         "files": {"type": "array", "items": {"type": "string"}}},
                                        ("key", "value", "why", "override"))},
                                    "confirm": _object({"pid": {"type": "integer"}, "command": {"type": "string"},
                                                        "started": {"type": "string"}, "source": {"type": "string"}},
                                                       ("pid", "command"))}, ("error",)),
            },
        },
    }
