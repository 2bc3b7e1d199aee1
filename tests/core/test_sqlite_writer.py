"""The SQLite store's writer thread: an operation that fails halfway leaves nothing behind.

Operations queued together share one commit, each in a savepoint; one that runs alone has a
transaction of its own. Either way a failure rolls back that operation's writes and no other's,
and its caller gets the error.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agl import RolloutRequest, StoreError
from agl.store import _engine as engine
from agl.store._sqlite import SQLiteStore
from agl.store._tx import Transaction

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
        before, failed, after = await queue_a_batch_behind(
            store, lambda: None, enqueue("before"), enqueue_then_fail, enqueue("after")
        )
        assert isinstance(failed, HalfwayError)
        assert isinstance(before, str)
        assert isinstance(after, str)
        assert await stored_inputs(store) == ["after", "before"]


class FailingConnection:
    """The writer's SQLite connection, with one statement made to fail as an I/O error would:
    ``rolls_back`` says whether SQLite had already rolled the transaction back (as it does on
    some errors) before raising."""

    def __init__(
        self, db: sqlite3.Connection, statement: str, *, rolls_back: bool, skip: int = 0
    ) -> None:
        self.db = db
        self.statement = statement
        self.rolls_back = rolls_back
        self.skip = skip  # occurrences that still succeed
        self.failed = 0

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == self.statement and self.skip:
            self.skip -= 1
        elif sql == self.statement and not self.failed:
            self.failed += 1
            if self.rolls_back:
                self.db.execute("ROLLBACK")
            raise sqlite3.OperationalError("disk I/O error")
        return self.db.execute(sql, *args)

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def close(self) -> None:
        self.db.close()


async def queue_a_batch_behind(
    store: SQLiteStore, broken: Callable[[], None], *operations: Callable[[Transaction], Any]
) -> list[Any]:
    """Run ``operations`` as one batch, ``broken`` applied while the writer is held busy."""
    started, release = threading.Event(), threading.Event()

    def hold(_: Transaction) -> None:
        started.set()
        release.wait(10)

    held = asyncio.ensure_future(store._run(hold))
    await asyncio.to_thread(started.wait, 10)
    queued = [asyncio.ensure_future(store._run(operation)) for operation in operations]
    await asyncio.sleep(0.05)
    broken()
    release.set()
    await held
    return await asyncio.wait_for(asyncio.gather(*queued, return_exceptions=True), 10)


@pytest.mark.parametrize(
    ("statement", "rolls_back", "message"),
    [
        ("SAVEPOINT op", False, "write failed, nothing of it was kept"),
        ("ROLLBACK TO op", True, "write failed, nothing of it was kept"),
        # (the held operation commits first, alone)
        ("COMMIT", True, "could not commit"),
    ],
)
async def test_a_batch_whose_transaction_breaks_fails_its_callers_and_the_writer_goes_on(
    tmp_path: Path, statement: str, rolls_back: bool, message: str
) -> None:
    async with SQLiteStore(tmp_path / "store.db") as store:
        await store._run(enqueue("kept"))
        writer = store._writer

        def break_it() -> None:
            writer._db = FailingConnection(  # type: ignore[assignment]
                writer._db, statement, rolls_back=rolls_back, skip=int(statement == "COMMIT")
            )

        outcomes = await queue_a_batch_behind(
            store, break_it, enqueue("a"), enqueue_then_fail, enqueue("b")
        )
        # every caller heard (nobody waits forever), none was told its write was kept
        assert all(isinstance(outcome, StoreError) for outcome in outcomes), outcomes
        assert message in str(outcomes[0])
        assert await stored_inputs(store) == ["kept"]
        # the writer is alive and writes again
        await store._run(enqueue("later"))
        assert await stored_inputs(store) == ["kept", "later"]
