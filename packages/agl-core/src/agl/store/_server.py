"""The store over HTTP: a FastAPI app in front of any store, as ``agl store serve`` runs it.

Routes (JSON unless noted; the OpenAPI spec is at ``/openapi.json``, docs at ``/docs``):

==========================================================  ====================================
``POST /v1/rollouts/enqueue``                               enqueue a batch of rollout requests
``POST /v1/rollouts/dequeue``                               claim rollouts (long poll: ``wait``)
``POST /v1/rollouts/wait``                                  wait for rollouts to finish
``GET  /v1/rollouts``                                       query (``status``, ``mode``, paging)
``GET  /v1/rollouts/{id}``                                  one rollout
``POST /v1/rollouts/{id}/cancel``                           cancel a rollout
``GET  /v1/rollouts/{id}/attempts``                         a rollout's attempts
``POST /v1/rollouts/{id}/attempts/{attempt_id}``            report status / heartbeat
``POST /v1/spans``                                          add a batch of spans
``GET  /v1/rollouts/{id}/spans``                            a rollout's spans (``attempt_id``)
``POST /v1/resources`` / ``GET /v1/resources/latest|{id}``  publish / fetch resources
``GET  /v1/workers``, ``GET /v1/statistics``, ``GET /health``
``POST /v1/traces``                                         OTLP/HTTP trace export (protobuf/JSON)
==========================================================  ====================================

Every error is a JSON body ``{"error": {"type", "message", "field", "value"}}`` with a 4xx status
for the client's mistakes (400 malformed body, 401 missing token, 404 unknown id, 409 conflict,
413 body too large, 422 invalid field) and 500 only for the server's own failures, without a
traceback. With a token, every request must carry ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from agl._errors import AglError, InvalidInputError, NotFoundError
from agl._resources import ResourcesUpdate
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutMode,
    RolloutPage,
    RolloutRequest,
    RolloutStatus,
    Worker,
)
from agl._server_auth import BearerTokenMiddleware
from agl._spans import Span
from agl.store._base import Store, StoreStatistics
from agl.store._checks import MAX_POLL_SECONDS

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024

_JSON = "application/json"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# --- request and response bodies --------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnqueueBody(_Body):
    requests: list[RolloutRequest]


class RolloutsBody(_Body):
    rollouts: list[Rollout]


_POLL = (
    f"Seconds to hold the request at most (a long poll), at most {MAX_POLL_SECONDS:g}: "
    "wait longer by asking again."
)


class DequeueBody(_Body):
    limit: int = Field(default=1, ge=1, le=10_000)
    worker_id: str | None = None
    wait: float = Field(default=0.0, ge=0, le=MAX_POLL_SECONDS, description=_POLL)


class ClaimsBody(_Body):
    claims: list[Claim]


class WaitBody(_Body):
    rollout_ids: list[str]
    timeout: float = Field(ge=0, le=MAX_POLL_SECONDS, description=_POLL)


class AttemptUpdateBody(_Body):
    status: AttemptStatus | None = None
    heartbeat: bool = True
    reason: str | None = None


class AttemptsBody(_Body):
    attempts: list[Attempt]


class SpansBody(_Body):
    spans: list[Span]


class SequenceIdsBody(_Body):
    sequence_ids: list[int]


class ResourceJson(BaseModel):
    """One resource as JSON: a ``type`` tag (``llm``, ``prompt_template``, or a plugin's) and
    that type's fields. A type this server does not know is kept as it is."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1)


class ResourcesBody(_Body):
    resources: dict[Annotated[str, Field(min_length=1)], ResourceJson] = Field(
        description="name (not empty) -> resource, by its type tag"
    )
    resources_id: str | None = None


class WorkersBody(_Body):
    workers: list[Worker]


class ErrorBody(_Body):
    error: dict[str, Any]


# --- the app ----------------------------------------------------------------------------------


def create_app(
    store: Store,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    close_store: bool = False,
) -> FastAPI:
    """Build the HTTP app serving ``store``.

    Args:
        store: The store to serve; any backend.
        token: If set, every request needs ``Authorization: Bearer <token>``.
        max_body_bytes: Larger request bodies get 413.
        close_store: Close ``store`` when the app shuts down.
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if close_store:
            await store.close()

    app = FastAPI(
        title="agl store",
        version="1",
        description="Rollouts, attempts, spans and resources of an agl run.",
        lifespan=lifespan,
        responses={"4XX": {"model": ErrorBody}},
    )
    _install_error_handlers(app)

    @app.get("/health", tags=["meta"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/rollouts/enqueue", tags=["rollouts"])
    async def enqueue(body: EnqueueBody) -> RolloutsBody:
        return RolloutsBody(rollouts=await store.enqueue_rollouts(body.requests))

    @app.post("/v1/rollouts/dequeue", tags=["rollouts"])
    async def dequeue(body: DequeueBody) -> ClaimsBody:
        claims = await store.dequeue_rollouts(body.limit, body.worker_id, body.wait)
        return ClaimsBody(claims=claims)

    @app.post("/v1/rollouts/wait", tags=["rollouts"])
    async def wait(body: WaitBody) -> RolloutsBody:
        return RolloutsBody(rollouts=await store.wait_for_rollouts(body.rollout_ids, body.timeout))

    @app.get("/v1/rollouts", tags=["rollouts"])
    async def query_rollouts(
        status: Annotated[list[RolloutStatus] | None, Query()] = None,
        mode: RolloutMode | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> RolloutPage:
        return await store.query_rollouts(status, mode, limit, offset)

    @app.get("/v1/rollouts/{rollout_id}", tags=["rollouts"])
    async def get_rollout(rollout_id: str) -> Rollout:
        return await store.get_rollout(rollout_id)

    @app.post("/v1/rollouts/{rollout_id}/cancel", tags=["rollouts"])
    async def cancel(rollout_id: str) -> Rollout:
        return await store.cancel_rollout(rollout_id)

    @app.get("/v1/rollouts/{rollout_id}/attempts", tags=["attempts"])
    async def attempts(rollout_id: str) -> AttemptsBody:
        return AttemptsBody(attempts=await store.query_attempts(rollout_id))

    @app.post("/v1/rollouts/{rollout_id}/attempts/{attempt_id}", tags=["attempts"])
    async def update_attempt(rollout_id: str, attempt_id: str, body: AttemptUpdateBody) -> Attempt:
        return await store.update_attempt(
            rollout_id, attempt_id, body.status, body.heartbeat, body.reason
        )

    async def add_spans(request: Request) -> Response:
        # Parsed by hand: validating the raw bytes in one pass is several times faster than
        # FastAPI's decode-then-validate, and span batches are the store's bulk traffic.
        body = _parse(SpansBody, await request.body())
        ids = await store.add_spans(body.spans)
        return Response(SequenceIdsBody(sequence_ids=ids).model_dump_json(), media_type=_JSON)

    app.router.add_api_route(
        "/v1/spans",
        add_spans,
        methods=["POST"],
        tags=["spans"],
        response_model=SequenceIdsBody,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/SpansBody"}}
                },
            }
        },
        route_class_override=_PlainRoute,
    )

    @app.get("/v1/rollouts/{rollout_id}/spans", tags=["spans"])
    async def query_spans(rollout_id: str, attempt_id: str | None = None) -> SpansBody:
        return SpansBody(spans=await store.query_spans(rollout_id, attempt_id))

    @app.post("/v1/resources", tags=["resources"])
    async def add_resources(body: ResourcesBody) -> ResourcesUpdate:
        parsed = _parse_resources({k: v.model_dump() for k, v in body.resources.items()})
        return await store.add_resources(parsed, body.resources_id)

    @app.get("/v1/resources/latest", tags=["resources"])
    async def latest_resources() -> ResourcesUpdate | None:
        return await store.get_resources(None)

    @app.get("/v1/resources/{resources_id}", tags=["resources"])
    async def get_resources(resources_id: str) -> ResourcesUpdate | None:
        return await store.get_resources(resources_id)

    @app.get("/v1/workers", tags=["meta"])
    async def workers() -> WorkersBody:
        return WorkersBody(workers=await store.query_workers())

    @app.get("/v1/statistics", tags=["meta"])
    async def statistics() -> StoreStatistics:
        return await store.statistics()

    @app.post(
        "/v1/traces",
        tags=["otlp"],
        summary="OTLP/HTTP trace export",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                    "application/json": {"schema": {"type": "object"}},
                },
            }
        },
    )
    async def otlp_traces(request: Request) -> Response:
        from agl.store import _otlp as otlp

        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            spans = otlp.decode_traces(await request.body(), content_type)
            if spans:
                await store.add_spans(spans)
        except (InvalidInputError, NotFoundError) as exc:
            # OTLP/HTTP says bad data is a 400 (and that senders must not retry it).
            raise _MalformedBody(exc.message, field=exc.field, value=exc.value) from None
        content, media_type = otlp.encode_response(content_type)
        return Response(content=content, media_type=media_type)

    app.add_middleware(_UnexpectedErrorMiddleware)
    app.add_middleware(_BodyLimitMiddleware, max_body_bytes=max_body_bytes)
    if token:
        app.add_middleware(BearerTokenMiddleware, token=token, refusal=_unauthorized)
    return app


class _PlainRoute(APIRoute):
    """A route whose endpoint takes the request and returns the response, as in Starlette.

    FastAPI documents it from the route's declaration as usual but serves it without its
    per-request machinery (dependency solving, response-model validation and encoding): about
    a quarter of the server's time for a single-span request.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint


def _parse(model: type[M], raw: bytes) -> M:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise _validation_error(exc.errors(include_url=False), prefix=()) from None


def _parse_resources(raw: dict[str, Any]) -> dict[str, Any]:
    try:
        return ResourcesUpdate.model_validate(
            {"resources_id": "-", "version": 1, "resources": raw}
        ).resources
    except ValidationError as exc:
        raise _validation_error(exc.errors(include_url=False), prefix=()) from None


# --- errors -----------------------------------------------------------------------------------


def _error_response(error: AglError, status_code: int | None = None) -> JSONResponse:
    return JSONResponse({"error": error.to_dict()}, status_code=status_code or error.status_code)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    return path


def _validation_error(errors: list[Any], prefix: tuple[str, ...]) -> AglError:
    """Turn pydantic errors into one InvalidInputError naming the first offending field."""
    first = errors[0]
    loc = tuple(part for part in first.get("loc", ()) if part not in prefix)
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", first.get("msg"))
        return _MalformedBody(f"request body is not valid JSON: {detail}")
    field = _field_path(loc) or None
    value = first.get("input")
    shown = value if isinstance(value, str | int | float | bool) or value is None else None
    message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
    if shown is not None:
        message += f" (got {shown!r})"
    if len(errors) > 1:
        message += f"; and {len(errors) - 1} more error(s)"
    return InvalidInputError(message, field=field, value=shown)


class _MalformedBody(InvalidInputError):
    status_code = 400


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AglError)
    async def agl_error(_: Request, exc: AglError) -> JSONResponse:
        if isinstance(exc, _MalformedBody):
            return JSONResponse(
                {"error": {**exc.to_dict(), "type": "InvalidInputError"}}, status_code=400
            )
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        error = _validation_error(list(exc.errors()), prefix=("body", "query", "path"))
        return await agl_error(_, error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "NotFoundError" if exc.status_code == 404 else "InvalidInputError"
        # exc.headers carries what the status needs (Allow, on a 405)
        return JSONResponse(
            {"error": {"type": kind, "message": str(exc.detail)}},
            status_code=exc.status_code,
            headers=exc.headers,
        )


# --- middleware (plain ASGI, so they also guard bodies streamed without a length) --------------


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    import json

    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _unauthorized(message: str) -> dict[str, Any]:
    return {"error": {"type": "UnauthorizedError", "message": message}}


class _BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.too_large = {
            "error": {
                "type": "InvalidInputError",
                "message": f"request body is larger than the server's limit of {self.limit} bytes",
                "field": "body",
            }
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = self.too_large
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _send_json(send, 413, too_large)
            return
        received = 0
        exceeded = False
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            # Whatever the app answers to a body it could not finish reading (FastAPI turns
            # the error into a 400), the client is told the real reason: 413.
            nonlocal response_started
            if exceeded:
                if not response_started:
                    response_started = True
                    await _send_json(send, 413, too_large)
                return
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyTooLarge:
            if not response_started:
                response_started = True
                await _send_json(send, 413, too_large)


class _UnexpectedErrorMiddleware:
    """Answer the server's own failures with a JSON 500, keeping the connection usable.

    Handled here rather than by an ``Exception`` handler, which Starlette runs in its outermost
    layer and then re-raises, so uvicorn drops the keep-alive connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response_started = False

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except _BodyTooLarge:
            raise
        except ClientDisconnect:
            logger.debug("client went away during %s %s", scope.get("method"), scope["path"])
        except Exception as exc:
            logger.exception("store server failed on %s %s", scope.get("method"), scope["path"])
            if response_started:
                raise
            body = {"type": "StoreError", "message": f"internal error ({type(exc).__name__})"}
            await _send_json(send, 500, {"error": body})


class _BodyTooLarge(Exception):
    pass
