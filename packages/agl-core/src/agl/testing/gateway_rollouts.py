"""Run a framework's agent as one rollout through agl's gateway, and check how it was recorded.

For adapter tests beyond the conformance suite: a job gets the rollout's gateway URL (point
the framework's model client at it), runs inside ``tracer.rollout(...)``, and the rollout's
spans come back once the gateway's records are in the store::

    async def job(base_url: str) -> None:
        await my_framework.Agent(model=OpenAIModel(base_url=base_url)).run("hi")

    rollout_id, spans = await run_through_gateway(job, store, tracer, gateway, reward=1.0)
    calls = joined_calls(spans)
    assert [call.agent for call in calls.calls] == ["writer"]
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import agl
from agl import semconv
from agl._rollouts import AttemptStatus, RolloutRequest
from agl.lightning import AttemptCalls, extract_calls

if TYPE_CHECKING:
    from agl.gateway._serve import GatewayServer

__all__ = ["joined_calls", "run_through_gateway", "spans_of_type"]

Job = Callable[[str], Awaitable[Any]]
"""``job(base_url)``: the agent's work, with its model client pointed at ``base_url``."""


async def run_through_gateway(
    job: Job,
    store: agl.Store,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    *,
    reward: float | None = None,
    group_id: str = "g",
) -> tuple[str, list[agl.Span]]:
    """Run ``job`` as one succeeded rollout whose calls go through ``gateway``.

    Args:
        job: Gets the rollout's gateway URL; runs inside ``tracer.rollout(...)``.
        store / tracer / gateway: Where the rollout is queued, traced and served.
        reward: Emitted after the job, if given.
        group_id: The rollout's ``group_id`` metadata (rollouts of one group share a baseline).

    Returns:
        The rollout's id and its spans, the gateway's records included.
    """
    [rollout] = await store.enqueue_rollouts(
        [RolloutRequest(input="task", metadata={"group_id": group_id})]
    )
    [claim] = await store.dequeue_rollouts(limit=1)
    rollout_id, attempt_id = rollout.rollout_id, claim.attempt.attempt_id
    async with tracer.rollout(rollout_id, attempt_id):
        await job(gateway.rollout_url(rollout_id, attempt_id))
        if reward is not None:
            agl.emit_reward(reward)
    await store.update_attempt(rollout_id, attempt_id, status=AttemptStatus.SUCCEEDED)
    if gateway.gateway is None:
        raise AssertionError("the gateway is not running")
    if not await asyncio.to_thread(gateway.gateway.sender.flush, 10):
        raise AssertionError("the gateway's records did not reach the store within 10 s")
    return rollout_id, await store.query_spans(rollout_id)


def joined_calls(spans: list[agl.Span]) -> AttemptCalls:
    """The attempt's calls, checked to be joined with the gateway's records on response ids.

    Raises:
        AssertionError: a call is not the gateway's, in order; a call has no token ids; or a
            call was joined by order, or stands on one side only (``extract_calls``' counts).
    """
    gateway_ids = [
        s.attributes[semconv.GEN_AI_RESPONSE_ID]
        for s in spans
        if s.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_GATEWAY
    ]
    calls = extract_calls(spans)
    found = [call.response_id for call in calls.calls]
    if found != gateway_ids:
        raise AssertionError(f"calls {found} are not the gateway's {gateway_ids}")
    if not all(call.has_tokens for call in calls.calls):
        raise AssertionError("a call has no token ids")
    if set(calls.counts.values()) - {0}:
        raise AssertionError(f"calls joined by order or on one side only: {dict(calls.counts)}")
    return calls


def spans_of_type(spans: list[agl.Span], kind: str) -> list[agl.Span]:
    """The spans whose ``agl.span.type`` is ``kind`` (``semconv.SPAN_TYPE_...``), in order."""
    return [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == kind]
