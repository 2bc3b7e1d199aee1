"""An agent that blocks the runner's event loop (issue 48, item 2).

Its attempts are not declared unresponsive: heartbeats go out from a thread of their own. The
runner says once which agent held its loop, for how long and where.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest

import agl
from agl import AttemptStatus, RolloutConfig, RolloutRequest, RolloutStatus, Runner
from agl.store import StoreServer
from agl.store._memory import MemoryStore

pytestmark = pytest.mark.anyio

UNRESPONSIVE = 2.0
BLOCK = 3.0  # longer than unresponsive_seconds, let alone a third of it


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "http"])
def store_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: a MemoryStore object shared with the runner; else a store server's URL."""
    if request.param == "memory":
        yield None
        return
    with StoreServer("memory://") as server:
        yield server.url


def agl_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("agl-")}


async def test_an_agent_blocking_its_loop_is_never_declared_unresponsive(
    store_url: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    @agl.rollout
    async def blocker(task: int) -> float:
        time.sleep(BLOCK)  # noqa: ASYNC251 - what a sync client built or called inside an async agent does
        return 1.0

    before = agl_threads()
    store: agl.Store = MemoryStore() if store_url is None else agl.open_store(store_url)
    config = RolloutConfig(unresponsive_seconds=UNRESPONSIVE)
    rollouts = await store.enqueue_rollouts(
        [RolloutRequest(input=i, config=config) for i in range(2)]
    )
    runner = Runner(
        blocker,
        store if store_url is None else store_url,
        concurrency=2,
        max_rollouts=2,
        handle_signals=False,
        poll_wait=0.2,
    )
    with caplog.at_level(logging.WARNING, logger="agl"):
        stats = await asyncio.wait_for(runner.run(), 60)
    try:
        assert (stats.succeeded, stats.abandoned, stats.failed) == (2, 0, 0), stats
        for rollout in rollouts:
            attempts = await store.query_attempts(rollout.rollout_id)
            assert [(a.sequence, a.status) for a in attempts] == [(1, AttemptStatus.SUCCEEDED)]
            assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.SUCCEEDED
    finally:
        await store.close()

    blocked = [
        r.getMessage() for r in caplog.records if "held the runner's event loop" in r.message
    ]
    # one line a stretch: both agents blocked in one (an in-process store), or one each
    assert 1 <= len(blocked) <= 2, blocked
    for rollout in rollouts:
        assert sum(rollout.rollout_id in line for line in blocked) == 1, blocked
    for line in blocked:
        assert line.startswith("agent 'blocker' (rollouts: ro-"), line
        assert "test_blocking_agent.py" in line  # where the loop was held
        held = float(line.split("for about ")[1].split(" s")[0])
        assert held >= BLOCK - 0.5, line
    assert agl_threads() <= before  # the heartbeat and watch threads ended with the runner
