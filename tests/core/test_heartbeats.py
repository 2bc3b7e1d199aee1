"""A runner's heartbeats: the interval follows the shortest limit, a refused beat cancels."""

from __future__ import annotations

import asyncio

import pytest

from agl import RolloutConfig, RolloutRequest
from agl._heartbeats import IDLE_INTERVAL, Heartbeats
from agl._rollouts import Claim
from agl._runner_stats import RunnerStats
from agl.store._memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def claims(store: MemoryStore, *limits: float | None) -> list[Claim]:
    await store.enqueue_rollouts(
        [
            RolloutRequest(input=i, config=RolloutConfig(unresponsive_seconds=s))
            for i, s in enumerate(limits)
        ]
    )
    return await store.dequeue_rollouts(limit=len(limits), worker_id="w")


async def test_the_interval_is_a_third_of_the_shortest_limit_or_the_idle_one() -> None:
    store = MemoryStore()
    running: dict[asyncio.Task[None], Claim] = {}
    beats = Heartbeats(store, running, None, RunnerStats(), lambda task: None)
    assert beats.interval() == IDLE_INTERVAL
    try:
        for claim in await claims(store, None, 6.0, 1.5):
            running[asyncio.create_task(asyncio.sleep(60))] = claim
        assert beats.interval() == pytest.approx(0.5)
        fixed = Heartbeats(store, running, 0.25, RunnerStats(), lambda task: None)
        assert fixed.interval() == 0.25
    finally:
        for task in running:
            task.cancel()


async def test_a_beat_the_store_refuses_marks_its_attempt_and_others_go_on() -> None:
    store = MemoryStore()
    [kept, ended] = await claims(store, None, None)
    tasks = {asyncio.create_task(asyncio.sleep(60)): claim for claim in (kept, ended)}
    await store.cancel_rollout(ended.rollout.rollout_id)
    [before] = await store.query_attempts(kept.rollout.rollout_id)
    stale: list[asyncio.Task[None]] = []
    beats = Heartbeats(store, tasks, 0.05, RunnerStats(), stale.append)
    beating = asyncio.create_task(beats.run())
    try:
        for _ in range(200):
            if stale:
                break
            await asyncio.sleep(0.01)
    finally:
        beating.cancel()
        for task in tasks:
            task.cancel()
    assert [tasks[task].rollout.rollout_id for task in set(stale)] == [ended.rollout.rollout_id]
    [attempt] = await store.query_attempts(kept.rollout.rollout_id)
    assert attempt.last_heartbeat_time is not None
    assert before.last_heartbeat_time is None or (
        attempt.last_heartbeat_time > before.last_heartbeat_time
    )
