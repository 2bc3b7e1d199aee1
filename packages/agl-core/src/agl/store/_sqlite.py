"""``sqlite:///path/to.db``: the embedded default store, persistent and durable.

The database runs in WAL mode with ``synchronous=FULL``: when a call returns, what it wrote is
on disk and survives a crash of the process (``kill -9``) or of the machine. One thread owns the
connection and runs operations in order; operations that queue up while a commit is under way
are committed together (group commit), each inside its own savepoint so one failing operation
rolls back alone. Many concurrent writers therefore share fsyncs instead of waiting in line for
one each.

Several processes may open the same file: writes take SQLite's write lock
(``BEGIN IMMEDIATE``), and long polls re-check the file every ``poll_interval`` seconds.

URL options (query string): ``synchronous`` (``full``, the default, or ``normal``: survives
a process crash but not a power cut), ``poll_interval`` (seconds, default 0.1) and
``busy_timeout`` (seconds, default 30).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from agl._errors import InvalidInputError, StoreError
from agl._resources import ResourcesUpdate
from agl._rollouts import Attempt, Rollout, RolloutMode, RolloutStatus, Worker
from agl._spans import Span
from agl.store._stateful import StatefulStore
from agl.store._tx import (
    SpanKey,
    Transaction,
    span_ids_by_attempt,
    span_row,
    spans_of_rows,
    worker_seen,
)

__all__ = ["SQLiteStore"]

T = TypeVar("T")

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rollout_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    mode TEXT NOT NULL,
    queue_pos INTEGER,
    next_span_seq INTEGER NOT NULL DEFAULT 1,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rollouts_queue ON rollouts (queue_pos) WHERE queue_pos IS NOT NULL;
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts (status, seq);
CREATE TABLE IF NOT EXISTS attempts (
    rollout_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    deadline REAL,
    data TEXT NOT NULL,
    PRIMARY KEY (rollout_id, attempt_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS attempts_deadline ON attempts (deadline) WHERE deadline IS NOT NULL;
CREATE TABLE IF NOT EXISTS spans (
    rollout_id TEXT NOT NULL,
    sequence_id INTEGER NOT NULL,
    attempt_id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (rollout_id, sequence_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS spans_identity
    ON spans (rollout_id, attempt_id, span_id, trace_id);
CREATE TABLE IF NOT EXISTS resources (
    version INTEGER PRIMARY KEY,
    resources_id TEXT NOT NULL UNIQUE,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (worker_id TEXT PRIMARY KEY, data TEXT NOT NULL);
"""


class _SQLiteTransaction:
    """The store's reads and writes as SQL over one connection."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.db = connection

    # rollouts
    def rollout_get(self, rollout_id: str) -> Rollout | None:
        row = self.db.execute(
            "SELECT data FROM rollouts WHERE rollout_id = ?", (rollout_id,)
        ).fetchone()
        return None if row is None else Rollout.model_validate_json(row[0])

    def rollouts_get_many(self, rollout_ids: Iterable[str]) -> dict[str, Rollout]:
        found: dict[str, Rollout] = {}
        for chunk in _chunks(list(rollout_ids), 500):
            rows = self.db.execute(
                f"SELECT data FROM rollouts WHERE rollout_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for (data,) in rows:
                rollout = Rollout.model_validate_json(data)
                found[rollout.rollout_id] = rollout
        return found

    def rollout_insert(self, rollout: Rollout) -> None:
        self.db.execute(
            "INSERT INTO rollouts (rollout_id, status, mode, queue_pos, data) VALUES (?, ?, ?, "
            "CASE WHEN ? THEN (SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM rollouts) END, ?)",
            (
                rollout.rollout_id,
                rollout.status.value,
                rollout.mode,
                rollout.status.is_claimable,
                rollout.model_dump_json(),
            ),
        )

    def rollout_update(self, rollout: Rollout) -> None:
        # A rollout that becomes claimable again joins the back of the queue.
        self.db.execute(
            "UPDATE rollouts SET status = ?, data = ?, queue_pos = CASE "
            "WHEN NOT ? THEN NULL "
            "WHEN queue_pos IS NOT NULL THEN queue_pos "
            "ELSE (SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM rollouts) END "
            "WHERE rollout_id = ?",
            (
                rollout.status.value,
                rollout.model_dump_json(),
                rollout.status.is_claimable,
                rollout.rollout_id,
            ),
        )

    def rollouts_claimable(self, limit: int) -> list[Rollout]:
        rows = self.db.execute(
            "SELECT data FROM rollouts WHERE queue_pos IS NOT NULL ORDER BY queue_pos LIMIT ?",
            (limit,),
        ).fetchall()
        return [Rollout.model_validate_json(row[0]) for row in rows]

    def rollouts_query(
        self,
        statuses: Sequence[RolloutStatus] | None,
        mode: RolloutMode | None,
        limit: int,
        offset: int,
    ) -> tuple[list[Rollout], int]:
        where: list[str] = []
        params: list[str | int] = []
        if statuses is not None:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            params.extend(status.value for status in statuses)
            if not statuses:
                where[-1] = "0"
        if mode is not None:
            where.append("mode = ?")
            params.append(mode)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        (total,) = self.db.execute(f"SELECT COUNT(*) FROM rollouts {clause}", params).fetchone()
        rows = self.db.execute(
            f"SELECT data FROM rollouts {clause} ORDER BY seq LIMIT ? OFFSET ?",
            [*params, limit, offset],
        ).fetchall()
        return [Rollout.model_validate_json(row[0]) for row in rows], int(total)

    # attempts
    def attempt_get(self, rollout_id: str, attempt_id: str) -> Attempt | None:
        row = self.db.execute(
            "SELECT data FROM attempts WHERE rollout_id = ? AND attempt_id = ?",
            (rollout_id, attempt_id),
        ).fetchone()
        return None if row is None else Attempt.model_validate_json(row[0])

    def attempts_get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Attempt]:
        wanted = set(keys)
        found: dict[tuple[str, str], Attempt] = {}
        for chunk in _chunks(sorted({rollout_id for rollout_id, _ in wanted}), 500):
            rows = self.db.execute(
                "SELECT rollout_id, attempt_id, data FROM attempts "
                f"WHERE rollout_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for rollout_id, attempt_id, data in rows:
                if (rollout_id, attempt_id) in wanted:
                    found[(rollout_id, attempt_id)] = Attempt.model_validate_json(data)
        return found

    def attempt_upsert(self, attempt: Attempt, deadline: float | None) -> None:
        self.attempts_upsert_many([(attempt, deadline)])

    def attempts_upsert_many(self, items: Sequence[tuple[Attempt, float | None]]) -> None:
        self.db.executemany(
            "INSERT INTO attempts (rollout_id, attempt_id, sequence, deadline, data) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (rollout_id, attempt_id) DO UPDATE SET "
            "deadline = excluded.deadline, data = excluded.data",
            [
                (a.rollout_id, a.attempt_id, a.sequence, deadline, a.model_dump_json())
                for a, deadline in items
            ],
        )

    def attempts_of(self, rollout_id: str) -> list[Attempt]:
        rows = self.db.execute(
            "SELECT data FROM attempts WHERE rollout_id = ? ORDER BY sequence", (rollout_id,)
        ).fetchall()
        return [Attempt.model_validate_json(row[0]) for row in rows]

    def attempts_due(self, now: float) -> list[Attempt]:
        rows = self.db.execute(
            "SELECT data FROM attempts WHERE deadline IS NOT NULL AND deadline <= ?", (now,)
        ).fetchall()
        return [Attempt.model_validate_json(row[0]) for row in rows]

    # spans
    def spans_existing(self, keys: Iterable[SpanKey]) -> dict[SpanKey, int]:
        # One indexed query per attempt in the batch (row-value IN lists are not index lookups).
        wanted = span_ids_by_attempt(keys)
        found: dict[SpanKey, int] = {}
        for (rollout_id, attempt_id), span_ids in wanted.items():
            for chunk in _chunks(list(span_ids), 500):
                rows = self.db.execute(
                    "SELECT trace_id, span_id, sequence_id FROM spans WHERE rollout_id = ? "
                    f"AND attempt_id = ? AND span_id IN ({','.join('?' * len(chunk))})",
                    (rollout_id, attempt_id, *chunk),
                )
                for trace_id, span_id, sequence_id in rows:
                    found[(rollout_id, attempt_id, trace_id, span_id)] = int(sequence_id)
        return found

    def spans_reserve(self, counts: dict[str, int]) -> dict[str, int]:
        first = {}
        for rollout_id, count in counts.items():
            (next_id,) = self.db.execute(
                "UPDATE rollouts SET next_span_seq = next_span_seq + ? WHERE rollout_id = ? "
                "RETURNING next_span_seq - ?",
                (count, rollout_id, count),
            ).fetchone()
            first[rollout_id] = int(next_id)
        return first

    def spans_insert(self, spans: Sequence[tuple[Span, int]]) -> None:
        self.db.executemany(
            "INSERT INTO spans (rollout_id, sequence_id, attempt_id, trace_id, span_id, data) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [span_row(span, sequence_id) for span, sequence_id in spans],
        )

    def spans_query(self, rollout_id: str, attempt_id: str | None) -> list[Span]:
        if attempt_id is None:
            rows = self.db.execute(
                "SELECT data FROM spans WHERE rollout_id = ? ORDER BY sequence_id", (rollout_id,)
            ).fetchall()
        else:
            rows = self.db.execute(
                "SELECT data FROM spans WHERE rollout_id = ? AND attempt_id = ? "
                "ORDER BY sequence_id",
                (rollout_id, attempt_id),
            ).fetchall()
        return spans_of_rows(row[0] for row in rows)

    # resources
    def resources_get(self, resources_id: str) -> ResourcesUpdate | None:
        row = self.db.execute(
            "SELECT data FROM resources WHERE resources_id = ?", (resources_id,)
        ).fetchone()
        return None if row is None else ResourcesUpdate.model_validate_json(row[0])

    def resources_latest(self) -> ResourcesUpdate | None:
        row = self.db.execute("SELECT data FROM resources ORDER BY version DESC LIMIT 1").fetchone()
        return None if row is None else ResourcesUpdate.model_validate_json(row[0])

    def resources_insert(self, update: ResourcesUpdate) -> None:
        self.db.execute(
            "INSERT INTO resources (version, resources_id, data) VALUES (?, ?, ?)",
            (update.version, update.resources_id, update.model_dump_json()),
        )

    # workers
    def worker_seen(self, worker_id: str, now: float, claimed: int | None) -> None:
        row = self.db.execute(
            "SELECT data FROM workers WHERE worker_id = ?", (worker_id,)
        ).fetchone()
        known = None if row is None else Worker.model_validate_json(row[0])
        worker = worker_seen(known, worker_id, now, claimed)
        self.db.execute(
            "INSERT INTO workers (worker_id, data) VALUES (?, ?) "
            "ON CONFLICT (worker_id) DO UPDATE SET data = excluded.data",
            (worker.worker_id, worker.model_dump_json()),
        )

    def workers_all(self) -> list[Worker]:
        rows = self.db.execute("SELECT data FROM workers ORDER BY worker_id").fetchall()
        return [Worker.model_validate_json(row[0]) for row in rows]

    def counts(self) -> dict[str, int]:
        counts = {
            f"rollouts.{status}": int(count)
            for status, count in self.db.execute(
                "SELECT status, COUNT(*) FROM rollouts GROUP BY status"
            )
        }
        for table in ("attempts", "spans", "resources", "workers"):
            (counts[table],) = self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        return counts


def _chunks(items: list[T], size: int) -> list[list[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


class _Writer(threading.Thread):
    """The thread that owns the connection and group-commits queued operations."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        super().__init__(name="agl-sqlite-store", daemon=True)
        self._db = connection
        self._tx = _SQLiteTransaction(connection)
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
        failure = StoreError(f"SQLite store write failed, nothing of it was kept: {exc}")
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
            future.set_exception(StoreError(f"SQLite store could not start a write: {exc}"))
            return
        try:
            result = operation(self._tx)
        except BaseException as exc:  # the caller gets it
            self._rollback()
            future.set_exception(_as_store_error(exc))
            return
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):  # an I/O error may have rolled it back
                self._rollback()
            future.set_exception(StoreError(f"SQLite store could not commit: {exc}"))
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
                future.set_exception(StoreError(f"SQLite store could not start a write: {exc}"))
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
                outcomes.append((future, None, _as_store_error(exc)))
            else:
                self._db.execute("RELEASE op")
                outcomes.append((future, result, None))
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):  # an I/O error may have rolled it back
                self._rollback()
            failure = StoreError(f"SQLite store could not commit: {exc}")
            for future, _, _ in outcomes:
                future.set_exception(failure)
            return
        # Only now, with the commit on disk, do callers learn their writes succeeded.
        for future, result, error in outcomes:
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)


def _as_store_error(exc: BaseException) -> BaseException:
    if isinstance(exc, sqlite3.Error):
        return StoreError(f"SQLite error: {exc}")
    return exc


class SQLiteStore(StatefulStore):
    """A store in one SQLite file. See the module docstring for durability and options."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        poll_interval: float = 0.1,
        busy_timeout: float = 30.0,
        url: str | None = None,
    ) -> None:
        path = Path(path)
        super().__init__(url or f"sqlite:///{path}", poll_interval=poll_interval)
        if synchronous.lower() not in ("full", "normal", "extra"):
            raise InvalidInputError(
                f"synchronous must be 'full', 'normal' or 'extra', got {synchronous!r}",
                field="synchronous",
                value=synchronous,
            )
        if not path.parent.exists():
            raise InvalidInputError(
                f"cannot create the SQLite store {str(path)!r}: folder "
                f"{str(path.parent)!r} does not exist",
                field="path",
                value=str(path),
            )
        connection = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
        )
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            connection.execute("PRAGMA foreign_keys = ON")
            with connection:
                connection.executescript(_SCHEMA)
                row = connection.execute(
                    "SELECT value FROM meta WHERE key = 'schema_version'"
                ).fetchone()
                if row is None:
                    connection.execute(
                        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                elif int(row[0]) != SCHEMA_VERSION:
                    raise StoreError(
                        f"{str(path)!r} holds an agl store of schema version {row[0]}; "
                        f"this agl reads version {SCHEMA_VERSION}"
                    )
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise InvalidInputError(
                f"{str(path)!r} is not a usable SQLite database: {exc}",
                field="path",
                value=str(path),
            ) from exc
        except BaseException:
            connection.close()
            raise
        self.path = path
        self._writer = _Writer(connection)
        self._writer.start()

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Open ``sqlite:///relative/or/absolute/path.db?synchronous=full``."""
        parts = urlsplit(url)
        raw_path = parts.path
        if parts.netloc not in ("", "localhost"):
            raise InvalidInputError(
                f"SQLite store URL {url!r} names a host; write sqlite:///path/to.db",
                field="url",
                value=url,
            )
        # As in SQLAlchemy: sqlite:///runs/agl.db is relative, sqlite:////data/agl.db absolute.
        raw_path = raw_path[1:]
        if not raw_path or raw_path.endswith("/"):
            raise InvalidInputError(
                f"SQLite store URL {url!r} has no file path; write sqlite:///path/to.db",
                field="url",
                value=url,
            )
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        unknown = set(options) - {"synchronous", "poll_interval", "busy_timeout"}
        if unknown:
            raise InvalidInputError(
                f"unknown SQLite store option(s) {sorted(unknown)}; expected synchronous, "
                "poll_interval or busy_timeout",
                field="url",
                value=url,
            )
        try:
            poll = float(options.get("poll_interval", 0.1))
            busy = float(options.get("busy_timeout", 30.0))
        except ValueError as exc:
            raise InvalidInputError(
                f"SQLite store URL {url!r}: {exc}", field="url", value=url
            ) from None
        return cls(
            raw_path,
            synchronous=options.get("synchronous", "full"),
            poll_interval=poll,
            busy_timeout=busy,
            url=url,
        )

    async def _run(self, operation: Callable[[Transaction], T]) -> T:
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed")
        return await asyncio.wrap_future(self._writer.submit(operation))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.stop()
            await asyncio.to_thread(self._writer.join)
