"""Stopping a runner strands nothing: every claim it will not run goes back to the queue.

A graceful stop (SIGINT/SIGTERM, :meth:`agl.Runner.stop`) stops claiming, lets running
attempts finish within the drain, and releases every other claim it holds, the ones it never
started included: a released attempt does not use up a try, so another runner runs the rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agl
from agl import AttemptStatus, RolloutConfig, RolloutRequest, RolloutStatus, Runner
from agl.store._memory import MemoryStore
from agl.store._serve import StoreServer
from agl.testing.postgres import PostgresServer
from agl.testing.processes import (
    Processes,
    child_env,
    runner_summary,
    wait_until,
    write_agent,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class StopsWhileClaiming(MemoryStore):
    """A store whose dequeue answers after the runner was told to stop (a signal arriving
    while the claim was on its way)."""

    runner: Runner | None = None

    async def dequeue_rollouts(
        self,
        limit: int = 1,
        worker_id: str | None = None,
        wait: float = 0.0,
        *,
        request_id: str | None = None,
    ) -> list[agl.Claim]:
        claims = await super().dequeue_rollouts(limit, worker_id, wait, request_id=request_id)
        if claims and self.runner is not None:
            self.runner.stop()
            await asyncio.sleep(0.05)  # the stop request reaches the runner's loop
        return claims


async def test_claims_answered_after_a_stop_are_released_not_stranded() -> None:
    store = StopsWhileClaiming()
    started: list[int] = []

    @agl.rollout
    async def agent(task: int) -> float:
        started.append(task)
        return 1.0

    rollouts = await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(5)])
    the_runner = Runner(agent, store, concurrency=5, handle_signals=False, poll_wait=0.2)
    store.runner = the_runner
    stats = await asyncio.wait_for(the_runner.run(), 10)
    assert started == []
    assert (stats.claimed, stats.released, stats.succeeded) == (5, 5, 0)
    for rollout in rollouts:
        [attempt] = await store.query_attempts(rollout.rollout_id)
        assert attempt.status == AttemptStatus.RELEASED, attempt
        assert attempt.reason == "the runner stopped before the attempt started"
        assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.REQUEUING


async def test_a_stop_without_drain_releases_claims_not_yet_started() -> None:
    store = MemoryStore()

    @agl.rollout
    async def agent(task: int) -> float:
        await asyncio.sleep(30)
        return 1.0

    rollouts = await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(4)])
    the_runner = Runner(agent, store, concurrency=4, handle_signals=False, poll_wait=0.2)

    original = store.dequeue_rollouts

    async def dequeue(
        limit: int = 1, worker_id: str | None = None, wait: float = 0.0, **kwargs: Any
    ) -> Any:
        claims = await original(limit, worker_id, wait, **kwargs)
        if claims:
            the_runner.stop(drain=False)
            await asyncio.sleep(0.05)  # the stop request reaches the runner's loop
        return claims

    store.dequeue_rollouts = dequeue  # type: ignore[method-assign]
    stats = await asyncio.wait_for(the_runner.run(), 10)
    assert (stats.claimed, stats.released) == (4, 4)
    for rollout in rollouts:
        [attempt] = await store.query_attempts(rollout.rollout_id)
        assert attempt.status == AttemptStatus.RELEASED, attempt


class SlowToRecordOutcomes(MemoryStore):
    """A store that takes a moment before it records an attempt's outcome, and tells the runner
    to stop (releasing at once) as the first outcome comes in."""

    runner: Runner | None = None

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> agl.Attempt:
        if status == AttemptStatus.SUCCEEDED and self.runner is not None:
            self.runner.stop(drain=False)
            self.runner.stop(drain=False)
            await asyncio.sleep(0.1)  # the stop reaches the runner while this report is on its way
        return await super().update_attempt(rollout_id, attempt_id, status, heartbeat, reason)


async def test_a_stop_lets_an_outcome_already_on_its_way_reach_the_store() -> None:
    store = SlowToRecordOutcomes()

    @agl.rollout
    async def agent(task: int) -> float:
        return 1.0

    [rollout] = await store.enqueue_rollouts([RolloutRequest(input=1)])
    the_runner = Runner(agent, store, concurrency=1, handle_signals=False, poll_wait=0.2)
    store.runner = the_runner
    stats = await asyncio.wait_for(the_runner.run(), 10)
    [attempt] = await store.query_attempts(rollout.rollout_id)
    assert attempt.status == AttemptStatus.SUCCEEDED, attempt
    assert (stats.succeeded, stats.released) == (1, 0)


class RefusesABeatAsTheOutcomeComesIn(MemoryStore):
    """A store whose heartbeat refusal (the attempt has ended) reaches the runner while the
    runner's own report of that outcome is on its way: the race a fresh-clone CI run hit (the
    store held 4 succeeded attempts, the runner counted 3)."""

    runner: Runner | None = None

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> agl.Attempt:
        if status == AttemptStatus.SUCCEEDED and self.runner is not None:
            self.runner._abandon_attempt(attempt_id)  # as the heartbeat thread would
            await asyncio.sleep(0.1)
        return await super().update_attempt(rollout_id, attempt_id, status, heartbeat, reason)


async def test_a_refused_beat_does_not_cancel_an_outcome_on_its_way() -> None:
    store = RefusesABeatAsTheOutcomeComesIn()

    @agl.rollout
    async def agent(task: int) -> float:
        return 1.0

    [rollout] = await store.enqueue_rollouts([RolloutRequest(input=1)])
    the_runner = Runner(
        agent, store, concurrency=1, handle_signals=False, poll_wait=0.2, max_rollouts=1
    )
    store.runner = the_runner
    stats = await asyncio.wait_for(the_runner.run(), 10)
    [attempt] = await store.query_attempts(rollout.rollout_id)
    assert attempt.status == AttemptStatus.SUCCEEDED, attempt
    assert (stats.succeeded, stats.abandoned) == (1, 0)


# --- `agl runner` processes, SIGTERM mid-run --------------------------------------------------

SHORT_AGENT = """
    import asyncio
    from pathlib import Path

    import agl


    @agl.rollout
    async def agent(task, attempt):
        (Path(__file__).parent / f"ran-{attempt.attempt_id}").touch()
        await asyncio.sleep(0.2)
        return 1.0
"""


def attempts_that_ran(directory: Path) -> set[str]:
    """The attempts whose agent started (SHORT_AGENT leaves a file for each)."""
    return {path.name.removeprefix("ran-") for path in directory.glob("ran-*")}


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path) as started:
        yield started


@contextlib.contextmanager
def database(kind: str, directory: Path) -> Iterator[str]:
    """The URL of a fresh database of ``kind``: a SQLite file, or a PostgreSQL database."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'agl.db'}"
        return
    with PostgresServer() as postgres:
        yield postgres.create_database("sigterm")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_sigterm_mid_run_strands_no_claim_and_fails_no_rollout(
    tmp_path: Path, children: Processes, kind: str
) -> None:
    """The issue-48 repro: one runner (concurrency 16) over a full queue of 0.2 s rollouts,
    SIGTERM while it claims, three rounds; then another runner runs what they released."""
    agent = write_agent(tmp_path, "short_agent", SHORT_AGENT)
    with database(kind, tmp_path) as db, StoreServer(db) as server:
        async with agl.open_store(server.url) as store:
            requests = [RolloutRequest(input=i, config=RolloutConfig()) for i in range(200)]
            ids = [rollout.rollout_id for rollout in await store.enqueue_rollouts(requests)]

            async def succeeded() -> int:
                page = await store.query_rollouts(status=RolloutStatus.SUCCEEDED, limit=1)
                return page.total

            released = 0
            for round_ in range(3):
                before = await succeeded()
                runner = children.runner(
                    f"runner-{round_}", server.url, agent, "--concurrency", "16"
                )

                async def ran_a_while(before: int = before) -> bool:
                    return await succeeded() >= before + 24

                await children.until(ran_a_while, "the runner to run some rollouts", 60, runner)
                runner.process.send_signal(signal.SIGTERM)
                assert runner.exit_code(60) == 0, runner.log()
                counts = runner_summary(runner)
                assert (counts["failed"], counts["timed_out"], counts["abandoned"]) == (0, 0, 0)
                released += counts["released"]
                # Nothing it claimed is left preparing or running: each ran or was released.
                for status in (RolloutStatus.PREPARING, RolloutStatus.RUNNING):
                    page = await store.query_rollouts(status=status, limit=1)
                    assert page.total == 0, (status, page.rollouts, runner.log())

            last = children.runner("runner-last", server.url, agent, "--concurrency", "16")

            async def all_succeeded() -> bool:
                return await succeeded() == len(ids)

            await children.until(all_succeeded, "every rollout to succeed", 120, last)
            last.process.send_signal(signal.SIGTERM)
            assert last.exit_code(60) == 0, last.log()

            ran = attempts_that_ran(tmp_path)
            total_released = 0
            for rollout_id in ids:
                attempts = await store.query_attempts(rollout_id)
                *earlier, final = attempts
                assert final.status == AttemptStatus.SUCCEEDED, attempts
                assert final.attempt_id in ran
                assert all(a.status == AttemptStatus.RELEASED for a in earlier), attempts
                total_released += len(earlier)
            assert total_released == released


# --- a Trainer's runner processes, Ctrl-C -----------------------------------------------------

TRAIN_SCRIPT = """
    import sys

    import agl
    from short_agent import agent

    if __name__ == "__main__":
        trainer = agl.Trainer(
            n_runners=int(sys.argv[2]), concurrency=8, run_dir=sys.argv[1], console=False,
            progress=False, plot=False,
        )
        trainer.dev(agent, list(range(400)))
"""


def start_trainer(directory: Path, n_runners: int) -> subprocess.Popen[bytes]:
    """Start TRAIN_SCRIPT in ``directory`` in a process group of its own, as a terminal's
    foreground job is, logging to ``train.log``."""
    write_agent(directory, "short_agent", SHORT_AGENT)
    (directory / "train.py").write_text(textwrap.dedent(TRAIN_SCRIPT))
    with (directory / "train.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "train.py", str(directory / "run"), str(n_runners)],
            cwd=directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(),
            start_new_session=True,
        )


@pytest.mark.parametrize("n_runners", [1, 2], ids=["in-process", "processes"])
async def test_ctrl_c_on_a_trainer_releases_what_its_runners_hold(
    tmp_path: Path, n_runners: int
) -> None:
    """Ctrl-C in a terminal signals the trainer and its runner processes (one process group):
    what they claimed either finishes or goes back to the queue, nothing is left preparing."""
    trainer = start_trainer(tmp_path, n_runners)
    try:

        def some_ran() -> bool:
            return len(attempts_that_ran(tmp_path)) >= 32 or trainer.poll() is not None

        await wait_until(some_ran, "the runners to run some rollouts", 120)
        assert trainer.poll() is None, (tmp_path / "train.log").read_text()
        os.killpg(trainer.pid, signal.SIGINT)
        trainer.wait(timeout=60)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait(timeout=30)

    ran = attempts_that_ran(tmp_path)
    log = (tmp_path / "train.log").read_text()
    async with agl.open_store(f"sqlite:///{tmp_path / 'run' / 'store.db'}") as store:
        page = await store.query_rollouts(limit=1000)
        assert page.total == 400, log
        statuses = {rollout.status for rollout in page.rollouts}
        assert statuses <= {
            RolloutStatus.SUCCEEDED,
            RolloutStatus.QUEUING,
            RolloutStatus.REQUEUING,
        }, (statuses, log)
        for rollout in page.rollouts:
            for attempt in await store.query_attempts(rollout.rollout_id):
                ok = (AttemptStatus.SUCCEEDED, AttemptStatus.RELEASED)
                assert attempt.status in ok, (attempt, log)
                if attempt.status == AttemptStatus.SUCCEEDED:
                    assert attempt.attempt_id in ran
        # It stopped mid-run (what the runners held finished in their drain, or was released).
        assert RolloutStatus.QUEUING in statuses, log
