"""The HTTP side of `steadytune serve` (FastAPI): OpenAI-compatible routes over the batching engine.

Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions (server-sent events when `stream`),
POST /v1/classify (classification runs), GET /health, GET /metrics; GET /openapi.json describes them all, every
status and body a route can answer with (tests/test_serve_fuzz.py holds the server to it with schemathesis).

What a request can and cannot do: its `model` only picks among the names fixed at start (nothing in a request
becomes a path); its size, prompt length, max_tokens and n are bounded (`Limits`); with an API key set, every
/v1 route and /metrics needs `Authorization: Bearer <key>` (compared in constant time); CORS is off unless
origins are named; every error is `{"error": {"message", "type", "param", "code"}}` and never carries a traceback
or a local path (those go to the server log).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from typing import Any, AsyncIterator, Callable, Optional

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException

from steadytune.data.encode import encode_classification_prompt
from steadytune.errors import UserError
from steadytune.model.decode.sampling import SamplingParams
from steadytune.serve import protocol as p
from steadytune.serve.engine import Delta, EngineError, Failed, Finished, Generation, QueueFull
from steadytune.serve.limits import ServeSettings
from steadytune.serve.media import ImageRefused, generate_with_images, has_images, request_images
from steadytune.serve.metrics import CONTENT_TYPE, ServeMetrics
from steadytune.data.control_text import ClientText, UnsafeText

logger = logging.getLogger("steadytune.serve")


class ApiError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error", code: Optional[str] = None,
                 param: Optional[str] = None, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param
        self.headers = headers or {}


def error_body(message: str, type: str, code: Optional[str] = None, param: Optional[str] = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(error_body(e.message, e.type, e.code, e.param), status_code=e.status, headers=e.headers)


# What each error status means, as the OpenAPI schema documents it (every one has the ErrorResponse body).
ERRORS = {
    400: "the request is malformed, asks for an option this server does not implement, or exceeds a limit",
    401: "the API key is missing or wrong",
    404: "no model of that name is served here",
    413: "the request body is larger than --max-body-bytes",
    500: "generating failed (this request only: the server log has the details)",
    503: "the queue is full (retry after Retry-After seconds) or the engine is not running",
}
STREAMED = (p.ChatCompletionChunk, p.Completion, p.ErrorResponse)  # what a stream's events carry


def stream(chunk: str) -> dict:
    """The 200 of a route that streams when the request sets `stream`: server-sent events, each `data:` a JSON
    `chunk` (or an error, when generating fails midway), the last one `[DONE]`. `itemSchema` (OpenAPI 3.2, read by
    schemathesis in 3.1 too) describes one event."""
    payload = {"anyOf": [{"$ref": f"#/components/schemas/{chunk}"}, {"$ref": "#/components/schemas/ErrorResponse"}]}
    data = {"anyOf": [{"const": "[DONE]"}, {"contentMediaType": "application/json", "contentSchema": payload}]}
    return {"text/event-stream": {"itemSchema": {"type": "object", "required": ["data"],
                                                 "properties": {"data": data}}}}


def documented(*statuses: int, ok: Optional[dict] = None) -> dict:
    """`responses=` for a route: its error statuses (the OpenAI error body) and, when given, its 200's other media
    types."""
    responses: dict = {status: {"model": p.ErrorResponse, "description": ERRORS[status]} for status in statuses}
    if ok is not None:
        responses[200] = {"content": ok}
    return responses


def finish_schema(schema: dict) -> dict:
    """FastAPI's schema, completed: FastAPI documents 422 with its own body on every route that takes input, but this
    server answers invalid input with 400 in the OpenAI shape (`_validation_error`), as the routes document; the
    models a stream's events carry are added to the components its `itemSchema`s refer to."""
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            operation.get("responses", {}).pop("422", None)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    _, definitions = models_json_schema([(model, "serialization") for model in STREAMED],
                                        ref_template="#/components/schemas/{model}")
    for name, definition in definitions.get("$defs", {}).items():
        components.setdefault(name, definition)
    return schema


# ---------------------------------------------------------------------------------------------------------
# ASGI middleware: body size and request metrics (pure ASGI, so streamed responses are timed to their end)
# ---------------------------------------------------------------------------------------------------------

class BodySizeLimit:
    """Reads a request body up to `limit` bytes before the app sees it; a larger one gets 413 without being read
    further (a declared Content-Length over the limit is refused before reading anything)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        too_large = error_response(ApiError(413, f"request body larger than {self.limit} bytes",
                                            code="request_too_large"))
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await too_large(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await too_large(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # afterwards: the disconnect notice, when it comes

        await self.app(scope, replay, send)


class RequestMetrics:
    def __init__(self, app, metrics: ServeMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.observe(scope["path"], status, time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------------------
# The application
# ---------------------------------------------------------------------------------------------------------

def build_app(engine: Any, loaded: Any, settings: ServeSettings) -> FastAPI:
    """The FastAPI app over `engine` (BatchingEngine or the vLLM engine) and `loaded` (loading.Loaded)."""
    limits = settings.limits
    image_limits = settings.images
    tokenizer = loaded.tokenizer
    served = loaded.served
    prompt_limit = min(limits.max_prompt_tokens, loaded.context_length - 1)
    end_ids = _end_token_ids(loaded.model, tokenizer)
    chat_stops = {name: _chat_stop(entry.template, tokenizer) for name, entry in served.items()}
    client_text = {name: ClientText(tokenizer, entry.template, settings.strict_special_tokens)
                   for name, entry in served.items()}
    created = p.now()
    metrics = ServeMetrics(engine)
    engine.on_first_token = metrics.first_token.observe

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        engine.start()
        try:
            yield
        finally:
            engine.stop()

    app = FastAPI(title="steadytune serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.engine, app.state.metrics, app.state.loaded = engine, metrics, loaded

    def openapi() -> dict:  # FastAPI's own hook for a schema of one's own: its schema, completed (finish_schema)
        if app.openapi_schema is None:
            app.openapi_schema = finish_schema(get_openapi(title=app.title, version=app.version, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi

    # --- errors: always the OpenAI shape, never a traceback --------------------------------------------------
    @app.exception_handler(ApiError)
    async def on_api_error(_request, e: ApiError):
        return error_response(e)

    async def refused(request: Request, error: ApiError) -> JSONResponse:
        # FastAPI reads the body before the routes' dependencies run: the key is checked first here, so a client
        # without it learns nothing from how its body is judged
        if key is not None and _needs_key(request.url.path) and not key_matches(await bearer(request)):
            return error_response(unauthorized())
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, e: RequestValidationError):
        return await refused(request, _validation_error(e))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException):
        if e.status_code == 400:  # FastAPI could not read the body (not UTF-8, not JSON)
            return await refused(request, ApiError(400, "the request body is not valid JSON"))
        message = {404: "no such route", 405: "method not allowed"}.get(e.status_code, "request failed")
        return error_response(ApiError(e.status_code, message, code=str(e.status_code)))

    @app.exception_handler(Exception)
    async def on_crash(_request, e: Exception):
        logger.exception("serve: unhandled error")
        return error_response(ApiError(500, "internal server error (the server log has the details)",
                                       type="server_error"))

    # --- authentication ---------------------------------------------------------------------------------------
    key = settings.api_key.encode() if settings.api_key else None
    bearer = HTTPBearer(auto_error=False, description="the server's API key (--api-key / API_KEY)")

    def key_matches(credentials: Optional[HTTPAuthorizationCredentials]) -> bool:
        # compare_digest: the time taken does not depend on how much of the key matched
        return credentials is not None and hmac.compare_digest(credentials.credentials.strip().encode(), key)

    def unauthorized() -> ApiError:
        return ApiError(401, "invalid or missing API key (send Authorization: Bearer <key>)",
                        type="authentication_error", code="invalid_api_key")

    def authorized(credentials: Optional[HTTPAuthorizationCredentials] = Depends(bearer)) -> None:
        if not key_matches(credentials):
            raise unauthorized()

    # Only with a key do the routes ask for one (and only then does the schema say so).
    guarded = [Depends(authorized)] if key is not None else []
    auth_errors = (401,) if key is not None else ()

    def lookup(name: str):
        entry = served.get(name)
        if entry is None:
            shown = name if len(name) <= 64 else name[:64] + "..."
            raise ApiError(404, f"model {shown!r} is not served here; available: {', '.join(served)}",
                           code="model_not_found", param="model")
        return entry

    # --- routes ------------------------------------------------------------------------------------------------
    generating = (400, *auth_errors, 404, 413, 500, 503)

    @app.get("/health", response_model=p.Health, responses=documented(503))
    async def health():
        if not engine.healthy:
            raise ApiError(503, "the engine is not running", type="server_error", code="engine_down")
        return p.Health(running=engine.running, queued=engine.queue_depth)

    @app.get("/metrics", dependencies=guarded, response_class=Response,
             responses=documented(*auth_errors, ok={"text/plain": {"schema": {"type": "string"}}}))
    async def prometheus():
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models", dependencies=guarded, response_model=p.ModelList, responses=documented(*auth_errors))
    async def list_models():
        return p.ModelList(data=[p.ModelCard(id=name, created=created) for name in served])

    @app.get("/v1/models/{name:path}", dependencies=guarded, response_model=p.ModelCard,
             responses=documented(*auth_errors, 404))
    async def get_model(name: str):
        lookup(name)
        return p.ModelCard(id=name, created=created)

    @app.post("/v1/chat/completions", dependencies=guarded, response_model=p.ChatCompletion,
              responses=documented(*generating, ok=stream("ChatCompletionChunk")))
    async def chat_completions(body: p.ChatCompletionRequest, request: Request):
        entry = lookup(body.model)
        _refuse_unsupported(body)
        if has_images(body.messages):   # image_url parts: a vision-language model answers with transformers' generate
            return await _chat_with_images(body, entry)
        text = client_text[body.model]
        prompt_ids = _encode_client_text(text, _render_chat(entry.template, body.messages, text.mark), "messages")
        stop_ids, hidden_stops = chat_stops[body.model]
        generations = _generations([prompt_ids], entry, body, stop_ids | end_ids, hidden_stops)
        handle = _submit(generations)
        meta = dict(id=p.new_id("chatcmpl"), created=p.now(), model=body.model)
        if body.stream:
            return _sse(_stream_chat(handle, meta, len(prompt_ids), body.include_usage))
        texts, reasons, tokens = await _collect(handle, request)
        choices = [p.ChatChoice(index=i, message=p.AssistantMessage(content=texts[i]), finish_reason=reasons[i])
                   for i in range(len(texts))]
        return p.ChatCompletion(**meta, choices=choices, usage=_usage(len(prompt_ids), tokens))

    @app.post("/v1/completions", dependencies=guarded, response_model=p.Completion,
              responses=documented(*generating, ok=stream("Completion")))
    async def completions(body: p.CompletionRequest, request: Request):
        entry = lookup(body.model)
        _refuse_unsupported(body)
        if not body.prompts:
            raise ApiError(400, "prompt is empty", param="prompt")
        prompts = [_encode(tokenizer, text, add_special_tokens=True) for text in body.prompts]
        generations = _generations(prompts, entry, body, end_ids, [])
        handle = _submit(generations)
        meta = dict(id=p.new_id("cmpl"), created=p.now(), model=body.model)
        prompt_tokens = sum(map(len, prompts))
        if body.stream:
            return _sse(_stream_completion(handle, meta, prompt_tokens, body.include_usage))
        texts, reasons, tokens = await _collect(handle, request)
        choices = [p.CompletionChoice(index=i, text=texts[i], finish_reason=reasons[i]) for i in range(len(texts))]
        return p.Completion(**meta, choices=choices, usage=_usage(prompt_tokens, tokens))

    @app.post("/v1/classify", dependencies=guarded, response_model=p.ClassifyResponse,
              responses=documented(*generating))
    async def classify(body: p.ClassifyRequest):
        entry = lookup(body.model)
        if not entry.label_names:
            raise ApiError(400, f"model {body.model!r} is not a classification run (its config has no "
                                "label_names and prompt_template)", param="model")
        if not hasattr(engine, "classify"):
            raise ApiError(400, "classification needs infer_backend: huggingface", param="model")
        texts = body.texts
        if not texts or len(texts) > limits.max_classify_inputs:
            raise ApiError(400, f"input: give 1 to {limits.max_classify_inputs} texts (got {len(texts)})",
                           param="input")
        encoder = client_text[body.model]
        prompts = [encode_classification_prompt(entry.template, tokenizer, entry.prompt_template, text,
                                                min(entry.max_prompt_len, prompt_limit),  # cut, as `eval` cuts
                                                _encode_client_text(encoder, encoder.mark(text), "input"))
                   for text in texts]
        try:
            scores = await engine.classify(entry.adapter, prompts, entry.label_targets)
        except QueueFull as e:
            raise _busy(e) from None
        except EngineError as e:
            raise ApiError(500, str(e), type="server_error") from None
        probabilities = scores.softmax(dim=1)
        data = [p.Classification(index=i, label=entry.label_names[int(row.argmax())],
                                 probabilities={name: round(float(v), 6) for name, v in zip(entry.label_names, row)})
                for i, row in enumerate(probabilities)]
        tokens = sum(map(len, prompts))
        return p.ClassifyResponse(id=p.new_id("cls"), model=body.model, data=data,
                                  usage=p.Usage(prompt_tokens=tokens, total_tokens=tokens))

    async def _chat_with_images(body: p.ChatCompletionRequest, entry) -> Any:
        """A chat request with image parts (serve/media.py): checked, encoded as training encoded its rows, and
        generated on the engine's worker thread between decode steps."""
        if entry.media is None:
            raise ApiError(400, f"model {body.model!r} takes no images (not a vision-language model)",
                           param="messages", code="images_not_supported")
        if body.n != 1:
            raise ApiError(400, "a request with images takes n = 1", param="n")
        try:
            turns, system, images = request_images(body.messages, image_limits)
        except ImageRefused as e:
            raise ApiError(400, f"{e.param}: {e}", param=e.param, code="invalid_image") from None
        control = client_text[body.model]
        if control.strict and any(control.mark(t["content"]) != t["content"] for t in turns):
            raise ApiError(400, "messages: a message with images may not hold the model's control tokens",
                           param="messages")
        try:
            prompt = entry.media.encode(turns, system, images, "messages")
        except UserError as e:
            raise ApiError(400, str(e), param="messages") from None
        ids = prompt.ids
        if len(ids) > prompt_limit:
            raise ApiError(400, f"the prompt has {len(ids)} tokens with its images; this server allows at most "
                                f"{prompt_limit}", code="context_length_exceeded", param="messages")
        requested = body.requested_max_tokens
        if requested is not None and requested > limits.max_tokens:
            raise ApiError(400, f"max_tokens is {requested}; this server allows at most {limits.max_tokens}",
                           param="max_tokens")
        room = loaded.context_length - len(ids)
        max_tokens = min(requested if requested is not None else entry.default_max_tokens, limits.max_tokens, room)
        stop_ids, hidden_stops = chat_stops[body.model]

        def work():
            return generate_with_images(loaded.model, tokenizer, ids, prompt.pixels, max_tokens, body.temperature,
                                        body.top_p, body.top_k, body.seed, stop_ids | end_ids,
                                        list(body.stop or ()) + list(hidden_stops))

        try:
            answer = await engine.run_exclusive(entry.adapter, work)
        except QueueFull as e:
            raise _busy(e) from None
        except EngineError as e:
            raise ApiError(500, str(e), type="server_error", code="generation_failed") from None
        meta = dict(id=p.new_id("chatcmpl"), created=p.now(), model=body.model)
        usage = _usage(len(ids), answer.completion_tokens)
        if body.stream:
            return _sse(_stream_whole(meta, answer, usage if body.include_usage else None))
        choice = p.ChatChoice(index=0, message=p.AssistantMessage(content=answer.text),
                              finish_reason=answer.finish_reason)
        return p.ChatCompletion(**meta, choices=[choice], usage=usage)

    # --- helpers that close over the limits -----------------------------------------------------------------------
    def _generations(prompts: list, entry, body, stop_ids: frozenset, hidden_stops: list) -> list[Generation]:
        prompt_param = "messages" if isinstance(body, p.ChatCompletionRequest) else "prompt"
        total = len(prompts) * body.n
        if total > limits.max_n:
            what = "n" if len(prompts) == 1 else "n x prompts"
            raise ApiError(400, f"{what} is {total}; this server allows at most {limits.max_n} sequences per "
                                "request", param="n")
        requested = body.requested_max_tokens
        if requested is not None and requested > limits.max_tokens:
            raise ApiError(400, f"max_tokens is {requested}; this server allows at most {limits.max_tokens}",
                           param="max_tokens")
        generations = []
        for k, ids in enumerate(prompts):
            if not ids:
                raise ApiError(400, "the prompt has no tokens", param="prompt")
            if len(ids) > prompt_limit:
                raise ApiError(400, f"the prompt has {len(ids)} tokens; this server allows at most {prompt_limit}",
                               code="context_length_exceeded", param=prompt_param)
            room = loaded.context_length - len(ids)
            if requested is not None and requested > room:
                raise ApiError(400, f"prompt ({len(ids)} tokens) + max_tokens ({requested}) exceeds the model's "
                                    f"context of {loaded.context_length} tokens", code="context_length_exceeded",
                               param="max_tokens")
            max_tokens = requested if requested is not None else min(entry.default_max_tokens, limits.max_tokens, room)
            for j in range(body.n):
                seed = None if body.seed is None else (body.seed + j) % (p.MAX_SEED + 1)
                params = SamplingParams(max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p,
                                        top_k=body.top_k, min_p=body.min_p,
                                        repetition_penalty=body.repetition_penalty, seed=seed, stop=tuple(body.stop or ()) + tuple(hidden_stops),
                                        stop_token_ids=stop_ids, ignore_eos=body.ignore_eos)
                generations.append(Generation(k * body.n + j, ids, entry.adapter, params))
        return generations

    def _submit(generations: list[Generation]):
        try:
            return engine.submit(generations, asyncio.get_running_loop())
        except QueueFull as e:
            raise _busy(e) from None

    def _busy(e: QueueFull) -> ApiError:
        return ApiError(503, str(e), type="server_error", code="queue_full",
                        headers={"Retry-After": str(settings.retry_after_s or e.retry_after)})

    app.add_middleware(BodySizeLimit, limit=limits.max_body_bytes)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app


# ---------------------------------------------------------------------------------------------------------
# Request -> prompt
# ---------------------------------------------------------------------------------------------------------

def _needs_key(path: str) -> bool:
    """The routes that take the API key when one is set: /v1/... and /metrics (not /health nor the schema)."""
    return path.startswith("/v1/") or path == "/metrics"


def _refuse_unsupported(body) -> None:
    option = body.unsupported()
    if option:
        raise ApiError(400, f"{option} is not supported by this server", param=option, code="unsupported_option")


def _render_chat(template: Any, messages: list, mark: Callable[[str], str]) -> str:
    """OpenAI messages -> the run's chat template, ending where the assistant's answer starts; `mark` marks the
    control tokens in each message's text (data/control_text.ClientText)."""
    system, turns = [], []
    for m in messages:
        if m.role in ("system", "developer"):
            system.append(mark(m.text()))
        else:
            turns.append({"role": {"tool": "observation"}.get(m.role, m.role), "content": mark(m.text())})
    if not turns or turns[-1]["role"] == "assistant":
        raise ApiError(400, "the last message must be the user's (or a tool result)", param="messages")
    try:
        return template.render_generation_prompt(turns, "\n\n".join(system) or None)
    except Exception as e:  # a tokenizer's Jinja chat template raising on these messages (e.g. role order)
        from jinja2 import TemplateError
        if isinstance(e, TemplateError):
            raise ApiError(400, f"the model's chat template refuses these messages: {e}", param="messages") from None
        raise


def _encode_client_text(encoder: ClientText, text: str, param: str) -> list[int]:
    try:
        return encoder.encode(text)
    except UnsafeText as e:
        raise ApiError(400, f"{param}: {e}; it cannot be sent as text to this model", param=param) from None


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    return tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"] if text else []


def _end_token_ids(model: Any, tokenizer: Any) -> frozenset:
    """eos of the tokenizer and of the generation config (Gemma lists <end_of_turn> there too)."""
    ids = {tokenizer.eos_token_id}
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(config_eos if isinstance(config_eos, (list, tuple)) else [config_eos])
    return frozenset(i for i in ids if i is not None)


def _chat_stop(template: Any, tokenizer: Any) -> tuple[frozenset, list]:
    """The template's end-of-answer text as a token id when it is one token, else as a (hidden) stop string."""
    ids = _encode(tokenizer, template.stop, add_special_tokens=False)
    if len(ids) == 1:
        return frozenset(ids), []
    return frozenset(), [template.stop] if template.stop else []


def _validation_error(e: RequestValidationError) -> ApiError:
    """pydantic's errors as one line, naming fields; the offending values are not echoed back. A value refused by a
    validator (a lone surrogate in a text) is the error to report: the other members of a union it did not match are
    noise."""
    parts, param = [], None
    errors = e.errors()
    if any(error.get("type") == "json_invalid" for error in errors):
        return ApiError(400, "the request body is not valid JSON")
    refused = [error for error in errors if error.get("type") == "value_error"]
    for error in (refused or errors)[:5]:
        location = ".".join(str(x) for x in error.get("loc", ()) if _is_field(x))
        if not location and error.get("type") in ("model_attributes_type", "dict_type"):
            return ApiError(400, "the request body must be a JSON object (Content-Type: application/json)")
        param = param or location or None
        parts.append(f"{location}: {error.get('msg')}" if location else str(error.get("msg")))
    return ApiError(400, "; ".join(parts) or "invalid request", param=param)


# ---------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------

def _is_field(part: Any) -> bool:
    """A part of pydantic's error location that names a field or an index (not "body", nor a union member's type
    such as "str" or "list[TextPart]")."""
    return isinstance(part, int) or (part.isidentifier() and part not in ("body", "str", "list", "dict", "int", "float",
                                                                          "bool"))


def _usage(prompt_tokens: int, completion_tokens: int) -> p.Usage:
    return p.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   total_tokens=prompt_tokens + completion_tokens)


async def _collect(handle, request: Request) -> tuple[list[str], list[str], int]:
    """Every choice's text and finish reason; a client that disconnects meanwhile frees its sequences."""
    texts, reasons = [""] * handle.choices, [""] * handle.choices
    tokens, finished = 0, 0
    try:
        while finished < handle.choices:
            try:
                event = await asyncio.wait_for(handle.events.get(), timeout=1.0)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    raise ApiError(499, "client disconnected") from None
                continue
            if isinstance(event, Delta):
                texts[event.index] += event.text
            elif isinstance(event, Finished):
                reasons[event.index] = event.reason
                tokens += event.completion_tokens
                finished += 1
            elif isinstance(event, Failed):
                raise ApiError(500, event.message, type="server_error")
    finally:
        handle.cancel()  # no-op for finished sequences; frees the rest
    return texts, reasons, tokens


def _sse(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _data(obj: Any) -> str:
    payload = obj.model_dump_json() if hasattr(obj, "model_dump_json") else json.dumps(obj, ensure_ascii=False)
    return f"data: {payload}\n\n"


async def _events(handle) -> AsyncIterator[Any]:
    """The request's events until every choice finished; cancels the rest when the consumer stops early."""
    finished = 0
    try:
        while finished < handle.choices:
            event = await handle.events.get()
            yield event
            if isinstance(event, Failed):
                return
            finished += isinstance(event, Finished)
    finally:
        handle.cancel()


async def _stream_chat(handle, meta: dict, prompt_tokens: int, include_usage: bool) -> AsyncIterator[str]:
    def chunk(index: int, delta: dict, reason: Optional[str] = None) -> str:
        return _data(p.ChatCompletionChunk(**meta, choices=[p.ChunkChoice(index=index, delta=delta,
                                                                           finish_reason=reason)]))

    for i in range(handle.choices):  # the role comes first, in a delta of its own, as OpenAI sends it
        yield chunk(i, {"role": "assistant", "content": ""})
    tokens = 0
    async for event in _events(handle):
        if isinstance(event, Delta):
            yield chunk(event.index, {"content": event.text})
        elif isinstance(event, Finished):
            tokens += event.completion_tokens
            yield chunk(event.index, {}, event.reason)
        elif isinstance(event, Failed):
            yield _data(error_body(event.message, "server_error"))
    if include_usage:
        yield _data(p.ChatCompletionChunk(**meta, choices=[], usage=_usage(prompt_tokens, tokens)))
    yield "data: [DONE]\n\n"


async def _stream_whole(meta: dict, answer, usage: Optional[p.Usage]) -> AsyncIterator[str]:
    """A whole answer (a request with images) as the chunks a stream sends: the role, the text, the finish, the usage
    when asked, [DONE]."""
    def chunk(delta: dict, reason: Optional[str] = None) -> str:
        return _data(p.ChatCompletionChunk(**meta, choices=[p.ChunkChoice(index=0, delta=delta,
                                                                          finish_reason=reason)]))

    yield chunk({"role": "assistant", "content": ""})
    if answer.text:
        yield chunk({"content": answer.text})
    yield chunk({}, answer.finish_reason)
    if usage is not None:
        yield _data(p.ChatCompletionChunk(**meta, choices=[], usage=usage))
    yield "data: [DONE]\n\n"


async def _stream_completion(handle, meta: dict, prompt_tokens: int, include_usage: bool) -> AsyncIterator[str]:
    tokens = 0
    async for event in _events(handle):
        if isinstance(event, Delta):
            yield _data(p.Completion(**meta, choices=[p.CompletionChoice(index=event.index, text=event.text)]))
        elif isinstance(event, Finished):
            tokens += event.completion_tokens
            yield _data(p.Completion(**meta, choices=[p.CompletionChoice(index=event.index, text="",
                                                                          finish_reason=event.reason)]))
        elif isinstance(event, Failed):
            yield _data(error_body(event.message, "server_error"))
    if include_usage:
        yield _data(p.Completion(**meta, choices=[], usage=_usage(prompt_tokens, tokens)))
    yield "data: [DONE]\n\n"
