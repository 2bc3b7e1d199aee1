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
from pathlib import Path

import pytest

import agl
from agl import AttemptStatus, RolloutConfig, RolloutRequest, RolloutStatus, Runner
from agl.store import StoreServer
from agl.store._memory import MemoryStore
from agl.testing.processes import Processes, runner_summary, write_agent

pytestmark = pytest.mark.anyio

UNRESPONSIVE = 2.0
BLOCK = 3.0  # longer than unresponsive_seconds, let alone a third of it


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "sqlite", "http"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """None: a MemoryStore object shared with the runner; else the URL the runner opens."""
    if request.param == "memory":
        yield None
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
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


BLOCKING_AGENT = f"""
import time

import agl


@agl.rollout
async def agent(task: int) -> float:
    time.sleep({BLOCK})  # holds the runner's event loop
    return 1.0
"""


async def test_an_agl_runner_process_keeps_blocking_agents_alive_and_says_who_blocked(
    tmp_path: Path, processes: Processes
) -> None:
    agent = write_agent(tmp_path, "blocking_agent", BLOCKING_AGENT)
    with StoreServer("memory://") as server:
        async with agl.open_store(server.url) as store:
            config = RolloutConfig(unresponsive_seconds=UNRESPONSIVE)
            rollouts = await store.enqueue_rollouts(
                [RolloutRequest(input=i, config=config) for i in range(4)]
            )
            runner = processes.runner(
                "runner-1", server.url, agent, "--concurrency", "2", "--max-rollouts", "4"
            )
            assert await asyncio.to_thread(runner.exit_code, 120) == 0, runner.log()
            counts = runner_summary(runner)
            for rollout in rollouts:
                attempts = await store.query_attempts(rollout.rollout_id)
                assert [(a.sequence, a.status) for a in attempts] == [
                    (1, AttemptStatus.SUCCEEDED)
                ], (attempts, runner.log())
    assert (counts["succeeded"], counts["abandoned"]) == (4, 0), runner.log()
    lines = [line for line in runner.log().splitlines() if "held the runner's event loop" in line]
    assert 2 <= len(lines) <= 4, runner.log()  # one a stretch: two agents at a time, or one
    for rollout in rollouts:
        assert sum(rollout.rollout_id in line for line in lines) == 1, runner.log()
    assert all("WARNING agl._run._runner: agent 'agent' (rollouts: ro-" in line for line in lines)
    assert all("blocking_agent.py:9 in agent" in line for line in lines), lines
