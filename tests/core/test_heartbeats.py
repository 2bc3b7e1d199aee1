"""A runner's heartbeats: the interval follows the shortest limit, a refused beat cancels."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agl import AttemptStatus, RolloutConfig, RolloutRequest
from agl._rollouts import Claim
from agl._run._heartbeats import IDLE_INTERVAL, Heartbeats
from agl._run._runner_stats import RunnerStats
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
    beats = Heartbeats(store, None, RunnerStats(), lambda attempt_id: None)
    assert beats.interval() == IDLE_INTERVAL
    found = await claims(store, None, 6.0, 1.5)
    for claim in found:
        beats.add(claim)
    assert beats.interval() == pytest.approx(0.5)
    beats.discard(found[-1].attempt.attempt_id)
    assert beats.interval() == pytest.approx(2.0)
    fixed = Heartbeats(store, 0.25, RunnerStats(), lambda attempt_id: None)
    assert fixed.interval() == 0.25


async def test_a_beat_the_store_refuses_marks_its_attempt_and_others_go_on() -> None:
    store = MemoryStore()
    [kept, ended] = await claims(store, None, None)
    await store.cancel_rollout(ended.rollout.rollout_id)
    [before] = await store.query_attempts(kept.rollout.rollout_id)
    stale: list[str] = []
    beats = Heartbeats(store, 0.05, RunnerStats(), stale.append)
    beats.add(kept)
    beats.add(ended)
    beats.start()
    try:
        for _ in range(500):
            if stale:
                break
            await asyncio.sleep(0.01)
    finally:
        await asyncio.to_thread(beats.close)
    assert stale == [ended.attempt.attempt_id]
    assert list(beats.attempts().values()) == [kept]  # no more beats for the ended one
    [attempt] = await store.query_attempts(kept.rollout.rollout_id)
    assert attempt.last_heartbeat_time is not None
    assert before.last_heartbeat_time is None or (
        attempt.last_heartbeat_time > before.last_heartbeat_time
    )


async def test_a_claim_answered_while_the_runners_loop_is_held_is_beaten_for_at_once() -> None:
    store = MemoryStore()
    beats = Heartbeats(store, None, RunnerStats(), lambda attempt_id: None)
    beats.start()
    try:
        claiming = asyncio.ensure_future(beats.dequeue(limit=1, worker_id="w", wait=30))
        await asyncio.sleep(0.2)  # the long poll is waiting on the heartbeat thread
        request = RolloutRequest(input=1, config=RolloutConfig(unresponsive_seconds=0.6))
        enqueue = threading.Thread(target=asyncio.run, args=(store.enqueue_rollouts([request]),))
        enqueue.start()
        time.sleep(2.0)  # noqa: ASYNC251 - the loop is held: only the heartbeat thread works
        enqueue.join()
        [claim] = await claiming
        [attempt] = await store.query_attempts(claim.rollout.rollout_id)
        assert attempt.status == AttemptStatus.PREPARING  # not unresponsive: 2 s > 0.6 s
        assert attempt.last_heartbeat_time is not None
        assert time.time() - attempt.last_heartbeat_time < 0.6
    finally:
        await asyncio.to_thread(beats.close)
    assert not [t for t in threading.enumerate() if t.name == "agl-heartbeats"]
