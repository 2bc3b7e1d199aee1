"""The store server's resource routes: publish, fetch one or the latest, page the history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from agl._ids import SegmentId
from agl._resources import ResourcesPage, ResourcesUpdate
from agl.store._base import Store
from agl.store._server_bodies import ResourcesBody
from agl.store._server_params import (
    LimitParam,
    OffsetParam,
    parse_resources,
    refuse_unstorable_body,
)

__all__ = ["resources_router"]


def resources_router(store: Store) -> APIRouter:
    """``/v1/resources``: ``POST`` publishes; ``GET`` pages newest first; ``latest`` or an id."""
    router = APIRouter()

    @router.post("/v1/resources", tags=["resources"])
    async def add_resources(body: ResourcesBody) -> ResourcesUpdate:
        refuse_unstorable_body(body)
        parsed = parse_resources({k: v.model_dump() for k, v in body.resources.items()})
        return await store.add_resources(parsed, body.resources_id)

    @router.get("/v1/resources", tags=["resources"])
    async def query_resources(limit: LimitParam = 100, offset: OffsetParam = 0) -> ResourcesPage:
        return await store.query_resources(limit, offset)

    # Before ``/{resources_id}``, which would take "latest" for an id.
    @router.get("/v1/resources/latest", tags=["resources"])
    async def latest_resources() -> ResourcesUpdate | None:
        return await store.get_resources(None)

    @router.get("/v1/resources/{resources_id}", tags=["resources"])
    async def get_resources(
        resources_id: Annotated[SegmentId, Path()],
    ) -> ResourcesUpdate | None:
        return await store.get_resources(resources_id)

    return router
