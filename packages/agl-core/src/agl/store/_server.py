"""The store over HTTP: a FastAPI app in front of any store, as ``agl store serve`` runs it.

Routes (JSON unless noted; the OpenAPI spec is at ``/openapi.json``, docs at ``/docs``):

==========================================================  ====================================
``POST /v1/rollouts/enqueue``                               enqueue a batch of rollout requests
``POST /v1/rollouts/dequeue``                               claim rollouts (long poll: ``wait``)
``POST /v1/rollouts/wait``                                  wait for rollouts to finish
``GET  /v1/rollouts``                                       query (``status``, ``mode``,
                                                            ``search``, ``worker_id``,
                                                            ``since``, ``until``,
                                                            ``order=oldest|newest``, paging)
``GET  /v1/rollouts/{id}``                                  one rollout
``POST /v1/rollouts/{id}/cancel``                           cancel a rollout
``GET  /v1/rollouts/{id}/attempts``                         a rollout's attempts
``POST /v1/rollouts/{id}/attempts/{attempt_id}``            report status / heartbeat
``POST /v1/spans``                                          add a batch of spans
``GET  /v1/rollouts/{id}/spans``                            a rollout's spans (``attempt_id``)
``POST /v1/resources`` / ``GET /v1/resources/latest|{id}``  publish / fetch resources
``GET  /v1/resources``                                      resource history, newest first
``POST /v1/metrics`` / ``GET /v1/metrics``                  add / page training metrics (``run``)
``GET  /v1/metrics/runs``                                   the runs that logged metrics
``GET  /v1/workers``, ``GET /v1/statistics``, ``GET /health``
``POST /v1/traces``                                         OTLP/HTTP trace export (protobuf/JSON)
==========================================================  ====================================

Every error is a JSON body ``{"error": {"type", "message", "field", "value"}}`` with a 4xx status
for the client's mistakes (400 malformed body, 401 missing token, 404 unknown id, 409 conflict,
413 body too large, 422 invalid field), 503 with ``Retry-After`` when the store cannot serve now
(its database unreachable, its disk full: retry later), and 500 only for the server's own
failures, without a traceback (:mod:`agl.store._server_errors`). With a token, every request
must carry ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from agl._metric_rows import MetricsPage
from agl._resources import ResourcesPage, ResourcesUpdate
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Rollout,
    RolloutMode,
    RolloutPage,
    RolloutStatus,
)
from agl._server_auth import BearerTokenMiddleware
from agl.store._base import Store, StoreStatistics
from agl.store._checks import SPAN_PAGE_SIZE
from agl.store._engine import MAX_OFFSET, MAX_PAGE_SIZE, MAX_SEARCH_LENGTH
from agl.store._server_bodies import (
    AttemptsBody,
    AttemptUpdateBody,
    ClaimsBody,
    DequeueBody,
    EnqueueBody,
    ErrorBody,
    MetricsBody,
    ResourcesBody,
    RolloutsBody,
    RunsBody,
    SequenceIdsBody,
    SpansBody,
    SpansPage,
    WaitBody,
    WorkersBody,
)
from agl.store._server_errors import (
    BodyLimitMiddleware,
    MalformedBody,
    UnexpectedErrorMiddleware,
    install_error_handlers,
    unauthorized,
    validation_error,
)
from agl.store._server_otlp import add_otlp_route
from agl.store._storable import refuse_unstorable

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024

_JSON = "application/json"


_Limit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
_Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


# --- the app ----------------------------------------------------------------------------------


def create_app(
    store: Store,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    close_store: bool = False,
    dashboard: bool = True,
) -> FastAPI:
    """Build the HTTP app serving ``store``.

    Args:
        store: The store to serve; any backend.
        token: If set, every request needs ``Authorization: Bearer <token>`` (except the
            dashboard's page and assets, which hold no data).
        max_body_bytes: Larger request bodies get 413.
        close_store: Close ``store`` when the app shuts down.
        dashboard: Serve the dashboard (:mod:`agl.dashboard`) at ``/``.
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
        responses={
            "4XX": {"model": ErrorBody},
            "503": {"model": ErrorBody, "description": "Cannot serve now; retry after Retry-After"},
        },
    )
    install_error_handlers(app)

    @app.get("/health", tags=["meta"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/rollouts/enqueue", tags=["rollouts"])
    async def enqueue(body: EnqueueBody) -> RolloutsBody:
        _refuse_unstorable(body)
        return RolloutsBody(rollouts=await store.enqueue_rollouts(body.requests))

    @app.post("/v1/rollouts/dequeue", tags=["rollouts"])
    async def dequeue(body: DequeueBody, request: Request) -> ClaimsBody:
        claims = await store.dequeue_rollouts(
            body.limit, body.worker_id, body.wait, request_id=body.request_id
        )
        if claims and await request.is_disconnected():
            # The worker hung up during its long poll: nobody would run these. Put them back.
            for claim in claims:
                await store.update_attempt(
                    claim.rollout.rollout_id,
                    claim.attempt.attempt_id,
                    status=AttemptStatus.RELEASED,
                    reason="the worker's connection closed before its claim was answered",
                )
            return ClaimsBody(claims=[])
        return ClaimsBody(claims=claims)

    @app.post("/v1/rollouts/wait", tags=["rollouts"])
    async def wait(body: WaitBody) -> RolloutsBody:
        return RolloutsBody(rollouts=await store.wait_for_rollouts(body.rollout_ids, body.timeout))

    @app.get("/v1/rollouts", tags=["rollouts"])
    async def query_rollouts(
        status: Annotated[list[RolloutStatus] | None, Query()] = None,
        mode: RolloutMode | None = None,
        limit: _Limit = 100,
        offset: _Offset = 0,
        search: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=MAX_SEARCH_LENGTH,
                description="Text the rollout id contains (case-sensitive, taken literally).",
            ),
        ] = None,
        worker_id: Annotated[
            str | None,
            Query(min_length=1, description="A worker that ran one of the rollout's attempts."),
        ] = None,
        since: Annotated[
            float | None, Query(allow_inf_nan=False, description="Enqueued at or after (Unix s).")
        ] = None,
        until: Annotated[
            float | None, Query(allow_inf_nan=False, description="Enqueued before (Unix s).")
        ] = None,
        order: Literal["oldest", "newest"] = "oldest",
    ) -> RolloutPage:
        return await store.query_rollouts(
            status,
            mode,
            limit,
            offset,
            search=search,
            worker_id=worker_id,
            since=since,
            until=until,
            newest_first=order == "newest",
        )

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
    async def query_spans(
        rollout_id: str,
        attempt_id: str | None = None,
        after: Annotated[
            int, Query(ge=0, le=MAX_OFFSET, description="Spans with a sequence_id above this.")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=SPAN_PAGE_SIZE)] = SPAN_PAGE_SIZE,
    ) -> SpansPage:
        spans = await store.query_spans(rollout_id, attempt_id, after=after, limit=limit)
        last = spans[-1].sequence_id if len(spans) == limit else None
        return SpansPage(spans=spans, next_after=last)

    @app.post("/v1/resources", tags=["resources"])
    async def add_resources(body: ResourcesBody) -> ResourcesUpdate:
        _refuse_unstorable(body)
        parsed = _parse_resources({k: v.model_dump() for k, v in body.resources.items()})
        return await store.add_resources(parsed, body.resources_id)

    @app.get("/v1/resources", tags=["resources"])
    async def query_resources(limit: _Limit = 100, offset: _Offset = 0) -> ResourcesPage:
        return await store.query_resources(limit, offset)

    @app.get("/v1/resources/latest", tags=["resources"])
    async def latest_resources() -> ResourcesUpdate | None:
        return await store.get_resources(None)

    @app.get("/v1/resources/{resources_id}", tags=["resources"])
    async def get_resources(resources_id: str) -> ResourcesUpdate | None:
        return await store.get_resources(resources_id)

    _add_metrics_routes(app, store)

    @app.get("/v1/workers", tags=["meta"])
    async def workers() -> WorkersBody:
        return WorkersBody(workers=await store.query_workers())

    @app.get("/v1/statistics", tags=["meta"])
    async def statistics() -> StoreStatistics:
        return await store.statistics()

    add_otlp_route(app, store, max_body_bytes)
    _finish(app, store, token=token, max_body_bytes=max_body_bytes, dashboard=dashboard)
    _document(app, SpansBody)  # the span route's body, which no route model names
    return app


def _document(app: FastAPI, *models: type[BaseModel]) -> None:
    """Add ``models`` to the OpenAPI document's schemas (once, when it is first built)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = build()["components"]["schemas"]
            for model in models:
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, sub in schema.pop("$defs", {}).items():
                    schemas.setdefault(name, sub)
                schemas.setdefault(model.__name__, schema)
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]


def _finish(
    app: FastAPI, store: Store, *, token: str | None, max_body_bytes: int, dashboard: bool
) -> None:
    """Add the dashboard (its page public, its data behind the token) and the middlewares."""
    public: tuple[str, ...] = ()
    if dashboard:
        from agl.dashboard import PUBLIC_PATHS, mount_dashboard

        mount_dashboard(app, store)
        public = PUBLIC_PATHS
    app.add_middleware(UnexpectedErrorMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes)
    if token:
        app.add_middleware(BearerTokenMiddleware, token=token, refusal=unauthorized, public=public)


def _add_metrics_routes(app: FastAPI, store: Store) -> None:
    """The training metrics: added by the trainer, read by whoever draws the curves."""

    @app.post("/v1/metrics", tags=["metrics"], status_code=204)
    async def add_metrics(body: MetricsBody) -> None:
        await store.add_metrics(body.rows, request_id=body.request_id)

    @app.get("/v1/metrics", tags=["metrics"])
    async def query_metrics(
        run: Annotated[str | None, Query(min_length=1)] = None,
        limit: _Limit = MAX_PAGE_SIZE,
        offset: _Offset = 0,
    ) -> MetricsPage:
        return await store.query_metrics(run, limit, offset)

    @app.get("/v1/metrics/runs", tags=["metrics"])
    async def metric_runs() -> RunsBody:
        return RunsBody(runs=await store.metric_runs())


class _PlainRoute(APIRoute):
    """A route whose endpoint takes the request and returns the response, as in Starlette.

    FastAPI documents it from the route's declaration as usual but serves it without its
    per-request machinery (dependency solving, response-model validation and encoding): about
    a quarter of the server's time for a single-span request.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint


def _refuse_unstorable(body: BaseModel) -> None:
    """A 400 naming the first field no store can keep as it is (:mod:`agl.store._storable`)."""
    refuse_unstorable(body.model_dump(mode="python", exclude_defaults=True), "", MalformedBody)


def _parse(model: type[M], raw: bytes) -> M:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False), prefix=()) from None


def _parse_resources(raw: dict[str, Any]) -> dict[str, Any]:
    try:
        return ResourcesUpdate.model_validate(
            {"resources_id": "-", "version": 1, "resources": raw}
        ).resources
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False), prefix=()) from None
