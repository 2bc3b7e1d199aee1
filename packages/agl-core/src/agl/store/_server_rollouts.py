"""The store server's rollout and attempt routes: the queue, queries and status reports."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from agl._ids import Id
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Rollout,
    RolloutMode,
    RolloutPage,
    RolloutStatus,
)
from agl.store._base import Store
from agl.store._server_bodies import (
    AttemptsBody,
    AttemptUpdateBody,
    ClaimsBody,
    DequeueBody,
    EnqueueBody,
    RolloutsBody,
    WaitBody,
)
from agl.store._server_params import (
    AttemptIdParam,
    LimitParam,
    OffsetParam,
    RolloutIdParam,
    parse_body,
    refuse_unstorable_body,
)
from agl.store._server_plain import add_plain_route, json_response

__all__ = ["rollouts_router"]


def rollouts_router(store: Store) -> APIRouter:
    """``/v1/rollouts``: enqueue, dequeue (long poll), wait, query, cancel, and attempts."""
    router = APIRouter()

    @router.post("/v1/rollouts/enqueue", tags=["rollouts"])
    async def enqueue(body: EnqueueBody) -> RolloutsBody:
        refuse_unstorable_body(body)
        return RolloutsBody(rollouts=await store.enqueue_rollouts(body.requests))

    async def dequeue(body: DequeueBody) -> ClaimsBody:  # pragma: no cover - documents only
        raise NotImplementedError

    async def serve_dequeue(request: Request) -> Response:
        body = parse_body(DequeueBody, await request.body())
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
            claims = []
        return json_response(ClaimsBody(claims=claims))

    add_plain_route(
        router, "/v1/rollouts/dequeue", dequeue, serve_dequeue, methods=["POST"], tags=["rollouts"]
    )

    @router.post("/v1/rollouts/wait", tags=["rollouts"])
    async def wait(body: WaitBody) -> RolloutsBody:
        return RolloutsBody(rollouts=await store.wait_for_rollouts(body.rollout_ids, body.timeout))

    @router.get("/v1/rollouts", tags=["rollouts"])
    async def query_rollouts(
        status: Annotated[list[RolloutStatus] | None, Query()] = None,
        mode: RolloutMode | None = None,
        limit: LimitParam = 100,
        offset: OffsetParam = 0,
        search: Annotated[
            Id | None,
            Query(description="Text the rollout id contains (case-sensitive, taken literally)."),
        ] = None,
        worker_id: Annotated[
            Id | None, Query(description="A worker that ran one of the rollout's attempts.")
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

    @router.get("/v1/rollouts/{rollout_id}", tags=["rollouts"])
    async def get_rollout(rollout_id: RolloutIdParam) -> Rollout:
        return await store.get_rollout(rollout_id)

    @router.post("/v1/rollouts/{rollout_id}/cancel", tags=["rollouts"])
    async def cancel(rollout_id: RolloutIdParam) -> Rollout:
        return await store.cancel_rollout(rollout_id)

    @router.get("/v1/rollouts/{rollout_id}/attempts", tags=["attempts"])
    async def attempts(rollout_id: RolloutIdParam) -> AttemptsBody:
        return AttemptsBody(attempts=await store.query_attempts(rollout_id))

    async def update_attempt(  # pragma: no cover - documents only
        rollout_id: RolloutIdParam, attempt_id: AttemptIdParam, body: AttemptUpdateBody
    ) -> Attempt:
        raise NotImplementedError

    async def serve_update_attempt(request: Request) -> Response:
        body = parse_body(AttemptUpdateBody, await request.body())
        ids = request.path_params  # checked by the store, which names a bad one
        attempt = await store.update_attempt(
            ids["rollout_id"], ids["attempt_id"], body.status, body.heartbeat, body.reason
        )
        return json_response(attempt)

    add_plain_route(
        router,
        "/v1/rollouts/{rollout_id}/attempts/{attempt_id}",
        update_attempt,
        serve_update_attempt,
        methods=["POST"],
        tags=["attempts"],
    )

    return router
