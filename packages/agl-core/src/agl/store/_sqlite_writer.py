"""The SQLite store's writer: one thread that owns the connection and group-commits.

Operations that queue up while a commit is under way are committed together; one that fails
rolls back alone (:meth:`Writer._run_batch` says how). Callers hear of their writes only once the
commit is on disk, all of a batch's callers on one event loop at once: one wake-up of that loop
per commit, not one per caller. See :mod:`agl.store._sqlite` for what that buys.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from agl._errors import StoreError
from agl.store._full import full_disk_error, sqlite_detail, sqlite_disk_full
from agl.store._tx import Transaction

__all__ = ["Writer"]

T = TypeVar("T")


@dataclass(slots=True)
class _Job(Generic[T]):
    """An operation and the future on its caller's event loop that hears how it went."""

    operation: Callable[[Transaction], T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]


_Outcome = tuple[_Job[Any], Any, BaseException | None]
"""A job, its result, and the error it failed with (None: it succeeded)."""


class Writer(threading.Thread):
    """The thread that owns the connection and group-commits queued operations.

    ``path`` (the database file) lets a failure on a full disk be told apart from others: the
    callers then get a retryable :class:`~agl.StoreFullError` (:mod:`agl.store._full`).
    """

    def __init__(
        self, connection: sqlite3.Connection, tx: Transaction, path: Path | None = None
    ) -> None:
        super().__init__(name="agl-sqlite-store", daemon=True)
        self._db = connection
        self._tx = tx
        self._path = path
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()

    def submit(self, operation: Callable[[Transaction], T]) -> asyncio.Future[T]:
        """Queue ``operation``; the future (of the running event loop) gets its result once
        it is committed. Cancelling the future before the operation runs skips it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(operation, loop, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def run(self) -> None:
        stopping = False
        while not stopping:
            batch = [self._jobs.get()]
            while True:  # take whatever else is already waiting: one commit for all of it
                try:
                    batch.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            if None in batch:
                stopping = True
            jobs = [job for job in batch if job is not None]
            try:
                if jobs:
                    self._run_batch(jobs)
            except BaseException as exc:  # the writer outlives any failure; nobody waits forever
                self._abandon(jobs, exc)
        self._db.close()

    def _abandon(self, jobs: list[_Job[Any]], exc: BaseException) -> None:
        """The transaction broke outside any operation (a savepoint or rollback failed, say
        on an I/O error): undo what is left of it and fail every caller not yet answered
        (none was told its write succeeded: answers come only after the commit)."""
        with contextlib.suppress(sqlite3.Error):
            self._rollback()
        doing = "SQLite store write failed, nothing of it was kept"
        failure = self._failure(exc, doing)
        if failure is exc:
            failure = StoreError(f"{doing}: {exc}")
        _settle([(job, None, failure) for job in jobs])

    def _rollback(self) -> None:
        # Some errors (a full disk, an I/O error) have already rolled the transaction back.
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def _run_batch(self, jobs: list[_Job[Any]]) -> None:
        """Run queued operations in one transaction and commit once.

        They run first without savepoints (two statements fewer each); only if one of them
        fails is the transaction rolled back and the batch run again with each operation in a
        savepoint of its own, so the failing one rolls back alone. Operations are functions of
        the transaction, so running one again after a rollback is running it once.
        """
        live = [job for job in jobs if not job.future.cancelled()]
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            failure = self._failure(exc, "SQLite store could not start a write")
            _settle([(job, None, failure) for job in live])
            return
        outcomes: list[_Outcome] = []
        for job in live:
            try:
                outcomes.append((job, job.operation(self._tx), None))
            except BaseException as exc:
                self._rollback()
                if len(live) == 1:  # nothing to keep: the caller gets the error
                    _settle([(job, None, self._failure(exc))])
                    return
                self._db.execute("BEGIN IMMEDIATE")  # again, each operation in a savepoint
                outcomes = self._run_savepoints(live)
                break
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):  # an I/O error may have rolled it back
                self._rollback()
            failure = self._failure(exc, "SQLite store could not commit")
            _settle([(job, None, failure) for job, _, _ in outcomes])
            return
        _settle(outcomes)  # only now, with the commit on disk, do callers learn of success

    def _run_savepoints(self, jobs: list[_Job[Any]]) -> list[_Outcome]:
        """Run ``jobs`` in the open transaction, each in a savepoint of its own."""
        outcomes: list[_Outcome] = []
        for job in jobs:
            self._db.execute("SAVEPOINT op")
            try:
                result = job.operation(self._tx)
            except BaseException as exc:  # the caller gets it; the batch goes on
                self._db.execute("ROLLBACK TO op")
                self._db.execute("RELEASE op")
                outcomes.append((job, None, self._failure(exc)))
            else:
                self._db.execute("RELEASE op")
                outcomes.append((job, result, None))
        return outcomes

    def _failure(self, exc: BaseException, doing: str = "SQLite error") -> BaseException:
        """What the caller is told of ``exc``: a full disk as such, another SQLite error as a
        :class:`~agl.StoreError` saying what failed, anything else as it is."""
        if sqlite_disk_full(exc, self._path):
            where = str(self._path) if self._path is not None else "the database"
            return full_disk_error(f"sqlite:///{where}", where, sqlite_detail(exc))
        if isinstance(exc, sqlite3.Error):
            return StoreError(f"{doing}: {exc}")
        return exc


def _settle(outcomes: list[_Outcome]) -> None:
    """Tell each job's caller how it went: one call into each event loop for all of its jobs."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, mine in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop closed: nobody is waiting there
            loop.call_soon_threadsafe(_resolve, mine)


def _resolve(outcomes: list[_Outcome]) -> None:
    """In the caller's event loop: set each future not cancelled meanwhile."""
    for job, result, error in outcomes:
        if job.future.done():
            continue
        if error is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(error)
