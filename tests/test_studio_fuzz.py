"""`steadytune studio`'s JSON API fuzzed by schemathesis from its own OpenAPI schema (issue 54), as
tests/test_serve_fuzz.py fuzzes serve: a real studio (uvicorn on loopback, with an API key) over a RUNS_DIR holding a
finished run reads its schema back from GET /openapi.json, and every operation in it gets generated requests, valid
and invalid, with the key and without. Every response must be documented there (status, media type, body against its
schema), none may be a 5xx, and invalid input must be refused (4xx).

Nothing the fuzzer sends may start a process or write outside RUNS_DIR: a valid request names the finished run half of
the time, whose actions are all refused (it has no adapter, it is not training, it has finished), and the form's
random configs are not complete ones; after each operation the runs folder holds the same runs (a launch that got
through would add one, and the test says so). Bounded as serve's: FUZZ_EXAMPLES per operation and mode (25 in CI,
derandomized; STEADYTUNE_FUZZ=long or STEADYTUNE_FUZZ_EXAMPLES=N for more), about 20 s on 2 CPU cores.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

schemathesis = pytest.importorskip("schemathesis", reason="the fuzz test needs schemathesis (pip install -e '.[dev]')")
pytest.importorskip("fastapi", reason="the studio needs FastAPI (pip install '.[studio]')")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.config import SchemathesisConfig  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from test_serve import serving  # noqa: E402

from steadytune.studio.app import StudioSettings, build_app  # noqa: E402
from steadytune.training.run_folder import MANIFEST  # noqa: E402

KEY = "studio-fuzz-key-0123"
AUTH = {"Authorization": f"Bearer {KEY}"}
LONG = os.environ.get("STEADYTUNE_FUZZ") == "long"
FUZZ_EXAMPLES = int(os.environ.get("STEADYTUNE_FUZZ_EXAMPLES", "400" if LONG else "25"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, derandomize=not LONG, database=None, deadline=timedelta(seconds=20),
                print_blob=True, phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck))
REFUSED = ["400", "401", "403", "404", "409", "413"]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, negative_data_rejection]
RUN = "done"

# Every operation of the schema (test_the_schema_lists_every_json_route holds this list to the app's routes) and
# whether its request has parts that can be made invalid.
OPERATIONS = {"GET /health": False, "GET /api/runs": False, "GET /api/runs/{name}/state": True,
              "GET /api/runs/{name}/curves": True, "POST /api/check": True, "POST /api/launch": True,
              "POST /api/uploads": True, "POST /api/runs/{name}/stop": True, "POST /api/runs/{name}/resume": True,
              "POST /api/runs/{name}/eval": True, "POST /api/runs/{name}/export": True,
              "POST /api/runs/{name}/predict": True, "POST /api/runs/{name}/chat": True, "GET /api/doctor": False}
MODES = [GenerationMode.POSITIVE.value, GenerationMode.NEGATIVE.value]


def aimed(case, name):
    if name is not None and case.path_parameters and "name" in case.path_parameters:
        case.path_parameters["name"] = name
    return case


def cases_for(operation, mode: str):
    if mode == GenerationMode.NEGATIVE.value:
        return operation.as_strategy(generation_mode=GenerationMode.NEGATIVE)
    return st.builds(aimed, operation.as_strategy(), st.sampled_from([RUN, None]))


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    """RUNS_DIR with one finished run (what the report reads; no adapter, so no action can start a process)."""
    runs = tmp_path_factory.mktemp("studio-fuzz") / "runs"
    folder = runs / RUN
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "loss": 2.0 / s}) for s in (1, 2, 3)),
                                          encoding="utf-8")
    (folder / "run_config.yaml").write_text(yaml.safe_dump({"learning_rate": 1e-4, "label_names": ["a", "b"]}),
                                            encoding="utf-8")
    (folder / "train_results.json").write_text(json.dumps({"global_step": 3}), encoding="utf-8")
    (folder / MANIFEST).write_text(json.dumps({"status": "finished", "files": ["metrics.jsonl"]}), encoding="utf-8")
    return runs


@pytest.fixture(scope="module")
def studio_url(runs_dir):
    with serving(build_app(StudioSettings(runs_dir=runs_dir, api_key=KEY, cwd=runs_dir.parent))) as base:
        yield base


@pytest.fixture(scope="module")
def api_schema(studio_url):
    config = SchemathesisConfig.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": REFUSED}}})
    return schemathesis.openapi.from_url(studio_url + "/openapi.json", config=config)


def test_the_schema_lists_every_json_route(api_schema, runs_dir):
    raw = api_schema.raw_schema
    listed = {f"{method.upper()} {path}" for path, methods in raw["paths"].items() for method in methods}
    assert listed == set(OPERATIONS) | {"POST /api/doctor"}   # the doctor's POST starts a process: not fuzzed
    app = build_app(StudioSettings(runs_dir=runs_dir))
    routes = {f"{method} {route.path}" for route in app.routes for method in getattr(route, "methods", ())
              if route.path.startswith("/api/") or route.path == "/health"}
    assert routes == listed
    for path, methods in raw["paths"].items():
        for method, operation in methods.items():
            if path != "/health":
                assert operation["security"] == [{"bearer": []}] and "401" in operation["responses"], (method, path)


@pytest.mark.parametrize("key", [True, False], ids=["key", "no-key"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_response_is_documented_and_none_is_a_server_error(api_schema, runs_dir, operation, mode, key):
    if mode != GenerationMode.POSITIVE.value and not OPERATIONS[operation]:
        pytest.skip("nothing in this operation's request can be made invalid")
    method, path = operation.split()
    before = sorted(p.name for p in runs_dir.iterdir() if not p.name.startswith("."))

    @given(case=cases_for(api_schema[path][method], mode))
    @FUZZ
    def fuzz(case):
        response = case.call_and_validate(headers=AUTH if key else None, checks=CHECKS, timeout=30)
        if path != "/health" and not key:   # nothing without the key
            assert response.status_code == 401, response.text

    fuzz()
    assert sorted(p.name for p in runs_dir.iterdir() if not p.name.startswith(".")) == before, "a fuzzed request made a run"
    assert not any((runs_dir / RUN / "studio" / "jobs").glob("*.json")), "a fuzzed request started a job"
