"""The SQLite store's writer thread: an operation that fails halfway leaves nothing behind.

Operations queued together share one commit, each in a savepoint; one that runs alone has a
transaction of its own. Either way a failure rolls back that operation's writes and no other's,
and its caller gets the error.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agl import RolloutRequest
from agl.store import _engine as engine
from agl.store._tx import Transaction
from agl.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio


class HalfwayError(Exception):
    pass


def enqueue(name: str) -> Callable[[Transaction], str]:
    def operation(tx: Transaction) -> str:
        [rollout] = engine.enqueue(tx, [RolloutRequest(input=name)], time.time())
        return rollout.rollout_id

    return operation


def enqueue_then_fail(tx: Transaction) -> None:
    engine.enqueue(tx, [RolloutRequest(input="half")], time.time())
    raise HalfwayError("failed after writing")


async def stored_inputs(store: SQLiteStore) -> list[str]:
    page = await store.query_rollouts(limit=100)
    return sorted(str(rollout.input) for rollout in page.rollouts)


async def test_an_operation_alone_that_fails_halfway_writes_nothing(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "store.db") as store:
        with pytest.raises(HalfwayError):
            await store._run(enqueue_then_fail)
        assert await stored_inputs(store) == []
        await store._run(enqueue("after"))  # the writer goes on
        assert await stored_inputs(store) == ["after"]


async def test_a_failure_in_a_batch_rolls_back_only_its_own_writes(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "store.db") as store:
        # Hold the writer busy so that the next three operations queue up as one batch.
        started, release = threading.Event(), threading.Event()

        def hold(_: Transaction) -> None:
            started.set()
            release.wait(10)

        held = asyncio.ensure_future(store._run(hold))
        await asyncio.to_thread(started.wait, 10)
        queued = [
            asyncio.ensure_future(store._run(enqueue("before"))),
            asyncio.ensure_future(store._run(enqueue_then_fail)),
            asyncio.ensure_future(store._run(enqueue("after"))),
        ]
        await asyncio.sleep(0.05)
        release.set()
        await held
        before, failed, after = await asyncio.gather(*queued, return_exceptions=True)
        assert isinstance(failed, HalfwayError)
        assert isinstance(before, str)
        assert isinstance(after, str)
        assert await stored_inputs(store) == ["after", "before"]
