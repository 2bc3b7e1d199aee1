"""The SQLite store's writer: one thread that owns the connection and group-commits.

Operations that queue up while a commit is under way are committed together, each inside its
own savepoint so one failing operation rolls back alone; callers hear of their writes only once
the commit is on disk. See :mod:`agl.store._sqlite` for what that buys.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from agl._errors import StoreError
from agl.store._full import full_disk_error, sqlite_detail, sqlite_disk_full
from agl.store._tx import Transaction

__all__ = ["Writer"]

T = TypeVar("T")


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
        self._jobs: queue.SimpleQueue[tuple[Callable[[Transaction], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )

    def submit(self, operation: Callable[[Transaction], T]) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put((operation, future))
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
                if len(jobs) == 1:
                    self._run_alone(*jobs[0])
                elif jobs:
                    self._run_batch(jobs)
            except BaseException as exc:  # the writer outlives any failure; nobody waits forever
                self._abandon(jobs, exc)
        self._db.close()

    def _abandon(
        self, jobs: list[tuple[Callable[[Transaction], Any], Future[Any]]], exc: BaseException
    ) -> None:
        """The transaction broke outside any operation (a savepoint or rollback failed, say
        on an I/O error): undo what is left of it and fail every caller not yet answered
        (none was told its write succeeded: answers come only after the commit)."""
        with contextlib.suppress(sqlite3.Error):
            self._rollback()
        doing = "SQLite store write failed, nothing of it was kept"
        failure = self._failure(exc, doing)
        if failure is exc:
            failure = StoreError(f"{doing}: {exc}")
        for _, future in jobs:
            if not future.done():
                future.set_exception(failure)

    def _run_alone(self, operation: Callable[[Transaction], Any], future: Future[Any]) -> None:
        """Run one operation that nothing else is waiting beside, in a transaction of its own.

        The same as a batch of one, without the savepoint (the whole transaction rolls back
        instead): two statements fewer for the common case of one request at a time.
        """
        if not future.set_running_or_notify_cancel():
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            future.set_exception(self._failure(exc, "SQLite store could not start a write"))
            return
        try:
            result = operation(self._tx)
        except BaseException as exc:  # the caller gets it
            self._rollback()
            future.set_exception(self._failure(exc))
            return
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):  # an I/O error may have rolled it back
                self._rollback()
            future.set_exception(self._failure(exc, "SQLite store could not commit"))
            return
        future.set_result(result)  # only now, with the commit on disk

    def _rollback(self) -> None:
        # Some errors (a full disk, an I/O error) have already rolled the transaction back.
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def _run_batch(self, jobs: list[tuple[Callable[[Transaction], Any], Future[Any]]]) -> None:
        outcomes: list[tuple[Future[Any], Any, BaseException | None]] = []
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for _, future in jobs:
                future.set_exception(self._failure(exc, "SQLite store could not start a write"))
            return
        for operation, future in jobs:
            if not future.set_running_or_notify_cancel():
                continue
            self._db.execute("SAVEPOINT op")
            try:
                result = operation(self._tx)
            except BaseException as exc:  # the caller gets it; the batch goes on
                self._db.execute("ROLLBACK TO op")
                self._db.execute("RELEASE op")
                outcomes.append((future, None, self._failure(exc)))
            else:
                self._db.execute("RELEASE op")
                outcomes.append((future, result, None))
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):  # an I/O error may have rolled it back
                self._rollback()
            failure = self._failure(exc, "SQLite store could not commit")
            for future, _, _ in outcomes:
                future.set_exception(failure)
            return
        # Only now, with the commit on disk, do callers learn their writes succeeded.
        for future, result, error in outcomes:
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

    def _failure(self, exc: BaseException, doing: str = "SQLite error") -> BaseException:
        """What the caller is told of ``exc``: a full disk as such, another SQLite error as a
        :class:`~agl.StoreError` saying what failed, anything else as it is."""
        if sqlite_disk_full(exc, self._path):
            where = str(self._path) if self._path is not None else "the database"
            return full_disk_error(f"sqlite:///{where}", where, sqlite_detail(exc))
        if isinstance(exc, sqlite3.Error):
            return StoreError(f"{doing}: {exc}")
        return exc
