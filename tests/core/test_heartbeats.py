"""A runner's heartbeats: the interval follows the shortest limit, a refused beat cancels."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agl import AttemptStatus, RolloutConfig, RolloutRequest
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
    beats = Heartbeats(store, None, RunnerStats(), lambda task: None)
    assert beats.interval() == IDLE_INTERVAL
    tasks = []
    try:
        for claim in await claims(store, None, 6.0, 1.5):
            tasks.append(asyncio.create_task(asyncio.sleep(60)))
            beats.add(tasks[-1], claim)
        assert beats.interval() == pytest.approx(0.5)
        beats.discard(tasks[-1])
        assert beats.interval() == pytest.approx(2.0)
        fixed = Heartbeats(store, 0.25, RunnerStats(), lambda task: None)
        assert fixed.interval() == 0.25
    finally:
        for task in tasks:
            task.cancel()


async def test_a_beat_the_store_refuses_marks_its_attempt_and_others_go_on() -> None:
    store = MemoryStore()
    [kept, ended] = await claims(store, None, None)
    tasks = {asyncio.create_task(asyncio.sleep(60)): claim for claim in (kept, ended)}
    await store.cancel_rollout(ended.rollout.rollout_id)
    [before] = await store.query_attempts(kept.rollout.rollout_id)
    stale: list[asyncio.Task[None]] = []
    beats = Heartbeats(store, 0.05, RunnerStats(), stale.append)
    for task, claim in tasks.items():
        beats.add(task, claim)
    beats.start()
    try:
        for _ in range(500):
            if stale:
                break
            await asyncio.sleep(0.01)
    finally:
        await asyncio.to_thread(beats.close)
        for task in tasks:
            task.cancel()
    assert [tasks[task].rollout.rollout_id for task in set(stale)] == [ended.rollout.rollout_id]
    assert list(beats.attempts().values()) == [kept]  # no more beats for the ended one
    [attempt] = await store.query_attempts(kept.rollout.rollout_id)
    assert attempt.last_heartbeat_time is not None
    assert before.last_heartbeat_time is None or (
        attempt.last_heartbeat_time > before.last_heartbeat_time
    )


async def test_beats_go_on_while_the_runners_loop_is_blocked_and_end_with_close() -> None:
    store = MemoryStore()
    [claim] = await claims(store, 0.6)
    beats = Heartbeats(store, None, RunnerStats(), lambda task: None)
    task = asyncio.create_task(asyncio.sleep(60))
    beats.start()
    beats.add(task, claim)
    try:
        time.sleep(2.0)  # noqa: ASYNC251 - the loop is held: only the heartbeat thread can beat
        [attempt] = await store.query_attempts(claim.rollout.rollout_id)
        assert attempt.status == AttemptStatus.PREPARING  # not unresponsive: 2 s > 0.6 s
        assert attempt.last_heartbeat_time is not None
        assert time.time() - attempt.last_heartbeat_time < 0.6
    finally:
        await asyncio.to_thread(beats.close)
        task.cancel()
    assert not [t for t in threading.enumerate() if t.name == "agl-heartbeats"]
