"""The store server's span routes: a batch in (the store's bulk traffic), a rollout's out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from agl._ids import SegmentId
from agl.store._base import Store
from agl.store._checks import SPAN_PAGE_SIZE
from agl.store._engine import MAX_OFFSET
from agl.store._server_bodies import SequenceIdsBody, SpansBody, SpansPage
from agl.store._server_params import RolloutIdParam, parse_body
from agl.store._server_plain import add_plain_route, json_response

__all__ = ["spans_router"]


def spans_router(store: Store) -> APIRouter:
    """``POST /v1/spans`` and ``GET /v1/rollouts/{id}/spans`` (paged by ``sequence_id``).

    The batch route's body schema is named by reference only: whoever mounts the router adds
    ``SpansBody`` to the OpenAPI document's schemas.
    """
    router = APIRouter()

    async def add_spans(request: Request) -> Response:
        # Parsed by hand: validating the raw bytes in one pass is several times faster than
        # FastAPI's decode-then-validate, and span batches are the store's bulk traffic.
        body = parse_body(SpansBody, await request.body())
        ids = await store.add_spans(body.spans)
        return json_response(SequenceIdsBody(sequence_ids=ids))

    add_plain_route(
        router,
        "/v1/spans",
        add_spans,
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
    )

    @router.get("/v1/rollouts/{rollout_id}/spans", tags=["spans"])
    async def query_spans(
        rollout_id: RolloutIdParam,
        attempt_id: Annotated[SegmentId | None, Query()] = None,
        after: Annotated[
            int, Query(ge=0, le=MAX_OFFSET, description="Spans with a sequence_id above this.")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=SPAN_PAGE_SIZE)] = SPAN_PAGE_SIZE,
    ) -> SpansPage:
        spans = await store.query_spans(rollout_id, attempt_id, after=after, limit=limit)
        last = spans[-1].sequence_id if len(spans) == limit else None
        return SpansPage(spans=spans, next_after=last)

    return router
