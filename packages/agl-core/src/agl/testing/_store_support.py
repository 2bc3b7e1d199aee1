"""What the store conformance suite's parts share: claiming, making spans, waiting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import agl
from agl import RolloutRequest, RolloutStatus, Span, Store

__all__ = ["claim_rollouts", "make_span", "status_is", "wait_until"]


async def claim_rollouts(store: Store, *requests: RolloutRequest) -> list[agl.Claim]:
    """Enqueue requests (default: one) and claim them all."""
    requests = requests or (RolloutRequest(input={"task": 1}),)
    await store.enqueue_rollouts(list(requests))
    return await store.dequeue_rollouts(limit=len(requests), worker_id="suite-worker")


def make_span(claim: agl.Claim, name: str = "step", **fields: Any) -> Span:
    """A span of ``claim``'s attempt named ``name``, with ``fields`` set."""
    return Span.create(
        rollout_id=claim.rollout.rollout_id,
        attempt_id=claim.attempt.attempt_id,
        name=name,
        **fields,
    )


async def wait_until(
    check: Callable[[], Awaitable[bool]], timeout: float = 5.0, interval: float = 0.05
) -> None:
    """Wait until ``check`` holds (for conditions the store reaches on its own clock)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


async def status_is(store: Store, rollout_id: str, status: RolloutStatus) -> bool:
    """Whether the rollout ``rollout_id`` is in ``status`` now."""
    return (await store.get_rollout(rollout_id)).status == status
