"""The store server's routes about the store itself: health, workers, statistics."""

from __future__ import annotations

from fastapi import APIRouter

from agl.store._base import Store, StoreStatistics
from agl.store._server_bodies import WorkersBody

__all__ = ["meta_router"]


def meta_router(store: Store) -> APIRouter:
    """``GET /health`` (the server answers; it says nothing of the store behind it),
    ``GET /v1/workers`` (the runners the store has seen) and ``GET /v1/statistics``."""
    router = APIRouter()

    @router.get("/health", tags=["meta"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/v1/workers", tags=["meta"])
    async def workers() -> WorkersBody:
        return WorkersBody(workers=await store.query_workers())

    @router.get("/v1/statistics", tags=["meta"])
    async def statistics() -> StoreStatistics:
        return await store.statistics()

    return router
