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

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from agl._serving._server_auth import BearerTokenMiddleware
from agl.store._base import Store
from agl.store._server_bodies import ErrorBody, SpansBody
from agl.store._server_errors import (
    BodyLimitMiddleware,
    UnexpectedErrorMiddleware,
    install_error_handlers,
    unauthorized,
)
from agl.store._server_meta import meta_router
from agl.store._server_metrics import metrics_router
from agl.store._server_otlp import otlp_router
from agl.store._server_resources import resources_router
from agl.store._server_rollouts import rollouts_router
from agl.store._server_spans import spans_router

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


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
    app.include_router(meta_router(store))
    app.include_router(rollouts_router(store))
    app.include_router(spans_router(store))
    app.include_router(resources_router(store))
    app.include_router(metrics_router(store))
    app.include_router(otlp_router(store, max_body_bytes))
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
