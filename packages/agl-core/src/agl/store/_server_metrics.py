"""The store server's metric routes: the rows a run logs, and the runs that logged some."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from agl._ids import Id
from agl._metric_rows import MetricsPage
from agl.store._base import Store
from agl.store._engine import MAX_PAGE_SIZE
from agl.store._server_bodies import MetricsBody, RunsBody
from agl.store._server_params import LimitParam, OffsetParam

__all__ = ["metrics_router"]


def metrics_router(store: Store) -> APIRouter:
    """The training metrics: added by the trainer, read by whoever draws the curves."""
    router = APIRouter()

    @router.post("/v1/metrics", tags=["metrics"], status_code=204)
    async def add_metrics(body: MetricsBody) -> None:
        await store.add_metrics(body.rows, request_id=body.request_id)

    @router.get("/v1/metrics", tags=["metrics"])
    async def query_metrics(
        run: Annotated[Id | None, Query()] = None,
        limit: LimitParam = MAX_PAGE_SIZE,
        offset: OffsetParam = 0,
    ) -> MetricsPage:
        return await store.query_metrics(run, limit, offset)

    @router.get("/v1/metrics/runs", tags=["metrics"])
    async def metric_runs() -> RunsBody:
        return RunsBody(runs=await store.metric_runs())

    return router
